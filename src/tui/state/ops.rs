//! Optimistic marks: pause/resume/trigger sent but not yet confirmed by a snapshot, and jobs an
//! engine said it started before a row or snapshot shows them running.
//!
//! Owns: the marks and when they are dropped (confirmed by a snapshot, a row arrived, or
//! [`super::PENDING_TIMEOUT_SECS`] passed). Must not touch: the store, the terminal.

use std::collections::{BTreeMap, HashSet};

use chrono::{DateTime, Utc};

use super::PENDING_TIMEOUT_SECS;
use crate::model::{HistoryRow, Trigger};
use crate::snapshot::JobRow;
use crate::snapshot::{PendingOp, Snapshot};

/// An op sent and not yet confirmed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pending {
    /// What was asked.
    pub op: PendingOp,
    /// When it was asked.
    pub since: DateTime<Utc>,
}

/// A pause or resume of many jobs (`P`) in flight: announced as "pausing N job(s)" until no
/// job of it waits for the store any more, then said as what the store confirmed.
#[derive(Debug, Clone, PartialEq)]
pub struct BulkOp {
    /// Pause (true) or resume.
    pub pause: bool,
    /// The jobs it was sent for.
    pub jobs: Vec<String>,
    /// The notice it was announced with.
    pub said: String,
}

/// The optimistic marks.
#[derive(Debug, Default)]
pub struct Optimistic {
    pub(crate) pending: BTreeMap<String, Pending>,
    /// Jobs an engine said it started running, until a row or snapshot catches up.
    pub(crate) started: HashSet<String>,
    /// The `P` in flight, if any.
    pub(crate) bulk: Option<BulkOp>,
}

impl Optimistic {
    /// The pending op for `job`: ours first, then the engine's.
    pub fn op(&self, snap: &Snapshot, job: &str) -> Option<PendingOp> {
        self.pending
            .get(job)
            .map(|p| p.op)
            .or_else(|| snap.pending.get(job).copied())
    }

    /// Mark `job` as waiting for `op`.
    pub fn begin(&mut self, job: String, op: PendingOp, now: DateTime<Utc>) {
        self.pending.insert(job, Pending { op, since: now });
    }

    /// The command for `job` was not sent: no mark.
    pub fn forget(&mut self, job: &str) {
        self.pending.remove(job);
    }

    /// A snapshot arrived: drop the marks it confirms (`job` finds a job in it).
    pub fn on_snapshot<'a>(&mut self, job: impl Fn(&str) -> Option<&'a JobRow>) {
        self.started.clear();
        self.pending.retain(|name, p| match job(name) {
            None => false,
            Some(j) => !match p.op {
                PendingOp::Pausing => j.rt.paused,
                PendingOp::Resuming => !j.rt.paused,
                PendingOp::Triggering => {
                    j.rt.trigger_requested_at.is_some()
                        || j.rt.lease.is_some()
                        || j.rt.last_run_at.is_some_and(|t| t >= p.since)
                }
            },
        });
    }

    /// Marks nobody confirmed in time, removed and returned (for a notice).
    pub fn expire(&mut self, now: DateTime<Utc>) -> Vec<String> {
        let expired: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, p)| (now - p.since).num_seconds() >= PENDING_TIMEOUT_SECS)
            .map(|(n, _)| n.clone())
            .collect();
        for name in &expired {
            self.pending.remove(name);
        }
        expired
    }

    /// Once no job of the `P` in flight waits for the store: its announcement and the words
    /// that replace it (`paused 2 job(s)`, or how many of them the store confirmed).
    pub fn bulk_settled<'a>(
        &mut self,
        job: impl Fn(&str) -> Option<&'a JobRow>,
    ) -> Option<(String, String)> {
        let b = self.bulk.as_ref()?;
        if b.jobs.iter().any(|j| self.pending.contains_key(j)) {
            return None;
        }
        let b = self.bulk.take()?;
        let done = b
            .jobs
            .iter()
            .filter(|n| job(n).is_some_and(|j| j.rt.paused == b.pause))
            .count();
        let verb = if b.pause { "paused" } else { "resumed" };
        let all = b.jobs.len();
        let words = if done == all {
            format!("{verb} {done} job(s)")
        } else {
            format!("{verb} {done} of {all} job(s); the store did not confirm the others")
        };
        Some((b.said, words))
    }

    /// A row arrived: its job is no longer "starting", and a manual row confirms a trigger.
    pub fn on_row(&mut self, row: &HistoryRow) {
        self.started.remove(&row.job);
        if let Some(p) = self.pending.get(&row.job)
            && p.op == PendingOp::Triggering
            && row.trigger == Trigger::Manual
        {
            self.pending.remove(&row.job);
        }
    }
}

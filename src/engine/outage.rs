//! Store outages, in one place: whether the store takes this owner's writes, when claiming
//! stops because it has not for too long, how long to wait before trying again, which errors
//! are damage rather than an outage, and the replay of completions spooled at the last stop.
//!
//! The story: a completion the store refuses is kept by its run task and retried with
//! [`store_backoff`] until written, the lease still renewed meanwhile; claim and wake-up failures
//! back off the same way. When every write has failed for longer than
//! `EngineConfig::outage_bound`, no new run is claimed until one succeeds; [`EngineHealth`]
//! (published on [`super::EngineHandle::health`]) says so for the console and metrics. At stop,
//! what is still unwritten goes to the [`super::spool`] file, the engine ends with
//! [`EngineError::Unwritten`] (so `run` exits non-zero), and the next start replays the spool
//! before its first claim. A claim that finds the store damaged (`StoreError::Corrupt` or
//! `Version`) is not an outage: the engine stops as at a shutdown and ends with that error.
//!
//! Owns: the [`EngineHealth`] transitions and the spool replay. Must not touch: the UI; what a
//! run does (the run task only reports its writes here).

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Utc};
use tokio::sync::{broadcast, watch};

use super::actor::Actor;
use super::completion::commit_once;
use super::{EngineError, Event, spool};
use crate::store::{Completion, StoreError};

/// The engine's view of its store, published on [`super::EngineHandle::health`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineHealth {
    /// Since when every write to the store has failed (`None`: the last write worked).
    pub store_failing_since: Option<DateTime<Utc>>,
    /// The last store error, while failing.
    pub last_store_error: Option<String>,
    /// Runs that finished but whose completion the store has not taken yet (retried).
    pub pending_completions: usize,
    /// No new runs are claimed: the store stayed unwritable past `outage_bound`.
    pub claims_stopped: bool,
    /// Completions written to the spool file at stop (replayed at the next start).
    pub spooled: usize,
}

/// Delay before the `attempt`-th retry of a failing store call: 250 ms doubling to 10 s.
pub fn store_backoff(attempt: u32) -> StdDuration {
    let ms = 250u64.saturating_mul(1u64 << attempt.saturating_sub(1).min(6));
    StdDuration::from_millis(ms.min(10_000))
}

/// The health channel, shared by the actor and every run task.
pub(super) type Health = Arc<watch::Sender<EngineHealth>>;

/// A store write worked: the store is healthy again.
pub(super) fn store_ok(health: &Health, ev_tx: &broadcast::Sender<Event>) {
    let mut recovered = false;
    health.send_if_modified(|h| {
        if h.store_failing_since.is_none() {
            return false;
        }
        recovered = h.claims_stopped;
        h.store_failing_since = None;
        h.last_store_error = None;
        h.claims_stopped = false;
        true
    });
    if recovered {
        tracing::warn!("store writable again; claiming resumed");
        let _ = ev_tx.send(Event::Notice(
            "store writable again; claiming resumed".to_string(),
        ));
    }
}

/// A store write failed at `now`.
pub(super) fn store_failed(health: &Health, now: DateTime<Utc>, e: &EngineError) {
    let msg = e.to_string();
    health.send_modify(|h| {
        h.store_failing_since.get_or_insert(now);
        h.last_store_error = Some(msg);
    });
}

/// Damage a claim ran into (a corrupt or foreign store file, a store of another format): not
/// an outage — retrying cannot help, so the engine stops with it instead of idling (a `run`
/// kept up doing nothing would exit 0 and hide the damage). A file that is *gone* is not taken as damage here: a store directory that vanished under a running
/// engine (an unmounted or remounted volume, a deleted directory) is waited for as an outage,
/// reported by the health check, rather than ending the process — a supervisor restarting
/// it on an empty directory would create a new store there.
fn is_damage(e: &StoreError) -> bool {
    match e {
        StoreError::Corrupt { file, .. } => file.exists(),
        StoreError::Version { .. } => true,
        _ => false,
    }
}

/// Completions the engine gave up writing at stop.
#[derive(Default)]
pub(super) struct Unwritten {
    pub(super) spooled: usize,
    pub(super) lost: Vec<spool::Entry>,
}

impl Actor {
    /// Whether claiming is stopped because the store stayed unwritable past the bound; reports
    /// the moment it starts.
    pub(super) fn claims_stopped(&self) -> bool {
        let now = self.now();
        let bound = chrono::Duration::from_std(self.cfg.outage_bound)
            .unwrap_or(chrono::Duration::seconds(30));
        let mut started = None;
        self.health.send_if_modified(|h| {
            let stop = h.store_failing_since.is_some_and(|t| now - t >= bound);
            if stop == h.claims_stopped {
                return false;
            }
            h.claims_stopped = stop;
            if stop {
                started = Some((
                    h.last_store_error.clone().unwrap_or_default(),
                    h.pending_completions,
                ));
            }
            true
        });
        if let Some((err, pending)) = started {
            let msg = format!(
                "store unwritable for over {}s: no new runs are claimed until it takes writes again ({pending} completion(s) waiting; last error: {err})",
                self.cfg.outage_bound.as_secs()
            );
            tracing::error!("{msg}");
            let _ = self.ev_tx.send(Event::Notice(msg));
        }
        self.health.borrow().claims_stopped
    }

    /// A claim went through: the store answers again.
    pub(super) fn claim_answered(&mut self) {
        self.store_failures = 0;
        store_ok(&self.health, &self.ev_tx);
    }

    /// A claim failed at `now`: damage stops the engine (retrying cannot help), anything else
    /// is an outage, backed off and reported once.
    pub(super) fn claim_failed(&mut self, now: DateTime<Utc>, e: EngineError) {
        match e {
            EngineError::Store(e) if is_damage(&e) => {
                let msg = format!("the store is damaged; stopping: {e}");
                tracing::error!("{msg}");
                let _ = self.ev_tx.send(Event::Notice(msg));
                self.damaged = Some(e);
            }
            e => {
                self.store_failures = self.store_failures.saturating_add(1);
                store_failed(&self.health, now, &e);
                // Reported once per outage, then only in the log at backoff pace.
                if self.store_failures == 1 {
                    let _ = self.ev_tx.send(Event::Notice(format!("claim failed: {e}")));
                }
                tracing::error!(error = %e, failures = self.store_failures, "claim failed; nothing runs until the store answers");
            }
        }
    }

    /// When the next claim cycle may run while the store is failing (claim or wake-up errors,
    /// or claiming stopped): backoff, not every `change_poll`. `None` while the store answers.
    pub(super) fn outage_retry_at(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if self.store_failures == 0 && !self.health.borrow().claims_stopped {
            return None;
        }
        let d = store_backoff(self.store_failures.max(1));
        Some(now + chrono::Duration::from_std(d).unwrap_or(chrono::Duration::seconds(1)))
    }

    /// Write the completions spooled at the last stop (fenced by run_id, each at most once),
    /// retrying with backoff while the store refuses them; stop waiting on shutdown (they stay
    /// spooled). A completion the store rejects as bad input stays in the spool, reported.
    pub(super) async fn replay_spool(&mut self) -> Result<(), EngineError> {
        let Some(path) = self.cfg.spool.clone() else {
            return Ok(());
        };
        let sp = spool::Spool::new(path);
        let loaded = {
            let sp = sp.clone();
            tokio::task::spawn_blocking(move || sp.load())
                .await
                .map_err(|e| EngineError::Join(e.to_string()))??
        };
        if loaded.is_empty() {
            return Ok(());
        }
        let msg = format!(
            "replaying {} completion(s) spooled at the last stop ({})",
            loaded.len(),
            sp.path().display()
        );
        tracing::warn!("{msg}");
        let _ = self.ev_tx.send(Event::Notice(msg));
        let mut left = loaded;
        let mut attempt = 0u32;
        loop {
            let mut still = Vec::new();
            let mut rejected = Vec::new();
            for e in left {
                let c: Completion = e.clone().into();
                match commit_once(&self.store, &self.completions, c).await {
                    Ok(rows) => {
                        store_ok(&self.health, &self.ev_tx);
                        for r in rows {
                            let _ = self.ev_tx.send(Event::Row(r));
                        }
                    }
                    Err(EngineError::Store(se)) if se.is_bad_input() => {
                        tracing::error!(job = %e.job, run_id = %e.run_id, error = %se, "spooled completion rejected by the store; kept in the spool");
                        let _ = self.ev_tx.send(Event::Notice(format!(
                            "spooled completion of '{}' rejected by the store ({se}); kept in {}",
                            e.job,
                            sp.path().display()
                        )));
                        rejected.push(e);
                    }
                    Err(err) => {
                        store_failed(&self.health, self.now(), &err);
                        still.push(e);
                    }
                }
            }
            let keep: Vec<spool::Entry> = still.iter().chain(&rejected).cloned().collect();
            {
                let sp = sp.clone();
                tokio::task::spawn_blocking(move || sp.rewrite(&keep))
                    .await
                    .map_err(|e| EngineError::Join(e.to_string()))??;
            }
            if still.is_empty() {
                return Ok(());
            }
            attempt += 1;
            tracing::warn!(
                left = still.len(),
                attempt,
                "spooled completions not written yet; retrying"
            );
            tokio::select! {
                _ = tokio::time::sleep(store_backoff(attempt)) => {}
                _ = self.shutdown.cancelled() => {
                    self.note_left_in_spool(still.len());
                    return Ok(());
                }
                _ = self.hard_stop.cancelled() => {
                    self.note_left_in_spool(still.len());
                    return Ok(());
                }
            }
            left = still;
        }
    }

    fn note_left_in_spool(&self, n: usize) {
        if let Ok(mut u) = self.unwritten.lock() {
            u.spooled += n;
        }
        self.health.send_modify(|h| h.spooled += n);
    }
}

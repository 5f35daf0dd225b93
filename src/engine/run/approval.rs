//! A tool call waiting for an operator: the run awaiting approval, from the store write that
//! begins the wait to the one that ends it.
//!
//! Owns: [`Approvals::wait`] — the wait recorded on the run's lease (so `cronsole approvals`,
//! `jobs --json` and the console on any host see it), the job's sinks alerted, the answer
//! read back from the store, the timeout's denial, and the wait cleared. Must not touch: which
//! calls need approval and what a denial does to the loop (`action::agent`), the answer's
//! store rules (`store::policy::operator`).
//!
//! Decisions:
//! - The owner reads the answer from its job's record every [`POLL`] (a read, not a write);
//!   the lease goes on renewing by the engine's renewal task as for any live run. Nothing is
//!   reserved or spent while waiting.
//! - The alert goes to the job's sinks once per wait, with the tool, the arguments (redacted,
//!   cut to 200 bytes) and the commands that answer; a sink that fails is logged, the wait
//!   goes on (the console and `cronsole approvals` still show it).
//! - The timeout's denial is written on the lease like an operator's answer, in one store
//!   step that refuses a call already answered: an answer the store accepted is always the
//!   verdict, never dropped by a timeout that crossed it.
//! - The wait's bound is tokio time from its start (`approval_timeout_seconds`), so a clock
//!   step cannot end it early or late; the record shows the wall-clock deadline.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::action::agent::Verdict;
use crate::clock::Clock;
use crate::deliver::{Message, MessageKind, deliver_all};
use crate::model::{ApprovalAnswer, AwaitingApproval, HistoryRow, SinkDef};
use crate::store::{JobEdit, Store};
use crate::transcript::cap_bytes;

/// How often a waiting run reads its answer.
pub(super) const POLL: Duration = Duration::from_millis(500);

/// What a run needs to wait for answers.
pub(super) struct Approvals<'r> {
    pub store: &'r Arc<dyn Store>,
    pub clock: &'r Arc<dyn Clock>,
    pub http: &'r reqwest::Client,
    pub sinks: &'r BTreeMap<String, SinkDef>,
    pub deliver: &'r [String],
    /// The run's row as it began (the alert's payload).
    pub row: HistoryRow,
    /// `approval_timeout_seconds`.
    pub timeout: Duration,
}

/// How a wait ended without a verdict.
pub(super) enum WaitStop {
    /// The run no longer holds its job's lease.
    Lost,
}

impl Approvals<'_> {
    /// The wait's record for the lease (`since` now, `deadline` after the timeout).
    pub(super) fn awaiting(&self, tool: &str, call_id: &str, arguments: &str) -> AwaitingApproval {
        let since = self.clock.now();
        AwaitingApproval {
            tool: tool.to_string(),
            call_id: call_id.to_string(),
            arguments: arguments.to_string(),
            since,
            deadline: since
                + chrono::Duration::from_std(self.timeout).unwrap_or(chrono::Duration::days(1)),
            answer: None,
        }
    }

    /// Alert the sinks, then wait for the answer of run `run_id` of `job` (already recorded as
    /// awaiting approval) or the timeout.
    pub(super) async fn wait(
        &self,
        job: &str,
        run_id: Uuid,
        a: &AwaitingApproval,
    ) -> Result<Verdict, WaitStop> {
        self.alert(run_id, a).await;
        let until = tokio::time::Instant::now() + self.timeout;
        loop {
            match self.answer(job, run_id).await {
                Ok(Some(ans)) => return Ok(verdict(ans)),
                Ok(None) => {}
                Err(WaitStop::Lost) => return Err(WaitStop::Lost),
            }
            let now = tokio::time::Instant::now();
            if now >= until {
                return self.time_out(job, run_id).await;
            }
            tokio::time::sleep(POLL.min(until - now)).await;
        }
    }

    /// The wait's timeout: the denial is written on the lease through the same store step as
    /// an operator's answer, so one of them wins. An answer that came first is the verdict
    /// (its operator was told the call runs); a store that cannot be written leaves the
    /// denial to the run alone (the step that ends the wait fails the same way).
    async fn time_out(&self, job: &str, run_id: Uuid) -> Result<Verdict, WaitStop> {
        let reason = format!(
            "denied: no answer within approval_timeout_seconds ({}s)",
            self.timeout.as_secs_f64()
        );
        let edit = JobEdit::Answer {
            run_id,
            call: None,
            approve: false,
            reason: Some(reason.clone()),
            by: None,
        };
        let (j, now) = (job.to_string(), self.clock.now());
        if let Err(e) =
            crate::store::blocking(self.store, move |s| s.update_job(&j, &edit, now)).await
        {
            if let Some(ans) = self.answer(job, run_id).await? {
                return Ok(verdict(ans));
            }
            tracing::debug!(job = %job, error = %e, "recording an approval's timeout");
        }
        Ok(Verdict::Denied { reason, by: None })
    }

    /// The answer on the run's lease, if given. A store that cannot be read is retried at the
    /// next poll (the timeout still bounds the wait).
    async fn answer(
        &self,
        job: &str,
        run_id: Uuid,
    ) -> Result<Option<crate::model::ApprovalAnswer>, WaitStop> {
        let j = job.to_string();
        match crate::store::blocking(self.store, move |s| s.job(&j)).await {
            Ok(Some(rec)) => match rec.rt.lease_of(run_id) {
                Some(l) => Ok(l.awaiting.as_ref().and_then(|a| a.answer.clone())),
                None => Err(WaitStop::Lost),
            },
            Ok(None) => Err(WaitStop::Lost),
            Err(e) => {
                tracing::debug!(job = %job, error = %e, "reading an approval's answer; retried");
                Ok(None)
            }
        }
    }

    async fn alert(&self, run_id: Uuid, a: &AwaitingApproval) {
        if self.deliver.is_empty() {
            return;
        }
        let msg = approval_message(&self.row, run_id, a);
        let report = deliver_all(
            self.http,
            self.sinks,
            self.deliver,
            &msg,
            super::DELIVERY_TIMEOUT,
            self.clock.now(),
        )
        .await;
        if let Some(e) = &report.error {
            tracing::warn!(job = %self.row.job, error = %e, "approval alert not delivered");
        }
    }
}

/// What an operator's answer tells the loop: a denial's reason is what the model reads.
fn verdict(ans: ApprovalAnswer) -> Verdict {
    let by = ans.by.map(|b| cap_bytes(&b, 256));
    let why = ans
        .reason
        .as_deref()
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(|r| cap_bytes(r, 1024));
    if ans.approved {
        return Verdict::Approved { reason: why, by };
    }
    Verdict::Denied {
        reason: match why {
            Some(r) => format!("denied by an operator: {r}"),
            None => "denied by an operator".to_string(),
        },
        by,
    }
}

/// The alert asking for an answer. Its commands name the call (`--call`): a run's calls wait
/// one after another, and an answer typed from this alert must never reach a later call.
fn approval_message(row: &HistoryRow, run_id: Uuid, a: &AwaitingApproval) -> Message {
    let call = crate::text::visible(&a.call_id);
    Message {
        kind: MessageKind::AwaitingApproval,
        job: row.job.clone(),
        text: format!(
            "APPROVAL NEEDED: {} run {run_id} wants to call {} with {}; answer with `cronsole \
             approve {run_id} --call {call}` or `cronsole deny {run_id} --call {call} --reason …` \
             (or a/x in the console) by {} — unanswered, it is denied",
            row.job,
            a.tool,
            cap_bytes(&a.arguments, 200),
            rfc3339(a.deadline)
        ),
        row: row.clone(),
    }
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

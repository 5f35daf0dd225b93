//! One run task: the claimed run's pipeline (`run::execute`) with its lease renewed while it is
//! alive, cancelled at a shutdown or by an operator, then its completion handed to the store.
//!
//! Owns: what a run task holds and the row of a run that was stopped (abandoned at shutdown,
//! failed when cancelled). Must not touch: the pipeline's steps (`run` owns them).

use std::sync::Arc;
use std::time::Duration as StdDuration;

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::actor::Finished;
use super::completion::CompletionTx;
use super::outage::{Health, Unwritten};
use super::renew::Renewer;
use super::{Event, RunDeps, run, spool};
use crate::clock::Clock;
use crate::model::{HistoryRow, Status};
use crate::store::{Claim, Completion, Store};

/// Everything one run task needs; cheap to clone per run.
pub(super) struct RunTask {
    pub(super) store: Arc<dyn Store>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) deps: Arc<RunDeps>,
    pub(super) owner: String,
    pub(super) ev_tx: broadcast::Sender<Event>,
    pub(super) completions: CompletionTx,
    pub(super) health: Health,
    pub(super) unwritten: Arc<std::sync::Mutex<Unwritten>>,
    pub(super) spool: Option<spool::Spool>,
    /// The store's settings read with this run's claim; `None`: the run reads them itself.
    pub(super) settings: Option<Arc<crate::model::Settings>>,
}

impl RunTask {
    /// Run one claim to completion: the pipeline, with the lease renewed every lease/3 while it
    /// is alive, then `complete` (fenced by run_id). Cancellation (shutdown) during the
    /// pipeline completes the run as `abandoned` with reason `shutdown`.
    ///
    /// A completion the store refuses is kept and retried with [`super::store_backoff`] until it is
    /// written, the lease still renewed meanwhile (so nobody records the run `abandoned` while
    /// its result waits); if the engine is stopped first, it goes to the spool file.
    ///
    /// An operator's cancel (`op_cancel`) drops the pipeline (killing the run's processes) and
    /// records the run `failed`, reason `cancelled by operator`: no retry, delivery or alert.
    pub(super) async fn run(
        self,
        claim: Claim,
        cancel: CancellationToken,
        op_cancel: CancellationToken,
    ) -> Finished {
        let job = claim.job.def.name.clone();
        let run_id = claim.run_id;
        // Renew at a third of whatever lease the store granted last time: the definition's
        // `lease_seconds` may change under a running job (`apply`), and the store renews with the
        // current one, so the schedule follows the store's answer, not the claim-time value.
        let first_renew =
            run::secs(claim.job.def.lease_seconds / 3.0).max(StdDuration::from_millis(1));
        let mut renewer = Renewer {
            job: job.clone(),
            run_id,
            first: first_renew,
            next: tokio::time::Instant::now() + first_renew,
        };
        let started = self.clock.now();
        let progress = run::Progress::default();
        // The run's commands carry a dead-man switch of half the lease (run::proc_env_of).
        let pipeline = run::execute(
            &claim,
            self.settings.clone(),
            &self.deps,
            &self.store,
            &self.clock,
            &self.ev_tx,
            &self.owner,
            &progress,
        );
        tokio::pin!(pipeline);
        let output = loop {
            tokio::select! {
                out = &mut pipeline => break Some(out),
                _ = cancel.cancelled() => break None,
                // Dropping the pipeline kills the run's process group (proc::GroupGuard). The
                // row is `failed`, never retried, re-offered or alerted (no delivery runs).
                _ = op_cancel.cancelled() => {
                    let mut row = HistoryRow::new(
                        &job,
                        Status::Failed,
                        claim.trigger,
                        claim.slot,
                        &self.owner,
                        started,
                    );
                    row.reason = Some(crate::store::rules::reasons::REASON_CANCELLED.to_string());
                    break Some(run::RunOutput { row, state: None, hold_until: None });
                }
                _ = tokio::time::sleep_until(renewer.next) => renewer.renew(&self).await,
            }
        };
        let now = self.clock.now();
        let output = output.unwrap_or_else(|| {
            let mut row = HistoryRow::new(
                &job,
                Status::Abandoned,
                claim.trigger,
                claim.slot,
                &self.owner,
                started,
            );
            row.reason = Some("shutdown".to_string());
            progress.fill(&mut row);
            run::RunOutput {
                row,
                state: None,
                hold_until: None,
            }
        });
        let mut row = output.row;
        row.run_id = run_id;
        row.finished_at = now;
        row.duration_ms = (now - row.started_at).num_milliseconds().max(0) as u64;
        let completion = Completion {
            job: job.clone(),
            run_id,
            owner: self.owner.clone(),
            now,
            row,
            state: output.state,
            hold_until: output.hold_until,
        };
        let rows = self.commit(completion, &cancel, &mut renewer).await;
        Finished { run_id, rows }
    }
}

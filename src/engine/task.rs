//! One run task: the claimed run's pipeline (`run::execute`) with its lease renewed while it is
//! alive, cancelled at a shutdown or by an operator, then its completion written: retried with
//! [`super::store_backoff`] until the store takes it, the lease still renewed meanwhile (so
//! nobody records the run `abandoned` while its result waits), or spooled if the engine stops
//! first.
//!
//! Owns: what a run task holds, what the actor keeps of one ([`InFlight`], [`Finished`]), and
//! the row of a run that was stopped (abandoned at shutdown or for its lease unless its action
//! had ended, failed when cancelled). Must not touch: the pipeline's steps (`run` owns them).

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::api::Event;
use super::completion::{CompletionTx, commit_once, complete_via};
use super::error::EngineError;
use super::outage::{Health, Unwritten, probe_delay, store_failed, store_ok};
use super::renew::{Asked, Holder, Lease, REASON_LEASE_UNRENEWED, RenewalTx, Renewer};
use super::{RunDeps, run, spool};
use crate::clock::Clock;
use crate::model::{HistoryRow, Overlap, Settings, Status};
use crate::store::{Claim, Completion, Store};

/// One run of this owner as the actor keeps it, keyed by its run_id (a job under
/// `overlap: allow` may have several).
pub(super) struct InFlight {
    pub(super) job: String,
    /// The job's `overlap:` policy when the run was claimed: whether this owner still lets the
    /// store look at the job while it runs it.
    pub(super) overlap: Overlap,
    pub(super) cancel: CancellationToken,
    /// Cancelled when an operator asked (through the store) to cancel this run.
    pub(super) op_cancel: CancellationToken,
    /// The run task, so a task that panicked can be matched to its job.
    pub(super) task: Option<tokio::task::Id>,
    /// How far the run got (shared with its task): a run awaiting approval is abandoned at
    /// once at shutdown.
    pub(super) progress: run::Progress,
}

/// What a finished run task hands back to the actor.
pub(super) struct Finished {
    pub(super) run_id: Uuid,
    pub(super) rows: Vec<HistoryRow>,
}

/// Everything one run task needs; cheap to clone per run.
pub(super) struct RunTask {
    pub(super) store: Arc<dyn Store>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) deps: Arc<RunDeps>,
    pub(super) owner: String,
    pub(super) ev_tx: broadcast::Sender<Event>,
    pub(super) completions: CompletionTx,
    /// The owner's renewal batcher.
    pub(super) renewals: RenewalTx,
    pub(super) health: Health,
    pub(super) unwritten: Arc<Mutex<Unwritten>>,
    pub(super) spool: Option<spool::Spool>,
    /// The store's settings read with this run's claim; `None`: the run reads them itself.
    pub(super) settings: Option<Arc<Settings>>,
    /// The claim came right after a wall-clock step (in words): the slot it runs for (one that
    /// came due across the step, or several coalesced) was decided on the stepped clock.
    pub(super) claimed_after_step: Option<String>,
    /// When the claim that granted this run's lease was asked for (monotonic clock).
    pub(super) claim_asked: tokio::time::Instant,
}

impl RunTask {
    /// What lease renewals need of this task.
    fn holder(&self) -> Holder<'_> {
        Holder {
            store: &self.store,
            renewals: &self.renewals,
            clock: &self.clock,
            health: &self.health,
            ev_tx: &self.ev_tx,
        }
    }

    /// Run one claim to completion: the pipeline, with the lease renewed every lease/3 while it
    /// is alive, then `complete` (fenced by run_id). Cancellation (shutdown) during the
    /// pipeline completes the run as `abandoned` with reason `shutdown`, unless its action had
    /// ended (then with that end, its delivery said cut short), as does a stop for a lease it
    /// could not renew.
    ///
    /// An operator's cancel (`op_cancel`) drops the pipeline (killing the run's processes) and
    /// records the run `failed`, reason `cancelled by operator`: no retry, delivery or alert.
    /// The row is `cut_short`: it keeps the run's progress, and the store books every
    /// reservation the run still holds on it.
    pub(super) async fn run(
        self,
        claim: Claim,
        cancel: CancellationToken,
        op_cancel: CancellationToken,
        progress: run::Progress,
    ) -> Finished {
        let job = claim.job.def.name.clone();
        let run_id = claim.run_id;
        // Renew at a third of whatever lease the store granted last time: the definition's
        // `lease_seconds` may change under a running job (`apply`), and the store renews with the
        // current one, so the schedule follows the store's answer, not the claim-time value.
        let mut renewer = Renewer::new(
            job.clone(),
            run_id,
            run::secs(claim.job.def.lease_seconds),
            self.claim_asked,
        );
        let started = self.clock.now();
        let reading = crate::clock::Reading::of(self.clock.as_ref());
        let holder = self.holder();
        // The pipeline lives in this block only: whatever ends the loop (its end, a shutdown, a
        // cancel, a lease that could not be renewed), leaving the block drops it, and dropping
        // it kills the run's processes (proc::GroupGuard) before the completion waits on the
        // store, while the lease is still this owner's.
        let output = {
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
            // The renewal in flight, polled beside the pipeline: a slow store never pauses the
            // pipeline's heartbeats to its supervisors.
            let mut asking: Option<std::pin::Pin<Box<dyn Future<Output = Asked> + Send>>> = None;
            loop {
                tokio::select! {
                    // A pipeline that has ended is taken first: an owner continued after a stop finds
                    // its run's end and its renewal timer ready together, and the run's own end is
                    // what happened.
                    biased;
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
                        // What the run did and paid for stays on its row: the store books every
                        // reservation the run still holds (answered turns at their cost, a request
                        // in flight at its reservation), so a cancel never hands money back.
                        progress.fill(&mut row);
                        row.cut_short = true;
                        break Some(run::RunOutput { row, state: None, hold_until: None });
                    }
                    asked = async {
                        match asking.as_mut() {
                            Some(f) => f.await,
                            None => std::future::pending().await,
                        }
                    } => {
                        asking = None;
                        if renewer.settle(asked, &holder) == Lease::Ending {
                            // A run that has ended, or ends within the grace, keeps its own end:
                            // its pipeline may need a few more turns to see a command that
                            // exited, and an `abandoned` row would have a one-shot run again.
                            let grace = (renewer.lease / 8).min(ENDING_GRACE);
                            if let Ok(out) = tokio::time::timeout(grace, &mut pipeline).await {
                                break Some(out);
                            }
                            // So does a run whose action ended before the stop, its delivery or
                            // alerts still going: the command ran (or the model answered), and
                            // that is what happened, with the delivery said cut short.
                            break Some(progress.ended("for its lease").unwrap_or_else(|| {
                                abandoned_row(
                                    &claim,
                                    &self.owner,
                                    started,
                                    &progress,
                                    REASON_LEASE_UNRENEWED,
                                )
                            }));
                        }
                    }
                    _ = tokio::time::sleep_until(renewer.next), if asking.is_none() => {
                        asking = Some(Box::pin(renewer.ask(&holder)));
                    }
                }
            }
        };
        let now = self.clock.now();
        // A shutdown that stops a run after its action ended records that end, as a stop for
        // the lease does.
        let output = output
            .or_else(|| progress.ended("at shutdown"))
            .unwrap_or_else(|| {
                let reason = if progress.is_awaiting() {
                    "shutdown while awaiting approval"
                } else {
                    "shutdown"
                };
                abandoned_row(&claim, &self.owner, started, &progress, reason)
            });
        let mut row = output.row;
        row.run_id = run_id;
        row.finished_at = now;
        // The time that passed, on the monotonic clock: a wall-clock step during the run (said
        // on the row) does not make it last two days or a negative time.
        let end = crate::clock::Reading::of(self.clock.as_ref());
        row.duration_ms = u64::try_from(end.passed_since(&reading).as_millis()).unwrap_or(u64::MAX);
        // A wall clock stepped back during the run would date its end before its start, and
        // every view sorting by the end would list it before older rows: the end is then the
        // start plus the time that passed (the step is said on the row).
        if row.finished_at < row.started_at {
            let passed = chrono::Duration::milliseconds(
                i64::try_from(row.duration_ms).unwrap_or(i64::MAX / 2),
            );
            row.finished_at = row
                .started_at
                .checked_add_signed(passed)
                .unwrap_or(row.started_at);
        }
        if let Some(step) = end.step_since(&reading) {
            row.clock_stepped = Some(crate::clock::step_words(step));
        } else {
            row.clock_stepped = self.claimed_after_step.clone();
        }
        // What the completion decides (overlap rows, the next slot) is decided on the store's
        // clock as the last heartbeat read it, when this owner keeps that reading: an owner whose
        // own clock stepped an hour ahead claims nothing, but its runs in flight still end, and
        // deciding their slots on its clock would move the job's next slot an hour ahead for
        // every owner. The row keeps this host's instants.
        // A step since the last heartbeat may have moved the store's clock too (a host's clock
        // set right): that reading is read again first, or a run claimed two days ahead would
        // end on the reading of two days ahead and move its job's next slot two days out.
        let decide_at = self
            .health
            .store_now_at_end(end, self.clock.as_ref(), STORE_CLOCK_WAIT)
            .await
            .unwrap_or(now);
        let completion = Completion {
            job: job.clone(),
            run_id,
            owner: self.owner.clone(),
            now: decide_at,
            row,
            state: output.state,
            hold_until: output.hold_until,
        };
        let rows = self.commit(completion, &cancel, &mut renewer).await;
        Finished { run_id, rows }
    }
}

/// The `abandoned` row of a run this owner stopped (a shutdown, a lease it could not renew),
/// keeping what the run did and paid for.
fn abandoned_row(
    claim: &Claim,
    owner: &str,
    started: chrono::DateTime<chrono::Utc>,
    progress: &run::Progress,
    reason: &str,
) -> run::RunOutput {
    let mut row = HistoryRow::new(
        &claim.job.def.name,
        Status::Abandoned,
        claim.trigger,
        claim.slot,
        owner,
        started,
    );
    row.reason = Some(reason.to_string());
    progress.fill(&mut row);
    run::RunOutput {
        row,
        state: None,
        hold_until: None,
    }
}

/// The longest a run stopped for its lease waits for its pipeline to see an end that already
/// happened (at most an eighth of the lease: half the margin left for stopping).
const ENDING_GRACE: StdDuration = StdDuration::from_millis(500);

/// How long a completion after a wall-clock step waits for the heartbeat that reads the
/// store's clock again (a heartbeat is one small write; an outage delays it past this).
const STORE_CLOCK_WAIT: StdDuration = StdDuration::from_secs(2);

/// How long a stop waits for a completion attempt already in flight before spooling it.
const IN_FLIGHT_WAIT: StdDuration = StdDuration::from_secs(5);

impl RunTask {
    /// Write `c` until the store takes it (see [`RunTask::run`]); on cancellation, spool it.
    pub(super) async fn commit(
        &self,
        c: Completion,
        cancel: &CancellationToken,
        renewer: &mut Renewer,
    ) -> Vec<HistoryRow> {
        let mut attempt = 0u32;
        let mut pending = false;
        loop {
            let (first, cc) = (attempt == 0, c.clone());
            let (store, completions) = (&self.store, &self.completions);
            let fut = async move {
                if first {
                    // First try: nothing can be recorded yet, skip the history look-up.
                    complete_via(store, completions, cc).await.map(|o| o.rows)
                } else {
                    commit_once(store, completions, cc).await
                }
            };
            tokio::pin!(fut);
            let res = tokio::select! {
                r = &mut fut => r,
                _ = cancel.cancelled(), if attempt > 0 => {
                    match tokio::time::timeout(IN_FLIGHT_WAIT, &mut fut).await {
                        Ok(r) => r,
                        Err(_) => Err(EngineError::Join("stopped while the store was not answering".into())),
                    }
                }
            };
            match res {
                Ok(rows) => {
                    if pending {
                        self.health.send_modify(|h| {
                            h.pending_completions = h.pending_completions.saturating_sub(1)
                        });
                    }
                    // After the count went down: the last completion written ends an outage.
                    store_ok(
                        &self.health,
                        &self.ev_tx,
                        crate::clock::Reading::of(self.clock.as_ref()),
                    );
                    if pending {
                        let msg = format!(
                            "run of '{}' recorded after {attempt} failed attempt(s)",
                            c.job
                        );
                        tracing::warn!("{msg}");
                        let _ = self.ev_tx.send(Event::Notice(msg));
                    }
                    return if rows.is_empty() { vec![c.row] } else { rows };
                }
                Err(e) => {
                    attempt += 1;
                    store_failed(
                        &self.health,
                        &self.ev_tx,
                        crate::clock::Reading::of(self.clock.as_ref()),
                        &e,
                    );
                    if !pending {
                        pending = true;
                        self.health.send_modify(|h| h.pending_completions += 1);
                        tracing::error!(job = %c.job, run_id = %c.run_id, error = %e, "completion failed; kept and retried until the store takes it");
                        let _ = self.ev_tx.send(Event::Notice(format!(
                            "could not record run of '{}' yet (kept, retrying): {e}",
                            c.job
                        )));
                    } else {
                        tracing::warn!(job = %c.job, error = %e, attempt, "completion failed again");
                    }
                    if cancel.is_cancelled() {
                        self.spool(&c).await;
                        return Vec::new();
                    }
                    let wake = tokio::time::Instant::now()
                        + probe_delay(attempt, crate::action::jitter_unit());
                    loop {
                        tokio::select! {
                            _ = tokio::time::sleep_until(wake) => break,
                            _ = self.health.retry_now() => break,
                            _ = cancel.cancelled() => break,
                            // The run has ended: what the renewal says no longer stops anything.
                            _ = tokio::time::sleep_until(renewer.next) => { let _ = renewer.renew(&self.holder()).await; }
                        }
                    }
                }
            }
        }
    }

    /// Keep `c` in the spool file (the engine is stopping and the store still refuses it).
    async fn spool(&self, c: &Completion) {
        let entry = spool::Entry::from(c);
        self.health
            .send_modify(|h| h.pending_completions = h.pending_completions.saturating_sub(1));
        let res = match self.spool.clone() {
            Some(sp) => {
                let e = entry.clone();
                tokio::task::spawn_blocking(move || sp.append(std::slice::from_ref(&e)))
                    .await
                    .map_err(|e| e.to_string())
                    .and_then(|r| r.map_err(|e| e.to_string()))
            }
            None => Err("no spool file configured".to_string()),
        };
        let msg = match &res {
            Ok(()) => format!(
                "run of '{}' ({}) not recorded: the store refused it until the stop; spooled for the next start",
                c.job, c.row.status
            ),
            Err(e) => format!(
                "run of '{}' ({}) not recorded and not spooled: {e}",
                c.job, c.row.status
            ),
        };
        tracing::error!(run_id = %c.run_id, "{msg}");
        let _ = self.ev_tx.send(Event::Notice(msg));
        if let Ok(mut u) = self.unwritten.lock() {
            match res {
                Ok(()) => u.spooled += 1,
                Err(_) => u.lost.push(entry),
            }
        }
        if self.spool.is_some() {
            self.health.send_modify(|h| h.spooled += 1);
        }
    }
}

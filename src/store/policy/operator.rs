//! What an operator's actions do to one job record: pause or resume, queue a manual trigger,
//! retry a run, cancel a running run (or what is queued), backfill the slots of a past window,
//! pause with a reason. Written once for every store; each store only runs [`apply_edit_rows`]
//! (or [`bulk_step`]) under its lock (file store) or inside one transaction (PostgreSQL).
//!
//! Owns: the decisions and their outcomes/errors, [`set_paused`], [`trigger_step`]. Must not touch: I/O, locks, clocks (every call
//! takes `now`), the engine (which notices a cancel request through the store).
//!
//! Decisions:
//! - Retries and backfill slots are queued on the job ([`JobRuntime::queue`]) and claimed by any
//!   owner like a manual trigger: runs of their own (`trigger: retry | backfill`), allowed while
//!   paused, never moving the schedule nor counting toward `max_runs`. A queued retry of a job
//!   that is running waits for that run to end (unlike `trigger`, which refuses: a retry names a
//!   past run, so asking twice is not a double click). A retry of a run already queued is refused.
//! - Only runs that did not do their work can be retried: `failed`, `abandoned`, `missed`. A
//!   retry stands for the retried row's slot.
//! - Retired jobs take no retries and no backfills (their definition is gone or spent).
//! - Backfill takes the slots in `[from, to]` (both inclusive; an `every` grid extends backward
//!   from its anchor for windows before the job existed), `to` not in the future, at most
//!   `QUEUE_MAX` queued per job; slots already queued are not queued twice. A window with no
//!   slot is bad input (it names nothing to run).
//! - Cancel of a running run marks its lease; the owner running it kills the process tree and
//!   records the row `failed` with reason `cancelled by operator` (never retried, re-offered or
//!   alerted). `cancel NAME` of a job that is not running drops its queued manual trigger,
//!   retries and backfills instead, each with a `skipped` row (owner `operator`, reason
//!   [`REASON_QUEUED_CANCELLED`]) written with the record, so every acknowledged request
//!   ends in one row; with nothing running or queued it is bad input.
//! - An answer to a call awaiting approval is recorded only while the run can use it: its
//!   lease held and unexpired at the answer's `now`, no cancel pending, the call unanswered.
//!   Otherwise it is refused with nothing written, saying why; the owner's own denial at the
//!   wait's timeout is written the same way, so exactly one answer wins.
//! - A pause reason is cleared by resume; pausing a paused job with a new reason replaces it.
//! - A paused job records nothing for the slots that pass; on resume it continues at its next
//!   future slot.
//!
//! [`JobRuntime::queue`]: crate::model::JobRuntime::queue

use crate::store::OperationError;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::model::{HistoryRow, JobRecord, QUEUE_MAX, QueuedRun, Status, Trigger};
use crate::schedule::{Compiled, ScheduleError};

use super::overlap;
use crate::store::rules::reasons::{OPERATOR_OWNER, REASON_QUEUED_CANCELLED};
use crate::store::rules::slots::{compile, skip_to_future};
use crate::store::{Refusal, StoreError, StoreResult, TriggerOutcome};

/// Longest pause reason kept (characters).
pub const PAUSE_REASON_MAX: usize = 200;

/// One operator action on one job, as data (so every store can run it inside its own lock or
/// transaction).
#[derive(Debug, Clone, PartialEq)]
pub enum JobEdit {
    /// Queue a retry of this run (a row of this job).
    Retry(Box<HistoryRow>),
    /// Cancel the running run (`Some(id)`: only if it is that run), or what is queued.
    Cancel(Option<Uuid>),
    /// Queue the slots in `[from, to]`.
    Backfill {
        /// First instant of the window.
        from: DateTime<Utc>,
        /// Last instant of the window (inclusive).
        to: DateTime<Utc>,
    },
    /// Pause (with an optional reason) or resume.
    Pause {
        /// `true` to pause, `false` to resume.
        paused: bool,
        /// Why (kept with the pause, shown in `jobs` and the console).
        reason: Option<String>,
    },
    /// Answer the tool call run `run_id` awaits approval for: approve, or deny with a reason.
    Answer {
        /// The run awaiting approval.
        run_id: Uuid,
        /// Only if the call that waits is this one (its id in the conversation, as
        /// `cronsole approvals` lists it): a run's calls wait one after another, and an answer
        /// meant for one must never reach the next.
        call: Option<String>,
        /// Approve (`true`) or deny.
        approve: bool,
        /// Why: kept on the run's record; a denial's is also the tool's result for the model.
        reason: Option<String>,
        /// Who answers (`user@host (how)`), kept on the run's record.
        by: Option<String>,
    },
}

/// What an edit did.
#[derive(Debug, Clone, PartialEq)]
pub enum EditOutcome {
    /// Runs queued (retry: 1; backfill: the new slots), and how many the job now has queued.
    Queued {
        /// Runs this edit queued.
        added: usize,
        /// Runs the job has queued now, these included.
        queued: usize,
    },
    /// The running run was marked for cancellation.
    CancelRequested {
        /// The run to be killed.
        run_id: Uuid,
    },
    /// The run was already marked for cancellation.
    AlreadyCancelling {
        /// The run being killed.
        run_id: Uuid,
    },
    /// Nothing was running: this many queued runs (trigger, retries, backfills) were dropped.
    Dequeued(usize),
    /// Pause/resume applied (false: it already was in that state with that reason).
    Paused {
        /// The job's pause state or reason changed.
        changed: bool,
    },
    /// The answer was recorded for the run's owner to pick up.
    Answered {
        /// The run that was waiting.
        run_id: Uuid,
        /// The tool whose call was answered.
        tool: String,
        /// Approved or denied.
        approved: bool,
    },
}

/// Most jobs one store operation of a bulk action touches (one lock hold and one journal append
/// with one fsync on the file store, one transaction on PostgreSQL). Between chunks the lock is
/// released, so an engine's claims and other commands interleave with a bulk action over many
/// thousands of jobs instead of waiting for all of it.
pub const BULK_CHUNK: usize = 1000;

/// What a bulk action (`pause`, `resume`, `trigger` over a selection) does to each job.
#[derive(Debug, Clone, PartialEq)]
pub enum BulkAction {
    /// Pause or resume (no reason: a reason travels as [`BulkAction::Edit`]).
    SetPaused(bool),
    /// Queue one manual run.
    Trigger,
    /// An operator edit (pause with a reason, cancel).
    Edit(JobEdit),
}

/// What a bulk action did to one job.
#[derive(Debug, Clone, PartialEq)]
pub enum BulkOutcome {
    /// Paused or resumed (or already so).
    SetPaused,
    /// The trigger's outcome.
    Trigger(TriggerOutcome),
    /// The edit's outcome.
    Edit(EditOutcome),
}

/// The result of one chunk of a bulk action: the outcomes of the jobs done, in order (a prefix
/// of the names asked for, all of them written), and the error that stopped the chunk at the
/// job after them (nothing of that job or later ones changed). A failed write leaves `done`
/// empty: nothing of the chunk was written.
#[derive(Debug)]
pub struct BulkDone {
    /// One outcome per job done, in the order asked.
    pub done: Vec<BulkOutcome>,
    /// Why the chunk stopped before its end.
    pub error: Option<StoreError>,
}

/// What a bulk chunk has done so far, shared by both stores' `bulk_edit`: each job's step is
/// [`Self::step`]ped in the order asked until one fails; `changed` names the records to write.
pub struct BulkTally {
    /// One outcome per job done.
    pub done: Vec<BulkOutcome>,
    /// The jobs whose record changed, in the order done.
    pub changed: Vec<String>,
    /// The step that stopped the chunk.
    pub error: Option<StoreError>,
}

impl BulkTally {
    /// An empty tally for a chunk of `n` jobs.
    pub fn new(n: usize) -> BulkTally {
        BulkTally {
            done: Vec::with_capacity(n),
            changed: Vec::new(),
            error: None,
        }
    }

    /// Record job `name`'s step; `false` when it failed and the chunk stops there (that job's
    /// record is not in `changed`: a half-edited record is never written).
    pub fn step(&mut self, name: &str, step: Result<(bool, BulkOutcome), StoreError>) -> bool {
        match step {
            Ok((changed, out)) => {
                if changed {
                    self.changed.push(name.to_string());
                }
                self.done.push(out);
                true
            }
            Err(e) => {
                self.error = Some(e);
                false
            }
        }
    }

    /// The chunk's answer once its writes succeeded.
    pub fn into_done(self) -> BulkDone {
        BulkDone {
            done: self.done,
            error: self.error,
        }
    }
}

/// Apply `action` to one job's record (the per-job decision of a bulk chunk, the same as the
/// single-job operations take). `Ok((changed, outcome))` as [`apply_edit_rows`].
pub fn bulk_step(
    rec: &mut JobRecord,
    action: &BulkAction,
    now: DateTime<Utc>,
    rows: &mut Vec<HistoryRow>,
) -> Result<(bool, BulkOutcome), StoreError> {
    match action {
        BulkAction::SetPaused(paused) => {
            let changed = pause_step(rec, *paused, now)?;
            Ok((changed, BulkOutcome::SetPaused))
        }
        BulkAction::Trigger => {
            let (out, changed) = trigger_step(rec, now)?;
            Ok((changed, BulkOutcome::Trigger(out)))
        }
        BulkAction::Edit(edit) => {
            let (changed, out) = apply_edit_rows(rec, edit, now, rows)?;
            Ok((changed, BulkOutcome::Edit(out)))
        }
    }
}

fn invalid(why: Refusal) -> StoreError {
    StoreError::Operation(OperationError::Refused(why))
}

/// Apply `edit` to `rec` at `now` (tests: no edit of theirs writes rows).
#[cfg(test)]
pub fn apply_edit(
    rec: &mut JobRecord,
    edit: &JobEdit,
    now: DateTime<Utc>,
) -> Result<(bool, EditOutcome), StoreError> {
    let mut rows = Vec::new();
    let out = apply_edit_rows(rec, edit, now, &mut rows)?;
    assert!(rows.is_empty(), "this edit wrote rows: use apply_edit_rows");
    Ok(out)
}

/// Apply `edit` to `rec` at `now`. `Ok((changed, outcome))`: persist the record when `changed`,
/// with the rows pushed on `rows` (already counted into the record) in the same store write:
/// `cancel JOB` of an idle job writes a `skipped` row per queued run it drops, so every
/// acknowledged trigger, retry and backfill ends in exactly one row.
pub fn apply_edit_rows(
    rec: &mut JobRecord,
    edit: &JobEdit,
    now: DateTime<Utc>,
    rows: &mut Vec<HistoryRow>,
) -> Result<(bool, EditOutcome), StoreError> {
    let name = rec.def.name.clone();
    match edit {
        JobEdit::Retry(row) => queue_retry(rec, row, now),
        JobEdit::Answer {
            run_id,
            call,
            approve,
            reason,
            by,
        } => answer(rec, (*run_id, call.as_deref()), *approve, (reason, by), now),
        JobEdit::Cancel(run) => cancel(rec, *run, now, rows),
        JobEdit::Backfill { from, to } => queue_backfill(rec, (from, to), now),
        JobEdit::Pause { paused, reason } => {
            let reason = if *paused {
                reason
                    .as_deref()
                    .map(str::trim)
                    .filter(|r| !r.is_empty())
                    .map(|r| crate::model::truncate_marked(r, PAUSE_REASON_MAX))
            } else {
                None
            };
            let changed = set_paused(rec, *paused, now).map_err(StoreError::bad_def(&name))?;
            let reason_changed = rec.rt.pause_reason != reason;
            rec.rt.pause_reason = reason;
            let changed = changed || reason_changed;
            Ok((changed, EditOutcome::Paused { changed }))
        }
    }
}

/// Record an answer to the call run `run_id` awaits approval for, when the run can still use
/// it: the run holds its lease, unexpired at `now`, no cancel is pending, and its call waits
/// unanswered. Anything else is refused, saying why, with nothing written: an answer no run
/// will read is never acknowledged. The run's owner ending a wait at its timeout writes its
/// denial through here too, so an operator's answer and the timeout cannot both win.
fn answer(
    rec: &mut JobRecord,
    (run_id, call): (Uuid, Option<&str>),
    approve: bool,
    (reason, by): (&Option<String>, &Option<String>),
    now: DateTime<Utc>,
) -> Result<(bool, EditOutcome), StoreError> {
    let name = rec.def.name.clone();
    let refuse = |why: String| {
        Err(StoreError::Operation(OperationError::NotAwaiting(format!(
            "run {run_id} of '{name}' {why}"
        ))))
    };
    let Some(lease) = rec.rt.lease_of_mut(run_id) else {
        return refuse("is not running: nothing awaits approval".to_string());
    };
    if lease.lease_until <= now {
        return refuse(format!(
            "cannot use an answer: its owner {} stopped renewing its lease at {} (it ran out at \
             {}); nothing runs the call, and the next owner to claim records the run \
             abandoned",
            lease.owner,
            rfc(lease.last_renewed),
            rfc(lease.lease_until)
        ));
    }
    if let Some(at) = lease.cancel_requested_at {
        return refuse(format!(
            "is being cancelled (asked at {}): its call never runs",
            rfc(at)
        ));
    }
    let Some(a) = lease.awaiting.as_mut() else {
        return refuse(match call {
            Some(c) => format!(
                "has no call {} awaiting approval: no call of it waits (each was answered or \
                 timed out, or it made none)",
                crate::text::line(c)
            ),
            None => "is not awaiting approval (its call was answered or timed out, or it made \
                     none)"
                .to_string(),
        });
    };
    if let Some(c) = call.filter(|c| *c != a.call_id) {
        return refuse(format!(
            "has no call {} awaiting approval: the call that waits is {} (to {}); a call \
             answered before, or one the run never made, takes no answer",
            crate::text::line(c),
            crate::text::line(&a.call_id),
            a.tool
        ));
    }
    if let Some(ans) = &a.answer {
        let what = if ans.approved { "approved" } else { "denied" };
        let by = ans.by.as_deref().map_or_else(
            || " (its wait timed out)".to_string(),
            |b| format!(" by {b}"),
        );
        return refuse(format!(
            "is not awaiting approval: its call to {} was already {what}{by} at {}",
            a.tool,
            rfc(ans.at)
        ));
    }
    a.answer = Some(crate::model::ApprovalAnswer {
        approved: approve,
        reason: reason.clone(),
        by: by.clone(),
        at: now,
    });
    Ok((
        true,
        EditOutcome::Answered {
            run_id,
            tool: a.tool.clone(),
            approved: approve,
        },
    ))
}

fn rfc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// `retry RUN_ID`: queue a retry of a failed, abandoned or missed run of this job.
fn queue_retry(
    rec: &mut JobRecord,
    row: &HistoryRow,
    now: DateTime<Utc>,
) -> Result<(bool, EditOutcome), StoreError> {
    let name = rec.def.name.clone();
    refuse_retired(rec, "retried")?;
    if row.job != name {
        return Err(invalid(Refusal::RunOfAnotherJob {
            run_id: row.run_id,
            job: name,
            run_job: row.job.clone(),
        }));
    }
    if !matches!(
        row.status,
        Status::Failed | Status::Abandoned | Status::Missed
    ) {
        return Err(invalid(Refusal::NotRetryable {
            run_id: row.run_id,
            job: name,
            status: row.status,
        }));
    }
    if rec.rt.queue.iter().any(|q| q.retry_of == Some(row.run_id)) {
        return Err(invalid(Refusal::RetryQueued { run_id: row.run_id }));
    }
    if rec.rt.queue.len() >= QUEUE_MAX {
        return Err(invalid(Refusal::QueueFull {
            job: name,
            max: QUEUE_MAX,
        }));
    }
    rec.rt.queue.push(QueuedRun {
        trigger: Trigger::Retry,
        slot: row.slot,
        requested_at: now,
        retry_of: Some(row.run_id),
    });
    Ok((
        true,
        EditOutcome::Queued {
            added: 1,
            queued: rec.rt.queue.len(),
        },
    ))
}

/// `cancel JOB [RUN_ID]`: ask the live run to stop, or drop the queued runs of an idle job
/// (a `skipped` row each, pushed on `rows`).
fn cancel(
    rec: &mut JobRecord,
    run: Option<uuid::Uuid>,
    now: DateTime<Utc>,
    rows: &mut Vec<HistoryRow>,
) -> Result<(bool, EditOutcome), StoreError> {
    let name = rec.def.name.clone();
    if rec.rt.overlap.leases.is_empty()
        && let Some(lease) = rec.rt.lease.as_mut()
    {
        if let Some(r) = run.filter(|r| *r != lease.run_id) {
            return Err(invalid(Refusal::OtherRunRunning {
                run_id: r,
                job: name,
                running: lease.run_id,
            }));
        }
        let run_id = lease.run_id;
        if lease.cancel_requested_at.is_some() {
            return Ok((false, EditOutcome::AlreadyCancelling { run_id }));
        }
        lease.cancel_requested_at = Some(now);
        return Ok((true, EditOutcome::CancelRequested { run_id }));
    }
    if rec.rt.lease.is_some() {
        return cancel_concurrent(rec, run, now);
    }
    if let Some(r) = run {
        return Err(invalid(Refusal::RunNotRunning {
            run_id: r,
            job: name,
        }));
    }
    let n = rec.rt.queue.len() + usize::from(rec.rt.trigger_requested_at.is_some());
    if n == 0 {
        return Err(invalid(Refusal::NothingToCancel { job: name }));
    }
    let mut dropped = Vec::with_capacity(n);
    if rec.rt.trigger_requested_at.take().is_some() {
        dropped.push((Trigger::Manual, None));
    }
    dropped.extend(rec.rt.queue.drain(..).map(|q| (q.trigger, q.slot)));
    for (trigger, slot) in dropped {
        let mut row = HistoryRow::new(&name, Status::Skipped, trigger, slot, OPERATOR_OWNER, now);
        row.reason = Some(REASON_QUEUED_CANCELLED.to_string());
        // A skipped row costs nothing: counted by status and hour only, so the budget
        // counters (and their period) are left as they are.
        let c = &mut rec.rt.counters;
        *c.by_status.entry(Status::Skipped).or_insert(0) += 1;
        c.count_hour(Status::Skipped, 0.0, now);
        rows.push(row);
    }
    Ok((true, EditOutcome::Dequeued(n)))
}

/// `backfill JOB --from --to`: queue every slot of a past window not queued yet.
fn queue_backfill(
    rec: &mut JobRecord,
    (from, to): (&DateTime<Utc>, &DateTime<Utc>),
    now: DateTime<Utc>,
) -> Result<(bool, EditOutcome), StoreError> {
    let name = rec.def.name.clone();
    refuse_retired(rec, "backfilled")?;
    if from > to {
        return Err(invalid(Refusal::WindowReversed {
            from: *from,
            to: *to,
        }));
    }
    if *to > now {
        return Err(invalid(Refusal::WindowInFuture { to: *to }));
    }
    let sched = backfill_grid(compile(rec).map_err(StoreError::bad_def(&name))?, *from);
    let room = QUEUE_MAX.saturating_sub(rec.rt.queue.len());
    let mut slots = Vec::new();
    let mut queued_already = 0;
    let mut t = sched.next_after(*from - chrono::Duration::milliseconds(1));
    while let Some(s) = t.filter(|s| s <= to) {
        let queued = rec
            .rt
            .queue
            .iter()
            .any(|q| q.trigger == Trigger::Backfill && q.slot == Some(s));
        if queued {
            queued_already += 1;
        } else {
            if slots.len() == room {
                return Err(window_too_big(rec, &sched, &slots, s, *to));
            }
            slots.push(s);
        }
        t = sched.next_after(s);
    }
    if slots.is_empty() {
        return Err(invalid(Refusal::EmptyWindow {
            job: name,
            queued: queued_already,
            from: *from,
            to: *to,
        }));
    }
    let added = slots.len();
    rec.rt.queue.extend(slots.into_iter().map(|s| QueuedRun {
        trigger: Trigger::Backfill,
        slot: Some(s),
        requested_at: now,
        retry_of: None,
    }));
    Ok((
        true,
        EditOutcome::Queued {
            added,
            queued: rec.rt.queue.len(),
        },
    ))
}

/// An `every` grid starts at its anchor (the job's creation); a backfill window before it uses
/// the same grid extended backward, so `every 1h` created at 10:21 backfills 08:21, 09:21, ….
/// Most slots a refused backfill window is counted up to, for its message.
const WINDOW_COUNT_MAX: usize = 100_000;

/// The refusal of a backfill window holding more unqueued slots than the job's queue has room
/// for: how many it holds, how many fit, and what to run instead (the window that fits, or
/// waiting for the queued runs to start).
fn window_too_big(
    rec: &JobRecord,
    sched: &Compiled,
    fits: &[DateTime<Utc>],
    first_out: DateTime<Utc>,
    to: DateTime<Utc>,
) -> StoreError {
    let name = &rec.def.name;
    let queued = |s: DateTime<Utc>| {
        rec.rt
            .queue
            .iter()
            .any(|q| q.trigger == Trigger::Backfill && q.slot == Some(s))
    };
    let mut holds = fits.len() + 1;
    let mut t = sched.next_after(first_out);
    while let Some(s) = t.filter(|s| *s <= to) {
        if holds >= WINDOW_COUNT_MAX {
            break;
        }
        if !queued(s) {
            holds += 1;
        }
        t = sched.next_after(s);
    }
    let holds = if holds >= WINDOW_COUNT_MAX {
        format!("more than {WINDOW_COUNT_MAX}")
    } else {
        holds.to_string()
    };
    let (job, taken, max) = (name.clone(), rec.rt.queue.len(), QUEUE_MAX);
    match fits.last() {
        Some(last) => invalid(Refusal::WindowTooBig {
            job,
            holds,
            fits: fits.len(),
            last_fit: *last,
            taken,
            max,
        }),
        None => invalid(Refusal::QueueTaken {
            job,
            holds,
            taken,
            max,
        }),
    }
}

fn backfill_grid(sched: Compiled, from: DateTime<Utc>) -> Compiled {
    match sched {
        Compiled::Every {
            every_seconds,
            anchor,
        } if from < anchor => {
            let every_ms = (every_seconds as i64).saturating_mul(1000).max(1);
            let back = (anchor - from).num_milliseconds();
            let k = back.div_euclid(every_ms).saturating_add(1);
            let shifted = chrono::Duration::try_milliseconds(k.saturating_mul(every_ms))
                .and_then(|d| anchor.checked_sub_signed(d))
                .unwrap_or(anchor);
            Compiled::Every {
                every_seconds,
                anchor: shifted,
            }
        }
        other => other,
    }
}

fn refuse_retired(rec: &JobRecord, what: &'static str) -> Result<(), StoreError> {
    if rec.rt.retired {
        return Err(invalid(Refusal::Retired {
            job: rec.def.name.clone(),
            reason: rec
                .rt
                .retired_reason
                .clone()
                .unwrap_or_else(|| "retired".to_string()),
            what,
        }));
    }
    Ok(())
}

/// Cancel of a job with several live runs (`overlap: allow`): the named run, else every live
/// run not yet being cancelled (the outcome names the first one marked).
fn cancel_concurrent(
    rec: &mut JobRecord,
    run: Option<Uuid>,
    now: DateTime<Utc>,
) -> Result<(bool, EditOutcome), StoreError> {
    let name = rec.def.name.clone();
    if let Some(r) = run {
        let Some(lease) = rec.rt.lease_of_mut(r) else {
            return Err(invalid(Refusal::RunNotRunning {
                run_id: r,
                job: name,
            }));
        };
        if lease.cancel_requested_at.is_some() {
            return Ok((false, EditOutcome::AlreadyCancelling { run_id: r }));
        }
        lease.cancel_requested_at = Some(now);
        return Ok((true, EditOutcome::CancelRequested { run_id: r }));
    }
    let mut first = None;
    let mut any_live = None;
    let leases = rec
        .rt
        .lease
        .iter_mut()
        .chain(rec.rt.overlap.leases.iter_mut());
    for lease in leases {
        any_live.get_or_insert(lease.run_id);
        if lease.cancel_requested_at.is_none() {
            lease.cancel_requested_at = Some(now);
            first.get_or_insert(lease.run_id);
        }
    }
    match (first, any_live) {
        (Some(run_id), _) => Ok((true, EditOutcome::CancelRequested { run_id })),
        (None, Some(run_id)) => Ok((false, EditOutcome::AlreadyCancelling { run_id })),
        (None, None) => Err(invalid(Refusal::JobNotRunning { job: name })),
    }
}

/// Pause or resume: a paused job records nothing for the slots that pass; on resume
/// it continues at its next future slot.
pub fn set_paused(
    rec: &mut JobRecord,
    paused: bool,
    now: DateTime<Utc>,
) -> Result<bool, ScheduleError> {
    if rec.rt.paused == paused {
        return Ok(false);
    }
    if paused {
        overlap::on_pause(rec, now)?;
    }
    rec.rt.paused = paused;
    if !paused {
        rec.rt.pause_reason = None;
        skip_to_future(rec, now)?;
    }
    Ok(true)
}

/// Pause or resume one job (`set_paused` with the store's error).
pub fn pause_step(rec: &mut JobRecord, paused: bool, now: DateTime<Utc>) -> StoreResult<bool> {
    let name = rec.def.name.clone();
    set_paused(rec, paused, now).map_err(StoreError::bad_def(&name))
}

/// Queue a manual trigger. Returns the outcome and whether the record changed.
pub fn trigger_step(
    rec: &mut JobRecord,
    now: DateTime<Utc>,
) -> StoreResult<(TriggerOutcome, bool)> {
    if rec.rt.retired {
        return Err(StoreError::Operation(OperationError::Retired {
            job: rec.def.name.clone(),
            reason: rec
                .rt
                .retired_reason
                .clone()
                .unwrap_or_else(|| "retired".to_string()),
        }));
    }
    if rec.rt.trigger_requested_at.is_some() {
        return Ok((TriggerOutcome::AlreadyQueued, false));
    }
    if rec.rt.lease.is_some() {
        return Ok((TriggerOutcome::AlreadyRunning, false));
    }
    rec.rt.trigger_requested_at = Some(now);
    Ok((TriggerOutcome::Queued, true))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::plan::claim::evaluate;
    use crate::store::policy::define::tests_support::job;
    use crate::store::policy::run_end::finish_run;

    use crate::testkit::time::base as t;

    fn failed_row(job: &str, at: i64) -> HistoryRow {
        HistoryRow::new(
            job,
            Status::Failed,
            Trigger::Schedule,
            Some(t(at)),
            "o",
            t(at),
        )
    }

    fn claim(r: &mut JobRecord, now: i64) -> Option<crate::store::rules::runtime::ClaimPlan> {
        let sched = crate::store::rules::slots::compile(r).unwrap();
        evaluate(r, &sched, t(now), "o", true, Default::default()).claim
    }

    fn finish(r: &mut JobRecord, trigger: Trigger, status: Status, now: i64) {
        let sched = crate::store::rules::slots::compile(r).unwrap();
        let mut row = HistoryRow::new("a", status, trigger, None, "o", t(now));
        finish_run(r, &sched, &mut row, None, None, Default::default(), t(now));
    }

    #[test]
    fn a_retry_is_a_run_of_its_own_outside_the_slot_rule() {
        let mut r = job("a", t(0));
        let c = claim(&mut r, 0).unwrap();
        assert_eq!(c.trigger, Trigger::Schedule);
        finish(&mut r, Trigger::Schedule, Status::Failed, 1);
        let (runs, next) = (r.rt.runs, r.rt.next_slot);
        let row = failed_row("a", 0);
        let (changed, out) =
            apply_edit(&mut r, &JobEdit::Retry(Box::new(row.clone())), t(2)).unwrap();
        assert!(changed);
        assert_eq!(
            out,
            EditOutcome::Queued {
                added: 1,
                queued: 1
            }
        );
        // Asking twice for the same run is refused; the job's wake-up is the request.
        assert!(apply_edit(&mut r, &JobEdit::Retry(Box::new(row)), t(2)).is_err());
        assert_eq!(crate::store::plan::claim::wakeup(&r), Some(t(2)));
        let c = claim(&mut r, 3).unwrap();
        assert_eq!((c.trigger, c.slot), (Trigger::Retry, Some(t(0))));
        assert!(r.rt.queue.is_empty());
        assert_eq!(r.rt.next_slot, next, "a retry does not move the schedule");
        finish(&mut r, Trigger::Retry, Status::Succeeded, 4);
        assert_eq!(r.rt.runs, runs, "a retry does not count toward max_runs");
    }

    #[test]
    fn only_runs_that_did_not_do_their_work_are_retried() {
        let mut r = job("a", t(0));
        let mut row = failed_row("a", 0);
        row.status = Status::Succeeded;
        let e = apply_edit(&mut r, &JobEdit::Retry(Box::new(row.clone())), t(1)).unwrap_err();
        assert!(e.to_string().contains("only failed"), "{e}");
        row.status = Status::Failed;
        row.job = "b".into();
        let e = apply_edit(&mut r, &JobEdit::Retry(Box::new(row)), t(1)).unwrap_err();
        assert!(e.to_string().contains("belongs to job 'b'"), "{e}");
        assert!(e.is_bad_input());
    }

    #[test]
    fn cancel_marks_the_running_lease_once_and_is_fenced_by_run_id() {
        let mut r = job("a", t(0));
        let c = claim(&mut r, 0).unwrap();
        let other = Uuid::new_v4();
        assert!(apply_edit(&mut r, &JobEdit::Cancel(Some(other)), t(1)).is_err());
        let (ch, out) = apply_edit(&mut r, &JobEdit::Cancel(Some(c.run_id)), t(1)).unwrap();
        assert!(ch);
        assert_eq!(out, EditOutcome::CancelRequested { run_id: c.run_id });
        assert_eq!(r.rt.lease.as_ref().unwrap().cancel_requested_at, Some(t(1)));
        let (ch, out) = apply_edit(&mut r, &JobEdit::Cancel(None), t(2)).unwrap();
        assert!(!ch);
        assert_eq!(out, EditOutcome::AlreadyCancelling { run_id: c.run_id });
    }

    #[test]
    fn cancel_of_an_idle_job_drops_what_is_queued_or_says_there_is_nothing() {
        let mut r = job("a", t(0));
        let e = apply_edit(&mut r, &JobEdit::Cancel(None), t(1)).unwrap_err();
        assert!(e.to_string().contains("nothing to cancel"), "{e}");
        r.rt.trigger_requested_at = Some(t(1));
        apply_edit(&mut r, &JobEdit::Retry(Box::new(failed_row("a", 0))), t(1)).unwrap();
        let mut rows = Vec::new();
        let (_, out) = apply_edit_rows(&mut r, &JobEdit::Cancel(None), t(2), &mut rows).unwrap();
        assert_eq!(out, EditOutcome::Dequeued(2));
        assert!(r.rt.queue.is_empty() && r.rt.trigger_requested_at.is_none());
        // Each dropped run ends in one `skipped` row, counted.
        let got: Vec<_> = rows.iter().map(|w| (w.status, w.trigger)).collect();
        assert_eq!(
            got,
            vec![
                (Status::Skipped, Trigger::Manual),
                (Status::Skipped, Trigger::Retry)
            ]
        );
        assert!(
            rows.iter()
                .all(|w| w.reason.as_deref() == Some(REASON_QUEUED_CANCELLED))
        );
        assert_eq!(r.rt.counters.by_status.get(&Status::Skipped), Some(&2));
    }

    #[test]
    fn a_backfill_window_too_big_for_the_queue_says_what_fits_and_what_to_do() {
        // `job` runs every 60 s from t(0); 999 runs are queued already.
        let mut r = job("a", t(0));
        for k in 0..(QUEUE_MAX as i64 - 1) {
            r.rt.queue.push(QueuedRun {
                trigger: Trigger::Retry,
                slot: Some(t(-100_000 - k)),
                requested_at: t(0),
                retry_of: None,
            });
        }
        let six = JobEdit::Backfill {
            from: t(0),
            to: t(300),
        };
        let why = apply_edit(&mut r, &six, t(1000)).unwrap_err().to_string();
        for words in [
            "holds 6 slots of 'a'",
            "only 1 more fit",
            "999 of the 1000",
            &format!("--to {}", t(0).to_rfc3339()),
        ] {
            assert!(why.contains(words), "{words:?} missing from: {why}");
        }
        // The window that fits goes through.
        let one = JobEdit::Backfill {
            from: t(0),
            to: t(0),
        };
        apply_edit(&mut r, &one, t(1000)).unwrap();
        let why = apply_edit(&mut r, &six, t(1000)).unwrap_err().to_string();
        assert!(
            why.contains("holds 5 slots") && why.contains("none fits"),
            "{why}"
        );
    }

    #[test]
    fn backfill_queues_each_past_slot_once_and_refuses_bad_windows() {
        // `job` runs every 60 s from t(0).
        let mut r = job("a", t(0));
        let edit = JobEdit::Backfill {
            from: t(0),
            to: t(180),
        };
        let (_, out) = apply_edit(&mut r, &edit, t(1000)).unwrap();
        assert_eq!(
            out,
            EditOutcome::Queued {
                added: 4,
                queued: 4
            }
        );
        let slots: Vec<_> = r.rt.queue.iter().map(|q| q.slot.unwrap()).collect();
        assert_eq!(slots, vec![t(0), t(60), t(120), t(180)]);
        // Before the job existed, the same `every` grid extended backward.
        let mut early = job("e", t(0));
        let before = JobEdit::Backfill {
            from: t(-150),
            to: t(-1),
        };
        apply_edit(&mut early, &before, t(10)).unwrap();
        let slots: Vec<_> = early.rt.queue.iter().map(|q| q.slot.unwrap()).collect();
        assert_eq!(slots, vec![t(-120), t(-60)]);
        // The same window again adds nothing new: bad input, nothing changed, and the refusal
        // says the slots are queued already rather than that the window has none.
        let again = apply_edit(&mut r, &edit, t(1000)).unwrap_err().to_string();
        assert!(
            again.contains("all 4 slots of job 'a'") && again.contains("already queued"),
            "{again}"
        );
        let none = JobEdit::Backfill {
            from: t(1),
            to: t(59),
        };
        let none = apply_edit(&mut r, &none, t(1000)).unwrap_err().to_string();
        assert!(none.contains("no slot to backfill"), "{none}");
        let future = JobEdit::Backfill {
            from: t(0),
            to: t(2000),
        };
        assert!(
            apply_edit(&mut r, &future, t(1000))
                .unwrap_err()
                .to_string()
                .contains("future")
        );
        let reversed = JobEdit::Backfill {
            from: t(100),
            to: t(0),
        };
        assert!(apply_edit(&mut r, &reversed, t(1000)).is_err());
        // The due scheduled slot goes first; then each queued slot is its own backfill run,
        // oldest first, and the schedule does not move.
        let c = claim(&mut r, 1001).unwrap();
        assert_eq!(c.trigger, Trigger::Schedule);
        finish(&mut r, Trigger::Schedule, Status::Succeeded, 1002);
        let next = r.rt.next_slot;
        for want in [t(0), t(60), t(120), t(180)] {
            let c = claim(&mut r, 1003).unwrap();
            assert_eq!((c.trigger, c.slot), (Trigger::Backfill, Some(want)));
            finish(&mut r, Trigger::Backfill, Status::Succeeded, 1004);
        }
        assert!(claim(&mut r, 1005).is_none());
        assert_eq!(r.rt.next_slot, next);
    }

    #[test]
    fn pause_reason_is_kept_while_paused_and_cleared_by_resume() {
        let mut r = job("a", t(0));
        let p = JobEdit::Pause {
            paused: true,
            reason: Some("  upstream down ".into()),
        };
        assert_eq!(
            apply_edit(&mut r, &p, t(1)).unwrap().1,
            EditOutcome::Paused { changed: true }
        );
        assert_eq!(r.rt.pause_reason.as_deref(), Some("upstream down"));
        assert!(
            !apply_edit(&mut r, &p, t(2)).unwrap().0,
            "same pause, same reason: no change"
        );
        let resume = JobEdit::Pause {
            paused: false,
            reason: None,
        };
        apply_edit(&mut r, &resume, t(3)).unwrap();
        assert!(!r.rt.paused && r.rt.pause_reason.is_none());
    }
}

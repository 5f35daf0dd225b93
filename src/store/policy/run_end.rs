//! A run's end as its job record takes it: counters, the run's returned state, a 429 hold,
//! retirement, the one-shot recovery of an abandoned run (none for a run an operator asked to
//! cancel), and the overlap rows for the slots
//! that came due while the run was in flight; and the late end of a run already recorded
//! `abandoned`.
//!
//! Owns: [`finish_run`], `supersede_abandoned`. Must not touch: the fencing (the plans check
//! that the run holds the lease), storage, clocks.
//!
//! Decisions:
//! - A run's overlap `skipped` row covers only slots that came due while the run was really in
//!   flight: until its row's `finished_at` (for an abandoned run, its lease expiry). A
//!   completion written late (store unwritable: disk full, database down) does not turn the
//!   slots of the outage into "overlap"; the next claim decides them.
//! - Recurring jobs whose lease was lost, and runs that end after further slots came due, write
//!   one `skipped` row (`reason: "overlap"`) for the slots that passed meanwhile; then the job
//!   waits for its next future slot.
//! - Manual runs (`trigger: manual`, `slot: null`) do not count toward `max_runs`/`once`, nor
//!   do runs whose action did not run (`skipped`: a gate, a budget, missing context;
//!   `no_change`: a monitor's unchanged source; `Status::counts_toward_max_runs`): the slot is
//!   used, the job goes on to its next one. An `at` job has no next one: it retires
//!   `at: slot skipped, did not run`.
//! - A completion that arrives after the lease was taken over (stale) still adds its cost to the
//!   job's counters (real money was spent) but touches nothing else, unless the run was
//!   recorded `abandoned` (its owner was paused, not dead): then its row supersedes that one and
//!   the record follows the real end as far as no newer run decided otherwise (the record keeps
//!   its 8 newest abandoned runs for this). Such a run always counts toward `runs`/`max_runs` (it
//!   executed); reaching `max_runs` that way retires the job, and so does a run whose end brings
//!   `runs` to `max_runs` though its claim did not spend the job. Bound: `max_runs` + 1
//!   executions per run that was recorded `abandoned` while its (stopped) owner still ran it.

use chrono::{DateTime, Utc};

use super::counters::{count_row, unbook, uncount};
use super::{chain, overlap};
use crate::model::{AbandonedRun, BudgetPeriod, HistoryRow, JobRecord, JobState, Status, Trigger};
use crate::schedule::Compiled;
use crate::store::rules::reasons::{
    REASON_OVERLAP, RETIRED_ABANDONED_TWICE, RETIRED_CANCELLED, RETIRED_UNTIL, spent_reason,
};
use crate::store::rules::rows::overlap_row;
use crate::store::rules::runtime::{retire, schedule_spent};

/// What the end of a run did beyond its own row.
#[derive(Debug, Clone, Default)]
pub struct FinishOutcome {
    /// Overlap `skipped` row(s) to append after the run's row.
    pub extra_rows: Vec<HistoryRow>,
    /// Why the run's new notepad was refused (over `crate::model::STATE_MAX_BYTES`); the
    /// prior one stays.
    pub state_rejected: Option<String>,
}

/// Merge a run's returned `state` into the job's. Each part of the state has its own space:
/// only an over-cap notepad is rejected, and then the row's empty reason says so. Returns the
/// rejection (`state_rejected: …`), if any.
pub(crate) fn merge_state(
    rec: &mut JobRecord,
    row: &mut HistoryRow,
    state: JobState,
) -> Option<String> {
    let (merged, rejected) = JobState::merge_capped(&rec.rt.state, state);
    rec.rt.state = merged;
    let why = format!("state_rejected: {}", rejected?);
    if row.reason.as_deref().is_none_or(str::is_empty) {
        row.reason = Some(why.clone());
    }
    Some(why)
}

/// The end of the run holding the job's lease (the caller checked the fence): counters, state,
/// hold, retirement, one-shot recovery and overlap rows. An `abandoned` row
/// (crash recovery or shutdown) follows the recovery table. The run's own `row` has already been
/// counted into nothing: this function counts it and any extra rows.
pub fn finish_run(
    rec: &mut JobRecord,
    sched: &Compiled,
    row: &mut HistoryRow,
    state: Option<JobState>,
    hold_until: Option<DateTime<Utc>>,
    period: BudgetPeriod,
    now: DateTime<Utc>,
) -> FinishOutcome {
    let mut out = FinishOutcome::default();
    let Some(lease) = rec.rt.take_lease(row.run_id) else {
        return out;
    };
    overlap::on_run_end(rec, &lease, row);
    chain::stamp(row, &lease);
    // A coalesced fire's row stands for every overdue slot it covered, whatever its
    // status: nothing is dropped silently.
    if let Some(r) = lease.coalesced
        && row.slots_count.is_none()
        && row.slot == lease.slot
    {
        row.slots_count = Some(r.count);
        row.slot_start = Some(r.first);
        row.slot_end = Some(r.last);
    }
    if let Some(s) = state {
        out.state_rejected = merge_state(rec, row, s);
    }
    let booked = count_row(rec, row, period, now);
    let schedule_spent = schedule_spent(rec, lease.trigger);
    let rt = &mut rec.rt;
    rt.last_status = Some(row.status);
    rt.last_run_at = Some(row.finished_at);
    if row.status == Status::Succeeded {
        rt.last_success_result = row.result.clone();
        rt.last_success_at = Some(row.finished_at);
    }
    if let Some(h) = hold_until {
        rt.hold_until = Some(rt.hold_until.map_or(h, |old| old.max(h)));
    }
    let counts = !lease.trigger.is_extra() && row.status.counts_toward_max_runs();
    if counts {
        rt.runs += 1;
    }
    // `runs` also counts late ends of runs recorded `abandoned` (`supersede_abandoned`), which
    // can reach `max_runs` while a run that did not spend the job is in flight: that run's end
    // retires the job too, so it never claims again.
    let max_reached = counts && rec.def.max_runs.is_some_and(|m| rt.runs >= m);
    let until_passed = rec.def.until.is_some_and(|u| u <= now);
    if row.status == Status::Abandoned {
        // Its owner may only be paused: a late completion supersedes this row.
        if rt.abandoned.len() >= AbandonedRun::KEPT {
            rt.abandoned.remove(0);
        }
        rt.abandoned.push(AbandonedRun {
            run_id: lease.run_id,
            trigger: lease.trigger,
            spends_job: lease.spends_job,
            at: row.finished_at,
            cost_usd: row.cost_usd,
            period_usd: booked,
            period_key: rt.counters.period_key.clone(),
            unread_answer: lease.awaiting.clone().filter(|a| a.answer.is_some()),
        });
        if lease.spends_job {
            if until_passed {
                retire(rt, RETIRED_UNTIL);
            } else if lease.cancel_requested_at.is_some() {
                // The operator asked to cancel it before its owner died: the job is not
                // re-offered, as a cancelled live run is not.
                retire(rt, RETIRED_CANCELLED);
            } else if lease.trigger == Trigger::Recovery || rt.recovery_pending {
                retire(rt, RETIRED_ABANDONED_TWICE);
            } else {
                // One-shot: re-offered once (trigger: recovery).
                rt.recovery_pending = true;
            }
            return out;
        }
    } else {
        if lease.trigger == Trigger::Recovery {
            rt.recovery_pending = false;
        }
        // A run that does not count (`skipped`, `no_change`: its action did not run) leaves
        // `max_runs` to the runs after it: its claim spent the job only if the schedule has
        // nothing more.
        let spent = if counts {
            lease.spends_job || max_reached
        } else {
            lease.spends_job && schedule_spent
        };
        if spent {
            let why = spent_reason(&rec.def, rt.runs, counts);
            retire(rt, why);
            return out;
        }
    }
    // Overlap: slots that came due while this run was in flight. A run abandoned by a crash was
    // only "in flight" until its lease expired: slots after that fell due while no owner was
    // running, and the misfire rule (coalesced fire, or `missed` past the grace) decides them at
    // the next claim.
    // A completion written late (the store was unwritable) ends at its row's `finished_at`:
    // the slots after that fell due while no run was in flight.
    let bound = if row.status == Status::Abandoned {
        lease.lease_until.min(now)
    } else {
        row.finished_at.max(lease.claimed_at).min(now)
    };
    // Slots that fell due during this run before a pause came first (`overlap::on_pause`).
    if let Some(r) = rt.overlap.before_pause.take() {
        let mut o = HistoryRow::new(
            &rec.def.name,
            Status::Skipped,
            Trigger::Schedule,
            Some(r.first),
            &row.owner,
            now,
        );
        o.reason = Some(REASON_OVERLAP.to_string());
        o.slots_count = Some(r.count);
        o.slot_end = Some(r.last);
        out.extra_rows.push(o);
    }
    let paused = rt.paused || !rec.def.enabled;
    let held = rt.hold_until.is_some_and(|h| h > now);
    if rec.def.schedule.is_recurring()
        && !paused
        && !held
        && !rec.def.overlap.acts_while_running()
        && let Some(next) = rt.next_slot.filter(|n| rec.def.fire_at(*n) <= bound)
    {
        let (overlapped, after) = overlap_row(rec, sched, next, bound, &row.owner, now);
        out.extra_rows.extend(overlapped);
        rec.rt.next_slot = after;
    }
    overlap::buffer_one(rec, sched, &mut out.extra_rows);
    let mut extra = std::mem::take(&mut out.extra_rows);
    for r in &mut extra {
        count_row(rec, r, period, now);
    }
    out.extra_rows = extra;
    out
}

/// The late end of a run recorded `abandoned` (its lease lapsed and another owner recovered
/// it, but its owner was paused, not dead): `row` is its real end and supersedes the
/// `abandoned` row (`supersedes_abandoned`; queries hide that row: one row per run, under the
/// status that happened). The counters move the run from `abandoned` to its real status. The
/// job's last status (and last run, last success) follows the real end when no newer run of
/// the job ended since the `abandoned` row; the rest of its current state (state, hold, run
/// count, a one-shot's pending recovery) only when no newer run started either: a late result
/// never changes what a newer run decided (the fencing of is kept).
pub(crate) fn supersede_abandoned(
    rec: &mut JobRecord,
    a: &AbandonedRun,
    row: &mut HistoryRow,
    state: Option<JobState>,
    hold_until: Option<DateTime<Utc>>,
    period: BudgetPeriod,
    now: DateTime<Utc>,
) -> FinishOutcome {
    let mut out = FinishOutcome::default();
    row.supersedes_abandoned = true;
    let last = rec.rt.last_status == Some(Status::Abandoned) && rec.rt.last_run_at == Some(a.at);
    let newest = last && rec.rt.lease.is_none();
    uncount(&mut rec.rt.counters, Status::Abandoned, a.at);
    unbook(&mut rec.rt.counters, a);
    if newest && let Some(s) = state {
        out.state_rejected = merge_state(rec, row, s);
    }
    count_row(rec, row, period, now);
    // The run really ended, so it counts toward `max_runs` whatever ran since (`jobs` RUNS =
    // the rows `stats` counts): a job that reaches `max_runs` this way is retired at once; a
    // run already in flight still ends (the documented bound: `max_runs` + 1 executions for
    // each owner stopped past its lease while it ran one of the job's runs).
    if !a.trigger.is_extra() && row.status.counts_toward_max_runs() {
        rec.rt.runs += 1;
        if !rec.rt.retired && rec.def.max_runs.is_some_and(|m| rec.rt.runs >= m) {
            let why = spent_reason(&rec.def, rec.rt.runs, true);
            retire(&mut rec.rt, why);
        }
    }
    if !last || row.status == Status::Abandoned {
        return out;
    }
    let rt = &mut rec.rt;
    rt.last_status = Some(row.status);
    rt.last_run_at = Some(row.finished_at);
    if row.status == Status::Succeeded {
        rt.last_success_result = row.result.clone();
        rt.last_success_at = Some(row.finished_at);
    }
    if !newest {
        return out;
    }
    if let Some(h) = hold_until {
        rt.hold_until = Some(rt.hold_until.map_or(h, |old| old.max(h)));
    }
    // A one-shot whose only run was recorded `abandoned` waits for its retry (or was retired
    // "abandoned twice"): it did run, so it is spent now, as if it had ended in time.
    let retry_owed =
        rt.recovery_pending || rt.retired_reason.as_deref() == Some(RETIRED_ABANDONED_TWICE);
    // A late end whose action did not run (`skipped`) leaves the recovery owed.
    let ran = row.status.counts_toward_max_runs();
    if a.spends_job && retry_owed && ran {
        let why = spent_reason(&rec.def, rt.runs, ran);
        retire(rt, why);
    }
    out
}

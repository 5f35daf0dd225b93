//! A claim pass over one due job: after any recovery of expired leases, the misfire decision,
//! retirement of a spent job, and the claim of a slot, a queued operator run or a chained run;
//! and the instant a job next needs such a pass ([`wakeup`]).
//!
//! Owns: [`evaluate`], [`claim_step`], [`claim_step_recorded`], [`skip_recorded`], [`wakeup`].
//! Must not touch: I/O, locks, clocks.
//!
//! Decisions:
//! - "Has run before" means a slot was ever claimed (`last_slot` is set).
//! - A coalesced fire (grace null, or a first fire whatever the grace) that stands for more
//!   than one overdue slot carries `slots_count`, `slot_start` (first) and `slot_end` (last) in
//!   its row, like a `missed` row; the job continues at the first slot after the claim instant.
//! - Manual runs do not move the schedule and are allowed while paused or held. A due slot is
//!   claimed before a queued manual trigger of the same job; the trigger stays queued for the
//!   next claim.
//! - An operator run queued before the job retired (manual trigger, retry, backfill) is never
//!   dropped: a spent job still runs it; a job removed from the jobs file records it `skipped`
//!   ([`REASON_QUEUED_REMOVED`]) at the next claim pass.
//! - A 429 hold drops the slots before `hold_until` silently; slots at or after it follow the
//!   misfire rule.
//! - A job whose `until` passed while its next slot lies beyond it is retired on the next claim
//!   pass (reason "until passed").
//! - A job whose slots were decided by a clock ahead of `now` is re-derived first
//!   (`rules::slots::rederive`), logged, by whichever owner looks at it.

use chrono::{DateTime, Utc};

use super::recover::recover_expired;
use crate::model::{BudgetPeriod, HistoryRow, JobRecord, SlotRange, Status, Trigger};
use crate::schedule::{Compiled, ScheduleSpec};
use crate::store::policy::counters::count_row;
use crate::store::policy::{chain, overlap};
use crate::store::rules::reasons::{
    REASON_QUEUED_REMOVED, REASON_REMOVED, RETIRED_NO_SLOTS, RETIRED_UNTIL,
};
use crate::store::rules::rows::is_generated;
use crate::store::rules::runtime::{ClaimPlan, Evaluation, claim, retire};
use crate::store::rules::slots::{
    SLOT_COUNT_CAP, compile, firing_slot, first_at_or_after, ms, rederive, restore_on_return,
    secs_f64,
};

/// Look at one job at `now` for `owner`: misfire, retirement, claims. Leased jobs are left
/// alone (the caller recovers expired leases first with [`recover_expired`]). `can_claim` is false when the
/// owner has no free capacity: rows and retirements still happen, claims do not.
pub fn evaluate(
    rec: &mut JobRecord,
    sched: &Compiled,
    now: DateTime<Utc>,
    owner: &str,
    can_claim: bool,
    period: BudgetPeriod,
) -> Evaluation {
    let mut ev = Evaluation::default();
    let anchor = rec.rt.anchor;
    // A job retired for `until` by a clock ahead comes back first (`rules::slots::rederive`).
    ev.changed |= rec.rt.retired && rederive_logged(rec, now);
    if rec.rt.retired {
        return after_retirement(rec, sched, now, owner, can_claim, period);
    }
    if rec.rt.lease.is_some() && !overlap::claims_beside(rec) {
        // A run is live: only the job's `overlap:` policy may act (cancel it, or skip a slot
        // beyond `max_concurrent_runs`); `skip` and `buffer_one` decide when the run ends.
        return overlap::while_running(rec, sched, now, owner, period);
    }
    let paused = rec.rt.paused || !rec.def.enabled;

    // Slots decided by a clock ahead of this one (stepped forward, then back) would stall the
    // job for as long as the step: they are re-derived from `now` first. Slots a step back
    // moved that way come back once the clock is back where they were decided.
    ev.changed |= restore_logged(rec, now);
    ev.changed |= rederive_logged(rec, now);
    // A job stored again from `now` (or given back the slots it was stored with) has a grid
    // of another phase: the rest of the pass reads the schedule from its new anchor.
    let fresh = (rec.rt.anchor != anchor)
        .then(|| compile(rec).ok())
        .flatten();
    let sched = fresh.as_ref().unwrap_or(sched);

    // A 429 hold that has ended: slots before it are dropped silently.
    if let Some(h) = rec.rt.hold_until
        && h <= now
    {
        rec.rt.hold_until = None;
        if rec.rt.next_slot.is_some_and(|n| n < h) {
            rec.rt.next_slot = first_at_or_after(sched, h);
        }
        ev.changed = true;
    }
    let held = rec.rt.hold_until.is_some_and(|h| h > now);

    // `overlap: buffer_one`: a slot remembered while the last run was live runs first.
    if !paused
        && !held
        && can_claim
        && rec.rt.lease.is_none()
        && let Some(plan) = overlap::claim_buffered(rec, sched, now, owner)
    {
        ev.claim = Some(plan);
        ev.changed = true;
        return ev;
    }

    if rec.rt.recovery_pending {
        if let Some(u) = rec.def.until
            && u <= now
        {
            retire(&mut rec.rt, RETIRED_UNTIL);
            ev.changed = true;
            return ev;
        }
        if !paused && can_claim {
            let slot = rec.rt.last_slot;
            ev.claim = Some(claim(rec, sched, now, owner, slot, Trigger::Recovery));
            ev.changed = true;
        }
        return ev;
    }

    if let Some(u) = rec.def.until
        && u <= now
        && rec.rt.next_slot.is_none_or(|n| n > u)
    {
        retire(&mut rec.rt, RETIRED_UNTIL);
        ev.changed = true;
        return ev;
    }
    let Some(next) = rec.rt.next_slot else {
        // A job with `after:` and no schedule has no slots and is never "out of" them.
        if !paused
            && rec.rt.trigger_requested_at.is_none()
            && rec.rt.queue.is_empty()
            && rec.def.schedule != ScheduleSpec::AfterOnly
        {
            retire(&mut rec.rt, RETIRED_NO_SLOTS);
            ev.changed = true;
            return ev;
        }
        return manual(rec, sched, now, owner, can_claim, ev);
    };

    let never_run = rec.rt.last_slot.is_none();
    let immediate = rec.next_is_immediate();
    // A slot is acted on at its fire instant (slot + jitter); `run_immediately` does not wait.
    if !paused && !held && next <= now && rec.fire_at(next) <= now {
        if immediate {
            if can_claim {
                ev.claim = Some(claim(
                    rec,
                    sched,
                    now,
                    owner,
                    Some(next),
                    Trigger::Immediate,
                ));
                ev.changed = true;
            }
            return ev;
        }
        let slot = firing_slot(rec, sched, next, now);
        // Misfire grace counts from the fire instant, not from the slot.
        let age = now - rec.def.fire_at(slot);
        let grace = rec
            .def
            .misfire_grace_seconds
            .filter(|g| g.is_finite() && *g >= 0.0);
        if !never_run && rec.def.schedule.is_recurring() && grace.is_some_and(|g| age > secs_f64(g))
        {
            let mut row = missed_row(
                rec,
                sched,
                (next, now),
                owner,
                age,
                grace.unwrap_or_default(),
            );
            rec.rt.next_slot = sched.next_after(now);
            count_row(rec, &mut row, period, now);
            ev.rows.push(row);
            ev.changed = true;
            // A queued manual trigger may still run below.
        } else {
            if can_claim {
                ev.claim = Some(claim_slot(rec, sched, (next, slot), now, owner));
                ev.changed = true;
            }
            return ev;
        }
    }
    manual(rec, sched, now, owner, can_claim, ev)
}

thread_local! {
    /// Set while a claim step runs on a copy of a record to see what it would do (a probe):
    /// its re-derivations are logged by the real step that follows, once.
    static PROBING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `f` (a claim step on a copy of a record) without the log lines of its re-derivations:
/// the step on the record itself, which follows, writes them.
pub fn probing<T>(f: impl FnOnce() -> T) -> T {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            PROBING.with(|p| p.set(self.0));
        }
    }
    let _reset = Reset(PROBING.with(|p| p.replace(true)));
    f()
}

fn probing_now() -> bool {
    PROBING.with(std::cell::Cell::get)
}

/// [`restore_on_return`] with its log line: true when the record changed.
pub fn restore_logged(rec: &mut JobRecord, now: DateTime<Utc>) -> bool {
    let Some(what) = restore_on_return(rec, now) else {
        return false;
    };
    if !probing_now() {
        tracing::warn!(job = %rec.def.name, "slots restored: {what}");
    }
    true
}

/// `rederive` with its log line: true when the record changed.
pub fn rederive_logged(rec: &mut JobRecord, now: DateTime<Utc>) -> bool {
    let Some(what) = rederive(rec, now) else {
        return false;
    };
    if probing_now() {
        return true;
    }
    // Kept in the record: `describe` says why the job's slots are not the ones it was given.
    rec.rt.rederived = Some(crate::model::Rederived {
        at: now,
        what: what.clone(),
    });
    tracing::warn!(
        job = %rec.def.name,
        "slots re-derived from {}: {what} (they were decided by a clock ahead of this one)",
        now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    );
    true
}

/// The `missed` row of a slot (or of every overdue slot from `next` to `now`, as one row) that
/// is `age` past its fire instant, over the job's misfire grace.
fn missed_row(
    rec: &JobRecord,
    sched: &Compiled,
    (next, now): (DateTime<Utc>, DateTime<Utc>),
    owner: &str,
    age: chrono::Duration,
    grace: f64,
) -> HistoryRow {
    let mut row = HistoryRow::new(
        &rec.def.name,
        Status::Missed,
        Trigger::Schedule,
        Some(next),
        owner,
        now,
    );
    if let Some((first, last, n)) = sched.slots_between(next - ms(1), now, SLOT_COUNT_CAP) {
        // A `run_immediately` job's first fire instant, put back as its next slot when the
        // clock returned from a step back, lies off its grid: it is one of the slots the row
        // stands for (a row from the grid's first slot left that instant with none).
        let off_grid = first > next && rec.def.run_immediately;
        row.slot = Some(if off_grid { next } else { first });
        row.slot_end = Some(last);
        row.slots_count = Some(if off_grid { n.saturating_add(1) } else { n });
    } else {
        row.slots_count = Some(1);
    }
    row.reason = Some(format!(
        "slot is {}s old, over misfire_grace_seconds {grace}",
        age.num_seconds(),
    ));
    row
}

/// The claim of a due scheduled `slot` (the firing one of the overdue slots from `next`): a
/// recurring job that fires for several overdue slots at once carries them as one coalesced
/// range, on its lease and in its plan. A first fire does too: it is never `missed`, but the
/// slots after its first that came due before its claim are the job's, and the job goes on
/// after them, so its row stands for them rather than leaving them without one.
fn claim_slot(
    rec: &mut JobRecord,
    sched: &Compiled,
    (next, slot): (DateTime<Utc>, DateTime<Utc>),
    now: DateTime<Utc>,
    owner: &str,
) -> ClaimPlan {
    // The fire stands for the overdue slots up to its claim, none after the job's `until`
    // (the job never had those).
    let upto = rec.def.until.map_or(now, |u| u.min(now));
    let coalesced = if rec.def.schedule.is_recurring() {
        sched
            .slots_between(next - ms(1), upto, SLOT_COUNT_CAP)
            .filter(|(_, _, n)| *n > 1)
            .map(|(first, last, count)| SlotRange { first, last, count })
    } else {
        None
    };
    let mut plan = claim(rec, sched, now, owner, Some(slot), Trigger::Schedule);
    if let Some(l) = rec.rt.lease_of_mut(plan.run_id) {
        l.coalesced = coalesced;
    }
    plan.coalesced = coalesced;
    plan
}

/// A retired job's acknowledged operator runs (manual trigger, retries, backfills): nothing
/// queued is dropped silently. A job that retired because it is spent (`at:` ran, `once`,
/// `max_runs`, `until`, abandoned twice) still runs them, one at a time, as it would have
/// before retiring (they do not count toward `max_runs`). A job removed from the jobs file has
/// no definition the operator still wants run: each queued run gets a `skipped` row saying so,
/// at the next claim pass (re-applying the job before that keeps them queued).
fn after_retirement(
    rec: &mut JobRecord,
    sched: &Compiled,
    now: DateTime<Utc>,
    owner: &str,
    can_claim: bool,
    period: BudgetPeriod,
) -> Evaluation {
    let mut ev = Evaluation::default();
    let pending = rec.rt.trigger_requested_at.is_some() || !rec.rt.queue.is_empty();
    if !pending {
        return ev;
    }
    if rec.rt.retired_reason.as_deref() == Some(REASON_REMOVED) {
        let mut rows = Vec::new();
        if rec.rt.trigger_requested_at.take().is_some() {
            rows.push((Trigger::Manual, None));
        }
        rows.extend(rec.rt.queue.drain(..).map(|q| (q.trigger, q.slot)));
        for (trigger, slot) in rows {
            let mut row =
                HistoryRow::new(&rec.def.name, Status::Skipped, trigger, slot, owner, now);
            row.reason = Some(REASON_QUEUED_REMOVED.to_string());
            count_row(rec, &mut row, period, now);
            ev.rows.push(row);
        }
        ev.changed = true;
        return ev;
    }
    if !can_claim || rec.rt.lease.is_some() {
        return ev;
    }
    if rec.rt.trigger_requested_at.take().is_some() {
        ev.claim = Some(claim(rec, sched, now, owner, None, Trigger::Manual));
    } else {
        let q = rec.rt.queue.remove(0);
        ev.claim = Some(claim(rec, sched, now, owner, q.slot, q.trigger));
    }
    ev.changed = true;
    ev
}

fn manual(
    rec: &mut JobRecord,
    sched: &Compiled,
    now: DateTime<Utc>,
    owner: &str,
    can_claim: bool,
    mut ev: Evaluation,
) -> Evaluation {
    // Operator runs never start beside a live run (`overlap: allow` runs slots concurrently).
    let can_claim = can_claim && rec.rt.lease.is_none();
    if can_claim && rec.rt.trigger_requested_at.is_some() {
        rec.rt.trigger_requested_at = None;
        ev.claim = Some(claim(rec, sched, now, owner, None, Trigger::Manual));
        ev.changed = true;
    } else if can_claim && !rec.rt.queue.is_empty() {
        // Retries and backfill slots, oldest request first: runs of their own.
        let q = rec.rt.queue.remove(0);
        ev.claim = Some(claim(rec, sched, now, owner, q.slot, q.trigger));
        ev.changed = true;
    } else if can_claim
        && chain::ready(rec)
        && !rec.rt.paused
        && rec.def.enabled
        && rec.rt.hold_until.is_none_or(|h| h <= now)
    {
        // `after:` parents finished: a run of its own, `trigger: chain`.
        let parents = chain::take(rec);
        ev.claim = Some(claim(rec, sched, now, owner, None, Trigger::Chain));
        if let Some(l) = rec.rt.lease.as_mut() {
            l.chain = parents;
        }
        ev.changed = true;
    }
    ev
}

/// One job during `claim_due`: recover an expired lease, then evaluate.
/// `landed` is the run's own row when the store found it already written (the process died
/// between the row and the record): the job is finished from it and no second row is written.
pub fn claim_step(
    rec: &mut JobRecord,
    sched: &Compiled,
    now: DateTime<Utc>,
    owner: &str,
    can_claim: bool,
    period: BudgetPeriod,
    landed: Option<HistoryRow>,
) -> Evaluation {
    let landed: Vec<HistoryRow> = landed.into_iter().collect();
    claim_step_recorded(rec, sched, now, owner, can_claim, period, landed, &[])
}

/// [`claim_step`] when the store knows rows of the job already in history that its record does
/// not account for (`recorded`: a failed or dead writer's `missed`/overlap rows): after any
/// recovery, the job's next slot moves past the slots they record ([`skip_recorded`]) before it
/// is evaluated, so no slot such a row records is claimed or recorded again. `landed` holds
/// the own rows found in history of any of the expired runs (`overlap: allow` holds several
/// leases; a writer that failed between their rows and the record leaves a row for each):
/// each is finished from its row, never recorded `abandoned` beside it.
#[allow(clippy::too_many_arguments)]
pub fn claim_step_recorded(
    rec: &mut JobRecord,
    sched: &Compiled,
    now: DateTime<Utc>,
    owner: &str,
    can_claim: bool,
    period: BudgetPeriod,
    landed: Vec<HistoryRow>,
    recorded: &[HistoryRow],
) -> Evaluation {
    let (mut rows, mut dirty) = recover_expired(rec, sched, now, owner, period, landed);
    dirty |= skip_recorded(rec, sched, recorded);
    let mut ev = evaluate(rec, sched, now, owner, can_claim, period);
    rows.append(&mut ev.rows);
    ev.rows = rows;
    ev.changed |= dirty;
    ev
}

/// Move the job's next slot past every slot that a generated row already in history records
/// (`recorded`: `missed` or overlap `skipped` rows a failed or dead writer left, which the
/// record does not account for). Such a writer may have looked at a later clock than this one
/// (the clock stepped back since), so its row can reach past the slot this record would claim
/// next: fault-simulator seeds 554 (a recovery finishing from a late completion whose overlap
/// row reached past the recoverer's clock) and 7937 (a dead claimer's `missed` row). Returns
/// whether the next slot moved.
pub fn skip_recorded(rec: &mut JobRecord, sched: &Compiled, recorded: &[HistoryRow]) -> bool {
    let mut moved = false;
    while let Some(next) = rec.rt.next_slot {
        let Some(end) = recorded
            .iter()
            .filter(|r| r.job == rec.def.name && is_generated(r))
            .filter_map(|r| Some((r.slot?, r.slot_end.or(r.slot)?)))
            .filter(|(s, e)| *s <= next && *e >= next)
            .map(|(_, e)| e)
            .max()
        else {
            break;
        };
        rec.rt.next_slot = sched.next_after(end);
        moved = true;
    }
    moved
}

/// Whether the record accounts for generated row `row` of its job: every slot the row records
/// lies behind the job's next slot (or it has none), so the record never fires one of them
/// again. The file store moves its accounted mark past a failed writer's row only then.
pub fn slots_behind(rec: &JobRecord, row: &HistoryRow) -> bool {
    let Some(end) = row.slot_end.or(row.slot) else {
        return true;
    };
    rec.rt.next_slot.is_none_or(|n| n > end)
}

/// The earliest instant at which `evaluate` (or lease recovery) may act on this job.
pub fn wakeup(rec: &JobRecord) -> Option<DateTime<Utc>> {
    let rt = &rec.rt;
    if rt.lease.is_some() {
        return overlap::wakeup_while_running(rec);
    }
    if rt.retired {
        // Only its queued operator runs are left to act on (`after_retirement`).
        let t = rt.queue.iter().map(|q| q.requested_at).min();
        return [rt.trigger_requested_at, t].into_iter().flatten().min();
    }
    let paused = rt.paused || !rec.def.enabled;
    let mut w: Option<DateTime<Utc>> = None;
    let mut take = |t: DateTime<Utc>| w = Some(w.map_or(t, |x: DateTime<Utc>| x.min(t)));
    if let Some(t) = rt.trigger_requested_at {
        take(t);
    }
    if let Some(t) = rt.queue.iter().map(|q| q.requested_at).min() {
        take(t);
    }
    if paused {
        return w;
    }
    if let Some(b) = rt.overlap.buffered_slot {
        take(rt.hold_until.map_or(b, |h| b.max(h)));
    }
    if chain::ready(rec) {
        // A chained run waits for a 429 hold like a slot.
        let t = rt.chain_pending.values().map(|p| p.finished_at).max();
        if let Some(t) = t {
            take(rt.hold_until.map_or(t, |h| t.max(h)));
        }
    }
    if rt.recovery_pending {
        take(rt.created_at.min(rt.last_slot.unwrap_or(rt.created_at)));
    }
    match rt.next_slot {
        Some(n) => {
            let fire = rec.fire_at(n);
            let n = rt.hold_until.map_or(fire, |h| fire.max(h));
            take(n);
        }
        None if rec.def.schedule == ScheduleSpec::AfterOnly => {}
        None => take(rt.created_at),
    }
    if let Some(u) = rec.def.until {
        // A held job is not looked at before its hold ends, `until` or not (no busy wake-ups).
        take(rt.hold_until.map_or(u, |h| u.max(h)));
    }
    w
}

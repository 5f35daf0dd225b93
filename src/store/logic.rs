//! The store-independent decisions of SPEC §5 (misfire), §6 (claims, leases, overlap, crash
//! recovery) and §7 (retirement), written once for the file store and the PostgreSQL store.
//!
//! Owns: what happens to one [`JobRecord`] when an owner looks at it at `now` (claim it, write a
//! `missed` row, retire it, or nothing), what a run's end does to it (counters, state, overlap
//! rows, retirement, one-shot recovery) and what `apply`, pause and resume do to its runtime.
//! Must not touch: I/O, locks, clocks (every function takes `now`), history storage. Callers
//! persist the mutated record and the returned rows, history rows first.
//!
//! The per-record steps of every store operation — apply/retire ([`apply_all`]), pause,
//! trigger, claim with crash recovery ([`claim_step`]), renew and fenced completion
//! ([`complete_step`]) — live here once; the file and PostgreSQL stores only lock, load the
//! records and persist what these return.
//!
//! Decisions where the SPEC is silent (also listed in the report):
//! - An `every` job's first slot is its anchor, the instant it was first stored (SPEC §3.1), so a
//!   new `every` job fires at once. A cron job's first slot is the first cron instant ≥ creation.
//! - "Has run before" (§5) means a slot was ever claimed (`last_slot` is set).
//! - A coalesced fire (grace null) names its scheduled instant per SPEC §5: for cron the LATEST
//!   slot at or before now, for `every` the first overdue slot. When it stands for more than one
//!   overdue slot, its row carries `slots_count`, `slot_start` (first) and `slot_end` (last),
//!   like a `missed` row; the job continues at the first slot after the claim instant.
//! - A run's overlap `skipped` row covers only slots that came due while the run was really in
//!   flight: until its row's `finished_at` (or, for an abandoned run, its lease expiry). A
//!   completion written late (store unwritable: disk full, database down) does not turn the
//!   slots of the outage into "overlap"; §5 decides them at the next claim.
//! - Manual runs (`trigger: manual`, `slot: null`) do not count toward `max_runs`/`once`, do not
//!   move the schedule, and are allowed while paused or held. A due slot is claimed before a
//!   queued manual trigger of the same job; the trigger stays queued for the next claim.
//! - `run_immediately`: the first claim fires with `trigger: immediate` for the creation instant
//!   (for `every` that is also the first grid slot); it counts as a run.
//! - Recurring jobs whose lease was lost, and runs that end after further slots came due, write
//!   ONE `skipped` row (`reason: "overlap"`) for the slots that passed meanwhile; then the job
//!   waits for its next future slot.
//! - A completion that arrives after the lease was taken over (stale) still adds its cost to the
//!   job's counters (real money was spent) but touches nothing else — unless the run was
//!   recorded `abandoned` (its owner was paused, not dead): then its row supersedes that one
//!   and the record follows the real end as far as no newer run decided otherwise
//!   (`supersede_abandoned`; the record keeps its 8 newest abandoned runs for this). Such a run
//!   always counts toward `runs`/`max_runs` (it executed); reaching `max_runs` that way retires
//!   the job, and so does a run whose end brings `runs` to `max_runs` though its claim did not
//!   spend the job. Bound: `max_runs` + 1 executions per run that was recorded `abandoned`
//!   while its (stopped) owner still ran it.
//! - An operator run queued before the job retired (manual trigger, retry, backfill) is never
//!   dropped: a spent job still runs it; a job removed from the jobs file records it `skipped`
//!   ([`REASON_QUEUED_REMOVED`]) at the next claim pass (red team 5).
//! - A 429 hold drops the slots before `hold_until` silently; slots at or after it follow §5.
//! - A job whose `until` passed while its next slot lies beyond it is retired on the next claim
//!   pass (reason "until passed").

use chrono::{DateTime, Duration, Utc};
use uuid::Uuid;

use std::collections::{BTreeMap, HashSet};

use super::{ApplyReport, CompleteOutcome, Completion, StoreError, StoreResult, TriggerOutcome};
use crate::model::{
    AbandonedRun, BudgetPeriod, HistoryRow, JobDef, JobRecord, JobRuntime, JobState, JobsFile,
    Lease, Settings, SlotRange, Status, Trigger,
};
use crate::schedule::{Compiled, ScheduleError, ScheduleSpec};

/// Cap on counting slots of one `missed`/overlap row (cron ranges are counted one by one).
pub const SLOT_COUNT_CAP: u64 = 100_000;

/// The `reason` of a slot that came due while a run of the job was live.
pub const REASON_OVERLAP: &str = "overlap";
/// The `retired_reason` of a job that left the jobs file (applying it again brings it back).
pub const REASON_REMOVED: &str = "removed from the jobs file";

/// Compile a stored job's schedule against its runtime anchor.
pub fn compile(rec: &JobRecord) -> Result<Compiled, ScheduleError> {
    rec.def.compile(rec.rt.anchor)
}

/// What changed from the stored settings `old` to `new`, in words for `apply`'s report: the
/// budget's period, limit, its addition or removal, then "other settings" for the rest.
pub fn settings_changes(old: &Settings, new: &Settings) -> Vec<String> {
    use crate::cost::{period_word, usd};
    let mut out = Vec::new();
    let (po, pn) = (counter_period(old), counter_period(new));
    match (old.budget, new.budget) {
        (None, Some(b)) => out.push(format!(
            "budget added: {}/{}",
            usd(b.max_cost_usd),
            period_word(b.period)
        )),
        (Some(_), None) => out.push("budget removed".to_string()),
        (Some(a), Some(b)) if a.max_cost_usd != b.max_cost_usd => out.push(format!(
            "budget limit {} → {}",
            usd(a.max_cost_usd),
            usd(b.max_cost_usd)
        )),
        _ => {}
    }
    if po != pn {
        out.push(format!(
            "budget period {} → {}",
            period_word(po),
            period_word(pn)
        ));
    }
    if out.is_empty() && old != new {
        out.push("other settings".to_string());
    }
    out
}

/// The budget period counters are kept in: the global budget's, else `settings.period`.
pub fn counter_period(settings: &Settings) -> BudgetPeriod {
    settings.budget.map(|b| b.period).unwrap_or(settings.period)
}

pub(super) fn ms(n: i64) -> Duration {
    Duration::milliseconds(n)
}

/// Seconds from the jobs file as a duration, clamped to [0, 100 years] so `now + d` can never
/// leave chrono's range (config bounds the values too; this is the last line of defence).
fn secs_f64(s: f64) -> Duration {
    const MAX_SECS: f64 = 100.0 * 365.25 * 86_400.0;
    let s = if s.is_finite() && s > 0.0 {
        s.min(MAX_SECS)
    } else {
        0.0
    };
    Duration::milliseconds((s * 1000.0) as i64)
}

/// The first slot at or after `t`.
fn first_at_or_after(sched: &Compiled, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
    sched.next_after(t - ms(1))
}

/// Anchor and first slot of a job stored (or re-anchored) at `now`.
fn initial_slots(
    def: &JobDef,
    now: DateTime<Utc>,
) -> Result<(DateTime<Utc>, Option<DateTime<Utc>>), ScheduleError> {
    let spec = &def.schedule;
    let anchor = match spec {
        ScheduleSpec::In { seconds } => now + Duration::seconds(*seconds as i64),
        _ => now,
    };
    let compiled = def.compile(anchor)?;
    let first = match spec {
        ScheduleSpec::Every { .. } => Some(anchor),
        ScheduleSpec::At { at } => Some(*at),
        ScheduleSpec::In { .. } => Some(anchor),
        ScheduleSpec::Cron { .. } | ScheduleSpec::AtTime { .. } => {
            first_at_or_after(&compiled, now)
        }
        ScheduleSpec::AfterOnly => None,
    };
    // A first slot on a date the job's calendars exclude is not a slot.
    let first = match first {
        Some(f) if !def.days.is_empty() => first_at_or_after(&compiled, f),
        other => other,
    };
    Ok((anchor, first))
}

/// A fresh record for a job first stored at `now`.
pub fn new_record(def: JobDef, now: DateTime<Utc>) -> Result<JobRecord, ScheduleError> {
    let (anchor, first) = initial_slots(&def, now)?;
    let next_slot = if def.run_immediately {
        // The immediate fire stands for the creation instant (SPEC §2.1 run_immediately).
        Some(now.min(first.unwrap_or(now)))
    } else {
        first
    };
    Ok(JobRecord {
        def,
        rt: JobRuntime {
            created_at: now,
            anchor,
            next_slot,
            last_slot: None,
            last_run_at: None,
            last_status: None,
            runs: 0,
            paused: false,
            retired: false,
            retired_reason: None,
            lease: None,
            trigger_requested_at: None,
            queue: Vec::new(),
            pause_reason: None,
            hold_until: None,
            recovery_pending: false,
            last_success_result: None,
            last_success_at: None,
            counters: Default::default(),
            state: JobState::default(),
            overlap: Default::default(),
            chain_pending: Default::default(),
            chain_seen: Default::default(),
            abandoned: Vec::new(),
        },
    })
}

/// What `apply` did to one existing job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyChange {
    /// The definition did not change.
    Unchanged,
    /// The record took the new definition (re-anchored when the schedule changed).
    Updated,
}

/// Bring an existing record up to date with `def` (SPEC §13.2 `apply`). A schedule change
/// re-anchors the job (new grid from `now`); an unchanged `in 10m` keeps its resolved instant.
/// A job retired because it left the jobs file comes back; a spent job stays retired unless its
/// schedule changed.
pub fn apply_def(
    rec: &mut JobRecord,
    def: &JobDef,
    now: DateTime<Utc>,
) -> Result<ApplyChange, ScheduleError> {
    let removed = rec.rt.retired && rec.rt.retired_reason.as_deref() == Some(REASON_REMOVED);
    if rec.def == *def && !removed {
        return Ok(ApplyChange::Unchanged);
    }
    let schedule_changed = rec.def.schedule != def.schedule;
    let days_changed = rec.def.days != def.days;
    let was_enabled = rec.def.enabled;
    if was_enabled && !def.enabled {
        // Disabled while a run is live: like a pause, under the policy the slots fell due in.
        super::overlap::on_pause(rec, now)?;
    }
    rec.def = def.clone();
    if schedule_changed {
        let (anchor, first) = initial_slots(def, now)?;
        rec.rt.anchor = anchor;
        rec.rt.next_slot = first;
        rec.rt.recovery_pending = false;
    } else if days_changed {
        // New calendars: the next slot is the first one they allow from where the job stood
        // (the grid and its anchor stay; no slot before `now` is invented).
        let sched = compile(rec)?;
        let from = rec.rt.next_slot.map_or(now, |n| n.min(now));
        rec.rt.next_slot = first_at_or_after(&sched, from);
    } else {
        // Validate the (unchanged) schedule still compiles, e.g. the tz is known.
        compile(rec)?;
    }
    if removed || (schedule_changed && rec.rt.retired) {
        rec.rt.retired = false;
        rec.rt.retired_reason = None;
        if !schedule_changed {
            // Coming back after removal: continue at the next future slot.
            skip_to_future(rec, now)?;
        }
    }
    if !was_enabled && def.enabled && !schedule_changed {
        skip_to_future(rec, now)?;
    }
    Ok(ApplyChange::Updated)
}

/// Move a recurring job's next slot past `now` without recording anything (resume, re-enable).
/// A never-run job and `at` jobs keep their slot: their first fire is never a lost recurrence.
fn skip_to_future(rec: &mut JobRecord, now: DateTime<Utc>) -> Result<(), ScheduleError> {
    if rec.rt.last_slot.is_none() || !rec.def.schedule.is_recurring() {
        return Ok(());
    }
    let sched = compile(rec)?;
    if rec.rt.next_slot.is_some_and(|n| n <= now) {
        rec.rt.next_slot = sched.next_after(now);
    }
    Ok(())
}

/// Pause or resume (SPEC §6): a paused job records nothing for the slots that pass; on resume
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
        super::overlap::on_pause(rec, now)?;
    }
    rec.rt.paused = paused;
    if !paused {
        rec.rt.pause_reason = None;
        skip_to_future(rec, now)?;
    }
    Ok(true)
}

/// A claim decided for a job; the record already carries the lease.
#[derive(Debug, Clone)]
pub struct ClaimPlan {
    /// The run's id: the lease's fencing token.
    pub run_id: Uuid,
    /// The slot the run stands for (`None` for a manual run).
    pub slot: Option<DateTime<Utc>>,
    /// Why the run happens.
    pub trigger: Trigger,
    /// When the lease expires unless renewed.
    pub lease_until: DateTime<Utc>,
    /// The overdue slots this fire stands for, when it coalesced several (SPEC §5).
    pub coalesced: Option<SlotRange>,
}

/// The result of looking at one unleased job during `claim_due`.
#[derive(Debug, Clone, Default)]
pub struct Evaluation {
    /// The record was modified and must be persisted.
    pub changed: bool,
    /// Rows to append (history first, then the record).
    pub rows: Vec<HistoryRow>,
    /// The run to start, when the job is due and claimable.
    pub claim: Option<ClaimPlan>,
}

fn retire(rt: &mut JobRuntime, reason: &str) {
    rt.retired = true;
    // No more slots: `jobs` and the console must not show a next run for a retired job.
    rt.next_slot = None;
    rt.retired_reason = Some(reason.to_string());
    rt.recovery_pending = false;
    // Operator runs already acknowledged (a manual trigger, retries, backfills) are kept: a
    // spent job still runs them ([`after_retirement`]); they never count toward `max_runs`.
    rt.overlap.buffered_slot = None;
    rt.overlap.superseded = None;
    rt.overlap.before_pause = None;
}

/// The slot a due job fires now: the newest passed slot, taken only once its own (jittered)
/// fire instant has come, else `next`.
pub(super) fn firing_slot(
    rec: &JobRecord,
    sched: &Compiled,
    next: DateTime<Utc>,
    now: DateTime<Utc>,
) -> DateTime<Utc> {
    let slot = scheduled_instant(sched, next, now);
    if rec.def.fire_at(slot) <= now {
        slot
    } else {
        next
    }
}

/// The scheduled instant of a due job (SPEC §5).
pub(super) fn scheduled_instant(
    sched: &Compiled,
    next_slot: DateTime<Utc>,
    now: DateTime<Utc>,
) -> DateTime<Utc> {
    match sched.base() {
        Compiled::Every { .. } | Compiled::OnDays(..) => next_slot,
        Compiled::Cron(_) => sched
            .latest_at_or_before(now)
            .filter(|s| *s >= next_slot)
            .unwrap_or(next_slot),
        Compiled::At(at) => *at,
        Compiled::Never => next_slot,
    }
}

/// Look at one job at `now` for `owner` (SPEC §5, §6, §7). Leased jobs are left alone (the
/// caller recovers expired leases first with [`finish_run`]). `can_claim` is false when the
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
    if rec.rt.retired {
        return after_retirement(rec, sched, now, owner, can_claim, period);
    }
    if rec.rt.lease.is_some() && !super::overlap::claims_beside(rec) {
        // A run is live: only the job's `overlap:` policy may act (cancel it, or skip a slot
        // beyond `max_concurrent_runs`); `skip` and `buffer_one` decide when the run ends.
        return super::overlap::while_running(rec, sched, now, owner, period);
    }
    let paused = rec.rt.paused || !rec.def.enabled;

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
        && let Some(plan) = super::overlap::claim_buffered(rec, sched, now, owner)
    {
        ev.claim = Some(plan);
        ev.changed = true;
        return ev;
    }

    if rec.rt.recovery_pending {
        if let Some(u) = rec.def.until
            && u <= now
        {
            retire(&mut rec.rt, "until passed");
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
        retire(&mut rec.rt, "until passed");
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
            retire(&mut rec.rt, "no more slots");
            ev.changed = true;
            return ev;
        }
        return manual(rec, sched, now, owner, can_claim, ev);
    };

    let never_run = rec.rt.last_slot.is_none();
    let immediate = never_run && rec.def.run_immediately;
    // A slot is acted on at its fire instant (slot + jitter); `run_immediately` does not wait.
    if !paused && !held && next <= now && (immediate || rec.def.fire_at(next) <= now) {
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
            let mut row = HistoryRow::new(
                &rec.def.name,
                Status::Missed,
                Trigger::Schedule,
                Some(next),
                owner,
                now,
            );
            if let Some((first, last, n)) = sched.slots_between(next - ms(1), now, SLOT_COUNT_CAP) {
                row.slot = Some(first);
                row.slot_end = Some(last);
                row.slots_count = Some(n);
            } else {
                row.slots_count = Some(1);
            }
            row.reason = Some(format!(
                "slot is {}s old, over misfire_grace_seconds {}",
                age.num_seconds(),
                grace.unwrap_or_default()
            ));
            rec.rt.next_slot = sched.next_after(now);
            count_row(rec, &row, period, now);
            ev.rows.push(row);
            ev.changed = true;
            // A queued manual trigger may still run below.
        } else {
            if can_claim {
                let coalesced = if !never_run && rec.def.schedule.is_recurring() {
                    sched
                        .slots_between(next - ms(1), now, SLOT_COUNT_CAP)
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
                ev.claim = Some(plan);
                ev.changed = true;
            }
            return ev;
        }
    }
    manual(rec, sched, now, owner, can_claim, ev)
}

/// The reason of the `skipped` row of an operator run queued on a job that left the jobs file.
pub const REASON_QUEUED_REMOVED: &str =
    "job removed from the jobs file before this queued run started";

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
            count_row(rec, &row, period, now);
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
        // Retries and backfill slots, oldest request first: runs of their own (SPEC issue 12).
        let q = rec.rt.queue.remove(0);
        ev.claim = Some(claim(rec, sched, now, owner, q.slot, q.trigger));
        ev.changed = true;
    } else if can_claim
        && super::chain::ready(rec)
        && !rec.rt.paused
        && rec.def.enabled
        && rec.rt.hold_until.is_none_or(|h| h <= now)
    {
        // `after:` parents finished (issue 16 item 1): a run of its own, `trigger: chain`.
        let parents = super::chain::take(rec);
        ev.claim = Some(claim(rec, sched, now, owner, None, Trigger::Chain));
        if let Some(l) = rec.rt.lease.as_mut() {
            l.chain = parents;
        }
        ev.changed = true;
    }
    ev
}

/// Take the job: pre-advance the slot, set the lease and a fresh run_id (the fencing token).
pub(super) fn claim(
    rec: &mut JobRecord,
    sched: &Compiled,
    now: DateTime<Utc>,
    owner: &str,
    slot: Option<DateTime<Utc>>,
    trigger: Trigger,
) -> ClaimPlan {
    let rt = &mut rec.rt;
    let def = &rec.def;
    let run_id = Uuid::new_v4();
    let spends_job = match trigger {
        Trigger::Manual | Trigger::Retry | Trigger::Backfill | Trigger::Chain => false,
        Trigger::Recovery => true,
        Trigger::Schedule | Trigger::Immediate => {
            rt.last_slot = slot;
            let after = slot.map_or(now, |s| s.max(now));
            rt.next_slot = sched.next_after(after);
            let at_fire = trigger == Trigger::Schedule && def.schedule.is_at();
            let max_reached = def.max_runs.is_some_and(|m| rt.runs + 1 >= m);
            let until_spent = def
                .until
                .is_some_and(|u| rt.next_slot.is_none_or(|n| n > u));
            at_fire || max_reached || until_spent || rt.next_slot.is_none()
        }
    };
    let lease_until = now + secs_f64(def.lease_seconds);
    rt.add_lease(Lease {
        owner: owner.to_string(),
        run_id,
        slot,
        trigger,
        claimed_at: now,
        lease_until,
        last_renewed: now,
        spends_job,
        coalesced: None,
        cancel_requested_at: None,
        lapsed: false,
        chain: Vec::new(),
    });
    ClaimPlan {
        run_id,
        slot,
        trigger,
        lease_until,
        coalesced: None,
    }
}

/// Extend the lease held by `run_id` (SPEC §6). `None` when the lease was lost.
pub fn renew(rec: &mut JobRecord, run_id: Uuid, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let lease_seconds = rec.def.lease_seconds;
    let lease = rec.rt.lease_of_mut(run_id)?;
    if now > lease.lease_until {
        lease.lapsed = true;
    }
    lease.lease_until = now + secs_f64(lease_seconds);
    lease.last_renewed = now;
    Some(lease.lease_until)
}

/// Whether `run_id` holds the job's lease and it lapsed at some point (expired at `now`, or
/// renewed after it expired): another owner may have begun recovering it.
pub fn lapsed(rec: &JobRecord, run_id: Uuid, now: DateTime<Utc>) -> bool {
    rec.rt
        .lease_of(run_id)
        .is_some_and(|l| l.lapsed || l.lease_until <= now)
}

/// Whether the job's lease is held by `run_id`.
pub fn holds(rec: &JobRecord, run_id: Uuid) -> bool {
    rec.rt.lease_of(run_id).is_some()
}

/// Add one history row to the job's counters (every row counts by status; cost by period).
pub fn count_row(rec: &mut JobRecord, row: &HistoryRow, period: BudgetPeriod, now: DateTime<Utc>) {
    let key = period.key(now);
    // Money reserved in an earlier period is booked there (it fitted that period's budget),
    // never into the current one, whose budget may already be full (midnight rollover).
    let elsewhere = super::budget::absorb_settled(rec, row, &key);
    let c = &mut rec.rt.counters;
    // A new period starts from what the old counters say was spent inside it: 0 for an older
    // period of the same kind, carried over after an edit of the budget's `period`.
    let carried = super::budget::counter_spend(c, &key);
    *c.by_status.entry(row.status).or_insert(0) += 1;
    let cost = if row.cost_usd.is_finite() && row.cost_usd > 0.0 {
        row.cost_usd
    } else {
        0.0
    };
    c.total_cost_usd += cost;
    c.runtime_ms = c.runtime_ms.saturating_add(row.duration_ms);
    if c.period_key != key {
        c.period_key = key;
        c.period_cost_usd = carried;
    }
    c.period_cost_usd += (cost - elsewhere).max(0.0);
    if row.unpriced {
        c.cost_incomplete = true;
    }
    c.count_hour(row.status, cost, now);
}

/// What the end of a run did beyond its own row.
#[derive(Debug, Clone, Default)]
pub struct FinishOutcome {
    /// Overlap `skipped` row(s) to append after the run's row.
    pub extra_rows: Vec<HistoryRow>,
    /// Why the run's new notepad was refused (over [`crate::model::STATE_MAX_BYTES`]); the
    /// prior one stays.
    pub state_rejected: Option<String>,
}

/// Merge a run's returned `state` into the job's. Each part of the state has its own space:
/// only an over-cap notepad is rejected, and then the row's empty reason says so. Returns the
/// rejection (`state_rejected: …`), if any.
fn merge_state(rec: &mut JobRecord, row: &mut HistoryRow, state: JobState) -> Option<String> {
    let (merged, rejected) = JobState::merge_capped(&rec.rt.state, state);
    rec.rt.state = merged;
    let why = format!("state_rejected: {}", rejected?);
    if row.reason.as_deref().is_none_or(str::is_empty) {
        row.reason = Some(why.clone());
    }
    Some(why)
}

/// The end of the run holding the job's lease (the caller checked the fence): counters, state,
/// hold, retirement, one-shot recovery (SPEC §6 table) and overlap rows. An `abandoned` row
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
    super::overlap::on_run_end(rec, &lease, row);
    super::chain::stamp(row, &lease);
    // A coalesced fire's row stands for every overdue slot it covered (SPEC §5), whatever its
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
    count_row(rec, row, period, now);
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
    let counts = !lease.trigger.is_extra() && row.status != Status::Abandoned;
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
        });
        if lease.spends_job {
            if until_passed {
                retire(rt, "until passed");
            } else if lease.trigger == Trigger::Recovery || rt.recovery_pending {
                retire(rt, "abandoned twice");
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
        if lease.spends_job || max_reached {
            let why = spent_reason(&rec.def, rt.runs);
            retire(rt, why);
            return out;
        }
    }
    // Overlap: slots that came due while this run was in flight. A run abandoned by a crash was
    // only "in flight" until its lease expired: slots after that fell due while no owner was
    // running, and §5 (coalesced fire, or `missed` past the grace) decides them at the next claim.
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
        // Slots whose fire instant is still to come are not overlapped: they fire later.
        let bound = match sched.latest_at_or_before(bound) {
            Some(l) if l >= next && rec.def.fire_at(l) > bound => l - ms(1),
            _ => bound,
        };
        if let Some((first, last, n)) = sched.slots_between(next - ms(1), bound, SLOT_COUNT_CAP) {
            let mut o = HistoryRow::new(
                &rec.def.name,
                Status::Skipped,
                Trigger::Schedule,
                Some(first),
                &row.owner,
                now,
            );
            o.reason = Some(REASON_OVERLAP.to_string());
            o.slots_count = Some(n);
            o.slot_end = Some(last);
            out.extra_rows.push(o);
        }
        rt.next_slot = sched.next_after(bound);
    }
    super::overlap::buffer_one(rec, sched, &mut out.extra_rows);
    let extra = std::mem::take(&mut out.extra_rows);
    for r in &extra {
        count_row(rec, r, period, now);
    }
    out.extra_rows = extra;
    out
}

/// Why a run that spent the job retires it, once it ended with `runs` counted runs.
fn spent_reason(def: &JobDef, runs: u64) -> &'static str {
    if def.schedule.is_at() {
        "at: ran"
    } else if def.max_runs.is_some_and(|m| runs >= m) {
        if def.max_runs == Some(1) {
            "once: ran"
        } else {
            "max_runs reached"
        }
    } else if def.until.is_some() {
        "until passed"
    } else {
        "no more slots"
    }
}

/// The late end of a run recorded `abandoned` (its lease lapsed and another owner recovered
/// it, but its owner was paused, not dead): `row` is its real end and supersedes the
/// `abandoned` row (`supersedes_abandoned`; queries hide that row: one row per run, under the
/// status that happened). The counters move the run from `abandoned` to its real status. The
/// job's last status (and last run, last success) follows the real end when no newer run of
/// the job ended since the `abandoned` row; the rest of its current state (state, hold, run
/// count, a one-shot's pending recovery) only when no newer run started either: a late result
/// never changes what a newer run decided (the fencing of SPEC §6 is kept).
fn supersede_abandoned(
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
    if newest && let Some(s) = state {
        out.state_rejected = merge_state(rec, row, s);
    }
    count_row(rec, row, period, now);
    // The run really ended, so it counts toward `max_runs` whatever ran since (`jobs` RUNS =
    // the rows `stats` counts): a job that reaches `max_runs` this way is retired at once; a
    // run already in flight still ends (the documented bound: `max_runs` + 1 executions for
    // each owner stopped past its lease while it ran one of the job's runs).
    if !a.trigger.is_extra() && row.status != Status::Abandoned {
        rec.rt.runs += 1;
        if !rec.rt.retired && rec.def.max_runs.is_some_and(|m| rec.rt.runs >= m) {
            let why = spent_reason(&rec.def, rec.rt.runs);
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
    let retry_owed = rt.recovery_pending || rt.retired_reason.as_deref() == Some("abandoned twice");
    if a.spends_job && retry_owed {
        let why = spent_reason(&rec.def, rt.runs);
        retire(rt, why);
    }
    out
}

/// Take one row of `status` recorded at `at` back out of the counters (its row is hidden).
fn uncount(c: &mut crate::model::JobCounters, status: Status, at: DateTime<Utc>) {
    if let Some(n) = c.by_status.get_mut(&status) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            c.by_status.remove(&status);
        }
    }
    let hour = at.timestamp().div_euclid(3600);
    let idx = Status::ALL.iter().position(|s| *s == status).unwrap_or(0);
    if let Some(b) = c.hours.iter_mut().find(|b| b.hour == hour) {
        b.counts[idx] = b.counts[idx].saturating_sub(1);
    }
}

/// The run `run_id` if the record lists it as abandoned, taken off the list.
fn take_abandoned(rec: &mut JobRecord, run_id: Uuid) -> Option<AbandonedRun> {
    let i = rec.rt.abandoned.iter().position(|a| a.run_id == run_id)?;
    Some(rec.rt.abandoned.remove(i))
}

// ---------------------------------------------------------------------------------------------
// Per-record steps of the store operations, written once for both stores (issue 10 item 1): the
// file store and the PostgreSQL store only lock, load the records these take, and persist what
// they return (history rows first, then the records).

/// What every store checks before an apply: each number within its bound (`config::bounds`) and
/// each name once. Returns the names.
pub fn unique_names(file: &JobsFile) -> StoreResult<HashSet<&str>> {
    crate::config::check_bounds(file).map_err(StoreError::OutOfBounds)?;
    if let Some(cycle) = crate::config::find_cycle(&file.jobs) {
        return Err(StoreError::Refused(format!(
            "refusing to apply: `after` makes a cycle: {} (a chain must end somewhere)",
            crate::config::cycle_text(&cycle)
        )));
    }
    let mut seen = HashSet::new();
    for d in &file.jobs {
        if !seen.insert(d.name.as_str()) {
            return Err(StoreError::DuplicateJob(d.name.clone()));
        }
    }
    Ok(seen)
}

/// What `apply` did to one definition.
#[derive(Debug)]
pub enum ApplyStep {
    /// A new job: the record to store.
    Created(Box<JobRecord>),
    /// The existing record was updated in place (its schedule must be recompiled).
    Updated,
    /// The definition did not change.
    Unchanged,
}

/// `apply` for one definition: update `existing` in place, or create a record.
pub fn apply_one(
    existing: Option<&mut JobRecord>,
    def: &JobDef,
    now: DateTime<Utc>,
) -> StoreResult<ApplyStep> {
    match existing {
        Some(rec) => match apply_def(rec, def, now).map_err(StoreError::bad_def(&def.name))? {
            ApplyChange::Unchanged => Ok(ApplyStep::Unchanged),
            ApplyChange::Updated => Ok(ApplyStep::Updated),
        },
        None => Ok(ApplyStep::Created(Box::new(
            new_record(def.clone(), now).map_err(StoreError::bad_def(&def.name))?,
        ))),
    }
}

/// `apply` for a stored job no longer in the file: retire it (kept in history and `jobs`).
/// Returns true when it was not retired yet (the record changed). This retirement is undone
/// when the job comes back, so a one-shot's pending recovery (its run was abandoned, one retry
/// left) is kept: coming back, it is that retry, not a fresh first run (fault-simulator seeds
/// 516, 1390: a `once` job removed and re-added ran a third time).
pub fn retire_removed(rec: &mut JobRecord) -> bool {
    if rec.rt.retired {
        return false;
    }
    rec.rt.retired = true;
    rec.rt.retired_reason = Some(REASON_REMOVED.to_string());
    // Its queued operator runs get `skipped` rows at the next claim pass (`after_retirement`).
    true
}

/// The fold of `apply` over the stored records, shared by both stores: `stored` maps a job
/// name to the store's entry for it, `rec` reaches the record inside an entry, `make` wraps a
/// new record. Returns the report and the names whose records changed (to persist).
pub fn apply_all<T>(
    file: &JobsFile,
    now: DateTime<Utc>,
    stored: &mut BTreeMap<String, T>,
    rec: impl Fn(&mut T) -> &mut JobRecord,
    make: impl Fn(JobRecord) -> T,
) -> StoreResult<(ApplyReport, Vec<String>)> {
    let seen = unique_names(file)?;
    let mut report = ApplyReport::default();
    let mut changed = Vec::new();
    for def in &file.jobs {
        let name = def.name.clone();
        match apply_one(stored.get_mut(&name).map(&rec), def, now)? {
            ApplyStep::Unchanged => report.unchanged.push(name),
            ApplyStep::Updated => {
                report.updated.push(name.clone());
                changed.push(name);
            }
            ApplyStep::Created(r) => {
                stored.insert(name.clone(), make(*r));
                report.created.push(name.clone());
                changed.push(name);
            }
        }
    }
    for (name, entry) in stored.iter_mut() {
        if !seen.contains(name.as_str()) && retire_removed(rec(entry)) {
            report.retired.push(name.clone());
            changed.push(name.clone());
        }
    }
    Ok((report, changed))
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
        return Err(StoreError::Retired {
            job: rec.def.name.clone(),
            reason: rec
                .rt
                .retired_reason
                .clone()
                .unwrap_or_else(|| "retired".to_string()),
        });
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

/// The lease of `rec` if it expired at `now` (crash recovery is due).
pub fn expired_lease(rec: &JobRecord, now: DateTime<Utc>) -> Option<Lease> {
    rec.rt.leases().find(|l| l.lease_until <= now).cloned()
}

/// The next expired lease `owner` may recover: under an `overlap:` policy that acts while a
/// run is live, `owner` still runs its own leases of the job (it does not hide the job from
/// its claims then), so it never recovers those; another owner, or its own next start, does.
fn recoverable_lease(rec: &JobRecord, now: DateTime<Utc>, owner: &str) -> Option<Lease> {
    let own_live = rec.def.overlap.acts_while_running();
    rec.rt
        .leases()
        .find(|l| l.lease_until <= now && !(own_live && l.owner == owner))
        .cloned()
}

/// One job during `claim_due`: recover an expired lease (SPEC §6), then evaluate (§5, §7).
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
    let mut rows = Vec::new();
    let mut dirty = false;
    let mut landed = landed;
    while let Some(lease) = recoverable_lease(rec, now, owner) {
        let own = landed.iter().position(|r| r.run_id == lease.run_id);
        let (mut row, already) = match own {
            Some(i) => (landed.remove(i), true),
            None => (abandoned_row(rec, &lease, owner, now), false),
        };
        let fin = finish_run(rec, sched, &mut row, None, None, period, now);
        if !already {
            rows.push(row);
        }
        rows.extend(fin.extra_rows);
        dirty = true;
    }
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

/// A run's end, fenced by `run_id` (SPEC §6). A stale completion (lease taken over) keeps its
/// row with `stale_lease: true` and adds its cost to the counters, touching nothing else —
/// unless the run was recorded `abandoned`: then its row supersedes that one
/// (`supersede_abandoned`). `sched` is the job's compiled schedule when the caller has it
/// cached.
pub fn complete_step(
    rec: &mut JobRecord,
    sched: Option<&Compiled>,
    c: Completion,
    period: BudgetPeriod,
) -> StoreResult<CompleteOutcome> {
    let mut row = c.row;
    row.run_id = c.run_id;
    let mut out = CompleteOutcome::default();
    if !holds(rec, c.run_id) {
        row.stale_lease = true;
        match take_abandoned(rec, c.run_id).filter(|_| row.status != Status::Abandoned) {
            Some(a) => {
                let fin =
                    supersede_abandoned(rec, &a, &mut row, c.state, c.hold_until, period, c.now);
                out.state_rejected = fin.state_rejected;
            }
            None => count_row(rec, &row, period, c.now),
        }
        out.stale = true;
        out.rows.push(row);
        return Ok(out);
    }
    let compiled;
    let sched = match sched {
        Some(s) => s,
        None => {
            compiled = compile(rec).map_err(StoreError::bad_def(&c.job))?;
            &compiled
        }
    };
    let fin = finish_run(rec, sched, &mut row, c.state, c.hold_until, period, c.now);
    out.state_rejected = fin.state_rejected;
    out.rows.push(row);
    out.rows.extend(fin.extra_rows);
    Ok(out)
}

/// A retried completion whose row is already in history (an earlier attempt wrote the row, then
/// failed before or while writing the job record). Holding the lease: the run is finished from
/// the landed row, so the record matches history. Not holding it: the earlier attempt's record
/// update landed too (or recovery finished the run from that row): nothing changes — unless
/// the landed row superseded an `abandoned` one the record still lists (the earlier attempt's
/// record never landed): then the record catches up with it. The
/// outcome's rows are the landed row and any overlap rows; the store must not append rows that
/// are already there (see [`same_row`]).
pub fn complete_landed(
    rec: &mut JobRecord,
    sched: Option<&Compiled>,
    c: Completion,
    mut landed: HistoryRow,
    period: BudgetPeriod,
) -> StoreResult<CompleteOutcome> {
    let mut out = CompleteOutcome::default();
    if !holds(rec, c.run_id) {
        if landed.supersedes_abandoned
            && landed.stale_lease
            && let Some(a) = take_abandoned(rec, c.run_id)
        {
            let fin =
                supersede_abandoned(rec, &a, &mut landed, c.state, c.hold_until, period, c.now);
            out.state_rejected = fin.state_rejected;
        }
        out.stale = landed.stale_lease;
        out.rows.push(landed);
        return Ok(out);
    }
    let compiled;
    let sched = match sched {
        Some(s) => s,
        None => {
            compiled = compile(rec).map_err(StoreError::bad_def(&c.job))?;
            &compiled
        }
    };
    let fin = finish_run(
        rec,
        sched,
        &mut landed,
        c.state,
        c.hold_until,
        period,
        c.now,
    );
    out.state_rejected = fin.state_rejected;
    out.rows.push(landed);
    out.rows.extend(fin.extra_rows);
    Ok(out)
}

/// Whether `new` is a row `old` already records: the same run (run_id) and status, or the same generated
/// `missed`/`skipped` row for the same job and slot (those get a fresh run_id each time they
/// are computed, so a retried claim or completion would otherwise write them twice).
pub fn same_row(old: &HistoryRow, new: &HistoryRow) -> bool {
    if old.job != new.job {
        return false;
    }
    if old.run_id == new.run_id {
        // Not a dead recoverer's `abandoned` row beside the run's real end.
        return old.status == new.status;
    }
    if new.slot.is_none() || old.status != new.status || old.slot != new.slot {
        return false;
    }
    match new.status {
        // A retry later than the first attempt covers the same first slot and maybe more
        // (see [`unlanded_part`]); its reason names its own age.
        Status::Missed => old.slot_end >= new.slot_end,
        Status::Skipped => old.slot_end == new.slot_end && old.reason == new.reason,
        _ => false,
    }
}

/// Whether `row` is one the store generates for slots (a `missed` row or an overlap `skipped`
/// row), not a run's own row.
pub fn is_generated(row: &HistoryRow) -> bool {
    row.slot.is_some()
        && (row.status == Status::Missed
            || (row.status == Status::Skipped && row.reason.as_deref() == Some(REASON_OVERLAP)))
}

/// `new` (a row about to be written) without what rows already in history record: nothing when
/// one of them records it whole. A generated row ([`is_generated`]) computed again later, or by
/// another process, than landed generated rows of the same job (a `missed` retry covers the
/// landed row's slots and more; an overlap row computed at a later completion reaches further
/// than the one a dead recoverer wrote, whose `missed` row may follow it) keeps only the slots
/// no landed row records: each slot in exactly one row. Landed rows can cover several stretches
/// of `new` (a recoverer's overlap row, then its `missed` row: fault-simulator seeds 760, 514,
/// 687), so every landed row is taken into account, not only the one covering the first slot;
/// a gap between two landed rows becomes a row of its own (a fresh `run_id` after the first).
pub fn unlanded_part(new: HistoryRow, landed: &[HistoryRow], sched: &Compiled) -> Vec<HistoryRow> {
    if landed.iter().any(|l| same_row(l, &new)) {
        return Vec::new();
    }
    if !is_generated(&new) {
        return vec![new];
    }
    let Some(first) = new.slot else {
        return vec![new];
    };
    let end = new.slot_end.unwrap_or(first);
    let covered: Vec<(DateTime<Utc>, DateTime<Utc>)> = landed
        .iter()
        .filter(|l| l.job == new.job && is_generated(l))
        .filter_map(|l| Some((l.slot?, l.slot_end.or(l.slot)?)))
        .filter(|(s, e)| *s <= end && *e >= first)
        .collect();
    if covered.is_empty() {
        return vec![new];
    }
    // Uncovered stretches of [first, end], as (exclusive lower bound, inclusive upper bound).
    let mut stretches: Vec<(DateTime<Utc>, DateTime<Utc>)> = Vec::new();
    let mut after = first - ms(1);
    // The next slot to decide, then past every landed row covering it.
    while let Some(mut cur) = sched.next_after(after).filter(|c| *c <= end) {
        while let Some(e) = covered
            .iter()
            .filter(|(s, e)| *s <= cur && *e >= cur)
            .map(|(_, e)| *e)
            .max()
        {
            match sched.next_after(e).filter(|c| *c <= end) {
                Some(c) => cur = c,
                None => return pieces_of(new, &stretches, sched),
            }
        }
        // `cur` is recorded by no landed row: the stretch runs to the next landed row.
        let stop = covered.iter().map(|(s, _)| *s).filter(|s| *s > cur).min();
        match stop {
            Some(s) if s <= end => {
                stretches.push((cur - ms(1), s - ms(1)));
                after = s - ms(1);
            }
            _ => {
                stretches.push((cur - ms(1), end));
                break;
            }
        }
    }
    pieces_of(new, &stretches, sched)
}

/// The rows of [`unlanded_part`]: `new` narrowed to each stretch (the first keeps its run_id).
fn pieces_of(
    new: HistoryRow,
    stretches: &[(DateTime<Utc>, DateTime<Utc>)],
    sched: &Compiled,
) -> Vec<HistoryRow> {
    let mut out = Vec::new();
    for (after, until) in stretches {
        let Some((first, last, n)) = sched.slots_between(*after, *until, SLOT_COUNT_CAP) else {
            continue;
        };
        let mut row = new.clone();
        if !out.is_empty() {
            row.run_id = Uuid::new_v4();
        }
        row.slot = Some(first);
        row.slot_end = Some(last);
        row.slots_count = Some(n);
        out.push(row);
    }
    out
}

/// The row written when a lease expired without completion (SPEC §6).
pub fn abandoned_row(
    rec: &JobRecord,
    lease: &Lease,
    owner: &str,
    now: DateTime<Utc>,
) -> HistoryRow {
    let mut row = HistoryRow::new(
        &rec.def.name,
        Status::Abandoned,
        lease.trigger,
        lease.slot,
        owner,
        now,
    );
    row.run_id = lease.run_id;
    row.started_at = lease.claimed_at;
    row.duration_ms = (now - lease.claimed_at).num_milliseconds().max(0) as u64;
    let mut reason = format!(
        "lease of owner {} expired at {} without completion",
        lease.owner,
        lease
            .lease_until
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    );
    if lease.trigger.is_operator() {
        // An operator's run (retry, backfill, manual trigger) is not re-run by itself: its
        // action may have done part of its work, so running it again is the operator's call.
        // The hint comes first so that a cut reason (the `history` table) still shows it.
        reason = format!("{}: {reason}", rerun_hint(lease.run_id));
    }
    row.reason = Some(reason);
    row
}

/// What an `abandoned` row of an operator's run says about running it again.
pub fn rerun_hint(run_id: uuid::Uuid) -> String {
    format!("not re-run by itself (`cronsole retry {run_id}` or R runs it again)")
}

/// The earliest instant at which `evaluate` (or lease recovery) may act on this job.
pub fn wakeup(rec: &JobRecord) -> Option<DateTime<Utc>> {
    let rt = &rec.rt;
    if rt.lease.is_some() {
        return super::overlap::wakeup_while_running(rec);
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
    if super::chain::ready(rec) {
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
            let immediate = rt.last_slot.is_none() && rec.def.run_immediately;
            let fire = if immediate { n } else { rec.def.fire_at(n) };
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

#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;

    /// An `every 60s` command job, enabled.
    pub fn def(name: &str) -> JobDef {
        crate::testkit::jobs::command_job(name, 60)
    }

    pub fn job(name: &str, now: DateTime<Utc>) -> JobRecord {
        new_record(def(name), now).expect("every 60s compiles")
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::{def, job};
    use super::*;
    use crate::model::STATE_MAX_BYTES;

    const P: BudgetPeriod = BudgetPeriod::Day;

    use crate::testkit::time::epoch as t;
    const T0: i64 = 1000;

    fn sched(r: &JobRecord) -> Compiled {
        compile(r).unwrap()
    }

    fn eval(r: &mut JobRecord, now: i64) -> Evaluation {
        let s = sched(r);
        evaluate(r, &s, t(now), "me", true, P)
    }

    fn done(r: &mut JobRecord, status: Status, now: i64) -> FinishOutcome {
        let s = sched(r);
        let lease = r.rt.lease.clone().unwrap();
        let mut row = HistoryRow::new(&r.def.name, status, lease.trigger, lease.slot, "me", t(now));
        row.run_id = lease.run_id;
        finish_run(r, &s, &mut row, None, None, P, t(now))
    }

    /// An `every 60` job created at t0 that ran its t0 slot (last = t0).
    fn ran_at_t0(grace: Option<f64>) -> JobRecord {
        let mut r = job("j", t(T0));
        r.def.misfire_grace_seconds = grace;
        let ev = eval(&mut r, T0);
        assert_eq!(ev.claim.unwrap().slot, Some(t(T0)));
        done(&mut r, Status::Succeeded, T0 + 1);
        assert_eq!(r.rt.last_slot, Some(t(T0)));
        assert_eq!(r.rt.next_slot, Some(t(T0 + 60)));
        r
    }

    /// Red team 6: `apply` names what changed in the settings.
    #[test]
    fn settings_changes_name_the_budget_edit() {
        use crate::model::{Budget, BudgetPeriod};
        let b = |max: f64, period| Settings {
            budget: Some(Budget {
                max_cost_usd: max,
                period,
            }),
            ..Settings::default()
        };
        let none = Settings::default();
        assert!(settings_changes(&none, &none).is_empty());
        let day = b(0.03, BudgetPeriod::Day);
        assert!(settings_changes(&day, &day).is_empty());
        assert_eq!(
            settings_changes(&day, &b(0.03, BudgetPeriod::Week)),
            ["budget period day → week"]
        );
        assert_eq!(
            settings_changes(&day, &b(0.05, BudgetPeriod::Total)),
            ["budget limit $0.03 → $0.05", "budget period day → total"]
        );
        assert_eq!(settings_changes(&none, &day), ["budget added: $0.03/day"]);
        assert_eq!(settings_changes(&day, &none), ["budget removed"]);
    }

    #[test]
    fn s5_null_grace_fires_first_overdue_slot_and_coalesces() {
        let mut r = ran_at_t0(None);
        let ev = eval(&mut r, T0 + 305);
        let c = ev.claim.unwrap();
        assert_eq!(
            c.slot,
            Some(t(T0 + 60)),
            "scheduled instant is last_slot + every"
        );
        assert!(ev.rows.is_empty());
        assert_eq!(
            r.rt.next_slot,
            Some(t(T0 + 360)),
            "older overdue slots coalesced"
        );
    }

    /// Issue 10 item 7: a coalesced fire's row carries the slots it stands for, like `missed`.
    #[test]
    fn s5_coalesced_fire_row_carries_slots_count_and_range() {
        let mut r = ran_at_t0(None);
        let c = eval(&mut r, T0 + 305).claim.unwrap();
        let range = c.coalesced.unwrap();
        assert_eq!(
            (range.first, range.last, range.count),
            (t(T0 + 60), t(T0 + 300), 5)
        );
        let out = done(&mut r, Status::Succeeded, T0 + 306);
        assert!(out.extra_rows.is_empty());
        // The row itself is stamped by finish_run.
        let s = sched(&r);
        let mut r2 = ran_at_t0(None);
        let c2 = eval(&mut r2, T0 + 305).claim.unwrap();
        let mut row = HistoryRow::new("j", Status::Failed, c2.trigger, c2.slot, "me", t(T0 + 306));
        row.run_id = c2.run_id;
        finish_run(&mut r2, &s, &mut row, None, None, P, t(T0 + 306));
        assert_eq!(
            row.slot,
            Some(t(T0 + 60)),
            "every names the first overdue slot"
        );
        assert_eq!(row.slot_start, Some(t(T0 + 60)));
        assert_eq!(row.slot_end, Some(t(T0 + 300)));
        assert_eq!(row.slots_count, Some(5));
        // An on-time fire stands for one slot: no range.
        let c3 = eval(&mut r2, T0 + 360).claim.unwrap();
        assert!(c3.coalesced.is_none());
    }

    /// Issue 10 item 7: a completion written late (store unwritable for 100 s) is not an overlap
    /// of the slots of the outage; they come back through §5 as one coalesced fire.
    #[test]
    fn a_late_written_completion_records_no_overlap_for_the_outage() {
        let mut r = ran_at_t0(None);
        let c = eval(&mut r, T0 + 60).claim.unwrap();
        let s = sched(&r);
        let mut row = HistoryRow::new("j", Status::Succeeded, c.trigger, c.slot, "me", t(T0 + 62));
        row.run_id = c.run_id;
        // Written at T0+400: slots T0+120..T0+360 passed while the store was unwritable.
        let out = finish_run(&mut r, &s, &mut row, None, None, P, t(T0 + 400));
        assert!(
            out.extra_rows.is_empty(),
            "no `skipped overlap` for a run that had ended: {:?}",
            out.extra_rows
        );
        let next = eval(&mut r, T0 + 400).claim.unwrap();
        assert_eq!(next.slot, Some(t(T0 + 120)));
        assert_eq!(next.coalesced.unwrap().count, 5, "T0+120..=T0+360");
    }

    #[test]
    fn s5_grace_90_at_t0_plus_300_is_one_missed_row() {
        let mut r = ran_at_t0(Some(90.0));
        let ev = eval(&mut r, T0 + 300);
        assert!(ev.claim.is_none());
        assert_eq!(ev.rows.len(), 1);
        let row = &ev.rows[0];
        assert_eq!(row.status, Status::Missed);
        assert_eq!(row.slot, Some(t(T0 + 60)));
        assert_eq!(row.slot_end, Some(t(T0 + 300)));
        assert_eq!(row.slots_count, Some(5));
        assert_eq!(r.rt.next_slot, Some(t(T0 + 360)));
        assert_eq!(r.rt.runs, 1, "missed rows do not count as runs");
        assert_eq!(r.rt.counters.by_status[&Status::Missed], 1);
        // Nothing more until the next future slot.
        assert!(eval(&mut r, T0 + 359).claim.is_none());
        assert_eq!(
            eval(&mut r, T0 + 360).claim.unwrap().slot,
            Some(t(T0 + 360))
        );
    }

    #[test]
    fn s5_grace_90_at_t0_plus_70_fires() {
        let mut r = ran_at_t0(Some(90.0));
        let ev = eval(&mut r, T0 + 70);
        assert_eq!(ev.claim.unwrap().slot, Some(t(T0 + 60)));
        assert!(ev.rows.is_empty());
    }

    #[test]
    fn s5_grace_boundary_age_equal_to_grace_fires() {
        let mut r = ran_at_t0(Some(90.0));
        assert!(eval(&mut r, T0 + 150).claim.is_some());
    }

    #[test]
    fn s5_never_run_fires_whatever_the_grace() {
        let mut r = job("j", t(T0));
        r.def.misfire_grace_seconds = Some(1.0);
        let ev = eval(&mut r, T0 + 10_000);
        assert!(ev.rows.is_empty());
        assert_eq!(ev.claim.unwrap().trigger, Trigger::Schedule);
    }

    #[test]
    fn s5_slot_not_yet_due_records_nothing() {
        let mut r = ran_at_t0(Some(1.0));
        let ev = eval(&mut r, T0 + 59);
        assert!(ev.claim.is_none() && ev.rows.is_empty() && !ev.changed);
    }

    #[test]
    fn s5_at_job_fires_late_whatever_the_grace() {
        let mut d = def("a");
        d.schedule = ScheduleSpec::At { at: t(T0 + 100) };
        d.misfire_grace_seconds = Some(1.0);
        let mut r = new_record(d, t(T0)).unwrap();
        assert!(eval(&mut r, T0 + 99).claim.is_none());
        let c = eval(&mut r, T0 + 5000).claim.unwrap();
        assert_eq!(c.slot, Some(t(T0 + 100)));
        assert!(r.rt.lease.as_ref().unwrap().spends_job);
        done(&mut r, Status::Succeeded, T0 + 5001);
        assert!(r.rt.retired);
        assert_eq!(r.rt.retired_reason.as_deref(), Some("at: ran"));
    }

    #[test]
    fn in_schedule_resolves_at_creation() {
        let mut d = def("in");
        d.schedule = ScheduleSpec::In { seconds: 600 };
        let r = new_record(d.clone(), t(T0)).unwrap();
        assert_eq!(r.rt.next_slot, Some(t(T0 + 600)));
        let mut r2 = r.clone();
        assert_eq!(
            apply_def(&mut r2, &d, t(T0 + 300)).unwrap(),
            ApplyChange::Unchanged
        );
        assert_eq!(
            r2.rt.next_slot,
            Some(t(T0 + 600)),
            "unchanged keeps its instant"
        );
    }

    #[test]
    fn an_operator_run_abandoned_by_a_crash_stays_abandoned_with_a_rerun_hint() {
        for trigger in [Trigger::Retry, Trigger::Backfill] {
            let mut r = ran_at_t0(Some(3600.0));
            r.rt.queue.push(crate::model::QueuedRun {
                trigger,
                slot: Some(t(T0)),
                requested_at: t(T0 + 5),
                retry_of: None,
            });
            let c = eval(&mut r, T0 + 6).claim.unwrap();
            assert_eq!(c.trigger, trigger);
            assert!(r.rt.queue.is_empty());
            // The owner dies; another owner finds the lease expired.
            let until = r.rt.lease.as_ref().unwrap().lease_until;
            let s = sched(&r);
            let later = until + chrono::Duration::seconds(1);
            let ev = claim_step(&mut r, &s, later, "other", true, P, None);
            let row = ev.rows.iter().find(|x| x.run_id == c.run_id).unwrap();
            assert_eq!((row.status, row.trigger), (Status::Abandoned, trigger));
            let why = row.reason.as_deref().unwrap();
            assert!(
                why.contains(&format!("cronsole retry {}", c.run_id)),
                "{why}"
            );
            // Not re-offered: nothing queued again, no run claimed for it.
            assert!(r.rt.queue.is_empty());
            assert!(ev.claim.is_none_or(|n| n.trigger == Trigger::Schedule));
        }
        // A scheduled run's abandoned row carries no hint (the schedule goes on).
        let mut r = ran_at_t0(None);
        eval(&mut r, T0 + 60).claim.unwrap();
        let until = r.rt.lease.as_ref().unwrap().lease_until;
        let s = sched(&r);
        let ev = claim_step(
            &mut r,
            &s,
            until + chrono::Duration::seconds(1),
            "o",
            true,
            P,
            None,
        );
        let row = ev
            .rows
            .iter()
            .find(|x| x.status == Status::Abandoned)
            .unwrap();
        assert!(!row.reason.as_deref().unwrap().contains("cronsole retry"));
    }

    #[test]
    fn s6_recurring_abandoned_waits_for_next_slot_with_overlap_row() {
        let mut r = ran_at_t0(None);
        eval(&mut r, T0 + 60).claim.unwrap();
        // Abandoned within its lease (a shutdown at T0+85): nothing came due meanwhile, and the
        // slot is never re-run; the job waits for T0+120. A later run that is still in flight
        // when T0+180 comes due records that slot as one overlap row at its end.
        let out = done(&mut r, Status::Abandoned, T0 + 85);
        assert!(
            out.extra_rows.is_empty(),
            "nothing came due before the lease ran out"
        );
        assert_eq!(r.rt.next_slot, Some(t(T0 + 120)), "waits for its next slot");
        assert!(eval(&mut r, T0 + 119).claim.is_none());
        eval(&mut r, T0 + 120).claim.unwrap();
        let out = done(&mut r, Status::Succeeded, T0 + 190);
        assert_eq!(out.extra_rows.len(), 1);
        assert_eq!(out.extra_rows[0].reason.as_deref(), Some(REASON_OVERLAP));
        assert_eq!(out.extra_rows[0].slots_count, Some(1));
        assert_eq!(r.rt.next_slot, Some(t(T0 + 240)));
    }

    #[test]
    fn a_held_job_does_not_wake_the_engine_before_its_hold_ends() {
        let mut r = ran_at_t0(None);
        r.def.until = Some(t(T0 + 30));
        r.rt.hold_until = Some(t(T0 + 3600));
        assert_eq!(
            wakeup(&r),
            Some(t(T0 + 3600)),
            "not the past `until`: no busy wake-ups"
        );
        r.rt.hold_until = None;
        assert_eq!(wakeup(&r), Some(t(T0 + 30)));
    }

    #[test]
    fn s6_recovery_after_an_outage_leaves_the_outage_to_section_5() {
        // Claimed T0+60 (lease to T0+90), owner killed, nothing runs until T0+200: the slots
        // T0+120 and T0+180 fell due while no owner was running. Not overlap: with grace null
        // they coalesce into one fire now (§5), with a grace they are one `missed` row.
        let mut r = ran_at_t0(None);
        eval(&mut r, T0 + 60).claim.unwrap();
        let out = done(&mut r, Status::Abandoned, T0 + 200);
        assert!(out.extra_rows.is_empty(), "{:?}", out.extra_rows);
        let fire = eval(&mut r, T0 + 200).claim.expect("coalesced fire");
        assert_eq!(fire.trigger, Trigger::Schedule);
        let mut r = ran_at_t0(Some(30.0));
        eval(&mut r, T0 + 60).claim.unwrap();
        done(&mut r, Status::Abandoned, T0 + 200);
        let e = eval(&mut r, T0 + 200);
        assert!(e.claim.is_none());
        assert_eq!(e.rows.len(), 1);
        assert_eq!(e.rows[0].status, Status::Missed);
        assert_eq!(e.rows[0].slots_count, Some(2));
    }

    #[test]
    fn s6_one_shot_reoffered_once_then_retired() {
        let mut d = def("once");
        d.max_runs = Some(1);
        let mut r = new_record(d, t(T0)).unwrap();
        let first = eval(&mut r, T0).claim.unwrap();
        assert_eq!(first.slot, Some(t(T0)));
        done(&mut r, Status::Abandoned, T0 + 40);
        assert!(r.rt.recovery_pending && !r.rt.retired);
        let again = eval(&mut r, T0 + 41).claim.unwrap();
        assert_eq!(again.trigger, Trigger::Recovery);
        assert_eq!(
            again.slot,
            Some(t(T0)),
            "the retry stands for the same slot"
        );
        done(&mut r, Status::Abandoned, T0 + 80);
        assert!(r.rt.retired);
        assert_eq!(r.rt.retired_reason.as_deref(), Some("abandoned twice"));
        assert!(eval(&mut r, T0 + 10_000).claim.is_none());
    }

    #[test]
    fn s6_one_shot_recovery_that_succeeds_retires_normally() {
        let mut d = def("once");
        d.max_runs = Some(1);
        let mut r = new_record(d, t(T0)).unwrap();
        eval(&mut r, T0).claim.unwrap();
        done(&mut r, Status::Abandoned, T0 + 40);
        eval(&mut r, T0 + 41).claim.unwrap();
        done(&mut r, Status::Succeeded, T0 + 42);
        assert!(r.rt.retired && !r.rt.recovery_pending);
        assert_eq!(r.rt.runs, 1);
    }

    #[test]
    fn s6_spent_job_whose_until_passed_is_retired_not_reoffered() {
        let mut d = def("u");
        d.until = Some(t(T0 + 30));
        let mut r = new_record(d, t(T0)).unwrap();
        let c = eval(&mut r, T0).claim.unwrap();
        assert!(
            r.rt.lease.as_ref().unwrap().spends_job,
            "next slot is past until"
        );
        assert_eq!(c.slot, Some(t(T0)));
        assert!(!r.rt.retired, "a spent job stays leased until its run ends");
        done(&mut r, Status::Abandoned, T0 + 100);
        assert!(r.rt.retired);
        assert_eq!(r.rt.retired_reason.as_deref(), Some("until passed"));
    }

    #[test]
    fn s7_max_runs_counts_runs_not_missed_rows() {
        let mut d = def("m");
        d.max_runs = Some(2);
        d.misfire_grace_seconds = Some(10.0);
        let mut r = new_record(d, t(T0)).unwrap();
        eval(&mut r, T0).claim.unwrap();
        done(&mut r, Status::Failed, T0 + 1);
        assert_eq!(eval(&mut r, T0 + 200).rows.len(), 1, "missed");
        let c = eval(&mut r, T0 + 240).claim.unwrap();
        assert_eq!(c.slot, Some(t(T0 + 240)));
        done(&mut r, Status::Succeeded, T0 + 241);
        assert!(r.rt.retired);
        assert_eq!(r.rt.retired_reason.as_deref(), Some("max_runs reached"));
    }

    #[test]
    fn until_passed_while_idle_retires() {
        let mut d = def("u");
        d.until = Some(t(T0 + 90));
        let mut r = new_record(d, t(T0)).unwrap();
        eval(&mut r, T0).claim.unwrap();
        done(&mut r, Status::Succeeded, T0 + 1);
        assert!(!r.rt.retired, "T0+60 is still before until");
        eval(&mut r, T0 + 60).claim.unwrap();
        done(&mut r, Status::Succeeded, T0 + 61);
        assert!(r.rt.retired, "the next slot T0+120 is past until");
        assert_eq!(r.rt.retired_reason.as_deref(), Some("until passed"));
    }

    #[test]
    fn overlap_slots_become_one_skipped_row_at_completion() {
        let mut r = ran_at_t0(None);
        eval(&mut r, T0 + 60).claim.unwrap();
        let out = done(&mut r, Status::Succeeded, T0 + 250);
        assert_eq!(out.extra_rows.len(), 1);
        let o = &out.extra_rows[0];
        assert_eq!(o.status, Status::Skipped);
        assert_eq!(
            (o.slot, o.slot_end, o.slots_count),
            (Some(t(T0 + 120)), Some(t(T0 + 240)), Some(3))
        );
        assert_eq!(r.rt.next_slot, Some(t(T0 + 300)));
        assert_eq!(r.rt.runs, 2, "overlap rows are not runs");
    }

    #[test]
    fn s17_no_drift_slots_stay_on_the_anchor_grid() {
        let mut r = job("grid", t(T0));
        let mut now = T0;
        for _ in 0..20 {
            let c = eval(&mut r, now).claim.unwrap();
            let slot = c.slot.unwrap().timestamp();
            assert_eq!((slot - T0) % 60, 0, "slot {slot} is off the grid");
            // Each run takes 37 s and starts 3 s late.
            done(&mut r, Status::Succeeded, now + 37);
            now = r.rt.next_slot.unwrap().timestamp() + 3;
        }
    }

    #[test]
    fn s17_one_shot_every_job_fires_once_even_when_result_is_written_back() {
        let mut d = def("one");
        d.max_runs = Some(1);
        let mut r = new_record(d, t(T0)).unwrap();
        let s = sched(&r);
        eval(&mut r, T0).claim.unwrap();
        let lease = r.rt.lease.clone().unwrap();
        let mut row = HistoryRow::new(
            "one",
            Status::Succeeded,
            lease.trigger,
            lease.slot,
            "me",
            t(T0 + 1),
        );
        row.result = Some("hello".into());
        let mut st = JobState::default();
        st.notepad.insert("k".into(), "v".into());
        finish_run(&mut r, &s, &mut row, Some(st), None, P, t(T0 + 1));
        assert!(r.rt.retired);
        assert_eq!(r.rt.state.notepad["k"], "v");
        for k in 1..100 {
            let ev = eval(&mut r, T0 + k * 60);
            assert!(ev.claim.is_none() && ev.rows.is_empty());
        }
    }

    #[test]
    fn manual_trigger_runs_while_paused_without_moving_the_schedule() {
        let mut d = def("m");
        d.max_runs = Some(1);
        let mut r = new_record(d, t(T0)).unwrap();
        set_paused(&mut r, true, t(T0)).unwrap();
        assert!(eval(&mut r, T0 + 500).claim.is_none(), "paused");
        r.rt.trigger_requested_at = Some(t(T0 + 500));
        let next_before = r.rt.next_slot;
        let c = eval(&mut r, T0 + 501).claim.unwrap();
        assert_eq!((c.trigger, c.slot), (Trigger::Manual, None));
        assert_eq!(r.rt.next_slot, next_before);
        done(&mut r, Status::Succeeded, T0 + 502);
        assert!(!r.rt.retired, "manual runs do not count toward once");
        assert_eq!(r.rt.runs, 0);
        assert!(r.rt.trigger_requested_at.is_none());
    }

    fn backfill_of(r: &mut JobRecord, slot: i64, at: i64) {
        r.rt.queue.push(crate::model::QueuedRun {
            trigger: Trigger::Backfill,
            slot: Some(t(slot)),
            requested_at: t(at),
            retry_of: None,
        });
    }

    /// Red team 5: a `once` job whose scheduled run retires it still runs the manual trigger
    /// and the backfill queued before (they were acknowledged), then nothing more.
    #[test]
    fn a_spent_one_shot_still_runs_its_queued_operator_runs() {
        let mut d = def("o");
        d.max_runs = Some(1);
        let mut r = new_record(d, t(T0)).unwrap();
        r.rt.trigger_requested_at = Some(t(T0));
        backfill_of(&mut r, T0 - 3600, T0);
        let c = eval(&mut r, T0).claim.unwrap();
        assert_eq!(c.trigger, Trigger::Schedule, "the due slot comes first");
        done(&mut r, Status::Succeeded, T0 + 1);
        assert!(r.rt.retired);
        assert_eq!(r.rt.retired_reason.as_deref(), Some("once: ran"));
        assert!(
            wakeup(&r).is_some_and(|w| w <= t(T0 + 1)),
            "it must be looked at"
        );
        let c = eval(&mut r, T0 + 2).claim.unwrap();
        assert_eq!((c.trigger, c.slot), (Trigger::Manual, None));
        assert!(eval(&mut r, T0 + 2).claim.is_none(), "one run at a time");
        done(&mut r, Status::Succeeded, T0 + 3);
        let c = eval(&mut r, T0 + 4).claim.unwrap();
        assert_eq!((c.trigger, c.slot), (Trigger::Backfill, Some(t(T0 - 3600))));
        done(&mut r, Status::Succeeded, T0 + 5);
        assert_eq!(r.rt.runs, 1, "operator runs do not count toward once");
        assert!(r.rt.retired && wakeup(&r).is_none());
        let ev = eval(&mut r, T0 + 100_000);
        assert!(ev.claim.is_none() && ev.rows.is_empty());
    }

    /// Red team 5: a job removed from the file gives each queued run a `skipped` row.
    #[test]
    fn a_removed_job_skips_its_queued_runs_with_a_row_each() {
        let mut r = ran_at_t0(None);
        set_paused(&mut r, true, t(T0 + 2)).unwrap();
        r.rt.trigger_requested_at = Some(t(T0 + 3));
        backfill_of(&mut r, T0 - 120, T0 + 3);
        backfill_of(&mut r, T0 - 60, T0 + 3);
        assert!(retire_removed(&mut r));
        assert_eq!(wakeup(&r), Some(t(T0 + 3)));
        let ev = eval(&mut r, T0 + 10);
        assert!(ev.claim.is_none() && ev.changed);
        let got: Vec<_> = ev
            .rows
            .iter()
            .map(|w| (w.status, w.trigger, w.slot))
            .collect();
        assert_eq!(
            got,
            vec![
                (Status::Skipped, Trigger::Manual, None),
                (Status::Skipped, Trigger::Backfill, Some(t(T0 - 120))),
                (Status::Skipped, Trigger::Backfill, Some(t(T0 - 60))),
            ]
        );
        assert!(
            ev.rows
                .iter()
                .all(|w| w.reason.as_deref() == Some(REASON_QUEUED_REMOVED))
        );
        assert_eq!(r.rt.counters.by_status.get(&Status::Skipped), Some(&3));
        assert!(r.rt.queue.is_empty() && r.rt.trigger_requested_at.is_none());
        assert!(wakeup(&r).is_none());
        assert!(eval(&mut r, T0 + 20).rows.is_empty(), "one row each, once");
    }

    #[test]
    fn pause_records_nothing_and_resume_continues_at_next_future_slot() {
        let mut r = ran_at_t0(Some(10.0));
        set_paused(&mut r, true, t(T0 + 5)).unwrap();
        for k in 1..10 {
            let ev = eval(&mut r, T0 + k * 60);
            assert!(ev.claim.is_none() && ev.rows.is_empty());
        }
        set_paused(&mut r, false, t(T0 + 610)).unwrap();
        assert_eq!(r.rt.next_slot, Some(t(T0 + 660)));
        let ev = eval(&mut r, T0 + 611);
        assert!(ev.rows.is_empty() && ev.claim.is_none());
        assert_eq!(
            eval(&mut r, T0 + 660).claim.unwrap().slot,
            Some(t(T0 + 660))
        );
    }

    #[test]
    fn hold_blocks_slots_then_continues_without_extra_rows() {
        let mut r = ran_at_t0(Some(1000.0));
        let s = sched(&r);
        eval(&mut r, T0 + 60).claim.unwrap();
        let lease = r.rt.lease.clone().unwrap();
        let mut row = HistoryRow::new(
            "j",
            Status::Failed,
            lease.trigger,
            lease.slot,
            "me",
            t(T0 + 61),
        );
        finish_run(&mut r, &s, &mut row, None, Some(t(T0 + 400)), P, t(T0 + 61));
        for now in [T0 + 120, T0 + 300, T0 + 399] {
            let ev = eval(&mut r, now);
            assert!(ev.claim.is_none() && ev.rows.is_empty(), "held at {now}");
        }
        let ev = eval(&mut r, T0 + 401);
        assert!(ev.rows.is_empty());
        assert!(ev.claim.is_none());
        assert_eq!(r.rt.next_slot, Some(t(T0 + 420)));
        assert_eq!(
            eval(&mut r, T0 + 420).claim.unwrap().slot,
            Some(t(T0 + 420))
        );
    }

    #[test]
    fn run_immediately_fires_first_with_trigger_immediate() {
        let mut d = def("imm");
        d.schedule = ScheduleSpec::At { at: t(T0 + 1000) };
        d.run_immediately = true;
        let mut r = new_record(d, t(T0)).unwrap();
        let c = eval(&mut r, T0).claim.unwrap();
        assert_eq!(c.trigger, Trigger::Immediate);
        done(&mut r, Status::Succeeded, T0 + 1);
        assert!(!r.rt.retired);
        assert!(eval(&mut r, T0 + 999).claim.is_none());
        let c = eval(&mut r, T0 + 1000).claim.unwrap();
        assert_eq!((c.trigger, c.slot), (Trigger::Schedule, Some(t(T0 + 1000))));
    }

    #[test]
    fn oversized_state_is_rejected_and_prior_kept() {
        let mut r = job("s", t(T0));
        r.rt.state.notepad.insert("old".into(), "1".into());
        let s = sched(&r);
        eval(&mut r, T0).claim.unwrap();
        let lease = r.rt.lease.clone().unwrap();
        let mut big = JobState::default();
        big.notepad.insert("x".into(), "y".repeat(STATE_MAX_BYTES));
        let mut row = HistoryRow::new(
            "s",
            Status::Succeeded,
            lease.trigger,
            lease.slot,
            "me",
            t(T0),
        );
        let out = finish_run(&mut r, &s, &mut row, Some(big), None, P, t(T0 + 1));
        assert!(
            out.state_rejected
                .as_deref()
                .unwrap()
                .starts_with("state_rejected")
        );
        assert!(row.reason.as_deref().unwrap().contains("state_rejected"));
        assert_eq!(r.rt.state.notepad["old"], "1");
    }

    /// A late completion (its owner was paused past its lease, not dead) of a run that another
    /// owner recorded `abandoned`.
    fn late(r: &mut JobRecord, run: &ClaimPlan, status: Status, now: i64) -> CompleteOutcome {
        let mut row = HistoryRow::new(&r.def.name, status, run.trigger, run.slot, "me", t(now));
        row.run_id = run.run_id;
        row.result = Some("done".into());
        let c = Completion {
            job: r.def.name.clone(),
            run_id: run.run_id,
            owner: "me".into(),
            now: t(now),
            row,
            state: None,
            hold_until: None,
        };
        complete_step(r, None, c, P).unwrap()
    }

    /// The owner of `run` stopped past its lease; "other" recovers it at `now`.
    fn recover(r: &mut JobRecord, now: i64) -> Evaluation {
        let s = sched(r);
        claim_step(r, &s, t(now), "other", true, P, None)
    }

    /// Issue 10 item 5: "nothing is ever recorded under a status that did not happen". The run
    /// really succeeded: its row supersedes the `abandoned` one, the counters hold one row for
    /// it (its real status) and, no newer run having started, the job's last status is it.
    #[test]
    fn a_late_completion_of_an_abandoned_run_supersedes_its_row() {
        let mut r = ran_at_t0(None);
        let run = eval(&mut r, T0 + 60).claim.unwrap();
        let ev = recover(&mut r, T0 + 100);
        assert_eq!(ev.rows[0].status, Status::Abandoned);
        assert_eq!(r.rt.last_status, Some(Status::Abandoned));
        assert_eq!(r.rt.abandoned.len(), 1);
        let runs = r.rt.runs;
        let out = late(&mut r, &run, Status::Succeeded, T0 + 105);
        assert!(out.stale, "its lease was taken over");
        let row = &out.rows[0];
        assert!(row.supersedes_abandoned && row.stale_lease, "{row:?}");
        assert_eq!(r.rt.last_status, Some(Status::Succeeded));
        assert_eq!(r.rt.last_run_at, Some(t(T0 + 105)));
        assert_eq!(r.rt.last_success_result.as_deref(), Some("done"));
        assert_eq!(
            r.rt.runs,
            runs + 1,
            "the run counts, as if it had ended in time"
        );
        let c = &r.rt.counters;
        assert_eq!(c.by_status.get(&Status::Abandoned), None, "{c:?}");
        assert_eq!(c.by_status[&Status::Succeeded], 2);
        let hour: u32 = c
            .hours
            .iter()
            .map(|b| {
                b.counts[Status::ALL
                    .iter()
                    .position(|s| *s == Status::Abandoned)
                    .unwrap()]
            })
            .sum();
        assert_eq!(hour, 0, "the hourly counts drop the hidden row too");
        assert!(r.rt.abandoned.is_empty(), "superseded once");
        // The schedule is not touched: the job waits for its next slot.
        assert_eq!(r.rt.next_slot, Some(t(T0 + 120)));
        // A second late completion of the same run (a duplicate) is plain stale.
        let again = late(&mut r, &run, Status::Succeeded, T0 + 106);
        assert!(!again.rows[0].supersedes_abandoned);
    }

    /// The fencing of a late result is kept: a newer run live decides the job's state; only the
    /// last status (the newest ended run is still this one) and the counters follow.
    #[test]
    fn a_late_completion_beside_a_newer_run_touches_only_its_row_and_counters() {
        let mut r = ran_at_t0(None);
        let run = eval(&mut r, T0 + 60).claim.unwrap();
        recover(&mut r, T0 + 100);
        let newer = eval(&mut r, T0 + 120).claim.unwrap();
        let out = late(&mut r, &run, Status::Failed, T0 + 125);
        assert!(out.rows[0].supersedes_abandoned);
        assert_eq!(r.rt.lease.as_ref().unwrap().run_id, newer.run_id);
        assert_eq!(r.rt.last_status, Some(Status::Failed));
        assert_eq!(
            r.rt.runs, 2,
            "the late run really ran: it counts (jobs RUNS = the rows stats counts)"
        );
        // A newer run that ended first keeps the last status.
        done(&mut r, Status::Succeeded, T0 + 130);
        let run2 = eval(&mut r, T0 + 180).claim.unwrap();
        recover(&mut r, T0 + 220);
        let newer2 = eval(&mut r, T0 + 240).claim.unwrap();
        let _ = newer2;
        done(&mut r, Status::Succeeded, T0 + 241);
        late(&mut r, &run2, Status::Failed, T0 + 250);
        assert_eq!(r.rt.last_status, Some(Status::Succeeded));
        assert_eq!(r.rt.last_run_at, Some(t(T0 + 241)));
    }

    /// Red team 4: a late end that supersedes an `abandoned` row counts toward `max_runs`
    /// although a newer run started meanwhile; that newer run's end then retires the job (it
    /// executed 4 times with `max_runs: 3`, and `jobs` said RUNS 3 beside 4 rows).
    #[test]
    fn a_late_completion_counts_toward_max_runs_beside_a_newer_run() {
        let mut d = def("capped");
        d.max_runs = Some(3);
        let mut r = new_record(d, t(T0)).unwrap();
        eval(&mut r, T0).claim.unwrap();
        done(&mut r, Status::Succeeded, T0 + 1);
        let stopped = eval(&mut r, T0 + 60).claim.unwrap();
        recover(&mut r, T0 + 100);
        let newer = eval(&mut r, T0 + 120).claim.unwrap();
        assert!(
            !r.rt.lease.as_ref().unwrap().spends_job,
            "runs 1 + 1 < 3 at the claim"
        );
        late(&mut r, &stopped, Status::Succeeded, T0 + 125);
        assert_eq!(r.rt.runs, 2);
        assert!(!r.rt.retired);
        done(&mut r, Status::Succeeded, T0 + 130);
        assert_eq!(r.rt.runs, 3, "three executions ended, three runs");
        assert!(r.rt.retired, "the third run's end retires the job");
        assert_eq!(r.rt.retired_reason.as_deref(), Some("max_runs reached"));
        assert!(
            eval(&mut r, T0 + 180).claim.is_none(),
            "no fourth execution"
        );
        let _ = newer;
    }

    /// A late end that reaches `max_runs` while the job's last run is in flight retires the
    /// job at once: that run ends (the documented bound, `max_runs` + 1), nothing after it.
    #[test]
    fn a_late_completion_that_reaches_max_runs_retires_at_once() {
        let mut d = def("capped");
        d.max_runs = Some(2);
        let mut r = new_record(d, t(T0)).unwrap();
        eval(&mut r, T0).claim.unwrap();
        done(&mut r, Status::Succeeded, T0 + 1);
        let stopped = eval(&mut r, T0 + 60).claim.unwrap();
        // The second run spends the job: its `abandoned` row owes one recovery run.
        let last = recover(&mut r, T0 + 100).claim.unwrap();
        assert_eq!(last.trigger, Trigger::Recovery);
        late(&mut r, &stopped, Status::Failed, T0 + 125);
        assert_eq!(r.rt.runs, 2);
        assert!(r.rt.retired);
        assert_eq!(r.rt.retired_reason.as_deref(), Some("max_runs reached"));
        assert!(r.rt.lease.is_some(), "the run in flight is not touched");
        done(&mut r, Status::Succeeded, T0 + 130);
        assert_eq!(r.rt.runs, 3, "it ran: it counts");
        assert!(r.rt.lease.is_none() && r.rt.retired);
        assert!(eval(&mut r, T0 + 180).claim.is_none());
    }

    /// A one-shot whose run was recorded `abandoned` is owed one retry; if the run's real end
    /// arrives first, it did run: spent and retired, no retry.
    #[test]
    fn a_once_job_whose_abandoned_run_really_ended_is_not_run_again() {
        let mut d = def("once");
        d.max_runs = Some(1);
        let mut r = new_record(d, t(T0)).unwrap();
        let run = eval(&mut r, T0).claim.unwrap();
        let s = sched(&r);
        let until = r.rt.lease.as_ref().unwrap().lease_until;
        let ev = claim_step(&mut r, &s, until, "other", false, P, None);
        assert_eq!(ev.rows[0].status, Status::Abandoned);
        assert!(r.rt.recovery_pending);
        let out = late(&mut r, &run, Status::Succeeded, T0 + 40);
        assert!(out.rows[0].supersedes_abandoned);
        assert!(!r.rt.recovery_pending);
        assert!(r.rt.retired);
        assert_eq!(r.rt.retired_reason.as_deref(), Some("once: ran"));
        assert!(
            eval(&mut r, T0 + 100).claim.is_none(),
            "no retry of a run that ran"
        );
    }

    #[test]
    fn counters_reset_when_the_period_changes() {
        let mut r = job("c", t(T0));
        let mut row = HistoryRow::new("c", Status::Succeeded, Trigger::Schedule, None, "me", t(T0));
        row.cost_usd = 0.25;
        row.unpriced = true;
        count_row(&mut r, &row, P, t(T0));
        count_row(&mut r, &row, P, t(T0 + 10));
        assert!((r.rt.counters.period_cost_usd - 0.5).abs() < 1e-12);
        count_row(&mut r, &row, P, t(T0 + 86_400));
        assert!((r.rt.counters.period_cost_usd - 0.25).abs() < 1e-12);
        assert!((r.rt.counters.total_cost_usd - 0.75).abs() < 1e-12);
        assert!(r.rt.counters.cost_incomplete);
    }

    #[test]
    fn renew_is_fenced_by_run_id() {
        let mut r = job("r", t(T0));
        let c = eval(&mut r, T0).claim.unwrap();
        assert!(renew(&mut r, Uuid::new_v4(), t(T0 + 10)).is_none());
        assert_eq!(renew(&mut r, c.run_id, t(T0 + 10)), Some(t(T0 + 40)));
        assert!(!lapsed(&r, c.run_id, t(T0 + 39)));
        assert!(lapsed(&r, c.run_id, t(T0 + 40)), "expired at now");
    }

    #[test]
    fn a_renewal_after_expiry_marks_the_lease_lapsed_for_good() {
        let mut r = job("r", t(T0));
        let c = eval(&mut r, T0).claim.unwrap();
        assert_eq!(renew(&mut r, c.run_id, t(T0 + 100)), Some(t(T0 + 130)));
        assert!(lapsed(&r, c.run_id, t(T0 + 101)));
        assert!(!lapsed(&r, Uuid::new_v4(), t(T0 + 101)), "fenced by run_id");
    }

    #[test]
    fn limit_zero_still_writes_missed_rows_but_claims_nothing() {
        let mut r = ran_at_t0(Some(90.0));
        let s = sched(&r);
        let ev = evaluate(&mut r, &s, t(T0 + 300), "me", false, P);
        assert_eq!(ev.rows.len(), 1);
        assert!(ev.claim.is_none());
    }

    #[test]
    fn apply_schedule_change_reanchors_and_removed_job_comes_back() {
        let mut r = ran_at_t0(None);
        let mut d = r.def.clone();
        d.schedule = ScheduleSpec::Every { every_seconds: 100 };
        assert_eq!(
            apply_def(&mut r, &d, t(T0 + 30)).unwrap(),
            ApplyChange::Updated
        );
        assert_eq!(r.rt.anchor, t(T0 + 30));
        assert_eq!(r.rt.next_slot, Some(t(T0 + 30)));
        r.rt.retired = true;
        r.rt.retired_reason = Some(REASON_REMOVED.into());
        assert_eq!(
            apply_def(&mut r, &d, t(T0 + 31)).unwrap(),
            ApplyChange::Updated
        );
        assert!(!r.rt.retired);
    }
}

#[cfg(test)]
mod cron_and_config_tests {
    use super::*;

    use crate::testkit::time::rfc3339 as t;

    fn load(yaml: &str) -> JobDef {
        let l = crate::config::load_str(yaml, std::path::Path::new("jobs.yaml"))
            .unwrap_or_else(|e| panic!("{e}"));
        l.file.jobs.into_iter().next().unwrap()
    }

    fn cron_def(grace: &str) -> JobDef {
        load(&format!(
            "jobs:\n  - name: brief\n    schedule: {{ kind: cron, cron_expr: \"0 7 * * *\", tz: UTC }}\n    command: \"true\"\n    misfire_grace_seconds: {grace}\n"
        ))
    }

    /// Issue 10 item 7 / SPEC §5: a coalesced cron fire names the LATEST overdue slot and its
    /// row carries the whole range.
    #[test]
    fn s5_coalesced_cron_fire_names_the_latest_slot_and_carries_the_range() {
        let mut r = new_record(cron_def("null"), t("2026-11-20T12:00:00Z")).unwrap();
        let s = compile(&r).unwrap();
        r.rt.last_slot = Some(t("2026-11-26T07:00:00Z"));
        r.rt.next_slot = Some(t("2026-11-27T07:00:00Z"));
        let now = t("2026-11-29T09:00:00Z");
        let c = evaluate(&mut r, &s, now, "o", true, BudgetPeriod::Day)
            .claim
            .unwrap();
        assert_eq!(c.slot, Some(t("2026-11-29T07:00:00Z")), "the latest slot");
        let mut row = HistoryRow::new("brief", Status::Succeeded, c.trigger, c.slot, "o", now);
        row.run_id = c.run_id;
        finish_run(&mut r, &s, &mut row, None, None, BudgetPeriod::Day, now);
        assert_eq!(row.slots_count, Some(3));
        assert_eq!(row.slot_start, Some(t("2026-11-27T07:00:00Z")));
        assert_eq!(row.slot_end, Some(t("2026-11-29T07:00:00Z")));
    }

    #[test]
    fn s5_cron_last_ran_3_days_ago_grace_600_now_9am_is_one_missed_row() {
        let created = t("2026-11-20T12:00:00Z");
        let mut r = new_record(cron_def("600"), created).unwrap();
        let s = compile(&r).unwrap();
        // It ran its 07:00 slot three days ago.
        let c = evaluate(
            &mut r,
            &s,
            t("2026-11-26T07:00:05Z"),
            "o",
            true,
            BudgetPeriod::Day,
        );
        let c = c.claim.unwrap();
        assert_eq!(
            c.slot,
            Some(t("2026-11-26T07:00:00Z")),
            "first claim fires the latest slot"
        );
        assert_eq!(r.rt.next_slot, Some(t("2026-11-27T07:00:00Z")));
        r.rt.lease = None;
        r.rt.last_slot = Some(t("2026-11-26T07:00:00Z"));
        r.rt.next_slot = Some(t("2026-11-27T07:00:00Z"));
        let ev = evaluate(
            &mut r,
            &s,
            t("2026-11-29T09:00:00Z"),
            "o",
            true,
            BudgetPeriod::Day,
        );
        assert!(ev.claim.is_none());
        assert_eq!(ev.rows.len(), 1);
        let row = &ev.rows[0];
        assert_eq!(row.status, Status::Missed);
        assert_eq!(row.slot, Some(t("2026-11-27T07:00:00Z")));
        assert_eq!(row.slot_end, Some(t("2026-11-29T07:00:00Z")));
        assert_eq!(row.slots_count, Some(3));
        assert_eq!(r.rt.next_slot, Some(t("2026-11-30T07:00:00Z")));
    }

    #[test]
    fn s5_cron_never_run_created_3_days_ago_fires_without_missed_row() {
        let mut r = new_record(cron_def("600"), t("2026-11-26T09:00:00Z")).unwrap();
        let s = compile(&r).unwrap();
        let ev = evaluate(
            &mut r,
            &s,
            t("2026-11-29T09:00:00Z"),
            "o",
            true,
            BudgetPeriod::Day,
        );
        assert!(ev.rows.is_empty());
        assert_eq!(ev.claim.unwrap().slot, Some(t("2026-11-29T07:00:00Z")));
    }

    fn every_def(grace: &str) -> JobDef {
        load(&format!(
            "jobs:\n  - name: e\n    schedule: every 60s\n    command: \"true\"\n    misfire_grace_seconds: {grace}\n"
        ))
    }

    fn ran_at_t0(d: JobDef) -> (JobRecord, Compiled) {
        let t0 = DateTime::from_timestamp(1000, 0).unwrap();
        let mut r = new_record(d, t0).unwrap();
        let s = compile(&r).unwrap();
        evaluate(&mut r, &s, t0, "o", true, BudgetPeriod::Day)
            .claim
            .unwrap();
        r.rt.lease = None;
        (r, s)
    }

    #[test]
    fn s5_grace_string_90_behaves_as_90() {
        let (mut r, s) = ran_at_t0(every_def("\"90\""));
        assert_eq!(r.def.misfire_grace_seconds, Some(90.0));
        let now = DateTime::from_timestamp(1300, 0).unwrap();
        let ev = evaluate(&mut r, &s, now, "o", true, BudgetPeriod::Day);
        assert_eq!(ev.rows.len(), 1);
        assert_eq!(ev.rows[0].status, Status::Missed);
    }

    #[test]
    fn s5_grace_junk_is_null_no_misfire_no_error() {
        let (mut r, s) = ran_at_t0(every_def("\"notanumber\""));
        assert_eq!(r.def.misfire_grace_seconds, None);
        let now = DateTime::from_timestamp(1300, 0).unwrap();
        let ev = evaluate(&mut r, &s, now, "o", true, BudgetPeriod::Day);
        assert!(ev.rows.is_empty());
        assert_eq!(
            ev.claim.unwrap().slot,
            Some(DateTime::from_timestamp(1060, 0).unwrap())
        );
    }
}

/// Issue 16 items 3 and 4: jitter moves the fire instant, never the slot; calendars remove slots.
#[cfg(test)]
mod tests_jitter_calendars {
    use super::tests_support::def;
    use super::*;
    use crate::schedule::calendar::{Calendar, DayRule};

    use crate::testkit::time::epoch as t;

    fn eval(r: &mut JobRecord, now: DateTime<Utc>) -> Evaluation {
        let s = compile(r).unwrap();
        evaluate(r, &s, now, "me", true, BudgetPeriod::Day)
    }

    fn finish(r: &mut JobRecord, now: DateTime<Utc>) {
        let s = compile(r).unwrap();
        let lease = r.rt.lease.clone().unwrap();
        let mut row = HistoryRow::new(
            &r.def.name,
            Status::Succeeded,
            lease.trigger,
            lease.slot,
            "me",
            now,
        );
        row.run_id = lease.run_id;
        finish_run(r, &s, &mut row, None, None, BudgetPeriod::Day, now);
    }

    /// An hourly job with 600 s of jitter that ran its first slot.
    fn jittered() -> (JobRecord, DateTime<Utc>, Duration) {
        let mut d = def("jit");
        d.schedule = ScheduleSpec::Every {
            every_seconds: 3600,
        };
        d.jitter_seconds = 600.0;
        let t0 = t(1_800_000_000);
        let mut r = new_record(d, t0).unwrap();
        let off0 = r.def.fire_at(t0) - t0;
        assert!(eval(&mut r, t0 + off0).claim.is_some());
        finish(&mut r, t0 + off0 + Duration::seconds(1));
        let next = t0 + Duration::seconds(3600);
        assert_eq!(r.rt.next_slot, Some(next));
        let off = r.def.fire_at(next) - next;
        assert!(off > Duration::zero() && off < Duration::seconds(600));
        (r, next, off)
    }

    #[test]
    fn a_jittered_slot_is_claimed_at_its_fire_instant_and_keeps_the_slot() {
        let (mut r, next, off) = jittered();
        assert_eq!(
            wakeup(&r),
            Some(next + off),
            "the store wakes at the fire instant"
        );
        let early = eval(&mut r, next + off - Duration::milliseconds(1));
        assert!(early.claim.is_none() && early.rows.is_empty());
        let c = eval(&mut r, next + off).claim.unwrap();
        assert_eq!(
            c.slot,
            Some(next),
            "the claim names the slot, not the fire instant"
        );
    }

    #[test]
    fn misfire_grace_counts_from_the_fire_instant() {
        let (mut r, next, off) = jittered();
        r.def.misfire_grace_seconds = Some(30.0);
        // 30 s after the fire instant is within grace even though the slot is older.
        let c = eval(&mut r, next + off + Duration::seconds(30)).claim;
        assert!(c.is_some(), "age is counted from slot + jitter");
        let (mut r, next, off) = jittered();
        r.def.misfire_grace_seconds = Some(30.0);
        let ev = eval(&mut r, next + off + Duration::seconds(31));
        assert!(ev.claim.is_none());
        assert_eq!(ev.rows[0].status, Status::Missed);
    }

    #[test]
    fn the_fire_instant_is_the_same_for_every_owner_and_restart() {
        let (r, next, off) = jittered();
        let copy: JobRecord = serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
        assert_eq!(copy.def.fire_at(next), next + off);
    }

    fn weekdays_only() -> DayRule {
        DayRule {
            only_on: Some(Calendar {
                name: "business".into(),
                weekdays: [true, true, true, true, true, false, false],
                dates: Default::default(),
            }),
            except_on: Some(Calendar {
                name: "holidays".into(),
                weekdays: [false; 7],
                dates: [chrono::NaiveDate::from_ymd_opt(2026, 12, 25).unwrap()].into(),
            }),
        }
    }

    #[test]
    fn slots_on_excluded_dates_are_not_slots() {
        let mut d = def("cal");
        d.schedule = ScheduleSpec::Cron {
            expr: "0 9 * * *".into(),
            tz: "UTC".into(),
        };
        d.days = weekdays_only();
        // Thursday 2026-12-24 10:00 UTC: the next slots are Mon 28th (Fri 25th is a holiday,
        // then the weekend), not Fri 25th.
        let now = "2026-12-24T10:00:00Z".parse::<DateTime<Utc>>().unwrap();
        let mut r = new_record(d, now).unwrap();
        let mon = "2026-12-28T09:00:00Z".parse::<DateTime<Utc>>().unwrap();
        assert_eq!(r.rt.next_slot, Some(mon));
        // Nothing happens (no row, no claim) over the skipped dates.
        let sat = "2026-12-26T09:00:00Z".parse::<DateTime<Utc>>().unwrap();
        let ev = eval(&mut r, sat);
        assert!(ev.claim.is_none() && ev.rows.is_empty());
        assert_eq!(eval(&mut r, mon).claim.unwrap().slot, Some(mon));
    }

    #[test]
    fn an_every_job_first_slot_moves_off_an_excluded_date() {
        let mut d = def("cal");
        d.days = weekdays_only();
        // Saturday 2026-12-26 12:00 UTC: the first slot is Monday's first grid point.
        let sat = "2026-12-26T12:00:00Z".parse::<DateTime<Utc>>().unwrap();
        let r = new_record(d, sat).unwrap();
        let mon = "2026-12-28T00:00:00Z".parse::<DateTime<Utc>>().unwrap();
        assert_eq!(r.rt.next_slot, Some(mon));
    }

    #[test]
    fn changing_only_the_calendars_moves_the_next_slot() {
        let mut d = def("cal");
        d.schedule = ScheduleSpec::Cron {
            expr: "0 9 * * *".into(),
            tz: "UTC".into(),
        };
        let now = "2026-12-24T10:00:00Z".parse::<DateTime<Utc>>().unwrap();
        let mut r = new_record(d.clone(), now).unwrap();
        assert_eq!(
            r.rt.next_slot,
            Some("2026-12-25T09:00:00Z".parse().unwrap())
        );
        d.days = weekdays_only();
        apply_def(&mut r, &d, now).unwrap();
        assert_eq!(
            r.rt.next_slot,
            Some("2026-12-28T09:00:00Z".parse().unwrap())
        );
    }
}

/// [`unlanded_part`]: a generated row keeps exactly the slots no landed row records.
#[cfg(test)]
mod tests_unlanded {
    use super::tests_support::job;
    use super::*;
    use crate::testkit::time::epoch as t;

    fn generated(status: Status, first: i64, last: i64) -> HistoryRow {
        let mut r = HistoryRow::new("j", status, Trigger::Schedule, Some(t(first)), "o", t(last));
        if status == Status::Skipped {
            r.reason = Some(REASON_OVERLAP.to_string());
        }
        r.slot_end = Some(t(last));
        r.slots_count = Some(((last - first) / 60 + 1) as u64);
        r
    }

    fn spans(rows: &[HistoryRow]) -> Vec<(i64, i64, u64)> {
        rows.iter()
            .map(|r| {
                (
                    r.slot.map_or(-1, |s| s.timestamp()),
                    r.slot_end.map_or(-1, |s| s.timestamp()),
                    r.slots_count.unwrap_or(0),
                )
            })
            .collect()
    }

    /// Seeds 760, 563, 3225: an overlap row whose first slots a dead recoverer's overlap row
    /// records and whose later ones its `missed` row records is dropped whole.
    #[test]
    fn every_landed_row_counts_not_only_the_one_at_the_first_slot() {
        let s = compile(&job("j", t(0))).unwrap();
        let new = generated(Status::Skipped, 60, 600);
        let landed = [
            generated(Status::Skipped, 60, 240),
            generated(Status::Missed, 300, 600),
        ];
        assert_eq!(spans(&unlanded_part(new, &landed, &s)), vec![]);
    }

    #[test]
    fn a_landed_row_in_the_middle_leaves_the_stretches_around_it() {
        let s = compile(&job("j", t(0))).unwrap();
        let new = generated(Status::Skipped, 60, 600);
        let landed = [generated(Status::Missed, 240, 360)];
        let out = unlanded_part(new.clone(), &landed, &s);
        assert_eq!(spans(&out), vec![(60, 180, 3), (420, 600, 4)]);
        assert_eq!(out[0].run_id, new.run_id);
        assert_ne!(out[1].run_id, new.run_id, "a row of its own");
    }

    #[test]
    fn a_landed_row_at_the_first_slot_leaves_the_rest() {
        let s = compile(&job("j", t(0))).unwrap();
        let new = generated(Status::Missed, 60, 600);
        let landed = [generated(Status::Missed, 60, 300)];
        assert_eq!(spans(&unlanded_part(new, &landed, &s)), vec![(360, 600, 5)]);
        let untouched = generated(Status::Missed, 60, 600);
        let elsewhere = [generated(Status::Missed, 660, 720)];
        assert_eq!(
            spans(&unlanded_part(untouched, &elsewhere, &s)),
            vec![(60, 600, 10)]
        );
    }

    /// Seeds 554, 7937: a landed row reaching past the record's next slot moves it past its
    /// last slot; rows of other jobs, older rows and run rows do not.
    #[test]
    fn the_next_slot_moves_past_what_landed_rows_record() {
        let mut r = job("j", t(0));
        let s = compile(&r).unwrap();
        r.rt.next_slot = Some(t(120));
        let mut other = generated(Status::Missed, 120, 600);
        other.job = "k".into();
        let older = generated(Status::Missed, 0, 60);
        let mut run = generated(Status::Succeeded, 120, 120);
        run.reason = None;
        assert!(!skip_recorded(&mut r, &s, &[other, older, run]));
        assert_eq!(r.rt.next_slot, Some(t(120)));
        let landed = [
            generated(Status::Skipped, 60, 180),
            generated(Status::Missed, 240, 300),
        ];
        assert!(skip_recorded(&mut r, &s, &landed));
        assert_eq!(r.rt.next_slot, Some(t(360)), "past both adjoining rows");
    }

    #[test]
    fn a_generated_row_is_behind_the_record_only_when_every_slot_it_records_is() {
        let mut r = job("a", t(0));
        r.rt.next_slot = Some(t(120));
        let mut row = HistoryRow::new(
            "a",
            Status::Missed,
            Trigger::Schedule,
            Some(t(60)),
            "o",
            t(61),
        );
        assert!(slots_behind(&r, &row));
        row.slot_end = Some(t(120));
        assert!(!slots_behind(&r, &row), "t120 is still ahead");
        row.slot = Some(t(180));
        row.slot_end = None;
        assert!(!slots_behind(&r, &row));
        r.rt.next_slot = None;
        assert!(
            slots_behind(&r, &row),
            "a job with no next slot fires none again"
        );
    }
}

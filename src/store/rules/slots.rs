//! Slot arithmetic: where a job's schedule puts its slots relative to an instant.
//!
//! Owns: compiling a stored record's schedule against its anchor, a new job's anchor and first
//! slot, the slot a due job fires for, and the small duration helpers the store decides with.
//! Must not touch: what a slot's firing does to the record (`store::policy`), I/O, clocks.
//!
//! Decisions:
//! - An `every` job's anchor is the instant it was first stored and its first slot is one
//!   interval later, so storing a job never runs it by itself (`run_immediately` does). A cron
//!   job's first slot is the first cron instant at or after its creation; a first slot on a date
//!   the job's calendars exclude is not a slot.
//! - A coalesced fire (grace null) names its scheduled instant: for cron the latest slot at or
//!   before now, for `every` the first overdue slot.

use chrono::{DateTime, Duration, Utc};

use crate::model::{JobDef, JobRecord};
use crate::schedule::{Compiled, ScheduleError};

/// Cap on counting slots of one `missed`/overlap row (cron ranges are counted one by one).
pub const SLOT_COUNT_CAP: u64 = 100_000;

/// Compile a stored job's schedule against its runtime anchor.
pub fn compile(rec: &JobRecord) -> Result<Compiled, ScheduleError> {
    rec.def.compile(rec.rt.anchor)
}

pub(crate) fn ms(n: i64) -> Duration {
    Duration::milliseconds(n)
}

/// Seconds from the jobs file as a duration, clamped to [0, 100 years] so `now + d` can never
/// leave chrono's range (config bounds the values too; this is the last line of defence).
pub(crate) fn secs_f64(s: f64) -> Duration {
    const MAX_SECS: f64 = 100.0 * 365.25 * 86_400.0;
    let s = if s.is_finite() && s > 0.0 {
        s.min(MAX_SECS)
    } else {
        0.0
    };
    Duration::milliseconds((s * 1000.0) as i64)
}

/// The first slot at or after `t`.
pub(crate) fn first_at_or_after(sched: &Compiled, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
    sched.next_after(t - ms(1))
}

/// Anchor and first slot of a job stored (or re-anchored) at `now`: the rule every preview
/// shows ([`JobDef::schedule_start`]).
pub(crate) fn initial_slots(
    def: &JobDef,
    now: DateTime<Utc>,
) -> Result<(DateTime<Utc>, Option<DateTime<Utc>>), ScheduleError> {
    def.schedule_start(now)
}

/// Move a recurring job's next slot past `now` without recording anything (resume, re-enable).
/// A never-run job and `at` jobs keep their slot: their first fire is never a lost recurrence.
pub(crate) fn skip_to_future(rec: &mut JobRecord, now: DateTime<Utc>) -> Result<(), ScheduleError> {
    if rec.rt.last_slot.is_none() || !rec.def.schedule.is_recurring() {
        return Ok(());
    }
    let sched = compile(rec)?;
    if rec.rt.next_slot.is_some_and(|n| n <= now) {
        rec.rt.next_slot = sched.next_after(now);
    }
    Ok(())
}

/// The slot a due job fires now: the newest passed slot, taken only once its own (jittered)
/// fire instant has come, else `next`.
pub(crate) fn firing_slot(
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

/// The scheduled instant of a due job.
pub(crate) fn scheduled_instant(
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

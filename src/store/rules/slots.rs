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
//! - A record whose slots were decided by a clock more than [`CLOCK_FIX`] ahead of `now` (a wall
//!   clock stepped forward two days and back, an owner whose clock ran that far ahead) is
//!   re-derived from `now` (`rederive`): its next slot comes back to the schedule's first slot
//!   after `now` (and after its last slot when that one stays), and an `every` grid whose origin
//!   lies ahead moves back by whole intervals (same phase). A clock that far off was wrong, and
//!   the later clock is taken as corrected.
//! - Within [`CLOCK_FIX`], what was decided ahead stays: a slot that ran, the slots a coalesced
//!   fire stood for (its claim covered every slot up to its instant, though the record names
//!   only the first), slots recorded `missed` or skipped, and the next slot chosen after them.
//!   The clock that is behind now may be the wrong one (stepped back by hand, about to be set
//!   right), and moving any of them back would run those slots again, or give them a second
//!   row, when it is; so the job waits for the clock to pass them, as cron does for a clock set
//!   back by less than three hours. Only an `every` grid's origin more than
//!   [`AHEAD_TOLERANCE`] ahead moves back by whole intervals (same phase), which moves no slot.
//! - A job that never ran, stored by a clock more than [`FIRST_SLOT_FIX`] ahead of `now` (its
//!   schedule's start lies that far ahead), is stored again from `now`: its first slot is the
//!   one a job stored now gets. Nothing of it ran, so nothing can run twice, and a store
//!   created under a clock an hour ahead would otherwise wait that hour in silence. The slots
//!   it had are kept (`moved_back`) and come back if the clock returns to where it stored the
//!   job before the job ran, so a clock set back by mistake and set right gives no job a first
//!   slot before it was stored.
//! - A job retired because its `until` passed, while `until` lies more than
//!   [`AHEAD_TOLERANCE`] ahead of `now`, was retired by a clock ahead: it comes back and runs
//!   its slots up to `until`, from the first after the last slot it ran (the rule above for a
//!   last slot ahead applies: from `now` when that lies more than [`CLOCK_FIX`] ahead).

use chrono::{DateTime, Duration, Utc};

use crate::model::{JobDef, JobRecord, MovedBack};
use crate::schedule::{Compiled, ScheduleError, ScheduleSpec};
use crate::store::rules::reasons::RETIRED_UNTIL;

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

/// How far ahead of `now` a record's slots may have been decided before `rederive` treats
/// them as decided by a wrong clock. Above every default offset bound between owners (a
/// second owner within its bound must never re-run a slot), far below any step worth undoing.
pub const AHEAD_TOLERANCE: Duration = Duration::seconds(60);

/// How far ahead of `now` a slot that ran must lie before `rederive` takes the clock that ran
/// it as wrong and moves the job's last slot back (see the module doc).
pub const CLOCK_FIX: Duration = Duration::hours(3);

/// Re-derive a recurring job's slots from `now` when they were decided by a clock more than
/// [`CLOCK_FIX`] ahead (see the module doc): its last slot lies more than that after `now`, or
/// the instant its next slot was chosen at (at least the schedule's slot before it) does. An
/// `every` grid's origin ahead moves back from [`AHEAD_TOLERANCE`] (for a job that never ran,
/// from [`CLOCK_FIX`]), which moves no slot. Returns what changed, in words for the log, or
/// `None` when the record is left as it was. A retired job, a live run's, and a one-shot are
/// never touched.
pub(crate) fn rederive(rec: &mut JobRecord, now: DateTime<Utc>) -> Option<String> {
    let rt = &rec.rt;
    if rt.retired {
        return unretire(rec, now);
    }
    if rt.lease.is_some() {
        return None;
    }
    if rt.last_slot.is_none()
        && !rt.recovery_pending
        && let Some(what) = store_again(rec, now)
    {
        return Some(what);
    }
    if !rec.def.schedule.is_recurring() {
        return None;
    }
    rederive_slots(rec, now)
}

/// How far ahead of `now` a job that never ran must have been stored (its schedule's start,
/// [`stored_at`]) before `rederive` stores it again from `now`: a clock that far behind the one
/// that stored it has been set back (or the other was ahead). Above the minute two owners
/// within their offset bound may disagree by, and short enough that a store created under a
/// clock an hour ahead does not wait the hour.
pub const FIRST_SLOT_FIX: Duration = Duration::minutes(5);

/// The instant a job's schedule starts from: the instant it was stored (or re-anchored), which
/// is its anchor, except for `in`, whose anchor is its instant (stored + the delay).
pub(crate) fn stored_at(def: &JobDef, anchor: DateTime<Utc>) -> DateTime<Utc> {
    match def.schedule {
        ScheduleSpec::In { seconds } => i64::try_from(seconds)
            .ok()
            .and_then(Duration::try_seconds)
            .and_then(|d| anchor.checked_sub_signed(d))
            .unwrap_or(anchor),
        _ => anchor,
    }
}

/// A job that never ran, stored more than [`FIRST_SLOT_FIX`] ahead of `now`: stored again from
/// `now` (see the module doc), its slots kept in `moved_back`. `None` when it is left alone.
fn store_again(rec: &mut JobRecord, now: DateTime<Utc>) -> Option<String> {
    let stored = stored_at(&rec.def, rec.rt.anchor);
    if stored <= now + FIRST_SLOT_FIX {
        return None;
    }
    let (anchor, first) = initial_slots(&rec.def, now).ok()?;
    let next = if rec.def.run_immediately {
        // As for a new job: the immediate fire stands for the instant it is stored.
        Some(now.min(first.unwrap_or(now)))
    } else {
        first
    };
    if next == rec.rt.next_slot && matches!(rec.def.schedule, ScheduleSpec::At { .. }) {
        // An `at` job's slot is its instant, whenever it was stored: nothing to move.
        return None;
    }
    let rt = &mut rec.rt;
    if rt.moved_back.is_none() {
        rt.moved_back = Some(MovedBack {
            anchor: rt.anchor,
            last_slot: None,
            next_slot: rt.next_slot,
        });
    }
    let what = format!(
        "never ran, stored at {} by a clock {} ahead: first slot {} -> {}",
        stamp(stored),
        crate::clock::step_words(stored - now).trim_start_matches('+'),
        rt.next_slot.map_or_else(|| "none".into(), stamp),
        next.map_or_else(|| "none".into(), stamp)
    );
    rt.anchor = anchor;
    rt.next_slot = next;
    Some(what)
}

/// A job retired because its `until` passed, while `until` still lies more than
/// [`AHEAD_TOLERANCE`] ahead of `now`: back, with its next slot the first after the last slot
/// it ran and after `now` (re-derived from `now` when what it ran lies more than
/// [`CLOCK_FIX`] ahead). Left retired when no slot is left before `until`.
fn unretire(rec: &mut JobRecord, now: DateTime<Utc>) -> Option<String> {
    let rt = &rec.rt;
    let until = rec.def.until?;
    if rt.retired_reason.as_deref() != Some(RETIRED_UNTIL)
        || rt.lease.is_some()
        || !rec.def.schedule.is_recurring()
        || until <= now + AHEAD_TOLERANCE
    {
        return None;
    }
    let sched = compile(rec).ok()?;
    // What it ran reaches to its last slot, or the end of its last run (a coalesced fire
    // stands for every slot up to its claim, though it names only the first).
    let ran_to = [rt.last_slot, rt.last_run_at].into_iter().flatten().max();
    let mut back = rec.clone();
    back.rt.retired = false;
    back.rt.retired_reason = None;
    back.rt.next_slot = sched.next_after(ran_to.map_or(now, |r| r.max(now)));
    let moved = rederive(&mut back, now);
    let next = back.rt.next_slot.filter(|n| *n <= until)?;
    *rec = back;
    Some(format!(
        "retired as `until` passed, but `until` {} is {} ahead of this clock: back, next slot {}{}",
        stamp(until),
        crate::clock::step_words(until - now).trim_start_matches('+'),
        stamp(next),
        moved.map_or_else(String::new, |m| format!(" ({m})"))
    ))
}

/// [`rederive`] for a recurring job that is neither retired nor leased.
fn rederive_slots(rec: &mut JobRecord, now: DateTime<Utc>) -> Option<String> {
    let rt = &rec.rt;
    // What a job that never ran was given when it was stored (its grid origin, its first slot)
    // is like a slot that ran: moved back only from more than `CLOCK_FIX` ahead. Within that,
    // the clock behind now may be the wrong one, and a first slot derived from it lies before
    // the job existed once the clock is set right: a slot that never was, run at once.
    let bound = now
        + if rt.last_slot.is_none() {
            CLOCK_FIX
        } else {
            AHEAD_TOLERANCE
        };
    let sched = compile(rec).ok()?;
    let anchor = match sched.base() {
        Compiled::Every {
            every_seconds,
            anchor,
        } if *anchor > bound => {
            let every = Duration::seconds(i64::try_from(*every_seconds).ok()?.max(1));
            let behind = (*anchor - now).num_milliseconds();
            let k = (behind + every.num_milliseconds() - 1) / every.num_milliseconds();
            Some(*anchor - Duration::milliseconds(k.saturating_mul(every.num_milliseconds())))
        }
        _ => None,
    };
    let last_ahead = rt.last_slot.is_some_and(|l| l > now + CLOCK_FIX);
    // Within `CLOCK_FIX` the next slot stays: the slots before it were run (a coalesced fire
    // stands for every slot up to its claim), or recorded `missed` or skipped, by the clock
    // ahead: a coalesced fire at 327 names slot 300 and stands for 315 too, so re-deriving from
    // 300 after a step back of 213 s would run 315 again.
    let chosen_ahead = rt
        .next_slot
        .and_then(|n| sched.prev_before(n))
        .is_some_and(|p| p > now + CLOCK_FIX);
    if anchor.is_none() && !last_ahead && !chosen_ahead {
        return None;
    }
    // Moving slots back from more than `CLOCK_FIX` ahead: keep them, for a step back that is
    // undone (`restore_on_return`). The first such move is kept.
    if (last_ahead || chosen_ahead || rt.last_slot.is_none()) && rt.moved_back.is_none() {
        rec.rt.moved_back = Some(MovedBack {
            anchor: rt.anchor,
            last_slot: rt.last_slot,
            next_slot: rt.next_slot,
        });
    }
    let mut words = Vec::new();
    if let Some(a) = anchor {
        words.push(format!(
            "grid origin {} -> {}",
            stamp(rec.rt.anchor),
            stamp(a)
        ));
        rec.rt.anchor = a;
    }
    let sched = compile(rec).ok()?;
    if last_ahead {
        let back = sched.latest_at_or_before(now);
        words.push(format!(
            "last slot {} -> {}",
            rec.rt.last_slot.map_or_else(|| "-".into(), stamp),
            back.map_or_else(|| "none".into(), stamp)
        ));
        // Still "has run before" (a first fire is a different decision): the schedule's
        // latest slot, or `now` on a grid that starts after it.
        rec.rt.last_slot = Some(back.unwrap_or(now));
    }
    // A last slot left where it is (another owner's a little ahead, or one that ran before the
    // clock was set back) stays behind the next one: it is never run again.
    let from = match rec.rt.last_slot {
        Some(l) if !last_ahead => l.max(now),
        _ => now,
    };
    // A grid origin moved back alone keeps the next slot (same phase: it is still on the grid).
    let next = if last_ahead || chosen_ahead {
        sched.next_after(from)
    } else {
        rec.rt.next_slot
    };
    if rec.rt.next_slot != next {
        words.push(format!(
            "next slot {} -> {}",
            rec.rt.next_slot.map_or_else(|| "-".into(), stamp),
            next.map_or_else(|| "none".into(), stamp)
        ));
        rec.rt.next_slot = next;
    }
    if words.is_empty() {
        return None;
    }
    Some(words.join(", "))
}

/// Put back the slots a re-derivation moved back (`JobRuntime::moved_back`) once the clock is
/// back where they were decided: at or past the last slot then and the instant its next slot
/// was chosen at. A step back of four hours undone twenty seconds later then runs nothing
/// twice (the slot that ran at 09:27:00 is not the first slot of a coalesced run at 09:27:53,
/// a `daily` job that ran at 08:57 waits for tomorrow, a job that never ran keeps the first
/// slot it was stored with), while a clock that really was ahead reaches that point only after
/// the job has moved past it, and nothing changes. Returns what changed, in words for the log.
pub(crate) fn restore_on_return(rec: &mut JobRecord, now: DateTime<Utc>) -> Option<String> {
    let m = rec.rt.moved_back?;
    let sched = compile(rec).ok()?;
    let chosen = m.next_slot.and_then(|n| sched.prev_before(n));
    // A job that had never run was moved back as a whole: the clock is back once it reaches
    // the instant the job was stored at.
    let horizon = if m.last_slot.is_none() {
        stored_at(&rec.def, m.anchor)
    } else {
        [m.last_slot, chosen]
            .into_iter()
            .flatten()
            .max()
            .unwrap_or(m.anchor)
    };
    if now < horizon {
        return None;
    }
    rec.rt.moved_back = None;
    // What the re-derivation moved is back: it no longer explains the job's slots.
    rec.rt.rederived = None;
    let mut words = Vec::new();
    let rt = &mut rec.rt;
    // A job stored again while it had never run, that has run since and is on time on its
    // new grid (its next slot not overdue by a step), keeps that grid: the clock that stored it
    // first was the wrong one, and going back to its first slot would drop a slot of the grid
    // it runs on. Overdue by more, the clock came back from a step back: the first slot stays.
    let on_new_grid = m.last_slot.is_none()
        && rt.last_slot.is_some()
        && rt.next_slot.is_some_and(|c| c > now - FIRST_SLOT_FIX);
    let put_next = m
        .next_slot
        .filter(|n| rt.next_slot.is_none_or(|c| c < *n) && rt.lease.is_none() && !on_new_grid);
    // The first slot comes back with the grid it was stored on: put back on the grid of the
    // step back, an `every` job's next slot lies between two of that grid's slots, and the
    // grid's slots before it (after the instant the job was stored at) were never decided,
    // never run and never recorded.
    if m.last_slot.is_none()
        && rt.anchor != m.anchor
        && (rt.last_slot.is_none() || put_next.is_some())
    {
        words.push(format!(
            "grid origin {} -> {}",
            stamp(rt.anchor),
            stamp(m.anchor)
        ));
        rt.anchor = m.anchor;
    }
    if let Some(l) = m.last_slot
        && rt.last_slot.is_none_or(|c| c < l)
    {
        words.push(format!("last slot -> {}", stamp(l)));
        rt.last_slot = Some(l);
    }
    if let Some(n) = put_next {
        words.push(format!(
            "next slot {} -> {}",
            rt.next_slot.map_or_else(|| "-".into(), stamp),
            stamp(n)
        ));
        rt.next_slot = Some(n);
    }
    // Changed or not, the kept slots are dropped: the clock has passed them.
    Some(if words.is_empty() {
        "slots kept from before a step back: the job is already past them".into()
    } else {
        format!("the clock is back: {}", words.join(", "))
    })
}

fn stamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
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
    // Slots decided by a clock ahead of `now` while it was paused come back first.
    if let Some(what) = restore_on_return(rec, now) {
        tracing::warn!(job = %rec.def.name, "slots restored: {what}");
    }
    if let Some(what) = rederive(rec, now) {
        tracing::warn!(job = %rec.def.name, "slots re-derived from now: {what}");
    }
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

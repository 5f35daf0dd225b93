//! A definition arriving from the jobs file: a new job's record, and what an `apply` of a changed
//! definition does to a stored one.
//!
//! Owns: [`new_record`], [`apply_def`]. Must not touch: the whole-file `apply` (which records
//! change, retirement of removed jobs: `store::plan::apply`), storage, clocks.
//!
//! Decisions:
//! - A schedule change re-anchors the job (a new grid from now, whose first slot is one interval
//!   later, as for a new job); an unchanged `in 10m` keeps its resolved instant; new calendars
//!   move the next slot to the first one they allow.
//! - A job retired because it left the jobs file comes back when it is applied again; a spent job
//!   stays retired unless its schedule changed.
//! - `run_immediately`: the first claim fires with `trigger: immediate` for the creation instant
//!   (the schedule's own slots go on after it: for `every`, anchor + one interval); it counts as
//!   a run. Without it a new job waits for its first slot.

use chrono::{DateTime, Utc};

use super::overlap;
use crate::model::{JobDef, JobRecord, JobRuntime, JobState};
use crate::schedule::ScheduleError;
use crate::store::rules::reasons::REASON_REMOVED;
use crate::store::rules::slots::{compile, first_at_or_after, initial_slots, skip_to_future};

/// A fresh record for a job first stored at `now`.
pub fn new_record(def: JobDef, now: DateTime<Utc>) -> Result<JobRecord, ScheduleError> {
    let (anchor, first) = initial_slots(&def, now)?;
    let next_slot = if def.run_immediately {
        // The immediate fire stands for the creation instant (run_immediately).
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
            moved_back: None,
            rederived: None,
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

/// Bring an existing record up to date with `def` (`apply`). A schedule change
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
        overlap::on_pause(rec, now)?;
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

#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;

    /// An `every 60s` command job, enabled.
    pub fn def(name: &str) -> JobDef {
        crate::testkit::jobs::command_job(name, 60)
    }

    /// An `every 60s` job whose first slot is `first` (stored one interval before it).
    pub fn job(name: &str, first: DateTime<Utc>) -> JobRecord {
        due_at(def(name), first)
    }

    /// A new record of `def` whose first slot is `first`.
    pub fn due_at(def: JobDef, first: DateTime<Utc>) -> JobRecord {
        let stored = crate::testkit::jobs::stored_for_first_slot(&def, first);
        new_record(def, stored).expect("the schedule compiles")
    }
}

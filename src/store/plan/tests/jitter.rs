//! Jitter and calendars through the claim plan.

use crate::model::*;
use crate::schedule::ScheduleSpec;
use crate::store::plan::claim::*;
use crate::store::policy::define::tests_support::{def, due_at};
use crate::store::policy::define::*;
use chrono::{DateTime, Duration, Utc};

use crate::schedule::calendar::{Calendar, DayRule};

use crate::testkit::time::epoch as t;

use super::eval_at as eval;

fn finish(r: &mut JobRecord, now: DateTime<Utc>) {
    super::finish_at(r, Status::Succeeded, now);
}

/// An hourly job with 600 s of jitter that ran its first slot.
fn jittered() -> (JobRecord, DateTime<Utc>, Duration) {
    let mut d = def("jit");
    d.schedule = ScheduleSpec::Every {
        every_seconds: 3600,
    };
    d.jitter_seconds = 600.0;
    let t0 = t(1_800_000_000);
    let mut r = due_at(d, t0);
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

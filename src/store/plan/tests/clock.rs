//! Records whose slots a clock ahead of `now` decided: a forward step and its undoing, a step
//! back, a second owner a little ahead, and an `every` job stored while the clock was ahead.

use crate::model::*;
use crate::schedule::ScheduleSpec;
use crate::store::policy::define::tests_support::{def, due_at, job};
use crate::store::policy::define::*;
use crate::store::rules::slots::*;

use crate::testkit::time::epoch as t;

const T0: i64 = 1_000_000;
const DAY: i64 = 86_400;

use super::eval;

fn done(r: &mut JobRecord, now: i64) {
    super::done(r, Status::Succeeded, now);
}

/// Run the job's due slot at `now` (it must be due) and end it a second later.
fn run(r: &mut JobRecord, now: i64) -> Option<chrono::DateTime<chrono::Utc>> {
    let slot = eval(r, now).claim.expect("due").slot;
    done(r, now + 1);
    slot
}

#[test]
fn after_a_two_day_step_is_undone_the_job_fires_at_its_next_real_slot() {
    let mut r = job("j", t(T0));
    assert_eq!(run(&mut r, T0), Some(t(T0)));
    // The clock steps two days ahead: one coalesced fire there (named for its first overdue
    // slot, T0+60), the next slot two days out.
    assert_eq!(run(&mut r, T0 + 2 * DAY + 5), Some(t(T0 + 60)));
    assert_eq!(r.rt.next_slot, Some(t(T0 + 2 * DAY + 60)));
    // Back on the real clock, 10 s after the first run: nothing is due, but the record is
    // re-derived, so the job's next slot is its next real one after the slot that ran.
    let ev = eval(&mut r, T0 + 10);
    assert!(ev.claim.is_none() && ev.rows.is_empty(), "{ev:?}");
    assert!(ev.changed, "the re-derived record is written");
    assert_eq!(r.rt.next_slot, Some(t(T0 + 120)));
    assert_eq!(
        r.rt.last_slot,
        Some(t(T0 + 60)),
        "within the tolerance: kept"
    );
    assert_eq!(run(&mut r, T0 + 120), Some(t(T0 + 120)));
    assert_eq!(r.rt.next_slot, Some(t(T0 + 180)));
    // Once re-derived it stays put.
    assert!(!eval(&mut r, T0 + 130).changed);
    // A cron-like last slot far ahead comes back to the latest slot at or before now.
    r.rt.last_slot = Some(t(T0 + 2 * DAY));
    r.rt.next_slot = Some(t(T0 + 2 * DAY + 60));
    eval(&mut r, T0 + 130);
    assert_eq!(r.rt.last_slot, Some(t(T0 + 120)));
    assert_eq!(r.rt.next_slot, Some(t(T0 + 180)));
}

#[test]
fn missed_slots_recorded_ahead_do_not_stall_the_job() {
    let mut r = job("j", t(T0));
    r.def.misfire_grace_seconds = Some(5.0);
    run(&mut r, T0);
    // Ahead by a day: one `missed` row, the next slot a day out (the last slot stays).
    let ev = eval(&mut r, T0 + DAY + 30);
    assert_eq!(ev.rows.len(), 1);
    assert_eq!(ev.rows[0].status, Status::Missed);
    assert_eq!(r.rt.last_slot, Some(t(T0)));
    eval(&mut r, T0 + 30);
    assert_eq!(r.rt.next_slot, Some(t(T0 + 60)));
}

#[test]
fn a_step_back_of_an_hour_never_runs_a_slot_that_ran_again() {
    let mut r = job("j", t(T0 + 3600));
    assert_eq!(run(&mut r, T0 + 3600), Some(t(T0 + 3600)));
    assert_eq!(run(&mut r, T0 + 3660), Some(t(T0 + 3660)));
    // The clock steps back an hour: the slots that ran stay behind the job.
    let ev = eval(&mut r, T0 + 61);
    assert!(ev.claim.is_none(), "{ev:?}");
    assert_eq!(r.rt.last_slot, Some(t(T0 + 3660)));
    assert_eq!(r.rt.next_slot, Some(t(T0 + 3720)));
    // Set right again a moment later: the next slot is the one after the last that ran.
    let ev = eval(&mut r, T0 + 3670);
    assert!(ev.claim.is_none() && ev.rows.is_empty(), "{ev:?}");
    assert_eq!(run(&mut r, T0 + 3720), Some(t(T0 + 3720)));
}

#[test]
fn a_cron_slot_that_ran_is_not_run_again_after_the_clock_goes_back_and_forth() {
    let mut c = job("c", t(T0));
    c.def.schedule = ScheduleSpec::Cron {
        expr: "* * * * *".into(),
        tz: "UTC".into(),
    };
    let s = compile(&c).unwrap();
    c.rt.next_slot = s.next_after(t(T0));
    let first = c.rt.next_slot.unwrap().timestamp();
    assert_eq!(run(&mut c, first), Some(t(first)));
    // An hour back for a few seconds, then set right within the same minute: a coalesced fire
    // names the latest slot at or before now, which is the one that ran.
    let ev = eval(&mut c, first - 3600 + 5);
    assert!(ev.claim.is_none(), "{ev:?}");
    let ev = eval(&mut c, first + 30);
    assert!(ev.claim.is_none() && ev.rows.is_empty(), "{ev:?}");
    assert_eq!(run(&mut c, first + 60), Some(t(first + 60)));
}

#[test]
fn a_slot_that_ran_more_than_three_hours_ahead_is_taken_back() {
    let mut r = job("j", t(T0));
    run(&mut r, T0);
    assert_eq!(run(&mut r, T0 + 60), Some(t(T0 + 60)));
    // A run labelled four hours ahead (an owner whose clock was that far off).
    r.rt.last_slot = Some(t(T0 + 4 * 3600));
    r.rt.next_slot = Some(t(T0 + 4 * 3600 + 60));
    assert!(eval(&mut r, T0 + 90).changed);
    assert_eq!(r.rt.last_slot, Some(t(T0 + 60)));
    assert_eq!(r.rt.next_slot, Some(t(T0 + 120)));
}

#[test]
fn a_record_a_little_ahead_is_left_alone_and_its_last_slot_never_runs_again() {
    let mut r = job("j", t(T0));
    run(&mut r, T0);
    // Another owner, 50 s ahead (within the tolerance), ran the next slot.
    assert_eq!(run(&mut r, T0 + 60), Some(t(T0 + 60)));
    let before = r.clone();
    let ev = eval(&mut r, T0 + 10);
    assert!(!ev.changed && ev.claim.is_none());
    assert_eq!(r, before);
    // A next slot ten minutes ahead stays too: the slots before it were decided (run,
    // coalesced into a run, or recorded `missed`) by the clock ahead, within three hours.
    r.rt.next_slot = Some(t(T0 + 10 * 60));
    assert!(!eval(&mut r, T0 + 10).changed);
    assert_eq!(r.rt.next_slot, Some(t(T0 + 10 * 60)));
}

/// A coalesced fire stands for every slot up to its claim, though the record names only the
/// first: a step back of a few minutes never runs the slots it stood for again.
#[test]
fn a_step_back_of_minutes_never_runs_the_slots_a_coalesced_fire_stood_for() {
    let mut r = due_at(crate::testkit::jobs::command_job("j", 15), t(T0 + 300));
    // Claimed at 327: it names slot 300 and stands for 315 too.
    let ev = eval(&mut r, T0 + 327);
    assert_eq!(ev.claim.expect("due").slot, Some(t(T0 + 300)));
    done(&mut r, T0 + 328);
    assert_eq!(r.rt.next_slot, Some(t(T0 + 330)));
    // The clock steps back 213 s: no slot moves (the grid's origin, ahead of the clock now,
    // moves back by whole intervals), nothing is due.
    let ev = eval(&mut r, T0 + 115);
    assert!(ev.claim.is_none(), "{ev:?}");
    assert_eq!(r.rt.next_slot, Some(t(T0 + 330)));
    // Set right: the next slot is the first after the claim.
    assert!(eval(&mut r, T0 + 329).claim.is_none());
    assert_eq!(
        eval(&mut r, T0 + 330).claim.expect("due").slot,
        Some(t(T0 + 330))
    );
}

/// A job stored while the clock was two days ahead and never run: stored again from the clock
/// now, so it waits one interval, not two days.
#[test]
fn an_every_job_stored_while_the_clock_was_ahead_is_stored_again_from_now() {
    let d = def("j");
    let mut r = new_record(d, t(T0 + 2 * DAY + 7)).unwrap();
    assert_eq!(r.rt.next_slot, Some(t(T0 + 2 * DAY + 67)));
    let ev = eval(&mut r, T0);
    assert!(ev.changed && ev.claim.is_none());
    assert_eq!(r.rt.anchor, t(T0));
    assert_eq!(r.rt.next_slot, Some(t(T0 + 60)));
    assert_eq!(r.rt.last_slot, None, "still never run");
    let slot = eval(&mut r, T0 + 60).claim.expect("due").slot;
    assert_eq!(slot, Some(t(T0 + 60)));
}

/// A store created under a clock an hour ahead, then set right: no job that never ran waits
/// the hour. Each gets the first slot a job stored now gets (`every 10s` in 10 s, a minute cron
/// at the next minute, `in 1m` a minute on, a daily job tomorrow, not in an hour), with a log
/// line; within five minutes ahead nothing moves.
#[test]
fn jobs_stored_an_hour_ahead_that_never_ran_start_from_the_clock_set_right() {
    let ahead = T0 + 3600;
    let now = T0 + 25;
    let mk = |name: &str, spec: ScheduleSpec| {
        let mut d = def(name);
        d.schedule = spec;
        new_record(d, t(ahead)).unwrap()
    };
    let mut e10 = mk("e10", ScheduleSpec::Every { every_seconds: 10 });
    let mut c1 = mk(
        "c1",
        ScheduleSpec::Cron {
            expr: "* * * * *".into(),
            tz: "UTC".into(),
        },
    );
    let mut in1m = mk("in1m", ScheduleSpec::In { seconds: 60 });
    let mut daily = mk(
        "d",
        ScheduleSpec::Every {
            every_seconds: DAY as u64,
        },
    );
    let minute = |x: i64| (x / 60 + 1) * 60;
    for (r, first) in [
        (&mut e10, now + 10),
        (&mut c1, minute(now)),
        (&mut in1m, now + 60),
        (&mut daily, now + DAY),
    ] {
        assert!(r.rt.next_slot > Some(t(ahead)), "{:?}", r.rt.next_slot);
        let ev = eval(r, now);
        assert!(
            ev.changed && ev.claim.is_none() && ev.rows.is_empty(),
            "{ev:?}"
        );
        assert_eq!(r.rt.next_slot, Some(t(first)), "{}", r.def.name);
        assert!(r.rt.moved_back.is_some());
        if first < ahead {
            assert_eq!(run(r, first), Some(t(first)), "{}", r.def.name);
        }
    }
    // A first slot after the instant the first clock stored the job at: by then that clock
    // may have been the right one (set back by mistake, then set right), so the job keeps the
    // first slot it was stored with, at most the step later than the one it was given.
    let ev = eval(&mut daily, now + DAY);
    assert!(ev.changed && ev.claim.is_none(), "{ev:?}");
    assert_eq!(daily.rt.next_slot, Some(t(ahead + DAY)));
    assert_eq!(run(&mut daily, ahead + DAY), Some(t(ahead + DAY)));
    // On time on its new grid when the clock reaches the instant the first clock stored it
    // at: the job keeps its grid (no slot of it dropped) and the kept slots are let go.
    let mut at = now + 20;
    while at <= ahead + 10 {
        assert_eq!(run(&mut e10, at), Some(t(at)), "at {at}");
        at += 10;
    }
    assert_eq!(e10.rt.moved_back, None);
    assert_eq!(e10.rt.next_slot, Some(t(at)));
    // Stored four minutes ahead (a clock a little off): left as it was.
    let mut near = mk("n", ScheduleSpec::Every { every_seconds: 10 });
    let before = near.clone();
    assert!(!eval(&mut near, ahead - 240).changed);
    assert_eq!(near, before);
}

#[test]
fn a_cron_job_and_a_paused_one_are_re_derived_and_one_shots_live_runs_are_not() {
    let mut c = job("c", t(T0));
    c.def.schedule = ScheduleSpec::Cron {
        expr: "*/5 * * * *".into(),
        tz: "UTC".into(),
    };
    c.rt.next_slot = Some(t(T0 + 2 * DAY));
    eval(&mut c, T0);
    let s = compile(&c).unwrap();
    assert_eq!(c.rt.next_slot, s.next_after(t(T0)));

    let mut p = job("p", t(T0));
    p.rt.paused = true;
    p.rt.next_slot = Some(t(T0 + 2 * DAY));
    assert!(eval(&mut p, T0).changed);
    assert_eq!(p.rt.next_slot, Some(t(T0 + 60)));

    let mut live = job("l", t(T0));
    eval(&mut live, T0).claim.expect("due");
    live.rt.next_slot = Some(t(T0 + 2 * DAY));
    eval(&mut live, T0 + 1);
    assert_eq!(
        live.rt.next_slot,
        Some(t(T0 + 2 * DAY)),
        "a live run's job waits"
    );

    let mut at = job("a", t(T0));
    at.def.schedule = ScheduleSpec::At {
        at: t(T0 + 2 * DAY),
    };
    at.rt.next_slot = Some(t(T0 + 2 * DAY));
    assert!(
        !eval(&mut at, T0).changed,
        "a one-shot's instant is its own"
    );
}

/// Phantom slots: jobs stored moments before the clock went back an hour, then set
/// right. While the clock is behind they are stored again from it; set right, each gets back
/// the first slot it was stored with. None of them runs for a slot before it was stored.
#[test]
fn a_job_that_never_ran_keeps_its_first_slot_across_a_step_back_of_an_hour() {
    let stored = T0 + 3600;
    let mut e = new_record(def("e"), t(stored)).unwrap();
    let mut c = new_record(def("c"), t(stored)).unwrap();
    c.def.schedule = ScheduleSpec::Cron {
        expr: "0 * * * *".into(),
        tz: "UTC".into(),
    };
    let s = compile(&c).unwrap();
    c.rt.next_slot = s.next_after(t(stored));
    for r in [&mut e, &mut c] {
        let before = r.clone();
        let ev = eval(r, stored - 3600 + 15);
        assert!(ev.changed && ev.claim.is_none(), "{ev:?}");
        assert!(r.rt.next_slot < before.rt.next_slot, "{}", r.def.name);
        // Set right 20 s after the job was stored: its first slot has not come.
        let ev = eval(r, stored + 20);
        assert!(ev.claim.is_none() && ev.rows.is_empty(), "{ev:?}");
        assert_eq!(*r, before);
        let first = r.rt.next_slot.unwrap();
        assert!(first > t(stored));
        assert_eq!(run(r, first.timestamp()), Some(first));
    }
    // Stored more than three hours ahead: that clock was wrong, the job comes back.
    let mut far = new_record(def("f"), t(T0 + 4 * 3600 + 7)).unwrap();
    assert!(eval(&mut far, T0).changed);
    assert_eq!(far.rt.next_slot, Some(t(T0 + 60)));
}

/// A job stored moments before the clock went back four hours, run once on the grid of the
/// step back, then the clock set right: its first slot comes back with the grid it was stored
/// on. Put back on the step back's grid (a slot 5 s off it), the slots of that grid between the
/// instant the job was stored at and its first slot were left with no row.
#[test]
fn a_first_slot_put_back_after_a_step_back_comes_with_its_grid() {
    let stored = T0 + 4 * 3600;
    let mut d = def("e");
    d.schedule = ScheduleSpec::Every { every_seconds: 10 };
    let mut r = new_record(d, t(stored)).unwrap();
    assert_eq!(r.rt.next_slot, Some(t(stored + 10)));
    let back = T0 + 5;
    assert!(eval(&mut r, back).changed);
    assert_eq!(r.rt.anchor, t(back));
    assert_eq!(run(&mut r, back + 10), Some(t(back + 10)));
    // Set right 22 s after the job was stored: its first slot is due (coalesced up to now),
    // and the next one is on the grid it was stored on.
    let claim = eval(&mut r, stored + 22).claim.expect("due");
    assert_eq!(claim.slot, Some(t(stored + 10)));
    assert_eq!(r.rt.anchor, t(stored));
    assert_eq!(r.rt.next_slot, Some(t(stored + 30)));
}

/// A `run_immediately` job stored moments before the clock went back four hours fires at once
/// on the stepped-back clock; set right past its grace, the first fire's instant it was stored
/// with comes back as its next slot, off its grid. The `missed` row names that instant too: a
/// row from the grid's first slot left it with none.
#[test]
fn a_missed_row_names_a_first_fire_instant_put_back_off_the_grid() {
    let stored = T0 + 4 * 3600;
    let mut d = def("i");
    d.schedule = ScheduleSpec::Every { every_seconds: 15 };
    d.run_immediately = true;
    d.misfire_grace_seconds = Some(9.0);
    let created = t(stored) + chrono::Duration::milliseconds(100);
    let mut r = new_record(d, created).unwrap();
    assert_eq!(r.rt.next_slot, Some(created));
    assert_eq!(run(&mut r, T0 + 5), Some(t(T0 + 5)));
    let ev = eval(&mut r, stored + 22);
    assert!(ev.claim.is_none(), "{ev:?}");
    let [row] = &ev.rows[..] else {
        panic!("one missed row: {ev:?}")
    };
    assert_eq!(row.status, Status::Missed);
    assert_eq!(row.slot, Some(created));
    assert_eq!(row.slot_end, Some(t(stored + 15)));
    assert_eq!(row.slots_count, Some(2));
    assert_eq!(r.rt.anchor, t(stored));
    assert_eq!(r.rt.next_slot, Some(t(stored + 30)));
}

/// A job retired as `until` passed by a clock two days ahead (its last run coalesced every
/// slot up to there) comes back once the clock is set right and runs its real slots up to
/// `until`; one whose `until` is within the minute stays retired.
#[test]
fn a_job_retired_for_until_by_a_clock_ahead_comes_back() {
    let until = T0 + 600;
    let mut r = job("u", t(T0));
    r.def.until = Some(t(until));
    assert_eq!(run(&mut r, T0), Some(t(T0)));
    // Two days ahead: one coalesced run, then `until` has passed.
    assert_eq!(run(&mut r, T0 + 2 * DAY), Some(t(T0 + 60)));
    assert!(r.rt.retired, "{:?}", r.rt);
    assert_eq!(
        r.rt.retired_reason.as_deref(),
        Some(crate::store::rules::reasons::RETIRED_UNTIL)
    );
    let gone = r.clone();
    // Set right 70 s after the first run: back, next slot the first after now.
    let ev = eval(&mut r, T0 + 70);
    assert!(ev.changed && ev.claim.is_none(), "{ev:?}");
    assert!(!r.rt.retired && r.rt.retired_reason.is_none());
    assert_eq!(r.rt.next_slot, Some(t(T0 + 120)));
    let mut at = T0 + 120;
    while at <= until {
        assert_eq!(run(&mut r, at), Some(t(at)), "at {at}");
        at += 60;
    }
    // Its last slot before `until` ran: retired for good.
    assert!(r.rt.retired, "{:?}", r.rt);
    assert!(!eval(&mut r, until + 61).changed);
    // Set back to within the minute before `until`: it stays retired.
    let mut near = gone;
    assert!(!eval(&mut near, until - 30).changed);
    assert!(near.rt.retired);
}

/// A whole-host step back of four hours undone twenty seconds later: the slot that ran just
/// before it does not run again, as a coalesced run or otherwise; the job goes on at its next
/// slot. During the step the job runs on the clock it is shown (re-derived from it).
#[test]
fn a_step_back_of_four_hours_undone_runs_no_slot_twice() {
    let mut r = job("j", t(T0));
    run(&mut r, T0);
    assert_eq!(run(&mut r, T0 + 60), Some(t(T0 + 60)));
    let back = T0 + 75 - 4 * 3600;
    assert!(
        eval(&mut r, back).changed,
        "re-derived from the clock behind"
    );
    assert!(r.rt.next_slot < Some(t(T0)), "{:?}", r.rt.next_slot);
    // It ran during the step, for a slot of that clock.
    let during = r.rt.next_slot.unwrap().timestamp();
    assert_eq!(run(&mut r, during), Some(t(during)));
    // Set right: every slot up to 60 ran before the step; the next is 120.
    let ev = eval(&mut r, T0 + 95);
    assert!(ev.claim.is_none() && ev.rows.is_empty(), "{ev:?}");
    assert_eq!(r.rt.last_slot, Some(t(T0 + 60)));
    assert_eq!(r.rt.next_slot, Some(t(T0 + 120)));
    assert_eq!(r.rt.moved_back, None);
    assert_eq!(run(&mut r, T0 + 120), Some(t(T0 + 120)));
}

/// The same step for a job that never ran: it keeps the first slot it was stored with.
#[test]
fn a_job_that_never_ran_keeps_its_first_slot_across_a_step_back_of_four_hours_undone() {
    let mut r = due_at(crate::testkit::jobs::command_job("e7m", 420), t(T0 + 420));
    let (anchor, first) = (r.rt.anchor, r.rt.next_slot);
    assert!(eval(&mut r, T0 + 30 - 4 * 3600).changed);
    assert!(r.rt.next_slot < Some(t(T0)));
    let ev = eval(&mut r, T0 + 50);
    assert!(ev.claim.is_none() && ev.rows.is_empty(), "{ev:?}");
    assert_eq!((r.rt.anchor, r.rt.next_slot), (anchor, first));
    assert_eq!(
        eval(&mut r, T0 + 420).claim.expect("due").slot,
        Some(t(T0 + 420))
    );
}

/// A clock that really was four hours ahead, set right for good: the job runs from the clock
/// at once; when the clock reaches the slot that ran while it was ahead, that slot (which has
/// its row) does not run again, and the job goes on.
#[test]
fn a_clock_that_really_was_ahead_is_followed_and_the_slot_it_ran_runs_once() {
    let ahead = T0 + 4 * 3600;
    let mut r = job("j", t(ahead));
    run(&mut r, ahead);
    eval(&mut r, T0);
    assert_eq!(r.rt.next_slot, Some(t(T0 + 60)));
    let mut now = T0 + 60;
    while now < ahead {
        assert_eq!(run(&mut r, now), Some(t(now)), "at {now}");
        now += 60;
    }
    let ev = eval(&mut r, ahead);
    assert!(ev.claim.is_none(), "{ev:?}");
    assert_eq!(r.rt.moved_back, None);
    assert_eq!(run(&mut r, ahead + 60), Some(t(ahead + 60)));
}

/// A clock that jumps past an `until` job's `until`: its coalesced fire stands for its overdue
/// slots up to `until`, none after it (the job never had those).
#[test]
fn a_coalesced_fire_of_an_until_job_stands_for_no_slot_after_until() {
    let mut r = job("u", t(T0));
    r.def.until = Some(t(T0 + 300));
    assert_eq!(run(&mut r, T0), Some(t(T0)));
    let plan = eval(&mut r, T0 + 2 * DAY).claim.expect("due");
    let range = plan.coalesced.expect("several overdue slots");
    assert_eq!(
        (range.first, range.last, range.count),
        (t(T0 + 60), t(T0 + 300), 5)
    );
}

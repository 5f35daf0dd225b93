//! The record lifecycle through claims and completions: misfire, coalescing, retirement,
//! recovery, overlap rows, state and holds.

use crate::model::*;
use crate::schedule::{Compiled, ScheduleSpec};
use crate::store::plan::apply::*;
use crate::store::plan::claim::*;
use crate::store::plan::complete::*;
use crate::store::policy::counters::*;
use crate::store::policy::define::tests_support::{def, due_at, job};
use crate::store::policy::define::*;
use crate::store::policy::operator::set_paused;
use crate::store::policy::run_end::*;
use crate::store::rules::reasons::*;
use crate::store::rules::runtime::*;
use crate::store::rules::slots::*;
use crate::store::{CompleteOutcome, Completion};
use uuid::Uuid;

use crate::model::STATE_MAX_BYTES;

const P: BudgetPeriod = BudgetPeriod::Day;

use crate::testkit::time::epoch as t;
const T0: i64 = 1000;

mod clock;
mod cron;
mod jitter;
mod unlanded;

fn sched(r: &JobRecord) -> Compiled {
    compile(r).unwrap()
}

/// What the claim plan decides for `r` at `now`, as owner "me" (daily budget periods).
fn eval_at(r: &mut JobRecord, now: chrono::DateTime<chrono::Utc>) -> Evaluation {
    let s = sched(r);
    evaluate(r, &s, now, "me", true, P)
}

/// End the run `r` holds with `status` at `now`.
fn finish_at(
    r: &mut JobRecord,
    status: Status,
    now: chrono::DateTime<chrono::Utc>,
) -> FinishOutcome {
    let s = sched(r);
    let lease = r.rt.lease.clone().unwrap();
    let mut row = HistoryRow::new(&r.def.name, status, lease.trigger, lease.slot, "me", now);
    row.run_id = lease.run_id;
    finish_run(r, &s, &mut row, None, None, P, now)
}

/// [`eval_at`] at `now` seconds after the epoch.
fn eval(r: &mut JobRecord, now: i64) -> Evaluation {
    eval_at(r, t(now))
}

/// [`finish_at`] at `now` seconds after the epoch.
fn done(r: &mut JobRecord, status: Status, now: i64) -> FinishOutcome {
    finish_at(r, status, t(now))
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

/// `apply` names what changed in the settings.
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
    // Other sections by name; the directory with both values.
    let mut moved = day.clone();
    moved.base_dir = Some("/srv/jobs".into());
    moved
        .pricing
        .insert("local".into(), crate::model::Price::new(0.0, 0.0));
    assert_eq!(
        settings_changes(&day, &moved),
        ["pricing", "jobs file directory - → /srv/jobs"]
    );
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

/// A coalesced fire's row carries the slots it stands for, like `missed`.
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

/// A first fire claimed more than one interval late (owners starved of CPU, or down since the
/// job was stored) stands for the overdue slots after its first: they get its row, not none.
#[test]
fn a_late_first_fire_carries_the_overdue_slots_after_its_first() {
    let mut r = job("j", t(T0 + 60));
    r.def.misfire_grace_seconds = Some(1.0);
    let c = eval(&mut r, T0 + 185).claim.unwrap();
    assert_eq!(c.slot, Some(t(T0 + 60)), "a first fire is never missed");
    let range = c.coalesced.expect("the overdue slots after the first");
    assert_eq!(
        (range.first, range.last, range.count),
        (t(T0 + 60), t(T0 + 180), 3)
    );
    assert_eq!(r.rt.next_slot, Some(t(T0 + 240)));
    let s = sched(&r);
    let mut row = HistoryRow::new("j", Status::Succeeded, c.trigger, c.slot, "me", t(T0 + 186));
    row.run_id = c.run_id;
    finish_run(&mut r, &s, &mut row, None, None, P, t(T0 + 186));
    assert_eq!(
        (row.slot_start, row.slot_end, row.slots_count),
        (Some(t(T0 + 60)), Some(t(T0 + 180)), Some(3))
    );
    // On time, a first fire stands for its one slot.
    let mut on_time = job("k", t(T0 + 60));
    assert!(
        eval(&mut on_time, T0 + 61)
            .claim
            .unwrap()
            .coalesced
            .is_none()
    );
}

/// A completion written late (store unwritable for 100 s) is not an overlap
/// of the slots of the outage; they come back through the misfire rule as one coalesced fire.
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
    let mut r = due_at(d, t(T0));
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
    // they coalesce into one fire now, with a grace they are one `missed` row.
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
fn a_one_shot_cancelled_before_its_owner_died_is_not_reoffered() {
    let mut d = def("once");
    d.max_runs = Some(1);
    let mut r = due_at(d, t(T0));
    eval(&mut r, T0).claim.unwrap();
    r.rt.lease.as_mut().unwrap().cancel_requested_at = Some(t(T0 + 5));
    done(&mut r, Status::Abandoned, T0 + 40);
    assert!(!r.rt.recovery_pending);
    assert!(r.rt.retired);
    assert_eq!(
        r.rt.retired_reason.as_deref(),
        Some("cancelled by operator")
    );
    assert!(eval(&mut r, T0 + 41).claim.is_none());
}

#[test]
fn s6_one_shot_reoffered_once_then_retired() {
    let mut d = def("once");
    d.max_runs = Some(1);
    let mut r = due_at(d, t(T0));
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
    let mut r = due_at(d, t(T0));
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
    let mut r = due_at(d, t(T0));
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
    let mut r = due_at(d, t(T0));
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
    let mut r = due_at(d, t(T0));
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

/// A run whose wall clock stepped while it ran says so on its row, and so do the overlap rows
/// its end decides (slots that fell due while it ran).
#[test]
fn the_overlap_rows_of_a_run_across_a_clock_step_say_so() {
    let mut r = ran_at_t0(None);
    let run = eval(&mut r, T0 + 60).claim.unwrap();
    let mut row = HistoryRow::new(
        &r.def.name,
        Status::Succeeded,
        run.trigger,
        run.slot,
        "me",
        t(T0 + 250),
    );
    row.run_id = run.run_id;
    row.clock_stepped = Some("+2d".into());
    let c = Completion {
        job: r.def.name.clone(),
        run_id: run.run_id,
        owner: "me".into(),
        now: t(T0 + 250),
        row,
        state: None,
        hold_until: None,
    };
    let out = complete_step(&mut r, None, c, P).unwrap();
    assert_eq!(out.rows.len(), 2, "{:?}", out.rows);
    assert_eq!(out.rows[1].status, Status::Skipped);
    assert!(
        out.rows
            .iter()
            .all(|r| r.clock_stepped.as_deref() == Some("+2d")),
        "{:?}",
        out.rows
    );
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
    let mut r = due_at(d, t(T0));
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
    let mut r = due_at(d, t(T0));
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

/// A `once` job whose scheduled run retires it still runs the manual trigger
/// and the backfill queued before (they were acknowledged), then nothing more.
#[test]
fn a_spent_one_shot_still_runs_its_queued_operator_runs() {
    let mut d = def("o");
    d.max_runs = Some(1);
    let mut r = due_at(d, t(T0));
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

/// A job removed from the file gives each queued run a `skipped` row.
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

/// Storing an `every` job does not run it: its first slot is one interval after it is stored;
/// `run_immediately` adds one run at the store instant and the grid goes on from there.
#[test]
fn a_new_every_job_waits_one_interval_unless_run_immediately() {
    let mut r = new_record(def("e"), t(T0)).unwrap();
    assert_eq!((r.rt.anchor, r.rt.next_slot), (t(T0), Some(t(T0 + 60))));
    let ev = eval(&mut r, T0);
    assert!(ev.claim.is_none() && ev.rows.is_empty(), "nothing at store");
    assert_eq!(wakeup(&r), Some(t(T0 + 60)));
    let c = eval(&mut r, T0 + 60).claim.unwrap();
    assert_eq!((c.trigger, c.slot), (Trigger::Schedule, Some(t(T0 + 60))));

    let mut d = def("imm");
    d.run_immediately = true;
    let mut r = new_record(d, t(T0)).unwrap();
    let c = eval(&mut r, T0).claim.unwrap();
    assert_eq!((c.trigger, c.slot), (Trigger::Immediate, Some(t(T0))));
    done(&mut r, Status::Succeeded, T0 + 1);
    assert_eq!(r.rt.next_slot, Some(t(T0 + 60)), "the grid goes on");
    assert!(eval(&mut r, T0 + 59).claim.is_none());
    let c = eval(&mut r, T0 + 60).claim.unwrap();
    assert_eq!((c.trigger, c.slot), (Trigger::Schedule, Some(t(T0 + 60))));
}

#[test]
fn run_immediately_fires_first_with_trigger_immediate() {
    let mut d = def("imm");
    d.schedule = ScheduleSpec::At { at: t(T0 + 1000) };
    d.run_immediately = true;
    let mut r = due_at(d, t(T0));
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

/// "nothing is ever recorded under a status that did not happen". The run
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

/// An owner stopped (SIGSTOP) while its call awaits approval; an operator approves it inside
/// the lease; the lease runs out and another owner records the run `abandoned`, saying so.
/// When the stopped owner comes back, its late `failed` row replaces that one: it says the
/// call was approved and never ran, in its reason and on the call in its transcript.
#[test]
fn a_late_row_keeps_the_answer_its_abandoned_row_showed() {
    use crate::transcript::{Approval, CallEntry, CallState, Entry, Transcript};
    let mut r = ran_at_t0(None);
    let run = eval(&mut r, T0 + 60).claim.unwrap();
    let answer = ApprovalAnswer {
        approved: true,
        reason: Some("checked".into()),
        by: Some("op@h (cronsole approve)".into()),
        at: t(T0 + 62),
    };
    r.rt.lease_of_mut(run.run_id).unwrap().awaiting = Some(AwaitingApproval {
        tool: "write".into(),
        call_id: "call_1".into(),
        arguments: "{}".into(),
        since: t(T0 + 61),
        deadline: t(T0 + 3661),
        answer: Some(answer),
    });
    let said = format!(
        "its call to write, awaiting approval, was approved by op@h (cronsole approve) at {} \
         but never ran",
        t(T0 + 62).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    );
    let ev = recover(&mut r, T0 + 100);
    assert!(
        ev.rows[0].reason.as_deref().unwrap().contains(&said),
        "{:?}",
        ev.rows[0]
    );
    let mut record = Transcript::new();
    record.push(Entry::Call(CallEntry {
        state: CallState::AwaitingApproval,
        ..CallEntry::dispatched(
            1,
            "call_1".into(),
            "write".into(),
            None,
            "{}".into(),
            t(T0 + 61),
        )
    }));
    let mut row = HistoryRow::new(
        "j",
        Status::Failed,
        run.trigger,
        run.slot,
        "me",
        t(T0 + 105),
    );
    row.run_id = run.run_id;
    row.reason = Some("the lease was lost while a call awaited approval".into());
    row.transcript = Some(record);
    let c = Completion {
        job: "j".into(),
        run_id: run.run_id,
        owner: "me".into(),
        now: t(T0 + 105),
        row,
        state: None,
        hold_until: None,
    };
    let out = complete_step(&mut r, None, c, P).unwrap();
    let late = &out.rows[0];
    assert!(late.supersedes_abandoned, "{late:?}");
    assert_eq!(
        late.reason.as_deref(),
        Some(format!("the lease was lost while a call awaited approval; {said}").as_str())
    );
    let calls: Vec<CallEntry> = late
        .transcript
        .as_ref()
        .unwrap()
        .to_vec()
        .into_iter()
        .filter_map(|e| match e {
            Entry::Call(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].state, CallState::AwaitingApproval, "it never ran");
    assert_eq!(
        calls[0].approval,
        Some(Approval::Approved {
            by: Some("op@h (cronsole approve)".into()),
            reason: Some("checked".into()),
        })
    );
}

/// Money shown = money counted across a recovery and a late end: the `abandoned` row
/// carries the run's reservation (its call was in flight) and the counters book it as spent;
/// the run's late end replaces that amount with its real cost, never adds to it.
#[test]
fn a_late_completion_replaces_the_money_of_the_abandoned_row() {
    use crate::store::policy::budget::{ReserveRequest, Settlement, record, settle};
    let mut r = ran_at_t0(None);
    let run = eval(&mut r, T0 + 60).claim.unwrap();
    let key = P.key(t(T0 + 60));
    let req = ReserveRequest {
        job: "j",
        run_id: run.run_id,
        owner: "me",
        usd: 0.08,
        now: t(T0 + 60),
    };
    let id = record(&mut r, &req, key.clone());
    let before = (r.rt.counters.total_cost_usd, r.rt.counters.period_cost_usd);
    let ev = recover(&mut r, T0 + 100);
    let abandoned = &ev.rows[0];
    assert_eq!(abandoned.status, Status::Abandoned);
    assert!((abandoned.cost_usd - 0.08).abs() < 1e-12, "{abandoned:?}");
    let c = &r.rt.counters;
    assert!(c.reservations.is_empty(), "the row took it: {c:?}");
    assert!((c.total_cost_usd - before.0 - 0.08).abs() < 1e-12);
    assert!((c.period_cost_usd - before.1 - 0.08).abs() < 1e-12);
    // The paused owner wakes: its call settles (nothing left to settle) and its run ends.
    assert!(!settle(&mut r, id, Settlement::Cost(0.03)));
    let mut row = HistoryRow::new(
        "j",
        Status::Succeeded,
        run.trigger,
        run.slot,
        "me",
        t(T0 + 105),
    );
    row.run_id = run.run_id;
    row.cost_usd = 0.03;
    let c = Completion {
        job: "j".into(),
        run_id: run.run_id,
        owner: "me".into(),
        now: t(T0 + 105),
        row,
        state: None,
        hold_until: None,
    };
    let out = complete_step(&mut r, None, c, P).unwrap();
    assert!(out.rows[0].supersedes_abandoned);
    let c = &r.rt.counters;
    assert!((c.total_cost_usd - before.0 - 0.03).abs() < 1e-12, "{c:?}");
    assert!((c.period_cost_usd - before.1 - 0.03).abs() < 1e-12, "{c:?}");
    let hours: f64 = c.hours.iter().map(|b| b.cost_usd).sum();
    assert!((hours - before.0 - 0.03).abs() < 1e-12, "{c:?}");
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

/// A late end that supersedes an `abandoned` row counts toward `max_runs`
/// although a newer run started meanwhile; that newer run's end then retires the job (it
/// executed 4 times with `max_runs: 3`, and `jobs` said RUNS 3 beside 4 rows).
#[test]
fn a_late_completion_counts_toward_max_runs_beside_a_newer_run() {
    let mut d = def("capped");
    d.max_runs = Some(3);
    let mut r = due_at(d, t(T0));
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
    let mut r = due_at(d, t(T0));
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
    let mut r = due_at(d, t(T0));
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
    count_row(&mut r, &mut row, P, t(T0));
    count_row(&mut r, &mut row, P, t(T0 + 10));
    assert!((r.rt.counters.period_cost_usd - 0.5).abs() < 1e-12);
    count_row(&mut r, &mut row, P, t(T0 + 86_400));
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
    assert_eq!(
        r.rt.next_slot,
        Some(t(T0 + 130)),
        "one new interval after the change"
    );
    r.rt.retired = true;
    r.rt.retired_reason = Some(REASON_REMOVED.into());
    assert_eq!(
        apply_def(&mut r, &d, t(T0 + 31)).unwrap(),
        ApplyChange::Updated
    );
    assert!(!r.rt.retired);
}

//! Generated rows trimmed against rows already in history.

use crate::model::*;
use crate::store::plan::claim::*;
use crate::store::policy::define::tests_support::job;
use crate::store::rules::reasons::*;
use crate::store::rules::rows::*;
use crate::store::rules::slots::*;

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

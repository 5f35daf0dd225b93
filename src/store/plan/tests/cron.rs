//! Cron schedules and jobs-file settings through the claim plan.

use crate::model::*;
use crate::schedule::Compiled;
use crate::store::plan::claim::*;
use crate::store::policy::define::tests_support::due_at;
use crate::store::policy::define::*;
use crate::store::policy::run_end::*;
use crate::store::rules::slots::*;
use chrono::DateTime;

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

/// A coalesced cron fire names the LATEST overdue slot and its
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
    let mut r = due_at(d, t0);
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

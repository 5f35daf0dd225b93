//! The store conformance suite: misfire, claims, leases, fencing, recovery, overlap,
//! pause/trigger and retirement as generic cases over any [`Store`], so the file
//! store and the PostgreSQL store are held to exactly the same behaviour.
//!
//! Each case takes a factory returning a fresh, empty store. Several owners are simulated by
//! passing different owner ids to one store (they share it like separate processes would; the
//! multi-process tests in `tests/pg/multiprocess.rs` cover real processes). Times are explicit.
#![allow(dead_code)]

use cronsole::store::OperationError;
use cronsole::testkit::store::{ClaimAt, FinishClaim};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use cronsole::model::{HistoryRow, JobDef, JobState, JobsFile, Status, Trigger};
use cronsole::schedule::ScheduleSpec;
use cronsole::store::{
    ClaimOutcome, ClaimRequest, Completion, HistoryQuery, RenewOutcome, Store, TriggerOutcome,
};
use cronsole::testkit::internals::store::rules;

mod overlap;
#[allow(unused_imports)]
pub use overlap::*;
mod chain;
#[allow(unused_imports)] // used by the `conformance_suite!` runners, not by every includer
pub use chain::*;
mod pins;
#[allow(unused_imports)]
pub use pins::*;
mod loops;
#[allow(unused_imports)]
pub use loops::*;
mod turns;
#[allow(unused_imports)]
pub use turns::*;
mod clock;
#[allow(unused_imports)]
pub use clock::*;
mod approvals;
#[allow(unused_imports)]
pub use approvals::*;

pub type Factory<'a> = &'a dyn Fn() -> Arc<dyn Store>;

/// t0 = 1000 s after the epoch: the worked cases' origin.
pub use cronsole::testkit::time::epoch as t;

pub fn every(name: &str, secs: u64) -> JobDef {
    cronsole::testkit::jobs::command_job(name, secs)
}

/// Store `file` so that its `every` jobs' first slot is `first`: one interval before it (the
/// cases mean "jobs due at `first`"; an `every` job's first slot is its anchor plus one
/// interval). Its `every` jobs share one interval; a file without one is stored at `first`.
pub fn apply_due(
    s: &dyn Store,
    file: &JobsFile,
    first: DateTime<Utc>,
) -> cronsole::store::StoreResult<cronsole::store::ApplyReport> {
    let every: Vec<&JobDef> = file
        .jobs
        .iter()
        .filter(|j| matches!(j.schedule, ScheduleSpec::Every { .. }))
        .collect();
    let stored = match every.first() {
        Some(j) => {
            assert!(
                every.iter().all(|k| k.schedule == j.schedule),
                "every jobs of different intervals have no one instant to be stored at"
            );
            cronsole::testkit::jobs::stored_for_first_slot(j, first)
        }
        None => first,
    };
    s.apply(file, stored)
}

pub fn file(jobs: Vec<JobDef>) -> JobsFile {
    JobsFile {
        settings: Default::default(),
        jobs,
    }
}

pub fn claim(s: &dyn Store, owner: &str, now: DateTime<Utc>, limit: usize) -> ClaimOutcome {
    s.claim_at(now, owner, limit)
}

pub fn done(
    s: &dyn Store,
    c: &cronsole::store::Claim,
    owner: &str,
    status: Status,
    now: DateTime<Utc>,
) -> cronsole::store::CompleteOutcome {
    s.finish_claim(c, owner, status, now)
}

pub fn rows(s: &dyn Store, job: &str) -> Vec<HistoryRow> {
    s.history(&HistoryQuery {
        job: Some(job.into()),
        ..Default::default()
    })
    .unwrap()
}

/// A job whose last claimed slot is t0 (it has run before), the next slot t0+60.
fn ran_once_at_t0(s: &dyn Store, mut def: JobDef) {
    def.schedule = ScheduleSpec::Every { every_seconds: 60 };
    let name = def.name.clone();
    apply_due(s, &file(vec![def]), t(1000)).unwrap();
    let o = claim(s, "a", t(1000), 10);
    assert_eq!(o.claims.len(), 1, "the every-job fires at its first slot");
    assert_eq!(o.claims[0].slot, Some(t(1000)));
    done(s, &o.claims[0], "a", Status::Succeeded, t(1001));
    assert_eq!(s.job(&name).unwrap().unwrap().rt.next_slot, Some(t(1060)));
}

// ---- apply ------------------------------------------------------------------------------------

pub fn apply_creates_updates_and_retires(f: Factory) {
    let s = f();
    let r = apply_due(&*s, &file(vec![every("a", 60), every("b", 60)]), t(1000)).unwrap();
    assert_eq!(r.created, vec!["a", "b"]);
    let b2 = every("b", 120);
    let r = s.apply(&file(vec![every("a", 60), b2]), t(1100)).unwrap();
    assert_eq!(r.unchanged, vec!["a"]);
    assert_eq!(r.updated, vec!["b"]);
    let r = s.apply(&file(vec![every("a", 60)]), t(1200)).unwrap();
    assert_eq!(r.retired, vec!["b"]);
    let b = s.job("b").unwrap().unwrap();
    assert!(b.rt.retired, "kept, retired");
    assert_eq!(s.jobs().unwrap().len(), 2);
    let err = s
        .apply(&file(vec![every("a", 60), every("a", 30)]), t(1300))
        .unwrap_err();
    assert!(err.to_string().contains("'a'"), "{err}");
}

/// A re-apply writes only what changed: the same file again writes nothing (the store's change
/// token stays), after claims and completions too and with a job retired because it left the
/// file; one edited definition is the only job written.
pub fn a_reapply_writes_only_the_jobs_it_changes(f: Factory) {
    let s = f();
    let jobs: Vec<JobDef> = (0..12).map(|i| every(&format!("j{i:02}"), 60)).collect();
    apply_due(&*s, &file(jobs.clone()), t(1000)).unwrap();
    let o = claim(&*s, "a", t(1000), 4);
    assert_eq!(o.claims.len(), 4);
    for c in &o.claims {
        done(&*s, c, "a", Status::Succeeded, t(1001));
    }
    let token = s.change_token().unwrap();
    let r = s.apply(&file(jobs.clone()), t(1100)).unwrap();
    assert_eq!(r.unchanged.len(), 12, "{r:?}");
    assert!(r.created.is_empty() && r.updated.is_empty() && r.retired.is_empty());
    assert_eq!(
        s.change_token().unwrap(),
        token,
        "an unchanged re-apply wrote"
    );

    let mut edited = jobs.clone();
    edited[3] = every("j03", 120);
    edited.pop();
    let r = s.apply(&file(edited.clone()), t(1200)).unwrap();
    assert_eq!(r.updated, vec!["j03"]);
    assert_eq!(r.retired, vec!["j11"]);
    assert_eq!(r.unchanged.len(), 10);
    assert_eq!(
        s.job("j03").unwrap().unwrap().def.schedule,
        edited[3].schedule
    );
    let token = s.change_token().unwrap();
    let r = s.apply(&file(edited.clone()), t(1300)).unwrap();
    assert_eq!(r.unchanged.len(), 11, "{r:?}");
    assert!(r.retired.is_empty(), "a retired job is not retired again");
    assert_eq!(
        s.change_token().unwrap(),
        token,
        "an unchanged re-apply wrote"
    );
    // The job that left comes back: its record is read and written again.
    let r = s.apply(&file(jobs.clone()), t(1400)).unwrap();
    assert_eq!(r.updated, vec!["j03", "j11"]);
    assert!(!s.job("j11").unwrap().unwrap().rt.retired);
}

/// What an engine reads of its jobs in flight when the store changes: the named jobs that
/// exist (retired ones too), each as `job` reads it, whatever the order asked.
pub fn jobs_named_reads_the_named_jobs_that_exist(f: Factory) {
    let s = f();
    apply_due(
        &*s,
        &file(vec![every("a", 60), every("b", 60), every("c", 60)]),
        t(1000),
    )
    .unwrap();
    s.apply(&file(vec![every("a", 60), every("b", 60)]), t(1100))
        .unwrap();
    let names = |v: &[&str]| v.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    let mut got = s.jobs_named(&names(&["c", "zz", "a", "a"])).unwrap();
    got.sort_by(|x, y| x.def.name.cmp(&y.def.name));
    got.dedup_by(|x, y| x.def.name == y.def.name);
    let got_names: Vec<&str> = got.iter().map(|r| r.def.name.as_str()).collect();
    assert_eq!(got_names, ["a", "c"]);
    for r in &got {
        let one = s.job(&r.def.name).unwrap().unwrap();
        assert_eq!(
            serde_json::to_value(r).unwrap(),
            serde_json::to_value(&one).unwrap()
        );
    }
    assert!(got[1].rt.retired, "a retired job is still read");
    assert!(s.jobs_named(&[]).unwrap().is_empty());
}

// ---- claims -----------------------------------------------------------------------------------

pub fn each_slot_is_claimed_once_across_owners(f: Factory) {
    let s = f();
    apply_due(&*s, &file(vec![every("j", 60)]), t(1000)).unwrap();
    let a = claim(&*s, "a", t(1000), 10);
    let b = claim(&*s, "b", t(1000), 10);
    assert_eq!(a.claims.len() + b.claims.len(), 1);
    let c = &a.claims[0];
    assert_eq!(c.trigger, Trigger::Schedule);
    assert_eq!(c.job.rt.lease.as_ref().unwrap().owner, "a");
    assert_eq!(c.lease_until, t(1030));
    // Pre-advanced: the slot after the claimed one.
    assert_eq!(c.job.rt.next_slot, Some(t(1060)));
    // Not re-offered before its lease ends or before the next slot.
    assert!(claim(&*s, "b", t(1029), 10).claims.is_empty());
    done(&*s, c, "a", Status::Succeeded, t(1005));
    assert!(claim(&*s, "b", t(1059), 10).claims.is_empty());
    let n = claim(&*s, "b", t(1060), 10);
    assert_eq!(n.claims.len(), 1);
    assert_eq!(n.claims[0].slot, Some(t(1060)));
}

pub fn claims_respect_the_owners_limit(f: Factory) {
    let s = f();
    let defs = (0..10).map(|i| every(&format!("j{i}"), 60)).collect();
    apply_due(&*s, &file(defs), t(1000)).unwrap();
    let a = claim(&*s, "a", t(1000), 3);
    assert_eq!(a.claims.len(), 3);
    let b = claim(&*s, "b", t(1000), 100);
    assert_eq!(b.claims.len(), 7);
    let mut names: Vec<String> = a
        .claims
        .iter()
        .chain(&b.claims)
        .map(|c| c.job.def.name.clone())
        .collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 10);
    assert!(claim(&*s, "c", t(1000), 0).claims.is_empty());
}

pub fn in_flight_jobs_are_not_reoffered_to_their_owner(f: Factory) {
    let s = f();
    apply_due(&*s, &file(vec![every("j", 60)]), t(1000)).unwrap();
    let c = claim(&*s, "a", t(1000), 10).claims.remove(0);
    let in_flight = vec!["j".to_string()];
    let again = s
        .claim_due(&ClaimRequest {
            now: t(1100),
            owner: "a",
            limit: 10,
            in_flight: &in_flight,
            clock_stepped: None,
            max_offset: None,
        })
        .unwrap();
    assert!(again.claims.is_empty() && again.rows.is_empty());
    // Its run is still ours: completion goes through normally.
    assert!(!done(&*s, &c, "a", Status::Succeeded, t(1101)).stale);
}

pub fn renewals_are_fenced_by_run_id(f: Factory) {
    let s = f();
    apply_due(&*s, &file(vec![every("j", 60)]), t(1000)).unwrap();
    let c = claim(&*s, "a", t(1000), 10).claims.remove(0);
    assert_eq!(
        s.renew("j", c.run_id, t(1020)).unwrap(),
        RenewOutcome::Renewed {
            lease_until: t(1050)
        }
    );
    assert_eq!(
        s.renew("j", uuid::Uuid::new_v4(), t(1021)).unwrap(),
        RenewOutcome::Lost
    );
    // The renewed lease holds past the original expiry.
    assert!(claim(&*s, "b", t(1040), 10).claims.is_empty());
    assert!(s.renew("nope", c.run_id, t(1021)).is_err());
}

/// A batch of renewals answers each renewal as `renew` alone would, in order: a run that holds
/// its job renews, one that does not is `Lost`, an unknown job fails alone, and the renewed
/// leases hold against other owners.
pub fn a_batch_of_renewals_answers_each_as_renew_would(f: Factory) {
    let s = f();
    apply_due(&*s, &file(vec![every("j", 60), every("k", 60)]), t(1000)).unwrap();
    let mut cs = claim(&*s, "a", t(1000), 10).claims;
    cs.sort_by(|x, y| x.job.def.name.cmp(&y.job.def.name));
    assert_eq!(cs.len(), 2);
    let renewal = |job: &str, run_id: uuid::Uuid, at: i64| cronsole::store::Renewal {
        job: job.to_string(),
        run_id,
        now: t(at),
    };
    let answers = s.renew_many(&[
        renewal("j", cs[0].run_id, 1020),
        renewal("k", uuid::Uuid::new_v4(), 1020),
        renewal("nope", cs[0].run_id, 1020),
        renewal("k", cs[1].run_id, 1021),
    ]);
    assert_eq!(answers.len(), 4);
    assert!(
        matches!(answers[0], Ok(RenewOutcome::Renewed { lease_until }) if lease_until == t(1050)),
        "{answers:?}"
    );
    assert!(matches!(answers[1], Ok(RenewOutcome::Lost)), "{answers:?}");
    assert!(answers[2].is_err(), "{answers:?}");
    assert!(
        matches!(answers[3], Ok(RenewOutcome::Renewed { lease_until }) if lease_until == t(1051)),
        "{answers:?}"
    );
    assert!(s.renew_many(&[]).is_empty());
    // Both renewed leases hold past the claim's expiry.
    let other = claim(&*s, "b", t(1040), 10);
    assert!(
        other.claims.is_empty() && other.rows.is_empty(),
        "{other:?}"
    );
}

// ---- misfire ----------------------------------------------------------------------------------

pub fn misfire_coalesces_without_grace(f: Factory) {
    let s = f();
    ran_once_at_t0(&*s, every("j", 60));
    // last = t0, now = t0+305: scheduled instant t0+60, one normal fire, no missed row.
    let o = claim(&*s, "a", t(1305), 10);
    assert_eq!(o.claims.len(), 1);
    assert_eq!(o.claims[0].slot, Some(t(1060)));
    assert!(o.rows.is_empty());
    assert!(o.claims[0].job.rt.next_slot.unwrap() > t(1305));
}

pub fn misfire_over_grace_writes_one_missed_row(f: Factory) {
    let s = f();
    let mut d = every("j", 60);
    d.misfire_grace_seconds = Some(90.0);
    ran_once_at_t0(&*s, d);
    let o = claim(&*s, "a", t(1300), 10);
    assert!(o.claims.is_empty(), "not fired");
    assert_eq!(o.rows.len(), 1);
    let m = &o.rows[0];
    assert_eq!(m.status, Status::Missed);
    assert_eq!(m.slot, Some(t(1060)));
    assert_eq!(m.slot_end, Some(t(1300)));
    assert_eq!(m.slots_count, Some(5));
    assert_eq!(s.job("j").unwrap().unwrap().rt.next_slot, Some(t(1360)));
    let h = rows(&*s, "j");
    assert_eq!(h[0].status, Status::Missed, "persisted too");
    // The job continues at its next future slot.
    assert_eq!(claim(&*s, "a", t(1360), 10).claims[0].slot, Some(t(1360)));
}

pub fn misfire_within_grace_fires(f: Factory) {
    let s = f();
    let mut d = every("j", 60);
    d.misfire_grace_seconds = Some(90.0);
    ran_once_at_t0(&*s, d);
    let o = claim(&*s, "a", t(1070), 10);
    assert_eq!(o.claims.len(), 1);
    assert_eq!(o.claims[0].slot, Some(t(1060)));
    assert!(o.rows.is_empty());
}

pub fn a_first_run_always_fires(f: Factory) {
    let s = f();
    let mut d = every("j", 60);
    d.misfire_grace_seconds = Some(1.0);
    apply_due(&*s, &file(vec![d]), t(1000)).unwrap();
    let o = claim(&*s, "a", t(5000), 10);
    assert_eq!(o.claims.len(), 1, "never run, grace 1 → fires");
    assert!(o.rows.is_empty());
}

pub fn cron_missed_after_days_and_first_cron_fire(f: Factory) {
    let s = f();
    let day = 86_400;
    let base = 20_000 * day; // a midnight UTC
    let mut d = every("c", 60);
    d.schedule = ScheduleSpec::Cron {
        expr: "0 7 * * *".into(),
        tz: "UTC".into(),
    };
    d.misfire_grace_seconds = Some(600.0);
    let mut never = d.clone();
    never.name = "never".into();
    apply_due(&*s, &file(vec![d, never]), t(base)).unwrap();
    // "c" runs at 07:00 on day 0; "never" is claimed for the first time 3 days later.
    let o = s
        .claim_due(&ClaimRequest {
            now: t(base + 7 * 3600),
            owner: "a",
            limit: 10,
            in_flight: &["never".to_string()],
            clock_stepped: None,
            max_offset: None,
        })
        .unwrap();
    assert_eq!(o.claims.len(), 1);
    done(
        &*s,
        &o.claims[0],
        "a",
        Status::Succeeded,
        t(base + 7 * 3600 + 5),
    );
    let now = t(base + 3 * day + 9 * 3600);
    let o = claim(&*s, "a", now, 10);
    let missed: Vec<_> = o.rows.iter().filter(|r| r.job == "c").collect();
    assert_eq!(missed.len(), 1);
    assert_eq!(missed[0].status, Status::Missed);
    assert!(o.claims.iter().all(|c| c.job.def.name != "c"));
    let never_claims: Vec<_> = o
        .claims
        .iter()
        .filter(|c| c.job.def.name == "never")
        .collect();
    assert_eq!(never_claims.len(), 1, "never run → fires, no missed row");
    assert!(o.rows.iter().all(|r| r.job != "never"));
}

pub fn grace_from_yaml_string_and_junk(f: Factory) {
    // Through the real jobs-file loader: "90" behaves as 90, "notanumber" as null (a warning,
    // not an error), and the other due job still fires.
    let yaml = "jobs:
  - name: str
    schedule: every 60s
    command: \"true\"
    misfire_grace_seconds: \"90\"
  - name: junk
    schedule: every 60s
    command: \"true\"
    misfire_grace_seconds: \"notanumber\"
";
    let loaded = cronsole::config::load_str(yaml, std::path::Path::new("jobs.yaml"))
        .unwrap_or_else(|e| panic!("{e:?}"));
    let s = f();
    apply_due(&*s, &loaded.file, t(1000)).unwrap();
    for c in claim(&*s, "a", t(1000), 10).claims {
        done(&*s, &c, "a", Status::Succeeded, t(1001));
    }
    let o = claim(&*s, "a", t(1300), 10);
    let missed: Vec<_> = o.rows.iter().map(|r| (r.job.as_str(), r.status)).collect();
    assert_eq!(missed, vec![("str", Status::Missed)]);
    let fired: Vec<_> = o.claims.iter().map(|c| c.job.def.name.as_str()).collect();
    assert_eq!(fired, vec!["junk"]);
    assert_eq!(o.claims[0].slot, Some(t(1060)));
}

// ---- crash recovery ---------------------------------------------------------------------------

pub fn recurring_abandoned_run_waits_for_its_next_slot(f: Factory) {
    let s = f();
    apply_due(&*s, &file(vec![every("j", 60)]), t(1000)).unwrap();
    let c = claim(&*s, "dead", t(1000), 10).claims.remove(0);
    // Lease (30 s) expires; another owner recovers at t+31.
    let o = claim(&*s, "b", t(1031), 10);
    assert!(o.claims.is_empty(), "at-most-once per slot");
    assert_eq!(o.rows.len(), 1);
    let ab = &o.rows[0];
    assert_eq!(ab.status, Status::Abandoned);
    assert_eq!(ab.run_id, c.run_id);
    assert_eq!(ab.slot, Some(t(1000)));
    // The row names the owner that recovered the run, as the store reads it back; the owner
    // the run belonged to is in its reason.
    assert_eq!(ab.recovered_by.as_deref(), Some("b"));
    let stored = s
        .history(&HistoryQuery {
            run_id: Some(c.run_id),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(stored[0].recovered_by.as_deref(), Some("b"), "{stored:?}");
    assert!(
        stored[0]
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("owner dead")),
        "{stored:?}"
    );
    let n = claim(&*s, "b", t(1060), 10);
    assert_eq!(n.claims.len(), 1);
    assert_eq!(n.claims[0].slot, Some(t(1060)));
    // The owner was only paused: its late completion is fenced out of the job's state (a
    // newer run holds the lease) but is the run's one row, under the status that happened.
    let late = done(&*s, &c, "dead", Status::Succeeded, t(1061));
    assert!(late.stale);
    assert!(late.rows[0].stale_lease);
    assert!(late.rows[0].supersedes_abandoned);
    let j = s.job("j").unwrap().unwrap();
    assert_eq!(j.rt.lease.as_ref().unwrap().run_id, n.claims[0].run_id);
    let h = s
        .history(&HistoryQuery {
            run_id: Some(c.run_id),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(h.len(), 1, "one row per run: {h:?}");
    assert_eq!(h[0].status, Status::Succeeded);
    assert_eq!(h[0].recovered_by, None, "the run's own end: {h:?}");
}

/// "A run becomes `abandoned` only if its process dies; nothing is ever
/// recorded under a status that did not happen". An owner paused past its lease (SIGSTOP, not
/// dead) completes after another owner recorded the run `abandoned`: every query — history by
/// run, by job, by status, the job's last status and its counters — shows one row for the
/// slot, the real result. A one-shot whose run really ended is not retried.
pub fn a_late_completion_replaces_the_abandoned_row_of_its_run(f: Factory) {
    let s = f();
    apply_due(&*s, &file(vec![every("j", 60)]), t(1000)).unwrap();
    let c = claim(&*s, "paused", t(1000), 10).claims.remove(0);
    let o = claim(&*s, "b", t(1031), 10);
    assert_eq!(o.rows[0].status, Status::Abandoned);
    assert_eq!(
        s.job("j").unwrap().unwrap().rt.last_status,
        Some(Status::Abandoned)
    );
    let late = done(&*s, &c, "paused", Status::Failed, t(1040));
    assert!(late.stale, "its lease was taken over");
    assert!(late.rows[0].supersedes_abandoned);
    let all = rows(&*s, "j");
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(
        (all[0].run_id, all[0].status, all[0].slot),
        (c.run_id, Status::Failed, Some(t(1000)))
    );
    let abandoned = s
        .history(&HistoryQuery {
            status: Some(Status::Abandoned),
            ..Default::default()
        })
        .unwrap();
    assert!(abandoned.is_empty(), "{abandoned:?}");
    let j = s.job("j").unwrap().unwrap();
    assert_eq!(
        j.rt.last_status,
        Some(Status::Failed),
        "no newer run: the real end"
    );
    assert_eq!(j.rt.last_run_at, Some(t(1040)));
    assert_eq!(j.rt.counters.by_status.get(&Status::Abandoned), None);
    assert_eq!(j.rt.counters.by_status.get(&Status::Failed), Some(&1));
    assert!(j.rt.lease.is_none());
    // The schedule goes on from its next slot, unchanged.
    let n = claim(&*s, "b", t(1060), 10);
    assert_eq!(n.claims[0].slot, Some(t(1060)));

    // A one-shot: recorded `abandoned`, one retry owed; its real end comes first.
    let s = f();
    let mut d = every("once", 60);
    d.max_runs = Some(1);
    apply_due(&*s, &file(vec![d]), t(2000)).unwrap();
    let c = claim(&*s, "paused", t(2000), 10).claims.remove(0);
    let o = claim(&*s, "b", t(2031), 0);
    assert!(
        o.rows
            .iter()
            .any(|r| r.run_id == c.run_id && r.status == Status::Abandoned)
    );
    assert!(s.job("once").unwrap().unwrap().rt.recovery_pending);
    let late = done(&*s, &c, "paused", Status::Succeeded, t(2035));
    assert!(late.rows[0].supersedes_abandoned);
    let j = s.job("once").unwrap().unwrap();
    assert!(!j.rt.recovery_pending, "it ran: no retry owed");
    assert!(j.rt.retired);
    assert_eq!(j.rt.retired_reason.as_deref(), Some("once: ran"));
    let again = claim(&*s, "b", t(2100), 10);
    assert!(
        again.claims.iter().all(|c| c.job.def.name != "once"),
        "a one-shot that ran is not run again"
    );
    let once = rows(&*s, "once");
    assert_eq!(once.len(), 1, "{once:?}");
    assert_eq!(once[0].status, Status::Succeeded);
}

/// An owner stopped past its lease, then continued, ends a run another owner
/// had recorded `abandoned`. That run really executed, so it counts toward `max_runs` even
/// though a newer run started meanwhile: a `max_runs: 3` job executes 3 times, not 4, and the
/// job's run count equals its rows (`jobs` RUNS = `stats` EXEC).
pub fn a_late_completion_counts_toward_max_runs(f: Factory) {
    let s = f();
    let mut d = every("capped", 60);
    d.max_runs = Some(3);
    apply_due(&*s, &file(vec![d]), t(1000)).unwrap();
    let c1 = claim(&*s, "a", t(1000), 10).claims.remove(0);
    done(&*s, &c1, "a", Status::Succeeded, t(1001));
    let stopped = claim(&*s, "paused", t(1060), 10).claims.remove(0);
    let o = claim(&*s, "b", t(1091), 10);
    assert_eq!(o.rows[0].status, Status::Abandoned);
    let newer = claim(&*s, "b", t(1120), 10).claims.remove(0);
    let late = done(&*s, &stopped, "paused", Status::Succeeded, t(1125));
    assert!(late.rows[0].supersedes_abandoned);
    assert_eq!(s.job("capped").unwrap().unwrap().rt.runs, 2);
    done(&*s, &newer, "b", Status::Succeeded, t(1130));
    let j = s.job("capped").unwrap().unwrap();
    assert_eq!(j.rt.runs, 3);
    assert!(j.rt.retired, "{:?}", j.rt.retired_reason);
    assert_eq!(j.rt.retired_reason.as_deref(), Some("max_runs reached"));
    let executed = rows(&*s, "capped");
    assert_eq!(executed.len(), 3, "{executed:?}");
    assert!(
        claim(&*s, "b", t(1180), 10).claims.is_empty(),
        "no fourth execution"
    );
}

/// A run recorded `abandoned` (its owner died mid-run) does not count toward `max_runs`: its
/// action may not have done its work, so a `max_runs: 2` job whose first run was abandoned
/// executes three times, two of them counted, and then retires.
pub fn an_abandoned_run_does_not_count_toward_max_runs(f: Factory) {
    let s = f();
    let mut d = every("capped", 60);
    d.max_runs = Some(2);
    apply_due(&*s, &file(vec![d]), t(1000)).unwrap();
    claim(&*s, "dead", t(1000), 10).claims.remove(0);
    let o = claim(&*s, "b", t(1031), 10);
    assert_eq!(o.rows[0].status, Status::Abandoned, "{:?}", o.rows);
    let j = s.job("capped").unwrap().unwrap();
    assert_eq!(j.rt.runs, 0);
    assert!(!j.rt.retired);
    let c2 = claim(&*s, "b", t(1060), 10).claims.remove(0);
    done(&*s, &c2, "b", Status::Succeeded, t(1061));
    assert!(!s.job("capped").unwrap().unwrap().rt.retired);
    let c3 = claim(&*s, "b", t(1120), 10).claims.remove(0);
    done(&*s, &c3, "b", Status::Succeeded, t(1121));
    let j = s.job("capped").unwrap().unwrap();
    assert_eq!(j.rt.runs, 2);
    assert_eq!(j.rt.retired_reason.as_deref(), Some("max_runs reached"));
    assert_eq!(rows(&*s, "capped").len(), 3);
}

/// A run whose action did not run (`skipped`: a gate found nothing to do, a budget refused the
/// call; `no_change`: a monitor's source did not change) does not count toward `max_runs` or
/// `once`: a gated `max_runs: 2` job does its work twice however many quiet ticks came first,
/// and a `once: true` job runs once after its skipped slots. The job goes on to its next slot
/// after each; an `at` job, which has none, retires saying its slot was skipped.
pub fn a_skipped_run_does_not_count_toward_max_runs(f: Factory) {
    let s = f();
    let mut capped = every("capped", 60);
    capped.max_runs = Some(2);
    let mut once = every("once", 60);
    once.max_runs = Some(1);
    let mut watch = every("watch", 60);
    watch.max_runs = Some(1);
    let mut at = every("at", 60);
    at.schedule = ScheduleSpec::At { at: t(1000) };
    apply_due(&*s, &file(vec![capped, once, watch, at]), t(1000)).unwrap();
    let end = |c: &cronsole::store::Claim, status: Status, reason: &str, now: i64| {
        let mut row = HistoryRow::new(&c.job.def.name, status, c.trigger, c.slot, "a", t(now + 1));
        row.reason = Some(reason.into());
        s.complete(Completion {
            job: c.job.def.name.clone(),
            run_id: c.run_id,
            owner: "a".into(),
            now: t(now + 1),
            row,
            state: None,
            hold_until: None,
        })
        .unwrap();
    };
    for now in [1000, 1060, 1120] {
        let o = claim(&*s, "a", t(now), 10);
        let want = if now == 1000 { 4 } else { 3 };
        assert_eq!(o.claims.len(), want, "at {now}: {:?}", o.rows);
        for c in &o.claims {
            match c.job.def.name.as_str() {
                "watch" => end(c, Status::NoChange, "unchanged", now),
                "at" => end(
                    c,
                    Status::Skipped,
                    "budget too small for one call: it may cost up to $0.0025, the limit is $0.0020",
                    now,
                ),
                _ if now == 1120 => end(
                    c,
                    Status::Skipped,
                    "budget reached: $0.0003 left, this call may cost up to $0.0025",
                    now,
                ),
                _ => end(c, Status::Skipped, "pre_run: nothing to do", now),
            }
        }
        for name in ["capped", "once", "watch"] {
            let j = s.job(name).unwrap().unwrap();
            assert!(!j.rt.retired, "{name} at {now}: {:?}", j.rt.retired_reason);
            assert_eq!(j.rt.runs, 0, "{name}");
            assert_eq!(j.rt.next_slot, Some(t(now + 60)), "{name}");
        }
    }
    // The `at` job's one slot was skipped: it is decided, and the job says it did not run.
    let j = s.job("at").unwrap().unwrap();
    assert_eq!(
        j.rt.retired_reason.as_deref(),
        Some("at: slot skipped, did not run")
    );
    assert_eq!(j.rt.runs, 0);
    // The gate opens: `once` and `watch` run once, `capped` twice, then each retires.
    for now in [1180, 1240] {
        let o = claim(&*s, "a", t(now), 10);
        for c in &o.claims {
            done(&*s, c, "a", Status::Succeeded, t(now + 1));
        }
    }
    for name in ["once", "watch"] {
        let j = s.job(name).unwrap().unwrap();
        assert_eq!(j.rt.retired_reason.as_deref(), Some("once: ran"), "{name}");
        assert_eq!(j.rt.runs, 1, "{name}");
    }
    let j = s.job("capped").unwrap().unwrap();
    assert_eq!(j.rt.retired_reason.as_deref(), Some("max_runs reached"));
    assert_eq!(j.rt.runs, 2);
    let ran = |name: &str| {
        rows(&*s, name)
            .iter()
            .filter(|r| r.status == Status::Succeeded)
            .count()
    };
    assert_eq!((ran("once"), ran("watch"), ran("capped")), (1, 1, 2));
}

pub fn one_shot_is_reoffered_once_then_retired(f: Factory) {
    let s = f();
    let mut d = every("once", 60);
    d.max_runs = Some(1);
    apply_due(&*s, &file(vec![d]), t(1000)).unwrap();
    let c1 = claim(&*s, "dead1", t(1000), 10).claims.remove(0);
    assert!(c1.job.rt.lease.as_ref().unwrap().spends_job);
    let o = claim(&*s, "b", t(1031), 10);
    assert_eq!(o.rows[0].status, Status::Abandoned);
    assert_eq!(o.claims.len(), 1, "re-offered once");
    assert_eq!(o.claims[0].trigger, Trigger::Recovery);
    let o2 = claim(&*s, "c", t(1062), 10);
    assert!(o2.claims.is_empty());
    assert_eq!(o2.rows[0].status, Status::Abandoned);
    let j = s.job("once").unwrap().unwrap();
    assert!(j.rt.retired, "abandoned twice → retired");
    let ab = rows(&*s, "once")
        .into_iter()
        .filter(|r| r.status == Status::Abandoned)
        .count();
    assert_eq!(ab, 2);
    assert!(claim(&*s, "c", t(9999), 10).claims.is_empty());
}

/// A cancel of a one-shot's run whose owner then dies: the run is recorded `abandoned` at its
/// lease's end and the job retires instead of being re-offered, as a cancelled live run would.
pub fn a_one_shot_cancelled_while_its_owner_is_dead_is_not_reoffered(f: Factory) {
    let s = f();
    let mut d = every("once", 60);
    d.max_runs = Some(1);
    apply_due(&*s, &file(vec![d]), t(1000)).unwrap();
    let c = claim(&*s, "dead", t(1000), 10).claims.remove(0);
    s.cancel(&c.run_id.to_string(), t(1005)).unwrap();
    let o = claim(&*s, "b", t(1031), 10);
    assert!(o.claims.is_empty(), "not re-offered: {:?}", o.claims);
    assert_eq!(o.rows.len(), 1, "{:?}", o.rows);
    assert_eq!(o.rows[0].status, Status::Abandoned);
    let j = s.job("once").unwrap().unwrap();
    assert!(j.rt.retired && !j.rt.recovery_pending);
    assert_eq!(
        j.rt.retired_reason.as_deref(),
        Some("cancelled by operator")
    );
    assert!(claim(&*s, "c", t(9999), 10).claims.is_empty());
}

pub fn one_shot_recovery_that_succeeds_retires(f: Factory) {
    let s = f();
    let mut d = every("at", 60);
    d.schedule = ScheduleSpec::At { at: t(1100) };
    apply_due(&*s, &file(vec![d]), t(1000)).unwrap();
    assert!(claim(&*s, "a", t(1099), 10).claims.is_empty());
    claim(&*s, "dead", t(1100), 10).claims.remove(0);
    let r = claim(&*s, "b", t(1131), 10).claims.remove(0);
    assert_eq!(r.trigger, Trigger::Recovery);
    done(&*s, &r, "b", Status::Succeeded, t(1140));
    let j = s.job("at").unwrap().unwrap();
    assert!(j.rt.retired);
    assert!(j.rt.lease.is_none());
}

// ---- overlap, pause, trigger --------------------------------------------------------------------

pub fn slots_passing_during_a_run_become_one_overlap_row(f: Factory) {
    let s = f();
    let mut d = every("j", 10);
    d.lease_seconds = 300.0;
    apply_due(&*s, &file(vec![d]), t(1000)).unwrap();
    let c = claim(&*s, "a", t(1000), 10).claims.remove(0);
    let out = done(&*s, &c, "a", Status::Succeeded, t(1055));
    assert_eq!(out.rows.len(), 2);
    let o = &out.rows[1];
    assert_eq!(o.status, Status::Skipped);
    assert_eq!(o.reason.as_deref(), Some("overlap"));
    assert_eq!(o.slots_count, Some(5));
    assert_eq!(s.job("j").unwrap().unwrap().rt.next_slot, Some(t(1060)));
}

pub fn paused_jobs_record_nothing_and_resume_in_the_future(f: Factory) {
    let s = f();
    ran_once_at_t0(&*s, every("j", 60));
    let tok = s.change_token().unwrap();
    s.set_paused("j", true, t(1010)).unwrap();
    assert_ne!(s.change_token().unwrap(), tok, "pause changes the token");
    let o = claim(&*s, "a", t(1500), 10);
    assert!(o.claims.is_empty() && o.rows.is_empty());
    s.set_paused("j", false, t(1500)).unwrap();
    let j = s.job("j").unwrap().unwrap();
    assert_eq!(j.rt.next_slot, Some(t(1540)));
    assert!(claim(&*s, "a", t(1500), 10).claims.is_empty());
    assert!(s.set_paused("nope", true, t(1)).unwrap_err().is_bad_input());
}

pub fn manual_triggers_run_once_even_when_paused(f: Factory) {
    let s = f();
    ran_once_at_t0(&*s, every("j", 60));
    s.set_paused("j", true, t(1010)).unwrap();
    assert_eq!(
        s.request_trigger("j", t(1011)).unwrap(),
        TriggerOutcome::Queued
    );
    assert_eq!(
        s.request_trigger("j", t(1012)).unwrap(),
        TriggerOutcome::AlreadyQueued
    );
    let c = claim(&*s, "a", t(1013), 10).claims.remove(0);
    assert_eq!(c.trigger, Trigger::Manual);
    assert_eq!(c.slot, None);
    assert_eq!(
        s.request_trigger("j", t(1014)).unwrap(),
        TriggerOutcome::AlreadyRunning
    );
    done(&*s, &c, "a", Status::Succeeded, t(1015));
    let j = s.job("j").unwrap().unwrap();
    assert_eq!(j.rt.runs, 1, "manual runs do not count toward max_runs");
    assert!(claim(&*s, "a", t(1020), 10).claims.is_empty());
    assert!(s.request_trigger("nope", t(1)).unwrap_err().is_bad_input());
}

/// One chunk of a bulk action (`pause 'j*'`, `resume --all`, `trigger --tag T`) is
/// one store operation over many jobs: every job in the order asked, the same per-job decision
/// as the single-job calls, rows of an edit written with it, and a failing job stops the chunk
/// there with the jobs before it written and the ones after it untouched.
pub fn bulk_edits_apply_a_chunk_in_order_and_stop_at_the_first_failure(f: Factory) {
    use cronsole::store::{BulkAction, BulkOutcome, EditOutcome, JobEdit};
    let s = f();
    let names: Vec<String> = (0..40).map(|i| format!("j{i:02}")).collect();
    let defs = names.iter().map(|n| every(n, 60)).collect();
    apply_due(&*s, &file(defs), t(1000)).unwrap();
    let tok = s.change_token().unwrap();
    let r = s.bulk_edit(&names, &BulkAction::SetPaused(true), t(1010));
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(r.done, vec![BulkOutcome::SetPaused; 40]);
    assert_ne!(
        s.change_token().unwrap(),
        tok,
        "a bulk pause changes the token"
    );
    for j in s.jobs().unwrap() {
        assert!(j.rt.paused, "{} paused", j.def.name);
    }
    assert!(claim(&*s, "a", t(1500), 10).claims.is_empty());
    // Paused already: nothing changes, every job still answers.
    let r = s.bulk_edit(&names[..3], &BulkAction::SetPaused(true), t(1011));
    assert!(r.error.is_none() && r.done.len() == 3);

    // A missing job in the middle: the jobs before it are triggered, the ones after are not.
    let mixed: Vec<String> = ["j05", "j01", "nope", "j02"]
        .iter()
        .map(|n| n.to_string())
        .collect();
    let r = s.bulk_edit(&mixed, &BulkAction::Trigger, t(1020));
    assert_eq!(
        r.done,
        vec![
            BulkOutcome::Trigger(TriggerOutcome::Queued),
            BulkOutcome::Trigger(TriggerOutcome::Queued)
        ]
    );
    let e = r.error.expect("the missing job stops the chunk");
    assert!(e.is_bad_input() && e.to_string().contains("nope"), "{e}");
    let queued = |n: &str| s.job(n).unwrap().unwrap().rt.trigger_requested_at.is_some();
    assert!(queued("j05") && queued("j01"));
    assert!(!queued("j02"), "nothing after the failing job changes");
    let r = s.bulk_edit(&mixed[..1], &BulkAction::Trigger, t(1021));
    assert_eq!(
        r.done,
        vec![BulkOutcome::Trigger(TriggerOutcome::AlreadyQueued)]
    );

    // An edit's rows travel with the chunk: cancelling two queued triggers writes a skipped
    // row for each job.
    let r = s.bulk_edit(
        &mixed[..2],
        &BulkAction::Edit(JobEdit::Cancel(None)),
        t(1030),
    );
    assert_eq!(r.done, vec![BulkOutcome::Edit(EditOutcome::Dequeued(1)); 2]);
    for n in ["j05", "j01"] {
        let rows = rows(&*s, n);
        assert_eq!(rows.len(), 1, "{n}: {rows:?}");
        assert_eq!(rows[0].status, Status::Skipped);
        assert!(!queued(n));
    }

    // Pause with a reason, then resume every job in one chunk.
    let r = s.bulk_edit(
        &names[..2],
        &BulkAction::Edit(JobEdit::Pause {
            paused: true,
            reason: Some("maintenance".into()),
        }),
        t(1040),
    );
    assert!(r.error.is_none(), "{:?}", r.error);
    let j = s.job("j00").unwrap().unwrap();
    assert_eq!(j.rt.pause_reason.as_deref(), Some("maintenance"));
    let r = s.bulk_edit(&names, &BulkAction::SetPaused(false), t(1500));
    assert!(r.error.is_none() && r.done.len() == 40);
    for j in s.jobs().unwrap() {
        assert!(!j.rt.paused, "{} resumed", j.def.name);
        assert_eq!(j.rt.pause_reason, None);
    }
}

// ---- retirement ---------------------------------------------------------------------------------

pub fn max_runs_and_until_retire(f: Factory) {
    let s = f();
    let mut m = every("m", 60);
    m.max_runs = Some(2);
    let mut u = every("u", 60);
    u.until = Some(t(1090));
    apply_due(&*s, &file(vec![m, u]), t(1000)).unwrap();
    for (i, now) in [1000, 1060].into_iter().enumerate() {
        let o = claim(&*s, "a", t(now), 10);
        for c in &o.claims {
            done(&*s, c, "a", Status::Succeeded, t(now + 1));
        }
        if i == 0 {
            assert_eq!(o.claims.len(), 2);
        }
    }
    let m = s.job("m").unwrap().unwrap();
    assert!(m.rt.retired, "two runs → retired");
    assert_eq!(m.rt.runs, 2);
    let u = s.job("u").unwrap().unwrap();
    assert!(u.rt.retired, "until passed");
    assert!(claim(&*s, "a", t(5000), 10).claims.is_empty());
}

// ---- state, history, spend ----------------------------------------------------------------------

pub fn oversized_state_is_rejected_and_prior_kept(f: Factory) {
    let s = f();
    apply_due(&*s, &file(vec![every("j", 60)]), t(1000)).unwrap();
    let c = claim(&*s, "a", t(1000), 10).claims.remove(0);
    let mut small = JobState::default();
    small.notepad.insert("k".into(), "v".into());
    let mut row = HistoryRow::new("j", Status::Succeeded, c.trigger, c.slot, "a", t(1001));
    row.cost_usd = 0.25;
    let out = s
        .complete(Completion {
            job: "j".into(),
            run_id: c.run_id,
            owner: "a".into(),
            now: t(1001),
            row,
            state: Some(small.clone()),
            hold_until: None,
        })
        .unwrap();
    assert!(out.state_rejected.is_none());
    let c = claim(&*s, "a", t(1060), 10).claims.remove(0);
    let mut big = JobState::default();
    big.notepad.insert("k".into(), "x".repeat(20_000));
    let row = HistoryRow::new("j", Status::Succeeded, c.trigger, c.slot, "a", t(1061));
    let out = s
        .complete(Completion {
            job: "j".into(),
            run_id: c.run_id,
            owner: "a".into(),
            now: t(1061),
            row,
            state: Some(big),
            hold_until: None,
        })
        .unwrap();
    assert!(out.state_rejected.is_some());
    assert_eq!(s.job("j").unwrap().unwrap().rt.state, small);
    let sp = s.spend("j", t(1062)).unwrap();
    assert!((sp.job_usd - 0.25).abs() < 1e-9 && (sp.global_usd - 0.25).abs() < 1e-9);
    assert!(s.spend("nope", t(1062)).is_err());
}

/// The budget's hard limit: reservations are atomic across concurrent callers, count for
/// every owner, and a settled one moves into the counters with its run's row.
#[allow(clippy::too_many_lines)] // a test scenario reads best in one piece (see CONTRIBUTING.md)
pub fn budget_reservations_are_atomic_and_settle_into_counters(f: Factory) {
    use cronsole::model::{Budget, BudgetPeriod, ReservationState};
    use cronsole::store::{ReserveOutcome, ReserveRequest, Settlement};
    let s = f();
    let mut jf = file(vec![every("a", 60), every("b", 60)]);
    jf.settings.budget = Some(Budget {
        max_cost_usd: 1.0,
        period: BudgetPeriod::Day,
    });
    apply_due(&*s, &jf, t(1000)).unwrap();
    let c = claim(&*s, "o1", t(1000), 10)
        .claims
        .into_iter()
        .find(|c| c.job.def.name == "a")
        .unwrap();
    // Eight callers at once, $0.30 each, against $1.00: exactly three fit.
    let outcomes: Vec<ReserveOutcome> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..8)
            .map(|i| {
                let s = &s;
                let run_id = c.run_id;
                sc.spawn(move || {
                    let job = if i % 2 == 0 { "a" } else { "b" };
                    let owner = format!("o{}", i % 3);
                    s.reserve(&ReserveRequest {
                        job,
                        run_id,
                        owner: &owner,
                        usd: 0.3,
                        now: t(1001),
                    })
                    .unwrap()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ok: Vec<uuid::Uuid> = outcomes
        .iter()
        .filter_map(|o| match o {
            ReserveOutcome::Reserved { id } => Some(*id),
            ReserveOutcome::Refused { .. } => None,
        })
        .collect();
    assert_eq!(ok.len(), 3, "{outcomes:?}");
    for o in &outcomes {
        if let ReserveOutcome::Refused { reason } = o {
            assert!(
                reason.starts_with("budget reached: global $1.00/day"),
                "{reason}"
            );
        }
    }
    // Release everything, then one reservation on `a` for the claimed run settles at $0.10.
    let all = |s: &dyn cronsole::store::Store| {
        let mut v = Vec::new();
        for j in ["a", "b"] {
            for r in s.job(j).unwrap().unwrap().rt.counters.reservations {
                v.push((j, r));
            }
        }
        v
    };
    for (j, r) in all(&*s) {
        s.settle(j, r.id, Settlement::Release, t(1002)).unwrap();
    }
    assert!(all(&*s).is_empty());
    let reserve = |job: &str, usd: f64| match s
        .reserve(&ReserveRequest {
            job,
            run_id: c.run_id,
            owner: "o1",
            usd,
            now: t(1003),
        })
        .unwrap()
    {
        ReserveOutcome::Reserved { id } => id,
        other => panic!("{other:?}"),
    };
    let paid = reserve("a", 0.5);
    let unknown = reserve("b", 0.2);
    s.settle("a", paid, Settlement::Cost(0.1), t(1004)).unwrap();
    s.settle("b", unknown, Settlement::Spent, t(1004)).unwrap();
    let states: Vec<_> = all(&*s)
        .into_iter()
        .map(|(j, r)| (j, r.state, r.usd))
        .collect();
    assert_eq!(
        states,
        vec![
            ("a", ReservationState::Settled, 0.1),
            ("b", ReservationState::Spent, 0.2)
        ]
    );
    // $0.30 committed: $0.71 no longer fits, $0.70 does (and is released again).
    let r = s
        .reserve(&ReserveRequest {
            job: "b",
            run_id: c.run_id,
            owner: "o2",
            usd: 0.71,
            now: t(1004),
        })
        .unwrap();
    assert!(matches!(r, ReserveOutcome::Refused { .. }), "{r:?}");
    let fits = reserve("b", 0.7);
    s.settle("b", fits, Settlement::Release, t(1004)).unwrap();
    // The run completes with its cost: the settled reservation moves into the counters.
    let mut row = HistoryRow::new("a", Status::Succeeded, c.trigger, c.slot, "o1", t(1005));
    row.cost_usd = 0.1;
    s.complete(Completion {
        job: "a".into(),
        run_id: c.run_id,
        owner: "o1".into(),
        now: t(1005),
        row,
        state: None,
        hold_until: None,
    })
    .unwrap();
    let a = s.job("a").unwrap().unwrap();
    assert!(a.rt.counters.reservations.is_empty(), "{:?}", a.rt.counters);
    assert!((a.rt.counters.period_cost_usd - 0.1).abs() < 1e-12);
    let b = s.job("b").unwrap().unwrap();
    assert_eq!(
        b.rt.counters.reservations.len(),
        1,
        "the unknown outcome stays spent"
    );
    // Unknown jobs are refused.
    assert!(
        s.reserve(&ReserveRequest {
            job: "nope",
            run_id: c.run_id,
            owner: "o",
            usd: 0.0,
            now: t(1006),
        })
        .is_err()
    );
}

/// Re-applying the same limit with another `period` must not let the new period start from
/// $0 when the money was spent inside it. Spent (`a`, completed) and held (`b`, a call
/// of unknown outcome) money keeps counting under week, month and total, in both stores.
pub fn a_budget_period_edit_keeps_the_money_spent_inside_the_new_period(f: Factory) {
    use cronsole::model::{Budget, BudgetPeriod};
    use cronsole::store::{ReserveOutcome, ReserveRequest, Settlement};
    let s = f();
    let with = |period| {
        let mut jf = file(vec![every("a", 60), every("b", 60)]);
        jf.settings.budget = Some(Budget {
            max_cost_usd: 0.03,
            period,
        });
        jf
    };
    apply_due(&*s, &with(BudgetPeriod::Day), t(1000)).unwrap();
    let c = claim(&*s, "o1", t(1000), 10)
        .claims
        .into_iter()
        .find(|c| c.job.def.name == "a")
        .unwrap();
    let reserve = |job: &str, usd: f64, at: i64| {
        s.reserve(&ReserveRequest {
            job,
            run_id: c.run_id,
            owner: "o1",
            usd,
            now: t(at),
        })
        .unwrap()
    };
    let ReserveOutcome::Reserved { id: paid } = reserve("a", 0.01, 1001) else {
        panic!("the first call fits");
    };
    s.settle("a", paid, Settlement::Cost(0.01), t(1002))
        .unwrap();
    let mut row = HistoryRow::new("a", Status::Succeeded, c.trigger, c.slot, "o1", t(1003));
    row.cost_usd = 0.01;
    s.complete(Completion {
        job: "a".into(),
        run_id: c.run_id,
        owner: "o1".into(),
        now: t(1003),
        row,
        state: None,
        hold_until: None,
    })
    .unwrap();
    let ReserveOutcome::Reserved { id: unknown } = reserve("b", 0.01, 1004) else {
        panic!("the second call fits");
    };
    s.settle("b", unknown, Settlement::Spent, t(1005)).unwrap();
    // $0.02 committed today: $0.011 more does not fit, whatever the period is edited to.
    for (k, p) in [BudgetPeriod::Week, BudgetPeriod::Month, BudgetPeriod::Total]
        .into_iter()
        .enumerate()
    {
        let at = 1006 + 10 * k as i64;
        let rep = s.apply(&with(p), t(at)).unwrap();
        let from = ["day", "week", "month"][k];
        let to = ["week", "month", "total"][k];
        assert_eq!(rep.settings, vec![format!("budget period {from} → {to}")]);
        assert_eq!(rep.unchanged.len(), 2, "{rep:?}");
        let r = reserve("b", 0.011, at + 1);
        assert!(
            matches!(&r, ReserveOutcome::Refused { reason } if reason.contains("spent $0.01")
                && reason.contains("in flight $0.01")),
            "{p:?}: {r:?}"
        );
        let spend = s.spend("a", t(at + 2)).unwrap();
        assert!((spend.global_usd - 0.01).abs() < 1e-12, "{p:?}: {spend:?}");
        assert!((spend.job_usd - 0.01).abs() < 1e-12, "{p:?}: {spend:?}");
    }
}

/// A budget `period` edited from day to week must count the earlier days of the week too,
/// not only today's spend, not the earlier days of the week. The edit recounts the week's
/// spend from history (rows that finished inside it, read back only as far as its start), so
/// the week's spent includes Thursday's call, and the budget then stops at the limit.
pub fn a_day_to_week_edit_counts_the_earlier_days_of_the_week(f: Factory) {
    use cronsole::model::{Budget, BudgetPeriod};
    use cronsole::store::{ReserveOutcome, ReserveRequest, Settlement};
    const DAY: i64 = 86_400;
    let s = f();
    let with = |period| {
        let mut jf = file(vec![every("a", 60), every("b", 60)]);
        jf.settings.budget = Some(Budget {
            max_cost_usd: 0.03,
            period,
        });
        jf
    };
    // One spending run of `job` at `at`: reserve, settle, complete with the cost.
    let spend = |job: &str, usd: f64, at: i64| {
        let mut mine = None;
        for c in claim(&*s, "o1", t(at), 10).claims {
            if c.job.def.name == job {
                mine = Some(c);
            } else {
                // Anything else claimed ends at no cost.
                done(&*s, &c, "o1", Status::Succeeded, t(at));
            }
        }
        let c = mine.unwrap();
        let r = s
            .reserve(&ReserveRequest {
                job,
                run_id: c.run_id,
                owner: "o1",
                usd,
                now: t(at + 1),
            })
            .unwrap();
        let ReserveOutcome::Reserved { id } = r else {
            panic!("{job} ${usd} at {at}: {r:?}");
        };
        s.settle(job, id, Settlement::Cost(usd), t(at + 2)).unwrap();
        let mut row = HistoryRow::new(job, Status::Succeeded, c.trigger, c.slot, "o1", t(at + 3));
        row.cost_usd = usd;
        s.complete(Completion {
            job: job.into(),
            run_id: c.run_id,
            owner: "o1".into(),
            now: t(at + 3),
            row,
            state: None,
            hold_until: None,
        })
        .unwrap();
    };
    // 1970-01-01 (t0) is a Thursday of ISO week 1970-W01 (Monday 1969-12-29 … Sunday 01-04).
    apply_due(&*s, &with(BudgetPeriod::Day), t(1000)).unwrap();
    spend("a", 0.02, 1000);
    // Friday: a new day, its budget empty; `b` spends $0.005.
    let fri = DAY + 1000;
    spend("b", 0.005, fri);
    assert!((s.spend("a", t(fri + 10)).unwrap().global_usd - 0.005).abs() < 1e-12);
    // `a` ran on Friday too, at no cost: its counters rolled past Thursday's $0.02 (what the
    // counters alone remember of the week is Friday's $0.005).
    let a = s.job("a").unwrap().unwrap();
    assert_eq!(
        a.rt.counters.period_key, "day:1970-01-02",
        "{:?}",
        a.rt.counters
    );
    assert_eq!(a.rt.counters.period_cost_usd, 0.0);
    // The edit, on Friday: the week holds Thursday's $0.02 and Friday's $0.005.
    let rep = s.apply(&with(BudgetPeriod::Week), t(fri + 20)).unwrap();
    assert_eq!(rep.settings, vec!["budget period day → week".to_string()]);
    // The report names each recounted job, the new period and what its history booked there
    // (`apply` prints one line per job from it).
    let found: Vec<(&str, &str, f64)> = rep
        .recounted
        .iter()
        .map(|r| (r.job.as_str(), r.period.as_str(), r.spent_usd))
        .collect();
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(
        (found[0].0, found[0].1),
        ("a", "week:1970-W01"),
        "{found:?}"
    );
    assert!((found[0].2 - 0.02).abs() < 1e-12, "{found:?}");
    assert_eq!(
        (found[1].0, found[1].1),
        ("b", "week:1970-W01"),
        "{found:?}"
    );
    assert!((found[1].2 - 0.005).abs() < 1e-12, "{found:?}");
    // Re-applied as it is: nothing is recounted twice.
    let again = s.apply(&with(BudgetPeriod::Week), t(fri + 20)).unwrap();
    assert!(again.recounted.is_empty(), "{:?}", again.recounted);
    let now = t(fri + 21);
    let spent = s.spend("a", now).unwrap();
    assert!((spent.global_usd - 0.025).abs() < 1e-12, "{spent:?}");
    assert!((spent.job_usd - 0.02).abs() < 1e-12, "{spent:?}");
    let a = s.job("a").unwrap().unwrap();
    assert_eq!(a.rt.counters.period_key, "week:1970-W01");
    let listed: f64 = s
        .jobs()
        .unwrap()
        .iter()
        .map(|r| rules::period::counter_spend(&r.rt.counters, "week:1970-W01"))
        .sum();
    assert!((listed - 0.025).abs() < 1e-12, "jobs/stats read {listed}");
    // $0.006 more does not fit the week's $0.03; $0.004 does, and then $0.0011 does not.
    let claims = claim(&*s, "o2", t(fri + 60), 10).claims;
    let c = claims.iter().find(|c| c.job.def.name == "b").unwrap();
    let reserve = |usd: f64| {
        s.reserve(&ReserveRequest {
            job: "b",
            run_id: c.run_id,
            owner: "o2",
            usd,
            now: t(fri + 61),
        })
        .unwrap()
    };
    let r = reserve(0.006);
    assert!(
        matches!(&r, ReserveOutcome::Refused { reason } if reason.contains("spent $0.025")),
        "{r:?}"
    );
    assert!(matches!(reserve(0.004), ReserveOutcome::Reserved { .. }));
    assert!(matches!(reserve(0.0011), ReserveOutcome::Refused { .. }));
    // Editing back to day counts only Friday's rows (Thursday's day has ended), plus the call
    // in flight.
    s.apply(&with(BudgetPeriod::Day), t(fri + 70)).unwrap();
    let spent = s.spend("b", t(fri + 71)).unwrap();
    assert!((spent.global_usd - 0.005).abs() < 1e-12, "{spent:?}");
}

/// Calls reserved just before UTC midnight that settle after it must not be booked into the
/// new day on top of its own reservations (that reached 168 % of its limit).
/// A call's money is booked in the period its reservation was made in, in both stores.
pub fn a_call_reserved_before_midnight_is_booked_in_its_day(f: Factory) {
    use cronsole::model::{Budget, BudgetPeriod};
    use cronsole::store::{ReserveOutcome, ReserveRequest, Settlement};
    use cronsole::testkit::time::rfc3339 as at;
    let s = f();
    let mut jf = file(vec![every("a", 3600), every("b", 3600)]);
    jf.settings.budget = Some(Budget {
        max_cost_usd: 0.05,
        period: BudgetPeriod::Day,
    });
    let d = at("2026-12-01T23:59:58Z");
    apply_due(&*s, &jf, d).unwrap();
    let claims = claim(&*s, "o1", d, 10).claims;
    let run = |job: &str| {
        claims
            .iter()
            .find(|c| c.job.def.name == job)
            .map(|c| c.run_id)
            .unwrap()
    };
    let reserve = |job: &str, usd: f64, now| {
        s.reserve(&ReserveRequest {
            job,
            run_id: run(job),
            owner: "o1",
            usd,
            now,
        })
        .unwrap()
    };
    let ReserveOutcome::Reserved { id: old } = reserve("a", 0.04, d) else {
        panic!("day D has room")
    };
    // Midnight: day D+1 is empty; `b` reserves most of it, and `a`'s own retry reserves too,
    // which must not drop `a`'s in-flight reservation of day D.
    let d1 = at("2026-12-02T00:00:00Z");
    assert!(matches!(
        reserve("b", 0.04, d1),
        ReserveOutcome::Reserved { .. }
    ));
    let ReserveOutcome::Reserved { id: retry } = reserve("a", 0.001, d1) else {
        panic!("fits")
    };
    s.settle("a", retry, Settlement::Release, d1).unwrap();
    // `a`'s day-D call settles after midnight and its run completes.
    let later = at("2026-12-02T00:00:01Z");
    s.settle("a", old, Settlement::Cost(0.035), later).unwrap();
    let c = claims.iter().find(|c| c.job.def.name == "a").unwrap();
    let mut row = HistoryRow::new("a", Status::Succeeded, c.trigger, c.slot, "o1", later);
    row.cost_usd = 0.035;
    s.complete(Completion {
        job: "a".into(),
        run_id: c.run_id,
        owner: "o1".into(),
        now: later,
        row,
        state: None,
        hold_until: None,
    })
    .unwrap();
    let a = s.job("a").unwrap().unwrap();
    assert!(a.rt.counters.reservations.is_empty(), "{:?}", a.rt.counters);
    assert!((a.rt.counters.total_cost_usd - 0.035).abs() < 1e-12);
    let spend = s.spend("a", later).unwrap();
    assert_eq!(spend.job_usd, 0.0, "day D's call is not day D+1's spend");
    assert_eq!(spend.global_usd, 0.0);
    // D+1 holds only `b`'s $0.04: $0.01 more fits, $0.011 does not.
    assert!(matches!(
        reserve("a", 0.011, later),
        ReserveOutcome::Refused { .. }
    ));
    assert!(matches!(
        reserve("a", 0.01, later),
        ReserveOutcome::Reserved { .. }
    ));
}

pub fn history_filters_newest_first(f: Factory) {
    let s = f();
    apply_due(&*s, &file(vec![every("a", 60), every("b", 60)]), t(1000)).unwrap();
    let mut ids = Vec::new();
    for (i, now) in [1000, 1060, 1120].into_iter().enumerate() {
        for c in claim(&*s, "o", t(now), 10).claims {
            let st = if i == 1 {
                Status::Failed
            } else {
                Status::Succeeded
            };
            done(&*s, &c, "o", st, t(now + 1));
            ids.push(c.run_id);
        }
    }
    let all = s.history(&HistoryQuery::default()).unwrap();
    assert_eq!(all.len(), 6);
    assert!(all.windows(2).all(|w| w[0].finished_at >= w[1].finished_at));
    let a = rows(&*s, "a");
    assert_eq!(a.len(), 3);
    assert!(a.iter().all(|r| r.job == "a"));
    let failed = s
        .history(&HistoryQuery {
            status: Some(Status::Failed),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(failed.len(), 2);
    let since = s
        .history(&HistoryQuery {
            since: Some(t(1100)),
            limit: 1,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(since.len(), 1);
    assert_eq!(since[0].finished_at, t(1121));
    let one = s
        .history(&HistoryQuery {
            run_id: Some(ids[0]),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].run_id, ids[0]);
    let diffs = s
        .history(&HistoryQuery {
            with_diff: true,
            ..Default::default()
        })
        .unwrap();
    assert!(diffs.is_empty());
}

/// Issues 12 and 14: keyset pages. Following `HistoryPage::next` from the first page gives
/// every matching row once, newest first, unfiltered and filtered, with the last page saying
/// there is no next; a token from nowhere is refused.
pub fn history_pages_by_token(f: Factory) {
    let s = f();
    apply_due(
        &*s,
        &file(vec![every("a", 60), every("b", 60), every("c", 60)]),
        t(1000),
    )
    .unwrap();
    for k in 0..5 {
        let now = 1000 + 60 * k;
        for c in claim(&*s, "o", t(now), 10).claims {
            done(&*s, &c, "o", Status::Succeeded, t(now + 1));
        }
    }
    for job in [None, Some("b".to_string())] {
        let all = s
            .history(&HistoryQuery {
                job: job.clone(),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(all.len(), if job.is_some() { 5 } else { 15 });
        let mut paged = Vec::new();
        let mut before = None;
        for _ in 0..20 {
            let p = s
                .history_page(&HistoryQuery {
                    job: job.clone(),
                    limit: 4,
                    before: before.clone(),
                    ..Default::default()
                })
                .unwrap();
            assert!(p.rows.len() <= 4);
            paged.extend(p.rows);
            match p.next {
                Some(n) => before = Some(n),
                None => break,
            }
        }
        let ids =
            |v: &[cronsole::model::HistoryRow]| v.iter().map(|r| r.run_id).collect::<Vec<_>>();
        assert_eq!(ids(&paged), ids(&all), "job {job:?}");
    }
    assert!(matches!(
        s.history_page(&HistoryQuery {
            limit: 4,
            before: Some("not-a-token".into()),
            ..Default::default()
        }),
        Err(cronsole::store::StoreError::Operation(
            OperationError::BadPageToken(_)
        ))
    ));
}

/// Operator actions go through the store the same way everywhere. A retry and a
/// backfill are queued and claimed as runs of their own; a cancel marks the running lease
/// (fenced by run id); a pause keeps its reason until resume; history pages by offset.
pub fn operator_actions_and_history_pages(f: Factory) {
    use cronsole::store::{EditOutcome, JobEdit};
    let s = f();
    apply_due(&*s, &file(vec![every("a", 60)]), t(1000)).unwrap();
    let c = claim(&*s, "o1", t(1000), 5).claims.remove(0);
    // Cancel: by name and by run id; another run id is refused.
    assert!(
        s.cancel(&uuid::Uuid::new_v4().to_string(), t(1001))
            .is_err()
    );
    let (job, out) = s.cancel(&c.run_id.to_string(), t(1001)).unwrap();
    assert_eq!(
        (job.as_str(), out),
        ("a", EditOutcome::CancelRequested { run_id: c.run_id })
    );
    let lease = s.job("a").unwrap().unwrap().rt.lease.unwrap();
    assert_eq!(lease.cancel_requested_at, Some(t(1001)));
    let (_, out) = s.cancel("a", t(1002)).unwrap();
    assert_eq!(out, EditOutcome::AlreadyCancelling { run_id: c.run_id });
    done(&*s, &c, "o1", Status::Failed, t(1003));
    // Retry the failed run: one queued run, claimed by any owner with trigger retry.
    let (job, out) = s.retry(c.run_id, t(1004)).unwrap();
    assert_eq!(
        (job.as_str(), out),
        (
            "a",
            EditOutcome::Queued {
                added: 1,
                queued: 1
            }
        )
    );
    assert!(
        s.retry(c.run_id, t(1004)).is_err(),
        "a retry is queued once"
    );
    let r = claim(&*s, "o2", t(1005), 5).claims.remove(0);
    assert_eq!((r.trigger, r.slot), (Trigger::Retry, c.slot));
    done(&*s, &r, "o2", Status::Succeeded, t(1006));
    // Backfill two past slots of the grid: two rows of their own.
    let out = s
        .update_job(
            "a",
            &JobEdit::Backfill {
                from: t(880),
                to: t(940),
            },
            t(1007),
        )
        .unwrap();
    assert_eq!(
        out,
        EditOutcome::Queued {
            added: 2,
            queued: 2
        }
    );
    for want in [t(880), t(940)] {
        let b = claim(&*s, "o1", t(1008), 5).claims.remove(0);
        assert_eq!((b.trigger, b.slot), (Trigger::Backfill, Some(want)));
        done(&*s, &b, "o1", Status::Succeeded, t(1009));
    }
    assert_eq!(
        s.job("a").unwrap().unwrap().rt.runs,
        1,
        "only the scheduled run counts"
    );
    // Pause with a reason; resume clears it.
    let pause = JobEdit::Pause {
        paused: true,
        reason: Some("maintenance".into()),
    };
    s.update_job("a", &pause, t(1010)).unwrap();
    let rt = s.job("a").unwrap().unwrap().rt;
    assert!(rt.paused && rt.pause_reason.as_deref() == Some("maintenance"));
    s.set_paused("a", false, t(1011)).unwrap();
    assert_eq!(s.job("a").unwrap().unwrap().rt.pause_reason, None);
    // Pages by offset: 4 rows, newest first, two at a time.
    let page = |offset| {
        s.history(&HistoryQuery {
            limit: 2,
            offset,
            ..Default::default()
        })
        .unwrap()
        .iter()
        .map(|r| r.trigger)
        .collect::<Vec<_>>()
    };
    assert_eq!(page(0), vec![Trigger::Backfill, Trigger::Backfill]);
    assert_eq!(page(2), vec![Trigger::Retry, Trigger::Schedule]);
    assert!(page(4).is_empty());
}

/// Every acknowledged trigger and backfill ends in exactly one row, even when the
/// job retires before an owner takes it. A spent one-shot still runs them (they do not count
/// toward `once`); a job removed from the jobs file gives each a `skipped` row saying why.
pub fn queued_operator_runs_outlive_retirement(f: Factory) {
    use cronsole::store::JobEdit;
    let s = f();
    let mut once = every("once", 60);
    once.max_runs = Some(1);
    apply_due(&*s, &file(vec![once, every("gone", 60)]), t(1000)).unwrap();
    for job in ["once", "gone"] {
        assert_eq!(
            s.request_trigger(job, t(1000)).unwrap(),
            TriggerOutcome::Queued
        );
        let fill = JobEdit::Backfill {
            from: t(880),
            to: t(940),
        };
        s.update_job(job, &fill, t(1000)).unwrap();
    }
    // `gone` leaves the file before any owner looked: its 3 queued runs are skipped.
    let once_def = s.job("once").unwrap().unwrap().def;
    s.apply(&file(vec![once_def]), t(1001)).unwrap();
    let mut seen = Vec::new();
    for k in 0..10 {
        let now = t(1002 + 2 * k);
        let out = claim(&*s, "a", now, 10);
        for c in &out.claims {
            seen.push((c.job.def.name.clone(), c.trigger, c.slot));
            done(&*s, c, "a", Status::Succeeded, now);
        }
    }
    assert_eq!(
        seen,
        vec![
            ("once".to_string(), Trigger::Schedule, Some(t(1000))),
            ("once".to_string(), Trigger::Manual, None),
            ("once".to_string(), Trigger::Backfill, Some(t(880))),
            ("once".to_string(), Trigger::Backfill, Some(t(940))),
        ]
    );
    let j = s.job("once").unwrap().unwrap();
    assert!(j.rt.retired && j.rt.queue.is_empty() && j.rt.trigger_requested_at.is_none());
    assert_eq!(j.rt.runs, 1);
    assert_eq!(rows(&*s, "once").len(), 4);
    let gone = rows(&*s, "gone");
    assert_eq!(gone.len(), 3, "one row per acknowledged request: {gone:?}");
    assert!(gone.iter().all(|r| r.status == Status::Skipped
        && r.reason.as_deref().is_some_and(|w| w.contains("removed"))));
    let g = s.job("gone").unwrap().unwrap();
    assert!(g.rt.queue.is_empty() && g.rt.trigger_requested_at.is_none());
}

/// `cancel JOB` of an idle job drops its queued trigger and backfills, each with
/// one `skipped` row written with the record; nothing stays queued or runs later.
pub fn cancel_of_queued_runs_writes_a_skipped_row_each(f: Factory) {
    use cronsole::store::{EditOutcome, JobEdit};
    let s = f();
    apply_due(&*s, &file(vec![every("c", 60)]), t(1000)).unwrap();
    assert_eq!(
        s.request_trigger("c", t(1000)).unwrap(),
        TriggerOutcome::Queued
    );
    let fill = JobEdit::Backfill {
        from: t(880),
        to: t(940),
    };
    s.update_job("c", &fill, t(1000)).unwrap();
    let (job, out) = s.cancel("c", t(1001)).unwrap();
    assert_eq!((job.as_str(), out), ("c", EditOutcome::Dequeued(3)));
    let got: Vec<_> = rows(&*s, "c")
        .into_iter()
        .map(|r| (r.status, r.trigger, r.slot, r.reason.unwrap_or_default()))
        .collect();
    let why = rules::reasons::REASON_QUEUED_CANCELLED.to_string();
    let mut want = vec![
        (Status::Skipped, Trigger::Manual, None, why.clone()),
        (
            Status::Skipped,
            Trigger::Backfill,
            Some(t(880)),
            why.clone(),
        ),
        (Status::Skipped, Trigger::Backfill, Some(t(940)), why),
    ];
    want.reverse();
    assert_eq!(got, want, "one row per dropped request, newest first");
    let j = s.job("c").unwrap().unwrap();
    assert!(j.rt.queue.is_empty() && j.rt.trigger_requested_at.is_none());
    assert_eq!(j.rt.counters.by_status.get(&Status::Skipped), Some(&3));
    // Nothing left to run: only the schedule's slot is offered.
    let o = claim(&*s, "a", t(1002), 10);
    let offered: Vec<_> = o.claims.iter().map(|c| c.trigger).collect();
    assert_eq!(offered, vec![Trigger::Schedule]);
}

/// A jittered slot is offered at its fire instant (slot + the job's
/// deterministic offset) and claimed under its own slot; `next_wakeup` is that fire instant.
/// Slots on dates a job's calendars exclude are never offered and leave no row.
pub fn jitter_and_calendars_shape_what_is_offered(f: Factory) {
    let s = f();
    let mut def = every("j", 3600);
    def.jitter_seconds = 600.0;
    let fire = def.fire_at(t(1000));
    assert!(fire > t(1000) && fire < t(1600), "{fire}");
    apply_due(&*s, &file(vec![def]), t(1000)).unwrap();
    assert_eq!(s.next_wakeup(t(1000)).unwrap(), Some(fire));
    let early = claim(&*s, "a", fire - chrono::Duration::milliseconds(1), 10);
    assert!(early.claims.is_empty() && early.rows.is_empty());
    let o = claim(&*s, "b", fire, 10);
    assert_eq!(o.claims.len(), 1);
    assert_eq!(o.claims[0].slot, Some(t(1000)), "the claim keeps the slot");

    let s = f();
    let mut def = every("c", 60);
    def.schedule = ScheduleSpec::Cron {
        expr: "0 9 * * *".into(),
        tz: "UTC".into(),
    };
    def.days.except_on = Some(cronsole::schedule::calendar::Calendar {
        name: "weekend".into(),
        weekdays: [false, false, false, false, false, true, true],
        dates: Default::default(),
    });
    // 1970-01-01 was a Thursday.
    s.apply(&file(vec![def]), t(1000)).unwrap();
    let thu = t(9 * 3600);
    let fri = thu + chrono::Duration::days(1);
    let mon = thu + chrono::Duration::days(4);
    for (at, want) in [(thu, fri), (fri, mon)] {
        let o = claim(&*s, "a", at, 10);
        assert_eq!(o.claims.len(), 1);
        assert_eq!(o.claims[0].slot, Some(at));
        done(&*s, &o.claims[0], "a", Status::Succeeded, at);
        assert_eq!(s.job("c").unwrap().unwrap().rt.next_slot, Some(want));
    }
    // Over the weekend nothing is offered and no row is written.
    let sat = claim(&*s, "a", thu + chrono::Duration::days(2), 10);
    assert!(sat.claims.is_empty() && sat.rows.is_empty());
    assert_eq!(rows(&*s, "c").len(), 2);
}

// ---- streamed reads and the per-attempt log -------------------------------------------------

/// `jobs_page` walks every job once, in the order of `jobs()`, a page at a time.
pub fn jobs_pages_walk_every_job_in_order(f: Factory) {
    let s = f();
    let names: Vec<String> = (0..25).map(|i| format!("job-{i:02}")).collect();
    apply_due(
        &*s,
        &file(names.iter().map(|n| every(n, 60)).collect()),
        t(1000),
    )
    .unwrap();
    let all: Vec<String> = s.jobs().unwrap().into_iter().map(|j| j.def.name).collect();
    assert_eq!(all.len(), 25);
    let mut walked = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = s.jobs_page(after.as_deref(), 7).unwrap();
        assert!(page.len() <= 7);
        walked.extend(page.iter().map(|j| j.def.name.clone()));
        match page.last() {
            Some(l) if page.len() == 7 => after = Some(l.def.name.clone()),
            _ => break,
        }
    }
    assert_eq!(walked, all);
    assert!(s.jobs_page(Some("zzz"), 7).unwrap().is_empty());
    // A page after a name that is not (or no longer) a job starts at the next name.
    let next = s.jobs_page(Some("job-04x"), 2).unwrap();
    let next: Vec<&str> = next.iter().map(|j| j.def.name.as_str()).collect();
    assert_eq!(next, ["job-05", "job-06"]);
    assert_eq!(s.jobs_page(None, 0).unwrap().len(), 0);
}

/// A row's `attempt_log` (additive field) is stored and read back whole by every store.
pub fn attempt_log_round_trips(f: Factory) {
    use cronsole::model::{Attempt, AttemptOutcome};
    let s = f();
    apply_due(&*s, &file(vec![every("a", 60)]), t(1000)).unwrap();
    let o = claim(&*s, "o", t(1000), 10);
    let c = &o.claims[0];
    let mut row = HistoryRow::new("a", Status::Succeeded, c.trigger, c.slot, "o", t(1005));
    row.run_id = c.run_id;
    row.attempts = 2;
    row.attempt_log = vec![
        Attempt::new(t(1000), t(1001), Some("HTTP 500")),
        Attempt::new(t(1003), t(1005), None),
    ];
    row.attempt_log[1].input_tokens = 12;
    row.attempt_log[1].output_tokens = 3;
    row.attempt_log[1].cost_usd = 0.25;
    s.complete(Completion {
        job: "a".into(),
        run_id: c.run_id,
        owner: "o".into(),
        now: t(1005),
        row: row.clone(),
        state: None,
        hold_until: None,
    })
    .unwrap();
    let back = rows(&*s, "a");
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].attempt_log, row.attempt_log);
    assert_eq!(back[0].attempt_log[0].outcome, AttemptOutcome::Failed);
}

/// Every case, for the runner macro.
#[macro_export]
macro_rules! conformance_suite {
    ($factory:expr) => {
        conformance_suite!(@cases $factory;
            apply_creates_updates_and_retires,
            a_reapply_writes_only_the_jobs_it_changes,
            jobs_named_reads_the_named_jobs_that_exist,
            each_slot_is_claimed_once_across_owners,
            claims_respect_the_owners_limit,
            in_flight_jobs_are_not_reoffered_to_their_owner,
            renewals_are_fenced_by_run_id,
            a_batch_of_renewals_answers_each_as_renew_would,
            misfire_coalesces_without_grace,
            misfire_over_grace_writes_one_missed_row,
            misfire_within_grace_fires,
            a_first_run_always_fires,
            cron_missed_after_days_and_first_cron_fire,
            grace_from_yaml_string_and_junk,
            recurring_abandoned_run_waits_for_its_next_slot,
            a_late_completion_replaces_the_abandoned_row_of_its_run,
            a_late_completion_counts_toward_max_runs,
            an_abandoned_run_does_not_count_toward_max_runs,
            a_skipped_run_does_not_count_toward_max_runs,
            one_shot_is_reoffered_once_then_retired,
            one_shot_recovery_that_succeeds_retires,
            a_one_shot_cancelled_while_its_owner_is_dead_is_not_reoffered,
            slots_passing_during_a_run_become_one_overlap_row,
            paused_jobs_record_nothing_and_resume_in_the_future,
            manual_triggers_run_once_even_when_paused,
            max_runs_and_until_retire,
            oversized_state_is_rejected_and_prior_kept,
            budget_reservations_are_atomic_and_settle_into_counters,
            loop_steps_hold_every_budget_across_owners,
            an_abandoned_loop_keeps_the_calls_it_recorded,
            a_refused_step_still_settles_the_last_turn,
            a_cancelled_loop_books_every_turn_it_paid_for,
            a_started_loops_next_turn_comes_before_new_runs,
            what_a_dead_loop_kept_aside_is_not_booked,
            a_call_reserved_before_midnight_is_booked_in_its_day,
            history_filters_newest_first,
            history_pages_by_token,
            operator_actions_and_history_pages,
            jitter_and_calendars_shape_what_is_offered,
            overlap_buffer_one_runs_the_first_kept_slot_after_the_run,
            overlap_buffer_one_keeps_its_slot_when_the_owner_dies,
            overlap_buffer_one_keeps_its_slot_through_a_pause_during_the_run,
            overlap_skip_writes_the_row_of_slots_due_before_a_pause,
            overlap_cancel_previous_supersedes_the_live_run,
            overlap_allow_runs_side_by_side_up_to_the_bound,
            overlap_allow_an_owner_death_frees_only_its_lease,
            chains_run_once_per_parent_run,
            chain_on_failure_and_fan_in,
            one_completion_batch_ending_both_parents_fires_the_fan_in_child_once,
            chain_from_a_recovered_run,
            paused_child_keeps_its_chain_run,
            a_chain_cycle_is_refused_before_anything_is_stored,
            jobs_pages_walk_every_job_in_order,
            attempt_log_round_trips,
            queued_operator_runs_outlive_retirement,
            cancel_of_queued_runs_writes_a_skipped_row_each,
            a_budget_period_edit_keeps_the_money_spent_inside_the_new_period,
            a_day_to_week_edit_counts_the_earlier_days_of_the_week,
            bulk_edits_apply_a_chunk_in_order_and_stop_at_the_first_failure,
            tool_pins_are_kept_by_the_first_writer_and_replaced_only_by_accept,
            concurrent_first_uses_agree_on_one_pin,
            spenders_are_the_jobs_that_spent_or_hold_money_with_the_same_figures,
            jobs_stored_on_a_clock_an_hour_ahead_run_at_their_real_slots,
            an_answer_is_held_only_while_the_run_can_use_it,
            an_answer_naming_a_call_is_taken_only_for_that_call,
            a_late_row_keeps_the_answer_the_abandoned_row_showed,
            a_recount_counts_a_late_end_instead_of_its_abandoned_row,
        );
    };
    (@cases $factory:expr; $($case:ident),+ $(,)?) => {
        $(
            #[test]
            fn $case() {
                if let Some(f) = $factory {
                    $crate::conformance::$case(&f);
                }
            }
        )+
    };
}

/// `spenders` (what `describe` forecasts from under a global limit): exactly the jobs that
/// spent or hold money, in name order, whole; and the forecast over them is the forecast over
/// every job. The same figures on every store (the PostgreSQL store picks them in SQL).
pub fn spenders_are_the_jobs_that_spent_or_hold_money_with_the_same_figures(f: Factory) {
    use cronsole::model::{Budget, BudgetPeriod};
    use cronsole::store::ReserveRequest;
    let s = f();
    let mut jf = file(vec![
        every("a-spent", 60),
        every("b-idle", 60),
        every("c-holds", 60),
        every("d-free", 60),
    ]);
    jf.settings.budget = Some(Budget {
        max_cost_usd: 5.0,
        period: BudgetPeriod::Day,
    });
    apply_due(&*s, &jf, t(1000)).unwrap();
    assert!(s.spenders().unwrap().is_empty(), "nothing spent yet");
    let claims = claim(&*s, "o1", t(1000), 10).claims;
    for c in &claims {
        let mut row = cronsole::testkit::store::claim_row(
            c,
            "o1",
            cronsole::model::Status::Succeeded,
            t(1001),
        );
        match c.job.def.name.as_str() {
            "a-spent" => row.cost_usd = 0.1 + 0.2,
            "c-holds" => {
                s.reserve(&ReserveRequest {
                    job: "c-holds",
                    run_id: c.run_id,
                    owner: "o1",
                    usd: 0.25,
                    now: t(1001),
                })
                .unwrap();
                // Its run goes on: the reservation stays held.
                continue;
            }
            _ => {}
        }
        cronsole::testkit::store::FinishClaim::finish_row(&*s, c, row);
    }
    let spenders = s.spenders().unwrap();
    let names: Vec<&str> = spenders.iter().map(|j| j.def.name.as_str()).collect();
    assert_eq!(names, ["a-spent", "c-holds"]);
    let all = s.jobs().unwrap();
    let want: Vec<_> = all
        .iter()
        .filter(|j| cronsole::store::spent_or_holds(&j.rt.counters))
        .cloned()
        .collect();
    assert_eq!(spenders, want, "whole records, as `jobs` reads them");
    assert!((spenders[0].rt.counters.total_cost_usd - 0.3).abs() < 1e-12);
    assert!((spenders[1].rt.counters.reservations[0].usd - 0.25).abs() < 1e-12);
    let now = t(1002);
    let settings = s.settings().unwrap();
    let over_spenders = cronsole::testkit::internals::forecast::compute(&spenders, &settings, now);
    let over_all = cronsole::testkit::internals::forecast::compute(&all, &settings, now);
    assert_eq!(over_spenders, over_all);
    assert!((over_all.spent_usd - 0.3).abs() < 1e-12, "{over_all:?}");
    assert!(
        (over_all.in_flight_usd - 0.25).abs() < 1e-12,
        "{over_all:?}"
    );
}

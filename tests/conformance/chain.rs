//! Conformance cases for `after:` chains, for both stores: a parent's end
//! records the pending chained run in the same persist, any owner claims it once, with
//! `trigger: chain` and the parent's run id on its row.

use cronsole::model::{After, ChainOn, JobDef, Status, Trigger};
use cronsole::schedule::ScheduleSpec;
use cronsole::store::{Completion, HistoryQuery};

use super::{Factory, apply_due, claim, done, every, file, t};

fn chained(name: &str, after: &[(&str, ChainOn)]) -> JobDef {
    let mut d = every(name, 60);
    d.schedule = ScheduleSpec::AfterOnly;
    d.schedule_text = "after".into();
    d.after = after
        .iter()
        .map(|(j, on)| After {
            job: j.to_string(),
            on: *on,
        })
        .collect();
    d
}

pub fn chains_run_once_per_parent_run(f: Factory) {
    let s = f();
    apply_due(
        &*s,
        &file(vec![
            every("collect", 3600),
            chained("triage", &[("collect", ChainOn::Success)]),
        ]),
        t(1000),
    )
    .unwrap();
    let first = claim(&*s, "a", t(1000), 10);
    assert_eq!(first.claims.len(), 1, "only the scheduled parent is due");
    let c = &first.claims[0];
    assert_eq!(c.job.def.name, "collect");
    let triage = s.job("triage").unwrap().unwrap();
    assert!(
        !triage.rt.retired,
        "a job without a schedule is not out of slots"
    );
    assert!(triage.rt.next_slot.is_none());
    // Nothing to do for the chained job yet: no wake-up from it.
    assert!(claim(&*s, "b", t(1001), 10).claims.is_empty());

    let mut row = cronsole::model::HistoryRow::new(
        "collect",
        Status::Succeeded,
        c.trigger,
        c.slot,
        "a",
        t(1002),
    );
    row.run_id = c.run_id;
    row.result = Some("42 new items".into());
    let completion = Completion {
        job: "collect".into(),
        run_id: c.run_id,
        owner: "a".into(),
        now: t(1002),
        row,
        state: None,
        hold_until: None,
    };
    s.complete(completion.clone()).unwrap();
    // The pending chained run is in the child's record with the completion.
    let triage = s.job("triage").unwrap().unwrap();
    assert_eq!(triage.rt.chain_pending["collect"].run_id, c.run_id);
    assert!(
        s.next_wakeup(t(1002))
            .unwrap()
            .is_some_and(|w| w <= t(1002)),
        "the chained run is due at once"
    );
    // A retried completion of the same run fires nothing more (its lease is gone). A store
    // may answer it as stale (the file store keeps a `stale_lease` row) or recognise its own
    // landed row (PostgreSQL after a lost COMMIT reply): either way the child keeps one
    // pending run, and the claim below starts it once.
    s.complete(completion).unwrap();
    let triage = s.job("triage").unwrap().unwrap();
    assert_eq!(triage.rt.chain_pending.len(), 1);

    // Another owner takes it, once.
    let o = claim(&*s, "b", t(1003), 10);
    assert_eq!(o.claims.len(), 1);
    let ch = &o.claims[0];
    assert_eq!(ch.job.def.name, "triage");
    assert_eq!(ch.trigger, Trigger::Chain);
    let lease = ch.job.rt.lease.as_ref().unwrap();
    assert_eq!(lease.chain.len(), 1);
    assert_eq!(lease.chain[0].output.as_deref(), Some("42 new items"));
    assert!(
        claim(&*s, "c", t(1004), 10).claims.is_empty(),
        "never twice"
    );
    let end = done(&*s, ch, "b", Status::Succeeded, t(1005));
    assert_eq!(end.rows[0].trigger, Trigger::Chain);
    assert_eq!(end.rows[0].parent_run_id, Some(c.run_id));
    assert_eq!(end.rows[0].parent_job.as_deref(), Some("collect"));
    let h = s
        .history(&HistoryQuery {
            job: Some("triage".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].parent_run_id, Some(c.run_id), "stored with the row");
    let triage = s.job("triage").unwrap().unwrap();
    assert_eq!(
        triage.rt.runs, 0,
        "chained runs do not count toward max_runs"
    );
    assert!(triage.rt.chain_pending.is_empty());
}

pub fn chain_on_failure_and_fan_in(f: Factory) {
    let s = f();
    apply_due(
        &*s,
        &file(vec![
            every("a", 3600),
            every("b", 3600),
            chained("alarm", &[("a", ChainOn::Failure)]),
            chained(
                "report",
                &[("a", ChainOn::Success), ("b", ChainOn::Completion)],
            ),
        ]),
        t(1000),
    )
    .unwrap();
    let o = claim(&*s, "o", t(1000), 10);
    assert_eq!(o.claims.len(), 2);
    let ca = o.claims.iter().find(|c| c.job.def.name == "a").unwrap();
    let cb = o.claims.iter().find(|c| c.job.def.name == "b").unwrap();
    done(&*s, ca, "o", Status::Succeeded, t(1001));
    // `a` succeeded: no alarm; report waits for `b`.
    assert!(claim(&*s, "o", t(1001), 10).claims.is_empty());
    done(&*s, cb, "o", Status::Failed, t(1002));
    let o = claim(&*s, "o", t(1002), 10);
    assert_eq!(o.claims.len(), 1, "fan-in complete: {:?}", o.claims);
    let r = &o.claims[0];
    assert_eq!(r.job.def.name, "report");
    let chain = &r.job.rt.lease.as_ref().unwrap().chain;
    assert_eq!(
        chain.iter().map(|p| p.job.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    let end = done(&*s, r, "o", Status::Succeeded, t(1003));
    assert_eq!(
        end.rows[0].parent_run_id,
        Some(cb.run_id),
        "the last to finish"
    );
    // Next hour `a` fails: alarm fires; report waits for both again.
    let o = claim(&*s, "o", t(4600), 10);
    let ca = o.claims.iter().find(|c| c.job.def.name == "a").unwrap();
    done(&*s, ca, "o", Status::Failed, t(4601));
    let o = claim(&*s, "o", t(4602), 10);
    let names: Vec<&str> = o.claims.iter().map(|c| c.job.def.name.as_str()).collect();
    assert!(names.contains(&"alarm"), "{names:?}");
    assert!(!names.contains(&"report"), "{names:?}");
}

/// Both parents of a fan-in child end in one completion batch (one transaction on
/// PostgreSQL, which looks the batch's children up with one statement): the child records both
/// ends once and runs once; a child the batch's ends do not fire stays idle.
pub fn one_completion_batch_ending_both_parents_fires_the_fan_in_child_once(f: Factory) {
    let s = f();
    apply_due(
        &*s,
        &file(vec![
            every("a", 3600),
            every("b", 3600),
            chained("alarm", &[("a", ChainOn::Failure)]),
            chained(
                "report",
                &[("a", ChainOn::Success), ("b", ChainOn::Completion)],
            ),
        ]),
        t(1000),
    )
    .unwrap();
    let o = claim(&*s, "o", t(1000), 10);
    assert_eq!(o.claims.len(), 2);
    let ends: Vec<Completion> = o
        .claims
        .iter()
        .map(|c| {
            let status = if c.job.def.name == "a" {
                Status::Succeeded
            } else {
                Status::Failed
            };
            let mut row = cronsole::model::HistoryRow::new(
                &c.job.def.name,
                status,
                c.trigger,
                c.slot,
                "o",
                t(1001),
            );
            row.run_id = c.run_id;
            Completion {
                job: c.job.def.name.clone(),
                run_id: c.run_id,
                owner: "o".into(),
                now: t(1001),
                row,
                state: None,
                hold_until: None,
            }
        })
        .collect();
    for r in s.complete_many(ends) {
        r.unwrap();
    }
    let o = claim(&*s, "o", t(1002), 10);
    let names: Vec<&str> = o.claims.iter().map(|c| c.job.def.name.as_str()).collect();
    assert_eq!(names, ["report"], "fan-in fired once, alarm not");
    let chain = &o.claims[0].job.rt.lease.as_ref().unwrap().chain;
    assert_eq!(
        chain.iter().map(|p| p.job.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert!(claim(&*s, "o", t(1003), 10).claims.is_empty());
}

pub fn chain_from_a_recovered_run(f: Factory) {
    let s = f();
    apply_due(
        &*s,
        &file(vec![
            every("p", 3600),
            chained("c", &[("p", ChainOn::Failure)]),
        ]),
        t(1000),
    )
    .unwrap();
    let p = claim(&*s, "dead", t(1000), 10).claims.remove(0);
    // The owner died: its lease (30 s) expires; recovery writes `abandoned`, which fires the
    // child in the same persist.
    let o = claim(&*s, "b", t(1031), 10);
    assert!(
        o.rows
            .iter()
            .any(|r| r.run_id == p.run_id && r.status == Status::Abandoned)
    );
    let child = s.job("c").unwrap().unwrap();
    let claimed_now = o.claims.iter().any(|c| c.job.def.name == "c");
    assert!(
        claimed_now || child.rt.chain_pending.contains_key("p"),
        "the abandoned run is pending for the child"
    );
    let later = claim(&*s, "b", t(1032), 10);
    let n = o
        .claims
        .iter()
        .chain(&later.claims)
        .filter(|c| c.job.def.name == "c")
        .count();
    assert_eq!(n, 1, "the child runs once");
    // The dead owner's late completion is stale: it fires nothing more.
    assert!(done(&*s, &p, "dead", Status::Failed, t(1033)).stale);
    let c = s.job("c").unwrap().unwrap();
    assert!(c.rt.chain_pending.is_empty());
}

pub fn paused_child_keeps_its_chain_run(f: Factory) {
    let s = f();
    apply_due(
        &*s,
        &file(vec![
            every("p", 3600),
            chained("c", &[("p", ChainOn::Completion)]),
        ]),
        t(1000),
    )
    .unwrap();
    s.set_paused("c", true, t(1000)).unwrap();
    let p = claim(&*s, "o", t(1000), 10).claims.remove(0);
    done(&*s, &p, "o", Status::Succeeded, t(1001));
    assert!(claim(&*s, "o", t(1002), 10).claims.is_empty(), "paused");
    assert!(
        s.job("c")
            .unwrap()
            .unwrap()
            .rt
            .chain_pending
            .contains_key("p")
    );
    s.set_paused("c", false, t(2000)).unwrap();
    let o = claim(&*s, "o", t(2000), 10);
    assert_eq!(o.claims.len(), 1);
    assert_eq!(o.claims[0].trigger, Trigger::Chain);
}

pub fn a_chain_cycle_is_refused_before_anything_is_stored(f: Factory) {
    let s = f();
    let mut a = chained("a", &[("b", ChainOn::Success)]);
    a.schedule = ScheduleSpec::Every { every_seconds: 60 };
    let b = chained("b", &[("a", ChainOn::Completion)]);
    let e = apply_due(&*s, &file(vec![a, b]), t(1000)).unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(e.to_string().contains("a waits for b waits for a"), "{e}");
    assert!(s.jobs().unwrap().is_empty(), "nothing stored");
}

//! Conformance cases for the `overlap:` policies: the same outcomes, rows
//! and leases from the file store and the PostgreSQL store.

use cronsole::model::{HistoryRow, Overlap, Status};
use cronsole::store::RenewOutcome;
use cronsole::testkit::internals::store::rules;
use cronsole::testkit::store::{ClaimAt, FinishClaim, claim_row};

use super::{Factory, apply_due, claim, done, every, file, rows, t};

fn job(overlap: Overlap, every_s: u64, lease: f64) -> cronsole::model::JobDef {
    let mut d = every("j", every_s);
    d.lease_seconds = lease;
    d.overlap = overlap;
    d
}

pub fn overlap_buffer_one_runs_the_first_kept_slot_after_the_run(f: Factory) {
    let s = f();
    apply_due(
        &*s,
        &file(vec![job(Overlap::BufferOne, 10, 300.0)]),
        t(1000),
    )
    .unwrap();
    let c = claim(&*s, "a", t(1000), 10).claims.remove(0);
    // Slots 1010..1050 came while the run was live: 1010 is kept, 1020..1050 are one row.
    let out = done(&*s, &c, "a", Status::Succeeded, t(1055));
    assert_eq!(out.rows.len(), 2, "{:?}", out.rows);
    let o = &out.rows[1];
    assert_eq!(
        (o.status, o.reason.as_deref()),
        (Status::Skipped, Some("overlap"))
    );
    assert_eq!(
        (o.slot, o.slot_end, o.slots_count),
        (Some(t(1020)), Some(t(1050)), Some(4))
    );
    let rec = s.job("j").unwrap().unwrap();
    assert_eq!(rec.rt.overlap.buffered_slot, Some(t(1010)));
    assert_eq!(rec.rt.next_slot, Some(t(1060)));
    // Any owner runs the kept slot at once; the job's next slot does not move.
    let b = claim(&*s, "b", t(1055), 10).claims.remove(0);
    assert_eq!(b.slot, Some(t(1010)));
    assert_eq!(b.trigger, cronsole::model::Trigger::Schedule);
    let rec = s.job("j").unwrap().unwrap();
    assert_eq!(rec.rt.overlap.buffered_slot, None);
    assert_eq!(rec.rt.next_slot, Some(t(1060)));
    assert_eq!(done(&*s, &b, "b", Status::Succeeded, t(1056)).rows.len(), 1);
    assert!(claim(&*s, "b", t(1059), 10).claims.is_empty());
    assert_eq!(
        claim(&*s, "b", t(1060), 10).claims.remove(0).slot,
        Some(t(1060))
    );
}

/// A slot kept during the run, then pause and resume before the run ends:
/// the kept slot runs once after the run, and the slots that passed while paused record nothing.
pub fn overlap_buffer_one_keeps_its_slot_through_a_pause_during_the_run(f: Factory) {
    let s = f();
    apply_due(
        &*s,
        &file(vec![job(Overlap::BufferOne, 10, 300.0)]),
        t(1000),
    )
    .unwrap();
    let c = claim(&*s, "a", t(1000), 10).claims.remove(0);
    s.set_paused("j", true, t(1012)).unwrap();
    s.set_paused("j", false, t(1034)).unwrap();
    // 1020 and 1030 passed while paused; 1040 came after the resume with the run still live.
    let out = done(&*s, &c, "a", Status::Succeeded, t(1045));
    assert_eq!(out.rows.len(), 2, "{:?}", out.rows);
    assert_eq!(
        (
            out.rows[1].status,
            out.rows[1].slot,
            out.rows[1].slots_count
        ),
        (Status::Skipped, Some(t(1040)), Some(1))
    );
    let rec = s.job("j").unwrap().unwrap();
    assert_eq!(rec.rt.overlap.buffered_slot, Some(t(1010)));
    assert_eq!(rec.rt.overlap.before_pause, None);
    let b = claim(&*s, "b", t(1045), 10).claims.remove(0);
    assert_eq!(b.slot, Some(t(1010)));
    assert_eq!(done(&*s, &b, "b", Status::Succeeded, t(1046)).rows.len(), 1);
    assert_eq!(
        claim(&*s, "b", t(1050), 10).claims.remove(0).slot,
        Some(t(1050))
    );
    let slots: Vec<_> = rows(&*s, "j").iter().filter_map(|r| r.slot).collect();
    assert!(
        !slots.contains(&t(1020)) && !slots.contains(&t(1030)),
        "{slots:?}"
    );
}

/// `skip`, the run ends while the job is paused: the slots that fell due
/// during the run before the pause still get their overlap row, those after it none.
pub fn overlap_skip_writes_the_row_of_slots_due_before_a_pause(f: Factory) {
    let s = f();
    apply_due(&*s, &file(vec![job(Overlap::Skip, 10, 300.0)]), t(1000)).unwrap();
    let c = claim(&*s, "a", t(1000), 10).claims.remove(0);
    s.set_paused("j", true, t(1025)).unwrap();
    let out = done(&*s, &c, "a", Status::Succeeded, t(1045));
    assert_eq!(out.rows.len(), 2, "{:?}", out.rows);
    let o = &out.rows[1];
    assert_eq!(
        (o.status, o.reason.as_deref()),
        (Status::Skipped, Some("overlap"))
    );
    assert_eq!(
        (o.slot, o.slot_end, o.slots_count),
        (Some(t(1010)), Some(t(1020)), Some(2))
    );
    s.set_paused("j", false, t(1051)).unwrap();
    assert_eq!(
        claim(&*s, "b", t(1060), 10).claims.remove(0).slot,
        Some(t(1060))
    );
}

pub fn overlap_buffer_one_keeps_its_slot_when_the_owner_dies(f: Factory) {
    let s = f();
    apply_due(&*s, &file(vec![job(Overlap::BufferOne, 10, 30.0)]), t(1000)).unwrap();
    let c = claim(&*s, "a", t(1000), 10).claims.remove(0);
    // Owner "a" dies; its lease (until 1030) is recovered by "b": the slots 1010..1030 came
    // while the run was live, so 1010 is kept and run by "b" in the same claim.
    let out = claim(&*s, "b", t(1031), 10);
    let abandoned: Vec<&HistoryRow> = out
        .rows
        .iter()
        .filter(|r| r.status == Status::Abandoned)
        .collect();
    assert_eq!(abandoned.len(), 1);
    assert_eq!(abandoned[0].run_id, c.run_id);
    let skipped: Vec<&HistoryRow> = out
        .rows
        .iter()
        .filter(|r| r.status == Status::Skipped)
        .collect();
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0].slots_count, Some(2));
    assert_eq!(out.claims.len(), 1);
    assert_eq!(out.claims[0].slot, Some(t(1010)));
}

pub fn overlap_cancel_previous_supersedes_the_live_run(f: Factory) {
    let s = f();
    apply_due(
        &*s,
        &file(vec![job(Overlap::CancelPrevious, 10, 300.0)]),
        t(1000),
    )
    .unwrap();
    let c = claim(&*s, "a", t(1000), 10).claims.remove(0);
    // Another owner sees slot 1010 due: nothing is claimed, the live run is marked.
    let out = claim(&*s, "b", t(1010), 10);
    assert!(out.claims.is_empty() && out.rows.is_empty());
    let rec = s.job("j").unwrap().unwrap();
    let lease = rec.rt.lease.clone().unwrap();
    assert_eq!(lease.run_id, c.run_id);
    assert_eq!(lease.cancel_requested_at, Some(t(1010)));
    // Its owner kills it and records it like an operator's cancel; the row says why.
    let mut row = claim_row(&c, "a", Status::Failed, t(1011));
    row.reason = Some(rules::reasons::REASON_CANCELLED.to_string());
    let end = s.finish_row(&c, row);
    assert_eq!(end.rows.len(), 1, "no overlap row: {:?}", end.rows);
    assert_eq!(
        end.rows[0].reason.as_deref(),
        Some("cancelled: superseded by slot 1970-01-01T00:16:50Z")
    );
    // Then the slot runs.
    let next = claim(&*s, "b", t(1011), 10).claims.remove(0);
    assert_eq!(next.slot, Some(t(1010)));
    let h = rows(&*s, "j");
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].status, Status::Failed);
}

pub fn overlap_allow_runs_side_by_side_up_to_the_bound(f: Factory) {
    let s = f();
    let allow = Overlap::Allow {
        max_concurrent_runs: 2,
    };
    apply_due(&*s, &file(vec![job(allow, 10, 300.0)]), t(1000)).unwrap();
    let a = claim(&*s, "a", t(1000), 10).claims.remove(0);
    let b = claim(&*s, "b", t(1010), 10).claims.remove(0);
    assert_eq!(b.slot, Some(t(1010)));
    assert_ne!(a.run_id, b.run_id);
    assert_eq!(s.job("j").unwrap().unwrap().rt.live_runs(), 2);
    // At the bound, a due slot is recorded at once.
    let out = claim(&*s, "c", t(1020), 10);
    assert!(out.claims.is_empty());
    assert_eq!(out.rows.len(), 1);
    assert_eq!(out.rows[0].status, Status::Skipped);
    assert_eq!(out.rows[0].reason.as_deref(), Some("overlap"));
    assert_eq!(out.rows[0].slot, Some(t(1020)));
    // Each run has its own lease, renewed and fenced by its own run_id.
    for (run, now) in [(a.run_id, 1021), (b.run_id, 1022)] {
        assert!(matches!(
            s.renew("j", run, t(now)).unwrap(),
            RenewOutcome::Renewed { .. }
        ));
    }
    // Each run is found by its run id, the one beside the first lease too.
    for run in [a.run_id, b.run_id] {
        assert_eq!(s.job_of_run(run).unwrap().as_deref(), Some("j"));
    }
    assert_eq!(s.job_of_run(uuid::Uuid::new_v4()).unwrap(), None);
    let end = done(&*s, &a, "a", Status::Succeeded, t(1025));
    assert!(!end.stale);
    assert_eq!(end.rows.len(), 1, "no overlap row: {:?}", end.rows);
    assert_eq!(s.job_of_run(a.run_id).unwrap(), None, "a ended");
    let c = claim(&*s, "c", t(1030), 10).claims.remove(0);
    assert_eq!(c.slot, Some(t(1030)));
    for run in [b.run_id, c.run_id] {
        assert_eq!(s.job_of_run(run).unwrap().as_deref(), Some("j"));
    }
    assert!(!done(&*s, &b, "b", Status::Succeeded, t(1031)).stale);
    assert!(!done(&*s, &c, "c", Status::Succeeded, t(1032)).stale);
    let rec = s.job("j").unwrap().unwrap();
    assert_eq!(rec.rt.live_runs(), 0);
    assert_eq!(rec.rt.runs, 3);
}

pub fn overlap_allow_an_owner_death_frees_only_its_lease(f: Factory) {
    let s = f();
    let allow = Overlap::Allow {
        max_concurrent_runs: 2,
    };
    apply_due(&*s, &file(vec![job(allow, 10, 30.0)]), t(1000)).unwrap();
    let a = claim(&*s, "a", t(1000), 10).claims.remove(0);
    let b = claim(&*s, "b", t(1010), 10).claims.remove(0);
    // "b" keeps renewing; "a" died (its lease ran out at 1030).
    assert!(matches!(
        s.renew("j", b.run_id, t(1029)).unwrap(),
        RenewOutcome::Renewed { .. }
    ));
    // "b" itself still runs the job and never recovers its own leases of it...
    let own = s.claim_at(t(1031), "b", 0);
    let ab: Vec<_> = own
        .rows
        .iter()
        .filter(|r| r.status == Status::Abandoned)
        .collect();
    assert_eq!(ab.len(), 1, "a's lease is recovered: {:?}", own.rows);
    assert_eq!(ab[0].run_id, a.run_id);
    let rec = s.job("j").unwrap().unwrap();
    assert_eq!(rec.rt.live_runs(), 1);
    assert!(rec.rt.lease_of(b.run_id).is_some());
    assert!(!done(&*s, &b, "b", Status::Succeeded, t(1040)).stale);
}

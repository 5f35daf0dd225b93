//! Money between a tool loop's turns when runs compete for it: a started run's next turn
//! comes before new runs' first turns (what it keeps set aside for it), the first started run
//! to ask is served, a later turn refused while calls elsewhere are in flight may wait, and
//! what a run kept aside is never booked as spent.

use chrono::{DateTime, Utc};
use cronsole::model::{Budget, BudgetPeriod, Status};
use cronsole::store::{LoopStep, ReserveOutcome, Settlement, StepOutcome, Store};
use cronsole::testkit::store::{FinishClaim, claim_row};

use super::{Factory, apply_due, claim, every, file, rows, t};

/// One step of `run` of `job` by owner "o": settle, reserve, keep aside.
fn turn(
    s: &dyn Store,
    job: &str,
    run: uuid::Uuid,
    settle: Option<(uuid::Uuid, f64)>,
    reserve: Option<f64>,
    set_aside: Option<f64>,
    now: DateTime<Utc>,
) -> (Option<ReserveOutcome>, bool) {
    let out = s
        .loop_step(&LoopStep {
            job,
            run_id: run,
            owner: "o",
            settle: settle.map(|(id, c)| (id, Settlement::Cost(c))),
            reserve,
            set_aside,
            record: &[],
            awaiting: Default::default(),
            now,
        })
        .unwrap();
    match out {
        StepOutcome::Stepped {
            reserved, may_wait, ..
        } => (reserved, may_wait),
        StepOutcome::Lost => panic!("{job}: lease lost"),
    }
}

fn id(r: Option<ReserveOutcome>) -> uuid::Uuid {
    match r {
        Some(ReserveOutcome::Reserved { id }) => id,
        other => panic!("expected a reservation, got {other:?}"),
    }
}

fn refused(r: &Option<ReserveOutcome>) -> bool {
    matches!(r, Some(ReserveOutcome::Refused { reason }) if reason.starts_with("budget reached"))
}

/// Three jobs under a $0.010 day. `a` pays its first turn ($0.001) and keeps $0.005 aside for
/// its next one while its tools run: a new run's first turn of $0.0045 no longer fits (it
/// would have beside the $0.001 alone), while `a`'s own next turn of $0.0055 does (it uses
/// what it kept). A started run's later turn refused only because of a call in flight
/// elsewhere may wait, keeping its need aside, and fits once that call settled. Rows carry
/// the turns' real costs, never what was kept aside.
pub fn a_started_loops_next_turn_comes_before_new_runs(f: Factory) {
    let s = f();
    let mut jf = file(vec![every("a", 3600), every("b", 3600), every("c", 3600)]);
    jf.settings.budget = Some(Budget {
        max_cost_usd: 0.010,
        period: BudgetPeriod::Day,
    });
    apply_due(&*s, &jf, t(1000)).unwrap();
    let claims = claim(&*s, "o", t(1000), 3).claims;
    let of = |j: &str| claims.iter().find(|c| c.job.def.name == j).unwrap().clone();
    let (a, b, c) = (of("a"), of("b"), of("c"));
    let (r, _) = turn(&*s, "a", a.run_id, None, Some(0.004), None, t(1001));
    let a1 = id(r);
    // a's first turn answered with tool calls: settled, its next turn kept aside.
    turn(
        &*s,
        "a",
        a.run_id,
        Some((a1, 0.001)),
        None,
        Some(0.005),
        t(1002),
    );
    let (r, wait) = turn(&*s, "b", b.run_id, None, Some(0.0045), None, t(1003));
    assert!(
        refused(&r),
        "a new run's first turn took a's next turn: {r:?}"
    );
    assert!(!wait, "a run that has not started never waits");
    let (r, _) = turn(&*s, "a", a.run_id, None, Some(0.0055), None, t(1004));
    let a2 = id(r);
    // a's second turn answers with tool calls again; b's first turn now fits what is left.
    turn(
        &*s,
        "a",
        a.run_id,
        Some((a2, 0.001)),
        None,
        Some(0.002),
        t(1005),
    );
    let (r, _) = turn(&*s, "b", b.run_id, None, Some(0.004), None, t(1006));
    let b1 = id(r);
    // a's third turn ($0.005) does not fit beside b's call in flight ($0.004 of $0.010, $0.002
    // spent), but would once it ends: a may wait, and keeps what is left aside meanwhile.
    let (r, wait) = turn(&*s, "a", a.run_id, None, Some(0.005), None, t(1007));
    assert!(refused(&r), "{r:?}");
    assert!(
        wait,
        "a started run's turn refused for a call in flight may wait"
    );
    let (r, _) = turn(&*s, "c", c.run_id, None, Some(0.001), None, t(1008));
    assert!(
        refused(&r),
        "a new run took the money a waiting turn needs: {r:?}"
    );
    // b's call ends ($0.001) and b finishes; a's third turn fits now.
    s.settle("b", b1, Settlement::Cost(0.001), t(1009)).unwrap();
    let mut row = claim_row(&b, "o", Status::Succeeded, t(1010));
    row.cost_usd = 0.001;
    s.finish_row(&b, row);
    let (r, _) = turn(&*s, "a", a.run_id, None, Some(0.005), None, t(1011));
    let a3 = id(r);
    s.settle("a", a3, Settlement::Cost(0.001), t(1012)).unwrap();
    let mut row = claim_row(&a, "o", Status::Succeeded, t(1013));
    row.cost_usd = 0.003;
    s.finish_row(&a, row);
    let a_row = rows(&*s, "a")
        .into_iter()
        .find(|r| r.run_id == a.run_id)
        .unwrap();
    assert!((a_row.cost_usd - 0.003).abs() < 1e-12, "{a_row:?}");
    let spent = s.spend("a", t(1014)).unwrap();
    assert!((spent.global_usd - 0.004).abs() < 1e-12, "{spent:?}");
    for j in ["a", "b", "c"] {
        let rs = s.job(j).unwrap().unwrap().rt.counters.reservations;
        assert!(rs.is_empty(), "{j}: {rs:?}");
    }
}

/// A run that kept money aside for its next turn dies between turns: the `abandoned` row
/// recovery writes carries what its turns cost, never what it kept aside, and the money kept
/// aside is free again.
pub fn what_a_dead_loop_kept_aside_is_not_booked(f: Factory) {
    let s = f();
    let def = cronsole::model::JobDef {
        lease_seconds: 5.0,
        ..every("a", 3600)
    };
    let mut jf = file(vec![def, every("b", 3600)]);
    jf.settings.budget = Some(Budget {
        max_cost_usd: 0.010,
        period: BudgetPeriod::Day,
    });
    apply_due(&*s, &jf, t(1000)).unwrap();
    // Both claimed by one owner; `b`'s lease (30 s) outlives `a`'s (5 s).
    let claims = claim(&*s, "dead", t(1000), 2).claims;
    let of = |j: &str| claims.iter().find(|c| c.job.def.name == j).unwrap().clone();
    let (a, b) = (of("a"), of("b"));
    let (r, _) = turn(&*s, "a", a.run_id, None, Some(0.004), None, t(1001));
    let a1 = id(r);
    let kept = Some(0.006);
    turn(&*s, "a", a.run_id, Some((a1, 0.001)), None, kept, t(1002));
    // `a`'s lease (renewed at 1002 for 5 s) expires; another owner recovers the run.
    claim(&*s, "o2", t(1010), 2);
    let row = rows(&*s, "a")
        .into_iter()
        .find(|r| r.run_id == a.run_id)
        .expect("the abandoned row");
    assert_eq!(row.status, Status::Abandoned);
    assert!((row.cost_usd - 0.001).abs() < 1e-12, "{row:?}");
    let spent = s.spend("a", t(1011)).unwrap();
    assert!((spent.global_usd - 0.001).abs() < 1e-12, "{spent:?}");
    // All of the $0.009 left is free again for a new run's first turn.
    let (r, _) = turn(&*s, "b", b.run_id, None, Some(0.009), None, t(1011));
    id(r);
}

//! Crash recovery of one job: each expired lease's run ends, by the row it already wrote when its
//! owner died between that row and the record, else by an `abandoned` row, and the record takes
//! that end as it would a completion.
//!
//! Owns: [`recover_expired`]. Must not touch: I/O, locks, clocks.

use chrono::{DateTime, Utc};

use crate::model::{BudgetPeriod, HistoryRow, JobRecord};
use crate::schedule::Compiled;
use crate::store::policy::run_end::finish_run;
use crate::store::rules::rows::abandoned_row;
use crate::store::rules::runtime::recoverable_lease;

/// End every expired lease of `rec` that `owner` may recover: a run whose own row `landed`
/// holds (its owner died between that row and the record) ends by that row, which is not
/// written again; any other ends by an `abandoned` row. Returns the rows to write (each end's
/// row when it is new, then the overlap rows its end generates) and whether the record changed.
pub fn recover_expired(
    rec: &mut JobRecord,
    sched: &Compiled,
    now: DateTime<Utc>,
    owner: &str,
    period: BudgetPeriod,
    mut landed: Vec<HistoryRow>,
) -> (Vec<HistoryRow>, bool) {
    let mut rows = Vec::new();
    let mut changed = false;
    while let Some(lease) = recoverable_lease(rec, now, owner) {
        let own = landed.iter().position(|r| r.run_id == lease.run_id);
        let (mut row, already) = match own {
            Some(i) => (landed.remove(i), true),
            None => (abandoned_row(rec, &lease, owner, now), false),
        };
        let fin = finish_run(rec, sched, &mut row, None, None, period, now);
        if !already {
            rows.push(row);
        }
        rows.extend(fin.extra_rows);
        changed = true;
    }
    (rows, changed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Status, Trigger};
    use crate::store::plan::claim::evaluate;
    use crate::store::policy::budget::{ReserveRequest, Settlement, record, settle};
    use crate::store::policy::define::tests_support::job;
    use crate::store::rules::slots::compile;
    use crate::testkit::time::epoch as t;

    const P: BudgetPeriod = BudgetPeriod::Day;

    /// A run of `every 60` job `j` claimed at t(0) by "a", holding a reservation of `worst`.
    fn claimed_with(worst: f64) -> (JobRecord, Compiled, uuid::Uuid) {
        let mut r = job("j", t(0));
        let s = compile(&r).unwrap();
        let c = evaluate(&mut r, &s, t(0), "a", true, P).claim.unwrap();
        let req = ReserveRequest {
            job: "j",
            run_id: c.run_id,
            owner: "a",
            usd: worst,
            now: t(0),
        };
        let id = record(&mut r, &req, P.key(t(0)));
        // The call ends below its worst case: settled to its real cost before anyone recovers.
        assert!(settle(&mut r, id, Settlement::Cost(0.02)));
        (r, s, c.run_id)
    }

    /// The `abandoned` row another owner's recovery wrote while the call was still in flight
    /// (carrying its worst case), before that recovery's record write failed.
    fn landed_abandoned(run: uuid::Uuid, cost: f64) -> HistoryRow {
        let mut row = HistoryRow::new(
            "j",
            Status::Abandoned,
            Trigger::Schedule,
            Some(t(0)),
            "b",
            t(40),
        );
        row.run_id = run;
        row.cost_usd = cost;
        row
    }

    /// A recovery finished from an `abandoned` row already in history books what that row
    /// shows (the worst case its reservation carried when it was written), not the smaller
    /// amount the reservation was settled to since: otherwise the counters allow a call the
    /// recorded spend then pushes past the budget (seeds 2000945, 2002290, 2007026).
    #[test]
    fn a_landed_abandoned_row_books_what_it_shows() {
        let (mut r, s, run) = claimed_with(0.3);
        let landed = vec![landed_abandoned(run, 0.3)];
        let (rows, changed) = recover_expired(&mut r, &s, t(50), "c", P, landed);
        assert!(changed);
        assert!(
            rows.iter().all(|x| x.run_id != run),
            "the landed row is not written again"
        );
        let c = &r.rt.counters;
        assert!((c.period_cost_usd - 0.3).abs() < 1e-12, "{c:?}");
        assert!((c.total_cost_usd - 0.3).abs() < 1e-12, "{c:?}");
        assert!(
            c.reservations.is_empty(),
            "the row carried the run's reservation"
        );
        let a = r.rt.abandoned.last().unwrap();
        assert_eq!(a.run_id, run);
        assert!(
            (a.cost_usd - 0.3).abs() < 1e-12,
            "a late end unbooks what was booked"
        );
    }

    /// Without a landed row the `abandoned` row is new and carries what the reservations carry
    /// now (the settled call at its real cost); a landed row showing less than that (a call
    /// reserved after it was written) books the reservations: never less than either.
    #[test]
    fn a_new_abandoned_row_carries_the_reservations_and_never_less() {
        let (mut r, s, run) = claimed_with(0.3);
        let (rows, _) = recover_expired(&mut r, &s, t(50), "c", P, Vec::new());
        let row = rows.iter().find(|x| x.run_id == run).unwrap();
        assert_eq!(row.status, Status::Abandoned);
        assert!((row.cost_usd - 0.02).abs() < 1e-12);
        assert!((r.rt.counters.period_cost_usd - 0.02).abs() < 1e-12);

        let (mut r, s, run) = claimed_with(0.3);
        let (_, _) = recover_expired(&mut r, &s, t(50), "c", P, vec![landed_abandoned(run, 0.0)]);
        assert!((r.rt.counters.period_cost_usd - 0.02).abs() < 1e-12);
    }
}

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

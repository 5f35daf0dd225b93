//! A run's completion, fenced by its run id: the end of the run that holds the lease, a stale
//! completion (the lease was taken over), the late end of a run recorded `abandoned`, and a
//! retried completion whose row already landed.
//!
//! Owns: [`complete_step`], [`complete_landed`]. Must not touch: I/O, locks, clocks.

use crate::model::{BudgetPeriod, HistoryRow, JobRecord, Status};
use crate::schedule::Compiled;
use crate::store::policy::counters::count_row;
use crate::store::policy::run_end::{finish_run, supersede_abandoned};
use crate::store::rules::runtime::{holds, take_abandoned};
use crate::store::rules::slots::compile;
use crate::store::{CompleteOutcome, Completion, StoreError, StoreResult};

/// A run's end, fenced by `run_id`. A stale completion (lease taken over) keeps its
/// row with `stale_lease: true` and adds its cost to the counters, touching nothing else —
/// unless the run was recorded `abandoned`: then its row supersedes that one
/// (`supersede_abandoned`). `sched` is the job's compiled schedule when the caller has it
/// cached.
pub fn complete_step(
    rec: &mut JobRecord,
    sched: Option<&Compiled>,
    c: Completion,
    period: BudgetPeriod,
) -> StoreResult<CompleteOutcome> {
    let mut row = c.row;
    row.run_id = c.run_id;
    let mut out = CompleteOutcome::default();
    if !holds(rec, c.run_id) {
        row.stale_lease = true;
        match take_abandoned(rec, c.run_id).filter(|_| row.status != Status::Abandoned) {
            Some(a) => {
                let fin =
                    supersede_abandoned(rec, &a, &mut row, c.state, c.hold_until, period, c.now);
                out.state_rejected = fin.state_rejected;
            }
            None => count_row(rec, &row, period, c.now),
        }
        out.stale = true;
        out.rows.push(row);
        return Ok(out);
    }
    let compiled;
    let sched = match sched {
        Some(s) => s,
        None => {
            compiled = compile(rec).map_err(StoreError::bad_def(&c.job))?;
            &compiled
        }
    };
    let fin = finish_run(rec, sched, &mut row, c.state, c.hold_until, period, c.now);
    out.state_rejected = fin.state_rejected;
    out.rows.push(row);
    out.rows.extend(fin.extra_rows);
    Ok(out)
}

/// A retried completion whose row is already in history (an earlier attempt wrote the row, then
/// failed before or while writing the job record). Holding the lease: the run is finished from
/// the landed row, so the record matches history. Not holding it: the earlier attempt's record
/// update landed too (or recovery finished the run from that row): nothing changes — unless
/// the landed row superseded an `abandoned` one the record still lists (the earlier attempt's
/// record never landed): then the record catches up with it. The
/// outcome's rows are the landed row and any overlap rows; the store must not append rows that
/// are already there (see [`same_row`](crate::store::rules::rows::same_row)).
pub fn complete_landed(
    rec: &mut JobRecord,
    sched: Option<&Compiled>,
    c: Completion,
    mut landed: HistoryRow,
    period: BudgetPeriod,
) -> StoreResult<CompleteOutcome> {
    let mut out = CompleteOutcome::default();
    if !holds(rec, c.run_id) {
        if landed.supersedes_abandoned
            && landed.stale_lease
            && let Some(a) = take_abandoned(rec, c.run_id)
        {
            let fin =
                supersede_abandoned(rec, &a, &mut landed, c.state, c.hold_until, period, c.now);
            out.state_rejected = fin.state_rejected;
        }
        out.stale = landed.stale_lease;
        out.rows.push(landed);
        return Ok(out);
    }
    let compiled;
    let sched = match sched {
        Some(s) => s,
        None => {
            compiled = compile(rec).map_err(StoreError::bad_def(&c.job))?;
            &compiled
        }
    };
    let fin = finish_run(
        rec,
        sched,
        &mut landed,
        c.state,
        c.hold_until,
        period,
        c.now,
    );
    out.state_rejected = fin.state_rejected;
    out.rows.push(landed);
    out.rows.extend(fin.extra_rows);
    Ok(out)
}

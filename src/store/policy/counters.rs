//! The counters a job's history rows are booked into (runs by status, per hour, runtime, money
//! in the budget period), so statistics and budgets never scan history.
//!
//! Owns: [`count_row`] and its inverse for a row that is hidden (`uncount`).
//! Must not touch: storage; which rows are written (the policies and plans decide).
//!
//! Decisions:
//! - Money reserved in an earlier period is booked there (it fitted that period's budget),
//!   never into the current one, whose budget may already be full (midnight rollover).

use chrono::{DateTime, Utc};

use crate::model::{BudgetPeriod, HistoryRow, JobRecord, Status};
use crate::store::policy::budget::absorb_settled;
use crate::store::rules::period::counter_spend;

/// Add one history row to the job's counters (every row counts by status; cost by period).
pub fn count_row(rec: &mut JobRecord, row: &HistoryRow, period: BudgetPeriod, now: DateTime<Utc>) {
    let key = period.key(now);
    // Money reserved in an earlier period is booked there (it fitted that period's budget),
    // never into the current one, whose budget may already be full (midnight rollover).
    let elsewhere = absorb_settled(rec, row, &key);
    let c = &mut rec.rt.counters;
    // A new period starts from what the old counters say was spent inside it: 0 for an older
    // period of the same kind, carried over after an edit of the budget's `period`.
    let carried = counter_spend(c, &key);
    *c.by_status.entry(row.status).or_insert(0) += 1;
    let cost = if row.cost_usd.is_finite() && row.cost_usd > 0.0 {
        row.cost_usd
    } else {
        0.0
    };
    c.total_cost_usd += cost;
    c.runtime_ms = c.runtime_ms.saturating_add(row.duration_ms);
    if c.period_key != key {
        c.period_key = key;
        c.period_cost_usd = carried;
    }
    c.period_cost_usd += (cost - elsewhere).max(0.0);
    if row.unpriced {
        c.cost_incomplete = true;
    }
    c.count_hour(row.status, cost, now);
}

/// Take one row of `status` recorded at `at` back out of the counters (its row is hidden).
pub(crate) fn uncount(c: &mut crate::model::JobCounters, status: Status, at: DateTime<Utc>) {
    if let Some(n) = c.by_status.get_mut(&status) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            c.by_status.remove(&status);
        }
    }
    let hour = at.timestamp().div_euclid(3600);
    let idx = Status::ALL.iter().position(|s| *s == status).unwrap_or(0);
    if let Some(b) = c.hours.iter_mut().find(|b| b.hour == hour) {
        b.counts[idx] = b.counts[idx].saturating_sub(1);
    }
}

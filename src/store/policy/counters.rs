//! The counters a job's history rows are booked into (runs by status, per hour, runtime, money
//! in the budget period), so statistics and budgets never scan history.
//!
//! Owns: [`count_row`] and its inverses for a row that is hidden (`uncount`, and `unbook` for
//! the money of an `abandoned` row a late end replaces).
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
/// The row of a run cut short (`abandoned`, cancelled: `budget::carries_every_reservation`) is
/// given the cost of its run's reservations first (the budget rule, `absorb_settled`), or the
/// cost it already shows when that is more: the row shows the money its budget counts. Returns
/// the amount booked into the current period (`counters.period_key`).
pub fn count_row(
    rec: &mut JobRecord,
    row: &mut HistoryRow,
    period: BudgetPeriod,
    now: DateTime<Utc>,
) -> f64 {
    let key = period.key(now);
    // Money reserved in an earlier period is booked there (it fitted that period's budget),
    // never into the current one, whose budget may already be full (midnight rollover).
    let absorbed = absorb_settled(rec, row, &key);
    if super::budget::carries_every_reservation(row) {
        // A row already in history (a recovery whose record write failed after its row landed,
        // finished from that row later) keeps what it shows, which is what its reservations
        // carried when it was written. They may carry less now (a call settled since, below
        // its worst case): the counters still book what the row shows, so history never
        // shows more money than the budget counted. A new row carries its reservations.
        let shown = if row.cost_usd.is_finite() && row.cost_usd > 0.0 {
            row.cost_usd
        } else {
            0.0
        };
        row.cost_usd = shown.max(absorbed.carried);
    }
    let elsewhere = absorbed.elsewhere;
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
    let booked = (cost - elsewhere).max(0.0);
    c.period_cost_usd += booked;
    if row.unpriced {
        c.cost_incomplete = true;
    }
    c.count_hour(row.status, cost, now);
    booked
}

/// Take the money of an `abandoned` row back out of the counters: a late end of its run
/// replaces it with the real cost (which `count_row` then books).
pub(crate) fn unbook(c: &mut crate::model::JobCounters, a: &crate::model::AbandonedRun) {
    let sane = |x: f64| if x.is_finite() && x > 0.0 { x } else { 0.0 };
    let (cost, in_period) = (sane(a.cost_usd), sane(a.period_usd));
    if cost == 0.0 {
        return;
    }
    c.total_cost_usd = (c.total_cost_usd - cost).max(0.0);
    if c.period_key == a.period_key {
        c.period_cost_usd = (c.period_cost_usd - in_period).max(0.0);
    }
    let hour = a.at.timestamp().div_euclid(3600);
    if let Some(b) = c.hours.iter_mut().find(|b| b.hour == hour) {
        b.cost_usd = (b.cost_usd - cost).max(0.0);
    }
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

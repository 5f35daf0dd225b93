//! Money: budget periods and their UTC keys, prices, the per-job counters that make stats free of
//! history scans, and the reservations a model call holds while it is in flight.
//!
//! Owns: the period key rule and the sliding 24-hour buckets. Must not touch: the decision
//! whether a call may spend (the store's budget policy owns it).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::Status;

/// Budget period with UTC boundaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum BudgetPeriod {
    /// Each UTC day.
    #[default]
    Day,
    /// Each ISO week (Monday to Sunday, UTC).
    Week,
    /// Each calendar month (UTC).
    Month,
    /// Never resets.
    Total,
}

impl BudgetPeriod {
    /// Key of the UTC period containing `now`, e.g. `day:2026-11-29`, `week:2026-W48`,
    /// `month:2026-11`, `total`. Spend recorded under another key belongs to an older period.
    pub fn key(self, now: DateTime<Utc>) -> String {
        use chrono::Datelike;
        match self {
            BudgetPeriod::Day => format!("day:{}", now.format("%Y-%m-%d")),
            BudgetPeriod::Week => {
                let w = now.iso_week();
                format!("week:{}-W{:02}", w.year(), w.week())
            }
            BudgetPeriod::Month => format!("month:{}", now.format("%Y-%m")),
            BudgetPeriod::Total => "total".to_string(),
        }
    }
}

/// The global spend cap (`budget:` in the jobs file).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Budget {
    /// Most USD spent over one period by every job together.
    pub max_cost_usd: f64,
    /// The period the cap counts over.
    pub period: BudgetPeriod,
}

/// USD per 1M tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Price {
    /// USD per 1M prompt tokens.
    pub input: f64,
    /// USD per 1M reply tokens.
    pub output: f64,
    /// USD per 1M prompt tokens served from OpenAI's prompt cache (`cached_tokens`, a part of
    /// the prompt tokens). `None`: the input price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input: Option<f64>,
    /// USD per 1M tokens read from Anthropic's prompt cache (`cache_read_input_tokens`, on top
    /// of the input tokens). `None`: the input price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<f64>,
    /// USD per 1M tokens written to Anthropic's prompt cache (`cache_creation_input_tokens`, on
    /// top of the input tokens). `None`: 1.25 × the input price (the provider's write surcharge).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
}

impl Price {
    /// An input and output price with no cache prices (each falls back as its field says).
    pub const fn new(input: f64, output: f64) -> Price {
        Price {
            input,
            output,
            cached_input: None,
            cache_read: None,
            cache_write: None,
        }
    }
}

/// [`JobCounters::executions`] of a `by_status` map.
pub(crate) fn executions_of(by_status: &BTreeMap<Status, u64>) -> u64 {
    [
        Status::Succeeded,
        Status::NoChange,
        Status::Failed,
        Status::Abandoned,
    ]
    .iter()
    .map(|s| by_status.get(s).copied().unwrap_or(0))
    .fold(0, u64::saturating_add)
}

/// Counters kept per job so stats never need a history scan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct JobCounters {
    /// Rows per status since the job was created.
    pub by_status: BTreeMap<Status, u64>,
    /// What every run cost together (USD).
    pub total_cost_usd: f64,
    /// Sum of the runs' durations (ms).
    pub runtime_ms: u64,
    /// Key of the budget period `period_cost_usd` belongs to (e.g. "day:2026-11-29").
    pub period_key: String,
    /// What the job spent in period `period_key` (USD), checked against `max_cost_usd`.
    pub period_cost_usd: f64,
    /// Some spend of this job is unknown (unpriced model or missing usage).
    pub cost_incomplete: bool,
    /// Activity per UTC hour over the last 24 h, in the order first written (oldest first,
    /// unless a clock was set back after writing hours ahead): the console's 24 h status
    /// counts and spend-per-hour sparkline come from these, never from a history scan.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hours: Vec<HourBucket>,
    /// Budget reservations of model calls in flight or of unknown outcome (`store::budget`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reservations: Vec<Reservation>,
}

/// Money set aside for one model call before it is made (hard budget): counted as
/// spent by every owner until it is settled to the real cost or released.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reservation {
    /// The reservation's id: settle or release name it.
    pub id: Uuid,
    /// The run that made the call: its completion turns a settled reservation into counters.
    pub run_id: Uuid,
    /// The owner that made the call.
    pub owner: String,
    /// Budget period key the amount counts in (`BudgetPeriod::key`).
    pub period_key: String,
    /// The amount set aside: the call's worst case until it is settled.
    pub usd: f64,
    /// `Reserved` until the call ended; `Settled` = real cost known, not yet in the counters;
    /// `Spent` = the call may have cost its worst case and nobody can know (kept as spent).
    pub state: ReservationState,
    /// When the reservation was made.
    pub at: DateTime<Utc>,
    /// Money a started tool loop keeps for its next turn while its tools run (never spent:
    /// only that run's next turn may use it, and its row never carries it). Counted as held
    /// by every other budget decision and view, so a new run's first turn cannot take it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub next_turn: bool,
}

/// See [`Reservation::state`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReservationState {
    /// The call is in flight (or its owner died mid-call): its worst case counts as spent.
    Reserved,
    /// The call ended and its real cost replaced the worst case; not yet in the job's counters.
    Settled,
    /// The call's outcome cannot be known (a timeout mid-request, an unreadable reply): the
    /// worst case stays spent.
    Spent,
}

/// One UTC hour of a job's rows (see [`JobCounters::hours`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HourBucket {
    /// Unix time / 3600.
    #[serde(rename = "h")]
    pub hour: i64,
    /// Rows per status, in [`Status::ALL`] order.
    #[serde(rename = "n")]
    pub counts: [u32; 6],
    /// What the hour's rows cost (USD). Written as every JSON money amount is
    /// (`text::json_usd`): a counter an older release summed without rounding prints without
    /// its binary noise, here and in `jobs --json`/`describe --json`.
    #[serde(rename = "c", serialize_with = "json_money")]
    pub cost_usd: f64,
}

/// Serialise an amount of money by the one JSON money rule (`text::json_usd`), for members
/// whose names do not say they are money (the hour buckets' one-letter `c`).
fn json_money<S: serde::Serializer>(usd: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(crate::text::json_usd(*usd))
}

impl JobCounters {
    /// Hours kept in [`JobCounters::hours`]: this one and the 24 before it.
    pub(crate) const HOURS_KEPT: i64 = 25;

    /// Every execution: the rows where the job's action really ran or its monitor looked
    /// (succeeded, no_change, failed), or started and never ended (abandoned: its owner died or
    /// stopped mid-run), whatever the trigger. The one run count every surface
    /// shows as RUNS (`max_runs` counts scheduled runs apart, in
    /// [`crate::model::JobRuntime::runs`]).
    pub fn executions(&self) -> u64 {
        executions_of(&self.by_status)
    }

    /// Count one row recorded at `now` into its hour, dropping hours that fell out of the window.
    pub(crate) fn count_hour(&mut self, status: Status, cost_usd: f64, now: DateTime<Utc>) {
        let hour = now.timestamp().div_euclid(3600);
        self.hours.retain(|b| b.hour > hour - Self::HOURS_KEPT);
        let idx = Status::ALL.iter().position(|s| *s == status).unwrap_or(0);
        // Not only the last bucket: after a clock was set back, the last one may be dated ahead.
        match self.hours.iter_mut().rev().find(|b| b.hour == hour) {
            Some(b) => {
                b.counts[idx] = b.counts[idx].saturating_add(1);
                // Kept to JSON's money decimals: `jobs --json` shows the buckets as stored.
                b.cost_usd = crate::text::json_usd(b.cost_usd + cost_usd);
            }
            None => {
                let mut counts = [0u32; 6];
                counts[idx] = 1;
                self.hours.push(HourBucket {
                    hour,
                    counts,
                    cost_usd: crate::text::json_usd(cost_usd),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::DateTime;

    use super::*;

    #[test]
    fn budget_period_keys_use_utc_boundaries() {
        let t = DateTime::parse_from_rfc3339("2026-11-29T23:59:59-02:00")
            .unwrap()
            .to_utc();
        assert_eq!(BudgetPeriod::Day.key(t), "day:2026-11-30");
        assert_eq!(BudgetPeriod::Week.key(t), "week:2026-W49");
        assert_eq!(BudgetPeriod::Month.key(t), "month:2026-11");
        assert_eq!(BudgetPeriod::Total.key(t), "total");
    }

    #[test]
    fn hour_buckets_keep_a_sliding_day() {
        let t0 = DateTime::parse_from_rfc3339("2026-01-01T00:10:00Z")
            .unwrap()
            .to_utc();
        let mut c = JobCounters::default();
        c.count_hour(Status::Succeeded, 0.5, t0);
        c.count_hour(Status::Failed, 0.0, t0 + chrono::Duration::minutes(20));
        assert_eq!(c.hours.len(), 1);
        assert_eq!(c.hours[0].counts, [1, 1, 0, 0, 0, 0]);
        c.count_hour(Status::Missed, 0.25, t0 + chrono::Duration::hours(3));
        assert_eq!(c.hours.len(), 2);
        // A day later the first hour has slid out of the window.
        c.count_hour(Status::NoChange, 0.0, t0 + chrono::Duration::hours(25));
        assert_eq!(
            c.hours
                .iter()
                .map(|b| b.counts.iter().sum::<u32>())
                .sum::<u32>(),
            2
        );
        assert!((c.hours.iter().map(|b| b.cost_usd).sum::<f64>() - 0.25).abs() < 1e-12);
    }

    /// The decided limit: buckets are pruned by the writer's clock, so a row written on a clock
    /// stepped more than a day ahead drops the hours before the step (the 24 h counts lose
    /// them; `by_status` and the spend counters, which `stats` reads, keep every row). A step
    /// ahead of less than a day keeps them. Bucket costs carry no binary noise.
    #[test]
    fn a_row_written_on_a_clock_stepped_more_than_a_day_ahead_prunes_the_hours_before_it() {
        let t0 = DateTime::parse_from_rfc3339("2026-01-01T10:10:00Z")
            .unwrap()
            .to_utc();
        let mut c = JobCounters::default();
        for h in 0..6 {
            c.count_hour(Status::Succeeded, 0.1, t0 + chrono::Duration::hours(h));
        }
        assert_eq!(c.hours.len(), 6);
        assert!((c.hours.iter().map(|b| b.cost_usd).sum::<f64>() - 0.6).abs() < 1e-12);
        let mut under_a_day = c.clone();
        under_a_day.count_hour(Status::Succeeded, 0.1, t0 + chrono::Duration::hours(20));
        assert_eq!(under_a_day.hours.len(), 7);
        c.count_hour(Status::Succeeded, 0.1, t0 + chrono::Duration::days(2));
        assert_eq!(c.hours.len(), 1, "the six hours before the step are pruned");
        assert!((c.hours[0].cost_usd - 0.1).abs() < 1e-12);
        let mut noisy = JobCounters::default();
        noisy.count_hour(Status::Succeeded, 0.1, t0);
        noisy.count_hour(Status::Succeeded, 0.2, t0);
        assert_eq!(noisy.hours[0].cost_usd, 0.3);
    }
}

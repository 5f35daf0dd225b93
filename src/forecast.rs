//! The spend forecast (issue 12 item 6): when the budget period's limit will be reached, and per
//! job the projected spend for the rest of the period — from the slots each job has left in the
//! period × its recent mean cost per run (monitors weighted by their recent change rate), not a
//! straight line through the spend so far.
//!
//! Owns: the projection, pure over job records (`now` comes from the caller). Must not touch: the
//! store, the clock, the UI. The console computes it when a snapshot is built (on change), not
//! per frame; `cronsole stats` prints it.
//!
//! Decisions where the issue is silent:
//! - "Recent" is the last 24 h of the job's hour buckets; a job with no run in 24 h uses its
//!   all-time mean (total cost / executions); a job that never ran projects $0.
//! - A monitor's cost per *changed* run (succeeded/failed rows) is weighted by its change rate
//!   over the same window (changed / (changed + no_change)).
//! - Paused and retired jobs have no slots left; `until` and the `max_runs` left bound a job's
//!   slots; a job's projection stops at its own `max_cost_usd` (its runs skip the model after).
//! - The `total` period has no end: the forecast looks [`TOTAL_HORIZON_DAYS`] days ahead.
//! - Slots counted per job are capped at [`SLOT_CAP`] (an `every 1s` job for a month is
//!   2.6 M slots; past the cap the projection is a lower bound and says so).

use chrono::{DateTime, Datelike, Duration, NaiveDate, Utc};
use serde::Serialize;

use crate::model::{BudgetPeriod, Gate, JobRecord, Settings, Status};
use crate::store::logic::{compile, counter_period};
use crate::store::stats::period_spend;

/// How far the `total` period's forecast looks ahead.
pub const TOTAL_HORIZON_DAYS: i64 = 30;
/// Most slots counted per job.
pub const SLOT_CAP: usize = 20_000;

/// One job's projection for the rest of the period.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobForecast {
    pub job: String,
    pub slots_left: u64,
    /// Mean cost of one run over the recent window (already weighted for monitors).
    pub cost_per_run_usd: f64,
    /// Spend still to come this period.
    pub projected_usd: f64,
    /// More slots than [`SLOT_CAP`]: the projection is a lower bound.
    pub capped: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Forecast {
    /// The end of the budget period (or of the horizon for `total`).
    pub until: DateTime<Utc>,
    pub spent_usd: f64,
    /// The global budget's limit, `None` without a budget.
    pub limit_usd: Option<f64>,
    /// Spent so far + projected for every job.
    pub projected_total_usd: f64,
    /// When the limit will be reached at this pace; `None` = not this period (or no budget).
    pub limit_reached_at: Option<DateTime<Utc>>,
    /// Jobs that will spend something, biggest first.
    pub jobs: Vec<JobForecast>,
}

impl Forecast {
    /// A short phrase for the console header and `stats`.
    pub fn phrase(&self, now: DateTime<Utc>) -> String {
        match (self.limit_usd, self.limit_reached_at) {
            (None, _) => format!("projected ${:.2} this period", self.projected_total_usd),
            (Some(_), None) => "limit not reached this period".to_string(),
            (Some(_), Some(t)) if t <= now => "limit reached".to_string(),
            (Some(_), Some(t)) => format!(
                "limit at {} (in {})",
                t.format("%m-%d %H:%M UTC"),
                crate::when::span(t - now)
            ),
        }
    }
}

/// The end of the UTC budget period containing `now` (the horizon for `total`).
pub fn period_end(period: BudgetPeriod, now: DateTime<Utc>) -> DateTime<Utc> {
    let midnight = |d: NaiveDate| d.and_hms_opt(0, 0, 0).map(|t| t.and_utc());
    let today = now.date_naive();
    let end = match period {
        BudgetPeriod::Day => today.succ_opt().and_then(midnight),
        BudgetPeriod::Week => {
            let days = 7 - i64::from(today.weekday().num_days_from_monday());
            midnight(today + Duration::days(days))
        }
        BudgetPeriod::Month => {
            let (y, m) = if today.month() == 12 {
                (today.year() + 1, 1)
            } else {
                (today.year(), today.month() + 1)
            };
            NaiveDate::from_ymd_opt(y, m, 1).and_then(midnight)
        }
        BudgetPeriod::Total => Some(now + Duration::days(TOTAL_HORIZON_DAYS)),
    };
    end.unwrap_or(now + Duration::days(1))
}

/// (cost, changed runs, all runs) over the last 24 h of hour buckets.
fn recent(rec: &JobRecord, now: DateTime<Utc>) -> (f64, u64, u64) {
    let this_hour = now.timestamp().div_euclid(3600);
    let idx = |s: Status| Status::ALL.iter().position(|x| *x == s).unwrap_or(0);
    let (mut cost, mut changed, mut all) = (0.0, 0u64, 0u64);
    for b in &rec.rt.counters.hours {
        if !(0..24).contains(&(this_hour - b.hour)) {
            continue;
        }
        let n = |s: Status| u64::from(b.counts[idx(s)]);
        cost += b.cost_usd;
        changed += n(Status::Succeeded) + n(Status::Failed);
        all += n(Status::Succeeded) + n(Status::Failed) + n(Status::NoChange);
    }
    (cost, changed, all)
}

/// Mean cost of one future run of `rec`.
fn cost_per_run(rec: &JobRecord, now: DateTime<Utc>) -> f64 {
    let (mut cost, mut changed, mut all) = recent(rec, now);
    if all == 0 {
        let by = &rec.rt.counters.by_status;
        let n = |s: Status| by.get(&s).copied().unwrap_or(0);
        cost = rec.rt.counters.total_cost_usd;
        changed = n(Status::Succeeded) + n(Status::Failed);
        all = changed + n(Status::NoChange);
    }
    if all == 0 || !cost.is_finite() {
        return 0.0;
    }
    let monitor = matches!(rec.def.gate, Some(Gate::Monitor { .. }));
    if monitor {
        if changed == 0 {
            return 0.0;
        }
        let per_change = cost / changed as f64;
        let rate = changed as f64 / all as f64;
        per_change * rate
    } else {
        cost / all as f64
    }
}

/// The slots `rec` will still fire in `(now, until]`, at most [`SLOT_CAP`] (+ whether capped).
fn slots_left(
    rec: &JobRecord,
    now: DateTime<Utc>,
    until: DateTime<Utc>,
) -> (Vec<DateTime<Utc>>, bool) {
    let rt = &rec.rt;
    if rt.retired || rt.paused || !rec.def.enabled {
        return (Vec::new(), false);
    }
    let Ok(sched) = compile(rec) else {
        return (Vec::new(), false);
    };
    let runs_left = rec.def.max_runs.map_or(usize::MAX, |m| {
        usize::try_from(m.saturating_sub(rt.runs)).unwrap_or(usize::MAX)
    });
    let mut out = Vec::new();
    let mut t = rt.next_slot;
    // The period ends at `until` (exclusive: its first instant belongs to the next period);
    // the job's own `until` is inclusive.
    while let Some(s) = t.filter(|s| *s < until && rec.def.until.is_none_or(|u| *s <= u)) {
        if out.len() >= runs_left {
            return (out, false);
        }
        if out.len() >= SLOT_CAP {
            return (out, true);
        }
        // An overdue slot fires at once (coalesced): it counts as one run now.
        out.push(s.max(now));
        t = sched.next_after(s.max(now));
    }
    (out, false)
}

/// The forecast at `now`.
pub fn compute(jobs: &[JobRecord], settings: &Settings, now: DateTime<Utc>) -> Forecast {
    let period = counter_period(settings);
    let until = period_end(period, now);
    let spent = crate::cost::sum_usd(jobs.iter().map(|j| period_spend(j, settings, now)));
    let mut events: Vec<(DateTime<Utc>, f64)> = Vec::new();
    let mut lines = Vec::new();
    for rec in jobs {
        let per = cost_per_run(rec, now);
        if per <= 0.0 {
            continue;
        }
        let (slots, capped) = slots_left(rec, now, until);
        if slots.is_empty() {
            continue;
        }
        // The job's own limit stops its spending.
        let room = rec.def.max_cost_usd.map_or(f64::INFINITY, |m| {
            (m - period_spend(rec, settings, now)).max(0.0)
        });
        let mut projected = 0.0;
        for s in &slots {
            if projected + per > room + 1e-12 {
                break;
            }
            projected += per;
            events.push((*s, per));
        }
        lines.push(JobForecast {
            job: rec.def.name.clone(),
            slots_left: slots.len() as u64,
            cost_per_run_usd: per,
            projected_usd: projected,
            capped,
        });
    }
    lines.sort_by(|a, b| b.projected_usd.total_cmp(&a.projected_usd));
    let limit = settings.budget.map(|b| b.max_cost_usd);
    let projected_total = spent + lines.iter().map(|l| l.projected_usd).sum::<f64>();
    let limit_reached_at = limit.and_then(|l| {
        if spent >= l {
            return Some(now);
        }
        events.sort_by_key(|e| e.0);
        let mut cum = spent;
        events.iter().find_map(|(t, c)| {
            cum += c;
            (cum >= l - 1e-9).then_some(*t)
        })
    });
    Forecast {
        until,
        spent_usd: spent,
        limit_usd: limit,
        projected_total_usd: projected_total,
        limit_reached_at,
        jobs: lines,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Budget, HistoryRow, MonitorSource, Trigger};
    use crate::store::logic::{count_row, tests_support::job};

    use crate::testkit::time::rfc3339 as t;

    fn spent(rec: &mut JobRecord, status: Status, cost: f64, at: DateTime<Utc>) {
        let mut row = HistoryRow::new(&rec.def.name, status, Trigger::Schedule, None, "o", at);
        row.cost_usd = cost;
        count_row(rec, &row, BudgetPeriod::Day, at);
    }

    fn settings(limit: f64) -> Settings {
        Settings {
            budget: Some(Budget {
                max_cost_usd: limit,
                period: BudgetPeriod::Day,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn period_ends_are_utc_boundaries() {
        let now = t("2026-11-25T13:00:00Z"); // a Wednesday
        assert_eq!(
            period_end(BudgetPeriod::Day, now),
            t("2026-11-26T00:00:00Z")
        );
        assert_eq!(
            period_end(BudgetPeriod::Week, now),
            t("2026-11-30T00:00:00Z")
        );
        assert_eq!(
            period_end(BudgetPeriod::Month, now),
            t("2026-12-01T00:00:00Z")
        );
        assert_eq!(
            period_end(BudgetPeriod::Month, t("2026-12-31T23:00:00Z")),
            t("2027-01-01T00:00:00Z")
        );
    }

    #[test]
    fn slots_left_times_recent_mean_cost_finds_when_the_limit_is_reached() {
        // `every 60s` from 22:00; two runs at $0.10 each by 22:01; limit $1 a day.
        let t0 = t("2026-11-25T22:00:00Z");
        let mut rec = job("a", t0);
        spent(&mut rec, Status::Succeeded, 0.1, t0);
        spent(&mut rec, Status::Succeeded, 0.1, t0 + Duration::seconds(60));
        rec.rt.next_slot = Some(t0 + Duration::seconds(120));
        let now = t0 + Duration::seconds(61);
        let f = compute(std::slice::from_ref(&rec), &settings(1.0), now);
        assert!((f.spent_usd - 0.2).abs() < 1e-9);
        // 118 slots left before midnight at $0.10 each.
        assert_eq!(f.jobs[0].slots_left, 118);
        assert!((f.jobs[0].cost_per_run_usd - 0.1).abs() < 1e-9);
        // $0.80 left = 8 more runs: the 8th is at 22:02 + 7 min.
        assert_eq!(f.limit_reached_at, Some(t("2026-11-25T22:09:00Z")));
        assert!(
            f.phrase(now).starts_with("limit at 11-25 22:09 UTC"),
            "{}",
            f.phrase(now)
        );
        // A generous limit is not reached this period.
        let f = compute(std::slice::from_ref(&rec), &settings(100.0), now);
        assert_eq!(f.limit_reached_at, None);
        assert_eq!(f.phrase(now), "limit not reached this period");
        // Paused: nothing more to spend.
        rec.rt.paused = true;
        let f = compute(std::slice::from_ref(&rec), &settings(1.0), now);
        assert!(f.jobs.is_empty() && f.limit_reached_at.is_none());
    }

    #[test]
    fn a_monitor_is_weighted_by_its_change_rate() {
        let t0 = t("2026-11-25T22:00:00Z");
        let mut rec = job("m", t0);
        rec.def.gate = Some(Gate::Monitor {
            source: MonitorSource::Command {
                command: "true".into(),
            },
        });
        // One change at $0.40 in four runs: $0.10 a run.
        spent(&mut rec, Status::Succeeded, 0.4, t0);
        for _ in 0..3 {
            spent(&mut rec, Status::NoChange, 0.0, t0);
        }
        let per = cost_per_run(&rec, t0 + Duration::seconds(1));
        assert!((per - 0.1).abs() < 1e-9, "{per}");
    }
}

//! Run and spend statistics computed from the per-job counters the store keeps, so neither
//! `cronsole stats` nor the console ever scans history.
//!
//! Owns: the stats arithmetic and its JSON shape. Must not touch: I/O, the store itself.
//!
//! Decisions: `total_executions` counts rows where the job actually ran (succeeded, failed,
//! no_change) or started and never ended (abandoned): the RUNS every surface shows; `skipped`
//! and `missed` are reported in `counts` only. `success_rate` = (succeeded + no_change) /
//! total_executions × 100 (0 when nothing ran), so an abandoned run counts against it. `period_cost_usd`
//! is the spend in the current UTC budget period; `in_flight_usd` the money the budget holds
//! for calls in flight (or of unknown outcome) in it, and `remaining_budget` = limit − spent −
//! in flight: the figure the next call is checked against. Money is rounded to 9 decimal
//! places (binary noise only: a $0.0000245 call keeps every digit, and the rows' costs still
//! add up to `total_cost_usd`); text shows it in the one money format (`cost::usd`).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::model::{JobCounters, JobRecord, Settings, Status};

use crate::cost::budget_period;
use crate::store::rules;

/// One line of `cronsole stats`: a job's (or every job's, `*`) runs and spend.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatsLine {
    /// Job name, or `"*"` for the global line.
    pub job: String,
    /// Executions: succeeded, no_change, failed and abandoned rows (RUNS everywhere).
    pub total_executions: u64,
    /// Succeeded and no_change rows.
    pub successful_executions: u64,
    /// Failed rows.
    pub failed_executions: u64,
    /// Successful executions over all executions, in percent (0 with none).
    pub success_rate: f64,
    /// What the runs cost since the job was created (USD).
    pub total_cost_usd: f64,
    /// What they cost in the current budget period (USD).
    pub period_cost_usd: f64,
    /// Money the budget holds this period for model calls in flight or of unknown outcome
    /// (USD): not spent yet, not available either.
    pub in_flight_usd: f64,
    /// Limit − spent − in flight (≥ 0); `None` (JSON null) when there is no limit.
    pub remaining_budget: Option<f64>,
    /// Sum of the runs' durations (s).
    pub runtime_seconds: f64,
    /// `total_cost_usd` per execution (0 with none).
    pub cost_per_execution: f64,
    /// Rows per status word, every status present.
    pub counts: Counts,
    /// Some spend is unknown (unpriced model or missing usage).
    pub cost_incomplete: bool,
}

/// Rows per status, every status present: a fixed array (a line per job of a million-job store
/// holds no map), serialised as the map `{"abandoned": n, "failed": n, …}` in word order.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Counts([u64; Status::ALL.len()]);

impl Counts {
    fn of(by_status: &BTreeMap<Status, u64>) -> Counts {
        let mut c = Counts::default();
        for (i, s) in Status::ALL.iter().enumerate() {
            c.0[i] = by_status.get(s).copied().unwrap_or(0);
        }
        c
    }
}

impl std::ops::Index<&str> for Counts {
    type Output = u64;
    /// Rows of the status whose word is `word` (0 for a word that names none).
    fn index(&self, word: &str) -> &u64 {
        Status::ALL
            .iter()
            .position(|s| s.as_str() == word)
            .map_or(&0, |i| &self.0[i])
    }
}

impl Serialize for Counts {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut words: Vec<(&str, u64)> =
            Status::ALL.iter().map(|s| s.as_str()).zip(self.0).collect();
        words.sort_unstable_by_key(|w| w.0);
        let mut m = ser.serialize_map(Some(words.len()))?;
        for (w, n) in words {
            m.serialize_entry(w, &n)?;
        }
        m.end()
    }
}

/// What `cronsole stats` prints: the current period, a global line and one per job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stats {
    /// The budget period key the `period_cost_usd` figures are for (e.g. `day:2026-11-30`).
    pub period: String,
    /// Every job together, `job: "*"`, against the global budget.
    pub global: StatsLine,
    /// One line per job, against its `max_cost_usd`.
    pub jobs: Vec<StatsLine>,
}

/// Money in JSON: the one rule of every `--json` output ([`crate::text::json_usd`]: nine
/// decimals, no negative zero).
pub fn round_usd(x: f64) -> f64 {
    crate::text::json_usd(x)
}

#[derive(Default)]
struct Acc {
    counts: BTreeMap<Status, u64>,
    total_cost: f64,
    period_cost: f64,
    held: f64,
    runtime_ms: u64,
    incomplete: bool,
}

impl Acc {
    fn line(&self, job: String, limit: Option<f64>) -> StatsLine {
        line_of(job, &self.counts, self, limit)
    }
}

/// A line from its counts and money (the counts apart: a job's line reads its counters' map,
/// the global one the sum).
fn line_of(job: String, counts: &BTreeMap<Status, u64>, a: &Acc, limit: Option<f64>) -> StatsLine {
    {
        let get = |s: Status| counts.get(&s).copied().unwrap_or(0);
        let ok = get(Status::Succeeded) + get(Status::NoChange);
        let failed = get(Status::Failed);
        let total = crate::model::executions_of(counts);
        let rate = if total == 0 {
            0.0
        } else {
            (ok as f64 / total as f64 * 100.0 * 100.0).round() / 100.0
        };
        StatsLine {
            job,
            total_executions: total,
            successful_executions: ok,
            failed_executions: failed,
            success_rate: rate,
            total_cost_usd: round_usd(a.total_cost),
            period_cost_usd: round_usd(a.period_cost),
            in_flight_usd: round_usd(a.held),
            remaining_budget: limit.map(|l| round_usd((l - a.period_cost - a.held).max(0.0))),
            runtime_seconds: (a.runtime_ms as f64 / 1000.0 * 1000.0).round() / 1000.0,
            cost_per_execution: if total == 0 {
                0.0
            } else {
                round_usd(a.total_cost / total as f64)
            },
            counts: Counts::of(counts),
            cost_incomplete: a.incomplete,
        }
    }
}

/// Spend of one job in the period containing `now` ([`rules::period::counter_spend`]).
pub fn period_spend(rec: &JobRecord, settings: &Settings, now: DateTime<Utc>) -> f64 {
    period_spend_counters(&rec.rt.counters, settings, now)
}

/// [`period_spend`] from a job's counters alone (the file store's index keeps only those).
pub fn period_spend_counters(c: &JobCounters, settings: &Settings, now: DateTime<Utc>) -> f64 {
    rules::period::counter_spend(c, &budget_period(settings).key(now))
}

/// Stats per job and global at `now`, over records already read (`stats` itself streams them
/// through a [`Builder`]).
#[cfg(any(test, feature = "testkit"))]
pub fn compute(jobs: &[JobRecord], settings: &Settings, now: DateTime<Utc>) -> Stats {
    let mut b = Builder::new(settings, now);
    let lines = jobs.iter().map(|rec| b.add(rec)).collect();
    let (period, global) = b.finish();
    Stats {
        period,
        global,
        jobs: lines,
    }
}

/// The stats built one job at a time, so a caller can stream a store's jobs page by page
/// (`stats --json` prints each job's line as it is read, the global one after the last).
pub struct Builder {
    key: String,
    global_limit: Option<f64>,
    global: Acc,
}

impl Builder {
    /// Stats at `now` under `settings`' budget, no job counted yet.
    pub fn new(settings: &Settings, now: DateTime<Utc>) -> Builder {
        Builder {
            key: budget_period(settings).key(now),
            global_limit: settings.budget.map(|b| b.max_cost_usd),
            global: Acc::default(),
        }
    }

    /// One job's line, counted into the global one.
    pub fn add(&mut self, rec: &JobRecord) -> StatsLine {
        let c = &rec.rt.counters;
        // What the budget checks the next call against: the same sums.
        let (spent, held) = rules::period::committed(rec, &self.key);
        let acc = Acc {
            counts: BTreeMap::new(),
            total_cost: c.total_cost_usd,
            period_cost: spent,
            held,
            runtime_ms: c.runtime_ms,
            incomplete: c.cost_incomplete,
        };
        let global = &mut self.global;
        for (s, n) in &c.by_status {
            *global.counts.entry(*s).or_insert(0) += n;
        }
        global.total_cost += acc.total_cost;
        global.period_cost += acc.period_cost;
        global.held += acc.held;
        global.runtime_ms = global.runtime_ms.saturating_add(acc.runtime_ms);
        global.incomplete |= acc.incomplete;
        line_of(
            rec.def.name.clone(),
            &c.by_status,
            &acc,
            rec.def.max_cost_usd,
        )
    }

    /// The budget period's key the lines' `period_cost_usd` figures are for.
    pub fn period(&self) -> &str {
        &self.key
    }

    /// The budget period's key and the global line (`job: "*"`), against the global budget.
    pub fn finish(self) -> (String, StatsLine) {
        let global = self.global.line("*".to_string(), self.global_limit);
        (self.key, global)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Budget, BudgetPeriod};
    use crate::store::policy::define::tests_support::job;

    /// Noon on 2026-11-29 and a global budget of $1.00 a day.
    fn day_budget() -> (DateTime<Utc>, Settings) {
        let now = DateTime::parse_from_rfc3339("2026-11-29T12:00:00Z")
            .unwrap()
            .to_utc();
        let settings = Settings {
            budget: Some(Budget {
                max_cost_usd: 1.0,
                period: BudgetPeriod::Day,
            }),
            ..Default::default()
        };
        (now, settings)
    }

    /// A run whose owner died mid-run is an execution: RUNS counts it, and it is no success.
    #[test]
    fn an_abandoned_run_is_counted_as_a_run() {
        let (now, settings) = day_budget();
        let mut a = job("a", now);
        a.rt.counters.by_status.insert(Status::Abandoned, 1);
        let mut b = job("b", now);
        b.rt.counters.by_status.insert(Status::Succeeded, 1);
        b.rt.counters.by_status.insert(Status::Abandoned, 1);
        b.rt.counters.by_status.insert(Status::Skipped, 4);
        let s = compute(&[a.clone(), b], &settings, now);
        assert_eq!(s.jobs[0].total_executions, 1);
        assert_eq!(s.jobs[0].success_rate, 0.0);
        assert_eq!(s.jobs[1].total_executions, 2);
        assert_eq!(s.jobs[1].success_rate, 50.0);
        assert_eq!(s.global.total_executions, 3);
        // The same count as `jobs` and the console read from the counters.
        assert_eq!(a.rt.counters.executions(), 1);
    }

    #[test]
    fn stats_follow_the_counters_and_the_current_period() {
        let (now, settings) = day_budget();
        let mut a = job("a", now);
        a.def.max_cost_usd = Some(0.5);
        a.rt.counters.by_status.insert(Status::Succeeded, 3);
        a.rt.counters.by_status.insert(Status::Failed, 1);
        a.rt.counters.by_status.insert(Status::Missed, 2);
        a.rt.counters.total_cost_usd = 0.123456;
        a.rt.counters.period_key = "day:2026-11-29".into();
        a.rt.counters.period_cost_usd = 0.1;
        a.rt.counters.runtime_ms = 4500;
        let mut b = job("b", now);
        b.rt.counters.period_key = "day:2026-11-28".into();
        b.rt.counters.period_cost_usd = 5.0;
        b.rt.counters.total_cost_usd = 5.0;
        let s = compute(&[a, b], &settings, now);
        let la = &s.jobs[0];
        assert_eq!(la.total_executions, 4);
        assert_eq!(la.success_rate, 75.0);
        assert_eq!(la.total_cost_usd, 0.123456);
        assert_eq!(la.remaining_budget, Some(0.4));
        assert_eq!(la.counts["missed"], 2);
        assert_eq!(la.runtime_seconds, 4.5);
        assert_eq!(
            s.jobs[1].period_cost_usd, 0.0,
            "yesterday's spend is not today's"
        );
        assert_eq!(s.jobs[1].remaining_budget, None);
        assert_eq!(s.global.period_cost_usd, 0.1);
        assert_eq!(s.global.remaining_budget, Some(0.9));
        assert_eq!(s.global.total_cost_usd, 5.123456);
    }

    /// LEFT is what the next call is checked against: limit − spent − every reservation still
    /// counted (a call in flight, one of unknown outcome), per job and globally.
    #[test]
    fn remaining_budget_subtracts_the_money_in_flight() {
        use crate::model::{Reservation, ReservationState};
        let (now, settings) = day_budget();
        let mut a = job("a", now);
        a.def.max_cost_usd = Some(0.5);
        a.rt.counters.period_key = "day:2026-11-29".into();
        a.rt.counters.period_cost_usd = 0.1;
        a.rt.counters.total_cost_usd = 0.1;
        for (usd, state, key) in [
            (0.15, ReservationState::Reserved, "day:2026-11-29"),
            (0.05, ReservationState::Spent, "day:2026-11-29"),
            (0.3, ReservationState::Reserved, "day:2026-11-28"),
        ] {
            a.rt.counters.reservations.push(Reservation {
                id: uuid::Uuid::new_v4(),
                run_id: uuid::Uuid::new_v4(),
                owner: "o".into(),
                period_key: key.into(),
                usd,
                state,
                at: now,
                next_turn: false,
            });
        }
        let s = compute(&[a], &settings, now);
        let la = &s.jobs[0];
        assert_eq!(la.period_cost_usd, 0.1);
        assert_eq!(
            la.in_flight_usd, 0.2,
            "yesterday's reservation is not today's"
        );
        assert_eq!(la.remaining_budget, Some(0.2));
        assert_eq!(s.global.in_flight_usd, 0.2);
        assert_eq!(s.global.remaining_budget, Some(0.7));
    }
}

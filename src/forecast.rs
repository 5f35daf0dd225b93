//! The spend forecast: when the budget period's limit will be reached, and per
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
//! - Spend stops at the limits that stop it: a job's projection at its own `max_cost_usd`, and
//!   every job's, in the order their slots come, at the global budget (the hard limit refuses
//!   the calls past it). So the projected total never exceeds the global limit, and
//!   [`JobForecast::runs_paid`] says how many of a job's slots still spend; a line showing more
//!   slots than that says which limit stops it ([`JobForecast::limit_note`]) rather than print
//!   `22 slots left × $0.0108/run = $0.0000`; [`JobForecast::breakdown`] is the line every
//!   surface prints (`stats`, `describe`, the console's job detail), a product that adds up.
//! - The global limit is shared: the projection starts from the money every job has committed
//!   this period (spent and held for calls in flight, summed as the budget check of a call sums
//!   it) and tests each run as that check does ([`Totals::fits`]). A job's line is therefore
//!   only right when the forecast is built over every job that spends ([`Builder`]), which
//!   every surface does.

use chrono::{DateTime, Datelike, Duration, NaiveDate, Utc};
use serde::Serialize;

use crate::cost::budget_period;
use crate::model::{BudgetPeriod, Gate, JobRecord, Settings, Status};
use crate::store::rules::period::{Totals, committed};
use crate::store::rules::slots::compile;

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
    /// The slots that still spend before a limit stops the job (≤ `slots_left`):
    /// `projected_usd` = `runs_paid` × `cost_per_run_usd`.
    pub runs_paid: u64,
    /// What the job's own `max_cost_usd` leaves this period, `None` without one.
    pub job_limit_left_usd: Option<f64>,
    /// The worst case one of its model calls reserves (what the budget check tests), `None`
    /// when it makes none or its model has no price.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worst_call_usd: Option<f64>,
    /// How many of its slots its own limit lets through, each tested as the budget check
    /// tests a call; `None` without a limit.
    #[serde(skip)]
    pub own_limit_runs: Option<u64>,
}

impl JobForecast {
    /// `""` when every slot left spends; else which limit stops the job and after how many
    /// runs (`, 0 before its limit ($0.0092 left)`, `, 3 before the global limit`). Lines are
    /// printed as `{slots_left} slots left{limit_note} × {cost_per_run}/run`. `money` formats
    /// an amount the way the caller's surface does.
    pub fn limit_note(&self, money: &impl Fn(f64) -> String) -> String {
        if self.runs_paid >= self.slots_left {
            return String::new();
        }
        match self.job_limit_left_usd {
            // The job's own limit stops it first when its budget check refuses the next run.
            Some(left) if self.stopped_by_own_limit() => {
                format!(
                    ", {} before its limit ({} left)",
                    self.runs_paid,
                    money(left)
                )
            }
            _ => format!(", {} before the global limit", self.runs_paid),
        }
    }

    /// Whether the job's own limit refuses the run after its paid ones.
    pub fn stopped_by_own_limit(&self) -> bool {
        self.runs_paid < self.slots_left && self.own_limit_runs.is_some_and(|n| n <= self.runs_paid)
    }
}

impl JobForecast {
    /// How the job's slots left turn into money, a product that always adds up (never
    /// `22 slots left × $0.0108/run = $0.0000` when the job's cap leaves no room):
    /// - every slot spends: `22 slots left × $0.0108/run = $0.2376`;
    /// - a limit stops some: `22 slots left, 3 before its limit ($0.0392 left): 3 × $0.0108/run
    ///   = $0.0324` (or `… 3 before the global limit: …`);
    /// - a limit stops all: `22 slots left, cap reached ($0.0092 left, a run costs $0.011):
    ///   $0.00` (the job's own cap) or `22 slots left, none within the global limit: $0.00`.
    ///
    /// `(at least)` follows when the slots were capped at [`SLOT_CAP`]. `money` formats an
    /// amount the way the caller's surface does.
    pub fn breakdown(&self, money: impl Fn(f64) -> String) -> String {
        let at_least = if self.capped { " (at least)" } else { "" };
        let slots = format!("{} slots left{at_least}", self.slots_left);
        let per = money(self.cost_per_run_usd);
        if self.runs_paid >= self.slots_left {
            return format!("{slots} × {per}/run = {}", money(self.projected_usd));
        }
        if self.runs_paid == 0 {
            return match self.job_limit_left_usd {
                // The budget check tests a call's worst case: said when it is what refuses.
                Some(left)
                    if self.stopped_by_own_limit()
                        && self
                            .worst_call_usd
                            .is_some_and(|w| w > self.cost_per_run_usd) =>
                {
                    format!(
                        "{slots}, cap reached ({} left, a call may cost up to {}): {}",
                        money(left),
                        crate::cost::usd_up(self.worst_call_usd.unwrap_or_default()),
                        money(0.0)
                    )
                }
                Some(left) if self.stopped_by_own_limit() => format!(
                    "{slots}, cap reached ({} left, a run costs {per}): {}",
                    money(left),
                    money(0.0)
                ),
                _ => format!("{slots}, none within the global limit: {}", money(0.0)),
            };
        }
        format!(
            "{slots}{}: {} × {per}/run = {}",
            self.limit_note(&money),
            self.runs_paid,
            money(self.projected_usd)
        )
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Forecast {
    /// The end of the budget period (or of the horizon for `total`).
    pub until: DateTime<Utc>,
    pub spent_usd: f64,
    /// Money the budget holds for model calls in flight or of unknown outcome this period:
    /// not spent yet, not available either.
    pub in_flight_usd: f64,
    /// The global budget's limit, `None` without a budget.
    pub limit_usd: Option<f64>,
    /// Spent so far + in flight + projected for every job.
    pub projected_total_usd: f64,
    /// When the limit will be reached at this pace; `None` = not this period (or no budget).
    pub limit_reached_at: Option<DateTime<Utc>>,
    /// Jobs with slots left and a cost per run, biggest projection first (a job a limit stops
    /// stays listed, with `runs_paid` < `slots_left`).
    pub jobs: Vec<JobForecast>,
    /// A call the global limit refused this period (the first job's, by name): what is left
    /// of the limit cannot pay for that call's worst case, so the limit stops it whatever the
    /// projection of average costs says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub global_refusal: Option<GlobalRefusal>,
    /// The jobs whose own limit refuses their next run (its budget check's test), by name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub own_limit_stops: Vec<String>,
}

/// A job the global limit stopped this period, and its skip reason.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GlobalRefusal {
    pub job: String,
    pub reason: String,
    /// How many jobs the global limit stopped this period.
    pub jobs_stopped: u64,
}

impl Forecast {
    /// A short phrase for the console header and `stats`.
    pub fn phrase(&self, now: DateTime<Utc>) -> String {
        self.phrase_with(now, crate::cost::usd)
    }

    /// [`Forecast::phrase_with`] for a store no engine runs on: nothing is claimed or spent
    /// until one starts, so a limit "at" an instant a few seconds away (the projection assumes
    /// every due job runs now) is said as what happens once an engine starts, and every other
    /// phrase says that none is running.
    pub fn phrase_without_engine(
        &self,
        now: DateTime<Utc>,
        money: impl Fn(f64) -> String,
    ) -> String {
        let no_engine = crate::owners::NO_ENGINE;
        match (self.limit_usd, self.limit_reached_at) {
            (Some(_), Some(t)) if t > now && self.global_refusal.is_none() => format!(
                "{no_engine}: nothing spends until one starts (at this pace the limit is \
                 reached {} after it does)",
                crate::when::span(t - now)
            ),
            _ => format!("{}; {no_engine}", self.phrase_with(now, money)),
        }
    }

    /// [`Forecast::phrase`] with `money` formatting the amount the way the caller's surface
    /// does (at the precision of the amounts beside it).
    pub fn phrase_with(&self, now: DateTime<Utc>, money: impl Fn(f64) -> String) -> String {
        let global = self.global_phrase(now, money);
        match self.own_limit_stops.as_slice() {
            [] => global,
            [one] => format!(
                "{global}; {} stopped by its own limit",
                crate::text::line(one)
            ),
            [first, rest @ ..] => format!(
                "{global}; {} and {} more stopped by their own limits",
                crate::text::line(first),
                rest.len()
            ),
        }
    }

    /// What the phrase says about the global limit (or the projection without one).
    fn global_phrase(&self, now: DateTime<Utc>, money: impl Fn(f64) -> String) -> String {
        let refused = self
            .global_refusal
            .as_ref()
            .filter(|_| self.limit_reached_at.is_none_or(|t| t > now));
        match (self.limit_usd, self.limit_reached_at) {
            (None, _) => format!("projected {} this period", money(self.projected_total_usd)),
            // Average costs fit, but a call's worst case does not: the limit refuses it now.
            (Some(_), _) if let Some(r) = refused => format!(
                "limit reached for {} ({}): {}",
                match r.jobs_stopped {
                    1 => "1 job".to_string(),
                    n => format!("{n} jobs"),
                },
                crate::text::line(&r.job),
                crate::text::line(&r.reason)
            ),
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
    let runs_left = rec.runs_left();
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

/// The forecast at `now` over every job of the store.
pub fn compute(jobs: &[JobRecord], settings: &Settings, now: DateTime<Utc>) -> Forecast {
    let mut b = Builder::new(settings, now);
    for rec in jobs {
        b.add(rec);
    }
    b.finish()
}

/// The forecast built one job at a time, so a caller can stream a store's jobs page by page
/// and keep only what the projection needs: the committed money of every job, and the slots
/// of the jobs that spend. Every surface (`stats`, `describe`, the console) builds it over every
/// job, so a job's line is the same wherever it is read: the global limit is shared, and the
/// other jobs' spend and runs decide how much of it is left for this one.
pub struct Builder<'a> {
    settings: &'a Settings,
    now: DateTime<Utc>,
    until: DateTime<Utc>,
    key: String,
    /// Every job's committed money this period, summed as the budget check sums it.
    committed: Totals,
    /// (when, mean cost, worst case of its call, index into `lines`) of every run projected
    /// within its job's own limit.
    events: Vec<(DateTime<Utc>, f64, f64, usize)>,
    /// The jobs whose own limit refuses their next run.
    own_stops: Vec<String>,
    lines: Vec<JobForecast>,
    refusal: Option<GlobalRefusal>,
    prices: crate::cost::PriceTable,
}

impl<'a> Builder<'a> {
    /// A forecast at `now` under `settings`' budget, no job counted yet.
    pub fn new(settings: &'a Settings, now: DateTime<Utc>) -> Builder<'a> {
        let period = budget_period(settings);
        Builder {
            settings,
            now,
            until: period_end(period, now),
            key: period.key(now),
            committed: Totals::default(),
            events: Vec::new(),
            own_stops: Vec::new(),
            lines: Vec::new(),
            refusal: None,
            prices: crate::cost::PriceTable::from_settings(settings),
        }
    }

    /// Counts one job: its committed money, and its projected runs if it spends.
    pub fn add(&mut self, rec: &JobRecord) {
        let now = self.now;
        self.committed.add(&rec.rt.counters, &self.key);
        if let Some(stop) = rec.rt.state.budget_stop.as_ref()
            && stop.period_key == self.key
            && refused_by_the_global_limit(&stop.reason)
        {
            let r = self.refusal.get_or_insert_with(|| GlobalRefusal {
                job: rec.def.name.clone(),
                reason: stop.reason.clone(),
                jobs_stopped: 0,
            });
            r.jobs_stopped += 1;
        }
        let per = cost_per_run(rec, now);
        if per <= 0.0 {
            return;
        }
        let (slots, capped) = slots_left(rec, now, self.until);
        if slots.is_empty() {
            return;
        }
        // Each run is tested as its budget check tests its call: the call's worst case must fit
        // what the limit leaves (spent and in flight subtracted); the run then spends its mean.
        let worst = crate::preflight::definition_call(&rec.def, self.settings, &self.prices)
            .map(|c| c.worst_usd);
        let ask = worst.unwrap_or(per);
        let (spent, held) = committed(rec, &self.key);
        let mut own = Totals {
            spent,
            held,
            ..Totals::default()
        };
        let left = rec.def.max_cost_usd.map(|m| (m - spent - held).max(0.0));
        let mut paid = 0u64;
        for s in &slots {
            if rec.def.max_cost_usd.is_some_and(|m| !own.fits(m, ask)) {
                break;
            }
            own.spent += per;
            paid += 1;
            self.events.push((*s, per, ask, self.lines.len()));
        }
        let own_limit_runs = rec.def.max_cost_usd.map(|_| paid);
        if own_limit_runs == Some(0) {
            self.own_stops.push(rec.def.name.clone());
        }
        self.lines.push(JobForecast {
            job: rec.def.name.clone(),
            slots_left: slots.len() as u64,
            cost_per_run_usd: per,
            projected_usd: 0.0,
            capped,
            runs_paid: 0,
            job_limit_left_usd: left,
            worst_call_usd: worst,
            own_limit_runs,
        });
    }

    /// Every job's runs in time order against the global limit, each tested as the budget
    /// check tests a call ([`Totals::fits`], over the money every job has committed): the
    /// first run that does not fit is refused, and so is every later one (the limit is
    /// reached).
    pub fn finish(self) -> Forecast {
        let Builder {
            settings,
            now,
            until,
            committed,
            mut events,
            mut lines,
            refusal,
            mut own_stops,
            ..
        } = self;
        own_stops.sort();
        let limit = settings.budget.map(|b| b.max_cost_usd);
        events.sort_by_key(|e| e.0);
        let mut used = committed;
        let mut limit_reached_at = limit.filter(|l| !used.fits(*l, 0.0)).map(|_| now);
        for (t, c, ask, i) in &events {
            if limit_reached_at.is_some() {
                break;
            }
            if let Some(l) = limit
                && !used.fits(l, *ask)
            {
                limit_reached_at = Some(*t);
                break;
            }
            used.spent += c;
            lines[*i].projected_usd += c;
            lines[*i].runs_paid += 1;
            // Spent up to the limit (to a billionth of a dollar: sums of prices carry binary
            // noise) is reached: no later call can fit.
            if limit.is_some_and(|l| used.spent + used.held >= l - 1e-9) {
                limit_reached_at = Some(*t);
            }
        }
        lines.sort_by(|a, b| {
            b.projected_usd
                .total_cmp(&a.projected_usd)
                .then_with(|| a.job.cmp(&b.job))
        });
        let projected = crate::cost::sum_usd(lines.iter().map(|l| l.projected_usd));
        Forecast {
            until,
            spent_usd: committed.spent,
            in_flight_usd: committed.held,
            limit_usd: limit,
            projected_total_usd: committed.spent + committed.held + projected,
            limit_reached_at,
            jobs: lines,
            global_refusal: refusal.filter(|_| limit.is_some()),
            own_limit_stops: own_stops,
        }
    }
}

/// Whether a budget stop's reason is the global limit's (`budget reached: global …`, `budget
/// too small for one call: …, the global limit is …`), not a job's own.
fn refused_by_the_global_limit(reason: &str) -> bool {
    use crate::cost::{BUDGET_REACHED, BUDGET_TOO_SMALL};
    reason
        .strip_prefix(BUDGET_REACHED)
        .is_some_and(|r| r.starts_with(": global "))
        || (reason.starts_with(BUDGET_TOO_SMALL) && reason.contains("the global limit is"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Budget, HistoryRow, MonitorSource, Trigger};
    use crate::store::policy::counters::count_row;
    use crate::store::policy::define::tests_support::job;

    use crate::testkit::time::rfc3339 as t;

    fn spent(rec: &mut JobRecord, status: Status, cost: f64, at: DateTime<Utc>) {
        let mut row = HistoryRow::new(&rec.def.name, status, Trigger::Schedule, None, "o", at);
        row.cost_usd = cost;
        count_row(rec, &mut row, BudgetPeriod::Day, at);
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

    /// A limit whose remainder cannot pay for one call's worst case refuses every call, though
    /// the average cost still fits: the phrase says the limit is reached for the jobs it
    /// stopped, with the skip reason, never "limit not reached" (nor for a job's own limit).
    #[test]
    fn a_global_limit_that_refuses_every_call_is_reached_in_the_phrase() {
        let t0 = t("2026-11-25T22:00:00Z");
        let now = t0 + Duration::seconds(61);
        let stop = |rec: &mut JobRecord, reason: &str| {
            rec.rt.state.budget_stop = Some(crate::model::BudgetStop {
                period_key: BudgetPeriod::Day.key(now),
                reason: reason.into(),
                at: now,
                alerted: true,
            });
        };
        let mut a = job("a", t0);
        spent(&mut a, Status::Succeeded, 0.000_568, t0);
        a.rt.next_slot = Some(t0 + Duration::seconds(120));
        let mut b = job("b", t0);
        stop(
            &mut b,
            "budget reached: global $0.0006/day, $0.000032 left (spent $0.000568, in flight \
             $0.00); this call may cost up to $0.0025",
        );
        let f = compute(&[a.clone(), b.clone()], &settings(0.0006), now);
        assert_eq!(
            f.phrase(now),
            "limit reached for 1 job (b): budget reached: global $0.0006/day, $0.000032 left \
             (spent $0.000568, in flight $0.00); this call may cost up to $0.0025"
        );
        // A stop of an earlier period, or of a job's own limit, is not the global limit's now.
        let mut c = job("c", t0);
        stop(
            &mut c,
            "budget reached: job $0.001/day, $0.00 left (spent $0.001, in flight $0.00); this \
             call may cost up to $0.0025",
        );
        b.rt.state.budget_stop.as_mut().unwrap().period_key = "day:2026-11-24".into();
        let f = compute(&[a, b, c], &settings(100.0), now);
        assert!(f.global_refusal.is_none());
        assert_eq!(f.phrase(now), "limit not reached this period");
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
        // With no engine running nothing spends: the limit is not "at 22:09", it is 8 minutes
        // after an engine starts.
        assert_eq!(
            f.phrase_without_engine(now, crate::cost::usd),
            "no engine is running on this store: nothing spends until one starts (at this pace \
             the limit is reached 7m59s after it does)"
        );
        // A generous limit is not reached this period.
        let f = compute(std::slice::from_ref(&rec), &settings(100.0), now);
        assert_eq!(f.limit_reached_at, None);
        assert_eq!(f.phrase(now), "limit not reached this period");
        assert_eq!(
            f.phrase_without_engine(now, crate::cost::usd),
            "limit not reached this period; no engine is running on this store"
        );
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

    /// After a single $0.0108 run of a job limited to $0.02, the job's limit stops the
    /// projection: the line says how many runs still spend and why, never
    /// `22 slots left × $0.0108/run = $0.0000` (a product that does not add up).
    #[test]
    fn a_job_stopped_by_its_own_limit_says_so_instead_of_a_product_that_does_not_add_up() {
        let t0 = t("2026-11-25T23:37:00Z");
        let mut rec = job("a", t0);
        rec.def.max_cost_usd = Some(0.02);
        spent(&mut rec, Status::Succeeded, 0.0108, t0);
        rec.rt.next_slot = Some(t0 + Duration::seconds(60));
        let now = t0 + Duration::seconds(1);
        let f = compute(std::slice::from_ref(&rec), &settings(10.0), now);
        let j = &f.jobs[0];
        assert_eq!(j.slots_left, 22);
        assert_eq!((j.runs_paid, j.projected_usd), (0, 0.0));
        let money = |x: f64| format!("${x:.4}");
        assert_eq!(j.limit_note(&money), ", 0 before its limit ($0.0092 left)");
        assert_eq!(
            j.breakdown(money),
            "22 slots left, cap reached ($0.0092 left, a run costs $0.0108): $0.0000"
        );
        // With room for three more runs, three are paid, and the product adds up.
        rec.def.max_cost_usd = Some(0.05);
        let f = compute(std::slice::from_ref(&rec), &settings(10.0), now);
        let j = &f.jobs[0];
        assert_eq!(j.runs_paid, 3);
        assert!((j.projected_usd - 3.0 * 0.0108).abs() < 1e-12, "{j:?}");
        assert_eq!(j.limit_note(&money), ", 3 before its limit ($0.0392 left)");
        assert_eq!(
            j.breakdown(money),
            "22 slots left, 3 before its limit ($0.0392 left): 3 × $0.0108/run = $0.0324"
        );
        // No limit: every slot spends, nothing to add.
        rec.def.max_cost_usd = None;
        let f = compute(std::slice::from_ref(&rec), &settings(10.0), now);
        assert_eq!(f.jobs[0].runs_paid, 22);
        assert_eq!(f.jobs[0].limit_note(&money), "");
        assert_eq!(
            f.jobs[0].breakdown(money),
            "22 slots left × $0.0108/run = $0.2376"
        );
    }

    /// A job's own limit whose rest covers the mean cost of a run but not its call's worst case
    /// refuses the next call: the forecast says so (its line and the phrase), as the budget
    /// check decides, never "1 before its limit".
    #[test]
    fn a_job_limit_below_the_next_calls_worst_case_stops_it_in_the_forecast() {
        let t0 = t("2026-12-07T18:00:00Z");
        let mut def = crate::store::policy::define::tests_support::def("ask");
        def.action = crate::model::Action::Agent {
            agent: "helper".into(),
            message: "hi".into(),
            tools: None,
        };
        def.max_cost_usd = Some(0.001);
        let mut rec = crate::store::policy::define::tests_support::due_at(def, t0);
        spent(&mut rec, Status::Succeeded, 0.00032, t0);
        spent(&mut rec, Status::Succeeded, 0.00032, t0);
        rec.rt.next_slot = Some(t0 + Duration::seconds(60));
        let mut s = settings(10.0);
        let mut agent = crate::testkit::jobs::agent_def("helper", crate::model::Provider::Openai);
        agent.max_tokens = Some(200);
        s.agents.insert("helper".into(), agent);
        s.pricing.insert(
            "m".into(),
            crate::model::Price {
                input: 1.0,
                output: 2.0,
                ..Default::default()
            },
        );
        let now = t0 + Duration::seconds(1);
        let f = compute(std::slice::from_ref(&rec), &s, now);
        let j = &f.jobs[0];
        assert_eq!(j.runs_paid, 0, "{j:?}");
        let worst = j.worst_call_usd.unwrap_or_default();
        assert!(worst > 0.00036 && worst < 0.0006, "{j:?}");
        assert!(
            j.breakdown(crate::cost::usd)
                .ends_with("cap reached ($0.00036 left, a call may cost up to $0.000474): $0.00"),
            "{}",
            j.breakdown(crate::cost::usd)
        );
        assert_eq!(
            f.phrase(now),
            "limit not reached this period; ask stopped by its own limit"
        );
        // With room for the worst case, the run is paid and nothing is stopped.
        rec.def.max_cost_usd = Some(0.002);
        let f = compute(std::slice::from_ref(&rec), &s, now);
        assert!(f.jobs[0].runs_paid >= 1, "{:?}", f.jobs[0]);
        assert_eq!(f.phrase(now), "limit not reached this period");
    }

    /// Money 2: an `every 1s` load projected $1680 for the rest of the day under a $5 global
    /// budget: every slot's demand, though the hard limit refuses the calls past $5. The
    /// projection now stops at the global limit, in the order the runs come.
    #[test]
    fn an_every_second_load_is_projected_up_to_the_global_limit_not_past_it() {
        let t0 = t("2026-11-25T12:00:00Z");
        let def = crate::testkit::jobs::command_job("fast", 1);
        let mut rec = crate::store::policy::define::new_record(def, t0).unwrap();
        let mut other = job("slow", t0);
        for i in 0..100 {
            spent(
                &mut rec,
                Status::Succeeded,
                0.084,
                t0 + Duration::seconds(i),
            );
        }
        spent(&mut other, Status::Succeeded, 0.5, t0);
        let now = t0 + Duration::seconds(100);
        rec.rt.next_slot = Some(now + Duration::seconds(1));
        other.rt.next_slot = Some(now + Duration::seconds(30));
        let jobs = [rec, other];
        // Without a budget, the demand: SLOT_CAP slots at $0.084 = $1680, a lower bound.
        let f = compute(&jobs, &Settings::default(), now);
        let fast = f.jobs.iter().find(|j| j.job == "fast").unwrap();
        assert!(
            fast.capped && fast.slots_left == SLOT_CAP as u64,
            "{fast:?}"
        );
        assert!((fast.projected_usd - 1680.0).abs() < 1e-6, "{fast:?}");
        // Under $20 a day ($8.90 spent at 12:01:40), $11.10 more is all the limit lets
        // through, in time order: `fast` every second from 12:01:41, `slow` ($0.50) at 12:02:10
        // and 12:03:10. 120 `fast` runs + 2 `slow` runs = $19.98 by 12:03:40; the run at
        // 12:03:41 would pass $20, so the limit is reached then.
        let f = compute(&jobs, &settings(20.0), now);
        assert!(f.projected_total_usd <= 20.0 + 1e-9, "{f:?}");
        let fast = f.jobs.iter().find(|j| j.job == "fast").unwrap();
        let slow = f.jobs.iter().find(|j| j.job == "slow").unwrap();
        assert_eq!((fast.runs_paid, slow.runs_paid), (120, 2), "{f:?}");
        assert!(
            (fast.projected_usd - 120.0 * 0.084).abs() < 1e-9,
            "{fast:?}"
        );
        assert!((f.projected_total_usd - 19.98).abs() < 1e-9, "{f:?}");
        assert_eq!(
            fast.limit_note(&|x| format!("${x:.2}")),
            ", 120 before the global limit"
        );
        assert_eq!(
            fast.breakdown(|x| format!("${x:.3}")),
            "20000 slots left (at least), 120 before the global limit: 120 × $0.084/run = $10.080"
        );
        assert_eq!(f.limit_reached_at, Some(t("2026-11-25T12:03:41Z")));
    }

    /// A job's line counts every job's committed money under the global limit, as the budget
    /// check of its next call does: with $0.0019 of a $0.05 limit left (another job spent
    /// $0.047, a third holds $0.0001 for a call in flight), a job whose runs cost $0.00089 has
    /// two paid runs left, not the 55 the limit less its own spend would allow; and the line
    /// is the same whether it is read from every job (`stats`) or from the jobs that spend
    /// (`describe`).
    #[test]
    fn a_jobs_line_counts_the_other_jobs_spend_and_holds_under_the_global_limit() {
        use crate::model::{Reservation, ReservationState};
        let t0 = t("2026-11-25T12:00:00Z");
        let settings = Settings {
            budget: Some(Budget {
                max_cost_usd: 0.05,
                period: BudgetPeriod::Total,
            }),
            ..Default::default()
        };
        let total = |rec: &mut JobRecord, cost: f64| {
            let mut row = HistoryRow::new(
                &rec.def.name,
                Status::Succeeded,
                Trigger::Schedule,
                None,
                "o",
                t0,
            );
            row.cost_usd = cost;
            count_row(rec, &mut row, BudgetPeriod::Total, t0);
        };
        let mut a = job("a", t0);
        total(&mut a, 0.00089);
        let mut b = job("b", t0);
        total(&mut b, 0.047);
        b.rt.paused = true;
        let mut c = job("c", t0);
        c.rt.paused = true;
        c.rt.counters.reservations.push(Reservation {
            id: uuid::Uuid::new_v4(),
            run_id: uuid::Uuid::new_v4(),
            owner: "o".into(),
            period_key: "total".into(),
            usd: 0.0001,
            state: ReservationState::Reserved,
            at: t0,
            next_turn: false,
        });
        let never = job("never", t0);
        let now = t0 + Duration::seconds(1);
        a.rt.next_slot = Some(now + Duration::seconds(60));
        let alone = compute(std::slice::from_ref(&a), &settings, now);
        assert_eq!(alone.jobs[0].runs_paid, 55, "{alone:?}");
        let all = [a.clone(), b.clone(), c.clone(), never];
        let f = compute(&all, &settings, now);
        assert!((f.spent_usd - 0.04789).abs() < 1e-12, "{f:?}");
        assert!((f.in_flight_usd - 0.0001).abs() < 1e-12, "{f:?}");
        // $0.05 − $0.04789 − $0.0001 = $0.00201: two runs of $0.00089.
        let line = f.jobs.iter().find(|j| j.job == "a").unwrap();
        assert_eq!(line.runs_paid, 2, "{f:?}");
        assert_eq!(
            line.limit_note(&|x| format!("${x:.5}")),
            ", 2 before the global limit"
        );
        assert!(f.projected_total_usd <= 0.05 + 1e-12, "{f:?}");
        // The jobs that spend alone make the same forecast.
        assert_eq!(compute(&[a, b, c], &settings, now), f);
    }

    /// Just after a rollover, a job that spent $0.084 a run all day must not be projected at $1680
    /// for the new day against a $0.05 hard limit. The new day's projection stops at the limit (no
    /// run of $0.084 fits $0.05), and the line says so rather than multiply slots it cannot pay.
    #[test]
    fn after_a_rollover_the_projection_stays_within_the_hard_limit() {
        let t0 = t("2026-11-25T23:58:00Z");
        let def = crate::testkit::jobs::command_job("fast", 1);
        let mut rec = crate::store::policy::define::new_record(def, t0).unwrap();
        for i in 0..100 {
            spent(
                &mut rec,
                Status::Succeeded,
                0.084,
                t0 + Duration::seconds(i),
            );
        }
        let now = t("2026-11-26T00:00:05Z");
        rec.rt.next_slot = Some(now + Duration::seconds(1));
        let f = compute(std::slice::from_ref(&rec), &settings(0.05), now);
        assert_eq!(f.spent_usd, 0.0, "a new day");
        assert!(f.projected_total_usd <= 0.05, "{f:?}");
        let j = &f.jobs[0];
        assert_eq!((j.runs_paid, j.projected_usd), (0, 0.0));
        assert_eq!(
            j.breakdown(|x| format!("${x:.4}")),
            "20000 slots left (at least), none within the global limit: $0.0000"
        );
    }
}

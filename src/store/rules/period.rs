//! Budget periods and the arithmetic of money a job has counted or reserved in one: which period
//! a key names, whether money booked under one key counts toward another, what a job's counters
//! and reservations commit in a period, and the recount of counters at an edit of the budget's
//! `period`.
//!
//! Owns: period keys (`day:2026-12-01`, `week:2026-W49`, `month:2026-12`, `total`) as the
//! counters store them, [`counts_in`], [`committed`], [`counter_spend`], [`period_start`],
//! [`booked_since`], [`recount`]. The rule for *which* period counters are kept in is
//! `cost::budget_period`. Must not touch: the budget decisions (`store::policy::budget`),
//! storage, clocks.
//!
//! Decisions:
//! - Counters kept under a period of another kind (the budget's `period` was edited) count
//!   whole in every period they share time with, so an edit never forgets money spent inside the
//!   new period (it may count some spent just before it: conservative).
//! - An edit of `period` recounts each job's spend in the new period once, at the `apply` that
//!   makes it: the cost of every history row that finished inside the new period
//!   ([`booked_since`]); `total` takes the all-time spend.

use chrono::{DateTime, Utc};

use crate::model::JobRecord;

/// A job's committed spend in period `key`: its counters plus every reservation of that period.
pub fn committed(rec: &JobRecord, key: &str) -> (f64, f64) {
    committed_counters(&rec.rt.counters, key)
}

/// A job's committed money in period `key` with the parts of what it holds
/// ([`Totals::aside`], [`Totals::in_flight`]).
pub fn totals_of(c: &crate::model::JobCounters, key: &str) -> Totals {
    let (spent, held) = committed_counters(c, key);
    let part = |pick: &dyn Fn(&crate::model::Reservation) -> bool| {
        held_in(
            c.reservations
                .iter()
                .filter(|r| pick(r))
                .map(|r| (r.period_key.as_str(), r.usd)),
            key,
        )
    };
    Totals {
        spent,
        held,
        aside: part(&|r| r.next_turn),
        in_flight: part(&|r| !r.next_turn && r.state == crate::model::ReservationState::Reserved),
    }
}

/// [`committed`] from a job's counters alone (the file store's index keeps only those).
pub fn committed_counters(c: &crate::model::JobCounters, key: &str) -> (f64, f64) {
    let spent = counter_spend(c, key);
    let held = held_in(
        c.reservations
            .iter()
            .map(|r| (r.period_key.as_str(), r.usd)),
        key,
    );
    (spent, held)
}

/// What reservations given as (period key, amount) hold in period `key`: the money of calls in
/// flight or of unknown outcome that counts against its budget (every view that shows what is
/// left subtracts it, as the budget does).
pub fn held_in<'a>(reservations: impl Iterator<Item = (&'a str, f64)>, key: &str) -> f64 {
    reservations
        .filter(|(k, usd)| counts_in(k, key) && usd.is_finite())
        .map(|(_, usd)| usd.max(0.0))
        // From +0.0: an empty f64 `sum()` is -0.0, which JSON prints as `-0.0`.
        .fold(0.0, |a, b| a + b)
}

/// Finite and ≥ 0, else 0.
fn usd_or_zero(v: f64) -> f64 {
    if v.is_finite() { v.max(0.0) } else { 0.0 }
}

/// What a job's counters say it spent in period `key`. Counters of that period count as they
/// are; under `total` the job's all-time spend counts; counters kept under another period kind
/// (the budget's `period` was edited) count whole when their period shares any time
/// with `key`'s, so an edit never forgets money spent inside the new period (it may count some
/// spent just before it: conservative); counters of an older period of the same kind count 0.
pub fn counter_spend(c: &crate::model::JobCounters, key: &str) -> f64 {
    spend_in(&c.period_key, c.period_cost_usd, c.total_cost_usd, key)
}

/// [`counter_spend`] over the three members it reads (the console's rows keep only those).
pub fn spend_in(period_key: &str, period_cost_usd: f64, total_cost_usd: f64, key: &str) -> f64 {
    if key == "total" {
        // The larger: an index head written before `total_cost_usd` was kept in it says 0.
        usd_or_zero(total_cost_usd).max(usd_or_zero(period_cost_usd))
    } else if counts_in(period_key, key) {
        usd_or_zero(period_cost_usd)
    } else {
        0.0
    }
}

/// Does money booked under period key `booked` count toward period `key`? The same period,
/// everything under `total`, or a period of another kind sharing time with `key`'s — exactly
/// when `booked` is one of [`overlapping_keys`]`(key)`, decided without listing them: both keys
/// are parsed once into their days and the two spans compared. This runs for every job in
/// every console snapshot, `jobs --json` row and `stats` line whose counters were kept under
/// another kind (a never-run job's empty key, or any job after a `period` edit until its next
/// row), where listing a month's ~60 overlapping keys cost ~100 string formats per job.
pub fn counts_in(booked: &str, key: &str) -> bool {
    if booked == key || key == "total" {
        return true;
    }
    fn kind(k: &str) -> &str {
        k.split(':').next().unwrap_or("")
    }
    if kind(booked) == kind(key) {
        return false;
    }
    // `overlapping_keys` of a key that does not parse is empty.
    if booked == "total" {
        return period_days(key).is_some();
    }
    // `booked` first: a never-run job's empty key ends here, before `key` is parsed.
    let Some((b_first, b_last)) = period_days(booked) else {
        return false;
    };
    match period_days(key) {
        // Only a key as `BudgetPeriod::key` writes it is one of `overlapping_keys` (a
        // hand-edited `day:2026-12-1` is not); the check formats one key, only on overlap.
        Some((first, last)) if b_first <= last && first <= b_last => {
            let kind_of = match kind(booked) {
                "day" => crate::model::BudgetPeriod::Day,
                "week" => crate::model::BudgetPeriod::Week,
                _ => crate::model::BudgetPeriod::Month,
            };
            kind_of.key(b_first.and_time(chrono::NaiveTime::MIN).and_utc()) == booked
        }
        _ => false,
    }
}

/// The first and last day of the period a `day:`, `week:` or `month:` key names; `None` for
/// `total` and for a key that does not parse.
fn period_days(key: &str) -> Option<(chrono::NaiveDate, chrono::NaiveDate)> {
    use chrono::{Datelike, Duration, NaiveDate, Weekday};
    if let Some(d) = key.strip_prefix("day:") {
        let d = NaiveDate::parse_from_str(d, "%Y-%m-%d").ok()?;
        Some((d, d))
    } else if let Some(w) = key.strip_prefix("week:") {
        let (y, n) = w.split_once("-W")?;
        let first = NaiveDate::from_isoywd_opt(y.parse().ok()?, n.parse().ok()?, Weekday::Mon)?;
        Some((first, first + Duration::days(6)))
    } else if let Some(m) = key.strip_prefix("month:") {
        let (y, n) = m.split_once('-')?;
        let first = NaiveDate::from_ymd_opt(y.parse().ok()?, n.parse().ok()?, 1)?;
        let next = if first.month() == 12 {
            NaiveDate::from_ymd_opt(first.year() + 1, 1, 1)?
        } else {
            NaiveDate::from_ymd_opt(first.year(), first.month() + 1, 1)?
        };
        Some((first, next - Duration::days(1)))
    } else {
        None
    }
}

/// The keys of periods of the *other* kinds that share time with period `key`'s: a day's week,
/// month and `total`; a week's days, months and `total`; a month's days, weeks and `total`.
/// Empty for `total` (every key counts there) and for a key that does not parse.
pub fn overlapping_keys(key: &str) -> Vec<String> {
    use crate::model::BudgetPeriod as P;
    use chrono::{Datelike, Duration, NaiveDate, Weekday};
    let at = |d: NaiveDate| d.and_time(chrono::NaiveTime::MIN).and_utc();
    let days: Vec<NaiveDate> = if let Some(d) = key.strip_prefix("day:") {
        NaiveDate::parse_from_str(d, "%Y-%m-%d")
            .into_iter()
            .collect()
    } else if let Some(w) = key.strip_prefix("week:") {
        let first = w.split_once("-W").and_then(|(y, n)| {
            NaiveDate::from_isoywd_opt(y.parse().ok()?, n.parse().ok()?, Weekday::Mon)
        });
        first
            .map(|f| (0..7).map(|i| f + Duration::days(i)).collect())
            .unwrap_or_default()
    } else if let Some(m) = key.strip_prefix("month:") {
        match NaiveDate::parse_from_str(&format!("{m}-01"), "%Y-%m-%d") {
            Ok(f) => (0..31)
                .map(|i| f + Duration::days(i))
                .filter(|d| d.month() == f.month())
                .collect(),
            Err(_) => Vec::new(),
        }
    } else {
        Vec::new()
    };
    if days.is_empty() {
        return Vec::new();
    }
    let mut out = vec!["total".to_string()];
    for d in days {
        for p in [P::Day, P::Week, P::Month] {
            let k = p.key(at(d));
            if k != key && !out.contains(&k) {
                out.push(k);
            }
        }
    }
    let kind = key.split(':').next().unwrap_or("");
    out.retain(|k| k.split(':').next().unwrap_or("") != kind);
    out
}

/// How far before a budget period's start the file store's recount ([`recount`]) keeps reading
/// history: rows are appended in the order they are written, and a row is written after it
/// finished, so once a row finished this long before the start every older row finished before
/// it too — unless a row was written more than this long after it finished (a completion
/// replayed from the spool, or an owner stopped that long mid-run), which README "Known limits"
/// names. PostgreSQL selects by `finished_at` (indexed) and needs no slack.
pub const RECOUNT_SLACK_SECS: i64 = 3600;

/// The first instant of the UTC budget period containing `now`; `None` for `total` (no start:
/// its spend is the jobs' all-time spend).
pub fn period_start(
    period: crate::model::BudgetPeriod,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    use crate::model::BudgetPeriod as P;
    use chrono::{Datelike, Duration, NaiveDate};
    let today = now.date_naive();
    let first = match period {
        P::Day => today,
        P::Week => today - Duration::days(i64::from(today.weekday().num_days_from_monday())),
        P::Month => NaiveDate::from_ymd_opt(today.year(), today.month(), 1)?,
        P::Total => return None,
    };
    Some(first.and_time(chrono::NaiveTime::MIN).and_utc())
}

/// The cost a history row books in a period that started at `start` (for [`recount`]). The
/// row's money was reserved while it ran, between its `started_at` and its `finished_at`: a
/// row that finished before `start` books nothing there, one that finished at or after it books
/// its whole cost (one that started before `start` may have reserved before it: counted in the
/// new period all the same, conservative — a hard limit never forgets money).
pub fn booked_since(finished_at: DateTime<Utc>, cost_usd: f64, start: DateTime<Utc>) -> f64 {
    if finished_at < start {
        0.0
    } else {
        usd_or_zero(cost_usd)
    }
}

/// Are the counters kept under a period of another kind than `key`'s while holding money? Then
/// the budget's `period` was edited since they were last written, and [`recount`] sets them to
/// the new period once (the edit itself, or the next `apply` if a crash came between the
/// settings and the records).
pub fn needs_recount(c: &crate::model::JobCounters, key: &str) -> bool {
    let kind = |k: &str| k.split(':').next().unwrap_or("").to_string();
    let has_money = usd_or_zero(c.total_cost_usd) > 0.0 || usd_or_zero(c.period_cost_usd) > 0.0;
    has_money && kind(&c.period_key) != kind(key)
}

/// The counters of a job after the budget's `period` became `key`'s: spent in the period = the
/// cost its history rows book there (`booked`, summed with [`booked_since`]), or the all-time
/// spend under `total`. Reservations stay as they are (those sharing time with the new period
/// count in it, [`counts_in`]). Returns whether anything changed.
pub fn recount(c: &mut crate::model::JobCounters, key: &str, booked: f64) -> bool {
    let spent = if key == "total" {
        usd_or_zero(c.total_cost_usd).max(usd_or_zero(c.period_cost_usd))
    } else {
        usd_or_zero(booked)
    };
    if c.period_key == key && c.period_cost_usd == spent {
        return false;
    }
    c.period_key = key.to_string();
    c.period_cost_usd = spent;
    true
}

/// Committed money in one budget period: spent (counters) and held (reservations).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Totals {
    /// Spent in the period, from the jobs' counters (USD).
    pub spent: f64,
    /// Held by reservations of calls in flight or of unknown outcome (USD), and by started
    /// tool loops for their next turns.
    pub held: f64,
    /// The part of `held` started tool loops keep for their next turns (never spent).
    pub aside: f64,
    /// The part of `held` reserved by calls in flight (it settles or is released soon).
    pub in_flight: f64,
}

impl Totals {
    /// Adds one job's committed money in period `key` ([`committed_counters`]): how every
    /// global total is summed — the budget check of a call, the forecast, `stats`.
    pub fn add(&mut self, c: &crate::model::JobCounters, key: &str) {
        let t = totals_of(c, key);
        self.spent += t.spent;
        self.held += t.held;
        self.aside += t.aside;
        self.in_flight += t.in_flight;
    }

    /// The sum of two totals.
    pub fn plus(self, o: Totals) -> Totals {
        Totals {
            spent: self.spent + o.spent,
            held: self.held + o.held,
            aside: self.aside + o.aside,
            in_flight: self.in_flight + o.in_flight,
        }
    }

    /// What a started tool loop's later turn is judged against: the money other started
    /// loops keep for their next turns is not counted (it only keeps new runs out), so among
    /// started runs the first to ask is served.
    pub fn for_later_turn(self) -> Totals {
        Totals {
            held: (self.held - self.aside).max(0.0),
            aside: 0.0,
            ..self
        }
    }

    /// Whether a call of worst case `cost` refused over these totals would fit `limit` once the
    /// calls in flight settled at nothing: waiting for them may let it through.
    pub fn fits_after_in_flight(&self, limit: f64, cost: f64) -> bool {
        let rest = Totals {
            held: (self.held - self.in_flight).max(0.0),
            in_flight: 0.0,
            ..*self
        };
        self.in_flight > 0.0 && rest.fits(limit, cost)
    }

    /// Whether a call whose worst case is `cost` fits `limit` over these totals: the hard
    /// limit's one test. Inclusive (spent + in flight + this call ≤ limit), and a zero-cost call
    /// still needs the committed money below the limit (a limit of 0 forbids every call).
    pub fn fits(&self, limit: f64, cost: f64) -> bool {
        let used = self.spent + self.held;
        limit.is_finite() && used < limit && used + cost <= limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nothing held is +0.0 (an empty f64 sum is -0.0, which `jobs --json` printed as `-0.0`).
    #[test]
    fn nothing_held_is_a_positive_zero() {
        let none = held_in(std::iter::empty(), "day:2026-11-29");
        assert!(none == 0.0 && none.is_sign_positive());
        let other = held_in([("day:2026-11-28", 0.5)].into_iter(), "day:2026-11-29");
        assert!(other == 0.0 && other.is_sign_positive());
        assert_eq!(
            held_in([("day:2026-11-29", 0.5)].into_iter(), "day:2026-11-29"),
            0.5
        );
        assert!(crate::store::stats::round_usd(-0.0).is_sign_positive());
    }

    /// A period's spend counts while `now` is in it and rolls at UTC boundaries.
    #[test]
    fn period_spend_rolls_at_utc_boundaries() {
        use crate::model::BudgetPeriod;
        let t = |s: &str| {
            chrono::DateTime::parse_from_rfc3339(s)
                .expect("test instant")
                .to_utc()
        };
        let key = BudgetPeriod::Day.key(t("2026-11-29T23:59:59Z"));
        assert_eq!(
            spend_in(
                &key,
                0.7,
                0.7,
                &BudgetPeriod::Day.key(t("2026-11-29T23:59:59Z"))
            ),
            0.7
        );
        assert_eq!(
            spend_in(
                &key,
                0.7,
                0.7,
                &BudgetPeriod::Day.key(t("2026-11-30T00:00:00Z"))
            ),
            0.0
        );
        // 23:30 at UTC-02:00 is already the next UTC day.
        assert_eq!(
            spend_in(
                &key,
                0.7,
                0.7,
                &BudgetPeriod::Day.key(t("2026-11-29T23:30:00-02:00"))
            ),
            0.0
        );
        let wk = BudgetPeriod::Week.key(t("2026-11-29T12:00:00Z")); // a Sunday
        assert_eq!(
            spend_in(
                &wk,
                2.0,
                2.0,
                &BudgetPeriod::Week.key(t("2026-11-30T00:00:00Z"))
            ),
            0.0
        );
        let mo = BudgetPeriod::Month.key(t("2026-11-30T23:59:59Z"));
        assert_eq!(
            spend_in(
                &mo,
                2.0,
                2.0,
                &BudgetPeriod::Month.key(t("2026-12-01T00:00:00Z"))
            ),
            0.0
        );
        assert_eq!(
            spend_in(
                "total",
                9.0,
                9.0,
                &BudgetPeriod::Total.key(t("2030-01-01T00:00:00Z"))
            ),
            9.0
        );
    }

    /// Which periods of another kind share time with a period.
    #[test]
    fn overlapping_keys_name_the_periods_of_other_kinds_sharing_time() {
        let day = overlapping_keys("day:2026-12-01");
        assert_eq!(day, ["total", "week:2026-W49", "month:2026-12"]);
        let week = overlapping_keys("week:2026-W49");
        assert!(week.contains(&"day:2026-11-30".to_string()));
        assert!(week.contains(&"day:2026-12-06".to_string()));
        assert!(!week.contains(&"day:2026-12-07".to_string()));
        assert!(week.contains(&"month:2026-11".to_string()));
        assert!(week.contains(&"month:2026-12".to_string()));
        assert!(!week.iter().any(|k| k.starts_with("week:")));
        let month = overlapping_keys("month:2027-02");
        assert_eq!(month.iter().filter(|k| k.starts_with("day:")).count(), 28);
        assert!(month.contains(&"week:2027-W05".to_string()));
        assert!(month.contains(&"week:2027-W08".to_string()));
        assert!(!month.contains(&"week:2027-W09".to_string()));
        assert!(overlapping_keys("total").is_empty());
        assert!(overlapping_keys("week:junk").is_empty());
        // Same kind: an older period never counts; another kind counts when it overlaps.
        assert!(!counts_in("day:2026-11-30", "day:2026-12-01"));
        assert!(counts_in("day:2026-11-30", "week:2026-W49"));
        assert!(!counts_in("day:2026-11-29", "week:2026-W49"));
        assert!(counts_in("day:2020-01-01", "total"));
    }

    /// `counts_in` decides from the two keys' spans exactly what membership
    /// in `overlapping_keys` decided, for every day, week and month key of 2026–2027 against
    /// every key of late 2025 to early 2028 and keys that do not parse or are not canonical.
    #[test]
    fn counts_in_agrees_with_overlapping_keys_without_listing_them() {
        use crate::model::BudgetPeriod as P;
        let at = |d: chrono::NaiveDate| d.and_time(chrono::NaiveTime::MIN).and_utc();
        let from = chrono::NaiveDate::from_ymd_opt(2025, 12, 1).unwrap();
        let mut booked: Vec<String> = Vec::new();
        for i in 0..(365 * 2 + 90) {
            let d = from + chrono::Duration::days(i);
            for p in [P::Day, P::Week, P::Month] {
                let k = p.key(at(d));
                if !booked.contains(&k) {
                    booked.push(k);
                }
            }
        }
        let odd = [
            "",
            "total",
            "day:",
            "week:junk",
            "month:2026",
            "month:2026-13",
            "week:2026-W54",
            "day:2026-12-1",
            "month:2026-1",
            "week:2026-W1",
            "day:2026-02-30",
            "hour:2026-12-01",
        ];
        booked.extend(odd.iter().map(|s| s.to_string()));
        let mut keys: Vec<String> = booked
            .iter()
            .filter(|k| {
                k.starts_with("week:2026") || k.starts_with("month:2027") || odd.contains(&&***k)
            })
            .cloned()
            .collect();
        keys.extend((0..730).step_by(11).map(|i| {
            P::Day
                .key(at(chrono::NaiveDate::from_ymd_opt(2026, 1, 1).unwrap()
                    + chrono::Duration::days(i)))
        }));
        let mut checked = 0;
        for key in &keys {
            let listed = overlapping_keys(key);
            for b in &booked {
                let kind = |k: &str| k.split(':').next().unwrap_or("").to_string();
                let want = b == key
                    || key == "total"
                    || (kind(b) != kind(key) && listed.iter().any(|k| k == b));
                assert_eq!(counts_in(b, key), want, "booked {b:?} in {key:?}");
                checked += 1;
            }
        }
        assert!(checked > 100_000, "{checked}");
    }
}

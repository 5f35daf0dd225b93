//! Budget reservations (SPEC §11 hard limit): the pure decisions both stores run under their own
//! lock — does a call's worst-case cost fit every budget that applies, record it, settle it.
//!
//! Owns: [`decide`], [`record`], [`settle`], [`absorb_settled`] over `JobCounters::reservations`,
//! and the recount of a job's counters at an edit of the budget's `period` ([`recount`]).
//! Must not touch: I/O and locking (the file store calls these under its exclusive lock, the
//! PostgreSQL store inside one transaction under an advisory lock), prices (the caller passes the
//! worst-case amount, `crate::cost` computes it), clocks (`now` is an argument).
//!
//! How money moves: a call first *reserves* its worst case in the job's record; the amount counts
//! toward the job's and the global budget for every owner at once. When the reply arrives the
//! reservation is *settled* to the real cost (still a reservation, so it keeps counting), and the
//! run's completion moves it into the counters with its history row ([`absorb_settled`]), in the
//! same store write. A call that surely cost nothing is *released*. A call whose outcome is
//! unknown (timeout mid-request, a reply we could not read) is marked *spent* at its worst case.
//!
//! Decisions where the SPEC is silent:
//! - A reservation whose owner died mid-call is never released: it counts as spent at its worst
//!   case until its budget period ends (the money may well have been spent; the budget is a
//!   hard limit, so the uncertainty is charged, not forgiven). Reservations that no longer count
//!   in the current period ([`counts_in`]: an ended period of the same kind, or one of another
//!   kind sharing no time with it) are dropped whenever their job takes a new one.
//! - An edit of the budget's `period` recounts each job's spend in the new period once, at the
//!   `apply` that makes it ([`needs_recount`], [`recount`]): the cost of every history row that
//!   finished inside the new period ([`booked_since`]), read back from history's end only as
//!   far as the period's start (the file store, with [`RECOUNT_SLACK_SECS`] of slack) or
//!   selected by `finished_at` (PostgreSQL); `total` takes the all-time spend. Until then (and
//!   for reservations, which are not rows) a period of another kind that shares time with the
//!   new one counts whole in it ([`counter_spend`]).
//! - An `abandoned` row (shutdown, crash recovery) does not absorb a settled reservation: the row
//!   carries no cost, so the settled amount keeps counting until the period ends.
//! - Money is booked in the period its reservation was made in: a row counted after the period
//!   ended adds its reserved-in-an-older-period amount to the job's total, not to the new
//!   period's spend ([`absorb_settled`] returns it, `logic::count_row` subtracts it), and a live
//!   run's old-period reservation survives the job's next reservation ([`record`]).
//! - Fit is inclusive: spent + in flight + this call ≤ limit; a zero-cost call still needs spend
//!   below the limit (a limit of 0 forbids every call, as in `cost::budget_check`).

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::cost::{period_word, usd};
use crate::model::{HistoryRow, JobRecord, Reservation, ReservationState, Settings, Status};

use super::logic::counter_period;

/// A call asking for money before it is made.
#[derive(Debug, Clone)]
pub struct ReserveRequest<'a> {
    /// The job making the call.
    pub job: &'a str,
    /// The run the call belongs to: its completion absorbs the settled amount.
    pub run_id: Uuid,
    /// The owner making the call (a dead owner's reservations stay spent).
    pub owner: &'a str,
    /// Worst-case cost of the call (`cost::worst_case_usd`).
    pub usd: f64,
    /// When the call is asked for: picks the budget period.
    pub now: DateTime<Utc>,
}

/// Whether the call may go.
#[derive(Debug, Clone, PartialEq)]
pub enum ReserveOutcome {
    /// Made: settle or release it with this id.
    Reserved {
        /// The reservation's id.
        id: Uuid,
    },
    /// Does not fit: the reason names the budget ("budget reached: …").
    Refused {
        /// The skip reason, naming the budget and its figures.
        reason: String,
    },
}

/// How a reserved call ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Settlement {
    /// The reply arrived and cost this much.
    Cost(f64),
    /// The call surely cost nothing (refused before sending, no connection, an error reply).
    Release,
    /// Unknown outcome: keep the worst case as spent.
    Spent,
}

/// A job's committed spend in period `key`: its counters plus every reservation of that period.
pub fn committed(rec: &JobRecord, key: &str) -> (f64, f64) {
    committed_counters(&rec.rt.counters, key)
}

/// [`committed`] from a job's counters alone (the file store's index keeps only those).
pub fn committed_counters(c: &crate::model::JobCounters, key: &str) -> (f64, f64) {
    let spent = counter_spend(c, key);
    let held = c
        .reservations
        .iter()
        .filter(|r| counts_in(&r.period_key, key) && r.usd.is_finite())
        .map(|r| r.usd.max(0.0))
        .sum();
    (spent, held)
}

/// Finite and ≥ 0, else 0.
fn usd_or_zero(v: f64) -> f64 {
    if v.is_finite() { v.max(0.0) } else { 0.0 }
}

/// What a job's counters say it spent in period `key`. Counters of that period count as they
/// are; under `total` the job's all-time spend counts; counters kept under another period kind
/// (the budget's `period` was edited, red team 6) count whole when their period shares any time
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
    /// Held by reservations of calls in flight or of unknown outcome (USD).
    pub held: f64,
}

/// Does `req` fit every budget that applies? `Ok(period key)` or `Err(reason)`.
/// `jobs` is every job in the store (the requesting one included).
pub fn decide<'a>(
    settings: &Settings,
    jobs: impl Iterator<Item = &'a JobRecord>,
    req: &ReserveRequest<'_>,
) -> Result<Result<String, String>, super::StoreError> {
    let key = counter_period(settings).key(req.now);
    let mut global = Totals::default();
    let mut mine = None;
    for rec in jobs {
        let (s, h) = committed(rec, &key);
        global.spent += s;
        global.held += h;
        if rec.def.name == req.job {
            mine = Some((rec.def.max_cost_usd, Totals { spent: s, held: h }));
        }
    }
    let Some((job_limit, job)) = mine else {
        return Err(super::StoreError::NoSuchJob(req.job.to_string()));
    };
    Ok(decide_totals(settings, global, job_limit, job, req))
}

/// [`decide`] over totals the store summed itself (the PostgreSQL store sums in SQL): `global`
/// over every job, `job` for the requesting one, whose limit is `job_limit`.
pub fn decide_totals(
    settings: &Settings,
    global: Totals,
    job_limit: Option<f64>,
    job: Totals,
    req: &ReserveRequest<'_>,
) -> Result<String, String> {
    let period = counter_period(settings);
    let key = period.key(req.now);
    let word = period_word(period);
    let cost = if req.usd.is_finite() && req.usd > 0.0 {
        req.usd
    } else {
        0.0
    };
    let fits = |limit: f64, t: Totals| {
        let used = t.spent + t.held;
        limit.is_finite() && used < limit && used + cost <= limit
    };
    let why = |scope: &str, limit: f64, t: Totals| {
        format!(
            "budget reached: {scope} {}/{word} (spent {}, in flight {}; this call may cost up \
             to {})",
            usd(limit),
            usd(t.spent),
            usd(t.held),
            usd(cost)
        )
    };
    if let Some(b) = settings.budget
        && !fits(b.max_cost_usd, global)
    {
        return Err(why("global", b.max_cost_usd, global));
    }
    if let Some(limit) = job_limit
        && !fits(limit, job)
    {
        return Err(why("job", limit, job));
    }
    Ok(key)
}

/// Record an accepted reservation on the job, dropping its reservations that no longer count in
/// period `key` ([`counts_in`]: ended periods; after a `period` edit, those of the old kind
/// sharing time with the new period stay until it ends) except
/// the requesting run's own and those of runs still live on the job and not yet kept as spent
/// (a run's earlier attempt may still be booked by its row): a call reserved at 23:59:58
/// and settled at 00:00:01 must still find its reservation, so its cost is booked in the day
/// it was reserved in ([`absorb_settled`]), not in the new one.
pub fn record(rec: &mut JobRecord, req: &ReserveRequest<'_>, key: String) -> Uuid {
    let id = Uuid::new_v4();
    let live: Vec<Uuid> = rec.rt.leases().map(|l| l.run_id).collect();
    let rs = &mut rec.rt.counters.reservations;
    rs.retain(|r| {
        counts_in(&r.period_key, &key)
            || r.run_id == req.run_id
            || (r.state != ReservationState::Spent && live.contains(&r.run_id))
    });
    rs.push(Reservation {
        id,
        run_id: req.run_id,
        owner: req.owner.to_string(),
        period_key: key,
        usd: if req.usd.is_finite() && req.usd > 0.0 {
            req.usd
        } else {
            0.0
        },
        state: ReservationState::Reserved,
        at: req.now,
    });
    id
}

/// Apply `how` to reservation `id`; `false` when there was nothing to change (unknown id, e.g.
/// its period already ended and it was dropped).
pub fn settle(rec: &mut JobRecord, id: Uuid, how: Settlement) -> bool {
    let rs = &mut rec.rt.counters.reservations;
    let Some(pos) = rs.iter().position(|r| r.id == id) else {
        return false;
    };
    match how {
        Settlement::Release => {
            rs.remove(pos);
        }
        Settlement::Cost(c) if !(c.is_finite() && c > 0.0) => {
            rs.remove(pos);
        }
        Settlement::Cost(c) => {
            rs[pos].usd = c;
            rs[pos].state = ReservationState::Settled;
        }
        Settlement::Spent => rs[pos].state = ReservationState::Spent,
    }
    true
}

/// A run's row is being counted: its settled reservations leave (the row carries their cost
/// into the counters). Called by `logic::count_row`, so both stores do it in the same write.
/// Returns the amount of those reservations made in a period other than `key` (the current
/// one): that much of the row's cost belongs to the period its call was reserved in, not to
/// `key` (a call reserved before midnight and settled after it).
pub fn absorb_settled(rec: &mut JobRecord, row: &HistoryRow, key: &str) -> f64 {
    if row.status == Status::Abandoned {
        return 0.0;
    }
    let mut elsewhere = 0.0;
    rec.rt.counters.reservations.retain(|r| {
        let mine = r.run_id == row.run_id && r.state == ReservationState::Settled;
        if mine && !counts_in(&r.period_key, key) && r.usd.is_finite() && r.usd > 0.0 {
            elsewhere += r.usd;
        }
        !mine
    });
    elsewhere
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Budget, BudgetPeriod, Trigger};
    use crate::store::logic::tests_support::job;

    use crate::testkit::time::rfc3339 as t;

    fn settings(max: f64) -> Settings {
        Settings {
            budget: Some(Budget {
                max_cost_usd: max,
                period: BudgetPeriod::Day,
            }),
            ..Settings::default()
        }
    }

    fn req(job: &str, run: Uuid, usd: f64, now: DateTime<Utc>) -> ReserveRequest<'_> {
        ReserveRequest {
            job,
            run_id: run,
            owner: "o",
            usd,
            now,
        }
    }

    /// Make `run` a live run of `rec` (as a claim would).
    fn live(rec: &mut JobRecord, run: Uuid, now: DateTime<Utc>) {
        rec.rt.overlap.leases.push(crate::model::Lease {
            owner: "o".into(),
            run_id: run,
            slot: None,
            trigger: Trigger::Manual,
            claimed_at: now,
            lease_until: now + chrono::Duration::seconds(30),
            last_renewed: now,
            spends_job: false,
            coalesced: None,
            cancel_requested_at: None,
            lapsed: false,
            chain: Vec::new(),
        });
    }

    fn try_reserve(
        s: &Settings,
        jobs: &mut [JobRecord],
        i: usize,
        usd: f64,
        now: DateTime<Utc>,
    ) -> Result<Uuid, String> {
        let name = jobs[i].def.name.clone();
        let r = req(&name, Uuid::new_v4(), usd, now);
        let key = decide(s, jobs.iter(), &r).unwrap()?;
        Ok(record(&mut jobs[i], &r, key))
    }

    /// Red team 6: which periods of another kind share time with a period.
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

    /// Task SMALL item 4: `counts_in` decides from the two keys' spans exactly what membership
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

    /// Red team 6 (HIGH): counters kept per day keep counting after the period becomes week,
    /// month or total, and the next row carries them into the new period.
    #[test]
    fn a_period_edit_carries_the_spend_made_inside_the_new_period() {
        let mut r = job("a", t("2026-12-01T10:00:00Z"));
        let now = t("2026-12-01T10:00:00Z");
        let mut row = HistoryRow::new("a", Status::Succeeded, Trigger::Manual, None, "o", now);
        row.cost_usd = 0.02;
        crate::store::logic::count_row(&mut r, &row, BudgetPeriod::Day, now);
        let c = &r.rt.counters;
        assert_eq!(counter_spend(c, &BudgetPeriod::Day.key(now)), 0.02);
        assert_eq!(counter_spend(c, &BudgetPeriod::Week.key(now)), 0.02);
        assert_eq!(counter_spend(c, &BudgetPeriod::Month.key(now)), 0.02);
        assert_eq!(counter_spend(c, "total"), 0.02);
        assert_eq!(counter_spend(c, "day:2026-12-02"), 0.0);
        assert_eq!(counter_spend(c, "week:2026-W50"), 0.0);
        row.cost_usd = 0.01;
        crate::store::logic::count_row(&mut r, &row, BudgetPeriod::Week, now);
        let c = &r.rt.counters;
        assert_eq!(c.period_key, "week:2026-W49");
        assert!((c.period_cost_usd - 0.03).abs() < 1e-12, "{c:?}");
    }

    /// Issue 10 leftovers: the pieces of the recount at a `period` edit.
    #[test]
    fn a_period_edit_recounts_from_rows_that_finished_inside_the_new_period() {
        // 2026-12-03 is a Thursday of ISO week 49 (Monday 11-30).
        let now = t("2026-12-03T10:00:00Z");
        assert_eq!(
            period_start(BudgetPeriod::Day, now),
            Some(t("2026-12-03T00:00:00Z"))
        );
        assert_eq!(
            period_start(BudgetPeriod::Week, now),
            Some(t("2026-11-30T00:00:00Z"))
        );
        assert_eq!(
            period_start(BudgetPeriod::Month, now),
            Some(t("2026-12-01T00:00:00Z"))
        );
        assert_eq!(period_start(BudgetPeriod::Total, now), None);
        // A row counts whole when it finished at or after the start, else not; garbage is 0.
        let start = t("2026-11-30T00:00:00Z");
        assert_eq!(booked_since(t("2026-11-29T23:59:59Z"), 0.5, start), 0.0);
        assert_eq!(booked_since(start, 0.5, start), 0.5);
        assert_eq!(booked_since(now, f64::NAN, start), 0.0);
        assert_eq!(booked_since(now, -1.0, start), 0.0);
        // Counters that rolled past Monday's money under `day` need the recount under `week`;
        // counters already of the new kind, or without money, do not.
        let mut r = job("a", now);
        let mut row = HistoryRow::new("a", Status::Succeeded, Trigger::Manual, None, "o", now);
        row.cost_usd = 0.02;
        crate::store::logic::count_row(&mut r, &row, BudgetPeriod::Day, t("2026-11-30T09:00:00Z"));
        row.cost_usd = 0.0;
        crate::store::logic::count_row(&mut r, &row, BudgetPeriod::Day, now);
        let c = &mut r.rt.counters;
        assert_eq!(
            counter_spend(c, "week:2026-W49"),
            0.0,
            "what the counters forgot"
        );
        assert!(needs_recount(c, "week:2026-W49"));
        assert!(
            !needs_recount(c, "day:2026-12-04"),
            "same kind: a plain rollover"
        );
        assert!(!needs_recount(
            &crate::model::JobCounters::default(),
            "week:2026-W49"
        ));
        assert!(recount(c, "week:2026-W49", 0.02));
        assert_eq!(counter_spend(c, "week:2026-W49"), 0.02);
        assert!(!needs_recount(c, "week:2026-W49"));
        assert!(!recount(c, "week:2026-W49", 0.02), "nothing changes twice");
        // Under `total`: the all-time spend, whatever was booked.
        assert!(recount(c, "total", 0.0));
        assert_eq!((c.period_key.as_str(), c.period_cost_usd), ("total", 0.02));
    }

    /// After a day → week edit, a settled reservation made under the old day is inside the
    /// week: its row books its cost into the week (it was subtracted as "another period's"),
    /// and the job's next reservation keeps it (it was dropped as "ended").
    #[test]
    fn an_old_kind_reservation_inside_the_new_period_keeps_counting() {
        let mon = t("2026-11-30T10:00:00Z");
        let tue = t("2026-12-01T10:00:00Z");
        let mut s = settings(1.0);
        let mut jobs = vec![job("a", mon)];
        let run = Uuid::new_v4();
        live(&mut jobs[0], run, mon);
        let r = req("a", run, 0.2, mon);
        let key = decide(&s, jobs.iter(), &r).unwrap().unwrap();
        let id = record(&mut jobs[0], &r, key);
        settle(&mut jobs[0], id, Settlement::Cost(0.1));
        // A call of a run whose owner died, its outcome unknown: spent for its period.
        let dead = try_reserve(&s, &mut jobs, 0, 0.05, mon).unwrap();
        settle(&mut jobs[0], dead, Settlement::Spent);
        s.budget = Some(Budget {
            max_cost_usd: 1.0,
            period: BudgetPeriod::Week,
        });
        // Another call on Tuesday, under `week`: Monday's amounts stay (inside the week).
        try_reserve(&s, &mut jobs, 0, 0.3, tue).unwrap();
        assert_eq!(jobs[0].rt.counters.reservations.len(), 3);
        let (spent, held) = committed(&jobs[0], "week:2026-W49");
        assert!(
            spent == 0.0 && (held - 0.45).abs() < 1e-12,
            "{spent} {held}"
        );
        // Monday's run ends on Tuesday: its $0.10 is booked in the week.
        let mut row = HistoryRow::new("a", Status::Succeeded, Trigger::Manual, None, "o", tue);
        row.run_id = run;
        row.cost_usd = 0.1;
        crate::store::logic::count_row(&mut jobs[0], &row, BudgetPeriod::Week, tue);
        let (spent, held) = committed(&jobs[0], "week:2026-W49");
        assert!(
            (spent - 0.1).abs() < 1e-12 && (held - 0.35).abs() < 1e-12,
            "{spent} {held}"
        );
        // Next week, Monday's spent reservation has ended and leaves at the next call.
        try_reserve(&s, &mut jobs, 0, 0.0, t("2026-12-07T10:00:00Z")).unwrap();
        assert!(
            jobs[0]
                .rt
                .counters
                .reservations
                .iter()
                .all(|r| r.id != dead)
        );
    }

    #[test]
    fn reservations_in_flight_count_against_every_budget() {
        let now = t("2026-11-30T12:00:00Z");
        let s = settings(0.001);
        let mut jobs = vec![job("a", now), job("b", now)];
        // Six calls of $0.0004 worst case at once: only two fit under $0.001 (issue 11 spent
        // $0.0027 of it).
        let ok: Vec<_> = (0..6)
            .map(|i| try_reserve(&s, &mut jobs, i % 2, 0.0004, now))
            .collect();
        assert_eq!(ok.iter().filter(|r| r.is_ok()).count(), 2, "{ok:?}");
        let refused = ok.iter().find_map(|r| r.clone().err()).unwrap();
        assert!(
            refused
                .starts_with("budget reached: global $0.001/day (spent $0.00, in flight $0.0008"),
            "{refused}"
        );
    }

    #[test]
    fn settle_release_and_spent() {
        let now = t("2026-11-30T12:00:00Z");
        let s = settings(1.0);
        let mut jobs = vec![job("a", now)];
        let a = try_reserve(&s, &mut jobs, 0, 0.5, now).unwrap();
        let b = try_reserve(&s, &mut jobs, 0, 0.5, now).unwrap();
        assert!(try_reserve(&s, &mut jobs, 0, 0.01, now).is_err(), "full");
        assert!(settle(&mut jobs[0], a, Settlement::Release));
        assert!(settle(&mut jobs[0], b, Settlement::Cost(0.1)));
        let key = BudgetPeriod::Day.key(now);
        assert_eq!(committed(&jobs[0], &key), (0.0, 0.1));
        let c = try_reserve(&s, &mut jobs, 0, 0.3, now).unwrap();
        assert!(settle(&mut jobs[0], c, Settlement::Spent));
        let (_, held) = committed(&jobs[0], &key);
        assert!((held - 0.4).abs() < 1e-12);
        assert!(!settle(&mut jobs[0], Uuid::new_v4(), Settlement::Release));
        // A zero cost settles by leaving.
        let d = try_reserve(&s, &mut jobs, 0, 0.1, now).unwrap();
        assert!(settle(&mut jobs[0], d, Settlement::Cost(0.0)));
        assert_eq!(jobs[0].rt.counters.reservations.len(), 2);
    }

    #[test]
    fn completion_absorbs_settled_but_an_abandoned_row_does_not() {
        let now = t("2026-11-30T12:00:00Z");
        let s = settings(1.0);
        let mut jobs = [job("a", now)];
        let run = Uuid::new_v4();
        let r = req("a", run, 0.2, now);
        let key = decide(&s, jobs.iter(), &r).unwrap().unwrap();
        let id = record(&mut jobs[0], &r, key);
        settle(&mut jobs[0], id, Settlement::Cost(0.05));
        let mut row = HistoryRow::new("a", Status::Abandoned, Trigger::Schedule, None, "o", now);
        row.run_id = run;
        absorb_settled(&mut jobs[0], &row, &BudgetPeriod::Day.key(now));
        assert_eq!(jobs[0].rt.counters.reservations.len(), 1);
        row.status = Status::Succeeded;
        absorb_settled(&mut jobs[0], &row, &BudgetPeriod::Day.key(now));
        assert!(jobs[0].rt.counters.reservations.is_empty());
    }

    /// Red team 5 (HIGH): calls reserved at 23:59:58 settled after midnight were booked into
    /// the new day after its budget had been filled by new calls (168 % of the limit). Each
    /// call's cost is booked in the period its reservation was made in, so neither day passes
    /// its limit.
    #[test]
    fn a_call_straddling_midnight_is_booked_in_the_day_it_was_reserved() {
        use crate::store::logic::count_row;
        let before = t("2026-12-01T23:59:58Z");
        let after = t("2026-12-02T00:00:00Z");
        let settled_at = t("2026-12-02T00:00:01Z");
        let s = settings(0.05);
        let mut jobs = vec![job("a", before), job("b", before)];
        // Day D: four calls of $0.0108 fill it (a fifth does not fit).
        let mut old = Vec::new();
        for i in 0..4 {
            let run = Uuid::new_v4();
            live(&mut jobs[i % 2], run, before);
            let r = req(if i % 2 == 0 { "a" } else { "b" }, run, 0.0108, before);
            let key = decide(&s, jobs.iter(), &r).unwrap().unwrap();
            let id = record(&mut jobs[i % 2], &r, key);
            old.push((i % 2, run, id));
        }
        assert!(try_reserve(&s, &mut jobs, 0, 0.0108, before).is_err());
        // Day D+1: its budget is empty, four new calls fit, and taking them must not drop the
        // in-flight reservations of day D.
        for i in 0..4 {
            try_reserve(&s, &mut jobs, i % 2, 0.0108, after).unwrap();
        }
        assert_eq!(
            jobs[0].rt.counters.reservations.len(),
            4,
            "D's in-flight kept"
        );
        // D's calls settle after midnight at $0.0105 and their rows are counted.
        for (j, run, id) in old {
            assert!(settle(&mut jobs[j], id, Settlement::Cost(0.0105)));
            let mut row = HistoryRow::new(
                "a",
                Status::Succeeded,
                Trigger::Schedule,
                None,
                "o",
                settled_at,
            );
            row.run_id = run;
            row.cost_usd = 0.0105;
            count_row(&mut jobs[j], &row, BudgetPeriod::Day, settled_at);
        }
        let key = BudgetPeriod::Day.key(settled_at);
        let (mut spent, mut held) = (0.0, 0.0);
        for j in &jobs {
            let (s, h) = committed(j, &key);
            spent += s;
            held += h;
            // The money is still in the job's all-time total.
            assert!((j.rt.counters.total_cost_usd - 0.021).abs() < 1e-12);
        }
        assert_eq!(spent, 0.0, "nothing of day D booked into D+1");
        assert!((held - 4.0 * 0.0108).abs() < 1e-12);
        assert!(spent + held <= 0.05);
        // A new call on D+1 is still refused: D+1 is full with its own calls only.
        assert!(try_reserve(&s, &mut jobs, 0, 0.0108, settled_at).is_err());
        // An old-period reservation of a run no longer live (its owner died mid-call) is
        // dropped when its job takes a new one; the current period's stay.
        let now = t("2026-12-02T00:00:02Z");
        jobs[0].rt.counters.reservations[0].period_key = "day:2026-11-01".into();
        let live_run = jobs[0].rt.counters.reservations[0].run_id;
        live(&mut jobs[0], live_run, now);
        let r = req("a", Uuid::new_v4(), 0.0, now);
        record(&mut jobs[0], &r, key.clone());
        assert_eq!(
            jobs[0].rt.counters.reservations.len(),
            3,
            "a live run's old one stays"
        );
        jobs[0].rt.overlap.leases.clear();
        record(&mut jobs[0], &r, key);
        let rs = &jobs[0].rt.counters.reservations;
        assert_eq!(rs.len(), 3, "{rs:?}");
        assert!(rs.iter().all(|r| r.period_key != "day:2026-11-01"));
    }

    #[test]
    fn per_job_limit_and_old_periods() {
        let now = t("2026-11-30T23:59:00Z");
        let mut s = settings(10.0);
        s.budget = None;
        let mut jobs = vec![job("a", now), job("b", now)];
        jobs[0].def.max_cost_usd = Some(0.01);
        try_reserve(&s, &mut jobs, 0, 0.01, now).unwrap();
        let e = try_reserve(&s, &mut jobs, 0, 0.001, now).unwrap_err();
        assert!(e.starts_with("budget reached: job $0.01/day"), "{e}");
        // No global budget: another job is unlimited.
        try_reserve(&s, &mut jobs, 1, 1e6, now).unwrap();
        // Next day the old reservation no longer counts and is dropped on the next record.
        let tomorrow = t("2026-12-01T00:00:01Z");
        try_reserve(&s, &mut jobs, 0, 0.01, tomorrow).unwrap();
        assert_eq!(jobs[0].rt.counters.reservations.len(), 1);
        // A zero limit forbids even a free call; NaN never fits.
        jobs[1].def.max_cost_usd = Some(0.0);
        assert!(try_reserve(&s, &mut jobs, 1, 0.0, tomorrow).is_err());
        jobs[1].def.max_cost_usd = Some(f64::NAN);
        assert!(try_reserve(&s, &mut jobs, 1, 0.0, tomorrow).is_err());
        let r = req("nope", Uuid::new_v4(), 0.0, now);
        assert!(decide(&s, jobs.iter(), &r).is_err());
    }
}

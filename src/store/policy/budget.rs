//! Budget reservations, the hard limit on model spend: the decisions both stores run under their
//! own lock. Does a call's worst-case cost fit every budget that applies; record it; settle it;
//! move it into the counters with the run's row.
//!
//! Owns: [`decide`], [`record`], [`settle`], [`absorb_settled`] over `JobCounters::reservations`.
//! A reservation is one call's worth of money, keyed by its id and tagged with its run: a run
//! may hold any number of them (one per model call, or per turn of an agent), each settled on its
//! own, all absorbed by the run's completion. Must not touch: I/O and locking (the file store
//! calls these under its exclusive lock, the PostgreSQL store inside one transaction under an
//! advisory lock), prices (the caller passes the worst-case amount, `crate::cost` computes it),
//! clocks (`now` is an argument). The arithmetic of periods is `store::rules::period`.
//!
//! How money moves: a call first *reserves* its worst case in the job's record; the amount counts
//! toward the job's and the global budget for every owner at once. When the reply arrives the
//! reservation is *settled* to the real cost (still a reservation, so it keeps counting), and the
//! run's completion moves it into the counters with its history row ([`absorb_settled`]), in the
//! same store write. A call that surely cost nothing is *released*. A call whose outcome is
//! unknown (timeout mid-request, a reply that cannot be read) is marked *spent* at its worst case.
//!
//! Decisions:
//! - A reservation whose owner died mid-call is never released: it counts as spent at its worst
//!   case until its budget period ends (the money may well have been spent; the budget is a
//!   hard limit, so the uncertainty is charged, not forgiven). Reservations that no longer count
//!   in the current period ([`counts_in`]: an ended period of the same kind, or one of another
//!   kind sharing no time with it) are dropped whenever their job takes a new one.
//! - Money shown = money counted: an `abandoned` row (shutdown, crash recovery: its outcome is
//!   unknown), and the row of a run an operator cancelled (its action was dropped mid-way),
//!   carry every reservation of their run and take them into the counters: the
//!   settled calls at their real cost, a call or turn still in flight, or of unknown outcome,
//!   at its worst case. So the row, `stats`, `jobs` and the console show what the budget
//!   counts, and a dead owner's call stops "holding" money that is then counted as spent. A
//!   late end of the same run (its owner was paused, not dead) replaces that amount with its
//!   real cost (`counters::unbook`), never adds to it.
//! - Money is booked in the period its reservation was made in: a row counted after the period
//!   ended adds its reserved-in-an-older-period amount to the job's total, not to the new
//!   period's spend ([`absorb_settled`] returns it, `count_row` subtracts it), and a live run's
//!   old-period reservation survives the job's next reservation ([`record`]).
//! - A started tool loop keeps its next turn's expected worst case set aside between turns
//!   ([`set_aside`], a reservation marked `next_turn`): held for every decision but its own
//!   run's and other started runs' later turns, so new runs' first turns cannot starve started
//!   runs (`plan::step`). Never spent: [`absorb_settled`] drops it without carrying it.
//! - Fit is inclusive: spent + in flight + this call ≤ limit; a zero-cost call still needs spend
//!   below the limit (a limit of 0 forbids every call, as in `cost::budget_check`).

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::cost::budget_period;
use crate::model::{HistoryRow, JobRecord, Reservation, ReservationState, Settings, Status};

use crate::store::rules::period::{Totals, counts_in};

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

/// Does `req` fit every budget that applies, over totals the store summed: `global`
/// over every job, `job` for the requesting one, whose limit is `job_limit`.
pub fn decide_totals(
    settings: &Settings,
    global: Totals,
    job_limit: Option<f64>,
    job: Totals,
    req: &ReserveRequest<'_>,
) -> Result<String, String> {
    let period = budget_period(settings);
    let key = period.key(req.now);
    let cost = if req.usd.is_finite() && req.usd > 0.0 {
        req.usd
    } else {
        0.0
    };
    let fits = |limit: f64, t: Totals| t.fits(limit, cost);
    // A limit below the call itself can never pay for it (waiting does not help): said apart
    // from a limit whose rest this period does not cover it.
    let why = |scope: &str, limit: f64, t: Totals| {
        if limit.is_finite() && cost > limit {
            crate::cost::too_small_reason(scope, limit, period, cost)
        } else {
            crate::cost::reached_reason(scope, limit, period, t.spent, t.held, cost)
        }
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

/// Whether a call of worst case `cost` that [`decide_totals`] refused over `global` and `job`
/// would fit every budget that applies once the calls in flight elsewhere ended at no cost
/// (`Totals::fits_after_in_flight`): a started tool loop's later turn then waits for them
/// rather than failing.
pub fn may_wait(
    settings: &Settings,
    global: Totals,
    job_limit: Option<f64>,
    job: Totals,
    cost: f64,
) -> bool {
    let cost = if cost.is_finite() && cost > 0.0 {
        cost
    } else {
        0.0
    };
    let ok = |limit: f64, t: Totals| t.fits(limit, cost) || t.fits_after_in_flight(limit, cost);
    settings.budget.is_none_or(|b| ok(b.max_cost_usd, global))
        && job_limit.is_none_or(|l| ok(l, job))
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
        next_turn: false,
    });
    id
}

/// Give back what `run` set aside for its next turn: its next turn is being reserved (it may
/// use that money first), or the run ended.
pub fn release_set_aside(rec: &mut JobRecord, run: Uuid) {
    rec.rt
        .counters
        .reservations
        .retain(|r| !(r.next_turn && r.run_id == run));
}

/// Keep `usd` (at most what every budget that applies has left over `global` and `job`,
/// whose totals no longer count the run's earlier set-aside) for the next turn of
/// `req.run_id`, replacing what it kept before. A started tool loop does this when a turn's
/// reply asks for tools: while they run, a new run's first turn cannot take the money its next
/// turn will need (the module doc). Nothing is kept when no budget applies or nothing is left.
pub fn set_aside(
    settings: &Settings,
    rec: &mut JobRecord,
    global: Totals,
    job: Totals,
    req: &ReserveRequest<'_>,
) {
    release_set_aside(rec, req.run_id);
    let left = |limit: f64, t: Totals| {
        if limit.is_finite() {
            (limit - t.spent - t.held).max(0.0)
        } else {
            0.0
        }
    };
    let mut room = f64::INFINITY;
    if let Some(b) = settings.budget {
        room = room.min(left(b.max_cost_usd, global));
    }
    if let Some(limit) = rec.def.max_cost_usd {
        room = room.min(left(limit, job));
    }
    let want = if req.usd.is_finite() { req.usd } else { 0.0 };
    let usd = want.min(room);
    if !(usd.is_finite() && usd > 0.0) {
        return;
    }
    rec.rt.counters.reservations.push(Reservation {
        id: Uuid::new_v4(),
        run_id: req.run_id,
        owner: req.owner.to_string(),
        period_key: budget_period(settings).key(req.now),
        usd,
        state: ReservationState::Reserved,
        at: req.now,
        next_turn: true,
    });
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

/// What a row took out of its job's reservations ([`absorb_settled`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Absorbed {
    /// Every amount taken (an `abandoned` row carries exactly this).
    pub carried: f64,
    /// The part of `carried` reserved in a period other than the current one.
    pub elsewhere: f64,
}

/// The row of a run cut short — `abandoned` (shutdown, crash recovery) or stopped by an
/// operator's cancel ([`HistoryRow::cut_short`]) — carries every reservation of its run: its
/// action never reached the point where it books its own cost.
pub fn carries_every_reservation(row: &HistoryRow) -> bool {
    row.status == Status::Abandoned || row.cut_short
}

/// A run's row is being counted: the reservations it carries leave (the row carries their
/// cost into the counters). A finished run's row carries its settled ones (its cost is already
/// on the row); the row of a run cut short ([`carries_every_reservation`]) carries every one of
/// its run, whatever its state (see the module doc). Called by
/// `crate::store::policy::counters::count_row`, so both stores do it in the same write.
/// `elsewhere` is the amount of those reservations made in a period other than `key` (the
/// current one): that much of the row's cost belongs to the period its call was reserved in,
/// not to `key` (a call reserved before midnight and settled after it).
pub fn absorb_settled(rec: &mut JobRecord, row: &HistoryRow, key: &str) -> Absorbed {
    let unknown = carries_every_reservation(row);
    let mut out = Absorbed::default();
    rec.rt.counters.reservations.retain(|r| {
        if r.next_turn && r.run_id == row.run_id {
            // Kept for a next turn that never came: nothing was spent.
            return false;
        }
        let mine = r.run_id == row.run_id && (unknown || r.state == ReservationState::Settled);
        if mine && r.usd.is_finite() && r.usd > 0.0 {
            out.carried += r.usd;
            if !counts_in(&r.period_key, key) {
                out.elsewhere += r.usd;
            }
        }
        !mine
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Budget, BudgetPeriod, Trigger};
    use crate::store::OperationError;
    use crate::store::StoreError;
    use crate::store::policy::define::tests_support::job;
    use crate::store::rules::period::*;

    use crate::testkit::time::rfc3339 as t;

    /// Does `req` fit every budget that applies? `Ok(period key)` or `Err(reason)`.
    /// `jobs` is every job in the store (the requesting one included).
    fn decide<'a>(
        settings: &Settings,
        jobs: impl Iterator<Item = &'a JobRecord>,
        req: &ReserveRequest<'_>,
    ) -> Result<Result<String, String>, StoreError> {
        let key = budget_period(settings).key(req.now);
        let mut global = Totals::default();
        let mut mine = None;
        for rec in jobs {
            global.add(&rec.rt.counters, &key);
            if rec.def.name == req.job {
                let (spent, held) = committed(rec, &key);
                mine = Some((
                    rec.def.max_cost_usd,
                    Totals {
                        spent,
                        held,
                        ..Default::default()
                    },
                ));
            }
        }
        let Some((job_limit, job)) = mine else {
            return Err(StoreError::Operation(OperationError::NoSuchJob(
                req.job.to_string(),
            )));
        };
        Ok(decide_totals(settings, global, job_limit, job, req))
    }

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
            awaiting: None,
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

    /// Counters kept per day keep counting after the period becomes week,
    /// month or total, and the next row carries them into the new period.
    #[test]
    fn a_period_edit_carries_the_spend_made_inside_the_new_period() {
        let mut r = job("a", t("2026-12-01T10:00:00Z"));
        let now = t("2026-12-01T10:00:00Z");
        let mut row = HistoryRow::new("a", Status::Succeeded, Trigger::Manual, None, "o", now);
        row.cost_usd = 0.02;
        crate::store::policy::counters::count_row(&mut r, &mut row, BudgetPeriod::Day, now);
        let c = &r.rt.counters;
        assert_eq!(counter_spend(c, &BudgetPeriod::Day.key(now)), 0.02);
        assert_eq!(counter_spend(c, &BudgetPeriod::Week.key(now)), 0.02);
        assert_eq!(counter_spend(c, &BudgetPeriod::Month.key(now)), 0.02);
        assert_eq!(counter_spend(c, "total"), 0.02);
        assert_eq!(counter_spend(c, "day:2026-12-02"), 0.0);
        assert_eq!(counter_spend(c, "week:2026-W50"), 0.0);
        row.cost_usd = 0.01;
        crate::store::policy::counters::count_row(&mut r, &mut row, BudgetPeriod::Week, now);
        let c = &r.rt.counters;
        assert_eq!(c.period_key, "week:2026-W49");
        assert!((c.period_cost_usd - 0.03).abs() < 1e-12, "{c:?}");
    }

    /// The pieces of the recount at a `period` edit.
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
        crate::store::policy::counters::count_row(
            &mut r,
            &mut row,
            BudgetPeriod::Day,
            t("2026-11-30T09:00:00Z"),
        );
        row.cost_usd = 0.0;
        crate::store::policy::counters::count_row(&mut r, &mut row, BudgetPeriod::Day, now);
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
        crate::store::policy::counters::count_row(&mut jobs[0], &mut row, BudgetPeriod::Week, tue);
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
        // Six calls of $0.0004 worst case at once: only two fit under $0.001 (checking
        // spend alone once let such calls spend $0.0027 of it).
        let ok: Vec<_> = (0..6)
            .map(|i| try_reserve(&s, &mut jobs, i % 2, 0.0004, now))
            .collect();
        assert_eq!(ok.iter().filter(|r| r.is_ok()).count(), 2, "{ok:?}");
        let refused = ok.iter().find_map(|r| r.clone().err()).unwrap();
        assert!(
            refused.starts_with(
                "budget reached: global $0.001/day, $0.0002 left (spent $0.00, in flight $0.0008)"
            ),
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

    /// A finished run's row takes its settled reservations (its cost is on the row); an
    /// `abandoned` row takes every reservation of its run, whatever its state, and carries
    /// their sum: the settled call at its real cost, the call in flight and the call of
    /// unknown outcome at their worst case. Another run's reservation stays.
    #[test]
    fn an_abandoned_row_carries_every_reservation_of_its_run() {
        use crate::store::policy::counters::count_row;
        let now = t("2026-11-30T12:00:00Z");
        let s = settings(1.0);
        let mut jobs = [job("a", now)];
        let (run, other) = (Uuid::new_v4(), Uuid::new_v4());
        let mut take = |run: Uuid, usd: f64| {
            let r = req("a", run, usd, now);
            let key = decide(&s, jobs.iter(), &r).unwrap().unwrap();
            record(&mut jobs[0], &r, key)
        };
        let settled = take(run, 0.2);
        let unknown = take(run, 0.03);
        let _in_flight = take(run, 0.004);
        let _others = take(other, 0.5);
        settle(&mut jobs[0], settled, Settlement::Cost(0.05));
        settle(&mut jobs[0], unknown, Settlement::Spent);
        let key = BudgetPeriod::Day.key(now);
        let before = committed(&jobs[0], &key);
        assert!((before.0 + before.1 - 0.584).abs() < 1e-12, "{before:?}");
        let mut row = HistoryRow::new("a", Status::Abandoned, Trigger::Schedule, None, "o", now);
        row.run_id = run;
        let booked = count_row(&mut jobs[0], &mut row, BudgetPeriod::Day, now);
        assert!((row.cost_usd - 0.084).abs() < 1e-12, "{}", row.cost_usd);
        assert!((booked - 0.084).abs() < 1e-12);
        assert_eq!(
            jobs[0].rt.counters.reservations.len(),
            1,
            "the other run's stays"
        );
        // Nothing moved but where it is counted: spent now, no longer in flight.
        let after = committed(&jobs[0], &key);
        assert!(
            (after.0 - 0.084).abs() < 1e-12 && (after.1 - 0.5).abs() < 1e-12,
            "{after:?}"
        );
        // A finished run's row takes only its settled ones.
        let mut jobs = [job("a", now)];
        let r = req("a", run, 0.2, now);
        let key = decide(&s, jobs.iter(), &r).unwrap().unwrap();
        let id = record(&mut jobs[0], &r, key.clone());
        settle(&mut jobs[0], id, Settlement::Cost(0.05));
        let spent_one = record(&mut jobs[0], &req("a", run, 0.01, now), key.clone());
        settle(&mut jobs[0], spent_one, Settlement::Spent);
        row.status = Status::Succeeded;
        row.cost_usd = 0.05;
        let a = absorb_settled(&mut jobs[0], &row, &key);
        assert_eq!(a.carried, 0.05);
        assert_eq!(
            jobs[0].rt.counters.reservations.len(),
            1,
            "the spent one stays held"
        );
    }

    /// Calls reserved at 23:59:58 settled after midnight were booked into
    /// the new day after its budget had been filled by new calls (168 % of the limit). Each
    /// call's cost is booked in the period its reservation was made in, so neither day passes
    /// its limit.
    #[test]
    fn a_call_straddling_midnight_is_booked_in_the_day_it_was_reserved() {
        use crate::store::policy::counters::count_row;
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
            count_row(&mut jobs[j], &mut row, BudgetPeriod::Day, settled_at);
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

//! One step of a running tool loop on its job's record: the lease renewed, the previous
//! turn's reservation settled, the next turn's worst case reserved — decided together, so a
//! store writes them (with the record's transcript delta) as one write.
//!
//! Owns: [`LoopStep`], [`StepOutcome`], [`step`]. Must not touch: I/O, locks, clocks; where a
//! store keeps the transcript delta (each store appends it in the same write); the budget
//! arithmetic (`policy::budget`).
//!
//! Decisions:
//! - A run that lost its lease changes nothing: no settlement, no reservation, no delta. Its
//!   reservations stay counted as they are (never under-counted), as a dead owner's do.
//! - The settlement comes first, so the reservation that follows is judged against the
//!   previous turn's real cost, not its worst case.
//! - A refused reservation still renews and settles: the run goes on to record its end.
//! - Started runs come before new ones: a step that settles a turn whose reply asked for tools
//!   keeps the next turn's expected worst case set aside (as much of it as the budgets have
//!   left), counted as held by everyone else, until the run's next turn reserves (it uses that
//!   money first) or the run ends. So concurrent new runs' first turns cannot starve a started
//!   run's later turns. A started run's later turn is judged without the money other started
//!   runs keep (among started runs the first to ask is served); refused while calls elsewhere
//!   are in flight whose end would let it fit, it may ask again (`may_wait`), its need kept
//!   set aside meanwhile.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::model::{AwaitingApproval, JobRecord, ReservationState, Settings};
use crate::store::policy::budget::{self, ReserveOutcome, ReserveRequest, Settlement};
use crate::store::rules::period::{Totals, totals_of};
use crate::store::rules::runtime::renew;
use crate::transcript::Delta;

/// What a tool loop writes at a step: before a turn (settle the last one, reserve this one),
/// before a call is dispatched (settle, the call recorded as `dispatched`).
#[derive(Debug, Clone)]
pub struct LoopStep<'a> {
    /// The job.
    pub job: &'a str,
    /// The run (the fence: only the run holding the lease steps).
    pub run_id: Uuid,
    /// The run's owner.
    pub owner: &'a str,
    /// The previous turn's reservation and how it ended.
    pub settle: Option<(Uuid, Settlement)>,
    /// The next turn's worst case, to reserve against every budget that applies.
    pub reserve: Option<f64>,
    /// What the run's next turn is expected to cost at worst, to keep set aside for it while
    /// its tools run (`budget::set_aside`); ignored when the step also reserves.
    pub set_aside: Option<f64>,
    /// What the run's transcript gained since its last step.
    pub record: &'a [Delta],
    /// A call of the run begins or ends its wait for an operator's approval.
    pub awaiting: AwaitStep,
    /// When.
    pub now: DateTime<Utc>,
}

/// What a step does to the run's wait for approval.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum AwaitStep {
    /// Leave it as it is.
    #[default]
    Keep,
    /// A call begins to wait (the run is awaiting approval until the wait is cleared).
    Begin(AwaitingApproval),
    /// The wait ended (answered or timed out).
    End,
}

/// What a step did.
#[derive(Debug, Clone, PartialEq)]
pub enum StepOutcome {
    /// The lease is the run's and now ends at `lease_until`; `reserved` answers the
    /// reservation asked for (`None`: none was asked).
    Stepped {
        /// The lease's new end.
        lease_until: DateTime<Utc>,
        /// The reservation's answer.
        reserved: Option<ReserveOutcome>,
        /// The reservation of a started run's later turn was refused, yet would fit once the
        /// calls in flight elsewhere end: asking again later may let it through (the money it
        /// asked for is kept set aside meanwhile, so no new run takes what frees up).
        may_wait: bool,
    },
    /// Another run holds the job now (the lease expired and was recovered): nothing written.
    Lost,
}

/// Apply `s` to `rec` (see the module doc). `others` is every other job's committed money in
/// the current budget period. `None` when the run lost its lease (`rec` unchanged).
pub fn step(
    settings: &Settings,
    rec: &mut JobRecord,
    others: Totals,
    s: &LoopStep<'_>,
) -> Option<StepOutcome> {
    let lease_until = renew(rec, s.run_id, s.now)?;
    if let Some(lease) = rec.rt.lease_of_mut(s.run_id) {
        match &s.awaiting {
            AwaitStep::Keep => {}
            AwaitStep::Begin(a) => lease.awaiting = Some(a.clone()),
            AwaitStep::End => lease.awaiting = None,
        }
    }
    if let Some((id, how)) = s.settle {
        budget::settle(rec, id, how);
    }
    // A run that paid for a turn (settled or kept as spent) or keeps money for its next one
    // has started: its later turns come before new runs' first turns.
    let started =
        rec.rt.counters.reservations.iter().any(|r| {
            r.run_id == s.run_id && (r.next_turn || r.state != ReservationState::Reserved)
        });
    if s.reserve.is_some() || s.set_aside.is_some() {
        // What the run kept for this turn is its own first.
        budget::release_set_aside(rec, s.run_id);
    }
    let key = crate::cost::budget_period(settings).key(s.now);
    let totals = |rec: &JobRecord| {
        let mine = totals_of(&rec.rt.counters, &key);
        (others.plus(mine), mine)
    };
    let req = |usd: f64| ReserveRequest {
        job: s.job,
        run_id: s.run_id,
        owner: s.owner,
        usd,
        now: s.now,
    };
    let mut may_wait = false;
    let reserved = s.reserve.map(|usd| {
        let (global, mine) = totals(rec);
        let (mut g, mut m) = if started {
            (global.for_later_turn(), mine.for_later_turn())
        } else {
            (global, mine)
        };
        // Only calls of other runs end while this one waits.
        let own = own_in_flight(rec, s.run_id, &key);
        g.in_flight = (g.in_flight - own).max(0.0);
        m.in_flight = (m.in_flight - own).max(0.0);
        let req = req(usd);
        match budget::decide_totals(settings, g, rec.def.max_cost_usd, m, &req) {
            Ok(key) => ReserveOutcome::Reserved {
                id: budget::record(rec, &req, key),
            },
            Err(reason) => {
                may_wait = started && budget::may_wait(settings, g, rec.def.max_cost_usd, m, usd);
                if may_wait {
                    budget::set_aside(settings, rec, global, mine, &req);
                }
                ReserveOutcome::Refused { reason }
            }
        }
    });
    if let (None, Some(usd)) = (s.reserve, s.set_aside) {
        let (global, mine) = totals(rec);
        budget::set_aside(settings, rec, global, mine, &req(usd));
    }
    Some(StepOutcome::Stepped {
        lease_until,
        reserved,
        may_wait,
    })
}

/// What `run`'s own calls in flight hold in period `key`.
fn own_in_flight(rec: &JobRecord, run: uuid::Uuid, key: &str) -> f64 {
    crate::store::rules::period::held_in(
        rec.rt
            .counters
            .reservations
            .iter()
            .filter(|r| r.run_id == run && !r.next_turn && r.state == ReservationState::Reserved)
            .map(|r| (r.period_key.as_str(), r.usd)),
        key,
    )
}

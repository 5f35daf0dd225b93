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

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::model::{AwaitingApproval, JobRecord, Settings};
use crate::store::policy::budget::{self, ReserveOutcome, ReserveRequest, Settlement};
use crate::store::rules::period::{Totals, committed};
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
    let reserved = s.reserve.map(|usd| {
        let req = ReserveRequest {
            job: s.job,
            run_id: s.run_id,
            owner: s.owner,
            usd,
            now: s.now,
        };
        let key = crate::cost::budget_period(settings).key(s.now);
        let (spent, held) = committed(rec, &key);
        let mine = Totals { spent, held };
        let global = Totals {
            spent: others.spent + spent,
            held: others.held + held,
        };
        match budget::decide_totals(settings, global, rec.def.max_cost_usd, mine, &req) {
            Ok(key) => ReserveOutcome::Reserved {
                id: budget::record(rec, &req, key),
            },
            Err(reason) => ReserveOutcome::Refused { reason },
        }
    });
    Some(StepOutcome::Stepped {
        lease_until,
        reserved,
    })
}

//! The primitive mutations of a job record's runtime, which every policy composes: take a lease
//! for a claim (the fencing token is the run id), renew it, tell whether a run still holds it,
//! retire the job.
//!
//! Owns: `claim`, [`renew`], [`holds`], [`lapsed`], the expired leases a claim may recover,
//! `retire`, and the values a look at a record returns ([`ClaimPlan`], [`Evaluation`]).
//! Must not touch: the decision whether to claim, recover or retire (`store::policy`,
//! `store::plan`), I/O, clocks.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::slots::secs_f64;
use crate::model::{AbandonedRun, HistoryRow, JobRecord, JobRuntime, Lease, SlotRange, Trigger};
use crate::schedule::Compiled;

/// A claim decided for a job; the record already carries the lease.
#[derive(Debug, Clone)]
pub struct ClaimPlan {
    /// The run's id: the lease's fencing token.
    pub run_id: Uuid,
    /// The slot the run stands for (`None` for a manual run).
    pub slot: Option<DateTime<Utc>>,
    /// Why the run happens.
    pub trigger: Trigger,
    /// When the lease expires unless renewed.
    pub lease_until: DateTime<Utc>,
    /// The overdue slots this fire stands for, when it coalesced several.
    pub coalesced: Option<SlotRange>,
}

/// The result of looking at one unleased job during `claim_due`.
#[derive(Debug, Clone, Default)]
pub struct Evaluation {
    /// The record was modified and must be persisted.
    pub changed: bool,
    /// Rows to append (history first, then the record).
    pub rows: Vec<HistoryRow>,
    /// The run to start, when the job is due and claimable.
    pub claim: Option<ClaimPlan>,
}

pub(crate) fn retire(rt: &mut JobRuntime, reason: &str) {
    rt.retired = true;
    // No more slots: `jobs` and the console must not show a next run for a retired job.
    rt.next_slot = None;
    rt.retired_reason = Some(reason.to_string());
    rt.recovery_pending = false;
    // Operator runs already acknowledged (a manual trigger, retries, backfills) are kept: a
    // spent job still runs them ([`after_retirement`]); they never count toward `max_runs`.
    rt.overlap.buffered_slot = None;
    rt.overlap.superseded = None;
    rt.overlap.before_pause = None;
}

/// Whether the schedule has nothing left after a run of `trigger` whose claim already moved the
/// record's next slot on: an `at` job's run, `until` passed, or no slot after it. `max_runs`
/// aside: a claim spends the job when this holds or the run would reach `max_runs`, and a run
/// that does not count toward `max_runs` (its action did not run) ends the job only when this
/// holds.
pub(crate) fn schedule_spent(rec: &JobRecord, trigger: Trigger) -> bool {
    let (def, rt) = (&rec.def, &rec.rt);
    let at_fire = trigger == Trigger::Schedule && def.schedule.is_at();
    let until_spent = def
        .until
        .is_some_and(|u| rt.next_slot.is_none_or(|n| n > u));
    at_fire || until_spent || rt.next_slot.is_none()
}

/// Take the job: pre-advance the slot, set the lease and a fresh run_id (the fencing token).
pub(crate) fn claim(
    rec: &mut JobRecord,
    sched: &Compiled,
    now: DateTime<Utc>,
    owner: &str,
    slot: Option<DateTime<Utc>>,
    trigger: Trigger,
) -> ClaimPlan {
    let run_id = Uuid::new_v4();
    let spends_job = match trigger {
        Trigger::Manual | Trigger::Retry | Trigger::Backfill | Trigger::Chain => false,
        Trigger::Recovery => true,
        Trigger::Schedule | Trigger::Immediate => {
            let rt = &mut rec.rt;
            rt.last_slot = slot;
            let after = slot.map_or(now, |s| s.max(now));
            rt.next_slot = sched.next_after(after);
            let max_reached = rec.def.max_runs.is_some_and(|m| rec.rt.runs + 1 >= m);
            max_reached || schedule_spent(rec, trigger)
        }
    };
    let lease_until = now + secs_f64(rec.def.lease_seconds);
    rec.rt.add_lease(Lease {
        owner: owner.to_string(),
        run_id,
        slot,
        trigger,
        claimed_at: now,
        lease_until,
        last_renewed: now,
        spends_job,
        coalesced: None,
        cancel_requested_at: None,
        lapsed: false,
        chain: Vec::new(),
        awaiting: None,
    });
    ClaimPlan {
        run_id,
        slot,
        trigger,
        lease_until,
        coalesced: None,
    }
}

/// Extend the lease held by `run_id`. `None` when the lease was lost.
pub fn renew(rec: &mut JobRecord, run_id: Uuid, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let lease_seconds = rec.def.lease_seconds;
    let lease = rec.rt.lease_of_mut(run_id)?;
    if now > lease.lease_until {
        lease.lapsed = true;
    }
    lease.lease_until = now + secs_f64(lease_seconds);
    lease.last_renewed = now;
    Some(lease.lease_until)
}

/// Whether `run_id` holds the job's lease and it lapsed at some point (expired at `now`, or
/// renewed after it expired): another owner may have begun recovering it.
pub fn lapsed(rec: &JobRecord, run_id: Uuid, now: DateTime<Utc>) -> bool {
    rec.rt
        .lease_of(run_id)
        .is_some_and(|l| l.lapsed || l.lease_until <= now)
}

/// Whether the job's lease is held by `run_id`.
pub fn holds(rec: &JobRecord, run_id: Uuid) -> bool {
    rec.rt.lease_of(run_id).is_some()
}

/// The run `run_id` if the record lists it as abandoned, taken off the list.
pub(crate) fn take_abandoned(rec: &mut JobRecord, run_id: Uuid) -> Option<AbandonedRun> {
    let i = rec.rt.abandoned.iter().position(|a| a.run_id == run_id)?;
    Some(rec.rt.abandoned.remove(i))
}

/// The lease of `rec` if it expired at `now` (crash recovery is due).
pub fn expired_lease(rec: &JobRecord, now: DateTime<Utc>) -> Option<Lease> {
    rec.rt.leases().find(|l| l.lease_until <= now).cloned()
}

/// The next expired lease `owner` may recover: under an `overlap:` policy that acts while a
/// run is live, `owner` still runs its own leases of the job (it does not hide the job from
/// its claims then), so it never recovers those; another owner, or its own next start, does.
pub(crate) fn recoverable_lease(rec: &JobRecord, now: DateTime<Utc>, owner: &str) -> Option<Lease> {
    let own_live = rec.def.overlap.acts_while_running();
    rec.rt
        .leases()
        .find(|l| l.lease_until <= now && !(own_live && l.owner == owner))
        .cloned()
}

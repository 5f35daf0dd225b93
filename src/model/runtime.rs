//! The runtime side of a job, kept by the store between runs: its next slot, its leases, its
//! operator queue, what its `overlap:` policy remembers, and its chain bookkeeping.
//!
//! Owns: the lease list (the primary lease and those of concurrent runs) and the one word for a
//! job's state in tables. Must not touch: the rules that change these fields (the store's
//! policies own them), I/O, clocks.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::history::is_false;
use super::{JobCounters, JobDef, JobState, ParentRun, Status, Trigger};

/// A run an operator queued (retry or backfill) that no owner has taken yet. Manual triggers
/// keep their own field ([`JobRuntime::trigger_requested_at`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueuedRun {
    /// [`Trigger::Retry`] or [`Trigger::Backfill`].
    pub trigger: Trigger,
    /// The slot the run stands for: the retried run's slot, or the backfilled slot.
    pub slot: Option<DateTime<Utc>>,
    /// When the operator asked for it.
    pub requested_at: DateTime<Utc>,
    /// The run a retry repeats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<Uuid>,
}

/// Most runs one job may have queued (a backfill of a long window is refused past this).
pub(crate) const QUEUE_MAX: usize = 1000;

/// A claim held on a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lease {
    /// The owner running the claimed run.
    pub owner: String,
    /// The fencing token: a renewal or completion with another run_id does not touch the job.
    pub run_id: Uuid,
    /// The slot the run stands for (`None` for a manual run).
    pub slot: Option<DateTime<Utc>>,
    /// Why the run happened.
    pub trigger: Trigger,
    /// When the claim was taken.
    pub claimed_at: DateTime<Utc>,
    /// The lease expires at this instant unless renewed; then another owner may recover the run.
    pub lease_until: DateTime<Utc>,
    /// The last renewal (or the claim).
    pub last_renewed: DateTime<Utc>,
    /// This claim retires the job when it completes (one-shot, `max_runs` reached, `until` passed).
    pub spends_job: bool,
    /// The overdue slots this fire coalesced, when more than one: stamped on its row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coalesced: Option<SlotRange>,
    /// An operator asked to cancel this run (`cronsole cancel`, `X` in the console): the owner
    /// running it kills it and records it `failed`, reason `cancelled by operator`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_requested_at: Option<DateTime<Utc>>,
    /// A renewal came after `lease_until`: another owner may have started recovering the run
    /// meanwhile, so its completion looks for an `abandoned` row of its own run.
    #[serde(default, skip_serializing_if = "is_false")]
    pub lapsed: bool,
    /// A chained run: the parent runs it stands for, in `after:` order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chain: Vec<ParentRun>,
    /// A tool call of this run waits for an operator (`approve:`): the run is live and
    /// awaiting approval, its lease renewed, nothing spent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub awaiting: Option<AwaitingApproval>,
}

/// A tool call waiting for an operator's answer (see [`Lease::awaiting`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AwaitingApproval {
    /// The tool (its jobs-file name, `server.tool` or a command tool's key).
    pub tool: String,
    /// The call's id in the conversation.
    pub call_id: String,
    /// The arguments the model sent (redacted, capped): what the operator approves.
    pub arguments: String,
    /// When the wait began.
    pub since: DateTime<Utc>,
    /// When an unanswered wait ends as a denial (`approval_timeout_seconds`).
    pub deadline: DateTime<Utc>,
    /// The operator's answer, once given (the run's owner picks it up and clears the wait).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<ApprovalAnswer>,
}

/// An operator's answer to a call awaiting approval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalAnswer {
    /// Approved (`true`) or denied.
    pub approved: bool,
    /// Why, as the operator said: recorded on the call; a denial's is also given to the model
    /// as the tool's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Who gave it (`user@host (how)`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// When it was given.
    pub at: DateTime<Utc>,
}

/// A range of slots one row stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotRange {
    /// The first slot.
    pub first: DateTime<Utc>,
    /// The last slot.
    pub last: DateTime<Utc>,
    /// How many slots there are from `first` to `last`.
    pub count: u64,
}

/// The runtime side of a job, owned by the store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRuntime {
    /// When the job was first applied to the store.
    pub created_at: DateTime<Utc>,
    /// Anchor of an `every` grid; also the resolved instant of an `in 10m` schedule.
    pub anchor: DateTime<Utc>,
    /// The next slot this job will fire for, `None` when retired or out of slots.
    pub next_slot: Option<DateTime<Utc>>,
    /// The last slot that was claimed (run or abandoned).
    pub last_slot: Option<DateTime<Utc>>,
    /// When the job last ran (its last completion).
    pub last_run_at: Option<DateTime<Utc>>,
    /// How its last run ended.
    pub last_status: Option<Status>,
    /// Runs that count toward `max_runs`: scheduled runs whose action ran and ended succeeded
    /// or failed (`Status::counts_toward_max_runs`); not `skipped`, `no_change`, `missed` or
    /// `abandoned` rows, nor runs started by an operator or a chain.
    pub runs: u64,
    /// The operator paused the job (`cronsole pause`, `p` in the console).
    pub paused: bool,
    /// The job will not run again (one-shot done, `max_runs` reached, `until` passed, or it left
    /// the jobs file: applying it again brings it back).
    pub retired: bool,
    /// Why the job was retired, in words.
    pub retired_reason: Option<String>,
    /// The claim held on the job while a run is live (the first of them with `overlap: allow`).
    pub lease: Option<Lease>,
    /// A manual trigger waiting to be claimed.
    pub trigger_requested_at: Option<DateTime<Utc>>,
    /// Retries and backfill slots waiting to be claimed, oldest request first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queue: Vec<QueuedRun>,
    /// Why the operator paused the job (`pause --reason`), shown in `jobs` and the console.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_reason: Option<String>,
    /// Set after a 429 with Retry-After: no slot fires before this instant.
    pub hold_until: Option<DateTime<Utc>>,
    /// This job's run already abandoned once and is being re-offered (one-shot recovery).
    pub recovery_pending: bool,
    /// The latest `succeeded` result, for `context_from` (≤ RESULT_MAX_CHARS).
    pub last_success_result: Option<String>,
    /// When [`JobRuntime::last_success_result`] was recorded.
    pub last_success_at: Option<DateTime<Utc>>,
    /// Per-job counters (statuses, spend, per-hour buckets, budget reservations).
    pub counters: JobCounters,
    /// The job's persisted state: notepad, monitor watermark, incident, budget stop.
    pub state: JobState,
    /// What the job's `overlap:` policy keeps between runs (more leases, a buffered slot, a
    /// superseded run), stored so it holds across owners, hosts and crashes.
    #[serde(default, skip_serializing_if = "OverlapState::is_empty")]
    pub overlap: OverlapState,
    /// Per `after:` parent, its newest finished run that fires this job and that this job has
    /// not run for yet (fan-in: the chained run starts once every parent has one).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub chain_pending: BTreeMap<String, ParentRun>,
    /// Per `after:` parent, the newest of its runs this record has seen (pending or run):
    /// a completion retried or recovered from its landed row never records the run twice.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub chain_seen: BTreeMap<String, Uuid>,
    /// The newest runs recorded `abandoned` (at most `AbandonedRun::KEPT`, oldest first): a
    /// late completion of one of them (its owner was paused, not dead) writes the run's real row
    /// with `supersedes_abandoned`, and the `abandoned` row is hidden (`store::plan`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub abandoned: Vec<AbandonedRun>,
    /// The slots a re-derivation moved back from a clock more than three hours behind them,
    /// kept until the clock is back where they were decided (`store::rules::slots`): a step
    /// back that is undone then finds the job as it left it, so a slot that ran never runs
    /// again; a clock that really was ahead reaches that point only after the job moved past.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved_back: Option<MovedBack>,
    /// The latest re-derivation of the job's slots from a clock behind the one that decided
    /// them (`store::rules::slots`): when, and what moved. `describe` shows it, so a job whose
    /// first slot is not the one it was stored with says why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rederived: Option<Rederived>,
}

/// A re-derivation of a job's slots (see [`JobRuntime::rederived`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rederived {
    /// The clock it was made on.
    pub at: DateTime<Utc>,
    /// What moved, in words (`first slot … -> …`).
    pub what: String,
}

/// A job's slots as they were before a clock more than three hours behind moved them back
/// (see [`JobRuntime::moved_back`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MovedBack {
    /// The grid origin then.
    pub anchor: DateTime<Utc>,
    /// The last slot then (`None`: the job had never run).
    pub last_slot: Option<DateTime<Utc>>,
    /// The next slot then.
    pub next_slot: Option<DateTime<Utc>>,
}

/// A run recorded `abandoned` whose real end may still come (see [`JobRuntime::abandoned`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AbandonedRun {
    /// The abandoned run's id (its lease's and its `abandoned` row's).
    pub run_id: Uuid,
    /// Why that run happened (scheduled, manual, chain, …).
    pub trigger: Trigger,
    /// The lease would have spent the job (one-shot, `max_runs`, `until`).
    pub spends_job: bool,
    /// `finished_at` of the `abandoned` row (the job's `last_run_at` until a newer run ends).
    pub at: DateTime<Utc>,
    /// What the `abandoned` row carries and the counters booked (the run's reservations): a
    /// late end replaces it with the run's real cost, never adds to it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cost_usd: f64,
    /// The part of `cost_usd` booked into the budget period `period_key` (the rest belonged to
    /// an earlier period its calls were reserved in).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub period_usd: f64,
    /// The budget period the `abandoned` row's money was booked in.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub period_key: String,
    /// The call the run waited on, with the answer an operator gave it that the run never
    /// read: a late end's row keeps it, as the `abandoned` row did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unread_answer: Option<AwaitingApproval>,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

impl AbandonedRun {
    /// How many abandoned runs a record remembers.
    pub(crate) const KEPT: usize = 8;
}

/// See [`JobRuntime::overlap`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct OverlapState {
    /// `overlap: allow`: the leases of runs live beside [`JobRuntime::lease`] (which always
    /// holds one while any run is live), each fenced by its own run_id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub leases: Vec<Lease>,
    /// `overlap: buffer_one`: a slot that came due while a run was live; it runs as soon as no
    /// run is live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffered_slot: Option<DateTime<Utc>>,
    /// `overlap: cancel_previous`: the live run a due slot asked to cancel, and that slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded: Option<Superseded>,
    /// `skip`/`buffer_one`: the slots that fell due while a run was live and before the
    /// operator paused the job; that run's end writes their overlap row (or keeps the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_pause: Option<SlotRange>,
}

impl OverlapState {
    /// Nothing is kept: the stored form leaves `overlap` out.
    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
            && self.buffered_slot.is_none()
            && self.superseded.is_none()
            && self.before_pause.is_none()
    }
}

/// A live run cancelled because a newer slot of its `cancel_previous` job came due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Superseded {
    /// The run that was asked to stop.
    pub run_id: Uuid,
    /// The slot that superseded it; it runs once the cancelled run ended.
    pub by_slot: DateTime<Utc>,
}

impl JobRuntime {
    /// Every live lease: the primary one, then those of concurrent runs (`overlap: allow`).
    pub fn leases(&self) -> impl Iterator<Item = &Lease> {
        self.lease.iter().chain(self.overlap.leases.iter())
    }

    /// The lease of the run `run_id`, if it is live.
    pub fn lease_of(&self, run_id: Uuid) -> Option<&Lease> {
        self.leases().find(|l| l.run_id == run_id)
    }

    /// Mutable [`JobRuntime::lease_of`].
    pub(crate) fn lease_of_mut(&mut self, run_id: Uuid) -> Option<&mut Lease> {
        self.lease
            .iter_mut()
            .chain(self.overlap.leases.iter_mut())
            .find(|l| l.run_id == run_id)
    }

    /// Number of live runs.
    pub fn live_runs(&self) -> usize {
        self.leases().count()
    }

    /// Remove the lease of `run_id` (the first live one when no lease has that id); a
    /// concurrent run's lease moves up so [`JobRuntime::lease`] is set while any run is live.
    pub(crate) fn take_lease(&mut self, run_id: Uuid) -> Option<Lease> {
        if let Some(i) = self.overlap.leases.iter().position(|l| l.run_id == run_id) {
            return Some(self.overlap.leases.remove(i));
        }
        let taken = self.lease.take();
        if !self.overlap.leases.is_empty() {
            self.lease = Some(self.overlap.leases.remove(0));
        }
        taken
    }

    /// Add a live lease (the primary one when no run is live).
    pub(crate) fn add_lease(&mut self, lease: Lease) {
        if self.lease.is_none() {
            self.lease = Some(lease);
        } else {
            self.overlap.leases.push(lease);
        }
    }
}

/// A job as the store holds it: definition + runtime.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    /// The validated definition (from the jobs file).
    pub def: JobDef,
    /// What the store keeps about the job between runs.
    pub rt: JobRuntime,
}

impl JobRecord {
    /// Whether its schedule fires at all now: not retired, not paused, enabled. Every view's
    /// "next" (`jobs` NEXT, `jobs --json` `next_fire_at`, `describe`) is empty when it does not.
    pub fn fires(&self) -> bool {
        !self.rt.retired && !self.rt.paused && self.def.enabled
    }

    /// Whether its next slot is the `run_immediately` run of a job that never ran: the claim
    /// takes it at once, without the job's jitter.
    pub fn next_is_immediate(&self) -> bool {
        self.rt.last_slot.is_none() && self.def.run_immediately
    }

    /// The instant the store fires `slot` of this job: the slot plus the job's jitter, except
    /// the `run_immediately` run (its next slot while it never ran), which fires on its slot.
    /// The claim and every view of a stored job read this one rule.
    pub fn fire_at(&self, slot: DateTime<Utc>) -> DateTime<Utc> {
        if self.next_is_immediate() && self.rt.next_slot == Some(slot) {
            slot
        } else {
            self.def.fire_at(slot)
        }
    }

    /// When its next slot fires ([`JobRecord::fire_at`]), whether or not it fires now (see
    /// [`JobRecord::fires`]).
    pub fn next_fire_at(&self) -> Option<DateTime<Utc>> {
        self.rt.next_slot.map(|n| self.fire_at(n))
    }

    /// How many more slots it runs before `max_runs` retires it (`usize::MAX` without one):
    /// every view that lists next slots lists at most this many.
    pub fn runs_left(&self) -> usize {
        self.def.max_runs.map_or(usize::MAX, |m| {
            usize::try_from(m.saturating_sub(self.rt.runs)).unwrap_or(usize::MAX)
        })
    }

    /// One word for the job's state in tables: running, paused, retired, held, idle.
    pub(crate) fn state_word(&self, now: DateTime<Utc>) -> &'static str {
        if self.rt.retired {
            "retired"
        } else if self.rt.lease.is_some() {
            "running"
        } else if self.rt.paused || !self.def.enabled {
            "paused"
        } else if self.rt.hold_until.is_some_and(|h| h > now) {
            "held"
        } else {
            "idle"
        }
    }
}

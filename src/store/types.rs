//! The values the [`Store`](super::Store) trait takes and returns: claims, completions, history
//! queries and pages, `apply`'s report, pages of `jobs --json`.
//!
//! Owns: those types. Must not touch: how any store produces them.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::StoreResult;
use crate::model::{HistoryRow, JobRecord, JobState, Status, Trigger};

/// One page of [`Store::jobs_page_json`](super::Store::jobs_page_json).
#[derive(Debug, Default)]
pub struct JsonPage {
    /// The text the [`PageJob::Json`] entries point into (checked UTF-8 by the store's
    /// thread, so the listing's does not).
    pub buf: String,
    /// The page's jobs, in name order.
    pub jobs: Vec<PageJob>,
}

/// One job of a [`JsonPage`].
#[derive(Debug)]
pub enum PageJob {
    /// The parsed record.
    Record(Box<JobRecord>),
    /// The record as the store wrote it: a serialised [`JobRecord`] at `range` of
    /// [`JsonPage::buf`] (its line's checksum verified, not parsed), indexed under `name`.
    Json {
        /// The name the store lists the job under (the record's own name must match).
        name: String,
        /// Where the record's JSON is in [`JsonPage::buf`].
        range: std::ops::Range<usize>,
    },
}

impl PageJob {
    /// The job's name.
    pub fn name(&self) -> &str {
        match self {
            PageJob::Record(r) => &r.def.name,
            PageJob::Json { name, .. } => name,
        }
    }
}

/// What `claim_due` may take.
#[derive(Debug, Clone)]
pub struct ClaimRequest<'a> {
    /// The claim instant. A store that reads its own clock in the claim (PostgreSQL) gets the
    /// owner's wall clock here, to check against `max_offset`; one that decides on the instant
    /// it is given (the file store) gets the store's clock as the owner's last heartbeat read
    /// it, when the owner keeps that reading (see [`crate::store::Store::decides_on_own_clock`]).
    pub now: DateTime<Utc>,
    /// The claiming owner (`host:pid:uuid8`).
    pub owner: &'a str,
    /// The owner's free run capacity: at most this many claims are returned.
    pub limit: usize,
    /// Jobs this owner is still running: never re-offered to it, even past their lease.
    pub in_flight: &'a [String],
    /// The owner's wall clock stepped since its last claim (`+2d`, `-1h`). A store that
    /// decides on the instant it is given (the file store) says so on every row this claim writes
    /// (`missed`, overlap, `abandoned`), as the row of a run in flight across a step does; one
    /// that decides on its own clock (PostgreSQL) ignores it.
    pub clock_stepped: Option<&'a str>,
    /// The owner's clock offset bound (`--max-clock-offset`; `None`: no bound). A store that
    /// decides on its own clock (PostgreSQL) claims nothing when that clock is surely further
    /// than this from `now`, and says why in [`ClaimOutcome::refused`]: leases stamped by a
    /// clock that far from the owner's are renewed on a pace the owner cannot keep. A store
    /// that decides on the instant it is given (the file store) ignores it.
    pub max_offset: Option<std::time::Duration>,
}

/// One won claim: the run may start. The claim is durable when this is returned.
#[derive(Debug, Clone)]
pub struct Claim {
    /// The new run's id (its history row's `run_id`).
    pub run_id: Uuid,
    /// The job after the claim (slot pre-advanced, lease set).
    pub job: JobRecord,
    /// The slot the run stands for (`None` for a manual trigger).
    pub slot: Option<DateTime<Utc>>,
    /// Why it runs (schedule, manual, retry, immediate, backfill).
    pub trigger: Trigger,
    /// The lease's end; `renew` before then.
    pub lease_until: DateTime<Utc>,
}

/// Result of one `claim_due` call.
#[derive(Debug, Clone, Default)]
pub struct ClaimOutcome {
    /// The runs won, at most `limit`.
    pub claims: Vec<Claim>,
    /// Rows written while claiming (`missed`, `abandoned`), so front ends can show them.
    pub rows: Vec<HistoryRow>,
    /// Why nothing was claimed for the owner's clock ([`ClaimRequest::max_offset`]), in words
    /// for the log, `/healthz` and the owner record.
    pub refused: Option<String>,
}

/// What `renew` found.
#[derive(Debug, Clone, PartialEq)]
pub enum RenewOutcome {
    /// The lease is ours and now ends later.
    Renewed {
        /// The lease's new end.
        lease_until: DateTime<Utc>,
    },
    /// Another run_id holds the job now (our lease expired and was recovered).
    Lost,
}

/// One lease renewal of a batch ([`super::Store::renew_many`]): `run_id`'s lease on `job`,
/// extended from `now`.
#[derive(Debug, Clone, PartialEq)]
pub struct Renewal {
    /// The run's job.
    pub job: String,
    /// The run whose lease is renewed (the fence).
    pub run_id: Uuid,
    /// The instant the lease is extended from (a store that judges leases on its own clock
    /// ignores it, as in `renew`).
    pub now: DateTime<Utc>,
}

/// The end of a run, fenced by `run_id`.
#[derive(Debug, Clone)]
pub struct Completion {
    /// The job.
    pub job: String,
    /// The run (the fence: only this run's lease is completed).
    pub run_id: Uuid,
    /// The owner that ran it.
    pub owner: String,
    /// When it finished.
    pub now: DateTime<Utc>,
    /// The run's history row (status, result, cost…). An `abandoned` row (shutdown) follows the
    /// recovery rules like a crash would.
    pub row: HistoryRow,
    /// New per-job state to persist, `None` to keep it. Over the cap → rejected, prior kept.
    pub state: Option<JobState>,
    /// Hold the job (no slots fire) until this instant (429 Retry-After).
    pub hold_until: Option<DateTime<Utc>>,
}

/// What `complete` did.
#[derive(Debug, Clone, Default)]
pub struct CompleteOutcome {
    /// The lease was lost: the row was appended with `stale_lease: true`, the job untouched.
    pub stale: bool,
    /// Every row written, the run's own first (overlap `skipped` rows may follow).
    pub rows: Vec<HistoryRow>,
    /// Why the new state was not stored (over the cap), if it was not.
    pub state_rejected: Option<String>,
}

/// What `request_trigger` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TriggerOutcome {
    /// The job will run at the next claim (`trigger: manual`).
    Queued,
    /// The job is running; nothing queued.
    AlreadyRunning,
    /// A trigger was already queued; nothing changed.
    AlreadyQueued,
}

/// History filter; rows come newest first.
#[derive(Debug, Clone, Default)]
pub struct HistoryQuery {
    /// Only this job.
    pub job: Option<String>,
    /// Only this status.
    pub status: Option<Status>,
    /// Only rows that finished at or after this instant.
    pub since: Option<DateTime<Utc>>,
    /// Only this run.
    pub run_id: Option<Uuid>,
    /// Only rows with a monitor diff.
    pub with_diff: bool,
    /// At most this many rows (0: no limit).
    pub limit: usize,
    /// Skip this many matching rows first. Linear in the rows skipped where the store cannot
    /// do better (filtered queries; PostgreSQL `OFFSET`): deep pages should use `before`.
    pub offset: usize,
    /// A page token from [`HistoryPage::next`]: only rows older than the previous page's last
    /// row (keyset paging; cheap at any depth). Tokens belong to the store that issued them.
    pub before: Option<String>,
}

/// One page of history, newest first, and the token of the next (older) page when there is one.
#[derive(Debug, Clone, Default)]
pub struct HistoryPage {
    /// The page's rows, newest first.
    pub rows: Vec<HistoryRow>,
    /// The token of the next page (`HistoryQuery::before`), `None` on the last page.
    pub next: Option<String>,
}

/// Where [`Store::apply_each`](super::Store::apply_each)'s `feed` hands each definition.
pub type DefSink<'a> = &'a mut dyn FnMut(crate::model::JobDef) -> StoreResult<()>;

/// What `apply` changed, by job name.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ApplyReport {
    /// Jobs new in the file.
    pub created: Vec<String>,
    /// Jobs whose definition changed.
    pub updated: Vec<String>,
    /// Jobs no longer in the file: retired (kept in history and `jobs` output).
    pub retired: Vec<String>,
    /// Jobs whose definition is as stored.
    pub unchanged: Vec<String>,
    /// What the apply changed in the settings, in words (`crate::store::plan::apply::settings_changes`), e.g.
    /// "budget period day → week"; empty when they are as stored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub settings: Vec<String>,
    /// Jobs whose spend in the budget period was recounted from history because the apply
    /// changed the period's kind (`crate::store::rules::period::recount`), sorted by job; empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recounted: Vec<Recount>,
}

/// One job's spend recounted by an apply that changed the budget's `period` kind: what the
/// job's history rows booked in the new period (`crate::store::rules::period::booked_since`), now its spend there.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Recount {
    /// The job.
    pub job: String,
    /// The new period's key: `day:2026-12-01`, `week:2026-W49`, `month:2026-12` or `total`.
    pub period: String,
    /// Its spend in that period as recounted (USD).
    pub spent_usd: f64,
}

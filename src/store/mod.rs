//! The store: the single source of truth shared by every owner (SPEC §6, §14). Definitions,
//! runtime state (slots, leases, pause, triggers, holds), per-job state and history live here,
//! and every change another process must see goes through it.
//!
//! Owns: the [`Store`] trait and its request/response types; `file` (the embedded default) and
//! `postgres` implement it. Must not touch: clocks (every call takes `now`), the engine, the UI,
//! networking other than the database. The trait is synchronous: the file store is blocking I/O
//! under an `fs4` lock; async callers use `tokio::task::spawn_blocking`.

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::model::{HistoryRow, JobRecord, JobState, JobsFile, Settings, Status, Trigger};

pub use operator::{EditOutcome, JobEdit};

pub mod file;
pub mod logic;
pub mod operator;
pub mod postgres;
pub mod stats;

/// Errors from any store. `is_bad_input` tells the CLI to exit 2 instead of 1.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A store file does not parse. Never repaired or overwritten silently.
    #[error("corrupt store file {file}:{line}:{column}: {what}")]
    Corrupt {
        file: PathBuf,
        line: u64,
        column: u64,
        what: String,
    },
    #[error(
        "store format version {found} in {file} is not supported (this cronsole reads {supported})"
    )]
    Version {
        file: PathBuf,
        found: String,
        supported: String,
    },
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no job named '{0}' in the store")]
    NoSuchJob(String),
    #[error(
        "state of job '{job}' would be {size} bytes, over the {cap}-byte cap; prior state kept"
    )]
    StateTooLarge {
        job: String,
        size: usize,
        cap: usize,
    },
    #[error("database error: {0}")]
    Database(String),
    #[error("{0}")]
    Invalid(String),
}

impl StoreError {
    /// Errors caused by what the user gave us (corrupt/foreign store, unknown job): exit 2.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            StoreError::Corrupt { .. }
                | StoreError::Version { .. }
                | StoreError::NoSuchJob(_)
                | StoreError::Invalid(_)
        )
    }

    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        StoreError::Io {
            path: path.into(),
            source,
        }
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// What `claim_due` may take.
#[derive(Debug, Clone)]
pub struct ClaimRequest<'a> {
    pub now: DateTime<Utc>,
    pub owner: &'a str,
    /// The owner's free run capacity: at most this many claims are returned.
    pub limit: usize,
    /// Jobs this owner is still running: never re-offered to it, even past their lease.
    pub in_flight: &'a [String],
}

/// One won claim: the run may start. The claim is durable when this is returned.
#[derive(Debug, Clone)]
pub struct Claim {
    pub run_id: Uuid,
    /// The job after the claim (slot pre-advanced, lease set).
    pub job: JobRecord,
    /// The slot the run stands for (`None` for a manual trigger).
    pub slot: Option<DateTime<Utc>>,
    pub trigger: Trigger,
    pub lease_until: DateTime<Utc>,
}

/// Result of one `claim_due` call.
#[derive(Debug, Clone, Default)]
pub struct ClaimOutcome {
    pub claims: Vec<Claim>,
    /// Rows written while claiming (`missed`, `abandoned`), so front ends can show them.
    pub rows: Vec<HistoryRow>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum RenewOutcome {
    Renewed {
        lease_until: DateTime<Utc>,
    },
    /// Another run_id holds the job now (our lease expired and was recovered).
    Lost,
}

/// The end of a run, fenced by `run_id`.
#[derive(Debug, Clone)]
pub struct Completion {
    pub job: String,
    pub run_id: Uuid,
    pub owner: String,
    pub now: DateTime<Utc>,
    /// The run's history row (status, result, cost…). An `abandoned` row (shutdown) follows the
    /// SPEC §6 recovery table like a crash would.
    pub row: HistoryRow,
    /// New per-job state to persist, `None` to keep it. Over the cap → rejected, prior kept.
    pub state: Option<JobState>,
    /// Hold the job (no slots fire) until this instant (429 Retry-After).
    pub hold_until: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Default)]
pub struct CompleteOutcome {
    /// The lease was lost: the row was appended with `stale_lease: true`, the job untouched.
    pub stale: bool,
    /// Every row written, the run's own first (overlap `skipped` rows may follow).
    pub rows: Vec<HistoryRow>,
    /// Why the new state was not stored (over the cap), if it was not.
    pub state_rejected: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TriggerOutcome {
    Queued,
    AlreadyRunning,
    AlreadyQueued,
}

/// History filter; rows come newest first.
#[derive(Debug, Clone, Default)]
pub struct HistoryQuery {
    pub job: Option<String>,
    pub status: Option<Status>,
    pub since: Option<DateTime<Utc>>,
    pub run_id: Option<Uuid>,
    /// Only rows with a monitor diff.
    pub with_diff: bool,
    pub limit: usize,
    /// Skip this many matching rows first (paging through the whole history a page at a time).
    pub offset: usize,
}

/// What `apply` changed, by job name.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ApplyReport {
    pub created: Vec<String>,
    pub updated: Vec<String>,
    /// Jobs no longer in the file: retired (kept in history and `jobs` output).
    pub retired: Vec<String>,
    pub unchanged: Vec<String>,
}

/// Spend in the current budget period, for the pre-call budget check (SPEC §11).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SpendNow {
    pub global_usd: f64,
    pub job_usd: f64,
}

/// The operations every store provides. All times come from the caller.
pub trait Store: Send + Sync {
    /// Human form of where this store lives (`/path/.cronsole`, `postgres://host/db`).
    fn location(&self) -> String;
    /// Sync the jobs file's definitions and settings into the store (SPEC §13.2 `apply`).
    fn apply(&self, file: &JobsFile, now: DateTime<Utc>) -> StoreResult<ApplyReport>;
    fn settings(&self) -> StoreResult<Settings>;
    /// A cheap token that changes whenever anything in the store changed (no re-parse).
    fn change_token(&self) -> StoreResult<u64>;
    fn jobs(&self) -> StoreResult<Vec<JobRecord>>;
    fn job(&self, name: &str) -> StoreResult<Option<JobRecord>>;
    /// The earliest instant at which `claim_due` may have work (a slot, a lease expiry, a hold
    /// ending); `Some(now)` or earlier when something is claimable already.
    fn next_wakeup(&self, now: DateTime<Utc>) -> StoreResult<Option<DateTime<Utc>>>;
    /// Claim due jobs under the store's exclusive lock (SPEC §5, §6, §7).
    fn claim_due(&self, req: &ClaimRequest<'_>) -> StoreResult<ClaimOutcome>;
    fn renew(
        &self,
        job: &str,
        run_id: Uuid,
        owner: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<RenewOutcome>;
    fn complete(&self, c: Completion) -> StoreResult<CompleteOutcome>;
    /// Several completions at once (runs that ended together), results in order. Stores that
    /// can commit them together (one fsync for the batch) override this.
    fn complete_many(&self, cs: Vec<Completion>) -> Vec<StoreResult<CompleteOutcome>> {
        cs.into_iter().map(|c| self.complete(c)).collect()
    }
    fn history(&self, q: &HistoryQuery) -> StoreResult<Vec<HistoryRow>>;
    fn set_paused(&self, name: &str, paused: bool, now: DateTime<Utc>) -> StoreResult<()>;
    fn request_trigger(&self, name: &str, now: DateTime<Utc>) -> StoreResult<TriggerOutcome>;
    fn spend(&self, job: &str, now: DateTime<Utc>) -> StoreResult<SpendNow>;
    /// Apply one operator action (retry, cancel, backfill, pause with a reason) to a job
    /// atomically: under the store's lock or inside one transaction. The decision is
    /// [`operator::apply_edit`]; stores only persist it.
    fn update_job(
        &self,
        name: &str,
        edit: &JobEdit,
        now: DateTime<Utc>,
    ) -> StoreResult<EditOutcome>;

    /// Queue a retry of run `run_id` (any owner takes it). Returns the run's job.
    fn retry(&self, run_id: Uuid, now: DateTime<Utc>) -> StoreResult<(String, EditOutcome)> {
        let row = self
            .history(&HistoryQuery {
                run_id: Some(run_id),
                limit: 1,
                ..Default::default()
            })?
            .into_iter()
            .next()
            .ok_or_else(|| StoreError::Invalid(format!("no run {run_id} in the history")))?;
        let job = row.job.clone();
        let out = self.update_job(&job, &JobEdit::Retry(Box::new(row)), now)?;
        Ok((job, out))
    }

    /// Cancel by job name (its running run, else what it has queued) or by the run id of a
    /// running run. Returns the job.
    fn cancel(&self, target: &str, now: DateTime<Utc>) -> StoreResult<(String, EditOutcome)> {
        if self.job(target)?.is_some() {
            let out = self.update_job(target, &JobEdit::Cancel(None), now)?;
            return Ok((target.to_string(), out));
        }
        let Ok(run_id) = Uuid::parse_str(target.trim()) else {
            return Err(StoreError::NoSuchJob(target.to_string()));
        };
        let job = self
            .jobs()?
            .into_iter()
            .find(|j| j.rt.lease.as_ref().is_some_and(|l| l.run_id == run_id))
            .map(|j| j.def.name)
            .ok_or_else(|| StoreError::Invalid(format!("run {run_id} is not running")))?;
        let out = self.update_job(&job, &JobEdit::Cancel(Some(run_id)), now)?;
        Ok((job, out))
    }
}

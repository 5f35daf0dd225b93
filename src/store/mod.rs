//! The store: the single source of truth shared by every owner (SPEC §6, §14). Definitions,
//! runtime state (slots, leases, pause, triggers, holds), per-job state and history live here,
//! and every change another process must see goes through it.
//!
//! Owns: the [`Store`] trait and its request/response types; `file` (the embedded default) and
//! `postgres` implement it. Must not touch: clocks (every call takes `now`), the engine, the UI,
//! networking other than the database. The trait is synchronous: the file store is blocking I/O
//! under an `fs4` lock (through [`io::StoreIo`]); async callers use `tokio::task::spawn_blocking`.

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::model::{HistoryRow, JobRecord, JobState, JobsFile, Settings, Status, Trigger};

pub use operator::{BULK_CHUNK, BulkAction, BulkDone, BulkOutcome, EditOutcome, JobEdit};

pub mod budget;
pub mod chain;
pub mod check;
pub mod file;
pub mod filefmt;
pub mod io;
pub mod logic;
pub mod operator;
pub mod overlap;
pub mod postgres;
pub mod signal;
pub mod stats;

/// Errors from any store, one variant per cause, each carrying its `#[source]` where there is
/// one. The exit code is a function of the variant ([`StoreError::exit_code`]): 2 for what the
/// user gave us (a damaged or foreign store, an unknown job, a bad definition or URL), 1 for
/// runtime failures. [`StoreError::is_retryable`] tells the engine "store unavailable, retry"
/// (keep the completion, back off) from "rejected" (retrying cannot help).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A store file (or row) is missing, empty, foreign, out of generation or does not parse.
    /// Never repaired or overwritten silently.
    #[error("corrupt store file {file}:{line}:{column}: {what}")]
    Corrupt {
        /// The damaged file.
        file: PathBuf,
        /// 1-based line; 0 when the damage has no line (a database row, a whole file).
        line: u64,
        /// 1-based column; 0 when it has none.
        column: u64,
        /// What is wrong.
        what: String,
    },
    /// A store written by a format this build does not read.
    #[error(
        "store format version {found} in {file} is not supported (this cronsole reads {supported})"
    )]
    Version {
        /// The file that says so.
        file: PathBuf,
        /// The version found.
        found: String,
        /// The versions this build reads.
        supported: String,
    },
    /// Reading or writing the store failed (disk full, permissions). Retryable.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Another process held the store lock past the bound (stopped or wedged). Retryable.
    #[error(
        "the store lock {file} was held by another process for over {waited:?} (is an owner stopped, e.g. SIGSTOP?); giving up"
    )]
    LockTimeout {
        /// The lock file.
        file: PathBuf,
        /// How long this process waited.
        waited: std::time::Duration,
    },
    /// No job of that name, live or retired.
    #[error("no job named '{0}' in the store")]
    NoSuchJob(String),
    /// A job's new state is over the per-job cap; the prior state is kept.
    #[error(
        "state of job '{job}' would be {size} bytes, over the {cap}-byte cap; prior state kept"
    )]
    StateTooLarge {
        /// The job.
        job: String,
        /// The state's encoded size, bytes.
        size: usize,
        /// The cap, bytes.
        cap: usize,
    },
    /// A jobs file names a job twice.
    #[error("job name '{0}' appears twice in the jobs file")]
    DuplicateJob(String),
    /// A definition the store cannot schedule (apply, resume).
    #[error("job '{job}': {source}")]
    BadDefinition {
        /// The job.
        job: String,
        /// Why its schedule is refused.
        #[source]
        source: crate::schedule::ScheduleError,
    },
    /// The job is retired: it cannot be triggered.
    #[error("job '{job}' is retired ({reason}); it cannot be triggered")]
    Retired {
        /// The job.
        job: String,
        /// Why it was retired (its recorded reason).
        reason: String,
    },
    /// `retry`/`describe` of a run id the history does not hold.
    #[error("no run {0} in the history")]
    NoSuchRun(Uuid),
    /// An operator action (retry, cancel, backfill, pause) the job's state does not allow; the
    /// message says why and what would work.
    #[error("{0}")]
    Refused(String),
    /// A definition with a number outside its documented bound (a `JobsFile` built in code, or
    /// one that skipped `config`): refused before anything is stored.
    #[error("refusing to apply: {0}")]
    OutOfBounds(#[source] crate::config::OutOfBounds),
    /// A store location that is not one (e.g. a malformed PostgreSQL URL).
    #[error("{what}")]
    BadLocation {
        /// What is wrong with it.
        what: String,
        /// The driver's parse error, when it gave one.
        #[source]
        source: Option<tokio_postgres::Error>,
    },
    /// A record could not be encoded (a bug, not bad input).
    #[error("cannot encode {what}: {source}")]
    Encode {
        /// What was being encoded.
        what: &'static str,
        /// The encoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// The database answered with an error, or the connection broke. Retryable.
    #[error("database error while {doing}: {detail}")]
    Database {
        /// What the store was doing.
        doing: String,
        /// The server's message and code, or the chain of causes of a broken connection.
        detail: String,
        /// The driver's error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The store cannot be reached right now (pool closed, reconnect back-off, operation
    /// timed out, store runtime gone). Retryable.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A background task of a front end died while reading the store.
    #[error("{what}: {source}")]
    Task {
        /// Which task.
        what: &'static str,
        /// Why it ended (panic or cancellation).
        #[source]
        source: tokio::task::JoinError,
    },
    /// An operation this store (or test fake) does not provide.
    #[error("not supported by this store: {0}")]
    Unsupported(&'static str),
    /// A broken internal invariant (a bug): never the user's fault.
    #[error("internal store error: {0}")]
    Internal(String),
}

impl StoreError {
    /// Errors caused by what the user gave us (corrupt/foreign store, unknown job): exit 2.
    pub fn is_bad_input(&self) -> bool {
        self.exit_code() == 2
    }

    /// The process exit code this error ends a command with (2 = bad input, 1 = runtime).
    pub fn exit_code(&self) -> u8 {
        match self {
            StoreError::Corrupt { .. }
            | StoreError::Version { .. }
            | StoreError::NoSuchJob(_)
            | StoreError::DuplicateJob(_)
            | StoreError::BadDefinition { .. }
            | StoreError::Retired { .. }
            | StoreError::OutOfBounds(_)
            | StoreError::NoSuchRun(_)
            | StoreError::Refused(_)
            | StoreError::BadLocation { .. } => 2,
            StoreError::Io { .. }
            | StoreError::LockTimeout { .. }
            | StoreError::StateTooLarge { .. }
            | StoreError::Encode { .. }
            | StoreError::Database { .. }
            | StoreError::Unavailable(_)
            | StoreError::Task { .. }
            | StoreError::Unsupported(_)
            | StoreError::Internal(_) => 1,
        }
    }

    /// "Store unavailable, try again later" (disk full, database down, lock held by a stopped
    /// process) as opposed to "rejected" (retrying the same request cannot succeed).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            StoreError::Io { .. }
                | StoreError::LockTimeout { .. }
                | StoreError::Database { .. }
                | StoreError::Unavailable(_)
        )
    }

    /// An [`StoreError::Io`] on `path` — except that a directory where a store file should be
    /// (`EISDIR`) is damage, not a runtime failure: [`StoreError::Corrupt`] naming the file
    /// (exit 2, like a missing or foreign file), never retried.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        if source.kind() == std::io::ErrorKind::IsADirectory {
            return StoreError::Corrupt {
                file: path.into(),
                line: 0,
                column: 0,
                what: "a directory is where this store file should be (move the directory \
                       away and restore the file from a backup)"
                    .into(),
            };
        }
        StoreError::Io {
            path: path.into(),
            source,
        }
    }

    /// A copy for the other members of a batch that failed together (errors are not `Clone`):
    /// same variant and exit code where it carries plain data, the message otherwise.
    pub(crate) fn duplicate(&self) -> StoreError {
        match self {
            StoreError::Corrupt {
                file,
                line,
                column,
                what,
            } => StoreError::Corrupt {
                file: file.clone(),
                line: *line,
                column: *column,
                what: what.clone(),
            },
            StoreError::Version {
                file,
                found,
                supported,
            } => StoreError::Version {
                file: file.clone(),
                found: found.clone(),
                supported: supported.clone(),
            },
            StoreError::Io { path, source } => StoreError::Io {
                path: path.clone(),
                source: std::io::Error::new(source.kind(), source.to_string()),
            },
            StoreError::LockTimeout { file, waited } => StoreError::LockTimeout {
                file: file.clone(),
                waited: *waited,
            },
            StoreError::NoSuchJob(j) => StoreError::NoSuchJob(j.clone()),
            StoreError::DuplicateJob(j) => StoreError::DuplicateJob(j.clone()),
            StoreError::BadDefinition { job, source } => StoreError::BadDefinition {
                job: job.clone(),
                source: source.clone(),
            },
            StoreError::OutOfBounds(e) => StoreError::OutOfBounds(e.clone()),
            StoreError::NoSuchRun(r) => StoreError::NoSuchRun(*r),
            StoreError::Refused(w) => StoreError::Refused(w.clone()),
            StoreError::Retired { job, reason } => StoreError::Retired {
                job: job.clone(),
                reason: reason.clone(),
            },
            StoreError::BadLocation { what, .. } => StoreError::BadLocation {
                what: what.clone(),
                source: None,
            },
            // Already a message: kept as it is (wrapping it read "store unavailable: store
            // unavailable: …" in the log of every batch member but the first).
            StoreError::Unavailable(m) => StoreError::Unavailable(m.clone()),
            e if e.is_retryable() => StoreError::Unavailable(e.to_string()),
            e => StoreError::Internal(e.to_string()),
        }
    }

    pub(crate) fn encode(what: &'static str) -> impl FnOnce(serde_json::Error) -> StoreError {
        move |source| StoreError::Encode { what, source }
    }

    pub(crate) fn bad_def(job: &str) -> impl FnOnce(crate::schedule::ScheduleError) -> StoreError {
        let job = job.to_string();
        move |source| StoreError::BadDefinition { job, source }
    }
}

/// Every store operation's result.
pub type StoreResult<T> = Result<T, StoreError>;

/// Run a blocking store call on tokio's blocking pool, off the async workers: the one wrapper
/// every async caller (engine, attached console) uses, since stores are synchronous. A task that
/// panicked or was cancelled becomes [`StoreError::Task`] (exit 1, not retryable).
pub async fn blocking<T, F>(store: &std::sync::Arc<dyn Store>, f: F) -> StoreResult<T>
where
    T: Send + 'static,
    F: FnOnce(&dyn Store) -> StoreResult<T> + Send + 'static,
{
    let store = std::sync::Arc::clone(store);
    tokio::task::spawn_blocking(move || f(store.as_ref()))
        .await
        .unwrap_or_else(|source| {
            Err(StoreError::Task {
                what: "store task failed",
                source,
            })
        })
}

/// One page of [`Store::jobs_page_json`].
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
    /// The claim instant.
    pub now: DateTime<Utc>,
    /// The claiming owner (`host:pid:uuid8`).
    pub owner: &'a str,
    /// The owner's free run capacity: at most this many claims are returned.
    pub limit: usize,
    /// Jobs this owner is still running: never re-offered to it, even past their lease.
    pub in_flight: &'a [String],
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
    /// SPEC §6 recovery table like a crash would.
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

/// Where [`Store::apply_each`]'s `feed` hands each definition.
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
    /// What the apply changed in the settings, in words (`logic::settings_changes`), e.g.
    /// "budget period day → week"; empty when they are as stored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub settings: Vec<String>,
    /// Jobs whose spend in the budget period was recounted from history because the apply
    /// changed the period's kind (`budget::recount`), sorted by job; empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recounted: Vec<Recount>,
}

/// One job's spend recounted by an apply that changed the budget's `period` kind: what the
/// job's history rows booked in the new period (`budget::booked_since`), now its spend there.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Recount {
    /// The job.
    pub job: String,
    /// The new period's key: `day:2026-12-01`, `week:2026-W49`, `month:2026-12` or `total`.
    pub period: String,
    /// Its spend in that period as recounted (USD).
    pub spent_usd: f64,
}

/// Spend in the current budget period, for the pre-call budget check (SPEC §11).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SpendNow {
    /// Spent this period over all jobs, USD.
    pub global_usd: f64,
    /// Spent this period by the job, USD.
    pub job_usd: f64,
}

/// Reading history: what the console's on-demand reads (detail, `h`, diffs), `cronsole history`
/// and `cronsole diff` need. Every [`Store`] is one; a test double or a read-only view can be
/// this alone.
pub trait HistoryReader: Send + Sync {
    /// Rows matching `q`, newest first.
    fn history(&self, q: &HistoryQuery) -> StoreResult<Vec<HistoryRow>>;
    /// One page of `q` (`q.limit` rows; 0 means all, with no next page) and the token of the
    /// next. The stores answer with keyset positions; this default (test doubles, wrappers)
    /// pages by offset, token `o<N>`.
    fn history_page(&self, q: &HistoryQuery) -> StoreResult<HistoryPage> {
        let base = match &q.before {
            None => 0,
            Some(t) => t
                .strip_prefix('o')
                .and_then(|n| n.parse::<usize>().ok())
                .ok_or_else(|| {
                    StoreError::Refused(format!("'{t}' is not a page token of this store"))
                })?,
        };
        let offset = q.offset.saturating_add(base);
        let mut rows = self.history(&HistoryQuery {
            limit: if q.limit == 0 {
                0
            } else {
                q.limit.saturating_add(1)
            },
            offset,
            before: None,
            ..q.clone()
        })?;
        let more = q.limit > 0 && rows.len() > q.limit;
        if more {
            rows.truncate(q.limit);
        }
        let next = more.then(|| format!("o{}", offset - q.offset + q.limit));
        Ok(HistoryPage { rows, next })
    }
    /// One job by name, retired ones too (`None`: no job of that name).
    fn job(&self, name: &str) -> StoreResult<Option<JobRecord>>;
}

/// The operations every store provides. All times come from the caller.
pub trait Store: HistoryReader {
    /// Human form of where this store lives (`/path/.cronsole`, `postgres://host/db`).
    fn location(&self) -> String;
    /// Sync the jobs file's definitions and settings into the store (SPEC §13.2 `apply`).
    fn apply(&self, file: &JobsFile, now: DateTime<Utc>) -> StoreResult<ApplyReport>;
    /// [`Store::apply`] of definitions handed over one at a time: `feed` calls the sink it is
    /// given once per job, in file order, and fails when the file cannot be read to its end.
    /// Same checks and result as `apply` of the whole file; nothing changes when `feed` or a
    /// definition fails. A store that can write records as they come need never hold every
    /// definition at once (issue 14: `apply` of 1 000 000 jobs). This default collects them
    /// and calls `apply`.
    fn apply_each(
        &self,
        settings: &Settings,
        feed: &mut dyn FnMut(DefSink<'_>) -> StoreResult<()>,
        now: DateTime<Utc>,
    ) -> StoreResult<ApplyReport> {
        let mut jobs = Vec::new();
        feed(&mut |d| {
            jobs.push(d);
            Ok(())
        })?;
        let file = JobsFile {
            settings: settings.clone(),
            jobs,
        };
        self.apply(&file, now)
    }
    /// The settings of the last `apply`.
    fn settings(&self) -> StoreResult<Settings>;
    /// A cheap token that changes whenever anything in the store changed (no re-parse).
    fn change_token(&self) -> StoreResult<u64>;
    /// A push notification of changes (LISTEN/NOTIFY, file-system events), so an owner hears
    /// other processes within milliseconds; `None` when this store cannot push (the caller
    /// polls `change_token`). See [`signal`].
    fn change_signal(&self) -> Option<signal::ChangeSignal> {
        None
    }
    /// Every job, retired ones included, sorted by name.
    fn jobs(&self) -> StoreResult<Vec<JobRecord>>;
    /// Up to `limit` jobs whose names sort after `after` (from the first when `None`), in the
    /// order of [`Store::jobs`]: one page of a streamed read (`jobs --json`). The default reads
    /// every job per page; stores override it to read only the page.
    fn jobs_page(&self, after: Option<&str>, limit: usize) -> StoreResult<Vec<JobRecord>> {
        let mut all = self.jobs()?;
        if let Some(a) = after {
            // By name, not by position: a job removed between pages does not end the walk.
            all.retain(|j| j.def.name.as_str() > a);
        }
        all.truncate(limit);
        Ok(all)
    }
    /// [`Store::jobs_page`] for a listing that can print a record from its stored JSON
    /// (`jobs --json`): a store that keeps each record as JSON (the file store's lines) hands
    /// the page's JSON text, checksums verified, without parsing it; the default hands the
    /// parsed records of [`Store::jobs_page`].
    fn jobs_page_json(&self, after: Option<&str>, limit: usize) -> StoreResult<JsonPage> {
        Ok(JsonPage {
            buf: String::new(),
            jobs: self
                .jobs_page(after, limit)?
                .into_iter()
                .map(|r| PageJob::Record(Box::new(r)))
                .collect(),
        })
    }
    /// The earliest instant at which `claim_due` may have work (a slot, a lease expiry, a hold
    /// ending); `Some(now)` or earlier when something is claimable already.
    fn next_wakeup(&self, now: DateTime<Utc>) -> StoreResult<Option<DateTime<Utc>>>;
    /// Claim due jobs under the store's exclusive lock (SPEC §5, §6, §7).
    fn claim_due(&self, req: &ClaimRequest<'_>) -> StoreResult<ClaimOutcome>;
    /// Extend `run_id`'s lease on `job` (the run's owner calls this while it runs).
    fn renew(
        &self,
        job: &str,
        run_id: Uuid,
        owner: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<RenewOutcome>;
    /// Record a run's end: its row, its new state and the lease's release, fenced by `run_id`.
    fn complete(&self, c: Completion) -> StoreResult<CompleteOutcome>;
    /// Several completions at once (runs that ended together), results in order. Stores that
    /// can commit them together (one fsync for the batch) override this.
    fn complete_many(&self, cs: Vec<Completion>) -> Vec<StoreResult<CompleteOutcome>> {
        cs.into_iter().map(|c| self.complete(c)).collect()
    }
    /// A retried completion whose row history already holds (an earlier attempt wrote it): no
    /// second row; where the row and the job record are separate writes (the file store: the
    /// record failed after the row landed, e.g. `ENOSPC` on the journal), the record is
    /// finished from that row if it still holds the run's lease — a completion counts as
    /// written only when its row and its record are both durable. The default does nothing:
    /// a store that writes the row and the record in one transaction (PostgreSQL) has the
    /// record whenever it has the row. Wrappers must forward it.
    fn complete_recorded(&self, c: Completion) -> StoreResult<CompleteOutcome> {
        let _ = c;
        Ok(CompleteOutcome::default())
    }
    /// Pause or resume a job.
    fn set_paused(&self, name: &str, paused: bool, now: DateTime<Utc>) -> StoreResult<()>;
    /// Queue one manual run of a job.
    fn request_trigger(&self, name: &str, now: DateTime<Utc>) -> StoreResult<TriggerOutcome>;
    /// What has been spent this budget period, globally and by `job`.
    fn spend(&self, job: &str, now: DateTime<Utc>) -> StoreResult<SpendNow>;
    /// Reserve a model call's worst-case cost against every budget that applies, atomically for
    /// all owners (SPEC §11 hard limit; decisions in [`budget`]). Stores that keep no budgets
    /// (test doubles) refuse.
    fn reserve(&self, req: &budget::ReserveRequest<'_>) -> StoreResult<budget::ReserveOutcome> {
        let _ = req;
        Err(StoreError::Unsupported(
            "budget reservations (a job cannot call a model under a budget here)",
        ))
    }
    /// Settle, release or mark spent the reservation `id` of `job` (see [`budget::Settlement`]).
    fn settle(
        &self,
        job: &str,
        id: Uuid,
        how: budget::Settlement,
        now: DateTime<Utc>,
    ) -> StoreResult<()> {
        let _ = (job, id, how, now);
        Err(StoreError::Unsupported("budget reservations"))
    }

    /// Apply one operator action (retry, cancel, backfill, pause with a reason) to a job
    /// atomically: under the store's lock or inside one transaction. The decision is
    /// [`operator::apply_edit_rows`]; stores only persist it (and its rows).
    fn update_job(
        &self,
        name: &str,
        edit: &JobEdit,
        now: DateTime<Utc>,
    ) -> StoreResult<EditOutcome>;

    /// The process is stopping (`on`: its shutdown grace ended, or a second signal came):
    /// waits for a store held by another process end within about a second from now on, so
    /// completions that cannot be written go to the spool instead of holding the stop (red
    /// team 7). `false` restores the normal waits. The file store implements it; PostgreSQL's
    /// waits are already bounded by its operation timeout.
    fn hurry(&self, on: bool) {
        let _ = on;
    }

    /// One chunk (at most [`BULK_CHUNK`] names) of a bulk operator action, in order, stopping
    /// at the first job that fails (see [`BulkDone`]). Stores override it to write the chunk
    /// as one operation (one lock hold and fsync, or one transaction); the default does one
    /// operation per job.
    fn bulk_edit(&self, names: &[String], action: &BulkAction, now: DateTime<Utc>) -> BulkDone {
        let mut done = Vec::with_capacity(names.len());
        for name in names {
            let r = match action {
                BulkAction::SetPaused(p) => self
                    .set_paused(name, *p, now)
                    .map(|()| BulkOutcome::SetPaused),
                BulkAction::Trigger => self.request_trigger(name, now).map(BulkOutcome::Trigger),
                BulkAction::Edit(e) => self.update_job(name, e, now).map(BulkOutcome::Edit),
            };
            match r {
                Ok(out) => done.push(out),
                Err(e) => {
                    return BulkDone {
                        done,
                        error: Some(e),
                    };
                }
            }
        }
        BulkDone { done, error: None }
    }

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
            .ok_or(StoreError::NoSuchRun(run_id))?;
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
            .ok_or_else(|| StoreError::Refused(format!("run {run_id} is not running")))?;
        let out = self.update_job(&job, &JobEdit::Cancel(Some(run_id)), now)?;
        Ok((job, out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 15 item 1: the exit code is a function of the variant, not of a catch-all.
    #[test]
    fn exit_code_and_retryability_follow_the_variant() {
        let p = PathBuf::from("/s/jobs.journal");
        let bad_def =
            crate::schedule::parse_tz("Not/AZone")
                .err()
                .map(|source| StoreError::BadDefinition {
                    job: "j".into(),
                    source,
                });
        assert!(bad_def.is_some(), "an unknown zone is a schedule error");
        let mut cases: Vec<(StoreError, u8, bool)> = vec![
            (
                StoreError::Corrupt {
                    file: p.clone(),
                    line: 1,
                    column: 1,
                    what: "x".into(),
                },
                2,
                false,
            ),
            (StoreError::NoSuchJob("j".into()), 2, false),
            (StoreError::DuplicateJob("j".into()), 2, false),
            (
                StoreError::Version {
                    file: p.clone(),
                    found: "9".into(),
                    supported: "3".into(),
                },
                2,
                false,
            ),
            (StoreError::NoSuchRun(Uuid::nil()), 2, false),
            (StoreError::Refused("not paused".into()), 2, false),
            (
                StoreError::BadLocation {
                    what: "not a URL".into(),
                    source: None,
                },
                2,
                false,
            ),
            (
                StoreError::StateTooLarge {
                    job: "j".into(),
                    size: 2,
                    cap: 1,
                },
                1,
                false,
            ),
            (
                StoreError::Retired {
                    job: "j".into(),
                    reason: "r".into(),
                },
                2,
                false,
            ),
            (
                StoreError::io(&p, std::io::Error::from_raw_os_error(28)),
                1,
                true,
            ),
            (
                StoreError::LockTimeout {
                    file: p.clone(),
                    waited: std::time::Duration::from_secs(1),
                },
                1,
                true,
            ),
            (StoreError::Unavailable("down".into()), 1, true),
            (StoreError::Internal("bug".into()), 1, false),
            (StoreError::Unsupported("x"), 1, false),
            (
                StoreError::Encode {
                    what: "row",
                    source: serde_json::from_str::<u8>("x").unwrap_err(),
                },
                1,
                false,
            ),
        ];
        if let Some(e) = bad_def {
            cases.push((e, 2, false));
        }
        for (e, code, retry) in cases {
            assert_eq!(e.exit_code(), code, "{e:?}");
            assert_eq!(e.is_bad_input(), code == 2, "{e:?}");
            assert_eq!(e.is_retryable(), retry, "{e:?}");
            let d = e.duplicate();
            assert_eq!(d.exit_code(), code, "duplicate keeps the exit code: {e:?}");
            // rt3: the copy reads as the original, never "store unavailable: store unavailable".
            if matches!(e, StoreError::Unavailable(_)) {
                assert_eq!(d.to_string(), e.to_string());
            }
            assert_eq!(
                d.is_retryable(),
                retry,
                "duplicate keeps retryability: {e:?}"
            );
        }
    }
}

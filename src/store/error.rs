//! The store's errors and what each means for the caller: the exit code a command ends with and
//! whether retrying can help.
//!
//! Three families, by what failed: the store itself ([`OpenError`]: damaged, foreign, or not a
//! store), the operation asked of it ([`OperationError`]: an unknown job, a refused edit), or the
//! medium under it ([`BackendError`]: disk, lock, database, a task). The exit code follows the
//! family and the variant, never a message.
//!
//! Owns: [`StoreError`] and its families, [`Refusal`], [`StoreResult`]. Must not touch: how a
//! store reaches its data.

use std::path::PathBuf;

use uuid::Uuid;

/// Errors from any store: one family per kind of failure, one variant per cause within it, each
/// carrying its `#[source]` where there is one. The exit code is a function of the variant
/// ([`StoreError::exit_code`]): 2 for what the user gave us (a damaged or foreign store, an
/// unknown job, a bad definition or URL, a refused edit), 1 for runtime failures.
/// [`StoreError::is_retryable`] tells the engine "store unavailable, retry" (keep the completion,
/// back off) from "rejected" (retrying cannot help).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store cannot be used as one: found at open, or when an operation reads a damaged
    /// part. Always exit 2; never retried.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The operation does not hold for the store's state or for what was given: exit 2, except
    /// what is a fact of the moment (exit 1).
    #[error(transparent)]
    Operation(#[from] OperationError),
    /// The medium under the store failed (disk, lock, database, a task) or a store invariant
    /// broke: exit 1; retryable where the variant says.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// The store's files or location are not a store this build can use. Nothing is repaired or
/// overwritten.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
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
    /// A store location that is not one (e.g. a malformed PostgreSQL URL).
    #[error("{what}")]
    BadLocation {
        /// What is wrong with it.
        what: String,
        /// The driver's parse error, when it gave one.
        #[source]
        source: Option<tokio_postgres::Error>,
    },
}

/// What an operation was asked does not hold: an unknown job or run, a definition the store
/// cannot schedule, an operator edit the job's state refuses.
#[derive(Debug, Clone, thiserror::Error)]
pub enum OperationError {
    /// No job of that name, live or retired.
    #[error("no job named '{0}' in the store")]
    NoSuchJob(String),
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
    /// An operator action (retry, cancel, backfill) the job's state does not allow: which rule
    /// refused it, and what would work.
    #[error("{0}")]
    Refused(Refusal),
    /// A history page token this store did not hand out, or one retention has since made
    /// stale; the message says to start again from the first page.
    #[error("{0}")]
    BadPageToken(String),
    /// A jobs file whose `after:` links make a cycle (the cycle, written out).
    #[error("refusing to apply: `after` makes a cycle: {0} (a chain must end somewhere)")]
    ChainCycle(String),
    /// The jobs file changed while it was handed to the store job by job: what it says now.
    #[error("{0}")]
    JobsFile(crate::config::ConfigErrors),
    /// A definition with a number outside its documented bound (a `JobsFile` built in code, or
    /// one that skipped `config`): refused before anything is stored.
    #[error("refusing to apply: {0}")]
    OutOfBounds(#[source] crate::config::OutOfBounds),
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
    /// An approval answer for a run that no longer waits for one (answered, timed out, ended):
    /// a fact of the moment, not bad input, so exit 1.
    #[error("{0}")]
    NotAwaiting(String),
    /// An `apply` found that another apply changed a job's definition while it read its file
    /// (with the store's lock released); nothing was written. Running it again applies it.
    #[error(
        "job '{0}' was changed by another apply while this one read its file; nothing was applied: run it again"
    )]
    Overtaken(String),
}

/// The medium under the store failed, or the store broke one of its own invariants (a bug, never
/// the user's fault).
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// Reading or writing the store failed (disk full, permissions). Retryable.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Another process held the store lock past the bound (a long operation, or a holder
    /// that is stopped or wedged). Retryable.
    #[error("the store lock {file} is held by {holder}; gave up after waiting {waited:?}")]
    LockTimeout {
        /// The lock file.
        file: PathBuf,
        /// How long this process waited.
        waited: std::time::Duration,
        /// Who holds it, in words: its command, pid, for how long, and whether it is running,
        /// stopped or gone.
        holder: String,
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
    /// A record could not be encoded (a bug, not bad input).
    #[error("cannot encode {what}: {source}")]
    Encode {
        /// What was being encoded.
        what: &'static str,
        /// The encoder's error.
        #[source]
        source: serde_json::Error,
    },
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
    /// A store file the handle holds open for this operation is not open (a bug: an operation
    /// on a handle whose load failed, or on a file already closed): never the user's fault.
    #[error("internal store error: {} is not open", path.display())]
    NotOpen {
        /// The file.
        path: PathBuf,
    },
    /// A value too large for the store's format (a line over 4 GiB, a store id over 64 KiB):
    /// nothing is written.
    #[error("over the store format's limit: {0}")]
    OverFormatLimit(String),
    /// The file store's index does not lead to a job's record (a bug, or a line that changed
    /// since it was read without the lock).
    #[error("internal store error: job '{job}': {what}")]
    IndexMismatch {
        /// The job.
        job: String,
        /// What was found instead.
        what: &'static str,
    },
    /// An operation ended without handing back its result (its task panicked, or the store's
    /// runtime stopped): never the user's fault.
    #[error("internal store error: {0} ended without a result")]
    NoResult(&'static str),
    /// The database answered a statement that always returns a row with none.
    #[error("database error while {doing}: no row returned")]
    NoRow {
        /// What the store was doing.
        doing: &'static str,
    },
    /// A broken invariant of the caller (a bug): never the user's fault.
    #[error("internal error: {0}")]
    Invariant(&'static str),
    /// The copy of an error another member of the same batch failed with, when that error
    /// cannot be copied itself (see `duplicate`): its message.
    #[error("{0}")]
    Batch(String),
}

impl StoreError {
    /// Errors caused by what the user gave us (corrupt/foreign store, unknown job): exit 2.
    pub fn is_bad_input(&self) -> bool {
        self.exit_code() == 2
    }

    /// The process exit code this error ends a command with (2 = bad input, 1 = runtime).
    pub fn exit_code(&self) -> u8 {
        match self {
            StoreError::Open(_) => 2,
            StoreError::Operation(e) => e.exit_code(),
            StoreError::Backend(_) => 1,
        }
    }

    /// "Store unavailable, try again later" (disk full, database down, lock held by a stopped
    /// process) as opposed to "rejected" (retrying the same request cannot succeed).
    pub fn is_retryable(&self) -> bool {
        match self {
            StoreError::Open(_) | StoreError::Operation(_) => false,
            StoreError::Backend(e) => e.is_retryable(),
        }
    }

    /// A [`BackendError::Io`] on `path` — except that a directory where a store file should be
    /// (`EISDIR`) is damage, not a runtime failure: [`OpenError::Corrupt`] naming the file
    /// (exit 2, like a missing or foreign file), never retried.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        if source.kind() == std::io::ErrorKind::IsADirectory {
            return StoreError::Open(OpenError::Corrupt {
                file: path.into(),
                line: 0,
                column: 0,
                what: "a directory is where this store file should be (move the directory \
                       away and restore the file from a backup)"
                    .into(),
            });
        }
        StoreError::Backend(BackendError::Io {
            path: path.into(),
            source,
        })
    }

    /// A copy for the other members of a batch that failed together (errors are not `Clone`):
    /// same variant and exit code where it carries plain data, the message otherwise.
    pub(crate) fn duplicate(&self) -> StoreError {
        match self {
            StoreError::Open(e) => StoreError::Open(e.duplicate()),
            StoreError::Operation(e) => StoreError::Operation(e.clone()),
            StoreError::Backend(e) => StoreError::Backend(e.duplicate()),
        }
    }

    pub(crate) fn encode(what: &'static str) -> impl FnOnce(serde_json::Error) -> StoreError {
        move |source| StoreError::Backend(BackendError::Encode { what, source })
    }

    pub(crate) fn bad_def(job: &str) -> impl FnOnce(crate::schedule::ScheduleError) -> StoreError {
        let job = job.to_string();
        move |source| StoreError::Operation(OperationError::BadDefinition { job, source })
    }
}

impl OpenError {
    fn duplicate(&self) -> OpenError {
        match self {
            OpenError::Corrupt {
                file,
                line,
                column,
                what,
            } => OpenError::Corrupt {
                file: file.clone(),
                line: *line,
                column: *column,
                what: what.clone(),
            },
            OpenError::Version {
                file,
                found,
                supported,
            } => OpenError::Version {
                file: file.clone(),
                found: found.clone(),
                supported: supported.clone(),
            },
            OpenError::BadLocation { what, .. } => OpenError::BadLocation {
                what: what.clone(),
                source: None,
            },
        }
    }
}

impl OperationError {
    /// 2 for what the user gave or asked; 1 for a fact of the moment (an answer that came too
    /// late, a state over its cap).
    pub fn exit_code(&self) -> u8 {
        match self {
            OperationError::NoSuchJob(_)
            | OperationError::DuplicateJob(_)
            | OperationError::BadDefinition { .. }
            | OperationError::Retired { .. }
            | OperationError::NoSuchRun(_)
            | OperationError::Refused(_)
            | OperationError::BadPageToken(_)
            | OperationError::ChainCycle(_)
            | OperationError::JobsFile(_)
            | OperationError::OutOfBounds(_) => 2,
            OperationError::StateTooLarge { .. }
            | OperationError::NotAwaiting(_)
            | OperationError::Overtaken(_) => 1,
        }
    }
}

impl BackendError {
    /// The medium may recover (disk space, a lock released, the database back).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            BackendError::Io { .. }
                | BackendError::LockTimeout { .. }
                | BackendError::Database { .. }
                | BackendError::Unavailable(_)
        )
    }

    fn duplicate(&self) -> BackendError {
        match self {
            BackendError::Io { path, source } => BackendError::Io {
                path: path.clone(),
                source: std::io::Error::new(source.kind(), source.to_string()),
            },
            BackendError::LockTimeout {
                file,
                waited,
                holder,
            } => BackendError::LockTimeout {
                file: file.clone(),
                waited: *waited,
                holder: holder.clone(),
            },
            BackendError::OverFormatLimit(w) => BackendError::OverFormatLimit(w.clone()),
            BackendError::IndexMismatch { job, what } => BackendError::IndexMismatch {
                job: job.clone(),
                what,
            },
            BackendError::NoResult(w) => BackendError::NoResult(w),
            BackendError::NoRow { doing } => BackendError::NoRow { doing },
            BackendError::Invariant(w) => BackendError::Invariant(w),
            // Already a message: kept as it is (wrapping it read "store unavailable: store
            // unavailable: …" in the log of every batch member but the first).
            BackendError::Unavailable(m) => BackendError::Unavailable(m.clone()),
            BackendError::NotOpen { path } => BackendError::NotOpen { path: path.clone() },
            e if e.is_retryable() => BackendError::Unavailable(e.to_string()),
            e => BackendError::Batch(e.to_string()),
        }
    }
}

/// Every store operation's result.
pub type StoreResult<T> = Result<T, StoreError>;

/// Why an operator action (retry, cancel, backfill) is refused, one variant per rule, each with
/// what the message needs. Always bad input (exit 2): the same request cannot succeed until the
/// job's state changes.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refusal {
    /// `retry` of a run id given with the name of a job it does not belong to.
    #[error("run {run_id} belongs to job '{run_job}', not '{job}'")]
    RunOfAnotherJob {
        /// The run.
        run_id: Uuid,
        /// The job named.
        job: String,
        /// The job the run belongs to.
        run_job: String,
    },
    /// `retry` of a run that did not fail, miss or get abandoned.
    #[error(
        "run {run_id} of '{job}' is {status}; only failed, abandoned and missed runs can be retried"
    )]
    NotRetryable {
        /// The run.
        run_id: Uuid,
        /// Its job.
        job: String,
        /// Its status.
        status: crate::model::Status,
    },
    /// `retry` of a run whose retry is queued already.
    #[error("a retry of run {run_id} is already queued")]
    RetryQueued {
        /// The run.
        run_id: Uuid,
    },
    /// The job's queue of manual runs is full.
    #[error("job '{job}' already has {max} runs queued")]
    QueueFull {
        /// The job.
        job: String,
        /// How many runs a job may have queued.
        max: usize,
    },
    /// `cancel` of a run of this job that is not the one running.
    #[error("run {run_id} of '{job}' is not running (run {running} is)")]
    OtherRunRunning {
        /// The run named.
        run_id: Uuid,
        /// Its job.
        job: String,
        /// The run that is running.
        running: Uuid,
    },
    /// `cancel` of a run of this job that is not running.
    #[error("run {run_id} of '{job}' is not running")]
    RunNotRunning {
        /// The run named.
        run_id: Uuid,
        /// Its job.
        job: String,
    },
    /// `cancel` by the run id of a run the store holds no live run of.
    #[error("run {run_id} is not running")]
    NoLiveRun {
        /// The run named.
        run_id: Uuid,
    },
    /// `cancel` of a job with no live run and nothing queued.
    #[error("job '{job}' is not running and has nothing queued: nothing to cancel")]
    NothingToCancel {
        /// The job.
        job: String,
    },
    /// `cancel` of a job with no live run.
    #[error("job '{job}' is not running")]
    JobNotRunning {
        /// The job.
        job: String,
    },
    /// A retired job cannot be retried or backfilled.
    #[error("job '{job}' is retired ({reason}); it cannot be {what}")]
    Retired {
        /// The job.
        job: String,
        /// Its recorded reason.
        reason: String,
        /// What was asked ("retried", "backfilled").
        what: &'static str,
    },
    /// A backfill window that ends before it starts.
    #[error("--from {} is after --to {}", .from.to_rfc3339(), .to.to_rfc3339())]
    WindowReversed {
        /// The window's start.
        from: chrono::DateTime<chrono::Utc>,
        /// The window's end.
        to: chrono::DateTime<chrono::Utc>,
    },
    /// A backfill window that ends in the future.
    #[error(
        "--to {} is in the future; backfill runs the slots of a past window",
        .to.to_rfc3339()
    )]
    WindowInFuture {
        /// The window's end.
        to: chrono::DateTime<chrono::Utc>,
    },
    /// A backfill window without a slot not queued yet: none at all, or every one queued.
    #[error("{}", empty_window(job, *queued, from, to))]
    EmptyWindow {
        /// The job.
        job: String,
        /// How many of the window's slots are already queued for backfill.
        queued: usize,
        /// The window's start.
        from: chrono::DateTime<chrono::Utc>,
        /// The window's end.
        to: chrono::DateTime<chrono::Utc>,
    },
    /// A backfill window with more unqueued slots than the queue has room for, some fitting.
    #[error(
        "the window holds {holds} slots of '{job}' not queued yet, but only {fits} more fit \
         ({taken} of the {max} runs a job may have queued are taken); backfill up to --to {} \
         now, and the rest once the queued runs have started",
        .last_fit.to_rfc3339()
    )]
    WindowTooBig {
        /// The job.
        job: String,
        /// How many slots the window holds ("more than N" past the count's bound).
        holds: String,
        /// How many fit.
        fits: usize,
        /// The last slot that fits.
        last_fit: chrono::DateTime<chrono::Utc>,
        /// Runs queued already.
        taken: usize,
        /// How many runs a job may have queued.
        max: usize,
    },
    /// A backfill window with more unqueued slots than the queue has room for, none fitting.
    #[error(
        "the window holds {holds} slots of '{job}' not queued yet, but none fits ({taken} of \
         the {max} runs a job may have queued are taken); backfill once the queued runs have \
         started"
    )]
    QueueTaken {
        /// The job.
        job: String,
        /// How many slots the window holds ("more than N" past the count's bound).
        holds: String,
        /// Runs queued already.
        taken: usize,
        /// How many runs a job may have queued.
        max: usize,
    },
}

/// The refusal of a backfill that would queue nothing: a window with no slot, or one whose
/// slots are all queued already (a repeated backfill), said as such.
fn empty_window(
    job: &str,
    queued: usize,
    from: &chrono::DateTime<chrono::Utc>,
    to: &chrono::DateTime<chrono::Utc>,
) -> String {
    let (from, to) = (from.to_rfc3339(), to.to_rfc3339());
    match queued {
        0 => format!("job '{job}' has no slot to backfill between {from} and {to}"),
        1 => {
            format!("job '{job}''s one slot between {from} and {to} is already queued for backfill")
        }
        n => format!(
            "all {n} slots of job '{job}' between {from} and {to} are already queued for backfill"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exit code is a function of the variant, not of a catch-all string.
    #[test]
    fn exit_code_and_retryability_follow_the_variant() {
        let p = PathBuf::from("/s/jobs.journal");
        let bad_def = crate::schedule::parse_tz("Not/AZone").err().map(|source| {
            StoreError::Operation(OperationError::BadDefinition {
                job: "j".into(),
                source,
            })
        });
        assert!(bad_def.is_some(), "an unknown zone is a schedule error");
        let mut cases: Vec<(StoreError, u8, bool)> = vec![
            (
                StoreError::Open(OpenError::Corrupt {
                    file: p.clone(),
                    line: 1,
                    column: 1,
                    what: "x".into(),
                }),
                2,
                false,
            ),
            (
                StoreError::Operation(OperationError::NoSuchJob("j".into())),
                2,
                false,
            ),
            (
                StoreError::Operation(OperationError::DuplicateJob("j".into())),
                2,
                false,
            ),
            (
                StoreError::Open(OpenError::Version {
                    file: p.clone(),
                    found: "9".into(),
                    supported: "3".into(),
                }),
                2,
                false,
            ),
            (
                StoreError::Operation(OperationError::NoSuchRun(Uuid::nil())),
                2,
                false,
            ),
            (
                StoreError::Operation(OperationError::Refused(Refusal::JobNotRunning {
                    job: "j".into(),
                })),
                2,
                false,
            ),
            (
                StoreError::Open(OpenError::BadLocation {
                    what: "not a URL".into(),
                    source: None,
                }),
                2,
                false,
            ),
            (
                StoreError::Operation(OperationError::StateTooLarge {
                    job: "j".into(),
                    size: 2,
                    cap: 1,
                }),
                1,
                false,
            ),
            (
                StoreError::Operation(OperationError::Retired {
                    job: "j".into(),
                    reason: "r".into(),
                }),
                2,
                false,
            ),
            (
                StoreError::io(&p, std::io::Error::from_raw_os_error(28)),
                1,
                true,
            ),
            (
                StoreError::Backend(BackendError::LockTimeout {
                    file: p.clone(),
                    waited: std::time::Duration::from_secs(1),
                    holder: "`cronsole apply` (pid 812)".into(),
                }),
                1,
                true,
            ),
            (
                StoreError::Backend(BackendError::Unavailable("down".into())),
                1,
                true,
            ),
            (
                StoreError::Backend(BackendError::Invariant("bug")),
                1,
                false,
            ),
            (
                StoreError::Operation(OperationError::NotAwaiting("answered".into())),
                1,
                false,
            ),
            (
                StoreError::Operation(OperationError::BadPageToken(
                    "'x' is not a page token".into(),
                )),
                2,
                false,
            ),
            (
                StoreError::Operation(OperationError::ChainCycle("a → b → a".into())),
                2,
                false,
            ),
            (
                StoreError::Backend(BackendError::OverFormatLimit("a line over 4 GiB".into())),
                1,
                false,
            ),
            (
                StoreError::Backend(BackendError::IndexMismatch {
                    job: "j".into(),
                    what: "neither a line nor a record",
                }),
                1,
                false,
            ),
            (
                StoreError::Backend(BackendError::NoResult("a completion")),
                1,
                false,
            ),
            (
                StoreError::Backend(BackendError::NoRow { doing: "reading" }),
                1,
                false,
            ),
            (
                StoreError::Backend(BackendError::Batch("x".into())),
                1,
                false,
            ),
            (
                StoreError::Backend(BackendError::Unsupported("x")),
                1,
                false,
            ),
            (
                StoreError::Backend(BackendError::Encode {
                    what: "row",
                    source: serde_json::from_str::<u8>("x").unwrap_err(),
                }),
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
            // The copy reads as the original, never "store unavailable: store unavailable".
            if matches!(e, StoreError::Backend(BackendError::Unavailable(_))) {
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

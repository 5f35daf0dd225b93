//! The engine: the actor that turns the store into runs. It sleeps until the earliest instant
//! the store says something may be claimable, claims with its free run capacity as the limit,
//! spawns one task per run, renews leases while runs are alive, and publishes a [`Snapshot`] (on
//! a `watch` channel) and [`Event`]s (on a `broadcast` channel) for front ends. Front ends send
//! [`Command`]s over mpsc.
//!
//! One file per concern: `actor` (the loop and its state), `claim` (claim cycles, starting run
//! tasks), `task` (one run task), `renew` (its lease renewal), `completion` (group commit,
//! fenced retries, spool at stop), `outage` (store health, claims stopped, backoff, spool
//! replay), `shutdown` (grace, hurry, the final result), `commands` (front ends' commands and
//! operator cancels), `publish` (snapshot pacing), `heartbeat` (proof of life), `notice` (the
//! words an operator reads). `run` is the pipeline of one run, `chain` what a chained run
//! receives from its parents, `spool` the spool file.
//!
//! Owns: timing, claims, run tasks, lease renewal, shutdown. Must not touch: the UI or the
//! terminal (front ends talk to it only through the channels).
//!
//! # Driving an engine
//!
//! A front end sends [`Command`]s and reads [`Event`]s and [`Snapshot`]s. Here a job that runs
//! once a year is run now, then paused, each wait bounded in time (the crate root shows a
//! scheduled run):
//!
//! ```
//! use std::path::Path;
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use cronsole::clock::SystemClock;
//! use cronsole::engine::{self, Command, EngineConfig, Event, RunDeps};
//! use cronsole::model::{Status, Trigger};
//! use cronsole::store::{Store, file::FileStore};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let store: Arc<dyn Store> = Arc::new(FileStore::open(&dir.path().join("store"))?);
//! let jobs = cronsole::config::load_str(
//!     "jobs:\n  - name: report\n    schedule: \"0 6 1 1 *\"\n    command: echo report\n",
//!     Path::new("jobs.yaml"),
//! )?;
//! store.apply(&jobs.file, chrono::Utc::now())?;
//!
//! let engine = engine::spawn(
//!     EngineConfig::new(engine::new_owner_id()),
//!     Arc::clone(&store),
//!     Arc::new(SystemClock),
//!     RunDeps::from_env()?,
//! )?;
//! let mut events = engine.events.subscribe();
//!
//! // What the console draws: a row per job; this one's next slot is 1 January.
//! let next = engine.snapshots.borrow().jobs[0].rt.next_slot;
//! assert!(next > Some(chrono::Utc::now()));
//!
//! // Run it now (`t` in the console, `cronsole trigger report` from a shell).
//! engine.commands.send(Command::Trigger("report".into())).await?;
//! let row = tokio::time::timeout(Duration::from_secs(30), async {
//!     loop {
//!         if let Event::Row(row) = events.recv().await? {
//!             return Ok::<_, tokio::sync::broadcast::error::RecvError>(row);
//!         }
//!     }
//! })
//! .await??;
//! assert_eq!((row.trigger, row.status), (Trigger::Manual, Status::Succeeded));
//! assert_eq!(row.slot, None);
//!
//! // Commands are handled in order: the pause is in the store before the engine stops.
//! engine.commands.send(Command::Pause("report".into())).await?;
//! engine.commands.send(Command::Shutdown).await?;
//! tokio::time::timeout(Duration::from_secs(30), engine.join).await???;
//! assert!(store.job("report")?.is_some_and(|j| j.rt.paused));
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Utc};
use tokio::sync::{broadcast, mpsc, watch};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::clock::Clock;
use crate::model::{HistoryRow, Trigger};
use crate::snapshot::Snapshot;
use crate::store::{Store, StoreError};

mod actor;
pub mod chain;
mod claim;
mod commands;
mod completion;
mod heartbeat;
mod notice;
mod outage;
mod publish;
mod renew;
pub mod run;
mod shutdown;
pub mod spool;
mod task;

pub use heartbeat::Heartbeat;
pub use notice::{operator_notice, trigger_notice};
pub use outage::{EngineHealth, store_backoff};
pub use publish::PUBLISH_DUTY;
pub use run::RunDeps;

use actor::Actor;
use completion::completer;
use outage::Unwritten;
use publish::{SnapBuild, bare_snapshot};
use shutdown::hurry_at_stop;

/// What front ends ask the engine to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Pause the named job (no new runs; a running one finishes).
    Pause(String),
    /// Resume the named job.
    Resume(String),
    /// Run the named job once now (`trigger: manual`), unless it is running.
    Trigger(String),
    /// Queue a retry of this run (any owner takes it).
    Retry(Uuid),
    /// Cancel the job's running run (its process tree is killed), else drop what it has queued.
    Cancel(String),
    /// Stop the engine gracefully (as [`EngineHandle::shutdown`]).
    Shutdown,
}

/// What happened, for front ends (history rows arrive as they are written). Rows are by far
/// the most frequent event; boxing them would add an allocation per row to save space on the
/// rare small variants.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)]
pub enum Event {
    /// A claimed run started in this process.
    RunStarted {
        /// The job's name.
        job: String,
        /// The run's id (as in its history row).
        run_id: Uuid,
        /// Why it runs (schedule, manual, retry, …).
        trigger: Trigger,
        /// The scheduled instant it stands for (`None` for a manual run).
        slot: Option<DateTime<Utc>>,
    },
    /// A history row was written (runs of this process; other owners' rows show in snapshots).
    Row(HistoryRow),
    /// A delivery made by a sink (headless mode prints each one).
    Delivered {
        /// The job that delivered.
        job: String,
        /// The sink's name.
        sink: String,
        /// What was delivered.
        text: String,
    },
    /// A human notice: "trigger refused: job is running", store errors, shutdown progress.
    Notice(String),
}

/// Engine settings that are not in the store.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// `host:pid:uuid8`, new on each start.
    pub owner: String,
    /// Free run capacity = `max_concurrent - in flight` is the claim limit.
    pub max_concurrent: usize,
    /// How long a graceful shutdown waits for in-flight runs before cancelling them (30 s).
    pub shutdown_grace: StdDuration,
    /// How often the store's change token is checked.
    pub change_poll: StdDuration,
    /// Minimum spacing of snapshot rebuilds while things change quickly.
    pub snapshot_min_interval: StdDuration,
    /// Build and publish [`Snapshot`]s. Headless mode draws nothing and turns this off: a
    /// snapshot clones every job and reads up to 100 000 rows of the last 24 h, which dominated
    /// the peak RSS of a headless engine (119 MB → see docs/BENCHMARKS.md "Engine").
    pub publish_snapshots: bool,
    /// How long the store may refuse every write before this owner stops claiming new runs.
    pub outage_bound: StdDuration,
    /// Where completions the store could not take are kept when the engine stops (and replayed
    /// from at start). `None`: nowhere — they are reported as lost.
    pub spool: Option<std::path::PathBuf>,
    /// Listen to the store's change signal (`Store::change_signal`). Off, the engine notices
    /// other processes only through the `change_poll` (the behaviour before signals existed;
    /// `CRONSOLE_CHANGE_SIGNAL=off` for stores where the signal cannot work).
    pub change_signal: bool,
    /// At most one re-read of the store per this interval on change signals: every write by
    /// every owner fires one, and under load (40 runs/s over 4 owners: ~500 signals/s) reacting
    /// to each would add a store lock acquisition per signal per owner. Bursts coalesce.
    pub signal_min_interval: StdDuration,
}

impl EngineConfig {
    /// The defaults (8 concurrent runs, 30 s grace, 250 ms poll, signals on) for owner id `owner`.
    pub fn new(owner: String) -> Self {
        EngineConfig {
            owner,
            max_concurrent: 8,
            shutdown_grace: StdDuration::from_secs(30),
            change_poll: StdDuration::from_millis(250),
            snapshot_min_interval: StdDuration::from_millis(100),
            publish_snapshots: true,
            outage_bound: StdDuration::from_secs(30),
            spool: None,
            change_signal: true,
            signal_min_interval: StdDuration::from_millis(20),
        }
    }
}

/// A new owner id: `"{hostname}:{pid}:{uuid8}"`.
pub fn new_owner_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string());
    let id = Uuid::new_v4().simple().to_string();
    format!("{host}:{}:{}", std::process::id(), &id[..8])
}

/// The channel ends a front end needs.
pub struct EngineHandle {
    /// The latest snapshot (rebuilt at most every `snapshot_min_interval` while things change).
    pub snapshots: watch::Receiver<Arc<Snapshot>>,
    /// Events; call `subscribe()` for a receiver (subscribe before awaiting to miss nothing).
    pub events: broadcast::Sender<Event>,
    /// Commands from front ends.
    pub commands: mpsc::Sender<Command>,
    /// Cancel to request a graceful shutdown (same as `Command::Shutdown`).
    pub shutdown: CancellationToken,
    /// Cancel to stop waiting for in-flight runs: they are cancelled at once and recorded
    /// `abandoned` (reason `shutdown`). Implies `shutdown`.
    pub hard_stop: CancellationToken,
    /// Whether the store takes this owner's writes (for the console header and metrics).
    pub health: watch::Receiver<EngineHealth>,
    /// The engine task: ends after a shutdown, or with the store error it could not go on from.
    pub join: tokio::task::JoinHandle<Result<(), EngineError>>,
    /// Liveness of the engine loop (see [`Heartbeat`]).
    pub heartbeat: Arc<Heartbeat>,
}

/// Why the engine stopped.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A store error the engine could not go on from (a damaged or foreign store).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A background task of the engine died.
    #[error("store task failed: {0}")]
    Join(String),
    /// The completion spool could not be read or written.
    #[error(transparent)]
    Spool(#[from] spool::SpoolError),
    /// The engine stopped with completions the store never took.
    #[error("{}", unwritten_message(*spooled, spool.as_deref(), lost.len()))]
    Unwritten {
        /// Completions kept in the spool file.
        spooled: usize,
        /// The spool file, when one is configured.
        spool: Option<std::path::PathBuf>,
        /// Completions that could not even be spooled (printed by the binary so that nothing
        /// vanishes without a trace).
        lost: Vec<spool::Entry>,
    },
}

fn unwritten_message(spooled: usize, path: Option<&std::path::Path>, lost: usize) -> String {
    let mut m = String::new();
    if spooled > 0 {
        let p = path.map(|p| p.display().to_string()).unwrap_or_default();
        m.push_str(&format!(
            "{spooled} completion(s) could not be written to the store; kept in {p} and replayed at the next start"
        ));
    }
    if lost > 0 {
        if !m.is_empty() {
            m.push_str("; ");
        }
        m.push_str(&format!(
            "{lost} completion(s) could not be written to the store nor spooled (printed on stderr)"
        ));
    }
    m
}

/// Run a blocking store call off the async workers.
pub async fn blocking<T, F>(store: &Arc<dyn Store>, f: F) -> Result<T, EngineError>
where
    T: Send + 'static,
    F: FnOnce(&dyn Store) -> Result<T, StoreError> + Send + 'static,
{
    crate::store::blocking(store, f)
        .await
        .map_err(EngineError::from)
}

/// Start the engine on the current tokio runtime.
pub fn spawn(
    cfg: EngineConfig,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    deps: RunDeps,
) -> Result<EngineHandle, EngineError> {
    let started = clock.now();
    let initial = if cfg.publish_snapshots {
        Snapshot::load_first(store.as_ref(), started, &cfg.owner, started, true)?
    } else {
        bare_snapshot(store.as_ref(), started, &cfg.owner)
    };
    let (snap_tx, snap_rx) = watch::channel(Arc::new(initial));
    let (ev_tx, _) = broadcast::channel(1024);
    let (cmd_tx, cmd_rx) = mpsc::channel(64);
    let shutdown = CancellationToken::new();
    let hard_stop = CancellationToken::new();
    let (completions, completions_rx) = mpsc::channel(1024);
    tokio::spawn(completer(Arc::clone(&store), completions_rx));
    let (health_tx, health_rx) = watch::channel(EngineHealth::default());
    let heartbeat = Arc::new(Heartbeat::default());
    let actor = Actor {
        heartbeat: Arc::clone(&heartbeat),
        completions,
        health: Arc::new(health_tx),
        unwritten: Arc::new(std::sync::Mutex::new(Unwritten::default())),
        store_failures: 0,
        damaged: None,
        hard_stop: hard_stop.clone(),
        cfg,
        store,
        clock,
        deps: Arc::new(deps),
        snap_tx,
        snap_build: Arc::new(SnapBuild::default()),
        ev_tx: ev_tx.clone(),
        started,
        in_flight: HashMap::new(),
        shutdown: shutdown.clone(),
    };
    // However the actor ends (shutdown, or a store error it cannot go on from), front ends
    // waiting on `shutdown` learn of it and the process exits instead of idling.
    let ended = shutdown.clone();
    let hurry = tokio::spawn(hurry_at_stop(
        Arc::clone(&actor.store),
        shutdown.clone(),
        hard_stop.clone(),
        actor.cfg.shutdown_grace,
    ));
    let store = Arc::clone(&actor.store);
    let join = tokio::spawn(async move {
        let r = actor.run(cmd_rx).await;
        // The stop is over: a later engine on this store waits for its lock as usual.
        hurry.abort();
        let _ = hurry.await;
        store.hurry(false);
        ended.cancel();
        r
    });
    Ok(EngineHandle {
        snapshots: snap_rx,
        events: ev_tx,
        commands: cmd_tx,
        shutdown,
        hard_stop,
        health: health_rx,
        join,
        heartbeat,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An engine over a store larger than one page publishes the first page at once
    /// (marked loading) and the whole store from a build off its own task.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_first_snapshot_is_one_page_and_the_whole_store_follows() {
        use crate::model::JobsFile;
        use crate::store::file::FileStore;
        let dir = crate::testkit::tmp::TempDir::new("engine-first-page");
        let store: Arc<dyn Store> = Arc::new(FileStore::open(&dir).unwrap());
        let now = chrono::Utc::now();
        let n = crate::snapshot::FIRST_ROWS + 2;
        let file = JobsFile {
            jobs: (0..n)
                .map(|i| crate::testkit::jobs::command_job(&format!("j{i:06}"), 86_400))
                .collect(),
            ..Default::default()
        };
        store.apply(&file, now).unwrap();
        let deps =
            crate::testkit::engine::run_deps(crate::testkit::engine::no_env(), Default::default());
        let h = spawn(
            EngineConfig::new("first-page".into()),
            Arc::clone(&store),
            Arc::new(crate::clock::SystemClock),
            deps,
        )
        .unwrap();
        let mut rx = h.snapshots.clone();
        {
            let first = rx.borrow_and_update();
            assert_eq!(first.jobs.len(), crate::snapshot::FIRST_ROWS);
            assert!(first.loading);
        }
        let all = tokio::time::timeout(StdDuration::from_secs(60), async {
            loop {
                rx.changed().await.unwrap();
                let s = rx.borrow_and_update().clone();
                if !s.loading {
                    return s;
                }
            }
        })
        .await
        .expect("the whole snapshot within a minute");
        assert_eq!(all.jobs.len(), n);
        h.shutdown.cancel();
        h.join.await.unwrap().unwrap();
    }
}

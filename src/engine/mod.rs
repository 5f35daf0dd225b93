//! The engine: the actor that turns the store into runs (SPEC §6, §8). It sleeps until the
//! earliest instant the store says something may be claimable (no fixed polling of the schedule),
//! claims with its free run capacity as the limit, spawns one task per run, renews leases while
//! runs are alive, and publishes a [`Snapshot`] (on a `watch` channel) and [`Event`]s (on a
//! `broadcast` channel) for front ends. Front ends send [`Command`]s over mpsc.
//!
//! Changes made by other owners (or `cronsole pause/trigger` from a shell) are pushed by the
//! store's change signal (LISTEN/NOTIFY on PostgreSQL, inotify on the file store; see
//! `store::signal`), so the engine re-reads its next wake-up within milliseconds. The store's
//! cheap change token is still checked every `change_poll` (250 ms) as the fallback for stores or
//! moments without a signal (a lost inotify event, a file system that reports no remote writes);
//! that tick also makes the loop turn, which the [`Heartbeat`] (health check, systemd watchdog)
//! relies on.
//!
//! Shutdown (SPEC §8): stop claiming, wait up to `shutdown_grace` for in-flight runs, then cancel
//! them; a cancelled run is completed as `abandoned` with reason `shutdown`, which the store treats
//! like a crash (§6 table). A second shutdown request cancels at once. Each run has its own
//! cancellation token (not a child of `shutdown`), so a graceful shutdown really lets runs finish.
//!
//! Store outages (issue 10 item 5): a completion the store refuses is kept by its run task and
//! retried with [`store_backoff`] until written, the lease still renewed meanwhile; claim and
//! wake-up failures back off the same way. When every write has failed for longer than
//! `EngineConfig::outage_bound`, no new run is claimed until one succeeds; [`EngineHealth`]
//! (published on [`EngineHandle::health`]) says so for the console and metrics. At stop, what is
//! still unwritten goes to the [`spool`] file, the engine ends with [`EngineError::Unwritten`]
//! (so `run` exits non-zero), and the next start replays the spool before its first claim.
//! A retry or replay that finds its row already in history still has the store finish the job
//! record from it ([`Store::complete_recorded`]): written means row and record. A claim that
//! finds the store damaged (`StoreError::Corrupt`/`Version`) is not an outage: the engine
//! stops as at a shutdown and ends with that error (exit 2, naming the file).
//! Once the grace has passed after a shutdown request (or at a second one), the store is told
//! to hurry ([`Store::hurry`]): a wait for a lock another process holds ends within about a
//! second, so a stop is never held by an outside lock holder (red team 7).
//!
//! Operator cancel (issue 12): `cronsole cancel` (any process, any host) marks the run's lease in
//! the store; when the change token moves, the engine reads the leases of its runs in flight and
//! cancels a marked one through a second per-run token. That run is completed `failed` with
//! reason `cancelled by operator` (its pipeline is dropped, which kills its process group; no
//! retry, no delivery, no alert). Retries and backfills need nothing here: they are claimed like
//! any queued run.
//!
//! Snapshots are built only when a front end draws them (`EngineConfig::publish_snapshots`);
//! headless mode turns them off because a snapshot reads every job and the last 24 h of
//! history, which dominated the headless engine's memory. A snapshot is built on a blocking
//! thread, never on the actor's task: claims go on while a million-job store is read (issue
//! 14). One build runs at a time; the next starts no sooner than `snapshot_min_interval`, nor
//! than [`PUBLISH_DUTY`] times the last build's duration after it, so re-reading a large store
//! takes a bounded share of a core however fast the store changes. The first snapshot
//! ([`spawn`]) holds only the first page of jobs ([`Snapshot::load_first`]) so the console
//! draws at once; the whole one follows from the first build.
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

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration as StdDuration;

use chrono::{DateTime, Utc};
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::clock::Clock;
use crate::model::{HistoryRow, Status, Trigger};
use crate::snapshot::Snapshot;
use crate::store::{
    Claim, ClaimRequest, CompleteOutcome, Completion, RenewOutcome, Store, StoreError,
    TriggerOutcome,
};

pub mod chain;
pub mod run;
pub mod spool;

pub use run::RunDeps;

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

/// A new owner id: `"{hostname}:{pid}:{uuid8}"` (SPEC §1).
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

/// Proof of life of the engine loop, for health checks and the systemd watchdog: the loop
/// beats on every turn (at least every `change_poll`), and counts finished claim cycles.
#[derive(Debug)]
pub struct Heartbeat {
    base: std::time::Instant,
    /// Milliseconds after `base` of the last loop turn.
    last_ms: AtomicU64,
    claim_cycles: AtomicU64,
}

impl Default for Heartbeat {
    fn default() -> Self {
        Heartbeat {
            base: std::time::Instant::now(),
            last_ms: AtomicU64::new(0),
            claim_cycles: AtomicU64::new(0),
        }
    }
}

impl Heartbeat {
    fn beat(&self) {
        let ms = self.base.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::SeqCst);
    }
    /// How long ago the engine loop last turned.
    pub fn since_last_turn(&self) -> StdDuration {
        let now = self.base.elapsed().as_millis() as u64;
        StdDuration::from_millis(now.saturating_sub(self.last_ms.load(Ordering::SeqCst)))
    }
    /// Claim cycles completed (successful or not) since the engine started.
    pub fn claim_cycles(&self) -> u64 {
        self.claim_cycles.load(Ordering::SeqCst)
    }
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

/// The engine's view of its store, published on [`EngineHandle::health`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineHealth {
    /// Since when every write to the store has failed (`None`: the last write worked).
    pub store_failing_since: Option<DateTime<Utc>>,
    /// The last store error, while failing.
    pub last_store_error: Option<String>,
    /// Runs that finished but whose completion the store has not taken yet (retried).
    pub pending_completions: usize,
    /// No new runs are claimed: the store stayed unwritable past `outage_bound`.
    pub claims_stopped: bool,
    /// Completions written to the spool file at stop (replayed at the next start).
    pub spooled: usize,
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

/// Delay before the `attempt`-th retry of a failing store call: 250 ms doubling to 10 s.
pub fn store_backoff(attempt: u32) -> StdDuration {
    let ms = 250u64.saturating_mul(1u64 << attempt.saturating_sub(1).min(6));
    StdDuration::from_millis(ms.min(10_000))
}

type Health = Arc<watch::Sender<EngineHealth>>;

/// A store write worked: the store is healthy again.
fn store_ok(health: &Health, ev_tx: &broadcast::Sender<Event>) {
    let mut recovered = false;
    health.send_if_modified(|h| {
        if h.store_failing_since.is_none() {
            return false;
        }
        recovered = h.claims_stopped;
        h.store_failing_since = None;
        h.last_store_error = None;
        h.claims_stopped = false;
        true
    });
    if recovered {
        tracing::warn!("store writable again; claiming resumed");
        let _ = ev_tx.send(Event::Notice(
            "store writable again; claiming resumed".to_string(),
        ));
    }
}

/// A store write failed at `now`.
fn store_failed(health: &Health, now: DateTime<Utc>, e: &EngineError) {
    let msg = e.to_string();
    health.send_modify(|h| {
        h.store_failing_since.get_or_insert(now);
        h.last_store_error = Some(msg);
    });
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

/// One run of this owner, keyed by its run_id (a job under `overlap: allow` may have several).
struct InFlight {
    job: String,
    /// The job's `overlap:` policy when the run was claimed: whether this owner still lets the
    /// store look at the job while it runs it (see [`Actor::claim`]).
    overlap: crate::model::Overlap,
    cancel: CancellationToken,
    /// Cancelled when an operator asked (through the store) to cancel this run.
    op_cancel: CancellationToken,
    /// The run task, so a task that panicked can be matched to its job.
    task: Option<tokio::task::Id>,
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

/// A snapshot build starts no sooner than this many times the last build's duration after
/// the last start: building takes at most about a third of one core, whatever the store's size.
pub const PUBLISH_DUTY: u32 = 3;

/// The final snapshot at shutdown is built only when the last build took at most this long.
const FINAL_BUILD_MAX: StdDuration = StdDuration::from_secs(1);

/// How often the actor looks whether a running snapshot build has ended (when a newer one is due).
const BUILD_POLL: StdDuration = StdDuration::from_millis(25);

/// The state of the snapshot builds, shared with the blocking thread that runs one.
#[derive(Debug, Default)]
struct SnapBuild {
    /// A build is running.
    busy: AtomicBool,
    /// How long the last build took (ms).
    took_ms: AtomicU64,
}

/// Marks the running build ended when dropped.
struct BuildDone(Arc<SnapBuild>);

impl Drop for BuildDone {
    fn drop(&mut self) {
        self.0.busy.store(false, Ordering::SeqCst);
    }
}

impl SnapBuild {
    fn running(&self) -> bool {
        self.busy.load(Ordering::SeqCst)
    }

    /// The least time between the starts of two builds: `min`, or [`PUBLISH_DUTY`] times the
    /// last build's duration when that is longer.
    fn gap(&self, min: StdDuration) -> StdDuration {
        let took = StdDuration::from_millis(self.took_ms.load(Ordering::SeqCst));
        min.max(took.saturating_mul(PUBLISH_DUTY))
    }
}

/// The snapshot of an engine that does not publish any (headless): identity only.
fn bare_snapshot(store: &dyn Store, now: DateTime<Utc>, owner: &str) -> Snapshot {
    Snapshot {
        taken_at: now,
        store: store.location(),
        owner: owner.to_string(),
        started_at: now,
        engine_running: true,
        jobs: Vec::new(),
        loading: false,
        owners_seen: vec![owner.to_string()],
        settings: Default::default(),
        period_spend_usd: 0.0,
        spend_incomplete: false,
        recent: Vec::new(),
        counts_24h: Default::default(),
        spend_per_hour: vec![0.0; 24],
        pending: Default::default(),
        in_flight: Default::default(),
        forecast: None,
    }
}

struct Actor {
    cfg: EngineConfig,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    deps: Arc<RunDeps>,
    snap_tx: watch::Sender<Arc<Snapshot>>,
    snap_build: Arc<SnapBuild>,
    ev_tx: broadcast::Sender<Event>,
    started: DateTime<Utc>,
    in_flight: HashMap<Uuid, InFlight>,
    shutdown: CancellationToken,
    hard_stop: CancellationToken,
    completions: CompletionTx,
    health: Health,
    unwritten: Arc<std::sync::Mutex<Unwritten>>,
    /// Consecutive failed claim/wake-up calls: the next one waits [`store_backoff`].
    store_failures: u32,
    /// A claim found the store damaged ([`StoreError::Corrupt`]): not an outage, retrying
    /// cannot help. The engine stops (its runs finish as at a stop) and returns it (exit 2).
    damaged: Option<StoreError>,
    heartbeat: Arc<Heartbeat>,
}

/// Completions the engine gave up writing at stop.
#[derive(Default)]
struct Unwritten {
    spooled: usize,
    lost: Vec<spool::Entry>,
}

/// A completion waiting for the group committer, and where its result goes.
type CompletionJob = (
    Completion,
    oneshot::Sender<Result<CompleteOutcome, EngineError>>,
);
type CompletionTx = mpsc::Sender<CompletionJob>;

/// Group commit of run completions: takes every completion that is already waiting and hands
/// them to the store in one `complete_many` (the file store writes them with one fsync pair), so
/// runs ending together do not each hold the store lock for their own fsyncs while claims wait.
/// With one run at a time the batch is one completion, exactly as before.
async fn completer(store: Arc<dyn Store>, mut rx: mpsc::Receiver<CompletionJob>) {
    const MAX_BATCH: usize = 256;
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(more) => batch.push(more),
                Err(_) => break,
            }
        }
        let (cs, replies): (Vec<Completion>, Vec<_>) = batch.into_iter().unzip();
        let st = Arc::clone(&store);
        match tokio::task::spawn_blocking(move || st.complete_many(cs)).await {
            Ok(results) => {
                for (r, tx) in results.into_iter().zip(replies) {
                    let _ = tx.send(r.map_err(EngineError::from));
                }
            }
            Err(e) => {
                for tx in replies {
                    let _ = tx.send(Err(EngineError::Join(e.to_string())));
                }
            }
        }
    }
}

/// Once the stop has waited long enough — a second signal (hard stop), or the shutdown grace
/// after the first — tell the store to stop waiting long for a lock another process holds
/// ([`Store::hurry`]): a claim or completion stuck behind it then fails within about a second,
/// the actor reaches its shutdown, and what is unwritten is spooled (the run exits 1 naming
/// the spool) instead of the process waiting out the holder (red team 7).
async fn hurry_at_stop(
    store: Arc<dyn Store>,
    shutdown: CancellationToken,
    hard_stop: CancellationToken,
    grace: StdDuration,
) {
    tokio::select! {
        _ = hard_stop.cancelled() => {}
        _ = async {
            shutdown.cancelled().await;
            tokio::time::sleep(grace).await;
        } => {}
    }
    tracing::info!("stopping: store lock waits now end within a second");
    store.hurry(true);
}

/// What a finished run task hands back to the actor.
struct Finished {
    run_id: Uuid,
    rows: Vec<HistoryRow>,
}

impl Actor {
    fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// Tokio instant for a wall-clock instant (wall time may be injected).
    fn instant_for(&self, at: DateTime<Utc>) -> tokio::time::Instant {
        let d = (at - self.now()).to_std().unwrap_or(StdDuration::ZERO);
        tokio::time::Instant::now() + d
    }

    async fn run(mut self, mut cmd_rx: mpsc::Receiver<Command>) -> Result<(), EngineError> {
        let mut runs: JoinSet<Finished> = JoinSet::new();
        let mut poll = tokio::time::interval(self.cfg.change_poll);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut last_token = blocking(&self.store, |s| s.change_token()).await?;
        let mut dirty = true;
        let mut last_publish = tokio::time::Instant::now() - self.cfg.snapshot_min_interval;
        // Completions spooled at the last stop go in before anything is claimed, so a recovery
        // claim can never record them `abandoned` first.
        self.replay_spool().await?;
        let mut poll_failing = false;
        // One claim cycle at start, due or not: it recovers expired leases at once, and the
        // service manager is told the engine is ready only after a cycle completed.
        let mut wake = Some(self.now());
        let mut signal = if self.cfg.change_signal {
            self.store.change_signal()
        } else {
            None
        };

        let mut last_signal = tokio::time::Instant::now() - self.cfg.signal_min_interval;
        loop {
            self.heartbeat.beat();
            let publish_gap = self.snap_build.gap(self.cfg.snapshot_min_interval);
            if dirty && !self.snap_build.running() && last_publish.elapsed() >= publish_gap {
                self.publish();
                last_publish = tokio::time::Instant::now();
                dirty = false;
            }
            // Owners sharing a store all wake for the same slot and race for its lock: up to 1 ms
            // of random spread keeps the same owner from winning that race every time.
            let spread = StdDuration::from_micros((crate::action::jitter_unit() * 1000.0) as u64);
            let wake_at = wake.map(|w| self.instant_for(w) + spread);
            // While a build runs, look again shortly: the next one starts when it has ended.
            let publish_at = dirty.then(|| {
                let at = last_publish + publish_gap;
                if self.snap_build.running() {
                    at.max(tokio::time::Instant::now() + BUILD_POLL)
                } else {
                    at
                }
            });
            tokio::select! {
                biased;
                cmd = cmd_rx.recv() => {
                    match cmd {
                        None | Some(Command::Shutdown) => break,
                        Some(c) => { self.command(c).await; dirty = true; wake = self.next_wake().await; }
                    }
                }
                _ = self.shutdown.cancelled() => break,
                _ = self.hard_stop.cancelled() => break,
                Some(done) = runs.join_next(), if !runs.is_empty() => {
                    // Every run already finished is reaped before the one store read below
                    // (a burst ends hundreds of runs at once: one `next_wakeup` for all).
                    let mut done = Some(done);
                    while let Some(d) = done.take().or_else(|| runs.try_join_next()) {
                        match d {
                            Ok(f) => {
                                self.in_flight.remove(&f.run_id);
                                for r in f.rows { let _ = self.ev_tx.send(Event::Row(r)); }
                            }
                            Err(e) => self.reap_failed(&e),
                        }
                    }
                    dirty = true;
                    wake = self.next_wake().await;
                }
                alive = signal_changed(&mut signal) => {
                    if alive {
                        tokio::time::sleep_until(last_signal + self.cfg.signal_min_interval).await;
                        last_signal = tokio::time::Instant::now();
                        // What fired while we waited is covered by the re-read below.
                        if let Some(s) = signal.as_mut() {
                            s.rx.borrow_and_update();
                        }
                        dirty = true;
                        wake = self.next_wake().await;
                    } else {
                        tracing::warn!("store change signal ended; polling the change token");
                        signal = None;
                    }
                }
                _ = sleep_opt(wake_at) => {
                    let progressed = self.claim(&mut runs).await;
                    self.heartbeat.claim_cycles.fetch_add(1, Ordering::SeqCst);
                    if self.damaged.is_some() {
                        break;
                    }
                    dirty = true;
                    wake = self.next_wake().await;
                    // The store may report something due that this owner cannot take (its own
                    // run past its lease, a job another owner is finishing): do not spin on it.
                    let now = self.now();
                    if self.store_failures > 0 || self.health.borrow().claims_stopped {
                        // A store that keeps failing is retried with backoff, not every 250 ms.
                        let d = store_backoff(self.store_failures.max(1));
                        wake = Some(now + chrono::Duration::from_std(d).unwrap_or(chrono::Duration::seconds(1)));
                    } else if !progressed && wake.is_some_and(|w| w <= now) {
                        wake = Some(now + chrono::Duration::from_std(self.cfg.change_poll).unwrap_or(chrono::Duration::milliseconds(250)));
                    }
                }
                _ = poll.tick() => {
                    match blocking(&self.store, |s| s.change_token()).await {
                        Ok(t) if t != last_token => {
                            last_token = t;
                            self.honour_cancel_requests().await;
                            dirty = true;
                            wake = self.next_wake().await;
                        }
                        Ok(_) => poll_failing = false,
                        Err(e) => {
                            // Once per outage, not every 250 ms.
                            if !poll_failing {
                                tracing::warn!(error = %e, "store change check failed");
                            }
                            poll_failing = true;
                        }
                    }
                }
                _ = sleep_opt(publish_at) => {}
            }
        }
        self.shutdown_runs(runs).await;
        self.publish_final().await;
        let (spooled, lost) = match self.unwritten.lock() {
            Ok(mut u) => (u.spooled, std::mem::take(&mut u.lost)),
            Err(_) => (0, Vec::new()),
        };
        // Completions that could not even be spooled go first (the binary prints them);
        // otherwise the damage is the reason to stop (spooled ones are in the log).
        if let Some(e) = self.damaged.take()
            && lost.is_empty()
        {
            if spooled > 0 {
                tracing::warn!(
                    spooled,
                    "completions kept in the spool at the stop on damage"
                );
            }
            return Err(EngineError::Store(e));
        }
        if spooled > 0 || !lost.is_empty() {
            return Err(EngineError::Unwritten {
                spooled,
                spool: self.cfg.spool.clone(),
                lost,
            });
        }
        Ok(())
    }

    /// Write the completions spooled at the last stop (fenced by run_id, each at most once),
    /// retrying with backoff while the store refuses them; stop waiting on shutdown (they stay
    /// spooled). A completion the store rejects as bad input stays in the spool, reported.
    async fn replay_spool(&mut self) -> Result<(), EngineError> {
        let Some(path) = self.cfg.spool.clone() else {
            return Ok(());
        };
        let sp = spool::Spool::new(path);
        let loaded = {
            let sp = sp.clone();
            tokio::task::spawn_blocking(move || sp.load())
                .await
                .map_err(|e| EngineError::Join(e.to_string()))??
        };
        if loaded.is_empty() {
            return Ok(());
        }
        let msg = format!(
            "replaying {} completion(s) spooled at the last stop ({})",
            loaded.len(),
            sp.path().display()
        );
        tracing::warn!("{msg}");
        let _ = self.ev_tx.send(Event::Notice(msg));
        let mut left = loaded;
        let mut attempt = 0u32;
        loop {
            let mut still = Vec::new();
            let mut rejected = Vec::new();
            for e in left {
                let c: Completion = e.clone().into();
                match commit_once(&self.store, &self.completions, c).await {
                    Ok(rows) => {
                        store_ok(&self.health, &self.ev_tx);
                        for r in rows {
                            let _ = self.ev_tx.send(Event::Row(r));
                        }
                    }
                    Err(EngineError::Store(se)) if se.is_bad_input() => {
                        tracing::error!(job = %e.job, run_id = %e.run_id, error = %se, "spooled completion rejected by the store; kept in the spool");
                        let _ = self.ev_tx.send(Event::Notice(format!(
                            "spooled completion of '{}' rejected by the store ({se}); kept in {}",
                            e.job,
                            sp.path().display()
                        )));
                        rejected.push(e);
                    }
                    Err(err) => {
                        store_failed(&self.health, self.now(), &err);
                        still.push(e);
                    }
                }
            }
            let keep: Vec<spool::Entry> = still.iter().chain(&rejected).cloned().collect();
            {
                let sp = sp.clone();
                tokio::task::spawn_blocking(move || sp.rewrite(&keep))
                    .await
                    .map_err(|e| EngineError::Join(e.to_string()))??;
            }
            if still.is_empty() {
                return Ok(());
            }
            attempt += 1;
            tracing::warn!(
                left = still.len(),
                attempt,
                "spooled completions not written yet; retrying"
            );
            tokio::select! {
                _ = tokio::time::sleep(store_backoff(attempt)) => {}
                _ = self.shutdown.cancelled() => {
                    self.note_left_in_spool(still.len());
                    return Ok(());
                }
                _ = self.hard_stop.cancelled() => {
                    self.note_left_in_spool(still.len());
                    return Ok(());
                }
            }
            left = still;
        }
    }

    fn note_left_in_spool(&self, n: usize) {
        if let Ok(mut u) = self.unwritten.lock() {
            u.spooled += n;
        }
        self.health.send_modify(|h| h.spooled += n);
    }

    /// Whether claiming is stopped because the store stayed unwritable past the bound; reports
    /// the moment it starts.
    fn claims_stopped(&self) -> bool {
        let now = self.now();
        let bound = chrono::Duration::from_std(self.cfg.outage_bound)
            .unwrap_or(chrono::Duration::seconds(30));
        let mut started = None;
        self.health.send_if_modified(|h| {
            let stop = h.store_failing_since.is_some_and(|t| now - t >= bound);
            if stop == h.claims_stopped {
                return false;
            }
            h.claims_stopped = stop;
            if stop {
                started = Some((
                    h.last_store_error.clone().unwrap_or_default(),
                    h.pending_completions,
                ));
            }
            true
        });
        if let Some((err, pending)) = started {
            let msg = format!(
                "store unwritable for over {}s: no new runs are claimed until it takes writes again ({pending} completion(s) waiting; last error: {err})",
                self.cfg.outage_bound.as_secs()
            );
            tracing::error!("{msg}");
            let _ = self.ev_tx.send(Event::Notice(msg));
        }
        self.health.borrow().claims_stopped
    }

    /// A run task panicked (a bug, never outside input): forget it here so its job is not
    /// blocked in this process forever and its capacity comes back; the store recovers its lease
    /// when it expires (an `abandoned` row, SPEC §6).
    fn reap_failed(&mut self, e: &tokio::task::JoinError) {
        let found = self
            .in_flight
            .iter()
            .find(|(_, f)| f.task == Some(e.id()))
            .map(|(id, f)| (*id, f.job.clone()));
        tracing::error!(error = %e, job = ?found.as_ref().map(|f| &f.1), "run task failed; its lease will expire and be recovered");
        if let Some((run_id, job)) = found {
            self.in_flight.remove(&run_id);
            let _ = self.ev_tx.send(Event::Notice(format!(
                "run of '{job}' failed internally; its lease will expire and be recovered"
            )));
        }
    }

    async fn next_wake(&self) -> Option<DateTime<Utc>> {
        if self.free_capacity() == 0 {
            return None; // a finishing run wakes the loop
        }
        let now = self.now();
        match blocking(&self.store, move |s| s.next_wakeup(now)).await {
            Ok(w) => w,
            Err(e) => {
                let d = store_backoff(self.store_failures.max(1));
                tracing::warn!(error = %e, "next_wakeup failed; retrying in {d:?}");
                Some(now + chrono::Duration::from_std(d).unwrap_or(chrono::Duration::seconds(1)))
            }
        }
    }

    fn free_capacity(&self) -> usize {
        self.cfg.max_concurrent.saturating_sub(self.in_flight.len())
    }

    /// Claim and start what is due. True when the claim started a run or wrote a row.
    async fn claim(&mut self, runs: &mut JoinSet<Finished>) -> bool {
        let limit = self.free_capacity();
        if limit == 0 || self.shutdown.is_cancelled() || self.claims_stopped() {
            return false;
        }
        let now = self.now();
        let owner = self.cfg.owner.clone();
        // Jobs this owner runs are hidden from its own claims, except under an `overlap:` policy
        // that acts while a run is live (`allow`, `cancel_previous`): the store then looks at
        // them but never recovers this owner's own leases of them.
        let mut in_flight: Vec<String> = self
            .in_flight
            .values()
            .filter(|f| !f.overlap.acts_while_running())
            .map(|f| f.job.clone())
            .collect();
        in_flight.sort();
        in_flight.dedup();
        // The settings the claimed runs use are read once per claim, in the same hand-off to
        // the blocking pool (issue 14 item 4: a store lock and a hand-off per run was a tenth of
        // a 10 000-run burst's engine CPU). A failed read is not the claim's failure: each run
        // then reads them itself, with its own retries (`run::execute`).
        let outcome = blocking(&self.store, move |s| {
            let outcome = s.claim_due(&ClaimRequest {
                now,
                owner: &owner,
                limit,
                in_flight: &in_flight,
            })?;
            let settings = if outcome.claims.is_empty() {
                None
            } else {
                s.settings().ok().map(Arc::new)
            };
            Ok((outcome, settings))
        })
        .await;
        let (outcome, settings) = match outcome {
            Ok(o) => {
                self.store_failures = 0;
                store_ok(&self.health, &self.ev_tx);
                o
            }
            Err(EngineError::Store(e)) if is_damage(&e) => {
                let msg = format!("the store is damaged; stopping: {e}");
                tracing::error!("{msg}");
                let _ = self.ev_tx.send(Event::Notice(msg));
                self.damaged = Some(e);
                return false;
            }
            Err(e) => {
                self.store_failures = self.store_failures.saturating_add(1);
                store_failed(&self.health, now, &e);
                // Reported once per outage, then only in the log at backoff pace.
                if self.store_failures == 1 {
                    let _ = self.ev_tx.send(Event::Notice(format!("claim failed: {e}")));
                }
                tracing::error!(error = %e, failures = self.store_failures, "claim failed; nothing runs until the store answers");
                return false;
            }
        };
        let progressed = !outcome.claims.is_empty() || !outcome.rows.is_empty();
        tracing::debug!(owner = %self.cfg.owner, claimed = outcome.claims.len(), rows = outcome.rows.len(), limit, "claim");
        for r in outcome.rows {
            let _ = self.ev_tx.send(Event::Row(r));
        }
        for claim in outcome.claims {
            let job = claim.job.def.name.clone();
            // Not a child of `shutdown`: a graceful shutdown must let runs finish within the
            // grace; `shutdown_runs` cancels this token at grace expiry or on a hard stop.
            let cancel = CancellationToken::new();
            let op_cancel = CancellationToken::new();
            let run_id = claim.run_id;
            self.in_flight.insert(
                run_id,
                InFlight {
                    job: job.clone(),
                    overlap: claim.job.def.overlap,
                    cancel: cancel.clone(),
                    op_cancel: op_cancel.clone(),
                    task: None,
                },
            );
            let _ = self.ev_tx.send(Event::RunStarted {
                job: job.clone(),
                run_id: claim.run_id,
                trigger: claim.trigger,
                slot: claim.slot,
            });
            let ctx = RunTask {
                store: Arc::clone(&self.store),
                clock: Arc::clone(&self.clock),
                deps: Arc::clone(&self.deps),
                owner: self.cfg.owner.clone(),
                ev_tx: self.ev_tx.clone(),
                completions: self.completions.clone(),
                health: Arc::clone(&self.health),
                unwritten: Arc::clone(&self.unwritten),
                spool: self.cfg.spool.clone().map(spool::Spool::new),
                settings: settings.clone(),
            };
            let handle = runs.spawn(ctx.run(claim, cancel, op_cancel));
            if let Some(f) = self.in_flight.get_mut(&run_id) {
                f.task = Some(handle.id());
            }
        }
        progressed
    }

    async fn command(&mut self, c: Command) {
        let now = self.now();
        let (name, res) = match c.clone() {
            Command::Pause(n) | Command::Resume(n) => {
                let paused = matches!(c, Command::Pause(_));
                let name = n.clone();
                let r = blocking(&self.store, move |s| s.set_paused(&name, paused, now)).await;
                (n, r)
            }
            Command::Trigger(n) => {
                let name = n.clone();
                let r = blocking(&self.store, move |s| s.request_trigger(&name, now)).await;
                // A queued trigger needs no notice here: the run's own events follow at once.
                let msg = match &r {
                    Ok(TriggerOutcome::Queued) => None,
                    Ok(out) => Some(trigger_notice(&n, out)),
                    Err(e) => Some(format!("trigger '{n}' failed: {e}")),
                };
                if let Some(m) = msg {
                    let _ = self.ev_tx.send(Event::Notice(m));
                }
                (n, r.map(|_| ()))
            }
            Command::Retry(id) => {
                let r = blocking(&self.store, move |s| s.retry(id, now)).await;
                match r {
                    Ok((job, out)) => {
                        let _ = self.ev_tx.send(Event::Notice(operator_notice(&job, &out)));
                        (job, Ok(()))
                    }
                    Err(e) => (format!("run {id}"), Err(e)),
                }
            }
            Command::Cancel(n) => {
                let name = n.clone();
                let r = blocking(&self.store, move |s| s.cancel(&name, now)).await;
                if let Ok((job, out)) = &r {
                    let _ = self.ev_tx.send(Event::Notice(operator_notice(job, out)));
                }
                (n, r.map(|_| ()))
            }
            Command::Shutdown => return,
        };
        if let Err(e) = res {
            let _ = self.ev_tx.send(Event::Notice(format!("'{name}': {e}")));
        }
    }

    /// The store changed: cancel the runs of ours an operator asked to cancel (`cronsole cancel`
    /// from any process, or a console). One `job` read per run in flight (at most
    /// `max_concurrent`), only when the change token moved.
    async fn honour_cancel_requests(&self) {
        for (run_id, f) in &self.in_flight {
            if f.op_cancel.is_cancelled() {
                continue;
            }
            let job = &f.job;
            let name = job.clone();
            let rec = match blocking(&self.store, move |s| s.job(&name)).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(job = %job, error = %e, "cancel check failed");
                    continue;
                }
            };
            // An operator's cancel, or a newer slot of a `cancel_previous` job (the store wrote
            // the same mark; the row's reason says which when the run ends).
            let asked = rec.is_some_and(|r| {
                r.rt.lease_of(*run_id)
                    .is_some_and(|l| l.cancel_requested_at.is_some())
            });
            if asked {
                tracing::info!(job = %job, run_id = %run_id, "cancel requested through the store");
                f.op_cancel.cancel();
            }
        }
    }

    /// The snapshot after the last run ended, awaited (a library caller reads the final state).
    /// Skipped on a store whose builds take more than [`FINAL_BUILD_MAX`]: closing the console
    /// on a million jobs does not wait seconds for a picture nobody draws.
    async fn publish_final(&self) {
        if !self.cfg.publish_snapshots {
            return;
        }
        while self.snap_build.running() {
            tokio::time::sleep(BUILD_POLL).await;
        }
        if self.snap_build.gap(StdDuration::ZERO) > FINAL_BUILD_MAX * PUBLISH_DUTY {
            return;
        }
        self.publish();
        while self.snap_build.running() {
            tokio::time::sleep(BUILD_POLL).await;
        }
    }

    /// Start building a snapshot on a blocking thread; it is published when done. The caller
    /// checks [`SnapBuild::running`] first (one build at a time).
    fn publish(&self) {
        if !self.cfg.publish_snapshots {
            return;
        }
        let now = self.now();
        let owner = self.cfg.owner.clone();
        let started = self.started;
        let in_flight: BTreeSet<String> = self.in_flight.values().map(|f| f.job.clone()).collect();
        let store = Arc::clone(&self.store);
        let tx = self.snap_tx.clone();
        let build = Arc::clone(&self.snap_build);
        build.busy.store(true, Ordering::SeqCst);
        tokio::task::spawn_blocking(move || {
            // However the build ends (even by a panic), the next one may start.
            let _done = BuildDone(Arc::clone(&build));
            let t0 = std::time::Instant::now();
            match Snapshot::load(store.as_ref(), now, &owner, started, true) {
                Ok(mut s) => {
                    s.in_flight = in_flight;
                    tx.send_replace(Arc::new(s));
                }
                Err(e) => tracing::warn!(error = %e, "snapshot refresh failed"),
            }
            let took = u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX);
            build.took_ms.store(took, Ordering::SeqCst);
        });
    }

    async fn shutdown_runs(&mut self, mut runs: JoinSet<Finished>) {
        if runs.is_empty() {
            return;
        }
        let _ = self.ev_tx.send(Event::Notice(format!(
            "shutting down: waiting up to {}s for {} run(s)",
            self.cfg.shutdown_grace.as_secs(),
            runs.len()
        )));
        let grace = tokio::time::sleep(self.cfg.shutdown_grace);
        tokio::pin!(grace);
        let mut cancelled = false;
        loop {
            tokio::select! {
                done = runs.join_next() => match done {
                    None => break,
                    Some(Ok(f)) => {
                        self.in_flight.remove(&f.run_id);
                        for r in f.rows { let _ = self.ev_tx.send(Event::Row(r)); }
                    }
                    Some(Err(e)) => self.reap_failed(&e),
                },
                _ = hard_or_grace(&mut grace, &self.hard_stop), if !cancelled => {
                    cancelled = true;
                    for f in self.in_flight.values() {
                        tracing::info!(job = %f.job, "cancelling run at shutdown");
                        f.cancel.cancel();
                    }
                }
            }
        }
    }
}

async fn hard_or_grace(
    grace: &mut std::pin::Pin<&mut tokio::time::Sleep>,
    hard: &CancellationToken,
) {
    tokio::select! {
        _ = grace.as_mut() => {}
        _ = hard.cancelled() => {}
    }
}

/// The next push from the store; `false` when its source ended. Pending without a signal.
async fn signal_changed(signal: &mut Option<crate::store::signal::ChangeSignal>) -> bool {
    match signal {
        Some(s) => s.changed().await,
        None => std::future::pending().await,
    }
}

async fn sleep_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Everything one run task needs; cheap to clone per run.
struct RunTask {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    deps: Arc<RunDeps>,
    owner: String,
    ev_tx: broadcast::Sender<Event>,
    completions: CompletionTx,
    health: Health,
    unwritten: Arc<std::sync::Mutex<Unwritten>>,
    spool: Option<spool::Spool>,
    /// The store's settings read with this run's claim; `None`: the run reads them itself.
    settings: Option<Arc<crate::model::Settings>>,
}

/// Complete through the group committer (falls back to a direct call if it is gone).
async fn complete_via(
    store: &Arc<dyn Store>,
    completions: &CompletionTx,
    c: Completion,
) -> Result<CompleteOutcome, EngineError> {
    let (tx, rx) = oneshot::channel();
    match completions.send((c, tx)).await {
        Ok(()) => rx
            .await
            .unwrap_or_else(|_| Err(EngineError::Join("completion committer stopped".into()))),
        Err(mpsc::error::SendError((c, _))) => blocking(store, move |s| s.complete(c)).await,
    }
}

/// Whether the run's row is already in history: a completion that failed may have written its
/// row before the failure (history first, then the job record), and writing it again would
/// record the run twice. The row of the same run with the same status counts.
async fn already_recorded(store: &Arc<dyn Store>, c: &Completion) -> bool {
    let q = crate::store::HistoryQuery {
        job: Some(c.job.clone()),
        run_id: Some(c.run_id),
        limit: 8,
        ..Default::default()
    };
    let (run_id, status) = (c.run_id, c.row.status);
    matches!(
        blocking(store, move |s| s.history(&q)).await,
        Ok(rows) if rows.iter().any(|r| r.run_id == run_id && r.status == status)
    )
}

/// Damage a claim ran into (a corrupt or foreign store file, a store of another format): not
/// an outage — retrying cannot help, so the engine stops with it instead of idling (red team
/// 7: a job line whose head named another job kept `run` up doing nothing, exit 0). A file
/// that is *gone* is not taken as damage here: a store directory that vanished under a running
/// engine (an unmounted or remounted volume, a deleted directory) is waited for as an outage,
/// reported by the health check, rather than ending the process — a supervisor restarting
/// it on an empty directory would create a new store there.
fn is_damage(e: &StoreError) -> bool {
    match e {
        StoreError::Corrupt { file, .. } => file.exists(),
        StoreError::Version { .. } => true,
        _ => false,
    }
}

/// One fenced attempt to write `c`. The rows written. When its row is already recorded (an
/// earlier attempt wrote it and then failed, or the process stopped before the answer), the
/// row is not written again, but the job record still is if it still holds the run
/// ([`Store::complete_recorded`]): a completion counts as written only when its row and its
/// record are both durable (red team 7: the file store's record failed on `ENOSPC` after the
/// row landed, and a retry that stopped at the row left a store every command refused).
async fn commit_once(
    store: &Arc<dyn Store>,
    completions: &CompletionTx,
    c: Completion,
) -> Result<Vec<HistoryRow>, EngineError> {
    if already_recorded(store, &c).await {
        tracing::warn!(job = %c.job, run_id = %c.run_id, "the run's row is already recorded; not writing it again (finishing its job record)");
        return blocking(store, move |s| s.complete_recorded(c))
            .await
            .map(|o| o.rows);
    }
    complete_via(store, completions, c).await.map(|o| o.rows)
}

/// Lease renewal of one run, every third of the lease the store last granted.
struct Renewer {
    job: String,
    run_id: Uuid,
    first: StdDuration,
    next: tokio::time::Instant,
}

impl Renewer {
    async fn renew(&mut self, t: &RunTask) {
        let now = t.clock.now();
        let (j, o, run_id) = (self.job.clone(), t.owner.clone(), self.run_id);
        self.next = match blocking(&t.store, move |s| s.renew(&j, run_id, &o, now)).await {
            Ok(RenewOutcome::Renewed { lease_until }) => {
                store_ok(&t.health, &t.ev_tx);
                let left = (lease_until - now).to_std().unwrap_or(StdDuration::ZERO);
                tokio::time::Instant::now() + (left / 3).max(StdDuration::from_millis(10))
            }
            Ok(RenewOutcome::Lost) => {
                tracing::warn!(job = %self.job, %run_id, "lease lost; the result will be recorded as stale");
                tokio::time::Instant::now() + StdDuration::from_secs(86_400)
            }
            Err(e) => {
                store_failed(&t.health, now, &e);
                tracing::warn!(job = %self.job, error = %e, "lease renewal failed; retrying");
                tokio::time::Instant::now() + self.first.min(StdDuration::from_secs(1))
            }
        };
    }
}

/// How long a stop waits for a completion attempt already in flight before spooling it.
const IN_FLIGHT_WAIT: StdDuration = StdDuration::from_secs(5);

impl RunTask {
    /// Run one claim to completion: the pipeline, with the lease renewed every lease/3 while it
    /// is alive, then `complete` (fenced by run_id). Cancellation (shutdown) during the
    /// pipeline completes the run as `abandoned` with reason `shutdown`.
    ///
    /// A completion the store refuses is kept and retried with [`store_backoff`] until it is
    /// written, the lease still renewed meanwhile (so nobody records the run `abandoned` while
    /// its result waits); if the engine is stopped first, it goes to the spool file.
    ///
    /// An operator's cancel (`op_cancel`) drops the pipeline (killing the run's processes) and
    /// records the run `failed`, reason `cancelled by operator`: no retry, delivery or alert.
    async fn run(
        self,
        claim: Claim,
        cancel: CancellationToken,
        op_cancel: CancellationToken,
    ) -> Finished {
        let job = claim.job.def.name.clone();
        let run_id = claim.run_id;
        // Renew at a third of whatever lease the store granted last time: the definition's
        // `lease_seconds` may change under a running job (`apply`), and the store renews with the
        // current one, so the schedule follows the store's answer, not the claim-time value.
        let first_renew =
            run::secs(claim.job.def.lease_seconds / 3.0).max(StdDuration::from_millis(1));
        let mut renewer = Renewer {
            job: job.clone(),
            run_id,
            first: first_renew,
            next: tokio::time::Instant::now() + first_renew,
        };
        let started = self.clock.now();
        let progress = run::Progress::default();
        // The run's commands carry a dead-man switch of half the lease (run::proc_env_of).
        let pipeline = run::execute(
            &claim,
            self.settings.clone(),
            &self.deps,
            &self.store,
            &self.clock,
            &self.ev_tx,
            &self.owner,
            &progress,
        );
        tokio::pin!(pipeline);
        let output = loop {
            tokio::select! {
                out = &mut pipeline => break Some(out),
                _ = cancel.cancelled() => break None,
                // Dropping the pipeline kills the run's process group (proc::GroupGuard). The
                // row is `failed`, never retried, re-offered or alerted (no delivery runs).
                _ = op_cancel.cancelled() => {
                    let mut row = HistoryRow::new(
                        &job,
                        Status::Failed,
                        claim.trigger,
                        claim.slot,
                        &self.owner,
                        started,
                    );
                    row.reason = Some(crate::store::rules::reasons::REASON_CANCELLED.to_string());
                    break Some(run::RunOutput { row, state: None, hold_until: None });
                }
                _ = tokio::time::sleep_until(renewer.next) => renewer.renew(&self).await,
            }
        };
        let now = self.clock.now();
        let output = output.unwrap_or_else(|| {
            let mut row = HistoryRow::new(
                &job,
                Status::Abandoned,
                claim.trigger,
                claim.slot,
                &self.owner,
                started,
            );
            row.reason = Some("shutdown".to_string());
            progress.fill(&mut row);
            run::RunOutput {
                row,
                state: None,
                hold_until: None,
            }
        });
        let mut row = output.row;
        row.run_id = run_id;
        row.finished_at = now;
        row.duration_ms = (now - row.started_at).num_milliseconds().max(0) as u64;
        let completion = Completion {
            job: job.clone(),
            run_id,
            owner: self.owner.clone(),
            now,
            row,
            state: output.state,
            hold_until: output.hold_until,
        };
        let rows = self.commit(completion, &cancel, &mut renewer).await;
        Finished { run_id, rows }
    }

    /// Write `c` until the store takes it (see [`RunTask::run`]); on cancellation, spool it.
    async fn commit(
        &self,
        c: Completion,
        cancel: &CancellationToken,
        renewer: &mut Renewer,
    ) -> Vec<HistoryRow> {
        let mut attempt = 0u32;
        let mut pending = false;
        loop {
            let (first, cc) = (attempt == 0, c.clone());
            let (store, completions) = (&self.store, &self.completions);
            let fut = async move {
                if first {
                    // First try: nothing can be recorded yet, skip the history look-up.
                    complete_via(store, completions, cc).await.map(|o| o.rows)
                } else {
                    commit_once(store, completions, cc).await
                }
            };
            tokio::pin!(fut);
            let res = tokio::select! {
                r = &mut fut => r,
                _ = cancel.cancelled(), if attempt > 0 => {
                    match tokio::time::timeout(IN_FLIGHT_WAIT, &mut fut).await {
                        Ok(r) => r,
                        Err(_) => Err(EngineError::Join("stopped while the store was not answering".into())),
                    }
                }
            };
            match res {
                Ok(rows) => {
                    store_ok(&self.health, &self.ev_tx);
                    if pending {
                        self.health.send_modify(|h| {
                            h.pending_completions = h.pending_completions.saturating_sub(1)
                        });
                        let msg = format!(
                            "run of '{}' recorded after {attempt} failed attempt(s)",
                            c.job
                        );
                        tracing::warn!("{msg}");
                        let _ = self.ev_tx.send(Event::Notice(msg));
                    }
                    return if rows.is_empty() { vec![c.row] } else { rows };
                }
                Err(e) => {
                    attempt += 1;
                    store_failed(&self.health, self.clock.now(), &e);
                    if !pending {
                        pending = true;
                        self.health.send_modify(|h| h.pending_completions += 1);
                        tracing::error!(job = %c.job, run_id = %c.run_id, error = %e, "completion failed; kept and retried until the store takes it");
                        let _ = self.ev_tx.send(Event::Notice(format!(
                            "could not record run of '{}' yet (kept, retrying): {e}",
                            c.job
                        )));
                    } else {
                        tracing::warn!(job = %c.job, error = %e, attempt, "completion failed again");
                    }
                    if cancel.is_cancelled() {
                        self.spool(&c).await;
                        return Vec::new();
                    }
                    let wake = tokio::time::Instant::now() + store_backoff(attempt);
                    loop {
                        tokio::select! {
                            _ = tokio::time::sleep_until(wake) => break,
                            _ = cancel.cancelled() => break,
                            _ = tokio::time::sleep_until(renewer.next) => renewer.renew(self).await,
                        }
                    }
                }
            }
        }
    }

    /// Keep `c` in the spool file (the engine is stopping and the store still refuses it).
    async fn spool(&self, c: &Completion) {
        let entry = spool::Entry::from(c);
        self.health
            .send_modify(|h| h.pending_completions = h.pending_completions.saturating_sub(1));
        let res = match self.spool.clone() {
            Some(sp) => {
                let e = entry.clone();
                tokio::task::spawn_blocking(move || sp.append(std::slice::from_ref(&e)))
                    .await
                    .map_err(|e| e.to_string())
                    .and_then(|r| r.map_err(|e| e.to_string()))
            }
            None => Err("no spool file configured".to_string()),
        };
        let msg = match &res {
            Ok(()) => format!(
                "run of '{}' ({}) not recorded: the store refused it until the stop; spooled for the next start",
                c.job, c.row.status
            ),
            Err(e) => format!(
                "run of '{}' ({}) not recorded and not spooled: {e}",
                c.job, c.row.status
            ),
        };
        tracing::error!(run_id = %c.run_id, "{msg}");
        let _ = self.ev_tx.send(Event::Notice(msg));
        if let Ok(mut u) = self.unwritten.lock() {
            match res {
                Ok(()) => u.spooled += 1,
                Err(_) => u.lost.push(entry),
            }
        }
        if self.spool.is_some() {
            self.health.send_modify(|h| h.spooled += 1);
        }
    }
}

/// One line saying what a trigger request did: the console's notice (engine or attached) and
/// the CLI's `trigger` output, so the operator reads the same words everywhere.
pub fn trigger_notice(job: &str, out: &TriggerOutcome) -> String {
    match out {
        TriggerOutcome::Queued => {
            format!("triggered {job}: the next owner claiming will run it now")
        }
        TriggerOutcome::AlreadyQueued => {
            format!("{job} already has a trigger queued; nothing changed")
        }
        TriggerOutcome::AlreadyRunning => format!("{job} is running now; not triggered"),
    }
}

/// One line saying what an operator action did (console notice, CLI output).
pub fn operator_notice(job: &str, out: &crate::store::EditOutcome) -> String {
    use crate::store::EditOutcome as O;
    match out {
        O::Queued { added: 1, queued } => {
            format!("{job}: 1 run queued ({queued} queued); the next owner claiming runs it")
        }
        O::Queued { added, queued } => {
            format!("{job}: {added} runs queued ({queued} queued); owners run them one at a time")
        }
        O::CancelRequested { run_id } => {
            format!("{job}: cancel of run {run_id} requested; its owner kills it")
        }
        O::AlreadyCancelling { run_id } => {
            format!("{job}: run {run_id} is already being cancelled")
        }
        O::Dequeued(n) => {
            format!("{job}: not running; {n} queued run(s) dropped (a skipped row each)")
        }
        O::Paused { changed: true } => format!("{job}: done"),
        O::Paused { changed: false } => format!("{job}: already so; nothing changed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 14: a long snapshot build spaces the next one out ([`PUBLISH_DUTY`] × its
    /// duration), a short one leaves the configured minimum.
    #[test]
    fn a_slow_snapshot_build_spaces_out_the_next() {
        let b = SnapBuild::default();
        let min = StdDuration::from_millis(100);
        assert_eq!(b.gap(min), min);
        b.took_ms.store(10, Ordering::SeqCst);
        assert_eq!(b.gap(min), min);
        b.took_ms.store(2_000, Ordering::SeqCst);
        assert_eq!(b.gap(min), StdDuration::from_millis(6_000));
        assert!(!b.running());
        let b = Arc::new(b);
        b.busy.store(true, Ordering::SeqCst);
        drop(BuildDone(Arc::clone(&b)));
        assert!(
            !b.running(),
            "a build that ended (or panicked) frees the next"
        );
    }

    /// Issue 14: an engine over a store larger than one page publishes the first page at once
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

//! The engine: the actor that turns the store into runs (SPEC §6, §8). It sleeps until the
//! earliest instant the store says something may be claimable (no fixed polling of the schedule),
//! claims with its free run capacity as the limit, spawns one task per run, renews leases while
//! runs are alive, and publishes a [`Snapshot`] (on a `watch` channel) and [`Event`]s (on a
//! `broadcast` channel) for front ends. Front ends send [`Command`]s over mpsc.
//!
//! Changes made by other owners (or `cronsole pause/trigger` from a shell) are noticed by watching
//! the store's cheap change token every 250 ms: a stat of the store, not a re-parse.
//!
//! Shutdown (SPEC §8): stop claiming, wait up to `shutdown_grace` for in-flight runs, then cancel
//! them; a cancelled run is completed as `abandoned` with reason `shutdown`, which the store treats
//! like a crash (§6 table). A second shutdown request cancels at once. Each run has its own
//! cancellation token (not a child of `shutdown`), so a graceful shutdown really lets runs finish.
//!
//! Snapshots are built only when a front end draws them (`EngineConfig::publish_snapshots`);
//! headless mode turns them off because a snapshot clones every job and reads the last 24 h of
//! history, which dominated the headless engine's memory.
//!
//! Owns: timing, claims, run tasks, lease renewal, shutdown. Must not touch: the UI or the
//! terminal (front ends talk to it only through the channels).

use std::collections::HashMap;
use std::sync::Arc;
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

pub mod run;

pub use run::RunDeps;

/// What front ends ask the engine to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Pause(String),
    Resume(String),
    Trigger(String),
    Shutdown,
}

/// What happened, for front ends (history rows arrive as they are written). Rows are by far
/// the most frequent event; boxing them would add an allocation per row to save space on the
/// rare small variants.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)]
pub enum Event {
    RunStarted {
        job: String,
        run_id: Uuid,
        trigger: Trigger,
        slot: Option<DateTime<Utc>>,
    },
    Row(HistoryRow),
    /// A delivery made by a sink (headless mode prints each one).
    Delivered {
        job: String,
        sink: String,
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
    pub shutdown_grace: StdDuration,
    /// How often the store's change token is checked.
    pub change_poll: StdDuration,
    /// Minimum spacing of snapshot rebuilds while things change quickly.
    pub snapshot_min_interval: StdDuration,
    /// Build and publish [`Snapshot`]s. Headless mode draws nothing and turns this off: a
    /// snapshot clones every job and reads up to 100 000 rows of the last 24 h, which dominated
    /// the peak RSS of a headless engine (119 MB → see docs/BENCHMARKS.md "Engine").
    pub publish_snapshots: bool,
}

impl EngineConfig {
    pub fn new(owner: String) -> Self {
        EngineConfig {
            owner,
            max_concurrent: 8,
            shutdown_grace: StdDuration::from_secs(30),
            change_poll: StdDuration::from_millis(250),
            snapshot_min_interval: StdDuration::from_millis(100),
            publish_snapshots: true,
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

/// The channel ends a front end needs.
pub struct EngineHandle {
    pub snapshots: watch::Receiver<Arc<Snapshot>>,
    pub events: broadcast::Sender<Event>,
    pub commands: mpsc::Sender<Command>,
    /// Cancel to request a graceful shutdown (same as `Command::Shutdown`).
    pub shutdown: CancellationToken,
    /// Cancel to stop waiting for in-flight runs: they are cancelled at once and recorded
    /// `abandoned` (reason `shutdown`). Implies `shutdown`.
    pub hard_stop: CancellationToken,
    pub join: tokio::task::JoinHandle<Result<(), EngineError>>,
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("store task failed: {0}")]
    Join(String),
}

/// Run a blocking store call off the async workers.
pub async fn blocking<T, F>(store: &Arc<dyn Store>, f: F) -> Result<T, EngineError>
where
    T: Send + 'static,
    F: FnOnce(&dyn Store) -> Result<T, StoreError> + Send + 'static,
{
    let store = Arc::clone(store);
    tokio::task::spawn_blocking(move || f(store.as_ref()))
        .await
        .map_err(|e| EngineError::Join(e.to_string()))?
        .map_err(EngineError::from)
}

struct InFlight {
    run_id: Uuid,
    cancel: CancellationToken,
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
        Snapshot::load(store.as_ref(), started, &cfg.owner, started, true)?
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
    let actor = Actor {
        completions,
        hard_stop: hard_stop.clone(),
        cfg,
        store,
        clock,
        deps: Arc::new(deps),
        snap_tx,
        ev_tx: ev_tx.clone(),
        started,
        in_flight: HashMap::new(),
        shutdown: shutdown.clone(),
    };
    // However the actor ends (shutdown, or a store error it cannot go on from), front ends
    // waiting on `shutdown` learn of it and the process exits instead of idling.
    let ended = shutdown.clone();
    let join = tokio::spawn(async move {
        let r = actor.run(cmd_rx).await;
        ended.cancel();
        r
    });
    Ok(EngineHandle {
        snapshots: snap_rx,
        events: ev_tx,
        commands: cmd_tx,
        shutdown,
        hard_stop,
        join,
    })
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
        owners_seen: vec![owner.to_string()],
        settings: Default::default(),
        period_spend_usd: 0.0,
        spend_incomplete: false,
        recent: Vec::new(),
        counts_24h: Default::default(),
        spend_per_hour: vec![0.0; 24],
        pending: Default::default(),
        in_flight: Default::default(),
    }
}

struct Actor {
    cfg: EngineConfig,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    deps: Arc<RunDeps>,
    snap_tx: watch::Sender<Arc<Snapshot>>,
    ev_tx: broadcast::Sender<Event>,
    started: DateTime<Utc>,
    in_flight: HashMap<String, InFlight>,
    shutdown: CancellationToken,
    hard_stop: CancellationToken,
    completions: CompletionTx,
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

/// What a finished run task hands back to the actor.
struct Finished {
    job: String,
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
        let mut wake = self.next_wake().await;

        loop {
            if dirty && last_publish.elapsed() >= self.cfg.snapshot_min_interval {
                self.publish().await;
                last_publish = tokio::time::Instant::now();
                dirty = false;
            }
            // Owners sharing a store all wake for the same slot and race for its lock: up to 1 ms
            // of random spread keeps the same owner from winning that race every time.
            let spread = StdDuration::from_micros((crate::action::jitter_unit() * 1000.0) as u64);
            let wake_at = wake.map(|w| self.instant_for(w) + spread);
            let publish_at = dirty.then(|| last_publish + self.cfg.snapshot_min_interval);
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
                    match done {
                        Ok(f) => {
                            self.in_flight.remove(&f.job);
                            for r in f.rows { let _ = self.ev_tx.send(Event::Row(r)); }
                        }
                        Err(e) => self.reap_failed(&e),
                    }
                    dirty = true;
                    wake = self.next_wake().await;
                }
                _ = sleep_opt(wake_at) => {
                    let progressed = self.claim(&mut runs).await;
                    dirty = true;
                    wake = self.next_wake().await;
                    // The store may report something due that this owner cannot take (its own
                    // run past its lease, a job another owner is finishing): do not spin on it.
                    let now = self.now();
                    if !progressed && wake.is_some_and(|w| w <= now) {
                        wake = Some(now + chrono::Duration::from_std(self.cfg.change_poll).unwrap_or(chrono::Duration::milliseconds(250)));
                    }
                }
                _ = poll.tick() => {
                    match blocking(&self.store, |s| s.change_token()).await {
                        Ok(t) if t != last_token => {
                            last_token = t;
                            dirty = true;
                            wake = self.next_wake().await;
                        }
                        Ok(_) => {}
                        Err(e) => tracing::warn!(error = %e, "store change check failed"),
                    }
                }
                _ = sleep_opt(publish_at) => {}
            }
        }
        self.shutdown_runs(runs).await;
        self.publish().await;
        Ok(())
    }

    /// A run task panicked (a bug, never outside input): forget it here so its job is not
    /// blocked in this process forever and its capacity comes back; the store recovers its lease
    /// when it expires (an `abandoned` row, SPEC §6).
    fn reap_failed(&mut self, e: &tokio::task::JoinError) {
        let job = self
            .in_flight
            .iter()
            .find(|(_, f)| f.task == Some(e.id()))
            .map(|(j, _)| j.clone());
        tracing::error!(error = %e, job = ?job, "run task failed; its lease will expire and be recovered");
        if let Some(job) = job {
            self.in_flight.remove(&job);
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
                tracing::warn!(error = %e, "next_wakeup failed; retrying in 1 s");
                Some(now + chrono::Duration::seconds(1))
            }
        }
    }

    fn free_capacity(&self) -> usize {
        self.cfg.max_concurrent.saturating_sub(self.in_flight.len())
    }

    /// Claim and start what is due. True when the claim started a run or wrote a row.
    async fn claim(&mut self, runs: &mut JoinSet<Finished>) -> bool {
        let limit = self.free_capacity();
        if limit == 0 || self.shutdown.is_cancelled() {
            return false;
        }
        let now = self.now();
        let owner = self.cfg.owner.clone();
        let in_flight: Vec<String> = self.in_flight.keys().cloned().collect();
        let outcome = blocking(&self.store, move |s| {
            s.claim_due(&ClaimRequest {
                now,
                owner: &owner,
                limit,
                in_flight: &in_flight,
            })
        })
        .await;
        let outcome = match outcome {
            Ok(o) => o,
            Err(e) => {
                tracing::error!(error = %e, "claim failed; nothing runs until the store answers");
                let _ = self.ev_tx.send(Event::Notice(format!("claim failed: {e}")));
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
            self.in_flight.insert(
                job.clone(),
                InFlight {
                    run_id: claim.run_id,
                    cancel: cancel.clone(),
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
            };
            let handle = runs.spawn(ctx.run(claim, cancel));
            if let Some(f) = self.in_flight.get_mut(&job) {
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
                let msg = match &r {
                    Ok(TriggerOutcome::Queued) => None,
                    Ok(TriggerOutcome::AlreadyQueued) => {
                        Some(format!("'{n}' already has a trigger queued"))
                    }
                    Ok(TriggerOutcome::AlreadyRunning) => {
                        Some(format!("'{n}' is running; trigger ignored"))
                    }
                    Err(e) => Some(format!("trigger '{n}' failed: {e}")),
                };
                if let Some(m) = msg {
                    let _ = self.ev_tx.send(Event::Notice(m));
                }
                (n, r.map(|_| ()))
            }
            Command::Shutdown => return,
        };
        if let Err(e) = res {
            let _ = self.ev_tx.send(Event::Notice(format!("'{name}': {e}")));
        }
    }

    async fn publish(&self) {
        if !self.cfg.publish_snapshots {
            return;
        }
        let now = self.now();
        let owner = self.cfg.owner.clone();
        let started = self.started;
        let snap = blocking(&self.store, move |s| {
            Snapshot::load(s, now, &owner, started, true)
        })
        .await;
        match snap {
            Ok(mut s) => {
                s.in_flight = self.in_flight.keys().cloned().collect();
                self.snap_tx.send_replace(Arc::new(s));
            }
            Err(e) => tracing::warn!(error = %e, "snapshot refresh failed"),
        }
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
                        self.in_flight.remove(&f.job);
                        for r in f.rows { let _ = self.ev_tx.send(Event::Row(r)); }
                    }
                    Some(Err(e)) => self.reap_failed(&e),
                },
                _ = hard_or_grace(&mut grace, &self.hard_stop), if !cancelled => {
                    cancelled = true;
                    for f in self.in_flight.values() {
                        tracing::info!(run_id = %f.run_id, "cancelling run at shutdown");
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
}

impl RunTask {
    /// Complete through the group committer (falls back to a direct call if it is gone).
    async fn complete(&self, c: Completion) -> Result<CompleteOutcome, EngineError> {
        let (tx, rx) = oneshot::channel();
        match self.completions.send((c, tx)).await {
            Ok(()) => rx
                .await
                .unwrap_or_else(|_| Err(EngineError::Join("completion committer stopped".into()))),
            Err(mpsc::error::SendError((c, _))) => {
                blocking(&self.store, move |s| s.complete(c)).await
            }
        }
    }
}

impl RunTask {
    /// Run one claim to completion: the pipeline, with the lease renewed every lease/3 while it
    /// is alive, then `complete` (fenced by run_id). Cancellation (shutdown) completes the run as
    /// `abandoned` with reason `shutdown`.
    async fn run(self, claim: Claim, cancel: CancellationToken) -> Finished {
        let job = claim.job.def.name.clone();
        let run_id = claim.run_id;
        // Renew at a third of whatever lease the store granted last time: the definition's
        // `lease_seconds` may change under a running job (`apply`), and the store renews with the
        // current one, so the schedule follows the store's answer, not the claim-time value.
        let first_renew =
            run::secs(claim.job.def.lease_seconds / 3.0).max(StdDuration::from_millis(1));
        let started = self.clock.now();
        let progress = run::Progress::default();
        let pipeline = run::execute(
            &claim,
            &self.deps,
            &self.store,
            &self.clock,
            &self.ev_tx,
            &self.owner,
            &progress,
        );
        tokio::pin!(pipeline);
        let mut next_renew = tokio::time::Instant::now() + first_renew;
        let output = loop {
            tokio::select! {
                out = &mut pipeline => break Some(out),
                _ = cancel.cancelled() => break None,
                _ = tokio::time::sleep_until(next_renew) => {
                    let now = self.clock.now();
                    let (j, o) = (job.clone(), self.owner.clone());
                    next_renew = match blocking(&self.store, move |s| s.renew(&j, run_id, &o, now)).await {
                        Ok(RenewOutcome::Renewed { lease_until }) => {
                            let left = (lease_until - now).to_std().unwrap_or(StdDuration::ZERO);
                            tokio::time::Instant::now() + (left / 3).max(StdDuration::from_millis(10))
                        }
                        Ok(RenewOutcome::Lost) => {
                            tracing::warn!(job = %job, %run_id, "lease lost; the result will be recorded as stale");
                            tokio::time::Instant::now() + StdDuration::from_secs(86_400)
                        }
                        Err(e) => {
                            tracing::warn!(job = %job, error = %e, "lease renewal failed; retrying");
                            tokio::time::Instant::now() + first_renew.min(StdDuration::from_secs(1))
                        }
                    };
                }
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
            row: row.clone(),
            state: output.state,
            hold_until: output.hold_until,
        };
        // A completion must not be lost to a transient store error: retry a few times. But a
        // failed completion may have written its row before the failure (history first, then
        // the job record): retrying then would record the run twice. So each retry first looks
        // for our run's row; if it is there, the run is recorded, and the store's lease recovery
        // finishes the job from that row when the lease (no longer renewed) expires.
        let mut attempt = 0u32;
        loop {
            let c = completion.clone();
            match self.complete(c).await {
                Ok(out) => {
                    return Finished {
                        job,
                        rows: out.rows,
                    };
                }
                Err(e) if attempt < 5 => {
                    attempt += 1;
                    tracing::warn!(job = %job, error = %e, attempt, "completion failed; retrying");
                    tokio::time::sleep(StdDuration::from_millis(200 * u64::from(attempt))).await;
                    let q = crate::store::HistoryQuery {
                        job: Some(job.clone()),
                        run_id: Some(run_id),
                        limit: 4,
                        ..Default::default()
                    };
                    let owner = self.owner.clone();
                    if let Ok(rows) = blocking(&self.store, move |s| s.history(&q)).await
                        && rows.iter().any(|r| {
                            r.run_id == run_id && r.owner == owner && r.status != Status::Abandoned
                        })
                    {
                        tracing::warn!(job = %job, %run_id, "the run's row was written before the failure; not writing it again");
                        return Finished {
                            job,
                            rows: vec![row],
                        };
                    }
                }
                Err(e) => {
                    tracing::error!(job = %job, error = %e, "completion failed; the lease will expire and be recovered");
                    let _ = self.ev_tx.send(Event::Notice(format!(
                        "could not record run of '{job}': {e}"
                    )));
                    return Finished {
                        job,
                        rows: vec![row],
                    };
                }
            }
        }
    }
}

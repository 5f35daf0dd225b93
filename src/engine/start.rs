//! Starting an engine: the channels a front end holds ([`EngineHandle`]) and the actor's task.
//!
//! Owns: [`spawn`] and what it wires together. Must not touch: what the actor does once started.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::{broadcast, mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::RunDeps;
use super::actor::Actor;
use super::api::{Command, EngineConfig, Event};
use super::completion::completer;
use super::error::EngineError;
use super::heartbeat::Heartbeat;
use super::outage::{EngineHealth, HealthCell, Outage};
use super::publish::{Publisher, SnapBuild, bare_snapshot};
use super::shutdown::hurry_at_stop;
use crate::clock::Clock;
use crate::snapshot::Snapshot;
use crate::store::Store;

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
    let (renewals, renewals_rx) = mpsc::channel(4096);
    tokio::spawn(super::renew::renewer(Arc::clone(&store), renewals_rx));
    let (health_tx, health_rx) = watch::channel(EngineHealth::default());
    let heartbeat = Arc::new(Heartbeat::default());
    let actor = Actor {
        reading: crate::clock::Reading::of(clock.as_ref()),
        beat: super::owner::Beat::new(
            &cfg.owner,
            started,
            cfg.max_clock_offset,
            cfg.ahead_limit,
            cfg.kernel_waits,
        ),
        unclaimed_step: None,
        heartbeat: Arc::clone(&heartbeat),
        completions,
        renewals,
        outage: Outage::new(Arc::new(HealthCell::new(health_tx)), ev_tx.clone()),
        hard_stop: hard_stop.clone(),
        publisher: Publisher {
            enabled: cfg.publish_snapshots,
            store: Arc::clone(&store),
            owner: cfg.owner.clone(),
            started,
            tx: snap_tx,
            build: Arc::new(SnapBuild::default()),
            min_interval: cfg.snapshot_min_interval,
        },
        cfg,
        store,
        clock,
        deps: Arc::new(deps),
        ev_tx: ev_tx.clone(),
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

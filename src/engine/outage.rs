//! Store outages, in one place: whether the store takes this owner's writes, when claiming
//! stops because it has not for too long, how long to wait before trying again, which errors
//! are damage rather than an outage, the replay of completions spooled at the last stop, and
//! the engine's result when it stops with completions unwritten.
//!
//! The story: a completion the store refuses is kept by its run task and retried with
//! [`store_backoff`] until written, the lease still renewed meanwhile; claim and wake-up failures
//! back off the same way. When every write has failed for longer than
//! `EngineConfig::outage_bound`, no new run is claimed until one succeeds; [`EngineHealth`]
//! (published on `EngineHandle::health`) says so for the console and metrics. At stop, what is
//! still unwritten goes to the [`super::spool`] file, the engine ends with
//! [`EngineError::Unwritten`] (so `run` exits non-zero), and the next start replays the spool
//! before its first claim. A claim that finds the store damaged (`StoreError::Corrupt` or
//! `Version`) is not an outage: the engine stops as at a shutdown and ends with that error.
//!
//! Owns: [`Outage`] (the actor's view of the store's health and what it could not write) and
//! the [`EngineHealth`] transitions run tasks report through. Must not touch: the UI; what a
//! run does.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use chrono::{DateTime, Utc};
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

use super::api::Event;
use super::completion::{CompletionTx, commit_once};
use super::error::EngineError;
use super::spool;
use crate::clock::Clock;
use crate::store::{Completion, Store, StoreError};

/// The engine's view of its store, published on `EngineHandle::health`.
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

/// Delay before the `attempt`-th retry of a failing store call: 250 ms doubling to 10 s.
pub fn store_backoff(attempt: u32) -> StdDuration {
    let ms = 250u64.saturating_mul(1u64 << attempt.saturating_sub(1).min(6));
    StdDuration::from_millis(ms.min(10_000))
}

/// The health channel, shared by the actor and every run task.
pub(super) type Health = Arc<watch::Sender<EngineHealth>>;

/// A store write worked: the store is healthy again.
pub(super) fn store_ok(health: &Health, ev_tx: &broadcast::Sender<Event>) {
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
pub(super) fn store_failed(health: &Health, now: DateTime<Utc>, e: &EngineError) {
    let msg = e.to_string();
    health.send_modify(|h| {
        h.store_failing_since.get_or_insert(now);
        h.last_store_error = Some(msg);
    });
}

/// Damage a claim ran into (a corrupt or foreign store file, a store of another format): not
/// an outage — retrying cannot help, so the engine stops with it instead of idling (a `run`
/// kept up doing nothing would exit 0 and hide the damage). A file that is *gone* is not
/// taken as damage here: a store directory that vanished under a running engine (an unmounted or remounted volume, a deleted directory) is waited for as an outage,
/// reported by the health check, rather than ending the process — a supervisor restarting
/// it on an empty directory would create a new store there.
fn is_damage(e: &StoreError) -> bool {
    match e {
        StoreError::Corrupt { file, .. } => file.exists(),
        StoreError::Version { .. } => true,
        _ => false,
    }
}

/// Completions the engine gave up writing at stop.
#[derive(Default)]
pub(super) struct Unwritten {
    pub(super) spooled: usize,
    pub(super) lost: Vec<spool::Entry>,
}

/// The actor's view of the store's health: consecutive failures of its own calls, damage that
/// stops it, and what neither the store nor the spool took.
pub(super) struct Outage {
    health: Health,
    ev_tx: broadcast::Sender<Event>,
    /// How long the store may refuse every write before no new run is claimed.
    bound: StdDuration,
    /// Consecutive failed claim/wake-up calls: the next one waits [`store_backoff`].
    failures: u32,
    /// A claim found the store damaged ([`StoreError::Corrupt`]): not an outage, retrying
    /// cannot help. The engine stops (its runs finish as at a stop) and returns it (exit 2).
    damaged: Option<StoreError>,
    /// Shared with the run tasks, which spool at stop what the store still refuses.
    unwritten: Arc<Mutex<Unwritten>>,
}

impl Outage {
    pub(super) fn new(health: Health, ev_tx: broadcast::Sender<Event>, bound: StdDuration) -> Self {
        Outage {
            health,
            ev_tx,
            bound,
            failures: 0,
            damaged: None,
            unwritten: Arc::new(Mutex::new(Unwritten::default())),
        }
    }

    /// The health channel, for run tasks to report their writes.
    pub(super) fn health(&self) -> &Health {
        &self.health
    }

    /// Where run tasks count what they spooled or lost at stop.
    pub(super) fn unwritten(&self) -> &Arc<Mutex<Unwritten>> {
        &self.unwritten
    }

    /// A claim found the store damaged: the engine stops.
    pub(super) fn damaged(&self) -> bool {
        self.damaged.is_some()
    }

    /// Whether claiming is stopped at `now` because the store stayed unwritable past the
    /// bound; reports the moment it starts.
    pub(super) fn claims_stopped(&self, now: DateTime<Utc>) -> bool {
        let bound = chrono::Duration::from_std(self.bound).unwrap_or(chrono::Duration::seconds(30));
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
                self.bound.as_secs()
            );
            tracing::error!("{msg}");
            let _ = self.ev_tx.send(Event::Notice(msg));
        }
        self.health.borrow().claims_stopped
    }

    /// A claim went through: the store answers again.
    pub(super) fn claim_answered(&mut self) {
        self.failures = 0;
        store_ok(&self.health, &self.ev_tx);
    }

    /// A claim failed at `now`: damage stops the engine (retrying cannot help), anything else
    /// is an outage, backed off and reported once.
    pub(super) fn claim_failed(&mut self, now: DateTime<Utc>, e: EngineError) {
        match e {
            EngineError::Store(e) if is_damage(&e) => {
                let msg = format!("the store is damaged; stopping: {e}");
                tracing::error!("{msg}");
                let _ = self.ev_tx.send(Event::Notice(msg));
                self.damaged = Some(e);
            }
            e => {
                self.failures = self.failures.saturating_add(1);
                store_failed(&self.health, now, &e);
                // Reported once per outage, then only in the log at backoff pace.
                if self.failures == 1 {
                    let _ = self.ev_tx.send(Event::Notice(format!("claim failed: {e}")));
                }
                tracing::error!(error = %e, failures = self.failures, "claim failed; nothing runs until the store answers");
            }
        }
    }

    /// How long to wait before calling a failing store again.
    pub(super) fn backoff(&self) -> StdDuration {
        store_backoff(self.failures.max(1))
    }

    /// When the next claim cycle may run while the store is failing (claim or wake-up errors,
    /// or claiming stopped): backoff, not every `change_poll`. `None` while the store answers.
    pub(super) fn retry_at(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if self.failures == 0 && !self.health.borrow().claims_stopped {
            return None;
        }
        Some(
            now + chrono::Duration::from_std(self.backoff())
                .unwrap_or(chrono::Duration::seconds(1)),
        )
    }

    /// Write the completions spooled at the last stop (fenced by run_id, each at most once),
    /// retrying with backoff while the store refuses them; stop waiting at `stop` (they stay
    /// spooled). A completion the store rejects as bad input stays in the spool, reported.
    pub(super) async fn replay_spool(
        &self,
        path: Option<PathBuf>,
        to: &Writer<'_>,
        stop: &[&CancellationToken; 2],
    ) -> Result<(), EngineError> {
        let Some(path) = path else {
            return Ok(());
        };
        let sp = spool::Spool::new(path);
        let mut left = {
            let sp = sp.clone();
            tokio::task::spawn_blocking(move || sp.load())
                .await
                .map_err(|e| EngineError::Join(e.to_string()))??
        };
        if left.is_empty() {
            return Ok(());
        }
        let msg = format!(
            "replaying {} completion(s) spooled at the last stop ({})",
            left.len(),
            sp.path().display()
        );
        tracing::warn!("{msg}");
        let _ = self.ev_tx.send(Event::Notice(msg));
        let mut attempt = 0u32;
        loop {
            let (still, rejected) = self.replay_once(left, &sp, to).await;
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
                _ = stop[0].cancelled() => {
                    self.note_left_in_spool(still.len());
                    return Ok(());
                }
                _ = stop[1].cancelled() => {
                    self.note_left_in_spool(still.len());
                    return Ok(());
                }
            }
            left = still;
        }
    }

    /// One pass over the spooled completions `left`: those still refused (an outage), and
    /// those the store rejected as bad input.
    async fn replay_once(
        &self,
        left: Vec<spool::Entry>,
        sp: &spool::Spool,
        to: &Writer<'_>,
    ) -> (Vec<spool::Entry>, Vec<spool::Entry>) {
        let mut still = Vec::new();
        let mut rejected = Vec::new();
        for e in left {
            let c: Completion = e.clone().into();
            match commit_once(to.store, to.completions, c).await {
                Ok(rows) => {
                    store_ok(&self.health, &self.ev_tx);
                    for r in rows {
                        let _ = self.ev_tx.send(Event::row(r));
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
                    store_failed(&self.health, to.clock.now(), &err);
                    still.push(e);
                }
            }
        }
        (still, rejected)
    }

    fn note_left_in_spool(&self, n: usize) {
        if let Ok(mut u) = self.unwritten.lock() {
            u.spooled += n;
        }
        self.health.send_modify(|h| h.spooled += n);
    }

    /// The engine's result once its runs ended: the damage that stopped it, or the completions
    /// it could not write (spooled to `spool`, or lost and printed by the binary).
    pub(super) fn stop_result(&mut self, spool: Option<PathBuf>) -> Result<(), EngineError> {
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
                spool,
                lost,
            });
        }
        Ok(())
    }
}

/// Where a replayed completion goes: the store, through the group committer.
pub(super) struct Writer<'a> {
    pub(super) store: &'a Arc<dyn Store>,
    pub(super) completions: &'a CompletionTx,
    pub(super) clock: &'a Arc<dyn Clock>,
}

//! Store outages, in one place: whether the store takes this owner's writes, why claiming is
//! stopped, how long to wait before trying again, which errors are damage rather than an outage,
//! the replay of completions spooled at the last stop, and the engine's result when it stops
//! with completions unwritten.
//!
//! The story: the first store write that fails (a claim, a renewal, a completion) starts an
//! outage. From then on no new run is claimed; the claim cycle becomes a probe of the store,
//! retried with a jittered exponential backoff ([`probe_delay`]: 250 ms doubling to 10 s, each
//! wait drawn from its upper half, so owners that lost the store together do not come back in
//! lockstep). The first write that succeeds — a probe, a renewal, a retried completion — ends
//! the outage, whatever its length, and claiming resumes at once. A completion the store
//! refuses is kept by its run task and retried the same way, the lease still renewed
//! meanwhile. The start and the end are logged and sent as notices; [`EngineHealth`]
//! (published on `EngineHandle::health`) carries since when, the last error, the probes made
//! and why claims are stopped, which `/healthz` (503 while stopped), the metrics and the
//! console read. At stop, what is still unwritten goes to the [`super::spool`] file, the engine
//! ends with [`EngineError::Unwritten`] (so `run` exits non-zero), and the next start replays
//! the spool before its first claim. A claim that finds the store damaged
//! (`OpenError::Corrupt` or `Version`) is not an outage: the engine stops as at a shutdown and
//! ends with that error.
//!
//! Owns: [`Outage`] (the actor's view of the store's health and what it could not write) and
//! the [`EngineHealth`] transitions run tasks report through. Must not touch: the UI; what a
//! run does.

use crate::store::OpenError;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use chrono::{DateTime, Utc};
use tokio::sync::{Notify, broadcast, watch};
use tokio_util::sync::CancellationToken;

use super::api::Event;
use super::completion::{CompletionTx, commit_once};
use super::error::EngineError;
use super::spool;
use crate::clock::{Clock, Reading};
use crate::store::{Completion, Store, StoreError};

/// The engine's view of its store, published on `EngineHandle::health`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineHealth {
    /// Since when the store has refused this owner's writes (`None`: the last write worked).
    pub store_failing_since: Option<DateTime<Utc>>,
    /// The last store error, while failing.
    pub last_store_error: Option<String>,
    /// Runs that finished but whose completion the store has not taken yet (retried).
    pub pending_completions: usize,
    /// No new runs are claimed (see [`EngineHealth::claims_stopped_because`] for why).
    pub claims_stopped: bool,
    /// Completions written to the spool file at stop (replayed at the next start).
    pub spooled: usize,
    /// Outages this engine has lived through (the current one included).
    pub outages: u64,
    /// Probes of the store made during outages, since the engine started.
    pub outage_probes: u64,
    /// Probes made during the current (or the last) outage.
    pub probes_this_outage: u64,
    /// The last outage that ended: its start and its end (the first write that went through).
    pub last_outage: Option<(DateTime<Utc>, DateTime<Utc>)>,
    /// This owner's clock minus the store's at its last heartbeat, in milliseconds.
    pub clock_offset_ms: Option<i64>,
    /// Why claims are stopped for this owner's clock: further from the store's than the bound.
    pub clock_refused: Option<String>,
}

impl EngineHealth {
    /// Why no new runs are claimed, in words (`None` while claiming).
    pub fn claims_stopped_because(&self) -> Option<String> {
        if !self.claims_stopped {
            return self.clock_refused.clone();
        }
        let since = self
            .store_failing_since
            .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
            .unwrap_or_else(|| "now".into());
        let err = self
            .last_store_error
            .as_deref()
            .map(|e| format!(" (last error: {e})"))
            .unwrap_or_default();
        Some(format!(
            "store unwritable since {since}, claims stopped{err}"
        ))
    }
}

/// Delay before the `attempt`-th retry of a failing store call: 250 ms doubling to 10 s.
pub fn store_backoff(attempt: u32) -> StdDuration {
    let ms = 250u64.saturating_mul(1u64 << attempt.saturating_sub(1).min(6));
    StdDuration::from_millis(ms.min(10_000))
}

/// The wait before the `attempt`-th probe of a store that refuses writes: the upper half of
/// [`store_backoff`], `unit` (in `[0, 1]`) picking where. Never more than 10 s, so claims
/// resume within about 10 s of the store's return whatever the outage's length.
pub fn probe_delay(attempt: u32, unit: f64) -> StdDuration {
    let d = store_backoff(attempt);
    let unit = if unit.is_finite() {
        unit.clamp(0.0, 1.0)
    } else {
        0.5
    };
    d / 2 + d.mul_f64(unit / 2.0)
}

/// [`probe_delay`] with a fresh random draw.
fn jittered(attempt: u32) -> StdDuration {
    probe_delay(attempt, crate::action::jitter_unit())
}

/// The health channel shared by the actor and every run task, and the bell that rings when an
/// outage starts or ends (the actor probes at the backoff's pace, or claims at once).
#[derive(Debug)]
pub(super) struct HealthCell {
    tx: watch::Sender<EngineHealth>,
    turned: Notify,
    /// Rings when a probe found the store answering while completions wait: they retry now.
    retry_pending: Notify,
    /// The clock's monotonic reading when the current outage started: its length is time
    /// passed, which a wall-clock step in between does not change. With it, whether its start
    /// was read from the store's clock (which a step of this owner's wall clock does not move).
    failing_since_mono: Mutex<Option<(StdDuration, bool)>>,
    /// The store's clock at this owner's last heartbeat, with the monotonic reading of then
    /// (see [`HealthCell::store_now`]), and this owner's wall clock then.
    store_clock: Mutex<Option<(Reading, DateTime<Utc>)>>,
    /// Rings when a run task needs the store's clock read again (a wall-clock step since the
    /// last heartbeat): the actor beats at once.
    beat_wanted: Notify,
    /// Rings at each heartbeat that read the store's clock.
    clock_read: Notify,
}

impl HealthCell {
    pub(super) fn new(tx: watch::Sender<EngineHealth>) -> HealthCell {
        HealthCell {
            tx,
            turned: Notify::new(),
            retry_pending: Notify::new(),
            failing_since_mono: Mutex::new(None),
            store_clock: Mutex::new(None),
            beat_wanted: Notify::new(),
            clock_read: Notify::new(),
        }
    }

    /// A heartbeat read the store's clock: `store` then; `at` this owner's clock when it sent
    /// the beat.
    pub(super) fn store_clock_read(&self, store: DateTime<Utc>, at: Reading) {
        *lock(&self.store_clock) = Some((
            Reading {
                wall: store,
                mono: at.mono,
            },
            at.wall,
        ));
        self.clock_read.notify_waiters();
    }

    /// Completes when a run task asks for the store's clock to be read again.
    pub(super) async fn beat_wanted(&self) {
        self.beat_wanted.notified().await;
    }

    /// The store's clock at `end` (a run's end, this owner's reading of its clock then), as
    /// a completion decides on it ([`HealthCell::store_now`]). When this owner's wall clock
    /// stepped since the last heartbeat read the store's, that reading may be as stale as the
    /// step (a host's clock set right moves the store's with it): the actor is asked to beat
    /// at once and the answer is awaited, up to `within`; the store's clock is then read
    /// forward to now on `clock`. With no answer in time the old reading stands.
    pub(super) async fn store_now_at_end(
        &self,
        end: Reading,
        clock: &dyn Clock,
        within: StdDuration,
    ) -> Option<DateTime<Utc>> {
        let (read, own) = (*lock(&self.store_clock))?;
        let at_beat = Reading {
            wall: own,
            mono: read.mono,
        };
        if end.step_since(&at_beat).is_none() {
            return self.store_now(end.mono);
        }
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let fresh = self.clock_read.notified();
            tokio::pin!(fresh);
            fresh.as_mut().enable();
            if lock(&self.store_clock).is_some_and(|(r, _)| r.mono >= end.mono) {
                return self.store_now(clock.monotonic());
            }
            self.beat_wanted.notify_one();
            if tokio::time::timeout_at(deadline, fresh).await.is_err() {
                return self.store_now(end.mono);
            }
        }
    }

    /// The instant an outage's start or end is reported at: the store's clock carried on the
    /// monotonic clock (`store_now`) when this owner keeps it, else its wall clock (`true` when
    /// it is the store's). A wall clock stepped ahead before the outage then dates neither its
    /// start in `/healthz` and the metrics nor its end two days ahead; the owner's own clock is
    /// the one in doubt once it stepped, and the store's is what the other owners go by.
    fn report_at(&self, at: Reading) -> (DateTime<Utc>, bool) {
        match self.store_now(at.mono) {
            Some(t) => (t, true),
            None => (at.wall, false),
        }
    }

    /// The store's clock now as this owner can tell it without asking: its reading at the last
    /// heartbeat carried forward by the monotonic time passed since (`mono_now`). A wall-clock
    /// step of this owner since that heartbeat does not move it. `None` before the first
    /// heartbeat the store answered (or when the engine does not bound its clock).
    pub(super) fn store_now(&self, mono_now: StdDuration) -> Option<DateTime<Utc>> {
        let (r, _) = (*lock(&self.store_clock))?;
        let passed = chrono::Duration::from_std(mono_now.saturating_sub(r.mono)).ok()?;
        Some(r.wall + passed)
    }

    /// The wall clock stepped by `step`: the current outage's start, when it is an instant of
    /// this owner's wall clock, is moved with it, so "unwritable since" stays the same time
    /// before now. A start read from the store's clock stays: the step did not move that clock.
    pub(super) fn clock_stepped(&self, step: chrono::Duration) {
        if lock(&self.failing_since_mono).is_some_and(|(_, from_store)| from_store) {
            return;
        }
        self.tx.send_if_modified(|h| {
            let Some(since) = h.store_failing_since.as_mut() else {
                return false;
            };
            *since += step;
            true
        });
    }

    /// Completes when a probe asks the completions still waiting to retry at once.
    pub(super) async fn retry_now(&self) {
        self.retry_pending.notified().await;
    }

    pub(super) fn send_modify(&self, f: impl FnOnce(&mut EngineHealth)) {
        self.tx.send_modify(f);
    }

    pub(super) fn borrow(&self) -> watch::Ref<'_, EngineHealth> {
        self.tx.borrow()
    }
}

/// The health channel, shared by the actor and every run task.
pub(super) type Health = Arc<HealthCell>;

/// A poisoned lock still holds a plain value worth reading.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A store write worked at `at`: an outage, if one was going on, ends here (logged; the actor
/// claims at once) — unless finished runs still wait for their completion to be written: a
/// store that takes a lease renewal but not a history row (a disk with a few bytes left) has
/// not recovered, so those runs retry at once instead, and the last one written ends it. The
/// outage's length is the monotonic time passed since it started: a wall-clock step in between
/// (its start was moved with the step) does not make it days long or nothing.
pub(super) fn store_ok(health: &Health, ev_tx: &broadcast::Sender<Event>, at: Reading) {
    let mut ended = None;
    let mut waiting = false;
    let started_mono = *lock(&health.failing_since_mono);
    health.tx.send_if_modified(|h| {
        let Some(since) = h.store_failing_since else {
            return false;
        };
        if h.pending_completions > 0 {
            waiting = true;
            return false;
        }
        let (end, _) = health.report_at(at);
        let lasted = started_mono.map_or_else(
            || (end - since).to_std().unwrap_or_default(),
            |(m, _)| at.mono.saturating_sub(m),
        );
        ended = Some((lasted, h.probes_this_outage));
        let start = end - chrono::Duration::from_std(lasted).unwrap_or_default();
        h.last_outage = Some((start, end));
        h.store_failing_since = None;
        h.last_store_error = None;
        h.claims_stopped = false;
        true
    });
    if waiting {
        health.retry_pending.notify_waiters();
    }
    if let Some((lasted, probes)) = ended {
        *lock(&health.failing_since_mono) = None;
        let secs = lasted.as_secs_f64();
        let msg =
            format!("store writable again after {secs:.1}s ({probes} probe(s)): claims resumed");
        tracing::warn!(outage_seconds = secs, "{msg}");
        let _ = ev_tx.send(Event::Notice(msg));
        health.turned.notify_one();
    }
}

/// A store write failed at `at`: the first failure starts an outage (logged, claims stop).
pub(super) fn store_failed(
    health: &Health,
    ev_tx: &broadcast::Sender<Event>,
    at: Reading,
    e: &EngineError,
) {
    let msg = e.to_string();
    let (now, from_store) = health.report_at(at);
    let mut started = false;
    health.send_modify(|h| {
        if h.store_failing_since.is_none() {
            started = true;
            *lock(&health.failing_since_mono) = Some((at.mono, from_store));
            h.store_failing_since = Some(now);
            h.outages += 1;
            h.probes_this_outage = 0;
        }
        h.claims_stopped = true;
        h.last_store_error = Some(msg.clone());
    });
    if started {
        let line = format!(
            "store unwritable since {}: claims stopped until a write succeeds (error: {msg})",
            now.format("%Y-%m-%dT%H:%M:%SZ")
        );
        tracing::error!("{line}");
        let _ = ev_tx.send(Event::Notice(line));
        health.turned.notify_one();
    }
}

/// Damage a claim ran into (a corrupt or foreign store file, a store of another format): not
/// an outage — retrying cannot help, so the engine stops with it instead of idling (a `run`
/// kept up doing nothing would exit 0 and hide the damage). A file that is *gone* is not
/// taken as damage here: a store directory that vanished under a running engine (an unmounted or remounted volume, a deleted directory) is waited for as an outage,
/// reported by the health check, rather than ending the process — a supervisor restarting
/// it on an empty directory would create a new store there.
fn is_damage(e: &StoreError) -> bool {
    match e {
        StoreError::Open(OpenError::Corrupt { file, .. }) => file.exists(),
        StoreError::Open(OpenError::Version { .. }) => true,
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
    /// Consecutive failed claims (probes) of the current outage: the next waits [`probe_delay`].
    failures: u32,
    /// During an outage, when the next probe runs (no sooner, whatever wakes the loop). On the
    /// monotonic timer clock: a backoff is an amount of time passing, not a wall-clock instant.
    probe_at: Option<tokio::time::Instant>,
    /// A claim found the store damaged ([`OpenError::Corrupt`](crate::store::OpenError::Corrupt)): not an outage, retrying
    /// cannot help. The engine stops (its runs finish as at a stop) and returns it (exit 2).
    damaged: Option<StoreError>,
    /// Shared with the run tasks, which spool at stop what the store still refuses.
    unwritten: Arc<Mutex<Unwritten>>,
}

impl Outage {
    pub(super) fn new(health: Health, ev_tx: broadcast::Sender<Event>) -> Self {
        Outage {
            health,
            ev_tx,
            failures: 0,
            probe_at: None,
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

    /// Why claims are stopped (an outage, or this owner's clock), for its owner record.
    pub(super) fn stopped_because(&self) -> Option<String> {
        self.health.borrow().claims_stopped_because()
    }

    /// Whether an outage is going on: no new claims until a write succeeds.
    pub(super) fn in_outage(&self) -> bool {
        self.health.borrow().claims_stopped
    }

    /// Rings when an outage started or ended (a run task's write failed, or went through).
    pub(super) async fn turned(&self) {
        self.health.turned.notified().await;
    }

    /// An outage ended: probe pacing starts over.
    pub(super) fn reset(&mut self) {
        self.failures = 0;
        self.probe_at = None;
    }

    /// A claim cycle is about to run: during an outage it is a probe of the store (counted).
    pub(super) fn before_claim(&self) {
        if self.in_outage() {
            self.health.send_modify(|h| {
                h.outage_probes += 1;
                h.probes_this_outage += 1;
            });
        }
    }

    /// A claim went through at `now`. While finished runs still wait for their completion to
    /// be written it ends nothing (see [`store_ok`]: a full disk answers a claim with nothing
    /// due, and ending the outage on that would flap `/healthz` at every probe): those runs
    /// retry at once, and the last one written ends the outage.
    pub(super) fn claim_answered(&mut self, at: Reading) {
        store_ok(&self.health, &self.ev_tx, at);
        if self.in_outage() {
            // Still refused somewhere: the next probe at the backoff's pace.
            self.failures = self.failures.saturating_add(1);
            self.probe_at = Some(tokio::time::Instant::now() + jittered(self.failures));
        } else {
            self.reset();
        }
    }

    /// A claim (a probe, during an outage) failed at `now`: damage stops the engine (retrying
    /// cannot help), anything else starts or continues an outage, probed again after
    /// [`probe_delay`].
    pub(super) fn claim_failed(&mut self, at: Reading, e: EngineError) {
        match e {
            EngineError::Store(e) if is_damage(&e) => {
                let msg = format!("the store is damaged; stopping: {e}");
                tracing::error!("{msg}");
                let _ = self.ev_tx.send(Event::Notice(msg));
                self.damaged = Some(e);
            }
            e => {
                self.failures = self.failures.saturating_add(1);
                store_failed(&self.health, &self.ev_tx, at, &e);
                let d = jittered(self.failures);
                self.probe_at = Some(tokio::time::Instant::now() + d);
                tracing::warn!(error = %e, failures = self.failures, "store probe failed; next in {d:?}, claims stay stopped");
            }
        }
    }

    /// How long to wait before calling a failing store again.
    pub(super) fn backoff(&self) -> StdDuration {
        jittered(self.failures.max(1))
    }

    /// During an outage, when the next claim cycle (a probe) runs; `None` while the store takes
    /// writes. An outage a run task started (no probe failed yet) is probed after the first
    /// step of the backoff.
    pub(super) fn next_probe(&mut self) -> Option<tokio::time::Instant> {
        if !self.in_outage() {
            self.probe_at = None;
            return None;
        }
        Some(
            *self
                .probe_at
                .get_or_insert_with(|| tokio::time::Instant::now() + jittered(1)),
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
                _ = tokio::time::sleep(jittered(attempt)) => {}
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
                    store_ok(&self.health, &self.ev_tx, Reading::of(to.clock.as_ref()));
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
                    store_failed(
                        &self.health,
                        &self.ev_tx,
                        Reading::of(to.clock.as_ref()),
                        &err,
                    );
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

#[cfg(test)]
mod tests {
    use super::*;

    fn t(wall: &str) -> DateTime<Utc> {
        wall.parse().expect("an instant")
    }

    fn at(wall: &str, mono_secs: u64) -> Reading {
        Reading {
            wall: wall.parse().expect("an instant"),
            mono: StdDuration::from_secs(mono_secs),
        }
    }

    fn notices(rx: &mut broadcast::Receiver<Event>) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(e) = rx.try_recv() {
            if let Event::Notice(n) = e {
                out.push(n);
            }
        }
        out
    }

    /// An outage that starts while the wall clock is two days ahead and ends after it was set
    /// right lasts the 45 s that passed; seen by the loop, the step moves "since" with it.
    #[test]
    fn an_outage_across_a_clock_step_lasts_the_time_that_passed() {
        for seen in [true, false] {
            let (tx, _) = watch::channel(EngineHealth::default());
            let health: Health = Arc::new(HealthCell::new(tx));
            let (ev_tx, mut ev_rx) = broadcast::channel(16);
            let err = EngineError::Join("disk full".into());
            store_failed(&health, &ev_tx, at("2026-12-09T06:00:00Z", 10), &err);
            if seen {
                health.clock_stepped(chrono::Duration::days(-2));
                let why = health.borrow().claims_stopped_because().unwrap_or_default();
                assert!(
                    why.contains("unwritable since 2026-12-07T06:00:00Z"),
                    "{why}"
                );
            }
            store_ok(&health, &ev_tx, at("2026-12-07T06:00:45Z", 55));
            let h = health.borrow().clone();
            assert!(h.store_failing_since.is_none() && !h.claims_stopped);
            let from: DateTime<Utc> = "2026-12-07T06:00:00Z".parse().unwrap_or_default();
            let to: DateTime<Utc> = "2026-12-07T06:00:45Z".parse().unwrap_or_default();
            assert_eq!(h.last_outage, Some((from, to)));
            let n = notices(&mut ev_rx);
            assert!(
                n.iter().any(|l| l.contains("writable again after 45.0s")),
                "{n:?}"
            );
        }
    }

    /// An outage that starts while this owner's wall clock is two days ahead (stepped after its
    /// last heartbeat) is dated by the store's clock carried on the monotonic clock: `since`
    /// and its end are real instants, and the step back, when the loop sees it, leaves them be.
    #[test]
    fn an_outage_that_starts_during_a_step_is_dated_by_the_stores_clock() {
        for seen in [true, false] {
            let (tx, _) = watch::channel(EngineHealth::default());
            let health: Health = Arc::new(HealthCell::new(tx));
            let (ev_tx, mut ev_rx) = broadcast::channel(16);
            let beat = at("2026-12-07T06:00:00Z", 100);
            health.store_clock_read(beat.wall, beat);
            let err = EngineError::Join("disk full".into());
            // 10 s after the heartbeat, with the wall clock stepped +2 d.
            store_failed(&health, &ev_tx, at("2026-12-09T06:00:10Z", 110), &err);
            let why = health.borrow().claims_stopped_because().unwrap_or_default();
            assert!(
                why.contains("unwritable since 2026-12-07T06:00:10Z"),
                "{why}"
            );
            let n = notices(&mut ev_rx);
            assert!(
                n.iter()
                    .any(|l| l.contains("unwritable since 2026-12-07T06:00:10Z")),
                "{n:?}"
            );
            let end = if seen {
                health.clock_stepped(chrono::Duration::days(-2));
                let why = health.borrow().claims_stopped_because().unwrap_or_default();
                assert!(
                    why.contains("unwritable since 2026-12-07T06:00:10Z"),
                    "{why}"
                );
                at("2026-12-07T06:00:40Z", 140)
            } else {
                at("2026-12-09T06:00:40Z", 140)
            };
            store_ok(&health, &ev_tx, end);
            let h = health.borrow().clone();
            let from: DateTime<Utc> = "2026-12-07T06:00:10Z".parse().unwrap_or_default();
            let to: DateTime<Utc> = "2026-12-07T06:00:40Z".parse().unwrap_or_default();
            assert_eq!(h.last_outage, Some((from, to)));
            let n = notices(&mut ev_rx);
            assert!(
                n.iter().any(|l| l.contains("writable again after 30.0s")),
                "{n:?}"
            );
        }
    }

    /// A run that ends after this owner's wall clock stepped since the last heartbeat asks for
    /// a heartbeat and decides on its fresh reading of the store's clock (a host's clock set
    /// right moved the store's too); with no step it decides on the reading it has, and with
    /// no answer in time on that reading too.
    #[tokio::test(start_paused = true)]
    async fn a_run_ending_after_a_step_decides_on_a_fresh_reading_of_the_stores_clock() {
        let (tx, _) = watch::channel(EngineHealth::default());
        let health: Health = Arc::new(HealthCell::new(tx));
        let clock = crate::clock::ManualClock::new(t("2026-12-09T06:00:00Z"));
        let beat = Reading::of(&clock);
        health.store_clock_read(t("2026-12-09T06:00:00Z"), beat);
        clock.advance(chrono::Duration::seconds(2));
        let end = Reading::of(&clock);
        let wait = StdDuration::from_secs(2);
        assert_eq!(
            health.store_now_at_end(end, &clock, wait).await,
            Some(t("2026-12-09T06:00:02Z")),
            "no step: the reading it has"
        );
        // The host's clock is set right, two days back, before the next heartbeat.
        clock.set(t("2026-12-07T06:00:03Z"));
        let end = Reading::of(&clock);
        assert_eq!(
            health.store_now_at_end(end, &clock, wait).await,
            Some(t("2026-12-09T06:00:02Z")),
            "no heartbeat answered: the old reading stands"
        );
        let actor = {
            let (health, clock) = (Arc::clone(&health), clock.clone());
            tokio::spawn(async move {
                health.beat_wanted().await;
                health.store_clock_read(clock.now(), Reading::of(&clock));
            })
        };
        let decided = health.store_now_at_end(end, &clock, wait).await;
        actor.await.expect("the actor's part");
        assert_eq!(decided, Some(t("2026-12-07T06:00:03Z")));
    }

    /// The store's clock as the last heartbeat read it moves on with monotonic time only: a
    /// step of this owner's wall clock does not move it.
    #[test]
    fn the_stores_clock_is_carried_on_the_monotonic_clock() {
        let (tx, _) = watch::channel(EngineHealth::default());
        let cell = HealthCell::new(tx);
        assert_eq!(cell.store_now(StdDuration::from_secs(5)), None);
        let r = at("2026-12-07T06:00:00Z", 100);
        cell.store_clock_read(r.wall, r);
        assert_eq!(
            cell.store_now(StdDuration::from_secs(103)),
            Some(r.wall + chrono::Duration::seconds(3))
        );
    }
}

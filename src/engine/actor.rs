//! The actor: the engine's one loop. It sleeps until the earliest instant the store says
//! something may be claimable (no fixed polling of the schedule), and turns on commands, ended
//! runs, the store's change signal, the change-token poll and snapshot pacing.
//!
//! Changes made by other owners (or `cronsole pause/trigger` from a shell) are pushed by the
//! store's change signal (LISTEN/NOTIFY on PostgreSQL, inotify on the file store; see
//! `store::signal`), so the engine re-reads its next wake-up within milliseconds. An idle engine
//! with a signal reads nothing periodically: it turns for the signal, its next slot, a lease
//! renewal while a run is alive, a command, and a jump of the wall clock (the clock says so:
//! [`Clock::jumps`]), which moves the instant its next wake-up's timer stands for; a clock that
//! cannot tell is looked at once a second ([`CLOCK_CHECK`]; no store read). Only a store
//! without a signal (or after the signal ended) has its cheap change token checked every
//! `change_poll` (250 ms), which is logged at start. Liveness is asked for, not assumed from a
//! periodic turn: the health check and the systemd watchdog poke the loop through the
//! [`Heartbeat`] and wait for it to turn.
//!
//! Owns: the actor's state, the loop's turn, and starting the runs a claim returned. Must not
//! touch: the UI; what each part decides lives below it (`claim`, `commands`, `publish`,
//! `outage`, `shutdown`, `task`).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Utc};
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::api::{Command, EngineConfig, Event};
use super::claim::{claim_due, hidden_jobs};
use super::commands::{command, honour_cancel_requests};
use super::completion::CompletionTx;
use super::error::{EngineError, blocking};
use super::heartbeat::Heartbeat;
use super::outage::{Outage, Writer};
use super::owner::Beat;
use super::publish::{BUILD_POLL, Publisher};
use super::shutdown::{Going, wait_for_runs};
use super::task::{Finished, InFlight, RunTask};
use super::{RunDeps, spool};
use crate::clock::{Clock, Jumps};
use crate::model::Settings;
use crate::store::signal::ChangeSignal;
use crate::store::{Claim, Store};

/// How often an idle loop with a change signal turns to re-read a wall clock that cannot tell
/// of its jumps (see the module doc): such a jump delays a slot by at most this much.
pub(super) const CLOCK_CHECK: StdDuration = StdDuration::from_secs(1);

/// The engine's state, owned by its one task.
pub(super) struct Actor {
    pub(super) cfg: EngineConfig,
    pub(super) store: Arc<dyn Store>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) deps: Arc<RunDeps>,
    pub(super) publisher: Publisher,
    pub(super) ev_tx: broadcast::Sender<Event>,
    pub(super) in_flight: HashMap<Uuid, InFlight>,
    pub(super) shutdown: CancellationToken,
    pub(super) hard_stop: CancellationToken,
    pub(super) completions: CompletionTx,
    /// The renewal batcher's queue (one store write for the renewals waiting together).
    pub(super) renewals: super::renew::RenewalTx,
    pub(super) outage: Outage,
    pub(super) heartbeat: Arc<Heartbeat>,
    /// Both clock readings at the last claim cycle: a wall-clock step between two cycles is
    /// seen by comparing them.
    pub(super) reading: crate::clock::Reading,
    /// This owner's record in the store and the clock check riding on it.
    pub(super) beat: Beat,
    /// A wall-clock step seen since the last claim that went through: that claim's rows say so.
    pub(super) unclaimed_step: Option<chrono::Duration>,
}

/// What the loop carries from one turn to the next.
pub(super) struct Turn {
    /// The change-token poll, the fallback for changes no signal reported.
    poll: tokio::time::Interval,
    /// The next wake-up is a wall-clock instant turned into a timer at each turn: a jump of the
    /// clock must turn the loop. Told of jumps, it waits for them; otherwise (with a change
    /// signal, which replaces the poll's turns) it looks once a second, reading nothing.
    jumps: Option<tokio::sync::watch::Receiver<u64>>,
    clock_check: Option<tokio::time::Interval>,
    last_token: u64,
    /// The last change-token check failed (reported once per outage).
    poll_failing: bool,
    /// Something changed since the last snapshot build started.
    pub(super) dirty: bool,
    last_publish: tokio::time::Instant,
    /// When the next claim cycle runs (`None`: nothing due, or no free capacity).
    pub(super) wake: Option<DateTime<Utc>>,
    signal: Option<ChangeSignal>,
    last_signal: tokio::time::Instant,
}

impl Actor {
    fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// The instant a claim decides on, and how far this owner's wall clock is ahead of the
    /// store's (zero when it keeps no reading of the store's clock: no bound on its clock, or no
    /// heartbeat answered yet). A store that reads its own clock in the claim (PostgreSQL) is
    /// given this owner's wall clock, which it checks against the bound; any other store (the
    /// file store) is given the store's clock as the last heartbeat read it, carried on the
    /// monotonic clock. An owner ahead by less than the bound then takes no slot early, does
    /// not read another owner's live lease as expired, and dates the rows its claims write
    /// (`missed`, `abandoned`) on the clock every owner shares.
    fn claim_clock(&self) -> (DateTime<Utc>, chrono::Duration) {
        let at = crate::clock::Reading::of(self.clock.as_ref());
        let Some(store) = self.outage.health().store_now(at.mono) else {
            return (at.wall, chrono::Duration::zero());
        };
        let now = if self.store.decides_on_own_clock() {
            at.wall
        } else {
            store
        };
        (now, at.wall - store)
    }

    /// Tokio instant for a wall-clock instant (wall time may be injected).
    fn instant_for(&self, at: DateTime<Utc>) -> tokio::time::Instant {
        let d = (at - self.now()).to_std().unwrap_or(StdDuration::ZERO);
        tokio::time::Instant::now() + d
    }

    /// The loop, until a shutdown (or damage); then the runs' end and the engine's result.
    pub(super) async fn run(
        mut self,
        mut cmd_rx: mpsc::Receiver<Command>,
    ) -> Result<(), EngineError> {
        let mut runs: JoinSet<Finished> = JoinSet::new();
        let mut turn = self.first_turn().await?;
        loop {
            self.heartbeat.beat();
            // The wall clock stepped since the last claim cycle: the next wake-up was computed
            // on the old time (after a step back it lies as far ahead as the step). Claim now:
            // the claim re-derives what the old time decided. Any turn looks (the heartbeat
            // turns the loop every few seconds), so a step the kernel does not announce (a
            // faked clock) is seen too.
            if crate::clock::Reading::of(self.clock.as_ref())
                .step_since(&self.reading)
                .is_some()
            {
                turn.wake = Some(self.now());
            }
            if turn.wake.is_none_or(|w| w > self.now()) {
                self.heartbeat.count_quiet_turn(runs.len());
            }
            let publish_gap = self.publisher.gap();
            if turn.dirty && !self.publisher.running() && turn.last_publish.elapsed() >= publish_gap
            {
                self.publish();
                turn.last_publish = tokio::time::Instant::now();
                turn.dirty = false;
            }
            // Owners sharing a store all wake for the same slot and race for its lock: up to 1 ms
            // of random spread keeps the same owner from winning that race every time.
            let spread = StdDuration::from_micros((crate::action::jitter_unit() * 1000.0) as u64);
            let wake_at = turn.wake.map(|w| self.instant_for(w) + spread);
            // At full capacity nothing could be claimed: a run's renewal or completion probes.
            let probe_at = if self.free_capacity() > 0 {
                self.outage.next_probe()
            } else {
                None
            };
            // While a build runs, look again shortly: the next one starts when it has ended.
            let publish_at = turn.dirty.then(|| {
                let at = turn.last_publish + publish_gap;
                if self.publisher.running() {
                    at.max(tokio::time::Instant::now() + BUILD_POLL)
                } else {
                    at
                }
            });
            tokio::select! {
                biased;
                cmd = cmd_rx.recv() => match cmd {
                    None | Some(Command::Shutdown) => break,
                    Some(c) => {
                        command(&self.store, &self.ev_tx, self.now(), c).await;
                        turn.dirty = true;
                        turn.wake = self.next_wake().await;
                    }
                },
                _ = self.shutdown.cancelled() => break,
                _ = self.hard_stop.cancelled() => break,
                // A liveness check: turning the loop is the answer (it beats at the top). It
                // also looks for a change the signal has not brought yet (one token read), so
                // a turn asked for sees the store as it is when asked.
                _ = self.heartbeat.poked() => self.on_poll(&mut turn).await,
                Some(done) = runs.join_next(), if !runs.is_empty() => {
                    self.reap(done, &mut runs);
                    turn.dirty = true;
                    turn.wake = self.next_wake().await;
                }
                alive = signal_changed(&mut turn.signal) => self.on_signal(alive, &mut turn).await,
                // An outage started (the next claim cycle is a probe, at the backoff's pace) or
                // ended (claim now, not after the backoff).
                _ = self.outage.turned() => {
                    if !self.outage.in_outage() {
                        self.outage.reset();
                    }
                    turn.wake = self.next_wake().await;
                }
                _ = sleep_opt(wake_at) => {
                    if !self.claim_cycle(&mut runs, &mut turn).await {
                        break;
                    }
                }
                // During an outage: the next probe of the store, at the backoff's pace.
                _ = sleep_opt(probe_at) => {
                    if !self.claim_cycle(&mut runs, &mut turn).await {
                        break;
                    }
                }
                _ = turn.poll.tick(), if turn.signal.is_none() => self.on_poll(&mut turn).await,
                _ = clock_jumped(&mut turn.jumps) => {}
                _ = tick_opt(&mut turn.clock_check), if turn.signal.is_some() => {}
                _ = sleep_opt(publish_at) => {}
                // The owner's heartbeat record; the clock check that rides on it may stop or
                // resume claims. A run ending after a wall-clock step asks for it at once.
                _ = self.outage.health().beat_wanted() => {
                    if self.beat_now().await {
                        turn.wake = self.next_wake().await;
                    }
                }
                _ = self.beat.due() => {
                    if self.beat_now().await {
                        turn.wake = self.next_wake().await;
                    }
                }
            }
        }
        self.shutdown_runs(runs).await;
        self.publisher
            .publish_final(self.clock.as_ref(), self.in_flight_jobs())
            .await;
        // Nothing more runs here: the views stop counting this owner now.
        self.beat.sign_off(&self.store, &self.clock).await;
        self.outage.stop_result(self.cfg.spool.clone())
    }

    /// The loop's state before its first turn, after the spool replay.
    async fn first_turn(&mut self) -> Result<Turn, EngineError> {
        let mut poll = tokio::time::interval(self.cfg.change_poll);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let (jumps, clock_check) = match self.clock.jumps() {
            Jumps::Told(rx) => (Some(rx), None),
            Jumps::Unknown => {
                let mut i = tokio::time::interval(CLOCK_CHECK);
                i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                (None, Some(i))
            }
        };
        let last_token = blocking(&self.store, |s| s.change_token()).await?;
        // The first heartbeat comes before the first claim: an owner whose clock is off
        // claims nothing, not even once.
        self.beat_now().await;
        // Completions spooled at the last stop go in before anything is claimed, so a recovery
        // claim can never record them `abandoned` first.
        let to = Writer {
            store: &self.store,
            completions: &self.completions,
            clock: &self.clock,
        };
        self.outage
            .replay_spool(
                self.cfg.spool.clone(),
                &to,
                &[&self.shutdown, &self.hard_stop],
            )
            .await?;
        let signal = if self.cfg.change_signal {
            self.store.change_signal()
        } else {
            None
        };
        // With a change signal an idle owner sleeps until the signal, its next slot or a run's
        // lease renewal: nothing wakes it periodically. Without one it polls the change token.
        if signal.is_none() {
            tracing::info!(
                every_ms = self.cfg.change_poll.as_millis() as u64,
                "no change notification from the store: polling its change token"
            );
        }
        let now = tokio::time::Instant::now();
        Ok(Turn {
            poll,
            jumps,
            clock_check,
            last_token,
            poll_failing: false,
            dirty: true,
            last_publish: now - self.cfg.snapshot_min_interval,
            // One claim cycle at start, due or not: it recovers expired leases at once, and the
            // service manager is told the engine is ready only after a cycle completed.
            wake: Some(self.now()),
            signal,
            last_signal: now - self.cfg.signal_min_interval,
        })
    }

    /// Forget the run `done` and every other one already finished, before the one store read
    /// that follows (a burst ends hundreds of runs at once: one `next_wakeup` for all).
    fn reap(
        &mut self,
        done: Result<Finished, tokio::task::JoinError>,
        runs: &mut JoinSet<Finished>,
    ) {
        let mut done = Some(done);
        while let Some(d) = done.take().or_else(|| runs.try_join_next()) {
            self.reap_one(d);
        }
    }

    /// The store pushed a change (`alive`), or its signal ended (then the poll is all there is).
    async fn on_signal(&mut self, alive: bool, turn: &mut Turn) {
        if !alive {
            tracing::warn!("store change signal ended; polling the change token");
            turn.signal = None;
            turn.poll.reset();
            return;
        }
        tokio::time::sleep_until(turn.last_signal + self.cfg.signal_min_interval).await;
        turn.last_signal = tokio::time::Instant::now();
        // What fired while we waited is covered by the re-read below.
        if let Some(s) = turn.signal.as_mut() {
            s.rx.borrow_and_update();
        }
        // The signal replaces the poll: an operator's cancel arrives this way.
        if let Ok(t) = blocking(&self.store, |s| s.change_token()).await
            && t != turn.last_token
        {
            turn.last_token = t;
            honour_cancel_requests(&self.store, &self.in_flight).await;
        }
        turn.dirty = true;
        turn.wake = self.next_wake().await;
    }

    /// The change-token poll: a moved token means another process wrote.
    async fn on_poll(&mut self, turn: &mut Turn) {
        match blocking(&self.store, |s| s.change_token()).await {
            Ok(t) if t != turn.last_token => {
                turn.last_token = t;
                honour_cancel_requests(&self.store, &self.in_flight).await;
                turn.dirty = true;
                turn.wake = self.next_wake().await;
            }
            Ok(_) => turn.poll_failing = false,
            Err(e) => {
                // Once per outage, not every 250 ms.
                if !turn.poll_failing {
                    tracing::warn!(error = %e, "store change check failed");
                }
                turn.poll_failing = true;
            }
        }
    }

    /// A run task panicked (a bug, never outside input): forget it here so its job is not
    /// blocked in this process forever and its capacity comes back; the store recovers its lease
    /// when it expires (an `abandoned` row).
    pub(super) fn reap_failed(&mut self, e: &tokio::task::JoinError) {
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

    /// When the next claim cycle runs: the store's next wake-up, or a backoff while it fails;
    /// `None` at full capacity (a finishing run wakes the loop).
    pub(super) async fn next_wake(&mut self) -> Option<DateTime<Utc>> {
        if self.free_capacity() == 0 {
            return None; // a finishing run wakes the loop
        }
        // During an outage the next claim cycle is the next probe, at its backoff's pace; while
        // this owner's clock is off, the heartbeat that finds it back resumes claiming.
        if self.outage.in_outage() || self.beat.refused().is_some() {
            return None;
        }
        // The store's wake-ups are instants of its clock: this owner's timers run on its own,
        // so one ahead of the store's wakes when the slot is due there, not that much early
        // (then claiming nothing until it is), and one behind does not wake late.
        let (at, ahead) = self.claim_clock();
        let now = self.now();
        match blocking(&self.store, move |s| s.next_wakeup(at)).await {
            Ok(w) => w.map(|w| w + ahead),
            Err(e) => {
                let d = self.outage.backoff();
                tracing::warn!(error = %e, "next_wakeup failed; retrying in {d:?}");
                Some(now + chrono::Duration::from_std(d).unwrap_or(chrono::Duration::seconds(1)))
            }
        }
    }

    /// One heartbeat now. True when it stopped or resumed claims for this owner's clock.
    async fn beat_now(&mut self) -> bool {
        let stopped = self.outage.stopped_because();
        let changed = self
            .beat
            .beat(
                &self.store,
                &self.clock,
                self.outage.health(),
                &self.ev_tx,
                stopped,
            )
            .await;
        if changed && self.beat.refused().is_none() {
            // Claims resume on a clock set right. What this owner stored on the clock ahead
            // (the jobs it applied: their first slots lie as far ahead as it was) is not due,
            // so no claim would look at it: re-derived now, before the next claim.
            let now = self.now();
            if let Err(e) = blocking(&self.store, move |s| s.rederive_ahead(now)).await {
                tracing::warn!(error = %e, "re-deriving slots after the clock came back failed");
            }
        }
        changed
    }

    /// Runs this owner may still start.
    pub(super) fn free_capacity(&self) -> usize {
        self.cfg.max_concurrent.saturating_sub(self.in_flight.len())
    }

    /// Start building a snapshot of now (one build at a time: the caller checks first).
    fn publish(&self) {
        self.publisher.publish(self.now(), self.in_flight_jobs());
    }

    /// The jobs this owner runs now (the snapshot marks them).
    fn in_flight_jobs(&self) -> BTreeSet<String> {
        self.in_flight.values().map(|f| f.job.clone()).collect()
    }

    /// One claim cycle and what follows it: the next wake-up, backed off while the store fails.
    /// False when the engine must stop (the claim found the store damaged).
    async fn claim_cycle(&mut self, runs: &mut JoinSet<Finished>, turn: &mut Turn) -> bool {
        let step = self.watch_clock();
        if let Some(s) = step {
            // Kept until a claim runs (this one may not: no capacity, claims stopped); a step
            // undone before then leaves nothing to say.
            let net = self.unclaimed_step.unwrap_or_default() + s;
            let bound =
                chrono::Duration::from_std(crate::clock::STEP_THRESHOLD).unwrap_or_default();
            self.unclaimed_step = (net.abs() > bound).then_some(net);
        }
        if step.is_some() && self.cfg.max_clock_offset.is_some() {
            // A step of this process's clock alone (a faked clock) puts it off the store's:
            // measured now, before this cycle claims on it, not at the next heartbeat (up to
            // 5 s of claims on a clock days off: one-shots early, days of slots recorded).
            self.beat_now().await;
        }
        // What was due when this cycle claimed: a slot that came due after (the clock jumped
        // while the cycle ran) is claimed by the next cycle at once, not paced as a spin.
        let claimed_at = self.now();
        let progressed = self.claim(runs).await;
        self.heartbeat.count_claim_cycle();
        if self.outage.damaged() {
            return false;
        }
        turn.dirty = true;
        turn.wake = self.next_wake().await;
        let now = self.now();
        if self.outage.in_outage() {
            // The probe's pace (`Outage::next_probe`).
        } else if !progressed && turn.wake.is_some_and(|w| w <= claimed_at) {
            // The store may report something due that this owner cannot take (its own run past
            // its lease, a job another owner is finishing): do not spin on it.
            turn.wake = Some(
                now + chrono::Duration::from_std(self.cfg.change_poll)
                    .unwrap_or(chrono::Duration::milliseconds(250)),
            );
        }
        true
    }

    /// Log a wall-clock step since the last claim cycle: the schedule's "now" jumped, so slots
    /// between the two instants are decided by this cycle's claim (and runs in flight across
    /// it say so on their rows).
    fn watch_clock(&mut self) -> Option<chrono::Duration> {
        let now = crate::clock::Reading::of(self.clock.as_ref());
        let step = now.step_since(&self.reading);
        if let Some(step) = step {
            let msg = format!(
                "wall clock stepped {} (from {} to {} while {:.1}s passed)",
                crate::clock::step_words(step),
                self.reading.wall.format("%Y-%m-%dT%H:%M:%SZ"),
                now.wall.format("%Y-%m-%dT%H:%M:%SZ"),
                now.passed_since(&self.reading).as_secs_f64()
            );
            tracing::warn!(step_seconds = step.num_seconds(), "{msg}");
            let _ = self.ev_tx.send(Event::Notice(msg));
            self.outage.health().clock_stepped(step);
        }
        self.reading = now;
        step
    }

    /// Claim and start what is due. True when the claim started a run or wrote a row.
    async fn claim(&mut self, runs: &mut JoinSet<Finished>) -> bool {
        let limit = self.free_capacity();
        let (now, _) = self.claim_clock();
        if limit == 0 || self.shutdown.is_cancelled() || self.beat.refused().is_some() {
            return false;
        }
        // While the store refuses writes, this cycle is a probe: the claim itself is the write
        // that ends the outage when it goes through.
        self.outage.before_claim();
        let owner = self.cfg.owner.clone();
        let hidden = hidden_jobs(&self.in_flight);
        let stepped = self.unclaimed_step.map(crate::clock::step_words);
        // The leases it grants run from about now: a run counts its lease from here.
        let asked = tokio::time::Instant::now();
        let bound = self.cfg.max_clock_offset;
        let claimed = claim_due(
            &self.store,
            now,
            owner,
            limit,
            hidden,
            stepped.clone(),
            bound,
        );
        let (outcome, settings) = match claimed.await {
            Ok((o, _)) if o.refused.is_some() => {
                // The store's clock is past this owner's bound: claims stop as at a heartbeat
                // that measured it, and the next heartbeat (now) keeps or lifts the refusal.
                self.outage
                    .claim_answered(crate::clock::Reading::of(self.clock.as_ref()));
                let why = o.refused.unwrap_or_default();
                self.beat.refuse(why, self.outage.health(), &self.ev_tx);
                self.beat.next = tokio::time::Instant::now();
                return false;
            }
            Ok(o) => {
                self.unclaimed_step = None;
                o
            }
            Err(e) => {
                self.outage
                    .claim_failed(crate::clock::Reading::of(self.clock.as_ref()), e);
                return false;
            }
        };
        let progressed = !outcome.claims.is_empty() || !outcome.rows.is_empty();
        self.outage
            .claim_answered(crate::clock::Reading::of(self.clock.as_ref()));
        tracing::debug!(owner = %self.cfg.owner, claimed = outcome.claims.len(), rows = outcome.rows.len(), limit, "claim");
        for r in outcome.rows {
            let _ = self.ev_tx.send(Event::row(r));
        }
        for claim in outcome.claims {
            self.start_run(runs, claim, settings.clone(), stepped.clone(), asked);
        }
        progressed
    }

    /// Start the run task of one claim and remember it as in flight.
    fn start_run(
        &mut self,
        runs: &mut JoinSet<Finished>,
        claim: Claim,
        settings: Option<Arc<Settings>>,
        claimed_after_step: Option<String>,
        claim_asked: tokio::time::Instant,
    ) {
        let job = claim.job.def.name.clone();
        // Not a child of `shutdown`: a graceful shutdown must let runs finish within the
        // grace; `shutdown_runs` cancels this token at grace expiry or on a hard stop.
        let cancel = CancellationToken::new();
        let op_cancel = CancellationToken::new();
        let run_id = claim.run_id;
        let progress = super::run::Progress::default();
        self.in_flight.insert(
            run_id,
            InFlight {
                job: job.clone(),
                overlap: claim.job.def.overlap,
                cancel: cancel.clone(),
                op_cancel: op_cancel.clone(),
                task: None,
                progress: progress.clone(),
            },
        );
        let _ = self.ev_tx.send(Event::RunStarted {
            job,
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
            renewals: self.renewals.clone(),
            health: Arc::clone(self.outage.health()),
            unwritten: Arc::clone(self.outage.unwritten()),
            spool: self.cfg.spool.clone().map(spool::Spool::new),
            settings,
            claimed_after_step,
            claim_asked,
        };
        let handle = runs.spawn(ctx.run(claim, cancel, op_cancel, progress));
        if let Some(f) = self.in_flight.get_mut(&run_id) {
            f.task = Some(handle.id());
        }
    }

    /// Wait for the runs in flight, up to the grace (or a hard stop), then cancel them.
    async fn shutdown_runs(&mut self, mut runs: JoinSet<Finished>) {
        if runs.is_empty() {
            return;
        }
        let _ = self.ev_tx.send(Event::Notice(format!(
            "shutting down: waiting up to {}s for {} run(s)",
            self.cfg.shutdown_grace.as_secs(),
            runs.len()
        )));
        // A run awaiting an operator's approval could wait for an hour: it is abandoned at
        // once, and so is one whose call begins to await during the grace (its recovery starts
        // a fresh loop; approvals never carry over).
        for f in self.in_flight.values() {
            if f.progress.stop_when_awaiting(&f.cancel) {
                tracing::info!(job = %f.job, "abandoning a run awaiting approval at shutdown");
            }
        }
        let going = self
            .in_flight
            .iter()
            .map(|(run_id, f)| Going {
                run_id: *run_id,
                task: f.task,
                job: f.job.clone(),
                cancel: f.cancel.clone(),
            })
            .collect();
        let (grace, hard) = (self.cfg.shutdown_grace, self.hard_stop.clone());
        wait_for_runs(&mut runs, grace, &hard, going, |d| self.reap_one(d)).await;
    }

    /// Forget one ended run task, passing its rows on.
    fn reap_one(&mut self, done: Result<Finished, tokio::task::JoinError>) {
        match done {
            Ok(f) => {
                self.in_flight.remove(&f.run_id);
                for r in f.rows {
                    let _ = self.ev_tx.send(Event::row(r));
                }
            }
            Err(e) => self.reap_failed(&e),
        }
    }
}

/// The next push from the store; `false` when its source ended. Pending without a signal.
async fn signal_changed(signal: &mut Option<ChangeSignal>) -> bool {
    match signal {
        Some(s) => s.changed().await,
        None => std::future::pending().await,
    }
}

/// Sleep until `at`; pending forever without one.
/// The wall clock jumped. A clock whose jumps are not told (or no longer: its teller ended)
/// never resolves this.
async fn clock_jumped(jumps: &mut Option<tokio::sync::watch::Receiver<u64>>) {
    match jumps {
        Some(rx) => {
            if rx.changed().await.is_err() {
                *jumps = None;
            }
        }
        None => std::future::pending().await,
    }
}

/// The next tick of an interval that may not exist (then never).
async fn tick_opt(i: &mut Option<tokio::time::Interval>) {
    match i {
        Some(i) => {
            i.tick().await;
        }
        None => std::future::pending().await,
    }
}

async fn sleep_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

//! Proof of life of the engine loop: when it last turned, how many claim cycles it finished, and
//! how many turns began with no claim due (quiet) and with no run in flight either (idle). An
//! idle loop sleeps until something happens (no periodic turn), so a checker asks it to turn
//! ([`Heartbeat::check`], [`Heartbeat::poke`]) rather than reading how long ago it last did. A
//! test that must show that something does *not* happen pokes the loop and waits for two
//! quiet or idle turns after its action: the second one began after the action, so whatever
//! the engine would (wrongly) do about it has been done (quiet) and recorded (idle) by then.
//!
//! Owns: the counters the loop bumps and anyone may read (the health endpoint, the systemd
//! watchdog, tests that wait for the engine's own progress instead of sleeping), and the poke
//! that asks the loop to turn. Must not touch: the store, the loop's decisions.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration as StdDuration;

/// Proof of life of the engine loop, for health checks and the systemd watchdog: the loop
/// beats on every turn and counts finished claim cycles.
#[derive(Debug)]
pub struct Heartbeat {
    base: std::time::Instant,
    /// Milliseconds after `base` of the last loop turn.
    last_ms: AtomicU64,
    claim_cycles: AtomicU64,
    /// A checker's request that the loop turn.
    poke: tokio::sync::Notify,
    /// Woken on every turn.
    turned: tokio::sync::Notify,
    quiet_turns: AtomicU64,
    idle_turns: AtomicU64,
}

impl Default for Heartbeat {
    fn default() -> Self {
        Heartbeat {
            base: std::time::Instant::now(),
            last_ms: AtomicU64::new(0),
            claim_cycles: AtomicU64::new(0),
            poke: tokio::sync::Notify::new(),
            turned: tokio::sync::Notify::new(),
            quiet_turns: AtomicU64::new(0),
            idle_turns: AtomicU64::new(0),
        }
    }
}

impl Heartbeat {
    /// The loop turned.
    pub(super) fn beat(&self) {
        let ms = self.base.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::SeqCst);
        self.turned.notify_waiters();
    }
    /// A checker asked the loop to turn (the loop selects on it).
    pub(super) async fn poked(&self) {
        self.poke.notified().await;
    }
    /// Ask the loop to turn once (it does nothing else for it): an idle loop turns only when
    /// something happens, so a waiter for its turns asks for them.
    pub fn poke(&self) {
        self.poke.notify_one();
    }
    /// Ask the loop to turn once when it last turned longer ago than `gap` (a reader of the
    /// counters that must see them move, at most one turn per `gap` however often it asks).
    pub fn poke_if_quiet(&self, gap: StdDuration) {
        if self.since_last_turn() > gap {
            self.poke.notify_one();
        }
    }
    /// How long ago the engine loop last turned (an idle loop turns only when something happens
    /// or it is asked to: see [`Heartbeat::check`]).
    pub(crate) fn since_last_turn(&self) -> StdDuration {
        let now = self.base.elapsed().as_millis() as u64;
        StdDuration::from_millis(now.saturating_sub(self.last_ms.load(Ordering::SeqCst)))
    }
    /// Whether the loop turns: when it last turned longer ago than half of `within`, ask it to
    /// turn and wait up to `within`. Returns how long ago it last turned (about zero when it
    /// answered, whatever it was doing before).
    pub async fn check(&self, within: StdDuration) -> StdDuration {
        let since = self.since_last_turn();
        if since <= within / 2 {
            return since;
        }
        let turned = self.turned.notified();
        tokio::pin!(turned);
        turned.as_mut().enable();
        self.poke.notify_one();
        let _ = tokio::time::timeout(within, turned).await;
        self.since_last_turn()
    }
    /// A claim cycle ended (whatever it found).
    pub(super) fn count_claim_cycle(&self) {
        self.claim_cycles.fetch_add(1, Ordering::SeqCst);
    }
    /// Claim cycles completed (successful or not) since the engine started.
    pub fn claim_cycles(&self) -> u64 {
        self.claim_cycles.load(Ordering::SeqCst)
    }
    /// A loop turn began with no claim due; `runs` of this owner were in flight.
    pub(super) fn count_quiet_turn(&self, runs: usize) {
        self.quiet_turns.fetch_add(1, Ordering::SeqCst);
        if runs == 0 {
            self.idle_turns.fetch_add(1, Ordering::SeqCst);
        }
    }
    /// Loop turns that began with no claim due, since the engine started.
    pub fn quiet_turns(&self) -> u64 {
        self.quiet_turns.load(Ordering::SeqCst)
    }
    /// Loop turns that began with no claim due and no run in flight, since the engine started.
    pub fn idle_turns(&self) -> u64 {
        self.idle_turns.load(Ordering::SeqCst)
    }
}

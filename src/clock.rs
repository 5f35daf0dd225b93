//! Injected time. Wall time for schedules comes from a [`Clock`]; timers use tokio's clock, so
//! tests run with paused tokio time and a manual or tokio-driven clock, never real sleeps.
//!
//! A clock has two readings: wall time ([`Clock::now`]), which an operator or NTP may step, and
//! monotonic time ([`Clock::monotonic`]), which only moves forward at the rate time passes.
//! Anything that measures how long something took, or how old something is, reads the
//! monotonic one (a wall-clock step must not make a cache fresh for days); comparing the two
//! over an interval is how a step is seen. Test clocks can step their wall time alone.
//!
//! Owns: the `Clock` trait and its three implementations. Must not touch: anything else.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use chrono::{DateTime, Utc};

/// Source of wall-clock time (UTC).
pub trait Clock: Send + Sync + 'static {
    /// The current wall-clock time.
    fn now(&self) -> DateTime<Utc>;
    /// Time elapsed since a fixed origin of this clock's choosing: never steps, never goes
    /// back. Only differences of two readings of the same clock mean anything.
    fn monotonic(&self) -> Duration;
}

/// The real clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
    fn monotonic(&self) -> Duration {
        static ORIGIN: OnceLock<std::time::Instant> = OnceLock::new();
        ORIGIN.get_or_init(std::time::Instant::now).elapsed()
    }
}

/// A clock that only moves when told to (unit tests of pure logic).
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<Mutex<Manual>>);

#[derive(Debug)]
struct Manual {
    wall: DateTime<Utc>,
    mono: Duration,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        ManualClock(Arc::new(Mutex::new(Manual {
            wall: start,
            mono: Duration::ZERO,
        })))
    }
    fn lock(&self) -> std::sync::MutexGuard<'_, Manual> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// Time passes until `t`: a later `t` moves both readings; an earlier one is a step back
    /// of the wall clock (monotonic time does not go back).
    pub fn set(&self, t: DateTime<Utc>) {
        let mut g = self.lock();
        let passed = (t - g.wall).to_std().unwrap_or(Duration::ZERO);
        g.mono += passed;
        g.wall = t;
    }
    /// Time passes: both readings move forward by `d`.
    pub fn advance(&self, d: chrono::Duration) {
        let mut g = self.lock();
        g.wall += d;
        g.mono += d.to_std().unwrap_or(Duration::ZERO);
    }
    /// The wall clock is stepped by `d` (either way) while no time passes.
    pub fn step(&self, d: chrono::Duration) {
        self.lock().wall += d;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        self.lock().wall
    }
    fn monotonic(&self) -> Duration {
        self.lock().mono
    }
}

/// Wall time derived from tokio's clock: `start + (tokio::Instant::now() - base)` plus the
/// steps made so far. Under `#[tokio::test(start_paused = true)]` wall time advances exactly as
/// tokio time does, so the engine's timers and its idea of "now" agree in tests.
#[derive(Debug, Clone)]
pub struct TokioClock {
    start: DateTime<Utc>,
    base: tokio::time::Instant,
    /// Wall-clock steps made by [`TokioClock::step`] (shared by clones).
    stepped: Arc<Mutex<chrono::Duration>>,
}

impl TokioClock {
    /// Wall time `start` now, moving as tokio's clock moves.
    pub fn new(start: DateTime<Utc>) -> Self {
        TokioClock {
            start,
            base: tokio::time::Instant::now(),
            stepped: Arc::new(Mutex::new(chrono::Duration::zero())),
        }
    }
    /// Step the wall clock by `d` (either way); monotonic time does not move.
    pub fn step(&self, d: chrono::Duration) {
        *self.stepped.lock().unwrap_or_else(|e| e.into_inner()) += d;
    }
}

impl Clock for TokioClock {
    fn now(&self) -> DateTime<Utc> {
        let stepped = *self.stepped.lock().unwrap_or_else(|e| e.into_inner());
        self.start
            + chrono::Duration::from_std(self.monotonic()).unwrap_or(chrono::Duration::zero())
            + stepped
    }
    fn monotonic(&self) -> Duration {
        tokio::time::Instant::now().saturating_duration_since(self.base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_follows_paused_time() {
        let start = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .to_utc();
        let c = TokioClock::new(start);
        tokio::time::sleep(std::time::Duration::from_secs(90)).await;
        assert_eq!(c.now(), start + chrono::Duration::seconds(90));
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let start = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .to_utc();
        let c = ManualClock::new(start);
        assert_eq!(c.now(), start);
        c.advance(chrono::Duration::seconds(5));
        assert_eq!(c.now(), start + chrono::Duration::seconds(5));
        assert_eq!(c.monotonic(), Duration::from_secs(5));
        // A step moves the wall clock alone; setting it back is a step too.
        c.step(chrono::Duration::days(2));
        assert_eq!(c.monotonic(), Duration::from_secs(5));
        c.set(start);
        assert_eq!(c.now(), start);
        assert_eq!(c.monotonic(), Duration::from_secs(5));
        c.set(start + chrono::Duration::seconds(9));
        assert_eq!(c.monotonic(), Duration::from_secs(14));
    }

    #[tokio::test(start_paused = true)]
    async fn a_tokio_clock_steps_its_wall_time_alone() {
        let start = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .to_utc();
        let c = TokioClock::new(start);
        c.clone().step(chrono::Duration::hours(-1));
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(c.monotonic(), Duration::from_secs(3));
        assert_eq!(
            c.now(),
            start - chrono::Duration::hours(1) + chrono::Duration::seconds(3)
        );
    }
}

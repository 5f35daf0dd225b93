//! Injected time. Wall time for schedules comes from a [`Clock`]; timers use tokio's clock, so
//! tests run with paused tokio time and a manual or tokio-driven clock, never real sleeps.
//!
//! Owns: the `Clock` trait and its three implementations. Must not touch: anything else.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};

/// Source of wall-clock time (UTC).
pub trait Clock: Send + Sync + 'static {
    /// The current wall-clock time.
    fn now(&self) -> DateTime<Utc>;
}

/// The real clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that only moves when told to (unit tests of pure logic).
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<Mutex<DateTime<Utc>>>);

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        ManualClock(Arc::new(Mutex::new(start)))
    }
    /// Jump to `t` (backwards too).
    pub fn set(&self, t: DateTime<Utc>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = t;
    }
    /// Move forward by `d`.
    pub fn advance(&self, d: chrono::Duration) {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *g += d;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Wall time derived from tokio's clock: `start + (tokio::Instant::now() - base)`. Under
/// `#[tokio::test(start_paused = true)]` wall time advances exactly as tokio time does, so the
/// engine's timers and its idea of "now" agree in tests.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    start: DateTime<Utc>,
    base: tokio::time::Instant,
}

impl TokioClock {
    /// Wall time `start` now, moving as tokio's clock moves.
    pub fn new(start: DateTime<Utc>) -> Self {
        TokioClock {
            start,
            base: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> DateTime<Utc> {
        let el = tokio::time::Instant::now().saturating_duration_since(self.base);
        self.start + chrono::Duration::from_std(el).unwrap_or(chrono::Duration::zero())
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
    }
}

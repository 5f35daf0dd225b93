//! Injected time. Wall time for schedules comes from a [`Clock`]; timers use tokio's clock, so
//! tests run with paused tokio time and a manual or tokio-driven clock, never real sleeps.
//!
//! A waiter that turns a wall-clock instant into a timer (the engine's next slot) must redo it
//! when the wall clock jumps; [`Clock::jumps`] says how it learns of a jump, so an idle waiter
//! need not wake periodically to look.
//!
//! Owns: the `Clock` trait, its three implementations, and the one thread per process that
//! waits for the system clock's jumps. Must not touch: anything else.

use std::sync::{Arc, Mutex, OnceLock};

use chrono::{DateTime, Utc};
use tokio::sync::watch;

/// Source of wall-clock time (UTC).
pub trait Clock: Send + Sync + 'static {
    /// The current wall-clock time.
    fn now(&self) -> DateTime<Utc>;
    /// How a waiter learns that this clock jumped (see [`Jumps`]).
    fn jumps(&self) -> Jumps {
        Jumps::Unknown
    }
}

/// How a clock's jumps are known.
#[derive(Debug)]
pub enum Jumps {
    /// It never jumps relative to tokio's timers (it is derived from them).
    Never,
    /// The value changes at every jump.
    Told(watch::Receiver<u64>),
    /// Not known: a waiter looks again now and then.
    Unknown,
}

/// The real clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
    fn jumps(&self) -> Jumps {
        system_jumps().map_or(Jumps::Unknown, |tx| Jumps::Told(tx.subscribe()))
    }
}

/// The system clock's jumps, from one thread blocked on a timer the kernel cancels when the
/// clock is set or the machine resumes (it wakes for nothing else). `None` when that timer
/// cannot be made (logged once).
fn system_jumps() -> Option<&'static watch::Sender<u64>> {
    static JUMPS: OnceLock<Option<watch::Sender<u64>>> = OnceLock::new();
    JUMPS
        .get_or_init(|| {
            let started = crate::proc::sys::clock_set_timer().and_then(|fd| {
                let (tx, _) = watch::channel(0u64);
                let told = tx.clone();
                std::thread::Builder::new()
                    .name("clock-jumps".into())
                    .spawn(move || {
                        use std::os::fd::AsFd;
                        loop {
                            match crate::proc::sys::wait_clock_set(fd.as_fd()) {
                                Ok(true) => told.send_modify(|n| *n += 1),
                                Ok(false) => {}
                                Err(e) => {
                                    tracing::warn!("clock jump timer failed: {e}");
                                    return;
                                }
                            }
                        }
                    })?;
                Ok(tx)
            });
            started
                .map_err(|e| tracing::warn!("no clock jump timer ({e}): looking every second"))
                .ok()
        })
        .as_ref()
}

/// A clock that only moves when told to (unit tests of pure logic, and of the engine: each move
/// is a jump its waiters are told of).
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<(Mutex<DateTime<Utc>>, watch::Sender<u64>)>);

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        ManualClock(Arc::new((Mutex::new(start), watch::channel(0).0)))
    }
    /// Jump to `t` (backwards too).
    pub fn set(&self, t: DateTime<Utc>) {
        *self.0.0.lock().unwrap_or_else(|e| e.into_inner()) = t;
        self.0.1.send_modify(|n| *n += 1);
    }
    /// Move forward by `d`.
    pub fn advance(&self, d: chrono::Duration) {
        {
            let mut g = self.0.0.lock().unwrap_or_else(|e| e.into_inner());
            *g += d;
        }
        self.0.1.send_modify(|n| *n += 1);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.0.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn jumps(&self) -> Jumps {
        Jumps::Told(self.0.1.subscribe())
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
    fn jumps(&self) -> Jumps {
        Jumps::Never
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
    fn a_manual_clock_tells_its_waiters_of_every_move() {
        let c = ManualClock::new(rfc("2026-01-01T00:00:00Z"));
        let Jumps::Told(mut rx) = c.jumps() else {
            panic!("a manual clock tells of its jumps");
        };
        assert!(!rx.has_changed().unwrap());
        c.advance(chrono::Duration::seconds(5));
        assert!(rx.has_changed().unwrap());
        rx.borrow_and_update();
        c.set(rfc("2025-01-01T00:00:00Z"));
        assert!(rx.has_changed().unwrap());
    }

    /// Stepping the real clock needs privileges a test does not have: this checks that the
    /// kernel timer exists here, so an idle engine is told of jumps rather than looking.
    #[test]
    fn the_system_clock_is_told_of_jumps_on_linux() {
        assert!(matches!(SystemClock.jumps(), Jumps::Told(_)));
    }

    fn rfc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
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

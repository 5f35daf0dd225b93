//! Injected time. Wall time for schedules comes from a [`Clock`]; timers use tokio's clock, so
//! tests run with paused tokio time and a manual or tokio-driven clock, never real sleeps.
//!
//! A clock has two readings: wall time ([`Clock::now`]), which an operator or NTP may step, and
//! monotonic time ([`Clock::monotonic`]), which only moves forward at the rate time passes.
//! Anything that measures how long something took, or how old something is, reads the
//! monotonic one (a wall-clock step must not make a cache fresh for days); comparing the two
//! over an interval is how a step is seen. Test clocks can step their wall time alone.
//!
//! A waiter that turns a wall-clock instant into a timer (the engine's next slot) must redo it
//! when the wall clock jumps; [`Clock::jumps`] says how it learns of a jump, so an idle waiter
//! need not wake periodically to look.
//!
//! Owns: the `Clock` trait, its three implementations, and the one thread per process that
//! waits for the system clock's jumps. Must not touch: anything else.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::watch;

/// Source of wall-clock time (UTC).
pub trait Clock: Send + Sync + 'static {
    /// The current wall-clock time.
    fn now(&self) -> DateTime<Utc>;
    /// Time elapsed since a fixed origin of this clock's choosing: never steps, never goes
    /// back. Only differences of two readings of the same clock mean anything.
    fn monotonic(&self) -> Duration;
    /// How a waiter learns that this clock's wall time jumped (see [`Jumps`]).
    fn jumps(&self) -> Jumps {
        Jumps::Unknown
    }
}

/// How a clock's wall-time jumps are known.
#[derive(Debug)]
pub enum Jumps {
    /// The value changes at every jump.
    Told(watch::Receiver<u64>),
    /// Not known: a waiter looks again now and then.
    Unknown,
}

/// A counter of jumps its clock's waiters subscribe to.
fn jump_counter() -> Arc<watch::Sender<u64>> {
    Arc::new(watch::channel(0).0)
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

/// A clock that only moves when told to (unit tests of pure logic).
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<Mutex<Manual>>, Arc<watch::Sender<u64>>);

#[derive(Debug)]
struct Manual {
    wall: DateTime<Utc>,
    mono: Duration,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        ManualClock(
            Arc::new(Mutex::new(Manual {
                wall: start,
                mono: Duration::ZERO,
            })),
            jump_counter(),
        )
    }
    fn lock(&self) -> std::sync::MutexGuard<'_, Manual> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// Time passes until `t`: a later `t` moves both readings; an earlier one is a step back
    /// of the wall clock (monotonic time does not go back).
    pub fn set(&self, t: DateTime<Utc>) {
        {
            let mut g = self.lock();
            let passed = (t - g.wall).to_std().unwrap_or(Duration::ZERO);
            g.mono += passed;
            g.wall = t;
        }
        self.jumped();
    }
    /// Time passes: both readings move forward by `d`.
    pub fn advance(&self, d: chrono::Duration) {
        {
            let mut g = self.lock();
            g.wall += d;
            g.mono += d.to_std().unwrap_or(Duration::ZERO);
        }
        self.jumped();
    }
    /// The wall clock is stepped by `d` (either way) while no time passes.
    pub fn step(&self, d: chrono::Duration) {
        self.lock().wall += d;
        self.jumped();
    }
    /// Every move of a manual clock is a jump for a waiter: tokio's timers do not follow it.
    fn jumped(&self) {
        self.1.send_modify(|n| *n += 1);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        self.lock().wall
    }
    fn monotonic(&self) -> Duration {
        self.lock().mono
    }
    fn jumps(&self) -> Jumps {
        Jumps::Told(self.1.subscribe())
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
    /// Told at each step (its passing time never jumps).
    steps: Arc<watch::Sender<u64>>,
}

impl TokioClock {
    /// Wall time `start` now, moving as tokio's clock moves.
    pub fn new(start: DateTime<Utc>) -> Self {
        TokioClock {
            start,
            base: tokio::time::Instant::now(),
            stepped: Arc::new(Mutex::new(chrono::Duration::zero())),
            steps: jump_counter(),
        }
    }
    /// Step the wall clock by `d` (either way); monotonic time does not move.
    pub fn step(&self, d: chrono::Duration) {
        *self.stepped.lock().unwrap_or_else(|e| e.into_inner()) += d;
        self.steps.send_modify(|n| *n += 1);
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
    fn jumps(&self) -> Jumps {
        Jumps::Told(self.steps.subscribe())
    }
}

/// A difference between wall and monotonic time larger than this over one interval is a step
/// of the wall clock (an operator's `date -s`, NTP stepping a clock that was far off, a host
/// resumed from suspend); smaller ones are drift that NTP slews away.
pub(crate) const STEP_THRESHOLD: Duration = Duration::from_secs(5);

/// Both readings of a clock at one moment: comparing two of them shows a step in between.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    /// Wall time.
    pub wall: DateTime<Utc>,
    /// Monotonic time.
    pub(crate) mono: Duration,
}

impl Reading {
    /// Read `clock` now.
    pub fn of(clock: &dyn Clock) -> Reading {
        Reading {
            mono: clock.monotonic(),
            wall: clock.now(),
        }
    }

    /// How far the wall clock was stepped between `earlier` and this reading (wall time moved
    /// minus time passed), when that is more than [`STEP_THRESHOLD`] either way.
    pub(crate) fn step_since(&self, earlier: &Reading) -> Option<chrono::Duration> {
        let passed = chrono::Duration::from_std(self.mono.saturating_sub(earlier.mono)).ok()?;
        let step = (self.wall - earlier.wall) - passed;
        let bound = chrono::Duration::from_std(STEP_THRESHOLD).ok()?;
        (step.abs() > bound).then_some(step)
    }

    /// Time passed since `earlier` (monotonic: a step in between does not count).
    pub(crate) fn passed_since(&self, earlier: &Reading) -> Duration {
        self.mono.saturating_sub(earlier.mono)
    }
}

/// A step in a few characters, signed, in its two largest units: `+2d`, `-1h`, `+2d3h`, `-45s`.
pub fn step_words(step: chrono::Duration) -> String {
    let sign = if step < chrono::Duration::zero() {
        '-'
    } else {
        '+'
    };
    let s = step.num_seconds().unsigned_abs();
    // Rounded (a step is measured to about a second): `+2d`, not `+1d23h`; `-1h`, not
    // `-59m59s`. Days to the hour, from ten minutes to the minute, below that to the second.
    let second_unit = match s {
        84_600.. => 3600,
        600.. => 60,
        _ => 1,
    };
    let s = (s + second_unit / 2) / second_unit * second_unit;
    let (d, h, m, sec) = (s / 86_400, s % 86_400 / 3600, s % 3600 / 60, s % 60);
    let parts = [(d, "d"), (h, "h"), (m, "m"), (sec, "s")];
    let first = parts.iter().position(|(n, _)| *n > 0).unwrap_or(3);
    let mut out = format!("{sign}{}{}", parts[first].0, parts[first].1);
    if let Some((n, u)) = parts.get(first + 1).filter(|(n, _)| *n > 0) {
        out.push_str(&format!("{n}{u}"));
    }
    out
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
        rx.borrow_and_update();
        c.step(chrono::Duration::hours(1));
        assert!(rx.has_changed().unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn a_tokio_clock_tells_of_its_steps_only() {
        let c = TokioClock::new(rfc("2026-01-01T00:00:00Z"));
        let Jumps::Told(mut rx) = c.jumps() else {
            panic!("a tokio clock tells of its steps");
        };
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(!rx.has_changed().unwrap());
        c.clone().step(chrono::Duration::hours(-1));
        assert!(rx.has_changed().unwrap());
        rx.borrow_and_update();
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

    #[test]
    fn a_step_is_wall_time_moved_minus_time_passed_past_five_seconds() {
        let start = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .to_utc();
        let c = ManualClock::new(start);
        let r0 = Reading::of(&c);
        c.advance(chrono::Duration::hours(3));
        assert_eq!(
            Reading::of(&c).step_since(&r0),
            None,
            "time passing is no step"
        );
        c.step(chrono::Duration::seconds(5));
        assert_eq!(Reading::of(&c).step_since(&r0), None, "5 s is drift");
        c.step(chrono::Duration::days(2));
        let r1 = Reading::of(&c);
        let step = r1.step_since(&r0).unwrap();
        assert_eq!(
            step,
            chrono::Duration::days(2) + chrono::Duration::seconds(5)
        );
        assert_eq!(r1.passed_since(&r0), Duration::from_secs(3 * 3600));
        assert_eq!(step_words(step), "+2d");
        c.step(chrono::Duration::hours(-49));
        assert_eq!(
            step_words(Reading::of(&c).step_since(&r1).unwrap()),
            "-2d1h"
        );
        assert_eq!(step_words(chrono::Duration::seconds(-45)), "-45s");
        assert_eq!(step_words(chrono::Duration::seconds(3600 + 120)), "+1h2m");
        assert_eq!(step_words(chrono::Duration::zero()), "+0s");
        assert_eq!(step_words(chrono::Duration::seconds(172_799)), "+2d");
        assert_eq!(step_words(chrono::Duration::seconds(-3601)), "-1h");
        assert_eq!(step_words(chrono::Duration::seconds(-3599)), "-1h");
        assert_eq!(step_words(chrono::Duration::seconds(599)), "+9m59s");
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

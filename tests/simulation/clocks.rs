//! Clock faults of the simulated world, drawn from a generator of their own (seeds without
//! clock faults play as before):
//!
//! - **The host's clock** (what the file store's clock is: every owner and every operator
//!   command reads it) steps forward or back for a while and is then set right: by more than
//!   any lease, by an hour (within the store's three hours, a slot that ran waits), by four
//!   hours and by two days (beyond them, the store re-derives slots from the clock now).
//! - **Each owner's own clock** has a fixed offset from the host's and a drift, both within
//!   the owner's clock bound, and steps of its own (a faked or hand-set process clock) far
//!   beyond any lease, forward and back.
//!
//! Owners behave as the engine does: an owner measures its offset against the store's clock at
//! each heartbeat (every 5 s, and before the claim that follows a step it saw between two
//! cycles) and claims nothing while the offset is beyond its bound (a quarter of the shortest
//! lease); its runs in flight renew from the later of its clock and the store's as the last
//! heartbeat read it, carried forward on the monotonic clock, and complete on its own clock.
//! Run lengths, renewal pacing and pauses are monotonic time (`World::real`), never a clock.
//! Operator commands run while the host's clock is true (the model's quiet windows are spans
//! of the clock's readings; a command on a clock stepped two days ahead would date its window
//! there).

use chrono::{DateTime, Duration, Utc};
use cronsole::testkit::simio::Rng;

/// How often an owner measures its offset (the engine's heartbeat).
pub const BEAT: Duration = Duration::seconds(5);

/// A wall-clock step is a difference of more than this between wall and monotonic time over
/// one claim cycle (the engine's rule).
pub const STEP: Duration = Duration::seconds(5);

/// One owner's clock against the host's.
#[derive(Debug, Clone, Default)]
pub struct OwnerClock {
    /// A fixed offset, within the bound.
    pub fixed_ms: i64,
    /// Drift in milliseconds per second of monotonic time (may carry it past the bound).
    pub drift: f64,
    /// A step of this process's clock alone (0 when none).
    pub step_ms: i64,
    /// The last heartbeat: the store's clock then, and the monotonic instant of it.
    pub beat: Option<(DateTime<Utc>, DateTime<Utc>)>,
    /// The offset the last heartbeat measured.
    pub measured_ms: i64,
    /// This owner's last reading of its own clock, with the monotonic instant of it.
    pub seen: Option<(DateTime<Utc>, DateTime<Utc>)>,
}

impl OwnerClock {
    /// A new owner's clock: a fixed offset and a drift for some owners.
    pub fn draw(r: &mut Rng, bound_ms: i64) -> OwnerClock {
        let mut c = OwnerClock::default();
        if r.chance(0.5) {
            let span = (bound_ms * 9 / 10).max(1) as u64;
            c.fixed_ms = r.range(0, 2 * span) as i64 - span as i64;
        }
        if r.chance(0.3) {
            // Up to 10 ms/s: across a few minutes of simulated time, past a short lease's bound.
            c.drift = (r.unit() - 0.5) * 20.0;
        }
        c
    }

    /// This owner's wall clock, given the host's and monotonic time since the start.
    pub fn wall(&self, host: DateTime<Utc>, since_start: Duration) -> DateTime<Utc> {
        let drift = (since_start.num_milliseconds() as f64 / 1000.0 * self.drift) as i64;
        host + Duration::milliseconds(self.fixed_ms + drift + self.step_ms)
    }

    /// The store's clock as this owner can tell it without asking (its last heartbeat's
    /// reading carried forward on monotonic time).
    pub fn store_now(&self, real: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.beat.map(|(store, at)| store + (real - at))
    }

    /// Whether the last measured offset lets this owner claim.
    pub fn within(&self, bound_ms: i64) -> bool {
        self.measured_ms.abs() <= bound_ms
    }
}

/// A step of a clock, drawn: forward or back, larger than any lease, up to two days.
pub fn draw_step(r: &mut Rng) -> i64 {
    const HOUR: i64 = 3_600_000;
    match r.below(8) {
        0 | 1 => r.range(30_000, 600_000) as i64,
        2 | 3 => -(r.range(30_000, 600_000) as i64),
        4 => HOUR,
        5 => -HOUR,
        6 => -4 * HOUR,
        _ => 48 * HOUR,
    }
}

/// A step in words for the step log.
pub fn words(ms: i64) -> String {
    let sign = if ms < 0 { "-" } else { "+" };
    let s = ms.unsigned_abs() / 1000;
    if s >= 3600 && s.is_multiple_of(3600) {
        format!("{sign}{}h", s / 3600)
    } else {
        format!("{sign}{s}s")
    }
}

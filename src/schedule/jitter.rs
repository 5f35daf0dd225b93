//! Jitter: the deterministic delay between a slot and the instant it fires, so many
//! jobs on one slot do not all hit a model or a server in the same second.
//!
//! Owns: `offset(job, slot, jitter)` and `fire_at`. The offset is a hash of the job's name and
//! the slot instant (FNV-1a, 64 bit), reduced into `[0, jitter)` milliseconds: no RNG state, so
//! every owner, host and restart computes the same fire instant for the same slot. The slot
//! itself never moves (claims, `last_slot`, history rows keep the slot); only the instant the
//! store acts on it does. Must not touch: the store, clocks, I/O.

use chrono::{DateTime, Duration, Utc};

/// FNV-1a over the job name, a separator, and the slot in milliseconds since the epoch.
fn hash(job: &str, slot: DateTime<Utc>) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    let bytes = job
        .as_bytes()
        .iter()
        .copied()
        .chain([0u8])
        .chain(slot.timestamp_millis().to_le_bytes());
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(PRIME);
    }
    // Final avalanche (splitmix64's finaliser) so neighbouring slots spread over the window.
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The delay of `slot` for `job` under `jitter_seconds`: in `[0, jitter)`, whole milliseconds;
/// zero when jitter is zero, negative or not finite.
pub fn offset(job: &str, slot: DateTime<Utc>, jitter_seconds: f64) -> Duration {
    if !jitter_seconds.is_finite() || jitter_seconds <= 0.0 {
        return Duration::zero();
    }
    let window_ms = (jitter_seconds * 1000.0) as u64;
    if window_ms == 0 {
        return Duration::zero();
    }
    Duration::milliseconds((hash(job, slot) % window_ms) as i64)
}

/// The instant `slot` of `job` fires: `slot + offset` (the slot itself past the end of time).
pub fn fire_at(job: &str, slot: DateTime<Utc>, jitter_seconds: f64) -> DateTime<Utc> {
    slot.checked_add_signed(offset(job, slot, jitter_seconds))
        .unwrap_or(slot)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testkit::time::base as t;

    #[test]
    fn zero_or_bad_jitter_fires_on_the_slot() {
        for j in [0.0, -5.0, f64::NAN, f64::INFINITY, 0.0001] {
            assert_eq!(fire_at("a", t(0), j), t(0), "jitter {j}");
        }
    }

    #[test]
    fn offset_is_in_window_and_stable() {
        for s in 0..2000 {
            let o = offset("report", t(s * 3600), 300.0);
            assert!(o >= Duration::zero() && o < Duration::seconds(300), "{o}");
            assert_eq!(
                o,
                offset("report", t(s * 3600), 300.0),
                "same input, same offset"
            );
        }
    }

    #[test]
    fn offsets_spread_over_jobs_and_slots() {
        // A hundred `0 * * * *` jobs must not all fire in the same second.
        let mut seconds: std::collections::BTreeSet<i64> = Default::default();
        for i in 0..100 {
            seconds.insert(offset(&format!("job-{i}"), t(0), 600.0).num_seconds());
        }
        assert!(
            seconds.len() > 80,
            "only {} distinct seconds",
            seconds.len()
        );
        // And one job's slots are not all delayed alike.
        let per_slot: std::collections::BTreeSet<i64> = (0..50)
            .map(|s| offset("one", t(s * 3600), 600.0).num_seconds())
            .collect();
        assert!(
            per_slot.len() > 40,
            "only {} distinct offsets",
            per_slot.len()
        );
    }
}

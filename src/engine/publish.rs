//! Snapshots for front ends: built only when a front end draws them
//! (`EngineConfig::publish_snapshots`), off the actor's task, at a bounded duty.
//!
//! Headless mode turns them off because a snapshot reads every job and the last 24 h of
//! history, which dominated the headless engine's memory. A snapshot is built on a blocking
//! thread, never on the actor's task: claims go on while a million-job store is read. One build
//! runs at a time; the next starts no sooner than `snapshot_min_interval`, nor than
//! [`PUBLISH_DUTY`] times the last build's duration after it, so re-reading a large store takes a
//! bounded share of a core however fast the store changes. The first snapshot
//! ([`super::spawn`]) holds only the first page of jobs ([`Snapshot::load_first`]) so the console
//! draws at once; the whole one follows from the first build.
//!
//! Owns: the [`Publisher`] (build pacing, the bare snapshot of a headless engine). Must not
//! touch: what a snapshot holds (`crate::snapshot` owns that).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration as StdDuration;

use chrono::{DateTime, Utc};
use tokio::sync::watch;

use crate::clock::Clock;
use crate::snapshot::Snapshot;
use crate::store::Store;

/// A snapshot build starts no sooner than this many times the last build's duration after
/// the last start: building takes at most about a third of one core, whatever the store's size.
pub(crate) const PUBLISH_DUTY: u32 = 3;

/// The final snapshot at shutdown is built only when the last build took at most this long.
const FINAL_BUILD_MAX: StdDuration = StdDuration::from_secs(1);

/// How often the actor looks whether a running snapshot build has ended (when a newer one is due).
pub(super) const BUILD_POLL: StdDuration = StdDuration::from_millis(25);

/// The state of the snapshot builds, shared with the blocking thread that runs one.
#[derive(Debug, Default)]
pub(super) struct SnapBuild {
    /// A build is running.
    busy: AtomicBool,
    /// How long the last build took (ms).
    took_ms: AtomicU64,
}

/// Marks the running build ended when dropped.
struct BuildDone(Arc<SnapBuild>);

impl Drop for BuildDone {
    fn drop(&mut self) {
        self.0.busy.store(false, Ordering::SeqCst);
    }
}

impl SnapBuild {
    pub(super) fn running(&self) -> bool {
        self.busy.load(Ordering::SeqCst)
    }

    /// The least time between the starts of two builds: `min`, or [`PUBLISH_DUTY`] times the
    /// last build's duration when that is longer.
    pub(super) fn gap(&self, min: StdDuration) -> StdDuration {
        let took = StdDuration::from_millis(self.took_ms.load(Ordering::SeqCst));
        min.max(took.saturating_mul(PUBLISH_DUTY))
    }
}

/// The snapshot of an engine that does not publish any (headless): identity only.
pub(super) fn bare_snapshot(store: &dyn Store, now: DateTime<Utc>, owner: &str) -> Snapshot {
    Snapshot {
        taken_at: now,
        store: store.location(),
        owner: owner.to_string(),
        started_at: now,
        engine_running: true,
        jobs: Vec::new(),
        loading: false,
        owners_seen: vec![owner.to_string()],
        engine_seen: true,
        settings: Default::default(),
        period_spend_usd: 0.0,
        period_held_usd: 0.0,
        spend_incomplete: false,
        recent: Vec::new(),
        counts_24h: Default::default(),
        spend_per_hour: vec![0.0; 24],
        pending: Default::default(),
        in_flight: Default::default(),
        forecast: None,
        too_small: Vec::new(),
    }
}

/// Builds and publishes the engine's snapshots.
pub(super) struct Publisher {
    /// Build snapshots at all (`EngineConfig::publish_snapshots`).
    pub(super) enabled: bool,
    pub(super) store: Arc<dyn Store>,
    pub(super) owner: String,
    /// When the engine started (shown in the console's header).
    pub(super) started: DateTime<Utc>,
    pub(super) tx: watch::Sender<Arc<Snapshot>>,
    pub(super) build: Arc<SnapBuild>,
    /// `EngineConfig::snapshot_min_interval`.
    pub(super) min_interval: StdDuration,
}

impl Publisher {
    /// A build is running (the next one waits for it).
    pub(super) fn running(&self) -> bool {
        self.build.running()
    }

    /// The least time between the starts of two builds now.
    pub(super) fn gap(&self) -> StdDuration {
        self.build.gap(self.min_interval)
    }

    /// The snapshot after the last run ended, awaited (a library caller reads the final
    /// state). Skipped on a store whose builds take more than [`FINAL_BUILD_MAX`]: closing the
    /// console on a million jobs does not wait seconds for a picture nobody draws.
    pub(super) async fn publish_final(&self, clock: &dyn Clock, in_flight: BTreeSet<String>) {
        if !self.enabled {
            return;
        }
        while self.build.running() {
            tokio::time::sleep(BUILD_POLL).await;
        }
        if self.build.gap(StdDuration::ZERO) > FINAL_BUILD_MAX * PUBLISH_DUTY {
            return;
        }
        self.publish(clock.now(), in_flight);
        while self.build.running() {
            tokio::time::sleep(BUILD_POLL).await;
        }
    }

    /// Start building the snapshot of `now` on a blocking thread; it is published when done.
    /// The caller checks [`Publisher::running`] first (one build at a time).
    pub(super) fn publish(&self, now: DateTime<Utc>, in_flight: BTreeSet<String>) {
        if !self.enabled {
            return;
        }
        let owner = self.owner.clone();
        let started = self.started;
        let store = Arc::clone(&self.store);
        let tx = self.tx.clone();
        let build = Arc::clone(&self.build);
        build.busy.store(true, Ordering::SeqCst);
        tokio::task::spawn_blocking(move || {
            // However the build ends (even by a panic), the next one may start.
            let _done = BuildDone(Arc::clone(&build));
            let t0 = std::time::Instant::now();
            match Snapshot::load(store.as_ref(), now, &owner, started, true) {
                Ok(mut s) => {
                    s.in_flight = in_flight;
                    tx.send_replace(Arc::new(s));
                }
                Err(e) => tracing::warn!(error = %e, "snapshot refresh failed"),
            }
            let took = u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX);
            build.took_ms.store(took, Ordering::SeqCst);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A long snapshot build spaces the next one out ([`PUBLISH_DUTY`] × its
    /// duration), a short one leaves the configured minimum.
    #[test]
    fn a_slow_snapshot_build_spaces_out_the_next() {
        let b = SnapBuild::default();
        let min = StdDuration::from_millis(100);
        assert_eq!(b.gap(min), min);
        b.took_ms.store(10, Ordering::SeqCst);
        assert_eq!(b.gap(min), min);
        b.took_ms.store(2_000, Ordering::SeqCst);
        assert_eq!(b.gap(min), StdDuration::from_millis(6_000));
        assert!(!b.running());
        let b = Arc::new(b);
        b.busy.store(true, Ordering::SeqCst);
        drop(BuildDone(Arc::clone(&b)));
        assert!(
            !b.running(),
            "a build that ended (or panicked) frees the next"
        );
    }
}

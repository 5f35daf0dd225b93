//! The vocabulary front ends and the engine speak: the [`Command`]s a front end sends, the
//! [`Event`]s it receives, the engine's settings ([`EngineConfig`]) and an owner's id.
//!
//! Owns: these types. Must not touch: anything that runs (the actor, run tasks).

use std::time::Duration as StdDuration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::model::{HistoryRow, Trigger};

/// What front ends ask the engine to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Pause the named job (no new runs; a running one finishes).
    Pause(String),
    /// Resume the named job.
    Resume(String),
    /// Run the named job once now (`trigger: manual`), unless it is running.
    Trigger(String),
    /// Queue a retry of this run (any owner takes it).
    Retry(Uuid),
    /// Cancel the job's running run (its process tree is killed), else drop what it has queued.
    Cancel(String),
    /// Approve (or deny) the tool call `call` of run `run_id`, awaiting approval: refused,
    /// with nothing recorded, when the call that waits is another (a run's calls wait one
    /// after another, and the answer is meant for the call the operator was shown).
    Answer {
        /// The run awaiting approval.
        run_id: Uuid,
        /// The call's id.
        call: String,
        /// Approve (`true`) or deny.
        approve: bool,
    },
    /// Stop the engine gracefully (as [`super::EngineHandle::shutdown`]).
    Shutdown,
}

/// What happened, for front ends (history rows arrive as they are written). Rows are by far
/// the most frequent event; boxing them would add an allocation per row to save space on the
/// rare small variants.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)]
pub enum Event {
    /// A claimed run started in this process.
    RunStarted {
        /// The job's name.
        job: String,
        /// The run's id (as in its history row).
        run_id: Uuid,
        /// Why it runs (schedule, manual, retry, …).
        trigger: Trigger,
        /// The scheduled instant it stands for (`None` for a manual run).
        slot: Option<DateTime<Utc>>,
    },
    /// A history row was written (runs of this process; other owners' rows show in snapshots).
    Row(HistoryRow),
    /// A delivery made by a sink (headless mode prints each one).
    Delivered {
        /// The job that delivered.
        job: String,
        /// The sink's name.
        sink: String,
        /// What was delivered.
        text: String,
    },
    /// A human notice: "trigger refused: job is running", store errors, shutdown progress.
    Notice(String),
}

impl Event {
    /// The event of a history row this process wrote. It is not logged here: the front end
    /// writes each row once to each of its outputs (stdout, the log files), and a line here
    /// would be a second copy in the log or the journal.
    pub(crate) fn row(r: HistoryRow) -> Event {
        Event::Row(r)
    }
}

/// Engine settings that are not in the store.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// `host:pid:uuid8`, new on each start.
    pub owner: String,
    /// Free run capacity = `max_concurrent - in flight` is the claim limit.
    pub max_concurrent: usize,
    /// How long a graceful shutdown waits for in-flight runs before cancelling them (30 s).
    pub shutdown_grace: StdDuration,
    /// How often the store's change token is checked.
    pub change_poll: StdDuration,
    /// Minimum spacing of snapshot rebuilds while things change quickly.
    pub snapshot_min_interval: StdDuration,
    /// Build and publish [`Snapshot`](crate::snapshot::Snapshot)s. Headless mode draws nothing and turns this off: a
    /// snapshot clones every job and reads up to 100 000 rows of the last 24 h, which dominated
    /// the peak RSS of a headless engine (119 MB → see docs/BENCHMARKS.md "Engine").
    pub publish_snapshots: bool,
    /// Where completions the store could not take are kept when the engine stops (and replayed
    /// from at start). `None`: nowhere — they are reported as lost.
    pub spool: Option<std::path::PathBuf>,
    /// Listen to the store's change signal (`Store::change_signal`). Off, the engine notices
    /// other processes only through the `change_poll` (the behaviour before signals existed;
    /// `CRONSOLE_CHANGE_SIGNAL=off` for stores where the signal cannot work).
    pub change_signal: bool,
    /// At most one re-read of the store per this interval on change signals: every write by
    /// every owner fires one, and under load (40 runs/s over 4 owners: ~500 signals/s) reacting
    /// to each would add a store lock acquisition per signal per owner. Bursts coalesce.
    pub signal_min_interval: StdDuration,
    /// Past this distance between this owner's clock and the store's (measured at each
    /// heartbeat) it claims nothing new, and says so. `None` (the default here): no bound, for
    /// tests whose injected clock is nowhere near the store's; `cronsole` sets
    /// a quarter of the shortest lease, at most 60 s, unless told otherwise.
    pub max_clock_offset: Option<StdDuration>,
    /// With no bound (`max_clock_offset` `None`): an owner whose clock is ahead of the store's
    /// by more than this claims nothing new, and says so. It would read every other owner's
    /// live lease as expired and take its runs over. `cronsole run --max-clock-offset off` sets
    /// a quarter of the shortest lease (a lease is renewed with a third of it left); `None`: no
    /// check at all.
    pub ahead_limit: Option<StdDuration>,
    /// The heartbeat waits on the kernel's timer, and on a doorbell for a store that answers
    /// from threads of its own (PostgreSQL): an idle owner's beat then wakes the fewest threads
    /// (see `docs/BENCHMARKS.md`, "Idle"). Off (the default here): tokio's timer and blocking
    /// pool, which paused tokio time in tests governs; `cronsole run` turns it on.
    pub kernel_waits: bool,
}

impl EngineConfig {
    /// The defaults (8 concurrent runs, 30 s grace, 250 ms poll, signals on, no clock offset
    /// bound) for owner id `owner`.
    pub fn new(owner: String) -> Self {
        EngineConfig {
            owner,
            max_concurrent: 8,
            shutdown_grace: StdDuration::from_secs(30),
            change_poll: StdDuration::from_millis(250),
            snapshot_min_interval: StdDuration::from_millis(100),
            publish_snapshots: true,
            spool: None,
            change_signal: true,
            signal_min_interval: StdDuration::from_millis(20),
            max_clock_offset: None,
            ahead_limit: None,
            kernel_waits: false,
        }
    }
}

/// The default bound on this owner's clock offset from the store's, for jobs whose shortest
/// lease is `lease_seconds`: a quarter of it, so an owner that far behind still renews well
/// before another owner's clock sees the lease expire. There is no floor: a floor above a
/// quarter of a short lease (a 1 s lease allows 0.25 s) would let an owner claim with leases
/// that other owners already read as expired. At most the minute within which slots decided
/// ahead are never re-derived (`store::rules::slots::AHEAD_TOLERANCE`: a second owner within
/// the bound must never re-run a slot). 7.5 s for the default 30 s lease; a lease that is not
/// a finite number gets the bound of the shortest lease the jobs file accepts (1 s).
pub fn default_max_clock_offset(lease_seconds: f64) -> StdDuration {
    const SHORTEST_LEASE: f64 = 1.0;
    let lease = if lease_seconds.is_finite() && lease_seconds >= SHORTEST_LEASE {
        lease_seconds
    } else {
        SHORTEST_LEASE
    };
    let cap = crate::store::rules::slots::AHEAD_TOLERANCE.num_seconds() as f64;
    StdDuration::from_secs_f64((lease / 4.0).min(cap))
}

/// A new owner id: `"{hostname}:{pid}:{uuid8}"`.
pub fn new_owner_id() -> String {
    let id = Uuid::new_v4().simple().to_string();
    format!("{}:{}:{}", host_name(), std::process::id(), &id[..8])
}

/// This host's name (`localhost` when it cannot be read).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

#[cfg(test)]
mod tests {
    use super::default_max_clock_offset;

    #[test]
    fn the_default_clock_bound_is_a_quarter_of_the_shortest_lease_up_to_60s() {
        let s = |x: f64| default_max_clock_offset(x).as_secs_f64();
        assert_eq!(s(30.0), 7.5);
        // Never above a quarter of a short lease: an owner 1.5 s behind with 1 s or 5 s
        // leases must not claim.
        assert_eq!(s(1.0), 0.25);
        assert_eq!(s(5.0), 1.25);
        assert_eq!(s(100.0), 25.0);
        assert_eq!(s(7.0 * 86_400.0), 60.0);
        assert_eq!(s(f64::NAN), 0.25);
        assert_eq!(s(0.0), 0.25);
    }
}

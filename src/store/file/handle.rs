//! One open file store: [`FileStore`] (the directory, its lock file, the per-handle cache) and
//! [`Locked`], the cache while the store's lock is held.
//!
//! Owns: the handle's fields, the cache (`Inner`: every job's index entry, the wake-up order,
//! the open logs and what this handle knows durable), the lock wait. Must not touch: the
//! files' contents (`jobs.rs`, `history.rs` read and write them), opening (`open.rs`) or what
//! an operation decides (the plans and policies).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::log::{AppendLog, io_err};
use super::record::{Cached, Idx, Loc, Mark, Slim, later_mark};
use super::segment::TailRow;
use super::table::{self};
use crate::model::Settings;
use crate::store::StoreResult;
use crate::store::io::{IoFile, StoreIo};

/// A point handle's state (`Inner::point`; what it does with it is `point.rs`'s). Declared
/// here so the handle does not depend on the module that builds on it.
#[derive(Default)]
pub(super) struct Point {
    /// The open segment's rows as the open verified them, and that segment's number.
    pub(super) rows: Vec<TailRow>,
    pub(super) seg: u64,
    /// Where the snapshot's first job line starts (after its header line).
    pub(super) first_line: u64,
}

#[derive(Default)]
pub(super) struct Inner {
    pub(super) loaded: bool,
    /// A point handle (`point.rs`): its index holds only the jobs its operations named (and
    /// any whose lines it read in the journal's tail), not every job. An operation that needs
    /// every job turns it into a handle of every job first ([`FileStore::lock`]).
    pub(super) point: Option<Point>,
    /// Every job's index entry (where its newest line is, its wake-up; see `jobs.rs`), and the
    /// wake-up order (see `table.rs`).
    pub(super) jobs: table::JobTable,
    /// The parsed records the current operation read or changed; emptied when it releases
    /// the lock, so the handle holds no definitions between operations.
    pub(super) hot: BTreeMap<String, Cached>,
    /// Records read from their lines by [`Locked::load`] (tests: what a claim costs).
    #[cfg(test)]
    pub(super) records_loaded: usize,
    /// The records `hot` held when an `apply` batch was persisted (tests: what a re-apply
    /// holds; persisting drops each record once encoded).
    #[cfg(test)]
    pub(super) held_at_persist: Vec<String>,
    /// The snapshot this handle's index points into (kept open: a compaction by another
    /// process renames a new one into place, and replaces the journal, which reloads).
    pub(super) snapshot: Option<Box<dyn IoFile>>,
    /// The handle followed a compaction: it reads the previous generation's snapshot (above)
    /// and journal, and numbers the current journal's lines after them (see `follow.rs`).
    pub(super) followed: Option<super::compaction::Followed>,
    /// Jobs with `after:` entries (kept by `reindex`): a completion looks for its chained jobs
    /// among these only, so `complete` stays independent of the number of jobs.
    pub(super) chained: BTreeSet<String>,
    pub(super) generation: u64,
    pub(super) snapshot_len: u64,
    pub(super) journal: AppendLog,
    /// The journal is a leftover of the previous generation (crash mid-compaction, verified by
    /// the snapshot's `absorbed` record): its records are in the snapshot; a writer replaces it
    /// before appending.
    pub(super) journal_stale: bool,
    /// With `journal_stale`: the journal's first bytes the snapshot absorbed. A crash between a
    /// compaction's two renames leaves lines past them (other writers' appends during the
    /// compaction): they are indexed, and carried into the journal that replaces this one.
    pub(super) journal_absorbed: u64,
    /// The journal outgrew the snapshot during this operation: the compaction it plans starts
    /// when the lock is released (see `compact.rs`).
    pub(super) compact_plan: Option<super::compaction::Plan>,
    /// The open history segment (`history.jsonl`).
    pub(super) history: AppendLog,
    /// Its segment number.
    pub(super) history_seg: u64,
    /// The open segment is already sealed (a crash between sealing and replacing it): its rows
    /// are read from `history/N.jsonl`, and a writer replaces it before appending.
    pub(super) history_sealed_open: bool,
    /// The open segment is far over the bound and was verified over its end only: the next
    /// append seals it first (which verifies every row).
    pub(super) history_open_unverified: bool,
    /// `(ino, len)` of history known durable (fdatasynced by this handle).
    pub(super) history_synced: (u64, u64),
    /// `(ino, len)` of the journal known durable (appended and fdatasynced by this handle).
    /// Lines read past it may be another process's that died between its write and its
    /// fdatasync: in the page cache only. They are fdatasynced before any history row is
    /// written on the strength of them (seeds 13198, 48313: a recovery wrote `abandoned` rows
    /// for leases whose journal lines a power loss then took back, and the store refused to
    /// open).
    pub(super) journal_synced: (u64, u64),
    /// History growth (`history_growth`) at the last retention, and what that retention kept.
    pub(super) history_compacted_len: u64,
    pub(super) history_kept_len: u64,
    /// Byte ranges `(ino, from, to)` of history that a failed persist of this handle wrote
    /// (rows whose job records may not have reached the journal). Kept across reloads: a
    /// retried completion, claim or recovery looks for its rows here first and writes none
    /// twice. Bounded by `UNACKED_RANGES` (oldest dropped).
    pub(super) unacked: Vec<(u64, u64, u64)>,
    /// Runs whose record file (`runs/<run_id>.jsonl`) this handle created but whose name no
    /// directory sync has made durable yet (an append failed before it): the run's next append
    /// syncs the directory, so a retried step never rests on a name a power loss takes back.
    pub(super) runs_unnamed: BTreeSet<uuid::Uuid>,
    /// The same for the `runs/` directory itself (created, its parent not synced yet).
    pub(super) runs_dir_unnamed: bool,
    /// This operation relies on rows already in history (a failed persist's, or a dead
    /// process's): they may sit in the page cache only, so history is fsynced before the job
    /// records that rely on them are written, even when no row is appended.
    pub(super) relies_on_landed: bool,
    /// Jobs whose history since their record's `rows_to` this operation read
    /// (`rows_since_records`) and took into account: their records' `rows_to` may move to
    /// history's end. Taken by every persist.
    pub(super) rows_known: HashSet<String>,
    /// The store-wide accounted mark: history before it holds no generated row (`missed`,
    /// overlap `skipped`) that its job's record does not account for. Written into the head of
    /// every job line and into the journal's header; the furthest one read or written wins
    /// (`later_mark`). `None`: not known (a store written before it existed).
    pub(super) acct: Option<Mark>,
    /// This operation knows every generated row after `acct` is accounted for by a record (none
    /// lies there, the store holds no job, or a claim read them and accounted for each): its
    /// journal write moves the mark to history's end. Set under each lock.
    pub(super) acct_clean: bool,
    /// Otherwise, how far this operation's journal write may move the mark: where the first
    /// generated row after it that no record written (or already durable) accounts for starts
    /// (a claim that read them; see `claim_due`). Cleared under each lock.
    pub(super) acct_upto: Option<Mark>,
    /// A store file was (re)loaded through its name since this handle last synced the
    /// directory: the name may not be durable yet (a writer renamed it into place and died
    /// before its directory fsync), so the next write syncs the directory first — a power loss
    /// must not take back a file (settings, snapshot, journal) that acknowledged state relies on
    /// (fault-simulator seeds 1210, 1876: the budget fell back to an older settings.json).
    pub(super) names_unsynced: bool,
    pub(super) settings: Settings,
    pub(super) settings_stamp: (u64, i64, i64, u64),
    /// The latest claim instant this handle has seen (at its first claim: the newest clock an
    /// owner record was sent with). A claim further behind it than the re-derivation
    /// tolerance means the clock went back: every job is looked at once (`claim.rs`).
    pub(super) clock_mark: Option<chrono::DateTime<chrono::Utc>>,
    /// `clock.json` as this handle last read it: its stamp (inode, modification time, length)
    /// and the instant it held, if it said one (`clockmark.rs`).
    pub(super) clock_file: Option<(FileStamp, Option<chrono::DateTime<chrono::Utc>>)>,
}

/// A file's identity and version as `stat` tells them: inode, modification time (seconds,
/// nanoseconds) and length.
pub(super) type FileStamp = (u64, i64, i64, u64);

/// The file store. Cheap to open; each handle has its own lock fd and cache.
pub struct FileStore {
    pub(super) dir: PathBuf,
    pub(super) io: Arc<dyn StoreIo>,
    pub(super) lock: Box<dyn IoFile>,
    pub(super) lock_wait: Duration,
    /// Set by [`Store::hurry`](crate::store::Store::hurry) while the process is stopping: a lock
    /// held by another process is waited for at most [`HURRY_WAIT`] more.
    pub(super) hurry: std::sync::atomic::AtomicBool,
    pub(super) store_id: String,
    pub(super) segment_bytes: u64,
    /// Opened by [`FileStore::open`] (engine, `apply`, …): may write `jobs.index` after a
    /// load that had to scan the snapshot. A read-only handle never writes.
    pub(super) writer: bool,
    /// Opened by a writer ([`FileStore::open`]) or a command that writes an existing store
    /// ([`FileStore::open_existing_writer`]): adopts an earlier release's trimmed history by
    /// writing retention's mark (`history.rs`). Not a reason to rewrite `jobs.index`.
    pub(super) adopts_mark: bool,
    /// Snapshots at least this long get a `jobs.index` ([`INDEX_MIN_BYTES`](super::INDEX_MIN_BYTES)).
    pub(super) index_min_bytes: u64,
    /// Compaction of the jobs files (off the claim path, see `compact.rs`).
    pub(super) compactor: super::compaction::Compactor,
    pub(super) inner: Mutex<Inner>,
}

impl Drop for FileStore {
    fn drop(&mut self) {
        // A compaction thread reads through this handle's I/O layer: let it finish its swap.
        self.compactor.join();
    }
}

/// How much longer a lock wait lasts once the process is stopping ([`crate::store::Store::hurry`]).
pub(super) const HURRY_WAIT: Duration = Duration::from_secs(1);
/// A lock wait is made of slices this long, so a stop is noticed within one.
pub(super) const LOCK_SLICE: Duration = Duration::from_millis(100);

pub(super) struct Locked<'a> {
    pub(super) store: &'a FileStore,
    pub(super) inner: MutexGuard<'a, Inner>,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // The operation is over: its parsed records go (the index and the files have them).
        self.inner.hot.clear();
        let plan = self.inner.compact_plan.take();
        if let Err(e) = self.store.lock.unlock() {
            tracing::warn!("unlocking the store failed: {e}");
        }
        self.store.after_unlock(plan);
    }
}

impl FileStore {
    /// Bound the wait for the store lock (default [`DEFAULT_LOCK_WAIT`](super::DEFAULT_LOCK_WAIT)).
    #[cfg(test)]
    pub(crate) fn with_lock_wait(mut self, wait: Duration) -> FileStore {
        self.lock_wait = wait;
        self
    }

    /// Seal history segments at `bytes` instead of [`SEGMENT_BYTES`](super::SEGMENT_BYTES) (tests, benchmarks; any
    /// bound reads the same store).
    pub fn with_segment_bytes(mut self, bytes: u64) -> FileStore {
        self.segment_bytes = bytes.max(1);
        self
    }

    /// Write a `jobs.index` beside every snapshot at least `bytes` long (default
    /// [`INDEX_MIN_BYTES`](super::INDEX_MIN_BYTES); tests index tiny stores with 0).
    #[cfg(test)]
    pub(crate) fn with_index_min_bytes(mut self, bytes: u64) -> FileStore {
        self.index_min_bytes = bytes;
        self
    }

    /// Compact the jobs journal as `c` says (default: past twice the snapshot + 1 MiB, on a
    /// thread of the handle).
    pub fn with_compaction(mut self, c: super::compaction::Compaction) -> FileStore {
        self.compactor = super::compaction::Compactor::new(c);
        self
    }

    /// Start this handle's clock mark at `mark`, the newest clock an owner record was sent
    /// with, for a caller that keeps owner records elsewhere (the fault simulator, whose
    /// simulated disk does not hold them): its first claim then sees a step back as a handle
    /// opened by `cronsole run` does. Test-only: a real owner's records are in the store.
    #[cfg(any(test, feature = "testkit"))]
    pub fn with_clock_mark(self, mark: Option<chrono::DateTime<chrono::Utc>>) -> FileStore {
        if let Some(m) = mark {
            let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            inner.clock_mark = Some(inner.clock_mark.map_or(m, |c| c.max(m)));
        }
        self
    }

    /// The id drawn when the store was created (in every store file's header).
    pub fn store_id(&self) -> &str {
        &self.store_id
    }

    pub(super) fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Take the lock file's lock, waiting up to `lock_wait` in [`LOCK_SLICE`]s; once the
    /// process is stopping ([`Store::hurry`](crate::store::Store::hurry)) at most [`HURRY_WAIT`] more,
    /// so an owner told to stop while another process holds the lock gives its completions up
    /// to the spool instead of waiting out the holder.
    pub(super) fn flock(&self, lpath: &Path) -> StoreResult<()> {
        let start = std::time::Instant::now();
        let mut deadline = start + self.lock_wait;
        let mut hurried = false;
        loop {
            let now = std::time::Instant::now();
            if !hurried && self.hurry.load(std::sync::atomic::Ordering::SeqCst) {
                hurried = true;
                deadline = deadline.min(now + HURRY_WAIT);
            }
            let slice = deadline.saturating_duration_since(now).min(LOCK_SLICE);
            if self.lock.lock(slice).map_err(io_err(lpath))? {
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                // Shown in tenths of a second ("20s", "1.1s"), not to the nanosecond.
                let tenths = u64::try_from(start.elapsed().as_millis() / 100).unwrap_or(u64::MAX);
                return Err(super::holder::timeout(
                    lpath.to_path_buf(),
                    &*self.lock,
                    Duration::from_millis(tenths.saturating_mul(100)),
                ));
            }
        }
    }
}

impl Locked<'_> {
    pub(super) fn path(&self, name: &str) -> PathBuf {
        self.store.path(name)
    }

    pub(super) fn io(&self) -> &dyn StoreIo {
        &*self.store.io
    }

    pub(super) fn id(&self) -> &str {
        &self.store.store_id
    }
}

impl Locked<'_> {
    pub(super) fn period(&self) -> crate::model::BudgetPeriod {
        crate::cost::budget_period(&self.inner.settings)
    }
}

/// Point the index at a job's newest line (`loc`), or at its record in `hot` alone (`None`).
pub(super) fn set_index(inner: &mut Inner, name: &str, loc: Option<Loc>, idx: Idx) {
    inner.acct = later_mark(inner.acct, idx.acct);
    let slim = Slim {
        loc,
        wake: idx.wake,
        at: idx.at,
        lease: idx.lease,
        spend: idx.spend,
        def: idx.def,
    };
    inner.jobs.set(name, slim);
    if idx.chained {
        if !inner.chained.contains(name) {
            inner.chained.insert(name.to_string());
        }
    } else {
        inner.chained.remove(name);
    }
}

/// A job created by this operation: its record in `hot`, indexed with no line yet.
pub(super) fn insert_new(inner: &mut Inner, name: &str, c: Cached) {
    let idx = c.idx();
    inner.hot.insert(name.to_string(), c);
    set_index(inner, name, None, idx);
}

//! Where the file store keeps what: the names of its files and the sizes that bound them.
//!
//! Owns: every file name in the store directory and the constants the other files share
//! (read block, segment bound, retention default, lock wait). Must not touch: anything else —
//! this is the bottom of the file store, every other file may read it.

use std::path::{Path, PathBuf};
use std::time::Duration;

pub(super) const VERSION_FILE: &str = "VERSION";
pub(super) const LOCK_FILE: &str = "lock";
pub(super) const SNAPSHOT_FILE: &str = "jobs.snapshot.jsonl";
pub(super) const JOURNAL_FILE: &str = "jobs.journal";
pub(super) const SETTINGS_FILE: &str = "settings.json";
pub(super) const HISTORY_FILE: &str = "history.jsonl";
/// The latest clock a command stored job records on (advisory, see `clockmark.rs`).
pub(super) const CLOCK_FILE: &str = "clock.json";
pub(super) const BLOCK: u64 = 64 * 1024;
/// Default retention: newest rows kept per job.
pub const DEFAULT_KEEP_PER_JOB: usize = 10_000;
pub(super) const AUTO_COMPACT_MIN_BYTES: u64 = 64 * 1024 * 1024;
/// Default bound on waiting for the store lock. Operations hold it for milliseconds (a retention
/// compaction of a large history for a few seconds, an `apply` that changes hundreds of
/// thousands of jobs for minutes), so a wait this long reports
/// [`BackendError::LockTimeout`](crate::store::BackendError::LockTimeout), naming the holder,
/// instead of hanging.
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(20);
/// The open history segment is sealed when an append would take it past this (default; see
/// [`FileStore::with_segment_bytes`](super::FileStore::with_segment_bytes)). Every open verifies the open segment in full.
pub const SEGMENT_BYTES: u64 = 4 * 1024 * 1024;
/// How many failed-persist byte ranges of history a handle remembers (see `Inner::unacked`).
pub(super) const UNACKED_RANGES: usize = 64;

/// Whether `dir` holds any of a file store's own files: a directory with none of them is no
/// store (not a damaged one), and a read-only command leaves it as it found it.
pub fn holds_a_store(dir: &Path) -> bool {
    [
        VERSION_FILE,
        SNAPSHOT_FILE,
        JOURNAL_FILE,
        SETTINGS_FILE,
        HISTORY_FILE,
        HISTORY_DIR,
    ]
    .iter()
    .any(|f| dir.join(f).exists())
}

/// The directory of sealed segments.
pub(super) const HISTORY_DIR: &str = "history";

/// Where sealed segment `n` lives.
pub(super) fn segment_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(HISTORY_DIR).join(format!("{n:06}.jsonl"))
}

/// The index file's name in the store directory.
pub(crate) const INDEX_FILE: &str = "jobs.index";

//! The state of a handle's compaction, below both the handle that holds it and the procedures
//! that plan, build and swap (`compact.rs`): its configuration, the plan taken under the lock,
//! a built snapshot waiting for its swap, the thread in progress, and what a handle that
//! followed another handle's compaction still reads (`follow.rs`).
//!
//! Owns: these types and the retry bound after a failure. Must not touch: the files (the
//! procedures in `compact.rs` do).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::log::io_err;
use super::record::Mark;
use crate::store::io::{IoFile, StoreIo};
use crate::store::{StoreError, StoreResult};

/// When and how a handle compacts the jobs files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compaction {
    /// The journal is compacted once it is longer than twice the snapshot plus this many bytes.
    pub slack: u64,
    /// `true`: on a thread of the handle. `false` (stepped, deterministic): built when the
    /// operation that crossed the threshold ends, swapped in when the handle's next one ends.
    pub background: bool,
}

impl Default for Compaction {
    fn default() -> Compaction {
        Compaction {
            slack: 1024 * 1024,
            background: true,
        }
    }
}

impl Compaction {
    /// Stepped compaction past `slack` bytes (the fault simulator's, see the module doc).
    pub fn stepped(slack: u64) -> Compaction {
        Compaction {
            slack,
            background: false,
        }
    }
}

/// What a compaction absorbs, taken under the lock by the write that crossed the threshold.
pub(super) struct Plan {
    pub(super) generation: u64,
    pub(super) snap_ino: u64,
    pub(super) snap_len: u64,
    pub(super) journal_ino: u64,
    /// The journal's complete length: the new snapshot absorbs `journal[..j0]`.
    pub(super) j0: u64,
    pub(super) snapshot: Box<dyn IoFile>,
    pub(super) journal: Box<dyn IoFile>,
}

/// A built snapshot waiting for its swap.
pub(super) struct Built {
    pub(super) generation: u64,
    pub(super) snap_ino: u64,
    pub(super) journal_ino: u64,
    pub(super) j0: u64,
    pub(super) jobs: u64,
    pub(super) journal: Box<dyn IoFile>,
    pub(super) snapshot: Temp,
    pub(super) snapshot_len: u64,
    /// `None`: the new snapshot gets no index (too small, or a head could not be read).
    pub(super) index: Option<Temp>,
    /// The furthest accounted mark of the absorbed lines and the old journal's header: the new
    /// journal's header carries it.
    pub(super) acct: Option<Mark>,
    pub(super) started: Instant,
}

/// A handle reading the files a compaction folded (see `follow.rs`).
pub(super) struct Followed {
    /// The previous generation's journal: index entries before `j0` point into it.
    pub(super) old_journal: Box<dyn IoFile>,
    /// The absorbed length: a journal entry at `off >= j0` is in the current journal at
    /// `off - j0 + hdr`.
    pub(super) j0: u64,
    /// The current journal's header length (its first line starts there).
    pub(super) hdr: u64,
    /// The snapshot now in place (the handle reads the previous one, still open): its inode
    /// and length, for the next compaction's plan and threshold.
    pub(super) snap_ino: u64,
    pub(super) snap_len: u64,
}

/// A temp file removed when dropped unless it was renamed into place.
pub(super) struct Temp {
    pub(super) io: Arc<dyn StoreIo>,
    pub(super) path: PathBuf,
}

impl Temp {
    pub(super) fn rename_to(mut self, to: &Path) -> StoreResult<()> {
        self.io.rename(&self.path, to).map_err(io_err(to))?;
        self.path = PathBuf::new();
        Ok(())
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        if !self.path.as_os_str().is_empty() {
            let _ = self.io.remove_file(&self.path);
        }
    }
}

/// What a build and a swap need, owned (a compaction thread outlives no handle but borrows
/// nothing from it).
#[derive(Clone)]
pub(super) struct Ctx {
    pub(super) io: Arc<dyn StoreIo>,
    pub(super) dir: PathBuf,
    pub(super) id: String,
    pub(super) index_min_bytes: u64,
    pub(super) lock_wait: Duration,
}

pub(super) enum State {
    Idle,
    Prepared(Box<Built>),
    Running(std::thread::JoinHandle<()>),
}

/// A handle's compaction: its configuration and the compaction in progress.
pub(super) struct Compactor {
    pub(super) config: Compaction,
    pub(super) state: Mutex<State>,
    /// After a failed compaction, the journal length at which the next one may start (a full
    /// disk must not turn every write into a rewrite of the store).
    pub(super) retry_from: Arc<std::sync::atomic::AtomicU64>,
}

impl Compactor {
    pub(super) fn new(config: Compaction) -> Compactor {
        Compactor {
            config,
            state: Mutex::new(State::Idle),
            retry_from: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        }
    }

    pub(super) fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wait for a compaction thread of this handle to end (the handle is closing).
    pub(super) fn join(&self) {
        let mut st = self.state();
        if let State::Running(h) = std::mem::replace(&mut *st, State::Idle)
            && h.join().is_err()
        {
            tracing::warn!("the compaction thread panicked");
        }
    }

    pub(super) fn failed(retry_from: &std::sync::atomic::AtomicU64, j0: u64, e: &StoreError) {
        tracing::warn!("journal compaction failed (tried again once the journal grew): {e}");
        retry_from.store(
            j0.saturating_add(j0 / 4),
            std::sync::atomic::Ordering::Relaxed,
        );
    }
}

//! The embedded file store (SPEC §14.1): a directory shared safely by several processes on one
//! host through an exclusive `fs4` lock.
//!
//! Owns: the on-disk layout, locking, crash safety, the per-handle cache and history queries.
//! Must not touch: scheduling decisions (those are the plans and policies of
//! [`crate::store::plan`], shared with the PostgreSQL store), clocks (every call takes `now`), the engine, the UI.
//!
//! # Modules
//! - `mod.rs` — opening/creating, the lock, the cache (`Inner`) and the [`Store`] impl.
//! - `log.rs` — the one append path both logs share (`AppendLog`) and the file helpers.
//! - `jobs.rs` — snapshot + journal: loading, tail reads, appends, compaction.
//! - `index.rs` — `jobs.index`, the snapshot's heads for a fast open.
//! - `history.rs` — the history log: verification, appends, queries, recovery scan, retention.
//! - `migrate.rs` — format-1 and format-2 upgrades.
//! - `runs.rs` — running tool loops' records (`runs/`), one write per loop step.
//!
//! # Layout (all human-readable; format 3, see [`super::filefmt`])
//! - `VERSION` — `cronsole-file-store 3` and `store <uuid>`, the store id drawn at creation.
//! - `lock` — empty; every operation holds an exclusive `flock` on it, waiting at most
//!   [`DEFAULT_LOCK_WAIT`] ([`StoreError::LockTimeout`] after). flock is per open file
//!   description, so each [`FileStore`] opens its own fd, and a `Mutex` serialises threads
//!   sharing one handle.
//! - `jobs.snapshot.jsonl` — a header `{"cronsole":"snapshot","generation":N,"store":ID,
//!   "absorbed":{"len":L,"crc32":C}}` then one line per job: `{"job": JobRecord, "mark": {...}}`.
//!   Written temp + fsync + rename + fsync dir.
//! - `jobs.journal` — header `{"cronsole":"journal","generation":N,"store":ID}` then one full job
//!   line per mutation (last line for a name wins). It is replayed when its generation equals the
//!   snapshot's. One generation behind is what a crash between writing a new snapshot and
//!   replacing the journal leaves: accepted (not replayed) only when the snapshot's `absorbed`
//!   matches it byte for byte (length + CRC-32). Any other generation is corruption — an edited
//!   header can never make a reader discard records. Compaction when the journal grows past 2×
//!   the snapshot (+1 MiB).
//! - `jobs.index` — optional, derived: a binary cache of the snapshot's line heads, bound to
//!   the snapshot (store id, generation, length, header CRC) and written after it; opening uses
//!   it instead of reading every snapshot line, and ignores it (reading the snapshot) when it is
//!   missing, stale or damaged — never corruption (see `index.rs`).
//! - `runs/<run_id>.jsonl` — optional: a running tool loop's transcript entries, one JSON line
//!   each, appended at every step; removed when the run's row is written (recovery's `abandoned`
//!   row takes it).
//! - `settings.json` — `{"cronsole":"settings","store":ID,"settings":{...}}` (temp + rename).
//! - `history.jsonl` — the open history segment: a header `{"cronsole":"history","store":ID,
//!   "segment":N}`, then one §4 row per line, newest at the end, each with its CRC-32
//!   (`"crc32"`, see [`super::filefmt`]).
//! - `history/NNNNNN.jsonl` — sealed history segments `1..N-1` (oldest may be gone by
//!   retention), each ending in a seal line (see `history.rs` for the design and why).
//! - `history/first.json` — retention's mark `{"cronsole":"history-first","store":ID,
//!   "segment":K}`: the first sealed segment it kept, written (temp + rename) before it removes
//!   the older ones. Without it sealed segments start at 1; every open checks that the first
//!   required segment exists while the open segment is above it (a hand-deleted oldest segment
//!   is damage, not retention).
//!
//! Every file above but `jobs.index` is required once the store exists: missing, empty, foreign (another store
//! id), out-of-generation or unparsable is [`StoreError::Corrupt`] naming it, and nothing is
//! modified. Opening ([`FileStore::open_existing`], or the load under each lock) never writes;
//! only [`FileStore::open`] creates a store or migrates a format-1 or format-2 one (under the
//! lock).

//! # Cache and change detection
//! Each handle keeps an index of every job (where its newest line is, its wake-up, history
//! position, lease and budget counters; see `jobs.rs` for the line `head` it is read from), a
//! wake-up set (`BTreeSet<(instant, name)>`) and the journal's inode + offset — not the records:
//! an operation reads the lines of the jobs it works on and drops them when it releases the
//! lock. On each lock acquisition it stats the journal: unchanged → nothing to read (idle claim
//! is a stat and an index peek); grown → only the new tail is read; replaced → full reload.
//! Every mutation appends only the records it changed, so add / complete / pause cost O(1)
//! amortised regardless of the number of jobs.
//!
//! # Crash safety
//! Appends are one `write` of whole lines followed by `fdatasync` (`AppendLog`, one path for
//! both logs). A final line without its newline was never acknowledged: loading ignores it
//! without touching it, and the next writer cuts it (with a `warn!`) right before its append; a
//! log shorter than what this handle already read is corruption. Write order for a run's end:
//! history row(s) first, then the job record. Each job remembers where history ended when its
//! oldest live run was claimed (`mark`; `overlap: allow` runs several); before recovery writes `abandoned` for an expired lease it scans history from
//! there for the run_id, and if the run's row is already there (the process died between the two
//! writes) it finishes the job from that row instead of writing a second one.
//!
//! A completion counts as written only when its row and its job record are both durable. A
//! caller that finds its run's row already in history (another handle's or process's failed
//! persist: the engine's retry after a restart of the handle, the spool's replay) calls
//! [`Store::complete_recorded`]: the run's row is looked for from the claim's mark and, if
//! the record still holds the run, the record is finished from it (no second row); a record
//! that no longer holds it is left alone (no stale row). A claim recovering expired leases
//! looks for the landed row of every one of them (`overlap: allow` holds several).
//!
//! A persist that fails after its rows reached history (journal `ENOSPC`, journal or history
//! fsync `EIO`) is retried by the caller: each handle remembers the history byte ranges its
//! failed persists wrote (`Inner::unacked`, the last 64), and the retry finds its rows there —
//! a completion finishes from its landed row ([`plan::complete::complete_landed`]), generated
//! `missed`/`skipped` rows already there are not written again ([`rules::rows::same_row`]; a later
//! `missed` retry keeps only the newer slots, [`rules::rows::unlanded_part`]). An operation relying
//! on rows already in history fdatasyncs history before writing the records (those rows may be
//! in the page cache only). A recovery that wrote `abandoned` and died before releasing the
//! lease leaves that row; the run's owner, completing a lapsed lease (`Lease::lapsed`), looks
//! for it from the claim mark and writes its row with `supersedes_abandoned`, and queries hide
//! the superseded row. A process that dies (or fails) between a `missed`/overlap row and its
//! job record leaves that row: every job line records a history position (`rows_to`) before
//! which every row of the job is accounted for by the record, and a writer about to generate
//! rows for a job first scans history from there (`rows_since_records`, one scan per
//! operation, only when it generates rows) and writes only the slots no leftover row records
//! (every leftover row counts, not only one covering the first slot: `rules::rows::unlanded_part`).
//! A claim finds out which jobs generate rows by a probe of the step on a copy of the record
//! and scans before the real step, and a leftover row moves the job's next slot past what it
//! records (`plan::claim::skip_recorded`; its writer may have looked at a later clock), as the
//! leftovers a completion's overlap rows are trimmed against do.
//!
//! A claim that generates no row of its own does not scan from `rows_to` — yet after the clock
//! stepped back it may reach a slot a failed writer's leftover row records (seed 19652: a
//! claimer's overlap row, then its journal fsync failed; the clock stepped back; the next
//! claim ran the slot). So leftovers are also found store-wide, without reading history on
//! every claim: the **accounted mark** (`Inner::acct`, `"acct"` in the head of every job line
//! and in the journal header) is a history position before which no generated row exists
//! that its job's record does not account for. Any mark ever written stays true (rows are
//! only appended after it), so the furthest one read or written wins (`jobs::later_mark`).
//! Under each lock a handle compares it with history's end (`acct_clean`): equal — the usual
//! case, known without a read — means nothing is unaccounted, and the operation's journal
//! write moves the mark to history's new end (its own rows are accounted for by the records
//! it writes). A failed or dead writer's journal write never lands, so history then goes past
//! the mark: operations that do not look (a pause, a renewal, a completion) carry the old mark
//! forward; a claim reads the generated rows past it (`generated_after`: the stretch a failed
//! writer left, usually one batch; at most 64 MiB), evaluates every due job
//! with its rows as leftovers (`plan::claim::skip_recorded`, as the scan path does), moves the next
//! slot of the other jobs they name past what they record, and moves the mark up to the first
//! row whose job still has a slot it records ahead (`plan::claim::slots_behind`; the clock stepped
//! back behind the writer's), or to history's end. A store holding no job is trivially
//! accounted for (a new job's `rows_to` starts at history's end). A store written before the
//! mark existed has none (no line or header carries it), and no writer invents one: its
//! claims scan only when they generate rows, as before.
//! `rows_to` moves to history's end only when the writer knows nothing unaccounted lies
//! between (it scanned, or the stretch is at most 64 KiB and holds no generated row of the job
//! and no `abandoned` row of a run the record still leases: `rows_unaccounted`); any other
//! record write — a pause, a renewal, a budget settlement, a completion without overlap rows —
//! keeps it, so it can never hide a leftover row. The run's own completion looks in that short
//! stretch for a dead recoverer's `abandoned` row even when its lease does not look lapsed
//! (the clock stepped back).
//!
//! Journal lines are treated like history rows relied on: an operation about to append history
//! rows first fdatasyncs journal lines it did not make durable itself (`Inner::journal_synced`).
//! A process killed between its journal write and its fdatasync leaves its lines in the page
//! cache, another acts on them (a recovery writes `abandoned` for a lease read there), and a
//! power loss must not keep that row while taking back the line it was written for (the next
//! open's cross-check would refuse the store).
//!
//! fsyncgate: an append whose write or fsync fails is cut back to the log's previous end (and
//! the cut synced) under the same lock, before anyone reads it: after a failed fsync Linux may
//! never write those bytes while still serving them from the page cache, so nothing may follow
//! them. When the cut's own fsync fails too, the handle keeps the cut owed
//! (`AppendLog::cut_unsynced`, also across the reload a failed persist causes) and cuts and
//! syncs again before writing any history row on the strength of it (`sync_journal`; seed
//! 29376: a retried claim's `missed` row beside the failed claim's lease line a power loss
//! kept). A handle that (re)loaded a file through its name syncs the directory before its next
//! write, so a rename another process did not get to sync cannot be taken back by a power loss
//! after this handle acknowledged something relying on that file.
//!
//! # History corruption checks
//! Every history row carries a CRC-32 of itself, so a flipped byte that still parses is caught
//! by whoever reads the row. History is sealed into segments (`history.rs`): every open
//! verifies the whole open segment (at most [`SEGMENT_BYTES`] plus one batch) row by row —
//! checksum and parse — and appends only ever go there, so nothing is appended after an
//! unverified byte while a start stays flat at 10 000 000 rows; sealed segments are immutable,
//! each row is verified by whoever reads it and `cronsole check` verifies every segment.
//!
//! # Journal/history cross-check
//! Each job record carries `at`, the history position when it was written (history is
//! fdatasynced up to there first). Every open checks that history reaches every record's
//! position and that the open segment's rows after a job's position are ones a crash (or a
//! failed record write) between a row and its record can leave: the end of a run the record
//! still holds — any of its leases; the index knows the first (the line's `head`), and the
//! record is read whole only for a job whose rows that does not explain. Otherwise a file was
//! cut short (by hand, a faulty disk) and the store is corrupt — never a torn tail to cut
//! (`history.rs`, `cross_check`). A journal cut back to before a run's claim leaves a row of
//! a run the record does not hold: refused. A cut that removed only a run's end line is
//! indistinguishable from the failed write, and harmless: the run is finished from its row.
//!
//! # Retention
//! `compact_history` keeps the newest N rows per job (default 10 000) and/or rows newer than a
//! maximum age: it seals the open segment, then rewrites only the sealed segments that lose
//! rows (temp + fsync + rename + fsync dir) and deletes the oldest ones that lose them all.
//! `complete` runs it automatically when history grew by more than it held after the last
//! retention (and by over 64 MiB).

mod history;
mod index;
pub use index::INDEX_MIN_BYTES;
pub(crate) use index::{INDEX_FILE, IndexCheck, check_index};
mod jobs;
pub(crate) use jobs::head_agrees;
mod complete;
mod log;
mod migrate;
mod recount;
mod runs;
mod table;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use self::history::history_header;
use self::jobs::{Cached, insert_new};
use self::log::{
    AppendLog, check_id, corrupt, header_line, io_err, json_err, missing, stat, write_atomic,
};
use self::migrate::{migrate_v1, migrate_v2};
use super::filefmt;
use super::io::{IoFile, OpenMode, RealIo, StoreIo};
use super::*;
use crate::model::{HistoryRow, JobDef, JobRecord, JobsFile, Settings};
use crate::store::{plan, policy, rules};

const VERSION_FILE: &str = "VERSION";
const LOCK_FILE: &str = "lock";
const SNAPSHOT_FILE: &str = "jobs.snapshot.jsonl";
const JOURNAL_FILE: &str = "jobs.journal";
const SETTINGS_FILE: &str = "settings.json";
const HISTORY_FILE: &str = "history.jsonl";
const BLOCK: u64 = 64 * 1024;
/// Default retention: newest rows kept per job.
pub const DEFAULT_KEEP_PER_JOB: usize = 10_000;
const AUTO_COMPACT_MIN_BYTES: u64 = 64 * 1024 * 1024;
/// Default bound on waiting for the store lock. Operations hold it for milliseconds (a retention
/// compaction of a large history for a few seconds), so a wait this long means the holder is
/// stopped or wedged: report [`StoreError::LockTimeout`] instead of hanging.
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(20);
/// The open history segment is sealed when an append would take it past this (default; see
/// [`FileStore::with_segment_bytes`]). Every open verifies the open segment in full.
pub const SEGMENT_BYTES: u64 = 4 * 1024 * 1024;
/// How many failed-persist byte ranges of history a handle remembers (see `Inner::unacked`).
const UNACKED_RANGES: usize = 64;

#[derive(Default)]
struct Inner {
    loaded: bool,
    /// Every job's index entry (where its newest line is, its wake-up; see `jobs.rs`), and the
    /// wake-up order (see `table.rs`).
    jobs: table::JobTable,
    /// The parsed records the current operation read or changed; emptied when it releases
    /// the lock, so the handle holds no definitions between operations.
    hot: BTreeMap<String, Cached>,
    /// Records read from their lines by [`Locked::load`] (tests: what a claim costs).
    #[cfg(test)]
    records_loaded: usize,
    /// The snapshot this handle's index points into (kept open: a compaction by another
    /// process renames a new one into place, and replaces the journal, which reloads).
    snapshot: Option<Box<dyn IoFile>>,
    /// Jobs with `after:` entries (kept by `reindex`): a completion looks for its chained jobs
    /// among these only, so `complete` stays independent of the number of jobs.
    chained: BTreeSet<String>,
    generation: u64,
    snapshot_len: u64,
    journal: AppendLog,
    /// The journal is a leftover of the previous generation (crash mid-compaction, verified by
    /// the snapshot's `absorbed` record): its records are in the snapshot; a writer replaces it
    /// before appending.
    journal_stale: bool,
    /// The open history segment (`history.jsonl`).
    history: AppendLog,
    /// Its segment number.
    history_seg: u64,
    /// The open segment is already sealed (a crash between sealing and replacing it): its rows
    /// are read from `history/N.jsonl`, and a writer replaces it before appending.
    history_sealed_open: bool,
    /// The open segment is far over the bound and was verified over its end only: the next
    /// append seals it first (which verifies every row).
    history_open_unverified: bool,
    /// `(ino, len)` of history known durable (fdatasynced by this handle).
    history_synced: (u64, u64),
    /// `(ino, len)` of the journal known durable (appended and fdatasynced by this handle).
    /// Lines read past it may be another process's that died between its write and its
    /// fdatasync: in the page cache only. They are fdatasynced before any history row is
    /// written on the strength of them (seeds 13198, 48313: a recovery wrote `abandoned` rows
    /// for leases whose journal lines a power loss then took back, and the store refused to
    /// open).
    journal_synced: (u64, u64),
    /// History growth (`history_growth`) at the last retention, and what that retention kept.
    history_compacted_len: u64,
    history_kept_len: u64,
    /// Byte ranges `(ino, from, to)` of history that a failed persist of this handle wrote
    /// (rows whose job records may not have reached the journal). Kept across reloads: a
    /// retried completion, claim or recovery looks for its rows here first and writes none
    /// twice. Bounded by `UNACKED_RANGES` (oldest dropped).
    unacked: Vec<(u64, u64, u64)>,
    /// This operation relies on rows already in history (a failed persist's, or a dead
    /// process's): they may sit in the page cache only, so history is fsynced before the job
    /// records that rely on them are written, even when no row is appended.
    relies_on_landed: bool,
    /// Jobs whose history since their record's `rows_to` this operation read
    /// (`rows_since_records`) and took into account: their records' `rows_to` may move to
    /// history's end. Taken by every persist.
    rows_known: HashSet<String>,
    /// The store-wide accounted mark: history before it holds no generated row (`missed`,
    /// overlap `skipped`) that its job's record does not account for. Written into the head of
    /// every job line and into the journal's header; the furthest one read or written wins
    /// (`jobs::later_mark`). `None`: not known (a store written before it existed).
    acct: Option<jobs::Mark>,
    /// This operation knows every generated row after `acct` is accounted for by a record (none
    /// lies there, the store holds no job, or a claim read them and accounted for each): its
    /// journal write moves the mark to history's end. Set under each lock.
    acct_clean: bool,
    /// Otherwise, how far this operation's journal write may move the mark: where the first
    /// generated row after it that no record written (or already durable) accounts for starts
    /// (a claim that read them; see `claim_due`). Cleared under each lock.
    acct_upto: Option<jobs::Mark>,
    /// A store file was (re)loaded through its name since this handle last synced the
    /// directory: the name may not be durable yet (a writer renamed it into place and died
    /// before its directory fsync), so the next write syncs the directory first — a power loss
    /// must not take back a file (settings, snapshot, journal) that acknowledged state relies on
    /// (fault-simulator seeds 1210, 1876: the budget fell back to an older settings.json).
    names_unsynced: bool,
    settings: Settings,
    settings_stamp: (u64, i64, i64, u64),
}

/// The file store. Cheap to open; each handle has its own lock fd and cache.
pub struct FileStore {
    dir: PathBuf,
    io: Arc<dyn StoreIo>,
    lock: Box<dyn IoFile>,
    lock_wait: Duration,
    /// Set by [`Store::hurry`](super::Store::hurry) while the process is stopping: a lock
    /// held by another process is waited for at most [`HURRY_WAIT`] more.
    hurry: std::sync::atomic::AtomicBool,
    store_id: String,
    segment_bytes: u64,
    /// Opened by [`FileStore::open`] (engine, `apply`, …): may write `jobs.index` after a
    /// load that had to scan the snapshot. A read-only handle never writes.
    writer: bool,
    /// Opened by a writer ([`FileStore::open`]) or a command that writes an existing store
    /// ([`FileStore::open_existing_writer`]): adopts an earlier release's trimmed history by
    /// writing retention's mark (`history.rs`). Not a reason to rewrite `jobs.index`.
    adopts_mark: bool,
    /// Snapshots at least this long get a `jobs.index` ([`INDEX_MIN_BYTES`]).
    index_min_bytes: u64,
    inner: Mutex<Inner>,
}

/// How much longer a lock wait lasts once the process is stopping ([`super::Store::hurry`]).
const HURRY_WAIT: Duration = Duration::from_secs(1);
/// A lock wait is made of slices this long, so a stop is noticed within one.
const LOCK_SLICE: Duration = Duration::from_millis(100);

struct Locked<'a> {
    store: &'a FileStore,
    inner: MutexGuard<'a, Inner>,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // The operation is over: its parsed records go (the index and the files have them).
        self.inner.hot.clear();
        if let Err(e) = self.store.lock.unlock() {
            tracing::warn!("unlocking the store failed: {e}");
        }
    }
}

fn settings_bytes(id: &str, settings: &Settings) -> StoreResult<Vec<u8>> {
    let value = serde_json::to_value(settings).map_err(StoreError::encode("settings"))?;
    let crc32 = Some(filefmt::settings_crc(&value));
    serde_json::to_vec_pretty(&filefmt::SettingsFile {
        cronsole: "settings".to_string(),
        store: id.to_string(),
        settings: value,
        crc32,
    })
    .map_err(StoreError::encode("settings"))
}

/// How [`FileStore`] may treat the directory when opening it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpenAs {
    /// Create it if missing, migrate a previous-release store (engine, `apply`).
    Writer,
    /// It must exist in the current format; opening writes nothing.
    Existing,
    /// It must exist in the current format, for a command that writes to it (`pause`,
    /// `trigger`, …): opening creates and migrates nothing, and adopts what an earlier release
    /// left (retention's mark, `history.rs`) as a writer does; `jobs.index` is left to writers.
    ExistingWriter,
}

impl FileStore {
    /// Open (creating if needed, migrating a format-1 store) the store in `dir`. A foreign or
    /// corrupt store is an error naming the file; nothing is reset.
    pub fn open(dir: &Path) -> StoreResult<FileStore> {
        FileStore::open_with_io(dir, RealIo::shared())
    }

    /// [`FileStore::open`] over another I/O layer (a fault simulator).
    pub fn open_with_io(dir: &Path, io: Arc<dyn StoreIo>) -> StoreResult<FileStore> {
        FileStore::open_as(dir, io, OpenAs::Writer)
    }

    /// Open a store that must already exist, writing nothing while opening (read-only commands
    /// and front ends). A previous-release store is refused with how to upgrade it.
    pub fn open_existing(dir: &Path) -> StoreResult<FileStore> {
        FileStore::open_existing_with_io(dir, RealIo::shared())
    }

    /// [`FileStore::open_existing`] over another I/O layer (a fault simulator).
    pub fn open_existing_with_io(dir: &Path, io: Arc<dyn StoreIo>) -> StoreResult<FileStore> {
        FileStore::open_as(dir, io, OpenAs::Existing)
    }

    /// Open a store that must already exist for a command that writes to it (the operator's
    /// `pause`, `resume`, `trigger`, `retry`, `cancel`, `backfill`): like
    /// [`FileStore::open_existing`] it creates and migrates nothing, and like
    /// [`FileStore::open`] it adopts what an earlier release left (retention's mark).
    pub fn open_existing_writer(dir: &Path) -> StoreResult<FileStore> {
        FileStore::open_as(dir, RealIo::shared(), OpenAs::ExistingWriter)
    }

    fn open_as(dir: &Path, io: Arc<dyn StoreIo>, how: OpenAs) -> StoreResult<FileStore> {
        let vpath = dir.join(VERSION_FILE);
        let not_a_store = || missing(&vpath, "this directory is not a cronsole store");
        match how {
            OpenAs::Writer => io.create_dir_all(dir).map_err(io_err(dir))?,
            OpenAs::Existing | OpenAs::ExistingWriter => {
                if stat(&*io, &vpath)?.is_none() {
                    return Err(not_a_store());
                }
            }
        }
        // VERSION is read (and the store created or migrated) under the lock: another process
        // may be creating the same store right now. The empty lock file is coordination, not
        // store data: even a read-only open creates it if missing (nothing else is written).
        let lpath = dir.join(LOCK_FILE);
        let lock = io
            .open(&lpath, OpenMode::LockFile)
            .map_err(io_err(&lpath))?;
        if !lock.lock(DEFAULT_LOCK_WAIT).map_err(io_err(&lpath))? {
            return Err(StoreError::LockTimeout {
                file: lpath,
                waited: DEFAULT_LOCK_WAIT,
            });
        }
        let r = (|| {
            let version = Self::read_version(&*io, dir)?;
            if how != OpenAs::Writer {
                return Ok(version);
            }
            Ok(match version {
                None => {
                    let id = Uuid::new_v4().to_string();
                    Self::create(&*io, dir, &id)?;
                    Some((3, Some(id)))
                }
                Some((1, _)) => {
                    let id = Uuid::new_v4().to_string();
                    migrate_v1(&*io, dir, &id)?;
                    migrate_v2(&*io, dir, &id, SEGMENT_BYTES)?;
                    Some((3, Some(id)))
                }
                Some((2, Some(id))) => {
                    migrate_v2(&*io, dir, &id, SEGMENT_BYTES)?;
                    Some((3, Some(id)))
                }
                v => v,
            })
        })();
        if let Err(e) = lock.unlock() {
            tracing::warn!("unlocking the store failed: {e}");
        }
        let store_id = match r? {
            Some((3, Some(id))) => id,
            None => return Err(not_a_store()),
            Some((v, _)) => {
                return Err(StoreError::Version {
                    file: vpath,
                    found: format!("cronsole-file-store {v} (previous release)"),
                    supported: format!(
                        "{} — upgrade it in place by running `cronsole apply` or `cronsole run` on it once",
                        filefmt::VERSION_TEXT
                    ),
                });
            }
        };
        let store = FileStore {
            dir: dir.to_path_buf(),
            io,
            lock,
            lock_wait: DEFAULT_LOCK_WAIT,
            hurry: std::sync::atomic::AtomicBool::new(false),
            store_id,
            segment_bytes: SEGMENT_BYTES,
            writer: how == OpenAs::Writer,
            adopts_mark: how != OpenAs::Existing,
            index_min_bytes: INDEX_MIN_BYTES,
            inner: Mutex::new(Inner::default()),
        };
        {
            let mut l = store.lock()?;
            let rows = l.verify_open_segment()?;
            l.cross_check(&rows)?;
            l.check_first_segment()?;
        }
        Ok(store)
    }

    /// `VERSION`: `None` when absent from a directory holding none of our files.
    fn read_version(io: &dyn StoreIo, dir: &Path) -> StoreResult<Option<(u32, Option<String>)>> {
        let vpath = dir.join(VERSION_FILE);
        match io.read(&vpath) {
            Ok(v) => {
                let v = String::from_utf8_lossy(&v);
                match filefmt::parse_version(&v) {
                    Some(x) => Ok(Some(x)),
                    None => Err(StoreError::Version {
                        file: vpath,
                        found: v.lines().next().unwrap_or("").chars().take(80).collect(),
                        supported: filefmt::VERSION_TEXT.to_string(),
                    }),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                for f in [SNAPSHOT_FILE, JOURNAL_FILE, HISTORY_FILE, SETTINGS_FILE] {
                    if stat(io, &dir.join(f))?.is_some() {
                        return Err(missing(
                            &vpath,
                            &format!(
                                "{f} is here but VERSION is not; refusing to treat the directory as a new store"
                            ),
                        ));
                    }
                }
                Ok(None)
            }
            Err(e) => Err(StoreError::io(vpath, e)),
        }
    }

    /// A new, empty store: every required file with its header, `VERSION` (with the id) last.
    fn create(io: &dyn StoreIo, dir: &Path, id: &str) -> StoreResult<()> {
        let p = |n: &str| dir.join(n);
        write_atomic(
            io,
            dir,
            &p(SNAPSHOT_FILE),
            &header_line("snapshot", 0, id, None)?,
        )?;
        write_atomic(
            io,
            dir,
            &p(JOURNAL_FILE),
            &header_line("journal", 0, id, None)?,
        )?;
        write_atomic(
            io,
            dir,
            &p(SETTINGS_FILE),
            &settings_bytes(id, &Settings::default())?,
        )?;
        write_atomic(io, dir, &p(HISTORY_FILE), &history_header(id, 1)?)?;
        write_atomic(
            io,
            dir,
            &p(VERSION_FILE),
            filefmt::version_text(id).as_bytes(),
        )
    }

    /// Bound the wait for the store lock (default [`DEFAULT_LOCK_WAIT`]).
    pub fn with_lock_wait(mut self, wait: Duration) -> FileStore {
        self.lock_wait = wait;
        self
    }

    /// Seal history segments at `bytes` instead of [`SEGMENT_BYTES`] (tests, benchmarks; any
    /// bound reads the same store).
    pub fn with_segment_bytes(mut self, bytes: u64) -> FileStore {
        self.segment_bytes = bytes.max(1);
        self
    }

    /// Write a `jobs.index` beside every snapshot at least `bytes` long (default
    /// [`INDEX_MIN_BYTES`]; tests index tiny stores with 0).
    pub fn with_index_min_bytes(mut self, bytes: u64) -> FileStore {
        self.index_min_bytes = bytes;
        self
    }

    /// The id drawn when the store was created (in every store file's header).
    pub fn store_id(&self) -> &str {
        &self.store_id
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Take the lock file's lock, waiting up to `lock_wait` in [`LOCK_SLICE`]s; once the
    /// process is stopping ([`Store::hurry`](super::Store::hurry)) at most [`HURRY_WAIT`] more,
    /// so an owner told to stop while another process holds the lock gives its completions up
    /// to the spool instead of waiting out the holder (red team 7).
    fn flock(&self, lpath: &Path) -> StoreResult<()> {
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
                return Err(StoreError::LockTimeout {
                    file: lpath.to_path_buf(),
                    waited: Duration::from_millis(tenths.saturating_mul(100)),
                });
            }
        }
    }

    fn lock(&self) -> StoreResult<Locked<'_>> {
        let inner = self.inner.lock().unwrap_or_else(|e| {
            // A panic mid-operation may have left the cache half-updated: reload from disk.
            let mut g = e.into_inner();
            g.loaded = false;
            g
        });
        let lpath = self.path(LOCK_FILE);
        self.flock(&lpath)?;
        let mut l = Locked { store: self, inner };
        l.inner.rows_known.clear();
        if let Err(e) = l.refresh() {
            l.inner.loaded = false;
            return Err(e);
        }
        let end = l.mark_now();
        l.inner.acct_clean =
            l.inner.jobs.is_empty() || (l.inner.acct == Some(end) && !l.inner.history_sealed_open);
        l.inner.acct_upto = None;
        Ok(l)
    }

    /// Create or update one job without touching the others (the per-job path of `apply`).
    /// Returns true when the job was created.
    pub fn upsert_job(&self, def: &JobDef, now: DateTime<Utc>) -> StoreResult<bool> {
        let mut l = self.lock()?;
        let name = def.name.clone();
        l.load(&name)?;
        let step =
            plan::apply::apply_one(l.inner.hot.get_mut(&name).map(|c| &mut c.rec), def, now)?;
        let created = match step {
            plan::apply::ApplyStep::Unchanged => return Ok(false),
            plan::apply::ApplyStep::Updated => {
                if let Some(c) = l.inner.hot.get_mut(&name) {
                    c.sched = rules::slots::compile(&c.rec).ok();
                }
                false
            }
            plan::apply::ApplyStep::Created(rec) => {
                let mut c = Cached::new(*rec, None);
                // A new job has no rows in history yet.
                c.rows_to = Some(l.mark_now());
                insert_new(&mut l.inner, &name, c);
                true
            }
        };
        l.persist(&[], &[name])?;
        Ok(created)
    }

    /// Retention (SPEC §14.1): keep the newest `keep_per_job` rows of each job and, with
    /// `max_age`, only rows finished after `now - max_age`. Crash-safe rewrite.
    pub fn compact_history(
        &self,
        keep_per_job: usize,
        max_age: Option<chrono::Duration>,
        now: DateTime<Utc>,
    ) -> StoreResult<u64> {
        let mut l = self.lock()?;
        l.compact_history(keep_per_job, max_age.map(|a| now - a))
    }

    /// Append rows straight to history without touching any job record, sealing them (the
    /// open segment ends empty): for benchmarks and tests that need a large history fast.
    /// Sealed, they are history that every job record predates, so the journal/history
    /// cross-check (which reads the open segment) does not take them for runs whose records
    /// were lost.
    #[doc(hidden)]
    pub fn append_history_unrecorded(&self, rows: &[HistoryRow]) -> StoreResult<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut l = self.lock()?;
        l.append_history(rows)?;
        l.seal_open_segment()
    }

    #[cfg(test)]
    fn compact_jobs_for_test(&self) {
        let mut l = self.lock().expect("lock");
        l.compact_jobs().expect("compact");
    }
}

impl Locked<'_> {
    fn path(&self, name: &str) -> PathBuf {
        self.store.path(name)
    }

    fn io(&self) -> &dyn StoreIo {
        &*self.store.io
    }

    fn id(&self) -> &str {
        &self.store.store_id
    }

    /// Bring the cache up to date with the files. Never writes: a torn tail is left in place
    /// (a writer cuts it before its next append), a stale journal is left for a writer to
    /// replace.
    fn refresh(&mut self) -> StoreResult<()> {
        let jpath = self.path(JOURNAL_FILE);
        let Some(m) = stat(self.io(), &jpath)? else {
            return Err(missing(
                &jpath,
                "it holds every change since the last snapshot; falling back to the snapshot would run already-run slots again",
            ));
        };
        let j = &self.inner.journal;
        let before = self.inner.loaded.then_some((
            j.ino,
            j.len,
            self.inner.history.ino,
            self.inner.history.len,
        ));
        // A stale journal never grows (writers replace it before appending), so one that did is
        // reloaded (and judged) in full.
        if !self.inner.loaded
            || m.ino != j.ino
            || m.len < j.len
            || (self.inner.journal_stale && m.len > j.len)
        {
            self.full_reload()?;
        } else if m.len > j.len {
            self.read_journal_tail(m.len)?;
        }
        self.refresh_settings()?;
        self.refresh_history()?;
        // History grew while the journal did not change: rows whose job records never landed
        // (a process died or failed between the two writes). Remember them like our own failed
        // writes, so a claim does not write the same `missed`/overlap row again.
        if let Some((jino, jlen, hino, hlen)) = before {
            let inner = &mut *self.inner;
            let (j, h) = (&inner.journal, &inner.history);
            if j.ino == jino && j.len == jlen && h.ino == hino && h.len > hlen {
                if inner.unacked.len() >= UNACKED_RANGES {
                    inner.unacked.remove(0);
                }
                inner.unacked.push((hino, hlen, h.len));
            }
        }
        Ok(())
    }

    /// `apply` of a file whose names, bounds and chains were checked
    /// (`plan::apply::unique_names`): its definitions diffed against the store one at a time, as
    /// `apply_each` does (`jobs::Locked::apply_diff`: no record is held unless it changed).
    pub(super) fn apply_file(
        &mut self,
        file: &JobsFile,
        now: DateTime<Utc>,
    ) -> StoreResult<ApplyReport> {
        let mut defs = file.jobs.iter().cloned();
        self.apply_diff(
            &file.settings,
            &mut |sink| defs.try_for_each(&mut *sink),
            now,
        )
    }

    /// Write `settings` when they differ from the stored ones (the first step of `apply`).
    pub(super) fn write_settings(&mut self, settings: &Settings) -> StoreResult<()> {
        if self.inner.settings != *settings {
            let bytes = settings_bytes(self.id(), settings)?;
            let spath = self.path(SETTINGS_FILE);
            write_atomic(self.io(), &self.store.dir, &spath, &bytes)?;
            self.inner.settings_stamp = (0, 0, 0, 0);
            self.refresh_settings()?;
        }
        Ok(())
    }

    fn refresh_settings(&mut self) -> StoreResult<()> {
        let spath = self.path(SETTINGS_FILE);
        let Some(m) = stat(self.io(), &spath)? else {
            return Err(missing(
                &spath,
                "it holds the budget; running without it would remove every spending limit",
            ));
        };
        let stamp = (m.ino, m.mtime_sec, m.mtime_nsec, m.len);
        if stamp == self.inner.settings_stamp {
            return Ok(());
        }
        let text = self.io().read(&spath).map_err(io_err(&spath))?;
        if text.iter().all(u8::is_ascii_whitespace) {
            return Err(corrupt(&spath, 1, 1, "settings file is empty"));
        }
        let f: filefmt::SettingsFile<Settings> =
            serde_json::from_slice(&text).map_err(|e| json_err(&spath, e.line() as u64, &e))?;
        if f.cronsole != "settings" {
            return Err(corrupt(&spath, 1, 1, "not a cronsole settings file"));
        }
        check_id(&spath, Some(&f.store), self.id())?;
        filefmt::verify_settings(&text).map_err(|what| corrupt(&spath, 1, 1, what))?;
        self.inner.settings = f.settings;
        self.inner.settings_stamp = stamp;
        self.inner.names_unsynced = true;
        Ok(())
    }

    /// History rows first, then job records. A failure leaves the cache to be reloaded.
    /// Rows that a failed persist already put in history (see `Inner::unacked`) are not
    /// appended again.
    fn persist(&mut self, rows: &[HistoryRow], names: &[String]) -> StoreResult<()> {
        if self.inner.names_unsynced {
            if let Err(e) = self.io().sync_dir(&self.store.dir) {
                // The caller already changed the cache: nothing of it was written.
                self.inner.loaded = false;
                return Err(StoreError::io(&self.store.dir, e));
            }
            self.inner.names_unsynced = false;
        }
        let landed = if rows.is_empty() {
            Vec::new()
        } else {
            self.unacked_rows()?
        };
        let fresh: std::borrow::Cow<'_, [HistoryRow]> = if landed.is_empty() {
            std::borrow::Cow::Borrowed(rows)
        } else {
            rows.iter()
                .filter(|r| !landed.iter().any(|l| rules::rows::same_row(l, r)))
                .cloned()
                .collect::<Vec<_>>()
                .into()
        };
        let relies = std::mem::take(&mut self.inner.relies_on_landed) || fresh.len() < rows.len();
        if !fresh.is_empty()
            && let Err(e) = self.sync_journal()
        {
            // Nothing of the cache's change was written.
            self.inner.loaded = false;
            return Err(e);
        }
        let (ino, before) = (self.inner.history.ino, self.inner.history.len);
        let r = self
            .append_history(&fresh)
            .and_then(|_| {
                if relies && fresh.is_empty() {
                    self.sync_history()
                } else {
                    Ok(())
                }
            })
            .and_then(|_| self.append_jobs(names));
        if r.is_err() {
            self.inner.loaded = false;
            if !fresh.is_empty() {
                self.note_unacked(ino, before);
            }
        }
        r
    }

    fn period(&self) -> crate::model::BudgetPeriod {
        crate::cost::budget_period(&self.inner.settings)
    }

    /// Record the end `row` of a run of `parent` in its `after:` children's cached records;
    /// returns the children whose records changed (to persist with the parent's).
    fn chain_fan_out(&mut self, parent: &str, row: &HistoryRow) -> StoreResult<Vec<String>> {
        if !policy::chain::may_fire(row) || self.inner.chained.is_empty() {
            return Ok(Vec::new());
        }
        self.load(parent)?;
        let Some(def) = self.inner.hot.get(parent).map(|c| c.rec.def.clone()) else {
            return Ok(Vec::new());
        };
        let candidates: Vec<String> = self.inner.chained.iter().cloned().collect();
        let mut changed = Vec::new();
        for name in candidates {
            self.load(&name)?;
            if let Some(c) = self.inner.hot.get_mut(&name)
                && policy::chain::is_child_of(&c.rec.def, parent)
                && policy::chain::record(&mut c.rec, &def, row)
            {
                changed.push(name);
            }
        }
        Ok(changed)
    }
}

impl HistoryReader for FileStore {
    fn job(&self, name: &str) -> StoreResult<Option<JobRecord>> {
        self.lock()?.record(name)
    }

    fn history(&self, q: &HistoryQuery) -> StoreResult<Vec<HistoryRow>> {
        self.query_history(q)
    }

    /// Page tokens are history positions (`segment.offset` of the page's last row).
    fn history_page(&self, q: &HistoryQuery) -> StoreResult<HistoryPage> {
        self.query_page(q)
    }
}

impl Store for FileStore {
    fn location(&self) -> String {
        self.dir.display().to_string()
    }

    /// inotify on the store directory (see `super::signal`).
    fn change_signal(&self) -> Option<super::signal::ChangeSignal> {
        const WATCHED: &[&str] = &[SNAPSHOT_FILE, JOURNAL_FILE, HISTORY_FILE, SETTINGS_FILE];
        super::signal::watch_dir(&self.dir, WATCHED)
    }

    fn apply(&self, file: &JobsFile, now: DateTime<Utc>) -> StoreResult<ApplyReport> {
        plan::apply::unique_names(file)?;
        self.lock()?.apply_file(file, now)
    }

    fn apply_each(
        &self,
        settings: &Settings,
        feed: &mut dyn FnMut(crate::store::DefSink<'_>) -> StoreResult<()>,
        now: DateTime<Utc>,
    ) -> StoreResult<ApplyReport> {
        let bare = JobsFile {
            settings: settings.clone(),
            jobs: Vec::new(),
        };
        crate::config::check_bounds(&bare).map_err(StoreError::OutOfBounds)?;
        self.lock()?.apply_each(settings, feed, now)
    }

    fn settings(&self) -> StoreResult<Settings> {
        Ok(self.lock()?.inner.settings.clone())
    }

    fn change_token(&self) -> StoreResult<u64> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for name in [JOURNAL_FILE, HISTORY_FILE, SETTINGS_FILE] {
            match stat(&*self.io, &self.path(name))? {
                Some(m) => (m.ino, m.len, m.mtime_sec, m.mtime_nsec).hash(&mut h),
                None => 0u8.hash(&mut h),
            }
        }
        Ok(h.finish())
    }

    fn jobs(&self) -> StoreResult<Vec<JobRecord>> {
        let l = self.lock()?;
        let mut out = Vec::with_capacity(l.inner.jobs.len());
        l.each_record(None, |r| {
            out.push(r);
            true
        })?;
        Ok(out)
    }

    /// Reads the page's lines only (the index is in name order), in a few large reads under
    /// the lock, and parses them after releasing it (a reader thread of `jobs --json` holds the
    /// lock for the reads only). A line that fails there is read again under the lock, where
    /// the error names its file and line.
    fn jobs_page(&self, after: Option<&str>, limit: usize) -> StoreResult<Vec<JobRecord>> {
        let raw = self.lock()?.page_lines(after, limit)?;
        match raw.parse_unlocked() {
            Some(records) => Ok(records),
            None => self.lock()?.page_records(after, limit),
        }
    }

    /// The page's lines read as [`Store::jobs_page`] does; outside the lock each line's
    /// checksum is verified and its `job` member located, nothing parsed. A line that fails
    /// there sends the whole page through [`Store::jobs_page`]'s path under the lock (parsed
    /// records, or the error naming the file and line).
    fn jobs_page_json(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> StoreResult<crate::store::JsonPage> {
        let raw = self.lock()?.page_lines(after, limit)?;
        match raw.into_json() {
            Some(page) => Ok(page),
            None => Ok(crate::store::JsonPage {
                buf: String::new(),
                jobs: self
                    .lock()?
                    .page_records(after, limit)?
                    .into_iter()
                    .map(|r| crate::store::PageJob::Record(Box::new(r)))
                    .collect(),
            }),
        }
    }

    /// Minimum over the wake-up index. It includes lease expiries of every owner's runs, so a
    /// caller whose own run outlived its lease sees a past instant until that run completes;
    /// the engine should treat a past wake-up for a job it has in flight as "no work".
    fn next_wakeup(&self, now: DateTime<Utc>) -> StoreResult<Option<DateTime<Utc>>> {
        let _ = now;
        let mut l = self.lock()?;
        Ok(l.inner.jobs.first_wake())
    }

    fn claim_due(&self, req: &ClaimRequest<'_>) -> StoreResult<ClaimOutcome> {
        let now = req.now;
        let mut l = self.lock()?;
        let due: Vec<String> = l.inner.jobs.due(now);
        if due.is_empty() {
            return Ok(ClaimOutcome::default());
        }
        let in_flight: HashSet<&str> = req.in_flight.iter().map(String::as_str).collect();
        let period = l.period();
        // Rows a failed persist of this handle already wrote (a retried claim or recovery).
        let unacked = l.unacked_rows()?;
        let mark = l.mark_now();
        // Generated rows past the store's accounted mark (`Inner::acct`): a writer put them
        // there and failed or died before its records. Usually none, known without a read.
        // Every job they belong to is evaluated with them (a claim that generates no row of
        // its own does not scan: seed 19652), and the mark moves past those its records now
        // account for. `None`: the mark is unknown (a store written before it existed) or
        // the stretch too long to read; claims then scan only when they generate rows.
        let tail: Option<Vec<(jobs::Mark, HistoryRow)>> = if l.inner.acct_clean {
            Some(Vec::new())
        } else {
            match l.inner.acct {
                Some(a) => l.generated_after(a)?,
                None => None,
            }
        };
        let tail_rows: Vec<HistoryRow> = tail.iter().flatten().map(|(_, r)| r.clone()).collect();
        let mut evaluated = HashSet::new();
        let mut rows = Vec::new();
        let mut changed = Vec::new();
        let mut plans = Vec::new();
        let mut late = Vec::new();
        let mut relies = false;
        // Generated rows per job, with the rows already known to have landed for it; the rows
        // are filtered once the scan for leftovers (`rows_since_records`) is done.
        let mut generated: Vec<(String, Vec<HistoryRow>, Vec<HistoryRow>)> = Vec::new();
        // Jobs whose step generates rows (a recovery, `missed`, overlap) are scanned for rows a
        // dead or failed writer left after their records (`rows_since_records`) before they
        // are evaluated: such a writer may have looked at a later clock, so its rows can
        // record the slot this step would claim or record next (`plan::claim::skip_recorded`). A
        // probe of the step on a copy of the record tells which jobs generate rows; jobs that
        // generate none are not scanned (see the module doc).
        let mut runs = HashMap::new();
        let mut scan = Vec::new();
        // Due jobs are evaluated in wake-up order until `limit` of them would start a run: the
        // rest stay due, untouched, for the next claim (the engine claims again as runs end).
        // Reading and parsing every due record on every claim cost a 10 000-job burst
        // ≈ 100 000 parses (a third of the engine's CPU). Jobs that only generate rows
        // (`missed`, overlap, a recovery without a new run) do not count against the limit;
        // with `limit` 0 every due job is evaluated, as a claim that starts nothing.
        let mut would_start = 0;
        for name in &due {
            if req.limit > 0 && would_start >= req.limit {
                break;
            }
            if in_flight.contains(name.as_str()) || !l.load(name)? {
                continue;
            }
            let Some(c) = l.inner.hot.get(name).filter(|c| c.sched.is_some()) else {
                continue;
            };
            // Every expired lease's own row, if it landed (`overlap: allow` holds several: a
            // writer that failed between their rows and the record leaves one for each).
            let expired: Vec<(Uuid, Option<jobs::Mark>)> = c
                .rec
                .rt
                .leases()
                .filter(|lease| lease.lease_until <= now)
                .map(|lease| (lease.run_id, c.mark))
                .collect();
            let (mut landed, mut after) = (Vec::new(), Vec::new());
            for (run_id, mark) in expired {
                let (row, rest) = l.find_run_rows(mark, run_id, Some(name))?;
                landed.extend(row);
                after.extend(rest);
            }
            let Some(c) = l.inner.hot.get(name) else {
                continue;
            };
            let Some(sched) = c.sched.as_ref() else {
                continue;
            };
            let mut probe = c.rec.clone();
            let ev = plan::claim::claim_step_recorded(
                &mut probe,
                sched,
                now,
                req.owner,
                true,
                period,
                landed.clone(),
                &[],
            );
            if !ev.rows.is_empty() {
                scan.push((name.clone(), c.rows_to));
            }
            would_start += usize::from(ev.claim.is_some());
            runs.insert(name.clone(), (landed, after));
        }
        // Rows an operation wrote before dying (or failing) ahead of these jobs' records.
        let mut leftovers = l.rows_since_records(&scan)?;
        for name in due {
            let Some((landed, after)) = runs.remove(&name) else {
                continue;
            };
            let Some(c) = l.inner.hot.get(&name) else {
                continue;
            };
            let Some(sched) = c.sched.clone() else {
                continue;
            };
            relies |= !landed.is_empty();
            let recorded: Vec<HistoryRow> = unacked
                .iter()
                .chain(&after)
                .chain(&leftovers)
                .chain(&tail_rows)
                .filter(|r| r.job == name && rules::rows::is_generated(r))
                .cloned()
                .collect();
            let can = plans.len() < req.limit;
            let Some(c) = l.inner.hot.get_mut(&name) else {
                continue;
            };
            let recovering = rules::runtime::expired_lease(&c.rec, now);
            let landed_end = landed.clone();
            let ev = plan::claim::claim_step_recorded(
                &mut c.rec, &sched, now, req.owner, can, period, landed, &recorded,
            );
            evaluated.insert(name.clone());
            // The mark covers every live run of the job (`overlap: allow` runs several): it
            // is cleared only when none is left, and a claim beside live runs keeps the older.
            let others_live = c.rec.rt.live_runs() > usize::from(ev.claim.is_some());
            if recovering.is_some() && !others_live {
                c.mark = None;
            }
            let chain_end = recovering.as_ref().and_then(|lease| {
                landed_end
                    .iter()
                    .chain(&ev.rows)
                    .find(|r| r.run_id == lease.run_id)
                    .cloned()
            });
            if !ev.rows.is_empty() {
                if !scan.iter().any(|(n, _)| *n == name) {
                    late.push((name.clone(), c.rows_to));
                }
                generated.push((name.clone(), ev.rows, after));
            }
            if let Some(p) = ev.claim {
                if !others_live || c.mark.is_none() {
                    c.mark = Some(mark);
                }
                plans.push((name.clone(), p));
            }
            // The recovered run's end (its landed row, or the `abandoned` row written now)
            // reaches its `after:` children in this same persist, before its own record.
            if let Some(end) = chain_end {
                for child in l.chain_fan_out(&name, &end)? {
                    if !changed.contains(&child) {
                        changed.push(child);
                    }
                }
            }
            if ev.changed {
                changed.push(name);
            }
        }
        // Jobs with rows past the accounted mark that were not evaluated (not due, or run by
        // this owner): their next slot moves past what those rows record, as a claim's would.
        if let Some(tail) = &tail {
            let names: BTreeSet<&str> = tail.iter().map(|(_, r)| r.job.as_str()).collect();
            for name in names {
                if evaluated.contains(name) || !l.load(name)? {
                    continue;
                }
                let Some(c) = l.inner.hot.get_mut(name) else {
                    continue;
                };
                let Some(sched) = c.sched.clone() else {
                    continue;
                };
                if plan::claim::skip_recorded(&mut c.rec, &sched, &tail_rows)
                    && !changed.iter().any(|n| n == name)
                {
                    changed.push(name.to_string());
                }
            }
            // The mark moves up to the first row no record accounts for now: one whose job
            // still has a slot it records ahead (it stays for the claims after this one).
            let unaccounted = tail
                .iter()
                .filter(|(_, r)| match l.inner.hot.get(&r.job) {
                    Some(c) => c.sched.is_none() || !plan::claim::slots_behind(&c.rec, r),
                    None => l.inner.jobs.contains_key(&r.job),
                })
                .map(|(at, _)| *at)
                .next();
            match unaccounted {
                None => l.inner.acct_clean = true,
                Some(at) => l.inner.acct_upto = Some(at),
            }
        }
        // A job the probe did not expect to generate rows: scanned now (its rows are trimmed).
        leftovers.extend(l.rows_since_records(&late)?);
        scan.extend(late);
        l.inner
            .rows_known
            .extend(scan.iter().map(|(name, _)| name.clone()));
        for (name, ev_rows, after) in generated {
            let known: Vec<HistoryRow> = unacked
                .iter()
                .chain(&after)
                .chain(&leftovers)
                .chain(tail_rows.iter())
                .filter(|r| r.job == name)
                .cloned()
                .collect();
            if known.is_empty() {
                rows.extend(ev_rows);
                continue;
            }
            // Rows trimmed or dropped here rely on the landed ones.
            relies = true;
            let Some(sched) = l.inner.hot.get(&name).and_then(|c| c.sched.clone()) else {
                rows.extend(ev_rows);
                continue;
            };
            rows.extend(
                ev_rows
                    .into_iter()
                    .flat_map(|r| rules::rows::unlanded_part(r, &known, &sched)),
            );
        }
        l.inner.relies_on_landed |= relies;
        let kept = self.attach_run_records(&mut rows);
        l.persist(&rows, &changed)?;
        self.remove_run_records(kept);
        let claims = plans
            .into_iter()
            .filter_map(|(name, p)| {
                l.inner.hot.get(&name).map(|c| Claim {
                    run_id: p.run_id,
                    job: c.rec.clone(),
                    slot: p.slot,
                    trigger: p.trigger,
                    lease_until: p.lease_until,
                })
            })
            .collect();
        Ok(ClaimOutcome { claims, rows })
    }

    fn renew(
        &self,
        job: &str,
        run_id: Uuid,
        owner: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<RenewOutcome> {
        let _ = owner;
        let mut l = self.lock()?;
        l.load(job)?;
        let Some(c) = l.inner.hot.get_mut(job) else {
            return Err(StoreError::NoSuchJob(job.to_string()));
        };
        match rules::runtime::renew(&mut c.rec, run_id, now) {
            Some(lease_until) => {
                l.persist(&[], &[job.to_string()])?;
                Ok(RenewOutcome::Renewed { lease_until })
            }
            None => Ok(RenewOutcome::Lost),
        }
    }

    fn complete(&self, c: Completion) -> StoreResult<CompleteOutcome> {
        self.complete_many(vec![c])
            .pop()
            .unwrap_or_else(|| Err(StoreError::Internal("no completion result".into())))
    }

    /// Group commit: every completion under one lock, their rows in one history append (one
    /// fdatasync) and their job records in one journal append (one more), so runs that end
    /// together do not queue one fsync pair each behind the lock (claims wait less).
    fn complete_many(&self, cs: Vec<Completion>) -> Vec<StoreResult<CompleteOutcome>> {
        self.complete_batch(cs, false)
    }

    /// The run's row may already be in history while its job record is not (a failed
    /// persist of another handle or process, then a stop: the spool replay; see the module
    /// doc): the record is finished from that row, found from the claim's mark.
    fn complete_recorded(&self, c: Completion) -> StoreResult<CompleteOutcome> {
        self.complete_batch(vec![c], true)
            .pop()
            .unwrap_or_else(|| Err(StoreError::Internal("no completion result".into())))
    }

    fn set_paused(&self, name: &str, paused: bool, now: DateTime<Utc>) -> StoreResult<()> {
        let mut l = self.lock()?;
        l.load(name)?;
        let Some(c) = l.inner.hot.get_mut(name) else {
            return Err(StoreError::NoSuchJob(name.to_string()));
        };
        let changed = policy::operator::pause_step(&mut c.rec, paused, now)?;
        if changed {
            l.persist(&[], &[name.to_string()])?;
        }
        Ok(())
    }

    fn request_trigger(&self, name: &str, now: DateTime<Utc>) -> StoreResult<TriggerOutcome> {
        let mut l = self.lock()?;
        l.load(name)?;
        let Some(c) = l.inner.hot.get_mut(name) else {
            return Err(StoreError::NoSuchJob(name.to_string()));
        };
        let (outcome, changed) = policy::operator::trigger_step(&mut c.rec, now)?;
        if changed {
            l.persist(&[], &[name.to_string()])?;
        }
        Ok(outcome)
    }

    fn update_job(
        &self,
        name: &str,
        edit: &super::JobEdit,
        now: DateTime<Utc>,
    ) -> StoreResult<super::EditOutcome> {
        let mut l = self.lock()?;
        l.load(name)?;
        let Some(c) = l.inner.hot.get_mut(name) else {
            return Err(StoreError::NoSuchJob(name.to_string()));
        };
        let mut rows = Vec::new();
        let (changed, out) = policy::operator::apply_edit_rows(&mut c.rec, edit, now, &mut rows)?;
        if changed {
            l.persist(&rows, &[name.to_string()])?;
        }
        Ok(out)
    }

    fn hurry(&self, on: bool) {
        self.hurry.store(on, std::sync::atomic::Ordering::SeqCst);
    }

    fn bulk_edit(
        &self,
        names: &[String],
        action: &super::BulkAction,
        now: DateTime<Utc>,
    ) -> super::BulkDone {
        let fail = |e| super::BulkDone {
            done: Vec::new(),
            error: Some(e),
        };
        let mut l = match self.lock() {
            Ok(l) => l,
            Err(e) => return fail(e),
        };
        let mut rows = Vec::new();
        let mut tally = policy::operator::BulkTally::new(names.len());
        for name in names {
            let step = l.load(name).and_then(|_| {
                let c = l
                    .inner
                    .hot
                    .get_mut(name.as_str())
                    .ok_or_else(|| StoreError::NoSuchJob(name.clone()))?;
                policy::operator::bulk_step(&mut c.rec, action, now, &mut rows)
            });
            // A failed job's record may be half-edited in the cache: it is not written (not in
            // `changed`), and the cache goes with the lock.
            if !tally.step(name, step) {
                break;
            }
        }
        // The whole chunk in one append of the journal (and history): one fsync.
        if !(rows.is_empty() && tally.changed.is_empty())
            && let Err(e) = l.persist(&rows, &tally.changed)
        {
            return fail(e);
        }
        tally.into_done()
    }

    fn spend(&self, job: &str, now: DateTime<Utc>) -> StoreResult<SpendNow> {
        let l = self.lock()?;
        let settings = &l.inner.settings;
        let Some(rec) = l.record(job)? else {
            return Err(StoreError::NoSuchJob(job.to_string()));
        };
        let job_usd = super::stats::period_spend(&rec, settings, now);
        // From the index: only jobs with budget counters carry any.
        let global_usd = crate::cost::sum_usd(
            l.inner
                .jobs
                .values()
                .filter_map(|s| s.spend.as_deref())
                .map(|c| super::stats::period_spend_counters(c, settings, now)),
        );
        Ok(SpendNow {
            global_usd,
            job_usd,
        })
    }

    fn reserve(&self, req: &ReserveRequest<'_>) -> StoreResult<ReserveOutcome> {
        let mut l = self.lock()?;
        // Every job's committed spend, from the index (only jobs with budget counters).
        let key = crate::cost::budget_period(&l.inner.settings).key(req.now);
        let mut global = rules::period::Totals::default();
        for c in l.inner.jobs.values().filter_map(|s| s.spend.as_deref()) {
            let (s, h) = rules::period::committed_counters(c, &key);
            global.spent += s;
            global.held += h;
        }
        if !l.load(req.job)? {
            return Err(StoreError::NoSuchJob(req.job.to_string()));
        }
        let Some(mine) = l.inner.hot.get(req.job) else {
            return Err(StoreError::NoSuchJob(req.job.to_string()));
        };
        let (s, h) = rules::period::committed(&mine.rec, &key);
        let job = rules::period::Totals { spent: s, held: h };
        let verdict = policy::budget::decide_totals(
            &l.inner.settings,
            global,
            mine.rec.def.max_cost_usd,
            job,
            req,
        );
        let key = match verdict {
            Ok(key) => key,
            Err(reason) => return Ok(ReserveOutcome::Refused { reason }),
        };
        let Some(c) = l.inner.hot.get_mut(req.job) else {
            return Err(StoreError::NoSuchJob(req.job.to_string()));
        };
        let id = policy::budget::record(&mut c.rec, req, key);
        l.persist(&[], &[req.job.to_string()])?;
        Ok(ReserveOutcome::Reserved { id })
    }

    fn loop_step(&self, s: &super::LoopStep<'_>) -> StoreResult<super::StepOutcome> {
        self.step(s)
    }

    fn settle(&self, job: &str, id: Uuid, how: Settlement, _now: DateTime<Utc>) -> StoreResult<()> {
        let mut l = self.lock()?;
        l.load(job)?;
        let Some(c) = l.inner.hot.get_mut(job) else {
            return Err(StoreError::NoSuchJob(job.to_string()));
        };
        if policy::budget::settle(&mut c.rec, id, how) {
            l.persist(&[], &[job.to_string()])?;
        }
        Ok(())
    }
}

impl FileStore {
    /// Group commit (see [`Store::complete_many`]). With `lookup`, each completion whose job
    /// record still holds its run also looks for the run's own row in history from the claim's
    /// mark ([`Store::complete_recorded`]): found, the record is finished from it and it is
    /// not appended again. An error before the plan is written fails every completion.
    fn complete_batch(
        &self,
        cs: Vec<Completion>,
        lookup: bool,
    ) -> Vec<StoreResult<CompleteOutcome>> {
        let n = cs.len();
        self.lock()
            .and_then(|mut l| l.complete_batch(cs, lookup))
            .unwrap_or_else(|e| {
                let mut out: Vec<_> = (1..n).map(|_| Err(e.duplicate())).collect();
                out.insert(0, Err(e));
                out
            })
    }
}

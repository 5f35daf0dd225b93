//! The embedded file store (SPEC §14.1): a directory shared safely by several processes on one
//! host through an exclusive `fs4` lock.
//!
//! Owns: the on-disk layout, locking, crash safety, the per-handle cache and history queries.
//! Must not touch: scheduling decisions (those live in [`super::logic`], shared with the
//! PostgreSQL store), clocks (every call takes `now`), the engine, the UI.
//!
//! # Layout (all human-readable; format 2, see [`super::filefmt`])
//! - `VERSION` — `cronsole-file-store 2` and `store <uuid>`, the store id drawn at creation.
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
//! - `settings.json` — `{"cronsole":"settings","store":ID,"settings":{...}}` (temp + rename).
//! - `history.jsonl` — a header `{"cronsole":"history","store":ID}`, then one §4 row per line,
//!   newest at the end, each with its CRC-32 (`"crc32"`, see [`super::filefmt`]).
//!
//! Every file above is required once the store exists: missing, empty, foreign (another store
//! id), out-of-generation or unparsable is [`StoreError::Corrupt`] naming it, and nothing is
//! modified. Opening ([`FileStore::open_existing`], or the load under each lock) never writes;
//! only [`FileStore::open`] creates a store or migrates a format-1 one (under the lock).

//! # Cache and change detection
//! Each handle keeps the parsed records, a wake-up index (`BTreeSet<(instant, name)>`) and the
//! journal's inode + offset. On each lock acquisition it stats the journal: unchanged → nothing
//! to parse (idle claim is a stat and an index peek); grown → only the new tail is read;
//! replaced → full reload. Every mutation appends only the records it changed, so add /
//! complete / pause cost O(1) amortised regardless of the number of jobs.
//!
//! # Crash safety
//! Appends are one `write` of whole lines followed by `fdatasync` (`AppendLog`, one path for
//! both logs). A final line without its newline was never acknowledged: loading ignores it
//! without touching it, and the next writer cuts it (with a `warn!`) right before its append; a
//! log shorter than what this handle already read is corruption. Write order for a run's end:
//! history row(s) first, then the job record. Each lease remembers where history ended at claim
//! time (`mark`); before recovery writes `abandoned` for an expired lease it scans history from
//! there for the run_id, and if the run's row is already there (the process died between the two
//! writes) it finishes the job from that row instead of writing a second one. A `missed` row
//! whose job record did not reach the journal can be written twice (never lost); that is the
//! chosen side of the trade-off.
//!
//! # History corruption checks
//! Every history row carries a CRC-32 of itself, so a flipped byte that still parses is caught
//! by whoever reads the row. Every open verifies the last `OPEN_VERIFY_BYTES` (4 MiB) row by
//! row — checksum and parse — so the rows appends land after are sound; queries, retention and
//! `cronsole check` verify every row they read. Why not the whole file at open: issue 12 wants
//! claiming within 2 s at 10 000 000 rows (~3 GB). The remaining gap (a flip older than the
//! last 4 MiB is found by the next reader of that row, not before the next append) closes by
//! sealing history into checksummed segments, which is not built yet (README, Known limits).
//!
//! # Retention
//! `compact_history` keeps the newest N rows per job (default 10 000) and/or rows newer than a
//! maximum age, by writing a new file (temp + fsync + rename + fsync dir). `complete` runs it
//! automatically when history doubled since this handle last compacted (and is over 64 MiB).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::filefmt;
use super::io::{IoFile, Meta, OpenMode, RealIo, StoreIo};
use super::logic;
use super::*;
use crate::model::{HistoryRow, JobDef, JobRecord, JobsFile, Settings};
use crate::schedule::Compiled;

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
/// How much of history's end every open verifies row by row (checksum + parse).
const OPEN_VERIFY_BYTES: u64 = 4 * 1024 * 1024;

/// Where history ended when a lease was taken (file identity + length).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Mark {
    ino: u64,
    off: u64,
}

#[derive(Serialize)]
struct EntryRef<'a> {
    job: &'a JobRecord,
    #[serde(skip_serializing_if = "Option::is_none")]
    mark: Option<Mark>,
}

#[derive(Deserialize)]
struct Entry {
    job: JobRecord,
    #[serde(default)]
    mark: Option<Mark>,
}

struct Cached {
    rec: JobRecord,
    sched: Option<Compiled>,
    mark: Option<Mark>,
    wake: Option<DateTime<Utc>>,
}

impl Cached {
    fn new(rec: JobRecord, mark: Option<Mark>) -> Cached {
        let sched = match logic::compile(&rec) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(job = %rec.def.name, "stored schedule does not compile: {e}");
                None
            }
        };
        Cached {
            rec,
            sched,
            mark,
            wake: None,
        }
    }
}

/// One append-only log file (the jobs journal, history): its open handle, identity and the
/// end of its last complete line. Both logs share this one append path.
#[derive(Default)]
struct AppendLog {
    file: Option<Box<dyn IoFile>>,
    ino: u64,
    /// End of the last complete line: bytes after it are a torn, never-acknowledged write.
    len: u64,
}

impl AppendLog {
    fn file(&self, path: &Path) -> StoreResult<&dyn IoFile> {
        self.file
            .as_deref()
            .ok_or_else(|| StoreError::Internal(format!("{} is not open", path.display())))
    }

    /// Append whole lines with one write + fdatasync. A torn tail a crashed writer left after
    /// `len` is cut first (and logged); a file shorter than `len` was truncated behind our
    /// back: corruption, nothing written.
    fn append(&mut self, path: &Path, bytes: &[u8]) -> StoreResult<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let f = self.file(path)?;
        let actual = f.metadata().map_err(io_err(path))?.len;
        if actual < self.len {
            return Err(corrupt(
                path,
                0,
                0,
                format!(
                    "file shrank from {} to {actual} bytes while open (truncated by something else)",
                    self.len
                ),
            ));
        }
        if actual > self.len {
            tracing::warn!(
                file = %path.display(),
                "cutting a torn final line ({} bytes, never acknowledged)",
                actual - self.len
            );
            f.set_len(self.len).map_err(io_err(path))?;
        }
        f.write_all(bytes).map_err(io_err(path))?;
        f.sync_data().map_err(io_err(path))?;
        self.len += bytes.len() as u64;
        Ok(())
    }
}

#[derive(Default)]
struct Inner {
    loaded: bool,
    jobs: BTreeMap<String, Cached>,
    wake: BTreeSet<(DateTime<Utc>, String)>,
    generation: u64,
    snapshot_len: u64,
    journal: AppendLog,
    /// The journal is a leftover of the previous generation (crash mid-compaction, verified by
    /// the snapshot's `absorbed` record): its records are in the snapshot; a writer replaces it
    /// before appending.
    journal_stale: bool,
    history: AppendLog,
    history_compacted_len: u64,
    settings: Settings,
    settings_stamp: (u64, i64, i64, u64),
}

/// The file store. Cheap to open; each handle has its own lock fd and cache.
pub struct FileStore {
    dir: PathBuf,
    io: Arc<dyn StoreIo>,
    lock: Box<dyn IoFile>,
    lock_wait: Duration,
    store_id: String,
    inner: Mutex<Inner>,
}

struct Locked<'a> {
    store: &'a FileStore,
    inner: MutexGuard<'a, Inner>,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.store.lock.unlock() {
            tracing::warn!("unlocking the store failed: {e}");
        }
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |e| StoreError::io(path, e)
}

/// Write `bytes` to `path` atomically: temp + fsync + rename + fsync dir.
fn write_atomic(io: &dyn StoreIo, dir: &Path, path: &Path, bytes: &[u8]) -> StoreResult<()> {
    // A temp name of our own: two processes must never rename each other's temp file away.
    let tmp = path.with_extension(format!(
        "tmp.{}.{}",
        std::process::id(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    ));
    let f = io
        .open(&tmp, OpenMode::CreateTruncate)
        .map_err(io_err(&tmp))?;
    let written = f.write_all(bytes).and_then(|_| f.sync_all());
    drop(f);
    if let Err(e) = written {
        // Do not leave a half-written temp file behind (e.g. a full disk).
        let _ = io.remove_file(&tmp);
        return Err(StoreError::io(&tmp, e));
    }
    if let Err(e) = io.rename(&tmp, path) {
        let _ = io.remove_file(&tmp);
        return Err(StoreError::io(path, e));
    }
    io.sync_dir(dir).map_err(io_err(dir))
}

fn corrupt(path: &Path, line: u64, column: u64, what: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        file: path.to_path_buf(),
        line,
        column,
        what: what.into(),
    }
}

fn json_err(path: &Path, line: u64, e: &serde_json::Error) -> StoreError {
    corrupt(path, line, e.column() as u64, e.to_string())
}

/// End of the last complete line of the first `len` bytes of `f` (0 if none).
fn complete_len(path: &Path, f: &dyn IoFile, len: u64) -> StoreResult<u64> {
    let mut end = len;
    while end > 0 {
        let start = end.saturating_sub(BLOCK);
        let mut buf = vec![0u8; (end - start) as usize];
        read_at(f, path, start, &mut buf)?;
        if let Some(i) = buf.iter().rposition(|b| *b == b'\n') {
            return Ok(start + i as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

fn read_at(f: &dyn IoFile, path: &Path, off: u64, buf: &mut [u8]) -> StoreResult<()> {
    f.read_exact_at(buf, off).map_err(io_err(path))
}

/// Newlines in `[0, off)` of `f` (the line number of the line starting at `off`, minus one).
fn count_lines_before(f: &dyn IoFile, path: &Path, off: u64) -> StoreResult<u64> {
    let mut pos = 0u64;
    let mut n = 0u64;
    let mut buf = vec![0u8; BLOCK as usize];
    while pos < off {
        let want = (off - pos).min(BLOCK) as usize;
        read_at(f, path, pos, &mut buf[..want])?;
        n += buf[..want].iter().filter(|b| **b == b'\n').count() as u64;
        pos += want as u64;
    }
    Ok(n)
}

fn stat(io: &dyn StoreIo, path: &Path) -> StoreResult<Option<Meta>> {
    super::io::stat_opt(io, path).map_err(io_err(path))
}

/// A history line (without its newline): checksum first, then the row.
fn parse_history_line(path: &Path, line_no: u64, line: &[u8]) -> StoreResult<HistoryRow> {
    filefmt::verify_row(line).map_err(|(col, what)| corrupt(path, line_no, col, what))?;
    serde_json::from_slice(line).map_err(|e| json_err(path, line_no, &e))
}

/// A required file that is not there: corruption, never a reset to empty.
fn missing(path: &Path, why: &str) -> StoreError {
    corrupt(path, 0, 0, format!("required store file is missing: {why}"))
}

/// Check a header's store id against the store's.
fn check_id(path: &Path, found: Option<&str>, id: &str) -> StoreResult<()> {
    match found {
        Some(f) if f == id => Ok(()),
        Some(f) => Err(corrupt(
            path,
            1,
            1,
            format!(
                "file belongs to another store (store id {f}, this store is {id}); was it copied in?"
            ),
        )),
        None => Err(corrupt(path, 1, 1, "header carries no store id")),
    }
}

fn encode_line<T: Serialize>(out: &mut Vec<u8>, what: &'static str, v: &T) -> StoreResult<()> {
    serde_json::to_writer(&mut *out, v).map_err(StoreError::encode(what))?;
    out.push(b'\n');
    Ok(())
}

fn header_line(
    kind: &str,
    generation: u64,
    id: &str,
    absorbed: Option<filefmt::Absorbed>,
) -> StoreResult<Vec<u8>> {
    let mut buf = Vec::new();
    encode_line(
        &mut buf,
        "store file header",
        &filefmt::Header {
            cronsole: kind.into(),
            generation,
            store: Some(id.to_string()),
            absorbed,
        },
    )?;
    Ok(buf)
}

fn settings_bytes(id: &str, settings: &Settings) -> StoreResult<Vec<u8>> {
    serde_json::to_vec_pretty(&filefmt::SettingsFile {
        cronsole: "settings".to_string(),
        store: id.to_string(),
        settings,
    })
    .map_err(StoreError::encode("settings"))
}

fn history_header(id: &str) -> StoreResult<Vec<u8>> {
    let mut buf = Vec::new();
    encode_line(
        &mut buf,
        "history header",
        &filefmt::HistoryHeader {
            cronsole: "history".into(),
            store: id.to_string(),
        },
    )?;
    Ok(buf)
}

/// How [`FileStore`] may treat the directory when opening it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpenAs {
    /// Create it if missing, migrate a previous-release store (engine, `apply`).
    Writer,
    /// It must exist in the current format; opening writes nothing.
    Existing,
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

    pub fn open_existing_with_io(dir: &Path, io: Arc<dyn StoreIo>) -> StoreResult<FileStore> {
        FileStore::open_as(dir, io, OpenAs::Existing)
    }

    fn open_as(dir: &Path, io: Arc<dyn StoreIo>, how: OpenAs) -> StoreResult<FileStore> {
        let vpath = dir.join(VERSION_FILE);
        let not_a_store = || missing(&vpath, "this directory is not a cronsole store");
        match how {
            OpenAs::Writer => io.create_dir_all(dir).map_err(io_err(dir))?,
            OpenAs::Existing => {
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
            if how == OpenAs::Existing {
                return Ok(version);
            }
            Ok(match version {
                None => {
                    let id = Uuid::new_v4().to_string();
                    Self::create(&*io, dir, &id)?;
                    Some((2, Some(id)))
                }
                Some((1, _)) => {
                    let id = Uuid::new_v4().to_string();
                    migrate_v1(&*io, dir, &id)?;
                    Some((2, Some(id)))
                }
                v => v,
            })
        })();
        if let Err(e) = lock.unlock() {
            tracing::warn!("unlocking the store failed: {e}");
        }
        let store_id = match r? {
            Some((2, Some(id))) => id,
            None => return Err(not_a_store()),
            Some(_) => {
                return Err(StoreError::Version {
                    file: vpath,
                    found: "cronsole-file-store 1 (previous release)".to_string(),
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
            store_id,
            inner: Mutex::new(Inner::default()),
        };
        {
            let l = store.lock()?;
            l.verify_history_end()?;
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
        write_atomic(io, dir, &p(HISTORY_FILE), &history_header(id)?)?;
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

    /// The id drawn when the store was created (in every store file's header).
    pub fn store_id(&self) -> &str {
        &self.store_id
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn lock(&self) -> StoreResult<Locked<'_>> {
        let inner = self.inner.lock().unwrap_or_else(|e| {
            // A panic mid-operation may have left the cache half-updated: reload from disk.
            let mut g = e.into_inner();
            g.loaded = false;
            g
        });
        let lpath = self.path(LOCK_FILE);
        if !self.lock.lock(self.lock_wait).map_err(io_err(&lpath))? {
            return Err(StoreError::LockTimeout {
                file: lpath,
                waited: self.lock_wait,
            });
        }
        let mut l = Locked { store: self, inner };
        if let Err(e) = l.refresh() {
            l.inner.loaded = false;
            return Err(e);
        }
        Ok(l)
    }

    /// Create or update one job without touching the others (the per-job path of `apply`).
    /// Returns true when the job was created.
    pub fn upsert_job(&self, def: &JobDef, now: DateTime<Utc>) -> StoreResult<bool> {
        let mut l = self.lock()?;
        let name = def.name.clone();
        let step = logic::apply_one(l.inner.jobs.get_mut(&name).map(|c| &mut c.rec), def, now)?;
        let created = match step {
            logic::ApplyStep::Unchanged => return Ok(false),
            logic::ApplyStep::Updated => {
                if let Some(c) = l.inner.jobs.get_mut(&name) {
                    c.sched = logic::compile(&c.rec).ok();
                }
                false
            }
            logic::ApplyStep::Created(rec) => {
                l.inner.jobs.insert(name.clone(), Cached::new(*rec, None));
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

    #[cfg(test)]
    fn compact_jobs_for_test(&self) {
        let mut l = self.lock().expect("lock");
        l.compact_jobs().expect("compact");
    }
}

/// Upgrade a format-1 store (previous release) in place, under the lock: every file is
/// rewritten with this store's id (history rows gain their checksums), `VERSION` last. A crash
/// midway leaves `VERSION` at 1 and the next writer redoes it (this reader accepts both forms).
fn migrate_v1(io: &dyn StoreIo, dir: &Path, id: &str) -> StoreResult<()> {
    let p = |n: &str| dir.join(n);
    let read_opt = |path: &Path| match io.read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StoreError::io(path, e)),
    };
    let lines = |b: &[u8]| -> Vec<Vec<u8>> {
        b.split(|c| *c == b'\n')
            .filter(|l| !l.is_empty())
            .map(<[u8]>::to_vec)
            .collect()
    };
    let mut jobs: BTreeMap<String, Entry> = BTreeMap::new();
    let mut generation = 0;
    let spath = p(SNAPSHOT_FILE);
    if let Some(b) = read_opt(&spath)? {
        for (i, line) in lines(&b).iter().enumerate() {
            let no = i as u64 + 1;
            if i == 0 {
                let h: filefmt::Header =
                    serde_json::from_slice(line).map_err(|e| json_err(&spath, no, &e))?;
                generation = h.generation;
                continue;
            }
            let e: Entry = serde_json::from_slice(line).map_err(|e| json_err(&spath, no, &e))?;
            jobs.insert(e.job.def.name.clone(), e);
        }
    }
    let jpath = p(JOURNAL_FILE);
    if let Some(b) = read_opt(&jpath)? {
        // Only complete lines: a torn final line was never acknowledged.
        let end = b.iter().rposition(|c| *c == b'\n').map_or(0, |i| i + 1);
        let mut current = false;
        for (i, line) in lines(&b[..end]).iter().enumerate() {
            let no = i as u64 + 1;
            if i == 0 {
                let h: filefmt::Header =
                    serde_json::from_slice(line).map_err(|e| json_err(&jpath, no, &e))?;
                current = h.generation == generation;
                continue;
            }
            if !current {
                break;
            }
            let e: Entry = serde_json::from_slice(line).map_err(|e| json_err(&jpath, no, &e))?;
            jobs.insert(e.job.def.name.clone(), e);
        }
    }
    let setpath = p(SETTINGS_FILE);
    let settings: Settings = match read_opt(&setpath)? {
        None => Settings::default(),
        Some(b) => match serde_json::from_slice::<filefmt::SettingsFile<Settings>>(&b) {
            Ok(f) => f.settings,
            Err(_) => {
                serde_json::from_slice(&b).map_err(|e| json_err(&setpath, e.line() as u64, &e))?
            }
        },
    };
    let hpath = p(HISTORY_FILE);
    let mut history = history_header(id)?;
    if let Some(b) = read_opt(&hpath)? {
        let end = b.iter().rposition(|c| *c == b'\n').map_or(0, |i| i + 1);
        for (i, line) in b[..end].split(|c| *c == b'\n').enumerate() {
            if line.is_empty() {
                continue;
            }
            if i == 0 && serde_json::from_slice::<filefmt::HistoryHeader>(line).is_ok() {
                continue;
            }
            let row: HistoryRow =
                serde_json::from_slice(line).map_err(|e| json_err(&hpath, i as u64 + 1, &e))?;
            filefmt::encode_row(&mut history, &row).map_err(StoreError::encode("history row"))?;
        }
    }
    let generation = generation + 1;
    let mut snap = header_line("snapshot", generation, id, None)?;
    for e in jobs.values() {
        encode_line(
            &mut snap,
            "job record",
            &EntryRef {
                job: &e.job,
                mark: None,
            },
        )?;
    }
    write_atomic(io, dir, &spath, &snap)?;
    write_atomic(
        io,
        dir,
        &jpath,
        &header_line("journal", generation, id, None)?,
    )?;
    write_atomic(io, dir, &setpath, &settings_bytes(id, &settings)?)?;
    write_atomic(io, dir, &hpath, &history)?;
    write_atomic(
        io,
        dir,
        &p(VERSION_FILE),
        filefmt::version_text(id).as_bytes(),
    )?;
    tracing::info!(store = %dir.display(), jobs = jobs.len(), "migrated the store from format 1 to format 2");
    Ok(())
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
        Ok(())
    }

    fn refresh_history(&mut self) -> StoreResult<()> {
        let hpath = self.path(HISTORY_FILE);
        let Some(m) = stat(self.io(), &hpath)? else {
            return Err(missing(&hpath, "history holds every run's row"));
        };
        if self.inner.history.file.is_none() || m.ino != self.inner.history.ino {
            let f = self
                .io()
                .open(&hpath, OpenMode::Append)
                .map_err(io_err(&hpath))?;
            let fm = f.metadata().map_err(io_err(&hpath))?;
            let len = complete_len(&hpath, &*f, fm.len)?;
            if len == 0 {
                return Err(corrupt(
                    &hpath,
                    1,
                    1,
                    "history is empty: its header line is missing",
                ));
            }
            let mut head = vec![0u8; len.min(BLOCK) as usize];
            read_at(&*f, &hpath, 0, &mut head)?;
            let first = head.split(|b| *b == b'\n').next().unwrap_or(&[]);
            let h: filefmt::HistoryHeader =
                serde_json::from_slice(first).map_err(|e| json_err(&hpath, 1, &e))?;
            if h.cronsole != "history" {
                return Err(corrupt(&hpath, 1, 1, "not a history header"));
            }
            check_id(&hpath, Some(&h.store), self.id())?;
            self.inner.history = AppendLog {
                file: Some(f),
                ino: fm.ino,
                len,
            };
            if self.inner.history_compacted_len == 0 {
                self.inner.history_compacted_len = len;
            }
        } else if m.len < self.inner.history.len {
            return Err(corrupt(
                &hpath,
                0,
                0,
                format!(
                    "history shrank from {} to {} bytes (truncated by something other than cronsole)",
                    self.inner.history.len, m.len
                ),
            ));
        } else if m.len > self.inner.history.len {
            let f = self.inner.history.file(&hpath)?;
            self.inner.history.len = complete_len(&hpath, f, m.len)?;
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
        self.inner.settings = f.settings;
        self.inner.settings_stamp = stamp;
        Ok(())
    }

    fn full_reload(&mut self) -> StoreResult<()> {
        let io = &*self.store.io;
        let id = self.store.store_id.as_str();
        let inner = &mut *self.inner;
        inner.jobs.clear();
        inner.wake.clear();
        inner.loaded = false;
        inner.journal = AppendLog::default();
        inner.journal_stale = false;
        let spath = self.store.path(SNAPSHOT_FILE);
        let bytes = match io.read(&spath) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(missing(&spath, "the snapshot holds every job"));
            }
            Err(e) => return Err(StoreError::io(spath, e)),
        };
        if bytes.is_empty() {
            return Err(corrupt(
                &spath,
                1,
                1,
                "snapshot is empty: its header line is missing",
            ));
        }
        if !bytes.ends_with(b"\n") {
            let line = bytes.iter().filter(|b| **b == b'\n').count() as u64 + 1;
            return Err(corrupt(
                &spath,
                line,
                1,
                "snapshot does not end with a newline",
            ));
        }
        let mut generation = 0;
        let mut absorbed = None;
        let body = &bytes[..bytes.len() - 1];
        for (i, line) in body.split(|b| *b == b'\n').enumerate() {
            let no = i as u64 + 1;
            if line.is_empty() {
                return Err(corrupt(&spath, no, 1, "empty line"));
            }
            if i == 0 {
                let h: filefmt::Header =
                    serde_json::from_slice(line).map_err(|e| json_err(&spath, no, &e))?;
                if h.cronsole != "snapshot" {
                    return Err(corrupt(&spath, 1, 1, "not a snapshot header"));
                }
                check_id(&spath, h.store.as_deref(), id)?;
                generation = h.generation;
                absorbed = h.absorbed;
                continue;
            }
            let e: Entry = serde_json::from_slice(line).map_err(|e| json_err(&spath, no, &e))?;
            let name = e.job.def.name.clone();
            inner.jobs.insert(name, Cached::new(e.job, e.mark));
        }
        inner.generation = generation;
        inner.snapshot_len = bytes.len() as u64;

        let jpath = self.store.path(JOURNAL_FILE);
        let f = match io.open(&jpath, OpenMode::Append) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(missing(
                    &jpath,
                    "it holds every change since the last snapshot; falling back to the snapshot would run already-run slots again",
                ));
            }
            Err(e) => return Err(StoreError::io(jpath, e)),
        };
        let m = f.metadata().map_err(io_err(&jpath))?;
        let len = complete_len(&jpath, &*f, m.len)?;
        if len == 0 {
            return Err(corrupt(
                &jpath,
                1,
                1,
                "journal is empty: its header line is missing",
            ));
        }
        let mut bytes = vec![0u8; len as usize];
        read_at(&*f, &jpath, 0, &mut bytes)?;
        let mut stale = false;
        for (i, line) in bytes.split_inclusive(|b| *b == b'\n').enumerate() {
            let no = i as u64 + 1;
            let body = &line[..line.len() - 1];
            if i == 0 {
                let h: filefmt::Header =
                    serde_json::from_slice(body).map_err(|e| json_err(&jpath, no, &e))?;
                if h.cronsole != "journal" {
                    return Err(corrupt(&jpath, 1, 1, "not a journal header"));
                }
                check_id(&jpath, h.store.as_deref(), id)?;
                if h.generation == generation {
                    continue;
                }
                // One generation behind is what a crash between writing a new snapshot and
                // replacing the journal leaves; the snapshot says exactly which journal it
                // absorbed. Anything else (an edited header, a journal from a backup) is
                // corruption: never discard its records.
                let leftover = filefmt::Absorbed {
                    len,
                    crc32: filefmt::crc32(&bytes),
                };
                if h.generation + 1 == generation && absorbed == Some(leftover) {
                    stale = true;
                    break;
                }
                return Err(corrupt(
                    &jpath,
                    1,
                    1,
                    format!(
                        "journal generation {} does not match the snapshot's ({generation}){}",
                        h.generation,
                        if h.generation > generation {
                            format!("; is {SNAPSHOT_FILE} missing or replaced?")
                        } else {
                            String::new()
                        }
                    ),
                ));
            }
            let e: Entry = serde_json::from_slice(body).map_err(|e| json_err(&jpath, no, &e))?;
            let name = e.job.def.name.clone();
            inner.jobs.insert(name, Cached::new(e.job, e.mark));
        }
        inner.journal = AppendLog {
            file: Some(f),
            ino: m.ino,
            len,
        };
        inner.journal_stale = stale;
        let names: Vec<String> = inner.jobs.keys().cloned().collect();
        for n in names {
            reindex(inner, &n);
        }
        inner.loaded = true;
        Ok(())
    }

    /// Replace the journal with an empty one of the current generation (new inode).
    fn new_journal(&mut self) -> StoreResult<()> {
        let jpath = self.path(JOURNAL_FILE);
        let header = header_line("journal", self.inner.generation, self.id(), None)?;
        write_atomic(self.io(), &self.store.dir, &jpath, &header)?;
        let f = self
            .io()
            .open(&jpath, OpenMode::Append)
            .map_err(io_err(&jpath))?;
        let m = f.metadata().map_err(io_err(&jpath))?;
        self.inner.journal = AppendLog {
            file: Some(f),
            ino: m.ino,
            len: m.len,
        };
        self.inner.journal_stale = false;
        Ok(())
    }

    fn read_journal_tail(&mut self, file_len: u64) -> StoreResult<()> {
        let jpath = self.path(JOURNAL_FILE);
        let start = self.inner.journal.len;
        let f = self.inner.journal.file(&jpath)?;
        let len = complete_len(&jpath, f, file_len)?;
        if len <= start {
            return Ok(());
        }
        let mut bytes = vec![0u8; (len - start) as usize];
        read_at(f, &jpath, start, &mut bytes)?;
        let mut parsed = Vec::new();
        for line in bytes.split_inclusive(|b| *b == b'\n') {
            let body = &line[..line.len() - 1];
            match serde_json::from_slice::<Entry>(body) {
                Ok(e) => parsed.push(e),
                Err(e) => {
                    let before = count_lines_before(f, &jpath, start)?;
                    let idx = parsed.len() as u64;
                    return Err(json_err(&jpath, before + idx + 1, &e));
                }
            }
        }
        let inner = &mut *self.inner;
        for e in parsed {
            let name = e.job.def.name.clone();
            // Drop the replaced record's wake-up entry first: the new `Cached` starts without one,
            // and a stale entry would report a past instant as due forever (busy claims).
            if let Some(old) = inner.jobs.get(&name).and_then(|c| c.wake) {
                inner.wake.remove(&(old, name.clone()));
            }
            inner.jobs.insert(name.clone(), Cached::new(e.job, e.mark));
            reindex(inner, &name);
        }
        inner.journal.len = len;
        Ok(())
    }

    /// Verify the end of history row by row (checksum and parse): the last
    /// [`OPEN_VERIFY_BYTES`], where appends go. Older rows are verified by every query that
    /// reads them, by retention compaction and by `cronsole check`.
    fn verify_history_end(&self) -> StoreResult<()> {
        let hpath = self.path(HISTORY_FILE);
        let log = &self.inner.history;
        let f = log.file(&hpath)?;
        let start = log.len.saturating_sub(OPEN_VERIFY_BYTES);
        let mut buf = vec![0u8; (log.len - start) as usize];
        read_at(f, &hpath, start, &mut buf)?;
        // Skip to the first line that starts inside the window (line 1 is the header).
        let skip = if start == 0 {
            buf.iter()
                .position(|b| *b == b'\n')
                .map_or(buf.len(), |p| p + 1)
        } else {
            match start.checked_sub(1) {
                Some(prev) => {
                    let mut c = [0u8; 1];
                    read_at(f, &hpath, prev, &mut c)?;
                    if c[0] == b'\n' {
                        0
                    } else {
                        buf.iter()
                            .position(|b| *b == b'\n')
                            .map_or(buf.len(), |p| p + 1)
                    }
                }
                None => 0,
            }
        };
        let mut rel = skip;
        for line in buf[skip..].split_inclusive(|b| *b == b'\n') {
            let body = &line[..line.len() - 1];
            if let Err(e) = filefmt::verify_row(body).and_then(|_| {
                serde_json::from_slice::<HistoryRow>(body)
                    .map(|_| ())
                    .map_err(|e| (e.column() as u64, e.to_string()))
            }) {
                let no = count_lines_before(f, &hpath, start + rel as u64)? + 1;
                return Err(corrupt(&hpath, no, e.0, e.1));
            }
            rel += line.len();
        }
        Ok(())
    }

    /// Append rows to history (one write + fdatasync), each with its checksum.
    fn append_history(&mut self, rows: &[HistoryRow]) -> StoreResult<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let hpath = self.path(HISTORY_FILE);
        let mut buf = Vec::with_capacity(rows.len() * 512);
        for r in rows {
            filefmt::encode_row(&mut buf, r).map_err(StoreError::encode("history row"))?;
        }
        self.inner.history.append(&hpath, &buf)
    }

    /// Append the named records to the journal (one write + fdatasync), reindex them, and
    /// compact when the journal outgrew the snapshot.
    fn append_jobs(&mut self, names: &[String]) -> StoreResult<()> {
        if names.is_empty() {
            return Ok(());
        }
        if self.inner.journal_stale {
            self.new_journal()?;
        }
        let jpath = self.path(JOURNAL_FILE);
        let mut buf = Vec::with_capacity(names.len() * 1024);
        for n in names {
            let Some(c) = self.inner.jobs.get(n) else {
                continue;
            };
            encode_line(
                &mut buf,
                "job record",
                &EntryRef {
                    job: &c.rec,
                    mark: c.mark,
                },
            )?;
        }
        self.inner.journal.append(&jpath, &buf)?;
        for n in names {
            reindex(&mut self.inner, n);
        }
        if self.inner.journal.len > 2 * self.inner.snapshot_len + 1024 * 1024
            && let Err(e) = self.compact_jobs()
        {
            // The records above are durable: report success. A half-done compaction (e.g. a full
            // disk) is resolved by reloading from disk before the next operation.
            tracing::warn!("journal compaction failed (will retry later): {e}");
            self.inner.loaded = false;
        }
        Ok(())
    }

    /// History rows first, then job records. A failure leaves the cache to be reloaded.
    fn persist(&mut self, rows: &[HistoryRow], names: &[String]) -> StoreResult<()> {
        let r = self
            .append_history(rows)
            .and_then(|_| self.append_jobs(names));
        if r.is_err() {
            self.inner.loaded = false;
        }
        r
    }

    fn compact_jobs(&mut self) -> StoreResult<()> {
        if self.inner.journal_stale {
            self.new_journal()?;
        }
        let jpath = self.path(JOURNAL_FILE);
        let jlen = self.inner.journal.len;
        let mut journal = vec![0u8; jlen as usize];
        read_at(self.inner.journal.file(&jpath)?, &jpath, 0, &mut journal)?;
        let absorbed = filefmt::Absorbed {
            len: jlen,
            crc32: filefmt::crc32(&journal),
        };
        drop(journal);
        let generation = self.inner.generation + 1;
        let mut buf = header_line("snapshot", generation, self.id(), Some(absorbed))?;
        for c in self.inner.jobs.values() {
            encode_line(
                &mut buf,
                "job record",
                &EntryRef {
                    job: &c.rec,
                    mark: c.mark,
                },
            )?;
        }
        let spath = self.path(SNAPSHOT_FILE);
        write_atomic(self.io(), &self.store.dir, &spath, &buf)?;
        self.inner.generation = generation;
        self.inner.snapshot_len = buf.len() as u64;
        self.new_journal()
    }

    /// Scan history from `mark` for the row of `run_id` (crash between row and record).
    fn find_run_row(&self, mark: Option<Mark>, run_id: Uuid) -> StoreResult<Option<HistoryRow>> {
        let hpath = self.path(HISTORY_FILE);
        let log = &self.inner.history;
        let f = log.file(&hpath)?;
        let len = log.len;
        let start = match mark {
            Some(m) if m.ino == log.ino && m.off <= len => m.off,
            _ => 0,
        };
        let needle = run_id.to_string();
        let mut off = start;
        let mut carry: Vec<u8> = Vec::new();
        while off < len {
            let n = (len - off).min(BLOCK * 4);
            let mut buf = vec![0u8; n as usize];
            read_at(f, &hpath, off, &mut buf)?;
            off += n;
            carry.extend_from_slice(&buf);
            let cut = carry.iter().rposition(|b| *b == b'\n').map_or(0, |p| p + 1);
            for line in carry[..cut].split(|b| *b == b'\n') {
                if line.is_empty() || !contains(line, needle.as_bytes()) {
                    continue;
                }
                if filefmt::verify_row(line).is_ok()
                    && let Ok(row) = serde_json::from_slice::<HistoryRow>(line)
                    && row.run_id == run_id
                {
                    return Ok(Some(row));
                }
            }
            carry.drain(..cut);
        }
        Ok(None)
    }

    fn compact_history(
        &mut self,
        keep_per_job: usize,
        min_finished: Option<DateTime<Utc>>,
    ) -> StoreResult<u64> {
        let hpath = self.path(HISTORY_FILE);
        let len = self.inner.history.len;
        let mut bytes = vec![0u8; len as usize];
        read_at(self.inner.history.file(&hpath)?, &hpath, 0, &mut bytes)?;
        let header_end = bytes.iter().position(|b| *b == b'\n').map_or(0, |p| p + 1);
        let mut rows: Vec<(String, DateTime<Utc>, std::ops::Range<usize>)> = Vec::new();
        let mut pos = header_end;
        for (i, line) in bytes[header_end..]
            .split_inclusive(|b| *b == b'\n')
            .enumerate()
        {
            let body = &line[..line.len() - 1];
            let row = parse_history_line(&hpath, i as u64 + 2, body)?;
            rows.push((row.job, row.finished_at, pos..pos + line.len()));
            pos += line.len();
        }
        let mut per_job: HashMap<&str, usize> = HashMap::new();
        let mut keep = vec![false; rows.len()];
        for (i, (job, fin, _)) in rows.iter().enumerate().rev() {
            let n = per_job.entry(job.as_str()).or_insert(0);
            if *n < keep_per_job && min_finished.is_none_or(|m| *fin >= m) {
                keep[i] = true;
                *n += 1;
            }
        }
        let mut out = Vec::with_capacity(bytes.len());
        out.extend_from_slice(&bytes[..header_end]);
        let mut dropped = 0u64;
        for (i, (_, _, r)) in rows.iter().enumerate() {
            if keep[i] {
                out.extend_from_slice(&bytes[r.clone()]);
            } else {
                dropped += 1;
            }
        }
        if dropped == 0 {
            self.inner.history_compacted_len = len;
            return Ok(0);
        }
        write_atomic(self.io(), &self.store.dir, &hpath, &out)?;
        self.inner.history = AppendLog::default();
        self.refresh_history()?;
        self.inner.history_compacted_len = self.inner.history.len;
        Ok(dropped)
    }

    fn period(&self) -> crate::model::BudgetPeriod {
        logic::counter_period(&self.inner.settings)
    }

    fn mark_now(&self) -> Mark {
        Mark {
            ino: self.inner.history.ino,
            off: self.inner.history.len,
        }
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn reindex(inner: &mut Inner, name: &str) {
    let Some(c) = inner.jobs.get_mut(name) else {
        return;
    };
    if let Some(old) = c.wake.take() {
        inner.wake.remove(&(old, name.to_string()));
    }
    if c.sched.is_none() && c.rec.rt.lease.is_none() {
        return;
    }
    if let Some(w) = logic::wakeup(&c.rec) {
        c.wake = Some(w);
        inner.wake.insert((w, name.to_string()));
    }
}

/// Iterate history from the newest row backwards, block by block.
struct Backwards<'a> {
    f: &'a dyn IoFile,
    path: &'a Path,
    /// Bytes not yet consumed are `[0, pos)`.
    pos: u64,
    buf: Vec<u8>,
    /// Lines ready, newest last, with their start offsets.
    ready: Vec<(u64, Vec<u8>)>,
}

impl<'a> Backwards<'a> {
    fn new(f: &'a dyn IoFile, path: &'a Path, len: u64) -> Self {
        Backwards {
            f,
            path,
            pos: len,
            buf: Vec::new(),
            ready: Vec::new(),
        }
    }

    fn next_line(&mut self) -> StoreResult<Option<(u64, Vec<u8>)>> {
        loop {
            if let Some(l) = self.ready.pop() {
                return Ok(Some(l));
            }
            if self.pos == 0 {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                let line = std::mem::take(&mut self.buf);
                let body = line.strip_suffix(b"\n").unwrap_or(&line).to_vec();
                return Ok(Some((0, body)));
            }
            let start = self.pos.saturating_sub(BLOCK);
            let mut chunk = vec![0u8; (self.pos - start) as usize];
            read_at(self.f, self.path, start, &mut chunk)?;
            chunk.extend_from_slice(&self.buf);
            self.pos = start;
            // Everything after the first newline in `chunk` is complete lines.
            match chunk.iter().position(|b| *b == b'\n') {
                Some(p) if start > 0 || p < chunk.len() => {
                    let (head, tail) = chunk.split_at(p + 1);
                    let mut off = start + head.len() as u64;
                    for line in tail.split_inclusive(|b| *b == b'\n') {
                        let body = line.strip_suffix(b"\n").unwrap_or(line).to_vec();
                        self.ready.push((off, body));
                        off += line.len() as u64;
                    }
                    self.buf = head.to_vec();
                }
                _ => self.buf = chunk,
            }
        }
    }
}

impl Store for FileStore {
    fn location(&self) -> String {
        self.dir.display().to_string()
    }

    fn apply(&self, file: &JobsFile, now: DateTime<Utc>) -> StoreResult<ApplyReport> {
        logic::unique_names(file)?;
        let mut l = self.lock()?;
        if l.inner.settings != file.settings {
            let bytes = settings_bytes(l.id(), &file.settings)?;
            let spath = l.path(SETTINGS_FILE);
            write_atomic(&*self.io, &self.dir, &spath, &bytes)?;
            l.inner.settings_stamp = (0, 0, 0, 0);
            l.refresh_settings()?;
        }
        let (report, changed) = match logic::apply_all(
            file,
            now,
            &mut l.inner.jobs,
            |c| &mut c.rec,
            |r| Cached::new(r, None),
        ) {
            Ok(r) => r,
            Err(e) => {
                // Records before the bad definition were changed in the cache only.
                l.inner.loaded = false;
                return Err(e);
            }
        };
        for name in &report.updated {
            if let Some(c) = l.inner.jobs.get_mut(name) {
                c.sched = logic::compile(&c.rec).ok();
            }
        }
        l.persist(&[], &changed)?;
        Ok(report)
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
        Ok(l.inner.jobs.values().map(|c| c.rec.clone()).collect())
    }

    fn job(&self, name: &str) -> StoreResult<Option<JobRecord>> {
        let l = self.lock()?;
        Ok(l.inner.jobs.get(name).map(|c| c.rec.clone()))
    }

    /// Minimum over the wake-up index. It includes lease expiries of every owner's runs, so a
    /// caller whose own run outlived its lease sees a past instant until that run completes;
    /// the engine should treat a past wake-up for a job it has in flight as "no work".
    fn next_wakeup(&self, now: DateTime<Utc>) -> StoreResult<Option<DateTime<Utc>>> {
        let _ = now;
        let l = self.lock()?;
        Ok(l.inner.wake.first().map(|(t, _)| *t))
    }

    fn claim_due(&self, req: &ClaimRequest<'_>) -> StoreResult<ClaimOutcome> {
        let now = req.now;
        let mut l = self.lock()?;
        let due: Vec<String> = l
            .inner
            .wake
            .iter()
            .take_while(|(t, _)| *t <= now)
            .map(|(_, n)| n.clone())
            .collect();
        if due.is_empty() {
            return Ok(ClaimOutcome::default());
        }
        let in_flight: HashSet<&str> = req.in_flight.iter().map(String::as_str).collect();
        let period = l.period();
        let mark = l.mark_now();
        let mut rows = Vec::new();
        let mut changed = Vec::new();
        let mut plans = Vec::new();
        for name in due {
            if in_flight.contains(name.as_str()) {
                continue;
            }
            let Some(c) = l.inner.jobs.get(&name) else {
                continue;
            };
            let Some(sched) = c.sched.clone() else {
                continue;
            };
            let landed = match logic::expired_lease(&c.rec, now) {
                Some(lease) => l.find_run_row(c.mark, lease.run_id)?,
                None => None,
            };
            let can = plans.len() < req.limit;
            let Some(c) = l.inner.jobs.get_mut(&name) else {
                continue;
            };
            let recovering = logic::expired_lease(&c.rec, now).is_some();
            let ev = logic::claim_step(&mut c.rec, &sched, now, req.owner, can, period, landed);
            if recovering {
                c.mark = None;
            }
            rows.extend(ev.rows);
            if let Some(p) = ev.claim {
                c.mark = Some(mark);
                plans.push((name.clone(), p));
            }
            if ev.changed {
                changed.push(name);
            }
        }
        l.persist(&rows, &changed)?;
        let claims = plans
            .into_iter()
            .filter_map(|(name, p)| {
                l.inner.jobs.get(&name).map(|c| Claim {
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
        let Some(c) = l.inner.jobs.get_mut(job) else {
            return Err(StoreError::NoSuchJob(job.to_string()));
        };
        match logic::renew(&mut c.rec, run_id, now) {
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
        let n = cs.len();
        let mut l = match self.lock() {
            Ok(l) => l,
            Err(e) => {
                let mut out: Vec<_> = (1..n).map(|_| Err(e.duplicate())).collect();
                out.insert(0, Err(e));
                return out;
            }
        };
        let period = l.period();
        let mut results: Vec<StoreResult<CompleteOutcome>> = Vec::with_capacity(n);
        let (mut rows, mut names) = (Vec::new(), Vec::new());
        for c in cs {
            let r = complete_in(&mut l, c, period);
            if let Ok((out, name)) = &r {
                rows.extend(out.rows.iter().cloned());
                names.push(name.clone());
            }
            results.push(r.map(|(out, _)| out));
        }
        if rows.is_empty() && names.is_empty() {
            return results;
        }
        if let Err(e) = l.persist(&rows, &names) {
            // Nothing of this batch is acknowledged: every run retries its completion.
            return results
                .into_iter()
                .map(|r| r.and_then(|_| Err(e.duplicate())))
                .collect();
        }
        let hl = l.inner.history.len;
        if hl > AUTO_COMPACT_MIN_BYTES
            && hl > 2 * l.inner.history_compacted_len
            && let Err(e) = l.compact_history(DEFAULT_KEEP_PER_JOB, None)
        {
            tracing::warn!("history retention compaction failed: {e}");
        }
        results
    }

    fn history(&self, q: &HistoryQuery) -> StoreResult<Vec<HistoryRow>> {
        let (file, len) = {
            let l = self.lock()?;
            let hpath = self.path(HISTORY_FILE);
            (
                l.inner
                    .history
                    .file(&hpath)?
                    .try_clone()
                    .map_err(io_err(&hpath))?,
                l.inner.history.len,
            )
        };
        // The lock is released: appends only add after `len`, compaction swaps the inode and
        // our cloned fd keeps reading the old file.
        let hpath = self.path(HISTORY_FILE);
        let job_needle = q.job.as_ref().map(|j| format!("\"job\":{}", json_str(j)));
        let status_needle = q.status.map(|s| format!("\"status\":\"{}\"", s.as_str()));
        let run_needle = q.run_id.map(|r| r.to_string());
        let mut out = Vec::new();
        let mut it = Backwards::new(&*file, &hpath, len);
        let limit = if q.limit == 0 { usize::MAX } else { q.limit };
        while out.len() < limit {
            let Some((off, line)) = it.next_line()? else {
                break;
            };
            if off == 0 {
                // Line 1 is the file's header (checked at open).
                continue;
            }
            if let Err((col, what)) = filefmt::verify_row(&line) {
                let no = count_lines_before(&*file, &hpath, off)? + 1;
                return Err(corrupt(&hpath, no, col, what));
            }
            let pre = job_needle
                .as_ref()
                .is_none_or(|n| contains(&line, n.as_bytes()))
                && status_needle
                    .as_ref()
                    .is_none_or(|n| contains(&line, n.as_bytes()))
                && run_needle
                    .as_ref()
                    .is_none_or(|n| contains(&line, n.as_bytes()));
            if !pre {
                // Skipped lines are checksum-verified above; a full parse of each would make
                // filtered queries slow.
                continue;
            }
            let row: HistoryRow = match serde_json::from_slice(&line) {
                Ok(r) => r,
                Err(e) => {
                    let no = count_lines_before(&*file, &hpath, off)? + 1;
                    return Err(json_err(&hpath, no, &e));
                }
            };
            if q.job.as_ref().is_some_and(|j| *j != row.job)
                || q.status.is_some_and(|s| s != row.status)
                || q.run_id.is_some_and(|r| r != row.run_id)
                || q.since.is_some_and(|s| row.finished_at < s)
                || (q.with_diff && row.diff.is_none())
            {
                continue;
            }
            out.push(row);
        }
        Ok(out)
    }

    fn set_paused(&self, name: &str, paused: bool, now: DateTime<Utc>) -> StoreResult<()> {
        let mut l = self.lock()?;
        let Some(c) = l.inner.jobs.get_mut(name) else {
            return Err(StoreError::NoSuchJob(name.to_string()));
        };
        let changed = logic::pause_step(&mut c.rec, paused, now)?;
        if changed {
            l.persist(&[], &[name.to_string()])?;
        }
        Ok(())
    }

    fn request_trigger(&self, name: &str, now: DateTime<Utc>) -> StoreResult<TriggerOutcome> {
        let mut l = self.lock()?;
        let Some(c) = l.inner.jobs.get_mut(name) else {
            return Err(StoreError::NoSuchJob(name.to_string()));
        };
        let (outcome, changed) = logic::trigger_step(&mut c.rec, now)?;
        if changed {
            l.persist(&[], &[name.to_string()])?;
        }
        Ok(outcome)
    }

    fn spend(&self, job: &str, now: DateTime<Utc>) -> StoreResult<SpendNow> {
        let l = self.lock()?;
        let settings = &l.inner.settings;
        let Some(c) = l.inner.jobs.get(job) else {
            return Err(StoreError::NoSuchJob(job.to_string()));
        };
        let job_usd = super::stats::period_spend(&c.rec, settings, now);
        let global_usd = l
            .inner
            .jobs
            .values()
            .map(|c| super::stats::period_spend(&c.rec, settings, now))
            .sum();
        Ok(SpendNow {
            global_usd,
            job_usd,
        })
    }

    fn reserve(
        &self,
        req: &super::budget::ReserveRequest<'_>,
    ) -> StoreResult<super::budget::ReserveOutcome> {
        use super::budget::{self, ReserveOutcome};
        let mut l = self.lock()?;
        let verdict = budget::decide(
            &l.inner.settings,
            l.inner.jobs.values().map(|c| &c.rec),
            req,
        )?;
        let key = match verdict {
            Ok(key) => key,
            Err(reason) => return Ok(ReserveOutcome::Refused { reason }),
        };
        let Some(c) = l.inner.jobs.get_mut(req.job) else {
            return Err(StoreError::NoSuchJob(req.job.to_string()));
        };
        let id = budget::record(&mut c.rec, req, key);
        l.persist(&[], &[req.job.to_string()])?;
        Ok(ReserveOutcome::Reserved { id })
    }

    fn settle(
        &self,
        job: &str,
        id: Uuid,
        how: super::budget::Settlement,
        _now: DateTime<Utc>,
    ) -> StoreResult<()> {
        let mut l = self.lock()?;
        let Some(c) = l.inner.jobs.get_mut(job) else {
            return Err(StoreError::NoSuchJob(job.to_string()));
        };
        if super::budget::settle(&mut c.rec, id, how) {
            l.persist(&[], &[job.to_string()])?;
        }
        Ok(())
    }
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

/// One completion applied to the cached record (fenced by run_id), without persisting: the
/// caller persists a batch. Returns the outcome and the job whose record changed.
fn complete_in(
    l: &mut Locked<'_>,
    c: Completion,
    period: crate::model::BudgetPeriod,
) -> StoreResult<(CompleteOutcome, String)> {
    let Some(cached) = l.inner.jobs.get_mut(&c.job) else {
        return Err(StoreError::NoSuchJob(c.job.clone()));
    };
    let job = c.job.clone();
    let fenced_in = logic::holds(&cached.rec, c.run_id);
    let out = logic::complete_step(&mut cached.rec, cached.sched.as_ref(), c, period)?;
    if fenced_in {
        cached.mark = None;
    }
    Ok((out, job))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Status, Trigger};
    use crate::store::logic::tests_support::def;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(s, 0).unwrap()
    }

    fn tmp(name: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("cronsole-fs-{name}-{}", Uuid::new_v4()));
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    fn jobs_file(names: &[&str]) -> JobsFile {
        JobsFile {
            settings: Settings::default(),
            jobs: names.iter().map(|n| def(n)).collect(),
        }
    }

    fn claim(s: &FileStore, now: i64, owner: &str, limit: usize) -> ClaimOutcome {
        s.claim_due(&ClaimRequest {
            now: t(now),
            owner,
            limit,
            in_flight: &[],
        })
        .unwrap()
    }

    fn finish(s: &FileStore, c: &Claim, status: Status, now: i64) -> CompleteOutcome {
        let row = HistoryRow::new(&c.job.def.name, status, c.trigger, c.slot, "o", t(now));
        s.complete(Completion {
            job: c.job.def.name.clone(),
            run_id: c.run_id,
            owner: "o".into(),
            now: t(now),
            row,
            state: None,
            hold_until: None,
        })
        .unwrap()
    }

    #[test]
    fn apply_claim_complete_survive_reopen_and_other_handles_see_changes() {
        let dir = tmp("basic");
        let a = FileStore::open(&dir).unwrap();
        let b = FileStore::open(&dir).unwrap();
        let rep = a.apply(&jobs_file(&["x", "y"]), t(1000)).unwrap();
        assert_eq!(rep.created, vec!["x", "y"]);
        assert_eq!(b.jobs().unwrap().len(), 2);
        let got = claim(&b, 1000, "b", 10);
        assert_eq!(got.claims.len(), 2);
        assert!(
            claim(&a, 1000, "a", 10).claims.is_empty(),
            "already claimed"
        );
        let tok = a.change_token().unwrap();
        finish(&a, &got.claims[0], Status::Succeeded, 1001);
        assert_ne!(tok, a.change_token().unwrap());
        drop((a, b));
        let c = FileStore::open(&dir).unwrap();
        let x = c.job("x").unwrap().unwrap();
        assert_eq!(x.rt.runs, 1);
        assert!(x.rt.lease.is_none());
        assert!(c.job("y").unwrap().unwrap().rt.lease.is_some());
        let h = c
            .history(&HistoryQuery {
                limit: 10,
                ..Default::default()
            })
            .unwrap();
        assert_eq!(h.len(), 1);
        assert_eq!(h[0].job, "x");
        let rep = c.apply(&jobs_file(&["x"]), t(1002)).unwrap();
        assert_eq!(rep.unchanged, vec!["x"]);
        assert_eq!(rep.retired, vec!["y"]);
    }

    #[test]
    fn journal_compaction_keeps_state_and_other_handles_reload() {
        let dir = tmp("compact");
        let a = FileStore::open(&dir).unwrap();
        let b = FileStore::open(&dir).unwrap();
        a.apply(&jobs_file(&["j"]), t(0)).unwrap();
        // Enough renewals to force several compactions (journal > 2x snapshot + 1 MiB).
        let c = claim(&a, 0, "a", 1).claims.remove(0);
        for i in 0..2000 {
            a.renew("j", c.run_id, "a", t(i)).unwrap();
        }
        let snap = std::fs::read_to_string(dir.join(SNAPSHOT_FILE)).unwrap();
        assert!(snap.starts_with("{\"cronsole\":\"snapshot\""));
        let lease = b.job("j").unwrap().unwrap().rt.lease.unwrap();
        assert_eq!(lease.last_renewed, t(1999));
        drop((a, b));
        let r = FileStore::open(&dir).unwrap();
        assert_eq!(
            r.job("j").unwrap().unwrap().rt.lease.unwrap().last_renewed,
            t(1999)
        );
    }

    /// Every byte of every store file (the lock file aside).
    fn dir_bytes(dir: &Path) -> BTreeMap<String, Vec<u8>> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.file_name() != LOCK_FILE)
            .map(|e| {
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read(e.path()).unwrap(),
                )
            })
            .collect()
    }

    /// A store with two jobs, a finished run and a compacted + appended journal.
    fn used_store(name: &str) -> PathBuf {
        let dir = tmp(name);
        let s = FileStore::open(&dir).unwrap();
        s.apply(&jobs_file(&["a", "b"]), t(0)).unwrap();
        s.compact_jobs_for_test();
        let c = claim(&s, 0, "o", 2).claims.remove(0);
        finish(&s, &c, Status::Succeeded, 1);
        dir
    }

    /// Corruption named on `file`, exit 2, and not one byte of the store changed, through both
    /// a read-only open and a writer open.
    fn assert_refused(dir: &Path, file: &str, needle: &str) {
        let before = dir_bytes(dir);
        for writer in [false, true] {
            let r = if writer {
                FileStore::open(dir).and_then(|s| s.jobs())
            } else {
                FileStore::open_existing(dir).and_then(|s| s.jobs())
            };
            let err = r.expect_err("a damaged store must be refused");
            match &err {
                StoreError::Corrupt { file: f, .. } => {
                    assert!(f.ends_with(file), "names {file}: {err}")
                }
                e => panic!("expected corruption of {file}, got {e:?}"),
            }
            assert!(err.to_string().contains(needle), "{needle}: {err}");
            assert_eq!(err.exit_code(), 2);
            assert_eq!(
                dir_bytes(dir),
                before,
                "every byte unchanged (writer: {writer})"
            );
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Issue 10 item 2 (was: a deleted journal fell back to the snapshot, exit 0).
    #[test]
    fn a_deleted_or_empty_journal_is_corruption_not_a_fallback() {
        let dir = used_store("no-journal");
        std::fs::remove_file(dir.join(JOURNAL_FILE)).unwrap();
        assert_refused(&dir, JOURNAL_FILE, "missing");
        let dir = used_store("empty-journal");
        std::fs::write(dir.join(JOURNAL_FILE), b"").unwrap();
        assert_refused(&dir, JOURNAL_FILE, "empty");
    }

    /// Issue 10 item 2 (was: a deleted settings.json silently removed the budget).
    #[test]
    fn a_deleted_settings_file_is_corruption_not_a_budget_reset() {
        let dir = used_store("no-settings");
        std::fs::remove_file(dir.join(SETTINGS_FILE)).unwrap();
        assert_refused(&dir, SETTINGS_FILE, "budget");
    }

    #[test]
    fn deleted_snapshot_or_history_is_corruption() {
        let dir = used_store("no-snapshot");
        std::fs::remove_file(dir.join(SNAPSHOT_FILE)).unwrap();
        assert_refused(&dir, SNAPSHOT_FILE, "missing");
        let dir = used_store("no-history");
        std::fs::remove_file(dir.join(HISTORY_FILE)).unwrap();
        assert_refused(&dir, HISTORY_FILE, "missing");
    }

    /// Issue 10 item 2 (was: an edited generation made a read-only `jobs` discard the journal).
    #[test]
    fn an_edited_journal_generation_is_corruption_and_nothing_is_discarded() {
        for generation in [0u64, 7] {
            let dir = used_store(&format!("edited-gen-{generation}"));
            let jpath = dir.join(JOURNAL_FILE);
            let j = std::fs::read_to_string(&jpath).unwrap();
            let edited = j.replacen(
                "\"generation\":1",
                &format!("\"generation\":{generation}"),
                1,
            );
            assert_ne!(edited, j);
            std::fs::write(&jpath, edited).unwrap();
            assert_refused(&dir, JOURNAL_FILE, "does not match the snapshot");
        }
    }

    /// Issue 10 item 2 (was: a journal copied in from another store was merged).
    #[test]
    fn a_file_from_another_store_is_refused() {
        let other = used_store("other");
        for f in [JOURNAL_FILE, SETTINGS_FILE, HISTORY_FILE, SNAPSHOT_FILE] {
            let dir = used_store("foreign");
            std::fs::copy(other.join(f), dir.join(f)).unwrap();
            assert_refused(&dir, f, "another store");
        }
        std::fs::remove_dir_all(&other).unwrap();
    }

    /// Issue 10 item 2 (was: a flipped byte mid-history was only seen by `history`; `run` went
    /// on appending after it). The flip keeps the line valid JSON: only the checksum sees it.
    #[test]
    fn a_flipped_byte_in_history_is_found_before_anything_is_appended() {
        let dir = used_store("flip");
        {
            let s = FileStore::open(&dir).unwrap();
            for i in 0..3 {
                let c = claim(&s, 120 + i * 60, "o", 2).claims.remove(0);
                finish(&s, &c, Status::Succeeded, 121 + i * 60);
            }
        }
        let hpath = dir.join(HISTORY_FILE);
        let mut h = std::fs::read(&hpath).unwrap();
        // The second row's duration (mid-history): 0 -> 1 is still a valid row.
        let key = b"\"duration_ms\":";
        let at = h
            .windows(key.len())
            .enumerate()
            .filter(|(_, w)| *w == key)
            .nth(1)
            .unwrap()
            .0
            + key.len();
        h[at] ^= 0x01;
        let line = &h[..at].iter().filter(|b| **b == b'\n').count() + 1;
        assert_eq!(line, 3, "a row in the middle");
        std::fs::write(&hpath, &h).unwrap();
        assert_refused(&dir, HISTORY_FILE, "checksum");
    }

    #[test]
    fn a_crash_between_snapshot_and_journal_is_recognised_and_only_a_writer_replaces_the_journal() {
        let dir = tmp("stale");
        let a = FileStore::open(&dir).unwrap();
        a.apply(&jobs_file(&["j"]), t(0)).unwrap();
        let jpath = dir.join(JOURNAL_FILE);
        let old = std::fs::read(&jpath).unwrap();
        a.compact_jobs_for_test();
        drop(a);
        // The crash: the new snapshot landed, the old journal was not yet replaced.
        std::fs::write(&jpath, &old).unwrap();
        let before = dir_bytes(&dir);
        let r = FileStore::open_existing(&dir).unwrap();
        let names: Vec<String> = r.jobs().unwrap().into_iter().map(|j| j.def.name).collect();
        assert_eq!(names, vec!["j"]);
        assert_eq!(dir_bytes(&dir), before, "a reader writes nothing");
        let w = FileStore::open(&dir).unwrap();
        w.set_paused("j", true, t(1)).unwrap();
        assert_ne!(
            std::fs::read(&jpath).unwrap(),
            old,
            "the writer replaced it"
        );
        let again = FileStore::open_existing(&dir).unwrap();
        assert!(again.job("j").unwrap().unwrap().rt.paused);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Readers leave a torn tail in place; the next writer cuts it before appending.
    #[test]
    fn torn_final_lines_are_cut_by_the_next_writer_and_complete_garbage_is_corruption() {
        let dir = tmp("torn");
        let a = FileStore::open(&dir).unwrap();
        a.apply(&jobs_file(&["j"]), t(0)).unwrap();
        let c = claim(&a, 0, "a", 1).claims.remove(0);
        finish(&a, &c, Status::Succeeded, 1);
        drop(a);
        let hpath = dir.join(HISTORY_FILE);
        let before = std::fs::read(&hpath).unwrap();
        let mut torn = before.clone();
        torn.extend_from_slice(b"{\"run_id\":\"abc");
        std::fs::write(&hpath, &torn).unwrap();
        let jpath = dir.join(JOURNAL_FILE);
        let mut j = std::fs::read(&jpath).unwrap();
        j.extend_from_slice(b"{\"job\":{\"def");
        std::fs::write(&jpath, &j).unwrap();
        let untouched = dir_bytes(&dir);
        let s = FileStore::open(&dir).unwrap();
        assert_eq!(s.history(&HistoryQuery::default()).unwrap().len(), 1);
        assert_eq!(s.job("j").unwrap().unwrap().rt.runs, 1);
        assert_eq!(
            dir_bytes(&dir),
            untouched,
            "opening and reading write nothing"
        );
        let c = claim(&s, 60, "a", 1).claims.remove(0);
        finish(&s, &c, Status::Succeeded, 61);
        let after = std::fs::read(&hpath).unwrap();
        assert!(after.starts_with(&before), "acknowledged rows kept");
        assert!(!contains(&after, b"\"abc"), "torn row cut");
        assert_eq!(s.history(&HistoryQuery::default()).unwrap().len(), 2);
        drop(s);
        let s = FileStore::open(&dir).unwrap();
        assert_eq!(s.job("j").unwrap().unwrap().rt.runs, 2);
        drop(s);

        let mut bad = std::fs::read(&hpath).unwrap();
        bad.extend_from_slice(b"{\"not\": a row}\n");
        std::fs::write(&hpath, &bad).unwrap();
        let err = FileStore::open(&dir).err().unwrap();
        match &err {
            StoreError::Corrupt { file, line, .. } => {
                assert!(file.ends_with(HISTORY_FILE));
                assert_eq!(*line, 4, "header, two rows, then the bad line");
            }
            e => panic!("unexpected {e}"),
        }
        assert!(err.is_bad_input());
        assert_eq!(std::fs::read(&hpath).unwrap(), bad, "bytes untouched");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Issue 10 item 2: a previous-release store is migrated by a writer, refused (with how to
    /// upgrade) by a reader, and nothing in it is lost.
    #[test]
    fn a_format_1_store_is_migrated_by_a_writer_and_refused_by_a_reader() {
        let dir = tmp("v1");
        let rec = crate::store::logic::new_record(def("old"), t(0)).unwrap();
        let row = HistoryRow::new(
            "old",
            Status::Succeeded,
            Trigger::Schedule,
            Some(t(0)),
            "o",
            t(1),
        );
        let entry = serde_json::to_string(&EntryRef {
            job: &rec,
            mark: None,
        })
        .unwrap();
        std::fs::write(dir.join(VERSION_FILE), "cronsole-file-store 1\n").unwrap();
        std::fs::write(
            dir.join(SNAPSHOT_FILE),
            "{\"cronsole\":\"snapshot\",\"generation\":3}\n",
        )
        .unwrap();
        std::fs::write(
            dir.join(JOURNAL_FILE),
            format!("{{\"cronsole\":\"journal\",\"generation\":3}}\n{entry}\n"),
        )
        .unwrap();
        let settings = Settings {
            base_dir: Some("/srv/jobs".into()),
            ..Settings::default()
        };
        std::fs::write(
            dir.join(SETTINGS_FILE),
            serde_json::to_vec(&settings).unwrap(),
        )
        .unwrap();
        std::fs::write(
            dir.join(HISTORY_FILE),
            format!("{}\n", serde_json::to_string(&row).unwrap()),
        )
        .unwrap();
        let before = dir_bytes(&dir);
        let err = FileStore::open_existing(&dir).err().unwrap();
        assert!(matches!(err, StoreError::Version { .. }), "{err}");
        assert!(err.to_string().contains("cronsole apply"), "{err}");
        assert_eq!(dir_bytes(&dir), before, "the reader wrote nothing");
        let s = FileStore::open(&dir).unwrap();
        assert_eq!(s.job("old").unwrap().unwrap().def.name, "old");
        assert_eq!(s.settings().unwrap().base_dir.as_deref(), Some("/srv/jobs"));
        let h = s.history(&HistoryQuery::default()).unwrap();
        assert_eq!(h.len(), 1);
        assert_eq!(h[0].run_id, row.run_id);
        drop(s);
        let v = std::fs::read_to_string(dir.join(VERSION_FILE)).unwrap();
        assert!(v.starts_with("cronsole-file-store 2\nstore "), "{v}");
        FileStore::open_existing(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_journal_newer_than_the_snapshot_is_corruption_not_a_reset() {
        let dir = used_store("newer-journal");
        let spath = dir.join(SNAPSHOT_FILE);
        let snap = std::fs::read_to_string(&spath).unwrap();
        let older = snap.replacen("\"generation\":1", "\"generation\":0", 1);
        assert_ne!(older, snap);
        std::fs::write(&spath, older).unwrap();
        assert_refused(&dir, JOURNAL_FILE, "missing or replaced");
    }

    #[test]
    fn absurd_lease_seconds_do_not_panic_the_store() {
        let dir = tmp("huge-lease");
        let s = FileStore::open(&dir).unwrap();
        let mut file = jobs_file(&["a"]);
        file.jobs[0].lease_seconds = 1e15;
        s.apply(&file, t(0)).unwrap();
        let c = claim(&s, 0, "o", 1).claims.remove(0);
        assert!(c.lease_until > t(0));
        assert!(matches!(
            s.renew("a", c.run_id, "o", t(1)).unwrap(),
            RenewOutcome::Renewed { .. }
        ));
    }

    #[test]
    fn another_handles_changes_replace_wake_ups_instead_of_leaving_stale_ones() {
        let dir = tmp("wake-index");
        let a = FileStore::open(&dir).unwrap();
        let b = FileStore::open(&dir).unwrap();
        a.apply(&jobs_file(&["j"]), t(0)).unwrap();
        assert_eq!(b.next_wakeup(t(0)).unwrap(), Some(t(0)));
        // `a` claims slot 0 and completes it: the next slot is 60. `b` reads that from the
        // journal tail and must no longer report the old, past wake-up.
        let c = claim(&a, 0, "a", 1).claims.remove(0);
        assert!(
            b.next_wakeup(t(1)).unwrap() > Some(t(1)),
            "leased: wakes at lease expiry"
        );
        finish(&a, &c, Status::Succeeded, 1);
        assert_eq!(b.next_wakeup(t(2)).unwrap(), Some(t(60)));
        assert!(claim(&b, 2, "b", 5).claims.is_empty());
    }

    #[test]
    fn complete_many_commits_a_batch_in_order_with_per_item_outcomes() {
        let dir = tmp("batch");
        let s = FileStore::open(&dir).unwrap();
        s.apply(&jobs_file(&["a", "b"]), t(0)).unwrap();
        let claims = claim(&s, 0, "o", 5).claims;
        assert_eq!(claims.len(), 2);
        let mk = |c: &Claim, run_id: Uuid, st: Status| Completion {
            job: c.job.def.name.clone(),
            run_id,
            owner: "o".into(),
            now: t(1),
            row: HistoryRow::new(&c.job.def.name, st, c.trigger, c.slot, "o", t(1)),
            state: None,
            hold_until: None,
        };
        let batch = vec![
            mk(&claims[0], claims[0].run_id, Status::Succeeded),
            mk(&claims[1], Uuid::new_v4(), Status::Failed), // not the lease holder: stale
            mk(&claims[1], claims[1].run_id, Status::Failed),
            Completion {
                job: "nosuch".into(),
                ..mk(&claims[0], claims[0].run_id, Status::Failed)
            },
        ];
        let out = s.complete_many(batch);
        assert_eq!(out.len(), 4);
        assert!(!out[0].as_ref().unwrap().stale);
        assert!(out[1].as_ref().unwrap().stale);
        assert!(!out[2].as_ref().unwrap().stale);
        assert!(matches!(out[3], Err(StoreError::NoSuchJob(_))));
        // Both leases released and all three rows durable, as a fresh handle sees them.
        let fresh = FileStore::open(&dir).unwrap();
        assert!(fresh.jobs().unwrap().iter().all(|j| j.rt.lease.is_none()));
        let rows = fresh
            .history(&HistoryQuery {
                limit: 10,
                ..Default::default()
            })
            .unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows.iter().filter(|r| r.stale_lease).count(), 1);
    }

    #[test]
    fn completion_after_takeover_is_stale_and_leaves_the_job_alone() {
        let dir = tmp("fence");
        let s = FileStore::open(&dir).unwrap();
        s.apply(&jobs_file(&["j"]), t(0)).unwrap();
        let first = claim(&s, 0, "a", 1).claims.remove(0);
        // Lease (30 s) expires; another owner recovers at 31 and the job waits for slot 60.
        let out = claim(&s, 31, "b", 1);
        assert_eq!(out.rows.len(), 1);
        assert_eq!(out.rows[0].status, Status::Abandoned);
        assert_eq!(out.rows[0].run_id, first.run_id);
        let second = claim(&s, 60, "b", 1).claims.remove(0);
        let late = finish(&s, &first, Status::Succeeded, 61);
        assert!(late.stale && late.rows[0].stale_lease);
        let j = s.job("j").unwrap().unwrap();
        assert_eq!(j.rt.lease.as_ref().unwrap().run_id, second.run_id);
        assert_eq!(
            s.renew("j", first.run_id, "a", t(62)).unwrap(),
            RenewOutcome::Lost
        );
    }

    #[test]
    fn recovery_does_not_write_a_second_row_when_the_completion_row_landed() {
        let dir = tmp("dedupe");
        let s = FileStore::open(&dir).unwrap();
        let mut d = def("once");
        d.max_runs = Some(1);
        s.apply(
            &JobsFile {
                settings: Settings::default(),
                jobs: vec![d],
            },
            t(0),
        )
        .unwrap();
        let c = claim(&s, 0, "a", 1).claims.remove(0);
        // The process wrote the row, then died before the job record.
        {
            let mut l = s.lock().unwrap();
            let mut row = HistoryRow::new("once", Status::Succeeded, c.trigger, c.slot, "a", t(5));
            row.run_id = c.run_id;
            l.append_history(&[row]).unwrap();
        }
        let out = claim(&s, 100, "b", 1);
        assert!(out.rows.is_empty(), "no abandoned row: {:?}", out.rows);
        assert!(out.claims.is_empty());
        let j = s.job("once").unwrap().unwrap();
        assert!(j.rt.retired, "finished from the row that landed");
        assert_eq!(s.history(&HistoryQuery::default()).unwrap().len(), 1);
    }

    #[test]
    fn trigger_pause_and_unknown_names() {
        let dir = tmp("trig");
        let s = FileStore::open(&dir).unwrap();
        s.apply(&jobs_file(&["j"]), t(0)).unwrap();
        assert!(matches!(
            s.set_paused("nope", true, t(0)),
            Err(StoreError::NoSuchJob(_))
        ));
        s.set_paused("j", true, t(0)).unwrap();
        assert!(claim(&s, 10, "a", 5).claims.is_empty());
        assert_eq!(
            s.request_trigger("j", t(10)).unwrap(),
            TriggerOutcome::Queued
        );
        assert_eq!(
            s.request_trigger("j", t(10)).unwrap(),
            TriggerOutcome::AlreadyQueued
        );
        let c = claim(&s, 11, "a", 5).claims.remove(0);
        assert_eq!((c.trigger, c.slot), (Trigger::Manual, None));
        assert_eq!(
            s.request_trigger("j", t(12)).unwrap(),
            TriggerOutcome::AlreadyRunning
        );
    }

    #[test]
    fn history_filters_newest_first_and_idle_claim_does_nothing() {
        let dir = tmp("hist");
        let s = FileStore::open(&dir).unwrap();
        s.apply(&jobs_file(&["a", "b"]), t(0)).unwrap();
        for k in 0..50 {
            for c in claim(&s, k * 60, "o", 5).claims {
                let st = if k % 2 == 0 {
                    Status::Succeeded
                } else {
                    Status::Failed
                };
                finish(&s, &c, st, k * 60 + 1);
            }
        }
        let q = HistoryQuery {
            job: Some("a".into()),
            status: Some(Status::Failed),
            limit: 3,
            ..Default::default()
        };
        let h = s.history(&q).unwrap();
        assert_eq!(h.len(), 3);
        assert!(h.iter().all(|r| r.job == "a" && r.status == Status::Failed));
        assert!(h[0].finished_at > h[1].finished_at);
        let since = s
            .history(&HistoryQuery {
                since: Some(t(49 * 60)),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(since.len(), 2);
        let tok = s.change_token().unwrap();
        assert!(claim(&s, 49 * 60 + 30, "o", 5).claims.is_empty());
        assert_eq!(tok, s.change_token().unwrap(), "idle claim writes nothing");
        assert_eq!(s.next_wakeup(t(0)).unwrap(), Some(t(50 * 60)));
        let spend = s.spend("a", t(0)).unwrap();
        assert_eq!(spend, SpendNow::default());
    }

    #[test]
    fn retention_keeps_newest_rows_per_job() {
        let dir = tmp("ret");
        let s = FileStore::open(&dir).unwrap();
        s.apply(&jobs_file(&["a", "b"]), t(0)).unwrap();
        for k in 0..20 {
            for c in claim(&s, k * 60, "o", 5).claims {
                finish(&s, &c, Status::Succeeded, k * 60 + 1);
            }
        }
        assert_eq!(s.compact_history(5, None, t(2000)).unwrap(), 30);
        let h = s
            .history(&HistoryQuery {
                job: Some("a".into()),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(h.len(), 5);
        assert_eq!(h[0].slot, Some(t(19 * 60)));
        let dropped = s
            .compact_history(100, Some(chrono::Duration::seconds(120)), t(19 * 60 + 1))
            .unwrap();
        assert_eq!(
            dropped, 4,
            "rows finished before 1021 (slots 15, 16) of both jobs"
        );
    }

    #[test]
    fn own_in_flight_run_is_never_reoffered_or_recovered_by_its_owner() {
        let dir = tmp("inflight");
        let s = FileStore::open(&dir).unwrap();
        s.apply(&jobs_file(&["j"]), t(0)).unwrap();
        let c = claim(&s, 0, "a", 1).claims.remove(0);
        assert_eq!(
            s.next_wakeup(t(0)).unwrap(),
            Some(t(30)),
            "the lease expiry"
        );
        let mine = vec!["j".to_string()];
        let out = s
            .claim_due(&ClaimRequest {
                now: t(100),
                owner: "a",
                limit: 5,
                in_flight: &mine,
            })
            .unwrap();
        assert!(out.claims.is_empty() && out.rows.is_empty());
        assert_eq!(
            s.job("j").unwrap().unwrap().rt.lease.unwrap().run_id,
            c.run_id
        );
        // Its late completion still holds the lease: not stale; slots 60 passed → overlap row.
        let done = finish(&s, &c, Status::Succeeded, 101);
        assert!(!done.stale);
        assert_eq!(done.rows.len(), 2);
        assert_eq!(done.rows[1].reason.as_deref(), Some("overlap"));
        assert_eq!(s.job("j").unwrap().unwrap().rt.next_slot, Some(t(120)));
    }

    #[test]
    fn a_held_lock_gives_a_typed_retryable_error_after_the_bound_not_a_hang() {
        let dir = tmp("lockwait");
        let a = FileStore::open(&dir).unwrap();
        let b = FileStore::open(&dir)
            .unwrap()
            .with_lock_wait(Duration::from_millis(30));
        let held = a.lock().unwrap();
        let err = b.jobs().unwrap_err();
        assert!(matches!(err, StoreError::LockTimeout { .. }), "got {err:?}");
        assert!(!err.is_bad_input(), "a held lock is a runtime failure");
        assert!(err.to_string().contains("lock"), "{err}");
        drop(held);
        assert!(b.jobs().unwrap().is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn foreign_version_is_refused() {
        let dir = tmp("ver");
        std::fs::write(dir.join(VERSION_FILE), "something else 9\n").unwrap();
        assert!(matches!(
            FileStore::open(&dir),
            Err(StoreError::Version { .. })
        ));
    }
}

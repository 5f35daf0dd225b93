//! The embedded file store (SPEC §14.1): a directory shared safely by several processes on one
//! host through an exclusive `fs4` lock.
//!
//! Owns: the on-disk layout, locking, crash safety, the per-handle cache and history queries.
//! Must not touch: scheduling decisions (those live in [`super::logic`], shared with the
//! PostgreSQL store), clocks (every call takes `now`), the engine, the UI.
//!
//! # Layout (all human-readable)
//! - `VERSION` — `cronsole-file-store 1`.
//! - `lock` — empty; every operation holds an exclusive `flock` on it. flock is per open file
//!   description, so each [`FileStore`] opens its own fd, and a `Mutex` serialises threads
//!   sharing one handle.
//! - `jobs.snapshot.jsonl` — a header line `{"cronsole":"snapshot","generation":N}` then one line per
//!   job: `{"job": JobRecord, "mark": {...}}`. Written temp + fsync + rename + fsync dir.
//! - `jobs.journal` — header `{"cronsole":"journal","generation":N}` then one full job line per
//!   mutation (last line for a name wins). Only journals whose `generation` equals the snapshot's are
//!   replayed, so a crash between writing a new snapshot and replacing the journal never replays
//!   old records over newer ones. When the journal grows past 2× the snapshot (+1 MiB) it is
//!   compacted into a new snapshot and replaced by an empty journal (new inode).
//! - `settings.json` — the jobs file's non-job settings (temp + rename).
//! - `history.jsonl` — one §4 row per line, newest at the end.
//!
//! # Cache and change detection
//! Each handle keeps the parsed records, a wake-up index (`BTreeSet<(instant, name)>`) and the
//! journal's inode + offset. On each lock acquisition it stats the journal: unchanged → nothing
//! to parse (idle claim is a stat and an index peek); grown → only the new tail is read;
//! replaced → full reload. Every mutation appends only the records it changed, so add /
//! complete / pause cost O(1) amortised regardless of the number of jobs.
//!
//! # Crash safety
//! Appends are one `write` of whole lines followed by `fdatasync`. A final line without its
//! newline was never acknowledged: it is cut off (with a `warn!`) under the lock before anything
//! else is appended. A complete line that does not parse is corruption: [`StoreError::Corrupt`]
//! naming the file, line and column, and the file is never modified. Write order for a run's end:
//! history row(s) first, then the job record. Each lease remembers where history ended at claim
//! time (`mark`); before recovery writes `abandoned` for an expired lease it scans history from
//! there for the run_id, and if the run's row is already there (the process died between the two
//! writes) it finishes the job from that row instead of writing a second one. A `missed` row
//! whose job record did not reach the journal can be written twice (never lost); that is the
//! chosen side of the trade-off.
//!
//! # History corruption checks
//! Opening validates the first and last 64 KiB of history; queries validate every line they
//! read. (Validating a 1 000 000-row history on every open would defeat the ≤ 300 ms launch.)
//!
//! # Retention
//! `compact_history` keeps the newest N rows per job (default 10 000) and/or rows newer than a
//! maximum age, by writing a new file (temp + fsync + rename + fsync dir). `complete` runs it
//! automatically when history doubled since this handle last compacted (and is over 64 MiB).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::logic::{self, ApplyChange};
use super::*;
use crate::model::{HistoryRow, JobDef, JobRecord, JobsFile, Settings};
use crate::schedule::Compiled;

const VERSION_TEXT: &str = "cronsole-file-store 1";
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

#[derive(Serialize, Deserialize)]
struct Header {
    cronsole: String,
    generation: u64,
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

#[derive(Default)]
struct Inner {
    loaded: bool,
    jobs: BTreeMap<String, Cached>,
    wake: BTreeSet<(DateTime<Utc>, String)>,
    generation: u64,
    snapshot_len: u64,
    journal: Option<File>,
    journal_ino: u64,
    journal_off: u64,
    history: Option<File>,
    history_ino: u64,
    history_len: u64,
    history_compacted_len: u64,
    settings: Settings,
    settings_stamp: (u64, i64, i64, u64),
}

/// The file store. Cheap to open; each handle has its own lock fd and cache.
pub struct FileStore {
    dir: PathBuf,
    lock: File,
    inner: Mutex<Inner>,
}

struct Locked<'a> {
    store: &'a FileStore,
    inner: MutexGuard<'a, Inner>,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        if let Err(e) = <File as fs4::FileExt>::unlock(&self.store.lock) {
            tracing::warn!("unlocking the store failed: {e}");
        }
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |e| StoreError::io(path, e)
}

fn sync_dir(dir: &Path) -> StoreResult<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

/// Write `bytes` to `path` atomically: temp + fsync + rename + fsync dir.
fn write_atomic(dir: &Path, path: &Path, bytes: &[u8]) -> StoreResult<()> {
    // A temp name of our own: two processes creating a fresh store at once (both writing
    // VERSION before either holds the lock) must not rename each other's temp file away.
    let tmp = path.with_extension(format!(
        "tmp.{}.{}",
        std::process::id(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    ));
    let mut f = File::create(&tmp).map_err(io_err(&tmp))?;
    f.write_all(bytes).map_err(io_err(&tmp))?;
    f.sync_all().map_err(io_err(&tmp))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(io_err(path))?;
    sync_dir(dir)
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

/// Cut a torn (newline-less) final line of an append-only file. Returns the new length.
fn cut_torn_tail(path: &Path, f: &File, len: u64) -> StoreResult<u64> {
    if len == 0 {
        return Ok(0);
    }
    let mut last = [0u8; 1];
    read_at(f, path, len - 1, &mut last)?;
    if last[0] == b'\n' {
        return Ok(len);
    }
    // Find the last newline.
    let mut end = len;
    let mut keep = 0;
    'outer: while end > 0 {
        let start = end.saturating_sub(BLOCK);
        let mut buf = vec![0u8; (end - start) as usize];
        read_at(f, path, start, &mut buf)?;
        if let Some(i) = buf.iter().rposition(|b| *b == b'\n') {
            keep = start + i as u64 + 1;
            break 'outer;
        }
        end = start;
    }
    tracing::warn!(
        file = %path.display(),
        "cutting a torn final line ({} bytes, never acknowledged)",
        len - keep
    );
    f.set_len(keep).map_err(io_err(path))?;
    f.sync_data().map_err(io_err(path))?;
    Ok(keep)
}

fn read_at(f: &File, path: &Path, off: u64, buf: &mut [u8]) -> StoreResult<()> {
    use std::os::unix::fs::FileExt;
    f.read_exact_at(buf, off).map_err(io_err(path))
}

fn count_lines_before(path: &Path, off: u64) -> StoreResult<u64> {
    let mut f = File::open(path).map_err(io_err(path))?;
    let mut left = off;
    let mut n = 0u64;
    let mut buf = vec![0u8; BLOCK as usize];
    while left > 0 {
        let want = left.min(BLOCK) as usize;
        f.read_exact(&mut buf[..want]).map_err(io_err(path))?;
        n += buf[..want].iter().filter(|b| **b == b'\n').count() as u64;
        left -= want as u64;
    }
    Ok(n)
}

fn stat(path: &Path) -> StoreResult<Option<std::fs::Metadata>> {
    match std::fs::metadata(path) {
        Ok(m) => Ok(Some(m)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StoreError::io(path, e)),
    }
}

fn parse_history_line(path: &Path, line_no: u64, line: &[u8]) -> StoreResult<HistoryRow> {
    serde_json::from_slice(line).map_err(|e| json_err(path, line_no, &e))
}

impl FileStore {
    /// Open (creating if needed) the store in `dir`. A foreign or corrupt store is an error
    /// naming the file; nothing is reset.
    pub fn open(dir: &Path) -> StoreResult<FileStore> {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        let vpath = dir.join(VERSION_FILE);
        match std::fs::read_to_string(&vpath) {
            Ok(v) => {
                if v.trim() != VERSION_TEXT {
                    return Err(StoreError::Version {
                        file: vpath,
                        found: v.trim().chars().take(80).collect(),
                        supported: VERSION_TEXT.to_string(),
                    });
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let ours = [SNAPSHOT_FILE, JOURNAL_FILE, HISTORY_FILE, SETTINGS_FILE];
                if ours.iter().any(|f| dir.join(f).exists()) {
                    return Err(StoreError::Version {
                        file: vpath,
                        found: "missing".to_string(),
                        supported: VERSION_TEXT.to_string(),
                    });
                }
                write_atomic(dir, &vpath, format!("{VERSION_TEXT}\n").as_bytes())?;
            }
            Err(e) => return Err(StoreError::io(vpath, e)),
        }
        let lpath = dir.join(LOCK_FILE);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&lpath)
            .map_err(io_err(&lpath))?;
        let store = FileStore {
            dir: dir.to_path_buf(),
            lock,
            inner: Mutex::new(Inner::default()),
        };
        {
            let mut l = store.lock()?;
            l.validate_history_ends()?;
        }
        Ok(store)
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
        <File as fs4::FileExt>::lock(&self.lock).map_err(io_err(&self.path(LOCK_FILE)))?;
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
        let created;
        let name = def.name.clone();
        match l.inner.jobs.get_mut(&name) {
            Some(c) => {
                created = false;
                let change = logic::apply_def(&mut c.rec, def, now)
                    .map_err(|e| StoreError::Invalid(format!("job '{name}': {e}")))?;
                if change == ApplyChange::Unchanged {
                    return Ok(false);
                }
                c.sched = logic::compile(&c.rec).ok();
            }
            None => {
                created = true;
                let rec = logic::new_record(def.clone(), now)
                    .map_err(|e| StoreError::Invalid(format!("job '{name}': {e}")))?;
                l.inner.jobs.insert(name.clone(), Cached::new(rec, None));
            }
        }
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

impl Locked<'_> {
    fn path(&self, name: &str) -> PathBuf {
        self.store.path(name)
    }

    fn refresh(&mut self) -> StoreResult<()> {
        let jpath = self.path(JOURNAL_FILE);
        let jmeta = stat(&jpath)?;
        let reload = match &jmeta {
            None => true,
            Some(m) => {
                !self.inner.loaded
                    || m.ino() != self.inner.journal_ino
                    || m.len() < self.inner.journal_off
            }
        };
        if reload {
            self.full_reload()?;
        } else if let Some(m) = jmeta
            && m.len() > self.inner.journal_off
        {
            self.read_journal_tail(m.len())?;
        }
        self.refresh_settings()?;
        self.refresh_history()?;
        Ok(())
    }

    fn refresh_history(&mut self) -> StoreResult<()> {
        let hpath = self.path(HISTORY_FILE);
        let meta = stat(&hpath)?;
        let (ino, len) = meta.map_or((0, 0), |m| (m.ino(), m.len()));
        if self.inner.history.is_none() || ino != self.inner.history_ino {
            let f = OpenOptions::new()
                .create(true)
                .append(true)
                .read(true)
                .open(&hpath)
                .map_err(io_err(&hpath))?;
            let m = f.metadata().map_err(io_err(&hpath))?;
            self.inner.history_ino = m.ino();
            self.inner.history_len = cut_torn_tail(&hpath, &f, m.len())?;
            if self.inner.history_compacted_len == 0 {
                self.inner.history_compacted_len = self.inner.history_len;
            }
            self.inner.history = Some(f);
        } else if len != self.inner.history_len {
            let Some(f) = self.inner.history.as_ref() else {
                return Ok(());
            };
            self.inner.history_len = cut_torn_tail(&hpath, f, len)?;
        }
        Ok(())
    }

    fn refresh_settings(&mut self) -> StoreResult<()> {
        let spath = self.path(SETTINGS_FILE);
        let Some(m) = stat(&spath)? else {
            self.inner.settings = Settings::default();
            self.inner.settings_stamp = (0, 0, 0, 0);
            return Ok(());
        };
        let stamp = (m.ino(), m.mtime(), m.mtime_nsec(), m.len());
        if stamp == self.inner.settings_stamp {
            return Ok(());
        }
        let text = std::fs::read(&spath).map_err(io_err(&spath))?;
        self.inner.settings =
            serde_json::from_slice(&text).map_err(|e| json_err(&spath, e.line() as u64, &e))?;
        self.inner.settings_stamp = stamp;
        Ok(())
    }

    fn full_reload(&mut self) -> StoreResult<()> {
        let inner = &mut *self.inner;
        inner.jobs.clear();
        inner.wake.clear();
        inner.loaded = false;
        inner.journal = None;
        let spath = self.store.path(SNAPSHOT_FILE);
        let mut generation = 0;
        let mut snapshot_len = 0;
        match std::fs::read(&spath) {
            Ok(bytes) => {
                snapshot_len = bytes.len() as u64;
                if !bytes.is_empty() && !bytes.ends_with(b"\n") {
                    let line = bytes.iter().filter(|b| **b == b'\n').count() as u64 + 1;
                    return Err(corrupt(
                        &spath,
                        line,
                        1,
                        "snapshot does not end with a newline",
                    ));
                }
                for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
                    let no = i as u64 + 1;
                    if line.is_empty() {
                        if i + 1 == bytes.split(|b| *b == b'\n').count() {
                            break;
                        }
                        return Err(corrupt(&spath, no, 1, "empty line"));
                    }
                    if i == 0 {
                        let h: Header =
                            serde_json::from_slice(line).map_err(|e| json_err(&spath, no, &e))?;
                        if h.cronsole != "snapshot" {
                            return Err(corrupt(&spath, 1, 1, "not a snapshot header"));
                        }
                        generation = h.generation;
                        continue;
                    }
                    let e: Entry =
                        serde_json::from_slice(line).map_err(|e| json_err(&spath, no, &e))?;
                    let name = e.job.def.name.clone();
                    inner.jobs.insert(name, Cached::new(e.job, e.mark));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError::io(spath, e)),
        }
        inner.generation = generation;
        inner.snapshot_len = snapshot_len;

        let jpath = self.store.path(JOURNAL_FILE);
        let fresh = match stat(&jpath)? {
            None => true,
            Some(_) => {
                let f = OpenOptions::new()
                    .read(true)
                    .append(true)
                    .open(&jpath)
                    .map_err(io_err(&jpath))?;
                let m = f.metadata().map_err(io_err(&jpath))?;
                let len = cut_torn_tail(&jpath, &f, m.len())?;
                let mut bytes = vec![0u8; len as usize];
                read_at(&f, &jpath, 0, &mut bytes)?;
                let mut stale = false;
                let mut off = 0u64;
                for (i, line) in bytes.split_inclusive(|b| *b == b'\n').enumerate() {
                    let no = i as u64 + 1;
                    let body = &line[..line.len() - 1];
                    off += line.len() as u64;
                    if i == 0 {
                        let h: Header =
                            serde_json::from_slice(body).map_err(|e| json_err(&jpath, no, &e))?;
                        if h.cronsole != "journal" {
                            return Err(corrupt(&jpath, 1, 1, "not a journal header"));
                        }
                        if h.generation > generation {
                            // Only an older journal can be left by a crash mid-compaction; a
                            // newer one means the snapshot is missing or was replaced: never
                            // reset the store silently.
                            return Err(corrupt(
                                &jpath,
                                1,
                                1,
                                format!(
                                    "journal generation {} is newer than the snapshot's ({generation}); is {SNAPSHOT_FILE} missing?",
                                    h.generation
                                ),
                            ));
                        }
                        if h.generation != generation {
                            stale = true;
                            break;
                        }
                        continue;
                    }
                    let e: Entry =
                        serde_json::from_slice(body).map_err(|e| json_err(&jpath, no, &e))?;
                    let name = e.job.def.name.clone();
                    inner.jobs.insert(name, Cached::new(e.job, e.mark));
                }
                if stale || len == 0 {
                    true
                } else {
                    inner.journal_ino = m.ino();
                    inner.journal_off = off;
                    inner.journal = Some(f);
                    false
                }
            }
        };
        if fresh {
            self.new_journal()?;
        }
        let inner = &mut *self.inner;
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
        let header = serde_json::to_string(&Header {
            cronsole: "journal".into(),
            generation: self.inner.generation,
        })
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
        write_atomic(&self.store.dir, &jpath, format!("{header}\n").as_bytes())?;
        let f = OpenOptions::new()
            .read(true)
            .append(true)
            .open(&jpath)
            .map_err(io_err(&jpath))?;
        let m = f.metadata().map_err(io_err(&jpath))?;
        self.inner.journal_ino = m.ino();
        self.inner.journal_off = m.len();
        self.inner.journal = Some(f);
        Ok(())
    }

    fn read_journal_tail(&mut self, len: u64) -> StoreResult<()> {
        let jpath = self.path(JOURNAL_FILE);
        let Some(f) = self.inner.journal.as_ref() else {
            return self.full_reload();
        };
        let len = cut_torn_tail(&jpath, f, len)?;
        let start = self.inner.journal_off;
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
                    let before = count_lines_before(&jpath, start)?;
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
        inner.journal_off = len;
        Ok(())
    }

    fn validate_history_ends(&mut self) -> StoreResult<()> {
        let hpath = self.path(HISTORY_FILE);
        let len = self.inner.history_len;
        let Some(f) = self.inner.history.as_ref() else {
            return Ok(());
        };
        if len == 0 {
            return Ok(());
        }
        let head = len.min(BLOCK);
        let mut buf = vec![0u8; head as usize];
        read_at(f, &hpath, 0, &mut buf)?;
        for (i, line) in buf.split_inclusive(|b| *b == b'\n').enumerate() {
            if !line.ends_with(b"\n") {
                break;
            }
            parse_history_line(&hpath, i as u64 + 1, &line[..line.len() - 1])?;
        }
        if len > BLOCK {
            let start = len - BLOCK;
            let mut buf = vec![0u8; BLOCK as usize];
            read_at(f, &hpath, start, &mut buf)?;
            let first_nl = buf
                .iter()
                .position(|b| *b == b'\n')
                .map_or(buf.len(), |p| p + 1);
            let mut rel = first_nl;
            for line in buf[first_nl..].split_inclusive(|b| *b == b'\n') {
                let body = &line[..line.len() - 1];
                if let Err(e) = serde_json::from_slice::<HistoryRow>(body) {
                    let no = count_lines_before(&hpath, start + rel as u64)? + 1;
                    return Err(json_err(&hpath, no, &e));
                }
                rel += line.len();
            }
        }
        Ok(())
    }

    /// Append whole lines to history with one write + fdatasync.
    fn append_history(&mut self, rows: &[HistoryRow]) -> StoreResult<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let hpath = self.path(HISTORY_FILE);
        let mut buf = Vec::with_capacity(rows.len() * 512);
        for r in rows {
            serde_json::to_writer(&mut buf, r).map_err(|e| StoreError::Invalid(e.to_string()))?;
            buf.push(b'\n');
        }
        let Some(f) = self.inner.history.as_mut() else {
            return Err(StoreError::Invalid("history file not open".into()));
        };
        f.write_all(&buf).map_err(io_err(&hpath))?;
        f.sync_data().map_err(io_err(&hpath))?;
        self.inner.history_len += buf.len() as u64;
        Ok(())
    }

    /// Append the named records to the journal (one write + fdatasync), reindex them, and
    /// compact when the journal outgrew the snapshot.
    fn append_jobs(&mut self, names: &[String]) -> StoreResult<()> {
        if names.is_empty() {
            return Ok(());
        }
        let jpath = self.path(JOURNAL_FILE);
        let mut buf = Vec::with_capacity(names.len() * 1024);
        for n in names {
            let Some(c) = self.inner.jobs.get(n) else {
                continue;
            };
            serde_json::to_writer(
                &mut buf,
                &EntryRef {
                    job: &c.rec,
                    mark: c.mark,
                },
            )
            .map_err(|e| StoreError::Invalid(e.to_string()))?;
            buf.push(b'\n');
        }
        let Some(f) = self.inner.journal.as_mut() else {
            return Err(StoreError::Invalid("journal not open".into()));
        };
        f.write_all(&buf).map_err(io_err(&jpath))?;
        f.sync_data().map_err(io_err(&jpath))?;
        self.inner.journal_off += buf.len() as u64;
        for n in names {
            reindex(&mut self.inner, n);
        }
        if self.inner.journal_off > 2 * self.inner.snapshot_len + 1024 * 1024
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
        let generation = self.inner.generation + 1;
        let mut buf = Vec::new();
        serde_json::to_writer(
            &mut buf,
            &Header {
                cronsole: "snapshot".into(),
                generation,
            },
        )
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
        buf.push(b'\n');
        for c in self.inner.jobs.values() {
            serde_json::to_writer(
                &mut buf,
                &EntryRef {
                    job: &c.rec,
                    mark: c.mark,
                },
            )
            .map_err(|e| StoreError::Invalid(e.to_string()))?;
            buf.push(b'\n');
        }
        let spath = self.path(SNAPSHOT_FILE);
        write_atomic(&self.store.dir, &spath, &buf)?;
        self.inner.generation = generation;
        self.inner.snapshot_len = buf.len() as u64;
        self.new_journal()
    }

    /// Scan history from `mark` for the row of `run_id` (crash between row and record).
    fn find_run_row(&self, mark: Option<Mark>, run_id: Uuid) -> StoreResult<Option<HistoryRow>> {
        let hpath = self.path(HISTORY_FILE);
        let Some(f) = self.inner.history.as_ref() else {
            return Ok(None);
        };
        let len = self.inner.history_len;
        let start = match mark {
            Some(m) if m.ino == self.inner.history_ino && m.off <= len => m.off,
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
                if let Ok(row) = serde_json::from_slice::<HistoryRow>(line)
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
        let len = self.inner.history_len;
        let Some(f) = self.inner.history.as_ref() else {
            return Ok(0);
        };
        let mut bytes = vec![0u8; len as usize];
        read_at(f, &hpath, 0, &mut bytes)?;
        let mut rows: Vec<(String, DateTime<Utc>, std::ops::Range<usize>)> = Vec::new();
        let mut pos = 0usize;
        for (i, line) in bytes.split_inclusive(|b| *b == b'\n').enumerate() {
            let body = &line[..line.len() - 1];
            let row = parse_history_line(&hpath, i as u64 + 1, body)?;
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
        write_atomic(&self.store.dir, &hpath, &out)?;
        self.inner.history = None;
        self.refresh_history()?;
        self.inner.history_compacted_len = self.inner.history_len;
        Ok(dropped)
    }

    fn period(&self) -> crate::model::BudgetPeriod {
        logic::counter_period(&self.inner.settings)
    }

    fn mark_now(&self) -> Mark {
        Mark {
            ino: self.inner.history_ino,
            off: self.inner.history_len,
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
    f: &'a File,
    path: &'a Path,
    /// Bytes not yet consumed are `[0, pos)`.
    pos: u64,
    buf: Vec<u8>,
    /// Lines ready, newest last, with their start offsets.
    ready: Vec<(u64, Vec<u8>)>,
}

impl<'a> Backwards<'a> {
    fn new(f: &'a File, path: &'a Path, len: u64) -> Self {
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
        let mut seen = HashSet::new();
        for d in &file.jobs {
            if !seen.insert(d.name.as_str()) {
                return Err(StoreError::Invalid(format!(
                    "job name '{}' appears twice in the jobs file",
                    d.name
                )));
            }
        }
        let mut l = self.lock()?;
        if l.inner.settings != file.settings {
            let bytes = serde_json::to_vec_pretty(&file.settings)
                .map_err(|e| StoreError::Invalid(e.to_string()))?;
            let spath = l.path(SETTINGS_FILE);
            write_atomic(&self.dir, &spath, &bytes)?;
            l.inner.settings_stamp = (0, 0, 0, 0);
            l.refresh_settings()?;
        }
        let mut report = ApplyReport::default();
        let mut changed = Vec::new();
        for def in &file.jobs {
            let name = def.name.clone();
            let bad = |e: crate::schedule::ScheduleError| {
                StoreError::Invalid(format!("job '{}': {e}", def.name))
            };
            match l.inner.jobs.get_mut(&name) {
                Some(c) => match logic::apply_def(&mut c.rec, def, now).map_err(bad)? {
                    ApplyChange::Unchanged => report.unchanged.push(name),
                    ApplyChange::Updated => {
                        c.sched = logic::compile(&c.rec).ok();
                        report.updated.push(name.clone());
                        changed.push(name);
                    }
                },
                None => {
                    let rec = logic::new_record(def.clone(), now).map_err(bad)?;
                    l.inner.jobs.insert(name.clone(), Cached::new(rec, None));
                    report.created.push(name.clone());
                    changed.push(name);
                }
            }
        }
        for (name, c) in l.inner.jobs.iter_mut() {
            if !seen.contains(name.as_str()) && !c.rec.rt.retired {
                c.rec.rt.retired = true;
                c.rec.rt.retired_reason = Some(logic::REASON_REMOVED.to_string());
                c.rec.rt.trigger_requested_at = None;
                c.rec.rt.recovery_pending = false;
                report.retired.push(name.clone());
                changed.push(name.clone());
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
            match stat(&self.path(name))? {
                Some(m) => (m.ino(), m.len(), m.mtime(), m.mtime_nsec()).hash(&mut h),
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
            let mut dirty = false;
            if let Some(lease) = c.rec.rt.lease.clone()
                && lease.lease_until <= now
            {
                let found = l.find_run_row(c.mark, lease.run_id)?;
                let Some(c) = l.inner.jobs.get_mut(&name) else {
                    continue;
                };
                let (mut row, already) = match found {
                    Some(r) => (r, true),
                    None => (logic::abandoned_row(&c.rec, &lease, req.owner, now), false),
                };
                let fin = logic::finish_run(&mut c.rec, &sched, &mut row, None, None, period, now);
                c.mark = None;
                if !already {
                    rows.push(row);
                }
                rows.extend(fin.extra_rows);
                dirty = true;
            }
            let can = plans.len() < req.limit;
            let Some(c) = l.inner.jobs.get_mut(&name) else {
                continue;
            };
            let ev = logic::evaluate(&mut c.rec, &sched, now, req.owner, can, period);
            rows.extend(ev.rows);
            if let Some(p) = ev.claim {
                c.mark = Some(mark);
                plans.push((name.clone(), p));
            }
            if dirty || ev.changed {
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
            .unwrap_or_else(|| Err(StoreError::Invalid("no completion result".into())))
    }

    /// Group commit: every completion under one lock, their rows in one history append (one
    /// fdatasync) and their job records in one journal append (one more), so runs that end
    /// together do not queue one fsync pair each behind the lock (claims wait less).
    fn complete_many(&self, cs: Vec<Completion>) -> Vec<StoreResult<CompleteOutcome>> {
        let n = cs.len();
        let mut l = match self.lock() {
            Ok(l) => l,
            Err(e) => {
                let msg = e.to_string();
                let mut out = vec![Err(e)];
                out.extend((1..n).map(|_| Err(StoreError::Invalid(msg.clone()))));
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
            let msg = e.to_string();
            let mut first = Some(e);
            return results
                .into_iter()
                .map(|r| {
                    r.and_then(|_| {
                        Err(first
                            .take()
                            .unwrap_or_else(|| StoreError::Invalid(msg.clone())))
                    })
                })
                .collect();
        }
        let hl = l.inner.history_len;
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
            let Some(f) = l.inner.history.as_ref() else {
                return Ok(Vec::new());
            };
            (
                f.try_clone().map_err(io_err(&self.path(HISTORY_FILE)))?,
                l.inner.history_len,
            )
        };
        // The lock is released: appends only add after `len`, compaction swaps the inode and
        // our cloned fd keeps reading the old file.
        let hpath = self.path(HISTORY_FILE);
        let job_needle = q.job.as_ref().map(|j| format!("\"job\":{}", json_str(j)));
        let status_needle = q.status.map(|s| format!("\"status\":\"{}\"", s.as_str()));
        let run_needle = q.run_id.map(|r| r.to_string());
        let mut out = Vec::new();
        let mut skip = q.offset;
        let unfiltered = q.job.is_none()
            && q.status.is_none()
            && q.run_id.is_none()
            && q.since.is_none()
            && !q.with_diff;
        let mut it = Backwards::new(&file, &hpath, len);
        let limit = if q.limit == 0 { usize::MAX } else { q.limit };
        while out.len() < limit {
            let Some((off, line)) = it.next_line()? else {
                break;
            };
            if line.is_empty() {
                continue;
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
                // Still validate cheaply? A full parse of every skipped line would make filtered
                // queries slow; skipped lines are checked structurally only.
                if !line.starts_with(b"{") || !line.ends_with(b"}") {
                    let no = count_lines_before(&hpath, off)? + 1;
                    return Err(corrupt(&hpath, no, 1, "history line is not a JSON object"));
                }
                continue;
            }
            // Paging without filters: every line is a row, so the rows skipped by `offset` need
            // no parse (checked structurally like other skipped lines), and a deep page costs
            // a backward read, not a million parses.
            if skip > 0 && unfiltered {
                if !line.starts_with(b"{") || !line.ends_with(b"}") {
                    let no = count_lines_before(&hpath, off)? + 1;
                    return Err(corrupt(&hpath, no, 1, "history line is not a JSON object"));
                }
                skip -= 1;
                continue;
            }
            let row: HistoryRow = match serde_json::from_slice(&line) {
                Ok(r) => r,
                Err(e) => {
                    let no = count_lines_before(&hpath, off)? + 1;
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
            if skip > 0 {
                skip -= 1;
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
        let changed = logic::set_paused(&mut c.rec, paused, now)
            .map_err(|e| StoreError::Invalid(format!("job '{name}': {e}")))?;
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
        if c.rec.rt.retired {
            return Err(StoreError::Invalid(format!(
                "job '{name}' is retired ({}); it cannot be triggered",
                c.rec.rt.retired_reason.as_deref().unwrap_or("retired")
            )));
        }
        if c.rec.rt.trigger_requested_at.is_some() {
            return Ok(TriggerOutcome::AlreadyQueued);
        }
        if c.rec.rt.lease.is_some() {
            return Ok(TriggerOutcome::AlreadyRunning);
        }
        c.rec.rt.trigger_requested_at = Some(now);
        l.persist(&[], &[name.to_string()])?;
        Ok(TriggerOutcome::Queued)
    }

    fn update_job(
        &self,
        name: &str,
        edit: &super::JobEdit,
        now: DateTime<Utc>,
    ) -> StoreResult<super::EditOutcome> {
        let mut l = self.lock()?;
        let Some(c) = l.inner.jobs.get_mut(name) else {
            return Err(StoreError::NoSuchJob(name.to_string()));
        };
        let (changed, out) = super::operator::apply_edit(&mut c.rec, edit, now)?;
        if changed {
            l.persist(&[], &[name.to_string()])?;
        }
        Ok(out)
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
    let mut row = c.row;
    row.run_id = c.run_id;
    let mut out = CompleteOutcome::default();
    if !logic::holds(&cached.rec, c.run_id) {
        row.stale_lease = true;
        logic::count_row(&mut cached.rec, &row, period, c.now);
        out.stale = true;
        out.rows.push(row);
        return Ok((out, c.job));
    }
    let Some(sched) = cached.sched.clone() else {
        return Err(StoreError::Invalid(format!(
            "job '{}' has a schedule that does not compile",
            c.job
        )));
    };
    let fin = logic::finish_run(
        &mut cached.rec,
        &sched,
        &mut row,
        c.state,
        c.hold_until,
        period,
        c.now,
    );
    cached.mark = None;
    out.state_rejected = fin.state_rejected;
    out.rows.push(row);
    out.rows.extend(fin.extra_rows);
    Ok((out, c.job))
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

    #[test]
    fn stale_journal_after_crash_between_snapshot_and_journal_is_ignored() {
        let dir = tmp("stale");
        let a = FileStore::open(&dir).unwrap();
        a.apply(&jobs_file(&["j"]), t(0)).unwrap();
        {
            let mut l = a.lock().unwrap();
            l.compact_jobs().unwrap();
        }
        // Simulate: a journal of the previous generation with an older record survives.
        let old = format!(
            "{{\"cronsole\":\"journal\",\"generation\":0}}\n{}\n",
            serde_json::to_string(&EntryRef {
                job: &crate::store::logic::new_record(def("ghost"), t(0)).unwrap(),
                mark: None
            })
            .unwrap()
        );
        std::fs::write(dir.join(JOURNAL_FILE), old).unwrap();
        let r = FileStore::open(&dir).unwrap();
        let names: Vec<String> = r.jobs().unwrap().into_iter().map(|j| j.def.name).collect();
        assert_eq!(names, vec!["j"]);
    }

    #[test]
    fn torn_final_lines_are_cut_and_complete_garbage_is_corruption() {
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
        let s = FileStore::open(&dir).unwrap();
        assert_eq!(std::fs::read(&hpath).unwrap(), before, "torn row cut");
        assert_eq!(s.history(&HistoryQuery::default()).unwrap().len(), 1);
        assert_eq!(s.job("j").unwrap().unwrap().rt.runs, 1);
        drop(s);

        let mut bad = before.clone();
        bad.extend_from_slice(b"{\"not\": a row}\n");
        std::fs::write(&hpath, &bad).unwrap();
        let err = FileStore::open(&dir).err().unwrap();
        match &err {
            StoreError::Corrupt { file, line, .. } => {
                assert!(file.ends_with(HISTORY_FILE));
                assert_eq!(*line, 2);
            }
            e => panic!("unexpected {e}"),
        }
        assert!(err.is_bad_input());
        assert_eq!(std::fs::read(&hpath).unwrap(), bad, "bytes untouched");
    }

    #[test]
    fn a_journal_newer_than_the_snapshot_is_corruption_not_a_reset() {
        let dir = tmp("newer-journal");
        let s = FileStore::open(&dir).unwrap();
        s.apply(&jobs_file(&["a", "b"]), t(0)).unwrap();
        s.compact_jobs_for_test();
        drop(s);
        std::fs::remove_file(dir.join(SNAPSHOT_FILE)).unwrap();
        let before = std::fs::read(dir.join(JOURNAL_FILE)).unwrap();
        let err = FileStore::open(&dir)
            .and_then(|s| s.jobs())
            .expect_err("must not open empty");
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
        assert!(err.to_string().contains("newer than the snapshot"), "{err}");
        assert_eq!(
            std::fs::read(dir.join(JOURNAL_FILE)).unwrap(),
            before,
            "journal untouched"
        );
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
    fn foreign_version_is_refused() {
        let dir = tmp("ver");
        std::fs::write(dir.join(VERSION_FILE), "something else 9\n").unwrap();
        assert!(matches!(
            FileStore::open(&dir),
            Err(StoreError::Version { .. })
        ));
    }
}

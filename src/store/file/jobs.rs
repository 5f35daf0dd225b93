//! The jobs half of the file store: the snapshot + journal pair (records, wake-up index,
//! generation checks, compaction) and the cached form of each job.
//!
//! Must not touch: history (see [`super::history`]) or scheduling decisions ([`crate::store::logic`]).

use serde::{Deserialize, Serialize};

use std::path::Path;

use super::log::{
    AppendLog, AtomicFile, check_id, complete_len, corrupt, count_lines_before,
    encode_checked_line, header_line, io_err, json_err, missing, read_at, verify_job_line,
    write_atomic,
};
use super::{Inner, JOURNAL_FILE, Locked, SNAPSHOT_FILE};
use crate::model::JobRecord;
use crate::schedule::Compiled;
use crate::store::io::{IoFile, OpenMode};
use crate::store::{StoreError, StoreResult, filefmt, logic};
use chrono::{DateTime, Utc};

/// A history position: where history ended when a lease was taken (`mark`) or a record was
/// written (`at`): the open segment's file identity, length and segment number (format 3; a
/// format-2 mark has none and means "somewhere in history").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Mark {
    pub(super) ino: u64,
    pub(super) off: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) seg: Option<u64>,
}

#[derive(Serialize)]
pub(super) struct EntryRef<'a> {
    pub(super) job: &'a JobRecord,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) mark: Option<Mark>,
    /// History position when this record was written (the journal/history cross-check).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) at: Option<Mark>,
}

/// A job line as this release writes it: [`EntryRef`] plus `rows_to`, where history ended when
/// the line was written (after the rows of the same operation). Rows of the job found after it
/// were written by an operation whose record never landed (a process died or failed between
/// its rows and its record): a writer about to generate rows for the job looks there first, so
/// it never records the same slots twice (see `Locked::rows_since_records`).
#[derive(Serialize)]
pub(super) struct EntryLine<'a> {
    pub(super) job: &'a JobRecord,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) mark: Option<Mark>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) rows_to: Option<Mark>,
    /// History position when this record was written, durable before it (the journal/history
    /// cross-check).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) at: Option<Mark>,
}

#[derive(Deserialize)]
pub(super) struct Entry {
    pub(super) job: JobRecord,
    #[serde(default)]
    pub(super) mark: Option<Mark>,
    #[serde(default)]
    pub(super) at: Option<Mark>,
    /// See [`EntryLine::rows_to`] (absent in lines written before it existed).
    #[serde(default)]
    pub(super) rows_to: Option<Mark>,
}

pub(super) struct Cached {
    pub(super) rec: JobRecord,
    pub(super) sched: Option<Compiled>,
    pub(super) mark: Option<Mark>,
    /// Where history ended when this record was last written (see [`EntryLine::rows_to`]).
    pub(super) rows_to: Option<Mark>,
    pub(super) wake: Option<DateTime<Utc>>,
    /// History position when the record was last written (see [`EntryRef::at`]).
    pub(super) at: Option<Mark>,
}

impl Cached {
    pub(super) fn new(rec: JobRecord, mark: Option<Mark>) -> Cached {
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
            rows_to: None,
            wake: None,
            at: None,
        }
    }

    fn from_entry(e: Entry) -> Cached {
        let mut c = Cached::new(e.job, e.mark);
        c.rows_to = e.rows_to;
        c
    }
}
impl Locked<'_> {
    pub(super) fn full_reload(&mut self) -> StoreResult<()> {
        let io = &*self.store.io;
        let id = self.store.store_id.as_str();
        let inner = &mut *self.inner;
        inner.jobs.clear();
        inner.wake.clear();
        inner.chained.clear();
        inner.loaded = false;
        inner.journal = AppendLog::default();
        inner.journal_stale = false;
        let spath = self.store.path(SNAPSHOT_FILE);
        // Read a piece at a time: at 1 000 000 jobs the snapshot is hundreds of MB, and holding
        // it whole beside the records it parses into was most of every command's peak memory.
        let sf = match io.open(&spath, OpenMode::Read) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(missing(&spath, "the snapshot holds every job"));
            }
            Err(e) => return Err(StoreError::io(spath, e)),
        };
        let slen = sf.metadata().map_err(io_err(&spath))?.len;
        if slen == 0 {
            return Err(corrupt(
                &spath,
                1,
                1,
                "snapshot is empty: its header line is missing",
            ));
        }
        let mut last = [0u8; 1];
        read_at(&*sf, &spath, slen - 1, &mut last)?;
        if last[0] != b'\n' {
            let line = count_lines_before(&*sf, &spath, slen)? + 1;
            return Err(corrupt(
                &spath,
                line,
                1,
                "snapshot does not end with a newline",
            ));
        }
        let mut generation = 0;
        let mut absorbed = None;
        for_each_line(&*sf, &spath, slen, |no, line| {
            if line.is_empty() {
                return Err(corrupt(&spath, no, 1, "empty line"));
            }
            if no == 1 {
                let h: filefmt::Header =
                    serde_json::from_slice(line).map_err(|e| json_err(&spath, no, &e))?;
                if h.cronsole != "snapshot" {
                    return Err(corrupt(&spath, 1, 1, "not a snapshot header"));
                }
                check_id(&spath, h.store.as_deref(), id)?;
                generation = h.generation;
                absorbed = h.absorbed;
                return Ok(());
            }
            verify_job_line(&spath, no, line)?;
            let e: Entry = serde_json::from_slice(line).map_err(|e| json_err(&spath, no, &e))?;
            let name = e.job.def.name.clone();
            let at = e.at;
            let mut c = Cached::from_entry(e);
            c.at = at;
            inner.jobs.insert(name, c);
            Ok(())
        })?;
        drop(sf);
        inner.generation = generation;
        inner.snapshot_len = slen;

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
            verify_job_line(&jpath, no, body)?;
            let e: Entry = serde_json::from_slice(body).map_err(|e| json_err(&jpath, no, &e))?;
            let name = e.job.def.name.clone();
            let at = e.at;
            let mut c = Cached::from_entry(e);
            c.at = at;
            inner.jobs.insert(name, c);
        }
        inner.journal = AppendLog {
            file: Some(f),
            ino: m.ino,
            len,
        };
        inner.journal_stale = stale;
        inner.names_unsynced = true;
        let names: Vec<String> = inner.jobs.keys().cloned().collect();
        for n in names {
            reindex(inner, &n);
        }
        inner.loaded = true;
        Ok(())
    }

    /// Replace the journal with an empty one of the current generation (new inode).
    pub(super) fn new_journal(&mut self) -> StoreResult<()> {
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

    pub(super) fn read_journal_tail(&mut self, file_len: u64) -> StoreResult<()> {
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
            if filefmt::verify_line(body, "job record").is_err() {
                let before = count_lines_before(f, &jpath, start)?;
                verify_job_line(&jpath, before + parsed.len() as u64 + 1, body)?;
            }
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
            let at = e.at;
            let mut c = Cached::from_entry(e);
            c.at = at;
            inner.jobs.insert(name.clone(), c);
            reindex(inner, &name);
        }
        inner.journal.len = len;
        Ok(())
    }

    /// Append the named records to the journal (one write + fdatasync), reindex them, and
    /// compact when the journal outgrew the snapshot.
    pub(super) fn append_jobs(&mut self, names: &[String]) -> StoreResult<()> {
        if names.is_empty() {
            return Ok(());
        }
        if self.inner.journal_stale {
            self.new_journal()?;
        }
        let jpath = self.path(JOURNAL_FILE);
        let at = self.durable_mark()?;
        // History was appended first: its end now is past every row these records rely on.
        // `rows_to` moves there only for records whose rows since their old `rows_to` are
        // accounted for (see `Locked::rows_unaccounted`).
        let rows_to = self.mark_now();
        let keep = self.rows_unaccounted(names)?;
        let mut buf = Vec::with_capacity(names.len() * 1024);
        for n in names {
            let Some(c) = self.inner.jobs.get_mut(n) else {
                continue;
            };
            c.at = Some(at);
            if !keep.contains(n) {
                c.rows_to = Some(rows_to);
            }
            encode_checked_line(
                &mut buf,
                "job record",
                &EntryLine {
                    job: &c.rec,
                    mark: c.mark,
                    at: c.at,
                    rows_to: c.rows_to,
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

    /// Persist an `apply` batch (job records only, no history rows). A batch that rewrites
    /// most of a large store (the first apply of 1 000 000 jobs, a re-apply changing them all)
    /// is written as a new snapshot directly: appended, it would make the journal outgrow the
    /// snapshot and be compacted at once — every record encoded, held and written twice. A
    /// smaller batch is appended (O(changed) bytes). Either way the records are durable when
    /// this returns Ok; on an error the cache is reloaded from disk before the next operation.
    pub(super) fn persist_apply(&mut self, names: &[String]) -> StoreResult<()> {
        if !rewrites_most(names.len(), self.inner.jobs.len()) {
            return self.persist(&[], names);
        }
        let r = (|| {
            if std::mem::take(&mut self.inner.relies_on_landed) {
                self.sync_history()?;
            }
            for n in names {
                reindex(&mut self.inner, n);
            }
            self.compact_jobs()
        })();
        if r.is_err() {
            self.inner.loaded = false;
        }
        r
    }

    pub(super) fn compact_jobs(&mut self) -> StoreResult<()> {
        if self.inner.journal_stale {
            self.new_journal()?;
        }
        let jpath = self.path(JOURNAL_FILE);
        let jlen = self.inner.journal.len;
        let mut crc = filefmt::Crc32::default();
        for_each_piece(self.inner.journal.file(&jpath)?, &jpath, jlen, |piece| {
            crc.update(piece);
            Ok(())
        })?;
        let absorbed = filefmt::Absorbed {
            len: jlen,
            crc32: crc.finish(),
        };
        let generation = self.inner.generation + 1;
        let spath = self.path(SNAPSHOT_FILE);
        let store = self.store;
        let mut out = AtomicFile::create(&*store.io, &store.dir, &spath)?;
        out.buf = header_line("snapshot", generation, self.id(), Some(absorbed))?;
        for c in self.inner.jobs.values() {
            // Each record keeps the history end of its own last write, not the compaction's:
            // rows a dead process left after it are still looked for.
            encode_checked_line(
                &mut out.buf,
                "job record",
                &EntryLine {
                    job: &c.rec,
                    mark: c.mark,
                    at: c.at,
                    rows_to: c.rows_to,
                },
            )?;
            out.spill()?;
        }
        let len = out.commit()?;
        self.inner.generation = generation;
        self.inner.snapshot_len = len;
        self.new_journal()
    }
}

/// Size of the pieces the snapshot and the journal are read in.
const PIECE: u64 = 1024 * 1024;

/// Call `each` on the first `len` bytes of `f`, `PIECE` bytes at a time.
fn for_each_piece(
    f: &dyn IoFile,
    path: &Path,
    len: u64,
    mut each: impl FnMut(&[u8]) -> StoreResult<()>,
) -> StoreResult<()> {
    let mut buf = vec![0u8; PIECE.min(len) as usize];
    let mut pos = 0;
    while pos < len {
        let n = PIECE.min(len - pos) as usize;
        read_at(f, path, pos, &mut buf[..n])?;
        each(&buf[..n])?;
        pos += n as u64;
    }
    Ok(())
}

/// Call `each(line_number, line)` (from 1, without its newline) on every complete line of the
/// first `len` bytes of `f`, reading it a piece at a time. Bytes after the last newline are
/// not passed (callers check the file ends with one).
fn for_each_line(
    f: &dyn IoFile,
    path: &Path,
    len: u64,
    mut each: impl FnMut(u64, &[u8]) -> StoreResult<()>,
) -> StoreResult<()> {
    let mut carry: Vec<u8> = Vec::new();
    let mut no = 0u64;
    for_each_piece(f, path, len, |mut piece| {
        while let Some(i) = piece.iter().position(|b| *b == b'\n') {
            no += 1;
            if carry.is_empty() {
                each(no, &piece[..i])?;
            } else {
                carry.extend_from_slice(&piece[..i]);
                each(no, &carry)?;
                carry.clear();
            }
            piece = &piece[i + 1..];
        }
        carry.extend_from_slice(piece);
        Ok(())
    })
}

/// Jobs a batch must change before `apply` writes a snapshot instead of appending: few enough
/// that every test store of the fault simulator takes the journal path, many enough that a
/// snapshot is cheaper than the compaction the journal append would trigger.
const DIRECT_SNAPSHOT_MIN: usize = 1024;

/// Whether an `apply` batch of `changed` records out of `total` is written as a new snapshot.
fn rewrites_most(changed: usize, total: usize) -> bool {
    changed >= DIRECT_SNAPSHOT_MIN && changed.saturating_mul(2) >= total
}

pub(super) fn reindex(inner: &mut Inner, name: &str) {
    let Some(c) = inner.jobs.get_mut(name) else {
        return;
    };
    if let Some(old) = c.wake.take() {
        inner.wake.remove(&(old, name.to_string()));
    }
    if c.rec.def.after.is_empty() {
        inner.chained.remove(name);
    } else {
        inner.chained.insert(name.to_string());
    }
    if c.sched.is_none() && c.rec.rt.lease.is_none() {
        return;
    }
    if let Some(w) = logic::wakeup(&c.rec) {
        c.wake = Some(w);
        inner.wake.insert((w, name.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::super::{FileStore, JOURNAL_FILE, SNAPSHOT_FILE};
    use super::{DIRECT_SNAPSHOT_MIN, rewrites_most};
    use crate::model::{JobsFile, Settings};
    use crate::store::logic::tests_support::def;
    use crate::store::{HistoryReader, Store};
    use crate::testkit::time::epoch as t;

    fn lines(p: &std::path::Path) -> usize {
        std::fs::read(p)
            .unwrap()
            .iter()
            .filter(|b| **b == b'\n')
            .count()
    }

    #[test]
    fn only_a_batch_rewriting_most_of_a_large_store_skips_the_journal() {
        assert!(rewrites_most(DIRECT_SNAPSHOT_MIN, 0));
        assert!(rewrites_most(DIRECT_SNAPSHOT_MIN, 2 * DIRECT_SNAPSHOT_MIN));
        assert!(!rewrites_most(
            DIRECT_SNAPSHOT_MIN,
            2 * DIRECT_SNAPSHOT_MIN + 1
        ));
        assert!(
            !rewrites_most(DIRECT_SNAPSHOT_MIN - 1, 0),
            "small stores keep the journal"
        );
    }

    /// A snapshot bigger than the pieces it is written (4 MiB) and read (1 MiB) in: every
    /// record comes back in a fresh handle, and a re-apply changing one job appends one line.
    #[test]
    fn a_large_snapshot_is_written_and_read_in_pieces_and_a_one_job_reapply_appends_one_line() {
        let dir = std::env::temp_dir().join(format!("cronsole-fs-pieces-{}", uuid::Uuid::new_v4()));
        let s = FileStore::open(&dir).unwrap();
        let n = 12_000;
        let mut file = JobsFile {
            settings: Settings::default(),
            jobs: (0..n).map(|i| def(&format!("job-{i:05}"))).collect(),
        };
        assert_eq!(s.apply(&file, t(1000)).unwrap().created.len(), n);
        let snap = dir.join(SNAPSHOT_FILE);
        let journal = dir.join(JOURNAL_FILE);
        assert!(std::fs::metadata(&snap).unwrap().len() > 8 * 1024 * 1024);
        assert_eq!(lines(&snap), n + 1, "header + one line per job");
        assert_eq!(
            lines(&journal),
            1,
            "the batch went to the snapshot: header only"
        );

        let fresh = FileStore::open_existing(&dir).unwrap();
        assert_eq!(fresh.jobs().unwrap(), s.jobs().unwrap());

        file.jobs[17].max_retries += 1;
        let before = std::fs::metadata(&journal).unwrap().len();
        let rep = s.apply(&file, t(1001)).unwrap();
        assert_eq!(rep.updated, vec!["job-00017".to_string()]);
        assert_eq!(lines(&journal), 2, "one changed job, one journal line");
        let grew = std::fs::metadata(&journal).unwrap().len() - before;
        assert!(grew < 4096, "O(changed) bytes, not the store: {grew}");
        let again = FileStore::open_existing(&dir).unwrap();
        assert_eq!(
            again.job("job-00017").unwrap().unwrap().def.max_retries,
            file.jobs[17].max_retries
        );
        assert_eq!(again.jobs().unwrap().len(), n);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! The jobs half of the file store: the snapshot + journal pair (records, wake-up index,
//! generation checks, compaction) and the cached form of each job.
//!
//! Must not touch: history (see [`super::history`]) or scheduling decisions ([`crate::store::logic`]).

use serde::{Deserialize, Serialize};

use super::log::{
    AppendLog, check_id, complete_len, corrupt, count_lines_before, encode_line, header_line,
    io_err, json_err, missing, read_at, write_atomic,
};
use super::{Inner, JOURNAL_FILE, Locked, SNAPSHOT_FILE};
use crate::model::JobRecord;
use crate::schedule::Compiled;
use crate::store::io::OpenMode;
use crate::store::{StoreError, StoreResult, filefmt, logic};
use chrono::{DateTime, Utc};

/// Where history ended when a lease was taken (file identity + length).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Mark {
    pub(super) ino: u64,
    pub(super) off: u64,
}

#[derive(Serialize)]
pub(super) struct EntryRef<'a> {
    pub(super) job: &'a JobRecord,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) mark: Option<Mark>,
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
}

#[derive(Deserialize)]
pub(super) struct Entry {
    pub(super) job: JobRecord,
    #[serde(default)]
    pub(super) mark: Option<Mark>,
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
            inner.jobs.insert(name, Cached::from_entry(e));
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
            inner.jobs.insert(name, Cached::from_entry(e));
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
            inner.jobs.insert(name.clone(), Cached::from_entry(e));
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
        // History was appended first: its end now is past every row these records rely on.
        let rows_to = self.mark_now();
        let mut buf = Vec::with_capacity(names.len() * 1024);
        for n in names {
            let Some(c) = self.inner.jobs.get_mut(n) else {
                continue;
            };
            c.rows_to = Some(rows_to);
            encode_line(
                &mut buf,
                "job record",
                &EntryLine {
                    job: &c.rec,
                    mark: c.mark,
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

    pub(super) fn compact_jobs(&mut self) -> StoreResult<()> {
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
            // Each record keeps the history end of its own last write, not the compaction's:
            // rows a dead process left after it are still looked for.
            encode_line(
                &mut buf,
                "job record",
                &EntryLine {
                    job: &c.rec,
                    mark: c.mark,
                    rows_to: c.rows_to,
                },
            )?;
        }
        let spath = self.path(SNAPSHOT_FILE);
        write_atomic(self.io(), &self.store.dir, &spath, &buf)?;
        self.inner.generation = generation;
        self.inner.snapshot_len = buf.len() as u64;
        self.new_journal()
    }
}

pub(super) fn reindex(inner: &mut Inner, name: &str) {
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

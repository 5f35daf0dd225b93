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
use crate::model::{After, JobDef, JobRecord, JobsFile, Settings};
use crate::schedule::Compiled;
use crate::store::ApplyReport;
use crate::store::io::{IoFile, OpenMode};
use crate::store::{StoreError, StoreResult, filefmt, logic};
use chrono::{DateTime, Utc};
use std::collections::HashSet;

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
                (generation, absorbed) = snapshot_header(&spath, line, id)?;
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
                stale = journal_is_stale(&jpath, body, id, generation, absorbed, &bytes)?;
                if stale {
                    break;
                }
                continue;
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
        let rows_to = self.mark_now();
        let mut buf = Vec::with_capacity(names.len() * 1024);
        for n in names {
            let Some(c) = self.inner.jobs.get_mut(n) else {
                continue;
            };
            c.at = Some(at);
            c.rows_to = Some(rows_to);
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

    /// The generation and header line of the next snapshot: it absorbs the journal as it is.
    fn next_snapshot(&mut self) -> StoreResult<(u64, Vec<u8>)> {
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
        let header = header_line("snapshot", generation, self.id(), Some(absorbed))?;
        Ok((generation, header))
    }

    /// A new snapshot of `len` bytes is in place: a new, empty journal of its generation.
    fn snapshot_done(&mut self, generation: u64, len: u64) -> StoreResult<()> {
        self.inner.generation = generation;
        self.inner.snapshot_len = len;
        self.new_journal()
    }

    /// `apply` of definitions handed over one at a time ([`crate::store::Store::apply_each`]).
    /// On a store holding no job, a batch of at least [`DIRECT_SNAPSHOT_MIN`] jobs (the first
    /// apply of a large file) is encoded into the new snapshot as it arrives: no record is
    /// kept, and the cache is reloaded from disk by the next operation. A smaller first batch
    /// is applied as `apply` applies it. On a store with jobs, each definition is folded into
    /// the cache as it arrives (no `JobsFile` of every definition) and the batch is persisted
    /// as `apply` persists it (O(changed) bytes). The checks are `apply`'s
    /// (`logic::unique_names`), and so is the error reported first: bounds, then a cycle, then
    /// a repeated name, then a definition that cannot be scheduled.
    pub(super) fn apply_each(
        &mut self,
        settings: &Settings,
        feed: &mut dyn FnMut(crate::store::DefSink<'_>) -> StoreResult<()>,
        now: DateTime<Utc>,
    ) -> StoreResult<ApplyReport> {
        let direct = self.inner.jobs.is_empty();
        let next = if direct {
            Some(self.next_snapshot()?)
        } else {
            None
        };
        let spath = self.path(SNAPSHOT_FILE);
        let store = self.store;
        let mut batch = Batch::default();
        let mut held: Vec<JobDef> = Vec::new();
        let mut out: Option<AtomicFile<'_>> = None;
        let fed = {
            let inner = &mut *self.inner;
            let mut each = |def: JobDef| -> StoreResult<()> {
                crate::config::check_job_bounds(&def).map_err(StoreError::OutOfBounds)?;
                if !batch.admit(&def) {
                    return Ok(());
                }
                if !direct {
                    batch.fold(inner, def, now);
                    return Ok(());
                }
                if let Some(f) = out.as_mut() {
                    return batch.encode(f, def, now);
                }
                held.push(def);
                if held.len() < DIRECT_SNAPSHOT_MIN {
                    return Ok(());
                }
                let mut f = AtomicFile::create(&*store.io, &store.dir, &spath)?;
                f.buf = next.as_ref().map(|n| n.1.clone()).unwrap_or_default();
                for def in held.drain(..) {
                    batch.encode(&mut f, def, now)?;
                }
                out = Some(f);
                Ok(())
            };
            feed(&mut each)
        };
        if let Err(e) = fed.and_then(|()| batch.verdict()) {
            if !direct {
                // Definitions before the failure were folded into the cache only.
                self.inner.loaded = false;
            }
            return Err(e);
        }
        let Batch {
            seen,
            mut report,
            mut changed,
            ..
        } = batch;
        match (out, next) {
            (Some(f), Some((generation, _))) => {
                // From here the cache no longer matches the disk: the next operation reloads.
                self.inner.loaded = false;
                self.write_settings(settings)?;
                if std::mem::take(&mut self.inner.relies_on_landed) {
                    self.sync_history()?;
                }
                let len = f.commit()?;
                self.snapshot_done(generation, len)?;
                Ok(report)
            }
            (Some(_), None) => Err(StoreError::Internal(
                "a snapshot was begun without its header".into(),
            )),
            (None, _) if direct => {
                let file = JobsFile {
                    settings: settings.clone(),
                    jobs: held,
                };
                self.apply_file(&file, now)
            }
            (None, _) => {
                for (name, c) in self.inner.jobs.iter_mut() {
                    if !seen.contains(name.as_str()) && logic::retire_removed(&mut c.rec) {
                        report.retired.push(name.clone());
                        changed.push(name.clone());
                    }
                }
                if let Err(e) = self.write_settings(settings) {
                    self.inner.loaded = false;
                    return Err(e);
                }
                self.persist_apply(&changed)?;
                Ok(report)
            }
        }
    }

    pub(super) fn compact_jobs(&mut self) -> StoreResult<()> {
        let (generation, header) = self.next_snapshot()?;
        let spath = self.path(SNAPSHOT_FILE);
        let store = self.store;
        let mut out = AtomicFile::create(&*store.io, &store.dir, &spath)?;
        out.buf = header;
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
        self.snapshot_done(generation, len)
    }
}

/// What [`Locked::apply_each`] keeps while the definitions arrive: every name (to refuse a
/// repeated one and retire the jobs no longer in the file), the `after:` chains (for the cycle
/// check) and the report.
#[derive(Default)]
struct Batch {
    seen: HashSet<String>,
    chains: Vec<(String, Vec<After>)>,
    report: ApplyReport,
    changed: Vec<String>,
    /// The first name used twice.
    repeated: Option<String>,
    /// The first definition that cannot be scheduled.
    unschedulable: Option<StoreError>,
}

impl Batch {
    /// Record `def`'s name and chain; whether it is to be applied (false once the batch is
    /// known to be refused: only the checks go on).
    fn admit(&mut self, def: &JobDef) -> bool {
        if !def.after.is_empty() {
            self.chains.push((def.name.clone(), def.after.clone()));
        }
        if !self.seen.insert(def.name.clone()) {
            self.repeated.get_or_insert_with(|| def.name.clone());
        }
        self.repeated.is_none() && self.unschedulable.is_none()
    }

    /// `apply` of `def` to the cache (a store with jobs).
    fn fold(&mut self, inner: &mut Inner, def: JobDef, now: DateTime<Utc>) {
        let name = def.name.clone();
        match logic::apply_one(inner.jobs.get_mut(&name).map(|c| &mut c.rec), &def, now) {
            Ok(logic::ApplyStep::Unchanged) => self.report.unchanged.push(name),
            Ok(logic::ApplyStep::Updated) => {
                if let Some(c) = inner.jobs.get_mut(&name) {
                    c.sched = logic::compile(&c.rec).ok();
                }
                self.report.updated.push(name.clone());
                self.changed.push(name);
            }
            Ok(logic::ApplyStep::Created(r)) => {
                inner.jobs.insert(name.clone(), Cached::new(*r, None));
                self.report.created.push(name.clone());
                self.changed.push(name);
            }
            Err(e) => self.unschedulable = Some(e),
        }
    }

    /// The record of the new job `def`, encoded into the snapshot being written.
    fn encode(
        &mut self,
        f: &mut AtomicFile<'_>,
        def: JobDef,
        now: DateTime<Utc>,
    ) -> StoreResult<()> {
        let name = def.name.clone();
        let rec = match logic::new_record(def, now) {
            Ok(r) => r,
            Err(e) => {
                self.unschedulable = Some(StoreError::bad_def(&name)(e));
                return Ok(());
            }
        };
        encode_checked_line(
            &mut f.buf,
            "job record",
            &EntryLine {
                job: &rec,
                mark: None,
                at: None,
                rows_to: None,
            },
        )?;
        f.spill()?;
        self.report.created.push(name);
        Ok(())
    }

    /// The batch's refusal, in `apply`'s order of checks.
    fn verdict(&mut self) -> StoreResult<()> {
        let cycle = crate::config::find_cycle_by(
            self.chains.iter().map(|(n, a)| (n.as_str(), a.as_slice())),
        );
        if let Some(cycle) = cycle {
            return Err(StoreError::Refused(format!(
                "refusing to apply: `after` makes a cycle: {} (a chain must end somewhere)",
                cycle.join(" waits for ")
            )));
        }
        if let Some(name) = self.repeated.take() {
            return Err(StoreError::DuplicateJob(name));
        }
        match self.unschedulable.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
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

/// The snapshot's header (its line 1): the snapshot's generation and the journal it absorbed.
pub(super) fn snapshot_header(
    path: &Path,
    line: &[u8],
    id: &str,
) -> StoreResult<(u64, Option<filefmt::Absorbed>)> {
    let h: filefmt::Header = serde_json::from_slice(line).map_err(|e| json_err(path, 1, &e))?;
    if h.cronsole != "snapshot" {
        return Err(corrupt(path, 1, 1, "not a snapshot header"));
    }
    check_id(path, h.store.as_deref(), id)?;
    Ok((h.generation, h.absorbed))
}

/// The journal's header (its line 1, of `complete`: the journal's complete lines) against the
/// snapshot's `generation`: `false` when the journal's records follow the snapshot, `true` when
/// it is the journal the snapshot already absorbed (its records must be skipped).
///
/// One generation behind is what a crash between writing a new snapshot and replacing the
/// journal leaves; the snapshot says exactly which journal it absorbed. Anything else (an edited
/// header, a journal from a backup) is corruption: never discard its records.
pub(super) fn journal_is_stale(
    path: &Path,
    line: &[u8],
    id: &str,
    generation: u64,
    absorbed: Option<filefmt::Absorbed>,
    complete: &[u8],
) -> StoreResult<bool> {
    let h: filefmt::Header = serde_json::from_slice(line).map_err(|e| json_err(path, 1, &e))?;
    if h.cronsole != "journal" {
        return Err(corrupt(path, 1, 1, "not a journal header"));
    }
    check_id(path, h.store.as_deref(), id)?;
    if h.generation == generation {
        return Ok(false);
    }
    let leftover = filefmt::Absorbed {
        len: complete.len() as u64,
        crc32: filefmt::crc32(complete),
    };
    if h.generation + 1 == generation && absorbed == Some(leftover) {
        return Ok(true);
    }
    Err(corrupt(
        path,
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
    ))
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

    fn feed(
        jobs: &[crate::model::JobDef],
    ) -> impl FnMut(crate::store::DefSink<'_>) -> crate::store::StoreResult<()> + '_ {
        move |sink| jobs.iter().cloned().try_for_each(&mut *sink)
    }

    fn fresh(tag: &str) -> (std::path::PathBuf, FileStore) {
        let dir = std::env::temp_dir().join(format!("cronsole-{tag}-{}", uuid::Uuid::new_v4()));
        let s = FileStore::open(&dir).unwrap();
        (dir, s)
    }

    /// Files in the store directory (no temp file may be left behind).
    fn listing(dir: &std::path::Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// `apply_each` of a large first batch writes the records into the new snapshot as they
    /// arrive (none is cached) and leaves exactly what `apply` leaves; a re-apply changing one
    /// job then appends one journal line, and one removing a job retires it.
    #[test]
    fn apply_each_of_a_large_first_batch_streams_into_the_snapshot_like_apply() {
        let (da, a) = fresh("each-a");
        let (db, b) = fresh("each-b");
        let n = DIRECT_SNAPSHOT_MIN + 300;
        let mut file = JobsFile {
            settings: Settings::default(),
            jobs: (0..n).map(|i| def(&format!("job-{i:05}"))).collect(),
        };
        file.settings.base_dir = Some("/srv".into());
        let ra = a.apply(&file, t(1000)).unwrap();
        let rb = b
            .apply_each(&file.settings, &mut feed(&file.jobs), t(1000))
            .unwrap();
        assert_eq!(ra, rb);
        assert_eq!(rb.created.len(), n);
        assert!(
            b.lock().unwrap().inner.jobs.len() == n,
            "the next operation reloads the records from disk"
        );
        assert_eq!(lines(&db.join(SNAPSHOT_FILE)), n + 1);
        assert_eq!(lines(&db.join(JOURNAL_FILE)), 1, "header only");
        assert_eq!(a.jobs().unwrap(), b.jobs().unwrap());
        assert_eq!(b.settings().unwrap(), file.settings);
        let reopened = FileStore::open_existing(&db).unwrap();
        assert_eq!(reopened.jobs().unwrap(), a.jobs().unwrap());
        assert_eq!(listing(&da), listing(&db));

        file.jobs[7].max_retries += 1;
        let gone = file.jobs.pop().unwrap().name;
        let ra = a.apply(&file, t(1001)).unwrap();
        let rb = b
            .apply_each(&file.settings, &mut feed(&file.jobs), t(1001))
            .unwrap();
        assert_eq!(ra, rb);
        assert_eq!(rb.updated, vec!["job-00007".to_string()]);
        assert_eq!(rb.retired, vec![gone]);
        assert_eq!(
            lines(&db.join(JOURNAL_FILE)),
            3,
            "two changed jobs, two lines"
        );
        assert_eq!(a.jobs().unwrap(), b.jobs().unwrap());
        assert_eq!(
            FileStore::open_existing(&db).unwrap().jobs().unwrap(),
            a.jobs().unwrap()
        );
        std::fs::remove_dir_all(&da).unwrap();
        std::fs::remove_dir_all(&db).unwrap();
    }

    /// A small first batch takes `apply`'s journal path.
    #[test]
    fn apply_each_of_a_small_first_batch_is_apply() {
        let (da, a) = fresh("each-small-a");
        let (db, b) = fresh("each-small-b");
        let file = JobsFile {
            settings: Settings::default(),
            jobs: (0..5).map(|i| def(&format!("job-{i}"))).collect(),
        };
        let ra = a.apply(&file, t(1000)).unwrap();
        let rb = b
            .apply_each(&file.settings, &mut feed(&file.jobs), t(1000))
            .unwrap();
        assert_eq!(ra, rb);
        assert_eq!(lines(&db.join(JOURNAL_FILE)), 6);
        assert_eq!(a.jobs().unwrap(), b.jobs().unwrap());
        std::fs::remove_dir_all(&da).unwrap();
        std::fs::remove_dir_all(&db).unwrap();
    }

    /// Every refusal of `apply` is `apply_each`'s too, in the same order, and changes nothing:
    /// not the snapshot, not the settings, no temp file left (large batches are refused after
    /// part of their snapshot was written).
    #[test]
    fn apply_each_refuses_what_apply_refuses_and_changes_nothing() {
        use crate::model::{After, ChainOn};
        for existing in [0, 3] {
            let (dir, s) = fresh("each-refused");
            if existing > 0 {
                let jobs = (0..existing).map(|i| def(&format!("old-{i}"))).collect();
                let file = JobsFile {
                    settings: Settings::default(),
                    jobs,
                };
                s.apply(&file, t(900)).unwrap();
            }
            let before = (
                std::fs::read(dir.join(SNAPSHOT_FILE)).unwrap(),
                std::fs::read(dir.join(JOURNAL_FILE)).unwrap(),
                listing(&dir),
                s.jobs().unwrap(),
            );
            let n = DIRECT_SNAPSHOT_MIN + 10;
            let base: Vec<_> = (0..n).map(|i| def(&format!("job-{i:05}"))).collect();
            let after = |job: &str| After {
                job: job.to_string(),
                on: ChainOn::Success,
            };
            let mut cycle = base.clone();
            cycle[3].after = vec![after(&format!("job-{:05}", n - 3))];
            cycle[n - 3].after = vec![after("job-00003")];
            cycle[n - 1].name = "job-00001".into();
            let mut repeated = base.clone();
            repeated[n - 1].name = "job-00001".into();
            let mut bounds = base.clone();
            bounds[n - 2].max_retries = 0;
            let settings = Settings {
                base_dir: Some("/elsewhere".into()),
                ..Settings::default()
            };
            for (jobs, want) in [
                (
                    cycle,
                    "makes a cycle: job-00003 waits for job-01031 waits for job-00003",
                ),
                (repeated, "job-00001"),
                (bounds, "max_retries"),
            ] {
                let file = JobsFile {
                    settings: settings.clone(),
                    jobs,
                };
                let ea = s.apply(&file, t(1000)).unwrap_err().to_string();
                let eb = s
                    .apply_each(&settings, &mut feed(&file.jobs), t(1000))
                    .unwrap_err()
                    .to_string();
                assert_eq!(ea, eb);
                assert!(eb.contains(want), "{eb}");
            }
            // The feed itself fails at its end (the jobs file did not read to its end).
            let eb = s
                .apply_each(
                    &settings,
                    &mut |sink| {
                        base.iter().cloned().try_for_each(&mut *sink)?;
                        Err(crate::store::StoreError::Refused("bad file".into()))
                    },
                    t(1000),
                )
                .unwrap_err();
            assert!(eb.to_string().contains("bad file"));
            let now = (
                std::fs::read(dir.join(SNAPSHOT_FILE)).unwrap(),
                std::fs::read(dir.join(JOURNAL_FILE)).unwrap(),
                listing(&dir),
                s.jobs().unwrap(),
            );
            assert!(before == now, "nothing changed ({existing} jobs stored)");
            assert_eq!(s.settings().unwrap(), Settings::default());
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    /// A snapshot bigger than the pieces it is written (4 MiB) and read (1 MiB) in: every
    /// record comes back in a fresh handle, and a re-apply changing one job appends one line.
    #[test]
    fn a_large_snapshot_is_written_and_read_in_pieces_and_a_one_job_reapply_appends_one_line() {
        let dir = crate::testkit::tmp::TempDir::new("fs-pieces");
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
    }
}

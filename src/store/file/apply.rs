//! `apply` on the file store: a jobs file's definitions diffed against the store one at a time
//! (no record is held unless it changed), the jobs it no longer names retired, and the changed
//! records written as one journal append (a change of most of a large store then compacts off
//! the lock, `compact.rs`). A large file is read with the lock released: a re-apply keeps the
//! definitions whose digest changed and takes the lock back to diff them; a first apply to a
//! store holding no job writes its new snapshot and swaps it in as a compaction does.
//!
//! Owns: `FileStore::apply_fed`, `Locked::apply_diff`, `Locked::apply_released` and the batch
//! they fold definitions into.
//! Must not touch: what a definition does to a record (`plan::apply`), the line format
//! (`record.rs`).

use crate::store::OperationError;
use std::collections::HashSet;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::compact::{Writer, swap_locked};
use super::compaction::{Built, Plan, Temp};
use super::handle::{FileStore, Inner, Locked, insert_new};
use super::holder::Note;
use super::index::IndexWriter;
use super::jobs::DIRECT_SNAPSHOT_MIN;
use super::layout::{JOURNAL_FILE, SNAPSHOT_FILE};
use super::lines::{LineReader, entry_of, for_each_line, line_len};
use super::log::{AtomicFile, corrupt, io_err, stat};
use super::record::{Cached, Loc, Mark, later_mark, line_index};
use crate::model::{After, JobDef, Settings};
use crate::store::filefmt::{self};
use crate::store::io::OpenMode;
use crate::store::{ApplyReport, BackendError, StoreError, StoreResult};
use crate::store::{plan, policy};

impl FileStore {
    /// `apply` of definitions handed over one at a time ([`crate::store::Store::apply_each`],
    /// and `apply` of a whole file). On a store holding no job, a batch of at least
    /// [`DIRECT_SNAPSHOT_MIN`] jobs (the first apply of a large file) is encoded, as it
    /// arrives, into a new snapshot written beside the live files with the lock released, as a
    /// compaction's is: the lock is taken to plan it and again for the swap (the compaction's
    /// own, [`swap_locked`]), so owners claim meanwhile. No record is kept; the cache is
    /// reloaded from disk by the next operation. A batch to a store with jobs is read with the
    /// lock released too ([`Locked::apply_released`]) unless it is known to be small (`few`);
    /// a small batch, and a small first one, is diffed under the lock ([`Locked::apply_diff`]).
    /// The checks are `apply`'s (`plan::apply::unique_names`), and so is the error reported
    /// first: bounds, then a cycle, then a repeated name, then a definition that cannot be
    /// scheduled. `few`: the batch holds fewer than [`DIRECT_SNAPSHOT_MIN`] definitions.
    pub(super) fn apply_fed(
        &self,
        settings: &Settings,
        feed: &mut dyn FnMut(crate::store::DefSink<'_>) -> StoreResult<()>,
        now: DateTime<Utc>,
        few: bool,
    ) -> StoreResult<ApplyReport> {
        let mut l = self.lock()?;
        let note = Note::write(&*self.lock);
        if !few && !l.inner.jobs.is_empty() {
            drop(note);
            let report = l.apply_released(settings, feed, now)?;
            self.stored_on(&mut l, now);
            return Ok(report);
        }
        let first = if few { None } else { l.first_plan()? };
        let Some(first) = first else {
            let report = l.apply_diff(settings, feed, now)?;
            self.stored_on(&mut l, now);
            return Ok(report);
        };
        drop(note);
        drop(l);
        let built = self.build_first(first, feed, now)?;
        let mut l = self.lock()?;
        let _note = Note::write(&*self.lock);
        let report = match built {
            FirstBuilt::Few(defs) => {
                // Fewer than DIRECT_SNAPSHOT_MIN jobs: checked, applied as any batch is.
                let mut defs = defs.into_iter();
                l.apply_diff(settings, &mut |sink| defs.try_for_each(&mut *sink), now)?
            }
            FirstBuilt::Built(b, report) => l.swap_first(*b, report, settings, now)?,
        };
        self.stored_on(&mut l, now);
        Ok(report)
    }

    /// The first apply's snapshot and index, written to temp files without the lock (see
    /// [`FileStore::apply_fed`]); its definitions held instead while fewer than
    /// [`DIRECT_SNAPSHOT_MIN`] arrived.
    fn build_first(
        &self,
        first: FirstPlan,
        feed: &mut dyn FnMut(crate::store::DefSink<'_>) -> StoreResult<()>,
        now: DateTime<Utc>,
    ) -> StoreResult<FirstBuilt> {
        let started = std::time::Instant::now();
        let spath = self.path(SNAPSHOT_FILE);
        let ipath = self.path(super::layout::INDEX_FILE);
        let mut batch = Batch {
            new_rows_to: first.new_rows_to,
            ..Batch::default()
        };
        let mut held: Vec<JobDef> = Vec::new();
        let mut out: Option<(AtomicFile<'_>, IndexWriter<'_>)> = None;
        // Whether the jobs arrived in name order, the snapshot's (the last name, to compare).
        let (mut sorted, mut last) = (true, String::new());
        let fed = {
            let mut each = |def: JobDef| -> StoreResult<()> {
                crate::config::check_job_bounds(&def)
                    .map_err(|e| StoreError::Operation(OperationError::OutOfBounds(e)))?;
                if !batch.admit(&def) {
                    return Ok(());
                }
                if !last.is_empty() && def.name <= last {
                    sorted = false;
                }
                last.clone_from(&def.name);
                if let Some((f, ix)) = out.as_mut() {
                    return batch.encode(f, ix, def, now);
                }
                held.push(def);
                if held.len() < DIRECT_SNAPSHOT_MIN {
                    return Ok(());
                }
                let (mut f, mut ix) = self.first_writers(&first, &spath, &ipath)?;
                for def in held.drain(..) {
                    batch.encode(&mut f, &mut ix, def, now)?;
                }
                out = Some((f, ix));
                Ok(())
            };
            feed(&mut each)
        };
        fed.and_then(|()| batch.verdict())?;
        let Some((f, ix)) = out else {
            return Ok(FirstBuilt::Few(held));
        };
        let (tmp, snapshot_len) = f.keep()?;
        let snapshot = Temp {
            io: Arc::clone(&self.io),
            path: tmp,
        };
        let (snapshot, snapshot_len, index) = if sorted {
            let index = ix.keep(snapshot_len)?;
            (snapshot, snapshot_len, index)
        } else {
            drop(ix);
            self.sorted_copy(&first, &snapshot, snapshot_len)?
        };
        let index = index.map(|path| Temp {
            io: Arc::clone(&self.io),
            path,
        });
        let jobs = batch.report.created.len() as u64;
        let b = Built {
            generation: first.generation,
            snap_ino: first.plan.snap_ino,
            journal_ino: first.plan.journal_ino,
            j0: first.plan.j0,
            jobs,
            journal: first.plan.journal,
            snapshot,
            snapshot_len,
            index,
            acct: first.new_rows_to,
            started,
        };
        Ok(FirstBuilt::Built(Box::new(b), batch.report))
    }
}

impl FileStore {
    /// A first apply's temp snapshot, its header line written, and the index built beside it.
    fn first_writers<'a>(
        &'a self,
        first: &FirstPlan,
        spath: &'a std::path::Path,
        ipath: &'a std::path::Path,
    ) -> StoreResult<(AtomicFile<'a>, IndexWriter<'a>)> {
        let ix = IndexWriter::new(
            &*self.io,
            &self.dir,
            ipath,
            &self.store_id,
            first.generation,
            &first.header,
            self.index_min_bytes,
        )?;
        let mut f = AtomicFile::create(&*self.io, &self.dir, spath)?;
        f.buf = first.header.clone();
        Ok((f, ix))
    }

    /// The first apply's snapshot written again in name order, from `unsorted` (the same
    /// lines in the file's order): a snapshot's lines are in name order (a compaction merges
    /// the journal into it by name, and `jobs.index` is searched by it). Only the names and
    /// places of the lines are held, not the lines. Returns the new temp snapshot, its length
    /// and its index's temp file.
    fn sorted_copy(
        &self,
        first: &FirstPlan,
        unsorted: &Temp,
        len: u64,
    ) -> StoreResult<(Temp, u64, Option<std::path::PathBuf>)> {
        let path = &unsorted.path;
        let f = self.io.open(path, OpenMode::Read).map_err(io_err(path))?;
        let mut lines: Vec<(String, Loc)> = Vec::new();
        for_each_line(&*f, path, len, |no, off, line| {
            if no > 1 {
                let (name, _) =
                    line_index(line).map_err(|(col, what)| corrupt(path, no, col, what))?;
                let len = line_len(path, no, line)?;
                let loc = Loc {
                    journal: false,
                    off,
                    len,
                    crc: None,
                };
                lines.push((name, loc));
            }
            Ok(())
        })?;
        lines.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let spath = self.path(SNAPSHOT_FILE);
        let ipath = self.path(super::layout::INDEX_FILE);
        let (out, ix) = self.first_writers(first, &spath, &ipath)?;
        let mut w = Writer::new(ix, out, first.new_rows_to);
        for (name, loc) in lines {
            w.copy_journal_line(path, &*f, &name, loc)?;
        }
        let (tmp, len) = w.out.keep()?;
        let index = w.ix.keep(len)?;
        let snapshot = Temp {
            io: Arc::clone(&self.io),
            path: tmp,
        };
        Ok((snapshot, len, index))
    }
}

/// What the first apply of a large file takes under the lock before it writes without it.
pub(super) struct FirstPlan {
    generation: u64,
    header: Vec<u8>,
    plan: Plan,
    new_rows_to: Option<Mark>,
}

enum FirstBuilt {
    /// Too few jobs to be worth a snapshot: their definitions.
    Few(Vec<JobDef>),
    /// The new snapshot in temp files, and the batch's report.
    Built(Box<Built>, ApplyReport),
}

impl Locked<'_> {
    /// Under the lock, before the first apply's snapshot is written without it: the next
    /// generation and its header (absorbing the journal as it is), the files it replaces, and
    /// where history ends (its new jobs have no rows). `None`: this handle cannot plan one (it
    /// reads no snapshot of its own); the batch is diffed under the lock.
    fn first_plan(&mut self) -> StoreResult<Option<FirstPlan>> {
        let (generation, header) = self.next_snapshot()?;
        let Some(plan) = self.take_plan()? else {
            return Ok(None);
        };
        Ok(Some(FirstPlan {
            generation,
            header,
            plan,
            new_rows_to: Some(self.mark_now()),
        }))
    }

    /// Put the first apply's snapshot in place (the settings first, as every apply writes
    /// them). The store must be as planned: still no job, the same snapshot and journal, no
    /// line appended. Otherwise another writer went first (another apply): the batch is
    /// diffed against what it left, its definitions read back from the built snapshot — as if
    /// this apply had started after it.
    fn swap_first(
        &mut self,
        mut b: Built,
        mut report: ApplyReport,
        settings: &Settings,
        now: DateTime<Utc>,
    ) -> StoreResult<ApplyReport> {
        let io = self.io();
        let (sm, jm) = (
            stat(io, &self.path(SNAPSHOT_FILE))?,
            stat(io, &self.path(JOURNAL_FILE))?,
        );
        let as_planned = self.inner.jobs.is_empty()
            && self.inner.generation + 1 == b.generation
            && sm.is_some_and(|m| m.ino == b.snap_ino)
            && jm.is_some_and(|m| m.ino == b.journal_ino && m.len == b.j0);
        if !as_planned {
            tracing::info!(
                "the store changed while the first apply was written: diffing against it"
            );
            return self.apply_built(&b, settings, now);
        }
        report.settings = plan::apply::settings_changes(&self.inner.settings, settings);
        // From here the cache no longer matches the disk: the next operation reloads.
        self.inner.loaded = false;
        self.write_settings(settings)?;
        if std::mem::take(&mut self.inner.relies_on_landed) {
            self.sync_history()?;
        }
        // The snapshot's lines carry the accounted mark (`Inner::acct`); the new journal's
        // header must too: an open through `jobs.index` reads no snapshot line, so the header
        // is where it finds the mark.
        b.acct = later_mark(self.inner.acct, b.acct);
        if swap_locked(&self.store.ctx(), b)?.is_none() {
            return Err(StoreError::Backend(BackendError::Invariant(
                "the store's files changed under its lock",
            )));
        }
        Ok(report)
    }

    /// The built snapshot's definitions, diffed against the store as it is now.
    fn apply_built(
        &mut self,
        b: &Built,
        settings: &Settings,
        now: DateTime<Utc>,
    ) -> StoreResult<ApplyReport> {
        let path = b.snapshot.path.clone();
        let f = self
            .io()
            .open(&path, OpenMode::Read)
            .map_err(io_err(&path))?;
        let len = b.snapshot_len;
        self.apply_diff(
            settings,
            &mut |sink| {
                for_each_line(&*f, &path, len, |no, off, line| {
                    if no == 1 {
                        return Ok(());
                    }
                    let (name, _) =
                        line_index(line).map_err(|(col, what)| corrupt(&path, no, col, what))?;
                    let loc = Loc {
                        journal: false,
                        off,
                        len: line_len(&path, no, line)?,
                        crc: None,
                    };
                    sink(entry_of(&path, &*f, loc, &name, line)?.job.def)
                })
            },
            now,
        )
    }

    /// `apply` diffed against the store as the definitions arrive: each one's stored record is
    /// read (through a [`LineReader`]: in file order, a window at a time), compared and dropped
    /// unless it changed, so memory is the index plus the changed records, not every record
    /// (a re-apply of 1 000 000 jobs holds only what changed). The jobs the file does not name are read
    /// afterwards, in name order, to be retired. The changed records are persisted at the end
    /// as one batch (`persist_apply`: one journal append, and a compaction off the lock when
    /// they are most of the store), so a refusal or a crash before it leaves the store as it was. Settings
    /// are written only once every definition was accepted.
    pub(super) fn apply_diff(
        &mut self,
        settings: &Settings,
        feed: &mut dyn FnMut(crate::store::DefSink<'_>) -> StoreResult<()>,
        now: DateTime<Utc>,
    ) -> StoreResult<ApplyReport> {
        let mut batch = Batch {
            new_rows_to: Some(self.mark_now()),
            ..Batch::default()
        };
        let mut reader = LineReader::new(&self.store.dir);
        let fed = {
            let inner = &mut *self.inner;
            let mut each = |def: JobDef| -> StoreResult<()> {
                crate::config::check_job_bounds(&def)
                    .map_err(|e| StoreError::Operation(OperationError::OutOfBounds(e)))?;
                if !batch.admit(&def) {
                    return Ok(());
                }
                batch.fold(inner, &mut reader, def, now)
            };
            feed(&mut each)
        };
        let diffed = fed
            .and_then(|()| batch.verdict())
            .and_then(|()| batch.retire_absent(&mut self.inner, &mut reader));
        self.persist_diff(batch, diffed, settings, now)
    }

    /// `apply` of a large batch to a store with jobs, its file read with the lock released:
    /// the definitions are checked and compared by digest with the index as the lock left it
    /// (this handle's cache stays held, so this process's other operations wait, as they did),
    /// and only the ones whose digest differs are kept. The lock is then taken back (the cache
    /// refreshed) and those are diffed against their records as [`Locked::apply_diff`] does;
    /// the file's parse — most of a large re-apply — no longer holds other owners up. A job
    /// left as it was whose definition another apply changed meanwhile refuses the batch,
    /// before anything is written ([`OperationError::Overtaken`]): its definition from the
    /// file was not kept.
    pub(super) fn apply_released(
        &mut self,
        settings: &Settings,
        feed: &mut dyn FnMut(crate::store::DefSink<'_>) -> StoreResult<()>,
        now: DateTime<Utc>,
    ) -> StoreResult<ApplyReport> {
        self.unlock_file();
        let mut batch = Batch::default();
        let mut pending: Vec<JobDef> = Vec::new();
        // The digest of each job in `batch.report.unchanged`, in that order.
        let mut digests = Vec::new();
        {
            let inner = &*self.inner;
            let mut each = |def: JobDef| -> StoreResult<()> {
                crate::config::check_job_bounds(&def)
                    .map_err(|e| StoreError::Operation(OperationError::OutOfBounds(e)))?;
                if !batch.admit(&def) {
                    return Ok(());
                }
                let stored = inner.jobs.get(&def.name).and_then(|s| s.def);
                match stored {
                    Some(d) if Some(d) == plan::apply::def_digest(&def) => {
                        batch.report.unchanged.push(def.name);
                        digests.push(d);
                    }
                    _ => pending.push(def),
                }
                Ok(())
            };
            feed(&mut each)?;
        }
        self.relock_file()?;
        let _note = Note::write(&*self.store.lock);
        for (name, d) in batch.report.unchanged.iter().zip(&digests) {
            if self.inner.jobs.get(name).and_then(|s| s.def) != Some(*d) {
                return Err(StoreError::Operation(OperationError::Overtaken(
                    name.clone(),
                )));
            }
        }
        drop(digests);
        batch.new_rows_to = Some(self.mark_now());
        let mut reader = LineReader::new(&self.store.dir);
        let inner = &mut *self.inner;
        let diffed = pending
            .into_iter()
            .try_for_each(|def| batch.fold(inner, &mut reader, def, now))
            .and_then(|()| batch.verdict())
            .and_then(|()| batch.retire_absent(inner, &mut reader));
        self.persist_diff(batch, diffed, settings, now)
    }

    /// The end of a diffed `apply`: the settings and budget recount, then the changed records
    /// persisted as one batch.
    fn persist_diff(
        &mut self,
        batch: Batch,
        diffed: StoreResult<()>,
        settings: &Settings,
        now: DateTime<Utc>,
    ) -> StoreResult<ApplyReport> {
        let Batch {
            mut report,
            mut changed,
            ..
        } = batch;
        report.settings = plan::apply::settings_changes(&self.inner.settings, settings);
        // An edit of the budget's period: each job's spend in the new one, from history
        // (`recount.rs`), written with the apply's records.
        if let Err(e) = diffed
            .and_then(|()| self.recount_budget(settings, now, &mut changed, &mut report.recounted))
            .and_then(|()| self.write_settings(settings))
        {
            // Records before the failure were changed in the cache only.
            self.inner.loaded = false;
            return Err(e);
        }
        self.persist_apply(&changed)?;
        Ok(report)
    }

    /// `apply` of a file whose names, bounds and chains were checked
    /// (`plan::apply::unique_names`): its definitions diffed against the store one at a time, as
    /// `apply_each` does (`jobs::Locked::apply_diff`: no record is held unless it changed).
    #[cfg(test)]
    pub(super) fn apply_file(
        &mut self,
        file: &crate::model::JobsFile,
        now: DateTime<Utc>,
    ) -> StoreResult<ApplyReport> {
        let mut defs = file.jobs.iter().cloned();
        self.apply_diff(
            &file.settings,
            &mut |sink| defs.try_for_each(&mut *sink),
            now,
        )
    }
}

/// What [`FileStore::apply_fed`] and [`Locked::apply_diff`] keep while the definitions
/// arrive: every name (to refuse a repeated one and retire the jobs no longer in the file), the
/// `after:` chains (for the cycle check) and the report.
#[derive(Default)]
pub(super) struct Batch {
    pub(super) seen: HashSet<String>,
    pub(super) chains: Vec<(String, Vec<After>)>,
    pub(super) report: ApplyReport,
    pub(super) changed: Vec<String>,
    /// The first name used twice.
    pub(super) repeated: Option<String>,
    /// The first definition that cannot be scheduled.
    pub(super) unschedulable: Option<StoreError>,
    /// Where history ends: a new job's `rows_to` (it has no rows yet).
    pub(super) new_rows_to: Option<Mark>,
}

impl Batch {
    /// Record `def`'s name and chain; whether it is to be applied (false once the batch is
    /// known to be refused: only the checks go on).
    pub(super) fn admit(&mut self, def: &JobDef) -> bool {
        if !def.after.is_empty() {
            self.chains.push((def.name.clone(), def.after.clone()));
        }
        if !self.seen.insert(def.name.clone()) {
            self.repeated.get_or_insert_with(|| def.name.clone());
        }
        self.repeated.is_none() && self.unschedulable.is_none()
    }

    /// `apply` of `def` against its stored record: read (unless this operation holds it
    /// already), compared, and kept in `hot` only when it changed; a new job's record goes
    /// to `hot` and the index. Fails only when a stored record cannot be read.
    pub(super) fn fold(
        &mut self,
        inner: &mut Inner,
        reader: &mut LineReader,
        def: JobDef,
        now: DateTime<Utc>,
    ) -> StoreResult<()> {
        let name = def.name.clone();
        let held = inner.hot.contains_key(&name);
        let slim = inner.jobs.get(&name);
        // The record's line says what digest its own definition has (see `Idx::def`): the
        // same digest means the same definition, so an unchanged job is not read at all and a
        // re-apply's store work is that of the jobs it changes.
        let digest = slim.and_then(|s| s.def);
        if !held && digest.is_some() && digest == plan::apply::def_digest(&def) {
            self.report.unchanged.push(name);
            return Ok(());
        }
        let mut read = match (held, slim) {
            (false, Some(slim)) => Some(reader.entry(inner, &name, slim)?),
            _ => None,
        };
        #[cfg(test)]
        {
            inner.records_loaded += usize::from(read.is_some());
        }
        let stored = match read.as_mut() {
            Some(e) => Some(&mut e.job),
            None => inner.hot.get_mut(&name).map(|c| &mut c.rec),
        };
        match plan::apply::apply_one(stored, &def, now) {
            Ok(plan::apply::ApplyStep::Unchanged) => {
                // A line written before the digest existed: written again with one (once),
                // so the next re-apply need not read it.
                if let Some(e) = read.filter(|_| digest.is_none())
                    && plan::apply::record_digest(&e.job).is_some()
                {
                    inner.hot.insert(name.clone(), Cached::from_entry(e));
                    self.changed.push(name.clone());
                }
                self.report.unchanged.push(name);
            }
            Ok(plan::apply::ApplyStep::Updated) => {
                match read {
                    // Compiles the updated schedule.
                    Some(e) => {
                        inner.hot.insert(name.clone(), Cached::from_entry(e));
                    }
                    None => {
                        if let Some(c) = inner.hot.get_mut(&name) {
                            c.recompile();
                        }
                    }
                }
                self.report.updated.push(name.clone());
                self.changed.push(name);
            }
            Ok(plan::apply::ApplyStep::Created(r)) => {
                let mut c = Cached::new(*r, None);
                c.rows_to = self.new_rows_to;
                insert_new(inner, &name, c);
                self.report.created.push(name.clone());
                self.changed.push(name);
            }
            Err(e) => self.unschedulable = Some(e),
        }
        Ok(())
    }

    /// Retire the stored jobs the batch did not name (in name order, as `apply` reports
    /// them): their records are read one at a time, and kept only when retiring changed them.
    pub(super) fn retire_absent(
        &mut self,
        inner: &mut Inner,
        reader: &mut LineReader,
    ) -> StoreResult<()> {
        let absent: Vec<String> = inner
            .jobs
            .iter()
            .map(|(n, _)| n)
            .filter(|n| !self.seen.contains(*n))
            .map(str::to_string)
            .collect();
        for name in absent {
            let retired = match inner.hot.get_mut(&name) {
                Some(c) => plan::apply::retire_removed(&mut c.rec),
                None => {
                    let Some(slim) = inner.jobs.get(&name) else {
                        continue;
                    };
                    let mut e = reader.entry(inner, &name, slim)?;
                    #[cfg(test)]
                    {
                        inner.records_loaded += 1;
                    }
                    let retired = plan::apply::retire_removed(&mut e.job);
                    if retired {
                        inner.hot.insert(name.clone(), Cached::from_entry(e));
                    }
                    retired
                }
            };
            if retired {
                self.report.retired.push(name.clone());
                self.changed.push(name);
            }
        }
        Ok(())
    }

    /// The record of the new job `def`, encoded into the snapshot being written (a headed
    /// line, as every writer writes it).
    pub(super) fn encode(
        &mut self,
        f: &mut AtomicFile<'_>,
        ix: &mut IndexWriter<'_>,
        def: JobDef,
        now: DateTime<Utc>,
    ) -> StoreResult<()> {
        let name = def.name.clone();
        let rec = match policy::define::new_record(def, now) {
            Ok(r) => r,
            Err(e) => {
                self.unschedulable = Some(StoreError::bad_def(&name)(e));
                return Ok(());
            }
        };
        let mut c = Cached::new(rec, None);
        c.rows_to = self.new_rows_to;
        // Only a store holding no job is written this way: every row in history is accounted
        // for (see `Inner::acct`).
        let (from, b0) = (f.pos(), f.buf.len());
        let idx = c.encode(&name, self.new_rows_to, &mut f.buf)?;
        let line = &f.buf[b0..f.buf.len() - 1];
        ix.push(&name, from, line.len(), filefmt::line_crc(line), &idx)?;
        f.spill()?;
        self.report.created.push(name);
        Ok(())
    }

    /// The batch's refusal, in `apply`'s order of checks.
    pub(super) fn verdict(&mut self) -> StoreResult<()> {
        let cycle = crate::config::find_cycle_by(
            self.chains.iter().map(|(n, a)| (n.as_str(), a.as_slice())),
        );
        if let Some(cycle) = cycle {
            return Err(StoreError::Operation(OperationError::ChainCycle(
                crate::config::cycle_text(&cycle),
            )));
        }
        if let Some(name) = self.repeated.take() {
            return Err(StoreError::Operation(OperationError::DuplicateJob(name)));
        }
        match self.unschedulable.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

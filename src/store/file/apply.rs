//! `apply` on the file store: a jobs file's definitions diffed against the store one at a time
//! (no record is held unless it changed), the jobs it no longer names retired, and the changed
//! records written as one journal append — or, when they are most of the store, as a new
//! snapshot.
//!
//! Owns: `Locked::apply_each`, `Locked::apply_diff`, `Locked::apply_file` and the batch they
//! fold definitions into. Must not touch: what a definition does to a record (`plan::apply`),
//! the line format (`record.rs`).

use crate::store::OperationError;
use std::collections::HashSet;

use chrono::{DateTime, Utc};

use super::handle::{Inner, Locked, insert_new};
use super::index::IndexWriter;
use super::jobs::{DIRECT_SNAPSHOT_MIN, finish_index};
use super::layout::SNAPSHOT_FILE;
use super::lines::LineReader;
use super::log::AtomicFile;
use super::record::{Cached, Mark, later_mark};
use crate::model::{After, JobDef, JobsFile, Settings};
use crate::store::filefmt::{self};
use crate::store::{ApplyReport, StoreError, StoreResult};
use crate::store::{plan, policy};

impl Locked<'_> {
    /// `apply` of definitions handed over one at a time ([`crate::store::Store::apply_each`]).
    /// On a store holding no job, a batch of at least [`DIRECT_SNAPSHOT_MIN`] jobs (the first
    /// apply of a large file) is encoded into the new snapshot as it arrives: no record is
    /// kept, and the cache is reloaded from disk by the next operation. A smaller first batch,
    /// and every batch to a store with jobs, is diffed against the store as it arrives
    /// ([`Locked::apply_diff`]). The checks are `apply`'s (`plan::apply::unique_names`), and so is
    /// the error reported first: bounds, then a cycle, then a repeated name, then a definition
    /// that cannot be scheduled.
    pub(super) fn apply_each(
        &mut self,
        settings: &Settings,
        feed: &mut dyn FnMut(crate::store::DefSink<'_>) -> StoreResult<()>,
        now: DateTime<Utc>,
    ) -> StoreResult<ApplyReport> {
        if !self.inner.jobs.is_empty() {
            return self.apply_diff(settings, feed, now);
        }
        let next = self.next_snapshot()?;
        let spath = self.path(SNAPSHOT_FILE);
        let ipath = self.path(super::layout::INDEX_FILE);
        let store = self.store;
        let mut batch = Batch {
            new_rows_to: Some(self.mark_now()),
            ..Batch::default()
        };
        let mut held: Vec<JobDef> = Vec::new();
        let mut out: Option<(AtomicFile<'_>, IndexWriter<'_>)> = None;
        let fed = {
            let mut each = |def: JobDef| -> StoreResult<()> {
                crate::config::check_job_bounds(&def)
                    .map_err(|e| StoreError::Operation(OperationError::OutOfBounds(e)))?;
                if !batch.admit(&def) {
                    return Ok(());
                }
                if let Some((f, ix)) = out.as_mut() {
                    return batch.encode(f, ix, def, now);
                }
                held.push(def);
                if held.len() < DIRECT_SNAPSHOT_MIN {
                    return Ok(());
                }
                let mut ix = IndexWriter::new(
                    &*store.io,
                    &store.dir,
                    &ipath,
                    &store.store_id,
                    next.0,
                    &next.1,
                    store.index_min_bytes,
                )?;
                let mut f = AtomicFile::create(&*store.io, &store.dir, &spath)?;
                f.buf = next.1.clone();
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
            // Fewer than DIRECT_SNAPSHOT_MIN jobs: checked, applied as any batch is.
            let mut held = held.into_iter();
            return self.apply_diff(settings, &mut |sink| held.try_for_each(&mut *sink), now);
        };
        // From here the cache no longer matches the disk: the next operation reloads.
        self.inner.loaded = false;
        batch.report.settings = plan::apply::settings_changes(&self.inner.settings, settings);
        self.write_settings(settings)?;
        if std::mem::take(&mut self.inner.relies_on_landed) {
            self.sync_history()?;
        }
        let len = f.commit()?;
        finish_index(ix, len);
        // The snapshot's lines carry the accounted mark (`Inner::acct`); the new journal's
        // header must too: an open through `jobs.index` reads no snapshot line, so the header
        // is where it finds the mark.
        self.inner.acct = later_mark(self.inner.acct, batch.new_rows_to);
        self.snapshot_done(next.0, len)?;
        Ok(batch.report)
    }

    /// `apply` diffed against the store as the definitions arrive: each one's stored record is
    /// read (through a [`LineReader`]: in file order, a window at a time), compared and dropped
    /// unless it changed, so memory is the index plus the changed records, not every record
    /// (a re-apply of 1 000 000 jobs holds only what changed). The jobs the file does not name are read
    /// afterwards, in name order, to be retired. The changed records are persisted at the end
    /// as one batch (`persist_apply`: one journal append, or a new snapshot when they are most
    /// of the store), so a refusal or a crash before it leaves the store as it was. Settings
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
}

/// What [`Locked::apply_each`] keeps while the definitions arrive: every name (to refuse a
/// repeated one and retire the jobs no longer in the file), the `after:` chains (for the cycle
/// check) and the report.
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

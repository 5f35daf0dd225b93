//! Tool loops' steps in the file store: the record of a running loop kept beside its job's
//! record, so an `abandoned` row still shows the calls a dead owner made.
//!
//! Owns: `runs/<run_id>.jsonl` (one [`Delta`] per line, appended at each step, never
//! rewritten), [`Store::loop_step`](crate::store::Store::loop_step) for this store,
//! attaching a run's record to the `abandoned` row recovery writes for it, and telling when a
//! landed `abandoned` row no longer shows that record. Must not touch: the
//! step's decisions (`plan::step`), the journal's and history's formats.
//!
//! One step is one lock hold: the delta is appended and fdatasynced, then the job's record
//! (lease, settlement, reservation) goes to the journal with its own append and fdatasync —
//! the delta first, so a reservation on disk always has the record of what came before it.
//! A crash between the two leaves a delta whose turn was never sent (its reservation never
//! landed): the record shows what the run did, nothing more.
//!
//! Decisions:
//! - A torn final line (a crash mid-append) was never acknowledged: the next append starts
//!   on a new line and a reader skips any line it cannot parse, logging it. A later delta with
//!   the same sequence number replaces the earlier one (a dispatched call's result).
//! - The file goes when the run's row is durable (its completion, or recovery's `abandoned`
//!   row). A crash between the row and the removal leaves a file nothing reads again; it is
//!   removed with the next step or row of a run of that id (never) — so a store may keep a
//!   few such files; they are small and named by their run.

use crate::store::OperationError;
use std::path::PathBuf;

use uuid::Uuid;

use super::FileStore;
use super::handle::Inner;
use super::log::io_err;
use crate::model::{HistoryRow, Status};
use crate::store::io::{OpenMode, stat_opt};
use crate::store::plan::step::{self, LoopStep, StepOutcome};
use crate::store::rules::period::Totals;
use crate::store::{StoreError, StoreResult};
use crate::transcript::{Delta, Transcript};

/// The directory of running loops' records.
const RUNS_DIR: &str = "runs";

impl FileStore {
    fn run_path(&self, run_id: Uuid) -> PathBuf {
        self.dir.join(RUNS_DIR).join(format!("{run_id}.jsonl"))
    }

    /// [`Store::loop_step`](crate::store::Store::loop_step) (see the module doc).
    pub(super) fn step(&self, s: &LoopStep<'_>) -> StoreResult<StepOutcome> {
        let mut l = self.lock()?;
        if !l.load(s.job)? {
            return Err(StoreError::Operation(OperationError::NoSuchJob(
                s.job.to_string(),
            )));
        }
        let key = crate::cost::budget_period(&l.inner.settings).key(s.now);
        // Every other job's committed money, from the index (only jobs with counters).
        let mut others = Totals::default();
        for (name, c) in l.inner.jobs.iter() {
            if name == s.job {
                continue;
            }
            if let Some(c) = c.spend.as_deref() {
                others.add(c, &key);
            }
        }
        let settings = l.inner.settings.clone();
        let Some(c) = l.inner.hot.get_mut(s.job) else {
            return Err(StoreError::Operation(OperationError::NoSuchJob(
                s.job.to_string(),
            )));
        };
        let Some(out) = step::step(&settings, &mut c.rec, others, s) else {
            return Ok(StepOutcome::Lost);
        };
        if let Err(e) = self.append_run(&mut l.inner, s.run_id, s.record) {
            // The cache holds the step's changes: nothing of them was written.
            l.inner.loaded = false;
            return Err(e);
        }
        l.persist(&[], &[s.job.to_string()])?;
        Ok(out)
    }

    /// Append `record` to the run's file with one write and fdatasync (the directory and a new
    /// file's name synced first). A name is synced until a sync of it succeeded: an append
    /// that failed after creating the file (or the directory) leaves it in `inner`'s unnamed
    /// sets, and the retry syncs it, though the file already exists then.
    fn append_run(&self, inner: &mut Inner, run_id: Uuid, record: &[Delta]) -> StoreResult<()> {
        if record.is_empty() {
            return Ok(());
        }
        let io = &*self.io;
        let dir = self.dir.join(RUNS_DIR);
        let path = self.run_path(run_id);
        let mut bytes = Vec::new();
        for d in record {
            serde_json::to_writer(&mut bytes, d).map_err(StoreError::encode("a run's record"))?;
            bytes.push(b'\n');
        }
        let existed = match stat_opt(io, &path).map_err(io_err(&path))? {
            Some(m) => Some(m.len),
            None => {
                if stat_opt(io, &dir).map_err(io_err(&dir))?.is_none() {
                    io.create_dir_all(&dir).map_err(io_err(&dir))?;
                    inner.runs_dir_unnamed = true;
                }
                inner.runs_unnamed.insert(run_id);
                None
            }
        };
        if inner.runs_dir_unnamed {
            io.sync_dir(&self.dir).map_err(io_err(&self.dir))?;
            inner.runs_dir_unnamed = false;
        }
        let f = io
            .open(&path, OpenMode::AppendCreate)
            .map_err(io_err(&path))?;
        if let Some(len) = existed.filter(|&n| n > 0) {
            let mut last = [0u8; 1];
            f.read_exact_at(&mut last, len - 1).map_err(io_err(&path))?;
            if last[0] != b'\n' {
                // A torn line a crash left: the new lines start on their own.
                bytes.insert(0, b'\n');
            }
        }
        f.write_all(&bytes).map_err(io_err(&path))?;
        f.sync_data().map_err(io_err(&path))?;
        if inner.runs_unnamed.contains(&run_id) {
            io.sync_dir(&dir).map_err(io_err(&dir))?;
            inner.runs_unnamed.remove(&run_id);
        }
        Ok(())
    }

    /// The record run `run_id` persisted, rebuilt; `None` when it persisted none.
    fn read_run(&self, run_id: Uuid) -> StoreResult<Option<Transcript>> {
        let path = self.run_path(run_id);
        let bytes = match self.io.read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StoreError::io(&path, e)),
        };
        let mut deltas = Vec::new();
        for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
            if line.is_empty() {
                continue;
            }
            match serde_json::from_slice::<Delta>(line) {
                Ok(d) => deltas.push(d),
                Err(e) => tracing::warn!(
                    file = %path.display(),
                    line = i + 1,
                    "skipping an unreadable line of a run's record (a torn write): {e}"
                ),
            }
        }
        Ok((!deltas.is_empty()).then(|| Transcript::from_deltas(deltas)))
    }

    /// Put each `abandoned` row's persisted record on it (its transcript, turns and tool
    /// calls), unless the row already carries one. Returns the runs whose files to remove once
    /// the rows are durable.
    pub(super) fn attach_run_records(&self, rows: &mut [HistoryRow]) -> Vec<Uuid> {
        let mut found = Vec::new();
        for row in rows
            .iter_mut()
            .filter(|r| r.status == Status::Abandoned && r.transcript.is_none())
        {
            let record = match self.read_run(row.run_id) {
                Ok(Some(t)) => {
                    found.push(row.run_id);
                    Some(t)
                }
                Ok(None) => None,
                // The row still says the run was abandoned; only its record is missing.
                Err(e) => {
                    tracing::warn!(run_id = %row.run_id, "reading a run's record: {e}");
                    None
                }
            };
            crate::store::rules::rows::attach_record(row, record);
        }
        found
    }

    /// Of `landed` (rows already in history that a recovery would finish runs from), the runs
    /// whose `abandoned` row no longer shows their persisted record: a recoverer wrote the row
    /// and died before its record write, and the run, still holding its lease, recorded more
    /// steps since. Their recovery writes a fresh `abandoned` row, superseding the landed one.
    pub(super) fn outgrown(&self, landed: &[HistoryRow]) -> Vec<Uuid> {
        let mut out = Vec::new();
        for row in landed.iter().filter(|r| r.status == Status::Abandoned) {
            match self.read_run(row.run_id) {
                Ok(Some(t)) if crate::store::rules::rows::record_outgrew(row, &t) => {
                    out.push(row.run_id);
                }
                Ok(_) => {}
                // The landed row stands: it is the run's end, short of what it cannot read.
                Err(e) => tracing::warn!(run_id = %row.run_id, "reading a run's record: {e}"),
            }
        }
        out
    }

    /// Remove the records of runs whose rows are durable (a failure only leaves a file).
    pub(super) fn remove_run_records(&self, runs: impl IntoIterator<Item = Uuid>) {
        for run_id in runs {
            let path = self.run_path(run_id);
            match self.io.remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!(file = %path.display(), "removing a run's record: {e}"),
            }
        }
    }
}

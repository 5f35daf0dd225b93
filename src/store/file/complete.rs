//! The file store's part of a batch of completions: lock, load, persist what the
//! [`CompletionPlan`] says. What is particular to this store is how it finds what history
//! already holds of a run, since a row and its job record are two writes here: its own failed
//! writes (`Inner::unacked`), the run's row scanned from the claim's mark, a recoverer's
//! `abandoned` row, and rows a failed or dead writer left after a job's record.
//!
//! Owns: `Locked::complete_batch`. Must not touch: what a completion does to a record (the
//! plan decides), the on-disk formats (`jobs.rs`, `history.rs`).

use uuid::Uuid;

use super::handle::Locked;
use super::layout::DEFAULT_KEEP_PER_JOB;
use super::record::Mark;
use crate::model::{HistoryRow, Status};
use crate::store::plan::complete::{CompletionPlan, Found};
use crate::store::rules::runtime::{holds, lapsed};
use crate::store::{CompleteOutcome, Completion, StoreResult};

impl Locked<'_> {
    /// Group commit under one lock hold: every completion planned, their rows in one history
    /// append (one fdatasync) and their job records in one journal append (one more), `after:`
    /// children's records before their parent's (a torn append that kept the parent's line kept
    /// theirs). With `lookup`, a completion whose record still holds its run looks for the run's
    /// own row from the claim's mark ([`crate::store::Store::complete_recorded`]). An `Err` fails
    /// the whole batch; a failed persist fails every completion that had succeeded.
    pub(super) fn complete_batch(
        &mut self,
        cs: Vec<Completion>,
        lookup: bool,
    ) -> StoreResult<Vec<StoreResult<CompleteOutcome>>> {
        let mut landed = self.unacked_rows()?;
        // Rows found in history by `lookup` (not by this handle's failed persists): `persist`
        // does not know them, so they are taken out of what it appends below.
        let (found, settled) = if lookup {
            self.recorded_runs(&cs, &landed)
                .inspect_err(|_| self.inner.loaded = false)?
        } else {
            (Vec::new(), Vec::new())
        };
        landed.extend(found.iter().cloned());
        let mut plan = CompletionPlan::new(self.period(), landed);
        for c in cs {
            if settled.contains(&c.run_id) {
                plan.settled(c.job);
            } else {
                self.plan_completion(&mut plan, c);
            }
        }
        self.inner.relies_on_landed |= plan.relies_on_landed();
        // From here on records of this batch changed in the cache only: an error reloads it.
        let names = self
            .trim_leftovers(&mut plan)
            .and_then(|()| self.records_to_write(&plan))
            .inspect_err(|_| self.inner.loaded = false)?;
        let rows = plan.rows(&found);
        let runs = plan.own_runs();
        let results = plan.into_results();
        if rows.is_empty() && names.is_empty() {
            return Ok(results);
        }
        if let Err(e) = self.persist_runs(&rows, &names, &runs) {
            // Nothing of this batch is acknowledged: every run retries its completion.
            return Ok(results
                .into_iter()
                .map(|r| r.and_then(|_| Err(e.duplicate())))
                .collect());
        }
        // Runs that kept a record while they went (tool loops): their rows hold it now.
        self.store.remove_run_records(
            rows.iter()
                .filter(|r| r.transcript.is_some())
                .map(|r| r.run_id),
        );
        if self.history_compaction_due()
            && let Err(e) = self.compact_history(DEFAULT_KEEP_PER_JOB, None)
        {
            tracing::warn!("history retention compaction failed: {e}");
        }
        Ok(results)
    }

    /// With `lookup`: the rows of runs whose record still holds them found in history, and the
    /// runs the record no longer holds (their row is in history, the caller saw it, and their
    /// record too: nothing to write, not a second, stale row).
    fn recorded_runs(
        &mut self,
        cs: &[Completion],
        landed: &[HistoryRow],
    ) -> StoreResult<(Vec<HistoryRow>, Vec<Uuid>)> {
        let (mut found, mut settled) = (Vec::new(), Vec::new());
        for c in cs {
            match self.landed_run_rows(c, landed)? {
                Some(rows) => found.extend(rows),
                None => settled.push(c.run_id),
            }
        }
        Ok((found, settled))
    }

    /// Load `c`'s record and what history holds of its run, and plan it; a failed load fails
    /// this completion only.
    fn plan_completion(&mut self, plan: &mut CompletionPlan, c: Completion) {
        let found = match self.found_in_history(&c, plan.landed()) {
            Ok(found) => found,
            Err(e) => return plan.failed(c.job, e),
        };
        let job = c.job.clone();
        let cached = self.inner.hot.get_mut(&job);
        let fenced = match cached {
            Some(cached) => plan.complete(Some(&mut cached.rec), cached.sched.as_ref(), c, found),
            None => plan.complete(None, None, c, found),
        };
        // The claim's mark covers the job's live runs: it goes with the last of them.
        if fenced
            && let Some(cached) = self.inner.hot.get_mut(&job)
            && cached.rec.rt.lease.is_none()
        {
            cached.mark = None;
        }
    }

    /// What history already holds of `c`'s run, its record loaded first: its own row, written by
    /// a failed persist of this handle (a retried completion; not another owner's `abandoned`
    /// row for the same run), else, while the run holds a lapsed lease, an `abandoned` row of
    /// an owner that began recovering it and died before releasing the lease. A lease that does
    /// not look lapsed (the clock stepped back since the recoverer looked) is looked for in the
    /// rows after the job's record when they are few.
    fn found_in_history(&mut self, c: &Completion, landed: &[HistoryRow]) -> StoreResult<Found> {
        let own_row = landed
            .iter()
            .find(|r| r.run_id == c.run_id && r.job == c.job && r.owner == c.row.owner)
            .cloned();
        self.load(&c.job)?;
        let mut abandoned = false;
        if own_row.is_none()
            && let Some(cached) = self.inner.hot.get(&c.job)
            && holds(&cached.rec, c.run_id)
        {
            let from: Option<Option<Mark>> = if lapsed(&cached.rec, c.run_id, c.now) {
                Some(cached.mark)
            } else {
                self.recent_rows_from(cached.rows_to).map(Some)
            };
            if let Some(from) = from {
                abandoned = self
                    .find_run_row(from, c.run_id)?
                    .is_some_and(|r| r.status == Status::Abandoned);
            }
        }
        Ok(Found { own_row, abandoned })
    }

    /// Overlap rows a completion generates are not written again for slots a dead (or failed)
    /// operation already recorded after the job's record (see `rows_since_records`), nor for
    /// rows this handle's failed persists wrote.
    fn trim_leftovers(&mut self, plan: &mut CompletionPlan) -> StoreResult<()> {
        let scan: Vec<(String, Option<Mark>)> = plan
            .generating()
            .into_iter()
            .filter_map(|name| {
                let c = self.inner.hot.get(name)?;
                Some((name.to_string(), c.rows_to))
            })
            .collect();
        if scan.is_empty() {
            return Ok(());
        }
        let leftovers = self.rows_since_records(&scan)?;
        self.inner
            .rows_known
            .extend(scan.iter().map(|(name, _)| name.clone()));
        let mut jobs: Vec<String> = Vec::new();
        for (job, _) in plan.records() {
            if !jobs.contains(&job) {
                jobs.push(job);
            }
        }
        for name in jobs {
            let known: Vec<HistoryRow> = plan
                .landed()
                .iter()
                .chain(&leftovers)
                .filter(|r| r.job == name)
                .cloned()
                .collect();
            let Some(c) = self.inner.hot.get_mut(&name) else {
                continue;
            };
            let Some(sched) = c.sched.clone() else {
                continue;
            };
            if plan.trim(&name, &known, &sched, &mut c.rec) {
                self.inner.relies_on_landed = true;
            }
        }
        Ok(())
    }

    /// The records the plan writes, each job's `after:` children (with the run's end recorded
    /// in them) before it.
    fn records_to_write(&mut self, plan: &CompletionPlan) -> StoreResult<Vec<String>> {
        let mut names = Vec::new();
        for (job, end) in plan.records() {
            if let Some(end) = end {
                names.extend(self.chain_fan_out(&job, &end)?);
            }
            names.push(job);
        }
        Ok(names)
    }
}

//! The [`Store`] and [`HistoryReader`] traits on the file store, and its few operations of its
//! own (`upsert_job`, retention on demand): each takes the lock, loads the records it needs,
//! runs the plan or policy and persists.
//!
//! Owns: the trait impls. Must not touch: the decisions (plans and policies), the formats.

use crate::store::{BackendError, OperationError};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::handle::{FileStore, insert_new};
use super::layout::{HISTORY_FILE, JOURNAL_FILE, SETTINGS_FILE, SNAPSHOT_FILE};
use super::log::stat;
use super::record::Cached;
use crate::model::{HistoryRow, JobDef, JobRecord, JobsFile, Settings};
use crate::store::{
    ApplyReport, ClaimOutcome, ClaimRequest, CompleteOutcome, Completion, HistoryPage,
    HistoryQuery, HistoryReader, RenewOutcome, Renewal, ReserveOutcome, ReserveRequest, Settlement,
    SpendNow, Store, StoreError, StoreResult, TriggerOutcome,
};
use crate::store::{plan, policy, rules};

impl FileStore {
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
                    c.recompile();
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

    /// Retention: keep the newest `keep_per_job` rows of each job and, with
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
    pub(super) fn compact_jobs_for_test(&self) {
        let mut l = self.lock().expect("lock");
        l.compact_jobs().expect("compact");
    }
}

impl HistoryReader for FileStore {
    fn job(&self, name: &str) -> StoreResult<Option<JobRecord>> {
        self.lock_for(&[name])?.record(name)
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

    fn beat(&self, rec: &crate::model::OwnerRecord) -> StoreResult<crate::model::OwnerRecord> {
        self.write_beat(rec)
    }

    /// An owner record is written, stamped and renamed without fsync (`owners.rs`).
    fn beat_is_local(&self) -> bool {
        true
    }

    fn owners(&self) -> StoreResult<Vec<crate::model::OwnerSeen>> {
        self.read_owners()
    }

    fn rederive_ahead(&self, now: DateTime<Utc>) -> StoreResult<()> {
        FileStore::rederive_ahead(self, now)
    }

    fn clock_now(&self) -> Option<DateTime<Utc>> {
        self.fs_clock()
    }

    /// inotify on the store directory (see `crate::store::signal`).
    fn change_signal(&self) -> Option<crate::store::signal::ChangeSignal> {
        const WATCHED: &[&str] = &[SNAPSHOT_FILE, JOURNAL_FILE, HISTORY_FILE, SETTINGS_FILE];
        crate::store::signal::watch_dir(&self.dir, WATCHED)
    }

    fn apply(&self, file: &JobsFile, now: DateTime<Utc>) -> StoreResult<ApplyReport> {
        plan::apply::unique_names(file)?;
        let mut defs = file.jobs.iter().cloned();
        self.apply_fed(
            &file.settings,
            &mut |sink| defs.try_for_each(&mut *sink),
            now,
            file.jobs.len() < super::jobs::DIRECT_SNAPSHOT_MIN,
        )
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
        crate::config::check_bounds(&bare)
            .map_err(|e| StoreError::Operation(OperationError::OutOfBounds(e)))?;
        self.apply_fed(settings, feed, now, false)
    }

    fn settings(&self) -> StoreResult<Settings> {
        Ok(self.lock_for(&[])?.inner.settings.clone())
    }

    fn tool_pins(&self, servers: &[String]) -> StoreResult<Vec<crate::model::ToolPin>> {
        self.read_tool_pins(servers)
    }

    fn pin_tools(&self, pins: &[crate::model::ToolPin]) -> StoreResult<Vec<crate::model::ToolPin>> {
        self.insert_tool_pins(pins)
    }

    fn accept_tools(&self, server: &str, pins: &[crate::model::ToolPin]) -> StoreResult<usize> {
        self.replace_tool_pins(server, pins)
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

    /// Only leased jobs' records are read: the index holds each job's lease, and a job with a
    /// live run always holds one (with `overlap: allow`, more runs' leases sit beside it in
    /// the record). The job whose lease it is comes first.
    fn job_of_run(&self, run_id: uuid::Uuid) -> StoreResult<Option<String>> {
        let l = self.lock()?;
        let mut leased: Vec<(bool, String)> = l
            .inner
            .jobs
            .iter()
            .filter_map(|(n, s)| s.lease.map(|id| (id != run_id, n.to_string())))
            .collect();
        leased.sort();
        for (_, name) in leased {
            if l.record(&name)?
                .is_some_and(|r| r.rt.lease_of(run_id).is_some())
            {
                return Ok(Some(name));
            }
        }
        Ok(None)
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

    /// The index marks the jobs with budget counters (`spend`): only their lines are read.
    fn spenders(&self) -> StoreResult<Vec<JobRecord>> {
        let l = self.lock()?;
        let names: Vec<String> = l
            .inner
            .jobs
            .iter()
            .filter(|(_, s)| s.spend.is_some())
            .map(|(n, _)| n.to_string())
            .collect();
        let mut out = Vec::with_capacity(names.len());
        for n in &names {
            out.extend(l.record(n)?);
        }
        out.sort_by(|a, b| a.def.name.cmp(&b.def.name));
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
        self.claim(req)
    }

    fn renew(&self, job: &str, run_id: Uuid, now: DateTime<Utc>) -> StoreResult<RenewOutcome> {
        let mut l = self.lock()?;
        l.load(job)?;
        let Some(c) = l.inner.hot.get_mut(job) else {
            return Err(StoreError::Operation(OperationError::NoSuchJob(
                job.to_string(),
            )));
        };
        match rules::runtime::renew(&mut c.rec, run_id, now) {
            Some(lease_until) => {
                l.persist(&[], &[job.to_string()])?;
                Ok(RenewOutcome::Renewed { lease_until })
            }
            None => Ok(RenewOutcome::Lost),
        }
    }

    /// Every renewal under one lock and their job records in one journal append (one fsync),
    /// so an owner's runs that renew together do not queue one fsync each behind the lock
    /// (a burst of runs would otherwise wait longer for its renewals than their leases allow).
    fn renew_many(&self, rs: &[Renewal]) -> Vec<StoreResult<RenewOutcome>> {
        let mut l = match self.lock() {
            Ok(l) => l,
            Err(e) => {
                return rs.iter().map(|_| Err(e.duplicate())).collect();
            }
        };
        let mut out = Vec::with_capacity(rs.len());
        let mut names = Vec::new();
        for r in rs {
            let answer = l.load(&r.job).and_then(|_| {
                let c = l.inner.hot.get_mut(&r.job).ok_or_else(|| {
                    StoreError::Operation(OperationError::NoSuchJob(r.job.clone()))
                })?;
                Ok(match rules::runtime::renew(&mut c.rec, r.run_id, r.now) {
                    Some(lease_until) => RenewOutcome::Renewed { lease_until },
                    None => RenewOutcome::Lost,
                })
            });
            if matches!(answer, Ok(RenewOutcome::Renewed { .. })) && !names.contains(&r.job) {
                names.push(r.job.clone());
            }
            out.push(answer);
        }
        if names.is_empty() {
            return out;
        }
        // Nothing renewed counts until the batch is durable.
        if let Err(e) = l.persist(&[], &names) {
            for a in &mut out {
                if matches!(a, Ok(RenewOutcome::Renewed { .. })) {
                    *a = Err(e.duplicate());
                }
            }
        }
        out
    }

    fn complete(&self, c: Completion) -> StoreResult<CompleteOutcome> {
        self.complete_many(vec![c])
            .pop()
            .unwrap_or_else(|| Err(StoreError::Backend(BackendError::NoResult("a completion"))))
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
            .unwrap_or_else(|| Err(StoreError::Backend(BackendError::NoResult("a completion"))))
    }

    fn set_paused(&self, name: &str, paused: bool, now: DateTime<Utc>) -> StoreResult<()> {
        let mut l = self.lock_for(&[name])?;
        l.load(name)?;
        let Some(c) = l.inner.hot.get_mut(name) else {
            return Err(StoreError::Operation(OperationError::NoSuchJob(
                name.to_string(),
            )));
        };
        let changed = policy::operator::pause_step(&mut c.rec, paused, now)?;
        if changed {
            // A resume re-derives the job's slots from `now` (see `clockmark.rs`).
            l.note_stored_clock(now)?;
            l.persist(&[], &[name.to_string()])?;
        }
        Ok(())
    }

    fn request_trigger(&self, name: &str, now: DateTime<Utc>) -> StoreResult<TriggerOutcome> {
        let mut l = self.lock_for(&[name])?;
        l.load(name)?;
        let Some(c) = l.inner.hot.get_mut(name) else {
            return Err(StoreError::Operation(OperationError::NoSuchJob(
                name.to_string(),
            )));
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
        edit: &crate::store::JobEdit,
        now: DateTime<Utc>,
    ) -> StoreResult<crate::store::EditOutcome> {
        let mut l = self.lock_for(&[name])?;
        l.load(name)?;
        let Some(c) = l.inner.hot.get_mut(name) else {
            return Err(StoreError::Operation(OperationError::NoSuchJob(
                name.to_string(),
            )));
        };
        let mut rows = Vec::new();
        let (changed, out) = policy::operator::apply_edit_rows(&mut c.rec, edit, now, &mut rows)?;
        if changed {
            l.note_stored_clock(now)?;
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
        action: &crate::store::BulkAction,
        now: DateTime<Utc>,
    ) -> crate::store::BulkDone {
        let fail = |e| crate::store::BulkDone {
            done: Vec::new(),
            error: Some(e),
        };
        let named: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut l = match self.lock_for(&named) {
            Ok(l) => l,
            Err(e) => return fail(e),
        };
        let mut rows = Vec::new();
        let mut tally = policy::operator::BulkTally::new(names.len());
        for name in names {
            let step = l.load(name).and_then(|_| {
                let c = l.inner.hot.get_mut(name.as_str()).ok_or_else(|| {
                    StoreError::Operation(OperationError::NoSuchJob(name.clone()))
                })?;
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
            && let Err(e) = l
                .note_stored_clock(now)
                .and_then(|()| l.persist(&rows, &tally.changed))
        {
            return fail(e);
        }
        tally.into_done()
    }

    fn spend(&self, job: &str, now: DateTime<Utc>) -> StoreResult<SpendNow> {
        let l = self.lock()?;
        let settings = &l.inner.settings;
        let Some(rec) = l.record(job)? else {
            return Err(StoreError::Operation(OperationError::NoSuchJob(
                job.to_string(),
            )));
        };
        let job_usd = crate::store::stats::period_spend(&rec, settings, now);
        // From the index: only jobs with budget counters carry any.
        let global_usd = crate::cost::sum_usd(
            l.inner
                .jobs
                .values()
                .filter_map(|s| s.spend.as_deref())
                .map(|c| crate::store::stats::period_spend_counters(c, settings, now)),
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
            global.add(c, &key);
        }
        if !l.load(req.job)? {
            return Err(StoreError::Operation(OperationError::NoSuchJob(
                req.job.to_string(),
            )));
        }
        let Some(mine) = l.inner.hot.get(req.job) else {
            return Err(StoreError::Operation(OperationError::NoSuchJob(
                req.job.to_string(),
            )));
        };
        let (s, h) = rules::period::committed(&mine.rec, &key);
        let job = rules::period::Totals {
            spent: s,
            held: h,
            ..Default::default()
        };
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
            return Err(StoreError::Operation(OperationError::NoSuchJob(
                req.job.to_string(),
            )));
        };
        let id = policy::budget::record(&mut c.rec, req, key);
        l.persist(&[], &[req.job.to_string()])?;
        Ok(ReserveOutcome::Reserved { id })
    }

    fn loop_step(&self, s: &crate::store::LoopStep<'_>) -> StoreResult<crate::store::StepOutcome> {
        self.step(s)
    }

    fn settle(&self, job: &str, id: Uuid, how: Settlement, _now: DateTime<Utc>) -> StoreResult<()> {
        let mut l = self.lock()?;
        l.load(job)?;
        let Some(c) = l.inner.hot.get_mut(job) else {
            return Err(StoreError::Operation(OperationError::NoSuchJob(
                job.to_string(),
            )));
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
    pub(super) fn complete_batch(
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

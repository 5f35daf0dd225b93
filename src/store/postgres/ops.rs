//! The transaction skeleton most PostgreSQL operations share: one job under `FOR UPDATE`, a
//! bulk edit of many jobs, committing and announcing a change, reading the store version, the
//! budget period and settings, and `apply`.
//!
//! Owns: `Inner::with_job`, `Inner::bulk_edit`, `Inner::renew_batch`, `Inner::commit_changes`,
//! `Inner::apply`. Must not touch: what an edit does to a record (the policies).

use crate::store::OperationError;

use chrono::{DateTime, Utc};
use futures_util::future::{try_join, try_join3};
use serde_json::Value;
use tokio_postgres::Transaction;

use crate::model::{BudgetPeriod, HistoryRow, JobRecord, JobsFile, Settings};
use crate::store::{ApplyReport, RenewOutcome, Renewal, StoreError, StoreResult};
use crate::store::{plan, policy, rules};

use super::clock::PgClock;
use super::db::{Db, db_err, from_json, to_json};
use super::handle::Inner;
use super::stmts::Stmts;
use super::tx::{
    Edit, Notify, append_history, bump, digest_column, lock_jobs, read_for_apply, recount_budget,
    write_job_refs, write_jobs,
};

/// `pg_advisory_xact_lock` key of `apply` ("cronappl" in ASCII).
const APPLY_LOCK_KEY: i64 = 0x6372_6f6e_6170_706c;

impl Inner {
    /// Lock one job row, let `f` edit the record, write it back (and any rows) in one
    /// transaction. `f` sees `None` when the job does not exist, and the store's `now` (read
    /// once the row is locked; see `clock`).
    pub(super) async fn with_job<T, F>(
        &self,
        name: &str,
        now: DateTime<Utc>,
        notify: Notify,
        f: F,
    ) -> StoreResult<T>
    where
        F: FnOnce(Option<&mut JobRecord>, DateTime<Utc>) -> StoreResult<Edit<T>>,
    {
        let mut c = self.pool.get().await?;
        let st = c.stmts().await?;
        let tx = c
            .transaction()
            .await
            .map_err(|e| db_err("starting a transaction", e))?;
        let name = [name.to_string()];
        // Pipelined: the clock is read right after the lock is held, in the same round trip.
        let (mut recs, now) = try_join(
            lock_jobs(&tx, &st, &self.location, &name),
            self.clock.now_in(&tx, now),
        )
        .await?;
        let edit = f(recs.first_mut(), now)?;
        if !edit.changed && edit.rows.is_empty() {
            return Ok(edit.value);
        }
        let recs: &[JobRecord] = if edit.changed { &recs } else { &[] };
        self.commit_changes(tx, &st, &edit.rows, recs, now, notify, "committing")
            .await?;
        Ok(edit.value)
    }

    /// One chunk of a bulk operator action in one transaction: lock the named rows (in name
    /// order, as every multi-row lock here), apply the action to each in the order asked until
    /// one fails, write the records that changed and the rows in one commit. A missing job
    /// stops the chunk there as [`OperationError::NoSuchJob`](crate::store::OperationError::NoSuchJob).
    pub(super) async fn bulk_edit(
        &self,
        names: &[String],
        action: &crate::store::BulkAction,
        now: DateTime<Utc>,
    ) -> StoreResult<crate::store::BulkDone> {
        let mut c = self.pool.get().await?;
        let st = c.stmts().await?;
        let tx = c
            .transaction()
            .await
            .map_err(|e| db_err("starting a transaction", e))?;
        let (recs, now) = try_join(
            lock_jobs(&tx, &st, &self.location, names),
            self.clock.now_in(&tx, now),
        )
        .await?;
        let mut by_name: std::collections::HashMap<String, JobRecord> =
            recs.into_iter().map(|r| (r.def.name.clone(), r)).collect();
        let mut rows = Vec::new();
        let mut tally = policy::operator::BulkTally::new(names.len());
        for name in names {
            let step = match by_name.get_mut(name) {
                Some(rec) => policy::operator::bulk_step(rec, action, now, &mut rows),
                None => Err(StoreError::Operation(OperationError::NoSuchJob(
                    name.clone(),
                ))),
            };
            if !tally.step(name, step) {
                break;
            }
        }
        let changed: Vec<JobRecord> = tally
            .changed
            .iter()
            .filter_map(|n| by_name.remove(n))
            .collect();
        if !(rows.is_empty() && changed.is_empty()) {
            self.commit_changes(
                tx,
                &st,
                &rows,
                &changed,
                now,
                Notify::InTransaction,
                "committing",
            )
            .await?;
        }
        Ok(tally.into_done())
    }

    /// The lease renewals of one owner's batch in one transaction: their jobs locked together
    /// (in name order, as every multi-row lock here), the clock read once, each renewal settled
    /// as `renew` settles it (answers in order), and the records it extended written in one
    /// commit. Four round trips for the batch, where a transaction per renewal took four for
    /// each. A renewal of a job that no longer exists answers `NoSuchJob` and holds up none of
    /// the others; a failed transaction is every renewal's failure (none of them was written).
    pub(super) async fn renew_batch(
        &self,
        rs: Vec<Renewal>,
    ) -> StoreResult<Vec<StoreResult<RenewOutcome>>> {
        let Some(given) = rs.first().map(|r| r.now) else {
            return Ok(Vec::new());
        };
        let mut names: Vec<String> = rs.iter().map(|r| r.job.clone()).collect();
        names.sort();
        names.dedup();
        let mut c = self.pool.get().await?;
        let st = c.stmts().await?;
        let tx = c
            .transaction()
            .await
            .map_err(|e| db_err("starting a transaction", e))?;
        // Pipelined: the clock is read right after the locks are held, in the same round trip.
        let (recs, now) = try_join(
            lock_jobs(&tx, &st, &self.location, &names),
            self.clock.now_in(&tx, given),
        )
        .await?;
        let mut by_name: std::collections::HashMap<String, JobRecord> =
            recs.into_iter().map(|r| (r.def.name.clone(), r)).collect();
        let mut extended = std::collections::BTreeSet::new();
        let out: Vec<StoreResult<RenewOutcome>> = rs
            .into_iter()
            .map(|r| {
                // A test driving time by hand gives each renewal its own instant.
                let at = if self.clock == PgClock::Caller {
                    r.now
                } else {
                    now
                };
                let Some(rec) = by_name.get_mut(&r.job) else {
                    return Err(StoreError::Operation(OperationError::NoSuchJob(r.job)));
                };
                Ok(match rules::runtime::renew(rec, r.run_id, at) {
                    Some(lease_until) => {
                        extended.insert(r.job);
                        RenewOutcome::Renewed { lease_until }
                    }
                    None => RenewOutcome::Lost,
                })
            })
            .collect();
        if extended.is_empty() {
            return Ok(out);
        }
        let changed: Vec<JobRecord> = extended.iter().filter_map(|n| by_name.remove(n)).collect();
        self.commit_changes(
            tx,
            &st,
            &[],
            &changed,
            now,
            Notify::AfterCommit,
            "committing lease renewals",
        )
        .await?;
        Ok(out)
    }

    /// The one write path of edits, claims, completions and reservations: append `rows`, write
    /// `jobs`, bump the store version — pipelined in one round trip —, commit (`doing` names
    /// the step in an error) and make the new version known ([`Inner::published`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn commit_changes(
        &self,
        tx: Transaction<'_>,
        st: &Stmts,
        rows: &[HistoryRow],
        jobs: &[JobRecord],
        now: DateTime<Utc>,
        notify: Notify,
        doing: &str,
    ) -> StoreResult<()> {
        let ((), (), v) = try_join3(
            append_history(&tx, st, rows),
            write_jobs(&tx, st, jobs, now),
            bump(&tx, st, notify),
        )
        .await?;
        tx.commit().await.map_err(|e| db_err(doing, e))?;
        self.published(v, notify);
        Ok(())
    }

    /// Make a committed version known: observed locally, and announced to the other owners
    /// when the transaction did not NOTIFY it itself.
    pub(super) fn published(&self, v: i64, notify: Notify) {
        match notify {
            Notify::InTransaction => self.feed.observe(v),
            Notify::AfterCommit => self.feed.announce(v),
        }
    }

    pub(super) async fn read_version(&self) -> StoreResult<u64> {
        let c = self.pool.get().await?;
        let row = c
            .query_one(
                "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM cronsole_store_version",
                &[],
            )
            .await
            .map_err(|e| db_err("reading the store version", e))?;
        let v: i64 = row.get(0);
        self.feed.observe(v);
        Ok(self.feed.version())
    }
}

impl Inner {
    /// The counters' budget period, read inside the caller's transaction.
    pub(super) async fn period(
        &self,
        tx: &Transaction<'_>,
        st: &Stmts,
    ) -> StoreResult<BudgetPeriod> {
        let rows = tx
            .query(&st.settings, &[])
            .await
            .map_err(|e| db_err("reading settings", e))?;
        let settings = match rows.into_iter().next() {
            Some(r) => from_json(&self.location, "cronsole_settings", r.get::<_, Value>(0))?,
            None => Settings::default(),
        };
        Ok(crate::cost::budget_period(&settings))
    }

    pub(super) async fn settings_in(&self, c: &impl Db) -> StoreResult<Settings> {
        let rows = c
            .q("SELECT settings FROM cronsole_settings WHERE id = 1", &[])
            .await
            .map_err(|e| db_err("reading settings", e))?;
        match rows.into_iter().next() {
            Some(r) => from_json(&self.location, "cronsole_settings", r.get::<_, Value>(0)),
            None => Ok(Settings::default()),
        }
    }

    pub(super) async fn apply(
        &self,
        file: JobsFile,
        now: DateTime<Utc>,
    ) -> StoreResult<ApplyReport> {
        plan::apply::unique_names(&file)?;
        let mut c = self.pool.get().await?;
        let st = c.stmts().await?;
        let tx = c
            .transaction()
            .await
            .map_err(|e| db_err("starting a transaction", e))?;
        // Applies run one at a time: two owners starting together with the same file would
        // otherwise both read the old settings and both report the change as theirs.
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&APPLY_LOCK_KEY])
            .await
            .map_err(|e| db_err("taking the apply lock", e))?;
        let mut dirty = false;
        let (stored, now) = try_join(self.settings_in(&tx), self.clock.now_in(&tx, now)).await?;
        self.stored_on(now);
        let settings_changed = plan::apply::settings_changes(&stored, &file.settings);
        if stored != file.settings {
            tx.execute(
                "INSERT INTO cronsole_settings (id, settings) VALUES (1, $1)
                 ON CONFLICT (id) DO UPDATE SET settings = EXCLUDED.settings",
                &[&to_json(&file.settings)?],
            )
            .await
            .map_err(|e| db_err("writing settings", e))?;
            dirty = true;
        }
        // Only the jobs whose definitions differ (by digest), that left the file, or whose
        // counters need a recount are read, locked and possibly written.
        let names: Vec<String> = file.jobs.iter().map(|d| d.name.clone()).collect();
        let digests: Vec<i64> = file
            .jobs
            .iter()
            .map(|d| plan::apply::def_digest(d).map_or(0, digest_column))
            .collect();
        let key = crate::cost::budget_period(&file.settings).key(now);
        let read = read_for_apply(&tx, &self.location, &names, &digests, &key).await?;
        drop((names, digests));
        let mut by_name = read.records;
        let missing = read.missing;
        let (mut report, mut names) = plan::apply::apply_changed(
            &file,
            now,
            &mut by_name,
            |n| !missing.contains(n),
            |r| r,
            |r| r,
        )?;
        // Records stored before their digest was: written once, with it.
        let listed: std::collections::HashSet<String> = names.iter().cloned().collect();
        names.extend(read.undigested.into_iter().filter(|n| {
            !listed.contains(n)
                && by_name
                    .get(n)
                    .is_some_and(|r| plan::apply::record_digest(r).is_some())
        }));
        let mut recounted = Vec::new();
        recount_budget(
            &tx,
            &file.settings,
            now,
            &mut by_name,
            &mut names,
            &mut recounted,
        )
        .await?;
        let changed: Vec<&JobRecord> = names.iter().filter_map(|n| by_name.get(n)).collect();
        report.settings = settings_changed;
        report.recounted = recounted;
        report.created.sort();
        report.updated.sort();
        report.unchanged.sort();
        if dirty || !changed.is_empty() {
            write_job_refs(&tx, &st, &changed, now).await?;
            let v = bump(&tx, &st, Notify::InTransaction).await?;
            tx.commit().await.map_err(|e| db_err("committing", e))?;
            self.feed.observe(v);
        }
        Ok(report)
    }
}

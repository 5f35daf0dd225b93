//! Completions on PostgreSQL: a batch in one transaction (one WAL flush), its jobs locked in
//! name order, each completion executed by the completion plan both stores share, and history
//! retention paced per process.
//!
//! Owns: `Inner::complete_batch`. Must not touch: what a completion does (`plan::complete`).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use chrono::Utc;
use futures_util::future::try_join3;
use serde_json::Value;
use tokio_postgres::{GenericClient, Transaction};
use uuid::Uuid;

use crate::model::{HistoryRow, JobRecord};
use crate::store::plan::complete::{CompletionPlan, Found};
use crate::store::{CompleteOutcome, Completion, StoreResult};
use crate::store::{policy, rules};

use super::clock::PgClock;
use super::db::{db_err, from_json};
use super::handle::Inner;
use super::stmts::Stmts;
use super::tx::{Notify, RETENTION_EVERY, chain_children, lock_jobs, trim_history};

impl Inner {
    /// Group commit: every completion of the batch in ONE transaction (one WAL flush), each
    /// fenced by its run_id as usual. Idempotent when retried: a completion whose earlier
    /// attempt committed but whose reply was lost (connection cut after `COMMIT` was sent)
    /// finds its own row in history by run_id and writes nothing again (see the module doc).
    pub(super) async fn complete_batch(
        &self,
        cs: Vec<Completion>,
    ) -> StoreResult<Vec<StoreResult<CompleteOutcome>>> {
        let mut conn = self.pool.get().await?;
        let st = conn.stmts().await?;
        let tx = conn
            .transaction()
            .await
            .map_err(|e| db_err("starting a completion", e))?;
        let mut names: Vec<String> = cs.iter().map(|c| c.job.clone()).collect();
        names.sort();
        names.dedup();
        let given = cs.iter().map(|c| c.now).max().unwrap_or_else(Utc::now);
        // Pipelined: the store's clock is read once every row of the batch is locked.
        let (period, recs, now) = try_join3(
            self.period(&tx, &st),
            lock_jobs(&tx, &st, &self.location, &names),
            self.clock.now_in(&tx, given),
        )
        .await?;
        // Every completion of the batch is decided at the store's `now` (see `clock`); the
        // rows keep the owner's own start and end times.
        let cs: Vec<Completion> = if self.clock == PgClock::Database {
            cs.into_iter().map(|c| Completion { now, ..c }).collect()
        } else {
            cs
        };
        let mut recs: BTreeMap<String, JobRecord> =
            recs.into_iter().map(|r| (r.def.name.clone(), r)).collect();
        let landed = self.landed_rows(&tx, &st, &cs, &recs).await?;
        let mut plan = CompletionPlan::new(period, landed);
        for c in cs {
            // A retry whose first attempt committed: its own row, same run, status and owner.
            let mut probe = c.row.clone();
            probe.run_id = c.run_id;
            let own_row = plan
                .landed()
                .iter()
                .find(|l| l.owner == probe.owner && rules::rows::same_row(l, &probe))
                .cloned();
            let found = Found {
                own_row,
                abandoned: false,
            };
            plan.complete(recs.get_mut(&c.job), None, c, found);
        }
        let rows = plan.rows(plan.landed());
        let mut dirty: Vec<String> = Vec::new();
        // Fenced run ends, for their `after:` children.
        let mut ended: Vec<(crate::model::JobDef, HistoryRow)> = Vec::new();
        for (job, end) in plan.records() {
            if let Some(end) = end
                && let Some(rec) = recs.get(&job)
            {
                ended.push((rec.def.clone(), end));
            }
            dirty.push(job);
        }
        let results = plan.into_results();
        // `after:` children learn of the runs' ends in this same transaction. Children this
        // batch already holds (locked above) are updated in place; the others are found and
        // locked by one statement for the whole batch, so each job is written once with every
        // parent's end, and a batch of completions costs one lookup, not one per job.
        for (parent, end) in &ended {
            dirty.extend(policy::chain::fan_out(parent, end, recs.values_mut()));
        }
        let children =
            chain_children(&tx, &self.location, &ended, |n| recs.contains_key(n)).await?;
        dirty.sort();
        dirty.dedup();
        if rows.is_empty() && dirty.is_empty() && children.is_empty() {
            return Ok(results);
        }
        let mut changed: Vec<JobRecord> = dirty.iter().filter_map(|n| recs.remove(n)).collect();
        changed.extend(children);
        // A late end of a run recorded `abandoned` replaces that row (see the module doc).
        let superseded: Vec<String> = CompletionPlan::superseded(&rows)
            .iter()
            .map(Uuid::to_string)
            .collect();
        if !superseded.is_empty() {
            tx.execute(
                "DELETE FROM cronsole_history WHERE run_id = ANY($1) AND status = 'abandoned'",
                &[&superseded],
            )
            .await
            .map_err(|e| db_err("replacing an abandoned row", e))?;
        }
        super::reserve::drop_run_records(&tx, &rows).await?;
        self.commit_changes(
            tx,
            &st,
            &rows,
            &changed,
            now,
            Notify::AfterCommit,
            "committing a completion",
        )
        .await?;
        self.pace_retention(&*conn, &dirty).await;
        Ok(results)
    }

    /// The rows already in history of the batch's completions whose job no longer holds their
    /// lease: stale ones, or retries whose first attempt committed. Only those look for their
    /// row (an index probe on run_id).
    async fn landed_rows(
        &self,
        tx: &Transaction<'_>,
        st: &Stmts,
        cs: &[Completion],
        recs: &BTreeMap<String, JobRecord>,
    ) -> StoreResult<Vec<HistoryRow>> {
        let unfenced: Vec<String> = cs
            .iter()
            .filter(|c| {
                recs.get(&c.job)
                    .is_some_and(|r| !rules::runtime::holds(r, c.run_id))
            })
            .map(|c| c.run_id.to_string())
            .collect();
        if unfenced.is_empty() {
            return Ok(Vec::new());
        }
        tx.query(&st.run_rows, &[&unfenced])
            .await
            .map_err(|e| db_err("reading history", e))?
            .into_iter()
            .map(|r| from_json(&self.location, "cronsole_history", r.get::<_, Value>(0)))
            .collect()
    }

    /// History retention (the file store's default): every RETENTION_EVERY completions of a
    /// process, trim that job to its newest rows. A failure here loses nothing and is retried
    /// next time.
    async fn pace_retention(&self, conn: &impl GenericClient, dirty: &[String]) {
        for job in dirty {
            if self
                .completions
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(RETENTION_EVERY)
                && let Err(e) =
                    trim_history(conn, job, crate::store::file::DEFAULT_KEEP_PER_JOB).await
            {
                tracing::warn!(job = %job, "history retention failed: {e}");
            }
        }
    }
}

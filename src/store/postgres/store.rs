//! The [`Store`] trait on PostgreSQL: each operation run on the store's runtime through
//! `PgStore::run`, most of them one transaction of `ops.rs`, `claim.rs` or `complete.rs`.
//!
//! Owns: the trait impl. Must not touch: the decisions (plans and policies).

use crate::store::{BackendError, OperationError};
use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_postgres::types::Type;
use uuid::Uuid;

use crate::model::{JobRecord, JobsFile, Settings};
use crate::store::{
    ApplyReport, ClaimOutcome, ClaimRequest, CompleteOutcome, Completion, RenewOutcome,
    ReserveOutcome, ReserveRequest, Settlement, SpendNow, Store, StoreError, StoreResult,
    TriggerOutcome,
};
use crate::store::{policy, rules, signal};

use super::db::{Db, db_err, from_json};
use super::handle::PgStore;
use super::tx::{Edit, Notify, read_jobs};

impl Store for PgStore {
    fn location(&self) -> String {
        self.inner.location.clone()
    }

    fn apply(&self, file: &JobsFile, now: DateTime<Utc>) -> StoreResult<ApplyReport> {
        let file = file.clone();
        let limit = apply_limit(self.op_timeout, file.jobs.len());
        self.run_within(limit, |inner| async move { inner.apply(file, now).await })
    }

    fn settings(&self) -> StoreResult<Settings> {
        self.run(|inner| async move {
            let c = inner.pool.get().await?;
            inner.settings_in(&*c).await
        })
    }

    fn tool_pins(&self, servers: &[String]) -> StoreResult<Vec<crate::model::ToolPin>> {
        let servers = servers.to_vec();
        self.run(|inner| async move { inner.tool_pins(servers).await })
    }

    fn pin_tools(&self, pins: &[crate::model::ToolPin]) -> StoreResult<Vec<crate::model::ToolPin>> {
        let pins = pins.to_vec();
        self.run(|inner| async move { inner.pin_tools(pins).await })
    }

    fn accept_tools(&self, server: &str, pins: &[crate::model::ToolPin]) -> StoreResult<usize> {
        let (server, pins) = (server.to_string(), pins.to_vec());
        self.run(|inner| async move { inner.accept_tools(server, pins).await })
    }

    fn change_token(&self) -> StoreResult<u64> {
        if self.inner.feed.alive() {
            return Ok(self.inner.feed.version());
        }
        self.run(|inner| async move { inner.read_version().await })
    }

    fn change_signal(&self) -> Option<signal::ChangeSignal> {
        Some(signal::ChangeSignal::from_receiver(
            self.inner.feed.subscribe(),
        ))
    }

    fn jobs(&self) -> StoreResult<Vec<JobRecord>> {
        self.run(|inner| async move {
            let c = inner.pool.get().await?;
            read_jobs(&*c, &inner.location, None, false).await
        })
    }

    /// The jobs that spent or hold money, chosen by the server in one query: only their
    /// records cross the wire (the rule of `store::spent_or_holds`, in SQL).
    fn spenders(&self) -> StoreResult<Vec<JobRecord>> {
        self.run(|inner| async move {
            let c = inner.pool.get().await?;
            let rows = c
                .q(
                    "SELECT record FROM cronsole_jobs
                     WHERE COALESCE((record->'rt'->'counters'->>'period_cost_usd')::float8, 0) <> 0
                        OR COALESCE((record->'rt'->'counters'->>'total_cost_usd')::float8, 0) <> 0
                        OR COALESCE(record->'rt'->'counters'->'reservations', '[]'::jsonb)
                           NOT IN ('[]'::jsonb, 'null'::jsonb)
                     ORDER BY name",
                    &[],
                )
                .await
                .map_err(|e| db_err("reading the jobs that spent", e))?;
            rows.into_iter()
                .map(|r| from_json(&inner.location, "cronsole_jobs", r.get::<_, Value>(0)))
                .collect()
        })
    }

    /// Looked up by the server: only the matching job's name crosses the wire.
    fn job_of_run(&self, run_id: Uuid) -> StoreResult<Option<String>> {
        self.run(|inner| async move {
            let c = inner.pool.get().await?;
            let id = run_id.to_string();
            let beside = serde_json::json!([{ "run_id": id }]);
            let rows = c
                .q(
                    "SELECT name FROM cronsole_jobs
                     WHERE record->'rt'->'lease'->>'run_id' = $1
                        OR record->'rt'->'overlap'->'leases' @> $2
                     ORDER BY name LIMIT 1",
                    &[(&id, Type::TEXT), (&beside, Type::JSONB)],
                )
                .await
                .map_err(|e| db_err("finding the job of a run", e))?;
            Ok(rows.first().map(|r| r.get::<_, String>(0)))
        })
    }

    /// One statement for every name (prepared once per connection).
    fn jobs_named(&self, names: &[String]) -> StoreResult<Vec<JobRecord>> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let names = names.to_vec();
        self.run(|inner| async move {
            let mut c = inner.pool.get().await?;
            let st = c.stmts().await?;
            c.query(&st.jobs_named, &[&names])
                .await
                .map_err(|e| db_err("reading jobs", e))?
                .into_iter()
                .map(|r| from_json(&inner.location, "cronsole_jobs", r.get::<_, Value>(0)))
                .collect()
        })
    }

    fn jobs_page(&self, after: Option<&str>, limit: usize) -> StoreResult<Vec<JobRecord>> {
        let after = after.map(str::to_string);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.run(|inner| async move {
            let c = inner.pool.get().await?;
            // Keyset paging on the primary key, in the same order as `jobs()`.
            let rows = match &after {
                Some(a) => {
                    c.q(
                        "SELECT record FROM cronsole_jobs WHERE name > $1 ORDER BY name LIMIT $2",
                        &[(a, Type::TEXT), (&limit, Type::INT8)],
                    )
                    .await
                }
                None => {
                    c.q(
                        "SELECT record FROM cronsole_jobs ORDER BY name LIMIT $1",
                        &[(&limit, Type::INT8)],
                    )
                    .await
                }
            }
            .map_err(|e| db_err("reading a page of jobs", e))?;
            rows.into_iter()
                .map(|r| from_json(&inner.location, "cronsole_jobs", r.get::<_, Value>(0)))
                .collect()
        })
    }

    fn next_wakeup(&self, now: DateTime<Utc>) -> StoreResult<Option<DateTime<Utc>>> {
        let _ = now;
        self.run(|inner| async move {
            let mut c = inner.pool.get().await?;
            let st = c.stmts().await?;
            let row = c
                .query_one(&st.next_wakeup, &[])
                .await
                .map_err(|e| db_err("computing the next wakeup", e))?;
            Ok(row.get::<_, Option<DateTime<Utc>>>(0))
        })
    }

    fn claim_due(&self, req: &ClaimRequest<'_>) -> StoreResult<ClaimOutcome> {
        let (owner, now, limit) = (req.owner.to_string(), req.now, req.limit);
        let in_flight = req.in_flight.to_vec();
        // The request's own time, measured from here, is allowed for in judging the bound.
        let bound = req.max_offset.map(|b| (b, std::time::Instant::now()));
        self.run(|inner| async move { inner.claim(owner, now, limit, in_flight, bound).await })
    }

    fn renew(&self, job: &str, run_id: Uuid, now: DateTime<Utc>) -> StoreResult<RenewOutcome> {
        let name = job.to_string();
        self.run(|inner| async move {
            inner
                .with_job(&name.clone(), now, Notify::AfterCommit, move |rec, now| {
                    let Some(rec) = rec else {
                        return Err(StoreError::Operation(OperationError::NoSuchJob(name)));
                    };
                    Ok(match rules::runtime::renew(rec, run_id, now) {
                        Some(lease_until) => Edit::changed(RenewOutcome::Renewed { lease_until }),
                        None => Edit::unchanged(RenewOutcome::Lost),
                    })
                })
                .await
        })
    }

    /// The batch in one transaction (see `Inner::renew_batch`).
    fn renew_many(&self, rs: &[crate::store::Renewal]) -> Vec<StoreResult<RenewOutcome>> {
        let n = rs.len();
        if n == 0 {
            return Vec::new();
        }
        let rs = rs.to_vec();
        match self.run(|inner| async move { inner.renew_batch(rs).await }) {
            Ok(v) => v,
            // Nothing of the batch committed (or its outcome is unknown): every run retries.
            Err(e) => {
                let mut out: Vec<_> = (1..n).map(|_| Err(e.duplicate())).collect();
                out.insert(0, Err(e));
                out
            }
        }
    }

    fn complete(&self, c: Completion) -> StoreResult<CompleteOutcome> {
        self.complete_many(vec![c]).pop().unwrap_or_else(|| {
            Err(StoreError::Backend(BackendError::NoResult(
                "a completion batch of one",
            )))
        })
    }

    fn complete_many(&self, cs: Vec<Completion>) -> Vec<StoreResult<CompleteOutcome>> {
        let n = cs.len();
        if n == 0 {
            return Vec::new();
        }
        match self.run(|inner| async move { inner.complete_batch(cs).await }) {
            Ok(v) => v,
            // Nothing of the batch committed (or its outcome is unknown): every run retries.
            Err(e) => {
                let mut out: Vec<_> = (1..n).map(|_| Err(e.duplicate())).collect();
                out.insert(0, Err(e));
                out
            }
        }
    }

    fn set_paused(&self, name: &str, paused: bool, now: DateTime<Utc>) -> StoreResult<()> {
        let name = name.to_string();
        self.run(|inner| async move {
            inner
                .with_job(
                    &name.clone(),
                    now,
                    Notify::InTransaction,
                    move |rec, now| {
                        let Some(rec) = rec else {
                            return Err(StoreError::Operation(OperationError::NoSuchJob(name)));
                        };
                        let changed = policy::operator::pause_step(rec, paused, now)?;
                        Ok(if changed {
                            Edit::changed(())
                        } else {
                            Edit::unchanged(())
                        })
                    },
                )
                .await
        })
    }

    fn request_trigger(&self, name: &str, now: DateTime<Utc>) -> StoreResult<TriggerOutcome> {
        let name = name.to_string();
        self.run(|inner| async move {
            inner
                .with_job(
                    &name.clone(),
                    now,
                    Notify::InTransaction,
                    move |rec, now| {
                        let Some(rec) = rec else {
                            return Err(StoreError::Operation(OperationError::NoSuchJob(name)));
                        };
                        let (outcome, changed) = policy::operator::trigger_step(rec, now)?;
                        Ok(if changed {
                            Edit::changed(outcome)
                        } else {
                            Edit::unchanged(outcome)
                        })
                    },
                )
                .await
        })
    }

    fn update_job(
        &self,
        name: &str,
        edit: &crate::store::JobEdit,
        now: DateTime<Utc>,
    ) -> StoreResult<crate::store::EditOutcome> {
        let name = name.to_string();
        let edit = edit.clone();
        self.run(|inner| async move {
            inner
                .with_job(
                    &name.clone(),
                    now,
                    Notify::InTransaction,
                    move |rec, now| {
                        let Some(rec) = rec else {
                            return Err(StoreError::Operation(OperationError::NoSuchJob(name)));
                        };
                        let mut rows = Vec::new();
                        let (changed, out) =
                            policy::operator::apply_edit_rows(rec, &edit, now, &mut rows)?;
                        let mut e = if changed {
                            Edit::changed(out)
                        } else {
                            Edit::unchanged(out)
                        };
                        e.rows = rows;
                        Ok(e)
                    },
                )
                .await
        })
    }

    fn bulk_edit(
        &self,
        names: &[String],
        action: &crate::store::BulkAction,
        now: DateTime<Utc>,
    ) -> crate::store::BulkDone {
        let names = names.to_vec();
        let action = action.clone();
        match self.run(|inner| async move { inner.bulk_edit(&names, &action, now).await }) {
            Ok(d) => d,
            Err(e) => crate::store::BulkDone {
                done: Vec::new(),
                error: Some(e),
            },
        }
    }

    fn spend(&self, job: &str, now: DateTime<Utc>) -> StoreResult<SpendNow> {
        let job = job.to_string();
        self.run(|inner| async move {
            let c = inner.pool.get().await?;
            let settings = inner.settings_in(&*c).await?;
            let key = crate::cost::budget_period(&settings).key(now);
            // Same rule as `stats::period_spend` (`rules::period::counter_spend`): counters of an
            // older period of the same kind count 0.
            let overlapping = rules::period::overlapping_keys(&key);
            let row = c
                .query_one(
                    "WITH s AS (SELECT name, CASE
                         WHEN $1 = 'total' THEN
                             (record->'rt'->'counters'->>'total_cost_usd')::float8
                         WHEN record->'rt'->'counters'->>'period_key' = $1
                             OR record->'rt'->'counters'->>'period_key' = ANY($3)
                         THEN (record->'rt'->'counters'->>'period_cost_usd')::float8
                         ELSE 0 END AS usd FROM cronsole_jobs)
                     SELECT COALESCE(sum(usd), 0)::float8,
                         COALESCE(sum(usd) FILTER (WHERE name = $2), 0)::float8,
                         bool_or(name = $2)
                     FROM s",
                    &[&key, &job, &overlapping],
                )
                .await
                .map_err(|e| db_err("reading spend", e))?;
            if !row.get::<_, Option<bool>>(2).unwrap_or(false) {
                return Err(StoreError::Operation(OperationError::NoSuchJob(job)));
            }
            Ok(SpendNow {
                global_usd: row.get(0),
                job_usd: row.get(1),
            })
        })
    }

    fn reserve(&self, req: &ReserveRequest<'_>) -> StoreResult<ReserveOutcome> {
        let (job, owner) = (req.job.to_string(), req.owner.to_string());
        let (run_id, usd, now) = (req.run_id, req.usd, req.now);
        self.run(move |inner| async move { inner.reserve(job, run_id, owner, usd, now).await })
    }

    fn loop_step(&self, s: &crate::store::LoopStep<'_>) -> StoreResult<crate::store::StepOutcome> {
        let s = super::reserve::OwnedStep::of(s);
        self.run(|inner| async move { inner.loop_step(s).await })
    }

    fn settle(&self, job: &str, id: Uuid, how: Settlement, now: DateTime<Utc>) -> StoreResult<()> {
        let job = job.to_string();
        self.run(move |inner| async move { inner.settle(job, id, how, now).await })
    }

    fn beat(&self, rec: &crate::model::OwnerRecord) -> StoreResult<crate::model::OwnerRecord> {
        let rec = rec.clone();
        self.run(move |inner| async move { inner.beat(rec).await })
    }

    fn beats_on_own_threads(&self) -> bool {
        self.beats.is_some()
    }

    fn beat_handoff(&self, rec: &crate::model::OwnerRecord, done: crate::store::BeatDone) {
        PgStore::beat_handoff(self, rec, done);
    }

    fn owners(&self) -> StoreResult<Vec<crate::model::OwnerSeen>> {
        self.run(|inner| async move { inner.owners().await })
    }

    /// The database's clock, which every lease and heartbeat on it was stamped by.
    fn clock_now(&self) -> Option<DateTime<Utc>> {
        self.run(|inner| async move {
            let c = inner.pool.get().await?;
            inner.clock.read(&c).await
        })
        .ok()
        .flatten()
    }

    /// Claims read the database's clock, unless a test drives the time by hand.
    fn decides_on_own_clock(&self) -> bool {
        self.inner.clock == super::clock::PgClock::Database
    }
}

/// Jobs an `apply` may check and write per operation bound: one bound covers a file of this many
/// jobs, and each further slice adds one more. A first apply of 100 000 jobs takes tens of
/// seconds on a small loaded machine, far past the bound that suits a claim; the margin is wide
/// because an apply cut off at its bound writes nothing.
const APPLY_JOBS_PER_BOUND: usize = 5_000;

/// The bound on an `apply` of `jobs` jobs: the operation bound once per started slice of
/// [`APPLY_JOBS_PER_BOUND`] jobs, so a large file is never cut off at the claim's bound while
/// an unreachable store still fails a small apply as fast as any other operation.
fn apply_limit(op_timeout: std::time::Duration, jobs: usize) -> std::time::Duration {
    let slices = jobs.div_ceil(APPLY_JOBS_PER_BOUND).max(1);
    op_timeout.saturating_mul(u32::try_from(slices).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::apply_limit;
    use std::time::Duration;

    #[test]
    fn an_apply_gets_one_operation_bound_per_five_thousand_jobs() {
        let op = Duration::from_secs(15);
        assert_eq!(apply_limit(op, 0), op);
        assert_eq!(apply_limit(op, 5_000), op);
        assert_eq!(apply_limit(op, 5_001), op * 2);
        assert_eq!(apply_limit(op, 100_000), op * 20);
    }
}

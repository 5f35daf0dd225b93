//! Budget reservations on PostgreSQL (SPEC §11 hard limit): the SQL around the pure decisions of
//! `store::budget`.
//!
//! Owns: the reserve transaction (an advisory transaction lock serialises reservations across
//! every owner and host; the requesting job's row is locked `FOR UPDATE` so claims and
//! completions of that job wait for it; the other jobs' committed money is summed in SQL, so a
//! reservation reads one aggregate, not every record) and the settle transaction (one row lock).
//! Must not touch: the decisions themselves (`store::budget`).
//!
//! Why only reservations take the advisory lock: completions and settlements never raise the
//! committed total (a completion moves a settled amount from a reservation into the counters in
//! one row write; a settlement only lowers or keeps an amount), so they cannot push a concurrent
//! decision over a limit. Two reservations are the only race, and the lock orders them.

use chrono::{DateTime, Utc};
use tokio_postgres::types::Type;
use uuid::Uuid;

use super::{Inner, Notify, db_err, lock_jobs};
use crate::store::rules::period::Totals;
use crate::store::{ReserveOutcome, ReserveRequest, Settlement};
use crate::store::{StoreError, StoreResult};
use crate::store::{policy, rules};

/// `pg_advisory_xact_lock` key of budget reservations ("cronbudg" in ASCII).
const BUDGET_LOCK_KEY: i64 = 0x6372_6f6e_6275_6467;

impl Inner {
    pub(super) async fn reserve(
        &self,
        job: String,
        run_id: Uuid,
        owner: String,
        usd: f64,
        now: DateTime<Utc>,
    ) -> StoreResult<ReserveOutcome> {
        let mut c = self.pool.get().await?;
        let st = c.stmts().await?;
        let tx = c
            .transaction()
            .await
            .map_err(|e| db_err("starting a budget reservation", e))?;
        tx.query_typed(
            "SELECT pg_advisory_xact_lock($1)",
            &[(&BUDGET_LOCK_KEY, Type::INT8)],
        )
        .await
        .map_err(|e| db_err("taking the budget lock", e))?;
        let mut mine = lock_jobs(&tx, &st, &self.location, std::slice::from_ref(&job)).await?;
        let settings = self.settings_in(&tx).await?;
        let key = crate::cost::budget_period(&settings).key(now);
        // Every other job's committed money, summed in SQL (the same rule as
        // `rules::period::committed`: counters and reservations of this period or of a period of
        // another kind sharing time with it, all-time spend under `total`, each ≥ 0).
        let rows = tx
            .query_typed(
                "SELECT
                     COALESCE(sum(CASE
                         WHEN $1 = 'total' THEN GREATEST(
                             (record->'rt'->'counters'->>'total_cost_usd')::float8, 0)
                         WHEN record->'rt'->'counters'->>'period_key' = $1
                             OR record->'rt'->'counters'->>'period_key' = ANY($3)
                         THEN GREATEST(
                             (record->'rt'->'counters'->>'period_cost_usd')::float8, 0)
                         ELSE 0 END), 0),
                     COALESCE(sum((SELECT sum(GREATEST((r->>'usd')::float8, 0))
                         FROM jsonb_array_elements(
                             COALESCE(record->'rt'->'counters'->'reservations', '[]'::jsonb)) r
                         WHERE $1 = 'total' OR r->>'period_key' = $1
                             OR r->>'period_key' = ANY($3))), 0)
                 FROM cronsole_jobs WHERE name <> $2",
                &[
                    (&key, Type::TEXT),
                    (&job, Type::TEXT),
                    (&rules::period::overlapping_keys(&key), Type::TEXT_ARRAY),
                ],
            )
            .await
            .map_err(|e| db_err("summing committed spend", e))?;
        let (others_spent, others_held): (f64, f64) = rows
            .first()
            .map(|r| (r.get(0), r.get(1)))
            .unwrap_or((0.0, 0.0));
        let req = ReserveRequest {
            job: &job,
            run_id,
            owner: &owner,
            usd,
            now,
        };
        let Some(rec) = mine.first() else {
            return Err(StoreError::NoSuchJob(job));
        };
        let (spent, held) = rules::period::committed(rec, &key);
        let global = Totals {
            spent: others_spent + spent,
            held: others_held + held,
        };
        let job_totals = Totals { spent, held };
        let key = match policy::budget::decide_totals(
            &settings,
            global,
            rec.def.max_cost_usd,
            job_totals,
            &req,
        ) {
            Ok(key) => key,
            Err(reason) => return Ok(ReserveOutcome::Refused { reason }),
        };
        let Some(rec) = mine.first_mut() else {
            return Err(StoreError::NoSuchJob(job));
        };
        let id = policy::budget::record(rec, &req, key);
        self.commit_changes(
            tx,
            &st,
            &[],
            &mine,
            now,
            Notify::AfterCommit,
            "committing a budget reservation",
        )
        .await?;
        Ok(ReserveOutcome::Reserved { id })
    }

    pub(super) async fn settle(
        &self,
        job: String,
        id: Uuid,
        how: Settlement,
        now: DateTime<Utc>,
    ) -> StoreResult<()> {
        let name = job.clone();
        self.with_job(&name, now, Notify::AfterCommit, move |rec| {
            let Some(rec) = rec else {
                return Err(StoreError::NoSuchJob(job));
            };
            Ok(if policy::budget::settle(rec, id, how) {
                super::Edit::changed(())
            } else {
                super::Edit::unchanged(())
            })
        })
        .await
    }
}

//! Budget reservations on PostgreSQL (the hard limit: no call may start past it): the SQL around the pure decisions of
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
//! decision over a limit. Two reservations are the only race, and the lock orders them (a tool
//! loop's step that keeps money set aside for its next turn counts as one).

use crate::store::OperationError;
use chrono::{DateTime, Utc};
use futures_util::future::try_join3;
use tokio_postgres::types::Type;
use uuid::Uuid;

use super::db::db_err;
use super::handle::Inner;
use super::tx::{Edit, Notify, lock_jobs};
use crate::store::plan::{self, step::LoopStep};
use crate::store::rules::period::Totals;
use crate::store::{ReserveOutcome, ReserveRequest, Settlement, StepOutcome};
use crate::store::{StoreError, StoreResult};
use crate::store::{policy, rules};
use crate::transcript::Delta;

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
        // Pipelined: the store's clock is read once the job's row is locked.
        let (mut mine, settings, now) = try_join3(
            lock_jobs(&tx, &st, &self.location, std::slice::from_ref(&job)),
            self.settings_in(&tx),
            self.clock.now_in(&tx, now),
        )
        .await?;
        let key = crate::cost::budget_period(&settings).key(now);
        let others = committed_elsewhere(&tx, &key, &job).await?;
        let req = ReserveRequest {
            job: &job,
            run_id,
            owner: &owner,
            usd,
            now,
        };
        let Some(rec) = mine.first() else {
            return Err(StoreError::Operation(OperationError::NoSuchJob(job)));
        };
        let job_totals = rules::period::totals_of(&rec.rt.counters, &key);
        let global = others.plus(job_totals);
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
            return Err(StoreError::Operation(OperationError::NoSuchJob(job)));
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

    /// [`Store::loop_step`](crate::store::Store::loop_step) in one transaction: the job's row
    /// locked (and, for a reservation, the budget lock taken first, as `reserve` does), the
    /// step planned ([`plan::step`]), the transcript delta upserted into `cronsole_run_steps`
    /// and the record written — one commit.
    pub(super) async fn loop_step(&self, s: OwnedStep) -> StoreResult<StepOutcome> {
        let mut c = self.pool.get().await?;
        let st = c.stmts().await?;
        let tx = c
            .transaction()
            .await
            .map_err(|e| db_err("starting a tool loop's step", e))?;
        // Keeping money for a next turn raises the committed total as a reservation does.
        let budgeted = s.reserve.is_some() || s.set_aside.is_some();
        if budgeted {
            tx.query_typed(
                "SELECT pg_advisory_xact_lock($1)",
                &[(&BUDGET_LOCK_KEY, Type::INT8)],
            )
            .await
            .map_err(|e| db_err("taking the budget lock", e))?;
        }
        let (mut mine, settings, now) = try_join3(
            lock_jobs(&tx, &st, &self.location, std::slice::from_ref(&s.job)),
            self.settings_in(&tx),
            self.clock.now_in(&tx, s.now),
        )
        .await?;
        let others = if budgeted {
            let key = crate::cost::budget_period(&settings).key(now);
            committed_elsewhere(&tx, &key, &s.job).await?
        } else {
            Totals::default()
        };
        let Some(rec) = mine.first_mut() else {
            return Err(StoreError::Operation(OperationError::NoSuchJob(s.job)));
        };
        let step = LoopStep {
            job: &s.job,
            run_id: s.run_id,
            owner: &s.owner,
            settle: s.settle,
            reserve: s.reserve,
            set_aside: s.set_aside,
            record: &s.record,
            awaiting: s.awaiting.clone(),
            now,
        };
        let Some(out) = plan::step::step(&settings, rec, others, &step) else {
            return Ok(StepOutcome::Lost);
        };
        if !s.record.is_empty() {
            let seqs: Vec<i64> = s
                .record
                .iter()
                .map(|d| i64::try_from(d.seq).unwrap_or(i64::MAX))
                .collect();
            let entries: Vec<serde_json::Value> = s
                .record
                .iter()
                .map(|d| serde_json::to_value(&d.entry))
                .collect::<Result<_, _>>()
                .map_err(StoreError::encode("a run's record"))?;
            tx.execute(
                "INSERT INTO cronsole_run_steps (run_id, seq, job, entry)
                 SELECT $1, u.s, $2, u.e FROM unnest($3::int8[], $4::jsonb[]) AS u(s, e)
                 ON CONFLICT (run_id, seq) DO UPDATE SET entry = EXCLUDED.entry",
                &[&s.run_id.to_string(), &s.job, &seqs, &entries],
            )
            .await
            .map_err(|e| db_err("recording a tool loop's step", e))?;
        }
        self.commit_changes(
            tx,
            &st,
            &[],
            &mine,
            now,
            Notify::AfterCommit,
            "committing a tool loop's step",
        )
        .await?;
        Ok(out)
    }

    pub(super) async fn settle(
        &self,
        job: String,
        id: Uuid,
        how: Settlement,
        now: DateTime<Utc>,
    ) -> StoreResult<()> {
        let name = job.clone();
        self.with_job(&name, now, Notify::AfterCommit, move |rec, _| {
            let Some(rec) = rec else {
                return Err(StoreError::Operation(OperationError::NoSuchJob(job)));
            };
            Ok(if policy::budget::settle(rec, id, how) {
                Edit::changed(())
            } else {
                Edit::unchanged(())
            })
        })
        .await
    }
}

/// A [`LoopStep`] owned, to cross into the store's runtime.
pub(super) struct OwnedStep {
    pub job: String,
    pub run_id: Uuid,
    pub owner: String,
    pub settle: Option<(Uuid, Settlement)>,
    pub reserve: Option<f64>,
    pub set_aside: Option<f64>,
    pub record: Vec<Delta>,
    pub awaiting: crate::store::AwaitStep,
    pub now: DateTime<Utc>,
}

impl OwnedStep {
    pub(super) fn of(s: &LoopStep<'_>) -> OwnedStep {
        OwnedStep {
            job: s.job.to_string(),
            run_id: s.run_id,
            owner: s.owner.to_string(),
            settle: s.settle,
            reserve: s.reserve,
            set_aside: s.set_aside,
            record: s.record.to_vec(),
            awaiting: s.awaiting.clone(),
            now: s.now,
        }
    }
}

/// Every job's committed money but `job`'s in budget period `key`, summed in SQL (the same rule
/// as `rules::period::totals_of`: counters and reservations of this period or of a period of
/// another kind sharing time with it, all-time spend under `total`, each ≥ 0; with the parts of
/// the reservations kept for next turns and in flight).
async fn committed_elsewhere(
    tx: &tokio_postgres::Transaction<'_>,
    key: &str,
    job: &str,
) -> StoreResult<Totals> {
    let key = key.to_string();
    let job = job.to_string();
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
                 COALESCE(sum(h.held), 0), COALESCE(sum(h.aside), 0),
                 COALESCE(sum(h.in_flight), 0)
             FROM cronsole_jobs CROSS JOIN LATERAL (
                 SELECT sum(GREATEST((r->>'usd')::float8, 0)) AS held,
                     sum(GREATEST((r->>'usd')::float8, 0))
                         FILTER (WHERE (r->>'next_turn')::bool IS TRUE) AS aside,
                     sum(GREATEST((r->>'usd')::float8, 0))
                         FILTER (WHERE (r->>'next_turn')::bool IS NOT TRUE
                             AND r->>'state' = 'reserved') AS in_flight
                 FROM jsonb_array_elements(
                     COALESCE(record->'rt'->'counters'->'reservations', '[]'::jsonb)) r
                 WHERE $1 = 'total' OR r->>'period_key' = $1
                     OR r->>'period_key' = ANY($3)) h
             WHERE name <> $2",
            &[
                (&key, Type::TEXT),
                (&job, Type::TEXT),
                (&rules::period::overlapping_keys(&key), Type::TEXT_ARRAY),
            ],
        )
        .await
        .map_err(|e| db_err("summing committed spend", e))?;
    Ok(rows
        .first()
        .map(|r| Totals {
            spent: r.get(0),
            held: r.get(1),
            aside: r.get(2),
            in_flight: r.get(3),
        })
        .unwrap_or_default())
}

/// Put each `abandoned` row's persisted record on it (see the file store's `runs.rs`) and
/// delete the records, inside the caller's transaction.
pub(super) async fn attach_run_records(
    tx: &tokio_postgres::Transaction<'_>,
    location: &str,
    rows: &mut [crate::model::HistoryRow],
) -> StoreResult<()> {
    let ids: Vec<String> = rows
        .iter()
        .filter(|r| r.status == crate::model::Status::Abandoned && r.transcript.is_none())
        .map(|r| r.run_id.to_string())
        .collect();
    if ids.is_empty() {
        return Ok(());
    }
    let found = tx
        .query(
            "DELETE FROM cronsole_run_steps WHERE run_id = ANY($1) RETURNING run_id, seq, entry",
            &[&ids],
        )
        .await
        .map_err(|e| db_err("reading runs' records", e))?;
    let mut by_run: std::collections::HashMap<String, Vec<Delta>> = Default::default();
    for r in found {
        let entry = super::db::from_json(
            location,
            "cronsole_run_steps",
            r.get::<_, serde_json::Value>(2),
        )?;
        let seq: i64 = r.get(1);
        by_run.entry(r.get(0)).or_default().push(Delta {
            seq: u64::try_from(seq).unwrap_or(0),
            entry,
        });
    }
    for row in rows
        .iter_mut()
        .filter(|r| r.status == crate::model::Status::Abandoned && r.transcript.is_none())
    {
        let record = by_run
            .remove(&row.run_id.to_string())
            .map(crate::transcript::Transcript::from_deltas);
        crate::store::rules::rows::attach_record(row, record);
    }
    Ok(())
}

/// Delete the records of runs whose rows carry them now, inside the caller's transaction.
pub(super) async fn drop_run_records(
    tx: &tokio_postgres::Transaction<'_>,
    rows: &[crate::model::HistoryRow],
) -> StoreResult<()> {
    let ids: Vec<String> = rows
        .iter()
        .filter(|r| r.transcript.is_some())
        .map(|r| r.run_id.to_string())
        .collect();
    if ids.is_empty() {
        return Ok(());
    }
    tx.execute(
        "DELETE FROM cronsole_run_steps WHERE run_id = ANY($1)",
        &[&ids],
    )
    .await
    .map_err(|e| db_err("removing runs' records", e))?;
    Ok(())
}

//! The steps inside one PostgreSQL transaction that several operations share: bumping the
//! store version, locking and reading job records, writing them back, appending history, the
//! budget recount at a `period` edit, chain children and history retention.
//!
//! Owns: those statements. Must not touch: what an operation decides (the plans and policies),
//! the transaction's shape (`ops.rs`, `claim.rs`, `complete.rs`).

use crate::store::BackendError;
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_postgres::types::Type;
use tokio_postgres::{GenericClient, Row, Transaction};

use crate::model::{HistoryRow, JobRecord};
use crate::store::{StoreError, StoreResult};
use crate::store::{plan, policy, rules};

use super::db::{Db, db_err, from_json, to_json};
use super::schema;
use super::stmts::Stmts;
/// Trim a job's history every this many completions (per process).
pub(super) const RETENTION_EVERY: u64 = 64;

/// Keep the newest `keep` history rows of `job`.
pub(super) async fn trim_history(
    c: &impl GenericClient,
    job: &str,
    keep: usize,
) -> StoreResult<u64> {
    c.execute(
        "DELETE FROM cronsole_history WHERE job = $1 AND seq < (
             SELECT seq FROM cronsole_history WHERE job = $1
             ORDER BY seq DESC OFFSET $2 LIMIT 1)",
        &[&job, &(keep.saturating_sub(1) as i64)],
    )
    .await
    .map_err(|e| db_err("trimming history", e))
}

/// Most due rows one claim round locks.
pub(super) const MAX_CLAIM_BATCH: usize = 1000;

/// How a mutation tells the other owners (see `listen`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Notify {
    /// `pg_notify` inside the transaction: delivered iff it commits, even if this process exits
    /// right after (operator commands, `apply`).
    InTransaction,
    /// Announced by the listener connection after the commit, coalesced (the engine's claims,
    /// completions, renewals and reservations): keeps notifying transactions, which PostgreSQL
    /// commits one WAL flush at a time, off the hot path.
    AfterCommit,
}

/// Bump the store version (NOTIFYing it when asked); visible to others when the transaction
/// commits.
pub(super) async fn bump(tx: &Transaction<'_>, st: &Stmts, notify: Notify) -> StoreResult<i64> {
    let rows = match notify {
        Notify::InTransaction => tx.query(&st.bump_notify, &[&schema::CHANNEL]).await,
        Notify::AfterCommit => tx.query(&st.bump, &[]).await,
    }
    .map_err(|e| db_err("bumping the store version", e))?;
    rows.first().map(|r| r.get(0)).ok_or_else(|| {
        StoreError::Backend(BackendError::NoRow {
            doing: "bumping the store version",
        })
    })
}

/// An edit of the budget's `period` (so the new period does not start from $0): every job
/// holding money under a period of another kind gets its spend in the new one from the history
/// rows that finished inside it (`rules::period::recount`), selected by `finished_at` (indexed:
/// only the period's rows are read), in the apply's transaction. The jobs whose records changed are added to `names`, and with
/// what was found to `recounted` (the apply's report; in name order, as `by_name` is).
pub(super) async fn recount_budget(
    tx: &Transaction<'_>,
    settings: &crate::model::Settings,
    now: DateTime<Utc>,
    by_name: &mut BTreeMap<String, JobRecord>,
    names: &mut Vec<String>,
    recounted: &mut Vec<crate::store::Recount>,
) -> StoreResult<()> {
    let period = crate::cost::budget_period(settings);
    let key = period.key(now);
    let due: Vec<String> = by_name
        .iter()
        .filter(|(_, r)| rules::period::needs_recount(&r.rt.counters, &key))
        .map(|(n, _)| n.clone())
        .collect();
    if due.is_empty() {
        return Ok(());
    }
    let mut booked: BTreeMap<String, f64> = BTreeMap::new();
    if let Some(start) = rules::period::period_start(period, now) {
        // The rule of `rules::period::booked_since`: rows that finished at or after the start, each
        // cost ≥ 0 and finite (NaN and infinity compare above every number in PostgreSQL).
        let rows = tx
            .query_typed(
                "SELECT job, sum(cost_usd)::float8 FROM cronsole_history
                 WHERE finished_at >= $1 AND job = ANY($2)
                     AND cost_usd > 0 AND cost_usd < 'Infinity'::float8
                 GROUP BY job",
                &[
                    (&start, tokio_postgres::types::Type::TIMESTAMPTZ),
                    (&due, tokio_postgres::types::Type::TEXT_ARRAY),
                ],
            )
            .await
            .map_err(|e| db_err("summing the budget period's spend", e))?;
        for r in rows {
            booked.insert(r.get(0), r.get(1));
        }
    }
    for name in due {
        let Some(rec) = by_name.get_mut(&name) else {
            continue;
        };
        let spent = booked.get(&name).copied().unwrap_or(0.0);
        if !rules::period::recount(&mut rec.rt.counters, &key, spent) {
            continue;
        }
        recounted.push(crate::store::Recount {
            job: name.clone(),
            period: key.clone(),
            spent_usd: rec.rt.counters.period_cost_usd,
        });
        if !names.contains(&name) {
            names.push(name);
        }
    }
    Ok(())
}

/// Upsert whole job records; the indexed columns are projected from the JSON in SQL, except
/// `wakeup`, which `plan::claim::wakeup` computes (the same function the file store indexes by).
pub(super) async fn write_jobs(
    tx: &Transaction<'_>,
    st: &Stmts,
    records: &[JobRecord],
    now: DateTime<Utc>,
) -> StoreResult<()> {
    let refs: Vec<&JobRecord> = records.iter().collect();
    write_job_refs(tx, st, &refs, now).await
}

/// How many records one upsert statement carries: the statement's JSON is built a chunk at a
/// time, so a first apply of 100 000 jobs holds one chunk's JSON, not every record's twice over.
const WRITE_CHUNK: usize = 1_000;

/// [`write_jobs`] of borrowed records, [`WRITE_CHUNK`] per statement.
pub(super) async fn write_job_refs(
    tx: &Transaction<'_>,
    st: &Stmts,
    records: &[&JobRecord],
    now: DateTime<Utc>,
) -> StoreResult<()> {
    for chunk in records.chunks(WRITE_CHUNK) {
        let items: Vec<Value> = chunk
            .iter()
            .map(|r| {
                Ok(serde_json::json!({
                    "rec": to_json(*r)?,
                    "wakeup": plan::claim::wakeup(r),
                    "digest": plan::apply::record_digest(r).map(digest_column),
                }))
            })
            .collect::<StoreResult<_>>()?;
        let arr = Value::Array(items);
        tx.execute(&st.write_jobs, &[&arr, &now])
            .await
            .map_err(|e| db_err("writing jobs", e))?;
    }
    Ok(())
}

/// A definition digest as the `def_digest` column holds it (the same 64 bits, signed).
pub(super) fn digest_column(d: std::num::NonZeroU64) -> i64 {
    i64::from_ne_bytes(d.get().to_ne_bytes())
}

/// Lock up to `batch` due jobs not in `excluded`, skipping rows other owners hold; due at
/// `now`, or by the database's clock when `None` (each row carries the instant it was judged at).
pub(super) async fn select_due(
    tx: &Transaction<'_>,
    st: &Stmts,
    now: Option<DateTime<Utc>>,
    excluded: &[String],
    batch: usize,
) -> StoreResult<Vec<Row>> {
    tx.query(&st.select_due, &[&now, &excluded, &(batch as i64)])
        .await
        .map_err(|e| db_err("selecting due jobs", e))
}

/// The `after:` children of every job that ended in `ended`, found and locked (in name order)
/// by one statement for the whole batch, each with every run end that fires it recorded. Jobs
/// for which `held` is true are left out (the caller holds and updates its own copies); only
/// changed records are returned.
pub(super) async fn chain_children(
    c: &impl Db,
    location: &str,
    ended: &[(crate::model::JobDef, HistoryRow)],
    held: impl Fn(&str) -> bool,
) -> StoreResult<Vec<JobRecord>> {
    let mut parents: Vec<&str> = ended
        .iter()
        .filter(|(_, row)| policy::chain::may_fire(row))
        .map(|(p, _)| p.name.as_str())
        .collect();
    parents.sort_unstable();
    parents.dedup();
    if parents.is_empty() {
        return Ok(Vec::new());
    }
    let probes: Vec<Value> = parents
        .iter()
        .map(|p| serde_json::json!([{ "job": p }]))
        .collect();
    let rows = c
        .q(
            "SELECT record FROM cronsole_jobs WHERE name IN (
                 SELECT j.name FROM unnest($1::jsonb[]) AS p(probe)
                 JOIN cronsole_jobs j ON j.record->'def'->'after' @> p.probe)
             ORDER BY name FOR UPDATE",
            &[(&probes, Type::JSONB_ARRAY)],
        )
        .await
        .map_err(|e| db_err("reading chained jobs", e))?;
    let mut out = Vec::new();
    for r in rows {
        let mut rec: JobRecord = from_json(location, "cronsole_jobs", r.get::<_, Value>(0))?;
        if held(&rec.def.name) {
            continue;
        }
        let mut changed = false;
        for (parent, row) in ended {
            changed |= !policy::chain::fan_out(parent, row, std::iter::once(&mut rec)).is_empty();
        }
        if changed {
            out.push(rec);
        }
    }
    Ok(out)
}

/// Append history rows in order.
pub(super) async fn append_history(
    tx: &Transaction<'_>,
    st: &Stmts,
    rows: &[HistoryRow],
) -> StoreResult<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let arr = to_json(&rows)?;
    tx.execute(&st.append_history, &[&arr])
        .await
        .map_err(|e| db_err("appending history", e))?;
    Ok(())
}

/// Lock and read the records of `names` (sorted, so two owners lock in the same order).
pub(super) async fn lock_jobs(
    tx: &Transaction<'_>,
    st: &Stmts,
    location: &str,
    names: &[String],
) -> StoreResult<Vec<JobRecord>> {
    let rows = match names {
        [one] => tx.query(&st.job_for_update, &[one]).await,
        _ => tx.query(&st.jobs_for_update, &[&names]).await,
    }
    .map_err(|e| db_err("reading jobs", e))?;
    rows.into_iter()
        .map(|r| from_json(location, "cronsole_jobs", r.get::<_, Value>(0)))
        .collect()
}

/// Read job records, optionally only `name`, optionally locking them (`FOR UPDATE`).
pub(super) async fn read_jobs(
    c: &impl Db,
    location: &str,
    name: Option<&str>,
    lock: bool,
) -> StoreResult<Vec<JobRecord>> {
    let lock = if lock { " FOR UPDATE" } else { "" };
    let rows = match name {
        Some(n) => {
            c.q(
                &format!("SELECT record FROM cronsole_jobs WHERE name = $1{lock}"),
                &[(&n, Type::TEXT)],
            )
            .await
        }
        None => {
            c.q(
                &format!("SELECT record FROM cronsole_jobs ORDER BY name{lock}"),
                &[],
            )
            .await
        }
    }
    .map_err(|e| db_err("reading jobs", e))?;
    rows.into_iter()
        .map(|r| from_json(location, "cronsole_jobs", r.get::<_, Value>(0)))
        .collect()
}

/// What a single-job mutation decided: its result, whether the record changed, rows to append.
pub(super) struct Edit<T> {
    pub(super) value: T,
    pub(super) changed: bool,
    pub(super) rows: Vec<HistoryRow>,
}

impl<T> Edit<T> {
    pub(super) fn unchanged(value: T) -> Self {
        Edit {
            value,
            changed: false,
            rows: Vec::new(),
        }
    }
    pub(super) fn changed(value: T) -> Self {
        Edit {
            value,
            changed: true,
            rows: Vec::new(),
        }
    }
}

/// What a re-apply must read before it decides (see [`read_for_apply`]).
pub(super) struct ApplyRead {
    /// The stored records the file may change, locked: a definition whose digest differs (or
    /// that has none yet), a job no longer in the file and not retired, a job whose budget
    /// counters need a recount under period `key`.
    pub(super) records: BTreeMap<String, JobRecord>,
    /// Of those, the ones stored without a digest (written before the column existed).
    pub(super) undigested: Vec<String>,
    /// The file's jobs the store does not hold.
    pub(super) missing: std::collections::HashSet<String>,
}

/// The digest compare of a re-apply, in SQL: `names` and `digests` are the file's jobs and
/// their definitions' digests ([`plan::apply::def_digest`]); `key` is the budget period's key
/// now. Two statements, pipelined: the records that may change (locked, as every apply locks
/// what it writes) and the file's names the store lacks. Everything else is unchanged, and
/// neither read nor written.
pub(super) async fn read_for_apply(
    tx: &Transaction<'_>,
    location: &str,
    names: &[String],
    digests: &[i64],
    key: &str,
) -> StoreResult<ApplyRead> {
    // A job holds money under a period of another kind than `key`'s: the rule of
    // `rules::period::needs_recount` (NaN is written as null, which counts as no money).
    const CHANGED: &str = "SELECT j.record, j.def_digest IS NULL FROM cronsole_jobs j
         LEFT JOIN unnest($1::text[], $2::int8[]) AS f(name, digest) ON f.name = j.name
         WHERE (f.name IS NULL AND NOT j.retired)
            OR (f.name IS NOT NULL AND j.def_digest IS DISTINCT FROM f.digest)
            OR ((COALESCE((j.record->'rt'->'counters'->>'total_cost_usd')::float8, 0) > 0
                 OR COALESCE((j.record->'rt'->'counters'->>'period_cost_usd')::float8, 0) > 0)
                AND split_part(COALESCE(j.record->'rt'->'counters'->>'period_key', ''), ':', 1)
                    <> split_part($3, ':', 1))
         ORDER BY j.name
         FOR UPDATE OF j";
    const MISSING: &str = "SELECT f.name FROM unnest($1::text[]) AS f(name)
         WHERE NOT EXISTS (SELECT 1 FROM cronsole_jobs j WHERE j.name = f.name)";
    let key = key.to_string();
    let changed = [
        (
            &names as &(dyn tokio_postgres::types::ToSql + Sync),
            Type::TEXT_ARRAY,
        ),
        (&digests, Type::INT8_ARRAY),
        (&key, Type::TEXT),
    ];
    let missing = [(
        &names as &(dyn tokio_postgres::types::ToSql + Sync),
        Type::TEXT_ARRAY,
    )];
    let (rows, absent) =
        futures_util::future::try_join(tx.q(CHANGED, &changed), tx.q(MISSING, &missing))
            .await
            .map_err(|e| db_err("comparing the jobs file with the stored definitions", e))?;
    let mut out = ApplyRead {
        records: BTreeMap::new(),
        undigested: Vec::new(),
        missing: absent.into_iter().map(|r| r.get(0)).collect(),
    };
    for r in rows {
        let rec: JobRecord = from_json(location, "cronsole_jobs", r.get::<_, Value>(0))?;
        if r.get::<_, bool>(1) {
            out.undigested.push(rec.def.name.clone());
        }
        out.records.insert(rec.def.name.clone(), rec);
    }
    Ok(out)
}

//! The PostgreSQL store (SPEC §14.2): the same guarantees as the file store, across hosts.
//!
//! Owns: the `PgStore` type, its private tokio runtime, the connection pool (`pool`), the schema
//! and migrations (`schema`), the LISTEN/NOTIFY change feed (`listen`), and the SQL that maps the
//! [`Store`] trait onto tables. Must not touch: the §5 misfire / §6 recovery / §7 retirement
//! decisions themselves — those are pure functions over a `JobRecord` shared with the file store;
//! this module only provides the locking (one transaction, `FOR UPDATE SKIP LOCKED`) around them.
//!
//! Runtime bridging: the `Store` trait is synchronous and is called from the engine's
//! `spawn_blocking` threads, from plain threads (CLI commands, tests) and possibly from an async
//! task by mistake. Every operation is therefore *spawned* onto a runtime the store owns and the
//! caller waits on a std channel: no `block_on`, so no "runtime within a runtime" panic from any
//! calling context, and the store runtime never blocks on itself. The runtime is shut down in the
//! background on drop, which is legal from any context.
//!
//! Decisions where the SPEC is silent:
//! - One JSONB `record` column holds the whole `JobRecord` (the single source of truth); the
//!   indexed columns are a projection rewritten with it in the same statement, so they can never
//!   disagree with it.
//! - Every mutation bumps the `cronsole_store_version` sequence and NOTIFYs its new value inside
//!   the transaction; the change token is the highest version seen.
//! - Operations time out after `PgOptions::op_timeout` (default 15 s) with a retryable
//!   `StoreError::Database`; a transaction cut off that way is rolled back by the server.
//! - `HistoryQuery::limit == 0` means "no limit".

use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_postgres::{Config, GenericClient, Transaction};
use uuid::Uuid;

use super::*;
use crate::model::{HistoryRow, JobRecord, JobsFile, Settings};

mod listen;
mod pool;
mod schema;

use listen::ChangeFeed;
use pool::Pool;

/// Tunables; `Default` is what `--store postgres://…` uses.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// Connections in the pool (the listener has its own).
    pub pool_size: usize,
    pub connect_timeout: Duration,
    /// Upper bound on one store operation, connection checkout included.
    pub op_timeout: Duration,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            pool_size: 4,
            connect_timeout: Duration::from_secs(5),
            op_timeout: Duration::from_secs(15),
        }
    }
}

struct Inner {
    pool: Pool,
    feed: Arc<ChangeFeed>,
    location: String,
}

/// A [`Store`] over a PostgreSQL database shared by every owner (any number of hosts).
pub struct PgStore {
    inner: Arc<Inner>,
    handle: tokio::runtime::Handle,
    rt: Option<tokio::runtime::Runtime>,
    op_timeout: Duration,
}

impl Drop for PgStore {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// `StoreError::Database` with what we were doing and the server's own message.
pub(crate) fn db_err(doing: &str, e: &tokio_postgres::Error) -> StoreError {
    let mut msg = format!("{doing}: {e}");
    if let Some(db) = e.as_db_error() {
        msg.push_str(&format!(": {} ({})", db.message(), db.code().code()));
    } else {
        let mut src = std::error::Error::source(e);
        while let Some(s) = src {
            msg.push_str(&format!(": {s}"));
            src = s.source();
        }
    }
    StoreError::Database(msg)
}

/// The URL without its password, for messages and `location()`.
fn redact(cfg: &Config) -> String {
    use tokio_postgres::config::Host;
    let host = match cfg.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        #[cfg(unix)]
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "localhost".to_string(),
    };
    let port = cfg.get_ports().first().copied().unwrap_or(5432);
    let user = cfg.get_user().map(|u| format!("{u}@")).unwrap_or_default();
    let db = cfg.get_dbname().unwrap_or("");
    format!("postgres://{user}{host}:{port}/{db}")
}

impl PgStore {
    /// Connect to `url` (`postgres://user[:pass]@host[:port]/db?…` or `postgresql://…`),
    /// create or migrate the schema, and start the change listener.
    pub fn open(url: &str) -> StoreResult<PgStore> {
        PgStore::open_with(url, PgOptions::default())
    }

    pub fn open_with(url: &str, opts: PgOptions) -> StoreResult<PgStore> {
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(StoreError::Invalid(format!(
                "not a PostgreSQL URL (expected postgres://user@host:port/database): {}",
                url.split('@').next_back().unwrap_or(url)
            )));
        }
        let mut cfg = Config::from_str(url).map_err(|e| {
            StoreError::Invalid(format!(
                "invalid PostgreSQL URL (expected postgres://user@host:port/database): {e}"
            ))
        })?;
        if cfg.get_connect_timeout().is_none() {
            cfg.connect_timeout(opts.connect_timeout);
        }
        cfg.application_name("cronsole");
        cfg.keepalives(true);
        cfg.keepalives_idle(Duration::from_secs(10));
        let location = redact(&cfg);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("cronsole-pg")
            .enable_all()
            .build()
            .map_err(|e| StoreError::Database(format!("starting the store runtime: {e}")))?;
        let feed = Arc::new(ChangeFeed::default());
        let inner = Arc::new(Inner {
            pool: Pool::new(cfg.clone(), opts.pool_size),
            feed: Arc::clone(&feed),
            location,
        });
        let store = PgStore {
            inner,
            handle: rt.handle().clone(),
            rt: Some(rt),
            op_timeout: opts.op_timeout.max(opts.connect_timeout),
        };
        store.run(|inner| async move {
            let mut c = inner.pool.get().await?;
            schema::migrate(&mut c, &inner.location).await?;
            Ok(())
        })?;
        store.handle.spawn(listen::run(cfg, feed));
        Ok(store)
    }

    /// Run one operation on the store's runtime and wait for it from any thread.
    fn run<T, F, Fut>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Inner>) -> Fut,
        Fut: Future<Output = StoreResult<T>> + Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let fut = f(Arc::clone(&self.inner));
        let limit = self.op_timeout;
        self.handle.spawn(async move {
            let r = match tokio::time::timeout(limit, fut).await {
                Ok(r) => r,
                Err(_) => Err(StoreError::Database(format!(
                    "store operation timed out after {} s",
                    limit.as_secs_f64()
                ))),
            };
            let _ = tx.send(r);
        });
        rx.recv()
            .map_err(|_| StoreError::Database("the store's runtime stopped".into()))?
    }

    /// True while the LISTEN connection is up (change tokens are then free).
    pub fn listener_alive(&self) -> bool {
        self.inner.feed.alive()
    }

    /// Notifications received by this store's listener so far.
    pub fn notifications_received(&self) -> u64 {
        self.inner.feed.received()
    }

    /// Drop idle pooled connections (tests use it after restarting the server).
    pub fn reset_pool(&self) {
        self.inner.pool.clear_idle();
    }
}

fn corrupt(location: &str, what: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        file: location.into(),
        line: 0,
        column: 0,
        what: what.to_string(),
    }
}

fn from_json<T: DeserializeOwned>(location: &str, table: &str, v: Value) -> StoreResult<T> {
    serde_json::from_value(v).map_err(|e| corrupt(location, format!("{table}: {e}")))
}

fn to_json<T: serde::Serialize>(v: &T) -> StoreResult<Value> {
    serde_json::to_value(v).map_err(|e| StoreError::Invalid(format!("cannot encode: {e}")))
}

/// Bump the store version and NOTIFY it; visible to others when the transaction commits.
async fn bump(tx: &Transaction<'_>) -> StoreResult<i64> {
    let row = tx
        .query_one(
            "SELECT v, pg_notify($1, v::text) FROM (SELECT nextval('cronsole_store_version') AS v) s",
            &[&schema::CHANNEL],
        )
        .await
        .map_err(|e| db_err("bumping the store version", &e))?;
    Ok(row.get(0))
}

/// Upsert whole job records; the indexed columns are projected from the JSON in SQL.
async fn write_jobs(
    c: &impl GenericClient,
    records: &[JobRecord],
    now: DateTime<Utc>,
) -> StoreResult<()> {
    if records.is_empty() {
        return Ok(());
    }
    let arr = to_json(&records)?;
    c.execute(
        "INSERT INTO cronsole_jobs AS j (name, record, next_slot, lease_owner, lease_until, run_id,
             paused, enabled, retired, trigger_requested_at, hold_until, recovery_pending, updated_at)
         SELECT r->'def'->>'name', r,
             (r->'rt'->>'next_slot')::timestamptz,
             r->'rt'->'lease'->>'owner',
             (r->'rt'->'lease'->>'lease_until')::timestamptz,
             r->'rt'->'lease'->>'run_id',
             COALESCE((r->'rt'->>'paused')::boolean, false),
             COALESCE((r->'def'->>'enabled')::boolean, true),
             COALESCE((r->'rt'->>'retired')::boolean, false),
             (r->'rt'->>'trigger_requested_at')::timestamptz,
             (r->'rt'->>'hold_until')::timestamptz,
             COALESCE((r->'rt'->>'recovery_pending')::boolean, false),
             $2
         FROM jsonb_array_elements($1::jsonb) AS r
         ON CONFLICT (name) DO UPDATE SET
             record = EXCLUDED.record, next_slot = EXCLUDED.next_slot,
             lease_owner = EXCLUDED.lease_owner, lease_until = EXCLUDED.lease_until,
             run_id = EXCLUDED.run_id, paused = EXCLUDED.paused, enabled = EXCLUDED.enabled,
             retired = EXCLUDED.retired, trigger_requested_at = EXCLUDED.trigger_requested_at,
             hold_until = EXCLUDED.hold_until, recovery_pending = EXCLUDED.recovery_pending,
             updated_at = EXCLUDED.updated_at",
        &[&arr, &now],
    )
    .await
    .map_err(|e| db_err("writing jobs", &e))?;
    Ok(())
}

/// Append history rows in order.
async fn append_history(c: &impl GenericClient, rows: &[HistoryRow]) -> StoreResult<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let arr = to_json(&rows)?;
    c.execute(
        "INSERT INTO cronsole_history
             (run_id, job, status, slot, started_at, finished_at, cost_usd, has_diff, row)
         SELECT r->>'run_id', r->>'job', r->>'status', (r->>'slot')::timestamptz,
             (r->>'started_at')::timestamptz, (r->>'finished_at')::timestamptz,
             COALESCE((r->>'cost_usd')::float8, 0), (r->>'diff') IS NOT NULL, r
         FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS t(r, i)
         ORDER BY i",
        &[&arr],
    )
    .await
    .map_err(|e| db_err("appending history", &e))?;
    Ok(())
}

/// Read job records, optionally only `name`, optionally locking them (`FOR UPDATE`).
async fn read_jobs(
    c: &impl GenericClient,
    location: &str,
    name: Option<&str>,
    lock: bool,
) -> StoreResult<Vec<JobRecord>> {
    let lock = if lock { " FOR UPDATE" } else { "" };
    let rows = match name {
        Some(n) => {
            c.query(
                &format!("SELECT record FROM cronsole_jobs WHERE name = $1{lock}"),
                &[&n],
            )
            .await
        }
        None => {
            c.query(
                &format!("SELECT record FROM cronsole_jobs ORDER BY name{lock}"),
                &[],
            )
            .await
        }
    }
    .map_err(|e| db_err("reading jobs", &e))?;
    rows.into_iter()
        .map(|r| from_json(location, "cronsole_jobs", r.get::<_, Value>(0)))
        .collect()
}

/// What a single-job mutation decided: its result, whether the record changed, rows to append.
struct Edit<T> {
    value: T,
    changed: bool,
    rows: Vec<HistoryRow>,
}

impl<T> Edit<T> {
    fn unchanged(value: T) -> Self {
        Edit {
            value,
            changed: false,
            rows: Vec::new(),
        }
    }
    fn changed(value: T) -> Self {
        Edit {
            value,
            changed: true,
            rows: Vec::new(),
        }
    }
}

impl Inner {
    /// Lock one job row, let `f` edit the record, write it back (and any rows) in one
    /// transaction. `f` sees `None` when the job does not exist.
    async fn with_job<T, F>(&self, name: &str, now: DateTime<Utc>, f: F) -> StoreResult<T>
    where
        F: FnOnce(Option<&mut JobRecord>) -> StoreResult<Edit<T>>,
    {
        let mut c = self.pool.get().await?;
        let tx = c
            .transaction()
            .await
            .map_err(|e| db_err("starting a transaction", &e))?;
        let mut recs = read_jobs(&tx, &self.location, Some(name), true).await?;
        let edit = f(recs.first_mut())?;
        if !edit.changed && edit.rows.is_empty() {
            return Ok(edit.value);
        }
        if edit.changed {
            write_jobs(&tx, &recs, now).await?;
        }
        append_history(&tx, &edit.rows).await?;
        let v = bump(&tx).await?;
        tx.commit().await.map_err(|e| db_err("committing", &e))?;
        self.feed.observe(v);
        Ok(edit.value)
    }

    async fn read_version(&self) -> StoreResult<u64> {
        let c = self.pool.get().await?;
        let row = c
            .query_one(
                "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM cronsole_store_version",
                &[],
            )
            .await
            .map_err(|e| db_err("reading the store version", &e))?;
        let v: i64 = row.get(0);
        self.feed.observe(v);
        Ok(self.feed.version())
    }
}

/// The SQL filter and parameters of a history query (`$1…`), newest first.
fn history_sql(
    q: &HistoryQuery,
) -> (
    String,
    Vec<Box<dyn tokio_postgres::types::ToSql + Sync + Send>>,
) {
    let mut conds: Vec<String> = Vec::new();
    let mut params: Vec<Box<dyn tokio_postgres::types::ToSql + Sync + Send>> = Vec::new();
    if let Some(j) = &q.job {
        params.push(Box::new(j.clone()));
        conds.push(format!("job = ${}", params.len()));
    }
    if let Some(s) = q.status {
        params.push(Box::new(s.as_str().to_string()));
        conds.push(format!("status = ${}", params.len()));
    }
    if let Some(t) = q.since {
        params.push(Box::new(t));
        conds.push(format!("finished_at >= ${}", params.len()));
    }
    if let Some(r) = q.run_id {
        params.push(Box::new(r.to_string()));
        conds.push(format!("run_id = ${}", params.len()));
    }
    if q.with_diff {
        conds.push("has_diff".to_string());
    }
    let mut sql = "SELECT row FROM cronsole_history".to_string();
    if !conds.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&conds.join(" AND "));
    }
    sql.push_str(" ORDER BY finished_at DESC, seq DESC");
    if q.limit > 0 {
        sql.push_str(&format!(" LIMIT {}", q.limit));
    }
    (sql, params)
}

impl Store for PgStore {
    fn location(&self) -> String {
        self.inner.location.clone()
    }

    fn apply(&self, file: &JobsFile, now: DateTime<Utc>) -> StoreResult<ApplyReport> {
        let _ = (file, now);
        todo!("wire to store::logic")
    }

    fn settings(&self) -> StoreResult<Settings> {
        self.run(|inner| async move {
            let c = inner.pool.get().await?;
            let row = c
                .query_opt("SELECT settings FROM cronsole_settings WHERE id = 1", &[])
                .await
                .map_err(|e| db_err("reading settings", &e))?;
            match row {
                Some(r) => from_json(&inner.location, "cronsole_settings", r.get::<_, Value>(0)),
                None => Ok(Settings::default()),
            }
        })
    }

    fn change_token(&self) -> StoreResult<u64> {
        if self.inner.feed.alive() {
            return Ok(self.inner.feed.version());
        }
        self.run(|inner| async move { inner.read_version().await })
    }

    fn jobs(&self) -> StoreResult<Vec<JobRecord>> {
        self.run(|inner| async move {
            let c = inner.pool.get().await?;
            read_jobs(&*c, &inner.location, None, false).await
        })
    }

    fn job(&self, name: &str) -> StoreResult<Option<JobRecord>> {
        let name = name.to_string();
        self.run(|inner| async move {
            let c = inner.pool.get().await?;
            Ok(read_jobs(&*c, &inner.location, Some(&name), false)
                .await?
                .pop())
        })
    }

    fn next_wakeup(&self, now: DateTime<Utc>) -> StoreResult<Option<DateTime<Utc>>> {
        self.run(|inner| async move {
            let c = inner.pool.get().await?;
            // Earliest of: a pending trigger or recovery (now), a lease expiry, and the next
            // slot of a runnable job (not before its hold ends).
            let row = c
                .query_one(
                    "SELECT min(t) FROM (
                         SELECT CASE
                             WHEN lease_until IS NOT NULL THEN lease_until
                             WHEN trigger_requested_at IS NOT NULL OR recovery_pending THEN $1
                             WHEN paused OR NOT enabled THEN NULL
                             WHEN hold_until IS NOT NULL AND hold_until > next_slot THEN hold_until
                             ELSE next_slot
                         END AS t
                         FROM cronsole_jobs WHERE NOT retired
                     ) s",
                    &[&now],
                )
                .await
                .map_err(|e| db_err("computing the next wakeup", &e))?;
            Ok(row.get::<_, Option<DateTime<Utc>>>(0))
        })
    }

    fn claim_due(&self, req: &ClaimRequest<'_>) -> StoreResult<ClaimOutcome> {
        let _ = req;
        todo!("wire to store::logic")
    }

    fn renew(
        &self,
        job: &str,
        run_id: Uuid,
        owner: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<RenewOutcome> {
        let (name, owner) = (job.to_string(), owner.to_string());
        self.run(|inner| async move {
            inner
                .with_job(&name.clone(), now, move |rec| {
                    let Some(rec) = rec else {
                        return Err(StoreError::NoSuchJob(name));
                    };
                    let secs = rec.def.lease_seconds;
                    match rec.rt.lease.as_mut() {
                        Some(l) if l.run_id == run_id && l.owner == owner => {
                            l.lease_until = now + secs_to_duration(secs);
                            l.last_renewed = now;
                            Ok(Edit::changed(RenewOutcome::Renewed {
                                lease_until: l.lease_until,
                            }))
                        }
                        _ => Ok(Edit::unchanged(RenewOutcome::Lost)),
                    }
                })
                .await
        })
    }

    fn complete(&self, c: Completion) -> StoreResult<CompleteOutcome> {
        let _ = c;
        todo!("wire to store::logic")
    }

    fn history(&self, q: &HistoryQuery) -> StoreResult<Vec<HistoryRow>> {
        let (sql, params) = history_sql(q);
        self.run(|inner| async move {
            let c = inner.pool.get().await?;
            let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = params
                .iter()
                .map(|p| p.as_ref() as &(dyn tokio_postgres::types::ToSql + Sync))
                .collect();
            let rows = c
                .query(&sql, &refs)
                .await
                .map_err(|e| db_err("reading history", &e))?;
            rows.into_iter()
                .map(|r| from_json(&inner.location, "cronsole_history", r.get::<_, Value>(0)))
                .collect()
        })
    }

    fn set_paused(&self, name: &str, paused: bool, now: DateTime<Utc>) -> StoreResult<()> {
        let _ = (name, paused, now);
        todo!("wire to store::logic")
    }

    fn request_trigger(&self, name: &str, now: DateTime<Utc>) -> StoreResult<TriggerOutcome> {
        let _ = (name, now);
        todo!("wire to store::logic")
    }

    fn spend(&self, job: &str, now: DateTime<Utc>) -> StoreResult<SpendNow> {
        let _ = (job, now);
        todo!("wire to store::logic")
    }
}

/// Seconds (possibly fractional, from YAML) as a chrono duration; junk becomes 0.
fn secs_to_duration(secs: f64) -> chrono::Duration {
    if secs.is_finite() && secs > 0.0 {
        chrono::Duration::milliseconds((secs * 1000.0).min(1e15) as i64)
    } else {
        chrono::Duration::zero()
    }
}

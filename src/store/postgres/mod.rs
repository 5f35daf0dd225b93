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
//! - Every mutation bumps the `cronsole_store_version` sequence; the change token is the highest
//!   version seen. Operator commands NOTIFY it inside their transaction; the engine's claims,
//!   completions, renewals and reservations have it NOTIFYed by the listener after the commit,
//!   because PostgreSQL commits NOTIFYing transactions one WAL flush at a time (see `listen`).
//! - The hot statements are server-side prepared once per connection and kept with it in the
//!   pool (`Stmts`): each is parsed and planned once per connection, not once per call.
//! - Operations time out after `PgOptions::op_timeout` (default 15 s) with a retryable
//!   `StoreError::Database`; a transaction cut off that way is rolled back by the server.
//! - `HistoryQuery::limit == 0` means "no limit" (as in the file store).
//! - Renewals and completions are fenced by `run_id` alone (the owner rides in the lease), the
//!   same rule as the file store; a completion that lost its lease is appended with
//!   `stale_lease: true` and only its cost is counted — unless the run was recorded
//!   `abandoned` (its owner was paused past its lease, not dead): then the late row is the
//!   run's real end, written with `supersedes_abandoned`, and it replaces the `abandoned` row
//!   (deleted in the same transaction; the file store, append-only, hides it instead), so every
//!   query shows one row per run under the status that happened (`plan::complete::complete_step`).
//! - Lease expiry is detected by the next owner that claims: it writes the `abandoned` row (with
//!   its own owner id as `owner`, the lost owner named in `reason`) and applies `finish_run`.
//!   A completion and its lease release commit in one transaction, so a row never lands
//!   without its record. But a completion whose `COMMIT` reached the server and whose reply was
//!   lost (connection reset) is retried by the engine: when its job no longer holds its lease,
//!   the retry looks up its run_id in history, and if its own row is there (same run, status
//!   and owner) it finishes from it (`plan::complete::complete_landed`) and writes nothing again.
//! - `complete_many` commits the whole batch in one transaction (one WAL flush), locking its
//!   jobs in name order (two owners' batches cannot deadlock).
//! - A claim locks at most as many due rows per round as it has capacity left (1…1000): each
//!   locked row is a WAL record and is hidden from the other owners until the commit.
//! - History retention: every 64 completions a process trims that job's history to the newest
//!   10 000 rows (the file store's default), in insertion order.
//! - `next_wakeup` is `min(wakeup)` over all jobs (it ignores `now`, like the file store).
//! - TLS follows libpq (`sslmode`, `sslrootcert`, `sslcert`, `sslkey`; default `prefer`), and
//!   passwords come from the URL, `PGPASSWORD` or the pgpass file: see `connect`.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::future::{try_join, try_join_all, try_join3};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Config, GenericClient, Row, Statement, Transaction};
use uuid::Uuid;

use super::*;
use crate::model::{BudgetPeriod, HistoryRow, JobRecord, JobsFile, Settings};

pub mod connect;
mod listen;
mod pool;
mod reserve;
mod schema;

use crate::store::plan::complete::{CompletionPlan, Found};
use crate::store::{plan, policy, rules};
use listen::ChangeFeed;
use pool::Pool;

/// Tunables; `Default` is what `--store postgres://…` uses.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// Connections in the pool (the listener has its own).
    pub pool_size: usize,
    /// Bound on opening one connection (TCP, TLS and authentication).
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
    /// Completions by this process, to pace history retention.
    completions: AtomicU64,
}

/// Trim a job's history every this many completions (per process).
const RETENTION_EVERY: u64 = 64;

/// Keep the newest `keep` history rows of `job`.
async fn trim_history(c: &impl GenericClient, job: &str, keep: usize) -> StoreResult<u64> {
    c.execute(
        "DELETE FROM cronsole_history WHERE job = $1 AND seq < (
             SELECT seq FROM cronsole_history WHERE job = $1
             ORDER BY seq DESC OFFSET $2 LIMIT 1)",
        &[&job, &(keep.saturating_sub(1) as i64)],
    )
    .await
    .map_err(|e| db_err("trimming history", e))
}

/// A [`Store`] over a PostgreSQL database shared by every owner (any number of hosts).
pub struct PgStore {
    inner: Arc<Inner>,
    handle: tokio::runtime::Handle,
    rt: Option<tokio::runtime::Runtime>,
    op_timeout: Duration,
    /// `cronsole_store.store_id` as read at open (see [`schema`]).
    store_id: Option<String>,
}

/// How long dropping a store waits for its last announcements (see `listen`) to go out.
const ANNOUNCE_GRACE: Duration = Duration::from_millis(500);

/// Most due rows one claim round locks.
const MAX_CLAIM_BATCH: usize = 1000;

impl Drop for PgStore {
    fn drop(&mut self) {
        // Commits announced after the fact (claims, completions) are NOTIFYed by the listener;
        // give the last ones a moment so other owners hear this process's final completions.
        let deadline = std::time::Instant::now() + ANNOUNCE_GRACE;
        while self.inner.feed.announcing()
            && self.inner.feed.alive()
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(2));
        }
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// `StoreError::Database` with what we were doing and the server's own message.
pub(crate) fn db_err(doing: &str, e: tokio_postgres::Error) -> StoreError {
    let mut msg = e.to_string();
    if let Some(db) = e.as_db_error() {
        msg.push_str(&format!(": {} ({})", db.message(), db.code().code()));
    } else {
        let mut src = std::error::Error::source(&e);
        while let Some(s) = src {
            msg.push_str(&format!(": {s}"));
            src = s.source();
        }
    }
    StoreError::Database {
        doing: doing.to_string(),
        detail: msg,
        source: e,
    }
}

/// Statements with explicitly typed parameters (`query_typed`): one round trip each, where a
/// plain `query(&str)` first prepares the statement (a second round trip). The claim path runs
/// several statements per transaction, so this halves its latency.
type Params<'a> = [(&'a (dyn ToSql + Sync), Type)];

trait Db: Sync {
    fn q<'a>(
        &'a self,
        sql: &'a str,
        params: &'a Params<'a>,
    ) -> impl Future<Output = Result<Vec<Row>, tokio_postgres::Error>> + Send + 'a;
}

impl Db for Client {
    fn q<'a>(
        &'a self,
        sql: &'a str,
        params: &'a Params<'a>,
    ) -> impl Future<Output = Result<Vec<Row>, tokio_postgres::Error>> + Send + 'a {
        self.query_typed(sql, params)
    }
}

impl Db for Transaction<'_> {
    fn q<'a>(
        &'a self,
        sql: &'a str,
        params: &'a Params<'a>,
    ) -> impl Future<Output = Result<Vec<Row>, tokio_postgres::Error>> + Send + 'a {
        self.query_typed(sql, params)
    }
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

    /// [`PgStore::open`] with other pool and timeout settings.
    pub fn open_with(url: &str, opts: PgOptions) -> StoreResult<PgStore> {
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(StoreError::BadLocation {
                what: format!(
                    "not a PostgreSQL URL (expected postgres://user@host:port/database): {}",
                    url.split('@').next_back().unwrap_or(url)
                ),
                source: None,
            });
        }
        let (mut cfg, tls) = connect::parse(url)?;
        let tls = connect::connector(&tls)?;
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
            .map_err(|e| StoreError::io("the PostgreSQL store's runtime", e))?;
        let feed = Arc::new(ChangeFeed::default());
        let inner = Arc::new(Inner {
            pool: Pool::new(cfg.clone(), tls.clone(), opts.pool_size),
            feed: Arc::clone(&feed),
            location,
            completions: AtomicU64::new(1),
        });
        let mut store = PgStore {
            inner,
            handle: rt.handle().clone(),
            rt: Some(rt),
            op_timeout: opts.op_timeout.max(opts.connect_timeout),
            store_id: None,
        };
        store.store_id = store.run(|inner| async move {
            let mut c = inner.pool.get().await?;
            Ok(schema::migrate(&mut c, &inner.location).await?.1)
        })?;
        store.handle.spawn(listen::run(cfg, tls, feed));
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
                Err(_) => Err(StoreError::Unavailable(format!(
                    "store operation timed out after {} s",
                    limit.as_secs_f64()
                ))),
            };
            let _ = tx.send(r);
        });
        rx.recv()
            .map_err(|_| StoreError::Internal("the store operation ended without a result (it panicked, or the store runtime stopped)".into()))?
    }

    /// True while the LISTEN connection is up (change tokens are then free).
    pub fn listener_alive(&self) -> bool {
        self.inner.feed.alive()
    }

    /// Notifications received by this store's listener so far.
    pub fn notifications_received(&self) -> u64 {
        self.inner.feed.received()
    }

    /// Keep only the newest `keep` history rows of `job` (in insertion order); returns how
    /// many were deleted. Completions call this automatically with the SPEC default (10 000).
    pub fn trim_history(&self, job: &str, keep: usize) -> StoreResult<u64> {
        let job = job.to_string();
        self.run(|inner| async move {
            let c = inner.pool.get().await?;
            trim_history(&*c, &job, keep.max(1)).await
        })
    }

    /// The store id drawn when the schema was created (`cronsole_store`); `None` if its row
    /// was deleted.
    pub fn store_id(&self) -> Option<&str> {
        self.store_id.as_deref()
    }

    /// Drop idle pooled connections (tests use it after restarting the server).
    /// `cronsole check`: decode every job record and history row (in batches), and compare
    /// the indexed columns with the record they index. Reads only.
    pub fn check(&self) -> StoreResult<super::check::Report> {
        self.run(|inner| async move {
            let c = inner.pool.get().await?;
            let mut r = super::check::Report::default();
            let push = |r: &mut super::check::Report, table: &str, line: u64, what: String| {
                if r.problems.len() < super::check::MAX_REPORTED {
                    r.problems.push(super::check::Problem {
                        location: format!("{}/{table}", inner.location),
                        line,
                        column: 0,
                        what,
                    });
                } else {
                    r.more += 1;
                }
            };
            match schema::read_store_id(&*c).await? {
                Some(id) => r.store_id = Some(id),
                None => push(
                    &mut r,
                    "cronsole_store",
                    1,
                    "the store id row is missing (deleted by hand?)".into(),
                ),
            }
            let jobs = c
                .query("SELECT name, record FROM cronsole_jobs ORDER BY name", &[])
                .await
                .map_err(|e| db_err("reading jobs", e))?;
            for (i, row) in jobs.iter().enumerate() {
                let name: String = row.get(0);
                match serde_json::from_value::<JobRecord>(row.get::<_, Value>(1)) {
                    Ok(rec) if rec.def.name == name => r.jobs += 1,
                    Ok(rec) => push(
                        &mut r,
                        "cronsole_jobs",
                        i as u64 + 1,
                        format!("row '{name}' holds the record of job '{}'", rec.def.name),
                    ),
                    Err(e) => push(&mut r, "cronsole_jobs", i as u64 + 1, format!("job '{name}': {e}")),
                }
            }
            let mut after = 0i64;
            loop {
                let rows = c
                    .query(
                        "SELECT seq, run_id, job, row FROM cronsole_history WHERE seq > $1 ORDER BY seq LIMIT 10000",
                        &[&after],
                    )
                    .await
                    .map_err(|e| db_err("reading history", e))?;
                let Some(last) = rows.last() else {
                    break;
                };
                after = last.get(0);
                for row in &rows {
                    let seq: i64 = row.get(0);
                    let run_id: String = row.get(1);
                    let job: String = row.get(2);
                    match serde_json::from_value::<HistoryRow>(row.get::<_, Value>(3)) {
                        Ok(h) if h.run_id.to_string() == run_id && h.job == job => r.history_rows += 1,
                        Ok(_) => push(
                            &mut r,
                            "cronsole_history",
                            seq as u64,
                            "the run_id/job columns disagree with the row they index".into(),
                        ),
                        Err(e) => push(&mut r, "cronsole_history", seq as u64, format!("seq {seq}: {e}")),
                    }
                }
            }
            Ok(r)
        })
    }

    /// Close the pool's idle connections; the next operations open fresh ones.
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
    serde_json::to_value(v).map_err(StoreError::encode("a store record"))
}

/// How a mutation tells the other owners (see `listen`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Notify {
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
async fn bump(tx: &Transaction<'_>, st: &Stmts, notify: Notify) -> StoreResult<i64> {
    let rows = match notify {
        Notify::InTransaction => tx.query(&st.bump_notify, &[&schema::CHANNEL]).await,
        Notify::AfterCommit => tx.query(&st.bump, &[]).await,
    }
    .map_err(|e| db_err("bumping the store version", e))?;
    rows.first()
        .map(|r| r.get(0))
        .ok_or_else(|| StoreError::Internal("bumping the store version: no row".into()))
}

/// The hot paths' statements, prepared once per connection ([`pool::Conn::stmts`]) so the
/// server parses and plans each of them once per connection instead of once per call.
pub(crate) struct Stmts {
    select_due: Statement,
    write_jobs: Statement,
    bump: Statement,
    bump_notify: Statement,
    settings: Statement,
    append_history: Statement,
    job_for_update: Statement,
    jobs_for_update: Statement,
    run_rows: Statement,
}

const SELECT_DUE_SQL: &str = "SELECT record FROM cronsole_jobs
     WHERE wakeup <= $1 AND NOT (name = ANY($2))
     ORDER BY wakeup, name
     LIMIT $3
     FOR UPDATE SKIP LOCKED";

const WRITE_JOBS_SQL: &str = "INSERT INTO cronsole_jobs AS j (name, record, next_slot, lease_owner,
         lease_until, run_id, paused, enabled, retired, trigger_requested_at, hold_until,
         recovery_pending, wakeup, updated_at)
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
         (e->>'wakeup')::timestamptz,
         $2
     FROM jsonb_array_elements($1::jsonb) AS e, LATERAL (SELECT e->'rec' AS r) x
     ON CONFLICT (name) DO UPDATE SET
         record = EXCLUDED.record, next_slot = EXCLUDED.next_slot,
         lease_owner = EXCLUDED.lease_owner, lease_until = EXCLUDED.lease_until,
         run_id = EXCLUDED.run_id, paused = EXCLUDED.paused, enabled = EXCLUDED.enabled,
         retired = EXCLUDED.retired, trigger_requested_at = EXCLUDED.trigger_requested_at,
         hold_until = EXCLUDED.hold_until, recovery_pending = EXCLUDED.recovery_pending,
         wakeup = EXCLUDED.wakeup, updated_at = EXCLUDED.updated_at";

const APPEND_HISTORY_SQL: &str = "INSERT INTO cronsole_history
         (run_id, job, status, slot, started_at, finished_at, cost_usd, has_diff, row)
     SELECT r->>'run_id', r->>'job', r->>'status', (r->>'slot')::timestamptz,
         (r->>'started_at')::timestamptz, (r->>'finished_at')::timestamptz,
         COALESCE((r->>'cost_usd')::float8, 0), (r->>'diff') IS NOT NULL, r
     FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS t(r, i)
     ORDER BY i";

impl pool::Conn<'_> {
    /// This connection's prepared statements, preparing them (pipelined: one round trip) on
    /// its first use. Not at connect: the first connection runs the migration that creates the
    /// tables these statements name.
    async fn stmts(&mut self) -> StoreResult<Arc<Stmts>> {
        if let Some(s) = &self.stmts {
            return Ok(Arc::clone(s));
        }
        let c: &Client = self;
        let list: [(&str, &[Type]); 9] = [
            (
                SELECT_DUE_SQL,
                &[Type::TIMESTAMPTZ, Type::TEXT_ARRAY, Type::INT8],
            ),
            (WRITE_JOBS_SQL, &[Type::JSONB, Type::TIMESTAMPTZ]),
            ("SELECT nextval('cronsole_store_version')", &[]),
            (
                "SELECT v, pg_notify($1, v::text) FROM (SELECT nextval('cronsole_store_version') AS v) s",
                &[Type::TEXT],
            ),
            ("SELECT settings FROM cronsole_settings WHERE id = 1", &[]),
            (APPEND_HISTORY_SQL, &[Type::JSONB]),
            (
                "SELECT record FROM cronsole_jobs WHERE name = $1 FOR UPDATE",
                &[Type::TEXT],
            ),
            (
                "SELECT record FROM cronsole_jobs WHERE name = ANY($1) ORDER BY name FOR UPDATE",
                &[Type::TEXT_ARRAY],
            ),
            (
                "SELECT row FROM cronsole_history WHERE run_id = ANY($1) ORDER BY seq",
                &[Type::TEXT_ARRAY],
            ),
        ];
        let mut v = try_join_all(list.iter().map(|(sql, types)| c.prepare_typed(sql, types)))
            .await
            .map_err(|e| db_err("preparing statements", e))?
            .into_iter();
        let mut next = || {
            v.next()
                .ok_or_else(|| StoreError::Internal("preparing statements: one missing".into()))
        };
        let s = Arc::new(Stmts {
            select_due: next()?,
            write_jobs: next()?,
            bump: next()?,
            bump_notify: next()?,
            settings: next()?,
            append_history: next()?,
            job_for_update: next()?,
            jobs_for_update: next()?,
            run_rows: next()?,
        });
        self.stmts = Some(Arc::clone(&s));
        Ok(s)
    }
}

/// Upsert whole job records; the indexed columns are projected from the JSON in SQL, except
/// `wakeup`, which `plan::claim::wakeup` computes (the same function the file store indexes by).
/// An edit of the budget's `period` (red team 6): every job holding money under a period of
/// another kind gets its spend in the new one from the history rows that finished inside it
/// (`rules::period::recount`), selected by `finished_at` (indexed: only the period's rows are read),
/// in the apply's transaction. The jobs whose records changed are added to `names`, and with
/// what was found to `recounted` (the apply's report; in name order, as `by_name` is).
async fn recount_budget(
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

async fn write_jobs(
    tx: &Transaction<'_>,
    st: &Stmts,
    records: &[JobRecord],
    now: DateTime<Utc>,
) -> StoreResult<()> {
    if records.is_empty() {
        return Ok(());
    }
    let items: Vec<Value> = records
        .iter()
        .map(|r| Ok(serde_json::json!({ "rec": to_json(r)?, "wakeup": plan::claim::wakeup(r) })))
        .collect::<StoreResult<_>>()?;
    let arr = Value::Array(items);
    tx.execute(&st.write_jobs, &[&arr, &now])
        .await
        .map_err(|e| db_err("writing jobs", e))?;
    Ok(())
}

/// Lock up to `batch` due jobs not in `excluded`, skipping rows other owners hold.
async fn select_due(
    tx: &Transaction<'_>,
    st: &Stmts,
    now: DateTime<Utc>,
    excluded: &[String],
    batch: usize,
) -> StoreResult<Vec<Row>> {
    tx.query(&st.select_due, &[&now, &excluded, &(batch as i64)])
        .await
        .map_err(|e| db_err("selecting due jobs", e))
}

/// The `after:` children of `parent`, locked, with the run end `row` recorded in those it
/// fires (only the changed ones are returned).
async fn chain_children(
    c: &impl Db,
    location: &str,
    parent: &crate::model::JobDef,
    row: &HistoryRow,
) -> StoreResult<Vec<JobRecord>> {
    if !policy::chain::may_fire(row) {
        return Ok(Vec::new());
    }
    let probe = serde_json::json!([{ "job": parent.name }]);
    let rows = c
        .q(
            "SELECT record FROM cronsole_jobs WHERE record->'def'->'after' @> $1::jsonb
             ORDER BY name FOR UPDATE",
            &[(&probe, Type::JSONB)],
        )
        .await
        .map_err(|e| db_err("reading chained jobs", e))?;
    let mut out = Vec::new();
    for r in rows {
        let mut rec: JobRecord = from_json(location, "cronsole_jobs", r.get::<_, Value>(0))?;
        if !policy::chain::fan_out(parent, row, std::iter::once(&mut rec)).is_empty() {
            out.push(rec);
        }
    }
    Ok(out)
}

/// Append history rows in order.
async fn append_history(tx: &Transaction<'_>, st: &Stmts, rows: &[HistoryRow]) -> StoreResult<()> {
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
async fn lock_jobs(
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
async fn read_jobs(
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
    async fn with_job<T, F>(
        &self,
        name: &str,
        now: DateTime<Utc>,
        notify: Notify,
        f: F,
    ) -> StoreResult<T>
    where
        F: FnOnce(Option<&mut JobRecord>) -> StoreResult<Edit<T>>,
    {
        let mut c = self.pool.get().await?;
        let st = c.stmts().await?;
        let tx = c
            .transaction()
            .await
            .map_err(|e| db_err("starting a transaction", e))?;
        let mut recs = lock_jobs(&tx, &st, &self.location, &[name.to_string()]).await?;
        let edit = f(recs.first_mut())?;
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
    /// stops the chunk there as [`StoreError::NoSuchJob`].
    async fn bulk_edit(
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
        let recs = lock_jobs(&tx, &st, &self.location, names).await?;
        let mut by_name: std::collections::HashMap<String, JobRecord> =
            recs.into_iter().map(|r| (r.def.name.clone(), r)).collect();
        let mut rows = Vec::new();
        let mut tally = policy::operator::BulkTally::new(names.len());
        for name in names {
            let step = match by_name.get_mut(name) {
                Some(rec) => policy::operator::bulk_step(rec, action, now, &mut rows),
                None => Err(StoreError::NoSuchJob(name.clone())),
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

    /// The one write path of edits, claims, completions and reservations: append `rows`, write
    /// `jobs`, bump the store version — pipelined in one round trip —, commit (`doing` names
    /// the step in an error) and make the new version known ([`Inner::published`]).
    #[allow(clippy::too_many_arguments)]
    async fn commit_changes(
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
    fn published(&self, v: i64, notify: Notify) {
        match notify {
            Notify::InTransaction => self.feed.observe(v),
            Notify::AfterCommit => self.feed.announce(v),
        }
    }

    async fn read_version(&self) -> StoreResult<u64> {
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

/// A history page token: the last row's `finished_at` (µs since the epoch) and `seq`.
fn parse_page_token(t: &str) -> StoreResult<(DateTime<Utc>, i64)> {
    let bad = || {
        StoreError::Refused(format!(
            "'{t}' is not a page token of this store (tokens come from a previous page)"
        ))
    };
    let (us, seq) = t.split_once('.').ok_or_else(bad)?;
    let us: i64 = us.parse().map_err(|_| bad())?;
    let seq: i64 = seq.parse().map_err(|_| bad())?;
    Ok((DateTime::from_timestamp_micros(us).ok_or_else(bad)?, seq))
}

/// The SQL filter and parameters of a history query (`$1…`), newest first. With a page token
/// (`q.before`) the page starts after its row by keyset — `(finished_at, seq) < (…)` on the
/// same `(…, finished_at DESC, seq DESC)` indexes the order uses — never by `OFFSET`.
fn history_sql(
    q: &HistoryQuery,
) -> StoreResult<(
    String,
    Vec<Box<dyn tokio_postgres::types::ToSql + Sync + Send>>,
)> {
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
    if let Some(t) = &q.before {
        let (fin, seq) = parse_page_token(t)?;
        params.push(Box::new(fin));
        params.push(Box::new(seq));
        conds.push(format!(
            "(finished_at, seq) < (${}, ${})",
            params.len() - 1,
            params.len()
        ));
    }
    let mut sql = "SELECT row, finished_at, seq FROM cronsole_history".to_string();
    if !conds.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&conds.join(" AND "));
    }
    sql.push_str(" ORDER BY finished_at DESC, seq DESC");
    if q.limit > 0 {
        sql.push_str(&format!(" LIMIT {}", q.limit));
    }
    if q.offset > 0 {
        sql.push_str(&format!(" OFFSET {}", q.offset));
    }
    Ok((sql, params))
}

impl Inner {
    /// The counters' budget period, read inside the caller's transaction.
    async fn period(&self, tx: &Transaction<'_>, st: &Stmts) -> StoreResult<BudgetPeriod> {
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

    async fn settings_in(&self, c: &impl Db) -> StoreResult<Settings> {
        let rows = c
            .q("SELECT settings FROM cronsole_settings WHERE id = 1", &[])
            .await
            .map_err(|e| db_err("reading settings", e))?;
        match rows.into_iter().next() {
            Some(r) => from_json(&self.location, "cronsole_settings", r.get::<_, Value>(0)),
            None => Ok(Settings::default()),
        }
    }

    async fn apply(&self, file: JobsFile, now: DateTime<Utc>) -> StoreResult<ApplyReport> {
        plan::apply::unique_names(&file)?;
        let mut c = self.pool.get().await?;
        let st = c.stmts().await?;
        let tx = c
            .transaction()
            .await
            .map_err(|e| db_err("starting a transaction", e))?;
        let mut dirty = false;
        let stored = self.settings_in(&tx).await?;
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
        let existing = read_jobs(&tx, &self.location, None, true).await?;
        let mut by_name: BTreeMap<String, JobRecord> = existing
            .into_iter()
            .map(|r| (r.def.name.clone(), r))
            .collect();
        let (mut report, mut names) =
            plan::apply::apply_all(&file, now, &mut by_name, |r| r, |r| r)?;
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
        let changed: Vec<JobRecord> = names
            .iter()
            .filter_map(|n| by_name.get(n).cloned())
            .collect();
        report.settings = settings_changed;
        report.recounted = recounted;
        report.created.sort();
        report.updated.sort();
        report.unchanged.sort();
        if dirty || !changed.is_empty() {
            write_jobs(&tx, &st, &changed, now).await?;
            let v = bump(&tx, &st, Notify::InTransaction).await?;
            tx.commit().await.map_err(|e| db_err("committing", e))?;
            self.feed.observe(v);
        }
        Ok(report)
    }

    /// SPEC §5/§6/§7 claims in ONE transaction: due rows are locked with `FOR UPDATE SKIP
    /// LOCKED` (so concurrent owners split the due set instead of queueing behind each other),
    /// each is put through `plan::claim::evaluate` exactly as the file store does, and the claims,
    /// pre-advanced slots and rows commit together before any run starts.
    async fn claim(
        &self,
        owner: String,
        now: DateTime<Utc>,
        limit: usize,
        in_flight: Vec<String>,
    ) -> StoreResult<ClaimOutcome> {
        let mut c = self.pool.get().await?;
        let st = c.stmts().await?;
        let tx = c
            .transaction()
            .await
            .map_err(|e| db_err("starting a claim", e))?;
        // Lock only as many rows as there is capacity left: every locked row costs a WAL
        // record and hides the row from the other owners until this transaction ends.
        let want = |claimed: usize| limit.saturating_sub(claimed).clamp(1, MAX_CLAIM_BATCH);
        let mut batch = want(0);
        let mut excluded = in_flight;
        // The settings read and the first locked select are pipelined (one round trip).
        let (period, mut got) = try_join(
            self.period(&tx, &st),
            select_due(&tx, &st, now, &excluded, batch),
        )
        .await?;
        let mut rows = Vec::new();
        let mut changed: Vec<JobRecord> = Vec::new();
        let mut claims: Vec<Claim> = Vec::new();
        // Recovered runs' ends, for their `after:` children (after the loop).
        let mut ended: Vec<(crate::model::JobDef, HistoryRow)> = Vec::new();
        let mut first = true;
        loop {
            if !first {
                batch = want(claims.len());
                got = select_due(&tx, &st, now, &excluded, batch).await?;
            }
            first = false;
            let n = got.len();
            for r in std::mem::take(&mut got) {
                let mut rec: JobRecord =
                    from_json(&self.location, "cronsole_jobs", r.get::<_, Value>(0))?;
                excluded.push(rec.def.name.clone());
                let Ok(sched) = rules::slots::compile(&rec) else {
                    tracing::warn!(job = %rec.def.name, "schedule does not compile; job skipped");
                    continue;
                };
                let can = claims.len() < limit;
                let recovering = rules::runtime::expired_lease(&rec, now);
                // Crash recovery (SPEC §6) happens inside `claim_step`. The completion and the
                // lease release commit together here, so a run's row never landed without its
                // record: `landed` is always None.
                let ev = plan::claim::claim_step(&mut rec, &sched, now, &owner, can, period, None);
                if let Some(lease) = recovering
                    && let Some(end) = ev.rows.iter().find(|r| r.run_id == lease.run_id)
                {
                    ended.push((rec.def.clone(), end.clone()));
                }
                rows.extend(ev.rows);
                if let Some(p) = ev.claim {
                    claims.push(Claim {
                        run_id: p.run_id,
                        job: rec.clone(),
                        slot: p.slot,
                        trigger: p.trigger,
                        lease_until: p.lease_until,
                    });
                }
                if ev.changed {
                    changed.push(rec);
                }
            }
            if n < batch || claims.len() >= limit {
                break;
            }
        }
        for (parent, end) in &ended {
            // Children this claim already holds are updated in place (one row per job).
            policy::chain::fan_out(parent, end, changed.iter_mut());
            let held: Vec<String> = changed.iter().map(|r| r.def.name.clone()).collect();
            let more = chain_children(&tx, &self.location, parent, end).await?;
            changed.extend(more.into_iter().filter(|r| !held.contains(&r.def.name)));
        }
        if changed.is_empty() && rows.is_empty() {
            return Ok(ClaimOutcome::default());
        }
        reserve::attach_run_records(&tx, &self.location, &mut rows).await?;
        // Pipelined: history, job rows and the version bump go out in one round trip.
        self.commit_changes(
            tx,
            &st,
            &rows,
            &changed,
            now,
            Notify::AfterCommit,
            "committing claims",
        )
        .await?;
        Ok(ClaimOutcome { claims, rows })
    }

    /// Group commit: every completion of the batch in ONE transaction (one WAL flush), each
    /// fenced by its run_id as usual. Idempotent when retried: a completion whose earlier
    /// attempt committed but whose reply was lost (connection cut after `COMMIT` was sent)
    /// finds its own row in history by run_id and writes nothing again (see the module doc).
    async fn complete_batch(
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
        let (period, recs) = try_join(
            self.period(&tx, &st),
            lock_jobs(&tx, &st, &self.location, &names),
        )
        .await?;
        let mut recs: BTreeMap<String, JobRecord> =
            recs.into_iter().map(|r| (r.def.name.clone(), r)).collect();
        // A completion whose job no longer holds its lease is stale — or a retry whose first
        // attempt committed. Only those look for their row (an index probe on run_id).
        let unfenced: Vec<String> = cs
            .iter()
            .filter(|c| {
                recs.get(&c.job)
                    .is_some_and(|r| !rules::runtime::holds(r, c.run_id))
            })
            .map(|c| c.run_id.to_string())
            .collect();
        let landed: Vec<HistoryRow> = if unfenced.is_empty() {
            Vec::new()
        } else {
            tx.query(&st.run_rows, &[&unfenced])
                .await
                .map_err(|e| db_err("reading history", e))?
                .into_iter()
                .map(|r| from_json(&self.location, "cronsole_history", r.get::<_, Value>(0)))
                .collect::<StoreResult<_>>()?
        };
        let now = cs.iter().map(|c| c.now).max().unwrap_or_else(Utc::now);
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
        // batch already holds (locked above, or read for an earlier parent) are updated in
        // place, so each job is written once with every parent's end.
        let mut children: Vec<JobRecord> = Vec::new();
        for (parent, end) in &ended {
            dirty.extend(policy::chain::fan_out(parent, end, recs.values_mut()));
            policy::chain::fan_out(parent, end, children.iter_mut());
            let more = chain_children(&tx, &self.location, parent, end).await?;
            for r in more {
                if !recs.contains_key(&r.def.name)
                    && !children.iter().any(|c| c.def.name == r.def.name)
                {
                    children.push(r);
                }
            }
        }
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
        reserve::drop_run_records(&tx, &rows).await?;
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
        // History retention (SPEC §14.1 default, same as the file store): every
        // RETENTION_EVERY completions of a process, trim that job to its newest rows. A
        // failure here loses nothing and is retried next time.
        for job in &dirty {
            if self
                .completions
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(RETENTION_EVERY)
                && let Err(e) = trim_history(&*conn, job, super::file::DEFAULT_KEEP_PER_JOB).await
            {
                tracing::warn!(job = %job, "history retention failed: {e}");
            }
        }
        Ok(results)
    }
}

impl HistoryReader for PgStore {
    fn job(&self, name: &str) -> StoreResult<Option<JobRecord>> {
        let name = name.to_string();
        self.run(|inner| async move {
            let c = inner.pool.get().await?;
            Ok(read_jobs(&*c, &inner.location, Some(&name), false)
                .await?
                .pop())
        })
    }

    fn history(&self, q: &HistoryQuery) -> StoreResult<Vec<HistoryRow>> {
        Ok(self.history_keyed(q)?.into_iter().map(|(r, _)| r).collect())
    }

    /// Keyset pages: the token is the page's last row's `finished_at` and `seq`.
    fn history_page(&self, q: &HistoryQuery) -> StoreResult<HistoryPage> {
        if q.limit == 0 {
            return Ok(HistoryPage {
                rows: self.history(q)?,
                next: None,
            });
        }
        let mut rows = self.history_keyed(&HistoryQuery {
            limit: q.limit.saturating_add(1),
            ..q.clone()
        })?;
        let more = rows.len() > q.limit;
        rows.truncate(q.limit);
        let next = if more {
            rows.last()
                .map(|(_, (fin, seq))| format!("{}.{seq}", fin.timestamp_micros()))
        } else {
            None
        };
        Ok(HistoryPage {
            rows: rows.into_iter().map(|(r, _)| r).collect(),
            next,
        })
    }
}

impl PgStore {
    /// Rows of `q` with their keyset position (`finished_at`, `seq`).
    #[allow(clippy::type_complexity)]
    fn history_keyed(
        &self,
        q: &HistoryQuery,
    ) -> StoreResult<Vec<(HistoryRow, (DateTime<Utc>, i64))>> {
        let (sql, params) = history_sql(q)?;
        self.run(|inner| async move {
            let c = inner.pool.get().await?;
            let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = params
                .iter()
                .map(|p| p.as_ref() as &(dyn tokio_postgres::types::ToSql + Sync))
                .collect();
            let rows = c
                .query(&sql, &refs)
                .await
                .map_err(|e| db_err("reading history", e))?;
            rows.into_iter()
                .map(|r| {
                    let row = from_json(&inner.location, "cronsole_history", r.get::<_, Value>(0))?;
                    Ok((row, (r.get::<_, DateTime<Utc>>(1), r.get::<_, i64>(2))))
                })
                .collect()
        })
    }
}

impl Store for PgStore {
    fn location(&self) -> String {
        self.inner.location.clone()
    }

    fn apply(&self, file: &JobsFile, now: DateTime<Utc>) -> StoreResult<ApplyReport> {
        let file = file.clone();
        self.run(|inner| async move { inner.apply(file, now).await })
    }

    fn settings(&self) -> StoreResult<Settings> {
        self.run(|inner| async move {
            let c = inner.pool.get().await?;
            inner.settings_in(&*c).await
        })
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
            let c = inner.pool.get().await?;
            let row = c
                .query_one("SELECT min(wakeup) FROM cronsole_jobs", &[])
                .await
                .map_err(|e| db_err("computing the next wakeup", e))?;
            Ok(row.get::<_, Option<DateTime<Utc>>>(0))
        })
    }

    fn claim_due(&self, req: &ClaimRequest<'_>) -> StoreResult<ClaimOutcome> {
        let (owner, now, limit) = (req.owner.to_string(), req.now, req.limit);
        let in_flight = req.in_flight.to_vec();
        self.run(|inner| async move { inner.claim(owner, now, limit, in_flight).await })
    }

    fn renew(
        &self,
        job: &str,
        run_id: Uuid,
        owner: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<RenewOutcome> {
        // Fenced by run_id alone, like the file store: the owner is carried in the lease.
        let _ = owner;
        let name = job.to_string();
        self.run(|inner| async move {
            inner
                .with_job(&name.clone(), now, Notify::AfterCommit, move |rec| {
                    let Some(rec) = rec else {
                        return Err(StoreError::NoSuchJob(name));
                    };
                    Ok(match rules::runtime::renew(rec, run_id, now) {
                        Some(lease_until) => Edit::changed(RenewOutcome::Renewed { lease_until }),
                        None => Edit::unchanged(RenewOutcome::Lost),
                    })
                })
                .await
        })
    }

    fn complete(&self, c: Completion) -> StoreResult<CompleteOutcome> {
        self.complete_many(vec![c]).pop().unwrap_or_else(|| {
            Err(StoreError::Internal(
                "a completion batch of one returned no result".into(),
            ))
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
                .with_job(&name.clone(), now, Notify::InTransaction, move |rec| {
                    let Some(rec) = rec else {
                        return Err(StoreError::NoSuchJob(name));
                    };
                    let changed = policy::operator::pause_step(rec, paused, now)?;
                    Ok(if changed {
                        Edit::changed(())
                    } else {
                        Edit::unchanged(())
                    })
                })
                .await
        })
    }

    fn request_trigger(&self, name: &str, now: DateTime<Utc>) -> StoreResult<TriggerOutcome> {
        let name = name.to_string();
        self.run(|inner| async move {
            inner
                .with_job(&name.clone(), now, Notify::InTransaction, move |rec| {
                    let Some(rec) = rec else {
                        return Err(StoreError::NoSuchJob(name));
                    };
                    let (outcome, changed) = policy::operator::trigger_step(rec, now)?;
                    Ok(if changed {
                        Edit::changed(outcome)
                    } else {
                        Edit::unchanged(outcome)
                    })
                })
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
                .with_job(&name.clone(), now, Notify::InTransaction, move |rec| {
                    let Some(rec) = rec else {
                        return Err(StoreError::NoSuchJob(name));
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
                })
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
                return Err(StoreError::NoSuchJob(job));
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
        let s = reserve::OwnedStep::of(s);
        self.run(|inner| async move { inner.loop_step(s).await })
    }

    fn settle(&self, job: &str, id: Uuid, how: Settlement, now: DateTime<Utc>) -> StoreResult<()> {
        let job = job.to_string();
        self.run(move |inner| async move { inner.settle(job, id, how, now).await })
    }
}

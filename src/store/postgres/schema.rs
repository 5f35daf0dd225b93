//! The PostgreSQL store's schema and its migrations, applied on every open.
//!
//! Owns: DDL and the `cronsole_schema` version row. Must not touch: data rows (migrations that
//! need to rewrite data get their own numbered step here, inside the same transaction).
//!
//! Migrations run in order inside ONE transaction that first takes a transaction-scoped
//! advisory lock, so two owners starting at the same time serialise: the second one waits,
//! then sees the new version and does nothing. A database whose schema is newer than this
//! binary is refused with `OpenError::Version` (never "repaired").
//!
//! Layout (every table prefixed `cronsole_` so the store can share a database):
//! - `cronsole_jobs`: one row per job (a partial GIN index on `record->'def'->'after'` finds
//!   the jobs chained after one). `record` is the whole [`JobRecord`](crate::model::JobRecord)
//!   as JSONB (the single source of truth); the other columns are a projection of it, rewritten on
//!   every update, that the claim query and `next_wakeup` filter on (`wakeup` = the earliest
//!   instant `store::logic` may act on the job, computed by `crate::store::plan::claim::wakeup`; `next_slot`,
//!   `lease_until`, `run_id` as the fencing token, `paused`, `retired`, … for operators' SQL;
//!   only `wakeup` is indexed, with `name`, in the claim's order).
//! - `cronsole_settings`: one row, the jobs file's non-job settings as JSONB.
//! - `cronsole_history`: one row per history row; the history row as JSONB plus indexed columns for the
//!   console's queries: `(job, finished_at desc)`, `(status, finished_at desc)`, `run_id`, and
//!   `recovered_by` (the owner that recovered an `abandoned` run) for operators' SQL.
//! - `cronsole_run_steps`: a running tool loop's transcript entries (`run_id`, `seq`,
//!   `entry`), appended at each step and moved onto the run's row when it ends.
//! - `cronsole_store_version`: a sequence bumped (and NOTIFYed) by every mutation; the change
//!   token when the listener connection is down.
//! - `cronsole_tool_pins`: one row per pinned MCP tool, keyed `(server, tool)` (see `pins.rs`).
//! - `cronsole_store`: one row, the store id (a UUID drawn by the migration that creates the
//!   table, in the same transaction). It names the store the way a file store's `VERSION` does:
//!   `cronsole check` reports it, so an operator can tell a restored backup or a re-created
//!   database from the store the logs talk about. Unlike the file store nothing is refused on it:
//!   a database's tables cannot be mixed in from another store one by one the way files can, so
//!   there is no per-table id to compare. A missing row is reported by `check` as damage.

use crate::store::OpenError;
use tokio_postgres::Client;

use super::db::db_err;
use crate::store::{StoreError, StoreResult};

/// Arbitrary constant key for `pg_advisory_xact_lock` ("cronsole" in ASCII, truncated).
const MIGRATION_LOCK_KEY: i64 = 0x63726f6e_736f6c65;

/// The channel every mutation NOTIFYs, with the new store version as payload.
pub(crate) const CHANNEL: &str = "cronsole_changed";

/// Step N brings the schema from version N-1 to N.
const MIGRATIONS: &[&str] = &[
    // 1: initial layout
    r#"
    CREATE SEQUENCE cronsole_store_version;

    CREATE TABLE cronsole_settings (
        id        int PRIMARY KEY CHECK (id = 1),
        settings  jsonb NOT NULL
    );

    CREATE TABLE cronsole_jobs (
        name                  text PRIMARY KEY,
        record                jsonb NOT NULL,
        next_slot             timestamptz,
        lease_owner           text,
        lease_until           timestamptz,
        run_id                text,
        paused                boolean NOT NULL DEFAULT false,
        enabled               boolean NOT NULL DEFAULT true,
        retired               boolean NOT NULL DEFAULT false,
        trigger_requested_at  timestamptz,
        hold_until            timestamptz,
        recovery_pending      boolean NOT NULL DEFAULT false,
        wakeup                timestamptz,
        updated_at            timestamptz NOT NULL
    );
    CREATE INDEX cronsole_jobs_wakeup ON cronsole_jobs (wakeup, name) WHERE wakeup IS NOT NULL;
    CREATE INDEX cronsole_jobs_next_slot ON cronsole_jobs (next_slot) WHERE NOT retired;
    CREATE INDEX cronsole_jobs_lease_until ON cronsole_jobs (lease_until)
        WHERE lease_until IS NOT NULL;

    CREATE TABLE cronsole_history (
        seq          bigserial PRIMARY KEY,
        run_id       text NOT NULL,
        job          text NOT NULL,
        status       text NOT NULL,
        slot         timestamptz,
        started_at   timestamptz NOT NULL,
        finished_at  timestamptz NOT NULL,
        cost_usd     double precision NOT NULL DEFAULT 0,
        has_diff     boolean NOT NULL DEFAULT false,
        row          jsonb NOT NULL
    );
    CREATE INDEX cronsole_history_job_time ON cronsole_history (job, finished_at DESC, seq DESC);
    CREATE INDEX cronsole_history_status_time
        ON cronsole_history (status, finished_at DESC, seq DESC);
    CREATE INDEX cronsole_history_time ON cronsole_history (finished_at DESC, seq DESC);
    CREATE INDEX cronsole_history_run_id ON cronsole_history (run_id);
    "#,
    // 2: the store id (the row is inserted by `migrate`, which draws the id)
    r#"
    CREATE TABLE cronsole_store (
        id        int PRIMARY KEY CHECK (id = 1),
        store_id  text NOT NULL
    );
    "#,
    // 3: drop the indexes nothing reads through. Every claim and completion rewrites
    // `next_slot` and `lease_until`, so each index was one more entry inserted (and WAL-logged)
    // per job update; the claim reads through `cronsole_jobs_wakeup` only. The columns stay
    // for operators' SQL (a scan of one row per job).
    r#"
    DROP INDEX IF EXISTS cronsole_jobs_next_slot;
    DROP INDEX IF EXISTS cronsole_jobs_lease_until;
    "#,
    // 4: `after:` chains — a completion finds the jobs chained after its job with
    // `record->'def'->'after' @> '[{"job": NAME}]'`; without this index that is a scan of every
    // job record on every completion.
    r#"
    CREATE INDEX cronsole_jobs_after ON cronsole_jobs
        USING gin ((record->'def'->'after') jsonb_path_ops);
    "#,
    // 5: tool pins — the definition hash of each MCP tool at its first use (`pin` is the
    // whole pin as JSONB; `hash` a projection for operators' SQL).
    r#"
    CREATE TABLE cronsole_tool_pins (
        server  text NOT NULL,
        tool    text NOT NULL,
        hash    text NOT NULL,
        pin     jsonb NOT NULL,
        PRIMARY KEY (server, tool)
    );
    "#,
    // 6: running tool loops' records, one row per transcript entry (a later step's entry of
    // the same `seq` replaces it), written with each step's reservation and read into the
    // `abandoned` row when a dead owner's run is recovered; a run's rows go with its row.
    r#"
    CREATE TABLE cronsole_run_steps (
        run_id  text NOT NULL,
        seq     bigint NOT NULL,
        job     text NOT NULL,
        entry   jsonb NOT NULL,
        PRIMARY KEY (run_id, seq)
    );
    "#,
    // 7: owner records, one row per running engine, rewritten at each heartbeat: `last_seen`
    // and `clock_offset_ms` are measured on the database's clock (`record` holds the rest).
    r#"
    CREATE TABLE cronsole_owners (
        owner            text PRIMARY KEY,
        last_seen        timestamptz NOT NULL,
        clock_offset_ms  bigint NOT NULL,
        record           jsonb NOT NULL
    );
    "#,
    // 8: the `after:` index holds only the jobs that have parents, and without a pending list.
    // Every claim and completion rewrites its jobs' rows to a new version (their `wakeup`
    // changes), and each new version was one more GIN entry — a null one for a job with no
    // `after:` — queued in the index's pending list, which every completion's look-up for
    // chained children then read through: at 2 000 jobs a second that look-up took more server
    // time than the runs' own writes. A partial index is skipped by the rows it does not hold,
    // and the look-up's `@>` implies `IS NOT NULL`, so it still reads through it.
    r#"
    DROP INDEX IF EXISTS cronsole_jobs_after;
    CREATE INDEX cronsole_jobs_after ON cronsole_jobs
        USING gin ((record->'def'->'after') jsonb_path_ops)
        WITH (fastupdate = off)
        WHERE record->'def'->'after' IS NOT NULL;
    "#,
    // 9: each job's definition digest (`plan::apply::record_digest`, as a signed 64-bit
    // integer), written with its record: a re-apply compares the file's digests with these in
    // one statement and reads and writes only the jobs that differ. NULL until the record is
    // next written (a re-apply reads it whole and writes it once, with its digest).
    r#"
    ALTER TABLE cronsole_jobs ADD COLUMN def_digest bigint;
    "#,
    // 10: the owner that recovered an `abandoned` run (`recovered_by` of the history row), a
    // projection for operators' SQL like `status` and `cost_usd`. Rows written before it have
    // none in their JSON either, so it stays NULL for them.
    r#"
    ALTER TABLE cronsole_history ADD COLUMN recovered_by text;
    "#,
];

/// The migration that creates `cronsole_store` (its row is inserted with it).
const STORE_ID_STEP: i32 = 2;

/// The schema version this binary writes.
pub(crate) const LATEST: i32 = MIGRATIONS.len() as i32;

/// Whether the database holds a cronsole store (its version table), read without creating it.
pub(crate) async fn exists(client: &Client) -> StoreResult<bool> {
    let row = client
        .query_one("SELECT to_regclass('cronsole_schema') IS NOT NULL", &[])
        .await
        .map_err(|e| db_err("looking for the cronsole_schema table", e))?;
    Ok(row.get(0))
}

/// Create or migrate the schema; returns the version found before migrating (0 = empty) and
/// the store id (`None` only when its row was deleted by hand; `check` reports that).
pub(crate) async fn migrate(
    client: &mut Client,
    location: &str,
) -> StoreResult<(i32, Option<String>)> {
    let tx = client
        .transaction()
        .await
        .map_err(|e| db_err("starting the migration", e))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK_KEY])
        .await
        .map_err(|e| db_err("taking the migration lock", e))?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS cronsole_schema (
             id int PRIMARY KEY CHECK (id = 1),
             version int NOT NULL
         )",
    )
    .await
    .map_err(|e| db_err("creating cronsole_schema", e))?;
    let found: i32 = tx
        .query_opt("SELECT version FROM cronsole_schema WHERE id = 1", &[])
        .await
        .map_err(|e| db_err("reading the schema version", e))?
        .map(|r| r.get(0))
        .unwrap_or(0);
    if found > LATEST {
        return Err(StoreError::Open(OpenError::Version {
            file: format!("{location} (table cronsole_schema)").into(),
            found: found.to_string(),
            supported: format!("up to {LATEST}"),
        }));
    }
    for (i, step) in MIGRATIONS.iter().enumerate().skip(found.max(0) as usize) {
        let v = i as i32 + 1;
        tx.batch_execute(step)
            .await
            .map_err(|e| db_err(&format!("applying schema migration {v}"), e))?;
        tx.execute(
            "INSERT INTO cronsole_schema (id, version) VALUES (1, $1)
             ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version",
            &[&v],
        )
        .await
        .map_err(|e| db_err("recording the schema version", e))?;
        if v == STORE_ID_STEP {
            let id = uuid::Uuid::new_v4().to_string();
            tx.execute(
                "INSERT INTO cronsole_store (id, store_id) VALUES (1, $1)",
                &[&id],
            )
            .await
            .map_err(|e| db_err("recording the store id", e))?;
        }
    }
    let store_id = read_store_id(&tx).await?;
    tx.commit()
        .await
        .map_err(|e| db_err("committing the migration", e))?;
    Ok((found, store_id))
}

/// The store id row, if present.
pub(crate) async fn read_store_id(
    c: &impl tokio_postgres::GenericClient,
) -> StoreResult<Option<String>> {
    Ok(
        c.query_opt("SELECT store_id FROM cronsole_store WHERE id = 1", &[])
            .await
            .map_err(|e| db_err("reading the store id", e))?
            .map(|r| r.get(0)),
    )
}

//! The hot paths' SQL, prepared once per connection: the statements and their texts.
//!
//! Owns: [`Stmts`] and how it is prepared (pipelined, one round trip). Must not touch: when a
//! connection prepares them (the pool keeps them with the connection), what the rows mean.

use crate::store::BackendError;
use futures_util::future::try_join_all;
use tokio_postgres::types::Type;
use tokio_postgres::{Client, Statement};

use crate::store::{StoreError, StoreResult};

use super::db::db_err;

/// The hot paths' statements, prepared once per connection ([`pool::Conn::stmts`]) so the
/// server parses and plans each of them once per connection instead of once per call.
pub(crate) struct Stmts {
    pub(super) select_due: Statement,
    pub(super) write_jobs: Statement,
    pub(super) bump: Statement,
    pub(super) bump_notify: Statement,
    pub(super) settings: Statement,
    pub(super) append_history: Statement,
    pub(super) job_for_update: Statement,
    pub(super) jobs_for_update: Statement,
    pub(super) run_rows: Statement,
    pub(super) next_wakeup: Statement,
    pub(super) jobs_named: Statement,
}

/// `$1` is the caller's `now`, or NULL for the database's (`statement_timestamp()`: stable,
/// so the `wakeup` index serves it; nothing in a claim waits for a lock), returned with each row.
pub(super) const SELECT_DUE_SQL: &str =
    "SELECT record, COALESCE($1, statement_timestamp()) FROM cronsole_jobs
     WHERE wakeup <= COALESCE($1, statement_timestamp()) AND NOT (name = ANY($2))
     ORDER BY wakeup, name
     LIMIT $3
     FOR UPDATE SKIP LOCKED";

pub(super) const WRITE_JOBS_SQL: &str =
    "INSERT INTO cronsole_jobs AS j (name, record, next_slot, lease_owner,
         lease_until, run_id, paused, enabled, retired, trigger_requested_at, hold_until,
         recovery_pending, wakeup, updated_at, def_digest)
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
         $2,
         (e->>'digest')::bigint
     FROM jsonb_array_elements($1::jsonb) AS e, LATERAL (SELECT e->'rec' AS r) x
     ON CONFLICT (name) DO UPDATE SET
         record = EXCLUDED.record, next_slot = EXCLUDED.next_slot,
         lease_owner = EXCLUDED.lease_owner, lease_until = EXCLUDED.lease_until,
         run_id = EXCLUDED.run_id, paused = EXCLUDED.paused, enabled = EXCLUDED.enabled,
         retired = EXCLUDED.retired, trigger_requested_at = EXCLUDED.trigger_requested_at,
         hold_until = EXCLUDED.hold_until, recovery_pending = EXCLUDED.recovery_pending,
         wakeup = EXCLUDED.wakeup, updated_at = EXCLUDED.updated_at,
         def_digest = EXCLUDED.def_digest";

pub(super) const APPEND_HISTORY_SQL: &str = "INSERT INTO cronsole_history
         (run_id, job, status, slot, started_at, finished_at, cost_usd, has_diff, recovered_by, row)
     SELECT r->>'run_id', r->>'job', r->>'status', (r->>'slot')::timestamptz,
         (r->>'started_at')::timestamptz, (r->>'finished_at')::timestamptz,
         COALESCE((r->>'cost_usd')::float8, 0), (r->>'diff') IS NOT NULL, r->>'recovered_by', r
     FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS t(r, i)
     ORDER BY i";

impl Stmts {
    /// Prepare every statement on `c` (pipelined: one round trip).
    pub(super) async fn prepare(c: &Client) -> StoreResult<Stmts> {
        let list: [(&str, &[Type]); 11] = [
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
            ("SELECT min(wakeup) FROM cronsole_jobs", &[]),
            (
                "SELECT record FROM cronsole_jobs WHERE name = ANY($1)",
                &[Type::TEXT_ARRAY],
            ),
        ];
        let mut v = try_join_all(list.iter().map(|(sql, types)| c.prepare_typed(sql, types)))
            .await
            .map_err(|e| db_err("preparing statements", e))?
            .into_iter();
        let mut next = || {
            v.next().ok_or(StoreError::Backend(BackendError::Invariant(
                "preparing statements: fewer prepared than the statements named",
            )))
        };
        Ok(Stmts {
            select_due: next()?,
            write_jobs: next()?,
            bump: next()?,
            bump_notify: next()?,
            settings: next()?,
            append_history: next()?,
            job_for_update: next()?,
            jobs_for_update: next()?,
            run_rows: next()?,
            next_wakeup: next()?,
            jobs_named: next()?,
        })
    }
}

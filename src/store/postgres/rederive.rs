//! Slots decided by a database clock that has since been set back: re-derived once, by the
//! heartbeat of any owner that sees the database's clock behind the latest instant it knew.
//!
//! Owns: [`Inner::after_a_step_back`], and its twin for the caller's clock
//! ([`Inner::claimed_behind`]). Must not touch: what re-deriving does to a record
//! (`store::rules::slots::rederive`), the heartbeat's own SQL (`owners.rs`).
//!
//! A claim looks only at due jobs, and a job whose next slot a clock two days ahead decided is
//! not due for two days. Each heartbeat reads the database's clock (`clock_timestamp()` in the
//! upsert): when it is further behind the latest this handle saw (at its first heartbeat: the
//! newest heartbeat any owner's record holds) than the re-derivation tolerance, every unleased
//! job with a next slot after it, and every job retired as its `until` passed (a clock ahead
//! may have retired it), is locked (`FOR UPDATE SKIP LOCKED`), re-derived and written
//! back in one transaction. With the caller's clock (tests) the heartbeat does nothing here:
//! decisions read the caller's clock, not the database's; a claim on a clock behind the one an
//! `apply` of the same handle stored jobs on sweeps instead, as the file store's does.

use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_postgres::types::Type;

use super::clock::PgClock;
use super::db::{db_err, from_json};
use super::handle::Inner;
use super::tx::Notify;
use crate::model::JobRecord;
use crate::store::rules::reasons::RETIRED_UNTIL;
use crate::store::rules::slots::AHEAD_TOLERANCE;
use crate::store::{StoreResult, plan};

impl Inner {
    /// See the module doc. `now`: the database's clock at this heartbeat.
    pub(super) async fn after_a_step_back(&self, now: DateTime<Utc>) -> StoreResult<()> {
        if self.clock == PgClock::Caller {
            return Ok(());
        }
        let known = *self.clock_mark.lock().unwrap_or_else(|e| e.into_inner());
        let mark = match known {
            Some(m) => m,
            None => self.newest_beat().await?.unwrap_or(now),
        };
        if now + AHEAD_TOLERANCE >= mark {
            *self.clock_mark.lock().unwrap_or_else(|e| e.into_inner()) = Some(mark.max(now));
            return Ok(());
        }
        tracing::warn!(
            "the database's clock is {} behind the latest this store was used at: re-deriving \
             every job's slots from {}",
            crate::clock::step_words(mark - now).trim_start_matches('+'),
            now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        );
        self.rederive_all(now).await
    }

    /// Jobs were stored on the caller's clock at `now` (an apply, with [`PgClock::Caller`]):
    /// a later claim on a clock behind it re-derives every job ([`Inner::claimed_behind`]).
    pub(super) fn stored_on(&self, now: DateTime<Utc>) {
        if self.clock == PgClock::Caller {
            let mut mark = self.clock_mark.lock().unwrap_or_else(|e| e.into_inner());
            *mark = Some(mark.map_or(now, |m| m.max(now)));
        }
    }

    /// With the caller's clock, a claim whose `now` is further behind the latest clock this
    /// handle stored jobs on than the tolerance re-derives every job first, as a file store's
    /// claim does: those jobs' slots lie ahead, and no claim would look at them.
    pub(super) async fn claimed_behind(&self, now: DateTime<Utc>) -> StoreResult<()> {
        if self.clock != PgClock::Caller {
            return Ok(());
        }
        let known = *self.clock_mark.lock().unwrap_or_else(|e| e.into_inner());
        if known.is_none_or(|m| now + AHEAD_TOLERANCE >= m) {
            return Ok(());
        }
        tracing::warn!(
            "the clock is behind the latest a command stored jobs on: re-deriving every job's \
             slots from {}",
            now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        );
        self.rederive_all(now).await
    }

    /// Every unleased job with a next slot after `now`, and every job retired as its `until`
    /// passed, re-derived from `now` in one transaction.
    async fn rederive_all(&self, now: DateTime<Utc>) -> StoreResult<()> {
        let mut c = self.pool.get().await?;
        let st = c.stmts().await?;
        let tx = c
            .transaction()
            .await
            .map_err(|e| db_err("starting a re-derivation", e))?;
        let rows = tx
            .query_typed(
                "SELECT record FROM cronsole_jobs
                 WHERE lease_owner IS NULL
                   AND ((NOT retired AND next_slot > $1)
                        OR (retired AND record->'rt'->>'retired_reason' = $2))
                 FOR UPDATE SKIP LOCKED",
                &[(&now, Type::TIMESTAMPTZ), (&RETIRED_UNTIL, Type::TEXT)],
            )
            .await
            .map_err(|e| db_err("reading jobs to re-derive", e))?;
        let mut changed: Vec<JobRecord> = Vec::new();
        for r in rows {
            let mut rec: JobRecord =
                from_json(&self.location, "cronsole_jobs", r.get::<_, Value>(0))?;
            if plan::claim::rederive_logged(&mut rec, now) {
                changed.push(rec);
            }
        }
        if changed.is_empty() {
            drop(tx);
        } else {
            self.commit_changes(
                tx,
                &st,
                &[],
                &changed,
                now,
                Notify::AfterCommit,
                "re-deriving slots",
            )
            .await?;
        }
        *self.clock_mark.lock().unwrap_or_else(|e| e.into_inner()) = Some(now);
        Ok(())
    }

    /// The newest heartbeat in any owner's record (the database's clock then).
    async fn newest_beat(&self) -> StoreResult<Option<DateTime<Utc>>> {
        let c = self.pool.get().await?;
        let row = c
            .query_one("SELECT max(last_seen) FROM cronsole_owners", &[])
            .await
            .map_err(|e| db_err("reading the owners' heartbeats", e))?;
        Ok(row.get(0))
    }
}

//! Budget reservations on PostgreSQL (SPEC §11 hard limit): the SQL around the pure decisions of
//! `store::budget`.
//!
//! Owns: the reserve transaction (an advisory transaction lock serialises reservations across
//! every owner and host; the requesting job's row is locked `FOR UPDATE` so claims and
//! completions of that job wait for it) and the settle transaction (one row lock). Must not
//! touch: the decisions themselves (`store::budget`).
//!
//! Why only reservations take the advisory lock: completions and settlements never raise the
//! committed total (a completion moves a settled amount from a reservation into the counters in
//! one row write; a settlement only lowers or keeps an amount), so they cannot push a concurrent
//! decision over a limit. Two reservations are the only race, and the lock orders them.

use chrono::{DateTime, Utc};
use tokio_postgres::types::Type;
use uuid::Uuid;

use super::{Inner, bump, db_err, read_jobs, write_jobs};
use crate::store::budget::{self, ReserveOutcome, ReserveRequest, Settlement};
use crate::store::{StoreError, StoreResult};

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
        let mut mine = read_jobs(&tx, &self.location, Some(&job), true).await?;
        let settings = self.settings_in(&tx).await?;
        let all = read_jobs(&tx, &self.location, None, false).await?;
        let req = ReserveRequest {
            job: &job,
            run_id,
            owner: &owner,
            usd,
            now,
        };
        // The locked copy of our own row replaces the unlocked one (same snapshot rule).
        let others = all.iter().filter(|r| r.def.name != job);
        let key = match budget::decide(&settings, others.chain(mine.iter()), &req)? {
            Ok(key) => key,
            Err(reason) => return Ok(ReserveOutcome::Refused { reason }),
        };
        let Some(rec) = mine.first_mut() else {
            return Err(StoreError::NoSuchJob(job));
        };
        let id = budget::record(rec, &req, key);
        write_jobs(&tx, &mine, now).await?;
        let v = bump(&tx).await?;
        tx.commit()
            .await
            .map_err(|e| db_err("committing a budget reservation", e))?;
        self.feed.observe(v);
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
        self.with_job(&name, now, move |rec| {
            let Some(rec) = rec else {
                return Err(StoreError::NoSuchJob(job));
            };
            Ok(if budget::settle(rec, id, how) {
                super::Edit::changed(())
            } else {
                super::Edit::unchanged(())
            })
        })
        .await
    }
}

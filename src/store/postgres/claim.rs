//! Claims on PostgreSQL: due rows locked with `FOR UPDATE SKIP LOCKED` (at most as many as the
//! claim has room for), each evaluated by the claim plan, and the rows, records and version
//! bump committed in one transaction.
//!
//! Owns: `Inner::claim`. Must not touch: what a claim decides for one job (`plan::claim`).

use chrono::{DateTime, Utc};
use futures_util::future::try_join;
use serde_json::Value;

use crate::model::{HistoryRow, JobRecord};
use crate::store::{Claim, ClaimOutcome, StoreResult};
use crate::store::{plan, policy, rules};

use super::clock::PgClock;
use super::db::{db_err, from_json};
use super::handle::Inner;
use super::tx::{MAX_CLAIM_BATCH, Notify, chain_children, select_due};

impl Inner {
    /// Misfire, recovery, retirement and claims in ONE transaction: due rows are locked with `FOR UPDATE SKIP
    /// LOCKED` (so concurrent owners split the due set instead of queueing behind each other),
    /// each is put through `plan::claim::evaluate` exactly as the file store does, and the claims,
    /// pre-advanced slots and rows commit together before any run starts.
    pub(super) async fn claim(
        &self,
        owner: String,
        now: DateTime<Utc>,
        limit: usize,
        in_flight: Vec<String>,
        bound: Option<(std::time::Duration, std::time::Instant)>,
    ) -> StoreResult<ClaimOutcome> {
        self.claimed_behind(now).await?;
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
        // With the database's clock the first select reads it and every later step (and
        // select) uses that same instant (see `clock`).
        let given = now;
        let (period, mut got) = try_join(
            self.period(&tx, &st),
            select_due(&tx, &st, self.clock.given(now), &excluded, batch),
        )
        .await?;
        let now = match got.first() {
            Some(r) => r
                .try_get::<_, DateTime<Utc>>(1)
                .map_err(|e| db_err("reading the database's clock", e))?,
            None => now,
        };
        // An owner this far from the database's clock could not keep the leases it would be
        // given (renewed on its own clock's pace): nothing is claimed, and it is told why.
        if self.clock == PgClock::Database
            && let Some((b, asked)) = bound
            && let Some(why) = super::clock::beyond_bound(now, given, asked.elapsed(), b)
        {
            drop(tx);
            return Ok(ClaimOutcome {
                refused: Some(why),
                ..ClaimOutcome::default()
            });
        }
        let mut rows = Vec::new();
        let mut changed: Vec<JobRecord> = Vec::new();
        let mut claims: Vec<Claim> = Vec::new();
        // Recovered runs' ends, for their `after:` children (after the loop).
        let mut ended: Vec<(crate::model::JobDef, HistoryRow)> = Vec::new();
        let mut first = true;
        loop {
            if !first {
                batch = want(claims.len());
                got = select_due(&tx, &st, Some(now), &excluded, batch).await?;
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
                // Crash recovery happens inside `claim_step`. The completion and the
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
        }
        let held: std::collections::HashSet<String> =
            changed.iter().map(|r| r.def.name.clone()).collect();
        let more = chain_children(&tx, &self.location, &ended, |n| held.contains(n)).await?;
        changed.extend(more);
        if changed.is_empty() && rows.is_empty() {
            return Ok(ClaimOutcome::default());
        }
        super::reserve::attach_run_records(&tx, &self.location, &mut rows).await?;
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
        Ok(ClaimOutcome {
            claims,
            rows,
            refused: None,
        })
    }
}

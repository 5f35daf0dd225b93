//! Claiming: one claim cycle asks the store for what is due (up to the free run capacity) and
//! starts a run task per claim.
//!
//! Jobs this owner runs are hidden from its own claims, except under an `overlap:` policy that
//! acts while a run is live (`allow`, `cancel_previous`): the store then looks at them but never
//! recovers this owner's own leases of them.
//!
//! Owns: the claim request and the start of run tasks. Must not touch: what a claim decides
//! (the store owns that), what a failed claim means (`outage`).

use std::sync::Arc;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::actor::{Actor, Finished, InFlight, Turn};
use super::task::RunTask;
use super::{Event, blocking, spool};
use crate::model::Settings;
use crate::store::{Claim, ClaimRequest};

impl Actor {
    /// One claim cycle and what follows it: the next wake-up, backed off while the store fails.
    /// False when the engine must stop (the claim found the store damaged).
    pub(super) async fn claim_cycle(
        &mut self,
        runs: &mut JoinSet<Finished>,
        turn: &mut Turn,
    ) -> bool {
        let progressed = self.claim(runs).await;
        self.heartbeat.count_claim_cycle();
        if self.damaged.is_some() {
            return false;
        }
        turn.dirty = true;
        turn.wake = self.next_wake().await;
        let now = self.now();
        if let Some(at) = self.outage_retry_at(now) {
            turn.wake = Some(at);
        } else if !progressed && turn.wake.is_some_and(|w| w <= now) {
            // The store may report something due that this owner cannot take (its own run past
            // its lease, a job another owner is finishing): do not spin on it.
            turn.wake = Some(
                now + chrono::Duration::from_std(self.cfg.change_poll)
                    .unwrap_or(chrono::Duration::milliseconds(250)),
            );
        }
        true
    }

    /// Claim and start what is due. True when the claim started a run or wrote a row.
    pub(super) async fn claim(&mut self, runs: &mut JoinSet<Finished>) -> bool {
        let limit = self.free_capacity();
        if limit == 0 || self.shutdown.is_cancelled() || self.claims_stopped() {
            return false;
        }
        let now = self.now();
        let owner = self.cfg.owner.clone();
        let mut in_flight: Vec<String> = self
            .in_flight
            .values()
            .filter(|f| !f.overlap.acts_while_running())
            .map(|f| f.job.clone())
            .collect();
        in_flight.sort();
        in_flight.dedup();
        // The settings the claimed runs use are read once per claim, in the same hand-off to
        // the blocking pool: a store lock and a hand-off per run cost a tenth of a 10 000-run
        // burst's engine CPU. A failed read is not the claim's failure: each run then reads
        // them itself, with its own retries (`run::execute`).
        let outcome = blocking(&self.store, move |s| {
            let outcome = s.claim_due(&ClaimRequest {
                now,
                owner: &owner,
                limit,
                in_flight: &in_flight,
            })?;
            let settings = if outcome.claims.is_empty() {
                None
            } else {
                s.settings().ok().map(Arc::new)
            };
            Ok((outcome, settings))
        })
        .await;
        let (outcome, settings) = match outcome {
            Ok(o) => {
                self.claim_answered();
                o
            }
            Err(e) => {
                self.claim_failed(now, e);
                return false;
            }
        };
        let progressed = !outcome.claims.is_empty() || !outcome.rows.is_empty();
        tracing::debug!(owner = %self.cfg.owner, claimed = outcome.claims.len(), rows = outcome.rows.len(), limit, "claim");
        for r in outcome.rows {
            let _ = self.ev_tx.send(Event::Row(r));
        }
        for claim in outcome.claims {
            self.start_run(runs, claim, settings.clone());
        }
        progressed
    }

    /// Start the run task of one claim and remember it as in flight.
    fn start_run(
        &mut self,
        runs: &mut JoinSet<Finished>,
        claim: Claim,
        settings: Option<Arc<Settings>>,
    ) {
        let job = claim.job.def.name.clone();
        // Not a child of `shutdown`: a graceful shutdown must let runs finish within the
        // grace; `shutdown_runs` cancels this token at grace expiry or on a hard stop.
        let cancel = CancellationToken::new();
        let op_cancel = CancellationToken::new();
        let run_id = claim.run_id;
        self.in_flight.insert(
            run_id,
            InFlight {
                job: job.clone(),
                overlap: claim.job.def.overlap,
                cancel: cancel.clone(),
                op_cancel: op_cancel.clone(),
                task: None,
            },
        );
        let _ = self.ev_tx.send(Event::RunStarted {
            job,
            run_id: claim.run_id,
            trigger: claim.trigger,
            slot: claim.slot,
        });
        let ctx = RunTask {
            store: Arc::clone(&self.store),
            clock: Arc::clone(&self.clock),
            deps: Arc::clone(&self.deps),
            owner: self.cfg.owner.clone(),
            ev_tx: self.ev_tx.clone(),
            completions: self.completions.clone(),
            health: Arc::clone(&self.health),
            unwritten: Arc::clone(&self.unwritten),
            spool: self.cfg.spool.clone().map(spool::Spool::new),
            settings,
        };
        let handle = runs.spawn(ctx.run(claim, cancel, op_cancel));
        if let Some(f) = self.in_flight.get_mut(&run_id) {
            f.task = Some(handle.id());
        }
    }
}

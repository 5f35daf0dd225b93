//! The engine's stop: stop claiming, wait up to `shutdown_grace` for in-flight runs, then cancel
//! them.
//!
//! A cancelled run is completed as `abandoned` with reason `shutdown`, which the store treats
//! like a crash. A second shutdown request cancels at once. Each run has its own cancellation
//! token (not a child of `shutdown`), so a graceful shutdown really lets runs finish. Once the
//! grace has passed after a shutdown request (or at a second one), the store is told to hurry
//! ([`Store::hurry`]): a wait for a lock another process holds ends within about a second, so a
//! stop is never held by an outside lock holder.
//!
//! Owns: the grace, the hurry, and the engine's final result (damage, or completions left
//! unwritten). Must not touch: the UI.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::actor::{Actor, Finished};
use super::{EngineError, Event};
use crate::store::Store;

/// Once the stop has waited long enough — a second signal (hard stop), or the shutdown grace
/// after the first — tell the store to stop waiting long for a lock another process holds
/// ([`Store::hurry`]): a claim or completion stuck behind it then fails within about a second,
/// the actor reaches its shutdown, and what is unwritten is spooled (the run exits 1 naming
/// the spool) instead of the process waiting out the holder.
pub(super) async fn hurry_at_stop(
    store: Arc<dyn Store>,
    shutdown: CancellationToken,
    hard_stop: CancellationToken,
    grace: StdDuration,
) {
    tokio::select! {
        _ = hard_stop.cancelled() => {}
        _ = async {
            shutdown.cancelled().await;
            tokio::time::sleep(grace).await;
        } => {}
    }
    tracing::info!("stopping: store lock waits now end within a second");
    store.hurry(true);
}

impl Actor {
    /// Wait for the runs in flight, up to the grace (or a hard stop), then cancel them.
    pub(super) async fn shutdown_runs(&mut self, mut runs: JoinSet<Finished>) {
        if runs.is_empty() {
            return;
        }
        let _ = self.ev_tx.send(Event::Notice(format!(
            "shutting down: waiting up to {}s for {} run(s)",
            self.cfg.shutdown_grace.as_secs(),
            runs.len()
        )));
        let grace = tokio::time::sleep(self.cfg.shutdown_grace);
        tokio::pin!(grace);
        let mut cancelled = false;
        loop {
            tokio::select! {
                done = runs.join_next() => match done {
                    None => break,
                    Some(Ok(f)) => {
                        self.in_flight.remove(&f.run_id);
                        for r in f.rows { let _ = self.ev_tx.send(Event::Row(r)); }
                    }
                    Some(Err(e)) => self.reap_failed(&e),
                },
                _ = hard_or_grace(&mut grace, &self.hard_stop), if !cancelled => {
                    cancelled = true;
                    for f in self.in_flight.values() {
                        tracing::info!(job = %f.job, "cancelling run at shutdown");
                        f.cancel.cancel();
                    }
                }
            }
        }
    }

    /// The engine's result once its runs ended: the damage that stopped it, or the completions
    /// it could not write (spooled, or lost and printed by the binary).
    pub(super) fn stop_result(&mut self) -> Result<(), EngineError> {
        let (spooled, lost) = match self.unwritten.lock() {
            Ok(mut u) => (u.spooled, std::mem::take(&mut u.lost)),
            Err(_) => (0, Vec::new()),
        };
        // Completions that could not even be spooled go first (the binary prints them);
        // otherwise the damage is the reason to stop (spooled ones are in the log).
        if let Some(e) = self.damaged.take()
            && lost.is_empty()
        {
            if spooled > 0 {
                tracing::warn!(
                    spooled,
                    "completions kept in the spool at the stop on damage"
                );
            }
            return Err(EngineError::Store(e));
        }
        if spooled > 0 || !lost.is_empty() {
            return Err(EngineError::Unwritten {
                spooled,
                spool: self.cfg.spool.clone(),
                lost,
            });
        }
        Ok(())
    }
}

async fn hard_or_grace(
    grace: &mut std::pin::Pin<&mut tokio::time::Sleep>,
    hard: &CancellationToken,
) {
    tokio::select! {
        _ = grace.as_mut() => {}
        _ = hard.cancelled() => {}
    }
}

//! Lease renewal of one run: every third of the lease the store last granted (at most a third
//! of the lease at the claim: the store's clock may not be this owner's), so a definition
//! whose `lease_seconds` changes under a running job follows the store's answer.
//!
//! Owns: the renewal timer of one run. Must not touch: the run's pipeline or its completion.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use tokio::sync::broadcast;
use uuid::Uuid;

use super::api::Event;
use super::error::blocking;
use super::outage::{Health, store_failed, store_ok};
use crate::clock::Clock;
use crate::store::{RenewOutcome, Store};

/// What a renewal needs of its run task: the store, the time, and where the store's health is
/// reported.
pub(super) struct Holder<'a> {
    pub(super) store: &'a Arc<dyn Store>,
    pub(super) clock: &'a Arc<dyn Clock>,
    pub(super) health: &'a Health,
    pub(super) ev_tx: &'a broadcast::Sender<Event>,
}

/// Lease renewal of one run, every third of the lease the store last granted.
pub(super) struct Renewer {
    pub(super) job: String,
    pub(super) run_id: Uuid,
    pub(super) first: StdDuration,
    pub(super) next: tokio::time::Instant,
}

impl Renewer {
    /// Renew now; the next renewal is due at [`Renewer::next`].
    pub(super) async fn renew(&mut self, t: &Holder<'_>) {
        let now = t.clock.now();
        let (j, run_id) = (self.job.clone(), self.run_id);
        self.next = match blocking(t.store, move |s| s.renew(&j, run_id, now)).await {
            Ok(RenewOutcome::Renewed { lease_until }) => {
                store_ok(t.health, t.ev_tx, now);
                // The lease's end is on the store's clock (the database's, on PostgreSQL), which
                // may disagree with this owner's: a third of what is left by our clock, but
                // never more than a third of the lease the definition grants (our clock behind
                // would stretch it past the lease) and never zero (ahead, it would spin).
                let left = (lease_until - now).to_std().unwrap_or(StdDuration::ZERO) / 3;
                let every = if left.is_zero() || left > self.first {
                    self.first
                } else {
                    left
                };
                tokio::time::Instant::now() + every.max(StdDuration::from_millis(10))
            }
            Ok(RenewOutcome::Lost) => {
                tracing::warn!(job = %self.job, %run_id, "lease lost; the result will be recorded as stale");
                tokio::time::Instant::now() + StdDuration::from_secs(86_400)
            }
            Err(e) => {
                store_failed(t.health, t.ev_tx, now, &e);
                tracing::warn!(job = %self.job, error = %e, "lease renewal failed; retrying");
                tokio::time::Instant::now() + self.first.min(StdDuration::from_secs(1))
            }
        };
    }
}

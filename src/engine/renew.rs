//! Lease renewal of one run: every third of the lease the store last granted (at most a third
//! of the lease at the claim: the store's clock may not be this owner's), so a definition
//! whose `lease_seconds` changes under a running job follows the store's answer.
//!
//! A renewal extends the lease from the later of this owner's clock and the store's as its
//! last heartbeat measured it ([`lease_clock`]), so an owner whose clock is behind never
//! writes a lease that has already ended for the others.
//!
//! Owns: the renewal timer of one run. Must not touch: the run's pipeline or its completion.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Utc};
use tokio::sync::broadcast;
use uuid::Uuid;

use super::api::Event;
use super::error::blocking;
use super::outage::{Health, store_failed, store_ok};
use crate::clock::{Clock, Reading};
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
        let at = Reading::of(t.clock.as_ref());
        let now = lease_clock(t.health, at);
        let (j, run_id) = (self.job.clone(), self.run_id);
        self.next = match blocking(t.store, move |s| s.renew(&j, run_id, now)).await {
            Ok(RenewOutcome::Renewed { lease_until }) => {
                store_ok(t.health, t.ev_tx, at);
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
                store_failed(t.health, t.ev_tx, at, &e);
                tracing::warn!(job = %self.job, error = %e, "lease renewal failed; retrying");
                tokio::time::Instant::now() + self.first.min(StdDuration::from_secs(1))
            }
        };
    }
}

/// The instant a renewal extends the lease from: this owner's wall clock, or the store's clock
/// as the last heartbeat measured it, carried forward on the monotonic clock, when that is
/// later. A store that judges leases on its own clock (PostgreSQL) ignores it. On the file
/// store, whose owners judge leases on their own clocks, an owner whose clock fell behind the
/// store's by more than a lease (stepped back mid-run, or faked) would otherwise write leases
/// that have already ended for everyone else, and another owner would recover a run that is
/// still going: a one-shot would run twice. Later is safe: a lease too long only delays the
/// recovery of an owner that dies, and the next heartbeat's reading corrects it.
fn lease_clock(health: &Health, at: Reading) -> DateTime<Utc> {
    health
        .store_now(at.mono)
        .map_or(at.wall, |store| store.max(at.wall))
}

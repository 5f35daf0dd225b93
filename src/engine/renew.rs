//! Lease renewal of one run: every third of the lease the store last granted (at most a third
//! of the lease at the claim: the store's clock may not be this owner's), so a definition
//! whose `lease_seconds` changes under a running job follows the store's answer.
//!
//! A renewal extends the lease from the later of this owner's clock and the store's as its
//! last heartbeat measured it ([`lease_clock`]), so an owner whose clock is behind never
//! writes a lease that has already ended for the others.
//!
//! A renewal that cannot reach the store does not keep the run going past its lease: once three
//! quarters of the lease have passed, on this owner's monotonic clock, since the last renewal
//! the store took (or the claim), the run is told to stop ([`Lease::Ending`]). Another owner
//! recovers a lease that ended as soon as the store answers again, and a run still going here
//! would then run beside its recovery: a one-shot would run twice at once.
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

/// Whether the run may go on after a renewal attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lease {
    /// Renewed, lost (the completion is then recorded stale), or not yet renewed with time
    /// left: the run goes on.
    Held,
    /// The store has not taken a renewal for three quarters of the lease: the run must stop
    /// now, before another owner may recover it.
    Ending,
}

/// The part of a lease a run may use without a renewal the store took; the rest is the margin
/// for stopping the run's processes before the lease ends for every other owner.
const USABLE_SHARE: f64 = 0.75;

/// Lease renewal of one run, every third of the lease the store last granted.
pub(super) struct Renewer {
    pub(super) job: String,
    pub(super) run_id: Uuid,
    pub(super) first: StdDuration,
    pub(super) next: tokio::time::Instant,
    /// The lease the claim granted.
    pub(super) lease: StdDuration,
    /// When the run must stop unless a renewal is taken first (see the module doc).
    pub(super) stop_at: tokio::time::Instant,
}

impl Renewer {
    /// A renewer for a run whose claim the store granted `lease` at about `claimed` (when the
    /// claim was asked for, on the monotonic clock).
    pub(super) fn new(
        job: String,
        run_id: Uuid,
        lease: StdDuration,
        claimed: tokio::time::Instant,
    ) -> Self {
        let first = (lease / 3).max(StdDuration::from_millis(1));
        Renewer {
            job,
            run_id,
            first,
            next: tokio::time::Instant::now() + first,
            lease,
            stop_at: claimed + lease.mul_f64(USABLE_SHARE),
        }
    }

    /// Renew now; the next renewal is due at [`Renewer::next`].
    pub(super) async fn renew(&mut self, t: &Holder<'_>) -> Lease {
        let at = Reading::of(t.clock.as_ref());
        let asked = tokio::time::Instant::now();
        let now = lease_clock(t.health, at);
        let (j, run_id) = (self.job.clone(), self.run_id);
        // A store that hangs is waited on only until the run must stop. Past that instant (an
        // owner continued after a stop, its timers all due at once) the store's answer is
        // awaited: a slow answer is not a refusal, and the lease may still be this owner's.
        let call = blocking(t.store, move |s| s.renew(&j, run_id, now));
        let answer = if asked < self.stop_at {
            tokio::time::timeout_at(self.stop_at, call)
                .await
                .unwrap_or_else(|_| {
                    Err(super::error::EngineError::from(
                        crate::store::StoreError::Backend(crate::store::BackendError::Unavailable(
                            "the lease renewal got no answer in time".into(),
                        )),
                    ))
                })
        } else {
            call.await
        };
        self.next = match answer {
            Ok(RenewOutcome::Renewed { lease_until }) => {
                store_ok(t.health, t.ev_tx, at);
                // The lease granted is the definition's, which `apply` may have shortened under
                // the run: never count on more than the store's answer says (an owner ahead of
                // the store's clock reads less, which only stops the run earlier).
                let granted = (lease_until - now)
                    .to_std()
                    .ok()
                    .filter(|d| !d.is_zero())
                    .map_or(self.lease, |d| d.min(self.lease));
                self.stop_at = asked + granted.mul_f64(USABLE_SHARE);
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
                self.stop_at = tokio::time::Instant::now() + StdDuration::from_secs(86_400 * 365);
                tokio::time::Instant::now() + StdDuration::from_secs(86_400)
            }
            Err(e) => {
                store_failed(t.health, t.ev_tx, at, &e);
                if tokio::time::Instant::now() >= self.stop_at {
                    // Said once: the run stops now, and a completion still waiting for the store
                    // asks for no more renewals of a lease it no longer counts on.
                    self.next = tokio::time::Instant::now() + StdDuration::from_secs(86_400);
                    self.stop_at = self.next;
                    tracing::error!(job = %self.job, %run_id, error = %e, "lease renewal failed until the lease was nearly over; stopping the run so that no other owner recovers it while it still runs");
                    return Lease::Ending;
                }
                tracing::warn!(job = %self.job, error = %e, "lease renewal failed; retrying");
                // Asked again within a second, and once more right at the instant the run must
                // stop, so a store back by then keeps the run going.
                (tokio::time::Instant::now() + self.first.min(StdDuration::from_secs(1)))
                    .min(self.stop_at)
            }
        };
        Lease::Held
    }
}

/// The reason on the row of a run stopped because its lease could not be renewed.
pub(super) const REASON_LEASE_UNRENEWED: &str = "the store took no lease renewal for three quarters of the lease; stopped so that no other owner recovers the run while it still runs";

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

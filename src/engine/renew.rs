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
//! A renewal is a future of its own ([`Renewer::ask`]), polled beside the run's pipeline: a
//! store slow to answer never pauses the pipeline, whose heartbeats to the run's supervisors
//! must go on (their dead-man switch would otherwise kill the run at half the lease as if this
//! owner had hung, and the run would be recorded `failed` instead of stopped here). The
//! renewals of every run of this owner that are waiting together go to the store as one batch
//! ([`renewer`], [`Store::renew_many`]): a burst of runs costs one store write per round, not
//! one each, so the renewals of hundreds of runs are answered within their leases.
//!
//! Owns: the renewal timer of one run and the owner's renewal batcher. Must not touch: the
//! run's pipeline or its completion.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Utc};
use tokio::sync::{broadcast, mpsc, oneshot};
use uuid::Uuid;

use super::api::Event;
use super::error::{EngineError, blocking};
use super::outage::{Health, store_failed, store_ok};
use crate::clock::{Clock, Reading};
use crate::store::{RenewOutcome, Renewal, Store};

/// A renewal waiting for the batcher, and where its answer goes.
type RenewalJob = (Renewal, oneshot::Sender<Result<RenewOutcome, EngineError>>);

/// Where a run task hands its renewals to the owner's batcher.
pub(super) type RenewalTx = mpsc::Sender<RenewalJob>;

/// Batches the store may be answering at once: a batch stuck on one dead connection (a
/// database pool's) holds up only the renewals in it, while those waiting meanwhile still
/// coalesce into the next batch.
const BATCHES_IN_FLIGHT: usize = 4;

/// The owner's renewal batcher: takes every renewal already waiting and hands them to the store
/// in one `renew_many` (the file store writes them with one fsync), with at most
/// [`BATCHES_IN_FLIGHT`] batches at the store. Renewals whose run stopped waiting (it gave up
/// on the answer) are left out.
pub(super) async fn renewer(store: Arc<dyn Store>, mut rx: mpsc::Receiver<RenewalJob>) {
    const MAX_BATCH: usize = 1024;
    let slots = Arc::new(tokio::sync::Semaphore::new(BATCHES_IN_FLIGHT));
    while let Some(first) = rx.recv().await {
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(more) => batch.push(more),
                Err(_) => break,
            }
        }
        batch.retain(|(_, tx)| !tx.is_closed());
        if batch.is_empty() {
            continue;
        }
        let (rs, replies): (Vec<Renewal>, Vec<_>) = batch.into_iter().unzip();
        let st = Arc::clone(&store);
        tokio::spawn(async move {
            let answered = tokio::task::spawn_blocking(move || st.renew_many(&rs)).await;
            drop(slot);
            match answered {
                Ok(answers) => {
                    let mut answers = answers.into_iter();
                    for tx in replies {
                        let a = answers.next().unwrap_or_else(|| {
                            Err(crate::store::StoreError::Backend(
                                crate::store::BackendError::NoResult("a renewal"),
                            ))
                        });
                        let _ = tx.send(a.map_err(EngineError::from));
                    }
                }
                Err(e) => {
                    for tx in replies {
                        let _ = tx.send(Err(EngineError::Join(e.to_string())));
                    }
                }
            }
        });
    }
}

/// Renew through the batcher (a direct call if it is gone).
async fn renew_via(
    store: Arc<dyn Store>,
    renewals: RenewalTx,
    r: Renewal,
) -> Result<RenewOutcome, EngineError> {
    let (tx, rx) = oneshot::channel();
    match renewals.send((r, tx)).await {
        Ok(()) => rx
            .await
            .unwrap_or_else(|_| Err(EngineError::Join("renewal batcher stopped".into()))),
        Err(mpsc::error::SendError((r, _))) => {
            blocking(&store, move |s| s.renew(&r.job, r.run_id, r.now)).await
        }
    }
}

/// What a renewal needs of its run task: the store, the time, and where the store's health is
/// reported.
pub(super) struct Holder<'a> {
    pub(super) store: &'a Arc<dyn Store>,
    pub(super) renewals: &'a RenewalTx,
    pub(super) clock: &'a Arc<dyn Clock>,
    pub(super) health: &'a Health,
    pub(super) ev_tx: &'a broadcast::Sender<Event>,
}

/// A renewal's answer with what its asking saw ([`Renewer::ask`], [`Renewer::settle`]).
pub(super) struct Asked {
    at: Reading,
    asked: tokio::time::Instant,
    now: DateTime<Utc>,
    answer: Result<RenewOutcome, EngineError>,
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
    /// When the lease ends on this owner's monotonic clock (the last renewal taken, or the
    /// claim, plus the lease granted then).
    lease_end: tokio::time::Instant,
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
            lease_end: claimed + lease,
        }
    }

    /// Renew now and settle the answer; the next renewal is due at [`Renewer::next`]. For a
    /// caller with nothing to poll beside the renewal (a completion waiting for the store).
    pub(super) async fn renew(&mut self, t: &Holder<'_>) -> Lease {
        let asked = self.ask(t).await;
        self.settle(asked, t)
    }

    /// The renewal due now, as a future that holds what it needs (the run task polls it beside
    /// its pipeline); [`Renewer::settle`] takes its answer.
    ///
    /// The store is waited on only until the run must stop. A renewal asked when the whole
    /// lease has already passed on this owner's clock (an owner continued after a stop, or
    /// starved that long: its timers all due at once) waits for the store's answer for another
    /// three quarters of the lease instead: stopping now protects no one (the lease has ended
    /// for the others already), the lease may still be this owner's, and a slow answer is not
    /// a refusal.
    pub(super) fn ask(&mut self, t: &Holder<'_>) -> impl Future<Output = Asked> + Send + 'static {
        let at = Reading::of(t.clock.as_ref());
        let asked = tokio::time::Instant::now();
        let now = lease_clock(t.health, at);
        if asked >= self.lease_end {
            self.stop_at = asked + self.lease.mul_f64(USABLE_SHARE);
            self.lease_end = asked + self.lease;
        }
        let r = Renewal {
            job: self.job.clone(),
            run_id: self.run_id,
            now,
        };
        let call = renew_via(Arc::clone(t.store), t.renewals.clone(), r);
        let deadline = self.stop_at;
        async move {
            let answer = tokio::time::timeout_at(deadline, call)
                .await
                .unwrap_or_else(|_| {
                    Err(EngineError::from(crate::store::StoreError::Backend(
                        crate::store::BackendError::Unavailable(
                            "the lease renewal got no answer in time".into(),
                        ),
                    )))
                });
            Asked {
                at,
                asked,
                now,
                answer,
            }
        }
    }

    /// What a renewal's answer means for the run; the next renewal is due at
    /// [`Renewer::next`].
    pub(super) fn settle(&mut self, a: Asked, t: &Holder<'_>) -> Lease {
        let Asked {
            at,
            asked,
            now,
            answer,
        } = a;
        let run_id = self.run_id;
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
                self.lease_end = asked + granted;
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
                self.lease_end = self.stop_at;
                tokio::time::Instant::now() + StdDuration::from_secs(86_400)
            }
            Err(e) => {
                store_failed(t.health, t.ev_tx, at, &e);
                if tokio::time::Instant::now() >= self.lease_end {
                    // The whole lease passed while this renewal waited (this owner was stopped or
                    // starved meanwhile): asked again at once, with the wait of a renewal asked
                    // that late (see `ask`).
                    tracing::warn!(job = %self.job, error = %e, "lease renewal failed after the lease had passed here; asking again");
                    self.next = tokio::time::Instant::now();
                    return Lease::Held;
                }
                if tokio::time::Instant::now() >= self.stop_at {
                    // Said once: the run stops now, and a completion still waiting for the store
                    // asks for no more renewals of a lease it no longer counts on.
                    self.next = tokio::time::Instant::now() + StdDuration::from_secs(86_400);
                    self.stop_at = self.next;
                    self.lease_end = self.next;
                    tracing::error!(job = %self.job, %run_id, error = %e, "lease renewal failed until the lease was nearly over; stopping the run so that no other owner recovers it while it still runs");
                    return Lease::Ending;
                }
                tracing::warn!(job = %self.job, error = %e, "lease renewal failed; retrying");
                // Asked again within a second, the last time a twelfth of the lease before the
                // run must stop, so a store back by then keeps the run going. A renewal asked at
                // the stop instant itself only says the run must stop (its wait is over before
                // it starts).
                let now = tokio::time::Instant::now();
                let last = self
                    .stop_at
                    .checked_sub(self.lease / 12)
                    .unwrap_or(self.stop_at);
                let again = (now + self.first.min(StdDuration::from_secs(1))).min(last);
                if again <= now { self.stop_at } else { again }
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
/// store, which extends a lease from the instant it is given, an owner whose clock fell behind
/// the store's by more than a lease (stepped back mid-run, or faked) would otherwise write leases
/// that have already ended for everyone else, and another owner would recover a run that is
/// still going: a one-shot would run twice. Later is safe: a lease too long only delays the
/// recovery of an owner that dies, and the next heartbeat's reading corrects it.
fn lease_clock(health: &Health, at: Reading) -> DateTime<Utc> {
    health
        .store_now(at.mono)
        .map_or(at.wall, |store| store.max(at.wall))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::engine::outage::{EngineHealth, HealthCell};
    use tokio::sync::watch;

    /// What a renewer needs, with this test as the owner's batcher: it sees every renewal asked
    /// and answers (or not) itself.
    struct Fixture {
        store: Arc<dyn Store>,
        tx: RenewalTx,
        rx: mpsc::Receiver<RenewalJob>,
        clock: Arc<dyn Clock>,
        health: Health,
        ev_tx: broadcast::Sender<Event>,
        _dir: crate::testkit::tmp::TempDir,
    }

    impl Fixture {
        fn new() -> Fixture {
            let dir = crate::testkit::tmp::TempDir::new("renewer");
            let store: Arc<dyn Store> =
                Arc::new(crate::store::file::FileStore::open(&dir).expect("open store"));
            let (tx, rx) = mpsc::channel(16);
            Fixture {
                store,
                tx,
                rx,
                clock: Arc::new(ManualClock::new(crate::testkit::time::epoch(1_000))),
                health: Arc::new(HealthCell::new(watch::channel(EngineHealth::default()).0)),
                ev_tx: broadcast::channel(16).0,
                _dir: dir,
            }
        }
        fn holder(&self) -> Holder<'_> {
            Holder {
                store: &self.store,
                renewals: &self.tx,
                clock: &self.clock,
                health: &self.health,
                ev_tx: &self.ev_tx,
            }
        }
    }

    fn refused() -> Result<RenewOutcome, EngineError> {
        Err(EngineError::from(crate::store::StoreError::Backend(
            crate::store::BackendError::Unavailable("refused (test)".into()),
        )))
    }

    /// A store that refuses renewals: the last retry is asked before the stop with the stop as
    /// its deadline, and the renewal due at the stop instant is the stop itself (it used to
    /// wait for the store's answer however long it took, the run going on past its lease).
    #[tokio::test(start_paused = true)]
    async fn the_renewal_due_at_the_stop_instant_stops_without_waiting_for_the_store() {
        let mut f = Fixture::new();
        let lease = StdDuration::from_secs(3);
        let start = tokio::time::Instant::now();
        let mut r = Renewer::new("j".into(), Uuid::new_v4(), lease, start);
        let stop = start + lease.mul_f64(USABLE_SHARE);
        let mut asked_at = Vec::new();
        for _ in 0..8 {
            tokio::time::sleep_until(r.next).await;
            let t = tokio::time::Instant::now();
            let ask = r.ask(&f.holder());
            if t < stop {
                asked_at.push(t - start);
                let (answer, got) = tokio::join!(ask, async {
                    let (_, reply) = f.rx.recv().await.expect("a renewal");
                    let _ = reply.send(refused());
                });
                let () = got;
                assert_eq!(r.settle(answer, &f.holder()), Lease::Held);
            } else {
                // Nobody answers: the deadline has passed already.
                let answer = ask.await;
                assert_eq!(tokio::time::Instant::now(), t, "it waited for the store");
                assert_eq!(r.settle(answer, &f.holder()), Lease::Ending);
                assert_eq!(t, stop);
                // Every retry asked before the stop left a twelfth of the lease for the answer.
                assert!(
                    asked_at.iter().all(|a| *a + lease / 12 <= stop - start),
                    "{asked_at:?}"
                );
                return;
            }
        }
        panic!("never stopped: {asked_at:?}");
    }

    /// An owner stopped (or starved) while its renewal waited, past the whole lease: the
    /// renewal's deadline has passed when it continues, but stopping the run now protects no
    /// one, so it asks again and waits for the answer, and a store that renews keeps the run.
    #[tokio::test(start_paused = true)]
    async fn a_renewal_that_outlived_the_whole_lease_asks_again_instead_of_stopping() {
        let mut f = Fixture::new();
        let lease = StdDuration::from_secs(3);
        let start = tokio::time::Instant::now();
        let mut r = Renewer::new("j".into(), Uuid::new_v4(), lease, start);
        tokio::time::sleep_until(r.next).await;
        let ask = tokio::spawn(r.ask(&f.holder()));
        let (_, held_reply) = f.rx.recv().await.expect("a renewal");
        // The owner is stopped past the lease with the renewal in flight.
        tokio::time::advance(StdDuration::from_secs(5)).await;
        let answer = ask.await.expect("the renewal's task");
        assert!(answer.answer.is_err());
        drop(held_reply);
        assert_eq!(r.settle(answer, &f.holder()), Lease::Held);
        assert!(r.next <= tokio::time::Instant::now());
        // Asked again now: the store answers a second later (past the old stop instant), and
        // the run goes on.
        let ask = r.ask(&f.holder());
        let (answer, ()) = tokio::join!(ask, async {
            let (req, reply) = f.rx.recv().await.expect("a renewal");
            tokio::time::sleep(StdDuration::from_secs(1)).await;
            let _ = reply.send(Ok(RenewOutcome::Renewed {
                lease_until: req.now + chrono::Duration::seconds(3),
            }));
        });
        assert!(answer.answer.is_ok());
        assert_eq!(r.settle(answer, &f.holder()), Lease::Held);
    }
}

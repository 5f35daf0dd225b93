//! This owner's record in the store, rewritten at every heartbeat, and the clock check that
//! rides on it: an owner whose clock is further from the store's than the bound claims nothing
//! new and says why.
//!
//! The heartbeat is a timer arm of the actor's loop (every [`BEAT_EVERY`]; an idle owner
//! wakes for nothing else). The store measures the offset on its own clock (the database's on
//! PostgreSQL, the file system's stamp on the file store). Past the bound
//! (`EngineConfig::max_clock_offset`) claims stop — runs in flight keep renewing and complete
//! as usual, their leases extended from the store's clock as the heartbeat read it — with a
//! log line, a notice, `EngineHealth::clock_refused` (`/healthz` is 503 with it, the console's
//! header shows it) and the reason on the owner's record; the first beat within the bound
//! resumes them, logged too. A heartbeat the store refuses changes nothing here: store outages
//! are the outage module's.
//!
//! At a clean stop the owner writes its record once more, signed off
//! ([`OwnerRecord::signed_off`]), so every view stops counting it at once; a killed owner's
//! record ages out instead.
//!
//! Owns: [`Beat`]. Must not touch: the UI; claiming itself (the actor asks [`Beat::refused`]).

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Utc};
use tokio::sync::broadcast;

use super::api::Event;
use super::error::blocking;
use super::outage::Health;
use crate::clock::Clock;
use crate::model::OwnerRecord;
use crate::store::{BackendError, Store, StoreError, StoreResult};
use crate::timers::{Mailbox, Pacer, Post};

/// How often an owner rewrites its record.
pub const BEAT_EVERY: StdDuration = StdDuration::from_secs(5);

/// This owner's heartbeat and what it last measured.
pub(super) struct Beat {
    record: OwnerRecord,
    bound: Option<StdDuration>,
    /// With no bound: how far ahead of the store's clock this owner may be before it stops
    /// claiming (`EngineConfig::ahead_limit`).
    ahead_limit: Option<StdDuration>,
    /// When the next heartbeat is due.
    pub(super) next: tokio::time::Instant,
    /// Why claims are refused for this owner's clock (`None`: within the bound, or unknown).
    refused: Option<String>,
    /// Wait with the kernel's timer and doorbell (`EngineConfig::kernel_waits`).
    kernel_waits: bool,
    /// The kernel timer of the next beat, made at the first wait, and the instant it is armed
    /// for.
    timer: Option<(Pacer, Option<tokio::time::Instant>)>,
    /// Where a store that beats on its own threads answers, made at the first such beat.
    inbox: Option<Inbox>,
}

/// The answers of heartbeats handed to the store, and a sender each answer goes through.
struct Inbox {
    answers: Mailbox<StoreResult<OwnerRecord>>,
    post: Arc<Post<StoreResult<OwnerRecord>>>,
}

/// Where one handed-off heartbeat answers; an answer dropped unsent (the store's runtime
/// stopped) answers an error, so the owner never waits for it forever.
struct Reply(Option<Arc<Post<StoreResult<OwnerRecord>>>>);

impl Reply {
    fn send(mut self, r: StoreResult<OwnerRecord>) {
        if let Some(p) = self.0.take() {
            let _ = p.send(r);
        }
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = p.send(Err(StoreError::Backend(BackendError::NoResult(
                "the heartbeat (the store's runtime stopped)",
            ))));
        }
    }
}

impl Beat {
    pub(super) fn new(
        owner: &str,
        started_at: DateTime<Utc>,
        bound: Option<StdDuration>,
        ahead_limit: Option<StdDuration>,
        kernel_waits: bool,
    ) -> Beat {
        let mut parts = owner.splitn(3, ':');
        let host = parts.next().unwrap_or_default().to_string();
        Beat {
            record: OwnerRecord {
                owner: owner.to_string(),
                host,
                pid: std::process::id(),
                pid_space: crate::proc::alive::pid_space().map(str::to_string),
                version: env!("CARGO_PKG_VERSION").to_string(),
                started_at,
                last_seen: started_at,
                clock_offset_ms: 0,
                claims_stopped: None,
                signed_off: None,
            },
            bound,
            ahead_limit,
            next: tokio::time::Instant::now(),
            refused: None,
            kernel_waits,
            timer: None,
            inbox: None,
        }
    }

    /// When the next heartbeat is due ([`Beat::next`]). Cancel-safe. An idle owner wakes
    /// for nothing else, so with kernel waits this is one wake-up a beat where tokio's timer
    /// wheel takes three (it steps a 5 s timer down two levels before it fires).
    pub(super) async fn due(&mut self) {
        if self.kernel_waits && self.timer.is_none() {
            match Pacer::kernel() {
                Ok(p) => self.timer = Some((p, None)),
                Err(e) => {
                    tracing::debug!(error = %e, "no kernel timer for the heartbeat: tokio's");
                    self.kernel_waits = false;
                }
            }
        }
        let next = self.next;
        let Some((timer, armed)) = self.timer.as_mut() else {
            return tokio::time::sleep_until(next).await;
        };
        if *armed != Some(next) {
            let after = next.saturating_duration_since(tokio::time::Instant::now());
            if timer.arm(after).is_err() {
                return tokio::time::sleep_until(next).await;
            }
            *armed = Some(next);
        }
        if timer.fired().await.is_err() {
            tokio::time::sleep_until(next).await;
        }
        *armed = None;
    }

    /// Why claims are refused for this owner's clock, if they are.
    pub(super) fn refused(&self) -> Option<&str> {
        self.refused.as_deref()
    }

    /// Write the record now (with `stopped`, why claims are stopped for any reason) and check
    /// the measured offset. True when the clock refusal started or ended.
    pub(super) async fn beat(
        &mut self,
        store: &Arc<dyn Store>,
        clock: &Arc<dyn Clock>,
        health: &Health,
        ev_tx: &broadcast::Sender<Event>,
        stopped: Option<String>,
    ) -> bool {
        self.next = tokio::time::Instant::now() + BEAT_EVERY;
        let sent = crate::clock::Reading::of(clock.as_ref());
        let mono = sent.mono;
        let Some(stored) = self.send(store, clock, stopped.clone()).await else {
            return false;
        };
        // The store stamps the record somewhere between this owner's clock reading and the
        // answer, so the offset is known only to within the round trip.
        let round_trip = clock.monotonic().saturating_sub(mono);
        let offset = stored.clock_offset_ms;
        if self.bound.is_some() {
            // Lease renewals (`renew::lease_clock`), the file store's claims and every owner's
            // wake-ups (`Actor::claim_clock`) read the store's clock from here.
            health.store_clock_read(stored.last_seen, sent);
        }
        self.record.clock_offset_ms = offset;
        health.send_modify(|h| h.clock_offset_ms = Some(offset));
        // Past the bound either way; and, whatever the bound, ahead by more than the ahead
        // limit: such a clock reads live leases as expired and takes their runs over.
        if self.bound.is_none() && self.ahead_limit.is_none() {
            return false;
        }
        let past_bound = self.bound.filter(|b| surely_beyond(offset, round_trip, *b));
        let past_ahead = self
            .ahead_limit
            .filter(|l| offset > 0 && surely_beyond(offset, round_trip, *l));
        let off = past_bound.is_some() || past_ahead.is_some();
        // The bound a resumed clock is back within, for the log line.
        let bound = [self.bound, self.ahead_limit.filter(|_| offset > 0)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or_default();
        let was = self.refused.is_some();
        if off {
            let why = match (past_bound, past_ahead) {
                (Some(b), _) => refusal(offset, b),
                (None, Some(l)) => refusal_ahead(offset, l),
                (None, None) => String::new(),
            };
            if !was {
                tracing::error!(clock_offset_ms = offset, "{why}");
                let _ = ev_tx.send(Event::Notice(why.clone()));
            }
            health.send_modify(|h| h.clock_refused = Some(why.clone()));
            self.refused = Some(why);
        } else if was {
            let msg = format!(
                "clock within {} of the store's again (offset {:+.1}s): claims resumed",
                secs(bound.as_millis() as i64),
                offset as f64 / 1000.0
            );
            tracing::warn!(clock_offset_ms = offset, "{msg}");
            let _ = ev_tx.send(Event::Notice(msg));
            health.send_modify(|h| h.clock_refused = None);
            self.refused = None;
        }
        if off != was {
            // The record says why at once, not at the next beat.
            self.send(store, clock, stopped.or_else(|| self.refused.clone()))
                .await;
        }
        off != was
    }

    /// Claims stop for this owner's clock, for a reason the store gave at a claim (its clock,
    /// read in the claim, is past the bound): logged and noticed once, shown by `/healthz`, the
    /// metrics and the next record. The next heartbeat measures the offset again and keeps the
    /// refusal or lifts it.
    pub(super) fn refuse(
        &mut self,
        why: String,
        health: &Health,
        ev_tx: &broadcast::Sender<Event>,
    ) {
        if self.refused.is_none() {
            tracing::error!("{why}");
            let _ = ev_tx.send(Event::Notice(why.clone()));
        }
        health.send_modify(|h| h.clock_refused = Some(why.clone()));
        self.refused = Some(why);
    }

    /// The last record, at a clean stop: this owner runs nothing more, so it stops counting as
    /// live at once instead of when its heartbeats age out. A store that refuses it changes
    /// nothing else: the record then ages out as a killed owner's does.
    pub(super) async fn sign_off(&mut self, store: &Arc<dyn Store>, clock: &Arc<dyn Clock>) {
        let mut rec = self.record.clone();
        rec.last_seen = clock.now();
        rec.signed_off = Some(rec.last_seen);
        if let Err(e) = blocking(store, move |s| s.beat(&rec)).await {
            tracing::warn!(error = %e, "sign-off not recorded: this owner ages out instead");
        }
    }

    /// Write the record (with `stopped`, or this owner's clock refusal); the record as the
    /// store took it (its clock and the measured offset), `None` when it did not.
    async fn send(
        &mut self,
        store: &Arc<dyn Store>,
        clock: &Arc<dyn Clock>,
        stopped: Option<String>,
    ) -> Option<OwnerRecord> {
        let mut rec = self.record.clone();
        rec.last_seen = clock.now();
        rec.claims_stopped = stopped.or_else(|| self.refused.clone());
        // A local record (the file store's) is written here: a hop to the blocking pool and
        // back would wake two more threads at every beat of an idle owner. A store with
        // threads of its own (PostgreSQL's runtime) is handed the beat and answers through a
        // doorbell, which wakes this thread alone.
        let sent = if store.beat_is_local() {
            store.beat(&rec).map_err(super::error::EngineError::from)
        } else if let Some(answer) = self.handed_off(store, &rec).await {
            answer.map_err(super::error::EngineError::from)
        } else {
            blocking(store, move |s| s.beat(&rec)).await
        };
        match sent {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::debug!(error = %e, "heartbeat not recorded");
                None
            }
        }
    }
}

impl Beat {
    /// The store's answer to `rec` handed to its own threads; `None` when it has none, or
    /// without kernel waits (tests on paused time: a wait on a descriptor would let tokio
    /// advance the paused clock meanwhile, where a blocking call holds it).
    async fn handed_off(
        &mut self,
        store: &Arc<dyn Store>,
        rec: &OwnerRecord,
    ) -> Option<StoreResult<OwnerRecord>> {
        if !self.kernel_waits || !store.beats_on_own_threads() {
            return None;
        }
        if self.inbox.is_none() {
            let made = Mailbox::new().and_then(|answers| {
                let post = Arc::new(answers.post()?);
                Ok(Inbox { answers, post })
            });
            match made {
                Ok(i) => self.inbox = Some(i),
                Err(e) => {
                    tracing::debug!(error = %e, "no heartbeat doorbell: the blocking pool makes it");
                    self.kernel_waits = false;
                    return None;
                }
            }
        }
        let inbox = self.inbox.as_ref()?;
        let reply = Reply(Some(Arc::clone(&inbox.post)));
        store.beat_handoff(rec, Box::new(move |r| reply.send(r)));
        Some(inbox.answers.recv().await.unwrap_or_else(|e| {
            Err(StoreError::Backend(BackendError::Unavailable(format!(
                "waiting for the heartbeat's answer: {e}"
            ))))
        }))
    }
}

/// Whether this owner's clock is surely further than `bound` from the store's. `offset_ms` is
/// its clock when it sent the record minus the store's stamp on it; the stamp fell within the
/// `round_trip`, so the true offset lies between `offset_ms` and `offset_ms + round_trip`. A
/// slow round trip (a loaded host, a far database) then never refuses a clock within the bound,
/// and never hides one further off than the bound by more than the round trip.
fn surely_beyond(offset_ms: i64, round_trip: StdDuration, bound: StdDuration) -> bool {
    let bound = i64::try_from(bound.as_millis()).unwrap_or(i64::MAX);
    let spread = i64::try_from(round_trip.as_millis()).unwrap_or(i64::MAX);
    offset_ms > bound || offset_ms.saturating_add(spread) < -bound
}

/// `1.5s`, `300s`.
fn secs(ms: i64) -> String {
    let s = ms as f64 / 1000.0;
    if s.fract() == 0.0 {
        format!("{s:.0}s")
    } else {
        format!("{s:.1}s")
    }
}

/// `8.0s behind`, `300.0s ahead of`.
fn signed(offset_ms: i64) -> String {
    let side = if offset_ms < 0 { "behind" } else { "ahead of" };
    format!("{:.1}s {side}", offset_ms.unsigned_abs() as f64 / 1000.0)
}

/// The words of a refusal: how far off, the bound, and what to do.
pub(super) fn refusal(offset_ms: i64, bound: StdDuration) -> String {
    format!(
        "this host's clock is {} the store's (more than --max-clock-offset {}): claims stopped \
         until it is back within the bound; runs in flight go on. Fix the clock (NTP)",
        signed(offset_ms),
        secs(bound.as_millis() as i64)
    )
}

/// The words of a refusal for a clock ahead of the store's by more than the ahead limit (a
/// quarter of the shortest lease), whatever `--max-clock-offset` says.
pub(super) fn refusal_ahead(offset_ms: i64, limit: StdDuration) -> String {
    format!(
        "this host's clock is {} the store's, more than a quarter of the shortest lease ({}): \
         whatever --max-clock-offset says (even off) it would take over other owners' live runs \
         as expired, so claims stopped until it is back; runs in flight go on. Fix the clock (NTP)",
        signed(offset_ms),
        secs(limit.as_millis() as i64)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_says_how_far_which_way_the_bound_and_what_to_do() {
        let w = refusal(-40_000, StdDuration::from_secs(5));
        assert!(w.contains("40.0s behind"), "{w}");
        assert!(w.contains("--max-clock-offset 5s"), "{w}");
        assert!(w.contains("claims stopped") && w.contains("NTP"), "{w}");
        assert!(refusal(300_500, StdDuration::from_millis(2500)).contains("300.5s ahead of the"));
        assert!(refusal(1, StdDuration::from_millis(2500)).contains("2.5s"));
        let w = refusal_ahead(60_000, StdDuration::from_millis(7_500));
        assert!(w.contains("60.0s ahead of the store's"), "{w}");
        assert!(
            w.contains("quarter of the shortest lease (7.5s)") && w.contains("off"),
            "{w}"
        );
    }

    /// The kernel timer follows the heartbeat's instant when it moves (a claim refused for the
    /// clock asks for a beat at once) and fires once per instant.
    #[tokio::test]
    async fn the_kernel_beat_timer_follows_the_next_beat_when_it_moves() {
        let mut b = Beat::new("h:1:o", chrono::Utc::now(), None, None, true);
        b.next = tokio::time::Instant::now() + StdDuration::from_secs(3600);
        // Armed an hour away, then moved near while armed: the near instant is the one waited.
        let far = tokio::time::timeout(StdDuration::from_millis(1), b.due()).await;
        assert!(far.is_err());
        assert!(matches!(b.timer, Some((Pacer::Kernel(_), Some(_)))));
        b.next = tokio::time::Instant::now() + StdDuration::from_millis(5);
        b.due().await;
        assert!(tokio::time::Instant::now() >= b.next);
        assert!(matches!(b.timer, Some((_, None))), "disarmed once fired");
    }

    #[test]
    fn only_an_offset_beyond_the_bound_whatever_the_round_trip_refuses() {
        let ms = StdDuration::from_millis;
        let bound = ms(250);
        // 1.5 s behind: refused unless the round trip could explain more than 1.25 s of it.
        assert!(surely_beyond(-1_500, ms(10), bound));
        assert!(surely_beyond(-1_500, ms(1_200), bound));
        assert!(!surely_beyond(-1_500, ms(1_300), bound));
        // A clock right on the store's, measured through a slow round trip, is not refused.
        assert!(!surely_beyond(-900, ms(900), bound));
        // Ahead: the stamp can only make the owner look less ahead than it is.
        assert!(surely_beyond(251, ms(5_000), bound));
        assert!(!surely_beyond(250, ms(0), bound));
        assert!(!surely_beyond(-250, ms(0), bound));
    }
}

//! The change feed: one dedicated connection that `LISTEN`s on the store's channel and keeps the
//! highest store version seen in an atomic, so `Store::change_token` is a memory load while the
//! listener is up (the engine polls it every 250 ms; that must cost nothing).
//!
//! Owns: the listener connection, its reconnect loop, and the after-commit announcements it
//! sends (`pg_notify` in a transaction of its own). Must not touch: the pool, other SQL.
//!
//! Every mutation bumps `nextval('cronsole_store_version')` inside its transaction. Operator
//! commands (apply, pause, trigger, edits: short-lived CLI processes) also `pg_notify` the new
//! version inside that transaction, so the notification arrives when (and only if) the change
//! commits. The engine's hot path (claims, completions, renewals, budget reservations) instead
//! *announces* its version after the commit ([`ChangeFeed::announce`]): this connection sends one
//! coalesced `pg_notify` of the highest version announced so far, in its own transaction with
//! `synchronous_commit` off. Why: PostgreSQL serialises every notifying transaction's commit
//! behind one global lock held through the commit's WAL flush (`PreCommit_Notify`), so a NOTIFY
//! inside every claim made four owners' durable commits queue one fsync at a time instead of
//! sharing one flush (group commit). A notification is a wake-up hint, not data: losing the
//! deferred one in a server crash loses nothing (listeners re-read the sequence on reconnect).
//!
//! On every (re)connect the listener first LISTENs, then reads the sequence's `last_value`, so a
//! change committed while it was down is not missed, then sends any announcement still pending.
//! While it is down, `change_token` falls back to reading the sequence through the pool.
//!
//! Every version rise is also pushed on a `watch` channel (`Store::change_signal`), so engines
//! wake within milliseconds of another owner's or a CLI command's commit; a rise seen on
//! reconnect is pushed too, so changes made while the listener was down still wake them.

use std::future::poll_fn;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio_postgres::{AsyncMessage, Config};

use super::connect::MakeRustls;

use super::schema::CHANNEL;

/// The highest store version observed, and whether the listener is live.
#[derive(Debug, Default)]
pub(crate) struct ChangeFeed {
    version: AtomicU64,
    alive: AtomicBool,
    /// Notifications received (for tests and diagnostics).
    received: AtomicU64,
    /// Pushes every version rise to subscribed engines (`Store::change_signal`).
    signal: tokio::sync::watch::Sender<u64>,
    /// The highest version this process committed and wants NOTIFYed (see the module doc).
    pending: tokio::sync::watch::Sender<u64>,
    /// The highest version this process's listener has NOTIFYed.
    announced: AtomicU64,
}

impl ChangeFeed {
    pub(crate) fn observe(&self, version: i64) {
        if version > 0 {
            let before = self.version.fetch_max(version as u64, Ordering::SeqCst);
            if (version as u64) > before {
                self.signal.send_replace(version as u64);
            }
        }
    }
    /// A committed version to NOTIFY after the fact (claims, completions: see the module doc).
    pub(crate) fn announce(&self, version: i64) {
        self.observe(version);
        if version > 0 {
            let v = version as u64;
            self.pending.send_if_modified(|p| {
                let rise = v > *p;
                *p = (*p).max(v);
                rise
            });
        }
    }
    /// True while an announced version has not been NOTIFYed yet.
    pub(crate) fn announcing(&self) -> bool {
        *self.pending.borrow() > self.announced.load(Ordering::SeqCst)
    }
    /// A receiver that changes on every version rise seen by the listener.
    pub(crate) fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.signal.subscribe()
    }
    pub(crate) fn version(&self) -> u64 {
        self.version.load(Ordering::SeqCst)
    }
    pub(crate) fn alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }
    pub(crate) fn received(&self) -> u64 {
        self.received.load(Ordering::SeqCst)
    }
}

const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// Run forever on the store's runtime (it ends when the runtime shuts down).
pub(crate) async fn run(cfg: Config, tls: MakeRustls, feed: Arc<ChangeFeed>) {
    let mut delay = RETRY_MIN;
    loop {
        match listen_once(&cfg, &tls, &feed).await {
            Ok(()) => delay = RETRY_MIN,
            Err(e) => {
                tracing::debug!(error = %e, "store listener connection failed");
            }
        }
        feed.alive.store(false, Ordering::SeqCst);
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(RETRY_MAX);
    }
}

/// One connection's lifetime: Ok after a connection that worked and then ended.
async fn listen_once(
    cfg: &Config,
    tls: &MakeRustls,
    feed: &Arc<ChangeFeed>,
) -> Result<(), tokio_postgres::Error> {
    let (client, mut connection) = cfg.connect(tls.clone()).await?;
    let driver_feed = Arc::clone(feed);
    let driver = tokio::spawn(async move {
        loop {
            match poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    driver_feed.received.fetch_add(1, Ordering::SeqCst);
                    match n.payload().parse::<i64>() {
                        Ok(v) => driver_feed.observe(v),
                        // Not ours (someone NOTIFYed by hand): still a change.
                        Err(_) => {
                            let v = driver_feed.version.fetch_add(1, Ordering::SeqCst);
                            driver_feed.signal.send_replace(v.wrapping_add(1));
                        }
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "store listener connection lost");
                    return;
                }
                None => return,
            }
        }
    });
    let setup = async {
        client.batch_execute(&format!("LISTEN {CHANNEL}")).await?;
        let row = client
            .query_one(
                "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM cronsole_store_version",
                &[],
            )
            .await?;
        Ok::<i64, tokio_postgres::Error>(row.get(0))
    };
    match setup.await {
        Ok(v) => {
            feed.observe(v);
            feed.alive.store(true, Ordering::SeqCst);
        }
        Err(e) => {
            driver.abort();
            return Err(e);
        }
    }
    // Announce what this process committed, coalesced: one NOTIFY of the highest pending
    // version per round trip, however many commits happened meanwhile.
    let mut pending = feed.pending.subscribe();
    pending.mark_changed();
    let mut driver = driver;
    loop {
        tokio::select! {
            _ = &mut driver => break,
            changed = pending.changed() => {
                if changed.is_err() {
                    break;
                }
                let v = *pending.borrow_and_update();
                if v <= feed.announced.load(Ordering::SeqCst) {
                    continue;
                }
                let sql = format!(
                    "BEGIN; SET LOCAL synchronous_commit TO off; \
                     SELECT pg_notify('{CHANNEL}', '{v}'); COMMIT"
                );
                if let Err(e) = client.batch_execute(&sql).await {
                    driver.abort();
                    return Err(e);
                }
                feed.announced.fetch_max(v, Ordering::SeqCst);
            }
        }
    }
    drop(client);
    Ok(())
}

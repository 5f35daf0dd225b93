//! One open PostgreSQL store: [`PgStore`] (its private tokio runtime, the pool, the change feed)
//! and [`PgOptions`]; opening (schema migration, the listener) and the bridge that runs every
//! operation on the store's runtime from any calling thread.
//!
//! Owns: the handle, `Inner` (what every operation's future holds), `PgStore::run`, the task
//! that makes heartbeats handed to the store (`Store::beat_handoff`), `check`.
//! Must not touch: the SQL of the operations (`tx.rs` and the operation files).

use crate::store::{BackendError, OpenError};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use serde_json::Value;

use crate::model::{HistoryRow, JobRecord, OwnerRecord};
use crate::store::{BeatDone, StoreError, StoreResult};
use crate::timers::{Mailbox, Post};

use super::clock::PgClock;
use super::connect;
use super::db::{db_err, redact};
use super::listen::{self, ChangeFeed};
use super::pool::Pool;
use super::schema;
use super::tx::trim_history;

/// Tunables; `Default` is what `--store postgres://…` uses.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// Connections in the pool (the listener has its own).
    pub pool_size: usize,
    /// Bound on opening one connection (TCP, TLS and authentication).
    pub connect_timeout: Duration,
    /// Upper bound on one store operation, connection checkout included.
    pub op_timeout: Duration,
    /// Whose clock the store's decisions read: the database's unless a test drives time by
    /// hand (see [`PgClock`]).
    pub clock: PgClock,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            pool_size: 4,
            connect_timeout: Duration::from_secs(5),
            op_timeout: Duration::from_secs(15),
            clock: PgClock::Database,
        }
    }
}

pub(super) struct Inner {
    pub(super) pool: Pool,
    pub(super) feed: Arc<ChangeFeed>,
    pub(super) location: String,
    /// Completions by this process, to pace history retention.
    pub(super) completions: AtomicU64,
    /// Whose clock the decisions read.
    pub(super) clock: PgClock,
    /// The latest database clock this handle's heartbeats read (`rederive.rs`).
    pub(super) clock_mark: std::sync::Mutex<Option<chrono::DateTime<chrono::Utc>>>,
    /// When this handle's heartbeats last swept old owner records (`owners.rs`).
    pub(super) last_sweep: std::sync::Mutex<Option<chrono::DateTime<chrono::Utc>>>,
}

/// A [`Store`](crate::store::Store) over a PostgreSQL database shared by every owner (any number of hosts).
pub struct PgStore {
    pub(super) inner: Arc<Inner>,
    pub(super) handle: tokio::runtime::Handle,
    pub(super) rt: Option<tokio::runtime::Runtime>,
    pub(super) op_timeout: Duration,
    /// `cronsole_store.store_id` as read at open (see [`schema`]).
    pub(super) store_id: Option<String>,
    /// Heartbeats handed to the store's runtime (`Store::beat_handoff`); `None` when its
    /// doorbell could not be made (the heartbeat then goes through [`PgStore::run`]).
    pub(super) beats: Option<Post<BeatAsk>>,
}

/// A heartbeat to make and where its answer goes.
pub(super) type BeatAsk = (OwnerRecord, BeatDone);

/// The error of an operation that took longer than `limit`.
fn timed_out(limit: Duration) -> StoreError {
    StoreError::Backend(BackendError::Unavailable(format!(
        "store operation timed out after {} s",
        limit.as_secs_f64()
    )))
}

/// How long dropping a store waits for its last announcements (see `listen`) to go out.
pub(super) const ANNOUNCE_GRACE: Duration = Duration::from_millis(500);

impl Drop for PgStore {
    fn drop(&mut self) {
        // Commits announced after the fact (claims, completions) are NOTIFYed by the listener;
        // give the last ones a moment so other owners hear this process's final completions.
        let deadline = std::time::Instant::now() + ANNOUNCE_GRACE;
        while self.inner.feed.announcing()
            && self.inner.feed.alive()
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(2));
        }
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl PgStore {
    /// Connect to `url` (`postgres://user[:pass]@host[:port]/db?…` or `postgresql://…`),
    /// create or migrate the schema, and start the change listener.
    pub fn open(url: &str) -> StoreResult<PgStore> {
        PgStore::open_with(url, PgOptions::default())
    }

    /// Open the store already in the database at `url`, creating nothing: a command that only
    /// reads or acts on a store must not turn a mistyped database (an application's own) into
    /// an empty cronsole store. A database without one is [`OpenError::BadLocation`](crate::store::OpenError::BadLocation).
    pub fn open_existing(url: &str) -> StoreResult<PgStore> {
        PgStore::open_inner(url, PgOptions::default(), false)
    }

    /// [`PgStore::open`] with other pool and timeout settings.
    pub fn open_with(url: &str, opts: PgOptions) -> StoreResult<PgStore> {
        PgStore::open_inner(url, opts, true)
    }

    fn open_inner(url: &str, opts: PgOptions, create: bool) -> StoreResult<PgStore> {
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(StoreError::Open(OpenError::BadLocation {
                what: format!(
                    "not a PostgreSQL URL (expected postgres://user@host:port/database): {}",
                    url.split('@').next_back().unwrap_or(url)
                ),
                source: None,
            }));
        }
        let (mut cfg, tls) = connect::parse(url)?;
        let tls = connect::connector(&tls)?;
        if cfg.get_connect_timeout().is_none() {
            cfg.connect_timeout(opts.connect_timeout);
        }
        cfg.application_name("cronsole");
        cfg.keepalives(true);
        cfg.keepalives_idle(Duration::from_secs(10));
        let location = redact(&cfg);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("cronsole-pg")
            .enable_all()
            .build()
            .map_err(|e| StoreError::io("the PostgreSQL store's runtime", e))?;
        let feed = Arc::new(ChangeFeed::default());
        let inner = Arc::new(Inner {
            pool: Pool::new(cfg.clone(), tls.clone(), opts.pool_size),
            feed: Arc::clone(&feed),
            location,
            completions: AtomicU64::new(1),
            clock: opts.clock,
            clock_mark: std::sync::Mutex::new(None),
            last_sweep: std::sync::Mutex::new(None),
        });
        let mut store = PgStore {
            inner,
            handle: rt.handle().clone(),
            rt: Some(rt),
            op_timeout: opts.op_timeout.max(opts.connect_timeout),
            store_id: None,
            beats: None,
        };
        store.store_id = store.run(move |inner| async move {
            let mut c = inner.pool.get().await?;
            if !create && !schema::exists(&c).await? {
                return Err(StoreError::Open(OpenError::BadLocation {
                    what: format!(
                        "no cronsole store in {}: start cronsole with --jobs FILE or run `cronsole apply FILE` first, or point --store at an existing store",
                        inner.location
                    ),
                    source: None,
                }));
            }
            Ok(schema::migrate(&mut c, &inner.location).await?.1)
        })?;
        store.handle.spawn(listen::run(cfg, tls, feed));
        store.beats = store.serve_beats();
        Ok(store)
    }

    /// Start the task that makes the heartbeats handed to this store: an idle owner's beat then
    /// wakes one thread of this runtime to send it and one for the answer, where a task spawned
    /// from another runtime's thread wakes both workers.
    fn serve_beats(&self) -> Option<Post<BeatAsk>> {
        let _on = self.handle.enter();
        let made = Mailbox::<BeatAsk>::new().and_then(|inbox| Ok((inbox.post()?, inbox)));
        let (post, inbox) = match made {
            Ok(m) => m,
            Err(e) => {
                tracing::debug!(error = %e, "no heartbeat doorbell: heartbeats go through the blocking pool");
                return None;
            }
        };
        let inner = Arc::clone(&self.inner);
        let limit = self.op_timeout;
        self.handle.spawn(async move {
            while let Ok((rec, done)) = inbox.recv().await {
                let r = match tokio::time::timeout(limit, inner.beat(rec)).await {
                    Ok(r) => r,
                    Err(_) => Err(timed_out(limit)),
                };
                done(r);
            }
        });
        Some(post)
    }

    /// Run one operation on the store's runtime and wait for it from any thread.
    pub(super) fn run<T, F, Fut>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Inner>) -> Fut,
        Fut: Future<Output = StoreResult<T>> + Send + 'static,
    {
        self.run_within(self.op_timeout, f)
    }

    /// [`run`](Self::run) with its own bound, for an operation whose work grows with its input
    /// (an `apply` of many jobs).
    pub(super) fn run_within<T, F, Fut>(&self, limit: Duration, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Inner>) -> Fut,
        Fut: Future<Output = StoreResult<T>> + Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let fut = f(Arc::clone(&self.inner));
        self.handle.spawn(async move {
            let r = match tokio::time::timeout(limit, fut).await {
                Ok(r) => r,
                Err(_) => Err(timed_out(limit)),
            };
            let _ = tx.send(r);
        });
        rx.recv().map_err(|_| {
            StoreError::Backend(BackendError::NoResult(
                "the store operation (it panicked, or the store runtime stopped)",
            ))
        })?
    }

    /// Hand the heartbeat of `rec` to this store's runtime (`Store::beat_handoff`); made on
    /// this thread when there is no doorbell.
    pub(super) fn beat_handoff(&self, rec: &OwnerRecord, done: BeatDone) {
        match &self.beats {
            Some(post) => {
                if let Err(e) = post.send((rec.clone(), done)) {
                    // The ask is queued all the same: the next ring delivers it.
                    tracing::debug!(error = %e, "ringing the heartbeat doorbell");
                }
            }
            None => {
                let rec = rec.clone();
                done(self.run(move |inner| async move { inner.beat(rec).await }));
            }
        }
    }

    /// True while the LISTEN connection is up (change tokens are then free).
    pub fn listener_alive(&self) -> bool {
        self.inner.feed.alive()
    }

    /// Notifications received by this store's listener so far.
    pub fn notifications_received(&self) -> u64 {
        self.inner.feed.received()
    }

    /// Keep only the newest `keep` history rows of `job` (in insertion order); returns how
    /// many were deleted. Completions call this automatically with the default (10 000, as the file store keeps).
    pub fn trim_history(&self, job: &str, keep: usize) -> StoreResult<u64> {
        let job = job.to_string();
        self.run(|inner| async move {
            let c = inner.pool.get().await?;
            trim_history(&*c, &job, keep.max(1)).await
        })
    }

    /// The store id drawn when the schema was created (`cronsole_store`); `None` if its row
    /// was deleted.
    pub fn store_id(&self) -> Option<&str> {
        self.store_id.as_deref()
    }

    /// Drop idle pooled connections (tests use it after restarting the server).
    /// `cronsole check`: decode every job record and history row (in batches), and compare
    /// the indexed columns with the record they index. Reads only.
    pub fn check(&self) -> StoreResult<crate::store::check::Report> {
        self.run(|inner| async move {
            let c = inner.pool.get().await?;
            let mut r = crate::store::check::Report::default();
            let push = |r: &mut crate::store::check::Report, table: &str, line: u64, what: String| {
                if r.problems.len() < crate::store::check::MAX_REPORTED {
                    r.problems.push(crate::store::check::Problem {
                        location: format!("{}/{table}", inner.location),
                        line,
                        column: 0,
                        what,
                    });
                } else {
                    r.more += 1;
                }
            };
            match schema::read_store_id(&*c).await? {
                Some(id) => r.store_id = Some(id),
                None => push(
                    &mut r,
                    "cronsole_store",
                    1,
                    "the store id row is missing (deleted by hand?)".into(),
                ),
            }
            let jobs = c
                .query("SELECT name, record FROM cronsole_jobs ORDER BY name", &[])
                .await
                .map_err(|e| db_err("reading jobs", e))?;
            for (i, row) in jobs.iter().enumerate() {
                let name: String = row.get(0);
                match serde_json::from_value::<JobRecord>(row.get::<_, Value>(1)) {
                    Ok(rec) if rec.def.name == name => r.jobs += 1,
                    Ok(rec) => push(
                        &mut r,
                        "cronsole_jobs",
                        i as u64 + 1,
                        format!("row '{name}' holds the record of job '{}'", rec.def.name),
                    ),
                    Err(e) => push(&mut r, "cronsole_jobs", i as u64 + 1, format!("job '{name}': {e}")),
                }
            }
            let mut after = 0i64;
            loop {
                let rows = c
                    .query(
                        "SELECT seq, run_id, job, row FROM cronsole_history WHERE seq > $1 ORDER BY seq LIMIT 10000",
                        &[&after],
                    )
                    .await
                    .map_err(|e| db_err("reading history", e))?;
                let Some(last) = rows.last() else {
                    break;
                };
                after = last.get(0);
                for row in &rows {
                    let seq: i64 = row.get(0);
                    let run_id: String = row.get(1);
                    let job: String = row.get(2);
                    match serde_json::from_value::<HistoryRow>(row.get::<_, Value>(3)) {
                        Ok(h) if h.run_id.to_string() == run_id && h.job == job => r.history_rows += 1,
                        Ok(_) => push(
                            &mut r,
                            "cronsole_history",
                            seq as u64,
                            "the run_id/job columns disagree with the row they index".into(),
                        ),
                        Err(e) => push(&mut r, "cronsole_history", seq as u64, format!("seq {seq}: {e}")),
                    }
                }
            }
            Ok(r)
        })
    }
}

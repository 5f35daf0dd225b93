//! A small connection pool for the PostgreSQL store: at most `size` connections behind a
//! semaphore, idle clients kept in a `Mutex<Vec<_>>`, dead clients dropped and replaced on the
//! next checkout, and reconnection with exponential backoff (100 ms doubling to 5 s) so a
//! database that is down costs callers one fast `BackendError::Unavailable`, not a connect storm.
//!
//! Owns: connecting, the connection driver tasks, the backoff gate, and carrying each
//! connection's server-side prepared statements (`super::stmts::Stmts`, prepared on first
//! use and kept with the connection while it lives in the pool). Must not touch: SQL beyond
//! the per-connection session setup, the store's semantics.
//!
//! Why not `deadpool-postgres` or `bb8` (both evaluated): what a pool crate would
//! replace here is the semaphore, the idle `Vec` and the `is_closed` check — about 40 lines.
//! What this product needs and neither crate does is the shared backoff gate: with the
//! database down, every checkout of a pool crate starts a fresh connect (bb8 retries inside
//! `get` until its timeout; deadpool creates on each `get`), so N owners × M callers hammer a
//! recovering server, while here one failed connect makes every caller fail fast with
//! `Unavailable` for 100 ms → 5 s, which the engine's outage handling (retry completions,
//! stop claiming past `outage_bound`) is built on. The
//! rustls `MakeRustls` connector (libpq sslmode semantics) and spawning driver tasks on the
//! store's private runtime would all remain ours as wrappers around the crate's manager, so the
//! crate would add a dependency and a second layer of timeouts without removing the code that
//! carries the behaviour.
//!
//! Runs only on the store's private runtime (see `super`): every future here is spawned there.

use crate::store::BackendError;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::Instant;
use tokio_postgres::{Client, Config};

use super::connect::MakeRustls;

use super::db::db_err;
use super::stmts::Stmts;
use crate::store::{StoreError, StoreResult};

const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// When the last connect failed and how long to wait before the next attempt.
#[derive(Debug, Default)]
struct Backoff {
    next_try: Option<Instant>,
    delay: Duration,
    last_error: String,
}

/// A pooled connection and its prepared statements (`None` until first prepared).
struct Pooled {
    client: Client,
    stmts: Option<Arc<Stmts>>,
}

pub(crate) struct Pool {
    cfg: Config,
    tls: MakeRustls,
    idle: Mutex<Vec<Pooled>>,
    sem: Semaphore,
    backoff: Mutex<Backoff>,
}

/// A checked-out connection; returned to the pool on drop unless it is closed.
pub(crate) struct Conn<'a> {
    client: Option<Client>,
    /// This connection's prepared statements, once prepared (see [`Conn::stmts`]).
    pub(crate) stmts: Option<Arc<Stmts>>,
    pool: &'a Pool,
    _permit: SemaphorePermit<'a>,
}

impl std::ops::Deref for Conn<'_> {
    type Target = Client;
    fn deref(&self) -> &Client {
        // Invariant: `client` is Some from checkout until drop.
        self.client.as_ref().unwrap_or_else(|| unreachable!())
    }
}

impl std::ops::DerefMut for Conn<'_> {
    fn deref_mut(&mut self) -> &mut Client {
        self.client.as_mut().unwrap_or_else(|| unreachable!())
    }
}

impl Drop for Conn<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.client.take()
            && !c.is_closed()
        {
            lock(&self.pool.idle).push(Pooled {
                client: c,
                stmts: self.stmts.take(),
            });
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Pool {
    pub(crate) fn new(cfg: Config, tls: MakeRustls, size: usize) -> Pool {
        Pool {
            cfg,
            tls,
            idle: Mutex::new(Vec::new()),
            sem: Semaphore::new(size.max(1)),
            backoff: Mutex::new(Backoff::default()),
        }
    }

    /// Check out a live connection, connecting if no idle one is left.
    pub(crate) async fn get(&self) -> StoreResult<Conn<'_>> {
        let permit = self.sem.acquire().await.map_err(|_| {
            StoreError::Backend(BackendError::Unavailable("connection pool closed".into()))
        })?;
        loop {
            let c = lock(&self.idle).pop();
            match c {
                Some(c) if c.client.is_closed() => continue,
                Some(c) => {
                    return Ok(Conn {
                        client: Some(c.client),
                        stmts: c.stmts,
                        pool: self,
                        _permit: permit,
                    });
                }
                None => break,
            }
        }
        let client = self.connect().await?;
        Ok(Conn {
            client: Some(client),
            stmts: None,
            pool: self,
            _permit: permit,
        })
    }

    /// Connect one new client, honouring the backoff gate.
    pub(crate) async fn connect(&self) -> StoreResult<Client> {
        {
            let b = lock(&self.backoff);
            if let Some(t) = b.next_try
                && Instant::now() < t
            {
                return Err(StoreError::Backend(BackendError::Unavailable(format!(
                    "not reconnecting yet (backing off after: {})",
                    b.last_error
                ))));
            }
        }
        match connect(&self.cfg, &self.tls).await {
            Ok(c) => {
                *lock(&self.backoff) = Backoff::default();
                Ok(c)
            }
            Err(e) => {
                let mut b = lock(&self.backoff);
                b.delay = (b.delay * 2).clamp(BACKOFF_MIN, BACKOFF_MAX);
                b.next_try = Some(Instant::now() + b.delay);
                b.last_error = e.to_string();
                Err(e)
            }
        }
    }
}

/// Connect and spawn the connection's driver task on the current (store) runtime.
pub(crate) async fn connect(cfg: &Config, tls: &MakeRustls) -> StoreResult<Client> {
    let (client, connection) = cfg
        .connect(tls.clone())
        .await
        .map_err(|e| db_err(&format!("connecting to {}", super::db::redact(cfg)), e))?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "postgres connection ended");
        }
    });
    Ok(client)
}

impl Conn<'_> {
    /// This connection's prepared statements, preparing them (pipelined: one round trip) on
    /// its first use. Not at connect: the first connection runs the migration that creates the
    /// tables these statements name.
    pub(crate) async fn stmts(&mut self) -> StoreResult<Arc<Stmts>> {
        if let Some(s) = &self.stmts {
            return Ok(Arc::clone(s));
        }
        let s = Arc::new(Stmts::prepare(self).await?);
        self.stmts = Some(Arc::clone(&s));
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn failed_connects_back_off_instead_of_hammering() {
        // Port 1 on loopback refuses connections immediately.
        let cfg: Config = "postgres://nobody:sekrit@127.0.0.1:1/none".parse().unwrap();
        let tls = super::super::connect::connector(&super::super::connect::TlsSettings {
            mode: super::super::connect::SslMode::Disable,
            root_cert: super::super::connect::RootCert::Default,
            cert: None,
            key: None,
        })
        .unwrap();
        let pool = Pool::new(cfg, tls, 2);
        let first = pool.get().await.err().unwrap().to_string();
        // The error names the store, without its password, where several may be configured.
        assert!(
            first.contains("connecting to postgres://nobody@127.0.0.1:1/none: "),
            "{first}"
        );
        assert!(!first.contains("sekrit"), "{first}");
        // Within the backoff window the pool fails fast without trying.
        let second = pool.get().await.err().unwrap().to_string();
        assert!(second.contains("backing off"), "{second}");
        tokio::time::advance(BACKOFF_MIN + Duration::from_millis(1)).await;
        let third = pool.get().await.err().unwrap().to_string();
        assert!(third.contains("connecting"), "{third}");
    }
}

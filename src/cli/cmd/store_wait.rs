//! `run` started while its PostgreSQL store cannot be reached (the database restarting, a
//! network cut): it waits for the store instead of exiting 1.
//!
//! Owns: telling an unreachable database from a refusal (a wrong password, a missing database,
//! which are reported at once), retrying the open with the engine's store backoff (250 ms
//! doubling to 10 s, jittered), answering `/healthz` 503 with the reason meanwhile, and a stop
//! signal while it waits. Must not touch: the engine, which starts only once the store opens.
//!
//! Why: a service manager that starts cronsole beside its database, or restarts it during a
//! database outage, saw it exit 1 and counted a failed start; the engine already rides out an
//! outage of any length once it runs, so its start does too.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use chrono::{DateTime, Utc};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::store::{BackendError, Store, StoreError};

/// How often a wait looks at the stop signals and the health listener.
const TICK: Duration = Duration::from_millis(100);

/// The store `run` starts on, from its first open (`opened`), metered when `metrics` is given;
/// `None` when a stop signal came while it waited for the store.
pub(super) async fn ready(
    location: &str,
    opened: Result<Arc<dyn Store>>,
    listener: Option<&TcpListener>,
    metrics: Option<&Arc<crate::service::metrics::Metrics>>,
) -> Result<Option<Arc<dyn Store>>> {
    let store = match opened {
        Ok(s) => s,
        Err(e) => match open_waiting(location, e, listener).await? {
            Some(s) => s,
            None => return Ok(None),
        },
    };
    Ok(Some(match metrics {
        Some(m) => Arc::new(crate::service::metrics::metered(store, Arc::clone(m))),
        None => store,
    }))
}

/// `first` is the error of opening `location`: a PostgreSQL store that cannot be reached is
/// opened again at the backoff's pace until it answers (`Some`), or until a stop signal (`None`);
/// any other error is returned as it is.
/// `run`'s first open of `location`: an error it waits out (a PostgreSQL store that cannot be
/// reached) is handed on to [`ready`]; any other ends here, before logging creates its
/// directory in the store, so a damaged store is refused with every byte as it was.
pub(super) fn first_open(location: &str) -> Result<Result<Arc<dyn Store>>> {
    match super::open_store(location) {
        Err(e) if !waits_for(location, &e) => Err(e),
        opened => Ok(opened),
    }
}

/// Whether `run` waits for the store at `location` after `e` at its first open.
fn waits_for(location: &str, e: &anyhow::Error) -> bool {
    is_database(location) && unreachable(e)
}

async fn open_waiting(
    location: &str,
    first: anyhow::Error,
    listener: Option<&TcpListener>,
) -> Result<Option<Arc<dyn Store>>> {
    if !waits_for(location, &first) {
        return Err(first);
    }
    let since = Utc::now();
    let mut why = first.to_string();
    tracing::warn!("store unreachable at start ({why}): waiting for it, retried with backoff");
    eprintln!(
        "cronsole: store unreachable ({why}): waiting for it; /healthz answers 503 meanwhile"
    );
    let mut attempt = 1;
    loop {
        let delay = crate::engine::probe_delay(attempt, crate::action::jitter_unit());
        if !pause(delay, listener, &reason(since, &why)).await {
            eprintln!(
                "cronsole: stop signal while waiting for the store: the engine was not started"
            );
            tracing::info!("stop signal while waiting for the store: the engine was not started");
            return Ok(None);
        }
        let loc = location.to_string();
        match tokio::task::spawn_blocking(move || super::open_store(&loc)).await {
            Ok(Ok(store)) => {
                let waited = (Utc::now() - since).num_milliseconds() as f64 / 1000.0;
                tracing::info!("store reachable after {waited:.1} s: starting");
                eprintln!("cronsole: store reachable after {waited:.1} s: starting");
                return Ok(Some(store));
            }
            Ok(Err(e)) if unreachable(&e) => {
                why = e.to_string();
                attempt = attempt.saturating_add(1);
            }
            Ok(Err(e)) => return Err(e),
            Err(e) => return Err(anyhow::anyhow!("opening the store: {e}")),
        }
    }
}

fn is_database(location: &str) -> bool {
    location.starts_with("postgres://") || location.starts_with("postgresql://")
}

/// The `/healthz` reason while waiting.
fn reason(since: DateTime<Utc>, why: &str) -> String {
    format!(
        "store unreachable since {}, not started: {why}",
        since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    )
}

/// Whether an open failed because the database could not be reached (or would not take a
/// connection yet), not because it refused this client or holds no usable store.
fn unreachable(e: &anyhow::Error) -> bool {
    match e.downcast_ref::<StoreError>() {
        Some(StoreError::Backend(BackendError::Unavailable(_))) => true,
        Some(StoreError::Backend(BackendError::Database { source, .. })) => {
            // No SQLSTATE: the connection itself failed (refused, reset, timed out).
            source.code().is_none_or(|c| {
                let c = c.code();
                // Connection exceptions, and a server starting or shutting down.
                c.starts_with("08") || c.starts_with("57P")
            })
        }
        _ => false,
    }
}

/// Wait `d`, answering health requests on `listener` with 503 and `why`; false at a stop
/// signal.
async fn pause(d: Duration, listener: Option<&TcpListener>, why: &str) -> bool {
    let end = tokio::time::Instant::now() + d;
    loop {
        if crate::cli::early_signals::stops() > 0 {
            return false;
        }
        let left = end.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return true;
        }
        let tick = left.min(TICK);
        match listener {
            Some(l) => tokio::select! {
                _ = tokio::time::sleep(tick) => {}
                Ok((sock, _)) = l.accept() => {
                    tokio::spawn(answer(sock, format!("unhealthy: {why}\n")));
                }
            },
            None => tokio::time::sleep(tick).await,
        }
    }
}

/// 503 with `body` to whatever was asked (`/healthz` and `/metrics` alike: nothing runs yet).
async fn answer(mut sock: tokio::net::TcpStream, body: String) {
    // The request is read (its head, within a second) so the client sees an answer, not a reset.
    let mut buf = [0u8; 2048];
    let _ = tokio::time::timeout(Duration::from_secs(1), sock.read(&mut buf)).await;
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = sock.write_all(head.as_bytes()).await;
    let _ = sock.write_all(body.as_bytes()).await;
    let _ = sock.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_unreachable_database_is_waited_for() {
        let gone = anyhow::Error::new(StoreError::Backend(BackendError::Unavailable(
            "pool closed".into(),
        )));
        assert!(unreachable(&gone));
        let io = anyhow::Error::new(StoreError::Backend(BackendError::Io {
            path: "/x".into(),
            source: std::io::Error::other("disk"),
        }));
        assert!(!unreachable(&io));
        assert!(!unreachable(&anyhow::anyhow!("no jobs file")));
        assert!(is_database("postgres://h/db") && is_database("postgresql://h/db"));
        assert!(!is_database("/var/lib/cronsole"));
        let r = reason(DateTime::<Utc>::UNIX_EPOCH, "connection refused");
        assert_eq!(
            r,
            "store unreachable since 1970-01-01T00:00:00Z, not started: connection refused"
        );
    }
}

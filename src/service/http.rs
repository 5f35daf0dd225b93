//! The `--metrics-addr` HTTP endpoint: `GET /metrics` (Prometheus text) and `GET /healthz`
//! (`200 ok` while the engine loop turns, claims and the store answers; `503` and the reason
//! otherwise — "store unwritable since …, claims stopped" for as long as an outage lasts).
//!
//! Owns: the listener, request parsing (just the request line: GET/HEAD and a path; one request
//! per connection, `Connection: close`) and the health decision. Must not touch: the engine or
//! the store beyond read-only calls. No HTTP server crate: two fixed read-only routes need ~100
//! lines, and a full server would be the largest dependency in the binary.
//!
//! Bounds: at most [`MAX_CONNECTIONS`] connections at once; past that the oldest one still
//! sending its head is dropped for the new one (or the new one is closed at once when every
//! connection is being answered), so idle or slowloris connections never keep `/healthz` away;
//! [`HEAD_TIMEOUT`] to send the request head, 8 KiB of head; a store probe
//! answers within 2 s or the check fails. `/metrics` is served from one shared, cached
//! exposition ([`Metrics::scrape`]: one paged store read at a time), so concurrent scrapers
//! neither multiply store reads nor memory, and `/healthz` never waits for them (16 clients
//! polling a 20 001-job store once took `/healthz` down and grew the owner to ~1 GB).

use crate::store::BackendError;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::metrics::{CONTENT_TYPE, Metrics};
use crate::clock::Clock;
use crate::engine::{EngineHealth, Heartbeat};
use crate::store::Store;

/// Everything the endpoint reads.
#[derive(Clone)]
pub struct Endpoint {
    pub metrics: Arc<Metrics>,
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    pub heartbeat: Arc<Heartbeat>,
    /// Cancelled when the engine stopped (health turns 503).
    pub engine_stopped: CancellationToken,
    /// The engine's view of its store: 503 while it claims nothing (an outage), naming why.
    pub health: watch::Receiver<EngineHealth>,
    /// The loop must have turned within this long (a few `change_poll`s).
    pub max_quiet: Duration,
}

/// Parse `--metrics-addr` (`HOST:PORT`, `[v6]:PORT`): bad input names the value.
pub fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    let mut it = s.to_socket_addrs().map_err(|e| {
        format!("--metrics-addr {s}: expected HOST:PORT (e.g. 127.0.0.1:9464): {e}")
    })?;
    it.next()
        .ok_or_else(|| format!("--metrics-addr {s}: the host resolves to no address"))
}

/// Bind `addr` (the caller reports a bind failure) and serve until `stop` is cancelled.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Most connections served at once. When all are taken, the oldest one still sending its
/// request head is dropped for the new one (an idle or slowloris connection must not keep
/// `/healthz` away from a supervisor); when every one is past its head, the new connection is
/// closed at once.
pub const MAX_CONNECTIONS: usize = 64;
/// Time a client has to send its whole request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(3);
/// A `/metrics` request asks an engine loop that has not turned for this long to turn once: an
/// idle loop turns only when something happens, and its counters are proof of life only if they
/// can move. However many scrapers there are, that is at most one extra turn (one change-token
/// read) per this interval.
pub const LOOP_NUDGE: Duration = Duration::from_millis(100);

/// The connections alive, and those still reading their head (oldest first) with the token
/// that drops each.
#[derive(Default)]
struct Conns {
    live: usize,
    next_id: u64,
    reading: std::collections::VecDeque<(u64, CancellationToken)>,
}

type Shared = Arc<std::sync::Mutex<Conns>>;

fn lock(c: &Shared) -> std::sync::MutexGuard<'_, Conns> {
    // A panic while holding this lock leaves plain counters behind: keep using them.
    c.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Admit a new connection: its id and drop token, or `None` when it must be refused.
fn admit(conns: &Shared) -> Option<(u64, CancellationToken)> {
    let mut c = lock(conns);
    if c.live >= MAX_CONNECTIONS {
        let (_, oldest) = c.reading.pop_front()?;
        oldest.cancel();
        // Its task ends soon and gives its place back; count the new one beside it meanwhile.
    }
    c.live += 1;
    c.next_id += 1;
    let id = c.next_id;
    let token = CancellationToken::new();
    c.reading.push_back((id, token.clone()));
    Some((id, token))
}

/// Gives a connection's place back when its task ends.
struct Place {
    conns: Shared,
    id: u64,
}

impl Place {
    fn head_read(&self) {
        lock(&self.conns).reading.retain(|(i, _)| *i != self.id);
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut c = lock(&self.conns);
        c.live = c.live.saturating_sub(1);
        c.reading.retain(|(i, _)| *i != self.id);
    }
}

pub async fn serve(listener: TcpListener, ep: Endpoint, stop: CancellationToken) {
    let conns: Shared = Arc::default();
    loop {
        let conn = tokio::select! {
            _ = stop.cancelled() => return,
            c = listener.accept() => c,
        };
        match conn {
            Ok((sock, _)) => {
                let Some((id, dropped)) = admit(&conns) else {
                    drop(sock);
                    continue;
                };
                let place = Place {
                    conns: Arc::clone(&conns),
                    id,
                };
                let ep = ep.clone();
                tokio::spawn(async move {
                    if let Err(e) = handle(sock, &ep, &place, &dropped).await {
                        tracing::debug!(error = %e, "metrics connection");
                    }
                    drop(place);
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "metrics endpoint: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn handle(
    mut sock: TcpStream,
    ep: &Endpoint,
    place: &Place,
    dropped: &CancellationToken,
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let read = tokio::time::timeout(HEAD_TIMEOUT, async {
        let mut chunk = [0u8; 1024];
        loop {
            let n = sock.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            if buf.windows(4).any(|w| w == b"\r\n\r\n") || buf.len() > 8192 {
                break;
            }
        }
        Ok::<(), std::io::Error>(())
    });
    let head = tokio::select! {
        _ = dropped.cancelled() => return Ok(()),
        r = read => r,
    };
    if head.is_err() {
        return Ok(());
    }
    place.head_read();
    let line = buf
        .split(|b| *b == b'\n')
        .next()
        .map(|l| String::from_utf8_lossy(l).trim().to_string())
        .unwrap_or_default();
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    // The body is shared, not copied: every `/metrics` request holds the one cached exposition;
    // the engine loop's counters follow it, read live (a cached figure would not show the turns
    // a waiter is waiting for).
    let mut live = String::new();
    let (status, ctype, body): (&str, &str, Arc<str>) = if method != "GET" && method != "HEAD" {
        (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET and HEAD\n".into(),
        )
    } else {
        match path {
            "/metrics" => {
                ep.heartbeat.poke_if_quiet(LOOP_NUDGE);
                let text = ep.metrics.scrape(&ep.store, &ep.clock).await;
                live = super::metrics::loop_counters(&ep.heartbeat);
                ("200 OK", CONTENT_TYPE, text)
            }
            "/healthz" => match health(ep).await {
                Ok(()) => ("200 OK", "text/plain; charset=utf-8", "ok\n".into()),
                Err(why) => (
                    "503 Service Unavailable",
                    "text/plain; charset=utf-8",
                    format!("unhealthy: {why}\n").into(),
                ),
            },
            _ => (
                "404 Not Found",
                "text/plain; charset=utf-8",
                "not found: try /metrics or /healthz\n".into(),
            ),
        }
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len() + live.len()
    );
    sock.write_all(head.as_bytes()).await?;
    if method != "HEAD" {
        sock.write_all(body.as_bytes()).await?;
        sock.write_all(live.as_bytes()).await?;
    }
    sock.shutdown().await
}

/// `Ok` when the engine loop turned recently, claims (no outage), and the store answers a real
/// read.
pub async fn health(ep: &Endpoint) -> Result<(), String> {
    if ep.engine_stopped.is_cancelled() {
        return Err("the engine has stopped".into());
    }
    let stopped = ep.health.borrow().claims_stopped_because();
    if let Some(why) = stopped {
        return Err(why);
    }
    // The store first, within 2 s: at the start of an outage the engine loop is itself waiting
    // on the store (its first failure not yet seen), and asking the loop first would hold the
    // probe for up to `max_quiet` before it answered 503. A probe with a 1–3 s timeout then saw
    // a hang, not the reason.
    match tokio::time::timeout(
        Duration::from_secs(2),
        crate::store::blocking(&ep.store, |store| store.settings().map(|_| ())),
    )
    .await
    {
        Ok(Ok(())) => {}
        Ok(Err(e @ crate::store::StoreError::Backend(BackendError::Task { .. }))) => {
            return Err(format!("the store probe failed: {e}"));
        }
        Ok(Err(e)) => return Err(format!("the store does not answer: {e}")),
        Err(_) => return Err("the store did not answer within 2 s".into()),
    }
    let quiet = ep.heartbeat.check(ep.max_quiet).await;
    if quiet > ep.max_quiet {
        return Err(format!(
            "the engine loop has not turned for {:.1} s",
            quiet.as_secs_f64()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::model::{JobsFile, Settings};
    use crate::store::file::FileStore;
    use crate::store::*;
    use crate::testkit::store::{Call, Hooks, Wrapped};
    use chrono::{DateTime, Utc};

    /// A file store whose whole-store read is refused: `/metrics` must read pages.
    struct PagesOnly;

    impl Hooks for PagesOnly {
        fn before(&self, call: Call) -> StoreResult<()> {
            match call {
                Call::Jobs => Err(StoreError::Backend(BackendError::Unsupported(
                    "reading every job at once",
                ))),
                Call::JobsPage { limit } => {
                    assert!(limit <= super::super::metrics::REFRESH_PAGE);
                    Ok(())
                }
                _ => Ok(()),
            }
        }
    }

    const JOBS: usize = 1_800;

    fn big_store(dir: &std::path::Path, now: DateTime<Utc>) -> Arc<dyn Store> {
        let fs = FileStore::open(dir).unwrap();
        let jobs = (0..JOBS)
            .map(|i| crate::testkit::jobs::command_job(&format!("j{i:05}"), 3600))
            .collect();
        fs.apply(
            &JobsFile {
                settings: Settings::default(),
                jobs,
            },
            now,
        )
        .unwrap();
        Arc::new(Wrapped::new(Arc::new(fs), PagesOnly))
    }

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    /// A store whose reads hang (a black-holed network path).
    struct Silent;

    impl Hooks for Silent {
        fn before(&self, call: Call) -> StoreResult<()> {
            if call == Call::Settings {
                std::thread::sleep(Duration::from_secs(3));
            }
            Ok(())
        }
    }

    /// A store that stopped answering while the engine loop also waits on it (the outage not yet
    /// seen): `/healthz` names the store after its 2 s probe, without first waiting for the loop
    /// for `max_quiet`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_silent_store_is_named_by_the_health_probe_before_the_loop_is_waited_for() {
        let dir = crate::testkit::tmp::TempDir::new("health-silent");
        let t0 = crate::testkit::time::base(0);
        let inner: Arc<dyn Store> = Arc::new(FileStore::open(dir.path()).unwrap());
        let store: Arc<dyn Store> = Arc::new(Wrapped::new(inner, Silent));
        let heartbeat = Arc::new(Heartbeat::default());
        let ep = Endpoint {
            metrics: Arc::new(Metrics::new()),
            store,
            clock: Arc::new(ManualClock::new(t0)),
            heartbeat: Arc::clone(&heartbeat),
            engine_stopped: CancellationToken::new(),
            health: watch::channel(EngineHealth::default()).1,
            max_quiet: Duration::from_millis(1),
        };
        // The loop last turned longer ago than `max_quiet` (its age is on the real clock), and
        // nothing answers a poke.
        std::thread::sleep(Duration::from_millis(5));
        let answer = health(&ep).await;
        assert_eq!(
            answer,
            Err("the store did not answer within 2 s".to_string()),
            "{answer:?}"
        );
    }

    /// 16 clients polling `/metrics` on a 20 001-job store must not knock out `/healthz` nor
    /// grow the owner to ~1 GB: many concurrent requests share one computation (one
    /// exposition in memory, read in pages) and `/healthz` answers meanwhile.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_scrapes_share_one_paged_computation_and_healthz_answers() {
        let dir = crate::testkit::tmp::TempDir::new("metrics-big");
        let t0 = crate::testkit::time::base(0);
        let store = big_store(dir.path(), t0);
        let clock = ManualClock::new(t0);
        let ep = Endpoint {
            metrics: // A computation that takes longer than the default wait (a loaded machine, a debug
            // build) would make requests answer with the older text: wait for it here.
            Arc::new(Metrics::new().with_scrape_wait(Duration::from_secs(300))),
            store,
            clock: Arc::new(clock.clone()),
            heartbeat: Arc::new(Heartbeat::default()),
            engine_stopped: CancellationToken::new(),
            health: watch::channel(EngineHealth::default()).1,
            max_quiet: Duration::from_secs(3600),
        };
        // The same exposition, not a copy per request.
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..32 {
            let m = Arc::clone(&ep.metrics);
            let (st, cl) = (Arc::clone(&ep.store), Arc::clone(&ep.clock));
            set.spawn(async move { m.scrape(&st, &cl).await });
        }
        let texts = set.join_all().await;
        assert!(texts.iter().all(|t| Arc::ptr_eq(t, &texts[0])));
        assert_eq!(ep.metrics.computations(), 1);
        assert!(
            texts[0].contains(&format!("cronsole_jobs{{state=\"idle\"}} {JOBS}")),
            "{}",
            texts[0]
        );

        // Over HTTP, once the exposition is stale: 48 requests, one computation, and /healthz.
        // Freshness and computing time are both read from the test's clock (which does not
        // move while the store is read), so 2 s is past the 1 s minimum however slow the read.
        clock.advance(chrono::Duration::seconds(2));
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(listener, ep.clone(), stop.clone()));
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..48 {
            set.spawn(get(addr, "/metrics"));
        }
        let health = get(addr, "/healthz").await;
        assert!(
            health.starts_with("HTTP/1.1 200") && health.ends_with("ok\n"),
            "{health}"
        );
        for r in set.join_all().await {
            assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        }
        assert_eq!(ep.metrics.computations(), 2);
        let last = get(addr, "/metrics").await;
        assert!(last.contains(&format!("cronsole_jobs{{state=\"idle\"}} {JOBS}")));
        assert_eq!(ep.metrics.computations(), 2, "still fresh: no third read");
        stop.cancel();
        server.await.unwrap();
    }
}

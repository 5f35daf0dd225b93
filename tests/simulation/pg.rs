//! The PostgreSQL variant of the simulator: the same owners, operators and invariants, with the
//! owners' connections going through a seeded TCP proxy on loopback that cuts, stalls and
//! resets them at random byte offsets (so mid-transaction: between `BEGIN` and `COMMIT`, or
//! with the `COMMIT` sent and its reply lost). The checker connects directly.
//!
//! A real server's timing is not ours to replay: the proxy's choices come from the seed, but
//! where a cut lands depends on how the bytes were chunked by the kernel, so a failing seed
//! here is a lead to investigate, not an exact replay (the file store's seeds are exact).
#![allow(unsafe_code)] // signals, forks and polls real processes through libc

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use cronsole::store::StoreError;
use cronsole::store::postgres::{PgClock, PgOptions, PgStore};
use cronsole::testkit::simio::{Rng, SharedRng, shared_rng};

use crate::support;
use crate::world::{Backend, Params, Proc, World};

/// What the proxy does to one connection.
#[derive(Debug, Clone, Copy)]
enum Plan {
    Clean,
    /// Close both sides after this many bytes (a FIN).
    Cut(u64),
    /// Abort with a TCP RST after this many bytes.
    Reset(u64),
    /// Hold the bytes for a while after this many bytes, then go on.
    Stall(u64, u64),
}

struct Shared {
    rng: SharedRng,
    on: AtomicBool,
    stop: AtomicBool,
    /// Probability that a new connection gets a fault.
    p: f64,
    log: Mutex<Vec<String>>,
    socks: Mutex<Vec<TcpStream>>,
    conns: AtomicU64,
}

/// A seeded fault-injecting TCP proxy on 127.0.0.1 in front of `upstream`.
pub struct Proxy {
    pub port: u16,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

fn rst(s: &TcpStream) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a socket we own, with a correctly sized `linger` value.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

impl Proxy {
    pub fn start(upstream: u16, rng: SharedRng, p: f64) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared {
            rng,
            on: AtomicBool::new(true),
            stop: AtomicBool::new(false),
            p,
            log: Mutex::new(Vec::new()),
            socks: Mutex::new(Vec::new()),
            conns: AtomicU64::new(0),
        });
        let sh = Arc::clone(&shared);
        let accept = std::thread::spawn(move || {
            while !sh.stop.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let _ = client.set_nonblocking(false);
                        let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                            continue;
                        };
                        serve(&sh, client, server);
                    }
                    Err(_) => {
                        // The listener is non-blocking: the accept loop's pace.
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
            }
        });
        Ok(Proxy {
            port,
            shared,
            accept: Some(accept),
        })
    }

    pub fn faults(&self, on: bool) {
        self.shared.on.store(on, Ordering::SeqCst);
    }

    pub fn take_log(&self) -> Vec<String> {
        std::mem::take(&mut *self.shared.log.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        for s in self
            .shared
            .socks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            let _ = s.shutdown(Shutdown::Both);
        }
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

fn serve(sh: &Arc<Shared>, client: TcpStream, server: TcpStream) {
    let n = sh.conns.fetch_add(1, Ordering::SeqCst);
    let plan = if sh.on.load(Ordering::SeqCst) {
        let mut r = sh.rng.lock().unwrap_or_else(|e| e.into_inner());
        plan_for(&mut r, sh.p)
    } else {
        Plan::Clean
    };
    if !matches!(plan, Plan::Clean) {
        sh.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(format!("proxy: connection {n} will {plan:?}"));
    }
    {
        let mut socks = sh.socks.lock().unwrap_or_else(|e| e.into_inner());
        for s in [&client, &server] {
            if let Ok(c) = s.try_clone() {
                socks.push(c);
            }
        }
    }
    let bytes = Arc::new(AtomicU64::new(0));
    let pairs = [
        (client.try_clone(), server.try_clone()),
        (server.try_clone(), client.try_clone()),
    ];
    for (from, to) in pairs {
        let (Ok(mut from), Ok(mut to)) = (from, to) else {
            continue;
        };
        let bytes = Arc::clone(&bytes);
        let sh = Arc::clone(sh);
        let client = client.try_clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            let mut stalled = false;
            loop {
                if sh.stop.load(Ordering::SeqCst) {
                    break;
                }
                let k = match from.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(k) => k,
                };
                let total = bytes.fetch_add(k as u64, Ordering::SeqCst) + k as u64;
                match plan {
                    Plan::Cut(at) if total >= at => break,
                    Plan::Reset(at) if total >= at => {
                        if let Ok(c) = &client {
                            rst(c);
                        }
                        rst(&to);
                        break;
                    }
                    Plan::Stall(at, ms) if total >= at && !stalled => {
                        stalled = true;
                        // The fault: a stalled connection.
                        std::thread::sleep(Duration::from_millis(ms));
                    }
                    _ => {}
                }
                if to.write_all(&buf[..k]).is_err() {
                    break;
                }
            }
            let _ = from.shutdown(Shutdown::Both);
            let _ = to.shutdown(Shutdown::Both);
        });
    }
}

fn plan_for(r: &mut Rng, p: f64) -> Plan {
    if !r.chance(p) {
        return Plan::Clean;
    }
    let at = r.range(200, 20_000);
    match r.below(3) {
        0 => Plan::Cut(at),
        1 => Plan::Reset(at),
        _ => Plan::Stall(at, r.range(100, 2_500)),
    }
}

struct PgBackend {
    direct: String,
    proxied: String,
    proxy: Proxy,
}

fn opts() -> PgOptions {
    PgOptions {
        pool_size: 2,
        connect_timeout: Duration::from_secs(2),
        op_timeout: Duration::from_secs(2),
        // The simulator's owners share its virtual clock.
        clock: PgClock::Caller,
    }
}

impl Backend for PgBackend {
    fn open(&mut self, faulty: bool) -> Result<Proc, (StoreError, bool)> {
        let url = if faulty { &self.proxied } else { &self.direct };
        match PgStore::open_with(url, opts()) {
            Ok(s) => Ok(Proc {
                store: Box::new(s),
                alive: Box::new(|| true),
            }),
            Err(e) => Err((e, true)),
        }
    }

    fn power_loss(&mut self) -> bool {
        false
    }

    fn epoch(&self) -> u64 {
        0
    }

    fn fault_log(&mut self) -> Vec<String> {
        self.proxy.take_log()
    }

    fn faults_off(&mut self) {
        self.proxy.faults(false);
    }
}

fn port_of(url: &str) -> Option<u16> {
    let after = url.split('@').nth(1)?;
    let hostport = after.split('/').next()?;
    hostport.rsplit(':').next()?.parse().ok()
}

/// Run the PostgreSQL seeds (`SIM_PG_SEEDS`, default 2; `SIM_PG_FIRST`; `SIM_PG_LOOPS=1` adds
/// agents with tools).
pub fn run_batch() {
    let Some(url) = support::pg::database() else {
        return;
    };
    let Some(port) = port_of(&url) else {
        panic!("cannot read the port of the test database URL {url}");
    };
    let first = crate::env_u64("SIM_PG_FIRST").unwrap_or(0);
    let n = crate::env_u64("SIM_PG_SEEDS").unwrap_or(2);
    let mut failures = Vec::new();
    let start = std::time::Instant::now();
    for seed in first..first + n {
        // A fresh database per seed: the invariants are about one store's history.
        let db = if seed == first {
            url.clone()
        } else {
            match support::pg::database() {
                Some(u) => u,
                None => return,
            }
        };
        let rng = shared_rng(seed);
        let proxy = match Proxy::start(port, rng.clone(), 0.15) {
            Ok(p) => p,
            Err(e) => panic!("starting the proxy: {e}"),
        };
        let proxied = db.replacen(&format!(":{port}/"), &format!(":{}/", proxy.port), 1);
        let mut backend = PgBackend {
            direct: db.clone(),
            proxied,
            proxy,
        };
        let params = Params {
            steps: 60,
            max_owners: 3,
            power_loss_step: 0.0,
            deterministic: false,
            chains: false,
            // Tool loops' steps through the proxy too (`SIM_PG_LOOPS=1`): each turn reserved
            // and each call recorded in one transaction that the proxy may cut.
            loops: std::env::var("SIM_PG_LOOPS").is_ok_and(|v| v == "1"),
            clocks: false,
        };
        match World::new(seed, rng, &mut backend, params).run() {
            Ok(s) => eprintln!(
                "postgres seed {seed}: ok ({} claims, {} completions, {} tool calls recorded, {} store errors)",
                s.claims, s.completions, s.tool_calls, s.store_errors
            ),
            Err(f) => failures.push(f),
        }
    }
    eprintln!(
        "postgres: {n} seeds in {:.1} s, {} failing",
        start.elapsed().as_secs_f64(),
        failures.len()
    );
    if let Some(f) = failures.first() {
        panic!("{f}");
    }
}

//! Wake-up latency, measured from outside: `cronsole trigger alpha` run as its
//! own process → the run's `started_at` in history, with two `cronsole run` owners sharing the
//! store. Both stores; each with the change signal (LISTEN/NOTIFY, inotify) and without it
//! (`CRONSOLE_CHANGE_SIGNAL=off`: the 250 ms change-token poll, the behaviour before signals).
//!
//! Run: `cargo bench --bench wake` (release). `WAKE_N` sets the triggers per case (default 30).
//! PostgreSQL: `CRONSOLE_TEST_PG_URL`, else a throwaway cluster (initdb), else file store only.
#![allow(clippy::unwrap_used)] // test code
#![allow(unsafe_code)] // signals, forks and polls real processes through libc

#[path = "../tests/support/pg.rs"]
mod pg;

use std::os::unix::net::UnixDatagram;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use cronsole::model::Trigger;
use cronsole::store::{HistoryQuery, Store};
use cronsole::testkit::stats::percentile;

const BIN: &str = env!("CARGO_BIN_EXE_cronsole");
const JOBS: &str = "jobs:\n  - name: alpha\n    schedule: \"0 0 1 1 *\"\n    command: \"true\"\n";

struct Owners(Vec<Child>);

impl Drop for Owners {
    fn drop(&mut self) {
        for c in &mut self.0 {
            // SAFETY: kill(2) on our own child.
            unsafe {
                libc::kill(c.id() as i32, libc::SIGTERM);
            }
        }
        for c in &mut self.0 {
            let _ = c.wait();
        }
    }
}

fn manual_runs(store: &dyn Store) -> Vec<chrono::DateTime<Utc>> {
    store
        .history(&HistoryQuery {
            job: Some("alpha".into()),
            limit: 1000,
            ..Default::default()
        })
        .expect("history")
        .into_iter()
        .filter(|r| r.trigger == Trigger::Manual)
        .map(|r| r.started_at)
        .collect()
}

fn case(name: &str, store_arg: &str, store: &dyn Store, signal: bool, n: usize) {
    let dir = cronsole::testkit::tmp::TempDir::new("wake");
    std::fs::write(dir.join("jobs.yaml"), JOBS).expect("jobs file");
    let sock_path = dir.join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).expect("bind notify socket");
    sock.set_read_timeout(Some(Duration::from_secs(30))).ok();
    let owners = Owners(
        (0..2)
            .map(|_| {
                Command::new(BIN)
                    .current_dir(&dir)
                    .args(["run", "--jobs", "jobs.yaml", "--store", store_arg])
                    .env("NOTIFY_SOCKET", &sock_path)
                    .env("CRONSOLE_CHANGE_SIGNAL", if signal { "on" } else { "off" })
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("start owner")
            })
            .collect(),
    );
    let mut ready = 0;
    let mut buf = [0u8; 512];
    while ready < 2 {
        let k = sock.recv(&mut buf).expect("owners ready");
        if String::from_utf8_lossy(&buf[..k])
            .lines()
            .any(|l| l == "READY=1")
        {
            ready += 1;
        }
    }
    let mut lat = Vec::with_capacity(n);
    for i in 0..n {
        // Spread trigger times over the 250 ms poll period so the poll case is not phase-locked.
        std::thread::sleep(Duration::from_millis(50 + (i as u64 * 37) % 250));
        let before = manual_runs(store).len();
        let t0 = Utc::now();
        let st = Command::new(BIN)
            .current_dir(&dir)
            .args(["--store", store_arg, "trigger", "alpha"])
            .stdout(Stdio::null())
            .status()
            .expect("trigger");
        assert!(st.success(), "trigger failed");
        let deadline = Instant::now() + Duration::from_secs(10);
        let started = loop {
            let runs = manual_runs(store);
            if runs.len() > before {
                break runs[0];
            }
            assert!(Instant::now() < deadline, "run did not start");
            std::thread::sleep(Duration::from_millis(5));
        };
        lat.push((started - t0).num_microseconds().unwrap_or(0) as f64 / 1000.0);
    }
    drop(owners);
    lat.sort_by(f64::total_cmp);
    let pick = |q: f64| percentile(&lat, q);
    println!(
        "{name:<9} {:<7} 2 owners, {n} triggers: trigger→start median {:.1} ms, p90 {:.1} ms, max {:.1} ms",
        if signal { "signal" } else { "poll" },
        pick(0.5),
        pick(0.9),
        pick(1.0)
    );
}

fn main() {
    let n = std::env::var("WAKE_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let dir = cronsole::testkit::tmp::TempDir::new("wake-store");
    let fs_arg = dir.to_string_lossy().into_owned();
    let fs: Arc<dyn Store> =
        Arc::new(cronsole::store::file::FileStore::open(&dir).expect("file store"));
    for signal in [false, true] {
        case("file", &fs_arg, fs.as_ref(), signal, n);
    }
    let _cluster;
    let server = match std::env::var("CRONSOLE_TEST_PG_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => match pg::Cluster::start() {
            Ok(c) => {
                let u = c.url.clone();
                _cluster = c;
                Some(u)
            }
            Err(e) => {
                eprintln!("PostgreSQL not available ({e}); file store only");
                None
            }
        },
    };
    if let Some(server) = server {
        let db = format!("cronsole_wake_{}", uuid::Uuid::new_v4().simple());
        pg::exec(&server, &format!("CREATE DATABASE {db}")).expect("create database");
        let url = pg::with_db(&server, &db);
        let st: Arc<dyn Store> =
            Arc::new(cronsole::store::postgres::PgStore::open(&url).expect("pg store"));
        for signal in [false, true] {
            case("postgres", &url, st.as_ref(), signal, n);
        }
    }
}

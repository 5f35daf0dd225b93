//! Store outages of any length end by themselves, on the real binary and both stores: the file
//! store on a small tmpfs the test fills and frees, PostgreSQL on a private cluster the test
//! stops and starts (never the shared one). Through the outage `/healthz` answers 503 naming
//! it, the metrics show since when and how many probes were made, and the log has its start
//! and end; within 12 s of the store coming back claims resume and `/healthz` is 200 again,
//! and every execution is recorded exactly once.
//!
//! A `run` started while PostgreSQL is down waits for it, `/healthz` 503 meanwhile.
//!
//! CI runs outages of 5 s and 45 s on both stores; the 5-minute ones are run by hand:
//! `cargo test --release --test store_outage -- --ignored --nocapture`.
#![allow(clippy::unwrap_used)] // test code

mod owner_support;
mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use chrono::Utc;
use owner_support::{Owner, OwnerSpec, SmallDisk};

/// How a trial makes the store unwritable and writable again.
enum Outage {
    Disk(SmallDisk),
    Server(support::pg::Cluster),
}

impl Outage {
    fn begin(&self) {
        match self {
            Outage::Disk(d) => {
                d.fill();
            }
            Outage::Server(c) => c.stop().expect("stop the cluster"),
        }
    }

    fn end(&self) {
        match self {
            Outage::Disk(d) => d.free(),
            Outage::Server(c) => c.start_again().expect("start the cluster again"),
        }
    }
}

/// Health polls after detection must all be 503: allow this long after the outage begins for
/// the owner's next store write to fail.
const DETECT: Duration = Duration::from_secs(3);
/// Claims resume and `/healthz` is 200 within this long after the store is back.
const RESUME: Duration = Duration::from_secs(12);

fn jobs_yaml(dir: &Path) -> String {
    let marks = dir.join("marks");
    format!(
        "budget: null\njobs:\n  - name: tick\n    schedule: every 1s\n    run_immediately: true\n    \
         max_retries: 1\n    command: \"{}\"\n  - name: long\n    schedule: every 3s\n    \
         max_retries: 1\n    command: \"{}\"\n",
        owner_support::marking_command(&marks, "tick", 0.0),
        owner_support::marking_command(&marks, "long", 2.5),
    )
}

fn trial(outage: Outage, store: String, dir: &Path, secs: u64) {
    let jobs = dir.join("jobs.yaml");
    std::fs::write(&jobs, jobs_yaml(dir)).unwrap();
    let spec = OwnerSpec {
        store: store.clone(),
        jobs: Some(jobs),
        ..Default::default()
    };
    let owner = Owner::start("owner", dir, &spec);
    let marks = dir.join("marks");
    owner.wait_for("three executions", Duration::from_secs(60), |_| {
        owner_support::marks(&marks).len() >= 3
    });

    outage.begin();
    let down = Instant::now();
    let down_at = Utc::now();
    let mut polls: Vec<(Duration, u16, String)> = Vec::new();
    let mut mid_metrics = None;
    while down.elapsed() < Duration::from_secs(secs) {
        let (code, body) = owner.get("/healthz").unwrap_or((0, "no answer".into()));
        polls.push((down.elapsed(), code, body));
        if mid_metrics.is_none() && down.elapsed() > DETECT {
            mid_metrics = owner.get("/metrics").map(|(_, b)| b);
        }
        // The health check's sampling pace during the outage (what is asserted is the samples).
        std::thread::sleep(Duration::from_millis(250));
    }
    let executions_in_outage = owner_support::marks(&marks).len();
    outage.end();
    let up = Instant::now();
    let up_at = Utc::now();

    let healthy = support::wait::poll_until(Duration::from_secs(60), || {
        owner.get("/healthz").is_some_and(|(c, _)| c == 200)
    });
    let healthy_after = healthy.then(|| up.elapsed());
    // The first run claimed after the store came back (its row's start, on our clock).
    let mut resumed_after = None;
    support::wait::poll_until(Duration::from_secs(60), || {
        resumed_after = owner_support::history(dir, &store)
            .iter()
            .filter_map(|r| owner_support::at(r, "started_at"))
            .filter(|s| *s > up_at)
            .min()
            .map(|s| (s - up_at).to_std().unwrap_or_default());
        resumed_after.is_some()
    });
    let after_metrics = owner.get("/metrics").map(|(_, b)| b).unwrap_or_default();
    // The end of the outage is logged when the first write goes through.
    support::wait::poll_until(Duration::from_secs(30), || {
        owner.log().iter().any(|l| l.contains("claims resumed"))
    });
    let log = owner.log();
    let code = owner.stop();

    let rows = owner_support::history(dir, &store);
    let marks = owner_support::marks(&marks);
    let checked: Vec<_> = polls.iter().filter(|(t, _, _)| *t >= DETECT).collect();
    let not_503: Vec<_> = checked
        .iter()
        .filter(|(_, c, b)| *c != 503 || !b.contains("unwritable"))
        .collect();
    eprintln!(
        "outage {secs}s: {} health polls ({} after detection, all 503: {}), healthy {:?} and \
         first claim {:?} after the store came back, {} executions ({} by the end of the \
         outage), {} rows, exit {code}",
        polls.len(),
        checked.len(),
        not_503.is_empty(),
        healthy_after,
        resumed_after,
        marks.len(),
        executions_in_outage,
        rows.len(),
    );
    let mid = mid_metrics.unwrap_or_default();
    let since = owner_support::metric_value(&mid, "cronsole_store_outage_since_seconds");
    let probes = owner_support::metric_value(&mid, "cronsole_store_outage_probes_total");
    eprintln!("mid-outage metrics: since {since:?}, probes {probes:?}");

    assert!(
        not_503.is_empty(),
        "/healthz was not 503 naming the outage throughout: {not_503:?}"
    );
    assert!(
        since.is_some_and(|s| (s - down_at.timestamp() as f64).abs() < 10.0),
        "the outage gauge holds its start: {since:?} (began {down_at})"
    );
    assert!(
        probes.is_some_and(|p| p >= 1.0),
        "probes counted: {probes:?}"
    );
    assert!(
        healthy_after.is_some_and(|d| d <= RESUME),
        "healthz back to 200 after {healthy_after:?}"
    );
    assert!(
        resumed_after.is_some_and(|d| d <= RESUME),
        "claims resumed after {resumed_after:?}"
    );
    assert_eq!(
        owner_support::metric_value(&after_metrics, "cronsole_store_outage_since_seconds"),
        Some(0.0),
        "the gauge is 0 once the store takes writes"
    );
    let log_text = log.join("\n");
    assert!(
        log_text.contains("store unwritable") && log_text.contains("claims resumed"),
        "the outage's start and end are logged:\n{log_text}"
    );
    assert_eq!(code, 0, "a clean stop after the outage:\n{log_text}");
    let problems = owner_support::recorded_once(&marks, &rows);
    assert!(problems.is_empty(), "{problems:#?}");
}

fn file_trial(secs: u64) {
    let dir = support::tempdir(&format!("outage-file-{secs}"));
    let disk = match SmallDisk::mount(&dir.join("disk"), 16 << 20) {
        Ok(d) => d,
        Err(e) => {
            support::skip("a tmpfs to fill", &e);
            return;
        }
    };
    let store = disk.dir.join("store").display().to_string();
    trial(Outage::Disk(disk), store, &dir, secs);
}

fn pg_trial(secs: u64) {
    let Some(cluster) = support::pg::private_cluster() else {
        return;
    };
    let dir = support::tempdir(&format!("outage-pg-{secs}"));
    let url = cluster.url.clone();
    trial(Outage::Server(cluster), url, &dir, secs);
}

/// `cronsole run` started while its database is down waits for it instead of exiting 1:
/// meanwhile `/healthz` answers 503 naming the wait, again and again (the process stays up and
/// retries); once the database is back the engine starts, runs the jobs and answers 200, and a
/// stop then exits 0.
#[test]
fn run_started_while_postgres_is_down_waits_for_it() {
    let Some(cluster) = support::pg::private_cluster() else {
        return;
    };
    let dir = support::tempdir("outage-pg-start");
    let jobs = dir.join("jobs.yaml");
    std::fs::write(&jobs, jobs_yaml(&dir)).unwrap();
    cluster.stop().expect("stop the cluster");
    let url = cluster.url.clone();
    let owner = Owner::start(
        "waiting",
        &dir,
        &OwnerSpec {
            store: url.clone(),
            jobs: Some(jobs),
            ..Default::default()
        },
    );
    let waiting = std::cell::Cell::new(0u32);
    owner.wait_for("five 503s naming the wait", Duration::from_secs(30), |o| {
        match o.get("/healthz") {
            Some((503, body)) if body.contains("store unreachable since") => {
                waiting.set(waiting.get() + 1);
            }
            other => panic!("while the database is down: {other:?}"),
        }
        waiting.get() >= 5
    });
    cluster.start_again().expect("start the cluster again");
    owner.wait_for("/healthz 200", Duration::from_secs(30), |o| {
        o.get("/healthz").is_some_and(|(code, _)| code == 200)
    });
    owner.wait_for("a run", Duration::from_secs(30), |_| {
        owner_support::history(&dir, &url)
            .iter()
            .any(|r| r["job"] == "tick" && r["status"] == "succeeded")
    });
    let log = owner.log();
    assert_eq!(owner.stop(), 0, "{log:#?}");
    assert!(
        log.iter().any(|l| l.contains("store unreachable at start")),
        "{log:#?}"
    );
}

/// A stop signal while `run` waits for an unreachable database (nothing listens on its port)
/// ends the wait gracefully: exit 0, the engine never started.
#[test]
fn a_stop_while_run_waits_for_its_database_exits_0() {
    let dir = support::tempdir("outage-pg-start-stop");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let owner = Owner::start(
        "waiting",
        &dir,
        &OwnerSpec {
            store: format!("postgres://postgres@127.0.0.1:{port}/postgres"),
            ..Default::default()
        },
    );
    owner.wait_for("a 503 naming the wait", Duration::from_secs(30), |o| {
        o.get("/healthz")
            .is_some_and(|(code, body)| code == 503 && body.contains("store unreachable since"))
    });
    let log = owner.log();
    assert_eq!(owner.stop(), 0, "{log:#?}");
}

#[test]
fn file_store_full_for_5s() {
    file_trial(5);
}

#[test]
fn file_store_full_for_45s() {
    file_trial(45);
}

#[test]
fn postgres_down_for_5s() {
    pg_trial(5);
}

#[test]
fn postgres_down_for_45s() {
    pg_trial(45);
}

#[test]
#[ignore = "5 minutes: run by hand"]
fn file_store_full_for_5min() {
    file_trial(300);
}

#[test]
#[ignore = "5 minutes: run by hand"]
fn postgres_down_for_5min() {
    pg_trial(300);
}

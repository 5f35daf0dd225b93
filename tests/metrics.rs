//! `--metrics-addr` on the real binary: Prometheus text at /metrics with the
//! documented families, /healthz 200 while healthy and 503 with a reason when the store stops
//! answering, and a bad address refused as bad input.
#![allow(clippy::unwrap_used)] // test code

mod support;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use support::daemon::Daemon;
use support::scrape::{get, metric};
use support::wait::{poll_until, wait_until};

fn spawn(dir: &std::path::Path, extra: &[&str]) -> Daemon {
    Daemon::spawn(
        support::cli::cronsole(dir)
            .args(["run", "--jobs", "jobs.yaml", "--store", "store"])
            .args(extra),
    )
}

#[test]
fn metrics_and_health_are_served_by_the_real_binary() {
    let dir = support::tempdir("metrics");
    std::fs::write(
        dir.join("jobs.yaml"),
        "jobs:\n  - name: alpha\n    schedule: \"0 0 1 1 *\"\n    command: \"true\"\n    max_cost_usd: 0.5\n  - name: beta\n    schedule: \"0 0 1 1 *\"\n    command: \"true\"\n  - name: tick\n    schedule: every 1s\n    command: \"true\"\n",
    )
    .unwrap();
    let d = spawn(&dir, &["--metrics-addr", "127.0.0.1:0"]);
    let addr = d.metrics_addr();

    // Healthy once the engine turns.
    if !poll_until(Duration::from_secs(20), || get(&addr, "/healthz").0 == 200) {
        panic!("never healthy: {:?}", get(&addr, "/healthz"));
    }
    assert_eq!(get(&addr, "/healthz").1, "ok\n");

    // A run from another process shows up in the counters and histograms.
    let st = support::cli::command()
        .current_dir(&dir)
        .args(["--store", "store", "trigger", "alpha"])
        .status()
        .unwrap();
    assert!(st.success());
    let text = poll_metrics(&addr, |body| {
        metric(
            body,
            r#"cronsole_runs_total{job="alpha",status="succeeded"}"#,
        ) == Some(1.0)
            && metric(body, r#"cronsole_fire_lateness_seconds_count{job="tick"}"#)
                .is_some_and(|n| n >= 1.0)
    });
    assert_eq!(
        metric(&text, r#"cronsole_run_duration_seconds_count{job="alpha"}"#),
        Some(1.0),
        "{text}"
    );
    // The engine loop's own counters are read live: the triggered run took a claim cycle, and
    // each request asks the idle loop to turn, so the idle-turn count moves between requests.
    assert!(
        metric(&text, "cronsole_claim_cycles_total ").is_some_and(|n| n >= 1.0),
        "{text}"
    );
    assert!(
        text.contains("# TYPE cronsole_loop_turns_quiet_total counter"),
        "{text}"
    );
    support::scrape::settle(&addr);
    assert!(
        text.contains("# TYPE cronsole_fire_lateness_seconds histogram"),
        "{text}"
    );
    let idle = metric(&text, r#"cronsole_jobs{state="idle"}"#).unwrap_or(0.0);
    let running = metric(&text, r#"cronsole_jobs{state="running"}"#).unwrap_or(0.0);
    assert_eq!(idle + running, 3.0, "{text}");
    assert_eq!(
        metric(&text, r#"cronsole_jobs{state="paused"}"#),
        Some(0.0),
        "{text}"
    );
    assert_eq!(metric(&text, "cronsole_leases "), Some(running), "{text}");
    assert_eq!(
        metric(&text, "cronsole_store_errors_total "),
        Some(0.0),
        "{text}"
    );
    // The jobs file's default budget ($1/day) and alpha's own cap, nothing spent.
    assert_eq!(
        metric(&text, r#"cronsole_budget_remaining_usd{scope="global"}"#),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        metric(&text, r#"cronsole_budget_remaining_usd{scope="job:alpha"}"#),
        Some(0.5),
        "{text}"
    );
    assert!(!text.contains(r#"scope="job:beta""#), "{text}");

    // Pausing from outside moves the jobs gauge.
    let st = support::cli::command()
        .current_dir(&dir)
        .args(["--store", "store", "pause", "beta"])
        .status()
        .unwrap();
    assert!(st.success());
    // An exposition is shared for at least a second (so scrapers cannot make the
    // store work per request): the change shows once the
    // cached one is stale.
    let text = poll_metrics(&addr, |t| {
        metric(t, r#"cronsole_jobs{state="paused"}"#) == Some(1.0)
    });
    assert_eq!(
        metric(&text, r#"cronsole_jobs{state="idle"}"#).unwrap_or(0.0)
            + metric(&text, r#"cronsole_jobs{state="running"}"#).unwrap_or(0.0),
        2.0,
        "{text}"
    );

    assert_eq!(get(&addr, "/nope").0, 404);

    // The store goes away: health says why, with 503, and store errors are counted.
    std::fs::remove_dir_all(dir.join("store")).unwrap();
    let (code, body) = get(&addr, "/healthz");
    assert_eq!(code, 503, "{body}");
    // Either the health probe or the engine's own claim notices first; both say why.
    assert!(
        body.contains("store does not answer") || body.contains("store unwritable since"),
        "{body}"
    );
    poll_metrics(&addr, |t| {
        metric(t, "cronsole_store_errors_total ").unwrap_or(0.0) >= 1.0
    });
    drop(d);
}

/// `/metrics` until `done` holds for its text (at most 20 s).
fn poll_metrics(addr: &str, done: impl Fn(&str) -> bool) -> String {
    let mut body = String::new();
    let held = poll_until(Duration::from_secs(20), || {
        let (code, text) = get(addr, "/metrics");
        assert_eq!(code, 200);
        body = text;
        done(&body)
    });
    assert!(held, "{body}");
    body
}

#[test]
fn a_bad_metrics_address_is_bad_input() {
    let dir = support::tempdir("metrics");
    std::fs::write(
        dir.join("jobs.yaml"),
        "jobs:\n  - name: alpha\n    schedule: \"0 0 1 1 *\"\n    command: \"true\"\n",
    )
    .unwrap();
    let out = support::cli::command()
        .current_dir(&dir)
        .args([
            "run",
            "--jobs",
            "jobs.yaml",
            "--store",
            "store",
            "--metrics-addr",
            "nonsense",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--metrics-addr nonsense"), "{err}");
}

#[test]
fn an_attached_console_refuses_metrics_it_cannot_serve() {
    let out = support::cli::command()
        .args(["console", "--attach", "--metrics-addr", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`console --attach` runs none"), "{err}");
}

/// Idle connections that never finish their request head (slowloris) do not keep
/// `/healthz` away: past the connection cap the oldest of them is dropped for the new one.
#[test]
fn idle_connections_do_not_starve_healthz() {
    let dir = support::tempdir("metrics-idle");
    std::fs::write(
        dir.join("jobs.yaml"),
        "jobs:\n  - name: tick\n    schedule: every 1s\n    command: \"true\"\n",
    )
    .unwrap();
    let d = spawn(&dir, &["--metrics-addr", "127.0.0.1:0"]);
    let addr = d.metrics_addr();
    wait_until("healthy", Duration::from_secs(20), || {
        get(&addr, "/healthz").0 == 200
    });
    // Three times the cap of idle connections, each with an unfinished head.
    let idle: Vec<TcpStream> = (0..3
        * cronsole::testkit::internals::service::http::MAX_CONNECTIONS)
        .map(|_| {
            let mut s = TcpStream::connect(&addr).unwrap();
            s.write_all(b"GET /healthz HTTP/1.1\r\nX-Slow: ").unwrap();
            s
        })
        .collect();
    // Before the fix the answer waited for the idle ones to time out in batches of 16 (a
    // minute for 192): `get`'s 10 s read timeout fails then.
    let (code, body) = get(&addr, "/healthz");
    assert_eq!((code, body.as_str()), (200, "ok\n"));
    drop(idle);
}

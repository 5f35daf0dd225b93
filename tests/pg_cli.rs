//! The CLI over `--store postgres://…`: apply/jobs/pause/trigger through the binary, a pause from
//! `cronsole pause` (another process) reaching a listening owner within 1 s, and exit codes for a
//! bad URL (2) and an unreachable server (1).
#![allow(clippy::unwrap_used)] // test code

mod support;
use support::wait::wait_until;

use std::time::{Duration, Instant};

use cronsole::store::postgres::PgStore;
use cronsole::store::{HistoryReader, Store};

fn run(store: &str, args: &[&str], dir: &std::path::Path) -> (i32, String, String) {
    support::cli::run_with_store(dir, store, args)
}

#[test]
fn cli_pause_reaches_a_running_owner_within_a_second() {
    let url = pg_db_or_skip!();
    let dir = support::tempdir("pgcli");
    std::fs::write(
        dir.join("jobs.yaml"),
        "jobs:\n  - name: alpha\n    schedule: every 1h\n    command: \"echo a\"\n",
    )
    .unwrap();
    let (c, out, err) = run(&url, &["apply", "jobs.yaml"], &dir);
    assert_eq!(c, 0, "{out}{err}");
    assert!(out.contains("alpha"), "{out}");

    let owner = PgStore::open(&url).unwrap();
    wait_until("the listener", Duration::from_secs(10), || {
        owner.listener_alive()
    });
    let before = owner.change_token().unwrap();
    let (c, _, err) = run(&url, &["pause", "alpha"], &dir);
    let exited = Instant::now();
    assert_eq!(c, 0, "{err}");
    wait_until(
        "the pause to reach the owner",
        Duration::from_secs(1),
        || owner.change_token().unwrap() != before,
    );
    eprintln!(
        "pause visible to the owner {:?} after `cronsole pause` exited",
        exited.elapsed()
    );
    assert!(owner.job("alpha").unwrap().unwrap().rt.paused);

    let (c, out, _) = run(&url, &["jobs", "--json"], &dir);
    assert_eq!(c, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v[0]["name"], "alpha");
    let (c, out, _) = run(&url, &["trigger", "alpha"], &dir);
    assert_eq!(c, 0);
    assert!(out.contains("triggered alpha"), "{out}");
    assert_eq!(run(&url, &["pause", "ghost"], &dir).0, 2);
}

#[test]
fn bad_url_is_exit_2_and_unreachable_server_is_exit_1() {
    let dir = std::env::temp_dir();
    let (c, _, err) = run(
        "postgres://u:pw@127.0.0.1:5432/x?sslmode=nope",
        &["jobs"],
        &dir,
    );
    assert_eq!(c, 2, "{err}");
    assert!(!err.contains("pw@"), "{err}");
    let (c, _, err) = run("postgres://postgres@127.0.0.1:1/x", &["jobs"], &dir);
    assert_eq!(c, 1, "{err}");
    assert!(err.contains("database error"), "{err}");
}

//! A test whose dependency (PostgreSQL, tmux, openssl) is missing says so — a
//! `SKIPPED TEST` line that shows in a plain `cargo test` run — and `.ci/totals` (the CI totals
//! line) counts it as skipped, not passed, with `#[ignore]`d worker processes counted apart.
//! Under `CI=true` the same missing dependency fails the test.
//!
//! The child is this test executable re-run on its ignored worker with `PATH` emptied, so
//! `tmux` cannot be found.
#![allow(clippy::unwrap_used)] // test code

mod support;

use std::path::Path;
use std::process::Command;

const ENV_WORKER: &str = "CRONSOLE_SKIP_WORKER";

/// The worker: a test that needs tmux, run with no PATH by the tests below.
#[test]
#[ignore = "worker process for the skip-reporting tests (run by them as a child process)"]
fn skip_worker() {
    if std::env::var_os(ENV_WORKER).is_none() {
        return;
    }
    if !support::tmux_or_skip() {
        return;
    }
    panic!("tmux was found with an empty PATH");
}

/// Run the worker the way `cargo test` runs any test (output captured), CI set or not; returns
/// (exit code, stdout + stderr).
fn run_worker(ci: bool) -> (i32, String) {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => panic!("current_exe: {e}"),
    };
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", "skip_worker", "--ignored", "--test-threads=1"])
        .env(ENV_WORKER, "1")
        .env("PATH", "")
        .env_remove("CRONSOLE_TEST_KEEP");
    if ci {
        cmd.env("CI", "true");
    } else {
        cmd.env_remove("CI");
    }
    let (code, out, err) = support::cli::output(&mut cmd);
    (code, format!("{out}{err}"))
}

fn totals(dir: &Path, log: &str) -> String {
    let path = dir.join("test.log");
    if let Err(e) = std::fs::write(&path, log) {
        panic!("writing {}: {e}", path.display());
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/totals");
    let (code, out, err) = support::cli::output(Command::new("bash").arg(script).arg(&path));
    assert_eq!(code, 0, "{out}{err}");
    out
}

#[test]
fn a_missing_dependency_is_reported_skipped_and_counted_as_skipped() {
    let (code, log) = run_worker(false);
    assert_eq!(code, 0, "{log}");
    assert!(
        log.contains("SKIPPED TEST ci_totals::skip_worker (tmux not available: running `tmux -V`"),
        "the SKIP line must show without --nocapture: {log}"
    );
    let dir = support::tempdir("ci-totals");
    let out = totals(&dir, &log);
    assert!(
        out.ends_with(
            "total: 0 passed, 0 failed, 1 skipped (dependency missing), \
             0 worker processes run by their parent tests, 0 other ignored\n"
        ),
        "{out}"
    );
    assert!(
        out.contains("skipped (a dependency is missing here):\n  ci_totals::skip_worker (tmux"),
        "{out}"
    );
}

#[test]
fn under_ci_a_missing_dependency_fails() {
    let (code, log) = run_worker(true);
    assert_ne!(code, 0, "{log}");
    assert!(log.contains("tmux is required under CI=true"), "{log}");
    assert!(!log.contains("SKIPPED TEST"), "{log}");
}

#[test]
fn totals_keep_workers_and_other_ignored_apart_from_skips() {
    let log = "\
running 4 tests
test a ... ok
test worker ... ignored, worker process for the multi-process tests
test known_bug ... ignored, bug 5: a missed row written twice
SKIPPED TEST pg_store::roundtrip (PostgreSQL not available: initdb/pg_ctl not found)
SKIPPED TEST pg_store::roundtrip (PostgreSQL not available: initdb/pg_ctl not found)
test roundtrip ... ok
test result: ok. 2 passed; 0 failed; 2 ignored; 0 measured; 0 filtered out; finished in 0.01s

running 3 tests
test b ... ok
test c ... FAILED
test d ... ok
test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s
";
    let dir = support::tempdir("ci-totals");
    let out = totals(&dir, log);
    assert_eq!(
        out,
        "skipped (a dependency is missing here):\n  \
         pg_store::roundtrip (PostgreSQL not available: initdb/pg_ctl not found)\n\
         total: 3 passed, 1 failed, 1 skipped (dependency missing), \
         1 worker processes run by their parent tests, 1 other ignored\n"
    );
}

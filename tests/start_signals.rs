//! A stop signal at any moment of `cronsole run`'s start-up ends it gracefully with exit 0:
//! the handlers are the first thing `main` installs, so a SIGTERM while the jobs file is read,
//! the store opened or the engine started is a graceful stop, never the default death (143).
//!
//! Each trial waits until the process catches SIGTERM (its `SigCgt` mask in `/proc`), the
//! earliest moment a handler can exist, then signals it after a delay spread over start-up.
#![allow(clippy::unwrap_used)] // test code
#![allow(unsafe_code)] // signals, forks and polls real processes through libc

mod support;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

const JOBS: &str = "budget: null\njobs:\n  - name: tick\n    schedule: every 1s\n    run_immediately: true\n    command: echo tick\n";

/// Whether `pid` catches signal `sig` (bit `sig - 1` of `SigCgt`).
fn catches(pid: u32, sig: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .is_some_and(|m| m & (1 << (sig - 1)) != 0)
}

fn start(dir: &Path) -> Child {
    support::cli::cronsole(dir)
        .args(["run", "--jobs", "jobs.yaml", "--store", "store"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn cronsole run")
}

fn wait(mut child: Child, what: &str) -> (i32, String) {
    support::wait::wait_until(format!("{what}: the exit"), Duration::from_secs(60), || {
        child.try_wait().expect("wait").is_some()
    });
    let out = child.wait_with_output().expect("output");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    use std::os::unix::process::ExitStatusExt;
    let code = out
        .status
        .code()
        .unwrap_or_else(|| 128 + out.status.signal().unwrap_or(0));
    (code, err)
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill on a child we spawned and have not reaped.
    unsafe {
        libc::kill(child.id() as i32, sig);
    }
}

#[test]
fn a_stop_signal_at_any_moment_of_start_up_exits_zero_after_a_graceful_stop() {
    let d = support::tempdir("start-signals");
    std::fs::write(d.join("jobs.yaml"), JOBS).unwrap();
    let delays_ms = [0u64, 1, 2, 5, 10, 20, 35, 50, 100, 300];
    let mut results = Vec::new();
    for (i, delay) in delays_ms.iter().enumerate() {
        let child = start(&d);
        let t = Instant::now();
        while !catches(child.id(), libc::SIGTERM) {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "the process never caught SIGTERM"
            );
            std::thread::yield_now();
        }
        // The fault's moment: the signal comes this long after the handler is installed.
        std::thread::sleep(Duration::from_millis(*delay));
        let sig = if i % 3 == 2 {
            libc::SIGINT
        } else {
            libc::SIGTERM
        };
        signal(&child, sig);
        let (code, err) = wait(child, &format!("signal after {delay} ms"));
        results.push((*delay, code));
        assert_eq!(code, 0, "signal {sig} {delay} ms after the handler: {err}");
    }
    eprintln!("delay ms → exit: {results:?}");
    // Whatever moment the stops came at, the store is sound.
    let (code, out, err) = support::cli::run_plain(&d, &["check", "--store", "store"]);
    assert_eq!(code, 0, "{out}{err}");
}

/// A second stop signal during start-up cancels the runs in flight at once (not after the 30 s
/// grace), and the process still ends with a consistent store (exit 0).
#[test]
fn a_second_stop_signal_during_start_up_stops_at_once() {
    let d = support::tempdir("start-signals-twice");
    std::fs::write(
        d.join("jobs.yaml"),
        "budget: null\njobs:\n  - name: slow\n    schedule: every 1s\n    run_immediately: true\n    command: sleep 30\n",
    )
    .unwrap();
    for delay in [0u64, 150, 600] {
        let child = start(&d);
        let t = Instant::now();
        while !catches(child.id(), libc::SIGTERM) {
            assert!(t.elapsed() < Duration::from_secs(30));
            std::thread::yield_now();
        }
        // The fault's moment: the signal comes this long after the handler is installed.
        std::thread::sleep(Duration::from_millis(delay));
        let started = Instant::now();
        signal(&child, libc::SIGTERM);
        // Two standard signals pending at once are one: the second comes once the first landed.
        std::thread::sleep(Duration::from_millis(300));
        signal(&child, libc::SIGTERM);
        let (code, err) = wait(child, "two signals");
        assert_eq!(code, 0, "{err}");
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the second signal did not cut the 30 s grace: {err}"
        );
    }
    let (code, out, err) = support::cli::run_plain(&d, &["check", "--store", "store"]);
    assert_eq!(code, 0, "{out}{err}");
}

//! The headless binary as a daemon: systemd readiness and watchdog over a
//! `$NOTIFY_SOCKET` this test binds, SIGHUP re-applying `--jobs` (a bad file reported, the
//! running definitions kept), `STOPPING=1` at shutdown, and journald-style logs on stderr.
#![allow(clippy::unwrap_used)] // test code

mod support;

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::time::{Duration, Instant};

use support::daemon::Daemon;

fn spawn(dir: &Path, env: &[(&str, &str)], extra: &[&str]) -> Daemon {
    let mut cmd = support::cli::cronsole(dir);
    cmd.args(["run", "--jobs", "jobs.yaml", "--store", "store"])
        .args(extra)
        .env_remove("NOTIFY_SOCKET")
        .env_remove("WATCHDOG_USEC")
        .env_remove("WATCHDOG_PID")
        .env_remove("JOURNAL_STREAM");
    for (k, v) in env {
        cmd.env(k, v);
    }
    Daemon::spawn(&mut cmd)
}

fn recv_until(sock: &UnixDatagram, needle: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "no {needle:?} datagram; got {got:#?}");
        sock.set_read_timeout(Some(left)).unwrap();
        match sock.recv(&mut buf) {
            Ok(n) => {
                let m = String::from_utf8_lossy(&buf[..n]).into_owned();
                let done = m.lines().any(|l| l == needle);
                got.push(m);
                if done {
                    return got;
                }
            }
            Err(e) => panic!("no {needle:?} datagram ({e}); got {got:#?}"),
        }
    }
}

fn jobs_list(dir: &Path) -> String {
    let (code, out, err) = support::cli::run_with_store(dir, "store", &["jobs"]);
    assert_eq!(code, 0, "{err}");
    out
}

const ONE: &str = "jobs:\n  - name: alpha\n    schedule: \"0 0 1 1 *\"\n    command: \"true\"\n";

#[test]
fn ready_watchdog_sighup_reload_and_stopping() {
    let dir = support::tempdir("daemon");
    std::fs::write(dir.join("jobs.yaml"), ONE).unwrap();
    let sock_path = dir.join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    let d = spawn(
        &dir,
        &[
            ("NOTIFY_SOCKET", sock_path.to_str().unwrap()),
            ("WATCHDOG_USEC", "200000"),
        ],
        &[],
    );
    let first = recv_until(&sock, "READY=1");
    assert!(
        first.last().unwrap().contains("STATUS=running jobs from"),
        "{first:?}"
    );
    recv_until(&sock, "WATCHDOG=1");

    // SIGHUP with a grown file: the new job is applied.
    std::fs::write(
        dir.join("jobs.yaml"),
        format!("{ONE}  - name: beta\n    schedule: \"0 0 1 1 *\"\n    command: \"true\"\n"),
    )
    .unwrap();
    d.signal(libc::SIGHUP);
    let l = d.wait_line("SIGHUP: re-applied");
    assert!(l.contains("1 created"), "{l}");
    assert!(jobs_list(&dir).contains("beta"));

    // SIGHUP with a broken file: reported with its position, nothing changes, still running.
    std::fs::write(
        dir.join("jobs.yaml"),
        "jobs:\n  - name: alpha\n    schedul: oops\n",
    )
    .unwrap();
    d.signal(libc::SIGHUP);
    d.wait_line("has errors; the running definitions stay");
    d.wait_line("jobs.yaml:3:");
    let jobs = jobs_list(&dir);
    assert!(jobs.contains("alpha") && jobs.contains("beta"), "{jobs}");
    recv_until(&sock, "WATCHDOG=1");

    d.signal(libc::SIGTERM);
    recv_until(&sock, "STOPPING=1");
    let mut d = d;
    let st = d.child.wait().unwrap();
    assert!(st.success(), "{st}");
}

#[test]
fn log_to_stderr_writes_journald_priority_lines() {
    let dir = support::tempdir("daemon");
    std::fs::write(dir.join("jobs.yaml"), ONE).unwrap();
    let d = spawn(&dir, &[], &["--log-to", "stderr"]);
    let l = d.wait_line("engine started");
    assert!(l.starts_with("<6>cronsole"), "{l}");
    d.signal(libc::SIGTERM);
    let mut d = d;
    assert!(d.child.wait().unwrap().success());
    assert!(
        !dir.join("store").join("logs").exists(),
        "no log directory with --log-to stderr"
    );
}

/// Each history row is written once to each output: on stdout (the headless row line) and once
/// in the log file; with `--log-to stderr` (the journal, which also collects stdout) the log
/// has no row lines, so the journal holds each row once.
#[test]
fn each_row_is_written_once_to_stdout_and_once_to_the_log() {
    let dir = support::tempdir("daemon-rows");
    std::fs::write(
        dir.join("jobs.yaml"),
        "jobs:\n  - name: tick\n    schedule: every 1s\n    command: \"true\"\n",
    )
    .unwrap();
    let row_lines = |text: &str| -> usize {
        text.lines()
            .filter(|l| l.contains("tick") && l.contains("trigger=schedule"))
            .count()
    };
    let run = |extra: &[&str]| {
        let mut args = vec![
            "run",
            "--jobs",
            "jobs.yaml",
            "--store",
            "store",
            "--for",
            "4s",
        ];
        args.extend_from_slice(extra);
        let (code, out, err) = support::cli::run_plain(&dir, &args);
        assert_eq!(code, 0, "{out}{err}");
        (out, err)
    };

    // Logs in the store's directory: the same rows as stdout, each once.
    let (out, err) = run(&[]);
    let printed = row_lines(&out);
    assert!(printed >= 2, "rows on stdout:\n{out}");
    assert_eq!(row_lines(&err), 0, "{err}");
    let logs = dir.join("store").join("logs");
    let mut logged = String::new();
    for f in std::fs::read_dir(&logs).unwrap() {
        logged.push_str(&std::fs::read_to_string(f.unwrap().path()).unwrap());
    }
    assert_eq!(
        row_lines(&logged),
        printed,
        "one log line per row:\n{logged}"
    );
    let (code, out, err) = support::cli::run_plain(
        &dir,
        &[
            "--store", "store", "logs", "--job", "tick", "--lines", "1000",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(row_lines(&out), printed, "{out}");

    // Logs on stderr (the journal): rows only on stdout.
    std::fs::remove_dir_all(&logs).unwrap();
    let (out, err) = run(&["--log-to", "stderr"]);
    assert!(row_lines(&out) >= 2, "{out}");
    assert_eq!(row_lines(&err), 0, "no row twice in the journal:\n{err}");
}

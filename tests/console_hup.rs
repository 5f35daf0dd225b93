//! The console treats SIGHUP as its terminal hanging up: it closes cleanly
//! (exit 0, a graceful engine shutdown, no lease left behind) rather than re-applying the jobs
//! file as the headless daemon does. The real binary runs inside `tmux`; reported skipped
//! (`SKIPPED TEST …`) when `tmux` is missing, except under `CI=true`.
#![allow(clippy::unwrap_used)] // test code
#![allow(unsafe_code)] // signals, forks and polls real processes through libc

mod support;
use support::wait::wait_until;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn tmux(args: &[&str]) -> String {
    let out = Command::new("tmux").args(args).output().expect("run tmux");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

#[test]
fn sighup_closes_the_console_cleanly() {
    if !support::tmux_or_skip() {
        return;
    }
    let dir = support::tempdir("hup");
    std::fs::write(
        dir.join("jobs.yaml"),
        "jobs:\n  - name: alpha\n    schedule: every 1s\n    command: \"true\"\n",
    )
    .unwrap();
    let bin = env!("CARGO_BIN_EXE_cronsole");
    // The inner shell records its pid and execs the console (same pid, foreground of the pane);
    // the outer shell records the exit code.
    let cmd = format!(
        "sh -c 'echo $$ > pid; exec {bin} --jobs jobs.yaml --store store'; echo EXIT=$? > exit.txt"
    );
    let session = format!("cronsole-hup-{}", std::process::id());
    let st = Command::new("tmux")
        .args([
            "new-session",
            "-d",
            "-s",
            &session,
            "-x",
            "120",
            "-y",
            "30",
            "-c",
        ])
        .arg(&dir)
        .args(["-e", "TERM=xterm-256color", &cmd])
        .status()
        .unwrap();
    assert!(st.success());
    let kill = scopeguard(&session);
    tmux(&["set-option", "-t", &session, "remain-on-exit", "on"]);
    wait_until("the console to draw alpha", Duration::from_secs(20), || {
        tmux(&["capture-pane", "-p", "-t", &session]).contains("alpha")
    });
    let pid: i32 = read(&dir.join("pid")).trim().parse().expect("pid file");
    // SAFETY: kill(2) on the console we started; no memory is touched.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    wait_until("the console to exit", Duration::from_secs(20), || {
        dir.join("exit.txt").exists()
    });
    assert_eq!(read(&dir.join("exit.txt")).trim(), "EXIT=0");
    let out = Command::new(bin)
        .current_dir(&dir)
        .args(["--store", "store", "jobs", "--json"])
        .output()
        .unwrap();
    let jobs: serde_json::Value = serde_json::from_slice(&out.stdout).expect("jobs --json");
    let alpha = &jobs[0];
    assert_eq!(alpha["name"], "alpha", "{jobs}");
    assert!(alpha["lease"].is_null(), "a lease was left behind: {jobs}");
    drop(kill);
}

/// Kills the tmux session when dropped (also on a failed assertion).
struct Session(String);

impl Drop for Session {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.0])
            .output();
    }
}

fn scopeguard(name: &str) -> Session {
    Session(name.to_string())
}

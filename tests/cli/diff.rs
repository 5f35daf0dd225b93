//! `cronsole diff` end to end: a headless engine runs a command monitor, the source
//! changes once, and `cronsole diff NAME` from another process prints the unified diff of the
//! changed run; `--run RUN_ID` picks a run; unknown jobs and malformed ids exit 2.
#![allow(clippy::unwrap_used)] // test code
#![allow(unsafe_code)] // signals, forks and polls real processes through libc

use crate::support;
use crate::support::wait::wait_until;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

fn cli(dir: &Path, args: &[&str]) -> Output {
    support::cli::cronsole(dir)
        .args(args)
        .args(["--store", "store"])
        .output()
        .expect("run cronsole")
}

fn succeeded(dir: &Path) -> Vec<serde_json::Value> {
    let out = cli(
        dir,
        &[
            "history",
            "--job",
            "watch",
            "--status",
            "succeeded",
            "--json",
        ],
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn diff_prints_the_changed_runs_unified_diff() {
    let dir = support::tempdir("cli-diff");
    std::fs::write(
        dir.join("jobs.yaml"),
        "jobs:\n  - name: watch\n    schedule: every 1s\n    monitor: { command: \"cat src.txt\" }\n    command: \"echo changed\"\n",
    )
    .expect("jobs file");
    std::fs::write(dir.join("src.txt"), "header\nvalue=1\nfooter\n").expect("source");
    let mut engine = Command::new(support::cli::BIN)
        .current_dir(&dir)
        .args([
            "run",
            "--jobs",
            "jobs.yaml",
            "--store",
            "store",
            "--for",
            "60s",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start engine");
    wait_until("the baseline run", Duration::from_secs(30), || {
        !succeeded(&dir).is_empty()
    });
    std::fs::write(dir.join("src.txt"), "header\nvalue=2\nfooter\n").expect("change source");
    wait_until("the changed run", Duration::from_secs(30), || {
        succeeded(&dir).len() >= 2
    });
    // SAFETY: plain kill(2) on our own child's pid.
    unsafe {
        libc::kill(engine.id() as i32, libc::SIGTERM);
    }
    let status = engine.wait().expect("engine exit");
    assert!(status.success(), "graceful shutdown exits 0: {status:?}");

    let out = cli(&dir, &["diff", "watch"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "--- previous",
        "+++ current",
        "-value=1",
        "+value=2",
        " header",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    assert!(
        !text.contains('\x1b'),
        "no colour when stdout is not a terminal:\n{text}"
    );

    // --run picks the run by id (the newest succeeded row is the changed one).
    let rows = succeeded(&dir);
    let id = rows[0]["run_id"].as_str().expect("run_id").to_string();
    let by_id = cli(&dir, &["diff", "watch", "--run", &id]);
    assert!(
        by_id.status.success(),
        "{}",
        String::from_utf8_lossy(&by_id.stderr)
    );
    assert!(String::from_utf8_lossy(&by_id.stdout).contains("+value=2"));

    assert_eq!(cli(&dir, &["diff", "nosuch"]).status.code(), Some(2));
    assert_eq!(
        cli(&dir, &["diff", "watch", "--run", "not-a-uuid"])
            .status
            .code(),
        Some(2)
    );
}

//! An owner told to stop while another process holds the store lock (an outside
//! `flock` on `<store>/lock`) does not wait the holder out. After its shutdown grace the lock
//! waits end; the completion it could not write goes to the spool, `run` exits 1 naming the
//! spool, and the next start writes it — nothing lost, nothing left `abandoned`.
#![allow(clippy::unwrap_used)] // test code
#![allow(unsafe_code)] // signals, forks and polls real processes through libc

mod support;
use support::wait::wait_until;

use std::fs::File;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use cronsole::model::Status;
use cronsole::store::file::FileStore;
use cronsole::store::{HistoryQuery, HistoryReader};
use support::cli::wait_timeout;

fn rows(store: &Path, job: &str) -> Vec<cronsole::model::HistoryRow> {
    FileStore::open(store)
        .unwrap()
        .history(&HistoryQuery {
            job: Some(job.into()),
            limit: 100,
            ..Default::default()
        })
        .unwrap()
}

#[test]
fn a_stop_while_another_process_holds_the_lock_spools_and_exits_1() {
    let d = support::tempdir("stopspool");
    let marks = d.join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let cwd = d.join("cwd");
    std::fs::create_dir_all(&cwd).unwrap();
    // A one-shot job: it runs once, so the one completion is the one to find again.
    std::fs::write(
        d.join("jobs.yaml"),
        format!(
            "budget: null\njobs:\n  - name: once\n    schedule: every 1s\n    once: true\n    \
             command: \"echo $$ > {m}/pid; touch {m}/started; sleep 1.5\"\n",
            m = marks.display()
        ),
    )
    .unwrap();
    let store = d.join("s");
    let out = support::cli::cronsole(&d)
        .args(["--store", "s", "apply", "jobs.yaml"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let child = support::cli::cronsole(&cwd)
        .args(["--store"])
        .arg(&store)
        .args(["run", "--for", "60s", "--shutdown-grace", "1s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the run to start", Duration::from_secs(20), || {
        marks.join("started").exists()
    });
    // Another process holds the store lock from before the run ends until after the stop.
    let lock = File::open(store.join("lock")).unwrap();
    fs4::FileExt::lock(&lock).unwrap();
    // The run's command ends; its completion then waits for the lock.
    let command: i32 = std::fs::read_to_string(marks.join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    wait_until("the run's command to end", Duration::from_secs(20), || {
        !support::pids::alive(command)
    });
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: signalling the child this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let (out, took) = wait_timeout(child, Duration::from_secs(40));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    fs4::FileExt::unlock(&lock).unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "took {took:?}; stderr: {stderr}"
    );
    let spool = store.join("spool").join("completions.jsonl");
    assert!(
        stderr.contains(&spool.display().to_string()),
        "the exit names the spool: {stderr}"
    );
    let spooled = std::fs::read_to_string(&spool).unwrap();
    assert_eq!(spooled.lines().count(), 1, "{spooled}");
    assert!(spooled.contains("\"once\""), "{spooled}");
    // The lock is free again: the next start writes the spooled completion first.
    let out = support::cli::cronsole(&cwd)
        .args(["--store"])
        .arg(&store)
        .args(["run", "--for", "2s"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let rows = rows(&store, "once");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].status, Status::Succeeded, "{rows:?}");
    assert!(
        std::fs::read_to_string(&spool).map_or(true, |s| s.trim().is_empty()),
        "the spool is emptied once written"
    );
}

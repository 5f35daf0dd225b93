//! Operator actions through the engine: a cancel requested through the store
//! (as `cronsole cancel` from another process does) kills the run's process tree and records the
//! row `failed` with reason `cancelled by operator`, without retrying it; a retry of a failed run
//! is a run of its own (`trigger: retry`) that leaves the schedule alone.
#![allow(clippy::unwrap_used)] // test code

use std::time::Duration as StdDuration;

use crate::engine_support::*;
use cronsole::engine::Command;
use cronsole::model::{Status, Trigger};

fn pid_alive(pid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_through_the_store_kills_the_tree_and_records_failed_once() {
    let dir = tmp("cancel-pid");
    std::fs::create_dir_all(&dir).unwrap();
    let pidfile = dir.join("pid");
    // A child process (the `sleep`) in the run's group; max_retries 3 would retry a failure.
    let yaml = format!(
        "budget: null\njobs:\n  - name: j\n    schedule: every 1h\n    max_retries: 3\n    \
         command: \"sleep 30 & echo $! > {} ; wait\"\n",
        pidfile.display()
    );
    let rig = Rig::start("cancel", &yaml, RigOpts::default()).await;
    let read_pid = || -> Option<i32> {
        std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse().ok())
    };
    wait_until_async("the run to start", StdDuration::from_secs(10), || {
        read_pid().is_some()
    })
    .await;
    let pid = read_pid().expect("a pid");
    assert!(pid_alive(pid));
    let (job, _) = rig.store.cancel("j", rig.now()).unwrap();
    assert_eq!(job, "j");
    let rows = rig.wait_rows("j", 1).await;
    assert_eq!(rows[0].status, Status::Failed);
    assert_eq!(rows[0].reason.as_deref(), Some("cancelled by operator"));
    wait_until_async(
        format!("the run's child {pid} to end with the cancel"),
        StdDuration::from_secs(5),
        || !pid_alive(pid),
    )
    .await;
    let rows = rig.settle("j").await;
    assert_eq!(rows.len(), 1, "a cancel is never retried: {rows:#?}");
    let rec = rig.store.job("j").unwrap().unwrap();
    assert!(rec.rt.lease.is_none() && rec.rt.queue.is_empty());
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_is_its_own_run_and_leaves_the_schedule_alone() {
    // The flag lives in a fresh directory: the first run fails, any later one succeeds.
    let flag_dir = tmp("retry-flag");
    let flag = flag_dir.join("flag");
    let yaml = format!(
        "budget: null\njobs:\n  - name: j\n    schedule: every 1h\n    max_retries: 1\n    \
         command: \"test -f {f} || {{ touch {f}; exit 3; }}\"\n",
        f = flag.display()
    );
    let rig = Rig::start("retry", &yaml, RigOpts::default()).await;
    let rows = rig.wait_rows("j", 1).await;
    assert_eq!(rows[0].status, Status::Failed, "{rows:#?}");
    let next = rig.store.job("j").unwrap().unwrap().rt.next_slot;
    rig.command(Command::Retry(rows[0].run_id)).await;
    let rows = rig.wait_rows("j", 2).await;
    assert_eq!(rows[1].trigger, Trigger::Retry, "{rows:#?}");
    assert_eq!(rows[1].slot, rows[0].slot);
    assert_eq!(rows[1].status, Status::Succeeded);
    let rec = rig.store.job("j").unwrap().unwrap();
    assert_eq!(rec.rt.next_slot, next);
    assert_eq!(rec.rt.runs, 1, "a retry does not count toward max_runs");
    assert_eq!(rig.settle("j").await.len(), 2);
    rig.stop().await;
}

//! `overlap:` policies through the engine, with real commands and a manual
//! wall clock: `cancel_previous` kills the live run's process and runs the new slot,
//! `buffer_one` runs the kept slot as soon as the live run ends, `allow` runs slots side by
//! side up to its bound and records the slot beyond it at once.
#![allow(clippy::unwrap_used)] // test code

use std::path::Path;
use std::time::Duration as StdDuration;

use crate::engine_support::*;
use cronsole::model::Status;

/// Wait (real time, bounded) until `path` exists.
async fn wait_file(path: &Path) {
    wait_until_async(path.display(), StdDuration::from_secs(20), || path.exists()).await;
}

/// Wait until the store shows `n` live runs of `job`.
async fn wait_live(rig: &Rig, job: &str, n: usize) {
    let live = || rig.store.job(job).unwrap().map_or(0, |r| r.rt.live_runs());
    if !poll_until_async(StdDuration::from_secs(20), || live() == n).await {
        panic!("{job} has {} live runs, not {n}", live());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_previous_kills_the_live_run_and_runs_the_new_slot() {
    let dir = tmp("ovl-cancel");
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.display();
    // The first run hangs (its `sleep` would outlive a lost kill); later runs end at once.
    let yaml = format!(
        "budget: null\njobs:\n  - name: j\n    schedule: every 10s\n    overlap: cancel_previous\n    \
         max_retries: 3\n    command: \"if [ -f {d}/first ]; then echo again; else touch {d}/first; \
         sleep 30 & echo $! > {d}/pid; wait; fi\"\n"
    );
    let rig = Rig::start("ovl-cancel", &yaml, RigOpts::default()).await;
    wait_file(&dir.join("pid")).await;
    let start = rig.now();
    rig.advance(10);
    let rows = rig.wait_rows("j", 2).await;
    assert_eq!(rows[0].status, Status::Failed);
    let want = format!(
        "cancelled: superseded by slot {}",
        (start + chrono::Duration::seconds(10)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    );
    assert_eq!(rows[0].reason.as_deref(), Some(want.as_str()));
    assert_eq!(rows[0].attempts, 0, "not retried");
    assert_eq!(rows[1].status, Status::Succeeded);
    assert_eq!(rows[1].slot, Some(start + chrono::Duration::seconds(10)));
    let pid: i32 = std::fs::read_to_string(dir.join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let gone = || {
        !Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap_or_default()
                .contains(") Z ")
    };
    wait_until_async(
        format!("the superseded run's child {pid} to end"),
        StdDuration::from_secs(5),
        gone,
    )
    .await;
    assert_eq!(rig.settle("j").await.len(), 2);
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffer_one_runs_the_kept_slot_when_the_run_ends() {
    let dir = tmp("ovl-buffer");
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.display();
    let yaml = format!(
        "budget: null\njobs:\n  - name: j\n    schedule: every 10s\n    overlap: buffer_one\n    \
         command: \"touch {d}/started; i=0; while [ ! -f {d}/go ] && [ $i -lt 400 ]; do sleep 0.05; \
         i=$((i+1)); done\"\n"
    );
    let rig = Rig::start("ovl-buffer", &yaml, RigOpts::default()).await;
    wait_file(&dir.join("started")).await;
    let start = rig.now();
    // Slots +10 and +20 come while the first run is live.
    rig.advance(25);
    assert!(rig.quiet("j").await.is_empty(), "nothing is recorded yet");
    std::fs::write(dir.join("go"), "").unwrap();
    let rows = rig.wait_rows("j", 3).await;
    let s = |n: i64| Some(start + chrono::Duration::seconds(n));
    assert_eq!((rows[0].status, rows[0].slot), (Status::Succeeded, s(0)));
    assert_eq!(
        (rows[1].status, rows[1].reason.as_deref(), rows[1].slot),
        (Status::Skipped, Some("overlap"), s(20))
    );
    assert_eq!(
        (rows[2].status, rows[2].slot),
        (Status::Succeeded, s(10)),
        "the kept slot runs at once"
    );
    assert_eq!(rig.settle("j").await.len(), 3);
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_runs_side_by_side_up_to_its_bound() {
    let dir = tmp("ovl-allow");
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.display();
    let yaml = format!(
        "budget: null\njobs:\n  - name: j\n    schedule: every 10s\n    overlap: allow\n    \
         max_concurrent_runs: 2\n    command: \"i=0; while [ ! -f {d}/go ] && [ $i -lt 400 ]; do \
         sleep 0.05; i=$((i+1)); done\"\n"
    );
    let rig = Rig::start("ovl-allow", &yaml, RigOpts::default()).await;
    wait_live(&rig, "j", 1).await;
    let start = rig.now();
    rig.advance(10);
    wait_live(&rig, "j", 2).await;
    // At the bound: the next slot is recorded `skipped` overlap at once.
    let rows = rig.step("j", 10, 1).await;
    assert_eq!(
        (rows[0].status, rows[0].reason.as_deref()),
        (Status::Skipped, Some("overlap"))
    );
    assert_eq!(rows[0].slot, Some(start + chrono::Duration::seconds(20)));
    std::fs::write(dir.join("go"), "").unwrap();
    let rows = rig.wait_rows("j", 3).await;
    assert_eq!(
        statuses(&rows[1..]),
        vec![Status::Succeeded, Status::Succeeded]
    );
    wait_live(&rig, "j", 0).await;
    rig.stop().await;
}

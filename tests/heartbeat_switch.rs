//! Process-level tests of the heartbeat switch (the supervisor's dead-man switch) with many
//! runs at once, the real binary on a temp dir: an owner stopped past its
//! lease has its runs killed by their supervisors, a row that says "killed" is written only for
//! a command that is dead and did not complete, and no one-shot's command completes twice —
//! neither through the stopped owner's retry nor through another owner's recovery.
//!
//! Owns: these scenarios only. Must not touch: the store except through its public API.
#![allow(clippy::unwrap_used)] // test code
#![allow(unsafe_code)] // signals, forks and polls real processes through libc

mod support;
use support::wait::poll_until;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use cronsole::model::{HistoryRow, Status};
use cronsole::store::file::FileStore;
use cronsole::store::{HistoryQuery, HistoryReader};
use support::cli::wait_timeout;
use support::pids::alive;
use support::tempdir as tmp;

/// Jobs in the burst: enough supervisors stalling at once that a `/proc` walk per supervisor
/// before its kill (the old order) is seconds of CPU on a busy 2-core machine.
const N: usize = 120;

fn owner(dir: &Path, store: &Path, jobs: &Path, zygote: bool) -> Child {
    let mut c = support::cli::cronsole(dir);
    if !zygote {
        c.env("CRONSOLE_ZYGOTE", "off");
    }
    c.args(["run", "--max-concurrent", "512", "--for", "150s", "--jobs"])
        .arg(jobs)
        .arg("--store")
        .arg(store)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn cronsole")
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) on a pid we spawned and have not yet reaped.
    let rc = unsafe { libc::kill(child.id() as i32, sig) };
    assert_eq!(rc, 0, "kill({}, {sig})", child.id());
}

fn rows(store: &Path) -> Vec<HistoryRow> {
    FileStore::open(store)
        .and_then(|s| {
            s.history(&HistoryQuery {
                limit: 1_000_000,
                ..Default::default()
            })
        })
        .unwrap_or_default()
}

/// Per job: the pids (the shell's `$$`) that started its command and those that completed it,
/// from the marker files the commands append to.
fn markers(dir: &Path) -> BTreeMap<String, (Vec<i32>, Vec<i32>)> {
    let mut out = BTreeMap::new();
    for i in 0..N {
        let job = format!("h{i:03}");
        let text = std::fs::read_to_string(dir.join("m").join(&job)).unwrap_or_default();
        let (mut s, mut d) = (Vec::new(), Vec::new());
        for line in text.lines() {
            let mut w = line.split_whitespace();
            let (Some(kind), Some(pid)) = (w.next(), w.next().and_then(|p| p.parse().ok())) else {
                continue;
            };
            match kind {
                "S" => s.push(pid),
                "D" => d.push(pid),
                _ => {}
            }
        }
        out.insert(job, (s, d));
    }
    out
}

fn killed(r: &HistoryRow) -> bool {
    r.attempt_log.iter().any(|a| {
        a.error
            .as_deref()
            .is_some_and(|e| e.contains("run killed: its owner sent no heartbeat"))
    }) || r
        .error
        .as_deref()
        .is_some_and(|e| e.contains("run killed: its owner sent no heartbeat"))
}

#[test]
fn a_stopped_owner_s_runs_are_killed_or_completed_never_both_and_never_twice() {
    burst(true);
}

/// The same through `__supervise` execs (the zygote off): the command shares its supervisor's
/// process group, so the switch kills the command itself first and its tree after.
#[test]
fn the_same_holds_with_the_zygote_off() {
    burst(false);
}

fn burst(zygote: bool) {
    let dir = tmp("hbswitch");
    let store: PathBuf = dir.join("store");
    let jobs = dir.join("jobs.yaml");
    std::fs::create_dir_all(dir.join("m")).unwrap();
    // Lease 8 s: the switch kills a run whose owner sent no heartbeat for 4 s (long enough that
    // a continued owner retrying 120 runs on a loaded 2-core machine still heartbeats in time).
    // Each command starts, waits for the `go` file (created when the owner is stopped), then
    // ends by itself 3.4 s to 4.6 s later (10 ms apart from job to job): around the moment the switch fires,
    // so some commands end before it, some are killed, and some end while it acts. Before the
    // fix the last kind were recorded "killed" (exit 125), retried, and completed twice.
    let at = (chrono::Utc::now() + chrono::Duration::seconds(2)).format("%Y-%m-%dT%H:%M:%SZ");
    let mut yaml =
        String::from("budget: null\ndefaults:\n  lease_seconds: 8\n  max_retries: 2\njobs:\n");
    for i in 0..N {
        let wait = 3400 + 10 * i;
        yaml.push_str(&format!(
            "  - name: h{i:03}\n    schedule: \"at:{at}\"\n    command: \"echo S $$ >> m/h{i:03}; while [ ! -e go ]; do sleep 0.1; done; sleep {}.{:03}; echo D $$ >> m/h{i:03}\"\n",
            wait / 1000,
            wait % 1000
        ));
    }
    std::fs::write(&jobs, yaml).unwrap();

    let a = owner(&dir, &store, &jobs, zygote);
    let started = poll_until(Duration::from_secs(60), || {
        markers(&dir).values().all(|(s, _)| !s.is_empty())
    });
    signal(&a, libc::SIGSTOP);
    std::fs::write(dir.join("go"), "").unwrap();
    let first: BTreeMap<String, i32> = markers(&dir)
        .into_iter()
        .filter_map(|(job, (s, _))| s.first().map(|p| (job, *p)))
        .collect();
    // Stopped past its lease (no other owner: the lease stays the stopped owner's, so it goes
    // on with its runs once continued — and retries the killed ones).
    std::thread::sleep(Duration::from_secs(10));
    signal(&a, libc::SIGCONT);
    let settled = poll_until(Duration::from_secs(90), || {
        let rows = rows(&store);
        (0..N).all(|i| {
            let job = format!("h{i:03}");
            rows.iter().any(|r| r.job == job)
        })
    });
    // What the killed rows say holds once they can be read: their first commands are dead.
    let rows_now = rows(&store);
    let alive_after_killed_row: Vec<_> = rows_now
        .iter()
        .filter(|r| killed(r))
        .filter_map(|r| {
            first
                .get(&r.job)
                .filter(|p| alive(**p))
                .map(|p| (&r.job, *p))
        })
        .collect();
    signal(&a, libc::SIGTERM);
    let (out, _) = wait_timeout(a, Duration::from_secs(60));
    assert!(started, "not every command started: {:?}", markers(&dir));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        alive_after_killed_row.is_empty(),
        "rows say killed, but the command lives: {alive_after_killed_row:?}"
    );
    let marks = markers(&dir);
    let rows = rows(&store);
    assert!(settled, "not every job has its row: {rows:#?}");
    // One completion per slot: no marker file shows two.
    let twice: Vec<_> = marks.iter().filter(|(_, (_, d))| d.len() > 1).collect();
    assert!(twice.is_empty(), "commands completed twice: {twice:?}");
    // The killed runs' pids are gone; every job completed once, and its row says succeeded.
    let living: Vec<_> = marks
        .iter()
        .flat_map(|(_, (s, _))| s.iter())
        .filter(|p| alive(**p))
        .collect();
    assert!(living.is_empty(), "commands still alive: {living:?}");
    let mut kills = 0;
    for (job, (_, d)) in &marks {
        let mine: Vec<_> = rows.iter().filter(|r| &r.job == job).collect();
        assert_eq!(mine.len(), 1, "{job}: {mine:#?}");
        let r = mine[0];
        kills += usize::from(killed(r));
        assert_eq!(d.len(), 1, "{job}: {:?} {r:#?}", marks[job]);
        assert_eq!(r.status, Status::Succeeded, "{job}: {r:#?}");
        // Each attempt recorded killed left no final line: only the last attempt completed.
        assert!(
            r.attempt_log.len() == 1 || killed(r),
            "{job}: retried without a kill: {r:#?}"
        );
    }
    eprintln!("zygote {zygote}: {N} runs, {kills} with an attempt killed by the switch");
}

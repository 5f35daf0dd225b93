//! Process-level properties of the file store: at-most-once claims across
//! threads and OS processes, load sharing, kill -9 recovery, crash safety, corruption handling.
//!
//! OS processes are this test executable re-run with `--exact <worker> --ignored` and the role in
//! `CRONSOLE_TEST_ROLE`; workers print one line per event on stdout.
#![allow(clippy::unwrap_used)] // test code

mod support;

use cronsole::testkit::store::{ClaimAt, FinishClaim, claim_row};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration as StdDuration, Instant};

use chrono::{DateTime, Duration, SubsecRound, Utc};
use cronsole::model::{HistoryRow, JobDef, JobsFile, Settings, Status};
use cronsole::store::file::FileStore;
use cronsole::store::{Claim, HistoryQuery, HistoryReader, Store};
use support::tempdir as tmp;
use uuid::Uuid;

fn def(name: &str, every: u64, lease: f64) -> JobDef {
    JobDef {
        lease_seconds: lease,
        ..cronsole::testkit::jobs::command_job(name, every)
    }
}

use cronsole::testkit::time::epoch as t;

fn env(k: &str) -> String {
    std::env::var(k).unwrap_or_default()
}

fn role() -> Option<String> {
    std::env::var("CRONSOLE_TEST_ROLE").ok()
}

fn spawn_worker(test: &str, vars: &[(&str, String)]) -> Child {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(exe);
    cmd.args([
        "--exact",
        test,
        "--nocapture",
        "--ignored",
        "--test-threads=1",
    ]);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    cmd.stdout(Stdio::piped()).stderr(Stdio::null());
    cmd.spawn().unwrap()
}

/// Lines the worker printed that start with `prefix ` (libtest adds its own noise).
fn lines_of(child: Child, prefix: &str) -> Vec<String> {
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| after(l, prefix))
        .collect()
}

/// The text after `PREFIX ` in a line (libtest may print its own text before ours).
fn after(line: &str, prefix: &str) -> Option<String> {
    let tag = format!("{prefix} ");
    line.find(&tag).map(|i| line[i + tag.len()..].to_string())
}

/// Complete claim `c` as `succeeded`, started at `started`, finished at `now`.
fn complete(store: &FileStore, c: &Claim, owner: &str, started: DateTime<Utc>, now: DateTime<Utc>) {
    let mut row = claim_row(c, owner, Status::Succeeded, now);
    row.started_at = started;
    store.finish_row(c, row);
}

// ---------------------------------------------------------------------------------------------
// Same-instant contention

const N_JOBS: usize = 500;

fn setup_500(dir: &Path) {
    let s = FileStore::open(dir).unwrap();
    let jobs = (0..N_JOBS)
        .map(|i| def(&format!("j{i:03}"), 3600, 300.0))
        .collect();
    s.apply(
        &JobsFile {
            settings: Settings::default(),
            jobs,
        },
        // One interval before the jobs' first slot, 1000.
        t(1000 - 3600),
    )
    .unwrap();
}

/// Claim with capacity `cap` (claims are never completed) until nothing is left for us.
fn claim_until_full(
    store: &FileStore,
    owner: &str,
    cap: usize,
    batch: usize,
) -> Vec<(String, Uuid)> {
    let mut got = Vec::new();
    loop {
        let free = cap - got.len();
        if free == 0 {
            break;
        }
        let out = store.claim_at(t(1001), owner, free.min(batch));
        if out.claims.is_empty() {
            break;
        }
        got.extend(out.claims.into_iter().map(|c| (c.job.def.name, c.run_id)));
    }
    got
}

fn check_exactly_once(per_owner: &[Vec<(String, Uuid)>]) {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for claims in per_owner {
        for (j, _) in claims {
            *seen.entry(j.as_str()).or_default() += 1;
        }
    }
    assert_eq!(seen.len(), N_JOBS, "every due job claimed");
    assert!(seen.values().all(|n| *n == 1), "a job was claimed twice");
    for (i, c) in per_owner.iter().enumerate() {
        assert!(c.len() < N_JOBS, "owner {i} took every job");
    }
}

#[test]
fn eight_threads_claim_500_due_jobs_exactly_once() {
    let dir = tmp("threads");
    setup_500(&dir);
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let dir = dir.to_path_buf();
            let b = barrier.clone();
            std::thread::spawn(move || {
                let s = FileStore::open(&dir).unwrap();
                b.wait();
                claim_until_full(&s, &format!("t{i}"), 100, 10)
            })
        })
        .collect();
    let per: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    check_exactly_once(&per);
    assert!(
        per.iter().filter(|c| !c.is_empty()).count() >= 5,
        "load shared: {:?}",
        per.iter().map(Vec::len).collect::<Vec<_>>()
    );
}

#[test]
#[ignore = "worker process for four_processes_claim_500_due_jobs_exactly_once"]
fn worker_claim_once() {
    if role().as_deref() != Some("claim") {
        return;
    }
    let dir = PathBuf::from(env("DIR"));
    let s = FileStore::open(&dir).unwrap();
    std::fs::write(dir.join(format!("ready.{}", env("OWNER"))), "").unwrap();
    let go = dir.join("go");
    support::wait::wait_until("the go file", StdDuration::from_secs(60), || go.exists());
    for (j, r) in claim_until_full(&s, &env("OWNER"), 200, 10) {
        println!("CLAIM {j} {r}");
    }
}

#[test]
fn four_processes_claim_500_due_jobs_exactly_once() {
    if role().is_some() {
        return;
    }
    let dir = tmp("procs");
    setup_500(&dir);
    let kids: Vec<Child> = (0..4)
        .map(|i| {
            spawn_worker(
                "worker_claim_once",
                &[
                    ("CRONSOLE_TEST_ROLE", "claim".into()),
                    ("DIR", dir.display().to_string()),
                    ("OWNER", format!("p{i}")),
                ],
            )
        })
        .collect();
    // All four have the store open before any claims: they race.
    support::wait::wait_until("four workers ready", StdDuration::from_secs(60), || {
        (0..4).all(|i| dir.join(format!("ready.p{i}")).exists())
    });
    std::fs::write(dir.join("go"), "").unwrap();
    let per: Vec<Vec<(String, Uuid)>> = kids
        .into_iter()
        .map(|k| {
            lines_of(k, "CLAIM")
                .into_iter()
                .map(|l| {
                    let (j, r) = l.split_once(' ').unwrap();
                    (j.to_string(), r.parse().unwrap())
                })
                .collect()
        })
        .collect();
    check_exactly_once(&per);
    eprintln!(
        "per-process claims: {:?}",
        per.iter().map(Vec::len).collect::<Vec<_>>()
    );
}

// ---------------------------------------------------------------------------------------------
// Steady state: 4 processes, 50 jobs every 1 s, 10 s of real time

#[test]
#[ignore = "worker process for steady_state_four_processes_every_slot_exactly_once"]
fn worker_steady() {
    if role().as_deref() != Some("steady") {
        return;
    }
    let dir = PathBuf::from(env("DIR"));
    let owner = env("OWNER");
    let until = Utc::now() + Duration::milliseconds(env("MS").parse().unwrap());
    let s = FileStore::open(&dir).unwrap();
    let mut n = 0;
    while Utc::now() < until {
        let now = Utc::now();
        let out = s.claim_at(now, &owner, 8);
        for c in out.claims {
            complete(&s, &c, &owner, now, Utc::now());
            n += 1;
        }
        // The worker's claim pace.
        std::thread::sleep(StdDuration::from_millis(20));
    }
    println!("RUNS {n}");
}

#[test]
fn steady_state_four_processes_every_slot_exactly_once() {
    if role().is_some() {
        return;
    }
    let dir = tmp("steady");
    let start = Utc::now() + Duration::milliseconds(500);
    {
        let s = FileStore::open(&dir).unwrap();
        let jobs = (0..50).map(|i| def(&format!("s{i:02}"), 1, 30.0)).collect();
        s.apply(
            &JobsFile {
                settings: Settings::default(),
                jobs,
            },
            // One interval (1 s) before the jobs' first slot, `start`.
            start - Duration::seconds(1),
        )
        .unwrap();
    }
    let ms = (start - Utc::now()).num_milliseconds() + 10_000;
    let kids: Vec<Child> = (0..4)
        .map(|i| {
            spawn_worker(
                "worker_steady",
                &[
                    ("CRONSOLE_TEST_ROLE", "steady".into()),
                    ("DIR", dir.display().to_string()),
                    ("OWNER", format!("w{i}")),
                    ("MS", ms.to_string()),
                ],
            )
        })
        .collect();
    let runs: Vec<u64> = kids
        .into_iter()
        .map(|k| lines_of(k, "RUNS")[0].parse().unwrap())
        .collect();
    let end = Utc::now();
    let s = FileStore::open(&dir).unwrap();
    let rows = s.history(&HistoryQuery::default()).unwrap();
    let mut per_job: BTreeMap<&str, Vec<&HistoryRow>> = BTreeMap::new();
    let mut owners: HashMap<&str, u64> = HashMap::new();
    for r in &rows {
        assert!(!r.stale_lease);
        per_job.entry(r.job.as_str()).or_default().push(r);
        *owners.entry(r.owner.as_str()).or_default() += 1;
    }
    assert_eq!(per_job.len(), 50);
    let mut total_slots = 0;
    for (job, mut rs) in per_job {
        rs.sort_by_key(|r| r.slot);
        let mut seen = HashSet::new();
        for r in &rs {
            assert!(seen.insert(r.slot), "{job}: slot {:?} ran twice", r.slot);
        }
        // Every grid slot from the anchor up to 2 s before the end is accounted for: it has a
        // row, lies in a row's range, or was due when the previous run was claimed (coalesced).
        let mut covered = 0;
        // The grid starts on the whole second the jobs were stored in.
        let mut slot = (start - Duration::seconds(1)).trunc_subsecs(0) + Duration::seconds(1);
        let mut i = 0;
        while slot < end - Duration::seconds(2) {
            while i + 1 < rs.len() && rs[i + 1].slot.unwrap() <= slot {
                i += 1;
            }
            let r = rs[i];
            let first = r.slot.unwrap();
            let last = r.slot_end.unwrap_or(first);
            assert!(
                first <= slot && (slot <= last || slot <= r.started_at),
                "{job}: slot {slot} not accounted for (row slot {first}, started {})",
                r.started_at
            );
            covered += 1;
            slot += Duration::seconds(1);
        }
        total_slots += covered;
    }
    eprintln!("runs per process {runs:?}, rows per owner {owners:?}, slots checked {total_slots}");
    assert!(total_slots >= 50 * 7);
    assert!(
        runs.iter().filter(|n| **n > 0).count() >= 3,
        "load shared: {runs:?}"
    );
    let total: u64 = runs.iter().sum();
    assert!(
        runs.iter().all(|n| *n < total),
        "one worker took every run: {runs:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// kill -9 of a process holding a claim

#[test]
#[ignore = "worker process for kill_9_of_a_claim_holder"]
fn worker_claim_and_hang() {
    if role().as_deref() != Some("hang") {
        return;
    }
    let dir = PathBuf::from(env("DIR"));
    let now = t(env("NOW").parse().unwrap());
    let s = FileStore::open(&dir).unwrap();
    let out = s.claim_at(now, &env("OWNER"), 10);
    for c in &out.claims {
        println!(
            "CLAIM {} {} {}",
            c.job.def.name,
            c.run_id,
            c.trigger.as_str()
        );
    }
    println!("READY");
    use std::io::Write;
    std::io::stdout().flush().unwrap();
    loop {
        // A worker that holds its claims until it is killed.
        std::thread::sleep(StdDuration::from_secs(60));
    }
}

fn claim_then_kill(dir: &Path, now: i64, owner: &str) -> Vec<String> {
    let mut child = spawn_worker(
        "worker_claim_and_hang",
        &[
            ("CRONSOLE_TEST_ROLE", "hang".into()),
            ("DIR", dir.display().to_string()),
            ("NOW", now.to_string()),
            ("OWNER", owner.into()),
        ],
    );
    let mut claims = Vec::new();
    let stdout = child.stdout.take().unwrap();
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if line.ends_with("READY") {
            break;
        }
        if let Some(c) = after(&line, "CLAIM") {
            claims.push(c);
        }
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    claims
}

#[test]
fn kill_9_of_a_claim_holder() {
    if role().is_some() {
        return;
    }
    let dir = tmp("kill9");
    {
        let s = FileStore::open(&dir).unwrap();
        let mut once = def("once", 60, 10.0);
        once.max_runs = Some(1);
        let rec = def("rec", 60, 10.0);
        s.apply(
            &JobsFile {
                settings: Settings::default(),
                jobs: vec![once, rec],
            },
            // One interval before the jobs' first slot, 1000.
            t(940),
        )
        .unwrap();
    }
    let first = claim_then_kill(&dir, 1000, "victim1");
    assert_eq!(first.len(), 2, "{first:?}");
    let s = FileStore::open(&dir).unwrap();
    // Lease still valid at 1005: nothing recovered.
    let out = s.claim_at(t(1005), "rescuer", 0);
    assert!(out.rows.is_empty());
    // After expiry: one abandoned row each; the one-shot is re-offered, the recurring waits.
    let out = s.claim_at(t(1011), "rescuer", 0);
    let abandoned: Vec<&str> = out
        .rows
        .iter()
        .filter(|r| r.status == Status::Abandoned)
        .map(|r| r.job.as_str())
        .collect();
    assert_eq!(abandoned.len(), 2, "{:?}", out.rows);
    assert!(s.job("once").unwrap().unwrap().rt.recovery_pending);
    assert_eq!(s.job("rec").unwrap().unwrap().rt.next_slot, Some(t(1060)));
    // The re-offer is taken by another process, which is killed too.
    let second = claim_then_kill(&dir, 1012, "victim2");
    assert_eq!(second.len(), 1, "{second:?}");
    assert!(second[0].starts_with("once ") && second[0].ends_with(" recovery"));
    let out = s.claim_at(t(1030), "rescuer", 5);
    assert_eq!(out.rows.len(), 1);
    assert!(
        out.claims.is_empty(),
        "recurring waits for 1060, one-shot retired"
    );
    let once = s.job("once").unwrap().unwrap();
    assert!(once.rt.retired);
    let rows = s
        .history(&HistoryQuery {
            job: Some("once".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(
        rows.iter()
            .filter(|r| r.status == Status::Abandoned)
            .count(),
        2
    );
    let out = s.claim_at(t(1060), "rescuer", 5);
    assert_eq!(out.claims.len(), 1);
    assert_eq!(out.claims[0].slot, Some(t(1060)));
}

// ---------------------------------------------------------------------------------------------
// Crash-safety loop

#[test]
#[ignore = "worker process for crash_loop_store_always_reopens_and_no_slot_runs_twice"]
fn worker_chaos() {
    if role().as_deref() != Some("chaos") {
        return;
    }
    use std::io::Write;
    let dir = PathBuf::from(env("DIR"));
    let owner = env("OWNER");
    let s = FileStore::open(&dir).unwrap();
    let mut out = std::io::stdout();
    let mut k = 0u64;
    loop {
        k += 1;
        let now = Utc::now();
        if k.is_multiple_of(7) {
            let mut jobs: Vec<JobDef> = (0..20).map(|i| def(&format!("c{i:02}"), 1, 1.0)).collect();
            jobs[(k % 20) as usize].timeout_seconds = (k % 5) as f64 + 1.0;
            s.apply(
                &JobsFile {
                    settings: Settings::default(),
                    jobs,
                },
                now,
            )
            .unwrap();
        }
        let got = s.claim_at(now, &owner, 4);
        for c in got.claims {
            complete(&s, &c, &owner, now, Utc::now());
            writeln!(out, "ACK {}", c.run_id).unwrap();
            out.flush().unwrap();
        }
    }
}

#[test]
fn crash_loop_store_always_reopens_and_no_slot_runs_twice() {
    if role().is_some() {
        return;
    }
    let dir = tmp("chaos");
    {
        let s = FileStore::open(&dir).unwrap();
        let jobs = (0..20).map(|i| def(&format!("c{i:02}"), 1, 1.0)).collect();
        s.apply(
            &JobsFile {
                settings: Settings::default(),
                jobs,
            },
            Utc::now(),
        )
        .unwrap();
    }
    let began = Instant::now();
    let mut acked = HashSet::new();
    let mut iterations = 0;
    while iterations < 200 {
        let mut child = spawn_worker(
            "worker_chaos",
            &[
                ("CRONSOLE_TEST_ROLE", "chaos".into()),
                ("DIR", dir.display().to_string()),
                ("OWNER", format!("k{iterations}")),
            ],
        );
        let delay = 5 + (Uuid::new_v4().as_u128() % 120) as u64;
        // The fault's moment: a kill at a random point of the worker's claims.
        std::thread::sleep(StdDuration::from_millis(delay));
        child.kill().unwrap();
        for l in lines_of(child, "ACK") {
            acked.insert(l.parse::<Uuid>().unwrap());
        }
        // The store always reopens.
        let s = FileStore::open(&dir).unwrap_or_else(|e| panic!("iteration {iterations}: {e}"));
        drop(s);
        iterations += 1;
    }
    // Recover everything still leased, then check history: a claim one lease past now finds
    // every lease the killed workers held expired.
    let s = FileStore::open(&dir).unwrap();
    s.claim_at(Utc::now() + Duration::seconds(2), "final", 0);
    let rows = s.history(&HistoryQuery::default()).unwrap();
    let ids: HashSet<Uuid> = rows.iter().map(|r| r.run_id).collect();
    let lost: Vec<&Uuid> = acked.iter().filter(|a| !ids.contains(a)).collect();
    assert!(
        lost.is_empty(),
        "acknowledged completions missing from history: {lost:?}"
    );
    let mut slots = HashSet::new();
    let mut runs = HashSet::new();
    for r in &rows {
        if r.status == Status::Skipped || r.status == Status::Missed {
            continue;
        }
        assert!(runs.insert(r.run_id), "run {} has two rows", r.run_id);
        assert!(
            slots.insert((r.job.clone(), r.slot)),
            "{} slot {:?} ran twice",
            r.job,
            r.slot
        );
    }
    eprintln!(
        "{iterations} kills in {:?}, {} acked, {} rows",
        began.elapsed(),
        acked.len(),
        rows.len()
    );
    assert!(!acked.is_empty());
}

// ---------------------------------------------------------------------------------------------
// Corruption through the CLI: exit 2, file and position named, bytes untouched

fn cli(dir: &Path, args: &[&str]) -> (i32, String) {
    let (code, _, err) =
        support::cli::output(support::cli::command().arg("--store").arg(dir).args(args));
    (code, err)
}

#[test]
fn corruption_in_each_store_file_is_exit_2_and_never_rewritten() {
    let base = tmp("corrupt-base");
    {
        let s = FileStore::open(&base).unwrap();
        let settings = Settings {
            period: cronsole::model::BudgetPeriod::Week,
            ..Default::default()
        };
        s.apply(
            &JobsFile {
                settings,
                jobs: vec![def("a", 60, 30.0)],
            },
            // One interval before the first slot, 1000.
            t(940),
        )
        .unwrap();
        let c = s.claim_at(t(1000), "o", 1);
        let c = &c.claims[0];
        complete(&s, c, "o", t(1000), t(1001));
    }
    let (code, err) = cli(&base, &["jobs"]);
    assert_eq!(code, 0, "{err}");
    // The store's own snapshot header (format 2 carries the store id) with garbage after it.
    let snap = std::fs::read(base.join("jobs.snapshot.jsonl")).unwrap();
    let snapshot_ok = &snap[..=snap.iter().position(|b| *b == b'\n').unwrap()];
    for (file, garbage, line) in [
        // Line 1 of history is its header (the store's format and id), so the bad row is line 3.
        ("history.jsonl", "{\"run_id\": 42, \"oops\"}\n", 3u64),
        ("jobs.journal", "not json at all\n", 0),
        ("settings.json", "{\"budget\": [1,2,\n", 0),
        ("jobs.snapshot.jsonl", "{\"job\": nope}\n", 2),
    ] {
        let dir = tmp("corrupt");
        for f in std::fs::read_dir(&base).unwrap() {
            let f = f.unwrap();
            std::fs::copy(f.path(), dir.join(f.file_name())).unwrap();
        }
        let path = dir.join(file);
        let mut bytes = if file == "jobs.snapshot.jsonl" {
            snapshot_ok.to_vec()
        } else {
            std::fs::read(&path).unwrap()
        };
        bytes.extend_from_slice(garbage.as_bytes());
        std::fs::write(&path, &bytes).unwrap();
        let before: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| {
                let p = e.unwrap().path();
                let b = std::fs::read(&p).unwrap();
                (p, b)
            })
            .collect();
        for cmd in [&["jobs"][..], &["history"][..]] {
            let (code, err) = cli(&dir, cmd);
            assert_eq!(code, 2, "{file} {cmd:?}: {err}");
            assert!(err.contains(file), "{file}: {err}");
            if line > 0 {
                assert!(err.contains(&format!("{file}:{line}:")), "{file}: {err}");
            }
        }
        for (p, b) in before {
            assert_eq!(std::fs::read(&p).unwrap(), b, "{} changed", p.display());
        }
    }
    // A foreign VERSION is exit 2 too.
    let dir = tmp("corrupt-version");
    std::fs::write(dir.join("VERSION"), "other-tool 7\n").unwrap();
    std::fs::write(dir.join("history.jsonl"), "").unwrap();
    let (code, err) = cli(&dir, &["history"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("VERSION"), "{err}");
}

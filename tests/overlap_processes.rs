//! `overlap: allow` and `overlap: buffer_one` across two `cronsole run` processes sharing one
//! file store, in real time: every slot is accounted for at most once across
//! both owners, `allow` never has more runs live than its bound (and does reach it), and
//! `buffer_one` never has two runs live while its kept slots do run late.
#![allow(clippy::unwrap_used)] // test code

use cronsole::testkit::store::ClaimAt;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use cronsole::model::{HistoryRow, Status};
use cronsole::store::file::FileStore;
use cronsole::store::{HistoryQuery, HistoryReader, Store};

mod support;
use support::cli;

fn run_two(name: &str, yaml: &str) -> Vec<HistoryRow> {
    let dir = support::tempdir(&format!("ovlp-{name}"));
    let jobs = dir.join("jobs.yaml");
    let store: PathBuf = dir.join("store");
    std::fs::write(&jobs, yaml).unwrap();
    cli::apply(&jobs, &store);
    let kids = cli::spawn_owners(&dir, &store, 2, &["--for", "7s"]);
    cli::wait_ok(kids, Duration::from_secs(40));
    let s = FileStore::open(&store).unwrap();
    for j in s.jobs().unwrap() {
        assert_eq!(j.rt.live_runs(), 0, "no lease left: {:?}", j.rt.lease);
    }
    let mut rows = s
        .history(&HistoryQuery {
            limit: 100_000,
            ..Default::default()
        })
        .unwrap();
    rows.reverse();
    rows
}

/// Every slot (a skipped row stands for its range, 1 s apart) is in at most one row.
fn each_slot_at_most_once(rows: &[HistoryRow]) {
    let mut seen: BTreeMap<DateTime<Utc>, usize> = BTreeMap::new();
    for r in rows {
        let Some(first) = r.slot else { continue };
        let last = r.slot_end.unwrap_or(first);
        let mut s = first;
        while s <= last {
            *seen.entry(s).or_default() += 1;
            s += chrono::Duration::seconds(1);
        }
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "slots in two rows: {twice:?}\n{rows:#?}");
}

/// Most runs live at one instant (from the rows' start and finish).
fn max_live(rows: &[HistoryRow]) -> usize {
    let runs: Vec<&HistoryRow> = rows
        .iter()
        .filter(|r| r.status == Status::Succeeded)
        .collect();
    runs.iter()
        .map(|a| {
            runs.iter()
                .filter(|b| b.started_at <= a.started_at && a.started_at < b.finished_at)
                .count()
        })
        .max()
        .unwrap_or(0)
}

#[test]
fn allow_across_two_processes_stays_within_its_bound() {
    let rows = run_two(
        "allow",
        "budget: null\njobs:\n  - name: j\n    schedule: every 1s\n    overlap: allow\n    \
         max_concurrent_runs: 2\n    lease_seconds: 5\n    command: sleep 2.2\n",
    );
    assert!(
        rows.iter()
            .all(|r| matches!(r.status, Status::Succeeded | Status::Skipped)),
        "{rows:#?}"
    );
    each_slot_at_most_once(&rows);
    assert_eq!(max_live(&rows), 2, "{rows:#?}");
    assert!(
        rows.iter()
            .any(|r| r.status == Status::Skipped && r.reason.as_deref() == Some("overlap")),
        "a slot beyond the bound is recorded: {rows:#?}"
    );
}

#[test]
fn buffer_one_across_two_processes_runs_kept_slots_one_at_a_time() {
    let rows = run_two(
        "buffer",
        "budget: null\njobs:\n  - name: j\n    schedule: every 1s\n    overlap: buffer_one\n    \
         lease_seconds: 5\n    command: sleep 1.5\n",
    );
    assert!(
        rows.iter()
            .all(|r| matches!(r.status, Status::Succeeded | Status::Skipped)),
        "{rows:#?}"
    );
    each_slot_at_most_once(&rows);
    assert_eq!(max_live(&rows), 1, "{rows:#?}");
    let late = rows
        .iter()
        .filter(|r| {
            r.status == Status::Succeeded
                && r.slot
                    .is_some_and(|s| r.started_at - s >= chrono::Duration::milliseconds(400))
        })
        .count();
    assert!(
        late >= 2,
        "kept slots run after the run before them: {rows:#?}"
    );
}

/// `jobs` and `describe` name a `buffer_one` slot that fell due while a
/// run is live (before, during and after a pause), not only once the run has ended.
#[test]
fn jobs_and_describe_name_the_kept_slot_while_the_run_is_live() {
    use cronsole::model::{JobsFile, Overlap};
    let dir = support::tempdir("ovlp-note");
    let store = dir.join("store");
    std::fs::create_dir_all(&store).unwrap();
    let mut d = cronsole::testkit::jobs::command_job("j", 10);
    d.overlap = Overlap::BufferOne;
    d.lease_seconds = 300.0;
    let start = Utc::now() - chrono::Duration::seconds(15);
    {
        let s = FileStore::open(&store).unwrap();
        s.apply(
            &JobsFile {
                settings: Default::default(),
                jobs: vec![d],
            },
            // One interval before the first slot, `start`.
            start - chrono::Duration::seconds(10),
        )
        .unwrap();
        let c = s.claim_at(start, "elsewhere", 10);
        assert_eq!(c.claims.len(), 1);
    }
    let cli = |args: &[&str]| {
        let (code, out, err) = cli::run_with_store(&dir, &store, args);
        assert_eq!(code, 0, "{args:?}: {err}");
        out
    };
    for step in [None, Some("pause"), Some("resume")] {
        if let Some(verb) = step {
            cli(&[verb, "j"]);
        }
        let jobs = cli(&["jobs"]);
        assert!(jobs.contains("kept to run next"), "{step:?}:\n{jobs}");
        let desc = cli(&["describe", "j"]);
        assert!(desc.contains("kept to run next"), "{step:?}:\n{desc}");
    }
}

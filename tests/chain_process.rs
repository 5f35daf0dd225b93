//! `after:` chains across processes: two `cronsole run` owners on one file store; the parent
//! runs once, its chained child exactly once after it (whichever owner takes it), then the
//! grandchild; the child's command sees its parent through the environment.
#![allow(clippy::unwrap_used)] // test code

use std::time::Duration;

use cronsole::model::{HistoryRow, Status, Trigger};
use cronsole::store::file::FileStore;
use cronsole::store::{HistoryQuery, HistoryReader};

mod support;
use support::cli;

fn rows(store: &std::path::Path) -> Vec<HistoryRow> {
    let mut v = FileStore::open(store)
        .expect("open store")
        .history(&HistoryQuery {
            limit: 10_000,
            ..Default::default()
        })
        .unwrap();
    v.reverse();
    v
}

#[test]
fn two_owners_run_the_chain_once_each_step_in_order() {
    let dir = support::tempdir("chain");
    let jobs = dir.join("jobs.yaml");
    let store = dir.join("store");
    std::fs::write(
        &jobs,
        "budget: null\njobs:\n  - name: collect\n    schedule: every 1h\n    run_immediately: true\n    command: echo collected 42\n  - name: triage\n    after: {job: collect, on: success}\n    command: 'printf \"%s|%s|%s|%s\\n\" \"$CRONSOLE_PARENT_JOB\" \"$CRONSOLE_PARENT_STATUS\" \"$CRONSOLE_PARENT_RUN_ID\" \"$CRONSOLE_PARENT_OUTPUT\" >> triage.out; echo triaged'\n  - name: report\n    after: {job: triage, on: completion}\n    command: echo reported\n",
    )
    .unwrap();
    cli::apply(&jobs, &store);
    let kids = cli::spawn_owners(&dir, &store, 2, &["--for", "6s"]);
    cli::wait_ok(kids, Duration::from_secs(30));
    let h = rows(&store);
    let of = |j: &str| -> Vec<&HistoryRow> { h.iter().filter(|r| r.job == j).collect() };
    let (collect, triage, report) = (of("collect"), of("triage"), of("report"));
    assert_eq!(collect.len(), 1, "{h:#?}");
    assert_eq!(collect[0].status, Status::Succeeded);
    assert_eq!(triage.len(), 1, "exactly once after its parent: {h:#?}");
    let t = triage[0];
    assert_eq!((t.status, t.trigger), (Status::Succeeded, Trigger::Chain));
    assert_eq!(t.parent_run_id, Some(collect[0].run_id));
    assert_eq!(t.parent_job.as_deref(), Some("collect"));
    assert!(t.started_at >= collect[0].finished_at);
    assert_eq!(report.len(), 1, "{h:#?}");
    assert_eq!(report[0].parent_run_id, Some(t.run_id));
    let seen = std::fs::read_to_string(dir.join("triage.out")).unwrap();
    // The output is the parent's result as stored (here echo's line with its newline).
    assert_eq!(
        seen,
        format!("collect|succeeded|{}|collected 42\n\n", collect[0].run_id)
    );
    // `history --json` carries the chain fields.
    let out = cli::command()
        .args(["history", "--job", "triage", "--json", "--store"])
        .arg(&store)
        .output()
        .unwrap();
    let line = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(line.lines().next().unwrap()).unwrap();
    assert_eq!(v["trigger"], "chain");
    assert_eq!(v["parent_run_id"], collect[0].run_id.to_string());
}

#[test]
fn validate_names_the_entry_that_closes_a_cycle_and_exits_2() {
    let dir = support::tempdir("chain-cycle");
    let jobs = dir.join("jobs.yaml");
    std::fs::write(
        &jobs,
        "jobs:\n  - name: a\n    schedule: every 1h\n    command: \"true\"\n    after: b\n  - name: b\n    command: \"true\"\n    after: {job: a, on: completion}\n",
    )
    .unwrap();
    let out = cli::command().arg("validate").arg(&jobs).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        err.contains("jobs.yaml:8:12") && err.contains("a waits for b waits for a"),
        "{err}"
    );
}

#[test]
fn validate_and_next_say_a_chained_job_runs_after_its_parents() {
    let dir = support::tempdir("chain-next");
    let jobs = dir.join("jobs.yaml");
    std::fs::write(
        &jobs,
        "jobs:\n  - name: a\n    schedule: every 1h\n    command: \"true\"\n  - name: b\n    after: a\n    command: \"true\"\n",
    )
    .unwrap();
    let out = cli::command().arg("validate").arg(&jobs).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("b: after a (success)")
            && text.contains("no slots: runs when its parents finish (trigger: chain)"),
        "{text}"
    );
    let out = cli::command()
        .args(["next", "--job", "b", "--file"])
        .arg(&jobs)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "(no slots: job b runs when its parents finish: after a (success))\n"
    );
}

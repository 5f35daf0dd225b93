//! The CLI over `--store postgres://…`: apply/jobs/pause/trigger through the binary, a pause from
//! `cronsole pause` (another process) reaching a listening owner within 1 s, exit codes for a
//! bad URL (2) and an unreachable server (1), and approvals racing from four processes against
//! a call waiting on one of two owners, and an operator on a clock an hour ahead of the
//! database's approving a live owner's call.
#![allow(clippy::unwrap_used)] // test code

use crate::pg_db_or_skip;
use crate::support;
use crate::support::wait::{poll_until, wait_until};

use std::time::{Duration, Instant};

use cronsole::store::postgres::PgStore;
use cronsole::store::{HistoryReader, Store};

fn run(store: &str, args: &[&str], dir: &std::path::Path) -> (i32, String, String) {
    support::cli::run_with_store(dir, store, args)
}

#[test]
fn cli_pause_reaches_a_running_owner_within_a_second() {
    let url = pg_db_or_skip!();
    let dir = support::tempdir("pgcli");
    std::fs::write(
        dir.join("jobs.yaml"),
        "jobs:\n  - name: alpha\n    schedule: every 1h\n    command: \"echo a\"\n",
    )
    .unwrap();
    let (c, out, err) = run(&url, &["apply", "jobs.yaml"], &dir);
    assert_eq!(c, 0, "{out}{err}");
    assert!(out.contains("alpha"), "{out}");

    let owner = PgStore::open(&url).unwrap();
    wait_until("the listener", Duration::from_secs(10), || {
        owner.listener_alive()
    });
    let before = owner.change_token().unwrap();
    let (c, _, err) = run(&url, &["pause", "alpha"], &dir);
    let exited = Instant::now();
    assert_eq!(c, 0, "{err}");
    wait_until(
        "the pause to reach the owner",
        Duration::from_secs(1),
        || owner.change_token().unwrap() != before,
    );
    eprintln!(
        "pause visible to the owner {:?} after `cronsole pause` exited",
        exited.elapsed()
    );
    assert!(owner.job("alpha").unwrap().unwrap().rt.paused);

    let (c, out, _) = run(&url, &["jobs", "--json"], &dir);
    assert_eq!(c, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v[0]["name"], "alpha");
    let (c, out, _) = run(&url, &["trigger", "alpha"], &dir);
    assert_eq!(c, 0);
    assert!(out.contains("triggered alpha"), "{out}");
    assert_eq!(run(&url, &["pause", "ghost"], &dir).0, 2);
}

#[test]
fn bad_url_is_exit_2_and_unreachable_server_is_exit_1() {
    let dir = std::env::temp_dir();
    let (c, _, err) = run(
        "postgres://u:pw@127.0.0.1:5432/x?sslmode=nope",
        &["jobs"],
        &dir,
    );
    assert_eq!(c, 2, "{err}");
    assert!(!err.contains("pw@"), "{err}");
    let (c, _, err) = run("postgres://postgres@127.0.0.1:1/x", &["jobs"], &dir);
    assert_eq!(c, 1, "{err}");
    assert!(err.contains("database error"), "{err}");
}

/// A command that only reads or acts on a store, pointed at a database without one (a typo, or
/// an application's own database), is refused with exit 2 and creates no table there.
#[test]
fn commands_that_read_a_store_refuse_a_database_without_one_and_create_nothing() {
    let url = pg_db_or_skip!();
    let dir = support::tempdir("pgnone");
    for args in [
        &["jobs"][..],
        &["history"],
        &["stats"],
        &["check"],
        &["approvals"],
        &["describe", "x"],
        &["pause", "x"],
        &["trigger", "x"],
    ] {
        let (c, out, err) = run(&url, args, &dir);
        assert_eq!(c, 2, "{args:?}: {out}{err}");
        assert!(
            err.contains("no cronsole store in postgres://"),
            "{args:?}: {err}"
        );
    }
    support::pg::exec(
        &url,
        "DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_tables WHERE tablename LIKE 'cronsole%') \
         THEN RAISE EXCEPTION 'a read-only command created cronsole tables'; END IF; END $$",
    )
    .unwrap();
    // `apply` creates the store; then the same commands read it.
    std::fs::write(
        dir.join("jobs.yaml"),
        "jobs:\n  - name: x\n    schedule: every 1h\n    command: \"true\"\n",
    )
    .unwrap();
    assert_eq!(run(&url, &["apply", "jobs.yaml"], &dir).0, 0);
    let (c, out, err) = run(&url, &["jobs"], &dir);
    assert_eq!(c, 0, "{out}{err}");
}

const KEY: &str = "sk-PG-APPROVALS-0123456789abcdef";

/// Two agents whose one tool needs approval: `ops` waits an hour, `hasty` two seconds.
fn approvals_yaml(base_url: &str) -> String {
    format!(
        "{}x-agent: &agent
{}agents:
  ops: {{ <<: *agent, approval_timeout_seconds: 3600 }}
  hasty: {{ <<: *agent, approval_timeout_seconds: 2 }}
jobs:
  - {{ name: gated, schedule: every 1h, run_immediately: true, agent: ops, message: go }}
  - {{ name: lapse, schedule: every 24h, agent: hasty, message: go }}
",
        support::approval::preamble(""),
        support::approval::agent_keys(base_url, "  ")
    )
}

/// Waits (bounded) until `cronsole approvals --json` lists a call of `job`; its run id.
fn pending(url: &str, dir: &std::path::Path, job: &str) -> String {
    let (mut found, mut out) = (None, String::new());
    let listed = poll_until(Duration::from_secs(60), || {
        let (c, o, err) = run(url, &["approvals", "--json"], dir);
        assert_eq!(c, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&o).unwrap();
        found = v
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["job"] == job)
            .map(|p| p["run_id"].as_str().unwrap().to_string());
        out = o;
        found.is_some()
    });
    assert!(listed, "no call of {job} awaited approval: {out}");
    found.unwrap()
}

/// Waits (bounded) for the first row of `job`.
fn first_row(owner: &PgStore, job: &str) -> cronsole::model::HistoryRow {
    let mut row = None;
    wait_until(format!("a row of {job}"), Duration::from_secs(60), || {
        row = owner
            .history(&cronsole::store::HistoryQuery {
                job: Some(job.into()),
                limit: 10,
                ..Default::default()
            })
            .unwrap()
            .into_iter()
            .next();
        row.is_some()
    });
    row.unwrap()
}

fn the_call(r: &cronsole::model::HistoryRow) -> cronsole::transcript::CallEntry {
    let calls = cronsole::testkit::tools::calls(r);
    assert_eq!(calls.len(), 1, "{r:#?}");
    calls.into_iter().next().unwrap()
}

/// Approvals across two owners on one PostgreSQL database, all through the binary: the call
/// waits on whichever owner claimed its run; 3 `approve` and 1 `deny` race from 4 processes:
/// exactly one answer is taken (the others exit 1: the run no longer waits), it is the one on
/// the record (its reason), and the tool runs once if an approval won, never if the denial
/// did. A wait nobody answers is denied at its timeout and the tool never runs.
#[test]
fn approvals_across_two_owners_one_answer_wins_and_the_tool_runs_at_most_once() {
    use cronsole::testkit::llm::{FakeCall, FakeLlm, Reply};
    use cronsole::transcript::Approval;
    let url = pg_db_or_skip!();
    let ask = || Reply::tools(vec![FakeCall::new("write", serde_json::json!({}))], 10, 5);
    // The scripted model serves from the runtime's threads while this test blocks on processes.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let fake = rt
        .block_on(FakeLlm::openai(
            KEY,
            vec![
                ask(),
                Reply::ok("done", 10, 2),
                ask(),
                Reply::ok("done", 10, 2),
            ],
        ))
        .unwrap();
    let dir = support::tempdir("pg-approvals");
    std::fs::write(dir.join("jobs.yaml"), approvals_yaml(&fake.base_url())).unwrap();
    let (c, _, err) = run(&url, &["apply", "jobs.yaml"], &dir);
    assert_eq!(c, 0, "{err}");
    let owners: Vec<std::process::Child> = (0..2)
        .map(|_| {
            support::cli::cronsole(&dir)
                .env("PROVIDER_KEY", KEY)
                .args(["run", "--store", &url, "--for", "120s"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let (answers, row) = {
        let (u, d) = (url.as_str(), dir.as_ref());
        let run_id = pending(u, d, "gated");
        // Four operators at once: three approve, one denies.
        let racers: Vec<(bool, String, std::process::Child)> = (0..4)
            .map(|i| {
                let approve = i < 3;
                let reason = format!("operator {i}");
                let verb = if approve { "approve" } else { "deny" };
                let child = support::cli::cronsole(d)
                    .args(["--store", u, verb, &run_id, "--reason", &reason])
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap();
                (approve, reason, child)
            })
            .collect();
        let answers: Vec<(bool, String, i32, String)> = racers
            .into_iter()
            .map(|(approve, reason, child)| {
                let (code, out, err) = support::cli::split(child.wait_with_output().unwrap());
                (approve, reason, code, format!("{out}{err}"))
            })
            .collect();
        let store = PgStore::open(u).unwrap();
        (answers, first_row(&store, "gated"))
    };
    let won: Vec<&(bool, String, i32, String)> = answers.iter().filter(|a| a.2 == 0).collect();
    assert_eq!(won.len(), 1, "exactly one answer is taken: {answers:#?}");
    for (_, _, code, said) in answers.iter().filter(|a| a.2 != 0) {
        assert_eq!(*code, 1, "{said}");
        assert!(said.contains("not awaiting approval"), "{said}");
    }
    let (approved, reason) = (won[0].0, won[0].1.clone());
    assert_eq!(row.status, cronsole::model::Status::Succeeded, "{row:#?}");
    let call = the_call(&row);
    let ran = std::fs::read_to_string(dir.join("wrote.txt")).unwrap_or_default();
    // The record names who answered, and how.
    let by = |how: &str| {
        Some(format!(
            "{} ({how})",
            cronsole::testkit::internals::engine::operator()
        ))
    };
    if approved {
        assert_eq!(
            call.approval,
            Some(Approval::Approved {
                by: by("cronsole approve"),
                reason: Some(reason)
            })
        );
        assert_eq!(ran.lines().count(), 1, "the approved tool ran once");
    } else {
        assert_eq!(
            call.approval,
            Some(Approval::Denied {
                reason: format!("denied by an operator: {reason}"),
                by: by("cronsole deny"),
            })
        );
        assert!(ran.is_empty(), "a denied tool never runs");
    }

    // Nobody answers: denied at the timeout, the tool never runs.
    let before = ran.lines().count();
    let (c, _, err) = run(&url, &["trigger", "lapse"], &dir);
    assert_eq!(c, 0, "{err}");
    pending(&url, &dir, "lapse");
    let row = first_row(&PgStore::open(&url).unwrap(), "lapse");
    assert_eq!(
        the_call(&row).approval,
        Some(Approval::Denied {
            reason: "denied: no answer within approval_timeout_seconds (2s)".into(),
            by: None,
        }),
        "{row:#?}"
    );
    let ran = std::fs::read_to_string(dir.join("wrote.txt")).unwrap_or_default();
    assert_eq!(ran.lines().count(), before, "the unanswered tool never ran");
    assert_eq!(fake.request_count(), 4, "two turns per run");
    for mut o in owners {
        let _ = std::process::Command::new("kill")
            .arg(o.id().to_string())
            .status();
        let _ = o.wait();
    }
}

/// An operator whose clock is an hour ahead of the database's judges the waiting call's owner
/// on the database's clock, which stamped the run's lease: `approvals` lists the owner live,
/// and `approve` exits 0 and the tool runs. On its own clock it read the live lease as run out
/// and exited 3 ("nothing runs now") for an answer the database had taken and the owner ran.
#[test]
fn an_operator_an_hour_ahead_of_the_database_approves_a_live_owners_call() {
    use cronsole::testkit::llm::{FakeCall, FakeLlm, Reply};
    let url = pg_db_or_skip!();
    let Some(lib) = crate::owner_support::libfaketime_or_skip() else {
        return;
    };
    let ask = Reply::tools(vec![FakeCall::new("write", serde_json::json!({}))], 10, 5);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let fake = rt
        .block_on(FakeLlm::openai(KEY, vec![ask, Reply::ok("done", 10, 2)]))
        .unwrap();
    let dir = support::tempdir("pg-approvals-skew");
    std::fs::write(dir.join("jobs.yaml"), approvals_yaml(&fake.base_url())).unwrap();
    let (c, _, err) = run(&url, &["apply", "jobs.yaml"], &dir);
    assert_eq!(c, 0, "{err}");
    let mut owner = support::cli::cronsole(&dir)
        .env("PROVIDER_KEY", KEY)
        .args(["run", "--store", &url, "--for", "120s"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let run_id = pending(&url, &dir, "gated");
    let ahead = |args: &[&str]| {
        support::cli::output(
            support::cli::cronsole(&dir)
                .envs(crate::owner_support::skewed(&lib, "+1h"))
                .args(["--store", &url])
                .args(args),
        )
    };
    let (c, out, err) = ahead(&["approvals", "--json"]);
    assert_eq!(c, 0, "{err}");
    let listed: serde_json::Value = serde_json::from_str(&out).unwrap();
    let p = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["run_id"] == run_id.as_str())
        .unwrap();
    assert_eq!(p["owner_live"], true, "{p}");
    let (c, out, err) = ahead(&["approve", &run_id]);
    assert_eq!(c, 0, "{out}{err}");
    assert!(out.contains("approved; its owner runs it"), "{out}");
    let row = first_row(&PgStore::open(&url).unwrap(), "gated");
    let _ = std::process::Command::new("kill")
        .arg(owner.id().to_string())
        .status();
    let _ = owner.wait();
    assert_eq!(row.status, cronsole::model::Status::Succeeded, "{row:#?}");
    let ran = std::fs::read_to_string(dir.join("wrote.txt")).unwrap_or_default();
    assert_eq!(ran.lines().count(), 1, "the approved tool ran once");
}

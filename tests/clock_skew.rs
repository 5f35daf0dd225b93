//! Owners whose clocks disagree, as real processes on PostgreSQL: one `cronsole run` under
//! libfaketime (its wall clock skewed, its monotonic clock real) beside one on the real clock,
//! over 20 one-shots with a 5 s lease that each run longer than the lease.
//!
//! - 8 s behind, with a bound that lets it claim: the database's clock judges every lease, so no
//!   one-shot runs twice and none is recorded `abandoned`.
//! - 40 s behind, 5 min behind and 5 min ahead, under the default bound: the skewed owner
//!   reports its offset, says it claims nothing (log, `/healthz` 503), and runs nothing; the
//!   owner on the real clock runs each one-shot once.
//!
//! Every wait is on progress (rows, marks, health answers), never a sleep followed by a check.
#![allow(clippy::unwrap_used)] // test code

mod owner_support;
mod support;

use std::path::Path;
use std::time::Duration;

use owner_support::{Owner, OwnerSpec};

const JOBS: usize = 20;

fn jobs_yaml(marks: &Path) -> String {
    let mut y = String::from("budget: null\njobs:\n");
    for i in 0..JOBS {
        y.push_str(&format!(
            "  - name: once{i:02}\n    schedule: every 1h\n    run_immediately: true\n    max_runs: 1\n    \
             lease_seconds: 5\n    command: \"{}\"\n",
            owner_support::marking_command(marks, &format!("once{i:02}"), 7.0)
        ));
    }
    y
}

/// Rows by status name.
fn count(rows: &[serde_json::Value], status: &str) -> usize {
    rows.iter().filter(|r| r["status"] == status).count()
}

/// Rows whose owner id names process `pid` (`host:pid:uuid8`).
fn by_pid(rows: &[serde_json::Value], pid: u32) -> usize {
    rows.iter()
        .filter(|r| {
            r["owner"]
                .as_str()
                .is_some_and(|o| o.split(':').nth(1) == Some(&pid.to_string()))
        })
        .count()
}

/// Start the skewed owner (it applies the jobs), then one on the real clock; wait until every
/// one-shot has its row; check each ran once. `refused`: the skewed owner must claim nothing
/// and say so.
fn trial(name: &str, offset: &str, bound: Option<&str>, refused: bool) {
    let Some(lib) = owner_support::libfaketime_or_skip() else {
        return;
    };
    let Some(url) = support::pg::database() else {
        return;
    };
    let dir = support::tempdir(&format!("skew-{name}"));
    let marks = dir.join("marks");
    let jobs = dir.join("jobs.yaml");
    std::fs::write(&jobs, jobs_yaml(&marks)).unwrap();
    let mut args = Vec::new();
    if let Some(b) = bound {
        args = vec!["--max-clock-offset".to_string(), b.to_string()];
    }
    let skewed = Owner::start(
        "skewed",
        &dir,
        &OwnerSpec {
            store: url.clone(),
            jobs: Some(jobs.clone()),
            env: owner_support::skewed(&lib, offset),
            args,
        },
    );
    if refused {
        skewed.wait_for(
            "/healthz 503 naming the clock",
            Duration::from_secs(30),
            |o| {
                o.get("/healthz")
                    .is_some_and(|(c, b)| c == 503 && b.contains("the store's"))
            },
        );
        skewed.wait_for("the refusal in its log", Duration::from_secs(10), |o| {
            o.log()
                .iter()
                .any(|l| l.contains("clock is") && l.contains("claims stopped"))
        });
    } else {
        // It claims first: every one-shot is running under its leases.
        skewed.wait_for("its runs to start", Duration::from_secs(60), |_| {
            owner_support::marks(&marks).len() == JOBS
        });
    }
    let real = Owner::start(
        "real",
        &dir,
        &OwnerSpec {
            store: url.clone(),
            jobs: Some(jobs),
            ..Default::default()
        },
    );
    real.wait_for("a row for every one-shot", Duration::from_secs(90), |_| {
        count(&owner_support::history(&dir, &url), "succeeded") >= JOBS
    });
    // Each owner's next claim cycles see nothing left to do: the real owner's health is 200,
    // and the rows cannot grow further (every one-shot is retired).
    let rows = owner_support::history(&dir, &url);
    if refused {
        owners_shown(&dir, &url, skewed.child.id());
    }
    let log = skewed.log();
    let (skewed_pid, real_pid) = (skewed.child.id(), real.child.id());
    assert_eq!(real.stop(), 0);
    assert_eq!(skewed.stop(), 0);
    let marks = owner_support::marks(&marks);
    let problems = owner_support::recorded_once(&marks, &rows);
    assert!(problems.is_empty(), "{offset}: {problems:?}\n{rows:#?}");
    assert_eq!(
        marks.len(),
        JOBS,
        "{offset}: every one-shot ran exactly once"
    );
    assert_eq!(count(&rows, "succeeded"), JOBS, "{rows:#?}");
    assert_eq!(count(&rows, "abandoned"), 0, "{offset}: {rows:#?}");
    assert!(
        rows.iter().all(|r| r["trigger"] != "recovery"),
        "{offset}: {rows:#?}"
    );
    if refused {
        assert_eq!(
            by_pid(&rows, skewed_pid),
            0,
            "{offset}: the skewed owner ran"
        );
        assert_eq!(by_pid(&rows, real_pid), JOBS);
        assert!(
            log.iter().any(|l| l.contains("--max-clock-offset")),
            "{offset}: {log:#?}"
        );
    } else {
        assert_eq!(by_pid(&rows, skewed_pid), JOBS, "{offset}: {rows:#?}");
    }
}

/// `jobs` and `check` show both live owners from their records, and which one stopped claiming
/// and why (its clock against the database's).
fn owners_shown(dir: &Path, url: &str, skewed_pid: u32) {
    for args in [&["jobs"][..], &["check"][..]] {
        let (code, out, err) = support::cli::run_with_store(dir, url, args);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(
            out.contains("owners: 2 live, 1 not claiming"),
            "{args:?}: {out}"
        );
        let line = out
            .lines()
            .find(|l| l.contains(&format!(":{skewed_pid}:")))
            .unwrap_or_else(|| panic!("{args:?}: no line for the skewed owner: {out}"));
        assert!(
            line.contains("claims stopped: ") && line.contains("the store's"),
            "{args:?}: {line}"
        );
    }
    let (code, out, err) = support::cli::run_with_store(dir, url, &["check", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["owners"]["live"], 2, "{out}");
}

#[test]
fn an_owner_8s_behind_with_a_5s_lease_runs_each_one_shot_once() {
    trial("behind8", "-8", Some("60s"), false);
}

#[test]
fn an_owner_40s_behind_claims_nothing_and_says_so() {
    trial("behind40", "-40", None, true);
}

#[test]
fn an_owner_5min_behind_claims_nothing_and_says_so() {
    trial("behind5m", "-5m", None, true);
}

#[test]
fn an_owner_5min_ahead_claims_nothing_and_says_so() {
    trial("ahead5m", "+5m", None, true);
}

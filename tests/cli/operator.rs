//! The operator's CLI actions as real processes: `jobs` in list-timers
//! form (NEXT / LEFT / LAST / PASSED, `n/a` for paused jobs, `--utc`), `pause --reason`,
//! `describe`, `backfill`, `retry RUN_ID` and `cancel NAME|RUN_ID` across processes, each with
//! its exit code (2 for bad input).
#![allow(clippy::unwrap_used)] // test code

use crate::support;
use crate::support::daemon::Daemon;
use crate::support::wait::wait_until;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

fn cmd(d: &Path, args: &[&str]) -> Command {
    let mut c = support::cli::cronsole(d);
    c.env("TZ", "UTC").args(["--jobs", "jobs.yaml"]).args(args);
    c
}

fn run(d: &Path, args: &[&str]) -> Output {
    cmd(d, args).output().expect("the cronsole binary runs")
}

fn ok(d: &Path, args: &[&str]) -> String {
    let out = run(d, args);
    assert!(
        out.status.success(),
        "{args:?}: exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn bad(d: &Path, args: &[&str]) -> String {
    let out = run(d, args);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn setup(name: &str, jobs: &str) -> support::TempDir {
    let d = support::tempdir(&format!("cliop-{name}"));
    std::fs::write(d.join("jobs.yaml"), format!("budget: null\njobs:\n{jobs}")).unwrap();
    ok(&d, &["apply", "jobs.yaml"]);
    d
}

fn history(d: &Path, job: &str) -> Vec<serde_json::Value> {
    ok(d, &["history", "--job", job, "--json", "--limit", "100"])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Run the engine headless for a short, bounded while.
fn engine_for(d: &Path, secs: &str) {
    ok(d, &["run", "--for", secs]);
}

#[test]
fn jobs_prints_list_timers_columns_with_na_for_paused_and_the_reason() {
    let d = setup(
        "jobs",
        "  - name: nightly\n    schedule: \"0 3 * * *\"\n    command: echo hi\n  \
         - name: held\n    schedule: \"0 4 * * *\"\n    command: echo hi\n",
    );
    let out = ok(&d, &["pause", "held", "--reason", "upstream down"]);
    assert!(out.contains("paused held (upstream down)"), "{out}");
    let out = ok(&d, &["jobs", "--utc"]);
    let mut lines = out.lines();
    let header = lines.next().unwrap();
    for col in ["NAME", "STATE", "NEXT", "LEFT", "LAST", "PASSED", "NOTE"] {
        assert!(header.contains(col), "{header}");
    }
    let held = out.lines().find(|l| l.starts_with("held")).unwrap();
    let cells: Vec<&str> = held.split("  ").filter(|c| !c.trim().is_empty()).collect();
    assert_eq!(cells[1].trim(), "paused", "{held}");
    assert_eq!(cells[2].trim(), "n/a", "NEXT of a paused job: {held}");
    assert_eq!(cells[3].trim(), "n/a", "LEFT of a paused job: {held}");
    assert!(held.ends_with("paused: upstream down"), "{held}");
    let nightly = out.lines().find(|l| l.starts_with("nightly")).unwrap();
    assert!(nightly.contains(" 03:00:00 UTC"), "{nightly}");
    // LEFT is relative, in the one compact span form (`22h30m`, `5m12s`); PASSED is n/a for
    // a job that never ran.
    let cells: Vec<&str> = nightly
        .split("  ")
        .filter(|c| !c.trim().is_empty())
        .collect();
    let left = cells[3].trim();
    assert!(
        left.chars().next().is_some_and(|c| c.is_ascii_digit())
            && left
                .chars()
                .all(|c| c.is_ascii_digit() || "smhd".contains(c))
            && (left.contains('h') || left.contains('m')),
        "LEFT {left:?}: {nightly}"
    );
    assert_eq!(cells[5].trim(), "n/a", "PASSED: {nightly}");
    // JSON keeps RFC 3339 UTC.
    let v: serde_json::Value = serde_json::from_str(&ok(&d, &["jobs", "--json"])).unwrap();
    let by = |n: &str| {
        v.as_array()
            .unwrap()
            .iter()
            .find(|j| j["name"] == n)
            .unwrap()
            .clone()
    };
    let next = by("nightly")["next_slot"].as_str().unwrap().to_string();
    assert!(next.ends_with('Z') && next.contains("T03:00:00"), "{next}");
    assert_eq!(
        by("nightly")["runtime"]["pause_reason"],
        serde_json::Value::Null
    );
    assert_eq!(by("held")["runtime"]["pause_reason"], "upstream down");
    // Resume clears the reason.
    ok(&d, &["resume", "held"]);
    let out = ok(&d, &["jobs"]);
    assert!(!out.contains("upstream down"), "{out}");
}

#[test]
fn describe_prints_everything_about_one_job() {
    let d = setup(
        "describe",
        "  - name: nightly\n    schedule: \"0 3 * * *\"\n    max_runs: 5\n    command: echo hi\n",
    );
    let out = ok(&d, &["describe", "nightly", "--utc"]);
    for want in [
        "name:        nightly",
        "0 3 * * * (at 03:00 every day",
        "command `echo hi`",
        "max_runs 0/5",
        "03:00:00 UTC (",
        "spend:       $0.00 this period",
        "last runs:   none yet",
        "forecast:    $0.00 more this period",
    ] {
        assert!(out.contains(want), "missing {want:?} in\n{out}");
    }
    assert_eq!(
        out.matches(" 03:00:00 UTC (").count(),
        5,
        "five next slots:\n{out}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&ok(&d, &["describe", "nightly", "--json"])).unwrap();
    assert_eq!(v["next_slots"].as_array().unwrap().len(), 5);
    assert!(bad(&d, &["describe", "nope"]).contains("no job named 'nope'"));
}

/// A job with `max_runs: 2` lists the 2 slots it will run in every view, not the slots after
/// it retires.
#[test]
fn every_view_lists_only_the_slots_max_runs_leaves() {
    let d = setup(
        "max-runs-slots",
        "  - name: twice\n    schedule: every 2m\n    max_runs: 2\n    command: \"true\"\n",
    );
    let v: serde_json::Value =
        serde_json::from_str(&ok(&d, &["describe", "twice", "--json"])).unwrap();
    assert_eq!(v["next_slots"].as_array().unwrap().len(), 2, "{v}");
    let (code, out, err) = support::cli::run_plain(
        &d,
        &["next", "--file", "jobs.yaml", "--job", "twice", "--json"],
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["stored"], true, "{v}");
    assert_eq!(v["slots"].as_array().unwrap().len(), 2, "{v}");
    let (code, out, err) = support::cli::run_plain(&d, &["validate", "jobs.yaml"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.matches("  next: ").count(), 2, "{out}");
}

#[test]
fn backfill_queues_past_slots_that_run_as_rows_of_their_own() {
    let d = setup(
        "backfill",
        "  - name: b\n    schedule: \"0 * * * *\"\n    command: echo hi\n",
    );
    let err = bad(
        &d,
        &[
            "backfill",
            "b",
            "--from",
            "2020-01-01T10:30:00Z",
            "--to",
            "2020-01-01T10:45:00Z",
        ],
    );
    assert!(err.contains("no slot to backfill"), "{err}");
    let err = bad(
        &d,
        &[
            "backfill",
            "b",
            "--from",
            "2020-01-01T10:00:00Z",
            "--to",
            "2999-01-01T00:00:00Z",
        ],
    );
    assert!(err.contains("in the future"), "{err}");
    let err = bad(
        &d,
        &[
            "backfill",
            "b",
            "--from",
            "yesterday-ish",
            "--to",
            "2020-01-01T00:00:00Z",
        ],
    );
    assert!(err.contains("--from"), "{err}");
    let out = ok(
        &d,
        &[
            "backfill",
            "b",
            "--from",
            "2020-01-01T10:00:00Z",
            "--to",
            "2020-01-01T12:00:00Z",
        ],
    );
    assert!(out.contains("3 runs queued"), "{out}");
    let jobs = ok(&d, &["jobs"]);
    let line = jobs.lines().find(|l| l.starts_with("b ")).unwrap();
    assert!(line.contains("queued"), "{line}");
    engine_for(&d, "4s");
    let rows = history(&d, "b");
    let mut slots: Vec<&str> = rows
        .iter()
        .filter(|r| r["trigger"] == "backfill")
        .map(|r| r["slot"].as_str().unwrap())
        .collect();
    slots.sort();
    assert_eq!(
        slots,
        vec![
            "2020-01-01T10:00:00Z",
            "2020-01-01T11:00:00Z",
            "2020-01-01T12:00:00Z"
        ],
        "{rows:#?}"
    );
    assert!(rows.iter().all(|r| r["status"] == "succeeded"), "{rows:#?}");
}

#[test]
fn retry_reruns_a_failed_run_and_refuses_what_cannot_be_retried() {
    let d = setup(
        "retry",
        "  - name: r\n    schedule: every 1h\n    run_immediately: true\n    max_retries: 1\n    \
         command: \"test -f flag || { touch flag; exit 3; }\"\n",
    );
    engine_for(&d, "2s");
    let rows = history(&d, "r");
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(rows[0]["status"], "failed");
    let id = rows[0]["run_id"].as_str().unwrap().to_string();
    let out = ok(&d, &["retry", &id]);
    // The engine has stopped: the retry waits for one, and says only that.
    assert!(
        out.contains("r: 1 run queued; no engine is running on this store"),
        "{out}"
    );
    assert!(!out.contains("next owner"), "{out}");
    assert!(bad(&d, &["retry", &id]).contains("already queued"));
    assert!(bad(&d, &["retry", "not-a-uuid"]).contains("not a run id"));
    assert!(bad(&d, &["retry", &uuid::Uuid::new_v4().to_string()]).contains("no run"));
    engine_for(&d, "2s");
    let rows = history(&d, "r");
    assert_eq!(rows.len(), 2, "{rows:#?}");
    assert_eq!(rows[0]["trigger"], "retry");
    assert_eq!(rows[0]["status"], "succeeded");
    assert_eq!(rows[0]["slot"], rows[1]["slot"]);
    let ok_id = rows[0]["run_id"].as_str().unwrap().to_string();
    assert!(bad(&d, &["retry", &ok_id]).contains("only failed"));
}

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn cancel_from_another_process_kills_the_run_and_records_it_failed() {
    let d = setup(
        "cancel",
        "  - name: slow\n    schedule: every 1h\n    run_immediately: true\n    max_retries: 3\n    \
         command: \"sleep 60 & echo $! > child.pid; wait\"\n",
    );
    assert!(bad(&d, &["cancel", "slow"]).contains("nothing to cancel"));
    let engine = Daemon::spawn(&mut cmd(
        &d,
        &["run", "--for", "30s", "--metrics-addr", "127.0.0.1:0"],
    ));
    let metrics = engine.metrics_addr();
    let pidfile = d.join("child.pid");
    let mut pid = 0i32;
    wait_until("the run to start", Duration::from_secs(15), || {
        pid = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        pid > 0
    });
    let v: serde_json::Value = serde_json::from_str(&ok(&d, &["jobs", "--json"])).unwrap();
    let run_id = v[0]["lease"]["run_id"].as_str().unwrap().to_string();
    assert!(bad(&d, &["cancel", &uuid::Uuid::new_v4().to_string()]).contains("not running"));
    let out = ok(&d, &["cancel", &run_id]);
    assert!(out.contains("cancel of run"), "{out}");
    wait_until("the cancelled row", Duration::from_secs(15), || {
        !history(&d, "slow").is_empty()
    });
    let rows = history(&d, "slow");
    assert_eq!(rows[0]["status"], "failed");
    assert_eq!(rows[0]["reason"], "cancelled by operator");
    wait_until("the child to be gone", Duration::from_secs(15), || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| s.contains(") Z "))
            .unwrap_or(true)
    });
    support::scrape::settle(&metrics);
    assert_eq!(history(&d, "slow").len(), 1, "a cancel is never retried");
    engine.stop();
}

/// A retry whose owner is killed (-9) mid-run is recorded `abandoned` like any run, with a hint
/// to run it again, and is not re-offered by itself (an operator decides whether a
/// retry that died should run a third time): the next owner runs
/// nothing for it; `cronsole retry` of the abandoned row runs it again.
#[test]
fn a_retry_abandoned_by_a_kill_9_stays_abandoned_with_a_hint_and_can_be_retried() {
    let d = setup(
        "retry-crash",
        "  - name: r\n    schedule: every 1h\n    run_immediately: true\n    max_retries: 1\n    lease_seconds: 2\n    \
         command: \"if [ ! -f failed ]; then touch failed; exit 3; fi; \
         if [ -f crashed ]; then echo again; exit 0; fi; \
         touch crashed; echo $$ > retry.pid; sleep 60\"\n",
    );
    engine_for(&d, "2s");
    let rows = history(&d, "r");
    assert_eq!(rows[0]["status"], "failed", "{rows:#?}");
    let failed = rows[0]["run_id"].as_str().unwrap().to_string();
    ok(&d, &["retry", &failed]);
    let mut engine = Kill(
        cmd(&d, &["run", "--for", "30s"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_until("the retry to start", Duration::from_secs(15), || {
        d.join("retry.pid").exists()
    });
    let v: serde_json::Value = serde_json::from_str(&ok(&d, &["jobs", "--json"])).unwrap();
    assert_eq!(v[0]["lease"]["trigger"], "retry", "{v:#}");
    let retry_run = v[0]["lease"]["run_id"].as_str().unwrap().to_string();
    engine.0.kill().unwrap(); // SIGKILL
    engine.0.wait().unwrap();
    drop(engine);
    // Another owner, once the lease lapsed: it records the retry abandoned and runs nothing.
    let next = Daemon::spawn(&mut cmd(
        &d,
        &["run", "--for", "60s", "--metrics-addr", "127.0.0.1:0"],
    ));
    let metrics = next.metrics_addr();
    wait_until("the abandoned row", Duration::from_secs(20), || {
        history(&d, "r").len() >= 2
    });
    support::scrape::settle(&metrics);
    next.stop();
    let rows = history(&d, "r");
    assert_eq!(rows.len(), 2, "the retry was re-run: {rows:#?}");
    assert_eq!(rows[0]["run_id"], retry_run.as_str());
    assert_eq!(rows[0]["status"], "abandoned");
    assert_eq!(rows[0]["trigger"], "retry");
    let why = rows[0]["reason"].as_str().unwrap();
    assert!(
        why.contains(&format!("cronsole retry {retry_run}")),
        "{why}"
    );
    // The row names the owner that recovered the run; the killed one is in its reason.
    let by = rows[0]["recovered_by"].as_str().expect("recovered_by");
    assert!(
        !why.contains(&format!("lease of owner {by} ")),
        "the killed owner is another: {why}"
    );
    let out = ok(&d, &["describe", "r"]);
    assert!(out.contains(&format!("recovered by {by}; ")), "{out}");
    let v: serde_json::Value = serde_json::from_str(&ok(&d, &["jobs", "--json"])).unwrap();
    let queue = &v[0]["runtime"]["queue"];
    assert!(queue.as_array().is_none_or(|q| q.is_empty()), "{v:#}");
    // `history` text says how to run it again.
    let text = ok(&d, &["history", "--job", "r"]);
    assert!(
        text.contains(&format!("cronsole retry {retry_run}")),
        "{text}"
    );
    // Following the hint runs it again: a run of its own.
    ok(&d, &["retry", &retry_run]);
    engine_for(&d, "2s");
    let rows = history(&d, "r");
    assert_eq!(rows.len(), 3, "{rows:#?}");
    assert_eq!(
        (&rows[0]["status"], &rows[0]["trigger"]),
        (&serde_json::json!("succeeded"), &serde_json::json!("retry"))
    );
    assert_eq!(rows[0]["result"].as_str().map(str::trim), Some("again"));
}

#[test]
fn stats_prints_the_spend_forecast() {
    let d = setup(
        "stats",
        "  - name: n\n    schedule: \"0 3 * * *\"\n    command: echo hi\n",
    );
    // `budget: null`: no limit, only the projection.
    let out = ok(&d, &["stats"]);
    assert!(
        out.contains("forecast: projected $0.00 this period"),
        "{out}"
    );
    // With a budget: when (or whether) its limit is reached.
    std::fs::write(
        d.join("jobs.yaml"),
        "budget: {max_cost_usd: 2, period: day}\njobs:\n  - name: n\n    schedule: \"0 3 * * *\"\n    command: echo hi\n",
    )
    .unwrap();
    ok(&d, &["apply", "jobs.yaml"]);
    let out = ok(&d, &["stats"]);
    assert!(
        out.contains("forecast: limit not reached this period"),
        "{out}"
    );
    let v: serde_json::Value = serde_json::from_str(&ok(&d, &["stats", "--json"])).unwrap();
    assert_eq!(v["forecast"]["limit_reached_at"], serde_json::Value::Null);
    assert_eq!(v["forecast"]["limit_usd"], 2.0);
    assert!(
        v["global"]["total_executions"].is_u64(),
        "the stats keys stay"
    );
}

/// An error quoting the operator's own argument shows its control bytes escaped
/// (`^[`, `^G`) like store text, never raw — for every command that echoes one — and keeps its
/// exit code 2.
#[test]
fn errors_show_the_operators_arguments_escaped() {
    let d = setup(
        "esc",
        "  - name: nightly\n    schedule: \"0 3 * * *\"\n    command: echo hi\n",
    );
    let evil = "j\u{1b}]0;PWN\u{7}";
    let cases: Vec<Vec<&str>> = vec![
        vec!["pause", evil],
        vec!["resume", evil],
        vec!["trigger", evil],
        vec!["cancel", evil],
        vec!["pause", "--tag", evil],
        vec![
            "backfill",
            "nightly",
            "--from",
            evil,
            "--to",
            "2020-01-01T00:00:00Z",
        ],
        vec!["retry", evil],
        vec!["history", "--since", evil],
        vec!["history", "--page", evil],
    ];
    for args in cases {
        let out = run(&d, &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.stderr.iter().any(|b| *b == 0x1b || *b == 0x07),
            "{args:?}: raw control bytes reach the terminal: {err:?}"
        );
        assert!(err.contains("j^[]0;PWN^G"), "{args:?}: {err:?}");
    }
}

//! Owners whose clocks disagree, as real processes on PostgreSQL: one `cronsole run` under
//! libfaketime (its wall clock skewed, its monotonic clock real) beside one on the real clock,
//! over 20 one-shots with a 5 s lease that each run longer than the lease.
//!
//! - 8 s behind, with a bound that lets it claim: the database's clock judges every lease, so no
//!   one-shot runs twice and none is recorded `abandoned`.
//! - 40 s behind, 5 min behind and 5 min ahead, under the default bound: the skewed owner
//!   reports its offset, says it claims nothing (log, `/healthz` 503), and runs nothing; the
//!   owner on the real clock runs each one-shot once.
//! - 2 s ahead with the bound `off`, on the file store: the same (ahead by more than a quarter
//!   of the lease, it would read live leases as expired).
//!
//! And a clock that steps, on the file store: one owner whose wall clock libfaketime moves while
//! it runs (its monotonic clock real, so the step shows), as a host's clock stepped by hand
//! would move. The owner's bound is `off`: on one host the store's clock steps with it, which a
//! faked clock cannot show.
//!
//! - Two days ahead, then back: while ahead it records the skipped slots (`missed`, or one
//!   coalesced run) and runs on the later clock; once back, every job fires at its next real
//!   slot, and no slot runs twice.
//! - An hour back for a few heartbeats, then set right: no slot that ran runs again (the job
//!   waits for the clock rather than re-deriving from it), every job fires at its next real
//!   slot once the clock is right, and a job that had not run yet keeps its first slot.
//!
//! And `cronsole apply` on a clock an hour ahead or behind: it stores the jobs on the file
//! store's clock, and an owner on the real clock runs each at its first real slot.
//! `cronsole trigger` and `retry` on a clock an hour ahead date their requests on the file
//! store's clock too, and the owner runs them at once.
//! `pause` and `resume` there date their edits on it too: the resumed job runs at its next real
//! slot, and `jobs` and `check` count the owner live.
//!
//! And an owner whose clock alone is ahead of the file store's within the bound: it claims on
//! the store's clock, so no slot's run starts before the slot on the real clock, and a dead
//! owner's one-shot is taken over no earlier than its lease ends, its `abandoned` row dated on
//! the store's clock.
//!
//! Every wait is on progress (rows, marks, health answers), never a sleep followed by a check.
#![allow(clippy::unwrap_used)] // test code

mod owner_support;
mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use owner_support::{Owner, OwnerSpec};

const JOBS: usize = 20;

fn jobs_yaml(marks: &Path, run_secs: f64) -> String {
    let mut y = String::from("budget: null\njobs:\n");
    for i in 0..JOBS {
        y.push_str(&format!(
            "  - name: once{i:02}\n    schedule: every 1h\n    run_immediately: true\n    max_runs: 1\n    \
             lease_seconds: 5\n    command: \"{}\"\n",
            owner_support::marking_command(marks, &format!("once{i:02}"), run_secs)
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
    let Some(url) = support::pg::database() else {
        return;
    };
    trial_on(name, offset, bound, refused, |_| url.clone());
}

/// [`trial`] on the store `store` gives for the trial's directory.
fn trial_on(
    name: &str,
    offset: &str,
    bound: Option<&str>,
    refused: bool,
    store: impl FnOnce(&Path) -> String,
) {
    let Some(lib) = owner_support::libfaketime_or_skip() else {
        return;
    };
    let dir = support::tempdir(&format!("skew-{name}"));
    let url = store(&dir);
    let marks = dir.join("marks");
    let jobs = dir.join("jobs.yaml");
    std::fs::write(&jobs, jobs_yaml(&marks, 7.0)).unwrap();
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

/// With the bound `off` (one host whose clock is the store's), an owner whose clock alone is
/// 2 s ahead, with 5 s leases renewed when a third is left: it would read the other owner's
/// live leases as expired and run their one-shots again (20 s ahead of 30 s leases did), so it
/// claims nothing past a quarter of the lease, and says so.
#[test]
fn with_the_bound_off_an_owner_2s_ahead_with_a_5s_lease_claims_nothing_on_the_file_store() {
    trial_on("ahead2-off", "+2", Some("off"), true, |dir| {
        dir.join("store").display().to_string()
    });
}

/// The same under an explicit bound larger than the lease: on the file store owners judge
/// leases by their own clocks, so ahead the quarter of the lease holds whatever the bound.
#[test]
fn under_a_60s_bound_an_owner_8s_ahead_with_a_5s_lease_claims_nothing_on_the_file_store() {
    trial_on("ahead8-60s", "+8", Some("60s"), true, |dir| {
        dir.join("store").display().to_string()
    });
}

#[test]
fn an_owner_8s_behind_with_a_5s_lease_runs_each_one_shot_once() {
    trial("behind8", "-8", Some("60s"), false);
}

/// Inside the old 2 s floor but over a quarter of the 5 s lease: its leases would look
/// expired to the other owner a few seconds after each renewal.
#[test]
fn an_owner_1_5s_behind_with_a_5s_lease_claims_nothing_and_says_so() {
    trial("behind1500ms", "-1.5", None, true);
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

/// The stepping trials' jobs: `tick` every 2 s (a late fire coalesces), `graced` every 3 s
/// with 1 s of misfire grace (late slots are recorded `missed`); each execution leaves a mark.
const STEP_JOBS: [(&str, i64); 2] = [("tick", 2), ("graced", 3)];

/// A job of the stepping trials that has not run when the clock steps: its first slot is an
/// hour after it was stored.
const UNRUN: &str = "hourly";

fn step_jobs_yaml(marks: &Path) -> String {
    let mut y = format!(
        "budget: null\njobs:\n  - name: {UNRUN}\n    schedule: every 1h\n    command: \"{}\"\n",
        owner_support::marking_command(marks, UNRUN, 0.0)
    );
    for (name, every) in STEP_JOBS {
        let grace = if name == "graced" {
            "    misfire_grace_seconds: 1\n"
        } else {
            ""
        };
        y.push_str(&format!(
            "  - name: {name}\n    schedule: every {every}s\n{grace}    command: \"{}\"\n",
            owner_support::marking_command(marks, name, 0.0)
        ));
    }
    y
}

/// An owner on a file store whose wall clock follows the libfaketime spec in `ts`.
struct Stepped {
    dir: support::TempDir,
    store: String,
    ts: PathBuf,
    marks: PathBuf,
    owner: Owner,
}

impl Stepped {
    fn start(name: &str) -> Option<Stepped> {
        let lib = owner_support::libfaketime_or_skip()?;
        let dir = support::tempdir(&format!("step-{name}"));
        let (ts, marks, jobs) = (
            dir.join("faketime"),
            dir.join("marks"),
            dir.join("jobs.yaml"),
        );
        std::fs::write(&ts, "+0\n").unwrap();
        std::fs::write(&jobs, step_jobs_yaml(&marks)).unwrap();
        let store = dir.join("store").display().to_string();
        let owner = Owner::start(
            name,
            &dir,
            &OwnerSpec {
                store: store.clone(),
                jobs: Some(jobs),
                env: owner_support::steppable(&lib, &ts),
                args: vec!["--max-clock-offset".into(), "off".into()],
            },
        );
        let s = Stepped {
            dir,
            store,
            ts,
            marks,
            owner,
        };
        // Every job has run on the real clock before any step.
        s.wait_for_runs(
            "runs on the real clock",
            Utc::now() - chrono::Duration::minutes(1),
            Utc::now() + chrono::Duration::days(1),
        );
        Some(s)
    }

    /// Step the owner's wall clock to `spec` from the real one (it reads the file each second).
    fn set(&self, spec: &str) {
        std::fs::write(&self.ts, format!("{spec}\n")).unwrap();
    }

    /// The newest heartbeat (by the store's clock) of an owner record an hour behind, if any.
    fn behind_beats(&self) -> Option<DateTime<Utc>> {
        let dir = Path::new(&self.store).join("owners");
        std::fs::read_dir(dir)
            .ok()?
            .filter_map(|e| std::fs::read(e.ok()?.path()).ok())
            .filter_map(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .filter(|r| {
                r["clock_offset_ms"]
                    .as_i64()
                    .is_some_and(|o| o < -1_800_000)
            })
            .filter_map(|r| r["last_seen"].as_str()?.parse::<DateTime<Utc>>().ok())
            .max()
    }

    fn rows(&self) -> Vec<serde_json::Value> {
        owner_support::history(&self.dir, &self.store)
    }

    /// Wait until every job has an execution (a `succeeded` row) whose slot is at or after
    /// `from` and whose row was written before `until`.
    fn wait_for_runs(&self, what: &str, from: DateTime<Utc>, until: DateTime<Utc>) {
        self.owner.wait_for(what, Duration::from_secs(60), |_| {
            let rows = self.rows();
            STEP_JOBS
                .iter()
                .all(|(job, _)| first_run(&rows, job, from, until).is_some())
        });
    }

    /// Stop the owner (exit 0) and check that each execution has one row and no slot of a
    /// job ran twice. The rows, oldest first.
    fn finish(self) -> Vec<serde_json::Value> {
        let log = self.owner.log();
        assert_eq!(self.owner.stop(), 0, "{log:#?}");
        let rows = owner_support::history(&self.dir, &self.store);
        let marks = owner_support::marks(&self.marks);
        let problems = owner_support::recorded_once(&marks, &rows);
        assert!(problems.is_empty(), "{problems:?}\n{rows:#?}");
        let mut slots = std::collections::BTreeSet::new();
        for r in rows.iter().filter(|r| r["status"] == "succeeded") {
            let key = (r["job"].to_string(), r["slot"].to_string());
            assert!(
                slots.insert(key.clone()),
                "slot run twice: {key:?}\n{rows:#?}"
            );
        }
        rows
    }
}

/// The first `succeeded` row of `job` with a slot at or after `from`, written before `until`.
fn first_run<'a>(
    rows: &'a [serde_json::Value],
    job: &str,
    from: DateTime<Utc>,
    until: DateTime<Utc>,
) -> Option<&'a serde_json::Value> {
    rows.iter().find(|r| {
        r["job"] == job
            && r["status"] == "succeeded"
            && owner_support::at(r, "slot").is_some_and(|s| s >= from)
            && owner_support::at(r, "finished_at").is_some_and(|f| f < until)
    })
}

/// Each job's first run from `from` on stands for a slot at most one interval after `from`,
/// plus the second libfaketime takes to read its file and the heartbeat turn (5 s) that
/// notices the step of an owner asleep until a slot its stepped clock put far away.
fn assert_next_slots(rows: &[serde_json::Value], from: DateTime<Utc>, until: DateTime<Utc>) {
    for (job, every) in STEP_JOBS {
        let r = first_run(rows, job, from, until).unwrap();
        let slot = owner_support::at(r, "slot").unwrap();
        assert!(
            slot <= from + chrono::Duration::seconds(every + 8),
            "{job}: first slot {slot} after {from}: {rows:#?}"
        );
    }
}

#[test]
fn a_file_store_clock_two_days_ahead_then_back_fires_every_job_at_its_next_real_slot() {
    let Some(s) = Stepped::start("ahead2d") else {
        return;
    };
    let far = || Utc::now() + chrono::Duration::days(1);
    s.set("+2d");
    s.owner
        .wait_for("the rows two days ahead", Duration::from_secs(60), |_| {
            let rows = s.rows();
            STEP_JOBS.iter().all(|(job, _)| {
                rows.iter().any(|r| {
                    r["job"] == *job
                        && owner_support::at(r, "finished_at").is_some_and(|f| f > far())
                })
            })
        });
    let ahead = s.rows();
    assert!(
        ahead
            .iter()
            .any(|r| r["job"] == "graced" && r["status"] == "missed"),
        "{ahead:#?}"
    );
    s.set("+0");
    let back = Utc::now();
    s.wait_for_runs("runs on the real clock again", back, far());
    let log = s.owner.log();
    assert!(
        log.iter().any(|l| l.contains("wall clock stepped +2d")),
        "{log:#?}"
    );
    assert!(
        log.iter().any(|l| l.contains("wall clock stepped -2d")),
        "{log:#?}"
    );
    assert!(
        log.iter().any(|l| l.contains("slots re-derived")),
        "{log:#?}"
    );
    let rows = s.finish();
    assert_next_slots(&rows, back, far());
}

#[test]
fn a_file_store_clock_stepped_an_hour_back_and_set_right_never_reruns_a_slot() {
    let Some(s) = Stepped::start("back1h") else {
        return;
    };
    let far = || Utc::now() + chrono::Duration::days(1);
    s.set("-1h");
    s.owner
        .wait_for("the step back in the log", Duration::from_secs(30), |o| {
            o.log().iter().any(|l| l.contains("wall clock stepped -1h"))
        });
    // Two heartbeats an hour behind: the owner's claim loop has turned on the stepped clock.
    let beats = || s.behind_beats();
    s.owner.wait_for(
        "a heartbeat an hour behind",
        Duration::from_secs(30),
        |_| beats().is_some(),
    );
    let first = beats();
    s.owner.wait_for(
        "a second heartbeat an hour behind",
        Duration::from_secs(30),
        |_| beats() > first,
    );
    s.set("+0");
    let back = Utc::now();
    s.wait_for_runs("runs on the real clock again", back, far());
    let rows = s.finish();
    assert_next_slots(&rows, back, far());
    // Stored moments before the step, it never got a first slot before it existed.
    assert!(rows.iter().all(|r| r["job"] != UNRUN), "{rows:#?}");
}

#[test]
fn a_file_store_owner_stepped_40s_behind_mid_run_runs_each_one_shot_once() {
    let Some(lib) = owner_support::libfaketime_or_skip() else {
        return;
    };
    let dir = support::tempdir("step-behind40");
    let (ts, marks, jobs) = (
        dir.join("faketime"),
        dir.join("marks"),
        dir.join("jobs.yaml"),
    );
    std::fs::write(&ts, "+0\n").unwrap();
    std::fs::write(&jobs, jobs_yaml(&marks, 12.0)).unwrap();
    let store = dir.join("store").display().to_string();
    let stepped = Owner::start(
        "stepped",
        &dir,
        &OwnerSpec {
            store: store.clone(),
            jobs: Some(jobs.clone()),
            env: owner_support::steppable(&lib, &ts),
            args: Vec::new(),
        },
    );
    stepped.wait_for("its runs to start", Duration::from_secs(60), |_| {
        owner_support::marks(&marks).len() == JOBS
    });
    let real = Owner::start(
        "real",
        &dir,
        &OwnerSpec {
            store: store.clone(),
            jobs: Some(jobs),
            ..Default::default()
        },
    );
    real.wait_for("the real owner ready", Duration::from_secs(30), |o| {
        o.get("/healthz").is_some_and(|(c, _)| c == 200)
    });
    std::fs::write(&ts, "-40\n").unwrap();
    stepped.wait_for("the refusal in its log", Duration::from_secs(30), |o| {
        o.log()
            .iter()
            .any(|l| l.contains("40.") && l.contains("behind") && l.contains("claims stopped"))
    });
    real.wait_for("a row for every one-shot", Duration::from_secs(90), |_| {
        count(&owner_support::history(&dir, &store), "succeeded") >= JOBS
    });
    let rows = owner_support::history(&dir, &store);
    let stepped_pid = stepped.child.id();
    let log = stepped.log();
    assert_eq!(real.stop(), 0);
    assert_eq!(stepped.stop(), 0, "{log:#?}");
    let marks = owner_support::marks(&marks);
    let problems = owner_support::recorded_once(&marks, &rows);
    assert!(problems.is_empty(), "{problems:?}\n{rows:#?}");
    assert_eq!(
        marks.len(),
        JOBS,
        "every one-shot ran exactly once: {rows:#?}"
    );
    assert_eq!(count(&rows, "succeeded"), JOBS, "{rows:#?}");
    assert_eq!(count(&rows, "abandoned"), 0, "{rows:#?}");
    assert!(rows.iter().all(|r| r["trigger"] != "recovery"), "{rows:#?}");
    assert_eq!(by_pid(&rows, stepped_pid), JOBS, "{rows:#?}");
    // Each row says its run crossed the step (about 40 s: libfaketime and the run's clock
    // readings are a few hundred milliseconds apart).
    assert!(
        rows.iter()
            .all(|r| r["clock_stepped"] == "-40s" || r["clock_stepped"] == "-39s"),
        "{rows:#?}"
    );
}

/// Jobs stored by `cronsole apply` on a clock an hour ahead, on a file store no owner ever ran
/// on that clock: the apply stores them on the store's clock (and says so), and an owner
/// started on the real clock runs each at its first real slot, not an hour later.
#[test]
fn jobs_an_apply_an_hour_ahead_stored_run_at_their_real_slots_on_the_file_store() {
    let Some(lib) = owner_support::libfaketime_or_skip() else {
        return;
    };
    let dir = support::tempdir("apply-ahead");
    let (marks, jobs) = (dir.join("marks"), dir.join("ahead.yaml"));
    let mut yaml = "budget: null\njobs:\n".to_string();
    for (name, schedule) in [
        ("every", "every 3s"),
        ("once", "in 4s"),
        ("minutely", "\"* * * * *\""),
    ] {
        yaml.push_str(&format!(
            "  - name: {name}\n    schedule: {schedule}\n    command: \"{}\"\n",
            owner_support::marking_command(&marks, name, 0.0)
        ));
    }
    std::fs::write(&jobs, yaml).unwrap();
    let store = dir.join("store");
    let (code, _, err) = support::cli::output(
        support::cli::cronsole(&dir)
            .arg("apply")
            .arg(&jobs)
            .arg("--store")
            .arg(&store)
            .envs(owner_support::skewed(&lib, "+1h")),
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("stored on the store's clock"), "{err}");
    let started = Utc::now();
    let store = store.display().to_string();
    let owner = Owner::start(
        "real",
        &dir,
        &OwnerSpec {
            store: store.clone(),
            ..Default::default()
        },
    );
    owner.wait_for("a run of every job", Duration::from_secs(90), |_| {
        let rows = owner_support::history(&dir, &store);
        ["every", "once", "minutely"].iter().all(|job| {
            rows.iter()
                .any(|r| r["job"] == *job && r["status"] == "succeeded")
        })
    });
    let rows = owner_support::history(&dir, &store);
    for job in ["every", "once", "minutely"] {
        let first = rows
            .iter()
            .find(|r| r["job"] == job && r["status"] == "succeeded")
            .and_then(|r| owner_support::at(r, "slot"))
            .unwrap();
        assert!(
            first < started + chrono::Duration::seconds(75),
            "{job}: first slot {first}: {rows:#?}"
        );
    }
    let log = owner.log();
    assert_eq!(owner.stop(), 0, "{log:#?}");
    let problems = owner_support::recorded_once(&owner_support::marks(&marks), &rows);
    assert!(problems.is_empty(), "{problems:?}\n{rows:#?}");
}

/// `cronsole apply` on a clock an hour behind or ahead stores the jobs on the file store's
/// clock (the file system's), and says so: an `every 10m` job's first slot is ten minutes after
/// the real instant it was applied at. On a clock behind such jobs once ran at once, for slots
/// before they were stored; on one ahead they waited the hour.
#[test]
fn an_apply_on_a_clock_an_hour_off_stores_jobs_on_the_file_stores_clock() {
    let Some(lib) = owner_support::libfaketime_or_skip() else {
        return;
    };
    for skew in ["-1h", "+1h"] {
        let dir = support::tempdir("apply-off");
        let jobs = dir.join("off.yaml");
        std::fs::write(
            &jobs,
            "budget: null\njobs:\n  - name: tenner\n    schedule: every 10m\n    command: \"true\"\n",
        )
        .unwrap();
        let store = dir.join("store");
        let before = Utc::now();
        let (code, _, err) = support::cli::output(
            support::cli::cronsole(&dir)
                .arg("apply")
                .arg(&jobs)
                .arg("--store")
                .arg(&store)
                .envs(owner_support::skewed(&lib, skew)),
        );
        assert_eq!(code, 0, "{err}");
        assert!(err.contains("stored on the store's clock"), "{skew}: {err}");
        let after = Utc::now();
        let (code, out, err) =
            support::cli::run_with_store(&dir, &store, &["describe", "tenner", "--json"]);
        assert_eq!(code, 0, "{err}");
        let d: serde_json::Value = serde_json::from_str(&out).unwrap();
        let next: DateTime<Utc> = d["next_slots"][0].as_str().unwrap().parse().unwrap();
        let (ten, slack) = (chrono::Duration::minutes(10), chrono::Duration::seconds(2));
        assert!(
            next >= before + ten - slack && next <= after + ten + slack,
            "{skew}: first slot {next}, applied between {before} and {after}"
        );
    }
}

/// `cronsole trigger` and `cronsole retry` on a clock an hour ahead date their requests on the
/// file store's clock (and say so): an owner on the real clock runs each at once. Dated on the
/// command's clock, no owner acted on them before their instant, an hour later. Nor do they
/// say no engine runs: the owner's heartbeat is judged on the store's clock too.
#[test]
fn a_trigger_and_a_retry_on_a_clock_an_hour_ahead_run_at_once_on_the_file_store() {
    let Some(lib) = owner_support::libfaketime_or_skip() else {
        return;
    };
    let dir = support::tempdir("trigger-ahead");
    let jobs = dir.join("hourly.yaml");
    std::fs::write(
        &jobs,
        "budget: null\njobs:\n  - name: hourly\n    schedule: every 1h\n    command: \"false\"\n    max_retries: 1\n",
    )
    .unwrap();
    let store = dir.join("store");
    let (code, _, err) = support::cli::output(
        support::cli::cronsole(&dir)
            .arg("apply")
            .arg(&jobs)
            .arg("--store")
            .arg(&store),
    );
    assert_eq!(code, 0, "{err}");
    let store_s = store.display().to_string();
    let owner = Owner::start(
        "real",
        &dir,
        &OwnerSpec {
            store: store_s.clone(),
            ..Default::default()
        },
    );
    let ahead = |args: &[&str]| {
        let (code, out, err) = support::cli::output(
            support::cli::cronsole(&dir)
                .args(args)
                .arg("--store")
                .arg(&store)
                .envs(owner_support::skewed(&lib, "+1h")),
        );
        assert_eq!(code, 0, "{args:?}: {out}{err}");
        assert!(err.contains("on the store's clock"), "{args:?}: {err}");
        assert!(!out.contains("no engine is running"), "{args:?}: {out}");
    };
    let runs = || -> Vec<serde_json::Value> {
        owner_support::history(&dir, &store_s)
            .into_iter()
            .filter(|r| r["job"] == "hourly" && r["status"] == "failed")
            .collect()
    };
    ahead(&["trigger", "hourly"]);
    owner.wait_for("the triggered run", Duration::from_secs(60), |_| {
        !runs().is_empty()
    });
    let first = runs()[0]["run_id"].as_str().unwrap().to_string();
    ahead(&["retry", &first]);
    owner.wait_for("the retried run", Duration::from_secs(60), |_| {
        runs().iter().any(|r| r["trigger"] == "retry")
    });
    let log = owner.log();
    assert_eq!(owner.stop(), 0, "{log:#?}");
}

/// `cronsole pause` and `resume` on a clock an hour ahead date their edits on the file store's
/// clock (and say so): the resumed `every 2s` job runs again within seconds. Dated on the
/// command's clock, the resumed job took its next slot from an hour ahead and stayed idle for
/// the hour. `jobs`, `check` and the pause's note judge the owner's heartbeat on the store's
/// clock too: on the command's, the live owner read as an hour silent.
#[test]
fn a_pause_and_a_resume_on_a_clock_an_hour_ahead_act_at_once_on_the_file_store() {
    let Some(lib) = owner_support::libfaketime_or_skip() else {
        return;
    };
    let dir = support::tempdir("resume-ahead");
    let (marks, jobs) = (dir.join("marks"), dir.join("tick.yaml"));
    std::fs::write(
        &jobs,
        format!(
            "budget: null\njobs:\n  - name: tick\n    schedule: every 2s\n    command: \"{}\"\n",
            owner_support::marking_command(&marks, "tick", 0.0)
        ),
    )
    .unwrap();
    let store = dir.join("store");
    let (code, _, err) = support::cli::output(
        support::cli::cronsole(&dir)
            .arg("apply")
            .arg(&jobs)
            .arg("--store")
            .arg(&store),
    );
    assert_eq!(code, 0, "{err}");
    let store_s = store.display().to_string();
    let owner = Owner::start(
        "real",
        &dir,
        &OwnerSpec {
            store: store_s.clone(),
            ..Default::default()
        },
    );
    owner.wait_for("a first run", Duration::from_secs(60), |_| {
        !owner_support::marks(&marks).is_empty()
    });
    let ahead = |args: &[&str]| {
        let (code, out, err) = support::cli::output(
            support::cli::cronsole(&dir)
                .args(args)
                .arg("--store")
                .arg(&store)
                .envs(owner_support::skewed(&lib, "+1h")),
        );
        assert_eq!(code, 0, "{args:?}: {out}{err}");
        assert!(!out.contains("no engine is running"), "{args:?}: {out}");
        (out, err)
    };
    let (out, err) = ahead(&["pause", "tick"]);
    assert!(out.contains("paused tick"), "{out}");
    assert!(err.contains("on the store's clock"), "{err}");
    for view in ["jobs", "check"] {
        let (out, _) = ahead(&[view]);
        assert!(
            out.contains("owners: 1 live, all claiming"),
            "{view}: {out}"
        );
    }
    let before = owner_support::marks(&marks).len();
    let (out, err) = ahead(&["resume", "tick"]);
    assert!(out.contains("resumed tick"), "{out}");
    assert!(err.contains("on the store's clock"), "{err}");
    owner.wait_for("two runs after the resume", Duration::from_secs(30), |_| {
        owner_support::marks(&marks).len() >= before + 2
    });
    let log = owner.log();
    assert_eq!(owner.stop(), 0, "{log:#?}");
    let rows = owner_support::history(&dir, &store_s);
    let problems = owner_support::recorded_once(&owner_support::marks(&marks), &rows);
    assert!(problems.is_empty(), "{problems:?}\n{rows:#?}");
}

/// The real clock's instant a job's command printed as `real=SECONDS.NANOS` (its `date` runs
/// without libfaketime).
fn real_start(row: &serde_json::Value) -> Option<f64> {
    let out = row["result"].as_str()?;
    let at = out.split("real=").nth(1)?.split_whitespace().next()?;
    at.parse().ok()
}

/// Seconds since the epoch of a row's RFC 3339 field.
fn secs_at(row: &serde_json::Value, field: &str) -> Option<f64> {
    owner_support::at(row, field).map(|t| t.timestamp_micros() as f64 / 1e6)
}

/// A command that prints the real clock's instant it started at (see [`real_start`]), leaves
/// it in `marks`, then sleeps `sleep` seconds unless it is not the first execution.
fn real_clock_command(marks: &Path, sleep: u32) -> String {
    format!(
        "t=$(env -u LD_PRELOAD date +%s.%N); echo $t >> {m}; \
         [ $(wc -l < {m}) -gt 1 ] || sleep {sleep}; echo real=$t",
        m = marks.display()
    )
}

/// An owner whose clock alone is 5 s ahead of the file store's, inside the bound (7.5 s for
/// the default 30 s lease): its claims decide on the store's clock as its heartbeat read it,
/// so no slot's run starts before the slot on the real clock. Deciding on its own clock, each
/// started 5 s early.
#[test]
fn an_owner_5s_ahead_inside_the_bound_starts_no_slot_early_on_the_file_store() {
    let Some(lib) = owner_support::libfaketime_or_skip() else {
        return;
    };
    let dir = support::tempdir("early-ahead");
    let (marks, jobs) = (dir.join("marks"), dir.join("tick.yaml"));
    std::fs::write(
        &jobs,
        format!(
            "budget: null\njobs:\n  - name: tick\n    schedule: every 2s\n    command: \"{}\"\n",
            real_clock_command(&marks, 0)
        ),
    )
    .unwrap();
    let store = dir.join("store");
    let (code, _, err) = support::cli::output(
        support::cli::cronsole(&dir)
            .arg("apply")
            .arg(&jobs)
            .arg("--store")
            .arg(&store),
    );
    assert_eq!(code, 0, "{err}");
    let store_s = store.display().to_string();
    let owner = Owner::start(
        "ahead",
        &dir,
        &OwnerSpec {
            store: store_s.clone(),
            env: owner_support::skewed(&lib, "+5"),
            ..Default::default()
        },
    );
    let succeeded = |rows: &[serde_json::Value]| count(rows, "succeeded");
    owner.wait_for("four runs", Duration::from_secs(60), |_| {
        succeeded(&owner_support::history(&dir, &store_s)) >= 4
    });
    let offset = owner.metric("cronsole_clock_offset_seconds");
    let log = owner.log();
    assert_eq!(owner.stop(), 0, "{log:#?}");
    assert!(
        offset.is_some_and(|o| (4.0..6.0).contains(&o)),
        "the owner's clock is 5 s ahead: {offset:?}"
    );
    let rows = owner_support::history(&dir, &store_s);
    let runs: Vec<_> = rows.iter().filter(|r| r["status"] == "succeeded").collect();
    assert!(runs.len() >= 4, "{rows:#?}");
    for r in runs {
        let (slot, real) = (secs_at(r, "slot").unwrap(), real_start(r).unwrap());
        assert!(
            real >= slot,
            "started {:.3}s before its slot on the real clock: {r:#?}",
            slot - real
        );
    }
}

/// An owner on the real clock is killed (`kill -9`) while its one-shot runs under a 12 s
/// lease; an owner 2 s ahead (inside the 3 s bound) takes it over. It judges the lease on the
/// store's clock, so the recovery starts no earlier than the lease ends on the real clock, and
/// the `abandoned` row it writes is dated on the store's clock, before the recovery's start
/// (on its own clock, it recovered the run 2 s early and dated that row 2 s ahead).
#[test]
fn an_owner_2s_ahead_recovers_a_dead_owners_lease_no_earlier_than_it_ends_on_the_file_store() {
    let Some(lib) = owner_support::libfaketime_or_skip() else {
        return;
    };
    let dir = support::tempdir("recover-ahead");
    let (marks, jobs) = (dir.join("marks"), dir.join("once.yaml"));
    std::fs::write(
        &jobs,
        format!(
            "budget: null\njobs:\n  - name: once\n    schedule: every 1h\n    run_immediately: true\n    \
             max_runs: 1\n    lease_seconds: 12\n    command: \"{}\"\n",
            real_clock_command(&marks, 60)
        ),
    )
    .unwrap();
    let store = dir.join("store").display().to_string();
    let mut real = Owner::start(
        "real",
        &dir,
        &OwnerSpec {
            store: store.clone(),
            jobs: Some(jobs),
            ..Default::default()
        },
    );
    real.wait_for("the first run", Duration::from_secs(60), |_| {
        !owner_support::marks(&marks).is_empty()
    });
    // Before its first renewal, a third of the lease in.
    real.child.kill().unwrap();
    let _ = real.child.wait();
    let first: f64 = owner_support::marks(&marks)[0].parse().unwrap();
    let ahead = Owner::start(
        "ahead",
        &dir,
        &OwnerSpec {
            store: store.clone(),
            env: owner_support::skewed(&lib, "+2"),
            ..Default::default()
        },
    );
    ahead.wait_for("the recovery's row", Duration::from_secs(60), |_| {
        count(&owner_support::history(&dir, &store), "succeeded") >= 1
    });
    let offset = ahead.metric("cronsole_clock_offset_seconds");
    let log = ahead.log();
    assert_eq!(ahead.stop(), 0, "{log:#?}");
    assert!(
        offset.is_some_and(|o| (1.5..2.5).contains(&o)),
        "the owner's clock is 2 s ahead: {offset:?}"
    );
    let rows = owner_support::history(&dir, &store);
    assert_eq!(rows.len(), 2, "{rows:#?}");
    let abandoned = rows.iter().find(|r| r["status"] == "abandoned").unwrap();
    let rerun = rows.iter().find(|r| r["status"] == "succeeded").unwrap();
    assert_eq!(rerun["trigger"], "recovery", "{rows:#?}");
    let again = real_start(rerun).unwrap();
    // The lease ended 12 s after the claim, which came at most the half second it takes to
    // start a command before the first run's mark.
    assert!(
        again >= first + 11.5,
        "recovered {:.1}s after the first run started (lease 12 s): {rows:#?}",
        again - first
    );
    let dated = secs_at(abandoned, "finished_at").unwrap();
    assert!(
        dated <= again,
        "the abandoned row is dated {:.3}s after the recovery started: {rows:#?}",
        dated - again
    );
}

//! Job flow through the binary: bulk `pause`/`resume`/`trigger` selectors (names, globs,
//! `--tag`, `--all`; a selector that matches nothing is exit 2 and changes nothing), the live
//! owners that `jobs` counts and `trigger`/`pause` notes follow (a clean stop signs off, a
//! killed owner ages out), and `next --job` / `validate` showing calendars and jittered fire
//! instants.

use crate::support;

use crate::support::cli::{run, run_plain};
use crate::support::tempdir as tmp;
use std::path::Path;

fn paused(dir: &Path) -> Vec<String> {
    let (c, out, err) = run(dir, &["jobs", "--json"]);
    assert_eq!(c, 0, "{err}");
    // Nothing held is 0.0, never a negative zero.
    assert!(
        out.contains("\"in_flight_usd\": 0.0") && !out.contains("-0.0"),
        "{out}"
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let mut names: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["runtime"]["paused"] == true)
        .map(|j| j["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

#[test]
fn bulk_pause_resume_trigger() {
    let dir = tmp("bulk");
    std::fs::write(
        dir.join("jobs.yaml"),
        "jobs:\n\
  - {name: report-daily, schedule: every 1h, command: \"true\", tags: [reports]}\n\
  - {name: report-weekly, schedule: every 1h, command: \"true\", tags: [reports, slow]}\n\
  - {name: db-backup, schedule: every 1h, command: \"true\", tags: [db]}\n\
  - {name: misc, schedule: every 1h, command: \"true\"}\n",
    )
    .unwrap();
    assert_eq!(run(&dir, &["apply", "jobs.yaml"]).0, 0);

    let (c, out, err) = run(&dir, &["pause", "report-*"]);
    assert_eq!(c, 0, "{err}");
    // No engine runs on this store: the pause is stored, and the output says nothing runs.
    assert!(
        out.starts_with(
            "paused report-daily\npaused report-weekly\nnote: paused in the store; no engine"
        ),
        "{out}"
    );
    assert_eq!(paused(&dir), vec!["report-daily", "report-weekly"]);

    // A selector that matches nothing: exit 2, named, and nothing else changed.
    let (c, _, err) = run(&dir, &["pause", "db-backup", "nightly-*"]);
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("'nightly-*' matches no job"), "{err}");
    assert_eq!(paused(&dir), vec!["report-daily", "report-weekly"]);
    let (c, _, err) = run(&dir, &["pause", "--tag", "nope"]);
    assert_eq!(c, 2);
    assert!(err.contains("--tag nope"), "{err}");
    let (c, _, err) = run(&dir, &["pause", "ghost"]);
    assert_eq!(c, 2);
    assert!(err.contains("ghost"), "{err}");
    // No selector at all is a usage error; --all with a name is too.
    assert_eq!(run(&dir, &["pause"]).0, 2);
    assert_eq!(run(&dir, &["pause", "--all", "misc"]).0, 2);

    let (c, _, err) = run(&dir, &["pause", "--tag", "db", "misc"]);
    assert_eq!(c, 0, "{err}");
    assert_eq!(paused(&dir).len(), 4);
    let (c, out, _) = run(&dir, &["resume", "--all"]);
    assert_eq!(c, 0);
    assert_eq!(out.lines().count(), 4, "{out}");
    assert!(out.lines().all(|l| l.starts_with("resumed ")), "{out}");
    assert!(paused(&dir).is_empty());
    // A job that was not paused is said so, not "resumed"; a second pause likewise.
    let (c, out, _) = run(&dir, &["resume", "misc"]);
    assert_eq!(c, 0);
    assert_eq!(out, "misc was not paused; nothing changed\n");
    run(&dir, &["pause", "misc"]);
    let (_, out, _) = run(&dir, &["pause", "misc", "db-backup"]);
    assert!(
        out.starts_with("paused db-backup\nmisc was already paused; nothing changed\n"),
        "{out}"
    );
    run(&dir, &["resume", "--all"]);

    let (c, out, err) = run(&dir, &["trigger", "--tag", "reports"]);
    assert_eq!(c, 0, "{err}");
    assert!(
        out.contains("triggered report-daily") && out.contains("triggered report-weekly"),
        "{out}"
    );
    assert!(!out.contains("db-backup"), "{out}");
    // Queued, and said that nothing will pick it up until an engine starts: only that, never
    // a promise that an owner runs it now.
    assert!(
        out.contains("triggered report-daily: queued; no engine is running on this store"),
        "{out}"
    );
    assert!(
        !out.contains("will run it now") && !out.contains("next owner"),
        "{out}"
    );
}

#[test]
fn next_job_and_validate_honour_calendars_and_jitter() {
    let dir = tmp("cal");
    std::fs::write(dir.join("holidays.txt"), "# fixed\n2026-12-25\n").unwrap();
    std::fs::write(
        dir.join("jobs.yaml"),
        "calendars:\n  workdays: {weekdays: [mon, tue, wed, thu, fri]}\n  holidays: {file: holidays.txt}\n\
jobs:\n  - name: brief\n    schedule: \"0 9 * * *\"\n    command: \"true\"\n    only_on: workdays\n    except_on: holidays\n  - name: spread\n    schedule: \"0 * * * *\"\n    command: \"true\"\n    jitter_seconds: 600\n",
    )
    .unwrap();
    let (c, out, err) = run_plain(
        &dir,
        &[
            "next",
            "--file",
            "jobs.yaml",
            "--job",
            "brief",
            "--after",
            "2026-12-24T10:00:00Z",
            "--count",
            "2",
            "--json",
        ],
    );
    assert_eq!(c, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    // Fri 25th is a holiday, then the weekend: Monday and Tuesday.
    assert_eq!(
        v["slots"],
        serde_json::json!(["2026-12-28T09:00:00Z", "2026-12-29T09:00:00Z"])
    );

    let (c, out, err) = run_plain(
        &dir,
        &[
            "next",
            "--file",
            "jobs.yaml",
            "--job",
            "spread",
            "--after",
            "2026-12-24T10:00:00Z",
            "--count",
            "3",
            "--json",
        ],
    );
    assert_eq!(c, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let slots = v["slots"].as_array().unwrap();
    let fires = v["fires"].as_array().unwrap();
    assert_eq!(slots[0], "2026-12-24T11:00:00Z");
    for (s, f) in slots.iter().zip(fires) {
        let s: chrono::DateTime<chrono::Utc> = s.as_str().unwrap().parse().unwrap();
        let f: chrono::DateTime<chrono::Utc> = f.as_str().unwrap().parse().unwrap();
        assert!(f >= s && f < s + chrono::Duration::seconds(600), "{s} {f}");
    }
    // The same answer from a second process: the offset is a function of name and slot.
    let (_, again, _) = run_plain(
        &dir,
        &[
            "next",
            "--file",
            "jobs.yaml",
            "--job",
            "spread",
            "--after",
            "2026-12-24T10:00:00Z",
            "--count",
            "3",
            "--json",
        ],
    );
    assert_eq!(out, again);

    // Unknown job: exit 2 naming it.
    let (c, _, err) = run_plain(&dir, &["next", "--job", "nope"]);
    assert_eq!(c, 2);
    assert!(err.contains("nope"), "{err}");

    // validate prints the fire instants and the calendar words.
    let (c, out, err) = run_plain(&dir, &["validate", "jobs.yaml"]);
    assert_eq!(c, 0, "{err}");
    assert!(
        out.contains("only on workdays, except on holidays"),
        "{out}"
    );
    assert!(out.contains("s jitter]"), "{out}");
}

/// `cronsole jobs` shows when the next slot fires (slot + jitter),
/// like the console's NEXT column, and `--json` carries both instants.
#[test]
fn jobs_shows_the_jittered_fire_instant() {
    let dir = tmp("jobs-jitter");
    std::fs::write(
        dir.join("jobs.yaml"),
        "jobs:\n  - name: spread\n    schedule: \"0 0 1 1 *\"\n    command: \"true\"\n    jitter_seconds: 86400\n",
    )
    .unwrap();
    let (c, _, err) = run(&dir, &["apply", "jobs.yaml"]);
    assert_eq!(c, 0, "{err}");
    let (c, out, err) = run(&dir, &["jobs", "--json"]);
    assert_eq!(c, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let slot: chrono::DateTime<chrono::Utc> = v[0]["next_slot"].as_str().unwrap().parse().unwrap();
    let fire: chrono::DateTime<chrono::Utc> =
        v[0]["next_fire_at"].as_str().unwrap().parse().unwrap();
    assert!(
        fire > slot && fire < slot + chrono::Duration::days(1),
        "{slot} {fire}"
    );
    let (c, table, err) = run(&dir, &["jobs", "--utc"]);
    assert_eq!(c, 0, "{err}");
    let stamp = fire.format("%Y-%m-%d %H:%M:%S").to_string();
    assert!(
        table.contains(&stamp),
        "NEXT shows the fire instant {stamp}:\n{table}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Through the binary, `validate` names a job's overlap policy, and a wrong
/// form is exit 2 with `file:line:col`.
#[test]
fn validate_shows_overlap_and_refuses_wrong_forms() {
    let dir = tmp("ovl-validate");
    std::fs::write(
        dir.join("jobs.yaml"),
        "jobs:\n  - name: crawl\n    schedule: every 1m\n    command: \"true\"\n    overlap: allow\n    max_concurrent_runs: 3\n  - name: brief\n    schedule: every 1h\n    command: \"true\"\n    overlap: buffer_one\n",
    )
    .unwrap();
    let (c, out, err) = run_plain(&dir, &["validate", "jobs.yaml"]);
    assert_eq!(c, 0, "{err}");
    assert!(
        out.contains("[overlap: allow, up to 3 runs at once]"),
        "{out}"
    );
    assert!(out.contains("[overlap: buffer_one]"), "{out}");
    std::fs::write(
        dir.join("bad.yaml"),
        "jobs:\n  - name: crawl\n    schedule: every 1m\n    command: \"true\"\n    overlap: allow\n",
    )
    .unwrap();
    let (c, out, err) = run_plain(&dir, &["validate", "bad.yaml"]);
    let all = format!("{out}{err}");
    assert_eq!(c, 2, "{all}");
    assert!(all.contains("bad.yaml:5:14: error"), "{all}");
    assert!(all.contains("needs max_concurrent_runs"), "{all}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `jobs` in `dir` until its owners line starts with `want` (bounded); the whole output.
fn owners_until(dir: &Path, want: &str) -> String {
    let mut last = String::new();
    support::wait::poll_for(std::time::Duration::from_secs(20), || {
        let (c, out, err) = run(dir, &["jobs"]);
        assert_eq!(c, 0, "{err}");
        let found = out
            .lines()
            .any(|l| l.starts_with(want))
            .then(|| out.clone());
        last = out;
        found
    })
    .unwrap_or_else(|| panic!("no line {want:?} in: {last}"))
}

/// `trigger NAME`'s output, which must exit 0 (each call names a job not triggered before: one
/// that an engine is running exits 1, and is not queued).
fn trigger(dir: &Path, name: &str) -> String {
    let (c, out, err) = run(dir, &["trigger", name]);
    assert_eq!(c, 0, "{err}");
    out
}

const NO_ENGINE: &str = ": queued; no engine is running on this store";

/// Every view counts owners by one rule: heard from in the last 30 s, not signed off, and not
/// an owner of this host whose process is gone. An engine that stops cleanly signs off, so
/// `jobs` and `trigger` stop counting it at once; one killed on this host stops counting at
/// once too. (An owner on another host counts until its record is 30 s old: `owners::tests`.)
#[test]
fn live_owners_clean_exit_signs_off_and_a_killed_owner_on_this_host_stops_counting_at_once() {
    use crate::support::daemon::Daemon;
    let dir = tmp("liveowners");
    std::fs::write(
        dir.join("jobs.yaml"),
        (1..=6)
            .map(|i| format!("  - {{name: job-{i}, schedule: \"0 0 1 1 *\", command: \"true\"}}\n"))
            .fold("jobs:\n".to_string(), |all, j| all + &j),
    )
    .unwrap();
    assert_eq!(run(&dir, &["apply", "jobs.yaml"]).0, 0);
    // No engine has ever run here: the trigger is queued, and said to wait.
    assert!(trigger(&dir, "job-1").contains(NO_ENGINE));
    owners_until(
        &dir,
        "owners: none live (no engine is running on this store)",
    );
    let (c, out, _) = run(&dir, &["pause", "job-6"]);
    assert_eq!(c, 0);
    assert!(
        out.contains("note: paused in the store; no engine is running on this store"),
        "{out}"
    );
    run(&dir, &["resume", "job-6"]);

    let engine = || {
        Daemon::spawn(
            support::cli::cronsole(&dir)
                .args(["run", "--jobs", "jobs.yaml", "--store"])
                .arg(dir.join("store")),
        )
    };
    // A running engine: one live owner, and a trigger gets no note.
    let mut one = engine();
    owners_until(&dir, "owners: 1 live");
    assert!(!trigger(&dir, "job-2").contains("no engine"));
    // A clean stop (SIGTERM): the very next `jobs` counts none, and the trigger says so.
    one.signal(libc::SIGTERM);
    assert!(one.child.wait().unwrap().success());
    let (_, out, _) = run(&dir, &["jobs"]);
    assert!(
        out.contains("owners: none live") && out.contains("  stopped cleanly: "),
        "{out}"
    );
    assert!(trigger(&dir, "job-3").contains(NO_ENGINE));

    // A kill -9 writes nothing, but on this host the owner's process is seen gone: it stops
    // counting at once, with its record still fresh.
    let mut two = engine();
    let out = owners_until(&dir, "owners: 1 live");
    two.signal(libc::SIGKILL);
    // Reaped: the process is gone, not merely signalled (a loaded machine may not have ended it
    // by the next command).
    let _ = two.child.wait();
    let (_, after, _) = run(&dir, &["jobs"]);
    assert!(
        after.contains("owners: none live") && after.contains("  process gone on this host: "),
        "{out}\n{after}"
    );
    assert!(trigger(&dir, "job-4").contains(NO_ENGINE));
}

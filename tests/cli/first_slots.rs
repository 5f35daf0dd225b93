//! Every view shows the first run the engine will make, for every schedule form: `validate` and
//! `next --job` (a preview, as if the job were stored now), then, once `apply` stored the jobs,
//! `describe`, `next --job` (now the stored slot), `jobs`, `dry-run`, the console's Jobs table
//! and the engine itself.
//!
//! The rule they all follow is `JobDef::first_slots`: an `every` grid (`hourly`, `daily`,
//! `*/30m`) is anchored when the job is first stored and its first slot is one interval later;
//! cron and wall times sit on the clock; `run_immediately: true` adds one run at the store
//! instant.
//! A preview is computed from the moment it runs, so it is checked against the rule at the
//! instants before and after the command ran; stored views are checked exactly against the rule
//! at the record's `created_at`.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use cronsole::model::JobDef;
use serde_json::Value;

use crate::support::cli::run_plain;

/// One job per schedule form, two of them with `run_immediately`; `every 2s` has its first slot
/// within the engine's few seconds.
fn jobs_file(at: DateTime<Utc>) -> String {
    let forms: &[(&str, &str, bool)] = &[
        ("e1h", "every 1h", false),
        ("hourly", "hourly", false),
        ("daily", "daily", false),
        ("m30", "*/30m", false),
        ("s90", "every 90s", false),
        ("s2", "every 2s", false),
        ("athourly", "@hourly", false),
        ("cron7", "0 7 * * *", false),
        ("nine", "daily at 9am", false),
        ("in10", "in 10m", false),
        (
            "once",
            &format!("at:{}", at.to_rfc3339_opts(SecondsFormat::Secs, true)),
            false,
        ),
        ("imm1h", "every 1h", true),
        ("immcron", "@hourly", true),
    ];
    let mut s = String::from("jobs:\n");
    for (name, sched, imm) in forms {
        s.push_str(&format!(
            "  - name: {name}\n    schedule: \"{sched}\"\n    command: \"true\"\n"
        ));
        if *imm {
            // Jitter never delays the immediate run: every view shows it at the store instant.
            s.push_str("    run_immediately: true\n    jitter_seconds: 3000\n");
        }
    }
    s
}

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .unwrap_or_else(|e| panic!("{s}: {e}"))
        .with_timezone(&Utc)
}

/// The first run of `d` if it were stored at `t`.
fn first_run(d: &JobDef, t: DateTime<Utc>) -> DateTime<Utc> {
    let f = d.first_slots(t).expect("first slots");
    f.first_run().expect("a first run")
}

/// A preview printed at second precision, made between `before` and `after`: it must be the
/// rule's answer for some instant in between (the rule only moves forward with time).
fn within(
    name: &str,
    what: &str,
    shown: &str,
    d: &JobDef,
    before: DateTime<Utc>,
    after: DateTime<Utc>,
) {
    let shown = at(shown);
    let lo = first_run(d, before - chrono::Duration::seconds(1));
    let hi = first_run(d, after + chrono::Duration::seconds(1));
    assert!(
        lo <= shown && shown <= hi,
        "{what} of {name}: {shown} is not the first run {lo} … {hi}"
    );
}

/// The `next:` instants `validate` prints under each job (its UTC form in parentheses).
fn validate_firsts(out: &str) -> BTreeMap<String, String> {
    let mut firsts = BTreeMap::new();
    let mut job = None;
    for line in out.lines() {
        if let Some(rest) = line.strip_prefix("  next: ") {
            let close = rest.find(')');
            if let (Some(j), Some(open), Some(close)) = (job.take(), rest.find('('), close) {
                // The UTC form carries fractions when the instant has them.
                let iso = &rest[open + 1..close];
                firsts.insert(j, iso.to_string());
            }
        } else if !line.starts_with(' ') {
            job = line.split(':').next().map(str::to_string);
        }
    }
    firsts
}

#[allow(clippy::too_many_lines)] // a test scenario reads best in one piece (see CONTRIBUTING.md)
#[test]
fn every_view_shows_the_first_run_the_engine_makes() {
    let dir = support::tempdir("first-slots");
    let d = dir.path();
    let once_at = (Utc::now() + chrono::Duration::days(30)).with_nanosecond_zero();
    std::fs::write(d.join("jobs.yaml"), jobs_file(once_at)).unwrap();
    let defs: BTreeMap<String, JobDef> = cronsole::config::load_file(&d.join("jobs.yaml"))
        .expect("the jobs file loads")
        .file
        .jobs
        .into_iter()
        .map(|j| (j.name.clone(), j))
        .collect();
    assert_eq!(defs.len(), 13);

    // validate: each job's first `next:` line.
    let before = Utc::now();
    let (code, out, err) = run_plain(d, &["validate", "jobs.yaml"]);
    let after = Utc::now();
    assert_eq!(code, 0, "{out}{err}");
    let firsts = validate_firsts(&out);
    for (name, def) in &defs {
        let shown = firsts
            .get(name)
            .unwrap_or_else(|| panic!("{name} in:\n{out}"));
        within(name, "validate", shown, def, before, after);
    }
    // The grid and clock placements are said in words, and the immediate run is marked.
    assert!(
        out.contains("e1h: every 1h — every hour (counted from when the job is first stored"),
        "{out}"
    );
    assert!(
        out.contains("athourly: @hourly") && out.contains("(on the clock)"),
        "{out}"
    );
    assert!(out.contains("[at first store: run_immediately]"), "{out}");

    // next --job: the first line of each.
    for (name, def) in &defs {
        let before = Utc::now();
        let (code, out, err) =
            run_plain(d, &["next", "--file", "jobs.yaml", "--job", name, "--json"]);
        let after = Utc::now();
        assert_eq!(code, 0, "{name}: {err}");
        let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        let first = v["immediate"]
            .as_str()
            .or_else(|| v["slots"][0].as_str())
            .unwrap_or_else(|| panic!("{name}: {out}"));
        within(name, "next --job", first, def, before, after);
        assert_eq!(v["stored"], false, "{name}: not stored yet: {out}");
    }

    // Stored: the record's first run is the rule at its created_at, exactly.
    let (code, _, err) = run_plain(d, &["--store", "store", "apply", "jobs.yaml"]);
    assert_eq!(code, 0, "{err}");
    let mut want = BTreeMap::new();
    for (name, def) in &defs {
        let (code, out, err) = run_plain(d, &["--store", "store", "describe", name, "--json"]);
        assert_eq!(code, 0, "{name}: {err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        let created = at(v["runtime"]["created_at"].as_str().unwrap());
        let first = first_run(def, created);
        assert_eq!(
            at(v["runtime"]["next_slot"].as_str().unwrap()),
            first,
            "{name}: the stored next slot"
        );
        assert_eq!(
            at(v["next_slots"][0].as_str().unwrap()),
            first,
            "describe {name}"
        );
        assert_eq!(
            at(v["next_fire_at"].as_str().unwrap()),
            first,
            "describe {name} fires"
        );
        if def.run_immediately {
            assert_eq!(first, created, "{name} runs when stored");
        }
        // next --job of a stored job: the stored slot the engine runs, not a preview from now.
        let v = next_job(d, name);
        assert_eq!(v["stored"], true, "{name}: {v}");
        // Printed to the microsecond, as every printed instant is (a store instant has more).
        assert_eq!(
            at(v["slots"][0].as_str().unwrap()),
            chrono::SubsecRound::trunc_subsecs(first, 6),
            "next --job {name}"
        );
        assert_eq!(
            at(v["fires"][0].as_str().unwrap()),
            chrono::SubsecRound::trunc_subsecs(first, 6),
            "next --job {name} fires"
        );
        want.insert(name.clone(), (created, first));
    }

    // jobs --json and dry-run --json.
    let (code, out, err) = run_plain(d, &["--store", "store", "jobs", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let listed = v.as_array().expect("a jobs array");
    for (name, (_, first)) in &want {
        let row = listed
            .iter()
            .find(|r| r["name"] == name.as_str())
            .unwrap_or_else(|| panic!("{name} in {out}"));
        assert_eq!(
            at(row["next_fire_at"].as_str().unwrap()),
            *first,
            "jobs {name}"
        );
        let (code, out, err) = run_plain(d, &["--store", "store", "dry-run", name, "--json"]);
        assert_eq!(code, 0, "{name}: {err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            at(v["next_fire_at"].as_str().unwrap()),
            *first,
            "dry-run {name}"
        );
    }

    // The console's Jobs table: the NEXT column of each row.
    if support::tmux_or_skip() {
        let screen = console_screen(d, want.len());
        for (name, (_, first)) in &want {
            let line = screen
                .lines()
                .find(|l| {
                    l.split_whitespace()
                        .find(|w| w.starts_with(|c: char| c.is_ascii_alphanumeric()))
                        == Some(name.as_str())
                })
                .unwrap_or_else(|| panic!("{name} on the screen:\n{screen}"));
            let near = first.format("%H:%M:%S").to_string();
            let far = first.format("%m-%d %H:%M").to_string();
            assert!(
                line.contains(&near) || line.contains(&far),
                "console NEXT of {name} is not {first}:\n{line}"
            );
        }
    }

    // The engine: the `run_immediately` jobs run at once, for the store instant (`immediate`),
    // and `every 2s` at its grid's first slot, two seconds after it was stored; the others
    // (`every 1h` included) wait for their slot.
    let (code, _, err) = run_plain(d, &["--store", "store", "run", "--for", "4s"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run_plain(d, &["--store", "store", "history", "--json"]);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let mut ran: Vec<&str> = rows.iter().filter_map(|r| r["job"].as_str()).collect();
    ran.sort_unstable();
    let mut soon: Vec<&str> = want
        .iter()
        .filter(|(_, (created, first))| *first - *created <= chrono::Duration::seconds(2))
        .map(|(n, _)| n.as_str())
        .collect();
    soon.sort_unstable();
    assert_eq!(soon, ["imm1h", "immcron", "s2"]);
    // The grid starts on the whole second of the store.
    let whole = chrono::SubsecRound::trunc_subsecs(want["s2"].0, 0);
    assert_eq!(
        want["s2"].1 - whole,
        chrono::Duration::seconds(2),
        "an every grid's first slot is one interval after the store's whole second"
    );
    ran.dedup();
    assert_eq!(ran, soon, "{out}");
    for r in &rows {
        let name = r["job"].as_str().unwrap();
        let trigger = if defs[name].run_immediately {
            "immediate"
        } else {
            "schedule"
        };
        assert_eq!(r["trigger"], trigger, "{r}");
        if name != "s2" {
            assert_eq!(at(r["slot"].as_str().unwrap()), want[name].1, "{r}");
        }
    }
    // `every 2s` may have run twice in the window: its first row is for its first slot.
    let s2_first = rows
        .iter()
        .filter(|r| r["job"] == "s2")
        .filter_map(|r| r["slot"].as_str().map(at))
        .min();
    assert_eq!(s2_first, Some(want["s2"].1), "{out}");
    // The log has a line per row, and `logs --job` keeps one job's.
    let (code, out, err) = run_plain(d, &["--store", "store", "logs", "--job", "imm1h"]);
    assert_eq!(code, 0, "{err}");
    // Exactly one line for its one row.
    let lines = out
        .lines()
        .filter(|l| {
            l.contains("succeeded trigger=immediate")
                && l.split_whitespace().any(|w| w == "job=imm1h")
        })
        .count();
    assert_eq!(lines, 1, "{out}");
    assert!(!out.contains("job=e1h"), "{out}");
    // Then each job's next run is the slot `validate` showed after the first.
    for name in ["imm1h", "e1h"] {
        let (code, out, err) = run_plain(d, &["--store", "store", "describe", name, "--json"]);
        assert_eq!(code, 0, "{err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        let next = chrono::SubsecRound::trunc_subsecs(want[name].0, 0) + chrono::Duration::hours(1);
        assert_eq!(
            at(v["runtime"]["next_slot"].as_str().unwrap()),
            next,
            "{name}"
        );
        // Seconds after the store, a preview from now would be seconds later than the grid.
        let v = next_job(d, name);
        assert_eq!(
            at(v["slots"][0].as_str().unwrap()),
            next,
            "next --job {name}: {v}"
        );
    }
}

/// `next --job NAME --json` over the test's store and jobs file.
fn next_job(d: &Path, name: &str) -> Value {
    let (code, out, err) = run_plain(
        d,
        &[
            "--store",
            "store",
            "next",
            "--file",
            "jobs.yaml",
            "--job",
            name,
            "--json",
        ],
    );
    assert_eq!(code, 0, "next --job {name}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// The console attached to the store (no engine), at 200×50, once every job row is drawn.
fn console_screen(dir: &Path, jobs: usize) -> String {
    let name = format!("cronsole-first-slots-{}", std::process::id());
    let bin = env!("CARGO_BIN_EXE_cronsole");
    let cmd = format!("{bin} --store store console --attach; sleep 60");
    let st = Command::new("tmux")
        .args([
            "-L",
            &name,
            "new-session",
            "-d",
            "-s",
            &name,
            "-x",
            "200",
            "-y",
            "50",
            "-c",
        ])
        .arg(dir)
        .args(["-e", "TERM=xterm-256color", &cmd])
        .status()
        .expect("run tmux");
    assert!(st.success());
    // The last capture, whether the whole table showed or not: the caller's asserts say which.
    let mut screen = String::new();
    support::wait::poll_until(Duration::from_secs(30), || {
        let out = Command::new("tmux")
            .args(["-L", &name, "capture-pane", "-p", "-t", &name])
            .output()
            .expect("run tmux");
        screen = String::from_utf8_lossy(&out.stdout).into_owned();
        screen.contains("immcron") && screen.contains("e1h") && screen.lines().count() >= jobs
    });
    let _ = Command::new("tmux")
        .args(["-L", &name, "kill-server"])
        .output();
    screen
}

trait NoNanos {
    fn with_nanosecond_zero(self) -> Self;
}

impl NoNanos for DateTime<Utc> {
    fn with_nanosecond_zero(self) -> Self {
        use chrono::Timelike;
        self.with_nanosecond(0).unwrap_or(self)
    }
}

//! The CLI conventions, on the real binary: each command takes only its own flags, bounded numbers,
//! hints that keep the meaning, empty answers that say so, one exit code per rejection, and the
//! ecosystem commands (`completions`, `man`, `init`, `edit`, `logs`).
#![allow(clippy::unwrap_used)] // test code

use crate::support;

use std::path::Path;
use std::process::{Output, Stdio};

/// A scratch directory removed when the test ends, even by a panic.
struct Scratch(support::TempDir);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        Scratch(support::tempdir(&format!("cli-conv-{tag}")))
    }
}

fn cronsole(dir: &Path, args: &[&str]) -> Output {
    support::cli::cronsole(dir)
        .args(args)
        .output()
        .expect("the cronsole binary runs")
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Exit 2 with `needle` in stderr.
fn refused(dir: &Path, args: &[&str], needle: &str) {
    let o = cronsole(dir, args);
    assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
    assert!(
        stderr(&o).contains(needle),
        "{args:?}: stderr should mention {needle:?}:\n{}",
        stderr(&o)
    );
}

#[test]
fn each_command_takes_only_its_own_flags() {
    let s = Scratch::new("flags");
    refused(
        &s.0,
        &["next", "@daily", "--max-concurrent", "99"],
        "--max-concurrent",
    );
    refused(
        &s.0,
        &["--max-concurrent", "99", "next", "@daily"],
        "engine option",
    );
    refused(&s.0, &["--for", "5s", "run"], "cronsole run --for");
    refused(&s.0, &["history", "--log-format", "json"], "--log-format");
    refused(&s.0, &["next", "@daily", "--store", "x"], "uses no store");
    // --help lists only the command's own options (and the two global store options).
    let help = stdout(&cronsole(&s.0, &["next", "--help"]));
    assert!(!help.contains("--max-concurrent"), "{help}");
    assert!(!help.contains("--for"), "{help}");
    let help = stdout(&cronsole(&s.0, &["run", "--help"]));
    assert!(
        help.contains("--max-concurrent") && help.contains("--for"),
        "{help}"
    );
}

#[test]
fn numbers_have_bounds() {
    let s = Scratch::new("bounds");
    refused(
        &s.0,
        &["next", "* * * * *", "--count", "18446744073709551615"],
        "0..=10000",
    );
    refused(
        &s.0,
        &["next", "* * * * *", "--count", "10001"],
        "0..=10000",
    );
    refused(&s.0, &["history", "--limit", "0"], "1..=100000");
    refused(&s.0, &["run", "--max-concurrent", "0"], "1..=1024");
    refused(&s.0, &["run", "--for", "0s"], "--for");
    refused(&s.0, &["run", "--for", "200000d"], "at most 100 years");
    refused(
        &s.0,
        &["run", "--for", "36599d"],
        "between 1s and 100 years",
    );
    refused(&s.0, &["run", "--shutdown-grace", "2d"], "at most 24h");
    let o = cronsole(&s.0, &["next", "* * * * *", "--count", "10000", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

#[test]
fn hints_point_at_the_right_form() {
    let s = Scratch::new("hints");
    refused(&s.0, &["next", "0 0 * * Sat-Sun"], "write it as SAT,SUN");
    refused(
        &s.0,
        &["next", "0 0 * Nov-Mar *"],
        "write it as NOV-DEC,JAN-MAR",
    );
    refused(
        &s.0,
        &["next", "gibberish"],
        "unrecognised schedule 'gibberish'",
    );
    refused(
        &s.0,
        &["next", "CRON_TZ=Europe/Berlin 0 9 * * *"],
        "--tz Europe/Berlin",
    );
    // The hinted forms are accepted and mean the weekend / the winter months.
    let o = cronsole(
        &s.0,
        &[
            "next",
            "0 0 * * SAT,SUN",
            "--after",
            "2026-12-01T00:00:00Z",
            "--count",
            "2",
            "--json",
        ],
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(
        v["slots"],
        serde_json::json!(["2026-12-05T00:00:00Z", "2026-12-06T00:00:00Z"])
    );
    // Every form of the schedule grammar, including `every monday 9am`.
    for form in [
        "hourly",
        "every 90s",
        "*/30m",
        "1.5h",
        "*/5 9-17 * * 1-5",
        "@weekly",
        "cron:0 9 * * MON-FRI",
        "at:2030-12-01T09:00",
        "in 10m",
        "at 9am",
        "at 21:30",
        "at 9:30pm",
        "every day at 9am",
        "daily at 9am",
        "weekdays at 09:30",
        "mon,wed,fri at 17:00",
        "every sunday at 8pm",
        "every monday 9am",
    ] {
        let o = cronsole(&s.0, &["next", form, "--count", "1"]);
        assert_eq!(code(&o), 0, "{form}: {}", stderr(&o));
    }
    // Case-insensitive zone.
    let o = cronsole(
        &s.0,
        &["next", "@daily", "--tz", "europe/berlin", "--count", "1"],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("(Europe/Berlin)"), "{}", stdout(&o));
}

#[test]
fn at_a_time_of_day_means_once() {
    let s = Scratch::new("at");
    let o = cronsole(
        &s.0,
        &[
            "next",
            "at 9am",
            "--tz",
            "Europe/Berlin",
            "--after",
            "2026-12-01T10:00:00Z",
            "--json",
        ],
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["slots"], serde_json::json!(["2026-12-02T08:00:00Z"]));
}

#[test]
fn empty_answers_say_so() {
    let s = Scratch::new("empty");
    let o = cronsole(&s.0, &["next", "at:2020-01-01T00:00"]);
    assert_eq!(code(&o), 0);
    assert!(stdout(&o).contains("no slots"), "{}", stdout(&o));
    let o = cronsole(&s.0, &["next", "@daily", "--count", "0"]);
    assert!(stdout(&o).contains("--count 0"), "{}", stdout(&o));
    let o = cronsole(&s.0, &["next", "@daily", "--count", "0", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["slots"], serde_json::json!([]));
}

#[test]
fn validate_warns_about_the_past_and_points_a_job_tz_at_the_schedule() {
    let s = Scratch::new("validate");
    std::fs::write(
        s.0.join("j.yaml"),
        "jobs:\n  - name: a\n    schedule: \"at:2020-01-01T00:00\"\n    command: echo a\n  - name: b\n    schedule: \"every 5m\"\n    until: 2021-01-01T00:00:00Z\n    command: echo b\n  - name: c\n    schedule: \"at 9am\"\n    command: echo c\n",
    )
    .expect("write");
    let o = cronsole(&s.0, &["validate", "j.yaml"]);
    let out = stdout(&o);
    assert_eq!(code(&o), 0, "warnings alone do not fail:\n{out}");
    assert!(
        out.contains("j.yaml:3:15: warning: jobs[0].schedule: the instant 2020-01-01T00:00:00Z is in the past"),
        "{out}"
    );
    assert!(
        out.contains("runs once at the next start, late"),
        "a past one-shot is not said to never run: {out}"
    );
    assert!(
        out.contains(
            "j.yaml:7:12: warning: jobs[1].until: until 2021-01-01T00:00:00Z is in the past"
        ),
        "{out}"
    );
    // `at 9am` shows the instant it names, and that it happens once.
    assert!(out.contains("c: at 9am — once at "), "{out}");
    assert!(out.contains("never again"), "{out}");

    std::fs::write(
        s.0.join("tz.yaml"),
        "jobs:\n  - name: a\n    schedule: \"0 9 * * *\"\n    tz: Europe/Berlin\n    command: echo a\n",
    )
    .expect("write");
    let o = cronsole(&s.0, &["validate", "tz.yaml"]);
    assert_eq!(code(&o), 2);
    assert!(
        stdout(&o).contains("schedule: {kind: cron, cron_expr: \"0 9 * * *\", tz: Europe/Berlin}"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn history_conventions_and_store_rejections() {
    let s = Scratch::new("history");
    std::fs::write(
        s.0.join("jobs.yaml"),
        "jobs:\n  - name: a\n    schedule: \"every 1h\"\n    run_immediately: true\n    command: echo hi\n",
    )
    .expect("write");
    let o = cronsole(&s.0, &["run", "--for", "2s"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // Headless stdout is history rows only.
    let rows = stdout(&o);
    assert_eq!(rows.lines().count(), 1, "{rows}");
    assert!(rows.contains("succeeded"), "{rows}");

    let json = stdout(&cronsole(&s.0, &["history", "--json"]));
    let row: serde_json::Value =
        serde_json::from_str(json.lines().next().expect("one row")).expect("json row");
    let run_id = row["run_id"].as_str().expect("run id").to_string();
    let text = stdout(&cronsole(&s.0, &["history"]));
    assert!(text.contains("RUN_ID") && text.contains(&run_id), "{text}");

    let yesterday = (chrono::Local::now().date_naive() - chrono::Days::new(1)).to_string();
    for since in [
        "today",
        "TODAY",
        "yesterday",
        "1h",
        "30m",
        yesterday.as_str(),
    ] {
        let o = cronsole(&s.0, &["history", "--since", since]);
        assert_eq!(code(&o), 0, "{since}: {}", stderr(&o));
        assert!(stdout(&o).contains(&run_id), "{since}: {}", stdout(&o));
    }
    let o = cronsole(&s.0, &["history", "--status", "SUCCEEDED"]);
    assert!(stdout(&o).contains(&run_id), "{}", stderr(&o));
    let o = cronsole(&s.0, &["history", "--status", "FAILED"]);
    assert_eq!(code(&o), 0);
    assert!(stdout(&o).contains("no history rows"), "{}", stdout(&o));
    let o = cronsole(&s.0, &["history", "--since", "2999-01-01"]);
    assert!(stdout(&o).contains("no history rows"), "{}", stdout(&o));

    // diff of a job without a monitor is bad input, like an unknown job.
    refused(&s.0, &["diff", "a"], "has no monitor");
    refused(&s.0, &["diff", "nosuch"], "no job named");
}

#[test]
fn a_private_address_is_one_rejection_whether_literal_or_resolved() {
    let s = Scratch::new("probe");
    refused(
        &s.0,
        &["probe", "--url", "http://127.0.0.1:1/"],
        "probe rejected",
    );
    refused(
        &s.0,
        &["probe", "--url", "http://localhost:1/"],
        "probe rejected",
    );
}

#[test]
fn bare_cronsole_in_an_empty_directory_says_what_to_do() {
    let s = Scratch::new("bare");
    let o = cronsole(&s.0, &["--no-tui", "--for", "1s"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("cronsole init"), "{}", stderr(&o));
    assert!(!s.0.join(".cronsole").exists(), "no empty store is created");
}

#[test]
fn completions_and_man_page() {
    let s = Scratch::new("eco");
    for (shell, needle) in [
        ("bash", "_cronsole()"),
        ("zsh", "#compdef cronsole"),
        ("fish", "complete -c cronsole"),
        ("powershell", "Register-ArgumentCompleter"),
    ] {
        let o = cronsole(&s.0, &["completions", shell]);
        assert_eq!(code(&o), 0, "{shell}");
        assert!(stdout(&o).contains(needle), "{shell}");
        assert!(
            stdout(&o).contains("history"),
            "{shell} completes subcommands"
        );
    }
    refused(&s.0, &["completions", "tcsh"], "invalid value");
    let o = cronsole(&s.0, &["man"]);
    assert_eq!(code(&o), 0);
    let page = stdout(&o);
    assert!(page.contains(".TH cronsole 1"), "{page}");
    assert!(page.contains("completions"), "{page}");
}

#[test]
fn init_writes_a_valid_starter_and_never_overwrites() {
    let s = Scratch::new("init");
    let o = cronsole(&s.0, &["init"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = cronsole(&s.0, &["validate", "jobs.yaml"]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
    std::fs::write(s.0.join("mine.yaml"), "precious").expect("write");
    refused(&s.0, &["init", "mine.yaml"], "never overwrites");
    assert_eq!(
        std::fs::read_to_string(s.0.join("mine.yaml")).expect("read"),
        "precious"
    );
}

/// `cronsole edit` with a scripted editor: the first edit has an error (loop back), the second
/// fixes it; the plan is shown and applied on "y".
#[test]
fn edit_validates_loops_back_shows_the_plan_and_applies() {
    let s = Scratch::new("edit");
    assert_eq!(code(&cronsole(&s.0, &["init"])), 0);
    let editor = "n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count\n\
         if [ $n = 1 ]; then printf '  - name: more\\n    schedule: \"every 0m\"\\n    command: echo m\\n' >> \"$1\";\n\
         else sed -i 's/every 0m/every 2m/' \"$1\"; fi\n";
    let run = |answers: &str| super::edit::edit(&s.0, editor, answers);
    // Errors, then the user declines to edit again: nothing changes, exit 2.
    let before = std::fs::read_to_string(s.0.join("jobs.yaml")).expect("read");
    let o = run("n\n");
    assert_eq!(code(&o), 2, "{}", stdout(&o));
    assert!(stdout(&o).contains("at least 1 second"), "{}", stdout(&o));
    assert_eq!(
        std::fs::read_to_string(s.0.join("jobs.yaml")).expect("read"),
        before
    );
    assert!(!s.0.join(".cronsole").exists());

    // Errors, edit again (fixed), plan shown, confirmed: saved and applied.
    std::fs::remove_file(s.0.join("count")).expect("reset editor");
    let o = run("y\ny\n");
    let out = stdout(&o);
    assert_eq!(code(&o), 0, "{out}\n{}", stderr(&o));
    assert!(out.contains("edit it again?"), "{out}");
    assert!(
        out.contains("create  heartbeat") && out.contains("create  more"),
        "{out}"
    );
    assert!(out.contains("plan: 2 to create"), "{out}");
    let saved = std::fs::read_to_string(s.0.join("jobs.yaml")).expect("read");
    assert!(saved.contains("every 2m"), "{saved}");
    let jobs = stdout(&cronsole(&s.0, &["jobs"]));
    assert!(
        jobs.contains("more") && jobs.contains("heartbeat"),
        "{jobs}"
    );
    // The edit stored the settings as `apply` does (commands run beside the jobs file), so a
    // re-apply of the unchanged file says no setting changed.
    let settings = std::fs::read_to_string(s.0.join(".cronsole/settings.json")).expect("read");
    let dir = std::fs::canonicalize(&s.0).expect("canonical dir");
    assert!(
        settings.contains(&format!("\"base_dir\": \"{}\"", dir.display())),
        "{settings}"
    );
    let again = stdout(&cronsole(&s.0, &["apply", "jobs.yaml"]));
    assert!(!again.contains("settings updated"), "{again}");
    // No edit copies are left behind.
    let leftovers: Vec<_> = std::fs::read_dir(&s.0)
        .expect("list")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".cronsole-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn logs_prints_and_follows_the_store_log() {
    let s = Scratch::new("logs");
    let o = cronsole(&s.0, &["logs"]);
    assert_eq!(code(&o), 0);
    assert!(stdout(&o).contains("no log files"), "{}", stdout(&o));
    let dir = s.0.join(".cronsole").join("logs");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let f = dir.join("cronsole.log.2026-11-30");
    std::fs::write(&f, "one\ntwo\nthree\n").expect("write");
    let o = cronsole(&s.0, &["logs", "-n", "2"]);
    assert_eq!(stdout(&o), "two\nthree\n");

    // -f prints what is appended, then is stopped by us.
    let mut child = support::cli::command()
        .current_dir(&s.0)
        .args(["logs", "-f", "-n", "1"])
        .env_remove("CRONSOLE_STORE")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut out = child.stdout.take().expect("stdout");
    // Each read as it comes: the tail line says the follower is reading, and only then is the
    // line appended (appended earlier, it would be part of the tail instead).
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::Read;
        let mut buf = [0u8; 256];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut got = Vec::new();
    let mut read_until = |want: &str| {
        while !String::from_utf8_lossy(&got).contains(want) {
            match rx.recv_timeout(std::time::Duration::from_secs(10)) {
                Ok(chunk) => got.extend_from_slice(&chunk),
                Err(e) => panic!("{e}: no {want:?} in {:?}", String::from_utf8_lossy(&got)),
            }
        }
        String::from_utf8_lossy(&got).into_owned()
    };
    assert_eq!(read_until("three\n"), "three\n");
    {
        use std::io::Write;
        let mut a = std::fs::OpenOptions::new()
            .append(true)
            .open(&f)
            .expect("append");
        writeln!(a, "four").expect("append");
    }
    let got = read_until("four\n");
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(got, "three\nfour\n");
}

/// A PostgreSQL store's log is its own: `logs --store URL` never prints the log of a file store
/// that happens to sit in the working directory, and two databases never share a log folder.
#[test]
fn a_url_stores_log_is_kept_apart_from_the_file_store_beside_it() {
    let s = Scratch::new("logs-url");
    let file_logs = s.0.join(".cronsole").join("logs");
    std::fs::create_dir_all(&file_logs).expect("mkdir");
    std::fs::write(
        file_logs.join("cronsole.log.2026-11-30"),
        "file store line\n",
    )
    .expect("write");
    let url = "postgres://u:hunter2@127.0.0.1:1/a";
    let o = cronsole(&s.0, &["logs", "--store", url]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    assert!(!out.contains("file store line"), "{out}");
    assert!(!out.contains("hunter2"), "{out}");
    // The folder it names is the URL's own; a line written there is printed for that URL only.
    let named = out
        .split("no log files in ")
        .nth(1)
        .and_then(|r| r.split(':').next())
        .expect("names its folder");
    let dir = s.0.join(named);
    assert!(dir.starts_with(&file_logs) && dir != file_logs, "{dir:?}");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("cronsole.log.2026-11-30"), "db a line\n").expect("write");
    let o = cronsole(&s.0, &["logs", "--store", url]);
    assert_eq!(stdout(&o), "db a line\n");
    let o = cronsole(&s.0, &["logs", "--store", "postgres://u@127.0.0.1:1/b"]);
    assert!(!stdout(&o).contains("db a line"), "{}", stdout(&o));
    // The file store's own log is unchanged by the URL store's folder inside it.
    let o = cronsole(&s.0, &["logs"]);
    assert_eq!(stdout(&o), "file store line\n");
}

/// `at 9am` is stored once: its instant is the next 09:00 after the first apply, and applying
/// the unchanged file again keeps that instant (it never re-arms for the next day).
#[test]
fn at_a_time_of_day_is_resolved_once_when_first_stored() {
    let s = Scratch::new("at-store");
    std::fs::write(
        s.0.join("jobs.yaml"),
        "jobs:\n  - name: once\n    schedule: \"at 9am\"\n    command: echo once\n",
    )
    .expect("write");
    let next_slot = || {
        let o = cronsole(&s.0, &["jobs", "--json"]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
        v[0]["next_slot"].as_str().expect("next slot").to_string()
    };
    let before = chrono::Utc::now();
    assert_eq!(code(&cronsole(&s.0, &["apply", "jobs.yaml"])), 0);
    let first = next_slot();
    let t = chrono::DateTime::parse_from_rfc3339(&first)
        .expect("rfc3339")
        .to_utc();
    assert!(first.ends_with("T09:00:00Z"), "{first}");
    assert!(
        t >= before && t - before <= chrono::Duration::days(1),
        "{first}"
    );
    let o = cronsole(&s.0, &["apply", "jobs.yaml"]);
    assert!(stdout(&o).contains("unchanged once"), "{}", stdout(&o));
    assert_eq!(next_slot(), first);
}

#[test]
fn history_pages_with_limit_and_offset() {
    let s = Scratch::new("paging");
    std::fs::write(
        s.0.join("jobs.yaml"),
        "jobs:\n  - name: tick\n    schedule: \"every 1s\"\n    command: echo hi\n",
    )
    .expect("write");
    let o = cronsole(&s.0, &["run", "--for", "3s"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let ids: Vec<String> = stdout(&cronsole(&s.0, &["history", "--json"]))
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("json row");
            v["run_id"].as_str().expect("run id").to_string()
        })
        .collect();
    assert!(ids.len() >= 2, "{ids:?}");
    let first = stdout(&cronsole(&s.0, &["history", "--limit", "1"]));
    assert!(first.contains(&ids[0]), "{first}");
    // The next page's token (file store format 3: a history position), cheap at any depth.
    let token = first
        .split("next page with --page ")
        .nth(1)
        .and_then(|t| t.split(|c: char| c == ')' || c.is_whitespace()).next())
        .unwrap_or_else(|| panic!("a next-page token: {first}"))
        .to_string();
    let by_token = stdout(&cronsole(
        &s.0,
        &["history", "--limit", "1", "--page", &token],
    ));
    assert!(
        by_token.contains(&ids[1]) && !by_token.contains(&ids[0]),
        "{by_token}"
    );
    let second = stdout(&cronsole(
        &s.0,
        &["history", "--limit", "1", "--offset", "1"],
    ));
    assert!(
        second.contains(&ids[1]) && !second.contains(&ids[0]),
        "{second}"
    );
    let n = ids.len().to_string();
    let past = stdout(&cronsole(&s.0, &["history", "--offset", &n]));
    assert!(
        past.contains("no history rows match past --offset"),
        "{past}"
    );
    let all = stdout(&cronsole(&s.0, &["history"]));
    assert!(!all.contains("next page"), "{all}");
}

/// Declining the plan leaves the file and the store as they were (exit 1); a jobs file changed
/// by someone else during the edit is never overwritten (the edit is kept beside it).
#[test]
fn edit_declined_or_raced_changes_nothing() {
    let s = Scratch::new("edit2");
    assert_eq!(code(&cronsole(&s.0, &["init"])), 0);
    let original = std::fs::read_to_string(s.0.join("jobs.yaml")).expect("read");
    let edit = |editor: &str, answers: &str| {
        use std::io::Write;
        let mut child = support::cli::command()
            .current_dir(&s.0)
            .arg("edit")
            .env_remove("CRONSOLE_STORE")
            .env_remove("VISUAL")
            .env("EDITOR", editor)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(answers.as_bytes())
            .expect("answers");
        child.wait_with_output().expect("wait")
    };
    let o = edit("sed -i 's/every 1m/every 2m/'", "n\n");
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("plan: 1 to create"), "{}", stdout(&o));
    assert_eq!(
        std::fs::read_to_string(s.0.join("jobs.yaml")).expect("read"),
        original
    );
    assert!(!s.0.join(".cronsole").exists(), "no store was created");

    // The editor session races another writer of jobs.yaml.
    std::fs::write(
        s.0.join("race.sh"),
        "sed -i s/every.1m/every\\ 2m/ \"$1\"; echo '# theirs' >> jobs.yaml\n",
    )
    .expect("write");
    let o = edit("sh race.sh", "y\n");
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains("changed on disk"), "{}", stderr(&o));
    let now = std::fs::read_to_string(s.0.join("jobs.yaml")).expect("read");
    assert!(now.ends_with("# theirs\n"), "theirs is kept:\n{now}");
    assert!(!s.0.join(".cronsole").exists(), "nothing was applied");
}

/// The commands `cronsole --help` lists, with the long flags each takes (from its own
/// `--help`), `help` and the version/help flags left out.
fn commands_and_flags(dir: &Path) -> Vec<(String, Vec<String>)> {
    let top = stdout(&cronsole(dir, &["--help"]));
    let listed = top
        .split("Commands:\n")
        .nth(1)
        .expect("`cronsole --help` lists its commands")
        .lines()
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect::<Vec<_>>();
    assert!(listed.len() > 10, "{top}");
    listed
        .into_iter()
        .map(|name| {
            let help = stdout(&cronsole(dir, &[&name, "--help"]));
            let flags = help
                .split_whitespace()
                .filter_map(|w| w.strip_prefix("--"))
                .map(|w| {
                    w.trim_end_matches(|c: char| !c.is_ascii_alphanumeric() && c != '-')
                        .to_string()
                })
                .filter(|f| {
                    !f.is_empty() && f.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                })
                .filter(|f| f != "help" && f != "version")
                .map(|f| format!("--{f}"))
                .collect::<std::collections::BTreeSet<_>>();
            (name, flags.into_iter().collect())
        })
        .collect()
}

/// The guide's command-line page against the binary: every command `cronsole --help` lists is
/// named there (as `cronsole NAME`), every long flag a command takes appears on the page, and
/// every `cronsole NAME` the page's tables start a row with is a real command — so a command
/// or flag added without a line in the guide (or a line left behind) fails here.
#[test]
fn the_guide_names_every_command_and_flag() {
    let s = Scratch::new("guide");
    let page = include_str!("../../docs/guide/cli.md");
    let commands = commands_and_flags(&s.0);
    let mut missing = Vec::new();
    for (name, flags) in &commands {
        if !page.contains(&format!("`cronsole {name}")) && !page.contains(&format!("`{name}`")) {
            missing.push(format!("the command `cronsole {name}`"));
        }
        for flag in flags {
            if !page.contains(flag.as_str()) {
                missing.push(format!("`cronsole {name} {flag}`"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/guide/cli.md does not describe:\n  {}",
        missing.join("\n  ")
    );
    let names: Vec<&str> = commands.iter().map(|(n, _)| n.as_str()).collect();
    let stale: Vec<&str> = page
        .lines()
        .filter_map(|l| l.strip_prefix("| `cronsole "))
        .filter_map(|rest| rest.split([' ', '`']).next())
        .filter(|word| !word.is_empty() && !word.starts_with('[') && !word.starts_with('-'))
        .filter(|word| !names.contains(word))
        .collect();
    assert!(
        stale.is_empty(),
        "docs/guide/cli.md has rows for commands the binary does not have: {stale:?}"
    );
}

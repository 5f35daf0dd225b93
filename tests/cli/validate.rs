//! `cronsole validate FILE` as a process: exit codes, `file:line:col` diagnostics, next slots.
#![allow(clippy::unwrap_used)] // test code

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

/// A fresh directory under the system temp dir, removed on drop (see `support::TempDir`).
struct TempDir(support::TempDir);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        TempDir(support::tempdir(&format!("validate-{tag}")))
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
}

fn validate(file: &Path) -> (i32, String, String) {
    support::cli::output(
        support::cli::command()
            .arg("validate")
            .arg(file)
            .env_remove("CRONSOLE_TEST_KEY_THAT_IS_NOT_SET"),
    )
}

#[test]
fn invalid_file_exits_2_and_lists_every_error_with_its_position() {
    let dir = TempDir::new("invalid");
    let f = dir.write("jobs.yaml", include_str!("../data/config_invalid.yaml"));
    let (code, out, err) = validate(&f);
    assert_eq!(code, 2, "stdout:\n{out}\nstderr:\n{err}");
    let p = f.display();
    for expected in [
        format!("{p}:3:7: error: defaults.tz: unknown time zone 'Mars/Base'"),
        format!("{p}:6:15: error: jobs[0].schedule: invalid schedule \"*/0m\""),
        format!("{p}:8:11: error: jobs[1].name: duplicate job name 'one'"),
        format!("{p}:10:12: error: jobs[1].agent: unknown agent \"ghost\""),
        format!("{p}:11:5: error: jobs[1].command: `agent` and `command` are mutually exclusive"),
        format!(
            "{p}:15:5: error: jobs[2].timout_seconds: unknown key \"timout_seconds\" (did you mean 'timeout_seconds'?)"
        ),
    ] {
        assert!(
            out.lines().any(|l| l.starts_with(&expected)),
            "missing {expected:?} in:\n{out}"
        );
    }
    let errors = out.lines().filter(|l| l.contains(": error: ")).count();
    assert_eq!(errors, 6, "{out}");
    assert!(
        out.contains(
            "6 error(s) (1 under defaults, 5 under jobs), 0 warning(s); 0 of 3 job(s) valid"
        ),
        "{out}"
    );
}

/// Errors outside `jobs:` are named by section in the summary, and a job that relies on an
/// entry with errors (its agent, a tool source its agent allows, a sink) is not counted valid:
/// it says which entry holds it back instead of showing its next slots.
#[test]
fn errors_outside_jobs_are_placed_and_hold_back_the_jobs_using_them() {
    let dir = TempDir::new("agents");
    let f = dir.write(
        "jobs.yaml",
        "agents:\n  broken:\n    provider: nope\n    model: m\n    base_url: ftp://x\n  \
         tooled:\n    model: m\n    tools: [files.read_file]\n  fine:\n    model: m\n\
         mcp_servers:\n  files:\n    command: []\n\
         delivery:\n  hook: { webhook: 'not a url' }\n\
         jobs:\n  - { name: a, schedule: hourly, agent: broken, message: hi }\n  \
         - { name: b, schedule: hourly, agent: tooled, message: hi }\n  \
         - { name: c, schedule: hourly, agent: fine, message: hi, deliver: [hook] }\n  \
         - { name: d, schedule: hourly, command: 'true' }\n",
    );
    let (code, out, err) = validate(&f);
    assert_eq!(code, 2, "stdout:\n{out}\nstderr:\n{err}");
    let errors = |section: &str| {
        out.lines()
            .filter(|l| l.contains(&format!(": error: {section}.")))
            .count()
    };
    let (agents, servers, sinks) = (errors("agents"), errors("mcp_servers"), errors("delivery"));
    assert!(agents >= 2 && servers >= 1 && sinks >= 1, "{out}");
    let total = agents + servers + sinks;
    let warnings = out.lines().filter(|l| l.contains(": warning: ")).count();
    assert!(
        out.contains(&format!(
            "{total} error(s) ({agents} under agents, {servers} under mcp_servers, \
             {sinks} under delivery), {warnings} warning(s); 1 of 4 job(s) valid \
             (3 more held back by errors outside `jobs:`)"
        )),
        "{out}"
    );
    for held in [
        "a: not valid: it uses agent 'broken', which has errors",
        // The agent that allows a tool of a broken server has an error of its own.
        "b: not valid: it uses agent 'tooled', which has errors",
        "c: not valid: it delivers to sink 'hook', which has errors",
    ] {
        assert!(
            out.lines().any(|l| l == held),
            "missing {held:?} in:\n{out}"
        );
    }
    assert!(out.contains("d: hourly — every hour"), "{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("  next: ")).count(),
        3,
        "{out}"
    );
    // Errors in `defaults:`, which every job inherits, hold every job back.
    let f = dir.write(
        "defaults.yaml",
        "defaults:\n  timeout_seconds: -1\njobs:\n  - { name: d, schedule: hourly, command: 'true' }\n",
    );
    let (code, out, _) = validate(&f);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("d: not valid: it inherits `defaults:`, which has errors"),
        "{out}"
    );
    assert!(
        out.contains(
            "1 error(s) (1 under defaults), 0 warning(s); 0 of 1 job(s) valid (1 more held back"
        ),
        "{out}"
    );
}

#[test]
fn valid_file_exits_0_with_warnings_and_next_slots() {
    let dir = TempDir::new("valid");
    let f = dir.write("jobs.yaml", include_str!("../data/config_valid.yaml"));
    let (code, out, err) = validate(&f);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    let p = f.display();
    assert!(
        out.contains(&format!(
            "{p}:8:18: warning: agents.summariser.api_key_env: environment variable \
             CRONSOLE_TEST_KEY_THAT_IS_NOT_SET is not set"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "{p}:22:28: warning: jobs[1].misfire_grace_seconds: not a number of seconds"
        )),
        "{out}"
    );
    assert!(
        out.contains("daily-brief: 0 7 * * * — at 07:00 every day (Asia/Tokyo)"),
        "{out}"
    );
    assert!(
        out.contains("disk-watch: every 5m — every 5 minutes"),
        "{out}"
    );
    // Three slots each, the cron ones in the job's own zone at 07:00 JST (22:00 UTC).
    let nexts: Vec<&str> = out.lines().filter(|l| l.starts_with("  next: ")).collect();
    assert_eq!(nexts.len(), 6, "{out}");
    for l in &nexts[..3] {
        assert!(
            l.contains(" 07:00:00 JST (") && l.ends_with("T22:00:00Z)"),
            "{l}"
        );
    }
    // The `every 5m` grid is counted from the whole second it is stored in: its slots print
    // without the clock's nanoseconds (`02:25:52.666158990`).
    for l in &nexts[3..] {
        assert!(!l.contains('.'), "{l}");
    }
    assert!(
        out.contains("0 error(s), 2 warning(s); 2 of 2 job(s) valid"),
        "{out}"
    );
}

#[test]
fn unreadable_file_exits_2_naming_it() {
    let dir = TempDir::new("missing");
    let f = dir.0.join("nope.yaml");
    let (code, out, err) = validate(&f);
    assert_eq!(code, 2, "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        err.contains(&format!(
            "{}:1:1: error: (file): cannot read the jobs file",
            f.display()
        )),
        "{err}"
    );
}

#[test]
fn yaml_syntax_error_exits_2_with_its_position() {
    let dir = TempDir::new("syntax");
    let f = dir.write("jobs.yaml", "jobs:\n  - name: a\n   bad: indent\n");
    let (code, out, _) = validate(&f);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.starts_with(&format!("{}:3:4: error: (yaml): invalid YAML", f.display())),
        "{out}"
    );
}

#[test]
fn a_set_api_key_is_never_printed() {
    let dir = TempDir::new("secret");
    let f = dir.write("jobs.yaml", include_str!("../data/config_valid.yaml"));
    let out = support::cli::command()
        .arg("validate")
        .arg(&f)
        .env("CRONSOLE_TEST_KEY_THAT_IS_NOT_SET", "sk-very-secret-value")
        .output()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert!(!all.contains("sk-very-secret"), "{all}");
    assert!(!all.contains("is not set"), "the key is set now: {all}");
    assert!(all.contains("0 error(s), 1 warning(s)"), "{all}");
}

fn validate_with(file: &Path, env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = support::cli::command();
    cmd.arg("validate").arg(file);
    for (k, v) in env {
        cmd.env(k, v);
    }
    support::cli::output(&mut cmd)
}

#[test]
fn absurd_numbers_exit_2_each_at_its_position() {
    let dir = TempDir::new("bounds");
    let f = dir.write(
        "jobs.yaml",
        "jobs:\n  - name: a\n    schedule: {kind: every, every_seconds: 18446744073709551615}\n    \
         command: x\n    lease_seconds: 0.0001\n    timeout_seconds: 1e-300\n    max_runs: .nan\n",
    );
    let (code, out, err) = validate(&f);
    assert_eq!(code, 2, "stdout:\n{out}\nstderr:\n{err}");
    let p = f.display();
    for expected in [
        format!(
            "{p}:3:44: error: jobs[0].schedule.every_seconds: expected a whole number from 1 to \
             3162240000 (100 years), found the number 18446744073709551615"
        ),
        format!("{p}:5:20: error: jobs[0].lease_seconds: must be at least 1, found 0.0001"),
        format!("{p}:6:22: error: jobs[0].timeout_seconds: must be at least 0.1, found 1e-300"),
        format!(
            "{p}:7:15: error: jobs[0].max_runs: expected a whole number from 1 to 1000000000, \
             found the number .nan"
        ),
    ] {
        assert!(
            out.lines().any(|l| l == expected),
            "missing {expected:?} in:\n{out}"
        );
    }
}

#[test]
fn devices_and_directories_are_refused_without_reading() {
    let dir = TempDir::new("kinds");
    let (code, _, err) = validate(Path::new("/dev/zero"));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(
            "/dev/zero:1:1: error: (file): /dev/zero is a device: the jobs file must be a regular file"
        ),
        "{err}"
    );
    let (code, _, err) = validate(&dir.0);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("is a directory"), "{err}");
}

#[test]
fn a_fifo_is_refused_instead_of_waiting_for_a_writer() {
    let dir = TempDir::new("fifo");
    let fifo = dir.0.join("jobs.yaml");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let mut child = support::cli::command()
        .arg("validate")
        .arg(&fifo)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Bounded wait: opening the FIFO would block forever with no writer.
    let exited = support::wait::poll_until(std::time::Duration::from_secs(10), || {
        child.try_wait().unwrap().is_some()
    });
    if !exited {
        let _ = child.kill();
        let _ = child.wait();
        panic!("validate blocked on a FIFO");
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("is a FIFO: the jobs file must be a regular file"),
        "{err}"
    );
}

#[test]
fn the_size_cap_is_configurable_and_a_bad_cap_is_named() {
    let dir = TempDir::new("cap");
    let f = dir.write("jobs.yaml", include_str!("../data/config_valid.yaml"));
    let size = std::fs::metadata(&f).unwrap().len();
    let below = (size - 1).to_string();
    let (code, _, err) = validate_with(&f, &[("CRONSOLE_MAX_JOBS_FILE_BYTES", &below)]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "is {size} bytes, more than the jobs-file cap of {below} bytes (raise it with \
             CRONSOLE_MAX_JOBS_FILE_BYTES)"
        )),
        "{err}"
    );
    let exact = size.to_string();
    let (code, out, err) = validate_with(&f, &[("CRONSOLE_MAX_JOBS_FILE_BYTES", &exact)]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, _, err) = validate_with(&f, &[("CRONSOLE_MAX_JOBS_FILE_BYTES", "lots")]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(
            "CRONSOLE_MAX_JOBS_FILE_BYTES must be a whole number of bytes ≥ 1, found \"lots\""
        ),
        "{err}"
    );
}

#[test]
fn deep_nesting_is_a_yaml_error() {
    let dir = TempDir::new("nest");
    let f = dir.write("jobs.yaml", &"[".repeat(160_000));
    let (code, out, err) = validate(&f);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        out.contains("error: (yaml): invalid YAML: nesting deeper than 128 levels is not accepted"),
        "{out}"
    );
}

/// `apply` reads the jobs file through the same cap and bounds: a bad file changes no store.
#[test]
fn apply_refuses_out_of_bounds_values_and_oversized_files() {
    let dir = TempDir::new("apply");
    let store = dir.0.join("store");
    let apply = |file: &Path, env: &[(&str, &str)]| {
        let mut cmd = support::cli::command();
        cmd.arg("--store").arg(&store).arg("apply").arg(file);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let f = dir.write(
        "jobs.yaml",
        "jobs:\n  - name: a\n    schedule: every 5m\n    command: x\n    lease_seconds: 0.0001\n",
    );
    let (code, err) = apply(&f, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "{}:5:20: error: jobs[0].lease_seconds: must be at least 1, found 0.0001",
            f.display()
        )),
        "{err}"
    );
    let g = dir.write(
        "ok.yaml",
        "jobs:\n  - name: a\n    schedule: every 5m\n    command: x\n",
    );
    let (code, err) = apply(&g, &[("CRONSOLE_MAX_JOBS_FILE_BYTES", "10")]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("more than the jobs-file cap of 10 bytes"),
        "{err}"
    );
    assert!(!store.exists(), "a refused file must not create a store");
}

/// Every jobs file the project ships to users (`examples/*.yaml`, `jobs.example.yaml`) is valid:
/// the guide points readers at them, so a key renamed or removed must fail here, not on a
/// reader's machine. Warnings (an unset API-key variable) are fine.
#[test]
fn shipped_example_jobs_files_are_valid() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 5,
        "examples/ should hold the guide's five jobs files, found {files:?}"
    );
    files.push(root.join("jobs.example.yaml"));
    for f in &files {
        let (code, out, err) = validate(f);
        assert_eq!(code, 0, "{}:\n{out}\n{err}", f.display());
        assert!(
            out.lines().any(|l| l.starts_with("0 error(s)")),
            "{}:\n{out}",
            f.display()
        );
    }
}

/// `validate` and `apply` take the jobs file as FILE or `--jobs FILE`, and default to jobs.yaml
/// here; `validate` says what `run` would do with a loopback monitor URL (an error at its
/// `file:line:col`, exit 2) rather than pass it.
#[test]
fn the_jobs_file_is_file_or_jobs_and_a_loopback_monitor_is_refused_where_it_is() {
    let dir = TempDir::new("either");
    let good = "jobs:\n  - name: a\n    schedule: \"0 3 * * *\"\n    command: echo hi\n";
    dir.write("jobs.yaml", good);
    let f = dir.write("other.yaml", good);
    let run = |args: &[&str]| {
        support::cli::output(support::cli::command().current_dir(&*dir.0).args(args))
    };
    for args in [
        vec!["validate", "other.yaml"],
        vec!["validate", "--jobs", "other.yaml"],
        vec!["--jobs", "other.yaml", "validate"],
        vec!["validate"],
    ] {
        let (code, out, err) = run(&args);
        assert_eq!(code, 0, "{args:?}\n{out}\n{err}");
        assert!(out.contains("1 of 1 job(s) valid"), "{args:?}\n{out}");
    }
    let (code, _, err) = run(&["validate", "other.yaml", "--jobs", "jobs.yaml"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("given twice"), "{err}");
    let (code, out, err) = run(&["apply", "--jobs", "other.yaml"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("1 created"), "{out}");
    let (code, out, err) = run(&["apply"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("1 unchanged"), "{out}");

    let bad = dir.write(
        "loop.yaml",
        "jobs:\n  - name: m\n    schedule: \"0 3 * * *\"\n    command: echo hi\n    monitor: {url: \"http://127.0.0.1:8080/x\"}\n",
    );
    let (code, out, err) = validate(&bad);
    assert_eq!(code, 2, "{out}\n{err}");
    let want = format!(
        "{}:5:20: error: jobs[0].monitor.url: 127.0.0.1 is loopback (127/8), so every run would be rejected",
        bad.display()
    );
    assert!(out.lines().any(|l| l.starts_with(&want)), "{want}\n{out}");
    let (code, _, err) = run(&["apply", "loop.yaml"]);
    assert_eq!(code, 2, "{err}");
    drop(f);
}

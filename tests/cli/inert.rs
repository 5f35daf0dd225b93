//! Text from a jobs file or a store never reaches the terminal raw (the inert-text
//! policy of `cronsole::testkit::internals::text`), as real processes: the jobs file's warnings and diagnostics
//! (`validate`, `apply`, `run`), and stored text printed by `history`, `describe`, `stats`,
//! `jobs` and `logs`. Each carries an OSC title sequence (`ESC ] 0 ; PWN BEL`) that a terminal
//! would act on; the output must hold no ESC or BEL byte.
#![allow(clippy::unwrap_used)] // test code

use crate::support;

use std::path::Path;
use std::process::Output;

const OSC: &str = "\u{1b}]0;PWN\u{7}";

fn run(d: &Path, args: &[&str]) -> Output {
    support::cli::cronsole(d)
        .env("TZ", "UTC")
        .env("CRONSOLE_INERT_TEST_KEY", "sk-inert-test-0123456789")
        .args(args)
        .output()
        .expect("the cronsole binary runs")
}

/// Neither stream holds a raw ESC or BEL; returns (stdout, stderr).
fn inert(what: &str, out: &Output) -> (String, String) {
    for (name, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        assert!(
            !bytes.iter().any(|b| *b == 0x1b || *b == 0x07),
            "{what}: raw control bytes reach the terminal on {name}: {:?}",
            String::from_utf8_lossy(bytes)
        );
    }
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ok(d: &Path, args: &[&str]) -> (String, String) {
    let out = run(d, args);
    assert!(out.status.success(), "{args:?}: {out:?}");
    inert(&format!("{args:?}"), &out)
}

/// A model name is quoted in the "no known price" warning: a valid file under a budget.
fn warned_file() -> String {
    format!(
        "budget:\n  max_cost_usd: 1\nagents:\n  ag:\n    provider: openai\n    \
         model: \"gpt{OSC}x\"\n    api_key_env: CRONSOLE_INERT_TEST_KEY\njobs:\n  \
         - name: a\n    schedule: \"0 3 * * *\"\n    agent: ag\n    message: hi\n"
    )
}

#[test]
fn warnings_and_diagnostics_from_the_jobs_file_are_printed_escaped() {
    let d = support::tempdir("inert-warn");
    std::fs::write(d.join("jobs.yaml"), warned_file()).unwrap();
    let escaped = "model 'gpt^[]0;PWN^Gx' has no known price";

    let (out, _) = ok(&d, &["validate", "jobs.yaml"]);
    assert!(out.contains(escaped), "validate: {out}");
    let (_, err) = ok(&d, &["apply", "jobs.yaml"]);
    assert!(err.contains(escaped), "apply: {err}");
    let (_, err) = ok(&d, &["--jobs", "jobs.yaml", "run", "--for", "1s"]);
    assert!(err.contains(escaped), "run: {err}");

    // An error's key path quotes the file's key as it is: `validate` prints it escaped too.
    std::fs::write(
        d.join("bad.yaml"),
        format!(
            "jobs:\n  - name: a\n    schedule: \"0 3 * * *\"\n    command: echo\n    \
             \"k{OSC}\": 1\n"
        ),
    )
    .unwrap();
    let out = run(&d, &["validate", "bad.yaml"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let (out, _) = inert("validate bad.yaml", &out);
    assert!(out.contains("jobs[0].k^[]0;PWN^G: unknown key"), "{out}");
}

#[test]
fn stored_text_is_printed_escaped_by_every_command_that_shows_it() {
    let d = support::tempdir("inert-stored");
    // A gate whose stderr lands in the row's reason; a monitor URL (`describe` shows it).
    let jobs = format!(
        "budget: null\njobs:\n  - name: gated\n    schedule: \"0 3 * * *\"\n    \
         pre_run: \"printf 'g\\\\033]0;PWN\\\\007' >&2; exit 1\"\n    command: echo hi\n  \
         - name: watch\n    schedule: \"0 3 * * *\"\n    command: echo hi\n    monitor:\n      \
         url: \"http://127.0.0.1:9/a{OSC}\"\n      allow_private: true\n"
    );
    std::fs::write(d.join("jobs.yaml"), jobs).unwrap();
    ok(&d, &["apply", "jobs.yaml"]);
    ok(&d, &["pause", "watch", "--reason", &format!("why{OSC}")]);
    ok(&d, &["trigger", "gated"]);
    ok(&d, &["--jobs", "jobs.yaml", "run", "--for", "2s"]);

    let (out, _) = ok(&d, &["--jobs", "jobs.yaml", "history"]);
    assert!(out.contains("(exit 1: g^[]0;PWN^G)"), "history: {out}");
    let (out, _) = ok(&d, &["--jobs", "jobs.yaml", "describe", "gated"]);
    assert!(out.contains("exit 1: g"), "describe: {out}");
    let (out, _) = ok(&d, &["--jobs", "jobs.yaml", "describe", "watch"]);
    assert!(out.contains("monitor url http://127.0.0.1:9/a"), "{out}");
    ok(&d, &["--jobs", "jobs.yaml", "jobs"]);
    ok(&d, &["--jobs", "jobs.yaml", "stats"]);

    // Whatever else wrote into the log directory: `logs` shows it, escaped.
    let logs = d.join(".cronsole").join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    std::fs::write(
        logs.join("cronsole.log.2099-01-01"),
        format!("INFO evil{OSC}\tline\n"),
    )
    .unwrap();
    let (out, _) = ok(&d, &["--jobs", "jobs.yaml", "logs", "-n", "5"]);
    assert!(out.contains("INFO evil^[]0;PWN^G\tline"), "logs: {out}");
}

//! Every `--json` output could carry bidi overrides (U+202A–U+202E, U+2066–U+2069), DEL, C1
//! controls and invisible characters as themselves, so `cronsole history --json` in a terminal
//! could reorder what the operator read. Each JSON output writes them
//! as `\uXXXX` escapes (a JSON reader gets the exact value back), as the text outputs show them
//! as `\u{202e}`. Tried here with the real binary: `history`, `jobs`, `describe` and the
//! headless `--log-format json` lines of `run`.
#![allow(clippy::unwrap_used)] // test code

mod support;

use std::path::Path;

fn ok(d: &Path, args: &[&str]) -> String {
    let (code, out, err) = support::cli::output(
        support::cli::cronsole(d)
            .env("TZ", "UTC")
            .args(["--store", ".cronsole"])
            .args(args),
    );
    assert_eq!(code, 0, "{args:?}\nstdout: {out}\nstderr: {err}");
    out
}

/// No character of the inert-text policy is in `out` as itself (line breaks of the layout
/// aside), and the escapes are there instead.
fn assert_inert(what: &str, out: &str) {
    let bad: Vec<char> = out
        .chars()
        .filter(|&c| cronsole::testkit::internals::text::is_unsafe(c) && c != '\n')
        .collect();
    assert!(bad.is_empty(), "{what}: raw {bad:?} in {out}");
    assert!(out.contains("\\u202e"), "{what}: {out}");
    assert!(out.contains("\\u2066"), "{what}: {out}");
}

#[test]
fn every_json_output_escapes_bidi_and_invisible_characters() {
    let d = support::tempdir("json-inert");
    // YAML double-quoted escapes put U+202E, U+2066, DEL and a zero-width space into the
    // command; its output carries them into the history row.
    std::fs::write(
        d.join("jobs.yaml"),
        "budget: null\njobs:\n  - name: bidi\n    schedule: every 1s\n    \
         command: \"printf 'a\\u202eb\\u2066c\\x7fd\\u200be'\"\n",
    )
    .unwrap();
    ok(&d, &["apply", "jobs.yaml"]);
    let log = ok(&d, &["run", "--for", "3s", "--log-format", "json"]);
    assert!(!log.trim().is_empty(), "the run printed its rows");
    assert_inert("run --log-format json", &log);

    let hist = ok(&d, &["history", "--job", "bidi", "--json"]);
    assert_inert("history --json", &hist);
    // The value is exact for a JSON reader.
    let row: serde_json::Value = serde_json::from_str(hist.lines().next().unwrap()).unwrap();
    assert_eq!(
        row["result"].as_str(),
        Some("a\u{202e}b\u{2066}c\u{7f}d\u{200b}e"),
        "{row}"
    );

    for args in [&["jobs", "--json"][..], &["describe", "bidi", "--json"]] {
        let out = ok(&d, args);
        assert_inert(&args.join(" "), &out);
        // Parsed back, the command is exactly what the jobs file says.
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert!(v.to_string().contains("a\u{202e}b\u{2066}c"), "{v}");
    }
}

/// An I/O error names its OS cause once, never twice ("Not a directory (os error 20): Not a
/// directory (os error 20)"), exit 1.
#[test]
fn an_io_error_names_its_os_cause_once() {
    let d = support::tempdir("io-once");
    std::fs::write(d.join("f"), "a file, not a directory\n").unwrap();
    std::fs::write(
        d.join("jobs.yaml"),
        "budget: null\njobs:\n  - name: a\n    schedule: every 1h\n    command: \"true\"\n",
    )
    .unwrap();
    let (code, _, err) =
        support::cli::run_with_store(&d, d.join("f").join("store"), &["apply", "jobs.yaml"]);
    assert_eq!(code, 1, "{err}");
    let os = std::io::Error::from_raw_os_error(20).to_string();
    assert!(err.starts_with("error: I/O error on "), "{err}");
    assert_eq!(err.matches(&os).count(), 1, "{err}");
}

/// A 3 000-job `after:` cycle is one short line from `validate`, not a 47 KB one.
#[test]
fn validate_reports_a_long_cycle_on_one_short_line() {
    let d = support::tempdir("long-cycle");
    let n = 3000;
    let mut yaml = String::from("budget: null\njobs:\n");
    for i in 0..n {
        let parent = (i + 1) % n;
        yaml.push_str(&format!(
            "  - name: j{i}\n    command: \"true\"\n    after: j{parent}\n"
        ));
    }
    std::fs::write(d.join("cycle.yaml"), yaml).unwrap();
    let (code, out, err) = support::cli::run_plain(&d, &["validate", "cycle.yaml"]);
    assert_eq!(code, 2, "{out}{err}");
    let all = format!("{out}{err}");
    let line = all
        .lines()
        .find(|l| l.contains("makes a cycle"))
        .unwrap_or_else(|| panic!("{all}"));
    assert!(line.len() < 600, "{} bytes: {line}", line.len());
    assert!(line.contains("… 2995 more jobs …"), "{line}");
    assert!(line.contains("(a cycle of 3000 jobs)"), "{line}");
}

//! `cronsole next` as a real process: JSON shape, `--before`, text output, and exit 2 with a
//! message on bad input.
#![allow(clippy::unwrap_used)] // test code

use crate::support;

use std::process::Output;

fn run(args: &[&str]) -> Output {
    support::cli::command()
        .arg("next")
        .args(args)
        .output()
        .expect("the cronsole binary runs")
}

fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "exit {:?}, stderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is one JSON object")
}

/// Previewed from now, an `every` grid and `in 10m` start on the whole second, as a job stored
/// now would: no microseconds of the command's clock in the slots.
#[test]
fn a_preview_from_now_starts_on_the_whole_second() {
    for expr in ["every 1h30m", "in 10m", "every 7s"] {
        let v = json(&run(&[expr, "--count", "2", "--json"]));
        for s in v["slots"].as_array().unwrap() {
            let s = s.as_str().unwrap();
            assert!(!s.contains('.'), "{expr}: {s}");
        }
    }
}

#[test]
fn json_shape_after() {
    let out = run(&[
        "*/5 9-17 * * 1-5",
        "--tz",
        "America/New_York",
        "--after",
        "2026-05-15T21:50:00Z",
        "--count",
        "3",
        "--json",
    ]);
    let v = json(&out);
    assert_eq!(
        v,
        serde_json::json!({
            "expr": "*/5 9-17 * * 1-5",
            "tz": "America/New_York",
            // Friday 17:55 EDT, then Monday 09:00 and 09:05 EDT.
            "slots": ["2026-05-15T21:55:00Z", "2026-05-18T13:00:00Z", "2026-05-18T13:05:00Z"],
        })
    );
}

#[test]
fn json_dst_gap_and_grammar_forms() {
    let v = json(&run(&[
        "30 2 * * *",
        "--tz",
        "America/New_York",
        "--after",
        "2026-03-07T12:00:00Z",
        "--count",
        "2",
        "--json",
    ]));
    assert_eq!(
        v["slots"],
        serde_json::json!(["2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"])
    );
    let v = json(&run(&[
        "weekdays at 09:30",
        "--tz",
        "Europe/Berlin",
        "--after",
        "2026-05-15T08:00:00Z",
        "--count",
        "2",
        "--json",
    ]));
    assert_eq!(
        v["slots"],
        serde_json::json!(["2026-05-18T07:30:00Z", "2026-05-19T07:30:00Z"])
    );
    let v = json(&run(&[
        "every 90s",
        "--after",
        "2026-01-01T00:00:00Z",
        "--count",
        "2",
        "--json",
    ]));
    assert_eq!(
        v["slots"],
        serde_json::json!(["2026-01-01T00:01:30Z", "2026-01-01T00:03:00Z"])
    );
}

#[test]
fn before_gives_previous_slots_newest_first() {
    let v = json(&run(&[
        "0 7 * * *",
        "--tz",
        "Europe/Berlin",
        "--before",
        "2026-05-13T05:00:00Z",
        "--count",
        "3",
        "--json",
    ]));
    assert_eq!(
        v["slots"],
        serde_json::json!([
            "2026-05-12T05:00:00Z",
            "2026-05-11T05:00:00Z",
            "2026-05-10T05:00:00Z"
        ])
    );
}

#[test]
fn text_output_one_slot_per_line_with_local_time() {
    let out = run(&[
        "@daily",
        "--tz",
        "Europe/Berlin",
        "--after",
        "2026-01-01T12:00:00Z",
        "--count",
        "2",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].starts_with("2026-01-01T23:00:00Z"), "{text}");
    assert!(lines[0].contains("2026-01-02 00:00:00 CET"), "{text}");
}

/// `next --after` reads the times `history --since` reads: a plain date is its midnight in the
/// schedule's zone, and the words and durations work too.
#[test]
fn after_and_before_take_the_same_time_forms_as_since() {
    let out = run(&["@daily", "--after", "2026-01-01", "--count", "1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("2026-01-02T00:00:00Z"), "{text}");
    let out = run(&[
        "0 9 * * *",
        "--tz",
        "Europe/Berlin",
        "--before",
        "2026-01-02 09:30",
        "--count",
        "1",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("2026-01-02T08:00:00Z"), "{text}");
    for t in ["yesterday", "today", "2h", "in 3h", "now"] {
        let out = run(&["@hourly", "--after", t, "--count", "1"]);
        assert!(
            out.status.success(),
            "{t}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn bad_input_exits_2_with_a_message() {
    for (args, needle) in [
        (vec!["0 0 * * * *"], "6 fields"),
        (vec!["*/0m"], "at least 1 second"),
        (vec!["cron:61 * * * *"], "out of range"),
        (vec!["@daily", "--tz", "Mars/Olympus"], "unknown time zone"),
        (vec!["@daily", "--after", "soon"], "RFC 3339"),
    ] {
        let out = run(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(needle),
            "{args:?}: stderr '{err}' should mention '{needle}'"
        );
        assert!(out.stdout.is_empty(), "{args:?}: nothing on stdout");
    }
}

//! `after:` in the jobs file (chains and fan-in). Each wrong form asserts its
//! message and its `line:column`.

use super::super::*;
use super::{assert_at, check, error_at, error_in};
use crate::model::{After, ChainOn};
use crate::schedule::ScheduleSpec;

fn at(d: &Diagnostic, line: usize, column: usize, needle: &str) {
    assert_at(d, line, column, Severity::Error, needle);
}

/// The diagnostics of `c` that name a cycle.
fn cycles(c: &Checked) -> Vec<&Diagnostic> {
    c.diagnostics
        .iter()
        .filter(|d| d.message.contains("cycle"))
        .collect()
}

const COLLECT: &str = "  - name: collect\n    schedule: every 1h\n    command: \"true\"\n";

#[test]
fn after_forms_and_optional_schedule() {
    let c = check(&format!(
        "jobs:\n{COLLECT}  - name: watch\n    schedule: every 5m\n    monitor: {{command: \"date\"}}\n    command: \"true\"\n  - name: triage\n    command: \"true\"\n    after: {{job: collect, on: failure}}\n  - name: report\n    schedule: every 1d\n    command: \"true\"\n    after:\n      - triage\n      - {{job: watch, on: change}}\n"
    ));
    assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
    let f = c.into_result().unwrap().file;
    assert_eq!(f.jobs[2].schedule, ScheduleSpec::AfterOnly);
    assert_eq!(
        f.jobs[2].after,
        vec![After {
            job: "collect".into(),
            on: ChainOn::Failure
        }]
    );
    assert!(matches!(f.jobs[3].schedule, ScheduleSpec::Every { .. }));
    assert_eq!(
        f.jobs[3].after,
        vec![
            After {
                job: "triage".into(),
                on: ChainOn::Success
            },
            After {
                job: "watch".into(),
                on: ChainOn::Change
            }
        ]
    );
}

#[test]
fn unknown_self_duplicate_and_empty() {
    let c = error_at(
        &format!(
            "jobs:\n{COLLECT}  - name: b\n    command: \"true\"\n    after:\n      - {{job: ghost}}\n      - b\n      - collect\n      - {{job: collect, on: completion}}\n"
        ),
        "jobs[1].after[0].job",
        (8, 15),
        "unknown job \"ghost\" in after",
    );
    error_in(&c, "jobs[1].after[1]", (9, 9), "cannot run after itself");
    error_in(&c, "jobs[1].after[3]", (11, 9), "appears twice");
    error_at(
        &format!("jobs:\n{COLLECT}  - name: b\n    command: \"true\"\n    after: []\n"),
        "jobs[1].after",
        (7, 12),
        "empty list",
    );
}

#[test]
fn wrong_on_and_wrong_shapes() {
    error_at(
        &format!(
            "jobs:\n{COLLECT}  - name: b\n    command: \"true\"\n    after: {{job: collect, on: done}}\n"
        ),
        "jobs[1].after.on",
        (7, 31),
        "use success, failure, completion or change",
    );
    error_at(
        &format!(
            "jobs:\n{COLLECT}  - name: b\n    command: \"true\"\n    after: {{on: success}}\n"
        ),
        "jobs[1].after",
        (7, 12),
        "missing `job`",
    );
    error_at(
        &format!("jobs:\n{COLLECT}  - name: b\n    command: \"true\"\n    after: 3\n"),
        "jobs[1].after",
        (7, 12),
        "expected a job name",
    );
    let c = check(&format!(
        "jobs:\n{COLLECT}  - name: b\n    command: \"true\"\n    after: {{job: collect, when: x}}\n"
    ));
    assert!(
        c.diagnostics
            .iter()
            .any(|d| d.key == "jobs[1].after.when" && d.message.contains("unknown key")),
        "{:#?}",
        c.diagnostics
    );
}

#[test]
fn change_needs_a_monitor_parent() {
    error_at(
        &format!(
            "jobs:\n{COLLECT}  - name: b\n    command: \"true\"\n    after: {{job: collect, on: change}}\n"
        ),
        "jobs[1].after.on",
        (7, 31),
        "`on: change` needs a monitor",
    );
}

#[test]
fn a_cycle_is_reported_at_the_entry_that_closes_it() {
    let c = check(
        "jobs:\n  - name: a\n    command: \"true\"\n    after: c\n  - name: b\n    command: \"true\"\n    after: a\n  - name: c\n    schedule: every 1h\n    command: \"true\"\n    after: [b]\n",
    );
    let cycles = cycles(&c);
    assert_eq!(cycles.len(), 1, "{:#?}", c.diagnostics);
    // a → c → b → a: walking from `a`, the entry of `b` naming `a` closes it.
    at(cycles[0], 7, 12, "a waits for c waits for b waits for a");
    assert_eq!(cycles[0].key, "jobs[1].after");
    assert!(c.into_result().is_err(), "a cycle is an error");
    // A diamond is not a cycle.
    let c = check(
        "jobs:\n  - name: a\n    schedule: every 1h\n    command: \"true\"\n  - name: b\n    command: \"true\"\n    after: a\n  - name: c\n    command: \"true\"\n    after: a\n  - name: d\n    command: \"true\"\n    after: [b, c]\n",
    );
    assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
}

/// `once` and `max_runs` count scheduled runs: on a job with only `after:` they would never apply,
/// so they are refused at the key rather than silently ignored. With a schedule they stay allowed.
#[test]
fn once_and_max_runs_need_a_schedule() {
    let c = error_at(
        &format!(
            "jobs:\n{COLLECT}  - name: b\n    command: \"true\"\n    after: collect\n    once: true\n"
        ),
        "jobs[1].once",
        (8, 5),
        "`once` limits scheduled runs, and this job has no `schedule`",
    );
    assert_eq!(c.diagnostics.len(), 1, "{:#?}", c.diagnostics);
    let c = error_at(
        &format!(
            "jobs:\n{COLLECT}  - name: b\n    command: \"true\"\n    max_runs: 3\n    after: collect\n"
        ),
        "jobs[1].max_runs",
        (7, 5),
        "put the limit on the parent job",
    );
    assert_eq!(c.diagnostics.len(), 1, "{:#?}", c.diagnostics);
    // `once: false` limits nothing; with a schedule the limit counts its scheduled runs.
    let c = check(&format!(
        "jobs:\n{COLLECT}  - name: b\n    command: \"true\"\n    after: collect\n    once: false\n  - name: c\n    schedule: every 1h\n    command: \"true\"\n    after: collect\n    max_runs: 2\n"
    ));
    assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
}

#[test]
fn without_after_the_schedule_is_still_required() {
    let c = check("jobs:\n  - name: a\n    command: \"true\"\n");
    assert!(
        c.diagnostics
            .iter()
            .any(|d| d.message.contains("missing required key `schedule`")),
        "{:#?}",
        c.diagnostics
    );
}

#[test]
fn find_cycle_finds_cycles_and_not_diamonds() {
    let mk = |n: &str, after: &[&str]| {
        let mut d = crate::testkit::jobs::command_job(n, 60);
        d.after = after
            .iter()
            .map(|j| After {
                job: j.to_string(),
                on: ChainOn::Success,
            })
            .collect();
        d
    };
    assert_eq!(
        find_cycle(&[mk("a", &["a"])]),
        Some(vec!["a".into(), "a".into()])
    );
    assert_eq!(
        find_cycle(&[mk("a", &["b"]), mk("b", &["c"]), mk("c", &["a"])]),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    let diamond = [
        mk("a", &[]),
        mk("b", &["a"]),
        mk("c", &["a"]),
        mk("d", &["b", "c", "ghost"]),
    ];
    assert_eq!(find_cycle(&diamond), None);
}

/// A 3 000-job `after:` cycle must not be reported as one 47 KB line: the
/// message names the first three and last two jobs, how many it leaves out and the cycle's
/// length, at the same entry as before.
#[test]
fn a_long_cycle_is_reported_on_one_short_line() {
    let n = 3000;
    let mut yaml = String::from("jobs:\n");
    for i in 0..n {
        let parent = (i + 1) % n;
        yaml.push_str(&format!(
            "  - name: job-{i:04}\n    command: \"true\"\n    after: job-{parent:04}\n"
        ));
    }
    let c = check(&yaml);
    let cycles = cycles(&c);
    assert_eq!(cycles.len(), 1, "{:#?}", c.diagnostics);
    let m = &cycles[0].message;
    assert!(m.len() < 400, "{} bytes: {m}", m.len());
    assert!(
        m.contains(
            "job-0000 waits for job-0001 waits for job-0002 waits for … 2995 more jobs … waits \
             for job-2998 waits for job-2999 waits for job-0000 (a cycle of 3000 jobs)"
        ),
        "{m}"
    );
    // Still at the entry that closes it: the last job's `after`.
    at(cycles[0], 3 * n + 1, 12, "a cycle of 3000 jobs");
}

#[test]
fn cycle_text_names_short_cycles_in_full() {
    let names = |n: usize| -> Vec<String> { (0..=n).map(|i| format!("j{}", i % n)).collect() };
    assert_eq!(cycle_text(&names(1)), "j0 waits for j0");
    assert_eq!(
        cycle_text(&names(6)),
        "j0 waits for j1 waits for j2 waits for j3 waits for j4 waits for j5 waits for j0"
    );
    assert_eq!(
        cycle_text(&names(7)),
        "j0 waits for j1 waits for j2 waits for … 2 more jobs … waits for j5 waits for j6 \
         waits for j0 (a cycle of 7 jobs)"
    );
}

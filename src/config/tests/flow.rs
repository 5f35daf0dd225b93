//! `jitter_seconds` (per job and in `defaults`), `calendars:` and a job's `only_on` / `except_on`
//! in the jobs file. Each wrong form asserts its message and its `line:column`.

use super::super::*;
use super::{assert_at as at, check, diag};

#[test]
fn jitter_per_job_and_from_defaults() {
    let c = check(
        "defaults:\n  jitter_seconds: 30\njobs:\n  - name: a\n    schedule: every 1h\n    command: \"true\"\n  - name: b\n    schedule: every 1h\n    command: \"true\"\n    jitter_seconds: 2.5\n",
    );
    assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
    let f = c.into_result().unwrap().file;
    assert_eq!(f.jobs[0].jitter_seconds, 30.0);
    assert_eq!(f.jobs[1].jitter_seconds, 2.5);
}

#[test]
fn jitter_wrong_forms() {
    let c = check(
        "jobs:\n  - name: a\n    schedule: every 1h\n    command: \"true\"\n    jitter_seconds: -1\n",
    );
    at(
        diag(&c, "jobs[0].jitter_seconds"),
        5,
        21,
        Severity::Error,
        "at least 0",
    );
    let c = check(
        "jobs:\n  - name: a\n    schedule: every 1h\n    command: \"true\"\n    jitter_seconds: lots\n",
    );
    at(
        diag(&c, "jobs[0].jitter_seconds"),
        5,
        21,
        Severity::Error,
        "expected a number",
    );
    let c = check("defaults:\n  jitter_seconds: 90000\njobs: []\n");
    at(
        diag(&c, "defaults.jitter_seconds"),
        2,
        19,
        Severity::Error,
        "(1 day)",
    );
    // Not an error, but worth saying: jitter as long as the interval.
    let c = check(
        "jobs:\n  - name: a\n    schedule: every 60s\n    command: \"true\"\n    jitter_seconds: 60\n",
    );
    at(
        diag(&c, "jobs[0].jitter_seconds"),
        5,
        21,
        Severity::Warning,
        "not shorter than the 60s",
    );
}

const CALS: &str = "calendars:\n  business: {weekdays: [mon, tue, wed, thu, Friday]}\n  holidays:\n    dates: [2026-12-25, \"2027-01-01\"]\n";

#[test]
fn calendars_resolve_into_the_job() {
    let c = check(&format!(
        "{CALS}jobs:\n  - name: a\n    schedule: \"0 9 * * *\"\n    command: \"true\"\n    only_on: business\n    except_on: holidays\n"
    ));
    assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
    let f = c.into_result().unwrap().file;
    let days = &f.jobs[0].days;
    let only = days.only_on.as_ref().unwrap();
    assert_eq!(only.name, "business");
    assert_eq!(only.weekdays, [true, true, true, true, true, false, false]);
    let except = days.except_on.as_ref().unwrap();
    assert_eq!(except.dates.len(), 2);
}

#[test]
fn calendar_wrong_forms() {
    let c = check("calendars: [a]\njobs: []\n");
    at(
        diag(&c, "calendars"),
        1,
        12,
        Severity::Error,
        "calendar name",
    );
    let c = check("calendars:\n  c: {weekdays: [mon, funday]}\njobs: []\n");
    at(
        diag(&c, "calendars.c.weekdays[1]"),
        2,
        23,
        Severity::Error,
        "unknown weekday \"funday\"",
    );
    let c = check("calendars:\n  c: {weekdays: mon}\njobs: []\n");
    at(
        diag(&c, "calendars.c.weekdays"),
        2,
        17,
        Severity::Error,
        "expected a list of weekdays",
    );
    let c = check("calendars:\n  c: {dates: [2026-13-01]}\njobs: []\n");
    at(
        diag(&c, "calendars.c.dates[0]"),
        2,
        15,
        Severity::Error,
        "is not a date",
    );
    let c = check("calendars:\n  c: {dates: [20261225]}\njobs: []\n");
    at(
        diag(&c, "calendars.c.dates[0]"),
        2,
        15,
        Severity::Error,
        "expected an ISO date",
    );
    let c = check("calendars:\n  c: {}\njobs: []\n");
    at(
        diag(&c, "calendars.c"),
        2,
        6,
        Severity::Error,
        "at least one of",
    );
    let c = check("calendars:\n  c: {weekday: [mon]}\njobs: []\n");
    at(
        diag(&c, "calendars.c.weekday"),
        2,
        7,
        Severity::Error,
        "did you mean 'weekdays'",
    );
    let c = check("calendars:\n  \"bad name\": {weekdays: [mon]}\njobs: []\n");
    at(
        diag(&c, "calendars.bad name"),
        2,
        3,
        Severity::Error,
        "invalid calendar name",
    );
}

#[test]
fn unknown_calendar_on_a_job_names_the_defined_ones() {
    let c = check(&format!(
        "{CALS}jobs:\n  - name: a\n    schedule: every 1h\n    command: \"true\"\n    except_on: holidayz\n"
    ));
    at(
        diag(&c, "jobs[0].except_on"),
        9,
        16,
        Severity::Error,
        "defined calendars: business, holidays",
    );
    let c = check(
        "jobs:\n  - name: a\n    schedule: every 1h\n    command: \"true\"\n    only_on: x\n",
    );
    at(
        diag(&c, "jobs[0].only_on"),
        5,
        14,
        Severity::Error,
        "no calendars are defined",
    );
}

#[test]
fn a_dates_file_is_read_relative_to_the_jobs_file() {
    let dir = crate::testkit::tmp::TempDir::new("cal");
    std::fs::write(
        dir.path().join("holidays.txt"),
        "# public holidays\n2026-12-25\n\n2027-01-01  # new year\n",
    )
    .unwrap();
    let jobs = dir.path().join("jobs.yaml");
    let text = "calendars:\n  h: {file: holidays.txt}\njobs:\n  - name: a\n    schedule: every 1h\n    command: \"true\"\n    except_on: h\n";
    let c = check_str_with_env(text, &jobs, &|_| true);
    assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
    let f = c.into_result().unwrap().file;
    assert_eq!(f.jobs[0].days.except_on.as_ref().unwrap().dates.len(), 2);

    // A bad line names the dates file and its line, at the `file:` key of the jobs file.
    std::fs::write(dir.path().join("holidays.txt"), "2026-12-25\nxmas\n").unwrap();
    let c = check_str_with_env(text, &jobs, &|_| true);
    let d = diag(&c, "calendars.h.file");
    at(
        d,
        2,
        13,
        Severity::Error,
        "holidays.txt:2: \"xmas\" is not a date",
    );
    // A missing file is an error too, and the job that uses it is not kept.
    std::fs::remove_file(dir.path().join("holidays.txt")).unwrap();
    let c = check_str_with_env(text, &jobs, &|_| true);
    at(
        diag(&c, "calendars.h.file"),
        2,
        13,
        Severity::Error,
        "cannot read",
    );
    assert!(c.into_result().is_err());
}

#[test]
fn a_job_naming_a_broken_calendar_is_told_so() {
    let c = check(
        "calendars:\n  h: {dates: [someday]}\njobs:\n  - name: a\n    schedule: every 1h\n    command: \"true\"\n    except_on: h\n",
    );
    at(
        diag(&c, "calendars.h.dates[0]"),
        2,
        15,
        Severity::Error,
        "is not a date",
    );
    at(
        diag(&c, "jobs[0].except_on"),
        7,
        16,
        Severity::Error,
        "has errors (reported where it is defined)",
    );
}

#[test]
fn a_calendar_of_too_many_dates_is_refused() {
    let dates: Vec<String> = (0..10_001)
        .map(|i| {
            (chrono::NaiveDate::from_ymd_opt(2000, 1, 1).unwrap() + chrono::Duration::days(i))
                .to_string()
        })
        .collect();
    let c = check(&format!(
        "calendars:\n  big: {{dates: [{}]}}\njobs: []\n",
        dates.join(", ")
    ));
    at(
        diag(&c, "calendars.big"),
        2,
        8,
        Severity::Error,
        "10001 dates, more than 10000",
    );
}

/// A jitter as long as the gap between two cron slots is warned about, like the
/// `every` interval; a shorter one is not.
#[test]
fn jitter_as_long_as_a_cron_gap_is_a_warning() {
    let job = |sched: &str, jitter: &str| {
        format!(
            "jobs:\n  - name: a\n    schedule: \"{sched}\"\n    command: \"true\"\n    jitter_seconds: {jitter}\n"
        )
    };
    let c = check(&job("0 * * * *", "86400"));
    assert!(!c.has_errors());
    at(
        diag(&c, "jobs[0].jitter_seconds"),
        5,
        21,
        Severity::Warning,
        "not shorter than the 3600s between two of this cron schedule's slots",
    );
    // Irregular gaps: the shortest one (1 h between 23:00 and 00:00) counts.
    let c = check(&job("0 0,23 * * *", "3600"));
    assert!(diag(&c, "jobs[0].jitter_seconds").message.contains("3600s"));
    let c = check(&job("0 * * * *", "3599"));
    assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
    let c = check(&job("0 0 1 * *", "86400"));
    assert!(c.diagnostics.is_empty(), "monthly: {:#?}", c.diagnostics);
}

//! `jitter_seconds` (per job and in `defaults`), `calendars:` and a job's `only_on` / `except_on`
//! in the jobs file. Each wrong form asserts its message and its `line:column`.

use super::super::*;
use super::{check, diag, error_at, error_in, warning_at, warning_in};

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
    error_at(
        "jobs:\n  - name: a\n    schedule: every 1h\n    command: \"true\"\n    jitter_seconds: -1\n",
        "jobs[0].jitter_seconds",
        (5, 21),
        "at least 0",
    );
    error_at(
        "jobs:\n  - name: a\n    schedule: every 1h\n    command: \"true\"\n    jitter_seconds: lots\n",
        "jobs[0].jitter_seconds",
        (5, 21),
        "expected a number",
    );
    error_at(
        "defaults:\n  jitter_seconds: 90000\njobs: []\n",
        "defaults.jitter_seconds",
        (2, 19),
        "(1 day)",
    );
    // Not an error, but worth saying: jitter as long as the interval.
    warning_at(
        "jobs:\n  - name: a\n    schedule: every 60s\n    command: \"true\"\n    jitter_seconds: 60\n",
        "jobs[0].jitter_seconds",
        (5, 21),
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
    error_at(
        "calendars: [a]\njobs: []\n",
        "calendars",
        (1, 12),
        "calendar name",
    );
    error_at(
        "calendars:\n  c: {weekdays: [mon, funday]}\njobs: []\n",
        "calendars.c.weekdays[1]",
        (2, 23),
        "unknown weekday \"funday\"",
    );
    error_at(
        "calendars:\n  c: {weekdays: mon}\njobs: []\n",
        "calendars.c.weekdays",
        (2, 17),
        "expected a list of weekdays",
    );
    error_at(
        "calendars:\n  c: {dates: [2026-13-01]}\njobs: []\n",
        "calendars.c.dates[0]",
        (2, 15),
        "is not a date",
    );
    error_at(
        "calendars:\n  c: {dates: [20261225]}\njobs: []\n",
        "calendars.c.dates[0]",
        (2, 15),
        "expected an ISO date",
    );
    error_at(
        "calendars:\n  c: {}\njobs: []\n",
        "calendars.c",
        (2, 6),
        "at least one of",
    );
    error_at(
        "calendars:\n  c: {weekday: [mon]}\njobs: []\n",
        "calendars.c.weekday",
        (2, 7),
        "did you mean 'weekdays'",
    );
    error_at(
        "calendars:\n  \"bad name\": {weekdays: [mon]}\njobs: []\n",
        "calendars.bad name",
        (2, 3),
        "invalid calendar name",
    );
}

#[test]
fn unknown_calendar_on_a_job_names_the_defined_ones() {
    error_at(
        &format!(
            "{CALS}jobs:\n  - name: a\n    schedule: every 1h\n    command: \"true\"\n    except_on: holidayz\n"
        ),
        "jobs[0].except_on",
        (9, 16),
        "defined calendars: business, holidays",
    );
    error_at(
        "jobs:\n  - name: a\n    schedule: every 1h\n    command: \"true\"\n    only_on: x\n",
        "jobs[0].only_on",
        (5, 14),
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
    error_in(
        &c,
        "calendars.h.file",
        (2, 13),
        "holidays.txt:2: \"xmas\" is not a date",
    );
    // A missing file is an error too, and the job that uses it is not kept.
    std::fs::remove_file(dir.path().join("holidays.txt")).unwrap();
    let c = check_str_with_env(text, &jobs, &|_| true);
    error_in(&c, "calendars.h.file", (2, 13), "cannot read");
    assert!(c.into_result().is_err());
}

#[test]
fn a_job_naming_a_broken_calendar_is_told_so() {
    let c = error_at(
        "calendars:\n  h: {dates: [someday]}\njobs:\n  - name: a\n    schedule: every 1h\n    command: \"true\"\n    except_on: h\n",
        "calendars.h.dates[0]",
        (2, 15),
        "is not a date",
    );
    error_in(
        &c,
        "jobs[0].except_on",
        (7, 16),
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
    error_at(
        &format!(
            "calendars:\n  big: {{dates: [{}]}}\njobs: []\n",
            dates.join(", ")
        ),
        "calendars.big",
        (2, 8),
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
    warning_in(
        &c,
        "jobs[0].jitter_seconds",
        (5, 21),
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

//! The jobs file's limits: every number's bounds, the YAML structure limits and the
//! size-capped read. Each test asserts the message *and* the `line:column`.

use std::path::Path;

use super::super::*;
use super::check;

/// The single diagnostic with this key, asserted at `line:column` and containing `needle`.
fn expect(text: &str, key: &str, line: usize, column: usize, needle: &str) {
    let c = check(text);
    let found: Vec<&Diagnostic> = c.diagnostics.iter().filter(|d| d.key == key).collect();
    assert_eq!(
        found.len(),
        1,
        "one diagnostic for {key} in {text:?}: {found:#?}"
    );
    let d = found[0];
    assert_eq!(
        (d.line, d.column, d.severity),
        (line, column, Severity::Error),
        "{d}"
    );
    assert!(d.message.contains(needle), "{d}\nshould contain {needle:?}");
    assert!(c.into_result().is_err());
}

fn every(n: &str) -> String {
    format!(
        "jobs:\n  - name: a\n    schedule: {{kind: every, every_seconds: {n}}}\n    command: x\n"
    )
}

fn job(line: &str) -> String {
    format!("jobs:\n  - name: a\n    schedule: every 5m\n    command: x\n    {line}\n")
}

const INTERVAL: &str = "expected a whole number from 1 to 3162240000 (100 years), found";

#[test]
fn absurd_intervals_are_refused_with_their_value() {
    for (n, found) in [
        ("18446744073709551615", "the number 18446744073709551615"),
        ("18446744073709551616", "the number 1.8446744073709552e19"),
        ("9223372036854775808", "the number 9223372036854775808"),
        ("9007199254740992", "the number 9007199254740992"),
        ("3162240001", "the number 3162240001"),
        ("0", "the number 0"),
        ("-60", "the number -60"),
        ("60.5", "the number 60.5"),
        ("1e3", "the number 1000"),
        (".inf", "the number .inf"),
        (".nan", "the number .nan"),
        ("\"60\"", "the string \"60\""),
        ("sixty", "the string \"sixty\""),
    ] {
        expect(
            &every(n),
            "jobs[0].schedule.every_seconds",
            3,
            44,
            &format!("{INTERVAL} {found}"),
        );
    }
    // The maximum itself is accepted, as is the string form's own cap.
    let c = check(&every("3162240000"));
    assert!(!c.has_errors(), "{:?}", c.diagnostics);
}

#[test]
fn leases_are_at_least_a_second() {
    let at = |v: &str, needle: &str| {
        expect(
            &job(&format!("lease_seconds: {v}")),
            "jobs[0].lease_seconds",
            5,
            20,
            needle,
        )
    };
    at("0.0001", "must be at least 1, found 0.0001");
    at("0.999", "must be at least 1, found 0.999");
    at("0", "must be at least 1, found 0");
    at("-1", "must be at least 1, found -1");
    at("604801", "must be at most 604800 (7 days), found 604801");
    at(
        ".inf",
        "expected a number from 1 to 604800 (7 days), found the number .inf",
    );
    at(
        ".nan",
        "expected a number from 1 to 604800 (7 days), found the number .nan",
    );
    at(
        "\"30\"",
        "expected a number from 1 to 604800 (7 days), found the string \"30\"",
    );
    assert!(!check(&job("lease_seconds: 1")).has_errors());
}

#[test]
fn timeouts_are_at_least_a_tenth_of_a_second() {
    expect(
        &job("timeout_seconds: 1e-300"),
        "jobs[0].timeout_seconds",
        5,
        22,
        "must be at least 0.1, found 1e-300",
    );
    expect(
        &job("command_timeout_seconds: 0"),
        "jobs[0].command_timeout_seconds",
        5,
        30,
        "must be at least 0.1, found 0",
    );
    expect(
        &job("timeout_seconds: -.inf"),
        "jobs[0].timeout_seconds",
        5,
        22,
        "found the number -.inf",
    );
    expect(
        "defaults:\n  lease_seconds: 0.5\njobs: []\n",
        "defaults.lease_seconds",
        2,
        18,
        "must be at least 1, found 0.5",
    );
    assert!(!check(&job("timeout_seconds: 0.1")).has_errors());
}

#[test]
fn counts_have_a_maximum() {
    for (line, key, col, needle) in [
        (
            "max_runs: 18446744073709551616",
            "jobs[0].max_runs",
            15,
            "expected a whole number from 1 to 1000000000, found the number 1.8446744073709552e19",
        ),
        (
            "max_runs: 1000000001",
            "jobs[0].max_runs",
            15,
            "from 1 to 1000000000, found the number 1000000001",
        ),
        (
            "max_retries: 101",
            "jobs[0].max_retries",
            18,
            "from 1 to 100, found the number 101",
        ),
        (
            "alert_after_failures: 4294967296",
            "jobs[0].alert_after_failures",
            27,
            "from 1 to 10000, found the number 4294967296",
        ),
        (
            "context_max_chars: 9223372036854775807",
            "jobs[0].context_max_chars",
            24,
            "from 1 to 1000000, found the number 9223372036854775807",
        ),
        (
            "max_cost_usd: 1e308",
            "jobs[0].max_cost_usd",
            19,
            "must be at most 1000000, found 1e308",
        ),
        (
            "max_cost_usd: .nan",
            "jobs[0].max_cost_usd",
            19,
            "expected a number from 0 to 1000000, found the number .nan",
        ),
    ] {
        expect(&job(line), key, 5, col, needle);
    }
}

#[test]
fn grace_windows_are_bounded_but_text_stays_a_warning() {
    for (v, found) in [
        (".inf", ".inf"),
        ("\"inf\"", ".inf"),
        ("1e12", "1000000000000"),
        ("-5", "-5"),
    ] {
        expect(
            &job(&format!("misfire_grace_seconds: {v}")),
            "jobs[0].misfire_grace_seconds",
            5,
            28,
            &format!("≥ 0 or null (at most 3162240000 (100 years)), found {found}"),
        );
    }
    let c = check(&job("misfire_grace_seconds: soon"));
    assert!(!c.has_errors(), "{:?}", c.diagnostics);
    assert_eq!(c.diagnostics[0].severity, Severity::Warning);
}

#[test]
fn settings_numbers_are_bounded() {
    expect(
        "budget: {max_cost_usd: .inf}\njobs: []\n",
        "budget.max_cost_usd",
        1,
        24,
        "found the number .inf",
    );
    expect(
        "pricing:\n  m: {input: .nan, output: 1}\njobs: []\n",
        "pricing.m.input",
        2,
        14,
        "expected a number from 0 to 1000000, found the number .nan",
    );
    expect(
        "agents:\n  bot: {model: m, max_tokens: 9007199254740993}\njobs: []\n",
        "agents.bot.max_tokens",
        2,
        31,
        "from 1 to 1000000, found the number 9007199254740993",
    );
    expect(
        "agents:\n  bot: {model: m, temperature: 2.5}\njobs: []\n",
        "agents.bot.temperature",
        2,
        32,
        "must be at most 2, found 2.5",
    );
}

#[test]
fn everything_validate_accepts_passes_check_bounds() {
    let text = "defaults: {lease_seconds: 1, timeout_seconds: 0.1}\n\
                budget: {max_cost_usd: 1000000}\n\
                agents: {bot: {model: m, max_tokens: 1000000, temperature: 2}}\n\
                jobs:\n\
                - {name: a, schedule: {kind: every, every_seconds: 3162240000}, agent: bot, \
                   max_runs: 1000000000, max_retries: 100, alert_after_failures: 10000, \
                   context_max_chars: 1000000, misfire_grace_seconds: 3162240000, \
                   max_cost_usd: 0}\n";
    let l = check(text).into_result().unwrap();
    assert_eq!(check_bounds(&l.file), Ok(()));
}

#[test]
fn pathological_nesting_is_refused_after_a_bounded_prefix() {
    let c = check(&"[".repeat(160_000));
    let d = &c.diagnostics[0];
    // Located where the parse stopped: at the first level too deep, or where the scanner's own
    // look-ahead (256 levels) gave up.
    assert_eq!((d.line, d.key.as_str()), (1, "(yaml)"), "{d}");
    assert!((129..=257).contains(&d.column), "{d}");
    assert_eq!(
        d.message,
        "invalid YAML: nesting deeper than 128 levels is not accepted"
    );
    let deep: String = (0..200)
        .map(|i| format!("{}-\n", " ".repeat(i * 2)))
        .collect();
    let c = check(&deep);
    assert!(
        c.diagnostics[0].message.contains("nesting deeper"),
        "{:?}",
        c.diagnostics
    );
    // 128 levels are accepted by the parser (the checks then reject the shape).
    let ok = format!("{}{}", "[".repeat(128), "]".repeat(128));
    let c = check(&ok);
    assert_ne!(c.diagnostics[0].key, "(yaml)", "{:?}", c.diagnostics);
}

#[test]
fn alias_bombs_and_recursive_aliases_are_refused() {
    let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
    let names: Vec<char> = ('b'..='j').collect();
    let mut prev = 'a';
    for n in &names {
        bomb.push_str(&format!(
            "{n}: &{n} [{}]\n",
            vec![format!("*{prev}"); 10].join(", ")
        ));
        prev = *n;
    }
    bomb.push_str("jobs: []\n");
    let c = check(&bomb);
    let d = &c.diagnostics[0];
    assert_eq!(d.key, "(yaml)");
    assert!(d.message.contains("alias bomb"), "{d}");

    let c = check("a: &a [1, *a]\njobs: []\n");
    let d = &c.diagnostics[0];
    assert!(d.message.contains("recursive aliases"), "{d}");
    assert_eq!((d.line, d.column), (1, 11), "{d}");

    // Aliases that add depth count towards the nesting limit.
    let deep = format!(
        "a: &a {}{}\nb: {}*a{}\njobs: []\n",
        "[".repeat(100),
        "]".repeat(100),
        "[".repeat(60),
        "]".repeat(60)
    );
    let c = check(&deep);
    assert!(
        c.diagnostics[0].message.contains("nesting deeper"),
        "{:?}",
        c.diagnostics
    );
}

#[test]
fn duplicate_keys_and_extra_documents_are_yaml_errors() {
    let c = check("jobs:\n  - name: a\n    schedule: every 5m\n    name: b\n    command: x\n");
    let d = &c.diagnostics[0];
    assert_eq!((d.line, d.column, d.key.as_str()), (4, 5, "(yaml)"), "{d}");
    assert!(
        d.message
            .contains("duplicate key \"name\" in one mapping (first at line 2 column 5)"),
        "{d}"
    );
    let c = check("jobs: []\n---\njobs: []\n");
    let d = &c.diagnostics[0];
    assert_eq!((d.line, d.key.as_str()), (2, "(yaml)"), "{d}");
    assert!(d.message.contains("one YAML document"), "{d}");
    let c = check("jobs: *nowhere\n");
    assert!(
        c.diagnostics[0].message.contains("unknown anchor"),
        "{:?}",
        c.diagnostics
    );
    let c = check("x: &s 5\njobs:\n  - <<: *s\n    name: a\n");
    let d = &c.diagnostics[0];
    assert!(d.message.contains("for merging"), "{d}");
    assert_eq!((d.line, d.column), (3, 9), "{d}");
}

#[test]
fn scalars_resolve_as_before() {
    let c = check(
        "jobs:\n  - name: a\n    schedule: {kind: every, every_seconds: 0x3c}\n    command: x\n    \
         max_retries: +2\n    context_max_chars: 0o17\n    enabled: False\n    tags: [0123, yes]\n",
    );
    assert!(!c.has_errors(), "{:?}", c.diagnostics);
    let j = c.jobs[0].clone().unwrap();
    assert_eq!(
        j.schedule,
        crate::schedule::ScheduleSpec::Every { every_seconds: 60 }
    );
    assert_eq!(
        (j.max_retries, j.context_max_chars, j.enabled),
        (2, 15, false)
    );
    // `0123` is text (a leading zero), `yes` is text (YAML 1.2); `~` is null, not a name.
    let c = check("jobs:\n  - {name: a, schedule: every 5m, command: x, tags: [~]}\n");
    assert!(c.has_errors());
    let c =
        check("jobs:\n  - {name: a, schedule: every 5m, command: x, tags: [0123, yes, !!str 5]}\n");
    assert!(!c.has_errors(), "{:?}", c.diagnostics);
    assert_eq!(c.jobs[0].as_ref().unwrap().tags, vec!["0123", "yes", "5"]);
    let c = check("jobs:\n  - {name: a, schedule: every 5m, command: !secret x}\n");
    let d = c
        .diagnostics
        .iter()
        .find(|d| d.key == "jobs[0].command")
        .unwrap();
    assert!(d.message.contains("a tagged value"), "{d}");
}

mod reading {
    use super::*;
    use crate::config::read::read_text_capped;

    fn tmp(tag: &str) -> crate::testkit::tmp::TempDir {
        crate::testkit::tmp::TempDir::new(&format!("config-{tag}"))
    }

    #[test]
    fn a_directory_a_fifo_and_a_device_are_refused_before_reading() {
        let d = tmp("kinds");
        let e = read_text_capped(&d, 1024).unwrap_err();
        assert!(e.message.contains("is a directory"), "{e}");
        let fifo = d.join("fifo");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        // Opening a FIFO without a writer would block: it must not be opened at all.
        let e = read_text_capped(&fifo, 1024).unwrap_err();
        assert!(e.message.contains("is a FIFO"), "{e}");
        let e = read_text_capped(Path::new("/dev/zero"), 1024).unwrap_err();
        assert!(e.message.contains("is a device"), "{e}");
        assert_eq!((e.line, e.column, e.key.as_str()), (1, 1, "(file)"));
    }

    #[test]
    fn the_cap_is_inclusive_and_names_the_variable() {
        let d = tmp("cap");
        let f = d.join("jobs.yaml");
        std::fs::write(&f, "jobs: []\n").unwrap();
        assert_eq!(read_text_capped(&f, 9).unwrap(), "jobs: []\n");
        let e = read_text_capped(&f, 8).unwrap_err();
        assert!(
            e.message
                .contains("is 9 bytes, more than the jobs-file cap of 8 bytes (raise it with CRONSOLE_MAX_JOBS_FILE_BYTES)"),
            "{e}"
        );
    }

    #[test]
    fn invalid_utf8_is_located() {
        let d = tmp("utf8");
        let f = d.join("jobs.yaml");
        std::fs::write(&f, b"jobs:\n  - name: \xff\n").unwrap();
        let e = read_text_capped(&f, 1024).unwrap_err();
        assert_eq!((e.line, e.column), (2, 11), "{e}");
        assert!(e.message.contains("not valid UTF-8"), "{e}");
    }
}

#[test]
fn big_mappings_are_indexed_for_duplicates_and_positions() {
    // More keys than the scan threshold: every unknown key is located at its own line.
    let mut text = String::from("jobs:\n  - name: a\n    schedule: every 5m\n    command: x\n");
    for i in 0..40 {
        text.push_str(&format!("    k{i}: 1\n"));
    }
    let c = check(&text);
    for i in 0..40 {
        let d = c
            .diagnostics
            .iter()
            .find(|d| d.key == format!("jobs[0].k{i}"))
            .unwrap();
        assert_eq!((d.line, d.column), (5 + i, 5), "{d}");
    }
    text.push_str("    k7: 2\n");
    let d = &check(&text).diagnostics[0];
    assert_eq!((d.line, d.column, d.key.as_str()), (45, 5, "(yaml)"), "{d}");
    assert!(
        d.message
            .contains("duplicate key \"k7\" in one mapping (first at line 12 column 5)"),
        "{d}"
    );
}

/// A command that can never be executed is refused where it is written — a NUL
/// byte (the process would run the text before it) or more than the kernel's one-argument
/// limit (every run would fail "Argument list too long" and store the whole text per row).
#[test]
fn a_command_exec_cannot_run_is_refused_at_its_key() {
    let text = "jobs:\n  - name: a\n    schedule: every 5m\n    command: \"echo a\\0b\"\n";
    expect(text, "jobs[0].command", 4, 14, "NUL character (at byte 6)");
    let text =
        "jobs:\n  - name: a\n    schedule: every 5m\n    command: x\n    pre_run: \"t\\0\"\n";
    expect(text, "jobs[0].pre_run", 5, 14, "NUL character");
    let long = "x".repeat(131_072);
    let text = format!("jobs:\n  - name: a\n    schedule: every 5m\n    command: {long}\n");
    expect(&text, "jobs[0].command", 4, 14, "at most 131071 bytes");
    // The limit itself is accepted.
    let ok = "x".repeat(131_071);
    let text = format!("jobs:\n  - name: a\n    schedule: every 5m\n    command: {ok}\n");
    assert!(check(&text).into_result().is_ok());
    let text = "jobs:\n  - name: a\n    schedule: every 5m\n    monitor: {command: \"df\\0\"}\n    command: x\n";
    let c = check(text);
    assert!(
        c.diagnostics
            .iter()
            .any(|d| d.key == "jobs[0].monitor.command" && d.message.contains("NUL")),
        "{:#?}",
        c.diagnostics
    );
}

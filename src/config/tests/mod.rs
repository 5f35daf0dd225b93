//! The jobs-file checker's tests. Here, one test per error class: each asserts the message
//! *and* the `line:column`; the modules below take one part of the file each (`after:` chains,
//! the whole-file flow, bounds, `overlap:`, the streaming check of large files, tool sources).

use std::path::Path;

use super::*;
use crate::model::{Action, BudgetPeriod, Gate, MonitorSource, Provider, SinkDef};
use crate::schedule::ScheduleSpec;

mod after;
mod flow;
mod limits;
mod overlap;
mod reference;
mod stream;
mod tools;

/// The jobs file `text` checked as `jobs.yaml`, every environment variable set (shared by the
/// modules below).
pub(super) fn check(text: &str) -> Checked {
    check_str_with_env(text, Path::new("jobs.yaml"), &|_| true)
}

fn check_env(text: &str, set: &'static [&'static str]) -> Checked {
    check_str_with_env(text, Path::new("jobs.yaml"), &|n| set.contains(&n))
}

/// The single diagnostic with this key (panics listing all diagnostics otherwise).
#[track_caller]
pub(super) fn diag<'c>(c: &'c Checked, key: &str) -> &'c Diagnostic {
    let found: Vec<&Diagnostic> = c.diagnostics.iter().filter(|d| d.key == key).collect();
    assert_eq!(
        found.len(),
        1,
        "expected one diagnostic for {key}, got: {:#?}",
        c.diagnostics
    );
    found[0]
}

#[track_caller]
pub(super) fn assert_at(
    d: &Diagnostic,
    line: usize,
    column: usize,
    severity: Severity,
    needle: &str,
) {
    assert_eq!(
        (d.line, d.column, d.severity),
        (line, column, severity),
        "position/severity of {d}"
    );
    assert!(
        d.message.contains(needle),
        "{d:?} should mention {needle:?}"
    );
}

/// `text` checked: its one diagnostic at `key` is an error at `(line, column)` that mentions
/// `needle`. The check is returned for a further look at it.
#[track_caller]
pub(super) fn error_at(text: &str, key: &str, at: (usize, usize), needle: &str) -> Checked {
    let c = check(text);
    error_in(&c, key, at, needle);
    c
}

/// As [`error_at`], for a warning.
#[track_caller]
pub(super) fn warning_at(text: &str, key: &str, at: (usize, usize), needle: &str) -> Checked {
    let c = check(text);
    warning_in(&c, key, at, needle);
    c
}

/// The one diagnostic of `c` at `key`, asserted an error at `(line, column)` that mentions
/// `needle`.
#[track_caller]
pub(super) fn error_in<'c>(
    c: &'c Checked,
    key: &str,
    (line, column): (usize, usize),
    needle: &str,
) -> &'c Diagnostic {
    let d = diag(c, key);
    assert_at(d, line, column, Severity::Error, needle);
    d
}

/// As [`error_in`], for a warning.
#[track_caller]
pub(super) fn warning_in<'c>(
    c: &'c Checked,
    key: &str,
    (line, column): (usize, usize),
    needle: &str,
) -> &'c Diagnostic {
    let d = diag(c, key);
    assert_at(d, line, column, Severity::Warning, needle);
    d
}

/// Every error of `c` as `(key, line, column, message)`, in file order.
pub(super) fn errors(c: &Checked) -> Vec<(String, usize, usize, String)> {
    c.diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| (d.key.clone(), d.line, d.column, d.message.clone()))
        .collect()
}

const EVERY: &str = "{kind: every, every_seconds: 60}";

fn one_job(body: &str) -> String {
    format!("jobs:\n  - name: a\n    schedule: {EVERY}\n{body}")
}

#[test]
fn a_minimal_command_job_gets_every_default() {
    let c = check(&one_job("    command: echo hi\n"));
    assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
    let l = c.into_result().unwrap();
    let j = &l.file.jobs[0];
    assert_eq!(j.name, "a");
    assert_eq!(j.schedule, ScheduleSpec::Every { every_seconds: 60 });
    assert_eq!(j.schedule_text, "every 60s");
    assert_eq!(j.tz, "UTC");
    assert_eq!(
        j.action,
        Action::Command {
            command: "echo hi".into(),
            timeout_seconds: 60.0
        }
    );
    assert_eq!(j.gate, None);
    assert_eq!(j.timeout_seconds, 300.0);
    assert_eq!(j.max_retries, 3);
    assert_eq!(j.lease_seconds, 30.0);
    assert_eq!(j.misfire_grace_seconds, None);
    assert_eq!(j.context_max_chars, 4000);
    assert_eq!(j.alert_after_failures, 1);
    assert_eq!(j.max_runs, None);
    assert!(j.enabled && !j.run_immediately);
    let b = l.file.settings.budget.unwrap();
    assert_eq!((b.max_cost_usd, b.period), (1.0, BudgetPeriod::Day));
}

/// `defaults.run_immediately` reaches every scheduled job without its own key, not a job that
/// only runs `after:` another (it has no schedule to start early); a job's own key wins, except
/// on a job with only `after:`, where it is ignored with a warning at the key: a run when first
/// stored would spend the job's only scheduled slot and retire it before its parents finish.
#[test]
fn defaults_run_immediately_reaches_scheduled_jobs_only() {
    let text = "defaults: { run_immediately: true }\njobs:\n  \
                - { name: a, schedule: every 1h, command: 'true' }\n  \
                - { name: b, schedule: every 1h, command: 'true', run_immediately: false }\n  \
                - { name: c, after: { job: a }, command: 'true' }\n  \
                - { name: d, after: { job: a }, command: 'true', run_immediately: true }\n";
    let c = check(text);
    assert_eq!(c.diagnostics.len(), 1, "{:#?}", c.diagnostics);
    warning_in(
        &c,
        "jobs[3].run_immediately",
        (6, 69),
        "ignored on a job with only `after:`",
    );
    let l = c.into_result().unwrap();
    let imm: Vec<(&str, bool)> = l
        .file
        .jobs
        .iter()
        .map(|j| (j.name.as_str(), j.run_immediately))
        .collect();
    assert_eq!(imm, [("a", true), ("b", false), ("c", false), ("d", false)]);
}

/// A one-shot job with its own `run_immediately` runs twice (when first stored and at its
/// time); the file loads, with a warning at the key that says so.
#[test]
fn run_immediately_on_a_one_shot_job_is_warned_about() {
    let text = "jobs:\n  - { name: a, schedule: in 10m, command: 'true', run_immediately: true }\n";
    let c = check(text);
    assert_eq!(c.diagnostics.len(), 1, "{:#?}", c.diagnostics);
    warning_in(&c, "jobs[0].run_immediately", (2, 68), "runs twice");
    assert!(c.into_result().unwrap().file.jobs[0].run_immediately);
}

#[test]
fn the_spec_example_validates_with_its_values() {
    let text = r#"
defaults:
  tz: Europe/Berlin
  timeout_seconds: 120
  max_retries: 2
  misfire_grace_seconds: 30
  lease_seconds: 10
budget:
  max_cost_usd: 2.50
  period: week
pricing:
  my-model: { input: 0.20, output: 0.60 }
agents:
  summariser:
    provider: openai
    base_url: http://localhost:11434/v1/
    api_key_env: OLLAMA_KEY
    model: gpt-4o-mini
    instructions: "Summarise what changed. Be brief."
    max_tokens: 800
    temperature: 0.2
  claude: { provider: anthropic, model: claude-3-5-haiku-latest }
delivery:
  ops-slack: { webhook: "https://hooks.slack.com/services/T/B/X", format: slack }
  log: { file: /tmp/out.jsonl }
jobs:
  - name: disk-watch
    schedule: {kind: every, every_seconds: 300}
    monitor: { command: "df -h /" }
    agent: summariser
    message: "Explain the change."
    deliver: [ops-slack, log]
    once: true
  - name: web
    schedule: {kind: every, every_seconds: 60, tz: America/New_York}
    monitor: {url: "http://127.0.0.1:8080/x", allow_private: true}
    command: cat
    misfire_grace_seconds: null
    until: 2030-01-01T00:00:00Z
  - name: brief
    schedule: {kind: every, every_seconds: 3600}
    agent: claude
    pre_run: "test -f /tmp/go"
    context_from: [disk-watch, web]
    on_missing_context: skip
    max_cost_usd: 0.20
    enabled: false
    x-notes: {anything: [goes, here]}
"#;
    let c = check(text);
    assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
    let f = c.into_result().unwrap().file;
    let s = &f.settings;
    assert_eq!(s.budget.unwrap().max_cost_usd, 2.5);
    assert_eq!(s.period, BudgetPeriod::Week);
    assert_eq!(s.pricing["my-model"].output, 0.6);
    let a = &s.agents["summariser"];
    assert_eq!(a.base_url, "http://localhost:11434/v1");
    assert_eq!(a.api_key_env, "OLLAMA_KEY");
    assert_eq!((a.max_tokens, a.temperature), (Some(800), Some(0.2)));
    let cl = &s.agents["claude"];
    assert_eq!(cl.provider, Provider::Anthropic);
    assert_eq!(
        cl.base_url, "",
        "absent base_url = provider default (or env) at run time"
    );
    assert_eq!(cl.api_key_env, "ANTHROPIC_API_KEY");
    assert!(matches!(s.delivery["log"], SinkDef::File { .. }));
    let [dw, web, brief] = &f.jobs[..] else {
        panic!("three jobs expected")
    };
    assert_eq!(dw.tz, "Europe/Berlin");
    assert_eq!(dw.max_runs, Some(1));
    assert_eq!(dw.misfire_grace_seconds, Some(30.0));
    assert_eq!(
        (dw.timeout_seconds, dw.max_retries, dw.lease_seconds),
        (120.0, 2, 10.0)
    );
    assert_eq!(dw.deliver, vec!["ops-slack", "log"]);
    assert!(matches!(
        &dw.gate,
        Some(Gate::Monitor {
            source: MonitorSource::Command { .. }
        })
    ));
    assert_eq!(web.tz, "America/New_York");
    assert_eq!(web.misfire_grace_seconds, None);
    assert_eq!(web.until.unwrap().to_rfc3339(), "2030-01-01T00:00:00+00:00");
    assert!(matches!(
        &web.gate,
        Some(Gate::Monitor {
            source: MonitorSource::Url {
                allow_private: true,
                ..
            }
        })
    ));
    assert_eq!(brief.context_from, vec!["disk-watch", "web"]);
    assert_eq!(
        brief.on_missing_context,
        crate::model::OnMissingContext::Skip
    );
    assert_eq!(brief.max_cost_usd, Some(0.2));
    assert!(!brief.enabled);
    assert!(matches!(&brief.gate, Some(Gate::PreRun { .. })));
}

#[test]
fn yaml_syntax_error_is_located() {
    let c = check("jobs:\n  - name: a\n    schedule: [oops\n");
    let d = diag(&c, "(yaml)");
    assert_eq!(d.severity, Severity::Error);
    assert!(d.message.starts_with("invalid YAML"), "{d}");
    assert_eq!(d.line, 4, "{d}");
    let c = check("jobs:\n  - name: a\n   bad: indent\n");
    let d = diag(&c, "(yaml)");
    assert_eq!((d.line, d.column), (3, 4), "{d}");
}

#[test]
fn unknown_key_is_located_at_the_key() {
    error_at(
        &one_job("    command: x\n    colour: red\n"),
        "jobs[0].colour",
        (5, 5),
        "unknown key \"colour\"",
    );
    let c = check("jobz: []\n");
    error_in(&c, "jobz", (1, 1), "did you mean 'jobs'?");
}

#[test]
fn typoed_policy_key_is_an_error_with_a_suggestion() {
    let c = check(&one_job("    command: x\n    misfire_grace_second: 600\n"));
    let d = error_in(
        &c,
        "jobs[0].misfire_grace_second",
        (5, 5),
        "did you mean 'misfire_grace_seconds'?",
    );
    assert!(d.message.contains("accepted keys here"), "{d}");
    assert!(c.into_result().is_err());
}

#[test]
fn x_keys_are_ignored_anywhere() {
    // A priced model (an unpriced one under the default budget is a warning).
    let text = "x-anchors: &a {foo: 1}\nagents:\n  x-draft: {nonsense: true}\n  bot: {model: o3, x-note: hi}\n\
         jobs:\n  - name: a\n    schedule: {kind: every, every_seconds: 5, x-why: because}\n    agent: bot\n    x-owner: me\n";
    let c = check(text);
    assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
    assert_eq!(c.into_result().unwrap().file.settings.agents.len(), 1);
}

#[test]
fn duplicate_name_points_at_the_second() {
    let text = format!(
        "jobs:\n  - {{name: a, schedule: {EVERY}, command: x}}\n  - {{name: a, schedule: {EVERY}, command: y}}\n"
    );
    let c = error_at(
        &text,
        "jobs[1].name",
        (3, 12),
        "duplicate job name 'a': jobs[0] already uses it",
    );
    assert_eq!(c.jobs.iter().flatten().count(), 1);
}

#[test]
fn invalid_name_is_rejected() {
    let text = format!("jobs:\n  - name: \"has space\"\n    schedule: {EVERY}\n    command: x\n");
    error_at(
        &text,
        "jobs[0].name",
        (2, 11),
        "invalid job name \"has space\": use 1–64 characters from A-Z a-z 0-9 . _ -",
    );
    let long = "a".repeat(65);
    error_at(
        &format!("jobs:\n  - name: {long}\n    schedule: {EVERY}\n    command: x\n"),
        "jobs[0].name",
        (2, 11),
        "invalid job name",
    );
}

/// Tags are printed by `jobs`, `describe` and the console: control, bidi and invisible characters
/// are refused at the tag (they could disguise what a listing shows), plain text of any other kind
/// is kept.
#[test]
fn tags_with_control_or_bidi_characters_are_rejected() {
    let c = error_at(
        &one_job(
            "    command: x\n    tags: [ok, \"a\\e]0;t\\ab\", \"x\\u202Ey\", \"caf\u{e9} ops\"]\n",
        ),
        "jobs[0].tags[1]",
        (5, 16),
        "invalid tag \"a\\u{1b}]0;t\\u{7}b\": control, bidirectional and invisible",
    );
    error_in(&c, "jobs[0].tags[2]", (5, 30), "invalid tag");
    assert_eq!(c.diagnostics.len(), 2, "{:#?}", c.diagnostics);
    let c = check(&one_job(
        "    command: x\n    tags: [ok, \"caf\u{e9} ops\"]\n",
    ));
    assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
    assert_eq!(
        c.jobs[0].as_ref().unwrap().tags,
        vec!["ok", "caf\u{e9} ops"]
    );
}

#[test]
fn missing_name_and_schedule_point_at_the_job() {
    let c = check("jobs:\n  - command: x\n");
    let msgs: Vec<String> = c.diagnostics.iter().map(|d| d.to_string()).collect();
    assert!(
        msgs.contains(&"jobs.yaml:2:5: error: jobs[0]: missing required key `name`".to_string()),
        "{msgs:#?}"
    );
    assert!(
        msgs.iter().any(
            |m| m.starts_with("jobs.yaml:2:5: error: jobs[0]: missing required key `schedule`")
        ),
        "{msgs:#?}"
    );
}

#[test]
fn unknown_agent_lists_the_defined_ones() {
    let text = format!(
        "agents:\n  bot: {{model: m}}\njobs:\n  - name: a\n    schedule: {EVERY}\n    agent: bto\n"
    );
    error_at(
        &text,
        "jobs[0].agent",
        (6, 12),
        "unknown agent \"bto\"; defined agents: bot",
    );
    error_at(
        &one_job("    agent: ghost\n"),
        "jobs[0].agent",
        (4, 12),
        "no agents are defined",
    );
}

#[test]
fn unknown_sink_is_located_at_the_list_item() {
    let text = format!(
        "delivery:\n  ops: {{file: /tmp/x}}\njobs:\n  - name: a\n    schedule: {EVERY}\n    command: x\n    deliver: [ops, opz]\n"
    );
    error_at(
        &text,
        "jobs[0].deliver[1]",
        (7, 20),
        "unknown sink \"opz\"; defined sinks: ops",
    );
}

#[test]
fn unknown_context_from_job() {
    let text = format!(
        "jobs:\n  - name: a\n    schedule: {EVERY}\n    command: x\n    context_from:\n      - a\n      - nope\n"
    );
    error_at(
        &text,
        "jobs[0].context_from[1]",
        (7, 9),
        "unknown job \"nope\" in context_from; jobs in this file: a",
    );
}

#[test]
fn agent_and_command_together_names_both() {
    let text = format!(
        "agents:\n  bot: {{model: m}}\njobs:\n  - name: a\n    schedule: {EVERY}\n    agent: bot\n    command: x\n"
    );
    let c = check(&text);
    error_in(
        &c,
        "jobs[0].command",
        (7, 5),
        "`agent` and `command` are mutually exclusive",
    );
}

#[test]
fn neither_agent_nor_command() {
    let c = check(&one_job("    message: hi\n"));
    // A message asks an agent: the key to add is named.
    error_in(
        &c,
        "jobs[0]",
        (2, 5),
        "missing `agent`: a job with a message asks an agent: add `agent: NAME`",
    );
    let c = check(&one_job("    pre_run: \"true\"\n"));
    error_in(&c, "jobs[0]", (2, 5), "missing `agent` or `command`");
}

#[test]
fn monitor_and_pre_run_together_names_both() {
    let c = check(&one_job(
        "    command: x\n    monitor: {command: date}\n    pre_run: \"true\"\n",
    ));
    error_in(
        &c,
        "jobs[0].pre_run",
        (6, 5),
        "`monitor` and `pre_run` are mutually exclusive",
    );
}

#[test]
fn bad_numbers_say_what_is_accepted() {
    let c = error_at(
        &one_job(
            "    command: x\n    timeout_seconds: soon\n    max_runs: 0\n    max_retries: 1.5\n    context_max_chars: -3\n",
        ),
        "jobs[0].timeout_seconds",
        (5, 22),
        // The message names the whole range, so the operator sees both bounds at once.
        "expected a number from 0.1 to 604800 (7 days), found the string \"soon\"",
    );
    // Counts have a maximum too, so no count overflows where it is summed.
    error_in(
        &c,
        "jobs[0].max_runs",
        (6, 15),
        "expected a whole number from 1 to 1000000000, found the number 0",
    );
    error_in(
        &c,
        "jobs[0].max_retries",
        (7, 18),
        "expected a whole number from 1 to 100, found the number 1.5",
    );
    error_in(
        &c,
        "jobs[0].context_max_chars",
        (8, 24),
        "found the number -3",
    );
}

#[test]
fn bad_time_zone_in_defaults_and_in_a_schedule() {
    error_at(
        "defaults:\n  tz: Mars/Olympus\njobs: []\n",
        "defaults.tz",
        (2, 7),
        "unknown time zone 'Mars/Olympus'",
    );
    error_at(
        "jobs:\n  - name: a\n    schedule: {kind: every, every_seconds: 5, tz: Europe/Berln}\n    command: x\n",
        "jobs[0].schedule.tz",
        (3, 51),
        "unknown time zone 'Europe/Berln'",
    );
}

#[test]
fn bad_schedule_mapping() {
    // Intervals are capped at 100 years, so every slot is a representable instant.
    error_at(
        "jobs:\n  - name: a\n    schedule: {kind: every, every_seconds: 0}\n    command: x\n",
        "jobs[0].schedule.every_seconds",
        (3, 44),
        "expected a whole number from 1 to 3162240000 (100 years), found the number 0",
    );
    error_at(
        "jobs:\n  - name: a\n    schedule: {kind: weekly}\n    command: x\n",
        "jobs[0].schedule.kind",
        (3, 22),
        "unknown schedule kind \"weekly\": use every, cron or at",
    );
    error_at(
        "jobs:\n  - name: a\n    schedule: {kind: cron}\n    command: x\n",
        "jobs[0].schedule",
        (3, 15),
        "missing required key `cron_expr` for `kind: cron`",
    );
    error_at(
        "jobs:\n  - name: a\n    schedule: {kind: every, every_seconds: 5, cron_expr: x}\n    command: x\n",
        "jobs[0].schedule.cron_expr",
        (3, 47),
        "`cron_expr` does not apply to `kind: every`",
    );
    error_at(
        "jobs:\n  - name: a\n    schedule: [every 5m]\n    command: x\n",
        "jobs[0].schedule",
        (3, 15),
        "expected schedule text",
    );
}

#[test]
fn grace_numeric_string_is_accepted() {
    let c = check(&one_job(
        "    command: x\n    misfire_grace_seconds: \"600\"\n",
    ));
    assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
    let f = c.into_result().unwrap().file;
    assert_eq!(f.jobs[0].misfire_grace_seconds, Some(600.0));
}

#[test]
fn grace_junk_is_a_warning_and_means_null() {
    let text = "defaults:\n  misfire_grace_seconds: 90\njobs:\n  - name: a\n    schedule: {kind: every, every_seconds: 60}\n    command: x\n    misfire_grace_seconds: notanumber\n";
    let c = check(text);
    assert!(!c.has_errors());
    warning_in(
        &c,
        "jobs[0].misfire_grace_seconds",
        (7, 28),
        "treated as null",
    );
    let l = c.into_result().unwrap();
    assert_eq!(l.warnings.len(), 1);
    assert_eq!(l.file.jobs[0].misfire_grace_seconds, None);
    error_at(
        &one_job("    command: x\n    misfire_grace_seconds: -5\n"),
        "jobs[0].misfire_grace_seconds",
        (5, 28),
        "≥ 0 or null",
    );
}

#[test]
fn grace_from_defaults_is_inherited_and_null_overrides_it() {
    let text = "defaults:\n  misfire_grace_seconds: \"90\"\njobs:\n  - {name: a, schedule: {kind: every, every_seconds: 60}, command: x}\n  - {name: b, schedule: {kind: every, every_seconds: 60}, command: x, misfire_grace_seconds: null}\n";
    let f = check(text).into_result().unwrap().file;
    assert_eq!(f.jobs[0].misfire_grace_seconds, Some(90.0));
    assert_eq!(f.jobs[1].misfire_grace_seconds, None);
}

#[test]
fn budget_forms() {
    let f = check("budget: null\njobs: []\n")
        .into_result()
        .unwrap()
        .file;
    assert_eq!(f.settings.budget, None);
    let f = check("budget: {max_cost_usd: null, period: month}\njobs: []\n")
        .into_result()
        .unwrap()
        .file;
    assert_eq!(
        (f.settings.budget, f.settings.period),
        (None, BudgetPeriod::Month)
    );
    let c = error_at(
        "budget:\n  max_cost_usd: -1\n  period: fortnight\njobs: []\n",
        "budget.max_cost_usd",
        (2, 17),
        "at least 0",
    );
    error_in(
        &c,
        "budget.period",
        (3, 11),
        "use day, week, month or total",
    );
}

#[test]
fn missing_api_key_env_is_a_warning_that_never_shows_a_value() {
    let text = format!(
        "agents:\n  bot: {{model: o3, api_key_env: MY_KEY}}\n  idle: {{model: m, api_key_env: UNUSED_KEY}}\njobs:\n  - name: a\n    schedule: {EVERY}\n    agent: bot\n"
    );
    // (`bot` names a priced model; an unpriced one under the default budget warns.)
    let c = check_env(&text, &[]);
    assert!(!c.has_errors(), "{:#?}", c.diagnostics);
    assert_eq!(
        c.diagnostics.len(),
        1,
        "only the used agent: {:#?}",
        c.diagnostics
    );
    warning_in(
        &c,
        "agents.bot.api_key_env",
        (2, 33),
        "environment variable MY_KEY is not set",
    );
    assert!(check_env(&text, &["MY_KEY"]).diagnostics.is_empty());
    // A key pasted where the variable name belongs is an error that does not echo it.
    let c = check("agents:\n  bot: {model: m, api_key_env: \"sk-secret-123\"}\njobs: []\n");
    let d = error_in(
        &c,
        "agents.bot.api_key_env",
        (2, 32),
        "name* of an environment variable",
    );
    assert!(!d.to_string().contains("sk-secret"), "{d}");
}

#[test]
fn bad_until_is_an_error() {
    let c = check(&one_job("    command: x\n    until: next tuesday\n"));
    let d = diag(&c, "jobs[0].until");
    assert_eq!(
        (d.line, d.column, d.severity),
        (5, 12, Severity::Error),
        "{d}"
    );
    assert!(
        d.message.contains("next tuesday") && d.message.contains("RFC 3339"),
        "{d}"
    );
}

#[test]
fn once_and_conflicting_max_runs() {
    error_at(
        &one_job("    command: x\n    once: true\n    max_runs: 3\n"),
        "jobs[0].once",
        (5, 5),
        "`once: true` means `max_runs: 1`, but `max_runs` is 3",
    );
    let f = check(&one_job("    command: x\n    max_runs: 4\n"))
        .into_result()
        .unwrap()
        .file;
    assert_eq!(f.jobs[0].max_runs, Some(4));
}

#[test]
fn sinks_and_monitors_are_checked() {
    let c = check(
        "delivery:\n  a: {webhook: \"ftp://tok@x\"}\n  b: {file: /x, format: slack}\n  c: {}\njobs: []\n",
    );
    let d = error_in(
        &c,
        "delivery.a.webhook",
        (2, 16),
        "unsupported URL scheme 'ftp'",
    );
    assert!(!d.message.contains("tok"), "URLs are not echoed: {d}");
    error_in(&c, "delivery.b.format", (3, 25), "`webhook` sinks only");
    error_in(
        &c,
        "delivery.c",
        (4, 6),
        "needs `webhook: URL` or `file: PATH`",
    );
    error_at(
        &one_job("    command: x\n    monitor: {url: \"https://u:p@h/\", command: y}\n"),
        "jobs[0].monitor.url",
        (5, 15),
        "`command` and `url` are mutually exclusive",
    );
}

/// A URL monitor the probe always refuses is told at validate, where the run would only fail
/// each slot: a private or loopback literal (any spelling the URL parser reads as one) is an
/// error at the URL, a `localhost` name a warning; `allow_private: true` and public hosts pass.
#[test]
fn a_monitor_url_the_probe_refuses_is_told_at_validate() {
    for (url, why) in [
        ("http://127.0.0.1:8080/x", "127.0.0.1 is loopback (127/8)"),
        ("http://2130706433/x", "127.0.0.1 is loopback (127/8)"),
        ("http://[::1]/x", "::1 is loopback"),
        ("https://10.1.2.3/x", "10.1.2.3 is private (RFC 1918, 10/8)"),
        ("http://169.254.169.254/latest", "link-local"),
    ] {
        let c = check(&one_job(&format!(
            "    command: x\n    monitor: {{url: \"{url}\"}}\n"
        )));
        let d = error_in(&c, "jobs[0].monitor.url", (5, 20), why);
        assert!(d.message.contains("allow_private: true"), "{d}");
    }
    let c = check(&one_job(
        "    command: x\n    monitor: {url: \"http://LocalHost.:9/x\"}\n",
    ));
    warning_in(
        &c,
        "jobs[0].monitor.url",
        (5, 20),
        "'localhost' resolves to loopback",
    );
    for ok in [
        "{url: \"http://127.0.0.1:8080/x\", allow_private: true}",
        "{url: \"https://example.com/x\"}",
        "{url: \"http://93.184.215.14/x\"}",
    ] {
        let c = check(&one_job(&format!("    command: x\n    monitor: {ok}\n")));
        assert!(c.diagnostics.is_empty(), "{ok}: {:#?}", c.diagnostics);
    }
}

#[test]
fn document_shape_errors() {
    error_at("", "(document)", (1, 1), "the jobs file is empty");
    error_at("- a\n- b\n", "(document)", (1, 1), "found a list");
    error_at(
        "defaults: {}\n",
        "(document)",
        (1, 1),
        "missing required key `jobs`",
    );
    error_at(
        "jobs: {name: a}\n",
        "jobs",
        (1, 7),
        "expected a list of jobs",
    );
    error_at(
        "jobs:\n  - just-a-string\n",
        "jobs[0]",
        (2, 5),
        "expected a job (a mapping)",
    );
}

#[test]
fn several_errors_are_all_reported_in_file_order() {
    let text = "\
defaults:
  tz: Nowhere/City
agents:
  bot: {model: m, temprature: 0.3}
jobs:
  - name: one
    schedule: {kind: every, every_seconds: 60}
    agent: nobody
  - name: one
    schedule: {kind: every, every_seconds: 60}
    command: x
    deliver: [missing]
  - name: ok
    schedule: {kind: every, every_seconds: 60, tz: UTC}
    command: fine
  - name: inherits-the-bad-zone
    schedule: {kind: every, every_seconds: 60}
    command: fine
";
    let c = check(text);
    let got: Vec<(usize, usize, &str)> = c
        .diagnostics
        .iter()
        .map(|d| (d.line, d.column, d.key.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            (2, 7, "defaults.tz"),
            (4, 19, "agents.bot.temprature"),
            (8, 12, "jobs[0].agent"),
            (9, 11, "jobs[1].name"),
            (12, 15, "jobs[1].deliver[0]"),
        ],
        "{:#?}",
        c.diagnostics
    );
    let valid: Vec<&str> = c.jobs.iter().flatten().map(|j| j.name.as_str()).collect();
    assert_eq!(valid, vec!["ok"]);
    let err = c.into_result().unwrap_err();
    assert!(err.to_string().starts_with("5 error(s) in the jobs file"));
}

#[test]
fn merge_keys_apply_and_unlocatable_paths_fall_back() {
    let text = "x-base: &base\n  command: x\n  colour: red\njobs:\n  - <<: *base\n    name: a\n    schedule: {kind: every, every_seconds: 60}\n";
    let c = check(text);
    // `colour` only exists inside the anchor; the job item is the nearest located node.
    error_in(&c, "jobs[0].colour", (5, 5), "unknown key");
}

#[test]
fn load_file_names_an_unreadable_file() {
    let err = load_file(Path::new("/nonexistent/dir/jobs.yaml")).unwrap_err();
    let d = &err.diagnostics[0];
    assert!(
        d.to_string()
            .starts_with("/nonexistent/dir/jobs.yaml:1:1: error: (file): cannot read")
    );
}

mod props {
    use super::*;
    use crate::config::yaml::{Mapping, Number, Value};
    use proptest::prelude::*;

    fn map(kv: Vec<(String, Value)>) -> Value {
        let mut seen = std::collections::HashSet::new();
        let kv: Vec<(String, Value)> = kv
            .into_iter()
            .filter(|(k, _)| seen.insert(k.clone()))
            .collect();
        Value::Mapping(Mapping::from_entries(
            kv.into_iter().map(|(k, v)| (Value::String(k), v)).collect(),
        ))
    }

    fn scalar_text(v: &Value) -> String {
        match v {
            Value::Null => "null".into(),
            Value::Bool(b) => b.to_string(),
            Value::Number(n) => n.to_string(),
            Value::String(s) => serde_json::to_string(s).unwrap_or_default(),
            Value::Sequence(_) => "[]".into(),
            Value::Mapping(_) => "{}".into(),
            Value::Tagged(_) => "!x null".into(),
        }
    }

    /// Block-style YAML for a generated value (what serde_yaml::to_string produced before).
    fn to_yaml(v: &Value) -> String {
        fn nested(v: &Value) -> bool {
            matches!(v, Value::Sequence(s) if !s.is_empty())
                || matches!(v, Value::Mapping(m) if !m.is_empty())
        }
        fn emit(v: &Value, indent: usize, out: &mut String) {
            let pad = " ".repeat(indent);
            match v {
                Value::Sequence(items) if !items.is_empty() => {
                    for item in items {
                        if nested(item) {
                            out.push_str(&format!("{pad}-\n"));
                            emit(item, indent + 2, out);
                        } else {
                            out.push_str(&format!("{pad}- {}\n", scalar_text(item)));
                        }
                    }
                }
                Value::Mapping(m) if !m.is_empty() => {
                    for (k, item) in m {
                        let k = scalar_text(k);
                        if nested(item) {
                            out.push_str(&format!("{pad}{k}:\n"));
                            emit(item, indent + 2, out);
                        } else {
                            out.push_str(&format!("{pad}{k}: {}\n", scalar_text(item)));
                        }
                    }
                }
                other => out.push_str(&format!("{pad}{}\n", scalar_text(other))),
            }
        }
        let mut out = String::new();
        emit(v, 0, &mut out);
        out
    }

    fn yaml_value() -> impl Strategy<Value = Value> {
        let key = prop_oneof![
            Just("name".to_string()),
            Just("schedule".to_string()),
            Just("jobs".to_string()),
            Just("agent".to_string()),
            Just("command".to_string()),
            Just("agents".to_string()),
            Just("delivery".to_string()),
            Just("deliver".to_string()),
            Just("monitor".to_string()),
            Just("kind".to_string()),
            Just("every_seconds".to_string()),
            Just("misfire_grace_seconds".to_string()),
            Just("budget".to_string()),
            Just("defaults".to_string()),
            Just("tz".to_string()),
            Just("model".to_string()),
            "[a-z_-]{1,8}",
        ];
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|i| Value::Number(if i < 0 {
                Number::NegInt(i)
            } else {
                Number::PosInt(i as u64)
            })),
            any::<f64>().prop_map(|f| Value::Number(Number::Float(f))),
            Just(Value::String("every".into())),
            Just(Value::String("UTC".into())),
            "\\PC{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(5, 64, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Sequence),
                prop::collection::vec((key.clone(), inner), 0..6).prop_map(map),
            ]
        })
    }

    /// Documents shaped like a jobs file, with arbitrary values where the fields go, so the
    /// checks deep inside jobs, agents and sinks are exercised.
    fn jobs_doc() -> impl Strategy<Value = Value> {
        use Value as V;
        let field = prop::sample::select(check::JOB_KEYS.to_vec());
        let leaf = prop_oneof![
            Just(V::Null),
            any::<bool>().prop_map(V::Bool),
            (-3i64..100).prop_map(|i| V::Number(if i < 0 {
                Number::NegInt(i)
            } else {
                Number::PosInt(i as u64)
            })),
            Just(V::String("every 5m".into())),
            Just(V::String("bot".into())),
            Just(V::String("sink".into())),
            Just(V::String("j0".into())),
            Just(V::String("600".into())),
            Just(V::String("2026-12-01T09:00".into())),
            "\\PC{0,10}".prop_map(V::String),
        ];
        let value = leaf.clone().prop_recursive(2, 12, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(V::Sequence),
                prop::collection::vec(
                    (
                        prop::sample::select(vec![
                            "kind",
                            "every_seconds",
                            "cron_expr",
                            "tz",
                            "at",
                            "command",
                            "url",
                            "allow_private"
                        ]),
                        inner
                    ),
                    0..4
                )
                .prop_map(|kv| map(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
            ]
        });
        let job = prop::collection::vec((field, value), 0..10)
            .prop_map(|kv| map(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect()));
        (prop::collection::vec(job, 0..4), leaf.clone(), leaf).prop_map(|(jobs, a, b)| {
            let agents = map(vec![(
                "bot".into(),
                map(vec![("model".into(), V::String("m".into()))]),
            )]);
            let delivery = map(vec![(
                "sink".into(),
                map(vec![("file".into(), V::String("/tmp/x".into()))]),
            )]);
            map(vec![
                ("agents".into(), agents),
                ("delivery".into(), delivery),
                ("jobs".into(), V::Sequence(jobs)),
                ("budget".into(), a),
                ("x-extra".into(), b),
            ])
        })
    }

    /// Every key path of `v` (mapping keys only), with the key's emitted text.
    fn key_paths(v: &Value, base: Vec<yaml::Seg>, out: &mut Vec<(Vec<yaml::Seg>, String)>) {
        match v {
            Value::Sequence(items) => {
                for (i, item) in items.iter().enumerate() {
                    let mut p = base.clone();
                    p.push(yaml::Seg::Index(i));
                    key_paths(item, p, out);
                }
            }
            Value::Mapping(m) => {
                for (k, item) in m {
                    if let Value::String(k) = k {
                        let mut p = base.clone();
                        p.push(yaml::Seg::Key(k.clone()));
                        out.push((p.clone(), scalar_text(&Value::String(k.clone()))));
                        key_paths(item, p, out);
                    }
                }
            }
            _ => {}
        }
    }

    /// The text from 1-based `(line, column)` (columns count characters, as the parser does).
    fn text_at(text: &str, (line, column): (usize, usize)) -> String {
        text.split('\n')
            .nth(line - 1)
            .map(|l| l.chars().skip(column - 1).collect())
            .unwrap_or_default()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// The one-pass index (what replaced the serde_yaml oracle): every key of a generated
        /// document is located exactly at its own text.
        #[test]
        fn every_key_is_located_at_its_text(v in yaml_value()) {
            let text = to_yaml(&v);
            let doc = yaml::Document::parse(&text);
            prop_assert!(doc.is_ok(), "{:?} does not parse: {:?}", text, doc.err());
            let Ok(doc) = doc else { return Ok(()) };
            let mut paths = Vec::new();
            key_paths(&v, Vec::new(), &mut paths);
            for (p, key) in paths {
                let at = doc.locate(&p, yaml::Target::Key);
                prop_assert!(at.is_some(), "{:?} not found in {:?}", p, text);
                let at = at.unwrap_or((1, 1));
                prop_assert!(
                    text_at(&text, at).starts_with(&key),
                    "{:?} located at {:?} in {:?}", p, at, text
                );
            }
        }

        #[test]
        fn never_panics_on_arbitrary_text(text in "\\PC{0,200}") {
            let c = check(&text);
            for d in &c.diagnostics {
                prop_assert!(d.line >= 1 && d.column >= 1);
            }
        }

        #[test]
        fn never_panics_on_yaml_like_text(text in "[ a-z:\\-\\[\\]{},&*!|>#'\"\n0-9.]{0,200}") {
            let _ = check(&text);
        }

        #[test]
        fn never_panics_on_jobs_shaped_documents(v in jobs_doc()) {
            let text = to_yaml(&v);
            let c = check(&text);
            for d in &c.diagnostics {
                prop_assert!(d.line >= 1 && d.column >= 1);
            }
            for j in c.jobs.iter().flatten() {
                prop_assert!(check::valid_name(&j.name));
                prop_assert!(j.max_runs.is_none_or(|n| n >= 1));
            }
            // Whatever validated is within every bound (what a store re-checks on apply).
            if let Ok(l) = c.into_result() {
                prop_assert_eq!(check_bounds(&l.file), Ok(()));
            }
        }

        #[test]
        fn never_panics_on_structurally_valid_yaml(v in yaml_value()) {
            let text = to_yaml(&v);
            let c = check(&text);
            for d in &c.diagnostics {
                prop_assert!(d.line >= 1 && d.column >= 1);
            }
            // Every job that validated has a name that passes the rule.
            for j in c.jobs.iter().flatten() {
                prop_assert!(check::valid_name(&j.name));
            }
        }
    }
}

#[test]
fn bad_schedule_strings_carry_the_schedule_message() {
    let text = "\
jobs:
  - {name: a, schedule: \"*/0m\", command: x}
  - {name: b, schedule: \"cron:bogus\", command: x}
  - {name: c, schedule: 0, command: x}
  - name: d
    schedule: {kind: cron, cron_expr: \"0 7 * * * *\"}
    command: x
  - name: e
    schedule: {kind: at, at: tomorrow}
    command: x
";
    let c = error_at(
        text,
        "jobs[0].schedule",
        (2, 25),
        "an interval must be at least 1 second",
    );
    error_in(
        &c,
        "jobs[1].schedule",
        (3, 25),
        "invalid cron expression 'bogus'",
    );
    error_in(&c, "jobs[2].schedule", (4, 25), "'0' is not a schedule");
    error_in(&c, "jobs[3].schedule.cron_expr", (6, 39), "6 fields");
    error_in(&c, "jobs[4].schedule.at", (9, 30), "tomorrow");
    assert_eq!(c.diagnostics.len(), 5, "{:#?}", c.diagnostics);
}

/// A fraction of a second finer than a microsecond is refused where it is written, in both
/// forms; a millisecond one is kept.
#[test]
fn an_at_finer_than_a_microsecond_is_refused_at_its_place() {
    let text = "\
jobs:
  - {name: a, schedule: \"at:2026-12-01T09:00:05.1234567Z\", command: x}
  - name: b
    schedule: {kind: at, at: \"2026-12-01T09:00:05.0000001Z\"}
    command: x
  - {name: c, schedule: \"at:2026-12-01T09:00:05.500Z\", command: x}
";
    let c = error_at(
        text,
        "jobs[0].schedule",
        (2, 25),
        "7 digits after the second",
    );
    error_in(
        &c,
        "jobs[1].schedule.at",
        (4, 30),
        "at most 6 (microseconds)",
    );
    assert_eq!(c.diagnostics.len(), 2, "{:#?}", c.diagnostics);
}

#[test]
fn schedules_take_the_zone_from_the_mapping_then_defaults() {
    let text = "\
defaults: {tz: Europe/Berlin}
jobs:
  - {name: a, schedule: \"0 7 * * *\", command: x, until: \"2027-01-01T00:00\"}
  - {name: b, schedule: {kind: cron, cron_expr: \"0 7 * * *\", tz: Asia/Tokyo}, command: x}
  - {name: c, schedule: {kind: at, at: \"2026-12-01T09:00\"}, command: x}
  - {name: d, schedule: \"in 10m\", command: x}
  - {name: e, schedule: \"  Every 5m \", command: x}
";
    let c = check(text);
    assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
    let jobs = c.into_result().unwrap().file.jobs;
    let a = &jobs[0];
    assert_eq!(a.tz, "Europe/Berlin");
    assert_eq!(
        a.schedule,
        ScheduleSpec::Cron {
            expr: "0 7 * * *".into(),
            tz: "Europe/Berlin".into()
        }
    );
    // A naive `until` is wall time in the job's zone (CET = UTC+1 in winter).
    assert_eq!(a.until.unwrap().to_rfc3339(), "2026-12-31T23:00:00+00:00");
    assert_eq!(jobs[1].tz, "Asia/Tokyo");
    assert_eq!(jobs[1].schedule_text, "0 7 * * *");
    assert!(matches!(&jobs[1].schedule, ScheduleSpec::Cron { tz, .. } if tz == "Asia/Tokyo"));
    assert_eq!(
        jobs[2].schedule,
        ScheduleSpec::At {
            at: chrono::DateTime::parse_from_rfc3339("2026-12-01T08:00:00Z")
                .unwrap()
                .to_utc()
        }
    );
    assert_eq!(jobs[2].schedule_text, "at:2026-12-01T09:00");
    assert!(jobs[2].max_runs == Some(1) || jobs[2].schedule.is_at());
    assert_eq!(jobs[3].schedule, ScheduleSpec::In { seconds: 600 });
    assert_eq!(jobs[4].schedule, ScheduleSpec::Every { every_seconds: 300 });
    assert_eq!(jobs[4].schedule_text, "  Every 5m ");
}

#[test]
fn a_bad_schedule_does_not_hide_the_jobs_other_problems() {
    let text = "\
jobs:
  - name: a
    schedule: \"every 0s\"
    command: x
    until: whenever
    deliver: [nowhere]
";
    let c = check(text);
    let keys: Vec<&str> = c.diagnostics.iter().map(|d| d.key.as_str()).collect();
    assert_eq!(
        keys,
        vec!["jobs[0].schedule", "jobs[0].until", "jobs[0].deliver[0]"],
        "{:#?}",
        c.diagnostics
    );
}

#[test]
fn fields_that_do_not_apply_are_warnings() {
    let c = check(&one_job("    command: x\n    message: hello\n"));
    assert!(!c.has_errors());
    warning_in(&c, "jobs[0].message", (5, 14), "ignored: a `command` job");
    let text = format!(
        "agents:\n  bot: {{model: m}}\njobs:\n  - name: a\n    schedule: {EVERY}\n    agent: bot\n    command_timeout_seconds: 5\n"
    );
    let c = check(&text);
    assert!(!c.has_errors());
    warning_in(
        &c,
        "jobs[0].command_timeout_seconds",
        (7, 30),
        "ignored: this is an agent job",
    );
}

#[test]
fn long_name_lists_are_capped() {
    let mut text = String::from("jobs:\n");
    for i in 0..20 {
        text.push_str(&format!(
            "  - {{name: j{i:02}, schedule: {EVERY}, command: x}}\n"
        ));
    }
    text.push_str(&format!(
        "  - {{name: last, schedule: {EVERY}, command: x, context_from: [ghost]}}\n"
    ));
    let c = check(&text);
    let d = diag(&c, "jobs[20].context_from[0]");
    assert!(d.message.ends_with(", … and 9 more"), "{d}");
}

#[test]
fn wrong_types_say_what_was_found() {
    let c = error_at(
        &format!(
            "jobs:\n  - name: 123\n    schedule: {EVERY}\n    command: x\n    enabled: \"no\"\n"
        ),
        "jobs[0].name",
        (2, 11),
        "expected a string, found the number 123 (quote it if you mean the text)",
    );
    error_in(
        &c,
        "jobs[0].enabled",
        (5, 14),
        "expected true or false, found the string \"no\"",
    );
}

#[test]
fn timeouts_and_leases_are_bounded_to_a_week() {
    // An absurd lease would overflow the instants computed from it (a panic in the store before
    // this bound existed); it is a typo, so it is an error at its position.
    let c = error_at(
        &one_job("    command: x\n    lease_seconds: 1e15\n    timeout_seconds: 604800\n"),
        "jobs[0].lease_seconds",
        (5, 20),
        "at most 604800",
    );
    assert!(
        c.diagnostics
            .iter()
            .all(|d| d.key != "jobs[0].timeout_seconds"),
        "{:?}",
        c.diagnostics
    );
    error_at(
        "defaults:\n  timeout_seconds: 1e9\njobs: []\n",
        "defaults.timeout_seconds",
        (2, 20),
        "7 days",
    );
}

#[test]
fn an_unpriced_model_under_a_budget_and_a_short_key_are_warnings() {
    let text = "budget: { max_cost_usd: 1.0, period: day }
agents:
  a: { provider: openai, api_key_env: K, model: mystery-9b }
jobs:
  - { name: j, schedule: every 1h, agent: a, message: hi }
";
    let c = check_str_with_env_values(text, Path::new("jobs.yaml"), &|n| {
        (n == "K").then(|| "abc".to_string())
    });
    warning_in(
        &c,
        "agents.a.model",
        (3, 49),
        "pricing:\n  mystery-9b: { input: INPUT_USD_PER_1M, output: OUTPUT_USD_PER_1M }",
    );
    // The suggested line, pasted as it is, does not validate: it never makes the model free.
    let pasted = text.replace(
        "agents:",
        "pricing:\n  mystery-9b: { input: INPUT_USD_PER_1M, output: OUTPUT_USD_PER_1M }\nagents:",
    );
    let p = check(&pasted);
    assert!(
        p.diagnostics
            .iter()
            .any(|d| d.severity == Severity::Error && d.key.starts_with("pricing.mystery-9b")),
        "{:#?}",
        p.diagnostics
    );
    warning_in(&c, "agents.a.api_key_env", (3, 39), "only 3 characters");
    assert!(c.jobs.iter().all(Option::is_some), "warnings only");
    // Priced by `pricing:`, or no budget at all: no warning.
    let priced = text.replace(
        "agents:",
        "pricing:\n  mystery-9b: { input: 0, output: 0 }\nagents:",
    );
    let c = check(&priced);
    assert!(
        c.diagnostics.iter().all(|d| d.key != "agents.a.model"),
        "{:#?}",
        c.diagnostics
    );
    let c = check(&text.replace("budget: { max_cost_usd: 1.0, period: day }", "budget: null"));
    assert!(
        c.diagnostics.iter().all(|d| d.key != "agents.a.model"),
        "{:#?}",
        c.diagnostics
    );
}

//! What stops a run before it spends, said before it runs: `validate` warns of a budget below
//! one call's worst case with the numbers and both fixes, and `dry-run` answers
//! `would_run: false` with every reason — the agent's key variable unset, the budget too small
//! for one call, an unpriced model under a budget — where it used to say `gate: go`.

use crate::support::cli::{cronsole, output};
use crate::support::tempdir as tmp;

const KEY: &str = "CRONSOLE_TEST_PREFLIGHT_KEY";
/// A key value for the tests that set it.
const VALUE: &str = "sk-test-0123456789abcdef";

const JOBS: &str = r#"
budget: { max_cost_usd: 1.00, period: day }
agents:
  bot:
    provider: openai
    api_key_env: CRONSOLE_TEST_PREFLIGHT_KEY
    model: gpt-4o-mini
    instructions: "Be brief."
  local:
    provider: openai
    api_key_env: CRONSOLE_TEST_PREFLIGHT_KEY
    model: my-local-model
jobs:
  - name: tiny
    schedule: every 1h
    agent: bot
    message: "Summarise the night."
    max_cost_usd: 0.002
  - name: roomy
    schedule: every 1h
    agent: bot
    message: "Summarise the night."
  - name: unpriced
    schedule: every 1h
    agent: local
    message: "hi"
"#;

fn cli(dir: &std::path::Path, key: Option<&str>, args: &[&str]) -> (i32, String, String) {
    let mut c = cronsole(dir);
    c.args(args).arg("--store").arg(dir.join("store"));
    match key {
        Some(k) => c.env(KEY, k),
        None => c.env_remove(KEY),
    };
    output(&mut c)
}

/// `dry-run JOB --json`, with the key set to `key` or unset.
fn dry_run_json(dir: &std::path::Path, key: Option<&str>, job: &str) -> serde_json::Value {
    let (_, json, err) = cli(dir, key, &["dry-run", job, "--json"]);
    serde_json::from_str(&json)
        .unwrap_or_else(|e| panic!("dry-run {job} --json: {e}\n{json}\n{err}"))
}

#[test]
fn validate_warns_of_a_budget_too_small_for_one_call_with_both_fixes() {
    let dir = tmp("preflight-validate");
    std::fs::write(dir.join("jobs.yaml"), JOBS).unwrap();
    let mut c = cronsole(&dir);
    c.args(["validate", "jobs.yaml"]).env(KEY, VALUE);
    let (code, out, err) = output(&mut c);
    assert_eq!(code, 0, "warnings only: {out}{err}");
    // gpt-4o-mini ($0.15 / $0.60 per 1M) with the default 4096 max_tokens: $0.0025 at worst.
    let line = out
        .lines()
        .find(|l| l.contains("jobs[0].max_cost_usd"))
        .unwrap_or_else(|| panic!("no warning at jobs[0].max_cost_usd in\n{out}"));
    assert!(line.contains("warning:"), "{line}");
    assert!(
        line.contains("job 'tiny' never calls its model: budget too small for one call: it may cost up to $0.00248, the job limit is $0.002/day"),
        "{line}"
    );
    assert!(
        line.contains("lower agents.bot.max_tokens to 3310 or less"),
        "{line}"
    );
    assert!(
        line.contains("raise max_cost_usd to $0.00248 or more"),
        "{line}"
    );
    // The job whose limit fits is not warned.
    assert_eq!(out.matches("never calls its model").count(), 1, "{out}");
}

#[test]
fn dry_run_says_would_run_false_with_every_reason() {
    let dir = tmp("preflight-dry");
    std::fs::write(dir.join("jobs.yaml"), JOBS).unwrap();
    let (code, _, err) = cli(&dir, None, &["apply", "jobs.yaml"]);
    assert_eq!(code, 0, "{err}");

    // No key, a limit below one call: both said, `would run: no`, never `gate: go` alone.
    let (code, out, err) = cli(&dir, None, &["dry-run", "tiny"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("would run: no"), "{out}");
    assert!(
        out.contains("API key env var CRONSOLE_TEST_PREFLIGHT_KEY is not set (or is empty)"),
        "{out}"
    );
    assert!(out.contains("budget too small for one call"), "{out}");
    assert!(out.contains("next:   "), "{out}");
    let v = dry_run_json(&dir, None, "tiny");
    assert_eq!(v["would_run"], false, "{v}");
    let codes: Vec<&str> = v["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["code"].as_str().unwrap())
        .collect();
    assert_eq!(codes, ["missing_key", "budget_too_small"], "{v}");
    assert!(v["next_fire_at"].is_string(), "{v}");

    // With the key set: the roomy job would run, the tiny one still would not.
    let (_, out, _) = cli(&dir, Some(VALUE), &["dry-run", "roomy"]);
    assert!(out.contains("would run: yes"), "{out}");
    let v = dry_run_json(&dir, Some(VALUE), "tiny");
    assert_eq!(v["would_run"], false, "{v}");
    assert_eq!(v["reasons"][0]["code"], "budget_too_small", "{v}");
    // A model with no price under a budget is refused before any request.
    let v = dry_run_json(&dir, Some(VALUE), "unpriced");
    assert_eq!(v["would_run"], false, "{v}");
    assert_eq!(v["reasons"][0]["code"], "unpriced_model", "{v}");
    assert!(
        v["reasons"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("my-local-model"),
        "{v}"
    );
}

/// An agent's command tools are sent with every request: `validate` counts their definitions
/// in one call's worst case, as `dry-run` prices the first turn, so a limit that only the
/// tool-less prompt fits is warned of at `validate` too.
#[test]
fn validate_counts_the_command_tools_definitions_in_one_calls_worst_case() {
    let dir = tmp("preflight-tools");
    // gpt-4o-mini, max_tokens 1000: $0.0006 of output at worst, next to nothing of prompt;
    // the tool's 4 000-byte description adds $0.0006 of input: $0.0012 (shown rounded up) >
    // the $0.001 limit.
    let jobs = format!(
        r#"
budget: null
tools:
  lookup:
    description: "{}"
    parameters: {{ type: object, properties: {{ q: {{ type: string }} }} }}
    command: [echo, found]
agents:
  bot:
    provider: openai
    api_key_env: CRONSOLE_TEST_PREFLIGHT_KEY
    model: gpt-4o-mini
    max_tokens: 1000
    instructions: "Be brief."
    tools: [lookup]
  plain:
    provider: openai
    api_key_env: CRONSOLE_TEST_PREFLIGHT_KEY
    model: gpt-4o-mini
    max_tokens: 1000
    instructions: "Be brief."
jobs:
  - name: tooled
    schedule: every 1h
    agent: bot
    message: "Look it up."
    max_cost_usd: 0.001
  - name: bare
    schedule: every 1h
    agent: plain
    message: "Look it up."
    max_cost_usd: 0.001
"#,
        "d".repeat(4000)
    );
    std::fs::write(dir.join("jobs.yaml"), jobs).unwrap();
    let mut c = cronsole(&dir);
    c.args(["validate", "jobs.yaml"]).env(KEY, VALUE);
    let (code, out, err) = output(&mut c);
    assert_eq!(code, 0, "warnings only: {out}{err}");
    let warned: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("never calls its model"))
        .collect();
    assert_eq!(warned.len(), 1, "only the job with tools: {out}");
    let line = warned[0];
    assert!(line.contains("jobs[0].max_cost_usd"), "{line}");
    assert!(
        line.contains("it may cost up to $0.00124, the job limit is $0.001/day"),
        "{line}"
    );
    assert!(
        line.contains("its command tools' definitions (4133 bytes) included"),
        "{line}"
    );

    // dry-run prices the first turn the same way: too small for it as well.
    let (code, _, err) = cli(&dir, None, &["apply", "jobs.yaml"]);
    assert_eq!(code, 0, "{err}");
    let v = dry_run_json(&dir, Some(VALUE), "tooled");
    assert_eq!(v["would_run"], false, "{v}");
    assert_eq!(v["reasons"][0]["code"], "budget_too_small", "{v}");
    let v = dry_run_json(&dir, Some(VALUE), "bare");
    assert_eq!(v["would_run"], true, "{v}");
}

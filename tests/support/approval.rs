//! The jobs file the approval tests share: a scripted model's agent whose one tool, `write`
//! (it appends `ran` to `wrote.txt`), waits for an operator before it runs. The file store's
//! rows of a job, read from outside the owner, sit here too: every approval test reads them.
//!
//! Owns: the approval tests' jobs-file text. Must not touch: what a test asserts.

use std::path::Path;

use cronsole::model::HistoryRow;
use cronsole::store::{HistoryQuery, HistoryReader};

/// The tool `write`, under `tools:`; `extra` adds lines to it (indented four spaces).
pub fn write_tool(extra: &str) -> String {
    format!(
        "tools:
  write:
    description: Writes a file
    parameters: {{ type: object }}
    command: [sh, -c, 'echo ran >> wrote.txt']
{extra}"
    )
}

/// An agent's keys, each on a line at `indent`: the model `m` at `base_url` (key from
/// `PROVIDER_KEY`), offered `write`, which needs approval.
pub fn agent_keys(base_url: &str, indent: &str) -> String {
    [
        "provider: openai".to_string(),
        format!("base_url: {base_url}"),
        "api_key_env: PROVIDER_KEY".into(),
        "model: m".into(),
        "instructions: go".into(),
        "tools: [write]".into(),
        "approve: [write]".into(),
    ]
    .iter()
    .map(|k| format!("{indent}{k}\n"))
    .collect()
}

/// No global budget and the model `m` at $1 per 1M tokens each way, then [`write_tool`].
pub fn preamble(tool_extra: &str) -> String {
    format!(
        "budget: null\npricing:\n  m: {{ input: 1.0, output: 1.0 }}\n{}",
        write_tool(tool_extra)
    )
}

/// A whole jobs file: [`preamble`], the agent `ops` ([`agent_keys`]) and the job `gated`
/// (every hour, run at start, asking `ops`); `job_extra` adds lines to the job.
pub fn gated_yaml(base_url: &str, tool_extra: &str, job_extra: &str) -> String {
    format!(
        "{}agents:\n  ops:\n{}jobs:
  - name: gated
    schedule: every 1h
    run_immediately: true
    agent: ops
    message: go
{job_extra}",
        preamble(tool_extra),
        agent_keys(base_url, "    ")
    )
}

/// `job`'s rows in the file store at `store`, newest first (at most 100); none while the store
/// does not exist yet.
pub fn rows(store: &Path, job: &str) -> Vec<HistoryRow> {
    let Ok(s) = cronsole::store::file::FileStore::open_existing(store) else {
        return Vec::new();
    };
    s.history(&HistoryQuery {
        job: Some(job.into()),
        limit: 100,
        ..Default::default()
    })
    .unwrap_or_default()
}

//! Coming from PraisonAI's scheduler: its names beside cronsole's, in one table ([`KEYS`]) that
//! three surfaces read — the hint `validate` gives for a PraisonAI key in a jobs file
//! ([`hint`]), `cronsole import praisonai` ([`import`]), and the migration guide's table, which
//! is [`markdown_table`] verbatim (a test compares them).
//!
//! Owns: the table, and turning a PraisonAI scheduler YAML (its `jobs:` list form) into a
//! cronsole jobs file, with a report of what could not be mapped. Must not touch: the store,
//! the environment, files (the caller reads the input and writes the output).
//!
//! Decisions:
//! - PraisonAI jobs point at Python agents (`agent_id`): the output declares one agent from the
//!   options (provider, model, key variable) and every agent job uses it; its instructions are
//!   left for the operator to write (they live in the Python code).
//! - `max_cost` is a lifetime total there (default 1.00 per scheduler): when a job states one,
//!   the output sets `budget: {max_cost_usd: null, period: total}` — per-job limits over all
//!   time, no global brake, as PraisonAI has none — and gives each agent job its `max_cost`, or
//!   PraisonAI's 1.00. Without any, cronsole's default budget ($1.00 per day) applies, and the
//!   report says so.
//! - `on_success` / `on_failure` callbacks are Python: not mapped, pointing at sinks
//!   (`deliver:`) and chained jobs (`after:`).
//! - A job with `command` is a command job (its `message`, if any, is reported unused); any
//!   other job is an agent job.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use super::yaml::{Document, Mapping, Seg, Target, Value, key_text};

/// One row of the PraisonAI ↔ cronsole table. The display columns are what the migration
/// guide prints; only the test that holds the guide's table to this one reads them.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(test), allow(dead_code))]
pub struct KeyRow {
    /// PraisonAI's name, as the guide writes it (Markdown).
    pub praisonai: &'static str,
    /// Its default there.
    pub default_there: &'static str,
    /// cronsole's name (Markdown).
    pub cronsole: &'static str,
    /// Its default here.
    pub default_here: &'static str,
    /// What differs.
    pub note: &'static str,
    /// The key names a PraisonAI YAML job may carry for this row (`validate` hints on them,
    /// `import` maps them). Empty for rows that are not job keys.
    pub keys: &'static [&'static str],
    /// What `validate` says after "PraisonAI's `KEY` is …" (empty: the key is the same here).
    pub hint: &'static str,
}

const fn row(
    praisonai: &'static str,
    default_there: &'static str,
    cronsole: &'static str,
    default_here: &'static str,
    note: &'static str,
    keys: &'static [&'static str],
    hint: &'static str,
) -> KeyRow {
    KeyRow {
        praisonai,
        default_there,
        cronsole,
        default_here,
        note,
        keys,
        hint,
    }
}

/// PraisonAI's names and defaults beside cronsole's: the migration guide's table.
pub const KEYS: &[KeyRow] = &[
    row(
        "`Agent(...)` / `agent_id`",
        "–",
        "`agent:` naming an `agents:` entry (`provider`, `model`, `instructions`, …)",
        "–",
        "the agent is declared in the file, not in Python",
        &["agent_id"],
        "`agent` here, naming an entry of `agents:` (provider, model, instructions); \
         `cronsole import praisonai FILE` writes one for you",
    ),
    row(
        "`task`",
        "required",
        "`message`",
        "`\"\"` (an agent job without one is `skipped`)",
        "",
        &["task"],
        "`message` here",
    ),
    row(
        "`max_cost`",
        "`1.00`, a **lifetime total**",
        "`max_cost_usd` with `period: total` (global `budget:`, or per job)",
        "global `$1.00` per **day**",
        "a hard limit checked before every call, not after the run",
        &["max_cost"],
        "`max_cost_usd` here; PraisonAI's is a lifetime total, so set `budget: {period: total}` \
         for the same meaning (cronsole's default period is a day)",
    ),
    row(
        "`timeout`",
        "`None` (no limit)",
        "`timeout_seconds`",
        "300",
        "per attempt; commands also have `command_timeout_seconds` (60)",
        &["timeout"],
        "`timeout_seconds` here (per attempt)",
    ),
    row(
        "`max_retries` (in `start`)",
        "3, total attempts",
        "`max_retries`",
        "3, total attempts",
        "same meaning and the same backoff, `min(max(30, 2^n), 300) s` ± 10 %",
        &[],
        "",
    ),
    row(
        "`run_immediately` (in `start`)",
        "`False`",
        "`run_immediately`",
        "`false`",
        "a run when the job is first stored (also in `defaults:`)",
        &[],
        "",
    ),
    row(
        "`on_success` callback",
        "–",
        "`deliver: [sink]`, or a chained job `after: {job: X, on: success}`",
        "–",
        "sinks are webhooks (JSON, Slack, Discord) or files",
        &["on_success"],
        "a Python callback, not a key here: deliver results with `deliver: [sink]` (a \
         `delivery:` entry), or run another job after it with `after: {job: NAME, on: success}`",
    ),
    row(
        "`on_failure` callback",
        "–",
        "`deliver:` (one alert per incident) or `after: {job: X, on: failure}`",
        "–",
        "`alert_after_failures` sets the threshold",
        &["on_failure"],
        "a Python callback, not a key here: `deliver: [sink]` sends one alert per incident, \
         or run another job with `after: {job: NAME, on: failure}`",
    ),
    row(
        "`lease_seconds` (`claim_due_jobs`)",
        "300",
        "`lease_seconds`",
        "30",
        "renewed every third of it while the run lives, so it need not cover the slowest job",
        &[],
        "",
    ),
    row(
        "`owner_id`",
        "`hostname:pid:uuid`",
        "automatic, `hostname:pid:uuid8`",
        "–",
        "shown in the console's header and Leases pane",
        &["owner_id"],
        "set by each cronsole process itself (`hostname:pid:uuid8`); remove it",
    ),
    row(
        "`delete_after_run` / `once=True`",
        "`False`",
        "`once: true`",
        "`false`",
        "",
        &["delete_after_run"],
        "`once: true` here",
    ),
    row(
        "`schedule_expr` `\"*/30m\"`, `\"hourly\"`",
        "–",
        "the same strings",
        "–",
        "`hourly` is anchored when the job is stored; `@hourly` is on the hour",
        &["schedule_expr"],
        "`schedule` here (the same strings)",
    ),
    row(
        "`misfire_grace_seconds`",
        "`None`",
        "`misfire_grace_seconds`",
        "null",
        "the same table; `\"600\"` is read as 600",
        &[],
        "",
    ),
    row(
        "`monitor: {url}` / `{command}`",
        "–",
        "the same, plus `allow_private` for intranet URLs",
        "–",
        "private addresses are refused unless allowed",
        &[],
        "",
    ),
    row(
        "`GateResult.state_updates` / notepad",
        "–",
        "the notepad: the agent ends its reply with a ```` ```notepad ```` block",
        "–",
        "16 KiB per job",
        &[],
        "",
    ),
    row(
        "`FileScheduleStore` (JSON) / YAML store",
        "YAML",
        "the file store, `.cronsole/` beside the jobs file",
        "–",
        "one host",
        &[],
        "",
    ),
    row(
        "\"a shared database-backed store\"",
        "–",
        "`--store postgres://…`",
        "–",
        "several hosts",
        &[],
        "",
    ),
    row(
        "`get_stats_async()` fields",
        "–",
        "`cronsole stats --json`: `total_executions`, `successful_executions`, \
         `failed_executions`, `success_rate`, `total_cost_usd`, `remaining_budget`, \
         `runtime_seconds`, `cost_per_execution`",
        "–",
        "per job and global",
        &[],
        "",
    ),
    row(
        "custom pricing",
        "–",
        "`pricing: {model: {input, output}}`",
        "–",
        "an unknown model is **refused** under a budget, never priced at $0",
        &[],
        "",
    ),
];

/// The hint for a key this file does not accept that is a PraisonAI name:
/// "PraisonAI's `max_cost` is `max_cost_usd` here; …". `None` for other names.
pub fn hint(name: &str) -> Option<String> {
    KEYS.iter()
        .find(|r| !r.hint.is_empty() && r.keys.contains(&name))
        .map(|r| format!("PraisonAI's `{name}` is {}", r.hint))
}

/// The table as the migration guide prints it (Markdown).
#[cfg(test)]
fn markdown_table() -> String {
    let mut out = String::from(
        "| PraisonAI | default there | cronsole | default here | note |\n|---|---|---|---|---|\n",
    );
    for r in KEYS {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            r.praisonai, r.default_there, r.cronsole, r.default_here, r.note
        );
    }
    out
}

/// What `import` needs besides the file: the one agent it declares.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// `openai` or `anthropic`.
    pub provider: String,
    /// The model the agent calls.
    pub model: String,
    /// The variable holding the API key.
    pub api_key_env: String,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            provider: "openai".into(),
            model: "gpt-4o-mini".into(),
            api_key_env: "OPENAI_API_KEY".into(),
        }
    }
}

/// Where a line of the converted file came from, so that a problem found in it is reported
/// where the operator can fix it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A position in the PraisonAI input (1-based line and column).
    Source {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
    },
    /// A command-line option of `import` (`--provider`, `--model`, `--api-key-env`).
    Option(&'static str),
    /// Written by `import` itself (comments, the budget it chose, `jobs:`).
    Generated,
}

/// A converted file.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The cronsole jobs file.
    pub yaml: String,
    /// Where each of its lines came from (`origins[n]` is line `n + 1`).
    pub origins: Vec<Origin>,
    /// How many jobs it holds.
    pub jobs: usize,
    /// What could not be mapped, each with the position in the input (`FILE:LINE:COL: …`).
    pub unmapped: Vec<String>,
    /// What was mapped with a change of meaning the operator should know about.
    pub notes: Vec<String>,
}

impl Imported {
    /// Where line `line` (1-based) of the converted file came from.
    pub fn origin(&self, line: usize) -> Origin {
        line.checked_sub(1)
            .and_then(|i| self.origins.get(i))
            .copied()
            .unwrap_or(Origin::Generated)
    }
}

/// Why a file could not be converted at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    /// Not YAML.
    #[error("{file}:{line}:{column}: {message}")]
    Yaml {
        /// The input file.
        file: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What the parser said.
        message: String,
    },
    /// YAML, but not a PraisonAI scheduler file.
    #[error("{file}: {why}")]
    NotAScheduleFile {
        /// The input file.
        file: String,
        /// What is missing.
        why: String,
    },
}

/// The job keys `import` copies as they are (same name, same meaning here).
const SAME: &[&str] = &[
    "misfire_grace_seconds",
    "monitor",
    "pre_run",
    "max_runs",
    "until",
    "once",
    "context_from",
    "context_max_chars",
    "on_missing_context",
    "max_retries",
    "run_immediately",
    "lease_seconds",
    "enabled",
    "deliver",
    "tags",
];

/// The name of the one agent the output declares.
pub const AGENT: &str = "assistant";

/// Convert the PraisonAI scheduler YAML `text` (read from `file`) into a cronsole jobs file.
pub fn import(text: &str, file: &Path, opts: &ImportOptions) -> Result<Imported, ImportError> {
    let name = file.display().to_string();
    let doc = Document::parse(text).map_err(|e| ImportError::Yaml {
        file: name.clone(),
        line: e.line,
        column: e.column,
        message: e.message,
    })?;
    let jobs = match doc.value.as_mapping().and_then(|m| m.get("jobs")) {
        Some(Value::Sequence(items)) => items.clone(),
        _ => {
            return Err(ImportError::NotAScheduleFile {
                file: name,
                why: "expected a mapping with a `jobs:` list (PraisonAI's scheduler YAML)".into(),
            });
        }
    };
    let mut cx = Conversion {
        doc: &doc,
        file: name,
        unmapped: Vec::new(),
        notes: Vec::new(),
        names: BTreeSet::new(),
        agents: BTreeSet::new(),
    };
    let top = doc.value.as_mapping().into_iter().flat_map(|m| m.keys());
    for k in top {
        let k = key_text(k).unwrap_or_default();
        if k != "jobs" {
            cx.unmapped_at(
                &[Seg::Key(k.clone())],
                format!("top-level `{k}`: not a PraisonAI scheduler key cronsole knows; left out"),
            );
        }
    }
    let mut out_jobs = Vec::new();
    for (i, item) in jobs.iter().enumerate() {
        if let Some(j) = cx.job(i, item) {
            out_jobs.push(j);
        }
    }
    if !cx.agents.is_empty() {
        let named: Vec<&str> = cx.agents.iter().map(String::as_str).collect();
        cx.notes.push(format!(
            "the jobs' PraisonAI agents ({}) are Python objects: every agent job uses the agent \
             '{AGENT}' here; write its instructions in agents.{AGENT}.instructions (or declare \
             one agent per job under agents: and point each job's `agent:` at it)",
            named.join(", ")
        ));
    }
    let any_cost = out_jobs.iter().any(|j| j.max_cost.is_some());
    let any_agent = out_jobs.iter().any(|j| j.agent);
    let mut y = Output::default();
    y.generated(&format!(
        "# Converted from PraisonAI's scheduler file {} by `cronsole import praisonai`.\n\
         # Check it with `cronsole validate`; what could not be mapped was printed on stderr.\n",
        cx.file
    ));
    if any_cost {
        y.generated(
            "# PraisonAI's max_cost is a lifetime total: each job's limit counts over all time\n\
             # (period: total), and there is no global limit, as in PraisonAI.\n\
             budget:\n  max_cost_usd: null\n  period: total\n",
        );
        cx.notes.push(
            "max_cost is a lifetime total in PraisonAI: every agent job has max_cost_usd (its \
             max_cost, or PraisonAI's default 1.00) and budget.period is total; cronsole's \
             global budget is off, as PraisonAI has none (set budget.max_cost_usd to add one)"
                .into(),
        );
    } else if any_agent {
        cx.notes.push(
            "no job states max_cost: cronsole's default global budget applies ($1.00 per UTC \
             day), not PraisonAI's 1.00 lifetime total per scheduler"
                .into(),
        );
    }
    if any_agent {
        y.generated(&format!(
            "agents:\n  {AGENT}:                   # the Python agents' instructions are not in the \
             PraisonAI file\n"
        ));
        y.line(
            format!("    provider: {}", quote(&opts.provider)),
            Origin::Option("--provider"),
        );
        y.line(
            format!("    api_key_env: {}", quote(&opts.api_key_env)),
            Origin::Option("--api-key-env"),
        );
        y.line(
            format!("    model: {}", quote(&opts.model)),
            Origin::Option("--model"),
        );
        y.generated("    instructions: \"\"\n");
    }
    y.generated("jobs:\n");
    if out_jobs.is_empty() {
        y.generated("  []\n");
    }
    for j in out_jobs.iter() {
        for (text, origin) in &j.lines {
            y.line(text.clone(), *origin);
        }
        if j.agent {
            let cost = j
                .max_cost
                .clone()
                .or_else(|| any_cost.then(|| ("1.00".to_string(), j.at)));
            if let Some((c, at)) = cost {
                y.line(format!("    max_cost_usd: {c}"), at);
            }
        }
    }
    Ok(Imported {
        yaml: y.text,
        origins: y.origins,
        jobs: out_jobs.len(),
        unmapped: cx.unmapped,
        notes: cx.notes,
    })
}

/// The converted file as it is written: its text and where each line came from.
#[derive(Default)]
struct Output {
    text: String,
    origins: Vec<Origin>,
}

impl Output {
    /// One line (without its newline) from `origin`.
    fn line(&mut self, text: String, origin: Origin) {
        self.text.push_str(&text);
        self.text.push('\n');
        self.origins.push(origin);
    }

    /// Lines `import` writes by itself (`text` ends with a newline).
    fn generated(&mut self, text: &str) {
        for l in text.lines() {
            self.line(l.to_string(), Origin::Generated);
        }
    }
}

/// One converted job: its YAML lines with their origins (without `max_cost_usd`, written once
/// the budget's shape is known), whether it is an agent job, its `max_cost` as written with its
/// position, and the job's own position.
struct OutJob {
    lines: Vec<(String, Origin)>,
    agent: bool,
    max_cost: Option<(String, Origin)>,
    at: Origin,
}

struct Conversion<'d> {
    doc: &'d Document,
    file: String,
    unmapped: Vec<String>,
    notes: Vec<String>,
    names: BTreeSet<String>,
    /// The PraisonAI agents the jobs named (`agent_id`).
    agents: BTreeSet<String>,
}

impl Conversion<'_> {
    /// Record what could not be mapped, at the position of `path` (its key).
    fn origin(&self, path: &[Seg], target: Target) -> Origin {
        let (line, column) = self.doc.locate_or_parent(path, target);
        Origin::Source { line, column }
    }

    fn unmapped_at(&mut self, path: &[Seg], what: String) {
        let (line, col) = self.doc.locate_or_parent(path, Target::Key);
        self.unmapped
            .push(format!("{}:{line}:{col}: {what}", self.file));
    }

    fn job(&mut self, i: usize, item: &Value) -> Option<OutJob> {
        let base = vec![Seg::Key("jobs".into()), Seg::Index(i)];
        let Some(m) = item.as_mapping() else {
            self.unmapped_at(&base, format!("jobs[{i}] is not a mapping; left out"));
            return None;
        };
        let at = |k: &str| {
            let mut p = base.clone();
            p.push(Seg::Key(k.into()));
            p
        };
        let name = match m.get("name") {
            Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_string(),
            _ => format!("job-{}", i + 1),
        };
        if !self.names.insert(name.clone()) {
            self.unmapped_at(&base, format!("a second job named '{name}'; left out"));
            return None;
        }
        let job_at = self.origin(&base, Target::Value);
        let value_at = |cx: &Self, k: &str| cx.origin(&at(k), Target::Value);
        let name_at = if m.get("name").is_some() {
            value_at(self, "name")
        } else {
            job_at
        };
        let mut lines = vec![(format!("  - name: {}", quote(&name)), name_at)];
        let command = m.get("command").filter(|v| !v.is_null());
        let message = m
            .get("message")
            .or_else(|| m.get("task"))
            .filter(|v| !v.is_null());
        let schedule_key = if m.get("schedule").is_some() {
            "schedule"
        } else {
            "schedule_expr"
        };
        match m.get(schedule_key) {
            Some(s) => lines.push((
                format!("    schedule: {}", flow(s)),
                value_at(self, schedule_key),
            )),
            None => self.unmapped_at(
                &base,
                format!("job '{name}' has no schedule: write one (e.g. `schedule: hourly`)"),
            ),
        }
        let agent = command.is_none();
        let message_at = ["message", "task"]
            .into_iter()
            .find(|k| m.get(k).is_some_and(|v| !v.is_null()))
            .map_or(job_at, |k| value_at(self, k));
        let agent_at = ["agent_id", "agent"]
            .into_iter()
            .find(|k| m.get(k).is_some())
            .map_or(job_at, |k| value_at(self, k));
        match (command, message) {
            (Some(c), m2) => {
                lines.push((
                    format!("    command: {}", flow(c)),
                    value_at(self, "command"),
                ));
                if m2.is_some() {
                    self.notes.push(format!(
                        "job '{name}': a command job delivers its command's output; its message \
                         is not used"
                    ));
                }
            }
            (None, m2) => {
                lines.push((format!("    agent: {AGENT}"), agent_at));
                lines.push((
                    format!(
                        "    message: {}",
                        m2.map_or_else(|| "\"\"".to_string(), flow)
                    ),
                    message_at,
                ));
                if m2.is_none() {
                    self.notes.push(format!(
                        "job '{name}' has no message: its runs are skipped (reason \"no \
                         message\") until one is written"
                    ));
                }
            }
        }
        let max_cost = self.other_keys(&name, m, &base, &mut lines);
        let max_cost = match max_cost {
            Some(_) if !agent => {
                self.notes.push(format!(
                    "job '{name}': max_cost on a command job is left out (a command spends \
                     nothing)"
                ));
                None
            }
            other => other,
        };
        Some(OutJob {
            lines,
            agent,
            max_cost,
            at: job_at,
        })
    }

    /// The job's keys other than its name, schedule, action and message: mapped onto `lines`
    /// (each with its position), or reported. Returns `max_cost` as written, with its position.
    fn other_keys(
        &mut self,
        name: &str,
        m: &Mapping,
        base: &[Seg],
        lines: &mut Vec<(String, Origin)>,
    ) -> Option<(String, Origin)> {
        let at = |k: &str| {
            let mut p = base.to_vec();
            p.push(Seg::Key(k.into()));
            p
        };
        let mut max_cost = None;
        for (k, v) in m.iter() {
            let k = key_text(k).unwrap_or_default();
            let here = self.origin(&at(&k), Target::Value);
            match k.as_str() {
                "name" | "schedule" | "schedule_expr" | "command" | "message" | "task" => {}
                "agent_id" | "agent" => {
                    self.agents.insert(plain(v));
                }
                "max_cost" => max_cost = Some((amount(v), here)),
                "timeout" => lines.push((format!("    timeout_seconds: {}", flow(v)), here)),
                "delete_after_run" => {
                    if matches!(v, Value::Bool(true)) {
                        lines.push(("    once: true".into(), here));
                    }
                }
                "on_success" | "on_failure" => self.unmapped_at(
                    &at(&k),
                    format!(
                        "job '{name}': `{k}` is a Python callback: use `deliver: [sink]` (a \
                         `delivery:` entry: webhook or file) or a job with `after: {{job: \
                         {name}, on: {}}}`",
                        if k == "on_success" {
                            "success"
                        } else {
                            "failure"
                        }
                    ),
                ),
                k2 if SAME.contains(&k2) => lines.push((format!("    {k2}: {}", flow(v)), here)),
                other => {
                    let why = match hint(other) {
                        Some(h) => h,
                        None => "not a PraisonAI scheduler key cronsole knows".to_string(),
                    };
                    self.unmapped_at(
                        &at(other),
                        format!("job '{name}': `{other}`: {why}; left out"),
                    );
                }
            }
        }
        max_cost
    }
}

/// A value as flow YAML: strings double-quoted (escaped), mappings `{k: v}`, lists `[a, b]`.
fn flow(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => quote(s),
        Value::Sequence(items) => {
            format!(
                "[{}]",
                items.iter().map(flow).collect::<Vec<_>>().join(", ")
            )
        }
        Value::Mapping(m) => format!(
            "{{{}}}",
            m.iter()
                .map(|(k, v)| format!("{}: {}", quote(&key_text(k).unwrap_or_default()), flow(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Tagged(inner) => flow(inner),
    }
}

/// An amount of dollars as YAML: at least the cents (`1.00`, `0.005`).
fn amount(v: &Value) -> String {
    match v {
        Value::Number(n) => {
            let x = n.as_f64();
            if (x * 100.0).fract() == 0.0 {
                format!("{x:.2}")
            } else {
                format!("{x}")
            }
        }
        other => flow(other),
    }
}

/// A scalar as plain text for a note (strings without quotes).
fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => flow(other),
    }
}

/// A double-quoted YAML string: backslash, quote and control characters escaped.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_name_the_cronsole_key_and_only_for_praisonai_names() {
        let h = hint("max_cost").unwrap();
        assert!(
            h.starts_with("PraisonAI's `max_cost` is `max_cost_usd` here"),
            "{h}"
        );
        assert!(h.contains("period: total"), "{h}");
        assert!(
            hint("on_failure")
                .unwrap()
                .contains("after: {job: NAME, on: failure}")
        );
        assert!(hint("agent_id").unwrap().contains("import praisonai"));
        assert!(hint("timeout").unwrap().contains("timeout_seconds"));
        assert_eq!(hint("max_retries"), None, "the same name here");
        assert_eq!(hint("colour"), None);
    }

    #[test]
    fn the_markdown_table_has_a_row_per_key_row() {
        let t = markdown_table();
        assert_eq!(t.lines().count(), KEYS.len() + 2);
        assert!(t.starts_with("| PraisonAI | default there | cronsole |"));
    }

    /// The migration guide's PraisonAI table is the table `validate`'s hints and `import` read:
    /// the block between its markers is `markdown_table()` byte for byte.
    #[test]
    fn the_migration_guides_table_is_the_codes_table() {
        let guide =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/guide/migrating.md");
        let text = std::fs::read_to_string(&guide).unwrap();
        let (start, end) = (
            "<!-- praisonai-keys: generated from src/config/praisonai.rs -->\n",
            "<!-- /praisonai-keys -->",
        );
        let from = text.find(start).expect("the start marker in the guide") + start.len();
        let to = text[from..].find(end).expect("the end marker") + from;
        let want = markdown_table();
        assert_eq!(
            &text[from..to],
            want,
            "docs/guide/migrating.md's PraisonAI table differs from the code's; put this between \
             the markers:\n{want}"
        );
    }

    #[test]
    fn strings_are_quoted_safely() {
        assert_eq!(quote("a\"b\\c\nd\u{1b}"), "\"a\\\"b\\\\c\\nd\\u001b\"");
    }
}

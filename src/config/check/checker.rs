//! The checker every rule file of `check` works with, and the helpers they share: the
//! [`Checker`] (problems found so far, what the rules look up: calendars, tool names, the
//! environment predicate), the accepted-key tables, the `defaults:` section as read, and the
//! small readers and word helpers (`key`, `index`, `show`, `closest`, `list`…).
//!
//! Owns: recording a problem against a key path, the key tables (the guide's reference test reads
//! them), the checks every section shares (unknown keys, mappings, http URLs). Must not touch:
//! any section's own rules (one file each beside this one), source positions, files.
//!
//! It sits at the bottom of `check`: the rule files import it and never one another's parent,
//! so the rules run one way (the parent module calls the sections; they call down into this).

use std::collections::BTreeSet;

use crate::config::diagnostic::Severity;
use crate::config::yaml::{Mapping, Seg, Target, Value, key_text};
use crate::model::ToolSettings;

/// A problem before it has a source position.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    pub severity: Severity,
    pub path: Vec<Seg>,
    pub target: Target,
    pub message: String,
}

pub(crate) const TOP_KEYS: &[&str] = &[
    "defaults",
    "budget",
    "pricing",
    "agents",
    "delivery",
    "calendars",
    "mcp_servers",
    "tools",
    "jobs",
];
pub(crate) const DEFAULT_KEYS: &[&str] = &[
    "tz",
    "timeout_seconds",
    "max_retries",
    "misfire_grace_seconds",
    "lease_seconds",
    "jitter_seconds",
    "overlap",
    "max_concurrent_runs",
    "run_immediately",
];
pub(crate) const CALENDAR_KEYS: &[&str] = &["weekdays", "dates", "file"];
pub(crate) const BUDGET_KEYS: &[&str] = &["max_cost_usd", "period"];
pub(crate) const PRICE_KEYS: &[&str] = &[
    "input",
    "output",
    "cached_input",
    "cache_read",
    "cache_write",
];
pub(crate) const AGENT_KEYS: &[&str] = &[
    "provider",
    "base_url",
    "api_key_env",
    "model",
    "instructions",
    "max_tokens",
    "temperature",
    "tools",
    "approve",
    "max_turns",
    "tool_timeout_seconds",
    "max_tool_output_bytes",
    "max_tool_calls_per_turn",
    "approval_timeout_seconds",
];
pub(crate) const SINK_KEYS: &[&str] = &["webhook", "file", "format"];
pub(crate) const JOB_KEYS: &[&str] = &[
    "name",
    "schedule",
    "message",
    "agent",
    "command",
    "command_timeout_seconds",
    "monitor",
    "pre_run",
    "context_from",
    "context_max_chars",
    "on_missing_context",
    "misfire_grace_seconds",
    "max_runs",
    "until",
    "once",
    "run_immediately",
    "timeout_seconds",
    "max_retries",
    "lease_seconds",
    "max_cost_usd",
    "deliver",
    "alert_after_failures",
    "enabled",
    "env_passthrough",
    "tags",
    "jitter_seconds",
    "only_on",
    "except_on",
    "overlap",
    "max_concurrent_runs",
    "after",
    "tools",
];
pub(crate) const MONITOR_KEYS: &[&str] = &["command", "url", "allow_private"];
pub(crate) const SCHEDULE_KEYS: &[&str] = &["kind", "every_seconds", "cron_expr", "tz", "at"];

/// The `defaults:` section after validation.
#[derive(Debug, Clone)]
pub(crate) struct Defaults {
    /// `None` when `defaults.tz` is bad: jobs that inherit it cannot be evaluated (the zone
    /// error is reported once, at `defaults.tz`).
    pub(super) tz: Option<String>,
    pub(super) timeout_seconds: f64,
    pub(super) max_retries: u32,
    pub(super) misfire_grace_seconds: Option<f64>,
    pub(super) lease_seconds: f64,
    pub(super) jitter_seconds: f64,
    pub(super) overlap: crate::model::Overlap,
    /// `defaults.run_immediately`: jobs without their own run once when first stored.
    pub(super) run_immediately: bool,
}

/// Validates one parsed document. `env_is_set` answers "is this API-key variable set and
/// non-empty" (the value itself is never asked for).
pub(crate) struct Checker<'e> {
    pub pending: Vec<Pending>,
    pub(super) env_is_set: &'e dyn Fn(&str) -> bool,
    /// When set, an `at` instant or `until` at or before it is warned about (`validate`).
    pub now: Option<chrono::DateTime<chrono::Utc>>,
    /// The jobs file's directory: `calendars.*.file` paths are relative to it.
    pub base_dir: Option<std::path::PathBuf>,
    /// The calendars read from `calendars:` (valid ones only), by name.
    pub(crate) calendars: std::collections::BTreeMap<String, crate::schedule::calendar::Calendar>,
    /// Calendars defined with errors (a job naming one is told so, not "unknown").
    pub(crate) broken_calendars: std::collections::BTreeSet<String>,
    pub(super) env_chars: Option<EnvChars<'e>>,
    /// The tool sources declared (`mcp_servers:`, `tools:`), for agents' and jobs' lists.
    pub(crate) tool_names: ToolNames,
    /// Some `after:` or `context_from` named a job not (yet) in the names: a one-pass check,
    /// whose names only hold the jobs read so far, is then redone with every name.
    pub(crate) unknown_job: bool,
}

/// "How many characters is this env var's value" (`None` = unset).
pub(crate) type EnvChars<'e> = &'e dyn Fn(&str) -> Option<usize>;

pub(crate) fn key(base: &[Seg], k: &str) -> Vec<Seg> {
    let mut p = base.to_vec();
    p.push(Seg::Key(k.to_string()));
    p
}

pub(crate) fn index(base: &[Seg], i: usize) -> Vec<Seg> {
    let mut p = base.to_vec();
    p.push(Seg::Index(i));
    p
}

/// `a string`, `a number`, … for "expected X, found Y" messages.
pub(crate) fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

/// A short, terminal-safe rendering of an operator's value for messages.
pub(crate) fn show(s: &str) -> String {
    let cut: String = s.chars().take(60).collect();
    if cut.len() < s.len() {
        format!("{cut:?}…")
    } else {
        format!("{cut:?}")
    }
}

/// `[A-Za-z0-9._-]{1,64}`: job, agent and sink names.
pub(crate) fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

pub(crate) fn valid_env_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Levenshtein distance, for "did you mean" on unknown keys.
pub(crate) fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(cur).min(row[j])
            };
            prev = cur;
        }
    }
    row[b.len()]
}

pub(crate) fn closest<'a>(word: &str, accepted: &[&'a str]) -> Option<&'a str> {
    accepted
        .iter()
        .map(|a| (distance(word, a), *a))
        .filter(|(d, a)| *d <= 2.max(a.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, a)| a)
}

/// Names joined by ", ", at most 12 of them (then "… and N more").
pub(crate) fn list(names: impl IntoIterator<Item = impl AsRef<str>>) -> String {
    const MAX: usize = 12;
    let v: Vec<String> = names.into_iter().map(|s| s.as_ref().to_string()).collect();
    if v.len() <= MAX {
        return v.join(", ");
    }
    format!("{}, … and {} more", v[..MAX].join(", "), v.len() - MAX)
}
impl<'e> Checker<'e> {
    pub fn new(env_is_set: &'e dyn Fn(&str) -> bool) -> Self {
        Checker {
            pending: Vec::new(),
            env_is_set,
            now: None,
            base_dir: None,
            calendars: Default::default(),
            broken_calendars: Default::default(),
            env_chars: None,
            tool_names: Default::default(),
            unknown_job: false,
        }
    }

    /// Also check API-key values' lengths (see [`crate::text::MIN_SECRET_CHARS`]).
    pub fn with_env_chars(mut self, env_chars: EnvChars<'e>) -> Self {
        self.env_chars = Some(env_chars);
        self
    }

    pub(crate) fn push(&mut self, severity: Severity, path: Vec<Seg>, target: Target, msg: String) {
        self.pending.push(Pending {
            severity,
            path,
            target,
            message: msg,
        });
    }

    pub(crate) fn error(&mut self, path: Vec<Seg>, msg: impl Into<String>) {
        self.push(Severity::Error, path, Target::Value, msg.into());
    }

    pub(crate) fn error_at_key(&mut self, path: Vec<Seg>, msg: impl Into<String>) {
        self.push(Severity::Error, path, Target::Key, msg.into());
    }

    pub(crate) fn warn(&mut self, path: Vec<Seg>, msg: impl Into<String>) {
        self.push(Severity::Warning, path, Target::Value, msg.into());
    }

    pub(crate) fn error_count(&self) -> usize {
        self.pending
            .iter()
            .filter(|p| p.severity == Severity::Error)
            .count()
    }

    /// `v` must be a mapping; returns it, or records an error.
    pub(crate) fn mapping<'v>(
        &mut self,
        v: &'v Value,
        path: &[Seg],
        what: &str,
    ) -> Option<&'v Mapping> {
        match v {
            Value::Mapping(m) => Some(m),
            other => {
                self.error(
                    path.to_vec(),
                    format!("expected {what} (a mapping), found {}", kind_of(other)),
                );
                None
            }
        }
    }

    /// Unknown keys are errors (a typo must not silently mean the default); keys starting with `x-`
    /// are ignored.
    pub(crate) fn check_keys(&mut self, m: &Mapping, path: &[Seg], accepted: &[&str]) {
        for k in m.keys() {
            let Some(name) = key_text(k) else {
                self.error(
                    path.to_vec(),
                    format!("keys must be plain names, found {} as a key", kind_of(k)),
                );
                continue;
            };
            if name.starts_with("x-") || accepted.contains(&name.as_str()) {
                continue;
            }
            // A PraisonAI name gets a pointer to cronsole's (one table with the guide).
            let praisonai =
                crate::config::praisonai::hint(&name).filter(|_| accepted.contains(&"schedule"));
            let hint = match closest(&name, accepted) {
                _ if let Some(h) = &praisonai => format!(" ({h})"),
                // A job's zone lives in its schedule mapping (or in `defaults`), not beside it.
                _ if name == "tz" && accepted.contains(&"schedule") => " (a job's zone goes \
in its schedule: `schedule: {kind: cron, cron_expr: \"0 9 * * *\", tz: Europe/Berlin}`, or \
`defaults: {tz: …}` for every job)"
                    .to_string(),
                Some(c) => format!(" (did you mean '{c}'?)"),
                None => String::new(),
            };
            self.error_at_key(
                key(path, &name),
                format!(
                    "unknown key {}{hint}; accepted keys here: {} (or any key starting with x-)",
                    show(&name),
                    accepted.join(", ")
                ),
            );
        }
    }

    /// A present, non-null value under `k`.
    pub(crate) fn get<'v>(m: &'v Mapping, k: &str) -> Option<&'v Value> {
        m.get(k).filter(|v| !v.is_null())
    }
}

/// "a string \"abc\"", "a number 3", … for type errors.
pub(crate) fn describe_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("the string {}", show(s)),
        Value::Number(n) => format!("the number {n}"),
        Value::Bool(b) => format!("{b}"),
        other => kind_of(other).to_string(),
    }
}

/// An http(s) URL with a host and no credentials. The message never repeats the URL (webhook
/// URLs carry tokens).
pub(crate) fn check_http_url(s: &str) -> Result<(), String> {
    let u = reqwest::Url::parse(s.trim()).map_err(|e| format!("not a valid URL ({e})"))?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err(format!(
            "unsupported URL scheme '{}': use http or https",
            u.scheme()
        ));
    }
    if u.host_str().is_none_or(str::is_empty) {
        return Err("the URL has no host".to_string());
    }
    if !u.username().is_empty() || u.password().is_some() {
        return Err("credentials in the URL (user:pass@) are not accepted".to_string());
    }
    Ok(())
}

/// What the agents and jobs may name: every declared source, and the ones with errors (a
/// reference to those is told so, not "unknown").
#[derive(Debug, Default, Clone)]
pub(crate) struct ToolNames {
    pub(super) servers: BTreeSet<String>,
    pub(super) commands: BTreeSet<String>,
    pub(super) broken: BTreeSet<String>,
}

impl ToolNames {
    /// The names of sources that validated (a pass over the jobs alone, after the sections
    /// were checked).
    pub(crate) fn of(tools: &ToolSettings) -> ToolNames {
        ToolNames {
            servers: tools.mcp_servers.keys().cloned().collect(),
            commands: tools.command_tools.keys().cloned().collect(),
            broken: BTreeSet::new(),
        }
    }
}

//! The validation rules of the jobs file: a parsed [`Value`] → `Settings` and
//! `JobDef`s with defaults applied, plus every problem found, each tied to a key path.
//!
//! Owns: the schema (accepted keys, types, ranges from `bounds`, references between sections)
//! and the defaults. Must not touch: source positions (the caller locates paths in the parsed
//! `yaml::Document`), files, the environment beyond asking whether an API-key variable is set
//! (never its value), clocks.
//!
//! Layout: this module holds the checker, its shared helpers and the document's top level;
//! `scalars` reads typed values (strings, booleans, bounded numbers, name lists), `settings` the
//! `defaults`/`budget`/`pricing`/`agents`/`delivery` sections, `jobs` the job list (one function
//! per group of keys), `schedule` the `schedule:` key in both forms.
//!
//! Reading strategy: every section is checked even after an earlier error, so one `validate` run
//! reports everything. A bad value records an error and the default is used so later checks can
//! go on; the result is discarded by the caller whenever any error was recorded.

use super::Severity;
use super::yaml::{Mapping, Seg, Target, Value, key_text};
use crate::model::Settings;

mod after;
#[cfg(test)]
pub(super) use after::AFTER_KEYS;
pub use after::{cycle_text, find_cycle, find_cycle_by};
mod calendars;
mod jobs;
pub(crate) use jobs::{JobNames, JobsRun};
mod overlap;
mod scalars;
mod schedule;
mod settings;
mod tools;
pub(crate) use tools::ToolNames;
#[cfg(test)]
pub(super) use tools::{COMMAND_TOOL_KEYS, MCP_KEYS};

/// A problem before it has a source position.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    pub severity: Severity,
    pub path: Vec<Seg>,
    pub target: Target,
    pub message: String,
}

pub(super) const TOP_KEYS: &[&str] = &[
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
pub(super) const DEFAULT_KEYS: &[&str] = &[
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
pub(super) const CALENDAR_KEYS: &[&str] = &["weekdays", "dates", "file"];
pub(super) const BUDGET_KEYS: &[&str] = &["max_cost_usd", "period"];
pub(super) const PRICE_KEYS: &[&str] = &[
    "input",
    "output",
    "cached_input",
    "cache_read",
    "cache_write",
];
pub(super) const AGENT_KEYS: &[&str] = &[
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
pub(super) const SINK_KEYS: &[&str] = &["webhook", "file", "format"];
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
pub(super) const MONITOR_KEYS: &[&str] = &["command", "url", "allow_private"];
pub(super) const SCHEDULE_KEYS: &[&str] = &["kind", "every_seconds", "cron_expr", "tz", "at"];

/// The `defaults:` section after validation.
#[derive(Debug, Clone)]
pub(crate) struct Defaults {
    /// `None` when `defaults.tz` is bad: jobs that inherit it cannot be evaluated (the zone
    /// error is reported once, at `defaults.tz`).
    tz: Option<String>,
    timeout_seconds: f64,
    max_retries: u32,
    misfire_grace_seconds: Option<f64>,
    lease_seconds: f64,
    jitter_seconds: f64,
    overlap: crate::model::Overlap,
    /// `defaults.run_immediately`: jobs without their own run once when first stored.
    run_immediately: bool,
}

/// Validates one parsed document. `env_is_set` answers "is this API-key variable set and
/// non-empty" (the value itself is never asked for).
pub(crate) struct Checker<'e> {
    pub pending: Vec<Pending>,
    env_is_set: &'e dyn Fn(&str) -> bool,
    /// When set, an `at` instant or `until` at or before it is warned about (`validate`).
    pub now: Option<chrono::DateTime<chrono::Utc>>,
    /// The jobs file's directory: `calendars.*.file` paths are relative to it.
    pub base_dir: Option<std::path::PathBuf>,
    /// The calendars read from `calendars:` (valid ones only), by name.
    pub(super) calendars: std::collections::BTreeMap<String, crate::schedule::calendar::Calendar>,
    /// Calendars defined with errors (a job naming one is told so, not "unknown").
    pub(super) broken_calendars: std::collections::BTreeSet<String>,
    env_chars: Option<EnvChars<'e>>,
    /// The tool sources declared (`mcp_servers:`, `tools:`), for agents' and jobs' lists.
    pub(super) tool_names: tools::ToolNames,
    /// Some `after:` or `context_from` named a job not (yet) in the names: a one-pass check,
    /// whose names only hold the jobs read so far, is then redone with every name.
    pub(crate) unknown_job: bool,
}

/// "How many characters is this env var's value" (`None` = unset).
pub(crate) type EnvChars<'e> = &'e dyn Fn(&str) -> Option<usize>;

pub(super) fn key(base: &[Seg], k: &str) -> Vec<Seg> {
    let mut p = base.to_vec();
    p.push(Seg::Key(k.to_string()));
    p
}

pub(super) fn index(base: &[Seg], i: usize) -> Vec<Seg> {
    let mut p = base.to_vec();
    p.push(Seg::Index(i));
    p
}

/// `a string`, `a number`, … for "expected X, found Y" messages.
pub(super) fn kind_of(v: &Value) -> &'static str {
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

pub(super) fn valid_env_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Levenshtein distance, for "did you mean" on unknown keys.
pub(super) fn distance(a: &str, b: &str) -> usize {
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

pub(super) fn closest<'a>(word: &str, accepted: &[&'a str]) -> Option<&'a str> {
    accepted
        .iter()
        .map(|a| (distance(word, a), *a))
        .filter(|(d, a)| *d <= 2.max(a.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, a)| a)
}

/// Names joined by ", ", at most 12 of them (then "… and N more").
pub(super) fn list(names: impl IntoIterator<Item = impl AsRef<str>>) -> String {
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

    pub(super) fn push(&mut self, severity: Severity, path: Vec<Seg>, target: Target, msg: String) {
        self.pending.push(Pending {
            severity,
            path,
            target,
            message: msg,
        });
    }

    pub(super) fn error(&mut self, path: Vec<Seg>, msg: impl Into<String>) {
        self.push(Severity::Error, path, Target::Value, msg.into());
    }

    pub(super) fn error_at_key(&mut self, path: Vec<Seg>, msg: impl Into<String>) {
        self.push(Severity::Error, path, Target::Key, msg.into());
    }

    pub(super) fn warn(&mut self, path: Vec<Seg>, msg: impl Into<String>) {
        self.push(Severity::Warning, path, Target::Value, msg.into());
    }

    pub(super) fn error_count(&self) -> usize {
        self.pending
            .iter()
            .filter(|p| p.severity == Severity::Error)
            .count()
    }

    /// `v` must be a mapping; returns it, or records an error.
    pub(super) fn mapping<'v>(
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
    pub(super) fn check_keys(&mut self, m: &Mapping, path: &[Seg], accepted: &[&str]) {
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
                super::praisonai::hint(&name).filter(|_| accepted.contains(&"schedule"));
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
    pub(super) fn get<'v>(m: &'v Mapping, k: &str) -> Option<&'v Value> {
        m.get(k).filter(|v| !v.is_null())
    }

    /// Everything but the jobs: the top level and the sections every job refers to. Returns
    /// the settings, the defaults and the top mapping (`None`: not a mapping, recorded).
    pub(crate) fn top<'v>(&mut self, doc: &'v Value) -> Option<(Settings, Defaults, &'v Mapping)> {
        let root: &[Seg] = &[];
        let m = match doc {
            Value::Null => {
                self.error(
                    Vec::new(),
                    "the jobs file is empty: expected a mapping with a `jobs:` list",
                );
                return None;
            }
            Value::Mapping(m) => m,
            other => {
                self.error(
                    Vec::new(),
                    format!(
                        "expected a mapping with a `jobs:` list at the top level, found {}",
                        kind_of(other)
                    ),
                );
                return None;
            }
        };
        self.check_keys(m, root, TOP_KEYS);
        let defaults = self.defaults(m);
        let (budget, period) = self.budget(m);
        let pricing = self.pricing(m);
        // Before the agents: their `tools` name these sources.
        let tools = self.tool_sources(m);
        let agents = self.agents(m);
        self.no_provider_keys(&tools, &agents);
        let delivery = self.delivery(m);
        self.calendars = self.calendars_section(m);
        let settings = Settings {
            budget,
            period,
            pricing,
            agents,
            delivery,
            base_dir: None,
            tools,
        };
        Some((settings, defaults, m))
    }
}

/// "a string \"abc\"", "a number 3", … for type errors.
pub(super) fn describe_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("the string {}", show(s)),
        Value::Number(n) => format!("the number {n}"),
        Value::Bool(b) => format!("{b}"),
        other => kind_of(other).to_string(),
    }
}

/// An http(s) URL with a host and no credentials. The message never repeats the URL (webhook
/// URLs carry tokens).
pub(super) fn check_http_url(s: &str) -> Result<(), String> {
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

//! The validation rules of the jobs file (SPEC §2): a parsed `serde_yaml::Value` → `Settings` and
//! `JobDef`s with defaults applied, plus every problem found, each tied to a key path.
//!
//! Owns: the schema (accepted keys, types, ranges, references between sections) and the defaults.
//! Must not touch: source positions (see `locate`), files, the environment beyond asking whether
//! an API-key variable is set (never its value), clocks.
//!
//! Reading strategy: every section is checked even after an earlier error, so one `validate` run
//! reports everything. A bad value records an error and the default is used so later checks can
//! go on; the result is discarded by the caller whenever any error was recorded.

use std::collections::{BTreeMap, HashMap};

use serde_yaml::{Mapping, Value};

use super::locate::{Seg, Target};
use super::{Severity, defaults};
use crate::model::{
    Action, AgentDef, Budget, BudgetPeriod, Gate, JobDef, MonitorSource, OnMissingContext, Price,
    Provider, Settings, SinkDef, WebhookFormat,
};
use crate::schedule::{self, CronSchedule, ScheduleSpec};

/// A problem before it has a source position.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    pub severity: Severity,
    pub path: Vec<Seg>,
    pub target: Target,
    pub message: String,
}

const TOP_KEYS: &[&str] = &[
    "defaults", "budget", "pricing", "agents", "delivery", "jobs",
];
const DEFAULT_KEYS: &[&str] = &[
    "tz",
    "timeout_seconds",
    "max_retries",
    "misfire_grace_seconds",
    "lease_seconds",
];
const BUDGET_KEYS: &[&str] = &["max_cost_usd", "period"];
const PRICE_KEYS: &[&str] = &["input", "output"];
const AGENT_KEYS: &[&str] = &[
    "provider",
    "base_url",
    "api_key_env",
    "model",
    "instructions",
    "max_tokens",
    "temperature",
];
const SINK_KEYS: &[&str] = &["webhook", "file", "format"];
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
];
const MONITOR_KEYS: &[&str] = &["command", "url", "allow_private"];
const SCHEDULE_KEYS: &[&str] = &["kind", "every_seconds", "cron_expr", "tz", "at"];

/// The `defaults:` section after validation.
#[derive(Debug, Clone)]
struct Defaults {
    /// `None` when `defaults.tz` is bad: jobs that inherit it cannot be evaluated (the zone
    /// error is reported once, at `defaults.tz`).
    tz: Option<String>,
    timeout_seconds: f64,
    max_retries: u32,
    misfire_grace_seconds: Option<f64>,
    lease_seconds: f64,
}

/// Validates one parsed document. `env_is_set` answers "is this API-key variable set and
/// non-empty" (the value itself is never asked for); `env_chars`, when given, its length in
/// characters (keys too short to redact by value are warned about).
pub(crate) struct Checker<'e> {
    pub pending: Vec<Pending>,
    env_is_set: &'e dyn Fn(&str) -> bool,
    env_chars: Option<EnvChars<'e>>,
}

/// "How many characters is this env var's value" (`None` = unset).
pub(crate) type EnvChars<'e> = &'e dyn Fn(&str) -> Option<usize>;

fn key(base: &[Seg], k: &str) -> Vec<Seg> {
    let mut p = base.to_vec();
    p.push(Seg::Key(k.to_string()));
    p
}

fn index(base: &[Seg], i: usize) -> Vec<Seg> {
    let mut p = base.to_vec();
    p.push(Seg::Index(i));
    p
}

/// `a string`, `a number`, … for "expected X, found Y" messages.
fn kind_of(v: &Value) -> &'static str {
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

/// Mapping keys as text (`1: x` has key "1"); `None` for keys that are lists or mappings.
fn key_text(k: &Value) -> Option<String> {
    match k {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Null => Some("null".to_string()),
        _ => None,
    }
}

/// `[A-Za-z0-9._-]{1,64}`: job, agent and sink names.
pub(crate) fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn valid_env_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Levenshtein distance, for "did you mean" on unknown keys.
fn distance(a: &str, b: &str) -> usize {
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

fn closest<'a>(word: &str, accepted: &[&'a str]) -> Option<&'a str> {
    accepted
        .iter()
        .map(|a| (distance(word, a), *a))
        .filter(|(d, a)| *d <= 2.max(a.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, a)| a)
}

/// Names joined by ", ", at most 12 of them (then "… and N more").
fn list(names: impl IntoIterator<Item = impl AsRef<str>>) -> String {
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
            env_chars: None,
        }
    }

    /// Also check API-key values' lengths (see [`crate::text::MIN_SECRET_CHARS`]).
    pub fn with_env_chars(mut self, env_chars: EnvChars<'e>) -> Self {
        self.env_chars = Some(env_chars);
        self
    }

    fn push(&mut self, severity: Severity, path: Vec<Seg>, target: Target, msg: String) {
        self.pending.push(Pending {
            severity,
            path,
            target,
            message: msg,
        });
    }

    fn error(&mut self, path: Vec<Seg>, msg: impl Into<String>) {
        self.push(Severity::Error, path, Target::Value, msg.into());
    }

    fn error_at_key(&mut self, path: Vec<Seg>, msg: impl Into<String>) {
        self.push(Severity::Error, path, Target::Key, msg.into());
    }

    fn warn(&mut self, path: Vec<Seg>, msg: impl Into<String>) {
        self.push(Severity::Warning, path, Target::Value, msg.into());
    }

    fn error_count(&self) -> usize {
        self.pending
            .iter()
            .filter(|p| p.severity == Severity::Error)
            .count()
    }

    /// `v` must be a mapping; returns it, or records an error.
    fn mapping<'v>(&mut self, v: &'v Value, path: &[Seg], what: &str) -> Option<&'v Mapping> {
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

    /// Unknown keys are errors (SPEC §2); keys starting with `x-` are ignored.
    fn check_keys(&mut self, m: &Mapping, path: &[Seg], accepted: &[&str]) {
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
            let hint = match closest(&name, accepted) {
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
    fn get<'v>(m: &'v Mapping, k: &str) -> Option<&'v Value> {
        m.get(k).filter(|v| !v.is_null())
    }

    fn opt_str(&mut self, m: &Mapping, base: &[Seg], k: &str) -> Option<String> {
        match Self::get(m, k)? {
            Value::String(s) => Some(s.clone()),
            other => {
                let hint = if matches!(other, Value::Number(_) | Value::Bool(_)) {
                    " (quote it if you mean the text)"
                } else {
                    ""
                };
                self.error(
                    key(base, k),
                    format!("expected a string, found {}{hint}", describe_value(other)),
                );
                None
            }
        }
    }

    /// A string that must not be blank.
    fn opt_text(&mut self, m: &Mapping, base: &[Seg], k: &str) -> Option<String> {
        let s = self.opt_str(m, base, k)?;
        if s.trim().is_empty() {
            self.error(key(base, k), "must not be empty");
            return None;
        }
        Some(s)
    }

    fn opt_bool(&mut self, m: &Mapping, base: &[Seg], k: &str) -> Option<bool> {
        match Self::get(m, k)? {
            Value::Bool(b) => Some(*b),
            other => {
                self.error(
                    key(base, k),
                    format!("expected true or false, found {}", describe_value(other)),
                );
                None
            }
        }
    }

    /// A finite number `>= min` (or `> min` when `exclusive`).
    fn opt_f64(
        &mut self,
        m: &Mapping,
        base: &[Seg],
        k: &str,
        min: f64,
        exclusive: bool,
    ) -> Option<f64> {
        let v = Self::get(m, k)?;
        let bound = if exclusive {
            format!("greater than {min}")
        } else {
            format!("at least {min}")
        };
        let n = match v {
            Value::Number(n) => n.as_f64().filter(|x| x.is_finite()),
            _ => None,
        };
        match n {
            Some(x) if (exclusive && x > min) || (!exclusive && x >= min) => Some(x),
            Some(x) => {
                self.error(key(base, k), format!("must be {bound}, found {x}"));
                None
            }
            None => {
                self.error(
                    key(base, k),
                    format!("expected a number {bound}, found {}", describe_value(v)),
                );
                None
            }
        }
    }

    /// A duration in seconds: > 0 and at most a week (timeouts and leases; a larger value is a
    /// typo, and unbounded values would overflow the instants computed from them).
    fn opt_secs(&mut self, m: &Mapping, base: &[Seg], k: &str) -> Option<f64> {
        const MAX_SECS: f64 = 7.0 * 86_400.0;
        let x = self.opt_f64(m, base, k, 0.0, true)?;
        if x > MAX_SECS {
            self.error(
                key(base, k),
                format!("must be at most {MAX_SECS} (7 days), found {x}"),
            );
            return None;
        }
        Some(x)
    }

    /// A whole number in `min..=max`.
    fn opt_u64(&mut self, m: &Mapping, base: &[Seg], k: &str, min: u64, max: u64) -> Option<u64> {
        let v = Self::get(m, k)?;
        let n = match v {
            Value::Number(n) => n.as_u64(),
            _ => None,
        };
        match n {
            Some(x) if (min..=max).contains(&x) => Some(x),
            _ => {
                let range = if max == u64::MAX {
                    format!("a whole number ≥ {min}")
                } else {
                    format!("a whole number from {min} to {max}")
                };
                self.error(
                    key(base, k),
                    format!("expected {range}, found {}", describe_value(v)),
                );
                None
            }
        }
    }

    /// `misfire_grace_seconds`: a number ≥ 0, a numeric string ("600"), or null. Anything else
    /// is a *warning* and means null (SPEC §2.1, §5). `None` = key absent.
    fn grace(&mut self, m: &Mapping, base: &[Seg]) -> Option<Option<f64>> {
        let k = "misfire_grace_seconds";
        let v = m.get(k)?;
        let parsed = match v {
            Value::Null => return Some(None),
            Value::Number(n) => n.as_f64(),
            Value::String(s) => s.trim().parse::<f64>().ok(),
            _ => None,
        };
        match parsed {
            Some(x) if x.is_finite() && x >= 0.0 => Some(Some(x)),
            Some(x) if x.is_finite() => {
                self.error(
                    key(base, k),
                    format!("must be a number of seconds ≥ 0 or null, found {x}"),
                );
                Some(None)
            }
            _ => {
                self.warn(
                    key(base, k),
                    format!(
                        "not a number of seconds ({}); treated as null (no grace limit: overdue \
                         slots coalesce into one run)",
                        describe_value(v)
                    ),
                );
                Some(None)
            }
        }
    }

    fn opt_name_list(&mut self, m: &Mapping, base: &[Seg], k: &str) -> Vec<(usize, String)> {
        let Some(v) = Self::get(m, k) else {
            return Vec::new();
        };
        let Value::Sequence(items) = v else {
            self.error(
                key(base, k),
                format!(
                    "expected a list of names such as [a, b], found {}",
                    describe_value(v)
                ),
            );
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            match item {
                Value::String(s) => out.push((i, s.clone())),
                other => self.error(
                    index(&key(base, k), i),
                    format!("expected a name, found {}", describe_value(other)),
                ),
            }
        }
        out
    }

    /// The whole document.
    pub fn document(&mut self, doc: &Value) -> Option<(Settings, Vec<Option<JobDef>>)> {
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
        let agents = self.agents(m);
        let delivery = self.delivery(m);
        let settings = Settings {
            budget,
            period,
            pricing,
            agents,
            delivery,
            base_dir: None,
        };
        let jobs = self.jobs(m, &defaults, &settings);
        Some((settings, jobs))
    }

    fn defaults(&mut self, top: &Mapping) -> Defaults {
        let mut d = Defaults {
            tz: Some(defaults::TZ.to_string()),
            timeout_seconds: defaults::TIMEOUT_SECONDS,
            max_retries: defaults::MAX_RETRIES,
            misfire_grace_seconds: None,
            lease_seconds: defaults::LEASE_SECONDS,
        };
        let base = vec![Seg::Key("defaults".into())];
        let Some(v) = Self::get(top, "defaults") else {
            return d;
        };
        let Some(m) = self.mapping(v, &base, "`defaults`") else {
            return d;
        };
        self.check_keys(m, &base, DEFAULT_KEYS);
        if let Some(tz) = self.opt_str(m, &base, "tz") {
            match schedule::parse_tz(&tz) {
                Ok(z) => d.tz = Some(z.name().to_string()),
                Err(e) => {
                    self.error(key(&base, "tz"), e.to_string());
                    d.tz = None;
                }
            }
        }
        if let Some(x) = self.opt_secs(m, &base, "timeout_seconds") {
            d.timeout_seconds = x;
        }
        if let Some(x) = self.opt_u64(m, &base, "max_retries", 1, 100) {
            d.max_retries = x as u32;
        }
        if let Some(g) = self.grace(m, &base) {
            d.misfire_grace_seconds = g;
        }
        if let Some(x) = self.opt_secs(m, &base, "lease_seconds") {
            d.lease_seconds = x;
        }
        d
    }

    /// Absent → $1.00/day; `budget: null` → disabled; `max_cost_usd: null` → disabled, but
    /// `period` still sets the period of per-job `max_cost_usd`.
    fn budget(&mut self, top: &Mapping) -> (Option<Budget>, BudgetPeriod) {
        let default = Budget {
            max_cost_usd: defaults::BUDGET_USD,
            period: BudgetPeriod::Day,
        };
        let base = vec![Seg::Key("budget".into())];
        let v = match top.get("budget") {
            None => return (Some(default), BudgetPeriod::Day),
            Some(Value::Null) => return (None, BudgetPeriod::Day),
            Some(v) => v,
        };
        let Some(m) = self.mapping(v, &base, "`budget` (or null to disable it)") else {
            return (Some(default), BudgetPeriod::Day);
        };
        self.check_keys(m, &base, BUDGET_KEYS);
        let period = match self.opt_str(m, &base, "period") {
            None => BudgetPeriod::Day,
            Some(p) => match p.trim().to_ascii_lowercase().as_str() {
                "day" => BudgetPeriod::Day,
                "week" => BudgetPeriod::Week,
                "month" => BudgetPeriod::Month,
                "total" => BudgetPeriod::Total,
                _ => {
                    self.error(
                        key(&base, "period"),
                        format!("unknown period {}: use day, week, month or total", show(&p)),
                    );
                    BudgetPeriod::Day
                }
            },
        };
        let budget = match m.get("max_cost_usd") {
            Some(Value::Null) => None,
            None => Some(Budget {
                max_cost_usd: defaults::BUDGET_USD,
                period,
            }),
            Some(_) => self
                .opt_f64(m, &base, "max_cost_usd", 0.0, false)
                .map(|max_cost_usd| Budget {
                    max_cost_usd,
                    period,
                }),
        };
        (budget, period)
    }

    /// The named entries of a top-level `section:` mapping (`agents`, `delivery`, `pricing`): each
    /// name with its key path and value. Non-text keys are reported, `x-*` keys skipped, and with
    /// `check_name` an invalid name is reported (the entry is still returned, so its body gets
    /// checked too).
    fn named_entries<'m>(
        &mut self,
        top: &'m Mapping,
        section: &str,
        shape: &str,
        noun: &str,
        check_name: bool,
    ) -> Vec<(String, Vec<Seg>, &'m Value)> {
        let base = vec![Seg::Key(section.into())];
        let Some(v) = Self::get(top, section) else {
            return Vec::new();
        };
        let Some(m) = self.mapping(v, &base, &format!("`{section}` ({shape})")) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (k, v) in m {
            let Some(name) = key_text(k) else {
                self.error(
                    base.clone(),
                    format!("{noun} names must be plain text keys"),
                );
                continue;
            };
            if name.starts_with("x-") {
                continue;
            }
            let p = key(&base, &name);
            if check_name && !valid_name(&name) {
                self.error_at_key(
                    p.clone(),
                    format!(
                        "invalid {noun} name {}: use 1–64 characters from A-Z a-z 0-9 . _ -",
                        show(&name)
                    ),
                );
            }
            out.push((name, p, v));
        }
        out
    }

    fn pricing(&mut self, top: &Mapping) -> BTreeMap<String, Price> {
        let mut out = BTreeMap::new();
        for (model, p, v) in self.named_entries(
            top,
            "pricing",
            "model name → {input, output}",
            "model",
            false,
        ) {
            let Some(pm) = self.mapping(v, &p, "a price such as {input: 0.15, output: 0.60}")
            else {
                continue;
            };
            self.check_keys(pm, &p, PRICE_KEYS);
            let input = self.opt_f64(pm, &p, "input", 0.0, false);
            let output = self.opt_f64(pm, &p, "output", 0.0, false);
            for (name, got) in [("input", input), ("output", output)] {
                if got.is_none() && Self::get(pm, name).is_none() {
                    self.error(
                        p.clone(),
                        format!("missing required key `{name}` (USD per 1M tokens)"),
                    );
                }
            }
            if let (Some(input), Some(output)) = (input, output) {
                out.insert(model, Price { input, output });
            }
        }
        out
    }

    fn agents(&mut self, top: &Mapping) -> BTreeMap<String, AgentDef> {
        let mut out = BTreeMap::new();
        for (name, p, v) in
            self.named_entries(top, "agents", "agent name → settings", "agent", true)
        {
            if let Some(a) = self.agent(&name, v, &p) {
                out.insert(name, a);
            }
        }
        out
    }

    fn agent(&mut self, name: &str, v: &Value, p: &[Seg]) -> Option<AgentDef> {
        let m = self.mapping(v, p, "an agent")?;
        self.check_keys(m, p, AGENT_KEYS);
        let provider = match self.opt_str(m, p, "provider") {
            None => Provider::Openai,
            Some(s) => match s.trim().to_ascii_lowercase().as_str() {
                "openai" => Provider::Openai,
                "anthropic" => Provider::Anthropic,
                _ => {
                    self.error(
                        key(p, "provider"),
                        format!(
                            "unknown provider {}: use openai (any OpenAI-compatible \
                             /chat/completions API) or anthropic",
                            show(&s)
                        ),
                    );
                    Provider::Openai
                }
            },
        };
        let base_url = match self.opt_text(m, p, "base_url") {
            // Empty = the provider default, or $OPENAI_BASE_URL / $ANTHROPIC_BASE_URL at run time.
            None => String::new(),
            Some(u) => {
                if let Err(e) = check_http_url(&u) {
                    self.error(key(p, "base_url"), e);
                }
                u.trim().trim_end_matches('/').to_string()
            }
        };
        let api_key_env = match self.opt_text(m, p, "api_key_env") {
            None => match provider {
                Provider::Openai => "OPENAI_API_KEY".to_string(),
                Provider::Anthropic => "ANTHROPIC_API_KEY".to_string(),
            },
            Some(s) => {
                if !valid_env_name(&s) {
                    // Never echo the value: it may be a key pasted in by mistake.
                    self.error(
                        key(p, "api_key_env"),
                        "must be the *name* of an environment variable \
                         ([A-Za-z_][A-Za-z0-9_]*, e.g. OPENAI_API_KEY), never the key itself",
                    );
                }
                s
            }
        };
        let model = self.opt_text(m, p, "model");
        if model.is_none() && Self::get(m, "model").is_none() {
            self.error(
                p.to_vec(),
                format!("agent '{name}' is missing required key `model` (e.g. model: gpt-4o-mini)"),
            );
        }
        let instructions = self.opt_str(m, p, "instructions").unwrap_or_default();
        let max_tokens = self
            .opt_u64(m, p, "max_tokens", 1, u32::MAX as u64)
            .map(|x| x as u32);
        let temperature = self.opt_f64(m, p, "temperature", 0.0, false);
        if let Some(t) = temperature.filter(|t| *t > 2.0) {
            self.error(
                key(p, "temperature"),
                format!("must be between 0 and 2, found {t}"),
            );
        }
        Some(AgentDef {
            name: name.to_string(),
            provider,
            base_url,
            api_key_env,
            model: model?,
            instructions,
            max_tokens,
            temperature,
        })
    }

    fn delivery(&mut self, top: &Mapping) -> BTreeMap<String, SinkDef> {
        let mut out = BTreeMap::new();
        for (name, p, v) in self.named_entries(top, "delivery", "sink name → sink", "sink", true)
        {
            let Some(sm) = self.mapping(
                v,
                &p,
                "a sink such as {webhook: URL, format: slack} or {file: PATH}",
            ) else {
                continue;
            };
            self.check_keys(sm, &p, SINK_KEYS);
            let webhook = self.opt_text(sm, &p, "webhook");
            let file = self.opt_text(sm, &p, "file");
            let format = match self.opt_str(sm, &p, "format") {
                None => None,
                Some(f) => match f.trim().to_ascii_lowercase().as_str() {
                    "json" => Some(WebhookFormat::Json),
                    "slack" => Some(WebhookFormat::Slack),
                    "discord" => Some(WebhookFormat::Discord),
                    _ => {
                        self.error(
                            key(&p, "format"),
                            format!("unknown format {}: use json, slack or discord", show(&f)),
                        );
                        None
                    }
                },
            };
            let sink = match (webhook, file) {
                (Some(_), Some(_)) => {
                    self.error(
                        key(&p, "file"),
                        "`webhook` and `file` are mutually exclusive: a sink is one or the other",
                    );
                    None
                }
                (Some(url), None) => {
                    if let Err(e) = check_http_url(&url) {
                        self.error(key(&p, "webhook"), e);
                    }
                    Some(SinkDef::Webhook {
                        name: name.clone(),
                        url: url.trim().to_string(),
                        format: format.unwrap_or_default(),
                    })
                }
                (None, Some(path)) => {
                    if Self::get(sm, "format").is_some() {
                        self.error(
                            key(&p, "format"),
                            "`format` applies to `webhook` sinks only; a `file` sink writes \
                             one JSON line per delivery",
                        );
                    }
                    Some(SinkDef::File {
                        name: name.clone(),
                        path,
                    })
                }
                (None, None) => {
                    if Self::get(sm, "webhook").is_none() && Self::get(sm, "file").is_none() {
                        self.error(
                            p.clone(),
                            format!("sink '{name}' needs `webhook: URL` or `file: PATH`"),
                        );
                    }
                    None
                }
            };
            if let Some(s) = sink {
                out.insert(name, s);
            }
        }
        out
    }

    fn jobs(&mut self, top: &Mapping, d: &Defaults, s: &Settings) -> Vec<Option<JobDef>> {
        let base = vec![Seg::Key("jobs".into())];
        let items = match top.get("jobs") {
            None => {
                self.error(
                    Vec::new(),
                    "missing required key `jobs` (a list of jobs; `jobs: []` for none)",
                );
                return Vec::new();
            }
            Some(Value::Null) => return Vec::new(),
            Some(Value::Sequence(items)) => items,
            Some(other) => {
                self.error(
                    base,
                    format!(
                        "expected a list of jobs (`- name: …` items), found {}",
                        kind_of(other)
                    ),
                );
                return Vec::new();
            }
        };
        // Pre-pass: names, for duplicate and `context_from` checks.
        let mut first_index: HashMap<String, usize> = HashMap::new();
        for (i, item) in items.iter().enumerate() {
            if let Some(Value::String(n)) = item.as_mapping().and_then(|m| m.get("name")) {
                first_index.entry(n.clone()).or_insert(i);
            }
        }
        let mut used_agents: BTreeMap<String, String> = BTreeMap::new();
        let mut unpriced_warned = std::collections::BTreeSet::new();
        let prices = crate::cost::PriceTable::from_settings(s);
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let p = index(&base, i);
            let before = self.error_count();
            let job = self.job(item, &p, i, d, s, &first_index);
            if let Some(j) = &job
                && let Some(a) = j.agent_name()
            {
                used_agents
                    .entry(a.to_string())
                    .or_insert_with(|| j.name.clone());
                // SPEC §11: under a budget an unknown model is never called.
                if let Some(def) = s.agents.get(a)
                    && crate::cost::under_budget(s, j.max_cost_usd)
                    && !prices.knows(&def.model)
                    && unpriced_warned.insert(a.to_string())
                {
                    let ap = vec![Seg::Key("agents".into()), Seg::Key(a.to_string())];
                    self.warn(
                        key(&ap, "model"),
                        format!(
                            "runs of job '{}' will fail: {}",
                            j.name,
                            crate::cost::unpriced_under_budget(&def.model)
                        ),
                    );
                }
            }
            out.push(if self.error_count() == before {
                job
            } else {
                None
            });
        }
        for (agent, job) in used_agents {
            let Some(def) = s.agents.get(&agent) else {
                continue;
            };
            let short = self
                .env_chars
                .and_then(|f| f(&def.api_key_env))
                .filter(|n| *n > 0 && *n < crate::text::MIN_SECRET_CHARS);
            if let Some(n) = short {
                let p = vec![Seg::Key("agents".into()), Seg::Key(agent.clone())];
                self.warn(
                    key(&p, "api_key_env"),
                    format!(
                        "the value of {} is only {n} characters: too short to be redacted from \
                         results, history and sinks by value (keys of {} or more characters are)",
                        def.api_key_env,
                        crate::text::MIN_SECRET_CHARS
                    ),
                );
            }
            if !(self.env_is_set)(&def.api_key_env) {
                let p = vec![Seg::Key("agents".into()), Seg::Key(agent.clone())];
                self.warn(
                    key(&p, "api_key_env"),
                    format!(
                        "environment variable {} is not set: runs of job '{job}' (and any other \
                         job using agent '{agent}') will fail until it is",
                        def.api_key_env
                    ),
                );
            }
        }
        out
    }

    fn job(
        &mut self,
        v: &Value,
        p: &[Seg],
        i: usize,
        d: &Defaults,
        s: &Settings,
        first_index: &HashMap<String, usize>,
    ) -> Option<JobDef> {
        let m = self.mapping(v, p, "a job")?;
        self.check_keys(m, p, JOB_KEYS);

        let name = self.opt_str(m, p, "name");
        match &name {
            None => {
                if Self::get(m, "name").is_none() {
                    self.error(p.to_vec(), "missing required key `name`");
                }
            }
            Some(n) => {
                if !valid_name(n) {
                    self.error(
                        key(p, "name"),
                        format!(
                            "invalid job name {}: use 1–64 characters from A-Z a-z 0-9 . _ -",
                            show(n)
                        ),
                    );
                } else if let Some(&first) = first_index.get(n)
                    && first != i
                {
                    self.error(
                        key(p, "name"),
                        format!(
                            "duplicate job name '{n}': jobs[{first}] already uses it; names \
                             must be unique"
                        ),
                    );
                }
            }
        }

        // A bad schedule does not stop the other checks; `tz` is `None` when the zone itself
        // is bad (reported where it was written), so zone-dependent checks are skipped.
        let (sched, tz) = self.schedule(m, p, d);

        // Action: exactly one of `agent` / `command`.
        let agent = self.opt_text(m, p, "agent");
        let command = self.opt_text(m, p, "command");
        let message = self.opt_str(m, p, "message");
        let command_timeout = self.opt_secs(m, p, "command_timeout_seconds");
        let has = |k: &str| Self::get(m, k).is_some();
        let agent = match agent {
            Some(a) if !s.agents.contains_key(&a) => {
                let known = if s.agents.is_empty() {
                    "no agents are defined under `agents:`".to_string()
                } else {
                    format!("defined agents: {}", list(s.agents.keys()))
                };
                self.error(
                    key(p, "agent"),
                    format!("unknown agent {}; {known}", show(&a)),
                );
                None
            }
            other => other,
        };
        let action = match (has("agent"), has("command")) {
            (true, true) => {
                self.error_at_key(
                    key(p, "command"),
                    "`agent` and `command` are mutually exclusive: a job either asks an agent \
                     or runs a shell command, keep one",
                );
                None
            }
            (false, false) => {
                self.error(
                    p.to_vec(),
                    "missing `agent` or `command`: a job needs exactly one (an `agents:` name, \
                     or a shell command)",
                );
                None
            }
            (true, false) => {
                if command_timeout.is_some() {
                    self.warn(
                        key(p, "command_timeout_seconds"),
                        "ignored: this is an agent job (use timeout_seconds)",
                    );
                }
                agent.map(|agent| Action::Agent {
                    agent,
                    message: message.unwrap_or_default(),
                })
            }
            (false, true) => {
                if message.as_deref().is_some_and(|m| !m.is_empty()) {
                    self.warn(
                        key(p, "message"),
                        "ignored: a `command` job delivers its command's output, not a prompt",
                    );
                }
                command.map(|c| Action::Command {
                    command: c,
                    timeout_seconds: command_timeout.unwrap_or(defaults::COMMAND_TIMEOUT_SECONDS),
                })
            }
        };

        // Gate: `monitor` xor `pre_run`.
        let monitor = match Self::get(m, "monitor") {
            None => None,
            Some(mv) => self.monitor(mv, &key(p, "monitor")),
        };
        let pre_run = self.opt_text(m, p, "pre_run");
        let gate = if has("monitor") && has("pre_run") {
            self.error_at_key(
                key(p, "pre_run"),
                "`monitor` and `pre_run` are mutually exclusive: a job has at most one gate",
            );
            None
        } else if let Some(source) = monitor {
            Some(Gate::Monitor { source })
        } else {
            pre_run.map(|command| Gate::PreRun { command })
        };

        // context_from: names of other jobs in this file.
        let mut context_from = Vec::new();
        for (j, n) in self.opt_name_list(m, p, "context_from") {
            if first_index.contains_key(&n) {
                context_from.push(n);
            } else {
                self.error(
                    index(&key(p, "context_from"), j),
                    format!(
                        "unknown job {} in context_from; jobs in this file: {}",
                        show(&n),
                        list(
                            first_index
                                .keys()
                                .collect::<std::collections::BTreeSet<_>>()
                        )
                    ),
                );
            }
        }
        let context_max_chars = self
            .opt_u64(m, p, "context_max_chars", 1, u32::MAX as u64)
            .map(|x| x as usize)
            .unwrap_or(defaults::CONTEXT_MAX_CHARS);
        let on_missing_context = match self.opt_str(m, p, "on_missing_context") {
            None => OnMissingContext::Run,
            Some(x) => match x.trim().to_ascii_lowercase().as_str() {
                "run" => OnMissingContext::Run,
                "skip" => OnMissingContext::Skip,
                _ => {
                    self.error(
                        key(p, "on_missing_context"),
                        format!("unknown value {}: use run or skip", show(&x)),
                    );
                    OnMissingContext::Run
                }
            },
        };

        let misfire_grace_seconds = match self.grace(m, p) {
            None => d.misfire_grace_seconds,
            Some(g) => g,
        };

        let max_runs = self.opt_u64(m, p, "max_runs", 1, u64::MAX);
        let once = self.opt_bool(m, p, "once").unwrap_or(false);
        let max_runs = match (once, max_runs) {
            (true, Some(n)) if n != 1 => {
                self.error_at_key(
                    key(p, "once"),
                    format!(
                        "`once: true` means `max_runs: 1`, but `max_runs` is {n}; keep one of them"
                    ),
                );
                Some(n)
            }
            (true, _) => Some(1),
            (false, x) => x,
        };

        let until = match self.opt_str(m, p, "until") {
            None => None,
            Some(u) => match tz.as_deref().map(schedule::parse_tz) {
                None | Some(Err(_)) => None,
                Some(Ok(zone)) => match schedule::grammar::parse_at(&u, zone) {
                    Ok(t) => Some(t),
                    Err(e) => {
                        self.error(
                            key(p, "until"),
                            format!("{e} (the job's zone is {})", zone.name()),
                        );
                        None
                    }
                },
            },
        };

        let run_immediately = self.opt_bool(m, p, "run_immediately").unwrap_or(false);
        let timeout_seconds = self
            .opt_secs(m, p, "timeout_seconds")
            .unwrap_or(d.timeout_seconds);
        let max_retries = self
            .opt_u64(m, p, "max_retries", 1, 100)
            .map(|x| x as u32)
            .unwrap_or(d.max_retries);
        let lease_seconds = self
            .opt_secs(m, p, "lease_seconds")
            .unwrap_or(d.lease_seconds);
        let max_cost_usd = self.opt_f64(m, p, "max_cost_usd", 0.0, false);

        let mut deliver = Vec::new();
        for (j, n) in self.opt_name_list(m, p, "deliver") {
            if s.delivery.contains_key(&n) {
                deliver.push(n);
            } else {
                let known = if s.delivery.is_empty() {
                    "no sinks are defined under `delivery:`".to_string()
                } else {
                    format!("defined sinks: {}", list(s.delivery.keys()))
                };
                self.error(
                    index(&key(p, "deliver"), j),
                    format!("unknown sink {}; {known}", show(&n)),
                );
            }
        }
        let alert_after_failures = self
            .opt_u64(m, p, "alert_after_failures", 1, u32::MAX as u64)
            .map(|x| x as u32)
            .unwrap_or(1);
        let enabled = self.opt_bool(m, p, "enabled").unwrap_or(true);
        let mut env_passthrough = Vec::new();
        for (j, n) in self.opt_name_list(m, p, "env_passthrough") {
            if valid_env_name(&n) {
                env_passthrough.push(n);
            } else {
                self.error(
                    index(&key(p, "env_passthrough"), j),
                    "expected the name of an environment variable ([A-Za-z_][A-Za-z0-9_]*)",
                );
            }
        }
        let tags: Vec<String> = self
            .opt_name_list(m, p, "tags")
            .into_iter()
            .map(|(_, t)| t)
            .collect();

        let (schedule, schedule_text) = sched?;
        Some(JobDef {
            name: name?,
            schedule,
            schedule_text,
            tz: tz?,
            action: action?,
            gate,
            context_from,
            context_max_chars,
            on_missing_context,
            misfire_grace_seconds,
            max_runs,
            until,
            run_immediately,
            timeout_seconds,
            max_retries,
            lease_seconds,
            max_cost_usd,
            deliver,
            alert_after_failures,
            enabled,
            env_passthrough,
            tags,
        })
    }

    fn monitor(&mut self, v: &Value, p: &[Seg]) -> Option<MonitorSource> {
        let m = self.mapping(
            v,
            p,
            "a monitor such as {command: \"df -h /\"} or {url: https://…}",
        )?;
        self.check_keys(m, p, MONITOR_KEYS);
        let command = self.opt_text(m, p, "command");
        let url = self.opt_text(m, p, "url");
        let allow_private = self.opt_bool(m, p, "allow_private");
        match (command, url) {
            (Some(_), Some(_)) => {
                self.error_at_key(
                    key(p, "url"),
                    "`command` and `url` are mutually exclusive: a monitor watches one source",
                );
                None
            }
            (Some(command), None) => {
                if allow_private.is_some() {
                    self.error_at_key(
                        key(p, "allow_private"),
                        "`allow_private` applies to `url` monitors only",
                    );
                }
                Some(MonitorSource::Command { command })
            }
            (None, Some(url)) => {
                if let Err(e) = check_http_url(&url) {
                    self.error(key(p, "url"), e);
                }
                Some(MonitorSource::Url {
                    url: url.trim().to_string(),
                    allow_private: allow_private.unwrap_or(false),
                })
            }
            (None, None) => {
                if Self::get(m, "command").is_none() && Self::get(m, "url").is_none() {
                    self.error(
                        p.to_vec(),
                        "a monitor needs `command: \"…\"` or `url: https://…`",
                    );
                }
                None
            }
        }
    }

    /// The schedule with its display text, and the job's zone (`None` when the zone is bad).
    fn schedule(
        &mut self,
        m: &Mapping,
        p: &[Seg],
        d: &Defaults,
    ) -> (Option<(ScheduleSpec, String)>, Option<String>) {
        let sp = key(p, "schedule");
        let Some(v) = Self::get(m, "schedule") else {
            self.error(
                p.to_vec(),
                "missing required key `schedule` (e.g. \"every 5m\", \"0 7 * * *\", or \
                 {kind: cron, cron_expr: \"0 7 * * *\", tz: Europe/Berlin})",
            );
            return (None, d.tz.clone());
        };
        let text = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Mapping(sm) => return self.schedule_mapping(sm, &sp, d),
            other => {
                self.error(
                    sp,
                    format!(
                        "expected schedule text (\"every 5m\") or a mapping ({{kind: every, \
                         every_seconds: 300}}), found {}",
                        kind_of(other)
                    ),
                );
                return (None, d.tz.clone());
            }
        };
        // With a bad `defaults.tz` the text is still checked (in UTC) for its own problems.
        let tz = d.tz.clone();
        match schedule::parse_schedule(&text, tz.as_deref().unwrap_or(defaults::TZ)) {
            Ok(spec) => (Some((spec, text)), tz),
            Err(e) => {
                self.error(sp, format!("invalid schedule {}: {e}", show(&text)));
                (None, tz)
            }
        }
    }

    fn schedule_mapping(
        &mut self,
        m: &Mapping,
        sp: &[Seg],
        d: &Defaults,
    ) -> (Option<(ScheduleSpec, String)>, Option<String>) {
        self.check_keys(m, sp, SCHEDULE_KEYS);
        let mut tz_ok = d.tz.is_some();
        let tz = match self.opt_str(m, sp, "tz") {
            None => d.tz.clone().unwrap_or_default(),
            Some(t) => match schedule::parse_tz(&t) {
                Ok(z) => {
                    tz_ok = true;
                    z.name().to_string()
                }
                Err(e) => {
                    self.error(key(sp, "tz"), e.to_string());
                    tz_ok = false;
                    t
                }
            },
        };
        let zone = tz_ok.then(|| tz.clone());
        (self.schedule_kind(m, sp, &tz), zone)
    }

    fn schedule_kind(
        &mut self,
        m: &Mapping,
        sp: &[Seg],
        tz: &str,
    ) -> Option<(ScheduleSpec, String)> {
        let kind = self.opt_str(m, sp, "kind");
        let Some(kind) = kind else {
            if Self::get(m, "kind").is_none() {
                self.error(
                    sp.to_vec(),
                    "missing required key `kind`: use every, cron or at",
                );
            }
            return None;
        };
        let kind = kind.trim().to_ascii_lowercase();
        let fields: &[&str] = match kind.as_str() {
            "every" => &["every_seconds"],
            "cron" => &["cron_expr"],
            "at" => &["at"],
            _ => {
                self.error(
                    key(sp, "kind"),
                    format!(
                        "unknown schedule kind {}: use every, cron or at",
                        show(&kind)
                    ),
                );
                return None;
            }
        };
        for other in ["every_seconds", "cron_expr", "at"] {
            if !fields.contains(&other) && Self::get(m, other).is_some() {
                self.error_at_key(
                    key(sp, other),
                    format!(
                        "`{other}` does not apply to `kind: {kind}` (it uses `{}`)",
                        fields[0]
                    ),
                );
            }
        }
        let field = fields[0];
        if Self::get(m, field).is_none() {
            self.error(
                sp.to_vec(),
                format!("missing required key `{field}` for `kind: {kind}`"),
            );
            return None;
        }
        match kind.as_str() {
            "every" => {
                let n = self.opt_u64(m, sp, "every_seconds", 1, u64::MAX)?;
                Some((
                    ScheduleSpec::Every { every_seconds: n },
                    format!("every {n}s"),
                ))
            }
            "cron" => {
                let expr = self.opt_text(m, sp, "cron_expr")?;
                // A bad zone is reported where it was written; check the rest in UTC.
                let zone = schedule::parse_tz(tz).unwrap_or(chrono_tz::UTC);
                match CronSchedule::parse(&expr, zone) {
                    Ok(_) => Some((
                        ScheduleSpec::Cron {
                            expr: expr.trim().to_string(),
                            tz: tz.to_string(),
                        },
                        expr,
                    )),
                    Err(e) => {
                        self.error(key(sp, "cron_expr"), e.to_string());
                        None
                    }
                }
            }
            _ => {
                let at = self.opt_text(m, sp, "at")?;
                // A bad zone is reported where it was written; check the rest in UTC.
                let zone = schedule::parse_tz(tz).unwrap_or(chrono_tz::UTC);
                match schedule::grammar::parse_at(&at, zone) {
                    Ok(t) => Some((ScheduleSpec::At { at: t }, format!("at:{at}"))),
                    Err(e) => {
                        self.error(key(sp, "at"), format!("{e} (the job's zone is {tz})"));
                        None
                    }
                }
            }
        }
    }
}

/// "a string \"abc\"", "a number 3", … for type errors.
fn describe_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("the string {}", show(s)),
        Value::Number(n) => format!("the number {n}"),
        Value::Bool(b) => format!("{b}"),
        other => kind_of(other).to_string(),
    }
}

/// An http(s) URL with a host and no credentials. The message never repeats the URL (webhook
/// URLs carry tokens).
fn check_http_url(s: &str) -> Result<(), String> {
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

//! The jobs file (SPEC §2): YAML text → a validated [`JobsFile`], with every problem reported at
//! once as `file:line:column`, the key, and what would be accepted.
//!
//! Owns: all YAML parsing in the project (so serde_yaml can be swapped), defaults, validation.
//! Must not touch: the store, the engine, the clock.
//!
//! Layout: `check` holds the schema and the rules and works on a `serde_yaml::Value`
//! (paths only). serde_yaml has no value spans, so positions come afterwards, only when there
//! are problems: `marks` indexes every node's start mark in one libyaml pass (the parser
//! serde_yaml is built on, so the same marks), and `locate` (re-walking the text with a failing
//! `DeserializeSeed`, one parse per path) is the fallback and the test oracle for it.
//!
//! Decisions where SPEC §2 is silent (operators can rely on these):
//! - Defaults: `tz` UTC, `timeout_seconds` 300, `max_retries` 3 (total attempts, 1–100),
//!   `lease_seconds` 30, `misfire_grace_seconds` null, `command_timeout_seconds` 60,
//!   `context_max_chars` 4000, `alert_after_failures` 1, `enabled` true. `defaults:` accepts
//!   exactly the five keys the SPEC shows (`tz`, `timeout_seconds`, `max_retries`,
//!   `misfire_grace_seconds`, `lease_seconds`).
//! - A key written as `null` means "not given" (the default applies), except
//!   `misfire_grace_seconds: null` (explicitly no grace, overriding `defaults:`), `budget: null`
//!   (global budget disabled) and `budget.max_cost_usd: null` (global cap disabled while
//!   `budget.period` still sets the period of per-job `max_cost_usd`).
//! - Numbers are strict (a quoted "30" is an error) except `misfire_grace_seconds`, which the
//!   SPEC says accepts a numeric string; a non-numeric grace is a warning and means null, a
//!   negative grace is an error. Timeouts and leases must be > 0; costs and prices ≥ 0;
//!   `temperature` 0–2; counts are whole numbers ≥ 1.
//! - Agents: `provider` defaults to openai; `model` is required; `base_url` must be http(s) and
//!   loses a trailing `/`; `api_key_env` must look like an env var name (the message never echoes
//!   it, in case a key was pasted there). A missing key variable is a warning only for agents
//!   that some job uses.
//! - Sinks: exactly one of `webhook: URL` or `file: PATH`; `format` (json default) only with
//!   `webhook`. URL errors never repeat the URL (webhook URLs carry tokens).
//! - Jobs: `once: true` with `max_runs` other than 1 is an error naming both; `message` on a
//!   `command` job and `command_timeout_seconds` on an agent job are warnings (ignored).
//!   `context_from` may name the job itself (it then sees its own previous result).
//!   A numeric `schedule: 300` is handed to the grammar as the text "300".
//! - `schedule_text` is the string as written; for the mapping form it is `every {N}s`, the
//!   `cron_expr` as written, or `at:{at}`. A cron job's `tz` is the canonical IANA name.
//! - `x-*` keys are ignored in every mapping, including names under `agents`, `delivery` and
//!   `pricing`. `<<` merge keys are applied before validation; a problem inside merged content
//!   is located at the nearest enclosing node that exists in the text.
//! - `jobs:` is required; `jobs: []` or an empty `jobs:` means no jobs. An empty file is an error.
//! - A problem never stops the other checks: a job with a bad schedule still has its other keys
//!   checked; a bad zone still lets the schedule text be checked (in UTC) for its own problems,
//!   but jobs whose zone is bad (including one inherited from a bad `defaults.tz`) are invalid.
//! - Diagnostics are sorted by position; YAML syntax errors use the key `(yaml)`, problems with
//!   the whole document `(document)`.

use std::path::{Path, PathBuf};

use crate::model::{JobDef, JobsFile, Settings};

mod check;
mod locate;
mod marks;
#[cfg(test)]
mod tests;

/// Defaults applied where the jobs file is silent (see the module doc).
pub mod defaults {
    pub const TZ: &str = "UTC";
    pub const TIMEOUT_SECONDS: f64 = 300.0;
    pub const MAX_RETRIES: u32 = 3;
    pub const LEASE_SECONDS: f64 = 30.0;
    pub const COMMAND_TIMEOUT_SECONDS: f64 = 60.0;
    pub const CONTEXT_MAX_CHARS: usize = 4000;
    pub const BUDGET_USD: f64 = 1.0;
    pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
    pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Error,
    Warning,
}

/// One problem in a jobs file, located at `file:line:column` (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub severity: Severity,
    pub file: PathBuf,
    pub line: usize,
    pub column: usize,
    /// Dotted path of the key, e.g. `jobs[2].schedule`.
    pub key: String,
    /// What is wrong and what would be accepted.
    pub message: String,
}

impl std::fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(
            f,
            "{}:{}:{}: {sev}: {}: {}",
            self.file.display(),
            self.line,
            self.column,
            self.key,
            self.message
        )
    }
}

/// Every error (and warning) of a jobs file that failed validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors {
    pub diagnostics: Vec<Diagnostic>,
}

impl std::fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self
            .diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .count();
        write!(f, "{n} error(s) in the jobs file")?;
        for d in &self.diagnostics {
            write!(f, "\n{d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// A jobs file that validated, with its warnings.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub file: JobsFile,
    pub warnings: Vec<Diagnostic>,
}

/// Everything `validate` needs: settings, each job that validated on its own (`None` for jobs
/// with errors, in file order), and all diagnostics sorted by position.
#[derive(Debug, Clone)]
pub struct Checked {
    pub settings: Settings,
    pub jobs: Vec<Option<JobDef>>,
    pub diagnostics: Vec<Diagnostic>,
}

impl Checked {
    pub fn has_errors(&self) -> bool {
        self.diagnostics
            .iter()
            .any(|d| d.severity == Severity::Error)
    }

    /// The whole file, or every diagnostic when any is an error.
    pub fn into_result(self) -> Result<Loaded, ConfigErrors> {
        if self.has_errors() {
            return Err(ConfigErrors {
                diagnostics: self.diagnostics,
            });
        }
        Ok(Loaded {
            file: JobsFile {
                settings: self.settings,
                jobs: self.jobs.into_iter().flatten().collect(),
            },
            warnings: self.diagnostics,
        })
    }
}

/// Read and validate a jobs file.
///
/// Relative paths in the file are the operator's view from the file's own directory: that
/// directory becomes `settings.base_dir` (where commands run) and relative `file:` sink paths are
/// made absolute against it, so every process sharing the store agrees on them.
pub fn load_file(path: &Path) -> Result<Loaded, ConfigErrors> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let mut loaded = load_str(&text, path)?;
            let dir = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            if let Ok(dir) = std::fs::canonicalize(dir) {
                for sink in loaded.file.settings.delivery.values_mut() {
                    if let crate::model::SinkDef::File { path, .. } = sink
                        && Path::new(path.as_str()).is_relative()
                    {
                        *path = dir.join(path.as_str()).to_string_lossy().into_owned();
                    }
                }
                loaded.file.settings.base_dir = Some(dir.to_string_lossy().into_owned());
            }
            Ok(loaded)
        }
        Err(e) => Err(ConfigErrors {
            diagnostics: vec![unreadable(path, &e)],
        }),
    }
}

/// The diagnostic for a jobs file that cannot be read.
pub fn unreadable(path: &Path, e: &std::io::Error) -> Diagnostic {
    Diagnostic {
        severity: Severity::Error,
        file: path.to_path_buf(),
        line: 1,
        column: 1,
        key: "(file)".to_string(),
        message: format!("cannot read the jobs file {}: {e}", path.display()),
    }
}

/// Validate jobs-file text; `path` is only used in diagnostics.
pub fn load_str(text: &str, path: &Path) -> Result<Loaded, ConfigErrors> {
    check_str(text, path).into_result()
}

/// Validate jobs-file text, keeping the jobs that are valid even when others are not.
/// API-key variables are looked up in the process environment (presence only).
pub fn check_str(text: &str, path: &Path) -> Checked {
    check_str_with_env_values(text, path, &|name| std::env::var(name).ok())
}

/// [`check_str`] with an injected environment (values are only measured, never kept): also
/// warns about API-key values too short to redact.
pub fn check_str_with_env_values(
    text: &str,
    path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Checked {
    let is_set = |name: &str| env(name).is_some_and(|v| !v.is_empty());
    let chars = |name: &str| env(name).map(|v| v.trim().chars().count());
    check_inner(text, path, &is_set, Some(&chars))
}

/// [`check_str`] with an injected "is this env var set" predicate (for tests).
pub fn check_str_with_env(text: &str, path: &Path, env_is_set: &dyn Fn(&str) -> bool) -> Checked {
    check_inner(text, path, env_is_set, None)
}

fn check_inner(
    text: &str,
    path: &Path,
    env_is_set: &dyn Fn(&str) -> bool,
    env_chars: Option<check::EnvChars<'_>>,
) -> Checked {
    let empty = |diagnostics| Checked {
        settings: Settings::default(),
        jobs: Vec::new(),
        diagnostics,
    };
    let mut doc: serde_yaml::Value = match serde_yaml::from_str(text) {
        Ok(v) => v,
        Err(e) => return empty(vec![yaml_error(&e, path)]),
    };
    if let Err(e) = doc.apply_merge() {
        return empty(vec![yaml_error(&e, path)]);
    }
    let mut checker = check::Checker::new(env_is_set);
    if let Some(f) = env_chars {
        checker = checker.with_env_chars(f);
    }
    let parsed = checker.document(&doc);
    // One parse indexes every node's position; the per-path re-walk is only a fallback.
    let index = if checker.pending.is_empty() {
        None
    } else {
        marks::Marks::new(text)
    };
    let mut diagnostics: Vec<Diagnostic> = checker
        .pending
        .into_iter()
        .map(|p| {
            let (line, column) = match &index {
                Some(m) => m.locate_or_parent(&p.path, p.target),
                None => locate::locate_or_parent(text, &p.path, p.target),
            };
            Diagnostic {
                severity: p.severity,
                file: path.to_path_buf(),
                line,
                column,
                key: locate::render(&p.path),
                message: p.message,
            }
        })
        .collect();
    diagnostics.sort_by_key(|d| (d.line, d.column));
    match parsed {
        Some((settings, jobs)) => Checked {
            settings,
            jobs,
            diagnostics,
        },
        None => empty(diagnostics),
    }
}

fn yaml_error(e: &serde_yaml::Error, path: &Path) -> Diagnostic {
    let (line, column) = e.location().map_or((1, 1), |l| (l.line(), l.column()));
    let mut message = e.to_string();
    // serde_yaml appends the position we already print in front.
    for suffix in [
        format!(" at line {line} column {column}"),
        format!(", line: {line}, column: {column}"),
    ] {
        if let Some(stripped) = message.strip_suffix(&suffix) {
            message = stripped.to_string();
        }
    }
    Diagnostic {
        severity: Severity::Error,
        file: path.to_path_buf(),
        line,
        column,
        key: "(yaml)".to_string(),
        message: format!("invalid YAML: {message}"),
    }
}

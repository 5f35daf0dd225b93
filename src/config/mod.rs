//! The jobs file: YAML text → a validated [`JobsFile`], with every problem reported at
//! once as `file:line:column`, the key, and what would be accepted.
//!
//! Owns: all YAML parsing in the project (the parser crate is named only in `yaml`), the size
//! cap on reading the file, defaults, bounds, validation.
//! Must not touch: the store, the engine, the clock.
//!
//! Layout: `yaml` parses the text once (saphyr-parser events) into a value *and* the position of
//! every node as written, and enforces the structural limits (nesting, alias expansion, duplicate
//! keys); `check` holds the schema and the rules and works on that value (key paths only); the
//! paths of the problems found are then located in the same parsed document. `bounds` is the
//! table of every number's minimum and maximum, shared by `check` and [`check_bounds`].
//!
//! Job by job (so a file of 1 000 000 jobs fits in the memory of its text): `stream` checks a
//! plain `jobs:` list one item at a time, and [`prepare_file`] / [`validate_str_at`] hand the
//! valid jobs over one at a time; its module doc says how.
//!
//! Reading the file: [`read_text`] refuses anything that is not a regular file (a directory, a
//! FIFO, `/dev/zero`) and any file larger than the cap ([`DEFAULT_MAX_FILE_BYTES`], 256 MiB, or
//! `CRONSOLE_MAX_JOBS_FILE_BYTES`), reading at most cap + 1 bytes, so it never grows without
//! bound.
//!
//! Decisions (operators can rely on these; the guide's jobs-file reference lists them too):
//! - Defaults: `tz` UTC, `timeout_seconds` 300, `max_retries` 3 (total attempts, 1–100),
//!   `lease_seconds` 30, `misfire_grace_seconds` null, `command_timeout_seconds` 60,
//!   `context_max_chars` 4000, `alert_after_failures` 1, `enabled` true. `defaults:` accepts
//!   `tz`, `timeout_seconds`, `max_retries`, `misfire_grace_seconds`, `lease_seconds`,
//!   `jitter_seconds`, `overlap` (default `skip`) and `max_concurrent_runs` (only with
//!   `overlap: allow`, see `check/overlap.rs`).
//! - A key written as `null` means "not given" (the default applies), except
//!   `misfire_grace_seconds: null` (explicitly no grace, overriding `defaults:`), `budget: null`
//!   (global budget disabled) and `budget.max_cost_usd: null` (global cap disabled while
//!   `budget.period` still sets the period of per-job `max_cost_usd`).
//! - Numbers are strict (a quoted "30" is an error) except `misfire_grace_seconds`, which accepts a
//!   numeric string ("600", as files written for other schedulers often have it); a non-numeric
//!   grace is a warning and means null, a grace that is a number out of range (negative, `.inf`,
//!   beyond 100 years) is an error. Every number has the minimum and maximum of `bounds` (leases ≥
//!   1 s, timeouts ≥ 0.1 s, intervals ≤ 100 years, counts bounded, money finite and ≥ 0).
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

mod bounds;
mod check;
pub mod praisonai;
mod stream;
#[cfg(test)]
mod tests;
mod yaml;

pub use bounds::{OutOfBounds, check_bounds, check_job_bounds};
pub use check::{cycle_text, find_cycle, find_cycle_by};
use stream::*;
pub use stream::{Handover, Prepared, Validation, prepare_file, validate_str_at};

/// The jobs file size cap when `CRONSOLE_MAX_JOBS_FILE_BYTES` is not set: 256 MiB (a
/// 1 000 000-job file is about 80 MB).
pub const DEFAULT_MAX_FILE_BYTES: u64 = 256 * 1024 * 1024;

/// The environment variable that overrides [`DEFAULT_MAX_FILE_BYTES`] (a whole number of bytes).
pub const MAX_FILE_BYTES_ENV: &str = "CRONSOLE_MAX_JOBS_FILE_BYTES";

/// The bound numbers of the jobs file (the guide's jobs-file reference repeats them).
pub mod limits {
    pub use super::bounds::*;
    pub use super::yaml::{MAX_DEPTH, MAX_EXPANDED_NODES};
}

/// Defaults applied where the jobs file is silent (see the module doc).
pub mod defaults {
    /// Time zone of cron and `at` schedules.
    pub const TZ: &str = "UTC";
    /// `timeout_seconds`: the bound of each attempt.
    pub const TIMEOUT_SECONDS: f64 = 300.0;
    /// `max_retries`: attempts per run, the first included.
    pub const MAX_RETRIES: u32 = 3;
    /// `lease_seconds`.
    pub const LEASE_SECONDS: f64 = 30.0;
    /// `command_timeout_seconds` of a `command` action.
    pub const COMMAND_TIMEOUT_SECONDS: f64 = 60.0;
    /// `context_max_chars` of `context_from`.
    pub const CONTEXT_MAX_CHARS: usize = 4000;
    /// The global budget when `budget:` is absent.
    pub const BUDGET_USD: f64 = 1.0;
    /// An `openai` agent's `base_url` when absent.
    pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
    /// An `anthropic` agent's `base_url` when absent.
    pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
}

/// How bad a [`Diagnostic`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// The file is refused.
    Error,
    /// The file is accepted; the operator should look.
    Warning,
}

/// One problem in a jobs file, located at `file:line:column` (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// The jobs file (or the calendar file it names).
    pub file: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// 1-based column (characters).
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
    /// In file order.
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
    /// The settings and jobs, ready to `apply`.
    pub file: JobsFile,
    /// Warnings (the file is accepted).
    pub warnings: Vec<Diagnostic>,
}

/// Everything `validate` needs: settings, each job that validated on its own (`None` for jobs
/// with errors, in file order), and all diagnostics sorted by position.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The file's settings (defaults where it is silent).
    pub settings: Settings,
    /// One entry per job in file order; `None` where the job has errors.
    pub jobs: Vec<Option<JobDef>>,
    /// Errors and warnings, sorted by position.
    pub diagnostics: Vec<Diagnostic>,
}

impl Checked {
    /// Whether any diagnostic is an error.
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
    let text = read_text(path).map_err(|d| ConfigErrors {
        diagnostics: vec![d],
    })?;
    let mut loaded = load_str(&text, path)?;
    adjust_paths(path, &mut loaded.file.settings);
    Ok(loaded)
}

/// The file's directory becomes `base_dir`, and relative `file:` sinks and stdio servers'
/// `cwd` are made absolute against it (see [`load_file`]).
fn adjust_paths(path: &Path, settings: &mut Settings) {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if let Ok(dir) = std::fs::canonicalize(dir) {
        for sink in settings.delivery.values_mut() {
            if let crate::model::SinkDef::File { path, .. } = sink
                && Path::new(path.as_str()).is_relative()
            {
                *path = dir.join(path.as_str()).to_string_lossy().into_owned();
            }
        }
        for server in settings.tools.mcp_servers.values_mut() {
            if let crate::model::McpTransport::Stdio { cwd: Some(cwd), .. } = &mut server.transport
                && Path::new(cwd.as_str()).is_relative()
            {
                *cwd = dir.join(cwd.as_str()).to_string_lossy().into_owned();
            }
        }
        settings.base_dir = Some(dir.to_string_lossy().into_owned());
    }
}

/// The size cap in force: `CRONSOLE_MAX_JOBS_FILE_BYTES` when set, else
/// [`DEFAULT_MAX_FILE_BYTES`]. A value that is not a whole number ≥ 1 is an error naming it.
pub fn max_file_bytes() -> Result<u64, String> {
    match std::env::var(MAX_FILE_BYTES_ENV) {
        Err(std::env::VarError::NotPresent) => Ok(DEFAULT_MAX_FILE_BYTES),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(format!("{MAX_FILE_BYTES_ENV} is not valid text"))
        }
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(n) if n >= 1 => Ok(n),
            _ => Err(format!(
                "{MAX_FILE_BYTES_ENV} must be a whole number of bytes ≥ 1, found {}",
                check::show(&v)
            )),
        },
    }
}

/// The text of a jobs file, read with the size cap in force (see [`read_text_capped`]).
pub fn read_text(path: &Path) -> Result<String, Diagnostic> {
    let cap = max_file_bytes().map_err(|m| file_error(path, m))?;
    read_text_capped(path, cap)
}

/// The text of a jobs file of at most `cap` bytes. Only a regular file (or a symlink to one) is
/// read; a directory, FIFO, socket or device is refused before any byte is read, and at most
/// `cap + 1` bytes are ever read, so a file that grows while being read cannot exhaust memory.
pub fn read_text_capped(path: &Path, cap: u64) -> Result<String, Diagnostic> {
    use std::io::Read;
    let unreadable_here = |e: &std::io::Error| unreadable(path, e);
    let meta = std::fs::metadata(path).map_err(|e| unreadable_here(&e))?;
    if !meta.is_file() {
        let ft = meta.file_type();
        let what = if ft.is_dir() {
            "a directory"
        } else {
            use std::os::unix::fs::FileTypeExt;
            if ft.is_fifo() {
                "a FIFO"
            } else if ft.is_char_device() || ft.is_block_device() {
                "a device"
            } else if ft.is_socket() {
                "a socket"
            } else {
                "not a regular file"
            }
        };
        return Err(file_error(
            path,
            format!(
                "{} is {what}: the jobs file must be a regular file",
                path.display()
            ),
        ));
    }
    let too_big = |size: &str| {
        file_error(
            path,
            format!(
                "{} is {size} bytes, more than the jobs-file cap of {cap} bytes (raise it with \
                 {MAX_FILE_BYTES_ENV})",
                path.display()
            ),
        )
    };
    if meta.len() > cap {
        return Err(too_big(&meta.len().to_string()));
    }
    let file = std::fs::File::open(path).map_err(|e| unreadable_here(&e))?;
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| unreadable_here(&e))?;
    if bytes.len() as u64 > cap {
        return Err(too_big(&format!("more than {cap}")));
    }
    String::from_utf8(bytes).map_err(|e| {
        let before = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line = before.iter().filter(|b| **b == b'\n').count() + 1;
        let column = before.len()
            - before
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(0, |i| i + 1)
            + 1;
        Diagnostic {
            severity: Severity::Error,
            file: path.to_path_buf(),
            line,
            column,
            key: "(file)".to_string(),
            message: "the jobs file is not valid UTF-8 text".to_string(),
        }
    })
}

fn file_error(path: &Path, message: String) -> Diagnostic {
    Diagnostic {
        severity: Severity::Error,
        file: path.to_path_buf(),
        line: 1,
        column: 1,
        key: "(file)".to_string(),
        message,
    }
}

/// The diagnostic for a jobs file that cannot be read.
pub fn unreadable(path: &Path, e: &std::io::Error) -> Diagnostic {
    file_error(
        path,
        format!("cannot read the jobs file {}: {e}", path.display()),
    )
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
    check_inner(text, path, &is_set, Some(&chars), None)
}

/// [`check_str`] with an injected "is this env var set" predicate (for tests).
pub fn check_str_with_env(text: &str, path: &Path, env_is_set: &dyn Fn(&str) -> bool) -> Checked {
    check_inner(text, path, env_is_set, None, None)
}

/// [`check_str`] that also warns about an `at` instant or an `until` at or before `now` (the
/// job would never run, or never again). Only `validate` asks: a file loaded to run is checked
/// without a clock.
pub fn check_str_at(text: &str, path: &Path, now: chrono::DateTime<chrono::Utc>) -> Checked {
    let env = |name: &str| std::env::var(name).ok();
    let is_set = |name: &str| env(name).is_some_and(|v| !v.is_empty());
    let chars = |name: &str| env(name).map(|v| v.trim().chars().count());
    check_inner(text, path, &is_set, Some(&chars), Some(now))
}

fn check_inner(
    text: &str,
    path: &Path,
    env_is_set: &dyn Fn(&str) -> bool,
    env_chars: Option<check::EnvChars<'_>>,
    now: Option<chrono::DateTime<chrono::Utc>>,
) -> Checked {
    check_with(text, path, env_is_set, env_chars, now, false)
}

/// [`check_inner`]; `whole`: read the whole document even when its jobs could stream (the
/// reference the streaming check is tested against).
fn check_with(
    text: &str,
    path: &Path,
    env_is_set: &dyn Fn(&str) -> bool,
    env_chars: Option<check::EnvChars<'_>>,
    now: Option<chrono::DateTime<chrono::Utc>>,
    whole: bool,
) -> Checked {
    let mut checker = new_checker(path, env_is_set, env_chars, now);
    let mut jobs = Vec::new();
    let first = if whole {
        match yaml::Document::parse(text) {
            Ok(doc) => Ok(FirstPass::Whole(doc)),
            Err(e) => Ok(FirstPass::Failed(e)),
        }
    } else {
        match check_one_pass(text, path, &mut checker, &mut |j| jobs.push(j)) {
            OnePass::Done(c, _) => Err(c),
            OnePass::Fallback(first) => {
                // Nothing the one-pass check found stands.
                checker = new_checker(path, env_is_set, env_chars, now);
                jobs.clear();
                Ok(first)
            }
        }
    };
    let c = match first {
        Err(c) => c,
        Ok(first) => match first {
            FirstPass::Failed(e) => Checking::failed(yaml_error(e, path)),
            FirstPass::Whole(doc) => check_whole(&doc, path, &mut checker, &mut |j| jobs.push(j)),
            FirstPass::Streamed(skel, names) => {
                check_streamed(text, &skel, names, path, &mut checker, &mut |j| {
                    jobs.push(j)
                })
                .0
            }
        },
    };
    match c.parsed {
        Some((settings, _)) => Checked {
            settings,
            jobs,
            diagnostics: c.diagnostics,
        },
        None => Checked {
            settings: Settings::default(),
            jobs: Vec::new(),
            diagnostics: c.diagnostics,
        },
    }
}

fn new_checker<'e>(
    path: &Path,
    env_is_set: &'e dyn Fn(&str) -> bool,
    env_chars: Option<check::EnvChars<'e>>,
    now: Option<chrono::DateTime<chrono::Utc>>,
) -> check::Checker<'e> {
    let mut checker = check::Checker::new(env_is_set);
    checker.now = now;
    checker.base_dir = Some(match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    });
    if let Some(f) = env_chars {
        checker = checker.with_env_chars(f);
    }
    checker
}

/// Parse jobs-file text without checking it: the parser's share of [`check_str`], for the
/// `config_validate` benchmark. `true` when the text parses.
#[doc(hidden)]
pub fn parse_only(text: &str) -> bool {
    yaml::Document::parse(text).is_ok()
}

fn yaml_error(e: yaml::YamlError, path: &Path) -> Diagnostic {
    Diagnostic {
        severity: Severity::Error,
        file: path.to_path_buf(),
        line: e.line,
        column: e.column,
        key: "(yaml)".to_string(),
        message: format!("invalid YAML: {}", e.message),
    }
}

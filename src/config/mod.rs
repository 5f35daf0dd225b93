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
//! Job by job (so a file of 1 000 000 jobs fits in the memory of its text): when the top-level
//! `jobs:` is a plain list (no anchor on it, not brought in by an alias or a merge), the text is
//! parsed twice (often once: see below) and the list's items are never held together. The first
//! pass keeps everything else (the sections, with their positions) and every job's name
//! (duplicates, `context_from` and `after:` may name a later job); the second builds one job's
//! nodes, checks it, locates its diagnostics in them, hands its definition on and drops them. The
//! checks that need every job (`after:` cycles, `on: change` parents) keep only the valid jobs'
//! chains and a flag byte per job, and their positions are located while each chained job is at
//! hand. An item that holds an anchor stays (a later alias may name it). Any other shape — and an
//! item that expands beyond what an alias bomb check would allow so far — is read whole as before.
//! Both ways give the same diagnostics at the same positions and the same jobs (`tests/stream.rs`
//! holds one against the other). [`prepare_file`] validates a file this way and
//! [`Prepared::for_each_job`] then hands its jobs over one at a time (one more pass), which is what
//! `apply` uses: memory is the text plus a few dozen bytes per job. `validate` does the same
//! through [`validate_str_at`]: the jobs are counted, not held, and [`Validation::for_each_valid`]
//! hands the valid ones over afterwards.
//!
//! One parse instead of two (`check_one_pass`, the usual shape: `jobs:` written last, at
//! column 1, each job naming only earlier ones): the text before the `jobs:` line is parsed on
//! its own first (the sections, a few bytes), so the settings are known when the first job
//! arrives, and each job is checked against the names read so far. That check stands only
//! when it is provably what the two passes give: the whole text's skeleton equals the one read
//! ahead, the list streamed, and no `after:`/`context_from` named a job not read yet (a later
//! job or an unknown one, whose message lists every name). Otherwise its parse serves as the
//! names pass and the file is checked again as above; nothing it found is kept.
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
#[cfg(test)]
mod tests;
mod yaml;

pub use bounds::{OutOfBounds, check_bounds, check_job_bounds};
pub use check::{cycle_text, find_cycle, find_cycle_by};

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

/// The first reading of the text: either a YAML error, the whole document (a file whose
/// `jobs:` list cannot be streamed), or everything but the jobs plus every job's name.
enum FirstPass {
    Failed(yaml::YamlError),
    Whole(yaml::Document),
    Streamed(yaml::Document, check::JobNames),
}

fn first_pass(text: &str) -> FirstPass {
    let mut names = check::JobNames::default();
    let streamed = yaml::Document::parse_streaming(text, &mut |item| {
        names.add(item.index, &item.value);
        Ok(())
    });
    match streamed {
        Err(e) => FirstPass::Failed(e),
        Ok(Some(skel)) if skel.streamed() => FirstPass::Streamed(skel, names),
        Ok(Some(doc)) => FirstPass::Whole(doc),
        Ok(None) => match yaml::Document::parse(text) {
            Ok(doc) => FirstPass::Whole(doc),
            Err(e) => FirstPass::Failed(e),
        },
    }
}

/// What checking a file found, besides its jobs (handed over one at a time).
struct Checking {
    /// The settings and defaults (`None`: the document is not a mapping, or not YAML).
    parsed: Option<(Settings, check::Defaults)>,
    /// Errors and warnings, sorted by position.
    diagnostics: Vec<Diagnostic>,
}

impl Checking {
    fn failed(d: Diagnostic) -> Checking {
        Checking {
            parsed: None,
            diagnostics: vec![d],
        }
    }
}

fn diagnostic(p: check::Pending, path: &Path, (line, column): (usize, usize)) -> Diagnostic {
    Diagnostic {
        severity: p.severity,
        file: path.to_path_buf(),
        line,
        column,
        key: yaml::render(&p.path),
        message: p.message,
    }
}

/// The whole-document check: every job is handed to `each` once all are checked.
fn check_whole(
    doc: &yaml::Document,
    path: &Path,
    checker: &mut check::Checker<'_>,
    each: &mut dyn FnMut(Option<JobDef>),
) -> Checking {
    let parsed = match checker.top(&doc.value) {
        None => None,
        Some((settings, defaults, m)) => {
            for j in checker.jobs(m, &defaults, &settings) {
                each(j);
            }
            Some((settings, defaults))
        }
    };
    let mut diagnostics: Vec<Diagnostic> = std::mem::take(&mut checker.pending)
        .into_iter()
        .map(|p| {
            let at = doc.locate_or_parent(&p.path, p.target);
            diagnostic(p, path, at)
        })
        .collect();
    diagnostics.sort_by_key(|d| (d.line, d.column));
    Checking {
        parsed,
        diagnostics,
    }
}

/// The job-by-job check of a file whose `jobs:` list streams: `skel` is everything else,
/// `names` every job's name (the first pass). The text is parsed again, each job checked,
/// located, handed to `each` and dropped as soon as it is read; only the names, a few bytes
/// per job and the valid jobs' `after:` chains are kept for the whole-list checks. Returns
/// the names again (to check the jobs once more when they are handed over).
fn check_streamed(
    text: &str,
    skel: &yaml::Document,
    names: check::JobNames,
    path: &Path,
    checker: &mut check::Checker<'_>,
    each: &mut dyn FnMut(Option<JobDef>),
) -> (Checking, check::JobNames) {
    let Some((settings, defaults, _)) = checker.top(&skel.value) else {
        // The skeleton of a streamed list is a mapping: unreachable, reported as the whole
        // document would be.
        return (check_whole(skel, path, checker, each), names);
    };
    let mut diagnostics: Vec<Diagnostic> = std::mem::take(&mut checker.pending)
        .into_iter()
        .map(|p| {
            let at = skel.locate_or_parent(&p.path, p.target);
            diagnostic(p, path, at)
        })
        .collect();
    let mut run = check::JobsRun::new(names, &settings);
    let mut seen = ItemsSeen::default();
    let second = yaml::Document::parse_streaming(text, &mut |item| {
        let job = seen.check(checker, &mut run, &item, (&defaults, &settings), path);
        each(job);
        Ok(())
    });
    diagnostics.extend(seen.located(skel, path));
    let chain_at = seen.chain_at;
    match second {
        Ok(Some(_)) => {}
        // The same text parsed a moment ago: only a bug gets here; refuse rather than guess.
        Ok(None) => diagnostics.push(file_error(
            path,
            "the jobs file read differently the second time".to_string(),
        )),
        Err(e) => diagnostics.push(yaml_error(e, path)),
    }
    checker.jobs_end(&run, &settings);
    for p in std::mem::take(&mut checker.pending) {
        let at = chain_at
            .get(&yaml::render(&p.path))
            .copied()
            .unwrap_or_else(|| skel.locate_or_parent(&p.path, p.target));
        diagnostics.push(diagnostic(p, path, at));
    }
    diagnostics.sort_by_key(|d| (d.line, d.column));
    (
        Checking {
            parsed: Some((settings, defaults)),
            diagnostics,
        },
        run.into_names(),
    )
}

/// What checking the streamed jobs one at a time keeps: their diagnostics (located in their
/// item, or, for a path outside it such as an agent's, in the skeleton once it is known) and
/// where the whole-list checks may point, located while each chained job is at hand.
#[derive(Default)]
struct ItemsSeen {
    diagnostics: Vec<Result<Diagnostic, check::Pending>>,
    chain_at: std::collections::HashMap<String, (usize, usize)>,
}

impl ItemsSeen {
    /// Check job `item` (its definition: `None` when it has errors).
    fn check(
        &mut self,
        checker: &mut check::Checker<'_>,
        run: &mut check::JobsRun,
        item: &yaml::Item<'_>,
        (defaults, settings): (&check::Defaults, &Settings),
        path: &Path,
    ) -> Option<JobDef> {
        let job = checker.job_item(run, item.index, &item.value, defaults, settings);
        for p in std::mem::take(&mut checker.pending) {
            self.diagnostics
                .push(match item.locate_or_parent(&p.path, p.target) {
                    Some(at) => Ok(diagnostic(p, path, at)),
                    None => Err(p),
                });
        }
        if let Some(c) = run.chain_of(item.index) {
            for p in c.paths() {
                if let Some(at) = item.locate_or_parent(&p, yaml::Target::Value) {
                    self.chain_at.insert(yaml::render(&p), at);
                }
            }
        }
        job
    }

    /// The diagnostics, in the order found, those outside their item located in `skel`.
    fn located<'a>(
        &'a mut self,
        skel: &'a yaml::Document,
        path: &'a Path,
    ) -> impl Iterator<Item = Diagnostic> + 'a {
        self.diagnostics.drain(..).map(move |d| {
            d.unwrap_or_else(|p| {
                let at = skel.locate_or_parent(&p.path, p.target);
                diagnostic(p, path, at)
            })
        })
    }
}

/// How [`check_one_pass`] ended.
enum OnePass {
    /// The file is checked: what was found, and every job's name.
    Done(Checking, check::JobNames),
    /// It could not be checked in one pass (nothing it found stands; the jobs handed over are
    /// void): the first reading, to carry on from as [`first_pass`]'s.
    Fallback(FirstPass),
}

/// Where the line starting with the top-level key `jobs:` (block style, column 1) begins.
fn jobs_line(text: &str) -> Option<usize> {
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        if let Some(rest) = line.strip_prefix("jobs:")
            && (rest.is_empty() || rest.starts_with([' ', '\t', '\r', '\n']))
        {
            return Some(at);
        }
        at += line.len();
    }
    None
}

/// Check a file whose `jobs:` list is its last section in ONE parse of the text (a
/// parse of a 1 000 000-job file costs tens of seconds). The sections before `jobs:` are
/// read first (the text up to that line, a few bytes), so the settings are known when the
/// first job arrives; each job is checked with the names read so far. The result stands only
/// when it is what [`first_pass`] + [`check_streamed`] would give: the whole text's skeleton
/// equals the one read ahead (nothing after `jobs:`, nothing that read differently cut
/// short), the list streamed, and no `after:` or `context_from` named a job not yet read (a
/// forward reference, or an unknown job: its message lists every name). Otherwise the pass
/// served as the names pass and the caller checks as before, with a fresh checker.
fn check_one_pass(
    text: &str,
    path: &Path,
    checker: &mut check::Checker<'_>,
    each: &mut dyn FnMut(Option<JobDef>),
) -> OnePass {
    let Some(at) = jobs_line(text) else {
        return OnePass::Fallback(first_pass(text));
    };
    let mut ahead = text[..at].to_string();
    ahead.push_str("jobs: []\n");
    let Ok(ahead) = yaml::Document::parse(&ahead) else {
        return OnePass::Fallback(first_pass(text));
    };
    let Some((settings, defaults, _)) = checker.top(&ahead.value) else {
        return OnePass::Fallback(first_pass(text));
    };
    let top = std::mem::take(&mut checker.pending);
    let mut run = check::JobsRun::new(check::JobNames::default(), &settings);
    let mut seen = ItemsSeen::default();
    let parsed = yaml::Document::parse_streaming(text, &mut |item| {
        run.add_name(item.index, &item.value);
        let job = seen.check(checker, &mut run, &item, (&defaults, &settings), path);
        each(job);
        Ok(())
    });
    let skel = match parsed {
        Err(e) => return OnePass::Fallback(FirstPass::Failed(e)),
        Ok(None) => {
            return OnePass::Fallback(match yaml::Document::parse(text) {
                Ok(doc) => FirstPass::Whole(doc),
                Err(e) => FirstPass::Failed(e),
            });
        }
        Ok(Some(doc)) if !doc.streamed() => return OnePass::Fallback(FirstPass::Whole(doc)),
        Ok(Some(skel)) => skel,
    };
    if checker.unknown_job || skel.value != ahead.value {
        return OnePass::Fallback(FirstPass::Streamed(skel, run.into_names()));
    }
    let mut diagnostics: Vec<Diagnostic> = top
        .into_iter()
        .map(|p| {
            let at = skel.locate_or_parent(&p.path, p.target);
            diagnostic(p, path, at)
        })
        .collect();
    diagnostics.extend(seen.located(&skel, path));
    checker.jobs_end(&run, &settings);
    for p in std::mem::take(&mut checker.pending) {
        let at = seen
            .chain_at
            .get(&yaml::render(&p.path))
            .copied()
            .unwrap_or_else(|| skel.locate_or_parent(&p.path, p.target));
        diagnostics.push(diagnostic(p, path, at));
    }
    diagnostics.sort_by_key(|d| (d.line, d.column));
    OnePass::Done(
        Checking {
            parsed: Some((settings, defaults)),
            diagnostics,
        },
        run.into_names(),
    )
}

/// A jobs file that validated, ready to hand its jobs over one at a time ([`prepare_file`]):
/// `apply` of a large file never holds every definition (nor the YAML tree) at once.
pub struct Prepared {
    text: String,
    path: PathBuf,
    /// The settings as checked (before [`load_file`]'s path adjustments).
    checked: Settings,
    /// The settings to store.
    settings: Settings,
    defaults: check::Defaults,
    calendars: Calendars,
    jobs: PreparedJobs,
    /// Warnings (the file is accepted).
    pub warnings: Vec<Diagnostic>,
}

type Calendars = std::collections::BTreeMap<String, crate::schedule::calendar::Calendar>;

/// What [`Replay::run`] hands each job to: its item, its definition (`None`: it has errors)
/// and its diagnostics; an error stops the pass.
type ReplayEach<'e> = dyn FnMut(&yaml::Item<'_>, Option<JobDef>, Vec<check::Pending>) -> Result<(), yaml::YamlError>
    + 'e;

/// What checking a streamed `jobs:` list once more needs (the pass that hands its jobs over
/// after they were checked: `apply`'s hand-over, `validate`'s printing).
struct Replay<'t> {
    text: &'t str,
    path: &'t Path,
    /// The settings as checked.
    checked: &'t Settings,
    defaults: &'t check::Defaults,
    calendars: Calendars,
    names: check::JobNames,
}

impl Replay<'_> {
    /// Parse the list again and check each job as it is read; `each(item, job, pending)` gets
    /// the item, its definition (`None`: it has errors) and its diagnostics, and stops the
    /// pass with an error. Warnings that depend on the environment or the clock are not
    /// looked for (they never decide whether a job is valid).
    fn run(self, each: &mut ReplayEach<'_>) -> Result<Option<yaml::Document>, yaml::YamlError> {
        let env = |_: &str| true;
        let mut checker = new_checker(self.path, &env, None, None);
        checker.calendars = self.calendars;
        // The jobs' `tools:` name the sources of the sections, checked in the first pass.
        checker.tool_names = check::ToolNames::of(&self.checked.tools);
        let mut run = check::JobsRun::new(self.names, self.checked);
        yaml::Document::parse_streaming(self.text, &mut |item| {
            let job = checker.job_item(
                &mut run,
                item.index,
                &item.value,
                self.defaults,
                self.checked,
            );
            let pending = std::mem::take(&mut checker.pending);
            each(&item, job, pending)
        })
    }
}

enum PreparedJobs {
    /// A file whose `jobs:` list streams: the jobs are checked again as they are handed over.
    Streamed(check::JobNames),
    /// A file read whole (an anchored or merged `jobs:` list): its definitions.
    Whole(Vec<JobDef>),
}

/// Why handing the jobs over stopped.
#[derive(Debug)]
pub enum Handover<E> {
    /// The receiver refused a definition.
    Refused(E),
    /// The file no longer reads as it did when it was validated (only a bug gets here).
    Changed(ConfigErrors),
}

impl Prepared {
    /// The settings to store (with [`load_file`]'s adjustments).
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Hand every job over to `each`, in file order, one at a time. A streamed file is parsed
    /// and checked once more, job by job; nothing but the names is held meanwhile.
    pub fn for_each_job<E>(
        self,
        each: &mut dyn FnMut(JobDef) -> Result<(), E>,
    ) -> Result<(), Handover<E>> {
        let names = match self.jobs {
            PreparedJobs::Whole(jobs) => {
                return jobs
                    .into_iter()
                    .try_for_each(each)
                    .map_err(Handover::Refused);
            }
            PreparedJobs::Streamed(names) => names,
        };
        let replay = Replay {
            text: &self.text,
            path: &self.path,
            checked: &self.checked,
            defaults: &self.defaults,
            calendars: self.calendars,
            names,
        };
        let mut refused = None;
        let mut invalid = None;
        let r = replay.run(&mut |item, job, pending| {
            let Some(job) = job else {
                invalid = pending
                    .into_iter()
                    .find(|p| p.severity == Severity::Error)
                    .map(|p| {
                        let at = item.locate_or_parent(&p.path, p.target).unwrap_or((1, 1));
                        diagnostic(p, &self.path, at)
                    });
                return Err(yaml::YamlError::stop());
            };
            each(job).map_err(|e| {
                refused = Some(e);
                yaml::YamlError::stop()
            })
        });
        if let Some(e) = refused {
            return Err(Handover::Refused(e));
        }
        let changed = |d: Diagnostic| {
            Handover::Changed(ConfigErrors {
                diagnostics: vec![d],
            })
        };
        if let Some(d) = invalid {
            return Err(changed(d));
        }
        match r {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(changed(file_error(
                &self.path,
                "the jobs file changed while it was applied".to_string(),
            ))),
            Err(e) => Err(changed(yaml_error(e, &self.path))),
        }
    }
}

/// Read and validate a jobs file for a job-by-job hand-over ([`Prepared::for_each_job`]).
/// The file is read once and parsed once here when `jobs:` is its last section and every job
/// names only earlier ones (`check_one_pass`), twice otherwise (names first: duplicates,
/// `context_from` and `after:` may refer to a later job; then each job, checked and dropped),
/// so memory is the text plus a few bytes per job. Same diagnostics as [`load_file`].
pub fn prepare_file(path: &Path) -> Result<Prepared, ConfigErrors> {
    let text = read_text(path).map_err(|d| ConfigErrors {
        diagnostics: vec![d],
    })?;
    let is_set = |name: &str| std::env::var(name).is_ok_and(|v| !v.is_empty());
    let chars = |name: &str| std::env::var(name).ok().map(|v| v.trim().chars().count());
    let mut checker = new_checker(path, &is_set, Some(&chars), None);
    let first = match check_one_pass(&text, path, &mut checker, &mut drop) {
        OnePass::Done(c, names) => Err((c, names)),
        OnePass::Fallback(first) => {
            checker = new_checker(path, &is_set, Some(&chars), None);
            Ok(first)
        }
    };
    let (c, jobs) = match first {
        Err((c, names)) => (c, Some(PreparedJobs::Streamed(names))),
        Ok(first) => match first {
            FirstPass::Failed(e) => (Checking::failed(yaml_error(e, path)), None),
            FirstPass::Whole(doc) => {
                let mut jobs = Vec::new();
                let c = check_whole(&doc, path, &mut checker, &mut |j| jobs.extend(j));
                (c, Some(PreparedJobs::Whole(jobs)))
            }
            FirstPass::Streamed(skel, names) => {
                let (c, names) = check_streamed(&text, &skel, names, path, &mut checker, &mut drop);
                (c, Some(PreparedJobs::Streamed(names)))
            }
        },
    };
    let errors = c.diagnostics.iter().any(|d| d.severity == Severity::Error);
    let (Some((checked, defaults)), Some(jobs), false) = (c.parsed, jobs, errors) else {
        return Err(ConfigErrors {
            diagnostics: c.diagnostics,
        });
    };
    let mut settings = checked.clone();
    adjust_paths(path, &mut settings);
    Ok(Prepared {
        text,
        path: path.to_path_buf(),
        checked,
        settings,
        defaults,
        calendars: checker.calendars,
        jobs,
        warnings: c.diagnostics,
    })
}

/// What `validate` reports ([`validate_str_at`]), holding no definition of a streamed file (so 1
/// 000 000 jobs need no more than their text): the diagnostics, how many jobs there are and how
/// many validated; [`Validation::for_each_valid`] then hands the valid definitions over, a further
/// pass over a streamed `jobs:` list, so they can be printed after the diagnostics.
pub struct Validation<'t> {
    /// Errors and warnings, sorted by position.
    pub diagnostics: Vec<Diagnostic>,
    /// The jobs in the file.
    pub jobs: usize,
    /// The jobs that validated on their own.
    pub valid: usize,
    valid_jobs: ValidJobs<'t>,
}

enum ValidJobs<'t> {
    /// A file read whole: its valid definitions.
    Held(Vec<JobDef>),
    /// A streamed `jobs:` list, with its settings and defaults (boxed: one per file).
    Streamed(Box<StreamedJobs<'t>>),
}

/// [`ValidJobs::Streamed`]: what the hand-over pass needs.
struct StreamedJobs<'t>(
    Settings,
    check::Defaults,
    Calendars,
    check::JobNames,
    &'t str,
);

impl Validation<'_> {
    /// Whether any diagnostic is an error.
    pub fn has_errors(&self) -> bool {
        self.diagnostics
            .iter()
            .any(|d| d.severity == Severity::Error)
    }

    /// Hand each valid definition to `each`, in file order, one at a time (a streamed list is
    /// parsed and checked once more, job by job). `path` is the file's, as validated.
    pub fn for_each_valid<E>(
        self,
        path: &Path,
        each: &mut dyn FnMut(&JobDef) -> Result<(), E>,
    ) -> Result<(), Handover<E>> {
        let (checked, defaults, calendars, names, text) = match self.valid_jobs {
            ValidJobs::Held(jobs) => {
                return jobs.iter().try_for_each(each).map_err(Handover::Refused);
            }
            ValidJobs::Streamed(b) => {
                let StreamedJobs(s, d, c, n, t) = *b;
                (s, d, c, n, t)
            }
        };
        let replay = Replay {
            text,
            path,
            checked: &checked,
            defaults: &defaults,
            calendars,
            names,
        };
        let mut refused = None;
        let r = replay.run(&mut |_, job, _| match job {
            Some(job) => each(&job).map_err(|e| {
                refused = Some(e);
                yaml::YamlError::stop()
            }),
            None => Ok(()),
        });
        if let Some(e) = refused {
            return Err(Handover::Refused(e));
        }
        let changed = |d: Diagnostic| {
            Handover::Changed(ConfigErrors {
                diagnostics: vec![d],
            })
        };
        match r {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(changed(file_error(
                path,
                "the jobs file read differently the second time".to_string(),
            ))),
            Err(e) => Err(changed(yaml_error(e, path))),
        }
    }
}

/// [`check_str_at`] for `validate`: the same diagnostics, and the valid jobs counted, not held
/// (see [`Validation`]).
pub fn validate_str_at<'t>(
    text: &'t str,
    path: &Path,
    now: chrono::DateTime<chrono::Utc>,
) -> Validation<'t> {
    let env = |name: &str| std::env::var(name).ok();
    let is_set = |name: &str| env(name).is_some_and(|v| !v.is_empty());
    let chars = |name: &str| env(name).map(|v| v.trim().chars().count());
    let mut checker = new_checker(path, &is_set, Some(&chars), Some(now));
    let (mut jobs, mut valid) = (0, 0);
    let first = {
        let mut count = |j: Option<JobDef>| {
            jobs += 1;
            valid += usize::from(j.is_some());
        };
        match check_one_pass(text, path, &mut checker, &mut count) {
            OnePass::Done(c, names) => Err((c, names)),
            OnePass::Fallback(first) => Ok(first),
        }
    };
    let first = match first {
        Err((c, names)) => Err((c, names)),
        Ok(first) => {
            // Nothing the one-pass check found stands.
            checker = new_checker(path, &is_set, Some(&chars), Some(now));
            (jobs, valid) = (0, 0);
            Ok(first)
        }
    };
    let mut count = |j: &Option<JobDef>| {
        jobs += 1;
        valid += usize::from(j.is_some());
    };
    let (c, valid_jobs) = match first {
        Err((c, names)) => streamed_validation(c, names, &mut checker, text),
        Ok(first) => match first {
            FirstPass::Failed(e) => (
                Checking::failed(yaml_error(e, path)),
                ValidJobs::Held(Vec::new()),
            ),
            FirstPass::Whole(doc) => {
                let mut held = Vec::new();
                let c = check_whole(&doc, path, &mut checker, &mut |j| {
                    count(&j);
                    held.extend(j);
                });
                (c, ValidJobs::Held(held))
            }
            FirstPass::Streamed(skel, names) => {
                let (c, names) =
                    check_streamed(text, &skel, names, path, &mut checker, &mut |j| count(&j));
                streamed_validation(c, names, &mut checker, text)
            }
        },
    };
    Validation {
        diagnostics: c.diagnostics,
        jobs,
        valid,
        valid_jobs,
    }
}

/// What [`validate_str_at`] keeps of a streamed `jobs:` list's check: its diagnostics, and
/// what handing its valid jobs over needs.
fn streamed_validation<'t>(
    c: Checking,
    names: check::JobNames,
    checker: &mut check::Checker<'_>,
    text: &'t str,
) -> (Checking, ValidJobs<'t>) {
    let calendars = std::mem::take(&mut checker.calendars);
    let v = match c.parsed {
        Some((settings, defaults)) => ValidJobs::Streamed(Box::new(StreamedJobs(
            settings, defaults, calendars, names, text,
        ))),
        None => ValidJobs::Held(Vec::new()),
    };
    (
        Checking {
            parsed: None,
            diagnostics: c.diagnostics,
        },
        v,
    )
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

//! The jobs file: YAML text → a validated [`JobsFile`](crate::model::JobsFile), with every
//! problem reported at once as `file:line:column`, the key, and what would be accepted.
//!
//! Owns: all YAML parsing in the project (the parser crate is named only in `yaml`), the size
//! cap on reading the file, defaults, bounds, validation.
//! Must not touch: the store, the engine, the clock.
//!
//! Layout: `yaml` parses the text once (saphyr-parser events) into a value *and* the position of
//! every node as written, and enforces the structural limits (nesting, alias expansion, duplicate
//! keys); `check` holds the schema and the rules and works on that value (key paths only); the
//! paths of the problems found are then located in the same parsed document. `bounds` is the
//! table of every number's minimum and maximum, shared by `check` and `check_bounds`.
//! Imports run one way: `defaults`, `bounds`, `yaml` and `diagnostic` (what a check reports) at
//! the bottom, then `check`, then `read` (the file on disk) and `stream` (the passes), and this
//! module's entry points on top; nothing below imports this module.
//!
//! Job by job (so a file of 1 000 000 jobs fits in the memory of its text): `stream` checks a
//! plain `jobs:` list one item at a time, and `prepare_file` / `validate_str_at` hand the
//! valid jobs over one at a time; its module doc says how.
//!
//! Reading the file: `read_text` refuses anything that is not a regular file (a directory, a
//! FIFO, `/dev/zero`) and any file larger than the cap (`DEFAULT_MAX_FILE_BYTES`, 256 MiB, or
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

use std::path::Path;

#[cfg(test)]
use crate::model::JobDef;
use crate::model::Settings;

mod bounds;
mod check;
pub(crate) mod defaults;
mod diagnostic;
pub(crate) mod praisonai;
mod read;
mod stream;
#[cfg(test)]
mod tests;
mod yaml;

pub(crate) use bounds::{OutOfBounds, check_bounds, check_job_bounds};
pub(crate) use check::{cycle_text, find_cycle, find_cycle_by};
use diagnostic::yaml_error;
pub use diagnostic::{Checked, ConfigErrors, Diagnostic, Loaded, Severity};
pub(crate) use read::adjust_paths;
pub(crate) use read::{MAX_FILE_BYTES_ENV, max_file_bytes, read_text};
use stream::*;
pub(crate) use stream::{Handover, Validation, prepare_file, validate_str_at};

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

/// Parse jobs-file text without checking it: the parser's share of [`check_str`], for the
/// `config_validate` benchmark. `true` when the text parses.
#[doc(hidden)]
pub fn parse_only(text: &str) -> bool {
    yaml::Document::parse(text).is_ok()
}

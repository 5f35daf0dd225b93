//! Defaults applied where the jobs file is silent (the parent module's doc lists them with the
//! rules around them; the guide's jobs-file reference repeats them).
//!
//! Owns: the default values themselves. Must not touch: where they are applied (the rule files
//! of `check`), bounds (`bounds`). A leaf: it imports nothing, so every part of `config` can use
//! it without an import circle.

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

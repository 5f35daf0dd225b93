//! The minimum and maximum of every number an operator can write in the jobs file, in
//! one table that `validate` enforces (with `file:line:col`) and that [`check_bounds`] re-checks on
//! a [`JobsFile`] built by any other route, so no store ever holds an out-of-range value.
//!
//! Owns: the bounds and their reasons. Must not touch: parsing, positions, the store.
//!
//! Why each bound (the guide's jobs-file reference, docs/guide/jobs-file.md, repeats them):
//! - Intervals: 1 s to 100 years, the cap of the string form (`every 101y` is refused there too).
//!   Larger values overflowed slot arithmetic (2^63 s made one slot run 308 times).
//! - Leases: at least 1 s (a lease renews every lease/3; 0.0001 s let two owners run one job), at
//!   most 7 days. Timeouts: 0.1 s to 7 days (1e-300 always failed; a week is longer than any run an
//!   operator means). Grace windows: 0 to 100 years.
//! - Counts: `max_runs` ≤ 10^9 (a run a second for 31 years), `max_retries` 1–100,
//!   `alert_after_failures` 1–10 000, `max_concurrent_runs` 2–1 000, `context_max_chars` and
//!   `max_tokens` 1–1 000 000 (above any
//!   model's context today).
//! - Tool loops: `max_turns` 1–100, `max_tool_calls_per_turn` 1–64, `max_tool_output_bytes`
//!   256 B to 1 MiB, `approval_timeout_seconds` 1 s to a day; tool timeouts are timeouts.
//! - Money: finite, 0 to 1 000 000 USD (budgets and per-job caps) and 0 to 1 000 000 USD per 1M
//!   tokens (prices). `temperature` 0–2 (the providers' range).

use crate::model::{Action, JobDef, JobsFile};
use crate::schedule::ScheduleSpec;

/// An inclusive range of whole numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Whole {
    /// Smallest value accepted.
    pub min: u64,
    /// Largest value accepted.
    pub max: u64,
    /// Said after the maximum in messages, e.g. " (100 years)".
    pub note: &'static str,
}

/// An inclusive range of finite real numbers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Real {
    /// Smallest value accepted.
    pub min: f64,
    /// Largest value accepted.
    pub max: f64,
    /// Said after the maximum in messages, e.g. " (7 days)".
    pub note: &'static str,
}

/// 100 years of 366 days: the string grammar's cap on intervals.
pub const HUNDRED_YEARS_SECS: u64 = 100 * 366 * 86_400;
const WEEK_SECS: f64 = 7.0 * 86_400.0;

/// `every_seconds` (and `every` strings): 1 s to 100 years.
pub const EVERY_SECONDS: Whole = Whole {
    min: 1,
    max: HUNDRED_YEARS_SECS,
    note: " (100 years)",
};
/// `lease_seconds`: 1 s to 7 days.
pub const LEASE_SECONDS: Real = Real {
    min: 1.0,
    max: WEEK_SECS,
    note: " (7 days)",
};
/// `timeout_seconds` and `command_timeout_seconds`.
pub const TIMEOUT_SECONDS: Real = Real {
    min: 0.1,
    max: WEEK_SECS,
    note: " (7 days)",
};
/// `jitter_seconds`: up to a day of spread (a slot fires within a day of itself).
pub const JITTER_SECONDS: Real = Real {
    min: 0.0,
    max: 86_400.0,
    note: " (1 day)",
};
/// `max_concurrent_runs` (with `overlap: allow`): 1 would be `skip`; each live run holds a
/// lease and a slot of an owner's `--max-concurrent`, so a thousand is beyond any real need.
pub const MAX_CONCURRENT_RUNS: Whole = Whole {
    min: 2,
    max: 1000,
    note: "",
};
/// `grace_seconds`: 0 to 100 years.
pub const GRACE_SECONDS: Real = Real {
    min: 0.0,
    max: HUNDRED_YEARS_SECS as f64,
    note: " (100 years)",
};
/// `max_runs`.
pub const MAX_RUNS: Whole = Whole {
    min: 1,
    max: 1_000_000_000,
    note: "",
};
/// `max_retries` (attempts, the first included).
pub const MAX_RETRIES: Whole = Whole {
    min: 1,
    max: 100,
    note: "",
};
/// `alert_after_failures`.
pub const ALERT_AFTER_FAILURES: Whole = Whole {
    min: 1,
    max: 10_000,
    note: "",
};
/// `context_max_chars`.
pub const CONTEXT_MAX_CHARS: Whole = Whole {
    min: 1,
    max: 1_000_000,
    note: "",
};
/// An agent's `max_tokens`.
pub const MAX_TOKENS: Whole = Whole {
    min: 1,
    max: 1_000_000,
    note: "",
};
/// An agent's `temperature`.
pub const TEMPERATURE: Real = Real {
    min: 0.0,
    max: 2.0,
    note: "",
};
/// An agent's `max_turns`: model turns of one run's tool loop.
pub const MAX_TURNS: Whole = Whole {
    min: 1,
    max: 100,
    note: "",
};
/// An agent's `max_tool_output_bytes`: what the model sees of one tool result. At least
/// enough for the cut marker and the result's size and hash; at most 1 MiB (more than any
/// model's context would take from one result).
pub const MAX_TOOL_OUTPUT_BYTES: Whole = Whole {
    min: 256,
    max: 1_048_576,
    note: " (1 MiB)",
};
/// An agent's `max_tool_calls_per_turn`.
pub const MAX_TOOL_CALLS_PER_TURN: Whole = Whole {
    min: 1,
    max: 64,
    note: "",
};
/// An agent's `approval_timeout_seconds`: one wait for an operator, up to a day.
pub const APPROVAL_TIMEOUT_SECONDS: Real = Real {
    min: 1.0,
    max: 86_400.0,
    note: " (1 day)",
};
/// `budget.max_cost_usd` and a job's `max_cost_usd`.
pub const COST_USD: Real = Real {
    min: 0.0,
    max: 1_000_000.0,
    note: "",
};
/// `pricing.*.input` / `output`, USD per 1M tokens.
pub const PRICE_USD: Real = Real {
    min: 0.0,
    max: 1_000_000.0,
    note: "",
};

impl Whole {
    /// Whether `x` is inside the range.
    pub fn contains(&self, x: u64) -> bool {
        (self.min..=self.max).contains(&x)
    }

    /// "a whole number from 1 to 100".
    pub fn describe(&self) -> String {
        format!(
            "a whole number from {} to {}{}",
            self.min, self.max, self.note
        )
    }
}

impl Real {
    /// Whether `x` is inside the range (never for NaN or an infinity).
    pub fn contains(&self, x: f64) -> bool {
        x.is_finite() && x >= self.min && x <= self.max
    }

    /// "a number from 1 to 604800".
    pub fn describe(&self) -> String {
        format!(
            "a number from {} to {}{}",
            super::yaml::float_text(self.min),
            super::yaml::float_text(self.max),
            self.note
        )
    }
}

/// A value of a [`JobsFile`] outside its bound.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct OutOfBounds {
    /// The jobs-file key path, e.g. `jobs[job-name].lease_seconds`.
    pub key: String,
    /// What is wrong and what would be accepted.
    pub message: String,
}

fn whole(key: String, x: u64, b: Whole) -> Result<(), OutOfBounds> {
    if b.contains(x) {
        return Ok(());
    }
    Err(OutOfBounds {
        key,
        message: format!("expected {}, found {x}", b.describe()),
    })
}

fn real(key: String, x: f64, b: Real) -> Result<(), OutOfBounds> {
    if b.contains(x) {
        return Ok(());
    }
    Err(OutOfBounds {
        key,
        message: format!(
            "expected {}, found {}",
            b.describe(),
            super::yaml::float_text(x)
        ),
    })
}

/// Every number of `file` within its bound (the table above); the first one that is not.
///
/// `config::load_*` only ever returns bounded files; a store calls this on what it is asked to
/// apply, so a `JobsFile` built in code (or by a future importer) is held to the same limits.
pub fn check_bounds(file: &JobsFile) -> Result<(), OutOfBounds> {
    let s = &file.settings;
    if let Some(b) = &s.budget {
        real("budget.max_cost_usd".into(), b.max_cost_usd, COST_USD)?;
    }
    for (model, p) in &s.pricing {
        real(format!("pricing.{model}.input"), p.input, PRICE_USD)?;
        real(format!("pricing.{model}.output"), p.output, PRICE_USD)?;
        for (k, v) in [
            ("cached_input", p.cached_input),
            ("cache_read", p.cache_read),
            ("cache_write", p.cache_write),
        ] {
            if let Some(v) = v {
                real(format!("pricing.{model}.{k}"), v, PRICE_USD)?;
            }
        }
    }
    for (name, a) in &s.agents {
        if let Some(t) = a.max_tokens {
            whole(format!("agents.{name}.max_tokens"), t.into(), MAX_TOKENS)?;
        }
        if let Some(t) = a.temperature {
            real(format!("agents.{name}.temperature"), t, TEMPERATURE)?;
        }
        let l = &a.limits;
        let k = |field: &str| format!("agents.{name}.{field}");
        whole(k("max_turns"), l.max_turns.into(), MAX_TURNS)?;
        real(
            k("tool_timeout_seconds"),
            l.tool_timeout_seconds,
            TIMEOUT_SECONDS,
        )?;
        whole(
            k("max_tool_output_bytes"),
            l.max_tool_output_bytes.into(),
            MAX_TOOL_OUTPUT_BYTES,
        )?;
        whole(
            k("max_tool_calls_per_turn"),
            l.max_tool_calls_per_turn.into(),
            MAX_TOOL_CALLS_PER_TURN,
        )?;
        real(
            k("approval_timeout_seconds"),
            l.approval_timeout_seconds,
            APPROVAL_TIMEOUT_SECONDS,
        )?;
    }
    for (name, t) in &s.tools.command_tools {
        if let Some(x) = t.timeout_seconds {
            real(format!("tools.{name}.timeout_seconds"), x, TIMEOUT_SECONDS)?;
        }
    }
    file.jobs.iter().try_for_each(check_job_bounds)
}

/// Every number of one job within its bound; the key names the job (`jobs[name].field`).
pub fn check_job_bounds(j: &JobDef) -> Result<(), OutOfBounds> {
    let k = |field: &str| format!("jobs[{}].{field}", j.name);
    match &j.schedule {
        ScheduleSpec::Every { every_seconds } => {
            whole(k("schedule.every_seconds"), *every_seconds, EVERY_SECONDS)?
        }
        ScheduleSpec::In { seconds } => whole(k("schedule"), *seconds, EVERY_SECONDS)?,
        // Cron expressions and instants carry no number an operator wrote as seconds.
        _ => {}
    }
    if let Action::Command {
        timeout_seconds, ..
    } = &j.action
    {
        real(
            k("command_timeout_seconds"),
            *timeout_seconds,
            TIMEOUT_SECONDS,
        )?;
    }
    whole(
        k("context_max_chars"),
        j.context_max_chars as u64,
        CONTEXT_MAX_CHARS,
    )?;
    if let Some(g) = j.misfire_grace_seconds {
        real(k("misfire_grace_seconds"), g, GRACE_SECONDS)?;
    }
    if let Some(n) = j.max_runs {
        whole(k("max_runs"), n, MAX_RUNS)?;
    }
    real(k("timeout_seconds"), j.timeout_seconds, TIMEOUT_SECONDS)?;
    whole(k("max_retries"), j.max_retries.into(), MAX_RETRIES)?;
    real(k("lease_seconds"), j.lease_seconds, LEASE_SECONDS)?;
    real(k("jitter_seconds"), j.jitter_seconds, JITTER_SECONDS)?;
    if let crate::model::Overlap::Allow {
        max_concurrent_runs,
    } = j.overlap
    {
        whole(
            k("max_concurrent_runs"),
            max_concurrent_runs.into(),
            MAX_CONCURRENT_RUNS,
        )?;
    }
    if let Some(c) = j.max_cost_usd {
        real(k("max_cost_usd"), c, COST_USD)?;
    }
    whole(
        k("alert_after_failures"),
        j.alert_after_failures.into(),
        ALERT_AFTER_FAILURES,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Budget, BudgetPeriod};
    use crate::testkit::jobs::command_job;

    fn file(job: crate::model::JobDef) -> JobsFile {
        JobsFile {
            settings: Default::default(),
            jobs: vec![job],
        }
    }

    #[test]
    fn a_default_job_is_within_bounds() {
        assert_eq!(check_bounds(&file(command_job("a", 60))), Ok(()));
    }

    #[test]
    fn each_out_of_range_field_is_named() {
        let base = command_job("a", 60);
        let cases: Vec<(crate::model::JobDef, &str)> = vec![
            (
                crate::model::JobDef {
                    schedule: ScheduleSpec::Every {
                        every_seconds: u64::MAX,
                    },
                    ..base.clone()
                },
                "jobs[a].schedule.every_seconds: expected a whole number from 1 to 3162240000 (100 years), found 18446744073709551615",
            ),
            (
                crate::model::JobDef {
                    lease_seconds: 0.0001,
                    ..base.clone()
                },
                "jobs[a].lease_seconds: expected a number from 1 to 604800 (7 days), found 0.0001",
            ),
            (
                crate::model::JobDef {
                    timeout_seconds: 1e-300,
                    ..base.clone()
                },
                "jobs[a].timeout_seconds: expected a number from 0.1 to 604800 (7 days), found 1e-300",
            ),
            (
                crate::model::JobDef {
                    timeout_seconds: f64::NAN,
                    ..base.clone()
                },
                "jobs[a].timeout_seconds: expected a number from 0.1 to 604800 (7 days), found .nan",
            ),
            (
                crate::model::JobDef {
                    max_cost_usd: Some(f64::INFINITY),
                    ..base.clone()
                },
                "jobs[a].max_cost_usd: expected a number from 0 to 1000000, found .inf",
            ),
            (
                crate::model::JobDef {
                    max_runs: Some(1 << 63),
                    ..base.clone()
                },
                "jobs[a].max_runs: expected a whole number from 1 to 1000000000, found 9223372036854775808",
            ),
            (
                crate::model::JobDef {
                    misfire_grace_seconds: Some(-1.0),
                    ..base.clone()
                },
                "jobs[a].misfire_grace_seconds: expected a number from 0 to 3162240000 (100 years), found -1",
            ),
            (
                crate::model::JobDef {
                    max_retries: 0,
                    ..base.clone()
                },
                "jobs[a].max_retries: expected a whole number from 1 to 100, found 0",
            ),
        ];
        for (job, want) in cases {
            let got = check_bounds(&file(job)).map_err(|e| e.to_string());
            assert_eq!(got, Err(want.to_string()));
        }
    }

    #[test]
    fn settings_are_checked_too() {
        let mut f = file(command_job("a", 60));
        f.settings.budget = Some(Budget {
            max_cost_usd: -0.5,
            period: BudgetPeriod::Day,
        });
        assert_eq!(
            check_bounds(&f).map_err(|e| e.key),
            Err("budget.max_cost_usd".to_string())
        );
    }
}

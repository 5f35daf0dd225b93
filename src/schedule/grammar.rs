//! The schedule string grammar of SPEC §3.2 and the DURATION syntax of the CLI.
//!
//! Owns: turning operator text into a [`ScheduleSpec`]. Must not touch: slot arithmetic.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use super::{ScheduleError, ScheduleSpec};

/// Parse schedule text; `tz` is the job's zone (for cron and naive `at:` times).
pub fn parse_schedule(input: &str, tz: &str) -> Result<ScheduleSpec, ScheduleError> {
    let _ = (input, tz);
    todo!("schedule helper")
}

/// RFC 3339, or a naive local time (`2026-12-01T09:00`, `2026-12-01 09:00:00`) in `tz`.
pub fn parse_at(input: &str, tz: Tz) -> Result<DateTime<Utc>, ScheduleError> {
    let _ = (input, tz);
    todo!("schedule helper")
}

/// CLI durations: `90s`, `5m`, `1h30m`, `2d`.
pub fn parse_duration(input: &str) -> Result<std::time::Duration, ScheduleError> {
    let _ = input;
    todo!("schedule helper")
}

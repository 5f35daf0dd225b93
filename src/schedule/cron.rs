//! Vixie cron (5 fields) with the DST policy of SPEC §3.3, built over the `cron` crate.
//!
//! Owns: parsing/validating cron expressions and macros, and `next_after`/`prev_before` in UTC.
//! Must not touch: anything outside slot arithmetic.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use super::ScheduleError;

/// A validated cron expression in a zone. (Implementation: schedule helper.)
#[derive(Debug, Clone)]
pub struct CronSchedule {
    expr: String,
    tz: Tz,
}

impl CronSchedule {
    pub fn parse(expr: &str, tz: Tz) -> Result<CronSchedule, ScheduleError> {
        let _ = (expr, tz);
        todo!("schedule helper")
    }
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let _ = t;
        todo!("schedule helper")
    }
    pub fn prev_before(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let _ = t;
        todo!("schedule helper")
    }
    /// Wildcard = minute or hour field starts with `*` (SPEC §3.3).
    pub fn is_wildcard(&self) -> bool {
        todo!("schedule helper")
    }
    pub fn describe(&self) -> String {
        todo!("schedule helper")
    }
    pub fn expr(&self) -> &str {
        &self.expr
    }
    pub fn tz(&self) -> Tz {
        self.tz
    }
}

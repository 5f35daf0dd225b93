//! What a schedule is once parsed, and why one was refused: [`ScheduleSpec`] (the kinds as
//! stored with a job definition), [`ScheduleError`] and [`parse_tz`] (the zone names every kind
//! accepts).
//!
//! Owns: the stored shape of a schedule (its serde form is part of both stores' formats, so a
//! change here is a format change) and the time-zone lookup. Must not touch: slot arithmetic
//! (the parent module's `Compiled`), the string grammar, the cron dialect; it sits below all
//! three so they share these types without importing one another's parents.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

/// Why a schedule was rejected. The message says what would be accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ScheduleError(pub String);

impl ScheduleError {
    /// An error with this message.
    pub fn new(msg: impl Into<String>) -> Self {
        ScheduleError(msg.into())
    }
}

/// A parsed schedule as stored with the job definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ScheduleSpec {
    /// Slots on the grid `anchor + k·every_seconds` (anchor kept in the job's runtime).
    Every {
        /// Seconds between slots.
        every_seconds: u64,
    },
    /// A 5-field Vixie cron expression (or macro) evaluated in `tz`.
    Cron {
        /// The expression as written.
        expr: String,
        /// IANA zone name.
        tz: String,
    },
    /// Exactly one slot.
    At {
        /// The slot.
        at: DateTime<Utc>,
    },
    /// `in 10m`: an `at` that the store resolves to creation time + `seconds` when the job is
    /// first stored.
    In {
        /// Seconds after the job is first stored.
        seconds: u64,
    },
    /// `at 9am`: an `at` that resolves to the first `hour:minute` wall time in `tz` at or after
    /// the moment the job is first stored (its anchor); once, never recurring.
    AtTime {
        /// Hour, 0–23.
        hour: u32,
        /// Minute, 0–59.
        minute: u32,
        /// IANA zone name.
        tz: String,
    },
    /// No slots: a job with `after:` and no `schedule:` runs only when its parents finish
    /// (and on manual triggers).
    AfterOnly,
}

impl ScheduleSpec {
    /// A one-slot schedule (`at`, `in`, `at 9am`).
    pub fn is_at(&self) -> bool {
        matches!(
            self,
            ScheduleSpec::At { .. } | ScheduleSpec::In { .. } | ScheduleSpec::AtTime { .. }
        )
    }

    /// Any schedule with more than one slot (`every`, cron).
    pub(crate) fn is_recurring(&self) -> bool {
        !self.is_at() && *self != ScheduleSpec::AfterOnly
    }
}

/// Look up an IANA zone name, with an error that says what is accepted.
/// Case-insensitive (`utc`, `europe/berlin`): IANA names are unique ignoring case.
pub fn parse_tz(name: &str) -> Result<Tz, ScheduleError> {
    let n = name.trim();
    n.parse::<Tz>()
        .ok()
        .or_else(|| {
            chrono_tz::TZ_VARIANTS
                .iter()
                .copied()
                .find(|z| z.name().eq_ignore_ascii_case(n))
        })
        .ok_or_else(|| {
        ScheduleError::new(format!(
            "unknown time zone '{name}': use an IANA name such as UTC, Europe/Berlin or America/New_York"
        ))
    })
}

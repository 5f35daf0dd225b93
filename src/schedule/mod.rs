//! Schedules: the three kinds (`every`, `cron`, `at`), the string grammar (`every 5m`, `daily at
//! 9am`, ...), and the Vixie cron dialect with Vixie's DST policy, answering "which slot comes
//! next".
//!
//! Owns: parsing schedule text, slot arithmetic (`next_after` / `prev_before`, strictly monotonic
//! in UTC), and the human description of a schedule. Must not touch: the store, clocks (every
//! function takes the instant it reasons about), I/O.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

pub mod calendar;
pub(crate) mod cron;
pub(crate) mod grammar;
pub(crate) mod jitter;
pub(crate) mod spec;

pub use self::cron::CronSchedule;
pub use self::grammar::{parse_duration, parse_schedule};
pub use self::spec::{ScheduleError, ScheduleSpec, parse_tz};

/// A schedule ready to answer slot questions quickly (cron expressions parsed once).
#[derive(Debug, Clone)]
pub enum Compiled {
    /// Slots on the grid `anchor + k·every_seconds`.
    Every {
        /// Seconds between slots.
        every_seconds: u64,
        /// The grid's origin.
        anchor: DateTime<Utc>,
    },
    /// A cron expression in its zone.
    Cron(CronSchedule),
    /// Exactly one slot.
    At(DateTime<Utc>),
    /// Another schedule whose slots on excluded dates are not slots (`only_on`/`except_on`).
    OnDays(Box<Compiled>, calendar::Filtered),
    /// No slots at all ([`ScheduleSpec::AfterOnly`]).
    Never,
}

impl Compiled {
    /// Compile `spec`; `anchor` is the `every` grid origin, or the resolved instant of `In`.
    pub fn new(spec: &ScheduleSpec, anchor: DateTime<Utc>) -> Result<Compiled, ScheduleError> {
        Ok(match spec {
            ScheduleSpec::Every { every_seconds } => {
                if *every_seconds == 0 {
                    return Err(ScheduleError::new("an interval must be at least 1 second"));
                }
                Compiled::Every {
                    every_seconds: *every_seconds,
                    anchor,
                }
            }
            ScheduleSpec::Cron { expr, tz } => {
                Compiled::Cron(CronSchedule::parse(expr, parse_tz(tz)?)?)
            }
            ScheduleSpec::At { at } => Compiled::At(*at),
            ScheduleSpec::In { .. } => Compiled::At(anchor),
            ScheduleSpec::AtTime { hour, minute, tz } => {
                let daily = CronSchedule::parse(&format!("{minute} {hour} * * *"), parse_tz(tz)?)?;
                // At or after the anchor; the DST policy of a fixed-time cron applies.
                let first = daily
                    .next_after(anchor - chrono::Duration::milliseconds(1))
                    .ok_or_else(|| ScheduleError::new("no such wall time after the anchor"))?;
                Compiled::At(first)
            }
            ScheduleSpec::AfterOnly => Compiled::Never,
        })
    }

    /// This schedule restricted to the dates `rule` allows in `tz` (unchanged for an empty rule).
    pub(crate) fn on_days(self, rule: &calendar::DayRule, tz: Tz) -> Compiled {
        if rule.is_empty() {
            return self;
        }
        Compiled::OnDays(
            Box::new(self),
            calendar::Filtered {
                rule: rule.clone(),
                tz,
            },
        )
    }

    /// The schedule without its day rule (what kind of slot arithmetic applies).
    pub fn base(&self) -> &Compiled {
        match self {
            Compiled::OnDays(inner, _) => inner.base(),
            other => other,
        }
    }

    /// The first slot strictly after `t`.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Compiled::OnDays(inner, f) => f.next_after(t, |x| inner.next_after(x)),
            Compiled::Every {
                every_seconds,
                anchor,
            } => {
                if t < *anchor {
                    return Some(*anchor);
                }
                let every_ms = (*every_seconds as i64).saturating_mul(1000);
                let since = (t - *anchor).num_milliseconds();
                let k = since.div_euclid(every_ms) + 1;
                offset_ms(*anchor, k.saturating_mul(every_ms))
            }
            Compiled::Cron(c) => c.next_after(t),
            Compiled::At(at) => (*at > t).then_some(*at),
            Compiled::Never => None,
        }
    }

    /// The last slot strictly before `t`.
    pub fn prev_before(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Compiled::OnDays(inner, f) => f.prev_before(t, |x| inner.prev_before(x)),
            Compiled::Every {
                every_seconds,
                anchor,
            } => {
                if t <= *anchor {
                    return None;
                }
                let every_ms = (*every_seconds as i64).saturating_mul(1000);
                let since = (t - *anchor).num_milliseconds();
                // largest k with anchor + k·every < t
                let k = (since - 1).div_euclid(every_ms);
                offset_ms(*anchor, k.saturating_mul(every_ms))
            }
            Compiled::Cron(c) => c.prev_before(t),
            Compiled::At(at) => (*at < t).then_some(*at),
            Compiled::Never => None,
        }
    }

    /// The last slot at or before `t` (for cron, the "scheduled instant"
    /// that the misfire grace is measured from).
    pub(crate) fn latest_at_or_before(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.prev_before(t + chrono::Duration::milliseconds(1))
            .filter(|s| *s <= t)
    }

    /// Count the slots in `(after, until]` and return the first and last of them, stopping
    /// the count at `cap` (callers use it for `slots_count` of missed/overlap rows).
    pub fn slots_between(
        &self,
        after: DateTime<Utc>,
        until: DateTime<Utc>,
        cap: u64,
    ) -> Option<(DateTime<Utc>, DateTime<Utc>, u64)> {
        let first = self.next_after(after).filter(|s| *s <= until)?;
        if let Compiled::Every { every_seconds, .. } = self {
            let every_ms = (*every_seconds as i64).saturating_mul(1000);
            let n = (until - first).num_milliseconds().div_euclid(every_ms) as u64 + 1;
            let last = offset_ms(first, ((n - 1) as i64).saturating_mul(every_ms)).unwrap_or(first);
            return Some((first, last, n));
        }
        let (mut last, mut n) = (first, 1u64);
        while n < cap {
            match self.next_after(last).filter(|s| *s <= until) {
                Some(s) => {
                    last = s;
                    n += 1;
                }
                None => break,
            }
        }
        if n == cap {
            // Still more slots: report the last one before `until` without counting further.
            if let Some(l) = self.latest_at_or_before(until) {
                last = l;
            }
        }
        Some((first, last, n))
    }

    /// The schedule in words, e.g. "every 5 minutes" or "at 07:00 every day (Europe/Berlin)".
    pub fn describe(&self) -> String {
        match self {
            Compiled::OnDays(inner, f) => format!("{}{}", inner.describe(), f.rule.describe()),
            Compiled::Every { every_seconds, .. } => describe_every(*every_seconds),
            Compiled::Cron(c) => c.describe(),
            Compiled::Never => "no schedule: runs after its parents".to_string(),
            Compiled::At(at) => format!(
                "once at {}",
                at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
            ),
        }
    }
}

/// Where a schedule's slots sit, in words, for `validate` and `describe`: an `every` grid
/// (`hourly`, `every 2h`) counts from the moment its job is first stored, a cron schedule sits
/// on the clock. `None` for one-shots and `after:`-only jobs.
pub(crate) fn placement(spec: &ScheduleSpec) -> Option<String> {
    match spec {
        ScheduleSpec::Every { every_seconds } => {
            let grid = "counted from when the job is first stored, its first slot one interval \
                        later, not on the clock";
            Some(match clock_form(*every_seconds) {
                Some(c) => format!("{grid}; {c} runs on the clock"),
                None => grid.to_string(),
            })
        }
        ScheduleSpec::Cron { .. } => Some("on the clock".to_string()),
        _ => None,
    }
}

/// The schedule that runs every `secs` on the clock instead of on a grid counted from when the
/// job was stored (`@hourly` for 3600), when there is one.
pub(crate) fn clock_form(secs: u64) -> Option<String> {
    let s = secs;
    if s == 60 {
        Some("`* * * * *`".to_string())
    } else if s == 3600 {
        Some("@hourly".to_string())
    } else if s == 86_400 {
        Some("@daily or `daily at 9am`".to_string())
    } else if s == 604_800 {
        Some("@weekly".to_string())
    } else if s.is_multiple_of(60) && s < 3600 && 3600u64.is_multiple_of(s) {
        Some(format!("`*/{} * * * *`", s / 60))
    } else if s.is_multiple_of(3600) && s < 86_400 && 86_400u64.is_multiple_of(s) {
        Some(format!("`0 */{} * * *`", s / 3600))
    } else {
        None
    }
}

/// `t + ms`, or `None` past the end of representable time (never a panic).
fn offset_ms(t: DateTime<Utc>, ms: i64) -> Option<DateTime<Utc>> {
    chrono::Duration::try_milliseconds(ms).and_then(|d| t.checked_add_signed(d))
}

/// "every 5 minutes", "every 90 seconds", "every day".
pub(crate) fn describe_every(secs: u64) -> String {
    let unit = |n: u64, one: &str, many: &str| {
        if n == 1 {
            format!("every {one}")
        } else {
            format!("every {n} {many}")
        }
    };
    if secs.is_multiple_of(86_400) {
        unit(secs / 86_400, "day", "days")
    } else if secs.is_multiple_of(3600) {
        unit(secs / 3600, "hour", "hours")
    } else if secs.is_multiple_of(60) {
        unit(secs / 60, "minute", "minutes")
    } else {
        unit(secs, "second", "seconds")
    }
}

#[cfg(test)]
mod tests {
    /// `hourly` counts from when the job is stored, `@hourly` sits on the clock, and the words
    /// say so, with the clock form to use instead.
    #[test]
    fn placement_says_grid_or_clock() {
        let every = |s: u64| placement(&ScheduleSpec::Every { every_seconds: s }).unwrap();
        assert!(every(3600).starts_with("counted from when the job is first stored"));
        assert!(every(3600).ends_with("@hourly runs on the clock"));
        assert!(every(86_400).contains("@daily or `daily at 9am`"));
        assert!(every(60).ends_with("`* * * * *` runs on the clock"));
        assert!(every(300).ends_with("`*/5 * * * *` runs on the clock"));
        assert!(every(7200).ends_with("`0 */2 * * *` runs on the clock"));
        assert!(!every(7).contains("runs on the clock"));
        let cron = parse_schedule("@hourly", "UTC").unwrap();
        assert_eq!(placement(&cron).as_deref(), Some("on the clock"));
        let at = parse_schedule("at:2026-12-01T09:00:00Z", "UTC").unwrap();
        assert_eq!(placement(&at), None);
    }

    use super::*;

    use crate::testkit::time::rfc3339 as t;

    #[test]
    fn every_grid_is_anchored_and_strict() {
        let c = Compiled::new(
            &ScheduleSpec::Every { every_seconds: 60 },
            t("2026-01-01T00:00:00Z"),
        )
        .unwrap();
        assert_eq!(
            c.next_after(t("2025-12-31T00:00:00Z")),
            Some(t("2026-01-01T00:00:00Z"))
        );
        assert_eq!(
            c.next_after(t("2026-01-01T00:00:00Z")),
            Some(t("2026-01-01T00:01:00Z"))
        );
        assert_eq!(
            c.next_after(t("2026-01-01T00:00:59Z")),
            Some(t("2026-01-01T00:01:00Z"))
        );
        assert_eq!(
            c.prev_before(t("2026-01-01T00:01:00Z")),
            Some(t("2026-01-01T00:00:00Z"))
        );
        assert_eq!(
            c.prev_before(t("2026-01-01T00:01:01Z")),
            Some(t("2026-01-01T00:01:00Z"))
        );
        assert_eq!(c.prev_before(t("2026-01-01T00:00:00Z")), None);
        assert_eq!(
            c.latest_at_or_before(t("2026-01-01T00:01:00Z")),
            Some(t("2026-01-01T00:01:00Z"))
        );
        let (a, b, n) = c
            .slots_between(t("2026-01-01T00:00:00Z"), t("2026-01-01T00:05:30Z"), 1000)
            .unwrap();
        assert_eq!(
            (a, b, n),
            (t("2026-01-01T00:01:00Z"), t("2026-01-01T00:05:00Z"), 5)
        );
    }

    #[test]
    fn at_has_exactly_one_slot() {
        let c = Compiled::new(
            &ScheduleSpec::At {
                at: t("2026-01-01T09:00:00Z"),
            },
            t("2020-01-01T00:00:00Z"),
        )
        .unwrap();
        assert_eq!(
            c.next_after(t("2026-01-01T08:00:00Z")),
            Some(t("2026-01-01T09:00:00Z"))
        );
        assert_eq!(c.next_after(t("2026-01-01T09:00:00Z")), None);
        assert_eq!(
            c.prev_before(t("2026-01-01T09:00:01Z")),
            Some(t("2026-01-01T09:00:00Z"))
        );
    }

    #[test]
    fn huge_intervals_end_instead_of_panicking() {
        let c = Compiled::new(
            &ScheduleSpec::Every {
                every_seconds: u64::MAX / 2,
            },
            t("2026-01-01T00:00:00Z"),
        )
        .unwrap();
        assert_eq!(c.next_after(t("2026-01-01T00:00:00Z")), None);
        assert_eq!(
            c.prev_before(t("2026-01-01T00:00:01Z")),
            Some(t("2026-01-01T00:00:00Z"))
        );
    }

    #[test]
    fn describes_intervals() {
        assert_eq!(describe_every(300), "every 5 minutes");
        assert_eq!(describe_every(90), "every 90 seconds");
        assert_eq!(describe_every(86_400), "every day");
        assert_eq!(describe_every(7200), "every 2 hours");
    }
}

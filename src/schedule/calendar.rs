//! Calendars: named sets of dates (ISO dates and weekdays) and the per-job day rule
//! (`only_on` / `except_on`) that removes slots on excluded dates.
//!
//! Owns: [`Calendar`], [`DayRule`] and the filtered slot walk ([`Filtered`]) that
//! `Compiled` delegates to. A slot whose date in the job's zone is excluded is not a slot: it is
//! skipped by `next_after`/`prev_before`, so it never gets a claim, a `missed` row or a count.
//! Calendars are resolved when the jobs file is read (a `file:` of dates is read by `config`),
//! so the stored job carries the whole set and every owner decides alike. Must not touch: the
//! store, clocks, I/O.

use std::collections::BTreeSet;

use chrono::{DateTime, Datelike, Duration, NaiveDate, TimeZone, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

/// How many days a slot walk may skip before it concludes there is no allowed slot (a little
/// over eleven years: a yearly holiday-only job still finds its next date).
pub(crate) const MAX_SKIPPED_DAYS: u32 = 4100;

/// One named set of dates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Calendar {
    /// The calendar's name in the jobs file.
    pub name: String,
    /// Weekdays in the set, Monday first (`weekdays[0]` = Monday).
    #[serde(default)]
    pub weekdays: [bool; 7],
    /// Single dates in the set.
    #[serde(default)]
    pub dates: BTreeSet<NaiveDate>,
}

impl Calendar {
    /// Whether `d` is in the set.
    pub fn contains(&self, d: NaiveDate) -> bool {
        self.weekdays[d.weekday().num_days_from_monday() as usize] || self.dates.contains(&d)
    }

    /// "Mon, Tue and 3 dates": for messages and the console.
    pub fn summary(&self) -> String {
        let days: Vec<&str> = WEEKDAY_NAMES
            .iter()
            .zip(self.weekdays)
            .filter(|(_, on)| *on)
            .map(|((short, _), _)| *short)
            .collect();
        let mut parts = Vec::new();
        if !days.is_empty() {
            parts.push(days.join(", "));
        }
        match self.dates.len() {
            0 => {}
            1 => parts.push("1 date".into()),
            n => parts.push(format!("{n} dates")),
        }
        if parts.is_empty() {
            "no dates".into()
        } else {
            parts.join(" and ")
        }
    }
}

/// Short and long weekday names, Monday first (what the jobs file accepts, any case).
pub(crate) const WEEKDAY_NAMES: [(&str, &str); 7] = [
    ("mon", "monday"),
    ("tue", "tuesday"),
    ("wed", "wednesday"),
    ("thu", "thursday"),
    ("fri", "friday"),
    ("sat", "saturday"),
    ("sun", "sunday"),
];

/// `mon`/`Monday`/… to its index (Monday = 0), or `None`.
pub(crate) fn parse_weekday(s: &str) -> Option<usize> {
    let s = s.trim().to_ascii_lowercase();
    WEEKDAY_NAMES
        .iter()
        .position(|(short, long)| s == *short || s == *long)
}

/// Which dates a job's slots may fall on: in `only_on` (when set) and not in `except_on`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct DayRule {
    /// Slots only on these dates (`only_on`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub only_on: Option<Calendar>,
    /// No slots on these dates (`except_on`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub except_on: Option<Calendar>,
}

impl DayRule {
    /// No rule: every date allowed.
    pub fn is_empty(&self) -> bool {
        self.only_on.is_none() && self.except_on.is_none()
    }

    /// Whether a slot may fall on `d`.
    pub fn allows(&self, d: NaiveDate) -> bool {
        self.only_on.as_ref().is_none_or(|c| c.contains(d))
            && self.except_on.as_ref().is_none_or(|c| !c.contains(d))
    }

    /// ", only on business-days, except on holidays" (appended to the schedule's words).
    pub fn describe(&self) -> String {
        let mut s = String::new();
        if let Some(c) = &self.only_on {
            s.push_str(&format!(", only on {}", c.name));
        }
        if let Some(c) = &self.except_on {
            s.push_str(&format!(", except on {}", c.name));
        }
        s
    }
}

/// The first instant of local date `d` in `tz` (the first existing minute when midnight falls
/// in a DST gap); `None` only past the end of representable time.
fn start_of(d: NaiveDate, tz: Tz) -> Option<DateTime<Utc>> {
    let midnight = d.and_hms_opt(0, 0, 0)?;
    (0..=180).find_map(|m| {
        tz.from_local_datetime(&(midnight + Duration::minutes(m)))
            .earliest()
            .map(|t| t.with_timezone(&Utc))
    })
}

fn local_date(t: DateTime<Utc>, tz: Tz) -> NaiveDate {
    t.with_timezone(&tz).date_naive()
}

/// A slot walk that skips slots on dates the rule excludes (in the job's zone).
#[derive(Debug, Clone)]
pub struct Filtered {
    /// The dates allowed.
    pub rule: DayRule,
    /// The zone in which a slot's date is taken.
    pub tz: Tz,
}

impl Filtered {
    /// The first allowed date from `d` in the direction of `step` (`succ_opt` or `pred_opt`),
    /// counting every date passed in `skipped`; `None` past [`MAX_SKIPPED_DAYS`] in all.
    fn next_allowed(
        &self,
        d: NaiveDate,
        skipped: &mut u32,
        step: fn(&NaiveDate) -> Option<NaiveDate>,
    ) -> Option<NaiveDate> {
        let mut day = step(&d)?;
        loop {
            *skipped += 1;
            if *skipped > MAX_SKIPPED_DAYS {
                return None;
            }
            if self.rule.allows(day) {
                return Some(day);
            }
            day = step(&day)?;
        }
    }

    /// The first allowed slot strictly after `t`, asking `inner` for unfiltered slots.
    pub fn next_after(
        &self,
        mut t: DateTime<Utc>,
        inner: impl Fn(DateTime<Utc>) -> Option<DateTime<Utc>>,
    ) -> Option<DateTime<Utc>> {
        let mut skipped = 0u32;
        loop {
            let s = inner(t)?;
            let d = local_date(s, self.tz);
            if self.rule.allows(d) {
                return Some(s);
            }
            // Jump to the next allowed date rather than walking its excluded slots one by one.
            let next = self.next_allowed(d, &mut skipped, NaiveDate::succ_opt)?;
            let start = start_of(next, self.tz)? - Duration::milliseconds(1);
            t = start.max(s);
        }
    }

    /// The last allowed slot strictly before `t`.
    pub fn prev_before(
        &self,
        mut t: DateTime<Utc>,
        inner: impl Fn(DateTime<Utc>) -> Option<DateTime<Utc>>,
    ) -> Option<DateTime<Utc>> {
        let mut skipped = 0u32;
        loop {
            let s = inner(t)?;
            let d = local_date(s, self.tz);
            if self.rule.allows(d) {
                return Some(s);
            }
            let prev = self.next_allowed(d, &mut skipped, NaiveDate::pred_opt)?;
            // Strictly before the start of the day after `prev` = at the latest on `prev`.
            let end = start_of(prev.succ_opt()?, self.tz)?;
            t = end.min(s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::Compiled;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn cal(weekdays: [bool; 7], dates: &[&str]) -> Calendar {
        Calendar {
            name: "c".into(),
            weekdays,
            dates: dates.iter().map(|d| d.parse().unwrap()).collect(),
        }
    }

    fn hourly(rule: DayRule, tz: &str) -> Compiled {
        let tz = crate::schedule::parse_tz(tz).unwrap();
        Compiled::new(
            &crate::schedule::ScheduleSpec::Cron {
                expr: "0 * * * *".into(),
                tz: tz.name().into(),
            },
            at("2026-01-01T00:00:00Z"),
        )
        .unwrap()
        .on_days(&rule, tz)
    }

    #[test]
    fn weekends_are_skipped_both_ways() {
        let rule = DayRule {
            except_on: Some(cal([false, false, false, false, false, true, true], &[])),
            ..DayRule::default()
        };
        let c = hourly(rule, "UTC");
        // Friday 2026-12-04 23:30 → Monday 00:00.
        assert_eq!(
            c.next_after(at("2026-12-04T23:30:00Z")),
            Some(at("2026-12-07T00:00:00Z"))
        );
        // Monday 00:30 ← back to Friday 23:00.
        assert_eq!(
            c.prev_before(at("2026-12-07T00:00:00Z")),
            Some(at("2026-12-04T23:00:00Z"))
        );
        assert_eq!(
            c.slots_between(at("2026-12-04T22:30:00Z"), at("2026-12-07T01:00:00Z"), 1000),
            Some((at("2026-12-04T23:00:00Z"), at("2026-12-07T01:00:00Z"), 3))
        );
    }

    #[test]
    fn dates_are_judged_in_the_job_zone() {
        // Only on 2026-12-25 in Berlin: 23:00 UTC on the 24th is already the 25th there.
        let rule = DayRule {
            only_on: Some(cal([false; 7], &["2026-12-25"])),
            ..DayRule::default()
        };
        let c = hourly(rule, "Europe/Berlin");
        assert_eq!(
            c.next_after(at("2026-12-20T00:00:00Z")),
            Some(at("2026-12-24T23:00:00Z"))
        );
        // After the last allowed date there is no slot at all (the job retires).
        assert_eq!(c.next_after(at("2026-12-25T22:59:00Z")), None);
    }

    #[test]
    fn a_rule_that_allows_nothing_ends_the_walk() {
        let rule = DayRule {
            only_on: Some(cal([false; 7], &[])),
            ..DayRule::default()
        };
        let c = hourly(rule, "UTC");
        assert_eq!(c.next_after(at("2026-12-20T00:00:00Z")), None);
        assert_eq!(c.prev_before(at("2026-12-20T00:00:00Z")), None);
    }

    #[test]
    fn a_yearly_date_years_away_is_still_found() {
        let rule = DayRule {
            only_on: Some(cal([false; 7], &["2035-03-01"])),
            ..DayRule::default()
        };
        let c = hourly(rule, "UTC");
        assert_eq!(
            c.next_after(at("2026-12-20T00:00:00Z")),
            Some(at("2035-03-01T00:00:00Z"))
        );
    }

    #[test]
    fn midnight_in_a_dst_gap_still_starts_the_day() {
        // America/Santiago skips 00:00–01:00 on its spring-forward day (2026-09-06).
        let rule = DayRule {
            only_on: Some(cal([false; 7], &["2026-09-06"])),
            ..DayRule::default()
        };
        let c = hourly(rule, "America/Santiago");
        let first = c.next_after(at("2026-09-01T00:00:00Z")).unwrap();
        let tz = crate::schedule::parse_tz("America/Santiago").unwrap();
        assert_eq!(
            first.with_timezone(&tz).date_naive(),
            "2026-09-06".parse::<NaiveDate>().unwrap()
        );
    }

    #[test]
    fn summary_and_weekday_names() {
        assert_eq!(parse_weekday("Mon"), Some(0));
        assert_eq!(parse_weekday("SUNDAY"), Some(6));
        assert_eq!(parse_weekday("funday"), None);
        let c = cal(
            [true, false, false, false, true, false, false],
            &["2026-12-25"],
        );
        assert_eq!(c.summary(), "mon, fri and 1 date");
    }
}

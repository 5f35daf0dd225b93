//! Times for people, both ways. Out: the time columns users of `systemctl list-timers` expect
//! (NEXT / LEFT / LAST / PASSED), absolute times in local time (or UTC) and relative spans in
//! one compact form (`4m10s`, `2h05m`, `3d01h`), shared by `cronsole jobs`, `describe` and the
//! console. In: [`parse_time`], the one reader of every time a command takes
//! (`--after`, `--before`, `--since`, `--from`, `--to`), so a form one flag accepts every flag
//! accepts.
//!
//! Owns: formatting and reading instants and spans for people. Must not touch: the environment
//! (the binary picks the [`Zone`] once and passes it in), the store, the clock (callers pass
//! `now`). JSON output never goes through here: it stays RFC 3339 UTC.

use chrono::{DateTime, Duration, Local, LocalResult, NaiveDate, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;

/// Which zone absolute times are shown in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Zone {
    Utc,
    /// An IANA zone (from `TZ`), so times carry its abbreviation (`CET`).
    Named(Tz),
    /// The system's local zone (shown with its offset, `+01:00`).
    Local,
}

impl Zone {
    /// `--utc` wins; else `TZ` when it names an IANA zone; else the system's local zone.
    pub fn pick(utc: bool, tz_env: Option<&str>) -> Zone {
        if utc {
            return Zone::Utc;
        }
        match tz_env.map(|s| s.trim().trim_start_matches(':')) {
            Some("UTC" | "Etc/UTC" | "UTC0") => Zone::Utc,
            Some(name) if !name.is_empty() => name.parse::<Tz>().map_or(Zone::Local, Zone::Named),
            _ => Zone::Local,
        }
    }
}

/// `Mon 2026-11-30 17:00:00 CET` (systemd's form).
pub fn stamp(t: DateTime<Utc>, zone: Zone) -> String {
    const F: &str = "%a %Y-%m-%d %H:%M:%S";
    match zone {
        Zone::Utc => format!("{} UTC", t.format(F)),
        Zone::Named(tz) => t
            .with_timezone(&tz)
            .format("%a %Y-%m-%d %H:%M:%S %Z")
            .to_string(),
        Zone::Local => t
            .with_timezone(&Local)
            .format("%a %Y-%m-%d %H:%M:%S %:z")
            .to_string(),
    }
}

/// A slot or a time it fires, as [`stamp`] but with its fraction of a second when it has one
/// (`at:` instants may): `Mon 2026-11-30 17:00:05.500 CET`. Whole seconds print as `stamp`.
pub fn slot_stamp(t: DateTime<Utc>, zone: Zone) -> String {
    let f = format!("%a %Y-%m-%d %H:%M:%S{}", fraction(t));
    match zone {
        Zone::Utc => format!("{} UTC", t.format(&f)),
        Zone::Named(tz) => t.with_timezone(&tz).format(&format!("{f} %Z")).to_string(),
        Zone::Local => t
            .with_timezone(&Local)
            .format(&format!("{f} %:z"))
            .to_string(),
    }
}

/// The chrono specifier of `t`'s fraction of a second as people are shown it: none for a whole
/// second, 3 or 6 digits as it has them, and never more than 6 (an instant taken from the
/// clock carries nanoseconds nobody wrote; a time written in a jobs file has at most
/// microseconds, so it is shown whole).
pub fn fraction(t: DateTime<Utc>) -> &'static str {
    use chrono::Timelike;
    if t.nanosecond().is_multiple_of(1_000) {
        "%.f"
    } else {
        "%.6f"
    }
}

/// `t` in RFC 3339 UTC with [`fraction`]'s digits: `2026-11-30T16:00:05.5Z` is
/// `2026-11-30T16:00:05.500Z`, a whole second has none.
pub fn rfc3339(t: DateTime<Utc>) -> String {
    use chrono::{SecondsFormat, Timelike};
    let n = t.nanosecond();
    let f = if n == 0 {
        SecondsFormat::Secs
    } else if n.is_multiple_of(1_000_000) {
        SecondsFormat::Millis
    } else {
        SecondsFormat::Micros
    };
    t.to_rfc3339_opts(f, true)
}

/// A span, compact, two units at most with the second padded so columns line up: `42s`,
/// `4m10s`, `2h05m`, `3d04h`. Under a second is `0s`. The one span format of `jobs`,
/// `describe`, `dry-run` and the console (whose narrow columns chose it), so one span reads
/// alike everywhere.
pub fn span(d: Duration) -> String {
    span_secs(d.num_seconds())
}

/// [`span`] of a whole number of seconds (a negative count is `0s`).
pub fn span_secs(secs: i64) -> String {
    let s = secs.max(0);
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else if s < 86_400 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else {
        format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600)
    }
}

/// The LEFT column: time until `next`; `due` once it is reached.
pub fn left(next: DateTime<Utc>, now: DateTime<Utc>) -> String {
    if next <= now {
        "due".to_string()
    } else {
        span(next - now)
    }
}

/// The PASSED column: `2h05m ago`. An instant ahead of `now` (written while a clock was
/// ahead, since stepped back) says so, `2d00h ahead`, never `0s ago`.
pub fn passed(last: DateTime<Utc>, now: DateTime<Utc>) -> String {
    if last > now + Duration::seconds(1) {
        return format!("{} ahead", span(last - now));
    }
    format!("{} ago", span(now - last))
}

/// A time argument that could not be read: says what was given and every form accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "'{input}' is not a time{why}: use an RFC 3339 instant (2026-11-29T09:00:00Z), a wall time \
     in {zone} (2026-11-29T09:00, 2026-11-29 09:00), a date (2026-11-29: its midnight), now, \
     today, yesterday, tomorrow (midnight), a duration ago (2h, 30m ago, 1h30m) or ahead (in 2h)"
)]
pub struct TimeArgError {
    /// What was given.
    pub input: String,
    /// The zone wall times and dates are read in.
    pub zone: String,
    /// The detail, with its leading separator (`": duration too large"`), or empty.
    pub why: String,
}

/// Read a time argument: RFC 3339; a naive date-time or a date (midnight) as a wall time in
/// `zone` (a wall time skipped by a DST change is the first instant after the gap; a repeated
/// one is its first pass); `now`; `today`, `yesterday`, `tomorrow` (midnight in `zone`); a
/// duration ago (`2h`, `2h ago`) or ahead (`in 2h`). Case-insensitive, spaces around ignored.
/// `zone_name` names `zone` in the error.
pub fn parse_time<Z: TimeZone>(
    input: &str,
    now: DateTime<Utc>,
    zone: &Z,
    zone_name: &str,
) -> Result<DateTime<Utc>, TimeArgError> {
    let err = |why: &str| TimeArgError {
        input: input.trim().to_string(),
        zone: zone_name.to_string(),
        why: why.to_string(),
    };
    let s = input.trim();
    if s.is_empty() {
        return Err(err(""));
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.to_utc());
    }
    let lower = s.to_ascii_lowercase();
    let today = now.with_timezone(zone).date_naive();
    let day = match lower.as_str() {
        "now" => return Ok(now),
        "today" => Some(today),
        "yesterday" => today.pred_opt(),
        "tomorrow" => today.succ_opt(),
        _ => NaiveDate::parse_from_str(s, "%Y-%m-%d").ok(),
    };
    let naive = day.map(|d| d.and_time(chrono::NaiveTime::MIN)).or_else(|| {
        [
            "%Y-%m-%dT%H:%M:%S%.f",
            "%Y-%m-%dT%H:%M",
            "%Y-%m-%d %H:%M:%S%.f",
            "%Y-%m-%d %H:%M",
        ]
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(s, f).ok())
    });
    if let Some(naive) = naive {
        return wall_time(naive, zone).ok_or_else(|| err(": no such wall time"));
    }
    let (ahead, text) = match lower.strip_prefix("in ") {
        Some(rest) => (true, rest.trim()),
        None => (false, lower.strip_suffix(" ago").unwrap_or(&lower).trim()),
    };
    let d = crate::schedule::parse_duration(text).map_err(|_| err(""))?;
    let d = Duration::from_std(d).map_err(|_| err(": duration too large"))?;
    let t = if ahead {
        now.checked_add_signed(d)
    } else {
        now.checked_sub_signed(d)
    };
    t.ok_or_else(|| err(": duration too large"))
}

/// The instant of the wall time `naive` in `zone`: its first pass when it repeats, the first
/// instant after the gap when a DST change skips it.
fn wall_time<Z: TimeZone>(naive: NaiveDateTime, zone: &Z) -> Option<DateTime<Utc>> {
    match zone.from_local_datetime(&naive) {
        LocalResult::Single(t) => Some(t.to_utc()),
        LocalResult::Ambiguous(a, b) => Some(a.to_utc().min(b.to_utc())),
        LocalResult::None => {
            // Skipped by a DST change: the first instant whose wall time is later. Wall time
            // only grows across a gap, so bisect the UTC instants around it (gaps are hours).
            let wall = |u: DateTime<Utc>| u.with_timezone(zone).naive_local();
            let (mut lo, mut hi) = (
                naive.and_utc() - Duration::hours(15),
                naive.and_utc() + Duration::hours(15),
            );
            while (hi - lo).num_seconds() > 1 {
                let mid = lo + Duration::seconds((hi - lo).num_seconds() / 2);
                if wall(mid) > naive {
                    hi = mid;
                } else {
                    lo = mid;
                }
            }
            Some(hi)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testkit::time::rfc3339 as t;

    #[test]
    fn spans_are_compact_with_two_units_at_most() {
        assert_eq!(span(Duration::milliseconds(400)), "0s");
        assert_eq!(span(Duration::seconds(45)), "45s");
        assert_eq!(span(Duration::seconds(250)), "4m10s");
        assert_eq!(span(Duration::seconds(7500)), "2h05m");
        assert_eq!(span(Duration::seconds(7205)), "2h00m");
        assert_eq!(span(Duration::seconds(3 * 86_400 + 3600)), "3d01h");
        assert_eq!(span(Duration::days(9)), "9d00h");
        assert_eq!(span(Duration::seconds(-5)), "0s");
        assert_eq!(span_secs(116), "1m56s");
    }

    #[test]
    fn stamps_follow_the_chosen_zone() {
        let at = t("2026-11-30T16:00:00Z");
        assert_eq!(stamp(at, Zone::Utc), "Mon 2026-11-30 16:00:00 UTC");
        let z = Zone::pick(false, Some("Europe/Paris"));
        assert_eq!(stamp(at, z), "Mon 2026-11-30 17:00:00 CET");
        assert_eq!(Zone::pick(true, Some("Europe/Paris")), Zone::Utc);
        assert_eq!(Zone::pick(false, Some(":UTC")), Zone::Utc);
        assert_eq!(Zone::pick(false, Some("Not/AZone")), Zone::Local);
    }

    /// A slot keeps its fraction of a second on screen; a whole second prints as `stamp`.
    #[test]
    fn slot_stamps_keep_the_fraction() {
        let z = Zone::pick(false, Some("Europe/Paris"));
        let whole = t("2026-11-30T16:00:05Z");
        assert_eq!(slot_stamp(whole, z), stamp(whole, z));
        let half = t("2026-11-30T16:00:05.5Z");
        assert_eq!(
            slot_stamp(half, Zone::Utc),
            "Mon 2026-11-30 16:00:05.500 UTC"
        );
        assert_eq!(slot_stamp(half, z), "Mon 2026-11-30 17:00:05.500 CET");
        // A clock instant's nanoseconds are cut to microseconds, never rounded up; a written
        // microsecond fraction is kept whole.
        let clock = t("2026-11-30T16:00:05.659098376Z");
        assert_eq!(
            slot_stamp(clock, Zone::Utc),
            "Mon 2026-11-30 16:00:05.659098 UTC"
        );
        assert_eq!(rfc3339(clock), "2026-11-30T16:00:05.659098Z");
        let micro = t("2026-11-30T16:00:05.123456Z");
        assert_eq!(rfc3339(micro), "2026-11-30T16:00:05.123456Z");
        assert_eq!(
            slot_stamp(micro, Zone::Utc),
            "Mon 2026-11-30 16:00:05.123456 UTC"
        );
        assert_eq!(rfc3339(half), "2026-11-30T16:00:05.500Z");
        assert_eq!(rfc3339(whole), "2026-11-30T16:00:05Z");
        let up = t("2026-11-30T16:00:05.999999999Z");
        assert_eq!(rfc3339(up), "2026-11-30T16:00:05.999999Z");
    }

    /// One reader for every time flag: what `history --since` takes, `next --after` and
    /// `backfill --from` take too.
    #[test]
    fn time_arguments_read_every_form_in_the_given_zone() {
        let now = t("2026-11-30T16:20:00Z");
        let utc = |s: &str| parse_time(s, now, &Utc, "UTC");
        assert_eq!(utc("2026-11-29T09:00:00Z"), Ok(t("2026-11-29T09:00:00Z")));
        assert_eq!(
            utc("2026-11-29T09:00:00+01:00"),
            Ok(t("2026-11-29T08:00:00Z"))
        );
        assert_eq!(utc("2026-11-29"), Ok(t("2026-11-29T00:00:00Z")));
        assert_eq!(utc(" 2026-11-29 09:30 "), Ok(t("2026-11-29T09:30:00Z")));
        assert_eq!(utc("2026-11-29T09:30"), Ok(t("2026-11-29T09:30:00Z")));
        assert_eq!(utc("now"), Ok(now));
        assert_eq!(utc("Today"), Ok(t("2026-11-30T00:00:00Z")));
        assert_eq!(utc("yesterday"), Ok(t("2026-11-29T00:00:00Z")));
        assert_eq!(utc("tomorrow"), Ok(t("2026-12-01T00:00:00Z")));
        assert_eq!(utc("2h"), Ok(t("2026-11-30T14:20:00Z")));
        assert_eq!(utc("90m ago"), Ok(t("2026-11-30T14:50:00Z")));
        assert_eq!(utc("in 1h30m"), Ok(t("2026-11-30T17:50:00Z")));
        let paris: Tz = "Europe/Paris".parse().unwrap();
        let p = |s: &str| parse_time(s, now, &paris, "Europe/Paris");
        assert_eq!(p("2026-11-29"), Ok(t("2026-11-28T23:00:00Z")));
        assert_eq!(p("today"), Ok(t("2026-11-29T23:00:00Z")));
        // A wall time a DST change skips is the first instant after the gap.
        let ny: Tz = "America/New_York".parse().unwrap();
        assert_eq!(
            parse_time("2026-03-08 02:30", now, &ny, "America/New_York"),
            Ok(t("2026-03-08T07:00:00Z"))
        );
        for bad in ["", "soon", "2026-13-01", "-5m", "0s ago"] {
            let e = utc(bad).unwrap_err().to_string();
            assert!(
                e.contains("is not a time") && e.contains("RFC 3339"),
                "{bad}: {e}"
            );
            assert!(e.contains("2h") && e.contains("today"), "{bad}: {e}");
        }
    }

    #[test]
    fn left_and_passed() {
        let now = t("2026-11-30T16:00:00Z");
        assert_eq!(left(now + Duration::seconds(90), now), "1m30s");
        assert_eq!(left(now, now), "due");
        assert_eq!(passed(now - Duration::hours(26), now), "1d02h ago");
        assert_eq!(passed(now + Duration::days(2), now), "2d00h ahead");
        assert_eq!(passed(now + Duration::milliseconds(300), now), "0s ago");
    }
}

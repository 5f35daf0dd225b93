//! The time columns users of `systemctl list-timers` expect (issue 12 item 3): NEXT / LEFT /
//! LAST / PASSED, absolute times in local time (or UTC) and relative spans in systemd's style
//! (`4min 10s`, `2h 5min`, `3 days 1h`). Shared by `cronsole jobs`, `describe` and the console.
//!
//! Owns: formatting instants and spans for people. Must not touch: the environment (the binary
//! picks the [`Zone`] once and passes it in), the store, the clock (callers pass `now`). JSON
//! output never goes through here: it stays RFC 3339 UTC.

use chrono::{DateTime, Duration, Local, Utc};
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
    const F: &str = "%a %Y-%m-%d %H:%M:%S%.f";
    match zone {
        Zone::Utc => format!("{} UTC", t.format(F)),
        Zone::Named(tz) => t
            .with_timezone(&tz)
            .format("%a %Y-%m-%d %H:%M:%S%.f %Z")
            .to_string(),
        Zone::Local => t
            .with_timezone(&Local)
            .format("%a %Y-%m-%d %H:%M:%S%.f %:z")
            .to_string(),
    }
}

/// A span in systemd's words, two units at most: `45s`, `4min 10s`, `2h 5min`, `3 days 1h`,
/// `1 week 2 days`. Under a second is `0s`.
pub fn span(d: Duration) -> String {
    let s = d.num_seconds().max(0);
    let units: [(i64, &str, &str); 6] = [
        (365 * 86_400, " year", " years"),
        (7 * 86_400, " week", " weeks"),
        (86_400, " day", " days"),
        (3600, "h", "h"),
        (60, "min", "min"),
        (1, "s", "s"),
    ];
    let mut out: Vec<String> = Vec::new();
    let mut rest = s;
    for (size, one, many) in units {
        if out.len() == 2 {
            break;
        }
        let n = rest / size;
        if n > 0 {
            out.push(format!("{n}{}", if n == 1 { one } else { many }));
            rest -= n * size;
        } else if !out.is_empty() {
            // Two units must be adjacent (`2h 5min`, never `2h 5s`).
            break;
        }
    }
    if out.is_empty() {
        "0s".to_string()
    } else {
        out.join(" ")
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

/// The PASSED column: `2h 5min ago`.
pub fn passed(last: DateTime<Utc>, now: DateTime<Utc>) -> String {
    format!("{} ago", span(now - last))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testkit::time::rfc3339 as t;

    #[test]
    fn spans_read_like_systemd() {
        assert_eq!(span(Duration::milliseconds(400)), "0s");
        assert_eq!(span(Duration::seconds(45)), "45s");
        assert_eq!(span(Duration::seconds(250)), "4min 10s");
        assert_eq!(span(Duration::seconds(7500)), "2h 5min");
        assert_eq!(span(Duration::seconds(7205)), "2h");
        assert_eq!(span(Duration::seconds(3 * 86_400 + 3600)), "3 days 1h");
        assert_eq!(span(Duration::days(9)), "1 week 2 days");
        assert_eq!(span(Duration::seconds(-5)), "0s");
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
    }

    #[test]
    fn left_and_passed() {
        let now = t("2026-11-30T16:00:00Z");
        assert_eq!(left(now + Duration::seconds(90), now), "1min 30s");
        assert_eq!(left(now, now), "due");
        assert_eq!(passed(now - Duration::hours(26), now), "1 day 2h ago");
    }
}

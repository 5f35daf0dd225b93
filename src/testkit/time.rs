//! Instants for tests: the one definition of the `t(…)` helpers unit tests, `tests/` and
//! `benches/` used to copy. A test file picks the form it reads best with, e.g.
//! `use cronsole::testkit::time::epoch as t;`.
//!
//! Owns: turning a literal into a `DateTime<Utc>`. Must not touch: any clock (tests inject
//! `ManualClock`/paused tokio time for that).

use chrono::{DateTime, Utc};

/// The base of [`base`]: 2027-01-15T08:00:00Z, a Friday, far from any DST change in the zones
/// the tests use.
pub const BASE: i64 = 1_800_000_000;

/// `secs` seconds after the Unix epoch. Panics (a test fixture, not input) if out of range.
pub fn epoch(secs: i64) -> DateTime<Utc> {
    match DateTime::from_timestamp(secs, 0) {
        Some(t) => t,
        None => panic!("test instant {secs} s after the epoch is out of range"),
    }
}

/// `secs` seconds after [`BASE`].
pub fn base(secs: i64) -> DateTime<Utc> {
    epoch(BASE + secs)
}

/// An RFC 3339 literal such as `"2026-11-29T12:00:00Z"`. Panics naming the literal if it does
/// not parse.
pub fn rfc3339(s: &str) -> DateTime<Utc> {
    match DateTime::parse_from_rfc3339(s) {
        Ok(t) => t.to_utc(),
        Err(e) => panic!("test instant {s:?} is not RFC 3339: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_forms_agree() {
        assert_eq!(epoch(BASE), base(0));
        assert_eq!(base(60), rfc3339("2027-01-15T08:01:00Z"));
        assert_eq!(rfc3339("1970-01-01T00:00:10+00:00"), epoch(10));
    }

    #[test]
    #[should_panic(expected = "not RFC 3339")]
    fn a_bad_literal_names_itself() {
        rfc3339("tomorrow");
    }
}

//! Property tests for schedules: the parsers never panic, slot chains are strictly monotonic,
//! `prev`/`next` are inverse (`prev(next(t))` is the last slot at or before `t`), and
//! `next_after`/`prev_before` agree with an independent brute-force oracle that walks real UTC
//! minutes, asks the `cron` crate whether each wall time matches, and applies the DST policy
//! directly.

use std::str::FromStr;

use chrono::{DateTime, Duration, LocalResult, NaiveDateTime, Offset, TimeZone, Utc};
use chrono_tz::Tz;
use cronsole::schedule::{Compiled, CronSchedule, parse_duration, parse_schedule};
use proptest::prelude::*;

/// Zones paired with instants near their 2026 transitions (and some ordinary instants), so
/// that generated cases land on gaps and folds often.
const PLACES: &[(&str, &str)] = &[
    ("America/New_York", "2026-03-08T07:00:00Z"),
    ("America/New_York", "2026-11-01T06:00:00Z"),
    ("Europe/London", "2026-03-29T01:00:00Z"),
    ("Europe/London", "2026-10-25T01:00:00Z"),
    ("Europe/Berlin", "2026-03-29T01:00:00Z"),
    ("Europe/Berlin", "2026-10-25T01:00:00Z"),
    ("Australia/Lord_Howe", "2026-04-04T15:00:00Z"),
    ("Australia/Lord_Howe", "2026-10-03T15:30:00Z"),
    ("Pacific/Chatham", "2026-04-04T14:00:00Z"),
    ("Pacific/Chatham", "2026-09-26T14:00:00Z"),
    ("Antarctica/Troll", "2026-03-29T01:00:00Z"),
    ("Antarctica/Troll", "2026-10-25T01:00:00Z"),
    ("America/Santiago", "2026-04-05T03:00:00Z"),
    ("America/Santiago", "2026-09-06T04:00:00Z"),
    ("America/Sao_Paulo", "2026-05-13T10:17:42Z"),
    ("Asia/Kolkata", "2026-05-13T10:17:42Z"),
    ("UTC", "2026-05-13T10:17:42Z"),
];

fn field(lo: u32, hi: u32) -> impl Strategy<Value = String> {
    prop_oneof![
        Just("*".to_string()),
        (1..=(hi - lo) / 2 + 1).prop_map(|n| format!("*/{n}")),
        (lo..=hi).prop_map(|a| a.to_string()),
        (lo..=hi, lo..=hi).prop_map(|(a, b)| format!("{},{}", a.min(b), a.max(b))),
        (lo..=hi, lo..=hi).prop_map(|(a, b)| format!("{}-{}", a.min(b), a.max(b))),
        (lo..=hi, lo..=hi, 1..5u32).prop_map(|(a, b, n)| format!(
            "{}-{}/{}",
            a.min(b),
            a.max(b),
            n
        )),
    ]
}

fn dom() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => Just("*".to_string()),
        1 => Just("?".to_string()),
        1 => (1..=28u32).prop_map(|a| a.to_string()),
        1 => (2..=10u32).prop_map(|n| format!("*/{n}")),
        1 => (1..=20u32, 0..=10u32).prop_map(|(a, k)| format!("{a}-{}", a + k)),
    ]
}

fn dow() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => Just("*".to_string()),
        1 => Just("1-5".to_string()),
        1 => Just("MON,wed,Fri".to_string()),
        1 => Just("6,7".to_string()),
        1 => (0..=7u32).prop_map(|a| a.to_string()),
        1 => Just("*/2".to_string()),
    ]
}

fn expr() -> impl Strategy<Value = String> {
    (
        prop_oneof![3 => field(0, 59), 1 => Just("*".to_string())],
        // Hours near the transitions (00:00-03:59 local) are where the DST policy matters.
        prop_oneof![2 => field(0, 23), 3 => field(0, 3), 1 => Just("0-3".to_string())],
        dom(),
        prop_oneof![4 => Just("*".to_string()), 1 => field(1, 12)],
        dow(),
    )
        .prop_map(|(a, b, c, d, e)| format!("{a} {b} {c} {d} {e}"))
}

fn place() -> impl Strategy<Value = (Tz, DateTime<Utc>)> {
    (0..PLACES.len(), -36 * 3600i64..36 * 3600).prop_map(|(i, off)| {
        let (z, base) = PLACES[i];
        (
            z.parse().unwrap(),
            DateTime::parse_from_rfc3339(base).unwrap().to_utc() + Duration::seconds(off),
        )
    })
}

/// Independent matcher: the `cron` crate on naive wall time (as UTC), with the Vixie day rule
/// built from two crate schedules.
struct Oracle {
    and: cron::Schedule,
    dom_only: cron::Schedule,
    dow_only: cron::Schedule,
    or_rule: bool,
    wildcard: bool,
    tz: Tz,
}

fn to_crate_dow(f: &str) -> String {
    // Translate Vixie day-of-week numbers (0/7 = Sunday) to names for the crate.
    let names = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"];
    if f == "*" || f == "?" {
        return "*".into();
    }
    if let Some(n) = f.strip_prefix("*/") {
        let n: usize = n.parse().unwrap();
        return (0..7)
            .step_by(n)
            .map(|d| names[d])
            .collect::<Vec<_>>()
            .join(",");
    }
    if f == "6,7" {
        return "SAT,SUN".into();
    }
    if f == "1-5" {
        return "MON-FRI".into();
    }
    if let Ok(n) = f.parse::<usize>() {
        return names[n].into();
    }
    f.to_string()
}

impl Oracle {
    fn new(expr: &str, tz: Tz) -> Oracle {
        let p: Vec<&str> = expr.split(' ').collect();
        let star = |s: &str| s.starts_with('*') || s.starts_with('?');
        let dom = if p[2] == "?" { "*" } else { p[2] };
        let dow = to_crate_dow(p[4]);
        let mk = |d: &str, w: &str| {
            cron::Schedule::from_str(&format!("0 {} {} {} {} {}", p[0], p[1], d, p[3], w)).unwrap()
        };
        Oracle {
            and: mk(dom, &dow),
            dom_only: mk(dom, "*"),
            dow_only: mk("*", &dow),
            or_rule: !(star(p[2]) || star(p[4])),
            wildcard: p[0].starts_with('*') || p[1].starts_with('*'),
            tz,
        }
    }

    fn matches(&self, w: NaiveDateTime) -> bool {
        let u = w.and_utc();
        if self.or_rule {
            self.dom_only.includes(u) || self.dow_only.includes(u)
        } else {
            self.and.includes(u)
        }
    }

    fn off(&self, u: DateTime<Utc>) -> i64 {
        self.tz
            .offset_from_utc_datetime(&u.naive_utc())
            .fix()
            .local_minus_utc() as i64
    }

    /// Does the schedule fire at UTC minute `u`?
    fn fires(&self, u: DateTime<Utc>) -> bool {
        let w = u.naive_utc() + Duration::seconds(self.off(u));
        if self.matches(w) {
            match self.tz.from_local_datetime(&w) {
                LocalResult::Single(_) => return true,
                LocalResult::Ambiguous(a, b) => {
                    if self.wildcard || u == a.to_utc().min(b.to_utc()) {
                        return true;
                    }
                }
                LocalResult::None => unreachable!("a real instant's wall time exists"),
            }
        }
        if !self.wildcard {
            // A forward jump exactly at u: the skipped wall times fire here (fixed-time only).
            let before = self.off(u - Duration::seconds(1));
            let after = self.off(u);
            if after > before {
                let mut g = u.naive_utc() + Duration::seconds(before);
                let end = u.naive_utc() + Duration::seconds(after);
                while g < end {
                    if self.matches(g) {
                        return true;
                    }
                    g += Duration::minutes(1);
                }
            }
        }
        false
    }

    fn next_after(&self, t: DateTime<Utc>, horizon: i64) -> Option<DateTime<Utc>> {
        let ts = t.timestamp();
        let mut u = DateTime::from_timestamp(ts - ts.rem_euclid(60) + 60, 0)?;
        let end = t + Duration::minutes(horizon);
        while u <= end {
            if self.fires(u) {
                return Some(u);
            }
            u += Duration::minutes(1);
        }
        None
    }

    fn prev_before(&self, t: DateTime<Utc>, horizon: i64) -> Option<DateTime<Utc>> {
        let ts = t.timestamp();
        let floor = ts - ts.rem_euclid(60);
        let first = if floor == ts && t.timestamp_subsec_nanos() == 0 {
            floor - 60
        } else {
            floor
        };
        let mut u = DateTime::from_timestamp(first, 0)?;
        let end = t - Duration::minutes(horizon);
        while u >= end {
            if self.fires(u) {
                return Some(u);
            }
            u -= Duration::minutes(1);
        }
        None
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    #[test]
    fn grammar_never_panics(s in "\\PC{0,40}") {
        let _ = parse_schedule(&s, "UTC");
        let _ = parse_duration(&s);
        let _ = CronSchedule::parse(&s, Tz::UTC);
    }

    #[test]
    fn cron_parser_never_panics_on_cron_like_text(
        s in "[0-9*/,?LW#H@a-zA-Z -]{0,30}"
    ) {
        let _ = CronSchedule::parse(&s, Tz::UTC);
        let _ = parse_schedule(&s, "Europe/Berlin");
        let _ = parse_schedule(&format!("cron:{s}"), "UTC");
        let _ = parse_schedule(&format!("every {s}"), "UTC");
    }

    #[test]
    fn accepted_schedules_answer_without_panicking(
        n in any::<u64>(),
        unit in prop_oneof![Just("s"), Just("m"), Just("h"), Just("d"), Just("")],
        frac in prop_oneof![Just(""), Just(".5"), Just(".25")],
        form in 0..4usize,
        secs in -5_000_000_000i64..5_000_000_000,
    ) {
        let text = match form {
            0 => format!("every {n}{frac}{unit}"),
            1 => format!("in {n}{frac}{unit}"),
            2 => format!("{n}{frac} {unit}"),
            _ => format!("*/{n}{unit}"),
        };
        if let Ok(spec) = parse_schedule(&text, "UTC") {
            let t = DateTime::from_timestamp(secs, 0).unwrap();
            let c = Compiled::new(&spec, t).unwrap();
            for probe in [t, t + Duration::days(365 * 50), t - Duration::days(365 * 50)] {
                if let Some(n) = c.next_after(probe) {
                    prop_assert!(n > probe, "{text}: next({probe}) = {n}");
                }
                if let Some(p) = c.prev_before(probe) {
                    prop_assert!(p < probe, "{text}: prev({probe}) = {p}");
                }
            }
            let _ = c.slots_between(t, t + Duration::days(3650), 100);
        }
    }

    #[test]
    fn chains_are_strictly_monotonic_and_inverse(e in expr(), (tz, t) in place()) {
        let c = CronSchedule::parse(&e, tz).unwrap();
        let mut cur = t;
        for _ in 0..20 {
            let Some(n) = c.next_after(cur) else { break };
            prop_assert!(n > cur, "{e} {tz}: next({cur}) = {n} not after");
            // prev(next(t)) <= t, with equality only when t itself is a slot.
            let p = c.prev_before(n);
            prop_assert!(p.is_none_or(|p| p <= cur), "{e} {tz}: prev(next({cur})) = {p:?}");
            cur = n;
        }
        let mut cur = t;
        for _ in 0..20 {
            let Some(p) = c.prev_before(cur) else { break };
            prop_assert!(p < cur, "{e} {tz}: prev({cur}) = {p} not before");
            let n = c.next_after(p);
            prop_assert!(n.is_some_and(|n| n >= cur), "{e} {tz}: next(prev({cur})) = {n:?}");
            cur = p;
        }
    }

    #[test]
    fn agrees_with_brute_force_oracle(e in expr(), (tz, t) in place()) {
        let c = CronSchedule::parse(&e, tz).unwrap();
        let o = Oracle::new(&e, tz);
        let horizon = 3 * 24 * 60;
        if let Some(want) = o.next_after(t, horizon) {
            prop_assert_eq!(c.next_after(t), Some(want), "next {} {} after {}", e, tz, t);
        } else if let Some(got) = c.next_after(t) {
            prop_assert!(got > t + Duration::minutes(horizon), "{e} {tz}: {got} missed by oracle");
        }
        if let Some(want) = o.prev_before(t, horizon) {
            prop_assert_eq!(c.prev_before(t), Some(want), "prev {} {} before {}", e, tz, t);
        } else if let Some(got) = c.prev_before(t) {
            prop_assert!(got < t - Duration::minutes(horizon), "{e} {tz}: {got} missed by oracle");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// A wrap-around range is refused, and the list the hint suggests means exactly what the
    /// range meant: a..max then min..b (a hint that changed the meaning would
    /// fire at other times than the operator asked).
    #[test]
    fn wrap_around_hints_keep_the_meaning(
        which in 0usize..4,
        a_off in 0u32..60,
        b_off in 0u32..60,
    ) {
        // (field index, lo, hi)
        let (idx, lo, hi) = [(0usize, 0u32, 59u32), (1, 0, 23), (3, 1, 12), (4, 0, 6)][which];
        let span = hi - lo + 1;
        let (a, b) = (lo + a_off % span, lo + b_off % span);
        prop_assume!(a > b);
        let mut fields = ["0", "0", "*", "*", "*"].map(String::from);
        fields[idx] = format!("{a}-{b}");
        let expr = fields.join(" ");
        let err = CronSchedule::parse(&expr, chrono_tz::UTC).unwrap_err().to_string();
        let hint = err.rsplit("write it as ").next().unwrap().trim().to_string();
        fields[idx] = hint.clone();
        let fixed = fields.join(" ");
        let ours = CronSchedule::parse(&fixed, chrono_tz::UTC)
            .unwrap_or_else(|e| panic!("hint {hint} for {expr} does not parse: {e}"));
        // Its slots are the union of the two halves, each written as a plain range.
        let mut halves = Vec::new();
        for (x, y) in [(a, hi), (lo, b)] {
            let mut f = ["0", "0", "*", "*", "*"].map(String::from);
            f[idx] = format!("{x}-{y}");
            halves.push(CronSchedule::parse(&f.join(" "), chrono_tz::UTC).unwrap());
        }
        let mut t = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z").unwrap().to_utc();
        for _ in 0..40 {
            let got = ours.next_after(t).unwrap();
            let want = halves.iter().filter_map(|h| h.next_after(t)).min().unwrap();
            prop_assert_eq!(got, want, "{} vs {} after {}", fixed, expr, t);
            t = got;
        }
    }

    /// `at HH:MM` names one instant: the first such wall time at or after the anchor (within
    /// a day and a DST shift), and nothing after it.
    #[test]
    fn at_a_time_of_day_is_one_instant(h in 0u32..24, m in 0u32..60, (tz, t) in place()) {
        let text = format!("at {h:02}:{m:02}");
        let spec = parse_schedule(&text, tz.name()).unwrap();
        prop_assert!(spec.is_at());
        let c = Compiled::new(&spec, t).unwrap();
        let first = c.next_after(t - Duration::milliseconds(1)).unwrap();
        prop_assert!(first >= t);
        prop_assert!(first - t <= Duration::hours(27), "{} after {}", first, t);
        prop_assert_eq!(c.next_after(first), None);
        // It is the daily HH:MM's first slot, so the DST policy is the fixed-time one (in a
        // gap: the first instant after it, e.g. 03:45 in Chatham for 03:00).
        let daily = CronSchedule::parse(&format!("{m} {h} * * *"), tz).unwrap();
        prop_assert_eq!(daily.next_after(t - Duration::milliseconds(1)), Some(first));
        let wall = first.with_timezone(&tz).naive_local();
        let asked = wall.date().and_hms_opt(h, m, 0).unwrap();
        prop_assert!(wall >= asked && wall - asked <= Duration::hours(3), "{} for {:02}:{:02}", wall, h, m);
    }
}

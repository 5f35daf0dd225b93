//! The schedule string grammar (`every 5m`, `daily at 9am`, `in 10m`, ...) and the DURATION
//! syntax of the CLI.
//!
//! Owns: turning operator text into a [`ScheduleSpec`] (validating cron expressions through
//! [`CronSchedule::parse`]) and parsing durations and `at:` instants. Must not touch: slot
//! arithmetic, clocks, I/O.
//!
//! Decisions:
//! - `every minute`, `every hour`, `every day` (no number) mean an interval of one unit.
//! - Intervals and durations may be compound (`1h30m`, `every 1h 30m`) and decimal (`1.5h`), but
//!   must come to a whole number of seconds (`1.5s` is rejected).
//! - Intervals longer than 100 years are rejected as too large.
//! - A bare number (`5`) is rejected: it needs a unit. A bare `0` gets its own message.
//! - Plain-English forms take one time, or several times sharing one minute (`at 9am and 5pm`);
//!   times with different minutes cannot be one cron line and are rejected with a hint.
//! - A naive `at:` wall time that falls in a DST gap resolves to the first instant after the gap;
//!   one that falls in a fold resolves to the first pass (the same rule as fixed-time cron).
//! - The zone is validated for every form (a job with an unknown zone is wrong whatever its
//!   schedule kind).
//! - `at 9am` (once) is stored as the wall time and the zone; the instant is the
//!   first such wall time at or after the moment the job is first stored (like `in 10m`), so a
//!   re-applied, unchanged file never re-arms it. Several times (`at 9am and 5pm`) are refused:
//!   "at" means one instant.
//! - `every DAYS TIME` without `at` (`every monday 9am`) reads as `every DAYS at TIME`.
//! - Cron expressions are stored as written (trimmed, runs of spaces collapsed); English forms
//!   are stored as the cron expression they translate to.

use chrono::{DateTime, LocalResult, NaiveDate, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;

use super::cron::CronSchedule;
use super::spec::{ScheduleError, ScheduleSpec, parse_tz};

const FORMS: &str = "use hourly, daily, weekly, every 5m, a 5-field cron expression or @daily, \
cron:EXPR, at:2026-12-01T09:00, at 9am (once), in 10m, or e.g. 'weekdays at 09:30'";

/// Parse schedule text; `tz` is the job's zone (for cron and naive `at:` times).
pub fn parse_schedule(input: &str, tz: &str) -> Result<ScheduleSpec, ScheduleError> {
    let zone = parse_tz(tz)?;
    let tz_name = zone.name().to_string();
    let raw = input.trim();
    if raw.is_empty() {
        return Err(ScheduleError::new(format!("empty schedule: {FORMS}")));
    }
    let s = raw.split_whitespace().collect::<Vec<_>>().join(" ");
    let lower = s.to_ascii_lowercase();
    let cron = |expr: &str| -> Result<ScheduleSpec, ScheduleError> {
        let expr = expr.split_whitespace().collect::<Vec<_>>().join(" ");
        CronSchedule::parse(&expr, zone)?;
        Ok(ScheduleSpec::Cron {
            expr,
            tz: tz_name.clone(),
        })
    };

    match lower.as_str() {
        "hourly" => {
            return Ok(ScheduleSpec::Every {
                every_seconds: 3600,
            });
        }
        "daily" => {
            return Ok(ScheduleSpec::Every {
                every_seconds: 86_400,
            });
        }
        "weekly" => {
            return Ok(ScheduleSpec::Every {
                every_seconds: 604_800,
            });
        }
        "0" => {
            return Err(ScheduleError::new(format!(
                "'0' is not a schedule (an interval must be at least 1 second): {FORMS}"
            )));
        }
        _ => {}
    }
    if let Some(rest) = strip_prefix_ci(&s, "cron:") {
        let rest = rest.trim();
        if rest.is_empty() {
            return Err(ScheduleError::new(
                "'cron:' needs an expression after it, e.g. cron:0 9 * * 1-5",
            ));
        }
        return cron(rest);
    }
    if let Some(rest) = strip_prefix_ci(raw, "at:") {
        return Ok(ScheduleSpec::At {
            at: parse_at(rest, zone)?,
        });
    }
    if lower.starts_with('@') {
        return cron(&s);
    }
    if let Some(rest) = lower.strip_prefix("in ") {
        let secs = parse_seconds(rest).map_err(|e| {
            ScheduleError::new(format!("bad 'in' schedule '{s}': {e} (e.g. in 10m)"))
        })?;
        return Ok(ScheduleSpec::In { seconds: secs });
    }
    if let Some(times) = lower.strip_prefix("at ") {
        return at_time(&s, times, &tz_name);
    }
    let words: Vec<&str> = lower.split(' ').collect();
    if let Some(text) = days_then_time(&words) {
        return english(&text).map(|expr| ScheduleSpec::Cron {
            expr,
            tz: tz_name.clone(),
        });
    }
    if words.contains(&"at") {
        return english(&lower).map(|expr| ScheduleSpec::Cron {
            expr,
            tz: tz_name.clone(),
        });
    }
    let cronish_start =
        words.len() >= 3 || lower.starts_with(|c: char| c.is_ascii_digit() || c == '*');
    if words.len() >= 2
        && words[0] != "every"
        && cronish_start
        && words
            .iter()
            .all(|w| !is_unit_word(w) && !is_interval_word(w))
    {
        return cron(&s);
    }
    interval(&s, &lower)
}

/// The interval forms (`every 5m`, `hourly`'s spelled-out kin, `*/10m`), and what a day word
/// without a time of day is told instead.
fn interval(s: &str, lower: &str) -> Result<ScheduleSpec, ScheduleError> {
    let interval = lower.strip_prefix("every ").unwrap_or(lower);
    let interval = match interval {
        "second" => "1s",
        "minute" => "1m",
        "hour" => "1h",
        "day" => "1d",
        other => other,
    };
    let interval = interval.strip_prefix("*/").unwrap_or(interval);
    if day_list(interval).is_ok()
        || matches!(interval, "weekday" | "weekdays" | "weekend" | "weekends")
    {
        return Err(ScheduleError::new(format!(
            "'{s}' needs a time of day, e.g. '{s} at 09:00'"
        )));
    }
    if let Some((first, rest)) = interval.split_once(' ')
        && (day_list(first).is_ok()
            || matches!(first, "weekday" | "weekdays" | "weekend" | "weekends"))
    {
        return Err(ScheduleError::new(format!(
            "cannot read the schedule '{s}': '{rest}' is not a time of day (e.g. 'every monday 9am', 'weekdays at 09:30')"
        )));
    }
    match parse_seconds(interval) {
        Ok(secs) => Ok(ScheduleSpec::Every {
            every_seconds: secs,
        }),
        Err(IntervalError::NotAnInterval) => Err(ScheduleError::new(format!(
            "unrecognised schedule '{s}': {FORMS}"
        ))),
        Err(e) => Err(ScheduleError::new(format!("bad interval '{s}': {e}"))),
    }
}

/// `at 9am`, `at 21:30`, `at 9:30pm`: the next such wall time, once.
fn at_time(s: &str, times: &str, tz: &str) -> Result<ScheduleSpec, ScheduleError> {
    let times = times.trim();
    if times.contains(',') || times.contains(" and ") {
        return Err(ScheduleError::new(format!(
            "'{s}' names several times, but 'at' means once; for a daily schedule write 'daily {s}', or give one time"
        )));
    }
    // `at 2026-12-31T10:00` is the one-instant form written with a space: say which form
    // takes a date rather than that a date is not a time of day.
    let dated = times.len() >= 10
        && times.as_bytes()[4] == b'-'
        && times[..4].bytes().all(|c| c.is_ascii_digit());
    if dated {
        let when = s.trim().get(2..).unwrap_or("").trim();
        return Err(ScheduleError::new(format!(
            "cannot read the schedule '{s}': 'at TIME' takes a time of day (once, at the next \
             such time); for one date and time write 'at:{when}' (a colon, no space)"
        )));
    }
    let (hour, minute) = parse_clock(times)
        .map_err(|e| ScheduleError::new(format!("cannot read the schedule '{s}': {e}")))?;
    Ok(ScheduleSpec::AtTime {
        hour,
        minute,
        tz: tz.to_string(),
    })
}

/// `every monday 9am`, `every weekday 17:30`: days then a time without `at` → `DAYS at TIME`.
fn days_then_time(words: &[&str]) -> Option<String> {
    if words.len() < 3 || words[0] != "every" || words.contains(&"at") {
        return None;
    }
    // The time is the last word (`9am`, `09:30`, `noon`) or the last two (`9 am`).
    for k in [1, 2] {
        if words.len() < k + 2 {
            continue;
        }
        let (days, time) = words.split_at(words.len() - k);
        let time = time.join(" ");
        let days = days[1..].join(" ");
        let is_days = day_list(&days).is_ok()
            || matches!(
                days.as_str(),
                "day" | "weekday" | "weekdays" | "weekend" | "weekends"
            );
        if is_days && parse_clock(&time).is_ok() {
            return Some(format!("every {days} at {time}"));
        }
    }
    None
}

fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

fn is_unit_word(w: &str) -> bool {
    unit_seconds(w).is_some()
}

/// `5m`, `1.5h`, `*/30m`: a number directly followed by a unit.
fn is_interval_word(w: &str) -> bool {
    let w = w.strip_prefix("*/").unwrap_or(w);
    let digits = w
        .bytes()
        .take_while(|c| c.is_ascii_digit() || *c == b'.')
        .count();
    digits > 0 && digits < w.len() && unit_seconds(&w[digits..]).is_some()
}

/// RFC 3339, or a naive local time (`2026-12-01T09:00`, `2026-12-01 09:00:00`) in `tz`.
pub(crate) fn parse_at(input: &str, tz: Tz) -> Result<DateTime<Utc>, ScheduleError> {
    let s = input.trim();
    let bad = || {
        ScheduleError::new(format!(
            "cannot read the time '{s}': use RFC 3339 (2026-12-01T09:00:00Z, 2026-12-01T09:00:00+01:00) or a wall time in the job's zone (2026-12-01T09:00, 2026-12-01 09:00:00, 2026-12-01)"
        ))
    };
    if s.is_empty() {
        return Err(bad());
    }
    // Both stores keep instants to the microsecond (PostgreSQL's `timestamptz`): a finer
    // fraction would be rounded on the way in, so it is refused here rather than moved.
    let digits = fraction_digits(s);
    if digits > MAX_FRACTION_DIGITS {
        return Err(ScheduleError::new(format!(
            "'{s}' has {digits} digits after the second: at most {MAX_FRACTION_DIGITS} (microseconds) are kept, e.g. 2026-12-01T09:00:05.5Z"
        )));
    }
    if let Ok(d) = DateTime::parse_from_rfc3339(s) {
        return Ok(d.to_utc());
    }
    let naive = [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%d %H:%M",
    ]
    .iter()
    .find_map(|f| NaiveDateTime::parse_from_str(s, f).ok())
    .or_else(|| {
        NaiveDate::parse_from_str(s, "%Y-%m-%d")
            .ok()
            .and_then(|d| d.and_hms_opt(0, 0, 0))
    })
    .ok_or_else(bad)?;
    match tz.from_local_datetime(&naive) {
        LocalResult::Single(d) => Ok(d.to_utc()),
        LocalResult::Ambiguous(a, b) => Ok(a.to_utc().min(b.to_utc())),
        LocalResult::None => {
            // In a DST gap: the first instant whose wall time is later (same rule as cron).
            let mut x = naive.and_utc() - chrono::Duration::hours(15);
            let mut hi = naive.and_utc() + chrono::Duration::hours(15);
            let wall = |u: DateTime<Utc>| u.with_timezone(&tz).naive_local();
            while (hi - x).num_seconds() > 1 {
                let mid = x + chrono::Duration::seconds((hi - x).num_seconds() / 2);
                if wall(mid) > naive {
                    hi = mid;
                } else {
                    x = mid;
                }
            }
            Ok(hi)
        }
    }
}

/// The most digits an `at:` instant may have after its second: microseconds, what both stores
/// keep exactly.
pub(crate) const MAX_FRACTION_DIGITS: usize = 6;

/// How many digits follow the seconds' decimal point in a date-time text (0 without one). The
/// date part has no `.`, so the first one is the seconds' (a comma is RFC 3339's other mark).
fn fraction_digits(s: &str) -> usize {
    s.find(['.', ',']).map_or(0, |i| {
        s[i + 1..].bytes().take_while(u8::is_ascii_digit).count()
    })
}

/// CLI durations: `90s`, `5m`, `1h30m`, `2d`.
pub fn parse_duration(input: &str) -> Result<std::time::Duration, ScheduleError> {
    let s = input.trim().to_ascii_lowercase();
    parse_seconds(&s)
        .map(std::time::Duration::from_secs)
        .map_err(|e| match e {
            IntervalError::NotAnInterval => ScheduleError::new(format!(
                "'{}' is not a duration: use a number and a unit, e.g. 90s, 5m, 1h30m, 2d",
                input.trim()
            )),
            e => ScheduleError::new(format!("bad duration '{}': {e}", input.trim())),
        })
}

#[derive(Debug, PartialEq, Eq)]
enum IntervalError {
    /// Does not look like an interval at all.
    NotAnInterval,
    Zero,
    Negative,
    NoUnit,
    UnknownUnit(String),
    NotANumber(String),
    Fraction,
    TooLarge,
}

impl std::fmt::Display for IntervalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IntervalError::NotAnInterval => f.write_str("not an interval"),
            IntervalError::Zero => f.write_str("an interval must be at least 1 second"),
            IntervalError::Negative => f.write_str("an interval cannot be negative"),
            IntervalError::NoUnit => {
                f.write_str("a number needs a unit: s, m, h or d (e.g. 90s, 5m, 2h, 1d)")
            }
            IntervalError::UnknownUnit(u) => write!(
                f,
                "unknown unit '{u}': use s/sec/second(s), m/min/minute(s), h/hr/hour(s), d/day(s)"
            ),
            IntervalError::NotANumber(n) => write!(f, "'{n}' is not a number"),
            IntervalError::Fraction => f.write_str("the interval is not a whole number of seconds"),
            IntervalError::TooLarge => f.write_str("the interval is too large (at most 100 years)"),
        }
    }
}

fn unit_seconds(u: &str) -> Option<u64> {
    Some(match u {
        "s" | "sec" | "secs" | "second" | "seconds" => 1,
        "m" | "min" | "mins" | "minute" | "minutes" => 60,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3600,
        "d" | "day" | "days" => 86_400,
        _ => return None,
    })
}

/// `5m`, `90 s`, `1.5h`, `1h30m`, `30 minutes` (lower case) → seconds, at least 1.
fn parse_seconds(s: &str) -> Result<u64, IntervalError> {
    let s = s.trim();
    if s.is_empty() {
        return Err(IntervalError::NotAnInterval);
    }
    if s.starts_with('-') {
        return Err(IntervalError::Negative);
    }
    let b = s.as_bytes();
    let mut i = 0;
    // Thousandths of a second, so `1.5h` and `0.5m` are exact.
    let mut total_milli: u128 = 0;
    let mut parts = 0;
    while i < b.len() {
        while i < b.len() && b[i] == b' ' {
            i += 1;
        }
        if i == b.len() {
            break;
        }
        let n_start = i;
        while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
            i += 1;
        }
        let num = &s[n_start..i];
        while i < b.len() && b[i] == b' ' {
            i += 1;
        }
        let u_start = i;
        while i < b.len() && b[i].is_ascii_alphabetic() {
            i += 1;
        }
        let unit = &s[u_start..i];
        if num.is_empty() {
            if parts == 0 {
                // "xm", "fivem": a unit after something that is not a number.
                let word = s.split(' ').next().unwrap_or(s);
                let k = unit_suffix_len(word);
                // `xm`, `fivem`: a short word glued to a unit reads as a bad number; a long one
                // (`gibberish` ends in `h`) is just not an interval.
                let head = &word[..word.len() - k];
                return if k > 0 && k < word.len() && head.chars().count() <= 6 {
                    Err(IntervalError::NotANumber(
                        word[..word.len() - k].to_string(),
                    ))
                } else {
                    Err(IntervalError::NotAnInterval)
                };
            }
            return Err(IntervalError::NotANumber(s[n_start..].to_string()));
        }
        if unit.is_empty() {
            if i < b.len() {
                return Err(IntervalError::NotANumber(s[n_start..].to_string()));
            }
            return Err(IntervalError::NoUnit);
        }
        let per = unit_seconds(unit).ok_or_else(|| IntervalError::UnknownUnit(unit.to_string()))?;
        let milli = parse_decimal_milli(num).ok_or_else(|| {
            let int = num.split('.').next().unwrap_or("");
            if int.len() > 20 && int.bytes().all(|b| b.is_ascii_digit()) {
                IntervalError::TooLarge
            } else {
                IntervalError::NotANumber(num.into())
            }
        })?;
        total_milli = total_milli
            .checked_add(
                milli
                    .checked_mul(per as u128)
                    .ok_or(IntervalError::TooLarge)?,
            )
            .ok_or(IntervalError::TooLarge)?;
        parts += 1;
    }
    if parts == 0 {
        return Err(IntervalError::NotAnInterval);
    }
    if total_milli == 0 {
        return Err(IntervalError::Zero);
    }
    if !total_milli.is_multiple_of(1000) {
        return Err(IntervalError::Fraction);
    }
    let secs = u64::try_from(total_milli / 1000).map_err(|_| IntervalError::TooLarge)?;
    if secs > MAX_INTERVAL_SECS {
        return Err(IntervalError::TooLarge);
    }
    Ok(secs)
}

/// 100 years: anything longer is a typo, and would never be due in practice.
const MAX_INTERVAL_SECS: u64 = 100 * 366 * 86_400;

/// Length of the longest unit name that `word` ends with (0 if none).
fn unit_suffix_len(word: &str) -> usize {
    (1..=word.len())
        .rev()
        .find(|k| {
            word.is_char_boundary(word.len() - k) && unit_seconds(&word[word.len() - k..]).is_some()
        })
        .unwrap_or(0)
}

/// "1.5" → 1500 (thousandths); at most 3 decimals.
fn parse_decimal_milli(num: &str) -> Option<u128> {
    let (int, frac) = match num.split_once('.') {
        Some((i, f)) => (i, f),
        None => (num, ""),
    };
    if (int.is_empty() && frac.is_empty()) || frac.contains('.') || frac.len() > 3 {
        return None;
    }
    let int: u128 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let mut f: u128 = if frac.is_empty() {
        0
    } else {
        frac.parse().ok()?
    };
    for _ in frac.len()..3 {
        f *= 10;
    }
    int.checked_mul(1000)?.checked_add(f)
}

/// Plain-English forms → a cron expression: `[every] DAYS at TIME[, TIME…]`.
fn english(s: &str) -> Result<String, ScheduleError> {
    let bad = |why: &str| ScheduleError::new(format!("cannot read the schedule '{s}': {why}"));
    let (days, times) = s
        .split_once(" at ")
        .ok_or_else(|| bad("expected 'DAYS at TIME', e.g. 'weekdays at 09:30'"))?;
    let days = days.trim();
    let days = days.strip_prefix("every ").unwrap_or(days).trim();
    if let Some(hint) = interval_at_hint(days, times) {
        return Err(bad(&hint));
    }
    let dow = match days {
        "" | "day" | "days" | "daily" | "every day" => "*".to_string(),
        "weekday" | "weekdays" => "1-5".to_string(),
        "weekend" | "weekends" | "weekend day" | "weekend days" => "0,6".to_string(),
        other => day_list(other).map_err(|e| bad(&e))?,
    };
    let mut hours = Vec::new();
    let mut minute = None;
    for t in times.split([',']).flat_map(|p| p.split(" and ")) {
        let t = t.trim();
        if t.is_empty() {
            return Err(bad("empty time in the list"));
        }
        let (h, m) = parse_clock(t).map_err(|e| bad(&e))?;
        match minute {
            None => minute = Some(m),
            Some(m0) if m0 != m => {
                return Err(bad(
                    "times with different minutes cannot share one schedule; use a cron expression or separate jobs",
                ));
            }
            _ => {}
        }
        if !hours.contains(&h) {
            hours.push(h);
        }
    }
    let m = minute.ok_or_else(|| bad("no time after 'at'"))?;
    hours.sort_unstable();
    let h = hours
        .iter()
        .map(|h| h.to_string())
        .collect::<Vec<_>>()
        .join(",");
    Ok(format!("{m} {h} * * {dow}"))
}

/// What `every 2 hours at :15` (an interval with a time of day, which no form here takes) is
/// told: an interval counts from when the job is stored, so fixed minutes need a cron line,
/// spelled out for the case at hand when it is one (`15 */2 * * *`).
fn interval_at_hint(interval: &str, time: &str) -> Option<String> {
    let secs = match interval {
        "hour" | "hourly" => 3600,
        "minute" => 60,
        other => parse_seconds(other).ok()?,
    };
    let time = time.trim();
    let at = time
        .strip_prefix(':')
        .filter(|m| m.len() == 2)
        .and_then(|m| m.parse::<u32>().ok())
        .filter(|m| *m < 60)
        .map(|m| (None, m))
        .or_else(|| parse_clock(time).ok().map(|(h, m)| (Some(h), m)));
    let hours = secs / 3600;
    let cron = match at {
        Some((h, m)) if secs % 3600 == 0 && (1..24).contains(&hours) && 24 % hours == 0 => {
            let field = match h.map(|h| u64::from(h) % hours) {
                _ if hours == 1 => "*".to_string(),
                None | Some(0) => format!("*/{hours}"),
                Some(first) => format!("{first}-23/{hours}"),
            };
            format!("for this one, '{m} {field} * * *'")
        }
        _ => "e.g. '15 */2 * * *' is minute 15 of every second hour".to_string(),
    };
    Some(format!(
        "'{interval}' is an interval, which counts from when the job is stored and takes no \
         time of day; for fixed times write a cron line (minute hour day month weekday), {cron}"
    ))
}

fn day_index(w: &str) -> Option<u32> {
    let w = w.strip_suffix('s').filter(|x| x.len() >= 3).unwrap_or(w);
    let full = [
        "sunday",
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
    ];
    let extra = [("tues", 2), ("weds", 3), ("thur", 4), ("thurs", 4)];
    full.iter()
        .position(|d| *d == w || (w.len() == 3 && d.starts_with(w)))
        .map(|i| i as u32)
        .or_else(|| extra.iter().find(|(n, _)| *n == w).map(|(_, i)| *i))
}

/// "mon,wed,fri", "monday and friday", "mon-fri", "sundays" → a day-of-week field.
fn day_list(s: &str) -> Result<String, String> {
    let mut out: Vec<String> = Vec::new();
    for tok in s
        .split([',', ' '])
        .map(str::trim)
        .filter(|t| !t.is_empty() && *t != "and")
    {
        let item = match tok.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (
                    day_index(a).ok_or_else(|| format!("'{a}' is not a day of the week"))?,
                    day_index(b).ok_or_else(|| format!("'{b}' is not a day of the week"))?,
                );
                if a > b {
                    const SHORT: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
                    let part = |x: u32, y: u32| {
                        if x == y {
                            SHORT[x as usize].to_string()
                        } else {
                            format!("{}-{}", SHORT[x as usize], SHORT[y as usize])
                        }
                    };
                    return Err(format!(
                        "the day range '{tok}' runs backwards; ranges do not wrap around, so write it as {},{}",
                        part(a, 6),
                        part(0, b)
                    ));
                }
                format!("{a}-{b}")
            }
            None => day_index(tok)
                .ok_or_else(|| format!("'{tok}' is not a day of the week"))?
                .to_string(),
        };
        out.push(item);
    }
    if out.is_empty() {
        return Err("no days before 'at'".to_string());
    }
    Ok(out.join(","))
}

/// "9am", "9 am", "9:30pm", "09:30", "17:00", "noon", "midnight" → (hour, minute).
fn parse_clock(t: &str) -> Result<(u32, u32), String> {
    match t {
        "noon" | "midday" => return Ok((12, 0)),
        "midnight" => return Ok((0, 0)),
        _ => {}
    }
    let compact: String = t.chars().filter(|c| !c.is_whitespace()).collect();
    let (body, meridiem) = if let Some(b) = compact.strip_suffix("am") {
        (b, Some(false))
    } else if let Some(b) = compact.strip_suffix("pm") {
        (b, Some(true))
    } else {
        (compact.as_str(), None)
    };
    let bad = || format!("'{t}' is not a time of day (use e.g. 9am, 5:30pm, 09:30, 17:00)");
    let (h, m) = match body.split_once(':') {
        Some((h, m)) if m.len() == 2 => (h, m),
        Some(_) => return Err(bad()),
        None => (body, "00"),
    };
    if h.is_empty() || h.len() > 2 || !h.bytes().all(|c| c.is_ascii_digit()) {
        return Err(bad());
    }
    if !m.bytes().all(|c| c.is_ascii_digit()) {
        return Err(bad());
    }
    let (h, m): (u32, u32) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
    if m > 59 {
        return Err(format!("minute {m} in '{t}' is out of range (0-59)"));
    }
    let h = match meridiem {
        None if h <= 23 => h,
        None => return Err(format!("hour {h} in '{t}' is out of range (0-23)")),
        Some(pm) if (1..=12).contains(&h) => (h % 12) + if pm { 12 } else { 0 },
        Some(_) => {
            return Err(format!(
                "hour {h} in '{t}' is out of range for am/pm (1-12)"
            ));
        }
    };
    Ok((h, m))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every(s: &str) -> u64 {
        match parse_schedule(s, "UTC") {
            Ok(ScheduleSpec::Every { every_seconds }) => every_seconds,
            other => panic!("'{s}' should be an interval, got {other:?}"),
        }
    }

    fn cron_of(s: &str, tz: &str) -> String {
        match parse_schedule(s, tz) {
            Ok(ScheduleSpec::Cron { expr, tz: z }) => {
                assert_eq!(z, tz);
                expr
            }
            other => panic!("'{s}' should be cron, got {other:?}"),
        }
    }

    fn rejected(s: &str, needle: &str) {
        let e = parse_schedule(s, "UTC").unwrap_err().to_string();
        assert!(
            e.to_lowercase().contains(&needle.to_lowercase()),
            "'{s}' error '{e}' should mention '{needle}'"
        );
    }

    use crate::testkit::time::rfc3339 as t;

    #[test]
    fn hourly_daily_weekly() {
        assert_eq!(every("hourly"), 3600);
        assert_eq!(every("daily"), 86_400);
        assert_eq!(every("weekly"), 604_800);
        assert_eq!(every("  WEEKLY "), 604_800);
    }

    #[test]
    fn every_forms_with_all_units() {
        assert_eq!(every("every 5m"), 300);
        assert_eq!(every("every 90s"), 90);
        assert_eq!(every("every 2h"), 7200);
        assert_eq!(every("5m"), 300);
        assert_eq!(every("*/30m"), 1800);
        assert_eq!(every("30 minutes"), 1800);
        assert_eq!(every("1.5h"), 5400);
        assert_eq!(every("Every 5 Minutes"), 300);
        assert_eq!(every("every 1h30m"), 5400);
        assert_eq!(every("every minute"), 60);
        assert_eq!(every("every hour"), 3600);
        assert_eq!(every("every day"), 86_400);
        for (u, n) in [
            ("s", 1),
            ("sec", 1),
            ("second", 1),
            ("seconds", 1),
            ("m", 60),
            ("min", 60),
            ("minute", 60),
            ("minutes", 60),
            ("h", 3600),
            ("hr", 3600),
            ("hour", 3600),
            ("hours", 3600),
            ("d", 86_400),
            ("day", 86_400),
            ("days", 86_400),
        ] {
            assert_eq!(every(&format!("every 2{u}")), 2 * n, "unit {u}");
            assert_eq!(every(&format!("2 {u}")), 2 * n, "unit {u}");
        }
    }

    #[test]
    fn cron_fields_macros_and_prefix() {
        assert_eq!(cron_of("*/5 9-17 * * 1-5", "UTC"), "*/5 9-17 * * 1-5");
        assert_eq!(cron_of("  0   7 * * *  ", "Europe/Berlin"), "0 7 * * *");
        for m in [
            "@yearly",
            "@annually",
            "@monthly",
            "@weekly",
            "@daily",
            "@midnight",
            "@hourly",
            "@DAILY",
        ] {
            assert_eq!(cron_of(m, "UTC"), m);
        }
        assert_eq!(cron_of("cron:0 9 * * MON-FRI", "UTC"), "0 9 * * MON-FRI");
        assert_eq!(cron_of("CRON: 0 9 * * 1", "UTC"), "0 9 * * 1");
    }

    /// A fraction of a second is kept exactly, in RFC 3339 and in a naive wall time, up to
    /// microseconds.
    #[test]
    fn at_keeps_its_fraction() {
        assert_eq!(
            parse_schedule("at:2026-12-01T09:00:05.500Z", "UTC").unwrap(),
            ScheduleSpec::At {
                at: t("2026-12-01T09:00:05.5Z")
            }
        );
        assert_eq!(
            parse_schedule("at:2026-12-01T10:00:05.123456", "Europe/Berlin").unwrap(),
            ScheduleSpec::At {
                at: t("2026-12-01T09:00:05.123456Z")
            }
        );
    }

    #[test]
    fn at_and_in() {
        assert_eq!(
            parse_schedule("at:2026-12-01T09:00:00Z", "Europe/Berlin").unwrap(),
            ScheduleSpec::At {
                at: t("2026-12-01T09:00:00Z")
            }
        );
        // Naive = wall time in the job's zone (CET = UTC+1 in December).
        assert_eq!(
            parse_schedule("at:2026-12-01T09:00", "Europe/Berlin").unwrap(),
            ScheduleSpec::At {
                at: t("2026-12-01T08:00:00Z")
            }
        );
        assert_eq!(
            parse_schedule("in 10m", "UTC").unwrap(),
            ScheduleSpec::In { seconds: 600 }
        );
        assert_eq!(
            parse_schedule("IN 1h30m", "UTC").unwrap(),
            ScheduleSpec::In { seconds: 5400 }
        );
    }

    #[test]
    fn plain_english_forms() {
        assert_eq!(cron_of("every day at 9am", "UTC"), "0 9 * * *");
        assert_eq!(cron_of("weekdays at 09:30", "UTC"), "30 9 * * 1-5");
        assert_eq!(cron_of("mon,wed,fri at 17:00", "UTC"), "0 17 * * 1,3,5");
        assert_eq!(cron_of("every sunday at 8pm", "UTC"), "0 20 * * 0");
        assert_eq!(cron_of("Every Sunday at 8 PM", "UTC"), "0 20 * * 0");
        assert_eq!(cron_of("weekends at noon", "UTC"), "0 12 * * 0,6");
        assert_eq!(cron_of("daily at 12am", "UTC"), "0 0 * * *");
        assert_eq!(
            cron_of("monday and friday at 5:15pm", "UTC"),
            "15 17 * * 1,5"
        );
        assert_eq!(cron_of("mon-fri at 9am and 5pm", "UTC"), "0 9,17 * * 1-5");
        assert_eq!(cron_of("every day at 9am", "America/New_York"), "0 9 * * *");
        rejected("every day at 25:00", "out of range");
        rejected("every day at 9:30 and 17:00", "different minutes");
        rejected("every blursday at 9am", "not a day");
        rejected("every day at soon", "not a time");
    }

    #[test]
    fn rejections() {
        rejected("*/0m", "at least 1 second");
        rejected("0s", "at least 1 second");
        rejected("every 0m", "at least 1 second");
        rejected("0", "'0' is not a schedule");
        rejected("every -5m", "negative");
        rejected("-5m", "negative");
        rejected("every xm", "not a number");
        rejected("every fivem", "not a number");
        rejected("every 5", "unit");
        rejected("5", "unit");
        rejected("every 5 fortnights", "unknown unit");
        rejected("every 1.5s", "whole number");
        rejected("every 99999999999d", "too large");
        rejected(
            "every 99999999999999999999999999999999999999999d",
            "too large",
        );
        rejected("cron:", "needs an expression");
        rejected("cron:0 0 * *", "4 fields");
        rejected("cron:61 * * * *", "out of range");
        rejected("0 0 * * * *", "6 fields");
        rejected("0 0 * * * * * *", "8 fields");
        rejected("0 0 *", "3 fields");
        assert_eq!(every("1 h 30 m"), 5400);
        assert_eq!(every("every 1h 30m"), 5400);
        rejected("at:tomorrow", "cannot read the time");
        rejected("at:", "cannot read the time");
        rejected("at:2026-13-01T09:00", "cannot read the time");
        rejected(
            "at:2026-12-01T09:00:05.1234567Z",
            "7 digits after the second",
        );
        rejected("at:2026-12-01T09:00:05.1234567", "at most 6 (microseconds)");
        rejected("in 0s", "at least 1 second");
        rejected("in soon", "in 10m");
        rejected("", "empty schedule");
        rejected("whenever", "unrecognised");
        rejected("every monday", "needs a time of day");
        let e = parse_schedule("every 5m", "Mars/Olympus").unwrap_err();
        assert!(
            e.to_string().contains("unknown time zone 'Mars/Olympus'"),
            "{e}"
        );
    }

    #[test]
    fn at_a_time_of_day_is_once() {
        for (text, h, m) in [
            ("at 9am", 9, 0),
            ("at 21:30", 21, 30),
            ("At 9:30PM", 21, 30),
        ] {
            assert_eq!(
                parse_schedule(text, "Europe/Berlin").unwrap(),
                ScheduleSpec::AtTime {
                    hour: h,
                    minute: m,
                    tz: "Europe/Berlin".into()
                },
                "{text}"
            );
        }
        let spec = parse_schedule("at 9am", "Europe/Berlin").unwrap();
        assert!(spec.is_at() && !spec.is_recurring());
        // The next 09:00 Berlin (UTC+1 in December) at or after the anchor, and nothing more.
        let c = crate::schedule::Compiled::new(&spec, t("2026-12-01T10:00:00Z")).unwrap();
        let first = c.next_after(t("2026-12-01T10:00:00Z")).unwrap();
        assert_eq!(first, t("2026-12-02T08:00:00Z"));
        assert_eq!(c.next_after(first), None);
        let c = crate::schedule::Compiled::new(&spec, t("2026-12-01T07:00:00Z")).unwrap();
        assert_eq!(
            c.next_after(t("2026-12-01T07:00:00Z")),
            Some(t("2026-12-01T08:00:00Z"))
        );
        // A daily time is said so.
        assert_eq!(cron_of("daily at 9am", "UTC"), "0 9 * * *");
        assert_eq!(cron_of("every day at 9am", "UTC"), "0 9 * * *");
        rejected("at 9am and 5pm", "'at' means once");
        rejected("at 25:00", "out of range");
    }

    #[test]
    fn days_then_time_without_at() {
        assert_eq!(cron_of("every monday 9am", "UTC"), "0 9 * * 1");
        assert_eq!(cron_of("Every Monday 9 AM", "UTC"), "0 9 * * 1");
        assert_eq!(cron_of("every weekday 17:30", "UTC"), "30 17 * * 1-5");
        assert_eq!(cron_of("every mon,fri noon", "UTC"), "0 12 * * 1,5");
        rejected("every monday soon", "'soon' is not a time of day");
        // A date after `at ` points at the one-instant form, in the case it was written.
        let e = parse_schedule("at 2026-12-31T10:00", "UTC")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("for one date and time write 'at:2026-12-31T10:00' (a colon, no space)"),
            "{e}"
        );
    }

    #[test]
    fn hints_point_at_the_right_form() {
        rejected("gibberish", "unrecognised schedule 'gibberish'");
        let e = parse_schedule("gibberish", "UTC").unwrap_err().to_string();
        assert!(!e.contains("not a number"), "{e}");
        rejected("every sat-sun at 9am", "write it as sat,sun");
        rejected("fri-mon at 9am", "write it as fri-sat,sun-mon");
        rejected("0 0 * * Sat-Sun", "write it as SAT,SUN");
        rejected("0 0 * Nov-Mar *", "NOV-DEC,JAN-MAR");
        rejected("CRON_TZ=Europe/Berlin 0 9 * * *", "crontab variable");
        // An interval with a time of day gets the cron line that says it.
        rejected("every 2 hours at :15", "for this one, '15 */2 * * *'");
        rejected("every 2 hours at :15", "'2 hours' is an interval");
        rejected("hourly at :15", "for this one, '15 * * * *'");
        rejected("every hour at :05", "'5 * * * *'");
        rejected("every 3h at 1:30", "'30 1-23/3 * * *'");
        rejected("every 2 days at 9am", "e.g. '15 */2 * * *'");
        let e = parse_schedule("every 2 hours at :15", "UTC")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("day of the week"), "{e}");
        for ok in ["15 */2 * * *", "15 * * * *", "30 1-23/3 * * *"] {
            assert!(parse_schedule(ok, "UTC").is_ok(), "{ok}");
        }
    }

    #[test]
    fn at_in_dst_gap_and_fold() {
        let ny: Tz = "America/New_York".parse().unwrap();
        assert_eq!(
            parse_at("2026-03-08T02:30", ny).unwrap(),
            t("2026-03-08T07:00:00Z")
        );
        assert_eq!(
            parse_at("2026-11-01 01:30", ny).unwrap(),
            t("2026-11-01T05:30:00Z")
        );
        assert_eq!(
            parse_at("2026-12-01", ny).unwrap(),
            t("2026-12-01T05:00:00Z")
        );
    }

    #[test]
    fn durations() {
        use std::time::Duration;
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("2d").unwrap(), Duration::from_secs(172_800));
        for (bad, needle) in [
            ("0s", "at least 1 second"),
            ("", "not a duration"),
            ("junk", "not a duration"),
            ("5", "unit"),
            ("5x", "unknown unit"),
            ("-5m", "negative"),
            ("1h30", "unit"),
        ] {
            let e = parse_duration(bad).unwrap_err().to_string();
            assert!(
                e.contains(needle),
                "'{bad}' -> '{e}' should mention '{needle}'"
            );
        }
    }
}

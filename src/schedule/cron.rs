//! Vixie cron (5 fields) with Vixie's DST policy (gaps and folds, below), built over the `cron`
//! crate.
//!
//! Owns: parsing/validating cron expressions and macros, `next_after`/`prev_before` in UTC, and
//! the words for a cron schedule. Must not touch: anything outside slot arithmetic (no clocks,
//! no I/O, no store).
//!
//! How it works:
//! 1. Our own parser validates the 5-field Vixie text, so every rejection names what was wrong
//!    and what would be accepted (the crate's errors are terse).
//! 2. The `cron` crate parses the minute, hour, day-of-month and month fields (month names
//!    turned into numbers, `?` into `*`) into value sets, read with `includes()` into bitsets.
//!    Day-of-week stays ours (the crate numbers it 1-7 from Sunday; Vixie 0-7 from Sunday, 7 =
//!    Sunday too). The crate's own matcher and `after()` are not used: they know no Vixie day
//!    rule and no DST policy.
//! 3. Matching happens on *naive local wall time*, which never sees a time zone; the Vixie day
//!    rule (AND when either day field starts with `*` or `?`, else OR) is applied on top.
//! 4. Wall times are mapped to real instants under the DST policy: in a gap a wildcard schedule
//!    skips the wall time, a fixed-time schedule fires at the first instant after the gap (several
//!    such wall times merge into that one instant, and merge with a real match there); in a fold a
//!    wildcard schedule fires in both passes, a fixed-time one in the first pass only.
//!
//! Decisions:
//! - A step as large as the field's span (`*/60` in minutes) is rejected: it can only ever match
//!   the first value, which is never what was meant.
//! - An expression whose day/month combination can never occur (`0 0 30 2 *`, `0 0 31 4,6 *`)
//!   is rejected: a schedule is never "accepted but never due".
//! - `@reboot` is rejected (cronsole has no boot event).
//! - The exact slow path assumes that no single UTC-offset change exceeds [`MAX_SHIFT_SECS`]
//!   (3 h; the largest since 1970 outside the 2011 Samoa/Tokelau date-line jumps is 2 h) and
//!   that a zone does not change offset twice within 24 h. The fast path (no transition between
//!   `t` and the answer) is checked by comparing offsets at both ends and every 24 h between.

use std::str::FromStr;

use chrono::{
    DateTime, Datelike, Duration, LocalResult, NaiveDate, NaiveDateTime, NaiveTime, Offset,
    TimeZone, Timelike, Utc,
};
use chrono_tz::Tz;

use super::spec::ScheduleError;

/// Largest UTC-offset change of one transition the exact search allows for.
pub(crate) const MAX_SHIFT_SECS: i64 = 3 * 3600;
thread_local! {
    /// The last [`RECENT_KEPT`] expressions this thread parsed, oldest first.
    static RECENT: std::cell::RefCell<Vec<CronSchedule>> = const { std::cell::RefCell::new(Vec::new()) };
}
/// How many parsed expressions a thread keeps: few enough that a miss costs a short scan.
const RECENT_KEPT: usize = 16;
#[cfg(test)]
thread_local! {
    /// Parses this thread did in full (tests count them).
    static FRESH_PARSES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}
/// Farthest the fast path trusts offset sampling (longer jumps take the exact path).
const FAST_PATH_MAX_SECS: i64 = 8 * 86_400;
/// How far ahead/behind a wall-time search looks before concluding there is no match.
const SEARCH_YEARS: i32 = 30;

const DOW_NAMES: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];
const MONTH_NAMES: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// The value sets of a validated expression, as bitsets (bit n = value n).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fields {
    minutes: u64,
    hours: u32,
    /// bits 1..=31
    doms: u32,
    /// bits 1..=12
    months: u16,
    /// bits 0..=6, 0 = Sunday
    dows: u8,
    /// Vixie day rule: true = both day fields must match, false = either.
    day_and: bool,
}

/// A validated cron expression in a zone.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    expr: String,
    tz: Tz,
    fields: Fields,
    wildcard: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Minute,
    Hour,
    Dom,
    Month,
    Dow,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Minute => "minute",
            Kind::Hour => "hour",
            Kind::Dom => "day-of-month",
            Kind::Month => "month",
            Kind::Dow => "day-of-week",
        }
    }
    fn range(self) -> (u32, u32) {
        match self {
            Kind::Minute => (0, 59),
            Kind::Hour => (0, 23),
            Kind::Dom => (1, 31),
            Kind::Month => (1, 12),
            Kind::Dow => (0, 7),
        }
    }
    fn names(self) -> &'static [&'static str] {
        match self {
            Kind::Month => &[
                "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
            ],
            Kind::Dow => &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
            _ => &[],
        }
    }
    fn first_name_value(self) -> u32 {
        if self == Kind::Month { 1 } else { 0 }
    }
}

fn err(expr: &str, msg: impl std::fmt::Display) -> ScheduleError {
    ScheduleError::new(format!("invalid cron expression '{expr}': {msg}"))
}

/// Expand a macro to its 5-field form.
fn expand_macro(expr: &str) -> Result<Option<&'static str>, ScheduleError> {
    if !expr.starts_with('@') {
        return Ok(None);
    }
    let m = match expr.to_ascii_lowercase().as_str() {
        "@yearly" | "@annually" => "0 0 1 1 *",
        "@monthly" => "0 0 1 * *",
        "@weekly" => "0 0 * * 0",
        "@daily" | "@midnight" => "0 0 * * *",
        "@hourly" => "0 * * * *",
        "@reboot" => {
            return Err(err(
                expr,
                "@reboot is not supported (cronsole has no boot event); use @yearly @annually @monthly @weekly @daily @midnight @hourly or 5 fields",
            ));
        }
        _ => {
            return Err(err(
                expr,
                "unknown macro; use @yearly @annually @monthly @weekly @daily @midnight or @hourly",
            ));
        }
    };
    Ok(Some(m))
}

/// One value: a number or (month/day-of-week) a name.
fn parse_value(expr: &str, kind: Kind, s: &str) -> Result<u32, ScheduleError> {
    let (lo, hi) = kind.range();
    if s.is_empty() {
        return Err(err(
            expr,
            format!("empty value in the {} field", kind.name()),
        ));
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        let v: u32 = s.parse().map_err(|_| {
            err(
                expr,
                format!("'{s}' is out of range in the {} field", kind.name()),
            )
        })?;
        if v < lo || v > hi {
            return Err(err(
                expr,
                format!(
                    "{v} is out of range for the {} field ({lo}-{hi})",
                    kind.name()
                ),
            ));
        }
        return Ok(v);
    }
    let lower = s.to_ascii_lowercase();
    if let Some(i) = kind.names().iter().position(|n| *n == lower) {
        return Ok(i as u32 + kind.first_name_value());
    }
    if let Some(c) = s
        .chars()
        .find(|c| matches!(c, 'L' | 'W' | '#' | 'H' | 'l' | 'w' | 'h'))
        && s.chars()
            .all(|c| c.is_ascii_digit() || matches!(c, 'L' | 'W' | '#' | 'H' | 'l' | 'w' | 'h'))
    {
        return Err(err(
            expr,
            format!(
                "'{c}' in '{s}' is not Vixie cron (L, W, # and H are not supported) in the {} field",
                kind.name()
            ),
        ));
    }
    if s.starts_with('-') {
        return Err(err(
            expr,
            format!("negative value '{s}' in the {} field", kind.name()),
        ));
    }
    let hint = match kind {
        Kind::Month => " (use 1-12 or JAN-DEC)",
        Kind::Dow => " (use 0-7 or SUN-SAT)",
        _ => "",
    };
    Err(err(
        expr,
        format!("'{s}' is not a valid {} value{hint}", kind.name()),
    ))
}

/// Parse one field into a bitset over its raw range (day-of-week 7 is kept as bit 7 here).
fn parse_field(expr: &str, kind: Kind, field: &str) -> Result<u64, ScheduleError> {
    let (lo, hi) = kind.range();
    let mut set = 0u64;
    for item in field.split(',') {
        if item.is_empty() {
            return Err(err(
                expr,
                format!(
                    "empty list item in the {} field '{field}' (leading, trailing or doubled comma)",
                    kind.name()
                ),
            ));
        }
        let (base, step) = match item.split_once('/') {
            Some((b, s)) => {
                if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
                    return Err(err(
                        expr,
                        format!(
                            "step '{s}' in '{item}' must be a positive whole number ({} field)",
                            kind.name()
                        ),
                    ));
                }
                let n: u32 = s.parse().unwrap_or(u32::MAX);
                if n == 0 {
                    return Err(err(
                        expr,
                        format!(
                            "step 0 in '{item}' ({} field): a step must be at least 1",
                            kind.name()
                        ),
                    ));
                }
                let span = if kind == Kind::Dow { 7 } else { hi - lo + 1 };
                if n >= span {
                    return Err(err(
                        expr,
                        format!(
                            "step {n} in '{item}' is too large for the {} field ({lo}-{hi}): it could only ever match one value",
                            kind.name()
                        ),
                    ));
                }
                (b, Some(n))
            }
            None => (item, None),
        };
        let (start, end) = if base == "*" || (base == "?" && matches!(kind, Kind::Dom | Kind::Dow))
        {
            (lo, if kind == Kind::Dow { 6 } else { hi })
        } else if base == "?" {
            return Err(err(
                expr,
                format!(
                    "'?' is only allowed in the day-of-month and day-of-week fields, not the {} field",
                    kind.name()
                ),
            ));
        } else if let Some((a_text, b_text)) = base.split_once('-').filter(|(a, _)| !a.is_empty()) {
            let a = parse_value(expr, kind, a_text)?;
            let b = parse_value(expr, kind, b_text)?;
            if a > b {
                let named = a_text.chars().any(|c| c.is_ascii_alphabetic());
                return Err(err(
                    expr,
                    format!(
                        "the range '{base}' in the {} field runs backwards; cron ranges do not wrap around, so write it as {}",
                        kind.name(),
                        wrapped_range(kind, a, b, named)
                    ),
                ));
            }
            (a, b)
        } else {
            let a = parse_value(expr, kind, base)?;
            // `a/n` means a..max step n.
            let end = if step.is_some() {
                if kind == Kind::Dow { 6.max(a) } else { hi }
            } else {
                a
            };
            (a, end)
        };
        let step = step.unwrap_or(1);
        let mut v = start;
        while v <= end {
            set |= 1u64 << v;
            v += step;
        }
    }
    Ok(set)
}

/// The list that means what a wrap-around range `a-b` (a > b) was meant to: `SAT-SUN` →
/// `SAT,SUN`, `NOV-MAR` → `NOV-DEC,JAN-MAR`, `50-10` → `50-59,0-10`.
fn wrapped_range(kind: Kind, a: u32, b: u32, named: bool) -> String {
    let (lo, hi) = kind.range();
    // Day-of-week 7 is a second Sunday: the week ends at Saturday, and `7-b` means `0-b`.
    let hi = if kind == Kind::Dow { 6 } else { hi };
    let spell = |v: u32| -> String {
        let names = kind.names();
        match v.checked_sub(kind.first_name_value()) {
            Some(i) if named && (i as usize) < names.len() => {
                names[i as usize].to_ascii_uppercase()
            }
            _ => v.to_string(),
        }
    };
    let part = |x: u32, y: u32| {
        if x == y {
            spell(x)
        } else {
            format!("{}-{}", spell(x), spell(y))
        }
    };
    if kind == Kind::Dow && a == 7 {
        return part(0, b);
    }
    format!("{},{}", part(a, hi), part(lo, b))
}

fn max_days(month: u32) -> u32 {
    match month {
        2 => 29,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

impl CronSchedule {
    /// Parse a 5-field Vixie expression or macro, evaluated in `tz`. A parse depends on the
    /// trimmed text and the zone alone, so the expressions this thread parsed last are handed
    /// out again: a jobs file's jobs share a few schedules, and each job's was parsed three or
    /// four times (check, hand-over, first slots, compile). Rejections are not kept.
    pub fn parse(expr: &str, tz: Tz) -> Result<CronSchedule, ScheduleError> {
        let trimmed = expr.trim();
        let same = |c: &&CronSchedule| c.tz == tz && c.expr == trimmed;
        if let Some(c) = RECENT.with_borrow(|r| r.iter().find(same).cloned()) {
            return Ok(c);
        }
        let parsed = Self::parse_fresh(trimmed, tz)?;
        RECENT.with_borrow_mut(|r| {
            if r.len() >= RECENT_KEPT {
                r.remove(0);
            }
            r.push(parsed.clone());
        });
        Ok(parsed)
    }

    /// [`CronSchedule::parse`] of an already trimmed expression, without the kept ones.
    fn parse_fresh(trimmed: &str, tz: Tz) -> Result<CronSchedule, ScheduleError> {
        #[cfg(test)]
        FRESH_PARSES.with(|n| n.set(n.get() + 1));
        if trimmed.is_empty() {
            return Err(ScheduleError::new(
                "empty cron expression: expected 5 fields (minute hour day-of-month month day-of-week) or a macro such as @daily",
            ));
        }
        if let Some((var, rest)) = trimmed.split_once('=')
            && matches!(var.trim(), "CRON_TZ" | "TZ")
        {
            let (zone, fields) = rest
                .trim()
                .split_once(char::is_whitespace)
                .unwrap_or((rest, ""));
            return Err(err(
                trimmed,
                format!(
                    "{} is a crontab variable, not part of an expression: give the zone separately, as `schedule: {{kind: cron, cron_expr: \"{}\", tz: {}}}` in the jobs file (or `defaults: {{tz: …}}`), or `--tz {}` for `cronsole next`",
                    var.trim(),
                    fields.trim(),
                    zone.trim(),
                    zone.trim()
                ),
            ));
        }
        let body = expand_macro(trimmed)?.unwrap_or(trimmed);
        let parts: Vec<&str> = body.split_whitespace().collect();
        match parts.len() {
            5 => {}
            6 | 7 => {
                return Err(err(
                    trimmed,
                    format!(
                        "it has {} fields; cronsole uses 5-field Vixie cron (minute hour day-of-month month day-of-week), without seconds or years",
                        parts.len()
                    ),
                ));
            }
            n => {
                return Err(err(
                    trimmed,
                    format!(
                        "it has {n} field{}; expected 5 (minute hour day-of-month month day-of-week) or a macro such as @daily",
                        if n == 1 { "" } else { "s" }
                    ),
                ));
            }
        }
        // Our parser validates every field (its errors name what is wrong and what would do);
        // the crate then turns minute..month into sets; day-of-week is ours.
        let kinds = [Kind::Minute, Kind::Hour, Kind::Dom, Kind::Month, Kind::Dow];
        let mut dows = 0u64;
        for (i, kind) in kinds.iter().enumerate() {
            let set = parse_field(trimmed, *kind, parts[i])?;
            if *kind == Kind::Dow {
                dows = set;
            }
        }
        let starts_star = |s: &str| s.starts_with('*') || s.starts_with('?');
        let day_and = starts_star(parts[2]) || starts_star(parts[4]);
        let wildcard = parts[0].starts_with('*') || parts[1].starts_with('*');
        // Day-of-week 7 is Sunday.
        if dows & (1 << 7) != 0 {
            dows = (dows & 0x7f) | 1;
        }
        let (minutes, hours, doms, months) = crate_sets(trimmed, &parts[..4])?;
        let fields = Fields {
            minutes,
            hours,
            doms,
            months,
            dows: dows as u8,
            day_and,
        };
        // Never "accepted but never due": some month in the set must have some day in the set.
        let dom_possible = (1..=12u32)
            .filter(|m| fields.months & (1 << m) != 0)
            .any(|m| (1..=max_days(m)).any(|d| fields.doms & (1 << d) != 0));
        if fields.day_and && !dom_possible {
            return Err(err(
                trimmed,
                "this day-of-month never occurs in the chosen month(s), so the schedule would never fire",
            ));
        }
        Ok(CronSchedule {
            expr: trimmed.to_string(),
            tz,
            fields,
            wildcard,
        })
    }

    /// The first slot strictly after `t`.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let off_t = self.offset_secs(t);
        let wall_t = t.naive_utc() + Duration::seconds(off_t);
        let w = self.next_wall_after(wall_t)?;
        if let Some(i) = self.single(w)
            && i > t
            && self.same_offset_between(t, i, off_t)
        {
            return Some(i);
        }
        self.next_exact(t, wall_t)
    }

    /// The last slot strictly before `t`.
    pub fn prev_before(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let off_t = self.offset_secs(t);
        let wall_t = t.naive_utc() + Duration::seconds(off_t);
        let w = self.prev_wall_before(wall_t)?;
        if let Some(i) = self.single(w)
            && i < t
            && self.same_offset_between(i, t, off_t)
        {
            return Some(i);
        }
        self.prev_exact(t, wall_t)
    }

    /// Wildcard = minute or hour field starts with `*`: such a schedule skips times in a DST gap
    /// and fires in both passes of a fold, where a fixed-time one fires once (Vixie's rule).
    #[cfg(test)]
    pub(crate) fn is_wildcard(&self) -> bool {
        self.wildcard
    }

    /// The schedule in words, e.g. "at 07:00 every day (Europe/Berlin)".
    pub fn describe(&self) -> String {
        let f = &self.fields;
        let time = describe_time(f.minutes, f.hours);
        let days = describe_days(f);
        if days == "every day" && (time.starts_with("every ") || time.ends_with(" of every hour")) {
            // "every 15 minutes (UTC)", not "every 15 minutes every day (UTC)"; "at minute 0 of
            // every hour (UTC)", not "… of every hour every day".
            return format!("{time} ({})", self.tz.name());
        }
        format!("{time} {days} ({})", self.tz.name())
    }

    /// The expression as written (macros kept).
    pub fn expr(&self) -> &str {
        &self.expr
    }

    /// The zone it is evaluated in.
    pub fn tz(&self) -> Tz {
        self.tz
    }

    // ---- instants -------------------------------------------------------------------------

    fn offset_secs(&self, t: DateTime<Utc>) -> i64 {
        self.tz
            .offset_from_utc_datetime(&t.naive_utc())
            .fix()
            .local_minus_utc() as i64
    }

    /// `w` as an instant when it exists exactly once.
    fn single(&self, w: NaiveDateTime) -> Option<DateTime<Utc>> {
        match self.tz.from_local_datetime(&w) {
            LocalResult::Single(d) => Some(d.with_timezone(&Utc)),
            _ => None,
        }
    }

    /// True when the offset is `off` at `a`, at `b`, and every 24 h between (so no transition
    /// lies between them); false also when they are too far apart to check cheaply.
    fn same_offset_between(&self, a: DateTime<Utc>, b: DateTime<Utc>, off: i64) -> bool {
        let span = (b - a).num_seconds();
        if span > FAST_PATH_MAX_SECS || self.offset_secs(a) != off || self.offset_secs(b) != off {
            return false;
        }
        let mut x = a + Duration::days(1);
        while x < b {
            if self.offset_secs(x) != off {
                return false;
            }
            x += Duration::days(1);
        }
        true
    }

    /// The instants one matching wall time fires at, under the DST policy (ascending).
    fn instants_of(&self, w: NaiveDateTime) -> [Option<DateTime<Utc>>; 2] {
        match self.tz.from_local_datetime(&w) {
            LocalResult::Single(d) => [Some(d.with_timezone(&Utc)), None],
            LocalResult::Ambiguous(a, b) => {
                let (a, b) = (a.with_timezone(&Utc), b.with_timezone(&Utc));
                let (first, second) = if a <= b { (a, b) } else { (b, a) };
                [Some(first), self.wildcard.then_some(second)]
            }
            LocalResult::None => {
                if self.wildcard {
                    [None, None]
                } else {
                    [self.gap_end(w), None]
                }
            }
        }
    }

    /// The first instant after the gap that swallows wall time `w`: the smallest instant whose
    /// wall time is later than `w`.
    fn gap_end(&self, w: NaiveDateTime) -> Option<DateTime<Utc>> {
        let base = w.and_utc();
        let mut lo = base - Duration::hours(15); // wall(lo) < w for any offset ≤ +14 h
        let mut hi = base + Duration::hours(15); // wall(hi) > w for any offset ≥ −14 h
        let wall = |x: DateTime<Utc>| x.naive_utc() + Duration::seconds(self.offset_secs(x));
        if wall(lo) > w || wall(hi) <= w {
            return None;
        }
        while (hi - lo).num_seconds() > 1 {
            let mid = lo + Duration::seconds((hi - lo).num_seconds() / 2);
            if wall(mid) > w {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Some(hi)
    }

    fn next_exact(&self, t: DateTime<Utc>, wall_t: NaiveDateTime) -> Option<DateTime<Utc>> {
        let shift = Duration::seconds(MAX_SHIFT_SECS);
        let mut best: Option<DateTime<Utc>> = None;
        let mut best_wall = NaiveDateTime::MAX;
        let mut cursor = wall_t - shift - Duration::seconds(1);
        while let Some(w) = self.next_wall_after(cursor) {
            if best.is_some() && w > best_wall + shift {
                break;
            }
            for i in self.instants_of(w).into_iter().flatten() {
                if i > t && best.is_none_or(|b| i < b) {
                    best = Some(i);
                    best_wall = i.naive_utc() + Duration::seconds(self.offset_secs(i));
                }
            }
            cursor = w;
        }
        best
    }

    fn prev_exact(&self, t: DateTime<Utc>, wall_t: NaiveDateTime) -> Option<DateTime<Utc>> {
        let shift = Duration::seconds(MAX_SHIFT_SECS);
        let mut best: Option<DateTime<Utc>> = None;
        let mut best_wall = NaiveDateTime::MIN;
        let mut cursor = wall_t + shift + Duration::seconds(1);
        while let Some(w) = self.prev_wall_before(cursor) {
            if best.is_some() && w < best_wall - shift {
                break;
            }
            for i in self.instants_of(w).into_iter().flatten() {
                if i < t && best.is_none_or(|b| i > b) {
                    best = Some(i);
                    best_wall = i.naive_utc() + Duration::seconds(self.offset_secs(i));
                }
            }
            cursor = w;
        }
        best
    }

    // ---- naive wall-time matching ---------------------------------------------------------

    fn day_matches(&self, d: NaiveDate) -> bool {
        let f = &self.fields;
        if f.months & (1 << d.month()) == 0 {
            return false;
        }
        let dom = f.doms & (1 << d.day()) != 0;
        let dow = f.dows & (1 << d.weekday().num_days_from_sunday()) != 0;
        if f.day_and { dom && dow } else { dom || dow }
    }

    /// First matching (hour, minute) at or after `h:m` within a day.
    fn first_time_from(&self, h: u32, m: u32) -> Option<(u32, u32)> {
        let f = &self.fields;
        let hours = f.hours >> h;
        if hours == 0 {
            return None;
        }
        let h1 = h + hours.trailing_zeros();
        let m_from = if h1 == h { m } else { 0 };
        let mins = f.minutes >> m_from;
        if mins != 0 {
            return Some((h1, m_from + mins.trailing_zeros()));
        }
        // No minute left in this hour: the next matching hour at minute min.
        let hours = f.hours.checked_shr(h1 + 1).unwrap_or(0);
        if hours == 0 {
            return None;
        }
        Some((h1 + 1 + hours.trailing_zeros(), f.minutes.trailing_zeros()))
    }

    /// Last matching (hour, minute) at or before `h:m` within a day.
    fn last_time_upto(&self, h: u32, m: u32) -> Option<(u32, u32)> {
        let f = &self.fields;
        let hours = f.hours & low_mask32(h);
        if hours == 0 {
            return None;
        }
        let h1 = 31 - hours.leading_zeros();
        let m_to = if h1 == h { m } else { 59 };
        let mins = f.minutes & low_mask64(m_to);
        if mins != 0 {
            return Some((h1, 63 - mins.leading_zeros()));
        }
        if h1 == 0 {
            return None;
        }
        let hours = f.hours & low_mask32(h1 - 1);
        if hours == 0 {
            return None;
        }
        Some((31 - hours.leading_zeros(), 63 - f.minutes.leading_zeros()))
    }

    /// First matching wall minute strictly after `n`.
    fn next_wall_after(&self, n: NaiveDateTime) -> Option<NaiveDateTime> {
        let floor = n.with_second(0)?.with_nanosecond(0)?;
        let start = floor + Duration::minutes(1);
        let mut date = start.date();
        let (mut h, mut m) = (start.hour(), start.minute());
        let limit = date.year() + SEARCH_YEARS;
        loop {
            if self.fields.months & (1 << date.month()) == 0 {
                // Jump to the first day of the next month.
                date = first_of_next_month(date)?;
                (h, m) = (0, 0);
            } else {
                if self.day_matches(date)
                    && let Some((hh, mm)) = self.first_time_from(h, m)
                {
                    return Some(date.and_time(NaiveTime::from_hms_opt(hh, mm, 0)?));
                }
                date = date.succ_opt()?;
                (h, m) = (0, 0);
            }
            if date.year() > limit {
                return None;
            }
        }
    }

    /// Last matching wall minute strictly before `n`.
    fn prev_wall_before(&self, n: NaiveDateTime) -> Option<NaiveDateTime> {
        let floor = n.with_second(0)?.with_nanosecond(0)?;
        let start = if floor == n {
            floor - Duration::minutes(1)
        } else {
            floor
        };
        let mut date = start.date();
        let (mut h, mut m) = (start.hour(), start.minute());
        let limit = date.year() - SEARCH_YEARS;
        loop {
            if self.fields.months & (1 << date.month()) == 0 {
                // Jump to the last day of the previous month.
                date = date.with_day(1)?.pred_opt()?;
                (h, m) = (23, 59);
            } else {
                if self.day_matches(date)
                    && let Some((hh, mm)) = self.last_time_upto(h, m)
                {
                    return Some(date.and_time(NaiveTime::from_hms_opt(hh, mm, 0)?));
                }
                date = date.pred_opt()?;
                (h, m) = (23, 59);
            }
            if date.year() < limit {
                return None;
            }
        }
    }
}

fn first_of_next_month(d: NaiveDate) -> Option<NaiveDate> {
    if d.month() == 12 {
        NaiveDate::from_ymd_opt(d.year() + 1, 1, 1)
    } else {
        NaiveDate::from_ymd_opt(d.year(), d.month() + 1, 1)
    }
}

/// Bits 0..=k set.
fn low_mask32(k: u32) -> u32 {
    if k >= 31 {
        u32::MAX
    } else {
        (1u32 << (k + 1)) - 1
    }
}

fn low_mask64(k: u32) -> u64 {
    if k >= 63 {
        u64::MAX
    } else {
        (1u64 << (k + 1)) - 1
    }
}

fn list_bits(set: u64, lo: u32, hi: u32) -> Vec<u32> {
    (lo..=hi).filter(|v| set & (1u64 << v) != 0).collect()
}

/// A validated field in the `cron` crate's dialect: month names become numbers (the crate takes
/// names only as single values or ranges, never before a step) and `?` becomes `*`.
fn crate_dialect(kind: Kind, field: &str) -> String {
    let value = |v: &str| {
        let lower = v.to_ascii_lowercase();
        match kind.names().iter().position(|n| *n == lower) {
            Some(i) => (i as u32 + kind.first_name_value()).to_string(),
            None if v == "?" => "*".to_string(),
            None => v.to_string(),
        }
    };
    field
        .split(',')
        .map(|item| {
            let (base, step) = match item.split_once('/') {
                Some((b, s)) => (b, Some(s)),
                None => (item, None),
            };
            let base = match base.split_once('-') {
                Some((a, b)) => format!("{}-{}", value(a), value(b)),
                None => value(base),
            };
            match step {
                Some(s) => format!("{base}/{s}"),
                None => base,
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The `cron` crate parses the minute, hour, day-of-month and month fields (already validated
/// by [`parse_field`], whose job is the precise error message) into the value sets that matching
/// uses. Day-of-week stays ours: the crate numbers it 1-7 from Sunday, Vixie 0-7 from Sunday.
fn crate_sets(expr: &str, parts: &[&str]) -> Result<(u64, u32, u32, u16), ScheduleError> {
    let kinds = [Kind::Minute, Kind::Hour, Kind::Dom, Kind::Month];
    let fields: Vec<String> = kinds
        .iter()
        .zip(parts)
        .map(|(k, f)| crate_dialect(*k, f))
        .collect();
    let text = format!("0 {} *", fields.join(" "));
    let s = cron::Schedule::from_str(&text)
        .map_err(|e| err(expr, format!("rejected by the cron parser: {e}")))?;
    use cron::TimeUnitSpec;
    let bits = |spec: &dyn Fn(u32) -> bool, lo: u32, hi: u32| {
        (lo..=hi)
            .filter(|v| spec(*v))
            .fold(0u64, |acc, v| acc | 1 << v)
    };
    Ok((
        bits(&|v| s.minutes().includes(v), 0, 59),
        bits(&|v| s.hours().includes(v), 0, 23) as u32,
        bits(&|v| s.days_of_month().includes(v), 1, 31) as u32,
        bits(&|v| s.months().includes(v), 1, 12) as u16,
    ))
}

// ---- words --------------------------------------------------------------------------------

fn hhmm(h: u32, m: u32) -> String {
    format!("{h:02}:{m:02}")
}

fn and_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [a] => a.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// Arithmetic progression `first, first+step, …` reaching the last value ≤ `hi`? → (first, step).
fn progression(v: &[u32], hi: u32) -> Option<(u32, u32)> {
    if v.len() < 2 {
        return None;
    }
    let step = v[1] - v[0];
    let is_prog = v.windows(2).all(|w| w[1] - w[0] == step);
    (is_prog && v[v.len() - 1] + step > hi).then_some((v[0], step))
}

fn contiguous(v: &[u32]) -> bool {
    v.windows(2).all(|w| w[1] == w[0] + 1)
}

fn describe_time(minutes: u64, hours: u32) -> String {
    let mins = list_bits(minutes, 0, 59);
    let hrs = list_bits(hours as u64, 0, 23);
    if mins.len() * hrs.len() <= 6 {
        let times: Vec<String> = hrs
            .iter()
            .flat_map(|h| mins.iter().map(move |m| hhmm(*h, *m)))
            .collect();
        return format!("at {}", and_list(&times));
    }
    let every_min = match (mins.len(), progression(&mins, 59)) {
        (60, _) => Some("every minute".to_string()),
        (_, Some((0, step))) => Some(format!("every {step} minutes")),
        (_, Some((first, step))) => Some(format!("every {step} minutes from minute {first}")),
        _ => None,
    };
    let hour_all = hrs.len() == 24;
    match every_min {
        Some(e) if hour_all => e,
        Some(_) if contiguous(&hrs) => {
            let (h0, h1) = (hrs[0], hrs[hrs.len() - 1]);
            let (m0, m1) = (mins[0], mins[mins.len() - 1]);
            let e = if mins.len() == 60 {
                "every minute".to_string()
            } else {
                format!("every {} minutes", mins[1] - mins[0])
            };
            format!("{e} from {} to {}", hhmm(h0, m0), hhmm(h1, m1))
        }
        _ => {
            let m = if mins.len() == 60 {
                "every minute".to_string()
            } else {
                format!(
                    "at minute{} {}",
                    if mins.len() == 1 { "" } else { "s" },
                    compress(&mins, &|v| v.to_string(), "-")
                )
            };
            if hour_all {
                format!("{m} of every hour")
            } else {
                format!(
                    "{m} past hour{} {}",
                    if hrs.len() == 1 { "" } else { "s" },
                    compress(&hrs, &|v| v.to_string(), "-")
                )
            }
        }
    }
}

/// "1-5, 7" or "Monday through Friday and Sunday".
fn compress(v: &[u32], name: &dyn Fn(u32) -> String, through: &str) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        if j - i >= 2 {
            parts.push(format!("{}{through}{}", name(v[i]), name(v[j])));
        } else {
            parts.extend(v[i..=j].iter().map(|x| name(*x)));
        }
        i = j + 1;
    }
    and_list(&parts)
}

fn describe_days(f: &Fields) -> String {
    let doms = list_bits(f.doms as u64, 1, 31);
    let dows = list_bits(f.dows as u64, 0, 6);
    let months = list_bits(f.months as u64, 1, 12);
    let dow_name = |v: u32| DOW_NAMES[v as usize].to_string();
    let dom_words = || {
        format!(
            "on day{} {} of the month",
            if doms.len() == 1 { "" } else { "s" },
            compress(&doms, &|v| v.to_string(), "-")
        )
    };
    let dow_words = || {
        // Monday-first reads better for weekday ranges.
        format!("on {}", compress(&dows, &dow_name, " through "))
    };
    let all_doms = doms.len() == 31;
    let all_dows = dows.len() == 7;
    let days = if f.day_and {
        match (all_doms, all_dows) {
            (true, true) => "every day".to_string(),
            (true, false) => dow_words(),
            (false, true) => dom_words(),
            (false, false) => format!("{} if it is {}", dom_words(), &dow_words()[3..]),
        }
    } else {
        format!("{} or {}", dom_words(), dow_words())
    };
    if months.len() == 12 {
        days
    } else {
        format!(
            "{days} in {}",
            compress(
                &months,
                &|v| MONTH_NAMES[v as usize - 1].to_string(),
                " through "
            )
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testkit::time::rfc3339 as t;

    fn cs(expr: &str, tz: &str) -> CronSchedule {
        CronSchedule::parse(expr, tz.parse().unwrap()).unwrap()
    }

    fn rejects(expr: &str, needle: &str) {
        let e = CronSchedule::parse(expr, Tz::UTC).unwrap_err().to_string();
        assert!(
            e.to_lowercase().contains(&needle.to_lowercase()),
            "'{expr}' error '{e}' should mention '{needle}'"
        );
    }

    #[test]
    fn a_repeated_expression_is_parsed_once_per_zone_and_kept_answers_match_fresh_ones() {
        let fresh = || FRESH_PARSES.with(std::cell::Cell::get);
        let same = |a: &CronSchedule, b: &CronSchedule| {
            assert_eq!(
                (&a.expr, a.tz, a.fields, a.wildcard),
                (&b.expr, b.tz, b.fields, b.wildcard)
            );
        };
        let first = fresh();
        let a = cs("*/15 9-17 * * 1-5", "America/New_York");
        let b = CronSchedule::parse("  */15 9-17 * * 1-5 ", "America/New_York".parse().unwrap())
            .unwrap();
        same(&a, &b);
        assert_eq!(
            fresh() - first,
            1,
            "the same text in the same zone is parsed once"
        );
        // Another zone is another schedule.
        let berlin = cs("*/15 9-17 * * 1-5", "Europe/Berlin");
        assert_eq!(fresh() - first, 2);
        assert_eq!(berlin.tz, chrono_tz::Europe::Berlin);
        assert_ne!(
            a.next_after(t("2026-03-02T00:00:00Z")),
            berlin.next_after(t("2026-03-02T00:00:00Z"))
        );
        // A rejection is never kept.
        rejects("0 0 30 2 *", "never");
        rejects("0 0 30 2 *", "never");
        assert_eq!(fresh() - first, 4);
        // Past what is kept the oldest is parsed again, and gives what a fresh parse gives.
        for m in 0..RECENT_KEPT {
            cs(&format!("{m} 3 * * *"), "UTC");
        }
        let again = fresh();
        let a2 = cs("*/15 9-17 * * 1-5", "America/New_York");
        assert_eq!(fresh() - again, 1);
        same(&a, &a2);
        let direct =
            CronSchedule::parse_fresh("*/15 9-17 * * 1-5", "America/New_York".parse().unwrap())
                .unwrap();
        same(&a2, &direct);
    }

    fn nexts(c: &CronSchedule, after: &str, n: usize) -> Vec<DateTime<Utc>> {
        let mut out = Vec::new();
        let mut cur = t(after);
        for _ in 0..n {
            cur = c.next_after(cur).unwrap();
            out.push(cur);
        }
        out
    }

    #[test]
    fn rejections_say_why() {
        rejects("0 0 * * * *", "6 fields");
        rejects("0 0 0 * * * 2026", "7 fields");
        rejects("0 0 *", "3 fields");
        rejects("*/0 * * * *", "step 0");
        rejects("40-10 * * * *", "write it as 40-59,0-10");
        rejects("0 0 * * Sat-Sun", "write it as SAT,SUN");
        rejects("0 0 * * 5-1", "write it as 5-6,0-1");
        rejects("0 0 * * 7-2", "write it as 0-2");
        rejects("0 0 * * FRI-MON", "write it as FRI-SAT,SUN-MON");
        rejects("0 0 * Nov-Mar *", "write it as NOV-DEC,JAN-MAR");
        rejects("0 0 * 12-1 *", "write it as 12,1");
        rejects(
            "CRON_TZ=Europe/Berlin 0 9 * * *",
            "cron_expr: \"0 9 * * *\", tz: Europe/Berlin}",
        );
        rejects("TZ=UTC 0 9 * * *", "--tz UTC");
        rejects("60 * * * *", "out of range");
        rejects("0 24 * * *", "out of range");
        rejects("0 0 0 * *", "out of range");
        rejects("0 0 32 * *", "out of range");
        rejects("0 0 * 13 *", "out of range");
        rejects("0 0 * * 8", "out of range");
        rejects("0 0 L * *", "L, W, # and H");
        rejects("0 0 15W * *", "L, W, # and H");
        rejects("0 0 * * 5#3", "L, W, # and H");
        rejects("0 0 * * 5L", "L, W, # and H");
        rejects("H * * * *", "L, W, # and H");
        rejects("1,2, * * * *", "comma");
        rejects(",1 * * * *", "comma");
        rejects("1,,2 * * * *", "comma");
        rejects("? * * * *", "only allowed");
        rejects("0 0 * foo *", "month");
        rejects("0 0 * * funday", "day-of-week");
        rejects("wed * * * *", "not a valid minute value");
        rejects("0 0 LW * *", "L, W, # and H");
        rejects("0 0 30 2 *", "never");
        rejects("*/60 * * * *", "too large");
        rejects("0 */24 * * *", "too large");
        rejects("@reboot", "@reboot");
        rejects("@fortnightly", "unknown macro");
        rejects("", "empty");
        rejects("-5 * * * *", "negative");
        rejects("*/x * * * *", "step");
    }

    #[test]
    fn accepts_dialect() {
        for e in [
            "* * * * *",
            "*/5 9-17 * * 1-5",
            "0 0 ? * MON",
            "0 0 1 JAN-DEC/3 *",
            "5/15 * * * *",
            "0 12 * * 5-7",
            "0 0 * * 0-7",
            "@YEARLY",
            "@Daily",
            "0 0 29 2 *",
            "0 0 31 * 1",
            "0 0 30 2 1",
        ] {
            CronSchedule::parse(e, Tz::UTC).unwrap();
        }
    }

    #[test]
    fn dow_seven_and_zero_are_sunday_and_one_is_monday() {
        let c = cs("0 12 * * 7", "UTC");
        // 2026-05-17 is a Sunday.
        assert_eq!(
            c.next_after(t("2026-05-13T00:00:00Z")),
            Some(t("2026-05-17T12:00:00Z"))
        );
        let c = cs("0 12 * * 1-5", "UTC");
        assert_eq!(
            c.next_after(t("2026-05-16T00:00:00Z")),
            Some(t("2026-05-18T12:00:00Z"))
        );
    }

    #[test]
    fn day_rule_or_and_and() {
        // OR: 13th or Friday.
        let c = cs("0 0 13 * 5", "UTC");
        assert_eq!(
            nexts(&c, "2026-03-01T00:00:00Z", 3),
            vec![
                t("2026-03-06T00:00:00Z"),
                t("2026-03-13T00:00:00Z"),
                t("2026-03-20T00:00:00Z")
            ]
        );
        // AND: field starts with '*'.
        let c = cs("0 0 */10 * 1", "UTC");
        // Mondays on day 1, 11, 21 or 31: 2026-05-11 and 2026-05-31? (31st is a Sunday) ->
        // 2026-05-11.
        assert_eq!(
            c.next_after(t("2026-05-01T00:00:00Z")),
            Some(t("2026-05-11T00:00:00Z"))
        );
    }

    #[test]
    fn dst_gap_fixed_time_fires_once_after_gap() {
        let c = cs("30 2 * * *", "America/New_York");
        // 02:30 does not exist on Mar 8: one firing at 03:00 EDT (07:00Z), then 02:30 EDT.
        assert_eq!(
            nexts(&c, "2026-03-07T12:00:00Z", 3),
            vec![
                t("2026-03-08T07:00:00Z"),
                t("2026-03-09T06:30:00Z"),
                t("2026-03-10T06:30:00Z"),
            ]
        );
        // 03:00 EDT on Mar 8 = 07:00Z, exactly once.
        assert_eq!(
            c.next_after(t("2026-03-08T06:00:00Z")),
            Some(t("2026-03-08T07:00:00Z"))
        );
        assert_eq!(
            c.prev_before(t("2026-03-08T12:00:00Z")),
            Some(t("2026-03-08T07:00:00Z"))
        );
        // Merged with a real match at that instant.
        let c = cs("0,30 2,3 * * *", "America/New_York");
        assert_eq!(
            nexts(&c, "2026-03-08T06:00:00Z", 3),
            vec![
                t("2026-03-08T07:00:00Z"),
                t("2026-03-08T07:30:00Z"),
                t("2026-03-09T06:00:00Z")
            ]
        );
    }

    #[test]
    fn dst_gap_wildcard_skips() {
        let c = cs("*/30 2 * * *", "America/New_York");
        // Mar 8 02:00 and 02:30 do not exist: skipped entirely.
        assert_eq!(
            nexts(&c, "2026-03-07T12:00:00Z", 3),
            vec![
                t("2026-03-09T06:00:00Z"),
                t("2026-03-09T06:30:00Z"),
                t("2026-03-10T06:00:00Z"),
            ]
        );
    }

    #[test]
    fn dst_fold_fixed_time_fires_first_pass_only() {
        let c = cs("30 1 * * *", "America/New_York");
        // 01:30 EDT on Nov 1 = 05:30Z; 01:30 EST (06:30Z) is skipped.
        assert_eq!(
            nexts(&c, "2026-10-31T12:00:00Z", 2),
            vec![t("2026-11-01T05:30:00Z"), t("2026-11-02T06:30:00Z")]
        );
        assert_eq!(
            c.prev_before(t("2026-11-01T12:00:00Z")),
            Some(t("2026-11-01T05:30:00Z"))
        );
    }

    #[test]
    fn dst_fold_wildcard_fires_both_passes() {
        let c = cs("*/20 * * * *", "America/New_York");
        assert_eq!(
            nexts(&c, "2026-11-01T04:50:00Z", 7),
            vec![
                t("2026-11-01T05:00:00Z"), // 01:00 EDT
                t("2026-11-01T05:20:00Z"),
                t("2026-11-01T05:40:00Z"),
                t("2026-11-01T06:00:00Z"), // 01:00 EST
                t("2026-11-01T06:20:00Z"),
                t("2026-11-01T06:40:00Z"),
                t("2026-11-01T07:00:00Z"), // 02:00 EST
            ]
        );
    }

    #[test]
    fn agrees_with_the_cron_crate_on_naive_wall_time() {
        // With the AND day rule and no DST (UTC), our search must equal the crate's own.
        for e in [
            "*/5 9-17 * * MON-FRI",
            "0 7 * * *",
            "15,45 */3 1-10 * *",
            "0 0 1 */2 *",
        ] {
            let ours = cs(e, "UTC");
            let theirs = cron::Schedule::from_str(&format!("0 {e}")).unwrap();
            let start = t("2026-02-27T13:07:00Z");
            let a: Vec<_> = theirs.after(&start).take(50).collect();
            assert_eq!(a, nexts(&ours, "2026-02-27T13:07:00Z", 50), "{e}");
        }
    }

    #[test]
    fn describes_in_words() {
        assert_eq!(
            cs("0 7 * * *", "Europe/Berlin").describe(),
            "at 07:00 every day (Europe/Berlin)"
        );
        assert_eq!(
            cs("*/5 9-17 * * 1-5", "America/New_York").describe(),
            "every 5 minutes from 09:00 to 17:55 on Monday through Friday (America/New_York)"
        );
        assert_eq!(cs("* * * * *", "UTC").describe(), "every minute (UTC)");
        // Every hour already says every day.
        assert_eq!(
            cs("@hourly", "UTC").describe(),
            "at minute 0 of every hour (UTC)"
        );
        assert_eq!(
            cs("5 * * * 1-5", "UTC").describe(),
            "at minute 5 of every hour on Monday through Friday (UTC)"
        );
        assert_eq!(
            cs("*/15 * * * *", "UTC").describe(),
            "every 15 minutes (UTC)"
        );
        assert_eq!(
            cs("0,30 8-18 * * *", "UTC").describe(),
            "every 30 minutes from 08:00 to 18:30 (UTC)"
        );
        assert_eq!(
            cs("0 0 */10 * 1", "UTC").describe(),
            "at 00:00 on days 1, 11, 21 and 31 of the month if it is Monday (UTC)"
        );
        assert_eq!(
            cs("15,45 */6 * * *", "UTC").describe(),
            "at minutes 15 and 45 past hours 0, 6, 12 and 18 every day (UTC)"
        );
        assert_eq!(
            cs("0 0 1 * *", "UTC").describe(),
            "at 00:00 on day 1 of the month (UTC)"
        );
        assert_eq!(
            cs("0 0 13 * 5", "UTC").describe(),
            "at 00:00 on day 13 of the month or on Friday (UTC)"
        );
        assert_eq!(
            cs("30 9 * 1,7 mon,wed,fri", "UTC").describe(),
            "at 09:30 on Monday, Wednesday and Friday in January and July (UTC)"
        );
        assert!(cs("0 * * * *", "UTC").is_wildcard());
        assert!(!cs("0 7 * * *", "UTC").is_wildcard());
        assert!(cs("@hourly", "UTC").is_wildcard());
    }
}

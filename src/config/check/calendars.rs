//! The `calendars:` section (named sets of dates) and a job's `only_on` / `except_on`.
//!
//! A calendar is a mapping with any of `weekdays: [mon, …]`, `dates: [2026-12-25, …]` and
//! `file: holidays.txt` (one ISO date per line; blank lines and `#` comments ignored; the path
//! is relative to the jobs file). Every form error names where it was written (file:line:col of
//! the jobs file; a bad line of a dates file is reported at its `file:` key with that file's
//! line). Owns: reading calendars into [`Calendar`]s. Must not touch: slot arithmetic (see
//! `schedule::calendar`), other sections.

use std::collections::BTreeMap;

use chrono::NaiveDate;

use super::checker::{CALENDAR_KEYS, Checker, describe_value, index, key, show};
use crate::config::yaml::{Mapping, Seg, Value};
use crate::schedule::calendar::{Calendar, DayRule, WEEKDAY_NAMES, parse_weekday};

/// A dates file larger than this is refused (a holiday list is a few kilobytes).
pub const MAX_DATES_FILE_BYTES: u64 = 1024 * 1024;
/// Most dates one calendar may hold: every job that names it carries its dates in the store.
pub const MAX_CALENDAR_DATES: usize = 10_000;

fn parse_date(s: &str) -> Option<NaiveDate> {
    NaiveDate::parse_from_str(s.trim(), "%Y-%m-%d").ok()
}

impl Checker<'_> {
    pub(super) fn calendars_section(&mut self, top: &Mapping) -> BTreeMap<String, Calendar> {
        let mut out = BTreeMap::new();
        for (name, p, v) in self.named_entries(
            top,
            "calendars",
            "calendar name → {weekdays, dates, file}",
            "calendar",
            true,
        ) {
            match self.calendar(&name, v, &p) {
                Some(c) => {
                    out.insert(name, c);
                }
                None => {
                    self.broken_calendars.insert(name);
                }
            }
        }
        out
    }

    fn calendar(&mut self, name: &str, v: &Value, p: &[Seg]) -> Option<Calendar> {
        let m = self.mapping(
            v,
            p,
            "a calendar such as {weekdays: [mon, tue, wed, thu, fri]} or {dates: [2026-12-25], \
             file: holidays.txt}",
        )?;
        self.check_keys(m, p, CALENDAR_KEYS);
        let before = self.error_count();
        let mut cal = Calendar {
            name: name.to_string(),
            ..Calendar::default()
        };
        let mut any = false;
        if let Some(list) = self.list_of(m, p, "weekdays", "weekdays such as [mon, fri]") {
            any = true;
            for (i, item) in list.iter().enumerate() {
                let ip = index(&key(p, "weekdays"), i);
                match item {
                    Value::String(s) => match parse_weekday(s) {
                        Some(d) => cal.weekdays[d] = true,
                        None => self.error(
                            ip,
                            format!(
                                "unknown weekday {}: use one of {}",
                                show(s),
                                WEEKDAY_NAMES
                                    .iter()
                                    .map(|(s, _)| *s)
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        ),
                    },
                    other => self.error(
                        ip,
                        format!("expected a weekday name, found {}", describe_value(other)),
                    ),
                }
            }
        }
        if let Some(list) = self.list_of(m, p, "dates", "ISO dates such as [2026-12-25]") {
            any = true;
            for (i, item) in list.iter().enumerate() {
                let ip = index(&key(p, "dates"), i);
                let text = match item {
                    Value::String(s) => s.clone(),
                    other => {
                        self.error(
                            ip,
                            format!(
                                "expected an ISO date (YYYY-MM-DD), found {}",
                                describe_value(other)
                            ),
                        );
                        continue;
                    }
                };
                match parse_date(&text) {
                    Some(d) => {
                        cal.dates.insert(d);
                    }
                    None => self.error(
                        ip,
                        format!(
                            "{} is not a date: use YYYY-MM-DD, e.g. 2026-12-25",
                            show(&text)
                        ),
                    ),
                }
            }
        }
        if let Some(file) = self.opt_text(m, p, "file") {
            any = true;
            if let Err(msg) = self.dates_file(&file, &mut cal) {
                self.error(key(p, "file"), msg);
            }
        }
        if cal.dates.len() > MAX_CALENDAR_DATES {
            self.error(
                p.to_vec(),
                format!(
                    "calendar holds {} dates, more than {MAX_CALENDAR_DATES}: every job naming it \
                     stores its dates (use weekdays for recurring days)",
                    cal.dates.len()
                ),
            );
        }
        if !any && self.error_count() == before {
            self.error(
                p.to_vec(),
                "a calendar needs at least one of `weekdays`, `dates` or `file`",
            );
        }
        (self.error_count() == before).then_some(cal)
    }

    /// The value of `k` when it is a list; an error naming `what` when it is something else.
    fn list_of<'m>(
        &mut self,
        m: &'m Mapping,
        p: &[Seg],
        k: &str,
        what: &str,
    ) -> Option<&'m Vec<Value>> {
        match Self::get(m, k)? {
            Value::Sequence(items) => Some(items),
            other => {
                self.error(
                    key(p, k),
                    format!("expected a list of {what}, found {}", describe_value(other)),
                );
                None
            }
        }
    }

    /// Read `file` (relative to the jobs file) into `cal.dates`: one ISO date per line.
    fn dates_file(&self, file: &str, cal: &mut Calendar) -> Result<(), String> {
        let rel = std::path::Path::new(file.trim());
        let path = match &self.base_dir {
            Some(dir) if rel.is_relative() => dir.join(rel),
            _ => rel.to_path_buf(),
        };
        let shown = path.display();
        let meta = std::fs::metadata(&path).map_err(|e| format!("cannot read {shown}: {e}"))?;
        if !meta.is_file() {
            return Err(format!("{shown} is not a regular file"));
        }
        if meta.len() > MAX_DATES_FILE_BYTES {
            return Err(format!(
                "{shown} is {} bytes, more than the {MAX_DATES_FILE_BYTES}-byte cap on a dates file",
                meta.len()
            ));
        }
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("cannot read {shown}: {e}"))?;
        for (i, line) in text.lines().enumerate() {
            let t = line.split('#').next().unwrap_or("").trim();
            if t.is_empty() {
                continue;
            }
            match parse_date(t) {
                Some(d) => {
                    cal.dates.insert(d);
                }
                None => {
                    return Err(format!(
                        "{shown}:{}: {} is not a date: write one YYYY-MM-DD per line (# starts \
                         a comment)",
                        i + 1,
                        show(t)
                    ));
                }
            }
        }
        Ok(())
    }

    /// A job's `only_on` / `except_on`: names of calendars defined under `calendars:`.
    pub(super) fn day_rule(&mut self, m: &Mapping, p: &[Seg]) -> DayRule {
        let mut rule = DayRule::default();
        for k in ["only_on", "except_on"] {
            let Some(name) = self.opt_text(m, p, k) else {
                continue;
            };
            let name = name.trim().to_string();
            if self.broken_calendars.contains(&name) {
                self.error(
                    key(p, k),
                    format!(
                        "calendar {} has errors (reported where it is defined)",
                        show(&name)
                    ),
                );
                continue;
            }
            let Some(cal) = self.calendars.get(&name).cloned() else {
                let known: Vec<&str> = self.calendars.keys().map(String::as_str).collect();
                let hint = if known.is_empty() {
                    "no calendars are defined: add one under `calendars:`".to_string()
                } else {
                    format!("defined calendars: {}", known.join(", "))
                };
                self.error(
                    key(p, k),
                    format!("unknown calendar {} ({hint})", show(&name)),
                );
                continue;
            };
            if k == "only_on" {
                rule.only_on = Some(cal);
            } else {
                rule.except_on = Some(cal);
            }
        }
        rule
    }
}

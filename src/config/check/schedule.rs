//! A job's `schedule:` in its three written forms: text (`every 5m`, `0 7 * * *`), a number
//! (handed to the grammar as text) and the mapping `{kind: every|cron|at, …}`, with the job's zone.
//!
//! Owns: turning those into a `ScheduleSpec` and its display text. Must not touch: the grammar
//! itself (`crate::schedule`).

use super::checker::{Checker, Defaults, SCHEDULE_KEYS, key, kind_of, show};
use crate::config::bounds;
use crate::config::defaults;
use crate::config::yaml::{Mapping, Seg, Value};
use crate::schedule::{self, CronSchedule, ScheduleSpec};

impl Checker<'_> {
    /// The schedule with its display text, and the job's zone (`None` when the zone is bad).
    pub(super) fn schedule(
        &mut self,
        m: &Mapping,
        p: &[Seg],
        d: &Defaults,
    ) -> (Option<(ScheduleSpec, String)>, Option<String>) {
        let sp = key(p, "schedule");
        let Some(v) = Self::get(m, "schedule") else {
            self.error(
                p.to_vec(),
                "missing required key `schedule` (e.g. \"every 5m\", \"0 7 * * *\", or \
                 {kind: cron, cron_expr: \"0 7 * * *\", tz: Europe/Berlin}), or `after:` for \
                 a job that runs when another finishes",
            );
            return (None, d.tz.clone());
        };
        let text = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Mapping(sm) => return self.schedule_mapping(sm, &sp, d),
            other => {
                self.error(
                    sp,
                    format!(
                        "expected schedule text (\"every 5m\") or a mapping ({{kind: every, \
                         every_seconds: 300}}), found {}",
                        kind_of(other)
                    ),
                );
                return (None, d.tz.clone());
            }
        };
        // With a bad `defaults.tz` the text is still checked (in UTC) for its own problems.
        let tz = d.tz.clone();
        match schedule::parse_schedule(&text, tz.as_deref().unwrap_or(defaults::TZ)) {
            Ok(spec) => (Some((spec, text)), tz),
            Err(e) => {
                self.error(sp, format!("invalid schedule {}: {e}", show(&text)));
                (None, tz)
            }
        }
    }

    pub(super) fn schedule_mapping(
        &mut self,
        m: &Mapping,
        sp: &[Seg],
        d: &Defaults,
    ) -> (Option<(ScheduleSpec, String)>, Option<String>) {
        self.check_keys(m, sp, SCHEDULE_KEYS);
        let mut tz_ok = d.tz.is_some();
        let tz = match self.opt_str(m, sp, "tz") {
            None => d.tz.clone().unwrap_or_default(),
            Some(t) => match schedule::parse_tz(&t) {
                Ok(z) => {
                    tz_ok = true;
                    z.name().to_string()
                }
                Err(e) => {
                    self.error(key(sp, "tz"), e.to_string());
                    tz_ok = false;
                    t
                }
            },
        };
        let zone = tz_ok.then(|| tz.clone());
        (self.schedule_kind(m, sp, &tz), zone)
    }

    pub(super) fn schedule_kind(
        &mut self,
        m: &Mapping,
        sp: &[Seg],
        tz: &str,
    ) -> Option<(ScheduleSpec, String)> {
        let kind = self.opt_str(m, sp, "kind");
        let Some(kind) = kind else {
            if Self::get(m, "kind").is_none() {
                self.error(
                    sp.to_vec(),
                    "missing required key `kind`: use every, cron or at",
                );
            }
            return None;
        };
        let kind = kind.trim().to_ascii_lowercase();
        let fields: &[&str] = match kind.as_str() {
            "every" => &["every_seconds"],
            "cron" => &["cron_expr"],
            "at" => &["at"],
            _ => {
                self.error(
                    key(sp, "kind"),
                    format!(
                        "unknown schedule kind {}: use every, cron or at",
                        show(&kind)
                    ),
                );
                return None;
            }
        };
        for other in ["every_seconds", "cron_expr", "at"] {
            if !fields.contains(&other) && Self::get(m, other).is_some() {
                self.error_at_key(
                    key(sp, other),
                    format!(
                        "`{other}` does not apply to `kind: {kind}` (it uses `{}`)",
                        fields[0]
                    ),
                );
            }
        }
        let field = fields[0];
        if Self::get(m, field).is_none() {
            self.error(
                sp.to_vec(),
                format!("missing required key `{field}` for `kind: {kind}`"),
            );
            return None;
        }
        match kind.as_str() {
            "every" => {
                let n = self.opt_whole(m, sp, "every_seconds", bounds::EVERY_SECONDS)?;
                Some((
                    ScheduleSpec::Every { every_seconds: n },
                    format!("every {n}s"),
                ))
            }
            "cron" => {
                let expr = self.opt_text(m, sp, "cron_expr")?;
                // A bad zone is reported where it was written; check the rest in UTC.
                let zone = schedule::parse_tz(tz).unwrap_or(chrono_tz::UTC);
                match CronSchedule::parse(&expr, zone) {
                    Ok(_) => Some((
                        ScheduleSpec::Cron {
                            expr: expr.trim().to_string(),
                            tz: tz.to_string(),
                        },
                        expr,
                    )),
                    Err(e) => {
                        self.error(key(sp, "cron_expr"), e.to_string());
                        None
                    }
                }
            }
            _ => {
                let at = self.opt_text(m, sp, "at")?;
                // A bad zone is reported where it was written; check the rest in UTC.
                let zone = schedule::parse_tz(tz).unwrap_or(chrono_tz::UTC);
                match schedule::grammar::parse_at(&at, zone) {
                    Ok(t) => Some((ScheduleSpec::At { at: t }, format!("at:{at}"))),
                    Err(e) => {
                        self.error(key(sp, "at"), format!("{e} (the job's zone is {tz})"));
                        None
                    }
                }
            }
        }
    }
}

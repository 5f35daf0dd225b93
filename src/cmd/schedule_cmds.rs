//! `cronsole next`: preview the slots of any schedule-grammar form (SPEC §13.2).
//!
//! Owns: reading the command's arguments, computing slots through `cronsole::schedule`, and
//! printing them. Must not touch: the store or the engine (it needs neither).
//!
//! Decisions where the SPEC is silent: an `every` interval is previewed on a grid anchored at
//! the reference instant (`--after`/`--before`/now), since the real anchor only exists once the
//! job is stored; `in 10m` resolves relative to `--after` (or now). Text output is one slot per
//! line: the UTC instant, then the wall time and abbreviation in the zone; an empty answer
//! prints one line in parentheses saying why (exit 0). `--tz` is case-insensitive.

use std::process::ExitCode;

use anyhow::Result;
use chrono::{DateTime, Duration, SecondsFormat, Utc};
use cronsole::cli::NextArgs;
use cronsole::schedule::{Compiled, ScheduleSpec, parse_schedule, parse_tz};

use super::bad_input;

fn instant(flag: &str, s: &str) -> Result<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s.trim())
        .map(|d| d.to_utc())
        .map_err(|e| {
            bad_input(format!(
                "{flag} '{s}' is not an RFC 3339 instant ({e}); e.g. 2026-05-13T10:00:00Z"
            ))
        })
}

pub fn next(a: &NextArgs) -> Result<ExitCode> {
    let tz = parse_tz(&a.tz).map_err(|e| bad_input(e.to_string()))?;
    let spec = parse_schedule(&a.expr, &a.tz)
        .map_err(|e| bad_input(format!("schedule '{}': {e}", a.expr)))?;
    let after = a
        .after
        .as_deref()
        .map(|s| instant("--after", s))
        .transpose()?;
    let before = a
        .before
        .as_deref()
        .map(|s| instant("--before", s))
        .transpose()?;
    let reference = before.or(after).unwrap_or_else(Utc::now);

    let anchor = match (&spec, before) {
        (ScheduleSpec::Every { every_seconds }, Some(b)) => {
            let back = (*every_seconds as i64).saturating_mul(a.count as i64 + 1);
            b - Duration::seconds(back.min(100 * 365 * 86_400))
        }
        (ScheduleSpec::In { seconds }, _) => {
            after.unwrap_or_else(Utc::now) + Duration::seconds(*seconds as i64)
        }
        _ => reference,
    };
    let compiled = Compiled::new(&spec, anchor).map_err(|e| bad_input(e.to_string()))?;

    let mut slots = Vec::with_capacity(a.count as usize);
    let mut cur = reference;
    while (slots.len() as u64) < a.count {
        let s = if before.is_some() {
            compiled.prev_before(cur)
        } else {
            compiled.next_after(cur)
        };
        match s {
            Some(s) => {
                slots.push(s);
                cur = s;
            }
            None => break,
        }
    }

    if a.json {
        let v = serde_json::json!({
            "expr": a.expr,
            "tz": tz.name(),
            "slots": slots
                .iter()
                .map(|s| s.to_rfc3339_opts(SecondsFormat::Secs, true))
                .collect::<Vec<_>>(),
        });
        println!("{v}");
    } else if slots.is_empty() {
        // An empty answer says so (a script reading --json gets `"slots": []`).
        if a.count == 0 {
            println!("(no slots: --count 0 asks for none)");
        } else if before.is_some() {
            println!(
                "(no slots: the schedule has none before {})",
                reference.to_rfc3339_opts(SecondsFormat::Secs, true)
            );
        } else {
            println!(
                "(no slots: the schedule has none after {})",
                reference.to_rfc3339_opts(SecondsFormat::Secs, true)
            );
        }
    } else {
        for s in &slots {
            let local = s.with_timezone(&tz);
            println!(
                "{}  {} ({})",
                s.to_rfc3339_opts(SecondsFormat::Secs, true),
                local.format("%Y-%m-%d %H:%M:%S %Z"),
                tz.name()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

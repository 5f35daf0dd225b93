//! `cronsole validate FILE`: every error and warning as
//! `file:line:col: severity: key: message`, then, for each job that validated, its schedule in
//! words (an `every` grid counted from when the job is first stored, or on the clock) and its
//! next 3 runs in its own zone if it were first stored now — the slots the store will record
//! (`JobDef::first_slots`), a `run_immediately` run first. Exit 2 when any error (or the
//! file cannot be read), 0 otherwise: warnings alone do not fail.
//!
//! The valid jobs are printed from a hand-over pass after the diagnostics
//! ([`config::Validation::for_each_valid`]): no definition is held, so a file of a million jobs validates in
//! bounded memory.
//!
//! Owns: printing. Must not touch: the store (validation never creates or changes one).

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use crate::config::{self, Handover, Severity, Validation};
use crate::model::JobDef;
use crate::schedule::{self, ScheduleSpec};
use crate::when;
use anyhow::Result;
use chrono::{DateTime, Utc};

pub fn validate(file: &Path) -> Result<ExitCode> {
    // Size-capped, regular files only: `validate /dev/zero` is refused, not read forever.
    let text = match config::read_text(file) {
        Ok(t) => t,
        Err(d) => {
            eprintln!("{}", super::inert(&d));
            return Ok(ExitCode::from(2));
        }
    };
    let now = Utc::now();
    let checked = config::validate_str_at(&text, file, now);
    let failed = checked.has_errors();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    write_report(&mut out, checked, file, now)?;
    out.flush()?;
    Ok(if failed {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

/// The whole report; `now` is the instant the next slots are counted from. The valid jobs are
/// printed as they are handed over (a second pass over a streamed file: none is held).
pub fn write_report(
    out: &mut impl Write,
    checked: Validation<'_>,
    file: &Path,
    now: DateTime<Utc>,
) -> Result<()> {
    for d in &checked.diagnostics {
        writeln!(out, "{}", super::inert(d))?;
    }
    let errors = checked
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .count();
    let warnings = checked.diagnostics.len() - errors;
    if !checked.diagnostics.is_empty() {
        writeln!(out)?;
    }
    let broken = Broken::of(&checked);
    let (valid, jobs) = (checked.valid, checked.jobs);
    let (mut printed, mut held) = (0, 0);
    let handed = checked.for_each_valid(file, &mut |job| {
        printed += 1;
        match broken.holds_back(job) {
            Some(why) => {
                held += 1;
                let line = format!("{}: not valid: {why}", job.name);
                writeln!(out, "{}", super::inert(&line)).map_err(anyhow::Error::from)
            }
            None => write_job(out, job, now),
        }
    });
    match handed {
        Ok(()) => {}
        Err(Handover::Refused(e)) => return Err(e),
        Err(Handover::Changed(c)) => return Err(anyhow::Error::new(c)),
    }
    if printed != valid {
        anyhow::bail!(
            "{}: {valid} job(s) validated but {printed} read back (the file changed while it was read?)",
            file.display()
        );
    }
    let held_note = if held == 0 {
        String::new()
    } else {
        format!(" ({held} more held back by errors outside `jobs:`)")
    };
    writeln!(
        out,
        "{} error(s){}, {} warning(s); {} of {} job(s) valid{held_note}",
        errors,
        broken.where_words(),
        warnings,
        valid - held,
        jobs
    )?;
    Ok(())
}

/// The entries outside `jobs:` that have errors, by section, and what that means for the jobs
/// that validated on their own: a job is not valid when an entry it relies on is not (its
/// agent, its sinks) or when `defaults:`, which every job inherits, has errors. The file is refused whole either way; this says which jobs to look at.
#[derive(Default)]
struct Broken {
    /// Errors per top-level section, in file order of first appearance (`jobs`, `agents`, …).
    sections: Vec<(String, usize)>,
    /// Named entries with errors, as `section.name`.
    entries: std::collections::BTreeSet<String>,
}

impl Broken {
    fn of(v: &Validation<'_>) -> Broken {
        let mut b = Broken::default();
        for d in v
            .diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
        {
            let mut parts = d.key.splitn(3, ['.', '[']);
            let section = parts.next().unwrap_or_default();
            let section = if section.is_empty() {
                "the file"
            } else {
                section
            };
            match b.sections.iter_mut().find(|(s, _)| s == section) {
                Some((_, n)) => *n += 1,
                None => b.sections.push((section.to_string(), 1)),
            }
            if let Some(name) = parts.next()
                && ["agents", "delivery"].contains(&section)
            {
                b.entries.insert(format!("{section}.{name}"));
            }
        }
        b
    }

    /// ` (2 under agents, 1 under jobs)`; nothing when every error is a job's own.
    fn where_words(&self) -> String {
        if self.sections.iter().all(|(s, _)| s == "jobs") {
            return String::new();
        }
        let parts: Vec<String> = self
            .sections
            .iter()
            .map(|(s, n)| match s.as_str() {
                "the file" => format!("{n} in the file itself"),
                _ => format!("{n} under {s}"),
            })
            .collect();
        format!(" ({})", parts.join(", "))
    }

    /// Why `job`, valid on its own, is not: the first entry with errors it relies on.
    fn holds_back(&self, job: &JobDef) -> Option<String> {
        if self.sections.iter().any(|(s, _)| s == "defaults") {
            return Some("it inherits `defaults:`, which has errors".to_string());
        }
        if let crate::model::Action::Agent { agent, .. } = &job.action {
            // An agent allowing a tool of an `mcp_servers:`/`tools:` entry with errors has an
            // error of its own (its `tools:` item says so).
            if self.entries.contains(&format!("agents.{agent}")) {
                return Some(format!("it uses agent '{agent}', which has errors"));
            }
        }
        job.deliver
            .iter()
            .find(|s| self.entries.contains(&format!("delivery.{s}")))
            .map(|s| format!("it delivers to sink '{s}', which has errors"))
    }
}

fn write_job(out: &mut impl Write, job: &JobDef, now: DateTime<Utc>) -> Result<()> {
    // Where its slots start if it is first stored now: the rule the store records.
    let first = job.first_slots(now);
    let compiled = first.and_then(|f| Ok((f, job.compile(f.anchor)?)));
    let (first, compiled) = match compiled {
        Ok(c) => c,
        Err(e) => {
            let line = format!("{}: schedule cannot be evaluated: {e}", job.name);
            writeln!(out, "{}", super::inert(&line))?;
            return Ok(());
        }
    };
    let zone = schedule::parse_tz(&job.tz).unwrap_or(chrono_tz::UTC);
    let mut words = compiled.describe();
    if let Some(p) = schedule::placement(&job.schedule) {
        words.push_str(&format!(" ({p})"));
    }
    match job.schedule {
        ScheduleSpec::In { .. } => words.push_str(" (counted from when the job is first stored)"),
        ScheduleSpec::AtTime {
            hour,
            minute,
            ref tz,
        } => words.push_str(&format!(
            " (if first stored now: the next {hour:02}:{minute:02} {tz}, and never again)"
        )),
        _ => {}
    }
    if job.run_immediately {
        words.push_str(" [run_immediately: one run when first stored]");
    }
    if !job.enabled {
        words.push_str(" [disabled]");
    }
    match job.overlap {
        crate::model::Overlap::Skip => {}
        crate::model::Overlap::Allow {
            max_concurrent_runs,
        } => words.push_str(&format!(
            " [overlap: allow, up to {max_concurrent_runs} runs at once]"
        )),
        other => words.push_str(&format!(" [overlap: {}]", other.name())),
    }
    let line = format!("{}: {} — {}", job.name, job.schedule_text, words);
    writeln!(out, "{}", crate::text::visible_line(&line))?;
    let stamp = |t: DateTime<Utc>| {
        format!(
            "{} ({})",
            // An `at:` instant keeps its fraction of a second (none is shown when it has none).
            t.with_timezone(&zone)
                .format(&format!("%Y-%m-%d %H:%M:%S{} %Z", when::fraction(t))),
            when::rfc3339(t)
        )
    };
    let mut shown = 0;
    if let Some(at) = first.immediate {
        writeln!(
            out,
            "  next: {} [at first store: run_immediately]",
            stamp(at)
        )?;
        shown += 1;
    }
    let mut slot = first.first;
    while shown < 3 {
        let Some(next) = slot else { break };
        if job.until.is_some_and(|u| next > u) {
            break;
        }
        // The instant shown is when the slot fires (slot + the job's jitter offset).
        let fire = job.fire_at(next);
        let jitter = if fire > next {
            format!(
                " [slot {} + {}s jitter]",
                next.with_timezone(&zone)
                    .format(&format!("%H:%M:%S{}", when::fraction(next))),
                (fire - next).num_milliseconds() as f64 / 1000.0
            )
        } else {
            String::new()
        };
        writeln!(out, "  next: {}{jitter}", stamp(fire))?;
        shown += 1;
        if job.max_runs.is_some_and(|m| shown as u64 >= m) {
            break;
        }
        slot = compiled.next_after(next);
    }
    if shown == 0 && job.schedule == ScheduleSpec::AfterOnly {
        writeln!(
            out,
            "  no slots: runs when its parents finish (trigger: chain)"
        )?;
    } else if shown == 0 {
        writeln!(out, "  no future slots")?;
    }
    Ok(())
}

//! `cronsole next`: preview the slots of any schedule-grammar form.
//!
//! Owns: reading the command's arguments, computing slots through `cronsole::schedule`, and
//! printing them. Must not touch: the engine, or the store beyond reading one job's record.
//!
//! Decisions: an `every` interval is previewed on a grid anchored at the reference instant
//! (`--after`/`--before`/now), since the real anchor only exists once the job is stored; `in 10m`
//! resolves relative to `--after` (or now). `next --job NAME` without `--after`/`--before`
//! shows where the job's runs start if it is first stored now, by the store's own rule
//! (`JobDef::first_slots`): the `run_immediately` run first, marked, then the slots. A job the
//! store (`--store`, else the one beside the jobs file) already holds is shown as the engine
//! will run it instead: from its stored next slot, on its stored grid, as `describe` shows it
//! (`"stored": true` in `--json`). Text
//! output is one slot per line: the UTC instant, then the wall time and abbreviation in the zone; an empty answer
//! prints one line in parentheses saying why (exit 0). `--tz` is case-insensitive.

use std::process::ExitCode;

use crate::cli::args::{Cli, NextArgs};
use crate::model::{JobDef, JobRecord};
use crate::schedule::{Compiled, ScheduleSpec, parse_schedule, parse_tz};
use anyhow::Result;
use chrono::{DateTime, Duration, SecondsFormat, Utc};

use super::bad_input;

/// `--after` / `--before`: any time `when::parse_time` reads, wall times and dates in the
/// schedule's zone.
fn instant(flag: &str, s: &str, now: DateTime<Utc>, tz: chrono_tz::Tz) -> Result<DateTime<Utc>> {
    crate::when::parse_time(s, now, &tz, tz.name()).map_err(|e| bad_input(format!("{flag}: {e}")))
}

/// The job `name` of the jobs file (`--file`, else `./jobs.yaml`): its schedule and what
/// turns slots into fire instants.
fn job_of_file(file: Option<&std::path::Path>, name: &str) -> Result<JobDef> {
    let path = file.map_or_else(
        || std::path::PathBuf::from("jobs.yaml"),
        |f| f.to_path_buf(),
    );
    let loaded = crate::config::load_file(&path)?;
    loaded
        .file
        .jobs
        .into_iter()
        .find(|j| j.name == name)
        .ok_or_else(|| bad_input(format!("no job named '{name}' in {}", path.display())))
}

/// Up to `count` slots from `reference`: backwards (before it) or forwards (after it).
fn walk(
    compiled: &Compiled,
    reference: DateTime<Utc>,
    backwards: bool,
    count: u64,
) -> Vec<DateTime<Utc>> {
    let mut slots = Vec::with_capacity(usize::try_from(count).unwrap_or(0).min(10_000));
    let mut cur = reference;
    while (slots.len() as u64) < count {
        let s = if backwards {
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
    slots
}

/// What `next` answers, before it is printed.
struct Preview {
    expr: String,
    tz: chrono_tz::Tz,
    job: Option<JobDef>,
    slots: Vec<DateTime<Utc>>,
    /// The `run_immediately` run of a job previewed from now.
    immediate: Option<DateTime<Utc>>,
    before: Option<DateTime<Utc>>,
    reference: DateTime<Utc>,
    /// The job as the store holds it: its state word (`idle`, `paused`, …) when it is.
    stored: Option<&'static str>,
    /// The stored record, whose rule says when each slot fires.
    record: Option<Box<JobRecord>>,
}

impl Preview {
    /// What the store acts on: the slot plus the job's jitter (the slot itself without --job);
    /// for a stored job, its record's rule (a `run_immediately` run fires on its slot).
    fn fire(&self, s: DateTime<Utc>) -> DateTime<Utc> {
        match (&self.record, &self.job) {
            (Some(r), _) => r.fire_at(s),
            (None, Some(j)) => j.fire_at(s),
            (None, None) => s,
        }
    }
}

pub fn next(cli: &Cli, a: &NextArgs) -> Result<ExitCode> {
    let p = match stored_job(cli, a)? {
        Some(rec) => from_store(a, rec)?,
        None => preview(a)?,
    };
    if a.json {
        print_json(&p)?;
    } else if p.slots.is_empty() {
        print_empty(a, &p);
    } else {
        print_text(&p);
    }
    Ok(ExitCode::SUCCESS)
}

/// The record of `--job NAME` when the store (`--store`, else the one beside the jobs file)
/// exists and holds it; `None` when there is no store there or it has no such job.
fn stored_job(cli: &Cli, a: &NextArgs) -> Result<Option<JobRecord>> {
    let Some(name) = a.job.as_deref() else {
        return Ok(None);
    };
    let file = a.file.clone().unwrap_or_else(|| "jobs.yaml".into());
    let location = super::store_location(cli, Some(&file));
    if !location.contains("://") && !std::path::Path::new(&location).join("VERSION").exists() {
        return Ok(None);
    }
    let store = super::open_existing_store_for_named(&location, false)?;
    Ok(store.job(name)?)
}

/// An optional `--after`/`--before` instant.
type Bound = Option<DateTime<Utc>>;

/// `--after` and `--before`, read in `tz` with `now` for relative forms.
fn window(a: &NextArgs, now: DateTime<Utc>, tz: chrono_tz::Tz) -> Result<(Bound, Bound)> {
    let read = |flag: &str, v: Option<&str>| v.map(|s| instant(flag, s, now, tz)).transpose();
    Ok((
        read("--after", a.after.as_deref())?,
        read("--before", a.before.as_deref())?,
    ))
}

/// The slots of a stored job, as the engine will run them: from its stored next slot on its
/// stored grid (`--after`/`--before` walk that grid from the instant given). A paused or
/// retired job has none.
fn from_store(a: &NextArgs, rec: JobRecord) -> Result<Preview> {
    let tz = parse_tz(&rec.def.tz).map_err(|e| bad_input(e.to_string()))?;
    let now = Utc::now();
    let (after, before) = window(a, now, tz)?;
    let reference = before.or(after).unwrap_or(now);
    let compiled =
        crate::store::rules::slots::compile(&rec).map_err(|e| bad_input(e.to_string()))?;
    let mut slots = match (rec.fires(), rec.rt.next_slot, after.or(before)) {
        (true, Some(first), None) if a.count > 0 => {
            let mut v = vec![first];
            v.extend(walk(&compiled, first, false, a.count - 1));
            v
        }
        (true, _, Some(_)) => walk(&compiled, reference, before.is_some(), a.count),
        _ => Vec::new(),
    };
    if let Some(until) = rec.def.until {
        slots.retain(|s| *s <= until);
    }
    slots.truncate(rec.runs_left());
    Ok(Preview {
        expr: rec.def.schedule_text.clone(),
        tz,
        slots,
        immediate: None,
        before,
        reference,
        stored: Some(rec.state_word(now)),
        job: Some(rec.def.clone()),
        record: Some(Box::new(rec)),
    })
}

/// The slots `a` asks for (or the job's, previewed from now).
fn preview(a: &NextArgs) -> Result<Preview> {
    let job = a
        .job
        .as_deref()
        .map(|n| job_of_file(a.file.as_deref(), n))
        .transpose()?;
    let (expr, tz_name) = match (&job, &a.expr) {
        (Some(j), _) => (j.schedule_text.clone(), j.tz.clone()),
        (None, Some(e)) => (e.clone(), a.tz.clone()),
        (None, None) => return Err(bad_input("next needs a schedule expression or --job NAME")),
    };
    let tz = parse_tz(&tz_name).map_err(|e| bad_input(e.to_string()))?;
    let spec = match &job {
        Some(j) => j.schedule.clone(),
        None => parse_schedule(&expr, &tz_name)
            .map_err(|e| bad_input(format!("schedule '{expr}': {e}")))?,
    };
    // Whole seconds, as a grid counted from the store starts on one: `every 1h30m` from now
    // prints 19:57:55, not 19:57:55.937440.
    let now = chrono::SubsecRound::trunc_subsecs(Utc::now(), 0);
    let (after, before) = window(a, now, tz)?;
    let reference = before.or(after).unwrap_or(now);
    // A job of the file previewed from now: where its slots start if it is first stored now,
    // by the store's own rule (an `every` grid's first slot one interval after that instant;
    // a `run_immediately` run first).
    let stored_now = match (&job, after, before) {
        (Some(j), None, None) => Some(j.first_slots(now).map_err(|e| bad_input(e.to_string()))?),
        _ => None,
    };

    let anchor = match (&spec, before) {
        (ScheduleSpec::Every { every_seconds }, Some(b)) => {
            let back = (*every_seconds as i64).saturating_mul(a.count as i64 + 1);
            b - Duration::seconds(back.min(100 * 365 * 86_400))
        }
        (ScheduleSpec::In { seconds }, _) => {
            after.unwrap_or(now) + Duration::seconds(*seconds as i64)
        }
        _ => stored_now.map_or(reference, |f| f.anchor),
    };
    let compiled = match &job {
        Some(j) => j.compile(anchor),
        None => Compiled::new(&spec, anchor),
    }
    .map_err(|e| bad_input(e.to_string()))?;

    // Previewed from now, the first slot is the store's; the rest follow it on the schedule.
    let slots = match stored_now.map(|f| f.first) {
        Some(Some(first)) if a.count > 0 => {
            let mut v = vec![first];
            v.extend(walk(&compiled, first, false, a.count - 1));
            v
        }
        Some(_) => Vec::new(),
        None => walk(&compiled, reference, before.is_some(), a.count),
    };
    Ok(Preview {
        expr,
        tz,
        job,
        slots,
        immediate: stored_now.and_then(|f| f.immediate),
        before,
        reference,
        stored: None,
        record: None,
    })
}

fn print_json(p: &Preview) -> Result<()> {
    let Preview {
        expr,
        tz,
        job,
        slots,
        ..
    } = p;
    let mut v = serde_json::json!({
        "expr": expr,
        "tz": tz.name(),
        "slots": slots
            .iter()
            .map(|s| crate::when::rfc3339(*s))
            .collect::<Vec<_>>(),
    });
    if let Some(at) = p.immediate {
        v["immediate"] = serde_json::json!(crate::when::rfc3339(at));
    }
    if let Some(j) = &job {
        v["job"] = serde_json::json!(j.name);
        v["stored"] = serde_json::json!(p.stored.is_some());
        v["fires"] = serde_json::json!(
            slots
                .iter()
                .map(|s| crate::when::rfc3339(p.fire(*s)))
                .collect::<Vec<_>>()
        );
    }
    println!("{}", crate::text::to_json(&v)?);
    Ok(())
}

/// An empty answer says so (a script reading --json gets `"slots": []`).
fn print_empty(a: &NextArgs, p: &Preview) {
    let (job, before, reference) = (&p.job, p.before, p.reference);
    if a.count == 0 {
        println!("(no slots: --count 0 asks for none)");
    } else if let (Some(j), Some(state @ ("paused" | "retired"))) = (job, p.stored) {
        println!("(no slots: job {} is {state} in the store)", j.name);
    } else if let Some(j) = job.as_ref().filter(|j| !j.after.is_empty())
        && j.schedule == ScheduleSpec::AfterOnly
    {
        println!(
            "(no slots: job {} runs when its parents finish: {})",
            j.name, j.schedule_text
        );
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
}

fn print_text(p: &Preview) {
    let (tz, slots) = (p.tz, p.slots.as_slice());
    if let Some(at) = p.immediate {
        println!(
            "{}  {} ({}) [at first store: run_immediately]",
            crate::when::rfc3339(at),
            at.with_timezone(&tz).format(&format!(
                "%Y-%m-%d %H:%M:%S{} %Z",
                crate::when::fraction(at)
            )),
            tz.name()
        );
    }
    for s in slots {
        let f = p.fire(*s);
        let local = f.with_timezone(&tz);
        let jitter = if f > *s {
            format!(
                "  [slot {} + {}s jitter]",
                crate::when::rfc3339(*s),
                (f - *s).num_milliseconds() as f64 / 1000.0
            )
        } else {
            String::new()
        };
        println!(
            "{}  {} ({}){jitter}",
            crate::when::rfc3339(f),
            local.format(&format!("%Y-%m-%d %H:%M:%S{} %Z", crate::when::fraction(f))),
            tz.name()
        );
    }
}

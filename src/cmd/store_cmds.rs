//! `apply`, `jobs`, `history`, `stats` (SPEC §13.2; `pause`, `resume`, `trigger` are in
//! `select`, which resolves their bulk selectors): thin glue
//! between clap arguments and the [`Store`] trait; formatting only.
//!
//! Owns: printing and exit codes of the store commands. Must not touch: store internals (it
//! speaks only the trait), scheduling decisions.
//!
//! Decisions: `trigger` on a job that is running prints that it is running, changes nothing and
//! exits 1 (a runtime condition, not bad input); a trigger already queued exits 0 and says so;
//! an unknown job name exits 2. `history --since` takes RFC 3339, a duration ago (`2h`),
//! `today` or `yesterday` (local midnight); `--status` is case-insensitive; text rows carry
//! the run id (what `diff --run` takes) and an empty answer says so; `--offset` pages (text
//! output ends with the next page's `--offset` when there are more rows).
//! Opening a store directory that does not exist yet creates an empty store (so `jobs` on a
//! fresh checkout prints an empty table rather than failing).

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use chrono::{DateTime, SecondsFormat, Utc};
use cronsole::cli::{Cli, HistoryArgs};
use cronsole::model::{JobRecord, Status};
use cronsole::store::stats::{self, StatsLine};
use cronsole::store::{HistoryQuery, Store};
use serde::Serialize;

use super::{bad_input, jobs_file, open_existing_store, open_store, store_location};

fn store(cli: &Cli) -> Result<std::sync::Arc<dyn Store>> {
    let jobs = jobs_file(cli);
    open_existing_store(&store_location(cli, jobs.as_deref()))
}

fn ts(t: Option<DateTime<Utc>>) -> String {
    t.map_or("-".to_string(), |t| {
        t.to_rfc3339_opts(SecondsFormat::Secs, true)
    })
}

pub fn apply(cli: &Cli, file: &Path) -> Result<ExitCode> {
    let loaded = cronsole::config::load_file(file)?;
    for w in &loaded.warnings {
        eprintln!("warning: {w}");
    }
    let store = open_store(&store_location(cli, Some(file)))?;
    let rep = store.apply(&loaded.file, Utc::now())?;
    for (word, names) in [
        ("created", &rep.created),
        ("updated", &rep.updated),
        ("retired", &rep.retired),
        ("unchanged", &rep.unchanged),
    ] {
        for n in names {
            println!("{word:<9} {n}");
        }
    }
    println!(
        "{} created, {} updated, {} retired, {} unchanged ({})",
        rep.created.len(),
        rep.updated.len(),
        rep.retired.len(),
        rep.unchanged.len(),
        store.location()
    );
    Ok(ExitCode::SUCCESS)
}

#[derive(Serialize)]
struct JobView<'a> {
    name: &'a str,
    state: &'static str,
    schedule: &'a str,
    next_slot: Option<DateTime<Utc>>,
    last_run_at: Option<DateTime<Utc>>,
    last_status: Option<Status>,
    runs: u64,
    paused: bool,
    retired: bool,
    retired_reason: Option<&'a str>,
    lease: Option<&'a cronsole::model::Lease>,
    period_cost_usd: f64,
    max_cost_usd: Option<f64>,
    definition: &'a cronsole::model::JobDef,
    runtime: &'a cronsole::model::JobRuntime,
}

pub fn jobs(cli: &Cli, json: bool) -> Result<ExitCode> {
    let store = store(cli)?;
    let now = Utc::now();
    let settings = store.settings()?;
    let jobs: Vec<JobRecord> = store.jobs()?;
    let views: Vec<JobView> = jobs
        .iter()
        .map(|r| JobView {
            name: &r.def.name,
            state: r.state_word(now),
            schedule: &r.def.schedule_text,
            next_slot: r.rt.next_slot,
            last_run_at: r.rt.last_run_at,
            last_status: r.rt.last_status,
            runs: r.rt.runs,
            paused: r.rt.paused,
            retired: r.rt.retired,
            retired_reason: r.rt.retired_reason.as_deref(),
            lease: r.rt.lease.as_ref(),
            period_cost_usd: stats::period_spend(r, &settings, now),
            max_cost_usd: r.def.max_cost_usd,
            definition: &r.def,
            runtime: &r.rt,
        })
        .collect();
    if json {
        println!("{}", serde_json::to_string_pretty(&views)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<24} {:<8} {:<18} {:<21} {:<10} {:>6} {:>12} LEASE",
        "NAME", "STATE", "SCHEDULE", "NEXT", "LAST", "RUNS", "SPEND"
    );
    for v in &views {
        let spend = match v.max_cost_usd {
            Some(m) => format!("${:.4}/{m:.2}", v.period_cost_usd),
            None => format!("${:.4}", v.period_cost_usd),
        };
        let lease = v.lease.map_or("-".to_string(), |l| {
            format!("{} until {}", l.owner, ts(Some(l.lease_until)))
        });
        println!(
            "{:<24} {:<8} {:<18} {:<21} {:<10} {:>6} {:>12} {}",
            v.name,
            v.state,
            v.schedule,
            ts(v.next_slot),
            v.last_status.map_or("-", |s| s.as_str()),
            v.runs,
            spend,
            lease
        );
    }
    if views.is_empty() {
        println!(
            "(no jobs in {}; run `cronsole apply FILE`)",
            store.location()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `--since`: RFC 3339, a duration ago (`2h`, `30m`), or `today` / `yesterday` / a date
/// `2026-11-29` (local midnight, in the zone of this machine, as `journalctl` reads them).
fn parse_since(s: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s.trim()) {
        return Ok(t.to_utc());
    }
    let today = now.with_timezone(&chrono::Local).date_naive();
    let day = match s.trim().to_ascii_lowercase().as_str() {
        "today" => Some(today),
        "yesterday" => today.checked_sub_days(chrono::Days::new(1)),
        other => chrono::NaiveDate::parse_from_str(other, "%Y-%m-%d").ok(),
    };
    if let Some(day) = day {
        use chrono::TimeZone;
        let midnight = day.and_time(chrono::NaiveTime::MIN);
        // A midnight skipped by DST starts at the first instant after it.
        return chrono::Local
            .from_local_datetime(&midnight)
            .earliest()
            .or_else(|| {
                chrono::Local
                    .from_local_datetime(&(midnight + chrono::Duration::hours(1)))
                    .earliest()
            })
            .map(|t| t.to_utc())
            .ok_or_else(|| bad_input(format!("--since '{s}': no such local midnight")));
    }
    let d = cronsole::schedule::parse_duration(s).map_err(|e| {
        bad_input(format!(
            "--since '{s}': not an RFC 3339 time (2026-11-29T09:00:00Z), a duration ago (2h, 30m), a date (2026-11-29), today or yesterday: {e}"
        ))
    })?;
    let d = chrono::Duration::from_std(d)
        .map_err(|_| bad_input(format!("--since '{s}': duration too large")))?;
    Ok(now - d)
}

pub fn history(cli: &Cli, a: &HistoryArgs) -> Result<ExitCode> {
    let status = match &a.status {
        None => None,
        Some(s) => Some(
            Status::parse(&s.trim().to_ascii_lowercase()).ok_or_else(|| {
                bad_input(format!(
                    "--status '{s}' is not a status; use one of: {}",
                    Status::ALL.map(|s| s.as_str()).join(", ")
                ))
            })?,
        ),
    };
    let since = a
        .since
        .as_deref()
        .map(|s| parse_since(s, Utc::now()))
        .transpose()?;
    let store = store(cli)?;
    if let Some(j) = &a.job
        && store.job(j)?.is_none()
    {
        return Err(bad_input(format!("no job named '{j}' in the store")));
    }
    let rows = store.history(&HistoryQuery {
        job: a.job.clone(),
        status,
        since,
        run_id: None,
        with_diff: false,
        // One row past the page says whether there is a next page.
        limit: usize::try_from(a.offset + a.limit + 1).unwrap_or(usize::MAX),
    })?;
    let more = rows.len() as u64 > a.offset + a.limit;
    let rows: Vec<_> = rows
        .into_iter()
        .skip(usize::try_from(a.offset).unwrap_or(usize::MAX))
        .take(usize::try_from(a.limit).unwrap_or(usize::MAX))
        .collect();
    if a.json {
        for r in &rows {
            println!("{}", serde_json::to_string(r)?);
        }
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() {
        if a.offset > 0 {
            println!("(no history rows match past --offset {})", a.offset);
        } else {
            println!("(no history rows match)");
        }
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<20} {:<24} {:<10} {:<20} {:<9} {:>8} {:<36} REASON",
        "FINISHED", "JOB", "STATUS", "SLOT", "TRIGGER", "MS", "RUN_ID"
    );
    for r in &rows {
        let mut reason = r.reason.clone().or(r.error.clone()).unwrap_or_default();
        if let Some(n) = r.slots_count {
            reason = format!("[{n} slots] {reason}");
        }
        if r.stale_lease {
            reason = format!("[stale lease] {reason}");
        }
        let reason: String = reason.chars().take(100).collect();
        let reason = cronsole::text::visible_line(&reason);
        println!(
            "{:<20} {:<24} {:<10} {:<20} {:<9} {:>8} {:<36} {}",
            ts(Some(r.finished_at)),
            r.job,
            r.status.as_str(),
            ts(r.slot),
            r.trigger.as_str(),
            r.duration_ms,
            r.run_id,
            reason
        );
    }
    if more {
        println!(
            "(more rows: next page with --offset {})",
            a.offset + a.limit
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn stats(cli: &Cli, json: bool) -> Result<ExitCode> {
    let store = store(cli)?;
    let s = stats::compute(&store.jobs()?, &store.settings()?, Utc::now());
    if json {
        println!("{}", serde_json::to_string_pretty(&s)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("period {}", s.period);
    println!(
        "{:<24} {:>6} {:>6} {:>6} {:>7} {:>10} {:>10} {:>10} {:>9}",
        "JOB", "EXEC", "OK", "FAIL", "RATE%", "TOTAL$", "PERIOD$", "LEFT$", "RUNTIME"
    );
    let line = |l: &StatsLine| {
        println!(
            "{:<24} {:>6} {:>6} {:>6} {:>7.2} {:>10.4} {:>10.4} {:>10} {:>8.1}s{}",
            l.job,
            l.total_executions,
            l.successful_executions,
            l.failed_executions,
            l.success_rate,
            l.total_cost_usd,
            l.period_cost_usd,
            l.remaining_budget
                .map_or("-".to_string(), |r| format!("{r:.4}")),
            l.runtime_seconds,
            if l.cost_incomplete {
                " (spend incomplete)"
            } else {
                ""
            }
        )
    };
    for l in &s.jobs {
        line(l);
    }
    line(&s.global);
    Ok(ExitCode::SUCCESS)
}

//! `describe NAME`: everything about one job on one screen (or as one JSON object): its
//! definition, state, next slots and queue, runs, spend and forecast, and its last runs.
//!
//! Owns: the `describe` layout. Must not touch: store internals (it speaks only the trait).
//! The state words, notes and time zone are the `jobs` table's own, so the two never disagree.

use std::process::ExitCode;

use crate::cli::args::{Cli, DescribeArgs};
use crate::cost::usd;
use crate::model::JobRecord;
use crate::store::{HistoryQuery, stats};
use crate::when::{self, Zone};
use anyhow::Result;
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::store_cmds::{note_text, one_line, state_text, zone};
use super::{bad_input, jobs_file, store_location};

/// How many upcoming slots and past runs `describe` shows.
const DESCRIBE_SLOTS: usize = 5;
const DESCRIBE_RUNS: usize = 10;

pub fn describe(cli: &Cli, a: &DescribeArgs) -> Result<ExitCode> {
    // One job's record, its history and settings; of the other jobs only those that spent,
    // and only when the job spends under a global limit (the forecast shares it with them).
    let jobs = jobs_file(cli);
    let store = super::open_existing_store_for_named(&store_location(cli, jobs.as_deref()), false)?;
    let now = Utc::now();
    let Some(rec) = store.job(&a.name)? else {
        return Err(bad_input(format!("no job named '{}' in the store", a.name)));
    };
    let settings = store.settings()?;
    let sched = crate::store::rules::slots::compile(&rec).ok();
    let words = sched
        .as_ref()
        .map_or_else(|| rec.def.schedule_text.clone(), |c| c.describe());
    let next = next_slots(&rec, sched.as_ref());
    let runs = store.history(&HistoryQuery {
        job: Some(a.name.clone()),
        limit: DESCRIBE_RUNS,
        ..Default::default()
    })?;
    let period = stats::period_spend(&rec, &settings, now);
    let tools = super::tools::pinned_tools(store.as_ref(), &settings, &rec.def)?;
    if a.json {
        #[derive(Serialize)]
        struct Describe<'a> {
            name: &'a str,
            state: &'static str,
            schedule_words: &'a str,
            /// An `every` grid counted from when the job was first stored, or on the clock.
            placement: Option<String>,
            next_slots: &'a [DateTime<Utc>],
            /// When the first of them fires (`jobs --json` has the same): the slot plus the
            /// job's jitter, none for a `run_immediately` run.
            next_fire_at: Option<DateTime<Utc>>,
            /// Every execution, as `runs:` in the text and `runs` in `jobs --json` count them
            /// (`runtime.runs` is what `max_runs` counts).
            runs: u64,
            period_cost_usd: f64,
            definition: &'a crate::model::JobDef,
            runtime: &'a crate::model::JobRuntime,
            last_runs: &'a [crate::model::HistoryRow],
            #[serde(skip_serializing_if = "Option::is_none")]
            tools: Option<&'a super::tools::PinnedTools>,
        }
        let d = Describe {
            name: &rec.def.name,
            state: state_text(&rec, now),
            schedule_words: &words,
            placement: crate::schedule::placement(&rec.def.schedule),
            next_slots: &next,
            next_fire_at: next.first().map(|t| rec.fire_at(*t)),
            runs: rec.rt.counters.executions(),
            period_cost_usd: period,
            definition: &rec.def,
            runtime: &rec.rt,
            last_runs: &runs,
            tools: tools.as_ref(),
        };
        println!("{}", crate::text::to_json_pretty(&d)?);
        return Ok(ExitCode::SUCCESS);
    }
    let zone = zone(a.utc);
    describe_definition(&rec, &words, zone, now, tools.as_ref());
    describe_slots(&rec, &next, zone, now);
    // The forecast over every job that spends, as `stats` makes it: the global limit is
    // shared, so this job's line is the one `stats` prints for it. Without a global limit, or
    // for a job that never spent (it projects nothing), the other jobs change nothing in it,
    // and the store is not read beyond this job (a point read at a million jobs).
    let shared = settings.budget.is_some() && crate::store::spent_or_holds(&rec.rt.counters);
    let f = if shared {
        crate::forecast::compute(&store.spenders()?, &settings, now)
    } else {
        crate::forecast::compute(std::slice::from_ref(&rec), &settings, now)
    };
    describe_counters(&rec, &f, period, zone);
    let prices = crate::cost::PriceTable::from_settings(&settings);
    if let Some(why) = crate::preflight::too_small_by_definition(&rec.def, &settings, &prices) {
        kv(
            "budget:",
            format!("{why}: no model call is made until the limit or max_tokens changes"),
        );
    }
    describe_runs(&runs, zone);
    Ok(ExitCode::SUCCESS)
}

/// `describe`'s `key: value` line.
fn kv(k: &str, v: String) {
    println!("{k:<12} {v}");
}

/// The next slots `describe` shows (none for a job that does not fire).
fn next_slots(rec: &JobRecord, sched: Option<&crate::schedule::Compiled>) -> Vec<DateTime<Utc>> {
    let firing = rec.fires();
    let mut next = Vec::new();
    if let (true, Some(c), Some(mut t)) = (firing, sched, rec.rt.next_slot) {
        while next.len() < DESCRIBE_SLOTS.min(rec.runs_left()) {
            if rec.def.until.is_some_and(|u| t > u) {
                break;
            }
            next.push(t);
            match c.next_after(t) {
                Some(n) => t = n,
                None => break,
            }
        }
    }
    next
}

/// What the job is: name, state, schedule, action, gate, limits, sinks, tags, chains.
fn describe_definition(
    rec: &JobRecord,
    words: &str,
    zone: Zone,
    now: DateTime<Utc>,
    tools: Option<&super::tools::PinnedTools>,
) {
    let d = &rec.def;
    kv("name:", d.name.clone());
    // The note only when there is one: "idle", not "idle — -".
    let state = state_text(rec, now);
    kv(
        "state:",
        match note_text(rec, zone, now) {
            n if n == "-" => state.to_string(),
            n => format!("{state} — {n}"),
        },
    );
    kv(
        "schedule:",
        format!("{} ({words}), zone {}", one_line(&d.schedule_text), d.tz),
    );
    if let Some(p) = crate::schedule::placement(&d.schedule) {
        let grid = match d.schedule {
            crate::schedule::ScheduleSpec::Every { .. } => format!(
                "; this grid is anchored at {}, when the job was first stored",
                when::stamp(rec.rt.anchor, zone)
            ),
            _ => String::new(),
        };
        kv("", format!("{p}{grid}"));
    }
    match &d.action {
        crate::model::Action::Agent { agent, message, .. } => kv(
            "action:",
            format!(
                "agent {agent}: {}",
                one_line(&crate::model::truncate_marked(message, 200))
            ),
        ),
        crate::model::Action::Command {
            command,
            timeout_seconds,
        } => kv(
            "action:",
            format!(
                "command `{}` (timeout {timeout_seconds}s)",
                one_line(command)
            ),
        ),
    }
    if let Some(t) = tools {
        super::tools::print_pinned(t);
    }
    match &d.gate {
        Some(crate::model::Gate::PreRun { command }) => {
            kv("gate:", format!("pre_run `{}`", one_line(command)))
        }
        Some(crate::model::Gate::Monitor { source }) => kv(
            "gate:",
            match source {
                crate::model::MonitorSource::Command { command } => {
                    format!("monitor command `{}`", one_line(command))
                }
                crate::model::MonitorSource::Url { url, .. } => {
                    format!("monitor url {}", one_line(url))
                }
            },
        ),
        None => {}
    }
    let mut limits = vec![
        format!("max_retries {}", d.max_retries),
        format!("lease {}s", d.lease_seconds),
    ];
    if let Some(m) = d.max_runs {
        limits.push(format!("max_runs {}/{m}", rec.rt.runs));
    }
    if let Some(u) = d.until {
        limits.push(format!("until {}", when::stamp(u, zone)));
    }
    if let Some(g) = d.misfire_grace_seconds {
        limits.push(format!("misfire grace {g}s"));
    }
    kv("limits:", limits.join(", "));
    if !d.deliver.is_empty() {
        kv("deliver:", d.deliver.join(", "));
    }
    if !d.tags.is_empty() {
        // Tags from an older store may hold control characters (validate refuses them now).
        kv(
            "tags:",
            crate::text::visible_line(&d.tags.join(", ")).into_owned(),
        );
    }
    if !d.after.is_empty() {
        kv(
            "after:",
            d.after
                .iter()
                .map(|a| {
                    let pending = rec.rt.chain_pending.get(&a.job).map_or(String::new(), |p| {
                        format!(" [pending: run {} {}]", p.run_id, p.status)
                    });
                    format!("{} on {}{pending}", a.job, a.on.as_str())
                })
                .collect::<Vec<_>>()
                .join(", "),
        );
    }
}

/// When it fires next, and what is queued.
fn describe_slots(rec: &JobRecord, next: &[DateTime<Utc>], zone: Zone, now: DateTime<Utc>) {
    if next.is_empty() {
        kv("next:", "n/a".to_string());
    }
    // When each slot fires (the slot plus the job's jitter, as `jobs` and the console show);
    // a jittered slot is named beside it, so a slot inside its own jitter is not "due".
    for (i, t) in next.iter().enumerate() {
        let fire = rec.fire_at(*t);
        let slot = if fire == *t {
            String::new()
        } else {
            format!(", slot {}", when::slot_stamp(*t, zone))
        };
        kv(
            if i == 0 { "next:" } else { "" },
            format!(
                "{} ({}{slot})",
                when::slot_stamp(fire, zone),
                when::left(fire, now)
            ),
        );
    }
    if let Some(r) = &rec.rt.rederived {
        kv("re-derived:", super::rederived_words(r, now));
    }
    for q in &rec.rt.queue {
        kv(
            "queued:",
            format!(
                "{} for slot {}{}",
                q.trigger.as_str(),
                q.slot
                    .map_or("-".to_string(), |s| when::slot_stamp(s, zone)),
                q.retry_of
                    .map_or(String::new(), |r| format!(" (retry of run {r})"))
            ),
        );
    }
    if let Some(t) = rec.rt.trigger_requested_at {
        kv(
            "queued:",
            format!("manual trigger requested {}", when::passed(t, now)),
        );
    }
}

/// `describe`'s run count and the history rows behind it, per status (`3 (4 history rows: 3
/// succeeded, 1 skipped)`); a job with no rows yet says so rather than listing nothing.
fn runs_line(c: &crate::model::JobCounters) -> String {
    let rows: u64 = c.by_status.values().sum();
    if rows == 0 {
        return "0 (no history rows yet)".to_string();
    }
    let per_status = c
        .by_status
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(s, n)| format!("{n} {s}"))
        .collect::<Vec<_>>()
        .join(", ");
    let word = if rows == 1 { "row" } else { "rows" };
    format!("{} ({rows} history {word}: {per_status})", c.executions())
}

/// Its runs, its spend and its forecast.
fn describe_counters(rec: &JobRecord, f: &crate::forecast::Forecast, period: f64, zone: Zone) {
    let d = &rec.def;
    let c = &rec.rt.counters;
    let line = f.jobs.iter().find(|j| j.job == d.name);
    kv("runs:", runs_line(c));
    kv(
        "spend:",
        format!(
            "{} this period{}, {} in total{}",
            usd(period),
            d.max_cost_usd
                .map_or(String::new(), |l| format!(" (limit {})", usd(l))),
            usd(c.total_cost_usd),
            if c.cost_incomplete {
                " (incomplete: unpriced model or missing usage)"
            } else {
                ""
            }
        ),
    );
    match line {
        Some(j) => kv(
            "forecast:",
            format!(
                "{} more by {} ({})",
                usd(j.projected_usd),
                when::stamp(f.until, zone),
                j.breakdown(usd)
            ),
        ),
        None => kv(
            "forecast:",
            format!(
                "{} more this period (no slots left, or no recent cost per run)",
                usd(0.0)
            ),
        ),
    }
}

/// Its last runs, newest first.
fn describe_runs(runs: &[crate::model::HistoryRow], zone: Zone) {
    if runs.is_empty() {
        kv("last runs:", "none yet".to_string());
        return;
    }
    println!("last runs:");
    for r in runs {
        let mut why = r
            .reason
            .as_deref()
            .or(r.error.as_deref())
            .unwrap_or("")
            .to_string();
        if let (Some(j), Some(id)) = (&r.parent_job, r.parent_run_id) {
            let sep = if why.is_empty() { "" } else { "; " };
            why = format!("after {j} run {id}{sep}{why}");
        }
        // First, so that the cut below never hides who recovered the run.
        if let Some(by) = &r.recovered_by {
            let sep = if why.is_empty() { "" } else { "; " };
            why = format!("recovered by {by}{sep}{why}");
        }
        let why = why.as_str();
        println!(
            "  {}  {:<10} {:<9} {}  {}",
            when::stamp(r.finished_at, zone),
            r.status.as_str(),
            r.trigger.as_str(),
            r.run_id,
            one_line(&crate::model::truncate_marked(why, 80)).trim_end()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::runs_line;
    use crate::model::{JobCounters, Status};

    #[test]
    fn a_job_without_rows_says_so_and_a_count_lists_only_its_statuses() {
        let mut c = JobCounters::default();
        assert_eq!(runs_line(&c), "0 (no history rows yet)");
        c.by_status.insert(Status::Skipped, 1);
        assert_eq!(runs_line(&c), "0 (1 history row: 1 skipped)");
        c.by_status.insert(Status::Succeeded, 3);
        c.by_status.insert(Status::Failed, 0);
        assert_eq!(runs_line(&c), "3 (4 history rows: 3 succeeded, 1 skipped)");
    }
}

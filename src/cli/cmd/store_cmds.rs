//! `apply`, `jobs`, `history`, `retry`, `cancel`, `backfill` (`stats` and `describe` have
//! modules of their own; `pause`, `resume`, `trigger` are in `select`, which resolves their
//! bulk selectors): thin glue
//! between clap arguments and the [`Store`] trait; formatting only.
//!
//! Owns: printing and exit codes of the store commands. Must not touch: store internals (it
//! speaks only the trait), scheduling decisions.
//!
//! Decisions: `trigger` on a job that is running prints that it is running, changes nothing and
//! exits 1 (a runtime condition, not bad input); a trigger already queued exits 0 and says so;
//! an unknown job name exits 2. `history --since` takes every form of `when::parse_time`
//! (wall times and dates in this machine's zone); `--status` is case-insensitive; text rows carry
//! the run id (what `diff --run` takes) and an empty answer says so; pages are keyset pages:
//! text output ends with the next page's `--page TOKEN` when there are more rows (`--json`
//! prints it on stderr), cheap at any depth; `--offset` stays, linear in the rows it skips
//! where the store cannot skip by counts.
//! Opening a store directory that does not exist yet creates an empty store (so `jobs` on a
//! fresh checkout prints an empty table rather than failing).
//!
//! Tables (`jobs`, `history`, `stats`) go through one `table` helper: plain columns as wide as
//! their widest cell, two spaces apart, no borders, the last column unpadded. Why not
//! `comfy-table` or `tabled` (both evaluated): the output is a scripting surface
//! (`awk '{print $1}'`, `grep`, `cut`) that must not change shape with the terminal, and both
//! crates are built for boxed, width-fitted tables — borders, wrapping or truncation to the
//! terminal width, per-cell styling — that we would switch off one by one to get back the
//! ~30 lines here; their display-width measuring matters only for wide characters, which no
//! padded column holds (job names are `A-Z a-z 0-9 . _ -`, times RFC 3339, numbers; free text
//! such as a history row's reason or a job's note is the unpadded last column).

use crate::store::{BackendError, OperationError};
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use crate::cli::args::{BackfillArgs, CancelArgs, Cli, HistoryArgs, JobsArgs, RetryArgs};
use crate::config::Handover;
use crate::cost::usd;
use crate::listing::JobView;
use crate::model::{JobRecord, Status};
use crate::store::{HistoryQuery, JobEdit, Store, StoreError};
use crate::when::{self, Zone};
use anyhow::Result;
use chrono::{DateTime, SecondsFormat, Utc};

use super::{
    apply_counts, bad_input, for_each_apply_line, inert, jobs_file, open_existing_store,
    open_store, store_location,
};

pub(super) fn store(cli: &Cli) -> Result<std::sync::Arc<dyn Store>> {
    let jobs = jobs_file(cli);
    open_existing_store(&store_location(cli, jobs.as_deref()))
}

/// The store for a command that writes one job (`retry`, `cancel`, `backfill`): it reads and
/// writes that job's record only.
fn store_to_write(cli: &Cli) -> Result<std::sync::Arc<dyn Store>> {
    let jobs = jobs_file(cli);
    super::open_existing_store_for_named(&store_location(cli, jobs.as_deref()), true)
}

fn ts(t: Option<DateTime<Utc>>) -> String {
    t.map_or("-".to_string(), |t| {
        t.to_rfc3339_opts(SecondsFormat::Secs, true)
    })
}

/// `apply FILE`: the file is validated first (nothing is opened or created when it has
/// errors), then its jobs are handed to the store one at a time ([`Store::apply_each`]), so
/// neither the YAML tree nor every definition is held at once (a file of 1 000 000 jobs).
pub fn apply(cli: &Cli, file: &Path) -> Result<ExitCode> {
    let mut prepared = crate::config::prepare_file(file)?;
    for w in std::mem::take(&mut prepared.warnings) {
        eprintln!("{}", inert(&w));
    }
    let store = open_store(&store_location(cli, Some(file)))?;
    let settings = prepared.settings().clone();
    let mut once = Some(prepared);
    let rep = store.apply_each(
        &settings,
        &mut |sink| {
            let prepared = once.take().ok_or_else(|| {
                StoreError::Backend(BackendError::Invariant(
                    "the jobs file was already handed over",
                ))
            })?;
            prepared.for_each_job(sink).map_err(|h| match h {
                Handover::Refused(e) => e,
                Handover::Changed(c) => StoreError::Operation(OperationError::JobsFile(c)),
            })
        },
        super::storing_now(store.as_ref()),
    )?;
    // Buffered, a line at a time: one line per job (a store may hold 1 000 000).
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut written = Ok(());
    for_each_apply_line(&rep, false, &mut |line| {
        if written.is_ok() {
            written = writeln!(out, "{line}");
        }
    });
    written?;
    writeln!(out, "{} ({})", apply_counts(&rep, false), store.location())?;
    if let Some(note) = super::retired_note(&rep, file) {
        writeln!(out, "{note}")?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// The word shown in STATE: the listing's, so `jobs`, `describe` and `jobs --json` agree.
pub(super) fn state_text(r: &JobRecord, now: DateTime<Utc>) -> &'static str {
    crate::listing::state(r, now)
}

/// The NOTE column: lease, `max_runs` progress (`n/max`), queue, pause reason, retirement.
pub(super) fn note_text(r: &JobRecord, zone: Zone, now: DateTime<Utc>) -> String {
    let mut parts = Vec::new();
    if let Some(l) = &r.rt.lease {
        parts.push(format!(
            "{} run by {} (lease {})",
            l.trigger.as_str(),
            l.owner,
            when::left(l.lease_until, now)
        ));
    }
    let more = r.rt.overlap.leases.len();
    if more > 0 {
        parts.push(format!("{} runs live (overlap: allow)", more + 1));
    }
    if let Some(b) = crate::store::policy::overlap::kept_slot(r, now) {
        parts.push(format!("slot {} kept to run next", when::stamp(b, zone)));
    }
    if let Some(m) = r.def.max_runs.filter(|_| !r.rt.retired) {
        parts.push(format!("max_runs {}/{m}", r.rt.runs));
    }
    let queued = r.rt.queue.len() + usize::from(r.rt.trigger_requested_at.is_some());
    if queued > 0 {
        parts.push(format!("{queued} queued"));
    }
    if r.rt.paused || !r.def.enabled {
        match &r.rt.pause_reason {
            Some(why) => parts.push(format!("paused: {}", one_line(why))),
            None if !r.def.enabled => parts.push("disabled in the jobs file".to_string()),
            // STATE says what happens next (a queued or running run): the pause that holds
            // every scheduled slot after it is said here, never hidden until the run is done.
            None if state_text(r, now) != "paused" => parts.push("paused".to_string()),
            None => {}
        }
    }
    if r.rt.retired {
        parts.push(format!(
            "retired: {}",
            one_line(r.rt.retired_reason.as_deref().unwrap_or("-"))
        ));
    }
    if let Some(h) = r.rt.hold_until.filter(|h| *h > now) {
        parts.push(format!("held until {}", when::stamp(h, zone)));
    }
    if parts.is_empty() {
        "-".to_string()
    } else {
        parts.join("; ")
    }
}

/// The NOTE column with the money its budget holds for calls in flight (or of unknown
/// outcome) this period: SPEND is what was spent; the budget also counts this.
fn with_in_flight(note: String, held: f64) -> String {
    if !(held.is_finite() && held > 0.0) {
        return note;
    }
    let held = format!("{} held by calls in flight", usd(held));
    if note == "-" {
        held
    } else {
        format!("{note}; {held}")
    }
}

/// Control characters become spaces: one line per job, whatever an operator typed.
/// Outside text (reasons, errors) on one inert line: the one policy of `cronsole::text`.
pub(super) fn one_line(s: &str) -> String {
    crate::text::line(s).into_owned()
}

/// NEXT and LEFT: when the next slot fires (`JobRecord::next_fire_at`, as the console shows),
/// at the slot's own precision: a slot on a whole second prints to the second as every other
/// instant of the table (a jitter offset's milliseconds are not shown), an `at:` instant's
/// fraction is kept; `n/a` for paused and retired jobs (nothing will fire), as list-timers does.
fn next_cols(r: &JobRecord, zone: Zone, now: DateTime<Utc>) -> (String, String) {
    use chrono::Timelike;
    let whole = r.rt.next_slot.is_some_and(|s| s.nanosecond() == 0);
    match r.next_fire_at() {
        Some(n) if r.fires() && whole => (when::stamp(n, zone), when::left(n, now)),
        Some(n) if r.fires() => (when::slot_stamp(n, zone), when::left(n, now)),
        _ => ("n/a".to_string(), "n/a".to_string()),
    }
}

fn last_cols(r: &JobRecord, zone: Zone, now: DateTime<Utc>) -> (String, String) {
    match r.rt.last_run_at {
        Some(t) => (when::stamp(t, zone), when::passed(t, now)),
        None => ("n/a".to_string(), "n/a".to_string()),
    }
}

pub(super) fn zone(utc: bool) -> Zone {
    Zone::pick(utc, std::env::var("TZ").ok().as_deref())
}

pub fn jobs(cli: &Cli, a: &JobsArgs) -> Result<ExitCode> {
    let store = store(cli)?;
    let now = Utc::now();
    let settings = store.settings()?;
    if a.json {
        // Streamed: one page of jobs in memory at a time, however many jobs the store holds.
        let out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
        return match crate::listing::write_jobs_json(&*store, &settings, now, out) {
            Ok(_) => Ok(ExitCode::SUCCESS),
            // The store's error itself, so its exit code is its kind's.
            Err(crate::listing::ListingError::Store(e)) => Err(e.into()),
            Err(e) => Err(e.into()),
        };
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let printed = print_jobs_table(&*store, &settings, zone(a.utc), now, &mut out)?;
    out.flush()?;
    drop(out);
    if !printed {
        println!(
            "(no jobs in {}; run `cronsole apply FILE`)",
            store.location()
        );
        return Ok(ExitCode::SUCCESS);
    }
    // Who runs these jobs: the engines heartbeating on the store, their clocks, and any that
    // stopped claiming (a store whose owner records cannot be read says so, and the table stands).
    println!();
    match crate::engine::JudgeAt::owners_now(store.as_ref()) {
        Ok(owners) => super::owners_view::lines(&owners)
            .iter()
            .for_each(|l| println!("{l}")),
        Err(e) => println!("owners: not read ({e})"),
    }
    Ok(ExitCode::SUCCESS)
}

/// How many jobs `jobs` reads at a time: the table is printed in two passes over the store, a
/// page at a time (the first finds the columns' widths, the second
/// prints), so it holds one page of records and a few numbers per job, never the whole table.
const JOBS_PAGE: usize = 1024;

const JOBS_HEADER: [&str; 11] = [
    "NAME", "STATE", "NEXT", "LEFT", "LAST", "PASSED", "STATUS", "RUNS", "SPEND", "SCHEDULE",
    "NOTE",
];

/// `jobs`' cells for one job.
fn job_cells(
    r: &JobRecord,
    v: &JobView<'_>,
    zone: Zone,
    now: DateTime<Utc>,
    budgets: (&crate::model::Settings, &crate::cost::PriceTable),
) -> [String; 11] {
    let (next, left) = next_cols(r, zone, now);
    let (last, passed) = last_cols(r, zone, now);
    [
        v.name.to_string(),
        state_text(r, now).to_string(),
        next,
        left,
        last,
        passed,
        v.last_status.map_or("-", |s| s.as_str()).to_string(),
        v.runs.to_string(),
        spend_cell(v),
        one_line(v.schedule),
        with_in_flight(
            crate::preflight::with_too_small(note_text(r, zone, now), r, budgets.0, budgets.1),
            v.in_flight_usd,
        ),
    ]
}

fn spend_cell(v: &JobView<'_>) -> String {
    match v.max_cost_usd {
        Some(m) => format!("{}/{}", usd(v.period_cost_usd), usd(m)),
        None => usd(v.period_cost_usd),
    }
}

/// Each page of jobs in name order, its records with their views, until `each` has seen them all.
fn each_jobs_page(
    store: &dyn Store,
    settings: &crate::model::Settings,
    now: DateTime<Utc>,
    mut each: impl FnMut(&[JobRecord], &[JobView<'_>]),
) -> Result<()> {
    let mut after: Option<String> = None;
    loop {
        let page = store.jobs_page(after.as_deref(), JOBS_PAGE)?;
        let views: Vec<JobView> = page.iter().map(|r| JobView::of(r, settings, now)).collect();
        each(&page, &views);
        match page.last() {
            Some(r) if page.len() == JOBS_PAGE => after = Some(r.def.name.clone()),
            _ => return Ok(()),
        }
    }
}

/// Print `jobs`' table (see [`JOBS_PAGE`]); `false` when the store holds no job. A job changed
/// between the two passes is printed as the second one reads it (its cells may be wider than
/// the column: the line is then not aligned, nothing is cut).
fn print_jobs_table(
    store: &dyn Store,
    settings: &crate::model::Settings,
    zone: Zone,
    now: DateTime<Utc>,
    out: &mut dyn Write,
) -> Result<bool> {
    let mut cols = Columns::new(&JOBS_HEADER, &[7]);
    let prices = crate::cost::PriceTable::from_settings(settings);
    let mut any = false;
    each_jobs_page(store, settings, now, |page, views| {
        for (r, v) in page.iter().zip(views) {
            cols.fit(&job_cells(r, v, zone, now, (settings, &prices)));
            any = true;
        }
    })?;
    if !any {
        return Ok(false);
    }
    let mut failed = None;
    let mut put = |line: String| {
        if failed.is_none()
            && let Err(e) = writeln!(out, "{line}")
        {
            failed = Some(e);
        }
    };
    put(cols.line(&mut JOBS_HEADER.iter().copied()));
    each_jobs_page(store, settings, now, |page, views| {
        for (r, v) in page.iter().zip(views) {
            let cells = job_cells(r, v, zone, now, (settings, &prices));
            put(cols.line(&mut cells.iter().map(String::as_str)));
        }
    })?;
    match failed {
        Some(e) => Err(e.into()),
        None => Ok(true),
    }
}

/// The columns of a plain-text table (see [`table`]): each as wide as its widest cell fitted.
pub(super) struct Columns {
    widths: Vec<usize>,
    right: Vec<usize>,
}

impl Columns {
    pub(super) fn new(header: &[&str], right: &[usize]) -> Columns {
        Columns {
            widths: header.iter().map(|h| h.chars().count()).collect(),
            right: right.to_vec(),
        }
    }

    /// Widen the columns to a row's cells.
    pub(super) fn fit(&mut self, cells: &[String]) {
        for (i, c) in cells.iter().enumerate() {
            self.fit_cell(i, c);
        }
    }

    fn fit_cell(&mut self, i: usize, cell: &str) {
        if let Some(w) = self.widths.get_mut(i) {
            *w = (*w).max(cell.chars().count());
        }
    }

    /// One line: cells padded to their columns, two spaces between, the last unpadded, no
    /// trailing blanks.
    pub(super) fn line(&self, cells: &mut dyn Iterator<Item = &str>) -> String {
        let cells: Vec<&str> = cells.collect();
        let last = cells.len().saturating_sub(1);
        let padded: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let w = self.widths.get(i).copied().unwrap_or(0);
                if i == last {
                    c.to_string()
                } else if self.right.contains(&i) {
                    format!("{c:>w$}")
                } else {
                    format!("{c:<w$}")
                }
            })
            .collect();
        padded.join("  ").trim_end().to_string()
    }
}

/// The plain-text tables of `jobs`, `history` and `stats`: each column as wide as its widest
/// cell, two spaces between columns, the columns numbered in `right` right-aligned, the last
/// column unpadded and no trailing blanks (so `awk`/`cut` and `grep` work on every line).
/// Widths count characters: the cells are ASCII but for the last column (names are
/// `A-Z a-z 0-9 . _ -`, times RFC 3339, numbers), whose width does not matter.
pub(super) fn table<R: AsRef<[String]>>(
    header: &[&str],
    rows: &[R],
    right: &[usize],
) -> Vec<String> {
    let mut cols = Columns::new(header, right);
    for r in rows {
        cols.fit(r.as_ref());
    }
    let mut out = vec![cols.line(&mut header.iter().copied())];
    out.extend(
        rows.iter()
            .map(|r| cols.line(&mut r.as_ref().iter().map(String::as_str))),
    );
    out
}

/// `--since`: any time [`when::parse_time`] reads, wall times and dates in this machine's zone
/// (as `journalctl` reads them).
fn parse_since(s: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>> {
    when::parse_time(s, now, &chrono::Local, "this machine's zone")
        .map_err(|e| bad_input(format!("--since: {e}")))
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
    let page = store.history_page(&HistoryQuery {
        job: a.job.clone(),
        status,
        since,
        run_id: None,
        with_diff: false,
        limit: usize::try_from(a.limit).unwrap_or(usize::MAX),
        offset: usize::try_from(a.offset).unwrap_or(usize::MAX),
        before: a.page.clone(),
    })?;
    let rows = page.rows;
    if a.json {
        for r in &rows {
            println!("{}", crate::text::to_json(r)?);
        }
        // stdout stays one row per line; the next page's token goes to stderr.
        if let Some(t) = &page.next {
            eprintln!("next page: --page {t}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() {
        if a.page.is_some() {
            println!("(no more history rows match)");
        } else if a.offset > 0 {
            println!("(no history rows match past --offset {})", a.offset);
        } else {
            println!("(no history rows match)");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut cells = Vec::with_capacity(rows.len());
    for r in &rows {
        let mut reason = row_text(r);
        if let Some(n) = r.slots_count {
            reason = format!("[{n} slots] {reason}");
        }
        // An agent run with tools: how far its loop went (the transcript is in --json).
        if let Some(t) = r.turns {
            reason = format!("turns={t} tools={} {reason}", r.tool_calls.unwrap_or(0));
        }
        if r.stale_lease {
            reason = format!("[stale lease] {reason}");
        }
        if let Some(step) = &r.clock_stepped {
            reason = format!("[clock stepped {step}] {reason}");
        }
        if let (Some(j), Some(id)) = (&r.parent_job, r.parent_run_id) {
            reason = format!("[after {j} run {id}] {reason}");
        }
        let reason: String = reason.chars().take(160).collect();
        let reason = crate::text::visible_line(&reason);
        cells.push(vec![
            ts(Some(r.finished_at)),
            r.job.clone(),
            r.status.as_str().to_string(),
            ts(r.slot),
            r.trigger.as_str().to_string(),
            r.duration_ms.to_string(),
            row_cost(r),
            r.run_id.to_string(),
            reason.into_owned(),
        ]);
    }
    let header = [
        "FINISHED", "JOB", "STATUS", "SLOT", "TRIGGER", "MS", "COST", "RUN_ID", "TEXT",
    ];
    for line in table(&header, &cells, &[5, 6]) {
        println!("{line}");
    }
    if let Some(t) = &page.next {
        println!("(more rows: next page with --page {t})");
    }
    Ok(ExitCode::SUCCESS)
}

/// The TEXT of a `history` row: the reason (why it skipped, missed, failed), then the first line
/// of the error, or of the result when there is no error — what the run said, in one line.
fn row_text(r: &crate::model::HistoryRow) -> String {
    let first = |s: &str| {
        s.lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("")
            .to_string()
    };
    let said = match (&r.error, &r.result) {
        (Some(e), _) => first(e),
        (None, Some(res)) => first(res),
        (None, None) => String::new(),
    };
    match r.reason.as_deref() {
        Some(why) if !said.is_empty() && !why.contains(&said) => format!("{why}; {said}"),
        Some(why) => why.to_string(),
        None => said,
    }
}

/// The COST of a `history` row: what it cost, `-` for a row that called no model.
fn row_cost(r: &crate::model::HistoryRow) -> String {
    if r.cost_usd > 0.0 || r.model.is_some() {
        usd(r.cost_usd)
    } else {
        "-".to_string()
    }
}

pub fn retry(cli: &Cli, a: &RetryArgs) -> Result<ExitCode> {
    let run_id = uuid::Uuid::parse_str(a.run_id.trim()).map_err(|e| {
        bad_input(format!(
            "'{}' is not a run id ({e}); `cronsole history --json` prints them",
            a.run_id
        ))
    })?;
    let store = store_to_write(cli)?;
    let now = super::on_the_stores_clock(store.as_ref(), "the retry is dated");
    let (job, out) = store.retry(run_id, now)?;
    let waiting = super::select::waiting_note(store.as_ref());
    println!(
        "{}",
        crate::engine::operator_notice_waiting(&job, &out, waiting.as_deref())
    );
    Ok(ExitCode::SUCCESS)
}

pub fn cancel(cli: &Cli, a: &CancelArgs) -> Result<ExitCode> {
    let store = store_to_write(cli)?;
    let at = crate::engine::JudgeAt::store(store.as_ref());
    let said = crate::engine::cancel_and_say(store.as_ref(), &a.target, at)?;
    println!("{said}");
    Ok(ExitCode::SUCCESS)
}

pub fn backfill(cli: &Cli, a: &BackfillArgs) -> Result<ExitCode> {
    let store = store_to_write(cli)?;
    let Some(rec) = store.job(&a.name)? else {
        return Err(bad_input(format!("no job named '{}' in the store", a.name)));
    };
    let tz = crate::schedule::parse_tz(&rec.def.tz)
        .map_err(|e| bad_input(format!("job '{}': {e}", a.name)))?;
    let now = Utc::now();
    let zone_name = format!("the job's zone {}", tz.name());
    let at = |flag: &str, s: &str| {
        when::parse_time(s, now, &tz, &zone_name).map_err(|e| bad_input(format!("{flag}: {e}")))
    };
    let (from, to) = (at("--from", &a.from)?, at("--to", &a.to)?);
    let out = store.update_job(&a.name, &JobEdit::Backfill { from, to }, now)?;
    let waiting = super::select::waiting_note(store.as_ref());
    println!(
        "{}",
        crate::engine::operator_notice_waiting(&a.name, &out, waiting.as_deref())
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::{JOBS_PAGE, Utc, Zone, print_jobs_table, table};
    use crate::store::Store;

    #[test]
    fn a_table_pads_to_the_widest_cell_right_aligns_numbers_and_leaves_the_last_column_alone() {
        let rows = vec![
            vec![
                "a-rather-long-job-name".to_string(),
                "7".into(),
                "ok".into(),
            ],
            vec!["b".to_string(), "1234".into(), "a note  ".into()],
        ];
        assert_eq!(
            table(&["JOB", "RUNS", "NOTE"], &rows, &[1]),
            [
                "JOB                     RUNS  NOTE",
                "a-rather-long-job-name     7  ok",
                "b                       1234  a note",
            ]
        );
        // No rows: the header alone, without trailing blanks.
        let none: Vec<Vec<String>> = Vec::new();
        assert_eq!(table(&["JOB", "RUNS", ""], &none, &[1]), ["JOB  RUNS"]);
    }

    /// `jobs` reads the store a page at a time, twice: every column is as wide as its widest
    /// cell in the whole table, a later page's included, and every job is printed once.
    #[test]
    fn the_jobs_table_is_aligned_across_pages() {
        use crate::model::JobsFile;
        let dir = crate::testkit::tmp::TempDir::new("jobs-pages");
        let store = crate::store::file::FileStore::open(&dir).unwrap();
        let n = JOBS_PAGE + 30;
        let mut jobs: Vec<_> = (0..n)
            .map(|i| crate::testkit::jobs::command_job(&format!("j{i:05}"), 60))
            .collect();
        // The longest name sorts last, on the second page.
        jobs.push(crate::testkit::jobs::command_job(
            "zz-the-longest-name-of-all",
            60,
        ));
        let file = JobsFile {
            settings: Default::default(),
            jobs,
        };
        let now = Utc::now();
        store.apply(&file, now).unwrap();
        let mut out = Vec::new();
        let printed = print_jobs_table(&store, &file.settings, Zone::Utc, now, &mut out).unwrap();
        assert!(printed);
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), n + 2, "the header and every job once");
        // The STATE column starts after the longest name and two spaces, on every line.
        let state_col = "zz-the-longest-name-of-all".len() + 2;
        for l in &lines {
            let b = l.as_bytes();
            assert!(
                b.len() > state_col
                    && &b[state_col - 2..state_col] == b"  "
                    && b[state_col] != b' ',
                "{l}"
            );
        }
        assert!(lines[0].starts_with(&format!("{:<w$}STATE", "NAME", w = state_col)));
        assert!(lines[1].starts_with("j00000 "));
        assert!(lines[n + 1].starts_with("zz-the-longest-name-of-all  "));
        let empty = crate::testkit::tmp::TempDir::new("jobs-none");
        let none = crate::store::file::FileStore::open(&empty).unwrap();
        let mut out = Vec::new();
        assert!(!print_jobs_table(&none, &file.settings, Zone::Utc, now, &mut out).unwrap());
        assert!(out.is_empty());
    }
}

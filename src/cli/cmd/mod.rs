//! Command implementations: glue between parsed arguments and the rest of the library.
//! `anyhow` is allowed in `cli` (the binary's edge) and nowhere else in the library.
//!
//! Owns: store selection, exit-code mapping, printing. Must not touch: engine internals.

use crate::store::OpenError;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use crate::cli::args::{Cli, Command};
use crate::store::{ApplyReport, Store, StoreError};
use anyhow::Result;

mod approvals;
mod check;
mod describe;
mod dry_run;
mod eco;
mod edit;
mod gate_cmds;
mod import;
mod manpage;
mod owners_view;
mod run;
mod schedule_cmds;
mod select;
mod stats_cmd;
mod store_cmds;
mod store_wait;
mod tools;
mod validate;

/// One line per job an apply touches, in the one shape `apply` and `edit` print: done
/// (`created   name`, unchanged jobs included) or, `planned`, the plan `edit` shows before it
/// saves (`  create  name`; unchanged jobs left out).
pub fn apply_lines(rep: &ApplyReport, planned: bool) -> Vec<String> {
    let mut out = Vec::new();
    for_each_apply_line(rep, planned, &mut |l| out.push(l));
    out
}

/// [`apply_lines`] handed over one at a time (`apply` of 1 000 000 jobs prints as many lines).
pub fn for_each_apply_line(rep: &ApplyReport, planned: bool, each: &mut dyn FnMut(String)) {
    // (word in a plan — none: not listed —, word once done, names)
    let lists = [
        (Some("create"), "created", &rep.created),
        (Some("update"), "updated", &rep.updated),
        (Some("retire"), "retired", &rep.retired),
        (None, "unchanged", &rep.unchanged),
    ];
    for (plan_word, done_word, names) in lists {
        for n in names {
            match (planned, plan_word) {
                (true, Some(w)) => each(format!("  {w:<7} {n}")),
                (true, None) => {}
                (false, _) => each(format!("{done_word:<9} {n}")),
            }
        }
    }
    if !planned {
        for r in &rep.recounted {
            each(recount_line(r));
        }
    }
}

/// A job whose spend an apply recounted from history because the budget's `period` changed
/// kind: `recounted NAME: $0.02 spent in budget period week:2026-W49 (counted from history)`.
pub fn recount_line(r: &crate::store::Recount) -> String {
    format!(
        "recounted {}: {} spent in budget period {} (counted from history)",
        r.job,
        crate::cost::usd(r.spent_usd),
        r.period
    )
}

/// The note after an apply that retired jobs: which, that they are absent from `file` (applying
/// a file makes the store hold exactly its jobs, so a second jobs file applied to the same
/// store retires the first one's), and how to keep them. `None` when nothing was retired.
pub fn retired_note(rep: &ApplyReport, file: &Path) -> Option<String> {
    const SHOWN: usize = 5;
    let n = rep.retired.len();
    if n == 0 {
        return None;
    }
    let mut names: Vec<String> = rep
        .retired
        .iter()
        .take(SHOWN)
        .map(|j| crate::text::line(j).into_owned())
        .collect();
    if n > SHOWN {
        names.push(format!("{} more", n - SHOWN));
    }
    let (was, it) = if n == 1 {
        ("was", "it is")
    } else {
        ("were", "they are")
    };
    let them = if n == 1 { "it" } else { "them" };
    let file = crate::text::line(&file.display().to_string()).into_owned();
    Some(format!(
        "note: {} {was} retired: {it} not in {file}, and a store keeps only the jobs of the file \
         last applied to it; to keep {them}, add {them} to {file}, or give each jobs file its \
         own store (--store DIR)",
        names.join(", ")
    ))
}

/// The counts of an apply, in the one shape `apply`, `edit`, `run` and its SIGHUP reload print:
/// `N created, N updated, N retired, N unchanged`, or, `planned`, `N to create, …, N unchanged`.
pub fn apply_counts(rep: &ApplyReport, planned: bool) -> String {
    let (c, u, r, n) = (
        rep.created.len(),
        rep.updated.len(),
        rep.retired.len(),
        rep.unchanged.len(),
    );
    let counts = if planned {
        format!("{c} to create, {u} to update, {r} to retire, {n} unchanged")
    } else {
        format!("{c} created, {u} updated, {r} retired, {n} unchanged")
    };
    if rep.settings.is_empty() {
        counts
    } else {
        format!("{counts}; settings updated: {}", rep.settings.join(", "))
    }
}

/// An error caused by what the user gave us: exit code 2.
#[derive(Debug)]
pub struct BadInput(pub String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// `bail!`-like helper for bad input.
pub fn bad_input(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(BadInput(msg.into()))
}

/// The error as the one `error:` line the binary prints: every cause of the chain once.
///
/// The library's typed errors keep their cause as `#[source]` *and* name it in their own
/// message (`I/O error on PATH: Not a directory (os error 20)`), because logs, history rows and
/// the console print only the top error. Printed as a chain (`{:#}`) that showed the OS cause
/// twice; here a cause whose text the message above it already holds is left out, and nothing
/// below a [`StoreError`] is printed: its message already renders its causes (a database error
/// names the driver's whole chain as its detail, which the driver's own errors repeat in other
/// words: "db error: FATAL: …").
pub fn error_line(err: &anyhow::Error) -> String {
    let mut out = String::new();
    let mut above = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if !(text.is_empty() || above.contains(&text)) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
        above = text;
        if let Some(se) = cause.downcast_ref::<StoreError>()
            && !matches!(
                se,
                StoreError::Open(OpenError::BadLocation {
                    source: Some(_),
                    ..
                })
            )
        {
            break;
        }
    }
    out
}

/// Text from a jobs file or a store, as one printed message: a diagnostic (its key path and
/// message quote the file's keys and values, e.g. a model name), an error naming a path, a log
/// line. Through the inert-text policy like every `error:` line (`text::visible`: ESC as `^[`,
/// BEL as `^G`; line breaks and tabs kept), so no escape sequence from the file reaches the
/// terminal.
pub fn inert(d: &impl std::fmt::Display) -> String {
    crate::text::visible(&d.to_string()).into_owned()
}

/// 2 for bad input (ours or a store that says so), 1 for everything else.
pub fn exit_code_for(err: &anyhow::Error) -> u8 {
    for cause in err.chain() {
        if cause.is::<BadInput>() {
            return 2;
        }
        if let Some(se) = cause.downcast_ref::<StoreError>() {
            return se.exit_code();
        }
        if cause.is::<crate::config::ConfigErrors>() {
            return 2;
        }
    }
    1
}

pub fn dispatch(cli: Cli) -> Result<ExitCode> {
    match &cli.command {
        None => run::default_mode(&cli),
        Some(Command::Run(a)) => run::headless(&cli, a),
        Some(Command::Console(a)) => run::console(&cli, a),
        Some(Command::Validate(_)) => validate::validate(&jobs_file_named(&cli)?),
        Some(Command::Next(a)) => schedule_cmds::next(&cli, a),
        Some(Command::Apply(_)) => store_cmds::apply(&cli, &jobs_file_named(&cli)?),
        Some(Command::Jobs(a)) => store_cmds::jobs(&cli, a),
        Some(Command::History(a)) => store_cmds::history(&cli, a),
        Some(Command::Pause(a)) => select::pause(&cli, &a.select, true, a.reason.as_deref()),
        Some(Command::Resume(a)) => select::pause(&cli, a, false, None),
        Some(Command::Trigger(a)) => select::trigger(&cli, a),
        Some(Command::Diff(a)) => gate_cmds::diff(&cli, a),
        Some(Command::Probe(a)) => gate_cmds::probe(a),
        Some(Command::Stats(a)) => stats_cmd::stats(&cli, a.json),
        Some(Command::Completions(a)) => eco::completions(a),
        Some(Command::Man) => eco::man(),
        Some(Command::Init(a)) => eco::init(&a.file),
        Some(Command::Edit) => edit::edit(&cli),
        Some(Command::Logs(a)) => eco::logs(&cli, a),
        Some(Command::Check(a)) => check::check(&cli, a.json),
        Some(Command::Retry(a)) => store_cmds::retry(&cli, a),
        Some(Command::Cancel(a)) => store_cmds::cancel(&cli, a),
        Some(Command::Describe(a)) => describe::describe(&cli, a),
        Some(Command::Backfill(a)) => store_cmds::backfill(&cli, a),
        Some(Command::DryRun(a)) => dry_run::dry_run(&cli, a),
        Some(Command::Tools(a)) => tools::tools(&cli, a),
        Some(Command::Import(a)) => import::import(a),
        Some(Command::Approvals(a)) => approvals::approvals(&cli, a.json),
        Some(Command::Approve(a)) => approvals::answer(&cli, a, true),
        Some(Command::Deny(a)) => approvals::answer(&cli, a, false),
    }
}

/// Whether this invocation starts an engine (or a console) rather than printing a report.
pub fn runs_engine(cli: &Cli) -> bool {
    matches!(
        cli.command,
        None | Some(Command::Run(_)) | Some(Command::Console(_))
    )
}

/// The jobs file named by `--jobs`, or `jobs.yaml` in the current directory if it exists.
pub fn jobs_file(cli: &Cli) -> Option<PathBuf> {
    cli.jobs.clone().or_else(|| {
        let p = PathBuf::from("jobs.yaml");
        p.exists().then_some(p)
    })
}

/// The jobs file a command that needs one reads (`validate`, `apply`): FILE or `--jobs FILE`
/// (folded into `--jobs` at parse time), else `jobs.yaml` here; exit 2 when there is none.
pub fn jobs_file_named(cli: &Cli) -> Result<PathBuf> {
    jobs_file(cli).ok_or_else(|| {
        bad_input("no jobs file: give it as FILE or --jobs FILE (the default, jobs.yaml, is not in this directory)")
    })
}

/// Store selection, the same for every command: `--store`, else `CRONSOLE_STORE` (clap reads it into
/// `--store`), else `.cronsole/` beside the jobs file, else `.cronsole/` here.
pub fn store_location(cli: &Cli, jobs: Option<&Path>) -> String {
    if let Some(s) = &cli.store {
        return s.clone();
    }
    let dir = jobs
        .and_then(|p| p.parent())
        .map(|p| {
            if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            }
        })
        .unwrap_or(Path::new("."));
    dir.join(".cronsole").to_string_lossy().into_owned()
}

/// Open an existing store for reading or acting on its jobs: a mistyped `--store` must be an
/// error (exit 2), not a silently created empty store.
pub fn open_existing_store(location: &str) -> Result<Arc<dyn Store>> {
    let is_url = location.contains("://");
    if !is_url && !Path::new(location).join("VERSION").exists() {
        return Err(bad_input(format!(
            "no cronsole store at {location}: start cronsole with --jobs FILE or run `cronsole apply FILE` first, or point --store at an existing store"
        )));
    }
    if is_url {
        let store = crate::store::postgres::PgStore::open_existing(location)?;
        return Ok(Arc::new(store));
    }
    // Opening an existing file store writes nothing (read-only commands leave every byte as
    // it was; a writer command's own operation is what writes).
    let store = crate::store::file::FileStore::open_existing(Path::new(location))?;
    Ok(Arc::new(store))
}

/// [`open_existing_store`] for a command that writes to the store (`pause`, `resume`,
/// `trigger`, `retry`, `cancel`, `backfill`): a file store is opened as a writer of an existing
/// store, so it adopts what an earlier release left as `apply` and `run` do (retention's mark
/// `history/first.json`), and still creates and migrates nothing.
pub fn open_existing_store_to_write(location: &str) -> Result<Arc<dyn Store>> {
    if location.contains("://") || !Path::new(location).join("VERSION").exists() {
        // PostgreSQL keeps no such mark; no store here is `open_existing_store`'s error.
        return open_existing_store(location);
    }
    let store = crate::store::file::FileStore::open_existing_writer(Path::new(location))?;
    Ok(Arc::new(store))
}

/// [`open_existing_store`] (`writes`: [`open_existing_store_to_write`]) for a command that
/// names the jobs it reads or writes (`describe`, `pause NAME`, `trigger NAME`, `backfill`,
/// `cancel`, `retry`): a file store is opened as a point handle, which reads the lines of the
/// jobs it is asked about and no others, so the command costs the same at 1 000 000 jobs as at
/// 1 000. A selection that turns out to need every job (a glob, `--all`) still gets them.
pub fn open_existing_store_for_named(location: &str, writes: bool) -> Result<Arc<dyn Store>> {
    if location.contains("://") || !Path::new(location).join("VERSION").exists() {
        return if writes {
            open_existing_store_to_write(location)
        } else {
            open_existing_store(location)
        };
    }
    let store = crate::store::file::FileStore::open_point(Path::new(location), writes)?;
    Ok(Arc::new(store))
}

/// Open the store named by `location` (a directory, or a `postgres://` URL), creating it.
/// The instant a command stores jobs at: this host's clock, or the store's when the two are
/// more than a minute apart (a faked clock, a time namespace, a host clock off), said on
/// stderr. Jobs stored on a clock an hour behind ran at once for slots before they were stored,
/// and on one an hour ahead waited the hour; the store's clock is the one its owners' offsets
/// are measured against.
pub(crate) fn storing_now(store: &dyn Store) -> chrono::DateTime<chrono::Utc> {
    on_the_stores_clock(store, "the jobs are stored")
}

/// [`storing_now`] for any command that dates what it writes (`what`, for the note: "the
/// trigger is dated"): `trigger` and `retry` dated on a clock an hour ahead waited the hour,
/// since no owner acts on a request before its instant.
pub(crate) fn on_the_stores_clock(store: &dyn Store, what: &str) -> chrono::DateTime<chrono::Utc> {
    let now = chrono::Utc::now();
    let Some(at) = store.clock_now() else {
        return now;
    };
    let off = now - at;
    if off.abs() <= crate::store::rules::slots::AHEAD_TOLERANCE {
        return now;
    }
    let side = if off < chrono::Duration::zero() {
        "behind"
    } else {
        "ahead of"
    };
    eprintln!(
        "note: this host's clock is {} {side} the store's: {what} on the store's clock",
        crate::clock::step_words(off.abs()).trim_start_matches('+')
    );
    at
}

/// `describe`'s line for a job's last re-derivation: how long ago, and what moved.
pub(crate) fn rederived_words(
    r: &crate::model::Rederived,
    now: chrono::DateTime<chrono::Utc>,
) -> String {
    let ago = crate::when::passed(r.at, now);
    format!("{ago}: {} (a clock ahead decided them)", r.what)
}

pub fn open_store(location: &str) -> Result<Arc<dyn Store>> {
    if location.starts_with("postgres://") || location.starts_with("postgresql://") {
        let store = crate::store::postgres::PgStore::open(location)?;
        return Ok(Arc::new(store));
    }
    let store = crate::store::file::FileStore::open(Path::new(location))?;
    Ok(Arc::new(store))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ApplyReport;
    use crate::store::BackendError;

    fn report() -> ApplyReport {
        let v = |n: &[&str]| n.iter().map(|s| s.to_string()).collect();
        ApplyReport {
            created: v(&["a"]),
            updated: v(&["b", "c"]),
            retired: v(&["d"]),
            unchanged: v(&["e"]),
            settings: Vec::new(),
            recounted: Vec::new(),
        }
    }

    /// An apply that changed the budget period's kind says whose spend it
    /// recounted, in which period and how much was found; a plan (nothing applied yet) does not.
    #[test]
    fn an_apply_prints_each_recounted_job_after_its_job_lines() {
        let mut rep = report();
        rep.recounted = vec![
            crate::store::Recount {
                job: "b".into(),
                period: "week:2026-W49".into(),
                spent_usd: 0.025,
            },
            crate::store::Recount {
                job: "e".into(),
                period: "week:2026-W49".into(),
                spent_usd: 0.0,
            },
        ];
        let lines = apply_lines(&rep, false);
        assert_eq!(
            lines[5..],
            [
                "recounted b: $0.025 spent in budget period week:2026-W49 (counted from history)",
                "recounted e: $0.00 spent in budget period week:2026-W49 (counted from history)",
            ]
        );
        assert_eq!(apply_lines(&rep, true), apply_lines(&report(), true));
    }

    /// A settings change is reported, not hidden behind "1 unchanged".
    #[test]
    fn an_apply_reports_a_settings_change_with_its_counts() {
        let mut rep = report();
        assert!(!apply_counts(&rep, false).contains("settings"));
        rep.settings = vec!["budget period day → week".into()];
        assert_eq!(
            apply_counts(&rep, false),
            "1 created, 2 updated, 1 retired, 1 unchanged; settings updated: budget period \
             day → week"
        );
    }

    #[test]
    fn an_apply_prints_every_job_and_its_counts() {
        assert_eq!(
            apply_lines(&report(), false),
            [
                "created   a",
                "updated   b",
                "updated   c",
                "retired   d",
                "unchanged e"
            ]
        );
        assert_eq!(
            apply_counts(&report(), false),
            "1 created, 2 updated, 1 retired, 1 unchanged"
        );
    }

    #[test]
    fn a_plan_lists_only_the_jobs_it_changes() {
        assert_eq!(
            apply_lines(&report(), true),
            ["  create  a", "  update  b", "  update  c", "  retire  d"]
        );
        assert_eq!(
            apply_counts(&report(), true),
            "1 to create, 2 to update, 1 to retire, 1 unchanged"
        );
    }

    /// Never "I/O error on X: Is a directory (os error 21): Is a directory (os error 21)": each
    /// cause is printed once, and a context that does not repeat its cause still gets it.
    #[test]
    fn error_line_prints_each_cause_once() {
        let io = || std::io::Error::from_raw_os_error(20);
        let e = anyhow::Error::new(StoreError::Backend(BackendError::Io {
            path: "/etc/passwd/x".into(),
            source: io(),
        }));
        let os = io().to_string();
        let line = error_line(&e);
        assert_eq!(line, format!("I/O error on /etc/passwd/x: {os}"));
        assert_eq!(line.matches(&os).count(), 1, "{line}");
        let e = e.context("opening the store");
        assert_eq!(
            error_line(&e),
            format!("opening the store: I/O error on /etc/passwd/x: {os}")
        );
        let e = anyhow::Error::new(io()).context("reading jobs.yaml");
        assert_eq!(error_line(&e), format!("reading jobs.yaml: {os}"));
        // Below a store error nothing is printed: a database error's detail already is the
        // driver's chain, which the driver's own errors repeat in other words.
        let driver = "port=x"
            .parse::<tokio_postgres::Config>()
            .expect_err("not a port");
        assert!(!driver.to_string().is_empty());
        let e = anyhow::Error::new(StoreError::Backend(BackendError::Database {
            doing: "connecting".into(),
            detail: "the server's own words".into(),
            source: driver,
        }));
        assert_eq!(
            error_line(&e),
            "database error while connecting: the server's own words"
        );
    }
}

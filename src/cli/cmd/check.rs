//! `cronsole check --store S`: verify a whole store and print every problem with its location.
//!
//! Owns: choosing the store kind and printing the report, with the store's owners (the engines
//! heartbeating on it, `owners_view`). Must not touch: the verification itself
//! (`cronsole::store::check`, `PgStore::check`), anything that writes.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;

use crate::cli::args::Cli;
use crate::store::check::{Report, check_file_store};
use crate::store::file::DEFAULT_LOCK_WAIT;

use super::{bad_input, jobs_file, store_location};

pub fn check(cli: &Cli, json: bool) -> Result<ExitCode> {
    let location = store_location(cli, jobs_file(cli).as_deref());
    let report: Report =
        if location.starts_with("postgres://") || location.starts_with("postgresql://") {
            crate::store::postgres::PgStore::open_existing(&location)?.check()?
        } else {
            let dir = Path::new(&location);
            // A directory with none of a store's files is no store: said as every other
            // read-only command says it, and nothing is written into it (not even the lock).
            if !dir.is_dir() || !crate::store::file::holds_a_store(dir) {
                return Err(bad_input(format!("no cronsole store at {location}")));
            }
            check_file_store(dir, DEFAULT_LOCK_WAIT)?
        };
    // The engines on the store, from their owner records (advisory: a store too damaged to
    // open still gets its report, without them).
    let owners = super::open_existing_store(&location)
        .and_then(|s| Ok(crate::engine::JudgeAt::owners_now(s.as_ref())?));
    let mut out = std::io::stdout().lock();
    if json {
        let mut v = serde_json::to_value(&report)?;
        if let (Some(o), Ok(owners)) = (v.as_object_mut(), &owners) {
            o.insert("owners".into(), super::owners_view::json(owners));
        }
        writeln!(out, "{}", crate::text::to_json_pretty(&v)?)?;
    } else {
        match &owners {
            Ok(owners) => super::owners_view::lines(owners)
                .iter()
                .try_for_each(|l| writeln!(out, "{l}"))?,
            Err(e) => writeln!(out, "owners: not read ({e})")?,
        }
        for p in &report.problems {
            writeln!(out, "{p}")?;
        }
        if report.more > 0 {
            writeln!(out, "… and {} more problems", report.more)?;
        }
        for n in &report.notes {
            writeln!(out, "note: {n}")?;
        }
        if let Some(id) = &report.store_id {
            writeln!(out, "store id {id}")?;
        }
        if report.ok() {
            writeln!(
                out,
                "store {location} is sound: {} jobs, {} history rows verified",
                report.jobs, report.history_rows
            )?;
        } else {
            let n = report.problems.len() as u64 + report.more;
            writeln!(
                out,
                "store {location} is damaged: {n} problem{}",
                if n == 1 { "" } else { "s" }
            )?;
        }
    }
    Ok(if report.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

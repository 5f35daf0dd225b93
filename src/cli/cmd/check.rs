//! `cronsole check --store S`: verify a whole store and print every problem with its location.
//!
//! Owns: choosing the store kind and printing the report. Must not touch: the verification
//! itself (`cronsole::store::check`, `PgStore::check`), anything that writes.

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
            crate::store::postgres::PgStore::open(&location)?.check()?
        } else {
            let dir = Path::new(&location);
            if !dir.is_dir() {
                return Err(bad_input(format!("no cronsole store at {location}")));
            }
            check_file_store(dir, DEFAULT_LOCK_WAIT)?
        };
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", crate::text::to_json_pretty(&report)?)?;
    } else {
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

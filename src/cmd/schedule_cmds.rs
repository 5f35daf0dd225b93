//! `cronsole next`. (Implementation: schedule helper.)
use std::process::ExitCode;

use anyhow::Result;
use cronsole::cli::NextArgs;

pub fn next(a: &NextArgs) -> Result<ExitCode> {
    let _ = a;
    todo!("schedule helper")
}

//! `probe` and `diff`. (Implementation: gate helper.)
use std::process::ExitCode;

use anyhow::Result;
use cronsole::cli::{Cli, DiffArgs, ProbeArgs};

pub fn diff(cli: &Cli, a: &DiffArgs) -> Result<ExitCode> {
    let _ = (cli, a);
    todo!("gate helper")
}
pub fn probe(a: &ProbeArgs) -> Result<ExitCode> {
    let _ = a;
    todo!("gate helper")
}

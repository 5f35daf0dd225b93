//! `apply`, `jobs`, `history`, `pause`, `resume`, `trigger`, `stats`. (Implementation: store helper.)
use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use cronsole::cli::{Cli, HistoryArgs};

pub fn apply(cli: &Cli, file: &Path) -> Result<ExitCode> {
    let _ = (cli, file);
    todo!("store helper")
}
pub fn jobs(cli: &Cli, json: bool) -> Result<ExitCode> {
    let _ = (cli, json);
    todo!("store helper")
}
pub fn history(cli: &Cli, a: &HistoryArgs) -> Result<ExitCode> {
    let _ = (cli, a);
    todo!("store helper")
}
pub fn pause(cli: &Cli, name: &str, paused: bool) -> Result<ExitCode> {
    let _ = (cli, name, paused);
    todo!("store helper")
}
pub fn trigger(cli: &Cli, name: &str) -> Result<ExitCode> {
    let _ = (cli, name);
    todo!("store helper")
}
pub fn stats(cli: &Cli, json: bool) -> Result<ExitCode> {
    let _ = (cli, json);
    todo!("store helper")
}

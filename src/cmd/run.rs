//! The default mode, `run` (headless) and `console`. (Implementation: engine/console.)
use std::process::ExitCode;

use anyhow::Result;
use cronsole::cli::Cli;

pub fn default_mode(cli: &Cli) -> Result<ExitCode> {
    let _ = cli;
    todo!("engine")
}
pub fn headless(cli: &Cli) -> Result<ExitCode> {
    let _ = cli;
    todo!("engine")
}
pub fn console(cli: &Cli, attach: bool) -> Result<ExitCode> {
    let _ = (cli, attach);
    todo!("console")
}

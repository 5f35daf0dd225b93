//! The thin binary: parse the command line, pick the command, map errors to exit codes
//! (0 ok, 1 runtime failure, 2 bad input). Everything else lives in the library.

use std::process::ExitCode;

use clap::Parser;
use cronsole::cli::Cli;

mod cmd;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cmd::dispatch(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(cmd::exit_code_for(&err))
        }
    }
}

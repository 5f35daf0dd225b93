//! The thin binary: parse the command line, run it, map errors to exit codes (0 ok, 1 runtime
//! failure, 2 bad input). What each command does is the library's `cronsole::cli`.

use std::process::ExitCode;

fn main() -> ExitCode {
    if let Some(code) = cronsole::cli::run_helper() {
        return code;
    }
    cronsole::cli::prepare();
    let cli = cronsole::cli::parse();
    match cronsole::cli::run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {}", cronsole::cli::error_line(&err));
            ExitCode::from(cronsole::cli::exit_code_for(&err))
        }
    }
}

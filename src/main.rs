//! The thin binary: parse the command line, pick the command, map errors to exit codes
//! (0 ok, 1 runtime failure, 2 bad input). Everything else lives in the library.

use std::process::ExitCode;

mod cmd;

fn main() -> ExitCode {
    let cli = cronsole::cli::parse();
    if !cmd::runs_engine(&cli) {
        // Report commands behave like other Unix filters: `cronsole history | head` ends quietly
        // when the reader goes away instead of panicking on EPIPE. Engine modes keep the default
        // (ignored) so a closed stdout never kills a process holding leases.
        // SAFETY: called before any other thread exists; SIG_DFL is a valid disposition.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    match cmd::dispatch(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(cmd::exit_code_for(&err))
        }
    }
}

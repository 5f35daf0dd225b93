//! The command line: what the `cronsole` binary does with its arguments. `main.rs` only parses
//! (through [`parse`]), calls [`run`] and maps the error to an exit code ([`exit_code_for`]:
//! 0 ok, 1 runtime failure, 2 bad input); everything between lives here, in the library, so it
//! is built, linted and tested with the rest.
//!
//! Owns: the clap definitions (`args`), one function per command, printing, store selection
//! (`cmd`), the `--no-tui` printer (`headless`) and the stop signals counted before the engine
//! starts (`early_signals`). Must not touch: engine internals — it drives the engine, stores,
//! schedule, config and console through their public API.
//!
//! This layer is the binary's edge: its functions return `anyhow::Result`, because a command's
//! error is only ever printed and turned into an exit code, never matched on by a caller. Every
//! module below it returns typed errors; [`exit_code_for`] reads them back out of the chain.

use std::process::ExitCode;

mod args;
mod cmd;
mod early_signals;
mod headless;

pub use args::{Cli, parse};

/// Runs the process as a helper when the binary was re-executed as one — the per-run supervisor
/// or the owner's zygote — and returns its exit code; `None` for an ordinary command line.
/// Helpers use no clap, no logging and no runtime, so this comes before anything else.
pub fn run_helper() -> Option<ExitCode> {
    let mut args = std::env::args_os();
    let first = args.nth(1);
    if first.as_deref() == Some(std::ffi::OsStr::new(crate::proc::supervisor::SUBCOMMAND)) {
        let rest: Vec<String> = args.map(|a| a.to_string_lossy().into_owned()).collect();
        let code = crate::proc::supervisor::main(&rest);
        return Some(ExitCode::from(u8::try_from(code).unwrap_or(1)));
    }
    if first.as_deref() == Some(std::ffi::OsStr::new(crate::proc::zygote::ZYGOTE_SUBCOMMAND)) {
        let code = crate::proc::zygote::zygote_main();
        return Some(ExitCode::from(u8::try_from(code).unwrap_or(1)));
    }
    None
}

/// Sets up the process before the command line is parsed: every command this process starts
/// goes through a supervisor that is this very binary (`/proc/self/exe` still works if the file
/// was replaced or deleted by an upgrade), and from here on a stop signal is counted, not fatal,
/// so an engine mode started by a service manager and stopped at once still stops gracefully
/// (exit 0).
pub fn prepare() {
    let me = std::path::PathBuf::from("/proc/self/exe");
    if me.exists() {
        crate::proc::use_supervisor(me);
    } else if let Ok(exe) = std::env::current_exe() {
        crate::proc::use_supervisor(exe);
    }
    if std::env::var_os("CRONSOLE_ZYGOTE").is_some_and(|v| v == "off") {
        crate::proc::disable_zygote();
    }
    early_signals::install();
}

/// Runs the parsed command line and returns the exit code of a command that ended normally.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    if !cmd::runs_engine(&cli) {
        early_signals::restore_default();
        // Report commands behave like other Unix filters: `cronsole history | head` ends quietly
        // when the reader goes away instead of panicking on EPIPE. Engine modes keep the default
        // (ignored) so a closed stdout never kills a process holding leases.
        crate::proc::restore_default_sigpipe();
    }
    cmd::dispatch(cli)
}

/// The one line `error: …` prints for a failed command: each cause once, shown like store text
/// (the message may quote the operator's own arguments — a job name, `--since`, a run id — so
/// no ESC/OSC/BEL byte reaches the terminal; the line breaks of a multi-line error stay).
pub fn error_line(err: &anyhow::Error) -> String {
    crate::text::visible(&cmd::error_line(err)).into_owned()
}

/// The exit code for a failed command: 2 for bad input (arguments, a jobs file, a store
/// location), 1 for a runtime failure.
pub fn exit_code_for(err: &anyhow::Error) -> u8 {
    cmd::exit_code_for(err)
}

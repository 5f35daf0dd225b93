//! The thin binary: parse the command line, pick the command, map errors to exit codes
//! (0 ok, 1 runtime failure, 2 bad input). Its glue lives beside it and nowhere else: `cli`
//! (clap definitions), `cmd` (one function per command, printing, store selection) and
//! `headless` (the `--no-tui` printer). Everything they drive — engine, stores, schedule,
//! config, console — is the library's public API.

use std::process::ExitCode;

mod cli;
mod cmd;
mod early_signals;
mod headless;

fn main() -> ExitCode {
    // The per-run supervisor (cronsole re-executing itself): no clap, no logging, no runtime.
    let mut args = std::env::args_os();
    let first = args.nth(1);
    if first.as_deref() == Some(std::ffi::OsStr::new(cronsole::proc::supervisor::SUBCOMMAND)) {
        let rest: Vec<String> = args.map(|a| a.to_string_lossy().into_owned()).collect();
        let code = cronsole::proc::supervisor::main(&rest);
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    // The owner's zygote, which forks each run's supervisor (same constraints).
    if first.as_deref()
        == Some(std::ffi::OsStr::new(
            cronsole::proc::zygote::ZYGOTE_SUBCOMMAND,
        ))
    {
        let code = cronsole::proc::zygote::zygote_main();
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    // Every command this process starts goes through a supervisor that is this very binary
    // (`/proc/self/exe` still works if the file was replaced or deleted by an upgrade).
    let me = std::path::PathBuf::from("/proc/self/exe");
    if me.exists() {
        cronsole::proc::use_supervisor(me);
    } else if let Ok(exe) = std::env::current_exe() {
        cronsole::proc::use_supervisor(exe);
    }
    if std::env::var_os("CRONSOLE_ZYGOTE").is_some_and(|v| v == "off") {
        cronsole::proc::disable_zygote();
    }
    // From here on a stop signal is counted, not fatal: an engine mode started by a service
    // manager and stopped at once still stops gracefully (exit 0).
    early_signals::install();
    let cli = cli::parse();
    if !cmd::runs_engine(&cli) {
        early_signals::restore_default();
        // Report commands behave like other Unix filters: `cronsole history | head` ends quietly
        // when the reader goes away instead of panicking on EPIPE. Engine modes keep the default
        // (ignored) so a closed stdout never kills a process holding leases.
        cronsole::proc::restore_default_sigpipe();
    }
    match cmd::dispatch(cli) {
        Ok(code) => code,
        Err(err) => {
            // The message may quote the operator's own arguments (a job name, `--since`, a run
            // id): shown like store text, so no ESC/OSC/BEL byte reaches the terminal; the line
            // breaks of a multi-line error stay.
            eprintln!("error: {}", cronsole::text::visible(&cmd::error_line(&err)));
            ExitCode::from(cmd::exit_code_for(&err))
        }
    }
}

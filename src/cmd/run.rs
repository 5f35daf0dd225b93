//! The default mode, `run` (always headless) and `console`: load and apply the jobs file, start
//! the engine, and drive either the console or the headless printer until quit, `--for`, or a
//! signal. SIGINT/SIGTERM once → graceful shutdown (wait `--shutdown-grace` for in-flight runs);
//! twice → cancel in-flight runs at once (recorded `abandoned`, reason `shutdown`).

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use cronsole::cli::{Cli, ConsoleArgs, LogFormat, RunArgs, RunOpts};
use cronsole::clock::{Clock, SystemClock};
use cronsole::config;
use cronsole::engine::{self, EngineConfig, EngineHandle};
use cronsole::schedule::parse_duration;
use cronsole::store::Store;

use super::{bad_input, jobs_file, open_store, store_location};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Headless,
    Console,
}

pub fn default_mode(cli: &Cli) -> Result<ExitCode> {
    let mode = if cli.no_tui || !std::io::stdout().is_terminal() {
        Mode::Headless
    } else {
        Mode::Console
    };
    start(cli, &cli.run, cli.log_format, mode)
}

pub fn headless(cli: &Cli, a: &RunArgs) -> Result<ExitCode> {
    start(cli, &a.run, a.log_format, Mode::Headless)
}

pub fn console(cli: &Cli, a: &ConsoleArgs) -> Result<ExitCode> {
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return Err(bad_input(
            "the console needs a terminal; use `cronsole run` (headless) instead",
        ));
    }
    if a.attach {
        return attach_console(cli, &a.run);
    }
    start(cli, &a.run, LogFormat::Text, Mode::Console)
}

/// Parsed engine options shared by every mode.
struct Opts {
    run_for: Option<std::time::Duration>,
    grace: std::time::Duration,
}

/// Longest `--for`: the schedule grammar's 100-year cap.
const MAX_RUN_FOR: std::time::Duration = std::time::Duration::from_secs(100 * 365 * 86_400);
/// Longest `--shutdown-grace`.
const MAX_GRACE: std::time::Duration = std::time::Duration::from_secs(86_400);

fn opts(run: &RunOpts) -> Result<Opts> {
    let run_for = match &run.run_for {
        Some(s) => {
            let d = parse_duration(s).map_err(|e| bad_input(format!("--for {s}: {e}")))?;
            if d < std::time::Duration::from_secs(1) || d > MAX_RUN_FOR {
                return Err(bad_input(format!(
                    "--for {s}: must be between 1s and 100 years"
                )));
            }
            Some(d)
        }
        None => None,
    };
    let grace = parse_duration(&run.shutdown_grace)
        .map_err(|e| bad_input(format!("--shutdown-grace {}: {e}", run.shutdown_grace)))?;
    if grace > MAX_GRACE {
        return Err(bad_input(format!(
            "--shutdown-grace {}: must be at most 24h",
            run.shutdown_grace
        )));
    }
    Ok(Opts { run_for, grace })
}

/// Load the jobs file (if any); every error printed, exit 2 on any.
fn load_jobs(path: Option<&Path>) -> Result<Option<config::Loaded>> {
    let Some(path) = path else { return Ok(None) };
    let loaded = config::load_file(path).map_err(anyhow::Error::new)?;
    for w in &loaded.warnings {
        eprintln!("{w}");
    }
    Ok(Some(loaded))
}

/// Logs go to `<store dir>/logs/` (daily rotation), never to the terminal.
fn init_logging(store_location: &str) -> Option<tracing_appender::non_blocking::WorkerGuard> {
    use tracing_subscriber::EnvFilter;
    let dir = super::eco::logs_dir(store_location);
    if std::fs::create_dir_all(&dir).is_err() {
        return None;
    }
    let appender = tracing_appender::rolling::daily(&dir, "cronsole.log");
    let (writer, guard) = tracing_appender::non_blocking(appender);
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let ok = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(writer)
        .try_init()
        .is_ok();
    ok.then_some(guard)
}

fn start(cli: &Cli, run: &RunOpts, log_format: LogFormat, mode: Mode) -> Result<ExitCode> {
    let opts = opts(run)?;
    let jobs = jobs_file(cli);
    let loaded = load_jobs(jobs.as_deref())?;
    let location = store_location(cli, jobs.as_deref());
    if jobs.is_none() && !location.contains("://") && !Path::new(&location).join("VERSION").exists()
    {
        // Nothing to run and nowhere to run it from: say what to do instead of creating an
        // empty store and idling.
        return Err(bad_input(format!(
            "no jobs file (no jobs.yaml here, no --jobs FILE) and no store at {location}: \
             create a starter file with `cronsole init`, then run `cronsole`; or give \
             --jobs FILE, or --store pointing at an existing store"
        )));
    }
    let store = open_store(&location)?;
    let _guard = init_logging(&location);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async move {
        if let Some(l) = &loaded {
            let file = l.file.clone();
            let now = clock.now();
            let report = engine::blocking(&store, move |s| s.apply(&file, now)).await?;
            let summary = format!(
                "applied {}: {} created, {} updated, {} retired, {} unchanged",
                jobs.as_deref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                report.created.len(),
                report.updated.len(),
                report.retired.len(),
                report.unchanged.len()
            );
            tracing::info!("{summary}");
            if mode == Mode::Headless {
                eprintln!("cronsole: {summary}; store {}", store.location());
            }
        } else if mode == Mode::Headless {
            eprintln!(
                "cronsole: no jobs file given (--jobs FILE); running the jobs already in {}",
                store.location()
            );
        }
        let mut cfg = EngineConfig::new(engine::new_owner_id());
        cfg.max_concurrent = usize::try_from(run.max_concurrent).unwrap_or(usize::MAX);
        cfg.shutdown_grace = opts.grace;
        cfg.publish_snapshots = mode == Mode::Console;
        cfg.spool = Some(engine::spool::path_for(&store.location()));
        let deps = engine::RunDeps::from_env().context("preparing HTTP clients")?;
        let handle = engine::spawn(cfg, Arc::clone(&store), Arc::clone(&clock), deps)?;
        tracing::info!(store = %store.location(), "engine started");
        match mode {
            Mode::Headless => run_headless(handle, log_format, opts.run_for).await,
            Mode::Console => run_console(handle, store, clock, opts.run_for).await,
        }
    })
}

/// Wait for SIGINT/SIGTERM (or `--for`); first → graceful, second → hard stop.
async fn supervise(handle: &EngineHandle, run_for: Option<std::time::Duration>) -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;
    let deadline = async {
        match run_for {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = term.recv() => eprintln!("cronsole: SIGTERM: shutting down (signal again to cancel in-flight runs)"),
        _ = int.recv() => eprintln!("cronsole: interrupt: shutting down (Ctrl-C again to cancel in-flight runs)"),
        _ = deadline => {}
        _ = handle.shutdown.cancelled() => {}
    }
    handle.shutdown.cancel();
    let hard = handle.hard_stop.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        eprintln!("cronsole: cancelling in-flight runs now");
        hard.cancel();
    });
    Ok(())
}

async fn run_headless(
    handle: EngineHandle,
    log_format: LogFormat,
    run_for: Option<std::time::Duration>,
) -> Result<ExitCode> {
    let printer = tokio::spawn(cronsole::headless::print_events(
        handle.events.subscribe(),
        log_format,
        std::io::stdout(),
        std::io::stderr(),
    ));
    supervise(&handle, run_for).await?;
    let EngineHandle { join, events, .. } = handle;
    let res = join.await.context("engine task")?;
    drop(events);
    let _ = printer.await;
    report_lost(&res);
    engine_result(res)?;
    Ok(ExitCode::SUCCESS)
}

async fn run_console(
    handle: EngineHandle,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    run_for: Option<std::time::Duration>,
) -> Result<ExitCode> {
    let stop = tokio_util::sync::CancellationToken::new();
    let deps = cronsole::tui::ConsoleDeps {
        snapshots: handle.snapshots.clone(),
        events: handle.events.subscribe(),
        commands: handle.commands.clone(),
        store,
        clock,
        stop: stop.clone(),
    };
    if let Some(d) = run_for {
        let s = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(d).await;
            s.cancel();
        });
    }
    // Signals: the first closes the console (terminal restored) and shuts the engine down
    // gracefully; once the console is gone, the next one cancels in-flight runs at once.
    let signals = console_signals(
        stop.clone(),
        handle.shutdown.clone(),
        handle.hard_stop.clone(),
    )?;
    let ui = cronsole::tui::run(deps).await;
    // The terminal is restored here; finish the engine in the open.
    stop.cancel();
    handle.shutdown.cancel();
    let in_flight = handle.snapshots.borrow().in_flight.len();
    if in_flight > 0 {
        eprintln!("cronsole: waiting for {in_flight} in-flight run(s) (Ctrl-C to cancel them now)");
    }
    let res = handle.join.await.context("engine task")?;
    signals.abort();
    report_lost(&res);
    ui?;
    engine_result(res)?;
    Ok(ExitCode::SUCCESS)
}

/// SIGINT/SIGTERM/SIGHUP while a console is up (in raw mode Ctrl-C is a key, so a signal comes
/// from `kill`, `systemctl stop` or a closed terminal): close the console and stop gracefully;
/// after that, any signal is a hard stop.
fn console_signals(
    stop: tokio_util::sync::CancellationToken,
    shutdown: tokio_util::sync::CancellationToken,
    hard: tokio_util::sync::CancellationToken,
) -> Result<tokio::task::JoinHandle<()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;
    let mut hup = signal(SignalKind::hangup()).context("installing SIGHUP handler")?;
    Ok(tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
                _ = hup.recv() => {}
            }
            if stop.is_cancelled() {
                hard.cancel();
            } else {
                stop.cancel();
                shutdown.cancel();
            }
        }
    }))
}

/// A damaged spool file is damaged input, like a damaged store file: exit 2, not 1.
fn engine_result(res: Result<(), engine::EngineError>) -> Result<()> {
    match res {
        Err(e @ engine::EngineError::Spool(engine::spool::SpoolError::Corrupt { .. })) => {
            Err(bad_input(e.to_string()))
        }
        other => other.map_err(anyhow::Error::new),
    }
}

/// Completions that could be neither written nor spooled are printed on stderr, one JSON line
/// each, so that nothing a run produced vanishes without a trace (the exit code is 1).
fn report_lost(res: &Result<(), engine::EngineError>) {
    if let Err(engine::EngineError::Unwritten { lost, .. }) = res {
        for e in lost {
            if let Ok(line) = serde_json::to_string(e) {
                eprintln!("cronsole: unwritten completion: {line}");
            }
        }
    }
}

fn attach_console(cli: &Cli, run: &RunOpts) -> Result<ExitCode> {
    let run_for = opts(run)?.run_for;
    let jobs = jobs_file(cli);
    let location = store_location(cli, jobs.as_deref());
    let store = super::open_existing_store(&location)?;
    let _guard = init_logging(&location);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async move {
        let stop = tokio_util::sync::CancellationToken::new();
        if let Some(d) = run_for {
            let s = stop.clone();
            tokio::spawn(async move {
                tokio::time::sleep(d).await;
                s.cancel();
            });
        }
        let owner = format!("attached ({})", engine::new_owner_id());
        let attached =
            cronsole::attach::start(Arc::clone(&store), Arc::clone(&clock), owner, stop.clone())
                .await?;
        let deps = cronsole::tui::ConsoleDeps {
            snapshots: attached.snapshots,
            events: attached.events,
            commands: attached.commands,
            store,
            clock,
            stop: stop.clone(),
        };
        // No engine here: any signal just closes the console (terminal restored).
        let nothing = tokio_util::sync::CancellationToken::new();
        let signals = console_signals(stop.clone(), nothing.clone(), nothing)?;
        let res = cronsole::tui::run(deps).await;
        signals.abort();
        stop.cancel();
        let _ = attached.task.await;
        res?;
        Ok(ExitCode::SUCCESS)
    })
}

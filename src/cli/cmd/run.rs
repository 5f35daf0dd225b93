//! The default mode, `run` (always headless) and `console`: load and apply the jobs file, start
//! the engine, and drive either the console or the headless printer until quit, `--for`, or a
//! signal. SIGINT/SIGTERM once → graceful shutdown (wait `--shutdown-grace` for in-flight runs);
//! twice → cancel in-flight runs at once (recorded `abandoned`, reason `shutdown`).
//!
//! Daemon duties (headless): SIGHUP re-applies the `--jobs` file (a file with errors is reported
//! and the running definitions stay); the console treats SIGHUP as a hang-up instead.
//! `--metrics-addr` serves `/metrics` and `/healthz` in both modes; with `$NOTIFY_SOCKET` set,
//! systemd hears `READY=1` after the first claim cycle and `WATCHDOG=1` while the loop turns
//! (`cronsole::service`). `--log-to` picks log files or journald-style stderr.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use crate::cli::args::{Cli, ConsoleArgs, LogFormat, LogTo, RunArgs, RunOpts};
use crate::clock::{Clock, SystemClock};
use crate::config;
use crate::engine::{self, EngineConfig, EngineHandle};
use crate::schedule::parse_duration;
use crate::service::{http, metrics, sdnotify};
use crate::store::Store;
use anyhow::{Context, Result};

use super::{apply_counts, bad_input, jobs_file, store_location, store_wait};

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
    if a.attach && a.run.metrics_addr.is_some() {
        return Err(bad_input(
            "--metrics-addr reports this process's engine; `console --attach` runs none (serve metrics from the owners)",
        ));
    }
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
    metrics_addr: Option<std::net::SocketAddr>,
    max_clock_offset: ClockBound,
}

/// `--max-clock-offset`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum ClockBound {
    /// From the jobs file's shortest lease ([`engine::default_max_clock_offset`]).
    Auto,
    /// No bound.
    Off,
    /// This bound.
    Fixed(std::time::Duration),
}

impl ClockBound {
    fn parse(s: &str) -> Result<ClockBound> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => return Ok(ClockBound::Auto),
            "off" => return Ok(ClockBound::Off),
            _ => {}
        }
        let d = parse_duration(s)
            .map_err(|e| bad_input(format!("--max-clock-offset {s}: {e} (or `auto`, or `off`)")))?;
        if d < std::time::Duration::from_secs(1) || d > MAX_GRACE {
            return Err(bad_input(format!(
                "--max-clock-offset {s}: must be between 1s and 24h (or `auto`, or `off`)"
            )));
        }
        Ok(ClockBound::Fixed(d))
    }

    /// The engine's bound; `jobs`: the jobs file given, if any (else the default lease's).
    fn resolve(self, jobs: Option<&config::Loaded>) -> Option<std::time::Duration> {
        match self {
            ClockBound::Off => None,
            ClockBound::Fixed(d) => Some(d),
            ClockBound::Auto => Some(engine::default_max_clock_offset(shortest_lease(jobs))),
        }
    }

    /// How far ahead of the store's clock this owner may be, whatever the bound: the `auto`
    /// bound, a quarter of the shortest lease, with `off` and, on the file store
    /// (`own_clocks`), with a larger bound too. A live lease is renewed when a third of it is
    /// left, so it may end only a third of a lease after the store's now; an owner further
    /// ahead that judges it on its own clock reads it as expired and takes the run over (20 s
    /// ahead of 30 s leases with `off`, and 40 s ahead under `60s`, ran one-shots twice). Under
    /// a bound the file store's claims judge leases on the store's clock as the heartbeat read
    /// it, and the limit stays as a second guard. On PostgreSQL the database's clock judges
    /// leases, and an explicit bound stands.
    fn ahead_limit(
        self,
        jobs: Option<&config::Loaded>,
        own_clocks: bool,
    ) -> Option<std::time::Duration> {
        let quarter = engine::default_max_clock_offset(shortest_lease(jobs));
        match self {
            ClockBound::Off => Some(quarter),
            ClockBound::Fixed(d) if own_clocks && d > quarter => Some(quarter),
            ClockBound::Fixed(_) | ClockBound::Auto => None,
        }
    }
}

/// The jobs file's shortest `lease_seconds` (the default lease's without a jobs file).
fn shortest_lease(jobs: Option<&config::Loaded>) -> f64 {
    jobs.and_then(|l| {
        l.file
            .jobs
            .iter()
            .map(|j| j.lease_seconds)
            .min_by(f64::total_cmp)
    })
    .unwrap_or(config::defaults::LEASE_SECONDS)
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
    let metrics_addr = match &run.metrics_addr {
        Some(a) => Some(http::parse_addr(a).map_err(bad_input)?),
        None => None,
    };
    let max_clock_offset = ClockBound::parse(&run.max_clock_offset)?;
    Ok(Opts {
        run_for,
        grace,
        metrics_addr,
        max_clock_offset,
    })
}

/// Load the jobs file (if any); every error printed, exit 2 on any.
/// Load the jobs file. Its warnings are printed on stderr here, and `start` logs them and hands
/// them to the console, whose screen would otherwise hide them until it closes.
fn load_jobs(path: Option<&Path>) -> Result<Option<config::Loaded>> {
    let Some(path) = path else { return Ok(None) };
    let loaded = config::load_file(path).map_err(anyhow::Error::new)?;
    for w in &loaded.warnings {
        eprintln!("{}", super::inert(w));
    }
    Ok(Some(loaded))
}

/// Where the log went: the writer's guard (kept until exit so the last lines are written) and
/// whether the log is the store's own files, which carry a line per history row (on stderr the
/// journal also collects stdout, where headless mode prints the rows: a line there would be a
/// second copy).
struct Logging {
    _guard: Option<tracing_appender::non_blocking::WorkerGuard>,
    in_files: bool,
}

/// Logs go to `<store dir>/logs/` (daily rotation), never to the terminal; or, with
/// `--log-to stderr` (or `auto` under systemd's journal, `$JOURNAL_STREAM`, when stderr is not a
/// terminal), to stderr in journald's format.
fn init_logging(store_location: &str, to: LogTo) -> Logging {
    let (guard, in_files) = logging_to(store_location, to);
    Logging {
        _guard: guard,
        in_files,
    }
}

fn logging_to(
    store_location: &str,
    to: LogTo,
) -> (Option<tracing_appender::non_blocking::WorkerGuard>, bool) {
    use tracing_subscriber::EnvFilter;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let stderr = match to {
        LogTo::Stderr => true,
        LogTo::Dir => false,
        LogTo::Auto => {
            std::env::var_os("JOURNAL_STREAM").is_some_and(|v| !v.is_empty())
                && !std::io::stderr().is_terminal()
        }
    };
    if stderr {
        let (writer, guard) = tracing_appender::non_blocking(std::io::stderr());
        let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
        let ok = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .event_format(crate::service::journald::Journald)
            .with_writer(writer)
            .finish()
            .with(not_the_mcp_sdk())
            .try_init()
            .is_ok();
        return (ok.then_some(guard), false);
    }
    let dir = super::eco::logs_dir(store_location);
    if std::fs::create_dir_all(&dir).is_err() {
        return (None, false);
    }
    let appender = tracing_appender::rolling::daily(&dir, "cronsole.log");
    let (writer, guard) = tracing_appender::non_blocking(appender);
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let ok = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(writer)
        .finish()
        .with(not_the_mcp_sdk())
        .try_init()
        .is_ok();
    (ok.then_some(guard), ok)
}

/// Drops the MCP SDK's own log events, whatever `RUST_LOG` says: they carry what servers send
/// verbatim (notifications, unexpected messages, error bodies), unredacted and unbounded.
/// cronsole logs a server's messages itself, redacted and rate-limited
/// (`action::tools::server_log`), and its errors reach the run's record redacted.
fn not_the_mcp_sdk() -> tracing_subscriber::filter::FilterFn {
    tracing_subscriber::filter::filter_fn(|m| {
        let t = m.target();
        !(t == "rmcp" || t.starts_with("rmcp::"))
    })
}

/// `--max-concurrent`, or the capacity the cores and the process limits allow (logged).
fn max_concurrent(given: Option<u64>) -> usize {
    match given {
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        None => {
            let inputs = engine::capacity::Inputs::current();
            let n = inputs.capacity();
            tracing::info!(
                max_concurrent = n,
                cores = inputs.cores,
                process_limit = ?inputs.processes,
                file_limit = ?inputs.files,
                "run capacity from the cores and limits (--max-concurrent not given)"
            );
            n
        }
    }
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
    // Before logging, which creates its directory in a file store.
    let opened = store_wait::first_open(&location)?;
    let logging = init_logging(&location, run.log_to);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let metrics = opts.metrics_addr.map(|_| Arc::new(metrics::Metrics::new()));

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let log_rows = logging.in_files;
    rt.block_on(async move {
        let signals = match mode {
            Mode::Headless => Some(HeadlessSignals::install()?),
            Mode::Console => None,
        };
        // Bind before anything runs: a taken port is reported before the engine claims.
        let listener = match opts.metrics_addr {
            Some(a) => Some(http::bind(a).await.with_context(|| {
                format!("binding --metrics-addr {a} (is another process using it?)")
            })?),
            None => None,
        };
        let metered = metrics.as_ref();
        let Some(store) = store_wait::ready(&location, opened, listener.as_ref(), metered).await?
        else {
            return Ok(ExitCode::SUCCESS);
        };
        let warnings =
            apply_at_start(loaded.as_ref(), jobs.as_deref(), &store, &clock, mode).await?;
        let mut cfg = EngineConfig::new(engine::new_owner_id());
        cfg.max_concurrent = max_concurrent(run.max_concurrent);
        cfg.shutdown_grace = opts.grace;
        cfg.max_clock_offset = opts.max_clock_offset.resolve(loaded.as_ref());
        cfg.ahead_limit = opts
            .max_clock_offset
            .ahead_limit(loaded.as_ref(), !location.contains("://"));
        cfg.publish_snapshots = mode == Mode::Console;
        cfg.kernel_waits = true;
        cfg.spool = Some(engine::spool::path_for(&store.location()));
        // Escape hatch (and the benchmark's "before"): poll only, e.g. behind a connection
        // pooler that drops LISTEN, or when inotify watches are exhausted.
        cfg.change_signal = std::env::var("CRONSOLE_CHANGE_SIGNAL").map_or(true, |v| v != "off");
        let deps = engine::RunDeps::from_env().context("preparing HTTP clients")?;
        if crate::cli::early_signals::stops() > 0 {
            // Stopped while starting: the jobs file is applied, nothing was claimed.
            eprintln!("cronsole: stop signal during start-up: stopped before the engine started");
            tracing::info!("stop signal during start-up: the engine was not started");
            return Ok(ExitCode::SUCCESS);
        }
        let change_poll = cfg.change_poll;
        let handle = engine::spawn(cfg, Arc::clone(&store), Arc::clone(&clock), deps)?;
        tracing::info!(store = %store.location(), "engine started");
        // Health: the loop turns at least every change_poll; allow 40 of them (10 s) of quiet.
        let max_quiet = (change_poll * 40).max(std::time::Duration::from_secs(10));
        let service_stop = tokio_util::sync::CancellationToken::new();
        if let (Some(m), Some(listener)) = (&metrics, listener) {
            let ep = http::Endpoint {
                metrics: Arc::clone(m),
                store: Arc::clone(&store),
                clock: Arc::clone(&clock),
                heartbeat: Arc::clone(&handle.heartbeat),
                engine_stopped: handle.shutdown.clone(),
                health: handle.health.clone(),
                max_quiet,
            };
            serve_metrics(ep, listener, handle.events.subscribe(), mode, &service_stop);
        }
        let notifier = sdnotify::Notifier::from_env();
        tokio::spawn(sdnotify::supervise(
            notifier.clone(),
            Arc::clone(&handle.heartbeat),
            max_quiet,
            format!("running jobs from {}", store.location()),
            service_stop.clone(),
        ));
        let reload = Reload {
            jobs: jobs.clone(),
            store: Arc::clone(&store),
            clock: Arc::clone(&clock),
            notifier: notifier.clone(),
        };
        let r = match mode {
            Mode::Headless => match signals {
                Some(sig) => {
                    let out = Output {
                        format: log_format,
                        log_rows,
                    };
                    run_headless(handle, out, opts.run_for, reload, sig).await
                }
                None => Err(anyhow::anyhow!("headless mode without its signal handlers")),
            },
            Mode::Console => {
                let dry = super::dry_run::console_runner(location.clone());
                run_console(handle, store, clock, opts.run_for, dry, warnings).await
            }
        };
        notifier.send("STOPPING=1");
        service_stop.cancel();
        r
    })
}

/// Apply the jobs file (when one was given) before the engine starts, and say so; returns the
/// file's warnings, which also go to the log and to the console's notice line.
async fn apply_at_start(
    loaded: Option<&config::Loaded>,
    jobs: Option<&Path>,
    store: &Arc<dyn Store>,
    clock: &Arc<dyn Clock>,
    mode: Mode,
) -> Result<Vec<String>> {
    // The jobs file's warnings go to the log too, and to the console's notice line.
    let mut warnings: Vec<String> = loaded
        .iter()
        .flat_map(|l| &l.warnings)
        .map(super::inert)
        .collect();
    for w in &warnings {
        tracing::warn!("{w}");
    }
    if let Some(l) = loaded {
        let file = l.file.clone();
        let now = clock.now();
        let report = engine::blocking(store, move |s| s.apply(&file, now)).await?;
        let summary = format!(
            "applied {}: {}",
            jobs.map(|p| p.display().to_string()).unwrap_or_default(),
            apply_counts(&report, false)
        );
        tracing::info!("{summary}");
        for r in &report.recounted {
            tracing::info!("{}", super::recount_line(r));
        }
        // Jobs another file put in this store are retired: said first on the notice line.
        let retired = jobs.and_then(|p| super::retired_note(&report, p));
        if let Some(note) = &retired {
            tracing::warn!("{note}");
            warnings.insert(0, note.clone());
        }
        if mode == Mode::Headless {
            if let Some(note) = &retired {
                eprintln!("cronsole: {note}");
            }
            eprintln!(
                "{}",
                super::inert(&format!("cronsole: {summary}; store {}", store.location()))
            );
            for r in &report.recounted {
                eprintln!("cronsole: {}", super::recount_line(r));
            }
        }
    } else if mode == Mode::Headless {
        eprintln!(
            "cronsole: no jobs file given (--jobs FILE); running the jobs already in {}",
            store.location()
        );
    }
    Ok(warnings)
}

/// Serve `/metrics` and `/healthz` on the listener bound at start, fed by the engine's events.
fn serve_metrics(
    ep: http::Endpoint,
    listener: tokio::net::TcpListener,
    events: tokio::sync::broadcast::Receiver<engine::Event>,
    mode: Mode,
    service_stop: &tokio_util::sync::CancellationToken,
) {
    if let Ok(a) = listener.local_addr() {
        tracing::info!(addr = %a, "serving /metrics and /healthz");
        if mode == Mode::Headless {
            eprintln!("cronsole: metrics at http://{a}/metrics, health at http://{a}/healthz");
        }
    }
    tokio::spawn(metrics::watch_health(
        Arc::clone(&ep.metrics),
        ep.health.clone(),
    ));
    tokio::spawn(metrics::feed(
        Arc::clone(&ep.metrics),
        events,
        Arc::clone(&ep.clock),
    ));
    tokio::spawn(http::serve(listener, ep, service_stop.clone()));
}

/// The headless signal streams, installed before the engine starts so a signal during start-up
/// is a graceful shutdown (or a reload), never the default disposition (death holding leases).
struct HeadlessSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl HeadlessSignals {
    fn install() -> Result<HeadlessSignals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(HeadlessSignals {
            term: signal(SignalKind::terminate()).context("installing SIGTERM handler")?,
            int: signal(SignalKind::interrupt()).context("installing SIGINT handler")?,
            hup: signal(SignalKind::hangup()).context("installing SIGHUP handler")?,
        })
    }
}

/// What SIGHUP needs to re-apply the jobs file.
struct Reload {
    jobs: Option<PathBuf>,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    notifier: sdnotify::Notifier,
}

impl Reload {
    /// Re-read and apply the jobs file; errors are reported and change nothing.
    async fn apply(&self) {
        let Some(path) = self.jobs.clone() else {
            eprintln!("cronsole: SIGHUP: no jobs file to re-apply (start with --jobs FILE)");
            return;
        };
        self.notifier.send("STATUS=re-applying the jobs file");
        let loaded = match config::load_file(&path) {
            Ok(l) => l,
            Err(e) => {
                let msg = format!(
                    "cronsole: SIGHUP: {} has errors; the running definitions stay:\n{e}",
                    path.display()
                );
                eprintln!("{}", super::inert(&msg));
                tracing::error!(file = %path.display(), "reload refused: the jobs file has errors");
                self.notifier.send(&format!(
                    "STATUS=reload of {} refused (errors); running the previous definitions",
                    path.display()
                ));
                return;
            }
        };
        for w in &loaded.warnings {
            eprintln!("{}", super::inert(w));
        }
        let now = self.clock.now();
        let file = loaded.file;
        match engine::blocking(&self.store, move |s| s.apply(&file, now)).await {
            Ok(report) => {
                let summary = format!(
                    "re-applied {}: {}",
                    path.display(),
                    apply_counts(&report, false)
                );
                tracing::info!("{summary}");
                eprintln!("{}", super::inert(&format!("cronsole: SIGHUP: {summary}")));
                for r in &report.recounted {
                    tracing::info!("{}", super::recount_line(r));
                    eprintln!("cronsole: SIGHUP: {}", super::recount_line(r));
                }
                self.notifier.send(&format!("STATUS={summary}"));
            }
            Err(e) => {
                tracing::error!(error = %e, "reload: applying the jobs file failed");
                let msg = format!("cronsole: SIGHUP: applying {} failed: {e}", path.display());
                eprintln!("{}", super::inert(&msg));
            }
        }
    }
}

/// Wait for SIGINT/SIGTERM (or `--for`); first → graceful, second → hard stop. SIGHUP
/// re-applies the jobs file meanwhile.
async fn supervise(
    handle: &EngineHandle,
    run_for: Option<std::time::Duration>,
    reload: Reload,
    signals: HeadlessSignals,
) -> Result<()> {
    let HeadlessSignals {
        mut term,
        mut int,
        mut hup,
    } = signals;
    let deadline = async {
        match run_for {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(deadline);
    // The counts since `main` are the truth (see `early_signals`); the streams only wake us.
    use crate::cli::early_signals::{hangups, stops};
    if hangups() > 0 {
        // A SIGHUP during start-up may have come after the file was read: apply it again.
        reload.apply().await;
    }
    if stops() > 0 {
        eprintln!("cronsole: stop signal during start-up: shutting down");
    } else {
        loop {
            tokio::select! {
                _ = term.recv() => { eprintln!("cronsole: SIGTERM: shutting down (signal again to cancel in-flight runs)"); break; }
                _ = int.recv() => { eprintln!("cronsole: interrupt: shutting down (Ctrl-C again to cancel in-flight runs)"); break; }
                _ = hup.recv() => reload.apply().await,
                _ = &mut deadline => break,
                _ = handle.shutdown.cancelled() => break,
            }
        }
    }
    handle.shutdown.cancel();
    let hard = handle.hard_stop.clone();
    tokio::spawn(async move {
        // A stream may still hold the wake-up of the signal counted above: only a second
        // counted stop signal cancels the runs.
        while stops() < 2 {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        eprintln!("cronsole: cancelling in-flight runs now");
        hard.cancel();
    });
    Ok(())
}

/// What headless mode writes for each row: its stdout format, and whether the log files get a
/// line per row too.
struct Output {
    format: LogFormat,
    log_rows: bool,
}

async fn run_headless(
    handle: EngineHandle,
    out: Output,
    run_for: Option<std::time::Duration>,
    reload: Reload,
    signals: HeadlessSignals,
) -> Result<ExitCode> {
    let printer = tokio::spawn(crate::cli::headless::print_events(
        handle.events.subscribe(),
        out.format,
        out.log_rows,
        std::io::stdout(),
        std::io::stderr(),
    ));
    supervise(&handle, run_for, reload, signals).await?;
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
    dry_run: crate::tui::DryRunner,
    warnings: Vec<String>,
) -> Result<ExitCode> {
    let stop = tokio_util::sync::CancellationToken::new();
    // The terminal is the console's: the runs go to the log as they end.
    tokio::spawn(crate::cli::headless::log_events(handle.events.subscribe()));
    let deps = crate::tui::ConsoleDeps {
        snapshots: handle.snapshots.clone(),
        events: handle.events.subscribe(),
        commands: handle.commands.clone(),
        store,
        clock,
        stop: stop.clone(),
        dry_run: Some(dry_run),
        warnings,
        health: Some(handle.health.clone()),
        // The engine's runs read their keys from this process's environment (as a model call
        // does: a blank value is no key).
        key_env: Some(Arc::new(|var: &str| {
            crate::action::llm::process_env(var).is_some_and(|k| !k.trim().is_empty())
        })),
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
    let ui = crate::tui::run(deps).await;
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
    // The counts since `main` are the truth (see `early_signals`); the streams only wake us,
    // and one may still hold the wake-up of a signal already counted.
    let counted = || crate::cli::early_signals::stops() + crate::cli::early_signals::hangups();
    Ok(tokio::spawn(async move {
        let mut seen = 0;
        loop {
            if counted() == seen {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                    _ = hup.recv() => {}
                }
                continue;
            }
            let now = counted();
            let new = now - seen;
            seen = now;
            // The first signal closes the console; any after it (in the same burst too) is a
            // hard stop.
            if stop.is_cancelled() || new >= 2 {
                hard.cancel();
            }
            stop.cancel();
            shutdown.cancel();
        }
    }))
}

/// A damaged spool file is damaged input, like a damaged store file: exit 2, not 1.
fn engine_result(res: Result<(), engine::EngineError>) -> Result<()> {
    match res {
        Err(e @ engine::EngineError::Spool(engine::spool::SpoolError::Corrupt { .. })) => {
            Err(bad_input(e.to_string()))
        }
        // The store's own error (a damaged store: exit 2, naming the file).
        Err(engine::EngineError::Store(e)) => Err(anyhow::Error::new(e)),
        other => other.map_err(anyhow::Error::new),
    }
}

/// Completions that could be neither written nor spooled are printed on stderr, one JSON line
/// each, so that nothing a run produced vanishes without a trace (the exit code is 1).
fn report_lost(res: &Result<(), engine::EngineError>) {
    if let Err(engine::EngineError::Unwritten { lost, .. }) = res {
        for e in lost {
            if let Ok(line) = crate::text::to_json(e) {
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
    let _logging = init_logging(&location, run.log_to);
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
            crate::attach::start(Arc::clone(&store), Arc::clone(&clock), owner, stop.clone())
                .await?;
        let deps = crate::tui::ConsoleDeps {
            snapshots: attached.snapshots,
            events: attached.events,
            commands: attached.commands,
            store,
            clock,
            stop: stop.clone(),
            dry_run: Some(super::dry_run::console_runner(location.clone())),
            warnings: Vec::new(),
            health: None,
            key_env: None,
        };
        // No engine here: any signal just closes the console (terminal restored).
        let nothing = tokio_util::sync::CancellationToken::new();
        let signals = console_signals(stop.clone(), nothing.clone(), nothing)?;
        let res = crate::tui::run(deps).await;
        signals.abort();
        stop.cancel();
        let _ = attached.task.await;
        res?;
        Ok(ExitCode::SUCCESS)
    })
}

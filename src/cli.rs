//! Command-line definitions (clap derive) and nothing else: SPEC §13.2.
//!
//! Owns: flags, subcommands and their help text. Must not touch: behaviour — `main.rs` and the
//! binary's `cmd/` modules act on what is parsed here.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "cronsole",
    version,
    about = "Scheduled LLM-agent jobs, shell commands and change monitors, with a live console",
    long_about = "cronsole runs the jobs declared in a YAML jobs file on their schedules and draws a \
live console over them. Without a subcommand it applies the jobs file to the store, starts the \
engine and opens the console (headless automatically when stdout is not a terminal)."
)]
pub struct Cli {
    /// The jobs file to apply before starting (default: jobs.yaml if present)
    #[arg(long, global = true, value_name = "FILE")]
    pub jobs: Option<PathBuf>,

    /// Store directory or postgres:// URL (default: .cronsole/ beside the jobs file)
    #[arg(long, global = true, env = "CRONSOLE_STORE", value_name = "DIR|URL")]
    pub store: Option<String>,

    /// Run headless even on a terminal: one line per run on stdout
    #[arg(long, global = true)]
    pub no_tui: bool,

    #[command(flatten)]
    pub run: RunOpts,

    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Options of the engine (top level and `run`).
#[derive(Debug, Args, Clone)]
pub struct RunOpts {
    /// Stop after this long (e.g. 90s, 5m, 1h30m) with a graceful shutdown
    #[arg(long = "for", global = true, value_name = "DURATION")]
    pub run_for: Option<String>,

    /// Format of the per-run lines on stdout in headless mode
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Runs this process may have in flight at once (its claim limit)
    #[arg(long, global = true, default_value_t = 8, value_name = "N")]
    pub max_concurrent: usize,

    /// How long a shutdown waits for in-flight runs before cancelling them
    #[arg(long, global = true, default_value = "30s", value_name = "DURATION")]
    pub shutdown_grace: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the engine headless (always, even on a terminal)
    Run,
    /// Draw the console; with --attach, over a store other owners run (no engine here)
    Console(ConsoleArgs),
    /// Check a jobs file: every error and warning with file:line:col, and each job's next slots
    Validate(FileArg),
    /// Print the next (or previous) slots of a schedule expression
    Next(NextArgs),
    /// Sync a jobs file's definitions into the store and print what changed
    Apply(FileArg),
    /// List jobs with their runtime state: NEXT / LEFT / LAST / PASSED like list-timers
    Jobs(JobsArgs),
    /// Show history rows, newest first
    History(HistoryArgs),
    /// Pause a job (every owner sharing the store honours it), optionally saying why
    Pause(PauseArgs),
    /// Resume a paused job at its next future slot
    Resume(NameArg),
    /// Run a job once now (never while it is already running)
    Trigger(NameArg),
    /// Show the monitor diff of a job's latest (or given) changed run
    Diff(DiffArgs),
    /// Run one monitor probe with every safety guarantee and print what it saw
    Probe(ProbeArgs),
    /// Cost and run statistics, per job and global
    Stats(JsonFlag),
    /// Retry a failed, abandoned or missed run now, as a run of its own (trigger: retry)
    Retry(RetryArgs),
    /// Cancel a job's running run (its process tree is killed), or drop what it has queued
    Cancel(CancelArgs),
    /// Everything about one job: definition, schedule in words, next slots, state, runs, spend
    Describe(DescribeArgs),
    /// Run the slots of a past window, each a normal run with its own row (trigger: backfill)
    Backfill(BackfillArgs),
}

#[derive(Debug, Args)]
pub struct JobsArgs {
    /// Machine-readable JSON output (times stay RFC 3339 UTC)
    #[arg(long)]
    pub json: bool,
    /// Show times in UTC instead of local time
    #[arg(long)]
    pub utc: bool,
}

#[derive(Debug, Args)]
pub struct PauseArgs {
    /// Job name
    pub name: String,
    /// Why it is paused (shown in `jobs`, `describe` and the console)
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
}

#[derive(Debug, Args)]
pub struct RetryArgs {
    /// The run to retry (the run id `history --json` prints)
    pub run_id: String,
}

#[derive(Debug, Args)]
pub struct CancelArgs {
    /// A job name, or the run id of a running run
    #[arg(value_name = "NAME|RUN_ID")]
    pub target: String,
}

#[derive(Debug, Args)]
pub struct DescribeArgs {
    /// Job name
    pub name: String,
    /// Machine-readable JSON output
    #[arg(long)]
    pub json: bool,
    /// Show times in UTC instead of local time
    #[arg(long)]
    pub utc: bool,
}

#[derive(Debug, Args)]
pub struct BackfillArgs {
    /// Job name
    pub name: String,
    /// Start of the window (RFC 3339, or YYYY-MM-DDTHH:MM[:SS] in the job's time zone)
    #[arg(long, value_name = "TIME")]
    pub from: String,
    /// End of the window, inclusive and not in the future (same forms as --from)
    #[arg(long, value_name = "TIME")]
    pub to: String,
}

#[derive(Debug, Args)]
pub struct ConsoleArgs {
    /// Draw over the store without starting an engine in this process
    #[arg(long)]
    pub attach: bool,
}

#[derive(Debug, Args)]
pub struct FileArg {
    /// Path of the jobs file
    pub file: PathBuf,
}

#[derive(Debug, Args)]
pub struct NameArg {
    /// Job name
    pub name: String,
}

#[derive(Debug, Args)]
pub struct JsonFlag {
    /// Machine-readable JSON output
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct NextArgs {
    /// Schedule text: a cron expression, a macro, or any form of the schedule grammar
    pub expr: String,
    /// Time zone (IANA name)
    #[arg(long, default_value = "UTC")]
    pub tz: String,
    /// Slots strictly after this instant (RFC 3339; default now)
    #[arg(long, value_name = "RFC3339", conflicts_with = "before")]
    pub after: Option<String>,
    /// Previous slots strictly before this instant (RFC 3339), newest first
    #[arg(long, value_name = "RFC3339")]
    pub before: Option<String>,
    /// How many slots
    #[arg(long, default_value_t = 5)]
    pub count: usize,
    /// Print {"expr","tz","slots":[...]}
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// Only this job
    #[arg(long)]
    pub job: Option<String>,
    /// Only this status (succeeded, failed, skipped, no_change, missed, abandoned)
    #[arg(long)]
    pub status: Option<String>,
    /// Only rows at or after this instant (RFC 3339) or this long ago (e.g. 2h)
    #[arg(long)]
    pub since: Option<String>,
    /// At most this many rows
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    /// JSON lines with the SPEC §4 fields
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// Job name
    pub name: String,
    /// A specific run id instead of the latest changed run
    #[arg(long, value_name = "RUN_ID")]
    pub run: Option<String>,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["url", "command"])))]
pub struct ProbeArgs {
    /// Fetch this http(s) URL
    #[arg(long)]
    pub url: Option<String>,
    /// Run this shell command
    #[arg(long)]
    pub command: Option<String>,
    /// Allow private, loopback and link-local addresses (URL only)
    #[arg(long)]
    pub allow_private: bool,
}

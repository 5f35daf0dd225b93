//! Command-line definitions (clap derive) and nothing else. `--help`, the man page and the
//! completions are all generated from them, so what they say is what the parser accepts.
//!
//! Owns: flags, subcommands, their help text and their bounds. Must not touch: behaviour —
//! the `cmd` modules beside this one act on what is parsed here.
//!
//! Layout: every subcommand's arguments live in their own struct (`XxxArgs`), so a new
//! subcommand is one enum variant plus one struct. Only two options are global: `--store` and
//! `--jobs` name *which store* a command works on (like `git -C`), and the commands that use no
//! store (`next`, `validate`, `probe`, `completions`, `man`, `init`) refuse them when given on
//! the command line. Engine options ([`RunOpts`]) belong to the default mode, `run` and
//! `console` only; given to any other command they are an error ([`misplaced`]).
//!
//! Bounds, so no flag reaches the engine unchecked: `next --count` 0..=10 000, `history --limit` and `logs -n` 1..=100 000,
//! `history --offset` 0..=1 000 000,
//! `--max-concurrent` 1..=1024, `--for` 1 s..=100 years, `--shutdown-grace` 1 s..=24 h
//! (the durations are checked where they are parsed, in `cmd`).

use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{ArgMatches, Args, Parser, Subcommand, ValueEnum};

/// Most slots `next --count` prints.
pub const MAX_COUNT: u64 = 10_000;
/// Most rows `history --limit` prints in one page.
pub const MAX_LIMIT: u64 = 100_000;
/// Deepest page `history --offset` reaches.
pub const MAX_OFFSET: u64 = 1_000_000;
/// Most runs one process may have in flight (`--max-concurrent`).
pub const MAX_CONCURRENT: u64 = 1024;

#[derive(Debug, Parser)]
#[command(
    name = "cronsole",
    version,
    about = "Scheduled LLM-agent jobs, shell commands and change monitors, with a live console",
    long_about = "cronsole runs the jobs declared in a YAML jobs file on their schedules and draws a \
live console over them. Without a subcommand it applies the jobs file to the store, starts the \
engine and opens the console (headless automatically when stdout is not a terminal)."
)]
/// A parsed command line ([`parse`]), ready for [`crate::cli::run`].
pub struct Cli {
    /// The jobs file (default: jobs.yaml if present); store commands use the store beside it
    #[arg(long, global = true, value_name = "FILE")]
    pub jobs: Option<PathBuf>,

    /// Store directory or postgres:// URL (default: .cronsole/ beside the jobs file)
    #[arg(long, global = true, env = "CRONSOLE_STORE", value_name = "DIR|URL")]
    pub store: Option<String>,

    /// Run headless even on a terminal: one line per history row on stdout (default mode only)
    #[arg(long)]
    pub no_tui: bool,

    /// Format of the per-run lines on stdout in headless mode
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Engine options of the default mode (no subcommand).
    #[command(flatten)]
    pub run: RunOpts,

    #[command(subcommand)]
    pub(crate) command: Option<Command>,
}

/// Options of the engine: the default mode, `run` and `console`, and no other command.
#[derive(Debug, Args, Clone)]
pub struct RunOpts {
    /// Stop after this long (e.g. 90s, 5m, 1h30m; 1s to 100 years) with a graceful shutdown
    #[arg(long = "for", value_name = "DURATION")]
    pub run_for: Option<String>,

    /// Runs this process may have in flight at once (its claim limit; 1 to 1024). Default: 64
    /// per core, capped by the user's process limit (3 processes a run, half the limit) and the
    /// open-file limit (8 descriptors a run)
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=MAX_CONCURRENT))]
    pub max_concurrent: Option<u64>,

    /// How long a shutdown waits for in-flight runs before cancelling them (1s to 24h)
    #[arg(long, default_value = "30s", value_name = "DURATION")]
    pub shutdown_grace: String,

    /// Claim nothing new while this host's clock is further than this from the store's (the
    /// database's on PostgreSQL), measured at every heartbeat: 1s to 24h; `auto`: a quarter of
    /// the jobs file's shortest lease_seconds, at most 60s (7.5s for the default 30s lease);
    /// `off`: only while ahead of the store's by more than that quarter (one host whose clock is
    /// the store's)
    #[arg(long, default_value = "auto", value_name = "DURATION")]
    pub max_clock_offset: String,

    /// Serve Prometheus metrics at /metrics and a health check at /healthz on HOST:PORT
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<String>,

    /// Where logs go: files under the store's logs/ directory, or stderr in journald's format
    /// (auto: stderr when running under systemd with the journal, else the directory)
    #[arg(long, value_enum, default_value_t = LogTo::Auto)]
    pub log_to: LogTo,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogTo {
    Auto,
    Dir,
    Stderr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the engine headless (always, even on a terminal)
    Run(RunArgs),
    /// Draw the console; with --attach, over a store other owners run (no engine here)
    Console(ConsoleArgs),
    /// Check a jobs file: every error and warning with file:line:col, and each job's next slots
    Validate(JobsFileArg),
    /// Print the next (or previous) slots of a schedule expression
    Next(NextArgs),
    /// Sync a jobs file's definitions into the store and print what changed
    Apply(JobsFileArg),
    /// List jobs with their runtime state: NEXT / LEFT / LAST / PASSED like list-timers
    Jobs(JobsArgs),
    /// Show history rows, newest first
    History(HistoryArgs),
    /// Pause jobs (every owner sharing the store honours it), optionally saying why
    Pause(PauseArgs),
    /// Resume a paused job at its next future slot
    Resume(SelectArgs),
    /// Run a job once now (never while it is already running)
    Trigger(SelectArgs),
    /// Show the monitor diff of a job's latest (or given) changed run
    Diff(DiffArgs),
    /// Run one monitor probe with every safety guarantee and print what it saw
    Probe(ProbeArgs),
    /// Cost and run statistics, per job and global
    Stats(JsonFlag),
    /// Print a shell completion script (e.g. `cronsole completions bash > /etc/bash_completion.d/cronsole`)
    Completions(CompletionsArgs),
    /// Print the man page (roff) on stdout (e.g. `cronsole man > cronsole.1`)
    Man,
    /// Write a commented starter jobs file (never overwrites an existing file)
    Init(InitArgs),
    /// Edit the jobs file in $VISUAL/$EDITOR, validate it, show the plan of changes, apply on confirmation
    Edit,
    /// Print the store's log files (the engine's log; -f to follow)
    Logs(LogsArgs),
    /// Verify a whole store (file or PostgreSQL) and list every problem with its location;
    /// reads only. Exit 0 when sound, 2 when damaged
    Check(JsonFlag),
    /// Retry a failed, abandoned or missed run now, as a run of its own (trigger: retry)
    Retry(RetryArgs),
    /// Cancel a job's running run (its process tree is killed), or drop what it has queued
    Cancel(CancelArgs),
    /// Everything about one job: definition, schedule in words, next slots, state, runs, spend
    Describe(DescribeArgs),
    /// Run the slots of a past window, each a normal run with its own row (trigger: backfill)
    Backfill(BackfillArgs),
    /// Show what one run of a job would do — gate, exact prompt, model, price ceiling, budgets,
    /// sinks — without calling the model, delivering or recording anything
    DryRun(DryRunArgs),
    /// Convert another scheduler's file into a cronsole jobs file (`import praisonai FILE`),
    /// printing what could not be mapped
    Import(ImportArgs),
    /// Connect to every MCP server: protocol versions, tools with their pinned hashes, what each
    /// agent is allowed and offered; --accept SERVER re-pins a server's tools
    Tools(ToolsArgs),
    /// List the tool calls awaiting an operator's approval (`approve:`), on every host, each
    /// marked when its owner is not live
    Approvals(JsonFlag),
    /// Approve the tool call a run awaits approval for: its owner runs it. Exit 1 when the run
    /// no longer waits; exit 3 when the approval is recorded but the run's owner is not live
    /// (nothing runs unless that owner comes back)
    #[command(mut_arg("reason", |a| a.help(
        "Why: recorded with the approval on the call's record (`history --json`); the model \
         never sees it"
    )))]
    Approve(AnswerArgs),
    /// Deny the tool call a run awaits approval for: the model gets the denial as its result.
    /// Exit 1 when the run no longer waits; exit 3 when the denial is recorded but the run's
    /// owner is not live
    #[command(mut_arg("reason", |a| a.help(
        "Why: recorded with the denial on the call's record (`history --json`); the model \
         reads `denied by an operator: TEXT` as the tool's result"
    )))]
    Deny(AnswerArgs),
}

/// `cronsole approve RUN_ID` / `cronsole deny RUN_ID [--reason TEXT]`.
#[derive(Debug, Args)]
pub struct AnswerArgs {
    /// The run awaiting approval (`cronsole approvals` lists them)
    pub run_id: String,
    /// Answer only this call of the run (its id, as `cronsole approvals` lists it): refused,
    /// with nothing recorded, when the call that waits is another
    #[arg(long = "call", value_name = "CALL_ID")]
    pub call: Option<String>,
    /// Why: recorded with the answer on the call's record (`history --json`); each command's help
    /// says who reads it
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
}

/// Where `import` reads from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ImportFrom {
    /// A PraisonAI scheduler YAML (its `jobs:` list form)
    Praisonai,
}

/// `cronsole import praisonai FILE`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The scheduler the file is from
    #[arg(value_enum)]
    pub from: ImportFrom,
    /// The file to convert
    pub file: std::path::PathBuf,
    /// Write the jobs file here (never over an existing file) instead of on stdout
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,
    /// Provider of the one agent the converted jobs use (openai or anthropic)
    #[arg(long, default_value = "openai")]
    pub provider: String,
    /// Model of that agent
    #[arg(long, default_value = "gpt-4o-mini")]
    pub model: String,
    /// The variable holding that agent's API key
    #[arg(long, default_value = "OPENAI_API_KEY", value_name = "VAR")]
    pub api_key_env: String,
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
    #[command(flatten)]
    pub select: SelectArgs,
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
pub struct ToolsArgs {
    /// Only this agent's allowed and offered tools (and the servers it names)
    #[arg(long, value_name = "AGENT")]
    pub agent: Option<String>,
    /// Re-pin every tool this server lists now (after reviewing a changed definition);
    /// repeat for several servers
    #[arg(long, value_name = "SERVER")]
    pub accept: Vec<String>,
    /// Seconds to wait for each server to start and list its tools
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    pub timeout: f64,
    /// Machine-readable JSON output
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct BackfillArgs {
    /// Job name
    pub name: String,
    /// Start of the window: RFC 3339, a wall time or date in the job's zone, today, yesterday, 2h (ago)
    #[arg(long, value_name = "TIME")]
    pub from: String,
    /// End of the window, inclusive and not in the future (the same forms as --from)
    #[arg(long, value_name = "TIME")]
    pub to: String,
}

impl Command {
    /// The subcommand's name as typed.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Run(_) => "run",
            Command::Console(_) => "console",
            Command::Validate(_) => "validate",
            Command::Next(_) => "next",
            Command::Apply(_) => "apply",
            Command::Jobs(_) => "jobs",
            Command::History(_) => "history",
            Command::Pause(_) => "pause",
            Command::Resume(_) => "resume",
            Command::Trigger(_) => "trigger",
            Command::Diff(_) => "diff",
            Command::Probe(_) => "probe",
            Command::Stats(_) => "stats",
            Command::Completions(_) => "completions",
            Command::Man => "man",
            Command::Init(_) => "init",
            Command::Edit => "edit",
            Command::Logs(_) => "logs",
            Command::Check(_) => "check",
            Command::Retry(_) => "retry",
            Command::Cancel(_) => "cancel",
            Command::Describe(_) => "describe",
            Command::Backfill(_) => "backfill",
            Command::DryRun(_) => "dry-run",
            Command::Import(_) => "import",
            Command::Tools(_) => "tools",
            Command::Approvals(_) => "approvals",
            Command::Approve(_) => "approve",
            Command::Deny(_) => "deny",
        }
    }

    /// Whether the command reads or writes a store (and so takes `--store`/`--jobs`).
    pub fn uses_store(&self) -> bool {
        !matches!(
            self,
            Command::Validate(_)
                | Command::Next(_)
                | Command::Probe(_)
                | Command::Completions(_)
                | Command::Man
                | Command::Init(_)
                | Command::Import(_)
        )
    }
}

/// `cronsole run`: the engine, always headless.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The jobs file (or `--jobs FILE`; default: jobs.yaml here if present)
    #[arg(value_name = "FILE")]
    pub file: Option<PathBuf>,

    /// Format of the per-run lines on stdout
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    #[command(flatten)]
    pub run: RunOpts,
}

/// `cronsole console`.
#[derive(Debug, Args)]
pub struct ConsoleArgs {
    /// Draw over the store without starting an engine in this process
    #[arg(long, conflicts_with_all = ["max_concurrent", "shutdown_grace", "max_clock_offset"])]
    pub attach: bool,

    #[command(flatten)]
    pub run: RunOpts,
}

/// The jobs file of `validate` and `apply`, as an argument or `--jobs FILE` (one of them).
#[derive(Debug, Args)]
pub struct JobsFileArg {
    /// The jobs file (or `--jobs FILE`; default: jobs.yaml here)
    #[arg(value_name = "FILE")]
    pub file: Option<PathBuf>,
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
pub struct DryRunArgs {
    /// Job name
    pub name: String,
    /// Do not run the job's gate (pre_run command or monitor probe)
    #[arg(long)]
    pub no_gates: bool,
    /// Machine-readable JSON output
    #[arg(long)]
    pub json: bool,
}

/// Which jobs a bulk action (`pause`, `resume`, `trigger`) applies to: the selectors add up.
#[derive(Debug, Args)]
pub struct SelectArgs {
    /// Job names or globs such as 'report-*' or 'db-?' (quote globs from the shell)
    #[arg(value_name = "NAME|GLOB", required_unless_present_any = ["all", "tag"])]
    pub names: Vec<String>,
    /// Jobs carrying this tag (`tags:` in the jobs file); repeat for several
    #[arg(long = "tag", value_name = "TAG")]
    pub tag: Vec<String>,
    /// Every job in the store that is not retired
    #[arg(long, conflicts_with_all = ["names", "tag"])]
    pub all: bool,
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
    #[arg(required_unless_present = "job")]
    pub expr: Option<String>,
    /// Preview the job NAME of the jobs file instead: its schedule, zone, calendars
    /// (`only_on`/`except_on`) and jitter; the instants printed are when each slot fires.
    /// A job the store already holds is shown as the engine will run it, from its stored
    /// next slot
    #[arg(long, value_name = "NAME", conflicts_with_all = ["expr", "tz"])]
    pub job: Option<String>,
    /// The jobs file `--job` reads (default: jobs.yaml here)
    #[arg(long, value_name = "FILE", requires = "job")]
    pub file: Option<std::path::PathBuf>,
    /// Time zone (IANA name, any case)
    #[arg(long, default_value = "UTC")]
    pub tz: String,
    /// Slots strictly after this time (default now): RFC 3339, a wall time or date in --tz, today, in 2h
    #[arg(long, value_name = "TIME", conflicts_with = "before")]
    pub after: Option<String>,
    /// Previous slots strictly before this time, newest first (the same forms as --after)
    #[arg(long, value_name = "TIME")]
    pub before: Option<String>,
    /// How many slots (0 to 10000)
    #[arg(long, default_value_t = 5, value_name = "N",
          value_parser = clap::value_parser!(u64).range(0..=MAX_COUNT))]
    pub count: u64,
    /// Print {"expr","tz","slots":[...]}
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// Only this job
    #[arg(long)]
    pub job: Option<String>,
    /// Only this status, any case (succeeded, failed, skipped, no_change, missed, abandoned)
    #[arg(long)]
    pub status: Option<String>,
    /// Only rows at or after this time: RFC 3339, a wall time or date here, today, yesterday, 2h (ago)
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// At most this many rows (1 to 100000); `-n` as for `logs`
    #[arg(short = 'n', long, default_value_t = 50, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=MAX_LIMIT))]
    pub limit: u64,
    /// Skip this many newest matching rows first (0 to 1000000; reads what it skips: use --page for deep pages)
    #[arg(long, default_value_t = 0, value_name = "N",
          value_parser = clap::value_parser!(u64).range(0..=MAX_OFFSET))]
    pub offset: u64,
    /// Continue after a previous page: the token its output ends with (cheap at any depth)
    #[arg(long, value_name = "TOKEN")]
    pub page: Option<String>,
    /// One JSON object per row (run_id, job, status, slot, trigger, times, attempts, reason, error,
    /// result, diff, model, tokens, cost_usd, delivered, …)
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

/// `cronsole completions SHELL`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `cronsole init [FILE]`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// Where to write the starter jobs file
    #[arg(default_value = "jobs.yaml")]
    pub file: PathBuf,
}

/// `cronsole logs [-f]`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    /// Keep printing lines as they are written (until interrupted)
    #[arg(short, long)]
    pub follow: bool,
    /// Print the last N lines first (1 to 100000)
    #[arg(short = 'n', long, default_value_t = 100, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=MAX_LIMIT))]
    pub lines: u64,
    /// Only the lines about this job (its runs, deliveries and warnings)
    #[arg(long, value_name = "NAME")]
    pub job: Option<String>,
}

/// Ids of the top-level options that belong to the default mode only.
const DEFAULT_MODE_ONLY: &[(&str, &str)] = &[
    ("no_tui", "--no-tui"),
    ("log_format", "--log-format"),
    ("run_for", "--for"),
    ("max_concurrent", "--max-concurrent"),
    ("shutdown_grace", "--shutdown-grace"),
    ("max_clock_offset", "--max-clock-offset"),
];

/// A flag given where it does not belong, which clap's own rules cannot see: an engine option
/// written before a subcommand (`cronsole --for 5s next @daily`), or `--store`/`--jobs` on a
/// command that uses no store. Returns the message for a usage error (exit 2).
pub fn misplaced(cli: &Cli, matches: &ArgMatches) -> Option<String> {
    let cmd = cli.command.as_ref()?;
    for (id, flag) in DEFAULT_MODE_ONLY {
        if matches.value_source(id) == Some(ValueSource::CommandLine) {
            let hint = match (*id, cmd) {
                ("no_tui", _) => "`cronsole run` is always headless".to_string(),
                (_, Command::Run(_) | Command::Console(_)) => {
                    format!(
                        "write it after the subcommand: cronsole {} {flag} …",
                        cmd.name()
                    )
                }
                _ => "it is an engine option (cronsole, run, console)".to_string(),
            };
            return Some(format!(
                "{flag} does not apply to `cronsole {}`: {hint}",
                cmd.name()
            ));
        }
    }
    if !cmd.uses_store() {
        let sub = matches.subcommand().map(|(_, m)| m);
        for (id, flag) in [("store", "--store"), ("jobs", "--jobs")] {
            if id == "jobs" && TAKES_JOBS_FILE.contains(&cmd.name()) {
                continue;
            }
            // `next --job NAME` reads that one job's record when a store holds it.
            if id == "store" && matches!(cmd, Command::Next(n) if n.job.is_some()) {
                continue;
            }
            let given = |m: &ArgMatches| m.value_source(id) == Some(ValueSource::CommandLine);
            if given(matches) || sub.is_some_and(given) {
                return Some(format!(
                    "{flag} does not apply to `cronsole {}`: it uses no store{}",
                    cmd.name(),
                    storeless_hint(id, cmd.name())
                ));
            }
        }
    }
    None
}

/// Where a storeless command takes the jobs file instead of `--jobs` (empty when it reads none).
fn storeless_hint(id: &str, command: &str) -> &'static str {
    match (id, command) {
        ("jobs", "next") => "; a job of a jobs file is `cronsole next --job NAME --file FILE`",
        ("jobs", "import") => "; it reads `cronsole import praisonai FILE`",
        _ => "",
    }
}

/// Storeless subcommands that read a jobs file all the same, named by `--jobs FILE` or their
/// FILE argument alike: `--jobs` is not refused there.
const TAKES_JOBS_FILE: &[&str] = &["validate"];

/// The jobs file given as a command's FILE argument (`validate`, `apply`, `run`) becomes
/// `--jobs`, so every command reads it from one place (`cmd::jobs_file`); given both ways, the
/// two must name the same file.
pub fn fold_file_arg(cli: &mut Cli) -> Result<(), String> {
    let file = match &mut cli.command {
        Some(Command::Validate(a) | Command::Apply(a)) => a.file.take(),
        Some(Command::Run(a)) => a.file.take(),
        _ => None,
    };
    let Some(file) = file else {
        return Ok(());
    };
    match &cli.jobs {
        Some(j) if *j != file => Err(format!(
            "the jobs file is given twice ({} and --jobs {}): give it once, as FILE or --jobs FILE",
            file.display(),
            j.display()
        )),
        _ => {
            cli.jobs = Some(file);
            Ok(())
        }
    }
}

/// Subcommands that use no store (see [`Command::uses_store`]).
const STORELESS: &[&str] = &[
    "validate",
    "next",
    "probe",
    "completions",
    "man",
    "init",
    "import",
];

/// The clap command with help that matches behaviour: the global `--store`/`--jobs` are kept
/// out of the storeless subcommands (a hidden local flag of the same name takes their place, so
/// clap does not propagate the global one there and [`misplaced`] can refuse it).
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    for name in STORELESS {
        cmd = cmd.mut_subcommand(name, |sc| {
            let sc = sc.arg(clap::Arg::new("store").long("store").num_args(1).hide(true));
            if TAKES_JOBS_FILE.contains(name) {
                return sc;
            }
            sc.arg(
                // Same value type as the global `--jobs`: the derive reads it as a path.
                clap::Arg::new("jobs")
                    .long("jobs")
                    .num_args(1)
                    .value_parser(clap::value_parser!(PathBuf))
                    .hide(true),
            )
        });
    }
    cmd
}

/// Parse the process's arguments; clap's own errors and `misplaced` flags exit 2 with usage.
pub fn parse() -> Cli {
    use clap::FromArgMatches;
    let matches = command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Some(msg) = misplaced(&cli, &matches) {
        command()
            .error(clap::error::ErrorKind::ArgumentConflict, msg)
            .exit();
    }
    if let Err(msg) = fold_file_arg(&mut cli) {
        command()
            .error(clap::error::ErrorKind::ArgumentConflict, msg)
            .exit();
    }
    cli
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, FromArgMatches};

    /// `cronsole next --jobs FILE --job a` panicked (the hidden `--jobs` of a storeless command
    /// held a String where the global one is a path); it is refused like `--store` there.
    #[test]
    fn jobs_flag_on_a_storeless_command_is_refused_not_a_panic() {
        let err = parse_from(&["cronsole", "next", "--jobs", "j.yaml", "--job", "a"])
            .expect_err("refused");
        assert!(err.contains("--jobs does not apply"), "{err}");
        assert!(
            err.contains("cronsole next --job NAME --file FILE"),
            "the flag next reads a jobs file with: {err}"
        );
        let err =
            parse_from(&["cronsole", "validate", "--store", "s", "x.yaml"]).expect_err("refused");
        assert!(err.ends_with("it uses no store"), "{err}");
        let err = parse_from(&["cronsole", "next", "--store", "s", "@daily"]).expect_err("refused");
        assert!(err.ends_with("it uses no store"), "{err}");
        // A job of the jobs file may be one the store holds: its stored slots are the truth.
        assert!(parse_from(&["cronsole", "--store", "s", "next", "--job", "a"]).is_ok());
        assert!(parse_from(&["cronsole", "next", "--job", "a", "--store", "s"]).is_ok());
    }

    fn parse_from(args: &[&str]) -> Result<Cli, String> {
        let m = command()
            .try_get_matches_from(args)
            .map_err(|e| e.to_string())?;
        let mut cli = Cli::from_arg_matches(&m).map_err(|e| e.to_string())?;
        if let Some(msg) = misplaced(&cli, &m) {
            return Err(msg);
        }
        fold_file_arg(&mut cli)?;
        Ok(cli)
    }

    /// `validate`, `apply` and `run` take the jobs file as FILE or `--jobs FILE` alike (either
    /// side of the subcommand for `--jobs`); both ways at once must agree, and without either
    /// the commands fall back to jobs.yaml (`cmd::jobs_file`). Their help says so.
    #[test]
    fn validate_apply_and_run_take_the_jobs_file_as_file_or_jobs() {
        for sub in ["validate", "apply", "run"] {
            let want = Some(PathBuf::from("x.yaml"));
            for args in [
                vec!["cronsole", sub, "x.yaml"],
                vec!["cronsole", sub, "--jobs", "x.yaml"],
                vec!["cronsole", "--jobs", "x.yaml", sub],
                vec!["cronsole", sub, "x.yaml", "--jobs", "x.yaml"],
            ] {
                let cli = parse_from(&args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
                assert_eq!(cli.jobs, want, "{args:?}");
            }
            let cli = parse_from(&["cronsole", sub]).unwrap();
            assert_eq!(cli.jobs, None, "{sub}: the default applies later");
            let err = parse_from(&["cronsole", sub, "a.yaml", "--jobs", "b.yaml"]).unwrap_err();
            assert!(err.contains("given twice"), "{sub}: {err}");
            let mut cmd = command();
            cmd.build();
            let help = cmd
                .find_subcommand_mut(sub)
                .unwrap()
                .render_long_help()
                .to_string();
            assert!(help.contains("[FILE]"), "{sub}: {help}");
            assert!(
                help.contains("--jobs FILE`; default: jobs.yaml"),
                "{sub}: {help}"
            );
        }
    }

    #[test]
    fn definition_is_consistent() {
        Cli::command().debug_assert();
        command().debug_assert();
    }

    #[test]
    fn storeless_help_does_not_offer_store_flags() {
        let mut cmd = command();
        cmd.build();
        for name in STORELESS {
            let sc = cmd.find_subcommand_mut(name).unwrap();
            let help = sc.render_long_help().to_string();
            assert!(!help.contains("--store"), "{name}: {help}");
            assert_eq!(
                help.contains("--jobs"),
                TAKES_JOBS_FILE.contains(name),
                "{name}: {help}"
            );
        }
        let sc = cmd.find_subcommand_mut("history").unwrap();
        assert!(sc.render_long_help().to_string().contains("--store"));
    }

    #[test]
    fn engine_flags_only_on_engine_commands() {
        assert!(parse_from(&["cronsole", "next", "@daily", "--max-concurrent", "99"]).is_err());
        let e = parse_from(&["cronsole", "--max-concurrent", "9", "next", "@daily"]).unwrap_err();
        assert!(e.contains("engine option"), "{e}");
        let e = parse_from(&["cronsole", "--for", "5s", "run"]).unwrap_err();
        assert!(e.contains("cronsole run --for"), "{e}");
        assert!(parse_from(&["cronsole", "--no-tui", "run"]).is_err());
        assert!(parse_from(&["cronsole", "run", "--for", "5s", "--max-concurrent", "2"]).is_ok());
        assert!(parse_from(&["cronsole", "--for", "5s", "--no-tui"]).is_ok());
        assert!(parse_from(&["cronsole", "console", "--for", "5s"]).is_ok());
        assert!(parse_from(&["cronsole", "console", "--attach", "--max-concurrent", "2"]).is_err());
        assert!(parse_from(&["cronsole", "history", "--for", "5s"]).is_err());
    }

    #[test]
    fn store_flags_only_on_store_commands() {
        assert!(parse_from(&["cronsole", "--store", "s", "history"]).is_ok());
        assert!(parse_from(&["cronsole", "history", "--store", "s"]).is_ok());
        let e = parse_from(&["cronsole", "next", "@daily", "--store", "s"]).unwrap_err();
        assert!(e.contains("uses no store"), "{e}");
        assert!(parse_from(&["cronsole", "--jobs", "j.yaml", "validate", "j.yaml"]).is_ok());
        assert!(parse_from(&["cronsole", "--jobs", "j.yaml", "probe", "--command", "x"]).is_err());
    }

    #[test]
    fn numeric_bounds() {
        let huge = "18446744073709551615";
        assert!(parse_from(&["cronsole", "next", "* * * * *", "--count", huge]).is_err());
        assert!(parse_from(&["cronsole", "next", "* * * * *", "--count", "10001"]).is_err());
        assert!(parse_from(&["cronsole", "next", "* * * * *", "--count", "0"]).is_ok());
        assert!(parse_from(&["cronsole", "history", "--limit", "0"]).is_err());
        assert!(parse_from(&["cronsole", "history", "--limit", "100001"]).is_err());
        assert!(parse_from(&["cronsole", "history", "-n", "0"]).is_err());
    }

    /// `history -n N` means `--limit N`, as `logs -n N` means its last N lines.
    #[test]
    fn history_takes_n_like_logs() {
        let Ok(cli) = parse_from(&["cronsole", "history", "-n", "3"]) else {
            panic!("history -n 3 is refused");
        };
        let Some(Command::History(h)) = cli.command else {
            panic!("not history: {:?}", cli.command);
        };
        assert_eq!(h.limit, 3);
        assert!(parse_from(&["cronsole", "run", "--max-concurrent", "0"]).is_err());
        assert!(parse_from(&["cronsole", "run", "--max-concurrent", "1025"]).is_err());
    }
}

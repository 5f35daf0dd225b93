//! The ecosystem commands: `completions`, `man`, `init`, `logs` (`edit` has its own module).
//!
//! Owns: generating completion scripts and the man page from the clap definition, the starter
//! jobs file, and printing/following the store's log files. Must not touch: store internals,
//! the engine.
//!
//! Decisions where the issue is silent:
//! - `init` writes `jobs.yaml` (or the given path) with `create_new`, so an existing file is never
//!   touched (exit 2, naming it). The starter file validates and runs offline (commands only).
//! - `logs` prints the last `-n` lines across the daily files of `<store>/logs/` (oldest file
//!   first); `-f` then follows the newest file (polling every 200 ms, switching when a new day's
//!   file appears) until interrupted. A PostgreSQL store logs under `./.cronsole/logs/`, as the
//!   engine does.

use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::cli::args::{Cli, CompletionsArgs, LogsArgs};
use anyhow::{Context, Result};

use super::{bad_input, jobs_file, store_location};

pub fn completions(a: &CompletionsArgs) -> Result<ExitCode> {
    let mut cmd = crate::cli::args::command();
    clap_complete::generate(a.shell, &mut cmd, "cronsole", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}

pub fn man() -> Result<ExitCode> {
    let mut out = Vec::new();
    super::manpage::render(&mut out).context("rendering the man page")?;
    std::io::stdout()
        .write_all(&out)
        .context("writing the man page")?;
    Ok(ExitCode::SUCCESS)
}

/// The starter jobs file: every line either works as is or is a comment explaining the option.
pub const STARTER: &str = r#"# cronsole jobs file — started by `cronsole init`.
# Check it:  cronsole validate jobs.yaml      Run it:  cronsole   (or `cronsole run` headless)
# Schedules: "every 5m", "hourly", "*/15 * * * *", "weekdays at 09:30", "daily at 9am",
#            "at 9am" (once), "in 10m" (once), "at:2026-12-01T09:00" (once).

defaults:
  tz: UTC                 # IANA zone for cron and wall-time schedules
  timeout_seconds: 120    # each attempt's bound; a command also stops at its own
                          # command_timeout_seconds (60 unless the job sets it)
  max_retries: 1          # attempts in all: 1 means no retry

# budget:                 # a hard limit on model spend; without this section: $1.00 per UTC day
#   max_cost_usd: 1.00
#   period: day

# agents:                 # an LLM agent; the key is read from the named variable
#   helper:
#     provider: openai
#     api_key_env: OPENAI_API_KEY
#     model: gpt-4o-mini
#     instructions: "Answer in two sentences."

# delivery:               # where results go; jobs name these under `deliver:`
#   log: { file: .cronsole/deliveries.jsonl }

jobs:
  - name: heartbeat       # a shell command every minute
    schedule: "every 1m"
    command: "echo alive at $(date -u +%H:%M:%S)"

  # - name: morning-summary
  #   schedule: "weekdays at 09:00"
  #   agent: helper
  #   message: "Summarise what an operator should look at today."
  #   deliver: [log]

  # - name: watch-status   # runs only when the monitored output changes
  #   schedule: "every 5m"
  #   monitor: { url: "https://example.com/status" }
  #   command: "echo status page changed"
"#;

pub fn init(file: &Path) -> Result<ExitCode> {
    let mut f = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(file)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(bad_input(format!(
                "{} already exists; cronsole init never overwrites a file (edit it with `cronsole edit`, or name another path)",
                file.display()
            )));
        }
        Err(e) => return Err(bad_input(format!("cannot create {}: {e}", file.display()))),
    };
    f.write_all(STARTER.as_bytes())
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing {}", file.display()))?;
    println!(
        "wrote {}; check it with `cronsole validate {}`, then start with `cronsole`",
        file.display(),
        file.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Where the engine writes its log for this store (`run::init_logging`) and `logs` reads it.
/// A URL store has no directory of its own: each owner logs under its working directory, in a
/// folder named for the URL, so two stores never share a log file (and a file store's `logs/`
/// beside it never answers for a database).
pub fn logs_dir(location: &str) -> PathBuf {
    if location.contains("://") {
        PathBuf::from(".cronsole")
            .join("logs")
            .join(crate::engine::spool::url_tag(location))
    } else {
        Path::new(location).join("logs")
    }
}

/// The log files, oldest first (daily files sort by their date suffix).
fn log_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| {
                    p.is_file()
                        && p.file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with("cronsole.log"))
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

pub fn logs(cli: &Cli, a: &LogsArgs) -> Result<ExitCode> {
    let jobs = jobs_file(cli);
    let location = store_location(cli, jobs.as_deref());
    let dir = logs_dir(&location);
    let files = log_files(&dir);
    if files.is_empty() && !a.follow {
        if location.contains("://") {
            println!(
                "(no log files in {}: each owner of a database store writes its log under its own working directory)",
                dir.display()
            );
        } else {
            println!("(no log files in {})", dir.display());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let job = a.job.as_deref();
    // The last N lines across the files, oldest first.
    let want = usize::try_from(a.lines).unwrap_or(usize::MAX);
    let mut tail: std::collections::VecDeque<String> = std::collections::VecDeque::new();
    // Following goes on from the last byte the tail read, so a line written meanwhile is
    // printed once, by the follow.
    let mut read_to = 0;
    for f in &files {
        let text = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
        read_to = text.len() as u64;
        for line in String::from_utf8_lossy(&text).lines() {
            if !about(line, job) {
                continue;
            }
            if tail.len() == want {
                tail.pop_front();
            }
            tail.push_back(line.to_string());
        }
    }
    let mut out = std::io::stdout().lock();
    for l in &tail {
        writeln!(out, "{}", inert_log_line(l))?;
    }
    out.flush()?;
    if !a.follow {
        return Ok(ExitCode::SUCCESS);
    }
    if files.is_empty() {
        eprintln!("cronsole: waiting for log files in {}", dir.display());
    }
    follow(&dir, files.last().cloned(), read_to, job, &mut out)
}

/// Whether a log line is about `job` (every line when `None`): it carries the job's field,
/// `job=NAME` or `job="NAME"`, as the engine writes it on every line about one job.
fn about(line: &str, job: Option<&str>) -> bool {
    let Some(job) = job else { return true };
    let plain = format!("job={job}");
    let quoted = format!("job=\"{job}\"");
    line.split_whitespace()
        .any(|w| w == plain || w == quoted || w.strip_suffix(':') == Some(plain.as_str()))
}

/// A log line as `logs` prints it: the log holds outside text (command output quoted in an
/// error, a model's reply, whatever else wrote into the directory), so every control, bidi and
/// invisible character is shown (`^[`, `\u{202e}`), never sent to the terminal; tabs stay.
fn inert_log_line(line: &str) -> std::borrow::Cow<'_, str> {
    crate::text::visible_tabs(line)
}

/// Print the complete lines at the front of `pending` (each through [`inert_log_line`]) and
/// keep the unfinished tail for the next read: a line written in two pieces, or a UTF-8
/// character cut between two reads, is printed whole. `flush_tail` prints the tail too (the
/// file was replaced: its last line will not be finished).
fn print_log_lines(
    pending: &mut Vec<u8>,
    flush_tail: bool,
    job: Option<&str>,
    out: &mut impl Write,
) -> Result<()> {
    let end = if flush_tail {
        pending.len()
    } else {
        match pending.iter().rposition(|b| *b == b'\n') {
            Some(i) => i + 1,
            None => return Ok(()),
        }
    };
    let done: Vec<u8> = pending.drain(..end).collect();
    for line in String::from_utf8_lossy(&done)
        .lines()
        .filter(|l| about(l, job))
    {
        writeln!(out, "{}", inert_log_line(line))?;
    }
    out.flush()?;
    Ok(())
}

/// Print what is appended to the newest log file, switching to a newer file when one appears.
fn follow(
    dir: &Path,
    mut current: Option<PathBuf>,
    mut pos: u64,
    job: Option<&str>,
    out: &mut impl Write,
) -> Result<ExitCode> {
    let mut buf = Vec::new();
    let mut pending = Vec::new();
    loop {
        if let Some(p) = &current
            && let Ok(mut f) = std::fs::File::open(p)
        {
            let len = f.metadata().map(|m| m.len()).unwrap_or(0);
            if len < pos {
                pos = 0; // truncated or replaced: start over
                print_log_lines(&mut pending, true, job, out)?;
            }
            if len > pos {
                f.seek(std::io::SeekFrom::Start(pos))?;
                buf.clear();
                f.take(len - pos).read_to_end(&mut buf)?;
                pos = len;
                pending.extend_from_slice(&buf);
                print_log_lines(&mut pending, false, job, out)?;
            }
        }
        let newest = log_files(dir).pop();
        if newest.is_some() && newest != current {
            print_log_lines(&mut pending, true, job, out)?;
            current = newest;
            pos = 0;
            continue;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config;

    #[test]
    fn the_starter_file_validates_clean() {
        let c = config::check_str(STARTER, Path::new("jobs.yaml"));
        assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
        assert_eq!(c.jobs.iter().flatten().count(), 1);
    }

    #[test]
    fn logs_job_keeps_the_lines_carrying_that_jobs_field() {
        let l = "2026-12-06T17:21:21Z  INFO crate::run: job=flaky-sync status=failed";
        assert!(about(l, Some("flaky-sync")));
        assert!(!about(l, Some("flaky")));
        assert!(!about(l, Some("sync")));
        assert!(about("W warn: job=db: lease lost", Some("db")));
        assert!(!about("engine started store=./x", Some("db")));
        assert!(about("engine started store=./x", None));
    }

    #[test]
    fn followed_log_lines_are_printed_whole_and_inert() {
        let mut out = Vec::new();
        // A line with an OSC title sequence, then a line cut mid-way inside a UTF-8 character.
        let mut pending = b"a\x1b]0;PWN\x07b\tc\nd\xc3".to_vec();
        print_log_lines(&mut pending, false, None, &mut out).unwrap();
        assert_eq!(String::from_utf8(out.clone()).unwrap(), "a^[]0;PWN^Gb\tc\n");
        assert_eq!(pending, b"d\xc3", "the unfinished line waits");
        pending.extend_from_slice(b"\xa9\xc2\x9b\n");
        print_log_lines(&mut pending, false, None, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            "a^[]0;PWN^Gb\tc\nd\u{e9}\\u{9b}\n",
            "a character cut between reads is printed whole; C1 CSI (U+009B) shown"
        );
        assert!(pending.is_empty());
        pending.extend_from_slice(b"tail\x07");
        print_log_lines(&mut pending, true, None, &mut out).unwrap();
        assert!(String::from_utf8(out).unwrap().ends_with("tail^G\n"));
        assert!(pending.is_empty());
    }
}

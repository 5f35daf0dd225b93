//! The model-free `command` action: run the operator's shell command and report.
//!
//! Owns: bounds and result text of one command attempt. Must not touch: retries, the store,
//! delivery (the run pipeline decides those from the returned [`CommandOutcome`]).
//!
//! Decisions:
//! - stdout and stderr are read on separate pipes, each bounded while reading. On success the
//!   delivered result is stdout only, verbatim (cut to 8000 characters + `…[output truncated]`
//!   only if longer). On failure the error's `<output>` is stdout followed by stderr (each
//!   trimmed, separated by a newline), cut to 8000 characters with the same marker.
//! - On timeout the error is `[exit 124] timed out after Ns (process group killed)` followed by
//!   whatever output arrived before the kill.
//! - When the shell exits, anything left in its process group is killed (see `proc`).

use std::time::Duration;

use crate::proc::{self, Cap, ProcSpec, TIMEOUT_EXIT_CODE};

/// Output bound in characters: a result is delivered and stored in every row, so it stays small.
pub const OUTPUT_MAX_CHARS: usize = 8000;
/// Marker appended to cut output.
pub const TRUNCATED_MARKER: &str = "…[output truncated]";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandOutcome {
    /// Exit 0: `stdout` is delivered verbatim.
    Succeeded { stdout: String },
    /// Non-zero exit or timeout: `error` is `[exit N] <output>`.
    Failed {
        exit_code: i32,
        timed_out: bool,
        error: String,
    },
}

fn bounded(s: &str, cut_while_reading: bool) -> String {
    let (kept, cut) = proc::cut_chars(s, OUTPUT_MAX_CHARS);
    if cut || cut_while_reading {
        format!("{kept}{TRUNCATED_MARKER}")
    } else {
        kept.to_string()
    }
}

/// Run `command` once under `sh -c` with `timeout` (the job's `command_timeout_seconds`).
///
/// Cancellation-safe: dropping the future kills the command's process group.
pub async fn run_command(command: &str, timeout: Duration, env: &proc::ProcEnv) -> CommandOutcome {
    // Bytes enough for 8000 characters of any UTF-8, plus one so a cut is always detected.
    let cap = proc::bytes_for_chars(OUTPUT_MAX_CHARS) + 1;
    let spec = ProcSpec {
        command,
        timeout,
        stdout_cap: Cap::Soft(cap),
        stderr_cap: Cap::Soft(cap),
    };
    let out = match proc::run(&spec, env).await {
        Ok(o) => o,
        Err(e) => {
            return CommandOutcome::Failed {
                exit_code: 127,
                timed_out: false,
                error: format!("[exit 127] {e}"),
            };
        }
    };
    if out.exit_code == 0 && !out.timed_out {
        return CommandOutcome::Succeeded {
            stdout: bounded(&out.stdout_lossy(), out.stdout_truncated),
        };
    }
    let stdout = out.stdout_lossy();
    let stderr = out.stderr_lossy();
    let mut combined = String::new();
    for part in [stdout.trim(), stderr.trim()] {
        if !part.is_empty() {
            if !combined.is_empty() {
                combined.push('\n');
            }
            combined.push_str(part);
        }
    }
    let output = bounded(&combined, out.stdout_truncated || out.stderr_truncated);
    let error = if out.timed_out {
        let mut e = format!(
            "[exit {TIMEOUT_EXIT_CODE}] timed out after {}s (process group killed)",
            timeout.as_secs_f64()
        );
        if !output.is_empty() {
            e.push('\n');
            e.push_str(&output);
        }
        e
    } else {
        format!("[exit {}] {output}", out.exit_code)
    };
    CommandOutcome::Failed {
        exit_code: out.exit_code,
        timed_out: out.timed_out,
        error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_marks_cuts() {
        assert_eq!(bounded("abc", false), "abc");
        assert_eq!(bounded("abc", true), format!("abc{TRUNCATED_MARKER}"));
        let long = "é".repeat(OUTPUT_MAX_CHARS + 5);
        let b = bounded(&long, false);
        assert_eq!(
            b.chars().count(),
            OUTPUT_MAX_CHARS + TRUNCATED_MARKER.chars().count()
        );
        assert!(b.ends_with(TRUNCATED_MARKER));
    }
}

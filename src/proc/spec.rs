//! What a command run is given and what it gives back: its bounds ([`ProcSpec`], [`Cap`]), where
//! and with what environment it starts ([`ProcEnv`], [`scrub_list`]), and its output
//! ([`ProcOutput`]) or error.
//!
//! Owns: these types and the one way every owner-side path builds its command. Must not touch:
//! how a run is supervised.

use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

/// Exit code reported when the command ran out of time (as `timeout(1)` does).
pub const TIMEOUT_EXIT_CODE: i32 = 124;

/// How much of one stream to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    /// Keep the first `n` bytes, drain and discard the rest (`truncated` is set).
    Soft(usize),
    /// More than `n` bytes kills the whole process group (`hard_cap_hit` is set).
    Hard(usize),
}

impl Cap {
    pub(super) fn limit(self) -> usize {
        match self {
            Cap::Soft(n) | Cap::Hard(n) => n,
        }
    }
}

/// Where and with what environment a command starts: built by the caller for each run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcEnv {
    /// Working directory (the run pipeline uses the jobs file's directory); `None` inherits
    /// cronsole's own.
    pub workdir: Option<std::path::PathBuf>,
    /// Environment variables removed (see `scrub_list`).
    pub scrub: Vec<String>,
    /// Dead-man switch: the supervisor kills the run if the owner sends no heartbeat for this
    /// long (the engine sets half the job's lease). `None`: no such limit.
    pub stall_limit: Option<Duration>,
    /// Variables added (a chained run's parent, see `engine::chain`).
    pub extra: Vec<(String, String)>,
}

impl Default for ProcEnv {
    /// cronsole's own directory, [`STANDARD_KEY_VARS`] removed, no stall limit.
    fn default() -> Self {
        ProcEnv {
            workdir: None,
            scrub: scrub_list([], &[]),
            stall_limit: None,
            extra: Vec::new(),
        }
    }
}

/// What to run and within which bounds.
#[derive(Debug, Clone)]
pub struct ProcSpec<'a> {
    /// Passed to `sh -c` unchanged. Comes only from the jobs file.
    pub command: &'a str,
    pub timeout: Duration,
    pub stdout_cap: Cap,
    pub stderr_cap: Cap,
}

/// What a finished (or killed) command left behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcOutput {
    /// The shell's exit code, `128 + signal` when killed by a signal, 124 on timeout.
    pub exit_code: i32,
    pub timed_out: bool,
    /// A [`Cap::Hard`] was exceeded and the group was killed for it.
    pub hard_cap_hit: bool,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Some stdout was discarded by a soft cap (or the hard cap).
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
}

impl ProcOutput {
    #[cfg(any(test, feature = "testkit"))]
    pub fn success(&self) -> bool {
        self.exit_code == 0 && !self.timed_out && !self.hard_cap_hit
    }
    pub fn stdout_lossy(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    pub fn stderr_lossy(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    #[error("could not start `sh -c {command}`: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("waiting for `{command}` failed: {source}")]
    Wait {
        command: String,
        source: std::io::Error,
    },
}

/// Standard API-key variables that are always removed from a command's environment (besides
/// each configured agent's `api_key_env`), unless a job lets them through.
pub(crate) const STANDARD_KEY_VARS: [&str; 2] = ["OPENAI_API_KEY", "ANTHROPIC_API_KEY"];

/// The variables to remove for one job: [`STANDARD_KEY_VARS`] and every agent's key variable,
/// minus the job's `env_passthrough`.
pub(crate) fn scrub_list<'a>(
    agent_key_vars: impl IntoIterator<Item = &'a str>,
    passthrough: &[String],
) -> Vec<String> {
    let mut v: Vec<String> = STANDARD_KEY_VARS
        .iter()
        .copied()
        .chain(agent_key_vars)
        .filter(|n| !n.is_empty() && !passthrough.iter().any(|p| p == n))
        .map(str::to_string)
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The command as every owner-side path starts it: its directory, its environment, its
/// output piped, leading a process group of its own.
pub(super) fn base_command(
    program: &std::ffi::OsStr,
    args: &[&std::ffi::OsStr],
    env: &ProcEnv,
) -> Command {
    let mut cmd = Command::new(program);
    if let Some(dir) = &env.workdir {
        cmd.current_dir(dir);
    }
    for var in &env.scrub {
        cmd.env_remove(var);
    }
    for (k, v) in &env.extra {
        cmd.env(k, v);
    }
    cmd.args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    cmd
}

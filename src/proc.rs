//! Running operator shell commands (`pre_run`, a monitor's `command`, the `command` action) with
//! bounded resources (SPEC §9.1, §9.2, §10.1).
//!
//! Owns: spawning `sh -c CMD` in its own process group with stdin closed, capturing stdout and
//! stderr with caps enforced *while reading* (memory never grows with the output), the timeout,
//! and killing the whole group. Must not touch: the store, history, prompts — callers turn a
//! [`ProcOutput`] into a gate outcome or a run result.
//!
//! Decisions where the SPEC is silent:
//! - Nothing a command starts outlives it: when the shell exits, whatever is left in its process
//!   group (e.g. a backgrounded `sleep`) is killed with SIGKILL before the pipes are drained, so a
//!   straggler holding stdout open cannot stall the run until the timeout. A process that calls
//!   `setsid` leaves the group and is out of our reach (documented limitation).
//! - Cancellation-safe: a [`GroupGuard`] owns the process group while the future is alive; if the
//!   future is dropped (the run was cancelled) its `Drop` sends SIGKILL to the group, and tokio's
//!   `kill_on_drop` reaps the shell.
//! - Exit code: the shell's code; `128 + N` when it was killed by signal N (shell convention);
//!   [`TIMEOUT_EXIT_CODE`] (124, like `timeout(1)`) on timeout.
//! - A *soft* cap keeps the first bytes and discards the rest while still draining the pipe (so
//!   the writer never blocks); a *hard* cap kills the group as soon as it is exceeded.
//! - `/bin/sh` by absolute path, so a job does not depend on cronsole's `PATH` to find a shell.
//!   The command inherits cronsole's environment (the operator's choice, SPEC §15).
//!
//! Testing note for callers: the timeout is a tokio timer. Under paused tokio time
//! (`start_paused = true`) the runtime auto-advances to the next timer whenever it is idle,
//! which includes "waiting for a real child process" — so a paused-time test that runs a real
//! command would see it time out at once. Tests that spawn real processes use real time; tests
//! of the timeout *path* can rely on exactly that auto-advance.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
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
    fn limit(self) -> usize {
        match self {
            Cap::Soft(n) | Cap::Hard(n) => n,
        }
    }
}

tokio::task_local! {
    /// Working directory for commands started inside this scope (the run pipeline sets it to the
    /// jobs file's directory); outside any scope, commands inherit cronsole's own directory.
    pub static WORKDIR: std::path::PathBuf;
}

/// What to run and within which bounds.
#[derive(Debug, Clone)]
pub struct ProcSpec<'a> {
    /// Passed to `sh -c` unchanged. Comes only from the jobs file (SPEC §15).
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

/// Kills a process group with SIGKILL when dropped, unless disarmed. Held for as long as the
/// group may be alive, so dropping the owning future (run cancelled) leaves no process behind.
#[derive(Debug)]
pub struct GroupGuard {
    pgid: Option<i32>,
}

impl GroupGuard {
    pub fn new(pgid: i32) -> Self {
        GroupGuard {
            pgid: (pgid > 1).then_some(pgid),
        }
    }

    /// SIGKILL every process in the group now (no-op if it is already empty).
    pub fn kill(&self) {
        if let Some(pgid) = self.pgid {
            kill_group(pgid);
        }
    }

    /// The group is reaped and cleaned up: do not signal it again (its id may be reused).
    pub fn disarm(&mut self) {
        self.pgid = None;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

fn kill_group(pgid: i32) {
    // 0 would signal our own process group and 1 is init's: never.
    if pgid <= 1 {
        return;
    }
    // SAFETY: killpg has no memory-safety preconditions; a stale or empty group yields ESRCH,
    // which is exactly "nothing left to kill".
    unsafe {
        libc::killpg(pgid, libc::SIGKILL);
    }
}

/// Bounded capture of one stream.
#[derive(Debug, Default)]
struct Capture {
    buf: Vec<u8>,
    truncated: bool,
    hard_hit: bool,
}

/// Read `r` to EOF keeping at most `cap` bytes. On a hard cap overflow the group is killed and
/// reading stops at once.
async fn read_capped<R: AsyncRead + Unpin>(mut r: R, cap: Cap, sink: &mut Capture, pgid: i32) {
    let limit = cap.limit();
    let mut chunk = [0u8; 8192];
    loop {
        let n = match r.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let room = limit.saturating_sub(sink.buf.len());
        if n > room {
            sink.buf.extend_from_slice(&chunk[..room]);
            sink.truncated = true;
            if let Cap::Hard(_) = cap {
                sink.hard_hit = true;
                kill_group(pgid);
                return;
            }
        } else {
            sink.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

fn exit_code_of(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        (None, None) => -1,
    }
}

/// Run `sh -c spec.command` in its own process group, stdin closed, within `spec`'s bounds.
///
/// Cancellation-safe: dropping the returned future kills the whole group.
pub async fn run(spec: &ProcSpec<'_>) -> Result<ProcOutput, ProcError> {
    let deadline = tokio::time::Instant::now() + spec.timeout;
    let mut cmd = Command::new("/bin/sh");
    if let Ok(dir) = WORKDIR.try_with(|d| d.clone()) {
        cmd.current_dir(dir);
    }
    cmd.arg("-c")
        .arg(spec.command)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|source| ProcError::Spawn {
        command: spec.command.to_string(),
        source,
    })?;
    // The child is its own group leader, so its pid is the group id.
    let pgid = child.id().map(|p| p as i32).unwrap_or(0);
    let mut guard = GroupGuard::new(pgid);

    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let mut out = Capture::default();
    let mut err = Capture::default();
    let mut status = None;

    let timed_out = {
        let out_ref = &mut out;
        let err_ref = &mut err;
        let status_ref = &mut status;
        let child_ref = &mut child;
        let guard_ref = &guard;
        let work = async move {
            let read_out = async {
                if let Some(s) = stdout {
                    read_capped(s, spec.stdout_cap, out_ref, pgid).await;
                }
            };
            let read_err = async {
                if let Some(s) = stderr {
                    read_capped(s, spec.stderr_cap, err_ref, pgid).await;
                }
            };
            let wait = async {
                let st = child_ref.wait().await;
                // The shell is gone: clear out stragglers still holding the pipes open.
                guard_ref.kill();
                *status_ref = Some(st);
            };
            tokio::join!(read_out, read_err, wait);
        };
        tokio::time::timeout_at(deadline, work).await.is_err()
    };

    if timed_out {
        guard.kill();
        // Reap the shell; SIGKILL makes this prompt.
        let _ = child.wait().await;
    }
    guard.disarm();

    let exit_code = if timed_out {
        TIMEOUT_EXIT_CODE
    } else {
        match status {
            Some(Ok(st)) => exit_code_of(st),
            Some(Err(source)) => {
                return Err(ProcError::Wait {
                    command: spec.command.to_string(),
                    source,
                });
            }
            None => -1,
        }
    };
    Ok(ProcOutput {
        exit_code,
        timed_out,
        hard_cap_hit: out.hard_hit || err.hard_hit,
        stdout_truncated: out.truncated,
        stderr_truncated: err.truncated,
        stdout: out.buf,
        stderr: err.buf,
    })
}

/// Cut `s` to at most `max` characters (no marker). Returns whether anything was cut.
pub fn cut_chars(s: &str, max: usize) -> (&str, bool) {
    match s.char_indices().nth(max) {
        None => (s, false),
        Some((idx, _)) => (&s[..idx], true),
    }
}

/// Bytes to keep while reading so that `chars` characters of UTF-8 survive decoding.
pub fn bytes_for_chars(chars: usize) -> usize {
    chars.saturating_mul(4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn commands_run_in_the_scoped_working_directory() {
        let dir = std::env::temp_dir().join(format!("cronsole-workdir-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let dir = std::fs::canonicalize(&dir).unwrap();
        let spec = ProcSpec {
            command: "pwd",
            timeout: Duration::from_secs(10),
            stdout_cap: Cap::Soft(4096),
            stderr_cap: Cap::Soft(4096),
        };
        let inside = WORKDIR.scope(dir.clone(), run(&spec)).await.unwrap();
        assert_eq!(inside.stdout_lossy().trim(), dir.to_string_lossy());
        let outside = run(&spec).await.unwrap();
        let here = std::env::current_dir().unwrap();
        assert_eq!(outside.stdout_lossy().trim(), here.to_string_lossy());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn cut_chars_respects_char_boundaries() {
        assert_eq!(cut_chars("héllo", 2), ("hé", true));
        assert_eq!(cut_chars("hé", 2), ("hé", false));
        assert_eq!(cut_chars("", 0), ("", false));
    }

    #[tokio::test(start_paused = true)]
    async fn timeout_path_under_paused_time_kills_and_reports_124() {
        // Paused time auto-advances while we wait on the real child: the 1-hour timeout fires
        // at once, deterministically, and the group is killed.
        let started = std::time::Instant::now();
        let out = run(&ProcSpec {
            command: "echo before; sleep 600",
            timeout: Duration::from_secs(3600),
            stdout_cap: Cap::Soft(100),
            stderr_cap: Cap::Soft(100),
        })
        .await
        .expect("spawn sh");
        assert!(out.timed_out);
        assert_eq!(out.exit_code, TIMEOUT_EXIT_CODE);
        assert!(!out.success());
        assert!(started.elapsed() < std::time::Duration::from_secs(60));
    }

    #[test]
    fn guard_for_pid_one_or_less_never_signals() {
        // pgid 0 would mean "our own group" and 1 is init: the guard must refuse both.
        let g = GroupGuard::new(0);
        assert!(g.pgid.is_none());
        let g = GroupGuard::new(1);
        assert!(g.pgid.is_none());
    }
}

//! A command run without a supervisor (library tests, embedders): it leads its own process
//! group, which is killed when the shell exits, on timeout, on a hard cap and on cancellation.
//! A process that calls `setsid` leaves the group and is out of reach.
//!
//! Owns: the [`GroupGuard`] and the unsupervised path. Must not touch: the supervised paths.

use std::process::Stdio;

use super::capture::{Capture, Stopper, exit_code_of, finish, read_capped};
use super::spec::{ProcEnv, ProcError, ProcOutput, ProcSpec, base_command};
use super::tree::kill_group_now as kill_group;

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
    pub(crate) fn disarm(&mut self) {
        self.pgid = None;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Without a supervisor: the command leads its own process group, which is killed when the
/// shell exits, on timeout, on a hard cap and on cancellation.
pub(super) async fn run(
    spec: &ProcSpec<'_>,
    argv: &[&str],
    env: &ProcEnv,
) -> Result<ProcOutput, ProcError> {
    let deadline = tokio::time::Instant::now() + spec.timeout;
    let arg_refs: Vec<&std::ffi::OsStr> = argv[1..].iter().map(std::ffi::OsStr::new).collect();
    let mut cmd = base_command(std::ffi::OsStr::new(argv[0]), &arg_refs, env);
    cmd.stdin(Stdio::null()).kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|source| ProcError::Spawn {
        command: spec.command.to_string(),
        source,
    })?;
    // The child is its own group leader, so its pid is the group id.
    let pgid = child.id().map(|p| p as i32).unwrap_or(0);
    let mut guard = GroupGuard::new(pgid);
    let stopper = Stopper::Group(pgid);

    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let mut out = Capture::default();
    let mut err = Capture::default();
    let mut status = None;

    let timed_out = {
        let (out_ref, err_ref, status_ref, child_ref) =
            (&mut out, &mut err, &mut status, &mut child);
        let guard_ref = &guard;
        let stopper = &stopper;
        let work = async move {
            let read_out = async {
                if let Some(s) = stdout {
                    read_capped(s, spec.stdout_cap, out_ref, stopper).await;
                }
            };
            let read_err = async {
                if let Some(s) = stderr {
                    read_capped(s, spec.stderr_cap, err_ref, stopper).await;
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
    finish(
        spec,
        timed_out,
        status.map(|r| r.map(exit_code_of)),
        out,
        err,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_for_pid_one_or_less_never_signals() {
        // pgid 0 would mean "our own group" and 1 is init: the guard must refuse both.
        let g = GroupGuard::new(0);
        assert!(g.pgid.is_none());
        let g = GroupGuard::new(1);
        assert!(g.pgid.is_none());
    }
}

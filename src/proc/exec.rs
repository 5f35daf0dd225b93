//! A run through an exec of `cronsole __supervise` (the zygote is off, or could not take the
//! request): the supervisor is this process's child, its stdin the run's life-line.
//!
//! A supervisor killed outright (`kill -9`) cannot kill its tree: the command stays in the
//! supervisor's process group, which this process kills when it sees the supervisor die of a
//! signal; with the zygote off this process is also its supervisors' subreaper and kills and
//! reaps what was re-parented to it (a `setsid` escapee).
//!
//! Owns: the list of supervisors this process waits for, and the stray sweep. Must not touch:
//! the zygote path.

use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, ChildStderr, ChildStdout};

use super::capture::{Capture, Stopper, exit_code_of, finish, read_capped};
use super::lifeline::Lifeline;
use super::spec::{ProcEnv, ProcError, ProcOutput, ProcSpec, base_command};
use super::{supervisor, tree};

static SUBREAPER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The `__supervise` children this process started and still waits for (tokio reaps them), kept
/// while it is a subreaper: [`kill_strays`] leaves them alone. Locked across each spawn, so a
/// child is never seen before it is listed.
static SUPERVISORS: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());

/// Removes a supervisor from [`SUPERVISORS`] when its run ends (or is dropped).
struct Listed(Option<i32>);

impl Drop for Listed {
    fn drop(&mut self) {
        if let Some(pid) = self.0
            && let Ok(mut v) = SUPERVISORS.lock()
        {
            v.retain(|p| *p != pid);
        }
    }
}

/// Make this process the subreaper of its supervisors, so it inherits what one killed outright
/// leaves (see [`kill_strays`]).
pub(super) fn become_subreaper() {
    if tree::become_subreaper() {
        SUBREAPER.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// After a `__supervise` child died of a signal, as subreaper ([`become_subreaper`]): kill and
/// reap the processes its run left that were re-parented here (`setsid` escapees, which the
/// run's process group does not hold). Blocking, at most about a second.
fn kill_strays() {
    if !SUBREAPER.load(std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    tree::reap_strays(Duration::from_secs(1), &|pid| {
        SUPERVISORS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&pid)
    });
}

/// [`super::SUPERVISOR_DIED`] for a run started through an exec of `__supervise` (no zygote): the
/// owner kills the processes left in the supervisor's process group.
pub(crate) const SUPERVISOR_DIED_FALLBACK: &str = "cronsole: the run's supervisor died (killed by a signal) before the command ended; its owner killed the processes left in its process group";

/// A supervisor this process started: its output pipes and the owner's end of its life-line.
struct Started {
    child: Child,
    /// Kept in [`SUPERVISORS`] while the run lasts.
    _listed: Listed,
    lifeline: Lifeline,
    /// The supervisor leads its own process group (`base_command`), which the command shares.
    sup_pid: Option<i32>,
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
}

/// Run `argv` under an exec of `__supervise` within `spec`'s bounds.
pub(super) async fn run(
    exe: &std::path::Path,
    spec: &ProcSpec<'_>,
    argv: &[&str],
    env: &ProcEnv,
) -> Result<ProcOutput, ProcError> {
    let deadline = tokio::time::Instant::now() + spec.timeout;
    let started = start(exe, spec, argv, env)?;
    collect(started, spec, env.stall_limit, deadline).await
}

/// Start the supervisor (listed, when this process is its subreaper).
fn start(
    exe: &std::path::Path,
    spec: &ProcSpec<'_>,
    argv: &[&str],
    env: &ProcEnv,
) -> Result<Started, ProcError> {
    let mut args: Vec<std::ffi::OsString> = vec![supervisor::SUBCOMMAND.into()];
    if let Some(st) = env.stall_limit {
        args.push("--stall-ms".into());
        args.push(st.as_millis().max(1).to_string().into());
    }
    args.push("--".into());
    args.extend(argv.iter().map(std::ffi::OsString::from));
    let arg_refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    let mut cmd = base_command(exe.as_os_str(), &arg_refs, env);
    // No kill_on_drop: SIGKILL would stop the supervisor from killing the tree. Dropping the
    // life-line is how a cancelled run stops it; tokio reaps the orphaned supervisor.
    cmd.stdin(Stdio::piped());
    // As subreaper, list the supervisor under the lock held across its spawn: a stray sweep
    // asks the list (under the same lock) about each child it finds, so it never takes this
    // one — even dead and not yet reaped by tokio — for a stray.
    let list = SUBREAPER
        .load(std::sync::atomic::Ordering::SeqCst)
        .then(|| {
            SUPERVISORS
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        });
    let mut child = cmd.spawn().map_err(|source| ProcError::Spawn {
        command: spec.command.to_string(),
        source,
    })?;
    let pid = child.id().and_then(|p| i32::try_from(p).ok());
    let listed = match list {
        Some(mut v) => {
            v.extend(pid);
            Listed(pid)
        }
        None => Listed(None),
    };
    let lifeline = Lifeline::new(child.stdin.take().and_then(|s| s.into_owned_fd().ok()));
    Ok(Started {
        stdout: child.stdout.take(),
        stderr: child.stderr.take(),
        sup_pid: pid,
        child,
        _listed: listed,
        lifeline,
    })
}

/// Kill what a supervisor killed outright left: its process group and (subreaper) what left
/// the group. Blocking work, off the async workers.
async fn kill_left(pid: i32) {
    let _ = tokio::task::spawn_blocking(move || {
        tree::kill_group(pid, Duration::from_secs(1));
        kill_strays();
    })
    .await;
}

/// Read the run's output within its caps until the supervisor exits or `deadline` passes.
async fn collect(
    mut s: Started,
    spec: &ProcSpec<'_>,
    stall: Option<Duration>,
    deadline: tokio::time::Instant,
) -> Result<ProcOutput, ProcError> {
    let stopper = Stopper::Lifeline(&s.lifeline);
    let sup_pid = s.sup_pid;
    let mut out = Capture::default();
    let mut err = Capture::default();
    let mut status = None;
    let mut died = false;

    let timed_out = {
        let (out_ref, err_ref, status_ref, child_ref, died_ref) =
            (&mut out, &mut err, &mut status, &mut s.child, &mut died);
        let (stdout, stderr) = (s.stdout.take(), s.stderr.take());
        let stopper = &stopper;
        let lifeline = &s.lifeline;
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
            // The supervisor kills the command's whole tree before it exits, so the pipes close
            // as soon as it is gone.
            // A supervisor killed outright (`kill -9`) could not kill the command's tree: its
            // processes would keep the pipes open (and run on, re-parented to init). The
            // command is in the supervisor's process group: kill that group.
            let wait = async {
                let st = child_ref.wait().await;
                if let Ok(s) = &st
                    && std::os::unix::process::ExitStatusExt::signal(s).is_some()
                    && let Some(pid) = sup_pid
                {
                    tracing::warn!(
                        command = spec.command,
                        supervisor = pid,
                        "run supervisor died without the command's exit code; killing the run's process group"
                    );
                    *died_ref = true;
                    kill_left(pid).await;
                }
                *status_ref = Some(st);
            };
            let heartbeat = lifeline.beat_every(stall);
            tokio::select! {
                biased;
                _ = async { tokio::join!(read_out, read_err, wait) } => {}
                _ = heartbeat => {}
            }
        };
        tokio::time::timeout_at(deadline, work).await.is_err()
    };
    s.lifeline.cut();

    if timed_out {
        stop_after_timeout(&mut s.child, sup_pid, spec).await;
    }
    if died && !timed_out {
        if !err.buf.is_empty() && !err.buf.ends_with(b"\n") {
            err.buf.push(b'\n');
        }
        err.buf
            .extend_from_slice(SUPERVISOR_DIED_FALLBACK.as_bytes());
    }
    finish(
        spec,
        timed_out,
        status.map(|r| r.map(exit_code_of)),
        out,
        err,
    )
}

/// The run timed out and its life-line is cut: the supervisor kills the tree and exits at once;
/// if it does not, kill it, and what it left.
async fn stop_after_timeout(child: &mut Child, sup_pid: Option<i32>, spec: &ProcSpec<'_>) {
    if tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .is_ok()
    {
        return;
    }
    tracing::warn!(
        command = spec.command,
        "run supervisor did not stop; killing it"
    );
    let _ = child.start_kill();
    let _ = child.wait().await;
    // Killed outright, it left the command's tree: its process group, and (subreaper) what
    // left the group.
    if let Some(pid) = sup_pid {
        kill_left(pid).await;
    }
}

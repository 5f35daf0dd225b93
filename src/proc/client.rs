//! A run through the owner's zygote: the request (argv, directory, environment changes, the
//! run's control socket and output pipes) goes to the zygote, which hands it to a supervisor of
//! its own; the status words come back on the control socket.
//!
//! - A request the zygote does not answer within 0.5 s ([`ZYGOTE_ANSWER`]) makes the run look
//!   at it as often again; a stopped zygote (`SIGSTOP`) is logged, killed and replaced (the
//!   request queued on its socket dies with it, so it cannot start later beside the resent
//!   one). A zygote that is running but silent is waited for up to the command's timeout.
//! - A request the socket accepted may still be lost if the zygote dies before reading it: the
//!   supervisor writes its pid before it starts anything, so a control socket that ends without
//!   one means the command never started, and the request is sent again (three times at most,
//!   then the run execs `__supervise` instead).
//!
//! Owns: this process's zygote (started by the first supervised run, restarted if it dies) and
//! the owner's side of a zygote's run. Must not touch: the zygote's own loop (`zygote`).

use std::os::fd::{AsFd, OwnedFd};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::UnixStream;
use tokio::net::unix::pipe;

use super::capture::{Capture, Stopper, finish, read_capped};
use super::fdpass::{Request, parse_status, send_with_fds};
use super::lifeline::Lifeline;
use super::spec::{ProcEnv, ProcError, ProcOutput, ProcSpec};
use super::zygote::ZYGOTE_SUBCOMMAND;
use super::{sys, tree};

/// The owner's zygote (`cronsole __zygote`, see [`super::zygote`]): started by
/// the first supervised run, restarted if it dies, gone when this process is.
struct Zygote {
    sock: OwnedFd,
    child: std::process::Child,
}

/// This process's zygote, once a supervised run started it.
static ZYGOTE: std::sync::Mutex<Option<Zygote>> = std::sync::Mutex::new(None);

/// The zygote was found unavailable (reported once).
static ZYGOTE_WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl Zygote {
    fn start(exe: &std::path::Path) -> std::io::Result<Zygote> {
        let (ours, theirs) = sys::seqpacket_pair()?;
        let child = std::process::Command::new(exe)
            .arg(ZYGOTE_SUBCOMMAND)
            .stdin(Stdio::from(theirs))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()?;
        Ok(Zygote { sock: ours, child })
    }

    fn retire(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The pid of this process's zygote, if one is running (tests and diagnostics).
#[cfg(any(test, feature = "testkit"))]
pub fn zygote_pid() -> Option<u32> {
    ZYGOTE.lock().ok()?.as_ref().map(|z| z.child.id())
}

/// What became of a request handed to the zygote.
enum Sent {
    /// Taken by the zygote of this pid.
    Yes(u32),
    /// The zygote's socket is full: it is forking as fast as it can; try again shortly.
    Busy,
    No(std::io::Error),
}

/// Hand one request to the zygote, starting it first (or once more, if it died).
fn zygote_send(exe: &std::path::Path, data: &[u8], fds: &[std::os::fd::BorrowedFd<'_>]) -> Sent {
    let Ok(mut g) = ZYGOTE.lock() else {
        return Sent::No(std::io::Error::other("zygote lock poisoned"));
    };
    let mut last = std::io::Error::other("zygote died at start");
    for _ in 0..2 {
        if g.is_none() {
            match Zygote::start(exe) {
                Ok(z) => *g = Some(z),
                Err(e) => return Sent::No(e),
            }
        }
        let Some(z) = g.as_ref() else { continue };
        match send_with_fds(z.sock.as_fd(), data, fds) {
            Ok(()) => return Sent::Yes(z.child.id()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Sent::Busy,
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EPIPE | libc::ECONNRESET | libc::ENOTCONN | libc::ECONNREFUSED)
                ) =>
            {
                if let Some(z) = g.take() {
                    z.retire();
                }
                last = e;
            }
            Err(e) => return Sent::No(e),
        }
    }
    Sent::No(last)
}

/// Run `argv` under a supervisor forked by the owner's zygote: the same guarantees as an exec of
/// `__supervise` without re-executing cronsole per run. `None` when the zygote cannot take
/// this request (a field with a NUL byte, a request over the size cap, the zygote cannot be
/// started): the caller then execs `__supervise`.
pub(super) async fn run(
    exe: &std::path::Path,
    spec: &ProcSpec<'_>,
    argv: &[&str],
    env: &ProcEnv,
) -> Option<Result<ProcOutput, ProcError>> {
    let deadline = tokio::time::Instant::now() + spec.timeout;
    let started = match start(exe, spec.command, argv, env, deadline, false).await {
        Start::Running(s) => s,
        Start::NotTaken => return None,
        Start::Failed(e) => return Some(Err(e)),
        Start::TimedOut => {
            return Some(finish(
                spec,
                true,
                None,
                Capture::default(),
                Capture::default(),
            ));
        }
    };
    Some(collect(started, spec, env.stall_limit, deadline).await)
}

/// A run a zygote's supervisor has started: its control socket (the status words so far in
/// `status`), the owner's end of its life-line and its output pipes.
pub(super) struct Started {
    pub(super) ctl: UnixStream,
    pub(super) status: Vec<u8>,
    pub(super) lifeline: Lifeline,
    pub(super) stdout: pipe::Receiver,
    pub(super) stderr: pipe::Receiver,
    /// The command's stdin (an attached child), else closed.
    pub(super) stdin: Option<pipe::Sender>,
}

/// How handing a run to the zygote went.
pub(super) enum Start {
    /// The supervisor has started it.
    Running(Started),
    /// The zygote cannot take it: exec `__supervise` instead.
    NotTaken,
    /// Not even started within the whole timeout.
    TimedOut,
    /// The run's pipes or sockets could not be made.
    Failed(ProcError),
}

/// The run's descriptors: the control socket (ours, and the supervisor's end), the owner's end
/// of the life-line, the read ends of the output pipes, the write end of its stdin pipe (when
/// asked for: a long-lived child that talks over its pipes), and the ends handed down (control
/// socket, stdout, stderr, then stdin if any).
fn pipes(stdin: bool) -> std::io::Result<Pipes> {
    let (out_r, out_w) = sys::pipe_cloexec()?;
    let (err_r, err_w) = sys::pipe_cloexec()?;
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    let lifeline = Lifeline::socket(ours.try_clone()?.into());
    ours.set_nonblocking(true)?;
    let ctl = UnixStream::from_std(ours)?;
    let stdout = pipe::Receiver::from_owned_fd(out_r)?;
    let stderr = pipe::Receiver::from_owned_fd(err_r)?;
    let mut handed = vec![theirs.into(), out_w, err_w];
    let input = if stdin {
        let (in_r, in_w) = sys::pipe_cloexec()?;
        handed.push(in_r);
        Some(pipe::Sender::from_owned_fd(in_w)?)
    } else {
        None
    };
    Ok(Pipes {
        ctl,
        lifeline,
        stdout,
        stderr,
        input,
        handed,
    })
}

/// What [`pipes`] makes.
struct Pipes {
    ctl: UnixStream,
    lifeline: Lifeline,
    stdout: pipe::Receiver,
    stderr: pipe::Receiver,
    input: Option<pipe::Sender>,
    handed: Vec<OwnedFd>,
}

/// Send the request until a supervisor has started it (its pid is on the control socket).
pub(super) async fn start(
    exe: &std::path::Path,
    what: &str,
    argv: &[&str],
    env: &ProcEnv,
    deadline: tokio::time::Instant,
    stdin: bool,
) -> Start {
    let Some(data) = request(argv, env).encode() else {
        return Start::NotTaken;
    };
    let mut status: Vec<u8> = Vec::new();
    // A request the socket accepted may still be lost if the zygote dies before reading it
    // (its descriptors close unread). The supervisor writes its pid before it starts anything,
    // so a control socket that ends without one means the command never started: send again,
    // with fresh pipes, through a fresh zygote.
    let mut attempts = 0;
    loop {
        let Pipes {
            mut ctl,
            lifeline,
            stdout,
            stderr,
            input,
            handed: theirs,
        } = match pipes(stdin) {
            Ok(s) => s,
            Err(source) => {
                return Start::Failed(ProcError::Spawn {
                    command: what.to_string(),
                    source,
                });
            }
        };
        let Some(zygote) = send(exe, &data, &theirs).await else {
            return Start::NotTaken;
        };
        // The supervisor holds its ends now: ours must go, or the pipes never reach end of file.
        drop(theirs);
        match answer(&mut ctl, &mut status, zygote, deadline).await {
            Err(()) => {
                // A zygote that is alive but never answers: cutting the life-line stops the
                // command at once if it ever starts.
                tracing::warn!(
                    command = what,
                    zygote,
                    "run zygote did not start the command within its timeout; attempt failed"
                );
                drop(lifeline);
                return Start::TimedOut;
            }
            Ok(()) if status.len() >= 4 => {
                return Start::Running(Started {
                    ctl,
                    status,
                    lifeline,
                    stdout,
                    stderr,
                    stdin: input,
                });
            }
            Ok(()) => {
                attempts += 1;
                status.clear();
                if attempts >= 3 {
                    tracing::warn!(
                        command = what,
                        "run zygote lost the request three times; re-executing the supervisor for this run"
                    );
                    return Start::NotTaken;
                }
            }
        }
    }
}

/// What the zygote's supervisor starts for this run.
fn request(argv: &[&str], env: &ProcEnv) -> Request {
    // The directory is resolved here, as a spawn would: the zygote's own may differ.
    let here = std::env::current_dir().ok();
    let workdir = match &env.workdir {
        Some(d) => Some(here.as_ref().map_or_else(|| d.clone(), |h| h.join(d))),
        None => here,
    };
    Request {
        stall: env.stall_limit,
        workdir,
        scrub: env.scrub.iter().map(std::ffi::OsString::from).collect(),
        extra: env
            .extra
            .iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect(),
        argv: argv.iter().map(std::ffi::OsString::from).collect(),
    }
}

/// Hand the request and the run's descriptors to the zygote: its pid, or `None` when no
/// zygote can take it (reported once per process).
async fn send(exe: &std::path::Path, data: &[u8], theirs: &[OwnedFd]) -> Option<u32> {
    loop {
        let fds: Vec<_> = theirs.iter().map(|f| f.as_fd()).collect();
        match zygote_send(exe, data, &fds) {
            Sent::Yes(pid) => return Some(pid),
            Sent::Busy => tokio::time::sleep(Duration::from_millis(1)).await,
            Sent::No(e) => {
                if !ZYGOTE_WARNED.swap(true, std::sync::atomic::Ordering::SeqCst) {
                    tracing::warn!(error = %e, "run zygote unavailable; each run re-executes the supervisor");
                }
                return None;
            }
        }
    }
}

/// Read the run's output within its caps until its status has arrived or `deadline` passes.
async fn collect(
    s: Started,
    spec: &ProcSpec<'_>,
    stall: Option<Duration>,
    deadline: tokio::time::Instant,
) -> Result<ProcOutput, ProcError> {
    let Started {
        mut ctl,
        mut status,
        lifeline,
        stdout,
        stderr,
        stdin: _,
    } = s;
    let stopper = Stopper::Lifeline(&lifeline);
    let mut out = Capture::default();
    let mut err = Capture::default();
    let timed_out = {
        let (out_ref, err_ref, status_ref, ctl_ref) = (&mut out, &mut err, &mut status, &mut ctl);
        let stopper = &stopper;
        let lifeline = &lifeline;
        let work = async move {
            let read_out = read_capped(stdout, spec.stdout_cap, out_ref, stopper);
            let read_err = read_capped(stderr, spec.stderr_cap, err_ref, stopper);
            // The supervisor kills the command's whole tree before it reports and exits, so
            // the pipes close as soon as the status has arrived.
            let wait = read_status(ctl_ref, status_ref);
            let heartbeat = lifeline.beat_every(stall);
            tokio::select! {
                biased;
                _ = async { tokio::join!(read_out, read_err, wait) } => {}
                _ = heartbeat => {}
            }
        };
        tokio::time::timeout_at(deadline, work).await.is_err()
    };
    lifeline.cut();
    if timed_out
        && tokio::time::timeout(Duration::from_secs(5), read_status(&mut ctl, &mut status))
            .await
            .is_err()
    {
        // Its control socket is still open, so the supervisor (its pid) still exists.
        tracing::warn!(
            command = spec.command,
            "run supervisor did not stop; killing it"
        );
        if let (Some(pid), _) = parse_status(&status) {
            sys::kill(pid, libc::SIGKILL);
        }
    }
    let code = exit_code(spec, timed_out, &status, &mut err);
    finish(spec, timed_out, Some(Ok(code)), out, err)
}

/// The command's exit code from the status words. No code: the supervisor was killed before it
/// could report (a signal it cannot handle, `kill -9`); its zygote kills what the run left, the
/// attempt failed, and its stderr says why.
fn exit_code(spec: &ProcSpec<'_>, timed_out: bool, status: &[u8], err: &mut Capture) -> i32 {
    let (supervisor, code) = parse_status(status);
    if let Some(c) = code {
        return c;
    }
    if !timed_out {
        let pid = supervisor.unwrap_or_default();
        tracing::warn!(
            command = spec.command,
            supervisor = pid,
            "run supervisor died without the command's exit code; the zygote kills the run's processes"
        );
        if !err.buf.is_empty() && !err.buf.ends_with(b"\n") {
            err.buf.push(b'\n');
        }
        err.buf.extend_from_slice(SUPERVISOR_DIED.as_bytes());
    }
    128 + libc::SIGKILL
}

/// The note added to a run's stderr when its supervisor died before it could report the
/// command's end (its processes are killed by the zygote; the attempt failed).
pub(crate) const SUPERVISOR_DIED: &str = "cronsole: the run's supervisor died (killed by a signal) before the command ended; its zygote kills the processes it left";

/// How long a run waits for the zygote's answer (the supervisor's pid) before it looks whether
/// the zygote is stopped, and how often it looks again after that.
const ZYGOTE_ANSWER: Duration = Duration::from_millis(500);

/// Wait until the supervisor's pid is in `status` (`Ok`, also when the socket ended without
/// one: the caller sends again), or `deadline` passes (`Err`). A zygote that is stopped
/// (`SIGSTOP`) cannot answer: after [`ZYGOTE_ANSWER`] without an answer it is checked every
/// [`ZYGOTE_ANSWER`], and a stopped one is killed and replaced. Killing it drops the request
/// still queued on its socket, so the command can never start there later: the socket then
/// ends without a pid and the caller sends the request again, to a fresh zygote — or, if the
/// stopped zygote had forked the supervisor already, its pid arrives and the run goes on.
async fn answer(
    ctl: &mut UnixStream,
    status: &mut Vec<u8>,
    zygote: u32,
    deadline: tokio::time::Instant,
) -> Result<(), ()> {
    let mut killed = false;
    loop {
        let slice = (tokio::time::Instant::now() + ZYGOTE_ANSWER).min(deadline);
        match tokio::time::timeout_at(slice, read_status_until(ctl, status, 4)).await {
            Ok(()) => return Ok(()),
            Err(_) if slice >= deadline => return Err(()),
            Err(_) => {}
        }
        if !killed && tree::process_stopped(zygote) {
            tracing::warn!(
                zygote,
                "run zygote is stopped (SIGSTOP?) and cannot start runs: killing it; its requests go to a new one"
            );
            retire_zygote(zygote);
            killed = true;
        }
    }
}

/// Kill and reap the zygote `pid` if it is still this process's zygote.
fn retire_zygote(pid: u32) {
    let Ok(mut g) = ZYGOTE.lock() else { return };
    if g.as_ref().is_some_and(|z| z.child.id() == pid)
        && let Some(z) = g.take()
    {
        z.retire();
    }
}

/// Append what the supervisor writes on its control socket until end of file.
pub(super) async fn read_status(ctl: &mut UnixStream, into: &mut Vec<u8>) {
    read_status_until(ctl, into, usize::MAX).await
}

/// [`read_status`] until `into` holds at least `len` bytes (or end of file).
async fn read_status_until(ctl: &mut UnixStream, into: &mut Vec<u8>, len: usize) {
    let mut b = [0u8; 64];
    while into.len() < len {
        // No more than asked (the rest is read by the run's wait, into the same buffer).
        let want = len.saturating_sub(into.len()).min(b.len());
        match ctl.read(&mut b[..want]).await {
            Ok(0) | Err(_) => return,
            Ok(n) => into.extend_from_slice(&b[..n]),
        }
    }
}

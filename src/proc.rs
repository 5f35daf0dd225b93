//! Running operator shell commands (`pre_run`, a monitor's `command`, the `command` action) with
//! bounded resources (SPEC §9.1, §9.2, §10.1).
//!
//! Owns: spawning `sh -c CMD` (or, without shell syntax, the program itself: [`plain_argv`])
//! with stdin closed — through the per-run supervisor ([`crate::supervisor`]: a fork of the
//! owner's zygote, else an exec of `__supervise`) when the binary enabled it, else directly in
//! its own process group —
//! capturing stdout and stderr with caps enforced *while reading* (memory never grows with the
//! output), the timeout, the environment a command sees, and stopping the command's tree. Must
//! not touch: the store, history, prompts — callers turn a [`ProcOutput`] into a gate outcome or
//! a run result.
//!
//! Decisions where the SPEC is silent:
//! - Nothing a command starts outlives it. Supervised (the binary): the supervisor kills every
//!   descendant — `setsid` escapees and double forks included — when the shell exits, when the
//!   owner closes the life-line (timeout, hard cap, cancellation) and when the owner process dies
//!   (`kill -9`); with [`ProcEnv::stall_limit`] set (the engine sets half the lease) also when the owner
//!   stops sending heartbeats (SIGSTOP). Unsupervised (library tests, embedders): when the shell
//!   exits, whatever is left in its process group is killed with SIGKILL before the pipes are
//!   drained; a process that calls `setsid` leaves the group and is out of reach.
//! - Cancellation-safe: dropping the future closes the life-line (supervised) or SIGKILLs the
//!   group through a [`GroupGuard`] (unsupervised).
//! - Exit code: the shell's code; `128 + N` when it was killed by signal N (shell convention);
//!   [`TIMEOUT_EXIT_CODE`] (124, like `timeout(1)`) on timeout; 127 when the supervisor could not
//!   start the shell, 125 when it killed the run for lack of heartbeats (a command that ended by
//!   itself before that kill landed keeps its own code: it completed); 137 with
//!   [`SUPERVISOR_DIED`] appended to stderr when the zygote's supervisor was killed before it
//!   could report (the zygote kills what the run left), [`SUPERVISOR_DIED_FALLBACK`] when a
//!   `__supervise` exec was (this process kills its process group and, as the subreaper of its
//!   supervisors with the zygote off, what was re-parented to it: `kill_strays`).
//! - The zygote: a request it does not answer within 0.5 s (`ZYGOTE_ANSWER`) makes the run look
//!   at it as often again; a stopped zygote (`SIGSTOP`) is logged, killed and replaced (the
//!   request queued on its socket dies with it, so it cannot start later beside the resent
//!   one). A zygote that is running but silent is waited for up to the command's timeout.
//! - A *soft* cap keeps the first bytes and discards the rest while still draining the pipe (so
//!   the writer never blocks); a *hard* cap stops the whole tree as soon as it is exceeded.
//! - `/bin/sh` by absolute path, so a job does not depend on cronsole's `PATH` to find a shell.
//! - Environment: cronsole's own, minus every API-key variable ([`ProcEnv::scrub`]: each configured
//!   agent's `api_key_env` and [`STANDARD_KEY_VARS`]) unless the job's `env_passthrough` names it,
//!   so a `pre_run` that prints `env` cannot put a key into a prompt or a history row.
//!
//! - Where and how a command runs (working directory, scrubbed variables, dead-man switch) is a
//!   [`ProcEnv`] the caller passes with every [`run`]: the run pipeline builds one per run, a
//!   command outside any job gets [`ProcEnv::default`]. No task-local or global carries it; the
//!   one process-wide setting is [`use_supervisor`] (which executable supervises, fixed once at
//!   start by the binary, the same for every command).
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

/// Where and with what environment a command starts: built by the caller for each run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcEnv {
    /// Working directory (the run pipeline uses the jobs file's directory); `None` inherits
    /// cronsole's own.
    pub workdir: Option<std::path::PathBuf>,
    /// Environment variables removed (see [`scrub_list`]).
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
async fn read_capped<R: AsyncRead + Unpin>(
    mut r: R,
    cap: Cap,
    sink: &mut Capture,
    stopper: &Stopper<'_>,
) {
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
                stopper.stop();
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

/// Standard API-key variables that are always removed from a command's environment (besides
/// each configured agent's `api_key_env`), unless a job lets them through.
pub const STANDARD_KEY_VARS: [&str; 2] = ["OPENAI_API_KEY", "ANTHROPIC_API_KEY"];

/// The variables to remove for one job: [`STANDARD_KEY_VARS`] and every agent's key variable,
/// minus the job's `env_passthrough`.
pub fn scrub_list<'a>(
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

static SUPERVISOR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// Start every command through the per-run supervisor (`exe __supervise …`, see
/// [`crate::supervisor`]). The binary calls this at start with its own executable; without it
/// (library tests, embedders) commands are started directly in their own process group, which
/// cannot reach a `setsid` escapee nor survive the owner's `kill -9`. First call wins.
pub fn use_supervisor(exe: std::path::PathBuf) {
    let _ = SUPERVISOR.set(exe);
}

static NO_ZYGOTE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Start every supervised run through an exec of `__supervise` instead of the owner's zygote
/// (the binary does this for `CRONSOLE_ZYGOTE=off`: a diagnostic switch, and the "before" side
/// of `benches/engine.rs burst`).
pub fn disable_zygote() {
    NO_ZYGOTE.store(true, std::sync::atomic::Ordering::SeqCst);
    // Without a zygote every run's supervisor is this process's child: as their subreaper,
    // this process inherits what one killed outright leaves (`kill_strays`).
    if crate::supervisor::become_subreaper() {
        SUBREAPER.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

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

/// After a `__supervise` child died of a signal, as subreaper ([`disable_zygote`]): kill and
/// reap the processes its run left that were re-parented here (`setsid` escapees, which the
/// run's process group does not hold). Blocking, at most about a second.
fn kill_strays() {
    if !SUBREAPER.load(std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    crate::supervisor::reap_strays(Duration::from_secs(1), &|pid| {
        SUPERVISORS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&pid)
    });
}

/// Whether commands are started through the supervisor.
pub fn supervised() -> bool {
    SUPERVISOR.get().is_some()
}

/// Write end of the supervisor's life-line: the pipe that is its stdin (`__supervise`), or the
/// owner's end of the run's control socket (a zygote's run, where the same socket brings the
/// status back, so the write side is shut down rather than closed). Cutting it (drop,
/// [`Lifeline::cut`]) tells the supervisor to kill the run's whole tree; a byte is a heartbeat.
struct Lifeline {
    fd: std::sync::Mutex<Option<std::os::fd::OwnedFd>>,
    socket: bool,
}

impl Drop for Lifeline {
    fn drop(&mut self) {
        self.cut();
    }
}

impl Lifeline {
    fn socket(fd: std::os::fd::OwnedFd) -> Self {
        let mut l = Lifeline::new(Some(fd));
        l.socket = true;
        l
    }

    fn new(fd: Option<std::os::fd::OwnedFd>) -> Self {
        if let Some(fd) = &fd {
            use std::os::fd::AsRawFd;
            // SAFETY: fcntl on an fd we own; a heartbeat must never block the owner.
            unsafe {
                let raw = fd.as_raw_fd();
                let fl = libc::fcntl(raw, libc::F_GETFL);
                if fl >= 0 {
                    libc::fcntl(raw, libc::F_SETFL, fl | libc::O_NONBLOCK);
                }
            }
        }
        Lifeline {
            fd: std::sync::Mutex::new(fd),
            socket: false,
        }
    }

    /// Beat four times per `stall` limit (10 ms to 1 s apart) for as long as it is polled;
    /// never when the run has no stall limit (the dead-man switch is then off).
    async fn beat_every(&self, stall: Option<Duration>) {
        let Some(st) = stall else {
            return std::future::pending::<()>().await;
        };
        let every = (st / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
        loop {
            tokio::time::sleep(every).await;
            self.beat();
        }
    }

    fn beat(&self) {
        use std::os::fd::AsRawFd;
        if let Ok(g) = self.fd.lock()
            && let Some(fd) = g.as_ref()
        {
            // SAFETY: writing one byte from a valid buffer to an fd we own; EAGAIN (full pipe)
            // is fine to ignore — the supervisor has plenty of heartbeats queued.
            unsafe {
                libc::write(fd.as_raw_fd(), b".".as_ptr().cast(), 1);
            }
        }
    }

    fn cut(&self) {
        if let Ok(mut g) = self.fd.lock()
            && let Some(fd) = g.take()
            && self.socket
        {
            use std::os::fd::AsRawFd;
            // SAFETY: shutdown on a socket we own; the read side stays open for the status.
            unsafe {
                libc::shutdown(fd.as_raw_fd(), libc::SHUT_WR);
            }
        }
    }
}

/// How a capture stops the command when a hard cap is exceeded.
enum Stopper<'a> {
    Group(i32),
    Lifeline(&'a Lifeline),
}

impl Stopper<'_> {
    fn stop(&self) {
        match self {
            Stopper::Group(pgid) => kill_group(*pgid),
            Stopper::Lifeline(l) => l.cut(),
        }
    }
}

/// Run `spec.command` under `/bin/sh -c` within `spec`'s bounds, stdin closed, in `env`'s
/// working directory with `env`'s API-key variables removed from its environment.
///
/// With a supervisor ([`use_supervisor`]) the command's whole tree — `setsid` escapees included
/// — is killed when the command exits, times out or the owner dies. Without one, it runs in its
/// own process group, which is killed in the same cases (escapees excepted).
///
/// Cancellation-safe: dropping the returned future kills the command's tree (its group without
/// a supervisor).
pub async fn run(spec: &ProcSpec<'_>, env: &ProcEnv) -> Result<ProcOutput, ProcError> {
    let shell = ["/bin/sh", "-c", spec.command];
    match SUPERVISOR.get() {
        // A command that needs no shell is executed directly (one exec fewer per run, which is
        // most of a burst's cost); the supervisor reports "could not start" as exit 127, as
        // `sh` would for a missing program.
        Some(exe) => {
            let argv = plain_argv(spec.command);
            let argv = argv.as_deref().unwrap_or(&shell);
            // Through the owner's zygote (a fork per run); through an exec of `__supervise`
            // when the zygote cannot take the request.
            let zygote = !NO_ZYGOTE.load(std::sync::atomic::Ordering::SeqCst);
            let via_zygote = if zygote {
                run_zygote(exe, spec, argv, env).await
            } else {
                None
            };
            match via_zygote {
                Some(out) => out,
                None => run_supervised(exe, spec, argv, env).await,
            }
        }
        None => run_direct(spec, &shell, env).await,
    }
}

/// Shell builtins and reserved words: a command starting with one needs the shell even when it
/// has no metacharacter (`exit 3`, `cd dir`), or would behave differently as a program
/// (`echo -e`, `pwd` with a symlinked directory). `true`/`false` are not listed: the programs
/// and the builtins agree.
const SHELL_WORDS: &[&str] = &[
    "!", ".", ":", "[", "alias", "bg", "break", "case", "cd", "command", "continue", "do", "done",
    "echo", "elif", "else", "esac", "eval", "exec", "exit", "export", "fc", "fg", "fi", "for",
    "function", "getopts", "hash", "if", "in", "jobs", "kill", "local", "printf", "pwd", "read",
    "readonly", "return", "select", "set", "shift", "source", "test", "then", "time", "times",
    "trap", "type", "ulimit", "umask", "unalias", "unset", "until", "wait", "while",
];

/// The argument vector of a command that `sh -c` would run as one plain program with literal
/// arguments: only `[A-Za-z0-9_./,:+@-]` and blanks, not starting with a builtin or reserved
/// word. `None` means "needs the shell" (quotes, `$`, globs, `~`, `=`, redirections, pipes, …).
pub fn plain_argv(command: &str) -> Option<Vec<&str>> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_./,:+@-".contains(c);
    if !command.chars().all(|c| plain(c) || c == ' ' || c == '\t') {
        return None;
    }
    let argv: Vec<&str> = command
        .split([' ', '\t'])
        .filter(|w| !w.is_empty())
        .collect();
    let first = argv.first()?;
    if SHELL_WORDS.contains(first) {
        return None;
    }
    Some(argv)
}

fn base_command(program: &std::ffi::OsStr, args: &[&std::ffi::OsStr], env: &ProcEnv) -> Command {
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

/// The owner's zygote (`cronsole __zygote`, see [`crate::supervisor::zygote_main`]): started by
/// the first supervised run, restarted if it dies, gone when this process is.
struct Zygote {
    sock: std::os::fd::OwnedFd,
    child: std::process::Child,
}

static ZYGOTE: std::sync::Mutex<Option<Zygote>> = std::sync::Mutex::new(None);
static ZYGOTE_WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl Zygote {
    fn start(exe: &std::path::Path) -> std::io::Result<Zygote> {
        use std::os::fd::FromRawFd;
        let mut fds = [0; 2];
        // SAFETY: socketpair writes two descriptors into a valid array.
        let r = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are owned by nothing else.
        let (ours, theirs) = unsafe {
            (
                std::os::fd::OwnedFd::from_raw_fd(fds[0]),
                std::os::fd::OwnedFd::from_raw_fd(fds[1]),
            )
        };
        let child = std::process::Command::new(exe)
            .arg(crate::supervisor::ZYGOTE_SUBCOMMAND)
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
pub fn zygote_pid() -> Option<u32> {
    ZYGOTE.lock().ok()?.as_ref().map(|z| z.child.id())
}

enum Sent {
    /// Taken by the zygote of this pid.
    Yes(u32),
    /// The zygote's socket is full: it is forking as fast as it can; try again shortly.
    Busy,
    No(std::io::Error),
}

/// Hand one request to the zygote, starting it first (or once more, if it died).
fn zygote_send(exe: &std::path::Path, data: &[u8], fds: &[std::os::fd::BorrowedFd<'_>]) -> Sent {
    use std::os::fd::AsFd;
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
        match crate::supervisor::send_with_fds(z.sock.as_fd(), data, fds) {
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

fn pipe_cloexec() -> std::io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into a valid array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nothing else.
    Ok(unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    })
}

/// Run `argv` under a supervisor forked by the owner's zygote: the same guarantees as
/// [`run_supervised`] without re-executing cronsole per run. `None` when the zygote cannot take
/// this request (a field with a NUL byte, a request over the size cap, the zygote cannot be
/// started): the caller then execs `__supervise`.
async fn run_zygote(
    exe: &std::path::Path,
    spec: &ProcSpec<'_>,
    argv: &[&str],
    env: &ProcEnv,
) -> Option<Result<ProcOutput, ProcError>> {
    use std::os::fd::AsFd;
    let deadline = tokio::time::Instant::now() + spec.timeout;
    let stall = env.stall_limit;
    // The directory is resolved here, as a spawn would: the zygote's own may differ.
    let here = std::env::current_dir().ok();
    let workdir = match &env.workdir {
        Some(d) => Some(here.as_ref().map_or_else(|| d.clone(), |h| h.join(d))),
        None => here,
    };
    let req = crate::supervisor::Request {
        stall,
        workdir,
        scrub: env.scrub.iter().map(std::ffi::OsString::from).collect(),
        extra: env
            .extra
            .iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect(),
        argv: argv.iter().map(std::ffi::OsString::from).collect(),
    };
    let data = req.encode()?;
    let spawn_err = |source| ProcError::Spawn {
        command: spec.command.to_string(),
        source,
    };
    let setup = || -> std::io::Result<_> {
        let (out_r, out_w) = pipe_cloexec()?;
        let (err_r, err_w) = pipe_cloexec()?;
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        let lifeline = Lifeline::socket(ours.try_clone()?.into());
        ours.set_nonblocking(true)?;
        let ctl = tokio::net::UnixStream::from_std(ours)?;
        let stdout = tokio::net::unix::pipe::Receiver::from_owned_fd(out_r)?;
        let stderr = tokio::net::unix::pipe::Receiver::from_owned_fd(err_r)?;
        Ok((ctl, lifeline, stdout, stderr, [theirs.into(), out_w, err_w]))
    };
    let mut status: Vec<u8> = Vec::new();
    // A request the socket accepted may still be lost if the zygote dies before reading it
    // (its descriptors close unread). The supervisor writes its pid before it starts anything,
    // so a control socket that ends without one means the command never started: send again,
    // with fresh pipes, through a fresh zygote.
    let mut attempts = 0;
    let (mut ctl, lifeline, stdout, stderr) = loop {
        let (mut ctl, lifeline, stdout, stderr, theirs): (_, _, _, _, [std::os::fd::OwnedFd; 3]) =
            match setup() {
                Ok(s) => s,
                Err(e) => return Some(Err(spawn_err(e))),
            };
        let zygote = loop {
            let fds = [theirs[0].as_fd(), theirs[1].as_fd(), theirs[2].as_fd()];
            match zygote_send(exe, &data, &fds) {
                Sent::Yes(pid) => break pid,
                Sent::Busy => tokio::time::sleep(Duration::from_millis(1)).await,
                Sent::No(e) => {
                    if !ZYGOTE_WARNED.swap(true, std::sync::atomic::Ordering::SeqCst) {
                        tracing::warn!(error = %e, "run zygote unavailable; each run re-executes the supervisor");
                    }
                    return None;
                }
            }
        };
        // The supervisor holds its ends now: ours must go, or the pipes never reach end of file.
        drop(theirs);
        match answer(&mut ctl, &mut status, zygote, deadline).await {
            Err(()) => {
                // Not even started within the whole timeout (a zygote that is alive but never
                // answers): cutting the life-line stops it at once if it ever starts.
                tracing::warn!(
                    command = spec.command,
                    zygote,
                    "run zygote did not start the command within its timeout; attempt failed"
                );
                drop(lifeline);
                return Some(finish(
                    spec,
                    true,
                    None,
                    Capture::default(),
                    Capture::default(),
                ));
            }
            Ok(()) if status.len() >= 4 => break (ctl, lifeline, stdout, stderr),
            Ok(()) => {
                attempts += 1;
                status.clear();
                if attempts >= 3 {
                    tracing::warn!(
                        command = spec.command,
                        "run zygote lost the request three times; re-executing the supervisor for this run"
                    );
                    return None;
                }
            }
        }
    };

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
        if let (Some(pid), _) = crate::supervisor::parse_status(&status) {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
    let (supervisor, code) = crate::supervisor::parse_status(&status);
    let code = match code {
        Some(c) => c,
        // No status: the supervisor was killed before it could report (a signal it cannot
        // handle, `kill -9`). Its zygote kills what the run left (`supervisor::kill_orphans`);
        // the attempt failed, and its error says why.
        None => {
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
    };
    Some(finish(spec, timed_out, Some(Ok(code)), out, err))
}

/// The note added to a run's stderr when its supervisor died before it could report the
/// command's end (its processes are killed by the zygote; the attempt failed).
pub const SUPERVISOR_DIED: &str = "cronsole: the run's supervisor died (killed by a signal) before the command ended; its zygote kills the processes it left";

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
    ctl: &mut tokio::net::UnixStream,
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
        if !killed && process_stopped(zygote) {
            tracing::warn!(
                zygote,
                "run zygote is stopped (SIGSTOP?) and cannot start runs: killing it; its requests go to a new one"
            );
            retire_zygote(zygote);
            killed = true;
        }
    }
}

/// Whether `pid` is stopped by a signal or a tracer (`/proc/PID/stat` state `T` or `t`).
fn process_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|st| {
            st.rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next())
        })
        .is_some_and(|c| c == 'T' || c == 't')
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
async fn read_status(ctl: &mut tokio::net::UnixStream, into: &mut Vec<u8>) {
    read_status_until(ctl, into, usize::MAX).await
}

/// [`read_status`] until `into` holds at least `len` bytes (or end of file).
async fn read_status_until(ctl: &mut tokio::net::UnixStream, into: &mut Vec<u8>, len: usize) {
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

async fn run_supervised(
    exe: &std::path::Path,
    spec: &ProcSpec<'_>,
    argv: &[&str],
    env: &ProcEnv,
) -> Result<ProcOutput, ProcError> {
    let deadline = tokio::time::Instant::now() + spec.timeout;
    let stall = env.stall_limit;
    let mut args: Vec<std::ffi::OsString> = vec![crate::supervisor::SUBCOMMAND.into()];
    if let Some(st) = stall {
        args.push("--stall-ms".into());
        args.push(st.as_millis().max(1).to_string().into());
    }
    args.push("--".into());
    args.extend(argv.iter().map(std::ffi::OsString::from));
    let arg_refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    let mut cmd = base_command(exe.as_os_str(), &arg_refs, env);
    // No kill_on_drop: SIGKILL would stop the supervisor from killing the tree. Dropping the
    // life-line (below) is how a cancelled run stops it; tokio reaps the orphaned supervisor.
    cmd.stdin(Stdio::piped());
    let (mut child, _listed) = {
        // As subreaper, list the supervisor under the lock held across its spawn: a stray
        // sweep asks the list (under the same lock) about each child it finds, so it never
        // takes this one — even dead and not yet reaped by tokio — for a stray.
        let list = SUBREAPER
            .load(std::sync::atomic::Ordering::SeqCst)
            .then(|| {
                SUPERVISORS
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
            });
        let child = cmd.spawn().map_err(|source| ProcError::Spawn {
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
        (child, listed)
    };
    let lifeline = Lifeline::new(child.stdin.take().and_then(|s| s.into_owned_fd().ok()));
    let stopper = Stopper::Lifeline(&lifeline);
    // The supervisor leads its own process group (`base_command`), which the command shares.
    let sup_pid = child.id().and_then(|p| i32::try_from(p).ok());
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let mut out = Capture::default();
    let mut err = Capture::default();
    let mut status = None;
    let mut died = false;

    let timed_out = {
        let (out_ref, err_ref, status_ref, child_ref, died_ref) =
            (&mut out, &mut err, &mut status, &mut child, &mut died);
        let stopper = &stopper;
        let lifeline = &lifeline;
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
                    let _ = tokio::task::spawn_blocking(move || {
                        crate::supervisor::kill_group(pid, Duration::from_secs(1));
                        kill_strays();
                    })
                    .await;
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
    lifeline.cut();

    if timed_out {
        // The supervisor kills the tree and exits at once; if it does not, kill it.
        if tokio::time::timeout(Duration::from_secs(5), child.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                command = spec.command,
                "run supervisor did not stop; killing it"
            );
            let _ = child.start_kill();
            let _ = child.wait().await;
            // Killed outright, it left the command's tree: its process group, and (subreaper)
            // what left the group.
            if let Some(pid) = sup_pid {
                let _ = tokio::task::spawn_blocking(move || {
                    crate::supervisor::kill_group(pid, Duration::from_secs(1));
                    kill_strays();
                })
                .await;
            }
        }
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

/// [`SUPERVISOR_DIED`] for a run started through an exec of `__supervise` (no zygote): the
/// owner kills the processes left in the supervisor's process group.
pub const SUPERVISOR_DIED_FALLBACK: &str = "cronsole: the run's supervisor died (killed by a signal) before the command ended; its owner killed the processes left in its process group";

/// Without a supervisor: the command leads its own process group, which is killed when the
/// shell exits, on timeout, on a hard cap and on cancellation.
async fn run_direct(
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

fn finish(
    spec: &ProcSpec<'_>,
    timed_out: bool,
    status: Option<std::io::Result<i32>>,
    out: Capture,
    err: Capture,
) -> Result<ProcOutput, ProcError> {
    let exit_code = if timed_out {
        TIMEOUT_EXIT_CODE
    } else {
        match status {
            Some(Ok(code)) => code,
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
    async fn commands_run_in_the_given_working_directory() {
        let tmp = crate::testkit::tmp::TempDir::new("workdir");
        let dir = std::fs::canonicalize(&tmp).unwrap();
        let spec = ProcSpec {
            command: "pwd",
            timeout: Duration::from_secs(10),
            stdout_cap: Cap::Soft(4096),
            stderr_cap: Cap::Soft(4096),
        };
        let env = ProcEnv {
            workdir: Some(dir.clone()),
            ..ProcEnv::default()
        };
        let inside = run(&spec, &env).await.unwrap();
        assert_eq!(inside.stdout_lossy().trim(), dir.to_string_lossy());
        let outside = run(&spec, &ProcEnv::default()).await.unwrap();
        let here = std::env::current_dir().unwrap();
        assert_eq!(outside.stdout_lossy().trim(), here.to_string_lossy());
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
        let out = run(
            &ProcSpec {
                command: "echo before; sleep 600",
                timeout: Duration::from_secs(3600),
                stdout_cap: Cap::Soft(100),
                stderr_cap: Cap::Soft(100),
            },
            &ProcEnv::default(),
        )
        .await
        .expect("spawn sh");
        assert!(out.timed_out);
        assert_eq!(out.exit_code, TIMEOUT_EXIT_CODE);
        assert!(!out.success());
        assert!(started.elapsed() < std::time::Duration::from_secs(60));
    }

    #[test]
    fn the_scrub_list_removes_every_key_variable_but_the_passed_through_ones() {
        let v = scrub_list(
            ["MY_KEY", "OPENAI_API_KEY", ""],
            &["ANTHROPIC_API_KEY".to_string()],
        );
        assert_eq!(v, vec!["MY_KEY".to_string(), "OPENAI_API_KEY".to_string()]);
        assert_eq!(
            scrub_list([], &[]),
            vec![
                "ANTHROPIC_API_KEY".to_string(),
                "OPENAI_API_KEY".to_string()
            ]
        );
    }

    #[tokio::test]
    async fn scrubbed_variables_never_reach_the_command() {
        // A variable of this test alone (the standard key names are checked through the real
        // binary in tests/run_process.rs, without touching this process's environment).
        // SAFETY: no other test reads or writes this variable.
        unsafe { std::env::set_var("CRONSOLE_PROC_TEST_KEY", "sk-proc-test-value") };
        let spec = ProcSpec {
            command: "env",
            timeout: Duration::from_secs(10),
            stdout_cap: Cap::Soft(1 << 20),
            stderr_cap: Cap::Soft(4096),
        };
        let env = |scrub| ProcEnv {
            scrub,
            ..ProcEnv::default()
        };
        let scrubbed = run(&spec, &env(scrub_list(["CRONSOLE_PROC_TEST_KEY"], &[])))
            .await
            .unwrap();
        assert!(scrubbed.success());
        assert!(!scrubbed.stdout_lossy().contains("sk-proc-test-value"));
        assert!(scrubbed.stdout_lossy().contains("PATH="));
        let passed = run(
            &spec,
            &env(scrub_list(
                ["CRONSOLE_PROC_TEST_KEY"],
                &["CRONSOLE_PROC_TEST_KEY".into()],
            )),
        )
        .await
        .unwrap();
        assert!(passed.stdout_lossy().contains("sk-proc-test-value"));
    }

    #[test]
    fn only_commands_without_shell_syntax_skip_the_shell() {
        assert_eq!(plain_argv("true"), Some(vec!["true"]));
        assert_eq!(plain_argv("  sleep\t0.5 "), Some(vec!["sleep", "0.5"]));
        assert_eq!(
            plain_argv("/usr/bin/curl -fsS https://example.com/a,b"),
            Some(vec!["/usr/bin/curl", "-fsS", "https://example.com/a,b"])
        );
        for needs_shell in [
            "",
            "   ",
            "echo $HOME",
            "echo 'a b'",
            "echo \"a\"",
            "ls *.txt",
            "cat ~/x",
            "X=1 env",
            "a | b",
            "a; b",
            "a && b",
            "a > f",
            "sleep 1 &",
            "echo a\\ b",
            "exit 3",
            "cd /tmp",
            "export X",
            "echo -e x",
            "pwd",
            "if true",
            "echo `id`",
            "echo é",
            "a\nb",
        ] {
            assert_eq!(plain_argv(needs_shell), None, "{needs_shell:?}");
        }
    }

    #[test]
    fn guard_for_pid_one_or_less_never_signals() {
        // pgid 0 would mean "our own group" and 1 is init: the guard must refuse both.
        let g = GroupGuard::new(0);
        assert!(g.pgid.is_none());
        let g = GroupGuard::new(1);
        assert!(g.pgid.is_none());
    }

    /// The stopped-zygote check reads the state the kernel reports: `T` after SIGSTOP, not
    /// after SIGCONT, and nothing for a pid that is gone.
    #[test]
    fn a_stopped_process_is_seen_as_stopped() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let wait_for = |want: bool| {
            (0..200).any(|_| {
                std::thread::sleep(Duration::from_millis(10));
                process_stopped(pid) == want
            })
        };
        // SAFETY: signals to the child this test spawned and has not reaped.
        unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
        assert!(wait_for(true), "stopped");
        unsafe { libc::kill(pid as i32, libc::SIGCONT) };
        assert!(wait_for(false), "continued");
        let _ = child.kill();
        let _ = child.wait();
        assert!(!process_stopped(pid), "gone");
    }
}

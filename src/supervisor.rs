//! The per-run supervisor: a tiny process that sits between the owner and one command, so that
//! nothing a run starts can outlive the run or the owner (issue 10 item 4). It is a fork of the
//! owner's **zygote** (`cronsole __zygote`, [`zygote_main`], started once per owner), or — when
//! the zygote cannot take a request — cronsole re-executing itself as
//! `cronsole __supervise …` ([`SUBCOMMAND`]). Both behave as described below; the fork only
//! saves the exec of the 80 MB binary per run (most of a 10 000-run burst's cost, issue 14).
//! A zygote's supervisor serves one run at a time, and once that run's whole tree is gone it
//! waits for the next run instead of exiting (no fork per run; see [`zygote_main`]).
//!
//! Owns: the zygote, starting the command under a subreaper, watching the owner's life-line, and
//! killing the command's whole process tree. Must not touch: the store, capture of output (the
//! owner reads the pipes it handed down), timeouts (the owner decides and closes the life-line).
//!
//! How it works:
//! - The supervisor makes itself a *child subreaper* (`PR_SET_CHILD_SUBREAPER`): every process
//!   the command starts stays its descendant, even one that calls `setsid` or double-forks (an
//!   orphan is re-parented to the nearest subreaper, not to PID 1).
//! - Its stdin (a fork of the zygote: the run's control socket) is the **life-line**: a pipe
//!   (socket) whose only write end the owner holds for as long as it
//!   wants the run alive. End of file on it means "stop now" — the owner closed it (run ended,
//!   timed out, hit a hard cap or was cancelled) or the owner process died (the kernel closes the
//!   fds of a dead process, `kill -9` included). A pipe is tied to the *process*, unlike
//!   `PR_SET_PDEATHSIG`, which fires when the spawning *thread* exits and is not inherited by
//!   grandchildren. `PR_SET_PDEATHSIG` is deliberately *not* used: a tokio blocking thread that
//!   spawned a supervisor may exit while the owner lives, and the signal would kill a healthy run.
//!   SIGTERM sent to the supervisor is handled like end of file.
//! - Optional dead-man switch (`--stall-ms N`): the owner writes a byte every second; if nothing
//!   arrives for N ms (the owner is stopped with SIGSTOP, or hung) the tree is killed. The engine
//!   sets N to half the job's lease, so a stopped owner's command is gone before its lease can
//!   expire and another owner can claim the job.
//! - On a stop the supervisor first SIGKILLs the command and, on a zygote's run (the command
//!   leads a process group of its own), that whole group — one `killpg`, whatever the number
//!   of runs alive. Then, when the command exits or after a stop, it SIGKILLs every descendant
//!   left (a `setsid` escapee leaves the group), found by walking down the kernel's child lists
//!   (`/proc/PID/task/TID/children`, the size of the run's tree; every process's parent link
//!   in `/proc` when the kernel has no such lists), reaps them, and exits with the command's
//!   code (`128 + N` when it died of signal N). Escaped processes are therefore killed when
//!   their run ends and cannot hold the owner's output pipes open. Red team 9: when an owner
//!   with 512 runs was killed, each supervisor read every process's `/proc/PID/stat` before
//!   its first kill — 512 × a few thousand reads on 2 cores, tens of seconds in which the
//!   commands ran to completion, and the one-shot recovery then ran them a second time.
//! - Nothing starts for an owner that is gone: a supervisor looks at the run's life-line just
//!   before it starts the command (`peer_gone`: closed or cut means the owner died or gave
//!   up on the run), and the zygote stops at its owner's hang-up, dropping the requests still
//!   queued on its socket unread. A command whose owner dies between that look and its start
//!   is killed as soon as it has started (the life-line has ended).
//! - The switch reports [`STALLED`] only when the stop's kill ended the command (it died of
//!   SIGKILL); a command that ended by itself in the meantime reports its own code (and a note
//!   on stderr), so a completed command is never recorded as killed and retried (red team 9).
//!
//! - A `__supervise` exec killed outright (`kill -9`) cannot kill its tree. Its command stays in
//!   the supervisor's process group (the owner made it: group id = the supervisor's pid), which
//!   the owner kills when it sees the supervisor die of a signal ([`kill_group`]); with the
//!   zygote off the owner is also its supervisors' subreaper ([`become_subreaper`]) and kills
//!   and reaps what was re-parented to it ([`reap_strays`]: a `setsid` escapee). The zygote's
//!   forks keep the command in a group of its own (the zygote covers them).
//!
//! Exit codes of the supervisor itself: the command's; [`SPAWN_FAILED`] (127, shell convention)
//! when the command could not be started; [`STALLED`] (125) when the dead-man switch killed
//! the command (not when the command had ended by itself before the kill landed).

use std::collections::HashSet;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The hidden subcommand (first argument) that runs a supervisor.
pub const SUBCOMMAND: &str = "__supervise";
/// Exit code when the command could not be started.
pub const SPAWN_FAILED: i32 = 127;
/// Exit code when the owner stopped sending heartbeats (dead-man switch).
pub const STALLED: i32 = 125;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_term(_sig: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Parsed `__supervise [--stall-ms N] -- PROGRAM ARGS…`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    pub stall: Option<Duration>,
    pub argv: Vec<String>,
}

/// Parse the arguments after [`SUBCOMMAND`].
pub fn parse_args(args: &[String]) -> Result<Args, String> {
    let mut stall = None;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--stall-ms" => {
                let v = args.get(i + 1).ok_or("--stall-ms needs a value")?;
                let ms: u64 = v
                    .parse()
                    .map_err(|_| format!("--stall-ms: not a number: {v}"))?;
                stall = (ms > 0).then(|| Duration::from_millis(ms));
                i += 2;
            }
            "--" => {
                let argv = args[i + 1..].to_vec();
                if argv.is_empty() {
                    return Err("nothing to run after --".into());
                }
                return Ok(Args { stall, argv });
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Err("missing -- PROGRAM".into())
}

/// Entry point of `cronsole __supervise …`; returns the process exit code.
pub fn main(args: &[String]) -> i32 {
    let args = match parse_args(args) {
        Ok(a) => a,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "cronsole {SUBCOMMAND}: {e}");
            return 2;
        }
    };
    let mut cmd = Command::new(&args.argv[0]);
    cmd.args(&args.argv[1..]);
    // The command stays in this supervisor's process group, which its owner made for it (the
    // group id is the supervisor's pid): if this process is killed outright, the owner kills
    // what the run left by that group ([`kill_group`]).
    supervise(cmd, &args.argv.join(" "), 0, args.stall, false)
}

/// SIGKILL process group `pgid` until it is empty (or `limit` passes): what a `__supervise`
/// killed outright (`kill -9`) left behind — the command and every descendant still in the
/// group the owner made for that supervisor (its pid). A process group id is not reused while
/// the group has a member, so this cannot reach another run. Blocking (a few milliseconds per
/// round, while a process forks as it dies).
pub fn kill_group(pgid: i32, limit: Duration) {
    if pgid <= 1 {
        return;
    }
    let started = Instant::now();
    loop {
        // SAFETY: killpg has no memory-safety preconditions; ESRCH means the group is empty.
        let r = unsafe { libc::killpg(pgid, libc::SIGKILL) };
        if r != 0 || started.elapsed() > limit {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Make this process a child subreaper: what a child of it leaves when it dies is re-parented
/// here, not to init. The owner does this when its runs' supervisors are execs of `__supervise`
/// (no zygote): a supervisor killed outright then leaves its run's processes — a `setsid`
/// escapee included, which its process group ([`kill_group`]) does not hold — to the owner,
/// which kills and reaps them ([`reap_strays`]). `false` when the kernel refused.
pub fn become_subreaper() -> bool {
    // SAFETY: plain prctl with valid arguments.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0 }
}

/// Kill and reap the children of this (subreaper) process that it did not start itself: what a
/// run's supervisor killed outright left, re-parented here — each with its whole subtree. Left
/// alone: a child `ours` names (one this process started and waits for), and a live child
/// running this very executable (a supervisor, the zygote, or a fork of this process about to
/// exec one: its pid is not known yet). Repeats until none is left or `limit` passes.
/// Blocking.
pub fn reap_strays(limit: Duration, ours: &dyn Fn(i32) -> bool) {
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    let exe = |pid: &str| std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    let mine = exe("self");
    let started = Instant::now();
    loop {
        let links = parent_links();
        let strays: Vec<i32> = links
            .iter()
            .filter(|(pid, ppid)| {
                *ppid == me && !ours(*pid) && (mine.is_none() || exe(&pid.to_string()) != mine)
            })
            .map(|(pid, _)| *pid)
            .collect();
        if strays.is_empty() {
            return;
        }
        for &s in &strays {
            for d in subtree(&links, s) {
                // SAFETY: kill has no memory-safety preconditions; ESRCH means already gone.
                unsafe {
                    libc::kill(d, libc::SIGKILL);
                }
            }
            // SAFETY: as above; then reap it if it is dead (it is our child now).
            unsafe {
                libc::kill(s, libc::SIGKILL);
                let mut status = 0;
                libc::waitpid(s, &mut status, libc::WNOHANG);
            }
        }
        if started.elapsed() > limit {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Run `cmd` (stdin closed; its own process group when `own_group`, else this process's) under
/// this process as a subreaper, watching the life-line on fd `lifeline`; kill the whole tree
/// when the command exits or the life-line says stop; the command's exit code,
/// [`SPAWN_FAILED`] or [`STALLED`]. Called in a process of its own (the `__supervise` exec, or
/// a fork of the zygote) with no other thread running.
///
/// One thread waits for everything (issue 14 item 4: a watcher thread per run cost a 2 MB stack
/// mapping, a clone and its exit on every run): SIGCHLD and SIGTERM are blocked except inside
/// `ppoll` on the life-line, which unblocks them atomically, so a child's exit or a SIGTERM that
/// arrives at any moment interrupts the wait — none can slip in between a check and the sleep.
fn supervise(
    cmd: Command,
    what: &str,
    lifeline: libc::c_int,
    stall: Option<Duration>,
    own_group: bool,
) -> i32 {
    supervise_run(cmd, what, lifeline, stall, own_group).0
}

/// [`supervise`], and whether the run's tree is gone (nothing left to reap), so that this
/// process may supervise another run (a zygote's worker); the signal mask is restored.
fn supervise_run(
    mut cmd: Command,
    what: &str,
    lifeline: libc::c_int,
    stall: Option<Duration>,
    own_group: bool,
) -> (i32, bool) {
    // SAFETY: plain prctl/sigaction calls with valid arguments, before any other thread exists.
    // SIGCHLD needs a handler (not SIG_DFL, which is "ignore" and would not interrupt `ppoll`).
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        handle(libc::SIGTERM, on_term as *const () as libc::sighandler_t);
        handle(libc::SIGCHLD, on_wake as *const () as libc::sighandler_t);
    }
    // Blocked from before the spawn: the command's exit is then pending until `ppoll` (the spawn
    // resets the mask for the command itself).
    let waking = waking_signals();
    // SAFETY: a zeroed sigset is a valid out-parameter; valid sigset pointers.
    let mut before = unsafe { std::mem::zeroed::<libc::sigset_t>() };
    unsafe {
        libc::sigprocmask(libc::SIG_BLOCK, &waking, &mut before);
    }
    let mut open_mask = before;
    // SAFETY: valid sigset pointer and signal numbers.
    unsafe {
        for sig in [libc::SIGCHLD, libc::SIGTERM] {
            libc::sigdelset(&mut open_mask, sig);
        }
    }
    let restore = || {
        // SAFETY: a valid sigset pointer.
        unsafe {
            libc::sigprocmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
        }
    };
    cmd.stdin(Stdio::null());
    if own_group {
        cmd.process_group(0);
    }
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            restore();
            let _ = writeln!(std::io::stderr(), "could not start `{what}`: {e}");
            return (SPAWN_FAILED, true);
        }
    };
    let pid = child.id() as i32;
    // Not waited through std: the loop below owns every wait.
    std::mem::forget(child);

    let mut watch = Lifeline::new(lifeline, stall);
    let mut stalled = false;
    let code = loop {
        if let Some(code) = reap(pid) {
            break code;
        }
        let said = if STOP.load(Ordering::SeqCst) {
            Watch::Stop
        } else {
            watch.wait(&open_mask)
        };
        match said {
            Watch::Alive => continue,
            Watch::Stalled => stalled = true,
            Watch::Stop => {}
        }
        // Stop: kill the command at once — its whole process group when it has its own, one
        // signal whatever the run's size — then walk for what left the group (a `setsid`
        // escapee), then wait for the command's own end (it was killed too).
        kill_command(pid, own_group);
        kill_descendants();
        break wait_for(pid);
    };
    let clean = kill_tree(Duration::from_secs(5));
    restore();
    if stalled {
        let code = stall_outcome(code);
        let _ = writeln!(std::io::stderr(), "{}", stall_note(code, stall, clean));
        return (code, clean);
    }
    (code, clean)
}

/// What a run the dead-man switch stopped reports, from the command's own status `code`:
/// [`STALLED`] when the kill ended it (SIGKILL, 137), else the command's code — it ended by
/// itself between the switch's decision and the kill, so the run did complete (red team 9: such
/// runs were recorded "killed" and retried, and their command completed twice).
fn stall_outcome(code: i32) -> i32 {
    if code == 128 + libc::SIGKILL {
        STALLED
    } else {
        code
    }
}

/// The line a supervisor writes on the run's stderr when the dead-man switch fired: what
/// happened to the command (`outcome` from [`stall_outcome`]) and whether its tree is gone.
fn stall_note(outcome: i32, stall: Option<Duration>, clean: bool) -> String {
    let quiet = stall.unwrap_or_default();
    let mut note = if outcome == STALLED {
        format!("cronsole: run killed: its owner sent no heartbeat for {quiet:?} (stopped or hung)")
    } else {
        format!(
            "cronsole: its owner sent no heartbeat for {quiet:?} (stopped or hung), but the command had already ended by itself (exit {outcome})"
        )
    };
    if !clean {
        note.push_str("; some of its processes did not die within 5s");
    }
    note
}

/// SIGCHLD and SIGTERM: the signals that end a supervisor's wait.
fn waking_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set; sigaddset with valid signal numbers.
    unsafe {
        let mut set = std::mem::zeroed::<libc::sigset_t>();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::sigaddset(&mut set, libc::SIGTERM);
        set
    }
}

/// Install `handler` for `sig` without `SA_RESTART`, so it interrupts a blocking call.
///
/// # Safety
/// `handler` must be async-signal-safe.
unsafe fn handle(sig: libc::c_int, handler: libc::sighandler_t) {
    // SAFETY: a zeroed sigaction with an empty mask and a valid handler.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(sig, &sa, std::ptr::null_mut());
    }
}

extern "C" fn on_wake(_sig: libc::c_int) {}

/// Reap every exited child (the command, and descendants re-parented to this subreaper)
/// without blocking; the command's exit code once it is reaped (`128 + N` for signal N).
fn reap(pid: i32) -> Option<i32> {
    let mut code = None;
    loop {
        let mut status = 0;
        // SAFETY: waitpid with a valid out-pointer.
        let r = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if r < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        if r <= 0 {
            return code;
        }
        if r == pid {
            code = Some(exit_code(status));
        }
    }
}

/// The exit code of a `waitpid` status: the process's, or `128 + N` when signal N killed it.
fn exit_code(status: libc::c_int) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        -1
    }
}

/// What the life-line said.
#[derive(Debug, PartialEq, Eq)]
enum Watch {
    /// A heartbeat, a signal, or nothing yet: look again.
    Alive,
    /// End of file or an error: the owner closed it or died.
    Stop,
    /// No heartbeat for longer than the dead-man switch allows.
    Stalled,
}

/// The owner's life-line (a pipe or socket) and the dead-man switch on it.
struct Lifeline {
    fd: libc::c_int,
    stall: Option<Duration>,
    last: Instant,
}

impl Lifeline {
    fn new(fd: libc::c_int, stall: Option<Duration>) -> Self {
        Lifeline {
            fd,
            stall,
            last: Instant::now(),
        }
    }

    /// Wait until the life-line has something to say, a blocked signal of `open_mask`'s
    /// complement arrives (SIGCHLD, SIGTERM), or the dead-man switch's time is up.
    fn wait(&mut self, open_mask: &libc::sigset_t) -> Watch {
        let left = self.stall.map(|s| s.saturating_sub(self.last.elapsed()));
        if left == Some(Duration::ZERO) {
            return Watch::Stalled;
        }
        let ts = left.map(|d| libc::timespec {
            tv_sec: d.as_secs() as libc::time_t,
            tv_nsec: d.subsec_nanos() as libc::c_long,
        });
        let mut pfd = libc::pollfd {
            fd: self.fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, a valid (or null) timeout and a valid signal mask.
        let n = unsafe {
            libc::ppoll(
                &mut pfd,
                1,
                ts.as_ref().map_or(std::ptr::null(), |t| t as *const _),
                open_mask,
            )
        };
        if n < 0 {
            let interrupted =
                std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted;
            // Interrupted: a child exited or SIGTERM came (the caller looks at both).
            return if interrupted {
                Watch::Alive
            } else {
                Watch::Stop
            };
        }
        if n > 0 {
            let mut buf = [0u8; 64];
            // SAFETY: reading into a stack buffer of the given length.
            let r = unsafe { libc::read(self.fd, buf.as_mut_ptr().cast(), buf.len()) };
            if r == 0 {
                return Watch::Stop; // owner closed the life-line or died
            }
            if r < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted
                    && e.kind() != std::io::ErrorKind::WouldBlock
                {
                    return Watch::Stop;
                }
            } else {
                self.last = Instant::now();
            }
        }
        Watch::Alive
    }
}

/// Reap children until `pid` exits; its exit code (`128 + N` for signal N).
fn wait_for(pid: i32) -> i32 {
    loop {
        let mut status = 0;
        // SAFETY: waitpid with a valid out-pointer.
        let r = unsafe { libc::waitpid(-1, &mut status, 0) };
        if r < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return -1; // ECHILD: nothing left (cannot happen before `pid` is reaped)
        }
        if r == pid {
            return exit_code(status);
        }
    }
}

/// SIGKILL the command `pid` (not reaped yet, so neither its pid nor its group id can be
/// reused) and, when it leads a process group of its own (`own_group`: a zygote's run), that
/// whole group: what the command started without leaving the group dies by the same single
/// call, before any `/proc` walk. Red team 9: with 512 runs whose owner was killed, each
/// supervisor walked all of `/proc` before its first kill — 512 × a few thousand `/proc`
/// reads on 2 cores — and the commands ran to completion in the meantime.
fn kill_command(pid: i32, own_group: bool) {
    if pid <= 1 {
        return;
    }
    // SAFETY: kill/killpg have no memory-safety preconditions; ESRCH means already gone.
    unsafe {
        if own_group {
            libc::killpg(pid, libc::SIGKILL);
        }
        libc::kill(pid, libc::SIGKILL);
    }
}

/// Whether the other end of the life-line `fd` is gone: the owner closed it, cut it
/// (`shutdown`), or died. Does not wait and reads nothing (a heartbeat queued before the end
/// does not hide it). A supervisor asks before it starts a command, so nothing starts for an
/// owner that is already gone (the zygote watches its own socket's hang-up the same way).
fn peer_gone(fd: libc::c_int) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no timeout.
    let n = unsafe { libc::poll(&mut pfd, 1, 0) };
    n > 0 && pfd.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0
}

/// Every process whose parent chain leads to `root`. Walked down from `root` through the
/// kernel's child lists (`/proc/PID/task/TID/children`), which costs the size of the tree, not
/// of the machine: the supervisors of hundreds of runs stopping at once (their owner died)
/// must not each read every process's `/proc/PID/stat`. Without those lists (a kernel built
/// without `CONFIG_PROC_CHILDREN`) every process's parent link is read instead. A process
/// forked during the walk may be missed: callers repeat until nothing is left.
pub fn descendants_of(root: i32) -> Vec<i32> {
    if !child_lists() {
        return subtree(&parent_links(), root);
    }
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for c in children_of(p) {
            if c != root && seen.insert(c) {
                out.push(c);
                frontier.push(c);
            }
        }
    }
    out
}

/// Whether this kernel lists each task's children (`/proc/thread-self/children`).
fn child_lists() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| std::path::Path::new("/proc/thread-self/children").exists())
}

/// The children of `pid` (of each of its threads); empty when it is gone.
fn children_of(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        if let Ok(list) = std::fs::read_to_string(t.path().join("children")) {
            out.extend(
                list.split_whitespace()
                    .filter_map(|w| w.parse::<i32>().ok()),
            );
        }
    }
    out
}

/// `(pid, parent pid)` of every process visible in `/proc`.
fn parent_links() -> Vec<(i32, i32)> {
    let mut parent_of: Vec<(i32, i32)> = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return parent_of;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Fields after the command name (which may hold spaces and parentheses).
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut f = rest.split_whitespace();
        let _state = f.next();
        if let Some(ppid) = f.next().and_then(|p| p.parse::<i32>().ok()) {
            parent_of.push((pid, ppid));
        }
    }
    parent_of
}

/// The descendants of `root` in `links` (`root` excluded).
fn subtree(links: &[(i32, i32)], root: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for &(c, pp) in links {
            if pp == p && c != root && !out.contains(&c) {
                out.push(c);
                frontier.push(c);
            }
        }
    }
    out
}

/// SIGKILL every descendant of this process (no reaping; safe from any thread).
fn kill_descendants() {
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    for pid in descendants_of(me) {
        // SAFETY: kill has no memory-safety preconditions; ESRCH means already gone.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
}

/// Kill and reap every descendant until none is left (`true`) or `limit` passes (`false`).
fn kill_tree(limit: Duration) -> bool {
    let started = Instant::now();
    loop {
        // Reap whatever is already dead; ECHILD means no child, hence no descendant at all
        // (an orphaned descendant is re-parented to us, the subreaper).
        loop {
            let mut status = 0;
            // SAFETY: waitpid with a valid out-pointer.
            let r = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if r > 0 {
                continue;
            }
            if r < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return true; // ECHILD
            }
            break; // children remain
        }
        if started.elapsed() > limit {
            return false;
        }
        kill_descendants();
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The hidden subcommand that runs an owner's zygote (see the module doc of [`zygote_main`]).
pub const ZYGOTE_SUBCOMMAND: &str = "__zygote";
/// Largest request the zygote accepts (a command line and its environment changes); a larger
/// one is started through the `__supervise` exec instead.
pub const MAX_REQUEST: usize = 64 * 1024;
const MAGIC: &[u8] = b"cronsole-run/1";

/// What one run's supervisor starts, as the owner sends it to its zygote: one SEQPACKET message
/// of NUL-terminated fields with three descriptors attached — the run's control socket, and the
/// write ends of its stdout and stderr pipes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Dead-man switch (`--stall-ms`).
    pub stall: Option<Duration>,
    /// Working directory; `None`: the zygote's (the owner's at the zygote's start).
    pub workdir: Option<std::path::PathBuf>,
    /// Variables removed from the command's environment.
    pub scrub: Vec<std::ffi::OsString>,
    /// Variables added.
    pub extra: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    /// Program and arguments (`/bin/sh -c CMD`, or a plain command's words).
    pub argv: Vec<std::ffi::OsString>,
}

impl Request {
    /// The message bytes; `None` when a field holds a NUL byte (no program could receive it)
    /// or the whole exceeds [`MAX_REQUEST`].
    pub fn encode(&self) -> Option<Vec<u8>> {
        use std::os::unix::ffi::OsStrExt;
        let mut out = Vec::with_capacity(256);
        let mut field = |b: &[u8]| -> Option<()> {
            if b.contains(&0) {
                return None;
            }
            out.extend_from_slice(b);
            out.push(0);
            Some(())
        };
        field(MAGIC)?;
        let stall = self.stall.map_or(0, |s| s.as_millis().max(1));
        field(stall.to_string().as_bytes())?;
        field(
            self.workdir
                .as_ref()
                .map_or(&[][..], |d| d.as_os_str().as_bytes()),
        )?;
        field(self.scrub.len().to_string().as_bytes())?;
        for v in &self.scrub {
            field(v.as_bytes())?;
        }
        field(self.extra.len().to_string().as_bytes())?;
        for (k, v) in &self.extra {
            field(k.as_bytes())?;
            field(v.as_bytes())?;
        }
        if self.argv.is_empty() {
            return None;
        }
        for a in &self.argv {
            field(a.as_bytes())?;
        }
        (out.len() <= MAX_REQUEST).then_some(out)
    }

    /// Parse [`Request::encode`]'s bytes.
    pub fn decode(b: &[u8]) -> Result<Request, String> {
        use std::os::unix::ffi::OsStrExt;
        let body = b.strip_suffix(&[0]).ok_or("request not NUL-terminated")?;
        let mut f = body.split(|c| *c == 0);
        let os = |x: &[u8]| std::ffi::OsStr::from_bytes(x).to_os_string();
        let mut next = |what: &str| f.next().ok_or(format!("request: missing {what}"));
        if next("magic")? != MAGIC {
            return Err("request: unknown format".into());
        }
        let num = |x: &[u8], what: &str| -> Result<u64, String> {
            std::str::from_utf8(x)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or(format!("request: bad {what}"))
        };
        let stall = num(next("stall")?, "stall")?;
        let workdir = next("workdir")?;
        let n_scrub = num(next("scrub count")?, "scrub count")?;
        let mut scrub = Vec::new();
        for _ in 0..n_scrub {
            scrub.push(os(next("scrub")?));
        }
        let n_extra = num(next("extra count")?, "extra count")?;
        let mut extra = Vec::new();
        for _ in 0..n_extra {
            let k = os(next("extra name")?);
            extra.push((k, os(next("extra value")?)));
        }
        let argv: Vec<_> = f.map(os).collect();
        if argv.is_empty() {
            return Err("request: nothing to run".into());
        }
        Ok(Request {
            stall: (stall > 0).then(|| Duration::from_millis(stall)),
            workdir: (!workdir.is_empty()).then(|| os(workdir).into()),
            scrub,
            extra,
            argv,
        })
    }
}

/// Send `data` with `fds` attached as one message on the SEQPACKET socket `sock`, without
/// blocking (`WouldBlock` when the zygote is behind) and without SIGPIPE (`BrokenPipe` when it
/// is gone).
pub fn send_with_fds(
    sock: std::os::fd::BorrowedFd<'_>,
    data: &[u8],
    fds: &[std::os::fd::BorrowedFd<'_>],
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let raw: Vec<libc::c_int> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let fd_bytes = std::mem::size_of_val(raw.as_slice());
    // SAFETY: CMSG_* are pure size computations.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: a zeroed msghdr is valid; every pointer set below outlives the sendmsg call, the
    // control buffer is 8-byte aligned and `space` bytes long, and CMSG_FIRSTHDR of a buffer
    // of CMSG_SPACE(n) bytes is non-null with room for CMSG_LEN(n).
    let n = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as _;
        std::ptr::copy_nonoverlapping(raw.as_ptr().cast::<u8>(), libc::CMSG_DATA(c), fd_bytes);
        libc::sendmsg(
            sock.as_raw_fd(),
            &msg,
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if n as usize != data.len() {
        return Err(std::io::Error::other("request sent in part"));
    }
    Ok(())
}

/// Receive one message into `buf` with the descriptors attached (close-on-exec). `Ok(None)`
/// at end of file; a truncated message is an error (its descriptors are closed).
fn recv_with_fds(
    sock: libc::c_int,
    buf: &mut [u8],
) -> std::io::Result<Option<(usize, Vec<std::os::fd::OwnedFd>)>> {
    use std::os::fd::FromRawFd;
    const MAX_FDS: usize = 8;
    // SAFETY: pure size computation.
    let space =
        unsafe { libc::CMSG_SPACE((MAX_FDS * std::mem::size_of::<libc::c_int>()) as u32) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut fds = Vec::new();
    // SAFETY: as in `send_with_fds`; the kernel fills at most `space` control bytes, and every
    // SCM_RIGHTS payload is a whole number of fds we now own.
    let (n, flags) = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let n = libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC);
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c);
                let len = (*c).cmsg_len as usize - (data as usize - c as usize);
                for i in 0..len / std::mem::size_of::<libc::c_int>() {
                    let fd = std::ptr::read_unaligned(data.cast::<libc::c_int>().add(i));
                    fds.push(std::os::fd::OwnedFd::from_raw_fd(fd));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
        (n as usize, msg.msg_flags)
    };
    if flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
        return Err(std::io::Error::other("request truncated"));
    }
    if n == 0 && fds.is_empty() {
        return Ok(None);
    }
    Ok(Some((n, fds)))
}

/// Write all of `b` to `fd`, ignoring failures (the reader may be gone: nothing to tell).
fn write_all_fd(fd: libc::c_int, mut b: &[u8]) {
    while !b.is_empty() {
        // SAFETY: writing from a valid buffer of the given length.
        let n = unsafe { libc::write(fd, b.as_ptr().cast(), b.len()) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        b = &b[n as usize..];
    }
}

/// What a run's supervisor writes on its control socket: its pid at start, and at the end the
/// exit code, each 4 bytes little-endian. The owner reads to end of file.
pub fn parse_status(b: &[u8]) -> (Option<i32>, Option<i32>) {
    let word = |r: std::ops::Range<usize>| {
        b.get(r)
            .and_then(|w| <[u8; 4]>::try_from(w).ok())
            .map(i32::from_le_bytes)
    };
    (word(0..4).filter(|p| *p > 1), word(4..8))
}

/// Entry point of `cronsole __zygote`: one per owner, started on its first run and alive until
/// the owner is gone. It takes the cost of re-executing cronsole out of every run: the
/// supervisor of each run is a `fork` of this small single-threaded process instead of an
/// `exec` of the 80 MB binary (issue 14 item 4), with the same guarantees as `__supervise`.
///
/// - Its stdin is a SEQPACKET socket whose other end only the owner holds (close-on-exec, so no
///   command inherits it). Each message is a [`Request`] with the run's control socket and
///   output pipes attached; the zygote hands it to an idle supervisor or forks a new one, which
///   becomes that run's supervisor exactly as `__supervise` does (subreaper, life-line = the
///   control socket, kill of the whole tree), then writes its pid and exit code on the control
///   socket for the owner ([`parse_status`]).
/// - Supervisors are reused (issue 14 item 4: the fork, its copy-on-write faults and its exit
///   were the largest cost per run left on this side). After a run, a supervisor whose run's
///   tree is gone (every descendant reaped: nothing of the old run is left under it) closes the
///   run's descriptors, points stdout/stderr back at `/dev/null`, and announces itself idle on
///   a pipe to the zygote; the zygote sends the next request on that supervisor's own socket.
///   A supervisor that could not empty its tree (a process that would not die within 5 s)
///   exits instead, and so does one that served `RUNS_PER_SUPERVISOR` (1 000) runs. Idle
///   ones are told to exit (their socket closed) after `IDLE_KEEP` (10 s), or at once beyond
///   `IDLE_MAX` (128 idle).
///   Each run's directory and environment changes apply to its command only
///   (`Command::current_dir`/`env`), so nothing of one run's request reaches the next.
/// - End of file (hang-up) on the socket means the owner is gone (closed by the kernel when it
///   dies, `kill -9` included): the zygote drops the requests still queued there unread (none
///   of them may start: red team 9 saw runs started after their owner's death), kills every
///   descendant left and exits. Each run's
///   supervisor also sees its own control socket close and kills its tree, so a run dies with
///   its owner even if the zygote itself was killed first. `PR_SET_PDEATHSIG` is not used, for
///   the reason given in the module doc (it follows the spawning thread).
/// - The zygote is a subreaper too and reaps its children on SIGCHLD, so a supervisor killed by
///   hand (`kill -9`) leaves its run's processes under the zygote, not under PID 1. When it
///   reaps a supervisor that died of a signal, the zygote kills every child of its own that is
///   not a live supervisor, with their descendants (`kill_orphans`): a live supervisor is a
///   subreaper, so only a dead supervisor's processes can be there. The owner sees that run's
///   control socket end without an exit code and records the attempt as failed, "supervisor
///   died".
/// - Commands get the zygote's environment (the owner's at its start; the binary never changes
///   its own) minus the request's `scrub`, plus its `extra`, as the exec'd supervisor does.
pub fn zygote_main() -> i32 {
    use std::os::fd::{AsFd, AsRawFd};
    // SAFETY: prctl/sigaction with valid arguments; this process has one thread. SIGCHLD
    // interrupts the wait (no SA_RESTART) so exited supervisors are reaped at once (reaped,
    // not ignored, so their CPU time is counted in the zygote's children's times).
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_child as *const () as libc::sighandler_t;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGCHLD, &sa, std::ptr::null_mut());
    }
    // SIGCHLD is blocked except inside `ppoll`, so an exit between the reaping and the wait
    // still interrupts the wait (a supervisor killed by hand has its orphans killed at once).
    // SAFETY: valid sigset pointers.
    let open_mask = unsafe {
        let mut chld = std::mem::zeroed::<libc::sigset_t>();
        libc::sigemptyset(&mut chld);
        libc::sigaddset(&mut chld, libc::SIGCHLD);
        let mut before = std::mem::zeroed::<libc::sigset_t>();
        libc::sigprocmask(libc::SIG_BLOCK, &chld, &mut before);
        libc::sigdelset(&mut before, libc::SIGCHLD);
        before
    };
    let mut buf = vec![0u8; MAX_REQUEST];
    // The supervisors this zygote forked and that have not been reaped yet.
    let mut supervisors: HashSet<i32> = HashSet::new();
    // Idle supervisors announce themselves here (their pid, 4 bytes: one atomic pipe write).
    let (idle_r, idle_w) = match pipe_cloexec() {
        Ok(p) => p,
        Err(_) => return 1,
    };
    let mut pool = Pool::default();
    loop {
        on_exits(&mut supervisors);
        pool.forget_gone(&supervisors);
        pool.retire(Instant::now());
        let mut pfd = [
            libc::pollfd {
                fd: 0,
                events: libc::POLLIN | libc::POLLRDHUP,
                revents: 0,
            },
            libc::pollfd {
                fd: idle_r.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // Idle supervisors are looked at every second (to retire them), else no timeout.
        let second = libc::timespec {
            tv_sec: 1,
            tv_nsec: 0,
        };
        let timeout = if pool.idle.is_empty() {
            std::ptr::null()
        } else {
            &second as *const libc::timespec
        };
        // SAFETY: two valid pollfds, a valid (or null) timeout and a valid signal mask.
        let n = unsafe { libc::ppoll(pfd.as_mut_ptr(), 2, timeout, &open_mask) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            break;
        }
        if pfd[1].revents != 0 {
            pool.read_idle(idle_r.as_raw_fd(), &supervisors);
        }
        if pfd[0].revents == 0 {
            continue;
        }
        // The owner is gone (its end closed: it died, `kill -9` included) even if requests it
        // sent are still queued: none of them may start. They are dropped unread (their
        // descriptors close with this process) and every run still alive is killed below.
        if pfd[0].revents & (libc::POLLHUP | libc::POLLRDHUP | libc::POLLERR) != 0 {
            break;
        }
        match recv_with_fds(0, &mut buf) {
            Ok(None) => break,
            Ok(Some((n, fds))) => {
                if pool.hand_over(&buf[..n], &fds) {
                    continue;
                }
                let ctx = Spawn {
                    idle_r: idle_r.as_raw_fd(),
                    idle_w: idle_w.as_fd(),
                    pool: &pool,
                };
                if let Some((pid, sock)) = start_worker(&mut buf, n, fds, &ctx) {
                    supervisors.insert(pid);
                    pool.socks.insert(pid, sock);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // A malformed message: its descriptors are closed, so its owner sees the run end
            // without a status; the socket itself is still good.
            Err(e) if e.raw_os_error().is_none() => {}
            Err(_) => break,
        }
    }
    drop(pool);
    // The owner is gone: nothing any of its runs started may outlive it.
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    let started = Instant::now();
    loop {
        reap_exited(&mut supervisors);
        let left = descendants_of(me);
        if left.is_empty() || started.elapsed() > Duration::from_secs(5) {
            break;
        }
        for pid in left {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    0
}

extern "C" fn on_child(_sig: libc::c_int) {}

/// Reap every child that has exited (supervisors, and orphans re-parented to the zygote).
/// Returns whether a supervisor of `supervisors` died of a signal (killed by hand: it could not
/// kill its run's tree, whose processes are now the zygote's children).
fn reap_exited(supervisors: &mut HashSet<i32>) -> bool {
    let mut killed = false;
    loop {
        let mut status = 0;
        // SAFETY: waitpid with a valid out-pointer.
        let r = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if r <= 0 {
            if r < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return killed;
        }
        if supervisors.remove(&r) && libc::WIFSIGNALED(status) {
            killed = true;
        }
    }
}

/// Reap exited children; when a supervisor died of a signal (`kill -9` of one run's
/// supervisor), kill the processes its run left behind (see [`kill_orphans`]).
fn on_exits(supervisors: &mut HashSet<i32>) {
    if reap_exited(supervisors) {
        kill_orphans(supervisors, ORPHAN_SWEEP);
    }
}

/// How long the zygote keeps killing a dead supervisor's processes (a command that forks as
/// fast as it can) before it goes back to its requests.
const ORPHAN_SWEEP: Duration = Duration::from_secs(1);

/// Kill every process under the zygote that is not one of its live `supervisors` or theirs:
/// a supervisor is a subreaper, so a run's processes can only be re-parented to the zygote
/// when their supervisor died without killing them — they belong to an ended attempt.
/// Bounded by `limit`; reaps them as they die.
fn kill_orphans(supervisors: &mut HashSet<i32>, limit: Duration) {
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    let started = Instant::now();
    loop {
        reap_exited(supervisors);
        let links = parent_links();
        let mut left = Vec::new();
        for &(pid, ppid) in &links {
            if ppid == me && !supervisors.contains(&pid) {
                left.push(pid);
                left.extend(subtree(&links, pid));
            }
        }
        if left.is_empty() || started.elapsed() > limit {
            return;
        }
        for pid in left {
            // SAFETY: kill has no memory-safety preconditions; ESRCH means already gone.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// How long an idle supervisor is kept for the next run before it is told to exit.
const IDLE_KEEP: Duration = Duration::from_secs(10);
/// Most idle supervisors kept (more are told to exit at once).
const IDLE_MAX: usize = 128;
/// Runs one supervisor serves before it exits (bounds anything a run could leave in it).
const RUNS_PER_SUPERVISOR: u32 = 1000;

/// The zygote's supervisors: each serves one run at a time and, once its run's tree is gone,
/// waits for the next one on its own socket (issue 14 item 4: a fork, its copy-on-write faults
/// and its exit per run were the largest cost left on the zygote's side).
#[derive(Default)]
struct Pool {
    /// The zygote's end of each live supervisor's socket. Closing it tells an idle supervisor
    /// to exit.
    socks: std::collections::HashMap<i32, std::os::fd::OwnedFd>,
    /// Idle supervisors, the most recently idle last (reused first), with when they became idle.
    idle: Vec<(i32, Instant)>,
}

impl Pool {
    /// Drop what is known of supervisors that were reaped.
    fn forget_gone(&mut self, supervisors: &HashSet<i32>) {
        self.socks.retain(|pid, _| supervisors.contains(pid));
        self.idle.retain(|(pid, _)| supervisors.contains(pid));
    }

    /// Tell supervisors idle for longer than [`IDLE_KEEP`], and any beyond [`IDLE_MAX`], to
    /// exit (their socket closes).
    fn retire(&mut self, now: Instant) {
        let excess = self.idle.len().saturating_sub(IDLE_MAX);
        let mut gone = Vec::new();
        let mut i = 0;
        self.idle.retain(|(pid, since)| {
            i += 1;
            let keep = i > excess && now.duration_since(*since) < IDLE_KEEP;
            if !keep {
                gone.push(*pid);
            }
            keep
        });
        for pid in gone {
            self.socks.remove(&pid);
        }
    }

    /// Read the pids of supervisors that became idle.
    fn read_idle(&mut self, fd: libc::c_int, supervisors: &HashSet<i32>) {
        let mut b = [0u8; 4096];
        loop {
            // SAFETY: reading into a stack buffer of the given length (the fd is non-blocking).
            let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), b.len()) };
            if n <= 0 {
                return;
            }
            let now = Instant::now();
            // Every write is 4 bytes and atomic, so a read returns whole pids.
            for w in b[..n as usize].chunks_exact(4) {
                let pid = i32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                if supervisors.contains(&pid) && self.socks.contains_key(&pid) {
                    self.idle.push((pid, now));
                }
            }
        }
    }

    /// Give a request to an idle supervisor; `false` when none took it (a new one is forked).
    fn hand_over(&mut self, msg: &[u8], fds: &[std::os::fd::OwnedFd]) -> bool {
        use std::os::fd::AsFd;
        let fds: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
        while let Some((pid, _)) = self.idle.pop() {
            if let Some(sock) = self.socks.get(&pid)
                && send_with_fds(sock.as_fd(), msg, &fds).is_ok()
            {
                return true;
            }
            // Gone (its end is closed) or broken: it is reaped when it exits.
            self.socks.remove(&pid);
        }
        false
    }
}

/// What a newly forked supervisor must close of the zygote's: the idle pipe's read end and
/// every other supervisor's socket (or an idle one would never see its socket close).
struct Spawn<'a> {
    idle_r: libc::c_int,
    idle_w: std::os::fd::BorrowedFd<'a>,
    pool: &'a Pool,
}

/// Fork a supervisor for the request in `buf[..n]` (its pid and the zygote's end of its
/// socket), or report why not on the request's control socket and stderr.
fn start_worker(
    buf: &mut [u8],
    n: usize,
    fds: Vec<std::os::fd::OwnedFd>,
    ctx: &Spawn<'_>,
) -> Option<(i32, std::os::fd::OwnedFd)> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let mut pair = [0; 2];
    // SAFETY: socketpair writes two descriptors into a valid array.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            pair.as_mut_ptr(),
        )
    };
    if r < 0 {
        refuse(
            &fds,
            &format!("socketpair: {}", std::io::Error::last_os_error()),
        );
        return None;
    }
    // SAFETY: both descriptors were just created and are owned by nothing else.
    let (ours, theirs) = unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(pair[0]),
            std::os::fd::OwnedFd::from_raw_fd(pair[1]),
        )
    };
    // SAFETY: this process is single-threaded, so the child may allocate and run Rust code.
    match unsafe { libc::fork() } {
        0 => {
            // SAFETY: closing the zygote's descriptors this supervisor must not hold; the
            // `OwnedFd`s are never dropped here (the child leaves through `_exit`).
            unsafe {
                libc::close(0); // the owner's socket: only the zygote reads it
                libc::close(ctx.idle_r);
                libc::close(ours.as_raw_fd());
                for s in ctx.pool.socks.values() {
                    libc::close(s.as_raw_fd());
                }
                libc::signal(libc::SIGCHLD, libc::SIG_DFL);
                let mut chld = std::mem::zeroed::<libc::sigset_t>();
                libc::sigemptyset(&mut chld);
                libc::sigaddset(&mut chld, libc::SIGCHLD);
                libc::sigprocmask(libc::SIG_UNBLOCK, &chld, std::ptr::null_mut());
            }
            std::mem::forget(ours);
            let code = worker(buf, n, fds, &theirs, ctx.idle_w.as_raw_fd());
            // SAFETY: leaving the forked child without running the zygote's destructors.
            unsafe { libc::_exit(code) }
        }
        -1 => {
            refuse(&fds, &format!("fork: {}", std::io::Error::last_os_error()));
            None
        }
        // The parent's copies of the run's descriptors close here; the child holds them.
        pid => Some((pid, ours)),
    }
}

/// Tell the owner a run could not start: a line on its stderr pipe, pid 0 and [`SPAWN_FAILED`]
/// on its control socket. `fds` are the request's (control, stdout, stderr) when it has them.
fn refuse(fds: &[std::os::fd::OwnedFd], why: &str) {
    use std::os::fd::AsRawFd;
    if let [ctl, _, err] = fds {
        write_all_fd(
            err.as_raw_fd(),
            format!("cronsole: could not start the run: {why}\n").as_bytes(),
        );
        let mut status = 0i32.to_le_bytes().to_vec();
        status.extend_from_slice(&SPAWN_FAILED.to_le_bytes());
        write_all_fd(ctl.as_raw_fd(), &status);
    }
}

/// A supervisor's life: serve the run in `buf[..n]`, then, while each run's tree is gone,
/// announce itself idle on `idle` and serve the next request from `sock`, until the zygote
/// closes it (retired, or the zygote is gone) or [`RUNS_PER_SUPERVISOR`] runs were served.
fn worker(
    buf: &mut [u8],
    mut n: usize,
    mut fds: Vec<std::os::fd::OwnedFd>,
    sock: &std::os::fd::OwnedFd,
    idle: libc::c_int,
) -> i32 {
    use std::os::fd::AsRawFd;
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    let mut served = 0u32;
    loop {
        let clean = serve(&buf[..n], fds);
        served += 1;
        if !clean || served >= RUNS_PER_SUPERVISOR {
            return 0;
        }
        write_all_fd(idle, &me.to_le_bytes());
        loop {
            match recv_with_fds(sock.as_raw_fd(), buf) {
                Ok(Some((len, got))) => {
                    n = len;
                    fds = got;
                    break;
                }
                Ok(None) => return 0,
                // SIGTERM to an idle supervisor: it has no run to stop; it leaves.
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                    if STOP.load(Ordering::SeqCst) {
                        return 0;
                    }
                }
                // A malformed message (its descriptors are closed): its owner sees the run
                // end without a status, and this supervisor is still idle.
                Err(e) if e.raw_os_error().is_none() => {
                    write_all_fd(idle, &me.to_le_bytes());
                }
                Err(_) => return 0,
            }
        }
    }
}

/// Serve one run as its supervisor: `out`/`err` as stdout/stderr while it runs, its pid and
/// exit code on the control socket. Whether the run's tree is gone (the process can serve
/// another); every descriptor of the run is closed when this returns.
fn serve(msg: &[u8], fds: Vec<std::os::fd::OwnedFd>) -> bool {
    use std::os::fd::AsRawFd;
    let req = match Request::decode(msg) {
        Ok(r) => r,
        Err(e) => {
            refuse(&fds, &e);
            return true;
        }
    };
    // Anything else than the three descriptors is dropped (closed): the owner sees the run end
    // without a status.
    let Ok([ctl, out, err]) = <[std::os::fd::OwnedFd; 3]>::try_from(fds) else {
        return true;
    };
    // The owner died (or gave up on this run) while the request waited in the zygote's queue
    // or on its way to this supervisor: nothing may start for it. Its descriptors close here.
    if peer_gone(ctl.as_raw_fd()) {
        return true;
    }
    STOP.store(false, Ordering::SeqCst);
    // SAFETY: dup2 on descriptors this process owns.
    unsafe {
        libc::dup2(out.as_raw_fd(), 1);
        libc::dup2(err.as_raw_fd(), 2);
    }
    drop(out);
    drop(err);
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    write_all_fd(ctl.as_raw_fd(), &me.to_le_bytes());
    let what = req
        .argv
        .iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let mut cmd = Command::new(&req.argv[0]);
    cmd.args(&req.argv[1..]);
    for v in &req.scrub {
        cmd.env_remove(v);
    }
    for (k, v) in &req.extra {
        cmd.env(k, v);
    }
    if let Some(d) = &req.workdir {
        cmd.current_dir(d);
    }
    let (code, clean) = supervise_run(cmd, &what, ctl.as_raw_fd(), req.stall, true);
    write_all_fd(ctl.as_raw_fd(), &code.to_le_bytes());
    drop(ctl);
    // The run's output pipes must reach end of file for its owner: stdout and stderr go back
    // to /dev/null until the next run.
    // SAFETY: open/dup2/close on descriptors this process owns.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if null < 0 {
            return false;
        }
        libc::dup2(null, 1);
        libc::dup2(null, 2);
        libc::close(null);
    }
    clean
}

/// A pipe whose both ends are close-on-exec, the read end non-blocking.
fn pipe_cloexec() -> std::io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut p = [0; 2];
    // SAFETY: pipe2 writes two descriptors into a valid array.
    if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nothing else; fcntl on one.
    unsafe {
        let fl = libc::fcntl(p[0], libc::F_GETFL);
        libc::fcntl(p[0], libc::F_SETFL, fl | libc::O_NONBLOCK);
        Ok((
            std::os::fd::OwnedFd::from_raw_fd(p[0]),
            std::os::fd::OwnedFd::from_raw_fd(p[1]),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn arguments_parse_and_bad_ones_are_refused() {
        assert_eq!(
            parse_args(&s(&["--stall-ms", "500", "--", "/bin/sh", "-c", "true"])).unwrap(),
            Args {
                stall: Some(Duration::from_millis(500)),
                argv: s(&["/bin/sh", "-c", "true"])
            }
        );
        assert_eq!(parse_args(&s(&["--", "true"])).unwrap().stall, None);
        assert_eq!(
            parse_args(&s(&["--stall-ms", "0", "--", "x"]))
                .unwrap()
                .stall,
            None
        );
        assert!(parse_args(&s(&["--"])).is_err());
        assert!(parse_args(&s(&["true"])).is_err());
        assert!(parse_args(&s(&["--stall-ms", "x", "--", "true"])).is_err());
    }

    /// Held by tests that start processes: the walk test kills every descendant of this
    /// process, which would take another test's children with it.
    static CHILDREN: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn descendants_are_found_through_parent_links() {
        let _one = CHILDREN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut child = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg("sleep 30 & wait")
            .spawn()
            .unwrap();
        let me = std::process::id() as i32;
        let mut found = Vec::new();
        for _ in 0..100 {
            found = descendants_of(me);
            if found.len() >= 2 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(found.contains(&(child.id() as i32)), "{found:?}");
        assert!(
            found.len() >= 2,
            "the shell's sleep is a grandchild: {found:?}"
        );
        // Only this test's shell and what it started (other tests' children run beside it).
        let sh = child.id() as i32;
        for p in descendants_of(sh).iter().chain([&sh]) {
            unsafe {
                libc::kill(*p, libc::SIGKILL);
            }
        }
        let _ = child.wait();
    }

    /// Alive = exists and is not a zombie.
    fn alive(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| {
            st.rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next())
                .is_some_and(|c| c != 'Z' && c != 'X')
        })
    }

    /// The descendants of `root` once at least `n` exist (bounded wait).
    fn tree_of(root: i32, n: usize) -> Vec<i32> {
        let mut found = Vec::new();
        for _ in 0..200 {
            found = descendants_of(root);
            if found.len() >= n {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        found
    }

    #[test]
    fn the_walk_down_the_child_lists_finds_what_the_parent_links_find() {
        // A shell with two background sleeps and a subshell's sleep: four descendants.
        let mut child = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg("sleep 31 & sleep 32 & (sleep 33; true) & wait")
            .spawn()
            .unwrap();
        let sh = child.id() as i32;
        // Both views once the tree has settled (a background job is a fork before its exec).
        let (mut by_walk, mut by_links) = (Vec::new(), Vec::new());
        for _ in 0..200 {
            by_walk = descendants_of(sh);
            by_links = subtree(&parent_links(), sh);
            by_walk.sort_unstable();
            by_links.sort_unstable();
            if by_walk.len() == 4 && by_walk == by_links {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let walked = by_walk.clone();
        for p in walked.iter().chain(by_links.iter()).chain([&sh]) {
            unsafe {
                libc::kill(*p, libc::SIGKILL);
            }
        }
        let _ = child.wait();
        assert_eq!(walked.len(), 4, "{walked:?}");
        assert_eq!(by_walk, by_links);
        // A process that is gone has no children to list.
        assert!(children_of(sh).is_empty());
    }

    #[test]
    fn stopping_a_command_kills_its_whole_group_with_one_call() {
        use std::os::unix::process::CommandExt;
        // The shell leads its own group (a zygote's run): its background sleeps die with it,
        // without any walk of /proc.
        let mut child = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg("sleep 34 & sleep 35 & wait")
            .process_group(0)
            .spawn()
            .unwrap();
        let sh = child.id() as i32;
        let sleeps = tree_of(sh, 2);
        assert_eq!(sleeps.len(), 2, "{sleeps:?}");
        kill_command(sh, true);
        let _ = child.wait();
        let mut left = sleeps.clone();
        for _ in 0..200 {
            left.retain(|p| alive(*p));
            if left.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        for p in &left {
            unsafe {
                libc::kill(*p, libc::SIGKILL);
            }
        }
        assert!(left.is_empty(), "left by the group kill: {left:?}");
        // Never a group that is not the command's own: pid 0 and 1 are refused.
        kill_command(0, true);
        kill_command(1, true);
    }

    #[test]
    fn a_life_line_is_seen_gone_when_its_owner_closed_cut_or_died() {
        use std::io::Write;
        use std::os::fd::AsRawFd;
        // Stream (a run's control socket): open, even with a heartbeat queued, is not gone;
        // cut (shutdown of the owner's writing side) or closed is.
        let (mut owner, sup) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(!peer_gone(sup.as_raw_fd()));
        owner.write_all(b".").unwrap();
        assert!(!peer_gone(sup.as_raw_fd()));
        owner.shutdown(std::net::Shutdown::Write).unwrap();
        assert!(peer_gone(sup.as_raw_fd()));
        let (mut owner, sup) = std::os::unix::net::UnixStream::pair().unwrap();
        owner.write_all(b".").ok();
        drop(owner);
        assert!(peer_gone(sup.as_raw_fd()));
        // Sequenced packets (the zygote's socket): requests still queued do not hide that the
        // owner is gone.
        let mut pair = [0; 2];
        let r = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                pair.as_mut_ptr(),
            )
        };
        assert_eq!(r, 0);
        use std::os::fd::FromRawFd;
        let (owner, zygote) = unsafe {
            (
                std::os::fd::OwnedFd::from_raw_fd(pair[0]),
                std::os::fd::OwnedFd::from_raw_fd(pair[1]),
            )
        };
        use std::os::fd::AsFd;
        send_with_fds(owner.as_fd(), b"queued", &[]).unwrap();
        assert!(!peer_gone(zygote.as_raw_fd()));
        drop(owner);
        assert!(peer_gone(zygote.as_raw_fd()));
    }

    #[test]
    fn a_stalled_run_reports_killed_only_when_the_kill_ended_it() {
        // Killed by the switch (SIGKILL): the run was killed.
        assert_eq!(stall_outcome(128 + libc::SIGKILL), STALLED);
        // Ended by itself before the kill landed: its own code, not "killed" (red team 9: a
        // completed command recorded "killed" was retried and completed twice).
        assert_eq!(stall_outcome(0), 0);
        assert_eq!(stall_outcome(3), 3);
        assert_eq!(stall_outcome(128 + libc::SIGTERM), 128 + libc::SIGTERM);
        let stall = Some(Duration::from_secs(3));
        let killed = stall_note(STALLED, stall, true);
        assert!(killed.contains("run killed"), "{killed}");
        assert!(killed.contains("no heartbeat for 3s"), "{killed}");
        assert!(!killed.contains("did not die"), "{killed}");
        let ended = stall_note(0, stall, true);
        assert!(!ended.contains("killed"), "{ended}");
        assert!(
            ended.contains("already ended by itself (exit 0)"),
            "{ended}"
        );
        assert!(stall_note(STALLED, stall, false).contains("did not die within 5s"));
    }

    /// Whether `pid` is gone (or a zombie: dead, waiting for its reaper).
    fn dead(pid: i32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(st) => st
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next())
                .is_some_and(|c| c == 'Z' || c == 'X'),
        }
    }

    #[test]
    fn the_command_and_its_group_are_killed_with_one_signal_and_no_walk() {
        use std::io::BufRead;
        let _one = CHILDREN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // The shell leads its own group (a zygote's run); its background sleep shares it.
        let mut child = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg("sleep 311 & echo $!; wait")
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let sleep: i32 = line
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{line:?}: {e}"));
        let shell = child.id() as i32;
        assert!(!dead(sleep));
        kill_command(shell, true);
        let status = child.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGKILL)
        );
        // The sleep got the same signal (it is re-parented to init, which reaps it).
        let mut gone = dead(sleep);
        for _ in 0..500 {
            if gone {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
            gone = dead(sleep);
        }
        if !gone {
            unsafe {
                libc::kill(sleep, libc::SIGKILL);
            }
        }
        assert!(
            gone,
            "the command's background process survived its group's kill"
        );
    }

    #[test]
    fn requests_round_trip_and_bad_ones_are_refused() {
        let r = Request {
            stall: Some(Duration::from_millis(1500)),
            workdir: Some("/tmp/x y".into()),
            scrub: vec!["OPENAI_API_KEY".into(), "K2".into()],
            extra: vec![("CRONSOLE_PARENT_JOB".into(), "a b=c".into())],
            argv: vec!["/bin/sh".into(), "-c".into(), "echo 'é' | cat".into()],
        };
        let b = r.encode().unwrap();
        assert_eq!(Request::decode(&b).unwrap(), r);
        let bare = Request {
            stall: None,
            workdir: None,
            scrub: vec![],
            extra: vec![],
            argv: vec!["true".into()],
        };
        assert_eq!(Request::decode(&bare.encode().unwrap()).unwrap(), bare);
        // Nothing a program cannot receive, nothing empty, nothing oversized.
        let nul = Request {
            argv: vec!["a\0b".into()],
            ..bare.clone()
        };
        assert_eq!(nul.encode(), None);
        assert_eq!(
            Request {
                argv: vec![],
                ..bare.clone()
            }
            .encode(),
            None
        );
        let huge = Request {
            argv: vec!["x".repeat(MAX_REQUEST).into()],
            ..bare.clone()
        };
        assert_eq!(huge.encode(), None);
        for bad in [
            &b""[..],
            b"x",
            b"cronsole-run/1\0",
            b"other/1\x000\0\x000\x000\0true\0",
            b"cronsole-run/1\0zz\0\x000\x000\0true\0",
            b"cronsole-run/1\x000\0\x005\0a\0",
            b"cronsole-run/1\x000\0\x000\x000\0",
        ] {
            assert!(Request::decode(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_status_words_are_read_only_when_whole() {
        let mut b = 4242i32.to_le_bytes().to_vec();
        assert_eq!(parse_status(&b), (Some(4242), None));
        b.extend_from_slice(&7i32.to_le_bytes());
        assert_eq!(parse_status(&b), (Some(4242), Some(7)));
        assert_eq!(parse_status(&b[..6]), (Some(4242), None));
        assert_eq!(parse_status(&[]), (None, None));
        // A refused request carries pid 0: never a pid to signal.
        let mut r = 0i32.to_le_bytes().to_vec();
        r.extend_from_slice(&SPAWN_FAILED.to_le_bytes());
        assert_eq!(parse_status(&r), (None, Some(SPAWN_FAILED)));
    }

    #[test]
    fn idle_supervisors_are_retired_when_old_or_too_many() {
        let now = Instant::now();
        let mut pool = Pool::default();
        let mut supervisors = HashSet::new();
        let n = IDLE_MAX + 3;
        for pid in 1..=n as i32 {
            let (r, _w) = std::io::pipe().unwrap();
            pool.socks.insert(pid, r.into());
            supervisors.insert(pid);
            // pid 1 has been idle too long; the others just became idle, oldest first.
            let since = if pid == 1 {
                now - IDLE_KEEP - Duration::from_millis(1)
            } else {
                now
            };
            pool.idle.push((pid, since));
        }
        pool.retire(now);
        // The three oldest go (beyond IDLE_MAX, pid 1 among them, also too old); the rest stay.
        assert_eq!(pool.idle.len(), IDLE_MAX);
        assert_eq!(pool.idle.first().map(|e| e.0), Some(4));
        for pid in 1..=3 {
            assert!(!pool.socks.contains_key(&pid), "{pid} kept its socket");
        }
        assert_eq!(pool.socks.len(), IDLE_MAX);
        // Too old alone is enough.
        pool.idle[0].1 = now - IDLE_KEEP;
        pool.retire(now);
        assert_eq!(pool.idle.len(), IDLE_MAX - 1);
        // A reaped supervisor is forgotten.
        supervisors.remove(&5);
        pool.forget_gone(&supervisors);
        assert!(!pool.socks.contains_key(&5));
        assert!(pool.idle.iter().all(|e| e.0 != 5));
    }

    #[test]
    fn descriptors_travel_with_a_request() {
        use std::io::{Read, Write};
        use std::os::fd::AsFd;
        let (a, b) = std::os::unix::net::UnixDatagram::pair().unwrap();
        let (mut pr, pw) = std::io::pipe().unwrap();
        send_with_fds(a.as_fd(), b"hello", &[pw.as_fd()]).unwrap();
        drop(pw);
        let mut buf = [0u8; 64];
        use std::os::fd::AsRawFd;
        let (n, fds) = recv_with_fds(b.as_raw_fd(), &mut buf).unwrap().unwrap();
        assert_eq!(&buf[..n], b"hello");
        assert_eq!(fds.len(), 1);
        let mut w = std::fs::File::from(fds.into_iter().next().unwrap());
        w.write_all(b"through").unwrap();
        drop(w);
        let mut got = String::new();
        pr.read_to_string(&mut got).unwrap();
        assert_eq!(got, "through");
        drop(a);
    }
}

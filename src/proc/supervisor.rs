//! The per-run supervisor: a tiny process that sits between the owner and one command, so that
//! nothing a run starts can outlive the run or the owner. It is a fork of the owner's zygote
//! ([`super::zygote`]), or — when the zygote cannot take a request — cronsole re-executing
//! itself as `cronsole __supervise …` ([`SUBCOMMAND`]). Both behave as described below; the fork
//! only saves the exec of the 80 MB binary per run, most of the cost of a burst of runs.
//!
//! Owns: starting the command under a subreaper, watching the owner's life-line, and killing
//! the command's whole process tree. Must not touch: the store, capture of output (the owner
//! reads the pipes it handed down), timeouts (the owner decides and closes the life-line).
//!
//! How it works:
//! - The supervisor makes itself a *child subreaper* (`PR_SET_CHILD_SUBREAPER`): every process
//!   the command starts stays its descendant, even one that calls `setsid` or double-forks (an
//!   orphan is re-parented to the nearest subreaper, not to PID 1).
//! - Its stdin (a fork of the zygote: the run's control socket) is the **life-line**: a pipe
//!   (socket) whose only write end the owner holds for as long as it wants the run alive. End of
//!   file on it means "stop now" — the owner closed it (run ended, timed out, hit a hard cap or
//!   was cancelled) or the owner process died (the kernel closes the fds of a dead process,
//!   `kill -9` included). A pipe is tied to the *process*, unlike `PR_SET_PDEATHSIG`, which
//!   fires when the spawning *thread* exits and is not inherited by grandchildren.
//!   `PR_SET_PDEATHSIG` is deliberately *not* used: a tokio blocking thread that spawned a
//!   supervisor may exit while the owner lives, and the signal would kill a healthy run.
//!   SIGTERM sent to the supervisor is handled like end of file.
//! - Optional dead-man switch (`--stall-ms N`): the owner writes a byte every second; if nothing
//!   arrives for N ms (the owner is stopped with SIGSTOP, or hung) the tree is killed. The engine
//!   sets N to half the job's lease, so a stopped owner's command is gone before its lease can
//!   expire and another owner can claim the job.
//! - On a stop the supervisor first SIGKILLs the command and, on a zygote's run (the command
//!   leads a process group of its own), that whole group — one `killpg`, whatever the number
//!   of runs alive. Then, when the command exits or after a stop, it SIGKILLs every descendant
//!   left (a `setsid` escapee leaves the group), found by walking down the kernel's child lists
//!   ([`super::tree`]), reaps them, and exits with the command's code (`128 + N` when it died of
//!   signal N). Escaped processes are therefore killed when their run ends and cannot hold the
//!   owner's output pipes open. The kill comes before any walk: with hundreds of runs whose
//!   owner was killed, a walk of all of `/proc` per supervisor before its first kill leaves the
//!   commands tens of seconds to run to completion, and a one-shot recovery would run them a
//!   second time.
//! - Nothing starts for an owner that is gone: a supervisor looks at the run's life-line just
//!   before it starts the command (`peer_gone`: closed or cut means the owner died or gave up on
//!   the run), and the zygote stops at its owner's hang-up, dropping the requests still queued on
//!   its socket unread. A command whose owner dies between that look and its start is killed as
//!   soon as it has started (the life-line has ended).
//! - The switch reports `STALLED` only when the stop's kill ended the command (it died of
//!   SIGKILL); a command that ended by itself in the meantime reports its own code (and a note
//!   on stderr), so a completed command is never recorded as killed and retried.
//! - A `__supervise` exec killed outright (`kill -9`) cannot kill its tree. Its command stays in
//!   the supervisor's process group (the owner made it: group id = the supervisor's pid), which
//!   the owner kills when it sees the supervisor die of a signal (`super::tree::kill_group`);
//!   with the zygote off the owner is also its supervisors' subreaper and kills and reaps what
//!   was re-parented to it (`super::tree::reap_strays`: a `setsid` escapee). The zygote's forks
//!   keep the command in a group of its own (the zygote covers them).
//!
//! Exit codes of the supervisor itself: the command's; `SPAWN_FAILED` (127, shell convention)
//! when the command could not be started; `STALLED` (125) when the dead-man switch killed
//! the command (not when the command had ended by itself before the kill landed).

use std::io::Write;
use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{sys, tree};

/// The hidden subcommand (first argument) that runs a supervisor.
pub const SUBCOMMAND: &str = "__supervise";
/// Exit code when the command could not be started.
pub(crate) const SPAWN_FAILED: i32 = 127;
/// Exit code when the owner stopped sending heartbeats (dead-man switch).
pub(crate) const STALLED: i32 = 125;

/// Parsed `__supervise [--stall-ms N] -- PROGRAM ARGS…`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    pub stall: Option<Duration>,
    pub argv: Vec<String>,
}

/// Parse the arguments after [`SUBCOMMAND`].
pub(crate) fn parse_args(args: &[String]) -> Result<Args, String> {
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
    // what the run left by that group ([`tree::kill_group`]).
    supervise(cmd, &args.argv.join(" "), 0, args.stall, false)
}

/// Run `cmd` (stdin closed unless `stdin_given`: the caller set one; its own process group when `own_group`, else this process's) under
/// this process as a subreaper, watching the life-line on fd `lifeline`; kill the whole tree
/// when the command exits or the life-line says stop; the command's exit code,
/// [`SPAWN_FAILED`] or [`STALLED`]. Called in a process of its own (the `__supervise` exec, or
/// a fork of the zygote) with no other thread running.
///
/// One thread waits for everything (a watcher thread per run would cost a 2 MB stack mapping, a
/// clone and its exit on every run): SIGCHLD and SIGTERM are blocked except inside
/// `ppoll` on the life-line, which unblocks them atomically, so a child's exit or a SIGTERM that
/// arrives at any moment interrupts the wait — none can slip in between a check and the sleep.
fn supervise(
    cmd: Command,
    what: &str,
    lifeline: RawFd,
    stall: Option<Duration>,
    own_group: bool,
) -> i32 {
    supervise_run(cmd, false, what, lifeline, stall, own_group).0
}

/// [`supervise`], and whether the run's tree is gone (nothing left to reap), so that this
/// process may supervise another run (a zygote's worker); the signal mask is restored.
pub(super) fn supervise_run(
    mut cmd: Command,
    stdin_given: bool,
    what: &str,
    lifeline: RawFd,
    stall: Option<Duration>,
    own_group: bool,
) -> (i32, bool) {
    // Before any other thread exists. SIGCHLD needs a handler (not SIG_DFL, which is "ignore"
    // and would not interrupt `ppoll`).
    sys::become_subreaper();
    sys::catch_term();
    sys::wake_on(libc::SIGCHLD);
    // Blocked from before the spawn: the command's exit is then pending until `ppoll` (the spawn
    // resets the mask for the command itself).
    let waking = [libc::SIGCHLD, libc::SIGTERM];
    let before = sys::block_signals(&sys::sigset(&waking));
    let open_mask = sys::sigset_without(before, &waking);
    let restore = || sys::set_signal_mask(&before);
    if !stdin_given {
        cmd.stdin(Stdio::null());
    }
    if own_group {
        cmd.process_group(0);
    }
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            restore();
            // One write: `writeln!` on the unbuffered stderr writes each piece of the format
            // apart, and a reader of the pipe (a stdio MCP server's error text) can see the
            // line cut after its first piece.
            let line = format!("could not start `{what}`: {e}\n");
            let _ = std::io::stderr().write_all(line.as_bytes());
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
        let said = if sys::term_received() {
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
        tree::kill_descendants();
        break wait_for(pid);
    };
    let clean = tree::kill_tree(Duration::from_secs(5));
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
/// itself between the switch's decision and the kill, so the run did complete (recorded "killed",
/// it would be retried and its command would complete twice).
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

/// Reap every exited child (the command, and descendants re-parented to this subreaper)
/// without blocking; the command's exit code once it is reaped (`128 + N` for signal N).
fn reap(pid: i32) -> Option<i32> {
    let mut code = None;
    loop {
        match sys::waitpid(-1, true) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) | Ok(None) => return code,
            Ok(Some((r, status))) => {
                if r == pid {
                    code = Some(sys::exit_code(status));
                }
            }
        }
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
    fd: RawFd,
    stall: Option<Duration>,
    last: Instant,
}

impl Lifeline {
    fn new(fd: RawFd, stall: Option<Duration>) -> Self {
        Lifeline {
            fd,
            stall,
            last: Instant::now(),
        }
    }

    /// Wait until the life-line has something to say, a blocked signal of `open_mask`'s
    /// complement arrives (SIGCHLD, SIGTERM), or the dead-man switch's time is up.
    fn wait(&mut self, open_mask: &sys::sigset_t) -> Watch {
        let left = self.stall.map(|s| s.saturating_sub(self.last.elapsed()));
        if left == Some(Duration::ZERO) {
            return Watch::Stalled;
        }
        let mut pfd = [sys::pollfd {
            fd: self.fd,
            events: libc::POLLIN,
            revents: 0,
        }];
        match sys::ppoll(&mut pfd, left, open_mask) {
            // Interrupted: a child exited or SIGTERM came (the caller looks at both).
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return Watch::Alive,
            Err(_) => return Watch::Stop,
            Ok(0) => return Watch::Alive,
            Ok(_) => {}
        }
        let mut buf = [0u8; 64];
        match sys::read(self.fd, &mut buf) {
            Ok(0) => Watch::Stop, // owner closed the life-line or died
            Ok(_) => {
                self.last = Instant::now();
                Watch::Alive
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::Interrupted
                    || e.kind() == std::io::ErrorKind::WouldBlock =>
            {
                Watch::Alive
            }
            Err(_) => Watch::Stop,
        }
    }
}

/// Reap children until `pid` exits; its exit code (`128 + N` for signal N).
fn wait_for(pid: i32) -> i32 {
    loop {
        match sys::waitpid(-1, false) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            // ECHILD: nothing left (cannot happen before `pid` is reaped).
            Err(_) => return -1,
            Ok(Some((r, status))) if r == pid => return sys::exit_code(status),
            Ok(_) => {}
        }
    }
}

/// SIGKILL the command `pid` (not reaped yet, so neither its pid nor its group id can be
/// reused) and, when it leads a process group of its own (`own_group`: a zygote's run), that
/// whole group: what the command started without leaving the group dies by the same single
/// call, before any `/proc` walk (a walk first leaves the commands of hundreds of runs time to
/// complete while their owner is already dead).
fn kill_command(pid: i32, own_group: bool) {
    if pid <= 1 {
        return;
    }
    // ESRCH means already gone.
    if own_group {
        sys::killpg(pid, libc::SIGKILL);
    }
    sys::kill(pid, libc::SIGKILL);
}

/// Whether the other end of the life-line `fd` is gone: the owner closed it, cut it
/// (`shutdown`), or died. Does not wait and reads nothing (a heartbeat queued before the end
/// does not hide it). A supervisor asks before it starts a command, so nothing starts for an
/// owner that is already gone (the zygote watches its own socket's hang-up the same way).
pub(super) fn peer_gone(fd: RawFd) -> bool {
    let gone = libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR | libc::POLLNVAL;
    sys::poll_now(fd, libc::POLLRDHUP) & gone != 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proc::tree::descendants_of;

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
            sys::kill(*p, libc::SIGKILL);
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
        let (owner, zygote) = sys::seqpacket_pair().unwrap();
        use std::os::fd::AsFd;
        super::super::fdpass::send_with_fds(owner.as_fd(), b"queued", &[]).unwrap();
        assert!(!peer_gone(zygote.as_raw_fd()));
        drop(owner);
        assert!(peer_gone(zygote.as_raw_fd()));
    }

    #[test]
    fn a_stalled_run_reports_killed_only_when_the_kill_ended_it() {
        // Killed by the switch (SIGKILL): the run was killed.
        assert_eq!(stall_outcome(128 + libc::SIGKILL), STALLED);
        // Ended by itself before the kill landed: its own code, not "killed" (a
        // completed command recorded "killed" would be retried and complete twice).
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
        let _one = super::super::TEST_CHILDREN
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
            sys::kill(sleep, libc::SIGKILL);
        }
        assert!(
            gone,
            "the command's background process survived its group's kill"
        );
    }
}

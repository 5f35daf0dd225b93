//! The per-run supervisor: a tiny process (cronsole re-executing itself as
//! `cronsole __supervise …`, see [`SUBCOMMAND`]) that sits between the owner and one command, so
//! that nothing a run starts can outlive the run or the owner (issue 10 item 4).
//!
//! Owns: starting the command under a subreaper, watching the owner's life-line, and killing the
//! command's whole process tree. Must not touch: the store, capture of output (the owner reads
//! the pipes it handed down), timeouts (the owner decides and closes the life-line).
//!
//! How it works:
//! - The supervisor makes itself a *child subreaper* (`PR_SET_CHILD_SUBREAPER`): every process
//!   the command starts stays its descendant, even one that calls `setsid` or double-forks (an
//!   orphan is re-parented to the nearest subreaper, not to PID 1).
//! - Its stdin is the **life-line**: a pipe whose only write end the owner holds for as long as it
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
//! - When the command exits, or on a stop, the supervisor SIGKILLs every descendant (found by
//!   walking `/proc` parent links), reaps them, and exits with the command's code (`128 + N`
//!   when it died of signal N). Escaped processes are therefore killed when their run ends and
//!   cannot hold the owner's output pipes open.
//!
//! Exit codes of the supervisor itself: the command's; [`SPAWN_FAILED`] (127, shell convention)
//! when the command could not be started; [`STALLED`] (125) when the dead-man switch fired.

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
    // SAFETY: plain prctl/signal calls with valid arguments, before any other thread exists.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        libc::signal(libc::SIGTERM, on_term as *const () as libc::sighandler_t);
    }
    let mut cmd = Command::new(&args.argv[0]);
    cmd.args(&args.argv[1..])
        .stdin(Stdio::null())
        .process_group(0);
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "could not start `{}`: {e}",
                args.argv.join(" ")
            );
            return SPAWN_FAILED;
        }
    };
    let pid = child.id() as i32;
    // Not waited through std: the reaping loop below owns every wait.
    std::mem::forget(child);

    let stalled = std::sync::Arc::new(AtomicBool::new(false));
    {
        let stalled = std::sync::Arc::clone(&stalled);
        let stall = args.stall;
        std::thread::spawn(move || {
            watch_lifeline(stall, &stalled);
            STOP.store(true, Ordering::SeqCst);
            kill_descendants();
        });
    }

    let code = wait_for(pid);
    kill_tree(Duration::from_secs(5));
    if stalled.load(Ordering::SeqCst) {
        let _ = writeln!(
            std::io::stderr(),
            "cronsole: run killed: its owner sent no heartbeat for {:?} (stopped or hung)",
            args.stall.unwrap_or_default()
        );
        return STALLED;
    }
    code
}

/// Block until the life-line says stop: end of file, an error, SIGTERM, or (with `stall`) a
/// silence longer than `stall`.
fn watch_lifeline(stall: Option<Duration>, stalled: &AtomicBool) {
    let mut last = Instant::now();
    let mut buf = [0u8; 64];
    loop {
        if STOP.load(Ordering::SeqCst) {
            return;
        }
        let mut pfd = libc::pollfd {
            fd: 0,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; a bounded timeout so SIGTERM's flag is seen promptly.
        let n = unsafe { libc::poll(&mut pfd, 1, 200) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        if n > 0 {
            // SAFETY: reading into a stack buffer of the given length.
            let r = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
            if r == 0 {
                return; // owner closed the life-line or died
            }
            if r < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted
                    && e.kind() != std::io::ErrorKind::WouldBlock
                {
                    return;
                }
            } else {
                last = Instant::now();
            }
        }
        if let Some(s) = stall
            && last.elapsed() >= s
        {
            stalled.store(true, Ordering::SeqCst);
            return;
        }
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
            if libc::WIFEXITED(status) {
                return libc::WEXITSTATUS(status);
            }
            if libc::WIFSIGNALED(status) {
                return 128 + libc::WTERMSIG(status);
            }
            return -1;
        }
    }
}

/// Every process whose parent chain leads to `root` (read from `/proc`).
pub fn descendants_of(root: i32) -> Vec<i32> {
    let mut parent_of: Vec<(i32, i32)> = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
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
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for &(c, pp) in &parent_of {
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

/// Kill and reap every descendant until none is left (or `limit` passes).
fn kill_tree(limit: Duration) {
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
                return; // ECHILD
            }
            break; // children remain
        }
        if started.elapsed() > limit {
            return;
        }
        kill_descendants();
        std::thread::sleep(Duration::from_millis(2));
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

    #[test]
    fn descendants_are_found_through_parent_links() {
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
        for p in &found {
            unsafe {
                libc::kill(*p, libc::SIGKILL);
            }
        }
        let _ = child.wait();
    }
}

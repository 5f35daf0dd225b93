//! The owner's zygote (`cronsole __zygote`): one per owner, started on its first run and alive
//! until the owner is gone. It takes the cost of re-executing cronsole out of every run: the
//! supervisor of each run is a `fork` of this small single-threaded process instead of an `exec`
//! of the 80 MB binary, with the same guarantees as `__supervise` ([`super::supervisor`]).
//!
//! - Its stdin is a SEQPACKET socket whose other end only the owner holds (close-on-exec, so no
//!   command inherits it). Each message is a [`Request`] with the run's control socket and
//!   output pipes attached; the zygote hands it to an idle supervisor or forks a new one, which
//!   becomes that run's supervisor exactly as `__supervise` does (subreaper, life-line = the
//!   control socket, kill of the whole tree), then writes its pid and exit code on the control
//!   socket for the owner (`super::fdpass::parse_status`).
//! - Supervisors are reused: a fork, its copy-on-write faults and its exit per run would be the
//!   largest cost per run left on this side. After a run, a supervisor whose run's tree is gone
//!   (every descendant reaped: nothing of the old run is left under it) closes the run's
//!   descriptors, points stdout/stderr back at `/dev/null`, and announces itself idle on a pipe
//!   to the zygote; the zygote sends the next request on that supervisor's own socket. A
//!   supervisor that could not empty its tree (a process that would not die within 5 s) exits
//!   instead, and so does one that served `RUNS_PER_SUPERVISOR` (1 000) runs. Idle ones are
//!   told to exit (their socket closed) after `IDLE_KEEP` (10 s), or at once beyond
//!   `IDLE_MAX` (128 idle). Each run's directory and environment changes apply to its command
//!   only (`Command::current_dir`/`env`), so nothing of one run's request reaches the next.
//! - End of file (hang-up) on the socket means the owner is gone (closed by the kernel when it
//!   dies, `kill -9` included): the zygote drops the requests still queued there unread (none
//!   of them may start after their owner's death), kills every descendant left and exits. Each
//!   run's supervisor also sees its own control socket close and kills its tree, so a run dies
//!   with its owner even if the zygote itself was killed first. `PR_SET_PDEATHSIG` is not used,
//!   for the reason the supervisor's doc gives (it follows the spawning thread).
//! - The zygote is a subreaper too and reaps its children on SIGCHLD, so a supervisor killed by
//!   hand (`kill -9`) leaves its run's processes under the zygote, not under PID 1. When it
//!   reaps a supervisor that died of a signal, the zygote kills every child of its own that is
//!   not a live supervisor, with their descendants (`kill_orphans`): a live supervisor is a
//!   subreaper, so only a dead supervisor's processes can be there. The owner sees that run's
//!   control socket end without an exit code and records the attempt as failed, "supervisor
//!   died".
//! - Commands get the zygote's environment (the owner's at its start; the binary never changes
//!   its own) minus the request's `scrub`, plus its `extra`, as the exec'd supervisor does.
//!
//! Owns: the zygote's loop, its pool of supervisors and their life between runs. Must not
//! touch: what a supervisor does during a run (`supervisor`), the owner's side (`client`).

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::process::Command;
use std::time::{Duration, Instant};

use super::fdpass::{MAX_REQUEST, Request, recv_with_fds, send_with_fds, write_all_fd};
use super::supervisor::{SPAWN_FAILED, peer_gone, supervise_run};
use super::sys;
use super::tree::{descendants_of, my_pid, parent_links, subtree};

/// The hidden subcommand that runs an owner's zygote.
pub const ZYGOTE_SUBCOMMAND: &str = "__zygote";

/// Entry point of `cronsole __zygote` (see the module doc); returns the process exit code.
pub fn zygote_main() -> i32 {
    // This process has one thread. SIGCHLD interrupts the wait (no SA_RESTART) so exited
    // supervisors are reaped at once (reaped, not ignored, so their CPU time is counted in the
    // zygote's children's times).
    sys::become_subreaper();
    sys::wake_on(libc::SIGCHLD);
    // SIGCHLD is blocked except inside `ppoll`, so an exit between the reaping and the wait
    // still interrupts the wait (a supervisor killed by hand has its orphans killed at once).
    let chld = [libc::SIGCHLD];
    let open_mask = sys::sigset_without(sys::block_signals(&sys::sigset(&chld)), &chld);
    // Idle supervisors announce themselves here (their pid, 4 bytes: one atomic pipe write).
    let Ok((idle_r, idle_w)) = sys::pipe_cloexec() else {
        return 1;
    };
    sys::set_nonblocking(idle_r.as_fd());
    let mut z = Zygote {
        buf: vec![0u8; MAX_REQUEST],
        supervisors: HashSet::new(),
        pool: Pool::default(),
        idle_r,
        idle_w,
    };
    while z.turn(&open_mask) {}
    let Zygote {
        pool,
        mut supervisors,
        ..
    } = z;
    drop(pool);
    outlive_nothing(&mut supervisors);
    0
}

/// The zygote's state between turns of its loop.
struct Zygote {
    /// One request at a time is read here.
    buf: Vec<u8>,
    /// The supervisors this zygote forked and that have not been reaped yet.
    supervisors: HashSet<i32>,
    pool: Pool,
    idle_r: OwnedFd,
    idle_w: OwnedFd,
}

impl Zygote {
    /// One wait for the owner's socket or an idle supervisor, and what follows. False when the
    /// owner is gone (or its socket failed): the zygote ends.
    fn turn(&mut self, open_mask: &sys::sigset_t) -> bool {
        on_exits(&mut self.supervisors);
        self.pool.forget_gone(&self.supervisors);
        self.pool.retire(Instant::now());
        let mut pfd = [
            sys::pollfd {
                fd: 0,
                events: libc::POLLIN | libc::POLLRDHUP,
                revents: 0,
            },
            sys::pollfd {
                fd: self.idle_r.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // Idle supervisors are looked at every second (to retire them), else no timeout.
        let timeout = (!self.pool.idle.is_empty()).then_some(Duration::from_secs(1));
        match sys::ppoll(&mut pfd, timeout, open_mask) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return true,
            Err(_) => return false,
            Ok(_) => {}
        }
        if pfd[1].revents != 0 {
            self.pool
                .read_idle(self.idle_r.as_raw_fd(), &self.supervisors);
        }
        if pfd[0].revents == 0 {
            return true;
        }
        // The owner is gone (its end closed: it died, `kill -9` included) even if requests it
        // sent are still queued: none of them may start. They are dropped unread (their
        // descriptors close with this process) and every run still alive is killed after.
        if pfd[0].revents & (libc::POLLHUP | libc::POLLRDHUP | libc::POLLERR) != 0 {
            return false;
        }
        self.take_request()
    }

    /// Read one request from the owner and give it to a supervisor. False when the owner's
    /// socket ended or failed.
    fn take_request(&mut self) -> bool {
        match recv_with_fds(0, &mut self.buf) {
            Ok(None) => false,
            Ok(Some((n, fds))) => {
                if self.pool.hand_over(&self.buf[..n], &fds) {
                    return true;
                }
                let ctx = Spawn {
                    idle_r: self.idle_r.as_raw_fd(),
                    idle_w: self.idle_w.as_fd(),
                    pool: &self.pool,
                };
                if let Some((pid, sock)) = start_worker(&mut self.buf, n, fds, &ctx) {
                    self.supervisors.insert(pid);
                    self.pool.socks.insert(pid, sock);
                }
                true
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => true,
            // A malformed message: its descriptors are closed, so its owner sees the run end
            // without a status; the socket itself is still good.
            Err(e) if e.raw_os_error().is_none() => true,
            Err(_) => false,
        }
    }
}

/// The owner is gone: nothing any of its runs started may outlive it. Kills and reaps every
/// descendant, for at most 5 s.
fn outlive_nothing(supervisors: &mut HashSet<i32>) {
    let me = my_pid();
    let started = Instant::now();
    loop {
        reap_exited(supervisors);
        let left = descendants_of(me);
        if left.is_empty() || started.elapsed() > Duration::from_secs(5) {
            break;
        }
        for pid in left {
            sys::kill(pid, libc::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Reap every child that has exited (supervisors, and orphans re-parented to the zygote).
/// Returns whether a supervisor of `supervisors` died of a signal (killed by hand: it could not
/// kill its run's tree, whose processes are now the zygote's children).
fn reap_exited(supervisors: &mut HashSet<i32>) -> bool {
    let mut killed = false;
    loop {
        match sys::waitpid(-1, true) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) | Ok(None) => return killed,
            Ok(Some((r, status))) => {
                if supervisors.remove(&r) && sys::killed_by_signal(status) {
                    killed = true;
                }
            }
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
    let me = my_pid();
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
            // ESRCH means already gone.
            sys::kill(pid, libc::SIGKILL);
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
/// waits for the next one on its own socket.
#[derive(Default)]
struct Pool {
    /// The zygote's end of each live supervisor's socket. Closing it tells an idle supervisor
    /// to exit.
    socks: HashMap<i32, OwnedFd>,
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
    fn read_idle(&mut self, fd: RawFd, supervisors: &HashSet<i32>) {
        let mut b = [0u8; 4096];
        loop {
            // The fd is non-blocking: an empty pipe ends the read.
            let n = match sys::read(fd, &mut b) {
                Ok(n) if n > 0 => n,
                _ => return,
            };
            let now = Instant::now();
            // Every write is 4 bytes and atomic, so a read returns whole pids.
            for w in b[..n].chunks_exact(4) {
                let pid = i32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                if supervisors.contains(&pid) && self.socks.contains_key(&pid) {
                    self.idle.push((pid, now));
                }
            }
        }
    }

    /// Give a request to an idle supervisor; `false` when none took it (a new one is forked).
    fn hand_over(&mut self, msg: &[u8], fds: &[OwnedFd]) -> bool {
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
    idle_r: RawFd,
    idle_w: BorrowedFd<'a>,
    pool: &'a Pool,
}

/// Fork a supervisor for the request in `buf[..n]` (its pid and the zygote's end of its
/// socket), or report why not on the request's control socket and stderr.
fn start_worker(
    buf: &mut [u8],
    n: usize,
    fds: Vec<OwnedFd>,
    ctx: &Spawn<'_>,
) -> Option<(i32, OwnedFd)> {
    let (ours, theirs) = match sys::seqpacket_pair() {
        Ok(p) => p,
        Err(e) => {
            refuse(&fds, &format!("socketpair: {e}"));
            return None;
        }
    };
    // This process is single-threaded, so the child may allocate and run Rust code.
    match sys::fork_single_threaded() {
        Ok(sys::Forked::Child) => {
            // The zygote's descriptors this supervisor must not hold; the `OwnedFd`s are never
            // dropped here (the child leaves through `exit_now`).
            sys::close_raw(0); // the owner's socket: only the zygote reads it
            sys::close_raw(ctx.idle_r);
            sys::close_raw(ours.as_raw_fd());
            for s in ctx.pool.socks.values() {
                sys::close_raw(s.as_raw_fd());
            }
            sys::default_sigchld();
            sys::unblock_signals(&sys::sigset(&[libc::SIGCHLD]));
            std::mem::forget(ours);
            let code = worker(buf, n, fds, &theirs, ctx.idle_w.as_raw_fd());
            // Without running the zygote's destructors.
            sys::exit_now(code)
        }
        Err(e) => {
            refuse(&fds, &format!("fork: {e}"));
            None
        }
        // The parent's copies of the run's descriptors close here; the child holds them.
        Ok(sys::Forked::Parent(pid)) => Some((pid, ours)),
    }
}

/// Tell the owner a run could not start: a line on its stderr pipe, pid 0 and [`SPAWN_FAILED`]
/// on its control socket. `fds` are the request's (control, stdout, stderr) when it has them.
fn refuse(fds: &[OwnedFd], why: &str) {
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
fn worker(buf: &mut [u8], mut n: usize, mut fds: Vec<OwnedFd>, sock: &OwnedFd, idle: RawFd) -> i32 {
    let me = my_pid();
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
                    if sys::term_received() {
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
fn serve(msg: &[u8], fds: Vec<OwnedFd>) -> bool {
    let req = match Request::decode(msg) {
        Ok(r) => r,
        Err(e) => {
            refuse(&fds, &e);
            return true;
        }
    };
    // The control socket, stdout and stderr, and the command's stdin for a child that talks
    // over its pipes (else it reads /dev/null). Anything else is dropped (closed): the owner
    // sees the run end without a status.
    let mut fds = fds.into_iter();
    let (Some(ctl), Some(out), Some(err)) = (fds.next(), fds.next(), fds.next()) else {
        return true;
    };
    let input = fds.next();
    if fds.next().is_some() {
        return true;
    }
    // The owner died (or gave up on this run) while the request waited in the zygote's queue
    // or on its way to this supervisor: nothing may start for it. Its descriptors close here.
    if peer_gone(ctl.as_raw_fd()) {
        return true;
    }
    sys::clear_term();
    sys::dup2(out.as_raw_fd(), 1);
    sys::dup2(err.as_raw_fd(), 2);
    drop(out);
    drop(err);
    let me = my_pid();
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
    let stdin_given = input.is_some();
    if let Some(input) = input {
        cmd.stdin(input);
    }
    let (code, clean) = supervise_run(cmd, stdin_given, &what, ctl.as_raw_fd(), req.stall, true);
    write_all_fd(ctl.as_raw_fd(), &code.to_le_bytes());
    drop(ctl);
    // The run's output pipes must reach end of file for its owner: stdout and stderr go back
    // to /dev/null until the next run.
    if !sys::stdio_to_dev_null() {
        return false;
    }
    clean
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

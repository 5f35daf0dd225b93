//! Every raw `libc` call of the crate, each behind a safe function: signals to processes and
//! groups, pipes and socket pairs, descriptor reads and writes, signal masks and handlers,
//! `waitpid`, `poll`/`ppoll`, `fork`, descriptors passed over a socket (`SCM_RIGHTS`), resource
//! limits, the user database, the timer that tells of wall-clock jumps, the console's redraw
//! timer and its descriptors' registration with the runtime, and the type of a file system
//! (`statfs`).
//!
//! `unsafe` lives here and nowhere else, so each precondition is argued once, next to the call.
//! The functions are thin: no policy (what to kill, when to stop) is decided here. Where a call
//! is only sound under a condition the types cannot express (`fork` in a single-threaded
//! process), the function's name and doc say so and its one caller keeps it.
//!
//! Owns: the crate's system-call boundary (process supervision, and the two timers).
//! Must not touch: anything above it
//! (the supervisor, the zygote and the owner's side decide what to call and when).
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub(crate) use libc::{c_int, pollfd, sigset_t};

/// Send `sig` to process `pid`. False when it failed (ESRCH: the process is gone).
pub(crate) fn kill(pid: i32, sig: c_int) -> bool {
    // SAFETY: kill has no memory-safety preconditions; a stale pid yields ESRCH.
    unsafe { libc::kill(pid, sig) == 0 }
}

/// Whether process `pid` exists in this PID namespace: `kill(pid, 0)` does not fail with
/// ESRCH (EPERM: it exists, owned by another user). A zombie still exists.
pub(crate) fn process_exists(pid: i32) -> bool {
    // SAFETY: signal 0 sends nothing; kill has no memory-safety preconditions.
    let ok = unsafe { libc::kill(pid, 0) } == 0;
    ok || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Send `sig` to every process of group `pgid`. False when it failed (ESRCH: the group is
/// empty). Callers never pass 0 (their own group) or 1.
pub(crate) fn killpg(pgid: i32, sig: c_int) -> bool {
    // SAFETY: killpg has no memory-safety preconditions; an empty group yields ESRCH.
    unsafe { libc::killpg(pgid, sig) == 0 }
}

/// Make this process a child subreaper (`PR_SET_CHILD_SUBREAPER`): orphans of its descendants
/// are re-parented here, not to init. False when the kernel refused.
pub(crate) fn become_subreaper() -> bool {
    // SAFETY: plain prctl with valid arguments.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0 }
}

/// This process's soft limits on the user's processes (`RLIMIT_NPROC`) and on its own open
/// files (`RLIMIT_NOFILE`); `None` for one that is unlimited or unreadable.
pub(crate) fn soft_process_and_file_limits() -> (Option<u64>, Option<u64>) {
    let soft = |resource| {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes one `rlimit` into a valid, owned struct.
        let ok = unsafe { libc::getrlimit(resource, &mut r) } == 0;
        (ok && r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur)
    };
    (soft(libc::RLIMIT_NPROC), soft(libc::RLIMIT_NOFILE))
}

/// The type of the file system holding `path` (`statfs`'s `f_type`, one of the kernel's
/// `*_SUPER_MAGIC` numbers).
pub(crate) fn file_system_type(path: &std::path::Path) -> io::Result<i64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))?;
    // SAFETY: an all-zero `statfs` is a valid value of this plain C struct.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path that lives across the call; statfs writes one
    // `statfs` into a valid, owned struct.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // `f_type`'s width differs between C libraries; every magic number fits in 32 bits.
    #[allow(clippy::unnecessary_cast)]
    Ok(st.f_type as i64)
}

/// A wall-clock timer set far ahead (`CLOCK_REALTIME`, absolute) that the kernel cancels when
/// the clock is set discontinuously — by an operator, NTP stepping it, or a resume from suspend
/// — so a thread blocked reading it ([`wait_clock_set`]) learns of each jump without waking
/// for anything else.
pub(crate) fn clock_set_timer() -> io::Result<OwnedFd> {
    // SAFETY: timerfd_create with valid flags returns a new descriptor or -1.
    let fd = unsafe { libc::timerfd_create(libc::CLOCK_REALTIME, libc::TFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by timerfd_create and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    arm_clock_set_timer(fd.as_fd())?;
    Ok(fd)
}

/// (Re)arm the timer of [`clock_set_timer`]: expiry a year after the wall clock's now.
fn arm_clock_set_timer(fd: BorrowedFd<'_>) -> io::Result<()> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into a valid, owned struct.
    if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let spec = libc::itimerspec {
        it_interval: libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        it_value: libc::timespec {
            tv_sec: now.tv_sec.saturating_add(366 * 86_400),
            tv_nsec: 0,
        },
    };
    let flags = libc::TFD_TIMER_ABSTIME | libc::TFD_TIMER_CANCEL_ON_SET;
    // SAFETY: a valid timerfd, a valid itimerspec, and no old value asked for.
    if unsafe { libc::timerfd_settime(fd.as_raw_fd(), flags, &spec, std::ptr::null_mut()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Block until the wall clock jumps (`Ok(true)`) or the far timer of [`clock_set_timer`]
/// expires (`Ok(false)`); the timer is armed again either way.
pub(crate) fn wait_clock_set(fd: BorrowedFd<'_>) -> io::Result<bool> {
    let mut buf = [0u8; 8];
    loop {
        // SAFETY: reading at most 8 bytes into an owned 8-byte buffer from a valid descriptor.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            arm_clock_set_timer(fd)?;
            return Ok(false);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::ECANCELED) => {
                arm_clock_set_timer(fd)?;
                return Ok(true);
            }
            _ => return Err(e),
        }
    }
}

/// A one-shot timer on the monotonic clock (`timerfd`, non-blocking), disarmed. The console
/// waits on it on its own thread for its idle redraws: one wake-up each, at the instant asked.
pub(crate) fn monotonic_timer() -> io::Result<OwnedFd> {
    // SAFETY: timerfd_create with valid flags returns a new descriptor or -1.
    let fd = unsafe {
        libc::timerfd_create(
            libc::CLOCK_MONOTONIC,
            libc::TFD_CLOEXEC | libc::TFD_NONBLOCK,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by timerfd_create and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Arm the timer of [`monotonic_timer`] to expire once, `after` from now (at least a
/// nanosecond: a zero expiry would disarm it). Any earlier arming and unread expiry is dropped.
pub(crate) fn arm_timer(fd: BorrowedFd<'_>, after: Duration) -> io::Result<()> {
    let after = after.max(Duration::from_nanos(1));
    let spec = libc::itimerspec {
        it_interval: libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        it_value: libc::timespec {
            tv_sec: libc::time_t::try_from(after.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_nsec: after.subsec_nanos() as libc::c_long,
        },
    };
    // SAFETY: a valid timerfd, a valid itimerspec, and no old value asked for.
    if unsafe { libc::timerfd_settime(fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Take the expiry of a [`monotonic_timer`]: `Ok(true)` when it expired since it was armed,
/// `Ok(false)` when it has not (yet).
pub(crate) fn take_timer(fd: BorrowedFd<'_>) -> io::Result<bool> {
    let mut buf = [0u8; 8];
    loop {
        // SAFETY: reading at most 8 bytes into an owned 8-byte buffer from a valid descriptor.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => {}
            io::ErrorKind::WouldBlock => return Ok(false),
            _ => return Err(e),
        }
    }
}

/// A counter another thread rings (`eventfd`, non-blocking): a reactor that watches it wakes
/// one thread, the one that waits on it, when it is rung.
pub(crate) fn doorbell() -> io::Result<OwnedFd> {
    // SAFETY: eventfd with valid flags returns a new descriptor or -1.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by eventfd and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Ring a [`doorbell`]: add one to its counter. A counter that would overflow is already
/// rung, so that error is no news.
pub(crate) fn ring(fd: BorrowedFd<'_>) -> io::Result<()> {
    let one = 1u64.to_ne_bytes();
    loop {
        // SAFETY: writing 8 bytes from an owned 8-byte buffer to a valid descriptor.
        let n = unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => {}
            io::ErrorKind::WouldBlock => return Ok(()),
            _ => return Err(e),
        }
    }
}

/// Take the rings of a [`doorbell`]: `Ok(true)` when it was rung since the last take.
pub(crate) fn take_rings(fd: BorrowedFd<'_>) -> io::Result<bool> {
    // A doorbell and a timer both read as one 8-byte counter, reset by the read.
    take_timer(fd)
}

/// `fd` registered with the current tokio runtime's reactor, for readiness to read (the
/// console's terminal and redraw timer). Must be called on a runtime.
pub(crate) fn async_readable(fd: OwnedFd) -> io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: an `OwnedFd` is open and names the same file description until it is dropped,
    // which only the `AsyncFd` can do, and its `as_raw_fd` never changes.
    let fd = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
    }?;
    Ok(fd)
}

/// Restore the default action of SIGPIPE (a write to a closed pipe ends the process, as a
/// command-line tool whose reader went away should).
pub(crate) fn default_sigpipe() {
    // SAFETY: setting a standard disposition for a valid signal.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Install `handler` for `sig` with `SA_RESTART` (a blocking call resumes after it): the
/// handler must be async-signal-safe (the callers' only touch atomics).
pub(crate) fn count_signal(sig: c_int, handler: extern "C" fn(c_int)) {
    // SAFETY: a zeroed sigaction is a valid starting value; the handler is async-signal-safe by
    // this function's contract; sigemptyset and sigaction have no other preconditions.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler as *const () as libc::sighandler_t;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(sig, &sa, std::ptr::null_mut());
    }
}

/// Give `sig` back its default disposition.
pub(crate) fn default_signal(sig: c_int) {
    // SAFETY: SIG_DFL is a valid disposition for any catchable signal.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
    }
}

/// Send `sig` to this process (after [`default_signal`], it acts as it would have).
pub(crate) fn raise(sig: c_int) {
    // SAFETY: raise has no preconditions.
    unsafe {
        libc::raise(sig);
    }
}

/// This process's effective user id.
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// This process's real user id.
pub(crate) fn uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// The login name of user `uid` in the password database (`None`: no entry, or unreadable).
pub(crate) fn user_name(uid: u32) -> Option<String> {
    let mut buf: Vec<libc::c_char> = vec![0; 4096];
    // SAFETY: a zeroed passwd is a valid value of this plain C struct; getpwuid_r only writes
    // it and `buf` (whose length it is given), and sets `found` to `&mut pw` or null.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call, `buf.len()` is the buffer's real length.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() || pw.pw_name.is_null() {
        return None;
    }
    // SAFETY: on success `pw_name` points at a NUL-terminated string inside `buf`, alive here.
    let name = unsafe { std::ffi::CStr::from_ptr(pw.pw_name) };
    Some(name.to_string_lossy().into_owned()).filter(|n| !n.is_empty())
}

/// Create a FIFO at `path` (tests: a file whose open blocks).
#[cfg(test)]
pub(crate) fn mkfifo(path: &std::ffi::CStr, mode: libc::mode_t) -> c_int {
    // SAFETY: a NUL-terminated path that outlives the call.
    unsafe { libc::mkfifo(path.as_ptr(), mode) }
}

/// Set an environment variable of this process (tests: a variable no other test reads).
#[cfg(test)]
pub(crate) fn set_env_var(key: &str, value: &str) {
    // SAFETY: the callers' variables are their own; no other thread reads them.
    unsafe { std::env::set_var(key, value) }
}

/// Two fresh descriptors a call wrote into `fds`, owned from now on.
fn own_pair(fds: [c_int; 2]) -> (OwnedFd, OwnedFd) {
    // SAFETY: both descriptors were just created by the kernel and are owned by nothing else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// A connected pair of close-on-exec `SOCK_SEQPACKET` sockets (message boundaries kept).
pub(crate) fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
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
        return Err(io::Error::last_os_error());
    }
    Ok(own_pair(fds))
}

/// A pipe whose both ends are close-on-exec: (read end, write end).
pub(crate) fn pipe_cloexec() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into a valid array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(own_pair(fds))
}

/// Put `fd` in non-blocking mode (best effort: a failure leaves it as it was).
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>) {
    let raw = fd.as_raw_fd();
    // SAFETY: fcntl on a descriptor the caller holds open.
    unsafe {
        let fl = libc::fcntl(raw, libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(raw, libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
    }
}

/// Shut down the writing side of socket `fd` (the reading side stays open).
pub(crate) fn shutdown_write(fd: BorrowedFd<'_>) {
    // SAFETY: shutdown on a socket the caller holds open.
    unsafe {
        libc::shutdown(fd.as_raw_fd(), libc::SHUT_WR);
    }
}

/// One `write(2)` of `b` to `fd`: the bytes written.
pub(crate) fn write(fd: RawFd, b: &[u8]) -> io::Result<usize> {
    // SAFETY: writing from a valid buffer of the given length; a bad fd yields EBADF.
    let n = unsafe { libc::write(fd, b.as_ptr().cast(), b.len()) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// One `read(2)` from `fd` into `buf`: the bytes read (0 at end of file).
pub(crate) fn read(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: reading into a valid buffer of the given length; a bad fd yields EBADF.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Make `to` a copy of `from` (`dup2`); a failure leaves `to` as it was.
pub(crate) fn dup2(from: RawFd, to: RawFd) {
    // SAFETY: dup2 on descriptor numbers; a bad one yields EBADF.
    unsafe {
        libc::dup2(from, to);
    }
}

/// Close descriptor number `fd`, which nothing in this process will use again (a forked
/// child dropping what it inherited; the owner's handle is forgotten, never dropped, there).
pub(crate) fn close_raw(fd: RawFd) {
    // SAFETY: closing a descriptor number; the caller guarantees no live owner uses it after.
    unsafe {
        libc::close(fd);
    }
}

/// Point stdout and stderr at `/dev/null`. False when `/dev/null` could not be opened.
pub(crate) fn stdio_to_dev_null() -> bool {
    // SAFETY: open of a NUL-terminated path; dup2/close on the descriptor it returned.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if null < 0 {
            return false;
        }
        libc::dup2(null, 1);
        libc::dup2(null, 2);
        libc::close(null);
    }
    true
}

/// The result of [`fork_single_threaded`].
pub(crate) enum Forked {
    /// In the new child.
    Child,
    /// In the parent: the child's pid.
    Parent(i32),
}

/// `fork(2)`. Sound only in a process with a single thread (the zygote): the child then may
/// allocate and run any code. The child leaves through [`exit_now`].
pub(crate) fn fork_single_threaded() -> io::Result<Forked> {
    // SAFETY: the caller is single-threaded, so no lock can be held by a thread that does not
    // exist in the child.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(pid)),
    }
}

/// End this process at once with `code`, running no destructor and no exit handler (a forked
/// child must not run its parent's).
pub(crate) fn exit_now(code: i32) -> ! {
    // SAFETY: _exit has no preconditions.
    unsafe { libc::_exit(code) }
}

/// `waitpid(pid, …)`: `Ok(Some((pid, status)))` for a child that changed state, `Ok(None)`
/// when `nohang` and none did.
pub(crate) fn waitpid(pid: i32, nohang: bool) -> io::Result<Option<(i32, c_int)>> {
    let mut status = 0;
    let flags = if nohang { libc::WNOHANG } else { 0 };
    // SAFETY: waitpid with a valid out-pointer.
    let r = unsafe { libc::waitpid(pid, &mut status, flags) };
    match r {
        r if r < 0 => Err(io::Error::last_os_error()),
        0 => Ok(None),
        r => Ok(Some((r, status))),
    }
}

/// The exit code of a `waitpid` status: the process's, or `128 + N` when signal N killed it.
pub(crate) fn exit_code(status: c_int) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        -1
    }
}

/// Whether a `waitpid` status says a signal killed the process.
pub(crate) fn killed_by_signal(status: c_int) -> bool {
    libc::WIFSIGNALED(status)
}

/// The set holding exactly `sigs`.
pub(crate) fn sigset(sigs: &[c_int]) -> sigset_t {
    // SAFETY: a zeroed sigset is a valid argument for sigemptyset, which initialises it;
    // sigaddset with valid signal numbers.
    unsafe {
        let mut set = std::mem::zeroed::<sigset_t>();
        libc::sigemptyset(&mut set);
        for &s in sigs {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// `set` without `sigs`.
pub(crate) fn sigset_without(mut set: sigset_t, sigs: &[c_int]) -> sigset_t {
    for &s in sigs {
        // SAFETY: a valid sigset pointer and signal number.
        unsafe {
            libc::sigdelset(&mut set, s);
        }
    }
    set
}

/// Block `set` in this thread; the mask before.
pub(crate) fn block_signals(set: &sigset_t) -> sigset_t {
    // SAFETY: a zeroed sigset is a valid out-parameter; valid sigset pointers.
    unsafe {
        let mut before = std::mem::zeroed::<sigset_t>();
        libc::sigprocmask(libc::SIG_BLOCK, set, &mut before);
        before
    }
}

/// Unblock `set` in this thread.
pub(crate) fn unblock_signals(set: &sigset_t) {
    // SAFETY: a valid sigset pointer.
    unsafe {
        libc::sigprocmask(libc::SIG_UNBLOCK, set, std::ptr::null_mut());
    }
}

/// Make `mask` this thread's signal mask.
pub(crate) fn set_signal_mask(mask: &sigset_t) {
    // SAFETY: a valid sigset pointer.
    unsafe {
        libc::sigprocmask(libc::SIG_SETMASK, mask, std::ptr::null_mut());
    }
}

/// SIGTERM was received since [`catch_term`] (or the last [`clear_term`]).
static TERM: AtomicBool = AtomicBool::new(false);

extern "C" fn on_term(_sig: c_int) {
    // Async-signal-safe: one atomic store.
    TERM.store(true, Ordering::SeqCst);
}

extern "C" fn on_wake(_sig: c_int) {}

/// Install `handler` for `sig` without `SA_RESTART`, so it interrupts a blocking call.
fn install(sig: c_int, handler: extern "C" fn(c_int)) {
    // SAFETY: a zeroed sigaction with an empty mask and a handler of this module, each
    // async-signal-safe (an atomic store, or nothing).
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler as *const () as libc::sighandler_t;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(sig, &sa, std::ptr::null_mut());
    }
}

/// Record SIGTERM ([`term_received`]) instead of dying of it; it interrupts a blocking call.
pub(crate) fn catch_term() {
    install(libc::SIGTERM, on_term);
}

/// Let `sig` interrupt a blocking call and do nothing else (SIG_DFL for SIGCHLD is "ignore",
/// which would not interrupt `ppoll`).
pub(crate) fn wake_on(sig: c_int) {
    install(sig, on_wake);
}

/// Give SIGCHLD back its default disposition (a forked child of the zygote).
pub(crate) fn default_sigchld() {
    // SAFETY: setting a standard disposition for a valid signal.
    unsafe {
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
    }
}

/// Whether SIGTERM came since [`catch_term`] or the last [`clear_term`].
pub(crate) fn term_received() -> bool {
    TERM.load(Ordering::SeqCst)
}

/// Forget a SIGTERM received so far.
pub(crate) fn clear_term() {
    TERM.store(false, Ordering::SeqCst);
}

/// `ppoll(2)` on `fds` with `timeout` (`None`: none), `mask` as the signal mask while waiting:
/// the number of descriptors with events. `Interrupted` when a signal came.
pub(crate) fn ppoll(
    fds: &mut [pollfd],
    timeout: Option<Duration>,
    mask: &sigset_t,
) -> io::Result<usize> {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    // SAFETY: valid pollfds of the given count, a valid (or null) timeout and a valid mask.
    let n = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            ts.as_ref().map_or(std::ptr::null(), |t| t as *const _),
            mask,
        )
    };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// `poll(2)` on one descriptor without waiting: its returned events (0 when none).
pub(crate) fn poll_now(fd: RawFd, events: libc::c_short) -> libc::c_short {
    let mut pfd = pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no timeout.
    let n = unsafe { libc::poll(&mut pfd, 1, 0) };
    if n > 0 { pfd.revents } else { 0 }
}

/// Send `data` with `fds` attached (`SCM_RIGHTS`) as one message on `sock`, without blocking
/// and without SIGPIPE: the bytes sent.
pub(crate) fn send_fds(
    sock: BorrowedFd<'_>,
    data: &[u8],
    fds: &[BorrowedFd<'_>],
) -> io::Result<usize> {
    let raw: Vec<c_int> = fds.iter().map(|f| f.as_raw_fd()).collect();
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
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// One message received on `sock` into `buf`, with the descriptors attached (close-on-exec,
/// at most `max_fds`), and whether it or its descriptors were cut (`MSG_TRUNC`/`MSG_CTRUNC`).
pub(crate) fn recv_fds(
    sock: RawFd,
    buf: &mut [u8],
    max_fds: usize,
) -> io::Result<(usize, Vec<OwnedFd>, bool)> {
    // SAFETY: pure size computation.
    let space =
        unsafe { libc::CMSG_SPACE((max_fds * std::mem::size_of::<c_int>()) as u32) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut fds = Vec::new();
    // SAFETY: as in `send_fds`; the kernel fills at most `space` control bytes, and every
    // SCM_RIGHTS payload is a whole number of descriptors this process now owns.
    let (n, flags) = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let n = libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c);
                let len = (*c).cmsg_len as usize - (data as usize - c as usize);
                for i in 0..len / std::mem::size_of::<c_int>() {
                    let fd = std::ptr::read_unaligned(data.cast::<c_int>().add(i));
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
        (n as usize, msg.msg_flags)
    };
    let cut = flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0;
    Ok((n, fds, cut))
}

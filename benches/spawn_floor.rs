//! The machine's floor for a burst of process starts, with no cronsole code:
//! start `N` (10 000) short commands, at most `C` (512) alive at once, and report the wall time
//! and the CPU time of this process and of its reaped children. It tells whether "10 000 runs
//! started within 2 s on 2 cores" is reachable on a machine at all, and what ratio of the floor
//! `cronsole run`'s burst (`benches/engine.rs burst`) achieves.
//!
//! Ways of starting (each argument names one; none runs all but `static`):
//! - `fork`: `fork()` + `execve("/usr/bin/true")` (absolute path, no shell, no PATH search);
//! - `spawn`: `std::process::Command::new("/usr/bin/true").spawn()` (`posix_spawn`: a
//!   `clone(CLONE_VM | CLONE_VFORK)`, no copy of the parent's page tables);
//! - `spawnp`: `Command::new("true")`, the program found by a PATH search in each child (what
//!   an `execvp` of a bare name costs with this process's PATH);
//! - `resolve`: the PATH search done by this process with `access(X_OK)` on each candidate,
//!   then `spawn` of the path found (`argv[0]` kept `true`): what resolving in the parent costs
//!   beside `spawnp`;
//! - `static`: `spawn` of `FLOOR_STATIC` (a statically linked program, no `ld.so`), when set.
//!
//! `cargo bench --bench spawn_floor --no-run`, then the bench executable with
//! `[fork|spawn|spawnp|resolve|static]…`; `FLOOR_N` / `FLOOR_C` change 10 000 / 512. Figures go to
//! docs/BENCHMARKS.md, "Burst: 10 000 jobs due at one instant", "The machine's floor".
#![allow(clippy::unwrap_used)] // test code
#![allow(unsafe_code)] // signals, forks and polls real processes through libc

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Instant;

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// CPU seconds (user + system) of this process and of its reaped children.
fn cpu() -> (f64, f64) {
    let get = |who| {
        // SAFETY: a zeroed rusage is a valid out-parameter.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: valid `who` and out-pointer.
        unsafe { libc::getrusage(who, &mut ru) };
        let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        s(ru.ru_utime) + s(ru.ru_stime)
    };
    (get(libc::RUSAGE_SELF), get(libc::RUSAGE_CHILDREN))
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Reap one child (blocking); whether it exited 0.
fn reap_one() -> bool {
    let mut status = 0;
    loop {
        // SAFETY: waitpid with a valid out-pointer.
        let r = unsafe { libc::waitpid(-1, &mut status, 0) };
        if r > 0 {
            return libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
        }
        if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            panic!("waitpid: {}", std::io::Error::last_os_error());
        }
    }
}

/// The first `dir/name` on PATH that is a file this process may execute.
fn resolve(name: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::env::var_os("PATH")?;
    for dir in path.as_bytes().split(|b| *b == b':') {
        let mut p = Vec::with_capacity(dir.len() + name.len() + 2);
        p.extend_from_slice(if dir.is_empty() { b"." } else { dir });
        p.push(b'/');
        p.extend_from_slice(name.as_bytes());
        p.push(0);
        // SAFETY: a NUL-terminated path.
        if unsafe { libc::access(p.as_ptr().cast(), libc::X_OK) } == 0 {
            p.pop();
            return Some(std::ffi::OsStr::from_bytes(&p).into());
        }
    }
    None
}

/// Start `n` children with `start`, at most `c` alive; (wall s, CPU self s, CPU children s,
/// failed).
fn burst(n: usize, c: usize, start: &mut dyn FnMut()) -> (f64, f64, f64, usize) {
    let (s0, c0) = cpu();
    let t0 = Instant::now();
    let mut alive = 0;
    let mut failed = 0;
    for _ in 0..n {
        if alive == c {
            failed += usize::from(!reap_one());
            alive -= 1;
        }
        start();
        alive += 1;
    }
    let all_started = t0.elapsed().as_secs_f64();
    while alive > 0 {
        failed += usize::from(!reap_one());
        alive -= 1;
    }
    let (s1, c1) = cpu();
    (all_started, s1 - s0, c1 - c0, failed)
}

fn main() {
    let n = env_num("FLOOR_N", 10_000);
    let c = env_num("FLOOR_C", 512);
    let mut which: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    if which.is_empty() {
        which = vec!["fork".into(), "spawn".into(), "spawnp".into()];
    }
    let true_path = c"/usr/bin/true";
    let argv = [true_path.as_ptr(), std::ptr::null()];
    unsafe extern "C" {
        static environ: *const *const libc::c_char;
    }
    for how in which {
        let load_before = loadavg();
        let mut fork_exec = || {
            // SAFETY: this process is single-threaded; the child only calls execve and _exit.
            match unsafe { libc::fork() } {
                0 => unsafe {
                    libc::execve(true_path.as_ptr(), argv.as_ptr(), environ);
                    libc::_exit(127)
                },
                -1 => panic!("fork: {}", std::io::Error::last_os_error()),
                _ => {}
            }
        };
        let spawn = |program: &str| {
            let child = Command::new(program)
                .stdin(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("spawn {program}: {e}"));
            // Reaped by `reap_one` (waitpid(-1)), not through `Child`.
            std::mem::forget(child);
        };
        let stat = std::env::var("FLOOR_STATIC").ok();
        let (wall, own, kids, failed) = match how.as_str() {
            "fork" => burst(n, c, &mut fork_exec),
            "spawn" => burst(n, c, &mut || spawn("/usr/bin/true")),
            "spawnp" => burst(n, c, &mut || spawn("true")),
            "resolve" => burst(n, c, &mut || {
                let path = resolve("true").expect("true is on PATH");
                let child = Command::new(path).arg0("true").stdin(Stdio::null()).spawn();
                std::mem::forget(child.unwrap_or_else(|e| panic!("spawn true: {e}")));
            }),
            "static" => match &stat {
                Some(p) => burst(n, c, &mut || {
                    let child = Command::new(p).arg0("true").stdin(Stdio::null()).spawn();
                    std::mem::forget(child.unwrap_or_else(|e| panic!("spawn {p}: {e}")));
                }),
                None => {
                    println!("static: set FLOOR_STATIC to a statically linked program");
                    continue;
                }
            },
            other => {
                println!("unknown way {other:?} (fork, spawn, spawnp, resolve, static)");
                continue;
            }
        };
        println!(
            "floor {how}: {n} × true, ≤ {c} alive: all started in {wall:.2} s; CPU self {own:.2} s + children {kids:.2} s = {:.3} ms per run; {failed} failed; load {load_before} → {}",
            (own + kids) * 1000.0 / n as f64,
            loadavg()
        );
    }
}

//! Process trees: finding every descendant of a process, and killing and reaping a whole tree
//! or what a dead supervisor left behind.
//!
//! The walk goes down the kernel's child lists (`/proc/PID/task/TID/children`), which costs the
//! size of the tree, not of the machine: the supervisors of hundreds of runs stopping at once
//! (their owner died) must not each read every process's `/proc/PID/stat` before their first
//! kill, or the commands run to completion in the meantime. Without those lists (a kernel built
//! without `CONFIG_PROC_CHILDREN`) every process's parent link is read instead.
//!
//! Owns: the walk and the kill-and-reap loops. Must not touch: when to kill (the supervisor,
//! the zygote and the owner decide), the raw calls (`sys`).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use super::sys;

/// Every process whose parent chain leads to `root`. Walked down from `root` through the
/// kernel's child lists; without them, through every process's parent link. A process forked
/// during the walk may be missed: callers repeat until nothing is left.
pub(crate) fn descendants_of(root: i32) -> Vec<i32> {
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
pub(super) fn children_of(pid: i32) -> Vec<i32> {
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
pub(super) fn parent_links() -> Vec<(i32, i32)> {
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
pub(super) fn subtree(links: &[(i32, i32)], root: i32) -> Vec<i32> {
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

/// Whether `pid` is stopped by a signal or a tracer (`/proc/PID/stat` state `T` or `t`).
pub(super) fn process_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|st| {
            st.rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next())
        })
        .is_some_and(|c| c == 'T' || c == 't')
}

/// This process's id, as the kernel's process tables spell it.
pub(super) fn my_pid() -> i32 {
    i32::try_from(std::process::id()).unwrap_or(i32::MAX)
}

/// SIGKILL every descendant of this process (no reaping; safe from any thread).
pub(super) fn kill_descendants() {
    for pid in descendants_of(my_pid()) {
        sys::kill(pid, libc::SIGKILL);
    }
}

/// Kill and reap every descendant until none is left (`true`) or `limit` passes (`false`).
pub(super) fn kill_tree(limit: Duration) -> bool {
    let started = Instant::now();
    loop {
        // Reap whatever is already dead; ECHILD means no child, hence no descendant at all
        // (an orphaned descendant is re-parented to us, the subreaper).
        loop {
            match sys::waitpid(-1, true) {
                Ok(Some(_)) => continue,
                Ok(None) => break, // children remain
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return true, // ECHILD
            }
        }
        if started.elapsed() > limit {
            return false;
        }
        kill_descendants();
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// SIGKILL every process of group `pgid`, once.
pub(super) fn kill_group_now(pgid: i32) {
    // 0 would signal our own process group and 1 is init's: never.
    if pgid <= 1 {
        return;
    }
    // A stale or empty group yields ESRCH, which is exactly "nothing left to kill".
    sys::killpg(pgid, libc::SIGKILL);
}

/// SIGKILL process group `pgid` until it is empty (or `limit` passes): what a `__supervise`
/// killed outright (`kill -9`) left behind — the command and every descendant still in the
/// group the owner made for that supervisor (its pid). A process group id is not reused while
/// the group has a member, so this cannot reach another run. Blocking (a few milliseconds per
/// round, while a process forks as it dies).
pub(crate) fn kill_group(pgid: i32, limit: Duration) {
    if pgid <= 1 {
        return;
    }
    let started = Instant::now();
    // A failed killpg (ESRCH) means the group is empty.
    while sys::killpg(pgid, libc::SIGKILL) && started.elapsed() <= limit {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Make this process a child subreaper: what a child of it leaves when it dies is re-parented
/// here, not to init. The owner does this when its runs' supervisors are execs of `__supervise`
/// (no zygote): a supervisor killed outright then leaves its run's processes — a `setsid`
/// escapee included, which its process group ([`kill_group`]) does not hold — to the owner,
/// which kills and reaps them ([`reap_strays`]). `false` when the kernel refused.
pub(crate) fn become_subreaper() -> bool {
    sys::become_subreaper()
}

/// Kill and reap the children of this (subreaper) process that it did not start itself: what a
/// run's supervisor killed outright left, re-parented here — each with its whole subtree. Left
/// alone: a child `ours` names (one this process started and waits for), and a live child
/// running this very executable (a supervisor, the zygote, or a fork of this process about to
/// exec one: its pid is not known yet). Repeats until none is left or `limit` passes.
/// Blocking.
pub(crate) fn reap_strays(limit: Duration, ours: &dyn Fn(i32) -> bool) {
    let me = my_pid();
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
                sys::kill(d, libc::SIGKILL);
            }
            // Then reap it if it is dead (it is our child now).
            sys::kill(s, libc::SIGKILL);
            let _ = sys::waitpid(s, true);
        }
        if started.elapsed() > limit {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descendants_are_found_through_parent_links() {
        let _one = super::super::TEST_CHILDREN
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
            sys::kill(*p, libc::SIGKILL);
        }
        let _ = child.wait();
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
            sys::kill(*p, libc::SIGKILL);
        }
        let _ = child.wait();
        assert_eq!(walked.len(), 4, "{walked:?}");
        assert_eq!(by_walk, by_links);
        // A process that is gone has no children to list.
        assert!(children_of(sh).is_empty());
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
        // Signals to the child this test spawned and has not reaped.
        sys::kill(pid as i32, libc::SIGSTOP);
        assert!(wait_for(true), "stopped");
        sys::kill(pid as i32, libc::SIGCONT);
        assert!(wait_for(false), "continued");
        let _ = child.kill();
        let _ = child.wait();
        assert!(!process_stopped(pid), "gone");
    }
}

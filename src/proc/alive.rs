//! Whether a process named by an owner record still runs: the PID space this process lives in,
//! and whether a PID of that space is gone.
//!
//! Owns: [`pid_space`] (which kernel boot and PID namespace a process id belongs to) and
//! [`gone`]. Must not touch: what a dead owner means (`owners` decides), the raw calls (`sys`).
//!
//! A process id means something only inside one PID namespace of one boot of one kernel: two
//! hosts (or two containers of one host) can share a hostname and still not share their
//! processes. So an owner record carries its [`pid_space`], and a PID is looked at only by a
//! process of the same space.

use std::sync::OnceLock;

use super::sys;

/// This process's PID space: the kernel's boot id and the inode of its PID namespace
/// (`BOOT_ID/pid:[INODE]`), read once; `None` when either cannot be read.
pub fn pid_space() -> Option<&'static str> {
    static SPACE: OnceLock<Option<String>> = OnceLock::new();
    SPACE
        .get_or_init(|| {
            let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
            let ns = std::fs::read_link("/proc/self/ns/pid").ok()?;
            let (boot, ns) = (boot.trim(), ns.to_string_lossy());
            (!boot.is_empty() && !ns.is_empty()).then(|| format!("{boot}/{ns}"))
        })
        .as_deref()
}

/// Whether process `pid` of this PID space is gone: no such process, or only its zombie
/// (dead, not yet reaped by its parent). An id that cannot name a process is not judged gone.
pub fn gone(pid: u32) -> bool {
    let Ok(p) = i32::try_from(pid) else {
        return false;
    };
    if p <= 0 {
        return false;
    }
    if !sys::process_exists(p) {
        return true;
    }
    std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|st| {
        st.rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|c| c == 'Z' || c == 'X')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_not_gone_and_a_reaped_child_is() {
        assert!(!gone(std::process::id()));
        assert!(!gone(0), "0 names no process");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(gone(pid));
        let space = pid_space().unwrap();
        assert!(space.contains("/pid:["), "{space}");
    }

    #[test]
    fn a_dead_child_not_yet_reaped_is_gone() {
        let child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Not reaped: a zombie until `wait`.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !gone(pid) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(gone(pid));
        drop(child);
    }
}

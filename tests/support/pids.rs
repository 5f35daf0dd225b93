//! Whether a process still lives, for tests that check a run's process tree is gone.
//!
//! Owns: reading `/proc/PID/stat`. Must not touch: the processes themselves.

use std::time::Duration;

/// Alive = exists and is not a zombie (an orphan re-parented to a non-reaping PID 1 stays a
/// zombie, which `kill(pid, 0)` would still report as present).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next());
            state != Some('Z') && state != Some('X')
        }
    }
}

/// Wait (up to 2 s: SIGKILL delivery is asynchronous) until `pid` is gone.
pub async fn gone(pid: i32) -> bool {
    super::wait::poll_until_async(Duration::from_secs(2), || !alive(pid)).await
}

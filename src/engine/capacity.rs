//! The default run capacity of one owner (`--max-concurrent` when it is not given): derived from
//! the machine's cores and this process's limits, so a burst of due runs is not queued behind a
//! fixed handful of slots on a large machine, and never exceeds what the limits allow.
//!
//! Owns: the rule and its inputs. Must not touch: the engine's scheduling (it only reads the
//! number), the store. The rule, as the operator's guide states it:
//!
//! `min(RUNS_PER_CORE × cores, user process limit / (2 × PROCESSES_PER_RUN),
//!      (open-file limit − RESERVED_FILES) / FILES_PER_RUN, MAX)`, and at least 1.
//!
//! Most runs wait on something else (a model's reply, a network fetch, a child's exit), so a
//! core serves many of them; the per-core factor comes from the burst benchmark (a burst of
//! short commands reaches its floor, a bare spawn loop, well before 64 per core). The process
//! limit (`RLIMIT_NPROC`) counts every process of the user, so runs may take half of it; the
//! open-file limit (`RLIMIT_NOFILE`) is this process's own.

/// Runs per core: most runs wait rather than compute.
pub const RUNS_PER_CORE: usize = 64;
/// Processes one run may hold at once: its supervisor, a shell, the command.
pub const PROCESSES_PER_RUN: u64 = 3;
/// Descriptors one run may hold in the engine (output pipes, the supervisor's socket, a pidfd,
/// an HTTP connection), with room to spare.
pub const FILES_PER_RUN: u64 = 8;
/// Descriptors kept for everything else (the store's files, logs, listeners, the console).
pub const RESERVED_FILES: u64 = 64;
/// The most `--max-concurrent` accepts.
pub const MAX: usize = 1024;

/// What the default is made of (for `--help`, the log and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inputs {
    /// Cores this process may run on.
    pub cores: usize,
    /// Soft `RLIMIT_NPROC`, `None` when unlimited.
    pub processes: Option<u64>,
    /// Soft `RLIMIT_NOFILE`, `None` when unlimited.
    pub files: Option<u64>,
}

impl Inputs {
    /// This process's cores and limits.
    pub fn current() -> Inputs {
        let (processes, files) = crate::proc::sys::soft_process_and_file_limits();
        Inputs {
            cores: std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
            processes,
            files,
        }
    }

    /// The default capacity these inputs give (see the module doc).
    pub fn capacity(self) -> usize {
        let to_usize = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        let mut n = RUNS_PER_CORE.saturating_mul(self.cores.max(1)).min(MAX);
        if let Some(p) = self.processes {
            n = n.min(to_usize(p / (2 * PROCESSES_PER_RUN)));
        }
        if let Some(f) = self.files {
            n = n.min(to_usize(f.saturating_sub(RESERVED_FILES) / FILES_PER_RUN));
        }
        n.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cores_set_the_default_when_the_limits_are_wide() {
        let i = Inputs {
            cores: 2,
            processes: Some(96_000),
            files: Some(20_000),
        };
        assert_eq!(i.capacity(), 128);
        let big = Inputs {
            cores: 64,
            processes: None,
            files: None,
        };
        assert_eq!(big.capacity(), MAX);
    }

    #[test]
    fn the_limits_cap_it() {
        // 1 024 open files: (1 024 − 64) / 8 = 120.
        let files = Inputs {
            cores: 8,
            processes: None,
            files: Some(1024),
        };
        assert_eq!(files.capacity(), 120);
        // 300 processes for the user: 300 / 6 = 50.
        let procs = Inputs {
            cores: 8,
            processes: Some(300),
            files: None,
        };
        assert_eq!(procs.capacity(), 50);
        // Limits too tight for even one run still leave one (the spawn reports the failure).
        let tight = Inputs {
            cores: 1,
            processes: Some(2),
            files: Some(10),
        };
        assert_eq!(tight.capacity(), 1);
    }

    #[test]
    fn this_process_gets_a_default_within_bounds() {
        let n = Inputs::current().capacity();
        assert!((1..=MAX).contains(&n), "{n}");
    }
}

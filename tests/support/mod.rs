//! Helpers shared by integration tests (each test crate includes them with `mod support;`):
//! running the real binary ([`cli`]), a background `cronsole run` ([`daemon`]) and its metrics
//! ([`scrape`]), the approval tests' jobs file and a file store's rows ([`approval`]), whether a
//! process lives ([`pids`]), temporary directories removed even when a test panics ([`TempDir`]), test instants ([`time`]), reporting a test that cannot run here ([`skip`]) and
//! throwaway PostgreSQL clusters ([`pg`]).
//!
//! What unit tests in `src/` and `benches/` share too lives in `cronsole::testkit` (time, tmp,
//! skip, stats, wait) and is re-exported here, so every test has one definition of each.
//!
//! Owns: test scaffolding only. Must not touch: the code under test except through its public
//! API or the binary.
#![allow(dead_code, unused_imports)]

pub mod approval;
pub mod cli;
pub mod daemon;
pub mod pg;
pub mod pids;
pub mod scrape;

pub use cronsole::testkit::skip::{ci, skip};
pub use cronsole::testkit::time;
pub use cronsole::testkit::tmp::{TempDir, TempPath};
pub use cronsole::testkit::wait;

/// A fresh temporary directory `$TMPDIR/cronsole-<tag>-XXXXXX`, removed on drop.
pub fn tempdir(tag: &str) -> TempDir {
    TempDir::new(tag)
}

/// A path `name` inside a fresh temporary directory (the file is not created), removed on drop.
pub fn temp_path(name: &str) -> TempPath {
    TempPath::new(name)
}

/// `tmux` is on PATH (and answers `tmux -V`); otherwise the calling test is reported skipped
/// (a failure under CI=true, see [`skip`]) and this returns false.
#[track_caller]
pub fn tmux_or_skip() -> bool {
    match std::process::Command::new("tmux").arg("-V").output() {
        Ok(o) if o.status.success() => true,
        Ok(o) => {
            skip("tmux", &format!("`tmux -V` exited {}", o.status));
            false
        }
        Err(e) => {
            skip("tmux", &format!("running `tmux -V`: {e}"));
            false
        }
    }
}

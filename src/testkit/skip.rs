//! Tests that cannot run here say so, so a green run never hides a test that did not run: a test
//! whose PostgreSQL server, `tmux` or `openssl` is missing calls [`skip`] and returns. Outside CI
//! that prints one line
//!
//! ```text
//! SKIPPED TEST <test binary>::<test name> (<what> not available: <why>)
//! ```
//!
//! written straight to the process's stderr — past libtest's output capture, so it shows in a
//! plain `cargo test` — and `.ci/run` counts those lines in its totals. Under `CI=true` (or `1`)
//! a missing dependency is a failure: [`skip`] panics instead.
//!
//! Owns: the decision skip-or-fail and the SKIP line's format (`.ci/run` greps
//! `SKIPPED TEST <name>`). Must not touch: how a test finds its dependency.

use std::io::Write as _;

/// The line prefix `.ci/run` counts.
pub const MARK: &str = "SKIPPED TEST";

/// Running under CI (`CI=true` or `CI=1`), where nothing may be skipped.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// `<test binary>::<test name>` of the calling test (libtest names each test's thread after the
/// test; the binary's name loses cargo's `-<hash>` suffix).
pub fn current_test() -> String {
    let bin = std::env::args()
        .next()
        .and_then(|a| {
            std::path::Path::new(&a)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
        })
        .unwrap_or_default();
    let bin = match bin.rsplit_once('-') {
        Some((stem, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            stem.to_string()
        }
        _ => bin,
    };
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("?");
    format!("{bin}::{test}")
}

/// The SKIP line for the calling test (one line: `why` loses its newlines).
pub fn line(what: &str, why: &str) -> String {
    let why = why.split_whitespace().collect::<Vec<_>>().join(" ");
    format!("{MARK} {} ({what} not available: {why})", current_test())
}

/// The calling test cannot run because `what` is missing (`why` says how that showed). Prints
/// the SKIP line and returns, so the caller returns next; under CI, panics instead.
#[track_caller]
pub fn skip(what: &str, why: &str) {
    if ci() {
        panic!("{what} is required under CI=true: {why}");
    }
    let line = format!("{}\n", line(what, why));
    // One write of the whole line, to the real stderr (not `eprintln!`, which the harness
    // captures and throws away for a test that passes).
    let _ = std::io::stderr().write_all(line.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_the_test_and_the_reason() {
        let l = line("tmux", "not\n on PATH");
        assert!(l.starts_with("SKIPPED TEST cronsole::"), "{l}");
        assert!(
            l.ends_with("the_line_names_the_test_and_the_reason (tmux not available: not on PATH)"),
            "{l}"
        );
    }
}

//! Running the real `cronsole` binary from a test: the one place that builds its `Command` and
//! turns its `Output` into `(exit code, stdout, stderr)`.
//!
//! Owns: spawning the binary. Must not touch: what a test asserts about it.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// The binary cargo built for this test run.
pub const BIN: &str = env!("CARGO_BIN_EXE_cronsole");

/// `cronsole` with stdin from `/dev/null` and no inherited `CRONSOLE_STORE` (a store the
/// developer's shell points at must never be touched by a test), in the test's directory.
pub fn command() -> Command {
    let mut c = Command::new(BIN);
    c.env_remove("CRONSOLE_STORE").stdin(Stdio::null());
    c
}

/// [`command`] in `dir`.
pub fn cronsole(dir: &Path) -> Command {
    let mut c = command();
    c.current_dir(dir);
    c
}

/// `(exit code — -1 when killed by a signal —, stdout, stderr)` of a finished run.
pub fn split(out: Output) -> (i32, String, String) {
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Run `cmd` to completion; panics naming the command if it cannot start.
pub fn output(cmd: &mut Command) -> (i32, String, String) {
    match cmd.output() {
        Ok(out) => split(out),
        Err(e) => panic!("running {cmd:?}: {e}"),
    }
}

/// `cronsole ARGS` in `dir`.
pub fn run_plain(dir: &Path, args: &[&str]) -> (i32, String, String) {
    output(cronsole(dir).args(args))
}

/// `cronsole --store STORE ARGS` in `dir`.
pub fn run_with_store(
    dir: &Path,
    store: impl AsRef<OsStr>,
    args: &[&str],
) -> (i32, String, String) {
    output(cronsole(dir).arg("--store").arg(store).args(args))
}

/// `cronsole --store DIR/store ARGS` in `dir`.
pub fn run(dir: &Path, args: &[&str]) -> (i32, String, String) {
    run_with_store(dir, dir.join("store"), args)
}

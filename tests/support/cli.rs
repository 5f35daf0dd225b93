//! Running the real `cronsole` binary from a test: the one place that builds its `Command` and
//! turns its `Output` into `(exit code, stdout, stderr)`.
//!
//! Owns: spawning the binary. Must not touch: what a test asserts about it.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

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

/// `cronsole apply JOBS --store STORE`; panics with its stderr unless it exits 0.
pub fn apply(jobs: &Path, store: &Path) {
    let (code, _, err) = output(command().arg("apply").arg(jobs).arg("--store").arg(store));
    assert_eq!(code, 0, "cronsole apply {}: {err}", jobs.display());
}

/// Start `n` owners `cronsole run ARGS --store STORE` in `dir` (stdout discarded, stderr kept
/// for [`wait_ok`]); `args` carries at least `--for` so they stop by themselves.
pub fn spawn_owners(dir: &Path, store: &Path, n: usize, args: &[&str]) -> Vec<Child> {
    (0..n)
        .map(|_| {
            let mut c = cronsole(dir);
            c.arg("run")
                .args(args)
                .arg("--store")
                .arg(store)
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            match c.spawn() {
                Ok(k) => k,
                Err(e) => panic!("starting {c:?}: {e}"),
            }
        })
        .collect()
}

/// Wait for `child` to exit within `limit` (killed and the test failed otherwise, with its
/// stderr); returns its output and how long it took.
pub fn wait_timeout(mut child: Child, limit: Duration) -> (Output, Duration) {
    let start = Instant::now();
    let exited = super::wait::poll_until(limit, || !matches!(child.try_wait(), Ok(None)));
    if !exited || child.try_wait().is_err() {
        let _ = child.kill();
        let err = child
            .wait_with_output()
            .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
            .unwrap_or_default();
        panic!("process did not exit within {limit:?}; stderr:\n{err}");
    }
    match child.wait_with_output() {
        Ok(out) => (out, start.elapsed()),
        Err(e) => panic!("collecting a finished process's output: {e}"),
    }
}

/// [`wait_timeout`] for each owner, each of which must exit 0 (its stderr in the failure).
pub fn wait_ok(kids: Vec<Child>, limit: Duration) {
    for k in kids {
        let (out, _) = wait_timeout(k, limit);
        assert!(
            out.status.success(),
            "owner exited {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

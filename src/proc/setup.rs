//! The one process-wide setting of command runs: which executable supervises them (fixed once
//! at start by the binary), and whether runs go through the owner's zygote.
//!
//! Owns: those two switches. Must not touch: the runs themselves.

use super::exec;

static SUPERVISOR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// Start every command through the per-run supervisor (`exe __supervise …`, see
/// [`super::supervisor`]). The binary calls this at start with its own executable; without it
/// (library tests, embedders) commands are started directly in their own process group, which
/// cannot reach a `setsid` escapee nor survive the owner's `kill -9`. First call wins.
pub fn use_supervisor(exe: std::path::PathBuf) {
    let _ = SUPERVISOR.set(exe);
}

static NO_ZYGOTE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Start every supervised run through an exec of `__supervise` instead of the owner's zygote
/// (the binary does this for `CRONSOLE_ZYGOTE=off`: a diagnostic switch, and the "before" side
/// of `benches/engine.rs burst`).
pub fn disable_zygote() {
    NO_ZYGOTE.store(true, std::sync::atomic::Ordering::SeqCst);
    // Without a zygote every run's supervisor is this process's child: as their subreaper,
    // this process inherits what one killed outright leaves.
    exec::become_subreaper();
}

/// Whether commands are started through the supervisor.
#[cfg(any(test, feature = "testkit"))]
pub fn supervised() -> bool {
    SUPERVISOR.get().is_some()
}

/// The executable that supervises runs, once the binary chose one.
pub(super) fn supervisor_exe() -> Option<&'static std::path::Path> {
    SUPERVISOR.get().map(|p| p.as_path())
}

/// Whether supervised runs go through the owner's zygote.
pub(super) fn zygote_enabled() -> bool {
    !NO_ZYGOTE.load(std::sync::atomic::Ordering::SeqCst)
}

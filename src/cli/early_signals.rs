//! Stop and reload signals counted from the first moment of `main`, before any runtime exists.
//!
//! Owns: one process-wide handler for SIGTERM, SIGINT and SIGHUP that only counts them, and
//! the counts. Must not touch: anything else (the handler runs in signal context: atomics only).
//!
//! Why: the engine's signal streams exist only once its runtime runs, after the jobs file is
//! read and the store opened and applied. A SIGTERM in those first milliseconds took the default
//! disposition and the process died (exit 143) instead of stopping gracefully. Counting from
//! the start closes that window: the modes that run an engine read the counts once their own
//! streams are installed and act on what came before. The streams (tokio's, through
//! `signal-hook-registry`) chain to this handler, so the counts stay exact for the whole life
//! of the process and are the one truth for "first or second stop signal". Commands that run
//! no engine get the default dispositions back right after the command line is parsed, and a
//! signal that came meanwhile is raised again, so they end as they always did.

use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

use crate::proc::sys;

static STOPS: AtomicU32 = AtomicU32::new(0);
static HUPS: AtomicU32 = AtomicU32::new(0);
static LAST: AtomicI32 = AtomicI32::new(0);

const SIGNALS: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

extern "C" fn count(sig: libc::c_int) {
    if sig == libc::SIGHUP {
        HUPS.fetch_add(1, Ordering::SeqCst);
    } else {
        STOPS.fetch_add(1, Ordering::SeqCst);
    }
    LAST.store(sig, Ordering::SeqCst);
}

/// Count SIGTERM, SIGINT and SIGHUP from now on instead of dying of them.
pub fn install() {
    for sig in SIGNALS {
        // `count` only touches atomics (async-signal-safe).
        sys::count_signal(sig, count);
    }
}

/// Back to the default dispositions (a command that runs no engine); a signal counted
/// meanwhile is raised again, so it ends the process as it would have.
pub fn restore_default() {
    for sig in SIGNALS {
        sys::default_signal(sig);
    }
    let last = LAST.load(Ordering::SeqCst);
    if last != 0 {
        sys::raise(last);
    }
}

/// SIGTERM and SIGINT received so far.
pub fn stops() -> u32 {
    STOPS.load(Ordering::SeqCst)
}

/// SIGHUP received so far.
pub fn hangups() -> u32 {
    HUPS.load(Ordering::SeqCst)
}

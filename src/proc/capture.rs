//! Reading a run's output with caps enforced *while reading* (memory never grows with the
//! output), and turning what was read and how the run ended into a [`ProcOutput`].
//!
//! A *soft* cap keeps the first bytes and discards the rest while still draining the pipe (so
//! the writer never blocks); a *hard* cap stops the whole tree as soon as it is exceeded.
//!
//! Owns: the capture buffers and the exit code convention. Must not touch: how a run is started
//! or stopped (the caller hands a [`Stopper`]).

use tokio::io::{AsyncRead, AsyncReadExt};

use super::lifeline::Lifeline;
use super::spec::{Cap, ProcError, ProcOutput, ProcSpec, TIMEOUT_EXIT_CODE};
use super::tree;

/// Bounded capture of one stream.
#[derive(Debug, Default)]
pub(super) struct Capture {
    pub(super) buf: Vec<u8>,
    pub(super) truncated: bool,
    pub(super) hard_hit: bool,
}

/// Read `r` to EOF keeping at most `cap` bytes. On a hard cap overflow the group is killed and
/// reading stops at once.
pub(super) async fn read_capped<R: AsyncRead + Unpin>(
    mut r: R,
    cap: Cap,
    sink: &mut Capture,
    stopper: &Stopper<'_>,
) {
    let limit = cap.limit();
    let mut chunk = [0u8; 8192];
    loop {
        let n = match r.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let room = limit.saturating_sub(sink.buf.len());
        if n > room {
            sink.buf.extend_from_slice(&chunk[..room]);
            sink.truncated = true;
            if let Cap::Hard(_) = cap {
                sink.hard_hit = true;
                stopper.stop();
                return;
            }
        } else {
            sink.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// How a capture stops the command when a hard cap is exceeded.
pub(super) enum Stopper<'a> {
    Group(i32),
    Lifeline(&'a Lifeline),
}

impl Stopper<'_> {
    pub(super) fn stop(&self) {
        match self {
            Stopper::Group(pgid) => tree::kill_group_now(*pgid),
            Stopper::Lifeline(l) => l.cut(),
        }
    }
}

/// The exit code of a finished process: its own, or `128 + N` when signal N killed it.
pub(super) fn exit_code_of(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        (None, None) => -1,
    }
}

/// The output of a run that ended (`status`: its exit code, or the wait's error), timed out, or
/// never reported (`None`: -1).
pub(super) fn finish(
    spec: &ProcSpec<'_>,
    timed_out: bool,
    status: Option<std::io::Result<i32>>,
    out: Capture,
    err: Capture,
) -> Result<ProcOutput, ProcError> {
    let exit_code = if timed_out {
        TIMEOUT_EXIT_CODE
    } else {
        match status {
            Some(Ok(code)) => code,
            Some(Err(source)) => {
                return Err(ProcError::Wait {
                    command: spec.command.to_string(),
                    source,
                });
            }
            None => -1,
        }
    };
    Ok(ProcOutput {
        exit_code,
        timed_out,
        hard_cap_hit: out.hard_hit || err.hard_hit,
        stdout_truncated: out.truncated,
        stderr_truncated: err.truncated,
        stdout: out.buf,
        stderr: err.buf,
    })
}

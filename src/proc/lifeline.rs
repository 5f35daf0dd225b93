//! The owner's end of a run's life-line: the pipe that is a `__supervise` exec's stdin, or the
//! owner's end of the run's control socket (a zygote's run, where the same socket brings the
//! status back, so the write side is shut down rather than closed). Cutting it tells the
//! supervisor to kill the run's whole tree; a byte is a heartbeat.
//!
//! Owns: heartbeats and the cut. Must not touch: the supervisor's side of the line.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::Duration;

use super::sys;

/// Write end of one run's life-line. Cutting it (drop, [`Lifeline::cut`]) tells the supervisor
/// to kill the run's whole tree; a byte is a heartbeat.
pub(super) struct Lifeline {
    fd: std::sync::Mutex<Option<OwnedFd>>,
    socket: bool,
}

impl Drop for Lifeline {
    fn drop(&mut self) {
        self.cut();
    }
}

impl Lifeline {
    /// The owner's end of a zygote's run control socket.
    pub(super) fn socket(fd: OwnedFd) -> Self {
        let mut l = Lifeline::new(Some(fd));
        l.socket = true;
        l
    }

    /// The write end of a pipe (`None`: the run has no life-line).
    pub(super) fn new(fd: Option<OwnedFd>) -> Self {
        if let Some(fd) = &fd {
            // A heartbeat must never block the owner.
            sys::set_nonblocking(fd.as_fd());
        }
        Lifeline {
            fd: std::sync::Mutex::new(fd),
            socket: false,
        }
    }

    /// Beat four times per `stall` limit (10 ms to 1 s apart) for as long as it is polled;
    /// never when the run has no stall limit (the dead-man switch is then off).
    pub(super) async fn beat_every(&self, stall: Option<Duration>) {
        let Some(st) = stall else {
            return std::future::pending::<()>().await;
        };
        let every = (st / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
        loop {
            tokio::time::sleep(every).await;
            self.beat();
        }
    }

    fn beat(&self) {
        if let Ok(g) = self.fd.lock()
            && let Some(fd) = g.as_ref()
        {
            // EAGAIN (full pipe) is fine to ignore: the supervisor has plenty of heartbeats
            // queued.
            let _ = sys::write(fd.as_raw_fd(), b".");
        }
    }

    /// Cut the line: the supervisor kills the run's tree. The read side of a socket stays open
    /// for the status.
    pub(super) fn cut(&self) {
        if let Ok(mut g) = self.fd.lock()
            && let Some(fd) = g.take()
            && self.socket
        {
            sys::shutdown_write(fd.as_fd());
        }
    }
}

//! What wakes the console's loop besides the engine: terminal input and the idle redraws'
//! timer. On a terminal the timer is a kernel timer the loop's own thread waits on, so an idle
//! redraw is one wake-up of one thread; input comes from a key reader thread that waits for
//! input alone (it wakes for nothing else). In tests, input is a channel of events and the
//! timer is tokio's (paused time).
//!
//! Owns: the input channel's end; arming and taking the idle redraw timer. Must not touch: the
//! console's state or drawing.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use ratatui::crossterm::event::Event as TermEvent;
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;

use crate::proc::sys;

/// Where the console's terminal events come from: the key reader's thread on a terminal, a
/// test's sender otherwise.
pub(crate) enum Input {
    /// Events as they are read; `None` once every sender is gone.
    Channel(mpsc::UnboundedReceiver<io::Result<TermEvent>>),
}

impl Input {
    /// The next event; `None` when every sender is gone. Cancel-safe.
    pub(crate) async fn next(&mut self) -> Option<io::Result<TermEvent>> {
        match self {
            Self::Channel(rx) => rx.recv().await,
        }
    }
}

/// The idle redraws' timer: armed after each draw for when the screen next reads differently.
pub(crate) enum Pacer {
    /// tokio's timer (tests, on paused time): the instant it fires at, when armed.
    Tokio(Option<tokio::time::Instant>),
    /// A kernel timer the loop's thread waits on with the terminal: one wake-up a redraw,
    /// where a tokio timer a second away takes two (its timer wheel steps it down a level
    /// first), and on a runtime of several threads wakes a worker besides.
    Kernel(AsyncFd<OwnedFd>),
}

impl Pacer {
    /// The kernel timer; needs the tokio runtime the loop runs on.
    pub(crate) fn kernel() -> io::Result<Self> {
        Ok(Self::Kernel(sys::async_readable(sys::monotonic_timer()?)?))
    }

    /// Fire once, `after` from now (replacing any earlier arming).
    pub(crate) fn arm(&mut self, after: Duration) -> io::Result<()> {
        match self {
            Self::Tokio(at) => {
                *at = Some(tokio::time::Instant::now() + after);
                Ok(())
            }
            Self::Kernel(fd) => sys::arm_timer(fd.get_ref().as_fd(), after),
        }
    }

    /// When the timer fires; never when it is not armed. Cancel-safe.
    pub(crate) async fn fired(&mut self) -> io::Result<()> {
        match self {
            Self::Tokio(at) => {
                let Some(t) = *at else {
                    return std::future::pending().await;
                };
                tokio::time::sleep_until(t).await;
                *at = None;
                Ok(())
            }
            Self::Kernel(fd) => loop {
                let mut ready = fd.readable().await?;
                // An expiry dropped by re-arming leaves the descriptor marked ready with nothing
                // to read: `try_io` clears the mark on `WouldBlock` and the wait goes on.
                let taken = ready.try_io(|fd| match sys::take_timer(fd.get_ref().as_fd()) {
                    Ok(true) => Ok(()),
                    Ok(false) => Err(io::ErrorKind::WouldBlock.into()),
                    Err(e) => Err(e),
                });
                if let Ok(res) = taken {
                    return res;
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel timer fires once per arming, and a re-arming replaces the earlier one.
    #[tokio::test]
    async fn the_kernel_timer_fires_once_for_its_last_arming() {
        let mut p = Pacer::kernel().unwrap();
        p.arm(Duration::from_millis(1)).unwrap();
        p.fired().await.unwrap();
        // Armed far ahead, then re-armed near: the near one is the one that fires.
        p.arm(Duration::from_secs(3600)).unwrap();
        p.arm(Duration::from_millis(1)).unwrap();
        p.fired().await.unwrap();
        // Taken: nothing is left to read until it is armed again.
        let Pacer::Kernel(fd) = &p else {
            panic!("not a kernel timer")
        };
        assert!(!sys::take_timer(fd.get_ref().as_fd()).unwrap());
    }
}

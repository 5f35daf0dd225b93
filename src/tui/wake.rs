//! What wakes the console's loop besides the engine: terminal input and the idle redraws'
//! timer. On a terminal both are descriptors the loop's own thread waits on — the terminal's
//! (its events read with crossterm once it is readable, resizes told by `SIGWINCH`) and a
//! kernel timer — so an idle redraw is one wake-up of one thread, and an idle console with
//! nothing to redraw wakes no thread at all. In tests, input is a channel of events and the
//! timer is tokio's (paused time).
//!
//! Owns: reading terminal events without a thread of their own; arming and taking the idle
//! redraw timer. Must not touch: the console's state or drawing.

use std::collections::VecDeque;
use std::io::{self, IsTerminal};
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use ratatui::crossterm::event::{self, Event as TermEvent};
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;

use crate::proc::sys;

/// Where the console's terminal events come from.
pub(crate) enum Input {
    /// Events sent by a test (or any other driver); `None` once every sender is gone.
    Channel(mpsc::UnboundedReceiver<io::Result<TermEvent>>),
    /// The controlling terminal, read on the loop's thread.
    Terminal(Box<Tty>),
}

impl Input {
    /// The terminal this process runs in (stdin when it is one, else `/dev/tty`, as crossterm
    /// reads), through a descriptor of its own. Needs the tokio runtime the loop runs on.
    pub(crate) fn terminal() -> io::Result<Self> {
        let stdin = io::stdin();
        let fd: OwnedFd = if stdin.is_terminal() {
            stdin.as_fd().try_clone_to_owned()?
        } else {
            std::fs::File::open("/dev/tty")?.into()
        };
        Ok(Self::Terminal(Box::new(Tty {
            fd: sys::async_readable(fd)?,
            resized: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())?,
            queued: VecDeque::new(),
        })))
    }

    /// The next event; `None` when the input ended (every sender gone, the terminal hung
    /// up). Cancel-safe: events read and not yet returned wait in the queue.
    pub(crate) async fn next(&mut self) -> Option<io::Result<TermEvent>> {
        match self {
            Self::Channel(rx) => rx.recv().await,
            Self::Terminal(t) => t.next().await,
        }
    }
}

/// The terminal, read once its descriptor is readable or a resize was signalled.
pub(crate) struct Tty {
    fd: AsyncFd<OwnedFd>,
    resized: tokio::signal::unix::Signal,
    queued: VecDeque<io::Result<TermEvent>>,
}

impl Tty {
    async fn next(&mut self) -> Option<io::Result<TermEvent>> {
        loop {
            if let Some(ev) = self.queued.pop_front() {
                return Some(ev);
            }
            tokio::select! {
                ready = self.fd.readable() => {
                    let mut ready = match ready {
                        Ok(r) => r,
                        Err(e) => return Some(Err(e)),
                    };
                    // A terminal that hung up reads as empty forever, and crossterm would read
                    // it again and again: the input has ended.
                    if ready.ready().is_read_closed() || ready.ready().is_error() {
                        return None;
                    }
                    drain(&mut self.queued);
                    // The runtime's readiness is edge-triggered: bytes that arrive after the
                    // drain mark it ready again, so nothing typed is left unread.
                    ready.clear_ready();
                }
                _ = self.resized.recv() => drain(&mut self.queued),
            }
        }
    }
}

/// Every event crossterm can give without waiting (what it buffered, then what the terminal
/// holds), into `queued`; a read error is queued last.
fn drain(queued: &mut VecDeque<io::Result<TermEvent>>) {
    loop {
        match event::poll(Duration::ZERO) {
            Ok(true) => {
                let ev = event::read();
                let failed = ev.is_err();
                queued.push_back(ev);
                if failed {
                    return;
                }
            }
            Ok(false) => return,
            Err(e) => {
                queued.push_back(Err(e));
                return;
            }
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

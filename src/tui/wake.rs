//! What wakes the console's loop besides the engine: terminal input and the idle redraws'
//! timer. On a terminal the timer is a kernel timer the loop's own thread waits on
//! ([`Pacer::Kernel`]), so an idle redraw is one wake-up of one thread; input comes from a key
//! reader thread that waits for input alone (it wakes for nothing else). In tests, input is a
//! channel of events and the timer is tokio's (paused time).
//!
//! Owns: the input channel's end. Must not touch: the console's state or drawing.

use std::io;

use ratatui::crossterm::event::Event as TermEvent;
use tokio::sync::mpsc;

pub(crate) use crate::timers::Pacer;

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

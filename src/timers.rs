//! Waits that cost one thread wake-up: a kernel timer ([`Pacer`]) and a mailbox whose
//! receiver the reactor wakes ([`Mailbox`]). tokio's own timer wheel steps a timer more than
//! 64 ms away down its levels before it fires (three wake-ups for one 5 s timer), and a task
//! woken from another runtime's thread wakes two workers of a multi-threaded runtime (the one
//! that runs it, and one more to look for other work); a descriptor the reactor reports wakes
//! the one thread that waits on it. The console's idle redraws and an idle owner's heartbeat
//! wait this way.
//!
//! Owns: [`Pacer`], [`Mailbox`], [`Post`]. Must not touch: raw system calls (`proc::sys`), what
//! the waiters do when woken.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::unix::AsyncFd;

use crate::proc::sys;

/// A one-shot timer, re-armed for each wait.
pub(crate) enum Pacer {
    /// tokio's timer (tests, on paused time): the instant it fires at, when armed.
    Tokio(Option<tokio::time::Instant>),
    /// A kernel timer the reactor watches: one wake-up when it fires, where a tokio timer a
    /// second away takes two (its timer wheel steps it down a level first) and one 5 s away
    /// three, and on a runtime of several threads wakes a worker besides.
    Kernel(AsyncFd<OwnedFd>),
}

impl Pacer {
    /// The kernel timer; needs the tokio runtime it is waited on.
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

/// Values posted from any thread, received by one task on the runtime the mailbox was made on:
/// a post rings a doorbell (`eventfd`) that runtime's reactor watches, so the receiver's thread
/// is the only one woken.
pub(crate) struct Mailbox<T> {
    queue: Arc<Mutex<VecDeque<T>>>,
    bell: AsyncFd<OwnedFd>,
}

/// The sending side of a [`Mailbox`]; any number, from any thread.
pub(crate) struct Post<T> {
    queue: Arc<Mutex<VecDeque<T>>>,
    bell: OwnedFd,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<T> Mailbox<T> {
    /// An empty mailbox; needs the tokio runtime it is received on (its reactor watches it).
    pub(crate) fn new() -> io::Result<Self> {
        Ok(Mailbox {
            queue: Arc::new(Mutex::new(VecDeque::new())),
            bell: sys::async_readable(sys::doorbell()?)?,
        })
    }

    /// A sender into this mailbox.
    pub(crate) fn post(&self) -> io::Result<Post<T>> {
        Ok(Post {
            queue: Arc::clone(&self.queue),
            bell: self.bell.get_ref().try_clone()?,
        })
    }

    /// The oldest value posted and not yet received, waiting for one. Cancel-safe: a value is
    /// taken from the queue only when it is returned.
    pub(crate) async fn recv(&self) -> io::Result<T> {
        loop {
            if let Some(v) = lock(&self.queue).pop_front() {
                return Ok(v);
            }
            let mut ready = self.bell.readable().await?;
            // Rings already taken leave the descriptor marked ready with nothing to read:
            // `try_io` clears the mark on `WouldBlock`, and the queue is looked at again.
            let _ = ready.try_io(|fd| match sys::take_rings(fd.get_ref().as_fd()) {
                Ok(true) => Ok(()),
                Ok(false) => Err(io::ErrorKind::WouldBlock.into()),
                Err(e) => Err(e),
            });
        }
    }
}

impl<T> Post<T> {
    /// Post `v` and ring the receiver's doorbell.
    pub(crate) fn send(&self, v: T) -> io::Result<()> {
        lock(&self.queue).push_back(v);
        sys::ring(self.bell.as_fd())
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

    /// Values posted from other threads arrive in order, each once, also when several came
    /// with one ring read.
    #[tokio::test]
    async fn a_mailbox_receives_what_other_threads_post_in_order() {
        let mb = Mailbox::<u32>::new().unwrap();
        let post = mb.post().unwrap();
        let t = std::thread::spawn(move || {
            for i in 0..3 {
                post.send(i).unwrap();
            }
        });
        for i in 0..3 {
            assert_eq!(mb.recv().await.unwrap(), i);
        }
        t.join().unwrap();
        // A value posted after the queue emptied wakes the receiver again, and is the next
        // one received: nothing was received twice.
        let post = mb.post().unwrap();
        std::thread::spawn(move || post.send(7).unwrap());
        assert_eq!(mb.recv().await.unwrap(), 7);
    }
}

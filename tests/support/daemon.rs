//! A `cronsole run` (or any child) started in the background for a test, its stderr read line by
//! line on a thread so the test can wait for a line (bounded), signal it, and have it killed when
//! the test ends — also when it panics.
//!
//! Owns: the child and its stderr reader. Must not touch: what the test asserts.
#![allow(unsafe_code)] // signals, forks and polls real processes through libc

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running child whose stderr lines arrive on a channel; killed and reaped on drop.
pub struct Daemon {
    /// The process (tests wait on it after a SIGTERM).
    pub child: Child,
    lines: mpsc::Receiver<String>,
}

impl Daemon {
    /// Start `cmd` with stdin and stdout on `/dev/null` and stderr read line by line.
    pub fn spawn(cmd: &mut Command) -> Daemon {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => panic!("starting {cmd:?}: {e}"),
        };
        let (tx, rx) = mpsc::channel();
        if let Some(err) = child.stderr.take() {
            std::thread::spawn(move || {
                for l in BufReader::new(err).lines().map_while(Result::ok) {
                    if tx.send(l).is_err() {
                        break;
                    }
                }
            });
        }
        Daemon { child, lines: rx }
    }

    /// Wait (up to 20 s) for a stderr line containing `needle`; panics with the lines seen.
    pub fn wait_line(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.contains(needle) => return l,
                Ok(l) => seen.push(l),
                Err(e) => panic!("no stderr line with {needle:?} ({e}); saw {seen:#?}"),
            }
        }
    }

    /// The `HOST:PORT` of its `--metrics-addr` endpoint, from the line it prints at start
    /// (waited for as [`Daemon::wait_line`] does).
    pub fn metrics_addr(&self) -> String {
        let line = self.wait_line("metrics at http://");
        match line
            .split("http://")
            .nth(1)
            .and_then(|r| r.split('/').next())
        {
            Some(a) => a.to_string(),
            None => panic!("no address in {line:?}"),
        }
    }

    /// SIGTERM, then wait (up to 30 s) for the child to exit; its exit code.
    pub fn stop(mut self) -> Option<i32> {
        self.signal(libc::SIGTERM);
        let exited = super::wait::poll_until(Duration::from_secs(30), || {
            !matches!(self.child.try_wait(), Ok(None))
        });
        assert!(exited, "the child did not exit within 30 s of a SIGTERM");
        self.child.wait().ok().and_then(|s| s.code())
    }

    /// Send signal `sig` to the child.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid; no memory is touched.
        let r = unsafe { libc::kill(self.child.id() as i32, sig) };
        assert_eq!(r, 0, "kill failed");
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

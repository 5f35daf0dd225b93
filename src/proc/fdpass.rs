//! What travels between an owner, its zygote and a run's supervisor: the run request (one
//! SEQPACKET message of NUL-terminated fields with the run's descriptors attached), and the
//! status words a supervisor writes on the run's control socket (its pid, then the exit code).
//!
//! Owns: the wire format of both and the sending and receiving of descriptors with a message.
//! Must not touch: what the receiver does with a request (the zygote and the supervisor).

use std::os::fd::{OwnedFd, RawFd};
use std::time::Duration;

use super::sys;

/// Largest request the zygote accepts (a command line and its environment changes); a larger
/// one is started through the `__supervise` exec instead.
pub(crate) const MAX_REQUEST: usize = 64 * 1024;
const MAGIC: &[u8] = b"cronsole-run/1";

/// What one run's supervisor starts, as the owner sends it to its zygote: one SEQPACKET message
/// of NUL-terminated fields with three descriptors attached — the run's control socket, and the
/// write ends of its stdout and stderr pipes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Dead-man switch (`--stall-ms`).
    pub stall: Option<Duration>,
    /// Working directory; `None`: the zygote's (the owner's at the zygote's start).
    pub workdir: Option<std::path::PathBuf>,
    /// Variables removed from the command's environment.
    pub scrub: Vec<std::ffi::OsString>,
    /// Variables added.
    pub extra: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    /// Program and arguments (`/bin/sh -c CMD`, or a plain command's words).
    pub argv: Vec<std::ffi::OsString>,
}

impl Request {
    /// The message bytes; `None` when a field holds a NUL byte (no program could receive it)
    /// or the whole exceeds [`MAX_REQUEST`].
    pub fn encode(&self) -> Option<Vec<u8>> {
        use std::os::unix::ffi::OsStrExt;
        let mut out = Vec::with_capacity(256);
        let mut field = |b: &[u8]| -> Option<()> {
            if b.contains(&0) {
                return None;
            }
            out.extend_from_slice(b);
            out.push(0);
            Some(())
        };
        field(MAGIC)?;
        let stall = self.stall.map_or(0, |s| s.as_millis().max(1));
        field(stall.to_string().as_bytes())?;
        field(
            self.workdir
                .as_ref()
                .map_or(&[][..], |d| d.as_os_str().as_bytes()),
        )?;
        field(self.scrub.len().to_string().as_bytes())?;
        for v in &self.scrub {
            field(v.as_bytes())?;
        }
        field(self.extra.len().to_string().as_bytes())?;
        for (k, v) in &self.extra {
            field(k.as_bytes())?;
            field(v.as_bytes())?;
        }
        if self.argv.is_empty() {
            return None;
        }
        for a in &self.argv {
            field(a.as_bytes())?;
        }
        (out.len() <= MAX_REQUEST).then_some(out)
    }

    /// Parse [`Request::encode`]'s bytes.
    pub(crate) fn decode(b: &[u8]) -> Result<Request, String> {
        use std::os::unix::ffi::OsStrExt;
        let body = b.strip_suffix(&[0]).ok_or("request not NUL-terminated")?;
        let mut f = body.split(|c| *c == 0);
        let os = |x: &[u8]| std::ffi::OsStr::from_bytes(x).to_os_string();
        let mut next = |what: &str| f.next().ok_or(format!("request: missing {what}"));
        if next("magic")? != MAGIC {
            return Err("request: unknown format".into());
        }
        let num = |x: &[u8], what: &str| -> Result<u64, String> {
            std::str::from_utf8(x)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or(format!("request: bad {what}"))
        };
        let stall = num(next("stall")?, "stall")?;
        let workdir = next("workdir")?;
        let n_scrub = num(next("scrub count")?, "scrub count")?;
        let mut scrub = Vec::new();
        for _ in 0..n_scrub {
            scrub.push(os(next("scrub")?));
        }
        let n_extra = num(next("extra count")?, "extra count")?;
        let mut extra = Vec::new();
        for _ in 0..n_extra {
            let k = os(next("extra name")?);
            extra.push((k, os(next("extra value")?)));
        }
        let argv: Vec<_> = f.map(os).collect();
        if argv.is_empty() {
            return Err("request: nothing to run".into());
        }
        Ok(Request {
            stall: (stall > 0).then(|| Duration::from_millis(stall)),
            workdir: (!workdir.is_empty()).then(|| os(workdir).into()),
            scrub,
            extra,
            argv,
        })
    }
}

/// Send `data` with `fds` attached as one message on the SEQPACKET socket `sock`, without
/// blocking (`WouldBlock` when the zygote is behind) and without SIGPIPE (`BrokenPipe` when it
/// is gone).
pub fn send_with_fds(
    sock: std::os::fd::BorrowedFd<'_>,
    data: &[u8],
    fds: &[std::os::fd::BorrowedFd<'_>],
) -> std::io::Result<()> {
    let n = sys::send_fds(sock, data, fds)?;
    if n != data.len() {
        return Err(std::io::Error::other("request sent in part"));
    }
    Ok(())
}

/// Receive one message into `buf` with the descriptors attached (close-on-exec). `Ok(None)`
/// at end of file; a truncated message is an error (its descriptors are closed).
pub(super) fn recv_with_fds(
    sock: RawFd,
    buf: &mut [u8],
) -> std::io::Result<Option<(usize, Vec<OwnedFd>)>> {
    const MAX_FDS: usize = 8;
    let (n, fds, cut) = sys::recv_fds(sock, buf, MAX_FDS)?;
    if cut {
        return Err(std::io::Error::other("request truncated"));
    }
    if n == 0 && fds.is_empty() {
        return Ok(None);
    }
    Ok(Some((n, fds)))
}

/// Write all of `b` to `fd`, ignoring failures (the reader may be gone: nothing to tell).
pub(super) fn write_all_fd(fd: RawFd, mut b: &[u8]) {
    while !b.is_empty() {
        match sys::write(fd, b) {
            Ok(n) => b = &b[n..],
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// What a run's supervisor writes on its control socket: its pid at start, and at the end the
/// exit code, each 4 bytes little-endian. The owner reads to end of file.
pub(crate) fn parse_status(b: &[u8]) -> (Option<i32>, Option<i32>) {
    let word = |r: std::ops::Range<usize>| {
        b.get(r)
            .and_then(|w| <[u8; 4]>::try_from(w).ok())
            .map(i32::from_le_bytes)
    };
    (word(0..4).filter(|p| *p > 1), word(4..8))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proc::supervisor::SPAWN_FAILED;

    #[test]
    fn requests_round_trip_and_bad_ones_are_refused() {
        let r = Request {
            stall: Some(Duration::from_millis(1500)),
            workdir: Some("/tmp/x y".into()),
            scrub: vec!["OPENAI_API_KEY".into(), "K2".into()],
            extra: vec![("CRONSOLE_PARENT_JOB".into(), "a b=c".into())],
            argv: vec!["/bin/sh".into(), "-c".into(), "echo 'é' | cat".into()],
        };
        let b = r.encode().unwrap();
        assert_eq!(Request::decode(&b).unwrap(), r);
        let bare = Request {
            stall: None,
            workdir: None,
            scrub: vec![],
            extra: vec![],
            argv: vec!["true".into()],
        };
        assert_eq!(Request::decode(&bare.encode().unwrap()).unwrap(), bare);
        // Nothing a program cannot receive, nothing empty, nothing oversized.
        let nul = Request {
            argv: vec!["a\0b".into()],
            ..bare.clone()
        };
        assert_eq!(nul.encode(), None);
        assert_eq!(
            Request {
                argv: vec![],
                ..bare.clone()
            }
            .encode(),
            None
        );
        let huge = Request {
            argv: vec!["x".repeat(MAX_REQUEST).into()],
            ..bare.clone()
        };
        assert_eq!(huge.encode(), None);
        for bad in [
            &b""[..],
            b"x",
            b"cronsole-run/1\0",
            b"other/1\x000\0\x000\x000\0true\0",
            b"cronsole-run/1\0zz\0\x000\x000\0true\0",
            b"cronsole-run/1\x000\0\x005\0a\0",
            b"cronsole-run/1\x000\0\x000\x000\0",
        ] {
            assert!(Request::decode(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_status_words_are_read_only_when_whole() {
        let mut b = 4242i32.to_le_bytes().to_vec();
        assert_eq!(parse_status(&b), (Some(4242), None));
        b.extend_from_slice(&7i32.to_le_bytes());
        assert_eq!(parse_status(&b), (Some(4242), Some(7)));
        assert_eq!(parse_status(&b[..6]), (Some(4242), None));
        assert_eq!(parse_status(&[]), (None, None));
        // A refused request carries pid 0: never a pid to signal.
        let mut r = 0i32.to_le_bytes().to_vec();
        r.extend_from_slice(&SPAWN_FAILED.to_le_bytes());
        assert_eq!(parse_status(&r), (None, Some(SPAWN_FAILED)));
    }

    #[test]
    fn descriptors_travel_with_a_request() {
        use std::io::{Read, Write};
        use std::os::fd::AsFd;
        let (a, b) = std::os::unix::net::UnixDatagram::pair().unwrap();
        let (mut pr, pw) = std::io::pipe().unwrap();
        send_with_fds(a.as_fd(), b"hello", &[pw.as_fd()]).unwrap();
        drop(pw);
        let mut buf = [0u8; 64];
        use std::os::fd::AsRawFd;
        let (n, fds) = recv_with_fds(b.as_raw_fd(), &mut buf).unwrap().unwrap();
        assert_eq!(&buf[..n], b"hello");
        assert_eq!(fds.len(), 1);
        let mut w = std::fs::File::from(fds.into_iter().next().unwrap());
        w.write_all(b"through").unwrap();
        drop(w);
        let mut got = String::new();
        pr.read_to_string(&mut got).unwrap();
        assert_eq!(got, "through");
        drop(a);
    }
}

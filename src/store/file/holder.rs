//! Who holds the store lock, for a process whose wait for it ran out: a running `cronsole
//! apply` writing a million jobs is not a stopped owner, and the message says which it is.
//!
//! Owns: the note a long holder (an `apply`) writes at the start of the lock file (pid,
//! command, since when) and removes when it is done, and reading who holds the lock — from the
//! kernel's table of `flock`s, the holder's process state and, when the holder noted itself,
//! since when — into the words of [`BackendError::LockTimeout`]. Must not touch: anything the
//! store's data depends on — the note is advisory; a short operation writes none (a read-only
//! command changes no byte of the store), and a lock file without one reads as "no note",
//! never as damage.
//!
//! The note is a fixed-size block written with one positioned write, and the file is emptied
//! again when the holder is done; it carries a CRC-32 of its body, so a reader that catches a
//! write half-done (a positioned write is not atomic against a concurrent read) reads again
//! instead of trusting it.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::store::io::IoFile;
use crate::store::{BackendError, StoreError};

/// The record's size on disk: one line, padded with spaces.
const RECORD_BYTES: usize = 256;
const MAGIC: &str = "cronsole-lock-holder ";
/// The longest command text kept (the rest is cut).
const COMMAND_BYTES: usize = 120;

/// This process as the record names it: the program's file name and its subcommand.
fn command() -> &'static str {
    static CMD: OnceLock<String> = OnceLock::new();
    CMD.get_or_init(|| {
        let mut args = std::env::args_os();
        let prog = args
            .next()
            .map(|a| {
                std::path::Path::new(&a)
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or_default()
            })
            .unwrap_or_default();
        let sub = args
            .map(|a| a.to_string_lossy().into_owned())
            .find(|a| !a.starts_with('-'));
        let text = match sub {
            Some(s) => format!("{prog} {s}"),
            None => prog,
        };
        let mut clean: String = text.chars().filter(|c| !c.is_control()).collect();
        while clean.len() > COMMAND_BYTES {
            clean.pop();
        }
        clean
    })
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The record block for `pid` running `cmd`, holding since `since_ms`.
fn encode(pid: u32, since_ms: u64, cmd: &str) -> Vec<u8> {
    let body = format!("{pid} {since_ms} {cmd}");
    let mut out = format!("{MAGIC}{:08x} {body}", crc32fast::hash(body.as_bytes())).into_bytes();
    out.truncate(RECORD_BYTES - 1);
    out.resize(RECORD_BYTES - 1, b' ');
    out.push(b'\n');
    out
}

/// A record read back.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    pid: u32,
    since_ms: u64,
    command: String,
}

fn decode(block: &[u8]) -> Option<Record> {
    let text = std::str::from_utf8(block).ok()?.trim_end();
    let rest = text.strip_prefix(MAGIC)?;
    let (crc, body) = rest.split_once(' ')?;
    if u32::from_str_radix(crc, 16).ok()? != crc32fast::hash(body.as_bytes()) {
        return None;
    }
    let mut parts = body.splitn(3, ' ');
    Some(Record {
        pid: parts.next()?.parse().ok()?,
        since_ms: parts.next()?.parse().ok()?,
        command: parts.next().unwrap_or_default().to_string(),
    })
}

/// This process's note in the lock file while it holds the lock for a long operation (an
/// `apply`, which at hundreds of thousands of changed jobs holds it for minutes): written when
/// made, removed when dropped — so declare it after the lock's guard, to go first. Advisory: a
/// failure to write or remove it is logged, never the operation's.
pub(crate) struct Note<'a>(&'a dyn IoFile);

impl<'a> Note<'a> {
    /// Note this process as the holder of the lock it has just taken on `lock`.
    pub(crate) fn write(lock: &'a dyn IoFile) -> Note<'a> {
        let block = encode(std::process::id(), unix_ms(SystemTime::now()), command());
        if let Err(e) = lock.note(Some(&block)) {
            tracing::debug!("could not note this process as the store lock's holder: {e}");
        }
        Note(lock)
    }
}

impl Drop for Note<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.0.note(None) {
            tracing::debug!("could not remove this process's note from the store lock: {e}");
        }
    }
}

fn read(lock: &dyn IoFile) -> Option<Record> {
    let mut block = vec![0u8; RECORD_BYTES];
    // A read that catches a holder midway through its write fails the CRC: read again.
    (0..3).find_map(|_| {
        lock.read_exact_at(&mut block, 0).ok()?;
        decode(&block)
    })
}

/// The process the kernel says holds a `flock` on inode `ino` (`/proc/locks`; `None` where
/// there is no such table or no such lock).
fn kernel_holder(ino: u64) -> Option<u32> {
    let table = std::fs::read_to_string("/proc/locks").ok()?;
    table.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        // "1: FLOCK  ADVISORY  WRITE 812 fd:01:1234 0 EOF"; a waiter's line has "->".
        if f.len() < 6 || f[1] != "FLOCK" {
            return None;
        }
        let file_ino = f[5].rsplit(':').next()?.parse::<u64>().ok()?;
        (file_ino == ino).then(|| f[4].parse().ok()).flatten()
    })
}

/// The kernel's state letter for `pid` (`/proc/PID/stat`), `None` when it is gone or unknown.
fn state_of(pid: u32) -> Option<char> {
    let st = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    st.rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next())
}

/// A process's command from `/proc/PID/cmdline`, for a holder that left no record.
fn cmdline_of(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let mut args = raw
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned());
    let prog = args.next()?;
    let prog = std::path::Path::new(&prog)
        .file_name()
        .map_or(prog.clone(), |f| f.to_string_lossy().into_owned());
    Some(match args.find(|a| !a.starts_with('-')) {
        Some(sub) => format!("{prog} {sub}"),
        None => prog,
    })
}

fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 10.0 {
        format!("{s:.0}s")
    } else {
        format!("{s:.1}s")
    }
}

/// Who holds the lock on `lock`, in words for [`BackendError::LockTimeout`]: the command, its
/// pid, for how long and whether it is running, stopped or gone.
pub(crate) fn describe(lock: &dyn IoFile) -> String {
    let record = read(lock);
    let locker = lock.metadata().ok().and_then(|m| kernel_holder(m.ino));
    // The note is the holder's own when the kernel agrees (or cannot say); a holder that
    // wrote none (a short operation, an older cronsole, an outside `flock`) is named from the
    // kernel's table.
    let (pid, command, since_ms) = match (record, locker) {
        (Some(r), None) => (r.pid, r.command, Some(r.since_ms)),
        (Some(r), Some(k)) if k == r.pid => (r.pid, r.command, Some(r.since_ms)),
        (_, Some(k)) => (k, cmdline_of(k).unwrap_or_else(|| "a process".into()), None),
        (None, None) => {
            return "another process, which cannot be named (no note of itself, no table of locks to read)".into();
        }
    };
    let held = since_ms
        .map(|ms| {
            let now = unix_ms(SystemTime::now());
            format!(
                " for {}",
                seconds(Duration::from_millis(now.saturating_sub(ms)))
            )
        })
        .unwrap_or_default();
    let state = match state_of(pid) {
        Some('T' | 't') => "which is stopped (SIGSTOP or a debugger): it holds the lock until it is continued or killed".to_string(),
        Some('Z' | 'X') | None => "which has exited (a process it started may still hold the lock)".to_string(),
        Some(_) => "a running process, not a stopped one: a long operation (a large apply, a compaction) holds the lock until it ends".to_string(),
    };
    format!("`{command}` (pid {pid}){held}, {state}")
}

/// The error for a wait on `lock` (the file `file`) that ran out after `waited`.
pub(crate) fn timeout(file: PathBuf, lock: &dyn IoFile, waited: Duration) -> StoreError {
    StoreError::Backend(BackendError::LockTimeout {
        file,
        waited,
        holder: describe(lock),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_and_a_torn_one_does_not() {
        let block = encode(812, 1_765_000_000_123, "cronsole apply");
        assert_eq!(block.len(), RECORD_BYTES);
        assert_eq!(
            decode(&block),
            Some(Record {
                pid: 812,
                since_ms: 1_765_000_000_123,
                command: "cronsole apply".into()
            })
        );
        // Half of a newer record over an older one: the CRC refuses the mix.
        let newer = encode(9_913, 1_765_000_999_999, "cronsole run");
        let mut torn = newer[..40].to_vec();
        torn.extend_from_slice(&block[40..]);
        assert_eq!(decode(&torn), None);
        assert_eq!(decode(&[0u8; RECORD_BYTES]), None);
    }
}

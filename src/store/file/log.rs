//! Append-only logs and the small file helpers every store file shares: one append path (torn
//! tail cut, shrink detected, one write + fdatasync), atomic replace, line arithmetic, the typed
//! corruption errors and header encoding.
//!
//! Must not touch: what the lines mean (jobs, history) or the cache.

use crate::store::{BackendError, OpenError};
use std::path::Path;

use serde::Serialize;

use super::layout::BLOCK;
use crate::store::filefmt;
use crate::store::io::{IoFile, Meta, OpenMode, StoreIo};
use crate::store::{StoreError, StoreResult};

/// One append-only log file (the jobs journal, history): its open handle, identity and the
/// end of its last complete line. Both logs share this one append path.
#[derive(Default)]
pub(super) struct AppendLog {
    pub(super) file: Option<Box<dyn IoFile>>,
    pub(super) ino: u64,
    /// End of the last complete line: bytes after it are a torn, never-acknowledged write.
    pub(super) len: u64,
    /// A failed append's cut back to `len` is not known durable (its truncate or the fsync
    /// after it failed too): a power loss may bring the failed bytes back. Cleared by the next
    /// successful append or [`AppendLog::sync_cut`].
    pub(super) cut_unsynced: bool,
}

impl AppendLog {
    pub(super) fn file(&self, path: &Path) -> StoreResult<&dyn IoFile> {
        self.file.as_deref().ok_or_else(|| {
            StoreError::Backend(BackendError::NotOpen {
                path: path.to_path_buf(),
            })
        })
    }

    /// Append whole lines with one write + fdatasync. A torn tail a crashed writer left after
    /// `len` is cut first (and logged); a file shorter than `len` was truncated behind our
    /// back: corruption, nothing written.
    pub(super) fn append(&mut self, path: &Path, bytes: &[u8]) -> StoreResult<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let f = self.ready(path)?;
        if let Err(e) = f.write_all(bytes).and_then(|_| f.sync_data()) {
            self.undo(path);
            return Err(StoreError::io(path, e));
        }
        self.len += bytes.len() as u64;
        // The fdatasync made the file durable as it stands, a pending cut included.
        self.cut_unsynced = false;
        Ok(())
    }

    /// Append whole lines as `fill` produces them, a piece of about [`SPILL`] bytes at a time
    /// (`fill` is handed an empty buffer, fills it and says whether more follows), with one
    /// fdatasync at the end: a batch of 500 000 records is never held
    /// encoded whole. A store's usual appends are one piece, so one write, as [`Self::append`]'s.
    /// Any failure (of `fill`, a write or the fdatasync) cuts back what was written, as
    /// `append` does.
    pub(super) fn append_streamed(
        &mut self,
        path: &Path,
        fill: &mut dyn FnMut(&mut Vec<u8>) -> StoreResult<bool>,
    ) -> StoreResult<()> {
        let mut buf = Vec::new();
        let mut more = fill(&mut buf)?;
        if buf.is_empty() && !more {
            return Ok(());
        }
        self.ready(path)?;
        let mut written = 0u64;
        let r = loop {
            let f = match self.file(path) {
                Ok(f) => f,
                Err(e) => break Err(e),
            };
            if let Err(e) = f.write_all(&buf) {
                break Err(StoreError::io(path, e));
            }
            written += buf.len() as u64;
            if !more {
                break f.sync_data().map_err(io_err(path));
            }
            buf.clear();
            match fill(&mut buf) {
                Ok(m) => more = m,
                Err(e) => break Err(e),
            }
        };
        if let Err(e) = r {
            self.undo(path);
            return Err(e);
        }
        self.len += written;
        self.cut_unsynced = false;
        Ok(())
    }

    /// The file, checked before an append: a torn tail after `len` is cut, a shrunk file
    /// refused.
    fn ready(&self, path: &Path) -> StoreResult<&dyn IoFile> {
        let f = self.file(path)?;
        let actual = f.metadata().map_err(io_err(path))?.len;
        if actual < self.len {
            return Err(corrupt(
                path,
                0,
                0,
                format!(
                    "file shrank from {} to {actual} bytes while open (truncated by something else)",
                    self.len
                ),
            ));
        }
        if actual > self.len {
            tracing::warn!(
                file = %path.display(),
                "cutting a torn final line ({} bytes, never acknowledged)",
                actual - self.len
            );
            f.set_len(self.len).map_err(io_err(path))?;
        }
        Ok(f)
    }

    /// After a failed append: fsyncgate — after a failed write or fsync, what was written
    /// since `len` may never reach the disk (Linux marks the failed pages clean and returns
    /// success to the next fsync), yet it stays readable in the page cache. Never leave it
    /// there for a later append to follow — a power loss would leave a hole mid-file. We still
    /// hold the lock, so nobody has read those bytes: cut back to `len` and sync the cut. If
    /// even that fails (the process is dying), the next writer cuts the tail it sees as torn,
    /// or adopts its complete lines as a dead process's (see the module doc). An operation
    /// that relies on the cut before this log's next append (a claim's retry writing history
    /// rows first) makes it durable first ([`Self::sync_cut`]).
    fn undo(&mut self, path: &Path) {
        let cut = self.file(path).and_then(|f| {
            f.set_len(self.len)
                .and_then(|_| f.sync_data())
                .map_err(io_err(path))
        });
        if let Err(cut) = cut {
            tracing::warn!(
                file = %path.display(),
                "after a failed append, cutting its unsynced bytes failed too: {cut}"
            );
            self.cut_unsynced = true;
        }
    }

    /// Make a failed append's cut durable (truncate to `len` again, fdatasync) when it is not
    /// known to be: nothing may be written on the strength of the cut before it is (seed
    /// 29376: a claim's journal fsync failed and so did the cut's; its retry wrote a `missed`
    /// row for the slot the failed claim had leased, and a power loss kept the failed lease
    /// line: the slot was in two rows).
    pub(super) fn sync_cut(&mut self, path: &Path) -> StoreResult<()> {
        if !self.cut_unsynced {
            return Ok(());
        }
        let f = self.file(path)?;
        f.set_len(self.len)
            .and_then(|_| f.sync_data())
            .map_err(io_err(path))?;
        self.cut_unsynced = false;
        Ok(())
    }
}

pub(super) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |e| StoreError::io(path, e)
}

/// Write `bytes` to `path` atomically: temp + fsync + rename + fsync dir.
pub(super) fn write_atomic(
    io: &dyn StoreIo,
    dir: &Path,
    path: &Path,
    bytes: &[u8],
) -> StoreResult<()> {
    let mut f = AtomicFile::create(io, dir, path)?;
    f.write(bytes)?;
    f.commit().map(|_| ())
}

/// A file replaced atomically whose content is produced piece by piece (the snapshot of a
/// million jobs is hundreds of MB: it is written in `SPILL`-byte pieces, never held whole).
/// Same steps as [`write_atomic`]: temp file, fsync, rename, fsync dir; dropped uncommitted,
/// the temp file is removed.
pub(super) struct AtomicFile<'a> {
    io: &'a dyn StoreIo,
    dir: &'a Path,
    path: &'a Path,
    tmp: std::path::PathBuf,
    f: Option<Box<dyn IoFile>>,
    /// Content not written yet: [`AtomicFile::spill`] writes it once it reaches `SPILL` bytes.
    pub(super) buf: Vec<u8>,
    written: u64,
}

/// Bytes an [`AtomicFile`] buffers before writing them.
pub(super) const SPILL: usize = 4 * 1024 * 1024;

impl<'a> AtomicFile<'a> {
    pub(super) fn create(io: &'a dyn StoreIo, dir: &'a Path, path: &'a Path) -> StoreResult<Self> {
        // A temp name of our own: two processes must never rename each other's temp file away.
        let tmp = path.with_extension(format!(
            "tmp.{}.{}",
            std::process::id(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        ));
        let f = io
            .open(&tmp, OpenMode::CreateTruncate)
            .map_err(io_err(&tmp))?;
        Ok(AtomicFile {
            io,
            dir,
            path,
            tmp,
            f: Some(f),
            buf: Vec::new(),
            written: 0,
        })
    }

    /// Write `bytes` now (after whatever was written before; `buf` is not touched).
    pub(super) fn write(&mut self, bytes: &[u8]) -> StoreResult<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let f = self.f.as_deref().ok_or_else(|| {
            StoreError::Backend(BackendError::NotOpen {
                path: self.tmp.clone(),
            })
        })?;
        f.write_all(bytes).map_err(io_err(&self.tmp))?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// Bytes produced so far (written + buffered): the offset of the next byte in the file.
    pub(super) fn pos(&self) -> u64 {
        self.written + self.buf.len() as u64
    }

    /// Write the buffered content once it reached `SPILL` bytes.
    pub(super) fn spill(&mut self) -> StoreResult<()> {
        if self.buf.len() >= SPILL {
            let buf = std::mem::take(&mut self.buf);
            self.write(&buf)?;
            self.buf = buf;
            self.buf.clear();
        }
        Ok(())
    }

    /// Write what is buffered, fsync, rename over `path`, fsync the directory. Returns the
    /// file's length.
    pub(super) fn commit(mut self) -> StoreResult<u64> {
        self.write_and_sync()?;
        if let Err(e) = self.io.rename(&self.tmp, self.path) {
            return Err(StoreError::io(self.path, e));
        }
        // Renamed: nothing left for `drop` to remove.
        self.tmp = std::path::PathBuf::new();
        self.io.sync_dir(self.dir).map_err(io_err(self.dir))?;
        Ok(self.written)
    }

    /// Write what is buffered and fsync, but leave the temp file where it is: returns its path
    /// (the caller renames or removes it) and the file's length.
    pub(super) fn keep(mut self) -> StoreResult<(std::path::PathBuf, u64)> {
        self.write_and_sync()?;
        Ok((std::mem::take(&mut self.tmp), self.written))
    }

    fn write_and_sync(&mut self) -> StoreResult<()> {
        let buf = std::mem::take(&mut self.buf);
        self.write(&buf)?;
        drop(buf);
        match self.f.take() {
            Some(f) => f.sync_all().map_err(io_err(&self.tmp)),
            None => Err(StoreError::Backend(BackendError::NotOpen {
                path: self.tmp.clone(),
            })),
        }
    }
}

impl Drop for AtomicFile<'_> {
    fn drop(&mut self) {
        // Not committed (a write, fsync or rename failed, e.g. a full disk): do not leave a
        // half-written temp file behind.
        if !self.tmp.as_os_str().is_empty() {
            drop(self.f.take());
            let _ = self.io.remove_file(&self.tmp);
        }
    }
}

pub(super) fn corrupt(path: &Path, line: u64, column: u64, what: impl Into<String>) -> StoreError {
    StoreError::Open(OpenError::Corrupt {
        file: path.to_path_buf(),
        line,
        column,
        what: what.into(),
    })
}

pub(super) fn json_err(path: &Path, line: u64, e: &serde_json::Error) -> StoreError {
    corrupt(path, line, e.column() as u64, e.to_string())
}

/// End of the last complete line of the first `len` bytes of `f` (0 if none).
pub(super) fn complete_len(path: &Path, f: &dyn IoFile, len: u64) -> StoreResult<u64> {
    let mut end = len;
    while end > 0 {
        let start = end.saturating_sub(BLOCK);
        let mut buf = vec![0u8; (end - start) as usize];
        read_at(f, path, start, &mut buf)?;
        if let Some(i) = buf.iter().rposition(|b| *b == b'\n') {
            return Ok(start + i as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

pub(super) fn read_at(f: &dyn IoFile, path: &Path, off: u64, buf: &mut [u8]) -> StoreResult<()> {
    f.read_exact_at(buf, off).map_err(io_err(path))
}

/// Newlines in `[0, off)` of `f` (the line number of the line starting at `off`, minus one).
pub(super) fn count_lines_before(f: &dyn IoFile, path: &Path, off: u64) -> StoreResult<u64> {
    let mut pos = 0u64;
    let mut n = 0u64;
    let mut buf = vec![0u8; BLOCK as usize];
    while pos < off {
        let want = (off - pos).min(BLOCK) as usize;
        read_at(f, path, pos, &mut buf[..want])?;
        n += buf[..want].iter().filter(|b| **b == b'\n').count() as u64;
        pos += want as u64;
    }
    Ok(n)
}

pub(super) fn stat(io: &dyn StoreIo, path: &Path) -> StoreResult<Option<Meta>> {
    crate::store::io::stat_opt(io, path).map_err(io_err(path))
}

/// A required file that is not there: corruption, never a reset to empty.
pub(super) fn missing(path: &Path, why: &str) -> StoreError {
    corrupt(path, 0, 0, format!("required store file is missing: {why}"))
}

/// Check a header's store id against the store's.
pub(super) fn check_id(path: &Path, found: Option<&str>, id: &str) -> StoreResult<()> {
    match found {
        Some(f) if f == id => Ok(()),
        Some(f) => Err(corrupt(
            path,
            1,
            1,
            format!(
                "file belongs to another store (store id {f}, this store is {id}); was it copied in?"
            ),
        )),
        None => Err(corrupt(path, 1, 1, "header carries no store id")),
    }
}

pub(super) fn encode_line<T: Serialize>(
    out: &mut Vec<u8>,
    what: &'static str,
    v: &T,
) -> StoreResult<()> {
    serde_json::to_writer(&mut *out, v).map_err(StoreError::encode(what))?;
    out.push(b'\n');
    Ok(())
}

/// One job line (snapshot or journal) with its checksum (see [`filefmt::encode_checked`]).
pub(super) fn encode_checked_line<T: Serialize>(
    out: &mut Vec<u8>,
    what: &'static str,
    v: &T,
) -> StoreResult<()> {
    filefmt::encode_checked(out, v).map_err(StoreError::encode(what))
}

pub(super) fn header_line(
    kind: &str,
    generation: u64,
    id: &str,
    absorbed: Option<filefmt::Absorbed>,
) -> StoreResult<Vec<u8>> {
    folded_header_line(kind, generation, id, absorbed, None)
}

/// [`header_line`] of a snapshot that a compaction folded from the files `folded` names.
pub(super) fn folded_header_line(
    kind: &str,
    generation: u64,
    id: &str,
    absorbed: Option<filefmt::Absorbed>,
    folded: Option<filefmt::Folded>,
) -> StoreResult<Vec<u8>> {
    let mut buf = Vec::new();
    encode_line(
        &mut buf,
        "store file header",
        &filefmt::Header {
            cronsole: kind.into(),
            generation,
            store: Some(id.to_string()),
            absorbed,
            folded,
        },
    )?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::AppendLog;
    use crate::store::io::{OpenMode, RealIo, StoreIo};
    use crate::store::{BackendError, StoreError};
    use crate::testkit::tmp::TempDir;

    fn text(p: &std::path::Path) -> String {
        String::from_utf8(std::fs::read(p).unwrap()).unwrap()
    }

    /// A streamed append writes each piece as `fill` makes it and one fdatasync; a failure
    /// after some pieces were written (here `fill`'s third call) cuts the file back to where
    /// that append began.
    #[test]
    fn a_streamed_append_is_written_in_pieces_and_cut_back_whole_on_a_failure() {
        let dir = TempDir::new("log-streamed");
        let path = dir.join("journal");
        std::fs::write(&path, b"head\n").unwrap();
        let mut log = AppendLog {
            file: Some(RealIo.open(&path, OpenMode::Append).unwrap()),
            ino: 0,
            len: 5,
            cut_unsynced: false,
        };
        let mut n = 0;
        log.append_streamed(&path, &mut |buf| {
            assert!(buf.is_empty(), "each piece starts empty");
            n += 1;
            buf.extend_from_slice(format!("line {n}\n").as_bytes());
            Ok(n < 3)
        })
        .unwrap();
        let whole = "head\nline 1\nline 2\nline 3\n";
        assert_eq!(text(&path), whole);
        assert_eq!(log.len, whole.len() as u64);
        let mut calls = 0;
        let mut seen = String::new();
        let e = log
            .append_streamed(&path, &mut |buf| {
                calls += 1;
                if calls == 3 {
                    // Two pieces are in the file by now.
                    seen = text(&path);
                    return Err(StoreError::Backend(BackendError::Invariant("stop")));
                }
                buf.extend_from_slice(b"more\n");
                Ok(true)
            })
            .unwrap_err();
        assert!(e.to_string().contains("stop"), "{e}");
        assert_eq!(seen, format!("{whole}more\nmore\n"));
        assert_eq!(text(&path), whole, "cut back to where the append began");
        assert_eq!(log.len, whole.len() as u64);
        assert!(!log.cut_unsynced);
    }
}

//! History segment files read without a handle: the header and row format of a segment, a
//! sealed segment opened and its seal checked, and a backward line reader.
//!
//! Owns: [`history_header`], [`open_sealed`], [`Backwards`] and the scan bounds the recovery
//! reads use. Must not touch: the handle's cache or the open segment's bookkeeping (that is
//! `history.rs`), job records.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::layout::{BLOCK, segment_path};
use super::log::{corrupt, encode_line, io_err, json_err, read_at};
use crate::model::{HistoryRow, Status};
use crate::store::filefmt::{self, Seal};
use crate::store::io::{IoFile, OpenMode, StoreIo};
use crate::store::{StoreError, StoreResult};

/// A history line (without its newline): checksum first, then the row.
pub(super) fn parse_history_line(
    path: &Path,
    line_no: u64,
    line: &[u8],
) -> StoreResult<HistoryRow> {
    filefmt::verify_row(line).map_err(|(col, what)| corrupt(path, line_no, col, what))?;
    serde_json::from_slice(line).map_err(|e| json_err(path, line_no, &e))
}

/// The header line of history segment `segment`.
pub(super) fn history_header(id: &str, segment: u64) -> StoreResult<Vec<u8>> {
    let mut buf = Vec::new();
    encode_line(
        &mut buf,
        "history header",
        &filefmt::HistoryHeader {
            cronsole: "history".into(),
            store: id.to_string(),
            segment: Some(segment),
        },
    )?;
    Ok(buf)
}

/// A sealed segment opened for reading, its seal read and checked against the file's length.
pub(super) struct Sealed {
    pub(super) path: PathBuf,
    pub(super) file: Box<dyn IoFile>,
    pub(super) ino: u64,
    pub(super) seal: Seal,
}

/// Open sealed segment `n` and read its seal (the last line); `None` when it is not there.
pub(super) fn open_sealed(io: &dyn StoreIo, dir: &Path, n: u64) -> StoreResult<Option<Sealed>> {
    let path = segment_path(dir, n);
    let file = match io.open(&path, OpenMode::Read) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StoreError::io(path, e)),
    };
    let m = file.metadata().map_err(io_err(&path))?;
    if m.len == 0 {
        return Err(corrupt(&path, 1, 1, "sealed history segment is empty"));
    }
    let mut want = m.len.min(4096);
    let (seal_at, line) = loop {
        let start = m.len - want;
        let mut buf = vec![0u8; want as usize];
        read_at(&*file, &path, start, &mut buf)?;
        if buf.last() != Some(&b'\n') {
            return Err(corrupt(
                &path,
                0,
                0,
                "sealed history segment does not end with its seal line (cut short?)",
            ));
        }
        let body = &buf[..buf.len() - 1];
        match body.iter().rposition(|b| *b == b'\n') {
            Some(p) => break (start + p as u64 + 1, body[p + 1..].to_vec()),
            None if start == 0 => {
                return Err(corrupt(
                    &path,
                    1,
                    1,
                    "sealed history segment has no seal line",
                ));
            }
            None => want = (want * 8).min(m.len),
        }
    };
    let seal: Seal = serde_json::from_slice(&line).map_err(|e| {
        corrupt(
            &path,
            0,
            e.column() as u64,
            format!("the last line is not a segment seal ({e}): the segment was cut or altered"),
        )
    })?;
    if seal.cronsole != "seal" || seal.segment != n || seal.bytes != seal_at {
        return Err(corrupt(
            &path,
            seal.rows + 2,
            1,
            format!(
                "seal of segment {} covering {} bytes does not match the file (segment {n}, seal at byte {seal_at})",
                seal.segment, seal.bytes
            ),
        ));
    }
    Ok(Some(Sealed {
        path,
        file,
        ino: m.ino,
        seal,
    }))
}

/// One row of the open segment as the cross-check needs it.
pub(super) struct TailRow {
    pub(super) off: u64,
    pub(super) job: String,
    pub(super) run_id: Uuid,
    pub(super) status: Status,
    pub(super) stale: bool,
}

/// A sealed row as retention weighs it: its bytes, the run it supersedes for, job, end.
pub(super) type RetainedLine = (std::ops::Range<usize>, Option<Uuid>, String, DateTime<Utc>);

/// Run ids of the rows in `[from, to)` of `f` (whole lines) that supersede an `abandoned` row.
pub(super) fn scan_supersedes(
    f: &dyn IoFile,
    path: &Path,
    from: u64,
    to: u64,
) -> StoreResult<Vec<Uuid>> {
    let mut buf = vec![0u8; to.saturating_sub(from) as usize];
    read_at(f, path, from, &mut buf)?;
    let mut out = Vec::new();
    for at in memchr::memmem::find_iter(&buf, SUPERSEDES_NEEDLE) {
        let start = buf[..at]
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |p| p + 1);
        let end = buf[at..]
            .iter()
            .position(|b| *b == b'\n')
            .map_or(buf.len(), |p| at + p);
        let line = &buf[start..end];
        if filefmt::verify_row(line).is_ok()
            && let Ok(r) = serde_json::from_slice::<HistoryRow>(line)
            && r.supersedes_abandoned
        {
            out.push(r.run_id);
        }
    }
    Ok(out)
}
/// How far back [`Locked::rows_since_records`] looks for a job whose record carries no usable
/// history mark.
pub(super) const UNMARKED_SCAN_BYTES: u64 = 4 * 1024 * 1024;
/// The most [`Locked::rows_since_records`] reads back from history's end.
pub(super) const RECORDLESS_SCAN_CAP: u64 = 64 * 1024 * 1024;
/// How much history [`Locked::rows_unaccounted`] reads to move a record's `rows_to` forward
/// when the operation writing it did not scan for the job anyway.
pub(super) const ACCOUNT_SCAN_BYTES: u64 = 64 * 1024;

pub(super) const SUPERSEDES_NEEDLE: &[u8] = b"\"supersedes_abandoned\":true";

pub(super) fn contains(hay: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(hay, needle).is_some()
}

/// Iterate one segment from a position backwards, line by line, block by block.
pub(super) struct Backwards<'a> {
    pub(super) f: &'a dyn IoFile,
    pub(super) path: &'a Path,
    /// Bytes not yet consumed are `[0, pos)`.
    pub(super) pos: u64,
    pub(super) buf: Vec<u8>,
    /// Lines ready, newest last, with their start offsets.
    pub(super) ready: Vec<(u64, Vec<u8>)>,
}

impl<'a> Backwards<'a> {
    pub(super) fn new(f: &'a dyn IoFile, path: &'a Path, len: u64) -> Self {
        Backwards {
            f,
            path,
            pos: len,
            buf: Vec::new(),
            ready: Vec::new(),
        }
    }

    pub(super) fn next_line(&mut self) -> StoreResult<Option<(u64, Vec<u8>)>> {
        loop {
            if let Some(l) = self.ready.pop() {
                return Ok(Some(l));
            }
            if self.pos == 0 {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                let line = std::mem::take(&mut self.buf);
                let body = line.strip_suffix(b"\n").unwrap_or(&line).to_vec();
                return Ok(Some((0, body)));
            }
            let start = self.pos.saturating_sub(BLOCK);
            let mut chunk = vec![0u8; (self.pos - start) as usize];
            read_at(self.f, self.path, start, &mut chunk)?;
            chunk.extend_from_slice(&self.buf);
            self.pos = start;
            // Everything after the first newline in `chunk` is complete lines.
            match chunk.iter().position(|b| *b == b'\n') {
                Some(p) if start > 0 || p < chunk.len() => {
                    let (head, tail) = chunk.split_at(p + 1);
                    let mut off = start + head.len() as u64;
                    for line in tail.split_inclusive(|b| *b == b'\n') {
                        let body = line.strip_suffix(b"\n").unwrap_or(line).to_vec();
                        self.ready.push((off, body));
                        off += line.len() as u64;
                    }
                    self.buf = head.to_vec();
                }
                _ => self.buf = chunk,
            }
        }
    }
}

pub(super) fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

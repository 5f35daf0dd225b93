//! The history half of the file store: the checksummed row log, its start-up verification,
//! appends, newest-first queries, the crash-recovery scan (`find_run_row`) and retention.
//!
//! Must not touch: job records (see [`super::jobs`]).

use std::collections::{HashMap, HashSet};
use std::path::Path;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::jobs::Mark;
use super::log::{
    AppendLog, check_id, complete_len, corrupt, count_lines_before, encode_line, io_err, json_err,
    missing, read_at, stat, write_atomic,
};
use super::{BLOCK, FileStore, HISTORY_FILE, Locked, OPEN_VERIFY_BYTES, UNACKED_RANGES};
use crate::model::HistoryRow;
use crate::store::io::{IoFile, OpenMode};
use crate::store::{HistoryQuery, StoreError, StoreResult, filefmt};

/// A history line (without its newline): checksum first, then the row.
pub(super) fn parse_history_line(
    path: &Path,
    line_no: u64,
    line: &[u8],
) -> StoreResult<HistoryRow> {
    filefmt::verify_row(line).map_err(|(col, what)| corrupt(path, line_no, col, what))?;
    serde_json::from_slice(line).map_err(|e| json_err(path, line_no, &e))
}

pub(super) fn history_header(id: &str) -> StoreResult<Vec<u8>> {
    let mut buf = Vec::new();
    encode_line(
        &mut buf,
        "history header",
        &filefmt::HistoryHeader {
            cronsole: "history".into(),
            store: id.to_string(),
        },
    )?;
    Ok(buf)
}

impl Locked<'_> {
    pub(super) fn refresh_history(&mut self) -> StoreResult<()> {
        let hpath = self.path(HISTORY_FILE);
        let Some(m) = stat(self.io(), &hpath)? else {
            return Err(missing(&hpath, "history holds every run's row"));
        };
        if self.inner.history.file.is_none() || m.ino != self.inner.history.ino {
            let f = self
                .io()
                .open(&hpath, OpenMode::Append)
                .map_err(io_err(&hpath))?;
            let fm = f.metadata().map_err(io_err(&hpath))?;
            let len = complete_len(&hpath, &*f, fm.len)?;
            if len == 0 {
                return Err(corrupt(
                    &hpath,
                    1,
                    1,
                    "history is empty: its header line is missing",
                ));
            }
            let mut head = vec![0u8; len.min(BLOCK) as usize];
            read_at(&*f, &hpath, 0, &mut head)?;
            let first = head.split(|b| *b == b'\n').next().unwrap_or(&[]);
            let h: filefmt::HistoryHeader =
                serde_json::from_slice(first).map_err(|e| json_err(&hpath, 1, &e))?;
            if h.cronsole != "history" {
                return Err(corrupt(&hpath, 1, 1, "not a history header"));
            }
            check_id(&hpath, Some(&h.store), self.id())?;
            self.inner.history = AppendLog {
                file: Some(f),
                ino: fm.ino,
                len,
            };
            self.inner.names_unsynced = true;
            if self.inner.history_compacted_len == 0 {
                self.inner.history_compacted_len = len;
            }
        } else if m.len < self.inner.history.len {
            return Err(corrupt(
                &hpath,
                0,
                0,
                format!(
                    "history shrank from {} to {} bytes (truncated by something other than cronsole)",
                    self.inner.history.len, m.len
                ),
            ));
        } else if m.len > self.inner.history.len {
            let f = self.inner.history.file(&hpath)?;
            self.inner.history.len = complete_len(&hpath, f, m.len)?;
        }
        Ok(())
    }

    /// Verify the end of history row by row (checksum and parse): the last
    /// [`OPEN_VERIFY_BYTES`], where appends go. Older rows are verified by every query that
    /// reads them, by retention compaction and by `cronsole check`.
    pub(super) fn verify_history_end(&self) -> StoreResult<()> {
        let hpath = self.path(HISTORY_FILE);
        let log = &self.inner.history;
        let f = log.file(&hpath)?;
        let start = log.len.saturating_sub(OPEN_VERIFY_BYTES);
        let mut buf = vec![0u8; (log.len - start) as usize];
        read_at(f, &hpath, start, &mut buf)?;
        // Skip to the first line that starts inside the window (line 1 is the header).
        let skip = if start == 0 {
            buf.iter()
                .position(|b| *b == b'\n')
                .map_or(buf.len(), |p| p + 1)
        } else {
            match start.checked_sub(1) {
                Some(prev) => {
                    let mut c = [0u8; 1];
                    read_at(f, &hpath, prev, &mut c)?;
                    if c[0] == b'\n' {
                        0
                    } else {
                        buf.iter()
                            .position(|b| *b == b'\n')
                            .map_or(buf.len(), |p| p + 1)
                    }
                }
                None => 0,
            }
        };
        let mut rel = skip;
        for line in buf[skip..].split_inclusive(|b| *b == b'\n') {
            let body = &line[..line.len() - 1];
            if let Err(e) = filefmt::verify_row(body).and_then(|_| {
                serde_json::from_slice::<HistoryRow>(body)
                    .map(|_| ())
                    .map_err(|e| (e.column() as u64, e.to_string()))
            }) {
                let no = count_lines_before(f, &hpath, start + rel as u64)? + 1;
                return Err(corrupt(&hpath, no, e.0, e.1));
            }
            rel += line.len();
        }
        Ok(())
    }

    /// Append rows to history (one write + fdatasync), each with its checksum.
    pub(super) fn append_history(&mut self, rows: &[HistoryRow]) -> StoreResult<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let hpath = self.path(HISTORY_FILE);
        let mut buf = Vec::with_capacity(rows.len() * 512);
        for r in rows {
            filefmt::encode_row(&mut buf, r).map_err(StoreError::encode("history row"))?;
        }
        self.inner.history.append(&hpath, &buf)
    }

    /// Scan history from `mark` for the row of `run_id` (crash between row and record).
    pub(super) fn find_run_row(
        &self,
        mark: Option<Mark>,
        run_id: Uuid,
    ) -> StoreResult<Option<HistoryRow>> {
        Ok(self.find_run_rows(mark, run_id, None)?.0)
    }

    /// [`Self::find_run_row`], and with `job`, also every later row of that job: the rows the
    /// same write put after the run's row (overlap `skipped`, `missed`), which a recovery
    /// finishing from the landed row must not write again.
    pub(super) fn find_run_rows(
        &self,
        mark: Option<Mark>,
        run_id: Uuid,
        job: Option<&str>,
    ) -> StoreResult<(Option<HistoryRow>, Vec<HistoryRow>)> {
        let job_needle = job.map(|j| format!("\"job\":{}", json_str(j)));
        let mut found: Option<HistoryRow> = None;
        let mut after = Vec::new();
        let hpath = self.path(HISTORY_FILE);
        let log = &self.inner.history;
        let f = log.file(&hpath)?;
        let len = log.len;
        let start = match mark {
            Some(m) if m.ino == log.ino && m.off <= len => m.off,
            _ => 0,
        };
        let needle = run_id.to_string();
        let mut off = start;
        let mut carry: Vec<u8> = Vec::new();
        while off < len {
            let n = (len - off).min(BLOCK * 4);
            let mut buf = vec![0u8; n as usize];
            read_at(f, &hpath, off, &mut buf)?;
            off += n;
            carry.extend_from_slice(&buf);
            let cut = carry.iter().rposition(|b| *b == b'\n').map_or(0, |p| p + 1);
            for line in carry[..cut].split(|b| *b == b'\n') {
                if line.is_empty() {
                    continue;
                }
                if found.is_some() {
                    if let Some(n) = &job_needle
                        && contains(line, n.as_bytes())
                        && filefmt::verify_row(line).is_ok()
                        && let Ok(row) = serde_json::from_slice::<HistoryRow>(line)
                        && Some(row.job.as_str()) == job
                    {
                        after.push(row);
                    }
                    continue;
                }
                if !contains(line, needle.as_bytes()) {
                    continue;
                }
                if filefmt::verify_row(line).is_ok()
                    && let Ok(row) = serde_json::from_slice::<HistoryRow>(line)
                    && row.run_id == run_id
                {
                    found = Some(row);
                    if job_needle.is_none() {
                        return Ok((found, after));
                    }
                }
            }
            carry.drain(..cut);
        }
        Ok((found, after))
    }

    /// Rows of each named job that lie after where its record was last written (`rows_to`):
    /// rows an operation wrote before dying or failing ahead of its job record (bug 5 of the
    /// fault simulator: without this, the next claimer — any process — wrote the same
    /// `missed`/overlap row again). One forward scan from the earliest mark. A mark on another
    /// history file (retention rewrote it) or none (a record written before marks existed) is
    /// looked for in the last [`UNMARKED_SCAN_BYTES`]; no scan reaches back more than
    /// [`RECORDLESS_SCAN_CAP`] (beyond that a leftover row can be recorded again, never lost).
    /// Only a writer about to generate rows for a job calls this, so claims and completions
    /// that generate none never scan.
    pub(super) fn rows_since_records(
        &self,
        jobs: &[(String, Option<Mark>)],
    ) -> StoreResult<Vec<HistoryRow>> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let hpath = self.path(HISTORY_FILE);
        let log = &self.inner.history;
        let f = log.file(&hpath)?;
        let len = log.len;
        let floor = len.saturating_sub(RECORDLESS_SCAN_CAP);
        let starts: Vec<(String, String, u64)> = jobs
            .iter()
            .map(|(j, m)| {
                let from = match m {
                    Some(m) if m.ino == log.ino && m.off <= len => m.off,
                    _ => len.saturating_sub(UNMARKED_SCAN_BYTES),
                };
                (
                    j.clone(),
                    format!("\"job\":{}", json_str(j)),
                    from.max(floor),
                )
            })
            .collect();
        let Some(mut off) = starts.iter().map(|s| s.2).min() else {
            return Ok(Vec::new());
        };
        // A start inside a line (a window, not a mark) begins at the next line.
        let mut aligned = off == 0;
        if !aligned {
            let mut c = [0u8; 1];
            read_at(f, &hpath, off - 1, &mut c)?;
            aligned = c[0] == b'\n';
        }
        let mut out = Vec::new();
        let mut carry: Vec<u8> = Vec::new();
        let mut carry_off = off;
        while off < len {
            let n = (len - off).min(BLOCK * 4);
            let mut buf = vec![0u8; n as usize];
            read_at(f, &hpath, off, &mut buf)?;
            off += n;
            carry.extend_from_slice(&buf);
            let cut = carry.iter().rposition(|b| *b == b'\n').map_or(0, |p| p + 1);
            let mut line_off = carry_off;
            for line in carry[..cut].split_inclusive(|b| *b == b'\n') {
                let here = line_off;
                line_off += line.len() as u64;
                if !aligned {
                    aligned = true;
                    continue;
                }
                let body = &line[..line.len() - 1];
                if !starts
                    .iter()
                    .any(|(_, needle, from)| here >= *from && contains(body, needle.as_bytes()))
                {
                    continue;
                }
                if filefmt::verify_row(body).is_ok()
                    && let Ok(row) = serde_json::from_slice::<HistoryRow>(body)
                    && starts
                        .iter()
                        .any(|(name, _, from)| here >= *from && row.job == *name)
                {
                    out.push(row);
                }
            }
            carry.drain(..cut);
            carry_off = line_off;
        }
        Ok(out)
    }

    /// fdatasync history (rows this operation relies on may sit in the page cache only).
    pub(super) fn sync_history(&self) -> StoreResult<()> {
        let hpath = self.path(HISTORY_FILE);
        self.inner
            .history
            .file(&hpath)?
            .sync_data()
            .map_err(io_err(&hpath))
    }

    /// Rows a failed persist of this handle may have left in history without their job
    /// records (see `Inner::unacked`): complete, checksummed lines of those byte ranges.
    pub(super) fn unacked_rows(&self) -> StoreResult<Vec<HistoryRow>> {
        let log = &self.inner.history;
        if self.inner.unacked.is_empty() || log.file.is_none() {
            return Ok(Vec::new());
        }
        let hpath = self.path(HISTORY_FILE);
        let f = log.file(&hpath)?;
        let mut out = Vec::new();
        for &(ino, from, to) in &self.inner.unacked {
            let to = to.min(log.len);
            if ino != log.ino || from >= to {
                continue;
            }
            let mut buf = vec![0u8; (to - from) as usize];
            read_at(f, &hpath, from, &mut buf)?;
            let cut = buf.iter().rposition(|b| *b == b'\n').map_or(0, |p| p + 1);
            for line in buf[..cut].split(|b| *b == b'\n') {
                if !line.is_empty()
                    && filefmt::verify_row(line).is_ok()
                    && let Ok(row) = serde_json::from_slice::<HistoryRow>(line)
                {
                    out.push(row);
                }
            }
        }
        Ok(out)
    }

    /// After a failed persist (under the lock still): remember what it added to history, so a
    /// retry finds its rows instead of writing them again.
    pub(super) fn note_unacked(&mut self, ino: u64, before: u64) {
        let hpath = self.path(HISTORY_FILE);
        match stat(self.io(), &hpath) {
            Ok(Some(m)) if m.ino == ino && m.len > before => {
                if self.inner.unacked.len() >= UNACKED_RANGES {
                    self.inner.unacked.remove(0);
                }
                self.inner.unacked.push((ino, before, m.len));
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(
                "cannot tell what a failed write left in history ({e}); a retry may repeat a row"
            ),
        }
    }

    pub(super) fn compact_history(
        &mut self,
        keep_per_job: usize,
        min_finished: Option<DateTime<Utc>>,
    ) -> StoreResult<u64> {
        let hpath = self.path(HISTORY_FILE);
        let len = self.inner.history.len;
        let mut bytes = vec![0u8; len as usize];
        read_at(self.inner.history.file(&hpath)?, &hpath, 0, &mut bytes)?;
        let header_end = bytes.iter().position(|b| *b == b'\n').map_or(0, |p| p + 1);
        let mut rows: Vec<(String, DateTime<Utc>, std::ops::Range<usize>)> = Vec::new();
        let mut pos = header_end;
        for (i, line) in bytes[header_end..]
            .split_inclusive(|b| *b == b'\n')
            .enumerate()
        {
            let body = &line[..line.len() - 1];
            let row = parse_history_line(&hpath, i as u64 + 2, body)?;
            rows.push((row.job, row.finished_at, pos..pos + line.len()));
            pos += line.len();
        }
        let mut per_job: HashMap<&str, usize> = HashMap::new();
        let mut keep = vec![false; rows.len()];
        for (i, (job, fin, _)) in rows.iter().enumerate().rev() {
            let n = per_job.entry(job.as_str()).or_insert(0);
            if *n < keep_per_job && min_finished.is_none_or(|m| *fin >= m) {
                keep[i] = true;
                *n += 1;
            }
        }
        let mut out = Vec::with_capacity(bytes.len());
        out.extend_from_slice(&bytes[..header_end]);
        let mut dropped = 0u64;
        for (i, (_, _, r)) in rows.iter().enumerate() {
            if keep[i] {
                out.extend_from_slice(&bytes[r.clone()]);
            } else {
                dropped += 1;
            }
        }
        if dropped == 0 {
            self.inner.history_compacted_len = len;
            return Ok(0);
        }
        write_atomic(self.io(), &self.store.dir, &hpath, &out)?;
        self.inner.history = AppendLog::default();
        self.refresh_history()?;
        self.inner.history_compacted_len = self.inner.history.len;
        Ok(dropped)
    }

    pub(super) fn mark_now(&self) -> Mark {
        Mark {
            ino: self.inner.history.ino,
            off: self.inner.history.len,
        }
    }
}

impl FileStore {
    /// Newest-first rows matching `q`, read backwards from the end of history.
    pub(super) fn query_history(&self, q: &HistoryQuery) -> StoreResult<Vec<HistoryRow>> {
        let (file, len) = {
            let l = self.lock()?;
            let hpath = self.path(HISTORY_FILE);
            (
                l.inner
                    .history
                    .file(&hpath)?
                    .try_clone()
                    .map_err(io_err(&hpath))?,
                l.inner.history.len,
            )
        };
        // The lock is released: appends only add after `len`, compaction swaps the inode and
        // our cloned fd keeps reading the old file.
        let hpath = self.path(HISTORY_FILE);
        let job_needle = q.job.as_ref().map(|j| format!("\"job\":{}", json_str(j)));
        let status_needle = q.status.map(|s| format!("\"status\":\"{}\"", s.as_str()));
        let run_needle = q.run_id.map(|r| r.to_string());
        let mut out = Vec::new();
        let mut skip = q.offset;
        let unfiltered = q.job.is_none()
            && q.status.is_none()
            && q.run_id.is_none()
            && q.since.is_none()
            && !q.with_diff;
        // Runs whose real end superseded an `abandoned` row (see `HistoryRow::supersedes_abandoned`):
        // that older row is hidden. Newest-first, the superseding row is always read first.
        let mut superseded: HashSet<Uuid> = HashSet::new();
        let mut it = Backwards::new(&*file, &hpath, len);
        let limit = if q.limit == 0 { usize::MAX } else { q.limit };
        while out.len() < limit {
            let Some((off, line)) = it.next_line()? else {
                break;
            };
            if off == 0 {
                // Line 1 is the file's header (checked at open).
                continue;
            }
            if let Err((col, what)) = filefmt::verify_row(&line) {
                let no = count_lines_before(&*file, &hpath, off)? + 1;
                return Err(corrupt(&hpath, no, col, what));
            }
            if contains(&line, SUPERSEDES_NEEDLE)
                && let Ok(r) = serde_json::from_slice::<HistoryRow>(&line)
                && r.supersedes_abandoned
            {
                superseded.insert(r.run_id);
            }
            // Paging without filters: every line is a row, so the rows `offset` skips need no
            // parse (their checksum was verified above), and a deep page costs a backward read,
            // not a million parses.
            if skip > 0 && unfiltered {
                skip -= 1;
                continue;
            }
            let pre = job_needle
                .as_ref()
                .is_none_or(|n| contains(&line, n.as_bytes()))
                && status_needle
                    .as_ref()
                    .is_none_or(|n| contains(&line, n.as_bytes()))
                && run_needle
                    .as_ref()
                    .is_none_or(|n| contains(&line, n.as_bytes()));
            if !pre {
                // Skipped lines are checksum-verified above; a full parse of each would make
                // filtered queries slow.
                continue;
            }
            let row: HistoryRow = match serde_json::from_slice(&line) {
                Ok(r) => r,
                Err(e) => {
                    let no = count_lines_before(&*file, &hpath, off)? + 1;
                    return Err(json_err(&hpath, no, &e));
                }
            };
            if q.job.as_ref().is_some_and(|j| *j != row.job)
                || q.status.is_some_and(|s| s != row.status)
                || q.run_id.is_some_and(|r| r != row.run_id)
                || q.since.is_some_and(|s| row.finished_at < s)
                || (q.with_diff && row.diff.is_none())
                || (row.status == crate::model::Status::Abandoned
                    && superseded.contains(&row.run_id))
            {
                continue;
            }
            if skip > 0 {
                skip -= 1;
                continue;
            }
            out.push(row);
        }
        Ok(out)
    }
}

/// How far back [`Locked::rows_since_records`] looks for a job whose record carries no usable
/// history mark.
const UNMARKED_SCAN_BYTES: u64 = 4 * 1024 * 1024;
/// The most [`Locked::rows_since_records`] reads back from history's end.
const RECORDLESS_SCAN_CAP: u64 = 64 * 1024 * 1024;

const SUPERSEDES_NEEDLE: &[u8] = b"\"supersedes_abandoned\":true";

pub(super) fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Iterate history from the newest row backwards, block by block.
pub(super) struct Backwards<'a> {
    f: &'a dyn IoFile,
    path: &'a Path,
    /// Bytes not yet consumed are `[0, pos)`.
    pos: u64,
    buf: Vec<u8>,
    /// Lines ready, newest last, with their start offsets.
    ready: Vec<(u64, Vec<u8>)>,
}

impl<'a> Backwards<'a> {
    fn new(f: &'a dyn IoFile, path: &'a Path, len: u64) -> Self {
        Backwards {
            f,
            path,
            pos: len,
            buf: Vec::new(),
            ready: Vec::new(),
        }
    }

    fn next_line(&mut self) -> StoreResult<Option<(u64, Vec<u8>)>> {
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

//! The history half of the file store: history sealed into checksummed segments (format 3),
//! the open segment's start-up verification, appends and sealing, newest-first paged queries,
//! the crash-recovery scan (`find_run_row`), the journal/history cross-check and retention.
//!
//! Must not touch: job records (see [`super::jobs`]) beyond reading their history positions.
//!
//! # Layout
//! - `history.jsonl` is the *open segment*: header `{"cronsole":"history","store":ID,
//!   "segment":N}`, then rows (each with its CRC-32). Appends go here only.
//! - `history/NNNNNN.jsonl` are *sealed segments* `1 ..= N-1`: the same header, rows, and a
//!   last seal line (row count, length and CRC-32 of every byte before it, see
//!   [`crate::store::filefmt::Seal`]). A sealed segment is never appended to; retention may
//!   replace it whole (temp + rename) with fewer rows, or delete it when it is the oldest.
//! - When the open segment would grow past the bound ([`super::SEGMENT_BYTES`], 4 MiB by
//!   default), the writer seals it before its append: (1) its bytes plus the seal line are
//!   written as `history/N.jsonl` (temp + fsync + rename + fsync dir), (2) `history.jsonl` is
//!   replaced by an empty segment `N+1`. A crash between (1) and (2) leaves segment `N` twice;
//!   it is recognised (sealed `N` exists and its body is exactly the open file), readers use the
//!   sealed copy, and the next writer finishes step (2) before appending.
//!
//! # Why this design (issue 10 item 2, issue 14)
//! Start-up must not read 10 000 000 rows, yet nothing may ever be appended after a byte that
//! was not verified. Appends only ever go to the open segment, which is at most one bound (plus
//! one batch) long and is verified row by row at every open: the cost of a start is flat in the
//! size of history. Sealed segments are immutable and self-describing: a reader that skips one
//! (a deep page) trusts its seal's row count; a reader that reads rows verifies each row's
//! checksum; `cronsole check` verifies every segment (header, every row, seal length, row count
//! and CRC). The open segment keeps the name `history.jsonl`, so the one file that is always
//! required is where it always was, and tools that tail it keep working.
//!
//! # Positions
//! A history position is `(segment, byte offset)` plus the segment file's inode (a [`Mark`]).
//! Sealing copies the bytes unchanged, so an offset stays valid when its segment is sealed; a
//! retention rewrite of a sealed segment gives it a new inode and positions in it are then only
//! used as "somewhere in segment N" (a recovery scan reads that segment from its start). Lease
//! marks, the journal records' history positions (the cross-check) and page tokens are positions.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::jobs::Mark;
use super::log::{
    AppendLog, check_id, complete_len, corrupt, count_lines_before, encode_line, io_err, json_err,
    missing, read_at, stat, write_atomic,
};
use super::{BLOCK, FileStore, HISTORY_FILE, Locked, UNACKED_RANGES};
use crate::model::{HistoryRow, Status};
use crate::store::filefmt::{self, Seal};
use crate::store::io::{IoFile, OpenMode, StoreIo};
use crate::store::rules;
use crate::store::{HistoryPage, HistoryQuery, StoreError, StoreResult};

/// The directory of sealed segments.
pub(super) const HISTORY_DIR: &str = "history";

/// Where sealed segment `n` lives.
pub(super) fn segment_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(HISTORY_DIR).join(format!("{n:06}.jsonl"))
}

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
            let Some(seg) = h.segment else {
                return Err(corrupt(
                    &hpath,
                    1,
                    1,
                    "history header carries no segment number (a format-2 history file in a format-3 store?)",
                ));
            };
            // A crash between sealing this segment and replacing it leaves it twice.
            let sealed_open = match open_sealed(self.io(), &self.store.dir, seg)? {
                Some(s) if s.seal.bytes == len => true,
                Some(s) => {
                    return Err(corrupt(
                        &s.path,
                        s.seal.rows + 2,
                        1,
                        format!(
                            "segment {seg} is sealed at {} bytes but the open history.jsonl of the same segment holds {len}",
                            s.seal.bytes
                        ),
                    ));
                }
                None => false,
            };
            self.inner.history = AppendLog {
                file: Some(f),
                ino: fm.ino,
                len,
                cut_unsynced: false,
            };
            self.inner.history_seg = seg;
            self.inner.history_open_unverified = false;
            self.inner.history_sealed_open = sealed_open;
            self.inner.names_unsynced = true;
            if self.inner.history_compacted_len == 0 {
                self.inner.history_compacted_len = self.history_growth();
                self.inner.history_kept_len = self.inner.history_compacted_len;
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

    /// A monotone measure of how much history was ever appended (segments before the open one
    /// count a full bound each): what the automatic retention compares.
    fn history_growth(&self) -> u64 {
        self.inner
            .history_seg
            .saturating_sub(1)
            .saturating_mul(self.store.segment_bytes)
            .saturating_add(self.inner.history.len)
    }

    /// Automatic retention is due: history grew by more than it held after the last one (and by
    /// more than 64 MiB).
    pub(super) fn history_compaction_due(&self) -> bool {
        let grown = self
            .history_growth()
            .saturating_sub(self.inner.history_compacted_len);
        grown > super::AUTO_COMPACT_MIN_BYTES && grown > self.inner.history_kept_len
    }

    /// Verify the open segment row by row (checksum and parse) — all of it: appends only ever go
    /// there, so nothing is appended after an unverified byte, and the segment bound keeps this
    /// flat in the size of history. Returns its rows for the cross-check.
    ///
    /// An open segment far over the bound (written by hand or by a tool, not by cronsole) is
    /// verified over its last [`super::SEGMENT_BYTES`] only, and marked: the first append seals
    /// it first, which parses every row of it, so the invariant holds and a read-only open
    /// stays fast.
    pub(super) fn verify_open_segment(&mut self) -> StoreResult<Vec<TailRow>> {
        let hpath = self.path(HISTORY_FILE);
        let len = self.inner.history.len;
        let window = super::SEGMENT_BYTES.max(self.store.segment_bytes);
        let start = if len > 2 * window { len - window } else { 0 };
        self.inner.history_open_unverified = start > 0;
        let f = self.inner.history.file(&hpath)?;
        let mut buf = vec![0u8; (len - start) as usize];
        read_at(f, &hpath, start, &mut buf)?;
        // Skip to the first line that starts inside the window (line 1 is the header).
        let skip = if start == 0 {
            buf.iter()
                .position(|b| *b == b'\n')
                .map_or(buf.len(), |p| p + 1)
        } else {
            let mut c = [0u8; 1];
            read_at(f, &hpath, start - 1, &mut c)?;
            if c[0] == b'\n' {
                0
            } else {
                buf.iter()
                    .position(|b| *b == b'\n')
                    .map_or(buf.len(), |p| p + 1)
            }
        };
        let mut out = Vec::new();
        let mut off = start + skip as u64;
        for line in buf[skip..].split_inclusive(|b| *b == b'\n') {
            let at = off;
            off += line.len() as u64;
            let body = &line[..line.len() - 1];
            let row = match filefmt::verify_row(body).and_then(|_| {
                serde_json::from_slice::<HistoryRow>(body)
                    .map_err(|e| (e.column() as u64, e.to_string()))
            }) {
                Ok(r) => r,
                Err((col, what)) => {
                    let no = count_lines_before(f, &hpath, at)? + 1;
                    return Err(corrupt(&hpath, no, col, what));
                }
            };
            out.push(TailRow {
                off: at,
                job: row.job,
                run_id: row.run_id,
                status: row.status,
                stale: row.stale_lease,
            });
        }
        Ok(out)
    }

    /// Append rows to history (one write + fdatasync), each with its checksum; the open segment
    /// is sealed first when the append would take it past the bound.
    pub(super) fn append_history(&mut self, rows: &[HistoryRow]) -> StoreResult<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut buf = Vec::with_capacity(rows.len() * 512);
        for r in rows {
            filefmt::encode_row(&mut buf, r).map_err(StoreError::encode("history row"))?;
        }
        // A seal a crashed writer left half done (this handle may not have noticed: the open
        // file's inode did not change) is finished before anything is appended.
        if self.inner.history_sealed_open
            || stat(
                self.io(),
                &segment_path(&self.store.dir, self.inner.history_seg),
            )?
            .is_some()
        {
            self.inner.history = AppendLog::default();
            self.refresh_history()?;
            if self.inner.history_sealed_open {
                self.start_next_segment()?;
            }
        }
        let header_len = self.open_header_len()?;
        if self.inner.history.len > header_len
            && (self.inner.history_open_unverified
                || self.inner.history.len + buf.len() as u64 > self.store.segment_bytes)
        {
            self.seal_open_segment()?;
        }
        let hpath = self.path(HISTORY_FILE);
        self.inner.history.append(&hpath, &buf)?;
        self.inner.history_synced = (self.inner.history.ino, self.inner.history.len);
        Ok(())
    }

    fn open_header_len(&self) -> StoreResult<u64> {
        let hpath = self.path(HISTORY_FILE);
        let f = self.inner.history.file(&hpath)?;
        let mut head = vec![0u8; self.inner.history.len.min(BLOCK) as usize];
        read_at(f, &hpath, 0, &mut head)?;
        Ok(head
            .iter()
            .position(|b| *b == b'\n')
            .map_or(self.inner.history.len, |p| p as u64 + 1))
    }

    /// Seal the open segment: its bytes and a seal line become `history/N.jsonl`, then
    /// `history.jsonl` becomes the empty segment `N+1`.
    pub(super) fn seal_open_segment(&mut self) -> StoreResult<()> {
        let hpath = self.path(HISTORY_FILE);
        let seg = self.inner.history_seg;
        let len = self.inner.history.len;
        let old_ino = self.inner.history.ino;
        let mut bytes = vec![0u8; len as usize];
        read_at(self.inner.history.file(&hpath)?, &hpath, 0, &mut bytes)?;
        // Whatever a crashed writer left after the last complete line is not sealed.
        let mut rows = 0u64;
        let mut supersedes = Vec::new();
        for (i, line) in bytes.split_inclusive(|b| *b == b'\n').enumerate() {
            if i == 0 {
                continue;
            }
            let row = parse_history_line(&hpath, i as u64 + 1, &line[..line.len() - 1])?;
            rows += 1;
            if row.supersedes_abandoned {
                supersedes.push(row.run_id);
            }
        }
        let seal = Seal::over(seg, &bytes, rows, supersedes);
        encode_line(&mut bytes, "segment seal", &seal)?;
        let hdir = self.store.dir.join(HISTORY_DIR);
        self.io().create_dir_all(&hdir).map_err(io_err(&hdir))?;
        // The directory entry of a new `history/` must be durable before segments in it are.
        self.io()
            .sync_dir(&self.store.dir)
            .map_err(io_err(&self.store.dir))?;
        // The mark first (segment 1 on a new store): from then on a missing first segment is
        // damage, not what an earlier release's retention may have left.
        self.write_first_mark()?;
        let spath = segment_path(&self.store.dir, seg);
        write_atomic(self.io(), &hdir, &spath, &bytes)?;
        // Failed persists' byte ranges now live in the sealed copy (same offsets).
        if let Some(m) = stat(self.io(), &spath)? {
            for r in &mut self.inner.unacked {
                if r.0 == old_ino {
                    r.0 = m.ino;
                }
            }
        }
        self.inner.history_sealed_open = true;
        self.start_next_segment()
    }

    /// Replace a sealed open segment by the empty next one.
    fn start_next_segment(&mut self) -> StoreResult<()> {
        let hpath = self.path(HISTORY_FILE);
        let next = self.inner.history_seg + 1;
        write_atomic(
            self.io(),
            &self.store.dir,
            &hpath,
            &history_header(self.id(), next)?,
        )?;
        self.inner.history = AppendLog::default();
        self.refresh_history()?;
        self.inner.history_synced = (self.inner.history.ino, self.inner.history.len);
        Ok(())
    }

    /// Where history ends now.
    pub(super) fn mark_now(&self) -> Mark {
        Mark {
            ino: self.inner.history.ino,
            off: self.inner.history.len,
            seg: Some(self.inner.history_seg),
        }
    }

    /// The position a job record written now may name (see the cross-check): where history
    /// ends, after making sure every byte before it is durable (another process's rows this
    /// handle has only seen in the page cache are fdatasynced first).
    pub(super) fn durable_mark(&mut self) -> StoreResult<Mark> {
        let m = self.mark_now();
        if self.inner.history_synced != (m.ino, m.off) {
            self.sync_history()?;
            self.inner.history_synced = (m.ino, m.off);
        }
        Ok(m)
    }

    /// The sealed segments a forward scan from `mark` reads, oldest first, then the open one.
    fn scan_plan(&self, mark: Option<Mark>) -> StoreResult<Vec<(u64, u64)>> {
        let top = self.inner.history_seg;
        let (from, off) = match mark {
            Some(Mark {
                seg: Some(s),
                off,
                ino,
            }) if s <= top => (s, Some((ino, off))),
            _ => (self.oldest_segment()?, None),
        };
        let mut plan = Vec::new();
        for n in from..=top {
            let start = match off {
                Some((ino, o)) if n == from => {
                    if n == top && !self.inner.history_sealed_open && ino == self.inner.history.ino
                    {
                        o
                    } else if let Some(s) = open_sealed(self.io(), &self.store.dir, n)? {
                        if s.ino == ino { o } else { 0 }
                    } else {
                        0
                    }
                }
                _ => 0,
            };
            plan.push((n, start));
        }
        Ok(plan)
    }

    /// The first sealed segment that must be there: retention's mark (`history/first.json`,
    /// written before it removes the oldest segments), else 1.
    fn first_kept_segment(&self) -> StoreResult<(u64, bool)> {
        let p = self
            .store
            .dir
            .join(HISTORY_DIR)
            .join(filefmt::FIRST_SEGMENT_FILE);
        match self.io().read(&p) {
            Ok(b) => filefmt::parse_first_segment(&b, Some(self.id()))
                .map(|n| (n, true))
                .map_err(|what| corrupt(&p, 1, 1, what)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((1, false)),
            Err(e) => Err(StoreError::io(&p, e)),
        }
    }

    /// The open's cheap check of sealed history (one small read and one stat): the first
    /// segment retention kept (or segment 1) is there while the open segment is above it. A
    /// deleted oldest segment otherwise looked like retention (red team 7) and its rows were
    /// silently gone. Gaps higher up and damage inside segments are `cronsole check`'s.
    pub(super) fn check_first_segment(&mut self) -> StoreResult<()> {
        let top = self.inner.history_seg;
        if top <= 1 {
            return Ok(());
        }
        let (first, marked) = self.first_kept_segment()?;
        if !marked {
            // This build writes the mark when it seals a store's first segment, so a store with
            // sealed segments and no mark was sealed by an earlier release (whose retention
            // removed segments without one): a writer (or a command writing the store: `pause`,
            // `trigger`, …) adopts what is there, readers accept it.
            if self.store.adopts_mark {
                self.write_first_mark()?;
            }
            return Ok(());
        }
        let p = segment_path(&self.store.dir, first);
        if first < top && stat(self.io(), &p)?.is_none() {
            let why = if marked {
                format!(
                    "retention's mark history/{} keeps segments from {first}",
                    filefmt::FIRST_SEGMENT_FILE
                )
            } else {
                "no retention removed any (segments start at 1)".to_string()
            };
            return Err(missing(
                &p,
                &format!(
                    "history segment {first} is gone but the open segment is {top} and {why}: its rows were lost (deleted by hand?)"
                ),
            ));
        }
        Ok(())
    }

    /// Write retention's mark (`history/first.json`) naming the oldest segment still there,
    /// when there is none: at the seal of a store's first segment, and once on a store an
    /// earlier release sealed (adopting what its retention left, logged).
    fn write_first_mark(&self) -> StoreResult<()> {
        let hdir = self.store.dir.join(HISTORY_DIR);
        let mpath = hdir.join(filefmt::FIRST_SEGMENT_FILE);
        if stat(self.io(), &mpath)?.is_some() {
            return Ok(());
        }
        let oldest = self.oldest_segment()?;
        if oldest > 1 {
            tracing::warn!(
                segment = oldest,
                "history segments start at {oldest} and no retention mark says why (a store \
                 an earlier release's retention trimmed): recording it as the first kept segment"
            );
        }
        let mark = filefmt::first_segment_text(self.id(), oldest)
            .map_err(|e| StoreError::Internal(format!("retention mark: {e}")))?;
        self.io().create_dir_all(&hdir).map_err(io_err(&hdir))?;
        write_atomic(self.io(), &hdir, &mpath, &mark)
    }

    /// The oldest segment still there (probing down from the open one).
    fn oldest_segment(&self) -> StoreResult<u64> {
        let mut n = self.inner.history_seg;
        while n > 1 && stat(self.io(), &segment_path(&self.store.dir, n - 1))?.is_some() {
            n -= 1;
        }
        Ok(n)
    }

    /// The rows an earlier attempt of completion `c` put in history while the job's record
    /// still holds its run (the record's write failed after the row landed — `ENOSPC` or `EIO`
    /// on the journal — in another handle or process: a spooled completion replayed, see
    /// [`super::Store::complete_recorded`]): the run's own row (its owner's, with its status;
    /// never a recoverer's `abandoned` row) and the job's rows after it, scanned from the
    /// claim's mark. `None` when the record no longer holds the run (the earlier attempt's
    /// record landed, or the run was recovered from its row): nothing is to be written. Empty
    /// when `landed` (this handle's failed persists) already has the row, or none is found.
    pub(super) fn landed_run_rows(
        &mut self,
        c: &super::Completion,
        landed: &[HistoryRow],
    ) -> StoreResult<Option<Vec<HistoryRow>>> {
        self.load(&c.job)?;
        let Some(mark) = self
            .inner
            .hot
            .get(&c.job)
            .filter(|cached| rules::runtime::holds(&cached.rec, c.run_id))
            .map(|cached| cached.mark)
        else {
            return Ok(None);
        };
        if landed
            .iter()
            .any(|r| r.run_id == c.run_id && r.job == c.job && r.owner == c.row.owner)
        {
            return Ok(Some(Vec::new()));
        }
        match self.find_run_rows(mark, c.run_id, Some(&c.job))? {
            (Some(row), after) if row.owner == c.row.owner && row.status == c.row.status => {
                let mut v = vec![row];
                v.extend(after);
                Ok(Some(v))
            }
            _ => Ok(Some(Vec::new())),
        }
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
    /// finishing from the landed row must not write again. With `job`, the run's row is its
    /// real end when one superseded an `abandoned` row found first.
    pub(super) fn find_run_rows(
        &self,
        mark: Option<Mark>,
        run_id: Uuid,
        job: Option<&str>,
    ) -> StoreResult<(Option<HistoryRow>, Vec<HistoryRow>)> {
        let job_needle = job.map(|j| format!("\"job\":{}", json_str(j)));
        let needle = run_id.to_string();
        let mut found: Option<HistoryRow> = None;
        let mut after = Vec::new();
        let top = self.inner.history_seg;
        for (n, start) in self.scan_plan(mark)? {
            let sealed;
            let (f, path, len): (&dyn IoFile, PathBuf, u64) =
                if n == top && !self.inner.history_sealed_open {
                    let hpath = self.path(HISTORY_FILE);
                    let f = self.inner.history.file(&hpath)?;
                    (f, hpath, self.inner.history.len)
                } else {
                    match open_sealed(self.io(), &self.store.dir, n)? {
                        Some(s) => {
                            sealed = s;
                            (&*sealed.file, sealed.path.clone(), sealed.seal.bytes)
                        }
                        None => continue,
                    }
                };
            let mut off = start.min(len);
            let mut carry: Vec<u8> = Vec::new();
            while off < len {
                let k = (len - off).min(BLOCK * 4);
                let mut buf = vec![0u8; k as usize];
                read_at(f, &path, off, &mut buf)?;
                off += k;
                carry.extend_from_slice(&buf);
                let cut = carry.iter().rposition(|b| *b == b'\n').map_or(0, |p| p + 1);
                for line in carry[..cut].split(|b| *b == b'\n') {
                    if line.is_empty() {
                        continue;
                    }
                    if let Some(first) = &found {
                        if let Some(nd) = &job_needle
                            && contains(line, nd.as_bytes())
                            && filefmt::verify_row(line).is_ok()
                            && let Ok(row) = serde_json::from_slice::<HistoryRow>(line)
                            && Some(row.job.as_str()) == job
                        {
                            if row.run_id == run_id
                                && row.supersedes_abandoned
                                && first.status == Status::Abandoned
                            {
                                // The run's real end, written after a recoverer that died
                                // midway left `abandoned` (fault-simulator seed 1651): the
                                // job is finished from it, not from the row it supersedes.
                                found = Some(row);
                            } else {
                                after.push(row);
                            }
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

    /// The generated rows (`missed`, overlap `skipped`) that lie in history after the store's
    /// accounted mark `acct` (see `Inner::acct`): rows a writer put there before failing or
    /// dying ahead of its job records, each with where its line starts. Empty without any read
    /// when history ends at the mark (every operation that did not fail). `None` when the
    /// stretch cannot be read within [`RECORDLESS_SCAN_CAP`] (the caller then does what it did
    /// before the mark existed).
    pub(super) fn generated_after(
        &self,
        acct: Mark,
    ) -> StoreResult<Option<Vec<(Mark, HistoryRow)>>> {
        if acct == self.mark_now() && !self.inner.history_sealed_open {
            return Ok(Some(Vec::new()));
        }
        let top = self.inner.history_seg;
        let mut budget = RECORDLESS_SCAN_CAP;
        let mut out = Vec::new();
        for (n, start) in self.scan_plan(Some(acct))? {
            let sealed;
            let (f, path, len, ino): (&dyn IoFile, PathBuf, u64, u64) =
                if n == top && !self.inner.history_sealed_open {
                    let hpath = self.path(HISTORY_FILE);
                    let f = self.inner.history.file(&hpath)?;
                    (f, hpath, self.inner.history.len, self.inner.history.ino)
                } else {
                    match open_sealed(self.io(), &self.store.dir, n)? {
                        Some(s) => {
                            sealed = s;
                            let path = sealed.path.clone();
                            (&*sealed.file, path, sealed.seal.bytes, sealed.ino)
                        }
                        None => continue,
                    }
                };
            let start = start.min(len);
            let Some(rest) = budget.checked_sub(len - start) else {
                return Ok(None);
            };
            budget = rest;
            let mut buf = vec![0u8; (len - start) as usize];
            read_at(f, &path, start, &mut buf)?;
            // Whole lines only (a torn tail is no row); a header line does not verify.
            let mut off = start;
            for line in buf.split_inclusive(|b| *b == b'\n') {
                let here = off;
                off += line.len() as u64;
                let Some(body) = line.strip_suffix(b"\n") else {
                    continue;
                };
                if filefmt::verify_row(body).is_ok()
                    && let Ok(row) = serde_json::from_slice::<HistoryRow>(body)
                    && rules::rows::is_generated(&row)
                {
                    let at = Mark {
                        ino,
                        off: here,
                        seg: Some(n),
                    };
                    out.push((at, row));
                }
            }
        }
        Ok(Some(out))
    }

    /// Of the records about to be written, those whose `rows_to` must stay where it is: history
    /// after it may hold a row of the job that no record accounts for (an operation wrote it and
    /// died or failed before its record): a generated row, or the `abandoned` row of a run the
    /// record still leases (a recoverer that died midway). Moving `rows_to` past such a row
    /// would hide it from the next writer that generates rows for the job, which would then
    /// record the same slots again (fault-simulator seed 54 and most of the 731 "slot in two
    /// rows" seeds: a budget settlement, a pause, a renewal or a plain completion wrote the
    /// record after a dead claim's `missed` or overlap row), and from the run's completion,
    /// which looks there for an `abandoned` row to supersede ([`Self::recent_rows_from`]).
    /// A job this operation scanned for ([`Self::rows_since_records`], `rows_known`) moves;
    /// another moves only when the history after its `rows_to` is short
    /// ([`ACCOUNT_SCAN_BYTES`]) and holds no such row of it; otherwise its `rows_to` stays (a
    /// later scan starts further back, never misses the row).
    pub(super) fn rows_unaccounted(&self, names: &[String]) -> StoreResult<HashSet<String>> {
        let log = &self.inner.history;
        let mut keep = HashSet::new();
        let mut cheap: HashMap<&str, u64> = HashMap::new();
        for n in names {
            if self.inner.rows_known.contains(n) {
                continue;
            }
            // The records being written are in `hot` (only those can have changed).
            let Some(c) = self.inner.hot.get(n) else {
                continue;
            };
            match c.rows_to {
                Some(m) if m.ino == log.ino && m.off == log.len => {}
                Some(m)
                    if m.ino == log.ino
                        && m.off < log.len
                        && log.len - m.off <= ACCOUNT_SCAN_BYTES =>
                {
                    cheap.insert(n.as_str(), m.off);
                }
                _ => {
                    keep.insert(n.clone());
                }
            }
        }
        let Some(from) = cheap.values().min().copied() else {
            return Ok(keep);
        };
        // One read of at most ACCOUNT_SCAN_BYTES, each row parsed once and looked up by job
        // (a claim may write thousands of records at once).
        let hpath = self.path(HISTORY_FILE);
        let f = log.file(&hpath)?;
        let mut buf = vec![0u8; (log.len - from) as usize];
        read_at(f, &hpath, from, &mut buf)?;
        let mut off = from;
        for line in buf.split_inclusive(|b| *b == b'\n') {
            let here = off;
            off += line.len() as u64;
            let Some(body) = line.strip_suffix(b"\n") else {
                continue;
            };
            if filefmt::verify_row(body).is_err() {
                continue;
            }
            let Ok(r) = serde_json::from_slice::<HistoryRow>(body) else {
                continue;
            };
            if cheap.get(r.job.as_str()).is_none_or(|f| here < *f) {
                continue;
            }
            let leased = || {
                self.inner
                    .hot
                    .get(&r.job)
                    .is_some_and(|c| rules::runtime::holds(&c.rec, r.run_id))
            };
            if rules::rows::is_generated(&r) || (r.status == Status::Abandoned && leased()) {
                keep.insert(r.job);
            }
        }
        Ok(keep)
    }

    /// `rows_to` when the history after it is short enough to read on every completion
    /// ([`ACCOUNT_SCAN_BYTES`]) and not empty: where a completion looks for an `abandoned` row
    /// of its own run that a recoverer wrote before dying, even when the lease does not look
    /// lapsed (the clock stepped back: fault-simulator seed 2222).
    pub(super) fn recent_rows_from(&self, rows_to: Option<Mark>) -> Option<Mark> {
        let log = &self.inner.history;
        rows_to.filter(|m| {
            m.ino == log.ino
                && !self.inner.history_sealed_open
                && m.off < log.len
                && log.len - m.off <= ACCOUNT_SCAN_BYTES
        })
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
    /// records (see `Inner::unacked`): complete, checksummed lines of those byte ranges (in the
    /// open segment, or in the two newest sealed ones when a seal happened since).
    pub(super) fn unacked_rows(&self) -> StoreResult<Vec<HistoryRow>> {
        let log = &self.inner.history;
        if self.inner.unacked.is_empty() || log.file.is_none() {
            return Ok(Vec::new());
        }
        let hpath = self.path(HISTORY_FILE);
        let open = log.file(&hpath)?;
        let mut recent: Vec<Sealed> = Vec::new();
        if self.inner.unacked.iter().any(|r| r.0 != log.ino) {
            let top = self.inner.history_seg;
            for n in [top, top.saturating_sub(1), top.saturating_sub(2)] {
                if n > 0
                    && let Some(s) = open_sealed(self.io(), &self.store.dir, n)?
                {
                    recent.push(s);
                }
            }
        }
        let mut out = Vec::new();
        for &(ino, from, to) in &self.inner.unacked {
            let (f, path, end): (&dyn IoFile, &Path, u64) = if ino == log.ino {
                (open, &hpath, log.len)
            } else if let Some(s) = recent.iter().find(|s| s.ino == ino) {
                (&*s.file, &s.path, s.seal.bytes)
            } else {
                continue;
            };
            let to = to.min(end);
            if from >= to {
                continue;
            }
            let mut buf = vec![0u8; (to - from) as usize];
            read_at(f, path, from, &mut buf)?;
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
            // The persist sealed the open segment before appending: the new open segment
            // holds only its rows (its header line is no row and is skipped when read).
            Ok(Some(m)) if m.ino != ino && m.len > 0 => {
                if self.inner.unacked.len() >= UNACKED_RANGES {
                    self.inner.unacked.remove(0);
                }
                self.inner.unacked.push((m.ino, 0, m.len));
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(
                "cannot tell what a failed write left in history ({e}); a retry may repeat a row"
            ),
        }
    }

    /// Retention: keep the newest `keep_per_job` rows of each job and, with `min_finished`,
    /// only rows finished at or after it. The open segment is sealed first (so every row is in
    /// an immutable segment); then, newest segment first, each sealed segment is kept as is,
    /// replaced by a copy with only its kept rows (temp + rename, a new seal), or — when no
    /// row of it is kept and every older one goes too — deleted, oldest first (a crash midway
    /// leaves a shorter but gap-free run of segments). Returns the number of rows dropped.
    pub(super) fn compact_history(
        &mut self,
        keep_per_job: usize,
        min_finished: Option<DateTime<Utc>>,
    ) -> StoreResult<u64> {
        if self.inner.history_sealed_open {
            self.start_next_segment()?;
        }
        if self.inner.history.len > self.open_header_len()? {
            self.seal_open_segment()?;
        }
        let top = self.inner.history_seg;
        let hdir = self.store.dir.join(HISTORY_DIR);
        let mut per_job: HashMap<String, usize> = HashMap::new();
        let mut dropped = 0u64;
        let mut kept_bytes = self.inner.history.len;
        // Segments whose rows all go, newest first; deleted once an older kept row stops the run.
        let mut empty_run: Vec<u64> = Vec::new();
        let mut n = top;
        while n > 1 {
            n -= 1;
            let Some(s) = open_sealed(self.io(), &self.store.dir, n)? else {
                break;
            };
            let mut bytes = vec![0u8; s.seal.bytes as usize];
            read_at(&*s.file, &s.path, 0, &mut bytes)?;
            if filefmt::crc32(&bytes) != s.seal.crc32 {
                return Err(corrupt(
                    &s.path,
                    s.seal.rows + 2,
                    1,
                    "segment checksum mismatch: the sealed segment was altered",
                ));
            }
            let header_end = bytes.iter().position(|b| *b == b'\n').map_or(0, |p| p + 1);
            // (range, superseding run id, kept), oldest first; decided newest first below
            // (per-job counts run across segments, newest segment first).
            let mut lines: Vec<RetainedLine> = Vec::new();
            let mut pos = header_end;
            for (i, line) in bytes[header_end..]
                .split_inclusive(|b| *b == b'\n')
                .enumerate()
            {
                let row = parse_history_line(&s.path, i as u64 + 2, &line[..line.len() - 1])?;
                let sup = row.supersedes_abandoned.then_some(row.run_id);
                lines.push((pos..pos + line.len(), sup, row.job, row.finished_at));
                pos += line.len();
            }
            let mut keep = vec![false; lines.len()];
            for (i, (_, _, job, fin)) in lines.iter().enumerate().rev() {
                let c = per_job.entry(job.clone()).or_insert(0);
                if *c < keep_per_job && min_finished.is_none_or(|m| *fin >= m) {
                    keep[i] = true;
                    *c += 1;
                }
            }
            let kept = keep.iter().filter(|k| **k).count() as u64;
            dropped += s.seal.rows - kept;
            if kept == 0 {
                empty_run.push(n);
                continue;
            }
            // An older kept row: the segments between it and the next kept one stay (emptied)
            // so the run of segments has no gap.
            for e in empty_run.drain(..) {
                self.empty_segment(e)?;
            }
            if kept == s.seal.rows {
                kept_bytes += s.seal.bytes;
                continue;
            }
            let mut out = bytes[..header_end].to_vec();
            let mut sup = Vec::new();
            for (i, (r, superseding, _, _)) in lines.iter().enumerate() {
                if keep[i] {
                    out.extend_from_slice(&bytes[r.clone()]);
                    sup.extend(*superseding);
                }
            }
            kept_bytes += out.len() as u64;
            let seal = Seal::over(n, &out, kept, sup);
            encode_line(&mut out, "segment seal", &seal)?;
            write_atomic(self.io(), &hdir, &s.path, &out)?;
        }
        // The oldest run of fully dropped segments goes, oldest first — after the mark that
        // says the segments below the first kept one were removed by retention (a crash in
        // between leaves segments the mark no longer requires: harmless).
        empty_run.sort_unstable();
        if let Some(last) = empty_run.last() {
            let mark = filefmt::first_segment_text(self.id(), last + 1)
                .map_err(|e| StoreError::Internal(format!("retention mark: {e}")))?;
            write_atomic(
                self.io(),
                &hdir,
                &hdir.join(filefmt::FIRST_SEGMENT_FILE),
                &mark,
            )?;
        }
        for e in empty_run {
            let p = segment_path(&self.store.dir, e);
            self.io().remove_file(&p).map_err(io_err(&p))?;
        }
        self.io().sync_dir(&hdir).map_err(io_err(&hdir))?;
        self.inner.history_compacted_len = self.history_growth();
        self.inner.history_kept_len = kept_bytes.max(super::AUTO_COMPACT_MIN_BYTES);
        Ok(dropped)
    }

    /// Replace sealed segment `n` by an empty one (header and seal).
    fn empty_segment(&mut self, n: u64) -> StoreResult<()> {
        let mut out = history_header(self.id(), n)?;
        let seal = Seal::over(n, &out, 0, Vec::new());
        encode_line(&mut out, "segment seal", &seal)?;
        let hdir = self.store.dir.join(HISTORY_DIR);
        write_atomic(self.io(), &hdir, &segment_path(&self.store.dir, n), &out)
    }

    /// The journal/history cross-check (truncation by hand): every job record that names a
    /// history position must find history at least that long, and the rows after a record's
    /// position must be ones a crash between a row and its record can leave — a run's end
    /// (or `abandoned`) only for the run the record still holds. A cut journal rolls records
    /// back to before runs whose rows are in history; a cut history loses rows records
    /// relied on. Either is corruption, never a torn tail to cut.
    ///
    /// The index knows only a record's first lease (its line's `head`); an `overlap: allow`
    /// job holds several, and a record write that failed after its rows landed (`ENOSPC` on
    /// the journal, then a stop before space returned) leaves rows of the other ones. So a
    /// job whose rows the first lease does not explain has its full record read, and is
    /// corrupt only if a row's run is none of the leases it holds. What tells a failed write
    /// from a journal cut by hand is exactly that: the row ends a run the record still holds
    /// (the claim's line is there, the end's is not) — a cut that removed the end's line and
    /// kept the claim's is indistinguishable from the failed write, and harmless: the run is
    /// finished from its row (its retry, the spool's replay, or the recovery of its lease).
    pub(super) fn cross_check(&self, open_rows: &[TailRow]) -> StoreResult<()> {
        let hpath = self.path(HISTORY_FILE);
        let jpath = self.path(super::JOURNAL_FILE);
        let top = self.inner.history_seg;
        let len = self.inner.history.len;
        let rows: Vec<filefmt::OpenRow<'_>> = open_rows
            .iter()
            .map(|r| filefmt::OpenRow {
                off: r.off,
                job: &r.job,
                run_id: r.run_id,
                ends_a_run: !matches!(r.status, Status::Missed | Status::Skipped) && !r.stale,
            })
            .collect();
        let heads = |more: &HashMap<String, Vec<Uuid>>| -> Vec<filefmt::CrossProblem> {
            let records = self.inner.jobs.iter().filter_map(|(name, c)| {
                let at = c.at?;
                Some(filefmt::RecordAt {
                    job: name,
                    leases: more.get(name).map_or(c.lease.as_slice(), |v| v.as_slice()),
                    seg: at.seg?,
                    off: at.off,
                })
            });
            filefmt::cross_check(top, len, records, &rows)
        };
        let mut more: HashMap<String, Vec<Uuid>> = HashMap::new();
        let first = heads(&more);
        for p in &first {
            if let filefmt::CrossProblem::RecordsLost { job, .. } = p
                && let Some(rec) = self.record(job)?
                && rec.rt.live_runs() > 1
            {
                more.insert(job.clone(), rec.rt.leases().map(|l| l.run_id).collect());
            }
        }
        // Only when a job's full record explained rows does the check run again.
        let problems = if more.is_empty() { first } else { heads(&more) };
        self.report_cross(problems, &hpath, &jpath, top, len)
    }

    /// The first of the cross-check's `problems` as [`StoreError::Corrupt`].
    fn report_cross(
        &self,
        problems: Vec<filefmt::CrossProblem>,
        hpath: &Path,
        jpath: &Path,
        top: u64,
        len: u64,
    ) -> StoreResult<()> {
        match problems.into_iter().next() {
            None => Ok(()),
            Some(filefmt::CrossProblem::HistoryCut { job, seg, off }) => Err(corrupt(
                hpath,
                0,
                0,
                format!(
                    "history ends at segment {top} byte {len} but the record of job '{job}' in {} was written after segment {seg} byte {off}: history was cut short (by hand or a faulty disk), not torn by a crash",
                    jpath.display()
                ),
            )),
            Some(filefmt::CrossProblem::RecordsLost { job, run_id, off }) => {
                let line = count_lines_before(self.inner.history.file(hpath)?, hpath, off)? + 1;
                // Name the job's line (red team 4: it said `jobs.journal:0:0`).
                let (path, no) = match self.inner.jobs.get(&job).and_then(|s| s.loc) {
                    Some(loc) => {
                        let (path, f) = self.line_file(loc)?;
                        let no = count_lines_before(f, &path, loc.off)? + 1;
                        (path, no)
                    }
                    None => (jpath.to_path_buf(), 0),
                };
                Err(corrupt(
                    &path,
                    no,
                    1,
                    format!(
                        "the record of job '{job}' is older than its run {run_id} ({}:{line}): records were lost from the journal (cut short by hand or a faulty disk, not torn by a crash); slots already run would run again",
                        hpath.display()
                    ),
                ))
            }
        }
    }
}

/// A sealed row as retention weighs it: its bytes, the run it supersedes for, job, end.
type RetainedLine = (std::ops::Range<usize>, Option<Uuid>, String, DateTime<Utc>);

/// Where a page stops: segment and the offset of the last row returned.
fn parse_token(t: &str) -> Option<(u64, u64)> {
    let (s, o) = t.split_once('.')?;
    Some((s.parse().ok()?, o.parse().ok()?))
}

/// A snapshot of history's shape taken under the lock; reads go on without it (appends only add
/// after the open segment's `len`; sealing and retention replace files by rename, and the cloned
/// descriptors keep reading what they opened).
struct View {
    open: Box<dyn IoFile>,
    open_len: u64,
    top: u64,
    sealed_open: bool,
}

impl FileStore {
    fn view(&self) -> StoreResult<View> {
        let l = self.lock()?;
        let hpath = self.path(HISTORY_FILE);
        Ok(View {
            open: l
                .inner
                .history
                .file(&hpath)?
                .try_clone()
                .map_err(io_err(&hpath))?,
            open_len: l.inner.history.len,
            top: l.inner.history_seg,
            sealed_open: l.inner.history_sealed_open,
        })
    }

    /// Newest-first rows matching `q`.
    pub(super) fn query_history(&self, q: &HistoryQuery) -> StoreResult<Vec<HistoryRow>> {
        Ok(self
            .query_positions(q, q.limit)?
            .into_iter()
            .map(|(r, _)| r)
            .collect())
    }

    /// One page and the token of the next one (when there are more rows).
    pub(super) fn query_page(&self, q: &HistoryQuery) -> StoreResult<HistoryPage> {
        if q.limit == 0 {
            return Ok(HistoryPage {
                rows: self.query_history(q)?,
                next: None,
            });
        }
        let mut rows = self.query_positions(q, q.limit.saturating_add(1))?;
        let more = rows.len() > q.limit;
        rows.truncate(q.limit);
        let next = if more {
            rows.last().map(|(_, (s, o))| format!("{s}.{o}"))
        } else {
            None
        };
        Ok(HistoryPage {
            rows: rows.into_iter().map(|(r, _)| r).collect(),
            next,
        })
    }

    /// Newest-first rows matching `q` with their positions, segment by segment. Unfiltered
    /// `offset` skips whole sealed segments by their seals' row counts (a deep page reads one
    /// segment, not every row above it); a page token (`q.before`) starts right at its row.
    fn query_positions(
        &self,
        q: &HistoryQuery,
        limit: usize,
    ) -> StoreResult<Vec<(HistoryRow, (u64, u64))>> {
        let v = self.view()?;
        let hpath = self.path(HISTORY_FILE);
        let (start_seg, start_off) = match &q.before {
            None => (v.top, u64::MAX),
            Some(t) => parse_token(t).filter(|(s, _)| *s <= v.top).ok_or_else(|| {
                StoreError::Refused(format!(
                    "'{t}' is not a page token of this store (tokens look like 12.34567 and come from a previous page)"
                ))
            })?,
        };
        let job_needle = q.job.as_ref().map(|j| format!("\"job\":{}", json_str(j)));
        let status_needle = q.status.map(|s| format!("\"status\":\"{}\"", s.as_str()));
        let run_needle = q.run_id.map(|r| r.to_string());
        let unfiltered = q.job.is_none()
            && q.status.is_none()
            && q.run_id.is_none()
            && q.since.is_none()
            && !q.with_diff;
        let limit = if limit == 0 { usize::MAX } else { limit };
        let mut out = Vec::new();
        let mut skip = q.offset;
        // Runs whose real end superseded an `abandoned` row (see `HistoryRow::supersedes_abandoned`):
        // that older row is hidden. The superseding row is always newer, so rows above a token
        // are looked at for it too (the open segment's lines, sealed segments' seals).
        let mut superseded: HashSet<Uuid> = HashSet::new();
        if start_seg < v.top || start_off != u64::MAX {
            if !v.sealed_open && start_seg < v.top {
                superseded.extend(scan_supersedes(&*v.open, &hpath, 0, v.open_len)?);
            }
            let newest_sealed = if v.sealed_open { v.top } else { v.top - 1 };
            for n in start_seg + 1..=newest_sealed {
                if let Some(s) = open_sealed(&*self.io, &self.dir, n)? {
                    superseded.extend(s.seal.supersedes);
                }
            }
        }
        let mut n = start_seg;
        while out.len() < limit && n > 0 {
            let sealed;
            let (f, path, end): (&dyn IoFile, PathBuf, u64) = if n == v.top && !v.sealed_open {
                (&*v.open, hpath.clone(), v.open_len)
            } else {
                match open_sealed(&*self.io, &self.dir, n)? {
                    Some(s) => {
                        sealed = s;
                        (&*sealed.file, sealed.path.clone(), sealed.seal.bytes)
                    }
                    None => break,
                }
            };
            let (from, whole) = if n == start_seg && start_off != u64::MAX {
                if start_off > end {
                    return Err(StoreError::Refused(format!(
                        "page token {n}.{start_off} is past the end of history segment {n}; retention rewrote it — start again from the first page"
                    )));
                }
                if n == start_seg && start_off < end {
                    superseded.extend(scan_supersedes(f, &path, start_off, end)?);
                }
                if start_off > 0 {
                    let mut c = [0u8; 1];
                    read_at(f, &path, start_off - 1, &mut c)?;
                    if c[0] != b'\n' {
                        return Err(StoreError::Refused(format!(
                            "page token {n}.{start_off} no longer points at a row (retention rewrote segment {n}); start again from the first page"
                        )));
                    }
                }
                (start_off, false)
            } else {
                (end, true)
            };
            if whole
                && unfiltered
                && skip > 0
                && let Some(s) = (n != v.top || v.sealed_open)
                    .then(|| open_sealed(&*self.io, &self.dir, n))
                    .transpose()?
                    .flatten()
                && s.seal.rows as usize <= skip
            {
                skip -= s.seal.rows as usize;
                superseded.extend(s.seal.supersedes);
                n -= 1;
                continue;
            }
            let mut it = Backwards::new(f, &path, from);
            while out.len() < limit {
                let Some((off, line)) = it.next_line()? else {
                    break;
                };
                if off == 0 {
                    // Line 1 is the segment's header (checked when it was opened or sealed).
                    continue;
                }
                if let Err((col, what)) = filefmt::verify_row(&line) {
                    let no = count_lines_before(f, &path, off)? + 1;
                    return Err(corrupt(&path, no, col, what));
                }
                if contains(&line, SUPERSEDES_NEEDLE)
                    && let Ok(r) = serde_json::from_slice::<HistoryRow>(&line)
                    && r.supersedes_abandoned
                {
                    superseded.insert(r.run_id);
                }
                // Paging without filters: every line is a row, so the rows `offset` skips need
                // no parse (their checksum was verified above).
                if skip > 0 && unfiltered {
                    skip -= 1;
                    continue;
                }
                let pre = job_needle
                    .as_ref()
                    .is_none_or(|nd| contains(&line, nd.as_bytes()))
                    && status_needle
                        .as_ref()
                        .is_none_or(|nd| contains(&line, nd.as_bytes()))
                    && run_needle
                        .as_ref()
                        .is_none_or(|nd| contains(&line, nd.as_bytes()));
                if !pre {
                    continue;
                }
                let row: HistoryRow = match serde_json::from_slice(&line) {
                    Ok(r) => r,
                    Err(e) => {
                        let no = count_lines_before(f, &path, off)? + 1;
                        return Err(json_err(&path, no, &e));
                    }
                };
                if q.job.as_ref().is_some_and(|j| *j != row.job)
                    || q.status.is_some_and(|s| s != row.status)
                    || q.run_id.is_some_and(|r| r != row.run_id)
                    || q.since.is_some_and(|s| row.finished_at < s)
                    || (q.with_diff && row.diff.is_none())
                    || (row.status == Status::Abandoned && superseded.contains(&row.run_id))
                {
                    continue;
                }
                if skip > 0 {
                    skip -= 1;
                    continue;
                }
                out.push((row, (n, off)));
            }
            n -= 1;
        }
        Ok(out)
    }
}

/// Run ids of the rows in `[from, to)` of `f` (whole lines) that supersede an `abandoned` row.
fn scan_supersedes(f: &dyn IoFile, path: &Path, from: u64, to: u64) -> StoreResult<Vec<Uuid>> {
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
const UNMARKED_SCAN_BYTES: u64 = 4 * 1024 * 1024;
/// The most [`Locked::rows_since_records`] reads back from history's end.
const RECORDLESS_SCAN_CAP: u64 = 64 * 1024 * 1024;
/// How much history [`Locked::rows_unaccounted`] reads to move a record's `rows_to` forward
/// when the operation writing it did not scan for the job anyway.
const ACCOUNT_SCAN_BYTES: u64 = 64 * 1024;

const SUPERSEDES_NEEDLE: &[u8] = b"\"supersedes_abandoned\":true";

pub(super) fn contains(hay: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(hay, needle).is_some()
}

/// Iterate one segment from a position backwards, line by line, block by block.
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

//! The history half of the file store: history sealed into checksummed segments (format 3),
//! the open segment's start-up verification, appends and sealing, newest-first paged queries,
//! the crash-recovery scan (`find_run_row`), the journal/history cross-check and retention.
//!
//! Must not touch: job records (see [`super::jobs`], [`super::record`]) beyond reading their history positions.
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
//! # Why this design
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

use std::collections::HashMap;
use std::path::Path;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::handle::Locked;
use super::layout::{BLOCK, HISTORY_DIR, HISTORY_FILE, segment_path};
use super::log::{
    AppendLog, check_id, complete_len, corrupt, count_lines_before, encode_line, io_err, json_err,
    missing, read_at, stat, write_atomic,
};
use super::record::Mark;
use super::segment::{RetainedLine, TailRow, history_header, open_sealed, parse_history_line};
use crate::model::{HistoryRow, Status};
use crate::store::filefmt::{self, Seal};
use crate::store::io::OpenMode;
use crate::store::{StoreError, StoreResult};

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
    pub(super) fn history_growth(&self) -> u64 {
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
        grown > super::layout::AUTO_COMPACT_MIN_BYTES && grown > self.inner.history_kept_len
    }

    /// Verify the open segment row by row (checksum and parse) — all of it: appends only ever go
    /// there, so nothing is appended after an unverified byte, and the segment bound keeps this
    /// flat in the size of history. Returns its rows for the cross-check.
    ///
    /// An open segment far over the bound (written by hand or by a tool, not by cronsole) is
    /// verified over its last [`super::layout::SEGMENT_BYTES`] only, and marked: the first append seals
    /// it first, which parses every row of it, so the invariant holds and a read-only open
    /// stays fast.
    pub(super) fn verify_open_segment(&mut self) -> StoreResult<Vec<TailRow>> {
        let hpath = self.path(HISTORY_FILE);
        let len = self.inner.history.len;
        let window = super::layout::SEGMENT_BYTES.max(self.store.segment_bytes);
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

    pub(super) fn open_header_len(&self) -> StoreResult<u64> {
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
    pub(super) fn start_next_segment(&mut self) -> StoreResult<()> {
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
    pub(super) fn scan_plan(&self, mark: Option<Mark>) -> StoreResult<Vec<(u64, u64)>> {
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
    pub(super) fn first_kept_segment(&self) -> StoreResult<(u64, bool)> {
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
    /// deleted oldest segment would otherwise look like retention and its rows would be
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
    pub(super) fn write_first_mark(&self) -> StoreResult<()> {
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
            .map_err(StoreError::encode("the retention mark"))?;
        self.io().create_dir_all(&hdir).map_err(io_err(&hdir))?;
        write_atomic(self.io(), &hdir, &mpath, &mark)
    }

    /// The oldest segment still there (probing down from the open one).
    pub(super) fn oldest_segment(&self) -> StoreResult<u64> {
        let mut n = self.inner.history_seg;
        while n > 1 && stat(self.io(), &segment_path(&self.store.dir, n - 1))?.is_some() {
            n -= 1;
        }
        Ok(n)
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
                .map_err(StoreError::encode("the retention mark"))?;
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
        self.inner.history_kept_len = kept_bytes.max(super::layout::AUTO_COMPACT_MIN_BYTES);
        Ok(dropped)
    }

    /// Replace sealed segment `n` by an empty one (header and seal).
    pub(super) fn empty_segment(&mut self, n: u64) -> StoreResult<()> {
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
        let jpath = self.path(super::layout::JOURNAL_FILE);
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

    /// The first of the cross-check's `problems` as [`OpenError::Corrupt`](crate::store::OpenError::Corrupt).
    pub(super) fn report_cross(
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
                // Name the job's line (not `jobs.journal:0:0`): the operator must find the record.
                let (path, no) = match self.inner.jobs.get(&job).and_then(|s| s.loc) {
                    Some(loc) => {
                        let (path, f, at) = self.line_file(loc)?;
                        let no = count_lines_before(f, &path, at.off)? + 1;
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

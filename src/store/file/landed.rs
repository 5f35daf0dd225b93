//! Rows in history that a job record may not account for yet: a run's own row found from its
//! lease's mark, rows a failed or dead writer left after a job's record, generated rows past
//! the store's accounted mark, and this handle's own failed writes.
//!
//! Owns: the bounded scans behind recovery, claims and completions (`find_run_rows`,
//! `rows_since_records`, `generated_after`, `unacked_rows`). Must not touch: what those rows
//! mean for a record (the plans decide), appending or sealing (`history.rs`).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use uuid::Uuid;

use super::handle::Locked;
use super::layout::{BLOCK, HISTORY_FILE, UNACKED_RANGES};
use super::log::{read_at, stat};
use super::record::Mark;
use super::segment::{
    ACCOUNT_SCAN_BYTES, RECORDLESS_SCAN_CAP, Sealed, UNMARKED_SCAN_BYTES, contains, json_str,
    open_sealed,
};
use crate::model::{HistoryRow, Status};
use crate::store::StoreResult;
use crate::store::filefmt::{self};
use crate::store::io::IoFile;
use crate::store::rules;

impl Locked<'_> {
    /// The rows an earlier attempt of completion `c` put in history while the job's record
    /// still holds its run (the record's write failed after the row landed — `ENOSPC` or `EIO`
    /// on the journal — in another handle or process: a spooled completion replayed, see
    /// [`crate::store::Store::complete_recorded`]): the run's own row (its owner's, with its status;
    /// never a recoverer's `abandoned` row) and the job's rows after it, scanned from the
    /// claim's mark. `None` when the record no longer holds the run (the earlier attempt's
    /// record landed, or the run was recovered from its row): nothing is to be written. Empty
    /// when `landed` (this handle's failed persists) already has the row, or none is found.
    pub(super) fn landed_run_rows(
        &mut self,
        c: &crate::store::Completion,
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
}

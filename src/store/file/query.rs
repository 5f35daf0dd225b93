//! History queries: newest-first pages over the open and sealed segments, read from a view of
//! history taken under the lock and continued without it.
//!
//! Owns: `FileStore::query_history`, `FileStore::query_page` and the page token (a history
//! position). Must not touch: appends, sealing, retention (`history.rs`), job records.

use crate::store::OperationError;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

use uuid::Uuid;

use super::handle::FileStore;
use super::layout::HISTORY_FILE;
use super::log::{corrupt, count_lines_before, io_err, json_err, read_at};
use super::segment::{
    Backwards, SUPERSEDES_NEEDLE, contains, json_str, open_sealed, scan_supersedes,
};
use crate::model::{HistoryRow, Status};
use crate::store::filefmt::{self};
use crate::store::io::IoFile;
use crate::store::{HistoryPage, HistoryQuery, StoreError, StoreResult};

/// Where a page stops: segment and the offset of the last row returned.
pub(super) fn parse_token(t: &str) -> Option<(u64, u64)> {
    let (s, o) = t.split_once('.')?;
    Some((s.parse().ok()?, o.parse().ok()?))
}

/// A snapshot of history's shape taken under the lock; reads go on without it (appends only add
/// after the open segment's `len`; sealing and retention replace files by rename, and the cloned
/// descriptors keep reading what they opened).
pub(super) struct View {
    pub(super) open: Box<dyn IoFile>,
    pub(super) open_len: u64,
    pub(super) top: u64,
    pub(super) sealed_open: bool,
}

impl FileStore {
    pub(super) fn view(&self) -> StoreResult<View> {
        let l = self.lock_for(&[])?;
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
    pub(super) fn query_positions(
        &self,
        q: &HistoryQuery,
        limit: usize,
    ) -> StoreResult<Vec<(HistoryRow, (u64, u64))>> {
        let v = self.view()?;
        let hpath = self.path(HISTORY_FILE);
        let (start_seg, start_off) = match &q.before {
            None => (v.top, u64::MAX),
            Some(t) => parse_token(t).filter(|(s, _)| *s <= v.top).ok_or_else(|| {
                StoreError::Operation(OperationError::BadPageToken(format!(
                    "'{t}' is not a page token of this store (tokens look like 12.34567 and come from a previous page)"
                )))
            })?,
        };
        let filter = Filter::new(q);
        let unfiltered = filter.unfiltered;
        let limit = if limit == 0 { usize::MAX } else { limit };
        let mut out = Vec::new();
        let mut skip = q.offset;
        // Runs whose real end superseded an `abandoned` row (see `HistoryRow::supersedes_abandoned`):
        // that older row is hidden. The superseding row is always newer, so rows above a token
        // are looked at for it too (the open segment's lines, sealed segments' seals).
        let mut superseded = self.superseded_above(&v, &hpath, start_seg, start_off)?;
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
                    return Err(StoreError::Operation(OperationError::BadPageToken(
                        format!(
                            "page token {n}.{start_off} is past the end of history segment {n}; retention rewrote it — start again from the first page"
                        ),
                    )));
                }
                if n == start_seg && start_off < end {
                    superseded.extend(scan_supersedes(f, &path, start_off, end)?);
                }
                if start_off > 0 {
                    let mut c = [0u8; 1];
                    read_at(f, &path, start_off - 1, &mut c)?;
                    if c[0] != b'\n' {
                        return Err(StoreError::Operation(OperationError::BadPageToken(
                            format!(
                                "page token {n}.{start_off} no longer points at a row (retention rewrote segment {n}); start again from the first page"
                            ),
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
            // A superseding row hides the older rows of its run, never itself: a recovery that
            // rewrote a dead recoverer's `abandoned` row is `abandoned` too, and is shown
            // unless a still newer row of the run (its late real end) supersedes it.
            let mut newer: Option<Uuid> = None;
            while out.len() < limit {
                superseded.extend(newer.take());
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
                    newer = Some(r.run_id);
                }
                // Paging without filters: every line is a row, so the rows `offset` skips need
                // no parse (their checksum was verified above).
                if skip > 0 && unfiltered {
                    skip -= 1;
                    continue;
                }
                if !filter.may_match(&line) {
                    continue;
                }
                let row: HistoryRow = match serde_json::from_slice(&line) {
                    Ok(r) => r,
                    Err(e) => {
                        let no = count_lines_before(f, &path, off)? + 1;
                        return Err(json_err(&path, no, &e));
                    }
                };
                if !filter.matches(&row, &superseded) {
                    continue;
                }
                if skip > 0 {
                    skip -= 1;
                    continue;
                }
                out.push((row, (n, off)));
            }
            superseded.extend(newer);
            n -= 1;
        }
        Ok(out)
    }

    /// The runs whose `abandoned` rows are hidden by rows above the page's start (the open
    /// segment's lines, sealed segments' seals): a superseding row is always newer than the
    /// row it supersedes.
    fn superseded_above(
        &self,
        v: &View,
        hpath: &Path,
        start_seg: u64,
        start_off: u64,
    ) -> StoreResult<HashSet<Uuid>> {
        let mut superseded: HashSet<Uuid> = HashSet::new();
        if start_seg < v.top || start_off != u64::MAX {
            if !v.sealed_open && start_seg < v.top {
                superseded.extend(scan_supersedes(&*v.open, hpath, 0, v.open_len)?);
            }
            let newest_sealed = if v.sealed_open { v.top } else { v.top - 1 };
            for n in start_seg + 1..=newest_sealed {
                if let Some(s) = open_sealed(&*self.io, &self.dir, n)? {
                    superseded.extend(s.seal.supersedes);
                }
            }
        }
        Ok(superseded)
    }
}

/// What a history query asks for: byte needles a line must contain before it is parsed, and
/// the test of the parsed row.
struct Filter<'q> {
    q: &'q HistoryQuery,
    job: Option<String>,
    status: Option<String>,
    run: Option<String>,
    /// No filter at all: every line is a row of the result (`offset` skips without parsing).
    unfiltered: bool,
}

impl<'q> Filter<'q> {
    fn new(q: &'q HistoryQuery) -> Self {
        Filter {
            q,
            job: q.job.as_ref().map(|j| format!("\"job\":{}", json_str(j))),
            status: q.status.map(|s| format!("\"status\":\"{}\"", s.as_str())),
            run: q.run_id.map(|r| r.to_string()),
            unfiltered: q.job.is_none()
                && q.status.is_none()
                && q.run_id.is_none()
                && q.since.is_none()
                && !q.with_diff,
        }
    }

    /// The line holds every needle (it may be a match; parse it to know).
    fn may_match(&self, line: &[u8]) -> bool {
        [&self.job, &self.status, &self.run]
            .into_iter()
            .all(|nd| nd.as_ref().is_none_or(|nd| contains(line, nd.as_bytes())))
    }

    /// The row is one the query returns (an `abandoned` row a later row superseded is not).
    fn matches(&self, row: &HistoryRow, superseded: &HashSet<Uuid>) -> bool {
        let q = self.q;
        !(q.job.as_ref().is_some_and(|j| *j != row.job)
            || q.status.is_some_and(|s| s != row.status)
            || q.run_id.is_some_and(|r| r != row.run_id)
            || q.since.is_some_and(|s| row.finished_at < s)
            || (q.with_diff && row.diff.is_none())
            || (row.status == Status::Abandoned && superseded.contains(&row.run_id)))
    }
}

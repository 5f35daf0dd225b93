//! The jobs half of the file store: the snapshot + journal pair (loading, tail reads, appends;
//! compaction is `compact.rs`'s, off the lock, and the one-step form here serves tests), the
//! per-handle index of every job and the parsed records an operation works on. The line format
//! is `record.rs`'s; a batch of definitions (`apply`) is `apply.rs`'s.
//!
//! # The index, and records read on demand
//! A handle keeps, per job, only a [`Slim`] entry: where its newest line lives (snapshot or
//! journal, offset, length), its wake-up instant, its history position (`at`, for the
//! journal/history cross-check) and the run id of its lease — about 130 bytes with the name and
//! its place in the wake-up order, where the parsed record with its compiled schedule was about
//! 3 KB. The entries live in a [`super::table::JobTable`]: one sorted run of fixed-size entries
//! with the names in one arena, so loading a million of them allocates nothing per job. An
//! operation that needs a job's record (claim, complete, renew, pause, trigger, edit, `job`,
//! `jobs_page`) reads its line by offset, verifies its checksum and parses it
//! ([`Locked::load`]); those parsed records (`Inner::hot`) live until the operation ends (the
//! lock is released), so the handle never holds more definitions than one operation touched.
//!
//! Opening must not parse every definition either. Every job line this release writes starts
//! with a small `head` member — `{"head":{"name":…,"wake":…,"lease":…,"at":…,"chained":true},
//! "job":{…},…,"crc32":…}` — which the writer computes from the record it encodes (the
//! wake-up is a function of the record alone, [`plan::claim::wakeup`]). The head stays in the line,
//! inside its checksum: the line alone says what the index must hold, so the snapshot and the
//! journal remain the whole truth.
//!
//! Opening does not read the snapshot's lines either when `jobs.index` belongs to it (reading
//! and CRC-checking 1.2 GB at 1 000 000 jobs would be the whole of the console's first frame). That file is a cache of the snapshot's heads (name, place, the line's checksum, the
//! head's fields), written beside each snapshot and trusted only when bound to it; anything
//! else falls back to reading every line as before (see [`super::index`]). An earlier round
//! chose heads inside the lines *over* such a sidecar, because a sidecar could disagree with its
//! records or go stale after a crash between two renames, and because every open then verified
//! every line. What changed: the heads stay in the lines (a scan can always rebuild the index,
//! and a writer does), the sidecar is bound to one snapshot (store id, generation, length,
//! header CRC) so a stale one is never used, and each index entry carries its line's checksum,
//! so a line read later is verified against both its own checksum and the index's. The price:
//! an open through the index no longer finds a damaged snapshot line it does not read. It is
//! found by the first operation that reads that line (a claim, `describe`, `jobs`, an edit, a
//! compaction — which copies only verified lines, so damage is never carried into a new
//! snapshot), by `cronsole check`, and by any open without a valid index.
//!
//! Loading without the index reads each line, verifies its CRC over the whole line and parses
//! the head only. A line without a head (written by an earlier release, or the format-2
//! upgrade) is parsed whole, as before; the next compaction writes it with a head. The job JSON
//! after the head is checked when the record is read (and by `cronsole check`, which parses
//! every line).
//!

use crate::store::BackendError;
use std::path::Path;

use super::handle::{Inner, Locked, set_index};
use super::index::{self, IndexWriter};
use super::layout::{BLOCK, JOURNAL_FILE, SNAPSHOT_FILE};
use super::lines::{
    PAGE_RUN_GAP, PAGE_RUN_MAX, RawPage, RawSrc, entry_of, for_each_line, for_each_piece,
    index_line, line_len,
};
use super::log::{
    AppendLog, SPILL, complete_len, corrupt, count_lines_before, header_line, io_err, missing,
    read_at, write_atomic,
};
use super::record::{
    Cached, Entry, Idx, JournalAcct, Loc, Slim, journal_header, journal_is_stale_with, later_mark,
    line_index, line_loc, snapshot_header, verify_at,
};
use super::table::{self};
use crate::model::JobRecord;
use crate::store::filefmt::{self};
use crate::store::io::{IoFile, OpenMode};
use crate::store::{StoreError, StoreResult};
#[cfg(test)]
use {
    super::lines::LineReader,
    super::log::AtomicFile,
    super::record::{HEAD_KEY, index_of},
};

impl Locked<'_> {
    /// Reload the index from the files: the snapshot (through `jobs.index` when it belongs to
    /// it), then the journal's lines.
    /// A point handle (see `point.rs`) reads only the files' headers instead, and turns into a
    /// handle of every job when the files do not allow a point read.
    pub(super) fn full_reload(&mut self) -> StoreResult<()> {
        let cut_owed = self.reset_cache();
        if self.inner.point.is_some() {
            if self.point_load(cut_owed)? {
                return Ok(());
            }
            self.inner.point = None;
            self.reset_cache();
        }
        let (generation, absorbed) = self.load_snapshot()?;
        self.load_journal(generation, absorbed, cut_owed, true)
    }

    /// Forget every job of the cache; returns the journal whose failed append's cut is still
    /// owed (not known durable), which stays owed across the reload when it is the same file.
    pub(super) fn reset_cache(&mut self) -> Option<u64> {
        let inner = &mut *self.inner;
        inner.jobs.clear();
        inner.chained.clear();
        inner.hot.clear();
        inner.snapshot = None;
        inner.followed = None;
        inner.loaded = false;
        let cut_owed = inner.journal.cut_unsynced.then_some(inner.journal.ino);
        inner.journal = AppendLog::default();
        inner.journal_stale = false;
        cut_owed
    }

    /// Index every job of the snapshot; returns its generation and what it absorbed.
    fn load_snapshot(&mut self) -> StoreResult<(u64, Option<filefmt::Absorbed>)> {
        let io = &*self.store.io;
        let id = self.store.store_id.as_str();
        let inner = &mut *self.inner;
        let spath = self.store.path(SNAPSHOT_FILE);
        let (sf, slen) = open_snapshot(io, &spath)?;
        let mut generation = 0;
        let mut absorbed = None;
        // The header first: it binds the index (`jobs.index`, see [`super::index`]), which
        // spares reading every line when it belongs to this snapshot.
        let mut first = vec![0u8; slen.min(BLOCK) as usize];
        read_at(&*sf, &spath, 0, &mut first)?;
        let mut header = None;
        let mut index_state = Ok(false);
        if let Some(end) = memchr::memchr(b'\n', &first).filter(|e| *e > 0) {
            (generation, absorbed) = snapshot_header(&spath, &first[..end], id)?;
            let bind = index::binding(generation, &first[..end], slen);
            index_state = load_index(io, &self.store.dir, id, &bind, inner);
            first.truncate(end + 1);
            header = Some(first);
        }
        if index_state != Ok(true) {
            for_each_line(&*sf, &spath, slen, |no, off, line| {
                if line.is_empty() {
                    return Err(corrupt(&spath, no, 1, "empty line"));
                }
                if no == 1 {
                    (generation, absorbed) = snapshot_header(&spath, line, id)?;
                    return Ok(());
                }
                let len = line_len(&spath, no, line)?;
                let loc = Loc {
                    journal: false,
                    off,
                    len,
                    crc: filefmt::line_crc(line),
                };
                index_line(inner, &spath, no, loc, line)
            })?;
            // A writer replaces a missing (large snapshot), stale or damaged index; a read-only
            // command never writes.
            if let Some(header) = header
                && self.store.writer
                && (slen >= self.store.index_min_bytes || index_state.is_err())
            {
                let ipath = self.store.path(super::layout::INDEX_FILE);
                let min = self.store.index_min_bytes;
                match rewrite_index(
                    io,
                    &self.store.dir,
                    &ipath,
                    id,
                    generation,
                    &header,
                    slen,
                    inner,
                    min,
                ) {
                    Ok(true) => tracing::info!("wrote {} for the snapshot", ipath.display()),
                    Ok(false) => {}
                    Err(e) => tracing::warn!(
                        "could not write {} (opening reads the whole snapshot until one is written): {e}",
                        ipath.display()
                    ),
                }
            }
        }
        inner.snapshot = Some(sf);
        inner.generation = generation;
        inner.snapshot_len = slen;

        Ok((generation, absorbed))
    }

    /// Index the journal's lines (unless it is the stale leftover of the previous generation)
    /// and keep it open for appends.
    /// A point handle passes `lines: false`: it reads the lines of the jobs it names only
    /// (`point.rs`).
    pub(super) fn load_journal(
        &mut self,
        generation: u64,
        absorbed: Option<filefmt::Absorbed>,
        cut_owed: Option<u64>,
        lines: bool,
    ) -> StoreResult<()> {
        let io = &*self.store.io;
        let id = self.store.store_id.as_str();
        let inner = &mut *self.inner;
        let jpath = self.store.path(JOURNAL_FILE);
        let f = match io.open(&jpath, OpenMode::Append) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(missing(
                    &jpath,
                    "it holds every change since the last snapshot; falling back to the snapshot would run already-run slots again",
                ));
            }
            Err(e) => return Err(StoreError::io(jpath, e)),
        };
        let m = f.metadata().map_err(io_err(&jpath))?;
        let len = complete_len(&jpath, &*f, m.len)?;
        if len == 0 {
            return Err(corrupt(
                &jpath,
                1,
                1,
                "journal is empty: its header line is missing",
            ));
        }
        // The header line (a few dozen bytes; a longer first line fails to parse below).
        let mut first = vec![0u8; len.min(BLOCK) as usize];
        read_at(&*f, &jpath, 0, &mut first)?;
        let end = memchr::memchr(b'\n', &first).unwrap_or(first.len());
        let stale = journal_is_stale_with(&jpath, &first[..end], id, generation, absorbed, |n| {
            if n > len {
                return Ok(None);
            }
            let mut crc = filefmt::Crc32::default();
            for_each_piece(&*f, &jpath, n, |piece| {
                crc.update(piece);
                Ok(())
            })?;
            Ok(Some(crc.finish()))
        })?;
        if let Ok(h) = serde_json::from_slice::<JournalAcct>(&first[..end]) {
            inner.acct = later_mark(inner.acct, h.acct);
        }
        // A stale journal's lines before `from` are in the snapshot; lines past it were
        // appended while the compaction that absorbed them ran (see `compact.rs`).
        let from = stale.unwrap_or(0);
        if lines && from < len {
            // Journal lines are read a piece at a time too: it may grow to twice the snapshot.
            for_each_line(&*f, &jpath, len, |no, off, line| {
                if no == 1 || off < from {
                    return Ok(());
                }
                let len = line_len(&jpath, no, line)?;
                let loc = Loc {
                    journal: true,
                    off,
                    len,
                    crc: None,
                };
                index_line(inner, &jpath, no, loc, line)
            })?;
        }
        let cut_unsynced = cut_owed == Some(m.ino);
        inner.journal = AppendLog {
            file: Some(f),
            ino: m.ino,
            len,
            cut_unsynced,
        };
        inner.journal_stale = stale.is_some();
        inner.journal_absorbed = from;
        inner.names_unsynced = true;
        inner.loaded = true;
        Ok(())
    }

    /// The file that holds the line at `loc`, and `loc` with its offset in that file (they
    /// differ after a followed compaction, see `follow.rs`).
    pub(super) fn line_file(
        &self,
        loc: Loc,
    ) -> StoreResult<(std::path::PathBuf, &dyn IoFile, Loc)> {
        if loc.journal {
            let path = self.path(JOURNAL_FILE);
            let (f, at) = self.inner.journal_at(&path, loc)?;
            Ok((path, f, at))
        } else {
            let path = self.path(SNAPSHOT_FILE);
            let f =
                self.inner.snapshot.as_deref().ok_or_else(|| {
                    StoreError::Backend(BackendError::NotOpen { path: path.clone() })
                })?;
            Ok((path, f, loc))
        }
    }

    /// The entry of job `name` from its line: read, verified, parsed, and checked to be that
    /// job's.
    pub(super) fn read_entry(&self, name: &str, slim: &Slim) -> StoreResult<Entry> {
        let loc = line_loc(name, slim)?;
        let (path, f, at) = self.line_file(loc)?;
        let mut buf = vec![0u8; loc.len as usize];
        read_at(f, &path, at.off, &mut buf)?;
        self.entry_of(name, loc, &buf)
    }

    /// The entry of job `name` from `line`, the bytes read at `loc` (without the newline): its
    /// checksum verified, parsed, and checked to be that job's. Errors name the line's number.
    pub(super) fn entry_of(&self, name: &str, loc: Loc, line: &[u8]) -> StoreResult<Entry> {
        let (path, f, at) = self.line_file(loc)?;
        if let Err((col, what)) = verify_at(line, loc) {
            let no = count_lines_before(f, &path, at.off)? + 1;
            return Err(corrupt(&path, no, col, what));
        }
        entry_of(&path, f, at, name, line)
    }

    /// Make sure `Inner::hot` holds job `name`'s parsed record (read from its line on first use
    /// in this operation). `false`: no such job.
    pub(super) fn load(&mut self, name: &str) -> StoreResult<bool> {
        if self.inner.hot.contains_key(name) {
            return Ok(true);
        }
        let Some(slim) = self.inner.jobs.get(name) else {
            return Ok(false);
        };
        let digest = slim.def;
        let e = self.read_entry(name, slim)?;
        #[cfg(test)]
        {
            self.inner.records_loaded += 1;
        }
        self.inner.hot.insert(
            name.to_string(),
            Cached::from_entry(e).knowing_digest(digest),
        );
        Ok(true)
    }

    /// A copy of job `name`'s record (from `hot`, else read from its line and not kept).
    pub(super) fn record(&self, name: &str) -> StoreResult<Option<JobRecord>> {
        if let Some(c) = self.inner.hot.get(name) {
            return Ok(Some(c.rec.clone()));
        }
        match self.inner.jobs.get(name) {
            Some(slim) => Ok(Some(self.read_entry(name, slim)?.job)),
            None => Ok(None),
        }
    }

    /// Call `each` on the records of the jobs named after `after` (all when `None`), in name
    /// order, until it returns `false`. Records are read a page at a time
    /// ([`Locked::page_records`]) and not kept.
    pub(super) fn each_record(
        &self,
        after: Option<&str>,
        mut each: impl FnMut(JobRecord) -> bool,
    ) -> StoreResult<()> {
        const STEP: usize = 256;
        let mut from = after.map(str::to_string);
        loop {
            let page = self.page_records(from.as_deref(), STEP)?;
            let next = match page.last() {
                Some(r) if page.len() == STEP => Some(r.def.name.clone()),
                _ => None,
            };
            for r in page {
                if !each(r) {
                    return Ok(());
                }
            }
            match next {
                Some(n) => from = Some(n),
                None => return Ok(()),
            }
        }
    }

    /// Up to `limit` records of the jobs named after `after` (from the first when `None`), in
    /// name order ([`Locked::page_lines`] parsed here, each line verified, parsed and checked to
    /// be its job's exactly as [`Locked::record`] does, errors naming the line). Nothing is kept.
    pub(super) fn page_records(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> StoreResult<Vec<JobRecord>> {
        self.page_lines(after, limit)?
            .parse_with(|name, loc, line| self.entry_of(name, loc, line))
    }

    /// The lines of up to `limit` jobs named after `after` (from the first when `None`), in
    /// name order: one page of `jobs --json`, which streams a million jobs a page at a time. A record in `hot` is copied;
    /// the others' lines are read in a few large reads rather than one `pread` each: sorted by
    /// file and offset and read in runs ([`PAGE_RUN_MAX`] bytes at most, lines at most
    /// [`PAGE_RUN_GAP`] apart; a compacted snapshot is in name order, so a page is mostly one
    /// run). Nothing is parsed: the caller may do that after releasing the lock.
    pub(super) fn page_lines(&self, after: Option<&str>, limit: usize) -> StoreResult<RawPage> {
        self.page_lines_in_runs(after, limit, PAGE_RUN_MAX, PAGE_RUN_GAP)
    }

    /// [`Locked::page_lines`] with the run limits given (tests read a page in many runs).
    pub(super) fn page_lines_in_runs(
        &self,
        after: Option<&str>,
        limit: usize,
        run_max: u64,
        run_gap: u64,
    ) -> StoreResult<RawPage> {
        let mut page = RawPage::default();
        // (line, its job's position in the page), then sorted by where the line lives.
        let mut want: Vec<(Loc, usize)> = Vec::new();
        for (name, slim) in self.inner.jobs.iter_after(after).take(limit) {
            let src = match self.inner.hot.get(name) {
                Some(c) => RawSrc::Record(Box::new(c.rec.clone())),
                None => {
                    let loc = line_loc(name, slim)?;
                    want.push((loc, page.items.len()));
                    RawSrc::Line { loc, at: 0 }
                }
            };
            page.items.push((name.to_string(), src));
        }
        want.sort_unstable_by_key(|(l, _)| (l.journal, l.off));
        let mut k = 0;
        while k < want.len() {
            let first = want[k].0;
            let start = first.off;
            let mut end = start + u64::from(first.len);
            let mut j = k + 1;
            while let Some(&(l, _)) = want.get(j) {
                let l_end = l.off + u64::from(l.len);
                if l.journal != first.journal
                    || (l.journal && !self.inner.same_journal(l.off, start))
                    || l.off > end + run_gap
                    || l_end - start > run_max
                {
                    break;
                }
                end = end.max(l_end);
                j += 1;
            }
            let (path, f, at) = self.line_file(first)?;
            let base = page.buf.len();
            page.buf.resize(base + (end - start) as usize, 0);
            read_at(f, &path, at.off, &mut page.buf[base..])?;
            for &(loc, i) in &want[k..j] {
                if let RawSrc::Line { at, .. } = &mut page.items[i].1 {
                    *at = base + (loc.off - start) as usize;
                }
            }
            k = j;
        }
        Ok(page)
    }

    /// Replace the journal with one of the current generation (new inode): empty, or holding
    /// the lines of a stale journal past what the snapshot absorbed.
    pub(super) fn new_journal(&mut self) -> StoreResult<()> {
        let jpath = self.path(JOURNAL_FILE);
        let mut bytes = journal_header(self.inner.generation, self.id(), self.inner.acct)?;
        // Whatever this handle followed is behind it: every entry is in these files.
        self.inner.followed = None;
        let from = self.inner.journal_absorbed;
        let tail = self.inner.journal.len.saturating_sub(from);
        let carried = self.inner.journal_stale && from > 0 && tail > 0;
        let shift = bytes.len() as u64;
        if carried {
            let f = self.inner.journal.file(&jpath)?;
            let at = bytes.len();
            bytes.resize(at + tail as usize, 0);
            read_at(f, &jpath, from, &mut bytes[at..])?;
        }
        write_atomic(self.io(), &self.store.dir, &jpath, &bytes)?;
        let f = self
            .io()
            .open(&jpath, OpenMode::Append)
            .map_err(io_err(&jpath))?;
        let m = f.metadata().map_err(io_err(&jpath))?;
        self.inner.journal = AppendLog {
            file: Some(f),
            ino: m.ino,
            len: m.len,
            cut_unsynced: false,
        };
        self.inner.journal_stale = false;
        self.inner.journal_absorbed = 0;
        if carried {
            // The carried lines moved: from `from` in the old journal to `shift` in this one.
            let moved: Vec<(String, Slim)> = self
                .inner
                .jobs
                .iter()
                .filter(|(_, s)| s.loc.is_some_and(|l| l.journal))
                .map(|(n, s)| (n.to_string(), s.clone()))
                .collect();
            for (name, mut slim) in moved {
                if let Some(l) = slim.loc.as_mut() {
                    l.off = l.off - from + shift;
                }
                self.inner.jobs.set(&name, slim);
            }
        }
        Ok(())
    }

    pub(super) fn read_journal_tail(&mut self, file_len: u64) -> StoreResult<()> {
        let jpath = self.path(JOURNAL_FILE);
        let start = self.inner.journal.len;
        let f = self.inner.journal.file(&jpath)?;
        let len = complete_len(&jpath, f, file_len)?;
        if len <= start {
            return Ok(());
        }
        let mut bytes = vec![0u8; (len - start) as usize];
        read_at(f, &jpath, start, &mut bytes)?;
        let mut parsed = Vec::new();
        let mut off = start;
        for line in bytes.split_inclusive(|b| *b == b'\n') {
            let body = &line[..line.len() - 1];
            let at_line = |parsed: usize| -> StoreResult<u64> {
                Ok(count_lines_before(f, &jpath, start)? + parsed as u64 + 1)
            };
            let (name, idx) = match line_index(body) {
                Ok(v) => v,
                Err((col, what)) => return Err(corrupt(&jpath, at_line(parsed.len())?, col, what)),
            };
            let Ok(len) = u32::try_from(body.len()) else {
                return Err(corrupt(
                    &jpath,
                    at_line(parsed.len())?,
                    1,
                    "job line is over 4 GiB",
                ));
            };
            parsed.push((
                name,
                Loc {
                    journal: true,
                    off: self.inner.journal_off(off),
                    len,
                    crc: None,
                },
                idx,
            ));
            off += line.len() as u64;
        }
        let inner = &mut *self.inner;
        for (name, loc, idx) in parsed {
            // Another process rewrote the job: a record parsed earlier is stale.
            inner.hot.remove(&name);
            set_index(inner, &name, Some(loc), idx);
        }
        inner.journal.len = len;
        Ok(())
    }

    /// fdatasync the journal when it holds lines this handle did not make durable (another
    /// process's, possibly in the page cache only): history rows about to be written rely on
    /// them (a recovery's `abandoned` row on a lease line, a completion on its claim line), and
    /// a power loss must not keep such a row while taking back the line it relies on — the
    /// next open would find a record older than its run and refuse the store.
    pub(super) fn sync_journal(&mut self) -> StoreResult<()> {
        if self.inner.journal.cut_unsynced {
            // A failed journal append of this handle was cut back, but the cut is not durable:
            // the rows about to be written rely on those lines staying gone.
            let jpath = self.path(JOURNAL_FILE);
            self.inner.journal.sync_cut(&jpath)?;
            let j = &self.inner.journal;
            self.inner.journal_synced = (j.ino, j.len);
            return Ok(());
        }
        let j = &self.inner.journal;
        if j.file.is_none() || self.inner.journal_synced == (j.ino, j.len) {
            return Ok(());
        }
        let jpath = self.path(JOURNAL_FILE);
        j.file(&jpath)?.sync_data().map_err(io_err(&jpath))?;
        self.inner.journal_synced = (j.ino, j.len);
        Ok(())
    }

    /// Append the named records to the journal (written a piece at a time, one fdatasync),
    /// point the index at their new lines, and plan a compaction when the journal outgrew the
    /// snapshot. `release`: each record leaves `hot` once its line is encoded (see
    /// [`Self::persist_with`]).
    pub(super) fn append_jobs(&mut self, names: &[String], release: bool) -> StoreResult<()> {
        if names.is_empty() {
            return Ok(());
        }
        if self.inner.journal_stale {
            self.new_journal()?;
        }
        let jpath = self.path(JOURNAL_FILE);
        let at = self.durable_mark()?;
        // History was appended first: its end now is past every row these records rely on.
        // `rows_to` moves there only for records whose rows since their old `rows_to` are
        // accounted for (see `Locked::rows_unaccounted`).
        let rows_to = self.mark_now();
        // The store-wide accounted mark moves to history's end only when this operation knows
        // every generated row after the old one is accounted for by a record (its own rows are,
        // by the records written here); otherwise the old mark is carried (see `Inner::acct`).
        let acct = if self.inner.acct_clean {
            Some(rows_to)
        } else {
            later_mark(self.inner.acct, self.inner.acct_upto)
        };
        let keep = self.rows_unaccounted(names)?;
        let base = self.inner.journal.len;
        let mut placed = Vec::with_capacity(names.len());
        // Only the append's last line carries the mark: a torn append (a crash mid-write)
        // that kept some lines but lost the last kept no line vouching for records it lost
        // (a final line is read only when whole, and then every line before it is).
        let last = names.iter().rposition(|n| self.inner.hot.contains_key(n));
        let inner = &mut *self.inner;
        let hot = &mut inner.hot;
        // Encoded a piece at a time: `written` bytes are in the file before `buf`'s.
        let (mut next, mut written) = (0usize, 0u64);
        let mut fill = |buf: &mut Vec<u8>| -> StoreResult<bool> {
            while let Some(n) = names.get(next) {
                let i = next;
                next += 1;
                // Only records this operation read can have changed: the others are as written.
                let Some(c) = hot.get_mut(n) else {
                    continue;
                };
                c.refresh_sched();
                c.at = Some(at);
                if !keep.contains(n) {
                    c.rows_to = Some(rows_to);
                }
                let from = buf.len();
                let idx = c.encode(n, if Some(i) == last { acct } else { None }, buf)?;
                let len = u32::try_from(buf.len() - from - 1).map_err(|_| {
                    StoreError::Backend(BackendError::OverFormatLimit(format!(
                        "job '{n}': line over 4 GiB"
                    )))
                })?;
                placed.push((n, written + from as u64, len, idx));
                if release {
                    hot.remove(n);
                }
                if buf.len() >= SPILL {
                    written += buf.len() as u64;
                    return Ok(true);
                }
            }
            Ok(false)
        };
        inner.journal.append_streamed(&jpath, &mut fill)?;
        // The append's fdatasync made every byte of the file durable, other processes' too.
        self.inner.journal_synced = (self.inner.journal.ino, self.inner.journal.len);
        self.inner.acct = later_mark(self.inner.acct, acct);
        for (n, from, len, idx) in placed {
            let loc = Loc {
                journal: true,
                off: self.inner.journal_off(base + from),
                len,
                crc: None,
            };
            set_index(&mut self.inner, n, Some(loc), idx);
        }
        let slack = self.store.compactor.config.slack;
        // A point handle leaves it to the next handle of every job (an operator's command
        // would otherwise wait for a whole compaction before it exits).
        if self.inner.point.is_none()
            && self.inner.journal.len > (2 * self.inner.live_snapshot_len()).saturating_add(slack)
        {
            // Compacted off the claim path, once the lock is released (see `compact.rs`).
            self.plan_compaction();
        }
        Ok(())
    }

    /// Persist an `apply` batch (job records only, no history rows): one journal append
    /// (O(changed) bytes, written a piece at a time, each record dropped once encoded),
    /// whatever its size. No snapshot is written under the lock: a batch that rewrites most
    /// of a large store (a re-apply changing them all) plans a compaction even below the usual
    /// threshold, so the store still ends with a fresh snapshot, built beside the live files
    /// once the lock is released (`compact.rs`) while owners go on claiming. The records are
    /// durable when this returns Ok; on an error the cache is reloaded from disk before the
    /// next operation.
    pub(super) fn persist_apply(&mut self, names: &[String]) -> StoreResult<()> {
        #[cfg(test)]
        {
            self.inner.held_at_persist = self.inner.hot.keys().cloned().collect();
        }
        self.persist_with(&[], names, true, &[])?;
        if rewrites_most(names.len(), self.inner.jobs.len()) && self.inner.point.is_none() {
            self.plan_compaction();
        }
        Ok(())
    }

    /// The generation and header line of the next snapshot: it absorbs the journal as it is.
    pub(super) fn next_snapshot(&mut self) -> StoreResult<(u64, Vec<u8>)> {
        if self.inner.journal_stale {
            self.new_journal()?;
        }
        let jpath = self.path(JOURNAL_FILE);
        let jlen = self.inner.journal.len;
        let mut crc = filefmt::Crc32::default();
        for_each_piece(self.inner.journal.file(&jpath)?, &jpath, jlen, |piece| {
            crc.update(piece);
            Ok(())
        })?;
        let absorbed = filefmt::Absorbed {
            len: jlen,
            crc32: crc.finish(),
        };
        let generation = self.inner.generation + 1;
        let header = header_line("snapshot", generation, self.id(), Some(absorbed))?;
        Ok((generation, header))
    }

    /// Write every job's newest line to a new snapshot (generation + 1) and start an empty
    /// journal, in one step under the lock (tests: a compacted store in one call; the store
    /// itself compacts off the lock, `compact.rs`). Lines are copied as they are (checksum
    /// verified) without parsing; a job whose only copy is its record in `hot`, or whose line
    /// has no head yet, is encoded.
    #[cfg(test)]
    pub(super) fn compact_jobs(&mut self) -> StoreResult<()> {
        let (generation, header) = self.next_snapshot()?;
        let spath = self.path(SNAPSHOT_FILE);
        let ipath = self.path(super::layout::INDEX_FILE);
        let store = self.store;
        let mut ix = IndexWriter::new(
            &*store.io,
            &store.dir,
            &ipath,
            &store.store_id,
            generation,
            &header,
            store.index_min_bytes,
        )?;
        let mut out = AtomicFile::create(&*store.io, &store.dir, &spath)?;
        out.buf = header;
        let mut locs = Vec::with_capacity(self.inner.jobs.len());
        // The old snapshot's lines are in name order too: read a window at a time.
        let mut reader = LineReader::new(&store.dir);
        let inner = &*self.inner;
        for (name, slim) in inner.jobs.iter() {
            let from = out.pos();
            let b0 = out.buf.len();
            let mut idx = None;
            match (slim.loc, inner.hot.get(name)) {
                (None, Some(c)) => {
                    idx = Some(c.encode(name, inner.acct, &mut out.buf)?);
                }
                (None, None) => {
                    return Err(StoreError::Backend(BackendError::IndexMismatch {
                        job: name.to_string(),
                        what: "neither a line nor a record",
                    }));
                }
                (Some(loc), _) => {
                    let (path, f, at, line) = reader.line(inner, loc)?;
                    if line.starts_with(HEAD_KEY) {
                        // Each record keeps the history end of its own last write, not the
                        // compaction's: rows a dead process left after it are still looked for.
                        out.buf.extend_from_slice(line);
                        out.buf.push(b'\n');
                    } else {
                        let e = entry_of(path, f, at, name, line)?;
                        let c = Cached::from_entry(e);
                        idx = Some(c.encode(name, inner.acct, &mut out.buf)?);
                    }
                }
            }
            let line = &out.buf[b0..out.buf.len() - 1];
            let crc = filefmt::line_crc(line);
            // The index holds what a scan of the new snapshot would read: the line's head.
            match idx.map_or_else(|| index_of(line).map(|(_, i)| i), Ok) {
                Ok(idx) => ix.push(name, from, line.len(), crc, &idx)?,
                Err(_) => ix.spoil(),
            }
            let len = u32::try_from(line.len()).map_err(|_| {
                StoreError::Backend(BackendError::OverFormatLimit(format!(
                    "job '{name}': line over 4 GiB"
                )))
            })?;
            locs.push(Loc {
                journal: false,
                off: from,
                len,
                crc,
            });
            out.spill()?;
        }
        let len = out.commit()?;
        finish_index(ix, len);
        // The new snapshot is in place (we hold the lock: nobody else replaced it since).
        let sf = self
            .io()
            .open(&spath, OpenMode::Read)
            .map_err(io_err(&spath))?;
        if !self.inner.jobs.relocate(locs) {
            // Cannot happen (one line was written per job): the next operation reloads from
            // the snapshot just written rather than trust a table that lost track.
            self.inner.loaded = false;
        }
        self.inner.snapshot = Some(sf);
        self.inner.generation = generation;
        self.inner.snapshot_len = len;
        self.new_journal()
    }
}

/// Open the snapshot for reading: its file and length, refused when it is missing, empty or
/// does not end with a newline. Read a piece at a time afterwards: at 1 000 000 jobs it is
/// hundreds of MB, and holding it whole beside the records it parses into was most of every
/// command's peak memory.
pub(super) fn open_snapshot(
    io: &dyn crate::store::io::StoreIo,
    spath: &Path,
) -> StoreResult<(Box<dyn IoFile>, u64)> {
    let sf = match io.open(spath, OpenMode::Read) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(missing(spath, "the snapshot holds every job"));
        }
        Err(e) => return Err(StoreError::io(spath, e)),
    };
    let slen = sf.metadata().map_err(io_err(spath))?.len;
    if slen == 0 {
        return Err(corrupt(
            spath,
            1,
            1,
            "snapshot is empty: its header line is missing",
        ));
    }
    let mut last = [0u8; 1];
    read_at(&*sf, spath, slen - 1, &mut last)?;
    if last[0] != b'\n' {
        let line = count_lines_before(&*sf, spath, slen)? + 1;
        return Err(corrupt(
            spath,
            line,
            1,
            "snapshot does not end with a newline",
        ));
    }
    Ok((sf, slen))
}

/// Write the index of a snapshot just renamed into place. A failure is logged, not returned:
/// the snapshot is the truth and is in place; an index left from the previous snapshot is
/// bound to it and ignored (see [`super::index`]).
#[cfg(test)]
pub(super) fn finish_index(ix: IndexWriter<'_>, snapshot_len: u64) {
    if let Err(e) = ix.finish(snapshot_len) {
        tracing::warn!(
            "could not write {} (opening reads the whole snapshot until one is written): {e}",
            super::layout::INDEX_FILE
        );
    }
}

/// Fill `inner`'s index (empty) from `jobs.index` when it belongs to the snapshot `bind`:
/// `Ok(true)` done, `Ok(false)` there is none, `Err(why)` it is stale, foreign or damaged
/// (logged; `inner` is left empty for the scan).
pub(super) fn load_index(
    io: &dyn crate::store::io::StoreIo,
    dir: &Path,
    id: &str,
    bind: &index::Binding,
    inner: &mut Inner,
) -> Result<bool, String> {
    let ipath = dir.join(super::layout::INDEX_FILE);
    let jobs = std::cell::RefCell::new(table::Builder::with_capacity(0, 0));
    let mut chained = Vec::new();
    let sized = |n: u64, bytes: usize| {
        // An entry takes at least 22 bytes: a count the bytes cannot hold is a damaged index
        // (refused by `decode` further on), not a reason to reserve that much.
        let n = usize::try_from(n).unwrap_or(0).min(bytes / 22);
        *jobs.borrow_mut() = table::Builder::with_capacity(n, bytes / 4);
    };
    let r = index::load(io, &ipath, id, bind, sized, |e| {
        if e.idx.chained {
            chained.push(e.name.to_string());
        }
        let slim = Slim {
            loc: Some(Loc {
                journal: false,
                off: e.off,
                len: e.len,
                crc: Some(e.crc),
            }),
            wake: e.idx.wake,
            at: e.idx.at,
            lease: e.idx.lease,
            spend: e.idx.spend,
            def: e.idx.def,
        };
        // `decode` checked the order: a push cannot be refused.
        jobs.borrow_mut().push(e.name, slim);
    });
    match &r {
        // One sorted run, no allocation per job (see `table`).
        Ok(true) => {
            inner.jobs = jobs.into_inner().finish();
            inner.chained = chained.into_iter().collect();
        }
        Ok(false) => {}
        Err(why) => tracing::warn!(
            "{} not used ({why}): reading the whole snapshot instead",
            ipath.display()
        ),
    }
    r
}

/// Write `jobs.index` for the snapshot `inner` was just loaded from by a scan (before the
/// journal is replayed: the index then holds exactly the snapshot's lines).
#[allow(clippy::too_many_arguments)]
pub(super) fn rewrite_index(
    io: &dyn crate::store::io::StoreIo,
    dir: &Path,
    ipath: &Path,
    id: &str,
    generation: u64,
    header: &[u8],
    slen: u64,
    inner: &Inner,
    min_bytes: u64,
) -> StoreResult<bool> {
    let mut ix = IndexWriter::new(io, dir, ipath, id, generation, header, min_bytes)?;
    for (name, slim) in inner.jobs.iter() {
        let Some(loc) = slim.loc.filter(|l| !l.journal) else {
            ix.spoil();
            break;
        };
        let idx = Idx {
            wake: slim.wake,
            lease: slim.lease,
            at: slim.at,
            chained: inner.chained.contains(name),
            spend: slim.spend.clone(),
            // The store's mark is in the journal header written with this snapshot.
            acct: None,
            def: slim.def,
        };
        ix.push(name, loc.off, loc.len as usize, loc.crc, &idx)?;
    }
    ix.finish(slen)
}

/// Jobs a batch must change before it counts as most of the store: a first `apply` of at
/// least this many jobs to an empty store streams into a new snapshot, and a re-apply changing
/// this many and half the store compacts right after its journal append. Few enough that every
/// test store of the fault simulator takes the plain journal path.
pub(super) const DIRECT_SNAPSHOT_MIN: usize = 1024;

/// Whether an `apply` batch of `changed` records out of `total` rewrites most of the store.
pub(super) fn rewrites_most(changed: usize, total: usize) -> bool {
    changed >= DIRECT_SNAPSHOT_MIN && changed.saturating_mul(2) >= total
}

#[cfg(test)]
mod tests {
    use super::super::FileStore;
    use super::super::layout::{JOURNAL_FILE, SNAPSHOT_FILE};
    use super::{DIRECT_SNAPSHOT_MIN, rewrites_most};
    use crate::model::{JobsFile, Settings};
    use crate::store::policy::define::tests_support::def;
    use crate::store::{BackendError, OpenError};
    use crate::store::{HistoryReader, Store};
    use crate::testkit::time::epoch as t;

    fn lines(p: &std::path::Path) -> usize {
        std::fs::read(p)
            .unwrap()
            .iter()
            .filter(|b| **b == b'\n')
            .count()
    }

    #[test]
    fn only_a_batch_rewriting_most_of_a_large_store_compacts_at_once() {
        assert!(rewrites_most(DIRECT_SNAPSHOT_MIN, 0));
        assert!(rewrites_most(DIRECT_SNAPSHOT_MIN, 2 * DIRECT_SNAPSHOT_MIN));
        assert!(!rewrites_most(
            DIRECT_SNAPSHOT_MIN,
            2 * DIRECT_SNAPSHOT_MIN + 1
        ));
        assert!(
            !rewrites_most(DIRECT_SNAPSHOT_MIN - 1, 0),
            "small stores keep the journal"
        );
    }

    fn feed(
        jobs: &[crate::model::JobDef],
    ) -> impl FnMut(crate::store::DefSink<'_>) -> crate::store::StoreResult<()> + '_ {
        move |sink| jobs.iter().cloned().try_for_each(&mut *sink)
    }

    fn fresh(tag: &str) -> (crate::testkit::tmp::TempDir, FileStore) {
        let dir = crate::testkit::tmp::TempDir::new(tag);
        let s = FileStore::open(&dir).unwrap();
        (dir, s)
    }

    /// Files in the store directory (no temp file may be left behind).
    fn listing(dir: &std::path::Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// `apply_each` of a large first batch writes the records into the new snapshot as they
    /// arrive (none is cached) and leaves exactly what `apply` leaves; a re-apply changing one
    /// job then appends one journal line, and one removing a job retires it.
    #[test]
    fn apply_each_of_a_large_first_batch_streams_into_the_snapshot_like_apply() {
        let (da, a) = fresh("each-a");
        let (db, b) = fresh("each-b");
        let n = DIRECT_SNAPSHOT_MIN + 300;
        let mut file = JobsFile {
            settings: Settings::default(),
            jobs: (0..n).map(|i| def(&format!("job-{i:05}"))).collect(),
        };
        file.settings.base_dir = Some("/srv".into());
        let ra = a.apply(&file, t(1000)).unwrap();
        let rb = b
            .apply_each(&file.settings, &mut feed(&file.jobs), t(1000))
            .unwrap();
        assert_eq!(ra, rb);
        assert_eq!(rb.created.len(), n);
        assert!(
            b.lock().unwrap().inner.jobs.len() == n,
            "the next operation reloads the records from disk"
        );
        assert_eq!(lines(&db.join(SNAPSHOT_FILE)), n + 1);
        assert_eq!(lines(&db.join(JOURNAL_FILE)), 1, "header only");
        assert_eq!(a.jobs().unwrap(), b.jobs().unwrap());
        assert_eq!(b.settings().unwrap(), file.settings);
        let reopened = FileStore::open_existing(&db).unwrap();
        assert_eq!(reopened.jobs().unwrap(), a.jobs().unwrap());
        assert_eq!(listing(&da), listing(&db));

        file.jobs[7].max_retries += 1;
        let gone = file.jobs.pop().unwrap().name;
        let ra = a.apply(&file, t(1001)).unwrap();
        let rb = b
            .apply_each(&file.settings, &mut feed(&file.jobs), t(1001))
            .unwrap();
        assert_eq!(ra, rb);
        assert_eq!(rb.updated, vec!["job-00007".to_string()]);
        assert_eq!(rb.retired, vec![gone]);
        assert_eq!(
            lines(&db.join(JOURNAL_FILE)),
            3,
            "two changed jobs, two lines"
        );
        assert_eq!(a.jobs().unwrap(), b.jobs().unwrap());
        assert_eq!(
            FileStore::open_existing(&db).unwrap().jobs().unwrap(),
            a.jobs().unwrap()
        );
    }

    /// A re-apply reads each stored record, compares it and drops it unless it changed: at the
    /// end of the batch the operation holds only the updated, retired and created records
    /// (it held every record before, to diff against), and the store is what `apply` of the
    /// same file to a copy leaves.
    #[test]
    fn a_reapply_holds_only_the_records_it_changes() {
        let (_da, a) = fresh("reapply-hot");
        let (db, b) = fresh("reapply-hot-b");
        let mut file = JobsFile {
            settings: Settings::default(),
            jobs: (0..40).map(|i| def(&format!("job-{i:03}"))).collect(),
        };
        for s in [&a, &b] {
            s.apply(&file, t(1000)).unwrap();
        }
        file.jobs[3].max_retries += 1;
        let gone = file.jobs.remove(10).name;
        file.jobs.push(def("new-job"));
        // Not in name order: the reader falls back to one read per line and still diffs.
        file.jobs.swap(0, 30);
        let mut l = b.lock().unwrap();
        let rb = l
            .apply_diff(&file.settings, &mut feed(&file.jobs), t(1001))
            .unwrap();
        assert_eq!(l.inner.held_at_persist, ["job-003", "job-010", "new-job"]);
        assert!(l.inner.hot.is_empty(), "each record went once encoded");
        drop(l);
        assert_eq!(rb.updated, ["job-003"]);
        assert_eq!(rb.retired, [gone]);
        assert_eq!(rb.created, ["new-job"]);
        assert_eq!(rb.unchanged.len(), 38);
        // `apply` of a whole file takes the same path.
        let mut l = a.lock().unwrap();
        let ra = l.apply_file(&file, t(1001)).unwrap();
        assert_eq!(l.inner.held_at_persist.len(), 3);
        drop(l);
        assert_eq!(ra, rb);
        assert_eq!(a.jobs().unwrap(), b.jobs().unwrap());
        assert_eq!(
            FileStore::open_existing(&db).unwrap().jobs().unwrap(),
            a.jobs().unwrap()
        );
        // A second re-apply of the same file changes nothing and holds nothing.
        let mut l = b.lock().unwrap();
        let again = l
            .apply_diff(&file.settings, &mut feed(&file.jobs), t(1002))
            .unwrap();
        assert!(l.inner.hot.is_empty());
        assert_eq!(again.unchanged.len(), 40);
        assert!(again.updated.is_empty() && again.retired.is_empty());
    }

    /// An in-memory file that counts its reads.
    #[derive(Debug)]
    struct Counted(Vec<u8>, std::sync::atomic::AtomicUsize);

    impl crate::store::io::IoFile for Counted {
        fn read_exact_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<()> {
            self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let from = usize::try_from(off).unwrap();
            let src = self
                .0
                .get(from..from + buf.len())
                .ok_or(std::io::ErrorKind::UnexpectedEof)?;
            buf.copy_from_slice(src);
            Ok(())
        }
        fn write_all(&self, _: &[u8]) -> std::io::Result<()> {
            Err(std::io::ErrorKind::Unsupported.into())
        }
        fn set_len(&self, _: u64) -> std::io::Result<()> {
            Err(std::io::ErrorKind::Unsupported.into())
        }
        fn sync_all(&self) -> std::io::Result<()> {
            Ok(())
        }
        fn sync_data(&self) -> std::io::Result<()> {
            Ok(())
        }
        fn metadata(&self) -> std::io::Result<crate::store::io::Meta> {
            Err(std::io::ErrorKind::Unsupported.into())
        }
        fn try_clone(&self) -> std::io::Result<Box<dyn crate::store::io::IoFile>> {
            Err(std::io::ErrorKind::Unsupported.into())
        }
        fn lock(&self, _: std::time::Duration) -> std::io::Result<bool> {
            Ok(true)
        }
        fn unlock(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Lines asked for in file order are read a window at a time (one read for many lines);
    /// a line behind the last one or far ahead is read alone; every line comes back exact,
    /// including one longer than a window and the file's last.
    #[test]
    fn the_window_reads_lines_in_file_order_in_pieces() {
        use super::super::lines::{PIECE, Window};
        use super::super::record::Loc;
        let mut bytes = Vec::new();
        let mut locs = Vec::new();
        for i in 0..3000u32 {
            let len = if i == 1500 {
                PIECE as usize + 10
            } else {
                100 + (i % 7) as usize
            };
            let line: Vec<u8> = (0..len)
                .map(|k| b'a' + ((i as usize + k) % 26) as u8)
                .collect();
            locs.push((
                Loc {
                    journal: false,
                    off: bytes.len() as u64,
                    len: len as u32,
                    crc: None,
                },
                line.clone(),
            ));
            bytes.extend_from_slice(&line);
            bytes.push(b'\n');
        }
        let flen = bytes.len() as u64;
        let f = Counted(bytes, Default::default());
        let reads = || f.1.load(std::sync::atomic::Ordering::Relaxed);
        let path = std::path::Path::new("snapshot");
        let mut w = Window::default();
        for (loc, want) in &locs {
            assert_eq!(w.line(&f, path, flen, *loc).unwrap(), want.as_slice());
        }
        let in_order = reads();
        // ≈ 1.6 MB: two windows and the long line's own, not 3 000 reads.
        assert!(in_order <= 5, "{in_order} reads for 3 000 lines in order");
        // Backwards: each line alone, still exact.
        let mut w = Window::default();
        for (loc, want) in locs.iter().rev().take(50) {
            assert_eq!(w.line(&f, path, flen, *loc).unwrap(), want.as_slice());
        }
        assert_eq!(reads() - in_order, 50, "one read per line out of order");
        // Far ahead of the last line: read alone, then in order again from there.
        let mut w = Window::default();
        let before = reads();
        for i in [0, 2990, 2991, 2992, 2999] {
            let (loc, want) = &locs[i];
            assert_eq!(w.line(&f, path, flen, *loc).unwrap(), want.as_slice());
        }
        assert_eq!(
            reads() - before,
            3,
            "0 a window, 2990 alone (far ahead), 2991 a window holding the rest"
        );
    }

    /// A small first batch takes `apply`'s journal path.
    #[test]
    fn apply_each_of_a_small_first_batch_is_apply() {
        let (_da, a) = fresh("each-small-a");
        let (db, b) = fresh("each-small-b");
        let file = JobsFile {
            settings: Settings::default(),
            jobs: (0..5).map(|i| def(&format!("job-{i}"))).collect(),
        };
        let ra = a.apply(&file, t(1000)).unwrap();
        let rb = b
            .apply_each(&file.settings, &mut feed(&file.jobs), t(1000))
            .unwrap();
        assert_eq!(ra, rb);
        assert_eq!(lines(&db.join(JOURNAL_FILE)), 6);
        assert_eq!(a.jobs().unwrap(), b.jobs().unwrap());
    }

    /// Every refusal of `apply` is `apply_each`'s too, in the same order, and changes nothing:
    /// not the snapshot, not the settings, no temp file left (large batches are refused after
    /// part of their snapshot was written).
    #[test]
    fn apply_each_refuses_what_apply_refuses_and_changes_nothing() {
        use crate::model::{After, ChainOn};
        for existing in [0, 3] {
            let (dir, s) = fresh("each-refused");
            if existing > 0 {
                let jobs = (0..existing).map(|i| def(&format!("old-{i}"))).collect();
                let file = JobsFile {
                    settings: Settings::default(),
                    jobs,
                };
                s.apply(&file, t(900)).unwrap();
            }
            let before = (
                std::fs::read(dir.join(SNAPSHOT_FILE)).unwrap(),
                std::fs::read(dir.join(JOURNAL_FILE)).unwrap(),
                listing(&dir),
                s.jobs().unwrap(),
            );
            let n = DIRECT_SNAPSHOT_MIN + 10;
            let base: Vec<_> = (0..n).map(|i| def(&format!("job-{i:05}"))).collect();
            let after = |job: &str| After {
                job: job.to_string(),
                on: ChainOn::Success,
            };
            let mut cycle = base.clone();
            cycle[3].after = vec![after(&format!("job-{:05}", n - 3))];
            cycle[n - 3].after = vec![after("job-00003")];
            cycle[n - 1].name = "job-00001".into();
            let mut repeated = base.clone();
            repeated[n - 1].name = "job-00001".into();
            let mut bounds = base.clone();
            bounds[n - 2].max_retries = 0;
            let settings = Settings {
                base_dir: Some("/elsewhere".into()),
                ..Settings::default()
            };
            for (jobs, want) in [
                (
                    cycle,
                    "makes a cycle: job-00003 waits for job-01031 waits for job-00003",
                ),
                (repeated, "job-00001"),
                (bounds, "max_retries"),
            ] {
                let file = JobsFile {
                    settings: settings.clone(),
                    jobs,
                };
                let ea = s.apply(&file, t(1000)).unwrap_err().to_string();
                let eb = s
                    .apply_each(&settings, &mut feed(&file.jobs), t(1000))
                    .unwrap_err()
                    .to_string();
                assert_eq!(ea, eb);
                assert!(eb.contains(want), "{eb}");
            }
            // The feed itself fails at its end (the jobs file did not read to its end).
            let eb = s
                .apply_each(
                    &settings,
                    &mut |sink| {
                        base.iter().cloned().try_for_each(&mut *sink)?;
                        Err(crate::store::StoreError::Backend(BackendError::Invariant(
                            "bad file",
                        )))
                    },
                    t(1000),
                )
                .unwrap_err();
            assert!(eb.to_string().contains("bad file"));
            let now = (
                std::fs::read(dir.join(SNAPSHOT_FILE)).unwrap(),
                std::fs::read(dir.join(JOURNAL_FILE)).unwrap(),
                listing(&dir),
                s.jobs().unwrap(),
            );
            assert!(before == now, "nothing changed ({existing} jobs stored)");
            assert_eq!(s.settings().unwrap(), Settings::default());
        }
    }

    /// A snapshot bigger than the pieces it is written (4 MiB) and read (1 MiB) in: every
    /// record comes back in a fresh handle, and a re-apply changing one job appends one line.
    #[test]
    fn a_large_snapshot_is_written_and_read_in_pieces_and_a_one_job_reapply_appends_one_line() {
        let dir = crate::testkit::tmp::TempDir::new("fs-pieces");
        let s = FileStore::open(&dir).unwrap();
        let n = 12_000;
        let mut file = JobsFile {
            settings: Settings::default(),
            jobs: (0..n).map(|i| def(&format!("job-{i:05}"))).collect(),
        };
        assert_eq!(s.apply(&file, t(1000)).unwrap().created.len(), n);
        let snap = dir.join(SNAPSHOT_FILE);
        let journal = dir.join(JOURNAL_FILE);
        assert!(std::fs::metadata(&snap).unwrap().len() > 8 * 1024 * 1024);
        assert_eq!(lines(&snap), n + 1, "header + one line per job");
        assert_eq!(
            lines(&journal),
            1,
            "the batch went to the snapshot: header only"
        );

        let fresh = FileStore::open_existing(&dir).unwrap();
        assert_eq!(fresh.jobs().unwrap(), s.jobs().unwrap());

        file.jobs[17].max_retries += 1;
        let before = std::fs::metadata(&journal).unwrap().len();
        let rep = s.apply(&file, t(1001)).unwrap();
        assert_eq!(rep.updated, vec!["job-00017".to_string()]);
        assert_eq!(lines(&journal), 2, "one changed job, one journal line");
        let grew = std::fs::metadata(&journal).unwrap().len() - before;
        assert!(grew < 4096, "O(changed) bytes, not the store: {grew}");
        let again = FileStore::open_existing(&dir).unwrap();
        assert_eq!(
            again.job("job-00017").unwrap().unwrap().def.max_retries,
            file.jobs[17].max_retries
        );
        assert_eq!(again.jobs().unwrap().len(), n);
    }

    use super::{Cached, HEAD_KEY, Idx};
    use crate::model::{After, ChainOn, Status};
    use crate::store::filefmt;
    use crate::testkit::store::{ClaimAt, FinishClaim, claim_row};

    fn store(tag: &str) -> (crate::testkit::tmp::TempDir, FileStore) {
        let dir = crate::testkit::tmp::TempDir::new(&format!("fs-{tag}"));
        let s = FileStore::open(&dir).unwrap();
        (dir, s)
    }

    /// Jobs in every state the head describes: chained, paused, leased, retired, idle.
    fn busy_store(tag: &str) -> (crate::testkit::tmp::TempDir, FileStore) {
        let (dir, s) = store(tag);
        let mut child = def("child");
        child.after = vec![After {
            job: "parent".into(),
            on: ChainOn::Completion,
        }];
        let file = JobsFile {
            settings: Settings::default(),
            jobs: vec![
                def("parent"),
                child,
                def("idle"),
                def("paused"),
                def("gone"),
            ],
        };
        s.apply(&file, t(1000)).unwrap();
        s.set_paused("paused", true, t(1000)).unwrap();
        let file = JobsFile {
            jobs: file.jobs.into_iter().filter(|d| d.name != "gone").collect(),
            ..file
        };
        s.apply(&file, t(1001)).unwrap();
        let got = s.claim_at(t(1060), "o", 1);
        assert_eq!(got.claims.len(), 1);
        s.finish_claim(&got.claims[0], "o", Status::Succeeded, t(1061));
        let got = s.claim_at(t(1062), "o", 1);
        assert_eq!(got.claims.len(), 1, "one more run, left leased");
        (dir, s)
    }

    /// `spenders` reads the jobs the index marks as having spent or holding a reservation,
    /// and they are exactly the records `jobs` says so of, in name order (a fresh handle
    /// too: the mark is in the lines' heads).
    #[test]
    fn spenders_are_the_jobs_that_spent_or_hold_money() {
        use crate::store::policy::budget::{ReserveOutcome, ReserveRequest};
        let (dir, s) = busy_store("spenders");
        assert!(s.spenders().unwrap().is_empty(), "nothing spent yet");
        let out = s
            .reserve(&ReserveRequest {
                job: "idle",
                run_id: uuid::Uuid::new_v4(),
                owner: "o",
                usd: 0.01,
                now: t(1100),
            })
            .unwrap();
        assert!(matches!(out, ReserveOutcome::Reserved { .. }), "{out:?}");
        let got = s.claim_at(t(1200), "o", 10);
        let c = got
            .claims
            .iter()
            .find(|c| c.job.def.name == "parent")
            .expect("parent is due");
        let mut row = claim_row(c, "o", Status::Succeeded, t(1201));
        row.cost_usd = 0.25;
        s.finish_row(c, row);
        for s in [s, FileStore::open(&dir).unwrap()] {
            let names: Vec<String> = s
                .spenders()
                .unwrap()
                .into_iter()
                .map(|r| r.def.name)
                .collect();
            assert_eq!(names, ["idle", "parent"]);
            let mut want = s.jobs().unwrap();
            want.retain(|j| crate::store::spent_or_holds(&j.rt.counters));
            assert_eq!(s.spenders().unwrap(), want);
        }
    }

    /// What a fresh handle's index says of every job equals what its full record says.
    fn index_agrees_with_records(s: &FileStore) {
        let mut l = s.lock().unwrap();
        assert!(!l.inner.jobs.is_empty());
        let order = l.inner.jobs.wake_order(None);
        for (name, slim) in &l.inner.jobs {
            let full = Cached::from_entry(l.read_entry(name, slim).unwrap()).idx();
            let indexed = Idx {
                wake: slim.wake,
                lease: slim.lease,
                at: slim.at,
                chained: l.inner.chained.contains(name),
                spend: slim.spend.clone(),
                acct: None,
                def: slim.def,
            };
            assert_eq!(indexed, full, "job {name}");
            if let Some(w) = slim.wake {
                assert!(order.contains(&(w, name.to_string())), "job {name}");
            }
        }
        let woken = l.inner.jobs.values().filter(|s| s.wake.is_some()).count();
        assert_eq!(order.len(), woken, "one wake-up entry per job that has one");
        assert!(order.is_sorted(), "in (wake-up, name) order");
    }

    #[test]
    fn the_index_read_from_line_heads_matches_the_records_in_journal_and_snapshot() {
        let (dir, s) = busy_store("heads");
        {
            let l = s.lock().unwrap();
            assert!(l.inner.chained.contains("child"));
            assert!(l.inner.jobs.values().any(|j| j.lease.is_some()));
            assert!(
                l.inner
                    .jobs
                    .values()
                    .any(|j| j.loc.is_some_and(|l| l.journal))
            );
        }
        // From the journal's lines, in a handle that never parsed a record.
        index_agrees_with_records(&FileStore::open_existing(&dir).unwrap());
        // And from a snapshot the compaction copied them into.
        s.compact_jobs_for_test();
        let fresh = FileStore::open_existing(&dir).unwrap();
        {
            let l = fresh.lock().unwrap();
            assert!(
                l.inner
                    .jobs
                    .values()
                    .all(|j| j.loc.is_some_and(|l| !l.journal))
            );
        }
        index_agrees_with_records(&fresh);
        index_agrees_with_records(&s);
        assert_eq!(fresh.jobs().unwrap(), s.jobs().unwrap());
    }

    #[test]
    fn no_record_is_held_between_operations() {
        let (_dir, s) = busy_store("cold");
        assert_eq!(s.jobs().unwrap().len(), 5);
        assert_eq!(s.jobs_page(Some("gone"), 2).unwrap().len(), 2);
        assert!(s.job("child").unwrap().is_some());
        assert!(s.lock().unwrap().inner.hot.is_empty());
    }

    /// `line` (one job line without its newline) with its checksum recomputed after `edit`
    /// (which gets the line without its checksum member).
    fn rechecksummed(line: &[u8], edit: impl Fn(Vec<u8>) -> Vec<u8>) -> Vec<u8> {
        let tail = ",\"crc32\":\"00000000\"}".len();
        let mut body = line[..line.len() - tail].to_vec();
        body.push(b'}');
        let mut body = edit(body);
        let crc = filefmt::crc32(&body);
        body.pop();
        body.extend_from_slice(format!(",\"crc32\":\"{crc:08x}\"}}").as_bytes());
        filefmt::verify_line(&body, "test line").unwrap();
        body
    }

    fn replace(hay: &[u8], from: &str, to: &str) -> Vec<u8> {
        let at = hay
            .windows(from.len())
            .position(|w| w == from.as_bytes())
            .unwrap();
        [&hay[..at], to.as_bytes(), &hay[at + from.len()..]].concat()
    }

    /// Replace the last line of `path` that mentions `needle`.
    fn rewrite_line(
        path: &std::path::Path,
        needle: &str,
        edit: impl Fn(&[u8]) -> Vec<u8>,
    ) -> usize {
        let text = std::fs::read(path).unwrap();
        let mut lines: Vec<Vec<u8>> = text.split(|b| *b == b'\n').map(<[u8]>::to_vec).collect();
        let i = lines
            .iter()
            .rposition(|l| l.windows(needle.len()).any(|w| w == needle.as_bytes()))
            .unwrap();
        lines[i] = edit(&lines[i]);
        std::fs::write(path, lines.join(&b'\n')).unwrap();
        i + 1
    }

    /// Opening reads each line's head, not its definition: a record whose JSON no longer
    /// parses (checksum intact) is reported, at its file and line, by the operation that
    /// reads it — the other jobs stay usable.
    #[test]
    fn open_reads_heads_and_a_record_is_parsed_when_an_operation_needs_it() {
        let (dir, s) = busy_store("lazy");
        s.compact_jobs_for_test();
        drop(s);
        let snap = dir.join(SNAPSHOT_FILE);
        let no = rewrite_line(&snap, "\"name\":\"idle\"", |l| {
            assert!(l.starts_with(HEAD_KEY));
            rechecksummed(l, |b| replace(&b, "\"def\":", "\"dfe\":"))
        });
        let s = FileStore::open_existing(&dir).unwrap();
        assert!(s.job("parent").unwrap().is_some());
        let e = s.job("idle").unwrap_err().to_string();
        assert!(e.contains(&format!("{}:{no}:", snap.display())), "{e}");
        assert!(e.contains("missing field `def`"), "{e}");
    }

    /// `jobs_page_json` hands each job's record JSON as written (in the snapshot, in the
    /// journal, with or without a head), the same records `jobs_page` parses; a line whose
    /// checksum fails sends the page through the locked path, whose error names the line.
    #[test]
    fn jobs_page_json_hands_each_records_json_and_a_bad_line_is_named() {
        use crate::store::PageJob;
        let (dir, s) = busy_store("pagejson");
        let json_records = |s: &FileStore, after: Option<&str>| -> Vec<crate::model::JobRecord> {
            let page = s.jobs_page_json(after, 3).unwrap();
            page.jobs
                .iter()
                .map(|j| match j {
                    PageJob::Json { name, range } => {
                        let r: crate::model::JobRecord =
                            serde_json::from_str(&page.buf[range.clone()]).unwrap();
                        assert_eq!(&r.def.name, name);
                        r
                    }
                    PageJob::Record(r) => panic!("{} came parsed", r.def.name),
                })
                .collect()
        };
        for after in [None, Some("child"), Some("paused")] {
            assert_eq!(json_records(&s, after), s.jobs_page(after, 3).unwrap());
        }
        // A line without a head (an earlier release) in the journal.
        drop(s);
        let journal = dir.join(JOURNAL_FILE);
        rewrite_line(&journal, "\"name\":\"child\"", |l| {
            rechecksummed(l, |b| {
                let rest = &b[HEAD_KEY.len()..];
                let mut values =
                    serde_json::Deserializer::from_slice(rest).into_iter::<serde_json::Value>();
                values.next().unwrap().unwrap();
                let end = values.byte_offset();
                [&b[..1], &rest[end + 1..]].concat()
            })
        });
        let s = FileStore::open_existing(&dir).unwrap();
        assert_eq!(json_records(&s, None), s.jobs_page(None, 3).unwrap());
        s.compact_jobs_for_test();
        assert_eq!(json_records(&s, None), s.jobs_page(None, 3).unwrap());
        drop(s);
        // A byte flipped after the open verified it: the page is read again under the lock.
        let snap = dir.join(SNAPSHOT_FILE);
        let s = FileStore::open_existing(&dir).unwrap();
        let no = rewrite_line(&snap, "\"name\":\"idle\"", |l| {
            replace(l, "\"runs\":", "\"runz\":")
        });
        let e = s.jobs_page_json(None, 10).unwrap_err().to_string();
        assert!(e.contains(&format!("{}:{no}:", snap.display())), "{e}");
    }

    /// `jobs --json` over a record whose JSON no longer parses (checksum intact): the listing
    /// asks the store for that job, and the error names its file and line.
    #[test]
    fn a_listed_record_that_does_not_parse_is_named_at_its_line() {
        let (dir, s) = busy_store("listbad");
        s.compact_jobs_for_test();
        drop(s);
        let snap = dir.join(SNAPSHOT_FILE);
        let no = rewrite_line(&snap, "\"name\":\"idle\"", |l| {
            rechecksummed(l, |b| replace(&b, "\"runs\":", "\"runs\":\"many\",\"x\":"))
        });
        let s = FileStore::open_existing(&dir).unwrap();
        let settings = s.settings().unwrap();
        let mut out = Vec::new();
        let e = crate::listing::write_jobs_json(&s, &settings, t(2000), &mut out)
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("{}:{no}:", snap.display())), "{e}");
    }

    /// A head edited to disagree with its record (the CRC recomputed) makes the index skip a
    /// due job (`wake` far ahead) or a chained child (`chained` dropped): `check` compares every
    /// head with its record and reports it, never calling the store sound.
    #[test]
    fn check_reports_a_head_that_disagrees_with_its_record() {
        let (dir, s) = busy_store("headlie");
        s.compact_jobs_for_test();
        drop(s);
        let lock = std::time::Duration::from_secs(5);
        assert!(
            crate::store::check::check_file_store(&dir, lock)
                .unwrap()
                .ok()
        );
        let snap = dir.join(SNAPSHOT_FILE);
        let no = rewrite_line(&snap, "\"name\":\"child\"", |l| {
            assert!(l.starts_with(HEAD_KEY));
            rechecksummed(l, |b| replace(&b, ",\"chained\":true", ""))
        });
        let r = crate::store::check::check_file_store(&dir, lock).unwrap();
        assert!(!r.ok(), "{r:?}");
        let p = r.problems[0].to_string();
        assert!(p.contains(&format!("{}:{no}:", snap.display())), "{p}");
        assert!(p.contains("head does not match its record"), "{p}");
    }

    /// A line written without a head (an earlier release, the format-2 upgrade) is parsed
    /// whole at open, indexed the same, and the next compaction writes it with a head.
    #[test]
    fn a_line_without_a_head_is_read_whole_and_compaction_gives_it_one() {
        let (dir, s) = busy_store("headless");
        let journal = dir.join(JOURNAL_FILE);
        let before = FileStore::open_existing(&dir).unwrap().jobs().unwrap();
        drop(s);
        rewrite_line(&journal, "\"name\":\"child\"", |l| {
            let out = rechecksummed(l, |b| {
                // Drop `"head":{…},`.
                let rest = &b[HEAD_KEY.len()..];
                let mut values =
                    serde_json::Deserializer::from_slice(rest).into_iter::<serde_json::Value>();
                values.next().unwrap().unwrap();
                let end = values.byte_offset();
                assert_eq!(rest[end], b',');
                [&b[..1], &rest[end + 1..]].concat()
            });
            assert!(!out.starts_with(HEAD_KEY));
            out
        });
        let old = FileStore::open_existing(&dir).unwrap();
        assert_eq!(old.jobs().unwrap(), before);
        index_agrees_with_records(&old);
        old.compact_jobs_for_test();
        let snap = std::fs::read_to_string(dir.join(SNAPSHOT_FILE)).unwrap();
        assert!(
            snap.lines().skip(1).all(|l| l.starts_with("{\"head\":")),
            "{snap}"
        );
        let fresh = FileStore::open_existing(&dir).unwrap();
        assert_eq!(fresh.jobs().unwrap(), before);
        index_agrees_with_records(&fresh);
    }

    /// `spend` and `reserve` sum every job's budget counters from the index (no record read):
    /// a reservation made through one handle counts in a fresh handle's decisions, and the
    /// index's counters equal the records'.
    #[test]
    fn reservations_count_for_every_handle_from_the_index() {
        use crate::model::{Budget, BudgetPeriod};
        use crate::store::{ReserveOutcome, ReserveRequest};
        let (dir, s) = store("spend");
        let file = JobsFile {
            settings: Settings {
                budget: Some(Budget {
                    max_cost_usd: 3.0,
                    period: BudgetPeriod::Day,
                }),
                ..Settings::default()
            },
            jobs: vec![def("a"), def("b")],
        };
        s.apply(&file, t(1000)).unwrap();
        let req = |job| ReserveRequest {
            job,
            run_id: uuid::Uuid::new_v4(),
            owner: "o",
            usd: 2.0,
            now: t(1000),
        };
        assert!(matches!(
            s.reserve(&req("a")).unwrap(),
            ReserveOutcome::Reserved { .. }
        ));
        let fresh = FileStore::open_existing(&dir).unwrap();
        index_agrees_with_records(&fresh);
        assert!(
            fresh.lock().unwrap().inner.jobs["a"].spend.is_some(),
            "the reservation is in the index"
        );
        match fresh.reserve(&req("b")).unwrap() {
            ReserveOutcome::Refused { reason } => assert!(reason.contains("budget"), "{reason}"),
            other => panic!("2 + 2 over a 3 budget was allowed: {other:?}"),
        }
        assert_eq!(fresh.spend("b", t(1000)).unwrap().global_usd, 0.0);
    }

    /// Every page size, read in runs of every size, gives the records read one line at a time
    /// ([`Locked::record`]), in name order: lines in the snapshot and in the journal (a job
    /// changed after the compaction leaves a stale line between its neighbours' in the
    /// snapshot), and a record this operation holds in `hot` is read from there.
    #[test]
    fn pages_read_in_runs_are_the_records_read_one_line_at_a_time() {
        let (dir, s) = busy_store("pages");
        s.compact_jobs_for_test();
        s.set_paused("idle", true, t(1100)).unwrap();
        let fresh = FileStore::open_existing(&dir).unwrap();
        let mut l = fresh.lock().unwrap();
        let names: Vec<String> = l.inner.jobs.iter().map(|(n, _)| n.to_string()).collect();
        let journal = |n: &str| l.inner.jobs[n].loc.is_some_and(|loc| loc.journal);
        assert!(journal("idle") && !journal("parent"), "lines in both files");
        let one_by_one: Vec<crate::model::JobRecord> = names
            .iter()
            .map(|n| l.record(n).unwrap().unwrap())
            .collect();
        for limit in 1..=names.len() + 1 {
            for (run_max, run_gap) in [(1, 0), (2_000, 0), (2_000, 1 << 14), (1 << 21, 1 << 14)] {
                let mut got = Vec::new();
                let mut after: Option<String> = None;
                loop {
                    let page = l
                        .page_lines_in_runs(after.as_deref(), limit, run_max, run_gap)
                        .unwrap()
                        .parse_with(|name, loc, line| l.entry_of(name, loc, line))
                        .unwrap();
                    assert!(page.len() <= limit);
                    let full = page.len() == limit;
                    after = page.last().map(|r| r.def.name.clone());
                    got.extend(page);
                    if !full {
                        break;
                    }
                }
                assert_eq!(
                    got, one_by_one,
                    "pages of {limit}, runs {run_max}/{run_gap}"
                );
            }
        }
        assert!(l.page_records(None, 0).unwrap().is_empty());
        assert!(l.page_records(Some("zzz"), 10).unwrap().is_empty());

        assert!(l.load("parent").unwrap());
        let runs = l.inner.hot["parent"].rec.rt.runs;
        if let Some(c) = l.inner.hot.get_mut("parent") {
            c.rec.rt.runs = runs + 40;
        }
        let page = l.page_records(None, names.len()).unwrap();
        let parent = page.iter().find(|r| r.def.name == "parent").unwrap();
        assert_eq!(parent.rt.runs, runs + 40, "the operation's own record");
        assert_eq!(page.len(), names.len());
    }

    /// A line altered under an open handle (the file edited in place after the handle indexed
    /// it) is refused when its page is read, naming the file and the line, as reading the one
    /// record would.
    #[test]
    fn a_line_altered_under_an_open_handle_is_refused_by_its_page_with_its_line_number() {
        use std::os::unix::fs::FileExt;
        let (dir, s) = busy_store("pagebad");
        s.compact_jobs_for_test();
        let fresh = FileStore::open_existing(&dir).unwrap();
        assert_eq!(fresh.jobs_page(None, 100).unwrap().len(), 5);
        let snap = dir.join(SNAPSHOT_FILE);
        let text = std::fs::read(&snap).unwrap();
        let (no, off) = {
            let mut off = 0;
            let mut found = None;
            for (i, line) in text.split(|b| *b == b'\n').enumerate() {
                if line.windows(13).any(|w| w == b"\"name\":\"idle\"") {
                    found = Some((i as u64 + 1, off));
                    break;
                }
                off += line.len() + 1;
            }
            found.unwrap()
        };
        assert!(no > 2, "idle is not the first job line");
        // One byte of the record (after the head), the file's size and inode unchanged.
        let at = off + HEAD_KEY.len() + 200;
        let f = std::fs::OpenOptions::new().write(true).open(&snap).unwrap();
        let b = if text[at] == b'1' { b"2" } else { b"1" };
        f.write_all_at(b, at as u64).unwrap();
        let e = fresh.jobs_page(None, 100).unwrap_err();
        match &e {
            crate::store::StoreError::Open(OpenError::Corrupt { file, line, .. }) => {
                assert_eq!(file, &snap, "{e}");
                assert_eq!(*line, no, "{e}");
            }
            other => panic!("not a corruption error: {other}"),
        }
        assert!(e.to_string().contains("checksum"), "{e}");
    }

    /// Parsing outside the lock gives up (and the caller reads the page again under the lock)
    /// on a line whose checksum holds but whose bytes are not UTF-8 or hold another job.
    #[test]
    fn a_page_parsed_outside_the_lock_gives_up_on_a_line_it_cannot_vouch_for() {
        use super::{Loc, RawPage, RawSrc};
        let (dir, s) = busy_store("rawpage");
        s.compact_jobs_for_test();
        let fresh = FileStore::open_existing(&dir).unwrap();
        let l = fresh.lock().unwrap();
        let all = l.page_lines(None, 10).unwrap().parse_unlocked().unwrap();
        assert_eq!(all, l.page_records(None, 10).unwrap());
        let loc = l.inner.jobs["idle"].loc.unwrap();
        let one = l.page_lines(Some("gone"), 1).unwrap();
        let line = one.buf[..loc.len as usize].to_vec();
        let page = |name: &str, line: Vec<u8>| RawPage {
            items: vec![(
                name.to_string(),
                RawSrc::Line {
                    loc: Loc {
                        len: u32::try_from(line.len()).unwrap(),
                        ..loc
                    },
                    at: 0,
                },
            )],
            buf: line,
        };
        let ok = page("idle", line.clone()).parse_unlocked().unwrap();
        assert_eq!(ok[0].def.name, "idle");
        assert!(page("paused", line.clone()).parse_unlocked().is_none());
        let latin1 = rechecksummed(&line, |b| {
            let mut out = replace(&b, "\"command\":\"true\"", "\"command\":\"tru\u{e9}\"");
            let at = out
                .windows(2)
                .position(|w| w == "\u{e9}".as_bytes())
                .unwrap();
            out.splice(at..at + 2, [0xE9]);
            out
        });
        assert!(std::str::from_utf8(&latin1).is_err());
        assert!(page("idle", latin1).parse_unlocked().is_none());
    }
}

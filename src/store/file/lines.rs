//! Job lines read from the snapshot and the journal: one line by its place (verified against
//! its checksum), lines in file order through a window, a page of lines read under the lock and
//! parsed after it, and a whole file read a piece at a time.
//!
//! Owns: [`LineReader`], [`RawPage`], [`for_each_line`]. Must not touch: what a line means
//! (`record.rs`), the index (`table.rs`), writing.

use crate::store::BackendError;
use std::path::Path;

use super::handle::{Inner, set_index};
use super::layout::{JOURNAL_FILE, SNAPSHOT_FILE};
use super::log::{corrupt, count_lines_before, json_err, read_at};
use super::record::{Entry, Loc, Slim, job_member, line_index, verify_at};
use crate::model::JobRecord;
use crate::store::io::IoFile;
use crate::store::{StoreError, StoreResult};

/// Most bytes [`Locked::page_records`] reads at once (a page of 1 024 jobs of ≈ 1.2 KB each
/// is one or two reads).
pub(super) const PAGE_RUN_MAX: u64 = 1 << 21;
/// Most bytes between two lines that [`Locked::page_records`] still reads in one run (read and
/// dropped: cheaper than another system call, since the lines between are other jobs' older
/// copies in the journal or jobs of another page).
pub(super) const PAGE_RUN_GAP: u64 = 16 << 10;

/// A page of job lines read under the store's lock ([`Locked::page_lines`]), to be parsed
/// with or without it.
#[derive(Default)]
pub(super) struct RawPage {
    /// The runs of lines read, one after the other.
    pub(super) buf: Vec<u8>,
    /// In name order: each job's name and where its record comes from.
    pub(super) items: Vec<(String, RawSrc)>,
}

pub(super) enum RawSrc {
    /// The operation's own record (in `hot`).
    Record(Box<JobRecord>),
    /// The line at `loc` of its file, at `at` in [`RawPage::buf`].
    Line { loc: Loc, at: usize },
}

impl RawPage {
    /// The records, each line turned into its entry by `entry` (given the job's name, the
    /// line's place and its bytes).
    pub(super) fn parse_with(
        self,
        mut entry: impl FnMut(&str, Loc, &[u8]) -> StoreResult<Entry>,
    ) -> StoreResult<Vec<JobRecord>> {
        let mut out = Vec::with_capacity(self.items.len());
        for (name, src) in self.items {
            out.push(match src {
                RawSrc::Record(r) => *r,
                RawSrc::Line { loc, at } => {
                    let line = &self.buf[at..at + loc.len as usize];
                    entry(&name, loc, line)?.job
                }
            });
        }
        Ok(out)
    }

    /// The records, parsed without the store's lock: `None` when a line fails its checksum,
    /// does not parse or holds another job (the caller reads the page again under the lock,
    /// where the error names the file and line).
    pub(super) fn parse_unlocked(self) -> Option<Vec<JobRecord>> {
        self.parse_with(|name, loc, line| {
            // UTF-8 checked once for the line, not string by string inside the parser.
            verify_at(line, loc)
                .ok()
                .and_then(|()| std::str::from_utf8(line).ok())
                .and_then(|text| serde_json::from_str::<Entry>(text).ok())
                .filter(|e| e.job.def.name == name)
                .ok_or_else(|| {
                    StoreError::Backend(BackendError::IndexMismatch {
                        job: name.to_string(),
                        what: "its line changed since it was read without the lock",
                    })
                })
        })
        .ok()
    }
}

impl RawPage {
    /// The page as stored JSON ([`crate::store::Store::jobs_page_json`]): each line's
    /// checksum verified and its `job` member located, the text checked to be UTF-8, nothing
    /// parsed. `None` when a line fails any of these (the caller reads the page again under
    /// the lock).
    pub(super) fn into_json(self) -> Option<crate::store::JsonPage> {
        use crate::store::PageJob;
        let mut jobs = Vec::with_capacity(self.items.len());
        for (name, src) in self.items {
            jobs.push(match src {
                RawSrc::Record(r) => PageJob::Record(r),
                RawSrc::Line { loc, at } => {
                    let line = self.buf.get(at..at + loc.len as usize)?;
                    // The index's checksum too: a valid line swapped in place is not printed.
                    verify_at(line, loc).ok()?;
                    let job = job_member(line)?;
                    PageJob::Json {
                        name,
                        range: at + job.start..at + job.end,
                    }
                }
            });
        }
        Some(crate::store::JsonPage {
            buf: String::from_utf8(self.buf).ok()?,
            jobs,
        })
    }
}

/// Index one line read at load (`no`: its line number, for errors).
pub(super) fn index_line(
    inner: &mut Inner,
    path: &Path,
    no: u64,
    loc: Loc,
    line: &[u8],
) -> StoreResult<()> {
    let (name, idx) = line_index(line).map_err(|(col, what)| corrupt(path, no, col, what))?;
    // A snapshot's lines come in name order: each is appended to the table's sorted run.
    set_index(inner, &name, Some(loc), idx);
    Ok(())
}

/// The entry of job `name` parsed from `line` (its checksum verified), the line at `loc` of
/// `f`; checked to be that job's.
pub(super) fn entry_of(
    path: &Path,
    f: &dyn IoFile,
    loc: Loc,
    name: &str,
    line: &[u8],
) -> StoreResult<Entry> {
    let no = || count_lines_before(f, path, loc.off).map(|n| n + 1);
    let e: Entry = match serde_json::from_slice(line) {
        Ok(e) => e,
        Err(e) => return Err(json_err(path, no()?, &e)),
    };
    if e.job.def.name != name {
        return Err(corrupt(
            path,
            no()?,
            1,
            format!(
                "the line indexed for job '{name}' holds job '{}' (the file changed under this process)",
                e.job.def.name
            ),
        ));
    }
    Ok(e)
}

/// Job lines read through a window of each file: lines asked for in file order (the snapshot
/// is in name order, and so is a jobs file listed by name) are read [`PIECE`] bytes at a time
/// instead of one `pread` each; a line behind the last one, or far ahead of it, is read alone
/// (what a jobs file in another order costs). For one operation under the lock (the files do
/// not change under it).
pub(super) struct LineReader {
    pub(super) snapshot: Window,
    pub(super) journal: Window,
    /// The previous journal, after a followed compaction (see `follow.rs`).
    pub(super) old_journal: Window,
    pub(super) spath: std::path::PathBuf,
    pub(super) jpath: std::path::PathBuf,
}

#[derive(Default)]
pub(super) struct Window {
    /// File offset of `buf[0]`.
    pub(super) start: u64,
    pub(super) buf: Vec<u8>,
    /// Where the line after the last one asked for starts.
    pub(super) next: u64,
}

impl Window {
    /// The `loc.len` bytes at `loc.off` of `f` (`flen` bytes long), not yet verified.
    pub(super) fn line(
        &mut self,
        f: &dyn IoFile,
        path: &Path,
        flen: u64,
        loc: Loc,
    ) -> StoreResult<&[u8]> {
        let len = loc.len as u64;
        let end = loc.off + len;
        let inside = loc.off >= self.start && end <= self.start + self.buf.len() as u64;
        if !inside {
            let ahead = loc.off >= self.next && loc.off - self.next <= PIECE;
            let want = if ahead {
                PIECE.min(flen.saturating_sub(loc.off)).max(len)
            } else {
                len
            };
            self.buf.resize(want as usize, 0);
            if let Err(e) = read_at(f, path, loc.off, &mut self.buf) {
                // Nothing of the old window is left in it: never serve from it again.
                self.buf.clear();
                return Err(e);
            }
            self.start = loc.off;
        }
        self.next = end + 1;
        let from = (loc.off - self.start) as usize;
        Ok(&self.buf[from..from + loc.len as usize])
    }
}

impl LineReader {
    /// A reader of the job files of the store in `dir`.
    pub(super) fn new(dir: &Path) -> LineReader {
        LineReader {
            snapshot: Window::default(),
            journal: Window::default(),
            old_journal: Window::default(),
            spath: dir.join(SNAPSHOT_FILE),
            jpath: dir.join(JOURNAL_FILE),
        }
    }

    /// The bytes of the line at `loc` of `inner`'s files, its checksum verified (valid until the
    /// next call), with the file's path, the file and `loc` with its offset in that file.
    pub(super) fn line<'r>(
        &'r mut self,
        inner: &'r Inner,
        loc: Loc,
    ) -> StoreResult<(&'r Path, &'r dyn IoFile, Loc, &'r [u8])> {
        let (path, f, flen, w, at) = if loc.journal {
            let (f, at) = inner.journal_at(&self.jpath, loc)?;
            match &inner.followed {
                Some(fw) if loc.off < fw.j0 => (&self.jpath, f, fw.j0, &mut self.old_journal, at),
                _ => (&self.jpath, f, inner.journal.len, &mut self.journal, at),
            }
        } else {
            let path = &self.spath;
            let f = inner
                .snapshot
                .as_deref()
                .ok_or_else(|| StoreError::Backend(BackendError::NotOpen { path: path.clone() }))?;
            (path, f, inner.snapshot_len, &mut self.snapshot, loc)
        };
        let line = w.line(f, path, flen, at)?;
        if let Err((col, what)) = verify_at(line, at) {
            let no = count_lines_before(f, path, at.off)? + 1;
            return Err(corrupt(path, no, col, what));
        }
        Ok((path, f, at, line))
    }

    /// The entry of job `name` from its line (see [`Locked::read_entry`]).
    pub(super) fn entry(&mut self, inner: &Inner, name: &str, slim: &Slim) -> StoreResult<Entry> {
        let loc = slim.loc.ok_or_else(|| {
            StoreError::Backend(BackendError::IndexMismatch {
                job: name.to_string(),
                what: "neither a line nor a record",
            })
        })?;
        let (path, f, at, line) = self.line(inner, loc)?;
        entry_of(path, f, at, name, line)
    }
}

pub(super) fn line_len(path: &Path, no: u64, line: &[u8]) -> StoreResult<u32> {
    u32::try_from(line.len()).map_err(|_| corrupt(path, no, 1, "job line is over 4 GiB"))
}

/// Size of the pieces the snapshot and the journal are read in.
pub(super) const PIECE: u64 = 1024 * 1024;

/// Call `each` on the first `len` bytes of `f`, `PIECE` bytes at a time.
pub(super) fn for_each_piece(
    f: &dyn IoFile,
    path: &Path,
    len: u64,
    mut each: impl FnMut(&[u8]) -> StoreResult<()>,
) -> StoreResult<()> {
    let mut buf = vec![0u8; PIECE.min(len) as usize];
    let mut pos = 0;
    while pos < len {
        let n = PIECE.min(len - pos) as usize;
        read_at(f, path, pos, &mut buf[..n])?;
        each(&buf[..n])?;
        pos += n as u64;
    }
    Ok(())
}

/// Call `each(line_number, offset, line)` (number from 1, offset of the line's first byte, the
/// line without its newline) on every complete line of the first `len` bytes of `f`, reading it
/// a piece at a time. Bytes after the last newline are not passed (callers check the file ends
/// with one).
pub(super) fn for_each_line(
    f: &dyn IoFile,
    path: &Path,
    len: u64,
    mut each: impl FnMut(u64, u64, &[u8]) -> StoreResult<()>,
) -> StoreResult<()> {
    let mut carry: Vec<u8> = Vec::new();
    let mut no = 0u64;
    // Offset of the first byte of `carry` (or of the next line when it is empty).
    let mut line_off = 0u64;
    let mut pos = 0u64;
    for_each_piece(f, path, len, |whole| {
        let mut piece = whole;
        while let Some(i) = memchr::memchr(b'\n', piece) {
            no += 1;
            if carry.is_empty() {
                each(no, line_off, &piece[..i])?;
            } else {
                carry.extend_from_slice(&piece[..i]);
                each(no, line_off, &carry)?;
                carry.clear();
            }
            piece = &piece[i + 1..];
            line_off = pos + (whole.len() - piece.len()) as u64;
        }
        carry.extend_from_slice(piece);
        pos += whole.len() as u64;
        Ok(())
    })
}

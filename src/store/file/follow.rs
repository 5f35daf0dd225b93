//! Following a compaction without reloading every job: after another handle (or this one's
//! compaction thread) swaps in a new snapshot, a handle that holds both files it was folded from
//! keeps reading its jobs where they were and reads only the new journal's lines.
//!
//! A compaction (`compact.rs`) writes in the new snapshot's header the inodes of the snapshot
//! and the journal it folded (`folded`), and nothing else goes into that snapshot. A handle
//! whose open snapshot and journal are those two files (it holds them open, so neither inode
//! number can have been given to another file) already indexed every record the new snapshot
//! holds: a snapshot line is where it was, a journal line before the absorbed length `J0` is
//! still in the previous journal, and the lines past `J0` are the new journal's first lines, in
//! the same order. The handle keeps the previous journal open and numbers the new journal's
//! lines after `J0` ([`Inner::journal_off`]), so no index entry moves; following costs the
//! headers and the lines past `J0` (compared byte for byte with what it read), not the store.
//! A second compaction while a handle still reads the previous generation's files reloads it.
//!
//! Owns: [`Followed`], the decision to follow, the journal offset mapping. Must not touch: the
//! compaction's files (`compact.rs` writes them) or what a record says.

use std::path::Path;

use super::compaction::Followed;
use super::handle::{Inner, Locked};
use super::layout::{BLOCK, JOURNAL_FILE, SNAPSHOT_FILE};
use super::log::{AppendLog, complete_len, io_err, read_at};
use super::record::{JournalAcct, Loc, journal_is_stale_with, later_mark};
use crate::store::filefmt;
use crate::store::io::{IoFile, OpenMode};
use crate::store::{StoreError, StoreResult};

impl Inner {
    /// This handle's offset for the current journal's byte `real` (see the module doc).
    pub(super) fn journal_off(&self, real: u64) -> u64 {
        match &self.followed {
            Some(f) => real - f.hdr + f.j0,
            None => real,
        }
    }

    /// The journal file that holds the line at `loc` (a journal entry) and `loc` with its offset
    /// in that file.
    pub(super) fn journal_at(&self, path: &Path, loc: Loc) -> StoreResult<(&dyn IoFile, Loc)> {
        match &self.followed {
            Some(f) if loc.off < f.j0 => Ok((&*f.old_journal, loc)),
            Some(f) => Ok((
                self.journal.file(path)?,
                Loc {
                    off: loc.off - f.j0 + f.hdr,
                    ..loc
                },
            )),
            None => Ok((self.journal.file(path)?, loc)),
        }
    }

    /// Entries at journal offsets `a` and `b` are in the same file.
    pub(super) fn same_journal(&self, a: u64, b: u64) -> bool {
        self.followed
            .as_ref()
            .is_none_or(|f| (a < f.j0) == (b < f.j0))
    }

    /// The length of the snapshot in place (the compaction threshold is measured against it).
    pub(super) fn live_snapshot_len(&self) -> u64 {
        self.followed
            .as_ref()
            .map_or(self.snapshot_len, |f| f.snap_len)
    }
}

/// The first line of `f` (at most [`BLOCK`] bytes), without its newline.
fn first_line(f: &dyn IoFile, path: &Path, len: u64) -> StoreResult<Option<Vec<u8>>> {
    let mut first = vec![0u8; len.min(BLOCK) as usize];
    read_at(f, path, 0, &mut first)?;
    Ok(memchr::memchr(b'\n', &first).map(|end| {
        first.truncate(end);
        first
    }))
}

impl Locked<'_> {
    /// The journal was replaced: follow the compaction that did it when it folded exactly the
    /// files this handle holds (see the module doc). `Ok(false)`: it did not (or this handle
    /// already reads the generation before); the caller reloads.
    pub(super) fn follow(&mut self) -> StoreResult<bool> {
        let inner = &*self.inner;
        if !inner.loaded || inner.journal_stale || inner.followed.is_some() {
            return Ok(false);
        }
        let (spath, jpath) = (self.path(SNAPSHOT_FILE), self.path(JOURNAL_FILE));
        let Some(held_snap) = inner.snapshot.as_deref() else {
            return Ok(false);
        };
        let held = filefmt::Folded {
            snapshot: held_snap.metadata().map_err(io_err(&spath))?.ino,
            journal: inner.journal.ino,
        };
        let io = self.io();
        let sf = match io.open(&spath, OpenMode::Read) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(StoreError::io(spath, e)),
        };
        let sm = sf.metadata().map_err(io_err(&spath))?;
        let Some(line) = first_line(&*sf, &spath, sm.len)? else {
            return Ok(false);
        };
        let Ok(h) = serde_json::from_slice::<filefmt::Header>(&line) else {
            return Ok(false);
        };
        let generation = inner.generation + 1;
        let Some(absorbed) = h.absorbed else {
            return Ok(false);
        };
        let j0 = absorbed.len;
        if h.cronsole != "snapshot"
            || h.store.as_deref() != Some(self.id())
            || h.generation != generation
            || h.folded != Some(held)
            || j0 > inner.journal.len
        {
            return Ok(false);
        }
        let jf = io.open(&jpath, OpenMode::Append).map_err(io_err(&jpath))?;
        let jm = jf.metadata().map_err(io_err(&jpath))?;
        let jlen = complete_len(&jpath, &*jf, jm.len)?;
        let Some(jline) = first_line(&*jf, &jpath, jlen)? else {
            return Ok(false);
        };
        // Its generation is the new snapshot's (else: not the compaction's journal).
        let ours = journal_is_stale_with(&jpath, &jline, self.id(), generation, None, |_| Ok(None));
        if !matches!(ours, Ok(None)) {
            return Ok(false);
        }
        let hdr = jline.len() as u64 + 1;
        // The lines past J0 this handle read must be the new journal's first bytes.
        let known = inner.journal.len - j0;
        if hdr + known > jlen {
            return Ok(false);
        }
        if known > 0 {
            let old = inner.journal.file(&jpath)?;
            let mut a = vec![0u8; known as usize];
            let mut b = vec![0u8; known as usize];
            read_at(old, &jpath, j0, &mut a)?;
            read_at(&*jf, &jpath, hdr, &mut b)?;
            if a != b {
                return Ok(false);
            }
        }
        let acct = serde_json::from_slice::<JournalAcct>(&jline)
            .ok()
            .and_then(|h| h.acct);
        let inner = &mut *self.inner;
        let Some(old_journal) = inner.journal.file.take() else {
            return Ok(false);
        };
        inner.followed = Some(Followed {
            old_journal,
            j0,
            hdr,
            snap_ino: sm.ino,
            snap_len: sm.len,
        });
        inner.journal = AppendLog {
            file: Some(jf),
            ino: jm.ino,
            len: hdr + known,
            cut_unsynced: false,
        };
        inner.generation = generation;
        inner.acct = later_mark(inner.acct, acct);
        // The new names may not be durable yet (see `Inner::names_unsynced`).
        inner.names_unsynced = true;
        tracing::debug!(
            "followed the compaction to generation {generation}: {} bytes of new journal lines to read",
            jlen - hdr - known
        );
        self.read_journal_tail(jlen)?;
        Ok(true)
    }
}

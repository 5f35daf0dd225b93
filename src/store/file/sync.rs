//! The cache kept in step with the files: taking the lock, bringing the cache up to date with
//! what other handles wrote (journal tail, settings, history), and writing an operation's rows
//! and records in the order crash safety needs (history first, then the journal).
//!
//! Owns: `FileStore::lock`, `Locked::refresh`, `Locked::persist`, the settings file's refresh
//! and write. Must not touch: what the rows and records say (the plans and policies).

use uuid::Uuid;

use super::handle::{FileStore, Locked};
use super::layout::{JOURNAL_FILE, LOCK_FILE, SETTINGS_FILE, UNACKED_RANGES};
use super::log::{check_id, corrupt, io_err, json_err, missing, stat, write_atomic};
use super::record::settings_bytes;
use crate::model::{HistoryRow, Settings};
use crate::store::filefmt::{self};
use crate::store::rules;
use crate::store::{StoreError, StoreResult};

impl FileStore {
    /// Take the lock for an operation that may look at every job: a point handle (`point.rs`)
    /// becomes a handle of every job first, checked as an open checks one.
    pub(super) fn lock(&self) -> StoreResult<Locked<'_>> {
        self.lock_as(None)
    }

    /// Take the lock for an operation that reads and writes the jobs `names` only (none: it
    /// reads no job, e.g. history or settings). A point handle looks up just those jobs; any
    /// other handle is locked as [`FileStore::lock`] locks it.
    pub(super) fn lock_for(&self, names: &[&str]) -> StoreResult<Locked<'_>> {
        self.lock_as(Some(names))
    }

    fn lock_as(&self, named: Option<&[&str]>) -> StoreResult<Locked<'_>> {
        let inner = self.inner.lock().unwrap_or_else(|e| {
            // A panic mid-operation may have left the cache half-updated: reload from disk.
            let mut g = e.into_inner();
            g.loaded = false;
            g
        });
        let lpath = self.path(LOCK_FILE);
        self.flock(&lpath)?;
        let mut l = Locked { store: self, inner };
        l.locked(named)?;
        Ok(l)
    }
}

impl Locked<'_> {
    /// What taking the lock does once it is held: the cache brought up to date (a point
    /// handle's named jobs looked up), the operation's bookkeeping reset.
    fn locked(&mut self, named: Option<&[&str]>) -> StoreResult<()> {
        self.inner.rows_known.clear();
        let whole = named.is_none() && self.inner.point.is_some();
        if whole {
            self.inner.point = None;
            self.inner.loaded = false;
        }
        let r = self.refresh().and_then(|()| {
            if whole {
                // What an open of every job checks (`open.rs`).
                let rows = self.verify_open_segment()?;
                self.cross_check(&rows)?;
            }
            self.find_named(named.unwrap_or_default())
        });
        if let Err(e) = r {
            self.inner.loaded = false;
            return Err(e);
        }
        let end = self.mark_now();
        // A point handle's empty index says nothing about the store's jobs.
        let no_job = self.inner.point.is_none() && self.inner.jobs.is_empty();
        self.inner.acct_clean =
            no_job || (self.inner.acct == Some(end) && !self.inner.history_sealed_open);
        self.inner.acct_upto = None;
        Ok(())
    }

    /// Let other processes have the store while this operation reads its input; the cache
    /// stays held (this process's other operations wait) and nothing may be written until
    /// [`Self::relock_file`].
    pub(super) fn unlock_file(&mut self) {
        if let Err(e) = self.store.lock.unlock() {
            tracing::warn!("unlocking the store failed: {e}");
        }
    }

    /// Take the lock back after [`Self::unlock_file`]: the cache is refreshed as when the lock
    /// is first taken.
    pub(super) fn relock_file(&mut self) -> StoreResult<()> {
        self.store.flock(&self.store.path(LOCK_FILE))?;
        self.locked(None)
    }
    /// Bring the cache up to date with the files. Never writes: a torn tail is left in place
    /// (a writer cuts it before its next append), a stale journal is left for a writer to
    /// replace.
    pub(super) fn refresh(&mut self) -> StoreResult<()> {
        let jpath = self.path(JOURNAL_FILE);
        let Some(m) = stat(self.io(), &jpath)? else {
            return Err(missing(
                &jpath,
                "it holds every change since the last snapshot; falling back to the snapshot would run already-run slots again",
            ));
        };
        let j = &self.inner.journal;
        let before = self.inner.loaded.then_some((
            j.ino,
            j.len,
            self.inner.history.ino,
            self.inner.history.len,
        ));
        // A stale journal never grows (writers replace it before appending), so one that did is
        // reloaded (and judged) in full.
        if !self.inner.loaded
            || m.ino != j.ino
            || m.len < j.len
            || (self.inner.journal_stale && m.len > j.len)
        {
            // A compaction that folded the files this handle reads is followed, not reloaded
            // (a point handle's reload reads only the files' headers).
            if !(m.ino != j.ino && self.inner.point.is_none() && self.follow()?) {
                self.full_reload()?;
            }
        } else if m.len > j.len {
            self.read_journal_tail(m.len)?;
        }
        self.refresh_settings()?;
        self.refresh_history()?;
        // History grew while the journal did not change: rows whose job records never landed
        // (a process died or failed between the two writes). Remember them like our own failed
        // writes, so a claim does not write the same `missed`/overlap row again.
        if let Some((jino, jlen, hino, hlen)) = before {
            let inner = &mut *self.inner;
            let (j, h) = (&inner.journal, &inner.history);
            if j.ino == jino && j.len == jlen && h.ino == hino && h.len > hlen {
                if inner.unacked.len() >= UNACKED_RANGES {
                    inner.unacked.remove(0);
                }
                inner.unacked.push((hino, hlen, h.len));
            }
        }
        Ok(())
    }

    /// Write `settings` when they differ from the stored ones (the first step of `apply`).
    pub(super) fn write_settings(&mut self, settings: &Settings) -> StoreResult<()> {
        if self.inner.settings != *settings {
            let bytes = settings_bytes(self.id(), settings)?;
            let spath = self.path(SETTINGS_FILE);
            write_atomic(self.io(), &self.store.dir, &spath, &bytes)?;
            self.inner.settings_stamp = (0, 0, 0, 0);
            self.refresh_settings()?;
        }
        Ok(())
    }

    pub(super) fn refresh_settings(&mut self) -> StoreResult<()> {
        let spath = self.path(SETTINGS_FILE);
        let Some(m) = stat(self.io(), &spath)? else {
            return Err(missing(
                &spath,
                "it holds the budget; running without it would remove every spending limit",
            ));
        };
        let stamp = (m.ino, m.mtime_sec, m.mtime_nsec, m.len);
        if stamp == self.inner.settings_stamp {
            return Ok(());
        }
        let text = self.io().read(&spath).map_err(io_err(&spath))?;
        if text.iter().all(u8::is_ascii_whitespace) {
            return Err(corrupt(&spath, 1, 1, "settings file is empty"));
        }
        let f: filefmt::SettingsFile<Settings> =
            serde_json::from_slice(&text).map_err(|e| json_err(&spath, e.line() as u64, &e))?;
        if f.cronsole != "settings" {
            return Err(corrupt(&spath, 1, 1, "not a cronsole settings file"));
        }
        check_id(&spath, Some(&f.store), self.id())?;
        filefmt::verify_settings(&text).map_err(|what| corrupt(&spath, 1, 1, what))?;
        self.inner.settings = f.settings;
        self.inner.settings_stamp = stamp;
        self.inner.names_unsynced = true;
        Ok(())
    }

    /// History rows first, then job records. A failure leaves the cache to be reloaded.
    /// Rows that a failed persist already put in history (see `Inner::unacked`) are not
    /// appended again.
    pub(super) fn persist(&mut self, rows: &[HistoryRow], names: &[String]) -> StoreResult<()> {
        self.persist_with(rows, names, false, &[])
    }

    /// [`Self::persist`] of completions: the rows of `runs` are their runs' own rows, which
    /// only a row of the same run already records.
    pub(super) fn persist_runs(
        &mut self,
        rows: &[HistoryRow],
        names: &[String],
        runs: &[Uuid],
    ) -> StoreResult<()> {
        self.persist_with(rows, names, false, runs)
    }

    /// [`Self::persist`]; `release`: each record goes from `hot` once encoded (a batch that
    /// needs none of them afterwards, `apply`'s, holds them and their lines no longer at once).
    pub(super) fn persist_with(
        &mut self,
        rows: &[HistoryRow],
        names: &[String],
        release: bool,
        runs: &[Uuid],
    ) -> StoreResult<()> {
        if self.inner.names_unsynced {
            if let Err(e) = self.io().sync_dir(&self.store.dir) {
                // The caller already changed the cache: nothing of it was written.
                self.inner.loaded = false;
                return Err(StoreError::io(&self.store.dir, e));
            }
            self.inner.names_unsynced = false;
        }
        let landed = if rows.is_empty() {
            Vec::new()
        } else {
            self.unacked_rows()?
        };
        let fresh: std::borrow::Cow<'_, [HistoryRow]> = if landed.is_empty() {
            std::borrow::Cow::Borrowed(rows)
        } else {
            rows.iter()
                .filter(|r| {
                    !landed
                        .iter()
                        .any(|l| rules::rows::same_row_of_runs(l, r, runs))
                })
                .cloned()
                .collect::<Vec<_>>()
                .into()
        };
        let relies = std::mem::take(&mut self.inner.relies_on_landed) || fresh.len() < rows.len();
        if !fresh.is_empty()
            && let Err(e) = self.sync_journal()
        {
            // Nothing of the cache's change was written.
            self.inner.loaded = false;
            return Err(e);
        }
        let (ino, before) = (self.inner.history.ino, self.inner.history.len);
        let r = self
            .append_history(&fresh)
            .and_then(|_| {
                if relies && fresh.is_empty() {
                    self.sync_history()
                } else {
                    Ok(())
                }
            })
            .and_then(|_| self.append_jobs(names, release));
        if r.is_err() {
            self.inner.loaded = false;
            if !fresh.is_empty() {
                self.note_unacked(ino, before);
            }
        }
        r
    }
}

//! `clock.json`: the latest clock a command stored job records on, kept in the store so that
//! every handle, in every process, learns it.
//!
//! Owns: reading and writing that file. Must not touch: what a clock behind it does to the
//! jobs (the sweep in `claim.rs`, the rules in `store::rules::slots`).
//!
//! Jobs a command stores (`apply`, `edit`, an operator's edit) take their first slots from the
//! command's clock. A command whose clock alone is ahead (a faked clock, a time namespace)
//! stores them ahead, and they are not due for as long: no claim looks at them. An owner
//! learns of a clock ahead from owner records (its own claims, other owners' heartbeats), but
//! a command is no owner and leaves none. So each command that stores records writes its clock
//! here (an apply right after its records, so one refused for its input changes nothing; an
//! operator's edit before them), and each claim reads it: a claim whose clock is behind it by more than the tolerance re-derives every
//! job once, whichever process it runs in, and writes its own clock here so that later handles
//! do not sweep again. The file is advisory, like owner records: missing, unreadable or
//! another store's, it says nothing. It is written only when the clock is past what it says by
//! more than the tolerance (an `apply` a minute after the last writes it again), temp + fsync +
//! rename, so a power loss does not take it back from records that rely on it. A crash between
//! an apply's records and this file loses the sweep (a command's clock ahead by more than a
//! minute is corrected before it stores anything, see `cli::cmd::storing_now`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::handle::Locked;
use super::layout::CLOCK_FILE;
use super::log::{stat, write_atomic};
use crate::store::rules::slots::AHEAD_TOLERANCE;
use crate::store::{StoreError, StoreResult};

#[derive(Serialize, Deserialize)]
struct ClockFile {
    cronsole: String,
    store: String,
    /// The clock the latest command stored records on.
    stored_on: DateTime<Utc>,
}

const KIND: &str = "clock";

impl Locked<'_> {
    /// The instant `clock.json` holds, re-read when the file changed since this handle last
    /// read it. `None`: no such file, or one that says nothing (see the module doc).
    pub(super) fn stored_clock(&mut self) -> Option<DateTime<Utc>> {
        let path = self.path(CLOCK_FILE);
        let Ok(Some(m)) = stat(self.io(), &path) else {
            self.inner.clock_file = None;
            return None;
        };
        let stamp = (m.ino, m.mtime_sec, m.mtime_nsec, m.len);
        if self.inner.clock_file.is_none_or(|(s, _)| s != stamp) {
            let at = self
                .io()
                .read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<ClockFile>(&b).ok())
                .filter(|f| f.cronsole == KIND && f.store == self.id())
                .map(|f| f.stored_on);
            self.inner.clock_file = Some((stamp, at));
        }
        self.inner.clock_file.and_then(|(_, at)| at)
    }

    /// Records are about to be stored on `now`: `clock.json` says so when `now` is past what it
    /// holds by more than the tolerance (or it holds nothing).
    pub(super) fn note_stored_clock(&mut self, now: DateTime<Utc>) -> StoreResult<()> {
        if self
            .stored_clock()
            .is_some_and(|s| now <= s + AHEAD_TOLERANCE)
        {
            return Ok(());
        }
        self.write_stored_clock(now)
    }

    /// Replace `clock.json` with `at` (also to bring it back after a sweep re-derived every
    /// job from a clock behind it).
    pub(super) fn write_stored_clock(&mut self, at: DateTime<Utc>) -> StoreResult<()> {
        let f = ClockFile {
            cronsole: KIND.into(),
            store: self.id().to_string(),
            stored_on: at,
        };
        let bytes = serde_json::to_vec(&f).map_err(StoreError::encode("the clock file"))?;
        let path = self.path(CLOCK_FILE);
        write_atomic(self.io(), &self.store.dir, &path, &bytes)?;
        // Read again at the next look: the stamp of the file written is not known here.
        self.inner.clock_file = None;
        Ok(())
    }
}

//! Owner records in the file store: `owners/<owner id>.json`, one file per running engine,
//! replaced at each heartbeat.
//!
//! Owns: writing and reading those files. Must not touch: what an owner does with its measured
//! offset (the engine decides), the store's lock (a record is one owner's own file, replaced
//! by rename, so no other process waits for a heartbeat).
//!
//! The store's clock here is the file system's: the modification time the kernel (or, on a
//! network file system, the file server) stamps on the record as it is written. An owner's
//! offset is its clock when it sent the beat minus that stamp. On one host the two agree to a
//! few milliseconds unless the process's own idea of the time is off (a time namespace, a
//! faked clock); on a file system shared by several hosts — which this store does not support
//! for its data, its lock being host-local — the stamp is still the one clock they all read.
//! Records are advisory: written without fsync, a record that cannot be read is skipped, and
//! records not rewritten for a day are deleted by an owner's first heartbeat or its first of
//! each hour.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use chrono::{DateTime, Utc};

use super::handle::FileStore;
use crate::model::{OwnerRecord, OwnerSeen};
use crate::store::{StoreError, StoreResult};

/// The directory of owner records.
pub(super) const OWNERS_DIR: &str = "owners";

/// Records older than this are deleted at the next heartbeat.
const FORGET_AFTER: std::time::Duration = std::time::Duration::from_secs(86_400);

/// A file name for an owner id (`host:pid:uuid8`): anything but `[A-Za-z0-9._:-]` becomes `_`.
fn file_name(owner: &str) -> String {
    let safe: String = owner
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{}.json", safe.trim_start_matches('.'))
}

/// Whether a beat stamped `now` sweeps the directory for forgotten records: an owner's first
/// beat, then its first beat of each hour (by the store's clock). Listing the directory is what
/// wakes every owner's change watcher on the store directory (the open of a subdirectory is an
/// event of its parent), so an idle owner lists it once an hour, not at every beat; a record
/// is forgotten a day after its last beat, so an hour later costs nothing.
fn sweep_due(previous: Option<SystemTime>, now: SystemTime) -> bool {
    let hour = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() / 3600)
    };
    previous.is_none_or(|p| hour(p) != hour(now))
}

fn io(path: &Path, e: std::io::Error) -> StoreError {
    StoreError::io(path.display().to_string(), e)
}

impl FileStore {
    fn owners_dir(&self) -> PathBuf {
        self.dir.join(OWNERS_DIR)
    }

    /// Replace this owner's record and read the file system's stamp on it (see the module doc).
    pub(super) fn write_beat(&self, rec: &OwnerRecord) -> StoreResult<OwnerRecord> {
        let dir = self.owners_dir();
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        let name = file_name(&rec.owner);
        let path = dir.join(&name);
        let tmp = dir.join(format!(".{name}.tmp"));
        let bytes =
            serde_json::to_vec_pretty(rec).map_err(StoreError::encode("an owner record"))?;
        std::fs::write(&tmp, &bytes).map_err(|e| io(&tmp, e))?;
        let stamped = std::fs::metadata(&tmp)
            .and_then(|m| m.modified())
            .map_err(|e| io(&tmp, e))?;
        // The record this beat replaces: its stamp says when this owner last swept.
        let previous = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
        std::fs::rename(&tmp, &path).map_err(|e| io(&path, e))?;
        let mut out = rec.clone();
        let store_now: DateTime<Utc> = stamped.into();
        out.clock_offset_ms = (rec.last_seen - store_now).num_milliseconds();
        out.last_seen = store_now;
        if sweep_due(previous, stamped) {
            self.forget_old_owners(&dir, stamped);
        }
        Ok(out)
    }

    /// Delete records not rewritten for [`FORGET_AFTER`] before `now` (the store's clock).
    fn forget_old_owners(&self, dir: &Path, now: SystemTime) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| now.duration_since(t).ok())
                .is_some_and(|age| age > FORGET_AFTER);
            if old {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }

    /// The file system's clock now: the stamp on a small file written beside the owner
    /// records and removed, as a heartbeat reads it. `None` when it cannot be written. A store
    /// no owner ever beat on has no directory of records: the probe goes in the store's own
    /// directory then (the same file system), so a command creates no directory to read it.
    pub(super) fn fs_clock(&self) -> Option<DateTime<Utc>> {
        let owners = self.owners_dir();
        let dir = if owners.is_dir() {
            owners
        } else {
            self.dir.clone()
        };
        let probe = dir.join(format!(".clock.{}.tmp", std::process::id()));
        std::fs::write(&probe, b"").ok()?;
        let stamp = std::fs::metadata(&probe).and_then(|m| m.modified());
        let _ = std::fs::remove_file(&probe);
        stamp.ok().map(Into::into)
    }

    /// The newest clock any owner record was sent with (its owner's own clock), if any.
    pub(super) fn newest_owner_clock(&self) -> Option<DateTime<Utc>> {
        self.read_owners()
            .ok()?
            .iter()
            .map(|o| o.record.last_seen + chrono::Duration::milliseconds(o.record.clock_offset_ms))
            .max()
    }

    /// Every readable record, in owner order; `ago` by this host's clock against each stamp.
    pub(super) fn read_owners(&self) -> StoreResult<Vec<OwnerSeen>> {
        let dir = self.owners_dir();
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(&dir, e)),
        };
        let now = SystemTime::now();
        let mut out = Vec::new();
        for e in entries.flatten() {
            let path = e.path();
            if path.extension().is_none_or(|x| x != "json") {
                continue;
            }
            let Ok(stamp) = e.metadata().and_then(|m| m.modified()) else {
                continue;
            };
            let Some(mut record) = std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<OwnerRecord>(&b).ok())
            else {
                continue;
            };
            // The file holds the owner's clock at sending; the stamp is the store's.
            let stamp: DateTime<Utc> = stamp.into();
            record.clock_offset_ms = (record.last_seen - stamp).num_milliseconds();
            record.last_seen = stamp;
            let ago = DateTime::<Utc>::from(now) - stamp;
            out.push(OwnerSeen { record, ago });
        }
        out.sort_by(|a, b| a.record.owner.cmp(&b.record.owner));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_ids_make_plain_file_names() {
        assert_eq!(file_name("web-1:4242:ab12cd34"), "web-1:4242:ab12cd34.json");
        assert_eq!(file_name("../x/y"), "_x_y.json");
        assert_eq!(file_name(".hidden"), "hidden.json");
    }

    #[test]
    fn an_owner_sweeps_at_its_first_beat_and_then_once_an_hour() {
        let at = |s: u64| SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(s);
        let h = 3600 * 490_000;
        assert!(sweep_due(None, at(h + 5)), "first beat");
        assert!(!sweep_due(Some(at(h + 5)), at(h + 10)), "same hour");
        assert!(!sweep_due(Some(at(h)), at(h + 3599)));
        assert!(sweep_due(Some(at(h + 3595)), at(h + 3600)), "next hour");
        // A stamp from the future (a clock set back) still sweeps once the hour differs.
        assert!(sweep_due(Some(at(h + 7200)), at(h + 10)));
    }

    /// A day-old record is deleted by another owner's first beat; a live one's own beats in
    /// the same hour do not list the directory again.
    #[test]
    fn a_day_old_record_is_forgotten_by_a_first_beat() {
        let dir = crate::testkit::tmp::TempDir::new("owners-sweep");
        let store = FileStore::open(&dir).unwrap();
        let owners = dir.join(OWNERS_DIR);
        std::fs::create_dir_all(&owners).unwrap();
        let old = owners.join("gone:1:00000000.json");
        std::fs::write(&old, "{}").unwrap();
        let two_days = SystemTime::now() - std::time::Duration::from_secs(2 * 86_400);
        std::fs::File::options()
            .write(true)
            .open(&old)
            .unwrap()
            .set_modified(two_days)
            .unwrap();
        let now = Utc::now();
        let rec = OwnerRecord {
            owner: "vm:2:11111111".into(),
            host: "vm".into(),
            pid: 2,
            pid_space: None,
            version: "0".into(),
            started_at: now,
            last_seen: now,
            clock_offset_ms: 0,
            claims_stopped: None,
            signed_off: None,
        };
        store.write_beat(&rec).unwrap();
        assert!(!old.exists(), "the first beat swept the day-old record");
        // Planted again: the next beat in the same hour leaves it (it lists nothing).
        std::fs::write(&old, "{}").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&old)
            .unwrap()
            .set_modified(two_days)
            .unwrap();
        let mine = owners.join("vm:2:11111111.json");
        let stamp = std::fs::metadata(&mine).unwrap().modified().unwrap();
        if sweep_due(Some(stamp), SystemTime::now()) {
            return; // the hour turned between the two beats: the second one sweeps
        }
        store.write_beat(&rec).unwrap();
        assert!(
            old.exists(),
            "a beat in the same hour does not list the directory"
        );
    }
}

//! Upgrading a format-1 store (previous release) in place.

use std::collections::BTreeMap;
use std::path::Path;

use super::history::history_header;
use super::jobs::{Entry, EntryRef};
use super::log::{encode_line, header_line, json_err, write_atomic};
use super::{
    HISTORY_FILE, JOURNAL_FILE, SETTINGS_FILE, SNAPSHOT_FILE, VERSION_FILE, settings_bytes,
};
use crate::model::{HistoryRow, Settings};
use crate::store::io::StoreIo;
use crate::store::{StoreError, StoreResult, filefmt};

/// Upgrade a format-1 store (previous release) in place, under the lock: every file is
/// rewritten with this store's id (history rows gain their checksums), `VERSION` last. A crash
/// midway leaves `VERSION` at 1 and the next writer redoes it (this reader accepts both forms).
pub(super) fn migrate_v1(io: &dyn StoreIo, dir: &Path, id: &str) -> StoreResult<()> {
    let p = |n: &str| dir.join(n);
    let read_opt = |path: &Path| match io.read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StoreError::io(path, e)),
    };
    let lines = |b: &[u8]| -> Vec<Vec<u8>> {
        b.split(|c| *c == b'\n')
            .filter(|l| !l.is_empty())
            .map(<[u8]>::to_vec)
            .collect()
    };
    let mut jobs: BTreeMap<String, Entry> = BTreeMap::new();
    let mut generation = 0;
    let spath = p(SNAPSHOT_FILE);
    if let Some(b) = read_opt(&spath)? {
        for (i, line) in lines(&b).iter().enumerate() {
            let no = i as u64 + 1;
            if i == 0 {
                let h: filefmt::Header =
                    serde_json::from_slice(line).map_err(|e| json_err(&spath, no, &e))?;
                generation = h.generation;
                continue;
            }
            let e: Entry = serde_json::from_slice(line).map_err(|e| json_err(&spath, no, &e))?;
            jobs.insert(e.job.def.name.clone(), e);
        }
    }
    let jpath = p(JOURNAL_FILE);
    if let Some(b) = read_opt(&jpath)? {
        // Only complete lines: a torn final line was never acknowledged.
        let end = b.iter().rposition(|c| *c == b'\n').map_or(0, |i| i + 1);
        let mut current = false;
        for (i, line) in lines(&b[..end]).iter().enumerate() {
            let no = i as u64 + 1;
            if i == 0 {
                let h: filefmt::Header =
                    serde_json::from_slice(line).map_err(|e| json_err(&jpath, no, &e))?;
                current = h.generation == generation;
                continue;
            }
            if !current {
                break;
            }
            let e: Entry = serde_json::from_slice(line).map_err(|e| json_err(&jpath, no, &e))?;
            jobs.insert(e.job.def.name.clone(), e);
        }
    }
    let setpath = p(SETTINGS_FILE);
    let settings: Settings = match read_opt(&setpath)? {
        None => Settings::default(),
        Some(b) => match serde_json::from_slice::<filefmt::SettingsFile<Settings>>(&b) {
            Ok(f) => f.settings,
            Err(_) => {
                serde_json::from_slice(&b).map_err(|e| json_err(&setpath, e.line() as u64, &e))?
            }
        },
    };
    let hpath = p(HISTORY_FILE);
    let mut history = history_header(id)?;
    if let Some(b) = read_opt(&hpath)? {
        let end = b.iter().rposition(|c| *c == b'\n').map_or(0, |i| i + 1);
        for (i, line) in b[..end].split(|c| *c == b'\n').enumerate() {
            if line.is_empty() {
                continue;
            }
            if i == 0 && serde_json::from_slice::<filefmt::HistoryHeader>(line).is_ok() {
                continue;
            }
            let row: HistoryRow =
                serde_json::from_slice(line).map_err(|e| json_err(&hpath, i as u64 + 1, &e))?;
            filefmt::encode_row(&mut history, &row).map_err(StoreError::encode("history row"))?;
        }
    }
    let generation = generation + 1;
    let mut snap = header_line("snapshot", generation, id, None)?;
    for e in jobs.values() {
        encode_line(
            &mut snap,
            "job record",
            &EntryRef {
                job: &e.job,
                mark: None,
            },
        )?;
    }
    write_atomic(io, dir, &spath, &snap)?;
    write_atomic(
        io,
        dir,
        &jpath,
        &header_line("journal", generation, id, None)?,
    )?;
    write_atomic(io, dir, &setpath, &settings_bytes(id, &settings)?)?;
    write_atomic(io, dir, &hpath, &history)?;
    write_atomic(
        io,
        dir,
        &p(VERSION_FILE),
        filefmt::version_text(id).as_bytes(),
    )?;
    tracing::info!(store = %dir.display(), jobs = jobs.len(), "migrated the store from format 1 to format 2");
    Ok(())
}

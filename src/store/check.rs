//! `cronsole check`: verify a whole store and report every problem with its location.
//!
//! Owns: the full verification of a file store (every line of every file: headers, store ids,
//! generations, record and row parses, history checksums) and of a PostgreSQL store (schema
//! version, every job record and history row decodes, the indexed columns agree with the
//! record). Must not touch: anything that writes — a check never repairs, cuts or migrates.
//!
//! Unlike opening a store (which stops at the first problem), a check goes on and lists them
//! all, up to [`MAX_REPORTED`] per file.

use std::path::Path;

use super::filefmt::{self, Absorbed, Header, HistoryHeader, SettingsFile};
use super::io::{OpenMode, RealIo, StoreIo};
use super::{StoreError, StoreResult};
use crate::model::{HistoryRow, JobRecord, Settings};

/// Problems listed per file before the rest are only counted.
pub const MAX_REPORTED: usize = 100;

/// One problem: where (file or table, line or row, column) and what.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Problem {
    pub location: String,
    pub line: u64,
    pub column: u64,
    pub what: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.location, self.line, self.column, self.what
        )
    }
}

/// What a check found.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Report {
    pub problems: Vec<Problem>,
    /// Problems past [`MAX_REPORTED`] in one file, counted only.
    pub more: u64,
    pub jobs: u64,
    pub history_rows: u64,
    /// The store id (file store: `VERSION`; PostgreSQL: `cronsole_store`), when readable.
    pub store_id: Option<String>,
    /// Things that are not damage (a torn, never-acknowledged tail a writer will cut).
    pub notes: Vec<String>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.problems.is_empty() && self.more == 0
    }

    fn push(
        &mut self,
        per_file: &mut usize,
        location: &Path,
        line: u64,
        column: u64,
        what: impl Into<String>,
    ) {
        *per_file += 1;
        if *per_file > MAX_REPORTED {
            self.more += 1;
            return;
        }
        self.problems.push(Problem {
            location: location.display().to_string(),
            line,
            column,
            what: what.into(),
        });
    }
}

/// Check the file store in `dir` through the real file system, holding the store lock (so no
/// writer is midway through an append or a compaction while we read). A lock held past
/// `lock_wait` is an error, not a hang.
pub fn check_file_store(dir: &Path, lock_wait: std::time::Duration) -> StoreResult<Report> {
    let io = RealIo;
    let lpath = dir.join("lock");
    let lock = io
        .open(&lpath, OpenMode::LockFile)
        .map_err(|e| StoreError::io(&lpath, e))?;
    if !lock
        .lock(lock_wait)
        .map_err(|e| StoreError::io(&lpath, e))?
    {
        return Err(StoreError::LockTimeout {
            file: lpath,
            waited: lock_wait,
        });
    }
    let r = check_file_store_with(dir, &io);
    if let Err(e) = lock.unlock() {
        tracing::warn!("unlocking the store failed: {e}");
    }
    Ok(r)
}

/// Lines of `bytes` with their 1-based numbers; the torn tail (no newline) separately.
/// The lines of an append log (`jobs.journal`, `history.jsonl`) for checking: an empty log is a
/// problem (its header line is missing), a torn final line a note (a write never acknowledged).
fn log_lines<'a>(
    r: &mut Report,
    n: &mut usize,
    path: &Path,
    bytes: &'a [u8],
    what: &str,
) -> (Vec<(u64, &'a [u8])>, &'a [u8]) {
    let (ls, torn) = lines(bytes);
    if ls.is_empty() {
        r.push(
            n,
            path,
            1,
            1,
            format!("{what} is empty: its header line is missing"),
        );
    }
    if !torn.is_empty() {
        r.notes.push(format!(
            "{}: a torn final line of {} bytes (a write that was never acknowledged; the next writer cuts it)",
            path.display(),
            torn.len()
        ));
    }
    (ls, torn)
}

fn lines(bytes: &[u8]) -> (Vec<(u64, &[u8])>, &[u8]) {
    let end = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |p| p + 1);
    let out = bytes[..end]
        .split_inclusive(|b| *b == b'\n')
        .enumerate()
        .map(|(i, l)| (i as u64 + 1, &l[..l.len() - 1]))
        .collect();
    (out, &bytes[end..])
}

pub fn check_file_store_with(dir: &Path, io: &dyn StoreIo) -> Report {
    let mut r = Report::default();
    let p = |n: &str| dir.join(n);
    let read = |path: &Path, r: &mut Report| -> Option<Vec<u8>> {
        match io.read(path) {
            Ok(b) => Some(b),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                r.push(&mut 0, path, 0, 0, "required store file is missing");
                None
            }
            Err(e) => {
                r.push(&mut 0, path, 0, 0, format!("cannot read: {e}"));
                None
            }
        }
    };
    let vpath = p("VERSION");
    let mut id: Option<String> = None;
    if let Some(v) = read(&vpath, &mut r) {
        match filefmt::parse_version(&String::from_utf8_lossy(&v)) {
            Some((2, Some(i))) => {
                r.store_id = Some(i.clone());
                id = Some(i);
            }
            Some(_) => r.push(&mut 0, &vpath, 1, 1, "format 1 store from a previous release (no store ids or checksums); `cronsole apply` or `cronsole run` upgrades it in place"),
            None => r.push(&mut 0, &vpath, 1, 1, format!("not a cronsole file store version (expected `{}`)", filefmt::VERSION_TEXT)),
        }
    }
    let check_id =
        |r: &mut Report, n: &mut usize, path: &Path, found: Option<&str>| match (found, &id) {
            (Some(f), Some(i)) if f != i => r.push(
                n,
                path,
                1,
                1,
                format!("file belongs to another store (store id {f}, this store is {i})"),
            ),
            (None, _) => r.push(n, path, 1, 1, "header carries no store id"),
            _ => {}
        };

    // Snapshot.
    let spath = p("jobs.snapshot.jsonl");
    let mut generation = None;
    let mut absorbed: Option<Absorbed> = None;
    let mut names = std::collections::BTreeSet::new();
    if let Some(b) = read(&spath, &mut r) {
        let mut n = 0;
        let (ls, torn) = lines(&b);
        if ls.is_empty() {
            r.push(
                &mut n,
                &spath,
                1,
                1,
                "snapshot is empty: its header line is missing",
            );
        }
        if !torn.is_empty() {
            r.push(
                &mut n,
                &spath,
                ls.len() as u64 + 1,
                1,
                "snapshot does not end with a newline",
            );
        }
        for (no, line) in ls {
            if no == 1 {
                match serde_json::from_slice::<Header>(line) {
                    Ok(h) if h.cronsole == "snapshot" => {
                        check_id(&mut r, &mut n, &spath, h.store.as_deref());
                        generation = Some(h.generation);
                        absorbed = h.absorbed;
                    }
                    Ok(_) => r.push(&mut n, &spath, 1, 1, "not a snapshot header"),
                    Err(e) => r.push(&mut n, &spath, 1, e.column() as u64, e.to_string()),
                }
                continue;
            }
            match serde_json::from_slice::<serde_json::Value>(line)
                .map_err(|e| (e.column() as u64, e.to_string()))
                .and_then(|v| {
                    let job = v.get("job").cloned().unwrap_or_default();
                    serde_json::from_value::<JobRecord>(job).map_err(|e| (1, e.to_string()))
                }) {
                Ok(rec) => {
                    names.insert(rec.def.name);
                }
                Err((c, w)) => r.push(&mut n, &spath, no, c, w),
            }
        }
    }

    // Journal.
    let jpath = p("jobs.journal");
    if let Some(b) = read(&jpath, &mut r) {
        let mut n = 0;
        let (ls, torn) = log_lines(&mut r, &mut n, &jpath, &b, "journal");
        let complete = &b[..b.len() - torn.len()];
        let mut replay = true;
        for (no, line) in ls {
            if no == 1 {
                match serde_json::from_slice::<Header>(line) {
                    Ok(h) if h.cronsole == "journal" => {
                        check_id(&mut r, &mut n, &jpath, h.store.as_deref());
                        if let Some(g) = generation
                            && h.generation != g
                        {
                            let leftover = Absorbed {
                                len: complete.len() as u64,
                                crc32: filefmt::crc32(complete),
                            };
                            if h.generation + 1 == g && absorbed == Some(leftover) {
                                replay = false;
                                r.notes.push(format!("{}: left over from before the last compaction (its records are in the snapshot; the next writer replaces it)", jpath.display()));
                            } else {
                                r.push(
                                    &mut n,
                                    &jpath,
                                    1,
                                    1,
                                    format!(
                                        "journal generation {} does not match the snapshot's ({g})",
                                        h.generation
                                    ),
                                );
                            }
                        }
                    }
                    Ok(_) => r.push(&mut n, &jpath, 1, 1, "not a journal header"),
                    Err(e) => r.push(&mut n, &jpath, 1, e.column() as u64, e.to_string()),
                }
                continue;
            }
            match serde_json::from_slice::<serde_json::Value>(line)
                .map_err(|e| (e.column() as u64, e.to_string()))
                .and_then(|v| {
                    let job = v.get("job").cloned().unwrap_or_default();
                    serde_json::from_value::<JobRecord>(job).map_err(|e| (1, e.to_string()))
                }) {
                Ok(rec) => {
                    if replay {
                        names.insert(rec.def.name);
                    }
                }
                Err((c, w)) => r.push(&mut n, &jpath, no, c, w),
            }
        }
    }
    r.jobs = names.len() as u64;

    // Settings.
    let setpath = p("settings.json");
    if let Some(b) = read(&setpath, &mut r) {
        let mut n = 0;
        if b.iter().all(u8::is_ascii_whitespace) {
            r.push(&mut n, &setpath, 1, 1, "settings file is empty");
        } else {
            match serde_json::from_slice::<SettingsFile<Settings>>(&b) {
                Ok(f) if f.cronsole == "settings" => {
                    check_id(&mut r, &mut n, &setpath, Some(&f.store))
                }
                Ok(_) => r.push(&mut n, &setpath, 1, 1, "not a cronsole settings file"),
                Err(e) => r.push(
                    &mut n,
                    &setpath,
                    e.line() as u64,
                    e.column() as u64,
                    e.to_string(),
                ),
            }
        }
    }

    // History: every row, checksum and parse.
    let hpath = p("history.jsonl");
    if let Some(b) = read(&hpath, &mut r) {
        let mut n = 0;
        let (ls, _torn) = log_lines(&mut r, &mut n, &hpath, &b, "history");
        for (no, line) in ls {
            if no == 1 {
                match serde_json::from_slice::<HistoryHeader>(line) {
                    Ok(h) if h.cronsole == "history" => {
                        check_id(&mut r, &mut n, &hpath, Some(&h.store))
                    }
                    Ok(_) => r.push(&mut n, &hpath, 1, 1, "not a history header"),
                    Err(e) => r.push(&mut n, &hpath, 1, e.column() as u64, e.to_string()),
                }
                continue;
            }
            let res = filefmt::verify_row(line).and_then(|_| {
                serde_json::from_slice::<HistoryRow>(line)
                    .map(|_| ())
                    .map_err(|e| (e.column() as u64, e.to_string()))
            });
            match res {
                Ok(()) => r.history_rows += 1,
                Err((c, w)) => r.push(&mut n, &hpath, no, c, w),
            }
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use crate::store::file::FileStore;

    #[test]
    fn check_reports_every_problem_with_its_location_and_writes_nothing() {
        let dir = std::env::temp_dir().join(format!("cronsole-check-{}", uuid::Uuid::new_v4()));
        let s = FileStore::open(&dir).unwrap();
        let file = crate::model::JobsFile {
            settings: Settings::default(),
            jobs: vec![crate::store::logic::tests_support::def("a")],
        };
        let t0 = chrono::DateTime::from_timestamp(0, 0).unwrap();
        s.apply(&file, t0).unwrap();
        let c = s
            .claim_due(&crate::store::ClaimRequest {
                now: t0,
                owner: "o",
                limit: 1,
                in_flight: &[],
            })
            .unwrap()
            .claims
            .remove(0);
        let row = HistoryRow::new(
            "a",
            crate::model::Status::Succeeded,
            c.trigger,
            c.slot,
            "o",
            t0,
        );
        s.complete(crate::store::Completion {
            job: "a".into(),
            run_id: c.run_id,
            owner: "o".into(),
            now: t0,
            row,
            state: None,
            hold_until: None,
        })
        .unwrap();
        let id = s.store_id().to_string();
        drop(s);
        let ok = check_file_store(&dir, std::time::Duration::from_secs(5)).unwrap();
        assert!(ok.ok(), "{:?}", ok.problems);
        assert_eq!((ok.jobs, ok.history_rows), (1, 1));
        assert_eq!(
            ok.store_id.as_deref(),
            Some(id.as_str()),
            "check reports the store id"
        );

        // Two problems in two files: both reported, with line numbers.
        let hpath = dir.join("history.jsonl");
        let mut h = std::fs::read(&hpath).unwrap();
        h.extend_from_slice(b"{\"garbage\": true}\n");
        std::fs::write(&hpath, &h).unwrap();
        std::fs::remove_file(dir.join("settings.json")).unwrap();
        let before = std::fs::read(&hpath).unwrap();
        let bad = check_file_store(&dir, std::time::Duration::from_secs(5)).unwrap();
        assert!(!bad.ok());
        let text: Vec<String> = bad.problems.iter().map(|p| p.to_string()).collect();
        assert!(
            text.iter()
                .any(|t| t.contains("history.jsonl:3:") && t.contains("checksum")),
            "{text:?}"
        );
        assert!(
            text.iter()
                .any(|t| t.contains("settings.json") && t.contains("missing")),
            "{text:?}"
        );
        assert_eq!(
            std::fs::read(&hpath).unwrap(),
            before,
            "check writes nothing"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! `cronsole check`: verify a whole store and report every problem with its location.
//!
//! Owns: the full verification of a file store (every line of every file: headers, store ids,
//! generations, record and row parses, history checksums, every sealed history segment's
//! header, rows and seal — length, row count, CRC-32 — the run of segments having no gap, and
//! the journal/history cross-check, and `jobs.index` against the snapshot: one an open would
//! ignore is a note, one it would use must agree with every line) and of a PostgreSQL store (schema
//! version, every job record and history row decodes, the indexed columns agree with the
//! record). Must not touch: anything that writes — a check never repairs, cuts or migrates.
//!
//! Unlike opening a store (which stops at the first problem), a check goes on and lists them
//! all, up to [`MAX_REPORTED`] per file.

use std::path::Path;

use super::file::{INDEX_FILE, IndexCheck, check_index};
use super::filefmt::{self, Absorbed, Header, HistoryHeader, SettingsFile};
use super::io::{OpenMode, RealIo, StoreIo};
use super::{StoreError, StoreResult};
use crate::model::{HistoryRow, JobRecord, Settings};

/// Problems listed per file before the rest are only counted.
pub const MAX_REPORTED: usize = 100;

/// One problem: where (file or table, line or row, column) and what.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Problem {
    /// The file (or table) the problem is in.
    pub location: String,
    /// 1-based line (or row); 0 when the problem is about the whole file.
    pub line: u64,
    /// 1-based column; 0 when there is none.
    pub column: u64,
    /// What is wrong, in words.
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
    /// The problems found, file by file, at most [`MAX_REPORTED`] per file.
    pub problems: Vec<Problem>,
    /// Problems past [`MAX_REPORTED`] in one file, counted only.
    pub more: u64,
    /// Job records read.
    pub jobs: u64,
    /// History rows read.
    pub history_rows: u64,
    /// The store id (file store: `VERSION`; PostgreSQL: `cronsole_store`), when readable.
    pub store_id: Option<String>,
    /// Things that are not damage (a torn, never-acknowledged tail a writer will cut).
    pub notes: Vec<String>,
}

impl Report {
    /// Nothing is damaged (notes do not count).
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
        return Err(super::file::holder::timeout(lpath, &*lock, lock_wait));
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

/// The file-store check of [`check_file_store`] over any I/O layer, without taking the lock
/// (the caller holds it, or tests a fault simulator's files).
pub(crate) fn check_file_store_with(dir: &Path, io: &dyn StoreIo) -> Report {
    let mut r = Report::default();
    let (id, checked_jobs) = check_version(&mut r, dir, io);
    let mut jobs = Jobs::default();
    let (generation, absorbed) = check_snapshot(&mut r, dir, io, &id, checked_jobs, &mut jobs);
    check_journal(
        &mut r,
        dir,
        io,
        &id,
        checked_jobs,
        (generation, absorbed),
        &mut jobs,
    );
    r.jobs = jobs.names.len() as u64;
    check_settings(&mut r, dir, io, &id);
    let open = check_open_segment(&mut r, dir, io, &id);
    if let Some(top) = open.seg {
        check_segments(&mut r, dir, io, id.as_deref(), top, open.len);
        check_cross(&mut r, dir, top, &open, &jobs.at);
    }
    r
}

/// Every job named by the snapshot and the journal (the journal's records win), and per job
/// the last record's (every live lease, history position): the cross-check.
#[derive(Default)]
struct Jobs {
    names: std::collections::BTreeSet<String>,
    at: std::collections::BTreeMap<String, (Vec<uuid::Uuid>, Option<Pos>)>,
}

/// The open history segment as the cross-check needs it.
struct OpenSegment {
    seg: Option<u64>,
    /// (offset, job, run id, the row ends a run) of every row.
    rows: Vec<(u64, String, uuid::Uuid, bool)>,
    len: u64,
}

/// A required store file's bytes; a missing or unreadable one is reported.
fn read(io: &dyn StoreIo, path: &Path, r: &mut Report) -> Option<Vec<u8>> {
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
}

/// A header's store id against `VERSION`'s.
fn check_id(r: &mut Report, id: &Option<String>, n: &mut usize, path: &Path, found: Option<&str>) {
    match (found, id) {
        (Some(f), Some(i)) if f != i => r.push(
            n,
            path,
            1,
            1,
            format!("file belongs to another store (store id {f}, this store is {i})"),
        ),
        (None, _) => r.push(n, path, 1, 1, "header carries no store id"),
        _ => {}
    }
}

/// `VERSION`: the store id, and whether job lines carry checksums (format 3 on; an older store
/// gets the upgrade message).
fn check_version(r: &mut Report, dir: &Path, io: &dyn StoreIo) -> (Option<String>, bool) {
    let vpath = dir.join("VERSION");
    let mut id: Option<String> = None;
    // Job lines carry a checksum from format 3 on (an older store gets the upgrade message).
    let mut checked_jobs = false;
    if let Some(v) = read(io, &vpath, r) {
        match filefmt::parse_version(&String::from_utf8_lossy(&v)) {
            Some((3, Some(i))) => {
                checked_jobs = true;
                r.store_id = Some(i.clone());
                id = Some(i);
            }
            Some((2, _)) => r.push(&mut 0, &vpath, 1, 1, "format 2 store from the previous release (history in one file); `cronsole apply` or `cronsole run` upgrades it in place"),
            Some(_) => r.push(&mut 0, &vpath, 1, 1, "format 1 store from a previous release (no store ids or checksums); `cronsole apply` or `cronsole run` upgrades it in place"),
            None => r.push(&mut 0, &vpath, 1, 1, format!("not a cronsole file store version (expected `{}`)", filefmt::VERSION_TEXT)),
        }
    }
    (id, checked_jobs)
}

/// The snapshot and its index; returns the snapshot's generation and what it absorbed.
fn check_snapshot(
    r: &mut Report,
    dir: &Path,
    io: &dyn StoreIo,
    id: &Option<String>,
    checked_jobs: bool,
    jobs: &mut Jobs,
) -> (Option<u64>, Option<Absorbed>) {
    let Jobs { names, at } = jobs;
    // Snapshot.
    let spath = dir.join("jobs.snapshot.jsonl");
    let mut generation = None;
    let mut absorbed: Option<Absorbed> = None;
    if let Some(b) = read(io, &spath, r) {
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
                        check_id(r, id, &mut n, &spath, h.store.as_deref());
                        generation = Some(h.generation);
                        absorbed = h.absorbed;
                    }
                    Ok(_) => r.push(&mut n, &spath, 1, 1, "not a snapshot header"),
                    Err(e) => r.push(&mut n, &spath, 1, e.column() as u64, e.to_string()),
                }
                continue;
            }
            match job_line(line, checked_jobs) {
                Ok((rec, pos)) => {
                    at.insert(
                        rec.def.name.clone(),
                        (rec.rt.leases().map(|l| l.run_id).collect(), pos),
                    );
                    names.insert(rec.def.name);
                }
                Err((c, w)) => r.push(&mut n, &spath, no, c, w),
            }
        }
        // The snapshot's index: derived data. One an open would ignore is a note (a writer
        // rewrites it); one an open would use must agree with every line.
        let ipath = dir.join(INDEX_FILE);
        if let Some(i) = &id {
            match io.read(&ipath) {
                Ok(x) => match check_index(&x, &b, i) {
                    IndexCheck::Ignored(why) => r.notes.push(format!(
                        "{}: not used ({why}); opening reads the whole snapshot until a writer rewrites it",
                        ipath.display()
                    )),
                    IndexCheck::Used(problems) => {
                        let mut m = 0;
                        for (no, what) in problems {
                            r.push(
                                &mut m,
                                &ipath,
                                0,
                                0,
                                format!("{} line {no}: {what}", spath.display()),
                            );
                        }
                    }
                },
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => r.notes.push(format!(
                    "{}: cannot read it ({e}); opening reads the whole snapshot instead",
                    ipath.display()
                )),
            }
        }
    }

    (generation, absorbed)
}

/// The journal: its generation against the snapshot's, and its job lines.
fn check_journal(
    r: &mut Report,
    dir: &Path,
    io: &dyn StoreIo,
    id: &Option<String>,
    checked_jobs: bool,
    (generation, absorbed): (Option<u64>, Option<Absorbed>),
    jobs: &mut Jobs,
) {
    let Jobs { names, at } = jobs;
    // Journal.
    let jpath = dir.join("jobs.journal");
    if let Some(b) = read(io, &jpath, r) {
        let mut n = 0;
        let (ls, torn) = log_lines(r, &mut n, &jpath, &b, "journal");
        let complete = &b[..b.len() - torn.len()];
        // Lines before `replay_from` are in the snapshot (a journal left over from before the
        // last compaction; lines past them were appended while it ran).
        let mut replay_from = 0u64;
        for (no, line) in ls {
            let off = line.as_ptr() as u64 - b.as_ptr() as u64;
            if no == 1 {
                match serde_json::from_slice::<Header>(line) {
                    Ok(h) if h.cronsole == "journal" => {
                        check_id(r, id, &mut n, &jpath, h.store.as_deref());
                        if let Some(g) = generation
                            && h.generation != g
                        {
                            let prefix = absorbed.and_then(|a| {
                                let n = usize::try_from(a.len).ok()?;
                                (n > line.len() && filefmt::crc32(complete.get(..n)?) == a.crc32)
                                    .then_some(a.len)
                            });
                            if let Some(from) = prefix.filter(|_| h.generation + 1 == g) {
                                replay_from = from;
                                r.notes.push(format!("{}: left over from before the last compaction (its first {from} bytes are in the snapshot; the next writer replaces it)", jpath.display()));
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
            match job_line(line, checked_jobs) {
                Ok((rec, pos)) => {
                    if off >= replay_from {
                        at.insert(
                            rec.def.name.clone(),
                            (rec.rt.leases().map(|l| l.run_id).collect(), pos),
                        );
                        names.insert(rec.def.name);
                    }
                }
                Err((c, w)) => r.push(&mut n, &jpath, no, c, w),
            }
        }
    }
}

/// `settings.json`: header, store id, checksum.
fn check_settings(r: &mut Report, dir: &Path, io: &dyn StoreIo, id: &Option<String>) {
    // Settings.
    let setpath = dir.join("settings.json");
    if let Some(b) = read(io, &setpath, r) {
        let mut n = 0;
        if b.iter().all(u8::is_ascii_whitespace) {
            r.push(&mut n, &setpath, 1, 1, "settings file is empty");
        } else {
            match serde_json::from_slice::<SettingsFile<Settings>>(&b) {
                Ok(f) if f.cronsole == "settings" => {
                    check_id(r, id, &mut n, &setpath, Some(&f.store));
                    if let Err(what) = filefmt::verify_settings(&b) {
                        r.push(&mut n, &setpath, 1, 1, what);
                    }
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
}

/// The open history segment: header, rows (each verified), and what the cross-check needs.
fn check_open_segment(
    r: &mut Report,
    dir: &Path,
    io: &dyn StoreIo,
    id: &Option<String>,
) -> OpenSegment {
    // History: the open segment, then every sealed one.
    let hpath = dir.join("history.jsonl");
    let mut open_seg = None;
    let mut open_rows: Vec<(u64, String, uuid::Uuid, bool)> = Vec::new();
    let mut open_len = 0u64;
    if let Some(b) = read(io, &hpath, r) {
        let mut n = 0;
        let (ls, torn) = log_lines(r, &mut n, &hpath, &b, "history");
        open_len = (b.len() - torn.len()) as u64;
        let mut off = 0u64;
        for (no, line) in ls {
            let here = off;
            off += line.len() as u64 + 1;
            if no == 1 {
                match serde_json::from_slice::<HistoryHeader>(line) {
                    Ok(h) if h.cronsole == "history" => {
                        check_id(r, id, &mut n, &hpath, Some(&h.store));
                        match h.segment {
                            Some(s) => open_seg = Some(s),
                            None => r.push(
                                &mut n,
                                &hpath,
                                1,
                                1,
                                "history header carries no segment number",
                            ),
                        }
                    }
                    Ok(_) => r.push(&mut n, &hpath, 1, 1, "not a history header"),
                    Err(e) => r.push(&mut n, &hpath, 1, e.column() as u64, e.to_string()),
                }
                continue;
            }
            let res = filefmt::verify_row(line).and_then(|_| {
                serde_json::from_slice::<HistoryRow>(line)
                    .map_err(|e| (e.column() as u64, e.to_string()))
            });
            match res {
                Ok(row) => {
                    r.history_rows += 1;
                    let ends = !matches!(
                        row.status,
                        crate::model::Status::Missed | crate::model::Status::Skipped
                    ) && !row.stale_lease;
                    open_rows.push((here, row.job, row.run_id, ends));
                }
                Err((c, w)) => r.push(&mut n, &hpath, no, c, w),
            }
        }
    }
    OpenSegment {
        seg: open_seg,
        rows: open_rows,
        len: open_len,
    }
}

/// The journal/history cross-check: records written after where history ends, runs newer than
/// their job's record.
fn check_cross(
    r: &mut Report,
    dir: &Path,
    top: u64,
    open: &OpenSegment,
    at: &std::collections::BTreeMap<String, (Vec<uuid::Uuid>, Option<Pos>)>,
) {
    let hpath = dir.join("history.jsonl");
    let jpath = dir.join("jobs.journal");
    let (open_rows, open_len) = (&open.rows, open.len);
    let rows: Vec<filefmt::OpenRow<'_>> = open_rows
        .iter()
        .map(|(off, job, run_id, ends)| filefmt::OpenRow {
            off: *off,
            job,
            run_id: *run_id,
            ends_a_run: *ends,
        })
        .collect();
    let records = at.iter().filter_map(|(job, (leases, pos))| {
        let (seg, off) = (*pos)?;
        Some(filefmt::RecordAt {
            job,
            leases,
            seg,
            off,
        })
    });
    let mut n = 0;
    for p in filefmt::cross_check(top, open_len, records, &rows) {
        match p {
            filefmt::CrossProblem::HistoryCut { job, seg, off } => r.push(
                &mut n,
                &hpath,
                0,
                0,
                format!("history ends at segment {top} byte {open_len} but the record of job '{job}' was written after segment {seg} byte {off}: history was cut short, not torn by a crash"),
            ),
            filefmt::CrossProblem::RecordsLost { job, run_id, off } => {
                let line = b_line(open_rows, off);
                r.push(
                    &mut n,
                    &jpath,
                    0,
                    0,
                    format!("the record of job '{job}' is older than its run {run_id} ({}:{line}): records were lost from the journal (cut short, not torn by a crash)", hpath.display()),
                )
            }
        }
    }
}

/// A history position `(segment, offset)`.
type Pos = (u64, u64);

/// Line number (1-based) of the open-segment row at byte `off`.
fn b_line(rows: &[(u64, String, uuid::Uuid, bool)], off: u64) -> u64 {
    rows.iter()
        .position(|r| r.0 == off)
        .map_or(0, |i| i as u64 + 2)
}

/// A journal/snapshot line: its job record and its history position (`at`, format 3).
/// One snapshot or journal job line: its checksum (when the format has one), then the record and
/// its history position; an error is (column, message).
#[allow(clippy::type_complexity)]
fn job_line(line: &[u8], checked: bool) -> Result<(JobRecord, Option<Pos>), (u64, String)> {
    if checked {
        filefmt::verify_line(line, "job record")?;
    }
    crate::store::file::head_agrees(line)?;
    let v = serde_json::from_slice::<serde_json::Value>(line)
        .map_err(|e| (e.column() as u64, e.to_string()))?;
    record_and_position(v)
}

fn record_and_position(v: serde_json::Value) -> Result<(JobRecord, Option<Pos>), (u64, String)> {
    let pos = v
        .get("at")
        .and_then(|a| Some((a.get("seg")?.as_u64()?, a.get("off")?.as_u64()?)));
    let job = v.get("job").cloned().unwrap_or_default();
    let rec = serde_json::from_value::<JobRecord>(job).map_err(|e| (1, e.to_string()))?;
    Ok((rec, pos))
}

/// Every sealed segment below `top`: header, rows, seal (length, count, CRC-32), and that the
/// run of segments has no gap (a deleted middle segment is reported; only retention removes
/// segments, oldest first).
fn check_segments(
    r: &mut Report,
    dir: &Path,
    io: &dyn StoreIo,
    id: Option<&str>,
    top: u64,
    _open_len: u64,
) {
    let mut oldest = top;
    let mut k = top;
    while k > 1 {
        k -= 1;
        let path = dir.join("history").join(format!("{k:06}.jsonl"));
        let bytes = match io.read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
            Err(e) => {
                r.push(&mut 0, &path, 0, 0, format!("cannot read: {e}"));
                continue;
            }
        };
        oldest = k;
        let mut n = 0;
        check_segment(r, &mut n, &path, &bytes, k, id);
    }
    // The oldest segments may be gone only by retention, which marks the first it kept;
    // without the mark segments start at 1 (a deleted segment 1 must not read as sound).
    let mpath = dir.join("history").join(filefmt::FIRST_SEGMENT_FILE);
    let first = match io.read(&mpath) {
        Ok(b) => match filefmt::parse_first_segment(&b, id) {
            Ok(n) => Some((n, true)),
            Err(what) => {
                r.push(&mut 0, &mpath, 1, 1, what);
                None
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some((1, false)),
        Err(e) => {
            r.push(&mut 0, &mpath, 0, 0, format!("cannot read: {e}"));
            None
        }
    };
    if let Some((first, false)) = first
        && first < top
        && oldest > first
    {
        // No mark, yet this build writes one when it seals a store's first segment: sealed by
        // an earlier release, whose retention removed segments without a mark. An open
        // accepts it (a writer records the mark); say what cannot be told apart.
        r.notes.push(format!(
            "history segments start at {oldest} and {} is not there (a store an earlier release sealed): \
             retention may have removed the older ones, or they were deleted; the next writer records \
             {oldest} as the first kept segment",
            mpath.display()
        ));
    } else if let Some((first, true)) = first
        && first < top
        && oldest > first
    {
        let why = format!(
            "retention's mark {} keeps segments from {first}",
            mpath.display()
        );
        r.push(
            &mut 0,
            &dir.join("history").join(format!("{:06}.jsonl", oldest - 1)),
            0,
            0,
            format!(
                "history segment {} is missing (the oldest there is {oldest}) and {why}: its rows were lost (deleted by hand?)",
                oldest - 1
            ),
        );
    }
    // Files the downward probe did not reach: a gap below them (or stray files).
    if let Ok(entries) = std::fs::read_dir(dir.join("history")) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let num = name
                .strip_suffix(".jsonl")
                .and_then(|s| s.parse::<u64>().ok());
            match num {
                Some(k) if k >= oldest && k < top => {}
                Some(k) if k >= top => r.push(
                    &mut 0,
                    &e.path(),
                    0,
                    0,
                    format!("sealed segment {k} is not older than the open segment {top}"),
                ),
                Some(k) => r.push(
                    &mut 0,
                    &e.path(),
                    0,
                    0,
                    format!(
                        "segment {} is missing between this segment {k} and the open segment {top} (deleted by hand?)",
                        oldest - 1
                    ),
                ),
                None if name.contains(".tmp.") || name == filefmt::FIRST_SEGMENT_FILE => {}
                None => r.push(&mut 0, &e.path(), 0, 0, "not a history segment"),
            }
        }
    }
}

/// One sealed segment's bytes: header (store id, number), every row (checksum, parse), and the
/// seal (covers every byte before it: length, row count, CRC-32).
fn check_segment(
    r: &mut Report,
    n: &mut usize,
    path: &Path,
    bytes: &[u8],
    seg: u64,
    id: Option<&str>,
) {
    let (ls, torn) = lines(bytes);
    if !torn.is_empty() || ls.is_empty() {
        r.push(
            n,
            path,
            ls.len() as u64 + 1,
            1,
            "sealed segment does not end with its seal line (cut short?)",
        );
        return;
    }
    let last = ls.len() as u64;
    let mut rows = 0u64;
    let mut before = 0usize;
    for (no, line) in &ls {
        let (no, line) = (*no, *line);
        if no == 1 {
            match serde_json::from_slice::<HistoryHeader>(line) {
                Ok(h) if h.cronsole == "history" => {
                    if let Some(i) = id
                        && h.store != i
                    {
                        r.push(
                            n,
                            path,
                            1,
                            1,
                            format!(
                                "file belongs to another store (store id {}, this store is {i})",
                                h.store
                            ),
                        );
                    }
                    if h.segment != Some(seg) {
                        r.push(
                            n,
                            path,
                            1,
                            1,
                            format!("header says segment {:?}, the file name {seg}", h.segment),
                        );
                    }
                }
                Ok(_) => r.push(n, path, 1, 1, "not a history header"),
                Err(e) => r.push(n, path, 1, e.column() as u64, e.to_string()),
            }
        } else if no == last {
            match serde_json::from_slice::<filefmt::Seal>(line) {
                Ok(s) if s.cronsole == "seal" => {
                    if s.segment != seg {
                        r.push(
                            n,
                            path,
                            no,
                            1,
                            format!("seal names segment {}, the file name {seg}", s.segment),
                        );
                    }
                    if s.bytes != before as u64 {
                        r.push(
                            n,
                            path,
                            no,
                            1,
                            format!("seal covers {} bytes but {before} precede it", s.bytes),
                        );
                    } else if s.crc32 != filefmt::crc32(&bytes[..before]) {
                        r.push(
                            n,
                            path,
                            no,
                            1,
                            "segment checksum mismatch: the sealed segment was altered",
                        );
                    }
                    if s.rows != rows.max(ls.len() as u64 - 2) {
                        r.push(
                            n,
                            path,
                            no,
                            1,
                            format!(
                                "seal counts {} rows but the segment holds {}",
                                s.rows,
                                ls.len() as u64 - 2
                            ),
                        );
                    }
                }
                Ok(_) | Err(_) => r.push(
                    n,
                    path,
                    no,
                    1,
                    "the last line is not a segment seal: the segment was cut or altered",
                ),
            }
        } else {
            let res = filefmt::verify_row(line).and_then(|_| {
                serde_json::from_slice::<HistoryRow>(line)
                    .map(|_| ())
                    .map_err(|e| (e.column() as u64, e.to_string()))
            });
            match res {
                Ok(()) => {
                    r.history_rows += 1;
                    rows += 1;
                }
                Err((c, w)) => r.push(n, path, no, c, w),
            }
        }
        before += line.len() + 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use crate::store::file::FileStore;

    #[test]
    fn check_reports_every_problem_with_its_location_and_writes_nothing() {
        let dir = crate::testkit::tmp::TempDir::new("check");
        let s = FileStore::open(&dir).unwrap();
        let file = crate::model::JobsFile {
            settings: Settings::default(),
            jobs: vec![crate::store::policy::define::tests_support::def("a")],
        };
        let t0 = chrono::DateTime::from_timestamp(0, 0).unwrap();
        // Stored so that the first slot is `t0`.
        s.apply(
            &file,
            crate::testkit::jobs::stored_for_first_slot(&file.jobs[0], t0),
        )
        .unwrap();
        let c = s
            .claim_due(&crate::store::ClaimRequest {
                now: t0,
                owner: "o",
                limit: 1,
                in_flight: &[],
                clock_stepped: None,
                max_offset: None,
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
    }
}

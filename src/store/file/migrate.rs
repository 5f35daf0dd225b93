//! Upgrading a store of a previous release in place: format 1 (no ids, no checksums) to 2,
//! format 2 (one `history.jsonl`) to 3 (history in sealed segments).

use std::collections::BTreeMap;
use std::path::Path;

use super::layout::{HISTORY_DIR, segment_path};
use super::layout::{HISTORY_FILE, JOURNAL_FILE, SETTINGS_FILE, SNAPSHOT_FILE, VERSION_FILE};
use super::log::{
    check_id, complete_len, corrupt, encode_checked_line, encode_line, header_line, io_err,
    json_err, read_at, stat, write_atomic,
};
use super::record::{
    Entry, EntryLine, EntryRef, journal_is_stale, settings_bytes, snapshot_header,
};
use super::segment::history_header;
use crate::model::{HistoryRow, Settings};
use crate::store::io::{IoFile, OpenMode, StoreIo};
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
    let mut history = Vec::new();
    encode_line(
        &mut history,
        "history header",
        &filefmt::HistoryHeader {
            cronsole: "history".into(),
            store: id.to_string(),
            segment: None,
        },
    )?;
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
                at: None,
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
        filefmt::version_text_2(id).as_bytes(),
    )?;
    tracing::info!(store = %dir.display(), jobs = jobs.len(), "migrated the store from format 1 to format 2");
    Ok(())
}

/// Upgrade a format-2 store (one `history.jsonl`) to format 3 under the lock: its rows (every
/// one checksum-verified on the way) become sealed segments `history/000001.jsonl …` of about
/// `bound` bytes, then `history.jsonl` is replaced by the empty open segment after them, then
/// `VERSION` says 3. Each step is durable before the next, so a crash leaves either a format-2
/// store (`VERSION` 2, the old `history.jsonl`, and segment files format 2 never reads: the
/// next writer writes them again) or one whose `history.jsonl` is already the new open segment
/// (`VERSION` 2 still: the next writer only checks the segments and writes `VERSION`). A
/// reader meanwhile gets the upgrade message, as for any format-2 store.
pub(super) fn migrate_v2(io: &dyn StoreIo, dir: &Path, id: &str, bound: u64) -> StoreResult<()> {
    let hpath = dir.join(HISTORY_FILE);
    let f = io
        .open(&hpath, OpenMode::Read)
        .map_err(|e| StoreError::io(&hpath, e))?;
    let m = f.metadata().map_err(io_err(&hpath))?;
    // Only complete lines: a torn final line was never acknowledged.
    let len = complete_len(&hpath, &*f, m.len)?;
    if len == 0 {
        return Err(corrupt(
            &hpath,
            1,
            1,
            "history is empty: its header line is missing",
        ));
    }
    let mut reader = Lines::new(&*f, &hpath, len);
    let first = reader.next_line()?.unwrap_or_default();
    let h: filefmt::HistoryHeader =
        serde_json::from_slice(&first).map_err(|e| json_err(&hpath, 1, &e))?;
    if h.cronsole != "history" {
        return Err(corrupt(&hpath, 1, 1, "not a history header"));
    }
    check_id(&hpath, Some(&h.store), id)?;
    let hdir = dir.join(HISTORY_DIR);
    let open_seg = match h.segment {
        // A crash after the open segment was written: the segments before it are in place.
        Some(n) => {
            for k in 1..n {
                if stat(io, &segment_path(dir, k))?.is_none() {
                    return Err(corrupt(
                        &segment_path(dir, k),
                        0,
                        0,
                        "required store file is missing: an interrupted upgrade to format 3 wrote the open history segment but this sealed segment is not there",
                    ));
                }
            }
            n
        }
        None => {
            io.create_dir_all(&hdir).map_err(io_err(&hdir))?;
            io.sync_dir(dir).map_err(io_err(dir))?;
            let mut seg = 1u64;
            let mut rows = 0u64;
            let mut sup = Vec::new();
            let mut body = history_header(id, seg)?;
            let mut line_no = 1u64;
            while let Some(line) = reader.next_line()? {
                line_no += 1;
                filefmt::verify_row(&line)
                    .map_err(|(col, what)| corrupt(&hpath, line_no, col, what))?;
                let row: HistoryRow =
                    serde_json::from_slice(&line).map_err(|e| json_err(&hpath, line_no, &e))?;
                if rows > 0 && body.len() as u64 + line.len() as u64 + 1 > bound {
                    seal_into(io, &hdir, dir, seg, body, rows, std::mem::take(&mut sup))?;
                    seg += 1;
                    rows = 0;
                    body = history_header(id, seg)?;
                }
                body.extend_from_slice(&line);
                body.push(b'\n');
                rows += 1;
                if row.supersedes_abandoned {
                    sup.push(row.run_id);
                }
            }
            if rows > 0 {
                seal_into(io, &hdir, dir, seg, body, rows, sup)?;
                seg += 1;
            }
            // Leftovers of an interrupted earlier attempt past the last segment.
            let mut k = seg;
            while stat(io, &segment_path(dir, k))?.is_some() {
                io.remove_file(&segment_path(dir, k))
                    .map_err(io_err(&segment_path(dir, k)))?;
                k += 1;
            }
            io.sync_dir(&hdir).map_err(io_err(&hdir))?;
            write_atomic(io, dir, &hpath, &history_header(id, seg)?)?;
            seg
        }
    };
    checksum_job_lines(io, dir, id)?;
    write_atomic(
        io,
        dir,
        &dir.join(VERSION_FILE),
        filefmt::version_text(id).as_bytes(),
    )?;
    tracing::info!(store = %dir.display(), segments = open_seg - 1, "migrated the store from format 2 to format 3 (history in sealed segments)");
    Ok(())
}

/// The format-2 → 3 step for the jobs: format 3 requires a checksum on every job line, so the
/// snapshot and the journal of the current generation are folded into a new snapshot (one
/// generation up) whose lines carry it, then the journal is replaced by an empty one of that
/// generation — what a compaction does. The new snapshot names the journal it absorbed, so a
/// crash between the two writes leaves the old journal as the ordinary left-over of a
/// compaction; a crash before `VERSION` says 3 redoes this step (lines read with or without a
/// checksum; one that has a checksum must match it).
fn checksum_job_lines(io: &dyn StoreIo, dir: &Path, id: &str) -> StoreResult<()> {
    let spath = dir.join(SNAPSHOT_FILE);
    let jpath = dir.join(JOURNAL_FILE);
    let read = |path: &Path| io.read(path).map_err(|e| StoreError::io(path, e));
    let verified = |path: &Path, no: u64, line: &[u8]| -> StoreResult<Entry> {
        if filefmt::has_checksum(line) {
            filefmt::verify_line(line, "job record")
                .map_err(|(col, what)| corrupt(path, no, col, what))?;
        }
        serde_json::from_slice(line).map_err(|e| json_err(path, no, &e))
    };
    let mut jobs: BTreeMap<String, Entry> = BTreeMap::new();
    let snap = read(&spath)?;
    if snap.last() != Some(&b'\n') {
        return Err(corrupt(
            &spath,
            1,
            1,
            "snapshot does not end with a newline",
        ));
    }
    let mut generation = 0;
    let mut absorbed = None;
    for (i, line) in snap[..snap.len() - 1].split(|c| *c == b'\n').enumerate() {
        let no = i as u64 + 1;
        if i == 0 {
            (generation, absorbed) = snapshot_header(&spath, line, id)?;
            continue;
        }
        let e = verified(&spath, no, line)?;
        jobs.insert(e.job.def.name.clone(), e);
    }
    let journal = read(&jpath)?;
    // Only complete lines: a torn final line was never acknowledged.
    let end = journal
        .iter()
        .rposition(|c| *c == b'\n')
        .map_or(0, |i| i + 1);
    let complete = &journal[..end];
    if complete.is_empty() {
        return Err(corrupt(
            &jpath,
            1,
            1,
            "journal is empty: its header line is missing",
        ));
    }
    let leftover = filefmt::Absorbed {
        len: complete.len() as u64,
        crc32: filefmt::crc32(complete),
    };
    let mut stale = false;
    for (i, line) in complete[..complete.len() - 1]
        .split(|c| *c == b'\n')
        .enumerate()
    {
        let no = i as u64 + 1;
        if i == 0 {
            stale = match journal_is_stale(&jpath, line, id, generation, absorbed, complete)? {
                None => false,
                Some(n) if n == complete.len() as u64 => true,
                // Earlier formats compacted under the lock: their journals never grew past
                // what a snapshot absorbed.
                Some(_) => {
                    return Err(corrupt(
                        &jpath,
                        1,
                        1,
                        "journal holds lines past what the snapshot absorbed",
                    ));
                }
            };
            if stale {
                // Left over from before the last compaction: its records are in the snapshot,
                // which is rewritten at its own generation (still naming that journal).
                break;
            }
            continue;
        }
        let e = verified(&jpath, no, line)?;
        jobs.insert(e.job.def.name.clone(), e);
    }
    let (generation, absorbed) = if stale {
        (generation, absorbed)
    } else {
        (generation + 1, Some(leftover))
    };
    let mut out = header_line("snapshot", generation, id, absorbed)?;
    for e in jobs.values() {
        encode_checked_line(
            &mut out,
            "job record",
            &EntryLine {
                job: &e.job,
                mark: e.mark,
                rows_to: e.rows_to,
                at: e.at,
            },
        )?;
    }
    write_atomic(io, dir, &spath, &out)?;
    write_atomic(
        io,
        dir,
        &jpath,
        &header_line("journal", generation, id, None)?,
    )?;
    Ok(())
}

fn seal_into(
    io: &dyn StoreIo,
    hdir: &Path,
    dir: &Path,
    seg: u64,
    mut body: Vec<u8>,
    rows: u64,
    sup: Vec<uuid::Uuid>,
) -> StoreResult<()> {
    let seal = filefmt::Seal::over(seg, &body, rows, sup);
    encode_line(&mut body, "segment seal", &seal)?;
    write_atomic(io, hdir, &segment_path(dir, seg), &body)
}

/// Complete lines of the first `len` bytes of a file, front to back, a block at a time.
struct Lines<'a> {
    f: &'a dyn IoFile,
    path: &'a Path,
    len: u64,
    pos: u64,
    buf: Vec<u8>,
    at: usize,
}

impl<'a> Lines<'a> {
    fn new(f: &'a dyn IoFile, path: &'a Path, len: u64) -> Self {
        Lines {
            f,
            path,
            len,
            pos: 0,
            buf: Vec::new(),
            at: 0,
        }
    }

    fn next_line(&mut self) -> StoreResult<Option<Vec<u8>>> {
        loop {
            if let Some(p) = self.buf[self.at..].iter().position(|b| *b == b'\n') {
                let line = self.buf[self.at..self.at + p].to_vec();
                self.at += p + 1;
                return Ok(Some(line));
            }
            if self.pos >= self.len {
                return Ok(None);
            }
            self.buf.drain(..self.at);
            self.at = 0;
            let n = (self.len - self.pos).min(1 << 20);
            let start = self.buf.len();
            self.buf.resize(start + n as usize, 0);
            read_at(self.f, self.path, self.pos, &mut self.buf[start..])?;
            self.pos += n;
        }
    }
}

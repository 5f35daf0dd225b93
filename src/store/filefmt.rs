//! The file store's on-disk integrity format (format 3): the store id carried by every file,
//! file headers, the per-row checksum of history lines and the seal of a history segment.
//!
//! Owns: encoding and verifying these bytes. Must not touch: the file system (callers read and
//! write through `super::io`), store decisions.
//!
//! - `VERSION` is `cronsole-file-store 3` then `store <uuid>`: the store id, drawn at creation.
//!   Format 2 (the previous release) had one `history.jsonl`; format 3 seals history into
//!   segments (see `file/history.rs`). Format 1 had no ids and no checksums.
//! - Every other file that matters starts with a header line naming its kind and the store id:
//!   `{"cronsole":"snapshot","generation":N,"store":ID,...}`, `{"cronsole":"journal",...}`,
//!   `{"cronsole":"history","store":ID,"segment":N}` (every history segment, open or sealed),
//!   and `settings.json` is
//!   `{"cronsole":"settings","store":ID,"settings":{...}}`. A file whose id differs is foreign
//!   (copied in from another store) and refused.
//! - A history line is the history row as JSON with one more member, `"crc32"`, the CRC-32 (IEEE)
//!   of the line as it would read without that member: `{…row…}` → `{…row…,"crc32":"1a2b3c4d"}`.
//!   A flipped byte anywhere in a row is caught by the first reader of that row; readers that
//!   only want the row ignore the member (serde skips unknown fields).
//! - Every job line of the snapshot and the journal carries the same `"crc32"` member (format
//!   3; the format-2 → 3 upgrade rewrites the job lines with it). A line without it, or whose
//!   checksum does not match, is corruption found by every load and by `check`: without it a
//!   flipped digit in `next_slot` reads as a valid older record and runs a slot again.
//! - A sealed history segment ends with one seal line,
//!   `{"cronsole":"seal","segment":N,"rows":R,"bytes":B,"crc32":C,"supersedes":[…]}`: the row
//!   count, the length and CRC-32 of every byte before the seal line, and the run ids of the
//!   segment's rows that supersede an `abandoned` row (so a reader that skips the segment by its
//!   row count still hides those rows).

use serde::{Deserialize, Serialize};

use crate::model::HistoryRow;

/// The current format's `VERSION` first line.
pub const VERSION_TEXT: &str = "cronsole-file-store 3";
/// The previous release's `VERSION` (one history file, no segments): migrated by a writer.
pub const VERSION_TEXT_2: &str = "cronsole-file-store 2";
/// The previous release's `VERSION` (no store ids, no row checksums): migrated by a writer.
pub const VERSION_TEXT_1: &str = "cronsole-file-store 1";

const CRC_KEY: &[u8] = b",\"crc32\":\"";

/// Incremental CRC-32 (IEEE 802.3, the zlib/PNG one). `crc32fast` computes it with the CPU's
/// carry-less multiply where there is one: every open checks every job line, 1.1 GB at
/// 1 000 000 jobs, which the byte-at-a-time table did at ~0.5 GB/s: too slow to open a large store.
#[derive(Debug, Clone, Default)]
pub struct Crc32(crc32fast::Hasher);

impl Crc32 {
    /// Feed more bytes into the checksum.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The CRC-32 of every byte fed so far.
    pub fn finish(self) -> u32 {
        self.0.finalize()
    }
}

/// CRC-32 of `bytes`.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut c = Crc32::default();
    c.update(bytes);
    c.finish()
}

/// Header line of the snapshot and the journal.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Header {
    /// What the file is (`snapshot` or `journal`), checked when it is read.
    pub cronsole: String,
    /// Compactions so far: a journal belongs to the snapshot of its generation.
    pub generation: u64,
    /// The store id (format 2); absent only in a format-1 store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<String>,
    /// Snapshot only: the journal this snapshot absorbed (its length and CRC-32), so a journal
    /// left one generation behind by a crash mid-compaction can be told from an edited one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub absorbed: Option<Absorbed>,
    /// Snapshot only, written by a compaction that folded the absorbed journal into the
    /// previous snapshot and changed nothing else: the two files it read, by inode. A process
    /// that still holds both open (so neither inode number can have been reused) already knows
    /// every record of this snapshot, and keeps reading them where they were instead of
    /// reloading every job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub folded: Option<Folded>,
}

/// The files a folding compaction read (see [`Header::folded`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Folded {
    /// The previous snapshot's inode.
    pub snapshot: u64,
    /// The absorbed journal's inode.
    pub journal: u64,
}

/// A journal's length and CRC-32 as a snapshot absorbed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Absorbed {
    /// The absorbed journal's length in bytes.
    pub len: u64,
    /// Its CRC-32.
    pub crc32: u32,
}

/// Header line of a history segment (`history.jsonl`, `history/NNNNNN.jsonl`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HistoryHeader {
    /// Always `history`.
    pub cronsole: String,
    /// The store id: a segment from another store is refused.
    pub store: String,
    /// The segment's number (format 3); absent in a format-2 `history.jsonl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment: Option<u64>,
}

/// The last line of a sealed history segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seal {
    /// Always `seal`.
    pub cronsole: String,
    /// The segment's number.
    pub segment: u64,
    /// Rows in the segment (lines between the header and the seal).
    pub rows: u64,
    /// Length of everything before the seal line.
    pub bytes: u64,
    /// CRC-32 of everything before the seal line.
    pub crc32: u32,
    /// Run ids of the rows with `supersedes_abandoned` (hidden `abandoned` rows may be older).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub supersedes: Vec<uuid::Uuid>,
}

impl Seal {
    /// Seal `body` (header + rows, each line ending in `\n`) as segment `segment`.
    pub fn over(segment: u64, body: &[u8], rows: u64, supersedes: Vec<uuid::Uuid>) -> Seal {
        Seal {
            cronsole: "seal".to_string(),
            segment,
            rows,
            bytes: body.len() as u64,
            crc32: crc32(body),
            supersedes,
        }
    }
}

/// `settings.json` in format 2. Unknown members are refused, so a damaged member name (a
/// flipped bit in `"crc32"`) cannot make the checksum disappear.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SettingsFile<S> {
    /// Always `settings`.
    pub cronsole: String,
    /// The store id: a settings file from another store is refused.
    pub store: String,
    /// The shared settings of the jobs file last applied.
    pub settings: S,
    /// CRC-32 (8 hex digits) of `settings` in canonical JSON ([`settings_crc`]): without it, one
    /// flipped bit could turn a $2.50 budget into $3.50 and every command would take it; a file without it (an earlier release's) is accepted and gains it on the next
    /// write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crc32: Option<String>,
}

/// The checksum of a settings object: CRC-32 over its canonical JSON (`serde_json::Value`, keys
/// sorted, numbers in their shortest form), so the same settings give the same sum whatever the
/// file's layout.
pub fn settings_crc(settings: &serde_json::Value) -> String {
    let canonical = serde_json::to_vec(settings).unwrap_or_default();
    format!("{:08x}", crc32(&canonical))
}

/// Verify `settings.json`'s checksum, when it carries one. `Err(what)` names the mismatch.
pub fn verify_settings(bytes: &[u8]) -> Result<(), String> {
    let v: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    let Some(want) = v.get("crc32") else {
        return Ok(());
    };
    let want = want.as_str().unwrap_or_default();
    let got = settings_crc(v.get("settings").unwrap_or(&serde_json::Value::Null));
    if want == got {
        Ok(())
    } else {
        Err(format!(
            "settings checksum mismatch (file says {want}, content sums to {got}): the budget \
             and every setting in it cannot be trusted"
        ))
    }
}

/// One history line (with its newline) carrying its checksum.
pub fn encode_row(out: &mut Vec<u8>, row: &HistoryRow) -> Result<(), serde_json::Error> {
    encode_checked(out, row)
}

/// One line (with its newline) of any JSON object carrying its checksum: history rows and the
/// job lines of the snapshot and the journal. `v` must serialize as a JSON object.
pub fn encode_checked<T: Serialize + ?Sized>(
    out: &mut Vec<u8>,
    v: &T,
) -> Result<(), serde_json::Error> {
    let start = out.len();
    serde_json::to_writer(&mut *out, v)?;
    // `to_writer` of a struct always ends with '}'.
    let crc = crc32(&out[start..]);
    out.pop();
    out.extend_from_slice(CRC_KEY);
    out.extend_from_slice(format!("{crc:08x}").as_bytes());
    out.extend_from_slice(b"\"}\n");
    Ok(())
}

/// Check a history line's checksum (`line` without its newline). `Err` says what is wrong and
/// the 1-based column where.
pub fn verify_row(line: &[u8]) -> Result<(), (u64, String)> {
    verify_line(line, "history row")
}

/// Whether a line ends with a checksum member (the format-2 → 3 upgrade reads job lines both
/// with and without one).
pub fn has_checksum(line: &[u8]) -> bool {
    let tail = CRC_KEY.len() + 8 + 2;
    line.len() > tail
        && line.ends_with(b"\"}")
        && &line[line.len() - tail..line.len() - tail + CRC_KEY.len()] == CRC_KEY
}

/// The checksum a line carries in its `"crc32"` member (not verified: see [`verify_line`]);
/// `None` when it has none. The job index records it, so a line read later can be told to be
/// the one the index was made from.
pub fn line_crc(line: &[u8]) -> Option<u32> {
    if !has_checksum(line) {
        return None;
    }
    let hex = &line[line.len() - 10..line.len() - 2];
    std::str::from_utf8(hex)
        .ok()
        .and_then(|h| u32::from_str_radix(h, 16).ok())
}

/// Check the checksum of a line written by [`encode_checked`] (`line` without its newline);
/// `what` names the line's kind in the error. `Err` says what is wrong and the 1-based column.
pub fn verify_line(line: &[u8], what: &str) -> Result<(), (u64, String)> {
    // `,"crc32":"xxxxxxxx"}` is the last 20 bytes.
    let tail = CRC_KEY.len() + 8 + 2;
    if line.len() < tail + 1 || !line.ends_with(b"\"}") {
        return Err((1, format!("{what} has no checksum")));
    }
    let at = line.len() - tail;
    if &line[at..at + CRC_KEY.len()] != CRC_KEY {
        return Err((1, format!("{what} has no checksum")));
    }
    let hex = &line[at + CRC_KEY.len()..line.len() - 2];
    let want = std::str::from_utf8(hex)
        .ok()
        .and_then(|h| u32::from_str_radix(h, 16).ok())
        .ok_or_else(|| ((at + 1) as u64, format!("{what} checksum is not hex")))?;
    let mut c = Crc32::default();
    c.update(&line[..at]);
    c.update(b"}");
    let got = c.finish();
    if got != want {
        return Err((
            1,
            format!(
                "{what} checksum mismatch (stored {want:08x}, computed {got:08x}): the line was altered"
            ),
        ));
    }
    Ok(())
}

/// A job record's history position and lease, as the journal/history cross-check sees it.
#[derive(Debug, Clone)]
pub struct RecordAt<'a> {
    /// The job's name.
    pub job: &'a str,
    /// The run ids of the leases it held when written: every live run (`overlap: allow`
    /// holds several), or at least the first one (an open reads only the line's `head`, and
    /// looks at the others only for a job whose rows the first does not explain).
    pub leases: &'a [uuid::Uuid],
    /// The history segment history had reached when the record was written.
    pub seg: u64,
    /// The byte offset in that segment.
    pub off: u64,
}

/// A row of the open history segment, as the cross-check sees it.
#[derive(Debug, Clone)]
pub struct OpenRow<'a> {
    /// The row's byte offset in the open segment.
    pub off: u64,
    /// The row's job.
    pub job: &'a str,
    /// The row's run.
    pub run_id: uuid::Uuid,
    /// A run's end or `abandoned` (not `missed`/`skipped`, not a stale-lease row).
    pub ends_a_run: bool,
}

/// What the cross-check found.
#[derive(Debug, Clone, PartialEq)]
pub enum CrossProblem {
    /// A record was written after history reached `(seg, off)`, but history is shorter.
    HistoryCut {
        /// The job whose record is ahead of history.
        job: String,
        /// The segment the record says history had reached.
        seg: u64,
        /// The byte offset in that segment.
        off: u64,
    },
    /// History holds the end of run `run_id` (row at `off` of the open segment) after the
    /// record of its job was written, and the record does not hold that run: records were lost.
    RecordsLost {
        /// The job whose run is missing from its record.
        job: String,
        /// The run whose end history holds.
        run_id: uuid::Uuid,
        /// The row's byte offset in the open segment.
        off: u64,
    },
}

/// The journal/history cross-check (see `file/history.rs`): history must reach every record's
/// position, and the rows of the open segment (`open_seg`, `open_len` bytes) after a job's
/// position may only end runs its record still holds (any of its leases) — what a crash, or
/// a failed record write (`ENOSPC`, `EIO` on the journal), between a row and its record leaves.
/// A journal cut by hand rolls the record back to before a run it no longer holds, or to
/// before the claim of a run whose row history has: anything else means a file was cut
/// short, not torn by a crash.
pub fn cross_check<'a>(
    open_seg: u64,
    open_len: u64,
    records: impl IntoIterator<Item = RecordAt<'a>>,
    rows: &[OpenRow<'_>],
) -> Vec<CrossProblem> {
    let mut out = Vec::new();
    // The open segment's rows by job, in file order: each record looks at its own job's rows
    // only (a store of 1 000 000 jobs against thousands of rows is O(jobs + rows), not the
    // product, at every open).
    let mut by_job: std::collections::HashMap<&str, Vec<&OpenRow<'_>>> =
        std::collections::HashMap::new();
    for x in rows.iter().filter(|x| x.ends_a_run) {
        by_job.entry(x.job).or_default().push(x);
    }
    for r in records {
        if r.seg > open_seg || (r.seg == open_seg && r.off > open_len) {
            out.push(CrossProblem::HistoryCut {
                job: r.job.to_string(),
                seg: r.seg,
                off: r.off,
            });
            continue;
        }
        if r.seg != open_seg {
            continue;
        }
        if let Some(row) = by_job.get(r.job).and_then(|v| {
            v.iter()
                .find(|x| x.off >= r.off && !r.leases.contains(&x.run_id))
        }) {
            out.push(CrossProblem::RecordsLost {
                job: r.job.to_string(),
                run_id: row.run_id,
                off: row.off,
            });
        }
    }
    out
}

/// Parse `VERSION`: (format, store id). Format 1 has no id.
pub fn parse_version(text: &str) -> Option<(u32, Option<String>)> {
    let mut lines = text.lines();
    let format = match lines.next()?.trim() {
        VERSION_TEXT_1 => return Some((1, None)),
        VERSION_TEXT_2 => 2,
        VERSION_TEXT => 3,
        _ => return None,
    };
    let id = lines.next()?.trim().strip_prefix("store ")?.trim();
    uuid::Uuid::parse_str(id).ok()?;
    Some((format, Some(id.to_string())))
}

/// The `VERSION` file of a current-format store with id `store_id`.
pub fn version_text(store_id: &str) -> String {
    format!("{VERSION_TEXT}\nstore {store_id}\n")
}

/// The `VERSION` of a format-2 store (the migration's starting point, and its tests).
pub fn version_text_2(store_id: &str) -> String {
    format!("{VERSION_TEXT_2}\nstore {store_id}\n")
}

/// Retention's mark, `history/first.json`: the first sealed segment retention kept. Without
/// it sealed segments start at 1, so a missing oldest segment is damage, not retention.
pub const FIRST_SEGMENT_FILE: &str = "first.json";

#[derive(Serialize, Deserialize)]
struct FirstSegment {
    cronsole: String,
    store: String,
    segment: u64,
}

/// The mark's bytes: retention kept segments `segment..` of store `store_id`.
pub fn first_segment_text(store_id: &str, segment: u64) -> Result<Vec<u8>, serde_json::Error> {
    let mut v = serde_json::to_vec(&FirstSegment {
        cronsole: "history-first".into(),
        store: store_id.into(),
        segment,
    })?;
    v.push(b'\n');
    Ok(v)
}

/// Parse the mark: the first kept segment, or what is wrong with it (`store_id` is the store's
/// id, when known).
pub fn parse_first_segment(bytes: &[u8], store_id: Option<&str>) -> Result<u64, String> {
    let f: FirstSegment = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    if f.cronsole != "history-first" {
        return Err("not a cronsole retention mark".into());
    }
    if let Some(id) = store_id
        && f.store != id
    {
        return Err(format!("retention mark of another store ({})", f.store));
    }
    if f.segment < 1 {
        return Err("segment 0 does not exist".into());
    }
    Ok(f.segment)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Status, Trigger};

    #[test]
    fn crc_matches_the_reference_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    /// The same CRC whether a long input (past the vectorised path's block size) is fed whole
    /// or in uneven pieces, as the journal's `absorbed` CRC is computed over 1 MiB reads.
    #[test]
    fn crc_of_pieces_is_the_crc_of_the_whole() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        let mut c = Crc32::default();
        for piece in data.chunks(333) {
            c.update(piece);
        }
        assert_eq!(c.finish(), crc32(&data));
        assert_eq!(
            crc32(b"The quick brown fox jumps over the lazy dog"),
            0x414F_A339
        );
    }

    #[test]
    fn a_row_round_trips_and_any_flipped_byte_is_caught() {
        let t = chrono::DateTime::from_timestamp(1_000, 0).unwrap();
        let row = HistoryRow::new("j", Status::Succeeded, Trigger::Schedule, Some(t), "o", t);
        let mut buf = Vec::new();
        encode_row(&mut buf, &row).unwrap();
        assert!(buf.ends_with(b"\"}\n"));
        let line = &buf[..buf.len() - 1];
        verify_row(line).unwrap();
        let back: HistoryRow = serde_json::from_slice(line).unwrap();
        assert_eq!(back.job, "j");
        for i in 0..line.len() {
            let mut bad = line.to_vec();
            bad[i] ^= 0x04;
            assert!(verify_row(&bad).is_err(), "flip at byte {i} undetected");
        }
    }

    #[test]
    fn a_checked_job_line_catches_any_flipped_byte_and_a_missing_checksum() {
        let v = serde_json::json!({"job": {"next_slot": "2026-11-30T20:00:30Z", "until": 3}});
        let mut out = Vec::new();
        encode_checked(&mut out, &v).unwrap();
        let line = &out[..out.len() - 1];
        assert!(has_checksum(line));
        verify_line(line, "job record").unwrap();
        for i in 0..line.len() {
            let mut bad = line.to_vec();
            bad[i] ^= 0x01;
            assert!(
                verify_line(&bad, "job record").is_err(),
                "flip at byte {i} undetected"
            );
        }
        let plain = serde_json::to_vec(&v).unwrap();
        assert!(!has_checksum(&plain));
        let e = verify_line(&plain, "job record").unwrap_err();
        assert!(e.1.contains("job record has no checksum"), "{e:?}");
    }

    #[test]
    fn version_lines() {
        let id = uuid::Uuid::new_v4().to_string();
        assert_eq!(
            parse_version(&version_text(&id)),
            Some((3, Some(id.clone())))
        );
        assert_eq!(parse_version(&version_text_2(&id)), Some((2, Some(id))));
        assert_eq!(parse_version("cronsole-file-store 1\n"), Some((1, None)));
        assert_eq!(parse_version("cronsole-file-store 2\n"), None);
        assert_eq!(parse_version("cronsole-file-store 3\n"), None);
        assert_eq!(parse_version("something 9"), None);
    }
}

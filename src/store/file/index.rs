//! `jobs.index`: a persisted cache of the snapshot's line heads, so opening a large store reads
//! a compact binary file instead of every byte of the snapshot (1.2 GB at 1 000 000
//! jobs was the whole of the console's first frame and most of `run`'s first claim).
//!
//! Owns: encoding, writing and decoding the index file, and the rules for trusting it. Must not
//! touch: what a job line means (its head is [`super::record`]'s), the journal, history.
//!
//! # What it holds
//! Per job, in name order, what the in-memory [`super::record::Slim`] entry needs: the name, the
//! line's place in the snapshot (offset, length), the line's own checksum (the `"crc32"` member
//! it carries) and the head fields (wake-up, lease, history position, `chained`, budget
//! counters). It is bound to one snapshot: the store id, the snapshot's generation, its length
//! and the CRC-32 of its header line (which names the journal it absorbed, so two snapshots of
//! one generation differ there). The whole file carries a CRC-32.
//!
//! Layout (little-endian): `cronsole jobs.index 1\n`, store id (u16 length + bytes), generation
//! (u64), header CRC (u32); then one entry per job: name (u16 length + bytes), offset (u64),
//! length (u32), line checksum (u32), flags (u8: wake, lease, at, at.seg, chained, spend, def),
//! then the fields the flags name (wake: i64 seconds + u32 nanoseconds; lease: 16 bytes; at:
//! inode, offset [, segment] as u64; spend: u32 length + the counters as JSON; def: the
//! definition digest, u64); then the tail: entries
//! (u64), snapshot length (u64) and the CRC-32 of every byte before it (u32). Binary because
//! opening parses it for every job: ~60 bytes a job, no text to scan.
//!
//! # Derived data: never a reason to refuse a store
//! The snapshot stays the truth (every line keeps its `head` and checksum). The index is written
//! by the code that writes a snapshot (compaction, the first `apply` of a large file), after the
//! snapshot is renamed into place: temp + fsync + rename + fsync dir, so a crash between the two
//! renames leaves an index bound to the previous snapshot. Opening uses it only when every
//! binding matches, its checksum verifies, and its entries cover the snapshot's lines exactly
//! (contiguous, in strictly increasing name order, the first right after the header, the last
//! ending the file). Missing, stale, foreign or damaged: opening reads the whole snapshot as it
//! did before the index existed (never an exit 2 for the index alone, logged as a warning), and
//! a handle opened as a writer ([`super::FileStore::open`]: the engine, `apply`, the console
//! with its engine) writes a fresh one right after that scan. Handles opened with
//! [`super::FileStore::open_existing`] never write it: every read-only command, and also
//! `pause`/`resume`/`trigger`, which open that way and write one journal line. A snapshot smaller than [`INDEX_MIN_BYTES`] gets no index (scanning it takes a few
//! milliseconds) and a leftover one is removed by the next writer of a snapshot.
//!
//! Opening through the index does not read the snapshot's lines, so their checksums are checked
//! when each is read (every record read verifies the line's own checksum and that it is the line
//! the index recorded, by the checksum the index holds) and by `cronsole check`, which also
//! compares every index entry with its line.

use crate::store::BackendError;
use std::path::Path;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::log::{AtomicFile, read_at};
use super::record::{Idx, Mark};
use crate::model::JobCounters;
use crate::store::io::{OpenMode, StoreIo};
use crate::store::{StoreError, StoreResult, filefmt};

/// Snapshots smaller than this get no index (the default; unit tests lower it with
/// `FileStore::with_index_min_bytes`).
pub const INDEX_MIN_BYTES: u64 = 1 << 20;

const MAGIC: &[u8] = b"cronsole jobs.index 1\n";
/// entries (u64) + snapshot length (u64) + CRC-32 (u32).
const TAIL: usize = 20;

const F_WAKE: u8 = 1;
const F_LEASE: u8 = 2;
const F_AT: u8 = 4;
const F_AT_SEG: u8 = 8;
const F_CHAINED: u8 = 16;
const F_SPEND: u8 = 32;
/// A reader that predates this flag refuses the entry, so the whole index (it then reads the
/// snapshot): an index written with it is never misread.
const F_DEF: u8 = 64;

/// The snapshot an index belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Binding {
    pub(super) generation: u64,
    /// CRC-32 of the snapshot's header line (without its newline).
    pub(super) header_crc: u32,
    /// Length of the header line with its newline: where the first job line starts.
    pub(super) header_len: u64,
    pub(super) snapshot_len: u64,
}

/// One decoded entry (its name borrowed from the index's bytes: decoding allocates nothing
/// for a job without budget counters).
pub(super) struct Entry<'b> {
    pub(super) name: &'b str,
    pub(super) off: u64,
    pub(super) len: u32,
    /// The line's own checksum (its `"crc32"` member).
    pub(super) crc: u32,
    pub(super) idx: Idx,
}

/// Writes an index while its snapshot is written (entries in name order, as the snapshot's
/// lines). Buffered in memory until it passes one spill, so a small snapshot's index costs no
/// file at all when it turns out to be under the threshold.
pub(super) struct IndexWriter<'a> {
    io: &'a dyn StoreIo,
    dir: &'a Path,
    path: &'a Path,
    file: Option<AtomicFile<'a>>,
    buf: Vec<u8>,
    count: u64,
    /// Where the next line must start (entries cover the snapshot contiguously); `None` once an
    /// entry broke that (the index is then not written).
    next_off: Option<u64>,
    last_name: Option<String>,
    min_bytes: u64,
    /// CRC-32 of the bytes already written to `file`.
    crc: filefmt::Crc32,
}

/// Bytes buffered before the index goes to its temp file.
const SPILL: usize = 4 << 20;

impl<'a> IndexWriter<'a> {
    /// An index of a snapshot of store `id`, generation `generation`, whose header line is
    /// `header` (with its newline).
    pub(super) fn new(
        io: &'a dyn StoreIo,
        dir: &'a Path,
        path: &'a Path,
        id: &str,
        generation: u64,
        header: &[u8],
        min_bytes: u64,
    ) -> StoreResult<IndexWriter<'a>> {
        let line = header.strip_suffix(b"\n").unwrap_or(header);
        let id_len = u16::try_from(id.len()).map_err(|_| {
            StoreError::Backend(BackendError::OverFormatLimit("store id over 64 KiB".into()))
        })?;
        let mut buf = Vec::with_capacity(1 << 16);
        buf.extend_from_slice(MAGIC);
        buf.extend_from_slice(&id_len.to_le_bytes());
        buf.extend_from_slice(id.as_bytes());
        buf.extend_from_slice(&generation.to_le_bytes());
        buf.extend_from_slice(&filefmt::crc32(line).to_le_bytes());
        Ok(IndexWriter {
            io,
            dir,
            path,
            file: None,
            buf,
            count: 0,
            next_off: Some(header.len() as u64),
            last_name: None,
            min_bytes,
            crc: filefmt::Crc32::default(),
        })
    }

    /// Add job `name`'s line: `len` bytes (without the newline) at `off` of the snapshot,
    /// carrying checksum `crc` ([`filefmt::line_crc`]), its head `idx`.
    pub(super) fn push(
        &mut self,
        name: &str,
        off: u64,
        len: usize,
        crc: Option<u32>,
        idx: &Idx,
    ) -> StoreResult<()> {
        let (Some(next), Some(crc), Ok(len), Ok(name_len)) = (
            self.next_off,
            crc,
            u32::try_from(len),
            u16::try_from(name.len()),
        ) else {
            self.next_off = None;
            return Ok(());
        };
        if next != off || self.last_name.as_deref().is_some_and(|l| l >= name) {
            self.next_off = None;
            return Ok(());
        }
        self.next_off = Some(off + u64::from(len) + 1);
        self.last_name = Some(name.to_string());
        let b = &mut self.buf;
        b.extend_from_slice(&name_len.to_le_bytes());
        b.extend_from_slice(name.as_bytes());
        b.extend_from_slice(&off.to_le_bytes());
        b.extend_from_slice(&len.to_le_bytes());
        b.extend_from_slice(&crc.to_le_bytes());
        let mut flags = 0u8;
        if idx.wake.is_some() {
            flags |= F_WAKE;
        }
        if idx.lease.is_some() {
            flags |= F_LEASE;
        }
        if let Some(at) = idx.at {
            flags |= F_AT;
            if at.seg.is_some() {
                flags |= F_AT_SEG;
            }
        }
        if idx.chained {
            flags |= F_CHAINED;
        }
        if idx.spend.is_some() {
            flags |= F_SPEND;
        }
        if idx.def.is_some() {
            flags |= F_DEF;
        }
        b.push(flags);
        if let Some(w) = idx.wake {
            b.extend_from_slice(&w.timestamp().to_le_bytes());
            b.extend_from_slice(&w.timestamp_subsec_nanos().to_le_bytes());
        }
        if let Some(l) = idx.lease {
            b.extend_from_slice(l.as_bytes());
        }
        if let Some(at) = idx.at {
            b.extend_from_slice(&at.ino.to_le_bytes());
            b.extend_from_slice(&at.off.to_le_bytes());
            if let Some(s) = at.seg {
                b.extend_from_slice(&s.to_le_bytes());
            }
        }
        if let Some(s) = &idx.spend {
            let json = serde_json::to_vec(&**s).map_err(StoreError::encode("job index"))?;
            let n = u32::try_from(json.len()).map_err(|_| {
                StoreError::Backend(BackendError::OverFormatLimit(
                    "budget counters over 4 GiB".into(),
                ))
            })?;
            b.extend_from_slice(&n.to_le_bytes());
            b.extend_from_slice(&json);
        }
        if let Some(d) = idx.def {
            b.extend_from_slice(&d.get().to_le_bytes());
        }
        self.count += 1;
        if self.buf.len() >= SPILL {
            let f = match &mut self.file {
                Some(f) => f,
                None => self
                    .file
                    .insert(AtomicFile::create(self.io, self.dir, self.path)?),
            };
            self.crc.update(&self.buf);
            f.write(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Give up on this index (a line whose head could not be read): [`IndexWriter::finish`]
    /// then writes none.
    pub(super) fn spoil(&mut self) {
        self.next_off = None;
    }

    /// The snapshot (`snapshot_len` bytes) is in place: write the index beside it, or — when the
    /// snapshot is under the threshold or an entry broke the layout — remove any index left
    /// from an earlier snapshot. Returns whether an index was written.
    pub(super) fn finish(self, snapshot_len: u64) -> StoreResult<bool> {
        let (io, dir, path) = (self.io, self.dir, self.path);
        match self.keep(snapshot_len)? {
            Some(tmp) => {
                if let Err(e) = io.rename(&tmp, path) {
                    let _ = io.remove_file(&tmp);
                    return Err(StoreError::io(path, e));
                }
                io.sync_dir(dir).map_err(|e| StoreError::io(dir, e))?;
                Ok(true)
            }
            None => {
                match io.remove_file(path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(StoreError::io(path, e)),
                }
                Ok(false)
            }
        }
    }

    /// Write the index of a snapshot of `snapshot_len` bytes to a temp file beside `path`
    /// (fsynced, not renamed): its path, or `None` when the snapshot gets no index (under the
    /// threshold, or an entry broke the layout).
    pub(super) fn keep(mut self, snapshot_len: u64) -> StoreResult<Option<std::path::PathBuf>> {
        if self.next_off != Some(snapshot_len) || snapshot_len < self.min_bytes {
            drop(self.file.take());
            return Ok(None);
        }
        self.buf.extend_from_slice(&self.count.to_le_bytes());
        self.buf.extend_from_slice(&snapshot_len.to_le_bytes());
        let mut f = match self.file.take() {
            Some(f) => f,
            None => AtomicFile::create(self.io, self.dir, self.path)?,
        };
        // The CRC covers every byte before it: the part already written plus the buffer.
        self.crc.update(&self.buf);
        let sum = self.crc.finish();
        f.buf.extend_from_slice(&self.buf);
        f.buf.extend_from_slice(&sum.to_le_bytes());
        f.keep().map(|(tmp, _)| Some(tmp))
    }
}

/// Read the index of store `id` at `path` and call `each` on its entries, in name order — only
/// when it belongs to the snapshot `want`. `sized(entries, bytes)` is called first, with the
/// number of entries the index says it holds and its size. `Ok(false)`: there is no index
/// file. `Err(why)`: it is there but stale, foreign or damaged (the caller reads the snapshot
/// instead; `each` may have been called for some entries).
pub(super) fn load(
    io: &dyn StoreIo,
    path: &Path,
    id: &str,
    want: &Binding,
    sized: impl FnOnce(u64, usize),
    each: impl FnMut(Entry<'_>),
) -> Result<bool, String> {
    let f = match io.open(path, OpenMode::Read) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(format!("cannot open it: {e}")),
    };
    let len = f
        .metadata()
        .map_err(|e| format!("cannot stat it: {e}"))?
        .len;
    // An entry is far smaller than its line: an index longer than its snapshot is not one.
    if len > want.snapshot_len.saturating_add(1 << 20) {
        return Err(format!(
            "it is {len} bytes, longer than its snapshot ({} bytes)",
            want.snapshot_len
        ));
    }
    let mut bytes = vec![0u8; len as usize];
    read_at(&*f, path, 0, &mut bytes).map_err(|e| e.to_string())?;
    decode(&bytes, id, want, sized, each).map(|_| true)
}

/// Whether the index at `path` names the snapshot `want` of store `id`, read from its first
/// and last bytes only (its entries and checksum are not read). A point handle (`point.rs`)
/// takes a bound index as the sign that the snapshot's lines are in name order: only a writer
/// that wrote them so writes an index, and it binds it to that snapshot's length, generation
/// and header.
pub(super) fn bound(io: &dyn StoreIo, path: &Path, id: &str, want: &Binding) -> bool {
    let Ok(f) = io.open(path, OpenMode::Read) else {
        return false;
    };
    let Ok(meta) = f.metadata() else {
        return false;
    };
    let head_len = MAGIC.len() + 2 + id.len() + 8 + 4;
    let Ok(len) = usize::try_from(meta.len) else {
        return false;
    };
    if len < head_len + TAIL {
        return false;
    }
    let mut head = vec![0u8; head_len];
    let mut tail = [0u8; TAIL];
    if read_at(&*f, path, 0, &mut head).is_err()
        || read_at(&*f, path, (len - TAIL) as u64, &mut tail).is_err()
    {
        return false;
    }
    let mut r = Reader {
        b: &head,
        at: 0,
        last_wake: None,
    };
    let (Ok(magic), Ok(id_len)) = (r.take(MAGIC.len()), r.u16()) else {
        return false;
    };
    if magic != MAGIC || usize::from(id_len) != id.len() || r.take(id.len()) != Ok(id.as_bytes()) {
        return false;
    }
    let (Ok(generation), Ok(header_crc)) = (r.u64(), r.u32()) else {
        return false;
    };
    let snapshot_len = le::<8>(&tail[8..16]).map(u64::from_le_bytes);
    generation == want.generation
        && header_crc == want.header_crc
        && snapshot_len == Ok(want.snapshot_len)
}

/// What an index's bytes say about its snapshot (for `check`): the binding it names.
pub(super) fn decode<'b>(
    bytes: &'b [u8],
    id: &str,
    want: &Binding,
    sized: impl FnOnce(u64, usize),
    mut each: impl FnMut(Entry<'b>),
) -> Result<u64, String> {
    if bytes.len() < MAGIC.len() + TAIL || !bytes.starts_with(MAGIC) {
        return Err("not a cronsole jobs index (bad magic)".into());
    }
    let body_end = bytes.len() - 4;
    let stored = u32::from_le_bytes(le(&bytes[body_end..])?);
    let computed = filefmt::crc32(&bytes[..body_end]);
    if stored != computed {
        return Err(format!(
            "checksum mismatch (stored {stored:08x}, computed {computed:08x})"
        ));
    }
    let tail = bytes.len() - TAIL;
    let count = u64::from_le_bytes(le(&bytes[tail..tail + 8])?);
    let snapshot_len = u64::from_le_bytes(le(&bytes[tail + 8..tail + 16])?);
    let mut r = Reader {
        b: &bytes[..tail],
        at: MAGIC.len(),
        last_wake: None,
    };
    let id_len = r.u16()? as usize;
    let found_id = r.take(id_len)?;
    if found_id != id.as_bytes() {
        return Err(format!(
            "it belongs to another store ({})",
            String::from_utf8_lossy(found_id)
        ));
    }
    let generation = r.u64()?;
    let header_crc = r.u32()?;
    if generation != want.generation
        || header_crc != want.header_crc
        || snapshot_len != want.snapshot_len
    {
        return Err(format!(
            "it indexes another snapshot (generation {generation}, {snapshot_len} bytes, header \
             {header_crc:08x}; the snapshot is generation {}, {} bytes, header {:08x})",
            want.generation, want.snapshot_len, want.header_crc
        ));
    }
    sized(count, bytes.len());
    let mut next = want.header_len;
    let mut last: Option<&str> = None;
    let mut n = 0u64;
    while r.at < r.b.len() {
        let e = r
            .entry()
            .ok_or_else(|| format!("entry {} is cut short", n + 1))?;
        if e.off != next {
            return Err(format!(
                "entry {} (job '{}') is at byte {} of the snapshot, where its line {next} was expected",
                n + 1,
                e.name,
                e.off
            ));
        }
        if last.is_some_and(|l| l >= e.name) {
            return Err(format!(
                "entry {} (job '{}') is out of name order",
                n + 1,
                e.name
            ));
        }
        next = e.off + u64::from(e.len) + 1;
        last = Some(e.name);
        n += 1;
        each(e);
    }
    if n != count || next != want.snapshot_len {
        return Err(format!(
            "it holds {n} entries covering {next} bytes; it says {count}, the snapshot is {} bytes",
            want.snapshot_len
        ));
    }
    Ok(n)
}

fn le<const N: usize>(b: &[u8]) -> Result<[u8; N], String> {
    b.try_into().map_err(|_| "cut short".to_string())
}

struct Reader<'b> {
    b: &'b [u8],
    at: usize,
    /// The last wake-up decoded, by its encoding: jobs on one schedule share it (a calendar
    /// conversion per entry was 8 % of an open at 1 000 000 jobs).
    last_wake: Option<(u64, u32, DateTime<Utc>)>,
}

impl<'b> Reader<'b> {
    fn take(&mut self, n: usize) -> Result<&'b [u8], String> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.b.len());
        let Some(end) = end else {
            return Err("cut short".into());
        };
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(le(self.take(2)?)?))
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(le(self.take(4)?)?))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(le(self.take(8)?)?))
    }

    fn entry(&mut self) -> Option<Entry<'b>> {
        let name_len = self.u16().ok()? as usize;
        let name = std::str::from_utf8(self.take(name_len).ok()?).ok()?;
        let off = self.u64().ok()?;
        let len = self.u32().ok()?;
        let crc = self.u32().ok()?;
        let flags = self.take(1).ok()?[0];
        if flags & !(F_WAKE | F_LEASE | F_AT | F_AT_SEG | F_CHAINED | F_SPEND | F_DEF) != 0 {
            return None;
        }
        let wake = if flags & F_WAKE != 0 {
            let secs = self.u64().ok()?;
            let nanos = self.u32().ok()?;
            match self.last_wake {
                Some((s, n, w)) if (s, n) == (secs, nanos) => Some(w),
                _ => {
                    let w = DateTime::<Utc>::from_timestamp(secs as i64, nanos)?;
                    self.last_wake = Some((secs, nanos, w));
                    Some(w)
                }
            }
        } else {
            None
        };
        let lease = if flags & F_LEASE != 0 {
            Some(Uuid::from_bytes(le(self.take(16).ok()?).ok()?))
        } else {
            None
        };
        let at = if flags & F_AT != 0 {
            let ino = self.u64().ok()?;
            let off = self.u64().ok()?;
            let seg = if flags & F_AT_SEG != 0 {
                Some(self.u64().ok()?)
            } else {
                None
            };
            Some(Mark { ino, off, seg })
        } else {
            None
        };
        let spend = if flags & F_SPEND != 0 {
            let n = self.u32().ok()? as usize;
            let c: JobCounters = serde_json::from_slice(self.take(n).ok()?).ok()?;
            Some(Box::new(c))
        } else {
            None
        };
        let def = if flags & F_DEF != 0 {
            Some(super::record::DefDigest::new(self.u64().ok()?)?)
        } else {
            None
        };
        Some(Entry {
            name,
            off,
            len,
            crc,
            idx: Idx {
                wake,
                lease,
                at,
                chained: flags & F_CHAINED != 0,
                spend,
                // Not kept per line: the journal header written with the snapshot holds the
                // store's accounted mark (`Inner::acct`).
                acct: None,
                def,
            },
        })
    }
}

/// The binding of the snapshot whose header line is `header` (without its newline) in a
/// snapshot of `snapshot_len` bytes.
pub(super) fn binding(generation: u64, header: &[u8], snapshot_len: u64) -> Binding {
    Binding {
        generation,
        header_crc: filefmt::crc32(header),
        header_len: header.len() as u64 + 1,
        snapshot_len,
    }
}

/// What `cronsole check` finds about an index.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum IndexCheck {
    /// Opening would not use it (stale, foreign or damaged): not damage, it is derived data a
    /// writer rewrites. Says why.
    Ignored(String),
    /// Opening would use it: where it disagrees with the snapshot's lines — `(snapshot line,
    /// what)` — which would make an open see jobs the snapshot does not hold.
    Used(Vec<(u64, String)>),
}

/// Check the index bytes `index` against the snapshot bytes `snapshot` of store `id`: the
/// binding and checksum as an open checks them, then every entry against its line (the line's
/// checksum, name and head). Lines that are themselves damaged are left to the snapshot's own
/// check.
pub(crate) fn check_index(index: &[u8], snapshot: &[u8], id: &str) -> IndexCheck {
    let Some(end) = memchr::memchr(b'\n', snapshot).filter(|e| *e > 0) else {
        return IndexCheck::Ignored("the snapshot has no header line".into());
    };
    let header = &snapshot[..end];
    let generation = match serde_json::from_slice::<filefmt::Header>(header) {
        Ok(h) => h.generation,
        Err(e) => return IndexCheck::Ignored(format!("the snapshot header does not parse: {e}")),
    };
    let bind = binding(generation, header, snapshot.len() as u64);
    let mut entries = Vec::new();
    if let Err(why) = decode(index, id, &bind, |_, _| {}, |e| entries.push(e)) {
        return IndexCheck::Ignored(why);
    }
    let mut problems = Vec::new();
    for (k, e) in entries.into_iter().enumerate() {
        // Entries cover the lines contiguously from line 2 (`decode` checked it).
        let no = k as u64 + 2;
        let line = &snapshot[e.off as usize..(e.off + u64::from(e.len)) as usize];
        if filefmt::verify_line(line, "job record").is_err() {
            continue;
        }
        if filefmt::line_crc(line) != Some(e.crc) {
            problems.push((
                no,
                format!(
                    "entry for job '{}' records line checksum {:08x}, the line carries {:08x}",
                    e.name,
                    e.crc,
                    filefmt::line_crc(line).unwrap_or_default()
                ),
            ));
            continue;
        }
        let Ok((name, mut idx)) = super::record::index_of(line) else {
            continue;
        };
        // The store's accounted mark a line may carry is not kept per entry (the journal
        // header holds it): not part of the comparison.
        idx.acct = None;
        if name != e.name || idx != e.idx {
            problems.push((
                no,
                format!(
                    "entry for job '{}' does not match its line (job '{name}'): index says \
                     wake {:?}, lease {:?}, chained {}; the line says wake {:?}, lease {:?}, \
                     chained {}",
                    e.name,
                    e.idx.wake,
                    e.idx.lease,
                    e.idx.chained,
                    idx.wake,
                    idx.lease,
                    idx.chained
                ),
            ));
        }
    }
    IndexCheck::Used(problems)
}

#[cfg(test)]
mod tests {
    use super::super::FileStore;
    use super::super::layout::INDEX_FILE;
    use super::super::layout::SNAPSHOT_FILE;
    use super::{IndexCheck, check_index};
    use crate::model::{After, Budget, BudgetPeriod, ChainOn, JobsFile, Settings};
    use crate::store::OpenError;
    use crate::store::policy::budget::ReserveRequest;
    use crate::store::policy::define::tests_support::def;
    use crate::store::{ClaimRequest, HistoryReader, Store, StoreError, filefmt};
    use crate::testkit::time::epoch as t;

    /// A store whose snapshot holds jobs in every state an index entry describes (chained,
    /// leased, with budget counters, paused, idle), compacted with an index.
    fn indexed(tag: &str, extra: usize) -> (crate::testkit::tmp::TempDir, FileStore) {
        let dir = crate::testkit::tmp::TempDir::new(&format!("ix-{tag}"));
        let s = FileStore::open(&dir).unwrap().with_index_min_bytes(0);
        let mut child = def("child");
        child.after = vec![After {
            job: "parent".into(),
            on: ChainOn::Completion,
        }];
        let mut jobs = vec![
            def("parent"),
            child,
            def("idle"),
            def("paused"),
            def("spender"),
        ];
        jobs.extend((0..extra).map(|i| def(&format!("x{i:05}"))));
        let file = JobsFile {
            settings: Settings {
                budget: Some(Budget {
                    max_cost_usd: 3.0,
                    period: BudgetPeriod::Day,
                }),
                ..Settings::default()
            },
            jobs,
        };
        s.apply(&file, t(1000)).unwrap();
        s.set_paused("paused", true, t(1000)).unwrap();
        s.reserve(&ReserveRequest {
            job: "spender",
            run_id: uuid::Uuid::new_v4(),
            owner: "o",
            usd: 1.0,
            now: t(1000),
        })
        .unwrap();
        let got = s
            .claim_due(&ClaimRequest {
                now: t(1060),
                owner: "o",
                limit: 1,
                in_flight: &[],
                clock_stepped: None,
                max_offset: None,
            })
            .unwrap();
        assert_eq!(got.claims.len(), 1, "one job left leased");
        s.compact_jobs_for_test();
        assert!(
            dir.join(INDEX_FILE).is_file(),
            "the compaction wrote an index"
        );
        (dir, s)
    }

    type State = (
        std::collections::BTreeMap<String, super::super::record::Slim>,
        std::collections::BTreeSet<(chrono::DateTime<chrono::Utc>, String)>,
        std::collections::BTreeSet<String>,
    );

    fn state(s: &FileStore) -> State {
        let mut l = s.lock().unwrap();
        let wake = l.inner.jobs.wake_order(None).into_iter().collect();
        (
            l.inner
                .jobs
                .iter()
                .map(|(n, s)| (n.to_string(), s.clone()))
                .collect(),
            wake,
            l.inner.chained.clone(),
        )
    }

    /// The snapshot's line of job `name`: its byte range.
    fn line_of(dir: &std::path::Path, name: &str) -> std::ops::Range<usize> {
        let b = std::fs::read(dir.join(SNAPSHOT_FILE)).unwrap();
        let key = format!("{{\"head\":{{\"name\":\"{name}\"");
        let start = b
            .windows(key.len())
            .position(|w| w == key.as_bytes())
            .unwrap();
        let end = start + b[start..].iter().position(|c| *c == b'\n').unwrap();
        start..end
    }

    fn corrupt_at(e: StoreError) -> (String, u64) {
        match e {
            StoreError::Open(OpenError::Corrupt {
                file, line, what, ..
            }) => (format!("{}: {what}", file.display()), line),
            other => panic!("not corruption: {other:?}"),
        }
    }

    #[test]
    fn opening_through_the_index_gives_the_index_a_scan_gives() {
        let (dir, s) = indexed("same", 0);
        let scanned = state(&s);
        let fresh = FileStore::open_existing(&dir).unwrap();
        assert_eq!(state(&fresh), scanned);
        let (jobs, _, chained) = &scanned;
        assert!(chained.contains("child"));
        assert!(jobs.values().any(|j| j.lease.is_some()), "a lease");
        assert!(jobs["spender"].spend.is_some(), "budget counters");
        assert!(jobs.values().all(|j| j.at.is_some()));
        // Without the index, the same by a scan.
        std::fs::remove_file(dir.join(INDEX_FILE)).unwrap();
        assert_eq!(state(&FileStore::open_existing(&dir).unwrap()), scanned);
        assert_eq!(fresh.jobs().unwrap(), s.jobs().unwrap());
    }

    /// With an index, opening reads no job line: a flipped byte in one is found by whatever
    /// reads that line (naming it), not by an open that never reads it; without the index the
    /// open's scan finds it.
    #[test]
    fn a_damaged_snapshot_line_is_refused_when_read() {
        let (dir, _s) = indexed("flip", 0);
        let p = dir.join(SNAPSHOT_FILE);
        let r = line_of(&dir, "idle");
        let mut b = std::fs::read(&p).unwrap();
        b[r.start + 60] ^= 0x01;
        std::fs::write(&p, &b).unwrap();
        let lno = b[..r.start].iter().filter(|c| **c == b'\n').count() as u64 + 1;
        let fresh = FileStore::open_existing(&dir).unwrap();
        assert!(fresh.job("parent").unwrap().is_some(), "another job reads");
        let (what, line) = corrupt_at(fresh.job("idle").unwrap_err());
        assert_eq!(line, lno, "{what}");
        assert!(what.contains("checksum mismatch"), "{what}");
        let (_, line) = corrupt_at(fresh.jobs().unwrap_err());
        assert_eq!(line, lno);
        let report = crate::store::check::check_file_store_with(&dir, &crate::store::io::RealIo);
        assert!(!report.ok());
        std::fs::remove_file(dir.join(INDEX_FILE)).unwrap();
        let (_, line) = corrupt_at(FileStore::open_existing(&dir).err().unwrap());
        assert_eq!(line, lno, "the scan finds it at open");
    }

    /// A line swapped in place for another valid line of the same length (its checksum
    /// recomputed) is not the line the index describes: refused when read, and by `check`.
    #[test]
    fn a_valid_line_swapped_in_place_is_not_the_indexed_one() {
        let (dir, _s) = indexed("swap", 0);
        let p = dir.join(SNAPSHOT_FILE);
        let r = line_of(&dir, "idle");
        let mut b = std::fs::read(&p).unwrap();
        let mut line = b[r.clone()].to_vec();
        let key = b"\"command\":\"";
        let at = line.windows(key.len()).position(|w| w == key).unwrap() + key.len();
        line[at] = if line[at] == b'x' { b'y' } else { b'x' };
        // Recompute the line's own checksum: `,"crc32":"xxxxxxxx"}` is the last 20 bytes.
        let cut = line.len() - 20;
        let mut c = filefmt::Crc32::default();
        c.update(&line[..cut]);
        c.update(b"}");
        let hex = format!("{:08x}", c.finish());
        line[cut + 10..cut + 18].copy_from_slice(hex.as_bytes());
        filefmt::verify_line(&line, "job").unwrap();
        b[r].copy_from_slice(&line);
        std::fs::write(&p, &b).unwrap();
        let fresh = FileStore::open_existing(&dir).unwrap();
        let (what, _) = corrupt_at(fresh.job("idle").unwrap_err());
        assert!(what.contains(INDEX_FILE), "{what}");
        let id = fresh.store_id().to_string();
        let ix = std::fs::read(dir.join(INDEX_FILE)).unwrap();
        match check_index(&ix, &b, &id) {
            IndexCheck::Used(p) => assert_eq!(p.len(), 1, "{p:?}"),
            other => panic!("{other:?}"),
        }
    }

    /// Stale (another snapshot's), damaged or foreign: ignored — the store opens by a scan, a
    /// read-only handle writes nothing, `check` notes it; a writer replaces it.
    #[test]
    fn a_stale_or_damaged_index_is_ignored_and_a_writer_replaces_it() {
        // Over the default threshold, so a writer's open rewrites it.
        let (dir, s) = indexed("stale", 1100);
        let ipath = dir.join(INDEX_FILE);
        let old = std::fs::read(&ipath).unwrap();
        s.set_paused("idle", true, t(1100)).unwrap();
        s.compact_jobs_for_test();
        let current = std::fs::read(&ipath).unwrap();
        assert_ne!(old, current);
        let want = state(&s);
        let mut flipped = current.clone();
        flipped[current.len() / 2] ^= 0x10;
        let foreign = {
            let mut f = current.clone();
            let id = s.store_id().as_bytes().to_vec();
            let at = f.windows(id.len()).position(|w| w == id).unwrap();
            f[at] = if f[at] == b'0' { b'1' } else { b'0' };
            f
        };
        drop(s);
        for (what, bytes) in [
            ("stale", &old),
            ("damaged", &flipped),
            ("foreign", &foreign),
        ] {
            std::fs::write(&ipath, bytes).unwrap();
            let fresh = FileStore::open_existing(&dir).unwrap();
            assert_eq!(state(&fresh), want, "{what}");
            assert_eq!(
                &std::fs::read(&ipath).unwrap(),
                bytes,
                "{what}: a reader wrote"
            );
            let report =
                crate::store::check::check_file_store_with(&dir, &crate::store::io::RealIo);
            assert!(report.ok(), "{what}: {:?}", report.problems);
            assert!(
                report.notes.iter().any(|n| n.contains(INDEX_FILE)),
                "{what}: {:?}",
                report.notes
            );
            drop(fresh);
            let writer = FileStore::open(&dir).unwrap();
            assert_eq!(state(&writer), want, "{what}");
            assert_eq!(
                std::fs::read(&ipath).unwrap(),
                current,
                "{what}: the writer rewrote the index of the snapshot"
            );
        }
        let report = crate::store::check::check_file_store_with(&dir, &crate::store::io::RealIo);
        assert!(report.ok() && report.notes.is_empty(), "{report:?}");
    }

    /// A snapshot under the threshold gets no index, and loses one an earlier, larger
    /// snapshot had.
    #[test]
    fn a_small_snapshot_gets_no_index() {
        let (dir, s) = indexed("small", 0);
        let s = s.with_index_min_bytes(u64::MAX);
        s.compact_jobs_for_test();
        assert!(!dir.join(INDEX_FILE).exists());
        assert_eq!(
            FileStore::open_existing(&dir).unwrap().jobs().unwrap(),
            s.jobs().unwrap()
        );
    }

    /// `check` compares every entry with its line: an index that binds to the snapshot but
    /// says another wake-up is reported with the snapshot line.
    #[test]
    fn check_reports_an_entry_that_disagrees_with_its_line() {
        let (dir, s) = indexed("disagree", 0);
        let snapshot = std::fs::read(dir.join(SNAPSHOT_FILE)).unwrap();
        let header_end = snapshot.iter().position(|c| *c == b'\n').unwrap() + 1;
        let generation: filefmt::Header =
            serde_json::from_slice(&snapshot[..header_end - 1]).unwrap();
        let ipath = dir.join("other.index");
        let io = crate::store::io::RealIo;
        let mut ix = super::IndexWriter::new(
            &io,
            &dir,
            &ipath,
            s.store_id(),
            generation.generation,
            &snapshot[..header_end],
            0,
        )
        .unwrap();
        let mut off = header_end;
        for line in snapshot[header_end..]
            .split(|c| *c == b'\n')
            .filter(|l| !l.is_empty())
        {
            let (name, mut idx) = super::super::record::index_of(line).unwrap();
            if name == "idle" {
                idx.wake = Some(t(9_999_999));
            }
            ix.push(&name, off as u64, line.len(), filefmt::line_crc(line), &idx)
                .unwrap();
            off += line.len() + 1;
        }
        assert!(ix.finish(snapshot.len() as u64).unwrap());
        let bytes = std::fs::read(&ipath).unwrap();
        match check_index(&bytes, &snapshot, s.store_id()) {
            IndexCheck::Used(p) => {
                assert_eq!(p.len(), 1, "{p:?}");
                assert!(p[0].1.contains("'idle'"), "{p:?}");
            }
            other => panic!("{other:?}"),
        }
        std::fs::rename(&ipath, dir.join(INDEX_FILE)).unwrap();
        let report = crate::store::check::check_file_store_with(&dir, &io);
        assert!(!report.ok(), "{report:?}");
        assert!(
            report.problems[0].to_string().contains("jobs.index"),
            "{report:?}"
        );
    }
}

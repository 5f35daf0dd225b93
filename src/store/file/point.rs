//! Point handles: a handle for a command that names its jobs (`pause NAME`, `trigger`,
//! `describe`, `backfill`, `cancel`, `retry`) reads those jobs' lines and no others, so its cost
//! does not grow with the number of jobs in the store.
//!
//! Owns: loading a point handle (the files' headers only), finding one job's newest line without
//! the index of every job, and checking that job's record against history as an open checks
//! every record. Must not touch: what an operation does with a record (the same `load` and
//! `persist` paths as every handle), the index of every job (`jobs.rs`), `jobs.index` itself.
//!
//! How a job is found: the journal is read line by line (every line's checksum verified, as a
//! full load does; the last line of the job wins), and when it holds none the snapshot is
//! searched by bisection — its lines are in name order whenever a `jobs.index` is bound to it
//! (only a writer that wrote them in that order writes one, bound to that snapshot's length,
//! generation and header). Without a bound index, with a journal left one generation behind by a
//! crash, or when a probed line has no head to read its name from, the handle loads every job as
//! any other handle does (a small store has no index: reading it whole costs milliseconds).
//!
//! What differs from a handle of every job, and why it is safe: its accounted mark is the one
//! the journal's header and the lines it read carry, possibly older than the newest in the
//! journal — it writes that older mark, which stays true (readers take the furthest one read,
//! `later_mark`). It never starts a compaction (the next handle of every job does). The
//! cross-check of a job's record uses the open segment's rows read at open, as long as that
//! segment is still the open one; rows appended since cannot be older than a record read since.

use crate::store::BackendError;
use std::path::{Path, PathBuf};

use super::handle::{Locked, set_index};
use super::index;
use super::layout::{BLOCK, INDEX_FILE, JOURNAL_FILE, SNAPSHOT_FILE};
use super::lines::{for_each_line, line_len};
use super::log::{corrupt, count_lines_before, read_at};
use super::record::{HEAD_KEY, Loc, index_of, line_index, snapshot_header};
use crate::store::filefmt;
use crate::store::io::IoFile;
use crate::store::{StoreError, StoreResult};

/// Below this many bytes the bisection stops and the rest is read in one piece.
const SCAN: u64 = 64 * 1024;

/// What a lookup found.
enum Found {
    /// The job's newest line: the file it is in, where, and its bytes.
    Line(PathBuf, Loc, Vec<u8>),
    /// The store holds no job of that name.
    None,
    /// The snapshot cannot be searched by name (a probed line has no readable head).
    Unsure,
}

impl Locked<'_> {
    /// Load a point handle: the snapshot's and journal's headers, no job. `Ok(false)`: the files
    /// do not allow it (see the module doc); the caller loads every job.
    pub(super) fn point_load(&mut self, cut_owed: Option<u64>) -> StoreResult<bool> {
        let spath = self.path(SNAPSHOT_FILE);
        let (sf, slen) = super::jobs::open_snapshot(self.io(), &spath)?;
        let mut first = vec![0u8; slen.min(BLOCK) as usize];
        read_at(&*sf, &spath, 0, &mut first)?;
        let Some(end) = memchr::memchr(b'\n', &first).filter(|e| *e > 0) else {
            return Ok(false);
        };
        let (generation, absorbed) = snapshot_header(&spath, &first[..end], self.id())?;
        let bind = index::binding(generation, &first[..end], slen);
        if !index::bound(self.io(), &self.path(INDEX_FILE), self.id(), &bind) {
            return Ok(false);
        }
        {
            let inner = &mut *self.inner;
            inner.snapshot = Some(sf);
            inner.generation = generation;
            inner.snapshot_len = slen;
            if let Some(p) = inner.point.as_mut() {
                p.first_line = end as u64 + 1;
            }
        }
        self.load_journal(generation, absorbed, cut_owed, false)?;
        Ok(!self.inner.journal_stale)
    }

    /// Put each of `names` in a point handle's index (those the store holds), each checked
    /// against history. A name the snapshot cannot be searched for turns the handle into one of
    /// every job (nothing was read for the operation yet). Nothing to do for other handles.
    pub(super) fn find_named(&mut self, names: &[&str]) -> StoreResult<()> {
        for name in names {
            if self.inner.point.is_none() {
                return Ok(());
            }
            if self.inner.hot.contains_key(*name) || self.inner.jobs.contains_key(name) {
                continue;
            }
            let found = match self.journal_line(name)? {
                Some(line) => Found::Line(self.path(JOURNAL_FILE), line.0, line.1),
                None => self.snapshot_line(name)?,
            };
            match found {
                Found::None => {}
                Found::Line(path, loc, line) => {
                    let (found, idx) = match line_index(&line) {
                        Ok(v) => v,
                        Err((col, what)) => {
                            let no = self.line_no(&path, loc)?;
                            return Err(corrupt(&path, no, col, what));
                        }
                    };
                    if found != *name {
                        let no = self.line_no(&path, loc)?;
                        return Err(corrupt(
                            &path,
                            no,
                            1,
                            format!("the line found for job '{name}' holds job '{found}'"),
                        ));
                    }
                    set_index(&mut self.inner, name, Some(loc), idx);
                    self.point_cross_check()?;
                }
                Found::Unsure => {
                    tracing::info!(
                        "the snapshot's lines cannot be searched by name: reading every job"
                    );
                    self.inner.point = None;
                    self.inner.loaded = false;
                    self.refresh()?;
                    let rows = self.verify_open_segment()?;
                    return self.cross_check(&rows);
                }
            }
        }
        Ok(())
    }

    /// The journal/history cross-check of the jobs in a point handle's index, against the
    /// rows its open read (while their segment is still the open one).
    fn point_cross_check(&self) -> StoreResult<()> {
        match &self.inner.point {
            Some(p) if p.seg == self.inner.history_seg => self.cross_check(&p.rows),
            _ => Ok(()),
        }
    }

    /// The 1-based number of the line at `loc` (for an error).
    fn line_no(&self, path: &Path, loc: Loc) -> StoreResult<u64> {
        let (_, f, at) = self.line_file(loc)?;
        Ok(count_lines_before(f, path, at.off)? + 1)
    }

    /// The last line of job `name` in the journal, every line's checksum verified on the way.
    fn journal_line(&self, name: &str) -> StoreResult<Option<(Loc, Vec<u8>)>> {
        let jpath = self.path(JOURNAL_FILE);
        let f = self.inner.journal.file(&jpath)?;
        let mut found = None;
        for_each_line(f, &jpath, self.inner.journal.len, |no, off, line| {
            if no == 1 {
                return Ok(());
            }
            filefmt::verify_line(line, "job record")
                .map_err(|(col, what)| corrupt(&jpath, no, col, what))?;
            let named =
                names_job(line, name).map_err(|(col, what)| corrupt(&jpath, no, col, what))?;
            if named {
                let loc = Loc {
                    journal: true,
                    off: self.inner.journal_off(off),
                    len: line_len(&jpath, no, line)?,
                    crc: None,
                };
                found = Some((loc, line.to_vec()));
            }
            Ok(())
        })?;
        Ok(found)
    }

    /// Job `name`'s line in the snapshot, by bisection over its bytes.
    fn snapshot_line(&self, name: &str) -> StoreResult<Found> {
        let spath = self.path(SNAPSHOT_FILE);
        let f = self.inner.snapshot.as_deref().ok_or_else(|| {
            StoreError::Backend(BackendError::NotOpen {
                path: spath.clone(),
            })
        })?;
        let Some(first) = self.inner.point.as_ref().map(|p| p.first_line) else {
            return Ok(Found::Unsure);
        };
        let slen = self.inner.snapshot_len;
        // The job's line, if any, starts in [lo, hi); `lo` is always a line's start.
        let (mut lo, mut hi) = (first, slen);
        while hi - lo > SCAN {
            let mid = lo + (hi - lo) / 2;
            let Some(p) = next_line_start(f, &spath, mid, hi)? else {
                hi = mid;
                continue;
            };
            let line = read_line(f, &spath, p, slen)?;
            let Some(probe) = head_name(&line) else {
                return Ok(Found::Unsure);
            };
            match probe.as_str().cmp(name) {
                std::cmp::Ordering::Equal => return Ok(snapshot_found(&spath, p, line)),
                std::cmp::Ordering::Less => lo = p + line.len() as u64 + 1,
                std::cmp::Ordering::Greater => hi = p,
            }
        }
        // The last stretch in one read; a line starting before `hi` may end after it.
        let mut buf = vec![0u8; (slen.min(hi + BLOCK) - lo) as usize];
        read_at(f, &spath, lo, &mut buf)?;
        let mut at = 0usize;
        while lo + (at as u64) < hi {
            let p = lo + at as u64;
            let Some(rest) = buf.get(at..) else { break };
            let line = match memchr::memchr(b'\n', rest) {
                Some(i) => rest[..i].to_vec(),
                None => read_line(f, &spath, p, slen)?,
            };
            let Some(probe) = head_name(&line) else {
                return Ok(Found::Unsure);
            };
            match probe.as_str().cmp(name) {
                std::cmp::Ordering::Equal => return Ok(snapshot_found(&spath, p, line)),
                std::cmp::Ordering::Greater => break,
                std::cmp::Ordering::Less => at += line.len() + 1,
            }
        }
        Ok(Found::None)
    }
}

/// The snapshot line of a job found at `off`.
fn snapshot_found(spath: &Path, off: u64, line: Vec<u8>) -> Found {
    let Ok(len) = u32::try_from(line.len()) else {
        return Found::Unsure;
    };
    let loc = Loc {
        journal: false,
        off,
        len,
        crc: filefmt::line_crc(&line),
    };
    Found::Line(spath.to_path_buf(), loc, line)
}

/// Whether job line `line` is job `name`'s: read from the head's first member when the line
/// starts with it unescaped (what this release writes), else from the head or the whole line.
fn names_job(line: &[u8], name: &str) -> Result<bool, (u64, String)> {
    if let Some(n) = quick_name(line) {
        return Ok(n == name.as_bytes());
    }
    index_of(line).map(|(n, _)| n == name)
}

/// The name in a line starting `{"head":{"name":"…"` with no escape in it.
fn quick_name(line: &[u8]) -> Option<&[u8]> {
    let rest = line.strip_prefix(HEAD_KEY)?.strip_prefix(b"{\"name\":\"")?;
    let end = memchr::memchr(b'"', rest)?;
    let n = &rest[..end];
    (!n.contains(&b'\\')).then_some(n)
}

/// The job name in a snapshot line's head, `None` when it has no readable head.
fn head_name(line: &[u8]) -> Option<String> {
    if let Some(n) = quick_name(line) {
        return std::str::from_utf8(n).ok().map(str::to_string);
    }
    match super::record::parse_head(line)? {
        Ok(h) => Some(h.name),
        Err(_) => None,
    }
}

/// Where the first line starting at or after `at` starts, if before `hi`.
fn next_line_start(f: &dyn IoFile, path: &Path, at: u64, hi: u64) -> StoreResult<Option<u64>> {
    let mut pos = at - 1;
    let mut buf = vec![0u8; BLOCK as usize];
    while pos < hi {
        let n = BLOCK.min(hi - pos) as usize;
        read_at(f, path, pos, &mut buf[..n])?;
        if let Some(i) = memchr::memchr(b'\n', &buf[..n]) {
            let start = pos + i as u64 + 1;
            return Ok((start < hi).then_some(start));
        }
        pos += n as u64;
    }
    Ok(None)
}

/// The line starting at `at` (without its newline; the file ends with one).
fn read_line(f: &dyn IoFile, path: &Path, at: u64, len: u64) -> StoreResult<Vec<u8>> {
    let mut out = Vec::new();
    let mut pos = at;
    let mut buf = vec![0u8; BLOCK as usize];
    while pos < len {
        let n = BLOCK.min(len - pos) as usize;
        read_at(f, path, pos, &mut buf[..n])?;
        if let Some(i) = memchr::memchr(b'\n', &buf[..n]) {
            out.extend_from_slice(&buf[..i]);
            return Ok(out);
        }
        out.extend_from_slice(&buf[..n]);
        pos += n as u64;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::FileStore;
    use super::super::layout::{INDEX_FILE, JOURNAL_FILE};
    use crate::model::{JobsFile, Settings, Status};
    use crate::store::policy::define::tests_support::def;
    use crate::store::{HistoryReader, Store, StoreError};
    use crate::store::{OpenError, OperationError};
    use crate::testkit::store::{ClaimAt, FinishClaim};
    use crate::testkit::time::epoch as t;
    use crate::testkit::tmp::TempDir;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("j{i:04}")).collect()
    }

    /// A store of `n` jobs compacted with an index (its snapshot is searched by bisection
    /// beyond a few dozen jobs), then edited: `j0001` paused and `new` added in the journal.
    fn store(tag: &str, n: usize) -> (TempDir, FileStore) {
        let dir = TempDir::new(&format!("point-{tag}"));
        let s = FileStore::open(&dir).unwrap().with_index_min_bytes(0);
        let file = JobsFile {
            settings: Settings::default(),
            jobs: names(n).iter().map(|n| def(n)).collect(),
        };
        s.apply(&file, t(0)).unwrap();
        s.compact_jobs_for_test();
        assert!(dir.join(INDEX_FILE).is_file());
        let snap = std::fs::metadata(dir.join(super::SNAPSHOT_FILE))
            .unwrap()
            .len();
        assert!(n < 300 || snap > 3 * super::SCAN, "bisected: {snap} bytes");
        s.set_paused("j0001", true, t(10)).unwrap();
        s.upsert_job(&def("new"), t(10)).unwrap();
        (dir, s)
    }

    /// How many jobs the handle's index holds.
    fn indexed(s: &FileStore) -> usize {
        s.lock_for(&[]).unwrap().inner.jobs.len()
    }

    fn is_point(s: &FileStore) -> bool {
        s.inner.lock().unwrap().point.is_some()
    }

    #[test]
    fn a_point_handle_reads_the_named_jobs_only_and_finds_what_a_full_one_finds() {
        let (dir, full) = store("same", 400);
        let p = FileStore::open_point(&dir, false).unwrap();
        assert!(is_point(&p));
        assert_eq!(indexed(&p), 0, "opening reads no job");
        let mut asked = vec!["j0000", "j0001", "j0199", "j0200", "j0398", "j0399", "new"];
        asked.extend(["a", "j", "j0199a", "j10000", "zzz", "new0"]);
        for n in &asked {
            assert_eq!(p.job(n).unwrap(), full.job(n).unwrap(), "{n}");
        }
        assert!(
            p.job("j0001").unwrap().unwrap().rt.paused,
            "the journal's line wins"
        );
        assert_eq!(indexed(&p), 7, "the jobs found, nothing else");
        // Every job, one handle each, as `describe NAME` opens it.
        for n in names(400) {
            let q = FileStore::open_point(&dir, false).unwrap();
            assert_eq!(q.job(&n).unwrap(), full.job(&n).unwrap(), "{n}");
        }
        // An operation over every job loads them all first.
        assert_eq!(p.jobs().unwrap(), full.jobs().unwrap());
        assert!(!is_point(&p));
        assert_eq!(indexed(&p), 401);
    }

    #[test]
    fn a_point_handles_writes_are_what_a_full_handle_writes() {
        let (dir, full) = store("write", 300);
        let p = FileStore::open_point(&dir, true).unwrap();
        p.set_paused("j0150", true, t(20)).unwrap();
        assert_eq!(
            p.request_trigger("j0299", t(20)).unwrap(),
            full.request_trigger("j0298", t(20)).unwrap()
        );
        p.set_paused("j0001", false, t(20)).unwrap();
        assert!(matches!(
            p.set_paused("nope", true, t(20)),
            Err(StoreError::Operation(OperationError::NoSuchJob(_)))
        ));
        assert!(is_point(&p), "{} jobs read", indexed(&p));
        assert!(indexed(&p) <= 4);
        // Another handle sees every write; a fresh open's cross-check and `check` agree.
        let f = FileStore::open_existing(&dir).unwrap();
        assert!(f.job("j0150").unwrap().unwrap().rt.paused);
        assert!(!f.job("j0001").unwrap().unwrap().rt.paused);
        assert!(
            f.job("j0299")
                .unwrap()
                .unwrap()
                .rt
                .trigger_requested_at
                .is_some()
        );
        drop((p, f, full));
        let rep =
            crate::store::check::check_file_store(&dir, std::time::Duration::from_secs(5)).unwrap();
        assert!(rep.ok(), "{:?}", rep.problems);
    }

    #[test]
    fn a_point_handle_follows_other_handles_writes_and_compactions() {
        let (dir, full) = store("follow", 300);
        let p = FileStore::open_point(&dir, true).unwrap();
        assert!(!p.job("j0100").unwrap().unwrap().rt.paused);
        full.set_paused("j0100", true, t(30)).unwrap();
        assert!(
            p.job("j0100").unwrap().unwrap().rt.paused,
            "the journal's tail"
        );
        full.compact_jobs_for_test();
        full.set_paused("j0200", true, t(30)).unwrap();
        assert!(
            p.job("j0100").unwrap().unwrap().rt.paused,
            "after the compaction"
        );
        assert!(p.job("j0200").unwrap().unwrap().rt.paused);
        p.set_paused("j0200", false, t(40)).unwrap();
        assert!(!full.job("j0200").unwrap().unwrap().rt.paused);
        assert!(is_point(&p));
    }

    #[test]
    fn without_a_bound_index_a_point_handle_reads_every_job() {
        let (dir, full) = store("noindex", 300);
        std::fs::remove_file(dir.join(INDEX_FILE)).unwrap();
        let p = FileStore::open_point(&dir, false).unwrap();
        assert!(!is_point(&p));
        assert_eq!(p.job("j0150").unwrap(), full.job("j0150").unwrap());
        // A small store has no index at all.
        let dir = TempDir::new("point-small");
        let s = FileStore::open(&dir).unwrap();
        s.upsert_job(&def("a"), t(0)).unwrap();
        let p = FileStore::open_point(&dir, true).unwrap();
        assert!(!is_point(&p));
        p.set_paused("a", true, t(1)).unwrap();
        assert!(s.job("a").unwrap().unwrap().rt.paused);
    }

    /// The cross-check an open runs over every record runs over each record a point handle
    /// looks up: a journal cut back to before a run's claim is refused for that job.
    #[test]
    fn a_looked_up_record_older_than_its_run_is_refused() {
        let (dir, full) = store("cut", 300);
        let jpath = dir.join(JOURNAL_FILE);
        let before = std::fs::read(&jpath).unwrap();
        full.set_paused("j0001", false, t(40)).unwrap();
        let got = full.claim_at(t(60), "o", 1000);
        let c = got
            .claims
            .iter()
            .find(|c| c.job.def.name == "j0007")
            .unwrap();
        full.finish_claim(c, "o", Status::Succeeded, t(61));
        drop(full);
        std::fs::write(&jpath, &before).unwrap();
        let p = FileStore::open_point(&dir, true).unwrap();
        let e = p.job("j0007").unwrap_err();
        assert!(e.to_string().contains("records were lost"), "{e}");
        assert!(matches!(e, StoreError::Open(OpenError::Corrupt { .. })));
        assert!(
            FileStore::open_existing(&dir).is_err(),
            "a full open agrees"
        );
    }

    /// Point handles' writes under faults (kills, power losses, `ENOSPC`, failed and lossy
    /// fsyncs, torn writes): every acknowledged pause survives a power loss, and a handle of
    /// every job opens the store afterwards (its cross-check agrees with what they wrote).
    #[test]
    fn point_writes_under_faults_keep_what_they_acknowledged() {
        use crate::testkit::simio::{FaultConfig, SimDisk, shared_rng};
        use std::collections::BTreeMap;
        let dir = std::path::Path::new("/s/.cronsole");
        let mut pointed = 0;
        for seed in 0..24u64 {
            let disk = SimDisk::new(shared_rng(seed), FaultConfig::none());
            {
                let s = FileStore::open_with_io(dir, disk.process(false))
                    .unwrap()
                    .with_index_min_bytes(0);
                let file = JobsFile {
                    settings: Settings::default(),
                    jobs: names(300).iter().map(|n| def(n)).collect(),
                };
                s.apply(&file, t(0)).unwrap();
                s.compact_jobs_for_test();
            }
            disk.set_faults(FaultConfig {
                crash: 0.03,
                power_loss: 0.02,
                enospc: 0.03,
                eio_sync: 0.03,
                fsync_loses_data: seed % 2 == 0,
                torn: 0.5,
            });
            // Per job, the state its last pause or resume acknowledged (`None`: it failed).
            let mut last: BTreeMap<String, Option<bool>> = BTreeMap::new();
            for k in 0..30u64 {
                let name = format!("j{:04}", (seed * 37 + k * 11) % 300);
                let paused = (seed + k) % 3 != 0;
                let r =
                    FileStore::open_point_with_io(dir, disk.process(true), true).and_then(|p| {
                        pointed += usize::from(is_point(&p));
                        p.set_paused(&name, paused, t(100 + k as i64))
                    });
                last.insert(name, r.is_ok().then_some(paused));
            }
            disk.set_faults(FaultConfig::none());
            disk.power_loss();
            let f = FileStore::open_with_io(dir, disk.process(false))
                .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            for (name, want) in last {
                if let Some(p) = want {
                    let got = f.job(&name).unwrap().unwrap().rt.paused;
                    assert_eq!(got, p, "seed {seed}: {name} acknowledged paused={p}");
                }
            }
            assert_eq!(f.jobs().unwrap().len(), 300);
        }
        assert!(pointed > 100, "{pointed} point handles");
    }
}

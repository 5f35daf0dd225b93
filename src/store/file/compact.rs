//! Compaction of the jobs files off the claim path: the journal is folded into a new snapshot
//! while other operations go on, and the store's lock is held only for the swap.
//!
//! Once the journal outgrows the snapshot, the write that crossed the line takes a [`Plan`]
//! under its lock — the snapshot's generation and inode, the journal's inode and its complete
//! length `J0` — and returns. Then, with no lock:
//! - [`build`] writes the new snapshot (generation + 1, naming `journal[..J0]` as absorbed) and
//!   its `jobs.index` to temp files beside the live ones, from the snapshot and `journal[..J0]`
//!   alone: both are immutable while the generation lasts (writers only append past `J0`);
//! - [`swap`], under the lock and about one ordinary write long, checks that the snapshot and
//!   the journal are still the planned files, writes the journal's lines past `J0` (what other
//!   writers appended meanwhile) into a new journal of the next generation (temp + fsync),
//!   renames the snapshot into place (directory fsync), then the journal and the index
//!   (directory fsync). Anything else (another compaction, an `apply` that wrote a snapshot)
//!   abandons the build.
//!
//! A crash between the two renames leaves a journal one generation behind whose first `J0`
//! bytes are what the new snapshot names as absorbed (length + CRC-32): opening replays only its
//! lines past `J0`, and the next writer replaces it with a journal holding those lines (see
//! `jobs.rs`). Long-lived handles build and swap on a thread of their own, with their own lock
//! descriptor; a handle opened [`Compaction::stepped`] (the fault simulator) builds when the
//! crossing operation ends and swaps when its next operation ends, so other owners' writes fall
//! in between, deterministically.
//!
//! Owns: the plan, the build, the swap, the compaction thread. Must not touch: a handle's cache
//! (the swap gives the files new inodes: every handle, this one too, follows the swap or
//! reloads on its next lock, see `follow.rs`).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use super::compaction::{Built, Compactor, Ctx, Plan, State, Temp};
use super::handle::{FileStore, Locked};
use super::index::IndexWriter;
use super::layout::{INDEX_FILE, JOURNAL_FILE, LOCK_FILE, SNAPSHOT_FILE};
use super::lines::{entry_of, for_each_line, line_len};
use super::log::{
    AtomicFile, complete_len, corrupt, count_lines_before, folded_header_line, io_err, read_at,
    stat,
};
use super::record::{
    Cached, HEAD_KEY, JournalAcct, Loc, Mark, index_of, journal_header, later_mark, line_index,
};
use crate::store::filefmt;
use crate::store::io::{IoFile, OpenMode};
use crate::store::{StoreError, StoreResult};

impl FileStore {
    pub(super) fn ctx(&self) -> Ctx {
        Ctx {
            io: Arc::clone(&self.io),
            dir: self.dir.clone(),
            id: self.store_id.clone(),
            index_min_bytes: self.index_min_bytes,
            lock_wait: self.lock_wait,
        }
    }

    /// Called when an operation released the lock, with the plan it took (if its write crossed
    /// the threshold): start, step or finish this handle's compaction.
    pub(super) fn after_unlock(&self, plan: Option<Plan>) {
        let c = &self.compactor;
        let mut st = c.state();
        if c.config.background {
            if let State::Running(h) = &*st
                && !h.is_finished()
            {
                return;
            }
            let Some(plan) = plan else { return };
            let old = std::mem::replace(&mut *st, State::Idle);
            if let State::Running(h) = old {
                let _ = h.join();
            }
            let ctx = self.ctx();
            let retry_from = Arc::clone(&c.retry_from);
            let spawned = std::thread::Builder::new()
                .name("cronsole-compact".into())
                .spawn(move || {
                    let j0 = plan.j0;
                    let r = build(&ctx, plan).and_then(|b| {
                        let lpath = ctx.dir.join(LOCK_FILE);
                        let lock = ctx
                            .io
                            .open(&lpath, OpenMode::LockFile)
                            .map_err(io_err(&lpath))?;
                        swap(&ctx, &*lock, b)
                    });
                    if let Err(e) = r {
                        Compactor::failed(&retry_from, j0, &e);
                    }
                });
            match spawned {
                Ok(h) => *st = State::Running(h),
                Err(e) => tracing::warn!("could not start the compaction thread: {e}"),
            }
            return;
        }
        // Stepped: swap what the previous operation built, else build what this one planned.
        match std::mem::replace(&mut *st, State::Idle) {
            State::Prepared(b) => {
                let j0 = b.j0;
                if let Err(e) = swap(&self.ctx(), &*self.lock, *b) {
                    Compactor::failed(&c.retry_from, j0, &e);
                }
            }
            State::Running(h) => *st = State::Running(h),
            State::Idle => {
                if let Some(plan) = plan {
                    let j0 = plan.j0;
                    match build(&self.ctx(), plan) {
                        Ok(b) => *st = State::Prepared(Box::new(b)),
                        Err(e) => Compactor::failed(&c.retry_from, j0, &e),
                    }
                }
            }
        }
    }
}

impl Locked<'_> {
    /// The journal outgrew the snapshot: plan a compaction for when the lock is released.
    pub(super) fn plan_compaction(&mut self) {
        let retry_from = self
            .store
            .compactor
            .retry_from
            .load(std::sync::atomic::Ordering::Relaxed);
        if self.inner.journal_stale
            || self.inner.compact_plan.is_some()
            || self.inner.journal.len < retry_from
        {
            return;
        }
        match self.take_plan() {
            Ok(p) => self.inner.compact_plan = p,
            Err(e) => tracing::warn!("could not plan a journal compaction: {e}"),
        }
    }

    /// The files a compaction (or the first apply's snapshot) replaces, taken under the lock.
    pub(super) fn take_plan(&mut self) -> StoreResult<Option<Plan>> {
        let spath = self.path(SNAPSHOT_FILE);
        let jpath = self.path(JOURNAL_FILE);
        let snapshot = self
            .io()
            .open(&spath, OpenMode::Read)
            .map_err(io_err(&spath))?;
        let snap_ino = snapshot.metadata().map_err(io_err(&spath))?.ino;
        // After a followed compaction the handle reads the previous snapshot: the one in place
        // is the one it followed.
        let ours = match (&self.inner.followed, self.inner.snapshot.as_deref()) {
            (Some(fw), _) => fw.snap_ino,
            (None, Some(f)) => f.metadata().map_err(io_err(&spath))?.ino,
            (None, None) => return Ok(None),
        };
        if ours != snap_ino {
            // A compaction's snapshot is in place but its journal is not (a failed rename):
            // this handle reads the files again before anything is planned from them.
            self.inner.loaded = false;
            return Ok(None);
        }
        let journal = self
            .io()
            .open(&jpath, OpenMode::Read)
            .map_err(io_err(&jpath))?;
        Ok(Some(Plan {
            generation: self.inner.generation,
            snap_ino,
            snap_len: self.inner.live_snapshot_len(),
            journal_ino: self.inner.journal.ino,
            j0: self.inner.journal.len,
            snapshot,
            journal,
        }))
    }
}

/// Write the snapshot that absorbs `journal[..j0]` (and its index) to temp files, without the
/// lock.
fn build(ctx: &Ctx, plan: Plan) -> StoreResult<Built> {
    let started = Instant::now();
    let jpath = ctx.dir.join(JOURNAL_FILE);
    let spath = ctx.dir.join(SNAPSHOT_FILE);
    let ipath = ctx.dir.join(INDEX_FILE);
    // The journal's lines before J0: each job's newest line, the marks, the CRC of the bytes.
    let mut newer: BTreeMap<String, Loc> = BTreeMap::new();
    let mut crc = filefmt::Crc32::default();
    let mut acct = None;
    for_each_line(&*plan.journal, &jpath, plan.j0, |no, off, line| {
        crc.update(line);
        crc.update(b"\n");
        if no == 1 {
            if let Ok(h) = serde_json::from_slice::<JournalAcct>(line) {
                acct = later_mark(acct, h.acct);
            }
            return Ok(());
        }
        let (name, idx) = line_index(line).map_err(|(col, what)| corrupt(&jpath, no, col, what))?;
        acct = later_mark(acct, idx.acct);
        let len = line_len(&jpath, no, line)?;
        newer.insert(
            name,
            Loc {
                journal: true,
                off,
                len,
                crc: None,
            },
        );
        Ok(())
    })?;
    let absorbed = filefmt::Absorbed {
        len: plan.j0,
        crc32: crc.finish(),
    };
    let generation = plan.generation + 1;
    // Nothing but the fold of these two files: a handle holding both keeps what it read.
    let folded = filefmt::Folded {
        snapshot: plan.snap_ino,
        journal: plan.journal_ino,
    };
    let header = folded_header_line(
        "snapshot",
        generation,
        &ctx.id,
        Some(absorbed),
        Some(folded),
    )?;
    let io = &*ctx.io;
    let mut w = Writer {
        ix: IndexWriter::new(
            io,
            &ctx.dir,
            &ipath,
            &ctx.id,
            generation,
            &header,
            ctx.index_min_bytes,
        )?,
        out: AtomicFile::create(io, &ctx.dir, &spath)?,
        acct,
        jobs: 0,
        line: Vec::new(),
    };
    w.out.buf = header;
    let mut pending = newer.into_iter().peekable();
    let mut last: Option<String> = None;
    // The snapshot's lines are in name order: merge the journal's newer lines in.
    for_each_line(&*plan.snapshot, &spath, plan.snap_len, |no, off, line| {
        if no == 1 {
            return Ok(());
        }
        let (name, _) = line_index(line).map_err(|(col, what)| corrupt(&spath, no, col, what))?;
        if last.as_deref().is_some_and(|l| l >= name.as_str()) {
            return Err(corrupt(&spath, no, 1, "job lines are not in name order"));
        }
        while let Some((n, loc)) = pending.next_if(|(n, _)| n.as_str() <= name.as_str()) {
            w.copy_journal_line(&jpath, &*plan.journal, &n, loc)?;
        }
        if !w.wrote(&name) {
            let loc = Loc {
                journal: false,
                off,
                len: line_len(&spath, no, line)?,
                crc: None,
            };
            w.emit(&spath, &*plan.snapshot, &name, loc, line)?;
        }
        last = Some(name);
        Ok(())
    })?;
    for (n, loc) in pending {
        w.copy_journal_line(&jpath, &*plan.journal, &n, loc)?;
    }
    let Writer { ix, out, jobs, .. } = w;
    let (tmp, snapshot_len) = out.keep()?;
    let snapshot = Temp {
        io: Arc::clone(&ctx.io),
        path: tmp,
    };
    let index = ix.keep(snapshot_len)?.map(|path| Temp {
        io: Arc::clone(&ctx.io),
        path,
    });
    Ok(Built {
        generation,
        snap_ino: plan.snap_ino,
        journal_ino: plan.journal_ino,
        j0: plan.j0,
        jobs,
        journal: plan.journal,
        snapshot,
        snapshot_len,
        index,
        acct,
        started,
    })
}

/// The new snapshot and its index while they are written.
pub(super) struct Writer<'a> {
    pub(super) ix: IndexWriter<'a>,
    pub(super) out: AtomicFile<'a>,
    pub(super) acct: Option<Mark>,
    pub(super) jobs: u64,
    /// The last job written (a journal line replaces its snapshot line).
    line: Vec<u8>,
}

impl<'a> Writer<'a> {
    /// A writer of the snapshot `out` (its header already in `out.buf`) and its index `ix`;
    /// a line without a head is encoded with the mark `acct`.
    pub(super) fn new(ix: IndexWriter<'a>, out: AtomicFile<'a>, acct: Option<Mark>) -> Writer<'a> {
        Writer {
            ix,
            out,
            acct,
            jobs: 0,
            line: Vec::new(),
        }
    }

    fn wrote(&self, name: &str) -> bool {
        self.line == name.as_bytes()
    }

    /// Copy job `name`'s journal line at `loc` (verified again: read once more).
    pub(super) fn copy_journal_line(
        &mut self,
        path: &Path,
        f: &dyn IoFile,
        name: &str,
        loc: Loc,
    ) -> StoreResult<()> {
        let mut line = vec![0u8; loc.len as usize];
        read_at(f, path, loc.off, &mut line)?;
        if let Err((col, what)) = filefmt::verify_line(&line, "job record") {
            let no = count_lines_before(f, path, loc.off)? + 1;
            return Err(corrupt(path, no, col, what));
        }
        self.emit(path, f, name, loc, &line)
    }

    /// Append job `name`'s line: copied when it has a head, else parsed and written with one.
    fn emit(
        &mut self,
        path: &Path,
        f: &dyn IoFile,
        name: &str,
        loc: Loc,
        line: &[u8],
    ) -> StoreResult<()> {
        let from = self.out.pos();
        let b0 = self.out.buf.len();
        let mut idx = None;
        if line.starts_with(HEAD_KEY) {
            // Each record keeps the history end of its own last write, not the compaction's.
            self.out.buf.extend_from_slice(line);
            self.out.buf.push(b'\n');
        } else {
            let c = Cached::from_entry(entry_of(path, f, loc, name, line)?);
            idx = Some(c.encode(name, self.acct, &mut self.out.buf)?);
        }
        let written = &self.out.buf[b0..self.out.buf.len() - 1];
        let crc = filefmt::line_crc(written);
        // The index holds what a scan of the new snapshot would read: the line's head.
        match idx.map_or_else(|| index_of(written).map(|(_, i)| i), Ok) {
            Ok(idx) => self.ix.push(name, from, written.len(), crc, &idx)?,
            Err(_) => self.ix.spoil(),
        }
        self.line.clear();
        self.line.extend_from_slice(name.as_bytes());
        self.jobs += 1;
        self.out.spill()
    }
}

/// Put a built snapshot in place under the lock `lock` (see the module doc). `Ok(false)`: the
/// files are no longer the planned ones; the build is dropped.
fn swap(ctx: &Ctx, lock: &dyn IoFile, b: Built) -> StoreResult<bool> {
    let lpath = ctx.dir.join(LOCK_FILE);
    if !lock.lock(ctx.lock_wait).map_err(io_err(&lpath))? {
        return Err(super::holder::timeout(lpath, lock, ctx.lock_wait));
    }
    let waited = b.started.elapsed();
    let held = Instant::now();
    let r = swap_locked(ctx, b);
    if let Err(e) = lock.unlock() {
        tracing::warn!("unlocking the store failed: {e}");
    }
    if let Ok(Some((jobs, len))) = &r {
        tracing::info!(
            "compacted the jobs journal: {jobs} jobs, snapshot {len} bytes, built in {:.3}s without the lock, swapped in {:.3}s under it",
            waited.as_secs_f64(),
            held.elapsed().as_secs_f64()
        );
    }
    r.map(|done| done.is_some())
}

/// The swap itself, the lock held (also the first apply's, `apply.rs`). `Ok(None)`: the files
/// are no longer the planned ones; nothing was changed.
pub(super) fn swap_locked(ctx: &Ctx, b: Built) -> StoreResult<Option<(u64, u64)>> {
    let io = &*ctx.io;
    let spath = ctx.dir.join(SNAPSHOT_FILE);
    let jpath = ctx.dir.join(JOURNAL_FILE);
    let (Some(sm), Some(jm)) = (stat(io, &spath)?, stat(io, &jpath)?) else {
        return Ok(None);
    };
    if sm.ino != b.snap_ino || jm.ino != b.journal_ino {
        tracing::info!("journal compaction dropped: another one replaced the files meanwhile");
        return Ok(None);
    }
    // What other writers appended since the plan (a torn line of a dead writer is not kept).
    let j1 = complete_len(&jpath, &*b.journal, jm.len)?;
    if j1 < b.j0 {
        return Ok(None);
    }
    let mut journal = AtomicFile::create(io, &ctx.dir, &jpath)?;
    journal.buf = journal_header(b.generation, &ctx.id, b.acct)?;
    let at = journal.buf.len();
    journal.buf.resize(at + (j1 - b.j0) as usize, 0);
    read_at(&*b.journal, &jpath, b.j0, &mut journal.buf[at..])?;
    let (tmp, _) = journal.keep()?;
    let journal = Temp {
        io: Arc::clone(&ctx.io),
        path: tmp,
    };
    // The snapshot first, durably: a journal of the new generation must never sit beside the
    // old snapshot. Between the two renames the old journal is read past J0 (see `jobs.rs`).
    b.snapshot.rename_to(&spath)?;
    io.sync_dir(&ctx.dir).map_err(io_err(&ctx.dir))?;
    journal.rename_to(&jpath)?;
    let ipath = ctx.dir.join(INDEX_FILE);
    let index = match b.index {
        Some(t) => t.rename_to(&ipath),
        None => match io.remove_file(&ipath) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(StoreError::io(&ipath, e)),
            _ => Ok(()),
        },
    };
    if let Err(e) = index {
        // The snapshot is the truth; an index of the old snapshot is bound to it and ignored.
        tracing::warn!("could not put {INDEX_FILE} in place: {e}");
    }
    io.sync_dir(&ctx.dir).map_err(io_err(&ctx.dir))?;
    Ok(Some((b.jobs, b.snapshot_len)))
}

#[cfg(test)]
mod tests {
    use super::super::FileStore;
    use super::super::compaction::Compaction;
    use super::super::layout::{INDEX_FILE, JOURNAL_FILE, SNAPSHOT_FILE};
    use crate::model::{JobsFile, Settings};
    use crate::store::policy::define::tests_support::def;
    use crate::store::{HistoryReader, Store};
    use crate::testkit::store::ClaimAt;
    use crate::testkit::time::epoch as t;
    use crate::testkit::tmp::TempDir;

    fn jobs(n: usize) -> JobsFile {
        JobsFile {
            settings: Settings::default(),
            jobs: (0..n).map(|i| def(&format!("job-{i:03}"))).collect(),
        }
    }

    /// When to store [`jobs`]'s `every 60s` jobs so that their first slot is `t(0)`.
    fn stored() -> chrono::DateTime<chrono::Utc> {
        t(-60)
    }

    fn generation(dir: &std::path::Path) -> u64 {
        let s = std::fs::read_to_string(dir.join(SNAPSHOT_FILE)).unwrap();
        let h: serde_json::Value = serde_json::from_str(s.lines().next().unwrap()).unwrap();
        h["generation"].as_u64().unwrap()
    }

    fn stepped(dir: &std::path::Path) -> FileStore {
        FileStore::open(dir)
            .unwrap()
            .with_index_min_bytes(0)
            .with_compaction(Compaction::stepped(0))
    }

    /// A snapshot is built and waits for its swap.
    fn building(dir: &std::path::Path) -> bool {
        std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .any(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("jobs.snapshot.tmp.")
            })
    }

    fn renewed(s: &FileStore, name: &str) -> chrono::DateTime<chrono::Utc> {
        s.job(name).unwrap().unwrap().rt.lease.unwrap().last_renewed
    }

    /// Two owners: `a`'s write crosses the threshold and builds the new snapshot when it ends;
    /// `b` writes before `a`'s next operation swaps it in. Returns the store after `b`'s write,
    /// with the journal's bytes as they were just before the swap.
    fn raced(tag: &str) -> (TempDir, FileStore, FileStore, Vec<u8>) {
        let dir = TempDir::new(&format!("compact-{tag}"));
        let a = stepped(&dir);
        a.apply(&jobs(20), stored()).unwrap();
        let b = stepped(&dir);
        let ca = a.claim_at(t(0), "a", 10);
        let cb = b.claim_at(t(0), "b", 10);
        assert_eq!((ca.claims.len(), cb.claims.len()), (10, 10));
        // Renewals grow the journal until one crosses the threshold: that operation ends with
        // the new snapshot built beside the live one.
        let g = generation(&dir);
        let first = &ca.claims[0];
        while !building(&dir) {
            a.renew(&first.job.def.name, first.run_id, t(5)).unwrap();
        }
        // `b` writes while `a`'s build waits for its swap.
        let other = &cb.claims[0];
        b.renew(&other.job.def.name, other.run_id, t(7)).unwrap();
        let before_swap = std::fs::read(dir.join(JOURNAL_FILE)).unwrap();
        assert_eq!(generation(&dir), g, "nothing swapped yet");
        (dir, a, b, before_swap)
    }

    #[test]
    fn another_owners_write_during_a_compaction_is_carried_into_the_new_journal() {
        let (dir, a, b, _) = raced("carry");
        let g = generation(&dir);
        // `a`'s next operation ends with the swap.
        let _ = a.jobs().unwrap();
        assert!(generation(&dir) > g, "the new snapshot is in place");
        assert!(dir.join(INDEX_FILE).is_file(), "and its index");
        let got = b.claim_at(t(0), "b", 20);
        assert!(got.claims.is_empty(), "every job still leased");
        for s in [&a, &b] {
            assert_eq!(renewed(s, "job-000"), t(5));
            assert_eq!(renewed(s, "job-010"), t(7), "b's renewal survived");
        }
        drop((a, b));
        let r = FileStore::open_existing(&dir).unwrap();
        assert_eq!(renewed(&r, "job-010"), t(7));
        assert_eq!(r.jobs().unwrap().len(), 20);
        let rep =
            crate::store::check::check_file_store(&dir, std::time::Duration::from_secs(5)).unwrap();
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
        let tmp: Vec<_> = std::fs::read_dir(&*dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp."))
            .collect();
        assert!(tmp.is_empty(), "no temp file left: {tmp:?}");
    }

    fn followed(s: &FileStore) -> bool {
        s.inner.lock().unwrap().followed.is_some()
    }

    fn sound(dir: &std::path::Path) {
        let rep =
            crate::store::check::check_file_store(dir, std::time::Duration::from_secs(5)).unwrap();
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    }

    /// `a` (stepped) has compacted once; `b`, opened after that, read the files in place and
    /// follows nothing. Both hold 10 leases. Then `a` renews until its next compaction is built,
    /// and `b` renews once (a line past what that compaction absorbs).
    fn fresh_pair(tag: &str) -> (TempDir, FileStore, FileStore) {
        let dir = TempDir::new(&format!("compact-{tag}"));
        let a = stepped(&dir);
        a.apply(&jobs(20), stored()).unwrap();
        let ca = a.claim_at(t(0), "a", 10);
        let b = FileStore::open(&dir).unwrap().with_index_min_bytes(0);
        let cb = b.claim_at(t(0), "b", 10);
        assert_eq!((ca.claims.len(), cb.claims.len()), (10, 10));
        assert!(!followed(&b));
        let first = &ca.claims[0];
        while !building(&dir) {
            a.renew(&first.job.def.name, first.run_id, t(5)).unwrap();
        }
        let other = &cb.claims[0];
        b.renew(&other.job.def.name, other.run_id, t(7)).unwrap();
        (dir, a, b)
    }

    #[test]
    fn a_handle_holding_the_folded_files_follows_the_swap_instead_of_reloading() {
        let (dir, a, b) = fresh_pair("follow");
        let g = generation(&dir);
        let _ = a.jobs().unwrap();
        assert!(generation(&dir) > g, "swapped");
        // `b` read every line the new snapshot folded (and wrote the one past J0): it keeps its
        // entries, reading the previous files it holds, and reads the new journal's lines only.
        assert_eq!(renewed(&b, "job-000"), t(5));
        assert!(followed(&b), "b followed the compaction");
        assert_eq!(renewed(&b, "job-010"), t(7));
        // Entries in the previous snapshot, the previous journal and the new journal are all
        // read, one at a time and a page at a time.
        let all = b.jobs().unwrap();
        assert_eq!(all.len(), 20);
        assert_eq!(all.iter().filter(|r| r.rt.lease.is_some()).count(), 20);
        // Writes after following land in the new journal, at the offsets both handles use.
        let c = b.job("job-011").unwrap().unwrap();
        b.renew("job-011", c.rt.lease.unwrap().run_id, t(9))
            .unwrap();
        let c = a.job("job-001").unwrap().unwrap();
        a.renew("job-001", c.rt.lease.unwrap().run_id, t(11))
            .unwrap();
        assert!(followed(&b), "still following");
        for s in [&a, &b] {
            assert_eq!(renewed(s, "job-011"), t(9));
            assert_eq!(renewed(s, "job-001"), t(11));
            assert_eq!(renewed(s, "job-000"), t(5));
            assert_eq!(s.jobs().unwrap().len(), 20);
        }
        drop((a, b));
        sound(&dir);
        let r = FileStore::open_existing(&dir).unwrap();
        assert_eq!(renewed(&r, "job-011"), t(9));
        assert_eq!(renewed(&r, "job-001"), t(11));
        assert_eq!(renewed(&r, "job-010"), t(7));
    }

    #[test]
    fn a_second_compaction_while_following_reloads_and_keeps_every_write() {
        let (dir, a, b) = fresh_pair("follow2");
        let _ = a.jobs().unwrap();
        let _ = b.jobs().unwrap();
        assert!(followed(&b));
        // `a` compacts again: `b` still reads the generation before the one it followed.
        let g = generation(&dir);
        let c = a.job("job-002").unwrap().unwrap();
        let run = c.rt.lease.unwrap().run_id;
        let mut i = 0;
        while generation(&dir) == g {
            i += 1;
            a.renew("job-002", run, t(20 + i)).unwrap();
            assert!(i < 10_000, "no second compaction");
        }
        let all = b.jobs().unwrap();
        assert!(!followed(&b), "b reloaded");
        assert_eq!(all.len(), 20);
        for s in [&a, &b] {
            assert_eq!(renewed(s, "job-002"), t(20 + i));
            assert_eq!(renewed(s, "job-010"), t(7));
            assert_eq!(renewed(s, "job-000"), t(5));
        }
        drop((a, b));
        sound(&dir);
    }

    #[test]
    fn a_reapply_changing_every_job_is_read_by_a_handle_that_read_them_all_before() {
        let dir = TempDir::new("compact-apply-nofollow");
        let n = super::super::jobs::DIRECT_SNAPSHOT_MIN + 10;
        let a = FileStore::open(&dir).unwrap();
        a.apply(&jobs(n), stored()).unwrap();
        let b = FileStore::open(&dir).unwrap();
        assert_eq!(b.jobs().unwrap().len(), n);
        // A re-apply changing every job journals them all and compacts: `b` reads the new
        // records, whether it follows that compaction or reloads.
        let mut changed = jobs(n);
        for d in &mut changed.jobs {
            d.max_retries += 1;
        }
        let want = changed.jobs[0].max_retries;
        a.apply(&changed, stored()).unwrap();
        let all = b.jobs().unwrap();
        assert!(all.iter().all(|r| r.def.max_retries == want));
        drop(a);
        let all = b.jobs().unwrap();
        assert_eq!(all.len(), n);
        assert!(all.iter().all(|r| r.def.max_retries == want));
        drop(b);
        sound(&dir);
    }

    /// The real disk, except that the first temp snapshot opened waits (the build in
    /// progress) until the test lets it go.
    #[derive(Debug)]
    struct HeldBuild {
        reached: std::sync::mpsc::Sender<()>,
        release: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
        once: std::sync::atomic::AtomicBool,
    }

    impl crate::store::io::StoreIo for HeldBuild {
        fn create_dir_all(&self, dir: &std::path::Path) -> std::io::Result<()> {
            crate::store::io::RealIo.create_dir_all(dir)
        }
        fn open(
            &self,
            path: &std::path::Path,
            mode: crate::store::io::OpenMode,
        ) -> std::io::Result<Box<dyn crate::store::io::IoFile>> {
            let temp_snapshot = mode == crate::store::io::OpenMode::CreateTruncate
                && path
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("jobs.snapshot.tmp."));
            if temp_snapshot && !self.once.swap(true, std::sync::atomic::Ordering::SeqCst) {
                let _ = self.reached.send(());
                let _ = self.release.lock().unwrap().recv();
            }
            crate::store::io::RealIo.open(path, mode)
        }
        fn read(&self, path: &std::path::Path) -> std::io::Result<Vec<u8>> {
            crate::store::io::RealIo.read(path)
        }
        fn metadata(&self, path: &std::path::Path) -> std::io::Result<crate::store::io::Meta> {
            crate::store::io::RealIo.metadata(path)
        }
        fn rename(&self, from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
            crate::store::io::RealIo.rename(from, to)
        }
        fn remove_file(&self, path: &std::path::Path) -> std::io::Result<()> {
            crate::store::io::RealIo.remove_file(path)
        }
        fn list_dir(&self, dir: &std::path::Path) -> std::io::Result<Vec<std::path::PathBuf>> {
            crate::store::io::RealIo.list_dir(dir)
        }
        fn sync_dir(&self, dir: &std::path::Path) -> std::io::Result<()> {
            crate::store::io::RealIo.sync_dir(dir)
        }
    }

    /// A [`HeldBuild`] disk, the channel it says it reached the build on, and the one that
    /// lets the build go.
    fn held_build() -> (
        std::sync::Arc<HeldBuild>,
        std::sync::mpsc::Receiver<()>,
        std::sync::mpsc::Sender<()>,
    ) {
        let (reached, at_build) = std::sync::mpsc::channel();
        let (release, held) = std::sync::mpsc::channel();
        let io = std::sync::Arc::new(HeldBuild {
            reached,
            release: std::sync::Mutex::new(held),
            once: std::sync::atomic::AtomicBool::new(false),
        });
        (io, at_build, release)
    }

    /// The first apply of a large file writes its snapshot with the lock free: another
    /// handle reads and claims meanwhile (nothing yet), then the snapshot swaps in whole.
    #[test]
    fn a_first_apply_of_a_large_file_leaves_the_lock_free_while_its_snapshot_is_written() {
        let dir = TempDir::new("compact-first-offlock");
        drop(FileStore::open(&dir).unwrap());
        let g = generation(&dir);
        let (io, at_build, release) = held_build();
        let a = FileStore::open_with_io(&dir, io)
            .unwrap()
            .with_index_min_bytes(0);
        let b = FileStore::open(&dir)
            .unwrap()
            .with_lock_wait(std::time::Duration::from_secs(2));
        let n = super::super::jobs::DIRECT_SNAPSHOT_MIN + 10;
        let applying = std::thread::spawn(move || {
            let rep = a.apply(&jobs(n), stored());
            drop(a);
            rep.map(|r| (r.created.len(), r.unchanged.len(), r.retired.len()))
        });
        at_build
            .recv_timeout(std::time::Duration::from_secs(120))
            .expect("the apply's snapshot is being written");
        assert!(
            b.jobs().unwrap().is_empty(),
            "read while the snapshot is written"
        );
        assert!(b.claim_at(t(0), "b", 5).claims.is_empty());
        assert!(!applying.is_finished());
        release.send(()).unwrap();
        assert_eq!(applying.join().unwrap().unwrap(), (n, 0, 0));
        assert_eq!(generation(&dir), g + 1, "one new snapshot");
        assert_eq!(
            std::fs::read(dir.join(JOURNAL_FILE))
                .unwrap()
                .iter()
                .filter(|c| **c == b'\n')
                .count(),
            1,
            "the records are in the snapshot, the journal holds its header"
        );
        // `jobs`'s names are not in name order past job-999: the snapshot's lines are.
        let text = std::fs::read_to_string(dir.join(SNAPSHOT_FILE)).unwrap();
        let names: Vec<String> = text
            .lines()
            .skip(1)
            .map(|l| super::super::record::line_index(l.as_bytes()).unwrap().0)
            .collect();
        assert_eq!(names.len(), n);
        assert!(names.windows(2).all(|w| w[0] < w[1]), "lines in name order");
        assert!(dir.join(INDEX_FILE).is_file(), "and indexed");
        assert_eq!(b.jobs().unwrap().len(), n);
        assert_eq!(b.claim_at(t(0), "b", 5).claims.len(), 5);
        drop(b);
        sound(&dir);
    }

    /// Another apply goes first while the first apply's snapshot is written: that snapshot is
    /// not put in over it; the batch is diffed against what the other apply left, as if it
    /// had started after it (the other's job not in this file is retired).
    #[test]
    fn a_first_apply_overtaken_by_another_apply_is_diffed_against_what_it_left() {
        let dir = TempDir::new("compact-first-overtaken");
        drop(FileStore::open(&dir).unwrap());
        let (io, at_build, release) = held_build();
        let a = FileStore::open_with_io(&dir, io).unwrap();
        let b = FileStore::open(&dir).unwrap();
        let n = super::super::jobs::DIRECT_SNAPSHOT_MIN + 10;
        let applying = std::thread::spawn(move || {
            let rep = a.apply(&jobs(n), stored());
            drop(a);
            rep.map(|r| (r.created.len(), r.unchanged, r.retired))
        });
        at_build
            .recv_timeout(std::time::Duration::from_secs(120))
            .expect("the apply's snapshot is being written");
        let other = JobsFile {
            settings: Settings::default(),
            jobs: vec![def("job-000"), def("zz-other")],
        };
        b.apply(&other, stored()).unwrap();
        release.send(()).unwrap();
        let (created, unchanged, retired) = applying.join().unwrap().unwrap();
        assert_eq!(created, n - 1);
        assert_eq!(unchanged, ["job-000"]);
        assert_eq!(retired, ["zz-other"]);
        let all = b.jobs().unwrap();
        assert_eq!(all.len(), n + 1);
        assert!(all.iter().any(|r| r.def.name == "zz-other" && r.rt.retired));
        drop(b);
        let tmp: Vec<_> = std::fs::read_dir(&*dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp."))
            .collect();
        assert!(tmp.is_empty(), "no temp file left: {tmp:?}");
        sound(&dir);
    }

    /// A large re-apply reads its file with the store's lock released: another owner claims
    /// while the definitions arrive, and its leases survive the apply that follows.
    #[test]
    fn a_large_reapply_reads_its_file_with_the_lock_free() {
        let dir = TempDir::new("apply-released");
        let n = super::super::jobs::DIRECT_SNAPSHOT_MIN + 10;
        let a = FileStore::open(&dir).unwrap();
        a.apply(&jobs(n), stored()).unwrap();
        let b = FileStore::open(&dir)
            .unwrap()
            .with_lock_wait(std::time::Duration::from_secs(1));
        let mut changed = jobs(n);
        for d in changed.jobs.iter_mut().step_by(2) {
            d.max_retries += 1;
        }
        let mut claimed = 0;
        let rep = a
            .apply_each(
                &changed.settings,
                &mut |sink| {
                    for (i, d) in changed.jobs.iter().enumerate() {
                        if i == 10 {
                            // A claim waiting for the lock would give up after 1 s and panic.
                            claimed = b.claim_at(t(0), "b", 5).claims.len();
                        }
                        sink(d.clone())?;
                    }
                    Ok(())
                },
                stored(),
            )
            .unwrap();
        assert_eq!(claimed, 5, "claimed while the file was read");
        assert_eq!(rep.updated.len(), n.div_ceil(2));
        assert_eq!(rep.unchanged.len(), n / 2);
        drop(a);
        let all = b.jobs().unwrap();
        assert_eq!(all.iter().filter(|r| r.rt.lease.is_some()).count(), 5);
        let want: std::collections::HashMap<&str, u32> = changed
            .jobs
            .iter()
            .map(|d| (d.name.as_str(), d.max_retries))
            .collect();
        assert_eq!(all.len(), n);
        for r in &all {
            assert_eq!(
                r.def.max_retries,
                want[r.def.name.as_str()],
                "{}",
                r.def.name
            );
        }
        drop(b);
        sound(&dir);
    }

    /// A job the re-apply found unchanged, whose definition another apply changes before the
    /// lock is taken back, refuses the batch: nothing of it is written.
    #[test]
    fn a_large_reapply_overtaken_by_another_apply_writes_nothing() {
        let dir = TempDir::new("apply-overtaken");
        let n = super::super::jobs::DIRECT_SNAPSHOT_MIN + 10;
        let a = FileStore::open(&dir).unwrap();
        a.apply(&jobs(n), stored()).unwrap();
        let b = FileStore::open(&dir).unwrap();
        let mut file = jobs(n);
        file.jobs[n - 1].max_retries += 1;
        let mut edited = file.jobs[5].clone();
        edited.max_retries += 3;
        let mut journal = Vec::new();
        let e = a
            .apply_each(
                &file.settings,
                &mut |sink| {
                    for (i, d) in file.jobs.iter().enumerate() {
                        if i == 10 {
                            b.upsert_job(&edited, stored()).unwrap();
                            journal = std::fs::read(dir.join(JOURNAL_FILE)).unwrap();
                        }
                        sink(d.clone())?;
                    }
                    Ok(())
                },
                stored(),
            )
            .unwrap_err();
        assert!(
            matches!(
                &e,
                crate::store::StoreError::Operation(crate::store::OperationError::Overtaken(j))
                    if j == "job-005"
            ),
            "{e}"
        );
        assert_eq!(e.exit_code(), 1);
        assert_eq!(std::fs::read(dir.join(JOURNAL_FILE)).unwrap(), journal);
        assert_eq!(
            a.job("job-005").unwrap().unwrap().def.max_retries,
            edited.max_retries
        );
        drop((a, b));
        sound(&dir);
    }

    /// A re-apply changing most of a large store writes no snapshot under the lock: while its
    /// new snapshot is being built, another handle claims, and the build then swaps in with
    /// that claim's lines carried over.
    #[test]
    fn an_apply_rewriting_most_of_the_store_leaves_the_lock_free_while_its_snapshot_is_built() {
        let dir = TempDir::new("compact-apply-offlock");
        let n = super::super::jobs::DIRECT_SNAPSHOT_MIN + 10;
        FileStore::open(&dir)
            .unwrap()
            .apply(&jobs(n), stored())
            .unwrap();
        let g = generation(&dir);
        let (io, at_build, release) = held_build();
        let a = FileStore::open_with_io(&dir, io).unwrap();
        // `b` never compacts (the only build is `a`'s) and gives up on a held lock quickly.
        let b = FileStore::open(&dir)
            .unwrap()
            .with_compaction(Compaction {
                slack: u64::MAX / 4,
                background: true,
            })
            .with_lock_wait(std::time::Duration::from_secs(2));
        let mut changed = jobs(n);
        for d in &mut changed.jobs {
            d.max_retries += 1;
        }
        let want = changed.jobs[0].max_retries;
        let applying = std::thread::spawn(move || {
            let rep = a.apply(&changed, stored());
            // A handle waits for its compaction before it goes.
            drop(a);
            rep.map(|r| r.updated.len())
        });
        at_build
            .recv_timeout(std::time::Duration::from_secs(120))
            .expect("the apply's snapshot is being built");
        assert_eq!(generation(&dir), g, "nothing swapped yet");
        let got = b.claim_at(t(0), "b", 5);
        assert_eq!(got.claims.len(), 5, "claimed while the snapshot is built");
        assert!(!applying.is_finished(), "the apply's compaction still runs");
        release.send(()).unwrap();
        assert_eq!(applying.join().unwrap().unwrap(), n);
        assert!(generation(&dir) > g, "the new snapshot is in place");
        let all = b.jobs().unwrap();
        assert_eq!(all.len(), n);
        assert!(all.iter().all(|r| r.def.max_retries == want));
        assert_eq!(all.iter().filter(|r| r.rt.lease.is_some()).count(), 5);
        drop(b);
        let r = FileStore::open_existing(&dir).unwrap();
        assert_eq!(
            r.jobs()
                .unwrap()
                .iter()
                .filter(|r| r.rt.lease.is_some() && r.def.max_retries == want)
                .count(),
            5,
            "b's claims were carried into the new journal"
        );
        drop(r);
        sound(&dir);
    }

    #[test]
    fn a_crash_between_the_renames_replays_the_lines_past_what_the_snapshot_absorbed() {
        let (dir, a, b, old_journal) = raced("crash");
        let _ = a.jobs().unwrap();
        drop((a, b));
        // Put back the journal as it was before its rename: one generation behind, holding
        // the absorbed bytes and `b`'s line past them.
        std::fs::write(dir.join(JOURNAL_FILE), &old_journal).unwrap();
        let rep =
            crate::store::check::check_file_store(&dir, std::time::Duration::from_secs(5)).unwrap();
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
        let r = FileStore::open_existing(&dir).unwrap();
        assert_eq!(renewed(&r, "job-010"), t(7), "the line past J0 is read");
        assert_eq!(
            renewed(&r, "job-000"),
            t(5),
            "the absorbed line is in the snapshot"
        );
        drop(r);
        // A writer replaces the stale journal, carrying that line, then appends after it.
        let w = stepped(&dir);
        let c = w.job("job-011").unwrap().unwrap();
        let lease = c.rt.lease.unwrap();
        w.renew("job-011", lease.run_id, t(9)).unwrap();
        assert_eq!(renewed(&w, "job-010"), t(7));
        drop(w);
        let journal = std::fs::read_to_string(dir.join(JOURNAL_FILE)).unwrap();
        assert!(journal.lines().count() >= 3, "{journal}");
        let r = FileStore::open_existing(&dir).unwrap();
        assert_eq!(renewed(&r, "job-010"), t(7));
        assert_eq!(renewed(&r, "job-011"), t(9));
        assert_eq!(renewed(&r, "job-000"), t(5));
        let rep =
            crate::store::check::check_file_store(&dir, std::time::Duration::from_secs(5)).unwrap();
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    }

    #[test]
    fn a_build_whose_snapshot_was_replaced_meanwhile_is_dropped() {
        let (dir, a, b, _) = raced("dropped");
        // `b` swaps first (its own stepped build, planned by its renewal above), then `a`'s
        // build no longer matches the files.
        let _ = b.jobs().unwrap();
        let g = generation(&dir);
        let _ = a.jobs().unwrap();
        assert_eq!(generation(&dir), g, "a's stale build was not swapped in");
        assert_eq!(renewed(&a, "job-010"), t(7));
        assert_eq!(renewed(&b, "job-000"), t(5));
    }

    #[test]
    fn a_background_compaction_keeps_every_write_made_while_it_runs() {
        let dir = TempDir::new("compact-thread");
        let a = FileStore::open(&dir).unwrap().with_compaction(Compaction {
            slack: 0,
            background: true,
        });
        a.apply(&jobs(50), stored()).unwrap();
        let g = generation(&dir);
        let b = FileStore::open(&dir).unwrap();
        let got = a.claim_at(t(0), "a", 50);
        for i in 0..300 {
            let c = &got.claims[i % 50];
            let s = if i % 2 == 0 { &a } else { &b };
            s.renew(&c.job.def.name, c.run_id, t(i as i64)).unwrap();
        }
        drop(a);
        assert!(generation(&dir) > g, "compactions ran");
        for i in 250..300 {
            let name = format!("job-{:03}", i % 50);
            assert_eq!(renewed(&b, &name), t(i as i64));
        }
        drop(b);
        let rep =
            crate::store::check::check_file_store(&dir, std::time::Duration::from_secs(5)).unwrap();
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    }
}

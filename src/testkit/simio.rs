//! A faulty, in-memory implementation of the file store's I/O layer ([`StoreIo`]) for the
//! deterministic fault simulator (`tests/simulation.rs`).
//!
//! Owns: a simulated disk that models the page cache, and the seeded random source every fault
//! is drawn from. Must not touch: the store's formats or decisions (the real `FileStore` runs on
//! top of this unchanged), real files, real time.
//!
//! # The model
//! - **Page cache.** Every file (inode) has the bytes every process sees (`data`) and the bytes
//!   on "disk" (`durable`), plus the writes made since the last successful `fsync`/`fdatasync`.
//!   A [`SimDisk::power_loss`] throws the cache away: each file goes back to its durable bytes,
//!   then a random prefix of its pending writes is replayed, the last one possibly torn (a
//!   prefix of its bytes) — the writeback that happened to reach the platter before the power
//!   went.
//! - **Directory entries.** Creates, renames and removes change the names every process sees at
//!   once, but a name survives a power loss only after [`StoreIo::sync_dir`] on its directory.
//! - **Processes.** Each [`SimIo`] is one process. A process crash (`kill -9`) at an I/O
//!   boundary stops it before the operation (a write may land torn in the page cache, as a
//!   killed `write(2)` can); every later call from that process fails and its `flock`s are
//!   released, as the kernel does. The page cache survives a process crash.
//! - **Faults at each boundary** (every write, truncate, sync, rename, remove, create), drawn
//!   from one [`SharedRng`] with the probabilities of a [`FaultConfig`]: process crash, power
//!   loss, `ENOSPC` (after a random prefix of the write, as a real short write), `EIO` on sync.
//!   With `fsync_loses_data` an `EIO` on sync also drops the pending writes on the floor while
//!   the cache still shows them (Linux marks the pages clean: "fsyncgate"); a later sync
//!   reports success without making them durable.
//! - **Locks** are per open file description (flock semantics); the simulation is sequential,
//!   so a contended lock is never waited for: it is reported as a timeout at once.
//!
//! Determinism: no clock, no thread, no hash map; inode numbers and file-descriptor ids are
//! counters, and the only randomness is the shared seeded RNG, so one seed replays exactly.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::store::io::{IoFile, Meta, OpenMode, StoreIo};

/// SplitMix64: tiny, fast, and good enough to pick faults; exact replay is what matters.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`0` when `n == 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo).saturating_add(1))
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }
}

/// One seeded random source shared by the disk and the harness driving it.
pub type SharedRng = Arc<Mutex<Rng>>;

pub fn shared_rng(seed: u64) -> SharedRng {
    Arc::new(Mutex::new(Rng::new(seed)))
}

fn lock_rng(rng: &SharedRng) -> MutexGuard<'_, Rng> {
    rng.lock().unwrap_or_else(|e| e.into_inner())
}

/// Probability of each fault at one I/O boundary of a faulty process.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FaultConfig {
    /// The process is killed before the operation (`kill -9`).
    pub crash: f64,
    /// The machine loses power before the operation (every process dies, the cache is lost).
    pub power_loss: f64,
    /// A write (or a create) fails with `ENOSPC`, a random prefix of it written.
    pub enospc: f64,
    /// `fsync`/`fdatasync`/directory sync fails with `EIO`.
    pub eio_sync: f64,
    /// An `EIO` on sync loses the pending writes (Linux page-cache semantics) instead of
    /// leaving them pending for a retry.
    pub fsync_loses_data: bool,
    /// When a crash or power loss cuts a write, how often it is torn rather than absent.
    pub torn: f64,
}

impl FaultConfig {
    pub fn none() -> FaultConfig {
        FaultConfig::default()
    }
}

#[derive(Debug, Clone)]
enum Pending {
    Write { off: u64, bytes: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Default)]
struct Inode {
    data: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<Pending>,
    /// Byte ranges whose writeback failed (fsyncgate): never durable.
    lost: Vec<(u64, u64)>,
    mtime: i64,
}

impl Inode {
    fn write_at(&mut self, off: u64, bytes: &[u8]) {
        let off = off as usize;
        if self.data.len() < off + bytes.len() {
            self.data.resize(off + bytes.len(), 0);
        }
        self.data[off..off + bytes.len()].copy_from_slice(bytes);
        // Rewritten bytes are dirty again: their earlier failed writeback no longer matters.
        let (from, to) = (off as u64, (off + bytes.len()) as u64);
        self.lost = std::mem::take(&mut self.lost)
            .into_iter()
            .flat_map(|(o, l)| {
                let end = o + l;
                [
                    (o, from.min(end).saturating_sub(o)),
                    (to.max(o), end.saturating_sub(to.max(o))),
                ]
            })
            .filter(|(_, l)| *l > 0)
            .collect();
        self.pending.push(Pending::Write {
            off: off as u64,
            bytes: bytes.to_vec(),
        });
    }

    fn set_len(&mut self, len: u64) {
        self.data.resize(len as usize, 0);
        // Pages cut away are gone from the cache, failed writeback or not.
        self.lost = std::mem::take(&mut self.lost)
            .into_iter()
            .filter(|(o, _)| *o < len)
            .map(|(o, l)| (o, l.min(len - o)))
            .collect();
        self.pending.push(Pending::SetLen(len));
    }

    fn sync(&mut self) {
        let mut durable = self.data.clone();
        // A page whose writeback failed is clean in the cache: no later fsync writes it, until
        // it is rewritten (`write_at`) or cut away (`set_len`).
        for &(off, len) in &self.lost {
            for i in off..off + len {
                let i = i as usize;
                if i < durable.len() {
                    durable[i] = self.durable.get(i).copied().unwrap_or(0);
                }
            }
        }
        self.durable = durable;
        self.pending.clear();
    }

    fn lose_pending(&mut self) {
        for p in self.pending.drain(..) {
            if let Pending::Write { off, bytes } = p {
                self.lost.push((off, bytes.len() as u64));
            }
        }
    }

    /// After a power loss: the durable bytes plus a random prefix of the pending writes, the
    /// last one possibly torn.
    fn power_loss(&mut self, rng: &mut Rng, torn: f64) {
        let mut data = std::mem::take(&mut self.durable);
        let pending = std::mem::take(&mut self.pending);
        let reached = rng.below(pending.len() as u64 + 1) as usize;
        for (i, p) in pending.into_iter().take(reached).enumerate() {
            match p {
                Pending::SetLen(len) => data.resize(len as usize, 0),
                Pending::Write { off, mut bytes } => {
                    if i + 1 == reached && rng.chance(torn) {
                        let keep = rng.below(bytes.len() as u64) as usize;
                        bytes.truncate(keep);
                    }
                    let off = off as usize;
                    if data.len() < off + bytes.len() {
                        data.resize(off + bytes.len(), 0);
                    }
                    data[off..off + bytes.len()].copy_from_slice(&bytes);
                }
            }
        }
        self.lost.clear();
        self.durable = data.clone();
        self.data = data;
    }
}

#[derive(Debug, Default)]
struct Disk {
    faults: FaultConfig,
    inodes: BTreeMap<u64, Inode>,
    next_ino: u64,
    names: BTreeMap<PathBuf, u64>,
    durable_names: BTreeMap<PathBuf, u64>,
    dirs: BTreeSet<PathBuf>,
    /// Lock holder per inode: the open-file-description id.
    locks: BTreeMap<u64, u64>,
    /// Open-file-description id → process.
    fd_proc: BTreeMap<u64, u64>,
    next_fd: u64,
    next_proc: u64,
    /// Incremented by every power loss: processes of an older epoch are dead.
    epoch: u64,
    dead: BTreeSet<u64>,
    clock: i64,
    boundaries: u64,
    log: Vec<String>,
    script: Vec<Scripted>,
}

/// A fault a test asks for at the next matching boundary (consumed when it fires).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scripted {
    /// The file name the operation acts on (`jobs.journal`).
    pub file: String,
    /// `write`, `fsync` or `rename`.
    pub op: &'static str,
    pub fault: ScriptedFault,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptedFault {
    /// `ENOSPC` with nothing written.
    Enospc,
    /// `EIO` (on a sync: the pending writes stay pending unless `fsync_loses_data`).
    Eio,
    /// The process is killed before the operation.
    Crash,
}

/// What happened at one I/O boundary.
enum Fault {
    None,
    Enospc,
    Eio,
}

impl Disk {
    fn alive(&self, proc: u64, epoch: u64) -> bool {
        epoch == self.epoch && !self.dead.contains(&proc)
    }

    fn kill(&mut self, proc: u64) {
        self.dead.insert(proc);
        let fds: Vec<u64> = self
            .fd_proc
            .iter()
            .filter(|(_, p)| **p == proc)
            .map(|(fd, _)| *fd)
            .collect();
        self.locks.retain(|_, fd| !fds.contains(fd));
    }

    fn power_loss(&mut self, rng: &mut Rng) {
        self.epoch += 1;
        self.locks.clear();
        self.names = self.durable_names.clone();
        let torn = self.faults.torn;
        for inode in self.inodes.values_mut() {
            inode.power_loss(rng, torn);
        }
        let live: BTreeSet<u64> = self.names.values().copied().collect();
        self.inodes.retain(|ino, _| live.contains(ino));
    }

    fn tick(&mut self) -> i64 {
        self.clock += 1;
        self.clock
    }

    fn inode(&mut self, ino: u64) -> io::Result<&mut Inode> {
        self.inodes
            .get_mut(&ino)
            .ok_or_else(|| io::Error::other("simulated inode vanished (power loss)"))
    }
}

fn dead_err() -> io::Error {
    io::Error::other("simulated process is dead")
}

/// The shared simulated disk. Cheap to clone (an `Arc`).
#[derive(Debug, Clone)]
pub struct SimDisk {
    disk: Arc<Mutex<Disk>>,
    rng: SharedRng,
}

impl SimDisk {
    pub fn new(rng: SharedRng, faults: FaultConfig) -> SimDisk {
        SimDisk {
            disk: Arc::new(Mutex::new(Disk {
                faults,
                next_ino: 1,
                next_fd: 1,
                next_proc: 1,
                ..Disk::default()
            })),
            rng,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Disk> {
        self.disk.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new process. `faulty: false` gives a process no fault is ever injected into (the
    /// checker), though it still dies at a power loss.
    pub fn process(&self, faulty: bool) -> Arc<SimIo> {
        let mut d = self.lock();
        let proc = d.next_proc;
        d.next_proc += 1;
        Arc::new(SimIo {
            disk: self.clone(),
            proc,
            epoch: d.epoch,
            faulty,
        })
    }

    pub fn set_faults(&self, faults: FaultConfig) {
        self.lock().faults = faults;
    }

    pub fn faults(&self) -> FaultConfig {
        self.lock().faults
    }

    /// Inject `s` at the next matching boundary of any faulty process.
    pub fn script(&self, s: Scripted) {
        self.lock().script.push(s);
    }

    /// Power loss now (between operations).
    pub fn power_loss(&self) {
        let mut d = self.lock();
        let mut rng = lock_rng(&self.rng);
        d.power_loss(&mut rng);
        d.log.push("power loss".into());
    }

    /// Kill a process now (between operations): its locks are released.
    pub fn kill(&self, io: &SimIo) {
        self.lock().kill(io.proc);
    }

    /// Power losses so far.
    pub fn epoch(&self) -> u64 {
        self.lock().epoch
    }

    /// I/O boundaries passed so far (a measure of work done).
    pub fn boundaries(&self) -> u64 {
        self.lock().boundaries
    }

    /// Faults injected since the last call, in order.
    pub fn take_log(&self) -> Vec<String> {
        std::mem::take(&mut self.lock().log)
    }

    /// The bytes every process sees at `path` (`None`: no such file).
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        let d = self.lock();
        let ino = d.names.get(path)?;
        d.inodes.get(ino).map(|i| i.data.clone())
    }

    /// Names every process sees, in order.
    pub fn files(&self) -> Vec<PathBuf> {
        self.lock().names.keys().cloned().collect()
    }
}

/// One simulated process's view of the disk.
#[derive(Debug)]
pub struct SimIo {
    disk: SimDisk,
    proc: u64,
    epoch: u64,
    faulty: bool,
}

impl SimIo {
    pub fn alive(&self) -> bool {
        self.disk.lock().alive(self.proc, self.epoch)
    }

    pub fn disk(&self) -> &SimDisk {
        &self.disk
    }

    /// Enter an operation: the disk locked, the process checked alive.
    fn enter(&self) -> io::Result<MutexGuard<'_, Disk>> {
        let d = self.disk.lock();
        if !d.alive(self.proc, self.epoch) {
            return Err(dead_err());
        }
        Ok(d)
    }

    /// One I/O boundary (`what` names it for the log): maybe crash, lose power, or fail.
    /// `torn` is applied (to the page cache) when a crash cuts this write.
    fn boundary(
        &self,
        d: &mut Disk,
        what: &str,
        kind: BoundaryKind,
        torn: Option<(u64, u64, &[u8])>,
        file: Option<&Path>,
    ) -> io::Result<Fault> {
        d.boundaries += 1;
        if !self.faulty {
            return Ok(Fault::None);
        }
        let name = file
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Some(k) = d
            .script
            .iter()
            .position(|s| s.file == name && what.starts_with(s.op))
        {
            let s = d.script.remove(k);
            d.log.push(format!(
                "scripted {:?} p{} on {what} {name}",
                s.fault, self.proc
            ));
            return match s.fault {
                ScriptedFault::Enospc => Err(enospc()),
                ScriptedFault::Eio => Ok(Fault::Eio),
                ScriptedFault::Crash => {
                    d.kill(self.proc);
                    Err(io::Error::other("simulated crash (kill -9)"))
                }
            };
        }
        let f = d.faults;
        let mut rng = lock_rng(&self.disk.rng);
        if rng.chance(f.power_loss) {
            if let Some((ino, off, bytes)) = torn
                && rng.chance(f.torn)
                && let Ok(inode) = d.inode(ino)
            {
                let keep = rng.below(bytes.len() as u64) as usize;
                inode.write_at(off, &bytes[..keep]);
            }
            d.power_loss(&mut rng);
            d.log
                .push(format!("power loss before {what} (p{})", self.proc));
            return Err(io::Error::other("simulated power loss"));
        }
        if rng.chance(f.crash) {
            if let Some((ino, off, bytes)) = torn
                && rng.chance(f.torn)
                && let Ok(inode) = d.inode(ino)
            {
                let keep = rng.below(bytes.len() as u64) as usize;
                inode.write_at(off, &bytes[..keep]);
                d.log.push(format!(
                    "crash p{} in {what} ({keep} of {} bytes written)",
                    self.proc,
                    bytes.len()
                ));
            } else {
                d.log.push(format!("crash p{} before {what}", self.proc));
            }
            d.kill(self.proc);
            return Err(io::Error::other("simulated crash (kill -9)"));
        }
        match kind {
            BoundaryKind::Write if rng.chance(f.enospc) => {
                d.log.push(format!("ENOSPC p{} on {what}", self.proc));
                Ok(Fault::Enospc)
            }
            BoundaryKind::Sync if rng.chance(f.eio_sync) => {
                d.log.push(format!(
                    "EIO p{} on {what}{}",
                    self.proc,
                    if f.fsync_loses_data {
                        " (pending writes lost)"
                    } else {
                        ""
                    }
                ));
                Ok(Fault::Eio)
            }
            _ => Ok(Fault::None),
        }
    }

    fn random_prefix(&self, n: usize) -> usize {
        lock_rng(&self.disk.rng).below(n as u64) as usize
    }

    fn new_fd(&self, d: &mut Disk, ino: u64, mode: OpenMode, path: &Path) -> SimFile {
        let fd = d.next_fd;
        d.next_fd += 1;
        d.fd_proc.insert(fd, self.proc);
        SimFile {
            io: Arc::new(SimIo {
                disk: self.disk.clone(),
                proc: self.proc,
                epoch: self.epoch,
                faulty: self.faulty,
            }),
            desc: Arc::new(Desc {
                disk: self.disk.clone(),
                fd,
                ino,
                mode,
                path: path.to_path_buf(),
                pos: Mutex::new(0),
            }),
        }
    }
}

#[derive(Clone, Copy)]
enum BoundaryKind {
    Write,
    Sync,
    Other,
}

fn enospc() -> io::Error {
    io::Error::new(
        io::ErrorKind::StorageFull,
        "No space left on device (simulated)",
    )
}

fn eio() -> io::Error {
    io::Error::other("Input/output error (simulated fsync failure)")
}

/// An open file description: shared by `try_clone`d handles; its lock is released when the
/// last handle goes.
#[derive(Debug)]
struct Desc {
    disk: SimDisk,
    fd: u64,
    ino: u64,
    mode: OpenMode,
    path: PathBuf,
    pos: Mutex<u64>,
}

impl Drop for Desc {
    fn drop(&mut self) {
        let mut d = self.disk.lock();
        if d.locks.get(&self.ino) == Some(&self.fd) {
            d.locks.remove(&self.ino);
        }
        d.fd_proc.remove(&self.fd);
    }
}

#[derive(Debug)]
pub struct SimFile {
    io: Arc<SimIo>,
    desc: Arc<Desc>,
}

impl IoFile for SimFile {
    fn read_exact_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        let mut d = self.io.enter()?;
        let inode = d.inode(self.desc.ino)?;
        let off = off as usize;
        if off + buf.len() > inode.data.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "failed to fill whole buffer",
            ));
        }
        buf.copy_from_slice(&inode.data[off..off + buf.len()]);
        Ok(())
    }

    fn write_all(&self, buf: &[u8]) -> io::Result<()> {
        if self.desc.mode == OpenMode::Read {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        let mut d = self.io.enter()?;
        let ino = self.desc.ino;
        let append = matches!(self.desc.mode, OpenMode::Append | OpenMode::AppendCreate);
        let mut pos = self.desc.pos.lock().unwrap_or_else(|e| e.into_inner());
        let off = if append {
            d.inode(ino)?.data.len() as u64
        } else {
            *pos
        };
        match self.io.boundary(
            &mut d,
            "write",
            BoundaryKind::Write,
            Some((ino, off, buf)),
            Some(&self.desc.path),
        )? {
            Fault::Enospc => {
                let keep = self.io.random_prefix(buf.len());
                let t = d.tick();
                let inode = d.inode(ino)?;
                inode.write_at(off, &buf[..keep]);
                inode.mtime = t;
                *pos = off + keep as u64;
                Err(enospc())
            }
            _ => {
                let t = d.tick();
                let inode = d.inode(ino)?;
                inode.write_at(off, buf);
                inode.mtime = t;
                *pos = off + buf.len() as u64;
                Ok(())
            }
        }
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut d = self.io.enter()?;
        self.io.boundary(
            &mut d,
            "truncate",
            BoundaryKind::Other,
            None,
            Some(&self.desc.path),
        )?;
        let t = d.tick();
        let inode = d.inode(self.desc.ino)?;
        inode.set_len(len);
        inode.mtime = t;
        Ok(())
    }

    fn sync_all(&self) -> io::Result<()> {
        self.sync_data()
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut d = self.io.enter()?;
        let loses = d.faults.fsync_loses_data;
        match self.io.boundary(
            &mut d,
            "fsync",
            BoundaryKind::Sync,
            None,
            Some(&self.desc.path),
        )? {
            Fault::Eio => {
                if loses {
                    d.inode(self.desc.ino)?.lose_pending();
                }
                Err(eio())
            }
            _ => {
                d.inode(self.desc.ino)?.sync();
                Ok(())
            }
        }
    }

    fn metadata(&self) -> io::Result<Meta> {
        let mut d = self.io.enter()?;
        let ino = self.desc.ino;
        let inode = d.inode(ino)?;
        Ok(Meta {
            ino,
            len: inode.data.len() as u64,
            mtime_sec: 0,
            mtime_nsec: inode.mtime,
        })
    }

    fn try_clone(&self) -> io::Result<Box<dyn IoFile>> {
        drop(self.io.enter()?);
        Ok(Box::new(SimFile {
            io: Arc::clone(&self.io),
            desc: Arc::clone(&self.desc),
        }))
    }

    fn lock(&self, _wait: Duration) -> io::Result<bool> {
        let mut d = self.io.enter()?;
        match d.locks.get(&self.desc.ino) {
            Some(fd) if *fd != self.desc.fd => Ok(false),
            _ => {
                d.locks.insert(self.desc.ino, self.desc.fd);
                Ok(true)
            }
        }
    }

    fn unlock(&self) -> io::Result<()> {
        // The kernel releases a dead process's locks; unlocking never fails here.
        let mut d = self.io.disk.lock();
        if d.locks.get(&self.desc.ino) == Some(&self.desc.fd) {
            d.locks.remove(&self.desc.ino);
        }
        Ok(())
    }
}

fn parent(p: &Path) -> PathBuf {
    p.parent().map(Path::to_path_buf).unwrap_or_default()
}

impl StoreIo for SimIo {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut d = self.enter()?;
        let mut p = dir.to_path_buf();
        loop {
            d.dirs.insert(p.clone());
            match p.parent() {
                Some(q) if !q.as_os_str().is_empty() => p = q.to_path_buf(),
                _ => break,
            }
        }
        Ok(())
    }

    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn IoFile>> {
        let mut d = self.enter()?;
        if !d.dirs.contains(&parent(path)) {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        }
        let existing = d.names.get(path).copied();
        let ino = match (existing, mode) {
            (Some(ino), OpenMode::CreateTruncate) => {
                self.boundary(
                    &mut d,
                    "truncate on open",
                    BoundaryKind::Other,
                    None,
                    Some(path),
                )?;
                let t = d.tick();
                let inode = d.inode(ino)?;
                inode.set_len(0);
                inode.mtime = t;
                ino
            }
            (Some(ino), _) => ino,
            (None, OpenMode::Read | OpenMode::Append) => {
                return Err(io::Error::from(io::ErrorKind::NotFound));
            }
            (None, _) => {
                if let Fault::Enospc =
                    self.boundary(&mut d, "create", BoundaryKind::Write, None, Some(path))?
                {
                    return Err(enospc());
                }
                let ino = d.next_ino;
                d.next_ino += 1;
                let t = d.tick();
                d.inodes.insert(
                    ino,
                    Inode {
                        mtime: t,
                        ..Inode::default()
                    },
                );
                d.names.insert(path.to_path_buf(), ino);
                ino
            }
        };
        Ok(Box::new(self.new_fd(&mut d, ino, mode, path)))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let d = self.enter()?;
        let ino = d
            .names
            .get(path)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        Ok(d.inodes
            .get(ino)
            .map(|i| i.data.clone())
            .unwrap_or_default())
    }

    fn metadata(&self, path: &Path) -> io::Result<Meta> {
        let d = self.enter()?;
        if d.dirs.contains(path) {
            return Ok(Meta::default());
        }
        let ino = *d
            .names
            .get(path)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        let inode = d
            .inodes
            .get(&ino)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        Ok(Meta {
            ino,
            len: inode.data.len() as u64,
            mtime_sec: 0,
            mtime_nsec: inode.mtime,
        })
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut d = self.enter()?;
        if !d.names.contains_key(from) {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        }
        self.boundary(&mut d, "rename", BoundaryKind::Other, None, Some(to))?;
        if let Some(ino) = d.names.remove(from) {
            d.names.insert(to.to_path_buf(), ino);
        }
        Ok(())
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        let d = self.enter()?;
        Ok(d.names
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .cloned()
            .collect())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut d = self.enter()?;
        if !d.names.contains_key(path) {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        }
        self.boundary(&mut d, "remove", BoundaryKind::Other, None, Some(path))?;
        d.names.remove(path);
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut d = self.enter()?;
        if let Fault::Eio =
            self.boundary(&mut d, "fsync dir", BoundaryKind::Sync, None, Some(dir))?
        {
            return Err(eio());
        }
        let in_dir = |p: &Path| p.parent() == Some(dir);
        d.durable_names.retain(|p, _| !in_dir(p));
        let now: Vec<(PathBuf, u64)> = d
            .names
            .iter()
            .filter(|(p, _)| in_dir(p))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        d.durable_names.extend(now);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk(seed: u64, faults: FaultConfig) -> SimDisk {
        SimDisk::new(shared_rng(seed), faults)
    }

    fn setup(io: &SimIo) -> PathBuf {
        let dir = PathBuf::from("/s");
        io.create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn unsynced_appends_and_unsynced_names_are_lost_at_power_loss() {
        let d = disk(1, FaultConfig::none());
        let io = d.process(false);
        let dir = setup(&io);
        let p = dir.join("log");
        let f = io.open(&p, OpenMode::AppendCreate).unwrap();
        f.write_all(b"one\n").unwrap();
        f.sync_data().unwrap();
        // Synced data, but the name was never made durable: the whole file goes.
        d.power_loss();
        assert!(d.contents(&p).is_none());
        assert!(!io.alive(), "a power loss kills every process");

        let io = d.process(false);
        let f = io.open(&p, OpenMode::AppendCreate).unwrap();
        f.write_all(b"one\n").unwrap();
        f.sync_data().unwrap();
        io.sync_dir(&dir).unwrap();
        f.write_all(b"two\n").unwrap();
        d.power_loss();
        let got = d.contents(&p).unwrap();
        // The durable line stays; the unsynced one is gone, torn, or (written back) whole.
        assert!(got.starts_with(b"one\n"), "{got:?}");
        assert!(b"one\ntwo\n".starts_with(&got), "{got:?}");
    }

    #[test]
    fn a_torn_prefix_of_the_last_write_can_survive_a_power_loss() {
        let mut seen = BTreeSet::new();
        for seed in 0..200 {
            let d = disk(
                seed,
                FaultConfig {
                    torn: 1.0,
                    ..FaultConfig::none()
                },
            );
            let io = d.process(false);
            let dir = setup(&io);
            let p = dir.join("log");
            let f = io.open(&p, OpenMode::AppendCreate).unwrap();
            f.sync_data().unwrap();
            io.sync_dir(&dir).unwrap();
            f.write_all(b"abcdef\n").unwrap();
            d.power_loss();
            seen.insert(d.contents(&p).unwrap().len());
        }
        // Nothing, a torn prefix, but never all 7 bytes (the last write is always torn here).
        assert!(
            seen.contains(&0) && seen.iter().any(|n| (1..7).contains(n)),
            "{seen:?}"
        );
        assert!(!seen.contains(&7), "{seen:?}");
    }

    #[test]
    fn a_crashed_process_keeps_the_page_cache_but_can_do_nothing_more() {
        let d = disk(
            3,
            FaultConfig {
                crash: 1.0,
                ..FaultConfig::none()
            },
        );
        let good = d.process(false);
        let dir = setup(&good);
        let p = dir.join("log");
        let g = good.open(&p, OpenMode::AppendCreate).unwrap();
        g.write_all(b"kept\n").unwrap();
        let bad = d.process(true);
        let f = bad.open(&p, OpenMode::Append).unwrap();
        assert!(f.lock(Duration::ZERO).unwrap());
        assert!(f.write_all(b"x\n").is_err(), "crashes at the write");
        assert!(!bad.alive());
        assert!(f.metadata().is_err(), "a dead process cannot act");
        // Its lock went with it; the cache still has the survivor's unsynced line.
        assert!(g.lock(Duration::ZERO).unwrap());
        assert!(d.contents(&p).unwrap().starts_with(b"kept\n"));
    }

    #[test]
    fn enospc_writes_a_prefix_and_fsyncgate_loses_pending_writes() {
        let d = disk(
            4,
            FaultConfig {
                enospc: 1.0,
                ..FaultConfig::none()
            },
        );
        let setup_io = d.process(false);
        let dir = setup(&setup_io);
        let p = dir.join("log");
        let f0 = setup_io.open(&p, OpenMode::AppendCreate).unwrap();
        f0.sync_data().unwrap();
        setup_io.sync_dir(&dir).unwrap();
        let io = d.process(true);
        let f = io.open(&p, OpenMode::Append).unwrap();
        let e = f.write_all(b"0123456789").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::StorageFull);
        assert!(d.contents(&p).unwrap().len() < 10);

        d.set_faults(FaultConfig {
            eio_sync: 1.0,
            fsync_loses_data: true,
            ..FaultConfig::none()
        });
        f0.set_len(0).unwrap();
        f0.sync_data().unwrap();
        f0.write_all(b"lost\n").unwrap();
        assert!(f.sync_data().is_err());
        d.set_faults(FaultConfig::none());
        f0.write_all(b"kept\n").unwrap();
        f0.sync_data().unwrap();
        assert_eq!(
            d.contents(&p).unwrap(),
            b"lost\nkept\n",
            "the cache still shows both"
        );
        d.power_loss();
        assert_eq!(
            d.contents(&p).unwrap(),
            b"\0\0\0\0\0kept\n",
            "the failed writeback is a hole"
        );
    }

    /// fsyncgate's cure: bytes whose writeback failed are cut and written again; the rewrite
    /// is dirty again and reaches the disk with the next good fsync.
    #[test]
    fn bytes_rewritten_after_a_failed_fsync_become_durable() {
        let d = disk(
            5,
            FaultConfig {
                fsync_loses_data: true,
                ..FaultConfig::none()
            },
        );
        let io = d.process(true);
        let dir = setup(&io);
        let p = dir.join("log");
        let f = io.open(&p, OpenMode::AppendCreate).unwrap();
        f.write_all(b"one\n").unwrap();
        f.sync_data().unwrap();
        io.sync_dir(&dir).unwrap();
        f.write_all(b"two\n").unwrap();
        d.script(Scripted {
            file: "log".into(),
            op: "fsync",
            fault: ScriptedFault::Eio,
        });
        assert!(f.sync_data().is_err());
        f.set_len(4).unwrap();
        f.write_all(b"TWO\n").unwrap();
        f.sync_data().unwrap();
        d.power_loss();
        assert_eq!(d.contents(&p).unwrap(), b"one\nTWO\n");
    }

    #[test]
    fn a_scripted_fault_fires_once_on_the_named_file() {
        let d = disk(5, FaultConfig::none());
        let io = d.process(true);
        let dir = setup(&io);
        let a = io.open(&dir.join("a"), OpenMode::AppendCreate).unwrap();
        let b = io.open(&dir.join("b"), OpenMode::AppendCreate).unwrap();
        d.script(Scripted {
            file: "b".into(),
            op: "fsync",
            fault: ScriptedFault::Eio,
        });
        a.write_all(b"x").unwrap();
        a.sync_data().unwrap();
        b.write_all(b"y").unwrap();
        assert!(b.sync_data().is_err());
        b.sync_data().unwrap();
        d.script(Scripted {
            file: "a".into(),
            op: "write",
            fault: ScriptedFault::Enospc,
        });
        assert_eq!(
            a.write_all(b"z").unwrap_err().kind(),
            io::ErrorKind::StorageFull
        );
        assert_eq!(d.contents(&dir.join("a")).unwrap(), b"x");
    }

    #[test]
    fn the_same_seed_makes_the_same_choices() {
        let run = |seed| {
            let d = disk(
                seed,
                FaultConfig {
                    crash: 0.1,
                    power_loss: 0.05,
                    enospc: 0.1,
                    eio_sync: 0.1,
                    fsync_loses_data: false,
                    torn: 0.5,
                },
            );
            let mut out = Vec::new();
            for round in 0..20 {
                let io = d.process(true);
                let dir = PathBuf::from("/s");
                let _ = io.create_dir_all(&dir);
                let r = io
                    .open(&dir.join("f"), OpenMode::AppendCreate)
                    .and_then(|f| {
                        f.write_all(format!("line {round}\n").as_bytes())?;
                        f.sync_data()
                    })
                    .and_then(|_| io.sync_dir(&dir));
                out.push(format!("{r:?}"));
            }
            out.extend(d.take_log());
            out.push(format!("{:?}", d.contents(Path::new("/s/f"))));
            out
        };
        assert_eq!(run(42), run(42));
        assert_ne!(run(42), run(43));
    }
}

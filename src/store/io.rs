//! The file store's I/O layer: the one narrow seam through which [`super::file::FileStore`]
//! touches the file system (open, positioned read, append/write, `fsync`/`fdatasync`, truncate,
//! rename, remove, stat, directory sync and the inter-process lock).
//!
//! Owns: the [`StoreIo`] / [`IoFile`] traits and [`RealIo`], the implementation over `std::fs`
//! and `fs4`. Must not touch: store formats or decisions (those are `file.rs` and `logic.rs`),
//! clocks, the engine, the UI.
//!
//! Why a trait: a deterministic fault simulator (`testkit::simio`) swaps in an implementation
//! that models the page cache — what was written but not yet `sync_data`/`sync_all`ed, and
//! renames/creates not yet made durable by [`StoreIo::sync_dir`], are lost or torn at a
//! simulated crash — and that injects `ENOSPC`, `EIO` on fsync, or a lock that never frees.
//! For that to mean anything the file store makes *no* `std::fs` call of its own: every byte it
//! reads or writes passes through here. The traits are object-safe, `Send + Sync`, and every
//! method takes `&self`, so an implementation can share state behind its own lock.
//!
//! Durability contract the file store relies on (and a simulator must model):
//! - [`IoFile::write_all`] on a file opened in an `Append*` mode writes at the end of the file
//!   (`O_APPEND`); it is durable only after [`IoFile::sync_data`] (or `sync_all`) returns `Ok`.
//! - [`StoreIo::rename`] replaces the target atomically; the new name is durable only after
//!   [`StoreIo::sync_dir`] on the parent returns `Ok`.
//! - [`IoFile::lock`] is an exclusive lock per open file (flock semantics: per open file
//!   description), waiting at most `wait`; `Ok(false)` means the wait ran out.

use std::fmt::Debug;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a file is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Read only; the file must exist.
    Read,
    /// Read + append; the file must exist.
    Append,
    /// Read + append, created empty if missing (never truncated).
    AppendCreate,
    /// Write, created or truncated to empty (temp files before a rename).
    CreateTruncate,
    /// Read + write, created if missing, never truncated (the lock file).
    LockFile,
}

/// What the file store needs to know about a file: identity, size and change stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Meta {
    /// Inode number (file identity: a rename-over gives a new one).
    pub ino: u64,
    /// Size in bytes.
    pub len: u64,
    /// Last modification, seconds since the Unix epoch.
    pub mtime_sec: i64,
    /// The nanoseconds of the last modification.
    pub mtime_nsec: i64,
}

/// One open file. Every method takes `&self` (the OS file offset is only used by appends).
pub trait IoFile: Send + Sync + Debug {
    /// Fill `buf` from `off`; a short file is an `UnexpectedEof` error.
    fn read_exact_at(&self, buf: &mut [u8], off: u64) -> io::Result<()>;
    /// Write all of `buf` (at the end for files opened in an append mode).
    fn write_all(&self, buf: &[u8]) -> io::Result<()>;
    /// Truncate (or extend) to `len`.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// `fsync`: data and metadata.
    fn sync_all(&self) -> io::Result<()>;
    /// `fdatasync`: data (and the size, which appends need).
    fn sync_data(&self) -> io::Result<()>;
    /// Identity, size and change stamp of the open file.
    fn metadata(&self) -> io::Result<Meta>;
    /// A second handle on the same open file (reads outside the store lock).
    fn try_clone(&self) -> io::Result<Box<dyn IoFile>>;
    /// Take the exclusive inter-process lock, waiting at most `wait`. `Ok(false)`: timed out.
    fn lock(&self, wait: Duration) -> io::Result<bool>;
    /// Release the lock taken by [`IoFile::lock`].
    fn unlock(&self) -> io::Result<()>;
    /// The lock file's advisory note of a long holder: `Some` writes it at the start of the
    /// file (one positioned write, no fsync), `None` empties the file again. No store data
    /// depends on it, so an implementation that models no such note (a simulator) does nothing.
    fn note(&self, _record: Option<&[u8]>) -> io::Result<()> {
        Ok(())
    }
}

/// The file-system operations of the file store.
pub trait StoreIo: Send + Sync + Debug {
    /// `mkdir -p`.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Open `path` as `mode` says.
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn IoFile>>;
    /// The whole content of a file.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// `stat`; `NotFound` when the path does not exist.
    fn metadata(&self, path: &Path) -> io::Result<Meta>;
    /// Atomic rename (the durable way to replace a file, with [`StoreIo::sync_dir`]).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Remove a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// The paths of the entries directly in `dir`.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<std::path::PathBuf>>;
    /// `fsync` a directory so creates/renames/removes in it are durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
}

/// `stat` that maps "does not exist" to `None`.
pub fn stat_opt(io: &dyn StoreIo, path: &Path) -> io::Result<Option<Meta>> {
    match io.metadata(path) {
        Ok(m) => Ok(Some(m)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The real file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealIo;

impl RealIo {
    /// The real file system behind an `Arc`, as
    /// [`crate::store::file::FileStore::open_with_io`] takes it.
    pub fn shared() -> Arc<dyn StoreIo> {
        Arc::new(RealIo)
    }
}

#[derive(Debug)]
struct RealFile(std::fs::File);

fn meta_of(m: &std::fs::Metadata) -> Meta {
    use std::os::unix::fs::MetadataExt;
    Meta {
        ino: m.ino(),
        len: m.len(),
        mtime_sec: m.mtime(),
        mtime_nsec: m.mtime_nsec(),
    }
}

impl IoFile for RealFile {
    fn read_exact_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(&self.0, buf, off)
    }

    fn write_all(&self, buf: &[u8]) -> io::Result<()> {
        io::Write::write_all(&mut &self.0, buf)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    fn sync_all(&self) -> io::Result<()> {
        self.0.sync_all()
    }

    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn metadata(&self) -> io::Result<Meta> {
        self.0.metadata().map(|m| meta_of(&m))
    }

    fn try_clone(&self) -> io::Result<Box<dyn IoFile>> {
        Ok(Box::new(RealFile(self.0.try_clone()?)))
    }

    /// Polls a non-blocking `flock` with a growing pause (1 ms up to 50 ms): a blocking flock
    /// cannot be given a deadline, and a stopped holder must not hang every other process.
    fn lock(&self, wait: Duration) -> io::Result<bool> {
        let start = Instant::now();
        let mut pause = Duration::from_millis(1);
        loop {
            match fs4::FileExt::try_lock(&self.0) {
                Ok(()) => return Ok(true),
                Err(fs4::TryLockError::WouldBlock) => {}
                Err(fs4::TryLockError::Error(e)) => return Err(e),
            }
            let waited = start.elapsed();
            if waited >= wait {
                return Ok(false);
            }
            std::thread::sleep(pause.min(wait - waited));
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    fn unlock(&self) -> io::Result<()> {
        fs4::FileExt::unlock(&self.0)
    }

    fn note(&self, record: Option<&[u8]>) -> io::Result<()> {
        match record {
            Some(r) => std::os::unix::fs::FileExt::write_all_at(&self.0, r, 0),
            None => self.0.set_len(0),
        }
    }
}

impl StoreIo for RealIo {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn IoFile>> {
        let mut o = std::fs::OpenOptions::new();
        match mode {
            OpenMode::Read => o.read(true),
            OpenMode::Append => o.read(true).append(true),
            OpenMode::AppendCreate => o.read(true).append(true).create(true),
            OpenMode::CreateTruncate => o.write(true).create(true).truncate(true),
            OpenMode::LockFile => o.read(true).write(true).create(true).truncate(false),
        };
        Ok(Box::new(RealFile(o.open(path)?)))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }

    fn metadata(&self, path: &Path) -> io::Result<Meta> {
        std::fs::metadata(path).map(|m| meta_of(&m))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<std::path::PathBuf>> {
        std::fs::read_dir(dir)?
            .map(|e| e.map(|e| e.path()))
            .collect()
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        std::fs::File::open(dir)?.sync_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> crate::testkit::tmp::TempDir {
        crate::testkit::tmp::TempDir::new(&format!("io-{name}"))
    }

    #[test]
    fn lock_wait_is_bounded_and_the_lock_is_per_open_file() {
        let dir = tmp("lock");
        let p = dir.join("lock");
        let io = RealIo;
        let a = io.open(&p, OpenMode::LockFile).unwrap();
        let b = io.open(&p, OpenMode::LockFile).unwrap();
        assert!(a.lock(Duration::ZERO).unwrap());
        assert!(!b.lock(Duration::from_millis(20)).unwrap(), "held by a");
        a.unlock().unwrap();
        assert!(b.lock(Duration::from_millis(20)).unwrap());
    }

    #[test]
    fn append_mode_writes_at_the_end_and_reads_are_positioned() {
        let dir = tmp("append");
        let p = dir.join("f");
        let io = RealIo;
        let f = io.open(&p, OpenMode::AppendCreate).unwrap();
        f.write_all(b"abc\n").unwrap();
        let g = io.open(&p, OpenMode::Append).unwrap();
        g.write_all(b"def\n").unwrap();
        f.sync_data().unwrap();
        let mut buf = [0u8; 3];
        f.read_exact_at(&mut buf, 4).unwrap();
        assert_eq!(&buf, b"def");
        assert_eq!(io.metadata(&p).unwrap().len, 8);
        f.set_len(4).unwrap();
        assert_eq!(io.read(&p).unwrap(), b"abc\n");
        assert!(stat_opt(&io, &dir.join("nope")).unwrap().is_none());
    }
}

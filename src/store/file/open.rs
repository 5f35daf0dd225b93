//! Opening a file store: creating a new one, migrating a previous release's in place (writers
//! only), reading `VERSION`, and verifying the open history segment and the journal/history
//! cross-check before the handle is handed out.
//!
//! Owns: the `FileStore::open*` constructors. Must not touch: the operations on an open store.

use crate::store::OpenError;
use std::path::Path;
use std::sync::{Arc, Mutex};

use uuid::Uuid;

use super::handle::{FileStore, Inner};
use super::index::INDEX_MIN_BYTES;
use super::layout::{
    DEFAULT_LOCK_WAIT, HISTORY_FILE, JOURNAL_FILE, LOCK_FILE, SEGMENT_BYTES, SETTINGS_FILE,
    SNAPSHOT_FILE, VERSION_FILE,
};
use super::log::{header_line, io_err, missing, stat, write_atomic};
use super::migrate::{migrate_v1, migrate_v2};
use super::record::settings_bytes;
use super::segment::history_header;
use crate::model::Settings;
use crate::store::filefmt::{self};
use crate::store::io::{OpenMode, RealIo, StoreIo};
use crate::store::{StoreError, StoreResult};

/// How [`FileStore`] may treat the directory when opening it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OpenAs {
    /// Create it if missing, migrate a previous-release store (engine, `apply`).
    Writer,
    /// It must exist in the current format; opening writes nothing.
    Existing,
    /// It must exist in the current format, for a command that writes to it (`pause`,
    /// `trigger`, …): opening creates and migrates nothing, and adopts what an earlier release
    /// left (retention's mark, `history.rs`) as a writer does; `jobs.index` is left to writers.
    ExistingWriter,
}

impl FileStore {
    /// Open (creating if needed, migrating a format-1 store) the store in `dir`. A foreign or
    /// corrupt store is an error naming the file; nothing is reset.
    pub fn open(dir: &Path) -> StoreResult<FileStore> {
        FileStore::open_with_io(dir, RealIo::shared())
    }

    /// [`FileStore::open`] over another I/O layer (a fault simulator).
    pub fn open_with_io(dir: &Path, io: Arc<dyn StoreIo>) -> StoreResult<FileStore> {
        FileStore::open_as(dir, io, OpenAs::Writer)
    }

    /// Open a store that must already exist, writing nothing while opening (read-only commands
    /// and front ends). A previous-release store is refused with how to upgrade it.
    pub fn open_existing(dir: &Path) -> StoreResult<FileStore> {
        FileStore::open_existing_with_io(dir, RealIo::shared())
    }

    /// [`FileStore::open_existing`] over another I/O layer (a fault simulator).
    pub(crate) fn open_existing_with_io(
        dir: &Path,
        io: Arc<dyn StoreIo>,
    ) -> StoreResult<FileStore> {
        FileStore::open_as(dir, io, OpenAs::Existing)
    }

    /// Open a store that must already exist for a command that writes to it (the operator's
    /// `pause`, `resume`, `trigger`, `retry`, `cancel`, `backfill`): like
    /// [`FileStore::open_existing`] it creates and migrates nothing, and like
    /// [`FileStore::open`] it adopts what an earlier release left (retention's mark).
    pub(crate) fn open_existing_writer(dir: &Path) -> StoreResult<FileStore> {
        FileStore::open_as(dir, RealIo::shared(), OpenAs::ExistingWriter)
    }

    /// Open a store that must already exist for a command that names the jobs it reads or
    /// writes (`describe`, `pause NAME`, `trigger`, `backfill`, `cancel`, `retry`; `writes`:
    /// as [`FileStore::open_existing_writer`], else as [`FileStore::open_existing`]). The
    /// handle reads those jobs' lines only, so the command costs the same at 1 000 jobs and at
    /// 1 000 000; an operation that needs every job (a listing, a claim) loads them first
    /// (see `point.rs`).
    pub(crate) fn open_point(dir: &Path, writes: bool) -> StoreResult<FileStore> {
        FileStore::open_point_with_io(dir, RealIo::shared(), writes)
    }

    /// [`FileStore::open_point`] over another I/O layer (a fault simulator).
    pub(crate) fn open_point_with_io(
        dir: &Path,
        io: Arc<dyn StoreIo>,
        writes: bool,
    ) -> StoreResult<FileStore> {
        let how = if writes {
            OpenAs::ExistingWriter
        } else {
            OpenAs::Existing
        };
        FileStore::open_with(dir, io, how, true)
    }

    pub(super) fn open_as(dir: &Path, io: Arc<dyn StoreIo>, how: OpenAs) -> StoreResult<FileStore> {
        FileStore::open_with(dir, io, how, false)
    }

    fn open_with(
        dir: &Path,
        io: Arc<dyn StoreIo>,
        how: OpenAs,
        point: bool,
    ) -> StoreResult<FileStore> {
        let vpath = dir.join(VERSION_FILE);
        let not_a_store = || missing(&vpath, "this directory is not a cronsole store");
        match how {
            OpenAs::Writer => io.create_dir_all(dir).map_err(io_err(dir))?,
            OpenAs::Existing | OpenAs::ExistingWriter => {
                if stat(&*io, &vpath)?.is_none() {
                    return Err(not_a_store());
                }
            }
        }
        // VERSION is read (and the store created or migrated) under the lock: another process
        // may be creating the same store right now. The empty lock file is coordination, not
        // store data: even a read-only open creates it if missing (nothing else is written).
        let lpath = dir.join(LOCK_FILE);
        let lock = io
            .open(&lpath, OpenMode::LockFile)
            .map_err(io_err(&lpath))?;
        if !lock.lock(DEFAULT_LOCK_WAIT).map_err(io_err(&lpath))? {
            return Err(super::holder::timeout(lpath, &*lock, DEFAULT_LOCK_WAIT));
        }
        let r: StoreResult<_> = (|| {
            let version = Self::read_version(&*io, dir)?;
            if how != OpenAs::Writer {
                return Ok(version);
            }
            Ok(match version {
                None => {
                    let id = Uuid::new_v4().to_string();
                    Self::create(&*io, dir, &id)?;
                    Some((3, Some(id)))
                }
                Some((1, _)) => {
                    let id = Uuid::new_v4().to_string();
                    migrate_v1(&*io, dir, &id)?;
                    migrate_v2(&*io, dir, &id, SEGMENT_BYTES)?;
                    Some((3, Some(id)))
                }
                Some((2, Some(id))) => {
                    migrate_v2(&*io, dir, &id, SEGMENT_BYTES)?;
                    Some((3, Some(id)))
                }
                v => v,
            })
        })();
        if let Err(e) = lock.unlock() {
            tracing::warn!("unlocking the store failed: {e}");
        }
        let store_id = match r? {
            Some((3, Some(id))) => id,
            None => return Err(not_a_store()),
            Some((v, _)) => {
                return Err(StoreError::Open(OpenError::Version {
                    file: vpath,
                    found: format!("cronsole-file-store {v} (previous release)"),
                    supported: format!(
                        "{} — upgrade it in place by running `cronsole apply` or `cronsole run` on it once",
                        filefmt::VERSION_TEXT
                    ),
                }));
            }
        };
        let store = FileStore {
            dir: dir.to_path_buf(),
            io,
            lock,
            lock_wait: DEFAULT_LOCK_WAIT,
            hurry: std::sync::atomic::AtomicBool::new(false),
            store_id,
            segment_bytes: SEGMENT_BYTES,
            writer: how == OpenAs::Writer,
            adopts_mark: how != OpenAs::Existing,
            index_min_bytes: INDEX_MIN_BYTES,
            compactor: super::compaction::Compactor::new(Default::default()),
            inner: Mutex::new(Inner {
                point: point.then(Default::default),
                ..Inner::default()
            }),
        };
        {
            let mut l = store.lock_for(&[])?;
            let rows = l.verify_open_segment()?;
            let seg = l.inner.history_seg;
            match l.inner.point.as_mut() {
                // Each job a point handle looks up is checked against these rows (`point.rs`).
                Some(p) => (p.rows, p.seg) = (rows, seg),
                None => l.cross_check(&rows)?,
            }
            l.check_first_segment()?;
        }
        if how != OpenAs::Existing {
            remove_dead_temps(&*store.io, dir);
        }
        Ok(store)
    }

    /// `VERSION`: `None` when absent from a directory holding none of our files.
    pub(super) fn read_version(
        io: &dyn StoreIo,
        dir: &Path,
    ) -> StoreResult<Option<(u32, Option<String>)>> {
        let vpath = dir.join(VERSION_FILE);
        match io.read(&vpath) {
            Ok(v) => {
                let v = String::from_utf8_lossy(&v);
                match filefmt::parse_version(&v) {
                    Some(x) => Ok(Some(x)),
                    None => Err(StoreError::Open(OpenError::Version {
                        file: vpath,
                        found: v.lines().next().unwrap_or("").chars().take(80).collect(),
                        supported: filefmt::VERSION_TEXT.to_string(),
                    })),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                for f in [SNAPSHOT_FILE, JOURNAL_FILE, HISTORY_FILE, SETTINGS_FILE] {
                    if stat(io, &dir.join(f))?.is_some() {
                        return Err(missing(
                            &vpath,
                            &format!(
                                "{f} is here but VERSION is not; refusing to treat the directory as a new store"
                            ),
                        ));
                    }
                }
                Ok(None)
            }
            Err(e) => Err(StoreError::io(vpath, e)),
        }
    }

    /// A new, empty store: every required file with its header, `VERSION` (with the id) last.
    pub(super) fn create(io: &dyn StoreIo, dir: &Path, id: &str) -> StoreResult<()> {
        let p = |n: &str| dir.join(n);
        write_atomic(
            io,
            dir,
            &p(SNAPSHOT_FILE),
            &header_line("snapshot", 0, id, None)?,
        )?;
        write_atomic(
            io,
            dir,
            &p(JOURNAL_FILE),
            &header_line("journal", 0, id, None)?,
        )?;
        write_atomic(
            io,
            dir,
            &p(SETTINGS_FILE),
            &settings_bytes(id, &Settings::default())?,
        )?;
        write_atomic(io, dir, &p(HISTORY_FILE), &history_header(id, 1)?)?;
        write_atomic(
            io,
            dir,
            &p(VERSION_FILE),
            filefmt::version_text(id).as_bytes(),
        )
    }
}

/// Remove the temp files (`NAME.tmp.PID.XXXXXXXX`, see `AtomicFile`) that processes which are
/// no longer running left in `dir`: a process killed while it wrote a snapshot, an index or a
/// settings file (a compaction can write hundreds of MB) leaves its temp file behind, and
/// nothing else would ever remove it. A temp file of a running process (this one included:
/// its compaction thread writes without the lock) is left alone; so is every file when the
/// running processes cannot be told (no `/proc`). Failures are logged, never an error: the
/// store does not read these files.
fn remove_dead_temps(io: &dyn StoreIo, dir: &Path) {
    let proc = Path::new("/proc");
    if !proc.join("self").exists() {
        return;
    }
    let Ok(paths) = io.list_dir(dir) else { return };
    for path in paths {
        let Some(pid) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(temp_owner)
        else {
            continue;
        };
        if pid == std::process::id() || proc.join(pid.to_string()).exists() {
            continue;
        }
        match io.remove_file(&path) {
            Ok(()) => tracing::info!(
                "removed {}, left by process {pid} (no longer running)",
                path.display()
            ),
            Err(e) => tracing::warn!("could not remove {}: {e}", path.display()),
        }
    }
}

/// The process id in a temp file's name (`NAME.tmp.PID.XXXXXXXX`, eight hex digits).
fn temp_owner(name: &str) -> Option<u32> {
    let (_, rest) = name.split_once(".tmp.")?;
    let (pid, tag) = rest.split_once('.')?;
    if tag.len() != 8 || !tag.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    pid.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::super::FileStore;
    use crate::testkit::tmp::TempDir;

    /// A process id that is not running: a child that has exited and been reaped.
    fn dead_pid() -> u32 {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        pid
    }

    #[test]
    fn temp_files_of_dead_processes_are_removed_at_open_and_others_kept() {
        let dir = TempDir::new("open-temps");
        drop(FileStore::open(&dir).unwrap());
        let dead = dead_pid();
        let names = [
            format!("jobs.snapshot.tmp.{dead}.0a1b2c3d"),
            format!("jobs.tmp.{dead}.deadbeef"),
            format!("settings.tmp.{dead}.01234567"),
        ];
        let mine = format!("jobs.snapshot.tmp.{}.0a1b2c3d", std::process::id());
        let other = "notes.tmp.txt".to_string();
        for n in names.iter().chain([&mine, &other]) {
            std::fs::write(dir.join(n), b"half a snapshot").unwrap();
        }
        // A read-only open writes nothing, removes nothing.
        drop(FileStore::open_existing(&dir).unwrap());
        assert!(names.iter().all(|n| dir.join(n).exists()));
        drop(FileStore::open_existing_writer(&dir).unwrap());
        for n in &names {
            assert!(!dir.join(n).exists(), "{n} removed");
        }
        assert!(
            dir.join(&mine).exists(),
            "a running process's temp file is kept"
        );
        assert!(dir.join(&other).exists(), "not a temp file of ours");
    }

    #[test]
    fn a_temp_name_names_its_process() {
        assert_eq!(
            super::temp_owner("jobs.snapshot.tmp.4242.0a1b2c3d"),
            Some(4242)
        );
        assert_eq!(super::temp_owner("jobs.tmp.7.ffffffff"), Some(7));
        assert_eq!(super::temp_owner("jobs.tmp.7.fff"), None);
        assert_eq!(super::temp_owner("jobs.tmp.x.ffffffff"), None);
        assert_eq!(super::temp_owner("jobs.snapshot.jsonl"), None);
    }
}

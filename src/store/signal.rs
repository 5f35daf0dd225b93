//! Change signals: how an owner hears, within milliseconds, that another process (an owner on
//! another host, `cronsole pause/trigger/apply` from a shell) changed the store, instead of
//! polling the change token. PostgreSQL feeds one from LISTEN/NOTIFY (`postgres::listen`); the
//! file store from file-system notifications on its directory (the `notify` crate: inotify on
//! Linux) — [`watch_dir`].
//!
//! Owns: the [`ChangeSignal`] type and the directory watcher. Must not touch: what changed (a
//! signal only says "look again": the receiver re-reads the change token and the store), the
//! engine.
//!
//! A signal may fire for changes this process made itself and may coalesce many changes into
//! one; it may also miss some (an inotify queue overflow is reported as a rescan and fires).
//! A directory on a network or user-space file system (NFS, SMB/CIFS, FUSE, Ceph, 9p, …) gets
//! inotify too, but inotify reports only the writes made through this host's kernel, never
//! another host's: an owner there would sleep through the other owners' claims and an
//! operator's `pause` from another machine. [`watch_dir`] therefore looks at the directory's
//! file system first (`statfs`) and, on such a file system, logs it and returns no signal, so
//! the engine polls the change token instead (`remote_kind` decides).

use tokio::sync::watch;

/// "The store changed": `rx` changes value (a counter) on every observed change. Holds whatever
/// keeps the source alive (a directory watcher); dropping the signal stops it.
pub struct ChangeSignal {
    /// Changes value (a counter) on every change observed.
    pub rx: watch::Receiver<u64>,
    _source: Option<Box<dyn Send + Sync>>,
}

impl std::fmt::Debug for ChangeSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChangeSignal")
            .field("seen", &*self.rx.borrow())
            .finish()
    }
}

impl ChangeSignal {
    /// A signal fed by someone else's sender (the PostgreSQL listener).
    pub fn from_receiver(rx: watch::Receiver<u64>) -> ChangeSignal {
        ChangeSignal { rx, _source: None }
    }

    /// Wait for the next change; `false` when the source is gone (fall back to polling).
    pub async fn changed(&mut self) -> bool {
        self.rx.changed().await.is_ok()
    }
}

/// Watch `dir` (not recursively) and fire when one of `files` (names inside it) is created,
/// written, renamed or removed. `None` when the platform cannot watch (the caller polls).
/// Also `None`, logged, when `dir` is on a file system whose notifications miss other hosts'
/// writes (`remote_kind`).
pub fn watch_dir(dir: &std::path::Path, files: &'static [&'static str]) -> Option<ChangeSignal> {
    use notify::{EventKind, RecursiveMode, Watcher};
    match crate::proc::sys::file_system_type(dir) {
        // Every magic number is 32 bits; some C libraries hand them sign-extended.
        Ok(t) => {
            if let Some(kind) = remote_kind(t as u32) {
                tracing::warn!(dir = %dir.display(), file_system = kind, "the store directory is on a network or user-space file system ({kind}), whose change notifications miss other hosts' writes; polling for changes");
                return None;
            }
        }
        Err(e) => {
            tracing::debug!(error = %e, dir = %dir.display(), "cannot tell the store directory's file system; watching it");
        }
    }
    let (tx, rx) = watch::channel(0u64);
    let handler = move |res: notify::Result<notify::Event>| {
        let relevant = match res {
            Ok(ev) => {
                // A rescan request means events were lost: treat it as a change.
                ev.need_rescan()
                    || (!matches!(ev.kind, EventKind::Access(_))
                        && ev.paths.iter().any(|p| {
                            p.file_name()
                                .and_then(|n| n.to_str())
                                .is_some_and(|n| files.contains(&n))
                        }))
            }
            Err(_) => true,
        };
        if relevant {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    };
    let mut watcher = match notify::recommended_watcher(handler) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(error = %e, dir = %dir.display(), "cannot watch the store directory; polling for changes");
            return None;
        }
    };
    if let Err(e) = watcher.watch(dir, RecursiveMode::NonRecursive) {
        tracing::warn!(error = %e, dir = %dir.display(), "cannot watch the store directory; polling for changes");
        return None;
    }
    Some(ChangeSignal {
        rx,
        _source: Some(Box::new(watcher)),
    })
}

/// The file systems (`statfs` `f_type` magic numbers, from the kernel's `linux/magic.h` and
/// the file systems' own sources) on which this host's inotify does not see other hosts'
/// writes: network file systems, cluster file systems, and FUSE (sshfs, s3fs, rclone, gcsfuse
/// and the like serve remote data; a local FUSE file system is polled too, which costs a
/// `stat` of three files a few times a second and loses nothing).
const REMOTE: &[(u32, &str)] = &[
    (0x6969, "NFS"),
    (0x517B, "SMB"),
    (0xFF53_4D42, "CIFS"),
    (0xFE53_4D42, "SMB2"),
    (0x564C, "NCP"),
    (0x6573_5546, "FUSE"),
    (0x0102_1997, "9p"),
    (0x00C3_6400, "Ceph"),
    (0x5346_414F, "AFS"),
    (0x6B41_4653, "AFS"),
    (0x7375_7245, "Coda"),
    (0x0116_1970, "GFS2"),
    (0x7461_636F, "OCFS2"),
    (0x0BD0_0BD0, "Lustre"),
    (0x4750_4653, "GPFS"),
    (0x2003_0528, "OrangeFS"),
    (0x786F_4256, "VirtualBox shared folder"),
];

/// The name of the file system of magic number `f_type` when its change notifications miss
/// other hosts' writes (the store then polls); `None` for a local file system.
pub(crate) fn remote_kind(f_type: u32) -> Option<&'static str> {
    REMOTE.iter().find(|(m, _)| *m == f_type).map(|(_, n)| *n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn network_and_user_space_file_systems_poll_and_local_ones_watch() {
        // The magic numbers as `statfs` reports them (linux/magic.h).
        for (f_type, kind) in [
            (0x6969, "NFS"),
            (0xFF53_4D42, "CIFS"),
            (0xFE53_4D42, "SMB2"),
            (0x517B, "SMB"),
            (0x6573_5546, "FUSE"),
            (0x00C3_6400, "Ceph"),
            (0x0102_1997, "9p"),
        ] {
            assert_eq!(remote_kind(f_type), Some(kind), "{f_type:#x}");
        }
        // ext4, xfs, btrfs, tmpfs, overlayfs, zfs: inotify sees every write (one kernel).
        for f_type in [
            0xEF53u32,
            0x5846_5342,
            0x9123_683E,
            0x0102_1994,
            0x794C_7630,
            0x2FC1_2FC1,
        ] {
            assert_eq!(remote_kind(f_type), None, "{f_type:#x}");
        }
        // A C library that hands `f_type` as a signed 32-bit number: CIFS's is negative there.
        let signed = 0xFF53_4D42u32 as i32 as i64;
        assert_eq!(remote_kind(signed as u32), Some("CIFS"));
    }

    #[test]
    fn the_test_directory_is_on_a_file_system_the_decision_knows_as_local() {
        // The tests' store directories live on a local disk or tmpfs here, where the watcher
        // must stay on (the idle owner's wake-ups depend on it).
        let dir = crate::testkit::tmp::TempDir::new("signal-fs");
        let t = crate::proc::sys::file_system_type(&dir).expect("statfs of a directory");
        assert_eq!(remote_kind(t as u32), None, "f_type {t:#x}");
        assert!(crate::proc::sys::file_system_type(&dir.join("missing")).is_err());
    }

    #[tokio::test]
    async fn a_write_to_a_watched_file_fires_and_other_files_do_not() {
        let dir = crate::testkit::tmp::TempDir::new("signal");
        let mut s = watch_dir(&dir, &["jobs.journal"]).expect("inotify available");
        std::fs::write(dir.join("unrelated"), "x").unwrap();
        // Nothing fired for the unrelated file (checked after the watched write below: the
        // counter must be exactly one change when only one watched write happened).
        std::fs::write(dir.join("jobs.journal"), "x").unwrap();
        tokio::time::timeout(Duration::from_secs(10), s.changed())
            .await
            .expect("the write to jobs.journal was signalled");
        // Let the rest of that write's events (create, modify) arrive, then mark them seen.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(*s.rx.borrow_and_update() >= 1);
        std::fs::write(dir.join("unrelated"), "y").unwrap();
        let quiet = tokio::time::timeout(Duration::from_millis(300), s.changed()).await;
        assert!(quiet.is_err(), "an unrelated file must not fire");
    }
}

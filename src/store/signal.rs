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
//! one; it may also miss some (an inotify queue overflow is reported as a rescan and fires; a
//! network file system may not report remote writes at all), which is why the engine keeps a
//! slow change-token poll as a fallback.

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
pub fn watch_dir(dir: &std::path::Path, files: &'static [&'static str]) -> Option<ChangeSignal> {
    use notify::{EventKind, RecursiveMode, Watcher};
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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

//! The completion spool: run completions the store could not take before this process was told
//! to stop, kept in a local file that the next start replays, so a
//! stop during a store outage loses no run's outcome.
//!
//! Owns: the spool file's format (one JSON object per line, a serialisable mirror of
//! [`Completion`]), appending with fsync, and atomic rewrites of what is left after a replay.
//! Must not touch: the store (the engine replays through it, fenced by `run_id` like any
//! completion), the UI.
//!
//! Decisions:
//! - Location: `<store dir>/spool/completions.jsonl` for the file store (beside `logs/`), and
//!   `.cronsole/spool/<hash of the URL>.jsonl` in the working directory for PostgreSQL (its log
//!   goes to `.cronsole/logs/<the same hash>/`). The binary chooses; the engine only gets a path.
//! - A spool line that does not parse is never dropped silently: the replay stops reading the
//!   file, reports the line, and leaves the file as it is (exit-worthy corruption, like a store
//!   file).
//! - Entries are removed only by rewriting the file without them (temp file + fsync + rename), so
//!   a crash in the middle of a replay leaves every unreplayed entry in place. A replayed entry
//!   whose row is already in history (its completion was written just before the stop) is not
//!   written again.

use std::io::Write;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::model::{HistoryRow, JobState};
use crate::store::Completion;

/// Errors reading or writing the spool file.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    /// Reading or writing the file failed.
    #[error("completion spool {path}: {source}")]
    Io {
        /// The spool file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A line that is not a spooled completion.
    #[error("completion spool {path}:{line}: not a completion ({what}); the file is left as it is")]
    Corrupt {
        /// The spool file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What was wrong with it.
        what: String,
    },
}

/// One spooled completion (the wire form of [`Completion`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The job.
    pub job: String,
    /// The run.
    pub run_id: Uuid,
    /// The owner that ran it (completions are fenced by owner and run id).
    pub owner: String,
    /// When the run finished.
    pub now: DateTime<Utc>,
    /// The history row.
    pub row: HistoryRow,
    /// The job's new state, if it changed.
    pub state: Option<JobState>,
    /// Hold the job until then, if set.
    pub hold_until: Option<DateTime<Utc>>,
}

impl From<&Completion> for Entry {
    fn from(c: &Completion) -> Self {
        Entry {
            job: c.job.clone(),
            run_id: c.run_id,
            owner: c.owner.clone(),
            now: c.now,
            row: c.row.clone(),
            state: c.state.clone(),
            hold_until: c.hold_until,
        }
    }
}

impl From<Entry> for Completion {
    fn from(e: Entry) -> Self {
        Completion {
            job: e.job,
            run_id: e.run_id,
            owner: e.owner,
            now: e.now,
            row: e.row,
            state: e.state,
            hold_until: e.hold_until,
        }
    }
}

/// The spool file of one store.
#[derive(Debug, Clone)]
pub struct Spool {
    path: PathBuf,
}

impl Spool {
    /// The spool at `path` (nothing is read or created until used).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Spool { path: path.into() }
    }

    /// Where the spool file is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io(&self, source: std::io::Error) -> SpoolError {
        SpoolError::Io {
            path: self.path.clone(),
            source,
        }
    }

    /// Append `entries` durably (one line each, then fsync of the file and its directory).
    pub fn append(&self, entries: &[Entry]) -> Result<(), SpoolError> {
        if entries.is_empty() {
            return Ok(());
        }
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| self.io(e))?;
        }
        let mut buf = Vec::new();
        for e in entries {
            serde_json::to_writer(&mut buf, e)
                .map_err(|e| self.io(std::io::Error::other(e.to_string())))?;
            buf.push(b'\n');
        }
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| self.io(e))?;
        f.write_all(&buf).map_err(|e| self.io(e))?;
        f.sync_all().map_err(|e| self.io(e))?;
        self.sync_dir();
        Ok(())
    }

    /// Every entry in the file (none when it does not exist).
    pub fn load(&self) -> Result<Vec<Entry>, SpoolError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(self.io(e)),
        };
        let mut out = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let e: Entry = serde_json::from_str(line).map_err(|e| SpoolError::Corrupt {
                path: self.path.clone(),
                line: i + 1,
                what: e.to_string(),
            })?;
            out.push(e);
        }
        Ok(out)
    }

    /// Replace the file's contents with `left` (removed when empty), atomically.
    pub fn rewrite(&self, left: &[Entry]) -> Result<(), SpoolError> {
        if left.is_empty() {
            return match std::fs::remove_file(&self.path) {
                Ok(()) => {
                    self.sync_dir();
                    Ok(())
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(self.io(e)),
            };
        }
        let tmp = self
            .path
            .with_extension(format!("tmp{}", std::process::id()));
        let mut buf = Vec::new();
        for e in left {
            serde_json::to_writer(&mut buf, e)
                .map_err(|e| self.io(std::io::Error::other(e.to_string())))?;
            buf.push(b'\n');
        }
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&buf)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.path)
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            self.io(e)
        })?;
        self.sync_dir();
        Ok(())
    }

    fn sync_dir(&self) {
        if let Some(dir) = self.path.parent()
            && let Ok(d) = std::fs::File::open(dir)
        {
            let _ = d.sync_all();
        }
    }
}

/// Where the spool of the store at `location` lives (see the module doc).
pub fn path_for(location: &str) -> PathBuf {
    if location.contains("://") {
        PathBuf::from(".cronsole")
            .join("spool")
            .join(format!("{}.jsonl", url_tag(location)))
    } else {
        Path::new(location).join("spool").join("completions.jsonl")
    }
}

/// A short name for a URL store's local files (its spool, its log directory): a hash of the URL
/// without its password, so a file name never carries a secret and two databases never share one.
pub fn url_tag(location: &str) -> String {
    use sha2::Digest;
    let h = sha2::Sha256::digest(strip_password(location).as_bytes());
    h.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

fn strip_password(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            let user = creds.split(':').next().unwrap_or("");
            format!("{}{}{}", &url[..s + 3], user, &url[at..])
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Status, Trigger};

    fn entry(job: &str) -> Entry {
        let t = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        Entry {
            job: job.into(),
            run_id: Uuid::new_v4(),
            owner: "h:1:abcd".into(),
            now: t,
            row: HistoryRow::new(
                job,
                Status::Succeeded,
                Trigger::Schedule,
                Some(t),
                "h:1:abcd",
                t,
            ),
            state: None,
            hold_until: None,
        }
    }

    fn dir() -> crate::testkit::tmp::TempDir {
        crate::testkit::tmp::TempDir::new("spool")
    }

    #[test]
    fn append_load_rewrite_round_trip() {
        let d = dir();
        let s = Spool::new(d.join("spool").join("completions.jsonl"));
        assert!(s.load().unwrap().is_empty(), "a missing spool is empty");
        let (a, b) = (entry("a"), entry("b"));
        s.append(std::slice::from_ref(&a)).unwrap();
        s.append(std::slice::from_ref(&b)).unwrap();
        assert_eq!(s.load().unwrap(), vec![a.clone(), b.clone()]);
        s.rewrite(std::slice::from_ref(&b)).unwrap();
        assert_eq!(s.load().unwrap(), vec![b]);
        s.rewrite(&[]).unwrap();
        assert!(!s.path().exists());
    }

    #[test]
    fn a_damaged_line_is_reported_with_its_number_and_the_file_kept() {
        let d = dir();
        let s = Spool::new(d.join("c.jsonl"));
        s.append(&[entry("a")]).unwrap();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(s.path())
            .unwrap();
        f.write_all(b"{not json\n").unwrap();
        let before = std::fs::read(s.path()).unwrap();
        match s.load() {
            Err(SpoolError::Corrupt { line, .. }) => assert_eq!(line, 2),
            other => panic!("{other:?}"),
        }
        assert_eq!(std::fs::read(s.path()).unwrap(), before);
    }

    #[test]
    fn spool_paths_never_carry_a_password() {
        let p = path_for("postgres://u:hunter2@db/x");
        assert!(!p.to_string_lossy().contains("hunter2"));
        assert_eq!(p, path_for("postgres://u:other@db/x"));
        assert_ne!(p, path_for("postgres://u@db/y"));
        assert_eq!(
            path_for("/s/.cronsole"),
            PathBuf::from("/s/.cronsole/spool/completions.jsonl")
        );
    }
}

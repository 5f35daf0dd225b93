//! Temporary directories for tests, removed when dropped — also when the test panics, which the
//! hand-made `temp_dir().join(uuid)` helpers this replaces never did.
//!
//! `CRONSOLE_TEST_KEEP=1` keeps every directory (and prints where it is) for a post-mortem.
//!
//! Owns: creating and removing test directories under the system temp dir. Must not touch:
//! anything outside the directory it made.

use std::ffi::OsStr;
use std::io::Write as _;
use std::ops::Deref;
use std::path::{Path, PathBuf};

/// A fresh directory `$TMPDIR/cronsole-<tag>-XXXXXX`, removed with everything in it on drop.
/// Derefs to [`Path`], so `dir.join(…)` and `&dir` as a `&Path` work as with a `PathBuf`.
#[derive(Debug)]
pub struct TempDir(tempfile::TempDir);

impl TempDir {
    /// Create the directory. Panics naming the error if the temp dir cannot be written (the test
    /// could not run anyway).
    pub fn new(tag: &str) -> TempDir {
        TempDir::new_in(&std::env::temp_dir(), tag)
    }

    /// [`TempDir::new`] under `base` instead of the system temp dir (a benchmark's `BENCH_DIR`
    /// on the disk being measured).
    pub fn new_in(base: &Path, tag: &str) -> TempDir {
        let prefix = format!("cronsole-{tag}-");
        let mut dir = match tempfile::Builder::new().prefix(&prefix).tempdir_in(base) {
            Ok(d) => d,
            Err(e) => panic!(
                "creating a temporary directory {}…: {e}",
                base.join(&prefix).display()
            ),
        };
        if keep() {
            dir.disable_cleanup(true);
            let _ = writeln!(std::io::stderr(), "keeping {}", dir.path().display());
        }
        TempDir(dir)
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// The path as an owned `PathBuf` (the directory still goes when `self` is dropped).
    pub fn to_path_buf(&self) -> PathBuf {
        self.0.path().to_path_buf()
    }
}

/// A path `name` inside a fresh [`TempDir`] (the file itself is not created), for a test that
/// needs one file; the directory goes on drop. Derefs to [`Path`].
#[derive(Debug)]
pub struct TempPath {
    path: PathBuf,
    _dir: TempDir,
}

impl TempPath {
    /// `$TMPDIR/cronsole-<name>-XXXXXX/<name>`.
    pub fn new(name: &str) -> TempPath {
        let dir = TempDir::new(name);
        TempPath {
            path: dir.join(name),
            _dir: dir,
        }
    }
}

impl Deref for TempPath {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for TempPath {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<OsStr> for TempPath {
    fn as_ref(&self) -> &OsStr {
        self.path.as_os_str()
    }
}

fn keep() -> bool {
    std::env::var_os("CRONSOLE_TEST_KEEP").is_some_and(|v| !v.is_empty() && v != "0")
}

impl Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        self.0.path()
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        self.0.path()
    }
}

impl AsRef<OsStr> for TempDir {
    fn as_ref(&self) -> &OsStr {
        self.0.path().as_os_str()
    }
}

#[cfg(test)]
mod tests {
    use super::{TempDir, TempPath};

    #[test]
    fn a_temp_path_is_a_fresh_name_in_a_dir_that_goes_on_drop() {
        let p = TempPath::new("one.txt");
        assert!(!p.exists() && p.parent().is_some_and(|d| d.is_dir()));
        assert_eq!(p.file_name().and_then(|f| f.to_str()), Some("one.txt"));
        let dir = p.parent().map(|d| d.to_path_buf()).unwrap_or_default();
        drop(p);
        assert!(!dir.exists(), "{} left behind", dir.display());
    }

    #[test]
    fn removed_on_drop_even_when_the_owner_panics() {
        let (tx, rx) = std::sync::mpsc::channel();
        let r = std::thread::spawn(move || {
            let d = TempDir::new("tmp-selftest");
            std::fs::write(d.join("f"), b"x").unwrap_or_else(|e| panic!("{e}"));
            let _ = tx.send(d.to_path_buf());
            panic!("test body fails");
        })
        .join();
        assert!(r.is_err());
        let path = rx.recv().unwrap_or_else(|e| panic!("{e}"));
        assert!(path.starts_with(std::env::temp_dir()), "{}", path.display());
        assert!(!path.exists(), "{} left behind", path.display());
    }

    #[test]
    fn new_in_makes_the_directory_under_the_base_given() {
        let base = TempDir::new("tmp-base");
        let d = TempDir::new_in(&base, "inner");
        assert_eq!(d.parent(), Some(base.path()));
        assert!(d.is_dir());
        let path = d.to_path_buf();
        drop(d);
        assert!(!path.exists(), "{} left behind", path.display());
    }
}

//! Unit tests of the definition digest: a re-apply reads the records of the jobs it changes
//! and no other, through a handle that loaded the journal's line heads and through one that
//! loaded `jobs.index`; lines written before the digest existed are read once and rewritten
//! with one.

use std::path::Path;

use super::handle::FileStore;
use super::layout::{INDEX_FILE, JOURNAL_FILE};
use crate::model::{Action, JobsFile, Settings};
use crate::store::policy::define::tests_support::def;
use crate::store::{ApplyReport, HistoryReader, Store};
use crate::testkit::time::epoch as t;
use crate::testkit::tmp::TempDir;

fn file(n: usize, edited: Option<usize>, without: Option<usize>) -> JobsFile {
    let jobs = (0..n)
        .filter(|i| Some(*i) != without)
        .map(|i| {
            let mut d = def(&format!("j{i:04}"));
            if Some(i) == edited {
                d.action = Action::Command {
                    command: "echo edited".into(),
                    timeout_seconds: 60.0,
                };
            }
            d
        })
        .collect();
    JobsFile {
        settings: Settings::default(),
        jobs,
    }
}

fn loaded(s: &FileStore) -> usize {
    s.inner.lock().unwrap().records_loaded
}

/// A re-apply of `f`: its report and the number of records it read.
fn reapply(s: &FileStore, f: &JobsFile, now: i64) -> (ApplyReport, usize) {
    let before = loaded(s);
    let r = s.apply(f, t(now)).unwrap();
    (r, loaded(s) - before)
}

fn len(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().len()
}

#[test]
fn a_re_apply_reads_only_the_records_it_changes() {
    let dir = TempDir::new("fs-digest");
    let s = FileStore::open(&dir).unwrap();
    s.apply(&file(300, None, None), t(0)).unwrap();
    // Unchanged: nothing read, nothing written.
    let journal = dir.join(JOURNAL_FILE);
    let j0 = len(&journal);
    let (r, read) = reapply(&s, &file(300, None, None), 10);
    assert_eq!((r.unchanged.len(), read), (300, 0));
    assert_eq!(len(&journal), j0, "an unchanged re-apply writes nothing");
    // One job edited: only its record is read, and it is updated.
    let (r, read) = reapply(&s, &file(300, Some(7), None), 20);
    assert_eq!((r.updated.clone(), read), (vec!["j0007".to_string()], 1));
    assert_eq!(
        s.job("j0007").unwrap().unwrap().def,
        file(300, Some(7), None).jobs[7]
    );
    // One job left out: only it is read, to retire it.
    let (r, read) = reapply(&s, &file(300, Some(7), Some(9)), 30);
    assert_eq!((r.retired.clone(), read), (vec!["j0009".to_string()], 1));
    // Back in the file: a job retired by its removal carries no digest, so it is read and
    // comes back even though its definition is the one stored.
    let (r, read) = reapply(&s, &file(300, Some(7), None), 40);
    assert_eq!((r.updated.clone(), read), (vec!["j0009".to_string()], 1));
    assert!(!s.job("j0009").unwrap().unwrap().rt.retired);
    // A new handle (another process) reads the digests from the journal's line heads.
    let other = FileStore::open(&dir).unwrap();
    let (r, read) = reapply(&other, &file(300, Some(7), None), 50);
    assert_eq!((r.unchanged.len(), read), (300, 0));
    // Compacted into a snapshot with `jobs.index`: a handle opened through the index too.
    s.compact_jobs_for_test();
    let third = FileStore::open(&dir).unwrap().with_index_min_bytes(0);
    let (r, read) = reapply(&third, &file(300, Some(7), None), 60);
    assert_eq!((r.unchanged.len(), read), (300, 0));
    let (r, read) = reapply(&third, &file(300, None, None), 70);
    assert_eq!((r.updated.clone(), read), (vec!["j0007".to_string()], 1));
}

#[test]
fn a_store_indexed_with_digests_opens_through_its_index_and_agrees() {
    let dir = TempDir::new("fs-digest-index");
    // 1 100 jobs: the first apply writes the snapshot and its index directly.
    let s = FileStore::open(&dir).unwrap().with_index_min_bytes(0);
    s.apply(&file(1_100, None, None), t(0)).unwrap();
    assert!(dir.join(INDEX_FILE).exists());
    let other = FileStore::open(&dir).unwrap().with_index_min_bytes(0);
    let (r, read) = reapply(&other, &file(1_100, Some(3), None), 10);
    assert_eq!((r.updated.clone(), read), (vec!["j0003".to_string()], 1));
    let report =
        crate::store::check::check_file_store(&dir, std::time::Duration::from_secs(5)).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}

/// Rewrite every job line of `path` without its head's `def` member (as a release before the
/// digest wrote it), its checksum recomputed.
fn strip_digests(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = String::new();
    for line in text.lines() {
        let Some(at) = line.find(",\"def_digest\":\"") else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let stripped = format!("{}{}", &line[..at], &line[at + 32..]);
        let body = stripped.rsplit_once(",\"crc32\":\"").unwrap().0;
        let crc = crate::store::filefmt::crc32(format!("{body}}}").as_bytes());
        out.push_str(&format!("{body},\"crc32\":\"{crc:08x}\"}}\n"));
    }
    std::fs::write(path, out).unwrap();
}

#[test]
fn lines_without_a_digest_are_read_once_then_written_with_one() {
    let dir = TempDir::new("fs-digest-upgrade");
    let s = FileStore::open(&dir).unwrap();
    s.apply(&file(50, None, None), t(0)).unwrap();
    drop(s);
    strip_digests(&dir.join(JOURNAL_FILE));
    let text = std::fs::read_to_string(dir.join(JOURNAL_FILE)).unwrap();
    assert!(!text.contains("def_digest"), "every digest stripped");
    let s = FileStore::open(&dir).unwrap();
    let (r, read) = reapply(&s, &file(50, None, None), 10);
    assert_eq!(
        (r.unchanged.len(), read),
        (50, 50),
        "read, as before the digest"
    );
    assert!(r.updated.is_empty() && r.created.is_empty());
    let (r, read) = reapply(&s, &file(50, None, None), 20);
    assert_eq!(
        (r.unchanged.len(), read),
        (50, 0),
        "rewritten with their digests"
    );
    let report =
        crate::store::check::check_file_store(&dir, std::time::Duration::from_secs(5)).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}

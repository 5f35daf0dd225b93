//! Unit tests of the file store (layout, damage, crash recovery, queries).

use crate::store::{BackendError, OpenError, OperationError};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::handle::*;
use super::layout::*;
use super::record::EntryRef;
use super::segment::contains;
use crate::model::{Status, Trigger};
use crate::store::policy::define::tests_support::def;
use crate::store::*;
use crate::testkit::store::{ClaimAt, FinishClaim};

use crate::store::policy;
use crate::testkit::time::epoch as t;
use crate::testkit::tmp::TempDir;

fn tmp(name: &str) -> TempDir {
    TempDir::new(&format!("fs-{name}"))
}

fn jobs_file(names: &[&str]) -> JobsFile {
    JobsFile {
        settings: Settings::default(),
        jobs: names.iter().map(|n| def(n)).collect(),
    }
}

/// The instant to apply [`jobs_file`]'s `every 60s` jobs at so that their first slot is
/// `first`: one interval before it.
fn stored(first: i64) -> chrono::DateTime<chrono::Utc> {
    t(first - 60)
}

fn claim(s: &FileStore, now: i64, owner: &str, limit: usize) -> ClaimOutcome {
    s.claim_at(t(now), owner, limit)
}

fn finish(s: &FileStore, c: &Claim, status: Status, now: i64) -> CompleteOutcome {
    s.finish_claim(c, "o", status, t(now))
}

#[test]
fn apply_claim_complete_survive_reopen_and_other_handles_see_changes() {
    let dir = tmp("basic");
    let a = FileStore::open(&dir).unwrap();
    let b = FileStore::open(&dir).unwrap();
    let rep = a.apply(&jobs_file(&["x", "y"]), stored(1000)).unwrap();
    assert_eq!(rep.created, vec!["x", "y"]);
    assert_eq!(b.jobs().unwrap().len(), 2);
    let got = claim(&b, 1000, "b", 10);
    assert_eq!(got.claims.len(), 2);
    assert!(
        claim(&a, 1000, "a", 10).claims.is_empty(),
        "already claimed"
    );
    let tok = a.change_token().unwrap();
    finish(&a, &got.claims[0], Status::Succeeded, 1001);
    assert_ne!(tok, a.change_token().unwrap());
    drop((a, b));
    let c = FileStore::open(&dir).unwrap();
    let x = c.job("x").unwrap().unwrap();
    assert_eq!(x.rt.runs, 1);
    assert!(x.rt.lease.is_none());
    assert!(c.job("y").unwrap().unwrap().rt.lease.is_some());
    let h = c
        .history(&HistoryQuery {
            limit: 10,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].job, "x");
    let rep = c.apply(&jobs_file(&["x"]), stored(1002)).unwrap();
    assert_eq!(rep.unchanged, vec!["x"]);
    assert_eq!(rep.retired, vec!["y"]);
}

#[test]
fn journal_compaction_keeps_state_and_other_handles_reload() {
    let dir = tmp("compact");
    let a = FileStore::open(&dir).unwrap();
    let b = FileStore::open(&dir).unwrap();
    a.apply(&jobs_file(&["j"]), stored(0)).unwrap();
    // Enough renewals to force several compactions (journal > 2x snapshot + 1 MiB).
    let c = claim(&a, 0, "a", 1).claims.remove(0);
    for i in 0..2000 {
        a.renew("j", c.run_id, t(i)).unwrap();
    }
    let snap = std::fs::read_to_string(dir.join(SNAPSHOT_FILE)).unwrap();
    assert!(snap.starts_with("{\"cronsole\":\"snapshot\""));
    let lease = b.job("j").unwrap().unwrap().rt.lease.unwrap();
    assert_eq!(lease.last_renewed, t(1999));
    drop((a, b));
    let r = FileStore::open(&dir).unwrap();
    assert_eq!(
        r.job("j").unwrap().unwrap().rt.lease.unwrap().last_renewed,
        t(1999)
    );
}

/// A batch of renewals is one journal append: every lease it renewed is durable and seen by
/// another handle, a renewal of a run that no longer holds its job answers `Lost`, and an
/// unknown job fails alone.
#[test]
fn a_batch_of_renewals_is_one_journal_append_and_survives_reopen() {
    let dir = tmp("renew-many");
    let a = FileStore::open(&dir).unwrap();
    let b = FileStore::open(&dir).unwrap();
    a.apply(&jobs_file(&["x", "y", "z"]), stored(1000)).unwrap();
    let got = claim(&a, 1000, "a", 10).claims;
    assert_eq!(got.len(), 3);
    let journal_lines = || {
        std::fs::read_to_string(dir.join(JOURNAL_FILE))
            .unwrap()
            .lines()
            .count()
    };
    let before = journal_lines();
    let mut rs: Vec<Renewal> = got
        .iter()
        .map(|c| Renewal {
            job: c.job.def.name.clone(),
            run_id: c.run_id,
            now: t(1010),
        })
        .collect();
    rs.push(Renewal {
        job: "x".into(),
        run_id: uuid::Uuid::new_v4(),
        now: t(1010),
    });
    rs.push(Renewal {
        job: "nope".into(),
        run_id: got[0].run_id,
        now: t(1010),
    });
    let answers = a.renew_many(&rs);
    assert_eq!(answers.len(), 5);
    for r in &answers[..3] {
        assert!(
            matches!(r, Ok(RenewOutcome::Renewed { lease_until }) if *lease_until > t(1010)),
            "{answers:?}"
        );
    }
    assert!(matches!(answers[3], Ok(RenewOutcome::Lost)), "{answers:?}");
    assert!(answers[4].is_err(), "{answers:?}");
    // One appended piece for the three records (a journal line each, written together).
    assert_eq!(journal_lines(), before + 3);
    for c in &got {
        let lease = b.job(&c.job.def.name).unwrap().unwrap().rt.lease.unwrap();
        assert_eq!(lease.last_renewed, t(1010));
    }
    drop((a, b));
    let r = FileStore::open(&dir).unwrap();
    for c in &got {
        let lease = r.job(&c.job.def.name).unwrap().unwrap().rt.lease.unwrap();
        assert_eq!(lease.last_renewed, t(1010), "{}", c.job.def.name);
    }
}

/// Every byte of every store file (the lock file aside).
fn dir_bytes(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap().map(|e| e.unwrap()) {
        let name = e.file_name().to_string_lossy().into_owned();
        if name == LOCK_FILE {
            continue;
        }
        if e.file_type().unwrap().is_dir() {
            for (k, v) in dir_bytes(&e.path()) {
                out.insert(format!("{name}/{k}"), v);
            }
        } else {
            out.insert(name, std::fs::read(e.path()).unwrap());
        }
    }
    out
}

/// A store with two jobs, a finished run and a compacted + appended journal.
fn used_store(name: &str) -> TempDir {
    let dir = tmp(name);
    let s = FileStore::open(&dir).unwrap();
    s.apply(&jobs_file(&["a", "b"]), stored(0)).unwrap();
    s.compact_jobs_for_test();
    let c = claim(&s, 0, "o", 2).claims.remove(0);
    finish(&s, &c, Status::Succeeded, 1);
    dir
}

/// Corruption named on `file`, exit 2, and not one byte of the store changed, through both
/// a read-only open and a writer open.
fn assert_refused(dir: &Path, file: &str, needle: &str) {
    let before = dir_bytes(dir);
    for writer in [false, true] {
        let r = if writer {
            FileStore::open(dir).and_then(|s| s.jobs())
        } else {
            FileStore::open_existing(dir).and_then(|s| s.jobs())
        };
        let err = r.expect_err("a damaged store must be refused");
        match &err {
            StoreError::Open(OpenError::Corrupt { file: f, .. }) => {
                assert!(f.ends_with(file), "names {file}: {err}")
            }
            e => panic!("expected corruption of {file}, got {e:?}"),
        }
        assert!(err.to_string().contains(needle), "{needle}: {err}");
        assert_eq!(err.exit_code(), 2);
        assert_eq!(
            dir_bytes(dir),
            before,
            "every byte unchanged (writer: {writer})"
        );
    }
}

/// A deleted journal is corruption, never a silent fall back to the snapshot.
#[test]
fn a_deleted_or_empty_journal_is_corruption_not_a_fallback() {
    let dir = used_store("no-journal");
    std::fs::remove_file(dir.join(JOURNAL_FILE)).unwrap();
    assert_refused(&dir, JOURNAL_FILE, "missing");
    let dir = used_store("empty-journal");
    std::fs::write(dir.join(JOURNAL_FILE), b"").unwrap();
    assert_refused(&dir, JOURNAL_FILE, "empty");
}

/// A deleted settings.json is corruption: it must not silently remove the budget.
#[test]
fn a_deleted_settings_file_is_corruption_not_a_budget_reset() {
    let dir = used_store("no-settings");
    std::fs::remove_file(dir.join(SETTINGS_FILE)).unwrap();
    assert_refused(&dir, SETTINGS_FILE, "budget");
}

/// One flipped bit in settings.json could turn a $2.50 budget into $3.50 and
/// every command took it. The file now carries the settings' CRC-32: a changed value is
/// corruption (exit 2, nothing written), and `check` reports it.
#[test]
fn an_edited_settings_value_is_corruption() {
    let dir = used_store("settings-flip");
    let path = dir.join(SETTINGS_FILE);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"crc32\""), "{text}");
    assert!(crate::store::filefmt::verify_settings(text.as_bytes()).is_ok());
    // A valid settings value changed by hand (the checksum left as it was).
    std::fs::write(
        &path,
        text.replace("\"base_dir\": null", "\"base_dir\": \"/tmp\""),
    )
    .unwrap();
    assert_refused(&dir, SETTINGS_FILE, "checksum");
    let r = crate::store::check::check_file_store(&dir, std::time::Duration::from_secs(5)).unwrap();
    assert!(
        r.problems
            .iter()
            .any(|p| p.to_string().contains("settings checksum mismatch")),
        "{r:?}"
    );
    // A flipped bit in the checksum's own key cannot drop the checksum: unknown members are
    // refused.
    let dir = used_store("settings-key-flip");
    let path = dir.join(SETTINGS_FILE);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("\"crc32\"", "\"crc42\"")).unwrap();
    assert_refused(&dir, SETTINGS_FILE, "crc42");
}

#[test]
fn deleted_snapshot_or_history_is_corruption() {
    let dir = used_store("no-snapshot");
    std::fs::remove_file(dir.join(SNAPSHOT_FILE)).unwrap();
    assert_refused(&dir, SNAPSHOT_FILE, "missing");
    let dir = used_store("no-history");
    std::fs::remove_file(dir.join(HISTORY_FILE)).unwrap();
    assert_refused(&dir, HISTORY_FILE, "missing");
}

/// An edited generation is corruption: a read-only `jobs` must not discard the journal.
#[test]
fn an_edited_journal_generation_is_corruption_and_nothing_is_discarded() {
    for generation in [0u64, 7] {
        let dir = used_store(&format!("edited-gen-{generation}"));
        let jpath = dir.join(JOURNAL_FILE);
        let j = std::fs::read_to_string(&jpath).unwrap();
        let edited = j.replacen(
            "\"generation\":1",
            &format!("\"generation\":{generation}"),
            1,
        );
        assert_ne!(edited, j);
        std::fs::write(&jpath, edited).unwrap();
        assert_refused(&dir, JOURNAL_FILE, "does not match the snapshot");
    }
}

/// A flipped byte in a job line of the snapshot or the journal kept the line
/// valid JSON and was read as an (older) record; only the line's checksum sees it. Refused at
/// its line by readers and writers, nothing changed.
#[test]
fn a_flipped_byte_in_a_job_line_is_corruption_at_its_line() {
    for f in [SNAPSHOT_FILE, JOURNAL_FILE] {
        let dir = used_store("job-flip");
        let p = dir.join(f);
        let mut b = std::fs::read(&p).unwrap();
        let nl = b.iter().position(|c| *c == b'\n').unwrap();
        assert!(b.len() > nl + 1, "{f} holds a job line");
        let key = b"\"max_retries\":";
        let at = nl + b[nl..].windows(key.len()).position(|w| w == key).unwrap() + key.len();
        b[at] ^= 0x01;
        std::fs::write(&p, &b).unwrap();
        let rep = crate::store::check::check_file_store(&dir, Duration::from_secs(5)).unwrap();
        assert!(
            rep.problems
                .iter()
                .any(|p| p.location.ends_with(f) && p.line == 2 && p.what.contains("checksum")),
            "{:?}",
            rep.problems
        );
        assert_refused(&dir, f, "checksum mismatch");
    }
}

/// A flipped job line appended by another process is caught by the tail reader of an open
/// handle too, not only by a full load.
#[test]
fn a_flipped_job_line_in_the_journal_tail_is_caught_by_an_open_handle() {
    let dir = used_store("job-flip-tail");
    let reader = FileStore::open(&dir).unwrap();
    reader.jobs().unwrap();
    let jpath = dir.join(JOURNAL_FILE);
    let lines_before = std::fs::read(&jpath)
        .unwrap()
        .iter()
        .filter(|c| **c == b'\n')
        .count();
    {
        let w = FileStore::open(&dir).unwrap();
        let c = claim(&w, 60, "o", 2).claims.remove(0);
        finish(&w, &c, Status::Succeeded, 61);
    }
    let mut b = std::fs::read(&jpath).unwrap();
    let start = b[..b.len() - 1].iter().rposition(|c| *c == b'\n').unwrap() + 1;
    let key = b"\"max_retries\":";
    let at = start
        + b[start..]
            .windows(key.len())
            .position(|w| w == key)
            .unwrap()
        + key.len();
    b[at] ^= 0x01;
    std::fs::write(&jpath, &b).unwrap();
    let err = reader.jobs().expect_err("the tail reader checks the line");
    let text = err.to_string();
    assert!(text.contains("checksum mismatch"), "{text}");
    let want_line = b.iter().filter(|c| **c == b'\n').count();
    assert!(want_line > lines_before);
    assert!(
        text.contains(&format!("jobs.journal:{want_line}:")),
        "{text}"
    );
}

/// A journal copied in from another store is refused, never merged.
#[test]
fn a_file_from_another_store_is_refused() {
    let other = used_store("other");
    for f in [JOURNAL_FILE, SETTINGS_FILE, HISTORY_FILE, SNAPSHOT_FILE] {
        let dir = used_store("foreign");
        std::fs::copy(other.join(f), dir.join(f)).unwrap();
        assert_refused(&dir, f, "another store");
    }
}

/// A flipped byte mid-history is seen by every command (not only `history`; `run` must not go
/// on appending after it). The flip keeps the line valid JSON: only the checksum sees it.
#[test]
fn a_flipped_byte_in_history_is_found_before_anything_is_appended() {
    let dir = used_store("flip");
    {
        let s = FileStore::open(&dir).unwrap();
        for i in 0..3 {
            let c = claim(&s, 120 + i * 60, "o", 2).claims.remove(0);
            finish(&s, &c, Status::Succeeded, 121 + i * 60);
        }
    }
    let hpath = dir.join(HISTORY_FILE);
    let mut h = std::fs::read(&hpath).unwrap();
    // The second row's duration (mid-history): 0 -> 1 is still a valid row.
    let key = b"\"duration_ms\":";
    let at = h
        .windows(key.len())
        .enumerate()
        .filter(|(_, w)| *w == key)
        .nth(1)
        .unwrap()
        .0
        + key.len();
    h[at] ^= 0x01;
    let line = &h[..at].iter().filter(|b| **b == b'\n').count() + 1;
    assert_eq!(line, 3, "a row in the middle");
    std::fs::write(&hpath, &h).unwrap();
    assert_refused(&dir, HISTORY_FILE, "checksum");
}

#[test]
fn a_crash_between_snapshot_and_journal_is_recognised_and_only_a_writer_replaces_the_journal() {
    let dir = tmp("stale");
    let a = FileStore::open(&dir).unwrap();
    a.apply(&jobs_file(&["j"]), t(0)).unwrap();
    let jpath = dir.join(JOURNAL_FILE);
    let old = std::fs::read(&jpath).unwrap();
    a.compact_jobs_for_test();
    drop(a);
    // The crash: the new snapshot landed, the old journal was not yet replaced.
    std::fs::write(&jpath, &old).unwrap();
    let before = dir_bytes(&dir);
    let r = FileStore::open_existing(&dir).unwrap();
    let names: Vec<String> = r.jobs().unwrap().into_iter().map(|j| j.def.name).collect();
    assert_eq!(names, vec!["j"]);
    assert_eq!(dir_bytes(&dir), before, "a reader writes nothing");
    let w = FileStore::open(&dir).unwrap();
    w.set_paused("j", true, t(1)).unwrap();
    assert_ne!(
        std::fs::read(&jpath).unwrap(),
        old,
        "the writer replaced it"
    );
    let again = FileStore::open_existing(&dir).unwrap();
    assert!(again.job("j").unwrap().unwrap().rt.paused);
}

/// Readers leave a torn tail in place; the next writer cuts it before appending.
#[test]
fn torn_final_lines_are_cut_by_the_next_writer_and_complete_garbage_is_corruption() {
    let dir = tmp("torn");
    let a = FileStore::open(&dir).unwrap();
    a.apply(&jobs_file(&["j"]), stored(0)).unwrap();
    let c = claim(&a, 0, "a", 1).claims.remove(0);
    finish(&a, &c, Status::Succeeded, 1);
    drop(a);
    let hpath = dir.join(HISTORY_FILE);
    let before = std::fs::read(&hpath).unwrap();
    let mut torn = before.clone();
    torn.extend_from_slice(b"{\"run_id\":\"abc");
    std::fs::write(&hpath, &torn).unwrap();
    let jpath = dir.join(JOURNAL_FILE);
    let mut j = std::fs::read(&jpath).unwrap();
    j.extend_from_slice(b"{\"job\":{\"def");
    std::fs::write(&jpath, &j).unwrap();
    let untouched = dir_bytes(&dir);
    let s = FileStore::open(&dir).unwrap();
    assert_eq!(s.history(&HistoryQuery::default()).unwrap().len(), 1);
    assert_eq!(s.job("j").unwrap().unwrap().rt.runs, 1);
    assert_eq!(
        dir_bytes(&dir),
        untouched,
        "opening and reading write nothing"
    );
    let c = claim(&s, 60, "a", 1).claims.remove(0);
    finish(&s, &c, Status::Succeeded, 61);
    let after = std::fs::read(&hpath).unwrap();
    assert!(after.starts_with(&before), "acknowledged rows kept");
    assert!(!contains(&after, b"\"abc"), "torn row cut");
    assert_eq!(s.history(&HistoryQuery::default()).unwrap().len(), 2);
    drop(s);
    let s = FileStore::open(&dir).unwrap();
    assert_eq!(s.job("j").unwrap().unwrap().rt.runs, 2);
    drop(s);

    let mut bad = std::fs::read(&hpath).unwrap();
    bad.extend_from_slice(b"{\"not\": a row}\n");
    std::fs::write(&hpath, &bad).unwrap();
    let err = FileStore::open(&dir).err().unwrap();
    match &err {
        StoreError::Open(OpenError::Corrupt { file, line, .. }) => {
            assert!(file.ends_with(HISTORY_FILE));
            assert_eq!(*line, 4, "header, two rows, then the bad line");
        }
        e => panic!("unexpected {e}"),
    }
    assert!(err.is_bad_input());
    assert_eq!(std::fs::read(&hpath).unwrap(), bad, "bytes untouched");
}

/// A previous-release store is migrated by a writer, refused (with how to
/// upgrade) by a reader, and nothing in it is lost.
#[test]
fn a_format_1_store_is_migrated_by_a_writer_and_refused_by_a_reader() {
    let dir = tmp("v1");
    let rec = policy::define::new_record(def("old"), t(0)).unwrap();
    let row = HistoryRow::new(
        "old",
        Status::Succeeded,
        Trigger::Schedule,
        Some(t(0)),
        "o",
        t(1),
    );
    let entry = serde_json::to_string(&EntryRef {
        at: None,
        job: &rec,
        mark: None,
    })
    .unwrap();
    std::fs::write(dir.join(VERSION_FILE), "cronsole-file-store 1\n").unwrap();
    std::fs::write(
        dir.join(SNAPSHOT_FILE),
        "{\"cronsole\":\"snapshot\",\"generation\":3}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join(JOURNAL_FILE),
        format!("{{\"cronsole\":\"journal\",\"generation\":3}}\n{entry}\n"),
    )
    .unwrap();
    let settings = Settings {
        base_dir: Some("/srv/jobs".into()),
        ..Settings::default()
    };
    std::fs::write(
        dir.join(SETTINGS_FILE),
        serde_json::to_vec(&settings).unwrap(),
    )
    .unwrap();
    std::fs::write(
        dir.join(HISTORY_FILE),
        format!("{}\n", serde_json::to_string(&row).unwrap()),
    )
    .unwrap();
    let before = dir_bytes(&dir);
    let err = FileStore::open_existing(&dir).err().unwrap();
    assert!(
        matches!(err, StoreError::Open(OpenError::Version { .. })),
        "{err}"
    );
    assert!(err.to_string().contains("cronsole apply"), "{err}");
    assert_eq!(dir_bytes(&dir), before, "the reader wrote nothing");
    let s = FileStore::open(&dir).unwrap();
    assert_eq!(s.job("old").unwrap().unwrap().def.name, "old");
    assert_eq!(s.settings().unwrap().base_dir.as_deref(), Some("/srv/jobs"));
    let h = s.history(&HistoryQuery::default()).unwrap();
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].run_id, row.run_id);
    drop(s);
    let v = std::fs::read_to_string(dir.join(VERSION_FILE)).unwrap();
    assert!(v.starts_with("cronsole-file-store 3\nstore "), "{v}");
    FileStore::open_existing(&dir).unwrap();
}

#[test]
fn a_journal_newer_than_the_snapshot_is_corruption_not_a_reset() {
    let dir = used_store("newer-journal");
    let spath = dir.join(SNAPSHOT_FILE);
    let snap = std::fs::read_to_string(&spath).unwrap();
    let older = snap.replacen("\"generation\":1", "\"generation\":0", 1);
    assert_ne!(older, snap);
    std::fs::write(&spath, older).unwrap();
    assert_refused(&dir, JOURNAL_FILE, "missing or replaced");
}

#[test]
fn absurd_lease_seconds_are_refused_by_apply_and_the_largest_allowed_lease_works() {
    // The store refuses, rather than accepting (and clamping), a
    // 1e15 s lease; apply now refuses any number outside the bounds table, storing nothing.
    let dir = tmp("huge-lease");
    let s = FileStore::open(&dir).unwrap();
    let mut file = jobs_file(&["a"]);
    file.jobs[0].lease_seconds = 1e15;
    let e = s.apply(&file, stored(0)).unwrap_err();
    assert!(
        matches!(e, StoreError::Operation(OperationError::OutOfBounds(_))),
        "{e:?}"
    );
    assert_eq!(e.exit_code(), 2);
    assert!(e.to_string().contains("lease_seconds"), "{e}");
    assert!(s.jobs().unwrap().is_empty(), "nothing stored");
    file.jobs[0].lease_seconds = 7.0 * 86_400.0;
    s.apply(&file, stored(0)).unwrap();
    let c = claim(&s, 0, "o", 1).claims.remove(0);
    assert!(c.lease_until > t(0));
    assert!(matches!(
        s.renew("a", c.run_id, t(1)).unwrap(),
        RenewOutcome::Renewed { .. }
    ));
}

#[test]
fn another_handles_changes_replace_wake_ups_instead_of_leaving_stale_ones() {
    let dir = tmp("wake-index");
    let a = FileStore::open(&dir).unwrap();
    let b = FileStore::open(&dir).unwrap();
    a.apply(&jobs_file(&["j"]), stored(0)).unwrap();
    assert_eq!(b.next_wakeup(t(0)).unwrap(), Some(t(0)));
    // `a` claims slot 0 and completes it: the next slot is 60. `b` reads that from the
    // journal tail and must no longer report the old, past wake-up.
    let c = claim(&a, 0, "a", 1).claims.remove(0);
    assert!(
        b.next_wakeup(t(1)).unwrap() > Some(t(1)),
        "leased: wakes at lease expiry"
    );
    finish(&a, &c, Status::Succeeded, 1);
    assert_eq!(b.next_wakeup(t(2)).unwrap(), Some(t(60)));
    assert!(claim(&b, 2, "b", 5).claims.is_empty());
}

#[test]
fn complete_many_commits_a_batch_in_order_with_per_item_outcomes() {
    let dir = tmp("batch");
    let s = FileStore::open(&dir).unwrap();
    s.apply(&jobs_file(&["a", "b"]), stored(0)).unwrap();
    let claims = claim(&s, 0, "o", 5).claims;
    assert_eq!(claims.len(), 2);
    let mk = |c: &Claim, run_id: Uuid, st: Status| Completion {
        job: c.job.def.name.clone(),
        run_id,
        owner: "o".into(),
        now: t(1),
        row: HistoryRow::new(&c.job.def.name, st, c.trigger, c.slot, "o", t(1)),
        state: None,
        hold_until: None,
    };
    let batch = vec![
        mk(&claims[0], claims[0].run_id, Status::Succeeded),
        mk(&claims[1], Uuid::new_v4(), Status::Failed), // not the lease holder: stale
        mk(&claims[1], claims[1].run_id, Status::Failed),
        Completion {
            job: "nosuch".into(),
            ..mk(&claims[0], claims[0].run_id, Status::Failed)
        },
    ];
    let out = s.complete_many(batch);
    assert_eq!(out.len(), 4);
    assert!(!out[0].as_ref().unwrap().stale);
    assert!(out[1].as_ref().unwrap().stale);
    assert!(!out[2].as_ref().unwrap().stale);
    assert!(matches!(
        out[3],
        Err(StoreError::Operation(OperationError::NoSuchJob(_)))
    ));
    // Both leases released and all three rows durable, as a fresh handle sees them.
    let fresh = FileStore::open(&dir).unwrap();
    assert!(fresh.jobs().unwrap().iter().all(|j| j.rt.lease.is_none()));
    let rows = fresh
        .history(&HistoryQuery {
            limit: 10,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(rows.iter().filter(|r| r.stale_lease).count(), 1);
}

#[test]
fn completion_after_takeover_is_stale_and_leaves_the_job_alone() {
    let dir = tmp("fence");
    let s = FileStore::open(&dir).unwrap();
    s.apply(&jobs_file(&["j"]), stored(0)).unwrap();
    let first = claim(&s, 0, "a", 1).claims.remove(0);
    // Lease (30 s) expires; another owner recovers at 31 and the job waits for slot 60.
    let out = claim(&s, 31, "b", 1);
    assert_eq!(out.rows.len(), 1);
    assert_eq!(out.rows[0].status, Status::Abandoned);
    assert_eq!(out.rows[0].run_id, first.run_id);
    let second = claim(&s, 60, "b", 1).claims.remove(0);
    let late = finish(&s, &first, Status::Succeeded, 61);
    assert!(late.stale && late.rows[0].stale_lease);
    let j = s.job("j").unwrap().unwrap();
    assert_eq!(j.rt.lease.as_ref().unwrap().run_id, second.run_id);
    assert_eq!(
        s.renew("j", first.run_id, t(62)).unwrap(),
        RenewOutcome::Lost
    );
}

#[test]
fn recovery_does_not_write_a_second_row_when_the_completion_row_landed() {
    let dir = tmp("dedupe");
    let s = FileStore::open(&dir).unwrap();
    let mut d = def("once");
    d.max_runs = Some(1);
    s.apply(
        &JobsFile {
            settings: Settings::default(),
            jobs: vec![d],
        },
        stored(0),
    )
    .unwrap();
    let c = claim(&s, 0, "a", 1).claims.remove(0);
    // The process wrote the row, then died before the job record.
    {
        let mut l = s.lock().unwrap();
        let mut row = HistoryRow::new("once", Status::Succeeded, c.trigger, c.slot, "a", t(5));
        row.run_id = c.run_id;
        l.append_history(&[row]).unwrap();
    }
    let out = claim(&s, 100, "b", 1);
    assert!(out.rows.is_empty(), "no abandoned row: {:?}", out.rows);
    assert!(out.claims.is_empty());
    let j = s.job("once").unwrap().unwrap();
    assert!(j.rt.retired, "finished from the row that landed");
    assert_eq!(s.history(&HistoryQuery::default()).unwrap().len(), 1);
}

#[test]
fn trigger_pause_and_unknown_names() {
    let dir = tmp("trig");
    let s = FileStore::open(&dir).unwrap();
    s.apply(&jobs_file(&["j"]), t(0)).unwrap();
    assert!(matches!(
        s.set_paused("nope", true, t(0)),
        Err(StoreError::Operation(OperationError::NoSuchJob(_)))
    ));
    s.set_paused("j", true, t(0)).unwrap();
    assert!(claim(&s, 10, "a", 5).claims.is_empty());
    assert_eq!(
        s.request_trigger("j", t(10)).unwrap(),
        TriggerOutcome::Queued
    );
    assert_eq!(
        s.request_trigger("j", t(10)).unwrap(),
        TriggerOutcome::AlreadyQueued
    );
    let c = claim(&s, 11, "a", 5).claims.remove(0);
    assert_eq!((c.trigger, c.slot), (Trigger::Manual, None));
    assert_eq!(
        s.request_trigger("j", t(12)).unwrap(),
        TriggerOutcome::AlreadyRunning
    );
}

#[test]
fn history_filters_newest_first_and_idle_claim_does_nothing() {
    let dir = tmp("hist");
    let s = FileStore::open(&dir).unwrap();
    s.apply(&jobs_file(&["a", "b"]), t(0)).unwrap();
    for k in 0..50 {
        for c in claim(&s, k * 60, "o", 5).claims {
            let st = if k % 2 == 0 {
                Status::Succeeded
            } else {
                Status::Failed
            };
            finish(&s, &c, st, k * 60 + 1);
        }
    }
    let q = HistoryQuery {
        job: Some("a".into()),
        status: Some(Status::Failed),
        limit: 3,
        ..Default::default()
    };
    let h = s.history(&q).unwrap();
    assert_eq!(h.len(), 3);
    assert!(h.iter().all(|r| r.job == "a" && r.status == Status::Failed));
    assert!(h[0].finished_at > h[1].finished_at);
    let since = s
        .history(&HistoryQuery {
            since: Some(t(49 * 60)),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(since.len(), 2);
    let tok = s.change_token().unwrap();
    assert!(claim(&s, 49 * 60 + 30, "o", 5).claims.is_empty());
    assert_eq!(tok, s.change_token().unwrap(), "idle claim writes nothing");
    assert_eq!(s.next_wakeup(t(0)).unwrap(), Some(t(50 * 60)));
    let spend = s.spend("a", t(0)).unwrap();
    assert_eq!(spend, SpendNow::default());
}

#[test]
fn retention_keeps_newest_rows_per_job() {
    let dir = tmp("ret");
    let s = FileStore::open(&dir).unwrap();
    s.apply(&jobs_file(&["a", "b"]), stored(0)).unwrap();
    for k in 0..20 {
        for c in claim(&s, k * 60, "o", 5).claims {
            finish(&s, &c, Status::Succeeded, k * 60 + 1);
        }
    }
    assert_eq!(s.compact_history(5, None, t(2000)).unwrap(), 30);
    let h = s
        .history(&HistoryQuery {
            job: Some("a".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(h.len(), 5);
    assert_eq!(h[0].slot, Some(t(19 * 60)));
    let dropped = s
        .compact_history(100, Some(chrono::Duration::seconds(120)), t(19 * 60 + 1))
        .unwrap();
    assert_eq!(
        dropped, 4,
        "rows finished before 1021 (slots 15, 16) of both jobs"
    );
}

#[test]
fn own_in_flight_run_is_never_reoffered_or_recovered_by_its_owner() {
    let dir = tmp("inflight");
    let s = FileStore::open(&dir).unwrap();
    s.apply(&jobs_file(&["j"]), stored(0)).unwrap();
    let c = claim(&s, 0, "a", 1).claims.remove(0);
    assert_eq!(
        s.next_wakeup(t(0)).unwrap(),
        Some(t(30)),
        "the lease expiry"
    );
    let mine = vec!["j".to_string()];
    let out = s
        .claim_due(&ClaimRequest {
            now: t(100),
            owner: "a",
            limit: 5,
            in_flight: &mine,
            clock_stepped: None,
            max_offset: None,
        })
        .unwrap();
    assert!(out.claims.is_empty() && out.rows.is_empty());
    assert_eq!(
        s.job("j").unwrap().unwrap().rt.lease.unwrap().run_id,
        c.run_id
    );
    // Its late completion still holds the lease: not stale; slots 60 passed → overlap row.
    let done = finish(&s, &c, Status::Succeeded, 101);
    assert!(!done.stale);
    assert_eq!(done.rows.len(), 2);
    assert_eq!(done.rows[1].reason.as_deref(), Some("overlap"));
    assert_eq!(s.job("j").unwrap().unwrap().rt.next_slot, Some(t(120)));
}

#[test]
fn a_held_lock_gives_a_typed_retryable_error_after_the_bound_not_a_hang() {
    let dir = tmp("lockwait");
    let a = FileStore::open(&dir).unwrap();
    let b = FileStore::open(&dir)
        .unwrap()
        .with_lock_wait(Duration::from_millis(30));
    let held = a.lock().unwrap();
    let err = b.jobs().unwrap_err();
    assert!(
        matches!(err, StoreError::Backend(BackendError::LockTimeout { .. })),
        "got {err:?}"
    );
    assert!(!err.is_bad_input(), "a held lock is a runtime failure");
    assert!(err.to_string().contains("lock"), "{err}");
    drop(held);
    assert!(b.jobs().unwrap().is_empty());
}

/// A wait that runs out names who holds the lock: a live, running holder is called running,
/// with its pid, not a stopped owner; an `apply` that holds it says since when.
#[test]
fn a_lock_wait_that_runs_out_names_a_running_holder() {
    let dir = tmp("lockholder");
    let a = FileStore::open(&dir).unwrap();
    let b = FileStore::open(&dir)
        .unwrap()
        .with_lock_wait(Duration::from_millis(30));
    let me = format!("(pid {})", std::process::id());
    let held = a.lock().unwrap();
    let err = b.jobs().unwrap_err().to_string();
    drop(held);
    assert!(err.contains(&me), "{err}");
    assert!(
        err.contains("a running process, not a stopped one"),
        "{err}"
    );
    assert!(!err.contains("SIGSTOP"), "{err}");
    // An apply notes itself while it holds the lock (as here), and empties the lock file when
    // done; it reads its file with the lock free.
    let held = a.lock().unwrap();
    let note = super::holder::Note::write(&*a.lock);
    let during = b.jobs().unwrap_err().to_string();
    drop((note, held));
    assert!(during.contains(&format!("{me} for 0.")), "{during}");
    assert!(during.contains("a running process"), "{during}");
    let settings = crate::model::Settings::default();
    let mut reading = None;
    a.apply_each(
        &settings,
        &mut |_sink| {
            reading = Some(b.jobs().map(|j| j.len()));
            Ok(())
        },
        t(0),
    )
    .unwrap();
    assert_eq!(reading.unwrap().unwrap(), 0);
    assert_eq!(std::fs::read(dir.join(LOCK_FILE)).unwrap(), b"");
}

/// A holder that wrote no note (an outside `flock`) is named from the kernel's table of locks,
/// not from the note a killed `apply` left, and a stopped one is called stopped.
#[test]
fn a_stopped_outside_holder_is_named_by_the_kernel_not_by_a_stale_note() {
    let dir = tmp("lockstopped");
    let b = FileStore::open(&dir)
        .unwrap()
        .with_lock_wait(Duration::from_millis(30));
    let io = crate::store::io::RealIo;
    let lock = crate::store::io::StoreIo::open(
        &io,
        &dir.join(LOCK_FILE),
        crate::store::io::OpenMode::LockFile,
    )
    .unwrap();
    std::mem::forget(super::holder::Note::write(&*lock)); // as a killed apply leaves it
    let mut child = std::process::Command::new("flock")
        .arg("--close")
        .arg(dir.join(LOCK_FILE))
        .args(["sleep", "30"])
        .spawn()
        .unwrap();
    let pid = child.id();
    let pid_i = i32::try_from(pid).unwrap();
    // Wait until the outside process holds the lock, then stop it.
    let held = (0..500).find_map(|_| {
        std::thread::sleep(Duration::from_millis(10));
        b.jobs().err().map(|e| e.to_string())
    });
    crate::proc::sys::kill(pid_i, libc::SIGSTOP);
    let stopped = (0..200).find_map(|_| {
        std::thread::sleep(Duration::from_millis(10));
        let e = b.jobs().unwrap_err().to_string();
        e.contains("which is stopped").then_some(e)
    });
    crate::proc::sys::kill(pid_i, libc::SIGKILL);
    let _ = child.wait();
    let held = held.expect("the outside process took the lock");
    assert!(held.contains(&format!("(pid {pid})")), "{held}");
    let e = stopped.expect("the stopped holder is called stopped");
    assert!(e.contains("`flock "), "{e}");
    assert!(!e.contains(&format!("(pid {})", std::process::id())), "{e}");
}

#[test]
fn foreign_version_is_refused() {
    let dir = tmp("ver");
    std::fs::write(dir.join(VERSION_FILE), "something else 9\n").unwrap();
    assert!(matches!(
        FileStore::open(&dir),
        Err(StoreError::Open(OpenError::Version { .. }))
    ));
}

/// `overlap: allow`: a run's row that landed before its owner died is found by recovery even
/// when another run of the job was claimed after it (the claim mark covers every live run).
#[test]
fn recovery_finds_a_landed_row_of_a_concurrent_run() {
    let dir = tmp("dedupe-allow");
    let s = FileStore::open(&dir).unwrap();
    let mut d = def("j");
    d.schedule = crate::schedule::ScheduleSpec::Every { every_seconds: 10 };
    d.lease_seconds = 30.0;
    d.overlap = crate::model::Overlap::Allow {
        max_concurrent_runs: 2,
    };
    s.apply(
        &JobsFile {
            settings: Settings::default(),
            jobs: vec![d],
        },
        stored(0),
    )
    .unwrap();
    let a = claim(&s, 0, "a", 1).claims.remove(0);
    // Run A's row lands, then its owner dies before the job record.
    {
        let mut l = s.lock().unwrap();
        let mut row = HistoryRow::new("j", Status::Succeeded, a.trigger, a.slot, "a", t(5));
        row.run_id = a.run_id;
        l.append_history(&[row]).unwrap();
    }
    let b = claim(&s, 10, "b", 1).claims.remove(0);
    assert_ne!(a.run_id, b.run_id);
    let out = claim(&s, 31, "c", 0);
    assert!(
        out.rows.iter().all(|r| r.status != Status::Abandoned),
        "finished from the landed row: {:?}",
        out.rows
    );
    let j = s.job("j").unwrap().unwrap();
    assert_eq!(j.rt.live_runs(), 1);
    assert!(j.rt.lease_of(b.run_id).is_some());
    assert_eq!(j.rt.runs, 1);
}

/// A store whose history spans several sealed segments: `runs` runs of jobs a and b, with
/// segments sealed at 2 KiB.
fn segmented(name: &str, runs: i64) -> (TempDir, FileStore) {
    let dir = tmp(name);
    let s = FileStore::open(&dir).unwrap().with_segment_bytes(2048);
    s.apply(&jobs_file(&["a", "b"]), stored(0)).unwrap();
    for k in 0..runs {
        for c in claim(&s, k * 60, "o", 5).claims {
            finish(&s, &c, Status::Succeeded, k * 60 + 1);
        }
    }
    (dir, s)
}

fn all_rows(s: &FileStore) -> Vec<HistoryRow> {
    s.history(&HistoryQuery::default()).unwrap()
}

/// History is sealed into segments; every query, page token and
/// offset reads across them, in order, and `check` verifies every segment.
#[test]
fn history_is_sealed_into_segments_and_pages_read_across_them() {
    let (dir, s) = segmented("seg", 40);
    let sealed = std::fs::read_dir(dir.join("history")).unwrap().count();
    assert!(sealed >= 5, "several sealed segments: {sealed}");
    assert!(
        std::fs::metadata(dir.join(HISTORY_FILE)).unwrap().len() <= 2048 + 1024,
        "the open segment stays near the bound"
    );
    let all = all_rows(&s);
    assert_eq!(all.len(), 80);
    for w in all.windows(2) {
        assert!(w[0].finished_at >= w[1].finished_at, "newest first");
    }
    // Token pages and offset pages give the same rows, in order, with no gap or repeat.
    let mut paged = Vec::new();
    let mut tok = None;
    loop {
        let p = s
            .history_page(&HistoryQuery {
                limit: 7,
                before: tok.clone(),
                ..Default::default()
            })
            .unwrap();
        paged.extend(p.rows);
        match p.next {
            Some(t) => tok = Some(t),
            None => break,
        }
    }
    let ids = |v: &[HistoryRow]| v.iter().map(|r| r.run_id).collect::<Vec<_>>();
    assert_eq!(ids(&paged), ids(&all));
    for off in [0, 13, 40, 79, 80] {
        let p = s
            .history(&HistoryQuery {
                limit: 5,
                offset: off,
                ..Default::default()
            })
            .unwrap();
        assert_eq!(
            ids(&p),
            ids(&all[off.min(80)..(off + 5).min(80)]),
            "offset {off}"
        );
    }
    // Filtered token paging.
    let only_a: Vec<_> = all.iter().filter(|r| r.job == "a").cloned().collect();
    let p1 = s
        .history_page(&HistoryQuery {
            job: Some("a".into()),
            limit: 30,
            ..Default::default()
        })
        .unwrap();
    let p2 = s
        .history_page(&HistoryQuery {
            job: Some("a".into()),
            limit: 30,
            before: p1.next.clone(),
            ..Default::default()
        })
        .unwrap();
    assert!(p2.next.is_none());
    let both: Vec<_> = p1.rows.iter().chain(&p2.rows).cloned().collect();
    assert_eq!(ids(&both), ids(&only_a));
    assert!(matches!(
        s.history_page(&HistoryQuery {
            before: Some("nonsense".into()),
            ..Default::default()
        }),
        Err(StoreError::Operation(OperationError::BadPageToken(_)))
    ));
    drop(s);
    let rep = crate::store::check::check_file_store(&dir, Duration::from_secs(5)).unwrap();
    assert!(rep.ok(), "{:?}", rep.problems);
    assert_eq!(rep.history_rows, 80);
    // A reopened handle (default bound) reads the same and appends to the open segment.
    let s = FileStore::open(&dir).unwrap();
    assert_eq!(ids(&all_rows(&s)), ids(&all));
}

/// A flipped byte in a sealed segment: `check` names the segment file and line; a query that
/// reads the row refuses it; the open segment's verification at start does not read it.
#[test]
fn damage_in_a_sealed_segment_is_found_by_check_and_by_its_readers() {
    let (dir, s) = segmented("segflip", 30);
    drop(s);
    let p = segment_path_for_test(&dir, 2);
    let mut b = std::fs::read(&p).unwrap();
    let key = b"\"duration_ms\":";
    let at = b.windows(key.len()).position(|w| w == key).unwrap() + key.len();
    b[at] ^= 0x01;
    std::fs::write(&p, &b).unwrap();
    let rep = crate::store::check::check_file_store(&dir, Duration::from_secs(5)).unwrap();
    let text: Vec<String> = rep.problems.iter().map(|p| p.to_string()).collect();
    assert!(
        text.iter()
            .any(|t| t.contains("000002.jsonl:2:") && t.contains("checksum")),
        "{text:?}"
    );
    assert!(
        text.iter()
            .any(|t| t.contains("000002.jsonl") && t.contains("segment checksum")),
        "{text:?}"
    );
    let s = FileStore::open_existing(&dir).unwrap();
    let err = s.history(&HistoryQuery::default()).unwrap_err();
    assert!(err.to_string().contains("000002.jsonl:2:"), "{err}");
    // A deleted middle segment is a gap `check` reports.
    std::fs::remove_file(segment_path_for_test(&dir, 3)).unwrap();
    let rep = crate::store::check::check_file_store(&dir, Duration::from_secs(5)).unwrap();
    assert!(
        rep.problems
            .iter()
            .any(|p| p.what.contains("segment 3 is missing")),
        "{:?}",
        rep.problems
    );
}

fn segment_path_for_test(dir: &Path, n: u64) -> PathBuf {
    super::layout::segment_path(dir, n)
}

/// A crash between sealing segment N (`history/N.jsonl` written) and replacing the open
/// segment leaves N twice: readers see each row once, and the next writer finishes the seal.
#[test]
fn a_crash_mid_seal_is_finished_by_the_next_writer_and_no_row_shows_twice() {
    let (dir, s) = segmented("midseal", 12);
    let before = all_rows(&s);
    drop(s);
    // Step 1 of a seal of the open segment, as a crashed writer leaves it.
    let open = std::fs::read(dir.join(HISTORY_FILE)).unwrap();
    let head: filefmt::HistoryHeader =
        serde_json::from_slice(open.split(|b| *b == b'\n').next().unwrap()).unwrap();
    let n = head.segment.unwrap();
    let rows = open.iter().filter(|b| **b == b'\n').count() as u64 - 1;
    assert!(rows > 0);
    let mut sealed = open.clone();
    let seal = filefmt::Seal::over(n, &open, rows, Vec::new());
    sealed.extend_from_slice(&serde_json::to_vec(&seal).unwrap());
    sealed.push(b'\n');
    std::fs::write(segment_path_for_test(&dir, n), &sealed).unwrap();
    let r = FileStore::open_existing(&dir).unwrap();
    let ids = |v: &[HistoryRow]| v.iter().map(|r| r.run_id).collect::<Vec<_>>();
    assert_eq!(ids(&all_rows(&r)), ids(&before), "each row once");
    let w = FileStore::open(&dir).unwrap().with_segment_bytes(2048);
    for c in claim(&w, 12 * 60, "o", 5).claims {
        finish(&w, &c, Status::Succeeded, 12 * 60 + 1);
    }
    let head: filefmt::HistoryHeader = serde_json::from_slice(
        std::fs::read(dir.join(HISTORY_FILE))
            .unwrap()
            .split(|b| *b == b'\n')
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(head.segment, Some(n + 1), "the writer finished the seal");
    let after = all_rows(&r);
    assert_eq!(after.len(), before.len() + 2);
    assert_eq!(ids(&after[2..]), ids(&before));
    let rep = crate::store::check::check_file_store(&dir, Duration::from_secs(5)).unwrap();
    assert!(rep.ok(), "{:?}", rep.problems);
}

/// Turn a format-3 store whose history is all in the open segment into the format-2 store the
/// previous release wrote (one `history.jsonl`, header without a segment, job lines without
/// checksums, `VERSION` 2).
fn make_format_2(dir: &Path) -> Vec<u8> {
    for f in [SNAPSHOT_FILE, JOURNAL_FILE] {
        let b = std::fs::read(dir.join(f)).unwrap();
        let mut out = Vec::new();
        for (i, line) in b.split_inclusive(|c| *c == b'\n').enumerate() {
            let body = &line[..line.len() - 1];
            if i == 0 {
                out.extend_from_slice(line);
                continue;
            }
            filefmt::verify_line(body, "job record").unwrap();
            // `,"crc32":"xxxxxxxx"}` off, `}` back.
            out.extend_from_slice(&body[..body.len() - 20]);
            out.extend_from_slice(b"}\n");
        }
        std::fs::write(dir.join(f), out).unwrap();
    }
    let h = std::fs::read(dir.join(HISTORY_FILE)).unwrap();
    let nl = h.iter().position(|b| *b == b'\n').unwrap();
    let head: filefmt::HistoryHeader = serde_json::from_slice(&h[..nl]).unwrap();
    assert_eq!(head.segment, Some(1), "all rows in the open segment");
    let mut v2 = serde_json::to_vec(&filefmt::HistoryHeader {
        segment: None,
        ..head.clone()
    })
    .unwrap();
    v2.extend_from_slice(&h[nl..]);
    std::fs::write(dir.join(HISTORY_FILE), &v2).unwrap();
    std::fs::write(dir.join(VERSION_FILE), filefmt::version_text_2(&head.store)).unwrap();
    v2
}

/// A format-2 store is refused by a reader with the upgrade message and
/// migrated by the first writer into sealed segments; a crash at any step of the migration
/// leaves a store that opens as format 2 (and migrates) or as format 3, with every row.
#[test]
fn a_format_2_store_is_migrated_into_segments_and_a_crash_midway_is_recovered() {
    let (dir, s) = {
        let dir = tmp("v2");
        let s = FileStore::open(&dir).unwrap();
        s.apply(&jobs_file(&["a", "b"]), stored(0)).unwrap();
        for k in 0..30 {
            for c in claim(&s, k * 60, "o", 5).claims {
                finish(&s, &c, Status::Succeeded, k * 60 + 1);
            }
        }
        (dir, s)
    };
    let want: Vec<Uuid> = all_rows(&s).iter().map(|r| r.run_id).collect();
    let want_jobs = s.jobs().unwrap();
    drop(s);
    let v2 = make_format_2(&dir);
    assert!(
        !std::fs::read_to_string(dir.join(JOURNAL_FILE))
            .unwrap()
            .contains("crc32"),
        "format-2 job lines carry no checksum"
    );
    let id = FileStore::open_existing(&dir).err().unwrap();
    assert!(
        matches!(id, StoreError::Open(OpenError::Version { .. })),
        "{id}"
    );
    assert!(id.to_string().contains("cronsole apply"), "{id}");
    let io = crate::store::io::RealIo;
    let store_id = String::from_utf8(std::fs::read(dir.join(VERSION_FILE)).unwrap())
        .unwrap()
        .lines()
        .nth(1)
        .unwrap()
        .trim_start_matches("store ")
        .to_string();
    // Crash state A: segments half written (a stray, garbage segment), VERSION 2.
    std::fs::create_dir_all(dir.join("history")).unwrap();
    std::fs::write(segment_path_for_test(&dir, 1), b"garbage").unwrap();
    assert!(FileStore::open_existing(&dir).is_err(), "still format 2");
    // Crash state B: the migration ran up to the new open segment, not VERSION.
    super::migrate::migrate_v2(&io, &dir, &store_id, 1024).unwrap();
    std::fs::write(dir.join(VERSION_FILE), filefmt::version_text_2(&store_id)).unwrap();
    assert_ne!(std::fs::read(dir.join(HISTORY_FILE)).unwrap(), v2);
    let e = FileStore::open_existing(&dir).err().unwrap();
    assert!(
        matches!(e, StoreError::Open(OpenError::Version { .. })),
        "{e}"
    );
    // A writer finishes it.
    let s = FileStore::open(&dir).unwrap();
    let got: Vec<Uuid> = all_rows(&s).iter().map(|r| r.run_id).collect();
    assert_eq!(got, want, "every row, in order");
    assert_eq!(s.jobs().unwrap(), want_jobs, "every job record, unchanged");
    for f in [SNAPSHOT_FILE, JOURNAL_FILE] {
        let b = std::fs::read(dir.join(f)).unwrap();
        for line in b.split(|c| *c == b'\n').skip(1).filter(|l| !l.is_empty()) {
            filefmt::verify_line(line, "job record").unwrap();
        }
    }
    assert!(
        !segment_path_for_test(&dir, 40).exists(),
        "stray leftovers removed"
    );
    drop(s);
    let v = std::fs::read_to_string(dir.join(VERSION_FILE)).unwrap();
    assert!(v.starts_with("cronsole-file-store 3\n"), "{v}");
    let rep = crate::store::check::check_file_store(&dir, Duration::from_secs(5)).unwrap();
    assert!(rep.ok(), "{:?}", rep.problems);
    assert_eq!(rep.history_rows, 60);
}

/// The open accepts rows of every run an `overlap: allow` record still holds (a
/// failed record write after the rows landed), but still refuses a journal cut back to before
/// a run's claim: the row's run is none of the leases the surviving record holds.
#[test]
fn a_journal_cut_before_an_allow_runs_claim_is_corruption_though_the_job_holds_other_runs() {
    let dir = tmp("jcut-allow");
    let jpath = dir.join(JOURNAL_FILE);
    let before_third;
    {
        let s = FileStore::open(&dir).unwrap();
        let mut d = def("a");
        d.overlap = crate::model::Overlap::Allow {
            max_concurrent_runs: 5,
        };
        s.apply(
            &JobsFile {
                settings: Settings::default(),
                jobs: vec![d],
            },
            t(0),
        )
        .unwrap();
        let first = claim(&s, 60, "o", 5).claims;
        let second = claim(&s, 120, "o", 5).claims;
        assert_eq!((first.len(), second.len()), (1, 1));
        before_third = std::fs::read(&jpath).unwrap();
        let third = claim(&s, 180, "o", 5).claims;
        assert_eq!(third.len(), 1);
        finish(&s, &third[0], Status::Succeeded, 181);
        assert_eq!(s.job("a").unwrap().unwrap().rt.live_runs(), 2);
    }
    // The third run's claim and end are cut away: the record holds runs 1 and 2 only.
    std::fs::write(&jpath, &before_third).unwrap();
    assert_refused(&dir, JOURNAL_FILE, "records were lost");
}

/// A journal cut short by hand, leaving a partial line, used to
/// pass for a crash's torn tail — the next writer cut it and slots already run ran again. The
/// history rows newer than the surviving records prove otherwise: corruption, nothing changed.
#[test]
fn a_journal_cut_short_by_hand_is_corruption_not_a_torn_tail() {
    let dir = tmp("jcut");
    {
        let s = FileStore::open(&dir).unwrap();
        s.apply(&jobs_file(&["a", "b"]), t(0)).unwrap();
        for k in 0..6 {
            for c in claim(&s, k * 60, "o", 5).claims {
                finish(&s, &c, Status::Succeeded, k * 60 + 1);
            }
        }
    }
    let jpath = dir.join(JOURNAL_FILE);
    let j = std::fs::read(&jpath).unwrap();
    // Cut in the middle of a line well before the end: several runs' records go.
    let cut = j.len() * 2 / 3;
    let cut = cut + j[cut..].iter().position(|b| *b == b'\n').unwrap() - 10;
    std::fs::write(&jpath, &j[..cut]).unwrap();
    assert_refused(&dir, JOURNAL_FILE, "records were lost");
    // The error names the stale record's line, not `jobs.journal:0:0`.
    let e = FileStore::open_existing(&dir)
        .and_then(|s| s.jobs())
        .unwrap_err()
        .to_string();
    let at = format!("{}:", jpath.display());
    let rest = &e[e.find(&at).expect("names the journal") + at.len()..];
    let line: u64 = rest.split(':').next().unwrap().parse().unwrap();
    assert!(line >= 2, "{e}");
    let text = String::from_utf8_lossy(&j[..cut]).into_owned();
    let named = text
        .lines()
        .nth(line as usize - 1)
        .expect("the named line exists");
    assert!(named.contains("\"name\":\""), "{e}: {named}");
}

/// The same for history: rows the job records relied on were cut off.
#[test]
fn a_history_cut_short_by_hand_is_corruption_not_a_torn_tail() {
    let dir = used_store("hcut");
    {
        let s = FileStore::open(&dir).unwrap();
        for k in 2..5 {
            for c in claim(&s, k * 60, "o", 5).claims {
                finish(&s, &c, Status::Succeeded, k * 60 + 1);
            }
        }
    }
    let hpath = dir.join(HISTORY_FILE);
    let h = std::fs::read(&hpath).unwrap();
    std::fs::write(&hpath, &h[..h.len() - 40]).unwrap();
    assert_refused(&dir, HISTORY_FILE, "cut short");
}

/// Retention drops whole old segments (oldest first) and rewrites only those that keep some
/// of their rows; the kept rows are the newest per job.
#[test]
fn retention_drops_whole_old_segments() {
    let (dir, s) = segmented("segret", 40);
    let oldest_before = (1..)
        .find(|n| segment_path_for_test(&dir, *n).exists())
        .unwrap();
    let dropped = s.compact_history(10, None, t(5000)).unwrap();
    assert_eq!(dropped, 60);
    let h = all_rows(&s);
    assert_eq!(h.len(), 20);
    assert_eq!(h.iter().filter(|r| r.job == "a").count(), 10);
    assert_eq!(h[0].slot, Some(t(39 * 60)));
    assert!(
        !segment_path_for_test(&dir, oldest_before).exists(),
        "the oldest segment went whole"
    );
    drop(s);
    let rep = crate::store::check::check_file_store(&dir, Duration::from_secs(5)).unwrap();
    assert!(rep.ok(), "{:?}", rep.problems);
    assert_eq!(rep.history_rows, 20);
    let s = FileStore::open(&dir).unwrap();
    assert_eq!(all_rows(&s).len(), 20);
}

/// An open segment far over the bound (written by a tool, not by cronsole): a read-only open
/// verifies only its end (fast), and the first append seals it first — which verifies every
/// row, so a flipped byte at its start is found before anything is appended after it.
#[test]
fn an_oversized_open_segment_is_sealed_and_verified_before_the_first_append() {
    let dir = used_store("oversized");
    let hpath = dir.join(HISTORY_FILE);
    let mut h = std::fs::read(&hpath).unwrap();
    let t0 = t(10_000);
    let mut i = 0;
    while h.len() < 9 * 1024 * 1024 {
        let mut r = HistoryRow::new(
            "gen",
            Status::Succeeded,
            Trigger::Schedule,
            Some(t0),
            "o",
            t0,
        );
        r.result = Some(format!("row {i} {}", "x".repeat(200)));
        filefmt::encode_row(&mut h, &r).unwrap();
        i += 1;
    }
    // A flip early in the file (the first generated row), far before the verified end.
    let first_gen = h.windows(7).position(|w| w == b"row 0 x").unwrap();
    h[first_gen + 8] ^= 0x01;
    std::fs::write(&hpath, &h).unwrap();
    let before = dir_bytes(&dir);
    let r = FileStore::open_existing(&dir).unwrap();
    assert_eq!(
        r.jobs().unwrap().len(),
        2,
        "a read-only open verifies the end only"
    );
    assert_eq!(dir_bytes(&dir), before);
    let w = FileStore::open(&dir).unwrap();
    let row = HistoryRow::new(
        "gen",
        Status::Succeeded,
        Trigger::Schedule,
        Some(t0),
        "o",
        t0,
    );
    let err = w.append_history_unrecorded(&[row]).unwrap_err();
    assert!(err.to_string().contains("checksum"), "{err}");
    assert_eq!(
        std::fs::read(&hpath).unwrap(),
        h,
        "nothing appended after the damaged row"
    );
}

/// The one generation check that both opening a store and the format-2 -> 3 upgrade use: a
/// journal at the snapshot's generation is read, the one the snapshot absorbed is skipped, and
/// any other is corruption at line 1 (never discarded).
#[test]
fn the_journal_generation_check_reads_skips_or_refuses() {
    use super::log::header_line;
    use super::record::{journal_is_stale, snapshot_header};
    let path = Path::new("/s/jobs.journal");
    let id = "store-1";
    let journal = |generation| header_line("journal", generation, id, None).unwrap();
    let snap = header_line("snapshot", 5, id, None).unwrap();
    assert_eq!(
        snapshot_header(path, &snap[..snap.len() - 1], id).unwrap(),
        (5, None)
    );
    let e = snapshot_header(path, &journal(5)[..], id).unwrap_err();
    assert!(e.to_string().contains("not a snapshot header"), "{e}");

    let body = |b: &[u8]| b[..b.len() - 1].to_vec();
    let current = journal(5);
    assert_eq!(
        journal_is_stale(path, &body(&current), id, 5, None, &current).unwrap(),
        None
    );
    let old = journal(4);
    let absorbed = filefmt::Absorbed {
        len: old.len() as u64,
        crc32: filefmt::crc32(&old),
    };
    assert_eq!(
        journal_is_stale(path, &body(&old), id, 5, Some(absorbed), &old).unwrap(),
        Some(old.len() as u64)
    );
    // The same journal grown past what the snapshot absorbed (appended while it was built):
    // stale, with its lines past the absorbed bytes still to read.
    let mut grown = old.clone();
    grown.extend_from_slice(b"{\"more\":1}\n");
    assert_eq!(
        journal_is_stale(path, &body(&old), id, 5, Some(absorbed), &grown).unwrap(),
        Some(old.len() as u64)
    );
    // Shorter than what was absorbed: not that journal.
    let e = journal_is_stale(
        path,
        &body(&old),
        id,
        5,
        Some(absorbed),
        &old[..old.len() - 1],
    )
    .unwrap_err();
    assert!(e.to_string().contains("does not match"), "{e}");
    // One behind but not the journal the snapshot absorbed; two behind; ahead.
    let other = filefmt::Absorbed {
        len: old.len() as u64,
        crc32: absorbed.crc32 ^ 1,
    };
    for (line, absorbed, needle) in [
        (
            old.clone(),
            Some(other),
            "journal generation 4 does not match the snapshot's (5)",
        ),
        (
            journal(3),
            Some(absorbed),
            "journal generation 3 does not match",
        ),
        (journal(6), None, "missing or replaced?"),
        (snap.clone(), None, "not a journal header"),
    ] {
        let e = journal_is_stale(path, &body(&line), id, 5, absorbed, &line).unwrap_err();
        assert!(
            matches!(e, StoreError::Open(OpenError::Corrupt { line: 1, .. })),
            "{e:?}"
        );
        assert!(e.to_string().contains(needle), "{needle}: {e}");
    }
    let e = journal_is_stale(path, &body(&current), "store-2", 5, None, &current).unwrap_err();
    assert!(e.to_string().contains("another store"), "{e}");
}

/// The recount at a budget `period` edit reads history back from its end
/// only as far as the period's start (plus the documented hour of slack), across sealed
/// segments, and sums what each job's rows that finished inside the period cost.
#[test]
fn the_budget_recount_reads_back_only_to_the_period_start() {
    let dir = tmp("recount");
    let s = FileStore::open(&dir).unwrap().with_segment_bytes(2048);
    s.apply(&jobs_file(&["a", "b"]), t(0)).unwrap();
    let start = t(1_000_000);
    let row = |job: &str, at: DateTime<Utc>, cost: f64| {
        let mut r = HistoryRow::new(job, Status::Succeeded, Trigger::Manual, None, "o", at);
        r.cost_usd = cost;
        r
    };
    {
        let mut l = s.lock().unwrap();
        // Oldest: a row that claims to have finished inside the period (no such row is written
        // before older ones but a late one; here it only proves the read stopped above it),
        // then the row that stops the read: finished over an hour before the start.
        l.append_history(&[row("a", start + chrono::Duration::seconds(5), 1.0)])
            .unwrap();
        l.append_history(&[row("a", start - chrono::Duration::seconds(3601), 0.5)])
            .unwrap();
        // Within the slack, before the start: read, books nothing.
        l.append_history(&[row("b", start - chrono::Duration::seconds(1800), 0.25)])
            .unwrap();
        // Inside the period: 40 rows of `a` at $0.01 and 40 of `b` at $0.002, over several
        // sealed segments; one of `c`, a job not asked about.
        for i in 0..40 {
            let at = start + chrono::Duration::seconds(i);
            l.append_history(&[row("a", at, 0.01), row("b", at, 0.002)])
                .unwrap();
        }
        l.append_history(&[row("c", start, 7.0)]).unwrap();
        assert!(l.inner.history_seg > 2, "rows span sealed segments");
        let got = l.booked_since(start, &["a".into(), "b".into()]).unwrap();
        assert!((got["a"] - 0.4).abs() < 1e-9, "{got:?}");
        assert!((got["b"] - 0.08).abs() < 1e-9, "{got:?}");
        assert!(!got.contains_key("c"));
        // A period starting after every row: nothing (the first row read stops it).
        let later = start + chrono::Duration::days(2);
        assert!(l.booked_since(later, &["a".into()]).unwrap().is_empty());
    }
}

/// The store-wide accounted mark (`Inner::acct`) as one handle sees it under the lock: the
/// mark, where history ends, and whether the two agree (nothing unaccounted after the mark).
fn acct_of(s: &FileStore) -> (Option<super::record::Mark>, super::record::Mark, bool) {
    let l = s.lock().unwrap();
    (l.inner.acct, l.mark_now(), l.inner.acct_clean)
}

/// Seed 19652 at the level of the mark: a generated row a writer left without its record lies
/// past the mark; writes that did not read it (a pause) carry the old mark, so a new handle
/// still finds the row; a claim that generates no row of its own reads it, does not run the
/// slot it records, and moves the mark past it.
#[test]
fn a_claim_reads_generated_rows_past_the_accounted_mark_and_moves_the_mark_past_them() {
    let dir = tmp("acct");
    let s = FileStore::open(&dir).unwrap();
    s.apply(&jobs_file(&["x", "y"]), t(0)).unwrap();
    for c in claim(&s, 0, "o", 5).claims {
        finish(&s, &c, Status::Succeeded, 1);
    }
    let (mark, end, clean) = acct_of(&s);
    assert_eq!(mark, Some(end), "every write so far accounted for its rows");
    assert!(clean);
    assert_eq!(acct_of(&FileStore::open(&dir).unwrap()).0, Some(end));
    // A writer's leftover: x's `missed` row of slot t60 reached history, its record did not.
    let row = HistoryRow::new(
        "x",
        Status::Missed,
        Trigger::Schedule,
        Some(t(60)),
        "dead",
        t(61),
    );
    s.lock().unwrap().append_history(&[row]).unwrap();
    let (mark, now_end, clean) = acct_of(&s);
    assert_eq!(mark, Some(end));
    assert_ne!(now_end, end);
    assert!(!clean, "history goes past the mark");
    // A write that did not read the row carries the old mark.
    s.set_paused("y", true, t(61)).unwrap();
    let fresh = FileStore::open(&dir).unwrap();
    assert_eq!(
        acct_of(&fresh).0,
        Some(end),
        "the newest journal line keeps the old mark"
    );
    let out = claim(&fresh, 62, "o", 5);
    assert!(
        out.claims.is_empty(),
        "slot t60 is recorded missed: {:?}",
        out.claims.iter().map(|c| c.slot).collect::<Vec<_>>()
    );
    assert_eq!(fresh.job("x").unwrap().unwrap().rt.next_slot, Some(t(120)));
    let (mark, end, clean) = acct_of(&FileStore::open(&dir).unwrap());
    assert_eq!(
        mark,
        Some(end),
        "the claim accounted for the row: the mark moved past it"
    );
    assert!(clean);
}

/// A claim moves the mark only up to a leftover row whose slots its job's record still has
/// ahead (the clock stepped back behind the writer's): later claims keep reading it.
#[test]
fn the_accounted_mark_stays_before_a_row_whose_slots_are_still_ahead() {
    let dir = tmp("acct-ahead");
    let s = FileStore::open(&dir).unwrap();
    s.apply(&jobs_file(&["x"]), t(0)).unwrap();
    for c in claim(&s, 0, "o", 5).claims {
        finish(&s, &c, Status::Succeeded, 1);
    }
    let (_, end, _) = acct_of(&s);
    // A writer whose clock was ahead recorded slot t180 missed and died before its record.
    let row = HistoryRow::new(
        "x",
        Status::Missed,
        Trigger::Schedule,
        Some(t(180)),
        "dead",
        t(181),
    );
    s.lock().unwrap().append_history(&[row]).unwrap();
    // Slot t60 runs; t180 is still ahead of the record.
    let out = claim(&s, 61, "o", 5);
    assert_eq!(out.claims.len(), 1);
    assert_eq!(out.claims[0].slot, Some(t(60)));
    assert_eq!(acct_of(&FileStore::open(&dir).unwrap()).0, Some(end));
    finish(&s, &out.claims[0], Status::Succeeded, 62);
    let out = claim(&s, 121, "o", 5);
    assert_eq!(
        out.claims.iter().map(|c| c.slot).collect::<Vec<_>>(),
        vec![Some(t(120))]
    );
    finish(&s, &out.claims[0], Status::Succeeded, 122);
    let out = claim(&s, 185, "o", 5);
    assert!(
        out.claims.is_empty(),
        "slot t180 is recorded missed: {:?}",
        out.claims.iter().map(|c| c.slot).collect::<Vec<_>>()
    );
    assert_eq!(s.job("x").unwrap().unwrap().rt.next_slot, Some(t(240)));
    let (mark, end, clean) = acct_of(&FileStore::open(&dir).unwrap());
    assert_eq!(mark, Some(end), "now accounted for: the mark moved past it");
    assert!(clean);
}

/// The mark survives a compaction (the new journal's header carries it) and a seal of the
/// open history segment (every write was accounted for, so it moves into the new segment).
#[test]
fn the_accounted_mark_survives_compaction_and_segment_seals() {
    let dir = tmp("acct-compact");
    let s = FileStore::open(&dir).unwrap().with_segment_bytes(2048);
    s.apply(&jobs_file(&["a", "b"]), t(0)).unwrap();
    for k in 0..20 {
        for c in claim(&s, k * 60, "o", 5).claims {
            finish(&s, &c, Status::Succeeded, k * 60 + 1);
        }
    }
    let (mark, end, clean) = acct_of(&s);
    assert!(end.seg.unwrap() > 1, "history was sealed: {end:?}");
    assert_eq!(mark, Some(end));
    assert!(clean);
    s.compact_jobs_for_test();
    let journal = std::fs::read(dir.join(JOURNAL_FILE)).unwrap();
    assert_eq!(
        journal.iter().filter(|b| **b == b'\n').count(),
        1,
        "a header alone"
    );
    assert!(
        contains(&journal, b"\"acct\""),
        "{}",
        String::from_utf8_lossy(&journal)
    );
    let (mark, end, clean) = acct_of(&FileStore::open(&dir).unwrap());
    assert_eq!(mark, Some(end));
    assert!(clean);
}

/// A store written before the mark existed has none: claims scan as before (only when they
/// generate rows), and no writer invents one for rows it never read.
#[test]
fn a_store_written_before_the_accounted_mark_claims_as_before() {
    let dir = tmp("acct-v2");
    {
        let s = FileStore::open(&dir).unwrap();
        s.apply(&jobs_file(&["a"]), t(0)).unwrap();
        for c in claim(&s, 0, "o", 5).claims {
            finish(&s, &c, Status::Succeeded, 1);
        }
    }
    make_format_2(&dir);
    let s = FileStore::open(&dir).unwrap();
    assert_eq!(acct_of(&s).0, None);
    let out = claim(&s, 60, "o", 5);
    assert_eq!(out.claims.len(), 1);
    finish(&s, &out.claims[0], Status::Succeeded, 61);
    assert_eq!(acct_of(&FileStore::open(&dir).unwrap()).0, None);
}

/// The merge of the accounted mark with `jobs.index`: a new store's first large apply writes
/// its snapshot directly, each line carrying the mark; an open through the index reads no
/// snapshot line, so the journal header written with that snapshot must carry the mark, or the
/// store would lose it for good (claims would then scan as an old store's do).
#[test]
fn the_accounted_mark_survives_an_open_through_the_index() {
    let dir = tmp("acct-index");
    let names: Vec<String> = (0..1100).map(|i| format!("j{i:04}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let s = FileStore::open(&dir).unwrap().with_index_min_bytes(0);
    // As `cronsole apply` hands them over: one definition at a time.
    let mut defs = jobs_file(&refs).jobs.into_iter();
    s.apply_each(
        &Settings::default(),
        &mut |sink| defs.try_for_each(&mut *sink),
        t(0),
    )
    .unwrap();
    assert!(
        dir.join(super::layout::INDEX_FILE).exists(),
        "the snapshot has its index"
    );
    let (acct, end, clean) = acct_of(&FileStore::open(&dir).unwrap());
    assert_eq!(acct, Some(end), "the mark after an open through the index");
    assert!(clean);
}

/// A chunk of a bulk action is one store operation — one lock hold, one journal
/// append and one fsync — not one per job (a `pause 'j*'` over 10 000 jobs held the lock for
/// 43 s one job at a time). Measured in I/O boundaries (writes, syncs, renames) of the
/// simulated disk: the chunk of 199 jobs costs about what pausing one job costs.
#[test]
fn a_bulk_chunk_is_one_store_operation() {
    use crate::store::{BulkAction, BulkOutcome};
    use crate::testkit::simio::{FaultConfig, SimDisk, shared_rng};
    let disk = SimDisk::new(shared_rng(7), FaultConfig::none());
    let s =
        FileStore::open_with_io(std::path::Path::new("/s/.cronsole"), disk.process(false)).unwrap();
    let names: Vec<String> = (0..200).map(|i| format!("j{i:03}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    s.apply(&jobs_file(&refs), t(1000)).unwrap();
    let b0 = disk.boundaries();
    s.set_paused("j000", true, t(1001)).unwrap();
    let one = disk.boundaries() - b0;
    let b1 = disk.boundaries();
    let r = s.bulk_edit(&names[1..], &BulkAction::SetPaused(true), t(1002));
    let bulk = disk.boundaries() - b1;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(r.done, vec![BulkOutcome::SetPaused; 199]);
    assert!(
        one > 0 && bulk <= 2 * one,
        "one job: {one} boundaries, 199 jobs: {bulk}"
    );
    assert!(s.jobs().unwrap().iter().all(|j| j.rt.paused));
    // Reopened (a new process): every pause is on disk.
    let again =
        FileStore::open_with_io(std::path::Path::new("/s/.cronsole"), disk.process(false)).unwrap();
    assert!(again.jobs().unwrap().iter().all(|j| j.rt.paused));
}

/// A claim reads the records of the due jobs it can start, not of every due job (a 10 000-job
/// burst claimed 512 at a time parsed ≈ 100 000 records): the rest stay due and the next
/// claims take them in wake-up order, none lost, none twice.
#[test]
fn a_claim_reads_only_as_many_due_records_as_it_can_start() {
    let dir = tmp("claim-cap");
    let s = FileStore::open(&dir).unwrap();
    let names: Vec<String> = (0..20).map(|i| format!("j{i:02}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    s.apply(&jobs_file(&refs), stored(1000)).unwrap();
    let loaded = |s: &FileStore| s.inner.lock().unwrap().records_loaded;
    let mut seen = Vec::new();
    for round in 0..7 {
        let before = loaded(&s);
        let got = claim(&s, 1000, "o", 3);
        let read = loaded(&s) - before;
        assert!(
            read <= 3,
            "round {round}: {read} records read for a claim of at most 3"
        );
        assert_eq!(got.claims.len(), if round < 6 { 3 } else { 2 });
        seen.extend(got.claims.iter().map(|c| c.job.def.name.clone()));
    }
    assert!(claim(&s, 1000, "o", 3).claims.is_empty());
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, names, "every due job claimed once");
    // A claim of 0 still evaluates every due job (it starts nothing).
    let dir2 = tmp("claim-cap-0");
    let s2 = FileStore::open(&dir2).unwrap();
    s2.apply(&jobs_file(&refs), stored(1000)).unwrap();
    let before = loaded(&s2);
    assert!(claim(&s2, 1000, "o", 0).claims.is_empty());
    assert_eq!(loaded(&s2) - before, 20);
}

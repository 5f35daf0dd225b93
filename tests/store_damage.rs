//! A damaged store, through the real binary: it is refused with exit 2 naming the
//! file, by readers and writers alike, with every byte unchanged; read-only commands never
//! write; `cronsole check` lists every problem with its location.
#![allow(clippy::unwrap_used)] // test code

mod support;

use cronsole::testkit::store::{ClaimAt, FinishClaim};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cronsole::model::{JobsFile, Settings, Status};
use cronsole::store::Store;
use cronsole::store::file::FileStore;
use support::TempDir;

use cronsole::testkit::internals::store::filefmt;
use cronsole::testkit::time::epoch as t;

fn cli(store: &Path, args: &[&str]) -> (i32, String, String) {
    support::cli::run_with_store(store.parent().unwrap(), store, args)
}

/// A store with two jobs (one `once`) and three history rows; the jobs
/// next slots lie far in the future so `run` has nothing to do but open and close.
fn build(name: &str) -> (TempDir, PathBuf) {
    let root = support::tempdir(&format!("damage-{name}"));
    let dir = root.join("store");
    let s = FileStore::open(&dir).unwrap();
    let mut once = cronsole::testkit::jobs::command_job("once", 3600);
    once.max_runs = Some(1);
    let file = JobsFile {
        settings: Settings::default(),
        jobs: vec![cronsole::testkit::jobs::command_job("every", 3600), once],
    };
    s.apply(&file, stored(&file)).unwrap();
    for now in [0, 3600] {
        let out = s.claim_at(t(now), "o", 2);
        for c in out.claims {
            s.finish_claim(&c, "o", Status::Succeeded, t(now + 1));
        }
    }
    // Slots far ahead: `run` below claims nothing.
    s.apply(&file, stored(&file)).unwrap();
    (root, dir)
}

/// The instant to store `file` at so that its first job's first slot is `t(0)`: one interval
/// before it for an `every` job.
fn stored(file: &JobsFile) -> chrono::DateTime<chrono::Utc> {
    cronsole::testkit::jobs::stored_for_first_slot(&file.jobs[0], t(0))
}

fn bytes_of(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name() != "lock" && e.file_name() != "cronsole.log")
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

/// What readers and writers alike run: `jobs`, `history`, `run` and `check`.
const EVERY_KIND: [&[&str]; 4] = [&["jobs"], &["history"], &["run", "--for", "1s"], &["check"]];

/// Each of `commands` exits 2 saying each of `says` (the damaged file, what is wrong with it),
/// and leaves every byte of the store as it was.
fn refused_unchanged(dir: &Path, commands: &[&[&str]], says: &[&str]) {
    let before = bytes_of(dir);
    for args in commands {
        let (code, out, err) = cli(dir, args);
        let text = format!("{out}{err}");
        assert_eq!(code, 2, "{args:?}: {text}");
        for s in says {
            assert!(text.contains(s), "{s} {args:?}: {text}");
        }
        assert_eq!(bytes_of(dir), before, "{args:?} changed the store");
    }
}

#[test]
fn read_only_commands_leave_every_byte_unchanged_even_with_torn_tails() {
    let (_root, dir) = build("readonly");
    // Torn tails a crashed writer would leave: readers must neither cut nor rewrite them.
    for f in ["history.jsonl", "jobs.journal"] {
        let mut b = std::fs::read(dir.join(f)).unwrap();
        b.extend_from_slice(b"{\"torn");
        std::fs::write(dir.join(f), b).unwrap();
    }
    let before = bytes_of(&dir);
    for args in [
        &["jobs"][..],
        &["jobs", "--json"],
        &["history"],
        &["history", "--job", "once"],
        &["stats"],
        &["check"],
    ] {
        let (code, out, err) = cli(&dir, args);
        assert_eq!(code, 0, "{args:?}: {out}{err}");
        assert_eq!(bytes_of(&dir), before, "{args:?} changed the store");
    }
    let (_, out, _) = cli(&dir, &["check"]);
    assert!(out.contains("note:") && out.contains("torn"), "{out}");
}

/// Each damage: `jobs`, `history`, `run` and `check` exit 2 naming the file; nothing changes.
#[test]
fn damaged_stores_are_refused_by_readers_and_writers_with_every_byte_unchanged() {
    type Damage = fn(&Path);
    let other = build("other");
    let other_dir = other.1.clone();
    let damages: Vec<(&str, &str, Damage)> = vec![
        ("jobs.journal", "missing", |d| {
            std::fs::remove_file(d.join("jobs.journal")).unwrap()
        }),
        ("jobs.journal", "empty", |d| {
            std::fs::write(d.join("jobs.journal"), b"").unwrap()
        }),
        ("settings.json", "missing", |d| {
            std::fs::remove_file(d.join("settings.json")).unwrap()
        }),
        ("jobs.journal", "does not match", |d| {
            let p = d.join("jobs.journal");
            let j = std::fs::read_to_string(&p).unwrap();
            let g = j.find("\"generation\":").unwrap() + "\"generation\":".len();
            let end = g + j[g..].find(|c: char| !c.is_ascii_digit()).unwrap();
            let n: u64 = j[g..end].parse().unwrap();
            std::fs::write(&p, format!("{}{}{}", &j[..g], n + 5, &j[end..])).unwrap();
        }),
        ("history.jsonl", "checksum", |d| {
            // A flip that keeps the row valid JSON, in a row that is not the last.
            let p = d.join("history.jsonl");
            let mut h = std::fs::read(&p).unwrap();
            let key = b"\"duration_ms\":";
            let at = h.windows(key.len()).position(|w| w == key).unwrap() + key.len();
            h[at] ^= 0x01;
            std::fs::write(&p, h).unwrap();
        }),
    ];
    for (file, needle, damage) in damages {
        let (_root, dir) = build("damaged");
        damage(&dir);
        refused_unchanged(&dir, &EVERY_KIND, &[file, needle]);
    }
    // A journal copied in from another store.
    let (_root, dir) = build("foreign");
    std::fs::copy(other_dir.join("jobs.journal"), dir.join("jobs.journal")).unwrap();
    refused_unchanged(
        &dir,
        &[&["jobs"], &["run", "--for", "1s"], &["check"]],
        &["another store"],
    );
}

#[test]
fn check_lists_every_problem_with_its_location() {
    let (_root, dir) = build("check");
    let (code, out, err) = cli(&dir, &["check"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("2 jobs") && out.contains("3 history rows"),
        "{out}"
    );
    let version = std::fs::read_to_string(dir.join("VERSION")).unwrap();
    let id = version
        .lines()
        .find_map(|l| l.strip_prefix("store "))
        .expect("VERSION names the store id");
    assert!(out.contains(&format!("store id {id}")), "{out}");
    let mut h = std::fs::read(dir.join("history.jsonl")).unwrap();
    h.extend_from_slice(b"{\"not\": \"a row\"}\n{\"also\": 1}\n");
    std::fs::write(dir.join("history.jsonl"), h).unwrap();
    std::fs::remove_file(dir.join("settings.json")).unwrap();
    let (code, out, _) = cli(&dir, &["check"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("history.jsonl:5:"), "{out}");
    assert!(out.contains("history.jsonl:6:"), "{out}");
    assert!(
        out.contains("settings.json:0:0: required store file is missing"),
        "{out}"
    );
    assert!(out.contains("3 problems"), "{out}");
    let (code, out, _) = cli(&dir, &["check", "--json"]);
    assert_eq!(code, 2);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["problems"].as_array().unwrap().len(), 3);
    assert_eq!(v["store_id"].as_str(), Some(id));
}

/// `jobs.journal` cut by hand in the middle of a line after slots ran must not pass for a
/// crash's torn tail — `check` would call it sound and the next writer cut it, so slots already
/// run would run again. The history rows newer than the surviving
/// records prove the cut: every command refuses with exit 2 naming the journal, nothing changes.
#[test]
fn a_journal_cut_mid_line_after_slots_ran_is_corruption_not_a_torn_tail() {
    let (_root, dir) = build("journal-cut");
    let p = dir.join("jobs.journal");
    let j = std::fs::read(&p).unwrap();
    let starts: Vec<usize> = std::iter::once(0)
        .chain(
            j.iter()
                .enumerate()
                .filter(|(_, b)| **b == b'\n')
                .map(|(i, _)| i + 1),
        )
        .filter(|i| *i < j.len())
        .collect();
    // The middle of the third line from the end: the records of the last runs are gone.
    let line = starts[starts.len() - 3];
    let cut = line + 20;
    std::fs::write(&p, &j[..cut]).unwrap();
    refused_unchanged(&dir, &EVERY_KIND, &["jobs.journal", "records were lost"]);
}

/// The same for `history.jsonl` cut by hand mid-line below rows the job records relied on.
#[test]
fn a_history_cut_mid_line_is_corruption_not_a_torn_tail() {
    let (_root, dir) = build("history-cut");
    let p = dir.join("history.jsonl");
    let h = std::fs::read(&p).unwrap();
    std::fs::write(&p, &h[..h.len() - 30]).unwrap();
    refused_unchanged(
        &dir,
        &[&["jobs"], &["run", "--for", "1s"], &["check"]],
        &["history.jsonl", "cut short"],
    );
}

/// `history --page`: the token each page ends with continues exactly where it stopped.
#[test]
fn history_pages_with_tokens_through_the_whole_history() {
    let (_root, dir) = build("pages");
    let (code, all, _) = cli(&dir, &["history", "--json", "--limit", "100"]);
    assert_eq!(code, 0);
    let all: Vec<&str> = all.lines().collect();
    assert_eq!(all.len(), 3);
    let (code, first, err) = cli(&dir, &["history", "--json", "--limit", "2"]);
    assert_eq!(code, 0);
    let tok = err
        .lines()
        .find_map(|l| l.strip_prefix("next page: --page "))
        .expect("a next-page token on stderr");
    let (code, second, err2) = cli(&dir, &["history", "--json", "--limit", "2", "--page", tok]);
    assert_eq!(code, 0, "{err2}");
    assert!(!err2.contains("next page"), "last page: {err2}");
    let paged: Vec<&str> = first.lines().chain(second.lines()).collect();
    assert_eq!(paged, all);
    let (code, text, _) = cli(&dir, &["history", "--limit", "2"]);
    assert_eq!(code, 0);
    assert!(
        text.contains(&format!("next page with --page {tok}")),
        "{text}"
    );
    let (code, out, err) = cli(&dir, &["history", "--page", "bogus"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("page token"), "{err}");
}

/// A directory where a store file should be: readers, writers and `check` all exit
/// 2 naming the file, with one clear message (not an I/O error with its cause printed twice),
/// and nothing is changed.
#[test]
fn a_directory_in_place_of_a_store_file_is_damage_exit_2() {
    let files = [
        "VERSION",
        "history.jsonl",
        "jobs.journal",
        "jobs.snapshot.jsonl",
        "settings.json",
    ];
    for file in files {
        let (_root, dir) = build("dir-instead");
        let p = dir.join(file);
        if p.exists() {
            std::fs::remove_file(&p).unwrap();
        }
        std::fs::create_dir(&p).unwrap();
        std::fs::write(p.join("inside"), b"x").unwrap();
        let others = |d: &Path| -> BTreeMap<String, Vec<u8>> {
            std::fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap())
                .filter(|e| e.path().is_file() && e.file_name() != "lock")
                .filter(|e| e.file_name() != "cronsole.log")
                .map(|e| {
                    (
                        e.file_name().to_string_lossy().into_owned(),
                        std::fs::read(e.path()).unwrap(),
                    )
                })
                .collect()
        };
        let before = others(&dir);
        for args in [
            &["jobs"][..],
            &["history"],
            &["stats"],
            &["describe", "every"],
            &["pause", "every"],
            &["run", "--for", "1s"],
            &["check"],
        ] {
            let (code, out, err) = cli(&dir, args);
            let text = format!("{out}{err}");
            assert_eq!(code, 2, "{file} {args:?}: {text}");
            assert!(text.contains(file), "{file} {args:?}: {text}");
            assert!(text.contains("directory"), "{file} {args:?}: {text}");
            assert!(
                text.matches("Is a directory").count() < 2,
                "{file} {args:?}: cause printed twice: {text}"
            );
            assert_eq!(others(&dir), before, "{file}: {args:?} changed the store");
            assert!(
                p.join("inside").is_file(),
                "{file}: {args:?} touched the directory"
            );
        }
    }
}

/// One flipped bit in the last journal record (`next_slot` moved back onto the slot that
/// already ran) must not read as a valid record (`check` would say sound and `run` would run the
/// slot again). Job lines carry a checksum: every command exits 2 naming
/// `jobs.journal:LINE`, nothing changes. The same for a flip in a snapshot line.
#[test]
fn a_flipped_bit_in_a_job_line_is_corruption_at_its_line() {
    for file in ["jobs.journal", "jobs.snapshot.jsonl"] {
        let (_root, dir) = build("job-flip");
        let p = dir.join(file);
        let mut b = std::fs::read(&p).unwrap();
        // Lines in a fresh store's snapshot: force records into it by flipping in whichever
        // file holds the last job line.
        let lines = b.iter().filter(|c| **c == b'\n').count();
        if lines < 2 {
            continue;
        }
        let start = b[..b.len() - 1]
            .iter()
            .rposition(|c| *c == b'\n')
            .map_or(0, |i| i + 1);
        let key = b"\"next_slot\":\"";
        let at = start
            + b[start..]
                .windows(key.len())
                .position(|w| w == key)
                .expect("the last job line has a next_slot")
            + key.len();
        // The tens-of-seconds digit, as in the repro: still a valid, earlier instant.
        b[at + 17] ^= 0x01;
        std::fs::write(&p, &b).unwrap();
        let want = format!("{file}:{lines}:");
        refused_unchanged(&dir, &EVERY_KIND, &[&want, "checksum mismatch"]);
    }
}

/// `jobs.journal` replaced by an older copy of itself (same store, same
/// generation, cut at a line boundary: no torn tail). The history rows of runs the old records
/// do not hold prove records were lost: every command exits 2 naming the journal and nothing
/// runs again.
#[test]
fn an_older_copy_of_the_journal_is_corruption_not_a_clean_store() {
    let root = support::tempdir("damage-journal-older");
    let dir = root.join("store");
    let s = FileStore::open(&dir).unwrap();
    let file = JobsFile {
        settings: Settings::default(),
        jobs: vec![cronsole::testkit::jobs::command_job("j", 3600)],
    };
    s.apply(&file, stored(&file)).unwrap();
    let mut old = None;
    for k in 0..4i64 {
        let now = k * 3600;
        let out = s.claim_at(t(now), "o", 1);
        assert_eq!(out.claims.len(), 1, "slot {k} due");
        for c in out.claims {
            s.finish_claim(&c, "o", Status::Succeeded, t(now + 1));
        }
        if k == 0 {
            old = Some(std::fs::read(dir.join("jobs.journal")).unwrap());
        }
    }
    drop(s);
    let old = old.unwrap();
    assert_eq!(old.last(), Some(&b'\n'), "cut at a line boundary");
    std::fs::write(dir.join("jobs.journal"), &old).unwrap();
    refused_unchanged(&dir, &EVERY_KIND, &["jobs.journal", "records were lost"]);
}

/// A store large enough to have `jobs.index` opens through it without reading the
/// snapshot's lines, so a flipped byte in one line is refused by every command that reads that
/// line (exit 2 naming `jobs.snapshot.jsonl:LINE`) and by `check`, while commands that do not
/// read it (`describe` of another job, `history`) work; without the index, the open's scan
/// refuses it for every command, as before. Nothing changes either way.
#[test]
fn a_flipped_byte_in_an_indexed_snapshot_is_refused_where_its_line_is_read() {
    let root = support::tempdir("damage-indexed");
    let dir = root.join("store");
    let s = FileStore::open(&dir).unwrap();
    let file = JobsFile {
        settings: Settings::default(),
        jobs: (0..3000)
            .map(|i| cronsole::testkit::jobs::command_job(&format!("j{i:05}"), 3600))
            .collect(),
    };
    s.apply(&file, stored(&file)).unwrap();
    drop(s);
    assert!(
        dir.join("jobs.index").is_file(),
        "a first apply of 3 000 jobs writes a snapshot over the index threshold"
    );
    let p = dir.join("jobs.snapshot.jsonl");
    let mut b = std::fs::read(&p).unwrap();
    let key = b"{\"head\":{\"name\":\"j01000\"";
    let start = b.windows(key.len()).position(|w| w == key).unwrap();
    let line = b[..start].iter().filter(|c| **c == b'\n').count() + 1;
    let cmd = b"\"command\":\"";
    let at = start
        + b[start..]
            .windows(cmd.len())
            .position(|w| w == cmd)
            .unwrap()
        + cmd.len();
    b[at] ^= 0x01;
    std::fs::write(&p, &b).unwrap();
    let want = format!("jobs.snapshot.jsonl:{line}:");
    let before = bytes_of(&dir);
    for (args, code) in [
        (&["describe", "j00005"][..], 0),
        (&["history"], 0),
        (&["describe", "j01000"], 2),
        (&["jobs"], 2),
        (&["jobs", "--json"], 2),
        (&["check"], 2),
    ] {
        let (got, out, err) = cli(&dir, args);
        let text = format!("{out}{err}");
        assert_eq!(got, code, "{args:?}: {text}");
        if code == 2 {
            assert!(text.contains(&want), "{want} {args:?}: {text}");
            assert!(text.contains("checksum mismatch"), "{args:?}: {text}");
        }
        assert_eq!(bytes_of(&dir), before, "{args:?} changed the store");
    }
    // Without the index every open reads every line: refused whatever the command.
    std::fs::remove_file(dir.join("jobs.index")).unwrap();
    refused_unchanged(
        &dir,
        &[&["describe", "j00005"], &["history"], &["pause", "j00005"]],
        &[&want],
    );
}

/// `jobs.index` is derived data: deleted, stale (another snapshot's) or damaged, every command
/// still works (the open reads the snapshot instead), read-only ones write nothing, `check`
/// notes it without failing, and the next writer rewrites it.
#[test]
fn a_missing_stale_or_damaged_index_is_never_damage() {
    let root = support::tempdir("damage-index-derived");
    let dir = root.join("store");
    let s = FileStore::open(&dir).unwrap();
    let mut file = JobsFile {
        settings: Settings::default(),
        jobs: (0..3000)
            .map(|i| cronsole::testkit::jobs::command_job(&format!("j{i:05}"), 3600))
            .collect(),
    };
    s.apply(&file, stored(&file)).unwrap();
    let ipath = dir.join("jobs.index");
    let old = std::fs::read(&ipath).unwrap();
    // Every job changed: a new snapshot (and index) of the next generation.
    for j in &mut file.jobs {
        j.max_retries += 1;
    }
    s.apply(&file, stored(&file)).unwrap();
    drop(s);
    let current = std::fs::read(&ipath).unwrap();
    assert_ne!(old, current, "the second apply wrote a new index");
    let mut flipped = current.clone();
    flipped[current.len() / 3] ^= 0x04;
    let (_, listing, _) = cli(&dir, &["jobs", "--json"]);
    for (what, bytes) in [
        ("missing", None),
        ("stale", Some(&old)),
        ("damaged", Some(&flipped)),
    ] {
        match bytes {
            Some(b) => std::fs::write(&ipath, b).unwrap(),
            None => std::fs::remove_file(&ipath).unwrap(),
        }
        let before = bytes_of(&dir);
        let (code, out, err) = cli(&dir, &["jobs", "--json"]);
        assert_eq!(code, 0, "{what}: {err}");
        assert_eq!(out, listing, "{what}: the same jobs");
        let (code, out, err) = cli(&dir, &["check"]);
        assert_eq!(code, 0, "{what}: {out}{err}");
        if bytes.is_some() {
            assert!(out.contains("jobs.index"), "{what}: {out}");
        }
        assert_eq!(bytes_of(&dir), before, "{what}: a read-only command wrote");
        // `pause` writes a journal line and leaves the index alone (it opens as readers do).
        let (code, out, err) = cli(&dir, &["pause", "j00007"]);
        assert_eq!(code, 0, "{what}: {out}{err}");
        assert_eq!(std::fs::read(&ipath).ok().as_ref(), bytes, "{what}");
        let (code, out, err) = cli(&dir, &["resume", "j00007"]);
        assert_eq!(code, 0, "{what}: {out}{err}");
        // A writer's open (`run`, `apply`: `FileStore::open`) rewrites it.
        drop(FileStore::open(&dir).unwrap());
        assert_eq!(
            std::fs::read(&ipath).unwrap(),
            current,
            "{what}: the writer rewrote the index"
        );
    }
}

/// `line` (a job line) with its CRC-32 recomputed, as a careful hand edit would leave it.
fn recrc(line: &str) -> String {
    const KEY: &str = ",\"crc32\":\"";
    let at = line.rfind(KEY).expect("a checksummed line");
    let body = format!("{}}}", &line[..at]);
    format!(
        "{}{KEY}{:08x}\"}}",
        &line[..at],
        filefmt::crc32(body.as_bytes())
    )
}

/// A job line whose head names another job (CRC recomputed) passes the open's cheap checks;
/// the claim that reads it finds the damage. Treated as an outage, `run` would retry forever
/// and exit 0 having run nothing; damage is not retryable: `run` stops, exit 2,
/// naming the file and line.
#[test]
fn run_stops_with_exit_2_when_a_claim_finds_the_store_damaged() {
    let root = support::tempdir("damage-claim");
    let dir = root.join("store");
    {
        let s = FileStore::open(&dir).unwrap();
        let file = JobsFile {
            settings: Settings::default(),
            jobs: vec![
                cronsole::testkit::jobs::command_job("hourly", 3600),
                cronsole::testkit::jobs::command_job("tick", 1),
            ],
        };
        s.apply(&file, chrono::Utc::now()).unwrap();
    }
    let jpath = dir.join("jobs.journal");
    let text = std::fs::read_to_string(&jpath).unwrap();
    let mut lines: Vec<String> = text.split('\n').map(str::to_string).collect();
    let tick = "{\"head\":{\"name\":\"tick\"";
    let i = lines
        .iter()
        .rposition(|l| l.starts_with(tick))
        .expect("tick's line");
    lines[i] = recrc(&lines[i].replacen(tick, "{\"head\":{\"name\":\"hourly\"", 1));
    std::fs::write(&jpath, lines.join("\n")).unwrap();
    let (code, _out, err) = cli(&dir, &["run", "--for", "20s"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("damaged"), "{err}");
    assert!(
        err.contains(&format!("jobs.journal:{}:", i + 1)),
        "names the line: {err}"
    );
}

/// A store with several sealed history segments (segments of 2 KiB).
fn segmented(name: &str) -> (TempDir, PathBuf) {
    let root = support::tempdir(&format!("damage-{name}"));
    let dir = root.join("store");
    let s = FileStore::open(&dir).unwrap().with_segment_bytes(2048);
    let file = JobsFile {
        settings: Settings::default(),
        jobs: vec![
            cronsole::testkit::jobs::command_job("a", 60),
            cronsole::testkit::jobs::command_job("b", 60),
        ],
    };
    s.apply(&file, stored(&file)).unwrap();
    for k in 0..30 {
        for c in s.claim_at(t(k * 60), "o", 5).claims {
            s.finish_claim(&c, "o", Status::Succeeded, t(k * 60 + 1));
        }
    }
    assert!(dir.join("history").join("000003.jsonl").exists());
    (root, dir)
}

/// Deleting the oldest sealed segment with no retention configured must not read as sound
/// (every command would go on without its rows). Without
/// retention's mark sealed segments start at 1: the open refuses the store naming the
/// segment (every byte unchanged) and `check` reports it.
#[test]
fn a_deleted_oldest_segment_that_retention_did_not_remove_is_damage() {
    let (_root, dir) = segmented("seg1");
    std::fs::remove_file(dir.join("history").join("000001.jsonl")).unwrap();
    let tree = |d: &Path| {
        let mut m = bytes_of_files(d);
        m.extend(
            bytes_of_files(&d.join("history"))
                .into_iter()
                .map(|(k, v)| (format!("history/{k}"), v)),
        );
        m
    };
    let before = tree(&dir);
    let (code, out, err) = cli(&dir, &["check"]);
    assert_ne!(code, 0, "{out}{err}");
    assert!(
        format!("{out}{err}").contains("000001.jsonl"),
        "names the segment: {out}{err}"
    );
    for args in [&["jobs"][..], &["history"], &["run", "--for", "1s"]] {
        let (code, out, err) = cli(&dir, args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains("000001.jsonl"), "{args:?}: {err}");
    }
    assert_eq!(tree(&dir), before, "every byte unchanged");
}

/// The regular files of `dir` (not its subdirectories) and their bytes.
fn bytes_of_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

/// Retention that removes the oldest segments marks the first it kept: the store stays sound,
/// and deleting that first kept segment by hand is still damage.
#[test]
fn retention_marks_the_first_kept_segment_and_a_later_deletion_is_still_damage() {
    let (_root, dir) = segmented("seg-ret");
    {
        let s = FileStore::open(&dir).unwrap();
        s.compact_history(3, None, t(100_000)).unwrap();
    }
    assert!(!dir.join("history").join("000001.jsonl").exists());
    let (code, out, err) = cli(&dir, &["check"]);
    assert_eq!(code, 0, "{out}{err}");
    let first = (1..100)
        .find(|k| dir.join("history").join(format!("{k:06}.jsonl")).exists())
        .expect("a kept sealed segment");
    std::fs::remove_file(dir.join("history").join(format!("{first:06}.jsonl"))).unwrap();
    let (code, out, err) = cli(&dir, &["check"]);
    assert_ne!(code, 0, "{out}{err}");
    let (code, _out, err) = cli(&dir, &["jobs"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&format!("{first:06}.jsonl")), "{err}");
}

/// Upgrading: a store an earlier release sealed has no retention mark, and its retention may
/// have removed the oldest segments. Readers accept it as it is (every byte unchanged), `check`
/// says what it cannot tell apart, and the first writer records the oldest segment there as
/// the first kept one — after which deleting that segment is damage, as on a store this
/// release sealed.
#[test]
fn an_earlier_release_s_trimmed_store_is_adopted_and_then_guarded() {
    let (_root, dir) = segmented("seg-old");
    let hdir = dir.join("history");
    // What an earlier release left: no mark, the oldest segment removed by its retention.
    std::fs::remove_file(hdir.join("first.json")).unwrap();
    std::fs::remove_file(hdir.join("000001.jsonl")).unwrap();
    let before = bytes_of_files(&hdir);
    for args in [&["jobs"][..], &["history"], &["check"]] {
        let (code, out, err) = cli(&dir, args);
        assert_eq!(code, 0, "{args:?}: {out}{err}");
    }
    assert_eq!(bytes_of_files(&hdir), before, "readers changed nothing");
    drop(FileStore::open(&dir).unwrap());
    let mark = std::fs::read_to_string(hdir.join("first.json")).expect("the writer's mark");
    assert!(mark.contains("\"segment\":2"), "{mark}");
    std::fs::remove_file(hdir.join("000002.jsonl")).unwrap();
    let (code, _out, err) = cli(&dir, &["jobs"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("000002.jsonl"), "{err}");
}

/// Task SMALL item 3: the operator's writing commands (`pause`, `resume`, `trigger`, `retry`,
/// `cancel`, `backfill`) adopt an earlier release's trimmed store as `apply` and `run` do: the
/// first of them to open it records the oldest segment there as the first kept one, so a later
/// deletion of that segment is damage even when no engine or `apply` ran on the store since.
#[test]
fn an_operator_command_that_writes_adopts_an_earlier_release_s_trimmed_store() {
    for args in [&["pause", "a"][..], &["trigger", "a"], &["resume", "a"]] {
        let (_root, dir) = segmented("seg-old-op");
        let hdir = dir.join("history");
        std::fs::remove_file(hdir.join("first.json")).unwrap();
        std::fs::remove_file(hdir.join("000001.jsonl")).unwrap();
        let (code, out, err) = cli(&dir, args);
        assert_eq!(code, 0, "{args:?}: {out}{err}");
        let mark = std::fs::read_to_string(hdir.join("first.json"))
            .unwrap_or_else(|e| panic!("{args:?} wrote no mark: {e}"));
        assert!(mark.contains("\"segment\":2"), "{args:?}: {mark}");
        std::fs::remove_file(hdir.join("000002.jsonl")).unwrap();
        let (code, _out, err) = cli(&dir, &["jobs"]);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("000002.jsonl"), "{args:?}: {err}");
    }
}

/// A directory that holds none of a store's files is no store, not a damaged one: `check` says
/// "no cronsole store" (exit 2) as the other read-only commands do, and writes nothing into it
/// (no `lock` file either).
#[test]
fn check_of_a_directory_that_is_no_store_says_so_and_writes_nothing() {
    let root = support::tempdir("damage-not-a-store");
    let dir = root.join("d");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("notes.txt"), "mine").unwrap();
    for args in [
        &["check"][..],
        &["check", "--json"],
        &["jobs"],
        &["history"],
    ] {
        let (code, out, err) = cli(&dir, args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains("no cronsole store at"), "{args:?}: {err}");
        assert!(
            !err.contains("damaged") && !out.contains("damaged"),
            "{out}{err}"
        );
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["notes.txt"], "{args:?} wrote into the directory");
    }
}

//! File store benchmark. Run: `cargo bench --bench store` (release build). Prints median / p99
//! per phase at N = 1 000 and 10 000 jobs, then the history read at launch; figures go to
//! docs/BENCHMARKS.md "File store".
//!
//! `cargo bench --bench store -- compaction` runs only the compaction section (sizes from
//! `STORE_COMPACT_SIZES`, default `10000`; `10000,1000000` for the large one): a store of N
//! jobs, 1 000 of them due, whose journal is filled (by re-applies that change fewer than half
//! the jobs, each one journal append) to just below the size that makes the next write compact
//! it. Then, while a second handle claims with nothing due in a loop (its own lock each time, as
//! another owner would), one claim takes the 1 000 due jobs: its append crosses the compaction
//! threshold. Printed: that claim's latency, the time until the new snapshot is in place, and
//! the other handle's claim latencies meanwhile (count, median, p99, max: how long an owner
//! waited on the compaction).
#![allow(clippy::unwrap_used)] // test code

use std::path::PathBuf;
use std::time::{Duration, Instant};

use cronsole::model::{Action, HistoryRow, JobDef, Status};
use cronsole::store::file::FileStore;
use cronsole::store::{ClaimRequest, Completion, HistoryReader, Store};

fn def(name: String) -> JobDef {
    JobDef {
        action: Action::Command {
            command: "echo hi".into(),
            timeout_seconds: 60.0,
        },
        max_retries: 3,
        lease_seconds: 600.0,
        ..cronsole::testkit::jobs::command_job(&name, 3600)
    }
}

use cronsole::testkit::internals::store::filefmt;
use cronsole::testkit::stats::percentile;
use cronsole::testkit::time::base as t;
use cronsole::testkit::tmp::TempDir;

fn stats(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let med = ms(percentile(&v, 0.5));
    let p99 = ms(percentile(&v, 0.99));
    (med, p99)
}

/// This thread's time on a CPU and waiting for one, in ns (`/proc/thread-self/schedstat`; zeros
/// where it is not available): what a claim's wall time was besides waiting for the disk.
fn sched() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let mut f = text
        .split_whitespace()
        .map(|x| x.parse::<u64>().unwrap_or(0));
    (f.next().unwrap_or(0), f.next().unwrap_or(0))
}

/// One claim's wall time split: on a CPU, waiting for one, and the rest (blocked: the disk),
/// with the journal bytes it appended.
fn split(wall: Duration, before: (u64, u64), journal_bytes: u64) -> String {
    let (cpu, runq) = sched();
    let ms = |ns: u64| ns as f64 / 1e6;
    let (on, wait) = (ms(cpu - before.0), ms(runq - before.1));
    let wall = wall.as_secs_f64() * 1e3;
    format!(
        "{wall:.2} ms (on a CPU {on:.2} ms, waiting for one {wait:.2} ms, blocked {:.2} ms; {:.2} MB appended to the journal)",
        (wall - on - wait).max(0.0),
        journal_bytes as f64 / 1e6
    )
}

fn main() {
    let base = std::env::var("BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir());
    if std::env::args().skip(1).any(|a| a == "compaction") {
        let sizes = std::env::var("STORE_COMPACT_SIZES").unwrap_or_else(|_| "10000".into());
        for n in sizes.split(',').filter_map(|x| x.trim().parse().ok()) {
            compaction(&base, n);
        }
        return;
    }
    if std::env::args().skip(1).any(|a| a == "claims") {
        let sizes = std::env::var("STORE_CLAIM_SIZES").unwrap_or_else(|_| "10000".into());
        let reps = std::env::var("STORE_CLAIM_REPS")
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or(20);
        for n in sizes.split(',').filter_map(|x| x.trim().parse().ok()) {
            claims(&base, n, reps);
        }
        return;
    }
    for n in [1_000usize, 10_000] {
        let dir = TempDir::new_in(&base, &format!("bench-store-{n}"));
        let store = FileStore::open(&dir).expect("open store");
        let due = 1_000.min(n);
        // add: one job at a time (fsync included); the first `due` jobs are due at t(3 600).
        let mut adds = Vec::with_capacity(n);
        for i in 0..n {
            let now = if i < due { t(0) } else { t(100) };
            let d = def(format!("job-{i:05}"));
            let s = Instant::now();
            store.upsert_job(&d, now).expect("add");
            adds.push(s.elapsed());
        }
        let (am, ap) = stats(adds);
        // claim: one call that takes the `due` due jobs (an hour after they were stored; the
        // others are due 100 s later).
        let journal = dir.join("jobs.journal");
        let (j0, t0) = (file_len(&journal), sched());
        let s = Instant::now();
        let out = store
            .claim_due(&ClaimRequest {
                now: t(3_650),
                owner: "bench",
                limit: due,
                in_flight: &[],
                clock_stepped: None,
                max_offset: None,
            })
            .expect("claim");
        let claim = split(s.elapsed(), t0, file_len(&journal) - j0);
        assert_eq!(out.claims.len(), due);
        // idle claim: nothing due, nothing changed.
        let mut idle = Vec::new();
        for _ in 0..2000 {
            let s = Instant::now();
            let o = store
                .claim_due(&ClaimRequest {
                    now: t(3_660),
                    owner: "bench",
                    limit: 10,
                    in_flight: &[],
                    clock_stepped: None,
                    max_offset: None,
                })
                .expect("idle claim");
            idle.push(s.elapsed());
            assert!(o.claims.is_empty());
        }
        let (im, ip) = stats(idle);
        // complete each claimed job.
        let mut comps = Vec::with_capacity(due);
        for c in &out.claims {
            let row = HistoryRow::new(
                &c.job.def.name,
                Status::Succeeded,
                c.trigger,
                c.slot,
                "bench",
                t(3_661),
            );
            let s = Instant::now();
            store
                .complete(Completion {
                    job: c.job.def.name.clone(),
                    run_id: c.run_id,
                    owner: "bench".into(),
                    now: t(3_661),
                    row,
                    state: None,
                    hold_until: None,
                })
                .expect("complete");
            comps.push(s.elapsed());
        }
        let (cm, cp) = stats(comps);
        println!(
            "N={n:>6}  add median {am:.3} ms p99 {ap:.3} ms | claim {due} due {claim} | idle claim median {:.1} µs p99 {:.1} µs | complete median {cm:.3} ms p99 {cp:.3} ms",
            im * 1000.0,
            ip * 1000.0
        );
        drop(store);
    }
    history_million(&base);
}

/// The console at launch: open a store whose history has 1 000 000 rows and read the newest
/// 200 rows, and the newest 50 of one job (target ≤ 300 ms: the console must
/// open at once).
fn history_million(base: &std::path::Path) {
    use cronsole::store::HistoryQuery;
    use std::io::Write;
    let dir = TempDir::new_in(base, "bench-history");
    drop(FileStore::open(&dir).expect("open"));
    {
        let f = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join("history.jsonl"))
            .expect("history file");
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
        let mut buf = Vec::with_capacity(512);
        for i in 0..1_000_000i64 {
            let mut row = HistoryRow::new(
                &format!("job-{:04}", i % 1000),
                if i % 7 == 0 {
                    Status::Failed
                } else {
                    Status::Succeeded
                },
                cronsole::model::Trigger::Schedule,
                Some(t(i)),
                "bench",
                t(i),
            );
            row.result = Some("ok".into());
            // Format 2: each row carries its checksum (store/filefmt.rs).
            buf.clear();
            filefmt::encode_row(&mut buf, &row).expect("row");
            w.write_all(&buf).expect("row");
        }
        w.flush().expect("flush");
    }
    let size = std::fs::metadata(dir.join("history.jsonl"))
        .map(|m| m.len())
        .unwrap_or(0);
    let mut runs = Vec::new();
    for _ in 0..5 {
        let s = Instant::now();
        let store = FileStore::open(&dir).expect("open");
        let newest = store
            .history(&HistoryQuery {
                limit: 200,
                ..Default::default()
            })
            .expect("q");
        let one = store
            .history(&HistoryQuery {
                job: Some("job-0007".into()),
                limit: 50,
                ..Default::default()
            })
            .expect("q");
        runs.push(s.elapsed());
        assert_eq!((newest.len(), one.len()), (200, 50));
    }
    let (m, p) = stats(runs);
    println!(
        "history 1 000 000 rows ({} MiB): open + newest 200 + newest 50 of one job: median {m:.2} ms, max {p:.2} ms",
        size >> 20
    );
}

/// Jobs of the compaction bench: `job-NNNNNNN`; the first 1 000 `every 1h` (due an hour after
/// they are stored), the others `every 30d`; `rev` changes the command (a re-apply's change).
fn compaction_def(i: usize, rev: u32) -> JobDef {
    let every = if i < 1_000 { 3_600 } else { 30 * 86_400 };
    JobDef {
        action: Action::Command {
            command: format!("echo {rev}"),
            timeout_seconds: 60.0,
        },
        lease_seconds: 600.0,
        ..cronsole::testkit::jobs::command_job(&format!("job-{i:07}"), every)
    }
}

fn file_len(p: &std::path::Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

fn inode(p: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).map(|m| m.ino()).unwrap_or(0)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// See the module doc: a claim whose append crosses the compaction threshold, and another
/// owner's claims while the compaction runs.
fn compaction(base: &std::path::Path, n: usize) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = TempDir::new_in(base, &format!("bench-compact-{n}"));
    let store = FileStore::open(&dir).expect("open store");
    let settings = cronsole::model::Settings::default();
    // Each job's command revision as stored: a re-apply bumps `k` of them.
    let mut revs = vec![0u32; n];
    let apply = |revs: &[u32]| {
        store
            .apply_each(
                &settings,
                &mut |sink| {
                    for (i, rev) in revs.iter().enumerate() {
                        sink(compaction_def(i, *rev))?;
                    }
                    Ok(())
                },
                t(0),
            )
            .expect("apply")
    };
    let s0 = Instant::now();
    apply(&revs);
    let snap = dir.join("jobs.snapshot.jsonl");
    let journal = dir.join("jobs.journal");
    // The jobs this claim takes are 1 000 lines appended at once; the journal is filled to
    // half of that below the threshold (twice the snapshot plus 1 MiB).
    let threshold = 2 * file_len(&snap) + (1 << 20);
    let line = file_len(&snap) / n as u64;
    let claim_bytes = line * 1_000;
    let target = threshold - claim_bytes / 2;
    let mut applies = 0;
    let mut next = 1_000usize; // re-applies change idle jobs, round-robin
    while file_len(&journal) + line < target {
        let room = (target - file_len(&journal)) / line.max(1);
        // Fewer than half the jobs: a journal append, not a new snapshot.
        let k = (room as usize * 9 / 10).min((n - 1_000) / 2 - 1).max(1);
        for j in 0..k {
            revs[1_000 + (next - 1_000 + j) % (n - 1_000)] += 1;
        }
        next = 1_000 + (next - 1_000 + k) % (n - 1_000);
        apply(&revs);
        applies += 1;
    }
    let (jlen, slen) = (file_len(&journal), file_len(&snap));
    println!(
        "compaction, N={n}: store built in {:.1} s ({applies} re-applies): snapshot {:.1} MB, journal {:.1} MB, threshold {:.1} MB; load {}",
        s0.elapsed().as_secs_f64(),
        slen as f64 / 1e6,
        jlen as f64 / 1e6,
        threshold as f64 / 1e6,
        loadavg()
    );
    let before = inode(&snap);
    let stop = AtomicBool::new(false);
    let other = FileStore::open_existing(&dir).expect("second handle");
    let (claim, waits, swapped, started, claimed) = std::thread::scope(|sc| {
        let h = sc.spawn(|| {
            let mut waits = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let s = Instant::now();
                other
                    .claim_due(&ClaimRequest {
                        now: t(60),
                        owner: "other",
                        limit: 8,
                        in_flight: &[],
                        clock_stepped: None,
                        max_offset: None,
                    })
                    .expect("other's claim");
                waits.push((s, s.elapsed()));
                std::thread::sleep(Duration::from_millis(2));
            }
            waits
        });
        std::thread::sleep(Duration::from_millis(200));
        let (j0, t0) = (file_len(&journal), sched());
        let s = Instant::now();
        let out = store
            .claim_due(&ClaimRequest {
                now: t(3_650),
                owner: "bench",
                limit: 1_000,
                in_flight: &[],
                clock_stepped: None,
                max_offset: None,
            })
            .expect("claim");
        let claim = s.elapsed();
        let claimed = Instant::now();
        let claim_split = split(claim, t0, file_len(&journal).saturating_sub(j0));
        assert_eq!(out.claims.len(), 1_000);
        // The compaction is over when the new snapshot is in place (a background one may
        // still be writing it when the claim returns).
        while inode(&snap) == before && s.elapsed() < Duration::from_secs(600) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let swapped = s.elapsed();
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, Ordering::Relaxed);
        (claim_split, h.join().expect("other"), swapped, s, claimed)
    });
    longest_waits(&waits, started, claimed, swapped);
    let waits: Vec<Duration> = waits.into_iter().map(|(_, d)| d).collect();
    let max = waits.iter().max().copied().unwrap_or_default();
    let count = waits.len();
    let (med, p99) = stats(waits);
    println!(
        "compaction, N={n}: claim of 1 000 due with a compaction pending {claim}; new snapshot in place after {:.2} s ({:.1} MB); other owner's {count} claims meanwhile: median {med:.3} ms, p99 {p99:.3} ms, max {:.2} ms; load {}",
        swapped.as_secs_f64(),
        file_len(&snap) as f64 / 1e6,
        max.as_secs_f64() * 1e3,
        loadavg()
    );
}

/// `claims`: a store of `n` jobs (the compaction bench's: 1 000 `every 1h`, the rest `every 30d`),
/// then `reps` times, an hour apart: one claim that takes the 1 000 due jobs, and their
/// completions as one batch. Printed: the claims' wall times (median, max) and where the time
/// went on average (on a CPU, waiting for one, blocked), and the journal bytes each appended.
fn claims(base: &std::path::Path, n: usize, reps: usize) {
    let dir = TempDir::new_in(base, &format!("bench-claims-{n}"));
    let store = FileStore::open(&dir).expect("open store");
    let s0 = Instant::now();
    store
        .apply_each(
            &cronsole::model::Settings::default(),
            &mut |sink| (0..n).try_for_each(|i| sink(compaction_def(i, 0))),
            t(0),
        )
        .expect("apply");
    let built = s0.elapsed();
    let journal = dir.join("jobs.journal");
    let (mut walls, mut on, mut wait, mut bytes) = (Vec::new(), 0u64, 0u64, 0u64);
    for r in 0..reps {
        let now = t(3_650 + 3_600 * r as i64);
        let (j0, t0) = (file_len(&journal), sched());
        let s = Instant::now();
        let out = store
            .claim_due(&ClaimRequest {
                now,
                owner: "bench",
                limit: 1_000,
                in_flight: &[],
                clock_stepped: None,
                max_offset: None,
            })
            .expect("claim");
        walls.push(s.elapsed());
        let t1 = sched();
        (on, wait) = (on + t1.0 - t0.0, wait + t1.1 - t0.1);
        bytes += file_len(&journal).saturating_sub(j0);
        assert_eq!(out.claims.len(), 1_000);
        let done = now + chrono::Duration::seconds(1);
        let cs = out
            .claims
            .iter()
            .map(|c| Completion {
                job: c.job.def.name.clone(),
                run_id: c.run_id,
                owner: "bench".into(),
                now: done,
                row: HistoryRow::new(
                    &c.job.def.name,
                    Status::Succeeded,
                    c.trigger,
                    c.slot,
                    "bench",
                    done,
                ),
                state: None,
                hold_until: None,
            })
            .collect();
        for r in store.complete_many(cs) {
            r.expect("complete");
        }
    }
    let k = reps.max(1) as f64;
    let max = walls.iter().max().copied().unwrap_or_default();
    let (med, _) = stats(walls.clone());
    let mean = walls.iter().map(Duration::as_secs_f64).sum::<f64>() * 1e3 / k;
    let (on, wait) = (on as f64 / 1e6 / k, wait as f64 / 1e6 / k);
    println!(
        "claims, N={n} (built in {:.1} s): {reps} claims of 1 000 due: median {med:.2} ms, max {:.2} ms; mean {mean:.2} ms = on a CPU {on:.2} ms + waiting for one {wait:.2} ms + blocked {:.2} ms; {:.2} MB appended each; load {}",
        built.as_secs_f64(),
        max.as_secs_f64() * 1e3,
        (mean - on - wait).max(0.0),
        bytes as f64 / 1e6 / k,
        loadavg()
    );
}

/// Where the other owner's longest waits fell, against the crossing claim's end and the swap
/// (seconds from the crossing claim's start; negative: before it).
fn longest_waits(
    waits: &[(Instant, Duration)],
    started: Instant,
    claimed: Instant,
    swapped: Duration,
) {
    let rel = |i: Instant| {
        i.saturating_duration_since(started).as_secs_f64()
            - started.saturating_duration_since(i).as_secs_f64()
    };
    let mut longest = waits.to_vec();
    longest.sort_by_key(|(_, d)| std::cmp::Reverse(*d));
    println!(
        "  the crossing claim ended at {:+.3} s, the swap at {:+.3} s; longest waits:",
        rel(claimed),
        swapped.as_secs_f64()
    );
    for (at, d) in longest.iter().take(5) {
        println!(
            "  {:.2} ms from {:+.3} s to {:+.3} s",
            d.as_secs_f64() * 1e3,
            rel(*at),
            rel(*at + *d)
        );
    }
}

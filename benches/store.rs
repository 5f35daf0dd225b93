//! File store benchmark (SPEC §14.1 speed targets). Run:
//! `cargo bench --bench store` (release build). Prints median / p99 per phase at N = 1 000 and
//! 10 000 jobs; figures go to docs/BENCHMARKS.md "File store".

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

fn main() {
    let base = std::env::var("BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir());
    for n in [1_000usize, 10_000] {
        let dir = TempDir::new_in(&base, &format!("bench-store-{n}"));
        let store = FileStore::open(&dir).expect("open store");
        let due = 1_000.min(n);
        // add: one job at a time (fsync included); the first `due` jobs are due at t(50).
        let mut adds = Vec::with_capacity(n);
        for i in 0..n {
            let now = if i < due { t(0) } else { t(100) };
            let d = def(format!("job-{i:05}"));
            let s = Instant::now();
            store.upsert_job(&d, now).expect("add");
            adds.push(s.elapsed());
        }
        let (am, ap) = stats(adds);
        // claim: one call that takes the `due` due jobs.
        let s = Instant::now();
        let out = store
            .claim_due(&ClaimRequest {
                now: t(50),
                owner: "bench",
                limit: due,
                in_flight: &[],
            })
            .expect("claim");
        let claim_ms = s.elapsed().as_secs_f64() * 1000.0;
        assert_eq!(out.claims.len(), due);
        // idle claim: nothing due, nothing changed.
        let mut idle = Vec::new();
        for _ in 0..2000 {
            let s = Instant::now();
            let o = store
                .claim_due(&ClaimRequest {
                    now: t(60),
                    owner: "bench",
                    limit: 10,
                    in_flight: &[],
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
                t(61),
            );
            let s = Instant::now();
            store
                .complete(Completion {
                    job: c.job.def.name.clone(),
                    run_id: c.run_id,
                    owner: "bench".into(),
                    now: t(61),
                    row,
                    state: None,
                    hold_until: None,
                })
                .expect("complete");
            comps.push(s.elapsed());
        }
        let (cm, cp) = stats(comps);
        println!(
            "N={n:>6}  add median {am:.3} ms p99 {ap:.3} ms | claim {due} due {claim_ms:.2} ms | idle claim median {:.1} µs p99 {:.1} µs | complete median {cm:.3} ms p99 {cp:.3} ms",
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
            cronsole::store::filefmt::encode_row(&mut buf, &row).expect("row");
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

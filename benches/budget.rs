//! Budget reservation path per model call (what keeps the budget a hard
//! limit under simultaneous calls): `reserve` + `settle`
//! on the file store (fsync included) and on PostgreSQL, at 100 and 1 000 jobs, and what a
//! global budget, and a stream of reservations beside it, cost PostgreSQL claims/s. The target is "far below a model call":
//! ≤ 1 ms per reservation on the file store.
//!
//! Run: `cargo bench --bench budget` (uses `CRONSOLE_TEST_PG_URL` if set, else starts a throwaway
//! cluster with initdb; without PostgreSQL only the file store is measured). `BENCH_DIR` moves
//! the file store's directory (e.g. onto the disk under test). Figures go to
//! docs/BENCHMARKS.md "Budget reservations".
#![allow(clippy::unwrap_used)] // test code

#[path = "../tests/support/pg.rs"]
mod pg;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use cronsole::model::{Budget, BudgetPeriod, JobDef, JobsFile, Settings};
use cronsole::store::{ClaimRequest, Store};
use cronsole::store::{ReserveOutcome, ReserveRequest, Settlement};
use cronsole::testkit::stats::percentile;

const CALLS: usize = 500;

fn def(name: String) -> JobDef {
    JobDef {
        lease_seconds: 300.0,
        ..cronsole::testkit::jobs::command_job(&name, 3600)
    }
}

fn jobs_file(n: usize) -> JobsFile {
    JobsFile {
        settings: Settings {
            // The largest budget a store takes (`max_cost_usd` is bounded at $1 000 000): never
            // reached by the bench's $0.01 calls, each released at once.
            budget: Some(Budget {
                max_cost_usd: 1_000_000.0,
                period: BudgetPeriod::Day,
            }),
            ..Settings::default()
        },
        jobs: (0..n).map(|i| def(format!("job{i:05}"))).collect(),
    }
}

fn now() -> DateTime<Utc> {
    "2026-11-30T12:00:00Z"
        .parse()
        .unwrap_or_else(|_| Utc::now())
}

fn pct(v: &mut [Duration], q: f64) -> f64 {
    v.sort();
    percentile(v, q).as_secs_f64() * 1e3
}

/// `CALLS` reserve + settle pairs spread over the jobs; prints median / p99 of each.
fn per_call(name: &str, store: &dyn Store, n: usize) {
    store.apply(&jobs_file(n), now()).expect("apply");
    let run_id = uuid::Uuid::new_v4();
    let (mut res, mut set) = (Vec::with_capacity(CALLS), Vec::with_capacity(CALLS));
    for i in 0..CALLS {
        let job = format!("job{:05}", i % n);
        let t = Instant::now();
        let out = store
            .reserve(&ReserveRequest {
                job: &job,
                run_id,
                owner: "bench",
                usd: 0.01,
                now: now(),
            })
            .expect("reserve");
        res.push(t.elapsed());
        let ReserveOutcome::Reserved { id } = out else {
            panic!("refused under a $1 000 000 budget: {out:?}");
        };
        let t = Instant::now();
        store
            .settle(&job, id, Settlement::Release, now())
            .expect("settle");
        set.push(t.elapsed());
    }
    println!(
        "{name:<8} jobs={n:>5}: reserve median {:.3} ms p99 {:.3} ms | settle median {:.3} ms p99 {:.3} ms ({CALLS} calls)",
        pct(&mut res, 0.5),
        pct(&mut res, 0.99),
        pct(&mut set, 0.5),
        pct(&mut set, 0.99),
    );
}

/// Claims/s of 4 owners over `jobs` due jobs, under the global budget or with none, with or
/// without a fifth thread reserving and releasing in a loop; returns (claims/s, reservations
/// made meanwhile).
fn claims_per_sec(
    open: &(dyn Fn() -> Arc<dyn Store> + Sync),
    jobs: usize,
    (budgeted, reserving): (bool, bool),
) -> (f64, usize) {
    let setup = open();
    // Each job fires as soon as it is stored: due at the claims on whichever clock the store
    // decides by (PostgreSQL stores on the database's, whatever instant is passed).
    let mut file = jobs_file(jobs);
    for j in &mut file.jobs {
        j.run_immediately = true;
    }
    if !budgeted {
        file.settings.budget = None;
    }
    setup.apply(&file, now()).expect("apply");
    let owners: Vec<Arc<dyn Store>> = (0..4).map(|_| open()).collect();
    let reserver = open();
    let stop = AtomicBool::new(false);
    let made = AtomicUsize::new(0);
    let start = Instant::now();
    let names: Vec<String> = std::thread::scope(|s| {
        if reserving {
            s.spawn(|| {
                let run_id = uuid::Uuid::new_v4();
                let mut i = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let job = format!("job{:05}", i % jobs);
                    i += 1;
                    if let Ok(ReserveOutcome::Reserved { id }) = reserver.reserve(&ReserveRequest {
                        job: &job,
                        run_id,
                        owner: "reserver",
                        usd: 0.01,
                        now: now(),
                    }) {
                        let _ = reserver.settle(&job, id, Settlement::Release, now());
                        made.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        let hs: Vec<_> = owners
            .iter()
            .enumerate()
            .map(|(i, st)| {
                s.spawn(move || {
                    let owner = format!("owner{i}");
                    let mut names = Vec::new();
                    loop {
                        let o = st
                            .claim_due(&ClaimRequest {
                                now: now(),
                                owner: &owner,
                                limit: 32,
                                in_flight: &[],
                                clock_stepped: None,
                                max_offset: None,
                            })
                            .expect("claim");
                        if o.claims.is_empty() {
                            break;
                        }
                        names.extend(o.claims.into_iter().map(|c| c.job.def.name));
                    }
                    names
                })
            })
            .collect();
        let all: Vec<String> = hs
            .into_iter()
            .flat_map(|h| h.join().expect("owner"))
            .collect();
        stop.store(true, Ordering::Relaxed);
        all
    });
    let secs = start.elapsed().as_secs_f64();
    let distinct: HashSet<&String> = names.iter().collect();
    assert_eq!(distinct.len(), names.len(), "duplicate claims");
    assert_eq!(names.len(), jobs, "every job claimed once");
    (names.len() as f64 / secs, made.load(Ordering::Relaxed))
}

fn main() {
    let base = std::env::var("BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir());
    for n in [100usize, 1_000] {
        let dir = cronsole::testkit::tmp::TempDir::new_in(&base, &format!("bench-budget-{n}"));
        let store = cronsole::store::file::FileStore::open(&dir).expect("open file store");
        per_call("file", &store, n);
        drop(store);
    }
    let _cluster;
    let server = match std::env::var("CRONSOLE_TEST_PG_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => match pg::Cluster::start() {
            Ok(c) => {
                let u = c.url.clone();
                _cluster = c;
                Some(u)
            }
            Err(e) => {
                eprintln!("PostgreSQL not available ({e}); only the file store was measured");
                None
            }
        },
    };
    let Some(server) = server else {
        return;
    };
    let fresh = || {
        let db = format!("cronsole_bench_{}", uuid::Uuid::new_v4().simple());
        pg::exec(&server, &format!("CREATE DATABASE {db}")).expect("create database");
        pg::with_db(&server, &db)
    };
    for n in [100usize, 1_000] {
        let store = cronsole::store::postgres::PgStore::open(&fresh()).expect("open pg");
        per_call("postgres", &store, n);
    }
    let jobs = 2_000;
    // Three rounds, the variants interleaved: on a shared machine the load drifts, so each
    // round's ratio to its own unbudgeted figure is the comparison.
    for round in 1..=3 {
        for variant in [(false, false), (true, false), (true, true)] {
            let url = fresh();
            let open = move || {
                Arc::new(cronsole::store::postgres::PgStore::open(&url).expect("open pg"))
                    as Arc<dyn Store>
            };
            let (rate, made) = claims_per_sec(&open, jobs, variant);
            let what = match variant {
                (false, _) => "no budget".to_string(),
                (true, false) => "under a global budget".to_string(),
                (true, true) => format!(
                    "under a global budget, a reserve+release loop beside them ({made} \
                     reservations meanwhile)"
                ),
            };
            println!(
                "postgres round {round} jobs={jobs} owners=4 limit=32: {rate:.0} claims/s, {what}"
            );
        }
    }
}

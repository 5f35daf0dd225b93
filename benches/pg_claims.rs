//! Claims per second with 4 owners sharing one store of 10 000 due jobs:
//! PostgreSQL store (target ≥ 5 000 claims/s with the server's durability defaults, 0
//! duplicates) and the file store beside it.
//!
//! Each owner is a thread with its own store handle (its own connection pool, or its own file
//! store handle on the shared directory), the way separate processes would be. Every owner loops
//! `claim_due(limit)` until the store has nothing due; we count claims, duplicates (a job claimed
//! twice) and time per `claim_due` call.
//!
//! Run: `cargo bench --bench pg_claims` (uses `CRONSOLE_TEST_PG_URL` if set, else starts two
//! throwaway clusters with initdb: PostgreSQL's durability defaults, the same with
//! `synchronous_commit=off`, and fsync/synchronous_commit/full_page_writes off). `PG_CLAIMS_JOBS`
//! and `PG_CLAIMS_LIMIT` override the defaults.
#![allow(clippy::unwrap_used)] // test code

#[path = "../tests/support/pg.rs"]
mod pg;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use cronsole::model::{JobDef, JobsFile};
use cronsole::store::{ClaimRequest, Store};
use cronsole::testkit::stats::percentile;

fn def(name: String) -> JobDef {
    JobDef {
        lease_seconds: 300.0,
        ..cronsole::testkit::jobs::command_job(&name, 3600)
    }
}

fn env_usize(k: &str, d: usize) -> usize {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

struct Result {
    claims: usize,
    dups: usize,
    secs: f64,
    median: Duration,
    p99: Duration,
}

fn bench(open: &(dyn Fn() -> Arc<dyn Store> + Sync), jobs: usize, limit: usize) -> Result {
    let now: DateTime<Utc> = "2026-01-01T00:00:00Z"
        .parse()
        .unwrap_or_else(|_| Utc::now());
    let setup = open();
    let file = JobsFile {
        settings: Default::default(),
        jobs: (0..jobs).map(|i| def(format!("job{i:05}"))).collect(),
    };
    setup.apply(&file, now).expect("apply");
    let owners: Vec<Arc<dyn Store>> = (0..4).map(|_| open()).collect();
    let start = Instant::now();
    let results: Vec<(Vec<String>, Vec<Duration>)> = std::thread::scope(|s| {
        let hs: Vec<_> = owners
            .iter()
            .enumerate()
            .map(|(i, st)| {
                s.spawn(move || {
                    let owner = format!("owner{i}");
                    let (mut names, mut lat) = (Vec::new(), Vec::new());
                    loop {
                        let t = Instant::now();
                        let o = st
                            .claim_due(&ClaimRequest {
                                now,
                                owner: &owner,
                                limit,
                                in_flight: &[],
                                clock_stepped: None,
                                max_offset: None,
                            })
                            .expect("claim");
                        lat.push(t.elapsed());
                        if o.claims.is_empty() {
                            break;
                        }
                        names.extend(o.claims.into_iter().map(|c| c.job.def.name));
                    }
                    (names, lat)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("owner")).collect()
    });
    let secs = start.elapsed().as_secs_f64();
    let mut all = Vec::new();
    let mut lat = Vec::new();
    for (n, l) in results {
        all.extend(n);
        lat.extend(l);
    }
    let distinct: HashSet<&String> = all.iter().collect();
    lat.sort();
    let pick = |q: f64| percentile(&lat, q);
    Result {
        claims: all.len(),
        dups: all.len() - distinct.len(),
        secs,
        median: pick(0.5),
        p99: pick(0.99),
    }
}

fn report(name: &str, jobs: usize, limit: usize, r: &Result) {
    println!(
        "{name:<17} jobs={jobs} owners=4 limit={limit}: {} claims in {:.2} s = {:.0} claims/s, \
         duplicates {}, claim_due median {:.1} ms p99 {:.1} ms",
        r.claims,
        r.secs,
        r.claims as f64 / r.secs,
        r.dups,
        r.median.as_secs_f64() * 1e3,
        r.p99.as_secs_f64() * 1e3
    );
}

fn main() {
    let jobs = env_usize("PG_CLAIMS_JOBS", 10_000);
    let limits = match std::env::var("PG_CLAIMS_LIMIT")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(l) => vec![l],
        None => vec![1, 32],
    };
    // Two throwaway clusters: PostgreSQL's durability defaults, and fsync/synchronous_commit/
    // full_page_writes off (the settings of older recorded figures, for comparison).
    // CRONSOLE_TEST_PG_URL replaces both with one server whose settings are whatever it has.
    let mut clusters = Vec::new();
    let mut servers: Vec<(&str, String)> = Vec::new();
    match std::env::var("CRONSOLE_TEST_PG_URL") {
        Ok(u) if !u.is_empty() => servers.push(("pg (given)", u)),
        _ => {
            for (name, mode) in [
                ("pg durable", 0),
                ("pg synccommitoff", 1),
                ("pg fsyncoff", 2),
            ] {
                let c = match mode {
                    0 => pg::Cluster::start_durable(),
                    // fsync and full_page_writes on: a server crash loses the last commits
                    // (never corrupts); the trade-off a user may choose per role/database.
                    1 => pg::Cluster::start_durable_with(" -c synchronous_commit=off"),
                    _ => pg::Cluster::start(),
                };
                match c {
                    Ok(c) => {
                        servers.push((name, c.url.clone()));
                        clusters.push(c);
                    }
                    Err(e) => {
                        eprintln!(
                            "PostgreSQL not available ({e}); only the file store is measured"
                        );
                        break;
                    }
                }
            }
        }
    }
    for &limit in &limits {
        for (name, server) in &servers {
            let db = format!("cronsole_bench_{}", uuid::Uuid::new_v4().simple());
            pg::exec(server, &format!("CREATE DATABASE {db}")).expect("create database");
            let url = pg::with_db(server, &db);
            let open = move || {
                Arc::new(cronsole::store::postgres::PgStore::open(&url).expect("open pg"))
                    as Arc<dyn Store>
            };
            let r = bench(&open, jobs, limit);
            report(name, jobs, limit, &r);
            assert_eq!(r.dups, 0, "duplicate claims");
            assert_eq!(r.claims, jobs, "every job claimed once");
        }
        let dir = cronsole::testkit::tmp::TempDir::new("bench-claims");
        let d2 = dir.to_path_buf();
        let open = move || {
            Arc::new(cronsole::store::file::FileStore::open(&d2).expect("open file store"))
                as Arc<dyn Store>
        };
        let r = bench(&open, jobs, limit);
        report("file", jobs, limit, &r);
        assert_eq!(r.dups, 0, "duplicate claims");
    }
}

//! One owner's lease renewals on PostgreSQL: `PG_RENEW_LEASES` leases (default 200) renewed as
//! one batch (`Store::renew_many`: one transaction) beside the same leases renewed one
//! transaction each (`Store::renew` per lease, what a batch cost before it was one
//! transaction). Reports the time per round of renewals (median and p99 of `PG_RENEW_ROUNDS`
//! rounds, default 20) and the commits per round (steps of the store version).
//!
//! Run: `cargo bench --bench pg_renew` (uses `CRONSOLE_TEST_PG_URL` if set, else starts a
//! throwaway cluster with initdb and PostgreSQL's durability defaults).
#![allow(clippy::unwrap_used)] // bench code

#[path = "../tests/support/pg.rs"]
mod pg;

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use cronsole::model::{JobDef, JobsFile};
use cronsole::store::postgres::{PgClock, PgOptions, PgStore};
use cronsole::store::{ClaimRequest, RenewOutcome, Renewal, Store};
use cronsole::testkit::stats::percentile;

fn env_usize(k: &str, d: usize) -> usize {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

/// The store version (one step per commit), on a connection of its own.
fn version(url: &str) -> i64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        let h = tokio::spawn(conn);
        let v: i64 = client
            .query_one("SELECT last_value FROM cronsole_store_version", &[])
            .await
            .unwrap()
            .get(0);
        drop(client);
        let _ = h.await;
        v
    })
}

/// Time `rounds` rounds of `round`; the commits one round made (from the last round).
fn measure(url: &str, rounds: usize, mut round: impl FnMut(DateTime<Utc>)) -> (Vec<Duration>, i64) {
    let t0: DateTime<Utc> = "2026-01-01T00:02:00Z".parse().unwrap();
    let mut took = Vec::new();
    let mut commits = 0;
    for i in 0..rounds {
        let now = t0 + chrono::Duration::seconds(i as i64);
        let before = version(url);
        let start = Instant::now();
        round(now);
        took.push(start.elapsed());
        commits = version(url) - before;
    }
    took.sort();
    (took, commits)
}

fn main() {
    let leases = env_usize("PG_RENEW_LEASES", 200);
    let rounds = env_usize("PG_RENEW_ROUNDS", 20);
    let mut _cluster = None;
    let server = match std::env::var("CRONSOLE_TEST_PG_URL") {
        Ok(u) if !u.is_empty() => u,
        _ => {
            let c = pg::Cluster::start_durable().expect("a PostgreSQL cluster (initdb)");
            let u = c.url.clone();
            _cluster = Some(c);
            u
        }
    };
    let db = format!("cronsole_bench_{}", uuid::Uuid::new_v4().simple());
    pg::exec(&server, &format!("CREATE DATABASE {db}")).expect("create database");
    let url = pg::with_db(&server, &db);
    // The caller's clock: every lease claimed at one instant and renewed from later ones.
    let opts = PgOptions {
        clock: PgClock::Caller,
        ..Default::default()
    };
    let s = PgStore::open_with(&url, opts).expect("open pg");
    let t0: DateTime<Utc> = "2026-01-01T00:00:00Z".parse().unwrap();
    let jobs: Vec<JobDef> = (0..leases)
        .map(|i| JobDef {
            lease_seconds: 3600.0,
            ..cronsole::testkit::jobs::command_job(&format!("r{i:05}"), 60)
        })
        .collect();
    s.apply(
        &JobsFile {
            settings: Default::default(),
            jobs,
        },
        t0,
    )
    .expect("apply");
    let claims = s
        .claim_due(&ClaimRequest {
            now: t0 + chrono::Duration::seconds(60),
            owner: "bench",
            limit: leases,
            in_flight: &[],
            clock_stepped: None,
            max_offset: None,
        })
        .expect("claim")
        .claims;
    assert_eq!(claims.len(), leases, "every job claimed");
    let batch = |now: DateTime<Utc>| -> Vec<Renewal> {
        claims
            .iter()
            .map(|c| Renewal {
                job: c.job.def.name.clone(),
                run_id: c.run_id,
                now,
            })
            .collect()
    };
    let renewed = |o: &cronsole::store::StoreResult<RenewOutcome>| {
        assert!(matches!(o, Ok(RenewOutcome::Renewed { .. })), "{o:?}");
    };
    let (each, each_commits) = measure(&url, rounds, |now| {
        for r in batch(now) {
            renewed(&s.renew(&r.job, r.run_id, r.now));
        }
    });
    let (one, one_commits) = measure(&url, rounds, |now| {
        s.renew_many(&batch(now)).iter().for_each(renewed);
    });
    for (name, took, commits) in [
        ("one transaction per lease", each, each_commits),
        ("one transaction per batch", one, one_commits),
    ] {
        println!(
            "{leases} leases, {name}: median {:.1} ms, p99 {:.1} ms per round, {commits} commits per round",
            percentile(&took, 0.5).as_secs_f64() * 1000.0,
            percentile(&took, 0.99).as_secs_f64() * 1000.0,
        );
    }
}

//! PostgreSQL at scale: does a claim cost the same with 10 000 and with
//! 1 000 000 jobs in the store? And what does the claim query's plan look like at both sizes?
//!
//! Each size gets its own database on one throwaway cluster (fast settings: fsync off, so the
//! figures are the query's cost, not the disk's): `DUE` jobs (`every 1h`, all due at the bench's
//! instant) plus idle jobs (`every 30d`, next slot a month away) up to the total. The idle jobs
//! are copies of one real record made in SQL (`jsonb_set` of the name), because building a
//! million through `apply` is `benches/million_jobs.sh`'s
//! measure, not this one's. Then, per size:
//! `EXPLAIN (ANALYZE, BUFFERS)` of the claim's locked select and of `next_wakeup`, one owner
//! claiming every due job with `claim_due(limit 32)` (latency per call, 0 duplicates), and idle
//! `claim_due`/`next_wakeup` latency once nothing is due. With `PG_SCALE_BIN` (the release
//! `cronsole` binary) it also runs `cronsole run --for 5s` on each store and reports its peak RSS.
//!
//! Run: `cargo bench --bench pg_scale` (`PG_SCALE_SIZES=10000,1000000` and `PG_SCALE_DUE=2000`
//! override the defaults; `CRONSOLE_TEST_PG_URL` replaces the throwaway cluster).
#![allow(clippy::unwrap_used)] // test code

#[path = "../tests/support/pg.rs"]
mod pg;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use cronsole::model::{JobDef, JobsFile, Status};
use cronsole::store::postgres::PgStore;
use cronsole::store::{ClaimRequest, Completion, Store};

fn job(name: &str, every: u64) -> JobDef {
    JobDef {
        lease_seconds: 300.0,
        ..cronsole::testkit::jobs::command_job(name, every)
    }
}

fn sql_rows(url: &str, sql: &str) -> Vec<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .expect("connect");
        let h = tokio::spawn(conn);
        let mut out = Vec::new();
        for m in client.simple_query(sql).await.expect(sql) {
            if let tokio_postgres::SimpleQueryMessage::Row(r) = m {
                out.push(r.get(0).unwrap_or("").to_string());
            }
        }
        drop(client);
        let _ = h.await;
        out
    })
}

fn quantiles(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let pick = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1e3;
    (pick(0.5), pick(0.99))
}

/// A store of `total` jobs, `due` of them due at `t`; returns its URL.
fn build(server: &str, total: usize, due: usize, t: DateTime<Utc>) -> String {
    let db = format!("cronsole_scale_{}", uuid::Uuid::new_v4().simple());
    pg::exec(server, &format!("CREATE DATABASE {db}")).expect("create database");
    let url = pg::with_db(server, &db);
    let s = PgStore::open(&url).expect("open");
    let month = 30 * 86_400;
    // The idle template: applied and run once an hour before `t`, so its next slot is a month on.
    let before = t - chrono::Duration::hours(1);
    let tmpl = JobsFile {
        settings: Default::default(),
        jobs: vec![job("tmpl", month)],
    };
    s.apply(&tmpl, before).expect("apply template");
    let c = s
        .claim_due(&ClaimRequest {
            now: before,
            owner: "setup",
            limit: 1,
            in_flight: &[],
            clock_stepped: None,
            max_offset: None,
        })
        .expect("claim template");
    for c in c.claims {
        let row = cronsole::model::HistoryRow::new(
            "tmpl",
            Status::Succeeded,
            c.trigger,
            c.slot,
            "setup",
            before,
        );
        s.complete(Completion {
            job: "tmpl".into(),
            run_id: c.run_id,
            owner: "setup".into(),
            now: before,
            row,
            state: None,
            hold_until: None,
        })
        .expect("complete template");
    }
    let mut jobs = vec![job("tmpl", month)];
    jobs.extend((0..due).map(|i| job(&format!("due{i:06}"), 3600)));
    s.apply(
        &JobsFile {
            settings: Default::default(),
            jobs,
        },
        t,
    )
    .expect("apply due jobs");
    let copies = total.saturating_sub(due + 1);
    let start = Instant::now();
    pg::exec(
        &url,
        &format!(
            "INSERT INTO cronsole_jobs (name, record, next_slot, lease_owner, lease_until, run_id,
                 paused, enabled, retired, trigger_requested_at, hold_until, recovery_pending,
                 wakeup, updated_at)
             SELECT n, jsonb_set(record, '{{def,name}}', to_jsonb(n)), next_slot, lease_owner,
                 lease_until, run_id, paused, enabled, retired, trigger_requested_at, hold_until,
                 recovery_pending, wakeup, updated_at
             FROM cronsole_jobs, LATERAL (SELECT 'idle' || lpad(g::text, 7, '0') AS n
                                          FROM generate_series(1, {copies}) g) x
             WHERE name = 'tmpl'"
        ),
    )
    .expect("bulk insert");
    pg::exec(&url, "VACUUM ANALYZE cronsole_jobs").expect("vacuum analyze");
    eprintln!(
        "  built {total} jobs ({due} due) in {:.1} s (bulk copy of the idle ones)",
        start.elapsed().as_secs_f64()
    );
    url
}

fn measure(url: &str, total: usize, due: usize, t: DateTime<Utc>) {
    let ts = t.to_rfc3339();
    println!("\n### {total} jobs ({due} due)\n");
    let size = sql_rows(
        url,
        "SELECT pg_size_pretty(pg_total_relation_size('cronsole_jobs')) || ' (jobs table with indexes and TOAST)'",
    );
    println!("size: {}", size.join(""));
    for (what, sql) in [
        (
            "claim: the locked select (limit 32)",
            format!(
                "BEGIN; EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT record FROM cronsole_jobs
                 WHERE wakeup <= '{ts}' AND NOT (name = ANY('{{}}'::text[]))
                 ORDER BY wakeup, name LIMIT 32 FOR UPDATE SKIP LOCKED; ROLLBACK"
            ),
        ),
        (
            "claim: the same select as the store runs it, a prepared statement, generic plan forced",
            format!(
                "SET plan_cache_mode = force_generic_plan;
                 PREPARE due(timestamptz, text[], int8) AS SELECT record FROM cronsole_jobs
                 WHERE wakeup <= $1 AND NOT (name = ANY($2)) ORDER BY wakeup, name LIMIT $3
                 FOR UPDATE SKIP LOCKED;
                 BEGIN; EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE due('{ts}', '{{}}', 32);
                 ROLLBACK"
            ),
        ),
        (
            "next_wakeup",
            "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT min(wakeup) FROM cronsole_jobs"
                .to_string(),
        ),
    ] {
        println!("\n{what}:\n```");
        for l in sql_rows(url, &sql) {
            println!("{l}");
        }
        println!("```");
    }
    let s = PgStore::open(url).expect("open");
    let mut lat = Vec::new();
    let mut names = Vec::new();
    let start = Instant::now();
    loop {
        let t0 = Instant::now();
        let o = s
            .claim_due(&ClaimRequest {
                now: t,
                owner: "o",
                limit: 32,
                in_flight: &[],
                clock_stepped: None,
                max_offset: None,
            })
            .expect("claim");
        lat.push(t0.elapsed());
        if o.claims.is_empty() {
            break;
        }
        names.extend(o.claims.into_iter().map(|c| c.job.def.name));
    }
    let secs = start.elapsed().as_secs_f64();
    let distinct: HashSet<&String> = names.iter().collect();
    assert_eq!(distinct.len(), names.len(), "duplicate claims");
    assert_eq!(names.len(), due, "every due job claimed once");
    let (m, p99) = quantiles(lat);
    println!(
        "\nclaim_due(limit 32), 1 owner: {} claims in {secs:.2} s = {:.0} claims/s; per call median {m:.2} ms, p99 {p99:.2} ms",
        names.len(),
        names.len() as f64 / secs
    );
    let mut idle = Vec::new();
    let mut wake = Vec::new();
    for _ in 0..200 {
        let t0 = Instant::now();
        let o = s
            .claim_due(&ClaimRequest {
                now: t,
                owner: "o",
                limit: 32,
                in_flight: &[],
                clock_stepped: None,
                max_offset: None,
            })
            .expect("idle claim");
        idle.push(t0.elapsed());
        assert!(o.claims.is_empty());
        let t0 = Instant::now();
        s.next_wakeup(t).expect("next_wakeup");
        wake.push(t0.elapsed());
    }
    let (im, ip) = quantiles(idle);
    let (wm, wp) = quantiles(wake);
    println!(
        "idle claim_due: median {im:.2} ms, p99 {ip:.2} ms; next_wakeup: median {wm:.2} ms, p99 {wp:.2} ms"
    );
    if let Ok(bin) = std::env::var("PG_SCALE_BIN") {
        let out = std::process::Command::new("/usr/bin/time")
            .args(["-f", "%M %e", &bin, "--store", url, "run", "--for", "5s"])
            .env("CRONSOLE_LOG", "warn")
            .output()
            .expect("run cronsole");
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().last().unwrap_or("");
        let mut it = last.split_whitespace();
        let kb: f64 = it.next().and_then(|v| v.parse().ok()).unwrap_or(f64::NAN);
        let wall: f64 = it.next().and_then(|v| v.parse().ok()).unwrap_or(f64::NAN);
        println!(
            "`cronsole run --for 5s` on this store: exit {:?}, peak RSS {:.1} MB, wall {wall:.1} s",
            out.status.code(),
            kb / 1024.0
        );
    }
}

fn main() {
    let sizes: Vec<usize> = std::env::var("PG_SCALE_SIZES")
        .unwrap_or_else(|_| "10000,1000000".into())
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    let due: usize = std::env::var("PG_SCALE_DUE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let t: DateTime<Utc> = "2026-01-01T00:00:00Z"
        .parse()
        .unwrap_or_else(|_| Utc::now());
    let _cluster;
    let server = match std::env::var("CRONSOLE_TEST_PG_URL") {
        Ok(u) if !u.is_empty() => u,
        _ => match pg::Cluster::start() {
            Ok(c) => {
                let u = c.url.clone();
                _cluster = c;
                u
            }
            Err(e) => {
                eprintln!("PostgreSQL not available ({e}); nothing to measure");
                return;
            }
        },
    };
    for &n in &sizes {
        let url = build(&server, n, due.min(n.saturating_sub(1)), t);
        measure(&url, n, due.min(n.saturating_sub(1)), t);
        let db = url.rsplit('/').next().unwrap_or("").to_string();
        let _ = pg::exec(&server, &format!("DROP DATABASE IF EXISTS {db}"));
    }
}

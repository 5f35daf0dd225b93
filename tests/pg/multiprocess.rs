//! Several OS processes claiming on one PostgreSQL database: one run per
//! (job, slot), no duplicates, load shared, and kill -9 of an owner recovered once its lease
//! expires.
//!
//! The workers are this test executable itself, re-run with `--exact multiprocess::worker
//! --ignored` and instructions in environment variables, so each one is a real separate process
//! with its own connections, exactly like owners on different hosts.
#![allow(clippy::unwrap_used)] // test code

use crate::conformance;
use crate::pg_db_or_skip;
use crate::support;

use cronsole::testkit::store::{ClaimAt, FinishClaim, claim_row};
use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use cronsole::model::{Status, Trigger};
use cronsole::store::postgres::PgStore;
use cronsole::store::{ClaimRequest, HistoryQuery, HistoryReader, Store};

const ENV_URL: &str = "CRONSOLE_PG_WORKER_URL";
const ENV_OWNER: &str = "CRONSOLE_PG_WORKER_OWNER";
const ENV_UNTIL: &str = "CRONSOLE_PG_WORKER_UNTIL";
const ENV_MODE: &str = "CRONSOLE_PG_WORKER_MODE";

fn spawn_worker(url: &str, owner: &str, until: DateTime<Utc>, mode: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "multiprocess::worker",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ENV_URL, url)
        .env(ENV_OWNER, owner)
        .env(ENV_UNTIL, until.to_rfc3339())
        .env(ENV_MODE, mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// A worker process: claims with its free capacity every 50 ms and completes each run after
/// ~150 ms (mode "run"), or claims and never completes (mode "hang", to be killed with -9).
#[test]
#[ignore = "worker process for the multi-process tests (run by them as a child process)"]
fn worker() {
    let Ok(url) = std::env::var(ENV_URL) else {
        return;
    };
    let owner = std::env::var(ENV_OWNER).unwrap();
    let until: DateTime<Utc> = std::env::var(ENV_UNTIL).unwrap().parse().unwrap();
    let hang = std::env::var(ENV_MODE).is_ok_and(|m| m == "hang");
    let store: Arc<dyn Store> = Arc::new(PgStore::open(&url).unwrap());
    let in_flight: Arc<Mutex<Vec<String>>> = Arc::default();
    let capacity = 10;
    while Utc::now() < until {
        let busy = in_flight.lock().unwrap().clone();
        let free = capacity - busy.len().min(capacity);
        let out = store.claim_due(&ClaimRequest {
            now: Utc::now(),
            owner: &owner,
            limit: if hang { 100 } else { free },
            in_flight: &busy,
            clock_stepped: None,
            max_offset: None,
        });
        let out = match out {
            Ok(o) => o,
            Err(e) => {
                eprintln!("{owner}: claim failed: {e}");
                continue;
            }
        };
        for c in out.claims {
            println!("claimed {} {}", c.job.def.name, c.run_id);
            if hang {
                continue;
            }
            in_flight.lock().unwrap().push(c.job.def.name.clone());
            let (store, in_flight, owner) =
                (Arc::clone(&store), Arc::clone(&in_flight), owner.clone());
            std::thread::spawn(move || {
                // The run itself.
                std::thread::sleep(Duration::from_millis(150));
                let now = Utc::now();
                let mut row = claim_row(&c, &owner, Status::Succeeded, now);
                row.started_at = c.job.rt.lease.as_ref().map_or(now, |l| l.claimed_at);
                store.finish_row(&c, row);
                in_flight.lock().unwrap().retain(|n| *n != c.job.def.name);
            });
        }
        // The owner's claim pace.
        std::thread::sleep(Duration::from_millis(50));
    }
    // Let the last runs finish.
    support::wait::poll_until(Duration::from_secs(10), || {
        in_flight.lock().unwrap().is_empty()
    });
    if hang {
        // A hung owner: it holds its leases until it is killed.
        std::thread::sleep(Duration::from_secs(3600));
    }
}

#[test]
fn four_processes_forty_jobs_every_second_no_duplicates_load_shared() {
    let url = pg_db_or_skip!();
    let store = PgStore::open(&url).unwrap();
    let start = Utc::now();
    let defs = (0..40)
        .map(|i| {
            let mut d = conformance::every(&format!("job{i:02}"), 1);
            d.lease_seconds = 10.0;
            d
        })
        .collect();
    store.apply(&conformance::file(defs), start).unwrap();
    let secs = 20;
    let until = start + chrono::Duration::seconds(secs);
    let kids: Vec<Child> = (0..4)
        .map(|i| spawn_worker(&url, &format!("w{i}"), until, "run"))
        .collect();
    for mut k in kids {
        assert!(k.wait().unwrap().success(), "a worker failed");
    }
    let rows = store.history(&HistoryQuery::default()).unwrap();
    let mut per_slot: BTreeMap<(String, DateTime<Utc>), u32> = BTreeMap::new();
    let mut per_owner: BTreeMap<String, u64> = BTreeMap::new();
    for r in &rows {
        assert!(!r.stale_lease, "no lease was lost: {r:?}");
        assert_eq!(r.status, Status::Succeeded, "{r:?}");
        *per_slot
            .entry((r.job.clone(), r.slot.unwrap()))
            .or_default() += 1;
        *per_owner.entry(r.owner.clone()).or_default() += 1;
    }
    let dups: Vec<_> = per_slot.iter().filter(|(_, n)| **n > 1).collect();
    assert!(dups.is_empty(), "duplicate runs: {dups:?}");
    let expected = 40 * secs as usize;
    eprintln!(
        "runs: {} of ~{expected} slots, 0 duplicates; per owner: {per_owner:?}",
        rows.len()
    );
    // Every job ran on (nearly) every slot: slots only coalesce when all owners stall > 1 s.
    assert!(rows.len() * 10 >= expected * 9, "{} runs", rows.len());
    assert_eq!(per_owner.len(), 4, "every owner took work: {per_owner:?}");
    for (o, n) in &per_owner {
        assert!(
            *n as usize * 10 >= rows.len(),
            "{o} took only {n} of {}",
            rows.len()
        );
    }
}

#[test]
fn kill_9_of_an_owner_is_recovered_as_abandoned() {
    let url = pg_db_or_skip!();
    let store = PgStore::open(&url).unwrap();
    let start = Utc::now();
    let mut rec = conformance::every("recurring", 3600);
    rec.lease_seconds = 2.0;
    let mut one = conformance::every("oneshot", 3600);
    one.lease_seconds = 2.0;
    one.max_runs = Some(1);
    // Both run when stored (the database's clock anchors them: no instant of the caller's
    // can put their first slot earlier).
    rec.run_immediately = true;
    one.run_immediately = true;
    store
        .apply(&conformance::file(vec![rec, one]), start)
        .unwrap();
    let mut victim = spawn_worker(
        &url,
        "victim",
        start + chrono::Duration::seconds(60),
        "hang",
    );
    let mut out = BufReader::new(victim.stdout.take().unwrap());
    let mut claimed = HashSet::new();
    let mut line = String::new();
    while claimed.len() < 2 {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "victim exited early");
        // The harness may print "test worker ... " before our first line.
        if let Some(rest) = line.trim().split_once("claimed ").map(|(_, r)| r) {
            let (_, id) = rest.split_once(' ').unwrap();
            claimed.insert(id.parse::<uuid::Uuid>().unwrap());
        }
    }
    victim.kill().unwrap(); // SIGKILL
    victim.wait().unwrap();
    // Nothing is re-offered before the lease expires.
    let early = store.claim_at(Utc::now(), "survivor", 10);
    assert!(early.claims.is_empty());
    // Until the dead owner's leases have lapsed, as the store records them.
    support::wait::wait_until("the leases to lapse", Duration::from_secs(30), || {
        store
            .jobs()
            .unwrap()
            .iter()
            .all(|j| j.rt.leases().all(|l| l.lease_until < Utc::now()))
    });
    let o = store.claim_at(Utc::now(), "survivor", 10);
    let abandoned: HashSet<uuid::Uuid> = o
        .rows
        .iter()
        .filter(|r| r.status == Status::Abandoned)
        .map(|r| r.run_id)
        .collect();
    assert_eq!(
        abandoned,
        claimed,
        "one abandoned row per lost run; history {:?}",
        store
            .history(&HistoryQuery::default())
            .unwrap()
            .iter()
            .map(|r| (
                &r.job,
                r.status,
                r.trigger,
                &r.owner,
                r.run_id,
                r.finished_at
            ))
            .collect::<Vec<_>>()
    );
    // One-shot: re-offered once with trigger recovery; recurring: waits for its next slot.
    assert_eq!(o.claims.len(), 1, "{:?}", o.claims);
    assert_eq!(o.claims[0].job.def.name, "oneshot");
    assert_eq!(o.claims[0].trigger, Trigger::Recovery);
    let r = store.job("recurring").unwrap().unwrap();
    assert!(r.rt.lease.is_none());
    assert!(r.rt.next_slot.unwrap() > Utc::now());
    let h = store.history(&HistoryQuery::default()).unwrap();
    assert_eq!(
        h.iter().filter(|r| r.status == Status::Abandoned).count(),
        2
    );
}

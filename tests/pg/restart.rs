//! PostgreSQL going away under a running owner: operations fail with a
//! retryable `BackendError::Database` while the server is down, the pool reconnects, runs that were
//! in flight complete after reconnection, no slot runs twice and no run is lost.
//!
//! Uses a private cluster (it is stopped and started), never the shared CI one.
#![allow(clippy::unwrap_used)] // test code

use crate::conformance;
use crate::support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use cronsole::model::{HistoryRow, Status};
use cronsole::store::postgres::PgStore;
use cronsole::store::{ClaimRequest, Completion, HistoryQuery, Store};

#[allow(clippy::too_many_lines)] // a test scenario reads best in one piece (see CONTRIBUTING.md)
#[test]
fn server_restart_during_runs_fails_then_recovers_without_duplicates_or_losses() {
    let Some(cluster) = support::pg::private_cluster() else {
        return;
    };
    support::pg::exec(&cluster.url, "CREATE DATABASE restart_test").unwrap();
    let url = support::pg::with_db(&cluster.url, "restart_test");
    let pg = Arc::new(PgStore::open(&url).unwrap());
    let store: Arc<dyn Store> = pg.clone();
    let defs = (0..10)
        .map(|i| {
            let mut d = conformance::every(&format!("j{i}"), 1);
            d.lease_seconds = 20.0;
            d
        })
        .collect();
    store.apply(&conformance::file(defs), Utc::now()).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let claim_errors = Arc::new(AtomicU64::new(0));
    let complete_errors = Arc::new(AtomicU64::new(0));
    let claimed: Arc<Mutex<Vec<uuid::Uuid>>> = Arc::default();
    let in_flight: Arc<Mutex<Vec<String>>> = Arc::default();
    let runs: Arc<Mutex<Vec<std::thread::JoinHandle<()>>>> = Arc::default();
    let owner = {
        let (store, stop, claim_errors, complete_errors, claimed, in_flight, runs) = (
            Arc::clone(&store),
            Arc::clone(&stop),
            Arc::clone(&claim_errors),
            Arc::clone(&complete_errors),
            Arc::clone(&claimed),
            Arc::clone(&in_flight),
            Arc::clone(&runs),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let busy = in_flight.lock().unwrap().clone();
                match store.claim_due(&ClaimRequest {
                    now: Utc::now(),
                    owner: "o",
                    limit: 20 - busy.len().min(20),
                    in_flight: &busy,
                    clock_stepped: None,
                    max_offset: None,
                }) {
                    Err(e) => {
                        // A down server is a retryable error (Database,
                        // or Unavailable while the pool backs off), never "rejected".
                        assert!(e.is_retryable() && !e.is_bad_input(), "{e:?}");
                        claim_errors.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(o) => {
                        for c in o.claims {
                            claimed.lock().unwrap().push(c.run_id);
                            in_flight.lock().unwrap().push(c.job.def.name.clone());
                            let (store, complete_errors, in_flight) = (
                                Arc::clone(&store),
                                Arc::clone(&complete_errors),
                                Arc::clone(&in_flight),
                            );
                            let h = std::thread::spawn(move || {
                                // The run itself: long enough that some straddle the outage.
                                std::thread::sleep(Duration::from_millis(1500));
                                let give_up = Instant::now() + Duration::from_secs(60);
                                loop {
                                    let now = Utc::now();
                                    let mut row = HistoryRow::new(
                                        &c.job.def.name,
                                        Status::Succeeded,
                                        c.trigger,
                                        c.slot,
                                        "o",
                                        now,
                                    );
                                    row.run_id = c.run_id;
                                    match store.complete(Completion {
                                        job: c.job.def.name.clone(),
                                        run_id: c.run_id,
                                        owner: "o".into(),
                                        now,
                                        row,
                                        state: None,
                                        hold_until: None,
                                    }) {
                                        Ok(out) => {
                                            assert!(!out.stale, "lease lost for {}", c.run_id);
                                            break;
                                        }
                                        Err(e) => {
                                            assert!(!e.is_bad_input(), "{e}");
                                            complete_errors.fetch_add(1, Ordering::SeqCst);
                                            assert!(
                                                Instant::now() < give_up,
                                                "never recovered: {e}"
                                            );
                                            // The engine's retry pace.
                                            std::thread::sleep(Duration::from_millis(200));
                                        }
                                    }
                                }
                                in_flight.lock().unwrap().retain(|n| *n != c.job.def.name);
                            });
                            runs.lock().unwrap().push(h);
                        }
                    }
                }
                // The owner's claim pace (a real engine waits for its next slot).
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };

    // Runs are in flight (each lasts 1.5 s) when the server stops.
    support::wait::wait_until("claims before the outage", Duration::from_secs(30), || {
        !claimed.lock().unwrap().is_empty()
    });
    cluster.stop().unwrap();
    let down = Utc::now();
    let err = store.jobs().expect_err("the server is down");
    assert!(err.is_retryable() && !err.is_bad_input(), "{err:?}");
    // The outage's length: long enough for claims and completions to fail and be retried.
    std::thread::sleep(Duration::from_secs(2));
    cluster.start_again().unwrap();
    let up = Utc::now();
    // A run of a slot after the given instant has succeeded: claims resumed.
    let resumed = |t: DateTime<Utc>| {
        store
            .history(&HistoryQuery::default())
            .unwrap_or_default()
            .iter()
            .any(|r| r.status == Status::Succeeded && r.slot.is_some_and(|s| s > t))
    };
    support::wait::wait_until("a run after the restart", Duration::from_secs(60), || {
        resumed(up)
    });
    // And a plain `pg_ctl restart -m fast` (connections cut, short outage) while runs are live.
    cluster.restart().unwrap();
    let up2 = Utc::now();
    support::wait::wait_until(
        "a run after pg_ctl restart",
        Duration::from_secs(60),
        || resumed(up2),
    );
    stop.store(true, Ordering::SeqCst);
    owner.join().unwrap();
    for h in std::mem::take(&mut *runs.lock().unwrap()) {
        h.join().unwrap();
    }

    let claimed = claimed.lock().unwrap().clone();
    let rows = store.history(&HistoryQuery::default()).unwrap();
    let mut per_slot: BTreeMap<(String, DateTime<Utc>), u32> = BTreeMap::new();
    for r in &rows {
        *per_slot
            .entry((r.job.clone(), r.slot.unwrap()))
            .or_default() += 1;
    }
    let dups: Vec<_> = per_slot.iter().filter(|(_, n)| **n > 1).collect();
    assert!(dups.is_empty(), "slots that ran twice: {dups:?}");
    for id in &claimed {
        assert!(
            rows.iter()
                .any(|r| r.run_id == *id && r.status == Status::Succeeded),
            "run {id} was claimed but its completion was lost"
        );
    }
    let ran_after = |t: DateTime<Utc>| {
        rows.iter()
            .filter(|r| r.status == Status::Succeeded && r.slot.is_some_and(|s| s > t))
            .count()
    };
    let after = ran_after(up);
    assert!(after > 0, "claims resumed after the restart");
    assert!(ran_after(up2) > 0, "claims resumed after pg_ctl restart");
    let straddled = rows
        .iter()
        .filter(|r| r.finished_at > up && r.slot.is_some_and(|s| s < down))
        .count();
    eprintln!(
        "runs {} (claimed {}), claim errors {}, completion retries {}, runs completed after \
         reconnection {straddled}",
        rows.len(),
        claimed.len(),
        claim_errors.load(Ordering::SeqCst),
        complete_errors.load(Ordering::SeqCst)
    );
    assert!(
        straddled > 0,
        "some in-flight runs completed after reconnection"
    );
    // The change feed reconnects as well (its retry backoff is at most 5 s).
    support::wait::wait_until("the listener to reconnect", Duration::from_secs(10), || {
        pg.listener_alive()
    });
}

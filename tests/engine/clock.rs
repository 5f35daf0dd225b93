//! An owner whose clock is further from the store's than its bound claims nothing and says so
//! (health, notice, its owner record), and resumes at the first heartbeat that finds its clock
//! back within the bound. The file store's clock is the file system's stamp on the owner's
//! record; the engine's clock here is a `ManualClock` set 40 s behind the real one.
#![allow(clippy::unwrap_used)] // test code

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration as StdDuration;

use crate::engine_support::{Rig, RigOpts, settle_engine, wait_until_async};
use chrono::Utc;

const YAML: &str = "jobs:\n  - name: tick\n    schedule: every 1s\n    command: \"true\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_whose_clock_is_off_claims_nothing_until_it_is_back() {
    let opts = RigOpts {
        start: Utc::now() - chrono::Duration::seconds(40),
        max_clock_offset: Some(StdDuration::from_secs(5)),
        ..Default::default()
    };
    let rig = Rig::start("clock-off", YAML, opts).await;
    let health = rig.handle.health.clone();
    wait_until_async("the clock refusal", StdDuration::from_secs(10), || {
        health.borrow().clock_refused.is_some()
    })
    .await;
    let h = health.borrow().clone();
    let why = h.claims_stopped_because().expect("a reason for /healthz");
    assert!(
        why.contains("behind the store's") && why.contains("5s"),
        "{why}"
    );
    let off = h.clock_offset_ms.expect("measured");
    assert!((-41_000..=-39_000).contains(&off), "offset {off} ms");
    // Nothing was claimed, not even the first due slot.
    settle_engine(&rig.handle).await;
    assert!(rig.rows("tick").is_empty(), "{:?}", rig.rows("tick"));
    let owners = rig.store.owners().unwrap();
    assert_eq!(owners.len(), 1, "{owners:?}");
    let rec = &owners[0].record;
    assert_eq!(rec.pid, std::process::id());
    assert!((rec.clock_offset_ms - off).abs() < 1000, "{rec:?} vs {off}");
    assert!(
        rec.claims_stopped
            .as_deref()
            .is_some_and(|s| s.contains("clock")),
        "{rec:?}"
    );
    // The clock is fixed: the next heartbeat (within 5 s) resumes claiming.
    rig.clock.set(Utc::now());
    rig.wait_rows("tick", 1).await;
    assert!(health.borrow().clock_refused.is_none());
    assert!(health.borrow().claims_stopped_because().is_none());
    rig.stop().await;
}

/// With no bound (`--max-clock-offset off`, one host whose clock is the store's), an owner
/// whose clock is in fact a minute ahead of the store's (leases 30 s) would read every live
/// lease as expired and take its run over: it claims nothing, and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_bound_an_owner_ahead_by_more_than_a_lease_claims_nothing() {
    let opts = RigOpts {
        start: Utc::now() + chrono::Duration::seconds(60),
        max_clock_offset: None,
        ahead_limit: Some(StdDuration::from_secs(30)),
        ..Default::default()
    };
    let rig = Rig::start("clock-ahead-off", YAML, opts).await;
    let health = rig.handle.health.clone();
    wait_until_async("the clock refusal", StdDuration::from_secs(10), || {
        health.borrow().clock_refused.is_some()
    })
    .await;
    let why = health.borrow().claims_stopped_because().expect("a reason");
    assert!(
        why.contains("ahead of the store's") && why.contains("--max-clock-offset says (even off)"),
        "{why}"
    );
    settle_engine(&rig.handle).await;
    assert!(rig.rows("tick").is_empty(), "{:?}", rig.rows("tick"));
    rig.stop().await;
}

/// An owner whose clock is an hour ahead applies the jobs, claims nothing (it is ahead of the
/// store's by more than a lease), and is set right: the jobs it stored an hour ahead, which
/// never ran, start from the clock now (their first slots an interval on, not an hour), an
/// `until` job runs in its real window, and a `run_immediately` job runs at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_stored_by_an_owner_an_hour_ahead_run_from_the_clock_set_right() {
    let real = Utc::now();
    let until =
        (real + chrono::Duration::minutes(10)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let yaml = format!(
        "jobs:\n  - name: e\n    schedule: every 2s\n    command: \"true\"\n  \
         - name: u\n    schedule: every 2s\n    until: \"{until}\"\n    command: \"true\"\n  \
         - name: ri\n    schedule: every 1h\n    run_immediately: true\n    command: \"true\"\n"
    );
    let ahead = real + chrono::Duration::hours(1);
    let opts = RigOpts {
        start: ahead,
        stored: Some(ahead),
        max_clock_offset: None,
        ahead_limit: Some(StdDuration::from_secs(30)),
        ..Default::default()
    };
    let rig = Rig::start("clock-created-ahead", &yaml, opts).await;
    let health = rig.handle.health.clone();
    wait_until_async("the clock refusal", StdDuration::from_secs(10), || {
        health.borrow().clock_refused.is_some()
    })
    .await;
    rig.clock.set(Utc::now());
    wait_until_async("claims resumed", StdDuration::from_secs(15), || {
        health.borrow().clock_refused.is_none()
    })
    .await;
    // The first slots of `e` and `u`, stored again from the clock now, are 2 s on.
    rig.advance(3);
    for job in ["e", "u", "ri"] {
        let rows = rig.wait_rows(job, 1).await;
        let slot = rows[0].slot.expect("a scheduled slot");
        assert!(
            slot < Utc::now() + chrono::Duration::minutes(1),
            "{job} ran for {slot}, on the clock ahead"
        );
    }
    rig.stop().await;
}

/// A run in flight when its owner's clock steps 40 s back (its lease 2 s): the owner stops
/// claiming, but its renewals extend the lease from the store's clock as its last heartbeat
/// read it, carried on the monotonic clock, so the lease never looks ended to an owner on the
/// store's clock (which would record the run `abandoned` and run the one-shot again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_after_a_step_back_extend_the_lease_on_the_stores_clock() {
    // The command marks that it started: the run reads its start before it spawns it, so a
    // step after the mark is a step during the run.
    let started = std::env::temp_dir().join(format!(
        "cronsole-clock-renew-{}-{}",
        std::process::id(),
        Utc::now().timestamp_nanos_opt().unwrap_or_default()
    ));
    let yaml = format!(
        "jobs:\n  - name: once\n    schedule: every 1h\n    run_immediately: true\n    \
         max_runs: 1\n    lease_seconds: 2\n    command: \"touch '{}'; sleep 4\"\n",
        started.display()
    );
    let opts = RigOpts {
        start: Utc::now(),
        max_clock_offset: Some(StdDuration::from_secs(1)),
        ..Default::default()
    };
    let rig = Rig::start("clock-renew", &yaml, opts).await;
    // The engine's clock follows the real one, `behind` ms behind.
    let behind = Arc::new(AtomicI64::new(0));
    let ticker = {
        let (clock, behind) = (rig.clock.clone(), Arc::clone(&behind));
        tokio::spawn(async move {
            loop {
                let b = chrono::Duration::milliseconds(behind.load(Ordering::SeqCst));
                clock.set(Utc::now() - b);
                // The clock driver's tick.
                tokio::time::sleep(StdDuration::from_millis(20)).await;
            }
        })
    };
    let lease = || {
        rig.store
            .job("once")
            .unwrap()
            .and_then(|r| r.rt.leases().next().map(|l| l.lease_until))
    };
    wait_until_async("the run's command", StdDuration::from_secs(10), || {
        started.exists()
    })
    .await;
    let _ = std::fs::remove_file(&started);
    behind.store(40_000, Ordering::SeqCst);
    // Until the run's row lands, every lease read ends after the real now.
    let mut renewed = std::collections::BTreeSet::new();
    while rig.rows("once").is_empty() {
        if let Some(until) = lease() {
            assert!(until > Utc::now(), "lease ended {until} before now");
            renewed.insert(until);
        }
        // The sampling pace of the lease reads (each one is asserted).
        tokio::time::sleep(StdDuration::from_millis(50)).await;
    }
    assert!(renewed.len() >= 3, "renewed after the step: {renewed:?}");
    ticker.abort();
    let rows = rig.settle("once").await;
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(rows[0].status, cronsole::model::Status::Succeeded);
    // About 40 s (the ticker's last reading before the step was up to 20 ms old).
    let step = rows[0].clock_stepped.as_deref().unwrap_or_default();
    assert!(["-39s", "-40s"].contains(&step), "{rows:#?}");
    // The row never ends before it starts: its end is its start plus the time that passed.
    let r = &rows[0];
    // About the 4 s the command sleeps; its clock starts once the child is spawned, so a few
    // milliseconds of the sleep may pass before it.
    assert!(r.duration_ms >= 3_900, "{r:#?}");
    assert_eq!(
        (r.finished_at - r.started_at).num_milliseconds(),
        r.duration_ms as i64,
        "{r:#?}"
    );
    // The heartbeat after the step (every 5 s, maybe after the run ended) stops claims.
    let health = rig.handle.health.clone();
    wait_until_async("the clock refusal", StdDuration::from_secs(10), || {
        health.borrow().clock_refused.is_some()
    })
    .await;
    rig.stop().await;
}

/// This owner's clock alone steps two days ahead (the store's clock does not move): the claim
/// the step wakes comes after a heartbeat that measures the new offset, so nothing is claimed
/// on the stepped clock — the hourly job's first slot, an hour away, does not run early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_of_this_owners_clock_alone_is_measured_before_the_claim_it_wakes() {
    let yaml = "jobs:\n  - name: hourly\n    schedule: every 1h\n    command: \"true\"\n";
    let now = Utc::now();
    let opts = RigOpts {
        start: now,
        stored: Some(now),
        max_clock_offset: Some(StdDuration::from_secs(5)),
        ..Default::default()
    };
    let rig = Rig::start("clock-step-alone", yaml, opts).await;
    // The engine's clock moves on with real time (wall and monotonic together).
    let ticker = {
        let clock = rig.clock.clone();
        tokio::spawn(async move {
            let mut last = std::time::Instant::now();
            loop {
                // The clock driver's tick.
                tokio::time::sleep(StdDuration::from_millis(20)).await;
                let passed = last.elapsed();
                last += passed;
                clock.advance(chrono::Duration::from_std(passed).unwrap());
            }
        })
    };
    settle_engine(&rig.handle).await;
    let health = rig.handle.health.clone();
    assert!(health.borrow().clock_refused.is_none());
    rig.clock.step(chrono::Duration::days(2));
    wait_until_async("the clock refusal", StdDuration::from_secs(10), || {
        health.borrow().clock_refused.is_some()
    })
    .await;
    assert!(
        rig.settle("hourly").await.is_empty(),
        "claimed on the stepped clock"
    );
    rig.clock.step(chrono::Duration::days(-2));
    wait_until_async("claims resumed", StdDuration::from_secs(10), || {
        health.borrow().clock_refused.is_none()
    })
    .await;
    assert!(rig.settle("hourly").await.is_empty());
    ticker.abort();
    rig.stop().await;
}

/// An owner whose clock alone is 3 s ahead of the file store's, inside its 5 s bound: its
/// claims decide on the store's clock as its heartbeat read it, so a slot 3 s away on the real
/// clock (due at once on the owner's) runs when it comes on the real clock — 3 s after the
/// slot by the owner's clock, which dates the run's row. Deciding on its own clock, the owner
/// ran it at once, 3 s early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_ahead_inside_its_bound_runs_a_slot_when_it_comes_on_the_stores_clock() {
    let yaml = "jobs:\n  - name: tick\n    schedule: every 4s\n    command: \"true\"\n";
    let ahead = chrono::Duration::seconds(3);
    let opts = RigOpts {
        start: Utc::now() + ahead,
        // The first slot is 3 s from now on the real clock.
        stored: Some(Utc::now() - chrono::Duration::seconds(1)),
        max_clock_offset: Some(StdDuration::from_secs(5)),
        ..Default::default()
    };
    let rig = Rig::start("clock-ahead-early", yaml, opts).await;
    // The engine's clock moves on with real time (wall and monotonic together).
    let ticker = {
        let clock = rig.clock.clone();
        tokio::spawn(async move {
            let mut last = std::time::Instant::now();
            loop {
                // The clock driver's tick.
                tokio::time::sleep(StdDuration::from_millis(20)).await;
                let passed = last.elapsed();
                last += passed;
                clock.advance(chrono::Duration::from_std(passed).unwrap());
            }
        })
    };
    let rows = rig.wait_rows("tick", 2).await;
    ticker.abort();
    let health = rig.handle.health.borrow().clone();
    assert!(health.clock_refused.is_none(), "{health:?}");
    let off = health.clock_offset_ms.expect("measured");
    assert!((2_500..=3_500).contains(&off), "offset {off} ms");
    for r in &rows {
        let slot = r.slot.expect("a scheduled run");
        assert!(
            r.started_at - slot >= chrono::Duration::milliseconds(2_500),
            "started {} after its slot by a clock 3 s ahead: {rows:#?}",
            r.started_at - slot
        );
    }
    rig.stop().await;
}

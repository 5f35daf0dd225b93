//! An owner whose clock is further from the store's than its bound claims nothing and says so
//! (health, notice, its owner record), and resumes at the first heartbeat that finds its clock
//! back within the bound. The file store's clock is the file system's stamp on the owner's
//! record; the engine's clock here is a `ManualClock` set 40 s behind the real one.
#![allow(clippy::unwrap_used)] // test code

mod engine_support;

use std::time::Duration as StdDuration;

use chrono::Utc;
use engine_support::{Rig, RigOpts, settle_engine, wait_until_async};

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

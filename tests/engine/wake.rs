//! How an engine hears other processes: through the store's change signal
//! (inotify on the file store, LISTEN/NOTIFY on PostgreSQL) even when its change-token poll is an
//! hour apart, and through the poll alone when the store offers no signal (the tested fallback).
#![allow(clippy::unwrap_used)] // test code

use crate::pg_db_or_skip;
use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration as StdDuration;

use chrono::Utc;
use cronsole::clock::{Clock, SystemClock};
use cronsole::config;
use cronsole::engine::{self, EngineConfig, Event};
use cronsole::model::Trigger;
use cronsole::store::ChangeSignal;
use cronsole::store::file::FileStore;
use cronsole::store::*;
use cronsole::testkit::internals::action::BackoffConfig;
use cronsole::testkit::store::{Call, Hooks, Wrapped};

/// A store that hides its change signal (the engine must fall back to polling), or passes it on
/// (`with_signal`). It counts its settings reads (one per claim batch, not one per run) and its
/// change-token reads (what a poll costs).
#[derive(Default)]
struct NoSignal {
    settings_reads: Arc<AtomicUsize>,
    token_reads: Arc<AtomicUsize>,
    signal: bool,
}

impl NoSignal {
    fn new(store: Arc<dyn Store>) -> Wrapped<Self> {
        Wrapped::new(store, NoSignal::default())
    }
    fn with_signal(store: Arc<dyn Store>) -> Wrapped<Self> {
        let hooks = NoSignal {
            signal: true,
            ..NoSignal::default()
        };
        Wrapped::new(store, hooks)
    }
}

impl Hooks for NoSignal {
    fn before(&self, call: Call) -> StoreResult<()> {
        match call {
            Call::Settings => self.settings_reads.fetch_add(1, Ordering::SeqCst),
            Call::ChangeToken => self.token_reads.fetch_add(1, Ordering::SeqCst),
            _ => 0,
        };
        Ok(())
    }
    fn change_signal(&self, inner: Option<ChangeSignal>) -> Option<ChangeSignal> {
        if self.signal { inner } else { None }
    }
}

/// Start an engine over the store `open` gives, trigger `alpha` from a second store handle (as
/// `cronsole trigger` in another process would), and wait (bounded) for the run to start.
async fn trigger_reaches_engine(signal: bool, poll: StdDuration) {
    let dir = support::tempdir("wake");
    let store_dir = dir.join("store");
    let open = move || -> Arc<dyn Store> { Arc::new(FileStore::open(&store_dir).unwrap()) };
    trigger_reaches_engine_on(&dir, &open, signal, poll).await;
}

async fn trigger_reaches_engine_on(
    dir: &std::path::Path,
    open: &(dyn Fn() -> Arc<dyn Store> + Sync),
    signal: bool,
    poll: StdDuration,
) {
    std::fs::create_dir_all(dir).unwrap();
    let yaml = "jobs:\n  - name: alpha\n    schedule: \"0 0 1 1 *\"\n    command: \"true\"\n";
    let path = dir.join("jobs.yaml");
    std::fs::write(&path, yaml).unwrap();
    let loaded = config::load_str(yaml, &path).unwrap_or_else(|e| panic!("{e}"));
    let fs = open();
    fs.apply(&loaded.file, Utc::now()).unwrap();
    let store: Arc<dyn Store> = if signal {
        fs
    } else {
        Arc::new(NoSignal::new(fs))
    };
    let mut cfg = EngineConfig::new(format!("wake:{}", std::process::id()));
    cfg.change_poll = poll;
    cfg.publish_snapshots = false;
    let deps = cronsole::testkit::engine::run_deps(
        cronsole::testkit::engine::no_env(),
        BackoffConfig::default(),
    );
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let handle = engine::spawn(cfg, store, clock, deps).unwrap();
    let mut events = handle.events.subscribe();
    // Let the engine reach its idle wait (the first claim cycle finds nothing due).
    support::wait::wait_until_async("a first claim cycle", StdDuration::from_secs(10), || {
        handle.heartbeat.claim_cycles() > 0
    })
    .await;
    let other = open();
    assert_eq!(
        other.request_trigger("alpha", Utc::now()).unwrap(),
        TriggerOutcome::Queued
    );
    let started = tokio::time::timeout(StdDuration::from_secs(10), async {
        loop {
            match events.recv().await {
                Ok(Event::RunStarted { job, trigger, .. }) => break (job, trigger),
                Ok(_) => {}
                Err(e) => panic!("events: {e}"),
            }
        }
    })
    .await
    .expect("the triggered run started");
    assert_eq!(started, ("alpha".to_string(), Trigger::Manual));
    handle.shutdown.cancel();
    let _ = tokio::time::timeout(StdDuration::from_secs(10), handle.join).await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_store_signal_wakes_the_engine_without_polling() {
    // The poll is an hour apart: only the inotify signal can deliver the trigger in time.
    trigger_reaches_engine(true, StdDuration::from_secs(3600)).await;
}

/// With a change signal the engine does not poll: its change-token poll is set 1 ms apart,
/// yet over a triggered run and a liveness check it reads the token only when the signal
/// fires. The liveness check is answered by an idle loop, which turns only when asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_signal_an_idle_engine_does_not_poll_and_answers_a_liveness_check() {
    let dir = support::tempdir("idle");
    let yaml = "jobs:\n  - name: alpha\n    schedule: \"0 0 1 1 *\"\n    command: \"true\"\n";
    let path = dir.join("jobs.yaml");
    std::fs::write(&path, yaml).unwrap();
    let loaded = config::load_str(yaml, &path).unwrap_or_else(|e| panic!("{e}"));
    let store_dir = dir.join("store");
    let fs: Arc<dyn Store> = Arc::new(FileStore::open(&store_dir).unwrap());
    fs.apply(&loaded.file, Utc::now()).unwrap();
    let counted = NoSignal::with_signal(fs);
    let tokens = Arc::clone(&counted.token_reads);
    let mut cfg = EngineConfig::new(format!("idle:{}", std::process::id()));
    cfg.change_poll = StdDuration::from_millis(1);
    cfg.publish_snapshots = false;
    let deps = cronsole::testkit::engine::run_deps(
        cronsole::testkit::engine::no_env(),
        BackoffConfig::default(),
    );
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let handle = engine::spawn(cfg, Arc::new(counted), clock, deps).unwrap();
    let mut events = handle.events.subscribe();
    let t0 = tokio::time::Instant::now();
    support::wait::wait_until_async("a first claim cycle", StdDuration::from_secs(10), || {
        handle.heartbeat.claim_cycles() > 0
    })
    .await;
    let other = FileStore::open(&store_dir).unwrap();
    other.request_trigger("alpha", Utc::now()).unwrap();
    tokio::time::timeout(StdDuration::from_secs(10), async {
        loop {
            match events.recv().await {
                Ok(Event::Row(r)) if r.job == "alpha" => break,
                Ok(_) => {}
                Err(e) => panic!("events: {e}"),
            }
        }
    })
    .await
    .expect("the triggered run ended");
    let took = t0.elapsed();
    let quiet = handle.heartbeat.check(StdDuration::from_secs(5)).await;
    assert!(
        quiet < StdDuration::from_secs(5),
        "the loop did not turn when asked"
    );
    // A 1 ms poll reads the token about once per millisecond of `took` (a start, a claim, a
    // process run: well over 40 ms); the signal reads it once per coalesced change (the
    // trigger, the claim, the run's end: a handful).
    let reads = tokens.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        reads < 40,
        "{reads} change-token reads in {took:?}: the engine polled"
    );
    handle.shutdown.cancel();
    let _ = tokio::time::timeout(StdDuration::from_secs(10), handle.join).await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_signal_the_change_token_poll_still_delivers() {
    trigger_reaches_engine(false, StdDuration::from_millis(50)).await;
}

#[test]
fn the_postgres_notify_signal_wakes_the_engine_without_polling() {
    // Database setup blocks on its own runtime: do it before entering the test's runtime.
    let url = pg_db_or_skip!();
    let dir = support::tempdir("wake-pg");
    let open = move || -> Arc<dyn Store> {
        let s = cronsole::store::postgres::PgStore::open(&url).unwrap();
        // The signal rides on the listener: wait until it is up so the test is about delivery.
        support::wait::wait_until("the listener", StdDuration::from_secs(10), || {
            s.listener_alive()
        });
        Arc::new(s)
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(trigger_reaches_engine_on(
        &dir,
        &open,
        true,
        StdDuration::from_secs(3600),
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_claimed_together_share_one_settings_read() {
    // Six jobs triggered before the engine starts are claimed in one batch: their runs use the
    // settings read with that claim instead of a store read each (a burst of
    // runs must not cost a burst of store reads).
    const N: usize = 6;
    let dir = support::tempdir("settings-once");
    let mut yaml = String::from("jobs:\n");
    for i in 0..N {
        yaml.push_str(&format!(
            "  - name: j{i}\n    schedule: \"0 0 1 1 *\"\n    command: \"true\"\n"
        ));
    }
    let path = dir.join("jobs.yaml");
    std::fs::write(&path, &yaml).unwrap();
    let loaded = config::load_str(&yaml, &path).unwrap_or_else(|e| panic!("{e}"));
    let fs: Arc<dyn Store> = Arc::new(FileStore::open(&dir.join("store")).unwrap());
    fs.apply(&loaded.file, Utc::now()).unwrap();
    for i in 0..N {
        assert_eq!(
            fs.request_trigger(&format!("j{i}"), Utc::now()).unwrap(),
            TriggerOutcome::Queued
        );
    }
    let counted = NoSignal::new(fs);
    let reads = Arc::clone(&counted.settings_reads);
    let mut cfg = EngineConfig::new(format!("settings-once:{}", std::process::id()));
    cfg.publish_snapshots = false;
    let deps = cronsole::testkit::engine::run_deps(
        cronsole::testkit::engine::no_env(),
        BackoffConfig::default(),
    );
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let handle = engine::spawn(cfg, Arc::new(counted), clock, deps).unwrap();
    let mut events = handle.events.subscribe();
    let mut rows = Vec::new();
    tokio::time::timeout(StdDuration::from_secs(30), async {
        while rows.len() < N {
            match events.recv().await {
                Ok(Event::Row(r)) => rows.push(r),
                Ok(_) => {}
                Err(e) => panic!("events: {e}"),
            }
        }
    })
    .await
    .expect("all six runs ended");
    handle.shutdown.cancel();
    let _ = tokio::time::timeout(StdDuration::from_secs(10), handle.join).await;
    for r in &rows {
        assert_eq!(r.status, cronsole::model::Status::Succeeded, "{r:#?}");
    }
    let reads = reads.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        (1..N).contains(&reads),
        "{reads} settings reads for {N} runs claimed together"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A jump of the wall clock reaches an idle engine at once: the clock tells of it, and the
/// next slot's timer is set again from the new time. With a change signal nothing else turns
/// the loop, so without the jump the run would start two hours of real time later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jump_of_the_wall_clock_turns_an_idle_engine_at_once() {
    let dir = support::tempdir("jump");
    let t0 = Utc::now();
    let slot = t0 + chrono::Duration::hours(2);
    let yaml = format!(
        "jobs:\n  - name: later\n    schedule: \"at:{}\"\n    command: \"true\"\n",
        slot.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    );
    let path = dir.join("jobs.yaml");
    std::fs::write(&path, &yaml).unwrap();
    let loaded = config::load_str(&yaml, &path).unwrap_or_else(|e| panic!("{e}"));
    let store: Arc<dyn Store> = Arc::new(FileStore::open(&dir.join("store")).unwrap());
    store.apply(&loaded.file, t0).unwrap();
    let clock = cronsole::clock::ManualClock::new(t0);
    let mut cfg = EngineConfig::new(format!("jump:{}", std::process::id()));
    cfg.change_poll = StdDuration::from_secs(3600);
    cfg.publish_snapshots = false;
    let deps = cronsole::testkit::engine::run_deps(
        cronsole::testkit::engine::no_env(),
        BackoffConfig::default(),
    );
    let handle = engine::spawn(cfg, store, Arc::new(clock.clone()), deps).unwrap();
    let mut events = handle.events.subscribe();
    support::wait::wait_until_async("a first claim cycle", StdDuration::from_secs(10), || {
        handle.heartbeat.claim_cycles() > 0
    })
    .await;
    clock.set(slot + chrono::Duration::seconds(1));
    let job = tokio::time::timeout(StdDuration::from_secs(10), async {
        loop {
            match events.recv().await {
                Ok(Event::RunStarted { job, .. }) => break job,
                Ok(_) => {}
                Err(e) => panic!("events: {e}"),
            }
        }
    })
    .await
    .expect("the slot ran soon after the clock jumped to it");
    assert_eq!(job, "later");
    handle.shutdown.cancel();
    let _ = tokio::time::timeout(StdDuration::from_secs(10), handle.join).await;
    let _ = std::fs::remove_dir_all(&dir);
}

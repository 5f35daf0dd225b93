//! How an engine hears other processes: through the store's change signal
//! (inotify on the file store, LISTEN/NOTIFY on PostgreSQL) even when its change-token poll is an
//! hour apart, and through the poll alone when the store offers no signal (the tested fallback).

mod support;

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Utc};
use cronsole::action::BackoffConfig;
use cronsole::clock::{Clock, SystemClock};
use cronsole::config;
use cronsole::engine::{self, EngineConfig, Event};
use cronsole::model::{HistoryRow, JobRecord, JobsFile, Settings, Trigger};
use cronsole::store::file::FileStore;
use cronsole::store::*;
use uuid::Uuid;

/// A store that hides its change signal: the engine must fall back to polling. It counts its
/// settings reads (one per claim batch, not one per run).
struct NoSignal(Arc<dyn Store>, Arc<std::sync::atomic::AtomicUsize>);

impl NoSignal {
    fn new(store: Arc<dyn Store>) -> Self {
        NoSignal(store, Arc::default())
    }
}

impl HistoryReader for NoSignal {
    fn job(&self, name: &str) -> StoreResult<Option<JobRecord>> {
        self.0.job(name)
    }

    fn history(&self, q: &HistoryQuery) -> StoreResult<Vec<HistoryRow>> {
        self.0.history(q)
    }
}

impl Store for NoSignal {
    fn location(&self) -> String {
        self.0.location()
    }
    fn apply(&self, file: &JobsFile, now: DateTime<Utc>) -> StoreResult<ApplyReport> {
        self.0.apply(file, now)
    }
    fn tool_pins(&self, servers: &[String]) -> StoreResult<Vec<cronsole::model::ToolPin>> {
        self.0.tool_pins(servers)
    }
    fn pin_tools(
        &self,
        pins: &[cronsole::model::ToolPin],
    ) -> StoreResult<Vec<cronsole::model::ToolPin>> {
        self.0.pin_tools(pins)
    }
    fn accept_tools(&self, server: &str, pins: &[cronsole::model::ToolPin]) -> StoreResult<usize> {
        self.0.accept_tools(server, pins)
    }
    fn settings(&self) -> StoreResult<Settings> {
        self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.0.settings()
    }
    fn change_token(&self) -> StoreResult<u64> {
        self.0.change_token()
    }
    fn jobs(&self) -> StoreResult<Vec<JobRecord>> {
        self.0.jobs()
    }
    fn next_wakeup(&self, now: DateTime<Utc>) -> StoreResult<Option<DateTime<Utc>>> {
        self.0.next_wakeup(now)
    }
    fn claim_due(&self, req: &ClaimRequest<'_>) -> StoreResult<ClaimOutcome> {
        self.0.claim_due(req)
    }
    fn renew(
        &self,
        job: &str,
        run_id: Uuid,
        owner: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<RenewOutcome> {
        self.0.renew(job, run_id, owner, now)
    }
    fn complete(&self, c: Completion) -> StoreResult<CompleteOutcome> {
        self.0.complete(c)
    }
    fn set_paused(&self, name: &str, paused: bool, now: DateTime<Utc>) -> StoreResult<()> {
        self.0.set_paused(name, paused, now)
    }
    fn request_trigger(&self, name: &str, now: DateTime<Utc>) -> StoreResult<TriggerOutcome> {
        self.0.request_trigger(name, now)
    }
    fn spend(&self, job: &str, now: DateTime<Utc>) -> StoreResult<SpendNow> {
        self.0.spend(job, now)
    }
    fn update_job(
        &self,
        name: &str,
        edit: &cronsole::store::JobEdit,
        now: DateTime<Utc>,
    ) -> StoreResult<cronsole::store::EditOutcome> {
        self.0.update_job(name, edit, now)
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
    let reads = Arc::clone(&counted.1);
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

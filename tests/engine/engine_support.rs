//! Shared rig for the engine-level tests (the modules of `tests/engine/`): a temp-dir `FileStore`, a jobs
//! file written as YAML and validated by the real config loader, `engine::spawn` with an injected
//! `ManualClock` (wall time moves only when a test says so; tokio timers run in real time, so the
//! engine notices a moved clock within one `change_poll`), and helpers that wait for rows, or for
//! the engine's own idle turns, with a deadline instead of sleeping for logic.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, Utc};
use cronsole::clock::{Clock, ManualClock};
use cronsole::config;
use cronsole::engine::{self, Command, EngineConfig, EngineHandle};
use cronsole::model::{HistoryRow, Status};
use cronsole::store::file::FileStore;
use cronsole::store::{HistoryQuery, Store};
use cronsole::testkit::engine::run_deps;
use cronsole::testkit::internals::action::BackoffConfig;
pub use cronsole::testkit::time::rfc3339 as t;
use cronsole::testkit::tmp::TempDir;
pub use cronsole::testkit::wait::{poll_until_async, wait_until_async};

/// A fresh `$TMPDIR/cronsole-engine-<name>-XXXXXX`, removed on drop (also when the test panics).
pub fn tmp(name: &str) -> TempDir {
    TempDir::new(&format!("engine-{name}"))
}

/// Backoff that keeps the production shape (floor, growth, cap, jitter) but runs in milliseconds.
pub fn tiny_backoff() -> BackoffConfig {
    BackoffConfig {
        floor_secs: 0.01,
        base: 2.0,
        cap_secs: 0.02,
        jitter: 0.1,
    }
}

pub struct Rig {
    pub dir: TempDir,
    pub store: Arc<dyn Store>,
    pub clock: ManualClock,
    pub handle: EngineHandle,
}

pub struct RigOpts {
    pub env: HashMap<String, String>,
    /// Where the engine's clock starts.
    pub start: DateTime<Utc>,
    /// When the jobs are stored; `None`: one `every` interval before `start`, so each `every`
    /// job's first slot is `start` (see [`stored_for`]).
    pub stored: Option<DateTime<Utc>>,
    /// The runs' tools (none when unset).
    pub tools: Option<Arc<dyn cronsole::testkit::internals::action::tools::ToolboxBuilder>>,
    /// The engine's bound on its clock's offset from the store's (none when unset).
    pub max_clock_offset: Option<StdDuration>,
    /// `EngineConfig::ahead_limit`.
    pub ahead_limit: Option<StdDuration>,
}

impl Default for RigOpts {
    fn default() -> Self {
        RigOpts {
            env: HashMap::new(),
            start: t("2026-11-29T12:00:00Z"),
            stored: None,
            tools: None,
            max_clock_offset: None,
            ahead_limit: None,
        }
    }
}

impl Rig {
    /// Validate `yaml`, apply it to a fresh store at `opts.stored` (by default so that its
    /// `every` jobs' first slot is `opts.start`), start the engine with its clock at
    /// `opts.start`.
    pub async fn start(name: &str, yaml: &str, opts: RigOpts) -> Rig {
        let dir = tmp(name);
        let store_dir = dir.join("store");
        let jobs_path = dir.join("jobs.yaml");
        std::fs::write(&jobs_path, yaml).expect("write jobs file");
        let loaded = config::load_str(yaml, &jobs_path).unwrap_or_else(|e| panic!("{e}"));
        let store: Arc<dyn Store> = Arc::new(FileStore::open(&store_dir).expect("open store"));
        let stored = opts
            .stored
            .unwrap_or_else(|| stored_for(&loaded.file.jobs, opts.start));
        store.apply(&loaded.file, stored).expect("apply");
        let clock = ManualClock::new(opts.start);
        let mut cfg = EngineConfig::new(format!("test:{}:{name}", std::process::id()));
        cfg.change_poll = StdDuration::from_millis(20);
        cfg.snapshot_min_interval = StdDuration::from_millis(20);
        cfg.shutdown_grace = StdDuration::from_secs(5);
        cfg.max_clock_offset = opts.max_clock_offset;
        cfg.ahead_limit = opts.ahead_limit;
        let env = opts.env;
        let mut deps = run_deps(Arc::new(move |k: &str| env.get(k).cloned()), tiny_backoff());
        if let Some(tools) = opts.tools {
            deps.tools = tools;
        }
        let c: Arc<dyn Clock> = Arc::new(clock.clone());
        let handle = engine::spawn(cfg, Arc::clone(&store), c, deps).expect("spawn engine");
        Rig {
            dir,
            store,
            clock,
            handle,
        }
    }

    pub fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    pub fn advance(&self, secs: i64) {
        self.clock.advance(Duration::seconds(secs));
    }

    /// All rows of `job`, oldest first.
    pub fn rows(&self, job: &str) -> Vec<HistoryRow> {
        let mut v = self
            .store
            .history(&HistoryQuery {
                job: Some(job.to_string()),
                limit: 100_000,
                ..Default::default()
            })
            .expect("history");
        v.reverse();
        v
    }

    /// Wait (real time, bounded) until `job` has at least `n` rows; panics with what it has.
    pub async fn wait_rows(&self, job: &str, n: usize) -> Vec<HistoryRow> {
        if !poll_until_async(StdDuration::from_secs(20), || self.rows(job).len() >= n).await {
            panic!(
                "timed out waiting for {n} rows of {job}; have {:#?}",
                self.rows(job)
            );
        }
        self.rows(job)
    }

    /// Wait until the engine has done all it would do about the clock and commands as they are
    /// now, then return the rows: two idle loop turns (no run in flight, no claim due) after
    /// this call — the second began after it, so a claim the engine would (wrongly) make has
    /// been made and its run recorded.
    pub async fn settle(&self, job: &str) -> Vec<HistoryRow> {
        settle_engine(&self.handle).await;
        self.rows(job)
    }

    /// Like [`Rig::settle`] while a run is meant to stay in flight: wait until no claim is due
    /// (two quiet loop turns after this call), then return the rows.
    pub async fn quiet(&self, job: &str) -> Vec<HistoryRow> {
        quiet_engine(&self.handle).await;
        self.rows(job)
    }

    /// Move the wall clock by `secs` and wait for the row count of `job` to reach `n`.
    pub async fn step(&self, job: &str, secs: i64, n: usize) -> Vec<HistoryRow> {
        self.advance(secs);
        self.wait_rows(job, n).await
    }

    pub async fn command(&self, c: Command) {
        self.handle.commands.send(c).await.expect("engine alive");
    }

    /// Stop the engine; the rig's directory lives on in the returned `TempDir` for inspection.
    pub async fn stop(self) -> TempDir {
        self.handle.shutdown.cancel();
        let r = tokio::time::timeout(StdDuration::from_secs(20), self.handle.join)
            .await
            .expect("engine stops within 20 s")
            .expect("engine task");
        r.expect("engine result");
        self.dir
    }
}

/// When to store `jobs` so that each `every` job's first slot (its anchor plus one interval) is
/// `start`: one interval before it. The tests mean "a job due now"; a file whose `every` jobs
/// have different intervals has no such instant and must say when it is stored.
pub fn stored_for(jobs: &[cronsole::model::JobDef], start: DateTime<Utc>) -> DateTime<Utc> {
    let every: Vec<&cronsole::model::JobDef> = jobs
        .iter()
        .filter(|j| matches!(j.schedule, cronsole::schedule::ScheduleSpec::Every { .. }))
        .collect();
    let Some(first) = every.first() else {
        return start;
    };
    assert!(
        every.iter().all(|j| j.schedule == first.schedule),
        "every jobs of different intervals: set RigOpts.stored"
    );
    cronsole::testkit::jobs::stored_for_first_slot(first, start)
}

/// Wait for two idle turns of the engine's loop after this call (no claim due, no run in
/// flight): what the engine does about the clock and commands as they are now is recorded.
pub async fn settle_engine(handle: &EngineHandle) {
    let from = handle.heartbeat.idle_turns();
    wait_until_async(
        "the engine to settle (two idle loop turns)",
        StdDuration::from_secs(20),
        || {
            // An idle loop turns only when something happens: ask it to.
            handle.heartbeat.poke();
            handle.heartbeat.idle_turns() >= from + 2
        },
    )
    .await;
}

/// Wait for two quiet turns of the engine's loop after this call (no claim due; runs may still
/// be in flight): every claim the engine makes for the clock as it is now has been made.
pub async fn quiet_engine(handle: &EngineHandle) {
    let from = handle.heartbeat.quiet_turns();
    wait_until_async(
        "the engine to have no claim due (two quiet loop turns)",
        StdDuration::from_secs(20),
        || {
            handle.heartbeat.poke();
            handle.heartbeat.quiet_turns() >= from + 2
        },
    )
    .await;
}

pub fn statuses(rows: &[HistoryRow]) -> Vec<Status> {
    rows.iter().map(|r| r.status).collect()
}

/// Every regular file under `dir`, recursively.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        if let Ok(rd) = std::fs::read_dir(&d) {
            for e in rd.flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    out.push(p);
                }
            }
        }
    }
    out
}

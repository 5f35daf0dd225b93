//! Outages keep what finished and end by themselves, through the engine over a store double
//! that refuses writes on demand (the real file store underneath): a completion the store
//! refuses is kept and retried until written, never turned into `abandoned` or `skipped` rows; a
//! store that refuses a write stops new claims at once and says so in the health channel, each
//! claim cycle then probes it at a jittered backoff, and the first write that goes through
//! resumes claiming, however long the outage; a stop spools what is unwritten (the engine
//! returns an error, so `run` exits non-zero), and the next start replays it before claiming,
//! once.
#![allow(clippy::unwrap_used)] // test code

use cronsole::store::BackendError;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration as StdDuration;

use crate::engine_support::{poll_until_async, quiet_engine, settle_engine, t, tiny_backoff, tmp};
use cronsole::clock::{Clock, ManualClock};
use cronsole::config;
use cronsole::engine::{self, EngineConfig, EngineError, EngineHandle, RunDeps};
use cronsole::model::{HistoryRow, Status};
use cronsole::store::file::FileStore;
use cronsole::store::{ClaimRequest, HistoryQuery, Store, StoreError, StoreResult};
use cronsole::testkit::http::{Response, TestServer};
use cronsole::testkit::simio::{FaultConfig, Scripted, ScriptedFault, SimDisk, shared_rng};
use cronsole::testkit::store::{Call, Hooks, Wrapped};
use uuid::Uuid;

/// The real file store, with writes refused while `fail_completions` / `fail_claims` is set.
#[derive(Default)]
struct Faulty {
    fail_completions: AtomicBool,
    fail_claims: AtomicBool,
    complete_calls: AtomicUsize,
    claim_calls: AtomicUsize,
    /// The next this many `settings` reads fail as "store unavailable".
    fail_settings: AtomicUsize,
    /// Every renewal answers `Lost` (another owner took the run over).
    lose_lease: AtomicBool,
    /// Every renewal fails (the store unreachable from this owner).
    fail_renewals: AtomicBool,
    /// Every renewal hangs while this is set, then fails (a network path that went silent).
    hang_renewals: AtomicBool,
    /// The next this many renewals fail (the store unreachable for a while).
    fail_renewals_first: AtomicUsize,
    /// Every renewal that is not refused waits this many milliseconds before it goes through
    /// (a store that answers late).
    slow_renewals_ms: AtomicU64,
    renew_calls: AtomicUsize,
    /// With the store on a simulated disk: the next completion's journal write fails with
    /// `ENOSPC` after its history row landed (a disk that fills between the two writes).
    sim: Option<SimDisk>,
    journal_enospc_once: AtomicBool,
}

fn enospc() -> StoreError {
    StoreError::io(
        "/fake/history.jsonl",
        std::io::Error::from_raw_os_error(libc::ENOSPC),
    )
}

impl Hooks for Faulty {
    fn before(&self, call: Call) -> StoreResult<()> {
        match call {
            Call::Settings => {
                let left = self.fail_settings.load(Ordering::SeqCst);
                if left > 0 {
                    self.fail_settings.store(left - 1, Ordering::SeqCst);
                    return Err(StoreError::Backend(BackendError::Unavailable(
                        "database restarting (test)".into(),
                    )));
                }
            }
            Call::ClaimDue => {
                self.claim_calls.fetch_add(1, Ordering::SeqCst);
                if self.fail_claims.load(Ordering::SeqCst) {
                    return Err(enospc());
                }
            }
            Call::Renew if self.hang_renewals.load(Ordering::SeqCst) => {
                self.renew_calls.fetch_add(1, Ordering::SeqCst);
                // On the blocking pool, as a real store's call waiting on a silent connection.
                let until = std::time::Instant::now() + StdDuration::from_secs(120);
                while self.hang_renewals.load(Ordering::SeqCst) && std::time::Instant::now() < until
                {
                    std::thread::sleep(StdDuration::from_millis(20));
                }
                return Err(StoreError::Backend(BackendError::Unavailable(
                    "no answer (test)".into(),
                )));
            }
            Call::Renew if self.fail_renewals.load(Ordering::SeqCst) => {
                self.renew_calls.fetch_add(1, Ordering::SeqCst);
                return Err(StoreError::Backend(BackendError::Unavailable(
                    "connection refused (test)".into(),
                )));
            }
            Call::Renew
                if self
                    .fail_renewals_first
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok() =>
            {
                self.renew_calls.fetch_add(1, Ordering::SeqCst);
                return Err(StoreError::Backend(BackendError::Unavailable(
                    "connection refused (test)".into(),
                )));
            }
            Call::Renew => {
                self.renew_calls.fetch_add(1, Ordering::SeqCst);
                let ms = self.slow_renewals_ms.load(Ordering::SeqCst);
                if ms > 0 {
                    std::thread::sleep(StdDuration::from_millis(ms));
                }
            }
            Call::Complete | Call::CompleteRecorded => {
                self.complete_calls.fetch_add(1, Ordering::SeqCst);
                if self.fail_completions.load(Ordering::SeqCst) {
                    return Err(enospc());
                }
                if call == Call::Complete
                    && let Some(disk) = &self.sim
                    && self.journal_enospc_once.swap(false, Ordering::SeqCst)
                {
                    disk.script(Scripted {
                        file: "jobs.journal".into(),
                        op: "write",
                        fault: ScriptedFault::Enospc,
                    });
                }
            }
            _ => {}
        }
        Ok(())
    }
    fn lease_lost(&self) -> bool {
        self.lose_lease.load(Ordering::SeqCst)
    }
}

const START: &str = "2026-11-29T12:00:00Z";

struct Rig {
    dir: PathBuf,
    /// The store under the hooks, for reads that must not go through them.
    inner: Arc<dyn Store>,
    faulty: Arc<Wrapped<Faulty>>,
    clock: ManualClock,
    handle: EngineHandle,
}

fn deps() -> RunDeps {
    cronsole::testkit::engine::run_deps(cronsole::testkit::engine::no_env(), tiny_backoff())
}

fn spool_path(dir: &Path) -> PathBuf {
    dir.join("spool").join("completions.jsonl")
}

/// Start an engine over `dir/store` (applying `yaml` when given) with the spool in `dir`.
fn start(dir: &Path, yaml: Option<&str>, clock: ManualClock) -> Rig {
    let inner = FileStore::open(&dir.join("store")).expect("open store");
    start_on(dir, inner, None, yaml, clock)
}

/// [`start`] over a store on a simulated disk (faults scripted through [`Faulty`]).
fn start_sim(dir: &Path, yaml: &str, clock: ManualClock) -> Rig {
    let disk = SimDisk::new(shared_rng(1), FaultConfig::none());
    let inner =
        FileStore::open_with_io(Path::new("/r/.cronsole"), disk.process(true)).expect("open store");
    start_on(dir, inner, Some(disk), Some(yaml), clock)
}

fn start_on(
    dir: &Path,
    inner: FileStore,
    sim: Option<SimDisk>,
    yaml: Option<&str>,
    clock: ManualClock,
) -> Rig {
    if let Some(yaml) = yaml {
        let jobs_path = dir.join("jobs.yaml");
        std::fs::write(&jobs_path, yaml).expect("write jobs file");
        let loaded = config::load_str(yaml, &jobs_path).unwrap_or_else(|e| panic!("{e}"));
        inner.apply(&loaded.file, clock.now()).expect("apply");
    }
    let inner: Arc<dyn Store> = Arc::new(inner);
    let hooks = Faulty {
        sim,
        ..Faulty::default()
    };
    let faulty = Arc::new(Wrapped::new(Arc::clone(&inner), hooks));
    let mut cfg = EngineConfig::new(format!("test:{}:{}", std::process::id(), Uuid::new_v4()));
    cfg.change_poll = StdDuration::from_millis(20);
    cfg.snapshot_min_interval = StdDuration::from_millis(20);
    cfg.shutdown_grace = StdDuration::from_millis(200);
    cfg.publish_snapshots = false;
    cfg.spool = Some(spool_path(dir));
    let store: Arc<dyn Store> = faulty.clone();
    let c: Arc<dyn Clock> = Arc::new(clock.clone());
    let handle = engine::spawn(cfg, store, c, deps()).expect("spawn engine");
    Rig {
        dir: dir.to_path_buf(),
        inner,
        faulty,
        clock,
        handle,
    }
}

impl Rig {
    fn rows(&self) -> Vec<HistoryRow> {
        let mut v = self
            .inner
            .history(&HistoryQuery {
                limit: 100_000,
                ..Default::default()
            })
            .expect("history");
        v.reverse();
        v
    }

    async fn wait_until(&self, what: &str, f: impl Fn(&Rig) -> bool) {
        if !poll_until_async(StdDuration::from_secs(20), || f(self)).await {
            panic!(
                "timed out waiting for {what}; rows {:#?}; health {:?}",
                self.rows(),
                *self.handle.health.borrow()
            );
        }
    }

    async fn stop(self) -> Result<(), EngineError> {
        self.handle.shutdown.cancel();
        tokio::time::timeout(StdDuration::from_secs(20), self.handle.join)
            .await
            .expect("engine stops within 20 s")
            .expect("engine task")
    }
}

const ONE_JOB: &str = "budget: null\njobs:\n  - name: a\n    schedule: every 60s\n    run_immediately: true\n    command: echo finished\n    max_retries: 1\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_completion_is_kept_retried_and_written_once_the_store_takes_it() {
    let dir = tmp("outage-retry");
    let rig = start(&dir, Some(ONE_JOB), ManualClock::new(t(START)));
    rig.faulty.fail_completions.store(true, Ordering::SeqCst);
    rig.wait_until("a pending completion", |r| {
        r.handle.health.borrow().pending_completions == 1
            && r.faulty.complete_calls.load(Ordering::SeqCst) >= 3
    })
    .await;
    // Minutes pass while the store refuses it (leases would have expired long ago).
    rig.clock.advance(chrono::Duration::seconds(600));
    quiet_engine(&rig.handle).await;
    assert!(rig.rows().is_empty(), "{:#?}", rig.rows());
    let h = rig.handle.health.borrow().clone();
    assert!(h.store_failing_since.is_some(), "{h:?}");
    assert!(
        h.last_store_error
            .as_deref()
            .is_some_and(|e| e.contains("No space")),
        "{h:?}"
    );
    rig.faulty.fail_completions.store(false, Ordering::SeqCst);
    rig.wait_until("the row", |r| !r.rows().is_empty()).await;
    settle_engine(&rig.handle).await;
    let rows = rig.rows();
    assert_eq!(rows[0].status, Status::Succeeded, "{rows:#?}");
    assert_eq!(rows[0].result.as_deref().map(str::trim), Some("finished"));
    assert!(
        rows.iter().all(|r| r.status != Status::Abandoned
            && !(r.status == Status::Skipped
                && r.reason.as_deref().is_some_and(|x| x.contains("overlap")))),
        "a status that did not happen was recorded: {rows:#?}"
    );
    let h = rig.handle.health.borrow().clone();
    assert_eq!(h.pending_completions, 0);
    assert!(h.store_failing_since.is_none(), "{h:?}");
    rig.stop().await.expect("clean stop");
    assert!(!spool_path(&dir).exists(), "nothing spooled");
}

/// The completion's row landed, its job record did not (`ENOSPC` on the journal). A retry that
/// saw the row in history and stopped would leave the lease in the record, and the next open
/// would refuse the store. A completion counts as written only when its record is
/// too: the retry writes the record (no second row) and the lease is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_that_finds_its_row_in_history_still_writes_the_job_record() {
    let dir = tmp("outage-record");
    let rig = start_sim(&dir, ONE_JOB, ManualClock::new(t(START)));
    rig.faulty.journal_enospc_once.store(true, Ordering::SeqCst);
    rig.wait_until("the row", |r| !r.rows().is_empty()).await;
    let live = |r: &Rig| match r.inner.job("a") {
        Ok(Some(rec)) => rec.rt.live_runs(),
        other => panic!("job a: {other:?}"),
    };
    rig.wait_until("the record to release the run", |r| {
        live(r) == 0 && r.handle.health.borrow().pending_completions == 0
    })
    .await;
    assert!(
        !rig.faulty.journal_enospc_once.load(Ordering::SeqCst),
        "the fault was injected"
    );
    let rows = rig.rows();
    assert_eq!(rows.len(), 1, "one run, one row: {rows:#?}");
    assert_eq!(rows[0].status, Status::Succeeded);
    rig.stop().await.expect("clean stop");
}

/// PostgreSQL killed under load: a run whose settings read hits the outage right after its
/// claim must not be recorded `failed` without running its command. The read is retried within the
/// lease, so a short outage costs nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimed_run_rides_out_a_short_outage_before_it_starts() {
    let dir = tmp("outage-settings");
    let store_dir = dir.join("store");
    let inner = FileStore::open(&store_dir).expect("open store");
    let jobs_path = dir.join("jobs.yaml");
    std::fs::write(&jobs_path, ONE_JOB).expect("write jobs file");
    let loaded = config::load_str(ONE_JOB, &jobs_path).unwrap_or_else(|e| panic!("{e}"));
    let clock = ManualClock::new(t(START));
    inner.apply(&loaded.file, clock.now()).expect("apply");
    let inner: Arc<dyn Store> = Arc::new(inner);
    let hooks = Faulty {
        fail_settings: AtomicUsize::new(3),
        ..Faulty::default()
    };
    let faulty = Arc::new(Wrapped::new(Arc::clone(&inner), hooks));
    let mut cfg = EngineConfig::new(format!("test:{}:{}", std::process::id(), Uuid::new_v4()));
    cfg.change_poll = StdDuration::from_millis(20);
    cfg.publish_snapshots = false;
    cfg.shutdown_grace = StdDuration::from_millis(200);
    let store: Arc<dyn Store> = faulty.clone();
    let c: Arc<dyn Clock> = Arc::new(clock.clone());
    let handle = engine::spawn(cfg, store, c, deps()).expect("spawn engine");
    let rig = Rig {
        dir: dir.to_path_buf(),
        inner,
        faulty,
        clock,
        handle,
    };
    rig.wait_until("the row", |r| !r.rows().is_empty()).await;
    let rows = rig.rows();
    assert_eq!(rows[0].status, Status::Succeeded, "{rows:#?}");
    assert_eq!(rows[0].result.as_deref().map(str::trim), Some("finished"));
    assert_eq!(rig.faulty.fail_settings.load(Ordering::SeqCst), 0);
    rig.stop().await.expect("clean stop");
}

/// An owner stopped past its lease comes back to an attempt its dead-man switch has killed; a
/// retry after another owner has recovered the slot would execute a `once` job again (three
/// times in the case this replays). A retry first renews the lease; `Lost` ends the run's attempts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_attempt_is_not_retried_once_the_lease_is_lost() {
    let dir = tmp("outage-lost-lease");
    let marks = dir.join("attempts");
    let yaml = format!(
        "budget: null\njobs:\n  - name: a\n    schedule: every 60s\n    run_immediately: true\n    \
         command: \"echo x >> {} && false\"\n    max_retries: 3\n",
        marks.display()
    );
    let rig = start(&dir, Some(&yaml), ManualClock::new(t(START)));
    rig.faulty.lose_lease.store(true, Ordering::SeqCst);
    rig.wait_until("the row", |r| !r.rows().is_empty()).await;
    let rows = rig.rows();
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(rows[0].status, Status::Failed, "{rows:#?}");
    assert_eq!(rows[0].attempts, 1, "{rows:#?}");
    assert!(
        rows[0]
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("lease was lost before attempt 2")),
        "{rows:#?}"
    );
    let executed = std::fs::read_to_string(&marks).expect("the command ran");
    assert_eq!(executed.lines().count(), 1, "executed {executed:?}");
    rig.stop().await.expect("clean stop");
}

/// One job `a`, run at once, with `lease` and `command`.
fn one_job_with_lease(lease: StdDuration, command: &str) -> String {
    format!(
        "budget: null\njobs:\n  - name: a\n    schedule: every 1h\n    run_immediately: true\n    \
         lease_seconds: {}\n    command: \"{command}\"\n",
        lease.as_secs()
    )
}

/// The rows are one `abandoned` row of a run stopped for a lease it could not renew.
fn assert_one_lease_stopped_row(rows: &[HistoryRow]) {
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(rows[0].status, Status::Abandoned, "{rows:#?}");
    assert!(
        rows[0]
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("no lease renewal")),
        "{rows:#?}"
    );
}

/// A store that takes no renewal of a run's lease (an outage longer than the lease, or this
/// owner cut off from the store): the run is stopped, its processes killed, before the lease
/// ends, so the owner that recovers the lease once the store answers never finds it still
/// going beside the recovery (a one-shot would run twice at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_lease_cannot_be_renewed_stops_before_the_lease_ends() {
    let dir = tmp("outage-unrenewed");
    let marks = dir.join("finished");
    let lease = StdDuration::from_secs(8);
    let yaml = one_job_with_lease(lease, &format!("sleep 60 && echo x >> {}", marks.display()));
    let began = std::time::Instant::now();
    let rig = start(&dir, Some(&yaml), ManualClock::new(t(START)));
    rig.faulty.fail_renewals.store(true, Ordering::SeqCst);
    rig.faulty.fail_completions.store(true, Ordering::SeqCst);
    rig.wait_until("the stopped run's completion to be retried", |r| {
        r.faulty.complete_calls.load(Ordering::SeqCst) >= 3
    })
    .await;
    let within = began.elapsed();
    // The stopped run asks for no more renewals while its completion waits: about one a second
    // until it stopped, none after (not a loop on a lease it gave up).
    let renewals = rig.faulty.renew_calls.load(Ordering::SeqCst);
    assert!(
        renewals <= 2 * lease.as_secs() as usize,
        "{renewals} renewals"
    );
    rig.faulty.fail_completions.store(false, Ordering::SeqCst);
    rig.wait_until("the row", |r| !r.rows().is_empty()).await;
    assert_one_lease_stopped_row(&rig.rows());
    // Stopped while the lease was still this owner's: no recovery could have overlapped it.
    assert!(within < lease, "the row came {within:?} after the start");
    assert!(!marks.exists(), "the command ran to its end");
    rig.stop().await.expect("clean stop");
}

/// Whether process `pid` is alive (a zombie is not: it has been killed, only not yet reaped).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().to_string())
        })
        .is_some_and(|rest| !rest.starts_with('Z'))
}

/// A store whose renewals hang (the connection went silent, no error) rather than fail: at
/// three quarters of the lease the run's processes are killed before the completion waits on
/// the store, while the lease is still this owner's, and the row is `abandoned`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_renewals_hang_is_killed_before_its_lease_ends_and_recorded_abandoned() {
    let dir = tmp("outage-hung-renewal");
    let pidfile = dir.join("pid");
    let lease = StdDuration::from_secs(8);
    let yaml = one_job_with_lease(
        lease,
        &format!("echo $$ > {}; exec sleep 60", pidfile.display()),
    );
    let began = std::time::Instant::now();
    let rig = start(&dir, Some(&yaml), ManualClock::new(t(START)));
    rig.faulty.hang_renewals.store(true, Ordering::SeqCst);
    rig.faulty.fail_completions.store(true, Ordering::SeqCst);
    rig.wait_until("the command's pid", |_| {
        std::fs::read_to_string(&pidfile).is_ok_and(|s| s.trim().parse::<i32>().is_ok())
    })
    .await;
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    rig.wait_until("a renewal waiting on the store", |r| {
        r.faulty.renew_calls.load(Ordering::SeqCst) >= 1
    })
    .await;
    rig.wait_until("the command killed", |_| !alive(pid)).await;
    let killed = began.elapsed();
    assert!(
        killed < lease,
        "the command was killed {killed:?} after the start"
    );
    rig.wait_until("the stopped run's completion tried", |r| {
        r.faulty.complete_calls.load(Ordering::SeqCst) >= 1
    })
    .await;
    rig.faulty.hang_renewals.store(false, Ordering::SeqCst);
    rig.faulty.fail_completions.store(false, Ordering::SeqCst);
    rig.wait_until("the row", |r| !r.rows().is_empty()).await;
    assert_one_lease_stopped_row(&rig.rows());
    rig.stop().await.expect("clean stop");
}

/// A one-shot over a store that this owner loses as the run's result is being delivered (the
/// webhook takes the request and answers only after an hour): renewals and completions fail
/// from then on, so the run is stopped for its lease after its command ended. Returns once the
/// stopped run's completion waits for the store, with the engine's events from its start.
struct CutOff {
    _dir: cronsole::testkit::tmp::TempDir,
    rig: Rig,
    hook: TestServer,
    events: tokio::sync::broadcast::Receiver<engine::Event>,
    marks: PathBuf,
}

async fn cut_off_after_the_command(name: &str, command: &str) -> CutOff {
    let dir = tmp(name);
    let marks = dir.join("ran");
    let faulty: Arc<std::sync::OnceLock<Arc<Wrapped<Faulty>>>> = Arc::default();
    let at_delivery = Arc::clone(&faulty);
    let hook = TestServer::start(move |_| {
        if let Some(f) = at_delivery.get() {
            f.fail_renewals.store(true, Ordering::SeqCst);
            f.fail_completions.store(true, Ordering::SeqCst);
        }
        Response::text(200, "ok").delay(StdDuration::from_secs(3600))
    })
    .await
    .unwrap();
    // Three quarters of the lease (6 s) end well before the delivery's own timeout (15 s).
    let yaml = format!(
        "budget: null\ndelivery:\n  hook: {{ webhook: \"{}/hook\", format: json }}\njobs:\n  \
         - name: a\n    schedule: every 1h\n    run_immediately: true\n    once: true\n    \
         lease_seconds: 8\n    max_retries: 1\n    command: \"echo x >> {} && {command}\"\n    \
         deliver: [hook]\n",
        hook.url(),
        marks.display()
    );
    let rig = start(&dir, Some(&yaml), ManualClock::new(t(START)));
    // Before the engine task first runs (one thread): no event is missed.
    let events = rig.handle.events.subscribe();
    assert!(faulty.set(Arc::clone(&rig.faulty)).is_ok());
    let mut health = rig.handle.health.clone();
    tokio::time::timeout(
        StdDuration::from_secs(120),
        health.wait_for(|h| h.pending_completions == 1),
    )
    .await
    .expect("the stopped run's completion waits for the store")
    .expect("health channel");
    assert_eq!(hook.request_count(), 1, "the delivery had begun");
    CutOff {
        _dir: dir,
        rig,
        hook,
        events,
        marks,
    }
}

/// The next row of job `job` this engine wrote.
async fn next_row(
    events: &mut tokio::sync::broadcast::Receiver<engine::Event>,
    job: &str,
) -> HistoryRow {
    let wait = async {
        loop {
            match events.recv().await {
                Ok(engine::Event::Row(r)) if r.job == job => return r,
                Ok(_) => {}
                Err(e) => panic!("events: {e}"),
            }
        }
    };
    tokio::time::timeout(StdDuration::from_secs(120), wait)
        .await
        .expect("the row within two minutes")
}

/// The row of a one-shot stopped for its lease after its command ended: `succeeded`, with the
/// command's output, its delivery said cut short by the stop.
fn assert_ended_before_the_stop(row: &HistoryRow) {
    assert_eq!(row.status, Status::Succeeded, "{row:#?}");
    assert_eq!(row.result.as_deref().map(str::trim), Some("finished"));
    assert!(!row.delivered, "{row:#?}");
    assert!(
        row.delivery_error
            .as_deref()
            .is_some_and(|e| e.contains("not delivered: the run was stopped for its lease")),
        "{row:#?}"
    );
}

/// The one-shot is spent: retired, no retry owed, no lease; its command ran once.
fn assert_spent_once(c: &CutOff) {
    let rec = c.rig.inner.job("a").unwrap().unwrap();
    assert!(
        rec.rt.retired && !rec.rt.recovery_pending && rec.rt.lease.is_none(),
        "{:?}",
        rec.rt
    );
    let ran = std::fs::read_to_string(&c.marks).unwrap_or_default();
    assert_eq!(ran.lines().count(), 1, "{ran:?}");
}

/// A one-shot whose command has ended, stopped for a lease it could not renew while its result
/// is still being delivered: the command ran, so the run is recorded with its end when the
/// store comes back (`succeeded`, its delivery said cut short), and the job is spent. An
/// `abandoned` row here would have the store re-offer the one-shot (`trigger: recovery`), and
/// its command would run a second time.
#[tokio::test(start_paused = true)]
async fn a_one_shot_stopped_for_its_lease_after_its_command_ended_is_recorded_with_that_end() {
    let mut c = cut_off_after_the_command("outage-ended-before-stop", "echo finished").await;
    c.rig.faulty.fail_completions.store(false, Ordering::SeqCst);
    let row = next_row(&mut c.events, "a").await;
    assert_ended_before_the_stop(&row);
    assert!(!row.stale_lease, "{row:#?}");
    assert_eq!(c.rig.rows().len(), 1, "{:#?}", c.rig.rows());
    assert_spent_once(&c);
    assert_eq!(c.hook.request_count(), 1);
    c.rig.stop().await.expect("clean stop");
}

/// A one-shot whose command failed, stopped for its lease while its alert was being sent: the
/// row is `failed` with the command's error, the alert said not sent, and the job's incident
/// counts the failure with the alert still owed (the next failure sends it).
#[tokio::test(start_paused = true)]
async fn a_failed_run_stopped_for_its_lease_while_alerting_is_recorded_failed() {
    let mut c = cut_off_after_the_command("outage-failed-before-stop", "exit 3").await;
    c.rig.faulty.fail_completions.store(false, Ordering::SeqCst);
    let row = next_row(&mut c.events, "a").await;
    assert_eq!(row.status, Status::Failed, "{row:#?}");
    assert!(
        row.error.as_deref().is_some_and(|e| e.contains('3')),
        "{row:#?}"
    );
    assert!(
        row.delivery_error
            .as_deref()
            .is_some_and(|e| e.contains("alert not sent: the run was stopped for its lease")),
        "{row:#?}"
    );
    let rec = c.rig.inner.job("a").unwrap().unwrap();
    assert_eq!(
        rec.rt.state.incident.consecutive_failures, 1,
        "{:?}",
        rec.rt
    );
    assert_eq!(
        rec.rt.state.incident.alerted_signature, None,
        "{:?}",
        rec.rt
    );
    assert_spent_once(&c);
    c.rig.stop().await.expect("clean stop");
}

/// The same run, when a second owner recovered its lapsed lease first (recording it
/// `abandoned` and owing the one-shot a retry) and has not run that retry yet: the late end
/// supersedes the `abandoned` row (one row for the run, its real status) and spends the job,
/// so the retry never runs.
#[tokio::test(start_paused = true)]
async fn the_late_end_of_a_run_stopped_for_its_lease_supersedes_a_recovery_and_its_retry() {
    let mut c = cut_off_after_the_command("outage-ended-recovered", "echo finished").await;
    let recovery = |now, limit| ClaimRequest {
        now,
        owner: "second",
        limit,
        in_flight: &[],
        clock_stepped: None,
        max_offset: None,
    };
    let out = c
        .rig
        .inner
        .claim_due(&recovery(t(START) + chrono::Duration::seconds(60), 0))
        .unwrap();
    assert!(
        out.rows.iter().any(|r| r.status == Status::Abandoned),
        "{out:?}"
    );
    assert!(c.rig.inner.job("a").unwrap().unwrap().rt.recovery_pending);
    c.rig.faulty.fail_completions.store(false, Ordering::SeqCst);
    let row = next_row(&mut c.events, "a").await;
    assert_ended_before_the_stop(&row);
    assert!(row.stale_lease && row.supersedes_abandoned, "{row:#?}");
    let rows = c.rig.rows();
    assert_eq!(rows.len(), 1, "one row for the run: {rows:#?}");
    assert_eq!(rows[0].status, Status::Succeeded, "{rows:#?}");
    assert_spent_once(&c);
    let later = c
        .rig
        .inner
        .claim_due(&recovery(t(START) + chrono::Duration::seconds(120), 1))
        .unwrap();
    assert!(later.claims.is_empty(), "the retry was claimed: {later:?}");
    c.rig.stop().await.expect("clean stop");
}

/// A store that refuses the first renewals of a short lease and then answers only late (a path
/// to the store that came back slow): the run is stopped at three quarters of its lease and
/// recorded `abandoned` for it. Its last retry is asked before the stop instant, with the stop
/// as its deadline; a renewal asked at the stop instant itself used to wait for the store's
/// answer however long it took, and the run went on past its lease's end, when another owner
/// may recover it. (With the supervisors of the binary, that wait also paused the run's
/// heartbeats, and the dead-man switch killed it: `proc_supervised` shows that path.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_store_answers_renewals_late_stops_at_three_quarters_of_its_lease() {
    let dir = tmp("outage-short-lease");
    let marks = dir.join("finished");
    let lease = StdDuration::from_secs(2);
    let yaml = format!(
        "budget: null\njobs:\n  - name: a\n    schedule: every 1h\n    run_immediately: true\n    \
         max_retries: 1\n    lease_seconds: {}\n    command: \"sleep 8 && echo x >> {}\"\n",
        lease.as_secs(),
        marks.display()
    );
    let rig = start(&dir, Some(&yaml), ManualClock::new(t(START)));
    rig.faulty.fail_renewals_first.store(2, Ordering::SeqCst);
    rig.faulty.slow_renewals_ms.store(2500, Ordering::SeqCst);
    rig.wait_until("the row", |r| !r.rows().is_empty()).await;
    assert_one_lease_stopped_row(&rig.rows());
    assert!(!marks.exists(), "the command ran to its end");
    rig.faulty.slow_renewals_ms.store(0, Ordering::SeqCst);
    rig.stop().await.expect("clean stop");
}

/// A full disk: claims and completions fail. Claims stop at the first failure, with the reason
/// in the health channel; each claim cycle is then a probe of the store, and the first one that
/// goes through after the disk is freed resumes claiming (the kept completion goes in too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwritable_store_stops_claims_at_once_and_the_first_write_that_succeeds_resumes_them() {
    let dir = tmp("outage-claims");
    let yaml = "budget: null\njobs:\n  - name: a\n    schedule: every 60s\n    run_immediately: true\n    command: echo a\n    max_retries: 1\n  - name: b\n    schedule: \"30 13 * * *\"\n    command: echo b\n    max_retries: 1\n";
    let rig = start(&dir, Some(yaml), ManualClock::new(t(START)));
    rig.faulty.fail_completions.store(true, Ordering::SeqCst);
    rig.wait_until("a pending completion", |r| {
        r.handle.health.borrow().pending_completions == 1
    })
    .await;
    rig.faulty.fail_claims.store(true, Ordering::SeqCst);
    let h = rig.handle.health.borrow().clone();
    assert!(h.claims_stopped, "{h:?}");
    let why = h.claims_stopped_because().unwrap_or_default();
    assert!(
        why.starts_with("store unwritable since 2026-11-29T12:00:00Z, claims stopped")
            && why.contains("No space"),
        "{why}"
    );
    // Past b's first slot at 13:30, while the store refuses writes: probes, no claim won.
    rig.clock.advance(chrono::Duration::seconds(5500));
    let probes = rig.handle.health.borrow().outage_probes;
    rig.wait_until("two more probes", |r| {
        r.handle.health.borrow().outage_probes >= probes + 2
    })
    .await;
    assert!(rig.inner.job("b").unwrap().unwrap().rt.lease.is_none());
    // The disk is freed: the next probe goes through, claiming resumes, b runs, a is recorded.
    rig.faulty.fail_claims.store(false, Ordering::SeqCst);
    rig.faulty.fail_completions.store(false, Ordering::SeqCst);
    rig.wait_until("b ran", |r| r.rows().iter().any(|x| x.job == "b"))
        .await;
    rig.wait_until("a recorded", |r| r.rows().iter().any(|x| x.job == "a"))
        .await;
    let h = rig.handle.health.borrow().clone();
    assert!(
        !h.claims_stopped && h.store_failing_since.is_none(),
        "{h:?}"
    );
    assert_eq!(h.outages, 1, "{h:?}");
    let rows = rig.rows();
    let a: Vec<_> = rows.iter().filter(|r| r.job == "a").collect();
    assert_eq!(a[0].status, Status::Succeeded, "{rows:#?}");
    assert!(
        rows.iter().all(|r| r.status != Status::Abandoned),
        "{rows:#?}"
    );
    rig.stop().await.expect("clean stop");
}

/// An outage of any length ends at the store's return (it used to stop claims for good past
/// 30 s: nothing wrote, so nothing noticed the store was back). Under paused time: ten minutes
/// of refused claims cost a probe every 5–10 s once the backoff is at its ceiling (not four a
/// second), and claiming resumes within 10 s of the store's return.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn claims_resume_after_an_outage_of_any_length_probing_at_the_backoff_pace() {
    let dir = tmp("outage-long");
    let start_at = t(START);
    let inner = FileStore::open(&dir.join("store")).expect("open store");
    let jobs_path = dir.join("jobs.yaml");
    let yaml = "budget: null\njobs:\n  - name: later\n    schedule: \"0 0 1 1 *\"\n    command: echo later\n";
    std::fs::write(&jobs_path, yaml).expect("write jobs file");
    let loaded = config::load_str(yaml, &jobs_path).unwrap_or_else(|e| panic!("{e}"));
    inner.apply(&loaded.file, start_at).expect("apply");
    let hooks = Faulty {
        fail_claims: AtomicBool::new(true),
        ..Faulty::default()
    };
    let faulty = Arc::new(Wrapped::new(Arc::new(inner), hooks));
    let mut cfg = EngineConfig::new("long-outage".into());
    cfg.publish_snapshots = false;
    cfg.change_signal = false;
    let store: Arc<dyn Store> = faulty.clone();
    let clock: Arc<dyn Clock> = Arc::new(cronsole::clock::TokioClock::new(start_at));
    let handle = engine::spawn(cfg, store, clock, deps()).expect("spawn engine");
    let mut health = handle.health.clone();
    health
        .wait_for(|h| h.claims_stopped)
        .await
        .expect("the first claim fails: claims stop");
    tokio::time::sleep(StdDuration::from_secs(600)).await;
    let probes = faulty.claim_calls.load(Ordering::SeqCst);
    // 250 ms, 0.5, 1, 2, 4, 8 s then 10 s ceilings, each drawn from its upper half.
    assert!(
        (55..=130).contains(&probes),
        "{probes} claim attempts in 10 minutes of outage"
    );
    assert_eq!(handle.health.borrow().outage_probes as usize, probes - 1);
    // The store is back: the next probe (within 10 s) resumes claiming.
    faulty.fail_claims.store(false, Ordering::SeqCst);
    let back = tokio::time::Instant::now();
    tokio::time::timeout(
        StdDuration::from_secs(11),
        health.wait_for(|h| !h.claims_stopped),
    )
    .await
    .expect("claims resume within 10 s of the store's return")
    .expect("health channel");
    assert!(back.elapsed() <= StdDuration::from_secs(10));
    let h = handle.health.borrow().clone();
    assert!(
        h.store_failing_since.is_none() && h.last_outage.is_some(),
        "{h:?}"
    );
    handle.shutdown.cancel();
    handle.join.await.expect("engine task").expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_spools_unwritten_completions_and_the_next_start_replays_them_once() {
    let dir = tmp("outage-spool");
    let rig = start(&dir, Some(ONE_JOB), ManualClock::new(t(START)));
    rig.faulty.fail_completions.store(true, Ordering::SeqCst);
    rig.wait_until("a pending completion", |r| {
        r.handle.health.borrow().pending_completions == 1
    })
    .await;
    let clock = rig.clock.clone();
    match rig.stop().await {
        Err(EngineError::Unwritten { spooled, lost, .. }) => {
            assert_eq!(spooled, 1);
            assert!(lost.is_empty());
        }
        other => panic!("a stop with an unwritten completion must fail: {other:?}"),
    }
    let spooled = std::fs::read_to_string(spool_path(&dir)).expect("spool file");
    assert_eq!(spooled.lines().count(), 1, "{spooled}");
    let copy = spooled.clone();

    // Next start, store healthy: the completion is written before anything is claimed.
    let rig = start(&dir, None, clock.clone());
    rig.wait_until("the replayed row", |r| !r.rows().is_empty())
        .await;
    rig.wait_until("the spool emptied", |r| !spool_path(&r.dir).exists())
        .await;
    let rows = rig.rows();
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(rows[0].status, Status::Succeeded);
    assert!(!rows[0].stale_lease, "fenced: the run still held its lease");
    assert!(rig.inner.job("a").unwrap().unwrap().rt.lease.is_none());
    rig.stop().await.expect("clean stop");

    // The same spool replayed again (say, a crash before it was removed): not written twice.
    std::fs::write(spool_path(&dir), copy).unwrap();
    let rig = start(&dir, None, clock);
    rig.wait_until("the spool emptied", |r| !spool_path(&r.dir).exists())
        .await;
    settle_engine(&rig.handle).await;
    assert_eq!(rig.rows().len(), 1, "{:#?}", rig.rows());
    rig.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_spool_is_refused_and_left_as_it_is() {
    let dir = tmp("outage-badspool");
    std::fs::create_dir_all(dir.join("spool")).unwrap();
    std::fs::write(spool_path(&dir), "{oops\n").unwrap();
    let rig = start(&dir, Some(ONE_JOB), ManualClock::new(t(START)));
    let r = tokio::time::timeout(StdDuration::from_secs(20), rig.handle.join)
        .await
        .expect("engine ends")
        .expect("engine task");
    match r {
        Err(EngineError::Spool(e)) => assert!(e.to_string().contains(":1:"), "{e}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        std::fs::read_to_string(spool_path(&dir)).unwrap(),
        "{oops\n"
    );
    assert!(
        rig.inner
            .history(&HistoryQuery {
                limit: 10,
                ..Default::default()
            })
            .unwrap()
            .is_empty()
    );
}

#[test]
fn store_retries_back_off_to_ten_seconds_jittered_in_the_upper_half() {
    let d: Vec<u64> = (1..=9)
        .map(|a| engine::store_backoff(a).as_millis() as u64)
        .collect();
    assert_eq!(
        d,
        [250, 500, 1000, 2000, 4000, 8000, 10_000, 10_000, 10_000]
    );
    for a in 1..=9 {
        let ceiling = engine::store_backoff(a);
        assert_eq!(engine::probe_delay(a, 0.0), ceiling / 2);
        assert_eq!(engine::probe_delay(a, 1.0), ceiling);
        let mid = engine::probe_delay(a, 0.5);
        assert!(mid > ceiling / 2 && mid < ceiling, "{mid:?} of {ceiling:?}");
    }
    assert_eq!(
        engine::probe_delay(20, f64::NAN),
        StdDuration::from_millis(7_500)
    );
}

//! The driver behind `cronsole console --attach`: the console over a store that other owners
//! run, with no engine in this process. It hands the console the same three channel
//! ends an engine would, so `tui::run` cannot tell the difference.
//!
//! Owns: watching the store for changes — its change signal (inotify, LISTEN/NOTIFY) when it
//! has one, so an idle console reads nothing and wakes for nothing; otherwise its change token
//! every [`POLL`] (through [`blocking`] because the store is synchronous) — rebuilding a
//! [`Snapshot`] only when the token moved, publishing it,
//! emitting [`Event::Row`] for history rows it had not seen, and executing [`Command`]s directly
//! on the store (`set_paused`, `request_trigger`, `retry`, `cancel`) so pause, trigger, retry and
//! cancel work without an engine here (an engine sharing the store carries them out).
//! Must not touch: claims, leases, runs (an engine elsewhere does those), the terminal.
//!
//! Decisions: the first snapshot is loaded before `start` returns (so a broken store is an
//! error the CLI can print, not a blank screen); later store errors become [`Event::Notice`]s and
//! polling goes on; a trigger's outcome is reported as a notice that says an engine sharing the
//! store will run it; `Command::Shutdown` or the cancellation token ends the task.
//! On a large store the first snapshot is one page of jobs ([`Snapshot::load_first`]), so the
//! console draws at once, and the whole one is read by the first poll; a snapshot is rebuilt
//! no sooner than [`LOAD_DUTY`] times the last build's duration after it (a million-job store
//! that changes all the time is re-read a bounded share of the time, not back to back).

use crate::store::BackendError;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::clock::Clock;
use crate::engine::{Command, Event, JudgeAt};
use crate::snapshot::Snapshot;
use crate::store::{Store, StoreError, TriggerOutcome, blocking};

/// How often the change token is read.
pub const POLL: Duration = Duration::from_millis(250);
const EVENTS_CAPACITY: usize = 1024;
/// A snapshot is rebuilt no sooner than this many times the last build's duration after it.
pub const LOAD_DUTY: u32 = 3;
const COMMANDS_CAPACITY: usize = 64;

/// Why `console --attach` could not start.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// The first snapshot could not be read.
    #[error("cannot read the store at {location}: {source}")]
    Store {
        /// Where the store lives.
        location: String,
        /// What the store said.
        #[source]
        source: StoreError,
    },
    /// The blocking read task died.
    #[error("the store read task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// The channel ends for the console, and the polling task.
pub struct Attached {
    /// What the console draws (a new snapshot whenever the store's change token moved).
    pub snapshots: watch::Receiver<Arc<Snapshot>>,
    /// History rows this driver had not seen, and notices (command outcomes, store errors).
    pub events: broadcast::Receiver<Event>,
    /// Pause, resume, trigger, retry and cancel, carried out on the store directly.
    pub commands: mpsc::Sender<Command>,
    /// The polling task; it ends on `Command::Shutdown`, on cancellation or when every sender is
    /// gone.
    pub task: JoinHandle<()>,
}

struct Ctx {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    owner: String,
    started_at: chrono::DateTime<chrono::Utc>,
}

impl Ctx {
    /// Read the token, then the snapshot (a change in between shows as a new token next poll).
    /// `first`: only the first page of a large store (see the module doc).
    async fn load(&self, first: bool) -> Result<(u64, Snapshot), StoreError> {
        let now = self.clock.now();
        let (owner, started) = (self.owner.clone(), self.started_at);
        blocking(&self.store, move |store| {
            let tok = store.change_token()?;
            let snap = if first {
                Snapshot::load_first(store, now, &owner, started, false)?
            } else {
                Snapshot::load(store, now, &owner, started, false)?
            };
            Ok((tok, snap))
        })
        .await
    }

    async fn token(&self) -> Result<u64, StoreError> {
        blocking(&self.store, |store| store.change_token()).await
    }

    /// Apply one command to the store; the text is what the operator should read.
    async fn execute(&self, cmd: Command) -> String {
        let now = self.clock.now();
        let res = blocking(&self.store, move |store| match cmd {
            Command::Pause(j) => store
                .set_paused(&j, true, now)
                .map(|()| with_note(store, format!("{j} paused"), crate::owners::paused_note)),
            Command::Resume(j) => store
                .set_paused(&j, false, now)
                .map(|()| format!("{j} resumed")),
            // No engine to claim it: the CLI's words, not "the next owner claiming".
            Command::Trigger(j) => store.request_trigger(&j, now).map(|o| {
                let waiting = match o {
                    TriggerOutcome::Queued => no_engine(store, crate::owners::waiting_note),
                    _ => None,
                };
                crate::engine::trigger_notice_waiting(&j, &o, waiting.as_deref())
            }),
            Command::Retry(id) => store.retry(id, now).map(|(job, out)| {
                let waiting = match out {
                    crate::store::EditOutcome::Queued { .. } => {
                        no_engine(store, crate::owners::waiting_note)
                    }
                    _ => None,
                };
                crate::engine::operator_notice_waiting(&job, &out, waiting.as_deref())
            }),
            Command::Cancel(j) => store.cancel(&j, now).map(|(job, out)| {
                crate::engine::cancel_notice(store, &job, &out, JudgeAt::caller(now))
            }),
            Command::Answer {
                run_id,
                call,
                approve,
            } => crate::engine::answer_call(
                store,
                (run_id, Some(&call)),
                approve,
                None,
                "console",
                JudgeAt::caller(now),
            )
            .map(|a| a.notice),
            Command::Shutdown => Ok(String::new()),
        })
        .await;
        match res {
            Ok(text) => text,
            Err(e @ StoreError::Backend(BackendError::Task { .. })) => e.to_string(),
            Err(e) => format!("store refused: {e}"),
        }
    }
}

/// The note `note` gives over the store's owners (`None` while one is live, or when the owners
/// cannot be read: a note is advice, never a reason to fail the command).
fn no_engine(
    store: &dyn Store,
    note: fn(&[crate::model::OwnerSeen]) -> Option<String>,
) -> Option<String> {
    store.owners().ok().and_then(|o| note(&o))
}

/// `text`, then the note `note` gives when no engine is running on the store: the console
/// attached to a store says what the CLI says after the same request.
fn with_note(
    store: &dyn Store,
    text: String,
    note: fn(&[crate::model::OwnerSeen]) -> Option<String>,
) -> String {
    match no_engine(store, note) {
        Some(n) => format!("{text}; note: {n}"),
        None => text,
    }
}

/// Load the first snapshot and start polling. Ends when `cancel` fires, on
/// `Command::Shutdown`, or when every command sender is dropped.
pub async fn start(
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    owner: String,
    cancel: CancellationToken,
) -> Result<Attached, AttachError> {
    let ctx = Ctx {
        started_at: clock.now(),
        store,
        clock,
        owner,
    };
    let (token, first) = ctx.load(true).await.map_err(|source| AttachError::Store {
        location: ctx.store.location(),
        source,
    })?;
    let seen: HashSet<Uuid> = first.recent.iter().map(|r| r.run_id).collect();
    let reload = first.loading;
    let (snap_tx, snap_rx) = watch::channel(Arc::new(first));
    let (ev_tx, ev_rx) = broadcast::channel(EVENTS_CAPACITY);
    let (cmd_tx, cmd_rx) = mpsc::channel(COMMANDS_CAPACITY);
    let task = tokio::spawn(poll_loop(
        ctx, token, reload, seen, snap_tx, ev_tx, cmd_rx, cancel,
    ));
    Ok(Attached {
        snapshots: snap_rx,
        events: ev_rx,
        commands: cmd_tx,
        task,
    })
}

#[allow(clippy::too_many_arguments)]
async fn poll_loop(
    ctx: Ctx,
    mut last: u64,
    // The first snapshot was one page: read the whole store at the first poll.
    mut reload: bool,
    mut seen: HashSet<Uuid>,
    snap_tx: watch::Sender<Arc<Snapshot>>,
    ev_tx: broadcast::Sender<Event>,
    mut cmd_rx: mpsc::Receiver<Command>,
    cancel: CancellationToken,
) {
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut signal = ctx.store.change_signal();
    let mut last_error: Option<String> = None;
    let mut next_load = tokio::time::Instant::now();
    // A look the signal will not prompt: the whole store after a first page, a change that came
    // too soon after the last build, a retry after a store error (at `next_load`).
    let mut again = reload;
    loop {
        let mut force = std::mem::take(&mut reload);
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return,
            cmd = cmd_rx.recv() => match cmd {
                None | Some(Command::Shutdown) => return,
                Some(c) => {
                    let text = ctx.execute(c).await;
                    let _ = ev_tx.send(Event::Notice(text));
                    force = true;
                }
            },
            alive = changed(&mut signal) => {
                if !alive {
                    signal = None;
                    tick.reset();
                }
            }
            _ = tokio::time::sleep_until(next_load), if again => again = false,
            _ = tick.tick(), if signal.is_none() => {}
        }
        let changed = match ctx.token().await {
            Ok(t) => force || t != last,
            Err(e) => {
                report(&ev_tx, &mut last_error, e);
                again = true;
                next_load = next_load.max(tokio::time::Instant::now() + 4 * POLL);
                continue;
            }
        };
        if !changed {
            continue;
        }
        // Too soon after the last (long) build: `last` is left as it was, so the look at
        // `next_load` sees the change; a command's `force` waits for it too.
        if tokio::time::Instant::now() < next_load {
            reload |= force;
            again = true;
            continue;
        }
        let t0 = std::time::Instant::now();
        let loaded = ctx.load(false).await;
        next_load = tokio::time::Instant::now() + t0.elapsed().saturating_mul(LOAD_DUTY);
        match loaded {
            Ok((tok, snap)) => {
                last = tok;
                last_error = None;
                // New rows, oldest first, as an engine would have sent them.
                for r in snap
                    .recent
                    .iter()
                    .rev()
                    .filter(|r| !seen.contains(&r.run_id))
                {
                    let _ = ev_tx.send(Event::Row(r.clone()));
                }
                seen = snap.recent.iter().map(|r| r.run_id).collect();
                if snap_tx.send(Arc::new(snap)).is_err() {
                    return;
                }
            }
            Err(e) => report(&ev_tx, &mut last_error, e),
        }
    }
}

/// The next change signal; `false` when it ended (the caller polls from then on). Without a
/// signal, never.
async fn changed(signal: &mut Option<crate::store::signal::ChangeSignal>) -> bool {
    match signal {
        Some(s) => s.changed().await,
        None => std::future::pending().await,
    }
}

/// Tell the operator about a store error once, not every 250 ms.
fn report(ev_tx: &broadcast::Sender<Event>, last: &mut Option<String>, e: StoreError) {
    let text = format!("store error: {e}");
    if last.as_deref() != Some(text.as_str()) {
        let _ = ev_tx.send(Event::Notice(text.clone()));
        *last = Some(text);
    }
}

#[cfg(test)]
mod tests {
    use crate::store::OperationError;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

    use chrono::{DateTime, Utc};

    use super::*;
    use crate::clock::ManualClock;
    use crate::model::{HistoryRow, JobRecord, JobsFile, Settings, Status};
    use crate::store::{
        ApplyReport, ClaimOutcome, ClaimRequest, CompleteOutcome, Completion, HistoryQuery,
        HistoryReader, RenewOutcome, SpendNow, StoreResult, TriggerOutcome,
    };
    use crate::tui::testdata;

    /// Just enough of a store for the driver: jobs, history, a token, pause and trigger.
    #[derive(Default)]
    struct FakeStore {
        jobs: Mutex<Vec<JobRecord>>,
        rows: Mutex<Vec<HistoryRow>>,
        token: AtomicU64,
        loads: AtomicUsize,
        calls: Mutex<Vec<String>>,
    }

    impl FakeStore {
        fn bump(&self) {
            self.token.fetch_add(1, Ordering::SeqCst);
        }
        fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
            m.lock().unwrap_or_else(|e| e.into_inner())
        }
    }

    fn unsupported<T>() -> StoreResult<T> {
        Err(StoreError::Backend(BackendError::Unsupported(
            "not in the fake",
        )))
    }

    impl HistoryReader for FakeStore {
        fn job(&self, name: &str) -> StoreResult<Option<JobRecord>> {
            Ok(Self::lock(&self.jobs)
                .iter()
                .find(|j| j.def.name == name)
                .cloned())
        }

        fn history(&self, q: &HistoryQuery) -> StoreResult<Vec<HistoryRow>> {
            Ok(Self::lock(&self.rows)
                .iter()
                .filter(|r| q.since.is_none_or(|s| r.finished_at >= s))
                .filter(|r| q.job.as_ref().is_none_or(|j| &r.job == j))
                .take(q.limit)
                .cloned()
                .collect())
        }
    }

    impl Store for FakeStore {
        fn location(&self) -> String {
            "fake".into()
        }
        fn apply(&self, _: &JobsFile, _: DateTime<Utc>) -> StoreResult<ApplyReport> {
            unsupported()
        }
        fn settings(&self) -> StoreResult<Settings> {
            Ok(Settings::default())
        }
        fn tool_pins(&self, _: &[String]) -> StoreResult<Vec<crate::model::ToolPin>> {
            unsupported()
        }
        fn pin_tools(
            &self,
            _: &[crate::model::ToolPin],
        ) -> StoreResult<Vec<crate::model::ToolPin>> {
            unsupported()
        }
        fn accept_tools(&self, _: &str, _: &[crate::model::ToolPin]) -> StoreResult<usize> {
            unsupported()
        }
        fn change_token(&self) -> StoreResult<u64> {
            Ok(self.token.load(Ordering::SeqCst))
        }
        fn jobs(&self) -> StoreResult<Vec<JobRecord>> {
            self.loads.fetch_add(1, Ordering::SeqCst);
            Ok(Self::lock(&self.jobs).clone())
        }
        fn next_wakeup(&self, _: DateTime<Utc>) -> StoreResult<Option<DateTime<Utc>>> {
            Ok(None)
        }
        fn claim_due(&self, _: &ClaimRequest<'_>) -> StoreResult<ClaimOutcome> {
            unsupported()
        }
        fn renew(&self, _: &str, _: Uuid, _: DateTime<Utc>) -> StoreResult<RenewOutcome> {
            unsupported()
        }
        fn complete(&self, _: Completion) -> StoreResult<CompleteOutcome> {
            unsupported()
        }
        fn set_paused(&self, name: &str, paused: bool, _: DateTime<Utc>) -> StoreResult<()> {
            Self::lock(&self.calls).push(format!("set_paused {name} {paused}"));
            let mut jobs = Self::lock(&self.jobs);
            let j = jobs
                .iter_mut()
                .find(|j| j.def.name == name)
                .ok_or_else(|| StoreError::Operation(OperationError::NoSuchJob(name.into())))?;
            j.rt.paused = paused;
            self.bump();
            Ok(())
        }
        fn request_trigger(&self, name: &str, now: DateTime<Utc>) -> StoreResult<TriggerOutcome> {
            Self::lock(&self.calls).push(format!("request_trigger {name}"));
            let mut jobs = Self::lock(&self.jobs);
            let j = jobs
                .iter_mut()
                .find(|j| j.def.name == name)
                .ok_or_else(|| StoreError::Operation(OperationError::NoSuchJob(name.into())))?;
            j.rt.trigger_requested_at = Some(now);
            self.bump();
            Ok(TriggerOutcome::Queued)
        }
        fn spend(&self, _: &str, _: DateTime<Utc>) -> StoreResult<SpendNow> {
            Ok(SpendNow::default())
        }
        fn update_job(
            &self,
            name: &str,
            _: &crate::store::JobEdit,
            _: DateTime<Utc>,
        ) -> StoreResult<crate::store::EditOutcome> {
            Err(crate::store::StoreError::Operation(
                OperationError::NoSuchJob(name.to_string()),
            ))
        }
    }

    async fn setup() -> (Arc<FakeStore>, Attached, CancellationToken) {
        let now = testdata::now();
        let store = Arc::new(FakeStore::default());
        FakeStore::lock(&store.jobs).push(testdata::job("a", 60, now));
        FakeStore::lock(&store.rows).push(testdata::row(1, "a", Status::Succeeded, now));
        let cancel = CancellationToken::new();
        let att = start(
            store.clone(),
            Arc::new(ManualClock::new(now)),
            "attached (test)".into(),
            cancel.clone(),
        )
        .await
        .unwrap();
        (store, att, cancel)
    }

    #[tokio::test(start_paused = true)]
    async fn token_bump_publishes_a_new_snapshot_and_new_rows() {
        let (store, mut att, cancel) = setup().await;
        assert_eq!(att.snapshots.borrow().jobs.len(), 1);
        assert!(!att.snapshots.borrow().engine_running);
        assert_eq!(att.snapshots.borrow().owner, "attached (test)");
        // Nothing changed: polling does not rebuild.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(store.loads.load(Ordering::SeqCst), 1);
        assert!(!att.snapshots.has_changed().unwrap());
        // A new row and a token bump.
        let row = testdata::row(2, "a", Status::Failed, testdata::now());
        FakeStore::lock(&store.rows).insert(0, row.clone());
        store.bump();
        att.snapshots.changed().await.unwrap();
        let snap = att.snapshots.borrow_and_update().clone();
        assert_eq!(snap.recent.len(), 2);
        match att.events.recv().await.unwrap() {
            Event::Row(r) => assert_eq!(r.run_id, row.run_id),
            other => panic!("expected the new row, got {other:?}"),
        }
        // The old row is not re-sent.
        assert!(att.events.try_recv().is_err());
        cancel.cancel();
        att.task.await.unwrap();
    }

    /// On a store larger than one page the console draws the first page at once
    /// (marked loading) and the whole store follows from the first poll, unasked.
    #[tokio::test(start_paused = true)]
    async fn a_large_store_shows_its_first_page_then_every_job() {
        let now = testdata::now();
        let store = Arc::new(FakeStore::default());
        let n = crate::snapshot::FIRST_ROWS + 3;
        FakeStore::lock(&store.jobs)
            .extend((0..n).map(|i| testdata::job(&format!("j{i:06}"), 60, now)));
        let cancel = CancellationToken::new();
        let mut att = start(
            store.clone(),
            Arc::new(ManualClock::new(now)),
            "attached (test)".into(),
            cancel.clone(),
        )
        .await
        .unwrap();
        {
            let first = att.snapshots.borrow_and_update();
            assert_eq!(first.jobs.len(), crate::snapshot::FIRST_ROWS);
            assert!(first.loading);
        }
        // No token moved: the whole store is read anyway.
        att.snapshots.changed().await.unwrap();
        let all = att.snapshots.borrow_and_update().clone();
        assert_eq!(all.jobs.len(), n);
        assert!(!all.loading);
        assert_eq!(all.jobs[n - 1].def.name, format!("j{:06}", n - 1));
        cancel.cancel();
        att.task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn pause_and_trigger_reach_the_store() {
        let (store, mut att, _cancel) = setup().await;
        att.commands.send(Command::Pause("a".into())).await.unwrap();
        att.snapshots.changed().await.unwrap();
        assert!(att.snapshots.borrow_and_update().jobs[0].rt.paused);
        att.commands
            .send(Command::Trigger("a".into()))
            .await
            .unwrap();
        att.snapshots.changed().await.unwrap();
        assert!(
            att.snapshots.borrow_and_update().jobs[0]
                .rt
                .trigger_requested_at
                .is_some()
        );
        att.commands
            .send(Command::Resume("nope".into()))
            .await
            .unwrap();
        let mut notices = vec![];
        while notices.len() < 3 {
            if let Event::Notice(n) = att.events.recv().await.unwrap() {
                notices.push(n);
            }
        }
        // No owner heartbeats on this store: the console says so as the CLI does, after a
        // pause and after a trigger (never "the next owner claiming will run it now").
        assert!(
            notices[0].starts_with("a paused; note: paused in the store; no engine is running"),
            "{notices:?}"
        );
        // One wording for a trigger everywhere: the CLI's `triggered NAME`.
        assert!(
            notices[1].starts_with("triggered a: queued; no engine is running on this store"),
            "{notices:?}"
        );
        assert!(!notices[1].contains("next owner"), "{notices:?}");
        assert!(notices[2].contains("no job named 'nope'"), "{notices:?}");
        assert_eq!(
            *FakeStore::lock(&store.calls),
            vec![
                "set_paused a true",
                "request_trigger a",
                "set_paused nope false"
            ]
        );
        att.commands.send(Command::Shutdown).await.unwrap();
        att.task.await.unwrap();
    }
}

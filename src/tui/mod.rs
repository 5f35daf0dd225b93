//! The console: a live ratatui dashboard of jobs, leases, cost burn and history
//! over the engine's published [`Snapshot`]s and [`Event`]s, sending [`Command`]s back.
//!
//! Owns: the terminal while the console runs (init, event loop, restore on quit, error and
//! panic), and the submodules: `state` (pure state, key → action), `keymap` (the one
//! binding table), `view` (drawing, outside text made inert first). Must not touch: the
//! store for writes — pause/trigger go out as Commands; the store is only *read*, off the UI
//! thread (`spawn_blocking`), for history beyond the snapshot's `recent` window.
//!
//! Loop shape (tokio-console): one `select!`, `biased;`, input first so snapshots never starve
//! keys; a redraw follows every change (at once; ratatui diffs frames, so no flicker), and with
//! nothing changing, the next one waits until a duration on the screen (LEFT, PASSED, uptime, a
//! lease's expiry) reads differently, on a whole second of the clock: once a second while one
//! shows seconds, once a minute at most when all show minutes or hours.
//! Keys are read on a dedicated thread (`crossterm::event::poll/read`) and filtered to
//! `KeyEventKind::Press`. On a terminal that thread also times the idle redraws: it waits for
//! input until the loop's next redraw is due and then hands the loop a tick, so an idle console
//! wakes two threads a redraw (the reader and the loop) and nothing in between. A tokio timer
//! would wake a runtime worker to step it down the timer wheel and again to fire it, and the
//! reader would wake on its own besides. Without the reader (tests), a tokio timer times them.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ratatui::crossterm::event::{self, Event as TermEvent, KeyEventKind};
use tokio::sync::{broadcast, mpsc, watch};

use crate::clock::Clock;
use crate::engine::{Command, Event};
use crate::snapshot::Snapshot;
use crate::store::{HistoryQuery, HistoryReader};

mod bulk;
pub(crate) mod keymap;
pub(crate) mod state;
pub(crate) mod view;

#[doc(hidden)]
#[cfg(any(test, feature = "testkit"))]
pub mod testdata;

use state::{Action, App, Loaded, Query};

/// Rows loaded for one job's detail or `h` history.
const JOB_ROWS: usize = 500;
/// Diffs loaded for one job's diff viewer.
const DIFF_ROWS: usize = 200;
/// The countdowns' finest step: with seconds on the screen, the console redraws once a second;
/// with only minutes or hours, when the first of them turns over.
const TICK: Duration = Duration::from_secs(1);
/// How long the key reader waits for input, at most, before it looks again whether the console
/// closed and when the next redraw is due (so a redraw due sooner than the reader expected, after
/// a change the loop drew at once, is at most this late).
const READER_WAIT: Duration = Duration::from_secs(1);

/// When the loop's next idle redraw is due (written by the loop after each draw).
type Due = Arc<std::sync::Mutex<Option<std::time::Instant>>>;

/// The idle redraws timed by the key reader (see the module doc): the loop writes when its next
/// one is due in `due`; the reader clears it and sends `()` on `rx` once that instant passed.
pub struct Ticks {
    due: Due,
    rx: mpsc::UnboundedReceiver<()>,
}

fn lock_due(due: &Due) -> std::sync::MutexGuard<'_, Option<std::time::Instant>> {
    due.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What the console needs from whoever runs it (the engine, or [`crate::attach`]).
pub struct ConsoleDeps {
    /// The engine's (or attach's) latest snapshot.
    pub snapshots: watch::Receiver<Arc<Snapshot>>,
    /// The engine's events: finished rows, notices, run starts, deliveries.
    pub events: broadcast::Receiver<Event>,
    /// Where the console's commands (pause, trigger, retry, cancel, …) go.
    pub commands: mpsc::Sender<Command>,
    /// Read-only history access, used off the UI thread for rows beyond the snapshot.
    pub store: Arc<dyn HistoryReader>,
    /// The time the console shows and counts down with.
    pub clock: Arc<dyn Clock>,
    /// Cancel to close the console from outside (SIGTERM, `--for`): the terminal is restored
    /// exactly as on `q`.
    pub stop: tokio_util::sync::CancellationToken,
    /// What answers the `D` key (the binary runs `cronsole dry-run NAME`); `None` says the
    /// dry run is not available here.
    pub dry_run: Option<DryRunner>,
    /// Warnings from start-up (the jobs file's, e.g. an agent's key variable that is not set),
    /// shown on the notice line when the console opens: printed on stderr they would be
    /// hidden behind the console until it closes.
    pub warnings: Vec<String>,
    /// The engine's view of its store (the header shows an outage while it lasts, and the
    /// last one after); `None` without an engine in this process.
    pub health: Option<watch::Receiver<crate::engine::EngineHealth>>,
    /// Whether a key variable is set where this process's engine runs: the header keeps an
    /// alert for each agent a job calls whose key is unset. `None` when the runs happen in
    /// other processes (`console --attach`), whose environment cannot be seen.
    pub key_env: Option<state::alerts::KeyLookup>,
}

/// Produces the text of `cronsole dry-run NAME` for the console (the error says why not).
pub type DryRunner = Arc<
    dyn Fn(
            String,
        )
            -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, String>> + Send>>
        + Send
        + Sync,
>;

/// Why the console could not run.
#[derive(Debug, thiserror::Error)]
pub enum TuiError {
    /// The console needs a terminal; the caller should have chosen headless mode.
    #[error("the console needs a terminal on stdout (use `cronsole run` for headless mode)")]
    NotATerminal,
    /// Reading or drawing the terminal failed.
    #[error("terminal I/O failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Initialise the terminal, run the console until `q`/Ctrl-C, and restore the terminal whatever
/// happens (a panic is restored by the hook `ratatui::try_init` installs).
pub async fn run(deps: ConsoleDeps) -> Result<(), TuiError> {
    if !std::io::stdout().is_terminal() {
        return Err(TuiError::NotATerminal);
    }
    let mut terminal = ratatui::try_init().inspect_err(|_| ratatui::restore())?;
    let stop = Arc::new(AtomicBool::new(false));
    let (key_tx, key_rx) = mpsc::unbounded_channel();
    let (tick_tx, tick_rx) = mpsc::unbounded_channel();
    let due: Due = Arc::default();
    let reader = spawn_input_reader(key_tx, tick_tx, due.clone(), stop.clone());
    let ticks = Ticks { due, rx: tick_rx };
    let result = event_loop_ticked(&mut terminal, deps, key_rx, Some(ticks)).await;
    stop.store(true, Ordering::Relaxed);
    ratatui::restore();
    // The reader notices `stop` within its poll interval.
    drop(reader);
    result
}

/// Terminal input on its own thread: crossterm's reads block. It also sends the idle redraws'
/// ticks on `tick`, one each time the instant in `due` passed.
fn spawn_input_reader(
    tx: mpsc::UnboundedSender<std::io::Result<TermEvent>>,
    tick: mpsc::UnboundedSender<()>,
    due: Due,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let next = *lock_due(&due);
            let wait = next.map_or(READER_WAIT, |d| {
                d.saturating_duration_since(std::time::Instant::now())
                    .min(READER_WAIT)
            });
            match event::poll(wait) {
                Ok(false) => {
                    let mut g = lock_due(&due);
                    if g.is_some_and(|d| d <= std::time::Instant::now()) {
                        *g = None;
                        drop(g);
                        if tick.send(()).is_err() {
                            return;
                        }
                    }
                }
                Ok(true) => {
                    let ev = event::read();
                    let failed = ev.is_err();
                    if tx.send(ev).is_err() || failed {
                        return;
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            }
        }
    })
}

impl From<std::convert::Infallible> for TuiError {
    fn from(x: std::convert::Infallible) -> Self {
        match x {}
    }
}

/// The console's loop over any ratatui backend (the real terminal, or a `TestBackend` in
/// tests) and a stream of terminal events. Returns when `q`/Ctrl-C is pressed or input ends.
/// Idle redraws are timed by a tokio timer.
pub async fn event_loop<B: ratatui::backend::Backend>(
    terminal: &mut ratatui::Terminal<B>,
    deps: ConsoleDeps,
    keys: mpsc::UnboundedReceiver<std::io::Result<TermEvent>>,
) -> Result<(), TuiError>
where
    TuiError: From<B::Error>,
{
    event_loop_ticked(terminal, deps, keys, None).await
}

/// The next tick of the key reader, or never (no reader: the loop's own timer).
async fn next_tick_of(ticks: &mut Option<Ticks>) -> Option<()> {
    match ticks {
        Some(t) => t.rx.recv().await,
        None => std::future::pending().await,
    }
}

/// The notice the console opens with: the jobs file's warnings, the first in full.
fn warnings_notice(warnings: &[String]) -> Option<String> {
    match warnings {
        [] => None,
        [one] => Some(one.clone()),
        [first, rest @ ..] => Some(format!(
            "{first} (+{} more warnings: cronsole validate FILE)",
            rest.len()
        )),
    }
}

/// Draw `app` at the clock's now; returns when the next idle redraw is due, and tells the key
/// reader (`ticks`) when there is one.
fn draw<B: ratatui::backend::Backend>(
    terminal: &mut ratatui::Terminal<B>,
    app: &mut App,
    clock: &dyn Clock,
    ticks: Option<&Ticks>,
) -> Result<tokio::time::Instant, TuiError>
where
    TuiError: From<B::Error>,
{
    app.set_now(clock.now());
    // How far the open view can scroll at this size: measured here, not while drawing.
    let size = terminal.size()?;
    let area = ratatui::layout::Rect::new(0, 0, size.width, size.height);
    if let Some(max) = view::scroll_max(app, area) {
        app.set_scroll_max(max);
    }
    terminal.draw(|f| f.render_widget(&*app, f.area()))?;
    let tick_at = next_tick(app, clock.now());
    if let Some(t) = ticks {
        let wait = tick_at.saturating_duration_since(tokio::time::Instant::now());
        *lock_due(&t.due) = Some(std::time::Instant::now() + wait);
    }
    Ok(tick_at)
}

/// [`event_loop`], its idle redraws timed by `ticks` when given (see the module doc).
async fn event_loop_ticked<B: ratatui::backend::Backend>(
    terminal: &mut ratatui::Terminal<B>,
    mut deps: ConsoleDeps,
    mut keys: mpsc::UnboundedReceiver<std::io::Result<TermEvent>>,
    mut ticks: Option<Ticks>,
) -> Result<(), TuiError>
where
    TuiError: From<B::Error>,
{
    let first = deps.snapshots.borrow_and_update().clone();
    let mut app = App::new(first, deps.clock.now());
    let key_alerts = |app: &mut App| {
        if let Some(is_set) = &deps.key_env {
            app.key_alerts = state::alerts::missing_keys(&app.snap, is_set.as_ref());
        }
    };
    key_alerts(&mut app);
    app.notice = warnings_notice(&deps.warnings);
    let (loaded_tx, mut loaded_rx) = mpsc::unbounded_channel::<Loaded>();
    let (mut snaps_open, mut events_open) = (true, true);
    // Without an engine, a channel that never changes (its sender lives as long as the loop).
    let (_no_engine, quiet) = watch::channel(crate::engine::EngineHealth::default());
    let mut health = deps.health.take().unwrap_or(quiet);
    let mut health_open = true;
    app.store_health = health.borrow_and_update().clone();
    let mut dirty = true;
    let mut tick_at = tokio::time::Instant::now();
    loop {
        // The detail view's whole record: read when it opens and once per snapshot after.
        if let Some(q) = app.record_wanted() {
            load(deps.store.clone(), q, loaded_tx.clone());
        }
        if dirty {
            tick_at = draw(terminal, &mut app, &*deps.clock, ticks.as_ref())?;
            dirty = false;
        }
        tokio::select! {
            biased;
            ev = keys.recv() => match ev {
                Some(Ok(TermEvent::Key(k))) if k.kind == KeyEventKind::Press => {
                    app.notice = None;
                    match app.handle_key(k) {
                        Action::Quit => return Ok(()),
                        Action::None => {}
                        Action::Redraw => dirty = true,
                        Action::Send(cmd) => {
                            send(&deps.commands, cmd, &mut app);
                            dirty = true;
                        }
                        Action::SendAll(cmds) => {
                            for cmd in cmds {
                                send(&deps.commands, cmd, &mut app);
                            }
                            dirty = true;
                        }
                        Action::Load(Query::DryRun(job)) => {
                            dry_run(deps.dry_run.clone(), job, loaded_tx.clone());
                            dirty = true;
                        }
                        Action::Load(q) => {
                            load(deps.store.clone(), q, loaded_tx.clone());
                            dirty = true;
                        }
                    }
                }
                Some(Ok(TermEvent::Resize(..))) => dirty = true,
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(TuiError::Io(e)),
                None => return Ok(()),
            },
            _ = deps.stop.cancelled() => return Ok(()),
            changed = deps.snapshots.changed(), if snaps_open => match changed {
                Ok(()) => {
                    let s = deps.snapshots.borrow_and_update().clone();
                    app.on_snapshot(s);
                    key_alerts(&mut app);
                    dirty = true;
                }
                Err(_) => {
                    snaps_open = false;
                    app.notice = Some("the engine stopped publishing: the screen is frozen".into());
                    dirty = true;
                }
            },
            changed = health.changed(), if health_open => {
                match changed {
                    Ok(()) => app.store_health = health.borrow_and_update().clone(),
                    Err(_) => health_open = false,
                }
                dirty = true;
            }
            ev = deps.events.recv(), if events_open => match ev {
                Ok(e) => {
                    app.on_event(e);
                    dirty = true;
                }
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    app.notice = Some(format!("{n} events skipped (the next snapshot has them)"));
                    dirty = true;
                }
                Err(broadcast::error::RecvError::Closed) => events_open = false,
            },
            Some(l) = loaded_rx.recv() => {
                app.on_loaded(l);
                dirty = true;
            }
            _ = tokio::time::sleep_until(tick_at), if ticks.is_none() => {
                app.on_tick(deps.clock.now());
                dirty = true;
            }
            Some(()) = next_tick_of(&mut ticks) => {
                app.on_tick(deps.clock.now());
                dirty = true;
            }
        }
    }
}

/// When to redraw with nothing happening: when the first duration on the screen turns over
/// ([`view::next_change`]), on one of the clock's whole seconds (when countdowns step).
fn next_tick(app: &App, now: chrono::DateTime<chrono::Utc>) -> tokio::time::Instant {
    let to_next_second = TICK.saturating_sub(Duration::from_nanos(u64::from(
        now.timestamp_subsec_nanos(),
    )));
    tokio::time::Instant::now() + to_next_second + view::next_change(app).saturating_sub(TICK)
}

/// Never block the UI on a busy engine: a full queue is reported, not awaited.
fn send(tx: &mpsc::Sender<Command>, cmd: Command, app: &mut App) {
    if let Err(e) = tx.try_send(cmd) {
        let (why, cmd) = match e {
            mpsc::error::TrySendError::Full(c) => ("busy", c),
            mpsc::error::TrySendError::Closed(c) => ("gone", c),
        };
        app.notice = Some(format!("engine {why}: {cmd:?} not sent"));
        if let Command::Pause(j) | Command::Resume(j) | Command::Trigger(j) = cmd {
            app.command_not_sent(&j);
        }
    }
}

/// Ask the console's runner for a dry run of `job`; the text comes back on `tx`.
fn dry_run(runner: Option<DryRunner>, job: String, tx: mpsc::UnboundedSender<Loaded>) {
    tokio::spawn(async move {
        let text = match runner {
            Some(r) => r(job.clone()).await,
            None => {
                Err("the dry run needs the cronsole binary (run `cronsole dry-run NAME`)".into())
            }
        };
        let _ = tx.send(Loaded::DryRun { job, text });
    });
}

/// Run a read-only store query off the UI thread; the answer comes back on `tx`.
fn load(store: Arc<dyn HistoryReader>, q: Query, tx: mpsc::UnboundedSender<Loaded>) {
    tokio::spawn(async move {
        let res = tokio::task::spawn_blocking(move || run_query(store.as_ref(), q)).await;
        let loaded = res.unwrap_or_else(|e| Loaded::Failed(format!("history query failed: {e}")));
        let _ = tx.send(loaded);
    });
}

/// The store read behind a [`Query`] (blocking).
pub(crate) fn run_query(store: &dyn HistoryReader, q: Query) -> Loaded {
    let (job, with_diff, limit) = match &q {
        Query::DryRun(j) => {
            return Loaded::DryRun {
                job: j.clone(),
                text: Err("not a store read".into()),
            };
        }
        Query::Job(j) => {
            return match store.job(j) {
                Ok(record) => Loaded::Job {
                    job: j.clone(),
                    record: record.map(Box::new),
                },
                Err(e) => Loaded::Failed(format!("job {j}: {e}")),
            };
        }
        Query::JobHistory(j) => (j.clone(), false, JOB_ROWS),
        Query::Diffs(j) => (j.clone(), true, DIFF_ROWS),
        Query::HistoryPage {
            job,
            status,
            offset,
            token,
        } => {
            // One page of the whole history, newest first: only pages visited are read. The
            // page that continues the last one loaded starts from its store token (keyset:
            // cheap at any depth, filtered or not); the first page is read by offset.
            let hq = HistoryQuery {
                job: job.clone(),
                status: *status,
                limit: state::HISTORY_PAGE,
                offset: if token.is_some() { 0 } else { *offset },
                before: token.clone(),
                ..Default::default()
            };
            // A token retention made stale: read that page by offset instead.
            let res = match store.history_page(&hq) {
                Err(_) if hq.before.is_some() => store.history_page(&HistoryQuery {
                    offset: *offset,
                    before: None,
                    ..hq.clone()
                }),
                r => r,
            };
            return match res {
                Ok(page) => Loaded::HistoryPage {
                    offset: *offset,
                    rows: page.rows,
                    next: page.next,
                },
                Err(e) => Loaded::Failed(format!("history page: {e}")),
            };
        }
    };
    let hq = HistoryQuery {
        job: Some(job.clone()),
        with_diff,
        limit,
        ..Default::default()
    };
    match (store.history(&hq), q) {
        (Ok(rows), Query::JobHistory(_)) => Loaded::JobHistory { job, rows },
        (Ok(rows), Query::Diffs(_)) => Loaded::Diffs { job, rows },
        (Ok(_), Query::HistoryPage { .. } | Query::DryRun(_) | Query::Job(_)) => {
            Loaded::Failed("unreachable page query".into())
        }
        (Err(e), _) => Loaded::Failed(format!("history of {job}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::TokioClock;
    use crate::model::Status;
    use ratatui::backend::TestBackend;
    use ratatui::crossterm::event::{KeyCode, KeyEvent};

    fn screen_text(t: &ratatui::Terminal<TestBackend>) -> String {
        let buf = t.backend().buffer();
        buf.content().iter().map(|c| c.symbol()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn loop_redraws_on_snapshots_sends_commands_and_quits() {
        let (snap, now) = testdata::fixed();
        let recent = snap.recent.clone();
        let (snap_tx, snapshots) = watch::channel(Arc::new(snap.clone()));
        let (ev_tx, events) = broadcast::channel(16);
        let (commands, mut cmd_rx) = mpsc::channel(8);
        let (key_tx, key_rx) = mpsc::unbounded_channel();
        let deps = ConsoleDeps {
            snapshots,
            events,
            commands,
            store: Arc::new(testdata::HistoryOnlyStore(recent)),
            clock: Arc::new(TokioClock::new(now)),
            stop: tokio_util::sync::CancellationToken::new(),
            dry_run: None,
            warnings: Vec::new(),
            health: None,
            key_env: None,
        };
        let term = ratatui::Terminal::new(TestBackend::new(120, 40)).unwrap();
        let term = Arc::new(tokio::sync::Mutex::new(term));
        let t2 = term.clone();
        let task = tokio::spawn(async move {
            let mut t = t2.lock().await;
            event_loop(&mut t, deps, key_rx).await
        });
        let key = |c: KeyCode| Ok(TermEvent::Key(KeyEvent::from(c)));
        // `p` on the first job sends Pause and shows the optimistic mark.
        key_tx.send(key(KeyCode::Char('p'))).unwrap();
        let cmd = cmd_rx.recv().await.unwrap();
        assert_eq!(cmd, Command::Pause("backup-db".into()));
        // A snapshot with a new job is drawn within one tick.
        let mut s2 = snap.clone();
        s2.jobs.push(crate::snapshot::JobRow::of(&testdata::job(
            "zzz-added",
            60,
            now,
        )));
        snap_tx.send(Arc::new(s2)).unwrap();
        ev_tx
            .send(Event::Notice("hello from the engine".into()))
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        key_tx.send(key(KeyCode::Char('q'))).unwrap();
        task.await.unwrap().unwrap();
        let text = screen_text(&*term.lock().await);
        assert!(text.contains("zzz-added"), "{text}");
        assert!(text.contains("Jobs 9/9"), "{text}");
        assert!(text.contains("pausing…"), "{text}");
        assert!(text.contains("hello from the engine"), "{text}");
    }

    /// With the key reader timing the idle redraws, the loop says when the next one is due (a
    /// whole second of the clock, at most a second ahead, since the fixture shows seconds) and
    /// redraws on the reader's tick: the uptime moves on.
    #[tokio::test(start_paused = true)]
    async fn idle_redraws_come_from_the_readers_ticks() {
        let (snap, now) = testdata::fixed();
        let (_snap_tx, snapshots) = watch::channel(Arc::new(snap.clone()));
        let (_ev_tx, events) = broadcast::channel(16);
        let (commands, _cmd_rx) = mpsc::channel(8);
        let (key_tx, key_rx) = mpsc::unbounded_channel();
        let clock = Arc::new(TokioClock::new(now));
        let deps = ConsoleDeps {
            snapshots,
            events,
            commands,
            store: Arc::new(testdata::HistoryOnlyStore(snap.recent.clone())),
            clock: clock.clone(),
            stop: tokio_util::sync::CancellationToken::new(),
            dry_run: None,
            warnings: Vec::new(),
            health: None,
            key_env: None,
        };
        let (tick_tx, tick_rx) = mpsc::unbounded_channel();
        let due: Due = Arc::default();
        let ticks = Ticks {
            due: due.clone(),
            rx: tick_rx,
        };
        let term = ratatui::Terminal::new(TestBackend::new(120, 40)).unwrap();
        let term = Arc::new(tokio::sync::Mutex::new(term));
        let t2 = term.clone();
        let task = tokio::spawn(async move {
            let mut t = t2.lock().await;
            event_loop_ticked(&mut t, deps, key_rx, Some(ticks)).await
        });
        // The first draw writes when the next is due.
        let written = loop {
            if let Some(d) = *lock_due(&due) {
                break d;
            }
            tokio::task::yield_now().await;
        };
        let ahead = written.saturating_duration_since(std::time::Instant::now());
        assert!(ahead <= TICK, "{ahead:?}");
        // The clock moves on; the reader's tick (it clears the instant first) redraws, and the
        // loop writes the next instant after drawing.
        tokio::time::advance(Duration::from_secs(7)).await;
        *lock_due(&due) = None;
        tick_tx.send(()).unwrap();
        while lock_due(&due).is_none() {
            tokio::task::yield_now().await;
        }
        key_tx
            .send(Ok(TermEvent::Key(KeyEvent::from(KeyCode::Char('q')))))
            .unwrap();
        task.await.unwrap().unwrap();
        let text = screen_text(&*term.lock().await);
        let up = |t: chrono::DateTime<chrono::Utc>| {
            format!(
                "up {}",
                crate::when::span_secs((t - snap.started_at).num_seconds())
            )
        };
        assert!(text.contains(&up(clock.now())), "{text}");
    }

    /// Sequential History-pane pages continue from the previous page's store token: the rows
    /// are exactly the offset pages, filtered or not, on a store with sealed segments.
    #[test]
    fn history_pane_pages_continue_by_token_and_match_offset_pages() {
        use crate::model::{HistoryRow, Trigger};
        let dir = crate::testkit::tmp::TempDir::new("tui-pages");
        let store = crate::store::file::FileStore::open(&dir)
            .unwrap()
            .with_segment_bytes(64 * 1024);
        let t0 = chrono::DateTime::from_timestamp(1_000_000, 0).unwrap();
        let statuses = [Status::Succeeded, Status::Failed, Status::NoChange];
        let rows: Vec<HistoryRow> = (0..1600)
            .map(|i| {
                let at = t0 + chrono::Duration::seconds(i);
                HistoryRow::new(
                    &format!("h{}", i % 7),
                    statuses[i as usize % 3],
                    Trigger::Schedule,
                    Some(at),
                    "o",
                    at,
                )
            })
            .collect();
        store.append_history_unrecorded(&rows).unwrap();
        for status in [None, Some(Status::Failed)] {
            let mut got = Vec::new();
            let mut token: Option<String> = None;
            let mut tokens_used = 0;
            loop {
                tokens_used += usize::from(token.is_some());
                match run_query(
                    &store,
                    Query::HistoryPage {
                        job: None,
                        status,
                        offset: got.len(),
                        token: token.take(),
                    },
                ) {
                    Loaded::HistoryPage { offset, rows, next } => {
                        assert_eq!(offset, got.len());
                        let n = rows.len();
                        got.extend(rows.into_iter().map(|r| r.run_id));
                        if n < state::HISTORY_PAGE {
                            break;
                        }
                        token = next;
                    }
                    other => panic!("{other:?}"),
                }
            }
            assert!(
                tokens_used > 0,
                "status {status:?}: pages after the first use tokens"
            );
            // The token, not the offset, says where a continued page starts.
            let first = match run_query(
                &store,
                Query::HistoryPage {
                    job: None,
                    status,
                    offset: 0,
                    token: None,
                },
            ) {
                Loaded::HistoryPage { next, .. } => next,
                other => panic!("{other:?}"),
            };
            match run_query(
                &store,
                Query::HistoryPage {
                    job: None,
                    status,
                    offset: 7,
                    token: first,
                },
            ) {
                Loaded::HistoryPage { offset, rows, .. } => {
                    assert_eq!(
                        offset, 7,
                        "the pane's offset comes back for its stale check"
                    );
                    let ids: Vec<_> = rows.into_iter().map(|r| r.run_id).collect();
                    let at = state::HISTORY_PAGE;
                    assert_eq!(ids[..], got[at..at + ids.len()], "status {status:?}");
                }
                other => panic!("{other:?}"),
            }
            let want: Vec<_> = store
                .history(&HistoryQuery {
                    status,
                    ..Default::default()
                })
                .unwrap()
                .into_iter()
                .map(|r| r.run_id)
                .collect();
            assert_eq!(got, want, "status {status:?}");
        }
    }

    #[test]
    fn store_queries_answer_detail_and_diff_reads() {
        let (snap, now) = testdata::fixed();
        let store = testdata::HistoryOnlyStore(snap.recent.clone());
        let mut app = App::new(Arc::new(snap), now);
        match run_query(&store, Query::Diffs(testdata::MONITOR_JOB.into())) {
            Loaded::Diffs { job, rows } => {
                assert_eq!(job, testdata::MONITOR_JOB);
                assert_eq!(rows.len(), 3);
                assert!(rows.iter().all(|r| r.diff.is_some() && r.job == job));
                app.on_loaded(Loaded::Diffs { job, rows });
            }
            other => panic!("{other:?}"),
        }
        match run_query(&store, Query::JobHistory("backup-logs".into())) {
            Loaded::JobHistory { rows, .. } => {
                assert_eq!(rows.len(), 1);
                assert_eq!(rows[0].status, Status::Failed);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_full_command_queue_is_reported_and_the_mark_dropped() {
        let (snap, now) = testdata::fixed();
        let mut app = App::new(Arc::new(snap), now);
        let (tx, _rx) = mpsc::channel(1);
        let first = app.handle_key(ratatui::crossterm::event::KeyEvent::from(
            ratatui::crossterm::event::KeyCode::Char('p'),
        ));
        let Action::Send(cmd) = first else {
            panic!("{first:?}")
        };
        send(&tx, cmd.clone(), &mut app);
        assert!(app.notice.is_none());
        // The queue (capacity 1) is now full.
        send(&tx, cmd, &mut app);
        assert!(app.notice.as_deref().unwrap_or("").contains("busy"));
        assert!(app.ops.pending.is_empty());
    }
}

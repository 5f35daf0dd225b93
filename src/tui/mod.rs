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
//! Keys are read on a dedicated thread (`crossterm::event::poll/read`), which waits for input
//! alone, and filtered to `KeyEventKind::Press`. On a terminal the loop runs on a thread of its
//! own with a single-threaded runtime, and that thread itself waits on a kernel timer for the
//! idle redraws (`wake`): an idle console wakes one thread a redraw and nothing in between. A timer that fires before the console's clock reaches the instant the
//! screen turns over (the two clocks' rates differ a little) is set again for the rest instead
//! of drawing the same text twice. In tests, keys come on a channel and a tokio timer times
//! the redraws.

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
mod wake;

#[doc(hidden)]
#[cfg(any(test, feature = "testkit"))]
pub mod testdata;

use state::{Action, App, Loaded, Query};
use wake::{Input, Pacer};

/// Rows loaded for one job's detail or `h` history.
const JOB_ROWS: usize = 500;
/// Diffs loaded for one job's diff viewer.
const DIFF_ROWS: usize = 200;
/// The countdowns' finest step: with seconds on the screen, the console redraws once a second;
/// with only minutes or hours, when the first of them turns over.
const TICK: Duration = Duration::from_secs(1);
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
/// happens (a panic is restored by the hook `ratatui::try_init` installs). The console runs on
/// a thread of its own (see the module doc); this waits for it.
pub async fn run(deps: ConsoleDeps) -> Result<(), TuiError> {
    if !std::io::stdout().is_terminal() {
        return Err(TuiError::NotATerminal);
    }
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("console".into())
        .spawn(move || {
            let _ = done_tx.send(run_on_this_thread(deps));
        })?;
    done_rx
        .await
        .unwrap_or_else(|_| Err(std::io::Error::other("the console's thread panicked").into()))
}

/// The console on this thread's own single-threaded runtime, which waits on the terminal and
/// the redraw timer itself. Loads still in flight when it closes are left to finish alone.
fn run_on_this_thread(deps: ConsoleDeps) -> Result<(), TuiError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let stop = Arc::new(AtomicBool::new(false));
    let result = rt.block_on(async {
        let pacer = Pacer::kernel()?;
        let mut terminal = ratatui::try_init().inspect_err(|_| ratatui::restore())?;
        let (key_tx, key_rx) = mpsc::unbounded_channel();
        spawn_input_reader(key_tx, stop.clone());
        let result = event_loop_with(&mut terminal, deps, Input::Channel(key_rx), pacer).await;
        ratatui::restore();
        result
    });
    stop.store(true, Ordering::Relaxed);
    rt.shutdown_background();
    result
}

/// How long the key reader waits for input before it looks whether the console closed: long,
/// so an idle console's reader does not wake (the process ends with the console anyway).
const READER_WAIT: Duration = Duration::from_secs(60);

/// Terminal input on its own thread (crossterm's reads block, resizes included); it wakes for
/// input only, and ends at the first look after `stop` or when the console is gone.
fn spawn_input_reader(
    tx: mpsc::UnboundedSender<std::io::Result<TermEvent>>,
    stop: Arc<AtomicBool>,
) {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match event::poll(READER_WAIT) {
                Ok(false) => {}
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
    });
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
    event_loop_with(terminal, deps, Input::Channel(keys), Pacer::Tokio(None)).await
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

/// Draw `app` at the clock's now and arm `pacer` for the next idle redraw; returns the clock's
/// reading at which the screen turns over.
fn draw<B: ratatui::backend::Backend>(
    terminal: &mut ratatui::Terminal<B>,
    app: &mut App,
    clock: &dyn Clock,
    pacer: &mut Pacer,
) -> Result<chrono::DateTime<chrono::Utc>, TuiError>
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
    if let Some(keys) = view::sort_keys(app, area) {
        app.set_sortable(keys);
    }
    terminal.draw(|f| f.render_widget(&*app, f.area()))?;
    let now = clock.now();
    let wait = next_tick(app, now);
    pacer.arm(wait)?;
    Ok(now + chrono::Duration::from_std(wait).unwrap_or_default())
}

/// [`event_loop`] over any input and idle redraw timer (see the module doc).
async fn event_loop_with<B: ratatui::backend::Backend>(
    terminal: &mut ratatui::Terminal<B>,
    mut deps: ConsoleDeps,
    mut input: Input,
    mut pacer: Pacer,
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
    let mut turns_at = deps.clock.now();
    loop {
        // The detail view's whole record: read when it opens and once per snapshot after.
        if let Some(q) = app.record_wanted() {
            load(deps.store.clone(), q, loaded_tx.clone());
        }
        if dirty {
            turns_at = draw(terminal, &mut app, &*deps.clock, &mut pacer)?;
            dirty = false;
        }
        tokio::select! {
            biased;
            ev = input.next() => match ev {
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
            fired = pacer.fired() => {
                fired?;
                let now = deps.clock.now();
                match (turns_at - now).to_std() {
                    // Early by the clock the screen shows: nothing reads differently yet.
                    Ok(rest) if !rest.is_zero() => pacer.arm(rest)?,
                    _ => {
                        app.on_tick(now);
                        dirty = true;
                    }
                }
            }
        }
    }
}

/// How long to wait with nothing happening before the next redraw: until the first duration on
/// the screen turns over ([`view::next_change`]), on one of the clock's whole seconds (when
/// countdowns step).
fn next_tick(app: &App, now: chrono::DateTime<chrono::Utc>) -> Duration {
    let to_next_second = TICK.saturating_sub(Duration::from_nanos(u64::from(
        now.timestamp_subsec_nanos(),
    )));
    to_next_second + view::next_change(app).saturating_sub(TICK)
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

    /// A clock a thousandth slower than the timers' (a wall clock being slewed): a timer set
    /// for the next whole second of this clock fires just before it.
    struct Lagging {
        from: chrono::DateTime<chrono::Utc>,
        start: tokio::time::Instant,
    }

    impl Clock for Lagging {
        fn now(&self) -> chrono::DateTime<chrono::Utc> {
            let e = self.start.elapsed();
            self.from + chrono::Duration::from_std(e - e / 1000).unwrap()
        }
        fn monotonic(&self) -> Duration {
            self.start.elapsed()
        }
    }

    /// Runs the console over `snap` with nothing happening for `secs` of paused time, then `q`;
    /// returns how many frames it drew and the last screen.
    async fn idle_frames(
        snap: crate::snapshot::Snapshot,
        clock: Arc<dyn Clock>,
        secs: f64,
    ) -> (usize, String) {
        let (_snap_tx, snapshots) = watch::channel(Arc::new(snap.clone()));
        let (_ev_tx, events) = broadcast::channel(16);
        let (commands, _cmd_rx) = mpsc::channel(8);
        let (key_tx, key_rx) = mpsc::unbounded_channel();
        let deps = ConsoleDeps {
            snapshots,
            events,
            commands,
            store: Arc::new(testdata::HistoryOnlyStore(snap.recent.clone())),
            clock,
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
        tokio::time::sleep(Duration::from_secs_f64(secs)).await;
        key_tx
            .send(Ok(TermEvent::Key(KeyEvent::from(KeyCode::Char('q')))))
            .unwrap();
        task.await.unwrap().unwrap();
        let mut t = term.lock().await;
        (t.get_frame().count(), screen_text(&t))
    }

    /// An idle console showing seconds (the fixture has a live lease and fresh runs) draws
    /// once a second on the clock's whole seconds — the first frame, then one for each of the
    /// 60 seconds passed — also when its clock runs slower than the timers, whose redraw would
    /// otherwise come a hair before the second and again just after it.
    #[tokio::test(start_paused = true)]
    async fn an_idle_console_draws_once_a_second_even_when_its_clock_lags_the_timers() {
        let (snap, now) = testdata::fixed();
        let up = |t: chrono::DateTime<chrono::Utc>| {
            format!(
                "up {}",
                crate::when::span_secs((t - snap.started_at).num_seconds())
            )
        };
        let (frames, text) = idle_frames(snap.clone(), Arc::new(TokioClock::new(now)), 60.5).await;
        assert_eq!(frames, 61, "on time");
        assert!(
            text.contains(&up(now + chrono::Duration::seconds(60))),
            "{text}"
        );
        let lagging = Arc::new(Lagging {
            from: now,
            start: tokio::time::Instant::now(),
        });
        let (frames, text) = idle_frames(snap.clone(), lagging, 60.5).await;
        assert_eq!(frames, 61, "lagging");
        assert!(
            text.contains(&up(now + chrono::Duration::seconds(60))),
            "{text}"
        );
    }

    /// With every duration on the screen showing minutes or more, nothing visible changes
    /// between their turns: over two minutes the console draws its first frame, then when its
    /// uptime turns 2h01m (30 s in) and 2h02m (90 s in), and nothing else.
    #[tokio::test(start_paused = true)]
    async fn an_idle_console_draws_only_when_a_shown_duration_turns_over() {
        let (mut snap, now) = testdata::fixed();
        snap.started_at = now - chrono::Duration::seconds(2 * 3600 + 30);
        snap.pending.clear();
        for j in &mut snap.jobs {
            j.rt.lease = None;
            j.rt.last_run_at =
                j.rt.last_run_at
                    .map(|_| now - chrono::Duration::minutes(2890));
            j.rt.next_slot =
                j.rt.next_slot
                    .map(|_| now + chrono::Duration::minutes(4340));
            j.def.jitter_seconds = 0.0;
        }
        let (frames, text) = idle_frames(snap, Arc::new(TokioClock::new(now)), 120.5).await;
        assert_eq!(frames, 3);
        assert!(text.contains("up 2h02m"), "{text}");
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

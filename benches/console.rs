//! Console frame cost: build + render of the whole screen on a 200×60 `TestBackend` with 10 000
//! jobs and 100 000 history rows in the snapshot's reach (target ≤ 5 ms median and p99).
//!
//! Run: `cargo bench --bench console` (prints median / p99 / max per scenario);
//! `CONSOLE_IDLE_JOBS=1000000 cargo bench --bench console`: an idle console's redraws at that
//! many jobs instead.
#![allow(clippy::unwrap_used)] // test code
#![allow(unsafe_code)] // signals, forks and polls real processes through libc

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cronsole::testkit::internals::tui::idle_wait;
use cronsole::testkit::internals::tui::state::{App, Query};
use cronsole::testkit::stats::percentile;
use cronsole::tui::testdata;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent};

const FRAMES: usize = 300;

/// CPU time of this thread: unlike wall time it does not count the time the (shared, busy)
/// machine had us descheduled, so it shows the work a frame costs.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid pointer we pass.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn line(name: &str, kind: &str, mut v: Vec<Duration>) {
    v.sort();
    let pct = |p: f64| percentile(&v, p);
    println!(
        "{name:<44} {kind} n={:<4} median {:>7.3} ms  p99 {:>7.3} ms  max {:>7.3} ms",
        v.len(),
        pct(0.5).as_secs_f64() * 1e3,
        pct(0.99).as_secs_f64() * 1e3,
        v[v.len() - 1].as_secs_f64() * 1e3,
    );
}

fn stats(name: &str, wall: Vec<Duration>, cpu: Vec<Duration>) {
    line(name, "wall", wall);
    line(name, "cpu ", cpu);
}

fn frames(name: &str, app: &mut App, keys_between: &[KeyEvent]) {
    let mut term = Terminal::new(TestBackend::new(200, 60)).expect("test backend");
    // Warm up (first frame allocates buffers).
    term.draw(|f| f.render_widget(&*app, f.area()))
        .expect("draw");
    let mut times = Vec::with_capacity(FRAMES);
    let mut cpu = Vec::with_capacity(FRAMES);
    for i in 0..FRAMES {
        if !keys_between.is_empty() {
            app.handle_key(keys_between[i % keys_between.len()]);
        }
        // Countdowns change every frame, like the real 250 ms tick.
        let next = app.now() + chrono::Duration::milliseconds(250);
        app.set_now(next);
        let (t, c) = (Instant::now(), thread_cpu());
        term.draw(|f| f.render_widget(&*app, f.area()))
            .expect("draw");
        cpu.push(thread_cpu().saturating_sub(c));
        times.push(t.elapsed());
    }
    black_box(term.backend().buffer());
    stats(name, times, cpu);
}

/// Idle redraws of the console's loop at `n` jobs: the clock moved to the next redraw, the
/// frame drawn, the wait until the one after (what `tui::draw` does on each idle tick).
fn idle(name: &str, snap: cronsole::snapshot::Snapshot, now: chrono::DateTime<chrono::Utc>) {
    let frames = 30;
    let mut app = App::new(Arc::new(snap), now);
    let mut term = Terminal::new(TestBackend::new(200, 60)).expect("test backend");
    term.draw(|f| f.render_widget(&app, f.area()))
        .expect("draw");
    let (mut times, mut cpu) = (Vec::with_capacity(frames), Vec::with_capacity(frames));
    let mut wait = idle_wait(&app);
    for _ in 0..frames {
        let next = app.now() + chrono::Duration::from_std(wait).expect("a wait of seconds");
        let (t, c) = (Instant::now(), thread_cpu());
        app.set_now(next);
        term.draw(|f| f.render_widget(&app, f.area()))
            .expect("draw");
        wait = idle_wait(&app);
        cpu.push(thread_cpu().saturating_sub(c));
        times.push(t.elapsed());
    }
    black_box(term.backend().buffer());
    stats(name, times, cpu);
}

/// `CONSOLE_IDLE_JOBS=N`: idle redraws at N jobs, of two stores: every job far ahead and never
/// run (as `console_million.sh` applies), and the frame benchmark's mix of runs, leases and
/// spend.
fn idle_at_scale(n: usize) {
    let (mut snap, now) = testdata::big(0, 1_000);
    let far = now + chrono::Duration::days(33);
    snap.jobs = (0..n)
        .map(|i| {
            let mut j = testdata::job(&format!("j{i:07}"), 86_400, now);
            j.rt.next_slot = Some(far);
            cronsole::snapshot::JobRow::of(&j)
        })
        .collect();
    snap.in_flight.clear();
    idle(&format!("idle redraw, {n} far-future jobs"), snap, now);
    let (snap, now) = testdata::big(n, 1_000);
    idle(
        &format!("idle redraw, {n} jobs (runs, leases, spend)"),
        snap,
        now,
    );
}

fn main() {
    if let Some(n) = std::env::var("CONSOLE_IDLE_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return idle_at_scale(n);
    }
    let (snap, now) = testdata::big(10_000, 100_000);
    let snap = Arc::new(snap);
    println!(
        "console frame: 200x60, {} jobs, {} history rows",
        snap.jobs.len(),
        snap.recent.len()
    );

    let mut app = App::new(snap.clone(), now);
    frames("main screen, idle", &mut app, &[]);

    let mut app = App::new(snap.clone(), now);
    frames(
        "main screen, cursor moving (j)",
        &mut app,
        &[KeyEvent::from(KeyCode::Char('j'))],
    );

    let mut app = App::new(snap.clone(), now);
    app.handle_key(KeyEvent::from(KeyCode::Char('f')));
    app.handle_key(KeyEvent::from(KeyCode::Char('f')));
    frames("status filter (failed)", &mut app, &[]);

    let mut app = App::new(snap.clone(), now);
    app.handle_key(KeyEvent::from(KeyCode::Char('j')));
    app.handle_key(KeyEvent::from(KeyCode::Char('h')));
    frames("history of one job (snapshot window)", &mut app, &[]);

    // What `h` does next: the store's rows for that job arrive and replace the scan.
    let mut app = App::new(snap.clone(), now);
    app.handle_key(KeyEvent::from(KeyCode::Char('j')));
    app.handle_key(KeyEvent::from(KeyCode::Char('h')));
    let store = testdata::HistoryOnlyStore(snap.recent.clone());
    let job = app
        .history_job()
        .map(str::to_string)
        .expect("h sets the job");
    app.on_loaded(cronsole::testkit::internals::tui::run_query(
        &store,
        Query::JobHistory(job),
    ));
    frames("history of one job (rows loaded from store)", &mut app, &[]);

    let mut app = App::new(snap.clone(), now);
    app.handle_key(KeyEvent::from(KeyCode::Enter));
    frames("job detail", &mut app, &[]);

    let mut app = App::new(snap.clone(), now);
    app.handle_key(KeyEvent::from(KeyCode::Char('d')));
    frames("diff viewer", &mut app, &[]);

    // Not per frame: a new snapshot re-filters and re-sorts 10 000 jobs.
    let mut app = App::new(snap.clone(), now);
    for _ in 0..4 {
        app.handle_key(KeyEvent::from(KeyCode::Char('s')));
    }
    let (mut times, mut cpu) = (Vec::with_capacity(50), Vec::with_capacity(50));
    for _ in 0..50 {
        let (t, c) = (Instant::now(), thread_cpu());
        app.on_snapshot(snap.clone());
        cpu.push(thread_cpu().saturating_sub(c));
        times.push(t.elapsed());
    }
    stats("on_snapshot (refilter + sort by RUNS)", times, cpu);
}

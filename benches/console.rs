//! Console frame cost: build + render of the whole screen on a 200×60 `TestBackend` with 10 000
//! jobs and 100 000 history rows in the snapshot's reach (target ≤ 5 ms median and p99).
//!
//! Run: `cargo bench --bench console` (prints median / p99 / max per scenario).
#![allow(clippy::unwrap_used)] // test code
#![allow(unsafe_code)] // signals, forks and polls real processes through libc

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

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

fn main() {
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

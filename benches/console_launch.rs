//! Console launch with a huge history: time from start to the first drawn frame and the
//! console's peak RSS, over a file store holding 1 000 jobs and 1 000 000 history rows.
//!
//! Two measurements:
//! - in process: `FileStore::open` + `Snapshot::load` + the first frame on a 120×40 `TestBackend`
//!   (median of 5 cold-handle runs);
//! - the real binary: `cronsole console --attach` inside tmux (120×40), from spawn until the jobs
//!   table is on the pane (polled every 5 ms), and its peak RSS (`VmHWM`).
//!
//! Run: `cargo bench --bench console_launch` (needs tmux for the second part; ~400 MB of temp
//! disk).
#![allow(clippy::unwrap_used)] // test code

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use cronsole::model::{HistoryRow, JobDef, JobsFile, Status, Trigger};
use cronsole::snapshot::Snapshot;
use cronsole::store::Store;
use cronsole::store::file::FileStore;
use cronsole::testkit::internals::store::filefmt;
use cronsole::testkit::internals::tui::state::App;
use cronsole::testkit::stats::percentile;
use ratatui::Terminal;
use ratatui::backend::TestBackend;

const JOBS: usize = 1_000;
const ROWS: usize = 1_000_000;

fn def(name: String) -> JobDef {
    cronsole::testkit::jobs::command_job(&name, 3600)
}

fn build_store(dir: &Path, now: DateTime<Utc>) {
    let store = FileStore::open(dir).expect("open store");
    let file = JobsFile {
        jobs: (0..JOBS).map(|i| def(format!("job-{i:04}"))).collect(),
        ..Default::default()
    };
    store.apply(&file, now).expect("apply");
    drop(store);
    // A million rows written in the store's own line format (one history row per line with
    // its checksum), oldest first.
    let mut f = std::io::BufWriter::new(
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(dir.join("history.jsonl"))
            .expect("history"),
    );
    let statuses = [
        Status::Succeeded,
        Status::NoChange,
        Status::Failed,
        Status::Skipped,
        Status::Missed,
    ];
    for i in 0..ROWS {
        let at = now - chrono::Duration::seconds((ROWS - i) as i64);
        let job = format!("job-{:04}", i % JOBS);
        let mut r = HistoryRow::new(
            &job,
            statuses[i % statuses.len()],
            Trigger::Schedule,
            Some(at),
            "bench:1:abcdef12",
            at,
        );
        r.result = Some(format!(
            "run {i}: everything nominal, {} items processed",
            i % 977
        ));
        // Format 2: each row carries its checksum (store/filefmt.rs).
        let mut line = Vec::with_capacity(512);
        filefmt::encode_row(&mut line, &r).expect("row");
        f.write_all(&line).expect("row");
    }
    f.flush().expect("flush");
}

fn in_process(dir: &Path, now: DateTime<Utc>) -> Duration {
    let t = Instant::now();
    let store = FileStore::open(dir).expect("open");
    let snap = Snapshot::load(&store, now, "bench", now, false).expect("snapshot");
    let app = App::new(std::sync::Arc::new(snap), now);
    let mut term = Terminal::new(TestBackend::new(120, 40)).expect("backend");
    term.draw(|f| f.render_widget(&app, f.area()))
        .expect("draw");
    t.elapsed()
}

fn vm_hwm_kb(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn real_binary(dir: &Path) -> Option<(Duration, u64)> {
    if Command::new("tmux")
        .arg("-V")
        .output()
        .map(|o| !o.status.success())
        .unwrap_or(true)
    {
        println!("tmux not installed: skipping the real-binary launch measurement");
        return None;
    }
    let bin = env!("CARGO_BIN_EXE_cronsole");
    let session = format!("cronsole-launch-{}", std::process::id());
    let cmd = format!("{bin} console --attach --store {}; sleep 30", dir.display());
    let t = Instant::now();
    let ok = Command::new("tmux")
        .args([
            "new-session",
            "-d",
            "-s",
            &session,
            "-x",
            "120",
            "-y",
            "40",
            "-e",
            "TERM=xterm-256color",
            &cmd,
        ])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        println!("tmux new-session failed");
        return None;
    }
    let mut first_frame = None;
    while t.elapsed() < Duration::from_secs(30) {
        let out = Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &session])
            .output()
            .ok()?;
        if String::from_utf8_lossy(&out.stdout).contains("Jobs ") {
            first_frame = Some(t.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // Let it settle, then read the peak RSS of the console process.
    std::thread::sleep(Duration::from_millis(1500));
    // The console itself, not the `sh -c` tmux runs it under.
    let pids = Command::new("pgrep")
        .args([
            "-f",
            &format!("{bin} console --attach --store {}", dir.display()),
        ])
        .output()
        .ok()?;
    let pid: u32 = String::from_utf8_lossy(&pids.stdout)
        .lines()
        .filter_map(|l| l.trim().parse::<u32>().ok())
        .find(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "cronsole")
        })?;
    let rss = vm_hwm_kb(pid).unwrap_or(0);
    let _ = Command::new("tmux")
        .args(["send-keys", "-t", &session, "q"])
        .status();
    std::thread::sleep(Duration::from_millis(500));
    let _ = Command::new("tmux")
        .args(["kill-session", "-t", &session])
        .status();
    Some((first_frame?, rss))
}

fn main() {
    let dir = cronsole::testkit::tmp::TempDir::new("launch-bench");
    let now = Utc::now();
    let t = Instant::now();
    build_store(&dir, now);
    let size = std::fs::metadata(dir.join("history.jsonl"))
        .map(|m| m.len())
        .unwrap_or(0);
    println!(
        "store: {JOBS} jobs, {ROWS} history rows ({:.0} MiB), built in {:.1} s",
        size as f64 / (1024.0 * 1024.0),
        t.elapsed().as_secs_f64()
    );
    let mut v: Vec<Duration> = (0..5).map(|_| in_process(&dir, now)).collect();
    v.sort();
    println!(
        "in-process open + snapshot + first frame (120x40): median {:.1} ms, max {:.1} ms",
        percentile(&v, 0.5).as_secs_f64() * 1e3,
        percentile(&v, 1.0).as_secs_f64() * 1e3
    );
    if let Some(kb) = vm_hwm_kb(std::process::id()) {
        println!(
            "bench process peak RSS after 5 loads: {:.1} MB",
            kb as f64 / 1024.0
        );
    }
    let mut launches = Vec::new();
    let mut rss = Vec::new();
    for _ in 0..3 {
        if let Some((d, kb)) = real_binary(&dir) {
            launches.push(d);
            rss.push(kb);
        }
    }
    if !launches.is_empty() {
        launches.sort();
        println!(
            "real binary `console --attach` spawn → jobs table on the tmux pane: median {:.0} ms (n={}, incl. tmux start and 5 ms polling)",
            percentile(&launches, 0.5).as_secs_f64() * 1e3,
            launches.len()
        );
        println!(
            "console peak RSS (VmHWM): max {:.1} MB",
            *rss.iter().max().unwrap_or(&0) as f64 / 1024.0
        );
    }
}

//! Engine benchmarks (harness = false): the real `cronsole run` binary on prepared stores.
//!
//! - `lateness`: 1 000 jobs `every 10s` (`true`) all sharing each slot (a burst of 1 000 every
//!   10 s) for 60 s; fire lateness = `started_at − slot` from the history rows (p50/p90/p99/max),
//!   plus the machine's load average.
//! - `lateness-spread`: the same with the jobs' anchors spread 10 ms apart (100 fires/s).
//! - `idle`: 10 000 jobs scheduled, none due, 20 s: CPU time of the process from /proc/PID/stat.
//! - `rss`: headless mode with 10 000 jobs and 100 000 history rows (all within the last 24 h, the
//!   worst case for the snapshot): peak RSS (VmHWM from /proc/PID/status) over 20 s.
//!
//! - `burst` (only when named): 10 000 one-shot jobs due at one instant, `--max-concurrent 512`
//!   (`BURST_N`, `BURST_MAX=default|N` change both).
//!
//! `cargo bench --bench engine [-- idle|rss|lateness|lateness-spread|burst]` (all but `burst` by
//! default; `ENGINE_BIN=path` runs another build of `cronsole`, `CRONSOLE_ZYGOTE=off` the
//! exec-per-run supervisor). Figures go to docs/BENCHMARKS.md, section "Engine".
#![allow(clippy::unwrap_used)] // test code

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use chrono::{Timelike, Utc};
use cronsole::model::{HistoryRow, Status, Trigger};
use cronsole::store::file::FileStore;
use cronsole::store::{HistoryQuery, HistoryReader};
use cronsole::testkit::internals::store::filefmt;
use cronsole::testkit::stats::percentile as pct;
use cronsole::testkit::tmp::TempDir;

const BUILT_BIN: &str = env!("CARGO_BIN_EXE_cronsole");

/// The binary under test: this build's, or `ENGINE_BIN` (another build, for a before/after
/// comparison in one sitting).
fn bin() -> String {
    std::env::var("ENGINE_BIN").unwrap_or_else(|_| BUILT_BIN.to_string())
}

fn tmp(name: &str) -> TempDir {
    TempDir::new(&format!("bench-{name}"))
}

fn jobs_yaml(n: usize, schedule: &str, command: &str) -> String {
    let mut y = String::from("budget: null\ndefaults:\n  max_retries: 1\njobs:\n");
    for i in 0..n {
        y.push_str(&format!(
            "  - name: j{i:05}\n    schedule: \"{schedule}\"\n    command: \"{command}\"\n"
        ));
    }
    y
}

fn apply(dir: &Path, yaml: &str) -> PathBuf {
    let jobs = dir.join("jobs.yaml");
    std::fs::write(&jobs, yaml).unwrap();
    let store = dir.join("store");
    let out = Command::new(bin())
        .arg("apply")
        .arg(&jobs)
        .arg("--store")
        .arg(&store)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    store
}

fn run(store: &Path, secs: u64, extra: &[&str]) -> Child {
    Command::new(bin())
        .args(["run", "--for", &format!("{secs}s"), "--store"])
        .arg(store)
        .args(extra)
        .current_dir(store.parent().unwrap())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// utime + stime of `pid` in clock ticks.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// (utime + stime, cutime + cstime) of `pid` in clock ticks.
fn self_and_children_ticks(pid: u32) -> Option<(u64, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(4)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    (f.len() == 4).then(|| (f[0] + f[1], f[2] + f[3]))
}

/// The live children of `pid` (of its main thread, which is the zygote's only one).
fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The pid of `parent`'s child running `cronsole __zygote`.
fn zygote_of(parent: u32) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let ppid: u32 = stat
            .rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        (ppid == parent && String::from_utf8_lossy(&cmd).contains("__zygote")).then_some(pid)
    })
}

fn status_kb(pid: u32, key: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with(key))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// 1 000 jobs `every 10s` whose anchors are spread 10 ms apart (100 fires per second, evenly):
/// the steady state. Definitions are stored with `FileStore::upsert_job` at staggered instants.
fn spread_store(dir: &Path) -> PathBuf {
    let store = apply(dir, "budget: null\njobs: []\n");
    let yaml = jobs_yaml(1000, "every 10s", "true");
    let loaded = cronsole::config::load_str(&yaml, &dir.join("jobs.yaml")).unwrap();
    // `run` would re-apply a jobs.yaml it finds beside the store (and retire everything).
    std::fs::remove_file(dir.join("jobs.yaml")).unwrap();
    let s = FileStore::open(&store).unwrap();
    let t0 = Utc::now() + chrono::Duration::seconds(3);
    for (i, def) in loaded.file.jobs.iter().enumerate() {
        s.upsert_job(def, t0 + chrono::Duration::milliseconds(10 * i as i64))
            .unwrap();
    }
    store
}

fn lateness(spread: bool) {
    let dir = tmp(if spread {
        "lateness-spread"
    } else {
        "lateness"
    });
    let store = if spread {
        spread_store(&dir)
    } else {
        apply(&dir, &jobs_yaml(1000, "every 10s", "true"))
    };
    let started = Instant::now();
    let mut child = run(&store, 60, &["--max-concurrent", "1000"]);
    let mut peak_load = String::new();
    while child.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_secs(5));
        peak_load = loadavg();
    }
    let wall = started.elapsed();
    let s = FileStore::open(&store).unwrap();
    let rows = s
        .history(&HistoryQuery {
            limit: 1_000_000,
            ..Default::default()
        })
        .unwrap();
    let mut late: Vec<i64> = rows
        .iter()
        .filter(|r| r.trigger == Trigger::Schedule && r.status != Status::Missed)
        .filter_map(|r| {
            r.slot
                .map(|slot| (r.started_at - slot).num_microseconds().unwrap_or(i64::MAX))
        })
        .collect();
    late.sort_unstable();
    let by_status = rows
        .iter()
        .fold(std::collections::BTreeMap::new(), |mut m, r| {
            *m.entry(r.status.as_str()).or_insert(0u64) += 1;
            m
        });
    println!(
        "lateness ({}): 1000 jobs every 10s for {:.0}s: {} runs {:?}; started_at - slot: p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms; loadavg at end: {peak_load}",
        if spread {
            "anchors spread 10 ms apart"
        } else {
            "all 1000 share each slot"
        },
        wall.as_secs_f64(),
        late.len(),
        by_status,
        pct(&late, 0.50) as f64 / 1000.0,
        pct(&late, 0.90) as f64 / 1000.0,
        pct(&late, 0.99) as f64 / 1000.0,
        late.last().copied().unwrap_or(0) as f64 / 1000.0,
    );
}

/// 10 000 one-shot jobs (`{kind: at}`) due at the same instant, `--max-concurrent 512`, commands
/// `true` (executed without `sh` under the per-run supervisor): how long until all have started,
/// lateness per run, none dropped. `BURST_N` changes the number of jobs, `BURST_MAX` the
/// concurrency (`default`: no `--max-concurrent`, the engine's own default).
fn burst() {
    let n_jobs: usize = std::env::var("BURST_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let max = std::env::var("BURST_MAX").unwrap_or_else(|_| "512".to_string());
    let max_args: Vec<&str> = if max == "default" {
        vec![]
    } else {
        vec!["--max-concurrent", &max]
    };
    let dir = tmp("burst");
    let at = (Utc::now() + chrono::Duration::seconds(25))
        .with_nanosecond(0)
        .unwrap_or_else(Utc::now);
    // BURST_COMMAND='true;' forces the shell, for comparison with the direct exec of `true`.
    let command = std::env::var("BURST_COMMAND").unwrap_or_else(|_| "true".to_string());
    let mut y = String::from("budget: null\ndefaults:\n  max_retries: 1\njobs:\n");
    for i in 0..n_jobs {
        y.push_str(&format!(
            "  - name: b{i:05}\n    schedule: {{kind: at, at: \"{}\"}}\n    command: \"{command}\"\n",
            at.to_rfc3339()
        ));
    }
    let store = apply(&dir, &y);
    std::fs::remove_file(dir.join("jobs.yaml")).unwrap();
    let left = (at - Utc::now()).num_seconds().max(0) as u64;
    let mut child = run(&store, left + 40, &max_args);
    let pid = child.id();
    let mut peak_load = String::new();
    // (utime+stime of the engine, cutime+cstime of its reaped children: the supervisors and
    // the commands under them), sampled until it exits.
    let mut cpu = (0u64, 0u64);
    // The zygote (`cronsole __zygote`, the engine's child that forks the runs' supervisors):
    // its own CPU plus that of its children (the supervisors and the commands they reaped).
    let mut zygote = None;
    let mut zygote_cpu = 0u64;
    while child.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_millis(200));
        if let Some(c) = self_and_children_ticks(pid) {
            cpu = c;
        }
        if zygote.is_none() {
            zygote = zygote_of(pid);
        }
        if let Some(z) = zygote.and_then(self_and_children_ticks) {
            // Its supervisors are reused and reaped only when they retire: add the live ones'
            // own CPU and that of the commands they reaped.
            let live: u64 = zygote
                .map(children_of)
                .unwrap_or_default()
                .into_iter()
                .filter_map(self_and_children_ticks)
                .map(|c| c.0 + c.1)
                .sum();
            zygote_cpu = zygote_cpu.max(z.0 + z.1 + live);
        }
        peak_load = loadavg();
    }
    let tick = 100.0; // USER_HZ
    println!(
        "burst CPU: engine {:.2} s, exec'd supervisors + commands {:.2} s, zygote + its supervisors + commands {:.2} s",
        cpu.0 as f64 / tick,
        cpu.1 as f64 / tick,
        zygote_cpu as f64 / tick,
    );
    let s = FileStore::open(&store).unwrap();
    let rows = s
        .history(&HistoryQuery {
            limit: 1_000_000,
            ..Default::default()
        })
        .unwrap();
    let mut late: Vec<i64> = rows
        .iter()
        .filter_map(|r| {
            r.slot
                .map(|slot| (r.started_at - slot).num_microseconds().unwrap_or(i64::MAX))
        })
        .collect();
    late.sort_unstable();
    let by_status = rows
        .iter()
        .fold(std::collections::BTreeMap::new(), |mut m, r| {
            *m.entry(r.status.as_str()).or_insert(0u64) += 1;
            m
        });
    let last_end = rows
        .iter()
        .map(|r| (r.finished_at - at).num_milliseconds())
        .max()
        .unwrap_or(0);
    println!(
        "burst: {n_jobs} jobs due at one instant, --max-concurrent {max}, command {command:?}: {} rows {:?}; started_at - slot: p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, last start {:.1} ms; last finish {last_end} ms after the slot; loadavg at end: {peak_load}",
        rows.len(),
        by_status,
        pct(&late, 0.50) as f64 / 1000.0,
        pct(&late, 0.90) as f64 / 1000.0,
        pct(&late, 0.99) as f64 / 1000.0,
        late.last().copied().unwrap_or(0) as f64 / 1000.0,
    );
}

fn idle() {
    let dir = tmp("idle");
    // Yearly at 00:00 on 1 Jan: scheduled, none due during the measurement.
    let store = apply(&dir, &jobs_yaml(10_000, "0 0 1 1 *", "true"));
    let mut child = run(&store, 30, &[]);
    let pid = child.id();
    std::thread::sleep(Duration::from_secs(5)); // start-up (load, first snapshot)
    let t0 = cpu_ticks(pid).unwrap_or(0);
    let w0 = Instant::now();
    std::thread::sleep(Duration::from_secs(20));
    let t1 = cpu_ticks(pid).unwrap_or(0);
    let wall = w0.elapsed().as_secs_f64();
    let hz = 100.0; // USER_HZ on Linux
    let cpu_s = (t1 - t0) as f64 / hz;
    let rss = status_kb(pid, "VmHWM:").unwrap_or(0);
    let _ = child.wait();
    println!(
        "idle: 10000 jobs, none due: {cpu_s:.2} s CPU over {wall:.1} s wall = {:.2}% of one core; start-up CPU {:.2} s; VmHWM {:.1} MB",
        100.0 * cpu_s / wall,
        t0 as f64 / hz,
        rss as f64 / 1024.0
    );
}

fn rss() {
    let dir = tmp("rss");
    let store = apply(&dir, &jobs_yaml(10_000, "0 0 1 1 *", "true"));
    // 100 000 history rows within the last 24 h, appended as the store writes them.
    {
        let s = FileStore::open(&store).unwrap();
        drop(s);
        let mut f = std::io::BufWriter::new(
            std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(store.join("history.jsonl"))
                .unwrap(),
        );
        let now = Utc::now();
        for i in 0..100_000u64 {
            let at = now - chrono::Duration::milliseconds((i * 800) as i64);
            let mut r = HistoryRow::new(
                &format!("j{:05}", i % 10_000),
                if i % 10 == 0 {
                    Status::Failed
                } else {
                    Status::Succeeded
                },
                Trigger::Schedule,
                Some(at),
                "bench:1:00000000",
                at,
            );
            r.result = Some(format!("output line for run {i}: all good"));
            r.duration_ms = 12;
            // Format 2: each row carries its checksum (store/filefmt.rs).
            let mut line = Vec::with_capacity(512);
            filefmt::encode_row(&mut line, &r).unwrap();
            f.write_all(&line).unwrap();
        }
        f.flush().unwrap();
    }
    let n = FileStore::open(&store)
        .unwrap()
        .history(&HistoryQuery {
            limit: 200_000,
            ..Default::default()
        })
        .unwrap()
        .len();
    let mut child = run(&store, 25, &[]);
    let pid = child.id();
    let mut hwm = 0;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(22) {
        std::thread::sleep(Duration::from_millis(500));
        hwm = hwm.max(status_kb(pid, "VmHWM:").unwrap_or(0));
    }
    let cpu = cpu_ticks(pid).unwrap_or(0) as f64 / 100.0;
    let _ = child.wait();
    println!(
        "rss: 10000 jobs + {n} history rows, headless 22 s: VmHWM {:.1} MB; CPU {cpu:.2} s",
        hwm as f64 / 1024.0
    );
}

fn main() {
    let which: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let all = which.is_empty();
    let want = |n: &str| all || which.iter().any(|w| w == n);
    println!(
        "machine: nproc {}, {}",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        std::fs::read_to_string("/proc/cpuinfo")
            .unwrap_or_default()
            .lines()
            .find(|l| l.starts_with("model name"))
            .unwrap_or("model name: ?")
            .trim()
    );
    if want("idle") {
        idle();
    }
    if want("rss") {
        rss();
    }
    if want("lateness") {
        lateness(false);
    }
    if want("lateness-spread") {
        lateness(true);
    }
    // Not in the default set: it takes ~70 s and 10 000 processes.
    if which.iter().any(|w| w == "burst") {
        burst();
    }
}

//! `cronsole jobs --json` at scale: jobs per second and the memory the listing
//! adds, streamed (a page at a time, [`cronsole::testkit::internals::listing::write_jobs_json`], its own pretty
//! writer) against the two writers before it — the same pages through `serde_json`'s pretty
//! serializer, and the whole-list writer (every record cloned, every view collected, one
//! pretty-printed `String`; only up to 200 000 jobs, it needs ≈ 4 KB per job) — in one run over
//! the same file store, all printing the same bytes, then the real binary on that store.
//!
//! Memory is measured with a counting global allocator: the peak of live heap bytes during the
//! listing above what was live before it (the store's own cache is already loaded and is not
//! the listing's). The binary's figure is its wall time and peak RSS (`ru_maxrss`), store open
//! included.
//!
//! Run: `cargo bench --bench jobs_json` (`JOBS=1000000` for a million; default 200 000; the
//! store is built in a temp directory and removed at the end).
#![allow(clippy::unwrap_used)] // test code
#![allow(unsafe_code)] // signals, forks and polls real processes through libc

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use cronsole::model::JobsFile;
use cronsole::store::Store;
use cronsole::store::file::FileStore;
use cronsole::testkit::internals::listing::{JobView, write_jobs_json};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let now = LIVE.fetch_add(l.size(), Ordering::Relaxed) + l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            if new >= l.size() {
                let now = LIVE.fetch_add(new - l.size(), Ordering::Relaxed) + new - l.size();
                PEAK.fetch_max(now, Ordering::Relaxed);
            } else {
                LIVE.fetch_sub(l.size() - new, Ordering::Relaxed);
            }
        }
        q
    }
}

#[global_allocator]
static A: Counting = Counting;

/// Bytes written, nothing kept (what `> /dev/null` costs, minus the syscalls).
struct Count(u64);
impl Write for Count {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0 += b.len() as u64;
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// This process's CPU time, every thread (the listing reads pages on a thread of its own): the
/// work done, without the time an overloaded machine kept the threads descheduled (wall time is
/// reported beside it).
fn cpu_now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass and nothing else.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// What one measured listing took.
#[derive(Clone, Copy)]
struct Run {
    wall: Duration,
    cpu: Duration,
    heap: usize,
    bytes: u64,
}

/// Run `f`, returning its wall and CPU time and the peak heap it added above what was live
/// before it.
fn measured(f: impl FnOnce() -> u64) -> Run {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let (t, c) = (Instant::now(), cpu_now());
    let bytes = f();
    let (wall, cpu) = (t.elapsed(), cpu_now() - c);
    Run {
        wall,
        cpu,
        heap: PEAK.load(Ordering::Relaxed).saturating_sub(base),
        bytes,
    }
}

fn whole_list(store: &dyn Store, now: DateTime<Utc>) -> u64 {
    let settings = store.settings().expect("settings");
    let jobs = store.jobs().expect("jobs");
    let views: Vec<JobView> = jobs
        .iter()
        .map(|r| JobView::of(r, &settings, now))
        .collect();
    let text = serde_json::to_string_pretty(&views).expect("json");
    let mut out = Count(0);
    writeln!(out, "{text}").expect("write");
    out.0
}

fn streamed(store: &dyn Store, now: DateTime<Utc>) -> u64 {
    let settings = store.settings().expect("settings");
    let mut out = Count(0);
    write_jobs_json(
        store,
        &settings,
        now,
        std::io::BufWriter::with_capacity(1 << 16, &mut out),
    )
    .expect("stream");
    out.0
}

/// The streamed writer with the pages read on the calling thread (as before the reader
/// thread): the same pages, the same pretty writer, one thread.
fn one_thread(store: &dyn Store, now: DateTime<Utc>) -> u64 {
    use serde::Serialize;
    let settings = store.settings().expect("settings");
    let mut out = std::io::BufWriter::with_capacity(1 << 16, Count(0));
    let mut enc = cronsole::testkit::internals::listing::pretty::Pretty::at_depth(1);
    enc.out.push(b'[');
    let mut after: Option<String> = None;
    let mut n = 0usize;
    loop {
        let page = store
            .jobs_page(
                after.as_deref(),
                cronsole::testkit::internals::listing::PAGE,
            )
            .expect("page");
        for r in &page {
            enc.out
                .extend_from_slice(if n == 0 { b"\n  " } else { b",\n  " });
            JobView::of(r, &settings, now)
                .serialize(&mut enc)
                .expect("json");
            n += 1;
        }
        out.write_all(&enc.out).expect("write");
        enc.out.clear();
        match page.last() {
            Some(l) if page.len() == cronsole::testkit::internals::listing::PAGE => {
                after = Some(l.def.name.clone())
            }
            _ => break,
        }
    }
    out.write_all(if n == 0 { b"]\n" } else { b"\n]\n" })
        .expect("write");
    out.into_inner().map(|c| c.0).unwrap_or(0)
}

/// The streamed writer before its own pretty writer: the same pages, each view through
/// `serde_json::Serializer::pretty` straight to the buffered writer.
fn serde_streamed(store: &dyn Store, now: DateTime<Utc>) -> u64 {
    use serde::ser::{SerializeSeq, Serializer};
    let settings = store.settings().expect("settings");
    let mut out = Count(0);
    {
        let mut ser =
            serde_json::Serializer::pretty(std::io::BufWriter::with_capacity(1 << 16, &mut out));
        let mut seq = ser.serialize_seq(None).expect("json");
        let mut after: Option<String> = None;
        loop {
            let page = store
                .jobs_page(
                    after.as_deref(),
                    cronsole::testkit::internals::listing::PAGE,
                )
                .expect("page");
            for r in &page {
                seq.serialize_element(&JobView::of(r, &settings, now))
                    .expect("json");
            }
            match page.last() {
                Some(l) if page.len() == cronsole::testkit::internals::listing::PAGE => {
                    after = Some(l.def.name.clone())
                }
                _ => break,
            }
        }
        seq.end().expect("json");
        let mut w = ser.into_inner();
        writeln!(w).and_then(|()| w.flush()).expect("write");
    }
    out.0
}

/// Where the streamed time goes: reading the pages alone (records cloned out of the store).
fn pages_only(store: &dyn Store) -> u64 {
    let mut after: Option<String> = None;
    let mut n = 0u64;
    loop {
        let page = store
            .jobs_page(
                after.as_deref(),
                cronsole::testkit::internals::listing::PAGE,
            )
            .expect("page");
        n += page.len() as u64;
        match page.last() {
            Some(l) if page.len() == cronsole::testkit::internals::listing::PAGE => {
                after = Some(l.def.name.clone())
            }
            _ => return n,
        }
    }
}

/// The reader thread's share now: the pages as stored JSON ([`Store::jobs_page_json`]:
/// lines read and checksummed, nothing parsed).
fn json_pages_only(store: &dyn Store) -> u64 {
    let mut after: Option<String> = None;
    let mut n = 0u64;
    loop {
        let page = store
            .jobs_page_json(
                after.as_deref(),
                cronsole::testkit::internals::listing::PAGE,
            )
            .expect("page");
        n += page.jobs.len() as u64;
        match page.jobs.last() {
            Some(l) if page.jobs.len() == cronsole::testkit::internals::listing::PAGE => {
                after = Some(l.name().to_string())
            }
            _ => return n,
        }
    }
}

/// The same pages serialised compactly (one line per job, no indentation): what a compact
/// format would cost.
fn compact(store: &dyn Store, now: DateTime<Utc>) -> u64 {
    let settings = store.settings().expect("settings");
    let mut out = std::io::BufWriter::with_capacity(1 << 16, Count(0));
    let mut after: Option<String> = None;
    loop {
        let page = store
            .jobs_page(
                after.as_deref(),
                cronsole::testkit::internals::listing::PAGE,
            )
            .expect("page");
        for r in &page {
            serde_json::to_writer(&mut out, &JobView::of(r, &settings, now)).expect("json");
            out.write_all(b"\n").expect("write");
        }
        match page.last() {
            Some(l) if page.len() == cronsole::testkit::internals::listing::PAGE => {
                after = Some(l.def.name.clone())
            }
            _ => break,
        }
    }
    out.into_inner().map(|c| c.0).unwrap_or(0)
}

fn binary(dir: &Path) -> (Duration, Duration, i64) {
    let t = Instant::now();
    let st = std::process::Command::new(env!("CARGO_BIN_EXE_cronsole"))
        .args(["jobs", "--json", "--store"])
        .arg(dir)
        .env_remove("CRONSOLE_STORE")
        .stdout(std::fs::File::create("/dev/null").expect("/dev/null"))
        .status()
        .expect("run cronsole");
    let d = t.elapsed();
    assert!(st.success(), "cronsole jobs --json failed");
    // SAFETY: getrusage fills the struct we pass; RUSAGE_CHILDREN covers the child just waited.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    (d, tv(ru.ru_utime) + tv(ru.ru_stime), ru.ru_maxrss)
}

fn main() {
    let n: usize = std::env::var("JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let dir = cronsole::testkit::tmp::TempDir::new("jobsjson");
    let now = Utc::now();
    let t = Instant::now();
    {
        let store = FileStore::open(dir.path()).expect("open");
        let file = JobsFile {
            jobs: (0..n)
                .map(|i| cronsole::testkit::jobs::command_job(&format!("job-{i:07}"), 3600))
                .collect(),
            ..Default::default()
        };
        store.apply(&file, now).expect("apply");
    }
    println!(
        "jobs_json: {n} jobs applied in {:.1}s",
        t.elapsed().as_secs_f64()
    );
    let store = FileStore::open(dir.path()).expect("open");
    store.jobs_page(None, 1).expect("warm the cache");
    // Alternate the writers, three times each, and report the medians (the machine is shared).
    // The whole-list writer holds every view and the whole text: skipped past 200 000 jobs.
    let with_whole = n <= 200_000;
    let (mut w, mut b, mut o, mut s) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..3 {
        if with_whole {
            w.push(measured(|| whole_list(&store, now)));
        }
        b.push(measured(|| serde_streamed(&store, now)));
        o.push(measured(|| one_thread(&store, now)));
        s.push(measured(|| streamed(&store, now)));
    }
    // Medians by wall time (what the reader thread shortens); the CPU time of the whole
    // process in the same run (the work, every thread) is printed beside it.
    let med = |v: &mut Vec<Run>| {
        v.sort_by_key(|x| x.wall);
        v[v.len() / 2]
    };
    let line = |what: &str, r: Run| {
        println!(
            "jobs_json {what:<22} {:>8.0} jobs/s of CPU ({:.3}s)  {:>8.0} jobs/s wall ({:.3}s)  peak heap added {:>7.1} MB",
            n as f64 / r.cpu.as_secs_f64(),
            r.cpu.as_secs_f64(),
            n as f64 / r.wall.as_secs_f64(),
            r.wall.as_secs_f64(),
            r.heap as f64 / 1e6,
        )
    };
    let before = med(&mut b);
    let ours = med(&mut s);
    assert_eq!(
        before.bytes, ours.bytes,
        "both streamed writers print the same number of bytes"
    );
    if with_whole {
        let whole = med(&mut w);
        assert_eq!(
            whole.bytes, ours.bytes,
            "the whole list prints the same bytes"
        );
        line("whole list:", whole);
    }
    let one = med(&mut o);
    assert_eq!(one.bytes, ours.bytes, "one thread prints the same bytes");
    line("serde streamed:", before);
    line("one thread (parsed):", one);
    line("streamed (now):", ours);
    println!(
        "jobs_json ratio (wall): streamed is {:.2}x serde streamed, {:.2}x one thread; {:.1} MB of JSON",
        before.wall.as_secs_f64() / ours.wall.as_secs_f64(),
        one.wall.as_secs_f64() / ours.wall.as_secs_f64(),
        ours.bytes as f64 / 1e6
    );
    let pages = measured(|| pages_only(&store));
    let json_pages = measured(|| json_pages_only(&store));
    let comp = measured(|| compact(&store, now));
    println!(
        "jobs_json where the time goes: reading the pages alone {:.3}s CPU ({:.0} jobs/s), as stored JSON (the reader thread now) {:.3}s CPU ({:.0} jobs/s); serde_json compact lines instead of the pretty array {:.3}s CPU ({:.0} jobs/s, {:.1} MB)",
        pages.cpu.as_secs_f64(),
        n as f64 / pages.cpu.as_secs_f64(),
        json_pages.cpu.as_secs_f64(),
        n as f64 / json_pages.cpu.as_secs_f64(),
        comp.cpu.as_secs_f64(),
        n as f64 / comp.cpu.as_secs_f64(),
        comp.bytes as f64 / 1e6
    );
    drop(store);
    let (bd, bcpu, rss) = binary(dir.path());
    println!(
        "jobs_json binary: `cronsole jobs --json > /dev/null` {:.2}s wall, {:.2}s CPU ({:.0} jobs/s wall, store open included), peak RSS {:.0} MB",
        bd.as_secs_f64(),
        bcpu.as_secs_f64(),
        n as f64 / bd.as_secs_f64(),
        rss as f64 / 1024.0
    );
}

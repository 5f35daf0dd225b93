//! Paging the console's History pane through a huge history (issue 12 item 1): the time of one
//! page (`history(limit 500, offset N)`, what the pane asks when its cursor walks past what it
//! holds) over a file store of 1 000 000 rows, at growing depths, and of a status-filtered page.
//!
//! Run: `cargo bench --bench history_pages` (~480 MB of temp disk, removed at the end).

use std::io::Write;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use cronsole::model::{HistoryRow, JobsFile, Status, Trigger};
use cronsole::store::file::FileStore;
use cronsole::store::{HistoryQuery, HistoryReader, Store};

const JOBS: usize = 1_000;
const ROWS: usize = 1_000_000;
const PAGE: usize = cronsole::tui::state::HISTORY_PAGE;

fn main() {
    let dir = std::env::temp_dir().join(format!("cronsole-bench-pages-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let now: DateTime<Utc> = Utc::now();
    let store = FileStore::open(&dir).expect("open store");
    let file = JobsFile {
        jobs: (0..JOBS)
            .map(|i| cronsole::testkit::jobs::command_job(&format!("job-{i:04}"), 3600))
            .collect(),
        ..Default::default()
    };
    store.apply(&file, now).expect("apply");
    drop(store);
    let built = Instant::now();
    let mut f = std::io::BufWriter::new(
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join("history.jsonl"))
            .expect("history"),
    );
    let statuses = [
        Status::Succeeded,
        Status::NoChange,
        Status::Failed,
        Status::Skipped,
    ];
    for i in 0..ROWS {
        let at = now - chrono::Duration::seconds((ROWS - i) as i64);
        let mut r = HistoryRow::new(
            &format!("job-{:04}", i % JOBS),
            statuses[i % statuses.len()],
            Trigger::Schedule,
            Some(at),
            "bench:1:abcdef12",
            at,
        );
        r.result = Some(format!("run {i}: everything nominal, {} items", i % 977));
        serde_json::to_writer(&mut f, &r).expect("row");
        f.write_all(b"\n").expect("newline");
    }
    f.flush().expect("flush");
    drop(f);
    println!(
        "store: {JOBS} jobs, {ROWS} rows, built in {:.1} s",
        built.elapsed().as_secs_f64()
    );
    let store = FileStore::open(&dir).expect("reopen");
    let time = |q: &HistoryQuery| -> (Duration, usize) {
        let mut best = Duration::MAX;
        let mut n = 0;
        for _ in 0..3 {
            let t = Instant::now();
            n = store.history(q).expect("history").len();
            best = best.min(t.elapsed());
        }
        (best, n)
    };
    println!("| page (limit {PAGE}) | rows | best of 3 |");
    println!("|---|---|---|");
    for offset in [
        0usize,
        PAGE,
        10 * PAGE,
        100 * PAGE,
        1000 * PAGE,
        ROWS - PAGE,
    ] {
        let (d, n) = time(&HistoryQuery {
            limit: PAGE,
            offset,
            ..Default::default()
        });
        println!(
            "| offset {offset} | {n} | {:.1} ms |",
            d.as_secs_f64() * 1e3
        );
    }
    for offset in [0usize, 100 * PAGE] {
        let (d, n) = time(&HistoryQuery {
            limit: PAGE,
            offset,
            status: Some(Status::Failed),
            ..Default::default()
        });
        println!(
            "| status failed, offset {offset} | {n} | {:.1} ms |",
            d.as_secs_f64() * 1e3
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

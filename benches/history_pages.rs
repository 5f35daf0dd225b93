//! Paging history at scale: over a file store of
//! 10 000 000 rows (sealed segments of 4 MiB), the time of start-up (open + first claim), of a
//! page (`history_page(limit 500)`, what `history` and the console's History pane ask) at
//! growing depths by offset (unfiltered offsets skip whole segments by their seals' row
//! counts) and by page token, and of status-filtered pages.
//!
//! Run: `cargo bench --bench history_pages` (~3.5 GB of temp disk for 10 000 000 rows, removed
//! at the end); `CRONSOLE_BENCH_ROWS=1000000` for a smaller store.
#![allow(clippy::unwrap_used)] // test code

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use cronsole::model::{HistoryRow, JobsFile, Status, Trigger};
use cronsole::store::file::FileStore;
use cronsole::store::{ClaimRequest, HistoryQuery, HistoryReader, Store};

const JOBS: usize = 1_000;
const PAGE: usize = cronsole::testkit::internals::tui::state::HISTORY_PAGE;
const BATCH: usize = 20_000;

#[allow(clippy::too_many_lines)] // a test scenario reads best in one piece (see CONTRIBUTING.md)
fn main() {
    let rows: usize = std::env::var("CRONSOLE_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let dir = cronsole::testkit::tmp::TempDir::new("bench-pages");
    let now: DateTime<Utc> = Utc::now();
    let store = FileStore::open(&dir).expect("open store");
    // One job with a record, so the start-up figure includes a real claim.
    let file = JobsFile {
        jobs: vec![cronsole::testkit::jobs::command_job("claimer", 3600)],
        ..Default::default()
    };
    store.apply(&file, now).expect("apply");
    let built = Instant::now();
    let statuses = [
        Status::Succeeded,
        Status::NoChange,
        Status::Failed,
        Status::Skipped,
    ];
    let mut batch = Vec::with_capacity(BATCH);
    for i in 0..rows {
        let at = now - chrono::Duration::milliseconds((rows - i) as i64 * 10);
        // Job names without records (see `append_history_unrecorded`).
        let mut r = HistoryRow::new(
            &format!("hist-{:04}", i % JOBS),
            statuses[i % statuses.len()],
            Trigger::Schedule,
            Some(at),
            "bench:1:abcdef12",
            at,
        );
        r.result = Some(format!("run {i}: everything nominal, {} items", i % 977));
        batch.push(r);
        if batch.len() == BATCH {
            store.append_history_unrecorded(&batch).expect("append");
            batch.clear();
        }
    }
    store.append_history_unrecorded(&batch).expect("append");
    drop(store);
    let size: u64 = std::fs::read_dir(dir.join("history"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0);
    println!(
        "store: {rows} rows ({:.2} GB in sealed segments), built in {:.1} s",
        size as f64 / 1e9,
        built.elapsed().as_secs_f64()
    );
    let best = |mut f: Box<dyn FnMut() -> usize + '_>| -> (Duration, usize) {
        let mut best = Duration::MAX;
        let mut n = 0;
        for _ in 0..3 {
            let t = Instant::now();
            n = f();
            best = best.min(t.elapsed());
        }
        (best, n)
    };
    let (d, _) = best(Box::new(|| {
        let s = FileStore::open(&dir).expect("reopen");
        s.claim_due(&ClaimRequest {
            now,
            owner: "bench",
            limit: 1,
            in_flight: &[],
            clock_stepped: None,
            max_offset: None,
        })
        .expect("claim")
        .claims
        .len()
    }));
    println!(
        "start-up (open + first claim) at {rows} rows: {:.1} ms",
        d.as_secs_f64() * 1e3
    );
    let store = FileStore::open(&dir).expect("reopen");
    let page = |q: HistoryQuery| {
        let s = &store;
        best(Box::new(move || {
            s.history_page(&q).expect("page").rows.len()
        }))
    };
    println!("| page (limit {PAGE}) | rows | best of 3 |");
    println!("|---|---|---|");
    for offset in [0usize, PAGE, 1000 * PAGE, rows / 2, rows - PAGE] {
        let (d, n) = page(HistoryQuery {
            limit: PAGE,
            offset,
            ..Default::default()
        });
        println!(
            "| offset {offset} | {n} | {:.1} ms |",
            d.as_secs_f64() * 1e3
        );
    }
    // Tokens: the page after one in the middle and the page after the next-to-last one.
    for at in [rows / 2, rows - 2 * PAGE] {
        let tok = store
            .history_page(&HistoryQuery {
                limit: PAGE,
                offset: at,
                ..Default::default()
            })
            .expect("page")
            .next
            .expect("a next page");
        let (d, n) = page(HistoryQuery {
            limit: PAGE,
            before: Some(tok.clone()),
            ..Default::default()
        });
        println!(
            "| token after row {} | {n} | {:.1} ms |",
            at + PAGE,
            d.as_secs_f64() * 1e3
        );
        let (d, n) = page(HistoryQuery {
            limit: PAGE,
            status: Some(Status::Failed),
            before: Some(tok),
            ..Default::default()
        });
        println!(
            "| status failed, token after row {} | {n} | {:.1} ms |",
            at + PAGE,
            d.as_secs_f64() * 1e3
        );
    }
    let (d, n) = page(HistoryQuery {
        limit: PAGE,
        status: Some(Status::Failed),
        ..Default::default()
    });
    println!(
        "| status failed, first page | {n} | {:.1} ms |",
        d.as_secs_f64() * 1e3
    );
    drop(store);
}

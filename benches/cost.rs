//! Cost of the per-run bookkeeping this branch adds to every agent run: model-name price
//! resolution (exact, provider prefix, date suffix, alias, unknown), building the
//! price table from settings, the budget check, the incident signature, and `counts_in` (whose
//! budget period a job's counters count in, per job of every snapshot and listing).
//!
//! Run: `cargo bench --bench cost`. Prints median and p99 per operation over 200 batches.
#![allow(clippy::unwrap_used)] // test code

use std::hint::black_box;
use std::time::Instant;

use cronsole::model::{Budget, BudgetPeriod, Settings};
use cronsole::store::SpendNow;
use cronsole::testkit::internals::cost::{PriceTable, TokenUsage, budget_check, run_cost};
use cronsole::testkit::internals::deliver::incident::signature;
use cronsole::testkit::internals::store::rules;
use cronsole::testkit::stats::percentile;

const BATCHES: usize = 200;

fn bench(name: &str, iters: usize, mut f: impl FnMut()) {
    for _ in 0..iters {
        f();
    }
    let mut per_op: Vec<f64> = (0..BATCHES)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..iters {
                f();
            }
            t.elapsed().as_nanos() as f64 / iters as f64
        })
        .collect();
    per_op.sort_by(f64::total_cmp);
    let median = percentile(&per_op, 0.5);
    let p99 = percentile(&per_op, 0.99);
    println!("{name:<44} median {median:>9.1} ns/op   p99 {p99:>9.1} ns/op");
}

fn main() {
    let table = PriceTable::builtin();
    for model in [
        "gpt-4o-mini",
        "openai/gpt-4o-mini",
        "gpt-4o-mini-2024-07-18",
        "claude-3-5-haiku-20241022",
        "claude-sonnet-4-0",
        "gpt-4o-mini-search-preview-x",
        "some-unknown-local-model:7b",
    ] {
        bench(&format!("resolve {model}"), 2000, || {
            black_box(table.resolve(black_box(model)));
        });
    }
    let usage = Some(TokenUsage {
        input: 1200,
        output: 300,
    });
    bench("run_cost openai/gpt-4o-mini-2024-07-18", 2000, || {
        black_box(run_cost(
            &table,
            black_box("openai/gpt-4o-mini-2024-07-18"),
            usage,
        ));
    });
    let mut settings = Settings {
        budget: Some(Budget {
            max_cost_usd: 1.0,
            period: BudgetPeriod::Day,
        }),
        ..Settings::default()
    };
    for i in 0..20 {
        settings.pricing.insert(
            format!("custom-model-{i}"),
            cronsole::model::Price::new(0.1, 0.2),
        );
    }
    bench("PriceTable::from_settings (20 overrides)", 200, || {
        black_box(PriceTable::from_settings(black_box(&settings)));
    });
    let spend = SpendNow {
        global_usd: 0.5,
        job_usd: 0.1,
    };
    bench("budget_check (go)", 5000, || {
        black_box(budget_check(&settings, Some(0.2), black_box(spend)));
    });
    let err = "HTTP 503 from http://127.0.0.1:8080/v1/chat/completions: upstream \
               request req_8f3a9c2e1b failed at 2026-11-29T12:00:01Z (pid 48213), retry later";
    bench("incident signature (120-char error)", 500, || {
        black_box(signature(black_box(err)));
    });
    // What one job's counters add to a console snapshot, a `jobs --json` row or a `stats` line:
    // `counts_in` of the counters' period key in the current one. Same key (the common case),
    // a never-run job's empty key and a day's key after a `period` edit to week or month; and,
    // for the ratio in the same run, the membership test `counts_in` used before task SMALL
    // item 4 (listing `overlapping_keys`: ~60 keys for a month).
    use rules::period::{counts_in, overlapping_keys};
    let listed = |booked: &str, key: &str| {
        let kind = |k: &str| k.split(':').next().unwrap_or("").to_string();
        booked == key
            || key == "total"
            || (kind(booked) != kind(key) && overlapping_keys(key).iter().any(|k| k == booked))
    };
    for (booked, key) in [
        ("day:2026-12-01", "day:2026-12-01"),
        ("", "day:2026-12-01"),
        ("", "month:2026-12"),
        ("day:2026-11-30", "week:2026-W49"),
        ("day:2026-11-30", "month:2026-12"),
    ] {
        bench(&format!("counts_in {booked:?} in {key}"), 2000, || {
            black_box(counts_in(black_box(booked), black_box(key)));
        });
        bench(&format!("  (listing) {booked:?} in {key}"), 200, || {
            black_box(listed(black_box(booked), black_box(key)));
        });
    }
}

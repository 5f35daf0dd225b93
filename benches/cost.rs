//! Cost of the per-run bookkeeping this branch adds to every agent run: model-name price
//! resolution (exact, provider prefix, date suffix, alias, unknown), building the
//! price table from settings, the budget check, and the incident signature.
//!
//! Run: `cargo bench --bench cost`. Prints median and p99 per operation over 200 batches.

use std::hint::black_box;
use std::time::Instant;

use cronsole::cost::{PriceTable, TokenUsage, budget_check, run_cost};
use cronsole::deliver::incident::signature;
use cronsole::model::{Budget, BudgetPeriod, Settings};
use cronsole::store::SpendNow;
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
            cronsole::model::Price {
                input: 0.1,
                output: 0.2,
            },
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
}

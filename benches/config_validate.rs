//! How long `config::check_str` takes on large jobs files: a valid one (the path every start
//! and `apply` takes) and one where every job has an error (every diagnostic is located in the
//! parsed document, so this is the worst case of the locator).
//!
//! Run: `cargo bench --bench config_validate`. Prints the median and p99 of each case.
#![allow(clippy::unwrap_used)] // test code

use std::path::Path;
use std::time::{Duration, Instant};

use cronsole::config;
use cronsole::testkit::stats::percentile;

fn jobs_file(n: usize, broken: bool) -> String {
    let mut s = String::from(
        "defaults: {tz: Europe/Berlin, misfire_grace_seconds: 600}\n\
         agents:\n  bot: {provider: openai, model: gpt-4o-mini}\n\
         delivery:\n  out: {file: /tmp/out.jsonl}\njobs:\n",
    );
    for i in 0..n {
        let schedule = match i % 3 {
            0 => "\"every 5m\"".to_string(),
            1 => "\"0 7 * * 1-5\"".to_string(),
            _ => "{kind: cron, cron_expr: \"*/15 9-17 * * *\", tz: America/New_York}".to_string(),
        };
        let agent = if broken { "ghost" } else { "bot" };
        s.push_str(&format!(
            "  - name: job-{i}\n    schedule: {schedule}\n    agent: {agent}\n    \
             message: \"summarise {i}\"\n    deliver: [out]\n    max_cost_usd: 0.1\n"
        ));
    }
    s
}

fn measure(label: &str, text: &str, iters: usize) {
    let path = Path::new("bench.yaml");
    let env = |_: &str| true;
    let mut times: Vec<Duration> = Vec::with_capacity(iters);
    let mut diags = 0;
    for _ in 0..iters {
        let t0 = Instant::now();
        let c = config::check_str_with_env(text, path, &env);
        times.push(t0.elapsed());
        diags = c.diagnostics.len();
    }
    times.sort();
    let median = percentile(&times, 0.5);
    let p99 = percentile(&times, 0.99);
    println!(
        "{label:<34} {:>7} bytes  {diags:>5} diagnostics  median {:>9.3} ms  p99 {:>9.3} ms",
        text.len(),
        median.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3
    );
}

/// The YAML parse alone (positions included), to tell the parser's share from the checks'.
fn measure_parse(label: &str, text: &str, iters: usize) {
    let mut times: Vec<Duration> = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t0 = Instant::now();
        let ok = config::parse_only(text);
        times.push(t0.elapsed());
        assert!(ok);
    }
    times.sort();
    println!(
        "{label:<34} {:>7} bytes  median {:>9.3} ms",
        text.len(),
        percentile(&times, 0.5).as_secs_f64() * 1e3
    );
}

fn main() {
    for n in [100, 1000] {
        measure_parse(
            &format!("YAML parse only, {n} jobs"),
            &jobs_file(n, false),
            20,
        );
    }
    for n in [10, 100, 1000] {
        measure(&format!("valid, {n} jobs"), &jobs_file(n, false), 50);
    }
    for n in [10, 100, 1000] {
        measure(
            &format!("one error per job, {n} jobs"),
            &jobs_file(n, true),
            10,
        );
    }
    // Hostile input: both must be refused at once, not after seconds.
    measure("160 KB of nested [", &"[".repeat(160_000), 20);
    let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
    let mut prev = 'a';
    for n in 'b'..='j' {
        bomb.push_str(&format!(
            "{n}: &{n} [{}]\n",
            vec![format!("*{prev}"); 10].join(", ")
        ));
        prev = n;
    }
    measure("alias bomb (10^10 nodes)", &bomb, 20);
}

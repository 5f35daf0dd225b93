//! Next-slot computation speed: the DST-correct `CronSchedule` wrapper against the raw `cron`
//! crate on the same expressions. Run: `cargo bench --bench schedule`.
//!
//! Each sample times a batch of calls from spread-out starting instants (all of 2026, so DST
//! transitions are included at their natural rate) and reports per-call nanoseconds: median and
//! p99 over the samples, and calls per second on one core.
#![allow(clippy::unwrap_used)] // test code

use std::hint::black_box;
use std::str::FromStr;
use std::time::Instant;

use chrono::{DateTime, Duration, Utc};
use chrono_tz::Tz;
use cronsole::schedule::CronSchedule;
use cronsole::testkit::stats::percentile;

const BATCH: usize = 2_000;
const SAMPLES: usize = 300;

fn starts() -> Vec<DateTime<Utc>> {
    // A deterministic spread over 2026 (LCG), seconds resolution.
    let base = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .map(|d| d.to_utc())
        .unwrap_or_default();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..BATCH)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            base + Duration::seconds(((x >> 33) % (365 * 86_400)) as i64)
        })
        .collect()
}

fn report(name: &str, mut per_call_ns: Vec<f64>) -> f64 {
    per_call_ns.sort_by(|a, b| a.total_cmp(b));
    let median = percentile(&per_call_ns, 0.5);
    let p99 = percentile(&per_call_ns, 0.99);
    println!(
        "{name:<58} median {median:>8.1} ns/call  p99 {p99:>8.1} ns/call  {:>10.0} calls/s",
        1e9 / median
    );
    median
}

fn bench<F: FnMut(DateTime<Utc>) -> Option<DateTime<Utc>>>(
    name: &str,
    starts: &[DateTime<Utc>],
    mut f: F,
) -> f64 {
    // Warm up.
    for t in starts {
        black_box(f(*t));
    }
    let mut samples = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let t0 = Instant::now();
        for t in starts {
            black_box(f(black_box(*t)));
        }
        samples.push(t0.elapsed().as_nanos() as f64 / starts.len() as f64);
    }
    report(name, samples)
}

/// Per-call latency (each call timed alone; includes ~20-40 ns of `Instant` overhead).
fn latency<F: FnMut(DateTime<Utc>) -> Option<DateTime<Utc>>>(
    name: &str,
    starts: &[DateTime<Utc>],
    mut f: F,
) {
    let mut ns = Vec::with_capacity(starts.len() * 20);
    for _ in 0..20 {
        for t in starts {
            let t0 = Instant::now();
            black_box(f(black_box(*t)));
            ns.push(t0.elapsed().as_nanos() as f64);
        }
    }
    ns.sort_by(|a, b| a.total_cmp(b));
    println!(
        "{name:<58} per call: median {:>7.0} ns  p99 {:>7.0} ns  max {:>9.0} ns",
        percentile(&ns, 0.5),
        percentile(&ns, 0.99),
        percentile(&ns, 1.0)
    );
}

fn main() {
    let starts = starts();
    let cases = [
        (
            "*/5 9-17 * * 1-5",
            "0 */5 9-17 * * MON-FRI",
            "America/New_York",
        ),
        ("0 7 * * *", "0 0 7 * * *", "Europe/Berlin"),
    ];
    for (expr, raw, zone) in cases {
        let tz: Tz = match zone.parse() {
            Ok(tz) => tz,
            Err(e) => panic!("zone {zone}: {e}"),
        };
        let ours = match CronSchedule::parse(expr, tz) {
            Ok(c) => c,
            Err(e) => panic!("{expr}: {e}"),
        };
        let theirs = match cron::Schedule::from_str(raw) {
            Ok(s) => s,
            Err(e) => panic!("{raw}: {e}"),
        };
        println!("== '{expr}' {zone}");
        let a = bench("cronsole next_after (DST-correct)", &starts, |t| {
            ours.next_after(t)
        });
        let b = bench("cronsole prev_before (DST-correct)", &starts, |t| {
            ours.prev_before(t)
        });
        let c = bench("raw cron crate after(zoned t).next()", &starts, |t| {
            theirs
                .after(&t.with_timezone(&tz))
                .next()
                .map(|d| d.with_timezone(&Utc))
        });
        // Chained: each call starts from the previous slot (the engine's access pattern).
        let mut cur = starts[0];
        let d = bench("cronsole next_after chained", &starts, |_| {
            cur = ours.next_after(cur).unwrap_or(starts[0]);
            Some(cur)
        });
        println!(
            "ratio raw-crate / cronsole next_after: {:.2}x (prev {:.2}x, chained {:.2}x)",
            c / a,
            c / b,
            c / d
        );
        latency("cronsole next_after latency", &starts, |t| {
            ours.next_after(t)
        });
    }

    // The exact (slow) path: every start within 3 h of New York's fall-back fold.
    let tz: Tz = match "America/New_York".parse() {
        Ok(tz) => tz,
        Err(e) => panic!("{e}"),
    };
    let fold = DateTime::parse_from_rfc3339("2026-11-01T06:00:00Z")
        .map(|d| d.to_utc())
        .unwrap_or_default();
    let near: Vec<DateTime<Utc>> = (0..BATCH as i64)
        .map(|i| fold + Duration::seconds((i * 97) % (6 * 3600) - 3 * 3600))
        .collect();
    for expr in ["*/20 * * * *", "30 1 * * *"] {
        let c = match CronSchedule::parse(expr, tz) {
            Ok(c) => c,
            Err(e) => panic!("{expr}: {e}"),
        };
        println!("== '{expr}' America/New_York, starts within 3 h of the fall-back fold");
        bench("cronsole next_after (exact path)", &near, |t| {
            c.next_after(t)
        });
        latency("cronsole next_after latency (exact path)", &near, |t| {
            c.next_after(t)
        });
    }
}

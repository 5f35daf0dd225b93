//! Gate-layer benchmarks: the per-tick cost of a monitor (hash + compare + diff), the address
//! classifier, notepad parsing and process spawn overhead. `harness = false`; prints median and
//! p99 per operation. Run: `cargo bench --bench gate`.
#![allow(clippy::unwrap_used)] // test code

use std::time::{Duration, Instant};

use cronsole::testkit::internals::addr::classify;
use cronsole::testkit::internals::gate::monitor::{evaluate, watermark};
use cronsole::testkit::internals::gate::notepad::parse_reply;
use cronsole::testkit::internals::proc::{Cap, ProcEnv, ProcSpec, run};
use cronsole::testkit::stats::percentile;

fn report(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let med = percentile(&samples, 0.5);
    let p99 = percentile(&samples, 0.99);
    println!(
        "{name:<48} n={:<6} median {:>10.2?}  p99 {:>10.2?}",
        samples.len(),
        med,
        p99
    );
}

fn bench<F: FnMut()>(name: &str, n: usize, mut f: F) {
    for _ in 0..(n / 10).max(1) {
        f();
    }
    let samples = (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    report(name, samples);
}

fn main() {
    let big: Vec<u8> = (0..64 * 1024).map(|i| b"abcdefghij\n"[i % 11]).collect();
    let mut changed = big.clone();
    changed[100] = b'X';
    let base = watermark(&big);

    bench("monitor: 64 KiB unchanged (hash + compare)", 2000, || {
        std::hint::black_box(evaluate(&big, Some(&base)));
    });
    bench("monitor: 64 KiB changed (hash + 2 KiB diff)", 2000, || {
        std::hint::black_box(evaluate(&changed, Some(&base)));
    });
    bench("monitor: 64 KiB first run", 2000, || {
        std::hint::black_box(evaluate(&big, None));
    });

    let addrs: Vec<std::net::IpAddr> = [
        "8.8.8.8",
        "10.1.2.3",
        "2606:4700::1111",
        "::ffff:127.0.0.1",
        "2002:a00:1::1",
        "64:ff9b::a9fe:a9fe",
    ]
    .iter()
    .map(|s| s.parse().unwrap())
    .collect();
    bench("address classifier: 6 addresses", 20000, || {
        for a in &addrs {
            std::hint::black_box(classify(*a));
        }
    });

    let reply = format!(
        "{}\n```notepad\nlast=85%\ntrend=up\ncount=12\n```\n",
        "A long model answer line.\n".repeat(200)
    );
    bench("notepad: parse + strip a 5 KiB reply", 20000, || {
        std::hint::black_box(parse_reply(&reply));
    });

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let spec = ProcSpec {
        command: "true",
        timeout: Duration::from_secs(10),
        stdout_cap: Cap::Hard(64 * 1024),
        stderr_cap: Cap::Soft(2000),
    };
    bench("proc: sh -c true (spawn, group, reap)", 200, || {
        rt.block_on(async {
            std::hint::black_box(run(&spec, &ProcEnv::default()).await.unwrap());
        });
    });
    let spec = ProcSpec {
        command: "head -c 65536 /dev/zero",
        ..spec
    };
    bench("proc: 64 KiB of stdout captured", 200, || {
        rt.block_on(async {
            std::hint::black_box(run(&spec, &ProcEnv::default()).await.unwrap());
        });
    });
}

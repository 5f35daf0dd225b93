//! Client-side CPU per MCP tool call over stdio: cronsole's client (rmcp under our session)
//! against the Python SDK's own client, calling the same server (`tests/mcp_servers/py_server.py`,
//! its `echo` tool) in the same sitting, in both protocol eras.
//!
//! CPU is this process's own (every thread, the server child excluded): the sum of
//! `/proc/self/task/*/schedstat`, in nanoseconds, over CALLS calls made one after the other
//! after 50 warm-up calls. The Python side (`benches/mcp_py_client.py`) measures itself the same
//! way. Needs the test servers (`.ci/mcp-servers`).
//!
//! Run: `cargo bench --bench mcp_call` (CALLS from `MCP_BENCH_CALLS`, default 2000). Figures go
//! to docs/BENCHMARKS.md "MCP client CPU per tool call".
#![allow(clippy::unwrap_used)] // test code

use std::sync::Arc;
use std::time::{Duration, Instant};

use cronsole::testkit::internals::action::tools::ToolSource;
use cronsole::testkit::internals::action::tools::mcp::{self, Era, Session};
use cronsole::testkit::internals::text::Secrets;
use cronsole::testkit::mcp::TestServers;
use serde_json::json;

/// This process's CPU time so far, every thread.
fn cpu() -> Duration {
    let mut ns: u64 = 0;
    for e in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        if let Ok(s) = std::fs::read_to_string(e.path().join("schedstat"))
            && let Some(v) = s
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
        {
            ns += v;
        }
    }
    Duration::from_nanos(ns)
}

struct Figure {
    cpu_per_call: Duration,
    wall_per_call: Duration,
}

async fn rust_client(servers: &TestServers, version: &str, calls: usize) -> Figure {
    let argv = servers.py_stdio_argv();
    let mut child = tokio::process::Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start the Python server");
    let out = child.stdout.take().expect("stdout");
    let inp = child.stdin.take().expect("stdin");
    let session = Session {
        name: "py".into(),
        era: Era::Pinned(version.into()),
        timeout: Duration::from_secs(60),
        secrets: Arc::new(Secrets::new(Vec::<String>::new())),
        own: Default::default(),
        guard: Some(Box::new(child)),
        stderr: None,
    };
    let src = mcp::connect_stdio(out, inp, session)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let t = Duration::from_secs(30);
    for _ in 0..50 {
        src.call("echo", json!({"text": "warm"}), t)
            .await
            .expect("warm-up");
    }
    let (c0, w0) = (cpu(), Instant::now());
    for i in 0..calls {
        let r = src
            .call("echo", json!({"text": format!("hello {i}")}), t)
            .await
            .expect("call");
        assert!(!r.is_error);
    }
    let (c1, w1) = (cpu(), w0.elapsed());
    src.close().await;
    let n = calls as u32;
    Figure {
        cpu_per_call: (c1 - c0) / n,
        wall_per_call: w1 / n,
    }
}

fn python_client(servers: &TestServers, mode: &str, calls: usize) -> Figure {
    let script = cronsole::testkit::mcp::checkout().join("benches/mcp_py_client.py");
    let out = std::process::Command::new(servers.python())
        .arg(script)
        .arg(calls.to_string())
        .arg(mode)
        .args(servers.py_stdio_argv())
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("run the Python client");
    assert!(out.status.success(), "the Python client failed");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("its JSON line");
    let per = |k: &str| Duration::from_secs_f64(v[k].as_f64().unwrap_or(0.0) / calls as f64);
    Figure {
        cpu_per_call: per("cpu_s"),
        wall_per_call: per("wall_s"),
    }
}

fn main() {
    let Some(servers) = TestServers::find() else {
        eprintln!("the MCP test servers are not installed: run .ci/mcp-servers");
        return;
    };
    let calls: usize = std::env::var("MCP_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!("{calls} sequential calls of echo over stdio, after 50 warm-up calls");
    println!(
        "| era | cronsole CPU µs/call | Python SDK CPU µs/call | ratio | cronsole wall ms/call | Python wall ms/call |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for (version, mode) in [("2025-11-25", "legacy"), ("2026-07-28", "2026-07-28")] {
        let ours = rt.block_on(rust_client(&servers, version, calls));
        let theirs = python_client(&servers, mode, calls);
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        println!(
            "| {version} | {:.1} | {:.1} | {:.1}× | {:.2} | {:.2} |",
            us(ours.cpu_per_call),
            us(theirs.cpu_per_call),
            us(theirs.cpu_per_call) / us(ours.cpu_per_call).max(1e-9),
            us(ours.wall_per_call) / 1e3,
            us(theirs.wall_per_call) / 1e3,
        );
    }
}

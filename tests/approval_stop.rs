//! A stop never waits for an operator, through the real binary and the scripted loopback model:
//! an owner told to stop (SIGTERM) while the reply asking for a tool that needs approval is
//! still on its way records the run `abandoned` ("shutdown while awaiting approval") as soon as
//! the call would begin to wait, and exits — it does not sit out its shutdown grace.
#![allow(clippy::unwrap_used)] // test code

mod support;

use std::time::Duration;

use cronsole::model::Status;
use cronsole::testkit::llm::{FakeCall, FakeLlm, Reply};
use cronsole::testkit::wait::wait_until_async;
use cronsole::transcript::CallState;
use serde_json::json;

const KEY: &str = "sk-PROVIDER-7a1c0e55d2b94f08";

/// SIGTERM lands while the model's reply (a call to `write`, which needs approval) is in
/// flight; the reply comes after the stop began. With a 10-minute shutdown grace, the owner
/// still exits within a minute: the call never waits, the row is `abandoned` with the call
/// on it as `awaiting_approval`, and the tool never ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_would_await_approval_after_a_stop_began_is_abandoned_at_once() {
    let ask = Reply::tools(vec![FakeCall::new("write", json!({"path": "/r"}))], 10, 5);
    // Held long enough for the stop to land first (the test waits for the request itself).
    let fake = FakeLlm::openai(
        KEY,
        vec![Reply::Slow(Duration::from_secs(2), Box::new(ask))],
    )
    .await
    .unwrap();
    let dir = support::tempdir("approval-stop");
    std::fs::write(
        dir.join("jobs.yaml"),
        support::approval::gated_yaml(&fake.base_url(), "", ""),
    )
    .unwrap();
    let owner = support::cli::cronsole(&dir)
        .env("PROVIDER_KEY", KEY)
        .args(["run", "--jobs", "jobs.yaml", "--store", "store"])
        .args(["--for", "20m", "--shutdown-grace", "10m"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_async("the model request", Duration::from_secs(60), || {
        fake.request_count() == 1
    })
    .await;
    let _ = std::process::Command::new("kill")
        .arg(owner.id().to_string())
        .status();
    // A stop that waited for an operator would take the whole 10-minute grace.
    let (out, _) = tokio::task::spawn_blocking(move || {
        support::cli::wait_timeout(owner, Duration::from_secs(90))
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let all = support::approval::rows(&dir.join("store"), "gated");
    assert_eq!(all.len(), 1, "{all:#?}");
    let r = &all[0];
    assert_eq!(r.status, Status::Abandoned, "{r:#?}");
    assert_eq!(
        r.reason.as_deref(),
        Some("shutdown while awaiting approval"),
        "{r:#?}"
    );
    let calls = cronsole::testkit::tools::calls(r);
    assert_eq!(calls.len(), 1, "{r:#?}");
    assert_eq!(calls[0].tool, "write");
    assert_eq!(calls[0].state, CallState::AwaitingApproval, "{r:#?}");
    assert!(!dir.join("wrote.txt").exists(), "the tool never ran");
    assert_eq!(fake.request_count(), 1);
}

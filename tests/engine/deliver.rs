//! Delivery through the engine: a succeeded run reaches a loopback webhook; a failing
//! webhook leaves the run `succeeded` with `delivered: false` and a `delivery_error`; a flaky job
//! alerts once per failure signature and sends one recovery note.
#![allow(clippy::unwrap_used)] // test code

use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};

use crate::engine_support::*;
use cronsole::model::Status;
use cronsole::testkit::http::{Response, TestServer};

fn yaml(url: &str, command: &str) -> String {
    format!(
        "budget: null
delivery:
  hook: {{ webhook: \"{url}/hook\", format: json }}
jobs:
  - name: j
    schedule: every 60s
    command: \"{command}\"
    max_retries: 1
    deliver: [hook]
"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_succeeded_run_reaches_the_webhook() {
    let hook = TestServer::start(|_| Response::text(200, "ok"))
        .await
        .unwrap();
    let rig = Rig::start(
        "deliver-ok",
        &yaml(&hook.url(), "echo payload-42"),
        RigOpts::default(),
    )
    .await;
    let r = rig.wait_rows("j", 1).await.remove(0);
    assert_eq!(r.status, Status::Succeeded);
    assert!(r.delivered, "{r:#?}");
    assert_eq!(r.delivery_error, None);
    assert_eq!(hook.request_count(), 1);
    let v = hook.requests()[0].json().expect("json payload");
    assert_eq!(v["job"], "j");
    assert_eq!(v["kind"], "result");
    assert!(
        v["text"].as_str().unwrap_or("").contains("payload-42"),
        "{v}"
    );
    // One run id from the claim to the row to the sink: a delivered line can be matched to
    // its row in `history` (and `retry`).
    assert_eq!(v["run_id"], r.run_id.to_string(), "{v}");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_webhook_keeps_the_run_succeeded() {
    let hook = TestServer::start(|_| Response::text(500, "nope"))
        .await
        .unwrap();
    let rig = Rig::start(
        "deliver-500",
        &yaml(&hook.url(), "echo hi"),
        RigOpts::default(),
    )
    .await;
    let r = rig.wait_rows("j", 1).await.remove(0);
    assert_eq!(r.status, Status::Succeeded, "{r:#?}");
    assert!(!r.delivered);
    let e = r.delivery_error.clone().expect("delivery_error");
    assert!(e.contains("hook"), "names the sink: {e}");
    assert!(e.contains("500"), "says what went wrong: {e}");
    assert!(!e.contains(&hook.url()), "webhook URLs carry tokens: {e}");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flaky_job_alerts_once_per_signature_then_recovers_once() {
    let status = Arc::new(AtomicU16::new(200));
    let s = Arc::clone(&status);
    let hook = TestServer::start(move |_| Response::text(s.load(Ordering::SeqCst), "ok"))
        .await
        .unwrap();
    let dir = tmp("flaky");
    let ok = dir.join("ok");
    let mode = dir.join("mode");
    std::fs::write(&mode, "disk full").unwrap();
    let cmd = format!(
        "if [ -f {ok} ]; then echo fine; else echo error: $(cat {mode}) at $(date +%s%N); exit 3; fi",
        ok = ok.display(),
        mode = mode.display()
    );
    let rig = Rig::start("flaky", &yaml(&hook.url(), &cmd), RigOpts::default()).await;
    let texts = |h: &TestServer| -> Vec<String> {
        h.requests()
            .iter()
            .filter_map(|r| r.json())
            .map(|v| {
                format!(
                    "{}: {}",
                    v["kind"].as_str().unwrap_or(""),
                    v["text"].as_str().unwrap_or("")
                )
            })
            .collect()
    };
    rig.wait_rows("j", 1).await;
    // Same error (the digits differ, the signature does not) three times: one alert.
    rig.step("j", 60, 2).await;
    let rows = rig.step("j", 60, 3).await;
    assert!(rows.iter().all(|r| r.status == Status::Failed), "{rows:#?}");
    assert_eq!(hook.request_count(), 1, "{:?}", texts(&hook));
    assert!(texts(&hook)[0].starts_with("alert: "), "{:?}", texts(&hook));
    // A different error is a new incident: one more alert.
    std::fs::write(&mode, "permission denied").unwrap();
    rig.step("j", 60, 4).await;
    rig.step("j", 60, 5).await;
    assert_eq!(hook.request_count(), 2, "{:?}", texts(&hook));
    // Success after an alerted incident: the result plus one recovery note.
    std::fs::write(&ok, "").unwrap();
    let rows = rig.step("j", 60, 6).await;
    assert_eq!(rows[5].status, Status::Succeeded);
    let t = texts(&hook);
    assert_eq!(t.len(), 4, "{t:?}");
    assert!(
        t.iter().filter(|x| x.starts_with("recovery: ")).count() == 1,
        "{t:?}"
    );
    rig.step("j", 60, 7).await;
    let t = texts(&hook);
    assert_eq!(t.len(), 5, "only the result, no second recovery: {t:?}");
    rig.stop().await;
}

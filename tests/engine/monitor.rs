//! Monitor outcomes through the engine with a fake LLM that counts requests: first
//! run → succeeded with the output in the prompt; unchanged → `no_change` and zero model requests;
//! changed → the request carries the unified diff; probe error → `failed`, and the next unchanged
//! output is still `no_change` (the baseline survived the error).
#![allow(clippy::unwrap_used)] // test code

use std::collections::HashMap;
use std::path::Path;

use crate::engine_support::*;
use cronsole::model::Status;
use cronsole::testkit::llm::{FakeLlm, Reply};

/// A job `watch` that asks agent `a` (the OpenAI fake at `base_url`, its key in `K`) to
/// `message` when the output of `cat SRC` changes.
fn watch_yaml(budget: &str, base_url: &str, src: &Path, message: &str) -> String {
    format!(
        "budget: {budget}
agents:
  a: {{ provider: openai, base_url: {base_url}, api_key_env: K, model: gpt-4o-mini, instructions: watch }}
jobs:
  - name: watch
    schedule: every 60s
    monitor: {{ command: \"cat {}\" }}
    agent: a
    message: {message}
    max_retries: 1
",
        src.display()
    )
}

/// The engine's environment: the agent's key in `K`.
fn key_env(key: &str) -> RigOpts {
    RigOpts {
        env: HashMap::from([("K".to_string(), key.to_string())]),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monitor_outcomes_drive_model_calls() {
    let key = "monitor-key";
    let fake = FakeLlm::openai(key, (0..5).map(|_| Reply::ok("noted", 5, 5)).collect())
        .await
        .unwrap();
    let src_dir = tmp("monitor-src");
    let src = src_dir.join("status.txt");
    std::fs::write(&src, "alpha\nbeta\ngamma\n").unwrap();
    let yaml = watch_yaml("null", &fake.base_url(), &src, "explain the change");
    let rig = Rig::start("monitor", &yaml, key_env(key)).await;

    // 1. First run: treated as changed; the output is in the prompt.
    let rows = rig.wait_rows("watch", 1).await;
    assert_eq!(rows[0].status, Status::Succeeded, "{rows:#?}");
    assert_eq!(fake.request_count(), 1);
    let body = fake.requests()[0].body_text();
    assert!(body.contains("alpha") && body.contains("gamma"), "{body}");
    assert!(body.contains("explain the change"));

    // 2. Unchanged: no_change, no model request.
    let rows = rig.step("watch", 60, 2).await;
    assert_eq!(rows[1].status, Status::NoChange, "{rows:#?}");
    assert_eq!(fake.request_count(), 1, "no_change must not call the model");
    assert_eq!(rows[1].input_tokens + rows[1].output_tokens, 0);
    assert!(!rows[1].delivered);

    // 3. Changed: the request carries the unified diff; the row keeps it.
    std::fs::write(&src, "alpha\nBETA\ngamma\n").unwrap();
    let rows = rig.step("watch", 60, 3).await;
    assert_eq!(rows[2].status, Status::Succeeded, "{rows:#?}");
    assert_eq!(fake.request_count(), 2);
    let req = fake.requests()[1].json().expect("json body");
    let prompt = req["messages"][1]["content"]
        .as_str()
        .unwrap_or("")
        .to_string();
    for needle in ["--- previous", "+++ current", "-beta", "+BETA", " alpha"] {
        assert!(
            prompt.contains(needle),
            "prompt lacks {needle:?}:\n{prompt}"
        );
    }
    let diff = rows[2].diff.clone().expect("diff stored in the row");
    assert!(diff.contains("+BETA"), "{diff}");
    // Monitor internals never reach the model.
    let hash = rig
        .store
        .job("watch")
        .unwrap()
        .unwrap()
        .rt
        .state
        .monitor
        .unwrap()
        .hash;
    assert!(!fake.requests().iter().any(|r| r.contains(&hash)));

    // 4. Probe error: failed, baseline untouched, no model call.
    std::fs::remove_file(&src).unwrap();
    let rows = rig.step("watch", 60, 4).await;
    assert_eq!(rows[3].status, Status::Failed, "{rows:#?}");
    assert_eq!(fake.request_count(), 2);

    // 5. Source back to the last good output: still no_change.
    std::fs::write(&src, "alpha\nBETA\ngamma\n").unwrap();
    let rows = rig.step("watch", 60, 5).await;
    assert_eq!(rows[4].status, Status::NoChange, "{rows:#?}");
    assert_eq!(fake.request_count(), 2);
    rig.stop().await;
}

/// A change whose action failed is not consumed: the watermark stays, the next tick sees the
/// same change again and asks the model again (with the same diff), and only a successful run
/// moves the baseline so the tick after it is `no_change`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_whose_action_failed_is_retried_on_the_next_tick() {
    let key = "monitor-retry-key";
    let fake = FakeLlm::openai(
        key,
        vec![
            Reply::ok("baseline noted", 5, 5),
            Reply::Status(500, "model down".into()),
            Reply::ok("explained", 5, 5),
        ],
    )
    .await
    .unwrap();
    let src_dir = tmp("monitor-retry-src");
    let src = src_dir.join("status.txt");
    std::fs::write(&src, "one\ntwo\n").unwrap();
    let yaml = watch_yaml("null", &fake.base_url(), &src, "explain");
    let rig = Rig::start("monitor-retry", &yaml, key_env(key)).await;
    assert_eq!(rig.wait_rows("watch", 1).await[0].status, Status::Succeeded);
    std::fs::write(&src, "one\nTWO\n").unwrap();
    let rows = rig.step("watch", 60, 2).await;
    assert_eq!(rows[1].status, Status::Failed, "{rows:#?}");
    assert!(rows[1].diff.as_deref().unwrap_or("").contains("+TWO"));
    let rows = rig.step("watch", 60, 3).await;
    assert_eq!(
        rows[2].status,
        Status::Succeeded,
        "the change is retried: {rows:#?}"
    );
    assert_eq!(fake.request_count(), 3);
    assert!(fake.requests()[2].contains("+TWO"), "same diff asked again");
    let rows = rig.step("watch", 60, 4).await;
    assert_eq!(rows[3].status, Status::NoChange, "{rows:#?}");
    assert_eq!(fake.request_count(), 3);
    rig.stop().await;
}

/// Regression: a ~15.5 KB notepad plus the monitor's 2 KiB preview must not go over one shared
/// 16 KiB state cap, drop the whole state (watermark included) and send an unchanged source to
/// the model on every tick. One model call, then `no_change`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_notepad_never_costs_the_monitor_its_watermark() {
    let key = "monitor-key-notepad";
    let big = "n".repeat(15_500);
    let reply = format!("first look done\n```notepad\nlog={big}\n```\n");
    let fake = FakeLlm::openai(key, (0..4).map(|_| Reply::ok(&reply, 5, 5)).collect())
        .await
        .unwrap();
    let src_dir = tmp("monitor-notepad-src");
    let src = src_dir.join("page.txt");
    std::fs::write(&src, "line of a long page\n".repeat(200)).unwrap();
    let yaml = watch_yaml("null", &fake.base_url(), &src, "explain the change");
    let rig = Rig::start("monitor-notepad", &yaml, key_env(key)).await;
    let rows = rig.wait_rows("watch", 1).await;
    assert_eq!(rows[0].status, Status::Succeeded, "{rows:#?}");
    assert!(
        rows[0].reason.is_none(),
        "nothing was rejected: {:?}",
        rows[0].reason
    );
    let st = rig.store.job("watch").unwrap().unwrap().rt.state;
    assert_eq!(st.notepad["log"].len(), 15_500);
    assert!(st.monitor.is_some(), "the watermark was kept");
    let mut n = 1;
    for _ in 0..3 {
        n += 1;
        let rows = rig.step("watch", 60, n).await;
        assert_eq!(rows[n - 1].status, Status::NoChange, "{rows:#?}");
    }
    assert_eq!(
        fake.request_count(),
        1,
        "an unchanged source never calls the model"
    );
    rig.stop().await;
}

/// A change the budget stopped after the gate is not consumed: once the budget allows, the next
/// tick still sees it and calls the model (the model spends only when it should, and a
/// change is never silently dropped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_stopped_by_the_budget_is_seen_again() {
    let key = "monitor-key-budget";
    let fake = FakeLlm::openai(key, vec![Reply::ok("explained", 5, 5)])
        .await
        .unwrap();
    let src_dir = tmp("monitor-budget-src");
    let src = src_dir.join("s.txt");
    std::fs::write(&src, "v1\n").unwrap();
    let yaml = |budget: &str| {
        let budget = format!("{{ max_cost_usd: {budget}, period: day }}");
        watch_yaml(&budget, &fake.base_url(), &src, "explain the change")
    };
    // gpt-4o-mini's worst case with a 4096-token bound is ~$0.0025: $0.001 refuses it, and the
    // reason says the limit is below one call, not that it was spent.
    let rig = Rig::start("monitor-budget", &yaml("0.001"), key_env(key)).await;
    let rows = rig.wait_rows("watch", 1).await;
    assert_eq!(rows[0].status, Status::Skipped, "{rows:#?}");
    assert!(
        rows[0]
            .reason
            .as_deref()
            .unwrap_or("")
            .starts_with("budget too small for one call"),
        "{rows:#?}"
    );
    assert!(
        rig.store
            .job("watch")
            .unwrap()
            .unwrap()
            .rt
            .state
            .monitor
            .is_none()
    );
    assert_eq!(fake.request_count(), 0);
    // The operator raises the budget; the unchanged source is still news to the model.
    let loaded = cronsole::config::load_str(&yaml("1.0"), &rig.dir.join("jobs.yaml")).unwrap();
    rig.store.apply(&loaded.file, rig.now()).unwrap();
    let rows = rig.step("watch", 60, 2).await;
    assert_eq!(rows[1].status, Status::Succeeded, "{rows:#?}");
    assert_eq!(fake.request_count(), 1);
    rig.stop().await;
}

/// A monitored output that shows a configured key value must
/// not keep it in the monitor's saved preview (stored in the journal, printed by `jobs --json`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_in_the_monitored_output_is_not_kept_in_the_saved_preview() {
    let key = format!("sk-MARKER-{}", uuid::Uuid::new_v4().simple());
    let yaml = format!(
        "budget: null
agents:
  a: {{ provider: openai, base_url: http://127.0.0.1:9/v1, api_key_env: K, model: gpt-4o-mini }}
jobs:
  - name: watch
    schedule: every 60s
    monitor: {{ command: \"echo v={key}\" }}
    command: echo changed
    max_retries: 1
"
    );
    let rig = Rig::start("monitor-key", &yaml, key_env(&key)).await;
    let rows = rig.wait_rows("watch", 1).await;
    assert_eq!(rows[0].status, Status::Succeeded, "{rows:#?}");
    let rec = rig.store.job("watch").unwrap().unwrap();
    let m = rec.rt.state.monitor.clone().expect("a watermark was kept");
    assert!(
        !m.preview.contains(&key),
        "preview keeps the key: {}",
        m.preview
    );
    assert!(
        m.preview.starts_with("v="),
        "the rest of the preview stays: {}",
        m.preview
    );
    let json = serde_json::to_string(&rec.rt.state).unwrap();
    assert!(!json.contains(&key), "{json}");
    rig.stop().await;
}

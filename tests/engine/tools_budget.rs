//! Money between a tool loop's turns under a tight budget, through the engine against the
//! scripted loopback model: a started run's next turn comes before a new run's first turn.
#![allow(clippy::unwrap_used)] // test code

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration as StdDuration;

use crate::engine_support::*;
use cronsole::engine::Command;
use cronsole::model::Status;
use cronsole::testkit::llm::{FakeCall, FakeLlm, Reply};
use cronsole::testkit::tools::{FixedTools, MemorySource};
use cronsole::testkit::wait::poll_until_async;
use serde_json::json;

const KEY: &str = "sk-TOOLS-0123456789abcdef";

/// Job `a` starts at once; job `b` (same agent) only when triggered. Each turn's worst case is
/// ~$0.0024 (1 000 output tokens at $2/M plus the prompt), a turn's reply costs $0.00003, and
/// the $0.004 day holds one started run's next turn or one new run's first turn beside it,
/// never both.
fn yaml(base: &str) -> String {
    format!(
        "budget: {{ max_cost_usd: 0.004, period: day }}
pricing:
  test-model: {{ input: 1.0, output: 2.0 }}
agents:
  a:
    provider: openai
    base_url: {base}
    api_key_env: TEST_KEY
    model: test-model
    max_tokens: 1000
    max_tool_output_bytes: 256
    instructions: use the tools
jobs:
  - name: a
    schedule: every 60s
    agent: a
    message: look
    max_retries: 1
  - name: b
    schedule: \"0 0 1 1 *\"
    agent: a
    message: look
    max_retries: 1
"
    )
}

/// While a started run's tool runs, a new run is triggered: its first turn would fit what is
/// left, but the started run keeps its next turn's worst case set aside, so the new run is
/// `skipped` (it spent nothing) and the started run's second turn is sent and answers.
/// Before, the new run took the money and the started run ended `failed` "budget reached after
/// turn 1" with its first turn paid for nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_started_runs_next_turn_comes_before_a_new_runs_first_turn() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let src = Arc::new(MemorySource::new("files").gated_tool("look", Arc::clone(&gate), "seen"));
    let fake = FakeLlm::openai(
        KEY,
        vec![
            Reply::tools(vec![FakeCall::new("files__look", json!({}))], 10, 10),
            Reply::ok("done", 10, 10),
        ],
    )
    .await
    .unwrap();
    let opts = RigOpts {
        env: HashMap::from([("TEST_KEY".to_string(), KEY.to_string())]),
        tools: Some(Arc::new(FixedTools(vec![Arc::clone(&src)]))),
        ..Default::default()
    };
    let rig = Rig::start("tools-budget-first", &yaml(&fake.base_url()), opts).await;
    // Wait for the engine's own progress: `a`'s turn 1 answered and its tool call running.
    assert!(
        poll_until_async(StdDuration::from_secs(20), || src.in_flight() == 1).await,
        "a's tool call never started: {:#?}",
        rig.rows("a")
    );
    rig.command(Command::Trigger("b".into())).await;
    let b = rig.wait_rows("b", 1).await.remove(0);
    assert_eq!(b.status, Status::Skipped, "{b:#?}");
    let why = b.reason.clone().unwrap_or_default();
    assert!(why.contains("budget reached: global $0.004/day"), "{why}");
    assert_eq!(b.cost_usd, 0.0);
    gate.add_permits(1);
    let a = rig.wait_rows("a", 1).await.remove(0);
    assert_eq!(a.status, Status::Succeeded, "{a:#?}");
    assert_eq!((a.turns, a.tool_calls), (Some(2), Some(1)));
    assert_eq!(fake.request_count(), 2, "b never called the model");
    let spend = rig.store.spend("a", rig.now()).unwrap();
    assert!(
        (spend.global_usd - a.cost_usd).abs() < 1e-12,
        "{spend:?} {a:#?}"
    );
    let rec = rig.store.job("a").unwrap().unwrap();
    assert!(
        rec.rt.counters.reservations.is_empty(),
        "the set-aside left with the row: {:?}",
        rec.rt.counters.reservations
    );
    rig.stop().await;
}

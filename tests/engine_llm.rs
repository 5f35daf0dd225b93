//! Engine-level agent runs against the in-process fake OpenAI and Anthropic servers (SPEC §8,
//! §10.2, §11): exact cost in the row and in `spend`, unpriced replies, retries, timeouts, 429
//! holds, the budget brake and its period reset, and the API key never reaching the store.
//!
//! Wall time is a `ManualClock` the tests move; tokio timers run in real time (the HTTP servers
//! are real loopback sockets), so each test stays well under a few seconds.

mod engine_support;

use std::collections::HashMap;

use cronsole::model::{Status, Trigger};
use cronsole::testkit::llm::{FakeLlm, Reply};
use engine_support::*;

const MODEL_PRICES: &str = "pricing:\n  test-model: { input: 1.0, output: 2.0 }\n  half-dollar: { input: 1000.0, output: 0.0 }\n";

fn agent_yaml(provider: &str, base: &str, extra_job: &str, budget: &str) -> String {
    format!(
        "{budget}{MODEL_PRICES}agents:
  a:
    provider: {provider}
    base_url: {base}
    api_key_env: TEST_KEY
    model: test-model
    instructions: be brief
jobs:
  - name: ask
    schedule: every 60s
    agent: a
    message: say hi
    max_retries: 3
{extra_job}"
    )
}

fn key_env(key: &str) -> RigOpts {
    RigOpts {
        env: HashMap::from([("TEST_KEY".to_string(), key.to_string())]),
        ..Default::default()
    }
}

fn unique_key() -> String {
    format!("sk-MARKER-{}", uuid::Uuid::new_v4().simple())
}

fn assert_key_absent(rig_dir: &std::path::Path, key: &str) {
    for f in files_under(rig_dir) {
        if f.file_name().is_some_and(|n| n == "jobs.yaml") {
            continue;
        }
        let bytes = std::fs::read(&f).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains(key), "API key leaked into {}", f.display());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_usage_is_priced_exactly_in_the_row_and_in_spend() {
    let key = unique_key();
    let fake = FakeLlm::openai(&key, vec![Reply::ok("hello", 1000, 500)])
        .await
        .unwrap();
    let rig = Rig::start(
        "openai-cost",
        &agent_yaml("openai", &fake.base_url(), "", "budget: null\n"),
        key_env(&key),
    )
    .await;
    let rows = rig.wait_rows("ask", 1).await;
    let r = &rows[0];
    assert_eq!(r.status, Status::Succeeded, "{r:#?}");
    assert_eq!((r.input_tokens, r.output_tokens), (1000, 500));
    // 1000 × $1/M + 500 × $2/M
    assert!((r.cost_usd - 0.002).abs() < 1e-12, "cost {}", r.cost_usd);
    assert!(!r.unpriced);
    assert_eq!(r.result.as_deref(), Some("hello"));
    assert_eq!(r.attempts, 1);
    let spend = rig.store.spend("ask", rig.now()).unwrap();
    assert!((spend.job_usd - 0.002).abs() < 1e-12, "{spend:?}");
    assert!((spend.global_usd - 0.002).abs() < 1e-12, "{spend:?}");
    // The key went in the Authorization header only, never in the body.
    let req = &fake.requests()[0];
    assert_eq!(
        req.header("authorization"),
        Some(format!("Bearer {key}").as_str())
    );
    assert!(!req.body_text().contains(&key));
    let dir = rig.stop().await;
    assert_key_absent(&dir, &key);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_usage_is_priced_exactly() {
    let key = unique_key();
    let fake = FakeLlm::anthropic(&key, vec![Reply::ok("salut", 2000, 250)])
        .await
        .unwrap();
    let rig = Rig::start(
        "anthropic-cost",
        &agent_yaml("anthropic", &fake.base_url(), "", "budget: null\n"),
        key_env(&key),
    )
    .await;
    let r = rig.wait_rows("ask", 1).await.remove(0);
    assert_eq!(r.status, Status::Succeeded, "{r:#?}");
    // 2000 × $1/M + 250 × $2/M = 0.0025
    assert!((r.cost_usd - 0.0025).abs() < 1e-12, "cost {}", r.cost_usd);
    assert_eq!(fake.requests()[0].header("x-api-key"), Some(key.as_str()));
    let spend = rig.store.spend("ask", rig.now()).unwrap();
    assert!((spend.global_usd - 0.0025).abs() < 1e-12, "{spend:?}");
    let dir = rig.stop().await;
    assert_key_absent(&dir, &key);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_without_usage_costs_zero_and_is_marked_unpriced() {
    let key = unique_key();
    let fake = FakeLlm::openai(&key, vec![Reply::ok_without_usage("hi")])
        .await
        .unwrap();
    let rig = Rig::start(
        "no-usage",
        &agent_yaml("openai", &fake.base_url(), "", "budget: null\n"),
        key_env(&key),
    )
    .await;
    let r = rig.wait_rows("ask", 1).await.remove(0);
    assert_eq!(r.status, Status::Succeeded, "{r:#?}");
    assert_eq!(r.cost_usd, 0.0);
    assert!(r.unpriced, "{r:#?}");
    assert!(
        r.reason
            .as_deref()
            .is_some_and(|s| s.contains("unpriced") || s.contains("usage")),
        "reason should say why spend is unknown: {r:#?}"
    );
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_500_then_success_takes_two_attempts() {
    let key = unique_key();
    let fake = FakeLlm::openai(
        &key,
        vec![
            Reply::Status(500, "upstream broke".into()),
            Reply::ok("second time lucky", 10, 10),
        ],
    )
    .await
    .unwrap();
    let rig = Rig::start(
        "retry-500",
        &agent_yaml("openai", &fake.base_url(), "", "budget: null\n"),
        key_env(&key),
    )
    .await;
    let r = rig.wait_rows("ask", 1).await.remove(0);
    assert_eq!(r.status, Status::Succeeded, "{r:#?}");
    assert_eq!(r.attempts, 2);
    assert_eq!(fake.request_count(), 2);
    assert_eq!(r.result.as_deref(), Some("second time lucky"));
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reply_fails_with_a_timeout() {
    let key = unique_key();
    let fake = FakeLlm::openai(
        &key,
        vec![Reply::Slow(
            std::time::Duration::from_secs(10),
            Box::new(Reply::ok("too late", 1, 1)),
        )],
    )
    .await
    .unwrap();
    let yaml = agent_yaml("openai", &fake.base_url(), "", "budget: null\n")
        .replace("max_retries: 3", "max_retries: 1\n    timeout_seconds: 0.3");
    let rig = Rig::start("slow", &yaml, key_env(&key)).await;
    let started = std::time::Instant::now();
    let r = rig.wait_rows("ask", 1).await.remove(0);
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    assert_eq!(r.status, Status::Failed, "{r:#?}");
    let err = r.error.clone().unwrap_or_default().to_lowercase();
    assert!(
        err.contains("timed out") || err.contains("timeout"),
        "{r:#?}"
    );
    assert_eq!(r.attempts, 1);
    assert_eq!(r.cost_usd, 0.0);
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_with_retry_after_holds_the_job_until_then_plus_60s() {
    let key = unique_key();
    let fake = FakeLlm::openai(
        &key,
        vec![
            Reply::RateLimited(Some("120".into())),
            Reply::ok("back", 1, 1),
        ],
    )
    .await
    .unwrap();
    let rig = Rig::start(
        "hold",
        &agent_yaml("openai", &fake.base_url(), "", "budget: null\n"),
        key_env(&key),
    )
    .await;
    let t0 = rig.now();
    let r = rig.wait_rows("ask", 1).await.remove(0);
    assert_eq!(r.status, Status::Failed, "{r:#?}");
    assert_eq!(r.attempts, 1, "a 429 hold is not retried");
    assert!(
        r.reason
            .as_deref()
            .is_some_and(|s| s.contains("held until")),
        "{r:#?}"
    );
    let hold = rig.store.job("ask").unwrap().unwrap().rt.hold_until;
    assert_eq!(hold, Some(t0 + chrono::Duration::seconds(180)));
    // Slots at +60 and +120 pass inside the hold: no fire, no request, no row.
    for _ in 0..2 {
        rig.advance(60);
        assert_eq!(rig.settle("ask").await.len(), 1);
    }
    rig.advance(59); // +179 s: still held
    assert_eq!(rig.settle("ask").await.len(), 1);
    assert_eq!(fake.request_count(), 1);
    let rows = rig.step("ask", 1, 2).await; // +180 s: the hold ends on a grid slot
    assert_eq!(rows[1].status, Status::Succeeded, "{rows:#?}");
    assert_eq!(rows[1].slot, Some(t0 + chrono::Duration::seconds(180)));
    assert_eq!(fake.request_count(), 2);
    let holds = rows
        .iter()
        .filter(|r| r.reason.as_deref().is_some_and(|s| s.contains("held")))
        .count();
    assert_eq!(holds, 1, "exactly one row says the job is held");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_budget_stops_model_calls_when_reached_and_resets_at_the_period_boundary() {
    let key = unique_key();
    // Each reply costs exactly $0.50 (500 input tokens at $1000/M); budget $1.00/day.
    let fake = FakeLlm::openai(&key, (0..5).map(|_| Reply::ok("spent", 500, 0)).collect())
        .await
        .unwrap();
    let yaml = agent_yaml(
        "openai",
        &fake.base_url(),
        "",
        "budget: { max_cost_usd: 1.00, period: day }\n",
    )
    .replace("model: test-model", "model: half-dollar");
    let rig = Rig::start(
        "budget",
        &yaml,
        RigOpts {
            start: t("2026-11-29T23:56:00Z"),
            ..key_env(&key)
        },
    )
    .await;
    let rows = rig.wait_rows("ask", 1).await;
    assert!((rows[0].cost_usd - 0.5).abs() < 1e-12, "{rows:#?}");
    let rows = rig.step("ask", 60, 2).await; // 23:57, spend 0.50 → runs, spend 1.00
    assert_eq!(rows[1].status, Status::Succeeded);
    let rows = rig.step("ask", 60, 3).await; // 23:58, spend 1.00 = limit → skipped
    let rows = {
        let _ = rows;
        rig.step("ask", 60, 4).await // 23:59 → skipped again
    };
    assert_eq!(
        statuses(&rows),
        vec![
            Status::Succeeded,
            Status::Succeeded,
            Status::Skipped,
            Status::Skipped
        ]
    );
    for r in &rows[2..] {
        let reason = r.reason.clone().unwrap_or_default();
        assert!(
            reason.contains("budget"),
            "skipped row must name the budget: {r:#?}"
        );
        assert_eq!(r.cost_usd, 0.0);
    }
    assert_eq!(
        fake.request_count(),
        2,
        "no request after the limit was reached"
    );
    // 00:00 UTC: a new day, a new budget.
    let rows = rig.step("ask", 60, 5).await;
    assert_eq!(rows[4].slot, Some(t("2026-11-30T00:00:00Z")));
    assert_eq!(rows[4].status, Status::Succeeded, "{rows:#?}");
    assert_eq!(fake.request_count(), 3);
    let spend = rig.store.spend("ask", rig.now()).unwrap();
    assert!((spend.global_usd - 0.5).abs() < 1e-12, "{spend:?}");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_job_budget_skips_that_job_only() {
    let key = unique_key();
    let fake = FakeLlm::openai(&key, (0..5).map(|_| Reply::ok("x", 500, 0)).collect())
        .await
        .unwrap();
    let yaml = agent_yaml(
        "openai",
        &fake.base_url(),
        "    max_cost_usd: 0.5\n",
        "budget: null\n",
    )
    .replace("model: test-model", "model: half-dollar");
    let rig = Rig::start("job-budget", &yaml, key_env(&key)).await;
    rig.wait_rows("ask", 1).await;
    let rows = rig.step("ask", 60, 2).await;
    assert_eq!(rows[1].status, Status::Skipped, "{rows:#?}");
    assert!(rows[1].reason.as_deref().unwrap_or("").contains("budget"));
    assert_eq!(fake.request_count(), 1);
    assert_eq!(rows[1].trigger, Trigger::Schedule);
    rig.stop().await;
}

/// SPEC §11: the budget is checked before every model call, retries included. `ask` fails its
/// first attempt slowly; meanwhile `big` (another agent, another server) spends the whole daily
/// budget; `ask`'s retry is then skipped with the budget named, and its server sees one request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_the_budget_ran_out_is_skipped_without_a_call() {
    let key = unique_key();
    let slow_fail = FakeLlm::openai(
        &key,
        vec![
            Reply::Slow(
                std::time::Duration::from_millis(600),
                Box::new(Reply::Status(500, "busy".into())),
            ),
            Reply::ok("should not be asked", 1, 1),
        ],
    )
    .await
    .unwrap();
    let spender = FakeLlm::openai(&key, vec![Reply::ok("spent it all", 1000, 0)])
        .await
        .unwrap();
    let yaml = format!(
        "budget: {{ max_cost_usd: 1.00, period: day }}
{MODEL_PRICES}agents:
  a:
    base_url: {}
    api_key_env: TEST_KEY
    model: test-model
  b:
    base_url: {}
    api_key_env: TEST_KEY
    model: half-dollar
jobs:
  - name: ask
    schedule: every 1h
    agent: a
    message: say hi
    max_retries: 3
  - name: big
    schedule: every 1h
    agent: b
    message: spend
",
        slow_fail.base_url(),
        spender.base_url()
    );
    let rig = Rig::start("budget-retry", &yaml, key_env(&key)).await;
    let big = rig.wait_rows("big", 1).await.remove(0);
    assert!((big.cost_usd - 1.0).abs() < 1e-12, "{big:#?}");
    let ask = rig.wait_rows("ask", 1).await.remove(0);
    assert_eq!(ask.status, Status::Skipped, "{ask:#?}");
    assert!(
        ask.reason.as_deref().unwrap_or("").contains("budget"),
        "{ask:#?}"
    );
    assert_eq!(ask.attempts, 1);
    assert_eq!(
        slow_fail.request_count(),
        1,
        "no retry after the budget ran out"
    );
    rig.stop().await;
}

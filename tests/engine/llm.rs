//! Engine-level agent runs against the in-process fake OpenAI and Anthropic servers: exact cost in
//! the row and in `spend`, unpriced replies, retries, timeouts, 429 holds, the budget brake and its
//! period reset, and the API key never reaching the store.
//!
//! Wall time is a `ManualClock` the tests move; tokio timers run in real time (the HTTP servers
//! are real loopback sockets), so each test stays well under a few seconds.
#![allow(clippy::unwrap_used)] // test code

use crate::engine_support;

use std::collections::HashMap;

use crate::engine_support::*;
use cronsole::model::{Status, Trigger};
use cronsole::testkit::internals::store::stats;
use cronsole::testkit::llm::{FakeLlm, Reply};

const MODEL_PRICES: &str = "pricing:\n  test-model: { input: 1.0, output: 2.0 }\n  half-dollar: { input: 0.0, output: 1000.0 }\n";

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

const BRIEF: &str = "instructions: be brief";

/// The agent's instructions line with an output bound under it (`agent_yaml`'s agent).
fn max_tokens(n: u32) -> String {
    format!("{BRIEF}\n    max_tokens: {n}")
}

/// An engine running the job `ask` of [`agent_yaml`] on `fake` (OpenAI), under `budget`, each
/// request asking for at most `tokens` output tokens.
async fn capped_rig(tag: &str, fake: &FakeLlm, key: &str, budget: &str, tokens: u32) -> Rig {
    let yaml =
        agent_yaml("openai", &fake.base_url(), "", budget).replace(BRIEF, &max_tokens(tokens));
    Rig::start(tag, &yaml, key_env(key)).await
}

/// A fresh key and the fake OpenAI server that takes it, answering `replies` in order.
async fn openai(replies: Vec<Reply>) -> (String, FakeLlm) {
    let key = unique_key();
    let fake = FakeLlm::openai(&key, replies).await.unwrap();
    (key, fake)
}

/// Every reservation settled into the counters with its row: nothing left in flight.
fn assert_no_reservation_left<S: cronsole::store::Store + ?Sized>(store: &S) {
    for j in store.jobs().unwrap() {
        assert!(j.rt.counters.reservations.is_empty(), "{:?}", j.rt.counters);
    }
}

/// The row's cost is counted once: `spend` holds it and no reservation holds it too.
fn assert_booked_once(rig: &Rig, cost_usd: f64) {
    let spend = rig.store.spend("ask", rig.now()).unwrap();
    assert!((spend.global_usd - cost_usd).abs() < 1e-12, "{spend:?}");
    assert_no_reservation_left(&*rig.store);
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
    let (key, fake) = openai(vec![Reply::ok("hello", 1000, 500)]).await;
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
    let (key, fake) = openai(vec![Reply::ok_without_usage("hi")]).await;
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
    let (key, fake) = openai(vec![
        Reply::Status(500, "upstream broke".into()),
        Reply::ok("second time lucky", 10, 10),
    ])
    .await;
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
    // Each attempt is on the row: the failed one with its error and no cost, the good one with
    // the reply's tokens and cost.
    use cronsole::model::AttemptOutcome;
    let log = &r.attempt_log;
    assert_eq!(log.len(), 2, "{log:#?}");
    assert_eq!(log[0].outcome, AttemptOutcome::Failed);
    assert!(
        log[0].error.as_deref().unwrap_or("").contains("500"),
        "{log:#?}"
    );
    assert_eq!((log[0].input_tokens, log[0].cost_usd), (0, 0.0));
    assert_eq!(log[1].outcome, AttemptOutcome::Succeeded);
    assert_eq!(log[1].error, None);
    assert_eq!((log[1].input_tokens, log[1].output_tokens), (10, 10));
    assert_eq!(log[1].cost_usd, r.cost_usd);
    assert!(log[0].finished_at <= log[1].started_at);
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reply_fails_with_a_timeout() {
    let (key, fake) = openai(vec![Reply::Slow(
        std::time::Duration::from_secs(10),
        Box::new(Reply::ok("too late", 1, 1)),
    )])
    .await;
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
    let (key, fake) = openai(vec![
        Reply::RateLimited(Some("120".into())),
        Reply::ok("back", 1, 1),
    ])
    .await;
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
    // Each reply costs exactly $0.50 (500 output tokens at $1000/M, the `max_tokens` bound, so
    // also the worst case each call reserves); budget $1.00/day.
    let fake = FakeLlm::openai(&key, (0..5).map(|_| Reply::ok("spent", 0, 500)).collect())
        .await
        .unwrap();
    let yaml = agent_yaml(
        "openai",
        &fake.base_url(),
        "",
        "budget: { max_cost_usd: 1.00, period: day }\n",
    )
    .replace("model: test-model", "model: half-dollar")
    .replace(BRIEF, &max_tokens(500));
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

/// A server that reports more output tokens than the request
/// allowed (1 000 000 for `max_tokens: 100`) cannot have billed that; the row and the budget
/// record the call's reservation (its worst case), so recorded spend never passes the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_beyond_the_requests_bound_is_charged_at_the_reservation() {
    let key = unique_key();
    // Claimed: 10 in + 1 000 000 out at $1/$2 per M = $2.00 against a $1.00 budget.
    let fake = FakeLlm::openai(&key, vec![Reply::ok("hi", 10, 1_000_000)])
        .await
        .unwrap();
    let rig = capped_rig(
        "lying-usage",
        &fake,
        &key,
        "budget: { max_cost_usd: 1.00, period: day }\n",
        100,
    )
    .await;
    let rows = rig.wait_rows("ask", 1).await;
    let r = &rows[0];
    assert_eq!(r.status, Status::Succeeded, "{r:#?}");
    assert!(
        r.cost_usd > 0.0 && r.cost_usd < 0.001,
        "charged at the worst case: {r:#?}"
    );
    let reason = r.reason.clone().unwrap_or_default();
    assert!(reason.contains("more than the request allowed"), "{r:#?}");
    let spend = rig.store.spend("ask", rig.now()).unwrap();
    assert!(spend.global_usd <= 1.0, "{spend:?}");
    assert!((spend.global_usd - r.cost_usd).abs() < 1e-12, "{spend:?}");
    // The worst case is booked once: the reservation settles to the row's figure and leaves
    // with the row; kept as "spent" too, it would count twice and stop the budget at two
    // thirds of what was really booked.
    assert_no_reservation_left(&*rig.store);
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_job_budget_skips_that_job_only() {
    let (key, fake) = openai((0..5).map(|_| Reply::ok("x", 0, 500)).collect()).await;
    let yaml = agent_yaml(
        "openai",
        &fake.base_url(),
        "    max_cost_usd: 0.5\n",
        "budget: null\n",
    )
    .replace("model: test-model", "model: half-dollar")
    .replace(BRIEF, &max_tokens(500));
    let rig = Rig::start("job-budget", &yaml, key_env(&key)).await;
    rig.wait_rows("ask", 1).await;
    let rows = rig.step("ask", 60, 2).await;
    assert_eq!(rows[1].status, Status::Skipped, "{rows:#?}");
    assert!(rows[1].reason.as_deref().unwrap_or("").contains("budget"));
    assert_eq!(fake.request_count(), 1);
    assert_eq!(rows[1].trigger, Trigger::Schedule);
    rig.stop().await;
}

/// The budget is checked before every model call, retries included (a retry costs as much as
/// a first call). `ask` fails its
/// first attempt slowly (an error reply: it cost nothing, its reservation is released);
/// meanwhile the operator lowers the daily budget below the call's worst case; `ask`'s retry is
/// then skipped with the budget named, and its server sees one request.
///
/// (Booked costs are capped at the reservation, so another job replying with usage far above
/// its reservation cannot spend the whole budget: two calls that fit together cannot leave a
/// retry without room, only a lowered limit can.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_the_budget_ran_out_is_skipped_without_a_call() {
    let key = unique_key();
    let slow_fail = FakeLlm::openai(
        &key,
        vec![
            Reply::Slow(
                std::time::Duration::from_millis(800),
                Box::new(Reply::Status(500, "busy".into())),
            ),
            Reply::ok("should not be asked", 1, 1),
        ],
    )
    .await
    .unwrap();
    let yaml = agent_yaml(
        "openai",
        &slow_fail.base_url(),
        "",
        "budget: { max_cost_usd: 1.00, period: day }\n",
    );
    let rig = Rig::start("budget-retry", &yaml, key_env(&key)).await;
    wait_until_async(
        "the first attempt",
        std::time::Duration::from_secs(10),
        || slow_fail.request_count() > 0,
    )
    .await;
    let lowered = yaml.replace("max_cost_usd: 1.00", "max_cost_usd: 0.001");
    let path = rig.dir.join("jobs.yaml");
    let loaded = cronsole::config::load_str(&lowered, &path).unwrap_or_else(|e| panic!("{e}"));
    rig.store.apply(&loaded.file, rig.now()).unwrap();
    let ask = rig.wait_rows("ask", 1).await.remove(0);
    assert_eq!(ask.status, Status::Skipped, "{ask:#?}");
    assert!(
        ask.reason
            .as_deref()
            .unwrap_or("")
            .starts_with("budget too small for one call: "),
        "{ask:#?}"
    );
    assert_eq!(
        ask.cost_usd, 0.0,
        "the failed attempt was released: {ask:#?}"
    );
    assert_eq!(ask.attempts, 1);
    assert_eq!(
        slow_fail.request_count(),
        1,
        "no retry after the budget ran out"
    );
    rig.stop().await;
}

/// The budget is a hard limit even for simultaneous calls (six at once against $0.001 must not
/// spend $0.0027). Three
/// owners, each running up to four calls at once, twelve agent jobs due together, every call's
/// worst case $0.001 and a $0.005 daily budget: at most five calls are made, and the recorded
/// spend never passes the limit.
#[allow(clippy::too_many_lines)] // a test scenario reads best in one piece (see CONTRIBUTING.md)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_owners_by_m_concurrent_calls_never_spend_past_the_limit() {
    use std::sync::Arc;
    use std::time::Duration as StdDuration;

    use cronsole::clock::{Clock, ManualClock};
    use cronsole::engine::{self, EngineConfig};

    use cronsole::store::file::FileStore;
    use cronsole::store::{HistoryQuery, Store};

    const OWNERS: usize = 3;
    const PER_OWNER: usize = 4;
    const JOBS: usize = OWNERS * PER_OWNER;
    let key = unique_key();
    // Every reply costs exactly the worst case: 1 output token at $1000/M, input free.
    let fake = FakeLlm::openai(
        &key,
        (0..JOBS)
            .map(|_| {
                Reply::Slow(
                    StdDuration::from_millis(300),
                    Box::new(Reply::ok("x", 10, 1)),
                )
            })
            .collect(),
    )
    .await
    .unwrap();
    let mut yaml = format!(
        "budget: {{ max_cost_usd: 0.005, period: day }}
pricing:
  metered: {{ input: 0.0, output: 1000.0 }}
agents:
  a:
    base_url: {}
    api_key_env: TEST_KEY
    model: metered
    max_tokens: 1
jobs:
",
        fake.base_url()
    );
    for i in 0..JOBS {
        yaml.push_str(&format!(
            "  - {{ name: j{i}, schedule: every 1h, agent: a, message: go, max_retries: 1 }}\n"
        ));
    }
    let dir = tmp("budget-owners");
    let store_dir = dir.join("store");
    let loaded = cronsole::config::load_str(&yaml, &dir.join("jobs.yaml")).unwrap();
    let start = t("2026-11-30T12:00:00Z");
    // Stored an hour before: every job's first slot is `start`.
    FileStore::open(&store_dir)
        .unwrap()
        .apply(
            &loaded.file,
            engine_support::stored_for(&loaded.file.jobs, start),
        )
        .unwrap();
    let clock = ManualClock::new(start);
    let mut handles = Vec::new();
    let mut stores: Vec<Arc<dyn Store>> = Vec::new();
    for o in 0..OWNERS {
        let store: Arc<dyn Store> = Arc::new(FileStore::open(&store_dir).unwrap());
        let mut cfg = EngineConfig::new(format!("owner-{o}"));
        cfg.max_concurrent = PER_OWNER;
        cfg.change_poll = StdDuration::from_millis(20);
        cfg.shutdown_grace = StdDuration::from_secs(5);
        let k = key.clone();
        let deps = cronsole::testkit::engine::run_deps(
            Arc::new(move |v: &str| (v == "TEST_KEY").then(|| k.clone())),
            tiny_backoff(),
        );
        let c: Arc<dyn Clock> = Arc::new(clock.clone());
        handles.push(engine::spawn(cfg, Arc::clone(&store), c, deps).unwrap());
        stores.push(store);
    }
    // Wait (bounded) for one row per job.
    let history = || {
        stores[0]
            .history(&HistoryQuery {
                limit: 1000,
                ..Default::default()
            })
            .unwrap()
    };
    if !poll_until_async(StdDuration::from_secs(30), || history().len() >= JOBS).await {
        panic!("timed out: {:#?}", history());
    }
    let rows = history();
    for h in handles {
        h.shutdown.cancel();
        tokio::time::timeout(StdDuration::from_secs(20), h.join)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
    let recorded: f64 = rows.iter().map(|r| r.cost_usd).sum();
    let made = rows
        .iter()
        .filter(|r| r.status == Status::Succeeded)
        .count();
    let stopped: Vec<_> = rows
        .iter()
        .filter(|r| r.status == Status::Skipped)
        .collect();
    assert!(recorded <= 0.005 + 1e-12, "spent {recorded}: {rows:#?}");
    assert_eq!(made, 5, "exactly the calls that fit: {rows:#?}");
    assert_eq!(
        fake.request_count(),
        5,
        "a call that does not fit is not made"
    );
    assert_eq!(stopped.len(), JOBS - 5);
    for r in stopped {
        let reason = r.reason.as_deref().unwrap_or("");
        assert!(
            reason.starts_with("budget reached: ")
                && reason.contains("global")
                && reason.contains("$0.005/day"),
            "{r:#?}"
        );
    }
    let spend = stores[0].spend("j0", clock.now()).unwrap();
    assert!(spend.global_usd <= 0.005 + 1e-12, "{spend:?}");
    // Settled reservations went into the counters with their rows: nothing left in flight.
    assert_no_reservation_left(&*stores[0]);
    // Every request under a budget carried its output bound.
    for r in fake.requests() {
        assert_eq!(r.json().unwrap()["max_tokens"], 1, "{}", r.body_text());
    }
}

/// Under a budget, a model the price table does not know is never called (its cost could not
/// be counted); the error
/// names the model and the `pricing:` line to add.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unpriced_model_under_a_budget_fails_before_any_request() {
    let (key, fake) = openai(vec![Reply::ok("x", 1, 1)]).await;
    let yaml = agent_yaml(
        "openai",
        &fake.base_url(),
        "",
        "budget: { max_cost_usd: 1.00, period: day }\n",
    )
    .replace("model: test-model", "model: mystery-9b");
    let rig = Rig::start("unpriced-budget", &yaml, key_env(&key)).await;
    let r = rig.wait_rows("ask", 1).await.remove(0);
    assert_eq!(r.status, Status::Failed, "{r:#?}");
    let e = r.error.clone().unwrap_or_default();
    assert!(e.contains("model 'mystery-9b'"), "{e}");
    assert!(
        e.contains(
            "pricing:\n  mystery-9b: { input: INPUT_USD_PER_1M, output: OUTPUT_USD_PER_1M }"
        ),
        "{e}"
    );
    assert_eq!(r.attempts, 0, "no attempt was made");
    assert_eq!(fake.request_count(), 0);
    rig.stop().await;
}

/// When a budget stops a call, the job's sinks get one alert per period (not one per slot), and the
/// job state records the stop (the console header reads it from the snapshot).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_stop_alerts_the_sinks_once_per_period() {
    let (key, fake) = openai(vec![]).await;
    let sink_dir = tmp("budget-alert-sink");
    let sink = sink_dir.join("out.jsonl");
    let yaml = agent_yaml(
        "openai",
        &fake.base_url(),
        "    deliver: [f]\n",
        &format!(
            "budget: {{ max_cost_usd: 0.001, period: day }}\ndelivery:\n  f: {{ file: {} }}\n",
            sink.display()
        ),
    )
    .replace("model: test-model", "model: half-dollar");
    // half-dollar's worst case for this prompt is far over $0.001: every call is refused.
    let rig = Rig::start("budget-alert", &yaml, key_env(&key)).await;
    rig.wait_rows("ask", 1).await;
    let rows = rig.step("ask", 60, 2).await;
    let rows = {
        let _ = rows;
        rig.step("ask", 60, 3).await
    };
    assert_eq!(
        statuses(&rows),
        vec![Status::Skipped, Status::Skipped, Status::Skipped]
    );
    assert!(
        rows[0]
            .reason
            .as_deref()
            .unwrap_or("")
            .starts_with("budget too small for one call: "),
        "{rows:#?}"
    );
    assert_eq!(fake.request_count(), 0);
    let text = std::fs::read_to_string(&sink).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "one alert per period: {text}");
    assert_eq!(lines[0]["kind"], "alert");
    assert!(
        lines[0]["text"]
            .as_str()
            .unwrap()
            .starts_with("budget too small for one call: "),
        "{text}"
    );
    let stop = rig
        .store
        .job("ask")
        .unwrap()
        .unwrap()
        .rt
        .state
        .budget_stop
        .expect("the stop is in the job state");
    assert!(stop.alerted);
    let snap =
        cronsole::snapshot::Snapshot::load(rig.store.as_ref(), rig.now(), "o", rig.now(), false)
            .unwrap();
    assert_eq!(snap.budget_stops().len(), 1);
    rig.stop().await;
}

/// An API key echoed in a *successful* reply is redacted from the result, the notepad,
/// history, the journal and the sinks, before any truncation; so is one in the model the
/// reply names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_echoed_in_a_successful_reply_is_redacted_everywhere() {
    let key = unique_key();
    let reply = format!("your key is {key}, keep it safe\n```notepad\nk={key}\n```");
    let named = Reply::AsModel(format!("m-{key}"), Box::new(Reply::ok(&reply, 5, 5)));
    let fake = FakeLlm::openai(&key, vec![named]).await.unwrap();
    let rig_sink = tmp("redact-sink");
    let sink = rig_sink.join("out.jsonl");
    let yaml = agent_yaml(
        "openai",
        &fake.base_url(),
        "    deliver: [f]\n",
        &format!(
            "budget: null\ndelivery:\n  f: {{ file: {} }}\n",
            sink.display()
        ),
    );
    let rig = Rig::start("redact", &yaml, key_env(&key)).await;
    let r = rig.wait_rows("ask", 1).await.remove(0);
    assert_eq!(r.status, Status::Succeeded, "{r:#?}");
    assert_eq!(
        r.result.as_deref(),
        Some("your key is [redacted], keep it safe")
    );
    assert_eq!(r.model.as_deref(), Some("m-[redacted]"));
    let st = rig.store.job("ask").unwrap().unwrap().rt.state;
    assert_eq!(st.notepad["k"], "[redacted]");
    let out = std::fs::read_to_string(&sink).unwrap();
    assert!(!out.contains(&key) && out.contains("[redacted]"), "{out}");
    let dir = rig.stop().await;
    assert_key_absent(&dir, &key);
}

/// A reply whose usage prices above the call's reservation (100 000 prompt tokens for a short
/// prompt) must not be booked at face value, nor a reply naming a pricier known model (`o1-pro`
/// for a request of `test-model`) priced at that model: either would pass the budget by any
/// amount. The requested model is priced and the booked cost never
/// exceeds the reservation; the row says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_is_booked_at_most_at_its_reservation_and_at_the_requested_price() {
    let (key, fake) = openai(vec![
        Reply::ok("hi", 100_000, 10),
        Reply::AsModel("o1-pro".into(), Box::new(Reply::ok("hi", 10, 10))),
    ])
    .await;
    let rig = capped_rig(
        "over-reservation",
        &fake,
        &key,
        "budget: { max_cost_usd: 0.02, period: day }\n",
        100,
    )
    .await;
    let rows = rig.wait_rows("ask", 1).await;
    let r = &rows[0];
    assert_eq!(r.status, Status::Succeeded, "{r:#?}");
    // Face value: 100 000 × $1/M = $0.10, five times the budget. The reservation is the
    // prompt's bytes + 64 at $1/M plus 100 output tokens at $2/M: well under $0.001.
    assert!(
        r.cost_usd > 0.0 && r.cost_usd < 0.001,
        "booked at the reservation: {r:#?}"
    );
    let reason = r.reason.clone().unwrap_or_default();
    assert!(
        reason.contains("usage above the worst case")
            && reason.contains("booked at the reservation"),
        "{r:#?}"
    );
    let spend = rig.store.spend("ask", rig.now()).unwrap();
    assert!((spend.global_usd - r.cost_usd).abs() < 1e-12, "{spend:?}");
    let first = r.cost_usd;

    let rows = rig.step("ask", 60, 2).await;
    let r = &rows[1];
    assert_eq!(r.status, Status::Succeeded, "{r:#?}");
    assert_eq!(
        r.model.as_deref(),
        Some("o1-pro"),
        "the reply's model is recorded"
    );
    // At o1-pro ($150/$600 per M) this is $0.0075; at the requested model, $0.00003.
    assert!((r.cost_usd - 0.00003).abs() < 1e-12, "{r:#?}");
    assert!(
        r.reason
            .as_deref()
            .unwrap_or("")
            .contains("priced as the requested 'test-model'"),
        "{r:#?}"
    );
    let spend = rig.store.spend("ask", rig.now()).unwrap();
    assert!(
        (spend.global_usd - first - 0.00003).abs() < 1e-12,
        "{spend:?}"
    );
    assert_no_reservation_left(&*rig.store);
    rig.stop().await;
}

/// A first attempt that really called the model and whose outcome is unknown (a 2xx reply we
/// could not read), then a retry the budget refuses, must not read `skipped` at $0 while its
/// worst case counts as spent. It is `failed` (the action ran and
/// failed, so incidents see it), and the row carries the amount kept as spent, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_stop_after_an_unknown_outcome_attempt_is_failed_with_its_cost() {
    let (key, fake) = openai(vec![
        Reply::Malformed,
        Reply::ok("should not be asked", 1, 1),
    ])
    .await;
    // Worst case ≈ $0.2001 (100 000 output tokens at $2/M dominate): one fits $0.30, two not.
    let rig = capped_rig(
        "unknown-then-budget",
        &fake,
        &key,
        "budget: { max_cost_usd: 0.30, period: day }\n",
        100_000,
    )
    .await;
    let rows = rig.wait_rows("ask", 1).await;
    let r = &rows[0];
    assert_eq!(r.status, Status::Failed, "{r:#?}");
    assert_eq!(r.attempts, 1, "{r:#?}");
    assert!(
        r.cost_usd > 0.2 && r.cost_usd < 0.21,
        "the worst case kept as spent is on the row: {r:#?}"
    );
    let reason = r.reason.clone().unwrap_or_default();
    assert!(
        reason.starts_with("budget reached") && reason.contains("booked as spent"),
        "{r:#?}"
    );
    assert!(r.error.is_some(), "the attempt's error stays: {r:#?}");
    assert_eq!(fake.request_count(), 1, "the retry was not sent");
    // Counted once: in the counters with the row, no reservation left holding it too.
    assert_booked_once(&rig, r.cost_usd);
    rig.stop().await;
}

/// Money 2: every attempt ends with an unknown outcome (a 2xx reply we could not read) and the
/// retries run out. The row recorded $0 while the three worst cases stayed counted as spent in
/// the budget until the period ended. The row books them (once), and its reason says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_that_run_out_on_unknown_outcomes_book_their_reservations_on_the_row() {
    let (key, fake) = openai(vec![Reply::Malformed, Reply::Malformed, Reply::Malformed]).await;
    let rig = capped_rig(
        "unknown-x3",
        &fake,
        &key,
        "budget: { max_cost_usd: 10.0, period: day }\n",
        100_000,
    )
    .await;
    let rows = rig.wait_rows("ask", 1).await;
    let r = &rows[0];
    assert_eq!(r.status, Status::Failed, "{r:#?}");
    assert_eq!(r.attempts, 3, "{r:#?}");
    assert_eq!(fake.request_count(), 3);
    // Each worst case ≈ $0.2001 (100 000 output tokens at $2/M dominate).
    assert!(
        r.cost_usd > 0.6 && r.cost_usd < 0.61,
        "the three worst cases kept as spent are on the row: {r:#?}"
    );
    let reason = r.reason.clone().unwrap_or_default();
    assert!(
        reason.contains("3 attempts' outcomes are unknown") && reason.contains("booked as spent"),
        "{r:#?}"
    );
    assert!(r.error.is_some(), "the last attempt's error stays: {r:#?}");
    // Counted once: in the counters with the row, no reservation left holding it too.
    let spend = rig.store.spend("ask", rig.now()).unwrap();
    assert!((spend.global_usd - r.cost_usd).abs() < 1e-12, "{spend:?}");
    let (jobs, settings) = (rig.store.jobs().unwrap(), rig.store.settings().unwrap());
    let stats = stats::compute(&jobs, &settings, rig.now());
    let line = stats.jobs.iter().find(|l| l.job == "ask").unwrap();
    assert!((line.total_cost_usd - r.cost_usd).abs() < 5e-5, "{line:?}");
    assert_no_reservation_left(&*rig.store);
    rig.stop().await;
}

/// Money 2: an unknown-outcome attempt followed by a successful retry. The row carried only the
/// reply's cost while the first attempt's worst case stayed spent in the budget. The row's cost
/// includes it now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_outcome_attempt_before_a_success_is_in_the_rows_cost() {
    let (key, fake) = openai(vec![Reply::Malformed, Reply::ok("hi", 10, 10)]).await;
    let rig = capped_rig(
        "unknown-then-ok",
        &fake,
        &key,
        "budget: { max_cost_usd: 10.0, period: day }\n",
        100_000,
    )
    .await;
    let rows = rig.wait_rows("ask", 1).await;
    let r = &rows[0];
    assert_eq!(r.status, Status::Succeeded, "{r:#?}");
    assert_eq!(r.attempts, 2, "{r:#?}");
    // The reply: 10 × $1/M + 10 × $2/M = $0.00003; the first attempt's worst case ≈ $0.2001.
    assert!(
        r.cost_usd > 0.2 + 0.00003 && r.cost_usd < 0.21,
        "the unknown attempt's worst case is on the row: {r:#?}"
    );
    assert_eq!((r.input_tokens, r.output_tokens), (10, 10), "{r:#?}");
    let reason = r.reason.clone().unwrap_or_default();
    assert!(
        reason.contains("1 attempt's outcome is unknown") && reason.contains("booked as spent"),
        "{r:#?}"
    );
    assert_booked_once(&rig, r.cost_usd);
    rig.stop().await;
}

/// Money 2: under a budget, a reply without usage was booked $0 (unpriced) on its row while its
/// reservation stayed spent at the worst case until the period ended. The row books the
/// reservation, counted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_without_usage_under_a_budget_is_booked_at_its_reservation() {
    let (key, fake) = openai(vec![Reply::ok_without_usage("hi")]).await;
    let rig = capped_rig(
        "no-usage-budget",
        &fake,
        &key,
        "budget: { max_cost_usd: 10.0, period: day }\n",
        100_000,
    )
    .await;
    let r = rig.wait_rows("ask", 1).await.remove(0);
    assert_eq!(r.status, Status::Succeeded, "{r:#?}");
    assert!(r.cost_usd > 0.2 && r.cost_usd < 0.21, "{r:#?}");
    assert!(!r.unpriced, "{r:#?}");
    assert!(
        r.reason
            .as_deref()
            .is_some_and(|s| s.starts_with("no usage in reply: booked at the reservation")),
        "{r:#?}"
    );
    assert_booked_once(&rig, r.cost_usd);
    rig.stop().await;
}

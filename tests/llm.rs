//! The agent action against in-process fake OpenAI/Anthropic servers:
//! exact tokens and cost, missing usage, retries on 5xx, per-attempt timeouts, 429 holds,
//! missing keys, and that the API key never leaks into error text.
#![allow(clippy::unwrap_used)] // test code

use std::time::Duration;

use chrono::{DateTime, Utc};
use cronsole::model::{AgentDef, Provider};
use cronsole::testkit::http::{Response, TestServer};
use cronsole::testkit::internals::action::llm::{self, HttpOptions, LlmCall, LlmError, LlmReply};
use cronsole::testkit::internals::action::{BackoffConfig, retry_with_backoff};
use cronsole::testkit::internals::cost::{PriceTable, TokenUsage, run_cost};
use cronsole::testkit::llm::{FakeLlm, Reply};

const KEY: &str = "sk-test-Zq9SECRETkey000111";
const VAR: &str = "CRONSOLE_TEST_LLM_KEY";

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-29T12:00:00Z")
        .unwrap()
        .to_utc()
}

fn env(name: &str) -> Option<String> {
    (name == VAR).then(|| KEY.to_string())
}

fn no_env(_: &str) -> Option<String> {
    None
}

fn client() -> reqwest::Client {
    llm::http_client(&HttpOptions {
        system_proxy: false,
        ..HttpOptions::default()
    })
    .unwrap()
}

fn agent(provider: Provider, base_url: &str, model: &str) -> AgentDef {
    AgentDef {
        name: "summariser".into(),
        provider,
        base_url: base_url.into(),
        api_key_env: VAR.into(),
        model: model.into(),
        instructions: "Summarise. Be brief.".into(),
        max_tokens: Some(800),
        temperature: Some(0.2),
        tools: Vec::new(),
        approve: Vec::new(),
        limits: Default::default(),
    }
}

async fn call_once(a: &AgentDef, timeout: Duration) -> Result<LlmReply, LlmError> {
    let req = LlmCall {
        agent: a,
        prompt: "What changed?",
        timeout,
        now: now(),
        max_tokens: None,
    };
    llm::call(&client(), &req, &env).await
}

fn assert_no_key(e: &LlmError) {
    assert!(!e.to_string().contains(KEY), "key in Display: {e}");
    assert!(!format!("{e:?}").contains(KEY), "key in Debug: {e:?}");
}

/// The key travels in exactly one header of each request and nowhere else.
fn assert_key_only_in(fake: &FakeLlm, header: &str) {
    for r in fake.requests() {
        assert!(!r.path.contains(KEY));
        assert!(!r.body_text().contains(KEY));
        for (k, v) in &r.headers {
            if k != header {
                assert!(!v.contains(KEY), "key in header {k}");
            }
        }
        assert!(r.header(header).unwrap().contains(KEY));
    }
}

#[tokio::test]
async fn openai_success_gives_exact_tokens_and_cost() {
    let fake = FakeLlm::openai(KEY, vec![Reply::ok("All quiet.", 1200, 300)])
        .await
        .unwrap();
    let a = agent(Provider::Openai, &fake.base_url(), "gpt-4o-mini");
    let reply = call_once(&a, Duration::from_secs(5)).await.unwrap();
    assert_eq!(reply.text, "All quiet.");
    assert_eq!(reply.model, "gpt-4o-mini");
    assert_eq!(
        reply.usage,
        Some(TokenUsage {
            input: 1200,
            output: 300
        })
    );
    let c = run_cost(&PriceTable::builtin(), &reply.model, reply.usage);
    assert_eq!((c.input_tokens, c.output_tokens), (1200, 300));
    // 1200 × $0.15/M + 300 × $0.60/M
    assert!((c.cost_usd - 0.000_36).abs() < 1e-15, "{}", c.cost_usd);
    assert!(!c.unpriced);

    let reqs = fake.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].path, "/v1/chat/completions");
    assert_eq!(
        reqs[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    let body = reqs[0].json().unwrap();
    assert_eq!(body["model"], "gpt-4o-mini");
    assert_eq!(
        body["messages"],
        serde_json::json!([
            {"role": "system", "content": "Summarise. Be brief."},
            {"role": "user", "content": "What changed?"}
        ])
    );
    assert_eq!(body["max_tokens"], 800);
    assert_eq!(body["temperature"], 0.2);
    assert_key_only_in(&fake, "authorization");
}

#[tokio::test]
async fn anthropic_success_gives_exact_tokens_and_cost() {
    let fake = FakeLlm::anthropic(KEY, vec![Reply::ok("Disk grew 4%.", 2000, 500)])
        .await
        .unwrap();
    let a = agent(
        Provider::Anthropic,
        &fake.base_url(),
        "claude-3-5-haiku-20241022",
    );
    let reply = call_once(&a, Duration::from_secs(5)).await.unwrap();
    assert_eq!(reply.text, "Disk grew 4%.");
    assert_eq!(
        reply.usage,
        Some(TokenUsage {
            input: 2000,
            output: 500
        })
    );
    let c = run_cost(&PriceTable::builtin(), &reply.model, reply.usage);
    assert_eq!(c.priced_as.as_deref(), Some("claude-3-5-haiku"));
    // 2000 × $0.80/M + 500 × $4.00/M
    assert!((c.cost_usd - 0.0036).abs() < 1e-15, "{}", c.cost_usd);

    let reqs = fake.requests();
    assert_eq!(reqs[0].path, "/v1/messages");
    assert_eq!(reqs[0].header("x-api-key"), Some(KEY));
    assert_eq!(reqs[0].header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(reqs[0].header("authorization"), None);
    let body = reqs[0].json().unwrap();
    assert_eq!(body["system"], "Summarise. Be brief.");
    assert_eq!(
        body["messages"],
        serde_json::json!([{"role": "user", "content": "What changed?"}])
    );
    assert_eq!(body["max_tokens"], 800);
    assert_key_only_in(&fake, "x-api-key");
}

#[tokio::test]
async fn no_usage_means_unpriced_at_zero() {
    for provider in [Provider::Openai, Provider::Anthropic] {
        let fake = match provider {
            Provider::Openai => FakeLlm::openai(KEY, vec![Reply::ok_without_usage("hi")]).await,
            Provider::Anthropic => {
                FakeLlm::anthropic(KEY, vec![Reply::ok_without_usage("hi")]).await
            }
        }
        .unwrap();
        let a = agent(provider, &fake.base_url(), "gpt-4o");
        let reply = call_once(&a, Duration::from_secs(5)).await.unwrap();
        assert_eq!(reply.usage, None);
        let c = run_cost(&PriceTable::builtin(), &reply.model, reply.usage);
        assert_eq!(c.cost_usd, 0.0);
        assert!(c.unpriced);
        assert_eq!(c.reason.as_deref(), Some("no usage in reply"));
    }
}

#[tokio::test]
async fn a_500_is_retried_on_the_backoff_schedule_then_succeeds() {
    let fake = FakeLlm::openai(
        KEY,
        vec![
            Reply::Status(500, "upstream exploded".into()),
            Reply::ok("ok now", 10, 2),
        ],
    )
    .await
    .unwrap();
    let a = agent(Provider::Openai, &fake.base_url(), "gpt-4o-mini");
    let cfg = BackoffConfig {
        floor_secs: 0.002,
        base: 2.0,
        cap_secs: 0.005,
        jitter: 0.1,
    };
    let c = client();
    let mut errors = Vec::new();
    let out = retry_with_backoff(
        &cfg,
        3,
        |_attempt| {
            let req = LlmCall {
                agent: &a,
                prompt: "p",
                timeout: Duration::from_secs(5),
                now: now(),
                max_tokens: None,
            };
            let c = c.clone();
            async move { llm::call(&c, &req, &env).await }
        },
        |e: &LlmError| {
            errors.push(e.to_string());
            e.is_retryable()
        },
    )
    .await;
    assert_eq!(out.result.unwrap().text, "ok now");
    assert_eq!(out.attempts, 2);
    assert_eq!(out.waits.len(), 1);
    // min(max(0.002, 2^0), 0.005) × [0.9, 1.1]
    let w = out.waits[0].as_secs_f64();
    assert!((0.0045..=0.0055).contains(&w), "{w}");
    assert_eq!(fake.request_count(), 2);
    assert_eq!(errors.len(), 1);
    assert!(errors[0].contains("HTTP 500"), "{}", errors[0]);
    assert!(errors[0].contains("upstream exploded"), "{}", errors[0]);
}

#[tokio::test]
async fn a_slow_reply_hits_the_per_attempt_timeout() {
    let fake = FakeLlm::openai(
        KEY,
        vec![Reply::Slow(
            Duration::from_secs(30),
            Box::new(Reply::ok("late", 1, 1)),
        )],
    )
    .await
    .unwrap();
    let a = agent(Provider::Openai, &fake.base_url(), "gpt-4o-mini");
    let started = std::time::Instant::now();
    let e = call_once(&a, Duration::from_millis(300)).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(matches!(e, LlmError::Timeout { .. }), "{e:?}");
    assert!(e.to_string().contains("within 0.3s"), "{e}");
    assert!(e.is_retryable());
    assert_no_key(&e);
}

#[tokio::test]
async fn a_429_with_retry_after_seconds_or_date_carries_the_hold() {
    let fake = FakeLlm::openai(
        KEY,
        vec![
            Reply::RateLimited(Some("120".into())),
            Reply::RateLimited(Some("Sun, 29 Nov 2026 13:00:00 GMT".into())),
            Reply::RateLimited(Some("31536000".into())),
            Reply::RateLimited(None),
            Reply::RateLimited(Some("soon".into())),
        ],
    )
    .await
    .unwrap();
    let a = agent(Provider::Openai, &fake.base_url(), "gpt-4o-mini");
    let at = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().to_utc();

    let e = call_once(&a, Duration::from_secs(5)).await.unwrap_err();
    assert_eq!(
        e,
        LlmError::RateLimited {
            retry_at: at("2026-11-29T12:02:00Z"),
            retry_after: "120".into()
        }
    );
    assert_eq!(e.hold_until(), Some(at("2026-11-29T12:03:00Z")));
    assert!(!e.is_retryable());

    let e = call_once(&a, Duration::from_secs(5)).await.unwrap_err();
    assert_eq!(e.hold_until(), Some(at("2026-11-29T13:01:00Z")));

    let e = call_once(&a, Duration::from_secs(5)).await.unwrap_err();
    assert_eq!(
        e.hold_until(),
        Some(at("2026-11-30T12:01:00Z")),
        "capped at 86 400 s"
    );

    for _ in 0..2 {
        let e = call_once(&a, Duration::from_secs(5)).await.unwrap_err();
        assert!(
            matches!(e, LlmError::Http { status: 429, .. }),
            "no usable Retry-After → plain failure: {e:?}"
        );
        assert_eq!(e.hold_until(), None);
    }
    assert_eq!(fake.request_count(), 5);
}

#[tokio::test]
async fn a_missing_key_names_the_variable_and_sends_nothing() {
    let fake = FakeLlm::openai(KEY, vec![Reply::ok("x", 1, 1)])
        .await
        .unwrap();
    let a = agent(Provider::Openai, &fake.base_url(), "gpt-4o-mini");
    let req = LlmCall {
        agent: &a,
        prompt: "p",
        timeout: Duration::from_secs(5),
        now: now(),
        max_tokens: None,
    };
    let e = llm::call(&client(), &req, &no_env).await.unwrap_err();
    assert_eq!(e, LlmError::MissingKey { var: VAR.into() });
    assert!(e.to_string().contains(VAR), "{e}");
    assert!(!e.is_retryable());
    let blank = |_: &str| Some("   ".to_string());
    let e = llm::call(&client(), &req, &blank).await.unwrap_err();
    assert_eq!(e, LlmError::MissingKey { var: VAR.into() });
    assert_eq!(fake.request_count(), 0);
}

#[tokio::test]
async fn the_key_never_appears_in_errors_even_when_the_server_echoes_it() {
    // A hostile or buggy endpoint that echoes the credentials back in its error body.
    let srv = TestServer::start(|req| {
        let creds = format!(
            "{} {}",
            req.header("authorization").unwrap_or(""),
            req.header("x-api-key").unwrap_or("")
        );
        if req.path.contains("malformed") || req.path.ends_with("/v1/messages") {
            Response::text(200, &format!("not json; you sent {creds}"))
        } else {
            Response::text(503, &format!("bad key {creds}"))
        }
    })
    .await
    .unwrap();
    let mut errors = Vec::new();
    let a = agent(Provider::Openai, &format!("{}/v1", srv.url()), "gpt-4o");
    errors.push(call_once(&a, Duration::from_secs(5)).await.unwrap_err());
    let a = agent(
        Provider::Openai,
        &format!("{}/malformed", srv.url()),
        "gpt-4o",
    );
    errors.push(call_once(&a, Duration::from_secs(5)).await.unwrap_err());
    let a = agent(Provider::Anthropic, &srv.url(), "claude-3-haiku");
    errors.push(call_once(&a, Duration::from_secs(5)).await.unwrap_err());
    assert!(matches!(errors[0], LlmError::Http { status: 503, .. }));
    assert!(matches!(errors[1], LlmError::Malformed { .. }));
    assert!(matches!(errors[2], LlmError::Malformed { .. }));
    for e in &errors {
        assert_no_key(e);
        assert!(e.to_string().contains("[redacted]"), "{e}");
    }
}

#[tokio::test]
async fn transport_and_auth_failures_are_described() {
    // A port nobody listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let a = agent(
        Provider::Openai,
        &format!("http://127.0.0.1:{port}/v1"),
        "gpt-4o",
    );
    let e = call_once(&a, Duration::from_secs(5)).await.unwrap_err();
    assert!(matches!(e, LlmError::Transport { .. }), "{e:?}");
    assert!(e.is_retryable());
    assert!(e.to_string().to_lowercase().contains("connect"), "{e}");
    assert_no_key(&e);

    let fake = FakeLlm::openai("a-different-key", vec![]).await.unwrap();
    let a = agent(Provider::Openai, &fake.base_url(), "gpt-4o");
    let e = call_once(&a, Duration::from_secs(5)).await.unwrap_err();
    assert!(matches!(e, LlmError::Http { status: 401, .. }), "{e:?}");
    assert!(!e.is_retryable());
    assert!(e.to_string().contains("Incorrect API key"), "{e}");

    let fake = FakeLlm::anthropic(KEY, vec![Reply::Malformed])
        .await
        .unwrap();
    let a = agent(Provider::Anthropic, &fake.base_url(), "claude-3-haiku");
    let e = call_once(&a, Duration::from_secs(5)).await.unwrap_err();
    assert!(matches!(e, LlmError::Malformed { .. }), "{e:?}");
    assert!(e.to_string().contains("not JSON"), "{e}");
    assert!(e.is_retryable());
}

fn tiny_backoff() -> BackoffConfig {
    BackoffConfig {
        floor_secs: 0.001,
        base: 2.0,
        cap_secs: 0.002,
        jitter: 0.1,
    }
}

#[tokio::test]
async fn run_agent_retries_prices_and_flags_silence() {
    use cronsole::clock::ManualClock;
    use cronsole::testkit::internals::action::llm::{AgentRun, run_agent};
    let clock = ManualClock::new(now());
    let prices = PriceTable::builtin();
    let c = client();

    let fake = FakeLlm::openai(
        KEY,
        vec![
            Reply::Status(502, "bad gateway".into()),
            Reply::Status(503, "busy".into()),
            Reply::ok("  NO_REPLY ", 1_000_000, 0),
        ],
    )
    .await
    .unwrap();
    let a = agent(Provider::Openai, &fake.base_url(), "openai/gpt-4o-mini");
    let run = AgentRun {
        agent: &a,
        prompt: "p",
        timeout: Duration::from_secs(5),
        max_attempts: 3,
        backoff: tiny_backoff(),
    };
    let out = run_agent(&c, &run, &prices, &clock, &env).await;
    assert_eq!(out.attempts, 3);
    assert!(out.silent);
    assert_eq!(out.hold_until, None);
    assert_eq!(out.cost.input_tokens, 1_000_000);
    assert!((out.cost.cost_usd - 0.15).abs() < 1e-12, "{:?}", out.cost);
    assert_eq!(fake.request_count(), 3);

    // Out of attempts: the last error is reported, nothing is priced.
    let fake = FakeLlm::anthropic(KEY, vec![]).await.unwrap();
    let a = agent(Provider::Anthropic, &fake.base_url(), "claude-3-haiku");
    let run = AgentRun {
        agent: &a,
        max_attempts: 2,
        ..run.clone()
    };
    let out = run_agent(&c, &run, &prices, &clock, &env).await;
    assert_eq!(out.attempts, 2);
    assert!(
        out.result
            .unwrap_err()
            .to_string()
            .contains("script exhausted")
    );
    assert_eq!(out.cost.cost_usd, 0.0);
    assert!(!out.silent);

    // A 429 with Retry-After stops at once and carries the hold (+60 s).
    let fake = FakeLlm::openai(KEY, vec![Reply::RateLimited(Some("30".into()))])
        .await
        .unwrap();
    let a = agent(Provider::Openai, &fake.base_url(), "gpt-4o");
    let run = AgentRun {
        agent: &a,
        max_attempts: 3,
        ..run.clone()
    };
    let out = run_agent(&c, &run, &prices, &clock, &env).await;
    assert_eq!(out.attempts, 1);
    assert_eq!(out.hold_until, Some(now() + chrono::Duration::seconds(90)));
    assert_eq!(fake.request_count(), 1);

    // A missing key is not retried and makes no request.
    let fake = FakeLlm::openai(KEY, vec![]).await.unwrap();
    let a = agent(Provider::Openai, &fake.base_url(), "gpt-4o");
    let run = AgentRun { agent: &a, ..run };
    let out = run_agent(&c, &run, &prices, &clock, &no_env).await;
    assert_eq!(out.attempts, 1);
    assert_eq!(fake.request_count(), 0);
}

/// A token in `base_url`'s path or query never reaches an error's text (the URL is
/// shown as scheme://host:port/…/chat/completions), and the query is sent as a query after the
/// appended path.
#[tokio::test]
async fn url_tokens_in_base_url_stay_out_of_errors_and_the_query_is_kept() {
    let srv = TestServer::start(|req| Response::text(503, &format!("bad path {}", req.path)))
        .await
        .unwrap();
    let a = agent(
        Provider::Openai,
        &format!("{}/PATHTOKEN123456/v1?api_key=QUERYSECRET789", srv.url()),
        "gpt-4o",
    );
    let e = call_once(&a, Duration::from_secs(5)).await.unwrap_err();
    let LlmError::Http { url, .. } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(url, &format!("{}/…/chat/completions", srv.url()));
    // Unreachable: reqwest's own text names the URL unless it is taken out.
    let a = agent(
        Provider::Openai,
        "http://127.0.0.1:1/PATHTOKEN123456/v1?api_key=QUERYSECRET789",
        "gpt-4o",
    );
    let e2 = call_once(&a, Duration::from_secs(5)).await.unwrap_err();
    assert!(matches!(e2, LlmError::Transport { .. }), "{e2:?}");
    for t in [e.to_string(), e2.to_string()] {
        assert!(
            !t.contains("QUERYSECRET789") && !t.contains("PATHTOKEN123456"),
            "{t}"
        );
    }
}

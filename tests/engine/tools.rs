//! Agent runs with tools through the engine, against the scripted loopback model in both wire
//! formats and in-memory tool sources: the loop's turns and calls on the row and in its
//! transcript, money summed over the turns (and never past a budget between turns), the loop's
//! bounds as `failed` rows, prompt-cache tokens priced.
#![allow(clippy::unwrap_used)] // test code

use std::collections::HashMap;
use std::sync::Arc;

use crate::engine_support::*;
use cronsole::model::Status;
use cronsole::testkit::llm::{FakeCall, FakeLlm, Reply};
use cronsole::testkit::tools::{FixedTools, MemorySource, error_output, text_output};
use cronsole::transcript::{CallState, Entry};
use serde_json::json;

const KEY: &str = "sk-TOOLS-0123456789abcdef";

fn yaml(provider: &str, base: &str, budget: &str, pricing: &str) -> String {
    format!(
        "{budget}pricing:
  test-model: {{ input: 1.0, output: 2.0{pricing} }}
agents:
  a:
    provider: {provider}
    base_url: {base}
    api_key_env: TEST_KEY
    model: test-model
    instructions: use the tools
jobs:
  - name: ask
    schedule: every 60s
    agent: a
    message: read /a
    max_retries: 1
"
    )
}

fn files() -> Arc<MemorySource> {
    Arc::new(MemorySource::new("files").tool(
        "read_file",
        json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        |args| match args["path"].as_str() {
            Some("/missing") => Ok(error_output("no such file")),
            Some(p) => Ok(text_output(&format!("contents of {p}"))),
            None => Ok(error_output("no path")),
        },
    ))
}

fn opts(src: &Arc<MemorySource>) -> RigOpts {
    RigOpts {
        env: HashMap::from([("TEST_KEY".to_string(), KEY.to_string())]),
        tools: Some(Arc::new(FixedTools(vec![Arc::clone(src)]))),
        ..Default::default()
    }
}

/// The model's reply that asks to read `/a` once, with its usage.
fn read_a(input: i64, output: i64) -> Reply {
    Reply::tools(
        vec![FakeCall::new("files__read_file", json!({"path": "/a"}))],
        input,
        output,
    )
}

/// The jobs file on `fake` under a $1/day budget, its job `ask` allowed `max_retries` attempts
/// of at most `timeout` seconds each.
fn timed_yaml(fake: &FakeLlm, max_retries: u32, timeout: u32) -> String {
    yaml(
        "openai",
        &fake.base_url(),
        "budget: { max_cost_usd: 1.0, period: day }\n",
        "",
    )
    .replace(
        "    max_retries: 1\n",
        &format!("    max_retries: {max_retries}\n    timeout_seconds: {timeout}\n"),
    )
}

/// A reply that comes 4 s late, every time: past the run's time-out.
fn late_forever() -> Reply {
    let late = Reply::ok("late", 10, 5);
    Reply::Forever(Box::new(Reply::Slow(
        std::time::Duration::from_secs(4),
        Box::new(late),
    )))
}

/// A loopback OpenAI-compatible model that answers `replies` in turn.
async fn openai(replies: Vec<Reply>) -> FakeLlm {
    FakeLlm::openai(KEY, replies).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_parallel_calls_then_an_answer_are_one_succeeded_row_with_its_transcript() {
    let src = files();
    let fake = openai(vec![
        Reply::tools(
            vec![
                FakeCall::new("files__read_file", json!({"path": "/a"})),
                FakeCall::new("files__delete_everything", json!({})),
            ],
            100,
            20,
        ),
        Reply::ok("the file says a", 300, 10),
    ])
    .await;
    let rig = Rig::start(
        "tools-openai",
        &yaml("openai", &fake.base_url(), "budget: null\n", ""),
        opts(&src),
    )
    .await;
    let r = rig.wait_rows("ask", 1).await.remove(0);
    assert_eq!(r.status, Status::Succeeded, "{r:#?}");
    assert_eq!(r.result.as_deref(), Some("the file says a"));
    assert_eq!((r.turns, r.tool_calls), (Some(2), Some(2)));
    assert_eq!((r.input_tokens, r.output_tokens), (400, 30));
    // 400 × $1/M + 30 × $2/M, both turns.
    assert!((r.cost_usd - 0.00046).abs() < 1e-12, "{}", r.cost_usd);
    // A turn is not an attempt: each request went through at once; the log lists both.
    assert_eq!(r.attempts, 1);
    assert_eq!(r.attempt_log.len(), 2);
    // The invented name was never dispatched.
    assert_eq!(
        src.calls(),
        vec![("read_file".to_string(), json!({"path": "/a"}))]
    );
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    let first = reqs[0].json().unwrap();
    assert_eq!(first["tools"][0]["function"]["name"], "files__read_file");
    let second = reqs[1].json().unwrap();
    let m = second["messages"].as_array().unwrap();
    // system, user, assistant with two calls, one tool message per call in order.
    assert_eq!(m.len(), 5, "{m:#?}");
    assert_eq!(m[2]["tool_calls"].as_array().unwrap().len(), 2);
    assert_eq!(m[3]["tool_call_id"], "call_0");
    assert_eq!(m[3]["content"], "contents of /a");
    assert_eq!(m[4]["tool_call_id"], "call_1");
    assert!(
        m[4]["content"]
            .as_str()
            .unwrap()
            .contains("no tool named 'files__delete_everything'"),
        "{}",
        m[4]
    );
    let t = r.transcript.expect("transcript").to_vec();
    let kinds: Vec<&str> = t
        .iter()
        .map(|e| match e {
            Entry::Turn(_) => "turn",
            Entry::Call(_) => "call",
            Entry::Unanswered(_) => "unanswered",
            Entry::ServerRequest(_) => "server_request",
            Entry::Elided { .. } => "elided",
        })
        .collect();
    assert_eq!(kinds, ["turn", "call", "call", "turn"]);
    let Entry::Call(c) = &t[1] else {
        unreachable!()
    };
    assert_eq!(
        (c.tool.as_str(), c.state),
        ("files.read_file", CallState::Done)
    );
    let Entry::Call(c) = &t[2] else {
        unreachable!()
    };
    assert_eq!(c.state, CallState::Refused);
    assert!(c.is_error);
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_results_of_a_turn_go_back_in_one_user_message() {
    let src = files();
    let fake = FakeLlm::anthropic(
        KEY,
        vec![
            Reply::tools(
                vec![
                    FakeCall::new("files__read_file", json!({"path": "/a"})),
                    FakeCall::new("files__read_file", json!({"path": "/missing"})),
                ],
                50,
                20,
            ),
            Reply::ok("done", 200, 5),
        ],
    )
    .await
    .unwrap();
    let rig = Rig::start(
        "tools-anthropic",
        &yaml("anthropic", &fake.base_url(), "budget: null\n", ""),
        opts(&src),
    )
    .await;
    let r = rig.wait_rows("ask", 1).await.remove(0);
    assert_eq!(r.status, Status::Succeeded, "{r:#?}");
    assert_eq!(src.calls().len(), 2);
    let second = fake.requests()[1].json().unwrap();
    let m = second["messages"].as_array().unwrap();
    assert_eq!(m.len(), 3, "{m:#?}");
    let results = m[2]["content"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["tool_use_id"], "toolu_0");
    assert_eq!(results[1]["is_error"], true);
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_never_stops_fails_at_max_turns() {
    let src = files();
    let fake = openai(vec![Reply::Forever(Box::new(read_a(10, 5)))]).await;
    let rig = Rig::start(
        "tools-forever",
        &yaml("openai", &fake.base_url(), "budget: null\n", ""),
        opts(&src),
    )
    .await;
    let r = rig.wait_rows("ask", 1).await.remove(0);
    assert_eq!(r.status, Status::Failed, "{r:#?}");
    assert_eq!(
        r.reason.as_deref(),
        Some("max_turns 10 reached after 9 tool calls")
    );
    assert_eq!((r.turns, r.tool_calls), (Some(10), Some(9)));
    assert_eq!(fake.request_count(), 10);
    // Every turn is on the row's money.
    assert!(
        (r.cost_usd - 10.0 * 0.00002).abs() < 1e-12,
        "{}",
        r.cost_usd
    );
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_arguments_repeated_trip_the_circuit_breaker() {
    let src = files();
    let fake = openai(vec![Reply::Forever(Box::new(Reply::tools(
        vec![FakeCall::raw("files__read_file", r#"{"path": "/a"#)],
        10,
        5,
    )))])
    .await;
    let rig = Rig::start(
        "tools-breaker",
        &yaml("openai", &fake.base_url(), "budget: null\n", ""),
        opts(&src),
    )
    .await;
    let r = rig.wait_rows("ask", 1).await.remove(0);
    assert_eq!(r.status, Status::Failed, "{r:#?}");
    assert_eq!(
        r.reason.as_deref(),
        Some("tool loop: files.read_file failed 3 times with the same arguments")
    );
    assert!(
        src.calls().is_empty(),
        "truncated arguments are never dispatched"
    );
    assert_eq!(fake.request_count(), 3);
    rig.stop().await;
}

/// A later turn that does not fit the budget is not sent: `failed`, the spend so far on the
/// row and in the budget, never over the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_that_does_not_fit_the_budget_ends_the_run_failed_with_what_it_spent() {
    let src = files();
    // Turn 1 books 10 in + 4 000 out = $0.00801; turn 2's worst case (~$0.0083) does not fit
    // the $0.012 left of a $0.02 day.
    let fake = openai(vec![read_a(10, 4000), Reply::ok("never", 1, 1)]).await;
    let rig = Rig::start(
        "tools-budget",
        &yaml(
            "openai",
            &fake.base_url(),
            "budget: { max_cost_usd: 0.012, period: day }\n",
            "",
        ),
        opts(&src),
    )
    .await;
    let r = rig.wait_rows("ask", 1).await.remove(0);
    assert_eq!(r.status, Status::Failed, "{r:#?}");
    let reason = r.reason.clone().unwrap_or_default();
    assert!(
        reason.starts_with(
            "budget reached after turn 1 ($0.00801 spent this run); budget reached: global $0.012/day"
        ),
        "{reason}"
    );
    assert_eq!(fake.request_count(), 1);
    assert_eq!(
        src.calls().len(),
        1,
        "turn 1's result was produced and kept"
    );
    assert!((r.cost_usd - 0.00801).abs() < 1e-12, "{}", r.cost_usd);
    let spend = rig.store.spend("ask", rig.now()).unwrap();
    assert!((spend.global_usd - 0.00801).abs() < 1e-12, "{spend:?}");
    rig.stop().await;
}

/// A row's `attempts` counts retries, not turns: a 2-turn run whose second request was retried
/// once shows 2 attempts and 2 turns, and its attempt log lists all 3 requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_count_the_retries_of_a_turn_not_the_turns() {
    let src = files();
    let fake = openai(vec![
        read_a(10, 5),
        Reply::Status(500, "try again".into()),
        Reply::ok("done", 10, 5),
    ])
    .await;
    let yaml = yaml("openai", &fake.base_url(), "budget: null\n", "")
        .replace("    max_retries: 1\n", "    max_retries: 2\n");
    let rig = Rig::start("tools-attempts", &yaml, opts(&src)).await;
    let r = rig.wait_rows("ask", 1).await.remove(0);
    assert_eq!(r.status, Status::Succeeded, "{r:#?}");
    assert_eq!((r.turns, r.tool_calls), (Some(2), Some(1)));
    assert_eq!(r.attempts, 2, "{r:#?}");
    assert_eq!(r.attempt_log.len(), 3, "{r:#?}");
    assert_eq!(fake.request_count(), 3);
    rig.stop().await;
}

/// With tools, `timeout_seconds` bounds the whole loop, the waits between retries included: a
/// request cut at the bound is not retried (one paid attempt, booked at its reservation since
/// its outcome is unknown), however many retries the job allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_cut_at_the_loops_timeout_is_not_retried() {
    let src = files();
    let fake = openai(vec![late_forever()]).await;
    let yaml = timed_yaml(&fake, 3, 1);
    let rig = Rig::start("tools-timeout-retry", &yaml, opts(&src)).await;
    let r = rig.wait_rows("ask", 1).await.remove(0);
    assert_eq!(r.status, Status::Failed, "{r:#?}");
    let reason = r.reason.clone().unwrap_or_default();
    assert!(
        reason.starts_with(
            "timed out: the tool loop ran past timeout_seconds (1s) during turn 1: not retried"
        ),
        "{reason}"
    );
    assert_eq!(fake.request_count(), 1, "no second paid attempt");
    assert_eq!(r.attempts, 1, "{r:#?}");
    assert!(r.cost_usd > 0.0, "the cut request is booked: {r:#?}");
    let spend = rig.store.spend("ask", rig.now()).unwrap();
    assert!((spend.global_usd - r.cost_usd).abs() < 1e-12, "{spend:?}");
    // The record says where the loop stopped and what that turn cost.
    let t = r.transcript.clone().expect("transcript").to_vec();
    let Some(Entry::Unanswered(u)) = t.last() else {
        panic!("the cut turn is on the record: {t:?}")
    };
    assert_eq!((u.turn, u.attempts, u.model.as_str()), (1, 1, "test-model"));
    assert!(
        (u.cost_usd - r.cost_usd).abs() < 1e-12,
        "{u:?} vs {}",
        r.cost_usd
    );
    assert_eq!(
        u.reason,
        "its request was cut at the run's timeout_seconds (1s); not retried"
    );
    rig.stop().await;
}

/// A turn after tool calls whose request is cut at the loop's time-out (no retries left) is on
/// the record after those calls, booked at its reservation; the turns before keep their own
/// cost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_turn_cut_at_the_timeout_is_on_the_record_with_its_charge() {
    let src = files();
    let fake = openai(vec![read_a(100, 20), late_forever()]).await;
    let yaml = timed_yaml(&fake, 1, 2);
    let rig = Rig::start("tools-timeout-later", &yaml, opts(&src)).await;
    let r = rig.wait_rows("ask", 1).await.remove(0);
    assert_eq!(r.status, Status::Failed, "{r:#?}");
    let t = r.transcript.clone().expect("transcript").to_vec();
    let kinds: Vec<&str> = t
        .iter()
        .map(|e| match e {
            Entry::Turn(_) => "turn",
            Entry::Call(_) => "call",
            Entry::Unanswered(_) => "unanswered",
            Entry::ServerRequest(_) => "server_request",
            Entry::Elided { .. } => "elided",
        })
        .collect();
    assert_eq!(kinds, ["turn", "call", "unanswered"], "{t:#?}");
    let (Entry::Turn(first), Entry::Unanswered(u)) = (&t[0], &t[2]) else {
        unreachable!()
    };
    assert_eq!((u.turn, u.attempts), (2, 1));
    assert_eq!(
        u.reason,
        "its request was cut at the run's timeout_seconds (2s)"
    );
    assert!(u.cost_usd > 0.0, "{u:?}");
    // The row's money is the answered turn's plus the cut one's reservation.
    assert!(
        (first.cost_usd + u.cost_usd - r.cost_usd).abs() < 1e-12,
        "{} + {} vs {}",
        first.cost_usd,
        u.cost_usd,
        r.cost_usd
    );
    rig.stop().await;
}

/// A request a tool server made during a call and cronsole refused is on the row's record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_refused_request_is_on_the_rows_record() {
    let src = Arc::new(
        MemorySource::new("files")
            .tool("read_file", json!({"type": "object"}), |_| {
                Ok(text_output("contents"))
            })
            .asking_during_calls("refused the server's elicitation request"),
    );
    let fake = openai(vec![read_a(100, 20), Reply::ok("done", 10, 5)]).await;
    let rig = Rig::start(
        "tools-server-request",
        &yaml("openai", &fake.base_url(), "budget: null\n", ""),
        opts(&src),
    )
    .await;
    let r = rig.wait_rows("ask", 1).await.remove(0);
    assert_eq!(r.status, Status::Succeeded, "{r:#?}");
    let t = r.transcript.clone().expect("transcript").to_vec();
    let Some(Entry::ServerRequest(q)) = t.get(2) else {
        panic!("{t:#?}")
    };
    assert_eq!(q.request, "files: refused the server's elicitation request");
    assert_eq!((q.turn, q.tool.as_str()), (1, "files.read_file"));
    assert_eq!((r.turns, r.tool_calls), (Some(2), Some(1)));
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_prompt_tokens_are_priced_at_the_cache_price_once() {
    for (provider, expected) in [
        // OpenAI: 1 000 prompt tokens of which 800 cached at $0.5/M, 100 out at $2/M.
        ("openai", (200.0 * 1.0 + 800.0 * 0.5 + 100.0 * 2.0) / 1e6),
        // Anthropic: 1 000 input at $1/M + 800 read at $0.1/M + 200 written at $1.25/M.
        (
            "anthropic",
            (1000.0 + 800.0 * 0.1 + 200.0 * 1.25 + 100.0 * 2.0) / 1e6,
        ),
    ] {
        let src = files();
        let reply = Reply::Cached {
            text: "cached".into(),
            usage: (1000, 100),
            cache: (800, 200),
        };
        let fake = match provider {
            "openai" => FakeLlm::openai(KEY, vec![reply]).await,
            _ => FakeLlm::anthropic(KEY, vec![reply]).await,
        }
        .unwrap();
        let rig = Rig::start(
            &format!("tools-cache-{provider}"),
            &yaml(
                provider,
                &fake.base_url(),
                "budget: { max_cost_usd: 1.0, period: day }\n",
                ", cached_input: 0.5, cache_read: 0.1, cache_write: 1.25",
            ),
            opts(&src),
        )
        .await;
        let r = rig.wait_rows("ask", 1).await.remove(0);
        assert_eq!(r.status, Status::Succeeded, "{r:#?}");
        assert!(
            (r.cost_usd - expected).abs() < 1e-12,
            "{provider}: {} vs {expected}",
            r.cost_usd
        );
        let spend = rig.store.spend("ask", rig.now()).unwrap();
        assert!((spend.job_usd - expected).abs() < 1e-12, "{spend:?}");
        rig.stop().await;
    }
}

/// The job file of the approval tests: `files.read_file` needs an operator, with a wait of
/// `wait` seconds at most.
fn approving(base: &str, wait: u32) -> String {
    // The source is declared for `validate`; the rig's in-memory `files` source answers.
    yaml(
        "openai",
        base,
        "budget: null\nmcp_servers:\n  files: { command: [\"true\"] }\n",
        "",
    )
    .replace(
        "    instructions: use the tools\n",
        &format!(
            "    instructions: use the tools\n    tools: [files.read_file]\n    approve: [files.read_file]\n    approval_timeout_seconds: {wait}\n"
        ),
    )
}

/// The run awaiting approval on the store, once it is.
async fn awaiting(rig: &Rig) -> (uuid::Uuid, cronsole::model::AwaitingApproval) {
    cronsole::testkit::wait::poll_for_async(std::time::Duration::from_secs(20), || {
        let rec = rig.store.job("ask").unwrap()?;
        let l = rec.rt.lease.as_ref()?;
        Some((l.run_id, l.awaiting.clone()?))
    })
    .await
    .expect("no call awaited approval")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_awaiting_approval_runs_once_approved_through_the_store() {
    let src = files();
    let fake = openai(vec![read_a(100, 20), Reply::ok("read it", 300, 10)]).await;
    let rig = Rig::start(
        "tools-approve",
        &approving(&fake.base_url(), 3600),
        opts(&src),
    )
    .await;
    let (run_id, a) = awaiting(&rig).await;
    assert_eq!(a.tool, "files.read_file");
    assert!(a.arguments.contains("/a"), "{a:?}");
    assert!(src.calls().is_empty(), "nothing runs before the answer");
    assert_eq!(fake.request_count(), 1, "nothing is sent while waiting");
    let (job, _) = rig
        .store
        .answer_approval(
            run_id,
            None,
            true,
            Some("the path is harmless".into()),
            Some("ops@host (test)".into()),
            rig.now(),
        )
        .unwrap();
    assert_eq!(job, "ask");
    let r = rig.wait_rows("ask", 1).await.remove(0);
    assert_eq!(r.status, Status::Succeeded, "{r:#?}");
    assert_eq!(src.calls().len(), 1);
    let approval = r
        .transcript
        .unwrap()
        .to_vec()
        .into_iter()
        .find_map(|e| match e {
            Entry::Call(c) => c.approval,
            _ => None,
        });
    assert_eq!(
        approval,
        Some(cronsole::transcript::Approval::Approved {
            by: Some("ops@host (test)".into()),
            reason: Some("the path is harmless".into())
        }),
        "an approval's reason is on the record"
    );
    let sent = String::from_utf8_lossy(&fake.requests()[1].body).into_owned();
    assert!(
        !sent.contains("the path is harmless"),
        "the model never reads an approval's reason: {sent}"
    );
    // The answered run waits no more: a second answer is refused, saying so.
    let again = rig
        .store
        .answer_approval(run_id, None, false, None, None, rig.now())
        .unwrap_err();
    assert!(
        again.to_string().contains("not awaiting approval"),
        "{again}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_call_is_denied_at_its_timeout_and_the_model_is_told() {
    let src = files();
    let fake = openai(vec![
        read_a(100, 20),
        Reply::ok("could not read it", 300, 10),
    ])
    .await;
    let rig = Rig::start("tools-deny", &approving(&fake.base_url(), 1), opts(&src)).await;
    let r = rig.wait_rows("ask", 1).await.remove(0);
    assert_eq!(r.status, Status::Succeeded, "{r:#?}");
    assert!(src.calls().is_empty(), "a denied call never runs");
    let second = fake.requests()[1].json().unwrap();
    let m = second["messages"].as_array().unwrap();
    assert!(
        m[3]["content"]
            .as_str()
            .unwrap()
            .contains("no answer within approval_timeout_seconds (1s)"),
        "{}",
        m[3]
    );
    assert!(
        rig.store
            .job("ask")
            .unwrap()
            .unwrap()
            .rt
            .lease
            .is_none_or(|l| l.awaiting.is_none()),
        "the wait is cleared"
    );
}

/// A secret a tool source receives, repeated by the model in its text, in a call's arguments
/// and in the model its replies name, is nowhere in what the run stores: not in the row, its
/// transcript, or any file of the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_secrets_the_model_repeats_are_redacted_before_anything_is_stored() {
    const FILES_TOKEN: &str = "filestok-SEKRET-0123456";
    const SEARCH_TOKEN: &str = "searchtok-SEKRET-789abc";
    const TOOL_TOKEN: &str = "cmdtok-SEKRET-456def";
    let src = Arc::new(MemorySource::new("files").tool(
        "read_file",
        json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        |_| Ok(text_output(&format!("the token is {FILES_TOKEN}"))),
    ));
    let leak = format!("{FILES_TOKEN} {SEARCH_TOKEN} {TOOL_TOKEN}");
    let fake = openai(vec![
        Reply::AsModel(
            format!("test-model-{FILES_TOKEN}"),
            Box::new(Reply::Tools {
                text: format!("thinking about {leak}"),
                calls: vec![
                    FakeCall::new("files__read_file", json!({"path": format!("/a?t={leak}")})),
                    // The same secret spelled with JSON escapes in the raw arguments.
                    FakeCall::raw(
                        "files__read_file",
                        r#"{"path":"\u0066ilestok-SEKRET-0123456\u002d"}"#,
                    ),
                ],
                usage: Some((10, 5)),
                cut: false,
            }),
        ),
        Reply::AsModel(
            format!("test-model-{TOOL_TOKEN}"),
            Box::new(Reply::ok(&format!("leak: {leak}"), 20, 5)),
        ),
    ])
    .await;
    let sources = "mcp_servers:
  files: { command: [cat], env_from: { TOKEN: FILES_TOKEN_SRC } }
  search: { url: \"http://127.0.0.1:9/mcp\", headers_env: { Authorization: SEARCH_AUTH } }
tools:
  lookup:
    description: look something up
    parameters: { type: object }
    command: [cat]
    env_from: { TOKEN: LOOKUP_TOKEN_SRC }
";
    let yaml = format!(
        "{sources}{}",
        yaml("openai", &fake.base_url(), "budget: null\n", "")
    );
    let mut o = opts(&src);
    o.env.extend([
        ("FILES_TOKEN_SRC".to_string(), FILES_TOKEN.to_string()),
        ("SEARCH_AUTH".to_string(), format!("Bearer {SEARCH_TOKEN}")),
        ("LOOKUP_TOKEN_SRC".to_string(), TOOL_TOKEN.to_string()),
    ]);
    let rig = Rig::start("tools-secrets", &yaml, o).await;
    let r = rig.wait_rows("ask", 1).await.remove(0);
    assert_eq!(r.status, Status::Succeeded, "{r:#?}");
    assert_eq!(
        r.result.as_deref(),
        Some("leak: [redacted] [redacted] [redacted]")
    );
    let t = r.transcript.clone().expect("transcript").to_vec();
    let Entry::Turn(first) = &t[0] else {
        panic!("{t:#?}")
    };
    assert_eq!(
        first.text,
        "thinking about [redacted] [redacted] [redacted]"
    );
    assert_eq!(first.model, "test-model-[redacted]");
    assert_eq!(r.model.as_deref(), Some("test-model-[redacted]"));
    let Some(Entry::Call(c)) = t.iter().find(|e| matches!(e, Entry::Call(_))) else {
        panic!("{t:#?}")
    };
    assert!(c.arguments.contains("[redacted]"), "{}", c.arguments);
    // The tool really got the arguments the model wrote; only what is kept is redacted.
    assert!(
        src.calls()[0].1["path"]
            .as_str()
            .unwrap()
            .contains(FILES_TOKEN)
    );
    let whole = serde_json::to_string(&r).unwrap();
    let dir = rig.stop().await;
    // Each secret without its first character: also what is left of one whose first
    // character was written as an escape.
    for secret in [FILES_TOKEN, SEARCH_TOKEN, TOOL_TOKEN].map(|s| &s[1..]) {
        assert!(!whole.contains(secret), "{secret} in the row: {whole}");
        for f in files_under(dir.path()) {
            let bytes = std::fs::read(&f).unwrap_or_default();
            assert!(
                !String::from_utf8_lossy(&bytes).contains(secret),
                "{secret} in {}",
                f.display()
            );
        }
    }
}

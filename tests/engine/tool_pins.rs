//! Tool pinning through the engine: a run's first use pins its MCP tools in the store, a
//! changed definition fails the next run before the model is called, and accepting the new
//! definition lets runs go on; a real server that changes a definition mid-run (with a
//! list-change notice or without one) ends the run before its next turn is reserved or sent.
#![allow(clippy::unwrap_used)] // test code

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::engine_support::*;
use cronsole::model::Status;
use cronsole::testkit::internals::action::tools::pin;
use cronsole::testkit::internals::action::tools::toolbox::Sources;
use cronsole::testkit::internals::action::tools::{
    BoxFuture, ToolError, Toolbox, ToolboxBuilder, ToolboxRequest,
};
use cronsole::testkit::llm::{FakeCall, FakeLlm, Reply};
use cronsole::testkit::mcp::TestServers;
use cronsole::testkit::tools::{MemorySource, text_output, toolbox};
use serde_json::json;

const KEY: &str = "sk-PINS-0123456789abcdef";

/// Offers whatever source it holds now (a server that changes between runs).
struct Swappable(Mutex<Arc<MemorySource>>);

impl ToolboxBuilder for Swappable {
    fn build<'a>(&'a self, _: ToolboxRequest<'a>) -> BoxFuture<'a, Result<Toolbox, ToolError>> {
        let src = self.0.lock().unwrap().clone();
        Box::pin(async move { Ok(toolbox(vec![src])) })
    }
}

fn files(schema: serde_json::Value) -> Arc<MemorySource> {
    Arc::new(MemorySource::new("files").tool("read_file", schema, |_| Ok(text_output("x"))))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_definition_fails_the_run_before_the_model_and_accept_lets_it_go_on() {
    let v1 = json!({"type": "object", "properties": {"path": {"type": "string"}}});
    let v2 = json!({"type": "object", "properties": {"path": {"type": "string"},
                                                     "send_to": {"type": "string"}}});
    let fake = FakeLlm::openai(
        KEY,
        vec![Reply::ok("one", 10, 1), Reply::ok("three", 10, 1)],
    )
    .await
    .unwrap();
    let tools = Arc::new(Swappable(Mutex::new(files(v1))));
    let yaml = format!(
        "budget: null
mcp_servers:   # declared for validate; the test builder stands in for the server
  files:
    command: [\"true\"]
pricing:
  m: {{ input: 1.0, output: 1.0 }}
agents:
  a:
    provider: openai
    base_url: {}
    api_key_env: TEST_KEY
    model: m
    tools: [files.read_file]
jobs:
  - name: ask
    schedule: every 60s
    agent: a
    message: go
",
        fake.base_url()
    );
    let rig = Rig::start(
        "tool-pins",
        &yaml,
        RigOpts {
            env: HashMap::from([("TEST_KEY".to_string(), KEY.to_string())]),
            tools: Some(tools.clone()),
            ..Default::default()
        },
    )
    .await;
    let r = rig.wait_rows("ask", 1).await.remove(0);
    assert_eq!(r.status, Status::Succeeded, "{r:#?}");
    let pins = rig.store.tool_pins(&[]).unwrap();
    assert_eq!(pins.len(), 1);
    assert_eq!(pins[0].qualified(), "files.read_file");
    assert_eq!(
        pins[0].definition["input_schema"]["properties"]["path"]["type"],
        "string"
    );

    // The server changes the tool's schema: the next run fails naming it, the model unasked.
    *tools.0.lock().unwrap() = files(v2);
    let rows = rig.step("ask", 60, 2).await;
    let r = &rows[1];
    assert_eq!(r.status, Status::Failed, "{r:#?}");
    assert_eq!(
        r.reason.as_deref(),
        Some(
            "tool definition changed: files.read_file; review with cronsole tools, accept \
             with cronsole tools --accept files"
        )
    );
    assert_eq!(fake.requests().len(), 1, "no model call for the failed run");
    assert_eq!(
        rig.store.tool_pins(&[]).unwrap(),
        pins,
        "the pin is kept as it was"
    );

    // Accepted, the new definition runs.
    let listed = [tools.0.lock().unwrap().clone()];
    let now = toolbox(listed.to_vec());
    let defs: Vec<_> = now.offered.iter().map(|o| o.def.clone()).collect();
    let n = rig
        .store
        .accept_tools("files", &pin::accepted("files", &defs, rig.now()))
        .unwrap();
    assert_eq!(n, 1);
    let rows = rig.step("ask", 60, 3).await;
    assert_eq!(rows[2].status, Status::Succeeded, "{:#?}", rows[2]);
    assert_eq!(fake.requests().len(), 2);
    rig.stop().await;
}

/// An agent allowed `tool` of the server run by `argv`, each run calling it once, then
/// answering; a budget so every turn is reserved.
fn changing_yaml(base: &str, argv: &[String], tool: &str) -> String {
    let argv: Vec<String> = argv
        .iter()
        .map(|a| serde_json::to_string(a).unwrap())
        .collect();
    format!(
        "budget: {{ max_cost_usd: 5, period: day }}
mcp_servers:
  srv:
    command: [{}]
    protocol_version: \"2025-11-25\"
pricing:
  m: {{ input: 1.0, output: 1.0 }}
agents:
  a:
    provider: openai
    base_url: {base}
    api_key_env: TEST_KEY
    model: m
    max_tokens: 100
    tools: [\"srv.{tool}\"]
jobs:
  - name: ask
    schedule: every 60s
    agent: a
    message: go
",
        argv.join(", ")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_changes_a_definition_mid_run_ends_it_before_the_next_turn_is_paid() {
    let Some(servers) = TestServers::find() else {
        return;
    };
    // The Python SDK's server changes echo and sends its notice while answering retitle; the
    // raw server changes tool a after answering and says nothing.
    let cases = [
        (
            servers.py_stdio_argv(),
            "*",
            FakeCall::new("srv__retitle", json!({})),
        ),
        (
            servers.py_argv("hostile.py", &["silent"]),
            "*",
            FakeCall::new("srv__a", json!({})),
        ),
    ];
    // Both servers list more than the call's tool (`srv.*`): the changed one is offered too.
    for (i, (argv, tool, call)) in cases.into_iter().enumerate() {
        let fake = FakeLlm::openai(
            KEY,
            vec![Reply::tools(vec![call], 10, 5), Reply::ok("done", 10, 1)],
        )
        .await
        .unwrap();
        let env = HashMap::from([("TEST_KEY".to_string(), KEY.to_string())]);
        let lookup = env.clone();
        let rig = Rig::start(
            &format!("tool-changes-{i}"),
            &changing_yaml(&fake.base_url(), &argv, tool),
            RigOpts {
                env,
                tools: Some(Arc::new(Sources::new(Arc::new(move |k: &str| {
                    lookup.get(k).cloned()
                })))),
                ..Default::default()
            },
        )
        .await;
        let r = rig.wait_rows("ask", 1).await.remove(0);
        assert_eq!(r.status, Status::Failed, "{r:#?}");
        assert!(
            r.reason
                .as_deref()
                .is_some_and(|w| w.starts_with("tool definitions changed mid-run (srv changed")),
            "{r:#?}"
        );
        assert_eq!(
            fake.request_count(),
            1,
            "case {i}: the second turn is neither reserved nor sent"
        );
        assert_eq!((r.turns, r.tool_calls), (Some(1), Some(1)), "{r:#?}");
        // Only the one turn is spent: 10 in + 5 out at $1/M each.
        assert!((r.cost_usd - 15e-6).abs() < 1e-12, "{}", r.cost_usd);
        let spend = rig.store.spend("ask", rig.now()).unwrap();
        assert!(
            (spend.global_usd - 15e-6).abs() < 1e-12,
            "nothing stays reserved: {spend:?}"
        );
        rig.stop().await;
    }
}

/// A server still busy with a call that timed out (one thread: it reads nothing until it
/// answers) cannot be listed again before the next turn: the run ends saying so — not that its
/// tools changed, which would send the operator to review a change that does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_still_busy_with_a_timed_out_call_ends_the_run_saying_so() {
    let Some(servers) = TestServers::find() else {
        return;
    };
    let fake = FakeLlm::openai(
        KEY,
        vec![
            Reply::tools(vec![FakeCall::new("srv__a", json!({}))], 10, 5),
            Reply::ok("done", 10, 1),
        ],
    )
    .await
    .unwrap();
    let env = HashMap::from([("TEST_KEY".to_string(), KEY.to_string())]);
    let lookup = env.clone();
    let yaml = changing_yaml(
        &fake.base_url(),
        &servers.py_argv("hostile.py", &["stall"]),
        "a",
    )
    .replace(
        "max_tokens: 100\n",
        "max_tokens: 100\n    tool_timeout_seconds: 2\n",
    );
    let rig = Rig::start(
        "tool-stalls",
        &yaml,
        RigOpts {
            env,
            tools: Some(Arc::new(Sources::new(Arc::new(move |k: &str| {
                lookup.get(k).cloned()
            })))),
            ..Default::default()
        },
    )
    .await;
    let r = rig.wait_rows("ask", 1).await.remove(0);
    assert_eq!(r.status, Status::Failed, "{r:#?}");
    let reason = r.reason.as_deref().unwrap_or_default();
    assert!(
        reason.starts_with(
            "tool source 'srv': it did not answer tools/list within 2s before the next turn"
        ),
        "{reason}"
    );
    assert!(!reason.contains("changed"), "{reason}");
    assert_eq!(fake.request_count(), 1, "the second turn is not sent");
    rig.stop().await;
}

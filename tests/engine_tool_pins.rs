//! Tool pinning through the engine: a run's first use pins its MCP tools in the store, a
//! changed definition fails the next run before the model is called, and accepting the new
//! definition lets runs go on.
#![allow(clippy::unwrap_used)] // test code

mod engine_support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cronsole::model::Status;
use cronsole::testkit::internals::action::tools::pin;
use cronsole::testkit::internals::action::tools::{
    BoxFuture, ToolError, Toolbox, ToolboxBuilder, ToolboxRequest,
};
use cronsole::testkit::llm::{FakeLlm, Reply};
use cronsole::testkit::tools::{MemorySource, text_output, toolbox};
use engine_support::*;
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

//! Tool processes of a run started the way the binary starts them: through the zygote's
//! supervisor (a stdio server's stdin handed down as a fourth descriptor). A stdio server and
//! a command tool answer over their pipes, and closing the toolbox ends the server's process.
#![allow(clippy::unwrap_used)] // test code

use std::sync::Arc;
use std::time::Duration;

use cronsole::testkit::internals::action::tools::toolbox::build;
use cronsole::testkit::internals::action::tools::{Content, ToolboxRequest};
use cronsole::testkit::internals::proc::ProcEnv;
use cronsole::testkit::mcp::TestServers;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_servers_and_command_tools_run_under_the_supervisor_and_end_with_the_toolbox() {
    let Some(servers) = TestServers::find() else {
        return;
    };
    cronsole::testkit::internals::proc::use_supervisor(env!("CARGO_BIN_EXE_cronsole").into());
    let text = format!(
        "mcp_servers:\n  py:\n    command: {:?}\ntools:\n  cat:\n    description: echoes stdin\n    command: [cat]\nagents:\n  ops:\n    model: m\n    tools: [py.env, cat]\njobs:\n  - name: j\n    schedule: every 1h\n    agent: ops\n    message: go\n",
        servers.py_stdio_argv()
    );
    let file = cronsole::config::load_str(&text, std::path::Path::new("jobs.yaml"))
        .unwrap_or_else(|e| panic!("{e}"))
        .file;
    let proc_env = ProcEnv {
        stall_limit: Some(Duration::from_secs(15)),
        ..ProcEnv::default()
    };
    let tb = build(
        ToolboxRequest {
            settings: &file.settings,
            job: &file.jobs[0],
            agent: &file.settings.agents["ops"],
            proc_env: &proc_env,
        },
        Arc::new(|n: &str| std::env::var(n).ok()),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        cronsole::testkit::internals::proc::zygote_pid().is_some(),
        "started through the zygote"
    );
    let t = Duration::from_secs(30);
    let out = tb.call("cat", json!({"a": 1}), t).await.unwrap().unwrap();
    assert_eq!(
        out.content,
        vec![Content::Text {
            text: r#"{"a":1}"#.into()
        }]
    );
    let out = tb
        .call("py__env", json!({"name": "X"}), t)
        .await
        .unwrap()
        .unwrap();
    let Content::Text { text } = &out.content[0] else {
        panic!("{out:?}");
    };
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let pid = v["pid"].as_i64().expect("pid");
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    tb.close().await;
    cronsole::testkit::wait::wait_until_async(
        format!("the server {pid} to end with its toolbox"),
        Duration::from_secs(10),
        || !std::path::Path::new(&format!("/proc/{pid}")).exists(),
    )
    .await;
}

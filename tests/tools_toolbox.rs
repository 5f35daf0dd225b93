//! A run's toolbox built from a jobs file with real sources: the Python SDK's server over stdio
//! and over streamable HTTP, and command tools. Offered = allowed ∩ listed, exactly; a missing
//! tool, an unreachable server or an unset secret fails the build naming it; a tool process sees
//! only PATH, HOME, LANG, TZ and what its entry declares; a command tool gets the model's
//! arguments as JSON on stdin and in CRONSOLE_TOOL_ARGS, and a non-zero exit is an error result.
//!
//! These run the library without the supervisor (stdio children in their own process group);
//! the binary's supervised path is covered by the engine and owner-kill tests.
#![allow(clippy::unwrap_used)] // test code

use std::sync::Arc;
use std::time::Duration;

use cronsole::config;
use cronsole::testkit::internals::action::tools::toolbox::{EnvLookup, build};
use cronsole::testkit::internals::action::tools::{Content, ToolError, Toolbox, ToolboxRequest};
use cronsole::testkit::internals::proc::ProcEnv;
use cronsole::testkit::mcp::TestServers;
use serde_json::{Value, json};

const SECRET: &str = "tok-9f8e7d6c5b4a";

fn env() -> EnvLookup {
    Arc::new(|name: &str| match name {
        "PY_TOKEN" => Some(SECRET.to_string()),
        "OPENAI_API_KEY" => Some("sk-provider-key-never-given".to_string()),
        other => std::env::var(other).ok(),
    })
}

fn jobs_file(servers: &TestServers, http_url: &str, agent_tools: &str, job_tools: &str) -> String {
    let py = servers.py_stdio_argv();
    format!(
        r#"mcp_servers:
  py:
    command: {py:?}
    env: {{ LEVEL: "3" }}
    env_from: {{ PY_SECRET: PY_TOKEN }}
  web:
    url: {http_url}
tools:
  shout:
    description: "Upper-cases the text it is given"
    parameters: {{ type: object, properties: {{ text: {{ type: string }} }}, required: [text] }}
    command: "cat; printf '\n%s' \"$CRONSOLE_TOOL_ARGS\" | tr a-z A-Z"
  envdump:
    description: "Prints its environment"
    command: [env]
    env: {{ MINE: yes }}
  boom:
    description: "Fails"
    command: "echo broken >&2; exit 3"
agents:
  ops:
    model: m
    tools: {agent_tools}
jobs:
  - name: j
    schedule: every 1h
    agent: ops
    message: go
{job_tools}"#
    )
}

async fn toolbox(text: &str) -> Result<Toolbox, ToolError> {
    let loaded =
        config::load_str(text, std::path::Path::new("jobs.yaml")).unwrap_or_else(|e| panic!("{e}"));
    let file = loaded.file;
    let job = &file.jobs[0];
    let agent = &file.settings.agents["ops"];
    let proc_env = ProcEnv::default();
    build(
        ToolboxRequest {
            settings: &file.settings,
            job,
            agent,
            proc_env: &proc_env,
        },
        env(),
    )
    .await
}

fn text(out: &cronsole::testkit::internals::action::tools::ToolOutput) -> String {
    out.content
        .iter()
        .map(|c| match c {
            Content::Text { text } => text.clone(),
            other => format!("{other:?}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offered_is_exactly_allowed_and_listed_and_tools_get_only_their_env() {
    let Some(servers) = TestServers::find() else {
        return;
    };
    let http = servers.py_http();
    let text_ = jobs_file(
        &servers,
        &http.url(),
        "[py.echo, py.env, \"web.*\", shout, envdump, boom]",
        "",
    );
    let tb = toolbox(&text_).await.unwrap();
    let names: Vec<&str> = tb.offered.iter().map(|o| o.qualified.as_str()).collect();
    assert_eq!(
        names,
        vec![
            "boom",
            "envdump",
            "py.echo",
            "py.env",
            "shout",
            "web.add",
            "web.chatty",
            "web.echo",
            "web.env",
            "web.fail",
            "web.picture",
            "web.retitle",
            "web.slow"
        ]
    );
    let wire: Vec<&str> = tb.offered.iter().map(|o| o.wire_name.as_str()).collect();
    assert!(
        wire.contains(&"py__echo") && wire.contains(&"web__slow"),
        "{wire:?}"
    );
    let t = Duration::from_secs(30);

    // The stdio server sees PATH/HOME/LANG/TZ and its own env and env_from, nothing else.
    let out = tb
        .call("py__env", json!({"name": "PY_SECRET"}), t)
        .await
        .unwrap()
        .unwrap();
    let s: Value = out
        .structured
        .clone()
        .unwrap_or_else(|| serde_json::from_str(&text(&out)).unwrap_or(Value::Null));
    let names: Vec<String> =
        serde_json::from_value(s["names"].clone()).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    for n in &names {
        assert!(
            [
                "PATH",
                "HOME",
                "LANG",
                "TZ",
                "LEVEL",
                "PY_SECRET",
                "LC_CTYPE"
            ]
            .contains(&n.as_str()),
            "unexpected variable {n} in {names:?}"
        );
    }
    assert!(names.contains(&"PY_SECRET".to_string()));
    assert!(!names.iter().any(|n| n == "OPENAI_API_KEY"));
    // The secret the server got never comes back to the model or the record unredacted.
    let shown = format!("{out:?}");
    assert!(!shown.contains(SECRET), "{shown}");

    // A command tool: arguments on stdin and in CRONSOLE_TOOL_ARGS, not in the command line.
    let out = tb
        .call("shout", json!({"text": "hi; rm -rf /"}), t)
        .await
        .unwrap()
        .unwrap();
    assert!(!out.is_error, "{out:?}");
    let got = text(&out);
    assert!(got.starts_with(r#"{"text":"hi; rm -rf /"}"#), "{got}");
    assert!(got.ends_with(r#"{"TEXT":"HI; RM -RF /"}"#), "{got}");
    let out = tb.call("envdump", json!({}), t).await.unwrap().unwrap();
    let dump = text(&out);
    assert!(dump.contains("MINE=yes"), "{dump}");
    assert!(!dump.contains("OPENAI_API_KEY"), "{dump}");
    assert!(
        !dump.contains("CARGO"),
        "cronsole's own variables never reach a tool: {dump}"
    );
    let out = tb.call("boom", json!({}), t).await.unwrap().unwrap();
    assert!(out.is_error);
    assert!(text(&out).contains("exited with code 3"), "{}", text(&out));
    assert!(text(&out).contains("broken"), "{}", text(&out));
    // A name that was not offered is never dispatched.
    assert!(tb.call("py__fail", json!({"why": "x"}), t).await.is_none());
    tb.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_narrows_and_a_missing_tool_or_source_fails_naming_it() {
    let Some(servers) = TestServers::find() else {
        return;
    };
    let http = servers.py_http();
    let text_ = jobs_file(
        &servers,
        &http.url(),
        "[\"py.*\", shout]",
        "    tools: [py.echo]\n",
    );
    let tb = toolbox(&text_).await.unwrap();
    let names: Vec<&str> = tb.offered.iter().map(|o| o.qualified.as_str()).collect();
    assert_eq!(names, vec!["py.echo"]);
    tb.close().await;

    let text_ = jobs_file(&servers, &http.url(), "[py.echo, py.nope]", "");
    let e = toolbox(&text_).await.err().expect("a missing tool fails");
    assert_eq!(
        e.to_string(),
        "tool source 'py': allowed tool py.nope is not among the tools it lists"
    );

    let text_ = jobs_file(&servers, "http://127.0.0.1:9/mcp", "[web.echo]", "");
    let e = toolbox(&text_)
        .await
        .err()
        .expect("an unreachable server fails");
    assert!(
        matches!(&e, ToolError::Unreachable { source_name, .. } if source_name == "web"),
        "{e}"
    );

    let mut text_ = jobs_file(&servers, &http.url(), "[py.echo]", "");
    text_ = text_.replace("PY_TOKEN", "PY_TOKEN_UNSET");
    let e = toolbox(&text_).await.err().expect("an unset secret fails");
    assert_eq!(
        e.to_string(),
        "tool source 'py' is unreachable: env_from: environment variable PY_TOKEN_UNSET (for \
         PY_SECRET) is not set"
    );
}

/// A stdio server that exits at once printing its own secret: the reason gives its stderr once,
/// redacted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_dies_at_start_gives_its_stderr_once_redacted() {
    let text_ = r#"mcp_servers:
  bad:
    command: [sh, -c, 'read line; echo "fatal: bad token $PY_SECRET" >&2; exit 1']
    env_from: { PY_SECRET: PY_TOKEN }
    protocol_version: "2025-06-18"
agents:
  ops:
    model: m
    tools: [bad.echo]
jobs:
  - name: j
    schedule: every 1h
    agent: ops
    message: go
"#;
    let e = toolbox(text_)
        .await
        .err()
        .expect("the server fails")
        .to_string();
    assert_eq!(e.matches("(its stderr: ").count(), 1, "{e}");
    assert!(e.contains("fatal: bad token [redacted]"), "{e}");
    assert!(!e.contains(SECRET), "{e}");
}

/// A server that speaks both eras but answers its first request after the SDK's 10 s wait for
/// the discovery: it took the discovery as its era and refuses the handshake sent after it.
/// The toolbox starts it once more in the 2026-07-28 era, and the run gets its tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_slow_to_answer_the_discovery_is_started_again_in_its_era() {
    let Some(servers) = TestServers::find() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let once = dir.path().join("slow-start-done");
    let jobs = format!(
        r#"mcp_servers:
  py:
    command: {py:?}
    env: {{ SLOW_START_ONCE: {once:?}, SLOW_START_SECONDS: "11" }}
agents:
  ops:
    model: m
    tools: [py.echo]
jobs:
  - name: j
    schedule: every 1h
    agent: ops
    message: go
"#,
        py = servers.py_stdio_argv(),
        once = once.display().to_string(),
    );
    let tb = toolbox(&jobs).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(once.exists(), "the first start waited");
    let names: Vec<&str> = tb.offered.iter().map(|o| o.qualified.as_str()).collect();
    assert_eq!(names, vec!["py.echo"]);
    let out = tb
        .call(
            "py__echo",
            json!({"text": "still here"}),
            Duration::from_secs(30),
        )
        .await
        .unwrap()
        .unwrap();
    assert!(text(&out).contains("still here"), "{}", text(&out));
}

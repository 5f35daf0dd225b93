//! Agents with tools through the real binary, against real MCP servers really started (the
//! Python SDK's server and `@modelcontextprotocol/server-everything`, installed by
//! `.ci/mcp-servers`) and the scripted loopback model:
//! - `cronsole tools` lists servers, protocol versions, tools, pins and what each agent is
//!   offered; `--accept` pins; an unreachable server is named without its secret;
//! - a run calls an MCP tool of each server and a command tool, and no secret it read (the
//!   provider key, a server's `env_from` value) reaches the row, the transcript, stdout, the
//!   logs or the model, while the server did get its own secret;
//! - a model that repeats the tools' secrets in its text and in its calls' arguments leaves
//!   them in no row, transcript, run record, log or command output, an abandoned run's included;
//! - `kill -9` of the owner in the middle of a tool call, 10 times: the run's stdio server and
//!   its command tool die with it every time, and the tool was started once;
//! - a run's stdio server and command tool also end with the run when it succeeds, when its
//!   timeout cuts it and when an operator cancels it;
//! - a call awaiting approval whose owner was killed is marked in `approvals`; `approve` of it
//!   refuses when that owner is gone for good, or records the answer and exits 3 when it may
//!   come back; `cancel` of it says no live owner holds it;
//! - an operator whose clock is an hour off judges a waiting call's owner on the store's clock:
//!   listed live, cancelled and approved as on the right clock;
//! - the approval alert reaches the job's webhook, and approvals racing the timeout are used
//!   or refused, never dropped.
#![allow(clippy::unwrap_used)] // test code

mod owner_support;
mod support;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use cronsole::model::{HistoryRow, Status};

use cronsole::testkit::llm::{FakeCall, FakeLlm, Reply};
use cronsole::testkit::mcp::TestServers;
use serde_json::{Value, json};
use support::approval::rows;
use support::pids::alive;
use support::wait::poll_for;

const KEY: &str = "sk-PROVIDER-5f3a9c0d2e7b41aa";
const TOOL_SECRET: &str = "tool-secret-8d1e44c2b9a07f36";

fn yaml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// The jobs file: both real servers, a command tool, one agent allowed a few of their tools.
fn jobs_yaml(servers: &TestServers, base_url: &str) -> String {
    let py = servers.py_stdio_argv();
    let every = servers.everything_argv();
    let argv = |v: &[String]| v.iter().map(|a| yaml_str(a)).collect::<Vec<_>>().join(", ");
    format!(
        "budget: null
pricing:
  m: {{ input: 1.0, output: 1.0 }}
mcp_servers:
  py:
    command: [{py}]
    env_from: {{ PY_TOKEN: TOOL_SECRET }}
  everything:
    command: [{every}]
    protocol_version: \"2025-11-25\"
tools:
  args_back:
    description: Says back the arguments it got
    parameters: {{ type: object, properties: {{ word: {{ type: string }} }}, required: [word] }}
    command: [sh, -c, 'printf \"stdin=%s env=%s\" \"$(cat)\" \"$CRONSOLE_TOOL_ARGS\"']
agents:
  ops:
    provider: openai
    base_url: {base_url}
    api_key_env: PROVIDER_KEY
    model: m
    instructions: use the tools
    tools: [py.env, \"everything.*\", args_back]
jobs:
  - name: ask
    schedule: every 1h
    run_immediately: true
    agent: ops
    message: look around
",
        py = argv(&py),
        every = argv(&every),
    )
}

fn cli(dir: &Path, args: &[&str]) -> (i32, String, String) {
    support::cli::output(
        support::cli::cronsole(dir)
            .env("PROVIDER_KEY", KEY)
            .env("TOOL_SECRET", TOOL_SECRET)
            .args(["--store", "store"])
            .args(args),
    )
}

/// Every text file under `dir`, with its path.
fn texts(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(b) = std::fs::read(&p) {
                out.push((
                    p.display().to_string(),
                    String::from_utf8_lossy(&b).into_owned(),
                ));
            }
        }
    }
    out
}

/// Waits (bounded) for `job`'s first row.
async fn first_row(store: &Path, job: &str, limit: Duration) -> HistoryRow {
    let mut row = None;
    cronsole::testkit::wait::wait_until_async(format!("a row of {job}"), limit, || {
        row = rows(store, job).pop();
        row.is_some()
    })
    .await;
    row.unwrap()
}

fn stop(owner: Child) -> (String, String) {
    // SIGTERM: a graceful stop, so the logs are flushed.
    let _ = std::process::Command::new("kill")
        .arg(owner.id().to_string())
        .status();
    let out = owner.wait_with_output().unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `cronsole run` of `dir`'s `jobs.yaml` and `store` for `limit`, with the provider's key and
/// `envs` set; where its output goes is the caller's.
fn owner_cmd(dir: &Path, envs: &[(&str, &str)], limit: &str) -> std::process::Command {
    let mut c = support::cli::cronsole(dir);
    c.env("PROVIDER_KEY", KEY)
        .envs(envs.iter().copied())
        .args(["run", "--jobs", "jobs.yaml", "--store", "store"])
        .args(["--for", limit]);
    c
}

/// An owner as [`owner_cmd`] makes it, its stdout and stderr both in the file `log` of `dir`.
fn owner_to_log(dir: &Path, envs: &[(&str, &str)], log: &str, limit: &str) -> Child {
    let log = std::fs::File::create(dir.join(log)).unwrap();
    owner_cmd(dir, envs, limit)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// An owner (debug logging, `envs` set) runs `dir`'s jobs file until `ask` has a row, and is
/// stopped: that row, and the owner's stdout and stderr.
async fn first_ask(dir: &Path, envs: &[(&str, &str)]) -> (HistoryRow, String, String) {
    let owner = owner_cmd(dir, envs, "120s")
        .env("RUST_LOG", "debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let row = first_row(&dir.join("store"), "ask", Duration::from_secs(90)).await;
    let (stdout, stderr) = tokio::task::spawn_blocking(move || stop(owner))
        .await
        .unwrap();
    (row, stdout, stderr)
}

/// A scripted model whose first reply asks for `calls` (billed `asked` tokens in and out) and
/// whose second answers `answer` (billed `answered`).
async fn calls_then(
    calls: Vec<FakeCall>,
    asked: (i64, i64),
    answer: &str,
    answered: (i64, i64),
) -> FakeLlm {
    let script = vec![
        Reply::tools(calls, asked.0, asked.1),
        Reply::ok(answer, answered.0, answered.1),
    ];
    FakeLlm::openai(KEY, script).await.unwrap()
}

/// The tool named `name` among those the model was offered in `request`.
fn offered(request: &Value, name: &str) -> Value {
    request["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == name)
        .unwrap_or_else(|| panic!("{name} not offered: {request:#}"))
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cronsole_tools_lists_real_servers_and_accept_pins() {
    let Some(servers) = TestServers::find() else {
        return;
    };
    let dir = support::tempdir("tools-cli");
    let mut yaml = jobs_yaml(&servers, "http://127.0.0.1:9/v1");
    // A server that cannot be reached, whose header secret must never show.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    yaml = yaml.replace(
        "tools:\n  args_back:",
        &format!(
            "  gone:\n    url: http://127.0.0.1:{port}/mcp\n    headers_env: {{ Authorization: TOOL_SECRET }}\ntools:\n  args_back:"
        ),
    );
    std::fs::write(dir.join("jobs.yaml"), &yaml).unwrap();
    let d = dir.to_path_buf();
    let run = move |args: Vec<&'static str>| {
        let d = d.clone();
        tokio::task::spawn_blocking(move || cli(&d, &args))
    };
    let (c, _, err) = run(vec!["apply", "jobs.yaml"]).await.unwrap();
    assert_eq!(c, 0, "{err}");

    let (c, out, err) = run(vec!["tools", "--json"]).await.unwrap();
    assert_eq!(c, 1, "an unreachable server makes the exit 1: {err}");
    let r: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let server = |n: &str| {
        r["servers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == n)
            .cloned()
            .unwrap_or_else(|| panic!("no server {n}: {r:#}"))
    };
    let everything = server("everything");
    assert_eq!(everything["protocol_version"], "2025-11-25");
    assert_eq!(everything["transport"], "stdio");
    let py = server("py");
    let v = py["protocol_version"].as_str().unwrap();
    assert!(["2026-07-28", "2025-11-25"].contains(&v), "{v}");
    let env_tool = py["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "py.env")
        .unwrap()
        .clone();
    assert_eq!(env_tool["pin"], "new");
    assert_eq!(env_tool["hash"].as_str().unwrap().len(), 64);
    let gone = server("gone");
    let e = gone["error"].as_str().unwrap();
    assert!(e.contains("unreachable"), "{e}");
    let agent = &r["agents"][0];
    assert_eq!(agent["name"], "ops");
    let offered: Vec<&str> = agent["offered"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(offered.contains(&"py.env"), "{offered:?}");
    assert!(offered.contains(&"args_back"), "{offered:?}");
    assert!(offered.contains(&"everything.echo"), "{offered:?}");
    assert!(!offered.contains(&"py.echo"), "not allowed: {offered:?}");
    assert!(!out.contains(TOOL_SECRET) && !err.contains(TOOL_SECRET));

    let (c, out, err) = run(vec!["tools", "--accept", "py"]).await.unwrap();
    assert_eq!(c, 0, "{out}{err}");
    assert!(out.contains("py: pinned"), "{out}");
    let (_, out, _) = run(vec!["tools", "--agent", "ops"]).await.unwrap();
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with("py.env "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains(" pinned "), "{line}");
    assert!(out.contains("agent ops"), "{out}");
    // A definition that no longer matches its pin: `tools` says `changed` (exit 1), and
    // `dry-run` says the run would stop on it, writing nothing.
    {
        let store = cronsole::store::file::FileStore::open(&dir.join("store")).unwrap();
        let mut pins = cronsole::store::Store::tool_pins(&store, &["py".into()]).unwrap();
        let env = pins.iter_mut().find(|p| p.tool == "env").unwrap();
        env.hash = "0".repeat(64);
        cronsole::store::Store::accept_tools(&store, "py", &pins).unwrap();
    }
    let (c, out, _) = run(vec!["tools", "--agent", "ops"]).await.unwrap();
    assert_eq!(c, 1, "{out}");
    assert!(out.contains("changed: py.env"), "{out}");
    let (c, out, err) = run(vec!["dry-run", "ask", "--json"]).await.unwrap();
    assert_eq!(c, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["would_run"], false, "{v:#}");
    assert!(
        v["tools_error"]
            .as_str()
            .unwrap_or_default()
            .starts_with("tool definition changed: py.env;"),
        "{v:#}"
    );
    let (c, _, err) = run(vec!["tools", "--accept", "nope"]).await.unwrap();
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("no MCP server named 'nope'"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_calls_real_servers_and_a_command_tool_and_no_secret_shows_anywhere() {
    let Some(servers) = TestServers::find() else {
        return;
    };
    let fake = calls_then(
        vec![
            FakeCall::new("py__env", json!({"name": "PY_TOKEN"})),
            FakeCall::new("everything__echo", json!({"message": "hi there"})),
            FakeCall::new("args_back", json!({"word": "plain; $(rm -rf /)"})),
        ],
        (100, 20),
        "all done",
        (200, 10),
    )
    .await;
    let dir = support::tempdir("tools-run");
    std::fs::write(dir.join("jobs.yaml"), jobs_yaml(&servers, &fake.base_url())).unwrap();
    let (row, stdout, stderr) = first_ask(&dir, &[("TOOL_SECRET", TOOL_SECRET)]).await;
    assert_eq!(row.status, Status::Succeeded, "{row:#?}\n{stderr}");
    assert_eq!(row.result.as_deref(), Some("all done"));
    assert_eq!((row.turns, row.tool_calls), (Some(2), Some(3)));

    // What the model got back: each tool's result, the secret redacted.
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    let second = reqs[1].json().unwrap();
    let msgs = second["messages"].as_array().unwrap();
    let tool_text = |id: &str| -> String {
        msgs.iter()
            .find(|m| m["tool_call_id"] == id)
            .map(|m| m["content"].to_string())
            .unwrap_or_else(|| panic!("no result {id}: {msgs:#?}"))
    };
    let env = tool_text("call_0");
    // The server got its own secret (its value came back, redacted) and no provider key.
    assert!(env.contains("PY_TOKEN"), "{env}");
    assert!(!env.contains("PROVIDER_KEY"), "{env}");
    assert!(
        !env.contains("TOOL_SECRET"),
        "only declared variables: {env}"
    );
    assert!(
        !env.contains("\"value\": null") && !env.contains("\\\"value\\\":null"),
        "{env}"
    );
    assert!(tool_text("call_1").contains("hi there"));
    let args = tool_text("call_2");
    assert!(
        args.contains("stdin={") && args.contains("env={") && args.contains("$(rm -rf /)"),
        "arguments reach the command as data: {args}"
    );

    // `describe` shows what the run pinned, from the store, without connecting.
    let d = dir.to_path_buf();
    let (c, out, err) =
        tokio::task::spawn_blocking(move || cli(&d, &["describe", "ask", "--json"]))
            .await
            .unwrap();
    assert_eq!(c, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let names: Vec<&str> = v["tools"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{v:#}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"py.env") && names.contains(&"args_back"),
        "{names:?}"
    );
    assert!(names.contains(&"everything.echo"), "{names:?}");
    assert_eq!(v["tools"]["unpinned"], json!([]));
    assert!(v["tools"]["definition_tokens"].as_u64().unwrap() > 0);

    // No secret anywhere: requests to the model, the row, stdout/stderr, every store file
    // (history, logs).
    let mut places: Vec<(String, String)> = texts(&dir);
    places.push(("stdout".into(), stdout));
    places.push(("stderr".into(), stderr));
    places.push(("row".into(), serde_json::to_string(&row).unwrap()));
    for (i, r) in reqs.iter().enumerate() {
        places.push((format!("model request {i}"), r.json().unwrap().to_string()));
    }
    for (where_, text) in &places {
        assert!(!text.contains(TOOL_SECRET), "the tool secret in {where_}");
        if !where_.ends_with("jobs.yaml") {
            assert!(!text.contains(KEY), "the provider key in {where_}");
        }
    }
}

/// The pids written by `file` (one per line).
fn pids(file: &Path) -> Vec<i32> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_the_owner_mid_call_leaves_no_tool_process_ten_times() {
    const CYCLES: usize = 10;
    let Some(servers) = TestServers::find() else {
        return;
    };
    let script = (0..CYCLES)
        .map(|_| Reply::tools(vec![FakeCall::new("hold", json!({"seconds": 30}))], 10, 5))
        .collect();
    let fake = FakeLlm::openai(KEY, script).await.unwrap();
    let py: Vec<String> = servers.py_stdio_argv();
    let mut orphans = Vec::new();
    for cycle in 0..CYCLES {
        let dir = support::tempdir("tools-kill");
        // The server writes its pid before it becomes the Python server (exec keeps the pid).
        let server = format!(
            "echo $$ > mcp.pid; exec {}",
            py.iter()
                .map(|a| format!("'{a}'"))
                .collect::<Vec<_>>()
                .join(" ")
        );
        let yaml = format!(
            "budget: null
pricing:
  m: {{ input: 1.0, output: 1.0 }}
mcp_servers:
  py:
    command: [sh, -c, {server}]
tools:
  hold:
    description: Holds
    parameters: {{ type: object }}
    command: [sh, -c, 'echo $$ >> tool.pids; exec sleep 30']
    timeout_seconds: 60
agents:
  ops:
    provider: openai
    base_url: {}
    api_key_env: PROVIDER_KEY
    model: m
    tools: [py.echo, hold]
jobs:
  - name: hold
    schedule: every 1h
    run_immediately: true
    agent: ops
    message: hold on
",
            fake.base_url(),
            server = yaml_str(&server),
        );
        std::fs::write(dir.join("jobs.yaml"), yaml).unwrap();
        let mut owner = owner_logging(&dir, "owner.log", "120s");
        let d = dir.to_path_buf();
        let (tool, server) = tokio::task::spawn_blocking(move || {
            let tool = poll_for(Duration::from_secs(90), || {
                pids(&d.join("tool.pids")).first().copied()
            });
            (tool, pids(&d.join("mcp.pid")).first().copied())
        })
        .await
        .unwrap();
        let (Some(tool), Some(server)) = (tool, server) else {
            let _ = owner.kill();
            let _ = owner.wait();
            panic!(
                "cycle {cycle}: the tool call never started; rows {:#?}; owner's output:\n{}",
                rows(&dir.join("store"), "hold"),
                std::fs::read_to_string(dir.join("owner.log")).unwrap_or_default()
            );
        };
        assert!(
            alive(tool) && alive(server),
            "cycle {cycle}: alive before the kill"
        );
        owner.kill().unwrap(); // SIGKILL
        owner.wait().unwrap();
        let d = dir.to_path_buf();
        let left = tokio::task::spawn_blocking(move || {
            poll_for(Duration::from_secs(10), || {
                (!alive(tool) && !alive(server)).then_some(())
            });
            let left: Vec<i32> = [tool, server].into_iter().filter(|p| alive(*p)).collect();
            (left, pids(&d.join("tool.pids")).len())
        })
        .await
        .unwrap();
        let (left, started) = left;
        assert_eq!(
            started, 1,
            "cycle {cycle}: the tool was started {started} times"
        );
        orphans.extend(left);
    }
    for p in &orphans {
        let _ = std::process::Command::new("kill")
            .args(["-9", &p.to_string()])
            .status();
    }
    assert!(
        orphans.is_empty(),
        "processes outlived their owner: {orphans:?}"
    );
    assert_eq!(fake.requests().len(), CYCLES, "one model request per cycle");
}

/// The worked example of the agent-tools guide page, as written there.
fn guide_example() -> String {
    let page = include_str!("../docs/guide/agent-tools.md");
    let start = page
        .find("<!-- worked-example -->")
        .expect("the example's opening marker");
    let end = page
        .find("<!-- /worked-example -->")
        .expect("its closing marker");
    let block = &page[start..end];
    let body = block
        .split_once("```yaml\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .map(|(yaml, _)| yaml)
        .expect("a yaml block between the markers");
    body.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guides_worked_example_validates_and_runs_against_the_real_server() {
    let yaml = guide_example();
    let dir = support::tempdir("tools-guide");
    std::fs::write(dir.join("agent-tools.yaml"), &yaml).unwrap();
    let d = dir.to_path_buf();
    let (c, out, err) = tokio::task::spawn_blocking(move || {
        support::cli::output(
            support::cli::cronsole(&d)
                .env("OPENAI_API_KEY", KEY)
                .args(["validate", "agent-tools.yaml"]),
        )
    })
    .await
    .unwrap();
    assert_eq!(
        c, 0,
        "the guide's example must validate as written:\n{out}{err}"
    );
    let Some(servers) = TestServers::find() else {
        return;
    };
    // The same package and version the tests install (never fetched at test time), and the
    // scripted model in place of the provider.
    let lock = include_str!("mcp_servers/package.json");
    let version = lock
        .split("\"@modelcontextprotocol/server-everything\": \"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("the pinned version");
    let npx = format!("[npx, -y, \"@modelcontextprotocol/server-everything@{version}\", stdio]");
    assert!(
        yaml.contains(&npx),
        "the guide names the version the tests install: {npx}"
    );
    let argv: Vec<String> = servers
        .everything_argv()
        .iter()
        .map(|a| yaml_str(a))
        .collect();
    let fake = calls_then(
        vec![
            FakeCall::new("everything__get-sum", json!({"a": 19, "b": 23})),
            FakeCall::new("disk_free", json!({"path": "/tmp"})),
        ],
        (300, 30),
        "42; plenty of space",
        (400, 10),
    )
    .await;
    let local = yaml
        .replace(&npx, &format!("[{}]", argv.join(", ")))
        .replace(
            "    provider: openai\n",
            &format!("    provider: openai\n    base_url: {}\n", fake.base_url()),
        );
    std::fs::write(dir.join("agent-tools.yaml"), &local).unwrap();
    let owner = support::cli::cronsole(&dir)
        .env("OPENAI_API_KEY", KEY)
        .args(["run", "--jobs", "agent-tools.yaml", "--for", "120s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let row = first_row(
        &dir.join(".cronsole"),
        "space-and-sums",
        Duration::from_secs(90),
    )
    .await;
    let (_, stderr) = tokio::task::spawn_blocking(move || stop(owner))
        .await
        .unwrap();
    assert_eq!(row.status, Status::Succeeded, "{row:#?}\n{stderr}");
    assert_eq!((row.turns, row.tool_calls), (Some(2), Some(2)));
    let second = fake.requests()[1].json().unwrap();
    let results: Vec<String> = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].to_string())
        .collect();
    assert!(results[0].contains("42"), "{results:?}");
    assert!(results[1].contains("MiB free"), "{results:?}");
}

/// The secrets of the tools of this test's jobs file.
const CMD_SECRET: &str = "cmdtok-SEKRET-3b7e91c4";
const MCP_SECRET: &str = "mcptok-SEKRET-a06f2d58";

/// Two agents on two scripted models (their requests never interleave), a command tool and a
/// stdio MCP server each with an `env_from` secret, and a tool that holds its call.
fn leaking_yaml(leak_url: &str, hold_url: &str) -> String {
    let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_servers/hostile.py");
    format!(
        "budget: null
pricing:
  m: {{ input: 1.0, output: 1.0 }}
mcp_servers:
  h:
    command: [python3, {server}, plain]
    env_from: {{ H_TOKEN: MCP_SECRET_SRC }}
tools:
  args_back:
    description: Says back the arguments it got
    parameters: {{ type: object }}
    command: [sh, -c, 'printf \"args=%s token=%s\" \"$(cat)\" \"$CMD_TOKEN\"']
    env_from: {{ CMD_TOKEN: CMD_SECRET_SRC }}
  hang:
    description: Holds its call
    parameters: {{ type: object }}
    command: [sh, -c, 'echo $$ > hang.pid; exec sleep 300']
    timeout_seconds: 600
x-agent: &agent {{ provider: openai, api_key_env: PROVIDER_KEY, model: m, instructions: go }}
agents:
  leaker: {{ <<: *agent, base_url: {leak_url}, tools: [args_back, h.a] }}
  holder: {{ <<: *agent, base_url: {hold_url}, tools: [hang] }}
jobs:
  - {{ name: leak, schedule: every 1h, run_immediately: true, agent: leaker, message: go }}
  - name: held
    schedule: every 1h
    run_immediately: true
    agent: holder
    message: go
    lease_seconds: 1
    timeout_seconds: 600
",
        server = yaml_str(&server.display().to_string()),
    )
}

fn owner_logging(dir: &Path, log: &str, limit: &str) -> Child {
    let envs = [
        ("CMD_SECRET_SRC", CMD_SECRET),
        ("MCP_SECRET_SRC", MCP_SECRET),
        ("RUST_LOG", "debug"),
    ];
    owner_to_log(dir, &envs, log, limit)
}

/// A model that repeats the secrets of the tools it was offered — in its text and in its
/// calls' arguments, in a run that ends and in one whose owner is killed mid-call — leaves
/// them nowhere: not in the rows, their transcripts, the run records, the logs, `history`
/// (text and JSON) or `jobs --json`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_secrets_repeated_by_the_model_are_in_no_row_record_log_or_output() {
    let said = format!("{CMD_SECRET} and {MCP_SECRET}");
    let turn = |text: String, calls: Vec<FakeCall>| Reply::Tools {
        text,
        calls,
        usage: Some((10, 5)),
        cut: false,
    };
    let leak = FakeLlm::openai(
        KEY,
        vec![
            turn(
                format!("I read {said}"),
                vec![
                    FakeCall::new("args_back", json!({"word": said})),
                    FakeCall::new("h__a", json!({"q": said})),
                ],
            ),
            Reply::ok(&format!("leak: {said}"), 20, 5),
        ],
    )
    .await
    .unwrap();
    let hold = FakeLlm::openai(
        KEY,
        vec![turn(
            format!("holding {said}"),
            vec![FakeCall::new("hang", json!({"note": said}))],
        )],
    )
    .await
    .unwrap();
    let dir = support::tempdir("tools-leak");
    let yaml = leaking_yaml(&leak.base_url(), &hold.base_url());
    std::fs::write(dir.join("jobs.yaml"), yaml).unwrap();
    let store = dir.join("store");

    // Owner A: `leak` ends, `held` is killed with its call in flight.
    let mut a = owner_logging(&dir, "a.log", "120s");
    let leak_row = first_row(&store, "leak", Duration::from_secs(90)).await;
    let d = dir.to_path_buf();
    let hang = tokio::task::spawn_blocking(move || {
        poll_for(Duration::from_secs(60), || {
            pids(&d.join("hang.pid")).first().copied()
        })
    })
    .await
    .unwrap();
    a.kill().unwrap(); // SIGKILL
    a.wait().unwrap();
    let a_log = std::fs::read_to_string(dir.join("a.log")).unwrap_or_default();
    assert!(hang.is_some(), "the held call never started:\n{a_log}");
    assert_eq!(leak_row.status, Status::Succeeded, "{leak_row:#?}\n{a_log}");
    assert_eq!(
        leak_row.result.as_deref(),
        Some("leak: [redacted] and [redacted]")
    );
    assert_eq!(leak_row.tool_calls, Some(2));

    // Owner B recovers the killed run: an abandoned row with the call it made.
    let b = owner_logging(&dir, "b.log", "60s");
    let abandoned = first_row(&store, "held", Duration::from_secs(60)).await;
    tokio::task::spawn_blocking(move || stop(b)).await.unwrap();
    assert_eq!(abandoned.status, Status::Abandoned, "{abandoned:#?}");
    let calls: Vec<String> = cronsole::testkit::tools::calls(&abandoned)
        .into_iter()
        .map(|c| c.arguments)
        .collect();
    assert_eq!(calls.len(), 1, "{abandoned:#?}");
    assert!(calls[0].contains("[redacted]"), "{calls:?}");

    // The tools did get their secrets; the model got them back redacted.
    let second = leak.requests()[1].json().unwrap().to_string();
    assert!(second.contains("token=[redacted]"), "{second}");

    let mut places = texts(&dir);
    for args in [
        &["history", "--json"][..],
        &["history"],
        &["history", "--job", "held", "--json"],
        &["jobs", "--json"],
    ] {
        let d = dir.to_path_buf();
        let (code, out, err) = tokio::task::spawn_blocking(move || cli(&d, args))
            .await
            .unwrap();
        assert_eq!(code, 0, "{args:?}: {err}");
        places.push((format!("{args:?}"), format!("{out}\n{err}")));
    }
    let mut looked = 0;
    for (where_, text) in &places {
        if where_.ends_with("jobs.yaml") {
            continue;
        }
        looked += 1;
        for secret in [CMD_SECRET, MCP_SECRET, KEY] {
            assert!(!text.contains(secret), "{secret} in {where_}:\n{text}");
        }
    }
    assert!(
        looked > 6,
        "the store, both logs and four outputs: {places:?}"
    );
}

/// A stdio server whose program does not exist and an HTTP server on a port nobody listens on
/// fail their runs before the first model call, each reason naming the server, what was
/// started or reached, and why it failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_servers_fail_the_run_before_the_model_naming_server_target_and_cause() {
    let fake = FakeLlm::openai(KEY, vec![Reply::Forever(Box::new(Reply::ok("no", 1, 1)))])
        .await
        .unwrap();
    // A port that was free a moment ago: nothing listens there.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_at = format!("http://{}/", dead.local_addr().unwrap());
    let dead_url = format!("{dead_at}mcp");
    drop(dead);
    let dir = support::tempdir("tools-dead");
    std::fs::write(
        dir.join("jobs.yaml"),
        format!(
            "budget: null
pricing:
  m: {{ input: 1.0, output: 1.0 }}
mcp_servers:
  gone:
    command: [/nonexistent/bin/mcp-server-gone, --stdio]
  down:
    url: {dead_url}
x-agent: &agent {{ provider: openai, base_url: {base}, api_key_env: PROVIDER_KEY, model: m }}
agents:
  a: {{ <<: *agent, tools: [gone.read] }}
  b: {{ <<: *agent, tools: [down.search] }}
jobs:
  - {{ name: stdio, schedule: every 1h, run_immediately: true, agent: a, message: go }}
  - {{ name: http, schedule: every 1h, run_immediately: true, agent: b, message: go }}
",
            base = fake.base_url(),
        ),
    )
    .unwrap();
    let owner = owner_logging(&dir, "owner.log", "60s");
    let store = dir.join("store");
    let stdio = first_row(&store, "stdio", Duration::from_secs(60)).await;
    let http = first_row(&store, "http", Duration::from_secs(60)).await;
    tokio::task::spawn_blocking(move || stop(owner))
        .await
        .unwrap();
    assert_eq!(fake.request_count(), 0, "no model call");
    for (row, wants) in [
        (
            &stdio,
            &[
                "'gone'",
                "/nonexistent/bin/mcp-server-gone",
                "No such file or directory",
            ][..],
        ),
        // The URL as every message shows one: scheme, host and port, the path elided.
        (
            &http,
            &["'down'", dead_at.as_str(), "onnection refused"][..],
        ),
    ] {
        assert_eq!(row.status, Status::Failed, "{row:#?}");
        let reason = row.reason.clone().unwrap_or_default();
        for w in wants {
            assert!(reason.contains(w), "{w:?} not in {reason:?}");
        }
    }
}

/// An agent whose one tool needs approval; its secret comes from `TOOL_SECRET`.
fn gated_yaml(base_url: &str, lease_seconds: u32) -> String {
    support::approval::gated_yaml(
        base_url,
        "    env_from: { W_TOKEN: TOOL_SECRET }\n",
        &format!("    lease_seconds: {lease_seconds}\n"),
    )
}

/// An owner of `dir`'s jobs file and store for `limit`, logging to `log`.
fn gated_owner(dir: &Path, log: &str, limit: &str) -> Child {
    owner_to_log(dir, &[("TOOL_SECRET", TOOL_SECRET)], log, limit)
}

/// Waits (bounded) until `cronsole approvals --json` lists a call of a run other than
/// `not`; returns it.
async fn pending_call(dir: &Path, not: Option<&str>) -> Value {
    let (d, not) = (dir.to_path_buf(), not.map(str::to_owned));
    let found = tokio::task::spawn_blocking(move || {
        let mut last = String::new();
        let found = poll_for(Duration::from_secs(60), || {
            let (code, out, err) = cli(&d, &["approvals", "--json"]);
            // Until the owner created the store, there is nothing to list.
            assert!(code == 0 || err.contains("no cronsole store"), "{err}");
            let v: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
            last = out;
            v.as_array()
                .and_then(|a| a.iter().find(|p| p["run_id"].as_str() != not.as_deref()))
                .cloned()
        });
        found.ok_or(last)
    })
    .await
    .unwrap();
    found.unwrap_or_else(|out| {
        let logs: Vec<(String, String)> = texts(dir)
            .into_iter()
            .filter(|(p, _)| p.ends_with(".log"))
            .collect();
        panic!(
            "no call awaited approval: {out}; rows {:#?}; logs {logs:#?}",
            rows(&dir.join("store"), "gated")
        );
    })
}

/// `kill -9` of the owner while a call awaits approval: the run recovered by another owner is
/// an `abandoned` row that still shows the call it waited for (tool, redacted arguments,
/// `awaiting_approval`), and the tool never ran. A fresh run of the job waits anew (no
/// approval carries over), and a shutdown while it waits leaves the same trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_a_call_awaits_approval_leaves_the_call_on_the_abandoned_row() {
    let ask = || {
        Reply::tools(
            vec![FakeCall::new(
                "write",
                json!({"path": "/srv/report", "token": TOOL_SECRET}),
            )],
            10,
            5,
        )
    };
    let fake = FakeLlm::openai(KEY, vec![ask(), ask()]).await.unwrap();
    let dir = support::tempdir("tools-await-kill");
    std::fs::write(dir.join("jobs.yaml"), gated_yaml(&fake.base_url(), 1)).unwrap();
    let store = dir.join("store");
    let owner = |log: &str, limit: &str| gated_owner(&dir, log, limit);

    let mut a = owner("a.log", "120s");
    let first = pending_call(&dir, None).await;
    assert_eq!(first["tool"], "write", "{first}");
    let first_run = first["run_id"].as_str().unwrap().to_string();
    // The job's view says so at its top, in the JSON and in the table.
    let (_, jobs, _) = cli(&dir, &["jobs", "--json"]);
    let jobs: Value = serde_json::from_str(&jobs).unwrap();
    assert_eq!(jobs[0]["state"], "awaiting_approval", "{jobs}");
    assert_eq!(jobs[0]["awaiting_approval"]["run_id"], first_run.as_str());
    assert_eq!(jobs[0]["awaiting_approval"]["tool"], "write");
    let (_, table, _) = cli(&dir, &["jobs"]);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("gated") && l.contains(" awaiting_approval ")),
        "{table}"
    );
    assert_eq!(first["owner_live"], true, "{first}");
    a.kill().unwrap(); // SIGKILL
    a.wait().unwrap();
    // Its process is gone (and its 1 s lease runs out unrenewed): `approvals` says the owner
    // is not live.
    let gone = poll_for(Duration::from_secs(20), || {
        let (_, out, _) = cli(&dir, &["approvals", "--json"]);
        let v: Value = serde_json::from_str(&out).ok()?;
        let p = v.as_array()?.first()?.clone();
        (p["owner_live"] == false).then_some(p)
    })
    .expect("the killed owner's call is never marked");
    let why = gone["owner_gone"].as_str().unwrap();
    assert!(
        why.contains("is no longer running") || why.contains("stopped renewing the run's lease"),
        "{why}"
    );

    // Owner B recovers it; a run triggered then waits anew (nothing carries over); B stops
    // while it waits.
    let b = owner("b.log", "60s");
    let abandoned = first_row(&store, "gated", Duration::from_secs(60)).await;
    let (code, _, err) = cli(&dir, &["trigger", "gated"]);
    assert_eq!(code, 0, "{err}");
    let second = pending_call(&dir, Some(&first_run)).await;
    tokio::task::spawn_blocking(move || stop(b)).await.unwrap();
    let mut all = rows(&store, "gated");
    all.reverse();
    assert_eq!(all.len(), 2, "{all:#?}");
    assert_eq!(all[0].run_id, abandoned.run_id);
    assert_eq!(abandoned.run_id.to_string(), first_run);
    assert_eq!(
        all[1].run_id.to_string(),
        second["run_id"].as_str().unwrap()
    );
    assert_eq!(
        all[1].reason.as_deref(),
        Some("shutdown while awaiting approval")
    );
    for r in &all {
        assert_eq!(r.status, Status::Abandoned, "{r:#?}");
        let calls = cronsole::testkit::tools::calls(r);
        assert_eq!(calls.len(), 1, "{r:#?}");
        let c = &calls[0];
        assert_eq!(c.tool, "write");
        assert_eq!(
            c.state,
            cronsole::transcript::CallState::AwaitingApproval,
            "{c:#?}"
        );
        assert!(c.approval.is_none(), "{c:#?}");
        assert!(
            c.arguments.contains("/srv/report") && c.arguments.contains("[redacted]"),
            "{c:#?}"
        );
        assert!(!c.arguments.contains(TOOL_SECRET), "{c:#?}");
        assert_eq!(r.tool_calls, Some(1), "{r:#?}");
    }
    assert!(!dir.join("wrote.txt").exists(), "the tool never ran");
    assert_eq!(fake.request_count(), 2, "one model request per run");
    // A run that no longer waits cannot be answered: exit 1, saying so.
    let (code, _, err) = cli(&dir, &["approve", &first_run, "--reason", "late"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("not awaiting approval"), "{err}");
    // A run id the store never knew is bad input, as for `retry` and `cancel`: exit 2.
    let nil = "00000000-0000-0000-0000-000000000000";
    let (code, _, err) = cli(&dir, &["deny", nil]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(nil), "{err}");
}

/// Makes the owner records under `store` look like another host's: no PID space, so only their
/// heartbeats can say whether their owners live.
fn as_records_of_another_host(store: &Path) {
    for (path, text) in texts(&store.join("owners")) {
        let mut v: Value = serde_json::from_str(&text).unwrap();
        assert!(v["pid_space"].is_string(), "{v}");
        v.as_object_mut().unwrap().remove("pid_space");
        std::fs::write(&path, v.to_string()).unwrap();
    }
}

/// `kill -9` of the owner while a call awaits approval, its lease still running, on a host whose
/// processes this one cannot see: once the owner has not been heard for the live-owner bound,
/// `approvals` marks the call, and `approve` records the answer but says plainly that nothing
/// runs now, exiting 3. The tool never runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approving_a_call_whose_owner_was_killed_says_nothing_runs_and_exits_3() {
    let ask = Reply::tools(vec![FakeCall::new("write", json!({"path": "/r"}))], 10, 5);
    let fake = FakeLlm::openai(KEY, vec![ask]).await.unwrap();
    let dir = support::tempdir("tools-await-dead");
    std::fs::write(dir.join("jobs.yaml"), gated_yaml(&fake.base_url(), 300)).unwrap();
    let mut a = gated_owner(&dir, "a.log", "120s");
    let call = pending_call(&dir, None).await;
    let run = call["run_id"].as_str().unwrap().to_string();
    let owner = call["owner"].as_str().unwrap().to_string();
    assert_eq!(call["owner_live"], true, "{call}");
    assert!(
        call["owner_heard_seconds_ago"].as_i64().unwrap() <= 10,
        "{call}"
    );
    a.kill().unwrap(); // SIGKILL
    a.wait().unwrap();
    as_records_of_another_host(&dir.join("store"));

    // Heartbeats stop; within the live-owner bound plus a few beats the call is marked.
    let gone = poll_for(Duration::from_secs(60), || {
        let (_, out, _) = cli(&dir, &["approvals", "--json"]);
        let v: Value = serde_json::from_str(&out).ok()?;
        let p = v.as_array()?.first()?.clone();
        if p["owner_live"] == false {
            return Some(p);
        }
        // The bound is 30 s: a listing every half second is plenty.
        std::thread::sleep(Duration::from_millis(500));
        None
    })
    .expect("the killed owner's call is never marked");
    assert_eq!(gone["run_id"], run.as_str());
    assert!(
        gone["owner_heard_seconds_ago"].as_i64().unwrap() >= 30,
        "{gone}"
    );
    let why = gone["owner_gone"].as_str().unwrap();
    assert!(
        why.contains(&format!("its owner {owner} has not been heard for"))
            && why.contains("recorded abandoned when its lease expires"),
        "{why}"
    );
    let (code, text, _) = cli(&dir, &["approvals"]);
    assert_eq!(code, 0);
    assert!(text.contains("! owner not live: its owner"), "{text}");

    let (code, out, err) = cli(&dir, &["approve", &run]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains(&format!(
            "run {run}'s approval is recorded, but nothing runs now: its owner {owner} has not \
             been heard for"
        )),
        "{err}"
    );
    // The answer is recorded: the call is no longer listed, and a second answer is refused.
    let (_, out, _) = cli(&dir, &["approvals", "--json"]);
    assert_eq!(out.trim(), "[]");
    let (code, _, err) = cli(&dir, &["deny", &run]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("not awaiting approval"), "{err}");
    assert!(!dir.join("wrote.txt").exists(), "the tool never ran");
    assert_eq!(fake.request_count(), 1);
}

/// `cronsole ARGS` as [`cli`] does, on a clock `skew` off the real one (libfaketime: its wall
/// clock only).
fn cli_skewed(dir: &Path, lib: &Path, skew: &str, args: &[&str]) -> (i32, String, String) {
    support::cli::output(
        support::cli::cronsole(dir)
            .env("PROVIDER_KEY", KEY)
            .env("TOOL_SECRET", TOOL_SECRET)
            .envs(owner_support::skewed(lib, skew))
            .args(["--store", "store"])
            .args(args),
    )
}

/// An operator whose clock is an hour off the store's judges the waiting call's owner on the
/// store's clock (the file system's), as the owner's leases and heartbeats are stamped: an hour
/// ahead or behind, `approvals` lists the call with its owner live and heard seconds ago, a
/// `cancel` is an ordinary cancel the owner carries out, and `approve` exits 0 and the tool
/// runs. On its own clock an hour ahead it read the live owner's 20 s lease as run out, and
/// refused the answer saying the owner "stopped renewing"; an hour behind, it heard the owner
/// an hour in the future.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_on_a_clock_an_hour_off_judges_the_owner_on_the_stores_clock() {
    let Some(lib) = owner_support::libfaketime_or_skip() else {
        return;
    };
    let ask = || Reply::tools(vec![FakeCall::new("write", json!({"path": "/r"}))], 10, 5);
    let fake = FakeLlm::openai(KEY, vec![ask(), ask(), Reply::ok("done", 1, 1)])
        .await
        .unwrap();
    let dir = support::tempdir("tools-await-skew");
    std::fs::write(dir.join("jobs.yaml"), gated_yaml(&fake.base_url(), 20)).unwrap();
    let a = gated_owner(&dir, "a.log", "180s");
    let first = pending_call(&dir, None).await;
    let first_run = first["run_id"].as_str().unwrap().to_string();
    let skewed = |skew: &str, args: &[&str]| cli_skewed(&dir, &lib, skew, args);
    for skew in ["+1h", "-1h"] {
        let (code, out, err) = skewed(skew, &["approvals", "--json"]);
        assert_eq!(code, 0, "{skew}: {err}");
        let listed: Value = serde_json::from_str(&out).unwrap();
        let p = &listed[0];
        assert_eq!(p["run_id"], first_run.as_str(), "{skew}: {listed}");
        assert_eq!(p["owner_live"], true, "{skew}: {p}");
        let ago = p["owner_heard_seconds_ago"].as_i64().unwrap();
        assert!((0..=10).contains(&ago), "{skew}: {p}");
        let (code, text, _) = skewed(skew, &["approvals"]);
        assert_eq!(code, 0);
        assert!(!text.contains("owner not live"), "{skew}: {text}");
    }
    let (code, out, err) = skewed("+1h", &["cancel", &first_run]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!(
            "cancel of run {first_run} requested; its owner kills it"
        )),
        "{out}"
    );
    let cancelled = first_row(&dir.join("store"), "gated", Duration::from_secs(60)).await;
    assert_eq!(cancelled.status, Status::Failed, "{cancelled:#?}");
    assert_eq!(
        cancelled.reason.as_deref(),
        Some("cancelled by operator"),
        "{cancelled:#?}"
    );

    let (code, _, err) = cli(&dir, &["trigger", "gated"]);
    assert_eq!(code, 0, "{err}");
    let second = pending_call(&dir, Some(&first_run)).await;
    let second_run = second["run_id"].as_str().unwrap().to_string();
    let (code, out, err) = skewed("+1h", &["approve", &second_run]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("approved; its owner runs it"), "{out}{err}");
    let store = dir.join("store");
    let mut done = None;
    cronsole::testkit::wait::wait_until_async(
        "the approved run's row",
        Duration::from_secs(60),
        || {
            done = rows(&store, "gated")
                .into_iter()
                .find(|r| r.run_id.to_string() == second_run);
            done.is_some()
        },
    )
    .await;
    tokio::task::spawn_blocking(move || stop(a)).await.unwrap();
    let done = done.unwrap();
    assert_eq!(done.status, Status::Succeeded, "{done:#?}");
    assert!(dir.join("wrote.txt").exists(), "the approved tool ran");
}

/// The Python SDK server with `env_from: {LISTED_TOKEN: TOOL_SECRET}`, all its tools allowed.
fn listed_secret_yaml(servers: &TestServers, base_url: &str) -> String {
    let argv = servers
        .py_stdio_argv()
        .iter()
        .map(|a| yaml_str(a))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "budget: null
pricing:
  m: {{ input: 1.0, output: 1.0 }}
mcp_servers:
  py:
    command: [{argv}]
    protocol_version: \"2025-11-25\"
    env_from: {{ LISTED_TOKEN: TOOL_SECRET }}
agents:
  ops:
    provider: openai
    base_url: {base}
    api_key_env: PROVIDER_KEY
    model: m
    tools: [\"py.*\"]
jobs:
  - name: ask
    schedule: every 1h
    run_immediately: true
    agent: ops
    message: look around
",
        base = base_url
    )
}

/// A server that puts the secret it was given (`env_from`) into a tool's name and description,
/// and into the log messages it sends during a call — 3 000 of them, each with escape
/// sequences, beside 3 000 list-changed notices that change nothing: the model is offered the
/// tool under its redacted name and description and its call reaches the tool the server
/// listed; the secret is in no model request, row, pin, `cronsole tools` output or log line;
/// the log keeps at most its per-minute share of the server's messages, one line says how many
/// more were left out, and no notice gets a line of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_secret_in_its_tool_listing_and_its_log_messages_is_redacted_and_bounded() {
    let Some(servers) = TestServers::find() else {
        return;
    };
    let tokened = cronsole::model::wire_name("py.t_[redacted]");
    let fake = calls_then(
        vec![
            FakeCall::new("py__chatty", json!({"count": 3000, "changed": 3000})),
            FakeCall::new(&tokened, json!({"note": "hi"})),
        ],
        (100, 20),
        "all done",
        (200, 10),
    )
    .await;
    let yaml = listed_secret_yaml(&servers, &fake.base_url());
    let dir = support::tempdir("tools-listed-secret");
    std::fs::write(dir.join("jobs.yaml"), yaml).unwrap();
    // Debug logging: the SDK's own events too, had they been let through.
    let (row, stdout, stderr) = first_ask(&dir, &[("TOOL_SECRET", TOOL_SECRET)]).await;
    assert_eq!(row.status, Status::Succeeded, "{row:#?}\n{stderr}");

    // The model was offered the tool redacted, and its call reached the real one.
    let reqs = fake.requests();
    let first = reqs[0].json().unwrap();
    let offered = offered(&first, &tokened);
    assert_eq!(
        offered["function"]["description"],
        "Says hello (token [redacted])"
    );
    let second = reqs[1].json().unwrap();
    let results: Vec<String> = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].to_string())
        .collect();
    assert!(
        results.iter().any(|r| r.contains("tokened: hi")),
        "{results:?}"
    );
    assert!(
        results.iter().any(|r| r.contains("sent 3000")),
        "{results:?}"
    );

    // `cronsole tools` shows what was pinned, redacted.
    let d = dir.to_path_buf();
    let (c, out, err) = tokio::task::spawn_blocking(move || cli(&d, &["tools"]))
        .await
        .unwrap();
    assert_eq!(c, 0, "{out}{err}");
    assert!(out.contains("py.t_[redacted]"), "{out}");
    assert!(out.contains("pinned"), "{out}");

    // The log: at most the per-minute share of the server's messages, each redacted and
    // inert, and the count of the rest.
    let logs: String = texts(&dir.join("store/logs"))
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    let said = logs
        .lines()
        .filter(|l| l.contains("MCP server log:"))
        .count();
    assert!((1..=20).contains(&said), "{said} lines:\n{logs}");
    assert!(
        logs.contains("more log messages from MCP server py suppressed"),
        "{logs}"
    );
    assert!(logs.contains("token [redacted]"), "{logs}");
    assert!(!logs.contains('\u{1b}'), "an escape sequence in the log");
    assert!(!logs.contains("ListChanged"), "a line per notice: {logs}");
    assert!(!logs.contains("rmcp::"), "the SDK's own lines: {logs}");
    assert!(logs.len() < 256 * 1024, "{} bytes of log", logs.len());

    let mut places: Vec<(String, String)> = texts(&dir);
    places.push(("stdout".into(), stdout));
    places.push(("stderr".into(), stderr));
    places.push(("tools output".into(), out));
    for (i, r) in reqs.iter().enumerate() {
        places.push((format!("model request {i}"), r.json().unwrap().to_string()));
    }
    for (where_, text) in &places {
        assert!(!text.contains(TOOL_SECRET), "the tool secret in {where_}");
    }
}

/// `kill -9` of the owner on this host while a call awaits approval: at once — well within the
/// 30 s a heartbeat is trusted for — `jobs` counts no live owner, `approvals` marks the call
/// saying its owner's process is gone, and `approve` refuses (exit 1, nothing recorded: no run
/// will ever read the answer), saying why. `cancel` of the run says no live owner holds it and
/// when the run is recorded instead of claiming its owner kills it. The owner that recovers the
/// run writes an `abandoned` row that names the cancel and carries no answer. The tool never
/// runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approving_or_cancelling_right_after_a_kill_9_on_this_host_says_at_once_that_nothing_runs()
{
    let ask = Reply::tools(vec![FakeCall::new("write", json!({"path": "/r"}))], 10, 5);
    let fake = FakeLlm::openai(KEY, vec![ask]).await.unwrap();
    let dir = support::tempdir("tools-await-pid");
    std::fs::write(dir.join("jobs.yaml"), gated_yaml(&fake.base_url(), 20)).unwrap();
    let mut a = gated_owner(&dir, "a.log", "120s");
    let call = pending_call(&dir, None).await;
    let run = call["run_id"].as_str().unwrap().to_string();
    let owner = call["owner"].as_str().unwrap().to_string();
    assert_eq!(call["owner_live"], true, "{call}");
    let pid = a.id();
    a.kill().unwrap(); // SIGKILL
    a.wait().unwrap();
    let killed = Instant::now();

    let (_, jobs, _) = cli(&dir, &["jobs"]);
    assert!(jobs.contains("owners: none live"), "{jobs}");
    let (_, out, _) = cli(&dir, &["approvals", "--json"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let p = &v[0];
    assert_eq!(p["owner_live"], false, "{p}");
    let gone = format!("its owner {owner} (process {pid} on this host) is no longer running");
    let why = p["owner_gone"].as_str().unwrap();
    assert!(why.contains(&gone), "{why}");
    // Refused, nothing written: the reason (with a key typed into it) is nowhere in the store.
    let said = format!("go ahead, not {KEY}");
    let (code, out, err) = cli(&dir, &["approve", &run, "--reason", &said]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains(&format!(
            "run {run} of 'gated' cannot use an answer: {gone}; the call never runs, and the run \
             is recorded abandoned when its lease expires"
        )),
        "{err}"
    );
    for (path, text) in texts(&dir.join("store")) {
        assert!(!text.contains(KEY), "the key in {path}");
        assert!(!text.contains("go ahead"), "the refused answer in {path}");
    }
    let (_, out, _) = cli(&dir, &["approvals", "--json"]);
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()[0]["run_id"],
        run.as_str(),
        "still listed, unanswered"
    );
    // A cancel says who will not kill it, and what happens instead.
    let (code, out, err) = cli(&dir, &["cancel", &run]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!(
            "gated: cancel of run {run} recorded, but no live owner holds it: {gone}, and the \
             run's processes ended with it; its lease expires at "
        )) && out.contains("the run is then recorded abandoned (its reason names the cancel)"),
        "{out}"
    );
    assert!(!out.contains("its owner kills it"), "{out}");
    assert!(
        killed.elapsed() < Duration::from_secs(30),
        "judged before the heartbeat bound: {:?}",
        killed.elapsed()
    );

    // Another owner recovers the run once its lease runs out.
    let b = gated_owner(&dir, "b.log", "60s");
    let row = first_row(&dir.join("store"), "gated", Duration::from_secs(60)).await;
    tokio::task::spawn_blocking(move || stop(b)).await.unwrap();
    assert_eq!(row.status, Status::Abandoned, "{row:#?}");
    assert_eq!(row.run_id.to_string(), run);
    let reason = row.reason.as_deref().unwrap_or_default();
    assert!(
        reason.contains("without completion; cancel requested by an operator at "),
        "{reason}"
    );
    assert!(
        !reason.contains("never ran"),
        "no answer was recorded: {reason}"
    );
    let calls = cronsole::testkit::tools::calls(&row);
    assert_eq!(calls.len(), 1, "{row:#?}");
    assert_eq!(
        calls[0].state,
        cronsole::transcript::CallState::AwaitingApproval
    );
    assert_eq!(calls[0].approval, None);
    assert!(!dir.join("wrote.txt").exists(), "the tool never ran");
    assert_eq!(fake.request_count(), 1);
}

/// The job's sinks hear of a call awaiting approval: a loopback JSON webhook gets one alert,
/// while the run waits, that names the job, the run, the tool and its arguments, and the
/// commands that answer it — and no outcome, since the run has none yet. `approve --call`
/// takes the waiting call's id, and refuses another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approval_alert_reaches_the_jobs_webhook_naming_job_run_tool_and_how_to_answer() {
    use cronsole::testkit::http::{Response, TestServer};
    let hook = TestServer::start(|_| Response::new(204)).await.unwrap();
    let ask = Reply::tools(vec![FakeCall::new("write", json!({"path": "/r"}))], 10, 5);
    let fake = FakeLlm::openai(KEY, vec![ask, Reply::ok("done", 1, 1)])
        .await
        .unwrap();
    let dir = support::tempdir("tools-await-hook");
    let yaml = format!(
        "delivery:\n  hook: {{ webhook: \"{}/hook\", format: json }}\n{}    deliver: [hook]\n",
        hook.url(),
        gated_yaml(&fake.base_url(), 20)
    );
    std::fs::write(dir.join("jobs.yaml"), yaml).unwrap();
    let a = gated_owner(&dir, "a.log", "120s");
    let call = pending_call(&dir, None).await;
    let run = call["run_id"].as_str().unwrap().to_string();
    let mut alert = None;
    cronsole::testkit::wait::wait_until_async(
        "the alert at the webhook",
        Duration::from_secs(30),
        || {
            alert = hook.requests().into_iter().find(|r| r.path == "/hook");
            alert.is_some()
        },
    )
    .await;
    let alert = alert.unwrap();
    let j = alert.json().unwrap();
    assert_eq!(j["kind"], "alert", "{j}");
    assert_eq!(j["state"], "awaiting_approval", "{j}");
    assert_eq!(j["job"], "gated", "{j}");
    assert_eq!(j["run_id"], run.as_str(), "{j}");
    assert!(
        j.get("status").is_none() && j.get("finished_at").is_none(),
        "{j}"
    );
    let text = j["text"].as_str().unwrap();
    let call_id = call["call_id"].as_str().unwrap().to_string();
    assert!(!call_id.is_empty(), "{call}");
    // The commands it names answer the call it shows, never a later one.
    for w in [
        "APPROVAL NEEDED: gated run ".to_string(),
        format!("wants to call write with {}", json!({"path": "/r"})),
        format!("`cronsole approve {run} --call {call_id}`"),
        format!("`cronsole deny {run} --call {call_id} --reason"),
        "unanswered, it is denied".to_string(),
    ] {
        assert!(text.contains(&w), "{w:?} not in {text:?}");
    }
    // Answered by its call's id, the run goes on; an id that is not the waiting call's is
    // refused first, nothing recorded. The alert was sent once.
    let (code, out, err) = cli(&dir, &["approve", &run, "--call", "call_elsewhere"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains(&format!(
            "has no call call_elsewhere awaiting approval: the call that waits is {call_id} (to \
             write)"
        )),
        "{err}"
    );
    let (code, out, err) = cli(&dir, &["approve", &run, "--call", &call_id]);
    assert_eq!(code, 0, "{out}{err}");
    let row = first_row(&dir.join("store"), "gated", Duration::from_secs(60)).await;
    tokio::task::spawn_blocking(move || stop(a)).await.unwrap();
    assert_eq!(row.status, Status::Succeeded, "{row:#?}");
    assert!(dir.join("wrote.txt").exists(), "the approved tool ran");
    let alerts = hook
        .requests()
        .into_iter()
        .filter(|r| r.json().is_some_and(|j| j["state"] == "awaiting_approval"))
        .count();
    assert_eq!(alerts, 1);
}

/// An operator racing the approval timeout, as an attacker did: `approve` sent over and over
/// around the deadline is either the verdict (exit 0: the tool runs, the call shows who
/// approved) or refused (exit 1) — never acknowledged and then dropped by the timeout's
/// denial. At most one approval is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_racing_the_timeout_are_used_or_refused_never_dropped() {
    let ask = Reply::tools(vec![FakeCall::new("write", json!({"path": "/r"}))], 10, 5);
    let fake = FakeLlm::openai(KEY, vec![ask, Reply::ok("done", 1, 1)])
        .await
        .unwrap();
    let dir = support::tempdir("tools-await-race");
    let yaml = gated_yaml(&fake.base_url(), 20).replace(
        "    approve: [write]\n",
        "    approve: [write]\n    approval_timeout_seconds: 2\n",
    );
    std::fs::write(dir.join("jobs.yaml"), yaml).unwrap();
    let a = gated_owner(&dir, "a.log", "120s");
    let call = pending_call(&dir, None).await;
    let run = call["run_id"].as_str().unwrap().to_string();
    let deadline = chrono::DateTime::parse_from_rfc3339(call["deadline"].as_str().unwrap())
        .unwrap()
        .with_timezone(&chrono::Utc);
    let (d, r) = (dir.to_path_buf(), run.clone());
    let codes = tokio::task::spawn_blocking(move || {
        // From a little before the deadline until the run has ended.
        let wait = (deadline - chrono::Utc::now() - chrono::Duration::milliseconds(400))
            .to_std()
            .unwrap_or_default();
        std::thread::sleep(wait);
        let mut codes = Vec::new();
        while rows(&d.join("store"), "gated").is_empty() && codes.len() < 200 {
            let (code, out, err) = cli(&d, &["approve", &r]);
            assert!(code == 0 || code == 1, "{code}: {out}{err}");
            if code == 1 {
                assert!(err.contains("not awaiting approval"), "{err}");
            }
            codes.push(code);
        }
        codes
    })
    .await
    .unwrap();
    let row = first_row(&dir.join("store"), "gated", Duration::from_secs(60)).await;
    tokio::task::spawn_blocking(move || stop(a)).await.unwrap();
    let accepted = codes.iter().filter(|c| **c == 0).count();
    assert!(accepted <= 1, "{codes:?}");
    let calls = cronsole::testkit::tools::calls(&row);
    assert_eq!(calls.len(), 1, "{row:#?}");
    let by = format!(
        "{} (cronsole approve)",
        cronsole::testkit::internals::engine::operator()
    );
    if accepted == 1 {
        assert_eq!(
            calls[0].approval,
            Some(cronsole::transcript::Approval::Approved {
                by: Some(by),
                reason: None
            }),
            "an accepted approval is the verdict: {codes:?}"
        );
        assert!(dir.join("wrote.txt").exists(), "the approved tool ran");
    } else {
        assert_eq!(
            calls[0].approval,
            Some(cronsole::transcript::Approval::Denied {
                reason: "denied: no answer within approval_timeout_seconds (2s)".into(),
                by: None
            }),
            "{codes:?}"
        );
        assert!(!dir.join("wrote.txt").exists(), "the denied tool never ran");
    }
}

/// A job whose agent `ops` runs under a $0.10 job budget at $100 per 1M tokens each way: with
/// `tools`, its one tool `write` needs approval; without, it is a plain one-call agent.
fn budgeted_yaml(base_url: &str, tools: bool) -> String {
    let tools = if tools {
        "tools:
  write:
    description: Writes a file
    parameters: { type: object }
    command: [sh, -c, 'echo ran >> wrote.txt']
"
    } else {
        ""
    };
    let allow = if tools.is_empty() {
        ""
    } else {
        "    tools: [write]\n    approve: [write]\n"
    };
    format!(
        "budget: null
pricing:
  m: {{ input: 100.0, output: 100.0 }}
{tools}agents:
  ops:
    provider: openai
    base_url: {base_url}
    api_key_env: PROVIDER_KEY
    model: m
    max_tokens: 20
    instructions: go
{allow}jobs:
  - name: paid
    schedule: every 1d
    agent: ops
    message: go
    max_cost_usd: 0.10
"
    )
}

/// `stats --json` of job `paid`: (total cost, money in flight).
fn paid_stats(dir: &Path) -> (f64, f64) {
    let (code, out, err) = cli(dir, &["stats", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let j = &v["jobs"][0];
    assert_eq!(j["job"], "paid", "{v}");
    (
        j["total_cost_usd"].as_f64().unwrap(),
        j["in_flight_usd"].as_f64().unwrap(),
    )
}

/// Trigger-and-cancel cycles of a tool-using run, each cancelled while its call awaits
/// approval: every cancelled row books the turn the provider billed ($0.012: 100 + 20 tokens at
/// $100 per 1M), nothing is handed back to the budget or left in flight, the recorded spend
/// equals what the provider billed, and the job's budget stops the next cycle before any
/// request (a `skipped` row). The tool never runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_runs_keep_the_turns_they_paid_for_and_the_budget_stops_the_next() {
    const PER_TURN: f64 = 120.0 * 100.0 / 1_000_000.0;
    let ask = Reply::tools(vec![FakeCall::new("write", json!({"path": "/r"}))], 100, 20);
    let fake = FakeLlm::openai(KEY, vec![Reply::Forever(Box::new(ask))])
        .await
        .unwrap();
    let dir = support::tempdir("tools-cancel-money");
    std::fs::write(dir.join("jobs.yaml"), budgeted_yaml(&fake.base_url(), true)).unwrap();
    let store = dir.join("store");
    let owner = gated_owner(&dir, "a.log", "300s");
    // The store exists before the owner has stored the jobs file's jobs: wait for the job.
    poll_for(Duration::from_secs(60), || {
        (cli(&dir, &["describe", "paid"]).0 == 0).then_some(())
    })
    .expect("the owner never stored job 'paid'");
    let mut seen: Vec<String> = Vec::new();
    let mut stopped = None;
    for _ in 0..20 {
        let before = rows(&store, "paid").len();
        let (code, _, err) = cli(&dir, &["trigger", "paid"]);
        assert_eq!(code, 0, "{err}");
        // Either its call awaits approval, or the budget stopped the run before any request.
        let next = poll_for(Duration::from_secs(60), || {
            let (_, out, _) = cli(&dir, &["approvals", "--json"]);
            let v: Value = serde_json::from_str(&out).ok()?;
            if let Some(p) = v.as_array()?.first()
                && let Some(id) = p["run_id"].as_str()
                && !seen.iter().any(|s| s == id)
            {
                return Some(Ok(id.to_string()));
            }
            let rs = rows(&store, "paid");
            (rs.len() > before).then(|| Err(Box::new(rs[0].clone())))
        })
        .expect("the triggered run neither awaited approval nor ended");
        match next {
            Ok(run) => {
                let (code, _, err) = cli(&dir, &["cancel", "paid"]);
                assert_eq!(code, 0, "{err}");
                poll_for(Duration::from_secs(60), || {
                    (rows(&store, "paid").len() > before).then_some(())
                })
                .expect("the cancelled run has no row");
                seen.push(run);
            }
            Err(row) => {
                stopped = Some(row);
                break;
            }
        }
    }
    let skipped = *stopped.expect("20 trigger+cancel cycles and the budget never stopped one");
    assert_eq!(skipped.status, Status::Skipped, "{skipped:#?}");
    assert!(
        skipped
            .reason
            .as_deref()
            .is_some_and(|r| r.starts_with("budget reached")),
        "{skipped:#?}"
    );
    let (total, in_flight) = paid_stats(&dir);
    tokio::task::spawn_blocking(move || stop(owner))
        .await
        .unwrap();
    let billed = PER_TURN * fake.request_count() as f64;
    assert!(seen.len() >= 2, "{} cycles paid", seen.len());
    assert_eq!(
        fake.request_count(),
        seen.len(),
        "one request per cancelled run"
    );
    let all = rows(&store, "paid");
    for r in all.iter().filter(|r| r.status == Status::Failed) {
        assert_eq!(r.reason.as_deref(), Some("cancelled by operator"), "{r:#?}");
        assert!(r.cut_short, "{r:#?}");
        assert!((r.cost_usd - PER_TURN).abs() < 1e-9, "{r:#?}");
        assert_eq!((r.input_tokens, r.output_tokens), (100, 20), "{r:#?}");
        assert_eq!((r.turns, r.tool_calls), (Some(1), Some(1)), "{r:#?}");
        let calls = cronsole::testkit::tools::calls(r);
        assert_eq!(
            calls[0].state,
            cronsole::transcript::CallState::AwaitingApproval
        );
    }
    let recorded: f64 = all.iter().map(|r| r.cost_usd).sum();
    assert!(
        (recorded - billed).abs() < 1e-9,
        "rows ${recorded}, billed ${billed}"
    );
    assert!(
        (total - billed).abs() < 1e-9,
        "stats ${total}, billed ${billed}"
    );
    assert_eq!(in_flight, 0.0, "nothing stays in flight after the rows");
    assert!(
        billed <= 0.10 + 1e-9,
        "billed ${billed} past the $0.10 budget"
    );
    assert!(!dir.join("wrote.txt").exists(), "the tool never ran");
}

/// A plain agent cancelled while its one request is in flight: the row books the request at its
/// reservation (the provider may bill it; nobody will know), `stats` counts the same amount,
/// and nothing is left "in flight" for a run that has ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_agent_cancelled_mid_request_books_its_reservation() {
    let slow = Reply::Slow(
        Duration::from_secs(30),
        Box::new(Reply::ok("late", 100, 20)),
    );
    let fake = FakeLlm::openai(KEY, vec![slow]).await.unwrap();
    let dir = support::tempdir("tools-cancel-plain");
    std::fs::write(
        dir.join("jobs.yaml"),
        budgeted_yaml(&fake.base_url(), false),
    )
    .unwrap();
    let store = dir.join("store");
    let owner = gated_owner(&dir, "a.log", "120s");
    poll_for(Duration::from_secs(60), || {
        let (code, _, _) = cli(&dir, &["trigger", "paid"]);
        (code == 0).then_some(())
    })
    .expect("trigger never took");
    poll_for(Duration::from_secs(60), || {
        (fake.request_count() == 1).then_some(())
    })
    .expect("the request was never made");
    let (code, _, err) = cli(&dir, &["cancel", "paid"]);
    assert_eq!(code, 0, "{err}");
    let row = poll_for(Duration::from_secs(60), || rows(&store, "paid").pop())
        .expect("the cancelled run has no row");
    let (total, in_flight) = paid_stats(&dir);
    tokio::task::spawn_blocking(move || stop(owner))
        .await
        .unwrap();
    assert_eq!(row.status, Status::Failed, "{row:#?}");
    assert!(row.cut_short, "{row:#?}");
    // The reservation: at least the request's output bound, more than the reply would cost.
    assert!(row.cost_usd >= 20.0 * 100.0 / 1e6, "{row:#?}");
    assert!(row.cost_usd < 0.10, "{row:#?}");
    assert!(
        (total - row.cost_usd).abs() < 1e-9,
        "stats ${total}, row ${}",
        row.cost_usd
    );
    assert_eq!(in_flight, 0.0, "nothing stays in flight after the row");
    assert_eq!(row.model.as_deref(), Some("m"), "{row:#?}");
}

/// A run's stdio server and its command tool end with the run, however it ends: the model
/// answers (the run succeeds), the job's timeout cuts it in a tool call, and an operator's
/// `cancel` stops it in a tool call. Each server and tool writes its pid before it becomes
/// what it runs; each must be gone within a few seconds of its run's row.
#[allow(clippy::too_many_lines)] // a test scenario reads best in one piece (see CONTRIBUTING.md)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_server_and_tool_end_with_the_run_at_its_end_its_timeout_and_a_cancel() {
    let Some(servers) = TestServers::find() else {
        return;
    };
    let echo = |server: &str| FakeCall::new(&format!("{server}__echo"), json!({"text": "hi"}));
    let answers = calls_then(vec![echo("pa")], (10, 5), "done", (10, 5)).await;
    let holds = |server: &str, tool: &str| {
        vec![Reply::Forever(Box::new(Reply::tools(
            vec![echo(server), FakeCall::new(tool, json!({}))],
            10,
            5,
        )))]
    };
    let slow = FakeLlm::openai(KEY, holds("pb", "hold_b")).await.unwrap();
    let stuck = FakeLlm::openai(KEY, holds("pc", "hold_c")).await.unwrap();
    let dir = support::tempdir("tools-ends");
    let py = servers.py_stdio_argv();
    let server = |name: &str| {
        yaml_str(&format!(
            "echo $$ > {name}.pid; exec {}",
            py.iter()
                .map(|a| format!("'{a}'"))
                .collect::<Vec<_>>()
                .join(" ")
        ))
    };
    let hold = |name: &str| yaml_str(&format!("echo $$ > {name}.pid; exec sleep 300"));
    let agent = |name: &str, base: &str, tools: &str| {
        format!(
            "  {name}: {{ provider: openai, base_url: {base}, api_key_env: PROVIDER_KEY, model: m, tools: [{tools}] }}\n"
        )
    };
    let yaml = format!(
        "budget: null
pricing:
  m: {{ input: 1.0, output: 1.0 }}
mcp_servers:
  pa: {{ command: [sh, -c, {pa}] }}
  pb: {{ command: [sh, -c, {pb}] }}
  pc: {{ command: [sh, -c, {pc}] }}
tools:
  hold_b: {{ description: Holds, parameters: {{ type: object }}, command: [sh, -c, {hb}], timeout_seconds: 600 }}
  hold_c: {{ description: Holds, parameters: {{ type: object }}, command: [sh, -c, {hc}], timeout_seconds: 600 }}
agents:
{a}{b}{c}jobs:
  - {{ name: ends, schedule: every 1h, run_immediately: true, agent: a, message: go }}
  - {{ name: slow, schedule: every 1h, run_immediately: true, agent: b, message: go, timeout_seconds: 8 }}
  - {{ name: stuck, schedule: every 1h, run_immediately: true, agent: c, message: go, timeout_seconds: 600 }}
",
        pa = server("pa"),
        pb = server("pb"),
        pc = server("pc"),
        hb = hold("hold_b"),
        hc = hold("hold_c"),
        a = agent("a", &answers.base_url(), "pa.echo"),
        b = agent("b", &slow.base_url(), "pb.echo, hold_b"),
        c = agent("c", &stuck.base_url(), "pc.echo, hold_c"),
    );
    std::fs::write(dir.join("jobs.yaml"), yaml).unwrap();
    let mut owner = owner_logging(&dir, "owner.log", "180s");
    let d = dir.to_path_buf();
    let outcome = tokio::task::spawn_blocking(move || {
        let first = |name: &str| pids(&d.join(format!("{name}.pid"))).first().copied();
        let row_of = |job: &str| {
            poll_for(Duration::from_secs(90), || {
                rows(&d.join("store"), job).into_iter().next()
            })
        };
        let gone = |p: Option<i32>| {
            p.is_some_and(|p| {
                poll_for(Duration::from_secs(5), || (!alive(p)).then_some(())).is_some()
            })
        };
        // The stuck run holds in its tool call; an operator cancels it.
        let held = poll_for(Duration::from_secs(90), || first("hold_c"));
        let (code, _, err) = cli(&d, &["cancel", "stuck"]);
        let ends = row_of("ends").map(|r| r.status);
        let slow = row_of("slow").map(|r| r.status);
        let stuck = row_of("stuck").map(|r| r.status);
        (
            (ends, gone(first("pa"))),
            (slow, gone(first("pb")), gone(first("hold_b"))),
            (
                stuck,
                held.is_some(),
                code,
                err,
                gone(first("pc")),
                gone(first("hold_c")),
            ),
        )
    })
    .await
    .unwrap();
    let _ = owner.kill();
    let _ = owner.wait();
    let log = std::fs::read_to_string(dir.join("owner.log")).unwrap_or_default();
    let (ends, slow, stuck) = outcome;
    assert_eq!(
        ends,
        (Some(Status::Succeeded), true),
        "the run that ended; log:\n{log}"
    );
    assert_eq!(
        slow,
        (Some(Status::Failed), true, true),
        "the run cut by its timeout; log:\n{log}"
    );
    let (status, held, code, err, server_gone, tool_gone) = stuck;
    assert!(held, "the stuck run's tool never started; log:\n{log}");
    assert_eq!(code, 0, "cancel: {err}");
    assert!(
        status.is_some(),
        "the cancelled run has no row; log:\n{log}"
    );
    assert!(
        server_gone && tool_gone,
        "the cancelled run's server and tool are gone: {server_gone}, {tool_gone}"
    );
}

/// The credential an HTTP server is sent (`headers_env: {Authorization: VAR}`, VAR =
/// `Bearer <token>`), and the token alone as such a server echoes it.
const BEARER_TOKEN: &str = "brtok-ZZ9-77aa88bb41c5";
/// A `Basic` credential's password, which such a server echoes decoded.
const BASIC_PASSWORD: &str = "basicpass-RT9-yy22";

/// The Python SDK's server over streamable HTTP, sent `Authorization: Bearer <token>` from
/// `BEARER_SRC`; everything it lists allowed; results delivered to a file sink.
fn bearer_yaml(url: &str, base_url: &str) -> String {
    format!(
        "budget: null
pricing:
  m: {{ input: 1.0, output: 1.0 }}
delivery:
  audit: {{ file: deliveries.jsonl }}
mcp_servers:
  h:
    url: {url}
    headers_env: {{ Authorization: BEARER_SRC }}
    # The handshake era: log messages during a call are deprecated in 2026-07-28.
    protocol_version: \"2025-11-25\"
agents:
  ops:
    provider: openai
    base_url: {base_url}
    api_key_env: PROVIDER_KEY
    model: m
    tools: [\"h.*\"]
jobs:
  - name: ask
    schedule: every 1h
    run_immediately: true
    agent: ops
    message: who are you
    deliver: [audit]
"
    )
}

/// An HTTP server that echoes the Bearer token of its `Authorization` header alone — in a tool's
/// name, description and schema, in a log message during a call and in the call's result — and
/// a model that repeats the token in its answer: the server did get the token, and the model
/// requests, the transcript, `history` (text and JSON), the delivery, the pins, `cronsole
/// tools`, the store's log and the owner's output show `[redacted]`, never the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_servers_echoed_bearer_token_is_redacted_on_every_path() {
    echoed_credential_is_redacted(format!("Bearer {BEARER_TOKEN}"), BEARER_TOKEN).await;
}

/// The same with `Authorization: Basic base64(user:password)` and a server that echoes the
/// password it decoded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_servers_echoed_basic_password_is_redacted_on_every_path() {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(format!("u:{BASIC_PASSWORD}"));
    echoed_credential_is_redacted(format!("Basic {b64}"), BASIC_PASSWORD).await;
}

/// `header` sent as the `Authorization` header of the echoing server, which repeats `secret`.
#[allow(clippy::too_many_lines)] // a test scenario reads best in one piece (see CONTRIBUTING.md)
async fn echoed_credential_is_redacted(header: String, secret: &str) {
    let Some(servers) = TestServers::find() else {
        return;
    };
    let server = tokio::task::spawn_blocking(move || servers.py_http_with(&[("ECHO_BEARER", "1")]))
        .await
        .unwrap();
    let fake = calls_then(
        vec![FakeCall::new("h__whoami", json!({}))],
        (100, 20),
        &format!("the server says token only: {secret}"),
        (200, 10),
    )
    .await;
    let dir = support::tempdir("tools-bearer");
    std::fs::write(
        dir.join("jobs.yaml"),
        bearer_yaml(&server.url(), &fake.base_url()),
    )
    .unwrap();
    let (row, stdout, stderr) = first_ask(&dir, &[("BEARER_SRC", header.as_str())]).await;
    assert_eq!(row.status, Status::Succeeded, "{row:#?}\n{stderr}");

    // The listing reached the model redacted: the tool's name, description and schema.
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    let first = reqs[0].json().unwrap();
    let echoed = cronsole::model::wire_name("h.b_[redacted]");
    let offered = offered(&first, &echoed);
    assert_eq!(offered["function"]["description"], "Bearer echo [redacted]");
    assert!(
        offered["function"]["parameters"]
            .to_string()
            .contains("token [redacted]"),
        "{offered:#}"
    );
    // The server got the token (it echoed something that was redacted), and so did the model's
    // view of the result, the transcript and the row's answer.
    let second = reqs[1].json().unwrap().to_string();
    assert!(second.contains("token only: [redacted]"), "{second}");
    let transcript = serde_json::to_string(&row.transcript).unwrap();
    assert!(
        transcript.contains("token only: [redacted]"),
        "{transcript}"
    );
    assert_eq!(
        row.result.as_deref(),
        Some("the server says token only: [redacted]")
    );

    // The log message the server sent during the call is in the store's log, redacted.
    let logs: String = texts(&dir.join("store/logs"))
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    assert!(logs.contains("log token [redacted]"), "{logs}");
    let delivered = std::fs::read_to_string(dir.join("deliveries.jsonl")).unwrap();
    assert!(delivered.contains("token only: [redacted]"), "{delivered}");

    let d = dir.to_path_buf();
    let outputs = tokio::task::spawn_blocking(move || {
        [
            vec!["tools"],
            vec!["history"],
            vec!["history", "--json"],
            vec!["describe", "ask", "--json"],
            vec!["logs"],
        ]
        .map(|args| {
            let (c, out, err) = support::cli::output(
                support::cli::cronsole(&d)
                    .env("PROVIDER_KEY", KEY)
                    .env("BEARER_SRC", &header)
                    .args(["--store", "store"])
                    .args(&args),
            );
            assert_eq!(c, 0, "{args:?}: {out}{err}");
            (args.join(" "), out)
        })
    })
    .await
    .unwrap();
    assert!(outputs[0].1.contains("h.b_[redacted]"), "{}", outputs[0].1);
    // `history` text counts the run's turns and tool calls.
    assert!(outputs[1].1.contains("turns=2 tools=1"), "{}", outputs[1].1);
    let mut places: Vec<(String, String)> = texts(&dir);
    places.extend(outputs);
    places.push(("stdout".into(), stdout));
    places.push(("stderr".into(), stderr));
    for (i, r) in reqs.iter().enumerate() {
        places.push((format!("model request {i}"), r.json().unwrap().to_string()));
    }
    for (where_, text) in &places {
        assert!(!text.contains(secret), "the credential in {where_}");
    }
}

/// An agent whose stdio server appends its pid to `starts` each time it is started; each run
/// lists the server's tools, then calls them over three turns.
fn starts_yaml(servers: &TestServers, dir: &Path, base_url: &str) -> String {
    let server = format!(
        "echo $$ >> '{}'; exec {}",
        dir.join("starts").display(),
        servers
            .py_stdio_argv()
            .iter()
            .map(|a| format!("'{a}'"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    format!(
        "budget: null
pricing:
  m: {{ input: 1.0, output: 1.0 }}
mcp_servers:
  py:
    command: [sh, -c, {server}]
    # A pinned era: a server slow to answer the era discovery is never started again.
    protocol_version: \"2025-11-25\"
agents:
  ops:
    provider: openai
    base_url: {base_url}
    api_key_env: PROVIDER_KEY
    model: m
    tools: [py.echo, py.add]
jobs:
  - name: ask
    schedule: every 2s
    agent: ops
    message: add and echo
    max_retries: 1
",
        server = yaml_str(&server),
    )
}

/// A stdio server starts once per run, however many turns and calls the run makes: its
/// listing, the calls of turn 1 and the parallel calls of turn 2 go to the one process the run
/// started. So starts = the runs that began (every row but `skipped` and `missed` ones).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_starts_once_per_run_whatever_its_turns_and_calls() {
    let Some(servers) = TestServers::find() else {
        return;
    };
    let turn = |calls| Reply::tools(calls, 100, 20);
    let run = || {
        vec![
            turn(vec![FakeCall::new("py__echo", json!({"text": "one"}))]),
            turn(vec![
                FakeCall::new("py__add", json!({"a": 1, "b": 2})),
                FakeCall::new("py__echo", json!({"text": "two"})),
            ]),
            Reply::ok("done", 200, 10),
        ]
    };
    // Two runs of three turns, then runs of one turn.
    let mut script = run();
    script.extend(run());
    script.push(Reply::Forever(Box::new(Reply::ok("done", 200, 10))));
    let fake = FakeLlm::openai(KEY, script).await.unwrap();
    let dir = support::tempdir("tools-starts");
    std::fs::write(
        dir.join("jobs.yaml"),
        starts_yaml(&servers, &dir, &fake.base_url()),
    )
    .unwrap();
    let owner = owner_cmd(&dir, &[], "300s")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let store = dir.join("store");
    let three_turns = |r: &HistoryRow| {
        r.status == Status::Succeeded && (r.turns, r.tool_calls) == (Some(3), Some(3))
    };
    cronsole::testkit::wait::wait_until_async(
        "two runs of three turns",
        Duration::from_secs(240),
        || {
            rows(&store, "ask")
                .iter()
                .filter(|r| three_turns(r))
                .count()
                >= 2
        },
    )
    .await;
    let (_, stderr) = tokio::task::spawn_blocking(move || stop(owner))
        .await
        .unwrap();
    let all = rows(&store, "ask");
    let began = all
        .iter()
        .filter(|r| !matches!(r.status, Status::Skipped | Status::Missed))
        .count();
    let starts = pids(&dir.join("starts"));
    assert_eq!(
        starts.len(),
        began,
        "one server start per run that began: {starts:?} for {all:#?}\n{stderr}"
    );
}

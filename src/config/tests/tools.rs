//! The tool sections in the jobs file: `mcp_servers:`, command tools, agents' allowlists,
//! `approve`, loop limits and jobs' narrowing. Each wrong form asserts its key, position and
//! what the message says would be accepted.

use super::super::*;
use super::{check, errors};
use crate::model::{Action, McpTransport, ToolCommand, ToolLimits};

fn warnings(c: &Checked) -> Vec<(String, String)> {
    c.diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Warning)
        .map(|d| (d.key.clone(), d.message.clone()))
        .collect()
}

/// The one error of `text`, as (key, line, column, message).
fn one_error(text: &str) -> (String, usize, usize, String) {
    let c = check(text);
    let e = errors(&c);
    assert_eq!(e.len(), 1, "{:#?}", c.diagnostics);
    e.into_iter().next().unwrap()
}

const SOURCES: &str = r#"mcp_servers:
  files:
    command: [npx, -y, "@modelcontextprotocol/server-filesystem", /srv/reports]
    cwd: /srv
    env: { NODE_OPTIONS: "--max-old-space-size=256", LEVEL: 3 }
    env_from: { GITHUB_TOKEN: REPORTS_GH_TOKEN }
  search:
    url: https://mcp.example.com/mcp
    headers_env: { Authorization: SEARCH_MCP_AUTH }
tools:
  disk_free:
    description: "Free space on a mount point"
    parameters: { type: object, properties: { path: { type: string } }, required: [path] }
    command: [df, -h, --output=avail]
    timeout_seconds: 10
  shout:
    description: "Upper-cases its input"
    command: "tr a-z A-Z"
"#;

fn with_agent(agent: &str, job: &str) -> String {
    format!(
        "{SOURCES}agents:\n  ops:\n    model: gpt-4o-mini\n{agent}jobs:\n  - name: j\n    \
         schedule: every 1h\n    agent: ops\n    message: go\n{job}"
    )
}

#[test]
fn the_documented_example_loads_with_every_key() {
    let text = with_agent(
        "    tools: [files.read_file, files.write_file, \"search.*\", disk_free]\n    approve: \
         [files.write_file]\n    max_turns: 12\n    tool_timeout_seconds: 30\n    \
         max_tool_output_bytes: 4096\n    max_tool_calls_per_turn: 4\n    \
         approval_timeout_seconds: 600\n",
        "    tools: [files.read_file, files.write_file]\n    deliver: []\n",
    );
    let c = check(&text);
    assert!(errors(&c).is_empty(), "{:#?}", c.diagnostics);
    let file = c.into_result().unwrap().file;
    let s = &file.settings;
    let files = &s.tools.mcp_servers["files"];
    assert_eq!(
        files.transport,
        McpTransport::Stdio {
            command: vec![
                "npx".into(),
                "-y".into(),
                "@modelcontextprotocol/server-filesystem".into(),
                "/srv/reports".into()
            ],
            cwd: Some("/srv".into()),
            env: [
                ("LEVEL".to_string(), "3".to_string()),
                (
                    "NODE_OPTIONS".to_string(),
                    "--max-old-space-size=256".to_string()
                )
            ]
            .into(),
            env_from: [("GITHUB_TOKEN".to_string(), "REPORTS_GH_TOKEN".to_string())].into(),
        }
    );
    assert_eq!(
        s.tools.mcp_servers["search"].transport,
        McpTransport::Http {
            url: "https://mcp.example.com/mcp".into(),
            headers_env: [("Authorization".to_string(), "SEARCH_MCP_AUTH".to_string())].into(),
        }
    );
    let disk = &s.tools.command_tools["disk_free"];
    assert_eq!(
        disk.command,
        ToolCommand::Argv {
            argv: vec!["df".into(), "-h".into(), "--output=avail".into()]
        }
    );
    assert_eq!(disk.timeout_seconds, Some(10.0));
    assert_eq!(disk.parameters["required"], serde_json::json!(["path"]));
    let shout = &s.tools.command_tools["shout"];
    assert_eq!(
        shout.command,
        ToolCommand::Shell {
            script: "tr a-z A-Z".into()
        }
    );
    assert_eq!(
        shout.parameters,
        serde_json::json!({"type": "object", "properties": {}})
    );
    let ops = &s.agents["ops"];
    assert_eq!(
        ops.tools,
        vec![
            "files.read_file",
            "files.write_file",
            "search.*",
            "disk_free"
        ]
    );
    assert_eq!(ops.approve, vec!["files.write_file"]);
    assert_eq!(
        ops.limits,
        ToolLimits {
            max_turns: 12,
            tool_timeout_seconds: 30.0,
            max_tool_output_bytes: 4096,
            max_tool_calls_per_turn: 4,
            approval_timeout_seconds: 600.0,
        }
    );
    let Action::Agent { tools, .. } = &file.jobs[0].action else {
        panic!("not an agent job");
    };
    assert_eq!(
        tools.as_deref(),
        Some(
            &[
                "files.read_file".to_string(),
                "files.write_file".to_string()
            ][..]
        )
    );
    // The job may call files.write_file, which waits for approval, and has no sink.
    let w = warnings(&check(&text));
    assert_eq!(w.len(), 1, "{w:#?}");
    assert_eq!(w[0].0, "jobs[0]");
    assert!(w[0].1.contains("no `deliver:` sink"), "{}", w[0].1);
}

#[test]
fn limits_default_when_absent_and_the_file_round_trips_through_json() {
    let c = check(&with_agent("    tools: [disk_free]\n", ""));
    assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
    let file = c.into_result().unwrap().file;
    assert_eq!(file.settings.agents["ops"].limits, ToolLimits::default());
    let Action::Agent { tools, .. } = &file.jobs[0].action else {
        panic!("not an agent job");
    };
    assert_eq!(*tools, None, "no `tools:` on the job: the agent's list");
    let json = serde_json::to_string(&file).unwrap();
    let back: crate::model::JobsFile = serde_json::from_str(&json).unwrap();
    assert_eq!(back, file);
    // A stored file from before tools existed reads with empty sources and default limits.
    let mut old: serde_json::Value = serde_json::to_value(&file).unwrap();
    old["settings"].as_object_mut().unwrap().remove("tools");
    for k in ["tools", "approve", "limits"] {
        old["settings"]["agents"]["ops"]
            .as_object_mut()
            .unwrap()
            .remove(k);
    }
    let back: crate::model::JobsFile = serde_json::from_value(old).unwrap();
    assert!(back.settings.tools.is_empty());
    assert_eq!(back.settings.agents["ops"].limits, ToolLimits::default());
}

#[test]
fn bounds_of_the_loop_limits_are_enforced_with_their_range() {
    for (k, v, want) in [
        (
            "max_turns",
            "0",
            "expected a whole number from 1 to 100, found the number 0",
        ),
        (
            "max_turns",
            "101",
            "expected a whole number from 1 to 100, found the number 101",
        ),
        (
            "max_tool_calls_per_turn",
            "65",
            "expected a whole number from 1 to 64, found the number 65",
        ),
        (
            "max_tool_output_bytes",
            "10",
            "expected a whole number from 256 to 1048576 (1 MiB), found the number 10",
        ),
        (
            "approval_timeout_seconds",
            "86401",
            "must be at most 86400 (1 day), found 86401",
        ),
        (
            "approval_timeout_seconds",
            "0.5",
            "must be at least 1, found 0.5",
        ),
        ("tool_timeout_seconds", "0", "must be at least 0.1, found 0"),
    ] {
        let text = with_agent(&format!("    {k}: {v}\n"), "");
        let (key, line, col, msg) = one_error(&text);
        assert_eq!(key, format!("agents.ops.{k}"));
        assert_eq!(msg, want, "{k}: {v}");
        // The value on the agent's line after `model:`.
        assert_eq!(line, SOURCES.lines().count() + 4, "{k}");
        assert_eq!(col, k.len() + 7, "{k}");
    }
}

#[test]
fn allowlist_entries_must_name_declared_sources() {
    let (key, _, _, msg) = one_error(&with_agent("    tools: [nope.read]\n", ""));
    assert_eq!(key, "agents.ops.tools[0]");
    assert_eq!(
        msg,
        "unknown MCP server \"nope\"; MCP servers: files, search; command tools: disk_free, shout"
    );
    let (_, _, _, msg) = one_error(&with_agent("    tools: [files]\n", ""));
    assert!(
        msg.starts_with("\"files\" is an MCP server: name its tools as files.TOOL or files.*"),
        "{msg}"
    );
    let (_, _, _, msg) = one_error(&with_agent("    tools: [dsk_free]\n", ""));
    assert!(
        msg.starts_with("unknown command tool \"dsk_free\""),
        "{msg}"
    );
    let (key, _, _, msg) = one_error(&with_agent("    tools: [\"files.*x\"]\n", ""));
    assert_eq!(key, "agents.ops.tools[0]");
    assert!(msg.contains("use server.tool, server.* or the name of a command tool"));
    let (_, _, _, msg) = one_error(&with_agent("    tools: files.read_file\n", ""));
    assert!(msg.starts_with("expected a list of names"), "{msg}");
}

#[test]
fn approve_must_name_allowed_tools() {
    let (key, _, _, msg) = one_error(&with_agent(
        "    tools: [files.read_file]\n    approve: [files.write_file]\n",
        "    deliver: []\n",
    ));
    assert_eq!(key, "agents.ops.approve[0]");
    assert_eq!(
        msg,
        "\"files.write_file\" is not among the agent's allowed tools (files.read_file): \
         `approve` names tools of `tools`"
    );
    // `server.*` covers its tools; `approve: [server.*]` needs some allowed tool of it.
    let c = check(&with_agent(
        "    tools: [\"files.*\", search.query]\n    approve: [files.write_file, \"search.*\"]\n",
        "",
    ));
    assert!(errors(&c).is_empty(), "{:#?}", c.diagnostics);
    let (key, _, _, _) = one_error(&with_agent(
        "    tools: [disk_free]\n    approve: [\"files.*\"]\n",
        "",
    ));
    assert_eq!(key, "agents.ops.approve[0]");
}

#[test]
fn a_job_may_narrow_its_agents_list_but_never_widen_it() {
    let agent = "    tools: [\"files.*\", disk_free]\n";
    let c = check(&with_agent(
        agent,
        "    tools: [files.read_file, disk_free]\n",
    ));
    assert!(errors(&c).is_empty(), "{:#?}", c.diagnostics);
    let c = check(&with_agent(agent, "    tools: []\n"));
    assert!(errors(&c).is_empty(), "{:#?}", c.diagnostics);
    let (key, line, col, msg) = one_error(&with_agent(agent, "    tools: [disk_free, shout]\n"));
    assert_eq!(key, "jobs[0].tools[1]");
    assert_eq!(
        msg,
        "\"shout\" would widen agent 'ops''s tools (files.*, disk_free): a job may only narrow \
         its agent's list"
    );
    let lines = with_agent(agent, "").lines().count();
    assert_eq!((line, col), (lines + 1, 24));
    // One tool of a server never admits the whole server.
    let (key, _, _, _) = one_error(&with_agent(
        "    tools: [files.read_file]\n",
        "    tools: [\"files.*\"]\n",
    ));
    assert_eq!(key, "jobs[0].tools[0]");
    // A command job calls no tools.
    let text = format!(
        "{SOURCES}jobs:\n  - name: c\n    schedule: every 1h\n    command: \"true\"\n    tools: [disk_free]\n"
    );
    let (key, _, _, msg) = one_error(&text);
    assert_eq!(key, "jobs[0].tools");
    assert!(msg.contains("a `command` job calls no tools"), "{msg}");
}

#[test]
fn a_narrowed_job_that_cannot_reach_an_approved_tool_needs_no_sink() {
    let agent = "    tools: [files.read_file, files.write_file]\n    approve: [files.write_file]\n";
    let c = check(&with_agent(agent, "    tools: [files.read_file]\n"));
    assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
    let c = check(&with_agent(agent, ""));
    assert_eq!(warnings(&c).len(), 1, "{:#?}", c.diagnostics);
}

#[test]
fn names_that_meet_on_one_wire_name_are_a_collision() {
    let text = format!(
        "{SOURCES}  files__read_file:\n    description: x\n    command: [\"true\"]\nagents:\n  ops:\n    model: m\n    tools: [files.read_file, files__read_file]\njobs: []\n"
    );
    let (key, _, _, msg) = one_error(&text);
    assert_eq!(key, "agents.ops.tools[1]");
    assert_eq!(
        msg,
        "\"files.read_file\" and \"files__read_file\" both reach the model as files__read_file: \
         rename the command tool (or drop one of them)"
    );
}

#[test]
fn server_definitions_are_checked_key_by_key() {
    let base = "agents: {}\njobs: []\nmcp_servers:\n";
    let cases: &[(&str, &str, &str)] = &[
        (
            "  a:\n    command: [x]\n    url: http://127.0.0.1:1/mcp\n",
            "mcp_servers.a.url",
            "`command` and `url` are mutually exclusive",
        ),
        (
            "  a:\n    cwd: /tmp\n",
            "mcp_servers.a",
            "needs `command: [PROGRAM, ARGS…]` (stdio) or `url: URL` (streamable HTTP)",
        ),
        (
            "  a:\n    command: \"npx server\"\n",
            "mcp_servers.a.command",
            "expected a list such as [npx, -y,",
        ),
        (
            "  a:\n    command: []\n",
            "mcp_servers.a.command",
            "must not be empty",
        ),
        (
            "  a:\n    command: [\"\"]\n",
            "mcp_servers.a.command[0]",
            "the program must not be blank",
        ),
        (
            "  a.b:\n    command: [x]\n",
            "mcp_servers.a.b",
            "no dot: a dot separates a server from its tool",
        ),
        (
            "  a:\n    url: ftp://x/mcp\n",
            "mcp_servers.a.url",
            "unsupported URL scheme 'ftp'",
        ),
        (
            "  a:\n    url: https://u:p@x/mcp\n",
            "mcp_servers.a.url",
            "credentials in the URL",
        ),
        (
            "  a:\n    url: https://x/mcp\n    env: {A: b}\n",
            "mcp_servers.a.env",
            "`env` applies to stdio servers",
        ),
        (
            "  a:\n    command: [x]\n    headers_env: {Authorization: T}\n",
            "mcp_servers.a.headers_env",
            "`headers_env` applies to `url` servers only",
        ),
        (
            "  a:\n    url: https://x/mcp\n    headers_env: {Mcp-Session-Id: T}\n",
            "mcp_servers.a.headers_env.Mcp-Session-Id",
            "is set by the transport itself",
        ),
        (
            "  a:\n    url: https://x/mcp\n    headers_env: {Authorization: \"Bearer sk-123\"}\n",
            "mcp_servers.a.headers_env.Authorization",
            "never the secret itself",
        ),
        (
            "  a:\n    command: [x]\n    env_from: {TOKEN: OPENAI_API_KEY}\n",
            "mcp_servers.a.env_from.TOKEN",
            "OPENAI_API_KEY holds a model provider's key",
        ),
        (
            "  a:\n    command: [x]\n    env: {\"1BAD\": x}\n",
            "mcp_servers.a.env.1BAD",
            "invalid variable name",
        ),
        (
            "  a:\n    command: [x]\n    comand: [y]\n",
            "mcp_servers.a.comand",
            "unknown key \"comand\" (did you mean 'command'?)",
        ),
    ];
    for (body, want_key, want_msg) in cases {
        let (key, _, _, msg) = one_error(&format!("{base}{body}"));
        assert_eq!(&key, want_key, "{body}");
        assert!(msg.contains(want_msg), "{body}: {msg}");
        // A secret pasted where a variable name belongs is never echoed.
        assert!(!msg.contains("sk-123"), "{msg}");
    }
}

#[test]
fn an_agents_own_key_variable_is_refused_as_a_tool_secret() {
    let text = "mcp_servers:\n  a:\n    url: https://x/mcp\n    headers_env: {Authorization: MY_KEY}\nagents:\n  ops:\n    model: m\n    api_key_env: MY_KEY\njobs: []\n";
    let (key, line, col, msg) = one_error(text);
    assert_eq!(key, "mcp_servers.a.headers_env.Authorization");
    assert_eq!((line, col), (4, 34));
    assert!(
        msg.starts_with("MY_KEY holds a model provider's key"),
        "{msg}"
    );
}

#[test]
fn command_tools_are_checked_key_by_key() {
    let base = "jobs: []\ntools:\n";
    let cases: &[(&str, &str, &str)] = &[
        (
            "  t:\n    command: [x]\n",
            "tools.t",
            "missing required key `description`",
        ),
        (
            "  t:\n    description: d\n",
            "tools.t",
            "missing required key `command`",
        ),
        (
            "  t:\n    description: d\n    command: [x]\n    parameters: {type: string}\n",
            "tools.t.parameters",
            "must have `type: object`",
        ),
        (
            "  t:\n    description: d\n    command: [x]\n    parameters: {type: object, required: path}\n",
            "tools.t.parameters.required",
            "expected a list of argument names",
        ),
        (
            "  t:\n    description: d\n    command: [x]\n    parameters: {type: object, properties: [a]}\n",
            "tools.t.parameters.properties",
            "expected a mapping of argument name",
        ),
        (
            "  t:\n    description: d\n    command: [x]\n    parameters: {type: object, properties: {n: {maximum: .inf}}}\n",
            "tools.t.parameters.properties.n.maximum",
            "JSON has no infinities or NaN",
        ),
        (
            "  t:\n    description: d\n    command: {run: x}\n",
            "tools.t.command",
            "or a string run by sh -c",
        ),
        (
            "  t:\n    description: d\n    command: [x]\n    timeout_seconds: 0\n",
            "tools.t.timeout_seconds",
            "must be at least 0.1",
        ),
        (
            "  t.x:\n    description: d\n    command: [x]\n",
            "tools.t.x",
            "invalid command tool name",
        ),
        (
            "  t:\n    description: d\n    command: [x]\n    env_from: {K: ANTHROPIC_API_KEY}\n",
            "tools.t.env_from.K",
            "holds a model provider's key",
        ),
    ];
    for (body, want_key, want_msg) in cases {
        let (key, _, _, msg) = one_error(&format!("{base}{body}"));
        assert_eq!(&key, want_key, "{body}");
        assert!(msg.contains(want_msg), "{body}: {msg}");
    }
}

#[test]
fn an_agent_naming_a_broken_source_is_told_so() {
    let text = "mcp_servers:\n  a:\n    cwd: /x\nagents:\n  ops:\n    model: m\n    tools: [a.t]\njobs: []\n";
    let c = check(text);
    let e = errors(&c);
    assert_eq!(e.len(), 2, "{e:#?}");
    assert_eq!(e[1].0, "agents.ops.tools[0]");
    assert_eq!(e[1].3, "\"a\" has errors (reported where it is defined)");
}

#[test]
fn an_unset_secret_source_is_a_warning_naming_it() {
    let text = "mcp_servers:\n  a:\n    command: [x]\n    env_from: {TOKEN: A_TOKEN}\njobs: []\n";
    let c = crate::config::check_str_with_env(text, Path::new("jobs.yaml"), &|_| false);
    assert!(errors(&c).is_empty(), "{:#?}", c.diagnostics);
    let w = warnings(&c);
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].0, "mcp_servers.a.env_from.TOKEN");
    assert!(
        w[0].1
            .starts_with("environment variable A_TOKEN is not set")
    );
}

#[test]
fn a_relative_cwd_is_resolved_against_the_jobs_files_directory() {
    let dir = crate::testkit::tmp::TempDir::new("cwd");
    let path = dir.path().join("jobs.yaml");
    std::fs::write(
        &path,
        "mcp_servers:\n  a:\n    command: [x]\n    cwd: data\njobs: []\n",
    )
    .unwrap();
    let loaded = load_file(&path).unwrap();
    let McpTransport::Stdio { cwd, .. } = &loaded.file.settings.tools.mcp_servers["a"].transport
    else {
        panic!("not stdio");
    };
    let want = std::fs::canonicalize(dir.path()).unwrap().join("data");
    assert_eq!(cwd.as_deref(), Some(want.to_str().unwrap()));
}

#[test]
fn check_bounds_holds_the_loop_limits_too() {
    let mut f = check(&with_agent("    tools: [disk_free]\n", ""))
        .into_result()
        .unwrap()
        .file;
    assert_eq!(check_bounds(&f), Ok(()));
    f.settings.agents.get_mut("ops").unwrap().limits.max_turns = 0;
    assert_eq!(
        check_bounds(&f).map_err(|e| e.key),
        Err("agents.ops.max_turns".to_string())
    );
}

/// The job-by-job hand-over (`apply`) and `validate`'s read-back check each job again after
/// the sections: a job's own `tools:` names the sources read in the first pass there too.
#[test]
fn a_narrowing_job_survives_the_hand_over_passes() {
    let text = with_agent(
        "    tools: [\"files.*\", disk_free]\n",
        "    tools: [files.read_file]\n",
    );
    let dir = crate::testkit::tmp::TempDir::new("handover");
    let path = dir.path().join("jobs.yaml");
    std::fs::write(&path, &text).unwrap();
    let loaded = load_file(&path).unwrap_or_else(|e| panic!("{e}"));
    let prepared = prepare_file(&path).unwrap_or_else(|e| panic!("{e}"));
    let mut jobs = Vec::new();
    prepared
        .for_each_job(&mut |j| {
            jobs.push(j);
            Ok::<(), ()>(())
        })
        .unwrap_or_else(|_| panic!("hand-over refused"));
    assert_eq!(jobs, loaded.file.jobs);
    let now = chrono::Utc::now();
    let v = validate_str_at(&text, &path, now);
    assert!(!v.has_errors(), "{:#?}", v.diagnostics);
    let mut n = 0;
    v.for_each_valid(&path, &mut |_| {
        n += 1;
        Ok::<(), ()>(())
    })
    .unwrap_or_else(|_| panic!("read-back refused"));
    assert_eq!(n, 1);
}

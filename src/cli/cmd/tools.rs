//! `cronsole tools [--agent A] [--accept SERVER]… [--json]`: what the agents' tool sources
//! really offer, against what the store pinned.
//!
//! Owns: connecting to each MCP server of the store's settings as a run would (its secrets,
//! its process under the supervisor, `tools/list` only, never `tools/call`), the report (per
//! server its protocol version and tools with their hashes and pin state; per agent what it is
//! allowed, offered, missing, changed), and `--accept`, which replaces a server's pins with what
//! it lists now. Must not touch: the pinning rules (`action::tools::pin`), the runs.
//!
//! Decisions where the contract is silent: a server that cannot be reached is a line of the
//! report, not the end of it; the exit code is 1 when any server is unreachable or any agent's
//! next run would fail on its tools (a missing or changed tool), so a script can gate on it.
//! `--accept` connects first and writes only what it listed; a server it cannot reach pins
//! nothing. Server descriptions are untrusted text: shown inert, cut to one line.

use std::process::ExitCode;
use std::sync::Arc;

use crate::action::agent::forecast::{ToolsForecast, forecast};
use crate::action::tools::pin;
use crate::action::tools::toolbox::{self, EnvLookup};
use crate::action::tools::{OfferedTool, ToolDef, ToolSource};
use crate::cost::PriceTable;
use crate::model::{
    Action, JobDef, McpServerDef, McpTransport, Settings, ToolPattern, ToolPin, wire_name,
};
use crate::proc::ProcEnv;
use crate::store::Store;
use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::store_location;
use super::{bad_input, jobs_file, open_existing_store, open_existing_store_to_write};
use crate::cli::args::{Cli, ToolsArgs};

#[derive(Debug, Serialize)]
struct ToolRow {
    /// `server.tool`.
    name: String,
    /// The hash of the definition listed now (empty for a pinned tool no longer listed).
    hash: String,
    /// `pinned`, `changed`, `new`, or `gone` (pinned, no longer listed).
    pin: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pinned_hash: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pinned_at: Option<DateTime<Utc>>,
    description: String,
}

#[derive(Debug, Serialize)]
struct ServerRow {
    name: String,
    transport: &'static str,
    protocol_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    tools: Vec<ToolRow>,
}

#[derive(Debug, Serialize)]
struct AgentRow {
    name: String,
    allowed: Vec<String>,
    offered: Vec<String>,
    /// Allowed tools not listed, or of a server that could not be reached.
    missing: Vec<String>,
    /// Offered tools whose definitions differ from their pins (or newly appeared under a
    /// wildcard of a pinned server).
    changed: Vec<String>,
}

#[derive(Debug, Serialize)]
struct Report {
    servers: Vec<ServerRow>,
    command_tools: Vec<String>,
    agents: Vec<AgentRow>,
}

/// What one server listed (or why it could not).
struct Listed {
    def: McpServerDef,
    protocol: Option<String>,
    tools: Result<Vec<ToolDef>, String>,
}

pub fn tools(cli: &Cli, a: &ToolsArgs) -> Result<ExitCode> {
    let location = store_location(cli, jobs_file(cli).as_deref());
    let store = if a.accept.is_empty() {
        open_existing_store(&location)?
    } else {
        open_existing_store_to_write(&location)?
    };
    let settings = store.settings()?;
    if !(a.timeout > 0.0 && a.timeout <= 3600.0) {
        return Err(bad_input("--timeout must be between 0 and 3600 seconds"));
    }
    if let Some(agent) = &a.agent
        && !settings.agents.contains_key(agent)
    {
        return Err(bad_input(format!(
            "no agent named '{agent}' in the store's settings"
        )));
    }
    for s in &a.accept {
        if !settings.tools.mcp_servers.contains_key(s) {
            return Err(bad_input(format!(
                "no MCP server named '{s}' in the store's settings"
            )));
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("could not start the async runtime")?;
    if !a.accept.is_empty() {
        return rt.block_on(accept(&store, &settings, a));
    }
    let names = servers_of(&settings, a.agent.as_deref());
    let listed = rt.block_on(list_all(&settings, &names, a.timeout));
    let pins = store.tool_pins(&names)?;
    let report = report(&settings, a.agent.as_deref(), &listed, &pins);
    let failing = report.servers.iter().any(|s| s.error.is_some())
        || report
            .agents
            .iter()
            .any(|g| !g.missing.is_empty() || !g.changed.is_empty());
    if a.json {
        println!("{}", crate::text::to_json_pretty(&report)?);
    } else {
        print_text(&report);
    }
    Ok(if failing {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The servers to connect to: every one, or those `agent`'s allowlist names.
fn servers_of(settings: &Settings, agent: Option<&str>) -> Vec<String> {
    let named: Option<Vec<String>> = agent.and_then(|n| settings.agents.get(n)).map(|g| {
        g.tools
            .iter()
            .filter_map(|t| ToolPattern::parse(t))
            .filter_map(|p| p.server().map(str::to_string))
            .collect()
    });
    settings
        .tools
        .mcp_servers
        .keys()
        .filter(|k| named.as_ref().is_none_or(|n| n.contains(k)))
        .cloned()
        .collect()
}

/// Where tool processes start: the jobs file's directory, like a run's.
fn proc_env(settings: &Settings) -> ProcEnv {
    ProcEnv {
        workdir: settings
            .base_dir
            .as_deref()
            .map(std::path::PathBuf::from)
            .filter(|d| d.is_dir()),
        ..ProcEnv::default()
    }
}

async fn list_one(settings: &Settings, def: &McpServerDef, timeout: f64) -> Listed {
    let env: EnvLookup = Arc::new(|name| std::env::var(name).ok());
    let timeout = toolbox::secs(timeout);
    let (protocol, tools) = match toolbox::open_one(def, &proc_env(settings), &env, timeout).await {
        Ok(src) => {
            let tools = src.list().await.map_err(|e| e.to_string());
            let protocol = src.protocol_version();
            src.close().await;
            (protocol, tools)
        }
        Err(e) => (None, Err(e.to_string())),
    };
    Listed {
        def: def.clone(),
        protocol,
        tools,
    }
}

async fn list_all(settings: &Settings, names: &[String], timeout: f64) -> Vec<Listed> {
    let mut out = Vec::new();
    for n in names {
        if let Some(def) = settings.tools.mcp_servers.get(n) {
            out.push(list_one(settings, def, timeout).await);
        }
    }
    out
}

async fn accept(store: &Arc<dyn Store>, settings: &Settings, a: &ToolsArgs) -> Result<ExitCode> {
    let mut code = ExitCode::SUCCESS;
    for name in &a.accept {
        let Some(def) = settings.tools.mcp_servers.get(name) else {
            continue;
        };
        let listed = list_one(settings, def, a.timeout).await;
        match listed.tools {
            Ok(tools) => {
                let pins = pin::accepted(name, &tools, Utc::now());
                let n = pins.len();
                let (store, server) = (store.clone(), name.clone());
                let replaced =
                    crate::store::blocking(&store, move |s| s.accept_tools(&server, &pins)).await?;
                println!(
                    "{}: pinned {n} tool(s) as listed now ({replaced} earlier pin(s) replaced)",
                    super::inert(&name)
                );
            }
            Err(e) => {
                eprintln!(
                    "{}: nothing pinned: {}",
                    super::inert(&name),
                    super::inert(&e)
                );
                code = ExitCode::from(1);
            }
        }
    }
    Ok(code)
}

fn transport(def: &McpServerDef) -> &'static str {
    match def.transport {
        McpTransport::Stdio { .. } => "stdio",
        McpTransport::Http { .. } => "http",
    }
}

fn server_row(l: &Listed, pins: &[ToolPin]) -> ServerRow {
    let name = l.def.name.clone();
    let mine = |t: &str| pins.iter().find(|p| p.server == name && p.tool == t);
    let mut tools = Vec::new();
    if let Ok(listed) = &l.tools {
        for d in listed {
            let hash = d.definition_hash();
            let p = mine(&d.name);
            tools.push(ToolRow {
                name: format!("{name}.{}", d.name),
                pin: pin::state(&hash, p).word(),
                pinned_hash: p.map(|p| p.hash.clone()),
                pinned_at: p.map(|p| p.pinned_at),
                hash,
                description: d.description.clone(),
            });
        }
        for p in pins.iter().filter(|p| p.server == name) {
            if !listed.iter().any(|d| d.name == p.tool) {
                tools.push(ToolRow {
                    name: p.qualified(),
                    hash: String::new(),
                    pin: "gone",
                    pinned_hash: Some(p.hash.clone()),
                    pinned_at: Some(p.pinned_at),
                    description: String::new(),
                });
            }
        }
    }
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    ServerRow {
        name: name.clone(),
        transport: transport(&l.def),
        protocol_version: l.protocol.clone(),
        error: l.tools.as_ref().err().cloned(),
        tools,
    }
}

fn agent_row(
    name: &str,
    allowed: &[String],
    settings: &Settings,
    listed: &[Listed],
    pins: &[ToolPin],
) -> AgentRow {
    let patterns: Vec<ToolPattern> = allowed
        .iter()
        .filter_map(|t| ToolPattern::parse(t))
        .collect();
    let mut offered: Vec<OfferedTool> = Vec::new();
    let mut missing = Vec::new();
    for l in listed {
        let Ok(tools) = &l.tools else {
            // Each entry as the jobs file wrote it: the server line above says why it was not
            // listed (unreachable, too many tools, …).
            for p in patterns
                .iter()
                .filter(|p| p.server() == Some(l.def.name.as_str()))
            {
                missing.push(format!("{p} (its server did not list its tools)"));
            }
            continue;
        };
        for d in tools {
            let q = format!("{}.{}", l.def.name, d.name);
            if patterns.iter().any(|p| p.admits(&q)) {
                offered.push(OfferedTool {
                    wire_name: wire_name(&q),
                    qualified: q,
                    source: 0,
                    hash: d.definition_hash(),
                    def: d.clone(),
                });
            }
        }
    }
    let mut names: Vec<String> = offered.iter().map(|o| o.qualified.clone()).collect();
    for p in &patterns {
        match p {
            ToolPattern::Tool { server, .. } => {
                let reached = listed
                    .iter()
                    .any(|l| &l.def.name == server && l.tools.is_ok());
                if reached && !names.contains(&p.to_string()) {
                    missing.push(p.to_string());
                }
            }
            ToolPattern::Command(c) => {
                if settings.tools.command_tools.contains_key(c) {
                    names.push(c.clone());
                } else {
                    missing.push(c.clone());
                }
            }
            ToolPattern::AllOf { .. } => {}
        }
    }
    names.sort();
    let changed = match pin::check(&offered, &patterns, pins, Utc::now()) {
        Ok(_) => Vec::new(),
        Err(c) => c.tools,
    };
    AgentRow {
        name: name.to_string(),
        allowed: allowed.to_vec(),
        offered: names,
        missing,
        changed,
    }
}

fn report(settings: &Settings, agent: Option<&str>, listed: &[Listed], pins: &[ToolPin]) -> Report {
    let agents = settings
        .agents
        .iter()
        .filter(|(n, _)| agent.is_none_or(|a| a == n.as_str()))
        .map(|(n, g)| agent_row(n, &g.tools, settings, listed, pins))
        .collect();
    Report {
        servers: listed.iter().map(|l| server_row(l, pins)).collect(),
        command_tools: settings.tools.command_tools.keys().cloned().collect(),
        agents,
    }
}

/// A hash as the text view shows it: its first 12 hex digits.
fn short(h: &str) -> &str {
    h.get(..12).unwrap_or(h)
}

/// The text view of `r`.
fn text(r: &Report) -> String {
    use crate::text::visible_line as one;
    use std::fmt::Write as _;
    let mut out = String::new();
    if r.servers.is_empty() && r.command_tools.is_empty() {
        let _ = writeln!(out, "no tool sources (mcp_servers: and tools: are empty)");
    }
    for s in &r.servers {
        // Writing to a String cannot fail.
        let _ = match (&s.error, &s.protocol_version) {
            (Some(e), _) => writeln!(
                out,
                "server {} ({}): unreachable: {}",
                one(&s.name),
                s.transport,
                one(e)
            ),
            (None, v) => writeln!(
                out,
                "server {} ({}, protocol {}): {} tool(s)",
                one(&s.name),
                s.transport,
                v.as_deref().unwrap_or("unknown"),
                s.tools.len()
            ),
        };
        // Columns as wide as their widest entry, so a long name does not push one row's
        // columns out of line with the others'.
        let cells: Vec<(String, String)> = s
            .tools
            .iter()
            .map(|t| {
                let pinned = match (t.pin, &t.pinned_hash) {
                    ("changed" | "gone", Some(p)) => format!(" (pinned {})", short(p)),
                    _ => String::new(),
                };
                (one(&t.name).into_owned(), pinned)
            })
            .collect();
        let width = |f: fn(&(String, String)) -> &String| {
            cells
                .iter()
                .map(|c| f(c).chars().count())
                .max()
                .unwrap_or(0)
        };
        let (name_w, pinned_w) = (width(|c| &c.0), width(|c| &c.1));
        for (t, (name, pinned)) in s.tools.iter().zip(&cells) {
            let desc: String = t.description.chars().take(60).collect();
            let _ = writeln!(
                out,
                "  {name:<name_w$} {:<7} {:<12}{pinned:<pinned_w$}  {}",
                t.pin,
                short(&t.hash),
                one(&desc)
            );
        }
    }
    if !r.command_tools.is_empty() {
        let _ = writeln!(out, "command tools: {}", r.command_tools.join(", "));
    }
    for g in &r.agents {
        let _ = writeln!(out, "agent {}", one(&g.name));
        let list = |v: &[String]| {
            if v.is_empty() {
                "-".to_string()
            } else {
                one(&v.join(", ")).into_owned()
            }
        };
        let _ = writeln!(out, "  allowed: {}", list(&g.allowed));
        let _ = writeln!(out, "  offered: {}", list(&g.offered));
        if !g.missing.is_empty() {
            let _ = writeln!(
                out,
                "  missing: {} (its runs fail before the first model call)",
                list(&g.missing)
            );
        }
        if !g.changed.is_empty() {
            let _ = writeln!(
                out,
                "  changed: {} (review, then cronsole tools --accept SERVER)",
                list(&g.changed)
            );
        }
    }
    out
}

fn print_text(r: &Report) {
    print!("{}", text(r));
}

/// What `describe` shows of an agent job's tools: the store's pinned definitions, no server
/// contacted.
#[derive(Debug, Serialize)]
pub struct PinnedTools {
    /// The tools a run would be offered as pinned, their weight and the loop's worst case.
    #[serde(flatten)]
    pub forecast: ToolsForecast,
    /// Allowed tools with no pin yet (their first run pins them; their weight is not counted).
    pub unpinned: Vec<String>,
}

/// The pinned view of `def`'s tools; `None` for a job without an agent or without tools.
pub fn pinned_tools(
    store: &dyn Store,
    settings: &Settings,
    def: &JobDef,
) -> Result<Option<PinnedTools>> {
    let Action::Agent {
        agent,
        message,
        tools,
        ..
    } = &def.action
    else {
        return Ok(None);
    };
    let Some(agent) = settings.agents.get(agent) else {
        return Ok(None);
    };
    let patterns: Vec<ToolPattern> = tools
        .as_ref()
        .unwrap_or(&agent.tools)
        .iter()
        .filter_map(|t| ToolPattern::parse(t))
        .collect();
    if patterns.is_empty() {
        return Ok(None);
    }
    let mut servers: Vec<String> = patterns
        .iter()
        .filter_map(|p| p.server().map(str::to_string))
        .collect();
    servers.sort();
    servers.dedup();
    let pins = store.tool_pins(&servers)?;
    let mut offered = Vec::new();
    let mut unpinned = Vec::new();
    for p in &pins {
        let q = p.qualified();
        if patterns.iter().any(|a| a.admits(&q))
            && let Ok(d) = serde_json::from_value::<ToolDef>(p.definition.clone())
        {
            offered.push(offered_tool(q, d));
        }
    }
    for p in &patterns {
        match p {
            ToolPattern::Tool { .. } if !offered.iter().any(|o| o.qualified == p.to_string()) => {
                unpinned.push(p.to_string());
            }
            ToolPattern::AllOf { server } if !pins.iter().any(|q| &q.server == server) => {
                unpinned.push(p.to_string());
            }
            ToolPattern::Command(c) => {
                if let Some(t) = settings.tools.command_tools.get(c) {
                    let d = ToolDef {
                        name: t.name.clone(),
                        description: t.description.clone(),
                        input_schema: t.parameters.clone(),
                        output_schema: None,
                    };
                    offered.push(offered_tool(c.clone(), d));
                }
            }
            _ => {}
        }
    }
    offered.sort_by(|a, b| a.qualified.cmp(&b.qualified));
    let price = PriceTable::from_settings(settings)
        .resolve(&agent.model)
        .map(|r| r.price);
    Ok(Some(PinnedTools {
        forecast: forecast(agent, message, &offered, price),
        unpinned,
    }))
}

fn offered_tool(qualified: String, def: ToolDef) -> OfferedTool {
    OfferedTool {
        wire_name: wire_name(&qualified),
        hash: def.definition_hash(),
        qualified,
        source: 0,
        def,
    }
}

/// `describe`'s lines for [`PinnedTools`].
pub fn print_pinned(t: &PinnedTools) {
    use crate::text::visible_line as one;
    let f = &t.forecast;
    let names: Vec<String> = f
        .tools
        .iter()
        .map(|x| format!("{} ({} tokens)", one(&x.name), x.definition_tokens))
        .collect();
    println!(
        "{:<12} {} from the store's pins (no server contacted): {}",
        "tools:",
        f.tools.len(),
        if names.is_empty() {
            "-".into()
        } else {
            names.join(", ")
        }
    );
    println!(
        "{:<12} definitions {} tokens per turn; {}",
        "",
        f.definition_tokens,
        f.worst_case_text()
    );
    if !t.unpinned.is_empty() {
        println!(
            "{:<12} not pinned yet (their first run pins them): {}",
            "",
            one(&t.unpinned.join(", "))
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, pin: &'static str, pinned: Option<&str>) -> ToolRow {
        ToolRow {
            name: name.into(),
            hash: "ab".repeat(32),
            pin,
            pinned_hash: pinned.map(str::to_string),
            pinned_at: None,
            description: "what it does".into(),
        }
    }

    #[test]
    fn the_tool_columns_stay_in_line_past_long_names_and_old_pins() {
        let long = format!("srv.{}", "x".repeat(60));
        let r = Report {
            servers: vec![ServerRow {
                name: "srv".into(),
                transport: "stdio",
                protocol_version: Some("2025-11-25".into()),
                error: None,
                tools: vec![
                    tool("srv.a", "pinned", None),
                    tool(&long, "new", None),
                    tool("srv.b", "changed", Some(&"cd".repeat(32))),
                ],
            }],
            command_tools: Vec::new(),
            agents: Vec::new(),
        };
        let out = text(&r);
        let rows: Vec<&str> = out.lines().filter(|l| l.starts_with("  srv.")).collect();
        assert_eq!(rows.len(), 3, "{out}");
        let column = |word: &str| -> Vec<usize> {
            rows.iter()
                .map(|l| l.find(word).unwrap_or_else(|| panic!("{word} in {l}")))
                .collect()
        };
        // The pin word, the hash and the description each start at one column on every row.
        for word in ["what it does", "abababababab"] {
            let at = column(word);
            assert!(at.iter().all(|c| *c == at[0]), "{word}: {at:?}\n{out}");
        }
        let pins: Vec<usize> = [(0, " pinned "), (1, " new "), (2, " changed ")]
            .iter()
            .map(|(i, w)| rows[*i].find(w).unwrap_or_else(|| panic!("{w}\n{out}")))
            .collect();
        assert!(pins.iter().all(|c| *c == pins[0]), "{pins:?}\n{out}");
        assert!(rows[2].contains("(pinned cdcdcdcdcdcd)"), "{out}");
    }
}

//! The tool sections: `mcp_servers:` and the command tools of the top-level `tools:`, an agent's
//! `tools` (its exact allowlist), `approve` and loop limits, and a job's `tools` (which may
//! only narrow its agent's list).
//!
//! Owns: those keys, their bounds and how they refer to one another, and the collision check
//! of the names providers are given. Must not touch: processes or the network (`validate`
//! never connects to a server: it knows the tools a server lists only by the names the file
//! writes), jobs' other keys.
//!
//! Decisions an operator can rely on:
//! - A server's or command tool's name is 1–64 characters from `A-Z a-z 0-9 _ -`: no dot (a
//!   dot separates a server from its tool in `server.tool`), and exactly what providers
//!   accept, so a command tool reaches the model under its own name.
//! - A stdio server's `command` is an argument list, never a shell line. A command tool's
//!   `command` is either an argument list or a string run by `sh -c`; its arguments never
//!   enter either (they arrive as JSON on stdin).
//! - `env_from`, `headers_env`: a provider key (any agent's `api_key_env`, `OPENAI_API_KEY`,
//!   `ANTHROPIC_API_KEY`) is refused as a source: a tool gets its own secret, never the
//!   model's. An unset source variable is a warning (the source fails when it starts).
//! - `headers_env` may not set the headers the transport owns (`Content-Type`, `Accept`,
//!   `Mcp-Session-Id`, `Mcp-Protocol-Version`, `Host`, …).
//! - `parameters` is an object schema (`type: object`); absent, the tool takes no arguments.
//! - `approve: [server.*]` is accepted when the agent allows some tool of that server, and
//!   means every tool of it that the agent allows.

use std::collections::{BTreeMap, BTreeSet};

use super::checker::{Checker, describe_value, index, key, kind_of, list, show, valid_env_name};
use crate::config::bounds;
use crate::config::yaml::{Mapping, Number, Seg, Value, key_text};
use crate::model::{
    AgentDef, CommandToolDef, MCP_PROTOCOL_VERSIONS, McpServerDef, McpTransport, ToolCommand,
    ToolLimits, ToolPattern, ToolSettings, valid_wire_name, wire_name,
};

pub(crate) const MCP_KEYS: &[&str] = &[
    "command",
    "cwd",
    "env",
    "env_from",
    "url",
    "headers_env",
    "protocol_version",
];
pub(crate) const COMMAND_TOOL_KEYS: &[&str] = &[
    "description",
    "parameters",
    "command",
    "timeout_seconds",
    "env",
    "env_from",
];

/// Headers the streamable-HTTP transport sets itself; `headers_env` may not replace them.
const TRANSPORT_HEADERS: &[&str] = &[
    "accept",
    "connection",
    "content-length",
    "content-type",
    "host",
    "last-event-id",
    "mcp-protocol-version",
    "mcp-session-id",
    "transfer-encoding",
];

impl Checker<'_> {
    /// `mcp_servers:` and the top-level `tools:`.
    pub(super) fn tool_sources(&mut self, top: &Mapping) -> ToolSettings {
        let mut out = ToolSettings::default();
        for (name, p, v) in self.named_entries(
            top,
            "mcp_servers",
            "server name → {command: [PROGRAM, ARGS…]} or {url: URL}",
            "MCP server",
            false,
        ) {
            let named = self.source_name(&name, &p, "MCP server");
            let protocol_version = v.as_mapping().and_then(|m| self.protocol_version(m, &p));
            match self.mcp_server(&name, v, &p) {
                Some(transport) if named => {
                    self.tool_names.servers.insert(name.clone());
                    out.mcp_servers.insert(
                        name.clone(),
                        McpServerDef {
                            name,
                            transport,
                            protocol_version,
                        },
                    );
                }
                _ => {
                    self.tool_names.broken.insert(name);
                }
            }
        }
        for (name, p, v) in self.named_entries(
            top,
            "tools",
            "command tool name → {description, parameters, command}",
            "command tool",
            false,
        ) {
            let named = self.source_name(&name, &p, "command tool");
            match self.command_tool(&name, v, &p) {
                Some(def) if named => {
                    self.tool_names.commands.insert(name.clone());
                    out.command_tools.insert(name, def);
                }
                _ => {
                    self.tool_names.broken.insert(name);
                }
            }
        }
        out
    }

    /// `protocol_version`: one of the versions this build speaks.
    fn protocol_version(&mut self, m: &Mapping, p: &[Seg]) -> Option<String> {
        let v = self.opt_text(m, p, "protocol_version")?;
        let v = v.trim().to_string();
        if MCP_PROTOCOL_VERSIONS.contains(&v.as_str()) {
            return Some(v);
        }
        self.error(
            key(p, "protocol_version"),
            format!(
                "unknown MCP protocol version {}: use one of {} (or leave it out: discovery \
                 first, the initialize handshake for older servers)",
                show(&v),
                MCP_PROTOCOL_VERSIONS.join(", ")
            ),
        );
        None
    }

    fn source_name(&mut self, name: &str, p: &[Seg], noun: &str) -> bool {
        if valid_wire_name(name) {
            return true;
        }
        self.error_at_key(
            p.to_vec(),
            format!(
                "invalid {noun} name {}: use 1–64 characters from A-Z a-z 0-9 _ - (no dot: a \
                 dot separates a server from its tool in `server.tool`)",
                show(name)
            ),
        );
        false
    }

    fn mcp_server(&mut self, name: &str, v: &Value, p: &[Seg]) -> Option<McpTransport> {
        let m = self.mapping(
            v,
            p,
            "an MCP server such as {command: [npx, -y, PACKAGE]} or {url: https://…/mcp}",
        )?;
        self.check_keys(m, p, MCP_KEYS);
        let has = |k: &str| Self::get(m, k).is_some();
        let command = self.opt_argv(m, p, "command", false);
        let url = self.opt_text(m, p, "url");
        let cwd = self.opt_path(m, p, "cwd");
        let env = self.env_literals(m, p);
        let env_from = self.env_sources(m, p, "env_from");
        let headers_env = self.header_sources(m, p);
        match (has("command"), has("url")) {
            (true, true) => {
                self.error_at_key(
                    key(p, "url"),
                    "`command` and `url` are mutually exclusive: a server is a child process \
                     (stdio) or an HTTP endpoint, keep one",
                );
                None
            }
            (false, false) => {
                self.error(
                    p.to_vec(),
                    format!(
                        "MCP server '{name}' needs `command: [PROGRAM, ARGS…]` (stdio) or \
                         `url: URL` (streamable HTTP)"
                    ),
                );
                None
            }
            (true, false) => {
                if has("headers_env") {
                    self.error_at_key(
                        key(p, "headers_env"),
                        "`headers_env` applies to `url` servers only; a stdio server gets its \
                         secrets through `env_from`",
                    );
                }
                Some(McpTransport::Stdio {
                    command: command?,
                    cwd,
                    env,
                    env_from,
                })
            }
            (false, true) => {
                for k in ["cwd", "env", "env_from"] {
                    if has(k) {
                        self.error_at_key(
                            key(p, k),
                            format!(
                                "`{k}` applies to stdio servers (`command:`) only; an HTTP \
                                 server gets its secrets through `headers_env`"
                            ),
                        );
                    }
                }
                let url = url?;
                if let Err(e) = super::checker::check_http_url(&url) {
                    self.error(key(p, "url"), e);
                    return None;
                }
                Some(McpTransport::Http {
                    url: url.trim().to_string(),
                    headers_env,
                })
            }
        }
    }

    fn command_tool(&mut self, name: &str, v: &Value, p: &[Seg]) -> Option<CommandToolDef> {
        let m = self.mapping(
            v,
            p,
            "a command tool such as {description: …, parameters: {type: object, …}, command: \
             [PROGRAM, ARGS…]}",
        )?;
        self.check_keys(m, p, COMMAND_TOOL_KEYS);
        let description = self.opt_text(m, p, "description");
        if description.is_none() && Self::get(m, "description").is_none() {
            self.error(
                p.to_vec(),
                format!(
                    "command tool '{name}' is missing required key `description` (what the tool \
                     does, for the model)"
                ),
            );
        }
        let parameters = match Self::get(m, "parameters") {
            None => Some(serde_json::json!({"type": "object", "properties": {}})),
            Some(v) => self.object_schema(v, &key(p, "parameters")),
        };
        let command = match Self::get(m, "command") {
            None => {
                self.error(
                    p.to_vec(),
                    format!(
                        "command tool '{name}' is missing required key `command` (an argument \
                         list such as [df, -h], or a string run by sh -c)"
                    ),
                );
                None
            }
            Some(Value::String(_)) => self
                .opt_exec(m, p, "command")
                .map(|script| ToolCommand::Shell { script }),
            Some(_) => self
                .opt_argv(m, p, "command", true)
                .map(|argv| ToolCommand::Argv { argv }),
        };
        let timeout_seconds = self.opt_real(m, p, "timeout_seconds", bounds::TIMEOUT_SECONDS);
        let env = self.env_literals(m, p);
        let env_from = self.env_sources(m, p, "env_from");
        Some(CommandToolDef {
            name: name.to_string(),
            description: description?,
            parameters: parameters?,
            command: command?,
            timeout_seconds,
            env,
            env_from,
        })
    }

    /// A program and its arguments: a non-empty list of strings, the first not blank, none
    /// holding a NUL byte. `shell_ok`: the key also takes a string (say so when it is given
    /// something else).
    fn opt_argv(
        &mut self,
        m: &Mapping,
        base: &[Seg],
        k: &str,
        shell_ok: bool,
    ) -> Option<Vec<String>> {
        let v = Self::get(m, k)?;
        let p = key(base, k);
        let accepted = if shell_ok {
            "a list such as [df, -h] (program first), or a string run by sh -c"
        } else {
            "a list such as [npx, -y, \"@modelcontextprotocol/server-filesystem\", /srv] \
             (program first; it is run directly, never by a shell)"
        };
        let Value::Sequence(items) = v else {
            self.error(
                p,
                format!("expected {accepted}, found {}", describe_value(v)),
            );
            return None;
        };
        if items.is_empty() {
            self.error(p, format!("must not be empty: expected {accepted}"));
            return None;
        }
        let mut argv = Vec::with_capacity(items.len());
        let mut total = 0usize;
        for (i, item) in items.iter().enumerate() {
            let s = match item {
                Value::String(s) => s.clone(),
                // `[sleep, 5]`: a number is the text it was written as.
                Value::Number(n) => n.to_string(),
                other => {
                    self.error(
                        index(&p, i),
                        format!("expected a string argument, found {}", kind_of(other)),
                    );
                    return None;
                }
            };
            if s.contains('\0') {
                self.error(index(&p, i), "contains a NUL character: remove it");
                return None;
            }
            if i == 0 && s.trim().is_empty() {
                self.error(index(&p, i), "the program must not be blank");
                return None;
            }
            total += s.len() + 1;
            argv.push(s);
        }
        if total > super::scalars::MAX_EXEC_BYTES {
            self.error(
                p,
                format!(
                    "is {total} bytes long; a command can be at most {} bytes: put a long \
                     script in a file and run that",
                    super::scalars::MAX_EXEC_BYTES
                ),
            );
            return None;
        }
        Some(argv)
    }

    fn opt_path(&mut self, m: &Mapping, base: &[Seg], k: &str) -> Option<String> {
        let s = self.opt_text(m, base, k)?;
        if s.contains('\0') {
            self.error(key(base, k), "contains a NUL character: remove it");
            return None;
        }
        Some(s)
    }

    /// `env:` — variable name → literal text.
    fn env_literals(&mut self, m: &Mapping, base: &[Seg]) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for (name, p, v) in self.string_map(m, base, "env", "VARIABLE: value") {
            if !valid_env_name(&name) {
                self.error_at_key(
                    p,
                    format!(
                        "invalid variable name {}: use [A-Za-z_][A-Za-z0-9_]*",
                        show(&name)
                    ),
                );
                continue;
            }
            let text = match v {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                other => {
                    self.error(
                        p,
                        format!("expected the variable's text, found {}", kind_of(other)),
                    );
                    continue;
                }
            };
            if text.contains('\0') {
                self.error(p, "contains a NUL character: remove it");
                continue;
            }
            out.insert(name, text);
        }
        out
    }

    /// `env_from:` — variable name → the name of cronsole's variable that holds its value.
    fn env_sources(&mut self, m: &Mapping, base: &[Seg], k: &str) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for (name, p, v) in self.string_map(m, base, k, "VARIABLE: SOURCE_VARIABLE") {
            if !valid_env_name(&name) {
                self.error_at_key(
                    p,
                    format!(
                        "invalid variable name {}: use [A-Za-z_][A-Za-z0-9_]*",
                        show(&name)
                    ),
                );
                continue;
            }
            if let Some(source) = self.source_var(v, &p) {
                out.insert(name, source);
            }
        }
        out
    }

    /// `headers_env:` — header name → the name of the variable holding its value.
    fn header_sources(&mut self, m: &Mapping, base: &[Seg]) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for (name, p, v) in self.string_map(m, base, "headers_env", "Header-Name: VARIABLE") {
            let token = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !token {
                self.error_at_key(
                    p,
                    format!(
                        "invalid header name {}: use letters, digits and - (e.g. Authorization)",
                        show(&name)
                    ),
                );
                continue;
            }
            if TRANSPORT_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
                self.error_at_key(
                    p,
                    format!(
                        "header {} is set by the transport itself and cannot be replaced; \
                         headers_env is for credentials such as Authorization",
                        show(&name)
                    ),
                );
                continue;
            }
            if let Some(source) = self.source_var(v, &p) {
                out.insert(name, source);
            }
        }
        out
    }

    /// The name of a variable a secret is read from. The value is never asked for, only
    /// whether it is set.
    fn source_var(&mut self, v: &Value, p: &[Seg]) -> Option<String> {
        let Value::String(s) = v else {
            self.error(
                p.to_vec(),
                format!(
                    "expected the name of an environment variable, found {}",
                    describe_value(v)
                ),
            );
            return None;
        };
        if !valid_env_name(s) {
            // Never echo the value: it may be the secret itself, pasted in by mistake.
            self.error(
                p.to_vec(),
                "must be the *name* of an environment variable ([A-Za-z_][A-Za-z0-9_]*), never \
                 the secret itself",
            );
            return None;
        }
        if !(self.env_is_set)(s) {
            self.warn(
                p.to_vec(),
                format!(
                    "environment variable {s} is not set: runs that use this source will fail \
                     until it is"
                ),
            );
        }
        Some(s.clone())
    }

    /// The entries of mapping `k` (`x-*` keys skipped), each with its path.
    fn string_map<'m>(
        &mut self,
        m: &'m Mapping,
        base: &[Seg],
        k: &str,
        shape: &str,
    ) -> Vec<(String, Vec<Seg>, &'m Value)> {
        let Some(v) = Self::get(m, k) else {
            return Vec::new();
        };
        let p = key(base, k);
        let Some(map) = self.mapping(v, &p, &format!("`{k}` ({shape})")) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (kv, v) in map {
            let Some(name) = key_text(kv) else {
                self.error(p.clone(), format!("keys of `{k}` must be plain names"));
                continue;
            };
            if name.starts_with("x-") {
                continue;
            }
            out.push((name.clone(), key(&p, &name), v));
        }
        out
    }

    /// `parameters`: a JSON Schema for an object, as JSON.
    fn object_schema(&mut self, v: &Value, p: &[Seg]) -> Option<serde_json::Value> {
        let accepted = "a JSON Schema for the arguments, an object schema such as {type: \
                        object, properties: {path: {type: string}}, required: [path]}";
        let Value::Mapping(m) = v else {
            self.error(
                p.to_vec(),
                format!("expected {accepted}, found {}", kind_of(v)),
            );
            return None;
        };
        let json = self.json_of(v, p)?;
        match m.get("type") {
            Some(Value::String(t)) if t == "object" => {}
            _ => {
                self.error(
                    p.to_vec(),
                    format!("must have `type: object`: expected {accepted}"),
                );
                return None;
            }
        }
        if let Some(props) = m.get("properties")
            && !matches!(props, Value::Mapping(_))
        {
            self.error(
                key(p, "properties"),
                format!(
                    "expected a mapping of argument name → schema, found {}",
                    kind_of(props)
                ),
            );
            return None;
        }
        if let Some(req) = m.get("required")
            && !matches!(req, Value::Sequence(items) if items.iter().all(|i| matches!(i, Value::String(_))))
        {
            self.error(
                key(p, "required"),
                "expected a list of argument names such as [path]",
            );
            return None;
        }
        Some(json)
    }

    /// The YAML value as JSON (a schema is JSON): text keys, finite numbers, no tags.
    fn json_of(&mut self, v: &Value, p: &[Seg]) -> Option<serde_json::Value> {
        use serde_json::Value as J;
        Some(match v {
            Value::Null => J::Null,
            Value::Bool(b) => J::Bool(*b),
            Value::Number(Number::PosInt(n)) => J::from(*n),
            Value::Number(Number::NegInt(n)) => J::from(*n),
            Value::Number(Number::Float(x)) => match serde_json::Number::from_f64(*x) {
                Some(n) => J::Number(n),
                None => {
                    self.error(p.to_vec(), "JSON has no infinities or NaN");
                    return None;
                }
            },
            Value::String(s) => J::String(s.clone()),
            Value::Sequence(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    out.push(self.json_of(item, &index(p, i))?);
                }
                J::Array(out)
            }
            Value::Mapping(m) => {
                let mut out = serde_json::Map::new();
                for (k, v) in m {
                    let Some(name) = key_text(k) else {
                        self.error(p.to_vec(), "keys in a JSON Schema must be plain text");
                        return None;
                    };
                    let item = self.json_of(v, &key(p, &name))?;
                    out.insert(name, item);
                }
                J::Object(out)
            }
            Value::Tagged(_) => {
                self.error(p.to_vec(), "YAML tags have no JSON form: remove the tag");
                return None;
            }
        })
    }

    /// An agent's tool keys: its allowlist, `approve` and the loop's limits.
    pub(super) fn agent_tools(
        &mut self,
        m: &Mapping,
        p: &[Seg],
    ) -> (Vec<String>, Vec<String>, ToolLimits) {
        let allowed = self.tool_list(m, p, "tools");
        let mut approve = Vec::new();
        for (i, pat) in self.tool_list(m, p, "approve") {
            let ok = match &pat {
                ToolPattern::AllOf { server } => allowed
                    .iter()
                    .any(|(_, a)| a.server() == Some(server.as_str())),
                other => allowed.iter().any(|(_, a)| a.covers(other)),
            };
            if ok {
                approve.push(pat.to_string());
            } else {
                self.error(
                    index(&key(p, "approve"), i),
                    format!(
                        "{} is not among the agent's allowed tools ({}): `approve` names tools \
                         of `tools`",
                        show(&pat.to_string()),
                        allowed_text(&allowed)
                    ),
                );
            }
        }
        self.wire_collisions(&allowed, p);
        let d = ToolLimits::default();
        let limits = ToolLimits {
            max_turns: self
                .opt_whole(m, p, "max_turns", bounds::MAX_TURNS)
                .map_or(d.max_turns, |x| x as u32),
            tool_timeout_seconds: self
                .opt_real(m, p, "tool_timeout_seconds", bounds::TIMEOUT_SECONDS)
                .unwrap_or(d.tool_timeout_seconds),
            max_tool_output_bytes: self
                .opt_whole(m, p, "max_tool_output_bytes", bounds::MAX_TOOL_OUTPUT_BYTES)
                .map_or(d.max_tool_output_bytes, |x| x as u32),
            max_tool_calls_per_turn: self
                .opt_whole(
                    m,
                    p,
                    "max_tool_calls_per_turn",
                    bounds::MAX_TOOL_CALLS_PER_TURN,
                )
                .map_or(d.max_tool_calls_per_turn, |x| x as u32),
            approval_timeout_seconds: self
                .opt_real(
                    m,
                    p,
                    "approval_timeout_seconds",
                    bounds::APPROVAL_TIMEOUT_SECONDS,
                )
                .unwrap_or(d.approval_timeout_seconds),
        };
        let allowed = allowed.into_iter().map(|(_, a)| a.to_string()).collect();
        (allowed, approve, limits)
    }

    /// A list of tool names (`server.tool`, `server.*`, `command_tool`), each naming a
    /// declared source; duplicates are dropped.
    fn tool_list(&mut self, m: &Mapping, p: &[Seg], k: &str) -> Vec<(usize, ToolPattern)> {
        let mut out: Vec<(usize, ToolPattern)> = Vec::new();
        for (i, text) in self.opt_name_list(m, p, k) {
            let at = index(&key(p, k), i);
            let Some(pat) = ToolPattern::parse(&text) else {
                self.error(
                    at,
                    format!(
                        "invalid tool name {}: use server.tool, server.* or the name of a \
                         command tool",
                        show(&text)
                    ),
                );
                continue;
            };
            if self.known_source(&pat, at) && !out.iter().any(|(_, o)| *o == pat) {
                out.push((i, pat));
            }
        }
        out
    }

    fn known_source(&mut self, pat: &ToolPattern, at: Vec<Seg>) -> bool {
        let names = &self.tool_names;
        let (name, known) = match pat {
            ToolPattern::Command(n) => (n, names.commands.contains(n)),
            ToolPattern::Tool { server, .. } | ToolPattern::AllOf { server } => {
                (server, names.servers.contains(server))
            }
        };
        if known {
            return true;
        }
        let message = if names.broken.contains(name) {
            format!("{} has errors (reported where it is defined)", show(name))
        } else {
            let what = match pat {
                ToolPattern::Command(_) if names.servers.contains(name) => format!(
                    "{} is an MCP server: name its tools as {name}.TOOL or {name}.*",
                    show(name)
                ),
                ToolPattern::Command(_) => format!("unknown command tool {}", show(name)),
                _ => format!("unknown MCP server {}", show(name)),
            };
            let known = if names.servers.is_empty() && names.commands.is_empty() {
                "no tool sources are defined (add `mcp_servers:` or `tools:` at the top level)"
                    .to_string()
            } else {
                format!(
                    "MCP servers: {}; command tools: {}",
                    or_none(&names.servers),
                    or_none(&names.commands)
                )
            };
            format!("{what}; {known}")
        };
        self.error(at, message);
        false
    }

    /// Two entries of one agent that providers would see under one name.
    fn wire_collisions(&mut self, allowed: &[(usize, ToolPattern)], p: &[Seg]) {
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        for (i, pat) in allowed {
            if matches!(pat, ToolPattern::AllOf { .. }) {
                continue;
            }
            let q = pat.to_string();
            let w = wire_name(&q);
            match seen.get(&w) {
                Some(first) if *first != q => self.error(
                    index(&key(p, "tools"), *i),
                    format!(
                        "{} and {} both reach the model as {w}: rename the command tool (or \
                         drop one of them)",
                        show(first),
                        show(&q)
                    ),
                ),
                _ => {
                    seen.insert(w, q);
                }
            }
        }
    }

    /// A job's `tools`: a narrowing of its agent's list (`None`: the agent's list as it is).
    pub(super) fn job_tools(
        &mut self,
        m: &Mapping,
        p: &[Seg],
        agent: Option<&AgentDef>,
    ) -> Option<Vec<String>> {
        Self::get(m, "tools")?;
        let own = self.tool_list(m, p, "tools");
        let agent = agent?;
        let allowed: Vec<(usize, ToolPattern)> = agent
            .tools
            .iter()
            .filter_map(|t| ToolPattern::parse(t))
            .enumerate()
            .collect();
        let mut out = Vec::new();
        for (i, pat) in own {
            if allowed.iter().any(|(_, a)| a.covers(&pat)) {
                out.push(pat.to_string());
            } else {
                self.error(
                    index(&key(p, "tools"), i),
                    format!(
                        "{} would widen agent '{}''s tools ({}): a job may only narrow its \
                         agent's list",
                        show(&pat.to_string()),
                        agent.name,
                        allowed_text(&allowed)
                    ),
                );
            }
        }
        Some(out)
    }

    /// Nobody would hear of a call waiting for approval: the job's agent approves some tool the
    /// job may call, and the job has no sink.
    pub(super) fn approval_without_sink(
        &mut self,
        p: &[Seg],
        agent: &AgentDef,
        job_tools: Option<&[String]>,
        deliver: &[String],
    ) {
        if !deliver.is_empty() {
            return;
        }
        let allowed: Vec<ToolPattern> = job_tools
            .unwrap_or(&agent.tools)
            .iter()
            .filter_map(|t| ToolPattern::parse(t))
            .collect();
        let waiting: Vec<&String> = agent
            .approve
            .iter()
            .filter(|a| {
                ToolPattern::parse(a)
                    .is_some_and(|a| allowed.iter().any(|t| t.covers(&a) || a.covers(t)))
            })
            .collect();
        if waiting.is_empty() {
            return;
        }
        self.warn(
            p.to_vec(),
            format!(
                "agent '{}' waits for an operator's approval of {} and this job has no \
                 `deliver:` sink, so nobody is told when a call waits (unanswered, it is denied \
                 after {}s)",
                agent.name,
                list(waiting),
                agent.limits.approval_timeout_seconds
            ),
        );
    }

    /// `env_from` and `headers_env` may not hand a tool a provider's key.
    pub(super) fn no_provider_keys(
        &mut self,
        tools: &ToolSettings,
        agents: &BTreeMap<String, AgentDef>,
    ) {
        let mut keys: BTreeSet<&str> = crate::proc::STANDARD_KEY_VARS.iter().copied().collect();
        keys.extend(agents.values().map(|a| a.api_key_env.as_str()));
        let refuse = |section: &str, name: &str, k: &str, var: &str, source: &str| {
            keys.contains(source).then(|| {
                let p = vec![
                    Seg::Key(section.to_string()),
                    Seg::Key(name.to_string()),
                    Seg::Key(k.to_string()),
                    Seg::Key(var.to_string()),
                ];
                (
                    p,
                    format!(
                        "{source} holds a model provider's key: tools never get it; give this \
                         source a key of its own"
                    ),
                )
            })
        };
        let mut found = Vec::new();
        for (name, s) in &tools.mcp_servers {
            let (k, map) = match &s.transport {
                McpTransport::Stdio { env_from, .. } => ("env_from", env_from),
                McpTransport::Http { headers_env, .. } => ("headers_env", headers_env),
            };
            for (var, source) in map {
                found.extend(refuse("mcp_servers", name, k, var, source));
            }
        }
        for (name, t) in &tools.command_tools {
            for (var, source) in &t.env_from {
                found.extend(refuse("tools", name, "env_from", var, source));
            }
        }
        for (p, message) in found {
            self.error(p, message);
        }
    }
}

fn or_none(names: &BTreeSet<String>) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        list(names)
    }
}

fn allowed_text(allowed: &[(usize, ToolPattern)]) -> String {
    if allowed.is_empty() {
        "none".to_string()
    } else {
        list(allowed.iter().map(|(_, a)| a.to_string()))
    }
}

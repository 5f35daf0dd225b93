//! Where an agent's tools come from, as the jobs file declares them: MCP servers
//! (`mcp_servers:`, over stdio or streamable HTTP), the operator's command tools (`tools:`), and
//! the names agents and jobs use for them.
//!
//! Owns: the shapes of those sections as validated, the grammar of an allowlist entry
//! ([`ToolPattern`]: `server.tool`, `server.*`, `command_tool`) and the one deterministic
//! mapping of a tool's name to what model providers accept ([`wire_name`]). Must not touch:
//! parsing YAML, processes, the network. Secrets are never held here: `env_from` and
//! `headers_env` name the environment variables to read when a source starts.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The tool sources of the jobs file, shared by every owner through the store.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ToolSettings {
    /// `mcp_servers:` by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mcp_servers: BTreeMap<String, McpServerDef>,
    /// The top-level `tools:` (command tools) by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub command_tools: BTreeMap<String, CommandToolDef>,
}

/// A tool's definition as a request carries it, in `provider`'s wire format (the one shape
/// requests send and every forecast of a prompt's weight counts).
pub(crate) fn definition_json(
    provider: super::Provider,
    wire_name: &str,
    description: &str,
    schema: &serde_json::Value,
) -> serde_json::Value {
    match provider {
        super::Provider::Openai => serde_json::json!({"type": "function", "function": {
            "name": wire_name,
            "description": description,
            "parameters": schema,
        }}),
        super::Provider::Anthropic => serde_json::json!({
            "name": wire_name,
            "description": description,
            "input_schema": schema,
        }),
    }
}

impl ToolSettings {
    /// Bytes the definitions of the command tools `allowed` admits weigh in every request to
    /// `provider` (MCP tools are known only once their servers are asked).
    pub(crate) fn command_tools_bytes(
        &self,
        provider: super::Provider,
        allowed: &[ToolPattern],
    ) -> usize {
        self.command_tools
            .values()
            .filter(|t| allowed.iter().any(|p| p.admits(&t.name)))
            .map(|t| {
                definition_json(provider, &wire_name(&t.name), &t.description, &t.parameters)
                    .to_string()
                    .len()
            })
            .sum()
    }

    /// Whether the file declares no tool source at all.
    pub fn is_empty(&self) -> bool {
        self.mcp_servers.is_empty() && self.command_tools.is_empty()
    }

    /// The names of cronsole's variables whose values some tool source receives (every
    /// server's `env_from` and `headers_env`, every command tool's `env_from`), each once:
    /// those values are secrets wherever a run may show them.
    pub(crate) fn secret_sources(&self) -> Vec<&str> {
        let servers = self.mcp_servers.values().flat_map(|s| match &s.transport {
            McpTransport::Stdio { env_from, .. } => env_from.values(),
            McpTransport::Http { headers_env, .. } => headers_env.values(),
        });
        let commands = self
            .command_tools
            .values()
            .flat_map(|d| d.env_from.values());
        let mut out: Vec<&str> = servers.chain(commands).map(String::as_str).collect();
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// One `mcp_servers:` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpServerDef {
    /// The entry's name: the `server` of `server.tool`.
    pub name: String,
    /// How cronsole reaches it.
    pub transport: McpTransport,
    /// The protocol version to speak, pinned from the client side (`None`: discovery first,
    /// the `initialize` handshake when the server is older).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<String>,
}

/// The MCP protocol versions `protocol_version:` accepts, oldest first.
pub(crate) const MCP_PROTOCOL_VERSIONS: [&str; 5] = [
    "2024-11-05",
    "2025-03-26",
    "2025-06-18",
    "2025-11-25",
    "2026-07-28",
];

/// How an MCP server is reached.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum McpTransport {
    /// A child process of the run speaking MCP on its stdin and stdout.
    Stdio {
        /// Program and arguments (never run through a shell).
        command: Vec<String>,
        /// Working directory (absolute once the file is loaded; `None`: the jobs file's).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cwd: Option<String>,
        /// Literal variables it gets.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        env: BTreeMap<String, String>,
        /// Variables it gets, each read from one of cronsole's own (`{VAR: SOURCE_VAR}`); the
        /// values are secrets, redacted from everything cronsole writes.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        env_from: BTreeMap<String, String>,
    },
    /// A streamable-HTTP endpoint.
    Http {
        /// The endpoint (`http` or `https`; loopback allowed: it is the operator's own).
        url: String,
        /// Headers sent with every request, each value read from one of cronsole's variables
        /// when the session opens (`{Header: VAR}`); redacted like `env_from`.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        headers_env: BTreeMap<String, String>,
    },
}

/// One command tool (top-level `tools:`): the operator's program, called with the model's
/// arguments as JSON on its stdin and in `CRONSOLE_TOOL_ARGS`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommandToolDef {
    /// The entry's name: what agents list and what the model calls.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of the arguments (an object schema).
    pub parameters: serde_json::Value,
    /// What runs.
    pub command: ToolCommand,
    /// Bound of one call in seconds; `None`: the agent's `tool_timeout_seconds`. The shorter
    /// of the two applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<f64>,
    /// Literal variables it gets.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Secret variables it gets (`{VAR: SOURCE_VAR}`), redacted everywhere.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env_from: BTreeMap<String, String>,
}

/// What a command tool runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ToolCommand {
    /// A program and its arguments, executed directly.
    Argv {
        /// Program first.
        argv: Vec<String>,
    },
    /// A script run by `/bin/sh -c` (the arguments never enter it: they arrive on stdin).
    Shell {
        /// The script.
        script: String,
    },
}

/// The limits of an agent's tool loop (the agent's keys of the same names).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ToolLimits {
    /// Model turns per run (1–100).
    pub max_turns: u32,
    /// Bound of one tool call, seconds.
    pub tool_timeout_seconds: f64,
    /// What the model sees of one result, bytes.
    pub max_tool_output_bytes: u32,
    /// Calls dispatched per turn (1–64); the rest get an error result.
    pub max_tool_calls_per_turn: u32,
    /// Bound of one wait for an operator's approval, seconds (1–86 400).
    pub approval_timeout_seconds: f64,
}

impl Default for ToolLimits {
    fn default() -> Self {
        ToolLimits {
            max_turns: 10,
            tool_timeout_seconds: 60.0,
            max_tool_output_bytes: 16_384,
            max_tool_calls_per_turn: 8,
            approval_timeout_seconds: 3_600.0,
        }
    }
}

/// A tool definition as the store pinned it at its first use (or at `cronsole tools --accept`):
/// what later runs compare the server's listing with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolPin {
    /// The `mcp_servers:` name.
    pub server: String,
    /// The server's own name for the tool.
    pub tool: String,
    /// sha256 (hex) of the canonical definition (name, description, argument schema).
    pub hash: String,
    /// The definition as listed then (`name`, `description`, `input_schema`,
    /// `output_schema`): untrusted text from the server, kept so that views can show what was
    /// pinned without connecting.
    pub definition: serde_json::Value,
    /// When it was pinned.
    pub pinned_at: DateTime<Utc>,
}

impl ToolPin {
    /// `server.tool`.
    pub fn qualified(&self) -> String {
        format!("{}.{}", self.server, self.tool)
    }
}

/// One entry of an allowlist (an agent's `tools`, a job's `tools`, an agent's `approve`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ToolPattern {
    /// `server.tool`: one tool of an MCP server.
    Tool {
        /// The `mcp_servers:` name.
        server: String,
        /// The server's own name for the tool.
        tool: String,
    },
    /// `server.*`: every tool the server lists.
    AllOf {
        /// The `mcp_servers:` name.
        server: String,
    },
    /// A command tool's name.
    Command(String),
}

/// The longest tool name an MCP server may give (the protocol's own bound).
pub(crate) const MAX_MCP_TOOL_NAME: usize = 128;

impl ToolPattern {
    /// Reads an entry: the text before the first `.` is the server, `*` after it means every
    /// tool; no `.` names a command tool. `None` for an empty part, a `*` anywhere else, or
    /// whitespace and control characters (no server names a tool so).
    pub fn parse(s: &str) -> Option<ToolPattern> {
        if s.is_empty() || s.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return None;
        }
        match s.split_once('.') {
            None => (!s.contains('*')).then(|| ToolPattern::Command(s.to_string())),
            Some((server, "*")) if !server.is_empty() && !server.contains('*') => {
                Some(ToolPattern::AllOf {
                    server: server.to_string(),
                })
            }
            Some((server, tool))
                if !server.is_empty()
                    && !tool.is_empty()
                    && !s.contains('*')
                    && tool.chars().count() <= MAX_MCP_TOOL_NAME =>
            {
                Some(ToolPattern::Tool {
                    server: server.to_string(),
                    tool: tool.to_string(),
                })
            }
            Some(_) => None,
        }
    }

    /// The MCP server this entry names, if any.
    pub fn server(&self) -> Option<&str> {
        match self {
            ToolPattern::Tool { server, .. } | ToolPattern::AllOf { server } => Some(server),
            ToolPattern::Command(_) => None,
        }
    }

    /// Whether `self` admits every tool `other` admits (so a job's `other` does not widen an
    /// agent's `self`).
    pub fn covers(&self, other: &ToolPattern) -> bool {
        match (self, other) {
            (ToolPattern::AllOf { server: a }, p) => p.server() == Some(a.as_str()),
            (a, b) => a == b,
        }
    }

    /// Whether this entry admits the tool called `qualified` (`server.tool`, or a command
    /// tool's name).
    pub(crate) fn admits(&self, qualified: &str) -> bool {
        match self {
            ToolPattern::Tool { server, tool } => qualified
                .split_once('.')
                .is_some_and(|(s, t)| s == server && t == tool),
            ToolPattern::AllOf { server } => {
                qualified.split_once('.').is_some_and(|(s, _)| s == server)
            }
            ToolPattern::Command(name) => name == qualified,
        }
    }
}

impl std::fmt::Display for ToolPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ToolPattern::Tool { server, tool } => write!(f, "{server}.{tool}"),
            ToolPattern::AllOf { server } => write!(f, "{server}.*"),
            ToolPattern::Command(name) => f.write_str(name),
        }
    }
}

/// The longest name a provider accepts for a tool (OpenAI's and Anthropic's
/// `^[a-zA-Z0-9_-]{1,64}$`).
pub(crate) const MAX_WIRE_NAME: usize = 64;

/// The name the model is given for the tool the jobs file calls `qualified`: `server.tool`
/// becomes `server__tool`; a command tool keeps its name. Any character providers refuse
/// becomes `_`, and a name that lost a character that way, or is longer than
/// `MAX_WIRE_NAME`, is cut to 55 characters and ends with `_` and the first 8 hex digits of
/// the sha256 of `qualified`, so two such names stay apart and the same tool always gets the
/// same name. Two tools that still meet on one name are a collision (refused by `validate` for
/// the names it knows, and at run start for the ones a server lists).
pub fn wire_name(qualified: &str) -> String {
    let joined = match qualified.split_once('.') {
        Some((server, tool)) => format!("{server}__{tool}"),
        None => qualified.to_string(),
    };
    let mut lossy = false;
    let mapped: String = joined
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                lossy = true;
                '_'
            }
        })
        .collect();
    if !lossy && !mapped.is_empty() && mapped.len() <= MAX_WIRE_NAME {
        return mapped;
    }
    let digest = Sha256::digest(qualified.as_bytes());
    let suffix: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    // ASCII only by now, so a byte cut is a character cut.
    let keep = &mapped[..mapped.len().min(MAX_WIRE_NAME - 1 - suffix.len())];
    format!("{keep}_{suffix}")
}

/// Whether `s` is a name providers accept as it is (`^[a-zA-Z0-9_-]{1,64}$`): what a command
/// tool's or a server's name must be.
pub(crate) fn valid_wire_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_WIRE_NAME
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_parse_into_the_three_kinds() {
        assert_eq!(
            ToolPattern::parse("files.read_file"),
            Some(ToolPattern::Tool {
                server: "files".into(),
                tool: "read_file".into()
            })
        );
        assert_eq!(
            ToolPattern::parse("files.*"),
            Some(ToolPattern::AllOf {
                server: "files".into()
            })
        );
        assert_eq!(
            ToolPattern::parse("disk_free"),
            Some(ToolPattern::Command("disk_free".into()))
        );
        // A tool name may itself hold dots: the server is what comes before the first.
        assert_eq!(
            ToolPattern::parse("gh.repos.list"),
            Some(ToolPattern::Tool {
                server: "gh".into(),
                tool: "repos.list".into()
            })
        );
        for bad in [
            "",
            ".x",
            "files.",
            "*",
            "files.read*",
            "*.x",
            "a b",
            "files.*.x",
            "x\u{7}",
        ] {
            assert_eq!(ToolPattern::parse(bad), None, "{bad:?}");
        }
        let long = format!("s.{}", "t".repeat(MAX_MCP_TOOL_NAME + 1));
        assert_eq!(ToolPattern::parse(&long), None);
    }

    #[test]
    fn a_server_wildcard_covers_its_tools_and_nothing_else() {
        let all = ToolPattern::parse("files.*").unwrap();
        let one = ToolPattern::parse("files.read_file").unwrap();
        let other = ToolPattern::parse("search.query").unwrap();
        let cmd = ToolPattern::parse("disk_free").unwrap();
        assert!(all.covers(&one));
        assert!(all.covers(&all));
        assert!(!all.covers(&other));
        assert!(!all.covers(&cmd));
        assert!(!one.covers(&all), "one tool never covers the whole server");
        assert!(one.covers(&one));
        assert!(cmd.covers(&cmd));
        assert!(all.admits("files.write_file"));
        assert!(!all.admits("filesx.write_file"));
        assert!(one.admits("files.read_file"));
        assert!(!one.admits("files.read_files"));
        assert!(cmd.admits("disk_free"));
        assert_eq!(all.to_string(), "files.*");
    }

    #[test]
    fn wire_names_are_what_providers_accept_and_deterministic() {
        assert_eq!(wire_name("files.read_file"), "files__read_file");
        assert_eq!(wire_name("disk_free"), "disk_free");
        // A dot inside the tool's own name is lossy: a hash suffix keeps it apart from the
        // tool really called `repos_list`.
        let dotted = wire_name("gh.repos.list");
        assert_ne!(dotted, wire_name("gh.repos_list"));
        assert!(dotted.starts_with("gh__repos_list_"), "{dotted}");
        assert_eq!(dotted, wire_name("gh.repos.list"));
        let long = format!("srv.{}", "x".repeat(120));
        let w = wire_name(&long);
        assert_eq!(w.len(), MAX_WIRE_NAME);
        assert!(valid_wire_name(&w), "{w}");
        let long2 = format!("srv.{}y", "x".repeat(119));
        assert_ne!(w, wire_name(&long2), "two long names stay apart");
        for q in ["a.b c", "a.é", "a./", "s.ünïcödé-näme"] {
            assert!(valid_wire_name(&wire_name(q)), "{q}");
        }
        assert!(!valid_wire_name(""));
        assert!(!valid_wire_name("a.b"));
        assert!(!valid_wire_name(&"a".repeat(65)));
    }
}

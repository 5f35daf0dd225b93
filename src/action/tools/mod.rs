//! Tools an agent may call: where they come from and how one call is dispatched.
//!
//! Owns: the [`ToolSource`] seam (an MCP server over stdio or streamable HTTP, or the operator's
//! command tools, each behind the same small trait), the definitions sources list
//! ([`ToolDef`]), what one call returns ([`ToolOutput`]), and the [`Toolbox`] a run offers to
//! its model: exactly the allowed tools that were discovered, under names every provider
//! accepts. Must not touch: the store, budgets, the model wire formats, the transcript (the tool
//! loop records what happened), the UI.
//!
//! Every text that comes back from a tool or a server (descriptions included) is untrusted: it
//! reaches the model and the record as data, and the views make it inert before drawing it.
//!
//! Dropping the future of [`ToolSource::call`] cancels the call: a source tells its server (MCP
//! `notifications/cancelled`) or kills its process, so a call never outlives the loop that
//! waits for it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

pub mod command;
pub mod fallback;
pub mod mcp;
pub mod pin;
pub mod server_log;
pub mod toolbox;

/// A boxed, sendable future: what the [`ToolSource`] methods return, so the trait stays
/// object-safe (`Arc<dyn ToolSource>`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One tool as its source lists it, before any allowlist.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDef {
    /// The name the source gives it: the MCP tool name, or the command tool's key.
    pub name: String,
    /// What the source says the tool does (untrusted text when it comes from a server).
    pub description: String,
    /// JSON Schema of the arguments (an object schema).
    pub input_schema: Value,
    /// JSON Schema of the structured result, when the source declares one.
    pub output_schema: Option<Value>,
}

impl ToolDef {
    /// The pinned identity of this definition: sha256 (lowercase hex) of the canonical JSON of
    /// its name, description and argument schema. Canonical means object keys sorted, no
    /// whitespace, so a server that reorders keys does not look changed; any change of
    /// meaning does.
    pub fn definition_hash(&self) -> String {
        let doc = serde_json::json!({
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        });
        let mut canonical = String::new();
        write_canonical(&doc, &mut canonical);
        let digest = Sha256::digest(canonical.as_bytes());
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Serialises `v` with object keys sorted and no whitespace.
fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(&map[k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// One piece of what a call returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Content {
    /// Text, as the tool gave it (untrusted).
    Text {
        /// The text.
        text: String,
    },
    /// Anything that is not text (image, audio, an embedded resource, a kind this build does
    /// not know): the model sees a one-line `[mime, size, sha256]` placeholder, never the bytes.
    Blob {
        /// The content kind the source named (`image`, `audio`, `resource`, …).
        kind: String,
        /// Its MIME type, when given.
        mime: String,
        /// Size of the payload in bytes (decoded when it came base64-encoded).
        size: usize,
        /// sha256 of the payload, lowercase hex.
        sha256: String,
    },
}

/// What one call returned.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ToolOutput {
    /// The content, in the order the tool gave it.
    pub content: Vec<Content>,
    /// Structured content, when the tool returned some.
    pub structured: Option<Value>,
    /// The tool said the call failed (MCP `isError`, a command tool's non-zero exit).
    pub is_error: bool,
    /// The size and sha256 of what the tool wrote, when the source measured it itself (a
    /// command tool's streams, counted and hashed whole while only their first part is kept);
    /// `None`: the content above is the whole output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub whole: Option<Whole>,
}

/// The size and sha256 of a tool's whole output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Whole {
    pub bytes: u64,
    /// Lowercase hex.
    pub sha256: String,
}

/// Why a source could not list its tools or complete a call.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ToolError {
    /// The server could not be started, reached or initialised.
    #[error("tool source '{source_name}' is unreachable: {why}")]
    Unreachable {
        /// The server (or `tools` for command tools).
        source_name: String,
        /// What went wrong, redacted.
        why: String,
    },
    /// The call did not finish in time; it was cancelled.
    #[error("tool call timed out after {0:?}")]
    Timeout(Duration),
    /// The server broke the protocol, sent a request we refuse, or ended mid-call.
    #[error("tool source '{source_name}': {why}")]
    Protocol {
        /// The server.
        source_name: String,
        /// What happened, redacted.
        why: String,
    },
}

/// A place tools come from: one MCP server, or the jobs file's command tools.
pub trait ToolSource: Send + Sync {
    /// The source's name as the jobs file gives it (the `mcp_servers:` key; `tools` for the
    /// command tools).
    fn name(&self) -> &str;
    /// The protocol version the server agreed to, when it is an MCP server.
    fn protocol_version(&self) -> Option<String>;
    /// Every tool the source offers now (all pages).
    fn list(&self) -> BoxFuture<'_, Result<Vec<ToolDef>, ToolError>>;
    /// Calls `tool` (the source's own name for it) with `args`, bounded by `timeout`.
    fn call<'a>(
        &'a self,
        tool: &'a str,
        args: Value,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>>;
    /// True once the source said its tool list changed since the last [`ToolSource::list`].
    fn list_changed(&self) -> bool;
    /// Before the next model turn: whether a definition listed at the last
    /// [`ToolSource::list`] changed or went away. `called` says the run called this source
    /// since the last check. This default answers [`ToolSource::list_changed`]; a source whose
    /// list can change underneath (an MCP server) lists again, so a change is seen before the
    /// next turn is reserved, not one turn later.
    fn recheck(&self, called: bool) -> BoxFuture<'_, bool> {
        let _ = called;
        Box::pin(std::future::ready(self.list_changed()))
    }
    /// Why the last [`ToolSource::recheck`] that answered `true` could not list the tools again
    /// (a server still busy with a call that timed out), when that is why: such a source did
    /// not change its tools, it could not be checked. `None` for a real change.
    fn unlisted(&self) -> Option<String> {
        None
    }
    /// What the source refused since it was last asked, one line each, for the run's record
    /// (an MCP server's sampling, elicitation or roots request, an input-required result).
    /// Redacted. Most sources never refuse anything.
    fn take_events(&self) -> Vec<String> {
        Vec::new()
    }
    /// Ends the source: closes the session and stops its process, if it has one.
    fn close(&self) -> BoxFuture<'_, ()>;
}

/// One tool the model is offered.
#[derive(Debug, Clone, PartialEq)]
pub struct OfferedTool {
    /// The name sent to the provider (`^[a-zA-Z0-9_-]{1,64}$`).
    pub wire_name: String,
    /// The name the jobs file uses: `server.tool` for an MCP tool, the key of a command tool.
    pub qualified: String,
    /// Index of its source in [`Toolbox::sources`].
    pub source: usize,
    /// Its definition as discovered at run start.
    pub def: ToolDef,
    /// [`ToolDef::definition_hash`] of `def`.
    pub hash: String,
}

/// The tools of one run: its open sources and what the model is offered, frozen at run start.
pub struct Toolbox {
    /// The run's open sources.
    pub sources: Vec<Arc<dyn ToolSource>>,
    /// The offered tools, in a stable order (by qualified name).
    pub offered: Vec<OfferedTool>,
}

impl Toolbox {
    /// The offered tool the model calls `wire_name`, if it was offered.
    pub fn find(&self, wire_name: &str) -> Option<&OfferedTool> {
        self.offered.iter().find(|t| t.wire_name == wire_name)
    }

    /// Calls an offered tool. A name that was not offered is never dispatched: `None`.
    pub async fn call(
        &self,
        wire_name: &str,
        args: Value,
        timeout: Duration,
    ) -> Option<Result<ToolOutput, ToolError>> {
        let tool = self.find(wire_name)?;
        let source = self.sources.get(tool.source)?;
        Some(source.call(&tool.def.name, args, timeout).await)
    }

    /// True when any source said its tool list changed since run start.
    pub fn changed(&self) -> bool {
        self.sources.iter().any(|s| s.list_changed())
    }

    /// The names of the sources whose listed definitions changed, checked before the next
    /// turn ([`ToolSource::recheck`]); `called` holds the indexes of the sources the last
    /// turn's calls went to.
    pub async fn recheck(&self, called: &[usize]) -> Vec<String> {
        let mut changed = Vec::new();
        for (i, s) in self.sources.iter().enumerate() {
            if s.recheck(called.contains(&i)).await {
                changed.push(s.name().to_string());
            }
        }
        changed
    }

    /// What the sources refused since they were last asked, as `source: event` lines.
    pub fn take_events(&self) -> Vec<String> {
        self.sources
            .iter()
            .flat_map(|s| {
                let name = s.name().to_string();
                s.take_events()
                    .into_iter()
                    .map(move |e| format!("{name}: {e}"))
            })
            .collect()
    }

    /// Closes every source (their processes end with them).
    pub async fn close(&self) {
        for source in &self.sources {
            source.close().await;
        }
    }
}

/// What a run's tools are built from.
#[derive(Clone, Copy)]
pub struct ToolboxRequest<'a> {
    /// The store's settings (tool sources, agents).
    pub settings: &'a crate::model::Settings,
    /// The job (its own `tools:` narrowing).
    pub job: &'a crate::model::JobDef,
    /// The agent (its allowlist).
    pub agent: &'a crate::model::AgentDef,
    /// Where the run's processes start (stdio servers and command tools run under it).
    pub proc_env: &'a crate::proc::ProcEnv,
}

/// Builds a run's [`Toolbox`] before its first model call: starts or reaches the sources the
/// agent may use and offers exactly the allowed tools they list. An allowed tool that is
/// missing, or a source that cannot be reached, is an error: the run fails before the model is
/// called.
pub trait ToolboxBuilder: Send + Sync {
    fn build<'a>(&'a self, req: ToolboxRequest<'a>) -> BoxFuture<'a, Result<Toolbox, ToolError>>;
}

/// A builder that offers nothing: every agent is a one-turn loop.
#[derive(Debug, Clone, Copy, Default)]
#[cfg(any(test, feature = "testkit"))]
pub struct NoTools;

#[cfg(any(test, feature = "testkit"))]
impl ToolboxBuilder for NoTools {
    fn build<'a>(&'a self, _: ToolboxRequest<'a>) -> BoxFuture<'a, Result<Toolbox, ToolError>> {
        Box::pin(async {
            Ok(Toolbox {
                sources: Vec::new(),
                offered: Vec::new(),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn def(schema: Value) -> ToolDef {
        ToolDef {
            name: "read_file".into(),
            description: "Reads a file".into(),
            input_schema: schema,
            output_schema: None,
        }
    }

    #[test]
    fn the_hash_ignores_key_order_and_sees_any_change_of_meaning() {
        let a = def(json!({"type": "object", "properties": {"path": {"type": "string"}}}));
        let b = def(json!({"properties": {"path": {"type": "string"}}, "type": "object"}));
        assert_eq!(a.definition_hash(), b.definition_hash());
        assert_eq!(a.definition_hash().len(), 64);

        let c = def(json!({"type": "object", "properties": {"path": {"type": "integer"}}}));
        assert_ne!(a.definition_hash(), c.definition_hash());
        let mut d = a.clone();
        d.description.push('!');
        assert_ne!(a.definition_hash(), d.definition_hash());
    }
}

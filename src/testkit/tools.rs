//! In-memory tool sources for tests: a [`MemorySource`] lists the tools it was given and
//! answers each call with its handler (or waits, or fails), recording every call it got, and
//! [`toolbox`] offers every tool of a few such sources the way a run's `Toolbox` does.
//!
//! Owns: test doubles of the `ToolSource` seam. Must not touch: real MCP servers or command
//! tools (`action::tools` owns them; tests of the loop use these so they run without any
//! process).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::action::tools::{
    BoxFuture, Content, OfferedTool, ToolDef, ToolError, ToolOutput, ToolSource, Toolbox,
    ToolboxBuilder, ToolboxRequest,
};

type Handler = dyn Fn(&Value) -> Result<ToolOutput, ToolError> + Send + Sync;

struct Tool {
    def: ToolDef,
    handler: Arc<Handler>,
    delay: Option<Duration>,
    /// Each call waits for a permit of this before it answers (the test decides when).
    gate: Option<Arc<tokio::sync::Semaphore>>,
}

/// A tool source held in memory.
pub struct MemorySource {
    name: String,
    tools: Vec<Tool>,
    calls: Mutex<Vec<(String, Value)>>,
    in_flight: AtomicUsize,
    changed: AtomicBool,
    closed: AtomicBool,
    /// What each call says the server asked of cronsole and was refused (a real MCP source
    /// notes sampling, elicitation and roots requests so).
    asks: Option<String>,
    events: Mutex<Vec<String>>,
}

impl MemorySource {
    pub fn new(name: &str) -> MemorySource {
        MemorySource {
            name: name.to_string(),
            tools: Vec::new(),
            calls: Mutex::new(Vec::new()),
            in_flight: AtomicUsize::new(0),
            changed: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            asks: None,
            events: Mutex::new(Vec::new()),
        }
    }

    /// Every call also notes `what` as a request the server made during it and cronsole
    /// refused, as a real MCP source notes a sampling request.
    pub fn asking_during_calls(mut self, what: &str) -> MemorySource {
        self.asks = Some(what.to_string());
        self
    }

    /// Add a tool answering with `handler`.
    pub fn tool(
        mut self,
        name: &str,
        schema: Value,
        handler: impl Fn(&Value) -> Result<ToolOutput, ToolError> + Send + Sync + 'static,
    ) -> MemorySource {
        self.tools.push(Tool {
            def: ToolDef {
                name: name.to_string(),
                description: format!("{name} (test tool)"),
                input_schema: schema,
                output_schema: None,
            },
            handler: Arc::new(handler),
            delay: None,
            gate: None,
        });
        self
    }

    /// Add a tool that answers `text` after `delay` (tokio time), honouring its call's bound.
    pub fn slow_tool(mut self, name: &str, delay: Duration, text: &str) -> MemorySource {
        let text = text.to_string();
        self = self.tool(name, json!({"type": "object"}), move |_| {
            Ok(text_output(&text))
        });
        if let Some(t) = self.tools.last_mut() {
            t.delay = Some(delay);
        }
        self
    }

    /// Add a tool that answers `text` once `gate` gives its call a permit (within its call's
    /// bound): the test holds a call in flight as long as it needs.
    pub fn gated_tool(
        mut self,
        name: &str,
        gate: Arc<tokio::sync::Semaphore>,
        text: &str,
    ) -> MemorySource {
        let text = text.to_string();
        self = self.tool(name, json!({"type": "object"}), move |_| {
            Ok(text_output(&text))
        });
        if let Some(t) = self.tools.last_mut() {
            t.gate = Some(gate);
        }
        self
    }

    /// Every call received, in order: (tool name, arguments).
    pub fn calls(&self) -> Vec<(String, Value)> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Calls running now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Say the tool list changed (MCP `notifications/tools/list_changed`).
    pub fn set_changed(&self) {
        self.changed.store(true, Ordering::SeqCst);
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}

/// A text result.
pub fn text_output(text: &str) -> ToolOutput {
    ToolOutput {
        content: vec![Content::Text {
            text: text.to_string(),
        }],
        structured: None,
        is_error: false,
        whole: None,
    }
}

/// A result the tool marks as an error.
pub fn error_output(text: &str) -> ToolOutput {
    ToolOutput {
        is_error: true,
        ..text_output(text)
    }
}

struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl ToolSource for MemorySource {
    fn name(&self) -> &str {
        &self.name
    }

    fn protocol_version(&self) -> Option<String> {
        None
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<ToolDef>, ToolError>> {
        let defs = self.tools.iter().map(|t| t.def.clone()).collect();
        Box::pin(async move { Ok(defs) })
    }

    fn call<'a>(
        &'a self,
        tool: &'a str,
        args: Value,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            self.calls
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((tool.to_string(), args.clone()));
            if let Some(a) = &self.asks {
                self.events
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(a.clone());
            }
            let Some(t) = self.tools.iter().find(|t| t.def.name == tool) else {
                return Err(ToolError::Protocol {
                    source_name: self.name.clone(),
                    why: format!("unknown tool {tool}"),
                });
            };
            self.in_flight.fetch_add(1, Ordering::SeqCst);
            let _guard = InFlight(&self.in_flight);
            if let Some(d) = t.delay
                && tokio::time::timeout(timeout, tokio::time::sleep(d))
                    .await
                    .is_err()
            {
                return Err(ToolError::Timeout(timeout));
            }
            if let Some(g) = &t.gate {
                match tokio::time::timeout(timeout, g.acquire()).await {
                    Ok(Ok(permit)) => permit.forget(),
                    _ => return Err(ToolError::Timeout(timeout)),
                }
            }
            (t.handler)(&args)
        })
    }

    fn list_changed(&self) -> bool {
        self.changed.load(Ordering::SeqCst)
    }

    fn take_events(&self) -> Vec<String> {
        std::mem::take(&mut *self.events.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        self.closed.store(true, Ordering::SeqCst);
        Box::pin(async {})
    }
}

/// Every tool of `sources` offered, as `source__tool` on the wire and `source.tool` in the
/// jobs file, ordered by that name.
pub fn toolbox(sources: Vec<Arc<MemorySource>>) -> Toolbox {
    let mut offered = Vec::new();
    for (i, s) in sources.iter().enumerate() {
        for t in &s.tools {
            offered.push(OfferedTool {
                wire_name: format!("{}__{}", s.name, t.def.name),
                qualified: format!("{}.{}", s.name, t.def.name),
                source: i,
                hash: t.def.definition_hash(),
                def: t.def.clone(),
            });
        }
    }
    offered.sort_by(|a, b| a.qualified.cmp(&b.qualified));
    Toolbox {
        sources: sources
            .into_iter()
            .map(|s| s as Arc<dyn ToolSource>)
            .collect(),
        offered,
    }
}

/// A builder offering every tool of the same in-memory sources to every run (what a run's
/// `Toolbox` builder does with real sources, without any process).
pub struct FixedTools(pub Vec<Arc<MemorySource>>);

impl ToolboxBuilder for FixedTools {
    fn build<'a>(&'a self, _: ToolboxRequest<'a>) -> BoxFuture<'a, Result<Toolbox, ToolError>> {
        let tb = toolbox(self.0.clone());
        Box::pin(async move { Ok(tb) })
    }
}

/// No tools at all: an agent without tools.
pub fn no_tools() -> Toolbox {
    Toolbox {
        sources: Vec::new(),
        offered: Vec::new(),
    }
}

/// The tool calls on a history row's record, in the order it holds them (none without a
/// record).
pub fn calls(row: &crate::model::HistoryRow) -> Vec<crate::transcript::CallEntry> {
    row.transcript
        .as_ref()
        .map(|t| t.to_vec())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|e| match e {
            crate::transcript::Entry::Call(c) => Some(c),
            _ => None,
        })
        .collect()
}

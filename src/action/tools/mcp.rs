//! An MCP server as a [`ToolSource`]: the official Rust SDK's client (`rmcp`) over a stdio
//! child of the run (its pipes, the process started by our supervisor) or over streamable
//! HTTP.
//!
//! Owns: the session (which protocol era, the handshake or discovery), `tools/list` with its
//! pages, `tools/call` with its timeout and cancellation, turning a result into a
//! [`ToolOutput`], and what cronsole answers to a server's own requests. Must not touch: the
//! allowlist (the toolbox decides what is offered), processes beyond the guard it is handed,
//! the store.
//!
//! Decisions an operator can rely on:
//! - Era: without `protocol_version`, cronsole asks `server/discover` first (2026-07-28,
//!   stateless) and falls back to the `initialize` handshake (2025-11-25) when the server
//!   answers as an older one. `protocol_version:` pins the era and the version from the client
//!   side: a version with a handshake never tries discovery, 2026-07-28 never falls back.
//!   A server slow to answer the discovery (over the SDK's fixed 10 s) gets the handshake
//!   instead; one that speaks only 2026-07-28 then refuses it ([`MODERN_ONLY`] in the error),
//!   and the toolbox starts it once more in that era.
//! - cronsole declares no sampling, elicitation or roots capability. A server that asks for one
//!   anyway (or for anything else) gets an error, and a call answered with "input required"
//!   fails; each is kept as an event for the run's record ([`ToolSource::take_events`]).
//! - Bounds against a hostile server: one message at most [`MAX_MESSAGE_BYTES`], a tool list
//!   of at most [`MAX_TOOLS`] tools over at most [`MAX_PAGES`] pages (a cursor seen twice is
//!   refused), every wait bounded by the source's timeout.
//! - Content that is not text (image, audio, an embedded resource, a resource link, a kind
//!   this build does not know) becomes a [`Content::Blob`]: kind, MIME type, size and sha256,
//!   never the bytes.
//! - Every error text passes through the run's secrets (the `env_from` and `headers_env`
//!   values read for its sources) before it leaves this module.
//! - What a server lists passes through its own secrets (its `env_from` or `headers_env`
//!   values, the tokens of its `url`) before anything keeps, shows or sends it: a secret in a
//!   tool's name, description or schemas becomes `[redacted]` for the model, the pins and
//!   `cronsole tools` alike, and a call to the redacted name reaches the tool the server
//!   listed. The pin's hash is the hash of that redacted definition, the same whichever
//!   command lists the server, and a rotated secret does not look like a changed tool. Two
//!   tools whose names meet once redacted are refused.
//! - Before each model turn after a call to the server (or after its list-change notice),
//!   its tools are listed again: a listed definition that changed or went away ends the run
//!   before the turn is reserved. A tool that only appeared changes nothing the run offers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    ErrorCode, Implementation, PaginatedRequestParams, ProtocolVersion, SubscriptionFilter,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, NotificationContext, Peer, RequestContext, RoleClient,
    RunningService,
};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::server_log::ServerLog;
use super::{BoxFuture, Content, ToolDef, ToolError, ToolOutput, ToolSource};
use crate::text::Secrets;

/// The longest single message accepted from a server (a line over stdio, a body or an event
/// over HTTP); a longer one is dropped and the request it answered fails.
pub const MAX_MESSAGE_BYTES: usize = 8 * 1024 * 1024;
/// The most tools one server may list.
pub const MAX_TOOLS: usize = 10_000;
/// The most `tools/list` pages read from one server.
pub const MAX_PAGES: usize = 1_000;
/// The most events kept per source (refused requests); later ones are counted.
const MAX_EVENTS: usize = 64;

/// What the client side of a session shares with the source: whether the server said its
/// tool list changed, and the server requests cronsole refused.
#[derive(Debug, Default)]
pub struct SessionState {
    /// A listed definition changed or went away since the last list (checked by listing again),
    /// or the list could not be read again.
    changed: AtomicBool,
    /// Why the list could not be read again, when that is what set `changed`.
    unlisted: Mutex<Option<String>>,
    /// Each tool's hash at the last list.
    baseline: Mutex<Option<std::collections::BTreeMap<String, String>>>,
    /// Woken by each list-change notice.
    notify: tokio::sync::Notify,
    /// A list-change notice came since the last check before a turn.
    noticed: AtomicBool,
    events: Mutex<Vec<String>>,
    dropped: std::sync::atomic::AtomicUsize,
}

impl SessionState {
    /// The list could not be read again: nothing tells what the server offers now.
    fn unlisted(&self, why: String) {
        if let Ok(mut u) = self.unlisted.lock() {
            u.get_or_insert(why);
        }
        self.changed.store(true, Ordering::SeqCst);
    }

    /// The server said its tool list changed.
    fn list_change_notice(&self) {
        self.noticed.store(true, Ordering::SeqCst);
        self.notify.notify_one();
    }

    /// Flags the source changed when a definition listed at the last list differs from `now`
    /// or is gone (a tool that only appeared changes nothing this run offers).
    fn compare(&self, now: &std::collections::BTreeMap<String, String>) {
        let differs = self.baseline.lock().is_ok_and(|b| {
            b.as_ref()
                .is_some_and(|b| b.iter().any(|(name, h)| now.get(name) != Some(h)))
        });
        if differs {
            self.changed.store(true, Ordering::SeqCst);
        }
    }

    fn note(&self, what: String) {
        if let Ok(mut e) = self.events.lock()
            && e.len() < MAX_EVENTS
        {
            e.push(what);
            return;
        }
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }

    fn refuse(&self, what: &str) -> rmcp::ErrorData {
        self.note(format!("refused the server's {what} request"));
        rmcp::ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("cronsole does not provide {what} (it declares no such capability)"),
            None,
        )
    }
}

/// cronsole's side of a session: no capability, every server request refused and recorded.
#[derive(Debug, Clone)]
struct Handler {
    state: Arc<SessionState>,
    info: ClientConfig,
    log: Arc<ServerLog>,
}

// Sampling and roots are deprecated in the newest revision, but servers of the older era still
// ask for them: they are refused here explicitly (rmcp's default would answer roots with an
// empty list, as if cronsole had declared the capability).
#[allow(deprecated)]
impl rmcp::ClientHandler for Handler {
    async fn create_message(
        &self,
        _params: rmcp::model::CreateMessageRequestParams,
        _cx: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, rmcp::ErrorData> {
        Err(self.state.refuse("sampling"))
    }

    async fn list_roots(
        &self,
        _cx: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ListRootsResult, rmcp::ErrorData> {
        Err(self.state.refuse("roots"))
    }

    async fn create_elicitation(
        &self,
        _request: rmcp::model::ElicitRequestParams,
        _cx: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        Err(self.state.refuse("elicitation"))
    }

    async fn on_custom_request(
        &self,
        request: rmcp::model::CustomRequest,
        _cx: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CustomResult, rmcp::ErrorData> {
        let method: String = request.method.chars().take(64).collect();
        Err(self.state.refuse(&format!("'{method}'")))
    }

    async fn on_tool_list_changed(&self, _cx: NotificationContext<RoleClient>) {
        self.state.list_change_notice();
    }

    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _cx: NotificationContext<RoleClient>,
    ) {
        self.log
            .message(params.level, params.logger.as_deref(), &params.data);
    }

    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }
}

/// Part of an unreachable server's reason when, without a pinned era, the server took
/// the discovery as its era and refused the handshake sent after the SDK stopped waiting: it
/// speaks only 2026-07-28 and was slow to answer. The toolbox starts such a server once more
/// in that era.
pub const MODERN_ONLY: &str = "it speaks only the 2026-07-28 protocol and was slow to answer";

/// The newest era: discovery, no handshake.
pub const MODERN_VERSION: &str = "2026-07-28";

/// Which protocol era a session starts in (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Era {
    /// Discovery first, the handshake when the server is older.
    Auto,
    /// This version only (`protocol_version:`).
    Pinned(String),
}

impl Era {
    fn lifecycle(&self) -> Result<(ClientLifecycleMode, ProtocolVersion), String> {
        match self {
            Era::Auto => Ok((
                ClientLifecycleMode::Auto {
                    preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                    legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
                },
                ProtocolVersion::LATEST_WITH_INITIALIZE,
            )),
            Era::Pinned(v) => {
                let version = ProtocolVersion::KNOWN_VERSIONS
                    .iter()
                    .find(|k| k.as_str() == v)
                    .cloned()
                    .ok_or_else(|| format!("unknown protocol version {v}"))?;
                if version.has_initialize() {
                    Ok((ClientLifecycleMode::Initialize, version))
                } else {
                    Ok((
                        ClientLifecycleMode::Discover {
                            preferred_versions: vec![version.clone()],
                        },
                        version,
                    ))
                }
            }
        }
    }
}

/// One live session with an MCP server.
pub struct McpSource {
    name: String,
    peer: Peer<RoleClient>,
    running: tokio::sync::Mutex<Option<RunningService<RoleClient, Handler>>>,
    state: Arc<SessionState>,
    secrets: Arc<Secrets>,
    /// The server's own secrets, redacted from what it lists.
    own: Arc<Secrets>,
    /// The name each listed tool is called by, keyed by the name it is shown under (only those
    /// that differ: a name that carried a secret).
    real_names: Mutex<std::collections::BTreeMap<String, String>>,
    /// The server's log messages, bounded; what it left out is said at close.
    log: Arc<ServerLog>,
    protocol: Option<String>,
    /// Whatever keeps the server alive that is not the session (a stdio child's process);
    /// dropped on close, which ends it.
    guard: Mutex<Option<Box<dyn std::any::Any + Send + Sync>>>,
    /// The server's recent stderr (stdio), for error texts.
    stderr: Option<Arc<Mutex<Tail>>>,
    /// Bound of a `tools/list` (all pages).
    list_timeout: Duration,
    /// Lists again after each list-change notice; stopped with the session.
    watcher: tokio::task::JoinHandle<()>,
}

impl Drop for McpSource {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

/// The last bytes a stream wrote (a stdio server's stderr), for error messages.
#[derive(Debug, Default)]
pub struct Tail {
    buf: std::collections::VecDeque<u8>,
}

impl Tail {
    const MAX: usize = 2048;

    /// Keeps the last [`Tail::MAX`] bytes.
    pub fn push(&mut self, b: &[u8]) {
        self.buf.extend(b);
        let over = self.buf.len().saturating_sub(Self::MAX);
        self.buf.drain(..over);
    }

    /// The kept bytes as one line of text.
    pub fn text(&self) -> String {
        let v: Vec<u8> = self.buf.iter().copied().collect();
        let s = String::from_utf8_lossy(&v);
        let s = s.trim();
        crate::text::line(s).into_owned()
    }
}

/// What [`McpSource::connect`] needs besides the transport.
pub struct Session {
    /// The `mcp_servers:` name.
    pub name: String,
    /// Which era to speak.
    pub era: Era,
    /// Bound of the handshake and of each `tools/list`.
    pub timeout: Duration,
    /// The run's secrets (redacted from every error text).
    pub secrets: Arc<Secrets>,
    /// The server's own secret values (its `env_from` or `headers_env` values, its URL's
    /// tokens): redacted from the tools it lists.
    pub own: Arc<Secrets>,
    /// Kept alive with the session and dropped when it closes (a child process).
    pub guard: Option<Box<dyn std::any::Any + Send + Sync>>,
    /// The server's stderr tail (stdio), read into by the caller.
    pub stderr: Option<Arc<Mutex<Tail>>>,
}

impl McpSource {
    /// Opens a session over `transport`: the handshake or discovery, bounded by
    /// `session.timeout`. An error names the server and says what went wrong (redacted).
    ///
    /// Without a pinned era, a server that has not answered the discovery within 10 s is
    /// spoken to in the older era (the SDK's fixed wait). [`connect_stdio`] and
    /// [`connect_http`] wrap their transport so that the discovery's late answer is dropped
    /// rather than taken for the handshake's.
    pub async fn connect<T, E, A>(session: Session, transport: T) -> Result<McpSource, ToolError>
    where
        T: rmcp::transport::IntoTransport<RoleClient, E, A> + Send + 'static,
        E: std::error::Error + Send + Sync + 'static,
    {
        let Session {
            name,
            era,
            timeout,
            secrets,
            own,
            guard,
            stderr,
        } = session;
        let unreachable = |why: String| ToolError::Unreachable {
            source_name: name.clone(),
            why: redact(&secrets, &with_stderr(why, stderr.as_ref())),
        };
        let (mode, version) = era.lifecycle().map_err(&unreachable)?;
        let auto = era == Era::Auto;
        let state = Arc::new(SessionState::default());
        let info = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("cronsole", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(version);
        let log = Arc::new(ServerLog::new(&name, secrets.clone()));
        let handler = Handler {
            state: state.clone(),
            info,
            log: log.clone(),
        };
        let started = tokio::time::timeout(timeout, handler.serve_with_lifecycle(transport, mode))
            .await
            .map_err(|_| {
                unreachable(format!(
                    "no answer to the session's start within {}s",
                    crate::text::secs_words(timeout.as_secs_f64())
                ))
            })?
            .map_err(|e| {
                let why = format!("the session could not start: {}", root_cause(&e));
                unreachable(if auto && refused_handshake(&e) {
                    format!("{MODERN_ONLY} ({why})")
                } else {
                    why
                })
            })?;
        let peer = started.peer().clone();
        let info = peer.peer_info();
        let protocol = info.as_ref().map(|i| i.protocol_version.to_string());
        // A 2026-07-28 server sends list changes only on a listen stream that asked for them.
        if let Some(i) = &info
            && !i.protocol_version.has_initialize()
            && i.capabilities
                .tools
                .as_ref()
                .and_then(|t| t.list_changed)
                .unwrap_or(false)
        {
            watch_list_changes(&peer, state.clone(), timeout).await;
        }
        let watcher = watch_changes(peer.clone(), state.clone(), timeout);
        Ok(McpSource {
            watcher,
            name,
            peer,
            running: tokio::sync::Mutex::new(Some(started)),
            state,
            secrets,
            own,
            real_names: Mutex::default(),
            log,
            protocol,
            guard: Mutex::new(guard),
            stderr,
            list_timeout: timeout,
        })
    }

    fn protocol_error(&self, why: String) -> ToolError {
        ToolError::Protocol {
            source_name: self.name.clone(),
            why: redact(&self.secrets, &with_stderr(why, self.stderr.as_ref())),
        }
    }

    async fn list_pages(&self) -> Result<Vec<ToolDef>, ToolError> {
        let defs = pages(&self.peer)
            .await
            .map_err(|e| self.protocol_error(e))?;
        // What a later list change is compared with.
        if let Ok(mut b) = self.state.baseline.lock() {
            *b = Some(hashes(&defs));
        }
        self.state.changed.store(false, Ordering::SeqCst);
        let (shown, real) = redacted_defs(&self.own, defs).map_err(|e| self.protocol_error(e))?;
        if let Ok(mut names) = self.real_names.lock() {
            *names = real;
        }
        Ok(shown)
    }

    /// Lists again when the server was called or sent a list-change notice since the last
    /// check, and compares. The watcher's own re-list after a notice runs in the background and
    /// may not have finished (a notice sent with a call's answer is read after it); this
    /// check is what the next turn waits for. A server that was called may also change its
    /// list without a notice: it is listed again all the same.
    async fn recheck_list(&self, called: bool) -> bool {
        let noticed = self.state.noticed.swap(false, Ordering::SeqCst);
        if self.state.changed.load(Ordering::SeqCst) {
            return true;
        }
        if !called && !noticed {
            return false;
        }
        match tokio::time::timeout(self.list_timeout, pages(&self.peer)).await {
            Ok(Ok(defs)) => self.state.compare(&hashes(&defs)),
            // A server that is gone answers its next calls with errors the model is told of;
            // one that is there but cannot list is not trusted with the next turn.
            r => {
                if !self.peer.is_transport_closed() {
                    self.state
                        .unlisted(unlisted_why(r.err(), self.list_timeout));
                }
            }
        }
        self.state.changed.load(Ordering::SeqCst)
    }

    async fn call_once(
        &self,
        tool: &str,
        args: Value,
        timeout: Duration,
    ) -> Result<ToolOutput, ToolError> {
        // A name shown redacted is called by the name the server listed.
        let real = self
            .real_names
            .lock()
            .ok()
            .and_then(|n| n.get(tool).cloned())
            .unwrap_or_else(|| tool.to_string());
        let mut params = CallToolRequestParams::new(real);
        match args {
            Value::Object(m) => params = params.with_arguments(m),
            Value::Null => {}
            other => {
                return Err(self.protocol_error(format!(
                    "arguments must be a JSON object, not {}",
                    json_kind(&other)
                )));
            }
        }
        // Dropping the request (timeout, or the caller's future) sends
        // `notifications/cancelled` for it.
        let reply = tokio::time::timeout(timeout, self.peer.call_tool_once(params))
            .await
            .map_err(|_| ToolError::Timeout(timeout))?
            .map_err(|e| {
                self.protocol_error(format!(
                    "tools/call failed: {}",
                    transport_words(&e.to_string())
                ))
            })?;
        match reply {
            CallToolResponse::Complete(r) => Ok(redact_output(&self.secrets, tool_output(&r))),
            CallToolResponse::InputRequired(_) => {
                self.state.note(format!(
                    "refused an input-required result of {tool} (cronsole answers no server \
                     requests)"
                ));
                Err(self.protocol_error(
                    "the server asked for input mid-call; cronsole provides none".to_string(),
                ))
            }
            CallToolResponse::Task(_) => Err(self.protocol_error(
                "the server answered with a task; cronsole waits for results only".to_string(),
            )),
            _ => Err(self.protocol_error("unexpected answer to tools/call".to_string())),
        }
    }
}

/// Every tool the server lists, over all pages (bounded: see the module doc).
async fn pages(peer: &Peer<RoleClient>) -> Result<Vec<ToolDef>, String> {
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    let mut seen = std::collections::HashSet::new();
    for _ in 0..MAX_PAGES {
        let params = PaginatedRequestParams::default().with_cursor(cursor.clone());
        let page = peer
            .list_tools(Some(params))
            .await
            .map_err(|e| format!("tools/list failed: {e}"))?;
        all.extend(page.tools.iter().map(tool_def));
        if all.len() > MAX_TOOLS {
            return Err(format!("lists more than {MAX_TOOLS} tools: refused"));
        }
        match page.next_cursor {
            Some(c) if !c.is_empty() => {
                if !seen.insert(c.clone()) {
                    return Err(
                        "tools/list repeats a page cursor (the list would never end)".to_string(),
                    );
                }
                cursor = Some(c);
            }
            _ => return Ok(all),
        }
    }
    Err(format!(
        "tools/list has more than {MAX_PAGES} pages: refused"
    ))
}

/// `defs` as cronsole keeps and shows them: each name, description and schema redacted of
/// `own` (see the module doc), with the listed name of each tool whose name changed, keyed by
/// its redacted name. An error when two names meet once redacted.
#[allow(clippy::type_complexity)]
fn redacted_defs(
    own: &Secrets,
    defs: Vec<ToolDef>,
) -> Result<(Vec<ToolDef>, std::collections::BTreeMap<String, String>), String> {
    let mut real = std::collections::BTreeMap::new();
    if own.is_empty() {
        return Ok((defs, real));
    }
    let mut shown = Vec::with_capacity(defs.len());
    for d in defs {
        let name = own.redact(&d.name).into_owned();
        if name != d.name {
            real.insert(name.clone(), d.name.clone());
        }
        let mut input_schema = d.input_schema;
        own.redact_json(&mut input_schema);
        let output_schema = d.output_schema.map(|mut s| {
            own.redact_json(&mut s);
            s
        });
        shown.push(ToolDef {
            name,
            description: own.redact(&d.description).into_owned(),
            input_schema,
            output_schema,
        });
    }
    // Two tools under one redacted name: a call could not say which one it means.
    if let Some(n) = real
        .keys()
        .find(|n| shown.iter().filter(|d| &d.name == *n).count() > 1)
    {
        return Err(format!(
            "two of its tools are both named {} once its secrets are redacted",
            crate::text::line(n)
        ));
    }
    Ok((shown, real))
}

/// Why a list again failed: it timed out (`None`), or what it said, redacted later with the
/// source's other texts.
fn unlisted_why(r: Option<tokio::time::error::Elapsed>, timeout: Duration) -> String {
    match r {
        Some(_) => format!(
            "it did not answer tools/list within {}s",
            crate::text::secs_words(timeout.as_secs_f64())
        ),
        None => "it could not list its tools".to_string(),
    }
}

/// Each tool's definition hash by name.
fn hashes(defs: &[ToolDef]) -> std::collections::BTreeMap<String, String> {
    defs.iter()
        .map(|d| (d.name.clone(), d.definition_hash()))
        .collect()
}

/// After each list-change notice, lists the tools again and flags the source changed when a
/// definition listed at the last [`ToolSource::list`] differs or is gone (a notice alone, or a
/// tool that only appeared, changes nothing this run offers). Ends with the session.
fn watch_changes(
    peer: Peer<RoleClient>,
    state: Arc<SessionState>,
    timeout: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            state.notify.notified().await;
            let now = match tokio::time::timeout(timeout, pages(&peer)).await {
                Ok(Ok(defs)) => hashes(&defs),
                // A server that cannot list any more cannot be trusted with the next turn.
                r => {
                    if peer.is_transport_closed() {
                        return;
                    }
                    state.unlisted(unlisted_why(r.err(), timeout));
                    continue;
                }
            };
            state.compare(&now);
        }
    })
}

/// Opens the 2026-07-28 listen stream for tool list changes and flags each one.
async fn watch_list_changes(peer: &Peer<RoleClient>, state: Arc<SessionState>, timeout: Duration) {
    let filter = SubscriptionFilter::builder().tools_list_changed().build();
    let Ok(Ok(mut sub)) = tokio::time::timeout(timeout, peer.listen(filter)).await else {
        // A server that cannot keep a listen stream still answers calls; a change it makes
        // is then seen when its definitions are compared at the next run's start.
        return;
    };
    tokio::spawn(async move {
        while let Ok(Some(n)) = sub.next().await {
            if matches!(
                n,
                rmcp::model::ServerNotification::ToolListChangedNotification(_)
            ) {
                state.list_change_notice();
            }
        }
    });
}

impl ToolSource for McpSource {
    fn name(&self) -> &str {
        &self.name
    }

    fn protocol_version(&self) -> Option<String> {
        self.protocol.clone()
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<ToolDef>, ToolError>> {
        Box::pin(async move {
            tokio::time::timeout(self.list_timeout, self.list_pages())
                .await
                .map_err(|_| {
                    self.protocol_error(format!(
                        "tools/list did not finish within {}s",
                        crate::text::secs_words(self.list_timeout.as_secs_f64())
                    ))
                })?
        })
    }

    fn call<'a>(
        &'a self,
        tool: &'a str,
        args: Value,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(self.call_once(tool, args, timeout))
    }

    fn list_changed(&self) -> bool {
        self.state.changed.load(Ordering::SeqCst)
    }

    fn recheck(&self, called: bool) -> BoxFuture<'_, bool> {
        Box::pin(self.recheck_list(called))
    }

    fn unlisted(&self) -> Option<String> {
        let why = self.state.unlisted.lock().ok()?.clone()?;
        Some(redact(&self.secrets, &why))
    }

    fn take_events(&self) -> Vec<String> {
        let mut out = self
            .state
            .events
            .lock()
            .map(|mut e| std::mem::take(&mut *e))
            .unwrap_or_default();
        let dropped = self.state.dropped.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            out.push(format!("… and {dropped} more refused requests"));
        }
        out.into_iter().map(|e| redact(&self.secrets, &e)).collect()
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.watcher.abort();
            if let Some(mut running) = self.running.lock().await.take() {
                let _ = running.close_with_timeout(Duration::from_secs(2)).await;
            }
            self.log.flush();
            // The server's process (stdio) ends with its guard.
            let guard = self.guard.lock().ok().and_then(|mut g| g.take());
            drop(guard);
        })
    }
}

/// Opens a session with a streamable-HTTP server at `url`, sending `headers` (name, value:
/// the `headers_env` values, already read) with every request. The client follows no redirect
/// and uses no proxy; loopback is allowed (the URL is the operator's own).
pub async fn connect_http(
    url: &str,
    headers: &[(String, String)],
    session: Session,
) -> Result<McpSource, ToolError> {
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    // Every reason names where the server was looked for (path and query elided: a token may
    // ride there).
    let shown = crate::text::url_display(url, "");
    let unreachable = |why: String| ToolError::Unreachable {
        source_name: session.name.clone(),
        why: redact(&session.secrets, &format!("{shown}: {why}")),
    };
    let client = crate::action::http::http_client(&crate::action::http::HttpOptions {
        connect_timeout: session.timeout.min(Duration::from_secs(10)),
        system_proxy: false,
    })
    .map_err(|e| unreachable(e.to_string()))?;
    let mut custom = std::collections::HashMap::new();
    for (name, value) in headers {
        let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| unreachable(format!("invalid header name {name}")))?;
        // The value is a secret: never in the message, and marked sensitive for the client.
        let mut value = reqwest::header::HeaderValue::from_str(value).map_err(|_| {
            unreachable(format!(
                "the value of header {name} is not valid in an HTTP header"
            ))
        })?;
        value.set_sensitive(true);
        custom.insert(name, value);
    }
    let config = StreamableHttpClientTransportConfig::with_uri(url.to_string())
        .custom_headers(custom)
        .max_json_response_size(MAX_MESSAGE_BYTES)
        .max_sse_event_size(MAX_MESSAGE_BYTES);
    let transport = StreamableHttpClientTransport::with_client(client, config);
    // A late answer to a discovery abandoned for the handshake must not end the session.
    let timeout = session.timeout;
    match McpSource::connect(session, super::fallback::Forgetful::new(transport)).await {
        Err(ToolError::Unreachable { source_name, why }) => {
            // The transport's words hide the cause ("error sending request"): a connection
            // of our own says whether the host and port answer at all.
            let why = match tcp_probe(url, timeout).await {
                Some(cause) => format!("could not connect: {cause}"),
                None => transport_words(&why),
            };
            Err(ToolError::Unreachable {
                source_name,
                why: format!("{shown}: {why}"),
            })
        }
        r => r,
    }
}

/// Why a TCP connection to `url`'s host and port fails, if it does (within `timeout`, at most
/// 10 s); `None` when it connects.
async fn tcp_probe(url: &str, timeout: Duration) -> Option<String> {
    let u = reqwest::Url::parse(url).ok()?;
    let host = u
        .host_str()?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = u.port_or_known_default()?;
    let bound = timeout.min(Duration::from_secs(10));
    match tokio::time::timeout(bound, tokio::net::TcpStream::connect((host.as_str(), port))).await {
        Ok(Ok(_)) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(_) => Some(format!(
            "no answer within {}s",
            crate::text::secs_words(bound.as_secs_f64())
        )),
    }
}

/// A transport error's text without the SDK's type names (`Transport [rmcp::…] error: `).
fn transport_words(why: &str) -> String {
    match (why.find(" Transport ["), why.find("] error: ")) {
        (Some(a), Some(b)) if a < b => {
            format!("{}: {}", why[..a].trim_end_matches(':'), &why[b + 9..])
        }
        _ => why.to_string(),
    }
}

/// Opens a session over a stdio server's pipes: `read` is its stdout, `write` its stdin.
pub async fn connect_stdio<R, W>(
    read: R,
    write: W,
    session: Session,
) -> Result<McpSource, ToolError>
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let transport = rmcp::transport::async_rw::AsyncRwTransport::new_client(read, write)
        .with_max_line_length(MAX_MESSAGE_BYTES);
    // A late answer to a discovery abandoned for the handshake must not end the session.
    McpSource::connect(session, super::fallback::Forgetful::new(transport)).await
}

/// A server's tool as a [`ToolDef`].
fn tool_def(t: &rmcp::model::Tool) -> ToolDef {
    ToolDef {
        name: t.name.to_string(),
        description: t.description.as_deref().unwrap_or_default().to_string(),
        input_schema: Value::Object((*t.input_schema).clone()),
        output_schema: t
            .output_schema
            .as_ref()
            .map(|s| Value::Object((**s).clone())),
    }
}

/// A call's result as a [`ToolOutput`]: text kept, everything else a placeholder.
fn tool_output(r: &CallToolResult) -> ToolOutput {
    let content = r
        .content
        .iter()
        .map(|block| content_of(&serde_json::to_value(block).unwrap_or(Value::Null)))
        .collect();
    ToolOutput {
        content,
        structured: r.structured_content.clone(),
        is_error: r.is_error.unwrap_or(false),
        whole: None,
    }
}

/// The output with every secret of the run replaced in its text and structured content: a
/// server that echoes its own key (or prints its environment) never hands it to the model or
/// the record.
pub fn redact_output(secrets: &Secrets, mut out: ToolOutput) -> ToolOutput {
    if secrets.is_empty() {
        return out;
    }
    for c in &mut out.content {
        if let Content::Text { text } = c {
            *text = secrets.redact(text).into_owned();
        }
    }
    if let Some(v) = &mut out.structured {
        secrets.redact_json(v);
    }
    out
}

/// One content block (as the protocol's JSON) as [`Content`].
pub fn content_of(block: &Value) -> Content {
    let kind = block
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    let s = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_string();
    match kind {
        "text" => Content::Text {
            text: s(block.get("text")),
        },
        "image" | "audio" => blob(kind, s(block.get("mimeType")), &decoded(block.get("data"))),
        "resource" => {
            let r = block.get("resource").unwrap_or(&Value::Null);
            let bytes = match r.get("text").and_then(Value::as_str) {
                Some(t) => t.as_bytes().to_vec(),
                None => decoded(r.get("blob")),
            };
            blob(kind, s(r.get("mimeType")), &bytes)
        }
        other => {
            // A resource link, or a kind this build does not know: its JSON is the payload.
            let bytes = serde_json::to_vec(block).unwrap_or_default();
            blob(other, s(block.get("mimeType")), &bytes)
        }
    }
}

fn blob(kind: &str, mime: String, bytes: &[u8]) -> Content {
    let digest = Sha256::digest(bytes);
    Content::Blob {
        kind: crate::text::line(&kind.chars().take(32).collect::<String>()).into_owned(),
        mime: crate::text::line(&mime.chars().take(128).collect::<String>()).into_owned(),
        size: bytes.len(),
        sha256: digest.iter().map(|b| format!("{b:02x}")).collect(),
    }
}

/// The bytes of a base64 field (standard alphabet, padding optional); text that is not
/// base64 counts as its own bytes, so the placeholder still says how much came.
fn decoded(v: Option<&Value>) -> Vec<u8> {
    use base64::Engine as _;
    let text = v.and_then(Value::as_str).unwrap_or_default();
    base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(text.trim()))
        .unwrap_or_else(|_| text.as_bytes().to_vec())
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The innermost cause of an error (`Connection refused (os error 111)` rather than the
/// transport's wrapping of it, which names internal types and the full URL).
/// The handshake was refused for its protocol version: the server took the discovery sent
/// before it as the connection's era.
fn refused_handshake(e: &rmcp::service::ClientInitializeError) -> bool {
    use rmcp::service::ClientInitializeError as E;
    match e {
        E::JsonRpcError(d) => d.code == rmcp::model::ErrorCode::UNSUPPORTED_PROTOCOL_VERSION,
        E::LegacyFallbackFailed { fallback, .. } => refused_handshake(fallback),
        _ => false,
    }
}

fn root_cause(e: &dyn std::error::Error) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

fn with_stderr(why: String, stderr: Option<&Arc<Mutex<Tail>>>) -> String {
    let tail = stderr
        .and_then(|t| t.lock().ok().map(|t| t.text()))
        .filter(|t| !t.is_empty());
    match tail {
        Some(t) => format!("{why} (its stderr: {t})"),
        None => why,
    }
}

fn redact(secrets: &Secrets, s: &str) -> String {
    crate::text::line(&secrets.redact(s)).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn non_text_content_becomes_a_placeholder_with_size_and_hash() {
        assert_eq!(
            content_of(&json!({"type": "text", "text": "hi"})),
            Content::Text { text: "hi".into() }
        );
        let Content::Blob {
            kind,
            mime,
            size,
            sha256,
        } = content_of(&json!({"type": "image", "mimeType": "image/png", "data": "AAEC"}))
        else {
            panic!("not a blob");
        };
        assert_eq!(
            (kind.as_str(), mime.as_str(), size),
            ("image", "image/png", 3)
        );
        assert_eq!(
            sha256,
            "ae4b3280e56e2faf83f414a6e3dabe9d5fbe18976544c05fed121accb85b53fc"
        );
        let Content::Blob { kind, size, .. } = content_of(&json!({
            "type": "resource",
            "resource": {"uri": "file:///x", "mimeType": "text/plain", "text": "hello"}
        })) else {
            panic!("not a blob");
        };
        assert_eq!((kind.as_str(), size), ("resource", 5));
        let Content::Blob { kind, .. } = content_of(&json!({"type": "hologram\u{1b}[2J"})) else {
            panic!("not a blob");
        };
        assert!(!kind.contains('\u{1b}'), "{kind:?}");
    }

    #[test]
    fn a_transport_error_reads_without_the_sdks_type_names() {
        let why = "Transport send error: Transport [cronsole::action::tools::fallback::Forgetful<\
                   rmcp::transport::worker::WorkerTransport<reqwest::Client>>] error: HTTP \
                   response body exceeded the maximum size of 8388608 bytes";
        assert_eq!(
            transport_words(why),
            "Transport send error: HTTP response body exceeded the maximum size of 8388608 bytes"
        );
        assert_eq!(transport_words("plain words"), "plain words");
    }

    #[test]
    fn the_tail_keeps_the_last_bytes_on_one_inert_line() {
        let mut t = Tail::default();
        t.push(&vec![b'a'; 5000]);
        t.push(b"\x1b[31mboom\nend");
        let s = t.text();
        assert!(s.len() <= Tail::MAX + 16, "{}", s.len());
        assert!(s.ends_with("end"), "{s}");
        assert!(!s.contains('\u{1b}') && !s.contains('\n'), "{s:?}");
    }

    #[test]
    fn a_pinned_era_picks_the_handshake_or_discovery() {
        let (m, v) = Era::Pinned("2025-06-18".into()).lifecycle().unwrap();
        assert_eq!(m, ClientLifecycleMode::Initialize);
        assert_eq!(v.as_str(), "2025-06-18");
        let (m, _) = Era::Pinned("2026-07-28".into()).lifecycle().unwrap();
        assert!(matches!(m, ClientLifecycleMode::Discover { .. }));
        assert!(Era::Pinned("1999-01-01".into()).lifecycle().is_err());
        let (m, v) = Era::Auto.lifecycle().unwrap();
        assert!(matches!(m, ClientLifecycleMode::Auto { .. }));
        assert!(v.has_initialize());
    }
}

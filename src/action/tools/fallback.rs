//! A transport wrapper that forgets the answer to an abandoned discovery.
//!
//! Owns: [`Forgetful`], which sits between `rmcp` and a session's real transport. Must not
//! touch: what the messages mean beyond their request ids and the two startup methods.
//!
//! Why it exists: when no protocol version is pinned, the session first asks
//! `server/discover` and falls back to the `initialize` handshake after a fixed 10 s without an
//! answer (a server that ignores unknown methods is older). A stdio server that is merely slow
//! to start (an interpreter importing its SDK on a busy machine) then answers the discovery
//! *after* the handshake was sent, and the handshake, seeing an answer to another request,
//! fails the whole session. Once a handshake follows a discovery, the discovery's answer can
//! only be late: this wrapper drops it, so a slow server is spoken to in the older era instead
//! of failing the run.

use std::collections::HashSet;

use rmcp::model::{ClientRequest, JsonRpcMessage, RequestId};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;

/// A transport that drops answers to a discovery abandoned for the handshake.
pub struct Forgetful<T> {
    inner: T,
    /// Discovery requests sent, not yet abandoned.
    discovering: Vec<RequestId>,
    /// Abandoned discoveries whose answers are dropped when they come.
    abandoned: HashSet<RequestId>,
}

impl<T> Forgetful<T> {
    /// Wraps `inner`.
    pub fn new(inner: T) -> Forgetful<T> {
        Forgetful {
            inner,
            discovering: Vec::new(),
            abandoned: HashSet::new(),
        }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Forgetful<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let JsonRpcMessage::Request(r) = &item {
            match &r.request {
                ClientRequest::DiscoverRequest(_) => self.discovering.push(r.id.clone()),
                ClientRequest::InitializeRequest(_) => {
                    self.abandoned.extend(self.discovering.drain(..));
                }
                _ => {}
            }
        }
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let msg = self.inner.receive().await?;
            if answer_id(&msg).is_some_and(|id| self.abandoned.remove(&id)) {
                tracing::debug!("dropped the late answer to an abandoned server/discover");
                continue;
            }
            return Some(msg);
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// The request id a message answers, if it is an answer.
fn answer_id(msg: &RxJsonRpcMessage<RoleClient>) -> Option<RequestId> {
    match msg {
        JsonRpcMessage::Response(r) => Some(r.id.clone()),
        JsonRpcMessage::Error(e) => e.id.clone(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::{Value, json};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    use crate::action::tools::ToolSource;
    use crate::action::tools::mcp::{Era, Session, connect_stdio};
    use crate::text::Secrets;

    /// A server that answers `server/discover` only after 11 s (so after the handshake was
    /// sent), then speaks the older era.
    async fn slow_server(io: tokio::io::DuplexStream) {
        let (r, mut w) = tokio::io::split(io);
        let mut lines = BufReader::new(r).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let Ok(msg) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            let id = msg["id"].clone();
            let reply = match msg["method"].as_str() {
                Some("server/discover") => {
                    tokio::time::sleep(Duration::from_secs(11)).await;
                    json!({"jsonrpc": "2.0", "id": id,
                           "error": {"code": -32601, "message": "Method not found"}})
                }
                Some("initialize") => json!({"jsonrpc": "2.0", "id": id, "result": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "slow", "version": "1"}}}),
                Some("tools/list") => json!({"jsonrpc": "2.0", "id": id, "result": {
                    "tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}}),
                _ => continue,
            };
            let mut out = reply.to_string();
            out.push('\n');
            if w.write_all(out.as_bytes()).await.is_err() {
                return;
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_discovery_answered_after_the_handshake_was_sent_does_not_end_the_session() {
        let (client, server) = tokio::io::duplex(64 * 1024);
        tokio::spawn(slow_server(server));
        let (r, w) = tokio::io::split(client);
        let session = Session {
            name: "slow".into(),
            era: Era::Auto,
            timeout: Duration::from_secs(60),
            secrets: Arc::new(Secrets::new(Vec::<String>::new())),
            own: Default::default(),
            guard: None,
            stderr: None,
        };
        let src = connect_stdio(r, w, session)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(src.protocol_version().as_deref(), Some("2025-11-25"));
        let tools = src.list().await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(tools.len(), 1);
        src.close().await;
    }
}

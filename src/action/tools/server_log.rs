//! What an MCP server says in its log notifications (`notifications/message`), as cronsole's
//! log keeps it.
//!
//! Owns: [`ServerLog`] — one server session's log messages redacted, cut to one bounded line
//! and rate-limited, with a count of what was left out. Must not touch: the session itself
//! (`mcp` hands each message over), the run's record, the log's destination (the binary's
//! subscriber).
//!
//! Decisions an operator can rely on:
//! - A message passes through the run's secrets (the `env_from` and `headers_env` values read
//!   for its sources) before it is logged, then becomes one inert line of at most
//!   [`MESSAGE_MAX_CHARS`] characters (marked when cut).
//! - At most [`PER_WINDOW`] messages of one server session are logged per [`WINDOW`]; the rest
//!   are counted, and one line says how many were left out when the next window opens or the
//!   session closes. A server that floods its log cannot fill the store's disk through ours.
//! - MCP `debug` is logged at DEBUG, `info` and `notice` at INFO, anything more severe at WARN
//!   (it is the server's trouble, not cronsole's).
//! - The SDK's own log events are not written at all (the binary's subscriber drops them):
//!   they carry what servers send verbatim, unredacted and unbounded.

// Log notifications are deprecated in the newest protocol revision, but servers of the older
// era still send them.
#![allow(deprecated)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::LoggingLevel;
use serde_json::Value;
use tokio::time::Instant;

use crate::text::Secrets;

/// The longest log message kept, in characters (after redaction).
pub const MESSAGE_MAX_CHARS: usize = 500;
/// Messages of one session logged per [`WINDOW`].
pub const PER_WINDOW: u32 = 20;
/// The rate window.
pub const WINDOW: Duration = Duration::from_secs(60);

/// One server session's log messages, bounded (see the module doc).
#[derive(Debug)]
pub struct ServerLog {
    server: String,
    secrets: Arc<Secrets>,
    gate: Mutex<Gate>,
}

/// The rate limit's state: the window's start, what it logged and what it left out.
#[derive(Debug, Default, Clone, PartialEq)]
struct Gate {
    start: Option<Instant>,
    logged: u32,
    suppressed: u64,
}

impl Gate {
    /// Whether a message at `now` is logged, and how many earlier ones the window that just
    /// closed left out (to be said first).
    fn admit(&mut self, now: Instant) -> (bool, u64) {
        let mut left_out = 0;
        match self.start {
            Some(s) if now.saturating_duration_since(s) < WINDOW => {}
            _ => {
                left_out = std::mem::take(&mut self.suppressed);
                self.start = Some(now);
                self.logged = 0;
            }
        }
        if self.logged < PER_WINDOW {
            self.logged += 1;
            (true, left_out)
        } else {
            self.suppressed += 1;
            (false, left_out)
        }
    }
}

impl ServerLog {
    /// The log of server `server`, redacting `secrets`.
    pub fn new(server: &str, secrets: Arc<Secrets>) -> ServerLog {
        ServerLog {
            server: crate::text::line(server).into_owned(),
            secrets,
            gate: Mutex::new(Gate::default()),
        }
    }

    /// One `notifications/message`: logged or counted.
    pub fn message(&self, level: LoggingLevel, logger: Option<&str>, data: &Value) {
        let (logged, left_out) = match self.gate.lock() {
            Ok(mut g) => g.admit(Instant::now()),
            Err(_) => return,
        };
        if left_out > 0 {
            self.say_left_out(left_out);
        }
        if !logged {
            return;
        }
        let text = self.render(logger, data);
        let server = &self.server;
        match level {
            LoggingLevel::Debug => tracing::debug!(server = %server, "MCP server log: {text}"),
            LoggingLevel::Info | LoggingLevel::Notice => {
                tracing::info!(server = %server, "MCP server log: {text}")
            }
            _ => tracing::warn!(server = %server, level = ?level, "MCP server log: {text}"),
        }
    }

    /// Says how many messages were left out since the last line that did, if any (at the
    /// session's end).
    pub fn flush(&self) {
        let left_out = self
            .gate
            .lock()
            .map(|mut g| std::mem::take(&mut g.suppressed))
            .unwrap_or(0);
        if left_out > 0 {
            self.say_left_out(left_out);
        }
    }

    fn say_left_out(&self, n: u64) {
        tracing::info!(
            server = %self.server,
            "{n} more log messages from MCP server {} suppressed (at most {PER_WINDOW} are \
             logged per {}s)",
            self.server,
            WINDOW.as_secs()
        );
    }

    /// The message as one redacted, inert line of at most [`MESSAGE_MAX_CHARS`] characters.
    fn render(&self, logger: Option<&str>, data: &Value) -> String {
        let body = match data {
            Value::String(s) => self.secrets.redact(s).into_owned(),
            other => {
                let mut v = other.clone();
                self.secrets.redact_json(&mut v);
                v.to_string()
            }
        };
        let text = match logger {
            Some(l) => format!("[{}] {body}", self.secrets.redact(l)),
            None => body,
        };
        let text = crate::model::truncate_marked(&text, MESSAGE_MAX_CHARS);
        crate::text::line(&text).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_window_logs_its_share_then_counts_and_the_next_one_says_how_many_went() {
        let t0 = Instant::now();
        let mut g = Gate::default();
        for _ in 0..PER_WINDOW {
            assert_eq!(g.admit(t0), (true, 0));
        }
        for _ in 0..5 {
            assert_eq!(g.admit(t0 + Duration::from_secs(30)), (false, 0));
        }
        assert_eq!(g.admit(t0 + WINDOW), (true, 5));
        assert_eq!(g.suppressed, 0);
        assert_eq!(g.logged, 1);
    }

    #[test]
    fn a_message_is_redacted_then_cut_to_one_inert_line() {
        let log = ServerLog::new(
            "srv",
            Arc::new(Secrets::new(["toolsecret-QX7-a1b2c3d4e5".to_string()])),
        );
        let text = log.render(
            Some("app"),
            &json!("leak \u{1b}]0;T\u{7}\u{202e} toolsecret-QX7-a1b2c3d4e5\nnext line"),
        );
        assert!(!text.contains("toolsecret"), "{text}");
        assert!(text.contains("[redacted]"), "{text}");
        assert!(
            !text.chars().any(|c| c.is_control() || c == '\u{202e}'),
            "{text:?}"
        );
        let long = log.render(None, &json!({"k": "x".repeat(10_000)}));
        assert!(
            long.chars().count() <= MESSAGE_MAX_CHARS + 20,
            "{}",
            long.len()
        );
        assert!(long.ends_with("…[truncated]"), "{long}");
        // A secret in a structured message, an object key included, is redacted too.
        let obj = log.render(None, &json!({"toolsecret-QX7-a1b2c3d4e5": 1}));
        assert_eq!(obj, r#"{"[redacted]":1}"#);
    }
}

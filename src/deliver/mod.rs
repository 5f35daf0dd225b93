//! Delivery: sending a run's result, an incident alert or a recovery note to the
//! job's sinks — webhooks (`format: json | slack | discord`) and files (one JSON line each) — and
//! incident tracking ([`incident`], so a failing job alerts once, not on every run).
//!
//! Owns: payload shapes, the HTTP POST and the file append, turning failures into text for the
//! row's `delivery_error`. Must not touch: run status (a failed delivery never turns a
//! `succeeded` run into `failed`: the caller keeps the status and records `delivered: false`),
//! the store (the caller commits incident state after delivery), clocks (`now` is passed in).
//!
//! Decisions:
//! - `json` webhooks and file lines carry the history row's fields flattened at the top level
//!   (minus `delivered`/`delivery_error`, which describe this very delivery), plus `kind`
//!   (`result` | `alert` | `recovery`), `text` (what a chat sink would show) and `sent_at`.
//! - Slack gets `{"text": "[job] …"}` cut to 39 000 chars; Discord gets `{"content": "[job] …"}`
//!   cut to 2000 chars (its hard limit), both marked when cut.
//! - Chat text is untrusted (a monitored page, a model reply): it is made inert by the one
//!   policy (`crate::text::visible`: control, bidi and zero-width characters shown escaped), then
//!   Slack's `&`, `<`, `>` are escaped (so `<!channel>` and `<http://evil|your bank>` arrive as
//!   text, not as a mention or a disguised link) and Discord is sent `allowed_mentions:
//!   {"parse": []}` (no `@everyone`, role or user ping fires). The cut is made after escaping and
//!   never splits an entity (`&amp;`).
//! - `json` webhooks and file lines stay raw (machines read them) and carry the run's real
//!   `finished_at` and `duration_ms` (the caller stamps the row before delivering).
//! - Error texts name the sink, never its URL: Slack/Discord webhook URLs are credentials.
//! - Redirects are not followed (the shared client from `action::http::http_client`); a 3xx is a
//!   failed delivery.
//! - A job naming a sink that is not defined gets a delivery error naming it (config validation
//!   should already have refused it).
//! - With several sinks, each is tried; `delivered` is true only when every one succeeded, and
//!   `delivery_error` lists each failure as `sink: error`.

pub mod incident;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::model::{HistoryRow, SinkDef, WebhookFormat, truncate_marked};

/// Discord rejects `content` longer than this.
pub const DISCORD_MAX_CHARS: usize = 2000;
/// Slack truncates messages past 40 000 chars; stay under it.
pub const SLACK_MAX_CHARS: usize = 39_000;
const MARK: &str = "…[truncated]";

/// What is being delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageKind {
    Result,
    Alert,
    Recovery,
    /// An alert about a run that is still going: a tool call awaits an operator's approval.
    /// Its payload is the run as it began (no status, end or outcome: it has none yet) and
    /// `"state": "awaiting_approval"`.
    AwaitingApproval,
}

impl MessageKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MessageKind::Result => "result",
            MessageKind::Alert | MessageKind::AwaitingApproval => "alert",
            MessageKind::Recovery => "recovery",
        }
    }
}

/// The fields of a row that say how a run ended: left out of the payload about a run that is
/// still going, so a reader never takes it for a finished one.
const OUTCOME_FIELDS: [&str; 13] = [
    "status",
    "finished_at",
    "duration_ms",
    "attempts",
    "reason",
    "error",
    "result",
    "model",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "unpriced",
    "attempt_log",
];

/// One delivery: a human text plus the run it is about.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub kind: MessageKind,
    pub job: String,
    /// What chat sinks show (without the `[job]` prefix, which they add).
    pub text: String,
    /// The run this is about; its fields go into `json` and `file` payloads.
    pub row: HistoryRow,
}

impl Message {
    /// A run's result (the row's `result`).
    pub fn result(row: &HistoryRow) -> Message {
        Message {
            kind: MessageKind::Result,
            job: row.job.clone(),
            text: row.result.clone().unwrap_or_default(),
            row: row.clone(),
        }
    }

    /// An incident alert for a failed run.
    pub fn alert(row: &HistoryRow, consecutive_failures: u32) -> Message {
        let why = row
            .error
            .as_deref()
            .or(row.reason.as_deref())
            .unwrap_or("no error text");
        let times = if consecutive_failures == 1 {
            "1 time".to_string()
        } else {
            format!("{consecutive_failures} times in a row")
        };
        Message {
            kind: MessageKind::Alert,
            job: row.job.clone(),
            text: format!("ALERT: {} failed ({times}): {why}", row.job),
            row: row.clone(),
        }
    }

    /// A budget stopped a model call of the job (one per budget period, so a stopped job does not
    /// page on every slot; the caller keeps count). `reason` is the skip reason, which names the
    /// budget.
    pub fn budget(row: &HistoryRow, reason: &str) -> Message {
        let text = if reason.starts_with(crate::cost::BUDGET_TOO_SMALL) {
            // Waiting does not help: the limit cannot pay for one call.
            format!(
                "{reason}; {} makes no model calls until the limit is raised or its agent's \
                 max_tokens lowered",
                row.job
            )
        } else {
            let reason = reason
                .strip_prefix("budget reached: ")
                .or_else(|| reason.strip_prefix("budget exhausted: "))
                .unwrap_or(reason);
            format!(
                "budget reached: {reason}; {} makes no model calls until the budget period ends \
                 or the limit is raised",
                row.job
            )
        };
        Message {
            kind: MessageKind::Alert,
            job: row.job.clone(),
            text,
            row: row.clone(),
        }
    }

    /// A recovery note after an alerted incident.
    pub fn recovery(row: &HistoryRow) -> Message {
        Message {
            kind: MessageKind::Recovery,
            job: row.job.clone(),
            text: format!("RECOVERED: {} succeeded again", row.job),
            row: row.clone(),
        }
    }

    /// The alert or recovery note an incident decision calls for, `None` for nothing.
    #[cfg(test)]
    pub fn for_incident(action: &incident::IncidentAction, row: &HistoryRow) -> Option<Message> {
        match action {
            incident::IncidentAction::Nothing => None,
            incident::IncidentAction::Alert {
                consecutive_failures,
                ..
            } => Some(Message::alert(row, *consecutive_failures)),
            incident::IncidentAction::Recovery => Some(Message::recovery(row)),
        }
    }

    /// The `json` webhook body and the `file` line.
    pub fn json_payload(&self, now: DateTime<Utc>) -> Value {
        let mut v = serde_json::to_value(&self.row).unwrap_or_else(|_| json!({}));
        if let Value::Object(map) = &mut v {
            map.remove("delivered");
            map.remove("delivery_error");
            if self.kind == MessageKind::AwaitingApproval {
                for f in OUTCOME_FIELDS {
                    map.remove(f);
                }
                map.insert("state".into(), json!("awaiting_approval"));
            }
            map.insert("kind".into(), json!(self.kind.as_str()));
            map.insert("text".into(), json!(self.text));
            map.insert("sent_at".into(), json!(now));
        }
        // The row's money as every `--json` output writes it (a sum's binary noise dropped).
        crate::text::round_money(&mut v);
        v
    }

    fn chat_text(&self, max: usize) -> String {
        let full = format!("[{}] {}", self.job, self.text);
        let full = crate::text::visible(&full);
        truncate_marked(&full, max.saturating_sub(MARK.chars().count()))
    }

    /// Slack: inert text with `&`, `<`, `>` escaped, cut without splitting an entity.
    pub fn slack_payload(&self) -> Value {
        let full = format!("[{}] {}", self.job, self.text);
        let escaped = slack_escape(&crate::text::visible(&full));
        json!({ "text": cut_entities(&escaped, SLACK_MAX_CHARS.saturating_sub(MARK.chars().count())) })
    }

    /// Discord: inert text, no mention of any kind allowed to ping.
    pub fn discord_payload(&self) -> Value {
        json!({
            "content": self.chat_text(DISCORD_MAX_CHARS),
            "allowed_mentions": { "parse": [] },
        })
    }
}

/// Slack's three control characters as entities (its documented escaping).
pub fn slack_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

/// [`truncate_marked`] to `max` characters, moved back so it never ends inside an entity.
fn cut_entities(s: &str, max: usize) -> String {
    let Some((idx, _)) = s.char_indices().nth(max) else {
        return s.to_string();
    };
    let mut head = &s[..idx];
    if let Some(amp) = head.rfind('&')
        && !head[amp..].contains(';')
    {
        head = &head[..amp];
    }
    format!("{head}{MARK}")
}

/// Deliver `msg` to one sink. `Err` is the text for `delivery_error` (without the sink name).
pub async fn deliver(
    client: &reqwest::Client,
    sink: &SinkDef,
    msg: &Message,
    timeout: Duration,
    now: DateTime<Utc>,
) -> Result<(), String> {
    match sink {
        SinkDef::Webhook { url, format, .. } => {
            let body = match format {
                WebhookFormat::Json => msg.json_payload(now),
                WebhookFormat::Slack => msg.slack_payload(),
                WebhookFormat::Discord => msg.discord_payload(),
            };
            post_json(client, url, &body, timeout).await
        }
        SinkDef::File { path, .. } => {
            let line = msg.json_payload(now).to_string();
            let path = PathBuf::from(path);
            match tokio::task::spawn_blocking(move || append_line(&path, &line)).await {
                Ok(r) => r,
                Err(e) => Err(format!("file write task failed: {e}")),
            }
        }
    }
}

async fn post_json(
    client: &reqwest::Client,
    url: &str,
    body: &Value,
    timeout: Duration,
) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("invalid webhook URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!(
            "invalid webhook URL: scheme '{}' is not http or https",
            parsed.scheme()
        ));
    }
    let send = async {
        let resp = client
            .post(parsed)
            .json(body)
            .send()
            .await
            .map_err(|e| crate::action::http::error_chain(&e.without_url()))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(());
        }
        let text = resp.text().await.unwrap_or_default();
        let text: String = text
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        Err(format!(
            "HTTP {}: {}",
            status.as_u16(),
            truncate_marked(text.trim(), 200)
        ))
    };
    match tokio::time::timeout(timeout, send).await {
        Ok(r) => r,
        Err(_) => Err(format!(
            "no answer within {}s (delivery timeout)",
            crate::text::secs_words(timeout.as_secs_f64())
        )),
    }
}

/// Append one line (creating parent directories) with a single write, so concurrent appenders
/// (O_APPEND) never interleave within a line.
fn append_line(path: &std::path::Path, line: &str) -> Result<(), String> {
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create directory {}: {e}", dir.display()))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let mut buf = Vec::with_capacity(line.len() + 1);
    buf.extend_from_slice(line.as_bytes());
    buf.push(b'\n');
    f.write_all(&buf)
        .map_err(|e| format!("cannot append to {}: {e}", path.display()))
}

/// The result of delivering to every sink a job names.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DeliveryReport {
    /// At least one sink, and every one succeeded.
    pub delivered: bool,
    /// `sink: error; sink: error` for the row's `delivery_error`, `None` when all succeeded.
    pub error: Option<String>,
    /// Names of the sinks that accepted the message.
    pub ok: Vec<String>,
}

/// Deliver `msg` to each sink named in `names` (looked up in `sinks`, the jobs file's
/// `delivery:`), one after another, each bounded by `timeout`.
pub async fn deliver_all(
    client: &reqwest::Client,
    sinks: &BTreeMap<String, SinkDef>,
    names: &[String],
    msg: &Message,
    timeout: Duration,
    now: DateTime<Utc>,
) -> DeliveryReport {
    let mut errors = Vec::new();
    let mut ok = Vec::new();
    for name in names {
        let res = match sinks.get(name) {
            Some(sink) => deliver(client, sink, msg, timeout, now).await,
            None => Err("no such sink in delivery:".to_string()),
        };
        match res {
            Ok(()) => ok.push(name.clone()),
            Err(e) => errors.push(format!("{name}: {e}")),
        }
    }
    DeliveryReport {
        delivered: !names.is_empty() && errors.is_empty(),
        error: (!errors.is_empty()).then(|| errors.join("; ")),
        ok,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Status, Trigger};

    fn row() -> HistoryRow {
        let t = DateTime::parse_from_rfc3339("2026-11-29T12:00:00Z")
            .unwrap()
            .to_utc();
        let mut r = HistoryRow::new(
            "disk-watch",
            Status::Succeeded,
            Trigger::Schedule,
            Some(t),
            "o",
            t,
        );
        r.result = Some("disk at 91%".into());
        r
    }

    #[test]
    fn payload_shapes() {
        let now = DateTime::parse_from_rfc3339("2026-11-29T12:00:05Z")
            .unwrap()
            .to_utc();
        let m = Message::result(&row());
        let j = m.json_payload(now);
        assert_eq!(j["kind"], "result");
        assert_eq!(j["job"], "disk-watch");
        assert_eq!(j["status"], "succeeded");
        assert_eq!(j["result"], "disk at 91%");
        assert_eq!(j["text"], "disk at 91%");
        assert_eq!(j["sent_at"], "2026-11-29T12:00:05Z");
        assert!(j.get("delivered").is_none());
        assert_eq!(
            m.slack_payload(),
            json!({"text": "[disk-watch] disk at 91%"})
        );
        assert_eq!(
            m.discord_payload(),
            json!({"content": "[disk-watch] disk at 91%", "allowed_mentions": {"parse": []}})
        );
        // About a run still waiting for an operator: an alert that says so, with no outcome.
        let waiting = Message {
            kind: MessageKind::AwaitingApproval,
            text: "APPROVAL NEEDED".into(),
            ..m
        };
        let j = waiting.json_payload(now);
        assert_eq!(j["kind"], "alert");
        assert_eq!(j["state"], "awaiting_approval");
        for f in OUTCOME_FIELDS {
            assert!(j.get(f).is_none(), "{f} in {j}");
        }
        assert_eq!(j["job"], "disk-watch");
        assert!(
            j["run_id"].is_string() && j["started_at"].is_string(),
            "{j}"
        );
    }

    #[test]
    fn chat_payloads_treat_text_as_untrusted() {
        let mut r = row();
        r.result =
            Some("<!channel> @everyone <http://evil|your bank> & \u{202e}txt\u{1b}[2J".into());
        let m = Message::result(&r);
        let slack = m.slack_payload()["text"].as_str().unwrap().to_string();
        assert_eq!(
            slack,
            "[disk-watch] &lt;!channel&gt; @everyone &lt;http://evil|your bank&gt; &amp; \\u{202e}txt^[[2J"
        );
        let d = m.discord_payload();
        assert_eq!(d["allowed_mentions"], json!({"parse": []}));
        assert!(d["content"].as_str().unwrap().contains("@everyone"));
        assert!(!d["content"].as_str().unwrap().contains('\u{202e}'));
        // JSON/file payloads stay raw.
        let j = m.json_payload(r.finished_at);
        assert_eq!(j["result"], r.result.clone().unwrap());
        // A cut never splits an entity.
        r.result = Some("&".repeat(SLACK_MAX_CHARS));
        let s = Message::result(&r).slack_payload()["text"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            s.ends_with(&format!("&amp;{MARK}")),
            "{}",
            &s[s.len() - 30..]
        );
        assert!(s.chars().count() <= SLACK_MAX_CHARS);
    }

    #[test]
    fn discord_content_is_cut_to_2000_chars() {
        let mut r = row();
        r.result = Some("é".repeat(5000));
        let m = Message::result(&r);
        let c = m.discord_payload()["content"].as_str().unwrap().to_string();
        assert_eq!(c.chars().count(), DISCORD_MAX_CHARS);
        assert!(c.ends_with(MARK));
        let s = m.slack_payload()["text"].as_str().unwrap().to_string();
        assert_eq!(s.chars().count(), 5000 + "[disk-watch] ".len());
    }

    #[test]
    fn incident_actions_map_to_messages() {
        use crate::model::IncidentState;
        let mut r = row();
        r.status = Status::Failed;
        r.error = Some("boom".into());
        let d = incident::decide(&IncidentState::default(), Status::Failed, Some("boom"), 1);
        let m = Message::for_incident(&d.action, &r).unwrap();
        assert_eq!(m.kind, MessageKind::Alert);
        let d = incident::decide(&d.on_delivered, Status::Succeeded, None, 1);
        let m = Message::for_incident(&d.action, &row()).unwrap();
        assert_eq!(m.kind, MessageKind::Recovery);
        let d = incident::decide(&d.on_delivered, Status::Succeeded, None, 1);
        assert_eq!(Message::for_incident(&d.action, &row()), None);
    }

    #[test]
    fn alert_and_recovery_texts() {
        let mut r = row();
        r.status = Status::Failed;
        r.error = Some("[exit 1] boom".into());
        assert_eq!(
            Message::alert(&r, 3).text,
            "ALERT: disk-watch failed (3 times in a row): [exit 1] boom"
        );
        assert_eq!(
            Message::alert(&r, 1).text,
            "ALERT: disk-watch failed (1 time): [exit 1] boom"
        );
        assert_eq!(
            Message::recovery(&row()).text,
            "RECOVERED: disk-watch succeeded again"
        );
    }
}

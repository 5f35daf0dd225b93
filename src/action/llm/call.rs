//! One attempt of one LLM call (the request, the key, the reply and its usage, the failure
//! classes), below both the single-prompt action and the tool loop, which import it. The
//! decisions it keeps are written once, in the `llm` module's documentation.
//!
//! Owns: [`call_turn`], [`LlmCall`], [`LlmReply`], [`LlmError`], [`is_silent`], the endpoint
//! and auth headers, the reply cap and the redactor of error texts. Must not touch: the store,
//! budgets, the lease, the price table's contents.

use super::wire;
use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use crate::action::http::error_chain;
use crate::cost::{CacheTokens, TokenUsage};
use crate::model::{AgentDef, Provider};

/// Added by the caller to [`LlmError::RateLimited`]'s `retry_at` to get the job's hold: a
/// margin past the server's own instant, so the next call does not land on the limit's edge.
pub const HOLD_MARGIN: chrono::Duration = chrono::Duration::seconds(60);
/// `Retry-After` values are capped at this many seconds from now.
pub const RETRY_AFTER_CAP_SECS: i64 = 86_400;
/// Anthropic's API version header value.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
const DEFAULT_OPENAI_BASE: &str = "https://api.openai.com/v1";
const DEFAULT_ANTHROPIC_BASE: &str = "https://api.anthropic.com";
const MAX_REPLY_BYTES: usize = 8 * 1024 * 1024;
const ERROR_BODY_CHARS: usize = 300;

/// Why an attempt failed. Texts never contain the API key.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlmError {
    #[error("API key env var {var} is not set (or is empty); no request was made")]
    MissingKey { var: String },
    #[error("API key in env var {var} is not a valid HTTP header value; no request was made")]
    InvalidKey { var: String },
    #[error("bad base_url '{url}': {why}")]
    BadUrl { url: String, why: String },
    #[error("rate limited (HTTP 429, Retry-After: {retry_after}); retry at {retry_at}")]
    RateLimited {
        /// The instant the server asked us to wait until (capped at now + 86 400 s).
        retry_at: DateTime<Utc>,
        /// The raw header value.
        retry_after: String,
    },
    #[error("HTTP {status} from {url}: {body}")]
    Http {
        status: u16,
        url: String,
        body: String,
    },
    #[error("no reply from {url} within {}s (per-attempt timeout)", crate::text::secs_words(*.secs))]
    Timeout { url: String, secs: f64 },
    #[error("request to {url} failed: {message}")]
    Transport {
        url: String,
        message: String,
        /// The request may have reached the server (false: the connection was never made).
        sent: bool,
    },
    #[error("malformed reply from {url}: {message}")]
    Malformed { url: String, message: String },
}

impl LlmError {
    /// Whether another attempt may succeed (see the module doc).
    pub fn is_retryable(&self) -> bool {
        match self {
            LlmError::MissingKey { .. }
            | LlmError::InvalidKey { .. }
            | LlmError::BadUrl { .. }
            | LlmError::RateLimited { .. } => false,
            LlmError::Http { status, .. } => *status >= 500 || *status == 408 || *status == 429,
            LlmError::Timeout { .. } | LlmError::Transport { .. } | LlmError::Malformed { .. } => {
                true
            }
        }
    }

    /// The call surely cost nothing (see the module doc): its budget reservation is released.
    pub fn surely_cost_nothing(&self) -> bool {
        match self {
            LlmError::MissingKey { .. }
            | LlmError::InvalidKey { .. }
            | LlmError::BadUrl { .. }
            | LlmError::RateLimited { .. }
            | LlmError::Http { .. } => true,
            LlmError::Transport { sent, .. } => !sent,
            LlmError::Timeout { .. } | LlmError::Malformed { .. } => false,
        }
    }

    /// For a 429 with a usable `Retry-After`: hold the job until this instant
    /// (`retry_at + HOLD_MARGIN`). The caller applies it.
    pub fn hold_until(&self) -> Option<DateTime<Utc>> {
        match self {
            LlmError::RateLimited { retry_at, .. } => Some(*retry_at + HOLD_MARGIN),
            _ => None,
        }
    }
}

/// The process environment, for production callers of [`call`].
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// A reply that is exactly `NO_REPLY` or `[SILENT]` (after trimming): succeed, deliver nothing.
pub fn is_silent(text: &str) -> bool {
    matches!(text.trim(), "NO_REPLY" | "[SILENT]")
}

/// One LLM call to make.
#[derive(Debug, Clone)]
pub struct LlmCall<'a> {
    pub agent: &'a AgentDef,
    /// The assembled prompt (user message).
    pub prompt: &'a str,
    /// Per-attempt bound (the job's `timeout_seconds`).
    pub timeout: Duration,
    /// Wall time, for turning `Retry-After` into an instant.
    pub now: DateTime<Utc>,
    /// Output bound to send (overrides the agent's `max_tokens`); `None` = the agent's, if any.
    pub max_tokens: Option<u32>,
}

/// The longest model name kept from a reply (real names are far shorter; a hostile endpoint's
/// is cut, marked).
pub const MODEL_MAX_CHARS: usize = 200;

/// A successful reply.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmReply {
    pub text: String,
    /// The model the reply names (else the agent's).
    pub model: String,
    /// Token usage as reported; `None` when the reply had none (the caller marks it unpriced).
    pub usage: Option<TokenUsage>,
    /// Prompt-cache token counts as reported (zero when the reply had none).
    pub cache: CacheTokens,
    /// The tools the model asked to call, in order.
    pub calls: Vec<wire::ToolCall>,
    /// The reply was cut at its token limit (`finish_reason: length`, `stop_reason:
    /// max_tokens`): its tool calls are never dispatched.
    pub cut: bool,
}

/// Make one attempt of a turn: the first prompt, then `dialogue`'s earlier steps, offering
/// its tools.
pub async fn call_turn(
    client: &reqwest::Client,
    req: &LlmCall<'_>,
    dialogue: wire::Dialogue<'_>,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<LlmReply, LlmError> {
    let agent = req.agent;
    let var = agent.api_key_env.as_str();
    let key = match env(var) {
        Some(k) if !k.trim().is_empty() => k.trim().to_string(),
        _ => {
            return Err(LlmError::MissingKey {
                var: var.to_string(),
            });
        }
    };
    let red = Redactor(
        &key,
        crate::text::Secrets::new(crate::text::url_tokens(&agent.base_url)),
    );
    let url = endpoint(agent, env)?;
    let headers = auth_headers(agent, &key)?;
    let body = wire::body(
        agent,
        req.prompt,
        req.max_tokens.or(agent.max_tokens),
        dialogue,
    );
    // Printed and recorded without the operator's path and query (a token is often there).
    let url_s = shown_url(&url);

    let attempt = async {
        let resp = client
            .post(url.clone())
            .headers(headers)
            .json(&body)
            .send()
            .await
            .map_err(|e| {
                let sent = !(e.is_connect() || e.is_builder());
                LlmError::Transport {
                    url: url_s.clone(),
                    message: red.clean(&error_chain(&e.without_url())),
                    sent,
                }
            })?;
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let bytes = read_capped(resp)
            .await
            .map_err(|message| LlmError::Transport {
                url: url_s.clone(),
                message: red.clean(&message),
                sent: true,
            })?;
        Ok::<_, LlmError>((status, retry_after, bytes))
    };
    let (status, retry_after, bytes) = match tokio::time::timeout(req.timeout, attempt).await {
        Ok(r) => r?,
        Err(_) => {
            return Err(LlmError::Timeout {
                url: url_s,
                secs: req.timeout.as_secs_f64(),
            });
        }
    };
    // Logged: where and what, never the key nor the prompt or reply text (logs are read by more
    // people than the jobs file).
    tracing::debug!(
        agent = %agent.name,
        model = %agent.model,
        url = %url_s,
        status,
        "llm attempt answered"
    );
    let Some(bytes) = bytes else {
        return Err(LlmError::Malformed {
            url: url_s,
            message: format!("reply larger than {MAX_REPLY_BYTES} bytes"),
        });
    };

    if status == 429
        && let Some(raw) = &retry_after
        && let Some(retry_at) = parse_retry_after(raw, req.now)
    {
        return Err(LlmError::RateLimited {
            retry_at,
            retry_after: red.clean(raw),
        });
    }
    if !(200..300).contains(&status) {
        return Err(LlmError::Http {
            status,
            url: url_s,
            body: red.clean(&snippet(&bytes)),
        });
    }
    let v: Value = serde_json::from_slice(&bytes).map_err(|e| LlmError::Malformed {
        url: url_s.clone(),
        message: red.clean(&format!("not JSON ({e}); body starts: {}", snippet(&bytes))),
    })?;
    match wire::parse(agent, &v) {
        Ok(p) => Ok(LlmReply {
            text: p.text,
            // The provider's own words: an endpoint that echoes the key (or a token of its
            // URL) in the model it names must not put it on the row, the transcript or a view.
            model: crate::model::truncate_marked(&red.clean(&p.model), MODEL_MAX_CHARS),
            usage: p.usage,
            cache: p.cache,
            calls: p.calls,
            cut: p.cut,
        }),
        Err(message) => Err(LlmError::Malformed {
            url: url_s,
            message: red.clean(&message),
        }),
    }
}

/// The key's header (marked sensitive) and the provider's version header.
fn auth_headers(agent: &AgentDef, key: &str) -> Result<HeaderMap, LlmError> {
    let mut headers = HeaderMap::new();
    let (auth_name, auth_value) = match agent.provider {
        Provider::Openai => ("authorization", format!("Bearer {key}")),
        Provider::Anthropic => ("x-api-key", key.to_string()),
    };
    let mut v = HeaderValue::from_str(&auth_value).map_err(|_| LlmError::InvalidKey {
        var: agent.api_key_env.clone(),
    })?;
    v.set_sensitive(true);
    headers.insert(HeaderName::from_static(auth_name), v);
    if agent.provider == Provider::Anthropic {
        headers.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
    }
    Ok(headers)
}

/// `Retry-After` (delta-seconds or an RFC 1123 HTTP date) → the instant to retry at, capped at
/// `now + 86 400 s`; a date in the past means "now". `None` when unusable.
pub fn parse_retry_after(value: &str, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let v = value.trim();
    let cap = chrono::Duration::seconds(RETRY_AFTER_CAP_SECS);
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        let secs = v
            .parse::<i64>()
            .unwrap_or(i64::MAX)
            .min(RETRY_AFTER_CAP_SECS);
        return Some(now + chrono::Duration::seconds(secs));
    }
    let at = DateTime::parse_from_rfc2822(v).ok()?.to_utc();
    Some(at.clamp(now, now + cap))
}

fn endpoint(
    agent: &AgentDef,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<reqwest::Url, LlmError> {
    let configured = agent.base_url.trim().to_string();
    let from_env = |var: &str, default: &str| {
        env(var)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| default.to_string())
    };
    let base = match (configured.is_empty(), agent.provider) {
        (false, _) => configured,
        (true, Provider::Openai) => from_env("OPENAI_BASE_URL", DEFAULT_OPENAI_BASE),
        (true, Provider::Anthropic) => from_env("ANTHROPIC_BASE_URL", DEFAULT_ANTHROPIC_BASE),
    };
    // The endpoint's path is appended to the base URL's PATH: a query (`?api-version=…`,
    // `?key=…`) stays a query after it, and a fragment is never sent.
    let mut url = reqwest::Url::parse(&base).map_err(|e| LlmError::BadUrl {
        url: crate::text::url_display(&agent.base_url, ""),
        why: e.to_string(),
    })?;
    url.set_fragment(None);
    let path = url.path().trim_end_matches('/').to_string();
    let full = match agent.provider {
        Provider::Openai => format!("{path}/chat/completions"),
        Provider::Anthropic if path.ends_with("/v1") => format!("{path}/messages"),
        Provider::Anthropic => format!("{path}/v1/messages"),
    };
    url.set_path(&full);
    if !matches!(url.scheme(), "http" | "https") {
        return Err(LlmError::BadUrl {
            url: crate::text::url_display(&agent.base_url, ""),
            why: format!("scheme '{}' is not http or https", url.scheme()),
        });
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(LlmError::BadUrl {
            url: "(redacted: contains credentials)".to_string(),
            why: "credentials in base_url are not allowed; use api_key_env".to_string(),
        });
    }
    Ok(url)
}

/// The endpoint as errors and logs show it: scheme, host and port, the operator's path elided,
/// then the path cronsole appends (`http://h:8080/…/chat/completions`).
fn shown_url(url: &reqwest::Url) -> String {
    let path = url.path();
    let suffix = ["/chat/completions", "/v1/messages", "/messages"]
        .into_iter()
        .find(|s| path.ends_with(s))
        .unwrap_or("");
    let base = format!(
        "{}://{}{}{}",
        url.scheme(),
        url.host_str().unwrap_or(""),
        url.port().map(|p| format!(":{p}")).unwrap_or_default(),
        &path[..path.len() - suffix.len()]
    );
    let base = match url.query() {
        Some(q) => format!("{base}?{q}"),
        None => base,
    };
    crate::text::url_display(&base, suffix)
}

/// Read the body up to [`MAX_REPLY_BYTES`]; `Ok(None)` = too large.
async fn read_capped(mut resp: reqwest::Response) -> Result<Option<Vec<u8>>, String> {
    let mut out = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| error_chain(&e))? {
        if out.len() + chunk.len() > MAX_REPLY_BYTES {
            return Ok(None);
        }
        out.extend_from_slice(&chunk);
    }
    Ok(Some(out))
}

fn snippet(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(bytes);
    let s: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    crate::model::truncate_marked(s.trim(), ERROR_BODY_CHARS)
}

/// Replaces the key wherever it appears.
/// Also replaces the tokens `base_url` may carry in its path or query (`text::url_tokens`): an
/// endpoint that echoes its request URL in an error body must not put them in the error.
struct Redactor<'a>(&'a str, crate::text::Secrets);

impl Redactor<'_> {
    fn clean(&self, s: &str) -> String {
        let s = self.1.redact(s);
        if self.0.is_empty() {
            s.into_owned()
        } else {
            s.replace(self.0, "[redacted]")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::http::{HttpOptions, http_client};
    use crate::action::llm::wire::{ANTHROPIC_DEFAULT_MAX_TOKENS, uses_max_completion_tokens};
    use serde_json::json;

    fn request_body(agent: &AgentDef, prompt: &str, max_tokens: Option<u32>) -> Value {
        wire::body(agent, prompt, max_tokens, wire::Dialogue::default())
    }

    fn usage_from(v: &Value, input: &str, output: &str) -> Option<TokenUsage> {
        wire::usage_from(v, input, output)
    }

    use crate::testkit::time::rfc3339 as t;

    #[test]
    fn silent_replies() {
        assert!(is_silent("NO_REPLY"));
        assert!(is_silent("  [SILENT]\n"));
        assert!(!is_silent("NO_REPLY please"));
        assert!(!is_silent("no_reply"));
        assert!(!is_silent(""));
    }

    #[test]
    fn retry_after_seconds_dates_and_caps() {
        let now = t("2026-11-29T12:00:00Z");
        assert_eq!(
            parse_retry_after("120", now),
            Some(t("2026-11-29T12:02:00Z"))
        );
        assert_eq!(parse_retry_after(" 0 ", now), Some(now));
        assert_eq!(
            parse_retry_after("999999999999999999999999", now),
            Some(t("2026-11-30T12:00:00Z"))
        );
        assert_eq!(
            parse_retry_after("Sun, 29 Nov 2026 13:00:00 GMT", now),
            Some(t("2026-11-29T13:00:00Z"))
        );
        assert_eq!(
            parse_retry_after("Tue, 29 Dec 2026 13:00:00 GMT", now),
            Some(t("2026-11-30T12:00:00Z")),
            "capped at 86 400 s"
        );
        assert_eq!(
            parse_retry_after("Sun, 29 Nov 2026 11:00:00 GMT", now),
            Some(now),
            "a past date means now"
        );
        for junk in ["", "soon", "-5", "1.5", "12s"] {
            assert_eq!(parse_retry_after(junk, now), None, "{junk:?}");
        }
    }

    #[test]
    fn hold_adds_sixty_seconds_to_retry_at() {
        let e = LlmError::RateLimited {
            retry_at: t("2026-11-29T12:02:00Z"),
            retry_after: "120".into(),
        };
        assert_eq!(e.hold_until(), Some(t("2026-11-29T12:03:00Z")));
        assert!(!e.is_retryable());
        let plain = LlmError::Http {
            status: 429,
            url: "u".into(),
            body: String::new(),
        };
        assert_eq!(plain.hold_until(), None);
        assert!(plain.is_retryable());
        let auth = LlmError::Http {
            status: 401,
            url: "u".into(),
            body: String::new(),
        };
        assert!(!auth.is_retryable());
    }

    fn agent(provider: Provider, base: &str) -> AgentDef {
        AgentDef {
            name: "a".into(),
            provider,
            base_url: base.into(),
            api_key_env: "K".into(),
            model: "m".into(),
            instructions: "be brief".into(),
            max_tokens: None,
            temperature: Some(0.2),
            tools: Vec::new(),
            approve: Vec::new(),
            limits: Default::default(),
        }
    }

    #[test]
    fn endpoints_and_defaults() {
        let e = |p, b| endpoint(&agent(p, b), &|_| None).map(|u| u.to_string());
        assert_eq!(
            e(Provider::Openai, "").unwrap(),
            "https://api.openai.com/v1/chat/completions"
        );
        assert_eq!(
            e(Provider::Openai, "http://localhost:11434/v1/").unwrap(),
            "http://localhost:11434/v1/chat/completions"
        );
        assert_eq!(
            e(Provider::Anthropic, "").unwrap(),
            "https://api.anthropic.com/v1/messages"
        );
        // An empty base_url follows the providers' own SDK variables when they are set; a
        // configured base_url always wins.
        let env =
            |k: &str| (k == "OPENAI_BASE_URL").then(|| "http://127.0.0.1:11434/v1/".to_string());
        assert_eq!(
            endpoint(&agent(Provider::Openai, ""), &env)
                .unwrap()
                .to_string(),
            "http://127.0.0.1:11434/v1/chat/completions"
        );
        assert_eq!(
            endpoint(&agent(Provider::Openai, "https://api.example.com/v1"), &env)
                .unwrap()
                .to_string(),
            "https://api.example.com/v1/chat/completions"
        );
        assert_eq!(
            e(Provider::Anthropic, "https://api.anthropic.com/v1").unwrap(),
            "https://api.anthropic.com/v1/messages"
        );
        // A query stays a query after the appended path; a fragment is dropped.
        assert_eq!(
            e(Provider::Openai, "http://h/v1?key=X").unwrap(),
            "http://h/v1/chat/completions?key=X"
        );
        assert_eq!(
            e(Provider::Anthropic, "http://h/?v=2#frag").unwrap(),
            "http://h/v1/messages?v=2"
        );
        let shown = |b: &str| shown_url(&endpoint(&agent(Provider::Openai, b), &|_| None).unwrap());
        assert_eq!(
            shown("http://127.0.0.1:1/v1?api_key=QUERYSECRET789"),
            "http://127.0.0.1:1/…/chat/completions"
        );
        assert_eq!(
            shown("http://h/URLPATHSECRET123/v1"),
            "http://h/…/chat/completions"
        );
        assert_eq!(shown("http://h"), "http://h/chat/completions");
        let err = e(Provider::Openai, "ftp://x").unwrap_err();
        assert!(err.to_string().contains("scheme 'ftp'"), "{err}");
        let err = e(Provider::Openai, "not a url").unwrap_err();
        assert!(
            err.to_string().contains("bad base_url '(invalid URL)'"),
            "{err}"
        );
        let err = e(Provider::Openai, "https://user:pw@host/v1").unwrap_err();
        assert!(!err.to_string().contains("pw"), "{err}");
    }

    #[test]
    fn request_bodies_follow_each_wire_format() {
        let mut a = agent(Provider::Openai, "");
        a.max_tokens = Some(50);
        let b = request_body(&a, "hi", a.max_tokens);
        assert_eq!(
            b["messages"][0],
            json!({"role": "system", "content": "be brief"})
        );
        assert_eq!(b["messages"][1], json!({"role": "user", "content": "hi"}));
        assert_eq!(b["max_tokens"], 50);
        assert_eq!(b["temperature"], 0.2);
        let b = request_body(&agent(Provider::Anthropic, ""), "hi", None);
        assert_eq!(b["system"], "be brief");
        assert_eq!(b["max_tokens"], ANTHROPIC_DEFAULT_MAX_TOKENS);
        assert_eq!(b["messages"], json!([{"role": "user", "content": "hi"}]));
    }

    #[test]
    fn reasoning_models_get_max_completion_tokens() {
        for m in [
            "o1",
            "o3-pro",
            "openai/o4-mini",
            "gpt-5",
            "gpt-5-mini-2025-08-07",
            "O3",
        ] {
            assert!(uses_max_completion_tokens(m), "{m}");
            let mut a = agent(Provider::Openai, "");
            a.model = m.into();
            let b = request_body(&a, "hi", Some(4096));
            assert_eq!(b["max_completion_tokens"], 4096, "{m}");
            assert!(b.get("max_tokens").is_none(), "{m}");
        }
        for m in ["gpt-4o", "o1x", "llama3.1:8b", "gpt-4.1-mini", "foo/o10"] {
            assert!(!uses_max_completion_tokens(m), "{m}");
        }
        let a = agent(Provider::Openai, "");
        assert_eq!(request_body(&a, "hi", Some(7))["max_tokens"], 7);
        assert!(request_body(&a, "hi", None).get("max_tokens").is_none());
    }

    #[test]
    fn what_surely_cost_nothing() {
        let t = |sent| LlmError::Transport {
            url: "u".into(),
            message: "m".into(),
            sent,
        };
        assert!(t(false).surely_cost_nothing());
        assert!(!t(true).surely_cost_nothing());
        let http = LlmError::Http {
            status: 500,
            url: "u".into(),
            body: String::new(),
        };
        assert!(http.surely_cost_nothing());
        assert!(
            !LlmError::Timeout {
                url: "u".into(),
                secs: 1.0
            }
            .surely_cost_nothing()
        );
        assert!(LlmError::MissingKey { var: "K".into() }.surely_cost_nothing());
    }

    #[test]
    fn usage_needs_both_counts_and_saturates_huge_ones() {
        let v = json!({"usage": {"prompt_tokens": 5}});
        assert_eq!(usage_from(&v, "prompt_tokens", "completion_tokens"), None);
        let v =
            json!({"usage": {"prompt_tokens": 5, "completion_tokens": 18446744073709551615u64}});
        assert_eq!(
            usage_from(&v, "prompt_tokens", "completion_tokens"),
            Some(TokenUsage {
                input: 5,
                output: i64::MAX
            })
        );
        let v = json!({"usage": {"prompt_tokens": -3, "completion_tokens": 7.0}});
        assert_eq!(
            usage_from(&v, "prompt_tokens", "completion_tokens"),
            Some(TokenUsage {
                input: -3,
                output: 7
            })
        );
    }

    #[test]
    fn the_shared_client_builds_with_the_ring_provider() {
        let c = http_client(&HttpOptions::default());
        assert!(c.is_ok(), "{:?}", c.err());
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }

    proptest::proptest! {
        #[test]
        fn retry_after_is_never_outside_now_and_the_cap(v in "\\PC{0,40}", secs in 0u64..u64::MAX) {
            let now = t("2026-11-29T12:00:00Z");
            let cap = now + chrono::Duration::seconds(RETRY_AFTER_CAP_SECS);
            for raw in [v, secs.to_string()] {
                if let Some(at) = parse_retry_after(&raw, now) {
                    proptest::prop_assert!(at >= now && at <= cap, "{raw:?} → {at}");
                }
            }
        }
    }
}

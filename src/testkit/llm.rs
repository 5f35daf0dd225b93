//! Fake LLM providers for tests, on top of [`super::http::TestServer`]: an OpenAI-compatible
//! `POST …/chat/completions` and an Anthropic `POST /v1/messages`, each answering from a script
//! of replies (ok with/without usage, an error status, 429 with or without `Retry-After`, slow,
//! malformed JSON, tool calls — parallel, cut at the token limit, with malformed or truncated
//! arguments, to invented names —, prompt-cache usage, a reply repeated forever for a model
//! that never stops) and counting requests. Process tests point the real binary at it.
//!
//! Owns: the two wire formats as a server sees them. Must not touch: production code (tests point
//! the real `action::llm` client at these servers).
//!
//! The fakes check authentication like the real services: OpenAI wants `Authorization: Bearer
//! KEY`, Anthropic wants `x-api-key: KEY` and `anthropic-version: 2023-06-01`; a mismatch answers
//! 401/400 so a test that sends the wrong header fails loudly. When the script runs out, every
//! further request gets a 500 "script exhausted".

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use super::http::{Request, Response, TestServer};

/// Which wire format the fake speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    OpenAi,
    Anthropic,
}

/// One scripted reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// 200 with this text; `usage` = (input, output) tokens, `None` = no usage object at all.
    Ok {
        text: String,
        usage: Option<(i64, i64)>,
    },
    /// Any status with a plain-text body.
    Status(u16, String),
    /// 429, with this `Retry-After` header value when given.
    RateLimited(Option<String>),
    /// Wait `delay` before answering with the inner reply.
    Slow(Duration, Box<Reply>),
    /// 200 with a body that is not the provider's JSON.
    Malformed,
    /// The inner reply, naming this model instead of the requested one (a router's pick, or
    /// a server lying about what it ran).
    AsModel(String, Box<Reply>),
    /// 200 asking for tool calls (in this order), beside `text`; `cut` marks the reply as cut
    /// at its token limit (`finish_reason: length`, `stop_reason: max_tokens`).
    Tools {
        text: String,
        calls: Vec<FakeCall>,
        usage: Option<(i64, i64)>,
        cut: bool,
    },
    /// 200 with this text and usage, plus prompt-cache counts: (OpenAI `cached_tokens` or
    /// Anthropic `cache_read_input_tokens`, Anthropic `cache_creation_input_tokens`).
    Cached {
        text: String,
        usage: (i64, i64),
        cache: (i64, i64),
    },
    /// The inner reply, to this request and every later one (a model that never stops).
    Forever(Box<Reply>),
}

/// One tool call a scripted reply makes.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeCall {
    /// The tool's wire name (may name nothing offered).
    pub name: String,
    /// The arguments: `Ok` an object (a JSON string for OpenAI, an object for Anthropic), `Err`
    /// this raw text as is (malformed or truncated JSON).
    pub args: Result<serde_json::Value, String>,
}

impl FakeCall {
    /// A call to `name` with `args` (an object).
    pub fn new(name: &str, args: serde_json::Value) -> FakeCall {
        FakeCall {
            name: name.to_string(),
            args: Ok(args),
        }
    }

    /// A call to `name` whose arguments are this raw text.
    pub fn raw(name: &str, raw: &str) -> FakeCall {
        FakeCall {
            name: name.to_string(),
            args: Err(raw.to_string()),
        }
    }
}

impl Reply {
    pub fn ok(text: &str, input: i64, output: i64) -> Reply {
        Reply::Ok {
            text: text.to_string(),
            usage: Some((input, output)),
        }
    }

    pub fn ok_without_usage(text: &str) -> Reply {
        Reply::Ok {
            text: text.to_string(),
            usage: None,
        }
    }

    /// Tool calls with usage (input, output).
    pub fn tools(calls: Vec<FakeCall>, input: i64, output: i64) -> Reply {
        Reply::Tools {
            text: String::new(),
            calls,
            usage: Some((input, output)),
            cut: false,
        }
    }
}

/// A running fake provider.
pub struct FakeLlm {
    server: TestServer,
    flavor: Flavor,
}

impl FakeLlm {
    /// Start a fake of `flavor` that accepts `key` and answers `script` in order.
    pub async fn start(flavor: Flavor, key: &str, script: Vec<Reply>) -> std::io::Result<FakeLlm> {
        let script = Arc::new(Mutex::new(VecDeque::from(script)));
        let key = key.to_string();
        let server = TestServer::start(move |req| {
            if let Some(resp) = check_request(flavor, &key, req) {
                return resp;
            }
            let next = {
                let mut s = script.lock().unwrap_or_else(|e| e.into_inner());
                let next = s.pop_front();
                if let Some(Reply::Forever(r)) = &next {
                    s.push_front(Reply::Forever(r.clone()));
                }
                next
            };
            match next {
                Some(reply) => render(flavor, req, reply),
                None => Response::text(500, "fake llm: script exhausted"),
            }
        })
        .await?;
        Ok(FakeLlm { server, flavor })
    }

    pub async fn openai(key: &str, script: Vec<Reply>) -> std::io::Result<FakeLlm> {
        FakeLlm::start(Flavor::OpenAi, key, script).await
    }

    pub async fn anthropic(key: &str, script: Vec<Reply>) -> std::io::Result<FakeLlm> {
        FakeLlm::start(Flavor::Anthropic, key, script).await
    }

    /// The `base_url` an agent should use: `http://127.0.0.1:PORT/v1` for OpenAI (like
    /// `https://api.openai.com/v1`), `http://127.0.0.1:PORT` for Anthropic.
    pub fn base_url(&self) -> String {
        match self.flavor {
            Flavor::OpenAi => format!("{}/v1", self.server.url()),
            Flavor::Anthropic => self.server.url(),
        }
    }

    pub fn request_count(&self) -> usize {
        self.server.request_count()
    }

    pub fn requests(&self) -> Vec<Request> {
        self.server.requests()
    }
}

/// Authentication and routing like the real service; `Some` = reject before the script.
fn check_request(flavor: Flavor, key: &str, req: &Request) -> Option<Response> {
    if req.method != "POST" {
        return Some(Response::text(405, "method not allowed"));
    }
    match flavor {
        Flavor::OpenAi => {
            if !req.path.ends_with("/chat/completions") {
                return Some(Response::text(404, "no such route"));
            }
            if req.header("authorization") != Some(&format!("Bearer {key}")) {
                return Some(Response::json(
                    401,
                    &json!({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}),
                ));
            }
        }
        Flavor::Anthropic => {
            if req.path != "/v1/messages" {
                return Some(Response::text(404, "no such route"));
            }
            if req.header("x-api-key") != Some(key) {
                return Some(Response::json(
                    401,
                    &json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}),
                ));
            }
            if req.header("anthropic-version") != Some("2023-06-01") {
                return Some(Response::json(
                    400,
                    &json!({"type": "error", "error": {"type": "invalid_request_error", "message": "anthropic-version header is required"}}),
                ));
            }
        }
    }
    None
}

fn render(flavor: Flavor, req: &Request, reply: Reply) -> Response {
    let model = req
        .json()
        .and_then(|v| v.get("model").and_then(|m| m.as_str()).map(str::to_string))
        .unwrap_or_else(|| "unknown".to_string());
    render_as(flavor, model, reply)
}

fn render_as(flavor: Flavor, model: String, reply: Reply) -> Response {
    match reply {
        Reply::Ok { text, usage } => {
            let body = match flavor {
                Flavor::OpenAi => {
                    let mut v = json!({
                        "id": "chatcmpl-fake",
                        "object": "chat.completion",
                        "model": model,
                        "choices": [{
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop"
                        }]
                    });
                    if let Some((i, o)) = usage {
                        v["usage"] = json!({
                            "prompt_tokens": i,
                            "completion_tokens": o,
                            "total_tokens": i.saturating_add(o)
                        });
                    }
                    v
                }
                Flavor::Anthropic => {
                    let mut v = json!({
                        "id": "msg_fake",
                        "type": "message",
                        "role": "assistant",
                        "model": model,
                        "content": [{"type": "text", "text": text}],
                        "stop_reason": "end_turn"
                    });
                    if let Some((i, o)) = usage {
                        v["usage"] = json!({"input_tokens": i, "output_tokens": o});
                    }
                    v
                }
            };
            Response::json(200, &body)
        }
        Reply::Status(code, body) => Response::text(code, &body),
        Reply::RateLimited(after) => {
            let r = Response::json(
                429,
                &json!({"error": {"message": "rate limited", "type": "rate_limit_error"}}),
            );
            match after {
                Some(a) => r.header("retry-after", &a),
                None => r,
            }
        }
        Reply::Slow(d, inner) => render_as(flavor, model, *inner).delay(d),
        Reply::Forever(inner) => render_as(flavor, model, *inner),
        Reply::Tools {
            text,
            calls,
            usage,
            cut,
        } => Response::json(200, &tool_body(flavor, &model, &text, &calls, usage, cut)),
        Reply::Cached { text, usage, cache } => {
            let plain = render_as(flavor, model, Reply::ok(&text, usage.0, usage.1)).body;
            let mut v: serde_json::Value = serde_json::from_slice(&plain).unwrap_or_default();
            match flavor {
                Flavor::OpenAi => {
                    v["usage"]["prompt_tokens_details"] = json!({"cached_tokens": cache.0});
                }
                Flavor::Anthropic => {
                    v["usage"]["cache_read_input_tokens"] = json!(cache.0);
                    v["usage"]["cache_creation_input_tokens"] = json!(cache.1);
                }
            }
            Response::json(200, &v)
        }
        Reply::AsModel(m, inner) => render_as(flavor, m, *inner),
        Reply::Malformed => Response::text(200, "<html>this is not json</html>")
            .header("content-type", "application/json"),
    }
}

/// A reply asking for tool calls, in `flavor`'s format; ids are `call_N` / `toolu_N`.
fn tool_body(
    flavor: Flavor,
    model: &str,
    text: &str,
    calls: &[FakeCall],
    usage: Option<(i64, i64)>,
    cut: bool,
) -> serde_json::Value {
    match flavor {
        Flavor::OpenAi => {
            let tool_calls: Vec<serde_json::Value> = calls
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let args = match &c.args {
                        Ok(v) => v.to_string(),
                        Err(raw) => raw.clone(),
                    };
                    json!({"id": format!("call_{i}"), "type": "function",
                           "function": {"name": c.name, "arguments": args}})
                })
                .collect();
            let content = if text.is_empty() {
                serde_json::Value::Null
            } else {
                json!(text)
            };
            let mut v = json!({
                "id": "chatcmpl-fake", "object": "chat.completion", "model": model,
                "choices": [{"index": 0,
                    "message": {"role": "assistant", "content": content, "tool_calls": tool_calls},
                    "finish_reason": if cut { "length" } else { "tool_calls" }}]
            });
            if let Some((i, o)) = usage {
                v["usage"] = json!({"prompt_tokens": i, "completion_tokens": o,
                                    "total_tokens": i.saturating_add(o)});
            }
            v
        }
        Flavor::Anthropic => {
            let mut content = Vec::new();
            if !text.is_empty() {
                content.push(json!({"type": "text", "text": text}));
            }
            for (i, c) in calls.iter().enumerate() {
                let input = match &c.args {
                    Ok(v) => v.clone(),
                    Err(raw) => json!(raw),
                };
                content.push(json!({"type": "tool_use", "id": format!("toolu_{i}"),
                                    "name": c.name, "input": input}));
            }
            let mut v = json!({
                "id": "msg_fake", "type": "message", "role": "assistant", "model": model,
                "content": content,
                "stop_reason": if cut { "max_tokens" } else { "tool_use" }
            });
            if let Some((i, o)) = usage {
                v["usage"] = json!({"input_tokens": i, "output_tokens": o});
            }
            v
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn openai_fake_answers_its_script_then_500() {
        let fake = FakeLlm::openai("k1", vec![Reply::ok("hi", 3, 4)])
            .await
            .unwrap();
        let c = reqwest::Client::builder().no_proxy().build().unwrap();
        let url = format!("{}/chat/completions", fake.base_url());
        let r = c
            .post(&url)
            .bearer_auth("k1")
            .json(&json!({"model": "m"}))
            .send()
            .await
            .unwrap();
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["choices"][0]["message"]["content"], "hi");
        assert_eq!(v["usage"]["prompt_tokens"], 3);
        assert_eq!(v["model"], "m");
        let r = c.post(&url).bearer_auth("k1").send().await.unwrap();
        assert_eq!(r.status().as_u16(), 500);
        let r = c.post(&url).bearer_auth("wrong").send().await.unwrap();
        assert_eq!(r.status().as_u16(), 401);
        assert_eq!(fake.request_count(), 3);
    }

    #[tokio::test]
    async fn anthropic_fake_requires_key_and_version() {
        let fake = FakeLlm::anthropic("k2", vec![Reply::ok_without_usage("yo")])
            .await
            .unwrap();
        let c = reqwest::Client::builder().no_proxy().build().unwrap();
        let url = format!("{}/v1/messages", fake.base_url());
        let r = c.post(&url).header("x-api-key", "k2").send().await.unwrap();
        assert_eq!(r.status().as_u16(), 400, "missing anthropic-version");
        let r = c
            .post(&url)
            .header("x-api-key", "k2")
            .header("anthropic-version", "2023-06-01")
            .send()
            .await
            .unwrap();
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["content"][0]["text"], "yo");
        assert!(v.get("usage").is_none());
    }
}

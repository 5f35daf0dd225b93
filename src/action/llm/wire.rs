//! The two chat wire formats, request and reply, with tools: OpenAI-compatible chat completions
//! (`tools`, `tool_calls`, `role: tool`) and Anthropic messages (`tools`, `tool_use`,
//! `tool_result`).
//!
//! Owns: the provider-neutral conversation ([`Dialogue`]: the model's earlier turns and the
//! tool results it was given), turning it into each provider's request body, reading a reply
//! (text, tool calls, whether it was cut at its token limit, usage with its prompt-cache
//! classes), and the byte weight of a request's prompt that budgets reserve for. Must not
//! touch: HTTP (the caller sends), tools themselves (it only names what was offered), prices.
//!
//! Decisions where the providers differ or are silent:
//! - Arguments arrive as a JSON string (OpenAI, vLLM) or as an object (Ollama, Anthropic): both
//!   are accepted; an empty string means no arguments (`{}`). Anything that is not a JSON
//!   object is kept as the model sent it, and the call is answered with an error result.
//! - A call with no id, or with an id already used in the same reply (some local servers send
//!   none), gets `call_N` (N its position), so every result answers exactly one call.
//! - Results of one turn go back in the order the calls came: one `role: tool` message each
//!   (OpenAI), all `tool_result` blocks in one user message (Anthropic). OpenAI has no error
//!   flag on a result: the text itself says it is an error.
//! - `finish_reason: length` (OpenAI) and `stop_reason: max_tokens` (Anthropic) mark the reply
//!   as cut at its token limit.

use serde_json::{Map, Value, json};

use crate::action::tools::OfferedTool;
use crate::cost::{CacheTokens, TokenUsage};
use crate::model::{AgentDef, Provider, definition_json};

/// `max_tokens` sent to Anthropic when neither the call nor the agent sets one (the API requires
/// one): the same bound a budget reserves for.
pub const ANTHROPIC_DEFAULT_MAX_TOKENS: u32 = crate::cost::DEFAULT_MAX_TOKENS;

/// OpenAI models that reject `max_tokens` and take `max_completion_tokens` (reasoning models and
/// the GPT-5 family), by the name after any provider prefix.
pub fn uses_max_completion_tokens(model: &str) -> bool {
    let m = model.trim().to_ascii_lowercase();
    let m = m.rsplit('/').next().unwrap_or(&m);
    let family = |p: &str| {
        m.strip_prefix(p)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(['-', '.', ':']))
    };
    family("o1") || family("o3") || family("o4") || m.starts_with("gpt-5")
}

/// One tool call a model asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The call's id (the provider's, else `call_N`).
    pub id: String,
    /// The tool name the model used (a wire name, which may name nothing offered).
    pub name: String,
    /// The arguments as the model sent them (a JSON text).
    pub raw_args: String,
    /// The arguments as a JSON object, or why they are not one.
    pub args: Result<Map<String, Value>, String>,
}

/// What one call returned, as the model is told.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// The id of the call it answers.
    pub call_id: String,
    /// The text the model sees (already capped and redacted by the loop).
    pub text: String,
    /// The call failed (or was refused): the model is told so.
    pub is_error: bool,
}

/// One step of a conversation after the first user prompt.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// A model's reply that asked for tools.
    Assistant {
        /// The text it wrote beside its calls.
        text: String,
        /// Its calls, in order.
        calls: Vec<ToolCall>,
    },
    /// The results of the previous reply's calls, in the order of the calls.
    Results(Vec<ToolResult>),
}

/// What a request sends beyond the system instructions and the first prompt.
#[derive(Debug, Clone, Copy, Default)]
pub struct Dialogue<'a> {
    /// The conversation so far.
    pub steps: &'a [Step],
    /// The tools offered (empty: the request carries no `tools`).
    pub tools: &'a [OfferedTool],
}

/// A reply read from either format.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    pub text: String,
    pub model: String,
    pub usage: Option<TokenUsage>,
    pub cache: CacheTokens,
    pub calls: Vec<ToolCall>,
    pub cut: bool,
}

/// The request body for `agent`'s provider.
pub fn body(
    agent: &AgentDef,
    prompt: &str,
    max_tokens: Option<u32>,
    dialogue: Dialogue<'_>,
) -> Value {
    match agent.provider {
        Provider::Openai => {
            let mut messages = Vec::new();
            if !agent.instructions.is_empty() {
                messages.push(json!({"role": "system", "content": agent.instructions}));
            }
            messages.push(json!({"role": "user", "content": prompt}));
            for step in dialogue.steps {
                openai_step(step, &mut messages);
            }
            let mut b = json!({"model": agent.model, "messages": messages});
            if !dialogue.tools.is_empty() {
                b["tools"] = dialogue.tools.iter().map(openai_tool).collect();
            }
            if let Some(m) = max_tokens {
                let field = if uses_max_completion_tokens(&agent.model) {
                    "max_completion_tokens"
                } else {
                    "max_tokens"
                };
                b[field] = json!(m);
            }
            if let Some(t) = agent.temperature {
                b["temperature"] = json!(t);
            }
            b
        }
        Provider::Anthropic => {
            let mut messages = vec![json!({"role": "user", "content": prompt})];
            messages.extend(dialogue.steps.iter().map(anthropic_step));
            let mut b = json!({
                "model": agent.model,
                "max_tokens": max_tokens.unwrap_or(ANTHROPIC_DEFAULT_MAX_TOKENS),
                "messages": messages,
            });
            if !dialogue.tools.is_empty() {
                b["tools"] = dialogue.tools.iter().map(anthropic_tool).collect();
            }
            if !agent.instructions.is_empty() {
                b["system"] = json!(agent.instructions);
            }
            if let Some(t) = agent.temperature {
                b["temperature"] = json!(t);
            }
            b
        }
    }
}

fn openai_tool(t: &OfferedTool) -> Value {
    definition_json(
        Provider::Openai,
        &t.wire_name,
        &t.def.description,
        &t.def.input_schema,
    )
}

fn anthropic_tool(t: &OfferedTool) -> Value {
    definition_json(
        Provider::Anthropic,
        &t.wire_name,
        &t.def.description,
        &t.def.input_schema,
    )
}

fn openai_step(step: &Step, messages: &mut Vec<Value>) {
    match step {
        Step::Assistant { text, calls } => {
            let mut m = json!({"role": "assistant", "content": text});
            if text.is_empty() && !calls.is_empty() {
                m["content"] = Value::Null;
            }
            if !calls.is_empty() {
                m["tool_calls"] = calls
                    .iter()
                    .map(|c| {
                        json!({"id": c.id, "type": "function", "function": {
                            "name": c.name,
                            "arguments": c.raw_args,
                        }})
                    })
                    .collect();
            }
            messages.push(m);
        }
        Step::Results(results) => {
            for r in results {
                messages
                    .push(json!({"role": "tool", "tool_call_id": r.call_id, "content": r.text}));
            }
        }
    }
}

fn anthropic_step(step: &Step) -> Value {
    match step {
        Step::Assistant { text, calls } => {
            let mut blocks = Vec::new();
            if !text.is_empty() {
                blocks.push(json!({"type": "text", "text": text}));
            }
            for c in calls {
                // The provider wants an object: what could not be read goes back as `{}`, beside
                // the error result that says why.
                let input = c.args.clone().unwrap_or_default();
                blocks
                    .push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}));
            }
            json!({"role": "assistant", "content": blocks})
        }
        Step::Results(results) => {
            let blocks: Vec<Value> = results
                .iter()
                .map(|r| {
                    let mut b =
                        json!({"type": "tool_result", "tool_use_id": r.call_id, "content": r.text});
                    if r.is_error {
                        b["is_error"] = json!(true);
                    }
                    b
                })
                .collect();
            json!({"role": "user", "content": blocks})
        }
    }
}

/// Bytes a request sends the model as input: the instructions and the first prompt, plus the
/// JSON of every later step and of every tool definition as the request carries them. Every
/// tokenizer in use emits at most one token per byte, so this bounds the input tokens (with
/// the framing allowance `crate::cost` adds).
pub fn prompt_bytes(agent: &AgentDef, prompt: &str, dialogue: Dialogue<'_>) -> usize {
    let mut n = agent.instructions.len() + prompt.len();
    if dialogue.steps.is_empty() && dialogue.tools.is_empty() {
        return n;
    }
    let mut steps = Vec::new();
    match agent.provider {
        Provider::Openai => {
            for s in dialogue.steps {
                openai_step(s, &mut steps);
            }
            n += dialogue
                .tools
                .iter()
                .map(|t| json_len(&openai_tool(t)))
                .sum::<usize>();
        }
        Provider::Anthropic => {
            steps.extend(dialogue.steps.iter().map(anthropic_step));
            n += dialogue
                .tools
                .iter()
                .map(|t| json_len(&anthropic_tool(t)))
                .sum::<usize>();
        }
    }
    n + steps.iter().map(json_len).sum::<usize>()
}

/// Bytes the definitions of `tools` weigh in a request (what `describe` and `dry-run` show).
pub fn tools_bytes(provider: Provider, tools: &[OfferedTool]) -> usize {
    tools
        .iter()
        .map(|t| match provider {
            Provider::Openai => json_len(&openai_tool(t)),
            Provider::Anthropic => json_len(&anthropic_tool(t)),
        })
        .sum()
}

fn json_len(v: &Value) -> usize {
    v.to_string().len()
}

/// Read a 2xx reply body.
pub fn parse(agent: &AgentDef, v: &Value) -> Result<Parsed, String> {
    let model = v
        .get("model")
        .and_then(Value::as_str)
        .filter(|m| !m.trim().is_empty())
        .unwrap_or(&agent.model)
        .to_string();
    match agent.provider {
        Provider::Openai => parse_openai(v, model),
        Provider::Anthropic => parse_anthropic(v, model),
    }
}

fn parse_openai(v: &Value, model: String) -> Result<Parsed, String> {
    let message = v
        .pointer("/choices/0/message")
        .ok_or("no choices[0].message in the reply")?;
    let calls = match message.get("tool_calls") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items.iter().map(openai_call).collect(),
        Some(other) => return Err(format!("choices[0].message.tool_calls is {other}")),
    };
    let text = match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        // Some compatible servers send content parts.
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        Some(Value::Null) => String::new(),
        // A reply that only calls tools may leave the content out.
        None if !calls.is_empty() => String::new(),
        None => return Err("no choices[0].message.content in the reply".into()),
        Some(other) => return Err(format!("choices[0].message.content is {other}")),
    };
    let cut = v
        .pointer("/choices/0/finish_reason")
        .and_then(Value::as_str)
        == Some("length");
    let cache = CacheTokens {
        cached_input: v
            .pointer("/usage/prompt_tokens_details/cached_tokens")
            .and_then(token_count)
            .unwrap_or(0),
        ..CacheTokens::default()
    };
    Ok(Parsed {
        text,
        model,
        usage: usage_from(v, "prompt_tokens", "completion_tokens"),
        cache,
        calls: unique_ids(calls),
        cut,
    })
}

fn openai_call(c: &Value) -> ToolCall {
    let f = c.get("function").unwrap_or(&Value::Null);
    ToolCall {
        id: str_of(c.get("id")),
        name: str_of(f.get("name")),
        raw_args: raw_args(f.get("arguments")),
        args: args_of(f.get("arguments")),
    }
}

fn parse_anthropic(v: &Value, model: String) -> Result<Parsed, String> {
    let blocks = v
        .get("content")
        .and_then(Value::as_array)
        .ok_or("no content array in the reply")?;
    let text = blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("");
    let calls = blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
        .map(|b| ToolCall {
            id: str_of(b.get("id")),
            name: str_of(b.get("name")),
            raw_args: raw_args(b.get("input")),
            args: args_of(b.get("input")),
        })
        .collect();
    let cut = v.get("stop_reason").and_then(Value::as_str) == Some("max_tokens");
    let count = |k: &str| {
        v.pointer(&format!("/usage/{k}"))
            .and_then(token_count)
            .unwrap_or(0)
    };
    let cache = CacheTokens {
        cache_read: count("cache_read_input_tokens"),
        cache_write: count("cache_creation_input_tokens"),
        ..CacheTokens::default()
    };
    Ok(Parsed {
        text,
        model,
        usage: usage_from(v, "input_tokens", "output_tokens"),
        cache,
        calls: unique_ids(calls),
        cut,
    })
}

fn str_of(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// The arguments as a JSON text, whichever form they came in.
fn raw_args(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// The arguments as an object: a JSON text holding one, or one as is; `""` and absent are `{}`.
fn args_of(v: Option<&Value>) -> Result<Map<String, Value>, String> {
    let parsed = match v {
        None | Some(Value::Null) => return Ok(Map::new()),
        Some(Value::String(s)) if s.trim().is_empty() => return Ok(Map::new()),
        Some(Value::String(s)) => serde_json::from_str::<Value>(s)
            .map_err(|e| format!("the arguments are not valid JSON ({e})"))?,
        Some(other) => other.clone(),
    };
    match parsed {
        Value::Object(m) => Ok(m),
        other => Err(format!(
            "the arguments must be a JSON object, not {}",
            kind_of(&other)
        )),
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Every call gets an id of its own in its reply (`call_N` for a missing or repeated one).
fn unique_ids(mut calls: Vec<ToolCall>) -> Vec<ToolCall> {
    let mut seen = std::collections::HashSet::new();
    for (i, c) in calls.iter_mut().enumerate() {
        if c.id.trim().is_empty() || !seen.insert(c.id.clone()) {
            let mut n = i;
            loop {
                let id = format!("call_{n}");
                if seen.insert(id.clone()) {
                    c.id = id;
                    break;
                }
                n += 1000;
            }
        }
    }
    calls
}

/// Both counts or nothing: a half-reported usage is not a price we can trust.
pub(super) fn usage_from(v: &Value, input: &str, output: &str) -> Option<TokenUsage> {
    let u = v.get("usage")?;
    Some(TokenUsage {
        input: token_count(u.get(input)?)?,
        output: token_count(u.get(output)?)?,
    })
}

/// An integer-ish JSON number; out-of-range values saturate (cost clamps them to 0 later).
fn token_count(v: &Value) -> Option<i64> {
    if let Some(i) = v.as_i64() {
        return Some(i);
    }
    if v.as_u64().is_some() {
        return Some(i64::MAX);
    }
    let f = v.as_f64()?;
    f.is_finite().then_some(f as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::tools::ToolDef;

    fn agent(provider: Provider) -> AgentDef {
        AgentDef {
            name: "a".into(),
            provider,
            base_url: String::new(),
            api_key_env: "K".into(),
            model: "m".into(),
            instructions: "be brief".into(),
            max_tokens: None,
            temperature: None,
            tools: Vec::new(),
            approve: Vec::new(),
            limits: Default::default(),
        }
    }

    fn offered(name: &str) -> OfferedTool {
        let def = ToolDef {
            name: name.into(),
            description: "Reads a file".into(),
            input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
            output_schema: None,
        };
        OfferedTool {
            wire_name: format!("files__{name}"),
            qualified: format!("files.{name}"),
            source: 0,
            hash: def.definition_hash(),
            def,
        }
    }

    fn call(id: &str, args: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "files__read_file".into(),
            raw_args: args.into(),
            args: args_of(Some(&json!(args))),
        }
    }

    fn dialogue_steps() -> Vec<Step> {
        vec![
            Step::Assistant {
                text: String::new(),
                calls: vec![call("c1", r#"{"path":"a"}"#), call("c2", "not json")],
            },
            Step::Results(vec![
                ToolResult {
                    call_id: "c1".into(),
                    text: "alpha".into(),
                    is_error: false,
                },
                ToolResult {
                    call_id: "c2".into(),
                    text: "error: bad arguments".into(),
                    is_error: true,
                },
            ]),
        ]
    }

    #[test]
    fn openai_requests_carry_tools_calls_and_one_tool_message_per_result_in_order() {
        let tools = [offered("read_file")];
        let steps = dialogue_steps();
        let d = Dialogue {
            steps: &steps,
            tools: &tools,
        };
        let b = body(&agent(Provider::Openai), "go", Some(100), d);
        assert_eq!(b["tools"][0]["type"], "function");
        assert_eq!(b["tools"][0]["function"]["name"], "files__read_file");
        assert_eq!(b["tools"][0]["function"]["parameters"]["type"], "object");
        let m = b["messages"].as_array().unwrap();
        assert_eq!(m.len(), 5, "{m:?}");
        assert_eq!(m[2]["role"], "assistant");
        assert_eq!(m[2]["content"], Value::Null);
        assert_eq!(m[2]["tool_calls"][0]["id"], "c1");
        assert_eq!(
            m[2]["tool_calls"][0]["function"]["arguments"],
            r#"{"path":"a"}"#
        );
        assert_eq!(m[2]["tool_calls"][1]["function"]["arguments"], "not json");
        assert_eq!(
            m[3],
            json!({"role": "tool", "tool_call_id": "c1", "content": "alpha"})
        );
        assert_eq!(m[4]["tool_call_id"], "c2");
        // No tools offered: no `tools` key at all (today's requests, byte for byte).
        let b = body(&agent(Provider::Openai), "go", None, Dialogue::default());
        assert!(b.get("tools").is_none());
    }

    #[test]
    fn anthropic_requests_put_every_result_of_a_turn_in_one_user_message() {
        let tools = [offered("read_file")];
        let steps = dialogue_steps();
        let d = Dialogue {
            steps: &steps,
            tools: &tools,
        };
        let b = body(&agent(Provider::Anthropic), "go", None, d);
        assert_eq!(b["tools"][0]["name"], "files__read_file");
        assert_eq!(b["tools"][0]["input_schema"]["type"], "object");
        let m = b["messages"].as_array().unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!(m[1]["role"], "assistant");
        assert_eq!(m[1]["content"][0]["type"], "tool_use");
        assert_eq!(m[1]["content"][0]["input"], json!({"path": "a"}));
        assert_eq!(
            m[1]["content"][1]["input"],
            json!({}),
            "unreadable arguments go back as {{}}"
        );
        assert_eq!(m[2]["role"], "user");
        let blocks = m[2]["content"].as_array().unwrap();
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[0]["tool_use_id"], "c1");
        assert!(blocks[0].get("is_error").is_none());
        assert_eq!(blocks[1]["is_error"], true);
    }

    #[test]
    fn arguments_come_as_a_string_or_an_object() {
        assert_eq!(args_of(Some(&json!(r#"{"a":1}"#))).unwrap()["a"], 1);
        assert_eq!(args_of(Some(&json!({"a": 1}))).unwrap()["a"], 1);
        assert!(args_of(Some(&json!(""))).unwrap().is_empty());
        assert!(args_of(None).unwrap().is_empty());
        let e = args_of(Some(&json!(r#"{"a": 1"#))).unwrap_err();
        assert!(e.starts_with("the arguments are not valid JSON"), "{e}");
        let e = args_of(Some(&json!("[1, 2]"))).unwrap_err();
        assert_eq!(e, "the arguments must be a JSON object, not an array");
        assert_eq!(raw_args(Some(&json!({"a": 1}))), r#"{"a":1}"#);
    }

    #[test]
    fn openai_replies_with_parallel_calls_cut_replies_and_cached_tokens() {
        let v = json!({
            "model": "gpt-4o-mini",
            "choices": [{"message": {"role": "assistant", "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "x", "arguments": "{\"p\":1}"}},
                {"id": "a", "type": "function", "function": {"name": "y", "arguments": {"q": 2}}},
                {"type": "function", "function": {"name": "z"}}
            ]}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 20,
                      "prompt_tokens_details": {"cached_tokens": 800}}
        });
        let p = parse(&agent(Provider::Openai), &v).unwrap();
        assert_eq!(p.text, "");
        assert!(!p.cut);
        let ids: Vec<&str> = p.calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["a", "call_1", "call_2"]);
        assert_eq!(p.calls[1].args.as_ref().unwrap()["q"], 2);
        assert!(p.calls[2].args.as_ref().unwrap().is_empty());
        assert_eq!(p.cache.cached_input, 800);
        assert_eq!(p.usage.unwrap().input, 1000);
        let cut = json!({"choices": [{"message": {"content": "half"}, "finish_reason": "length"}]});
        assert!(parse(&agent(Provider::Openai), &cut).unwrap().cut);
        let none = json!({"choices": [{"message": {"role": "assistant"}}]});
        assert!(parse(&agent(Provider::Openai), &none).is_err());
    }

    #[test]
    fn anthropic_replies_with_tool_use_cut_replies_and_cache_counts() {
        let v = json!({
            "content": [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "tu1", "name": "files__read_file", "input": {"path": "/a"}}
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 50, "output_tokens": 30,
                      "cache_read_input_tokens": 900, "cache_creation_input_tokens": 100}
        });
        let p = parse(&agent(Provider::Anthropic), &v).unwrap();
        assert_eq!(p.text, "Let me look.");
        assert_eq!(p.calls.len(), 1);
        assert_eq!(p.calls[0].id, "tu1");
        assert_eq!(p.calls[0].raw_args, r#"{"path":"/a"}"#);
        assert_eq!((p.cache.cache_read, p.cache.cache_write), (900, 100));
        assert_eq!(p.model, "m");
        let cut = json!({"content": [{"type": "tool_use", "id": "t", "name": "x", "input": {}}],
                         "stop_reason": "max_tokens"});
        assert!(parse(&agent(Provider::Anthropic), &cut).unwrap().cut);
    }

    #[test]
    fn prompt_bytes_grow_with_the_conversation_and_the_definitions() {
        let a = agent(Provider::Openai);
        let bare = prompt_bytes(&a, "go", Dialogue::default());
        assert_eq!(bare, "be brief".len() + 2);
        let tools = [offered("read_file")];
        let with_tools = prompt_bytes(
            &a,
            "go",
            Dialogue {
                steps: &[],
                tools: &tools,
            },
        );
        assert_eq!(with_tools, bare + tools_bytes(Provider::Openai, &tools));
        let steps = dialogue_steps();
        let full = prompt_bytes(
            &a,
            "go",
            Dialogue {
                steps: &steps,
                tools: &tools,
            },
        );
        // Every byte of the request's later messages counts.
        let b = body(
            &a,
            "go",
            None,
            Dialogue {
                steps: &steps,
                tools: &tools,
            },
        );
        let later: usize = b["messages"].as_array().unwrap()[2..]
            .iter()
            .map(|m| m.to_string().len())
            .sum();
        assert_eq!(full, with_tools + later);
    }
}

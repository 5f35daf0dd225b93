//! The agent action: one attempt of an LLM call over the OpenAI-compatible
//! `{base_url}/chat/completions` wire format (OpenAI, Ollama, vLLM, llama.cpp, OpenRouter…) or
//! Anthropic's `{base_url}/v1/messages`.
//!
//! Owns: building the request, reading the key from an injected env lookup, parsing the reply
//! and its usage, classifying failures (timeouts, 5xx, 429 + `Retry-After`, malformed JSON),
//! [`is_silent`], [`run_agent`] (attempts + backoff + pricing of the reply, for the run
//! pipeline). The shared outbound client is `action::http`'s, re-exported here as
//! [`http_client`]. Must not touch: the store, budgets (checked by the caller before calling),
//! the lease (the caller renews it while [`run_agent`] waits), the price table's contents
//! (`crate::cost` owns them).
//!
//! Secrets: the key is read at call time, sent only in its header (marked sensitive), and every
//! error text passes through a redactor that replaces the key with `[redacted]`, so neither
//! `Display` nor `Debug` of an [`LlmError`] can carry it, even when a server echoes it back.
//!
//! Decisions:
//! - 429 with a usable `Retry-After` → [`LlmError::RateLimited`] carrying `retry_at` (the server's
//!   instant, capped at now + 86 400 s). **The caller** holds the job until
//!   [`LlmError::hold_until`] = `retry_at + HOLD_MARGIN` (60 s) and does not retry.
//!   A `Retry-After` that is neither delta-seconds nor an RFC 1123 date (e.g. `soon`, `-5`, `1.5`)
//!   is unusable: the 429 is a plain, retryable [`LlmError::Http`] failure.
//! - Retryable: timeouts, transport errors, 5xx, 408, 429 without a hold, malformed replies.
//!   Not retryable: missing/invalid key, bad URL, other 4xx (a wrong key will not fix itself).
//! - Empty `base_url` (the jobs file gave none) → `$OPENAI_BASE_URL` / `$ANTHROPIC_BASE_URL` when
//!   set (the variables the providers' own SDKs read, so a local Ollama or vLLM needs no edit of
//!   the jobs file), else the provider default (`https://api.openai.com/v1`,
//!   `https://api.anthropic.com`). An Anthropic base ending in `/v1` is accepted as is.
//! - Every request carries an output bound when [`LlmCall::max_tokens`] is set (the run pipeline
//!   sets it whenever a budget applies: the agent's `max_tokens`, else
//!   [`crate::cost::DEFAULT_MAX_TOKENS`] = 4096), so the worst case it reserved is a real bound.
//!   OpenAI's reasoning and GPT-5 models (`o1…`, `o3…`, `o4…`, `gpt-5…`) reject `max_tokens` and
//!   get `max_completion_tokens` ([`wire::uses_max_completion_tokens`]). Anthropic requires
//!   `max_tokens`: 4096 when neither sets one. An empty `instructions` sends no system message.
//! - Budget settlement ([`LlmError::surely_cost_nothing`]): an error *reply* (any HTTP status
//!   outside 2xx, 429 included) is not billed by the providers, and a request that never left
//!   (no key, bad URL, connection refused) cost nothing; a timeout, a transport error after
//!   connecting, or a 2xx reply we could not read may have been billed.
//! - The reported model is the one the reply names (often a dated snapshot, or a router's
//!   pick), falling back to the agent's `model`; it is recorded on the row but the cost is
//!   priced at the *requested* model when that has a price (`crate::cost::call_cost`).
//! - Redirects are not followed: an API endpoint that redirects is misconfigured, and following
//!   would be a way to move a key to another host.
//! - Replies over 8 MiB are refused as malformed.

pub mod wire;

// The single-prompt agent action (attempts with backoff, the reply priced), older than the tool
// loop and kept for the tests that hold the wire behaviour of one call.
#[cfg(any(test, feature = "testkit"))]
mod single;
#[cfg(any(test, feature = "testkit"))]
pub use single::{AgentOutcome, AgentRun, call, prompt_bytes, run_agent};

mod call;
pub use crate::action::http::{ClientError, HttpOptions, http_client};
pub use call::{LlmCall, LlmError, LlmReply, call_turn, is_silent, process_env};

//! The single-prompt agent action: one model call without tools, retried with backoff, the
//! reply priced. The engine runs every agent through the tool loop (`action::agent`); this older
//! path exists in test builds only, for the tests that hold one call's wire behaviour (retries,
//! `Retry-After`, silent replies, pricing).
//!
//! Owns: nothing the engine uses. Must not touch: the store or the run's lease.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{LlmCall, LlmError, LlmReply, call_turn, is_silent, wire};
use crate::action::{BackoffConfig, retry_with_backoff};
use crate::clock::Clock;
use crate::cost::{PriceTable, RunCost};
use crate::model::AgentDef;

/// Make one attempt of a single-prompt call (no tools, no earlier turns). `env` looks up
/// environment variables (inject a map in tests).
pub async fn call(
    client: &reqwest::Client,
    req: &LlmCall<'_>,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<LlmReply, LlmError> {
    call_turn(client, req, wire::Dialogue::default(), env).await
}

/// Bytes of the text a request sends the model (instructions + prompt): the input-token upper
/// bound the budget reserves for (see [`wire::prompt_bytes`] for a request with tools).
pub fn prompt_bytes(agent: &AgentDef, prompt: &str) -> usize {
    wire::prompt_bytes(agent, prompt, wire::Dialogue::default())
}

/// A whole agent action: attempts with backoff, then the reply priced.
#[derive(Debug, Clone)]
pub struct AgentRun<'a> {
    pub agent: &'a AgentDef,
    /// The assembled prompt.
    pub prompt: &'a str,
    /// Per-attempt bound (the job's `timeout_seconds`).
    pub timeout: Duration,
    /// Total attempts (the job's `max_retries`: 1 initial + retries).
    pub max_attempts: u32,
    pub backoff: BackoffConfig,
}

/// Everything the run pipeline needs for the history row.
#[derive(Debug, Clone)]
pub struct AgentOutcome {
    /// The last attempt's result.
    pub result: Result<LlmReply, LlmError>,
    pub attempts: u32,
    /// Cost of the successful reply. Failed attempts cost 0: providers do not bill failed
    /// requests (a timed-out request that the server completed anyway is not counted).
    pub cost: RunCost,
    /// Set on a 429 with a usable `Retry-After`: hold the job until then (already + 60 s).
    pub hold_until: Option<DateTime<Utc>>,
    /// The reply was `NO_REPLY`/`[SILENT]`: succeed, deliver nothing.
    pub silent: bool,
}

/// Run the agent: up to `max_attempts` calls with [`BackoffConfig`] waits between retryable
/// failures (tokio time), the successful reply priced with `prices`. `clock` gives wall time
/// for each attempt (`Retry-After` dates). The caller renews its lease concurrently.
pub async fn run_agent(
    client: &reqwest::Client,
    run: &AgentRun<'_>,
    prices: &PriceTable,
    clock: &dyn Clock,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> AgentOutcome {
    let retried = retry_with_backoff(
        &run.backoff,
        run.max_attempts,
        |_| {
            let req = LlmCall {
                agent: run.agent,
                prompt: run.prompt,
                timeout: run.timeout,
                now: clock.now(),
                max_tokens: None,
            };
            async move { call(client, &req, env).await }
        },
        LlmError::is_retryable,
    )
    .await;
    let (cost, hold_until, silent) = match &retried.result {
        Ok(reply) => (
            crate::cost::call_cost(
                prices,
                crate::cost::Booking {
                    requested: &run.agent.model,
                    replied: &reply.model,
                    usage: reply.usage,
                    cache: reply.cache,
                    reserved: None,
                    max_tokens: None,
                },
            ),
            None,
            is_silent(&reply.text),
        ),
        Err(e) => (RunCost::default(), e.hold_until(), false),
    };
    AgentOutcome {
        result: retried.result,
        attempts: retried.attempts,
        cost,
        hold_until,
        silent,
    }
}

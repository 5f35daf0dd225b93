//! What an agent's tools weigh and what its loop may cost at most, before it runs: the figures
//! `dry-run` (and `describe`) show.
//!
//! Owns: [`forecast`]. Must not touch: the tools themselves (the caller lists them), the store.
//!
//! The worst case is counted in billed tokens: turn 1 sends the instructions, the prompt and
//! every tool definition (a byte counted as one token, as reservations count them); each later
//! turn adds at most the previous reply (`max_tokens` tokens, its calls' arguments included) and
//! `max_tool_calls_per_turn` results of `max_tool_output_bytes` each plus their framing. A run's
//! reservations count the conversation's real bytes, which bounds the same tokens from above.

use serde::Serialize;

use super::LoopLimits;
use crate::action::llm::wire;
use crate::action::tools::OfferedTool;
use crate::cost::{self, DEFAULT_MAX_TOKENS};
use crate::model::{AgentDef, Price};

/// Bytes a result's framing (its message, id, error mark and cut note) may add.
const RESULT_FRAMING_BYTES: u64 = 192;

/// One offered tool as the forecast lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ForecastTool {
    /// Its jobs-file name (`server.tool`, a command tool's key).
    pub name: String,
    /// The name the provider sees.
    pub wire_name: String,
    /// What its definition weighs in every request, in tokens at most.
    pub definition_tokens: u64,
}

/// An agent's tools and its loop's worst case.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolsForecast {
    pub tools: Vec<ForecastTool>,
    /// Every definition together, in tokens at most (sent with every turn).
    pub definition_tokens: u64,
    pub max_turns: u32,
    /// The first turn's worst case; `None` when the model has no price.
    pub one_turn_usd: Option<f64>,
    /// `max_turns` turns' worst case; `None` when the model has no price.
    pub max_turns_usd: Option<f64>,
}

impl ToolsForecast {
    /// The loop's worst case in words, the one text `dry-run` and `describe` print: each
    /// amount rounded up (a worst case is never under-stated), `unpriced` without a price.
    pub fn worst_case_text(&self) -> String {
        match (self.one_turn_usd, self.max_turns_usd) {
            (Some(one), Some(all)) => format!(
                "worst case: {} for one turn, {} for max_turns {}",
                cost::usd_up(one),
                cost::usd_up(all),
                self.max_turns
            ),
            _ => "worst case: unpriced (the model has no price)".to_string(),
        }
    }
}

/// The forecast of `agent` offered `offered`, whose first prompt weighs `prompt_bytes`.
pub fn forecast(
    agent: &AgentDef,
    prompt: &str,
    offered: &[OfferedTool],
    price: Option<Price>,
) -> ToolsForecast {
    let limits = LoopLimits::of(&agent.limits);
    let tools: Vec<ForecastTool> = offered
        .iter()
        .map(|t| ForecastTool {
            name: t.qualified.clone(),
            wire_name: t.wire_name.clone(),
            definition_tokens: wire::tools_bytes(agent.provider, std::slice::from_ref(t)) as u64,
        })
        .collect();
    let definition_tokens = tools.iter().map(|t| t.definition_tokens).sum::<u64>();
    let first = wire::prompt_bytes(
        agent,
        prompt,
        wire::Dialogue {
            steps: &[],
            tools: offered,
        },
    ) as u64;
    let max_tokens = agent.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    let growth = u64::from(max_tokens).saturating_add(
        u64::from(limits.max_tool_calls_per_turn).saturating_mul(
            (limits.max_tool_output_bytes as u64).saturating_add(RESULT_FRAMING_BYTES),
        ),
    );
    let figures =
        price.map(|p| cost::loop_worst_case(p, first, growth, max_tokens, limits.max_turns));
    ToolsForecast {
        tools,
        definition_tokens,
        max_turns: limits.max_turns,
        one_turn_usd: figures.map(|f| f.0),
        max_turns_usd: figures.map(|f| f.1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::tools::{MemorySource, text_output, toolbox};
    use serde_json::json;
    use std::sync::Arc;

    /// `dry-run` and `describe` print one text for the worst case, rounded up: $0.0002821 is
    /// `$0.000283`, never `$0.000282` (which would under-state it), and $5.97243 is `$5.98`.
    #[test]
    fn the_worst_case_text_rounds_every_amount_up() {
        let f = ToolsForecast {
            tools: Vec::new(),
            definition_tokens: 0,
            max_turns: 10,
            one_turn_usd: Some(0.0002821),
            max_turns_usd: Some(5.97243),
        };
        assert_eq!(
            f.worst_case_text(),
            "worst case: $0.000283 for one turn, $5.98 for max_turns 10"
        );
        let unpriced = ToolsForecast {
            one_turn_usd: None,
            max_turns_usd: None,
            ..f
        };
        assert!(unpriced.worst_case_text().contains("unpriced"));
    }

    #[test]
    fn the_worst_case_of_max_turns_grows_by_a_full_turn_each_turn() {
        let src = Arc::new(MemorySource::new("files").tool(
            "read_file",
            json!({"type": "object", "properties": {"path": {"type": "string"}}}),
            |_| Ok(text_output("x")),
        ));
        let tb = toolbox(vec![src]);
        let mut agent = crate::testkit::jobs::agent_def("a", crate::model::Provider::Openai);
        agent.max_tokens = Some(1000);
        agent.limits.max_turns = 3;
        agent.limits.max_tool_calls_per_turn = 2;
        agent.limits.max_tool_output_bytes = 4000;
        let f = forecast(&agent, "go", &tb.offered, Some(Price::new(1.0, 2.0)));
        assert_eq!(f.tools.len(), 1);
        assert_eq!(f.tools[0].name, "files.read_file");
        assert_eq!(f.definition_tokens, f.tools[0].definition_tokens);
        let first = (agent.instructions.len() + 2) as u64 + f.definition_tokens;
        let one = cost::worst_case_usd(Price::new(1.0, 2.0), first as usize, 1000);
        assert!((f.one_turn_usd.unwrap() - one).abs() < 1e-15);
        // Each later turn adds the reply (1 000) and two results (4 000 + framing each).
        let g = 1000 + 2 * (4000 + RESULT_FRAMING_BYTES);
        let all: f64 = (0..3)
            .map(|k| cost::worst_case_usd(Price::new(1.0, 2.0), (first + g * k) as usize, 1000))
            .sum();
        assert!((f.max_turns_usd.unwrap() - all).abs() < 1e-12);
        assert_eq!(
            forecast(&agent, "go", &tb.offered, None).max_turns_usd,
            None
        );
    }
}

//! Which wire format a model endpoint speaks: a leaf of `model`, below both the agents'
//! settings and the tool definitions, which each need it.
//!
//! Owns: the [`Provider`] names. Must not touch: how either format is written (`action::llm`).

use serde::{Deserialize, Serialize};

/// LLM provider wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    /// OpenAI's chat-completions format (and compatible servers).
    Openai,
    /// Anthropic's messages format.
    Anthropic,
}

//! Actions (SPEC §10): what a run does once its gates said go — a model-free shell command or an
//! LLM agent call — plus the retry backoff of SPEC §8.
//!
//! Owns: executing one attempt and describing its outcome. Must not touch: the store, history,
//! budgets (the run pipeline in `engine` decides whether to call, and records what happened).

pub mod command;
pub mod llm;

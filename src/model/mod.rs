//! The shared vocabulary of cronsole: job definitions as validated from the jobs file, the
//! per-job runtime record the store keeps, run statuses and the history row, and the money
//! types of budgets and spend.
//!
//! Owns: plain data types and their serde forms (the JSON field names here are the contract for
//! `--json` output and for the file store). Must not touch: I/O, clocks, the store, the UI. Every
//! other module speaks in these types, so they stay free of behaviour beyond small helpers.
//!
//! One file per concern: `job` (definitions), `settings` (agents, sinks, budget, pricing),
//! `chain` (`after:`), `history` (statuses, triggers, rows), `runtime` (the store's record of a
//! job), `state` (what a job keeps between runs), `spend` (periods, counters, reservations), `tools`
//! (MCP servers, command tools, allowlist entries and the names providers are given), `owner`
//! (what each running engine tells the store of itself).
//! Everything is re-exported here, so `crate::model::X` names every type.

mod chain;
mod history;
mod job;
mod owner;
mod provider;
mod runtime;
mod settings;
mod spend;
mod state;
mod tools;

pub use chain::*;
pub use history::*;
pub use job::*;
pub use owner::*;
pub use provider::*;
pub use runtime::*;
pub use settings::*;
pub use spend::*;
pub use state::*;
pub use tools::*;

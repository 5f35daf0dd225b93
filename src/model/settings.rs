//! Everything in the jobs file that is not a job: agents, delivery sinks, budget and pricing,
//! shared by every owner through the store.
//!
//! Owns: the shapes of `agents:`, `delivery:`, `budget:` and `pricing:` as validated. An agent
//! holds the name of its key's environment variable, never the key. Must not touch: parsing,
//! the network.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Budget, BudgetPeriod, JobDef, Price, Provider, ToolLimits, ToolSettings};

/// An `agents:` entry. Holds the *name* of the key's env var, never the key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentDef {
    /// The entry's name, as jobs' `agent:` give it.
    pub name: String,
    /// Which wire format `base_url` speaks.
    pub provider: Provider,
    /// Root URL of the provider's API.
    pub base_url: String,
    /// Name of the environment variable holding the API key.
    pub api_key_env: String,
    /// Model id sent with each call (and looked up in `pricing:`).
    pub model: String,
    /// System instructions sent with each call.
    pub instructions: String,
    /// Cap on the reply's tokens, sent to the provider.
    pub max_tokens: Option<u32>,
    /// Sampling temperature, sent when set.
    pub temperature: Option<f64>,
    /// The exact allowlist of its tools (`server.tool`, `server.*`, `command_tool`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    /// Allowed tools whose calls wait for an operator's approval.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approve: Vec<String>,
    /// The bounds of its tool loop.
    #[serde(default)]
    pub limits: ToolLimits,
}

/// The body a webhook sink posts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum WebhookFormat {
    /// The run's history row flattened, plus `kind`, `text` and `sent_at` (raw, for machines).
    #[default]
    Json,
    /// A Slack incoming-webhook message (`text`).
    Slack,
    /// A Discord webhook message (`content`).
    Discord,
}

/// A `delivery:` sink.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SinkDef {
    /// POST each delivery (a result, an alert, a recovery note) to a URL.
    Webhook {
        /// The sink's name, as jobs' `deliver:` give it.
        name: String,
        /// Where to POST.
        url: String,
        /// The body's shape.
        format: WebhookFormat,
    },
    /// Append each delivery to a file, one JSON line each (the `json` webhook body).
    File {
        /// The sink's name, as jobs' `deliver:` give it.
        name: String,
        /// The file's path (relative paths resolved against the jobs file's directory).
        path: String,
    },
}

impl SinkDef {
    /// The sink's name, as jobs' `deliver:` give it.
    pub fn name(&self) -> &str {
        match self {
            SinkDef::Webhook { name, .. } | SinkDef::File { name, .. } => name,
        }
    }
}

/// Everything in the jobs file that is not a job: shared by every owner through the store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Settings {
    /// `None` = `budget: null` (disabled). The jobs-file default is $1.00/day.
    pub budget: Option<Budget>,
    /// Period used for per-job `max_cost_usd` when the global budget is disabled too.
    #[serde(default)]
    pub period: BudgetPeriod,
    /// Prices per model id (`pricing:`); a model absent here is unpriced.
    pub pricing: BTreeMap<String, Price>,
    /// The `agents:` entries by name.
    pub agents: BTreeMap<String, AgentDef>,
    /// The `delivery:` sinks by name.
    pub delivery: BTreeMap<String, SinkDef>,
    /// Absolute directory of the jobs file last applied: commands (`command`, `pre_run`,
    /// `monitor.command`) run there, and relative `file:` sink paths were resolved against it.
    #[serde(default)]
    pub base_dir: Option<String>,
    /// `mcp_servers:` and the command tools of `tools:`.
    #[serde(default, skip_serializing_if = "ToolSettings::is_empty")]
    pub tools: ToolSettings,
}

/// A whole validated jobs file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct JobsFile {
    /// Budget, pricing, agents and sinks.
    pub settings: Settings,
    /// The jobs, in file order.
    pub jobs: Vec<JobDef>,
}

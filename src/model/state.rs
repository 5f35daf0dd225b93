//! The per-job state persisted between runs: the notepad a model keeps, the monitor's watermark,
//! the "alert once" incident and the last budget stop.
//!
//! Owns: the bound on each part, so that one part can never evict another. Must not touch: the
//! store, the parsing of a reply's notepad block.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Cap of the serialised per-job state.
pub(crate) const STATE_MAX_BYTES: usize = 16 * 1024;

/// Monitor watermark kept in the job state (never shown to the model).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MonitorState {
    /// Hex SHA-256 of the last good probe output.
    pub hash: String,
    /// First ≤ 2048 bytes of that output, cut on a UTF-8 boundary.
    pub preview: String,
    /// True when the output was longer than the preview.
    pub truncated: bool,
}

/// Incident tracking for "alert once".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct IncidentState {
    /// Failed runs in a row (reset by a success).
    pub consecutive_failures: u32,
    /// Signature of the incident an alert was delivered for.
    pub alerted_signature: Option<String>,
}

/// Per-job state persisted in the store. Each part has its own bounded space, so one can never
/// evict another (a full notepad sharing the monitor's space would push the watermark out, and
/// the model would then be called on every tick): the notepad is capped at `STATE_MAX_BYTES`
/// serialised (`JobState::notepad_size`); the monitor watermark (hash + ≤ 2048-byte preview),
/// the incident state and the budget stop are bounded by construction and always kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct JobState {
    /// The job's own `key=value` notes, updated by a ```` ```notepad ```` block ending its model's
    /// reply; capped at `STATE_MAX_BYTES` serialised.
    #[serde(default)]
    pub notepad: BTreeMap<String, String>,
    /// The monitor's watermark: what the last good probe saw.
    #[serde(default)]
    pub monitor: Option<MonitorState>,
    /// The "alert once" incident state.
    #[serde(default)]
    pub incident: IncidentState,
    /// The last time a budget stopped a call of this job (one alert per period).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_stop: Option<BudgetStop>,
}

/// A budget stopped a model call of the job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetStop {
    /// Budget period key (`BudgetPeriod::key`) the stop happened in.
    pub period_key: String,
    /// The skip reason ("budget reached: …"), cut to 300 characters.
    pub reason: String,
    /// When the stop happened.
    pub at: DateTime<Utc>,
    /// The alert for this period reached the job's sinks (or it has none).
    pub alerted: bool,
}

impl JobState {
    /// Serialised size of the notepad, the part [`STATE_MAX_BYTES`] caps.
    pub(crate) fn notepad_size(&self) -> usize {
        serde_json::to_vec(&self.notepad)
            .map(|v| v.len())
            .unwrap_or(usize::MAX)
    }

    /// `next` as the new state of a job whose stored state is `prior`: every part is taken,
    /// except a notepad over the cap, which is rejected alone (the prior notepad stays) with the
    /// reason returned.
    pub(crate) fn merge_capped(prior: &JobState, mut next: JobState) -> (JobState, Option<String>) {
        let size = next.notepad_size();
        if size <= STATE_MAX_BYTES {
            return (next, None);
        }
        next.notepad = prior.notepad.clone();
        (
            next,
            Some(format!(
                "notepad would be {size} bytes, over the {STATE_MAX_BYTES}-byte cap; prior \
                 notepad kept (monitor and incident state saved)"
            )),
        )
    }
}

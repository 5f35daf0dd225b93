//! Chains: a job's `after:` entries and what a chained run knows about the parent run that
//! released it.
//!
//! Owns: which endings of a parent fire an entry. Must not touch: the bookkeeping of pending
//! parents (the store does that) or how a chained run is started (the engine does).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{RESULT_MAX_CHARS, Status};

/// When an `after:` entry fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChainOn {
    /// The parent's run `succeeded`.
    Success,
    /// The parent's run `failed` or was `abandoned`.
    Failure,
    /// The parent's run ended `succeeded`, `failed`, `no_change` or `abandoned` (a run that
    /// was `skipped` did not run its action and fires nothing).
    Completion,
    /// The parent is a monitor and its gate reported a change (its run was not `no_change`
    /// nor `skipped`: it `succeeded` or `failed` after the change).
    Change,
}

impl ChainOn {
    /// Every entry kind ([`ChainOn::parse`] looks the `on:` words up here).
    pub const ALL: [ChainOn; 4] = [
        ChainOn::Success,
        ChainOn::Failure,
        ChainOn::Completion,
        ChainOn::Change,
    ];

    /// The `on:` word of the entry.
    pub fn as_str(self) -> &'static str {
        match self {
            ChainOn::Success => "success",
            ChainOn::Failure => "failure",
            ChainOn::Completion => "completion",
            ChainOn::Change => "change",
        }
    }

    /// The entry kind an `on:` word names; `None` for any other text.
    pub fn parse(s: &str) -> Option<ChainOn> {
        ChainOn::ALL.into_iter().find(|o| o.as_str() == s)
    }

    /// Whether a parent run that ended with `status` fires this entry.
    pub fn fires_on(self, status: Status) -> bool {
        match self {
            ChainOn::Success => status == Status::Succeeded,
            ChainOn::Failure => matches!(status, Status::Failed | Status::Abandoned),
            ChainOn::Completion => matches!(
                status,
                Status::Succeeded | Status::Failed | Status::NoChange | Status::Abandoned
            ),
            ChainOn::Change => matches!(status, Status::Succeeded | Status::Failed),
        }
    }
}

/// One `after:` entry of a job: run when `job` finishes as `on` says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct After {
    /// The parent job's name.
    pub job: String,
    /// Which of its endings fire this job.
    pub on: ChainOn,
}

/// A parent's finished run as a chained job sees it: recorded in the child's record in the
/// same persist as the parent's completion, carried by the chained run's lease.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParentRun {
    /// The parent job's name.
    pub job: String,
    /// The parent's run.
    pub run_id: Uuid,
    /// How it ended.
    pub status: Status,
    /// When it ended.
    pub finished_at: DateTime<Utc>,
    /// The run's result (else its error, else its reason), cut to `CHAIN_OUTPUT_MAX_CHARS`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

/// Most characters of a parent's output a chained job receives (prompt and
/// `CRONSOLE_PARENT_OUTPUT`).
pub(crate) const CHAIN_OUTPUT_MAX_CHARS: usize = RESULT_MAX_CHARS;

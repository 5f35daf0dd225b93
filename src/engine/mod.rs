//! The engine: the actor that turns the store into runs (SPEC §6, §8). It sleeps until the
//! earliest slot or a store change, claims with its free capacity, spawns run tasks, renews
//! leases, and publishes a [`Snapshot`](crate::snapshot::Snapshot) and [`Event`]s for front ends.
//!
//! Owns: timing, claims, run tasks, shutdown. Must not touch: the UI (front ends talk to it only
//! through [`Command`] and the published channels), the terminal.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::model::{HistoryRow, Trigger};

/// What front ends ask the engine to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Pause(String),
    Resume(String),
    Trigger(String),
    Shutdown,
}

/// What happened, for front ends (history rows arrive as they are written).
#[derive(Debug, Clone)]
pub enum Event {
    RunStarted {
        job: String,
        run_id: Uuid,
        trigger: Trigger,
        slot: Option<DateTime<Utc>>,
    },
    Row(HistoryRow),
    /// A delivery made by a sink (headless mode prints each one).
    Delivered {
        job: String,
        sink: String,
        text: String,
    },
    /// A human notice: "trigger refused: job is running", store errors, shutdown progress.
    Notice(String),
}

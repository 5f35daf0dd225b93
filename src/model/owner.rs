//! Owner records: what each running engine (an "owner") tells the store about itself at every
//! heartbeat, and what the store measured of it — above all how far its clock is from the
//! store's.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One owner as the store last heard of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OwnerRecord {
    /// The owner id (`host:pid:uuid8`, new at each start).
    pub owner: String,
    /// The host it runs on.
    pub host: String,
    /// Its process id on that host.
    pub pid: u32,
    /// The kernel boot and PID namespace its `pid` belongs to
    /// (`crate::proc::alive::pid_space`): a reader in the same space can tell at once whether
    /// the process still runs. Absent in records of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_space: Option<String>,
    /// The cronsole version it runs.
    pub version: String,
    /// When it started, by its own clock.
    pub started_at: DateTime<Utc>,
    /// Its last heartbeat, by the store's clock.
    pub last_seen: DateTime<Utc>,
    /// Its clock minus the store's at its last heartbeat, in milliseconds (positive: ahead).
    pub clock_offset_ms: i64,
    /// Why it claims nothing new, if it does not (a store outage, its clock too far off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claims_stopped: Option<String>,
    /// When it stopped cleanly (its own clock), written by its last record: an owner that
    /// signed off runs nothing more, so it stops counting as live at once rather than when
    /// its heartbeats age out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_off: Option<DateTime<Utc>>,
}

/// An owner record with how long ago the store last heard of it, by the store's clock.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnerSeen {
    /// The record.
    pub record: OwnerRecord,
    /// How long ago its last heartbeat was, by the store's clock when it was read.
    pub ago: chrono::Duration,
}

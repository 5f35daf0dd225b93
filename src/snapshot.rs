//! What front ends draw: an immutable picture of the store at one instant, built by the engine
//! (published on a `watch` channel) or, in `console --attach`, straight from the store.
//!
//! Owns: the [`Snapshot`] type and building it from a [`Store`]. Must not touch: the terminal,
//! the engine's internals. Building reads the store; callers decide how often (on change only).

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Duration, Timelike, Utc};

use crate::model::{HistoryRow, JobRecord, Settings, Status};
use crate::store::{HistoryQuery, Store, StoreResult};

/// How many history rows a snapshot keeps in memory; older rows are queried on demand.
pub const RECENT_ROWS: usize = 1000;

#[derive(Debug, Clone)]
pub struct Snapshot {
    pub taken_at: DateTime<Utc>,
    /// Where the store lives.
    pub store: String,
    /// This process's owner id (`host:pid:uuid8`), or `attached (...)` without an engine.
    pub owner: String,
    pub started_at: DateTime<Utc>,
    /// False in `console --attach`: no engine runs in this process.
    pub engine_running: bool,
    /// Every job, sorted by name.
    pub jobs: Vec<JobRecord>,
    /// Owners holding live leases, plus this one when it runs an engine.
    pub owners_seen: Vec<String>,
    pub settings: Settings,
    /// Spend in the current budget period over all jobs.
    pub period_spend_usd: f64,
    /// Some spend is unknown (unpriced model or reply without usage).
    pub spend_incomplete: bool,
    /// Newest first, at most [`RECENT_ROWS`].
    pub recent: Vec<HistoryRow>,
    /// Rows per status over the last 24 h (from `recent` plus the store when needed).
    pub counts_24h: BTreeMap<Status, u64>,
    /// Spend per hour over the last 24 h, oldest first (24 buckets, the last is this hour).
    pub spend_per_hour: Vec<f64>,
    /// Jobs with a pause/resume sent but not yet confirmed by the store (optimistic UI).
    pub pending: BTreeMap<String, PendingOp>,
    /// Jobs running in this process right now.
    pub in_flight: BTreeSet<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PendingOp {
    Pausing,
    Resuming,
    Triggering,
}

impl Snapshot {
    /// Read everything a front end needs from `store`. One `jobs()` and one bounded history
    /// query; call it when the store's change token moved, not on every frame.
    pub fn load(
        store: &dyn Store,
        now: DateTime<Utc>,
        owner: &str,
        started_at: DateTime<Utc>,
        engine_running: bool,
    ) -> StoreResult<Snapshot> {
        let mut jobs = store.jobs()?;
        jobs.sort_by(|a, b| a.def.name.cmp(&b.def.name));
        let settings = store.settings()?;
        let since = now - Duration::hours(24);
        let recent = store.history(&HistoryQuery {
            limit: RECENT_ROWS,
            ..Default::default()
        })?;
        let day = store.history(&HistoryQuery {
            since: Some(since),
            limit: 100_000,
            ..Default::default()
        })?;
        let mut counts_24h = BTreeMap::new();
        let mut spend_per_hour = vec![0.0; 24];
        let this_hour = now
            .with_minute(0)
            .and_then(|t| t.with_second(0))
            .and_then(|t| t.with_nanosecond(0))
            .unwrap_or(now);
        for r in &day {
            *counts_24h.entry(r.status).or_insert(0) += 1;
            let hours_ago =
                (this_hour - r.finished_at.with_minute(0).unwrap_or(r.finished_at)).num_hours();
            if (0..24).contains(&hours_ago) {
                spend_per_hour[23 - hours_ago as usize] += r.cost_usd;
            }
        }
        let mut owners: BTreeSet<String> = jobs
            .iter()
            .filter_map(|j| j.rt.lease.as_ref())
            .filter(|l| l.lease_until > now)
            .map(|l| l.owner.clone())
            .collect();
        if engine_running {
            owners.insert(owner.to_string());
        }
        let period = settings.budget.map(|b| b.period).unwrap_or(settings.period);
        let key = period.key(now);
        let period_spend_usd = jobs
            .iter()
            .filter(|j| j.rt.counters.period_key == key)
            .map(|j| j.rt.counters.period_cost_usd)
            .sum();
        let spend_incomplete = jobs.iter().any(|j| j.rt.counters.cost_incomplete);
        Ok(Snapshot {
            taken_at: now,
            store: store.location(),
            owner: owner.to_string(),
            started_at,
            engine_running,
            jobs,
            owners_seen: owners.into_iter().collect(),
            settings,
            period_spend_usd,
            spend_incomplete,
            recent,
            counts_24h,
            spend_per_hour,
            pending: BTreeMap::new(),
            in_flight: BTreeSet::new(),
        })
    }
}

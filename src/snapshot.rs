//! What front ends draw: an immutable picture of the store at one instant, built by the engine
//! (published on a `watch` channel) or, in `console --attach`, straight from the store.
//!
//! Owns: the [`Snapshot`] type and building it from a [`Store`]. Must not touch: the terminal,
//! the engine's internals. Building reads the store; callers decide how often (on change only).

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};

use crate::model::{HistoryRow, JobRecord, Settings, Status};
use crate::store::{HistoryQuery, Store, StoreResult};

/// How many history rows a snapshot keeps in memory; older rows are queried on demand.
pub const RECENT_ROWS: usize = 1000;

/// What front ends draw: the store's jobs, recent history and counters at one instant.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// When it was built.
    pub taken_at: DateTime<Utc>,
    /// Where the store lives.
    pub store: String,
    /// This process's owner id (`host:pid:uuid8`), or `attached (...)` without an engine.
    pub owner: String,
    /// When this process started (its engine, or the attached console).
    pub started_at: DateTime<Utc>,
    /// False in `console --attach`: no engine runs in this process.
    pub engine_running: bool,
    /// Every job, sorted by name.
    pub jobs: Vec<JobRecord>,
    /// Owners holding live leases, plus this one when it runs an engine.
    pub owners_seen: Vec<String>,
    /// The store's settings (agents, budget, sinks).
    pub settings: Settings,
    /// Spend in the current budget period over all jobs.
    pub period_spend_usd: f64,
    /// Some spend is unknown (unpriced model or reply without usage).
    pub spend_incomplete: bool,
    /// Newest first, at most [`RECENT_ROWS`].
    pub recent: Vec<HistoryRow>,
    /// Rows per status over the last 24 h (from the jobs' hour buckets).
    pub counts_24h: BTreeMap<Status, u64>,
    /// Spend per hour over the last 24 h, oldest first (24 buckets, the last is this hour).
    pub spend_per_hour: Vec<f64>,
    /// Jobs with a pause/resume sent but not yet confirmed by the store (optimistic UI).
    pub pending: BTreeMap<String, PendingOp>,
    /// Jobs running in this process right now.
    pub in_flight: BTreeSet<String>,
    /// When the budget's limit will be reached and what each job will still spend this period
    /// (computed when the snapshot is built, not per frame). `None` for a headless engine.
    pub forecast: Option<crate::forecast::Forecast>,
}

/// Owners that wrote a history row this recently count as alive (there is no heartbeat row:
/// a live engine without a lease right now is seen through the rows it writes).
pub const OWNER_SEEN_SECS: i64 = 300;

/// An operator action sent but not yet confirmed by the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PendingOp {
    /// Pause sent.
    Pausing,
    /// Resume sent.
    Resuming,
    /// Trigger sent.
    Triggering,
}

impl Snapshot {
    /// Jobs a budget stopped in the current budget period, with the reason (SPEC §11: the console
    /// header says so). From the jobs' state, so every owner's stops show.
    pub fn budget_stops(&self) -> Vec<(String, String)> {
        let key = crate::store::logic::counter_period(&self.settings).key(self.taken_at);
        self.jobs
            .iter()
            .filter_map(|j| {
                let b = j.rt.state.budget_stop.as_ref()?;
                (b.period_key == key).then(|| (j.def.name.clone(), b.reason.clone()))
            })
            .collect()
    }

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
        let recent = store.history(&HistoryQuery {
            limit: RECENT_ROWS,
            ..Default::default()
        })?;
        // 24 h counts and spend per hour come from the per-job hour buckets the store keeps with
        // each job: O(jobs), whatever the size of the history.
        let this_hour = now.timestamp().div_euclid(3600);
        let mut counts_24h = BTreeMap::new();
        let mut spend_per_hour = vec![0.0; 24];
        for j in &jobs {
            for b in &j.rt.counters.hours {
                let ago = this_hour - b.hour;
                if !(0..24).contains(&ago) {
                    continue;
                }
                for (st, n) in Status::ALL.iter().zip(b.counts) {
                    if n > 0 {
                        *counts_24h.entry(*st).or_insert(0) += u64::from(n);
                    }
                }
                spend_per_hour[23 - ago as usize] += b.cost_usd;
            }
        }
        let mut owners: BTreeSet<String> = jobs
            .iter()
            .flat_map(|j| j.rt.leases())
            .filter(|l| l.lease_until > now)
            .map(|l| l.owner.clone())
            .collect();
        // Owners between runs hold no lease: the rows they wrote lately show they are alive.
        let seen_since = now - chrono::Duration::seconds(OWNER_SEEN_SECS);
        owners.extend(
            recent
                .iter()
                .take_while(|r| r.finished_at >= seen_since)
                .map(|r| r.owner.clone()),
        );
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
        let forecast = Some(crate::forecast::compute(&jobs, &settings, now));
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
            forecast,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{JobsFile, Trigger};
    use crate::store::file::FileStore;
    use crate::store::logic::tests_support::def;
    use crate::store::{ClaimRequest, Completion};

    #[test]
    fn day_counts_and_spend_come_from_the_jobs_not_a_history_scan() {
        let dir = crate::testkit::tmp::TempDir::new("snapshot");
        let store = FileStore::open(&dir).unwrap();
        let t0 = DateTime::parse_from_rfc3339("2026-03-01T10:05:00Z")
            .unwrap()
            .to_utc();
        let file = JobsFile {
            jobs: vec![def("a"), def("b")],
            ..Default::default()
        };
        store.apply(&file, t0).unwrap();
        // Both jobs run at t0 and an hour later; a's first run costs 0.5, b's second run fails.
        for (name, at, status, cost) in [
            ("a", t0, Status::Succeeded, 0.5),
            ("b", t0 + chrono::Duration::hours(1), Status::Failed, 0.0),
        ] {
            let out = store
                .claim_due(&ClaimRequest {
                    now: at,
                    owner: "o",
                    limit: 10,
                    in_flight: &[],
                })
                .unwrap();
            for c in out.claims {
                let mut row = HistoryRow::new(
                    &c.job.def.name,
                    Status::Succeeded,
                    Trigger::Schedule,
                    c.slot,
                    "o",
                    at,
                );
                if c.job.def.name == name {
                    row.status = status;
                    row.cost_usd = cost;
                }
                store
                    .complete(Completion {
                        job: c.job.def.name.clone(),
                        run_id: c.run_id,
                        owner: "o".into(),
                        now: at,
                        row,
                        state: None,
                        hold_until: None,
                    })
                    .unwrap();
            }
        }
        let now = t0 + chrono::Duration::hours(1) + chrono::Duration::minutes(1);
        let s = Snapshot::load(&store, now, "o", t0, true).unwrap();
        assert_eq!(s.counts_24h.get(&Status::Succeeded), Some(&3));
        // Attached (no engine here, no lease now): the owner that wrote rows a minute ago counts.
        let attached = Snapshot::load(&store, now, "attached", t0, false).unwrap();
        assert_eq!(attached.owners_seen, vec!["o".to_string()]);
        let later = now + chrono::Duration::seconds(OWNER_SEEN_SECS + 1);
        let attached = Snapshot::load(&store, later, "attached", t0, false).unwrap();
        assert!(
            attached.owners_seen.is_empty(),
            "{:?}",
            attached.owners_seen
        );
        assert!(attached.forecast.is_some());
        assert_eq!(s.counts_24h.get(&Status::Failed), Some(&1));
        assert_eq!(s.recent.len(), 4);
        assert!(
            (s.spend_per_hour[22] - 0.5).abs() < 1e-12,
            "{:?}",
            s.spend_per_hour
        );
        assert_eq!(s.spend_per_hour[23], 0.0);
        // A day later the counts have slid out of the window; the rows are still in history.
        let s = Snapshot::load(&store, now + chrono::Duration::hours(25), "o", t0, true).unwrap();
        assert!(s.counts_24h.is_empty(), "{:?}", s.counts_24h);
        assert_eq!(s.recent.len(), 4);
    }
}

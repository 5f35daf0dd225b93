//! What front ends draw: an immutable picture of the store at one instant, built by the engine
//! (published on a `watch` channel) or, in `console --attach`, straight from the store.
//!
//! Owns: the [`Snapshot`] type, the compact [`JobRow`] the jobs table draws, and building both
//! from a [`Store`]. Must not touch: the terminal, the engine's internals. Building reads the
//! store; callers decide how often (on change only, and never on the engine's own task).
//!
//! Decisions (so a store of a million jobs opens in the console at once):
//! - A snapshot holds one [`JobRow`] per job — only what the table shows, sorts and filters on
//!   (name, schedule, next/last, status, pause and lease marks, spend) — not the `JobRecord`
//!   (≈ 3 KB each in memory). A view that needs the whole definition (the job's detail) reads
//!   that one job from the store when it opens and again when the snapshot moves.
//! - [`Snapshot::load`] walks the store a page at a time ([`Store::jobs_page`], in name order),
//!   folding each page into rows and the header's counts and spend, and drops
//!   the records before reading the next page: its memory is the rows plus one page.
//! - The forecast needs whole records, but only of jobs that ever spent money (a job that never
//!   cost anything has no cost per run to project): those records are kept for it, no others.
//! - The first frame does not wait for a million rows: [`Snapshot::load_first`] reads one page
//!   ([`FIRST_ROWS`] jobs) and marks the snapshot [`Snapshot::loading`] when more exist; the
//!   caller then builds the whole snapshot in the background and publishes it when done.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};

use crate::model::{BudgetStop, HistoryRow, JobRecord, Lease, Settings, Status};
use crate::schedule::ScheduleSpec;
use crate::schedule::calendar::DayRule;
use crate::store::{HistoryQuery, Store, StoreResult};

/// How many history rows a snapshot keeps in memory; older rows are queried on demand.
pub const RECENT_ROWS: usize = 1000;

/// Jobs read per page while a snapshot is built (one page of records is in memory at a time).
pub(crate) const PAGE_ROWS: usize = 2000;

/// Jobs the first, quick snapshot of a large store holds (the rest follows in the background).
pub const FIRST_ROWS: usize = 2000;

/// What front ends draw: the store's jobs (as table rows), recent history and counters at one
/// instant.
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
    /// Every job as a table row, sorted by name (only the first page while [`Snapshot::loading`]).
    pub jobs: Vec<JobRow>,
    /// True while `jobs` is only the first page of a larger store: the whole snapshot is being
    /// built in the background; counts, spend and forecast cover the first page only.
    pub loading: bool,
    /// The live owners (`owners`) by the one rule of `crate::owners`, plus this one when it
    /// runs an engine. A restarted process's old id signed off or ages out: one process, one
    /// owner.
    pub owners_seen: Vec<String>,
    /// Some engine runs on the store: this one or a live owner. `false` in `console --attach`
    /// says nothing will run the jobs until one starts.
    pub engine_seen: bool,
    /// The store's settings (agents, budget, sinks).
    pub settings: Settings,
    /// Spend in the current budget period over all jobs.
    pub period_spend_usd: f64,
    /// Money the budget holds in the current period for calls in flight or of unknown outcome
    /// (every job's reservations): not spent, not available either.
    pub period_held_usd: f64,
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
    /// Jobs whose definition alone shows a limit below one model call's worst case, with the
    /// skip reason every call of theirs would get: known before any run, so the header says it
    /// before a skipped row does.
    pub too_small: Vec<(String, String)>,
}

/// One job as the jobs table sees it: the few definition and runtime fields it draws, sorts and
/// filters on, laid out like [`JobRecord`]'s (`row.def.name`, `row.rt.next_slot`) so the
/// table's code reads the same. A few hundred bytes, where a `JobRecord` is ≈ 3 KB.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRow {
    /// From the definition.
    pub def: RowDef,
    /// From the runtime state.
    pub rt: RowRt,
}

/// The definition fields of a [`JobRow`].
#[derive(Debug, Clone, PartialEq)]
pub struct RowDef {
    /// The job's name.
    pub name: String,
    /// Its parsed schedule (described in words for the visible rows only).
    pub schedule: ScheduleSpec,
    /// The schedule as written (shown when it cannot be described).
    pub schedule_text: Box<str>,
    /// Its time zone (for `days:` rules).
    pub tz: Box<str>,
    /// Its `days:` rule (`None`: every day).
    pub days: Option<Box<DayRule>>,
    /// Its jitter (NEXT shows the slot plus the job's offset).
    pub jitter_seconds: f64,
    /// `enabled: false` in the jobs file.
    pub enabled: bool,
    /// Its next slot is a `run_immediately` run ([`JobRecord::next_is_immediate`]: the
    /// definition asks for one and the job never ran): it fires on its slot, without jitter.
    pub immediate: bool,
    /// Gated by a `monitor:` (only such a job's runs record a diff).
    pub monitor: bool,
    /// Its own spend limit per period.
    pub max_cost_usd: Option<f64>,
    /// The `agents:` entry it calls (`None` for a command job): the console warns while that
    /// agent's key variable is unset.
    pub agent: Option<Box<str>>,
}

/// The runtime fields of a [`JobRow`].
#[derive(Debug, Clone, PartialEq)]
pub struct RowRt {
    /// The schedule's anchor.
    pub anchor: DateTime<Utc>,
    /// The next slot, if any.
    pub next_slot: Option<DateTime<Utc>>,
    /// When it last ran.
    pub last_run_at: Option<DateTime<Utc>>,
    /// How its last run ended.
    pub last_status: Option<Status>,
    /// Paused by an operator or the store.
    pub paused: bool,
    /// Why it is paused.
    pub pause_reason: Option<Box<str>>,
    /// Retired (removed from the jobs file, or finished).
    pub retired: bool,
    /// The lease of a run in progress (the first when several are live).
    pub lease: Option<Box<Lease>>,
    /// A manual trigger waits to be claimed.
    pub trigger_requested_at: Option<DateTime<Utc>>,
    /// Runs queued behind the live one.
    pub queued: usize,
    /// Held (a retry back-off or recovery) until this instant.
    pub hold_until: Option<DateTime<Utc>>,
    /// An incident of this job was alerted and is still open.
    pub alerted: bool,
    /// A budget stop of this job, if any (of any period: compare its key).
    pub budget_stop: Option<Box<BudgetStop>>,
    /// Spend counters.
    pub counters: RowCounters,
}

/// The spend and execution counters of a [`JobRow`].
#[derive(Debug, Clone, PartialEq)]
pub struct RowCounters {
    /// The budget period `period_cost_usd` belongs to.
    pub period_key: String,
    /// What the job spent in that period (USD).
    pub period_cost_usd: f64,
    /// What the job spent in all (USD): its spend under `period: total`.
    pub total_cost_usd: f64,
    /// Some of its spend is unknown.
    pub cost_incomplete: bool,
    /// Every execution (succeeded, no_change, failed, abandoned rows, any trigger), as `stats` counts them.
    pub executions: u64,
}

impl RowDef {
    /// The schedule compiled from its anchor (as [`crate::model::JobDef::compile`]).
    pub fn compile(
        &self,
        anchor: DateTime<Utc>,
    ) -> Result<crate::schedule::Compiled, crate::schedule::ScheduleError> {
        let c = crate::schedule::Compiled::new(&self.schedule, anchor)?;
        match &self.days {
            Some(days) if !days.is_empty() => {
                Ok(c.on_days(days, crate::schedule::parse_tz(&self.tz)?))
            }
            _ => Ok(c),
        }
    }
}

impl JobRow {
    /// The instant the slot `slot` fires, by the stored record's rule
    /// ([`JobRecord::fire_at`]): the slot plus the job's jitter, except the `run_immediately`
    /// run, which fires on its slot.
    pub fn fire_at(&self, slot: DateTime<Utc>) -> DateTime<Utc> {
        if self.def.immediate && self.rt.next_slot == Some(slot) {
            slot
        } else {
            crate::schedule::jitter::fire_at(&self.def.name, slot, self.def.jitter_seconds)
        }
    }

    /// The table's row of `j`.
    pub fn of(j: &JobRecord) -> JobRow {
        let executions = j.rt.counters.executions();
        JobRow {
            def: RowDef {
                name: j.def.name.clone(),
                schedule: j.def.schedule.clone(),
                schedule_text: j.def.schedule_text.as_str().into(),
                tz: j.def.tz.as_str().into(),
                days: (!j.def.days.is_empty()).then(|| Box::new(j.def.days.clone())),
                jitter_seconds: j.def.jitter_seconds,
                enabled: j.def.enabled,
                immediate: j.next_is_immediate(),
                monitor: matches!(j.def.gate, Some(crate::model::Gate::Monitor { .. })),
                max_cost_usd: j.def.max_cost_usd,
                agent: j.def.agent_name().map(Box::from),
            },
            rt: RowRt {
                anchor: j.rt.anchor,
                next_slot: j.rt.next_slot,
                last_run_at: j.rt.last_run_at,
                last_status: j.rt.last_status,
                paused: j.rt.paused,
                pause_reason: j.rt.pause_reason.as_deref().map(Box::from),
                retired: j.rt.retired,
                lease: j.rt.lease.clone().map(Box::new),
                trigger_requested_at: j.rt.trigger_requested_at,
                queued: j.rt.queue.len(),
                hold_until: j.rt.hold_until,
                alerted: j.rt.state.incident.alerted_signature.is_some(),
                budget_stop: j.rt.state.budget_stop.clone().map(Box::new),
                counters: RowCounters {
                    period_key: j.rt.counters.period_key.clone(),
                    period_cost_usd: j.rt.counters.period_cost_usd,
                    total_cost_usd: j.rt.counters.total_cost_usd,
                    cost_incomplete: j.rt.counters.cost_incomplete,
                    executions,
                },
            },
        }
    }
}

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

/// The header's figures folded over the jobs one page at a time.
struct Fold {
    this_hour: i64,
    period_key: String,
    rows: Vec<JobRow>,
    counts_24h: BTreeMap<Status, u64>,
    spend_per_hour: Vec<f64>,
    period_spend_usd: f64,
    period_held_usd: f64,
    spend_incomplete: bool,
    /// Records of jobs that ever spent money: the forecast's input.
    spenders: Vec<JobRecord>,
}

impl Fold {
    fn new(now: DateTime<Utc>, settings: &Settings) -> Fold {
        let period = crate::cost::budget_period(settings);
        Fold {
            this_hour: now.timestamp().div_euclid(3600),
            period_key: period.key(now),
            rows: Vec::new(),
            counts_24h: BTreeMap::new(),
            spend_per_hour: vec![0.0; 24],
            period_spend_usd: 0.0,
            period_held_usd: 0.0,
            spend_incomplete: false,
            spenders: Vec::new(),
        }
    }

    fn add(&mut self, j: JobRecord) {
        // 24 h counts and spend per hour come from the per-job hour buckets the store keeps with
        // each job: O(jobs), whatever the size of the history.
        let mut spent_lately = false;
        for b in &j.rt.counters.hours {
            // An hour ahead of now holds rows dated by a clock that was ahead (since set
            // right): they happened no later than now, so they count as this hour's, not as
            // never.
            let ago = (self.this_hour - b.hour).max(0);
            if ago >= 24 {
                continue;
            }
            for (st, n) in Status::ALL.iter().zip(b.counts) {
                if n > 0 {
                    *self.counts_24h.entry(*st).or_insert(0) += u64::from(n);
                }
            }
            self.spend_per_hour[23 - ago as usize] += b.cost_usd;
            spent_lately |= b.cost_usd != 0.0;
        }
        let c = &j.rt.counters;
        let (spent, held) = crate::store::rules::period::committed_counters(c, &self.period_key);
        self.period_spend_usd += spent;
        self.period_held_usd += held;
        self.spend_incomplete |= c.cost_incomplete;
        self.rows.push(JobRow::of(&j));
        if spent_lately
            || c.total_cost_usd != 0.0
            || c.period_cost_usd != 0.0
            || !c.reservations.is_empty()
        {
            self.spenders.push(j);
        }
    }
}

impl Snapshot {
    /// Jobs a budget stopped in the current budget period, with the reason (the console header says
    /// so, so a stopped job is never a silent one), and the jobs whose definition is too small
    /// for one call though none of their calls was refused yet. From the jobs' state, so every
    /// owner's stops show; by name.
    pub fn budget_stops(&self) -> Vec<(String, String)> {
        let key = crate::cost::budget_period(&self.settings).key(self.taken_at);
        let mut stops: Vec<(String, String)> = self
            .jobs
            .iter()
            .filter_map(|j| {
                let b = j.rt.budget_stop.as_ref()?;
                (b.period_key == key).then(|| (j.def.name.clone(), b.reason.clone()))
            })
            .collect();
        // A job too small for one call by its definition, before any of its calls was refused.
        for (job, why) in &self.too_small {
            if !stops.iter().any(|(j, _)| j == job) {
                stops.push((job.clone(), why.clone()));
            }
        }
        stops.sort_by(|a, b| a.0.cmp(&b.0));
        stops
    }

    /// The row of the job `name` (binary search: `jobs` is sorted by name).
    pub fn job(&self, name: &str) -> Option<&JobRow> {
        self.jobs
            .binary_search_by(|j| j.def.name.as_str().cmp(name))
            .ok()
            .and_then(|i| self.jobs.get(i))
            .or_else(|| self.jobs.iter().find(|j| j.def.name == name))
    }

    /// Read everything a front end needs from `store`: every job a page at a time, one bounded
    /// history query. O(jobs) in time, rows + one page in memory; call it when the store's
    /// change token moved, off any task that must stay responsive, not on every frame.
    pub fn load(
        store: &dyn Store,
        now: DateTime<Utc>,
        owner: &str,
        started_at: DateTime<Utc>,
        engine_running: bool,
    ) -> StoreResult<Snapshot> {
        Snapshot::build(
            store,
            now,
            owner,
            started_at,
            engine_running,
            usize::MAX,
            PAGE_ROWS,
        )
    }

    /// A quick snapshot for the first frame: the first [`FIRST_ROWS`] jobs by name, marked
    /// [`Snapshot::loading`] when the store holds more (then follow it with [`Snapshot::load`]).
    /// Equal to [`Snapshot::load`] on a store with no more jobs than that.
    pub fn load_first(
        store: &dyn Store,
        now: DateTime<Utc>,
        owner: &str,
        started_at: DateTime<Utc>,
        engine_running: bool,
    ) -> StoreResult<Snapshot> {
        Snapshot::build(
            store,
            now,
            owner,
            started_at,
            engine_running,
            FIRST_ROWS,
            PAGE_ROWS,
        )
    }

    fn build(
        store: &dyn Store,
        now: DateTime<Utc>,
        owner: &str,
        started_at: DateTime<Utc>,
        engine_running: bool,
        max_jobs: usize,
        page_rows: usize,
    ) -> StoreResult<Snapshot> {
        let settings = store.settings()?;
        let mut fold = Fold::new(now, &settings);
        let prices = crate::cost::PriceTable::from_settings(&settings);
        let mut too_small = Vec::new();
        let mut after: Option<String> = None;
        let mut loading = false;
        loop {
            let want = page_rows.max(1).min(max_jobs - fold.rows.len());
            // One more than wanted tells whether the store holds more than `max_jobs`.
            let mut page = store.jobs_page(after.as_deref(), want + 1)?;
            let more = page.len() > want;
            page.truncate(want);
            after = page.last().map(|j| j.def.name.clone());
            for j in page {
                if !j.rt.retired
                    && j.def.enabled
                    && let Some(why) =
                        crate::preflight::too_small_by_definition(&j.def, &settings, &prices)
                {
                    too_small.push((j.def.name.clone(), why));
                }
                fold.add(j);
            }
            if !more {
                break;
            }
            if fold.rows.len() >= max_jobs {
                loading = true;
                break;
            }
        }
        // A store's pages come in name order; a default `jobs_page` over an unsorted `jobs()`
        // too (it sorts), but the table's binary search relies on it, so make sure.
        if !fold.rows.is_sorted_by(|a, b| a.def.name <= b.def.name) {
            fold.rows.sort_by(|a, b| a.def.name.cmp(&b.def.name));
        }
        let recent = store.history(&HistoryQuery {
            limit: RECENT_ROWS,
            ..Default::default()
        })?;
        // The live owners by the one rule (a store refusing the read counts none).
        let mut owners = crate::owners::live(&store.owners().unwrap_or_default());
        let engine_seen = engine_running || !owners.is_empty();
        if engine_running {
            owners.insert(owner.to_string());
        }
        let forecast = Some(crate::forecast::compute(&fold.spenders, &settings, now));
        Ok(Snapshot {
            taken_at: now,
            store: store.location(),
            owner: owner.to_string(),
            started_at,
            engine_running,
            jobs: fold.rows,
            loading,
            owners_seen: owners.into_iter().collect(),
            engine_seen,
            settings,
            period_spend_usd: fold.period_spend_usd,
            period_held_usd: fold.period_held_usd,
            spend_incomplete: fold.spend_incomplete,
            recent,
            counts_24h: fold.counts_24h,
            spend_per_hour: fold.spend_per_hour,
            pending: BTreeMap::new(),
            in_flight: BTreeSet::new(),
            forecast,
            too_small,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{JobsFile, Trigger};
    use crate::store::file::FileStore;
    use crate::store::policy::define::tests_support::def;
    use crate::store::{ClaimRequest, Completion};

    /// A row is what the table needs, a fraction of the record it comes from.
    #[test]
    fn a_row_is_a_fraction_of_a_job_record() {
        let row = std::mem::size_of::<JobRow>();
        let rec = std::mem::size_of::<JobRecord>();
        assert!(
            row <= 320 && row * 3 <= rec,
            "row {row} bytes, record {rec} bytes"
        );
        let mut j = crate::tui::testdata::job("x", 60, crate::tui::testdata::now());
        j.rt.counters.by_status = BTreeMap::from([
            (Status::Succeeded, 2),
            (Status::Failed, 1),
            (Status::Missed, 4),
        ]);
        j.rt.state.incident.alerted_signature = Some("sig".into());
        let r = JobRow::of(&j);
        assert_eq!(r.rt.counters.executions, 3);
        assert!(r.rt.alerted);
        assert_eq!(r.def.name, "x");
        assert_eq!(r.rt.next_slot, j.rt.next_slot);
    }

    /// After a clock 2 days ahead was set right, the rows it dated ahead still count in the
    /// 24 h figures (as this hour's), beside the rows written on the real clock since.
    #[test]
    fn rows_dated_ahead_by_a_stepped_clock_count_in_the_24h_figures() {
        let now = crate::tui::testdata::now();
        let mut j = crate::tui::testdata::job("x", 60, now);
        let ahead = now + chrono::Duration::days(2);
        j.rt.counters.hours.clear();
        j.rt.counters
            .count_hour(Status::Succeeded, 0.0, now - chrono::Duration::hours(3));
        j.rt.counters.count_hour(Status::Succeeded, 0.25, ahead);
        j.rt.counters.count_hour(Status::Failed, 0.0, ahead);
        // Back on the real clock: the new row finds its own hour, not the one dated ahead.
        j.rt.counters.count_hour(Status::Succeeded, 0.0, now);
        j.rt.counters.count_hour(Status::Succeeded, 0.0, now);
        let mut fold = Fold::new(now, &Settings::default());
        fold.add(j);
        // 1 ahead + 2 since; the row of 3 h before the step fell out while the clock said
        // it was 51 h old (a known limit: the hours are kept by the writer's clock).
        assert_eq!(fold.counts_24h.get(&Status::Succeeded), Some(&3));
        assert_eq!(fold.counts_24h.get(&Status::Failed), Some(&1));
        assert!((fold.spend_per_hour[23] - 0.25).abs() < 1e-12);
        // A row more than 24 h old does not count.
        let mut old = crate::tui::testdata::job("y", 60, now);
        old.rt.counters.hours.clear();
        old.rt
            .counters
            .count_hour(Status::Failed, 0.0, now - chrono::Duration::hours(30));
        let mut fold = Fold::new(now, &Settings::default());
        fold.add(old);
        assert!(fold.counts_24h.is_empty(), "{:?}", fold.counts_24h);
    }

    /// The snapshot is read a page at a time; the pages add up to one read of every
    /// job, and a first snapshot cut at `max_jobs` says it is not the whole store.
    #[test]
    fn a_paged_snapshot_equals_the_whole_store_and_a_cut_one_says_loading() {
        let dir = crate::testkit::tmp::TempDir::new("snapshot-pages");
        let store = FileStore::open(&dir).unwrap();
        let t0 = DateTime::parse_from_rfc3339("2026-03-01T10:05:00Z")
            .unwrap()
            .to_utc();
        let names = ["e", "a", "d", "b", "c"];
        let file = JobsFile {
            jobs: names.iter().map(|n| def(n)).collect(),
            ..Default::default()
        };
        store.apply(&file, t0).unwrap();
        let whole: Vec<JobRow> = store.jobs().unwrap().iter().map(JobRow::of).collect();
        for page in [1, 2, 3, 5, 100] {
            let s = Snapshot::build(&store, t0, "o", t0, true, usize::MAX, page).unwrap();
            assert_eq!(s.jobs, whole, "page {page}");
            assert!(!s.loading);
        }
        let first = Snapshot::build(&store, t0, "o", t0, true, 3, 2).unwrap();
        let got: Vec<&str> = first.jobs.iter().map(|j| j.def.name.as_str()).collect();
        assert_eq!(got, ["a", "b", "c"]);
        assert!(first.loading);
        // Exactly as many jobs as the cut: the whole store, not loading.
        let exact = Snapshot::build(&store, t0, "o", t0, true, 5, 2).unwrap();
        assert_eq!(exact.jobs, whole);
        assert!(!exact.loading);
        let s = Snapshot::load_first(&store, t0, "o", t0, true).unwrap();
        assert_eq!(s.jobs, whole);
        assert!(!s.loading);
        assert_eq!(s.job("d").map(|j| j.def.name.as_str()), Some("d"));
        assert!(s.job("zz").is_none());
    }

    /// A job whose own limit cannot pay for one call is in the header's stops from its
    /// definition, before any call of it was refused; a job that fits, a command job and a
    /// retired one are not.
    #[test]
    fn a_job_too_small_for_one_call_is_a_stop_before_its_first_run() {
        let dir = crate::testkit::tmp::TempDir::new("snapshot-too-small");
        let store = FileStore::open(&dir).unwrap();
        let t0 = DateTime::parse_from_rfc3339("2026-03-01T10:05:00Z")
            .unwrap()
            .to_utc();
        let agent = crate::testkit::jobs::agent_def("ag", crate::model::Provider::Openai);
        let agent_job = |name: &str, limit: f64| {
            let mut d = def(name);
            d.action = crate::model::Action::Agent {
                agent: "ag".into(),
                message: "hi".into(),
                tools: None,
            };
            d.max_cost_usd = Some(limit);
            d
        };
        let file = JobsFile {
            settings: crate::model::Settings {
                agents: [("ag".to_string(), agent)].into(),
                pricing: [(
                    "m".to_string(),
                    crate::model::Price {
                        input: 0.15,
                        output: 0.6,
                        ..Default::default()
                    },
                )]
                .into(),
                ..Default::default()
            },
            jobs: vec![
                agent_job("tiny", 0.0001),
                agent_job("roomy", 1.0),
                def("cmd"),
            ],
        };
        store.apply(&file, t0).unwrap();
        let s = Snapshot::build(&store, t0, "o", t0, true, usize::MAX, 100).unwrap();
        let stops = s.budget_stops();
        assert_eq!(stops.len(), 1, "{stops:?}");
        assert_eq!(stops[0].0, "tiny");
        assert!(
            stops[0]
                .1
                .starts_with("budget too small for one call: it may cost up to $0.00247"),
            "{stops:?}"
        );
        assert!(
            stops[0].1.contains("the job limit is $0.0001/day"),
            "{stops:?}"
        );
    }

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
        // Stored so that the first slot is `t0`.
        let stored = crate::testkit::jobs::stored_for_first_slot(&file.jobs[0], t0);
        store.apply(&file, stored).unwrap();
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
                    clock_stepped: None,
                    max_offset: None,
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
        // Attached, with no owner record on the store: no live owner and no engine, though
        // rows were written a minute ago (a row says only that an engine ran once).
        let attached = Snapshot::load(&store, now, "attached", t0, false).unwrap();
        assert!(
            attached.owners_seen.is_empty(),
            "{:?}",
            attached.owners_seen
        );
        assert!(!attached.engine_seen);
        // An owner heartbeating counts; once it signs off it does not.
        let mut rec = crate::model::OwnerRecord {
            owner: "w:1:aa".into(),
            host: "w".into(),
            pid: 1,
            pid_space: None,
            version: "0".into(),
            started_at: t0,
            last_seen: Utc::now(),
            clock_offset_ms: 0,
            claims_stopped: None,
            signed_off: None,
        };
        store.beat(&rec).unwrap();
        let attached = Snapshot::load(&store, now, "attached", t0, false).unwrap();
        assert_eq!(attached.owners_seen, vec!["w:1:aa".to_string()]);
        assert!(attached.engine_seen);
        rec.signed_off = Some(Utc::now());
        store.beat(&rec).unwrap();
        let attached = Snapshot::load(&store, now, "attached", t0, false).unwrap();
        assert!(attached.owners_seen.is_empty() && !attached.engine_seen);
        // With the engine running here: itself, one owner.
        assert_eq!(s.owners_seen, vec!["o".to_string()]);
        assert!(attached.forecast.is_some());
        // The forecast, made from the records of the jobs that spent only, is the one made
        // from every record.
        assert_eq!(
            s.forecast,
            Some(crate::forecast::compute(
                &store.jobs().unwrap(),
                &s.settings,
                now
            ))
        );
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

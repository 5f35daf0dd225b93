//! Prometheus metrics (exposition by `prometheus-client`, Prometheus text format 0.0.4).
//!
//! Owns: the metric families, feeding them from engine [`Event`]s, refreshing the store-derived
//! gauges at scrape time (in pages, one computation at a time, its exposition cached and shared:
//! [`Metrics::scrape`]), and [`Metered`] (a [`Store`] wrapper that counts store errors). Must not
//! touch: the engine's decisions; the store beyond read-only queries at scrape time.
//!
//! Families (all prefixed `cronsole_`):
//! - `runs_total{job,status}` — history rows written by this process's engine.
//! - `run_duration_seconds{job}` — histogram of those runs' durations (rows of runs only, not
//!   `missed`/`skipped` bookkeeping rows).
//! - `fire_lateness_seconds{job}` — histogram of run start minus its slot (scheduled runs).
//! - `spend_usd_total{job}` — cost of the rows above.
//! - `budget_remaining_usd{scope}` — `scope="global"` for the jobs file's budget, `job:NAME` for
//!   jobs with `max_cost_usd`; refreshed at scrape. Absent when no budget is set.
//! - `leases` — leases held in the store now (any owner); `jobs{state}` — jobs by state (idle,
//!   running, paused, held, retired; every state always present).
//! - `store_errors_total` — failed store calls made through [`Metered`] by this process.
//! - `store_outage_since_seconds` — when the current store outage began (Unix seconds; 0 while
//!   the store takes this owner's writes); `store_outages_total` and `store_outage_probes_total`
//!   — outages lived through and the probes made during them; `claims_stopped` — 1 while this
//!   owner claims nothing (a store outage, or its clock too far from the store's);
//!   `clock_offset_seconds` — its clock minus the store's at its last heartbeat;
//!   `pending_completions` — finished runs the store has not taken yet.
//!   All from the engine's health channel ([`watch_health`]).
//! - `claim_cycles_total`, `loop_turns_quiet_total`, `loop_turns_idle_total` — the engine loop's
//!   own progress: claim cycles finished, and loop turns that began with no claim due (quiet),
//!   with no run in flight either (idle). Read live at every request, never cached
//!   ([`loop_counters`]); a request asks an idle loop to turn, so they move while it answers. Two
//!   idle turns after an action mean the engine has done, and recorded, all it would do about
//!   it: what a test waits for before it asserts that something did not happen.
//!
//! Label sets are bounded: job names come from the jobs file; beyond [`MAX_JOB_LABELS`] distinct
//! names (only reachable by churning job names in a long-lived process) new names are counted
//! under `job="_other"`.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::sync::{broadcast, watch};

use crate::clock::Clock;
use crate::engine::{EngineHealth, Event, Heartbeat};
use crate::model::{HistoryRow, Status};
use crate::store::wrap::{Call, Hooks, Wrapped};
use crate::store::*;

/// Distinct `job` label values before new names fold into `_other`.
pub const MAX_JOB_LABELS: usize = 1000;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    job: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabel {
    job: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ScopeLabel {
    scope: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

fn duration_histogram() -> Histogram {
    // 10 ms … ~2.8 h.
    Histogram::new(exponential_buckets(0.01, 4.0, 10))
}

fn lateness_histogram() -> Histogram {
    // 1 ms … ~4.4 min.
    Histogram::new(exponential_buckets(0.001, 4.0, 10))
}

const STATES: [&str; 5] = ["idle", "running", "paused", "held", "retired"];

/// Every metric of one process.
pub struct Metrics {
    registry: Registry,
    runs: Family<RunLabels, Counter>,
    run_duration: Family<JobLabel, Histogram, fn() -> Histogram>,
    lateness: Family<JobLabel, Histogram, fn() -> Histogram>,
    spend: Family<JobLabel, Counter<f64, AtomicU64>>,
    budget_remaining: Family<ScopeLabel, Gauge<f64, AtomicU64>>,
    leases: Gauge,
    jobs: Family<StateLabel, Gauge>,
    store_errors: Counter,
    outage_since: Gauge,
    outages: Counter,
    outage_probes: Counter,
    claims_stopped: Gauge,
    pending_completions: Gauge,
    clock_offset: Gauge<f64, AtomicU64>,
    job_names: Mutex<HashSet<String>>,
    /// The last exposition, shared by every `/metrics` request while it is fresh.
    cache: Mutex<ScrapeCache>,
    /// Bumped when a computation ends (requests that wait for one watch it).
    scrape_done: watch::Sender<u64>,
    /// Store-reading computations made so far (one per fresh exposition).
    computations: AtomicU64,
    /// How long a request waits for a running computation ([`SCRAPE_WAIT`] unless set).
    scrape_wait: Duration,
}

/// The cached exposition (see [`Metrics::scrape`]).
#[derive(Default)]
struct ScrapeCache {
    text: Option<Arc<str>>,
    /// Until when (on the clock's monotonic reading) `text` is shared: how old an exposition
    /// is and how long computing it took are both measured on the one monotonic clock, so a
    /// wall-clock step neither keeps an old exposition nor forces a new one.
    fresh_until: Option<Duration>,
    computing: bool,
}

/// An exposition is reused for at least this long…
pub const SCRAPE_MIN_AGE: Duration = Duration::from_secs(1);
/// …and for at least this many times as long as computing it took, so reading the store for
/// `/metrics` takes at most a fifth of its time whatever the store's size.
pub const SCRAPE_AGE_FACTOR: u32 = 4;
/// A request waits this long for a computation under way, then gets the last exposition.
pub const SCRAPE_WAIT: Duration = Duration::from_secs(5);
/// Jobs read per store call while refreshing (never all records at once).
pub const REFRESH_PAGE: usize = 500;

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// How long a `/metrics` request waits for a computation in progress before it answers with
    /// the last exposition (default [`SCRAPE_WAIT`]). Tests on a loaded machine raise it, so a
    /// slow computation cannot make requests answer with an older text.
    #[cfg(test)]
    pub fn with_scrape_wait(mut self, wait: Duration) -> Metrics {
        self.scrape_wait = wait;
        self
    }

    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("cronsole");
        let runs = Family::<RunLabels, Counter>::default();
        let run_duration: Family<JobLabel, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(duration_histogram);
        let lateness: Family<JobLabel, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(lateness_histogram);
        let spend = Family::<JobLabel, Counter<f64, AtomicU64>>::default();
        let budget_remaining = Family::<ScopeLabel, Gauge<f64, AtomicU64>>::default();
        let leases = Gauge::default();
        let jobs = Family::<StateLabel, Gauge>::default();
        let store_errors = Counter::default();
        let (outage_since, outages, outage_probes, claims_stopped, pending_completions) = (
            Gauge::default(),
            Counter::default(),
            Counter::default(),
            Gauge::default(),
            Gauge::default(),
        );
        registry.register(
            "store_outage_since_seconds",
            "When the current store outage began (Unix seconds), 0 while the store takes this owner's writes",
            outage_since.clone(),
        );
        registry.register(
            "store_outages",
            "Store outages this owner lived through",
            outages.clone(),
        );
        registry.register(
            "store_outage_probes",
            "Probes of the store made during outages",
            outage_probes.clone(),
        );
        registry.register(
            "claims_stopped",
            "1 while this owner claims no new runs (see /healthz for why)",
            claims_stopped.clone(),
        );
        let clock_offset = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "clock_offset_seconds",
            "This owner's clock minus the store's at its last heartbeat (positive: ahead)",
            clock_offset.clone(),
        );
        registry.register(
            "pending_completions",
            "Finished runs whose completion the store has not taken yet (retried)",
            pending_completions.clone(),
        );
        registry.register(
            "runs",
            "History rows written by this process's engine, by job and status",
            runs.clone(),
        );
        registry.register(
            "run_duration_seconds",
            "Duration of runs finished by this process",
            run_duration.clone(),
        );
        registry.register(
            "fire_lateness_seconds",
            "Run start minus its scheduled slot, for scheduled runs started by this process",
            lateness.clone(),
        );
        registry.register(
            "spend_usd",
            "USD spent by runs of this process",
            spend.clone(),
        );
        registry.register(
            "budget_remaining_usd",
            "USD left in the current budget period (scope global, or job:NAME for max_cost_usd)",
            budget_remaining.clone(),
        );
        registry.register(
            "leases",
            "Run leases held in the store now, by any owner",
            leases.clone(),
        );
        registry.register("jobs", "Jobs in the store by state", jobs.clone());
        registry.register(
            "store_errors",
            "Store calls by this process that failed",
            store_errors.clone(),
        );
        for s in STATES {
            jobs.get_or_create(&StateLabel { state: s.into() }).set(0);
        }
        Metrics {
            registry,
            runs,
            run_duration,
            lateness,
            spend,
            budget_remaining,
            leases,
            jobs,
            store_errors,
            outage_since,
            outages,
            outage_probes,
            claims_stopped,
            pending_completions,
            clock_offset,
            job_names: Mutex::new(HashSet::new()),
            cache: Mutex::new(ScrapeCache::default()),
            scrape_done: watch::channel(0).0,
            computations: AtomicU64::new(0),
            scrape_wait: SCRAPE_WAIT,
        }
    }

    /// Store-reading computations made so far by [`Metrics::scrape`].
    #[cfg(test)]
    pub fn computations(&self) -> u64 {
        self.computations.load(Ordering::SeqCst)
    }

    /// The exposition for one `/metrics` request (16 clients polling a 20 001-job store must
    /// not take `/healthz` down nor stall the engine). A fresh exposition (younger than
    /// [`SCRAPE_MIN_AGE`] and [`SCRAPE_AGE_FACTOR`] × its computing time) is shared by every
    /// request; otherwise one computation at a time reads the store (in pages, on a blocking
    /// thread, off the engine's path) and every request that arrives meanwhile waits for it, up
    /// to [`SCRAPE_WAIT`], then gets the last exposition (or the counters alone). So requests
    /// never multiply store reads or memory, and counters are at most that age behind.
    pub async fn scrape(
        self: &Arc<Self>,
        store: &Arc<dyn Store>,
        clock: &Arc<dyn Clock>,
    ) -> Arc<str> {
        let mut done = {
            let mut c = self.cache_lock();
            if let (Some(t), Some(until)) = (&c.text, c.fresh_until)
                && clock.monotonic() < until
            {
                return Arc::clone(t);
            }
            let done = self.scrape_done.subscribe();
            if !c.computing {
                c.computing = true;
                tokio::spawn(Arc::clone(self).compute(Arc::clone(store), Arc::clone(clock)));
            }
            done
        };
        let _ = tokio::time::timeout(self.scrape_wait, done.changed()).await;
        let last = self.cache_lock().text.clone();
        last.unwrap_or_else(|| self.encode().into())
    }

    /// One computation: refresh the store gauges, encode, publish.
    async fn compute(self: Arc<Self>, store: Arc<dyn Store>, clock: Arc<dyn Clock>) {
        let started = clock.monotonic();
        let now = clock.now();
        let me = Arc::clone(&self);
        match crate::store::blocking(&store, move |s| me.refresh_from_store(s, now)).await {
            Ok(()) => {}
            Err(e) => tracing::warn!(error = %e, "metrics: reading the store failed"),
        }
        let text: Arc<str> = self.encode().into();
        self.computations.fetch_add(1, Ordering::SeqCst);
        let end = clock.monotonic();
        let age = SCRAPE_MIN_AGE.max(end.saturating_sub(started) * SCRAPE_AGE_FACTOR);
        {
            let mut c = self.cache_lock();
            c.text = Some(text);
            c.fresh_until = Some(end + age);
            c.computing = false;
        }
        self.scrape_done.send_modify(|g| *g += 1);
    }

    fn cache_lock(&self) -> std::sync::MutexGuard<'_, ScrapeCache> {
        // Plain values: a panic while holding the lock leaves them usable.
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The label for `job`, folding names past the bound into `_other`.
    fn job_label(&self, job: &str) -> JobLabel {
        let mut names = self.job_names.lock().unwrap_or_else(|e| e.into_inner());
        if names.contains(job) {
            return JobLabel { job: job.into() };
        }
        if names.len() >= MAX_JOB_LABELS {
            return JobLabel {
                job: "_other".into(),
            };
        }
        names.insert(job.to_string());
        JobLabel { job: job.into() }
    }

    /// Count one history row written by the engine.
    pub fn observe_row(&self, r: &HistoryRow) {
        let job = self.job_label(&r.job);
        self.runs
            .get_or_create(&RunLabels {
                job: job.job.clone(),
                status: r.status.as_str().to_string(),
            })
            .inc();
        if !matches!(r.status, Status::Missed | Status::Skipped) {
            self.run_duration
                .get_or_create(&job)
                .observe(r.duration_ms as f64 / 1000.0);
        }
        if r.cost_usd.is_finite() && r.cost_usd > 0.0 {
            // The total is kept by the one money rule (`text::json_usd`), as every JSON output
            // prints money: a sum of costs carries binary noise (0.1 + 0.2), and a scrape shows
            // the same digits `stats --json` does.
            let spend = self.spend.get_or_create(&job);
            let _ = spend
                .inner()
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                    Some(crate::text::json_usd(f64::from_bits(bits) + r.cost_usd).to_bits())
                });
        }
    }

    /// A run started `now` for `slot`.
    pub fn observe_start(&self, job: &str, slot: Option<DateTime<Utc>>, now: DateTime<Utc>) {
        if let Some(slot) = slot {
            let late = (now - slot).num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6;
            self.lateness
                .get_or_create(&self.job_label(job))
                .observe(late.max(0.0));
        }
    }

    pub fn store_error(&self) {
        self.store_errors.inc();
    }

    /// The engine's health changed: the outage gauges follow it. Counters move by what the
    /// health's own counts moved since the last call (`last`).
    pub fn observe_health(&self, h: &EngineHealth, last: &EngineHealth) {
        self.outage_since
            .set(h.store_failing_since.map_or(0, |t| t.timestamp()));
        self.outages.inc_by(h.outages.saturating_sub(last.outages));
        self.outage_probes
            .inc_by(h.outage_probes.saturating_sub(last.outage_probes));
        // Stopped for an outage or for this owner's clock: what /healthz reports.
        self.claims_stopped
            .set(i64::from(h.claims_stopped_because().is_some()));
        self.clock_offset
            .set(h.clock_offset_ms.map_or(0.0, |ms| ms as f64 / 1000.0));
        self.pending_completions
            .set(i64::try_from(h.pending_completions).unwrap_or(i64::MAX));
    }

    /// Refresh the gauges that describe the store (jobs by state, leases, budgets), reading the
    /// jobs [`REFRESH_PAGE`] at a time: memory stays one page whatever the store's size, and a
    /// store that locks per call lets the engine in between pages.
    pub fn refresh_from_store(&self, store: &dyn Store, now: DateTime<Utc>) -> StoreResult<()> {
        let mut counts = [0i64; STATES.len()];
        let mut leases = 0;
        let mut first_live: Option<String> = None;
        let mut capped: Vec<(String, f64)> = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = store.jobs_page(after.as_deref(), REFRESH_PAGE)?;
            for j in &page {
                let w = j.state_word(now);
                if let Some(i) = STATES.iter().position(|s| *s == w) {
                    counts[i] += 1;
                }
                leases += j.rt.live_runs() as i64;
                if j.rt.retired {
                    continue;
                }
                if first_live.is_none() {
                    first_live = Some(j.def.name.clone());
                }
                if let Some(limit) = j.def.max_cost_usd
                    && capped.len() < MAX_JOB_LABELS
                {
                    capped.push((j.def.name.clone(), limit));
                }
            }
            match page.last() {
                Some(last) if page.len() >= REFRESH_PAGE => after = Some(last.def.name.clone()),
                _ => break,
            }
        }
        for (s, n) in STATES.iter().zip(counts) {
            self.jobs
                .get_or_create(&StateLabel { state: (*s).into() })
                .set(n);
        }
        self.leases.set(leases);
        let settings = store.settings()?;
        self.budget_remaining.clear();
        if let (Some(b), Some(first)) = (settings.budget, first_live) {
            let spent = store.spend(&first, now)?.global_usd;
            self.budget_remaining
                .get_or_create(&ScopeLabel {
                    scope: "global".into(),
                })
                .set(crate::text::json_usd(b.max_cost_usd - spent));
        }
        for (name, limit) in capped {
            let spent = store.spend(&name, now)?.job_usd;
            self.budget_remaining
                .get_or_create(&ScopeLabel {
                    scope: format!("job:{name}"),
                })
                .set(crate::text::json_usd(limit - spent));
        }
        Ok(())
    }

    /// The text exposition of every family.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry);
        out
    }
}

/// The content type of [`Metrics::encode`].
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The engine loop's counters in the text format (see the module doc), read from `heartbeat`
/// now: they follow the cached exposition in every `/metrics` answer.
pub fn loop_counters(heartbeat: &Heartbeat) -> String {
    let mut out = String::with_capacity(512);
    for (name, help, value) in [
        (
            "claim_cycles",
            "Claim cycles this owner's engine finished (whatever they found)",
            heartbeat.claim_cycles(),
        ),
        (
            "loop_turns_quiet",
            "Engine loop turns that began with no claim due",
            heartbeat.quiet_turns(),
        ),
        (
            "loop_turns_idle",
            "Engine loop turns that began with no claim due and no run in flight",
            heartbeat.idle_turns(),
        ),
    ] {
        out.push_str(&format!(
            "# HELP cronsole_{name}_total {help}.\n# TYPE cronsole_{name}_total counter\ncronsole_{name}_total {value}\n"
        ));
    }
    out
}

/// Feed `metrics` from the engine's events until the channel closes.
pub async fn feed(
    metrics: Arc<Metrics>,
    mut events: broadcast::Receiver<Event>,
    clock: Arc<dyn Clock>,
) {
    loop {
        match events.recv().await {
            Ok(Event::Row(r)) => metrics.observe_row(&r),
            Ok(Event::RunStarted { job, slot, .. }) => {
                metrics.observe_start(&job, slot, clock.now())
            }
            Ok(_) => {}
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!(missed = n, "metrics fell behind the engine's events");
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// Feed the outage gauges from the engine's health channel until it closes.
pub async fn watch_health(metrics: Arc<Metrics>, mut health: watch::Receiver<EngineHealth>) {
    let mut last = EngineHealth::default();
    loop {
        let now = health.borrow_and_update().clone();
        metrics.observe_health(&now, &last);
        last = now;
        if health.changed().await.is_err() {
            return;
        }
    }
}

/// A [`Store`] that counts failed calls in `cronsole_store_errors_total`: the inner store,
/// every call forwarded, with [`CountErrors`] around it.
pub type Metered = Wrapped<CountErrors>;

/// The hooks of [`Metered`]: every error the inner store answers is counted.
pub struct CountErrors(Arc<Metrics>);

impl Hooks for CountErrors {
    fn failed(&self, _: Call, _: &StoreError) {
        self.0.store_error();
    }
}

/// `inner`, each error it answers counted in `metrics`.
pub fn metered(inner: Arc<dyn Store>, metrics: Arc<Metrics>) -> Metered {
    Wrapped::new(inner, CountErrors(metrics))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Trigger;

    #[test]
    fn a_clock_refusal_shows_as_claims_stopped_with_the_offset() {
        let m = Metrics::new();
        let h = EngineHealth {
            clock_offset_ms: Some(300_500),
            clock_refused: Some("clock off".into()),
            ..Default::default()
        };
        m.observe_health(&h, &EngineHealth::default());
        let text = m.encode();
        assert!(text.contains("cronsole_claims_stopped 1"), "{text}");
        assert!(
            text.contains("cronsole_clock_offset_seconds 300.5"),
            "{text}"
        );
        m.observe_health(&EngineHealth::default(), &h);
        assert!(m.encode().contains("cronsole_claims_stopped 0"));
    }

    /// Money in the exposition follows the one JSON money rule (`text::json_usd`): spend summed
    /// from rows and a budget's remainder print without binary noise (0.1 + 0.2 is 0.3 here, not
    /// 0.30000000000000004; 0.7 − 0.3 is 0.4), the digits `stats --json` prints.
    #[test]
    fn money_in_the_exposition_has_no_binary_noise() {
        use crate::model::{Budget, BudgetPeriod, JobsFile, Settings};
        use crate::store::Store;
        use crate::testkit::store::{ClaimAt, FinishClaim, claim_row};
        let m = Metrics::new();
        let dir = crate::testkit::tmp::TempDir::new("metrics-money");
        let s = crate::store::file::FileStore::open(dir.path()).unwrap();
        let mut job = crate::testkit::jobs::command_job("alpha", 60);
        job.max_cost_usd = Some(0.7);
        let t0 = Utc::now();
        let file = JobsFile {
            settings: Settings {
                budget: Some(Budget {
                    max_cost_usd: 0.7,
                    period: BudgetPeriod::Total,
                }),
                ..Settings::default()
            },
            jobs: vec![job.clone()],
        };
        s.apply(&file, crate::testkit::jobs::stored_for_first_slot(&job, t0))
            .unwrap();
        for (k, cost) in [0.1, 0.2].into_iter().enumerate() {
            let at = t0 + chrono::Duration::seconds(60 * k as i64);
            let c = s.claim_at(at, "o", 1).claims.remove(0);
            let mut row = claim_row(&c, "o", Status::Succeeded, at);
            row.cost_usd = cost;
            m.observe_row(&row);
            s.finish_row(&c, row);
        }
        m.refresh_from_store(&s, t0 + chrono::Duration::seconds(90))
            .unwrap();
        let text = m.encode();
        for want in [
            r#"cronsole_spend_usd_total{job="alpha"} 0.3"#,
            r#"cronsole_budget_remaining_usd{scope="global"} 0.4"#,
            r#"cronsole_budget_remaining_usd{scope="job:alpha"} 0.4"#,
        ] {
            assert!(text.lines().any(|l| l == want), "{want} missing:\n{text}");
        }
    }

    #[test]
    fn rows_feed_counters_and_histograms_and_job_labels_are_bounded() {
        let m = Metrics::new();
        let now = Utc::now();
        let mut r = HistoryRow::new(
            "alpha",
            Status::Succeeded,
            Trigger::Schedule,
            None,
            "o",
            now,
        );
        r.duration_ms = 1500;
        r.cost_usd = 0.25;
        m.observe_row(&r);
        m.observe_start("alpha", Some(now - chrono::Duration::milliseconds(20)), now);
        let text = m.encode();
        assert!(
            text.contains(r#"cronsole_runs_total{job="alpha",status="succeeded"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"cronsole_spend_usd_total{job="alpha"} 0.25"#),
            "{text}"
        );
        assert!(
            text.contains(r#"cronsole_run_duration_seconds_sum{job="alpha"} 1.5"#),
            "{text}"
        );
        assert!(
            text.contains(r#"cronsole_fire_lateness_seconds_count{job="alpha"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"cronsole_jobs{state="paused"} 0"#),
            "{text}"
        );
        for i in 0..MAX_JOB_LABELS + 5 {
            m.observe_row(&HistoryRow::new(
                &format!("j{i}"),
                Status::Failed,
                Trigger::Schedule,
                None,
                "o",
                now,
            ));
        }
        let text = m.encode();
        assert!(
            text.contains(r#"cronsole_runs_total{job="_other",status="failed"} 6"#),
            "past the bound, names fold into _other"
        );
    }
}

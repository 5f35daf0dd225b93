//! Hand-made snapshots for the console's tests and benchmark: a fixed store picture at a fixed
//! instant, so whole-screen snapshots are byte-for-byte stable, and a generator for big stores.
//!
//! Owns: fixture data only (compiled for tests and the `testkit` feature). Must not touch: the
//! store, the clock, the terminal.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Duration, Utc};
use uuid::Uuid;

use crate::model::{
    Action, AgentDef, Budget, BudgetPeriod, Gate, HistoryRow, JobCounters, JobDef, JobRecord,
    JobRuntime, JobState, Lease, MonitorSource, Provider, Settings, Status, Trigger,
};
use crate::schedule::ScheduleSpec;
use crate::snapshot::{JobRow, Snapshot};
use crate::store::StoreResult;

/// The monitor job of [`fixed`], which has several diffs.
pub const MONITOR_JOB: &str = "price-watch";
/// The owner id of the fixture's own engine (its leases are this process's runs).
pub const OWNER: &str = "host-a:4242:1a2b3c4d";
/// Another owner's id: leases held by a second host.
pub const FOREIGN: &str = "host-b:777:deadbeef";

/// An RFC 3339 instant (the minimum instant for text that does not parse).
pub fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .map(|d| d.to_utc())
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// The fixed "now" of [`fixed`].
pub fn now() -> DateTime<Utc> {
    t("2026-11-29T12:00:00Z")
}

/// A plain `every` command job with an idle runtime.
pub fn job(name: &str, every_seconds: u64, now: DateTime<Utc>) -> JobRecord {
    let def = JobDef {
        timeout_seconds: 60.0,
        max_retries: 0,
        lease_seconds: 60.0,
        ..crate::testkit::jobs::command_job(name, every_seconds)
    };
    let anchor = now - Duration::days(3);
    let rt = JobRuntime {
        created_at: anchor,
        anchor,
        next_slot: Some(now + Duration::seconds(every_seconds as i64 / 2)),
        last_slot: None,
        last_run_at: None,
        last_status: None,
        runs: 0,
        paused: false,
        retired: false,
        retired_reason: None,
        lease: None,
        trigger_requested_at: None,
        queue: Vec::new(),
        pause_reason: None,
        hold_until: None,
        recovery_pending: false,
        last_success_result: None,
        last_success_at: None,
        counters: JobCounters {
            period_key: BudgetPeriod::Day.key(now),
            ..Default::default()
        },
        state: JobState::default(),
        overlap: Default::default(),
        chain_pending: Default::default(),
        chain_seen: Default::default(),
        abandoned: Vec::new(),
        moved_back: None,
        rederived: None,
    };
    JobRecord { def, rt }
}

fn ran(j: &mut JobRecord, status: Status, ago_s: i64, runs: u64, now: DateTime<Utc>) {
    j.rt.last_run_at = Some(now - Duration::seconds(ago_s));
    j.rt.last_slot = j.rt.last_run_at;
    j.rt.last_status = Some(status);
    j.rt.runs = runs;
    j.rt.counters.by_status.insert(status, runs);
}

fn lease(owner: &str, claimed: DateTime<Utc>, until: DateTime<Utc>) -> Lease {
    Lease {
        owner: owner.into(),
        run_id: Uuid::from_u128(claimed.timestamp() as u128),
        slot: Some(claimed),
        trigger: Trigger::Schedule,
        claimed_at: claimed,
        lease_until: until,
        last_renewed: claimed,
        spends_job: false,
        coalesced: None,
        cancel_requested_at: None,
        lapsed: false,
        chain: Vec::new(),
        awaiting: None,
    }
}

/// A history row with a deterministic run id.
pub fn row(n: u128, job: &str, status: Status, at: DateTime<Utc>) -> HistoryRow {
    let mut r = HistoryRow::new(job, status, Trigger::Schedule, Some(at), OWNER, at);
    r.run_id = Uuid::from_u128(n);
    r.finished_at = at + Duration::seconds(2);
    r.duration_ms = 2000;
    r.attempts = 1;
    r
}

/// The whole records behind [`fixed`]'s rows, sorted by name.
pub fn fixed_jobs(now: DateTime<Utc>) -> Vec<JobRecord> {
    let mut jobs = Vec::new();

    let mut a = job("backup-db", 3600, now);
    ran(&mut a, Status::Succeeded, 3590, 71, now);
    a.rt.lease = Some(lease(
        OWNER,
        now - Duration::seconds(20),
        now + Duration::seconds(40),
    ));
    jobs.push(a);

    let mut b = job("backup-logs", 21_600, now);
    ran(&mut b, Status::Failed, 7200, 12, now);
    // An open incident that was alerted on: the table marks it.
    b.rt.state.incident.alerted_signature = Some("exit status 2".into());
    b.rt.state.incident.consecutive_failures = 3;
    jobs.push(b);

    let mut c = job("daily-report", 86_400, now);
    c.def.schedule = ScheduleSpec::At {
        at: t("2026-11-29T07:00:00Z"),
    };
    c.def.schedule_text = "at 2026-11-29 07:00".into();
    c.def.max_runs = Some(1);
    c.rt.next_slot = None;
    c.rt.retired = true;
    ran(&mut c, Status::Succeeded, 5 * 3600, 1, now);
    jobs.push(c);

    let mut d = job(MONITOR_JOB, 300, now);
    d.def.gate = Some(Gate::Monitor {
        source: MonitorSource::Url {
            url: "https://example.com/prices".into(),
            allow_private: false,
        },
    });
    d.def.action = Action::Agent {
        agent: "analyst".into(),
        message: "What changed?".into(),
        tools: None,
    };
    d.def.max_cost_usd = Some(0.5);
    ran(&mut d, Status::NoChange, 100, 230, now);
    d.rt.counters.period_cost_usd = 0.4213;
    d.rt.counters.total_cost_usd = 3.2;
    d.rt.state
        .notepad
        .insert("last_price".into(), "41.99".into());
    d.rt.state.notepad.insert("trend".into(), "down".into());
    jobs.push(d);

    let mut e = job("summarise-news", 1800, now);
    e.def.action = Action::Agent {
        agent: "writer".into(),
        message: "Summarise".into(),
        tools: None,
    };
    ran(&mut e, Status::Skipped, 900, 40, now);
    e.rt.paused = true;
    e.rt.pause_reason = Some("API quota".into());
    e.rt.counters.period_cost_usd = 0.3011;
    e.rt.counters.cost_incomplete = true;
    jobs.push(e);

    let mut f = job("stuck-sync", 600, now);
    ran(&mut f, Status::Abandoned, 1500, 9, now);
    f.rt.lease = Some(lease(
        FOREIGN,
        now - Duration::seconds(900),
        now - Duration::seconds(300),
    ));
    jobs.push(f);

    let mut g = job("rate-limited", 120, now);
    ran(&mut g, Status::Missed, 400, 55, now);
    g.rt.hold_until = Some(now + Duration::seconds(600));
    jobs.push(g);

    let mut h = job("zz-new", 60, now);
    h.rt.next_slot = Some(now + Duration::seconds(42));
    // A trigger no owner has taken yet: shown as queued.
    h.rt.trigger_requested_at = Some(now - Duration::seconds(5));
    jobs.push(h);

    jobs.sort_by(|x, y| x.def.name.cmp(&y.def.name));
    jobs
}

/// The whole record of a job of [`fixed`] or [`big`] (what the detail view reads from the
/// store), at the fixtures' "now".
pub fn record(name: &str) -> Option<JobRecord> {
    let now = now();
    if let Some(i) = name
        .strip_prefix("job-")
        .and_then(|n| n.parse::<usize>().ok())
    {
        return Some(big_job(i, now));
    }
    fixed_jobs(now).into_iter().find(|j| j.def.name == name)
}

/// The fixed snapshot used by the whole-screen tests, and its "now".
pub fn fixed() -> (Snapshot, DateTime<Utc>) {
    let now = now();
    let jobs = fixed_jobs(now);

    let mut recent = Vec::new();
    let mut n = 1000u128;
    let mut push = |job: &str, st: Status, ago: i64, f: &dyn Fn(&mut HistoryRow)| {
        n += 1;
        let mut r = row(n, job, st, now - Duration::seconds(ago));
        f(&mut r);
        recent.push(r);
    };
    push(MONITOR_JOB, Status::NoChange, 100, &|_| {});
    push("backup-db", Status::Succeeded, 3590, &|r| {
        r.result = Some("dumped 3 tables".into())
    });
    push(MONITOR_JOB, Status::Succeeded, 1300, &|r| {
        r.diff = Some(
            "--- before\n+++ after\n@@ -1,3 +1,3 @@\n widget A\n-price: 44.50\n+price: 41.99\n stock: 12\n"
                .into(),
        );
        r.model = Some("gpt-4o-mini".into());
        r.cost_usd = 0.0021;
        r.result = Some("Price of widget A fell 5.6%.".into());
    });
    push("summarise-news", Status::Skipped, 900, &|r| {
        r.reason = Some("budget exhausted".into())
    });
    push("summarise-news", Status::Failed, 1000, &|r| {
        r.error = Some("API key env var OPENAI_API_KEY is not set (agent 'writer')".into());
        r.attempts = 1;
    });
    push("stuck-sync", Status::Abandoned, 1500, &|r| {
        r.owner = FOREIGN.into();
        r.reason = Some("lease expired without completion".into());
    });
    push("rate-limited", Status::Missed, 2400, &|r| {
        r.slots_count = Some(3);
        r.reason = Some("3 slots missed while no owner ran".into());
    });
    push(MONITOR_JOB, Status::Succeeded, 7000, &|r| {
        r.diff = Some("--- before\n+++ after\n@@ -1 +1 @@\n-price: 45.00\n+price: 44.50\n".into());
        r.cost_usd = 0.0019;
    });
    push("backup-logs", Status::Failed, 7200, &|r| {
        r.error = Some("exit status 2: tar: /var/log/x: Cannot open".into())
    });
    push(MONITOR_JOB, Status::Succeeded, 20_000, &|r| {
        r.diff = Some("--- before\n+++ after\n@@ -0,0 +1 @@\n+price: 45.00\n".into());
    });
    recent.sort_by_key(|r| std::cmp::Reverse(r.finished_at));

    let mut counts_24h = BTreeMap::new();
    for r in &recent {
        *counts_24h.entry(r.status).or_insert(0u64) += 1;
    }
    let spend_per_hour: Vec<f64> = (0..24).map(|h| ((h * 7) % 11) as f64 * 0.01).collect();

    let settings = Settings {
        budget: Some(Budget {
            max_cost_usd: 1.0,
            period: BudgetPeriod::Day,
        }),
        agents: [
            ("analyst", Provider::Anthropic, "ANTHROPIC_API_KEY"),
            ("writer", Provider::Openai, "OPENAI_API_KEY"),
        ]
        .into_iter()
        .map(|(name, provider, key)| {
            let a = AgentDef {
                name: name.into(),
                provider,
                base_url: String::new(),
                api_key_env: key.into(),
                model: "gpt-4o-mini".into(),
                instructions: String::new(),
                max_tokens: None,
                temperature: None,
                tools: Vec::new(),
                approve: Vec::new(),
                limits: Default::default(),
            };
            (name.to_string(), a)
        })
        .collect(),
        ..Default::default()
    };
    let forecast = Some(crate::forecast::compute(&jobs, &settings, now));
    let snap = Snapshot {
        taken_at: now,
        store: "/srv/cronsole/.cronsole".into(),
        owner: OWNER.into(),
        started_at: now - Duration::seconds(3 * 3600 + 125),
        engine_running: true,
        owners_seen: vec![OWNER.into(), FOREIGN.into()],
        engine_seen: true,
        settings,
        period_spend_usd: 0.7224,
        period_held_usd: 0.0,
        spend_incomplete: true,
        jobs: jobs.iter().map(JobRow::of).collect(),
        loading: false,
        recent,
        counts_24h,
        spend_per_hour,
        pending: BTreeMap::new(),
        in_flight: BTreeSet::from(["backup-db".to_string()]),
        forecast,
        too_small: Vec::new(),
    };
    (snap, now)
}

/// A big store: `n_jobs` jobs and `n_rows` history rows (newest first), for the 10 000-job
/// widget test and the benchmark.
pub fn big(n_jobs: usize, n_rows: usize) -> (Snapshot, DateTime<Utc>) {
    let (mut snap, now) = fixed();
    let jobs = (0..n_jobs).map(|i| JobRow::of(&big_job(i, now))).collect();
    let recent = (0..n_rows)
        .map(|i| {
            let mut r = row(
                i as u128,
                &format!("job-{:05}", i % n_jobs.max(1)),
                Status::ALL[i % Status::ALL.len()],
                now - Duration::seconds(i as i64),
            );
            if i % 10 == 0 {
                r.diff = Some("--- a\n+++ b\n@@ -1 +1 @@\n-x\n+y\n".into());
            }
            r
        })
        .collect();
    snap.jobs = jobs;
    snap.recent = recent;
    (snap, now)
}

/// Job `i` of [`big`].
fn big_job(i: usize, now: DateTime<Utc>) -> JobRecord {
    let mut j = job(&format!("job-{i:05}"), 60 + (i as u64 % 50) * 60, now);
    let st = Status::ALL[i % Status::ALL.len()];
    ran(&mut j, st, (i % 3600) as i64, i as u64 % 500, now);
    j.rt.counters.period_cost_usd = (i % 13) as f64 * 0.001;
    if i.is_multiple_of(97) {
        j.rt.lease = Some(lease(
            OWNER,
            now - Duration::seconds(10),
            now + Duration::seconds(50),
        ));
    }
    j
}

/// Answer the detail view's read of a job's whole record as the console's event loop would
/// (when the app wants one): with `rec`, or the fixtures' record of that name.
pub fn read_record(app: &mut crate::tui::state::App, rec: Option<JobRecord>) {
    if let Some(crate::tui::state::Query::Job(job)) = app.record_wanted() {
        let record = rec.or_else(|| record(&job)).map(Box::new);
        app.on_loaded(crate::tui::state::Loaded::Job { job, record });
    }
}

/// A history reader over a list of rows (and the fixtures' records, by name): enough for the console's on-demand reads (detail, `h`,
/// diffs) in tests and the `console_fixture` example.
#[derive(Debug, Clone, Default)]
pub struct HistoryOnlyStore(pub Vec<HistoryRow>);

impl crate::store::HistoryReader for HistoryOnlyStore {
    fn job(&self, name: &str) -> StoreResult<Option<JobRecord>> {
        Ok(record(name))
    }
    fn history(&self, q: &crate::store::HistoryQuery) -> StoreResult<Vec<HistoryRow>> {
        Ok(self
            .0
            .iter()
            .filter(|r| q.job.as_ref().is_none_or(|j| &r.job == j))
            .filter(|r| q.status.is_none_or(|s| r.status == s))
            .filter(|r| q.since.is_none_or(|s| r.finished_at >= s))
            .filter(|r| !q.with_diff || r.diff.is_some())
            .take(q.limit)
            .cloned()
            .collect())
    }
}

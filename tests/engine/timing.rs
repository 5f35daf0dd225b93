//! Engine timing under paused tokio time (`start_paused = true` + `TokioClock`): the actor sleeps
//! until the store's next wake-up and fires each slot exactly on the grid, with no polling drift,
//! across many virtual minutes that take milliseconds of real time.
//!
//! The job is an agent job with an empty message: the pipeline ends at once with `skipped` ("no
//! message") without processes or sockets, which would let paused time jump ahead of them.
#![allow(clippy::unwrap_used)] // test code

use crate::support;

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::{DateTime, SubsecRound, Utc};
use cronsole::clock::{Clock, TokioClock};
use cronsole::config;
use cronsole::engine::{self, EngineConfig};
use cronsole::model::{Status, Trigger};
use cronsole::store::file::FileStore;
use cronsole::store::{HistoryQuery, Store};
use cronsole::testkit::internals::action::BackoffConfig;

#[tokio::test(start_paused = true)]
async fn slots_fire_exactly_on_the_grid_in_virtual_time() {
    let dir = support::tempdir("timing");
    let yaml = "budget: null
agents:
  a: { provider: openai, base_url: http://127.0.0.1:9/v1, api_key_env: NOPE, model: m, instructions: x }
jobs:
  - name: tick
    schedule: every 10s
    agent: a
    message: \"\"
";
    let loaded = config::load_str(yaml, &dir.join("jobs.yaml")).unwrap_or_else(|e| panic!("{e}"));
    let start: DateTime<Utc> = DateTime::parse_from_rfc3339("2026-11-29T12:00:00.250Z")
        .unwrap()
        .to_utc();
    let store: Arc<dyn Store> = Arc::new(FileStore::open(&dir).unwrap());
    store.apply(&loaded.file, start).unwrap();
    let clock = TokioClock::new(start);
    let deps = cronsole::testkit::engine::run_deps(
        cronsole::testkit::engine::no_env(),
        BackoffConfig::default(),
    );
    let c: Arc<dyn Clock> = Arc::new(clock);
    let handle = engine::spawn(
        EngineConfig::new("timing".into()),
        Arc::clone(&store),
        c,
        deps,
    )
    .unwrap();
    // 5 virtual minutes.
    tokio::time::sleep(StdDuration::from_secs(300) + StdDuration::from_millis(5)).await;
    handle.shutdown.cancel();
    handle.join.await.unwrap().unwrap();
    let mut rows = store
        .history(&HistoryQuery {
            limit: 1000,
            ..Default::default()
        })
        .unwrap();
    rows.reverse();
    // The grid starts on the whole second the job is stored in; the first slot is one
    // interval later, then every 10 s.
    assert_eq!(rows.len(), 30, "slots at +10, +20 … +300 s: {rows:#?}");
    let anchor = start.trunc_subsecs(0);
    for (k, r) in rows.iter().enumerate() {
        let slot = anchor + chrono::Duration::seconds(10 * (k as i64 + 1));
        assert_eq!(r.slot, Some(slot), "row {k}");
        assert_eq!(r.status, Status::Skipped);
        assert_eq!(r.reason.as_deref(), Some("no message"));
        assert_eq!(r.trigger, Trigger::Schedule);
        let late = r.started_at - slot;
        assert!(
            late >= chrono::Duration::zero() && late < chrono::Duration::milliseconds(5),
            "row {k} started {late} after its slot"
        );
    }
}

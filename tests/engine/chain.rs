//! `after:` chains through the engine under paused tokio time: each run of
//! the parent that ends as the entry says starts the child once, at once, with `trigger: chain`
//! and the parent's run id; runs that do not match start nothing.
//!
//! No processes or sockets (paused time would jump ahead of them): the parent is an agent job
//! whose agent the store's settings do not define (it fails at once, "agent 'ghost' is not
//! defined"), the children agent jobs with an empty message (`skipped`, "no message").
#![allow(clippy::unwrap_used)] // test code

use crate::engine_support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Utc};
use cronsole::clock::{Clock, TokioClock};
use cronsole::config;
use cronsole::engine::{self, EngineConfig};
use cronsole::model::{Action, Status, Trigger};
use cronsole::store::file::FileStore;
use cronsole::store::{HistoryQuery, Store};
use cronsole::testkit::internals::action::BackoffConfig;
use cronsole::testkit::llm::{FakeLlm, Reply};

#[tokio::test(start_paused = true)]
async fn each_failed_parent_run_starts_the_child_once_at_once() {
    let dir = cronsole::testkit::tmp::TempDir::new("chain-eng");
    let yaml = "budget: null
agents:
  a: { provider: openai, base_url: http://127.0.0.1:9/v1, api_key_env: NOPE, model: m, instructions: x }
jobs:
  - name: parent
    schedule: every 10s
    agent: a
    message: go
  - name: on-failure
    after: {job: parent, on: failure}
    agent: a
    message: \"\"
  - name: on-success
    after: {job: parent, on: success}
    agent: a
    message: \"\"
";
    let mut loaded =
        config::load_str(yaml, &dir.join("jobs.yaml")).unwrap_or_else(|e| panic!("{e}"));
    // The parent's agent is missing from the store's settings: every run fails at once.
    loaded.file.jobs[0].action = Action::Agent {
        agent: "ghost".into(),
        message: "go".into(),
        tools: None,
    };
    let start: DateTime<Utc> = DateTime::parse_from_rfc3339("2026-11-29T12:00:00Z")
        .unwrap()
        .to_utc();
    let store: Arc<dyn Store> = Arc::new(FileStore::open(&dir).unwrap());
    store.apply(&loaded.file, start).unwrap();
    let deps = cronsole::testkit::engine::run_deps(
        cronsole::testkit::engine::no_env(),
        BackoffConfig::default(),
    );
    let c: Arc<dyn Clock> = Arc::new(TokioClock::new(start));
    let handle = engine::spawn(
        EngineConfig::new("chain".into()),
        Arc::clone(&store),
        c,
        deps,
    )
    .unwrap();
    // Parent slots at +10, +20, +30, +40 (the first one interval after the store).
    tokio::time::sleep(StdDuration::from_secs(45)).await;
    handle.shutdown.cancel();
    handle.join.await.unwrap().unwrap();
    let mut rows = store
        .history(&HistoryQuery {
            limit: 1000,
            ..Default::default()
        })
        .unwrap();
    rows.reverse();
    let parent: Vec<_> = rows.iter().filter(|r| r.job == "parent").collect();
    let child: Vec<_> = rows.iter().filter(|r| r.job == "on-failure").collect();
    assert_eq!(parent.len(), 4, "{rows:#?}");
    assert!(
        parent.iter().all(|r| r.status == Status::Failed),
        "{parent:#?}"
    );
    assert_eq!(
        child.len(),
        4,
        "one chained run per failed parent run: {rows:#?}"
    );
    for (p, c) in parent.iter().zip(&child) {
        assert_eq!(c.trigger, Trigger::Chain);
        assert_eq!(c.parent_run_id, Some(p.run_id));
        assert_eq!(c.parent_job.as_deref(), Some("parent"));
        assert_eq!(c.slot, None);
        let lag = c.started_at - p.finished_at;
        assert!(
            lag >= chrono::Duration::zero() && lag < chrono::Duration::seconds(1),
            "the child starts right after its parent ends ({lag})"
        );
    }
    assert!(
        rows.iter().all(|r| r.job != "on-success"),
        "a failed parent starts no `on: success` child: {rows:#?}"
    );
    let rec = store.job("on-failure").unwrap().unwrap();
    assert!(rec.rt.chain_pending.is_empty() && !rec.rt.retired);
}

/// The parent's output reaches a chained agent's prompt as the `context_from` block does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_parent_output_reaches_the_chained_agents_prompt() {
    let key = format!("sk-MARKER-{}", uuid::Uuid::new_v4().simple());
    let fake = FakeLlm::openai(&key, vec![Reply::ok("triaged", 100, 10)])
        .await
        .unwrap();
    let yaml = format!(
        "budget: null\npricing:\n  test-model: {{ input: 1.0, output: 2.0 }}\nagents:\n  a:\n    provider: openai\n    base_url: {}\n    api_key_env: TEST_KEY\n    model: test-model\n    instructions: be brief\njobs:\n  - name: collect\n    schedule: every 1h\n    command: echo collected-42\n  - name: triage\n    after: collect\n    agent: a\n    message: triage what collect found\n",
        fake.base_url()
    );
    let rig = engine_support::Rig::start(
        "chain-prompt",
        &yaml,
        engine_support::RigOpts {
            env: HashMap::from([("TEST_KEY".to_string(), key.clone())]),
            ..Default::default()
        },
    )
    .await;
    let rows = rig.wait_rows("triage", 1).await;
    let collect = rig.rows("collect");
    assert_eq!(rows[0].status, Status::Succeeded, "{rows:#?}");
    assert_eq!(rows[0].trigger, Trigger::Chain);
    assert_eq!(rows[0].parent_run_id, Some(collect[0].run_id));
    let req = &fake.requests()[0];
    let body = req.body_text();
    assert!(
        body.contains("triage what collect found")
            && body.contains("### Context from 'collect'")
            && body.contains("collected-42"),
        "{body}"
    );
    rig.stop().await;
}

//! Schedule behaviour through the engine: an `every` one-shot fires exactly
//! once and retires, `run_immediately` fires at first sight then follows the schedule, a manual
//! trigger (`Command::Trigger`) runs once with `trigger: manual`, and `Command::Pause` stops slots
//! until resumed.
#![allow(clippy::unwrap_used)] // test code

use crate::engine_support::*;
use cronsole::engine::Command;
use cronsole::model::{Status, Trigger};

fn one_job(body: &str) -> String {
    format!("budget: null\njobs:\n  - name: j\n    max_retries: 1\n{body}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_every_one_shot_fires_exactly_once_and_retires() {
    let rig = Rig::start(
        "once",
        &one_job("    schedule: every 60s\n    once: true\n    command: echo once\n"),
        RigOpts::default(),
    )
    .await;
    let rows = rig.wait_rows("j", 1).await;
    assert_eq!(rows[0].status, Status::Succeeded);
    for _ in 0..4 {
        rig.advance(60);
        assert_eq!(rig.settle("j").await.len(), 1, "a one-shot fired twice");
    }
    let rec = rig.store.job("j").unwrap().unwrap();
    assert!(rec.rt.retired, "{:?}", rec.rt);
    // (rt.next_slot keeps the pre-advanced slot after retirement; only `retired` is asserted.)
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_immediately_fires_at_first_sight_then_follows_the_schedule() {
    // A daily cron job first seen at 12:00: without run_immediately it would wait for midnight.
    let rig = Rig::start(
        "immediate",
        &one_job("    schedule: \"0 0 * * *\"\n    run_immediately: true\n    command: echo now\n"),
        RigOpts::default(),
    )
    .await;
    let rows = rig.wait_rows("j", 1).await;
    assert_eq!(rows[0].trigger, Trigger::Immediate, "{rows:#?}");
    assert_eq!(rows[0].status, Status::Succeeded);
    rig.advance(3600);
    assert_eq!(
        rig.settle("j").await.len(),
        1,
        "fired again before its next slot"
    );
    rig.clock.set(t("2026-11-30T00:00:00Z"));
    let rows = rig.wait_rows("j", 2).await;
    assert_eq!(rows[1].trigger, Trigger::Schedule);
    assert_eq!(rows[1].slot, Some(t("2026-11-30T00:00:00Z")));
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_trigger_runs_once_with_trigger_manual() {
    let rig = Rig::start(
        "manual",
        &one_job("    schedule: every 1h\n    command: echo manual\n"),
        RigOpts::default(),
    )
    .await;
    rig.wait_rows("j", 1).await; // the anchor slot
    let next_before = rig.store.job("j").unwrap().unwrap().rt.next_slot;
    rig.command(Command::Trigger("j".into())).await;
    let rows = rig.wait_rows("j", 2).await;
    assert_eq!(rows[1].trigger, Trigger::Manual, "{rows:#?}");
    assert_eq!(rows[1].slot, None);
    assert_eq!(rows[1].status, Status::Succeeded);
    assert_eq!(
        rig.settle("j").await.len(),
        2,
        "a trigger runs exactly once"
    );
    let next_after = rig.store.job("j").unwrap().unwrap().rt.next_slot;
    assert_eq!(
        next_before, next_after,
        "a manual run does not move the schedule"
    );
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_stops_slots_and_resume_continues_at_the_next_future_slot() {
    let rig = Rig::start(
        "pause",
        &one_job("    schedule: every 60s\n    command: echo tick\n"),
        RigOpts::default(),
    )
    .await;
    let t0 = rig.now();
    rig.wait_rows("j", 1).await;
    rig.command(Command::Pause("j".into())).await;
    // Wait until the store says paused, then let three slots pass.
    poll_until_async(std::time::Duration::from_secs(2), || {
        rig.store.job("j").unwrap().unwrap().rt.paused
    })
    .await;
    assert!(rig.store.job("j").unwrap().unwrap().rt.paused);
    for _ in 0..3 {
        rig.advance(60);
        assert_eq!(rig.settle("j").await.len(), 1, "a paused job fired");
    }
    rig.advance(30); // t0 + 210
    rig.command(Command::Resume("j".into())).await;
    assert_eq!(
        rig.settle("j").await.len(),
        1,
        "paused slots are not replayed"
    );
    let rows = rig.step("j", 30, 2).await; // t0 + 240: next future slot
    assert_eq!(
        rows[1].slot,
        Some(t0 + chrono::Duration::seconds(240)),
        "{rows:#?}"
    );
    assert_eq!(rows[1].trigger, Trigger::Schedule);
    rig.stop().await;
}

/// A wall-clock step while a run is in flight: the row says so (`clock stepped +2d`) and its
/// duration is the time that really passed, not two days; the engine logs the step at its
/// next claim cycle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clock_step_during_a_run_is_said_on_its_row_and_logged() {
    let gate = tmp("step-gate");
    let go = gate.path().join("go");
    let started = gate.path().join("started");
    let rig = Rig::start(
        "step",
        &one_job(&format!(
            "    schedule: every 1h\n    command: \"touch {}; while [ ! -f {} ]; do sleep 0.02; done; echo done\"\n",
            started.display(),
            go.display()
        )),
        RigOpts::default(),
    )
    .await;
    let mut events = rig.handle.events.subscribe();
    wait_until_async(
        "the run to start",
        std::time::Duration::from_secs(30),
        || started.exists(),
    )
    .await;
    rig.clock.step(chrono::Duration::days(2));
    std::fs::write(&go, "").unwrap();
    let rows = rig.wait_rows("j", 1).await;
    assert_eq!(rows[0].status, Status::Succeeded, "{rows:#?}");
    assert_eq!(rows[0].clock_stepped.as_deref(), Some("+2d"), "{rows:#?}");
    assert!(rows[0].duration_ms < 60_000, "{rows:#?}");
    // The next claim cycle (an hour later, the next slot is due) logs the step.
    rig.advance(3600);
    let notice = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        loop {
            if let Ok(cronsole::engine::Event::Notice(n)) = events.recv().await
                && n.starts_with("wall clock stepped +2d")
            {
                return n;
            }
        }
    })
    .await
    .expect("the step is noticed");
    assert!(notice.contains("passed"), "{notice}");
    rig.stop().await;
}

/// The first claim after a wall-clock step decides on the stepped clock, and its rows say so:
/// the `missed` row of a job with a misfire grace and the coalesced run of one without. The
/// claims after it are plain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_of_the_first_claim_after_a_step_say_the_clock_stepped() {
    let yaml = "jobs:\n  - name: g\n    schedule: every 60s\n    misfire_grace_seconds: 5\n    \
                command: \"true\"\n  - name: c\n    schedule: every 60s\n    command: \"true\"\n";
    let rig = Rig::start("step-rows", yaml, RigOpts::default()).await;
    rig.wait_rows("g", 1).await;
    rig.wait_rows("c", 1).await;
    rig.clock.step(chrono::Duration::days(2));
    let g = rig.wait_rows("g", 2).await;
    let c = rig.wait_rows("c", 2).await;
    assert_eq!(g[1].status, Status::Missed, "{g:#?}");
    assert_eq!(g[1].clock_stepped.as_deref(), Some("+2d"), "{g:#?}");
    assert_eq!(c[1].status, Status::Succeeded, "{c:#?}");
    assert!(c[1].slots_count.is_some_and(|n| n > 1), "{c:#?}");
    assert_eq!(c[1].clock_stepped.as_deref(), Some("+2d"), "{c:#?}");
    // Set right, then a minute on (`g`'s next slot) and another (`c`'s: its coalesced run
    // stood for the first minute): the next runs say nothing of a step.
    rig.clock.step(chrono::Duration::days(-2));
    rig.settle("c").await;
    rig.advance(60);
    let g = rig.wait_rows("g", 3).await;
    rig.advance(60);
    let c = rig.wait_rows("c", 3).await;
    for r in [&g[2], &c[2]] {
        assert_eq!(r.status, Status::Succeeded, "{r:#?}");
        assert_eq!(r.clock_stepped, None, "{r:#?}");
    }
    rig.stop().await;
}

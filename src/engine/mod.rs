//! The engine: the actor that turns the store into runs. It sleeps until the earliest instant
//! the store says something may be claimable, claims with its free run capacity as the limit,
//! spawns one task per run, renews leases while runs are alive, and publishes a [`Snapshot`](crate::snapshot::Snapshot) (on
//! a `watch` channel) and [`Event`]s (on a `broadcast` channel) for front ends. Front ends send
//! [`Command`]s over mpsc.
//!
//! One file per concern, each importing only the ones below it: `api` (commands, events,
//! settings), `error`, `heartbeat` (proof of life), `notice` (the words an operator reads),
//! `spool` (the spool file), `completion` (group commit, fenced writes), `outage` (store health,
//! claims stopped, backoff, spool replay, the result at stop), `renew` (a run's lease renewal),
//! `run` (the pipeline of one run) and `chain` (what a chained run receives from its parents),
//! `task` (one run task), `claim`, `commands` (front ends' commands, operator cancels),
//! `publish` (snapshot pacing), `shutdown` (grace, hurry), `actor` (the loop), `start`
//! ([`spawn`]). This file only names them.
//!
//! Owns: timing, claims, run tasks, lease renewal, shutdown. Must not touch: the UI or the
//! terminal (front ends talk to it only through the channels).
//!
//! # Driving an engine
//!
//! A front end sends [`Command`]s and reads [`Event`]s and [`Snapshot`](crate::snapshot::Snapshot)s. Here a job that runs
//! once a year is run now, then paused, each wait bounded in time (the crate root shows a
//! scheduled run):
//!
//! ```
//! use std::path::Path;
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use cronsole::clock::SystemClock;
//! use cronsole::engine::{self, Command, EngineConfig, Event, RunDeps};
//! use cronsole::model::{Status, Trigger};
//! use cronsole::store::{Store, file::FileStore};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let store: Arc<dyn Store> = Arc::new(FileStore::open(&dir.path().join("store"))?);
//! let jobs = cronsole::config::load_str(
//!     "jobs:\n  - name: report\n    schedule: \"0 6 1 1 *\"\n    command: echo report\n",
//!     Path::new("jobs.yaml"),
//! )?;
//! store.apply(&jobs.file, chrono::Utc::now())?;
//!
//! let engine = engine::spawn(
//!     EngineConfig::new(engine::new_owner_id()),
//!     Arc::clone(&store),
//!     Arc::new(SystemClock),
//!     RunDeps::from_env()?,
//! )?;
//! let mut events = engine.events.subscribe();
//!
//! // What the console draws: a row per job; this one's next slot is 1 January.
//! let next = engine.snapshots.borrow().jobs[0].rt.next_slot;
//! assert!(next > Some(chrono::Utc::now()));
//!
//! // Run it now (`t` in the console, `cronsole trigger report` from a shell).
//! engine.commands.send(Command::Trigger("report".into())).await?;
//! let row = tokio::time::timeout(Duration::from_secs(30), async {
//!     loop {
//!         if let Event::Row(row) = events.recv().await? {
//!             return Ok::<_, tokio::sync::broadcast::error::RecvError>(row);
//!         }
//!     }
//! })
//! .await??;
//! assert_eq!((row.trigger, row.status), (Trigger::Manual, Status::Succeeded));
//! assert_eq!(row.slot, None);
//!
//! // Commands are handled in order: the pause is in the store before the engine stops.
//! engine.commands.send(Command::Pause("report".into())).await?;
//! engine.commands.send(Command::Shutdown).await?;
//! tokio::time::timeout(Duration::from_secs(30), engine.join).await???;
//! assert!(store.job("report")?.is_some_and(|j| j.rt.paused));
//! # Ok(())
//! # }
//! ```

mod actor;
mod api;
pub(crate) mod capacity;
pub(crate) mod chain;
mod claim;
mod commands;
mod completion;
mod error;
mod heartbeat;
mod notice;
mod outage;
mod owner;
mod publish;
mod renew;
pub(crate) mod run;
mod shutdown;
pub(crate) mod spool;
mod start;
mod task;

pub(crate) use api::default_max_clock_offset;
pub use api::{Command, EngineConfig, Event, new_owner_id};
#[cfg(any(test, feature = "testkit"))]
pub(crate) use commands::operator;
pub(crate) use commands::{JudgeAt, answer_call, cancel_and_say, cancel_notice};
pub use error::{EngineError, blocking};
pub use heartbeat::Heartbeat;
pub(crate) use notice::{call_owner, operator_notice_waiting, trigger_notice_waiting};
pub use outage::{EngineHealth, probe_delay, store_backoff};
pub use run::RunDeps;
pub use start::{EngineHandle, spawn};

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration as StdDuration;

    use super::*;
    use crate::store::Store;

    /// An engine over a store larger than one page publishes the first page at once
    /// (marked loading) and the whole store from a build off its own task.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_first_snapshot_is_one_page_and_the_whole_store_follows() {
        use crate::model::JobsFile;
        use crate::store::file::FileStore;
        let dir = crate::testkit::tmp::TempDir::new("engine-first-page");
        let store: Arc<dyn Store> = Arc::new(FileStore::open(&dir).unwrap());
        let now = chrono::Utc::now();
        let n = crate::snapshot::FIRST_ROWS + 2;
        let file = JobsFile {
            jobs: (0..n)
                .map(|i| crate::testkit::jobs::command_job(&format!("j{i:06}"), 86_400))
                .collect(),
            ..Default::default()
        };
        store.apply(&file, now).unwrap();
        let deps =
            crate::testkit::engine::run_deps(crate::testkit::engine::no_env(), Default::default());
        let h = spawn(
            EngineConfig::new("first-page".into()),
            Arc::clone(&store),
            Arc::new(crate::clock::SystemClock),
            deps,
        )
        .unwrap();
        let mut rx = h.snapshots.clone();
        {
            let first = rx.borrow_and_update();
            assert_eq!(first.jobs.len(), crate::snapshot::FIRST_ROWS);
            assert!(first.loading);
        }
        let all = tokio::time::timeout(StdDuration::from_secs(60), async {
            loop {
                rx.changed().await.unwrap();
                let s = rx.borrow_and_update().clone();
                if !s.loading {
                    return s;
                }
            }
        })
        .await
        .expect("the whole snapshot within a minute");
        assert_eq!(all.jobs.len(), n);
        h.shutdown.cancel();
        h.join.await.unwrap().unwrap();
    }
}

//! cronsole: a scheduler engine for LLM-agent jobs, shell commands and change monitors, and a
//! ratatui operations console over it. See README.md and the guide in `docs/`; each module's `//!`
//! doc says what it owns and what it must not touch. The engine never imports the UI.
//!
//! # The library
//!
//! The `cronsole` binary is a thin command line over this crate; a Rust program can embed the
//! same pieces:
//!
//! - [`config`] reads and validates a jobs file (every problem with `file:line:col`);
//! - [`store`] keeps jobs, leases and history — [`store::file::FileStore`] in a directory of its
//!   own, or [`store::postgres::PgStore`] shared by several hosts — behind the [`store::Store`]
//!   trait (and the narrow [`store::HistoryReader`] for readers);
//! - [`schedule`] is the schedule grammar and its arithmetic (`every`, `at`, cron with DST);
//! - [`engine`] claims due jobs from a store, runs them and reports [`engine::Event`]s;
//! - [`tui`] is the console, driven by an engine's channels or by [`attach`] over a store that
//!   other owners run; [`snapshot`] is what it draws;
//! - [`model`] is the shared vocabulary (job definitions, history rows, statuses) and [`clock`]
//!   the injected time.
//!
//! [`cli`] is what the `cronsole` binary runs. The other modules are the engine's parts, private
//! to the crate: not an API to build on.
//!
//! The store's methods are synchronous (the file store does blocking I/O under a file lock, the
//! PostgreSQL store waits on its own runtime): a busy async program calls them through
//! `tokio::task::spawn_blocking`. The short calls in these examples are made inline.
//!
//! # Embedding the engine
//!
//! Open a store at a path of your own, apply a jobs file to it, start an engine on it and
//! receive its events — here a command job that runs once when first stored (`run_immediately`),
//! waited for at most 30 s:
//!
//! ```
//! use std::path::Path;
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use cronsole::clock::SystemClock;
//! use cronsole::engine::{self, EngineConfig, Event, RunDeps};
//! use cronsole::model::{Status, Trigger};
//! use cronsole::store::{Store, file::FileStore};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // The store's directory is yours to choose (a temporary one here, removed on drop).
//! let dir = tempfile::tempdir()?;
//! let store: Arc<dyn Store> = Arc::new(FileStore::open(&dir.path().join("store"))?);
//!
//! // A jobs file from text (`config::load_file` reads one from disk); `apply` syncs it in.
//! let jobs = cronsole::config::load_str(
//!     "jobs:\n  - name: hello\n    schedule: every 1h\n    run_immediately: true\n    command: echo hello\n",
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
//! // Subscribe before awaiting anything, so no event is missed.
//! let mut events = engine.events.subscribe();
//!
//! // Without `run_immediately` the first run would wait one interval (an hour) after the store.
//! let row = tokio::time::timeout(Duration::from_secs(30), async {
//!     loop {
//!         match events.recv().await? {
//!             Event::RunStarted { job, run_id, .. } => println!("{job}: run {run_id} started"),
//!             Event::Row(row) => return Ok::<_, tokio::sync::broadcast::error::RecvError>(row),
//!             Event::Notice(text) => println!("notice: {text}"),
//!             Event::Delivered { .. } => {}
//!         }
//!     }
//! })
//! .await??;
//! assert_eq!(row.job, "hello");
//! assert_eq!((row.status, row.trigger), (Status::Succeeded, Trigger::Immediate));
//! assert_eq!(row.result.as_deref().map(str::trim), Some("hello"));
//!
//! // A graceful stop: runs in flight may finish (up to `shutdown_grace`), then the task ends.
//! engine.shutdown.cancel();
//! engine.join.await??;
//! # Ok(())
//! # }
//! ```
//!
//! The [`engine`] module shows the other direction: [`engine::Command`]s (trigger, pause,
//! retry, cancel) sent to a running engine.
//!
//! # Opening a store
//!
//! [`store::file::FileStore::open`] creates the store on first use and opens it after;
//! [`store::file::FileStore::open_existing`] writes nothing while opening and refuses a
//! directory that holds no store, which is what a reader wants:
//!
//! ```
//! use cronsole::store::{Store, file::FileStore};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let tmp = tempfile::tempdir()?;
//! # let path = tmp.path().join("store");
//! let store = FileStore::open(&path)?;
//! println!("{} holds {} jobs", store.location(), store.jobs()?.len());
//! drop(store);
//!
//! let reader = FileStore::open_existing(&path)?;
//! assert!(reader.jobs()?.is_empty());
//! // Not a store: an error of the "bad input" kind (exit code 2), and nothing is created.
//! match FileStore::open_existing(&tmp.path().join("elsewhere")) {
//!     Err(e) => assert_eq!(e.exit_code(), 2, "{e}"),
//!     Ok(_) => panic!("opened a store that does not exist"),
//! }
//! assert!(!tmp.path().join("elsewhere").exists());
//! # Ok(())
//! # }
//! ```
//!
//! Several hosts share one PostgreSQL database instead (libpq's URL and TLS parameters; the
//! schema is created or migrated on open):
//!
//! ```no_run
//! use cronsole::store::{Store, postgres::PgStore};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = PgStore::open("postgres://cronsole@db.internal/cronsole?sslmode=verify-full")?;
//! println!("{} jobs", store.jobs()?.len());
//! # Ok(())
//! # }
//! ```
//!
//! # Reading history
//!
//! Rows come newest first, filtered by a [`store::HistoryQuery`]; a page carries the token of
//! the next (older) one, cheap at any depth:
//!
//! ```
//! use cronsole::model::Status;
//! use cronsole::store::{HistoryQuery, HistoryReader, file::FileStore};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # use std::sync::Arc;
//! # use cronsole::engine::{self, EngineConfig, Event, RunDeps};
//! # use cronsole::store::Store;
//! # let tmp = tempfile::tempdir()?;
//! # let path = tmp.path().join("store");
//! # {
//! #     let store: Arc<dyn Store> = Arc::new(FileStore::open(&path)?);
//! #     let jobs = cronsole::config::load_str(
//! #         "jobs:\n  - name: hello\n    schedule: every 1h\n    run_immediately: true\n    command: echo hello\n",
//! #         std::path::Path::new("jobs.yaml"),
//! #     )?;
//! #     store.apply(&jobs.file, chrono::Utc::now())?;
//! #     let cfg = EngineConfig::new(engine::new_owner_id());
//! #     let clock = Arc::new(cronsole::clock::SystemClock);
//! #     let engine = engine::spawn(cfg, store, clock, RunDeps::from_env()?)?;
//! #     let mut events = engine.events.subscribe();
//! #     tokio::time::timeout(std::time::Duration::from_secs(30), async {
//! #         while !matches!(events.recv().await, Ok(Event::Row(_)) | Err(_)) {}
//! #     })
//! #     .await?;
//! #     engine.shutdown.cancel();
//! #     engine.join.await??;
//! # }
//! // A store some engine ran jobs in (here: one run of the `hello` job).
//! let store = FileStore::open_existing(&path)?;
//!
//! let mut q = HistoryQuery { job: Some("hello".into()), limit: 100, ..Default::default() };
//! let mut rows = 0;
//! loop {
//!     let page = store.history_page(&q)?;
//!     for row in &page.rows {
//!         println!("{} {} {} {:?}", row.finished_at, row.job, row.status, row.result);
//!     }
//!     rows += page.rows.len();
//!     match page.next {
//!         Some(token) => q.before = Some(token),
//!         None => break,
//!     }
//! }
//! assert_eq!(rows, 1);
//!
//! // The failures of the last day.
//! let since = chrono::Utc::now() - chrono::Duration::days(1);
//! let failed = store.history(&HistoryQuery {
//!     status: Some(Status::Failed),
//!     since: Some(since),
//!     limit: 100,
//!     ..Default::default()
//! })?;
//! assert!(failed.is_empty());
//!
//! // One run by its id (from an event, a `--json` line, the console).
//! # let run_id = store.history(&HistoryQuery { limit: 1, ..Default::default() })?[0].run_id;
//! let one = HistoryQuery { run_id: Some(run_id), limit: 1, ..Default::default() };
//! assert_eq!(store.history(&one)?[0].status, Status::Succeeded);
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]
// The function-length bound is for the library's code; a unit test's scenario may be longer.
#![cfg_attr(test, allow(clippy::too_many_lines))]

pub mod attach;
pub mod cli;
pub mod clock;
pub mod config;
pub mod engine;
pub mod model;
pub mod schedule;
pub mod snapshot;
pub mod store;
pub mod transcript;
pub mod tui;

// The engine's parts: crate-private, so the compiler reports what nothing uses. Tests and
// benches reach them through `testkit::internals` (feature `testkit`); hidden, because what they
// export there is for tests, not documentation.
#[doc(hidden)]
mod action;
#[doc(hidden)]
mod addr;
#[doc(hidden)]
mod cost;
#[doc(hidden)]
mod deliver;
#[doc(hidden)]
mod forecast;
#[doc(hidden)]
mod gate;
#[doc(hidden)]
mod listing;
#[doc(hidden)]
mod owners;
#[doc(hidden)]
mod preflight;
#[doc(hidden)]
mod proc;
#[doc(hidden)]
mod service;
#[doc(hidden)]
mod text;
#[doc(hidden)]
mod timers;
#[doc(hidden)]
mod when;

#[doc(hidden)]
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;

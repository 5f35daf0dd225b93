//! cronsole: a scheduler engine for LLM-agent jobs, shell commands and change monitors, and a
//! ratatui operations console over it. See README.md and SPEC.md; each module's `//!` doc says
//! what it owns and what it must not touch. The engine never imports the UI.
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
//! The other modules are public for the binary, the tests and the benches, and hidden from this
//! documentation: they are the engine's parts, not an API to build on.
//!
//! # Embedding the engine
//!
//! Open a store at a path of your own, apply a jobs file to it, start an engine on it and
//! receive its events; here a `true` command job, run once at once:
//!
//! ```
//! use std::path::Path;
//! use std::sync::Arc;
//!
//! use cronsole::clock::SystemClock;
//! use cronsole::engine::{self, EngineConfig, Event, RunDeps};
//! use cronsole::store::{Store, file::FileStore};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = std::env::temp_dir().join(format!("cronsole-doc-{}", std::process::id()));
//! let store: Arc<dyn Store> = Arc::new(FileStore::open(&dir)?);
//! let jobs = cronsole::config::load_str(
//!     "jobs:\n  - name: hello\n    schedule: every 1h\n    command: \"true\"\n",
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
//! let row = loop {
//!     if let Event::Row(row) = events.recv().await? {
//!         break row;
//!     }
//! };
//! assert_eq!((row.job.as_str(), row.status.as_str()), ("hello", "succeeded"));
//!
//! engine.shutdown.cancel();
//! engine.join.await??;
//! std::fs::remove_dir_all(&dir)?;
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]

pub mod attach;
pub mod clock;
pub mod config;
pub mod engine;
#[doc(hidden)]
pub mod listing;
pub mod model;
pub mod schedule;
pub mod snapshot;
pub mod store;
pub mod tui;

#[doc(hidden)]
pub mod action;
#[doc(hidden)]
pub mod cost;
#[doc(hidden)]
pub mod deliver;
#[doc(hidden)]
pub mod forecast;
#[doc(hidden)]
pub mod gate;
#[doc(hidden)]
pub mod proc;
#[doc(hidden)]
pub mod service;
#[doc(hidden)]
pub mod supervisor;
#[doc(hidden)]
pub mod text;
#[doc(hidden)]
pub mod when;

#[doc(hidden)]
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;

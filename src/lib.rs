//! cronsole: a scheduler engine for LLM-agent jobs, shell commands and change monitors, and a
//! ratatui operations console over it. See README.md and SPEC.md; each module's `//!` doc says
//! what it owns and what it must not touch. The engine never imports the UI.

pub mod action;
pub mod attach;
pub mod cli;
pub mod clock;
pub mod config;
pub mod cost;
pub mod deliver;
pub mod engine;
pub mod forecast;
pub mod gate;
pub mod headless;
pub mod listing;
pub mod model;
pub mod proc;
pub mod schedule;
pub mod service;
pub mod snapshot;
pub mod store;
pub mod supervisor;
pub mod text;
pub mod tui;
pub mod when;

#[cfg(any(test, feature = "testkit"))]
pub mod testkit;

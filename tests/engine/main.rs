//! Engine-level tests, one binary: the real engine (`engine::spawn`) over a file store in a
//! temporary directory, with an injected clock and loopback model servers. Each module is one
//! topic (schedules, overlap, chains, agents and their tools, monitors, outages, clocks, wake-ups,
//! operator commands); `engine_support` is their shared rig.
//!
//! One binary rather than one per topic because each test binary links the whole library and its
//! dependencies (~10 s on the project's 2-core machine): a library change re-links this once.
//! Run one topic with `cargo test --test engine chain::`.
#![allow(clippy::unwrap_used)] // test code

mod engine_support;
#[path = "../support/mod.rs"]
mod support;

mod chain;
mod clock;
mod deliver;
mod llm;
mod monitor;
mod operator;
mod outage;
mod overlap;
mod schedule;
mod timing;
mod tool_pins;
mod tools;
mod tools_budget;
mod wake;

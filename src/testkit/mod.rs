//! Test doubles shared by unit tests and `tests/` (feature `testkit`, never in release builds):
//! a loopback HTTP server that records requests, fake OpenAI/Anthropic endpoints, and hostile
//! servers (slow drip, huge bodies, redirects) for the URL monitor's guarantees, and a faulty
//! in-memory file system for the store's deterministic fault simulator (`simio`), and the one
//! poll-with-a-deadline every test waits with (`wait`).
//!
//! Owns: test servers only. Must not touch: production code paths (tests point the real reqwest
//! clients at these servers).
#![allow(clippy::unwrap_used)] // test doubles

pub mod engine;
pub mod hostile;
pub mod http;
pub mod internals;
pub mod jobs;
pub mod llm;
pub mod mcp;
pub mod simio;
pub mod skip;
pub mod stats;
pub mod store;
pub mod time;
#[cfg(any(test, feature = "testkit"))]
pub mod tmp;
pub mod tools;
pub mod wait;

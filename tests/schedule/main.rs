//! Schedules on the library's public API, one test binary: every reference cron case
//! (`vectors`) and the property tests against a brute-force oracle (`props`).
//!
//! One binary rather than one per topic because each test binary links the whole library and its
//! dependencies after every library change. Run one topic with `cargo test --test schedule props::`.
#![allow(clippy::unwrap_used)] // test code

mod props;
mod vectors;

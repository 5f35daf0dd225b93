//! The URL monitor's fetch against real loopback sockets, one test binary: what it refuses
//! (`probe`) and how it verifies TLS (`tls`).
//!
//! One binary rather than one per topic because each test binary links the whole library and its
//! dependencies after every library change. Run one topic with `cargo test --test url tls::`.
#![allow(clippy::unwrap_used)] // test code

mod probe;
mod tls;

//! The PostgreSQL store against a real server, one test binary: schema, migrations and the change
//! feed (`store`), the conformance suite and its clock cases (`clock`), several OS processes
//! claiming on one database (`multiprocess`), a server restart under load (`restart`), TLS
//! (`tls`), and the CLI on a PostgreSQL store (`cli`). Each test gets its own database; without a
//! server the tests skip, and under `CI=true` they fail.
//!
//! One binary rather than one per topic because each test binary links the whole library and its
//! dependencies (~10 s on a 2-core machine) after every library change. Run one topic with
//! `cargo test --test pg tls::`.
#![allow(clippy::unwrap_used)] // test code

#[path = "../conformance/mod.rs"]
mod conformance;
#[path = "../owner_support/mod.rs"]
mod owner_support;
#[path = "../support/mod.rs"]
mod support;

mod cli;
mod clock;
mod multiprocess;
mod restart;
mod store;
mod tls;

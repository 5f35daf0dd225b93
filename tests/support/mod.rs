//! Helpers shared by integration tests (each test crate includes what it needs with `mod support;`).
#![allow(dead_code)]
pub mod pg;

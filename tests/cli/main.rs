//! The command line on the real binary, one test binary: each command's flags, bounds, exit
//! codes and messages (`conventions`), `validate`, `next`, `diff`, `probe`, `dry-run`, `edit`
//! against what can be planted beside the jobs file, `import praisonai` (`praisonai`), the store
//! commands end to end (`store`), bulk selectors and owners (`flow`), the first run every view
//! shows (`first_slots`), what stops a run before it spends (`preflight`), the operator commands
//! against a running owner (`operator`), and commands that must change nothing (`inert`).
//!
//! One binary rather than one per topic because each test binary links the whole library and its
//! dependencies (~10 s on a 2-core machine) after every library change. Run one topic with
//! `cargo test --test cli next::`.
#![allow(clippy::unwrap_used)] // test code

#[path = "../support/mod.rs"]
mod support;

mod conventions;
mod diff;
mod dry_run;
mod edit;
mod first_slots;
mod flow;
mod inert;
mod next;
mod operator;
mod praisonai;
mod preflight;
mod probe;
mod store;
mod validate;

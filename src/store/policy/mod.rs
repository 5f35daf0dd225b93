//! The store's policies: what one job's definition, runs and operator asks do to its record,
//! written once for every store.
//!
//! Owns: budget reservations (`budget`) and the counters rows are booked into (`counters`),
//! the `overlap:` policies (`overlap`), `after:` chains (`chain`), operator edits
//! (`operator`), a definition arriving (`define`) and a run's end (`run_end`).
//! Must not touch: which records an operation takes and in what order (`store::plan`), I/O,
//! locks, clocks. Builds only on `store::rules`.

pub(crate) mod budget;
pub mod chain;
pub(crate) mod counters;
pub mod define;
pub(crate) mod operator;
pub(crate) mod overlap;
pub(crate) mod run_end;

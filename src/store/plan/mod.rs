//! The store's operations as plans over the records they involve: a claim (recovering expired
//! leases first), a run's completion, an `apply`. Each is written once; the file store and the
//! PostgreSQL store only lock, load the records a plan names and persist what it returns,
//! history rows first, then the records.
//!
//! Owns: [`claim`] (what a claim pass does to one due job, and when a job next needs one),
//! [`recover`] (an expired lease's run ended by its `abandoned` row, or by the row that landed
//! before its owner died), [`complete`] (a run's end, fenced by its run id), [`apply`] and
//! [`step`] (a running tool loop's lease, settlement and reservation at one step).
//! Must not touch: I/O, locks, clocks (every plan takes `now`). Builds on `store::policy` and
//! `store::rules`, never the other way.

pub(crate) mod apply;
pub(crate) mod claim;
pub(crate) mod complete;
pub(crate) mod recover;
pub(crate) mod step;
#[cfg(test)]
mod tests;

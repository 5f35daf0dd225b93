//! The bottom layer of the store's decisions: facts about one job record that every policy and
//! plan above relies on, with no policy of their own.
//!
//! Owns: slot arithmetic over a compiled schedule (`slots`), budget-period keys and the
//! arithmetic of counted and reserved money ([`period`]), the words rows and retirements are
//! written with ([`reasons`]), the identity of history rows and the rows generated for slots
//! ([`rows`]), and the primitive mutations of a record's runtime: taking a lease, renewing it,
//! retiring the job (`runtime`).
//! Must not touch: the policies (`store::policy`), the plans (`store::plan`), I/O, locks,
//! clocks (every function takes `now`). Nothing here imports anything above it.

pub mod period;
pub mod reasons;
pub mod rows;
pub(crate) mod runtime;
pub(crate) mod slots;

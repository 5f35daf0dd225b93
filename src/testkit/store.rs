//! Store calls spelled as one line in tests: `s.claim_at(now, owner, limit)` instead of the
//! eight-line `claim_due(&ClaimRequest { … }).unwrap()` each test wrote out; and the one
//! forwarding store ([`Wrapped`] with [`Hooks`]) every test double that twists a real store is
//! built from (refused calls, a lost lease, a hidden change signal, counted calls).
//!
//! Owns: test shorthands over the [`Store`] trait. Must not touch: store behaviour.

use chrono::{DateTime, Utc};

pub use crate::store::wrap::{Call, Hooks, Wrapped};
use crate::store::{ClaimOutcome, ClaimRequest, Store};

/// `claim_due` with no runs in flight, for any store (a `FileStore`, a `PgStore`, an
/// `Arc<dyn Store>`); panics naming the store's error.
pub trait ClaimAt {
    /// Claim at most `limit` due runs at `now` for `owner`.
    fn claim_at(&self, now: DateTime<Utc>, owner: &str, limit: usize) -> ClaimOutcome;
}

impl<S: Store + ?Sized> ClaimAt for S {
    fn claim_at(&self, now: DateTime<Utc>, owner: &str, limit: usize) -> ClaimOutcome {
        match self.claim_due(&ClaimRequest {
            now,
            owner,
            limit,
            in_flight: &[],
            clock_stepped: None,
        }) {
            Ok(out) => out,
            Err(e) => panic!("claim_due at {now} for {owner}: {e}"),
        }
    }
}

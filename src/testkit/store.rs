//! Store calls spelled as one line in tests: `s.claim_at(now, owner, limit)` instead of the
//! eight-line `claim_due(&ClaimRequest { … }).unwrap()` each test wrote out, and
//! `s.finish_claim(&c, owner, status, now)` (or `finish_row` with a row of its own) instead of
//! the row and the `complete(Completion { … })` written around each claim; and the one
//! forwarding store ([`Wrapped`] with [`Hooks`]) every test double that twists a real store is
//! built from (refused calls, a lost lease, a hidden change signal, counted calls).
//!
//! Owns: test shorthands over the [`Store`] trait. Must not touch: store behaviour.

use chrono::{DateTime, Utc};

use crate::model::{HistoryRow, Status};
pub use crate::store::wrap::{Call, Hooks, Wrapped};
use crate::store::{Claim, ClaimOutcome, ClaimRequest, CompleteOutcome, Completion, Store};

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
            max_offset: None,
        }) {
            Ok(out) => out,
            Err(e) => panic!("claim_due at {now} for {owner}: {e}"),
        }
    }
}

/// The row claim `c` ends in: `status`, written by `owner` at `now`, carrying the claim's run
/// id, trigger and slot. Tests set more fields on it and pass it to
/// [`FinishClaim::finish_row`].
pub fn claim_row(c: &Claim, owner: &str, status: Status, now: DateTime<Utc>) -> HistoryRow {
    let mut row = HistoryRow::new(&c.job.def.name, status, c.trigger, c.slot, owner, now);
    row.run_id = c.run_id;
    row
}

/// `complete` of a claimed run with no new state and no hold, for any store; panics naming
/// the store's error.
pub trait FinishClaim {
    /// End claim `c` with `status`, written by `owner` at `now` ([`claim_row`]).
    fn finish_claim(
        &self,
        c: &Claim,
        owner: &str,
        status: Status,
        now: DateTime<Utc>,
    ) -> CompleteOutcome {
        self.finish_row(c, claim_row(c, owner, status, now))
    }

    /// End claim `c` with `row`: its owner and finish time are the completion's.
    fn finish_row(&self, c: &Claim, row: HistoryRow) -> CompleteOutcome;
}

impl<S: Store + ?Sized> FinishClaim for S {
    fn finish_row(&self, c: &Claim, row: HistoryRow) -> CompleteOutcome {
        let (owner, now) = (row.owner.clone(), row.finished_at);
        match self.complete(Completion {
            job: c.job.def.name.clone(),
            run_id: c.run_id,
            owner,
            now,
            row,
            state: None,
            hold_until: None,
        }) {
            Ok(out) => out,
            Err(e) => panic!("complete {} run {} at {now}: {e}", c.job.def.name, c.run_id),
        }
    }
}

//! Whose clock a PostgreSQL store's decisions read: the database server's, so every owner on
//! every host agrees on when a slot is due and when a lease ends.
//!
//! Owners on several hosts do not share a clock. When each stamped leases from its own, an
//! owner whose clock was behind by more than the lease wrote a `lease_until` another owner
//! already read as expired, and a one-shot ran twice. So claims, renewals, completions, budget
//! reservations, tool-loop steps, operator edits and `apply` read `clock_timestamp()` inside
//! their transaction, after taking the row locks they wait for, and hand it to the shared store
//! rules as `now`; the `now` the caller passed is ignored. Due-ness, misfire ages, leases,
//! expiry, recovery and budget periods then all run on one clock, and the rules stay in Rust,
//! written once. A run's own row keeps the owner's times for when it started and ended.
//!
//! [`PgClock::Caller`] keeps the caller's `now`: only for tests that drive time by hand with
//! every owner in one process (the conformance suite, the simulator).
//!
//! Owns: [`PgClock`] and reading the clock in a transaction. Must not touch: what the rules do
//! with `now`.

use crate::store::BackendError;
use chrono::{DateTime, Utc};
use tokio_postgres::Transaction;

use crate::store::{StoreError, StoreResult};

use super::db::db_err;

/// Whose clock the store's decisions read (see the module doc).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PgClock {
    /// The database server's `clock_timestamp()`, read in each transaction: one clock for every
    /// owner on every host. What `cronsole` runs with.
    #[default]
    Database,
    /// The `now` each caller passes: for tests whose owners share one injected clock.
    Caller,
}

impl PgClock {
    /// The `now` of one transaction: the caller's, or the database's read at this point of
    /// `tx` (so after every lock taken before it; a query pipelined behind a locking one runs
    /// after that lock is held).
    pub(super) async fn now_in(
        self,
        tx: &Transaction<'_>,
        given: DateTime<Utc>,
    ) -> StoreResult<DateTime<Utc>> {
        match self {
            PgClock::Caller => Ok(given),
            // Typed, so it needs no prepare round trip of its own.
            PgClock::Database => tx
                .query_typed("SELECT clock_timestamp()", &[])
                .await
                .map_err(|e| db_err("reading the database's clock", e))?
                .first()
                .ok_or_else(|| {
                    StoreError::Backend(BackendError::NoRow {
                        doing: "reading the database's clock",
                    })
                })?
                .try_get::<_, DateTime<Utc>>(0)
                .map_err(|e| db_err("reading the database's clock", e)),
        }
    }

    /// The `now` to pass to the due-jobs select: `None` asks the statement for the
    /// database's own (`statement_timestamp()`, which it returns with each row).
    pub(super) fn given(self, given: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            PgClock::Caller => Some(given),
            PgClock::Database => None,
        }
    }
}

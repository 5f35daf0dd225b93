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

    /// The clock the decisions read, read now outside any transaction: the database's
    /// (`Store::clock_now`), `None` for [`PgClock::Caller`], whose callers bring their own.
    pub(super) async fn read(
        self,
        c: &tokio_postgres::Client,
    ) -> StoreResult<Option<DateTime<Utc>>> {
        if self == PgClock::Caller {
            return Ok(None);
        }
        let rows = c
            .query_typed("SELECT clock_timestamp()", &[])
            .await
            .map_err(|e| db_err("reading the database's clock", e))?;
        Ok(rows
            .first()
            .and_then(|r| r.try_get::<_, DateTime<Utc>>(0).ok()))
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

/// Why a claim that read the database's clock `db_now` refuses an owner whose clock said
/// `given` when it asked, `elapsed` before (the time the request took to reach the database),
/// under the owner's offset `bound`; `None` when the clocks may be within it. The request's
/// time only makes the database look later, so the database is surely ahead by more than the
/// bound when it reads later than `given` by more than the bound plus `elapsed`, and surely
/// behind when it reads earlier by more than the bound.
pub(super) fn beyond_bound(
    db_now: DateTime<Utc>,
    given: DateTime<Utc>,
    elapsed: std::time::Duration,
    bound: std::time::Duration,
) -> Option<String> {
    let ahead = (db_now - given).num_milliseconds();
    let slack = i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX);
    let bound_ms = i64::try_from(bound.as_millis()).unwrap_or(i64::MAX);
    let side = if ahead.saturating_sub(slack) > bound_ms {
        "ahead of"
    } else if ahead < -bound_ms {
        "behind"
    } else {
        return None;
    };
    Some(format!(
        "the database's clock is {:.1}s {side} this host's (more than --max-clock-offset \
         {:.1}s): claims stopped until it is back within the bound, since this owner could not \
         renew the leases it would be given in time; runs in flight go on. Fix the clock (NTP)",
        ahead.unsigned_abs() as f64 / 1000.0,
        bound.as_secs_f64()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration as Std;

    #[test]
    fn a_database_clock_surely_past_the_bound_refuses_and_one_within_it_does_not() {
        let t = |s: i64| DateTime::<Utc>::from_timestamp(1_000 + s, 0).unwrap();
        let b = Std::from_millis(7_500);
        let w = beyond_bound(t(40), t(0), Std::ZERO, b).unwrap();
        assert!(w.contains("40.0s ahead of this host's"), "{w}");
        assert!(
            w.contains("--max-clock-offset 7.5s") && w.contains("claims stopped"),
            "{w}"
        );
        assert!(
            beyond_bound(t(-40), t(0), Std::ZERO, b)
                .unwrap()
                .contains("40.0s behind")
        );
        assert_eq!(beyond_bound(t(7), t(0), Std::ZERO, b), None);
        // A slow request explains what lies within it.
        assert_eq!(beyond_bound(t(9), t(0), Std::from_secs(2), b), None);
        assert!(beyond_bound(t(9), t(0), Std::from_secs(1), b).is_some());
    }
}

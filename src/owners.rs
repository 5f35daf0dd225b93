//! Which owners (cronsole processes) are live on a store: the console header's `owners` count,
//! and whether anything will pick up what `trigger`, `pause` and `retry` write.
//!
//! Owns: the rule that says an owner is live, in one place for every surface. Must not touch:
//! the store's internals (it reads records and rows handed to it), the clock (`now` is an
//! argument), the terminal.
//!
//! The rule: an owner is live while its heartbeat record (rewritten every 5 s, see
//! [`crate::model::OwnerRecord`]) is younger than [`GONE_AFTER_SECS`] on the store's clock
//! ([`live`]), or while it holds a lease that has not expired ([`lease_holders`]: a store
//! written by a release without owner records, or an owner whose heartbeat the store refused).
//! A front end that must not claim "no engine" falsely also looks at the newest history row:
//! an engine that wrote one in the last [`SEEN_SECS`] was alive then ([`engine_seen`]). A
//! process that restarted has a new owner id; the old id's record ages out and is not counted,
//! so one process shows as one owner.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};

use crate::model::{HistoryRow, JobRecord};

/// An engine that wrote a history row this recently counts as seen ([`engine_seen`]).
pub const SEEN_SECS: i64 = 300;

/// An owner whose heartbeat record is older than this is not counted as running (six missed
/// heartbeats).
pub const GONE_AFTER_SECS: i64 = 30;

/// The owners whose heartbeat record is younger than [`GONE_AFTER_SECS`], in id order.
pub fn live(owners: &[crate::model::OwnerSeen]) -> BTreeSet<String> {
    owners
        .iter()
        .filter(|o| o.ago <= chrono::Duration::seconds(GONE_AFTER_SECS))
        .map(|o| o.record.owner.clone())
        .collect()
}

/// The owners holding a lease that has not expired at `now`, in id order.
pub fn lease_holders<'a>(
    jobs: impl IntoIterator<Item = &'a JobRecord>,
    now: DateTime<Utc>,
) -> BTreeSet<String> {
    jobs.into_iter()
        .flat_map(|j| j.rt.leases())
        .filter(|l| l.lease_until > now)
        .map(|l| l.owner.clone())
        .collect()
}

/// Whether some engine is known to run on the store at `now`: one holds a live lease, or the
/// newest history row (`newest`) was written in the last [`SEEN_SECS`]. `false` means nothing
/// will claim a queued run until an engine starts.
pub fn engine_seen(
    holders: &BTreeSet<String>,
    newest: Option<&HistoryRow>,
    now: DateTime<Utc>,
) -> bool {
    !holders.is_empty()
        || newest.is_some_and(|r| r.finished_at >= now - chrono::Duration::seconds(SEEN_SECS))
}

/// The sentence front ends add when nothing will pick a queued run up.
pub const NO_ENGINE: &str = "no engine has run on this store in the last 5 minutes: it runs \
     when one starts (`cronsole run`, or `cronsole` with the jobs file)";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Lease, Status, Trigger};
    use crate::testkit::time::rfc3339 as t;

    fn leased(owner: &str, until: DateTime<Utc>) -> JobRecord {
        let def = crate::testkit::jobs::command_job(owner, 60);
        let mut r =
            crate::store::policy::define::new_record(def, t("2026-12-01T00:00:00Z")).unwrap();
        let at = t("2026-12-01T00:00:00Z");
        r.rt.lease = Some(Lease {
            owner: owner.into(),
            run_id: uuid::Uuid::new_v4(),
            slot: None,
            trigger: Trigger::Manual,
            claimed_at: at,
            lease_until: until,
            last_renewed: at,
            spends_job: false,
            coalesced: None,
            cancel_requested_at: None,
            lapsed: false,
            chain: Vec::new(),
            awaiting: None,
        });
        r
    }

    #[test]
    fn live_owners_are_those_holding_an_unexpired_lease() {
        let now = t("2026-12-01T12:00:00Z");
        let jobs = [
            leased("a", now + chrono::Duration::seconds(5)),
            leased("b", now - chrono::Duration::seconds(1)),
            leased("a", now + chrono::Duration::seconds(9)),
        ];
        let holders = lease_holders(&jobs, now);
        assert_eq!(holders.into_iter().collect::<Vec<_>>(), ["a"]);
    }

    #[test]
    fn live_owners_are_those_heard_of_lately() {
        let seen = |owner: &str, ago: i64| crate::model::OwnerSeen {
            record: crate::model::OwnerRecord {
                owner: owner.into(),
                host: "h".into(),
                pid: 1,
                version: "0".into(),
                started_at: t("2026-12-01T00:00:00Z"),
                last_seen: t("2026-12-01T00:00:00Z"),
                clock_offset_ms: 0,
                claims_stopped: None,
            },
            ago: chrono::Duration::seconds(ago),
        };
        let owners = [
            seen("a", 4),
            seen("b", GONE_AFTER_SECS + 1),
            seen("c", GONE_AFTER_SECS),
        ];
        assert_eq!(live(&owners).into_iter().collect::<Vec<_>>(), ["a", "c"]);
    }

    #[test]
    fn an_engine_is_seen_through_a_lease_or_a_recent_row() {
        let now = t("2026-12-01T12:00:00Z");
        let none = BTreeSet::new();
        let row = |ago: i64| {
            let at = now - chrono::Duration::seconds(ago);
            HistoryRow::new("j", Status::Succeeded, Trigger::Schedule, None, "o", at)
        };
        assert!(!engine_seen(&none, None, now));
        assert!(engine_seen(&none, Some(&row(SEEN_SECS)), now));
        assert!(!engine_seen(&none, Some(&row(SEEN_SECS + 1)), now));
        let one: BTreeSet<String> = ["o".to_string()].into();
        assert!(engine_seen(&one, Some(&row(10_000)), now));
    }
}

//! The words an operator reads after a request: one line per outcome of a trigger, a retry, a
//! cancel, a pause or an approval answer, shared by the console (engine or attached) and the CLI.
//!
//! Owns: those sentences, and whether an answer to a call awaiting approval reaches a live owner
//! (by the one live-owner rule of [`crate::owners`]). Must not touch: the store (callers pass
//! what it answered and the owner records it holds).

use chrono::{DateTime, Utc};

use crate::model::{Lease, OwnerSeen};
use crate::store::TriggerOutcome;
use crate::when::span;

/// One line saying what a trigger request did: the console's notice (engine or attached) and
/// the CLI's `trigger` output, so the operator reads the same words everywhere.
pub fn trigger_notice(job: &str, out: &TriggerOutcome) -> String {
    match out {
        TriggerOutcome::Queued => {
            format!("triggered {job}: the next owner claiming will run it now")
        }
        TriggerOutcome::AlreadyQueued => {
            format!("{job} already has a trigger queued; nothing changed")
        }
        TriggerOutcome::AlreadyRunning => format!("{job} is running now; not triggered"),
    }
}

/// [`trigger_notice`] on a store where no owner is live, `waiting` being
/// [`crate::owners::waiting_note`]'s words: a queued trigger says only that it is queued and
/// what it waits for, never that an owner runs it now.
pub fn trigger_notice_waiting(job: &str, out: &TriggerOutcome, waiting: Option<&str>) -> String {
    match (out, waiting) {
        (TriggerOutcome::Queued, Some(w)) => format!("triggered {job}: queued; {w}"),
        _ => trigger_notice(job, out),
    }
}

/// [`operator_notice`] on a store where no owner is live (`waiting` as for
/// [`trigger_notice_waiting`]): queued runs say what they wait for instead of who runs them.
pub fn operator_notice_waiting(
    job: &str,
    out: &crate::store::EditOutcome,
    waiting: Option<&str>,
) -> String {
    match (out, waiting) {
        (crate::store::EditOutcome::Queued { added, queued }, Some(w)) if *added > 0 => {
            queued_words(job, *added, *queued, w)
        }
        _ => operator_notice(job, out),
    }
}

/// `JOB: N runs queued (M queued in all); WHO`.
fn queued_words(job: &str, added: usize, queued: usize, who: &str) -> String {
    let runs = if added == 1 {
        "1 run".to_string()
    } else {
        format!("{added} runs")
    };
    // The job's total only when runs were already waiting: "1 run queued (1 queued)" says the
    // same number twice.
    let total = if queued > added {
        format!(" ({queued} queued in all)")
    } else {
        String::new()
    };
    format!("{job}: {runs} queued{total}; {who}")
}

/// One line saying what an operator action did (console notice, CLI output).
pub fn operator_notice(job: &str, out: &crate::store::EditOutcome) -> String {
    use crate::store::EditOutcome as O;
    match out {
        O::Queued { added, queued } => {
            let who = if *added == 1 && *queued == 1 {
                "the next owner claiming runs it"
            } else {
                "owners run them one at a time"
            };
            queued_words(job, *added, *queued, who)
        }
        O::CancelRequested { run_id } => {
            format!("{job}: cancel of run {run_id} requested; its owner kills it")
        }
        O::AlreadyCancelling { run_id } => {
            format!("{job}: run {run_id} is already being cancelled")
        }
        O::Dequeued(n) => {
            format!("{job}: not running; {n} queued run(s) dropped (a skipped row each)")
        }
        O::Paused { changed: true } => format!("{job}: done"),
        O::Paused { changed: false } => format!("{job}: already so; nothing changed"),
        O::Answered {
            run_id,
            tool,
            approved: true,
        } => format!("{job}: run {run_id}'s call to {tool} approved; its owner runs it"),
        O::Answered {
            run_id,
            tool,
            approved: false,
        } => format!("{job}: run {run_id}'s call to {tool} denied; the model is told"),
    }
}

/// Who holds a call awaiting approval, as `approvals` shows it and `approve`/`deny` judge it.
#[derive(Debug, Clone, PartialEq)]
pub struct CallOwner {
    /// The owner id on the run's lease.
    pub owner: String,
    /// How long ago the store last heard of it (`None`: the store holds no record of it).
    pub heard_ago: Option<chrono::Duration>,
    /// Why an answer reaches nobody now (`None`: the owner is live and picks the answer up).
    pub gone: Option<String>,
}

/// Why the owner on a run's lease is not running the run now.
#[derive(Debug, Clone, PartialEq)]
pub enum OwnerGone {
    /// The lease ran out unrenewed: the next owner to claim records the run abandoned.
    LeaseRanOut,
    /// The owner ran in this PID space and its process is gone: it never comes back.
    ProcessGone {
        /// Its process id.
        pid: u32,
    },
    /// The owner signed off (stopped): it never comes back.
    SignedOff,
    /// Not heard within the live-owner bound: it may come back (stopped, cut off) before
    /// its lease runs out, or never.
    NotHeard(chrono::Duration),
}

impl OwnerGone {
    /// The owner never comes back to the run (its lease may still run).
    pub fn for_good(&self) -> bool {
        matches!(self, OwnerGone::ProcessGone { .. } | OwnerGone::SignedOff)
    }
}

/// Whether the owner of `lease` runs it at `now` (`None`), or why not: it must be live by the
/// one live-owner rule (`owners::live`: heard within `owners::GONE_AFTER_SECS`, not signed off,
/// its process not gone when it ran in this PID space) and still renew the run's lease. An
/// owner killed with `kill -9` on this host fails the first at once; on another host, within
/// that many seconds, and the second once its lease runs out; before either, nothing on the
/// store tells it from a live one. A store that keeps no owner records is judged by the lease
/// alone.
pub fn run_owner(lease: &Lease, owners: &[OwnerSeen], now: DateTime<Utc>) -> Option<OwnerGone> {
    let seen = owners.iter().find(|o| o.record.owner == lease.owner);
    let live = crate::owners::live(owners).contains(&lease.owner);
    if lease.lease_until <= now {
        Some(OwnerGone::LeaseRanOut)
    } else if let Some(o) = seen.filter(|o| crate::owners::process_gone(o)) {
        Some(OwnerGone::ProcessGone { pid: o.record.pid })
    } else if seen.is_some_and(|o| o.record.signed_off.is_some()) {
        Some(OwnerGone::SignedOff)
    } else {
        seen.filter(|_| !live).map(|o| OwnerGone::NotHeard(o.ago))
    }
}

/// Whether the owner of `lease` (a run with a call awaiting approval) picks an answer up, at
/// `now` ([`run_owner`]), and in words why not.
pub fn call_owner(lease: &Lease, owners: &[OwnerSeen], now: DateTime<Utc>) -> CallOwner {
    let heard_ago = owners
        .iter()
        .find(|o| o.record.owner == lease.owner)
        .map(|o| o.ago);
    let owner = &lease.owner;
    let expires = span(lease.lease_until - now);
    let gone = run_owner(lease, owners, now).map(|g| match g {
        OwnerGone::LeaseRanOut => format!(
            "its owner {owner} stopped renewing the run's lease {} ago; nothing runs the call, \
             and the next owner to claim records the run abandoned",
            span(now - lease.lease_until)
        ),
        OwnerGone::ProcessGone { pid } => format!(
            "its owner {owner} (process {pid} on this host) is no longer running; the call \
             never runs, and the run is recorded abandoned when its lease expires (in {expires})"
        ),
        OwnerGone::SignedOff => format!(
            "its owner {owner} has stopped; the call never runs, and the run is recorded \
             abandoned when its lease expires (in {expires})"
        ),
        OwnerGone::NotHeard(ago) => format!(
            "its owner {owner} has not been heard for {}; the call runs only if that owner comes \
             back, or is recorded abandoned when its lease expires (in {expires})",
            span(ago)
        ),
    });
    CallOwner {
        owner: owner.clone(),
        heard_ago,
        gone,
    }
}

/// What `cancel` of a run adds when no live owner holds it ([`run_owner`]): the cancel is on
/// the lease, but nobody kills the run now; its processes died with their owner (or stay
/// stopped with it), and the run ends as `abandoned` when its lease runs out, the cancel named
/// in the row's reason. `None` while the owner is live (it kills the run).
pub fn cancel_owner_note(
    lease: &Lease,
    owners: &[OwnerSeen],
    now: DateTime<Utc>,
) -> Option<String> {
    let owner = &lease.owner;
    let until = lease
        .lease_until
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let then = "the run is then recorded abandoned (its reason names the cancel)";
    Some(match run_owner(lease, owners, now)? {
        OwnerGone::LeaseRanOut => format!(
            "no live owner holds it: its owner {owner} stopped renewing its lease, which ran out \
             at {until}; the next owner to claim records the run abandoned (its reason names the \
             cancel)"
        ),
        OwnerGone::ProcessGone { pid } => format!(
            "no live owner holds it: its owner {owner} (process {pid} on this host) is no longer \
             running, and the run's processes ended with it; its lease expires at {until} and \
             {then}"
        ),
        OwnerGone::SignedOff => format!(
            "no live owner holds it: its owner {owner} has stopped; its lease expires at {until} \
             and {then}"
        ),
        OwnerGone::NotHeard(ago) => format!(
            "no live owner holds it now: its owner {owner} has not been heard for {}; if it comes \
             back before its lease expires at {until} it kills the run, otherwise {then}",
            span(ago)
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::EditOutcome;
    use crate::testkit::time::rfc3339 as t;

    fn lease(owner: &str, until: DateTime<Utc>) -> Lease {
        let at = t("2026-12-01T00:00:00Z");
        Lease {
            owner: owner.into(),
            run_id: uuid::Uuid::nil(),
            slot: None,
            trigger: crate::model::Trigger::Manual,
            claimed_at: at,
            lease_until: until,
            last_renewed: at,
            spends_job: false,
            coalesced: None,
            cancel_requested_at: None,
            lapsed: false,
            chain: Vec::new(),
            awaiting: None,
        }
    }

    /// With no live owner, a queued trigger or retry says only that it is queued and waits:
    /// never that an owner runs it now.
    #[test]
    fn a_queued_run_with_no_engine_says_only_that_it_waits() {
        let w = Some("no engine is running on this store");
        assert_eq!(
            trigger_notice_waiting("a", &TriggerOutcome::Queued, w),
            "triggered a: queued; no engine is running on this store"
        );
        let retried = EditOutcome::Queued {
            added: 1,
            queued: 1,
        };
        assert_eq!(
            operator_notice_waiting("a", &retried, w),
            "a: 1 run queued; no engine is running on this store"
        );
        // With an owner live, the words are the usual ones.
        assert!(trigger_notice_waiting("a", &TriggerOutcome::Queued, None).contains("now"));
        assert!(operator_notice_waiting("a", &retried, None).contains("next owner"));
        // What is not queued says what it said.
        assert_eq!(
            trigger_notice_waiting("a", &TriggerOutcome::AlreadyRunning, w),
            "a is running now; not triggered"
        );
    }

    fn seen(owner: &str, ago: i64) -> OwnerSeen {
        crate::owners::tests::seen(owner, ago, false)
    }

    #[test]
    fn an_answer_reaches_an_owner_heard_lately_that_renews_its_lease() {
        let now = t("2026-12-01T12:00:00Z");
        let l = lease("a", now + chrono::Duration::seconds(20));
        let o = call_owner(&l, &[seen("a", 4), seen("b", 400)], now);
        assert_eq!(o.gone, None);
        assert_eq!(o.heard_ago, Some(chrono::Duration::seconds(4)));
        // A store without owner records: the unexpired lease says it is live.
        assert_eq!(call_owner(&l, &[], now).gone, None);
        let edge = call_owner(&l, &[seen("a", crate::owners::GONE_AFTER_SECS)], now);
        assert_eq!(edge.gone, None);
    }

    #[test]
    fn an_answer_to_an_owner_not_heard_or_not_renewing_says_nothing_runs_now() {
        let now = t("2026-12-01T12:00:00Z");
        let held = lease("a:1:x", now + chrono::Duration::seconds(79));
        let o = call_owner(&held, &[seen("a:1:x", 41)], now);
        assert_eq!(
            o.gone.as_deref(),
            Some(
                "its owner a:1:x has not been heard for 41s; the call runs only if that owner \
                 comes back, or is recorded abandoned when its lease expires (in 1m19s)"
            )
        );
        let lapsed = lease("a:1:x", now - chrono::Duration::seconds(12));
        for owners in [vec![seen("a:1:x", 3)], vec![]] {
            let o = call_owner(&lapsed, &owners, now);
            assert_eq!(
                o.gone.as_deref(),
                Some(
                    "its owner a:1:x stopped renewing the run's lease 12s ago; nothing runs \
                     the call, and the next owner to claim records the run abandoned"
                ),
                "{owners:?}"
            );
        }
    }

    /// A cancel of a run nobody holds says so, and when the row comes; a live owner's cancel
    /// adds nothing (the owner kills the run).
    #[test]
    fn a_cancel_of_a_run_no_live_owner_holds_says_what_happens_instead() {
        let now = t("2026-12-01T12:00:00Z");
        let held = lease("a:1:x", now + chrono::Duration::seconds(20));
        assert_eq!(cancel_owner_note(&held, &[seen("a:1:x", 4)], now), None);
        assert_eq!(
            cancel_owner_note(&held, &[seen("a:1:x", 41)], now).as_deref(),
            Some(
                "no live owner holds it now: its owner a:1:x has not been heard for 41s; if it \
                 comes back before its lease expires at 2026-12-01T12:00:20Z it kills the run, \
                 otherwise the run is then recorded abandoned (its reason names the cancel)"
            )
        );
        assert_eq!(
            cancel_owner_note(&held, &[crate::owners::tests::seen("a:1:x", 1, true)], now)
                .as_deref(),
            Some(
                "no live owner holds it: its owner a:1:x has stopped; its lease expires at \
                 2026-12-01T12:00:20Z and the run is then recorded abandoned (its reason names \
                 the cancel)"
            )
        );
        let lapsed = lease("a:1:x", now - chrono::Duration::seconds(12));
        assert!(
            cancel_owner_note(&lapsed, &[], now)
                .is_some_and(|n| n.contains("which ran out at 2026-12-01T11:59:48Z")),
        );
    }

    #[test]
    fn a_queued_run_says_its_count_once() {
        let q = |added, queued| operator_notice("j", &EditOutcome::Queued { added, queued });
        assert_eq!(q(1, 1), "j: 1 run queued; the next owner claiming runs it");
        assert_eq!(
            q(1, 3),
            "j: 1 run queued (3 queued in all); owners run them one at a time"
        );
        assert_eq!(q(4, 4), "j: 4 runs queued; owners run them one at a time");
        assert_eq!(
            q(2, 5),
            "j: 2 runs queued (5 queued in all); owners run them one at a time"
        );
    }
}

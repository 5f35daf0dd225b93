//! Which owners (cronsole processes) are live on a store: the console header's `owners` count,
//! the owner lines of `jobs` and `check`, and whether anything will pick up what `trigger`,
//! `pause`, `retry` and `backfill` write.
//!
//! Owns: the rule that says an owner is live, in one place for every surface. Must not touch:
//! the store's internals (it reads the records handed to it), the terminal.
//!
//! The rule: an owner is live while the store heard its heartbeat (its record, rewritten every
//! 5 s, see [`crate::model::OwnerRecord`]) within the last [`GONE_AFTER_SECS`] on the store's
//! clock, and it has not signed off. An owner that stops cleanly signs off in its last record,
//! so it stops counting at once; a killed one stops counting when its record is
//! [`GONE_AFTER_SECS`] old — or at once when it ran in this process's own PID space (same boot
//! of the same kernel, same PID namespace: [`crate::proc::alive::pid_space`]) and its process is
//! gone (no such PID, or only its zombie). A record of another host, of another container, or of
//! a version that did not say its PID space is judged by its heartbeat alone, since its PID
//! means nothing here. Leases and history rows do not count: a killed owner's lease
//! outlives it, and a row says only that an engine ran once. A process that restarted has a
//! new owner id; the old id's record signed off or ages out, so one process shows as one owner.

use std::collections::BTreeSet;

use crate::model::OwnerSeen;

/// An owner whose heartbeat record is older than this is not counted as running (six missed
/// heartbeats).
pub const GONE_AFTER_SECS: i64 = 30;

/// Whether `o` is live: heard within [`GONE_AFTER_SECS`], not signed off, and — when it ran in
/// this process's PID space — its process not gone.
pub fn is_live(o: &OwnerSeen) -> bool {
    judged_live(o, crate::proc::alive::pid_space(), crate::proc::alive::gone)
}

/// Whether `o` ran in this process's PID space and its process is gone.
pub fn process_gone(o: &OwnerSeen) -> bool {
    same_space_gone(o, crate::proc::alive::pid_space(), crate::proc::alive::gone)
}

fn same_space_gone(o: &OwnerSeen, here: Option<&str>, gone: impl Fn(u32) -> bool) -> bool {
    here.is_some() && o.record.pid_space.as_deref() == here && gone(o.record.pid)
}

/// [`is_live`] with the PID space and the process check given (tests give their own).
fn judged_live(o: &OwnerSeen, here: Option<&str>, gone: impl Fn(u32) -> bool) -> bool {
    o.record.signed_off.is_none()
        && o.ago <= chrono::Duration::seconds(GONE_AFTER_SECS)
        && !same_space_gone(o, here, gone)
}

/// The live owners ([`is_live`]), in id order.
pub fn live(owners: &[OwnerSeen]) -> BTreeSet<String> {
    owners
        .iter()
        .filter(|o| is_live(o))
        .map(|o| o.record.owner.clone())
        .collect()
}

/// The words every surface uses when no owner is live: what was written waits in the store.
pub const NO_ENGINE: &str = "no engine is running on this store";

/// What a run queued while no owner is live waits for (`None` when one is): the words that
/// replace "the next owner claiming runs it" after `trigger`, `retry` and `backfill`.
pub fn waiting_note(owners: &[OwnerSeen]) -> Option<String> {
    live(owners).is_empty().then(|| {
        format!(
            "{NO_ENGINE} (none heard from in the last {GONE_AFTER_SECS}s): it runs when one \
             starts (`cronsole run`, or `cronsole` with the jobs file)"
        )
    })
}

/// The note `pause` prints while no owner is live: the pause is stored and holds for any
/// engine that starts; nothing was running the job meanwhile.
pub fn paused_note(owners: &[OwnerSeen]) -> Option<String> {
    live(owners).is_empty().then(|| {
        format!(
            "paused in the store; {NO_ENGINE} (none heard from in the last \
             {GONE_AFTER_SECS}s): every engine that starts honours the pause"
        )
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::testkit::time::rfc3339 as t;

    /// An owner heard `ago` seconds ago (signed off at its last beat when `signed_off`).
    pub(crate) fn seen(owner: &str, ago: i64, signed_off: bool) -> OwnerSeen {
        let at = t("2026-12-01T00:00:00Z");
        OwnerSeen {
            record: crate::model::OwnerRecord {
                owner: owner.into(),
                host: "h".into(),
                pid: 1,
                pid_space: None,
                version: "0".into(),
                started_at: at,
                last_seen: at,
                clock_offset_ms: 0,
                claims_stopped: None,
                signed_off: signed_off.then_some(at),
            },
            ago: chrono::Duration::seconds(ago),
        }
    }

    #[test]
    fn live_owners_are_those_heard_of_lately_that_did_not_sign_off() {
        let owners = [
            seen("a", 4, false),
            seen("b", GONE_AFTER_SECS + 1, false),
            seen("c", GONE_AFTER_SECS, false),
            seen("d", 1, true),
            seen("e", -3, false),
        ];
        assert_eq!(
            live(&owners).into_iter().collect::<Vec<_>>(),
            ["a", "c", "e"]
        );
    }

    #[test]
    fn an_owner_of_this_pid_space_whose_process_is_gone_is_not_live_at_once() {
        let gone = |pid: u32| pid == 42;
        let mut o = seen("a", 1, false);
        o.record.pid = 42;
        // No PID space on the record (an older version, or unreadable): its heartbeat decides.
        assert!(judged_live(&o, Some("boot/pid:[1]"), gone));
        o.record.pid_space = Some("boot/pid:[1]".into());
        assert!(!judged_live(&o, Some("boot/pid:[1]"), gone));
        // Another host or container: its PID means nothing here.
        assert!(judged_live(&o, Some("boot/pid:[2]"), gone));
        assert!(judged_live(&o, Some("other/pid:[1]"), gone));
        assert!(judged_live(&o, None, gone));
        // Its process runs: live while heard from.
        o.record.pid = 7;
        assert!(judged_live(&o, Some("boot/pid:[1]"), gone));
        // This very process, through the real check.
        let mut me = seen("me", 1, false);
        me.record.pid = std::process::id();
        me.record.pid_space = crate::proc::alive::pid_space().map(str::to_string);
        assert!(is_live(&me) && !process_gone(&me));
    }

    #[test]
    fn the_notes_are_given_only_when_no_owner_is_live() {
        let gone = [seen("a", GONE_AFTER_SECS + 1, false), seen("b", 0, true)];
        let q = waiting_note(&gone).unwrap();
        assert!(q.starts_with("no engine is running on this store"), "{q}");
        assert!(q.contains("last 30s") && q.contains("cronsole run"), "{q}");
        assert!(waiting_note(&[]).is_some());
        let p = paused_note(&gone).unwrap();
        assert!(p.contains("no engine is running on this store"), "{p}");
        let one = [seen("a", 2, false)];
        assert_eq!(waiting_note(&one), None);
        assert_eq!(paused_note(&one), None);
    }
}

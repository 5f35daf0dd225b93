//! `after:` chains: what a parent's finished run does to the records of the
//! jobs chained after it, and when such a job's chained run may be claimed.
//!
//! Owns: recording a parent's run as pending in its children's records ([`fan_out`]), the
//! fan-in readiness test ([`ready`]), taking the pending runs into a claim ([`take`]) and
//! stamping the chained run's row with its parent ([`stamp`]). Must not touch: I/O, clocks,
//! history storage; the stores call these inside the persist that records the parent's end.
//!
//! Decisions:
//! - The pending run is written into the CHILD's record in the same persist as the parent's
//!   completion (file store: the same journal append, the children's lines before the
//!   parent's, so a torn append that kept the parent's line kept the children's; PostgreSQL:
//!   the same transaction). A completion retried, or a run recovered from its landed row,
//!   records the run again only if the child has not seen that run id (`chain_seen`): the
//!   child starts at most once per parent run and a crash between the two loses nothing.
//! - Per parent the child keeps the NEWEST firing run it has not run for: a parent that
//!   finished twice before the child could start makes one chained run, for its newest run.
//! - Fan-in: the chained run starts once every `after:` parent has a pending run; it consumes
//!   them all. The row's `parent_run_id` is the parent run that finished last.
//! - A paused or disabled child keeps its pending runs and runs once on resume; a 429 hold
//!   delays it like a slot. A retired child records nothing.
//! - Only a run's own end fires (succeeded, failed, no_change, abandoned as [`ChainOn`] says);
//!   `missed` and overlap `skipped` rows are not runs. A completion that arrives after its
//!   lease was taken over (stale) fires nothing: the recovery's `abandoned` row already did —
//!   also when that late row supersedes the `abandoned` one (`plan::complete::complete_step`).

use crate::model::{
    CHAIN_OUTPUT_MAX_CHARS, ChainOn, Gate, HistoryRow, JobDef, JobRecord, Lease, ParentRun, Status,
    truncate_marked,
};

/// Whether `row` is the end of a run (as opposed to a `missed` or overlap row).
pub fn is_run_end(row: &HistoryRow) -> bool {
    matches!(
        row.status,
        Status::Succeeded | Status::Failed | Status::NoChange | Status::Abandoned
    )
}

/// Whether `row` can fire chained jobs at all: a run's own end, not a stale completion.
pub fn may_fire(row: &HistoryRow) -> bool {
    is_run_end(row) && !row.stale_lease
}

/// The parent output a chained job receives: the result, else the error, else the reason.
pub fn output_of(row: &HistoryRow) -> Option<String> {
    row.result
        .as_deref()
        .filter(|s| !s.is_empty())
        .or(row.error.as_deref())
        .or(row.reason.as_deref())
        .map(|s| truncate_marked(s, CHAIN_OUTPUT_MAX_CHARS))
}

/// Whether `def` is chained after `parent`.
pub fn is_child_of(def: &JobDef, parent: &str) -> bool {
    def.after.iter().any(|a| a.job == parent)
}

/// Record the parent's run end `row` in `child` when its `after:` entry fires on it. Returns
/// whether the child's record changed.
pub fn record(child: &mut JobRecord, parent: &JobDef, row: &HistoryRow) -> bool {
    if child.rt.retired {
        return false;
    }
    let Some(entry) = child.def.after.iter().find(|a| a.job == parent.name) else {
        return false;
    };
    let monitor = matches!(parent.gate, Some(Gate::Monitor { .. }));
    if !entry.on.fires_on(row.status) || (entry.on == ChainOn::Change && !monitor) {
        return false;
    }
    if child.rt.chain_seen.get(&parent.name) == Some(&row.run_id) {
        return false;
    }
    child.rt.chain_seen.insert(parent.name.clone(), row.run_id);
    child.rt.chain_pending.insert(
        parent.name.clone(),
        ParentRun {
            job: parent.name.clone(),
            run_id: row.run_id,
            status: row.status,
            finished_at: row.finished_at,
            output: output_of(row),
        },
    );
    true
}

/// Record `row` (the parent's run end) in every child among `records`; returns the names of
/// the children whose records changed. `row` must be the run's own end, fenced by its lease.
pub fn fan_out<'a>(
    parent: &JobDef,
    row: &HistoryRow,
    records: impl IntoIterator<Item = &'a mut JobRecord>,
) -> Vec<String> {
    if !may_fire(row) {
        return Vec::new();
    }
    records
        .into_iter()
        .filter(|c| is_child_of(&c.def, &parent.name))
        .filter_map(|c| record(c, parent, row).then(|| c.def.name.clone()))
        .collect()
}

/// Whether the job's chained run may start as far as its parents go: every `after:` parent
/// has a pending run.
pub fn ready(rec: &JobRecord) -> bool {
    !rec.def.after.is_empty()
        && rec
            .def
            .after
            .iter()
            .all(|a| rec.rt.chain_pending.contains_key(&a.job))
}

/// Take the pending runs for a claim, in `after:` order (pending runs of parents no longer
/// listed are dropped).
pub fn take(rec: &mut JobRecord) -> Vec<ParentRun> {
    let mut pending = std::mem::take(&mut rec.rt.chain_pending);
    rec.def
        .after
        .iter()
        .filter_map(|a| pending.remove(&a.job))
        .collect()
}

/// The parent run that released a chained run: the last of its parents to finish.
pub fn releaser(chain: &[ParentRun]) -> Option<&ParentRun> {
    chain.iter().max_by_key(|p| p.finished_at)
}

/// Name the parent on a chained run's row.
pub fn stamp(row: &mut HistoryRow, lease: &Lease) {
    if let Some(p) = releaser(&lease.chain) {
        row.parent_job = Some(p.job.clone());
        row.parent_run_id = Some(p.run_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{After, MonitorSource, Trigger};
    use chrono::{DateTime, Utc};

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_000_000 + s, 0).unwrap()
    }

    fn child(after: &[(&str, ChainOn)]) -> JobRecord {
        let mut d = crate::testkit::jobs::command_job("c", 60);
        d.schedule = crate::schedule::ScheduleSpec::AfterOnly;
        d.after = after
            .iter()
            .map(|(j, on)| After {
                job: j.to_string(),
                on: *on,
            })
            .collect();
        crate::store::policy::define::new_record(d, t(0)).unwrap()
    }

    fn end(job: &str, status: Status, at: i64) -> HistoryRow {
        let mut r = HistoryRow::new(job, status, Trigger::Schedule, Some(t(at)), "o", t(at));
        r.result = Some(format!("out of {job}"));
        r
    }

    #[test]
    fn each_on_fires_on_its_statuses_only() {
        let a = crate::testkit::jobs::command_job("a", 60);
        for (on, status, fires) in [
            (ChainOn::Success, Status::Succeeded, true),
            (ChainOn::Success, Status::Failed, false),
            (ChainOn::Failure, Status::Failed, true),
            (ChainOn::Failure, Status::Abandoned, true),
            (ChainOn::Failure, Status::Succeeded, false),
            (ChainOn::Completion, Status::NoChange, true),
            (ChainOn::Completion, Status::Skipped, false),
            // `change` needs a monitor parent.
            (ChainOn::Change, Status::Succeeded, false),
        ] {
            let mut c = child(&[("a", on)]);
            let changed = fan_out(&a, &end("a", status, 1), [&mut c]);
            assert_eq!(!changed.is_empty(), fires, "{on:?} on {status:?}");
            assert_eq!(ready(&c), fires);
        }
        let mut m = a.clone();
        m.gate = Some(Gate::Monitor {
            source: MonitorSource::Command {
                command: "true".into(),
            },
        });
        let mut c = child(&[("a", ChainOn::Change)]);
        assert!(fan_out(&m, &end("a", Status::NoChange, 1), [&mut c]).is_empty());
        assert_eq!(
            fan_out(&m, &end("a", Status::Succeeded, 2), [&mut c]),
            ["c"]
        );
    }

    #[test]
    fn the_same_parent_run_is_recorded_once_even_after_it_was_taken() {
        let a = crate::testkit::jobs::command_job("a", 60);
        let mut c = child(&[("a", ChainOn::Success)]);
        let row = end("a", Status::Succeeded, 1);
        assert_eq!(fan_out(&a, &row, [&mut c]).len(), 1);
        let taken = take(&mut c);
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].run_id, row.run_id);
        assert_eq!(taken[0].output.as_deref(), Some("out of a"));
        // A retried completion (or recovery from the landed row) of the same run.
        assert!(fan_out(&a, &row, [&mut c]).is_empty());
        assert!(!ready(&c));
        // The parent's next run fires again.
        assert_eq!(
            fan_out(&a, &end("a", Status::Succeeded, 61), [&mut c]).len(),
            1
        );
    }

    #[test]
    fn fan_in_waits_for_every_parent_and_names_the_last_to_finish() {
        let a = crate::testkit::jobs::command_job("a", 60);
        let b = crate::testkit::jobs::command_job("b", 60);
        let mut c = child(&[("a", ChainOn::Success), ("b", ChainOn::Completion)]);
        fan_out(&a, &end("a", Status::Succeeded, 1), [&mut c]);
        assert!(!ready(&c));
        // A second run of `a` replaces the first (newest kept).
        let a2 = end("a", Status::Succeeded, 5);
        fan_out(&a, &a2, [&mut c]);
        assert!(!ready(&c));
        let b1 = end("b", Status::Failed, 3);
        fan_out(&b, &b1, [&mut c]);
        assert!(ready(&c));
        let taken = take(&mut c);
        assert_eq!(
            taken.iter().map(|p| p.job.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(releaser(&taken).unwrap().run_id, a2.run_id);
        assert!(c.rt.chain_pending.is_empty());
    }

    #[test]
    fn overlap_and_stale_rows_fire_nothing() {
        let a = crate::testkit::jobs::command_job("a", 60);
        let mut c = child(&[("a", ChainOn::Completion)]);
        let mut skipped = end("a", Status::Skipped, 1);
        skipped.reason = Some("overlap".into());
        assert!(fan_out(&a, &skipped, [&mut c]).is_empty());
        assert!(fan_out(&a, &end("a", Status::Missed, 1), [&mut c]).is_empty());
        let mut stale = end("a", Status::Succeeded, 1);
        stale.stale_lease = true;
        assert!(fan_out(&a, &stale, [&mut c]).is_empty());
        c.rt.retired = true;
        assert!(fan_out(&a, &end("a", Status::Succeeded, 2), [&mut c]).is_empty());
    }
}

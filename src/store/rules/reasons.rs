//! The words the store writes: the `reason` of the rows it generates and the `retired_reason`
//! of a job it retires, in one place so every view and test speaks the same vocabulary.
//!
//! Owns: those constants and the two texts built from data ([`rerun_hint`], [`spent_reason`]).
//! Must not touch: when they are written (the policies decide that).

use crate::model::JobDef;

/// The `reason` of a slot that came due while a run of the job was live.
pub const REASON_OVERLAP: &str = "overlap";

/// The `retired_reason` of a job that left the jobs file (applying it again brings it back).
pub const REASON_REMOVED: &str = "removed from the jobs file";

/// The reason of the `skipped` row of an operator run queued on a job that left the jobs file.
pub const REASON_QUEUED_REMOVED: &str =
    "job removed from the jobs file before this queued run started";

/// Why a run that spent the job retires it, once it ended with `runs` counted runs; `ran`:
/// that run's action ran (its status counts toward `max_runs`).
pub fn spent_reason(def: &JobDef, runs: u64, ran: bool) -> &'static str {
    if def.schedule.is_at() {
        if ran { "at: ran" } else { RETIRED_AT_SKIPPED }
    } else if def.max_runs.is_some_and(|m| runs >= m) {
        if def.max_runs == Some(1) {
            "once: ran"
        } else {
            "max_runs reached"
        }
    } else if def.until.is_some() {
        RETIRED_UNTIL
    } else {
        RETIRED_NO_SLOTS
    }
}

/// What an `abandoned` row of an operator's run says about running it again.
pub fn rerun_hint(run_id: uuid::Uuid) -> String {
    format!("not re-run by itself (`cronsole retry {run_id}` or R runs it again)")
}

/// The start of the reason of a run cancelled by a newer slot (`cancel_previous`); the slot
/// follows: `cancelled: superseded by slot 2026-11-30T10:05:00Z`.
pub const REASON_SUPERSEDED: &str = "cancelled: superseded by slot";

/// The reason written on a run an operator cancelled.
pub const REASON_CANCELLED: &str = "cancelled by operator";

/// The `owner` of rows an operator's edit writes (no runner made them).
pub const OPERATOR_OWNER: &str = "operator";

/// The `reason` of the `skipped` row of each queued run `cancel JOB` dropped.
pub const REASON_QUEUED_CANCELLED: &str = "queued run cancelled by the operator before it started";

/// The `retired_reason` of a job whose `until` passed.
pub const RETIRED_UNTIL: &str = "until passed";
/// The `retired_reason` of an `at` job whose one slot ended without its action running (a gate
/// said no, a budget refused the call): the slot is decided, the row says why.
pub const RETIRED_AT_SKIPPED: &str = "at: slot skipped, did not run";
/// The `retired_reason` of a job whose schedule has no slot left.
pub const RETIRED_NO_SLOTS: &str = "no more slots";
/// The `retired_reason` of a one-shot job whose run was recorded `abandoned` after an operator
/// asked to cancel it (its owner died first): it is not re-offered.
pub const RETIRED_CANCELLED: &str = "cancelled by operator";
/// The `retired_reason` of a one-shot job whose retry was abandoned too.
pub const RETIRED_ABANDONED_TWICE: &str = "abandoned twice";

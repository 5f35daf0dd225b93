//! History rows as the store compares and generates them: when two rows are the same row, which
//! rows the store generates for slots (`missed`, overlap `skipped`), the part of a generated row
//! that rows already in history do not record yet, and the rows written for slots a run
//! overlapped or a lease that expired.
//!
//! Owns: [`same_row`], [`is_generated`], [`unlanded_part`], [`overlap_row`], [`abandoned_row`],
//! [`keep_unread_answer`], [`keep_answer_of_abandoned`], [`attach_record`], [`record_outgrew`].
//! Must not touch: counting rows into a record (`store::policy::counters`), storage.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::reasons::{REASON_OVERLAP, rerun_hint};
use super::slots::{SLOT_COUNT_CAP, ms};
use crate::model::{HistoryRow, JobRecord, Lease, Status, Trigger};
use crate::schedule::Compiled;
use crate::transcript::{Approval, Transcript};

/// Whether `new` is a row `old` already records: the same run (run_id) and status, or the same generated
/// `missed`/`skipped` row for the same job and slot (those get a fresh run_id each time they
/// are computed, so a retried claim or completion would otherwise write them twice).
pub fn same_row(old: &HistoryRow, new: &HistoryRow) -> bool {
    if old.job != new.job {
        return false;
    }
    if old.run_id == new.run_id {
        // Not a dead recoverer's `abandoned` row beside the run's real end, nor beside the
        // `abandoned` row that replaces it with the calls the run recorded since.
        let replaces = new.supersedes_abandoned && !old.supersedes_abandoned;
        return old.status == new.status && !(replaces && new.status == Status::Abandoned);
    }
    if new.slot.is_none() || old.status != new.status || old.slot != new.slot {
        return false;
    }
    match new.status {
        // A retry later than the first attempt covers the same first slot and maybe more
        // (see [`unlanded_part`]); its reason names its own age.
        Status::Missed => old.slot_end >= new.slot_end,
        Status::Skipped => old.slot_end == new.slot_end && old.reason == new.reason,
        _ => false,
    }
}

/// [`same_row`], where `runs` are the runs whose own rows are being written: a run's own row is
/// only ever recorded by a row of that run. Another run of the same slot (a one-shot's recovery
/// retry, after the first run's late end landed) can end with the same status, slot and reason,
/// and must still leave its row.
pub fn same_row_of_runs(old: &HistoryRow, new: &HistoryRow, runs: &[Uuid]) -> bool {
    if old.run_id != new.run_id && runs.contains(&new.run_id) {
        return false;
    }
    same_row(old, new)
}

/// Whether `row` is one the store generates for slots (a `missed` row or an overlap `skipped`
/// row), not a run's own row.
pub fn is_generated(row: &HistoryRow) -> bool {
    row.slot.is_some()
        && (row.status == Status::Missed
            || (row.status == Status::Skipped && row.reason.as_deref() == Some(REASON_OVERLAP)))
}

/// `new` (a row about to be written) without what rows already in history record: nothing when
/// one of them records it whole. A generated row ([`is_generated`]) computed again later, or by
/// another process, than landed generated rows of the same job (a `missed` retry covers the
/// landed row's slots and more; an overlap row computed at a later completion reaches further
/// than the one a dead recoverer wrote, whose `missed` row may follow it) keeps only the slots
/// no landed row records: each slot in exactly one row. Landed rows can cover several stretches
/// of `new` (a recoverer's overlap row, then its `missed` row: fault-simulator seeds 760, 514,
/// 687), so every landed row is taken into account, not only the one covering the first slot;
/// a gap between two landed rows becomes a row of its own (a fresh `run_id` after the first).
pub fn unlanded_part(new: HistoryRow, landed: &[HistoryRow], sched: &Compiled) -> Vec<HistoryRow> {
    if landed.iter().any(|l| same_row(l, &new)) {
        return Vec::new();
    }
    if !is_generated(&new) {
        return vec![new];
    }
    let Some(first) = new.slot else {
        return vec![new];
    };
    let end = new.slot_end.unwrap_or(first);
    let covered: Vec<(DateTime<Utc>, DateTime<Utc>)> = landed
        .iter()
        .filter(|l| l.job == new.job && is_generated(l))
        .filter_map(|l| Some((l.slot?, l.slot_end.or(l.slot)?)))
        .filter(|(s, e)| *s <= end && *e >= first)
        .collect();
    if covered.is_empty() {
        return vec![new];
    }
    // Uncovered stretches of [first, end], as (exclusive lower bound, inclusive upper bound).
    let mut stretches: Vec<(DateTime<Utc>, DateTime<Utc>)> = Vec::new();
    let mut after = first - ms(1);
    // The next slot to decide, then past every landed row covering it.
    while let Some(mut cur) = sched.next_after(after).filter(|c| *c <= end) {
        while let Some(e) = covered
            .iter()
            .filter(|(s, e)| *s <= cur && *e >= cur)
            .map(|(_, e)| *e)
            .max()
        {
            match sched.next_after(e).filter(|c| *c <= end) {
                Some(c) => cur = c,
                None => return pieces_of(new, &stretches, sched),
            }
        }
        // `cur` is recorded by no landed row: the stretch runs to the next landed row.
        let stop = covered.iter().map(|(s, _)| *s).filter(|s| *s > cur).min();
        match stop {
            Some(s) if s <= end => {
                stretches.push((cur - ms(1), s - ms(1)));
                after = s - ms(1);
            }
            _ => {
                stretches.push((cur - ms(1), end));
                break;
            }
        }
    }
    pieces_of(new, &stretches, sched)
}

/// The rows of [`unlanded_part`]: `new` narrowed to each stretch (the first keeps its run_id).
pub(crate) fn pieces_of(
    new: HistoryRow,
    stretches: &[(DateTime<Utc>, DateTime<Utc>)],
    sched: &Compiled,
) -> Vec<HistoryRow> {
    let mut out = Vec::new();
    for (after, until) in stretches {
        let Some((first, last, n)) = sched.slots_between(*after, *until, SLOT_COUNT_CAP) else {
            continue;
        };
        let mut row = new.clone();
        if !out.is_empty() {
            row.run_id = Uuid::new_v4();
        }
        row.slot = Some(first);
        row.slot_end = Some(last);
        row.slots_count = Some(n);
        out.push(row);
    }
    out
}

/// The row written when a lease expired without completion, naming `owner` as the owner that
/// recovered the run.
pub fn abandoned_row(
    rec: &JobRecord,
    lease: &Lease,
    owner: &str,
    now: DateTime<Utc>,
) -> HistoryRow {
    let mut row = HistoryRow::new(
        &rec.def.name,
        Status::Abandoned,
        lease.trigger,
        lease.slot,
        owner,
        now,
    );
    row.run_id = lease.run_id;
    row.recovered_by = Some(owner.to_string());
    row.started_at = lease.claimed_at;
    row.duration_ms = (now - lease.claimed_at).num_milliseconds().max(0) as u64;
    let mut reason = format!(
        "lease of owner {} expired at {} without completion",
        lease.owner,
        lease
            .lease_until
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    );
    if lease.trigger.is_operator() {
        // An operator's run (retry, backfill, manual trigger) is not re-run by itself: its
        // action may have done part of its work, so running it again is the operator's call.
        // The hint comes first so that a cut reason (the `history` table) still shows it.
        reason = format!("{}: {reason}", rerun_hint(lease.run_id));
    }
    if let Some(at) = lease.cancel_requested_at {
        // An operator asked to cancel the run, but no live owner held it to kill it: the run
        // ended with its owner, and its row says both.
        reason.push_str(&format!(
            "; cancel requested by an operator at {}",
            at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        ));
    }
    if let Some(a) = &lease.awaiting
        && let Some(ans) = &a.answer
    {
        // An operator answered the call the run waited for, and the run died before it read
        // the answer: the row says so, and the call on its record carries the answer.
        reason.push_str(&unrun_words(a, ans));
        row.unrun_answer = Some((a.call_id.clone(), approval_of(ans)));
    }
    row.reason = Some(reason);
    row
}

/// What a row's reason adds for an answer its run never read: `; its call to T, awaiting
/// approval, was approved by U at T but never ran`.
fn unrun_words(a: &crate::model::AwaitingApproval, ans: &crate::model::ApprovalAnswer) -> String {
    let what = if ans.approved { "approved" } else { "denied" };
    // No `by`: the owner's own denial at the wait's timeout.
    let by = ans
        .by
        .as_deref()
        .map_or_else(|| " at its timeout".to_string(), |b| format!(" by {b}"));
    format!(
        "; its call to {}, awaiting approval, was {what}{by} at {} but never ran",
        a.tool,
        ans.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    )
}

/// The late end of a run recorded `abandoned` (its owner was only stopped) replaces that row,
/// which said what an operator answered to the call the run waited on and that it never ran:
/// the late row says it too, in its reason and on the call in its transcript (the run never
/// read the answer: it lost its lease first).
pub fn keep_answer_of_abandoned(row: &mut HistoryRow, a: &crate::model::AwaitingApproval) {
    let Some(ans) = &a.answer else {
        return;
    };
    if let Some(t) = row.transcript.as_mut() {
        t.answer_unrun(&a.call_id, approval_of(ans));
    }
    let words = unrun_words(a, ans);
    match row.reason.as_mut() {
        Some(r) if !r.contains(&words) => r.push_str(&words),
        Some(_) => {}
        None => row.reason = Some(words.trim_start_matches("; ").to_string()),
    }
}

/// An operator's answer as the call's record keeps it.
fn approval_of(ans: &crate::model::ApprovalAnswer) -> Approval {
    let why = ans.reason.clone().filter(|r| !r.trim().is_empty());
    if ans.approved {
        Approval::Approved {
            by: ans.by.clone(),
            reason: why,
        }
    } else {
        Approval::Denied {
            reason: why.unwrap_or_default(),
            by: ans.by.clone(),
        }
    }
}

/// A run ends by its owner's own completion (a cancel, a shutdown) while the store holds an
/// answer its call never read: the answer was acknowledged to an operator, so it goes on the
/// call in the row's transcript (which stays `awaiting_approval`: it never ran). The reason is
/// left as it is: it says why the run ended, and other rules read it whole.
pub fn keep_unread_answer(row: &mut HistoryRow, lease: &Lease) {
    if let Some(a) = &lease.awaiting
        && let Some(ans) = &a.answer
        && let Some(t) = row.transcript.as_mut()
    {
        t.answer_unrun(&a.call_id, approval_of(ans));
    }
}

/// Put a run's persisted record (`None`: it kept none) on its `abandoned` row: the transcript,
/// its turns and calls, and the answer an operator gave to the call the run waited for, on
/// that call (which never ran).
pub fn attach_record(row: &mut HistoryRow, record: Option<Transcript>) {
    let answer = row.unrun_answer.take();
    let Some(mut t) = record else {
        return;
    };
    if let Some((call_id, approval)) = answer {
        t.answer_unrun(&call_id, approval);
    }
    let (turns, calls) = t.counts();
    row.turns = Some(turns);
    row.tool_calls = Some(calls);
    // A row written for a dead owner's run has no attempt log (the requests' times died with
    // the owner); its `attempts` is still the most requests one recorded turn needed.
    if row.attempts == 0 {
        row.attempts = t
            .entries()
            .filter_map(|e| match e {
                crate::transcript::Entry::Turn(turn) => Some(turn.attempts),
                _ => None,
            })
            .max()
            .unwrap_or(0);
    }
    row.transcript = Some(t);
}

/// Whether the record a tool loop persisted (`record`) differs from what the `abandoned` row
/// `row` already in history shows: the row was written by a recoverer that died before its
/// record write, and the run, still holding its lease, recorded further steps since. Such a
/// row is written again with the whole record (superseding the landed one), else the calls
/// recorded after it would be on no row.
pub fn record_outgrew(row: &HistoryRow, record: &Transcript) -> bool {
    match &row.transcript {
        None => !record.is_empty(),
        Some(shown) => shown.to_vec() != record.to_vec(),
    }
}

/// The `skipped` overlap row for the slots from `next` whose fire instant came by `bound`
/// (a slot whose jittered instant is still to come is not overlapped: it fires later), and the
/// job's next slot after them.
pub fn overlap_row(
    rec: &JobRecord,
    sched: &Compiled,
    next: DateTime<Utc>,
    bound: DateTime<Utc>,
    owner: &str,
    now: DateTime<Utc>,
) -> (Option<HistoryRow>, Option<DateTime<Utc>>) {
    let bound = match sched.latest_at_or_before(bound) {
        Some(l) if l >= next && rec.def.fire_at(l) > bound => l - ms(1),
        _ => bound,
    };
    let row = sched
        .slots_between(next - ms(1), bound, SLOT_COUNT_CAP)
        .map(|(first, last, n)| {
            let mut o = HistoryRow::new(
                &rec.def.name,
                Status::Skipped,
                Trigger::Schedule,
                Some(first),
                owner,
                now,
            );
            o.reason = Some(REASON_OVERLAP.to_string());
            o.slots_count = Some(n);
            o.slot_end = Some(last);
            o
        });
    (row, sched.next_after(bound))
}

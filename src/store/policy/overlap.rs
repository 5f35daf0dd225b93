//! What a job's `overlap:` policy does to its record: the hooks the claim plan calls while a run
//! of the job is live, when a run ends, and when the job is next looked at.
//!
//! Owns: `buffer_one` (the first slot that came during a run is kept in the record and claimed
//! as soon as no run is live; later ones get the usual `skipped` overlap row), `cancel_previous`
//! (a due slot marks the live run's lease for cancellation — the same mark an operator's
//! `cancel` sets, so the owner running it kills its process tree — and the slot is claimed when
//! that run has ended; its row says [`REASON_SUPERSEDED`]) and `allow` (slots are claimed beside
//! live runs, each with its own lease, up to `max_concurrent_runs`; a slot beyond the bound gets
//! a `skipped` overlap row at once). `skip`, the default, is the run end's overlap row
//! (`store::policy::run_end`).
//! Must not touch: I/O, clocks, history storage (every function takes `now` and mutates one
//! record; callers persist it and the rows).
//!
//! Decisions:
//! - A buffered slot runs whatever its age (it was owed while an owner was running, not lost
//!   to downtime: misfire grace does not apply), and is kept through a pause (it runs on resume).
//!   It is claimed with `trigger: schedule` for its own slot and does not move the job's next
//!   slot; a run that ends after more slots came buffers the first of them again.
//! - A pause while a `skip`/`buffer_one` run is live sets aside the slots already due during it
//!   ([`on_pause`]): the run's end writes their overlap row (or keeps the first) whether it ends
//!   paused or after a resume. A second pause during the same run extends that range (one row
//!   whose `slots_count` counts only the slots that were due, not the paused ones between).
//! - `cancel_previous` marks a run once; the slot that marked it is claimed after the run's row
//!   is written (with any slots that came meanwhile coalesced into it). A run an operator is
//!   already cancelling is not marked again (its row keeps `cancelled by operator`). A run that
//!   ends by itself before its owner kills it keeps its own status.
//! - `allow`: operator runs (manual trigger, retry, backfill) never start beside a live run;
//!   only slots do. An owner does not recover its own expired leases of such a job while it
//!   runs the job (another owner, or its own next start, does).

use chrono::{DateTime, SecondsFormat, Utc};

use super::counters::count_row;
use crate::model::{
    BudgetPeriod, HistoryRow, JobRecord, Lease, Overlap, SlotRange, Status, Superseded, Trigger,
};
use crate::schedule::Compiled;
use crate::store::rules::reasons::{REASON_CANCELLED, REASON_OVERLAP, REASON_SUPERSEDED};
use crate::store::rules::rows::overlap_row;
use crate::store::rules::runtime::{ClaimPlan, Evaluation, claim};
use crate::store::rules::slots::{compile, firing_slot};

/// `overlap: allow` with room for one more live run: the job is evaluated as if idle.
pub fn claims_beside(rec: &JobRecord) -> bool {
    !rec.rt.recovery_pending && rec.rt.live_runs() < rec.def.overlap.max_runs() && {
        matches!(rec.def.overlap, Overlap::Allow { .. })
    }
}

/// A run of the job is live and no other may start beside it: `cancel_previous` marks the live
/// run when a slot is due; `allow` at its bound records the due slots `skipped` overlap now.
pub fn while_running(
    rec: &mut JobRecord,
    sched: &Compiled,
    now: DateTime<Utc>,
    owner: &str,
    period: BudgetPeriod,
) -> Evaluation {
    let mut ev = Evaluation::default();
    let paused = rec.rt.paused || !rec.def.enabled;
    let held = rec.rt.hold_until.is_some_and(|h| h > now);
    if paused || held || rec.rt.recovery_pending || !rec.def.schedule.is_recurring() {
        return ev;
    }
    let Some(next) = rec.rt.next_slot.filter(|n| rec.def.fire_at(*n) <= now) else {
        return ev;
    };
    match rec.def.overlap {
        Overlap::CancelPrevious => {
            if rec.rt.overlap.superseded.is_some() {
                return ev;
            }
            let slot = firing_slot(rec, sched, next, now);
            let Some(lease) = rec.rt.lease.as_mut() else {
                return ev;
            };
            if lease.cancel_requested_at.is_some() {
                return ev;
            }
            lease.cancel_requested_at = Some(now);
            rec.rt.overlap.superseded = Some(Superseded {
                run_id: lease.run_id,
                by_slot: slot,
            });
            ev.changed = true;
        }
        Overlap::Allow { .. } => {
            let (row, after) = overlap_row(rec, sched, next, now, owner, now);
            if let Some(mut row) = row {
                count_row(rec, &mut row, period, now);
                ev.rows.push(row);
            }
            rec.rt.next_slot = after;
            ev.changed = true;
        }
        Overlap::Skip | Overlap::BufferOne => {}
    }
    ev
}

/// The operator pauses the job (`crate::store::policy::operator::set_paused`): under `skip` and `buffer_one` the slots
/// that fell due while its live run was in flight (up to now, or the run's lease expiry) are
/// owed an overlap row, or the kept slot, when that run ends. The run's end cannot tell them
/// from the slots that pass while paused (which record nothing), and a resume before
/// it ends moves the job's next slot past them: so they are set aside now, in the record.
pub fn on_pause(
    rec: &mut JobRecord,
    now: DateTime<Utc>,
) -> Result<(), crate::schedule::ScheduleError> {
    let Some(lease) = rec.rt.lease.as_ref() else {
        return Ok(());
    };
    let bound = lease.lease_until.min(now);
    let owner = lease.owner.clone();
    let held = rec.rt.hold_until.is_some_and(|h| h > now);
    if rec.rt.paused
        || !rec.def.enabled
        || held
        || rec.rt.recovery_pending
        || rec.def.overlap.acts_while_running()
        || !rec.def.schedule.is_recurring()
    {
        return Ok(());
    }
    let Some(next) = rec.rt.next_slot.filter(|n| rec.def.fire_at(*n) <= bound) else {
        return Ok(());
    };
    let sched = compile(rec)?;
    let (row, after) = overlap_row(rec, &sched, next, bound, &owner, now);
    let Some(row) = row else {
        return Ok(());
    };
    let (Some(first), Some(last), Some(count)) = (row.slot, row.slot_end, row.slots_count) else {
        return Ok(());
    };
    let r = &mut rec.rt.overlap.before_pause;
    *r = Some(match *r {
        // Paused again during the same run: the earlier range stays first.
        Some(old) => SlotRange {
            first: old.first,
            last,
            count: old.count + count,
        },
        None => SlotRange { first, last, count },
    });
    rec.rt.next_slot = after;
    Ok(())
}

/// `buffer_one`: the slot kept to run after the live run, for `jobs` and `describe`: the one
/// already in the record, else the first slot that fell due during the live run (decided when
/// the run ends, but owed from the moment it fell due).
pub fn kept_slot(rec: &JobRecord, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    if rec.def.overlap != Overlap::BufferOne {
        return None;
    }
    let ov = &rec.rt.overlap;
    if let Some(b) = ov.buffered_slot {
        return Some(b);
    }
    let live = rec.rt.lease.as_ref()?;
    if let Some(r) = ov.before_pause {
        return Some(r.first);
    }
    let bound = live.lease_until.min(now);
    let paused = rec.rt.paused || !rec.def.enabled;
    let held = rec.rt.hold_until.is_some_and(|h| h > now);
    if paused || held || rec.rt.recovery_pending || !rec.def.schedule.is_recurring() {
        return None;
    }
    rec.rt.next_slot.filter(|n| rec.def.fire_at(*n) <= bound)
}

/// `buffer_one`: claim the slot kept while the last run was live. It does not move the job's
/// next slot (slots that come during this run are decided when it ends).
pub fn claim_buffered(
    rec: &mut JobRecord,
    sched: &Compiled,
    now: DateTime<Utc>,
    owner: &str,
) -> Option<ClaimPlan> {
    let slot = rec.rt.overlap.buffered_slot.take()?;
    let next = rec.rt.next_slot;
    let plan = claim(rec, sched, now, owner, Some(slot), Trigger::Schedule);
    let def = &rec.def;
    let rt = &mut rec.rt;
    rt.next_slot = next;
    let max_reached = def.max_runs.is_some_and(|m| rt.runs + 1 >= m);
    let until_spent = def.until.is_some_and(|u| next.is_none_or(|n| n > u));
    let spends = max_reached || until_spent || next.is_none();
    if let Some(l) = rt.lease_of_mut(plan.run_id) {
        l.spends_job = spends;
    }
    Some(plan)
}

/// A run of the job ended (its lease already taken): a run cancelled because a newer slot
/// came (`cancel_previous`) says so in its row.
pub fn on_run_end(rec: &mut JobRecord, lease: &Lease, row: &mut HistoryRow) {
    let Some(s) = rec
        .rt
        .overlap
        .superseded
        .filter(|s| s.run_id == lease.run_id)
    else {
        return;
    };
    rec.rt.overlap.superseded = None;
    if row.status == Status::Failed && row.reason.as_deref() == Some(REASON_CANCELLED) {
        row.reason = Some(format!(
            "{REASON_SUPERSEDED} {}",
            s.by_slot.to_rfc3339_opts(SecondsFormat::Secs, true)
        ));
    }
}

/// `buffer_one` at a run's end: of the overlap row just computed, the first slot is kept to
/// run next and the row keeps only the slots after it (no row when it was the only one).
pub fn buffer_one(rec: &mut JobRecord, sched: &Compiled, extra: &mut Vec<HistoryRow>) {
    if rec.def.overlap != Overlap::BufferOne || rec.rt.overlap.buffered_slot.is_some() {
        return;
    }
    let Some(i) = extra
        .iter()
        .position(|r| r.reason.as_deref() == Some(REASON_OVERLAP))
    else {
        return;
    };
    let Some(first) = extra[i].slot else {
        return;
    };
    rec.rt.overlap.buffered_slot = Some(first);
    let n = extra[i].slots_count.unwrap_or(1);
    match sched.next_after(first) {
        Some(second) if n > 1 => {
            extra[i].slot = Some(second);
            extra[i].slots_count = Some(n - 1);
        }
        _ => {
            extra.remove(i);
        }
    }
}

/// [`wakeup`](crate::store::plan::claim::wakeup) of a job with a live run: the earliest lease
/// expiry, and the next slot's fire instant when the policy acts on it while the run is live.
pub fn wakeup_while_running(rec: &JobRecord) -> Option<DateTime<Utc>> {
    let rt = &rec.rt;
    let mut w = rt.leases().map(|l| l.lease_until).min();
    let acts = match rec.def.overlap {
        Overlap::CancelPrevious => {
            rt.overlap.superseded.is_none()
                && rt
                    .lease
                    .as_ref()
                    .is_some_and(|l| l.cancel_requested_at.is_none())
        }
        Overlap::Allow { .. } => true,
        Overlap::Skip | Overlap::BufferOne => false,
    };
    let paused = rt.paused || !rec.def.enabled;
    if acts
        && !paused
        && !rt.recovery_pending
        && !rt.retired
        && rec.def.schedule.is_recurring()
        && let Some(n) = rt.next_slot
    {
        let fire = rec.def.fire_at(n);
        let fire = rt.hold_until.map_or(fire, |h| fire.max(h));
        w = Some(w.map_or(fire, |x| x.min(fire)));
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::plan::claim::{claim_step, evaluate, wakeup};
    use crate::store::policy::define::tests_support::job;
    use crate::store::policy::operator::{EditOutcome, JobEdit, apply_edit};
    use crate::store::policy::run_end::finish_run;
    use crate::store::rules::slots::compile;

    const P: BudgetPeriod = BudgetPeriod::Day;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(s, 0).unwrap()
    }

    fn with(policy: Overlap, every: u64, lease: f64) -> JobRecord {
        let mut r = job("j", t(1000));
        r.def.overlap = policy;
        r.def.lease_seconds = lease;
        r.def.schedule = crate::schedule::ScheduleSpec::Every {
            every_seconds: every,
        };
        r
    }

    fn eval(r: &mut JobRecord, owner: &str, now: i64) -> Evaluation {
        let s = compile(r).unwrap();
        claim_step(r, &s, t(now), owner, true, P, None)
    }

    fn end(r: &mut JobRecord, plan: &ClaimPlan, status: Status, now: i64) -> Vec<HistoryRow> {
        let s = compile(r).unwrap();
        let mut row = HistoryRow::new("j", status, plan.trigger, plan.slot, "o", t(now));
        row.run_id = plan.run_id;
        let out = finish_run(r, &s, &mut row, None, None, P, t(now));
        let mut rows = vec![row];
        rows.extend(out.extra_rows);
        rows
    }

    #[test]
    fn buffer_one_with_one_slot_during_the_run_writes_no_overlap_row() {
        let mut r = with(Overlap::BufferOne, 10, 300.0);
        let a = eval(&mut r, "o", 1000).claim.unwrap();
        let rows = end(&mut r, &a, Status::Succeeded, 1015);
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(r.rt.overlap.buffered_slot, Some(t(1010)));
        assert_eq!(r.rt.next_slot, Some(t(1020)));
        assert!(wakeup(&r).is_some_and(|w| w <= t(1015)), "due at once");
        // The buffered run is live when 1020 comes: kept again for after it.
        let b = eval(&mut r, "o", 1015).claim.unwrap();
        assert_eq!(b.slot, Some(t(1010)));
        assert!(eval(&mut r, "o", 1020).claim.is_none());
        end(&mut r, &b, Status::Succeeded, 1021);
        assert_eq!(r.rt.overlap.buffered_slot, Some(t(1020)));
        assert_eq!(r.rt.runs, 2);
    }

    #[test]
    fn a_buffered_slot_waits_through_a_pause_and_runs_on_resume() {
        let mut r = with(Overlap::BufferOne, 10, 300.0);
        let a = eval(&mut r, "o", 1000).claim.unwrap();
        end(&mut r, &a, Status::Succeeded, 1015);
        crate::store::policy::operator::set_paused(&mut r, true, t(1015)).unwrap();
        assert!(eval(&mut r, "o", 1016).claim.is_none());
        assert_eq!(r.rt.overlap.buffered_slot, Some(t(1010)));
        crate::store::policy::operator::set_paused(&mut r, false, t(1100)).unwrap();
        assert_eq!(eval(&mut r, "o", 1100).claim.unwrap().slot, Some(t(1010)));
    }

    // A slot that fell due during the run, before a pause, is kept whether the run ends paused
    // or the job is resumed before the run ends.
    #[test]
    fn a_slot_due_during_the_run_before_a_pause_is_kept_through_resume() {
        use crate::store::policy::operator::set_paused;
        let mut r = with(Overlap::BufferOne, 10, 300.0);
        let a = eval(&mut r, "o", 1000).claim.unwrap();
        assert_eq!(kept_slot(&r, t(1009)), None);
        assert_eq!(
            kept_slot(&r, t(1011)),
            Some(t(1010)),
            "named while the run is live"
        );
        set_paused(&mut r, true, t(1012)).unwrap();
        assert_eq!(kept_slot(&r, t(1013)), Some(t(1010)), "and while paused");
        set_paused(&mut r, false, t(1014)).unwrap();
        assert_eq!(
            kept_slot(&r, t(1015)),
            Some(t(1010)),
            "and after the resume"
        );
        // 1020 comes after the resume while the run is still live: the usual overlap row.
        let rows = end(&mut r, &a, Status::Succeeded, 1025);
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert_eq!(rows[1].reason.as_deref(), Some(REASON_OVERLAP));
        assert_eq!(rows[1].slot, Some(t(1020)));
        assert_eq!(r.rt.overlap.buffered_slot, Some(t(1010)));
        assert!(r.rt.overlap.before_pause.is_none());
        assert_eq!(eval(&mut r, "o", 1025).claim.unwrap().slot, Some(t(1010)));
    }

    #[test]
    fn a_slot_due_during_the_run_before_a_pause_is_kept_when_the_run_ends_paused() {
        use crate::store::policy::operator::set_paused;
        let mut r = with(Overlap::BufferOne, 10, 300.0);
        let a = eval(&mut r, "o", 1000).claim.unwrap();
        set_paused(&mut r, true, t(1012)).unwrap();
        // 1020 and 1030 pass while paused: they record nothing.
        let rows = end(&mut r, &a, Status::Succeeded, 1035);
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(r.rt.overlap.buffered_slot, Some(t(1010)));
        assert!(eval(&mut r, "o", 1040).claim.is_none());
        set_paused(&mut r, false, t(1100)).unwrap();
        assert_eq!(eval(&mut r, "o", 1100).claim.unwrap().slot, Some(t(1010)));
    }

    #[test]
    fn skip_writes_the_overlap_row_of_a_slot_due_before_a_pause() {
        use crate::store::policy::operator::set_paused;
        let mut r = with(Overlap::Skip, 10, 300.0);
        let a = eval(&mut r, "o", 1000).claim.unwrap();
        set_paused(&mut r, true, t(1022)).unwrap();
        set_paused(&mut r, false, t(1024)).unwrap();
        let rows = end(&mut r, &a, Status::Succeeded, 1025);
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert_eq!(rows[1].status, Status::Skipped);
        assert_eq!(rows[1].reason.as_deref(), Some(REASON_OVERLAP));
        assert_eq!(
            (rows[1].slot, rows[1].slot_end),
            (Some(t(1010)), Some(t(1020)))
        );
        assert_eq!(rows[1].slots_count, Some(2));
        assert_eq!(r.rt.next_slot, Some(t(1030)));
        assert!(r.rt.overlap.before_pause.is_none());
        // Paused while idle: nothing is set aside.
        set_paused(&mut r, true, t(1026)).unwrap();
        assert!(r.rt.overlap.before_pause.is_none());
    }

    #[test]
    fn disabling_in_the_jobs_file_during_a_run_keeps_the_slots_due_before_it() {
        let mut r = with(Overlap::Skip, 10, 300.0);
        let a = eval(&mut r, "o", 1000).claim.unwrap();
        let mut def = r.def.clone();
        def.enabled = false;
        crate::store::policy::define::apply_def(&mut r, &def, t(1015)).unwrap();
        let rows = end(&mut r, &a, Status::Succeeded, 1035);
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert_eq!(
            (rows[1].slot, rows[1].slots_count),
            (Some(t(1010)), Some(1))
        );
    }

    #[test]
    fn cancel_previous_marks_once_and_wakes_for_the_slot_only_before() {
        let mut r = with(Overlap::CancelPrevious, 10, 300.0);
        let a = eval(&mut r, "o", 1000).claim.unwrap();
        assert_eq!(wakeup(&r), Some(t(1010)), "the next slot, before the lease");
        let ev = eval(&mut r, "o", 1010);
        assert!(ev.claim.is_none() && ev.changed);
        assert_eq!(wakeup(&r), Some(t(1300)), "marked: only the lease expiry");
        assert!(!eval(&mut r, "o", 1020).changed, "marked once");
        // A run that ended by itself before its owner killed it keeps its status.
        let rows = end(&mut r, &a, Status::Succeeded, 1021);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].reason, None);
        assert!(r.rt.overlap.superseded.is_none());
        // The due slots run as one coalesced fire.
        let next = eval(&mut r, "o", 1021).claim.unwrap();
        assert_eq!(next.slot, Some(t(1010)));
        assert_eq!(next.coalesced.map(|c| c.count), Some(2));
    }

    #[test]
    fn cancel_previous_leaves_an_operators_cancel_alone() {
        let mut r = with(Overlap::CancelPrevious, 10, 300.0);
        eval(&mut r, "o", 1000).claim.unwrap();
        apply_edit(&mut r, &JobEdit::Cancel(None), t(1005)).unwrap();
        assert!(!eval(&mut r, "o", 1010).changed);
        assert!(r.rt.overlap.superseded.is_none());
    }

    #[test]
    fn allow_never_recovers_the_claimers_own_leases_but_others_do() {
        let mut r = with(
            Overlap::Allow {
                max_concurrent_runs: 3,
            },
            10,
            5.0,
        );
        let a = eval(&mut r, "me", 1000).claim.unwrap();
        // Its lease ran out at 1005; "me" still runs it, so its claim at 1010 takes a second
        // run beside it and writes no `abandoned` row.
        let ev = eval(&mut r, "me", 1010);
        assert!(ev.rows.is_empty(), "{:?}", ev.rows);
        assert!(ev.claim.is_some());
        assert_eq!(r.rt.live_runs(), 2);
        let ev = eval(&mut r, "other", 1016);
        assert_eq!(ev.rows.len(), 2, "both expired leases: {:?}", ev.rows);
        assert!(ev.rows.iter().all(|x| x.status == Status::Abandoned));
        assert!(ev.rows.iter().any(|x| x.run_id == a.run_id));
    }

    #[test]
    fn allow_operator_runs_do_not_start_beside_a_live_run() {
        let mut r = with(
            Overlap::Allow {
                max_concurrent_runs: 3,
            },
            100,
            300.0,
        );
        eval(&mut r, "o", 1000).claim.unwrap();
        r.rt.trigger_requested_at = Some(t(1001));
        assert!(eval(&mut r, "o", 1002).claim.is_none());
        assert_eq!(r.rt.trigger_requested_at, Some(t(1001)));
    }

    #[test]
    fn cancel_of_a_job_with_several_runs_marks_each_once() {
        let mut r = with(
            Overlap::Allow {
                max_concurrent_runs: 2,
            },
            10,
            300.0,
        );
        let a = eval(&mut r, "o", 1000).claim.unwrap();
        let b = eval(&mut r, "o", 1010).claim.unwrap();
        let (changed, out) = apply_edit(&mut r, &JobEdit::Cancel(Some(b.run_id)), t(1011)).unwrap();
        assert!(changed);
        assert_eq!(out, EditOutcome::CancelRequested { run_id: b.run_id });
        let (changed, out) = apply_edit(&mut r, &JobEdit::Cancel(None), t(1012)).unwrap();
        assert!(changed);
        assert_eq!(out, EditOutcome::CancelRequested { run_id: a.run_id });
        let (changed, _) = apply_edit(&mut r, &JobEdit::Cancel(None), t(1013)).unwrap();
        assert!(!changed);
        assert!(r.rt.leases().all(|l| l.cancel_requested_at.is_some()));
    }

    #[test]
    fn a_record_without_overlap_state_keeps_its_stored_form() {
        let r = job("j", t(1000));
        let v = serde_json::to_value(&r).unwrap();
        assert!(v["rt"].get("overlap").is_none());
        assert!(v["def"].get("overlap").is_none());
        let mut a = r.clone();
        a.def.overlap = Overlap::Allow {
            max_concurrent_runs: 2,
        };
        let back: JobRecord = serde_json::from_value(serde_json::to_value(&a).unwrap()).unwrap();
        assert_eq!(back, a);
        let s = compile(&a).unwrap();
        let _ = evaluate(&mut a, &s, t(1000), "o", true, P);
    }
}

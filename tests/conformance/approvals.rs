//! Answers to calls awaiting approval, and what a late end does to a budget recount: the store
//! decides in one step whether a run can still use an answer, and counts a run's money once.

use chrono::{DateTime, Utc};
use cronsole::model::{AwaitingApproval, Budget, BudgetPeriod, JobDef, Status};
use cronsole::store::{
    AwaitStep, Completion, EditOutcome, JobEdit, LoopStep, OperationError, ReserveOutcome,
    Settlement, StepOutcome, Store, StoreError,
};
use cronsole::testkit::store::{FinishClaim, claim_row};
use cronsole::transcript::{Approval, CallEntry, CallState, Entry, Transcript};

use super::{Factory, apply_due, claim, every, file, rows, t};

/// Run `run` of `job` begins to wait for approval of a call to `write`, at `now`.
fn begin_wait(s: &dyn Store, job: &str, run: uuid::Uuid, owner: &str, now: DateTime<Utc>) {
    let a = AwaitingApproval {
        tool: "write".into(),
        call_id: "call_1".into(),
        arguments: "{}".into(),
        since: now,
        deadline: now + chrono::Duration::seconds(3600),
        answer: None,
    };
    let out = s
        .loop_step(&LoopStep {
            job,
            run_id: run,
            owner,
            settle: None,
            reserve: None,
            set_aside: None,
            record: &[],
            awaiting: AwaitStep::Begin(a),
            now,
        })
        .unwrap();
    assert!(matches!(out, StepOutcome::Stepped { .. }), "{out:?}");
}

fn approve(s: &dyn Store, run: uuid::Uuid, now: DateTime<Utc>) -> Result<String, String> {
    answer_call(s, run, None, now)
}

/// [`approve`], only if the call that waits is `call`.
fn answer_call(
    s: &dyn Store,
    run: uuid::Uuid,
    call: Option<&str>,
    now: DateTime<Utc>,
) -> Result<String, String> {
    let by = Some("op@h (cronsole approve)".into());
    match s.answer_approval(run, call, true, None, by, now) {
        Ok((job, EditOutcome::Answered { .. })) => Ok(job),
        Ok(other) => panic!("{other:?}"),
        Err(StoreError::Operation(OperationError::NotAwaiting(why))) => Err(why),
        Err(e) => panic!("{e}"),
    }
}

/// Whether the call of `run` of `job` carries an answer on its lease.
fn answered(s: &dyn Store, job: &str, run: uuid::Uuid) -> bool {
    s.job(job)
        .unwrap()
        .unwrap()
        .rt
        .lease_of(run)
        .and_then(|l| l.awaiting.as_ref())
        .is_some_and(|a| a.answer.is_some())
}

/// An answer is recorded only while the run can use it — it holds its lease, unexpired, no
/// cancel pending, its call unanswered — and otherwise refused with nothing written, saying
/// why: the lease ran out (when its owner stopped renewing), the run is being cancelled, the
/// call was answered (by an operator, or by the owner's own denial at its timeout), the run
/// ended (with its status). An accepted answer the run never read is on its row.
pub fn an_answer_is_held_only_while_the_run_can_use_it(f: Factory) {
    let s = f();
    let def = |name: &str| JobDef {
        lease_seconds: 30.0,
        ..every(name, 3600)
    };
    let names = ["live", "timed", "lapsed", "cancelled", "ended"];
    apply_due(
        &*s,
        &file(names.iter().copied().map(def).collect()),
        t(1000),
    )
    .unwrap();
    let claims = claim(&*s, "o1", t(1000), 10).claims;
    let run = |name: &str| {
        claims
            .iter()
            .find(|c| c.job.def.name == name)
            .expect("claimed")
    };
    for n in names {
        begin_wait(&*s, n, run(n).run_id, "o1", t(1001));
    }

    // Held: the first answer wins, a second is refused naming the first.
    let live = run("live").run_id;
    assert_eq!(approve(&*s, live, t(1002)), Ok("live".to_string()));
    let why = approve(&*s, live, t(1003)).unwrap_err();
    assert!(
        why.contains("already approved by op@h (cronsole approve)"),
        "{why}"
    );

    // The owner's denial at the timeout goes through the same step: an operator after it is
    // refused.
    let timed = run("timed").run_id;
    s.update_job(
        "timed",
        &JobEdit::Answer {
            run_id: timed,
            call: None,
            approve: false,
            reason: Some("denied: no answer within approval_timeout_seconds (1s)".into()),
            by: None,
        },
        t(1002),
    )
    .unwrap();
    let why = approve(&*s, timed, t(1003)).unwrap_err();
    assert!(why.contains("already denied (its wait timed out)"), "{why}");

    // The lease was renewed at 1001 for 30 s: at 1031 it has run out, whoever holds it.
    let lapsed = run("lapsed").run_id;
    let why = approve(&*s, lapsed, t(1031)).unwrap_err();
    assert!(
        why.contains(
            "its owner o1 stopped renewing its lease at 1970-01-01T00:16:41Z (it ran out at \
             1970-01-01T00:17:11Z)"
        ) && why.contains("records the run abandoned"),
        "{why}"
    );
    assert!(!answered(&*s, "lapsed", lapsed), "nothing written");

    let cancelled = run("cancelled").run_id;
    s.cancel(&cancelled.to_string(), t(1002)).unwrap();
    let why = approve(&*s, cancelled, t(1003)).unwrap_err();
    assert!(why.contains("is being cancelled"), "{why}");
    assert!(!answered(&*s, "cancelled", cancelled), "nothing written");

    let c = run("ended");
    s.finish_row(c, claim_row(c, "o1", Status::Failed, t(1002)));
    let why = approve(&*s, c.run_id, t(1003)).unwrap_err();
    assert!(
        why.contains(&format!(
            "run {} of 'ended' is not awaiting approval: it ended as failed at \
             1970-01-01T00:16:42Z",
            c.run_id
        )),
        "{why}"
    );
    // A run id the store never knew is not a refusal but an unknown run.
    let unknown = uuid::Uuid::new_v4();
    assert!(matches!(
        s.answer_approval(unknown, None, true, None, None, t(1003)),
        Err(StoreError::Operation(OperationError::NoSuchRun(id))) if id == unknown
    ));
    // The answer the live run got is still the one it reads. If the run then ends by its
    // owner's hand before reading it (a cancel), the acknowledged answer is on its row's call,
    // which never ran; the row's reason stays the cancel's.
    assert!(answered(&*s, "live", live));
    let c = run("live");
    let mut record = Transcript::new();
    record.push(Entry::Call(CallEntry {
        state: CallState::AwaitingApproval,
        ..CallEntry::dispatched(
            1,
            "call_1".into(),
            "write".into(),
            None,
            "{}".into(),
            t(1001),
        )
    }));
    let mut row = claim_row(c, "o1", Status::Failed, t(1004));
    row.reason = Some("cancelled by operator".into());
    row.transcript = Some(record);
    s.finish_row(c, row);
    let row = rows(&*s, "live").remove(0);
    assert_eq!(row.reason.as_deref(), Some("cancelled by operator"));
    let calls = cronsole::testkit::tools::calls(&row);
    assert_eq!(calls.len(), 1, "{row:?}");
    assert_eq!(calls[0].state, CallState::AwaitingApproval);
    assert_eq!(
        calls[0].approval,
        Some(Approval::Approved {
            by: Some("op@h (cronsole approve)".into()),
            reason: None
        })
    );
}

/// An answer that names its call (`approve --call`) is taken only while that call is the one
/// waiting, and unanswered; otherwise it is refused with nothing written, saying which call
/// waits, or — the run ended — what became of the named call.
pub fn an_answer_naming_a_call_is_taken_only_for_that_call(f: Factory) {
    let s = f();
    let def = JobDef {
        lease_seconds: 30.0,
        ..every("j", 3600)
    };
    apply_due(&*s, &file(vec![def]), t(1000)).unwrap();
    let c = claim(&*s, "o1", t(1000), 1).claims.remove(0);
    begin_wait(&*s, "j", c.run_id, "o1", t(1001));
    let why = answer_call(&*s, c.run_id, Some("call_9"), t(1002)).unwrap_err();
    assert!(
        why.contains(
            "has no call call_9 awaiting approval: the call that waits is call_1 (to write)"
        ),
        "{why}"
    );
    assert!(!answered(&*s, "j", c.run_id), "nothing written");
    assert_eq!(
        answer_call(&*s, c.run_id, Some("call_1"), t(1002)),
        Ok("j".into())
    );
    let why = answer_call(&*s, c.run_id, Some("call_1"), t(1003)).unwrap_err();
    assert!(
        why.contains("its call to write was already approved by op@h"),
        "{why}"
    );
    // The run ends by its owner's hand before it read the answer: the answer is on the call.
    let mut record = Transcript::new();
    record.push(Entry::Call(CallEntry {
        state: CallState::AwaitingApproval,
        ..CallEntry::dispatched(
            1,
            "call_1".into(),
            "write".into(),
            None,
            "{}".into(),
            t(1001),
        )
    }));
    let mut row = claim_row(&c, "o1", Status::Failed, t(1004));
    row.transcript = Some(record);
    s.finish_row(&c, row);
    let why = answer_call(&*s, c.run_id, Some("call_1"), t(1005)).unwrap_err();
    assert!(
        why.contains("it ended as failed")
            && why.contains("its call call_1 to write was approved by op@h (cronsole approve)"),
        "{why}"
    );
    let why = answer_call(&*s, c.run_id, Some("call_7"), t(1005)).unwrap_err();
    assert!(why.contains("its record has no call call_7"), "{why}");
}

/// An owner stopped while its call awaits approval is approved meanwhile; its lease runs out
/// and another owner records the run `abandoned`, with the answer on the row. The stopped owner
/// comes back and ends the run `failed`: that late row replaces the `abandoned` one and still
/// says the call was approved and never ran, in its reason and on the call.
pub fn a_late_row_keeps_the_answer_the_abandoned_row_showed(f: Factory) {
    let s = f();
    let def = JobDef {
        lease_seconds: 30.0,
        ..every("j", 3600)
    };
    apply_due(&*s, &file(vec![def]), t(1000)).unwrap();
    let c = claim(&*s, "stopped", t(1000), 1).claims.remove(0);
    begin_wait(&*s, "j", c.run_id, "stopped", t(1001));
    assert_eq!(approve(&*s, c.run_id, t(1002)), Ok("j".into()));
    let said = "its call to write, awaiting approval, was approved by op@h (cronsole approve) at \
                1970-01-01T00:16:42Z but never ran";
    let o = claim(&*s, "other", t(1040), 0);
    let abandoned = o
        .rows
        .iter()
        .find(|r| r.run_id == c.run_id)
        .expect("recovered");
    assert_eq!(abandoned.status, Status::Abandoned);
    assert!(
        abandoned.reason.as_deref().unwrap().ends_with(said),
        "{abandoned:?}"
    );
    let mut record = Transcript::new();
    record.push(Entry::Call(CallEntry {
        state: CallState::AwaitingApproval,
        ..CallEntry::dispatched(
            1,
            "call_1".into(),
            "write".into(),
            None,
            "{}".into(),
            t(1001),
        )
    }));
    let mut row = claim_row(&c, "stopped", Status::Failed, t(1050));
    row.reason = Some("the lease was lost while a call awaited approval".into());
    row.transcript = Some(record);
    let late = s.finish_row(&c, row);
    assert!(late.rows[0].supersedes_abandoned, "{:?}", late.rows);
    let shown = rows(&*s, "j");
    assert_eq!(shown.len(), 1, "{shown:?}");
    let r = &shown[0];
    assert_eq!(r.status, Status::Failed);
    assert_eq!(
        r.reason.as_deref(),
        Some(format!("the lease was lost while a call awaited approval; {said}").as_str())
    );
    let calls = cronsole::testkit::tools::calls(r);
    assert_eq!(calls.len(), 1, "{r:?}");
    assert_eq!(calls[0].state, CallState::AwaitingApproval);
    assert_eq!(
        calls[0].approval,
        Some(Approval::Approved {
            by: Some("op@h (cronsole approve)".into()),
            reason: None
        })
    );
}

/// A run recorded `abandoned` with money on its row (a settled turn), whose paused owner then
/// ends it later at a higher cost: the late end replaces that row, and a budget `period` edit's
/// recount finds the run's cost once — the late end's — never both rows added.
pub fn a_recount_counts_a_late_end_instead_of_its_abandoned_row(f: Factory) {
    let s = f();
    let with = |period| {
        let mut jf = file(vec![JobDef {
            lease_seconds: 30.0,
            ..every("a", 3600)
        }]);
        jf.settings.budget = Some(Budget {
            max_cost_usd: 10.0,
            period,
        });
        jf
    };
    apply_due(&*s, &with(BudgetPeriod::Day), t(1000)).unwrap();
    let c = claim(&*s, "paused", t(1000), 1).claims.remove(0);
    let step = |settle, reserve, at| {
        s.loop_step(&LoopStep {
            job: "a",
            run_id: c.run_id,
            owner: "paused",
            settle,
            reserve,
            set_aside: None,
            record: &[],
            awaiting: AwaitStep::Keep,
            now: t(at),
        })
        .unwrap()
    };
    let StepOutcome::Stepped {
        reserved: Some(ReserveOutcome::Reserved { id }),
        ..
    } = step(None, Some(0.04), 1001)
    else {
        panic!("the turn fits");
    };
    step(Some((id, Settlement::Cost(0.02))), None, 1002);
    // The owner is paused past its lease: another owner records the run abandoned.
    let o = claim(&*s, "b", t(1040), 0);
    let abandoned = o
        .rows
        .iter()
        .find(|r| r.run_id == c.run_id)
        .expect("the abandoned row");
    assert_eq!(abandoned.status, Status::Abandoned);
    assert!(
        (abandoned.cost_usd - 0.02).abs() < 1e-12,
        "the settled turn is on the abandoned row: {abandoned:?}"
    );
    // It continues and ends the run: $0.05 in all.
    let mut row = claim_row(&c, "paused", Status::Succeeded, t(1050));
    row.cost_usd = 0.05;
    let late = s
        .complete(Completion {
            job: "a".into(),
            run_id: c.run_id,
            owner: "paused".into(),
            now: t(1050),
            row,
            state: None,
            hold_until: None,
        })
        .unwrap();
    assert!(late.rows[0].supersedes_abandoned, "{:?}", late.rows);
    let shown = rows(&*s, "a");
    assert_eq!(shown.len(), 1, "{shown:?}");
    let counted = s.job("a").unwrap().unwrap().rt.counters.period_cost_usd;
    assert!((counted - 0.05).abs() < 1e-12, "{counted}");
    // The edit day → week recounts from history: the run's $0.05, not $0.07.
    let rep = s.apply(&with(BudgetPeriod::Week), t(1100)).unwrap();
    let found: Vec<(&str, f64)> = rep
        .recounted
        .iter()
        .map(|r| (r.job.as_str(), r.spent_usd))
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!((found[0].1 - 0.05).abs() < 1e-12, "{found:?}");
    let spent = s.spend("a", t(1101)).unwrap();
    assert!((spent.job_usd - 0.05).abs() < 1e-12, "{spent:?}");
}

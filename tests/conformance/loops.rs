//! Tool loops' steps on a store: one write per step holds every budget across owners and
//! concurrent runs, fences by run id, and keeps a run's record for the `abandoned` row a dead
//! owner's run gets.

use chrono::{DateTime, Utc};
use cronsole::model::{Budget, BudgetPeriod, JobDef, Status};
use cronsole::store::{LoopStep, ReserveOutcome, Settlement, StepOutcome};
use cronsole::testkit::store::{FinishClaim, claim_row};
use cronsole::transcript::{CallEntry, CallState, Delta, Entry, TurnEntry};

use super::{Factory, apply_due, claim, every, file, rows, t};

fn step<'a>(
    job: &'a str,
    run_id: uuid::Uuid,
    owner: &'a str,
    settle: Option<(uuid::Uuid, Settlement)>,
    reserve: Option<f64>,
    record: &'a [Delta],
    now: DateTime<Utc>,
) -> LoopStep<'a> {
    LoopStep {
        job,
        run_id,
        owner,
        settle,
        reserve,
        set_aside: None,
        record,
        awaiting: Default::default(),
        now,
    }
}

/// 20 looping runs of 20 jobs by 3 owners at once, each turn reserving its worst case ($0.03)
/// and settling the last turn's real cost in the same step, against a $0.50/day global budget
/// and a $0.10 budget on one job: the money recorded never passes either, and the budget is
/// what ended the loops (not a lack of turns).
pub fn loop_steps_hold_every_budget_across_owners(f: Factory) {
    const RUNS: usize = 20;
    const WORST: f64 = 0.03;
    let s = f();
    let mut jobs: Vec<JobDef> = (0..RUNS)
        .map(|i| every(&format!("j{i:02}"), 3600))
        .collect();
    jobs[0].max_cost_usd = Some(0.10);
    let mut jf = file(jobs);
    jf.settings.budget = Some(Budget {
        max_cost_usd: 0.50,
        period: BudgetPeriod::Day,
    });
    apply_due(&*s, &jf, t(1000)).unwrap();
    let owners = ["o1", "o2", "o3"];
    let mut claims = Vec::new();
    for (i, o) in owners.iter().enumerate() {
        for c in claim(&*s, o, t(1000), 7).claims {
            claims.push((owners[i], c));
        }
    }
    assert_eq!(claims.len(), RUNS);
    let ends: Vec<(String, f64, u32, bool)> = std::thread::scope(|sc| {
        let hs: Vec<_> = claims
            .iter()
            .enumerate()
            .map(|(k, (owner, c))| {
                let s = &s;
                sc.spawn(move || {
                    let job = c.job.def.name.as_str();
                    let mut spent = 0.0;
                    let mut pending: Option<(uuid::Uuid, f64)> = None;
                    let mut turns = 0u32;
                    let mut refused = false;
                    for turn in 1..=30u32 {
                        let now = t(1001 + i64::from(turn));
                        let settle = pending.take().map(|(id, c)| (id, Settlement::Cost(c)));
                        let out = s
                            .loop_step(&step(job, c.run_id, owner, settle, Some(WORST), &[], now))
                            .unwrap();
                        let StepOutcome::Stepped { reserved, .. } = out else {
                            panic!("{job}: lease lost");
                        };
                        match reserved {
                            Some(ReserveOutcome::Reserved { id }) => {
                                // The turn's real cost: a third to all of its worst case.
                                let real = WORST * (1.0 + ((k + turn as usize) % 3) as f64) / 3.0;
                                spent += real;
                                turns = turn;
                                pending = Some((id, real));
                            }
                            Some(ReserveOutcome::Refused { reason }) => {
                                assert!(reason.starts_with("budget reached"), "{reason}");
                                refused = true;
                                break;
                            }
                            None => panic!("no answer to a reservation"),
                        }
                    }
                    if let Some((id, real)) = pending {
                        s.settle(job, id, Settlement::Cost(real), t(1040)).unwrap();
                    }
                    let mut row = claim_row(c, owner, Status::Succeeded, t(1041));
                    row.cost_usd = spent;
                    s.finish_row(c, row);
                    (job.to_string(), spent, turns, refused)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let total: f64 = ends.iter().map(|e| e.1).sum();
    assert!(
        total <= 0.50 + 1e-9,
        "recorded ${total} over a $0.50 budget"
    );
    assert!(
        total >= 0.50 - WORST - 1e-9,
        "the loops stopped at ${total}, well before the budget"
    );
    assert!(ends.iter().all(|e| e.3), "every loop ended at the budget");
    let j0 = ends.iter().find(|e| e.0 == "j00").unwrap();
    assert!(j0.1 <= 0.10 + 1e-9, "job budget: {j0:?}");
    let recorded: f64 = (0..RUNS)
        .flat_map(|i| rows(&*s, &format!("j{i:02}")))
        .map(|r| r.cost_usd)
        .sum();
    assert!((recorded - total).abs() < 1e-9, "{recorded} vs {total}");
    let now = s.spend("j00", t(1042)).unwrap();
    assert!(now.global_usd <= 0.50 + 1e-9, "{now:?}");
    assert!(
        s.job("j00")
            .unwrap()
            .unwrap()
            .rt
            .counters
            .reservations
            .is_empty(),
        "settled reservations moved into the counters with the rows"
    );
}

fn turn_entry(turn: u32) -> Entry {
    Entry::Turn(TurnEntry {
        turn,
        model: "m".into(),
        input_tokens: 10,
        output_tokens: 5,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        cost_usd: 0.001,
        attempts: 1,
        text: "reading".into(),
        cut: false,
        calls: 2,
    })
}

fn call_entry(id: &str, state: CallState) -> Entry {
    Entry::Call(CallEntry {
        duration_ms: 3,
        state,
        ..CallEntry::dispatched(
            1,
            id.into(),
            "files.read_file".into(),
            Some("files".into()),
            "{}".into(),
            t(1001),
        )
    })
}

/// A dead owner's loop: the `abandoned` row recovery writes carries every entry its steps
/// recorded (the last call still `dispatched`), and the dead run's later step writes nothing.
pub fn an_abandoned_loop_keeps_the_calls_it_recorded(f: Factory) {
    let s = f();
    let def = JobDef {
        lease_seconds: 5.0,
        ..every("a", 3600)
    };
    apply_due(&*s, &file(vec![def]), t(1000)).unwrap();
    let c = claim(&*s, "dead", t(1000), 1).claims.remove(0);
    // The turn took two requests (a retry inside it).
    let mut retried = turn_entry(1);
    if let Entry::Turn(turn) = &mut retried {
        turn.attempts = 2;
    }
    let first = [
        Delta {
            seq: 0,
            entry: retried,
        },
        Delta {
            seq: 1,
            entry: call_entry("x", CallState::Dispatched),
        },
    ];
    let out = s
        .loop_step(&step("a", c.run_id, "dead", None, None, &first, t(1001)))
        .unwrap();
    assert!(matches!(out, StepOutcome::Stepped { reserved: None, .. }));
    let second = [
        Delta {
            seq: 1,
            entry: call_entry("x", CallState::Done),
        },
        Delta {
            seq: 2,
            entry: call_entry("y", CallState::Dispatched),
        },
    ];
    s.loop_step(&step("a", c.run_id, "dead", None, None, &second, t(1002)))
        .unwrap();
    // The owner dies; its lease (renewed at 1002 for 5 s) expires; another owner recovers.
    claim(&*s, "o2", t(1010), 1);
    let row = rows(&*s, "a")
        .into_iter()
        .find(|r| r.run_id == c.run_id)
        .expect("the abandoned row");
    assert_eq!(row.status, Status::Abandoned);
    assert_eq!((row.turns, row.tool_calls), (Some(1), Some(2)));
    assert_eq!(row.attempts, 2, "the most requests a recorded turn needed");
    let states: Vec<CallState> = cronsole::testkit::tools::calls(&row)
        .into_iter()
        .map(|c| c.state)
        .collect();
    assert_eq!(states, vec![CallState::Done, CallState::Dispatched]);
    // The dead run's step after recovery: lost, nothing written.
    let late = [Delta {
        seq: 3,
        entry: turn_entry(2),
    }];
    let out = s
        .loop_step(&step(
            "a",
            c.run_id,
            "dead",
            None,
            Some(0.5),
            &late,
            t(1011),
        ))
        .unwrap();
    assert_eq!(out, StepOutcome::Lost);
    assert!(
        s.job("a")
            .unwrap()
            .unwrap()
            .rt
            .counters
            .reservations
            .is_empty()
    );
}

/// A step that renews also fences: only the run holding the lease steps, and a refused
/// reservation still settles the previous turn in the same write.
pub fn a_refused_step_still_settles_the_last_turn(f: Factory) {
    let s = f();
    let mut jf = file(vec![every("a", 3600)]);
    jf.settings.budget = Some(Budget {
        max_cost_usd: 0.10,
        period: BudgetPeriod::Day,
    });
    apply_due(&*s, &jf, t(1000)).unwrap();
    let c = claim(&*s, "o1", t(1000), 1).claims.remove(0);
    let other = uuid::Uuid::new_v4();
    assert_eq!(
        s.loop_step(&step("a", other, "o1", None, Some(0.01), &[], t(1001)))
            .unwrap(),
        StepOutcome::Lost,
        "a run id that holds no lease"
    );
    let StepOutcome::Stepped {
        reserved: Some(ReserveOutcome::Reserved { id }),
        ..
    } = s
        .loop_step(&step("a", c.run_id, "o1", None, Some(0.08), &[], t(1001)))
        .unwrap()
    else {
        panic!("the first turn fits");
    };
    // The next turn's worst case ($0.08) fits only once the first settles at its real $0.01.
    let out = s
        .loop_step(&step(
            "a",
            c.run_id,
            "o1",
            Some((id, Settlement::Cost(0.01))),
            Some(0.08),
            &[],
            t(1002),
        ))
        .unwrap();
    assert!(
        matches!(
            out,
            StepOutcome::Stepped {
                reserved: Some(ReserveOutcome::Reserved { .. }),
                ..
            }
        ),
        "{out:?}"
    );
    let out = s
        .loop_step(&step("a", c.run_id, "o1", None, Some(0.05), &[], t(1003)))
        .unwrap();
    assert!(
        matches!(
            out,
            StepOutcome::Stepped {
                reserved: Some(ReserveOutcome::Refused { .. }),
                ..
            }
        ),
        "$0.01 + $0.08 held, $0.05 more does not fit $0.10: {out:?}"
    );
    let held: f64 = s
        .job("a")
        .unwrap()
        .unwrap()
        .rt
        .counters
        .reservations
        .iter()
        .map(|r| r.usd)
        .sum();
    assert!((held - 0.09).abs() < 1e-12, "{held}");
}

/// A loop an operator cancelled after one answered turn and with the next one in flight: its
/// `cut_short` row carries both (the answered turn at its real cost, the one in flight at its
/// reservation), nothing stays reserved, and the budget counts that money for the next run.
pub fn a_cancelled_loop_books_every_turn_it_paid_for(f: Factory) {
    let s = f();
    let mut jf = file(vec![every("a", 3600)]);
    jf.settings.budget = Some(Budget {
        max_cost_usd: 0.10,
        period: BudgetPeriod::Day,
    });
    apply_due(&*s, &jf, t(1000)).unwrap();
    let c = claim(&*s, "o1", t(1000), 1).claims.remove(0);
    let reserve = |settle, at| match s
        .loop_step(&step("a", c.run_id, "o1", settle, Some(0.04), &[], t(at)))
        .unwrap()
    {
        StepOutcome::Stepped {
            reserved: Some(ReserveOutcome::Reserved { id }),
            ..
        } => id,
        other => panic!("the turn fits: {other:?}"),
    };
    let first = reserve(None, 1001);
    // Turn 1 answered ($0.01); turn 2 reserved ($0.04) and still in flight at the cancel.
    reserve(Some((first, Settlement::Cost(0.01))), 1002);
    let mut row = claim_row(&c, "o1", Status::Failed, t(1003));
    row.reason = Some("cancelled by operator".into());
    row.cut_short = true;
    let out = s.finish_row(&c, row);
    assert!(
        (out.rows[0].cost_usd - 0.05).abs() < 1e-12,
        "{:?}",
        out.rows[0]
    );
    let back = rows(&*s, "a");
    assert_eq!(back.len(), 1);
    assert!((back[0].cost_usd - 0.05).abs() < 1e-12, "{:?}", back[0]);
    assert!(back[0].cut_short);
    let rec = s.job("a").unwrap().unwrap();
    assert!(
        rec.rt.counters.reservations.is_empty(),
        "nothing stays in flight"
    );
    assert!((rec.rt.counters.period_cost_usd - 0.05).abs() < 1e-12);
    // The next run finds $0.05 spent: $0.06 more does not fit the $0.10 budget, $0.05 does.
    let next = claim(&*s, "o1", t(4600), 1).claims.remove(0);
    let ask = |usd| {
        s.loop_step(&step("a", next.run_id, "o1", None, Some(usd), &[], t(4601)))
            .unwrap()
    };
    assert!(
        matches!(
            ask(0.06),
            StepOutcome::Stepped {
                reserved: Some(ReserveOutcome::Refused { .. }),
                ..
            }
        ),
        "the cancelled run's money still counts"
    );
    assert!(matches!(
        ask(0.05),
        StepOutcome::Stepped {
            reserved: Some(ReserveOutcome::Reserved { .. }),
            ..
        }
    ));
}

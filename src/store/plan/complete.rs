//! Runs' completions, fenced by their run ids: the end of the run that holds the lease, a stale
//! completion (the lease was taken over), the late end of a run recorded `abandoned`, and a
//! retried completion whose row already landed.
//!
//! Owns: the [`CompletionPlan`] both stores execute for a batch of completions (what rows to
//! write, which records change, which `after:` children learn of which run's end, in what
//! order), and its per-record steps [`complete_step`], [`complete_landed`].
//! Must not touch: I/O, locks, clocks. A store locks and loads the batch's records, tells the
//! plan what it found already in history (that lookup is the store's: the file store reads its
//! own failed writes and scans from a claim's mark, PostgreSQL selects by run id), and persists
//! what the plan returns: history rows first, then the records.

use crate::store::OperationError;
use uuid::Uuid;

use crate::model::{BudgetPeriod, HistoryRow, JobRecord, Status};
use crate::schedule::Compiled;
use crate::store::policy::counters::count_row;
use crate::store::policy::run_end::{finish_run, supersede_abandoned};
use crate::store::rules::rows::{
    is_generated, keep_answer_of_abandoned, keep_unread_answer, same_row_of_runs, unlanded_part,
};
use crate::store::rules::runtime::{holds, take_abandoned};
use crate::store::rules::slots::compile;
use crate::store::{CompleteOutcome, Completion, StoreError, StoreResult};

use super::claim::{rederive_logged, skip_recorded};

/// A run that ends while its job's slots lie beyond what the schedule allows from `now`: the
/// job is re-derived now (`rules::slots::rederive`). A run claimed on a clock two days ahead
/// and ending after it is set right leaves its job's next slot two days out, and the sweep
/// that followed the step back left the job alone while its lease was live, so no claim would
/// ever look at it again before then.
fn rederive_after_run(rec: &mut JobRecord, now: chrono::DateTime<chrono::Utc>) {
    if rec.rt.lease.is_none() {
        rederive_logged(rec, now);
    }
}

/// What a store found already in history for one completion, before the plan takes it.
#[derive(Debug, Default)]
pub struct Found {
    /// The run's own row, written by an earlier attempt of this completion whose record did not
    /// land (or whose reply was lost): the run is finished from it and it is not written again.
    pub own_row: Option<HistoryRow>,
    /// A recoverer wrote `abandoned` for this run, which still holds its lease (the recoverer
    /// died before releasing it): the run's real end supersedes that row.
    pub abandoned: bool,
}

/// One completion of a batch, as planned.
#[derive(Debug)]
struct Step {
    job: String,
    /// The run held the job's lease: its end is the run's own and fires `after:` children.
    fenced: bool,
    /// The run's end was taken from its own landed row (the records rely on rows already in
    /// history).
    from_landed: bool,
    outcome: StoreResult<CompleteOutcome>,
}

/// A batch of completions, planned once for every store: the stores only lock, load and
/// persist what it says. Build it with one call per completion, in order
/// ([`CompletionPlan::complete`], or [`CompletionPlan::settled`] / [`CompletionPlan::failed`]
/// for what the store decided without the plan), then read what to write.
#[derive(Debug)]
pub struct CompletionPlan {
    period: BudgetPeriod,
    /// Rows of the batch already in history: outcomes report them as history holds them.
    landed: Vec<HistoryRow>,
    steps: Vec<Step>,
}

impl CompletionPlan {
    /// A plan booking money in `period`, over the rows `landed` already in history (rows of
    /// earlier attempts of this batch's completions, as the store found them).
    pub fn new(period: BudgetPeriod, landed: Vec<HistoryRow>) -> CompletionPlan {
        CompletionPlan {
            period,
            landed,
            steps: Vec::new(),
        }
    }

    /// The rows already in history the plan was built over.
    pub fn landed(&self) -> &[HistoryRow] {
        &self.landed
    }

    /// Complete `c` on its job's record (`None`: no such job). `sched` is the job's compiled
    /// schedule when the store keeps it cached; `found` is what the store found of the run in
    /// history. Returns whether the run held the lease.
    pub fn complete(
        &mut self,
        rec: Option<&mut JobRecord>,
        sched: Option<&Compiled>,
        mut c: Completion,
        found: Found,
    ) -> bool {
        let job = c.job.clone();
        let run_id = c.run_id;
        let Some(rec) = rec else {
            self.failed(
                job.clone(),
                StoreError::Operation(OperationError::NoSuchJob(job)),
            );
            return false;
        };
        let fenced = holds(rec, c.run_id);
        if found.own_row.is_none() && fenced && found.abandoned {
            c.row.supersedes_abandoned = true;
        }
        let from_landed = found.own_row.is_some();
        let outcome = match found.own_row {
            Some(row) => complete_landed(rec, sched, c, row, self.period),
            None => complete_step(rec, sched, c, self.period),
        };
        let outcome = outcome.map(|mut out| {
            // Report the rows as they stand in history (they are not appended again).
            for r in &mut out.rows {
                if let Some(l) = self
                    .landed
                    .iter()
                    .find(|l| same_row_of_runs(l, r, &[run_id]))
                {
                    *r = l.clone();
                }
            }
            out
        });
        self.steps.push(Step {
            job,
            fenced,
            from_landed,
            outcome,
        });
        fenced
    }

    /// A completion the store found already written, row and record: nothing to write.
    pub fn settled(&mut self, job: String) {
        self.steps.push(Step {
            job,
            fenced: false,
            from_landed: false,
            outcome: Ok(CompleteOutcome::default()),
        });
    }

    /// A completion whose record the store could not load.
    pub fn failed(&mut self, job: String, e: StoreError) {
        self.steps.push(Step {
            job,
            fenced: false,
            from_landed: false,
            outcome: Err(e),
        });
    }

    /// Whether a completion was finished from its own landed row (what it writes relies on rows
    /// already in history being durable).
    pub fn relies_on_landed(&self) -> bool {
        self.steps.iter().any(|s| s.from_landed)
    }

    /// The jobs whose completions generated rows after the run's own (overlap `skipped` rows):
    /// a store where a failed or dead writer can leave such rows ahead of a record looks for
    /// them before writing these ([`CompletionPlan::trim`]).
    pub fn generating(&self) -> Vec<&str> {
        self.written()
            .filter(|(out, _)| out.rows.iter().skip(1).any(is_generated))
            .map(|(_, step)| step.job.as_str())
            .collect()
    }

    /// Drop from the rows `job`'s completions generated the slots that rows already in history
    /// record (`known`: left by a failed or dead writer), and move the job's next slot past what
    /// they record (their writer may have looked at a later clock). Returns whether a
    /// completion of the job generated rows to check (what it writes relies on `known`).
    pub fn trim(
        &mut self,
        job: &str,
        known: &[HistoryRow],
        sched: &Compiled,
        rec: &mut JobRecord,
    ) -> bool {
        let mut relies = false;
        for step in self.steps.iter_mut().filter(|s| s.job == job) {
            let Ok(out) = &mut step.outcome else {
                continue;
            };
            if known.is_empty() || out.rows.len() < 2 {
                continue;
            }
            relies = true;
            let mut kept = vec![out.rows.remove(0)];
            kept.extend(out.rows.drain(..).flat_map(|r| {
                if is_generated(&r) {
                    unlanded_part(r, known, sched)
                } else {
                    vec![r]
                }
            }));
            out.rows = kept;
            skip_recorded(rec, sched, known);
        }
        relies
    }

    /// The records to write, in the order of their completions (a job may come more than once):
    /// every completion that has a row, its own or one already in history, with the end row
    /// that fires its job's `after:` children when its run held the lease (a stale completion's
    /// run was ended by its recovery, which fired them already). A store writes the children's
    /// records with the parent's.
    pub fn records(&self) -> Vec<(String, Option<HistoryRow>)> {
        self.written()
            .map(|(out, step)| {
                let end = out.rows.first().filter(|_| step.fenced).cloned();
                (step.job.clone(), end)
            })
            .collect()
    }

    /// The rows to append, in order, without those in `exclude` (rows already in history the
    /// store's own write does not skip by itself). A run's own row is excluded only by a row
    /// of the same run.
    pub fn rows(&self, exclude: &[HistoryRow]) -> Vec<HistoryRow> {
        let runs = self.own_runs();
        self.written()
            .flat_map(|(out, _)| out.rows.iter())
            .filter(|r| !exclude.iter().any(|f| same_row_of_runs(f, r, &runs)))
            .cloned()
            .collect()
    }

    /// The runs whose own rows the plan writes (each written outcome's first row).
    pub fn own_runs(&self) -> Vec<Uuid> {
        self.written()
            .filter_map(|(out, _)| out.rows.first().map(|r| r.run_id))
            .collect()
    }

    /// The runs whose `abandoned` row a late end among `rows` replaces (a store that can delete
    /// rows removes it; an append-only one hides it in queries).
    pub fn superseded(rows: &[HistoryRow]) -> Vec<Uuid> {
        rows.iter()
            .filter(|r| r.supersedes_abandoned && r.stale_lease)
            .map(|r| r.run_id)
            .collect()
    }

    /// Each completion's outcome, in the order they were planned.
    pub fn into_results(self) -> Vec<StoreResult<CompleteOutcome>> {
        self.steps.into_iter().map(|s| s.outcome).collect()
    }

    /// The planned completions that write something, with their outcomes.
    fn written(&self) -> impl Iterator<Item = (&CompleteOutcome, &Step)> {
        self.steps.iter().filter_map(|s| match &s.outcome {
            Ok(out) if !out.rows.is_empty() => Some((out, s)),
            _ => None,
        })
    }
}

/// A run's end, fenced by `run_id`. A stale completion (lease taken over) keeps its
/// row with `stale_lease: true` and adds its cost to the counters, touching nothing else —
/// unless the run was recorded `abandoned`: then its row supersedes that one
/// (`supersede_abandoned`). `sched` is the job's compiled schedule when the caller has it
/// cached.
pub fn complete_step(
    rec: &mut JobRecord,
    sched: Option<&Compiled>,
    c: Completion,
    period: BudgetPeriod,
) -> StoreResult<CompleteOutcome> {
    let mut row = c.row;
    row.run_id = c.run_id;
    let mut out = CompleteOutcome::default();
    if !holds(rec, c.run_id) {
        row.stale_lease = true;
        match take_abandoned(rec, c.run_id).filter(|_| row.status != Status::Abandoned) {
            Some(a) => {
                if let Some(w) = &a.unread_answer {
                    keep_answer_of_abandoned(&mut row, w);
                }
                let fin =
                    supersede_abandoned(rec, &a, &mut row, c.state, c.hold_until, period, c.now);
                out.state_rejected = fin.state_rejected;
            }
            None => {
                count_row(rec, &mut row, period, c.now);
            }
        }
        out.stale = true;
        out.rows.push(row);
        return Ok(out);
    }
    let compiled;
    let sched = match sched {
        Some(s) => s,
        None => {
            compiled = compile(rec).map_err(StoreError::bad_def(&c.job))?;
            &compiled
        }
    };
    if let Some(l) = rec.rt.lease_of(c.run_id) {
        keep_unread_answer(&mut row, l);
    }
    let fin = finish_run(rec, sched, &mut row, c.state, c.hold_until, period, c.now);
    rederive_after_run(rec, c.now);
    out.state_rejected = fin.state_rejected;
    let extra = stepped_like(fin.extra_rows, &row);
    out.rows.push(row);
    out.rows.extend(extra);
    Ok(out)
}

/// The rows a run's end decides beside its own (the overlap rows of slots that fell due while
/// it ran) say the wall clock stepped when its own row does: they were decided across that
/// step, like the rows of a claim after one.
fn stepped_like(mut rows: Vec<HistoryRow>, run: &HistoryRow) -> Vec<HistoryRow> {
    if let Some(step) = &run.clock_stepped {
        for r in &mut rows {
            r.clock_stepped.get_or_insert_with(|| step.clone());
        }
    }
    rows
}

/// A retried completion whose row is already in history (an earlier attempt wrote the row, then
/// failed before or while writing the job record). Holding the lease: the run is finished from
/// the landed row, so the record matches history. Not holding it: the earlier attempt's record
/// update landed too (or recovery finished the run from that row): nothing changes — unless
/// the landed row superseded an `abandoned` one the record still lists (the earlier attempt's
/// record never landed): then the record catches up with it. The
/// outcome's rows are the landed row and any overlap rows; the store must not append rows that
/// are already there (see [`crate::store::rules::rows::same_row`]).
pub fn complete_landed(
    rec: &mut JobRecord,
    sched: Option<&Compiled>,
    c: Completion,
    mut landed: HistoryRow,
    period: BudgetPeriod,
) -> StoreResult<CompleteOutcome> {
    let mut out = CompleteOutcome::default();
    if !holds(rec, c.run_id) {
        if landed.supersedes_abandoned
            && landed.stale_lease
            && let Some(a) = take_abandoned(rec, c.run_id)
        {
            let fin =
                supersede_abandoned(rec, &a, &mut landed, c.state, c.hold_until, period, c.now);
            out.state_rejected = fin.state_rejected;
        }
        out.stale = landed.stale_lease;
        out.rows.push(landed);
        return Ok(out);
    }
    let compiled;
    let sched = match sched {
        Some(s) => s,
        None => {
            compiled = compile(rec).map_err(StoreError::bad_def(&c.job))?;
            &compiled
        }
    };
    let fin = finish_run(
        rec,
        sched,
        &mut landed,
        c.state,
        c.hold_until,
        period,
        c.now,
    );
    rederive_after_run(rec, c.now);
    out.state_rejected = fin.state_rejected;
    let extra = stepped_like(fin.extra_rows, &landed);
    out.rows.push(landed);
    out.rows.extend(extra);
    Ok(out)
}

//! The reference model of what the store promised, and the invariants checked against it
//! It is fed only what owners *observed* (claims returned to them, rows
//! acknowledged to them, operations that returned `Ok`) and what the store shows when read back;
//! it never trusts the implementation's own bookkeeping for the promise it checks.
//!
//! Invariants:
//! - **at most once**: no scheduled (job, slot) is executed twice. A scheduled fire claimed at
//!   instant `c` for slot `s` stands for every grid slot in `[s, c]` (older overdue slots coalesce
//!   into it, as the misfire policy says); a later scheduled claim inside that range is a double
//!   run. Manual triggers and one-shot recovery retries are runs of their own. The one
//!   exception is the store's clock rule: a job whose slots were decided by a clock more than
//!   three hours ahead of a later operation's clock `r` is re-derived from `r`, so its slots
//!   after `r` run again (another real instant). The model allows that: after an operation at
//!   `r` more than three hours behind an earlier claim, a range decided before it stands only
//!   for its slots up to `r`, for runs and rows alike ([`Model::clock_op`]).
//! - **no job left without a slot**: at the end, every recurring job that is neither paused,
//!   removed nor retired has its next slot within one interval of the later of the clock and
//!   its last slot (a slot that ran less than three hours ahead makes the job wait for it;
//!   a job that never ran keeps a first slot up to three hours ahead).
//! - **one-shot**: a `once` job executes at most twice (the run and its abandoned retry),
//!   runs that skipped their action (`skipped`: they do not count toward `once`) aside.
//! - **acknowledged rows survive**: every row returned to an owner by `complete`/`claim_due`
//!   is in history from then on, power losses included — except an `abandoned` row that the
//!   run's own late end superseded (`supersedes_abandoned`: its owner was paused, not dead; the
//!   status `abandoned` never happened).
//! - **every run ends in one row**: no run_id has two rows, not even an `abandoned` row beside
//!   the run's own late completion; at the end (faults off, every owner back, every lease
//!   expired or finished) every executed run has its row.
//! - **every due slot in exactly one row**: each grid slot before the job's cursor is covered by
//!   exactly one row (or by the lease in flight); a gap is allowed only where the job was paused
//!   or removed (acknowledged windows), and jobs touched by an operation whose outcome is unknown
//!   are exempt from the gap check (never from the overlap check).
//! - **budget**: recorded spend (the `cost_usd` on rows) never exceeds the budget, beyond the
//!   slack a non-atomic budget check allows (see [`crate::world::BudgetGate`]);
//! - **tool calls**: a tool call a run's loop step recorded (the store acknowledged the step)
//!   is in that run's row, whatever ended the run (its completion, or the `abandoned` row of
//!   its recovery after a crash or a power loss).
//! - **chains**: a chained job starts at most once per parent run (no parent
//!   run id is handed to two of its chained claims); at the end, each parent's newest run in
//!   history that fires the job is either consumed by a chained run or still pending in the
//!   job's record — never lost, crashes and torn writes included (older firing runs may be
//!   coalesced into a newer one: one chained run per parent per start). A chained claim whose
//!   owner died before seeing it counts as consumed by its `abandoned` row (at most once, like a
//!   slot). Jobs paused, removed or touched by an operation of unknown outcome are exempt from
//!   the "never lost" check.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Duration, Utc};
use cronsole::model::{HistoryRow, JobRecord, Status, Trigger};
use cronsole::testkit::internals::store::policy;
use uuid::Uuid;

/// Slots a row (or a lease) stands for: `(first slot, last slot or claim instant, run_id,
/// started_at)`.
type Cover = (DateTime<Utc>, DateTime<Utc>, Uuid, DateTime<Utc>);

/// One execution an owner started (a claim returned to it).
#[derive(Debug, Clone)]
pub struct Execution {
    pub job: String,
    pub run_id: Uuid,
    pub slot: Option<DateTime<Utc>>,
    pub trigger: Trigger,
    pub claimed_at: DateTime<Utc>,
    /// The model's operation count when it was claimed (set by [`Model::execute`]).
    pub seq: u64,
}

#[derive(Debug, Default)]
pub struct JobModel {
    pub every: i64,
    pub one_shot: bool,
    /// Acknowledged windows with no slots recorded: paused, or removed from the jobs file.
    /// `(from, to)`, `to = None` while still quiet.
    pub quiet: Vec<(DateTime<Utc>, Option<DateTime<Utc>>)>,
    /// An operation on this job returned an error (it may or may not have happened).
    pub uncertain: bool,
    /// Acknowledged state: paused, removed from the jobs file.
    pub paused: bool,
    pub removed: bool,
    /// The latest wall instant of an acknowledged operation inside the open quiet window: the
    /// window ends no earlier than it, whatever the clock did before the window closed.
    pub quiet_hi: Option<DateTime<Utc>>,
}

impl JobModel {
    /// Record an acknowledged pause/resume/remove/re-add at `now`, keeping `quiet` windows.
    pub fn set_quiet(&mut self, paused: Option<bool>, removed: Option<bool>, now: DateTime<Utc>) {
        let was = self.paused || self.removed;
        if let Some(p) = paused {
            self.paused = p;
        }
        if let Some(r) = removed {
            self.removed = r;
        }
        let is = self.paused || self.removed;
        if is && !was {
            self.quiet.push((now, None));
            self.quiet_hi = Some(now);
        } else if was && let Some(last) = self.quiet.last_mut() {
            // The wall clock may have stepped back meanwhile: the window is the span of the
            // operations inside it (opening, closing, and any in between, such as a removal
            // while paused), whichever way the clock went. Seed 81748: paused, removed and
            // re-added after a slot fell due, the clock then stepped back 4.3 s before the
            // resume; the window ended at the resume's (earlier) instant, before the slot.
            last.0 = last.0.min(now);
            let hi = self.quiet_hi.map_or(now, |h| h.max(now));
            self.quiet_hi = Some(hi);
            if !is {
                last.1 = Some(hi);
                self.quiet_hi = None;
            }
        }
    }
}

#[derive(Debug, Default)]
pub struct Model {
    pub jobs: BTreeMap<String, JobModel>,
    pub executions: Vec<Execution>,
    pub run_ids: BTreeSet<Uuid>,
    /// Rows acknowledged to an owner: (run_id, status).
    pub acked: BTreeSet<(Uuid, Status)>,
    /// Runs whose owner decided not to run the action (a refused budget: `skipped`). They do
    /// not count toward `once`, so they are left out of the one-shot bound.
    pub not_run: BTreeSet<Uuid>,
    pub budget: Option<f64>,
    /// Spend a non-atomic budget check can let through (worst cases admitted while another
    /// owner had an admitted, unrecorded call).
    pub budget_slack: f64,
    /// Chained jobs and their `after:` entries.
    pub chains: BTreeMap<String, Vec<cronsole::model::After>>,
    /// Parent runs each chained job was started for: (job, parent run) → the chained run.
    pub chain_runs: BTreeMap<(String, Uuid), Uuid>,
    /// When each row was first read back (the number of the check, [`Model::note_seen`]): the
    /// order run ends happened in, which history's order is not for a late row superseding
    /// `abandoned` (appended at the end, it stands where the hidden `abandoned` row stood).
    pub seen: BTreeMap<(Uuid, Status), u64>,
    pub checks: u64,
    /// Tool calls whose loop step the store acknowledged, by run.
    pub acked_calls: BTreeMap<Uuid, BTreeSet<String>>,
    /// Store operations so far (claims, completions and operator commands,
    /// [`Model::clock_op`]).
    pub seq: u64,
    /// The latest clock a claim or a completion decided slots at.
    pub claim_hi: Option<DateTime<Utc>>,
    /// Operations whose clock was more than three hours behind a claim before them: `(seq,
    /// clock)`. Ranges decided before one and reaching past its clock by more than three hours
    /// stand only up to its clock after it.
    pub fixes: Vec<(u64, DateTime<Utc>)>,
    /// The latest clock of an operation since the last check.
    pub ops_hi: Option<DateTime<Utc>>,
    /// When each run or row was first known to the model (its `seq`).
    pub decided: BTreeMap<Uuid, u64>,
    /// Each job's grid origin as last read back, and the slots re-derivation may have skipped
    /// (a grid origin moved back to before the clock: slots up to it are not due).
    pub anchors: BTreeMap<String, (DateTime<Utc>, Option<DateTime<Utc>>)>,
}

/// The store's rule: a slot that ran moves back only when it lies this far ahead of the clock.
pub const CLOCK_FIX: Duration = Duration::hours(3);

impl Model {
    /// A store operation at clock `t` is about to run (`claim`: a claim or a completion, whose
    /// clock decides slots). One more than three hours behind an earlier one may re-derive
    /// slots.
    pub fn clock_op(&mut self, t: DateTime<Utc>, claim: bool) {
        self.seq += 1;
        if self.claim_hi.is_some_and(|hi| hi > t + CLOCK_FIX) {
            self.fixes.push((self.seq, t));
        }
        if claim {
            self.claim_hi = Some(self.claim_hi.map_or(t, |h| h.max(t)));
        }
        self.ops_hi = Some(self.ops_hi.map_or(t, |h| h.max(t)));
    }

    /// Where a range `[from, to]` decided at operation `seq` stands now: its end cut back to
    /// the clock of any later operation more than three hours behind a claim; `None` when
    /// nothing of it stands. The store re-derives a job decided that far ahead from that clock
    /// whole: its last slot comes back to it, whatever an earlier range a little ahead stood
    /// for (seed 23: a run claimed 458 s ahead stood for slots up to 694; a claim two days
    /// ahead then moved the last slot there; set right at 381, the job ran 500 again). The
    /// model does not track which jobs that claim touched: every range before it is cut.
    fn standing(
        &self,
        seq: u64,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        let cut = self
            .fixes
            .iter()
            .filter(|(s, _)| *s > seq)
            .map(|(_, r)| *r)
            .min();
        match cut {
            Some(r) if r < from => None,
            Some(r) => Some((from, r.min(to))),
            None => Some((from, to)),
        }
    }

    /// Where a range `[from, to]` decided at operation `seq` may stand for what the store still
    /// holds decided: the later operations taken in turn, each cutting it back to its clock only
    /// while what is left of it lies more than three hours after that clock. A job the store
    /// re-derived at `r` holds slots up to `r` decided from then on, and an operation within
    /// three hours of `r` leaves it so (seed 8001344: slots decided two days ahead, re-derived
    /// by a claim on a clock 165 s ahead, next slot 460; set right at 290, the next slot stays
    /// 460, where cutting back to 290 expected 300). The upper bound the liveness check allows;
    /// at-most-once keeps [`Model::standing`], which cuts every range to the earliest clock.
    fn standing_as_decided(
        &self,
        seq: u64,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        let mut to = to;
        for (_, r) in self.fixes.iter().filter(|(s, _)| *s > seq) {
            if to > *r + CLOCK_FIX {
                if *r < from {
                    return None;
                }
                to = *r;
            }
        }
        Some((from, to))
    }

    /// Coverage ranges as they stand after the store's clock rule, sorted.
    fn standing_covers(&self, cover: &[Cover]) -> Vec<Cover> {
        let mut standing: Vec<Cover> = cover
            .iter()
            .filter_map(|c| {
                let seq = self.decided.get(&c.2).copied().unwrap_or(0);
                self.standing(seq, c.0, c.1).map(|(a, b)| (a, b, c.2, c.3))
            })
            .collect();
        standing.sort();
        standing
    }

    /// Read back each job's grid origin: one moved back (re-derived from a clock behind the
    /// one it was decided by) leaves the new grid's slots before the old origin not due, and for
    /// a job that never ran, those up to the latest clock of an operation since the last check.
    pub fn note_anchors(&mut self, jobs: &[JobRecord]) {
        self.ops_hi = None;
        for j in jobs {
            let e = self
                .anchors
                .entry(j.def.name.clone())
                .or_insert((j.rt.anchor, None));
            // Slots up to the old origin were never slots of the job (it did not exist); for a
            // job that never ran, the re-derived first slot is the first after the clock that
            // moved it, so the grid's slots up to that clock are not due either.
            // (Operator commands run on a true clock here, so an origin is never stored ahead.)
            // Slots a step back ran before the old origin and the clock's return put back
            // are no gap either: they were never slots of the job.
            if j.rt.anchor < e.0 {
                let floor = e.0;
                e.1 = Some(e.1.map_or(floor, |f| f.max(floor)));
            }
            e.0 = j.rt.anchor;
        }
    }

    /// A claim was returned to an owner: check at-most-once and the one-shot bound.
    pub fn execute(&mut self, mut e: Execution) -> Result<(), String> {
        if !self.run_ids.insert(e.run_id) {
            return Err(format!("run_id {} handed out twice", e.run_id));
        }
        e.seq = self.seq;
        self.decided.entry(e.run_id).or_insert(self.seq);
        let jm = self.jobs.get(&e.job);
        let one_shot = jm.is_some_and(|j| j.one_shot);
        if matches!(e.trigger, Trigger::Schedule | Trigger::Immediate)
            && let Some(s) = e.slot
        {
            for p in &self.executions {
                if p.job != e.job || !matches!(p.trigger, Trigger::Schedule | Trigger::Immediate) {
                    continue;
                }
                let Some(ps) = p.slot else { continue };
                let Some((_, to)) = self.standing(p.seq, ps, p.claimed_at.max(ps)) else {
                    continue;
                };
                if s >= ps && s <= to {
                    return Err(format!(
                        "slot {} of job {} executed twice: first by run {} (claimed at {}), again by run {}",
                        s, e.job, p.run_id, p.claimed_at, e.run_id
                    ));
                }
            }
        }
        if one_shot && e.trigger != Trigger::Manual {
            let n = self
                .executions
                .iter()
                .filter(|p| {
                    p.job == e.job
                        && p.trigger != Trigger::Manual
                        && !self.not_run.contains(&p.run_id)
                })
                .count();
            if n >= 2 {
                return Err(format!(
                    "one-shot job {} executed a third time (run {})",
                    e.job, e.run_id
                ));
            }
        }
        self.executions.push(e);
        Ok(())
    }

    /// A chained claim was returned to an owner for these parent runs: at most once each.
    pub fn chain_claimed(
        &mut self,
        job: &str,
        run_id: Uuid,
        parents: &[Uuid],
    ) -> Result<(), String> {
        for p in parents {
            if let Some(first) = self.chain_runs.insert((job.to_string(), *p), run_id) {
                return Err(format!(
                    "chained job {job} started twice for parent run {p}: runs {first} and {run_id}"
                ));
            }
        }
        Ok(())
    }

    /// At the end: each parent's newest firing run is consumed or pending (see the module doc).
    fn check_chains(&self, rows: &[HistoryRow], jobs: &[JobRecord]) -> Result<(), String> {
        for (child, after) in &self.chains {
            let exempt = self
                .jobs
                .get(child)
                .is_none_or(|j| j.uncertain || !j.quiet.is_empty() || j.removed);
            let Some(rec) = jobs.iter().find(|j| &j.def.name == child) else {
                continue;
            };
            if exempt || rec.rt.retired {
                continue;
            }
            for a in after {
                // Newest first: the first run end of the parent that fires this entry. A late
                // row that superseded an `abandoned` one stands where that row stood: the chain
                // was decided by `abandoned` at the recovery (a late result fires nothing).
                // Seed 178: a late row appended after a newer run's `failed` row was taken for
                // the newest; the store rightly had the newer run pending. Rows are ordered by
                // when they were first read back (the late row by its `abandoned` row's
                // instant), then by history's order (newest first).
                let when = |i: usize, r: &HistoryRow| {
                    let late = r.stale_lease && r.supersedes_abandoned;
                    let at = late
                        .then(|| self.seen.get(&(r.run_id, Status::Abandoned)))
                        .flatten()
                        .or_else(|| self.seen.get(&(r.run_id, r.status)))
                        .copied()
                        .unwrap_or(u64::MAX);
                    (at, std::cmp::Reverse(i))
                };
                let newest = rows
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| {
                        let late = r.stale_lease && r.supersedes_abandoned;
                        let status = if late { Status::Abandoned } else { r.status };
                        r.job == a.job
                            && (!r.stale_lease || late)
                            && (late || policy::chain::is_run_end(r))
                            && a.on.fires_on(status)
                    })
                    .max_by_key(|(i, r)| when(*i, r))
                    .map(|(_, r)| r);
                let Some(n) = newest else { continue };
                let pos = rows.iter().position(|r| r.run_id == n.run_id).unwrap_or(0);
                // Consumed: a chained claim an owner saw, or a chained row of the job naming the
                // run (a claim whose owner died before seeing it ends `abandoned`, like a slot).
                // A fan-in row names only its last parent: a chained row newer than the run
                // counts for the others.
                let consumed = self.chain_runs.contains_key(&(child.clone(), n.run_id))
                    || rows.iter().enumerate().any(|(i, r)| {
                        &r.job == child
                            && r.trigger == Trigger::Chain
                            && (r.parent_run_id == Some(n.run_id) || (after.len() > 1 && i < pos))
                    });
                let pending = rec
                    .rt
                    .chain_pending
                    .get(&a.job)
                    .is_some_and(|p| p.run_id == n.run_id);
                if !consumed && !pending {
                    return Err(format!(
                        "chain lost: run {} of {} ended {} (fires {} on {}) but {child} neither ran for it nor has it pending (pending: {:?})",
                        n.run_id,
                        a.job,
                        n.status.as_str(),
                        child,
                        a.on.as_str(),
                        rec.rt.chain_pending.keys().collect::<Vec<_>>()
                    ));
                }
            }
        }
        Ok(())
    }

    /// Note the rows read back at one check (before [`Model::check`]). A row gone since (a
    /// power loss took an unacknowledged one) is forgotten, so a rewrite counts from when it
    /// reappears — except an `abandoned` row hidden by its run's late row: its instant is the
    /// late row's place in the order of run ends.
    pub fn note_seen(&mut self, rows: &[HistoryRow]) {
        self.checks += 1;
        let present: BTreeSet<(Uuid, Status)> = rows.iter().map(|r| (r.run_id, r.status)).collect();
        let superseded: BTreeSet<Uuid> = rows
            .iter()
            .filter(|r| r.supersedes_abandoned)
            .map(|r| r.run_id)
            .collect();
        self.seen.retain(|k, _| {
            present.contains(k) || (k.1 == Status::Abandoned && superseded.contains(&k.0))
        });
        for r in rows {
            self.seen.entry((r.run_id, r.status)).or_insert(self.checks);
        }
    }

    pub fn ack_row(&mut self, row: &HistoryRow) {
        self.acked.insert((row.run_id, row.status));
        self.decided.entry(row.run_id).or_insert(self.seq);
    }

    /// A loop step of run `run` that recorded the calls `ids` was acknowledged.
    pub fn ack_calls(&mut self, run: Uuid, ids: impl IntoIterator<Item = String>) {
        self.acked_calls.entry(run).or_default().extend(ids);
    }

    /// Every acknowledged tool call is in its run's row, once the run has one.
    fn check_calls(&self, rows: &[HistoryRow], jobs: &[JobRecord]) -> Result<(), String> {
        // A run whose lease is still in its job's record goes on: an `abandoned` row beside it
        // (a recoverer wrote it to history and died before its journal write) gives way to the
        // run's own end, which carries every call (seed 31 of the tool loops).
        let live: BTreeSet<Uuid> = jobs
            .iter()
            .filter_map(|j| j.rt.lease.as_ref().map(|l| l.run_id))
            .collect();
        for r in rows {
            let Some(want) = self.acked_calls.get(&r.run_id) else {
                continue;
            };
            if r.status == Status::Abandoned && live.contains(&r.run_id) {
                continue;
            }
            let have: BTreeSet<String> = cronsole::testkit::tools::calls(r)
                .into_iter()
                .map(|c| c.id)
                .collect();
            if let Some(lost) = want.iter().find(|id| !have.contains(*id)) {
                return Err(format!(
                    "recorded tool call {lost} of run {} is not on its {} row (it has {:?})",
                    r.run_id,
                    r.status.as_str(),
                    have
                ));
            }
        }
        Ok(())
    }

    /// Check what the store shows now. `end` adds the end-of-run checks (every execution has
    /// its row; no lease left).
    pub fn check(
        &self,
        rows: &[HistoryRow],
        jobs: &[JobRecord],
        now: DateTime<Utc>,
        end: bool,
    ) -> Result<(), String> {
        // Acknowledged rows survive (an `abandoned` one may give way to the run's real end).
        let present: BTreeSet<(Uuid, Status)> = rows.iter().map(|r| (r.run_id, r.status)).collect();
        let superseded: BTreeSet<Uuid> = rows
            .iter()
            .filter(|r| r.supersedes_abandoned)
            .map(|r| r.run_id)
            .collect();
        for a in &self.acked {
            let gave_way = a.1 == Status::Abandoned && superseded.contains(&a.0);
            if !(present.contains(a) || gave_way) {
                return Err(format!(
                    "acknowledged row lost: run {} status {}",
                    a.0,
                    a.1.as_str()
                ));
            }
        }
        // One row per run.
        let mut per_run: BTreeMap<Uuid, Vec<&HistoryRow>> = BTreeMap::new();
        for r in rows {
            per_run.entry(r.run_id).or_default().push(r);
        }
        for (id, rs) in &per_run {
            if rs.len() > 1 {
                let what: Vec<String> = rs
                    .iter()
                    .map(|r| {
                        format!(
                            "{}{}",
                            r.status.as_str(),
                            if r.stale_lease { "(stale)" } else { "" }
                        )
                    })
                    .collect();
                return Err(format!(
                    "run {id} has {} rows: {}",
                    rs.len(),
                    what.join(", ")
                ));
            }
        }
        // Budget.
        if let Some(b) = self.budget {
            let spent: f64 = rows.iter().map(|r| r.cost_usd.max(0.0)).sum();
            if spent > b + self.budget_slack + 1e-9 {
                return Err(format!(
                    "recorded spend {spent:.4} over the budget {b:.4} (+ allowed slack {:.4} of a non-atomic check)",
                    self.budget_slack
                ));
            }
        }
        self.check_calls(rows, jobs)?;
        for job in jobs {
            self.check_slots(job, rows, now)?;
        }
        if end {
            for e in &self.executions {
                if !per_run.contains_key(&e.run_id) {
                    return Err(format!(
                        "run {} of job {} (slot {:?}) executed but left no history row",
                        e.run_id, e.job, e.slot
                    ));
                }
            }
            for job in jobs {
                if let Some(l) = &job.rt.lease {
                    return Err(format!(
                        "job {} still leased by {} (run {}) after every run ended",
                        job.def.name, l.owner, l.run_id
                    ));
                }
            }
            self.check_chains(rows, jobs)?;
            self.check_live(jobs, rows, now)?;
        }
        Ok(())
    }

    /// The latest slot a scheduled row of `job` stands for, after the store's clock rule.
    fn decided_until(
        &self,
        job: &str,
        rows: &[HistoryRow],
        now: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        rows.iter()
            .filter(|r| r.job == job && matches!(r.trigger, Trigger::Schedule | Trigger::Immediate))
            .filter_map(|r| {
                let s = r.slot?;
                let to = match r.slot_end {
                    Some(e) => e,
                    None if r.status == Status::Missed
                        || (r.status == Status::Skipped
                            && r.reason.as_deref() == Some("overlap")) =>
                    {
                        s
                    }
                    None => r.started_at.max(s),
                };
                // Within three hours a range stands whole (the store puts back what a step
                // back moved once the clock returns); beyond, as the clock rule leaves it.
                if to <= now + CLOCK_FIX {
                    return Some(to);
                }
                let seq = self.decided.get(&r.run_id).copied().unwrap_or(0);
                self.standing_as_decided(seq, s, to).map(|(_, to)| to)
            })
            .max()
    }

    /// No job is left without a slot in its next interval (see the module doc).
    fn check_live(
        &self,
        jobs: &[JobRecord],
        rows: &[HistoryRow],
        now: DateTime<Utc>,
    ) -> Result<(), String> {
        for job in jobs {
            let Some(jm) = self.jobs.get(&job.def.name) else {
                continue;
            };
            let rt = &job.rt;
            if jm.one_shot
                || jm.every <= 0
                || jm.paused
                || jm.removed
                || jm.uncertain
                || rt.retired
                || rt.paused
                || rt.lease.is_some()
            {
                continue;
            }
            let every = Duration::seconds(jm.every);
            // The next slot follows the clock (a minute's tolerance for owners a little ahead)
            // and every slot decided before it: the last that ran, and those its rows stand
            // for (a coalesced fire up to its claim, `missed` and skipped ranges), as they
            // stand after the store's clock rule; a job that never ran, its first slot when
            // it lies less than three hours ahead.
            let mut from = now + Duration::seconds(60);
            if let Some(l) = rt.last_slot {
                from = from.max(l);
            } else if rt.anchor <= now + CLOCK_FIX {
                from = from.max(rt.anchor);
            }
            if let Some(d) = self.decided_until(&job.def.name, rows, now) {
                from = from.max(d);
            }
            match rt.next_slot {
                Some(n) if n <= from + every => {}
                n => {
                    return Err(format!(
                        "job {} is left without a slot: next {n:?}, last {:?}, grid origin {} (at {now})",
                        job.def.name, rt.last_slot, rt.anchor
                    ));
                }
            }
        }
        Ok(())
    }

    /// Every grid slot of an `every` job before its cursor is covered by exactly one row.
    fn check_slots(
        &self,
        job: &JobRecord,
        rows: &[HistoryRow],
        now: DateTime<Utc>,
    ) -> Result<(), String> {
        let name = &job.def.name;
        let Some(jm) = self.jobs.get(name) else {
            return Ok(());
        };
        if jm.one_shot || jm.every <= 0 {
            return Ok(());
        }
        let every = Duration::seconds(jm.every);
        let anchor = job.rt.anchor;
        // The grid's first slot is one interval after its anchor (the whole second the job was
        // stored in); a job created with `run_immediately` also runs for its creation instant
        // (re-anchored by a schedule change, it waits for its first slot like any job).
        let created = job.rt.created_at;
        let fresh = anchor == chrono::SubsecRound::trunc_subsecs(created, 0);
        let first_slot = if job.def.run_immediately && fresh {
            created
        } else {
            anchor + every
        };
        let grid_at_or_after = |t: DateTime<Utc>| -> DateTime<Utc> {
            if t <= first_slot {
                return first_slot;
            }
            let k = ((t - anchor).num_milliseconds() + every.num_milliseconds() - 1)
                / every.num_milliseconds();
            anchor + every * k as i32
        };
        // Coverage intervals: (from, to, run_id, started_at).
        let mut cover: Vec<Cover> = Vec::new();
        let status_of = |id: &Uuid| -> String {
            rows.iter()
                .filter(|r| &r.run_id == id)
                .map(|r| format!("{} by {}", r.status.as_str(), r.owner))
                .collect::<Vec<_>>()
                .join(", ")
        };
        // Runs with a row in history, whatever their trigger: a manual run's row covers no
        // slot, but once it is in history so is the overlap row its record may still owe
        // (`before_pause` below; chain seed 37: a manual run's completion whose journal write
        // failed after its rows landed counted the set-aside slot twice).
        let mut seen = BTreeSet::new();
        for r in rows.iter().filter(|r| &r.job == name) {
            let first = seen.insert(r.run_id);
            if matches!(r.trigger, Trigger::Manual | Trigger::Recovery) || !first {
                continue;
            }
            let Some(s) = r.slot else { continue };
            let to = match r.slot_end {
                Some(e) => e,
                None if r.status == Status::Missed
                    || (r.status == Status::Skipped && r.reason.as_deref() == Some("overlap")) =>
                {
                    s
                }
                None => r.started_at.max(s),
            };
            cover.push((s, to, r.run_id, r.started_at));
        }
        if let Some(l) = &job.rt.lease
            && !seen.contains(&l.run_id)
            && matches!(l.trigger, Trigger::Schedule | Trigger::Immediate)
            && let Some(s) = l.slot
        {
            cover.push((s, l.claimed_at.max(s), l.run_id, l.claimed_at));
        }
        // Slots a pause set aside while a run was live (`overlap.before_pause`): the record
        // owes them the run's overlap row when it ends, so they are in flight with it (seed
        // 28434: paused after a slot fell due behind a stalled owner's lease; the pause moved
        // the cursor past that slot and kept it in the record, which the model did not read).
        // Once the run's row is in history, so is that overlap row (one append; seed 23: a
        // recoverer wrote both and died before the record).
        // Set aside at the pause, an instant the record does not keep: no acknowledged quiet
        // window before it may be ruled out (release batch seeds 84, 87: a removal window
        // between the claim and the pause explained the gap before these slots).
        if let (Some(l), Some(r)) = (&job.rt.lease, job.rt.overlap.before_pause)
            && !seen.contains(&l.run_id)
        {
            cover.push((r.first, r.last, l.run_id, DateTime::<Utc>::MAX_UTC));
        }
        cover.sort();
        // Overlaps: a grid slot inside two coverage ranges, each as it stands after the
        // store's clock rule (`standing`).
        let standing = self.standing_covers(&cover);
        let mut reach: Option<&Cover> = None;
        for b in &standing {
            if let Some(a) = reach {
                let first_b = grid_at_or_after(b.0);
                if first_b <= a.1 && first_b <= b.1 {
                    let (sa, sb) = (status_of(&a.2), status_of(&b.2));
                    return Err(format!(
                        "slot {first_b} of job {name} is in two rows: run {} ({sa}) [{}..{}] and run {} ({sb}) [{}..{}]",
                        a.2, a.0, a.1, b.2, b.0, b.1
                    ));
                }
            }
            if reach.is_none_or(|a| b.1 > a.1) {
                reach = Some(b);
            }
        }
        if jm.uncertain {
            return Ok(());
        }
        // Gaps before the cursor.
        // The cursor: slots before it were decided (a lease in flight covers its own range).
        let horizon = job.rt.next_slot.unwrap_or(now);
        let horizon = horizon.min(now);
        let mut expect = first_slot;
        // Slots a grid origin moved back over are not due (`note_anchors`).
        if let Some(floor) = self.anchors.get(name).and_then(|a| a.1) {
            expect = expect.max(grid_at_or_after(floor + Duration::milliseconds(1)));
        }
        let mut i = 0;
        while expect < horizon {
            // Skip coverage ranges that end before `expect`.
            while i < cover.len() && cover[i].1 < expect {
                i += 1;
            }
            let covered = i < cover.len() && cover[i].0 <= expect;
            if covered {
                expect = grid_at_or_after(cover[i].1 + Duration::milliseconds(1));
                continue;
            }
            // A gap from `expect` to the next covered slot (or the cursor).
            // With no later claim, every acknowledged quiet window came before this check,
            // whatever the wall clock says now (it may have stepped back past the window's
            // start: seeds 2088, 3447 flagged a gap a pause had explained).
            let (gap_end, next_claim) = match cover.get(i) {
                Some(c) => (c.0, c.3),
                None => (horizon, DateTime::<Utc>::MAX_UTC),
            };
            let explained = jm
                .quiet
                .iter()
                .any(|(from, to)| *from <= next_claim && to.is_none_or(|t| t >= expect));
            if !explained {
                return Err(format!(
                    "job {name}: slot {expect} (up to {gap_end}) has no row and is not in flight (cursor {horizon})"
                ));
            }
            expect = grid_at_or_after(gap_end);
            if gap_end >= horizon {
                break;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use cronsole::testkit::time::base as t;

    fn exec(job: &str, slot: i64, at: i64, trigger: Trigger) -> Execution {
        Execution {
            job: job.into(),
            run_id: Uuid::new_v4(),
            slot: Some(t(slot)),
            trigger,
            claimed_at: t(at),
            seq: 0,
        }
    }

    #[test]
    fn a_slot_executed_twice_is_caught_even_inside_a_coalesced_fire() {
        let mut m = Model::default();
        m.jobs.insert(
            "a".into(),
            JobModel {
                every: 10,
                ..JobModel::default()
            },
        );
        m.execute(exec("a", 0, 25, Trigger::Schedule)).unwrap();
        m.execute(exec("a", 30, 30, Trigger::Schedule)).unwrap();
        let e = m.execute(exec("a", 20, 31, Trigger::Schedule)).unwrap_err();
        assert!(e.contains("executed twice"), "{e}");
        // Manual runs are runs of their own.
        m.execute(exec("a", 30, 32, Trigger::Manual)).unwrap();
    }

    #[test]
    fn a_once_job_may_run_twice_but_not_three_times() {
        let mut m = Model::default();
        m.jobs.insert(
            "o".into(),
            JobModel {
                every: 10,
                one_shot: true,
                ..JobModel::default()
            },
        );
        m.execute(exec("o", 0, 0, Trigger::Schedule)).unwrap();
        m.execute(exec("o", 0, 40, Trigger::Recovery)).unwrap();
        assert!(m.execute(exec("o", 0, 80, Trigger::Recovery)).is_err());
    }

    #[test]
    fn a_lost_acknowledged_row_and_a_second_row_for_one_run_are_caught() {
        let mut m = Model::default();
        let mut row = HistoryRow::new(
            "a",
            Status::Succeeded,
            Trigger::Schedule,
            Some(t(0)),
            "o",
            t(1),
        );
        m.ack_row(&row);
        assert!(m.check(&[], &[], t(2), false).unwrap_err().contains("lost"));
        m.check(std::slice::from_ref(&row), &[], t(2), false)
            .unwrap();
        let twice = [row.clone(), row.clone()];
        assert!(
            m.check(&twice, &[], t(2), false)
                .unwrap_err()
                .contains("2 rows")
        );
        // Not even `abandoned` beside the run's own late (stale) completion: the late row
        // supersedes it, and an acknowledged `abandoned` row may then be gone.
        let mut ab = row.clone();
        ab.status = Status::Abandoned;
        row.stale_lease = true;
        m.acked.clear();
        assert!(
            m.check(&[ab.clone(), row.clone()], &[], t(2), false)
                .unwrap_err()
                .contains("2 rows")
        );
        m.ack_row(&ab);
        assert!(
            m.check(std::slice::from_ref(&row), &[], t(2), false)
                .is_err()
        );
        row.supersedes_abandoned = true;
        m.check(&[row], &[], t(2), false).unwrap();
    }

    /// Seeds 2088, 3447: a slot due before an acknowledged pause was dropped by it (the
    /// operator's resume continues at the next future slot); the wall clock then stepped back
    /// before the pause's instant. The pause still explains the gap; a gap with no pause does
    /// not.
    #[test]
    fn a_gap_explained_by_a_pause_stays_explained_after_the_clock_steps_back() {
        let mut rec =
            policy::define::new_record(cronsole::testkit::jobs::command_job("a", 10), t(0))
                .unwrap();
        rec.rt.last_slot = Some(t(0));
        rec.rt.next_slot = Some(t(100));
        let run = |slot: i64| {
            let mut r = HistoryRow::new(
                "a",
                Status::Succeeded,
                Trigger::Schedule,
                Some(t(slot)),
                "o",
                t(slot + 1),
            );
            r.started_at = t(slot);
            r
        };
        let rows = [run(0)];
        let mut m = Model::default();
        m.jobs.insert(
            "a".into(),
            JobModel {
                every: 10,
                ..JobModel::default()
            },
        );
        // No pause: slots 10..90 have no row.
        assert!(
            m.check(&rows, std::slice::from_ref(&rec), t(95), false)
                .unwrap_err()
                .contains("has no row")
        );
        // Paused at 96 and resumed at 97; the clock then stepped back to 95.
        if let Some(j) = m.jobs.get_mut("a") {
            j.set_quiet(Some(true), None, t(96));
            j.set_quiet(Some(false), None, t(97));
        }
        m.check(&rows, &[rec], t(95), false).unwrap();
    }

    /// Seed 81748: paused at 85, slot 90 fell due (dropped by the pause: the resume continues
    /// at the next future slot), removed at 91 and re-added at 93 while paused, then the clock
    /// stepped back and the resume landed at 88. The window spans every operation inside it
    /// (85..93), so it explains slot 90; a pause from 85 to 88 with nothing in between does not.
    #[test]
    fn a_quiet_window_ends_at_its_latest_operation_when_the_clock_stepped_back() {
        let mut rec =
            policy::define::new_record(cronsole::testkit::jobs::command_job("a", 10), t(0))
                .unwrap();
        rec.rt.last_slot = Some(t(100));
        rec.rt.next_slot = Some(t(110));
        let run = |slot: i64| {
            let mut r = HistoryRow::new(
                "a",
                Status::Succeeded,
                Trigger::Schedule,
                Some(t(slot)),
                "o",
                t(slot + 1),
            );
            r.started_at = t(slot);
            r
        };
        let rows: Vec<HistoryRow> = (0..=8).chain([10]).map(|k| run(k * 10)).collect();
        let model = |ops: &[(Option<bool>, Option<bool>, i64)]| {
            let mut jm = JobModel {
                every: 10,
                ..JobModel::default()
            };
            for (p, r, at) in ops {
                jm.set_quiet(*p, *r, t(*at));
            }
            let mut m = Model::default();
            m.jobs.insert("a".into(), jm);
            m
        };
        let short = model(&[(Some(true), None, 85), (Some(false), None, 88)]);
        assert!(
            short
                .check(&rows, std::slice::from_ref(&rec), t(105), false)
                .unwrap_err()
                .contains("slot")
        );
        let long = model(&[
            (Some(true), None, 85),
            (None, Some(true), 91),
            (None, Some(false), 93),
            (Some(false), None, 88),
        ]);
        long.check(&rows, &[rec], t(105), false).unwrap();
    }

    /// Seed 28434: a pause while a stalled owner's run was live set the slot that fell due
    /// behind the lease aside in the record (`overlap.before_pause`, written as the run's
    /// overlap row when it ends) and moved the cursor past it; the slot is in flight with the
    /// lease, not a gap. Without the lease it would be one.
    #[test]
    fn slots_a_pause_set_aside_behind_a_live_run_are_in_flight() {
        let mut rec =
            policy::define::new_record(cronsole::testkit::jobs::command_job("a", 10), t(0))
                .unwrap();
        rec.rt.last_slot = Some(t(30));
        rec.rt.next_slot = Some(t(90));
        rec.rt.lease = Some(cronsole::model::Lease {
            owner: "o".into(),
            run_id: Uuid::new_v4(),
            slot: Some(t(30)),
            trigger: Trigger::Schedule,
            claimed_at: t(71),
            lease_until: t(81),
            last_renewed: t(71),
            spends_job: false,
            coalesced: None,
            cancel_requested_at: None,
            lapsed: false,
            chain: Vec::new(),
            awaiting: None,
        });
        rec.rt.overlap.before_pause = Some(cronsole::model::SlotRange {
            first: t(80),
            last: t(80),
            count: 1,
        });
        let mut r = HistoryRow::new(
            "a",
            Status::Succeeded,
            Trigger::Schedule,
            Some(t(0)),
            "o",
            t(1),
        );
        r.slot_end = Some(t(20));
        r.started_at = t(20);
        let rows = [r];
        let mut m = Model::default();
        m.jobs.insert(
            "a".into(),
            JobModel {
                every: 10,
                ..JobModel::default()
            },
        );
        m.check(&rows, std::slice::from_ref(&rec), t(85), false)
            .unwrap();
        // Seeds 84, 87: claimed at 34, removed from the jobs file 36..44 (slots 40 the gap),
        // paused at 48 with 45 set aside. The removal explains the gap: the slots set aside
        // were decided at the pause, after it.
        let mut early = rec.clone();
        if let Some(l) = early.rt.lease.as_mut() {
            l.claimed_at = t(34);
        }
        early.rt.overlap.before_pause = Some(cronsole::model::SlotRange {
            first: t(80),
            last: t(80),
            count: 1,
        });
        let mut removed = JobModel {
            every: 10,
            ..JobModel::default()
        };
        removed.set_quiet(None, Some(true), t(36));
        removed.set_quiet(None, Some(false), t(44));
        let mut m2 = Model::default();
        m2.jobs.insert("a".into(), removed);
        m2.check(&rows, &[early], t(85), false).unwrap();
        rec.rt.lease = None;
        assert!(
            m.check(&rows, &[rec], t(85), false)
                .unwrap_err()
                .contains("has no row")
        );
    }

    /// Seed 178: `abandoned` for run A fired the child (pending A); run B then failed (pending
    /// B); A's late `succeeded` row then superseded A's `abandoned` row at history's end. The
    /// newest firing run end is B's, which the store holds pending: not a lost chain. A pending
    /// A with B unconsumed would be one.
    #[test]
    fn a_late_row_stands_where_its_abandoned_row_stood_for_chains() {
        let row = |status, at| {
            let mut r = HistoryRow::new("p", status, Trigger::Schedule, Some(t(at)), "o", t(at));
            r.started_at = t(at);
            r
        };
        let abandoned = row(Status::Abandoned, 10);
        let b = row(Status::Failed, 20);
        let mut late = abandoned.clone();
        late.status = Status::Succeeded;
        late.stale_lease = true;
        late.supersedes_abandoned = true;
        let mut m = Model::default();
        let on = vec![cronsole::model::After {
            job: "p".into(),
            on: cronsole::model::ChainOn::Failure,
        }];
        m.chains.insert("c".into(), on.clone());
        m.jobs.insert("c".into(), JobModel::default());
        let mut child = cronsole::testkit::jobs::command_job("c", 10);
        child.after = on;
        let mut rec = policy::define::new_record(child, t(0)).unwrap();
        let pending = |r: &HistoryRow| cronsole::model::ParentRun {
            job: "p".into(),
            run_id: r.run_id,
            status: r.status,
            finished_at: r.finished_at,
            output: None,
        };
        // The order the checks read them back: abandoned, then B, then the late row.
        m.note_seen(std::slice::from_ref(&abandoned));
        m.note_seen(&[b.clone(), abandoned.clone()]);
        let rows = [late.clone(), b.clone()];
        m.note_seen(&rows);
        rec.rt.chain_pending.insert("p".into(), pending(&b));
        m.check_chains(&rows, std::slice::from_ref(&rec)).unwrap();
        rec.rt.chain_pending.insert("p".into(), pending(&abandoned));
        assert!(
            m.check_chains(&rows, &[rec])
                .unwrap_err()
                .contains("chain lost")
        );
    }

    #[test]
    fn spend_over_the_budget_is_caught() {
        let mut m = Model {
            budget: Some(1.0),
            ..Model::default()
        };
        let mut row = HistoryRow::new(
            "a",
            Status::Succeeded,
            Trigger::Schedule,
            Some(t(0)),
            "o",
            t(1),
        );
        row.cost_usd = 1.5;
        assert!(
            m.check(std::slice::from_ref(&row), &[], t(2), false)
                .unwrap_err()
                .contains("over the budget")
        );
        m.budget_slack = 0.5;
        m.check(&[row], &[], t(2), false).unwrap();
    }

    #[test]
    fn a_recorded_tool_call_missing_from_its_runs_row_is_caught() {
        use cronsole::transcript::{CallEntry, Entry, Transcript};
        let call = |id: &str| {
            Entry::Call(CallEntry::dispatched(
                1,
                id.into(),
                "files.read".into(),
                None,
                "{}".into(),
                t(0),
            ))
        };
        let mut m = Model::default();
        let mut row = HistoryRow::new(
            "a",
            Status::Abandoned,
            Trigger::Schedule,
            Some(t(0)),
            "o",
            t(1),
        );
        let mut tr = Transcript::new();
        tr.push(call("c1"));
        row.transcript = Some(tr.clone());
        m.ack_calls(row.run_id, ["c1".to_string(), "c2".to_string()]);
        assert!(
            m.check(std::slice::from_ref(&row), &[], t(2), false)
                .unwrap_err()
                .contains("recorded tool call c2")
        );
        tr.push(call("c2"));
        row.transcript = Some(tr);
        m.check(&[row], &[], t(2), false).unwrap();
    }
}

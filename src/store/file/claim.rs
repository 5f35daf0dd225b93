//! Claims on the file store: due jobs evaluated in wake-up order under one lock hold, rows that
//! earlier writers left in history taken into account, and the claims, rows and records written
//! in one persist.
//!
//! Owns: `FileStore::claim` and its steps (`Pass`): probe the due jobs, evaluate them, account
//! for the rows past the store's accounted mark, trim the generated rows to what has not landed.
//! Must not touch: what a claim decides for one job (`plan::claim`), the files' formats.

use std::collections::{BTreeSet, HashMap, HashSet};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::handle::{FileStore, Locked};
use super::record::Mark;
use crate::model::{BudgetPeriod, HistoryRow, Status};
use crate::store::rules::runtime::ClaimPlan;
use crate::store::{Claim, ClaimOutcome, ClaimRequest, StoreResult};
use crate::store::{plan, rules};

/// A job's history position scan request: the job and where its record says history ended.
type ScanFrom = (String, Option<Mark>);

impl FileStore {
    /// Claim due jobs (see [`crate::store::Store::claim_due`]).
    pub(super) fn claim(&self, req: &ClaimRequest<'_>) -> StoreResult<ClaimOutcome> {
        let mut l = self.lock()?;
        self.after_a_step_back(&mut l, req.now)?;
        let due: Vec<String> = l.inner.jobs.due(req.now);
        if due.is_empty() {
            return Ok(ClaimOutcome::default());
        }
        let mut pass = Pass::start(&mut l, req)?;
        pass.probe(&mut l, &due)?;
        // Rows an operation wrote before dying (or failing) ahead of these jobs' records.
        pass.leftovers = l.rows_since_records(&pass.scan)?;
        pass.evaluate(&mut l, due)?;
        pass.account_tail(&mut l)?;
        // A job the probe did not expect to generate rows: scanned now (its rows are trimmed).
        let late = std::mem::take(&mut pass.late);
        pass.leftovers.extend(l.rows_since_records(&late)?);
        pass.scan.extend(late);
        l.inner
            .rows_known
            .extend(pass.scan.iter().map(|(name, _)| name.clone()));
        pass.trim_generated(&l);
        l.inner.relies_on_landed |= pass.relies;
        // Rows decided on a clock that just stepped say so (the claim's `now` is that clock).
        if let Some(step) = req.clock_stepped {
            for r in &mut pass.rows {
                r.clock_stepped.get_or_insert_with(|| step.to_string());
            }
        }
        // A dead owner's tool loop: its `abandoned` row takes the record the run kept.
        let kept = self.attach_run_records(&mut pass.rows);
        l.persist(&pass.rows, &pass.changed)?;
        self.remove_run_records(kept);
        // The operation is over: each claimed record leaves the cache into its claim (moved,
        // not copied: the cache is cleared when the lock is released anyway; a job claimed
        // twice in one pass, which `plan::claim` never does, would be copied).
        let mut uses: HashMap<&str, usize> = HashMap::new();
        for (name, _) in &pass.plans {
            *uses.entry(name.as_str()).or_default() += 1;
        }
        let twice: HashSet<String> = uses
            .into_iter()
            .filter(|(_, n)| *n > 1)
            .map(|(name, _)| name.to_string())
            .collect();
        let claims = pass
            .plans
            .into_iter()
            .filter_map(|(name, p)| {
                let rec = if twice.contains(&name) {
                    l.inner.hot.get(&name).map(|c| c.rec.clone())
                } else {
                    l.inner.hot.remove(&name).map(|c| c.rec)
                };
                rec.map(|job| Claim {
                    run_id: p.run_id,
                    job,
                    slot: p.slot,
                    trigger: p.trigger,
                    lease_until: p.lease_until,
                })
            })
            .collect();
        Ok(ClaimOutcome {
            claims,
            rows: pass.rows,
            refused: None,
        })
    }
}

impl FileStore {
    /// When this claim's clock is further behind the latest one this handle has seen in its
    /// claims and applies (or, at first, the newest clock an owner record was sent with), or
    /// the latest clock a command stored records on (`clock.json`, written by any process),
    /// than the re-derivation tolerance, the clock went back or those records were stored by a
    /// clock ahead: slots decided then may lie beyond what the schedules allow from now, and
    /// those jobs are not due, so the claim would never look at them. Every job with a wake-up
    /// after now is re-derived once, here (a full read of the jobs, only after a step back),
    /// and so is every job without a wake-up (a job retired for `until` by a clock ahead comes
    /// back). Paused jobs are re-derived when they resume.
    fn after_a_step_back(&self, l: &mut Locked<'_>, now: DateTime<Utc>) -> StoreResult<()> {
        let known = match l.inner.clock_mark {
            Some(m) => m,
            None => self.newest_owner_clock().unwrap_or(now),
        };
        let stored = l.stored_clock();
        let mark = stored.map_or(known, |s| known.max(s));
        if now + rules::slots::AHEAD_TOLERANCE >= mark {
            l.inner.clock_mark = Some(mark.max(now));
            return Ok(());
        }
        let by_whom = if stored.is_some_and(|s| s > known) {
            "a command stored jobs on"
        } else {
            "this store was used at"
        };
        tracing::warn!(
            "the clock is {} behind the latest {by_whom}: re-deriving every job's slots from {}",
            crate::clock::step_words(mark - now).trim_start_matches('+'),
            now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        );
        Self::rederive_all(l, now)?;
        Self::stored_clock_swept(l, stored, now)
    }

    /// Every job was just re-derived from `now`: a `clock.json` ahead of it is brought back to
    /// `now`, so handles opened later do not sweep again for it.
    fn stored_clock_swept(
        l: &mut Locked<'_>,
        stored: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> StoreResult<()> {
        if stored.is_some_and(|s| s > now + rules::slots::AHEAD_TOLERANCE) {
            l.write_stored_clock(now)?;
        }
        Ok(())
    }

    /// Jobs were stored at `now` (an apply): a clock ahead stores them ahead, so a later claim
    /// on a clock set right must see the step back, in this handle (even when it never claimed
    /// on the clock ahead: its owner's claims were stopped for it) and in every other
    /// (`clock.json`). Written after the records, so an apply refused for its input changes
    /// nothing; a failure to write it is logged, not the apply's (the records landed).
    pub(super) fn stored_on(&self, l: &mut Locked<'_>, now: DateTime<Utc>) {
        let mark = l
            .inner
            .clock_mark
            .or_else(|| self.newest_owner_clock())
            .unwrap_or(now);
        l.inner.clock_mark = Some(mark.max(now));
        if let Err(e) = l.note_stored_clock(now) {
            tracing::warn!(error = %e, "the clock the jobs were stored on is not recorded");
        }
    }

    /// [`crate::store::Store::rederive_ahead`]: the sweep of [`FileStore::after_a_step_back`],
    /// whatever clock this handle saw before.
    pub(super) fn rederive_ahead(&self, now: DateTime<Utc>) -> StoreResult<()> {
        let mut l = self.lock()?;
        let stored = l.stored_clock();
        Self::rederive_all(&mut l, now)?;
        Self::stored_clock_swept(&mut l, stored, now)
    }

    /// Re-derive, from `now`, every job with a wake-up after it and every unleased job with no
    /// wake-up; write the changed records at once.
    fn rederive_all(l: &mut Locked<'_>, now: DateTime<Utc>) -> StoreResult<()> {
        let mut names: Vec<String> = l
            .inner
            .jobs
            .wake_order(None)
            .into_iter()
            .filter(|(t, _)| *t > now)
            .map(|(_, n)| n)
            .collect();
        // And the jobs with no wake-up at all, unleased: among them, those a clock ahead
        // retired for `until` (it may still be ahead).
        names.extend(
            l.inner
                .jobs
                .iter()
                .filter(|(_, s)| s.wake.is_none() && s.lease.is_none())
                .map(|(n, _)| n.to_string()),
        );
        let mut changed = Vec::new();
        for name in names {
            if !l.load(&name)? {
                continue;
            }
            if let Some(c) = l.inner.hot.get_mut(&name)
                && plan::claim::rederive_logged(&mut c.rec, now)
            {
                changed.push(name);
            }
        }
        if !changed.is_empty() {
            l.persist(&[], &changed)?;
        }
        l.inner.clock_mark = Some(now);
        Ok(())
    }
}

/// What one claim has gathered so far, step by step under one lock hold.
struct Pass<'r, 'a> {
    req: &'r ClaimRequest<'a>,
    period: BudgetPeriod,
    /// Rows a failed persist of this handle already wrote (a retried claim or recovery).
    unacked: Vec<HistoryRow>,
    /// Where history ends now: the mark of every lease this claim takes.
    mark: Mark,
    /// Generated rows past the store's accounted mark (`Inner::acct`), when known.
    tail: Option<Vec<(Mark, HistoryRow)>>,
    tail_rows: Vec<HistoryRow>,
    /// Per probed job: its expired leases' landed rows, and the rows after them.
    runs: HashMap<String, (Vec<HistoryRow>, Vec<HistoryRow>)>,
    /// Jobs scanned for leftovers before they are evaluated (the probe said they generate rows).
    scan: Vec<ScanFrom>,
    /// Jobs that generated rows the probe did not expect: scanned after the evaluation.
    late: Vec<ScanFrom>,
    /// Rows a dead or failed writer left after the scanned jobs' records.
    leftovers: Vec<HistoryRow>,
    evaluated: HashSet<String>,
    /// Generated rows per job, with the rows already known to have landed for it; the rows
    /// are filtered once the scan for leftovers (`rows_since_records`) is done.
    generated: Vec<(String, Vec<HistoryRow>, Vec<HistoryRow>)>,
    rows: Vec<HistoryRow>,
    changed: Vec<String>,
    plans: Vec<(String, ClaimPlan)>,
    relies: bool,
    /// Runs whose landed `abandoned` row is written again (see [`FileStore::outgrown`]).
    rewrite: HashSet<Uuid>,
}

impl<'r, 'a> Pass<'r, 'a> {
    fn start(l: &mut Locked<'_>, req: &'r ClaimRequest<'a>) -> StoreResult<Self> {
        let period = l.period();
        let unacked = l.unacked_rows()?;
        let mark = l.mark_now();
        // Generated rows past the store's accounted mark (`Inner::acct`): a writer put them
        // there and failed or died before its records. Usually none, known without a read.
        // Every job they belong to is evaluated with them (a claim that generates no row of
        // its own does not scan: seed 19652), and the mark moves past those its records now
        // account for. `None`: the mark is unknown (a store written before it existed) or
        // the stretch too long to read; claims then scan only when they generate rows.
        let tail: Option<Vec<(Mark, HistoryRow)>> = if l.inner.acct_clean {
            Some(Vec::new())
        } else {
            match l.inner.acct {
                Some(a) => l.generated_after(a)?,
                None => None,
            }
        };
        let tail_rows: Vec<HistoryRow> = tail.iter().flatten().map(|(_, r)| r.clone()).collect();
        Ok(Pass {
            req,
            period,
            unacked,
            mark,
            tail,
            tail_rows,
            runs: HashMap::new(),
            scan: Vec::new(),
            late: Vec::new(),
            leftovers: Vec::new(),
            evaluated: HashSet::new(),
            generated: Vec::new(),
            rows: Vec::new(),
            changed: Vec::new(),
            plans: Vec::new(),
            relies: false,
            rewrite: HashSet::new(),
        })
    }

    /// Jobs whose step generates rows (a recovery, `missed`, overlap) are scanned for rows a
    /// dead or failed writer left after their records (`rows_since_records`) before they are
    /// evaluated: such a writer may have looked at a later clock, so its rows can record the
    /// slot this step would claim or record next (`plan::claim::skip_recorded`). A probe of the
    /// step on a copy of the record tells which jobs generate rows; jobs that generate none are
    /// not scanned (see the module doc).
    ///
    /// Due jobs are evaluated in wake-up order until `limit` of them would start a run: the
    /// rest stay due, untouched, for the next claim (the engine claims again as runs end).
    /// Reading and parsing every due record on every claim cost a 10 000-job burst ≈ 100 000
    /// parses (a third of the engine's CPU). Jobs that only generate rows (`missed`, overlap, a
    /// recovery without a new run) do not count against the limit; with `limit` 0 every due
    /// job is evaluated, as a claim that starts nothing.
    fn probe(&mut self, l: &mut Locked<'_>, due: &[String]) -> StoreResult<()> {
        let (req, now) = (self.req, self.req.now);
        let in_flight: HashSet<&str> = req.in_flight.iter().map(String::as_str).collect();
        let mut would_start = 0;
        for name in due {
            if req.limit > 0 && would_start >= req.limit {
                break;
            }
            if in_flight.contains(name.as_str()) || !l.load(name)? {
                continue;
            }
            let Some(c) = l.inner.hot.get(name).filter(|c| c.sched.is_some()) else {
                continue;
            };
            // Every expired lease's own row, if it landed (`overlap: allow` holds several: a
            // writer that failed between their rows and the record leaves one for each).
            let expired: Vec<(Uuid, Option<Mark>)> = c
                .rec
                .rt
                .leases()
                .filter(|lease| lease.lease_until <= now)
                .map(|lease| (lease.run_id, c.mark))
                .collect();
            let (mut landed, mut after) = (Vec::new(), Vec::new());
            for (run_id, mark) in expired {
                let (row, rest) = l.find_run_rows(mark, run_id, Some(name))?;
                landed.extend(row);
                after.extend(rest);
            }
            // A dead recoverer's `abandoned` row that lacks steps the run recorded since is
            // not the run's end: a fresh one, superseding it, carries the whole record.
            let outgrown = l.store.outgrown(&landed);
            landed.retain(|r| !outgrown.contains(&r.run_id));
            self.rewrite.extend(outgrown);
            let Some(c) = l.inner.hot.get(name) else {
                continue;
            };
            let Some(sched) = c.sched.as_ref() else {
                continue;
            };
            let mut probe = c.rec.clone();
            let ev = plan::claim::probing(|| {
                plan::claim::claim_step_recorded(
                    &mut probe,
                    sched,
                    now,
                    req.owner,
                    true,
                    self.period,
                    landed.clone(),
                    &[],
                )
            });
            if !ev.rows.is_empty() {
                self.scan.push((name.clone(), c.rows_to));
            }
            would_start += usize::from(ev.claim.is_some());
            self.runs.insert(name.clone(), (landed, after));
        }
        Ok(())
    }

    /// Each probed job's claim step on its record, with every row known to record its slots.
    fn evaluate(&mut self, l: &mut Locked<'_>, due: Vec<String>) -> StoreResult<()> {
        for name in due {
            let Some((landed, after)) = self.runs.remove(&name) else {
                continue;
            };
            let Some(c) = l.inner.hot.get(&name) else {
                continue;
            };
            let Some(sched) = c.sched.clone() else {
                continue;
            };
            self.relies |= !landed.is_empty();
            let recorded: Vec<HistoryRow> = self
                .unacked
                .iter()
                .chain(&after)
                .chain(&self.leftovers)
                .chain(&self.tail_rows)
                .filter(|r| r.job == name && rules::rows::is_generated(r))
                .cloned()
                .collect();
            self.evaluate_one(l, name, &sched, landed, after, &recorded)?;
        }
        Ok(())
    }

    /// One job's claim step: its record changed in the cache, its rows and claim kept for the
    /// persist, and a recovered run's end handed to its `after:` children.
    fn evaluate_one(
        &mut self,
        l: &mut Locked<'_>,
        name: String,
        sched: &crate::schedule::Compiled,
        landed: Vec<HistoryRow>,
        after: Vec<HistoryRow>,
        recorded: &[HistoryRow],
    ) -> StoreResult<()> {
        let (req, now) = (self.req, self.req.now);
        let can = self.plans.len() < req.limit;
        let Some(c) = l.inner.hot.get_mut(&name) else {
            return Ok(());
        };
        let recovering = rules::runtime::expired_lease(&c.rec, now);
        let landed_end = landed.clone();
        let mut ev = plan::claim::claim_step_recorded(
            &mut c.rec,
            sched,
            now,
            req.owner,
            can,
            self.period,
            landed,
            recorded,
        );
        for r in ev
            .rows
            .iter_mut()
            .filter(|r| r.status == Status::Abandoned && self.rewrite.contains(&r.run_id))
        {
            r.supersedes_abandoned = true;
        }
        self.evaluated.insert(name.clone());
        // The mark covers every live run of the job (`overlap: allow` runs several): it
        // is cleared only when none is left, and a claim beside live runs keeps the older.
        let others_live = c.rec.rt.live_runs() > usize::from(ev.claim.is_some());
        if recovering.is_some() && !others_live {
            c.mark = None;
        }
        let chain_end = recovering.as_ref().and_then(|lease| {
            landed_end
                .iter()
                .chain(&ev.rows)
                .find(|r| r.run_id == lease.run_id)
                .cloned()
        });
        if !ev.rows.is_empty() {
            if !self.scan.iter().any(|(n, _)| *n == name) {
                self.late.push((name.clone(), c.rows_to));
            }
            self.generated.push((name.clone(), ev.rows, after));
        }
        if let Some(p) = ev.claim {
            if !others_live || c.mark.is_none() {
                c.mark = Some(self.mark);
            }
            self.plans.push((name.clone(), p));
        }
        // The recovered run's end (its landed row, or the `abandoned` row written now)
        // reaches its `after:` children in this same persist, before its own record.
        if let Some(end) = chain_end {
            for child in l.chain_fan_out(&name, &end)? {
                if !self.changed.contains(&child) {
                    self.changed.push(child);
                }
            }
        }
        if ev.changed {
            self.changed.push(name);
        }
        Ok(())
    }

    /// Jobs with rows past the accounted mark that were not evaluated (not due, or run by this
    /// owner): their next slot moves past what those rows record, as a claim's would. Then the
    /// mark moves up to the first row no record accounts for now.
    fn account_tail(&mut self, l: &mut Locked<'_>) -> StoreResult<()> {
        let Some(tail) = &self.tail else {
            return Ok(());
        };
        let names: BTreeSet<&str> = tail.iter().map(|(_, r)| r.job.as_str()).collect();
        for name in names {
            if self.evaluated.contains(name) || !l.load(name)? {
                continue;
            }
            let Some(c) = l.inner.hot.get_mut(name) else {
                continue;
            };
            let Some(sched) = c.sched.clone() else {
                continue;
            };
            if plan::claim::skip_recorded(&mut c.rec, &sched, &self.tail_rows)
                && !self.changed.iter().any(|n| n == name)
            {
                self.changed.push(name.to_string());
            }
        }
        // The mark moves up to the first row no record accounts for now: one whose job
        // still has a slot it records ahead (it stays for the claims after this one).
        let unaccounted = tail
            .iter()
            .filter(|(_, r)| match l.inner.hot.get(&r.job) {
                Some(c) => c.sched.is_none() || !plan::claim::slots_behind(&c.rec, r),
                None => l.inner.jobs.contains_key(&r.job),
            })
            .map(|(at, _)| *at)
            .next();
        match unaccounted {
            None => l.inner.acct_clean = true,
            Some(at) => l.inner.acct_upto = Some(at),
        }
        Ok(())
    }

    /// The generated rows, less what already landed for their jobs (leftovers, this handle's
    /// failed writes, rows past the accounted mark).
    fn trim_generated(&mut self, l: &Locked<'_>) {
        for (name, ev_rows, after) in std::mem::take(&mut self.generated) {
            let known: Vec<HistoryRow> = self
                .unacked
                .iter()
                .chain(&after)
                .chain(&self.leftovers)
                .chain(self.tail_rows.iter())
                .filter(|r| r.job == name)
                .cloned()
                .collect();
            if known.is_empty() {
                self.rows.extend(ev_rows);
                continue;
            }
            // Rows trimmed or dropped here rely on the landed ones.
            self.relies = true;
            // On the grid the claim left the job on: a claim that put back a first slot (or
            // re-derived the job) moved its grid origin, and the cached schedule still has the
            // old one, whose slots lie off the grid the rows were decided on.
            let Some(sched) = l
                .inner
                .hot
                .get(&name)
                .and_then(|c| rules::slots::compile(&c.rec).ok())
            else {
                self.rows.extend(ev_rows);
                continue;
            };
            self.rows.extend(
                ev_rows
                    .into_iter()
                    .flat_map(|r| rules::rows::unlanded_part(r, &known, &sched)),
            );
        }
    }
}

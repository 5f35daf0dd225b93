//! Claims on the file store: due jobs evaluated in wake-up order under one lock hold, rows that
//! earlier writers left in history taken into account, and the claims, rows and records written
//! in one persist.
//!
//! Owns: `FileStore::claim`. Must not touch: what a claim decides for one job
//! (`plan::claim`), the files' formats.

use std::collections::{BTreeSet, HashMap, HashSet};

use uuid::Uuid;

use super::handle::FileStore;
use super::record::Mark;
use crate::model::HistoryRow;
use crate::store::{Claim, ClaimOutcome, ClaimRequest, StoreResult};
use crate::store::{plan, rules};

impl FileStore {
    /// Claim due jobs (see [`Store::claim_due`]).
    pub(super) fn claim(&self, req: &ClaimRequest<'_>) -> StoreResult<ClaimOutcome> {
        let now = req.now;
        let mut l = self.lock()?;
        let due: Vec<String> = l.inner.jobs.due(now);
        if due.is_empty() {
            return Ok(ClaimOutcome::default());
        }
        let in_flight: HashSet<&str> = req.in_flight.iter().map(String::as_str).collect();
        let period = l.period();
        // Rows a failed persist of this handle already wrote (a retried claim or recovery).
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
        let mut evaluated = HashSet::new();
        let mut rows = Vec::new();
        let mut changed = Vec::new();
        let mut plans = Vec::new();
        let mut late = Vec::new();
        let mut relies = false;
        // Generated rows per job, with the rows already known to have landed for it; the rows
        // are filtered once the scan for leftovers (`rows_since_records`) is done.
        let mut generated: Vec<(String, Vec<HistoryRow>, Vec<HistoryRow>)> = Vec::new();
        // Jobs whose step generates rows (a recovery, `missed`, overlap) are scanned for rows a
        // dead or failed writer left after their records (`rows_since_records`) before they
        // are evaluated: such a writer may have looked at a later clock, so its rows can
        // record the slot this step would claim or record next (`plan::claim::skip_recorded`). A
        // probe of the step on a copy of the record tells which jobs generate rows; jobs that
        // generate none are not scanned (see the module doc).
        let mut runs = HashMap::new();
        let mut scan = Vec::new();
        // Due jobs are evaluated in wake-up order until `limit` of them would start a run: the
        // rest stay due, untouched, for the next claim (the engine claims again as runs end).
        // Reading and parsing every due record on every claim cost a 10 000-job burst
        // ≈ 100 000 parses (a third of the engine's CPU). Jobs that only generate rows
        // (`missed`, overlap, a recovery without a new run) do not count against the limit;
        // with `limit` 0 every due job is evaluated, as a claim that starts nothing.
        let mut would_start = 0;
        for name in &due {
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
            let Some(c) = l.inner.hot.get(name) else {
                continue;
            };
            let Some(sched) = c.sched.as_ref() else {
                continue;
            };
            let mut probe = c.rec.clone();
            let ev = plan::claim::claim_step_recorded(
                &mut probe,
                sched,
                now,
                req.owner,
                true,
                period,
                landed.clone(),
                &[],
            );
            if !ev.rows.is_empty() {
                scan.push((name.clone(), c.rows_to));
            }
            would_start += usize::from(ev.claim.is_some());
            runs.insert(name.clone(), (landed, after));
        }
        // Rows an operation wrote before dying (or failing) ahead of these jobs' records.
        let mut leftovers = l.rows_since_records(&scan)?;
        for name in due {
            let Some((landed, after)) = runs.remove(&name) else {
                continue;
            };
            let Some(c) = l.inner.hot.get(&name) else {
                continue;
            };
            let Some(sched) = c.sched.clone() else {
                continue;
            };
            relies |= !landed.is_empty();
            let recorded: Vec<HistoryRow> = unacked
                .iter()
                .chain(&after)
                .chain(&leftovers)
                .chain(&tail_rows)
                .filter(|r| r.job == name && rules::rows::is_generated(r))
                .cloned()
                .collect();
            let can = plans.len() < req.limit;
            let Some(c) = l.inner.hot.get_mut(&name) else {
                continue;
            };
            let recovering = rules::runtime::expired_lease(&c.rec, now);
            let landed_end = landed.clone();
            let ev = plan::claim::claim_step_recorded(
                &mut c.rec, &sched, now, req.owner, can, period, landed, &recorded,
            );
            evaluated.insert(name.clone());
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
                if !scan.iter().any(|(n, _)| *n == name) {
                    late.push((name.clone(), c.rows_to));
                }
                generated.push((name.clone(), ev.rows, after));
            }
            if let Some(p) = ev.claim {
                if !others_live || c.mark.is_none() {
                    c.mark = Some(mark);
                }
                plans.push((name.clone(), p));
            }
            // The recovered run's end (its landed row, or the `abandoned` row written now)
            // reaches its `after:` children in this same persist, before its own record.
            if let Some(end) = chain_end {
                for child in l.chain_fan_out(&name, &end)? {
                    if !changed.contains(&child) {
                        changed.push(child);
                    }
                }
            }
            if ev.changed {
                changed.push(name);
            }
        }
        // Jobs with rows past the accounted mark that were not evaluated (not due, or run by
        // this owner): their next slot moves past what those rows record, as a claim's would.
        if let Some(tail) = &tail {
            let names: BTreeSet<&str> = tail.iter().map(|(_, r)| r.job.as_str()).collect();
            for name in names {
                if evaluated.contains(name) || !l.load(name)? {
                    continue;
                }
                let Some(c) = l.inner.hot.get_mut(name) else {
                    continue;
                };
                let Some(sched) = c.sched.clone() else {
                    continue;
                };
                if plan::claim::skip_recorded(&mut c.rec, &sched, &tail_rows)
                    && !changed.iter().any(|n| n == name)
                {
                    changed.push(name.to_string());
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
        }
        // A job the probe did not expect to generate rows: scanned now (its rows are trimmed).
        leftovers.extend(l.rows_since_records(&late)?);
        scan.extend(late);
        l.inner
            .rows_known
            .extend(scan.iter().map(|(name, _)| name.clone()));
        for (name, ev_rows, after) in generated {
            let known: Vec<HistoryRow> = unacked
                .iter()
                .chain(&after)
                .chain(&leftovers)
                .chain(tail_rows.iter())
                .filter(|r| r.job == name)
                .cloned()
                .collect();
            if known.is_empty() {
                rows.extend(ev_rows);
                continue;
            }
            // Rows trimmed or dropped here rely on the landed ones.
            relies = true;
            let Some(sched) = l.inner.hot.get(&name).and_then(|c| c.sched.clone()) else {
                rows.extend(ev_rows);
                continue;
            };
            rows.extend(
                ev_rows
                    .into_iter()
                    .flat_map(|r| rules::rows::unlanded_part(r, &known, &sched)),
            );
        }
        l.inner.relies_on_landed |= relies;
        l.persist(&rows, &changed)?;
        let claims = plans
            .into_iter()
            .filter_map(|(name, p)| {
                l.inner.hot.get(&name).map(|c| Claim {
                    run_id: p.run_id,
                    job: c.rec.clone(),
                    slot: p.slot,
                    trigger: p.trigger,
                    lease_until: p.lease_until,
                })
            })
            .collect();
        Ok(ClaimOutcome { claims, rows })
    }
}

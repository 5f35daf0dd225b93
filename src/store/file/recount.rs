//! The file store's budget recount at an edit of the budget's `period`, so the new period does
//! not start from $0 when money was spent inside it: each job holding money under a period of another kind gets its spend in the new
//! period from the history rows that finished inside it (`store::rules::period::recount`), once, at the
//! `apply` that makes the edit, under the store's lock and in the same write as the apply.
//!
//! Owns: the bounded backward read of history that sums those rows ([`Locked::booked_since`]).
//! Must not touch: the rule itself (`store::budget`: which rows count, what the counters become),
//! the history format (`history.rs`), the apply's diff (`jobs.rs`).
//!
//! Why backward and bounded: history is appended in the order rows are written, and a row is
//! written after it finished, so reading back from the end can stop at the first row that
//! finished [`rules::period::RECOUNT_SLACK_SECS`] before the period's start — a day → month edit reads
//! the month, never all of history (at 10 000 000 rows, reading all of it would stall the apply). Every row read is verified (its
//! checksum) like any query's.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Duration, Utc};
use serde::Deserialize;

use super::handle::Locked;
use super::layout::HISTORY_FILE;
use super::log::{corrupt, count_lines_before, json_err};
use super::segment::{Backwards, open_sealed};
use crate::cost::budget_period;
use crate::model::Settings;
use crate::store::filefmt;
use crate::store::io::IoFile;
use crate::store::rules;
use crate::store::{Recount, StoreResult};

/// The members of a history row the recount reads (serde skips the rest).
#[derive(Deserialize)]
struct Booked {
    job: String,
    run_id: uuid::Uuid,
    status: crate::model::Status,
    finished_at: DateTime<Utc>,
    #[serde(default)]
    cost_usd: f64,
    #[serde(default)]
    supersedes_abandoned: bool,
}

impl Locked<'_> {
    /// Recount the spend of every job whose counters hold money under a period of another kind
    /// than `settings`' at `now`; the jobs whose records changed are added to `changed` (the
    /// apply persists them with its own) and, with what was found, to `recounted` (the apply's
    /// report, sorted by job). Nothing to do — no history read — when the period's kind is
    /// unchanged.
    pub(super) fn recount_budget(
        &mut self,
        settings: &Settings,
        now: DateTime<Utc>,
        changed: &mut Vec<String>,
        recounted: &mut Vec<Recount>,
    ) -> StoreResult<()> {
        let period = budget_period(settings);
        let key = period.key(now);
        // From the index: only jobs that ever spent carry counters there.
        let due: Vec<String> = self
            .inner
            .jobs
            .iter()
            .filter(|(_, s)| {
                s.spend
                    .as_deref()
                    .is_some_and(|c| rules::period::needs_recount(c, &key))
            })
            .map(|(n, _)| n.to_string())
            .collect();
        if due.is_empty() {
            return Ok(());
        }
        let booked = match rules::period::period_start(period, now) {
            Some(start) => self.booked_since(start, &due)?,
            None => HashMap::new(),
        };
        let mut seen: HashSet<String> = changed.iter().cloned().collect();
        for name in due {
            self.load(&name)?;
            let Some(c) = self.inner.hot.get_mut(&name) else {
                continue;
            };
            let spent = booked.get(&name).copied().unwrap_or(0.0);
            if !rules::period::recount(&mut c.rec.rt.counters, &key, spent) {
                continue;
            }
            recounted.push(Recount {
                job: name.clone(),
                period: key.clone(),
                spent_usd: c.rec.rt.counters.period_cost_usd,
            });
            if seen.insert(name.clone()) {
                changed.push(name);
            }
        }
        recounted.sort_by(|a, b| a.job.cmp(&b.job));
        Ok(())
    }

    /// What each of `jobs` booked in the period that started at `start`: the sum of
    /// [`rules::period::booked_since`] over its rows, read newest first from the open segment down the
    /// sealed ones, stopping at the first row that finished [`rules::period::RECOUNT_SLACK_SECS`]
    /// before `start`.
    pub(super) fn booked_since(
        &self,
        start: DateTime<Utc>,
        jobs: &[String],
    ) -> StoreResult<HashMap<String, f64>> {
        let wanted: HashSet<&str> = jobs.iter().map(String::as_str).collect();
        let stop = start - Duration::seconds(rules::period::RECOUNT_SLACK_SECS);
        let mut sums: HashMap<String, f64> = HashMap::new();
        let mut superseded: HashSet<uuid::Uuid> = HashSet::new();
        let hpath = self.path(HISTORY_FILE);
        let top = self.inner.history_seg;
        let mut n = top;
        while n > 0 {
            let sealed;
            let (f, path, end): (&dyn IoFile, std::path::PathBuf, u64) =
                if n == top && !self.inner.history_sealed_open {
                    (
                        self.inner.history.file(&hpath)?,
                        hpath.clone(),
                        self.inner.history.len,
                    )
                } else {
                    match open_sealed(self.io(), &self.store.dir, n)? {
                        Some(s) => {
                            sealed = s;
                            (&*sealed.file, sealed.path.clone(), sealed.seal.bytes)
                        }
                        // Retention removed the older segments: nothing more to read.
                        None => break,
                    }
                };
            let mut it = Backwards::new(f, &path, end);
            while let Some((off, line)) = it.next_line()? {
                if off == 0 {
                    // Line 1 is the segment's header.
                    continue;
                }
                if let Err((col, what)) = filefmt::verify_row(&line) {
                    let no = count_lines_before(f, &path, off)? + 1;
                    return Err(corrupt(&path, no, col, what));
                }
                let row: Booked = match serde_json::from_slice(&line) {
                    Ok(r) => r,
                    Err(e) => {
                        let no = count_lines_before(f, &path, off)? + 1;
                        return Err(json_err(&path, no, &e));
                    }
                };
                if row.finished_at < stop {
                    return Ok(sums);
                }
                // A run's late end (or a fuller `abandoned` row) replaces its earlier
                // `abandoned` rows, appended before it and so read after it here, as every
                // query hides them: the run's cost is counted once, the newest row's.
                if row.status == crate::model::Status::Abandoned && superseded.contains(&row.run_id)
                {
                    continue;
                }
                if row.supersedes_abandoned {
                    superseded.insert(row.run_id);
                }
                let cost = rules::period::booked_since(row.finished_at, row.cost_usd, start);
                if cost > 0.0 && wanted.contains(row.job.as_str()) {
                    *sums.entry(row.job).or_insert(0.0) += cost;
                }
            }
            n -= 1;
        }
        Ok(sums)
    }
}

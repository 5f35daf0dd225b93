//! The jobs table's state: which jobs are visible (filtered, sorted), which one is selected, and
//! the schedule descriptions of the rows it may draw (cached here, filled after every change —
//! never while drawing).
//!
//! Owns: `visible`, `selected`, `sort` (and the orders `s` may pick), the description cache. Must not touch: other panes, the
//! store, the terminal.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::{Filters, SortKey, executions, period_spend};
use crate::schedule::ScheduleSpec;
use crate::snapshot::JobRow;
use crate::snapshot::Snapshot;

/// Rows around the selection (and from the top, for column widths) whose schedules are kept
/// described: more than any terminal shows.
const DESCRIBED_ROWS: usize = 200;

/// A cached schedule description: the spec and anchor it was made from, and the words.
type Described = (ScheduleSpec, DateTime<Utc>, String);

/// The jobs table's state.
#[derive(Debug)]
pub struct JobsTable {
    /// Index into [`JobsTable::visible`].
    pub(crate) selected: usize,
    /// Indices into `snap.jobs`, filtered and sorted.
    pub(crate) visible: Vec<usize>,
    pub(crate) sort: SortKey,
    /// The orders whose column is shown at the terminal's size (empty: every order): a narrow
    /// table drops columns, and an order by a column not shown reads as no order at all.
    pub(crate) sortable: Vec<SortKey>,
    /// Schedule descriptions by job, so a cron expression is not re-parsed every frame. Checked
    /// against the job's spec and anchor on every hit, so an edited job is described afresh.
    words: HashMap<String, Described>,
}

impl Default for JobsTable {
    fn default() -> Self {
        JobsTable::new()
    }
}

impl JobsTable {
    /// Nothing visible yet, sorted by name.
    pub fn new() -> JobsTable {
        JobsTable {
            selected: 0,
            visible: Vec::new(),
            sort: SortKey::Name,
            sortable: Vec::new(),
            words: HashMap::new(),
        }
    }

    /// `s`: the next order whose column is shown (NAME always is).
    pub fn next_sort(&mut self) {
        let mut k = self.sort.next();
        for _ in 0..SortKey::ALL.len() {
            if self.sortable.is_empty() || self.sortable.contains(&k) {
                break;
            }
            k = k.next();
        }
        self.sort = k;
    }

    /// The job under the cursor.
    pub fn selected_job<'a>(&self, snap: &'a Snapshot) -> Option<&'a JobRow> {
        self.visible
            .get(self.selected)
            .and_then(|&i| snap.jobs.get(i))
    }

    /// Recompute the visible job list, keeping the cursor on `keep` (or on the same job).
    pub fn rebuild(
        &mut self,
        snap: &Snapshot,
        filters: &Filters,
        period_key: &str,
        keep: Option<String>,
    ) {
        let keep = keep.or_else(|| self.selected_job(snap).map(|j| j.def.name.clone()));
        let needle = filters.name.to_lowercase();
        let jobs = &snap.jobs;
        let mut visible: Vec<usize> = (0..jobs.len())
            .filter(|&i| {
                let j = &jobs[i];
                (needle.is_empty() || j.def.name.to_lowercase().contains(&needle))
                    && filters.status.is_none_or(|st| j.rt.last_status == Some(st))
            })
            .collect();
        match self.sort {
            // `snap.jobs` is sorted by name already.
            SortKey::Name => {}
            SortKey::Next => {
                visible.sort_by_key(|&i| (jobs[i].rt.next_slot.is_none(), jobs[i].rt.next_slot))
            }
            SortKey::Last => visible.sort_by_key(|&i| std::cmp::Reverse(jobs[i].rt.last_run_at)),
            SortKey::Status => {
                visible.sort_by_key(|&i| (jobs[i].rt.last_status.is_none(), jobs[i].rt.last_status))
            }
            SortKey::Runs => visible.sort_by_key(|&i| std::cmp::Reverse(executions(&jobs[i]))),
            SortKey::Spend => visible.sort_by(|&a, &b| {
                period_spend(&jobs[b], period_key).total_cmp(&period_spend(&jobs[a], period_key))
            }),
        }
        self.visible = visible;
        self.selected = keep
            .and_then(|name| self.visible.iter().position(|&i| jobs[i].def.name == name))
            .unwrap_or(0)
            .min(self.visible.len().saturating_sub(1));
    }

    /// Describe the schedules of every row the table may draw (the first rows, whose widths
    /// size the columns, and the rows around the selection), reusing what is cached.
    pub fn describe_rows(&mut self, snap: &Snapshot) {
        let around = self.selected.saturating_sub(DESCRIBED_ROWS)..self.selected + DESCRIBED_ROWS;
        let rows = self.visible.iter().take(DESCRIBED_ROWS).chain(
            self.visible
                .get(around.start..around.end.min(self.visible.len()))
                .into_iter()
                .flatten(),
        );
        for &i in rows {
            let Some(j) = snap.jobs.get(i) else { continue };
            if self.cached(j).is_some() {
                continue;
            }
            if self.words.len() > 50_000 {
                self.words.clear();
            }
            self.words.insert(
                j.def.name.clone(),
                (j.def.schedule.clone(), j.rt.anchor, describe(j)),
            );
        }
    }

    fn cached(&self, j: &JobRow) -> Option<&str> {
        match self.words.get(&j.def.name) {
            Some((spec, anchor, words)) if *spec == j.def.schedule && *anchor == j.rt.anchor => {
                Some(words)
            }
            _ => None,
        }
    }

    /// The job's schedule in words (falls back to the text the operator wrote): cached when the
    /// row was described, else made now (and not kept: reading never changes state).
    pub fn words(&self, j: &JobRow) -> String {
        match self.cached(j) {
            Some(w) => w.to_string(),
            None => describe(j),
        }
    }
}

fn describe(j: &JobRow) -> String {
    match j.def.compile(j.rt.anchor) {
        Ok(c) => c.describe(),
        Err(_) => j.def.schedule_text.to_string(),
    }
}

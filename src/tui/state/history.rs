//! The History pane's state: its cursor, the `h` job restriction, rows that arrived as events
//! ahead of the next snapshot, rows loaded for one job, and the pages read from the store
//! beyond the snapshot's window.
//!
//! Owns: which history rows the pane shows and where its cursor is; when to ask the store for
//! the next page. Must not touch: the store (it returns a [`Query`]), other panes, the terminal.
//!
//! The cursor is anchored to a run, not to a screen row ([`Follow`]): rows arrive at the top
//! every few seconds, and a cursor that kept its index would slide onto another run between a
//! look and a keypress (then `R` would retry the wrong one). After a move it stays on its run
//! id wherever that row goes; `g` follows the newest row (the top, as rows arrive) and `G` the
//! oldest one held (the bottom).

use std::collections::{HashSet, VecDeque};

use super::{Filters, HISTORY_PAGE, PAGE, Query};
use crate::model::{HistoryRow, Status};
use crate::snapshot::Snapshot;

/// History rows kept from events until a snapshot includes them.
pub(crate) const LIVE_ROWS_MAX: usize = 500;
/// At most this many rows of the snapshot window are scanned per frame when filtering it
/// (the snapshot promises at most `RECENT_ROWS`; older rows come from the store on demand), so a
/// frame's cost stays bounded whatever a snapshot carries.
pub(crate) const SCAN_MAX: usize = crate::snapshot::RECENT_ROWS + LIVE_ROWS_MAX;

/// What the History cursor stays on as rows come and go.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Follow {
    /// The newest row: the top, whatever arrives (`g`, and the start).
    #[default]
    Newest,
    /// The oldest row held: the bottom (`G`).
    Oldest,
    /// This run, wherever its row moves (any other move puts the cursor on a run).
    Run(uuid::Uuid),
}

/// The History pane's state.
#[derive(Debug, Default)]
pub struct HistoryPane {
    /// The cursor (index into [`HistoryPane::rows`]), kept on [`HistoryPane::follow`] by
    /// [`HistoryPane::relocate`].
    pub(crate) sel: usize,
    /// What the cursor stays on.
    pub(crate) follow: Follow,
    /// The pane restricted to this job (`h`).
    pub(crate) job: Option<String>,
    /// Rows paged in from the store beyond the snapshot window, newest first.
    pub(crate) more: Vec<HistoryRow>,
    /// The store had no more rows for the current filters.
    pub(crate) done: bool,
    /// A page request is out.
    pub(crate) loading: bool,
    /// Rows from events newer than the snapshot, newest first.
    pub(crate) live: VecDeque<HistoryRow>,
    /// Rows loaded for one job (detail, `h`), newest first.
    pub(crate) job_rows: Option<(String, Vec<HistoryRow>)>,
    /// The store's token for the page after the last one in [`HistoryPane::more`]: the next
    /// page continues from it (a keyset read, cheap at any depth, filtered or not) instead of
    /// by offset. Cleared with the pages when the filters change, so it always belongs to this
    /// pane's current job and status filters (it used to be a process-wide memo keyed by the
    /// reader's address).
    pub(crate) next_token: Option<String>,
}

impl HistoryPane {
    /// The rows held without asking the store: live events, then the snapshot's window.
    pub fn window<'a>(&'a self, snap: &'a Snapshot) -> impl Iterator<Item = &'a HistoryRow> + 'a {
        // Live rows are few (≤ LIVE_ROWS_MAX) and usually none: dedupe by run id against them.
        let live_ids: HashSet<uuid::Uuid> = self.live.iter().map(|r| r.run_id).collect();
        self.live
            .iter()
            .chain(
                snap.recent
                    .iter()
                    .filter(move |r| live_ids.is_empty() || !live_ids.contains(&r.run_id)),
            )
            .take(SCAN_MAX)
    }

    /// Rows held without paging that match the store-side filters (status, job).
    fn base<'a>(
        &'a self,
        snap: &'a Snapshot,
        status: Option<Status>,
    ) -> impl Iterator<Item = &'a HistoryRow> + 'a {
        let loaded = match (&self.job, &self.job_rows) {
            (Some(h), Some((j, rows))) if h == j => Some(rows),
            _ => None,
        };
        let base: Box<dyn Iterator<Item = &HistoryRow>> = match loaded {
            Some(rows) => Box::new(rows.iter()),
            None => Box::new(self.window(snap)),
        };
        base.filter(move |r| {
            status.is_none_or(|s| r.status == s) && self.job.as_ref().is_none_or(|j| &r.job == j)
        })
    }

    /// How many rows matching the store-side filters are held (the next page's offset).
    fn held(&self, snap: &Snapshot, status: Option<Status>) -> usize {
        self.base(snap, status).count() + self.more.len()
    }

    /// History rows for the pane, newest first, with the status, job and name filters.
    pub fn rows<'a>(
        &'a self,
        snap: &'a Snapshot,
        filters: &'a Filters,
    ) -> impl Iterator<Item = &'a HistoryRow> + 'a {
        let needle = filters.name.to_lowercase();
        self.base(snap, filters.status)
            .chain(self.more.iter())
            .filter(move |r| needle.is_empty() || r.job.to_lowercase().contains(&needle))
    }

    /// The run under the cursor.
    pub fn selected<'a>(
        &'a self,
        snap: &'a Snapshot,
        filters: &'a Filters,
    ) -> Option<&'a HistoryRow> {
        self.rows(snap, filters).nth(self.sel)
    }

    /// The last runs of one job: loaded rows when we have them, else the snapshot's window.
    pub fn runs_of<'a>(
        &'a self,
        snap: &'a Snapshot,
        job: &'a str,
    ) -> Box<dyn Iterator<Item = &'a HistoryRow> + 'a> {
        match &self.job_rows {
            Some((j, rows)) if j == job => Box::new(rows.iter()),
            _ => Box::new(self.window(snap).filter(move |r| r.job == job)),
        }
    }

    /// Forget paged rows (the filters changed): the cursor goes back to the newest row.
    pub fn reset_pages(&mut self) {
        self.more.clear();
        self.next_token = None;
        self.done = false;
        self.loading = false;
        self.sel = 0;
        self.follow = Follow::Newest;
    }

    /// Put the cursor on row `index` (clamped) and anchor it to that row's run.
    pub fn select(&mut self, snap: &Snapshot, filters: &Filters, index: usize) {
        let len = self.rows(snap, filters).count();
        self.sel = index.min(len.saturating_sub(1));
        let at = self.rows(snap, filters).nth(self.sel).map(|r| r.run_id);
        self.follow = at.map_or(Follow::Newest, Follow::Run);
    }

    /// Follow the newest row (`g`) or the oldest one held (`G`).
    pub fn follow_end(&mut self, snap: &Snapshot, filters: &Filters, oldest: bool) {
        self.follow = if oldest {
            Follow::Oldest
        } else {
            Follow::Newest
        };
        self.relocate(snap, filters);
    }

    /// Rows came or went (an event, a snapshot, a page, a filter): move the index to where the
    /// followed row is now. A followed run no longer shown (filtered out, or dropped from the
    /// window) leaves the cursor where it was, clamped, still anchored to the run.
    pub fn relocate(&mut self, snap: &Snapshot, filters: &Filters) {
        let len = self.rows(snap, filters).count();
        self.sel = match self.follow {
            Follow::Newest => 0,
            Follow::Oldest => len.saturating_sub(1),
            Follow::Run(id) => self
                .rows(snap, filters)
                .position(|r| r.run_id == id)
                .unwrap_or(self.sel.min(len.saturating_sub(1))),
        };
    }

    /// The next page to ask for when the cursor is near the end of what is held.
    pub fn page_wanted(&mut self, snap: &Snapshot, filters: &Filters) -> Option<Query> {
        if self.done || self.loading {
            return None;
        }
        let len = self.rows(snap, filters).count();
        if self.sel + PAGE * 2 < len {
            return None;
        }
        self.loading = true;
        Some(Query::HistoryPage {
            job: self.job.clone(),
            status: filters.status,
            offset: self.held(snap, filters.status),
            token: self.next_token.clone(),
        })
    }

    /// A page arrived (dropped when the filters changed since it was asked for).
    pub fn on_page(
        &mut self,
        snap: &Snapshot,
        status: Option<Status>,
        offset: usize,
        rows: Vec<HistoryRow>,
        next: Option<String>,
    ) {
        self.loading = false;
        if offset != self.held(snap, status) {
            return; // filters changed meanwhile: a stale page
        }
        self.done = rows.len() < HISTORY_PAGE;
        self.next_token = next;
        let held: HashSet<uuid::Uuid> = self.base(snap, status).map(|r| r.run_id).collect();
        self.more
            .extend(rows.into_iter().filter(|r| !held.contains(&r.run_id)));
    }

    /// A row arrived as an event: shown at once unless the snapshot already holds it.
    pub fn on_row(&mut self, snap: &Snapshot, row: HistoryRow) {
        if let Some((job, rows)) = &mut self.job_rows
            && *job == row.job
        {
            rows.insert(0, row.clone());
        }
        // Already in the snapshot (the event came after it): shown once, from there.
        let known = snap
            .recent
            .iter()
            .take(LIVE_ROWS_MAX * 4)
            .any(|r| r.run_id == row.run_id)
            || self.live.iter().any(|r| r.run_id == row.run_id);
        if !known {
            self.live.push_front(row);
            self.live.truncate(LIVE_ROWS_MAX);
        }
    }

    /// A new snapshot: drop the live rows it now holds.
    pub fn on_snapshot(&mut self, snap: &Snapshot) {
        if !self.live.is_empty() {
            let ids: HashSet<uuid::Uuid> = snap
                .recent
                .iter()
                .take(LIVE_ROWS_MAX * 4)
                .map(|r| r.run_id)
                .collect();
            self.live.retain(|r| !ids.contains(&r.run_id));
        }
    }
}

//! The full-body views' state (job detail, diff viewer, one run): how far they are scrolled, how
//! far they can scroll, and the monitor diffs loaded for one job with the one shown.
//!
//! Owns: scroll and diff position. Must not touch: which view is open (`App::mode`), the store,
//! the terminal. The largest useful scroll is measured by the event loop before each frame from
//! the view's content ([`crate::tui::view::scroll_max`]) and handed in with
//! [`Viewer::set_scroll_max`]; drawing never writes here.

use crate::model::HistoryRow;

/// The full-body views' state.
#[derive(Debug)]
pub struct Viewer {
    /// Scroll of the detail, diff or run view.
    pub(crate) scroll: usize,
    /// The largest useful `scroll` for the open view at the current size, so `G` then `k` moves
    /// at once.
    pub(crate) scroll_max: usize,
    /// Diff rows loaded for one job, newest first.
    pub(crate) diff_rows: Option<(String, Vec<HistoryRow>)>,
    /// 0 = newest diff.
    pub(crate) diff_index: usize,
}

impl Default for Viewer {
    fn default() -> Self {
        Viewer {
            scroll: 0,
            scroll_max: usize::MAX / 2,
            diff_rows: None,
            diff_index: 0,
        }
    }
}

impl Viewer {
    /// Move by `delta` lines, or to the top (`Some(false)`) / bottom (`Some(true)`).
    pub fn scroll_by(&mut self, delta: isize, to_end: Option<bool>) {
        let max = self.scroll_max;
        self.scroll = match to_end {
            Some(false) => 0,
            Some(true) => max,
            None => self.scroll.min(max).saturating_add_signed(delta).min(max),
        };
    }

    /// How far the open view can scroll (measured by the event loop).
    pub fn set_scroll_max(&mut self, max: usize) {
        self.scroll_max = max;
    }

    /// A view was opened or left: back to its top.
    pub fn reset_scroll(&mut self) {
        self.scroll = 0;
    }

    /// The diff viewer opened: newest diff, top.
    pub fn open_diffs(&mut self) {
        self.diff_index = 0;
        self.scroll = 0;
    }

    /// Diffs loaded for `job` from the store.
    pub fn on_diffs(&mut self, job: String, rows: Vec<HistoryRow>) {
        self.diff_index = self.diff_index.min(rows.len().saturating_sub(1));
        self.diff_rows = Some((job, rows));
    }

    /// The loaded diffs of `job`, if they are the ones held.
    pub fn loaded_diffs(&self, job: &str) -> Option<&[HistoryRow]> {
        match &self.diff_rows {
            Some((j, rows)) if j == job => Some(rows),
            _ => None,
        }
    }

    /// Walk to an older (`true`) or newer diff among `n`.
    pub fn step_diff(&mut self, older: bool, n: usize) {
        self.diff_index = if older {
            (self.diff_index + 1).min(n.saturating_sub(1))
        } else {
            self.diff_index.saturating_sub(1)
        };
        self.scroll = 0;
    }

    /// A row arrived as an event: a new diff of the loaded job goes first, and the diff shown
    /// stays the same.
    pub fn on_row(&mut self, row: &HistoryRow) {
        if row.diff.is_some()
            && let Some((job, rows)) = &mut self.diff_rows
            && *job == row.job
        {
            rows.insert(0, row.clone());
            if self.diff_index > 0 {
                // Keep showing the same diff while a newer one arrives.
                self.diff_index += 1;
            }
        }
    }
}

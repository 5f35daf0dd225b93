//! Console state: what is selected, filtered, sorted, open and pending — pure data, no terminal.
//! Keys come in as [`KeyEvent`]s and go out as an [`Action`] value (tokio-console style), so every
//! binding is testable without a terminal, and the event loop in `tui/mod.rs` performs the effect
//! (send a [`Command`], start a read-only store query, quit).
//!
//! State per component, as gitui does: [`App`] holds the snapshot, the clock, which view and
//! pane are in front and the filters they share, and one state per component, each owning its
//! fields and the handling of the keys and messages that concern it — the jobs table
//! ([`JobsTable`]: visible jobs, selection, sort, schedule words), the leases pane
//! ([`LeasesPane`]), the History pane ([`HistoryPane`]: cursor, `h` job, live rows, store
//! pages), the full-body views ([`Viewer`]: scroll, diffs), the dialogs ([`Dialogs`]: confirm,
//! name prompt, help) and the optimistic marks ([`Optimistic`]). Views render from this state
//! and never change it: nothing here is a `Cell`; what a view alone could measure (how far the
//! open view scrolls) the event loop measures before the frame and hands in.
//!
//! Owns: the console's state and key → [`Action`] decisions. Must not touch: the store (it asks
//! for queries through [`Action::Load`]), the terminal, the clock (the loop writes `now` before
//! each frame).
//!
//! Decisions:
//! - `f` filters both the jobs table (by each job's *last* status) and the history stream.
//! - `/` filters live while typing; `Enter` keeps the filter and puts the selection on the first
//!   match; `Esc` (in the prompt or on the main screen) clears it.
//! - `t` on a job that is running says so and asks nothing (the engine would refuse anyway).
//! - With the leases pane focused, `p`/`t`/`d`/`h`/`Enter` act on the selected lease's job, so
//!   a stuck or foreign lease can be inspected where it is seen.
//! - An optimistic "pausing…/resuming…/triggering…" mark is dropped when a snapshot confirms it,
//!   or after [`PENDING_TIMEOUT_SECS`] with a notice, so a lost command cannot leave a stale mark.
//! - The History pane has a cursor (Tab gives it the focus). Enter there opens that run; `R`
//!   retries it; `/` and `f` filter it too. Moving near the end of what is held asks the store
//!   for the next page ([`HISTORY_PAGE`] rows, by offset), so the whole history can be walked
//!   while only the pages visited are in memory.
//! - A row is shown once even when it arrives both as an event and in a snapshot (dedupe by
//!   run id), e.g. a manual run seen by `console --attach`.
//! - RUNS counts every execution (succeeded, no_change, failed, abandoned rows: any trigger), the same
//!   count under the same name in `jobs`, `stats` and `describe`; `max_runs` progress is shown
//!   apart, as `n/max`.

use std::collections::HashSet;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use crate::engine::{Command, Event};
use crate::model::{HistoryRow, JobRecord, Status};
use crate::snapshot::{JobRow, PendingOp, Snapshot};
use crate::tui::keymap::{self, Cmd, Scope};

pub mod alerts;
mod derived;
mod dialog;
mod history;
mod jobs;
mod ops;
mod viewer;

pub(crate) use derived::{Derived, top_spenders};
pub use dialog::{Answer, Dialogs, Prompt, Typed};
pub use history::HistoryPane;
pub use jobs::JobsTable;
pub use ops::{BulkOp, Optimistic};
pub use viewer::Viewer;

/// How long an unconfirmed pause/resume/trigger keeps its mark.
pub const PENDING_TIMEOUT_SECS: i64 = 10;
/// Rows moved by PgUp/PgDn.
const PAGE: usize = 10;
/// History rows asked from the store per page when the cursor walks past what is held.
pub const HISTORY_PAGE: usize = 500;

/// What the event loop should do after a key or message.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Nothing changed.
    None,
    /// State changed: draw again.
    Redraw,
    /// Send this command to the engine (pause, trigger, retry, …).
    Send(Command),
    /// Several commands at once (pause/resume of the filtered jobs).
    SendAll(Vec<Command>),
    /// Start a read-only store query; its answer comes back through [`App::on_loaded`].
    Load(Query),
    /// Leave the console (restore the terminal).
    Quit,
}

/// Reads beyond the snapshot's `recent` window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Query {
    /// The job's last rows (detail view and `h`).
    JobHistory(String),
    /// The job's rows carrying a monitor diff, newest first.
    Diffs(String),
    /// The next page of the history pane: rows after the first `offset` matching ones.
    HistoryPage {
        /// Only this job's rows (`h` on a job); `None` = every job.
        job: Option<String>,
        /// Only rows with this status (the `f` filter).
        status: Option<Status>,
        /// How many matching rows the pane already holds.
        offset: usize,
        /// The store's token for the page starting at `offset` (the previous page's
        /// [`crate::store::HistoryPage::next`]), when the pane holds one: a keyset read, cheap at
        /// any depth. `None` reads by offset.
        token: Option<String>,
    },
    /// `cronsole dry-run NAME` (not a store read: the console's runner answers it).
    DryRun(String),
    /// One job's whole record (the detail view; the snapshot holds table rows only).
    Job(String),
}

/// The answer to a [`Query`].
#[derive(Debug, Clone)]
pub enum Loaded {
    /// The rows asked by [`Query::JobHistory`].
    JobHistory {
        /// The job they belong to.
        job: String,
        /// Its newest rows, newest first.
        rows: Vec<HistoryRow>,
    },
    /// The rows asked by [`Query::Diffs`].
    Diffs {
        /// The job they belong to.
        job: String,
        /// Its rows that carry a diff, newest first.
        rows: Vec<HistoryRow>,
    },
    /// The page asked by [`Query::HistoryPage`].
    HistoryPage {
        /// The `offset` the page was asked at (a page for a stale offset is dropped).
        offset: usize,
        /// The page's rows, newest first.
        rows: Vec<HistoryRow>,
        /// The store's token for the page after this one.
        next: Option<String>,
    },
    /// The dry run's text, or why there is none.
    DryRun {
        /// The job that was dry-run.
        job: String,
        /// The text, or the error that prevented it.
        text: Result<String, String>,
    },
    /// The record asked by [`Query::Job`]: `None` when no job has that name any more.
    Job {
        /// The job asked for.
        job: String,
        /// Its record.
        record: Option<Box<JobRecord>>,
    },
    /// The read failed; the text is shown on the notice line.
    Failed(String),
}

/// Which screen the console shows.
#[derive(Debug, Clone, PartialEq)]
pub enum Mode {
    /// The dashboard: jobs table, leases and history panes.
    Main,
    /// One job's detail (definition, state, its latest runs).
    Detail(String),
    /// One job's monitor diff viewer.
    Diff(String),
    /// One run, opened from the History pane.
    Run(Box<HistoryRow>),
    /// The dry run of one job (`D`).
    DryRun(String),
}

/// The pane of the main screen that has the cursor (Tab cycles them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pane {
    /// The jobs table.
    Jobs,
    /// The live leases.
    Leases,
    /// The history stream.
    History,
}

/// The jobs table's sort order (`s` cycles it; the header shows its label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    /// By job name.
    Name,
    /// By next slot, soonest first (jobs without one last).
    Next,
    /// By last run, newest first.
    Last,
    /// By last status (jobs that never ran last).
    Status,
    /// By executions (the RUNS column), most first.
    Runs,
    /// By spend in the current budget period, highest first.
    Spend,
}

impl SortKey {
    /// Every order, in the order `s` cycles through them.
    pub const ALL: [SortKey; 6] = [
        SortKey::Name,
        SortKey::Next,
        SortKey::Last,
        SortKey::Status,
        SortKey::Runs,
        SortKey::Spend,
    ];

    /// The order `s` moves to from this one.
    pub fn next(self) -> SortKey {
        match self {
            SortKey::Name => SortKey::Next,
            SortKey::Next => SortKey::Last,
            SortKey::Last => SortKey::Status,
            SortKey::Status => SortKey::Runs,
            SortKey::Runs => SortKey::Spend,
            SortKey::Spend => SortKey::Name,
        }
    }
    /// The column name shown in the jobs table's header.
    pub fn label(self) -> &'static str {
        match self {
            SortKey::Name => "NAME",
            SortKey::Next => "NEXT",
            SortKey::Last => "LAST",
            SortKey::Status => "STATUS",
            SortKey::Runs => "RUNS",
            SortKey::Spend => "SPEND",
        }
    }
}

/// The filters shared by the jobs table and the History pane (`/` and `f`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Filters {
    /// Job name substring, case-insensitive.
    pub name: String,
    /// Jobs by last status; history rows by status.
    pub status: Option<Status>,
}

/// The leases pane's state: its cursor.
#[derive(Debug, Default)]
pub struct LeasesPane {
    pub(crate) sel: usize,
}

/// Every execution of the job (succeeded, no_change, failed, abandoned rows, any trigger): the RUNS count
/// of the console, `jobs` and `stats`.
pub(crate) fn executions(j: &JobRow) -> u64 {
    j.rt.counters.executions
}

/// Spend of one job in the budget period `key`, by the rule the store's budget, `jobs` and
/// `stats` count it with ([`crate::store::rules::period::counter_spend`]): 0 when its counters are
/// from an older period of the same kind; after an edit of the budget's `period`, the spend its
/// counters kept under the old kind when that period shares time with `key`'s (so it does not
/// show $0 there), the all-time spend under `total`.
pub(crate) fn period_spend(j: &JobRow, key: &str) -> f64 {
    let c = &j.rt.counters;
    crate::store::rules::period::spend_in(&c.period_key, c.period_cost_usd, c.total_cost_usd, key)
}

/// The whole console state: the snapshot and clock every component reads, which view and pane
/// are in front, the shared filters, and one state per component (gitui-style), each owning its
/// own fields and the handling of the keys and messages that concern it. Views read it
/// (`impl Widget for &App`) and never change it; only keys and messages do.
#[derive(Debug)]
pub struct App {
    /// Replaced by [`App::on_snapshot`], which derives [`App::derived`] from it again (a test
    /// that edits it in place calls [`App::rederive`]).
    pub(crate) snap: Arc<Snapshot>,
    pub(crate) now: DateTime<Utc>,
    /// Key of the current budget period (see [`App::set_now`]).
    pub(crate) period_key: String,
    pub(crate) mode: Mode,
    pub(crate) pane: Pane,
    pub(crate) filters: Filters,
    pub(crate) jobs: JobsTable,
    pub(crate) leases: LeasesPane,
    pub(crate) history: HistoryPane,
    pub(crate) viewer: Viewer,
    pub(crate) dialog: Dialogs,
    pub(crate) ops: Optimistic,
    /// One line of news: command outcomes, engine notices, load errors.
    pub(crate) notice: Option<String>,
    /// The last dry run asked for (`D`): job and text, `None` while it runs.
    pub(crate) dry_run: Option<(String, Result<String, String>)>,
    /// The whole record of the job the detail view shows, read from the store on demand: the
    /// job's name and its record (`None`: not in the store).
    pub(crate) record: Option<(String, Option<Box<JobRecord>>)>,
    /// The job and snapshot instant the last [`Query::Job`] was asked for (one read per
    /// snapshot while the detail view is open).
    record_asked: Option<(String, DateTime<Utc>)>,
    /// This process's engine's view of its store (default without an engine).
    pub(crate) store_health: crate::engine::EngineHealth,
    /// Lasting header alerts ([`alerts::missing_keys`]), set by the event loop from each
    /// snapshot.
    pub(crate) key_alerts: Vec<(String, String)>,
    /// What the main screen reads across every job, derived from `snap` in the period
    /// `period_key`, so a redraw with nothing changed walks no job it does not show.
    pub(crate) derived: Derived,
}

impl App {
    /// The console's state over a first snapshot, at `now`, on the main screen.
    pub fn new(snap: Arc<Snapshot>, now: DateTime<Utc>) -> App {
        let mut app = App {
            snap,
            now,
            period_key: String::new(),
            mode: Mode::Main,
            pane: Pane::Jobs,
            filters: Filters::default(),
            jobs: JobsTable::new(),
            leases: LeasesPane::default(),
            history: HistoryPane::default(),
            viewer: Viewer::default(),
            dialog: Dialogs::new(),
            ops: Optimistic::default(),
            notice: None,
            dry_run: None,
            record: None,
            record_asked: None,
            store_health: Default::default(),
            key_alerts: Vec::new(),
            derived: Derived::default(),
        };
        app.rederive();
        app.rebuild(None);
        app
    }

    /// The console's clock.
    pub fn now(&self) -> DateTime<Utc> {
        self.now
    }

    /// The job the History pane is restricted to (`h`), if any.
    pub fn history_job(&self) -> Option<&str> {
        self.history.job.as_deref()
    }

    /// The notice line, if any.
    pub fn notice(&self) -> Option<&str> {
        self.notice.as_deref()
    }

    /// The read the open view needs and has not asked for since the last snapshot: the detail
    /// view's whole record, read from the store when it opens and once per snapshot after.
    pub fn record_wanted(&mut self) -> Option<Query> {
        let Mode::Detail(name) = &self.mode else {
            return None;
        };
        let key = (name.clone(), self.snap.taken_at);
        if self.record_asked.as_ref() == Some(&key) {
            return None;
        }
        self.record_asked = Some(key);
        Some(Query::Job(name.clone()))
    }

    /// The whole record of `job` for the detail view: `None` while it is being read,
    /// `Some(None)` when the store has no such job.
    pub fn record(&self, job: &str) -> Option<Option<&JobRecord>> {
        match &self.record {
            Some((name, rec)) if name == job => Some(rec.as_deref()),
            _ => None,
        }
    }

    /// The job under the jobs table's cursor.
    pub fn selected_job(&self) -> Option<&JobRow> {
        self.jobs.selected_job(&self.snap)
    }

    /// The job a key acts on: the selected lease's job when the leases pane has the focus (so a
    /// stuck or foreign lease can be inspected and acted on), else the table's selected job.
    pub fn target_job(&self) -> Option<&JobRow> {
        match self.pane {
            Pane::Leases => self.leases().get(self.leases.sel).copied(),
            Pane::History => {
                let name = self.selected_run()?.job.clone();
                self.job(&name)
            }
            Pane::Jobs => self.selected_job(),
        }
    }

    fn job(&self, name: &str) -> Option<&JobRow> {
        job_in(&self.snap, name)
    }

    /// The pending op for `job`: ours first, then the engine's.
    pub fn pending_op(&self, job: &str) -> Option<PendingOp> {
        self.ops.op(&self.snap, job)
    }

    /// The job's schedule in words (falls back to the text the operator wrote).
    pub fn schedule_words(&self, j: &JobRow) -> String {
        self.jobs.words(j)
    }

    /// Move the console's clock (before each frame); keeps the budget period key current.
    pub fn set_now(&mut self, now: DateTime<Utc>) {
        self.now = now;
        if self.refresh_period_key() {
            self.derived.respend(&self.snap, &self.period_key);
        }
    }

    /// The largest useful scroll of the open full-body view, measured by the event loop before
    /// each frame (`crate::tui::view::scroll_max`).
    pub fn set_scroll_max(&mut self, max: usize) {
        self.viewer.set_scroll_max(max);
    }

    /// The sort orders whose column the jobs table shows at this size, measured by the event
    /// loop before each frame (`crate::tui::view::sort_keys`): `s` cycles through these only.
    pub fn set_sortable(&mut self, keys: Vec<SortKey>) {
        self.jobs.sortable = keys;
    }

    /// Whether the budget period's key changed.
    fn refresh_period_key(&mut self) -> bool {
        let period = crate::cost::budget_period(&self.snap.settings);
        let key = period.key(self.now);
        let changed = key != self.period_key;
        self.period_key = key;
        changed
    }

    /// Derive the whole-store tables ([`App::derived`]) from the snapshot held, and the budget
    /// period's key with them.
    pub(crate) fn rederive(&mut self) {
        self.refresh_period_key();
        self.derived = Derived::of(&self.snap, &self.period_key);
    }

    /// Spend of one job in the current budget period (0 when its counters are from an older
    /// period). Cheap: the period key is computed once per frame, not per job.
    pub fn job_period_spend(&self, j: &JobRow) -> f64 {
        period_spend(j, &self.period_key)
    }

    /// Recompute the visible job list, keeping the cursor on `keep` (or on the same job).
    fn rebuild(&mut self, keep: Option<String>) {
        self.jobs
            .rebuild(&self.snap, &self.filters, &self.period_key, keep);
        self.jobs.describe_rows(&self.snap);
    }

    /// A new snapshot arrived: confirm pending ops, drop live rows it now contains, refilter.
    pub fn on_snapshot(&mut self, snap: Arc<Snapshot>) {
        // Incidents that opened (alerted) or closed (recovered) since the last snapshot: said in
        // the notice line, whoever's engine ran the job (the mark column keeps showing `!`).
        let alerted = |s: &Snapshot| -> HashSet<String> {
            s.jobs
                .iter()
                .filter(|j| j.rt.alerted)
                .map(|j| j.def.name.clone())
                .collect()
        };
        let (before, after) = (alerted(&self.snap), alerted(&snap));
        let opened: Vec<&String> = after.difference(&before).collect();
        let closed: Vec<&String> = before
            .difference(&after)
            .filter(|n| snap.job(n).is_some())
            .collect();
        if let Some(j) = opened.first() {
            self.notice = Some(format!("ALERT: {j} is failing (incident open)"));
        } else if let Some(j) = closed.first() {
            self.notice = Some(format!("recovered: {j}"));
        }
        self.snap = snap;
        self.rederive();
        let snap = &self.snap;
        self.ops.on_snapshot(|name| job_in(snap, name));
        self.close_bulk();
        self.history.on_snapshot(&self.snap);
        self.history.relocate(&self.snap, &self.filters);
        self.rebuild(None);
        self.leases.sel = self.leases.sel.min(self.leases().len().saturating_sub(1));
    }

    /// Time moved: expire pending marks nobody confirmed.
    pub fn on_tick(&mut self, now: DateTime<Utc>) {
        self.set_now(now);
        for name in self.ops.expire(now) {
            self.notice = Some(format!("{name}: not confirmed by the store yet"));
        }
        self.close_bulk();
    }

    /// Apply an engine event: a finished row, a notice, a run start or a delivery.
    pub fn on_event(&mut self, ev: Event) {
        match ev {
            Event::Row(row) => {
                self.ops.on_row(&row);
                self.viewer.on_row(&row);
                self.history.on_row(&self.snap, row);
                self.history.relocate(&self.snap, &self.filters);
            }
            Event::Notice(text) => self.notice = Some(text),
            Event::RunStarted { job, .. } => {
                self.ops.started.insert(job);
            }
            Event::Delivered { job, sink, text } => {
                // Alerts and recovery notes reach the console too, not only sinks (results are
                // too frequent for the one notice line; they are in the history rows). The
                // prefixes are `deliver::Message::alert`/`recovery`'s.
                let first = text.lines().next().unwrap_or("");
                if first.starts_with("ALERT:") || first.starts_with("RECOVERED:") {
                    self.notice = Some(format!("{first} (→ {sink}; job {job})"));
                }
            }
        }
    }

    /// Apply the answer to a [`Query`] the event loop ran.
    pub fn on_loaded(&mut self, loaded: Loaded) {
        match loaded {
            Loaded::JobHistory { job, rows } => {
                self.history.job_rows = Some((job, rows));
                self.history.relocate(&self.snap, &self.filters);
            }
            Loaded::Diffs { job, rows } => self.viewer.on_diffs(job, rows),
            Loaded::HistoryPage { offset, rows, next } => {
                self.history
                    .on_page(&self.snap, self.filters.status, offset, rows, next);
                self.history.relocate(&self.snap, &self.filters);
            }
            Loaded::DryRun { job, text } => self.dry_run = Some((job, text)),
            Loaded::Job { job, record } => self.record = Some((job, record)),
            Loaded::Failed(e) => {
                self.history.loading = false;
                self.notice = Some(e);
            }
        }
    }

    /// The run under the history cursor.
    pub fn selected_run(&self) -> Option<&HistoryRow> {
        self.history.selected(&self.snap, &self.filters)
    }

    /// Every execution of the job (succeeded, no_change, failed, abandoned rows, any trigger): the RUNS
    /// column.
    pub fn executions(j: &JobRow) -> u64 {
        executions(j)
    }

    /// History rows for the history pane, newest first, with the status and job filters.
    pub fn history_rows(&self) -> impl Iterator<Item = &HistoryRow> + '_ {
        self.history.rows(&self.snap, &self.filters)
    }

    /// The last runs of one job: loaded rows when we have them, else the snapshot's window.
    pub fn runs_of<'a>(&'a self, job: &'a str) -> Box<dyn Iterator<Item = &'a HistoryRow> + 'a> {
        self.history.runs_of(&self.snap, job)
    }

    /// Diff rows of one job, newest first.
    pub fn diffs_of(&self, job: &str) -> Vec<&HistoryRow> {
        match self.viewer.loaded_diffs(job) {
            Some(rows) => rows.iter().collect(),
            None => self
                .history
                .window(&self.snap)
                .filter(|r| r.job == job && r.diff.is_some())
                .collect(),
        }
    }

    /// Jobs holding a lease, in name order.
    pub fn leases(&self) -> Vec<&JobRow> {
        self.derived
            .leased
            .iter()
            .filter_map(|&i| self.snap.jobs.get(i))
            .collect()
    }

    fn scope(&self) -> Scope {
        match (self.dialog.scope(), &self.mode) {
            (Some(s), _) => s,
            (None, Mode::Diff(_)) => Scope::Diff,
            (None, Mode::Main) => Scope::Main,
            _ => Scope::Global,
        }
    }

    /// Turn a key press into state changes and the effect to perform.
    pub fn handle_key(&mut self, key: KeyEvent) -> Action {
        // Ctrl-C quits from anywhere, even while a prompt is open (raw mode delivers it as a key).
        if key.code == KeyCode::Char('c') && key.modifiers.contains(KeyModifiers::CONTROL) {
            return Action::Quit;
        }
        let scope = self.scope();
        if scope == Scope::Input {
            return self.handle_input(key);
        }
        let cmd = keymap::lookup(scope, &key).or_else(|| {
            matches!(scope, Scope::Diff | Scope::Main)
                .then(|| keymap::lookup(Scope::Global, &key))
                .flatten()
        });
        let Some(cmd) = cmd else {
            return Action::None;
        };
        if scope == Scope::Confirm {
            return self.handle_confirm(cmd);
        }
        if self.dialog.help && !matches!(cmd, Cmd::Help | Cmd::Back | Cmd::Quit) {
            return Action::None;
        }
        let action = self.run_cmd(cmd);
        self.jobs.describe_rows(&self.snap);
        action
    }

    fn handle_confirm(&mut self, cmd: Cmd) -> Action {
        match self.dialog.answer(cmd) {
            Answer::Bulk { pause, jobs, yes } => self.confirm_bulk(pause, jobs, yes),
            Answer::Cancel { job, yes: true } => {
                self.notice = Some(format!("{job}: cancel sent"));
                Action::Send(Command::Cancel(job))
            }
            Answer::Cancel { job, yes: false } => {
                self.notice = Some(format!("{job}: not cancelled"));
                Action::Redraw
            }
            Answer::Trigger { job, yes: true } => {
                self.ops.begin(job.clone(), PendingOp::Triggering, self.now);
                Action::Send(Command::Trigger(job))
            }
            Answer::Trigger { job, yes: false } => {
                self.notice = Some(format!("trigger of {job} cancelled"));
                Action::Redraw
            }
            Answer::Retry {
                job,
                run_id,
                yes: true,
            } => {
                self.notice = Some(format!("{job}: retry of run {run_id} sent"));
                Action::Send(Command::Retry(run_id))
            }
            Answer::Retry {
                job, yes: false, ..
            } => {
                self.notice = Some(format!("{job}: not retried"));
                Action::Redraw
            }
            Answer::Approval {
                job,
                run_id,
                call,
                approve,
                yes: true,
            } => {
                let word = if approve { "approval" } else { "denial" };
                self.notice = Some(format!("{job}: {word} of run {run_id}'s call sent"));
                Action::Send(Command::Answer {
                    run_id,
                    call,
                    approve,
                })
            }
            Answer::Approval {
                job, yes: false, ..
            } => {
                self.notice = Some(format!("{job}: not answered; the call still waits"));
                Action::Redraw
            }
            Answer::Nothing => Action::None,
        }
    }

    fn handle_input(&mut self, key: KeyEvent) -> Action {
        match self.dialog.type_key(key) {
            Typed::Applied => {
                self.jobs.selected = 0;
                Action::Redraw
            }
            Typed::Cleared => {
                self.filters.name.clear();
                self.rebuild(None);
                Action::Redraw
            }
            Typed::Edited(text) => {
                self.filters.name = text;
                self.rebuild(None);
                self.jobs.selected = 0;
                self.history.follow_end(&self.snap, &self.filters, false);
                Action::Redraw
            }
            Typed::Ignored => Action::None,
        }
    }

    fn move_by(&mut self, delta: isize, to_end: Option<bool>) {
        let step = |cur: usize, len: usize| -> usize {
            let last = len.saturating_sub(1);
            match to_end {
                Some(false) => 0,
                Some(true) => last,
                None => cur.saturating_add_signed(delta).min(last),
            }
        };
        match (&self.mode, self.pane) {
            // Views clamp the scroll to their content.
            (Mode::Detail(_) | Mode::Diff(_) | Mode::Run(_) | Mode::DryRun(_), _) => {
                self.viewer.scroll_by(delta, to_end)
            }
            (Mode::Main, Pane::Jobs) => {
                self.jobs.selected = step(self.jobs.selected, self.jobs.visible.len())
            }
            (Mode::Main, Pane::Leases) => {
                self.leases.sel = step(self.leases.sel, self.leases().len())
            }
            // `g`/`G` follow the newest/oldest row; other moves anchor the cursor to a run.
            (Mode::Main, Pane::History) => match to_end {
                Some(oldest) => self.history.follow_end(&self.snap, &self.filters, oldest),
                None => {
                    let len = self.history_rows().count();
                    let to = step(self.history.sel, len);
                    self.history.select(&self.snap, &self.filters, to);
                }
            },
        }
    }

    fn run_cmd(&mut self, cmd: Cmd) -> Action {
        let action = self.run_cmd_inner(cmd);
        let moved = matches!(
            cmd,
            Cmd::Down | Cmd::PageDown | Cmd::Bottom | Cmd::NextPane | Cmd::StatusFilter
        );
        if action == Action::Redraw
            && moved
            && self.mode == Mode::Main
            && self.pane == Pane::History
            && let Some(q) = self.history.page_wanted(&self.snap, &self.filters)
        {
            return Action::Load(q);
        }
        action
    }

    fn run_cmd_inner(&mut self, cmd: Cmd) -> Action {
        match cmd {
            Cmd::Quit => return Action::Quit,
            Cmd::Up => self.move_by(-1, None),
            Cmd::Down => self.move_by(1, None),
            Cmd::PageUp => self.move_by(-(PAGE as isize), None),
            Cmd::PageDown => self.move_by(PAGE as isize, None),
            Cmd::Top => self.move_by(0, Some(false)),
            Cmd::Bottom => self.move_by(0, Some(true)),
            Cmd::NextPane => {
                self.pane = match self.pane {
                    Pane::Jobs => Pane::Leases,
                    Pane::Leases => Pane::History,
                    Pane::History => Pane::Jobs,
                }
            }
            Cmd::Help => self.dialog.help = !self.dialog.help,
            Cmd::Back => self.back(),
            Cmd::Sort => {
                self.jobs.next_sort();
                self.rebuild(None);
            }
            Cmd::StatusFilter => {
                self.filters.status = match self.filters.status {
                    None => Some(Status::ALL[0]),
                    Some(s) => Status::ALL
                        .iter()
                        .position(|x| *x == s)
                        .and_then(|i| Status::ALL.get(i + 1).copied()),
                };
                self.history.reset_pages();
                self.rebuild(None);
            }
            Cmd::NameFilter => self.dialog.ask_name(&self.filters.name),
            Cmd::TogglePause => return self.toggle_pause(),
            Cmd::Trigger => return self.ask_trigger(),
            Cmd::Detail if self.mode == Mode::Main && self.pane == Pane::History => {
                let Some(row) = self.selected_run().cloned() else {
                    return Action::None;
                };
                self.mode = Mode::Run(Box::new(row));
                self.viewer.reset_scroll();
            }
            Cmd::Retry => return self.ask_retry(),
            Cmd::Cancel => return self.ask_cancel(),
            Cmd::Approve | Cmd::Deny => return self.ask_answer(cmd == Cmd::Approve),
            Cmd::Detail => {
                let Some(name) = self.target_job().map(|j| j.def.name.clone()) else {
                    return Action::None;
                };
                self.mode = Mode::Detail(name.clone());
                self.viewer.reset_scroll();
                return Action::Load(Query::JobHistory(name));
            }
            Cmd::Diff => {
                let Some(name) = self.target_job().map(|j| j.def.name.clone()) else {
                    return Action::None;
                };
                self.mode = Mode::Diff(name.clone());
                self.viewer.open_diffs();
                return Action::Load(Query::Diffs(name));
            }
            Cmd::JobHistory => {
                if self.history.job.is_some() {
                    self.history.job = None;
                    self.history.reset_pages();
                } else if let Some(name) = self.target_job().map(|j| j.def.name.clone()) {
                    self.history.job = Some(name.clone());
                    self.history.reset_pages();
                    return Action::Load(Query::JobHistory(name));
                }
            }
            Cmd::OlderDiff | Cmd::NewerDiff => {
                if let Mode::Diff(job) = &self.mode {
                    let n = self.diffs_of(job).len();
                    self.viewer.step_diff(cmd == Cmd::OlderDiff, n);
                }
            }
            Cmd::DryRun => return self.open_dry_run(),
            Cmd::PauseFiltered => return self.ask_bulk_pause(),
            Cmd::Yes | Cmd::No | Cmd::Apply => return Action::None,
        }
        Action::Redraw
    }

    /// Esc: close help, leave a view, or clear the filters on the main screen.
    fn back(&mut self) {
        if self.dialog.help {
            self.dialog.help = false;
        } else if self.mode != Mode::Main {
            self.mode = Mode::Main;
            self.viewer.reset_scroll();
        } else {
            self.filters = Filters::default();
            self.history.job = None;
            self.history.reset_pages();
            self.rebuild(None);
        }
    }

    /// `t`: ask to trigger the selected job, unless it is running or retired.
    fn ask_trigger(&mut self) -> Action {
        let Some(j) = self.target_job() else {
            return Action::None;
        };
        let name = j.def.name.clone();
        if j.rt.lease.is_some() {
            self.notice = Some(format!("{name} is running: not triggered"));
        } else if j.rt.retired {
            self.notice = Some(format!("{name} is retired: not triggered"));
        } else {
            self.dialog.prompt = Prompt::ConfirmTrigger(name);
        }
        Action::Redraw
    }

    /// `R`: ask to retry the run under the cursor (failed, abandoned or missed only).
    fn ask_retry(&mut self) -> Action {
        let row = match &self.mode {
            Mode::Run(r) => Some((**r).clone()),
            Mode::Main if self.pane == Pane::History => self.selected_run().cloned(),
            _ => None,
        };
        let Some(row) = row else {
            self.notice = Some("R retries a run: put the History cursor on it (Tab)".into());
            return Action::Redraw;
        };
        if !matches!(
            row.status,
            Status::Failed | Status::Abandoned | Status::Missed
        ) {
            self.notice = Some(format!(
                "{}: a {} run is not retried (only failed, abandoned, missed)",
                row.job, row.status
            ));
            return Action::Redraw;
        }
        self.dialog.prompt = Prompt::ConfirmRetry {
            job: row.job,
            run_id: row.run_id,
        };
        Action::Redraw
    }

    /// `X`: ask to cancel the selected job's run or queued work.
    fn ask_cancel(&mut self) -> Action {
        let Some(j) = self.target_job() else {
            return Action::None;
        };
        let name = j.def.name.clone();
        let queued = j.rt.trigger_requested_at.is_some() || j.rt.queued > 0;
        if j.rt.lease.is_none() && !queued {
            self.notice = Some(format!("{name} is not running and has nothing queued"));
        } else {
            self.dialog.prompt = Prompt::ConfirmCancel(name);
        }
        Action::Redraw
    }

    /// `a`/`x`: approve or deny the call the job at the cursor awaits approval for (y/n).
    fn ask_answer(&mut self, approve: bool) -> Action {
        let Some(j) = self.target_job() else {
            return Action::None;
        };
        let name = j.def.name.clone();
        let waiting = j.rt.lease.as_ref().and_then(|l| {
            l.awaiting
                .as_ref()
                .filter(|a| a.answer.is_none())
                .map(|a| (l.run_id, a.call_id.clone(), a.tool.clone()))
        });
        match waiting {
            Some((run_id, call, tool)) => {
                self.dialog.prompt = Prompt::ConfirmAnswer {
                    job: name,
                    run_id,
                    call,
                    tool,
                    approve,
                };
            }
            None => self.notice = Some(format!("{name} has no call awaiting approval")),
        }
        Action::Redraw
    }

    fn toggle_pause(&mut self) -> Action {
        let Some(j) = self.target_job() else {
            return Action::None;
        };
        let name = j.def.name.clone();
        if let Some(p) = self.ops.pending.get(&name) {
            self.notice = Some(format!(
                "{name}: still waiting for {:?} to be confirmed",
                p.op
            ));
            return Action::Redraw;
        }
        let (op, cmd) = if j.rt.paused {
            (PendingOp::Resuming, Command::Resume(name.clone()))
        } else {
            (PendingOp::Pausing, Command::Pause(name.clone()))
        };
        self.ops.begin(name, op, self.now);
        Action::Send(cmd)
    }

    /// The command for `job` could not be sent: drop its optimistic mark.
    pub fn command_not_sent(&mut self, job: &str) {
        self.ops.forget(job);
    }
}

/// A job of the snapshot by name (binary search: `snap.jobs` is sorted by name).
fn job_in<'a>(snap: &'a Snapshot, name: &str) -> Option<&'a JobRow> {
    snap.job(name)
}

#[cfg(test)]
mod tests {
    use super::history::SCAN_MAX;
    use super::*;
    use crate::model::Trigger;
    use crate::schedule::ScheduleSpec;
    use crate::tui::testdata;
    use KeyCode::*;
    use std::collections::BTreeMap;

    fn key(c: KeyCode) -> KeyEvent {
        KeyEvent::from(c)
    }

    fn app() -> App {
        let (snap, now) = testdata::fixed();
        App::new(Arc::new(snap), now)
    }

    fn press(app: &mut App, keys: &str) -> Vec<Action> {
        keys.chars().map(|c| app.handle_key(key(Char(c)))).collect()
    }

    #[test]
    fn movement_stays_in_bounds() {
        let mut a = app();
        let n = a.jobs.visible.len();
        assert!(n > 3);
        a.handle_key(key(Up));
        assert_eq!(a.jobs.selected, 0);
        press(&mut a, "jj");
        assert_eq!(a.jobs.selected, 2);
        a.handle_key(KeyEvent::new(Char('G'), KeyModifiers::SHIFT));
        assert_eq!(a.jobs.selected, n - 1);
        a.handle_key(key(Down));
        assert_eq!(a.jobs.selected, n - 1);
        press(&mut a, "g");
        assert_eq!(a.jobs.selected, 0);
    }

    #[test]
    fn pause_is_optimistic_until_a_snapshot_confirms() {
        let mut a = app();
        let name = a.selected_job().unwrap().def.name.clone();
        assert!(!a.selected_job().unwrap().rt.paused);
        assert_eq!(
            a.handle_key(key(Char('p'))),
            Action::Send(Command::Pause(name.clone()))
        );
        assert_eq!(a.pending_op(&name), Some(PendingOp::Pausing));
        // An unrelated snapshot does not confirm it.
        a.on_snapshot(a.snap.clone());
        assert_eq!(a.pending_op(&name), Some(PendingOp::Pausing));
        // A second `p` while pending sends nothing.
        assert_eq!(a.handle_key(key(Char('p'))), Action::Redraw);
        let mut s = (*a.snap).clone();
        s.jobs
            .iter_mut()
            .find(|j| j.def.name == name)
            .unwrap()
            .rt
            .paused = true;
        a.on_snapshot(Arc::new(s));
        assert_eq!(a.pending_op(&name), None);
        assert_eq!(
            a.handle_key(key(Char('p'))),
            Action::Send(Command::Resume(name.clone()))
        );
        assert_eq!(a.pending_op(&name), Some(PendingOp::Resuming));
    }

    #[test]
    fn unconfirmed_pending_expires_with_a_notice() {
        let mut a = app();
        press(&mut a, "p");
        let now = a.now;
        a.on_tick(now + chrono::Duration::seconds(PENDING_TIMEOUT_SECS));
        assert!(a.ops.pending.is_empty());
        assert!(a.notice.as_deref().unwrap_or("").contains("not confirmed"));
    }

    #[test]
    fn trigger_asks_yes_or_no() {
        let mut a = app();
        press(&mut a, "j");
        assert!(a.selected_job().unwrap().rt.lease.is_none());
        let name = a.selected_job().unwrap().def.name.clone();
        assert_eq!(a.handle_key(key(Char('t'))), Action::Redraw);
        assert_eq!(a.dialog.prompt, Prompt::ConfirmTrigger(name.clone()));
        // Other keys do nothing while asking… except the answer.
        assert_eq!(a.handle_key(key(Char('q'))), Action::None);
        assert_eq!(a.dialog.prompt, Prompt::ConfirmTrigger(name.clone()));
        assert_eq!(
            a.handle_key(key(Char('y'))),
            Action::Send(Command::Trigger(name.clone()))
        );
        assert_eq!(a.dialog.prompt, Prompt::None);
        assert_eq!(a.pending_op(&name), Some(PendingOp::Triggering));
        let mut b = app();
        press(&mut b, "jt");
        assert_eq!(b.handle_key(key(Char('n'))), Action::Redraw);
        assert_eq!(b.dialog.prompt, Prompt::None);
        assert!(b.ops.pending.is_empty());
    }

    #[test]
    fn trigger_of_a_running_job_is_refused_locally() {
        let mut a = app();
        let idx = a
            .jobs
            .visible
            .iter()
            .position(|&i| a.snap.jobs[i].rt.lease.is_some())
            .unwrap();
        a.jobs.selected = idx;
        assert_eq!(a.handle_key(key(Char('t'))), Action::Redraw);
        assert_eq!(a.dialog.prompt, Prompt::None);
        assert!(a.notice.as_deref().unwrap().contains("running"));
    }

    #[test]
    fn name_filter_selects_first_match_and_esc_clears() {
        let mut a = app();
        let total = a.jobs.visible.len();
        press(&mut a, "G");
        press(&mut a, "/");
        // 'q' is text here, not quit.
        let acts = press(&mut a, "back");
        assert!(acts.iter().all(|x| *x == Action::Redraw));
        assert_eq!(a.handle_key(key(Enter)), Action::Redraw);
        assert_eq!(a.dialog.prompt, Prompt::None);
        assert!(!a.jobs.visible.is_empty() && a.jobs.visible.len() < total);
        assert!(
            a.jobs
                .visible
                .iter()
                .all(|&i| a.snap.jobs[i].def.name.contains("back"))
        );
        assert_eq!(a.jobs.selected, 0);
        assert_eq!(
            a.selected_job().unwrap().def.name,
            a.snap.jobs[a.jobs.visible[0]].def.name
        );
        a.handle_key(key(Esc));
        assert_eq!(a.jobs.visible.len(), total);
        assert!(a.filters.name.is_empty());
    }

    #[test]
    fn ctrl_c_quits_even_from_prompts() {
        let ctrl_c = KeyEvent::new(Char('c'), KeyModifiers::CONTROL);
        let mut a = app();
        press(&mut a, "/");
        assert_eq!(a.handle_key(ctrl_c), Action::Quit);
        let mut b = app();
        press(&mut b, "jt");
        assert!(matches!(b.dialog.prompt, Prompt::ConfirmTrigger(_)));
        assert_eq!(b.handle_key(ctrl_c), Action::Quit);
    }

    #[test]
    fn quit_keys() {
        let mut a = app();
        assert_eq!(a.handle_key(key(Char('q'))), Action::Quit);
        assert_eq!(
            a.handle_key(KeyEvent::new(Char('c'), KeyModifiers::CONTROL)),
            Action::Quit
        );
    }

    #[test]
    fn status_filter_cycles_through_all_and_back() {
        let mut a = app();
        let mut seen = vec![];
        for _ in 0..Status::ALL.len() {
            press(&mut a, "f");
            seen.push(a.filters.status.unwrap());
            assert!(
                a.jobs
                    .visible
                    .iter()
                    .all(|&i| a.snap.jobs[i].rt.last_status == a.filters.status)
            );
            assert!(a.history_rows().all(|r| Some(r.status) == a.filters.status));
        }
        assert_eq!(seen, Status::ALL.to_vec());
        press(&mut a, "f");
        assert_eq!(a.filters.status, None);
    }

    #[test]
    fn sort_cycles_and_keeps_the_selected_job() {
        let mut a = app();
        press(&mut a, "jj");
        let name = a.selected_job().unwrap().def.name.clone();
        press(&mut a, "s");
        assert_eq!(a.jobs.sort, SortKey::Next);
        assert_eq!(a.selected_job().unwrap().def.name, name);
        let nexts: Vec<_> = a
            .jobs
            .visible
            .iter()
            .map(|&i| a.snap.jobs[i].rt.next_slot)
            .collect();
        let somes: Vec<_> = nexts.iter().flatten().collect();
        assert!(somes.windows(2).all(|w| w[0] <= w[1]));
        for _ in 0..5 {
            press(&mut a, "s");
        }
        assert_eq!(a.jobs.sort, SortKey::Name);
    }

    #[test]
    fn detail_diff_and_history_ask_for_store_reads() {
        let mut a = app();
        let name = a.selected_job().unwrap().def.name.clone();
        assert_eq!(
            a.handle_key(key(Enter)),
            Action::Load(Query::JobHistory(name.clone()))
        );
        assert_eq!(a.mode, Mode::Detail(name.clone()));
        a.handle_key(key(Esc));
        assert_eq!(a.mode, Mode::Main);
        assert_eq!(
            a.handle_key(key(Char('d'))),
            Action::Load(Query::Diffs(name.clone()))
        );
        assert_eq!(a.mode, Mode::Diff(name.clone()));
        a.handle_key(key(Esc));
        assert_eq!(
            a.handle_key(key(Char('h'))),
            Action::Load(Query::JobHistory(name.clone()))
        );
        assert!(a.history_rows().all(|r| r.job == name));
        press(&mut a, "h");
        assert_eq!(a.history.job, None);
    }

    #[test]
    fn diff_brackets_walk_older_and_newer() {
        let mut a = app();
        let name = testdata::MONITOR_JOB.to_string();
        a.jobs.selected = a
            .jobs
            .visible
            .iter()
            .position(|&i| a.snap.jobs[i].def.name == name)
            .unwrap();
        press(&mut a, "d");
        let n = a.diffs_of(&name).len();
        assert!(n >= 2, "fixture has several diffs");
        press(&mut a, "[");
        assert_eq!(a.viewer.diff_index, 1);
        for _ in 0..10 {
            press(&mut a, "[");
        }
        assert_eq!(a.viewer.diff_index, n - 1);
        press(&mut a, "]");
        assert_eq!(a.viewer.diff_index, n - 2);
        // '[' is not a global key: nothing happens on the main screen.
        a.handle_key(key(Esc));
        assert_eq!(a.handle_key(key(Char('['))), Action::None);
    }

    #[test]
    fn help_toggles_and_swallows_other_keys() {
        let mut a = app();
        press(&mut a, "?");
        assert!(a.dialog.help);
        assert_eq!(a.handle_key(key(Char('j'))), Action::None);
        assert_eq!(a.jobs.selected, 0);
        a.handle_key(key(Esc));
        assert!(!a.dialog.help);
    }

    #[test]
    fn tab_cycles_panes() {
        let mut a = app();
        let panes: Vec<Pane> = (0..3)
            .map(|_| {
                a.handle_key(key(Tab));
                a.pane
            })
            .collect();
        assert_eq!(panes, vec![Pane::Leases, Pane::History, Pane::Jobs]);
    }

    #[test]
    fn live_rows_show_until_the_snapshot_has_them() {
        let mut a = app();
        let mut row = a.snap.recent[0].clone();
        row.run_id = uuid::Uuid::new_v4();
        a.on_event(Event::Row(row.clone()));
        assert_eq!(a.history_rows().next().unwrap().run_id, row.run_id);
        let mut s = (*a.snap).clone();
        s.recent.insert(0, row.clone());
        a.on_snapshot(Arc::new(s));
        assert!(a.history.live.is_empty());
        assert_eq!(
            a.history_rows().filter(|r| r.run_id == row.run_id).count(),
            1
        );
    }

    #[test]
    fn filtering_the_snapshot_window_is_bounded() {
        let (snap, now) = testdata::big(10, 5000);
        let mut a = App::new(Arc::new(snap), now);
        press(&mut a, "jh");
        assert_eq!(a.history.job.as_deref(), Some("job-00001"));
        // Only the first SCAN_MAX rows are searched until the store's rows arrive.
        assert_eq!(a.history_rows().count(), SCAN_MAX / 10);
        let rows: Vec<HistoryRow> = a
            .snap
            .recent
            .iter()
            .filter(|r| r.job == "job-00001")
            .cloned()
            .collect();
        a.on_loaded(Loaded::JobHistory {
            job: "job-00001".into(),
            rows,
        });
        assert_eq!(a.history_rows().count(), 500);
    }

    #[test]
    fn schedule_words_are_cached_but_follow_an_edited_job() {
        let a = app();
        let mut j = a.snap.jobs[0].clone();
        assert_eq!(a.schedule_words(&j), "every hour");
        assert_eq!(a.schedule_words(&j), "every hour");
        j.def.schedule = ScheduleSpec::Every { every_seconds: 120 };
        assert_eq!(a.schedule_words(&j), "every 2 minutes");
    }

    #[test]
    fn keys_act_on_the_selected_lease_when_the_leases_pane_has_focus() {
        let mut a = app();
        a.handle_key(key(Tab));
        assert_eq!(a.pane, Pane::Leases);
        press(&mut a, "j");
        let lease_job = a.target_job().unwrap().def.name.clone();
        assert_eq!(lease_job, "stuck-sync");
        assert_eq!(
            a.handle_key(key(Enter)),
            Action::Load(Query::JobHistory(lease_job.clone()))
        );
        assert_eq!(a.mode, Mode::Detail(lease_job));
    }

    #[test]
    fn drawing_never_changes_the_state() {
        use ratatui::widgets::Widget;
        let mut a = app();
        for keys in ["", "j", "\t\t", "\n"] {
            for c in keys.chars() {
                let k = match c {
                    '\t' => key(Tab),
                    '\n' => key(Enter),
                    c => key(Char(c)),
                };
                a.handle_key(k);
            }
            let before = format!("{a:?}");
            for (w, h) in [(80, 24), (120, 40), (200, 60)] {
                let mut buf =
                    ratatui::buffer::Buffer::empty(ratatui::layout::Rect::new(0, 0, w, h));
                (&a).render(buf.area, &mut buf);
            }
            assert_eq!(format!("{a:?}"), before, "after keys {keys:?}");
        }
    }

    #[test]
    fn the_measured_scroll_max_takes_g_to_the_bottom_of_the_open_view() {
        let mut a = app();
        a.handle_key(key(Enter));
        testdata::read_record(&mut a, None);
        let area = ratatui::layout::Rect::new(0, 0, 80, 24);
        let max = crate::tui::view::scroll_max(&a, area).unwrap();
        assert!(
            max > 0,
            "the fixture's detail view is longer than a 80×24 screen"
        );
        a.set_scroll_max(max);
        a.handle_key(KeyEvent::new(Char('G'), KeyModifiers::SHIFT));
        assert_eq!(a.viewer.scroll, max);
        // On the main screen there is nothing to measure.
        a.handle_key(key(Esc));
        assert_eq!(crate::tui::view::scroll_max(&a, area), None);
    }

    #[test]
    fn detail_scroll_is_clamped_to_what_the_view_reported() {
        let mut a = app();
        a.handle_key(key(Enter));
        a.set_scroll_max(7);
        a.handle_key(KeyEvent::new(Char('G'), KeyModifiers::SHIFT));
        assert_eq!(a.viewer.scroll, 7);
        a.handle_key(key(Char('k')));
        assert_eq!(a.viewer.scroll, 6);
        for _ in 0..20 {
            a.handle_key(key(Char('j')));
        }
        assert_eq!(a.viewer.scroll, 7);
    }

    #[test]
    fn run_started_marks_the_job_until_its_row_arrives() {
        let mut a = app();
        a.on_event(Event::RunStarted {
            job: "zz-new".into(),
            run_id: uuid::Uuid::nil(),
            trigger: Trigger::Schedule,
            slot: None,
        });
        assert!(a.ops.started.contains("zz-new"));
        let r = testdata::row(9, "zz-new", Status::Succeeded, a.now);
        a.on_event(Event::Row(r));
        assert!(a.ops.started.is_empty());
    }

    fn shift(c: char) -> KeyEvent {
        KeyEvent::new(Char(c), KeyModifiers::SHIFT)
    }

    /// History focused, cursor on the first row of `job` with `status`.
    fn on_row(a: &mut App, job: &str, status: Status) -> HistoryRow {
        a.pane = Pane::History;
        let sel = a
            .history_rows()
            .position(|r| r.job == job && r.status == status)
            .unwrap();
        a.history.select(&a.snap, &a.filters, sel);
        a.selected_run().unwrap().clone()
    }

    /// The History cursor stays on its run as rows arrive: after `j`×6 and a stream of new
    /// rows (events, then a snapshot holding them), the selection is the same run, so what
    /// `R` or Enter acts on is the run that was looked at. `g`/`G` follow the newest/oldest
    /// row instead.
    #[test]
    fn the_history_cursor_stays_on_its_run_as_rows_arrive() {
        let mut a = app();
        a.pane = Pane::History;
        press(&mut a, "jjjjjj");
        let picked = a.selected_run().unwrap().clone();
        assert_eq!(a.history.sel, 6);
        let mut fresh = Vec::new();
        for i in 0..11 {
            let mut r = testdata::row(50_000 + i, "flaky-sync", Status::Failed, a.now);
            r.finished_at = a.now + chrono::Duration::seconds(i as i64 + 1);
            fresh.push(r.clone());
            a.on_event(Event::Row(r));
            assert_eq!(a.selected_run().map(|r| r.run_id), Some(picked.run_id));
        }
        assert_eq!(a.history.sel, 6 + 11);
        // The snapshot that now holds those rows changes nothing either.
        let mut s = (*a.snap).clone();
        for r in &fresh {
            s.recent.insert(0, r.clone());
        }
        a.on_snapshot(Arc::new(s));
        assert_eq!(a.selected_run().map(|r| r.run_id), Some(picked.run_id));
        // `g` follows the newest row: a new row takes the cursor with it.
        press(&mut a, "g");
        let newer = testdata::row(60_000, "heartbeat", Status::Succeeded, a.now);
        a.on_event(Event::Row(newer.clone()));
        assert_eq!(a.history.sel, 0);
        assert_eq!(a.selected_run().map(|r| r.run_id), Some(newer.run_id));
        // `G` follows the oldest row held.
        a.handle_key(shift('G'));
        let oldest = a.history_rows().last().unwrap().run_id;
        a.on_event(Event::Row(testdata::row(
            60_001,
            "heartbeat",
            Status::Succeeded,
            a.now,
        )));
        assert_eq!(a.selected_run().map(|r| r.run_id), Some(oldest));
    }

    #[test]
    fn enter_on_a_history_row_opens_that_run_not_the_selected_job() {
        let mut a = app();
        press(&mut a, "j"); // the jobs table cursor is elsewhere
        let row = on_row(&mut a, "summarise-news", Status::Failed);
        assert_eq!(a.handle_key(key(Enter)), Action::Redraw);
        assert_eq!(a.mode, Mode::Run(Box::new(row)));
        // Keys that act on a job act on the run's job while History has the focus.
        assert_eq!(a.target_job().unwrap().def.name, "summarise-news");
        assert_eq!(a.handle_key(key(Esc)), Action::Redraw);
        assert_eq!(a.mode, Mode::Main);
    }

    #[test]
    fn retry_asks_then_sends_the_run_id_of_a_failed_row_and_refuses_a_succeeded_one() {
        let mut a = app();
        let row = on_row(&mut a, "summarise-news", Status::Failed);
        // `R` asks first, like `t`: `n` sends nothing, `y` sends the run's id.
        assert_eq!(a.handle_key(shift('R')), Action::Redraw);
        assert_eq!(
            a.dialog.prompt,
            Prompt::ConfirmRetry {
                job: row.job.clone(),
                run_id: row.run_id
            }
        );
        assert_eq!(a.handle_key(key(Char('q'))), Action::None, "modal");
        assert_eq!(press(&mut a, "n"), vec![Action::Redraw]);
        assert!(a.notice.as_deref().unwrap().contains("not retried"));
        a.handle_key(shift('R'));
        assert_eq!(
            press(&mut a, "y"),
            vec![Action::Send(Command::Retry(row.run_id))]
        );
        on_row(&mut a, "backup-db", Status::Succeeded);
        assert_eq!(a.handle_key(shift('R')), Action::Redraw);
        assert!(a.notice.as_deref().unwrap().contains("not retried"));
        // From the jobs table there is no run under a cursor.
        a.pane = Pane::Jobs;
        assert_eq!(a.handle_key(shift('R')), Action::Redraw);
    }

    /// A key that opens a y/n question says so in `?`: the help is where an operator learns
    /// which keys act at once and which ask first.
    #[test]
    fn every_key_that_asks_y_n_says_so_in_its_help() {
        use crate::tui::keymap::{self, Cmd, Scope};
        let mut asked = Vec::new();
        for b in keymap::bindings(&[Scope::Global, Scope::Main]) {
            let ev = KeyEvent::new(b.keys[0].code, b.keys[0].mods);
            // Every job under the jobs cursor, and a failed run under the History cursor.
            let mut contexts: Vec<App> = (0..app().jobs.visible.len())
                .map(|i| {
                    let mut a = app();
                    a.jobs.selected = i;
                    a
                })
                .collect();
            let mut h = app();
            on_row(&mut h, "summarise-news", Status::Failed);
            contexts.push(h);
            for mut a in contexts {
                a.handle_key(ev);
                if !matches!(a.dialog.prompt, Prompt::None | Prompt::Name(_)) {
                    assert!(
                        b.help.contains("(y/n)"),
                        "`{}` asks y/n, but its help says {:?}",
                        b.label,
                        b.help
                    );
                    asked.push(b.cmd);
                }
            }
        }
        for cmd in [Cmd::Trigger, Cmd::Retry, Cmd::Cancel, Cmd::PauseFiltered] {
            assert!(asked.contains(&cmd), "{cmd:?} asked nothing here");
        }
    }

    #[test]
    fn cancel_asks_first_and_says_when_there_is_nothing_to_cancel() {
        let mut a = app();
        a.jobs.selected = a
            .jobs
            .visible
            .iter()
            .position(|&i| a.snap.jobs[i].def.name == "backup-db")
            .unwrap();
        assert_eq!(a.handle_key(shift('X')), Action::Redraw);
        assert_eq!(a.dialog.prompt, Prompt::ConfirmCancel("backup-db".into()));
        assert_eq!(
            press(&mut a, "y"),
            vec![Action::Send(Command::Cancel("backup-db".into()))]
        );
        // An idle job with nothing queued: no question.
        a.jobs.selected = a
            .jobs
            .visible
            .iter()
            .position(|&i| a.snap.jobs[i].def.name == "backup-logs")
            .unwrap();
        a.handle_key(shift('X'));
        assert_eq!(a.dialog.prompt, Prompt::None);
        assert!(a.notice.as_deref().unwrap().contains("nothing queued"));
        // A queued trigger can be dropped.
        a.jobs.selected = a
            .jobs
            .visible
            .iter()
            .position(|&i| a.snap.jobs[i].def.name == "zz-new")
            .unwrap();
        a.handle_key(shift('X'));
        assert_eq!(a.dialog.prompt, Prompt::ConfirmCancel("zz-new".into()));
        assert_eq!(press(&mut a, "n"), vec![Action::Redraw]);
    }

    #[test]
    fn walking_past_the_window_pages_through_the_store() {
        let mut a = app();
        a.handle_key(key(Tab));
        let held = a.history_rows().count();
        // Focusing a History pane that holds less than two pages asks for the next one.
        let act = a.handle_key(key(Tab));
        let Action::Load(Query::HistoryPage {
            offset,
            job,
            status,
            token,
        }) = act
        else {
            panic!("no page asked: {act:?}");
        };
        assert_eq!((offset, job, status, token), (held, None, None, None));
        assert!(a.history.loading);
        // Nothing more is asked while a page is out.
        assert_eq!(a.handle_key(key(End)), Action::Redraw);
        // The page arrives: rows already held are not repeated.
        let mut rows: Vec<HistoryRow> = (0..HISTORY_PAGE as u128)
            .map(|n| testdata::row(50_000 + n, "old", Status::Succeeded, a.now))
            .collect();
        rows[0] = a.snap.recent[0].clone();
        a.on_loaded(Loaded::HistoryPage {
            offset,
            rows,
            next: Some("after-page-1".into()),
        });
        assert_eq!(a.history_rows().count(), held + HISTORY_PAGE - 1);
        assert!(!a.history.done);
        // A stale page (filters changed meanwhile) is dropped.
        a.on_loaded(Loaded::HistoryPage {
            offset: 3,
            rows: vec![testdata::row(99_999, "old", Status::Failed, a.now)],
            next: Some("stale".into()),
        });
        assert_eq!(a.history_rows().count(), held + HISTORY_PAGE - 1);
        // A short page means the end of the history.
        let act = a.handle_key(key(End));
        // It continues from the first page's store token (the pane's own, not a stale page's).
        let Action::Load(Query::HistoryPage { offset, token, .. }) = act else {
            panic!("no second page: {act:?}");
        };
        assert_eq!(token.as_deref(), Some("after-page-1"));
        a.on_loaded(Loaded::HistoryPage {
            offset,
            rows: vec![],
            next: None,
        });
        assert!(a.history.done);
        assert_eq!(a.handle_key(key(End)), Action::Redraw);
        // A new status filter starts over, by offset.
        a.history.next_token = Some("old filter".into());
        a.handle_key(Char('f').into());
        assert!(a.history.more.is_empty() && !a.history.done);
        assert_eq!(a.history.next_token, None);
    }

    #[test]
    fn a_row_seen_as_event_and_in_the_snapshot_is_shown_once() {
        let mut a = app();
        let before = a.history_rows().count();
        // The event arrives after the snapshot that already holds the row (attach's order).
        let dup = a.snap.recent[0].clone();
        a.on_event(Event::Row(dup.clone()));
        assert_eq!(a.history_rows().count(), before);
        // The event first, then a snapshot holding it: still once.
        let mut fresh = testdata::row(77_777, "zz-new", Status::Succeeded, a.now);
        fresh.trigger = Trigger::Manual;
        a.on_event(Event::Row(fresh.clone()));
        assert_eq!(a.history_rows().count(), before + 1);
        let mut snap = (*a.snap).clone();
        snap.recent.insert(0, fresh.clone());
        a.history.live.push_front(fresh.clone()); // as if the snapshot raced the event
        a.on_snapshot(Arc::new(snap));
        assert_eq!(
            a.history_rows()
                .filter(|r| r.run_id == fresh.run_id)
                .count(),
            1
        );
    }

    #[test]
    fn an_alert_opening_and_closing_is_said_in_the_notice_line() {
        let mut a = app();
        let mut snap = (*a.snap).clone();
        let i = snap
            .jobs
            .iter()
            .position(|j| j.def.name == "backup-db")
            .unwrap();
        snap.jobs[i].rt.alerted = true;
        a.on_snapshot(Arc::new(snap.clone()));
        assert!(a.notice.as_deref().unwrap().contains("ALERT: backup-db"));
        snap.jobs[i].rt.alerted = false;
        a.on_snapshot(Arc::new(snap));
        assert_eq!(a.notice.as_deref(), Some("recovered: backup-db"));
    }

    #[test]
    fn delivered_alerts_show_in_the_notice_line_but_results_do_not() {
        let mut a = app();
        let ev = |text: &str| Event::Delivered {
            job: "backup-logs".into(),
            sink: "ops".into(),
            text: text.into(),
        };
        a.on_event(ev("sync ok: 32 records"));
        assert_eq!(a.notice, None);
        a.on_event(ev("ALERT: backup-logs failed (3 times in a row): exit 2"));
        assert!(
            a.notice
                .as_deref()
                .unwrap()
                .starts_with("ALERT: backup-logs failed")
        );
        a.on_event(ev("RECOVERED: backup-logs succeeded again"));
        assert!(a.notice.as_deref().unwrap().starts_with("RECOVERED"));
    }

    /// The detail view reads the job's record from the store when it opens and once
    /// per snapshot while it stays open; it draws from that record.
    #[test]
    fn the_detail_view_asks_for_its_record_once_per_snapshot() {
        let mut a = app();
        assert_eq!(a.record_wanted(), None);
        let name = a.selected_job().unwrap().def.name.clone();
        a.handle_key(key(Enter));
        assert_eq!(a.record_wanted(), Some(Query::Job(name.clone())));
        assert_eq!(a.record_wanted(), None);
        assert_eq!(a.record(&name), None);
        a.on_loaded(Loaded::Job {
            job: name.clone(),
            record: testdata::record(&name).map(Box::new),
        });
        assert_eq!(
            a.record(&name).flatten().map(|j| j.def.name.as_str()),
            Some(name.as_str())
        );
        let mut snap = (*a.snap).clone();
        snap.taken_at += chrono::Duration::seconds(1);
        a.on_snapshot(Arc::new(snap));
        assert_eq!(a.record_wanted(), Some(Query::Job(name.clone())));
        a.on_loaded(Loaded::Job {
            job: name.clone(),
            record: None,
        });
        assert_eq!(a.record(&name), Some(None));
        a.handle_key(key(Esc));
        assert_eq!(a.record_wanted(), None);
    }

    #[test]
    fn execs_count_every_execution_whatever_its_trigger() {
        let mut j = testdata::fixed_jobs(testdata::now())[0].clone();
        j.rt.runs = 2; // scheduled runs (max_runs)
        j.rt.counters.by_status = BTreeMap::from([
            (Status::Succeeded, 2),
            (Status::Failed, 1),
            (Status::Missed, 4),
        ]);
        assert_eq!(App::executions(&JobRow::of(&j)), 3);
    }
}

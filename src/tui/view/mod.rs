//! Views: how the console's state is drawn. `impl Widget for &App` renders the whole screen from
//! [`App`] without cloning it per frame; each pane lives in its own module and only reads state.
//!
//! Owns: layout, text formatting of times/durations/money, colours. Must not touch: state changes
//! (views take `&App`), the store, the clock (they use `app.now`). Every piece of outside text is
//! passed through the crate's one inert-text policy before it reaches the buffer.
//!
//! Decisions: all times are shown in UTC (`HH:MM:SS` when within a day of now, `MM-DD HH:MM`
//! otherwise) so that several operators in different zones read the same screen; below 80×24
//! only "terminal too small" is drawn; the jobs table drops its least useful columns first when
//! narrow (LAST, NEXT, RUNS, SPEND, PASSED, SCHEDULE) and never drops state, NAME or STATUS;
//! panes with little to show (no lease, no spend) shrink and History takes the room.

use chrono::{DateTime, Utc};
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Widget, Wrap};

use crate::model::Status;
use crate::tui::state::{App, Mode, Pane, Prompt};

mod detail;
mod dry_run;
mod header;
mod help;
mod jobs;
mod panes;
mod redraw;
mod transcript;

pub(crate) use redraw::next_change;

/// Narrowest terminal the console draws in; below it, it asks for a bigger one.
pub const MIN_WIDTH: u16 = 80;
/// Lowest terminal the console draws in; below it, it asks for a bigger one.
pub const MIN_HEIGHT: u16 = 24;

impl Widget for &App {
    fn render(self, area: Rect, buf: &mut Buffer) {
        if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
            too_small(area, buf);
            return;
        }
        let [head, body, foot] = Layout::vertical([
            Constraint::Length(3),
            Constraint::Min(0),
            Constraint::Length(1),
        ])
        .areas(area);
        header::render(self, head, buf);
        match &self.mode {
            Mode::Main => main_screen(self, body, buf),
            Mode::Detail(_) | Mode::Diff(_) | Mode::Run(_) | Mode::DryRun(_) => {
                detail::render(self, body, buf)
            }
        }
        help::footer(self, foot, buf);
        match &self.dialog.prompt {
            Prompt::ConfirmTrigger(job) => help::confirm(&format!("Trigger {job} now?"), area, buf),
            Prompt::ConfirmCancel(job) => help::confirm(
                &format!(
                    "Cancel {job}? A running run is killed (failed, not retried); queued runs are dropped."
                ),
                area,
                buf,
            ),
            Prompt::ConfirmRetry { job, run_id } => {
                help::confirm(&format!("Retry run {run_id} of {job} now?"), area, buf)
            }
            Prompt::ConfirmBulk { pause, jobs } => {
                help::confirm(&dry_run::bulk_question(*pause, jobs), area, buf)
            }
            Prompt::ConfirmAnswer {
                job,
                run_id,
                call,
                tool,
                approve,
            } => {
                // The tool's name comes from a server, the call's id from the model: inert.
                let (tool, call) = (crate::text::visible(tool), crate::text::visible(call));
                let q = if *approve {
                    format!(
                        "Approve {job}'s call {call} to {tool} (run {run_id})? Its owner runs it."
                    )
                } else {
                    format!(
                        "Deny {job}'s call {call} to {tool} (run {run_id})? The model is told it was denied."
                    )
                };
                help::confirm(&q, area, buf)
            }
            _ => {}
        }
        if self.dialog.help {
            help::help(area, buf);
        }
    }
}

/// The body of a screen of `area` (what is left under the header and above the footer).
fn body(area: Rect) -> Rect {
    let [_, body, _] = Layout::vertical([
        Constraint::Length(3),
        Constraint::Min(0),
        Constraint::Length(1),
    ])
    .areas(area);
    body
}

/// How far the open full-body view (detail, diff, run) can scroll on a screen of `area`; `None`
/// on the main screen. The event loop hands it to the state before each frame
/// ([`App::set_scroll_max`]), so `G` goes to the real bottom and drawing writes nothing.
pub fn scroll_max(app: &App, area: Rect) -> Option<usize> {
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        return None;
    }
    detail::scroll_max(app, body(area))
}

/// The sort orders whose column the jobs table shows on a screen of `area` (the table spans
/// the screen's width); `None` below the smallest screen. The event loop hands them to the
/// state before each frame ([`App::set_sortable`]), so `s` skips a column the width dropped.
pub fn sort_keys(app: &App, area: Rect) -> Option<Vec<crate::tui::state::SortKey>> {
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        return None;
    }
    Some(jobs::sort_keys(app, area.width))
}

fn too_small(area: Rect, buf: &mut Buffer) {
    let text = format!(
        "terminal too small: {}×{} (need {MIN_WIDTH}×{MIN_HEIGHT})",
        area.width, area.height
    );
    Paragraph::new(text)
        .wrap(Wrap { trim: true })
        .style(Style::new().fg(Color::Yellow))
        .render(area, buf);
}

/// Rows left under the jobs table for the panes below: enough for a few history rows on a
/// small terminal, more on a tall one.
fn bottom_min(body_height: u16) -> u16 {
    if body_height >= 30 { 12 } else { 5 }
}

/// Narrowest side column: its panes' titles and "no job is leased" fit.
const SIDE_MIN: u16 = 24;

/// Width of the side column (leases over spend) next to History: what its panes' content needs
/// (the longest lease's lines, the sparkline and the top spenders' names), at most 30% of the
/// screen (30 to 56 columns), at least [`SIDE_MIN`]; History takes the rest. Empty panes need
/// little, so with no lease and no spend the column is [`SIDE_MIN`] wide.
fn side_width(app: &App, width: u16) -> u16 {
    let cap = (width * 30 / 100).clamp(30, 56);
    let need = panes::leases_width(app).max(panes::cost_width(app));
    need.saturating_add(2).clamp(SIDE_MIN, cap)
}

/// The main screen: the jobs table takes what its rows need, leaving [`bottom_min`] rows; below
/// it, History beside a side column of the leases and spend panes, sized to what they hold
/// ([`side_width`]): the spend pane takes one line when it has nothing to show, the leases
/// pane what its leases need when it does. When only a few rows are left, the side column is
/// left out (History gets the whole width) unless the leases pane has the focus; then it holds
/// the leases pane alone.
fn main_screen(app: &App, area: Rect, buf: &mut Buffer) {
    let cap = area.height.saturating_sub(bottom_min(area.height));
    let want = u16::try_from(app.jobs.visible.len().max(1) + 3).unwrap_or(u16::MAX);
    let [top, bottom] =
        Layout::vertical([Constraint::Length(want.min(cap)), Constraint::Min(0)]).areas(area);
    jobs::render(app, top, buf);
    let side = bottom.height >= 8 || app.pane == Pane::Leases;
    if !side {
        panes::history(app, bottom, buf);
        return;
    }
    let [left, h] = Layout::horizontal([
        Constraint::Length(side_width(app, bottom.width)),
        Constraint::Min(0),
    ])
    .areas(bottom);
    // Shown only for the focus on a short screen, the leases pane takes the whole column: a
    // focused pane too low for a line would show nothing, not even "no job is leased".
    let lease_rows = if bottom.height < 8 {
        left.height
    } else if panes::spend_shown(app) {
        panes::leases_height(app, left.width, left.height)
    } else {
        left.height.saturating_sub(3)
    };
    let [l, c] = Layout::vertical([Constraint::Length(lease_rows), Constraint::Min(0)]).areas(left);
    panes::leases(app, l, buf);
    panes::cost(app, c, buf);
    panes::history(app, h, buf);
}

/// A bordered block whose border is highlighted when its pane has the focus.
pub(crate) fn pane_block(app: &App, pane: Option<Pane>, title: Line<'static>) -> Block<'static> {
    let focused = pane.is_some_and(|p| p == app.pane);
    let style = if focused {
        Style::new().fg(Color::Cyan)
    } else {
        Style::new().fg(Color::DarkGray)
    };
    Block::default()
        .borders(Borders::ALL)
        .border_style(style)
        .title(title)
}

/// A centred rectangle of at most `w`×`h` inside `area`, cleared.
pub(crate) fn popup(area: Rect, w: u16, h: u16, buf: &mut Buffer) -> Rect {
    let w = w.min(area.width);
    let h = h.min(area.height);
    let r = Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    };
    Clear.render(r, buf);
    r
}

/// The selected row's highlight over the whole of `area`: every cell's own colours and
/// modifiers are dropped first, so the highlight is uniform (and still visible with `NO_COLOR`,
/// where only modifiers survive): reversed when the pane has the focus, bold + underlined else.
pub(crate) fn highlight(buf: &mut Buffer, area: Rect, focused: bool) {
    buf.set_style(area, Style::reset());
    let style = if focused {
        Style::new().add_modifier(Modifier::REVERSED)
    } else {
        Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED)
    };
    buf.set_style(area, style);
}

pub(crate) fn status_style(s: Status) -> Style {
    match s {
        Status::Succeeded => Style::new().fg(Color::Green),
        Status::Failed => Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        Status::Skipped => Style::new().fg(Color::Yellow),
        Status::NoChange => Style::new().fg(Color::Blue),
        Status::Missed => Style::new().fg(Color::Magenta),
        Status::Abandoned => Style::new()
            .fg(Color::LightRed)
            .add_modifier(Modifier::REVERSED),
    }
}

/// `HH:MM:SS` within a day of `now`, else `MM-DD HH:MM` (UTC).
pub(crate) fn when(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    if (t - now).num_seconds().abs() < 86_400 {
        t.format("%H:%M:%S").to_string()
    } else {
        t.format("%m-%d %H:%M").to_string()
    }
}

/// `text` cut to `w` columns with a final `…` when it does not fit, so a cut is visible.
pub(crate) fn elide(text: &str, w: usize) -> std::borrow::Cow<'_, str> {
    // ratatui's own width (no direct unicode-width dependency); only cut cells pay per char.
    let width = |s: &str| ratatui::text::Span::raw(s).width();
    if width(text) <= w || w == 0 {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::new();
    let mut used = 0;
    let mut buf = [0u8; 4];
    for ch in text.chars() {
        let cw = width(ch.encode_utf8(&mut buf));
        if used + cw + 1 > w {
            break;
        }
        used += cw;
        out.push(ch);
    }
    out.push('…');
    std::borrow::Cow::Owned(out)
}

/// A line of styled spans cut to `w` columns, its last one a `…` (in the style of the span it
/// cuts) when anything was cut: a line wider than its row never just stops.
pub(crate) fn elide_line(line: Line<'static>, w: usize) -> Line<'static> {
    if line.width() <= w || w == 0 {
        return line;
    }
    let mut spans = Vec::new();
    let mut left = w;
    for span in line.spans {
        let sw = span.width();
        if sw < left {
            left -= sw;
            spans.push(span);
            continue;
        }
        // This span reaches the edge (more follows it, or it is too wide itself): what fits
        // before the `…`, which takes the last column (`left` ≥ 1 here).
        let cut = elide(&format!("{}…", span.content), left).into_owned();
        spans.push(ratatui::text::Span::styled(cut, span.style));
        break;
    }
    Line::from(spans).style(line.style)
}

/// Money in the console: the one format every surface uses ([`crate::cost::usd`]), so the
/// same amount reads the same here, in `jobs`, `stats`, `history` and the skip reasons.
pub(crate) fn money(x: f64) -> String {
    crate::cost::usd(x)
}

#[cfg(test)]
mod tests;

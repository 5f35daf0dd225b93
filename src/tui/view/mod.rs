//! Views: how the console's state is drawn. `impl Widget for &App` renders the whole screen from
//! [`App`] without cloning it per frame; each pane lives in its own module and only reads state.
//!
//! Owns: layout, text formatting of times/durations/money, colours. Must not touch: state changes
//! (views take `&App`), the store, the clock (they use `app.now`). Every piece of outside text is
//! passed through [`crate::tui::sanitize`] before it reaches the buffer.
//!
//! Decisions: all times are shown in UTC (`HH:MM:SS` when within a day of now, `MM-DD HH:MM`
//! otherwise) so that several operators in different zones read the same screen; below 80×24
//! only "terminal too small" is drawn; the jobs table drops its least useful columns first when
//! narrow (LAST, NEXT, RUNS, SPEND, PASSED, SCHEDULE) and never drops state, NAME or STATUS.

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
            Prompt::ConfirmBulk { pause, jobs } => {
                help::confirm(&dry_run::bulk_question(*pause, jobs), area, buf)
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

fn main_screen(app: &App, area: Rect, buf: &mut Buffer) {
    // The jobs table takes what its rows need, up to 55 % of the body; the rest goes below.
    let cap = area.height.saturating_mul(55) / 100;
    let want = u16::try_from(app.jobs.visible.len().max(1) + 3).unwrap_or(u16::MAX);
    let [top, bottom] =
        Layout::vertical([Constraint::Length(want.min(cap)), Constraint::Min(6)]).areas(area);
    jobs::render(app, top, buf);
    if bottom.width >= 120 {
        let [l, c, h] = Layout::horizontal([
            Constraint::Percentage(30),
            Constraint::Percentage(25),
            Constraint::Percentage(45),
        ])
        .areas(bottom);
        panes::leases(app, l, buf);
        panes::cost(app, c, buf);
        panes::history(app, h, buf);
    } else {
        let [left, h] =
            Layout::horizontal([Constraint::Percentage(42), Constraint::Percentage(58)])
                .areas(bottom);
        let [l, c] =
            Layout::vertical([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(left);
        panes::leases(app, l, buf);
        panes::cost(app, c, buf);
        panes::history(app, h, buf);
    }
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

/// A compact duration: `42s`, `4m10s`, `2h05m`, `3d04h`.
pub(crate) fn dur(secs: i64) -> String {
    let s = secs.max(0);
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else if s < 86_400 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else {
        format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600)
    }
}

/// Money for the console: whole dollars from $100, cents from a cent, and below a cent as many
/// digits as it takes ([`crate::cost::usd`]), so a $0.001 budget is not shown as "$0.00".
pub(crate) fn money(x: f64) -> String {
    if !x.is_finite() {
        "$?".into()
    } else if x.abs() >= 100.0 {
        format!("${x:.0}")
    } else if x == 0.0 {
        // Covers -0.0, which `{:.2}` would print as "$-0.00".
        "$0.00".into()
    } else if x.abs() >= 0.01 {
        format!("${x:.2}")
    } else {
        crate::cost::usd(x)
    }
}

#[cfg(test)]
mod tests;

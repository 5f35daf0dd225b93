//! Footer, `?` help and the trigger confirmation, all built from the one keymap table
//! ([`crate::tui::keymap::KEYMAP`]), so what is shown is what the keys do.
//!
//! Owns: those three overlays. Must not touch: state.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Widget, Wrap};

use super::popup;
use crate::tui::keymap::{self, Scope};
use crate::tui::sanitize;
use crate::tui::state::{App, Mode, Prompt};

pub fn footer(app: &App, area: Rect, buf: &mut Buffer) {
    let key = Style::new().fg(Color::Black).bg(Color::Cyan);
    let mut spans: Vec<Span> = Vec::new();
    let scopes: &[Scope] = match (&app.dialog.prompt, &app.mode) {
        (Prompt::Name(text), _) => {
            spans.push(Span::raw("/"));
            spans.push(Span::styled(
                format!("{}█ ", sanitize::line(text)),
                Style::new().add_modifier(Modifier::BOLD),
            ));
            &[Scope::Input]
        }
        (Prompt::ConfirmTrigger(_) | Prompt::ConfirmCancel(_), _) => &[Scope::Confirm],
        (_, Mode::Diff(_)) => &[Scope::Diff, Scope::Global],
        _ => &[Scope::Global],
    };
    if let Some(n) = &app.notice
        && app.dialog.prompt == Prompt::None
    {
        spans.push(Span::styled(
            format!("» {} ", sanitize::line(n)),
            Style::new().fg(Color::Yellow),
        ));
    }
    for b in keymap::bindings(scopes).filter(|b| b.footer) {
        spans.push(Span::styled(b.label, key));
        spans.push(Span::raw(format!(" {} ", b.short)));
    }
    Line::from(spans).render(area, buf);
}

pub fn confirm(question: &str, area: Rect, buf: &mut Buffer) {
    let r = popup(area, 50, 6, buf);
    Paragraph::new(vec![
        Line::raw(sanitize::line(question).into_owned()),
        Line::styled("y = yes, n/Esc = no", Style::new().fg(Color::DarkGray)),
    ])
    .wrap(Wrap { trim: true })
    .block(
        Block::default()
            .borders(Borders::ALL)
            .border_style(Style::new().fg(Color::Yellow))
            .title(" Confirm "),
    )
    .render(r, buf);
}

/// The help text in two columns: every binding of the keymap, grouped by where it works.
pub fn help_columns() -> (Vec<Line<'static>>, Vec<Line<'static>>) {
    let group = |scope: Scope, title: &'static str, lines: &mut Vec<Line<'static>>| {
        lines.push(Line::styled(
            title,
            Style::new().add_modifier(Modifier::BOLD).fg(Color::Cyan),
        ));
        for b in keymap::bindings(&[scope]) {
            lines.push(Line::from(vec![
                Span::styled(format!("  {:<9}", b.label), Style::new().fg(Color::Yellow)),
                Span::raw(b.help),
            ]));
        }
    };
    let mut left = Vec::new();
    group(Scope::Global, "Everywhere", &mut left);
    let mut right = Vec::new();
    // The popup holds 22 lines at 80×24: what does not fit on the left continues at the top
    // of the right column.
    const LEFT_MAX: usize = 22;
    if left.len() > LEFT_MAX {
        right = left.split_off(LEFT_MAX);
    }
    group(Scope::Diff, "Diff viewer", &mut right);
    group(Scope::Confirm, "Questions (trigger, cancel)", &mut right);
    group(Scope::Input, "Name filter prompt", &mut right);
    let dim = Style::new().fg(Color::DarkGray);
    right.push(Line::raw(""));
    right.push(Line::styled(
        "State marks",
        dim.add_modifier(Modifier::BOLD),
    ));
    right.push(Line::styled("  ● running  ‖ paused", dim));
    right.push(Line::styled("  ✝ retired  ⏸ held (rate limit)", dim));
    right.push(Line::styled("  ! alerted  … queued (no owner yet)", dim));
    right.push(Line::styled("EXECS: every execution. Times UTC.", dim));
    (left, right)
}

pub fn help(area: Rect, buf: &mut Buffer) {
    let (left, right) = help_columns();
    let h = left.len().max(right.len()) as u16 + 2;
    let r = popup(area, 80, h, buf);
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(Style::new().fg(Color::Cyan))
        .title(" Help (? or Esc closes) ");
    let inner = block.inner(r);
    block.render(r, buf);
    let [a, b] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(inner);
    Paragraph::new(left).render(a, buf);
    Paragraph::new(right).render(b, buf);
}

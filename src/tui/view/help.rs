//! Footer, `?` help and the yes/no confirmations, all built from the one keymap table
//! ([`crate::tui::keymap::KEYMAP`]), so what is shown is what the keys do.
//!
//! Owns: those overlays and fitting the footer to the width. Must not touch: state.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Widget, Wrap};

use super::popup;
use crate::text;
use crate::tui::keymap::{self, Scope};
use crate::tui::state::{App, Mode, Prompt, alerts};

/// The footer: the prompt being typed (if any), the notice, then the key hints that fit the
/// width. Hints come from the keymap's footer rows; when they do not all fit, the least
/// important go first ([`keymap::Binding::footer`], highest number first), never the ones
/// marked [`keymap::ALWAYS`] (`? help`, `q quit`). A notice outranks the optional hints: they
/// are dropped until it shows whole, and when even the kept two leave too little room it is cut
/// with `…`, never them.
pub fn footer(app: &App, area: Rect, buf: &mut Buffer) {
    let key = Style::new().fg(Color::Black).bg(Color::Cyan);
    let mut spans: Vec<Span> = Vec::new();
    let scopes: &[Scope] = match (&app.dialog.prompt, &app.mode) {
        (Prompt::Name(text), _) => {
            spans.push(Span::raw("/"));
            spans.push(Span::styled(
                format!("{}█ ", text::line(text)),
                Style::new().add_modifier(Modifier::BOLD),
            ));
            &[Scope::Input]
        }
        _ if app.dialog.scope() == Some(Scope::Confirm) => &[Scope::Confirm],
        (_, Mode::Diff(_)) => &[Scope::Diff, Scope::Global],
        (_, Mode::Main) => &[Scope::Global, Scope::Main],
        // A view (job, run, dry run) shows the keys that work there, not the main screen's.
        _ => &[Scope::Global],
    };
    let width = usize::from(area.width).saturating_sub(spans.iter().map(Span::width).sum());
    // With no notice, a call awaiting approval is said for as long as it waits; with its
    // command only where the whole command fits beside `? help` and `q quit`.
    let approval = || {
        let long = alerts::approval_alert(&app.snap, true)?;
        let kept: usize = fit_hints(scopes, 0).iter().map(|b| hint_width(b)).sum();
        if Span::raw(long.as_str()).width() + 3 + kept <= width {
            Some(long)
        } else {
            alerts::approval_alert(&app.snap, false)
        }
    };
    let notice = app
        .notice
        .clone()
        .or_else(approval)
        .filter(|_| app.dialog.prompt == Prompt::None)
        .map(|n| format!("» {} ", text::line(&n)));
    let notice_w = notice.as_deref().map_or(0, |n| Span::raw(n).width());
    let hints = fit_hints(scopes, width.saturating_sub(notice_w));
    let hints_w: usize = hints.iter().map(|b| hint_width(b)).sum();
    if let Some(n) = notice {
        let room = width.saturating_sub(hints_w);
        let shown = if Span::raw(n.as_str()).width() <= room {
            n
        } else {
            // Cut with `…` and a space before the hints.
            format!("{} ", cut(&n, room.saturating_sub(1)))
        };
        spans.push(Span::styled(shown, Style::new().fg(Color::Yellow)));
    }
    for b in hints {
        spans.push(Span::styled(b.footer_key(), key));
        spans.push(Span::raw(format!(" {} ", b.short)));
    }
    Line::from(spans).render(area, buf);
}

/// Columns one hint takes: `KEY short `.
fn hint_width(b: &keymap::Binding) -> usize {
    Span::raw(b.footer_key()).width() + Span::raw(b.short).width() + 2
}

/// The footer hints of `scopes` that fit in `width` columns: the optional ones in table order,
/// dropped highest [`keymap::Binding::footer`] first (the later row first among equals), then
/// the [`keymap::ALWAYS`] ones, kept whatever the width.
pub fn fit_hints(scopes: &[Scope], width: usize) -> Vec<&'static keymap::Binding> {
    let mut hints: Vec<&keymap::Binding> = if scopes.contains(&Scope::Main) {
        keymap::bindings_in_table_order(scopes).collect()
    } else {
        keymap::bindings(scopes).collect()
    };
    hints.retain(|b| b.footer != keymap::HIDDEN);
    loop {
        let used: usize = hints.iter().map(|b| hint_width(b)).sum();
        if used <= width {
            break;
        }
        let drop = hints
            .iter()
            .enumerate()
            .filter(|(_, b)| b.footer != keymap::ALWAYS)
            .max_by_key(|(i, b)| (b.footer, *i))
            .map(|(i, _)| i);
        match drop {
            Some(i) => {
                hints.remove(i);
            }
            None => break,
        }
    }
    // The kept-always hints last, where the eye finds them: `… ? help q quit`.
    let (always, optional): (Vec<_>, Vec<_>) =
        hints.into_iter().partition(|b| b.footer == keymap::ALWAYS);
    optional.into_iter().chain(always).collect()
}

/// `text` cut to `w` columns with a final `…` when it does not fit (nothing when `w` is 0).
fn cut(text: &str, w: usize) -> String {
    if Span::raw(text).width() <= w {
        return text.to_string();
    }
    let mut out = String::new();
    let mut used = 0;
    for ch in text.chars() {
        let cw = Span::raw(ch.to_string()).width();
        if used + cw + 1 > w {
            break;
        }
        used += cw;
        out.push(ch);
    }
    if w > 0 {
        out.push('…');
    }
    out
}

pub fn confirm(question: &str, area: Rect, buf: &mut Buffer) {
    let r = popup(area, 50, 6, buf);
    Paragraph::new(vec![
        Line::raw(text::line(question).into_owned()),
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
    group(Scope::Main, "Main screen", &mut left);
    let mut right = Vec::new();
    // The popup holds 22 lines at 80×24: what does not fit on the left continues at the top
    // of the right column.
    const LEFT_MAX: usize = 22;
    if left.len() > LEFT_MAX {
        right = left.split_off(LEFT_MAX);
    }
    group(Scope::Diff, "Diff viewer", &mut right);
    group(Scope::Confirm, "Questions (y/n)", &mut right);
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
    right.push(Line::styled("  !‖ alerted and paused", dim));
    right.push(Line::styled("  ? awaiting approval (keys a, x)", dim));
    right.push(Line::styled("RUNS: every execution. Times UTC.", dim));
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

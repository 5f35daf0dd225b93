//! The jobs table, like `systemctl list-timers`: state mark, NAME, SCHEDULE, NEXT, LEFT, LAST,
//! PASSED, STATUS, RUNS, SPEND/BUDGET. Only the rows that fit are formatted, so a store with
//! 10 000 jobs costs the same per frame as one with 20.
//!
//! Owns: column choice by width and row formatting. Must not touch: state.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;

use super::{dur, money, pane_block, status_style, when};
use crate::model::JobRecord;
use crate::snapshot::PendingOp;
use crate::tui::sanitize;
use crate::tui::state::{App, Pane, SortKey};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Col {
    Mark,
    Name,
    Schedule,
    Next,
    Left,
    Last,
    Passed,
    Status,
    Runs,
    Spend,
}

/// Columns in display order with their width; NAME's is its minimum.
const COLS: [(Col, &str, u16); 10] = [
    (Col::Mark, "", 1),
    (Col::Name, "NAME", 14),
    (Col::Schedule, "SCHEDULE", 18),
    (Col::Next, "NEXT", 8),
    (Col::Left, "LEFT", 7),
    (Col::Last, "LAST", 8),
    (Col::Passed, "PASSED", 7),
    (Col::Status, "STATUS", 10),
    (Col::Runs, "RUNS", 5),
    (Col::Spend, "SPEND/BUDGET", 13),
];

/// Dropped first when the table is narrow.
const DROP_ORDER: [Col; 6] = [
    Col::Last,
    Col::Next,
    Col::Runs,
    Col::Spend,
    Col::Passed,
    Col::Schedule,
];

const NAME_MAX: u16 = 32;

/// The columns that fit in `width`, with NAME widened into what is left.
fn layout(width: u16) -> Vec<(Col, &'static str, u16)> {
    let mut cols: Vec<(Col, &'static str, u16)> = COLS.to_vec();
    let total = |c: &[(Col, &str, u16)]| -> u16 {
        c.iter().map(|x| x.2).sum::<u16>() + c.len().saturating_sub(1) as u16
    };
    for drop in DROP_ORDER {
        if total(&cols) <= width {
            break;
        }
        cols.retain(|c| c.0 != drop);
    }
    let spare = width.saturating_sub(total(&cols));
    if let Some(name) = cols.iter_mut().find(|c| c.0 == Col::Name) {
        name.2 += spare.min(NAME_MAX - name.2);
    }
    if let Some(s) = cols.iter_mut().find(|c| c.0 == Col::Schedule) {
        s.2 += spare.saturating_sub(NAME_MAX - 14);
    }
    cols
}

fn mark(app: &App, j: &JobRecord) -> (&'static str, Style) {
    if j.rt.retired {
        ("✝", Style::new().fg(Color::DarkGray))
    } else if j.rt.lease.is_some()
        || app.snap.in_flight.contains(&j.def.name)
        || app.started.contains(&j.def.name)
    {
        ("●", Style::new().fg(Color::Green))
    } else if j.rt.paused || !j.def.enabled {
        ("‖", Style::new().fg(Color::Yellow))
    } else if j.rt.hold_until.is_some_and(|h| h > app.now) {
        ("⏸", Style::new().fg(Color::Magenta))
    } else {
        (" ", Style::new())
    }
}

fn cell(app: &App, j: &JobRecord, col: Col) -> (String, Style) {
    let now = app.now;
    let plain = Style::new();
    let dim = Style::new().fg(Color::DarkGray);
    let none = || ("-".to_string(), dim);
    match col {
        Col::Mark => {
            let (m, s) = mark(app, j);
            (m.to_string(), s)
        }
        Col::Name => (sanitize::line(&j.def.name).into_owned(), plain),
        Col::Schedule => (sanitize::line(&app.schedule_words(j)).into_owned(), plain),
        // The instant the next slot fires (slot + the job's jitter).
        Col::Next => {
            j.rt.next_slot
                .map_or_else(none, |t| (when(j.def.fire_at(t), now), plain))
        }
        Col::Left => {
            j.rt.next_slot
                .map(|t| j.def.fire_at(t))
                .map_or_else(none, |t| {
                    let s = (t - now).num_seconds();
                    if s <= 0 {
                        ("due".into(), Style::new().fg(Color::Yellow))
                    } else {
                        (dur(s), plain)
                    }
                })
        }
        Col::Last => {
            j.rt.last_run_at
                .map_or_else(none, |t| (when(t, now), plain))
        }
        Col::Passed => {
            j.rt.last_run_at
                .map_or_else(none, |t| (dur((now - t).num_seconds()), plain))
        }
        Col::Status => match app.pending_op(&j.def.name) {
            Some(op) => {
                let w = match op {
                    PendingOp::Pausing => "pausing…",
                    PendingOp::Resuming => "resuming…",
                    PendingOp::Triggering => "trigger…",
                };
                (
                    w.into(),
                    Style::new().fg(Color::Cyan).add_modifier(Modifier::ITALIC),
                )
            }
            None => {
                j.rt.last_status
                    .map_or_else(none, |s| (s.as_str().to_string(), status_style(s)))
            }
        },
        Col::Runs => (j.rt.runs.to_string(), plain),
        Col::Spend => {
            let spent = app.job_period_spend(j);
            let q = if j.rt.counters.cost_incomplete {
                "?"
            } else {
                ""
            };
            let text = match j.def.max_cost_usd {
                Some(b) => format!("{}{q}/{}", money(spent), money(b)),
                None => format!("{}{q}", money(spent)),
            };
            let style = match j.def.max_cost_usd {
                Some(b) if spent >= b => Style::new().fg(Color::Red),
                _ => plain,
            };
            (text, style)
        }
    }
}

pub fn render(app: &App, area: Rect, buf: &mut Buffer) {
    let mut title = vec![Span::styled(
        format!(" Jobs {}/{} ", app.visible.len(), app.snap.jobs.len()),
        Style::new().add_modifier(Modifier::BOLD),
    )];
    title.push(Span::raw(format!("sort {} ", app.sort.label())));
    if !app.name_filter.is_empty() {
        title.push(Span::styled(
            format!("/{} ", sanitize::line(&app.name_filter)),
            Style::new().fg(Color::Cyan),
        ));
    }
    if let Some(s) = app.status_filter {
        title.push(Span::styled(format!("[{}] ", s.as_str()), status_style(s)));
    }
    let block = pane_block(app, Some(Pane::Jobs), Line::from(title));
    let inner = block.inner(area);
    block.render(area, buf);
    if inner.height == 0 || inner.width == 0 {
        return;
    }
    let cols = layout(inner.width);
    let head = Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED);
    let sorted = match app.sort {
        SortKey::Name => Col::Name,
        SortKey::Next => Col::Next,
        SortKey::Last => Col::Last,
        SortKey::Status => Col::Status,
        SortKey::Runs => Col::Runs,
        SortKey::Spend => Col::Spend,
    };
    let mut x = inner.x;
    for (col, name, w) in &cols {
        let style = if *col == sorted {
            head.fg(Color::Cyan)
        } else {
            head
        };
        buf.set_stringn(x, inner.y, name, *w as usize, style);
        x = x.saturating_add(w + 1);
    }
    let rows = inner.height.saturating_sub(1) as usize;
    if app.visible.is_empty() {
        let msg = if app.snap.jobs.is_empty() {
            "no jobs in the store: add some to the jobs file and apply it"
        } else {
            "no job matches the filter (Esc clears)"
        };
        if rows > 0 {
            buf.set_stringn(
                inner.x,
                inner.y + 1,
                msg,
                inner.width as usize,
                Style::new().fg(Color::DarkGray),
            );
        }
        return;
    }
    let offset = if app.selected < rows {
        0
    } else {
        app.selected + 1 - rows
    };
    for (line, &idx) in app.visible.iter().skip(offset).take(rows).enumerate() {
        let Some(j) = app.snap.jobs.get(idx) else {
            continue;
        };
        let y = inner.y + 1 + line as u16;
        let selected = offset + line == app.selected;
        if selected {
            let style = if app.pane == Pane::Jobs {
                Style::new().add_modifier(Modifier::REVERSED)
            } else {
                Style::new()
                    .add_modifier(Modifier::BOLD)
                    .bg(Color::DarkGray)
            };
            buf.set_style(Rect::new(inner.x, y, inner.width, 1), style);
        }
        let mut x = inner.x;
        for (col, _, w) in &cols {
            let (text, style) = cell(app, j, *col);
            buf.set_stringn(x, y, text, *w as usize, style);
            x = x.saturating_add(w + 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrow_tables_keep_state_name_and_status() {
        for w in [20u16, 40, 78, 118, 200] {
            let cols = layout(w);
            let ids: Vec<Col> = cols.iter().map(|c| c.0).collect();
            assert!(
                ids.contains(&Col::Mark) && ids.contains(&Col::Name) && ids.contains(&Col::Status)
            );
            if w >= 78 {
                assert!(
                    ids.contains(&Col::Schedule) && ids.contains(&Col::Left),
                    "w={w}"
                );
            }
            if w >= 118 {
                assert_eq!(ids.len(), COLS.len(), "all columns at {w}");
            }
        }
    }

    /// Issue 16 item 3: NEXT and LEFT show when the slot fires (slot + jitter), not the slot.
    #[test]
    fn next_and_left_show_the_jittered_fire_instant() {
        let (mut snap, now) = crate::tui::testdata::fixed();
        let j = &mut snap.jobs[0];
        let slot = now + chrono::Duration::seconds(60);
        j.rt.next_slot = Some(slot);
        j.def.jitter_seconds = 3000.0;
        let fire = j.def.fire_at(slot);
        assert!(
            fire > slot + chrono::Duration::seconds(1),
            "this slot has an offset"
        );
        let rec = j.clone();
        let app = App::new(std::sync::Arc::new(snap), now);
        assert_eq!(cell(&app, &rec, Col::Next).0, when(fire, now));
        assert_eq!(
            cell(&app, &rec, Col::Left).0,
            dur((fire - now).num_seconds())
        );
    }
}

//! The three lower panes: leases (who holds what, and whether it is stuck or foreign), cost
//! (spend per hour over 24 h and the top spenders) and the history stream (newest first, one row
//! per history row, the status word always written so colour is never the only signal). While
//! History has the focus, the selected row's whole text is shown wrapped under the rows (a
//! row's line shows only what fits); Enter opens the whole run.
//!
//! Owns: drawing those panes and how tall the leases pane needs to be. Must not touch: state.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Sparkline, Widget};

use super::{elide_line, money, pane_block, status_style, when};
use crate::model::HistoryRow;
use crate::text;
use crate::tui::state::{App, Pane};

/// Draw `line` at (`x`, `y`) in `width` columns, ending in `…` when it is cut.
fn put(buf: &mut Buffer, x: u16, y: u16, line: Line<'static>, width: u16) {
    buf.set_line(x, y, &elide_line(line, usize::from(width)), width);
}

/// Rows the leases pane takes in a side column `width` × `height`: three (a line saying none)
/// without leases, else what its leases need (two lines each when the column is tall enough,
/// as [`leases`] draws them), leaving three rows to the spend pane below.
pub fn leases_height(app: &App, width: u16, height: u16) -> u16 {
    let n = u16::try_from(app.leases().len()).unwrap_or(u16::MAX).max(1);
    // Two lines a lease (owner; expiry, renewal, claim) when the column is tall enough.
    let two = n.saturating_mul(2).saturating_add(2);
    let need = if two.saturating_add(3) <= height || width >= 60 {
        two
    } else {
        n.saturating_add(2)
    };
    need.min(height.saturating_sub(3)).max(3).min(height)
}

pub fn leases(app: &App, area: Rect, buf: &mut Buffer) {
    let leases = app.leases();
    let block = pane_block(
        app,
        Some(Pane::Leases),
        Line::from(format!(" Leases {} ", leases.len())),
    );
    let inner = block.inner(area);
    block.render(area, buf);
    if inner.height == 0 {
        return;
    }
    if leases.is_empty() {
        Span::styled("no job is leased", Style::new().fg(Color::DarkGray)).render(inner, buf);
        return;
    }
    // Two lines per lease when there is room, else one compact line each.
    let per = if inner.height as usize >= 2 * leases.len() || inner.width >= 60 {
        2usize
    } else {
        1
    };
    let fit = (inner.height as usize / per).max(1);
    let offset = app.leases.sel.saturating_sub(fit - 1);
    let now = app.now;
    for (i, j) in leases.iter().enumerate().skip(offset).take(fit) {
        let Some(l) = &j.rt.lease else { continue };
        let y = inner.y + ((i - offset) * per) as u16;
        let expired = l.lease_until <= now;
        let foreign = l.owner != app.snap.owner;
        let owner_style = if foreign {
            Style::new().fg(Color::Yellow)
        } else {
            Style::new().fg(Color::Green)
        };
        let sel = app.pane == Pane::Leases && i == app.leases.sel;
        let name_style = if sel {
            Style::new().add_modifier(Modifier::REVERSED)
        } else {
            Style::new().add_modifier(Modifier::BOLD)
        };
        let name = Span::styled(text::line(&j.def.name).into_owned(), name_style);
        let owner = Span::styled(text::line(&l.owner).into_owned(), owner_style);
        let whose = Span::raw(if foreign { " (other)" } else { " (this)" });
        let exp = if expired {
            Span::styled(
                format!(
                    "EXPIRED {} ago",
                    crate::when::span_secs((now - l.lease_until).num_seconds())
                ),
                Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
            )
        } else {
            Span::raw(format!(
                "expires in {}",
                crate::when::span_secs((l.lease_until - now).num_seconds())
            ))
        };
        let renewed = Span::raw(format!(
            " renewed {}",
            crate::when::passed(l.last_renewed, now)
        ));
        if per == 1 {
            let line = Line::from(vec![
                name,
                Span::raw(" "),
                exp,
                Span::raw(" "),
                owner,
                whose,
            ]);
            put(buf, inner.x, y, line, inner.width);
            continue;
        }
        // The owner is elided in the middle of its id rather than losing "(this)/(other)".
        let room = (inner.width as usize).saturating_sub(name.width() + 1 + whose.width());
        let owner = if owner.width() > room && room > 1 {
            let keep: String = owner.content.chars().take(room - 1).collect();
            Span::styled(format!("{keep}…"), owner_style)
        } else {
            owner
        };
        let l1 = Line::from(vec![name, Span::raw(" "), owner, whose]);
        // Whole parts only, most telling first: the expiry, then the renewal, then the claim.
        let mut parts = vec![Span::raw(" "), exp];
        let mut used: usize = parts.iter().map(|s| s.width()).sum();
        let claimed = Span::raw(format!(" claimed {}", when(l.claimed_at, now)));
        for extra in [renewed, claimed] {
            if used + extra.width() <= inner.width as usize {
                used += extra.width();
                parts.push(extra);
            }
        }
        let l2 = Line::from(parts);
        put(buf, inner.x, y, l1, inner.width);
        if y + 1 < inner.y + inner.height {
            put(buf, inner.x, y + 1, l2, inner.width);
        }
    }
}

/// Columns the leases pane's content needs (borders not counted): its longest lease's two
/// lines as [`leases`] draws them, or "no job is leased".
pub fn leases_width(app: &App) -> u16 {
    let now = app.now;
    let w = |s: &str| u16::try_from(Span::raw(s).width()).unwrap_or(u16::MAX);
    let mut need = w("no job is leased");
    for j in app.leases() {
        let Some(l) = &j.rt.lease else { continue };
        let whose = if l.owner != app.snap.owner {
            " (other)"
        } else {
            " (this)"
        };
        let first = format!(
            "{} {}{whose}",
            text::line(&j.def.name),
            text::line(&l.owner)
        );
        let exp = lease_expiry(l.lease_until, now);
        let second = format!(
            " {exp} renewed {} claimed {}",
            crate::when::passed(l.last_renewed, now),
            when(l.claimed_at, now)
        );
        need = need.max(w(&first)).max(w(&second));
    }
    need
}

/// Whether the spend pane has anything to show: money spent in the last 24 h or this period.
/// Without, it shrinks to one line and gives its room to the panes that have content.
pub fn spend_shown(app: &App) -> bool {
    let s = &app.snap;
    s.spend_per_hour.iter().any(|x| x.is_finite() && *x > 0.0)
        || (s.period_spend_usd.is_finite() && s.period_spend_usd > 0.0)
}

/// How many top spenders the spend pane lists at most (a tall column shows this many).
const TOP_SPENDERS: usize = 8;

/// Columns the spend pane's content needs (borders not counted): its title, the 24 h
/// sparkline and the top spenders' lines; "no spend in 24 h" when it has nothing to show.
pub fn cost_width(app: &App) -> u16 {
    let w = |s: &str| u16::try_from(Span::raw(s).width()).unwrap_or(u16::MAX);
    if !spend_shown(app) {
        return w(" Spend/h 24h ");
    }
    let mut need = w(&cost_title(app)).max(24);
    for (v, i) in top_spenders(app, TOP_SPENDERS) {
        let line = format!("{:>8} {}", money(v), text::line(&app.snap.jobs[i].def.name));
        need = need.max(w(&line));
    }
    need
}

fn cost_title(app: &App) -> String {
    let max = app
        .snap
        .spend_per_hour
        .iter()
        .copied()
        .filter(|x| x.is_finite())
        .fold(0.0f64, f64::max);
    format!(" Spend/h 24h, max {} ", money(max))
}

/// The `k` jobs that spent most this period, most first, as (spend, index in the snapshot):
/// those derived with the snapshot, or a walk over every job for a pane taller than they are.
fn top_spenders(app: &App, k: usize) -> Vec<(f64, usize)> {
    match app.derived.top(k) {
        Some(top) => top.to_vec(),
        None => crate::tui::state::top_spenders(&app.snap.jobs, &app.period_key, k),
    }
}

pub fn cost(app: &App, area: Rect, buf: &mut Buffer) {
    let s = &app.snap;
    if !spend_shown(app) {
        let block = pane_block(app, None, Line::from(" Spend/h 24h "));
        let inner = block.inner(area);
        block.render(area, buf);
        Span::styled("no spend in 24 h", Style::new().fg(Color::DarkGray)).render(inner, buf);
        return;
    }
    let block = pane_block(app, None, Line::from(cost_title(app)));
    let inner = block.inner(area);
    block.render(area, buf);
    if inner.height == 0 {
        return;
    }
    let spark_h = if inner.height >= 6 { 3 } else { 1 };
    let [spark, top] =
        Layout::vertical([Constraint::Length(spark_h), Constraint::Min(0)]).areas(inner);
    // Micro-dollars, so cents-sized hours still show as bars.
    let data: Vec<u64> = s
        .spend_per_hour
        .iter()
        .map(|x| {
            if x.is_finite() && *x > 0.0 {
                (x * 1e6) as u64
            } else {
                0
            }
        })
        .collect();
    Sparkline::default()
        .data(&data)
        .style(Style::new().fg(Color::Yellow))
        .render(spark, buf);
    // Top spenders this period.
    let best = top_spenders(app, top.height as usize);
    if best.is_empty() {
        Span::styled("no spend this period", Style::new().fg(Color::DarkGray)).render(top, buf);
    }
    for (n, (v, i)) in best.iter().enumerate() {
        let name = text::line(&s.jobs[*i].def.name).into_owned();
        let line = Line::from(vec![
            Span::styled(format!("{:>8} ", money(*v)), Style::new().fg(Color::Yellow)),
            Span::raw(name),
        ]);
        put(buf, top.x, top.y + n as u16, line, top.width);
    }
}

/// One history row as a line: time, status word, job, then the most telling text.
pub(crate) fn history_line(r: &HistoryRow, now: chrono::DateTime<chrono::Utc>) -> Line<'static> {
    let detail = row_detail(r);
    let mut spans = vec![
        Span::styled(
            format!("{} ", when(r.finished_at, now)),
            Style::new().fg(Color::DarkGray),
        ),
        Span::styled(format!("{:<9}", r.status.as_str()), status_style(r.status)),
        Span::raw(" "),
        Span::styled(
            text::line(&r.job).into_owned(),
            Style::new().add_modifier(Modifier::BOLD),
        ),
    ];
    if let Some(n) = r.slots_count.filter(|n| *n > 1) {
        spans.push(Span::raw(format!(" ×{n}")));
    }
    // Runs an operator asked for, and recovery re-offers, are marked: they are not the schedule.
    if r.trigger != crate::model::Trigger::Schedule {
        spans.push(Span::styled(
            format!(" [{}]", r.trigger.as_str()),
            Style::new().fg(Color::Cyan),
        ));
    }
    if r.stale_lease {
        spans.push(Span::styled(" stale-lease", Style::new().fg(Color::Red)));
    }
    if r.cost_usd > 0.0 {
        spans.push(Span::styled(
            format!(" {}", money(r.cost_usd)),
            Style::new().fg(Color::Yellow),
        ));
    }
    if !detail.is_empty() {
        // Only the start of a long reply is drawn; no need to sanitise 8000 chars per frame.
        spans.push(Span::raw(" "));
        spans.push(Span::raw(detail));
    }
    Line::from(spans)
}

/// The most telling text of a row (error, else reason, else result), its start only.
fn row_detail(r: &HistoryRow) -> String {
    let detail = r
        .error
        .as_deref()
        .or(r.reason.as_deref())
        .or(r.result.as_deref())
        .unwrap_or("");
    let head: String = detail.chars().take(200).collect();
    text::line(&head).into_owned()
}

pub fn history(app: &App, area: Rect, buf: &mut Buffer) {
    let mut title = vec![Span::styled(
        " History ",
        Style::new().add_modifier(Modifier::BOLD),
    )];
    if let Some(j) = &app.history.job {
        title.push(Span::styled(
            format!("job {} ", text::line(j)),
            Style::new().fg(Color::Cyan),
        ));
    }
    // The name filter narrows these rows too: said as the Jobs title says it.
    if !app.filters.name.is_empty() {
        title.push(Span::styled(
            format!("/{} ", text::line(&app.filters.name)),
            Style::new().fg(Color::Cyan),
        ));
    }
    if let Some(s) = app.filters.status {
        title.push(Span::styled(format!("[{}] ", s.as_str()), status_style(s)));
    }
    let block = pane_block(app, Some(Pane::History), Line::from(title));
    let mut inner = block.inner(area);
    block.render(area, buf);
    if inner.height == 0 {
        return;
    }
    let focused = app.pane == Pane::History;
    // The selected row's whole text, wrapped, under the rows while History has the focus.
    if focused
        && inner.height >= 8
        && let Some(r) = app.selected_run()
    {
        let h = (inner.height / 3).clamp(3, 8);
        let [rows, detail] =
            Layout::vertical([Constraint::Min(0), Constraint::Length(h)]).areas(inner);
        selected_detail(r, detail, buf);
        inner = rows;
    }
    // Narrow but tall (120×40): two lines per row, so an error's variable name is not cut.
    let per: usize = if inner.width < 80 && inner.height >= 16 {
        2
    } else {
        1
    };
    let fit = (inner.height as usize / per).max(1);
    let sel = app.history.sel;
    let offset = sel.saturating_sub(fit - 1);
    let mut any = false;
    for (n, r) in app.history_rows().skip(offset).take(fit).enumerate() {
        any = true;
        let y = inner.y + (n * per) as u16;
        if per == 2 {
            let mut head = r.clone();
            head.error = None;
            head.reason = None;
            head.result = None;
            put(buf, inner.x, y, history_line(&head, app.now), inner.width);
            let detail = Line::from(vec![Span::raw("  "), Span::raw(row_detail(r))]);
            put(buf, inner.x, y + 1, detail, inner.width);
        } else {
            put(buf, inner.x, y, history_line(r, app.now), inner.width);
        }
        if focused && offset + n == sel {
            let rows = Rect::new(inner.x, y, inner.width, per as u16);
            super::highlight(buf, rows, true);
        }
    }
    if !any {
        let msg = if app.history.loading {
            "loading…"
        } else {
            "no history rows"
        };
        Span::styled(msg, Style::new().fg(Color::DarkGray)).render(inner, buf);
    }
}

/// Most characters of a row's text the detail area wraps per frame (it shows a few lines).
const DETAIL_CHARS: usize = 2000;

/// The selected row's whole text (reason, error, result), wrapped, under a rule naming the
/// run; cut with a pointer to the run view when it does not fit.
fn selected_detail(r: &HistoryRow, area: Rect, buf: &mut Buffer) {
    let dim = Style::new().fg(Color::DarkGray);
    if area.height == 0 {
        return;
    }
    let head = format!("── {} {} run {} ", r.job, r.status.as_str(), r.run_id);
    let rule = format!(
        "{head}{}",
        "─".repeat(usize::from(area.width).saturating_sub(head.chars().count()))
    );
    buf.set_line(
        area.x,
        area.y,
        &Line::styled(text::line(&rule).into_owned(), dim),
        area.width,
    );
    let mut parts: Vec<&str> = Vec::new();
    for t in [r.reason.as_deref(), r.error.as_deref(), r.result.as_deref()]
        .into_iter()
        .flatten()
        .map(str::trim)
    {
        if !t.is_empty() && !parts.iter().any(|p| p.contains(t)) {
            parts.push(t);
        }
    }
    let text: String = if parts.is_empty() {
        "(no text)".to_string()
    } else {
        parts.join(" · ").chars().take(DETAIL_CHARS).collect()
    };
    let lines = wrap(&text::line(&text), usize::from(area.width));
    let room = usize::from(area.height - 1);
    let cut = lines.len() > room;
    let shown = if cut { room.saturating_sub(1) } else { room };
    for (i, l) in lines.iter().take(shown).enumerate() {
        buf.set_string(area.x, area.y + 1 + i as u16, l, Style::new());
    }
    if cut && room > 0 {
        let y = area.y + u16::try_from(room).unwrap_or(0);
        buf.set_string(area.x, y, "… (Enter: the whole run)", dim);
    }
}

/// `text` (one line) wrapped to `width` columns at spaces; a word wider than a line is split.
pub(super) fn wrap(text: &str, width: usize) -> Vec<String> {
    let cw = |c: char| Span::raw(c.to_string()).width();
    let mut out = Vec::new();
    if width == 0 {
        return out;
    }
    let (mut line, mut used) = (String::new(), 0usize);
    for word in text.split(' ') {
        let ww: usize = word.chars().map(cw).sum();
        let sep = usize::from(!line.is_empty());
        if used + sep + ww <= width {
            if sep == 1 {
                line.push(' ');
            }
            line.push_str(word);
            used += sep + ww;
            continue;
        }
        if !line.is_empty() {
            out.push(std::mem::take(&mut line));
            used = 0;
        }
        for c in word.chars() {
            if used + cw(c) > width {
                out.push(std::mem::take(&mut line));
                used = 0;
            }
            line.push(c);
            used += cw(c);
        }
    }
    if !line.is_empty() {
        out.push(line);
    }
    out
}

/// A lease's end as the console words it: `expires in 12s`, or `EXPIRED 3s ago` once passed.
pub(super) fn lease_expiry(
    until: chrono::DateTime<chrono::Utc>,
    now: chrono::DateTime<chrono::Utc>,
) -> String {
    if until <= now {
        format!(
            "EXPIRED {} ago",
            crate::when::span_secs((now - until).num_seconds())
        )
    } else {
        format!(
            "expires in {}",
            crate::when::span_secs((until - now).num_seconds())
        )
    }
}

#[cfg(test)]
mod wrap_tests {
    use super::wrap;

    #[test]
    fn wrapping_breaks_at_spaces_and_splits_long_words() {
        assert_eq!(wrap("aa bb cc", 5), ["aa bb", "cc"]);
        assert_eq!(wrap("abcdefgh", 3), ["abc", "def", "gh"]);
        assert_eq!(wrap("x abcdef", 4), ["x", "abcd", "ef"]);
        assert!(wrap("anything", 0).is_empty());
        let long = "API key env var OPENAI_API_KEY is not set (or is empty); no request was made";
        let lines = wrap(long, 20);
        assert!(lines.iter().all(|l| l.chars().count() <= 20), "{lines:?}");
        assert_eq!(lines.join(" "), long);
    }
}

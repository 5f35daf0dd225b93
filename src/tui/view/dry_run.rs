//! The dry-run view (`D`): the text of `cronsole dry-run NAME` for the job — the gate's answer,
//! the exact prompt, the model and its price ceiling, the budgets and the sinks — scrollable,
//! every line sanitised; and the question the `P` prompt asks.
//!
//! Owns: the view's title and lines (drawn and scrolled by `detail::render`). Must not touch:
//! state.

use ratatui::style::{Color, Style};
use ratatui::text::Line;

use crate::text;
use crate::tui::state::App;

/// The dry-run view's title and lines, wrapped to `width` columns: a reason the run would
/// fail is read whole, never cut at the border.
pub fn content(app: &App, job: &str, width: usize) -> (Line<'static>, Vec<Line<'static>>) {
    let title = Line::from(format!(
        " Dry run of {} — no model call, no delivery (Esc back) ",
        text::line(job)
    ));
    let lines: Vec<Line<'static>> = match &app.dry_run {
        Some((j, Ok(text))) if j == job => text
            .lines()
            .flat_map(|l| {
                // Wrapped lines keep the line's indent, and two more under a list item.
                let l = text::line(l).into_owned();
                let body = l.trim_start();
                let indent = l.len() - body.len();
                let more = if body.starts_with("- ") { 2 } else { 0 };
                let pad = |n: usize| " ".repeat(n);
                let mut out = Vec::new();
                for (i, w) in super::panes::wrap(body, width.saturating_sub(indent + more).max(8))
                    .into_iter()
                    .enumerate()
                {
                    let n = if i == 0 { indent } else { indent + more };
                    out.push(format!("{}{w}", pad(n)));
                }
                if out.is_empty() {
                    out.push(l);
                }
                out
            })
            .map(Line::raw)
            .collect(),
        Some((j, Err(e))) if j == job => {
            super::panes::wrap(&format!("dry run failed: {}", text::line(e)), width)
                .into_iter()
                .map(|l| Line::styled(l, Style::new().fg(Color::Red)))
                .collect()
        }
        _ => vec![Line::styled(
            "running the gates and assembling the prompt…",
            Style::new().fg(Color::DarkGray),
        )],
    };
    (title, lines)
}

/// "Pause 3 jobs shown (a, b, c)?" — at most five names, then how many more.
pub fn bulk_question(pause: bool, jobs: &[String]) -> String {
    const NAMES: usize = 5;
    let mut names: Vec<String> = jobs
        .iter()
        .take(NAMES)
        .map(|j| text::line(j).into_owned())
        .collect();
    if jobs.len() > NAMES {
        names.push(format!("and {} more", jobs.len() - NAMES));
    }
    let verb = if pause { "Pause" } else { "Resume" };
    format!(
        "{verb} {} job(s) the filters show ({})? Every owner honours it.",
        jobs.len(),
        names.join(", ")
    )
}

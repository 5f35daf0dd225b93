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

/// The dry-run view's title and lines.
pub fn content(app: &App, job: &str) -> (Line<'static>, Vec<Line<'static>>) {
    let title = Line::from(format!(
        " Dry run of {} — no model call, no delivery (Esc back) ",
        text::line(job)
    ));
    let lines: Vec<Line<'static>> = match &app.dry_run {
        Some((j, Ok(text))) if j == job => text
            .lines()
            .map(|l| Line::raw(text::line(l).into_owned()))
            .collect(),
        Some((j, Err(e))) if j == job => vec![Line::styled(
            format!("dry run failed: {}", text::line(e)),
            Style::new().fg(Color::Red),
        )],
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

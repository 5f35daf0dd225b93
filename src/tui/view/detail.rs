//! Full-body views for one job: the detail (schedule in words, next 10 slots, last 10 runs,
//! notepad, lease, counters), the monitor diff viewer (coloured unified diff of one run,
//! `[`/`]` to walk older/newer diffs, scrolling), and one run opened from the History pane (every
//! field of its row: status, trigger, slot(s), attempts, owner, tokens, cost, delivery, then the
//! per-attempt breakdown — start, end, outcome, error, tokens and cost of each attempt, for rows
//! that carry one — then the full error, result and diff, sanitised, and a tool-using run's
//! transcript (`transcript`), all scrollable).
//!
//! Owns: drawing those views, and measuring how far they can scroll ([`scroll_max`], asked by the
//! event loop before each frame). Must not touch: state (the scroll is clamped here when drawn,
//! never written back).

use chrono::{DateTime, Utc};
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Widget};

use super::panes::history_line;
use super::{money, pane_block, status_style, when};
use crate::model::{Action, AttemptOutcome, Gate, HistoryRow, JobRecord, MonitorSource};
use crate::text;
use crate::tui::state::{App, Mode};

/// The open full-body view's title and lines for a body `width` columns wide inside its
/// border (`None` on the main screen).
pub fn content(app: &App, width: u16) -> Option<(Line<'static>, Vec<Line<'static>>)> {
    match &app.mode {
        Mode::Main => None,
        Mode::Detail(job) => Some(detail(app, job)),
        Mode::Diff(job) => Some(diff(app, job)),
        Mode::Run(row) => Some(run(app, row, usize::from(width))),
        Mode::DryRun(job) => Some(super::dry_run::content(app, job, usize::from(width))),
    }
}

/// The largest useful scroll of the open view in `area` (the body), `None` on the main screen.
pub fn scroll_max(app: &App, area: Rect) -> Option<usize> {
    let inner = pane_block(app, None, Line::raw("")).inner(area);
    let (_, lines) = content(app, inner.width)?;
    let inner_h = inner.height as usize;
    Some(lines.len().saturating_sub(inner_h))
}

/// Draw the open full-body view, scrolled (clamped to its content here; state is not written).
pub fn render(app: &App, area: Rect, buf: &mut Buffer) {
    let width = pane_block(app, None, Line::raw("")).inner(area).width;
    let Some((title, lines)) = content(app, width) else {
        return;
    };
    // A title wider than the border (a long job name and a run id at 80 columns) ends in `…`.
    let block = pane_block(app, None, super::elide_line(title, usize::from(width)));
    let inner_h = block.inner(area).height as usize;
    let max = lines.len().saturating_sub(inner_h);
    let scroll = app.viewer.scroll.min(max).min(u16::MAX as usize) as u16;
    // A line wider than the view (a last run's error in the job view) ends in `…` too; the run
    // view shows the whole text.
    let lines: Vec<Line<'static>> = lines
        .into_iter()
        .map(|l| super::elide_line(l, usize::from(width)))
        .collect();
    Paragraph::new(lines)
        .block(block)
        .scroll((scroll, 0))
        .render(area, buf);
}

fn heading(s: &str) -> Line<'static> {
    Line::styled(
        s.to_string(),
        Style::new().add_modifier(Modifier::BOLD).fg(Color::Cyan),
    )
}

/// A `key value` line of the detail view.
fn kv(k: &str, v: String) -> Line<'static> {
    Line::from(vec![
        Span::styled(format!("{k:<10}"), Style::new().fg(Color::DarkGray)),
        Span::raw(v),
    ])
}

/// The job's state word with why it is so: retired or paused (and why), queued, cancelling.
fn state_text(j: &JobRecord, now: DateTime<Utc>) -> String {
    let mut state = j.state_word(now).to_string();
    if let Some(r) = &j.rt.retired_reason {
        state.push_str(&format!(" ({})", text::line(r)));
    }
    if let Some(r) = j.rt.pause_reason.as_deref().filter(|_| j.rt.paused) {
        state.push_str(&format!(" — {}", text::line(r)));
    }
    let queued = j.rt.queue.len() + usize::from(j.rt.trigger_requested_at.is_some());
    if queued > 0 {
        state.push_str(&format!(", {queued} queued (waiting for an owner)"));
    }
    if j.rt
        .lease
        .as_ref()
        .is_some_and(|l| l.cancel_requested_at.is_some())
    {
        state.push_str(", cancelling");
    }
    state
}

/// Every live run's lease (`overlap: allow` may have several), and the overlap policy.
fn lease_lines(j: &JobRecord, now: DateTime<Utc>, lines: &mut Vec<Line<'static>>) {
    if j.rt.lease.is_none() {
        lines.push(Line::raw("  none"));
    }
    // Every live run's lease (`overlap: allow` may have several).
    for l in j.rt.leases() {
        {
            let exp = super::panes::lease_expiry(l.lease_until, now);
            lines.push(Line::raw(format!(
                "  {} claimed {} {} renewed {} (run {}, trigger {})",
                text::line(&l.owner),
                when(l.claimed_at, now),
                exp,
                crate::when::passed(l.last_renewed, now),
                l.run_id,
                l.trigger.as_str()
            )));
        }
    }
    if !j.def.overlap.is_skip() {
        lines.push(kv("overlap", overlap_words(j, now)));
    }
}

/// A slot as the job view lists it (UTC, its fraction of a second as `jobs` shows it).
fn slot_text(t: DateTime<Utc>) -> String {
    t.format(&format!("%Y-%m-%d %H:%M:%S{}", crate::when::fraction(t)))
        .to_string()
}

/// The next 10 slots, each at the instant it fires (slot + the job's jitter).
fn slot_lines(j: &JobRecord, now: DateTime<Utc>, lines: &mut Vec<Line<'static>>) {
    match (j.rt.next_slot, j.def.compile(j.rt.anchor)) {
        (None, _) => lines.push(Line::raw("  none: no more slots")),
        (Some(first), Ok(c)) => {
            let mut slots = vec![first];
            while slots.len() < 10.min(j.runs_left()) {
                let Some(n) = slots.last().and_then(|t| c.next_after(*t)) else {
                    break;
                };
                if j.def.until.is_some_and(|u| n > u) {
                    break;
                }
                slots.push(n);
            }
            if j.rt.paused {
                lines.push(Line::raw("  (paused: these will not fire until resumed)"));
            }
            // Each slot is shown at the instant it fires (slot + the job's jitter), with the
            // fraction of a second an `at:` instant or a first run at the store instant has.
            for s in slots.into_iter().map(|s| j.fire_at(s)) {
                lines.push(Line::raw(format!(
                    "  {}  in {}",
                    slot_text(s),
                    crate::when::span_secs((s - now).num_seconds())
                )));
            }
        }
        (Some(first), Err(e)) => {
            lines.push(Line::raw(format!("  {}", slot_text(first))));
            lines.push(Line::raw(format!("  (later slots unknown: {e})")));
        }
    }
}

fn detail(app: &App, job: &str) -> (Line<'static>, Vec<Line<'static>>) {
    let title = Line::from(format!(" Job {} (Esc back) ", text::line(job)));
    let j = match app.record(job) {
        Some(Some(j)) => j,
        Some(None) => return (title, vec![Line::raw("this job is no longer in the store")]),
        None => return (title, vec![Line::raw("reading the job from the store…")]),
    };
    // The table's view of the same job (schedule words, spend and executions as it counts them).
    let row = crate::snapshot::JobRow::of(j);
    let now = app.now;
    let mut lines: Vec<Line<'static>> = Vec::new();
    lines.push(kv("state", state_text(j, now)));
    lines.push(kv(
        "schedule",
        format!(
            "{} — written \"{}\", tz {}",
            text::line(&app.schedule_words(&row)),
            text::line(&j.def.schedule_text),
            text::line(&j.def.tz)
        ),
    ));
    // Where the slots sit, short enough for 80 columns: a grid from when the job was stored, or
    // the clock.
    match j.def.schedule {
        crate::schedule::ScheduleSpec::Every { every_seconds } => {
            let clock = crate::schedule::clock_form(every_seconds)
                .map(|c| format!("; on the clock: {c}"))
                .unwrap_or_default();
            lines.push(kv(
                "",
                format!("grid from {} (first stored){clock}", when(j.rt.anchor, now)),
            ));
        }
        crate::schedule::ScheduleSpec::Cron { .. } => lines.push(kv("", "on the clock".into())),
        _ => {}
    }
    let action = match &j.def.action {
        Action::Agent { agent, .. } => format!("agent {}", text::line(agent)),
        Action::Command { command, .. } => format!("command {}", text::line(command)),
    };
    lines.push(kv("action", action));
    if let Some(g) = &j.def.gate {
        let gate = match g {
            Gate::PreRun { command } => format!("pre_run {}", text::line(command)),
            Gate::Monitor {
                source: MonitorSource::Command { command },
            } => format!("monitor command {}", text::line(command)),
            Gate::Monitor {
                source: MonitorSource::Url { url, .. },
            } => format!("monitor url {}", text::line(url)),
        };
        lines.push(kv("gate", gate));
    }
    let c = &j.rt.counters;
    lines.push(kv(
        "spend",
        format!(
            "{} this period{}, {} total{}; runs {}{}",
            money(app.job_period_spend(&row)),
            j.def
                .max_cost_usd
                .map(|b| format!(" of {}", money(b)))
                .unwrap_or_default(),
            money(c.total_cost_usd),
            if c.cost_incomplete {
                " (incomplete)"
            } else {
                ""
            },
            App::executions(&row),
            j.def
                .max_runs
                .map(|m| format!(" (max_runs {}/{m})", j.rt.runs))
                .unwrap_or_default()
        ),
    ));

    if let Some(f) = &app.snap.forecast {
        let text = match f.jobs.iter().find(|p| p.job == j.def.name) {
            Some(p) => format!(
                "{} more by {} ({})",
                money(p.projected_usd),
                f.until.format("%m-%d %H:%M UTC"),
                p.breakdown(money)
            ),
            None => "nothing more this period".to_string(),
        };
        lines.push(kv("forecast", text));
    }

    lines.push(Line::raw(""));
    lines.push(heading("Lease"));
    lease_lines(j, now, &mut lines);

    lines.push(Line::raw(""));
    lines.push(heading("Next 10 slots (UTC)"));
    slot_lines(j, now, &mut lines);

    lines.push(Line::raw(""));
    lines.push(heading("Last 10 runs"));
    let mut any = false;
    for r in app.runs_of(job).take(10) {
        any = true;
        let mut l = history_line(r, now);
        l.spans.insert(0, Span::raw("  "));
        lines.push(l);
    }
    if !any {
        lines.push(Line::raw("  no runs recorded"));
    }

    lines.push(Line::raw(""));
    lines.push(heading("Notepad"));
    if j.rt.state.notepad.is_empty() {
        lines.push(Line::raw("  empty"));
    }
    for (k, v) in &j.rt.state.notepad {
        lines.push(Line::raw(format!(
            "  {} = {}",
            text::line(k),
            text::line(v)
        )));
    }
    (title, lines)
}

fn diff_line(l: String) -> Line<'static> {
    let style = if l.starts_with("+++") || l.starts_with("---") {
        Style::new().add_modifier(Modifier::BOLD)
    } else if l.starts_with("@@") {
        Style::new().fg(Color::Cyan)
    } else if l.starts_with('+') {
        Style::new().fg(Color::Green)
    } else if l.starts_with('-') {
        Style::new().fg(Color::Red)
    } else {
        Style::new()
    };
    Line::styled(l, style)
}

fn diff(app: &App, job: &str) -> (Line<'static>, Vec<Line<'static>>) {
    let diffs = app.diffs_of(job);
    let name = text::line(job).into_owned();
    let Some(row) = diffs.get(app.viewer.diff_index.min(diffs.len().saturating_sub(1))) else {
        // Short lines: the whole answer fits 80 columns.
        let monitored = app
            .snap
            .jobs
            .iter()
            .find(|j| j.def.name == job)
            .is_none_or(|j| j.def.monitor);
        let words = if monitored {
            vec![
                "no monitor diff recorded for this job yet:".to_string(),
                "a diff appears when its monitor sees a change".to_string(),
            ]
        } else {
            vec![
                format!("{name} has no `monitor:`, so it never gets a diff:"),
                "only a monitor's runs record one".to_string(),
            ]
        };
        return (
            Line::from(format!(" Diff {name} (Esc back) ")),
            words.into_iter().map(Line::raw).collect(),
        );
    };
    let title = Line::from(format!(
        " Diff {name} {}/{} — run {} {} ([ older, ] newer, Esc back) ",
        app.viewer.diff_index + 1,
        diffs.len(),
        row.finished_at.format("%Y-%m-%d %H:%M:%S"),
        row.status.as_str()
    ));
    let lines = text::lines(row.diff.as_deref().unwrap_or(""))
        .into_iter()
        .map(diff_line)
        .collect();
    (title, lines)
}

/// A short elapsed time: `0.35s` under ten seconds, else [`crate::when::span_secs`].
fn elapsed(ms: i64) -> String {
    if ms < 10_000 {
        format!("{:.2}s", ms.max(0) as f64 / 1000.0)
    } else {
        crate::when::span_secs(ms / 1000)
    }
}

/// The run's attempts, one line each (number, start → end, duration, outcome, tokens and cost
/// when the attempt had a reply), its error on the next line.
fn attempt_lines(r: &HistoryRow, now: chrono::DateTime<chrono::Utc>) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    for (i, a) in r.attempt_log.iter().enumerate() {
        let style = match a.outcome {
            AttemptOutcome::Succeeded => Style::new().fg(Color::Green),
            AttemptOutcome::Failed => Style::new().fg(Color::Red),
        };
        let mut spans = vec![
            Span::raw(format!(
                "  #{:<3}{} → {} ({:>6})  ",
                i + 1,
                when(a.started_at, now),
                when(a.finished_at, now),
                elapsed((a.finished_at - a.started_at).num_milliseconds())
            )),
            Span::styled(format!("{:<9}", a.outcome.as_str()), style),
        ];
        if a.input_tokens > 0 || a.output_tokens > 0 || a.cost_usd > 0.0 {
            spans.push(Span::raw(format!(
                "  {} in, {} out, {}",
                a.input_tokens,
                a.output_tokens,
                crate::cost::usd(a.cost_usd)
            )));
        }
        lines.push(Line::from(spans));
        if let Some(e) = &a.error {
            lines.push(Line::styled(
                format!("       {}", text::line(e)),
                Style::new().fg(Color::DarkGray),
            ));
        }
    }
    lines
}

/// One run, opened with Enter on a History row; its transcript (a tool-using run's) last,
/// wrapped to `width`.
fn run(app: &App, r: &HistoryRow, width: usize) -> (Line<'static>, Vec<Line<'static>>) {
    let title = Line::from(format!(
        " Run of {} {} (Esc back, R retry) ",
        text::line(&r.job),
        r.run_id
    ));
    let now = app.now;
    let kv = |k: &str, v: String| {
        Line::from(vec![
            Span::styled(format!("{k:<10}"), Style::new().fg(Color::DarkGray)),
            Span::raw(v),
        ])
    };
    let stamp = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%d %H:%M:%S UTC").to_string();
    let mut lines: Vec<Line<'static>> = vec![
        Line::from(vec![
            Span::styled(
                format!("{:<10}", "status"),
                Style::new().fg(Color::DarkGray),
            ),
            Span::styled(r.status.as_str().to_string(), status_style(r.status)),
            Span::raw(if r.stale_lease {
                "  (stale lease: completed after another owner took over)"
            } else {
                ""
            }),
        ]),
        kv("trigger", r.trigger.as_str().to_string()),
    ];
    if let (Some(j), Some(id)) = (&r.parent_job, r.parent_run_id) {
        lines.push(kv("parent", format!("{j} run {id}")));
    }
    let slot = match (r.slot, r.slot_end) {
        (None, _) => "none (not a scheduled slot)".to_string(),
        (Some(s), None) => stamp(s),
        (Some(s), Some(e)) => format!(
            "{} … {} ({} slots)",
            stamp(s),
            stamp(e),
            r.slots_count.unwrap_or(0)
        ),
    };
    lines.push(kv("slot", slot));
    lines.push(kv(
        "ran",
        format!(
            "{} → {} ({}, {})",
            stamp(r.started_at),
            stamp(r.finished_at),
            crate::when::span_secs((r.duration_ms / 1000) as i64),
            crate::when::passed(r.finished_at, now)
        ),
    ));
    lines.push(kv("attempts", r.attempts.to_string()));
    if let (Some(t), Some(c)) = (r.turns, r.tool_calls) {
        lines.push(kv(
            "loop",
            format!(
                "{t} {}, {c} tool {} (transcript below)",
                if t == 1 { "turn" } else { "turns" },
                if c == 1 { "call" } else { "calls" }
            ),
        ));
    }
    lines.push(kv("owner", text::line(&r.owner).into_owned()));
    if let Some(by) = &r.recovered_by {
        // The run's own owner died or lost its lease: this is the owner that found it so.
        lines.push(kv("recovered", format!("by {}", text::line(by))));
    }
    if let Some(m) = &r.model {
        lines.push(kv("model", text::line(m).into_owned()));
    }
    lines.push(kv(
        "tokens",
        format!("{} in, {} out", r.input_tokens, r.output_tokens),
    ));
    lines.push(kv(
        "cost",
        format!(
            "{}{}",
            crate::cost::usd(r.cost_usd),
            if r.unpriced {
                " (incomplete: unpriced)"
            } else {
                ""
            }
        ),
    ));
    let delivery = match (&r.delivery_error, r.delivered) {
        (Some(e), _) => format!("FAILED: {}", text::line(e)),
        (None, true) => "delivered".to_string(),
        (None, false) => "not delivered (no sink, or nothing to deliver)".to_string(),
    };
    lines.push(kv("delivery", delivery));
    if let Some(why) = &r.reason {
        lines.push(kv("reason", text::line(why).into_owned()));
    }
    run_sections(r, now, width, &mut lines);
    (title, lines)
}

/// The run view's sections under its fields: attempts, error, result, diff, then the
/// transcript; every line fitted to `width`.
fn run_sections(
    r: &HistoryRow,
    now: chrono::DateTime<chrono::Utc>,
    width: usize,
    out: &mut Vec<Line<'static>>,
) {
    // Long values wrap under their column instead of running into the border.
    let fields: Vec<Line<'static>> = std::mem::take(out)
        .into_iter()
        .flat_map(|l| super::transcript::fit(l, width, 10))
        .collect();
    let mut lines = Vec::new();
    if !r.attempt_log.is_empty() {
        lines.push(Line::raw(""));
        lines.push(heading("Attempts"));
        lines.extend(attempt_lines(r, now));
    }
    for (name, text) in [("Error", &r.error), ("Result", &r.result)] {
        lines.push(Line::raw(""));
        lines.push(heading(name));
        match text {
            None => lines.push(Line::raw("  none")),
            Some(t) => lines.extend(
                text::lines(t)
                    .into_iter()
                    .map(|l| Line::raw(format!("  {l}"))),
            ),
        }
    }
    if let Some(d) = &r.diff {
        lines.push(Line::raw(""));
        lines.push(heading("Diff"));
        lines.extend(text::lines(d).into_iter().map(diff_line));
    }
    let mut lines: Vec<Line<'static>> = fields
        .into_iter()
        .chain(
            lines
                .into_iter()
                .flat_map(|l| super::transcript::fit(l, width, 2)),
        )
        .collect();
    if let Some(t) = &r.transcript {
        lines.push(Line::raw(""));
        lines.extend(super::transcript::lines(
            t,
            r.turns,
            r.tool_calls,
            now,
            width,
        ));
    }
    *out = lines;
}

/// The job's `overlap:` policy and what it keeps now (a slot to run next, a superseded run).
fn overlap_words(j: &crate::model::JobRecord, now: chrono::DateTime<chrono::Utc>) -> String {
    use crate::model::Overlap;
    let mut s = match j.def.overlap {
        Overlap::Allow {
            max_concurrent_runs,
        } => format!(
            "allow: {} of {max_concurrent_runs} runs live",
            j.rt.live_runs()
        ),
        other => other.name().to_string(),
    };
    // A kept slot from the moment it falls due (not only once the run has ended).
    if let Some(b) = crate::store::policy::overlap::kept_slot(j, now).or(j.rt.overlap.buffered_slot)
    {
        s.push_str(&format!(
            "; slot {} kept to run next",
            b.format("%Y-%m-%d %H:%M:%S")
        ));
    }
    if let Some(x) = j.rt.overlap.superseded {
        s.push_str(&format!(
            "; run {} being cancelled for slot {}",
            x.run_id,
            x.by_slot.format("%Y-%m-%d %H:%M:%S")
        ));
    }
    s
}

#[cfg(test)]
mod slot_tests {
    use super::*;
    use crate::tui::testdata;

    /// A slot with a fraction of a second (an `at:` instant, a first run at the store instant)
    /// is listed with it, as `jobs` and `describe` show it, not cut to the second before.
    #[test]
    fn the_next_slots_keep_a_fraction_of_a_second() {
        let now = testdata::now();
        let mut j = testdata::job("frac", 60, now);
        j.rt.next_slot = Some(now + chrono::Duration::milliseconds(5_999));
        let mut lines = Vec::new();
        slot_lines(&j, now, &mut lines);
        let first = lines[0].to_string();
        let want = (now + chrono::Duration::milliseconds(5_999)).format("%H:%M:%S%.3f");
        assert!(first.contains(&want.to_string()), "{first}");
    }
}

#[cfg(test)]
mod chain_tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::{Status, Trigger};
    use crate::tui::testdata;

    /// The run view names a chained run's parent.
    #[test]
    fn the_run_view_names_a_chained_runs_parent() {
        let (snap, now) = testdata::fixed();
        let mut app = App::new(Arc::new(snap), now);
        let mut r = testdata::row(7, "triage", Status::Succeeded, now);
        r.trigger = Trigger::Chain;
        r.parent_job = Some("collect".into());
        r.parent_run_id = Some(uuid::Uuid::from_u128(42));
        let mut buf = Buffer::empty(Rect::new(0, 0, 100, 24));
        app.mode = Mode::Run(Box::new(r));
        render(&app, buf.area, &mut buf);
        let text: String = (0..24)
            .map(|y| {
                (0..100)
                    .map(|x| buf[(x, y)].symbol().to_string())
                    .collect::<String>()
                    + "\n"
            })
            .collect();
        assert!(text.contains("trigger   chain"), "{text}");
        assert!(
            text.contains(&format!(
                "parent    collect run {}",
                uuid::Uuid::from_u128(42)
            )),
            "{text}"
        );
    }
}

//! Header: store, owner, owners seen, uptime, spend vs budget gauge with the spend forecast
//! (when the limit will be reached at this pace), counts per status (24 h).
//!
//! A store outage of this process's engine is shown in red while it lasts ("STORE UNWRITABLE
//! since …: claims stopped"), and the last one that ended in grey after it, for an hour.
//!
//! An agent that a job calls and whose key variable is unset where this engine runs is named in
//! red on the first line for as long as that holds (`agent writer: OPENAI_API_KEY unset — its
//! runs will fail`): its runs fail before any request, and a start-up warning would be hidden
//! behind the console.
//!
//! `owners` counts the live owners by the one rule of [`crate::owners`] (this engine and the
//! owners heard from in the last 30 s that did not sign off); attached with none live, the
//! header says that no engine is running, so due jobs sitting at "due" are explained.
//!
//! The first line keeps its alerts and the store whatever the width: the owner id, the uptime
//! and the owners count give way first, then the key alert takes its short words, then the
//! store path is cut from the left.
//!
//! Owns: the three header lines. Must not touch: state. The gauge ratio is clamped to 0..=1 and
//! NaN-safe ([`Gauge::ratio`] panics otherwise); the label always shows the real percentage, a
//! zero budget draws a full gauge, and below 24 columns the gauge degrades to its label.

use chrono::{DateTime, Utc};
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Gauge, Widget};

use super::{elide, elide_line, money, status_style};
use crate::model::{BudgetPeriod, Status};
use crate::text;
use crate::tui::state::App;

/// The gauge's ratio (always in 0..=1, never NaN) and its label for `spend` against `budget`,
/// with `held` the money reserved by calls in flight (or of unknown outcome): the budget counts
/// it, so the gauge fills with it and the label says how much of the use it is.
pub fn budget_gauge(spend: f64, held: f64, budget: f64, period: BudgetPeriod) -> (f64, String) {
    let per = match period {
        BudgetPeriod::Day => "/day",
        BudgetPeriod::Week => "/week",
        BudgetPeriod::Month => "/month",
        BudgetPeriod::Total => " total",
    };
    // `f64::max` may keep a negative zero, which would print as "$-0.00 (-0%)".
    let sane = |x: f64| if x.is_finite() && x > 0.0 { x } else { 0.0 };
    let (spend, held) = (sane(spend), sane(held));
    let in_flight = if held > 0.0 {
        format!(", {} in flight", money(held))
    } else {
        String::new()
    };
    if !(budget.is_finite() && budget > 0.0) {
        return (
            1.0,
            format!(
                "{} of {}{per}{in_flight} (zero budget: model calls skip)",
                money(spend),
                money(0.0)
            ),
        );
    }
    let used = spend + held;
    let pct = used / budget * 100.0;
    let over = if spend >= budget { " OVER BUDGET" } else { "" };
    (
        (used / budget).clamp(0.0, 1.0),
        format!(
            "{} of {}{per} ({pct:.0}%{in_flight}){over}",
            money(spend),
            money(budget)
        ),
    )
}

/// What the header says about the jobs a budget stopped this period: a limit below one call's
/// worst case is "too small for one call" (waiting does not help; the gauge may show little
/// spent), a used-up limit is "BUDGET REACHED". `stops` are (job, skip reason) pairs.
pub fn stops_text(stops: &[(String, String)]) -> String {
    let (small, reached): (Vec<&str>, Vec<&str>) = stops
        .iter()
        .map(|(job, why)| (job.as_str(), why.starts_with(crate::cost::BUDGET_TOO_SMALL)))
        .fold(
            (Vec::new(), Vec::new()),
            |(mut s, mut r), (job, too_small)| {
                if too_small {
                    s.push(job)
                } else {
                    r.push(job)
                }
                (s, r)
            },
        );
    let names = |v: &[&str]| match v {
        [] => String::new(),
        [one] => text::line(one).into_owned(),
        [first, rest @ ..] => format!("{} and {} more", text::line(first), rest.len()),
    };
    let mut parts = Vec::new();
    if !small.is_empty() {
        parts.push(format!("{}: budget too small for one call", names(&small)));
    }
    if !reached.is_empty() {
        parts.push(format!("BUDGET REACHED: {} stopped", names(&reached)));
    }
    parts.join("; ")
}

/// How long the header keeps showing an outage that ended.
const OUTAGE_SHOWN_AFTER_SECS: i64 = 3600;

/// The header's words on this engine's store outage: the one going on, or the last one for an
/// hour after it ended; or that claims are stopped because this host's clock is off.
pub fn outage_text(h: &crate::engine::EngineHealth, now: DateTime<Utc>) -> Option<(String, bool)> {
    let hms = |t: DateTime<Utc>| t.format("%H:%M:%S").to_string();
    if h.clock_refused.is_some() && h.store_failing_since.is_none() {
        let off = h.clock_offset_ms.unwrap_or(0);
        let side = if off < 0 { "behind" } else { "ahead of" };
        return Some((
            format!(
                "CLOCK {:.1}s {side} the store's: claims stopped  ",
                off.unsigned_abs() as f64 / 1000.0
            ),
            true,
        ));
    }
    if let Some(since) = h.store_failing_since {
        let stopped = if h.claims_stopped {
            ": claims stopped"
        } else {
            ""
        };
        return Some((
            format!(
                "STORE UNWRITABLE since {} ({}){stopped}  ",
                hms(since),
                crate::when::span_secs((now - since).num_seconds())
            ),
            true,
        ));
    }
    let (from, to) = h.last_outage?;
    ((now - to).num_seconds() <= OUTAGE_SHOWN_AFTER_SECS).then(|| {
        (
            format!(
                "store outage {}–{} ({}), claims resumed  ",
                hms(from),
                hms(to),
                crate::when::span_secs((to - from).num_seconds())
            ),
            false,
        )
    })
}

fn outage_span(app: &App) -> Option<Span<'static>> {
    let (text, ongoing) = outage_text(&app.store_health, app.now)?;
    let style = if ongoing {
        Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)
    } else {
        Style::new().fg(Color::DarkGray)
    };
    Some(Span::styled(text, style))
}

/// The lasting alert about agents whose key variable is unset, in its long or short words.
fn key_alert_span(app: &App, short: bool) -> Option<Span<'static>> {
    let alerts = &app.key_alerts;
    let text = if short {
        crate::tui::state::alerts::key_alert_short(alerts)?
    } else {
        crate::tui::state::alerts::key_alert_text(alerts)?
    };
    Some(Span::styled(
        format!("{text}  "),
        Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
    ))
}

/// `text` cut from the left to `w` columns, its first one a `…`: the end of a store path is
/// the part that tells two stores apart.
fn elide_left(text: &str, w: usize) -> String {
    let width = |s: &str| Span::raw(s.to_string()).width();
    if width(text) <= w {
        return text.to_string();
    }
    let mut tail: Vec<char> = Vec::new();
    let mut used = 1;
    for ch in text.chars().rev() {
        let cw = width(&ch.to_string());
        if used + cw > w {
            break;
        }
        used += cw;
        tail.push(ch);
    }
    std::iter::once('…').chain(tail.into_iter().rev()).collect()
}

/// The first line fitted to `width`. The alerts and the store are kept; the owner id goes
/// first, then the uptime, then the owners count; then the alerts take their short words,
/// then the store path is cut from the left; only then is the line cut at its end.
fn first_line(app: &App, width: usize) -> Line<'static> {
    let s = &app.snap;
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let dim = Style::new().fg(Color::DarkGray);
    let mode = if s.engine_running {
        "engine"
    } else {
        "attached"
    };
    let uptime = crate::when::span_secs((app.now - s.started_at).num_seconds());
    let alerts = |short: bool| {
        let mut spans = vec![
            Span::styled("cronsole ", bold.fg(Color::Cyan)),
            Span::styled(format!("[{mode}] "), dim),
        ];
        spans.extend(outage_span(app));
        if !s.engine_seen {
            spans.push(Span::styled(
                if short {
                    "NO ENGINE running  "
                } else {
                    "NO ENGINE running: jobs will not run until one starts  "
                },
                Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
            ));
        }
        spans.extend(key_alert_span(app, short));
        spans
    };
    let store = text::line(&s.store).into_owned();
    let facts = [
        vec![Span::raw(format!("up {uptime}  "))],
        vec![Span::raw(format!("owners {}  ", s.owners_seen.len()))],
        vec![
            Span::raw("owner "),
            Span::styled(text::line(&s.owner).into_owned(), bold),
            Span::raw("  "),
        ],
    ];
    let build = |short: bool, kept: &[usize], store: String| {
        let mut spans = alerts(short);
        for i in kept {
            spans.extend(facts[*i].iter().cloned());
        }
        spans.push(Span::raw("store "));
        spans.push(Span::styled(store, bold));
        Line::from(spans)
    };
    // Dropped in this order: the owner id, the uptime, the owners count.
    for kept in [&[0, 1, 2][..], &[0, 1], &[1], &[]] {
        let line = build(false, kept, store.clone());
        if line.width() <= width {
            return line;
        }
    }
    let line = build(true, &[], store.clone());
    let over = line.width().saturating_sub(width);
    if over == 0 {
        return line;
    }
    // The path keeps at least a few columns of its end; past that the line is cut at its end.
    let store_w = Span::raw(store.clone()).width();
    let room = store_w.saturating_sub(over).max(6.min(store_w));
    elide_line(build(true, &[], elide_left(&store, room)), width)
}

pub fn render(app: &App, area: Rect, buf: &mut Buffer) {
    let s = &app.snap;
    let [l1, l2, l3] = Layout::vertical([Constraint::Length(1); 3]).areas(area);
    let dim = Style::new().fg(Color::DarkGray);
    first_line(app, usize::from(l1.width)).render(l1, buf);
    render_spend(app, l2, buf);

    let mut spans = vec![Span::raw("24h ")];
    for st in Status::ALL {
        let n = s.counts_24h.get(&st).copied().unwrap_or(0);
        let style = if n == 0 { dim } else { status_style(st) };
        spans.push(Span::styled(format!("{} {n}", st.as_str()), style));
        spans.push(Span::raw("  "));
    }
    let held = app.derived.held(app.now);
    if held > 0 {
        spans.push(Span::styled(
            format!("held {held}"),
            Style::new().fg(Color::Yellow),
        ));
    }
    elide_line(Line::from(spans), usize::from(l3.width)).render(l3, buf);
}

/// The second line: the spend gauge, then the budget stops or the forecast in the room left.
fn render_spend(app: &App, l2: Rect, buf: &mut Buffer) {
    let s = &app.snap;
    let dim = Style::new().fg(Color::DarkGray);

    let incomplete = if s.spend_incomplete {
        " spend incomplete"
    } else {
        ""
    };
    // A budget that stopped a model call this period outranks the forecast; the stops come
    // from the jobs' state, so every owner's show.
    let stops = &app.derived.stops;
    let forecast = if stops.is_empty() {
        s.forecast
            .as_ref()
            .map(|f| {
                let phrase = if s.engine_seen {
                    f.phrase(app.now)
                } else {
                    f.phrase_without_engine(app.now, money)
                };
                format!(" → {phrase}")
            })
            .unwrap_or_default()
    } else {
        format!(" {}", stops_text(stops))
    };
    let gauge = s.settings.budget.map(|b| {
        budget_gauge(
            s.period_spend_usd,
            s.period_held_usd,
            b.max_cost_usd,
            b.period,
        )
    });
    let label = match &gauge {
        Some((_, label)) => label.clone(),
        None => format!("{} (no budget)", money(s.period_spend_usd)),
    };
    // The gauge keeps room for its whole label; the forecast or the stops get what is left,
    // cut with an ellipsis, so two notices never run into each other on a narrow terminal.
    let inc_w = incomplete.len() as u16;
    let need = u16::try_from(label.chars().count()).unwrap_or(u16::MAX);
    let fw = u16::try_from(forecast.chars().count())
        .unwrap_or(u16::MAX)
        .min(l2.width.saturating_sub(7 + inc_w).saturating_sub(need));
    let [lbl, g, fc, inc] = Layout::horizontal([
        Constraint::Length(7),
        Constraint::Min(0),
        Constraint::Length(fw),
        Constraint::Length(inc_w),
    ])
    .areas(l2);
    let forecast = elide(&forecast, usize::from(fc.width)).into_owned();
    let reached = s
        .forecast
        .as_ref()
        .is_some_and(|f| f.limit_reached_at.is_some());
    Span::styled(
        forecast,
        if !stops.is_empty() {
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)
        } else if reached && s.engine_seen {
            Style::new().fg(Color::Yellow)
        } else {
            dim
        },
    )
    .render(fc, buf);
    Span::raw("spend ").render(lbl, buf);
    // Narrower than its label (a tiny amount, an alert beside it), the label is cut with `…`.
    let cut = |label: String| elide(&label, usize::from(g.width)).into_owned();
    match gauge {
        None => Span::raw(cut(label)).render(g, buf),
        Some((ratio, label)) => {
            let label = cut(label);
            let colour = if ratio >= 1.0 {
                Color::Red
            } else if ratio >= 0.8 {
                Color::Yellow
            } else {
                Color::Green
            };
            if g.width >= 24 {
                Gauge::default()
                    .ratio(ratio)
                    .label(label)
                    .gauge_style(Style::new().fg(colour).bg(Color::Black))
                    .render(g, buf);
            } else {
                Span::styled(label, Style::new().fg(colour)).render(g, buf);
            }
        }
    }
    Span::styled(incomplete, Style::new().fg(Color::Yellow)).render(inc, buf);
}

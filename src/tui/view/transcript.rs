//! The run view's transcript: what each turn of a tool-using run and each of its tool calls did,
//! as the history row records it, drawn as lines the run view scrolls through.
//!
//! Owns: the layout of a turn (number, model, tokens with their cache classes, cost, attempts,
//! its text), of a call (tool, source, start, duration, state, error or not, approval,
//! arguments, result size, sha256 and head), of a turn left without a reply (why, what it was
//! booked at), of a server request refused during a call, and of the elision mark; and
//! wrapping those lines to the view's width. Must not touch: state, the store, the scroll
//! (the run view scrolls these lines like its others).
//!
//! Every text of the record came from outside (the model, a tool, a server, an operator's
//! reason): each line passes through the printed-text policy ([`text::visible_line`]), so an
//! escape sequence, a control character or a bidi override shows as `^[` / `\u{202e}` — the
//! operator sees that something was there, and nothing acts on the terminal.

use chrono::{DateTime, Utc};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};

use super::when;
use crate::text;
use crate::transcript::{
    Approval, CallEntry, CallState, Entry, ServerRequestEntry, TRANSCRIPT_MAX_BYTES, Transcript,
    TurnEntry, UnansweredTurn,
};
use crate::tui::keymap::{self, Cmd};

/// Columns a call's field names take (`    args     `).
const FIELD: usize = 13;

/// The transcript's lines for a view `width` columns wide: a heading with the counts and the
/// scroll keys, then every entry in order.
pub fn lines(
    t: &Transcript,
    turns: Option<u32>,
    calls: Option<u32>,
    now: DateTime<Utc>,
    width: usize,
) -> Vec<Line<'static>> {
    let width = width.max(FIELD + 8);
    let mut out = vec![Line::from(vec![
        Span::styled(
            "Transcript",
            Style::new().add_modifier(Modifier::BOLD).fg(Color::Cyan),
        ),
        Span::styled(
            format!(
                "  {}, {} · scroll {}",
                plural(turns.unwrap_or(0), "turn"),
                plural(calls.unwrap_or(0), "tool call"),
                scroll_keys()
            ),
            Style::new().fg(Color::DarkGray),
        ),
    ])];
    if t.is_empty() {
        out.push(Line::raw("  nothing recorded"));
    }
    for e in t.to_vec() {
        match &e {
            Entry::Turn(turn) => turn_lines(turn, width, &mut out),
            Entry::Call(c) => call_lines(c, now, width, &mut out),
            Entry::Unanswered(u) => unanswered_lines(u, width, &mut out),
            Entry::ServerRequest(r) => server_request_lines(r, width, &mut out),
            Entry::Elided { entries, bytes } => out.extend(fit(
                Line::styled(
                    format!(
                        "  … {} ({} KiB) left out here to keep the record under {} KiB …",
                        plural(u32::try_from(*entries).unwrap_or(u32::MAX), "entry"),
                        bytes.div_ceil(1024),
                        TRANSCRIPT_MAX_BYTES / 1024
                    ),
                    Style::new().fg(Color::Yellow),
                ),
                width,
                4,
            )),
        }
    }
    out
}

/// The scroll keys as the keymap writes them (`j/↓ k/↑ PgDn PgUp g G`).
fn scroll_keys() -> String {
    [
        Cmd::Down,
        Cmd::Up,
        Cmd::PageDown,
        Cmd::PageUp,
        Cmd::Top,
        Cmd::Bottom,
    ]
    .iter()
    .filter_map(|c| keymap::KEYMAP.iter().find(|b| b.cmd == *c))
    .map(|b| b.label)
    .collect::<Vec<_>>()
    .join(" ")
}

fn plural(n: u32, one: &str) -> String {
    match (n, one) {
        (1, _) => format!("1 {one}"),
        (_, "entry") => format!("{n} entries"),
        _ => format!("{n} {one}s"),
    }
}

fn dim() -> Style {
    Style::new().fg(Color::DarkGray)
}

fn turn_lines(t: &TurnEntry, width: usize, out: &mut Vec<Line<'static>>) {
    let mut tokens = format!("{} in", t.input_tokens);
    let cache: Vec<String> = [
        (t.cache_read_tokens, "cache read"),
        (t.cache_write_tokens, "cache write"),
    ]
    .iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, w)| format!("{n} {w}"))
    .collect();
    if !cache.is_empty() {
        tokens.push_str(&format!(" ({})", cache.join(", ")));
    }
    tokens.push_str(&format!(", {} out", t.output_tokens));
    let mut spans = vec![
        Span::styled(
            format!("turn {}", t.turn),
            Style::new().add_modifier(Modifier::BOLD),
        ),
        Span::raw(format!(
            "  {}  {tokens}  {}",
            text::visible_line(&t.model),
            crate::cost::usd(t.cost_usd)
        )),
        Span::styled(
            match t.calls {
                0 => "  asked no tool call".to_string(),
                n => format!("  asked {}", plural(n, "tool call")),
            },
            dim(),
        ),
    ];
    if t.attempts > 1 {
        spans.push(Span::styled(format!("  {} attempts", t.attempts), dim()));
    }
    if t.cut {
        spans.push(Span::styled(
            "  cut at its token limit",
            Style::new().fg(Color::Yellow),
        ));
    }
    out.extend(fit(Line::from(spans), width, 4));
    block(&t.text, "  │ ", width, Style::new(), out);
}

fn call_lines(c: &CallEntry, now: DateTime<Utc>, width: usize, out: &mut Vec<Line<'static>>) {
    let source = match &c.source {
        Some(s) => format!("from {}", text::visible_line(s)),
        None => "not offered".to_string(),
    };
    let (state, state_style) = match c.state {
        CallState::Done => ("done", Style::new()),
        CallState::Dispatched => (
            "dispatched, no result recorded",
            Style::new().fg(Color::Yellow),
        ),
        CallState::Refused => ("refused, never run", Style::new().fg(Color::Yellow)),
        CallState::AwaitingApproval => (
            "awaiting approval, never run",
            Style::new().fg(Color::Yellow),
        ),
    };
    // Whether the model was told the call failed: known once the call was answered.
    let answered = matches!(c.state, CallState::Done | CallState::Refused);
    let (verdict, verdict_style) = match (answered, c.is_error) {
        (false, _) => ("", Style::new()),
        (true, true) => ("  error", Style::new().fg(Color::Red)),
        (true, false) => ("  ok", Style::new().fg(Color::Green)),
    };
    let head = Line::from(vec![
        Span::raw("  ▸ "),
        Span::styled(
            text::visible_line(&c.tool).into_owned(),
            Style::new().add_modifier(Modifier::BOLD),
        ),
        Span::styled(format!("  {source}"), dim()),
        Span::raw(format!(
            "  at {}, {}ms  ",
            when(c.started_at, now),
            c.duration_ms
        )),
        Span::styled(state, state_style),
        Span::styled(verdict, verdict_style),
    ]);
    out.extend(fit(head, width, 4));
    field("id", &c.id, width, out);
    field("args", &c.arguments, width, out);
    if let Some(a) = &c.approval {
        field("approval", &approval_words(a), width, out);
    }
    if answered {
        field("result", &format!("{} bytes", c.result_bytes), width, out);
        field("sha256", &c.result_sha256, width, out);
        if !c.result_head.is_empty() {
            field("head", &c.result_head, width, out);
        }
    }
}

fn approval_words(a: &Approval) -> String {
    match a {
        Approval::Approved { by, reason } => format!(
            "approved{}{}",
            by.as_deref()
                .map(|b| format!(" by {b}"))
                .unwrap_or_default(),
            reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        ),
        Approval::Denied { reason, by } => match by {
            Some(b) => format!("denied by {b}: {reason}"),
            None => format!("denied, nobody answered in time: {reason}"),
        },
    }
}

fn unanswered_lines(u: &UnansweredTurn, width: usize, out: &mut Vec<Line<'static>>) {
    let head = Line::from(vec![
        Span::styled(
            format!("turn {}", u.turn),
            Style::new().add_modifier(Modifier::BOLD),
        ),
        Span::raw(format!("  {}  ", text::visible_line(&u.model))),
        Span::styled("no reply", Style::new().fg(Color::Red)),
        Span::raw(format!(
            "  {}, booked at {}",
            plural(u.attempts, "attempt"),
            crate::cost::usd(u.cost_usd)
        )),
    ]);
    out.extend(fit(head, width, 4));
    block(&u.reason, "  │ ", width, dim(), out);
}

fn server_request_lines(r: &ServerRequestEntry, width: usize, out: &mut Vec<Line<'static>>) {
    field("server", &r.request, width, out);
}

/// A call's field: its name in a column, its value wrapped under it (every line inert).
fn field(name: &str, value: &str, width: usize, out: &mut Vec<Line<'static>>) {
    let pad = " ".repeat(FIELD);
    let mut first = true;
    // A result's last line break ends its last line; it draws no empty line of its own.
    let value = value.strip_suffix('\n').unwrap_or(value);
    for line in value.split('\n') {
        for chunk in wrap(&text::visible_line(line), width - FIELD) {
            let label = if first {
                format!("    {name:<9}")
            } else {
                pad.clone()
            };
            first = false;
            out.push(Line::from(vec![
                Span::styled(label, dim()),
                Span::raw(chunk),
            ]));
        }
    }
}

/// Multi-line text under `prefix`, wrapped, each line inert; nothing for an empty text.
fn block(s: &str, prefix: &str, width: usize, style: Style, out: &mut Vec<Line<'static>>) {
    if s.is_empty() {
        return;
    }
    let room = width.saturating_sub(Span::raw(prefix).width()).max(8);
    for line in s.split('\n') {
        for chunk in wrap(&text::visible_line(line), room) {
            out.push(Line::from(vec![
                Span::styled(prefix.to_string(), dim()),
                Span::styled(chunk, style),
            ]));
        }
    }
}

/// `line` broken into lines of at most `width` columns at spaces (inside a word only when the
/// word alone is wider than the room), styles kept; each continuation starts with `indent`
/// spaces. A line that fits comes back as it is.
pub(super) fn fit(line: Line<'static>, width: usize, indent: usize) -> Vec<Line<'static>> {
    if line.width() <= width || width <= indent + 8 {
        return vec![line];
    }
    let mut out: Vec<Line<'static>> = Vec::new();
    let mut cur: Vec<Span<'static>> = Vec::new();
    let mut used = 0;
    for span in &line.spans {
        for word in span.content.split_inclusive(' ') {
            let w = cols(word);
            let bare = cols(word.trim_end_matches(' '));
            if used + bare > width && used > indent {
                out.push(Line::from(std::mem::take(&mut cur)).style(line.style));
                cur.push(Span::raw(" ".repeat(indent)));
                used = indent;
            }
            if used + bare <= width {
                cur.push(Span::styled(word.to_string(), span.style));
                used += w;
                continue;
            }
            // A word wider than the room: cut it where the line ends.
            for piece in wrap(word, width - indent) {
                if used + cols(&piece) > width && used > indent {
                    out.push(Line::from(std::mem::take(&mut cur)).style(line.style));
                    cur.push(Span::raw(" ".repeat(indent)));
                    used = indent;
                }
                used += cols(&piece);
                cur.push(Span::styled(piece, span.style));
            }
        }
    }
    out.push(Line::from(cur).style(line.style));
    out
}

/// Columns `s` takes on a terminal.
fn cols(s: &str) -> usize {
    if s.is_ascii() {
        s.len()
    } else {
        Span::raw(s).width()
    }
}

/// `s` cut into pieces of at most `width` columns (at least one piece, maybe empty), at
/// spaces where it can.
fn wrap(s: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    if cols(s) <= width {
        return vec![s.to_string()];
    }
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut used = 0;
    for word in s.split_inclusive(' ') {
        let bare = cols(word.trim_end_matches(' '));
        if used + bare > width && used > 0 && bare <= width {
            out.push(std::mem::take(&mut cur));
            used = 0;
        }
        for ch in word.chars() {
            let w = cols(ch.encode_utf8(&mut [0; 4]));
            if used + w > width && used > 0 {
                if ch == ' ' {
                    // A space at the end of a full line is dropped, not carried over.
                    continue;
                }
                out.push(std::mem::take(&mut cur));
                used = 0;
            }
            cur.push(ch);
            used += w;
        }
    }
    out.push(cur);
    out
}

#[cfg(test)]
mod tests;

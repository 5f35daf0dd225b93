//! The run view of a tool-using run: its transcript drawn and scrolled, as an operator sees it
//! from the History pane, with every outside text inert.

use std::sync::Arc;

use chrono::Duration;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::layout::Rect;

use crate::model::{HistoryRow, Status};
use crate::transcript::{
    Approval, CallEntry, CallState, Entry, ServerRequestEntry, Transcript, TurnEntry,
    UnansweredTurn,
};
use crate::tui::state::{App, Mode};
use crate::tui::testdata;

macro_rules! snap {
    ($name:expr, $value:expr) => {
        insta::with_settings!({snapshot_path => "../../snapshots", prepend_module_to_snapshot => false}, {
            insta::assert_snapshot!($name, $value);
        })
    };
}

fn screen(app: &App, w: u16, h: u16) -> String {
    let mut term = Terminal::new(TestBackend::new(w, h)).expect("test backend");
    term.draw(|f| f.render_widget(app, f.area())).expect("draw");
    let buf = term.backend().buffer();
    let mut out = String::new();
    for y in 0..buf.area.height {
        let line: String = (0..buf.area.width)
            .map(|x| buf[(x, y)].symbol().to_string())
            .collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A three-turn run: cached tokens, an approved call, a call to a name that was not offered
/// (with an escape sequence in it), a server's refused request, a result with a bidi override
/// and a clear-screen sequence, and a last turn cut at the run's time-out.
fn row() -> HistoryRow {
    let (_, now) = testdata::fixed();
    let at = now - Duration::minutes(3);
    let mut r = testdata::row(0x7a, "ops-agent", Status::Failed, at);
    r.model = Some("gpt-4o-mini".into());
    r.turns = Some(2);
    r.tool_calls = Some(2);
    r.input_tokens = 2_100;
    r.output_tokens = 95;
    r.cost_usd = 0.00074;
    r.reason = Some(
        "timed out: the tool loop ran past timeout_seconds (30s) during turn 3: not retried".into(),
    );
    let mut t = Transcript::new();
    t.push(Entry::Turn(TurnEntry {
        turn: 1,
        model: "gpt-4o-mini-2024-07-18".into(),
        input_tokens: 1_200,
        output_tokens: 45,
        cache_read_tokens: 800,
        cache_write_tokens: 0,
        cost_usd: 0.00021,
        attempts: 2,
        text: "Reading the report first.\nThen \x1b]52;c;cGF3bmVk\x07 checking disk.".into(),
        cut: false,
        calls: 2,
    }));
    t.push(Entry::Call(CallEntry {
        turn: 1,
        id: "call_0".into(),
        tool: "files.read_file".into(),
        source: Some("files".into()),
        arguments: r#"{"path":"/srv/reports/daily.txt"}"#.into(),
        started_at: at + Duration::milliseconds(900),
        duration_ms: 12,
        state: CallState::Done,
        is_error: false,
        approval: Some(Approval::Approved {
            by: Some("alice@ops-1".into()),
            reason: Some("routine".into()),
        }),
        result_bytes: 40_960,
        result_sha256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".into(),
        result_head: "disk usage 91%\n\x1b[2Jroot \u{202e}txt.exe\n".into(),
    }));
    t.push(Entry::ServerRequest(ServerRequestEntry {
        turn: 1,
        call_id: "call_0".into(),
        tool: "files.read_file".into(),
        request: "files: refused the server's sampling request".into(),
    }));
    t.push(Entry::Call(CallEntry {
        turn: 1,
        id: "call_1".into(),
        tool: "rm_\x1b[31mrf".into(),
        source: None,
        arguments: "{}".into(),
        started_at: at + Duration::milliseconds(913),
        duration_ms: 0,
        state: CallState::Refused,
        is_error: true,
        approval: None,
        result_bytes: 71,
        result_sha256: "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae".into(),
        result_head: "error: not run: no tool named 'rm_rf' is offered".into(),
    }));
    t.push(Entry::Turn(TurnEntry {
        turn: 2,
        model: "gpt-4o-mini-2024-07-18".into(),
        input_tokens: 900,
        output_tokens: 50,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        cost_usd: 0.00017,
        attempts: 1,
        text: "Disk is nearly full; one more look.".into(),
        cut: false,
        calls: 0,
    }));
    t.push(Entry::Unanswered(UnansweredTurn {
        turn: 3,
        model: "gpt-4o-mini".into(),
        attempts: 1,
        cost_usd: 0.00036,
        reason: "its request was cut at the run's timeout_seconds (30s); not retried".into(),
    }));
    r.transcript = Some(t);
    r
}

fn opened() -> App {
    let (snap, now) = testdata::fixed();
    let mut a = App::new(Arc::new(snap), now);
    a.mode = Mode::Run(Box::new(row()));
    a
}

/// What the event loop does before each frame: tell the state how far the view scrolls.
fn measure(a: &mut App, w: u16, h: u16) {
    if let Some(max) = crate::tui::view::scroll_max(a, Rect::new(0, 0, w, h)) {
        a.set_scroll_max(max);
    }
}

#[test]
fn the_run_view_lists_each_turn_and_call_of_the_transcript() {
    let a = opened();
    // Tall enough for the whole record.
    let t = screen(&a, 140, 80);
    for want in [
        "loop      2 turns, 2 tool calls (transcript below)",
        "Transcript  2 turns, 2 tool calls · scroll j/↓ k/↑ PgDn PgUp g G",
        "turn 1  gpt-4o-mini-2024-07-18  1200 in (800 cache read), 45 out  $0.00021  asked 2 tool calls  2 attempts",
        "  │ Reading the report first.",
        "▸ files.read_file  from files  at 11:57:00, 12ms  done  ok",
        "    id       call_0",
        r#"    args     {"path":"/srv/reports/daily.txt"}"#,
        "    approval approved by alice@ops-1 (routine)",
        "    result   40960 bytes",
        "    sha256   9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "    head     disk usage 91%",
        "    server   files: refused the server's sampling request",
        "not offered  at 11:57:00, 0ms  refused, never run  error",
        "turn 2  gpt-4o-mini-2024-07-18  900 in, 50 out  $0.00017  asked no tool call",
        "turn 3  gpt-4o-mini  no reply  1 attempt, booked at $0.00036",
        "  │ its request was cut at the run's timeout_seconds (30s); not retried",
    ] {
        assert!(t.contains(want), "missing {want:?} in\n{t}");
    }
    // A result's last line break draws no empty line.
    let lines: Vec<&str> = t.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains("txt.exe"))
        .expect("the head's last line");
    assert!(lines[at + 1].contains("    server   files:"), "{t}");
}

#[test]
fn outside_text_in_the_transcript_is_shown_inert() {
    let a = opened();
    let t = screen(&a, 140, 80);
    // Nothing acts on the terminal; what was there is visible.
    assert!(
        !t.chars().any(|c| c != '\n' && crate::text::is_unsafe(c)),
        "{t:?}"
    );
    assert!(t.contains("Then ^[]52;c;cGF3bmVk^G checking disk."), "{t}");
    assert!(t.contains("^[[2Jroot \\u{202e}txt.exe"), "{t}");
    assert!(t.contains("▸ rm_^[[31mrf"), "{t}");
}

#[test]
fn the_run_view_scrolls_through_the_transcript_with_the_keymaps_keys() {
    let mut a = opened();
    measure(&mut a, 80, 24);
    let top = screen(&a, 80, 24);
    assert!(top.contains("status    failed"), "{top}");
    assert!(!top.contains("turn 3"), "{top}");
    snap!("run_view_transcript_80x24", top.clone());
    // One line down.
    a.handle_key(KeyEvent::from(KeyCode::Char('j')));
    let down = screen(&a, 80, 24);
    assert!(!down.contains("status    failed"), "{down}");
    // A page down, then the bottom: the record's last turn is in view.
    a.handle_key(KeyEvent::from(KeyCode::PageDown));
    assert_ne!(screen(&a, 80, 24), down);
    a.handle_key(KeyEvent::new(KeyCode::Char('G'), KeyModifiers::SHIFT));
    let bottom = screen(&a, 80, 24);
    assert!(
        bottom.contains("turn 3  gpt-4o-mini  no reply  1 attempt, booked at $0.00036"),
        "{bottom}"
    );
    snap!("run_view_transcript_bottom_80x24", bottom);
    // And back to the top.
    a.handle_key(KeyEvent::from(KeyCode::Char('g')));
    assert_eq!(screen(&a, 80, 24), top);
}

#[test]
fn snapshot_run_view_transcript_140x40() {
    let mut a = opened();
    measure(&mut a, 140, 40);
    let t = screen(&a, 140, 40);
    snap!("run_view_transcript_140x40", t);
}

/// A long argument wraps to the view's width instead of being cut off at the border.
#[test]
fn long_arguments_wrap_to_the_width() {
    let mut r = row();
    if let Some(t) = r.transcript.as_mut() {
        t.push(Entry::Call(CallEntry {
            turn: 2,
            id: "call_9".into(),
            tool: "files.write_file".into(),
            source: Some("files".into()),
            arguments: format!("{{\"text\":\"{}END\"}}", "x".repeat(150)),
            started_at: testdata::now(),
            duration_ms: 3,
            state: CallState::Dispatched,
            is_error: false,
            approval: None,
            result_bytes: 0,
            result_sha256: String::new(),
            result_head: String::new(),
        }));
    }
    let (snap, now) = testdata::fixed();
    let mut a = App::new(Arc::new(snap), now);
    a.mode = Mode::Run(Box::new(r));
    let t = screen(&a, 80, 80);
    assert!(t.contains("END\"}"), "{t}");
    assert!(t.contains("dispatched, no result"), "{t}");
    assert!(
        !t.contains("recorded  ok"),
        "no verdict before a result: {t}"
    );
}

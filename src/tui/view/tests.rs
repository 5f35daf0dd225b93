//! Widget tests on a ratatui `Buffer` and whole-screen insta snapshots on a `TestBackend`, all
//! from the fixed snapshot and clock of [`crate::tui::testdata`].

use std::sync::Arc;

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::layout::Rect;
use ratatui::widgets::Widget;

use super::header::budget_gauge;
use crate::model::{Budget, BudgetPeriod, Status};
use crate::snapshot::JobRow;
use crate::tui::keymap::KEYMAP;
use crate::tui::state::App;
use crate::tui::testdata;

fn app() -> App {
    let (snap, now) = testdata::fixed();
    App::new(Arc::new(snap), now)
}

fn draw(app: &App, w: u16, h: u16) -> Buffer {
    let mut buf = Buffer::empty(Rect::new(0, 0, w, h));
    app.render(buf.area, &mut buf);
    buf
}

/// The buffer as plain text, one line per row (trailing spaces trimmed).
fn text(buf: &Buffer) -> String {
    let a = buf.area;
    let mut out = String::new();
    for y in a.y..a.y + a.height {
        let mut line = String::new();
        for x in a.x..a.x + a.width {
            line.push_str(buf[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn keys(app: &mut App, ks: &[KeyEvent]) {
    for k in ks {
        app.handle_key(*k);
        testdata::read_record(app, None);
    }
}

fn c(ch: char) -> KeyEvent {
    KeyEvent::from(KeyCode::Char(ch))
}

/// Whole screen through a real `Terminal` on a `TestBackend`, as the loop draws it.
fn screen(app: &App, w: u16, h: u16) -> String {
    let mut term = match Terminal::new(TestBackend::new(w, h)) {
        Ok(t) => t,
        Err(e) => panic!("test backend: {e}"),
    };
    if let Err(e) = term.draw(|f| f.render_widget(app, f.area())) {
        panic!("draw: {e}");
    }
    text(term.backend().buffer())
}

macro_rules! snap {
    ($name:expr, $value:expr) => {
        insta::with_settings!({snapshot_path => "../snapshots", prepend_module_to_snapshot => false}, {
            insta::assert_snapshot!($name, $value);
        })
    };
}

#[test]
fn gauge_ratio_is_clamped_and_label_shows_the_real_percentage() {
    let (r, l) = budget_gauge(1.5, 0.0, 1.0, BudgetPeriod::Day);
    assert_eq!(r, 1.0);
    assert!(l.contains("150%") && l.contains("OVER BUDGET"), "{l}");
    let (r, l) = budget_gauge(0.25, 0.0, 1.0, BudgetPeriod::Week);
    assert_eq!(r, 0.25);
    assert!(l.contains("25%") && l.contains("/week"), "{l}");
    // Money held by calls in flight fills the gauge with the spend and is said apart: the
    // budget checks the next call against both.
    let (r, l) = budget_gauge(0.05, 0.38, 1.0, BudgetPeriod::Day);
    assert!((r - 0.43).abs() < 1e-12, "{r}");
    assert_eq!(l, "$0.05 of $1.00/day (43%, $0.38 in flight)");
    let (r, l) = budget_gauge(0.1, 0.0, 0.0, BudgetPeriod::Day);
    assert_eq!(r, 1.0, "zero budget draws a full gauge");
    assert!(l.contains("zero budget"), "{l}");
    for (s, b) in [
        (f64::NAN, 1.0),
        (1.0, f64::NAN),
        (-3.0, 1.0),
        (f64::INFINITY, 1.0),
        (1.0, -1.0),
    ] {
        let (r, _) = budget_gauge(s, s, b, BudgetPeriod::Day);
        assert!((0.0..=1.0).contains(&r), "{s}/{b} → {r}");
    }
}

/// CI caught "$-0.00 of $1.00/day (-0%)" on a fresh store: a negative zero spend is zero.
#[test]
fn negative_zero_spend_reads_as_zero() {
    let (_, l) = budget_gauge(-0.0, -0.0, 1.0, BudgetPeriod::Day);
    assert!(l.starts_with("$0.00 of $1.00/day (0%)"), "{l}");
    assert_eq!(super::money(-0.0), "$0.00");
}

fn with_budget(spend: f64, budget: f64) -> App {
    let (mut snap, now) = testdata::fixed();
    snap.period_spend_usd = spend;
    snap.settings.budget = Some(Budget {
        max_cost_usd: budget,
        period: BudgetPeriod::Day,
    });
    App::new(Arc::new(snap), now)
}

#[test]
fn zero_budget_renders_a_full_gauge() {
    let t = text(&draw(&with_budget(0.0, 0.0), 120, 40));
    assert!(t.contains("zero budget"), "{t}");
}

#[test]
fn over_budget_renders_clamped_with_real_percentage() {
    let t = text(&draw(&with_budget(2.5, 1.0), 120, 40));
    assert!(t.contains("$2.50 of $1.00/day (250%) OVER BUDGET"), "{t}");
}

/// A tenth of a cent is shown as such, not rounded to "$0.00".
#[test]
fn a_budget_below_a_cent_is_shown_to_the_tenth_of_a_cent() {
    let t = text(&draw(&with_budget(0.0004, 0.001), 120, 40));
    assert!(t.contains("of $0.001/day"), "{t}");
}

/// When a budget stopped a model call this period, the header says so (from
/// the job's state, so a stop by another owner shows too); a stop of an earlier period does not.
#[test]
fn the_header_says_when_a_budget_stopped_a_call_this_period() {
    let stopped = |period_key: String| {
        let mut app = with_budget(0.001, 0.001);
        let snap = Arc::make_mut(&mut app.snap);
        snap.jobs[0].rt.budget_stop = Some(Box::new(crate::model::BudgetStop {
            period_key,
            reason: "budget reached: global $0.001/day".into(),
            at: app.now,
            alerted: true,
        }));
        let name = snap.jobs[0].def.name.clone();
        app.rederive();
        (text(&draw(&app, 120, 40)), name)
    };
    let (t, name) = stopped(BudgetPeriod::Day.key(with_budget(0.0, 1.0).now));
    assert!(
        t.contains(&format!("BUDGET REACHED: {name} stopped")),
        "{t}"
    );
    let (t, _) = stopped("day:2000-01-01".into());
    assert!(!t.contains("BUDGET REACHED"), "{t}");
}

/// A job whose own limit is below one call's worst case never runs a call, however little is
/// spent: the header says "too small for one call", not "BUDGET REACHED" beside a gauge at
/// 15%.
#[test]
fn the_header_says_a_budget_too_small_for_one_call() {
    let mut app = with_budget(0.15, 1.0);
    let snap = Arc::make_mut(&mut app.snap);
    snap.jobs[0].rt.budget_stop = Some(Box::new(crate::model::BudgetStop {
        period_key: BudgetPeriod::Day.key(app.now),
        reason: "budget too small for one call: it may cost up to $0.0025, the limit is $0.002 \
                 (job, per day)"
            .into(),
        at: app.now,
        alerted: true,
    }));
    let name = snap.jobs[0].def.name.clone();
    app.rederive();
    let t = text(&draw(&app, 120, 40));
    assert!(
        t.contains(&format!("{name}: budget too small for one call")),
        "{t}"
    );
    assert!(!t.contains("BUDGET REACHED"), "{t}");
    assert!(t.contains("(15%)"), "{t}");
}

/// At 80 columns a gauge with money in flight and a job too small for one call both fit their
/// words: the gauge keeps its whole label, the notice after it starts after a space and is cut
/// with an ellipsis, never run into the label mid-word.
#[test]
fn the_80_column_header_keeps_the_gauge_label_whole_and_cuts_the_notice_apart() {
    let mut app = with_budget(0.0, 0.5);
    let snap = Arc::make_mut(&mut app.snap);
    snap.period_held_usd = 0.0001;
    snap.jobs[0].rt.budget_stop = Some(Box::new(crate::model::BudgetStop {
        period_key: BudgetPeriod::Day.key(app.now),
        reason: "budget too small for one call: it may cost up to $0.0025, the job limit is \
                 $0.001/day"
            .into(),
        at: app.now,
        alerted: true,
    }));
    let name = snap.jobs[0].def.name.clone();
    app.rederive();
    let t = screen(&app, 80, 24);
    let line = t.lines().nth(1).unwrap_or_default();
    let after = line.split_once("$0.0001 in flight)").map(|(_, r)| r);
    let notice = format!(" {}", &name[..4]);
    assert!(
        after.is_some_and(|r| r.starts_with(&notice) && r.contains('…')),
        "{line}"
    );
    snap!("header_in_flight_and_too_small_80x24", t);
    // Wide enough, nothing is cut.
    let t = screen(&app, 140, 40);
    assert!(
        t.contains(&format!("{name}: budget too small for one call")),
        "{t}"
    );
}

/// At 80 columns every header line that does not fit ends in `…`: a spend label whose
/// in-flight clause is wider than the room left beside "spend incomplete", and the first line's
/// store path, are cut visibly, never just stopped at the edge.
#[test]
fn every_cut_header_line_at_80_columns_ends_in_an_ellipsis() {
    let mut app = with_budget(0.0000245, 0.0000987);
    let snap = Arc::make_mut(&mut app.snap);
    // "$0.0000245 of $0.0000987/month (37%, $0.0000123 in flight)": 58 columns, 56 left.
    snap.settings.budget = Some(Budget {
        max_cost_usd: 0.0000987,
        period: BudgetPeriod::Month,
    });
    snap.period_held_usd = 0.0000123;
    snap.spend_incomplete = true;
    snap.store = "/srv/cronsole/a-store-path-long-enough-to-reach-past-eighty-columns".into();
    let t = screen(&app, 80, 24);
    let lines: Vec<&str> = t.lines().take(3).collect();
    // The store's path is cut from the left: its end tells two stores apart.
    assert!(
        lines[0].contains("store …") && lines[0].ends_with("-eighty-columns"),
        "{t}"
    );
    let spend = lines[1];
    assert!(
        spend.contains("in fl") && spend.contains('…') && !spend.contains("in flight)"),
        "the in-flight clause is cut with an ellipsis: {spend}"
    );
    assert!(spend.ends_with("spend incomplete"), "{spend}");
    snap!("header_spend_cut_80x24", t);
}

/// With no engine running, the forecast does not count down to a limit nothing will reach: it
/// says no engine is running.
#[test]
fn the_forecast_says_no_engine_instead_of_a_limit_nothing_reaches() {
    let (mut snap, now) = testdata::fixed();
    snap.engine_running = false;
    snap.engine_seen = false;
    let mut f = snap
        .forecast
        .clone()
        .unwrap_or_else(|| panic!("a forecast"));
    f.limit_usd = Some(1.0);
    f.limit_reached_at = Some(now + chrono::Duration::seconds(45));
    snap.forecast = Some(f);
    snap.settings.budget = Some(Budget {
        max_cost_usd: 1.0,
        period: BudgetPeriod::Day,
    });
    let mut a = App::new(Arc::new(snap), now);
    let t = text(&draw(&a, 200, 40));
    assert!(!t.contains("(in 45s)"), "{t}");
    assert!(
        t.contains("→ no engine is running on this store: nothing spends until one starts"),
        "{t}"
    );
    // An engine seen: the countdown is the forecast again.
    Arc::make_mut(&mut a.snap).engine_seen = true;
    let t = text(&draw(&a, 200, 40));
    assert!(t.contains("(in 45s)"), "{t}");
}

#[test]
fn empty_store_says_so() {
    let (mut snap, now) = testdata::fixed();
    snap.jobs.clear();
    snap.recent.clear();
    snap.counts_24h.clear();
    snap.spend_per_hour = vec![];
    let mut a = App::new(Arc::new(snap), now);
    let t = text(&draw(&a, 80, 24));
    assert!(t.contains("no jobs in the store"), "{t}");
    assert!(t.contains("no job is leased"), "{t}");
    assert!(t.contains("no history rows"), "{t}");
    // Keys on an empty store do nothing harmful.
    for k in "jkgGptdhfs".chars() {
        a.handle_key(c(k));
    }
    a.handle_key(KeyEvent::from(KeyCode::Enter));
    draw(&a, 80, 24);
}

#[test]
fn ten_thousand_jobs_draw_only_visible_rows_and_follow_the_cursor() {
    let (snap, now) = testdata::big(10_000, 100_000);
    let mut a = App::new(Arc::new(snap), now);
    let t = text(&draw(&a, 120, 40));
    assert!(t.contains("Jobs 10000/10000"), "{t}");
    assert!(t.contains("job-00000"));
    keys(
        &mut a,
        &[KeyEvent::new(KeyCode::Char('G'), KeyModifiers::SHIFT)],
    );
    let t = text(&draw(&a, 120, 40));
    assert!(t.contains("job-09999"), "{t}");
    // The selected (last) job is on the table's last row, above the lower panes.
    let row = t.lines().position(|l| l.contains("job-09999")).unwrap_or(0);
    assert!(
        t.lines().nth(row + 1).is_some_and(|l| l.starts_with('└')),
        "{t}"
    );
}

#[test]
fn tiny_areas_never_panic() {
    let a = app();
    for w in 0..=12 {
        for h in 0..=6 {
            draw(&a, w, h);
        }
    }
    let t = text(&draw(&a, 79, 24));
    assert!(t.contains("terminal too small"), "{t}");
    let t = text(&draw(&a, 80, 23));
    assert!(t.contains("terminal too small"), "{t}");
    // Every mode at the minimum size and at odd sizes.
    let mut b = app();
    for k in ['d', '?'] {
        b.handle_key(c(k));
        draw(&b, 80, 24);
        draw(&b, 81, 25);
        draw(&b, 300, 24);
    }
}

#[test]
fn every_mode_draws_at_many_sizes_without_panicking() {
    let keysets: [&[KeyEvent]; 6] = [
        &[],
        &[KeyEvent::from(KeyCode::Enter)],
        &[c('d')],
        &[c('?')],
        &[c('j'), c('t')],
        &[KeyEvent::from(KeyCode::Tab), c('/'), c('x')],
    ];
    for ks in keysets {
        let mut a = app();
        keys(&mut a, ks);
        for w in (80..=200).step_by(17) {
            for h in (24..=70).step_by(11) {
                draw(&a, w, h);
            }
        }
        draw(&a, 400, 120);
    }
}

#[test]
fn every_key_is_shown_in_the_help() {
    let mut a = app();
    a.handle_key(c('?'));
    for (w, h) in [(80, 24), (120, 40)] {
        let t = text(&draw(&a, w, h));
        for b in KEYMAP {
            assert!(t.contains(b.label), "help at {w}×{h} lacks {}", b.label);
            assert!(t.contains(b.help), "help at {w}×{h} lacks '{}'", b.help);
        }
    }
}

#[test]
fn footer_comes_from_the_keymap() {
    use crate::tui::keymap::{HIDDEN, Scope};
    // Wide enough for every footer hint: each is there, in the keymap's words.
    let t = text(&draw(&app(), 200, 50));
    let last = t.lines().last().unwrap_or("");
    for b in KEYMAP
        .iter()
        .filter(|b| b.footer != HIDDEN && matches!(b.scope, Scope::Global | Scope::Main))
    {
        let hint = format!("{} {}", b.footer_key(), b.short);
        assert!(last.contains(&hint), "footer lacks {hint}: {last}");
    }
}

/// The run view (Enter on a History row) shows its own keys: what works on the run, not the
/// main screen's panes and filters.
#[test]
fn the_run_views_footer_shows_the_run_views_keys() {
    use crate::tui::keymap::{HIDDEN, Scope};
    let mut a = history_on("backup-logs", Status::Failed);
    a.handle_key(KeyEvent::from(KeyCode::Enter));
    assert!(matches!(a.mode, crate::tui::state::Mode::Run(_)));
    let t = text(&draw(&a, 200, 50));
    let last = t.lines().last().unwrap_or("");
    assert!(
        last.contains("R retry") && last.contains("Esc back"),
        "{last}"
    );
    for b in KEYMAP
        .iter()
        .filter(|b| b.footer != HIDDEN && b.scope == Scope::Main)
    {
        let hint = format!("{} {}", b.footer_key(), b.short);
        assert!(
            !last.contains(&hint),
            "run view footer shows {hint}: {last}"
        );
    }
    // And those keys do nothing there: Tab does not move the focus behind the view.
    let pane = a.pane;
    a.handle_key(KeyEvent::from(KeyCode::Tab));
    assert_eq!(a.pane, pane);
}

/// An agent whose key variable is unset is named on the header's first line, whole at 80
/// columns, and stays there after a key clears the notice line.
#[test]
fn an_unset_agent_key_is_a_lasting_header_alert_at_80_columns() {
    let mut a = app();
    a.key_alerts = crate::tui::state::alerts::missing_keys(&a.snap, &|v| v != "OPENAI_API_KEY");
    a.notice = Some("environment variable OPENAI_API_KEY is not set".into());
    let first = |a: &App| {
        text(&draw(a, 80, 24))
            .lines()
            .next()
            .unwrap_or("")
            .to_string()
    };
    // Beside the store, the alert takes its short words; the store's path keeps its end.
    let want = "cronsole [engine] writer: OPENAI_API_KEY unset, runs will fail  store …";
    assert!(first(&a).starts_with(want), "{}", first(&a));
    assert!(first(&a).ends_with(".cronsole"), "{}", first(&a));
    a.notice = None;
    a.handle_key(c('j'));
    assert!(first(&a).starts_with(want), "{}", first(&a));
    snap!("key_alert_80x24", screen(&a, 80, 24));
}

/// At 120 columns an alert about two agents' keys and a long owner id leave the store on the
/// first line: the owner id gives way, the alert and the store stay whole.
#[test]
fn the_header_keeps_the_store_beside_a_key_alert_at_120_columns() {
    let (mut snap, now) = testdata::fixed();
    snap.store = "./.cronsole".into();
    snap.owner = "vm:6870:896629d5".into();
    let mut a = App::new(Arc::new(snap), now);
    a.key_alerts = crate::tui::state::alerts::missing_keys(&a.snap, &|_| false);
    let t = text(&draw(&a, 120, 40));
    let first = t.lines().next().unwrap_or("");
    assert!(
        first.contains("agents analyst, writer: keys unset — their runs will fail"),
        "{first}"
    );
    assert!(first.ends_with("store ./.cronsole"), "{first}");
    assert!(!first.contains("vm:6870"), "{first}");
    // Without an alert the whole line fits, the owner id included.
    a.key_alerts.clear();
    let t = text(&draw(&a, 120, 40));
    let first = t.lines().next().unwrap_or("");
    assert!(
        first.contains("owner vm:6870:896629d5  store ./.cronsole"),
        "{first}"
    );
    // At 80 columns the store is still there, the owner id and uptime gone before it.
    for w in [80, 100] {
        let t = text(&draw(&a, w, 24));
        let first = t.lines().next().unwrap_or("");
        assert!(first.ends_with("store ./.cronsole"), "{w}: {first}");
    }
}

/// A notice at 120 columns shows whole: the optional hints give way to it, `? help` and
/// `q quit` stay; at 80 columns a longer one is cut with `…` before those two.
#[test]
fn a_notice_outranks_the_optional_footer_hints() {
    let mut a = app();
    let notice = "heartbeat: a succeeded run is not retried (only failed, abandoned, missed)";
    a.notice = Some(notice.into());
    let t = text(&draw(&a, 120, 40));
    let last = t.lines().last().unwrap_or("");
    assert!(last.starts_with(&format!("» {notice} ")), "{last}");
    assert!(last.ends_with("? help q quit"), "{last}");
    let t = text(&draw(&a, 80, 24));
    let last = t.lines().last().unwrap_or("");
    assert!(last.starts_with("» heartbeat: a succeeded run"), "{last}");
    assert!(last.contains("… ? help q quit"), "{last}");
}

/// At 80 columns, with an alert on the notice line, the footer still ends with `? help` and
/// `q quit`: hints are dropped by priority and the notice is cut, never those two.
#[test]
fn the_footer_fits_80_columns_and_keeps_help_and_quit() {
    for notice in [
        None,
        Some("ALERT: status-explainer is failing (incident open) and a long tail of words"),
    ] {
        let mut a = app();
        a.notice = notice.map(str::to_string);
        for w in [80, 100, 120] {
            let t = text(&draw(&a, w, 24));
            let last = t.lines().last().unwrap_or("").trim_end().to_string();
            assert!(
                last.ends_with("? help q quit"),
                "{w} cols, {notice:?}: {last}"
            );
            assert!(!last.contains("qu…") && !last.contains("Ctrl-C"), "{last}");
            if notice.is_some() {
                assert!(last.starts_with("» ALERT"), "{last}");
            }
        }
    }
    // The narrowest hints list is the always-kept one.
    let kept = super::help::fit_hints(&[crate::tui::keymap::Scope::Global], 0);
    let keys: Vec<_> = kept.iter().map(|b| b.footer_key()).collect();
    assert_eq!(keys, ["?", "q"]);
}

/// The sort order the jobs pane's title names (`sort LEFT`).
fn sort_label(screen: &str) -> String {
    let title = screen.lines().find(|l| l.contains(" Jobs ")).unwrap_or("");
    let after = title.split("sort ").nth(1).unwrap_or("");
    after.split_whitespace().next().unwrap_or("").to_string()
}

/// At 80 columns the jobs table drops NEXT, LAST and RUNS: `s` cycles only through the orders
/// it shows (NEXT's in LEFT, LAST's in PASSED; the title names that column) and skips RUNS,
/// whose order would read as none. At 120 columns every column is shown and RUNS is one.
#[test]
fn sort_cycles_over_the_columns_shown_at_80_columns() {
    for (w, h, want) in [
        (
            80,
            24,
            vec!["NAME", "LEFT", "PASSED", "STATUS", "SPEND", "NAME"],
        ),
        (
            120,
            40,
            vec!["NAME", "NEXT", "LAST", "STATUS", "RUNS", "SPEND", "NAME"],
        ),
    ] {
        let mut a = app();
        let mut seen = Vec::new();
        for _ in 0..want.len() {
            if let Some(k) = super::sort_keys(&a, Rect::new(0, 0, w, h)) {
                a.set_sortable(k);
            }
            let t = screen(&a, w, h);
            seen.push(sort_label(&t));
            if w == 80 && seen.last().map(String::as_str) == Some("PASSED") {
                snap!("jobs_sorted_by_last_run_80x24", t);
            }
            keys(&mut a, &[c('s')]);
        }
        assert_eq!(seen, want, "{w}x{h}");
    }
    // A key hidden since (the terminal shrank after it was picked) is named as not shown.
    let mut a = app();
    a.set_sortable(Vec::new());
    for _ in 0..4 {
        keys(&mut a, &[c('s')]);
    }
    assert!(screen(&a, 80, 24).contains("sort RUNS (not shown)"));
}

/// A monitor output and a model reply full of escape sequences and control bytes.
const HOSTILE: &str = "ok\u{1b}[2J\u{1b}[H\u{1b}]52;c;cm0gLXJmIC8=\u{07}\u{1b}]8;;http://evil\u{1b}\\link\u{1b}]8;;\u{1b}\\\u{9b}31m\u{0}\u{8}\u{7f}\ttab\r\nline2\u{1b}P+q\u{1b}\\ end";

fn assert_inert(buf: &Buffer) {
    for cell in buf.content() {
        for ch in cell.symbol().chars() {
            assert!(
                !(ch.is_control() || ('\u{80}'..='\u{9f}').contains(&ch)),
                "control char {ch:?} reached the buffer"
            );
        }
    }
}

#[test]
fn hostile_text_renders_inert_everywhere() {
    let (mut snap, now) = testdata::fixed();
    let name = "evil\u{1b}[31m-job".to_string();
    let mut j = testdata::fixed_jobs(now)[0].clone();
    j.def.name = name.clone();
    j.rt.state
        .notepad
        .insert("k\u{1b}]0;x\u{7}".into(), HOSTILE.into());
    snap.jobs.push(JobRow::of(&j));
    snap.jobs.sort_by(|a, b| a.def.name.cmp(&b.def.name));
    let mut r = testdata::row(1, &name, Status::Succeeded, now);
    r.result = Some(format!("model says: {HOSTILE}"));
    r.diff = Some(format!(
        "--- a\n+++ b\n@@ -1 +1 @@\n-{HOSTILE}\n+{HOSTILE}\n"
    ));
    snap.recent.insert(0, r);
    let mut a = App::new(Arc::new(snap), now);
    let pos = a
        .jobs
        .visible
        .iter()
        .position(|&i| a.snap.jobs[i].def.name == name)
        .unwrap_or(0);
    a.jobs.selected = pos;
    let main = draw(&a, 120, 40);
    assert_inert(&main);
    let t = text(&main);
    assert!(t.contains("model says: ok"), "{t}");
    assert!(t.contains("evil-job"), "{t}");
    a.handle_key(KeyEvent::from(KeyCode::Enter));
    testdata::read_record(&mut a, Some(j));
    let detail = draw(&a, 120, 40);
    assert_inert(&detail);
    assert!(text(&detail).contains("tab"), "{}", text(&detail));
    a.handle_key(KeyEvent::from(KeyCode::Esc));
    a.handle_key(c('d'));
    let diff = draw(&a, 120, 40);
    assert_inert(&diff);
    let t = text(&diff);
    assert!(
        t.contains("+ok") && t.contains("line2") && t.contains("link"),
        "{t}"
    );
}

/// The main screen with each pane focused, at 80×24, 120×40 and 200×50, with and without an
/// alert (a failing job's `!` mark and the notice line): the footer keeps `? help` and
/// `q quit`, empty panes shrink, and History shows the selected row's whole text when it has
/// the focus.
#[test]
fn snapshot_each_pane_at_three_sizes_with_and_without_an_alert() {
    use crate::tui::state::Pane;
    for (pane, name) in [
        (Pane::Jobs, "jobs"),
        (Pane::Leases, "leases"),
        (Pane::History, "history"),
    ] {
        for alert in [false, true] {
            let (mut snap, now) = testdata::fixed();
            if alert {
                let j = snap
                    .jobs
                    .iter_mut()
                    .find(|j| j.rt.last_status == Some(Status::Failed))
                    .unwrap();
                j.rt.alerted = true;
            }
            let mut a = App::new(Arc::new(snap), now);
            if alert {
                a.notice = Some("ALERT: summarise-news is failing (incident open)".into());
            }
            while a.pane != pane {
                a.handle_key(KeyEvent::from(KeyCode::Tab));
            }
            for (w, h) in [(80, 24), (120, 40), (200, 50)] {
                let t = screen(&a, w, h);
                let last = t.lines().last().unwrap_or("").trim_end();
                assert!(last.ends_with("? help q quit"), "{name} {w}x{h}: {last}");
                let alerted = if alert { "_alert" } else { "" };
                snap!(format!("pane_{name}{alerted}_{w}x{h}"), t);
            }
        }
    }
}

#[test]
fn a_cut_line_of_the_job_view_ends_in_an_ellipsis() {
    let mut a = app();
    a.jobs.selected = a
        .jobs
        .visible
        .iter()
        .position(|&i| a.snap.jobs[i].def.name == "summarise-news")
        .unwrap_or(0);
    a.handle_key(KeyEvent::from(KeyCode::Enter));
    testdata::read_record(&mut a, None);
    a.handle_key(c('G'));
    let t = text(&draw(&a, 80, 24));
    let row = t
        .lines()
        .find(|l| l.contains("OPENAI_API_KEY"))
        .unwrap_or("");
    assert!(row.ends_with("…│"), "{t}");
}

#[test]
fn snapshot_detail() {
    let mut a = app();
    a.jobs.selected = a
        .jobs
        .visible
        .iter()
        .position(|&i| a.snap.jobs[i].def.name == testdata::MONITOR_JOB)
        .unwrap_or(0);
    a.handle_key(KeyEvent::from(KeyCode::Enter));
    testdata::read_record(&mut a, None);
    snap!("detail_80x24", screen(&a, 80, 24));
    snap!("detail_120x40", screen(&a, 120, 40));
}

#[test]
fn snapshot_diff_viewer() {
    let mut a = app();
    a.jobs.selected = a
        .jobs
        .visible
        .iter()
        .position(|&i| a.snap.jobs[i].def.name == testdata::MONITOR_JOB)
        .unwrap_or(0);
    a.handle_key(c('d'));
    snap!("diff_80x24", screen(&a, 80, 24));
    a.handle_key(c('['));
    snap!("diff_older_120x40", screen(&a, 120, 40));
}

#[test]
fn snapshot_help() {
    let mut a = app();
    a.handle_key(c('?'));
    snap!("help_80x24", screen(&a, 80, 24));
    snap!("help_120x40", screen(&a, 120, 40));
}

#[test]
fn snapshot_status_filter() {
    let mut a = app();
    // succeeded → failed
    a.handle_key(c('f'));
    a.handle_key(c('f'));
    assert_eq!(a.filters.status, Some(Status::Failed));
    snap!("filter_failed_80x24", screen(&a, 80, 24));
    snap!("filter_failed_120x40", screen(&a, 120, 40));
}

#[test]
fn snapshot_confirm_and_name_filter() {
    let mut a = app();
    keys(&mut a, &[c('/'), c('b'), c('a'), c('c')]);
    // Both panes the filter narrows say so in their titles.
    let shown = screen(&a, 120, 40);
    assert!(
        shown
            .lines()
            .any(|l| l.contains(" History ") && l.contains("/bac")),
        "{shown}"
    );
    snap!("name_filter_typing_80x24", screen(&a, 80, 24));
    keys(&mut a, &[KeyEvent::from(KeyCode::Enter), c('j'), c('t')]);
    snap!("confirm_trigger_80x24", screen(&a, 80, 24));
}

/// An app with the History pane focused and its cursor on the row of `job` with `status`.
fn history_on(job: &str, status: Status) -> App {
    let mut a = app();
    keys(
        &mut a,
        &[KeyEvent::from(KeyCode::Tab), KeyEvent::from(KeyCode::Tab)],
    );
    let sel = a
        .history_rows()
        .position(|r| r.job == job && r.status == status)
        .unwrap_or(0);
    a.history.select(&a.snap, &a.filters, sel);
    a
}

#[test]
fn the_agent_error_variable_name_is_not_cut_at_120x40() {
    let t = screen(&app(), 120, 40);
    assert!(t.contains("OPENAI_API_KEY"), "{t}");
    // Schedules are whole while NAME has room, and the lease's expiry is never cut mid-word.
    assert!(
        t.contains("every 30 minutes") && t.contains("expires in 40s renewed 20s ago"),
        "{t}"
    );
}

#[test]
fn the_selected_row_highlight_covers_the_whole_row_without_colour() {
    for (w, h) in [(80, 24), (120, 40)] {
        let a = history_on("summarise-news", Status::Failed);
        let buf = draw(&a, w, h);
        let mut rows = Vec::new();
        for y in 0..h {
            let reversed = (0..w)
                .filter(|&x| {
                    buf[(x, y)]
                        .modifier
                        .contains(ratatui::style::Modifier::REVERSED)
                })
                .count();
            if reversed > 20 {
                rows.push((y, reversed));
            }
        }
        // Every cell of the highlighted history row(s) is reversed: one contiguous run from
        // the pane's left edge to its right edge, the same count on each line.
        assert!(!rows.is_empty(), "no highlighted row at {w}×{h}");
        let n = rows[0].1;
        assert!(rows.iter().all(|r| r.1 == n), "{rows:?}");
        for (y, _) in &rows {
            let xs: Vec<u16> = (0..w)
                .filter(|&x| {
                    buf[(x, *y)]
                        .modifier
                        .contains(ratatui::style::Modifier::REVERSED)
                })
                .collect();
            assert_eq!(
                xs.len() as u16,
                xs[xs.len() - 1] - xs[0] + 1,
                "gaps at {w}×{h}"
            );
            // Colours are dropped on the highlighted cells (NO_COLOR shows only modifiers).
            assert!(
                xs.iter()
                    .all(|&x| buf[(x, *y)].fg == ratatui::style::Color::Reset)
            );
        }
    }
}

#[test]
fn snapshot_history_focus_and_run_view() {
    let a = history_on("summarise-news", Status::Failed);
    snap!("history_focus_80x24", screen(&a, 80, 24));
    snap!("history_focus_120x40", screen(&a, 120, 40));
    let mut a = history_on("summarise-news", Status::Failed);
    a.handle_key(KeyEvent::from(KeyCode::Enter));
    let t = screen(&a, 120, 40);
    assert!(
        t.contains("OPENAI_API_KEY") && t.contains("attempts"),
        "{t}"
    );
    let small = screen(&a, 80, 24);
    // The title does not fit the border at 80 columns: it ends in `…`, never just stops.
    let title = small.lines().find(|l| l.contains("Run of")).unwrap_or("");
    assert!(title.ends_with("…┐"), "{title}");
    snap!("run_view_80x24", small);
    snap!("run_view_120x40", t);
    let mut a = history_on(testdata::MONITOR_JOB, Status::Succeeded);
    a.handle_key(KeyEvent::from(KeyCode::Enter));
    let t = screen(&a, 120, 40);
    assert!(
        t.contains("+price: 41.99") && t.contains("gpt-4o-mini"),
        "{t}"
    );
    snap!("run_view_with_diff_120x40", t);
}

/// The run view of an `abandoned` row whose lease expired names the owner that recovered it
/// under the owner line; a row its own owner wrote has no such line.
#[test]
fn the_run_view_names_the_owner_that_recovered_an_abandoned_run() {
    use crate::tui::state::Mode;
    let mut a = history_on("stuck-sync", Status::Abandoned);
    let mut row = a.selected_run().unwrap().clone();
    a.mode = Mode::Run(Box::new(row.clone()));
    assert!(
        !screen(&a, 120, 40).contains("recovered"),
        "no line without it"
    );
    row.recovered_by = Some("host-c:31337:feedbeef".into());
    a.mode = Mode::Run(Box::new(row));
    let t = screen(&a, 120, 40);
    assert!(t.contains("recovered by host-c:31337:feedbeef"), "{t}");
}

#[test]
fn snapshot_run_view_with_attempts() {
    use crate::model::Attempt;
    use crate::tui::state::Mode;
    let mut a = history_on("summarise-news", Status::Failed);
    let mut row = a.selected_run().unwrap().clone();
    let t0 = row.started_at;
    let s = chrono::Duration::milliseconds;
    row.trigger = crate::model::Trigger::Retry;
    row.attempts = 3;
    row.attempt_log = vec![
        Attempt::new(
            t0,
            t0 + s(350),
            Some("HTTP 500 from openai: upstream broke"),
        ),
        Attempt::new(t0 + s(1350), t0 + s(31_350), Some("timed out after 30s")),
        Attempt::new(t0 + s(33_000), t0 + s(34_200), None),
    ];
    row.attempt_log[2].input_tokens = 812;
    row.attempt_log[2].output_tokens = 64;
    row.attempt_log[2].cost_usd = 0.000160;
    a.mode = Mode::Run(Box::new(row));
    let t = screen(&a, 120, 40);
    assert!(t.contains("Attempts"), "{t}");
    assert!(
        t.contains("#1  11:43:20 → 11:43:20 ( 0.35s)  failed"),
        "{t}"
    );
    assert!(t.contains("HTTP 500 from openai: upstream broke"), "{t}");
    assert!(t.contains("succeeded  812 in, 64 out, $0.00016"), "{t}");
    snap!("run_view_attempts_80x24", screen(&a, 80, 24));
    snap!("run_view_attempts_120x40", t);
}

#[test]
fn snapshot_confirm_cancel() {
    let mut a = app();
    a.jobs.selected = a
        .jobs
        .visible
        .iter()
        .position(|&i| a.snap.jobs[i].def.name == "backup-db")
        .unwrap_or(0);
    a.handle_key(KeyEvent::new(KeyCode::Char('X'), KeyModifiers::SHIFT));
    snap!("confirm_cancel_80x24", screen(&a, 80, 24));
    snap!("confirm_cancel_120x40", screen(&a, 120, 40));
}

#[test]
fn snapshot_attached_without_an_engine() {
    let (mut snap, now) = testdata::fixed();
    snap.engine_running = false;
    snap.engine_seen = false;
    snap.owners_seen.clear();
    snap.owner = "attached (no engine)".into();
    let a = App::new(Arc::new(snap), now);
    let t = screen(&a, 120, 40);
    assert!(t.contains("NO ENGINE"), "{t}");
    snap!("attached_no_engine_80x24", screen(&a, 80, 24));
    snap!("attached_no_engine_120x40", t);
}

#[test]
fn snapshot_dry_run_view() {
    let mut a = app();
    a.handle_key(KeyEvent::new(KeyCode::Char('D'), KeyModifiers::SHIFT));
    let crate::tui::state::Mode::DryRun(job) = a.mode.clone() else {
        panic!("D opens the dry run: {:?}", a.mode);
    };
    let waiting = screen(&a, 80, 24);
    assert!(waiting.contains("running the gates"), "{waiting}");
    a.on_loaded(crate::tui::state::Loaded::DryRun {
        job: job.clone(),
        text: Ok(format!(
            "dry run of {job} (command job): nothing is called, delivered or recorded\n\
             gate:   none\ncommand: tar czf /backups/db.tgz /var/lib/db\nsinks:  ops\n\
             escape \u{1b}[31mred\u{1b}[0m stays inert\n"
        )),
    });
    let t = screen(&a, 120, 40);
    assert!(!t.contains('\u{1b}'), "{t}");
    snap!("dry_run_80x24", screen(&a, 80, 24));
    snap!("dry_run_120x40", t);
    // A reason wider than 80 columns wraps: read whole, never cut at the border.
    a.on_loaded(crate::tui::state::Loaded::DryRun {
        job: job.clone(),
        text: Ok(
            "would run: no\n  - API key env var OPENAI_API_KEY is not set (or is empty): \
                  the run would fail before any request\n"
                .into(),
        ),
    });
    let small = text(&draw(&a, 80, 24));
    assert!(
        small.contains("│  - API key env var") && small.contains("│    fail before any request"),
        "{small}"
    );
}

#[test]
fn snapshot_confirm_pause_of_the_filtered_set() {
    let mut a = app();
    a.handle_key(KeyEvent::new(KeyCode::Char('P'), KeyModifiers::SHIFT));
    assert!(matches!(
        a.dialog.prompt,
        crate::tui::state::Prompt::ConfirmBulk { pause: true, .. }
    ));
    snap!("confirm_bulk_pause_80x24", screen(&a, 80, 24));
    snap!("confirm_bulk_pause_120x40", screen(&a, 120, 40));
}

#[test]
fn detail_shows_every_live_run_and_what_the_overlap_policy_keeps() {
    let (mut snap, now) = testdata::fixed();
    let i = snap
        .jobs
        .iter()
        .position(|j| j.rt.lease.is_some())
        .expect("a leased job in the fixture");
    let name = snap.jobs[i].def.name.clone();
    let mut j = testdata::record(&name).expect("the fixture's record");
    j.def.overlap = crate::model::Overlap::Allow {
        max_concurrent_runs: 3,
    };
    let mut second = j.rt.lease.clone().unwrap();
    second.run_id = uuid::Uuid::from_u128(42);
    second.owner = "host-b:7:second".into();
    j.rt.overlap.leases.push(second);
    j.rt.overlap.buffered_slot = Some(now);
    snap.jobs[i] = JobRow::of(&j);
    let mut a = App::new(Arc::new(snap), now);
    a.jobs.selected = a
        .jobs
        .visible
        .iter()
        .position(|&k| a.snap.jobs[k].def.name == name)
        .unwrap_or(0);
    a.handle_key(KeyEvent::from(KeyCode::Enter));
    testdata::read_record(&mut a, Some(j));
    let t = screen(&a, 120, 40);
    assert!(t.contains("host-b:7:second"), "{t}");
    assert!(t.contains("allow: 2 of 3 runs live"), "{t}");
    assert!(t.contains("kept to run next"), "{t}");
}

/// Right after an edit of the budget's `period` (day → week), the jobs table's spend column must
/// not show $0.00 for every job whose counters are still kept per day while the header, `jobs`
/// and `stats` count that day's spend in the week. The column reads the counters by the same
/// rule (`store::rules::period::counter_spend`): the day's spend in its week, the all-time spend
/// under `total`, nothing of an older day.
#[test]
fn the_spend_column_agrees_with_the_store_after_a_period_edit() {
    let at = |period: BudgetPeriod| {
        let (mut snap, now) = testdata::fixed();
        snap.settings.budget = Some(Budget {
            max_cost_usd: 1.0,
            period,
        });
        let app = App::new(Arc::new(snap), now);
        let row = app
            .snap
            .jobs
            .iter()
            .find(|j| j.def.max_cost_usd == Some(0.5))
            .cloned()
            .unwrap();
        assert_eq!(row.rt.counters.period_key, BudgetPeriod::Day.key(now));
        (text(&draw(&app, 160, 40)), app.job_period_spend(&row))
    };
    let (t, spent) = at(BudgetPeriod::Week);
    assert_eq!(spent, 0.4213);
    assert!(t.contains("$0.421/$0.50"), "{t}");
    assert!(!t.contains("$0.00/$0.50"), "{t}");
    let (t, spent) = at(BudgetPeriod::Total);
    assert_eq!(spent, 3.2);
    assert!(t.contains("$3.20/$0.50"), "{t}");
    let (_, spent) = at(BudgetPeriod::Day);
    assert_eq!(spent, 0.4213);
}

/// A sub-cent spend against a small budget (`$0.000017/$0.0025`, 16 columns) is shown whole at
/// 120 columns: the SPEND/BUDGET column takes the width its amounts need before NAME and
/// SCHEDULE grow, since a cut amount reads as another number.
#[test]
fn a_long_spend_and_budget_is_not_cut_at_120_columns() {
    let (mut snap, now) = testdata::fixed();
    let j = snap
        .jobs
        .iter_mut()
        .find(|j| j.def.max_cost_usd == Some(0.5))
        .unwrap();
    j.def.max_cost_usd = Some(0.0025);
    j.rt.counters.period_cost_usd = 0.000017;
    let app = App::new(Arc::new(snap), now);
    let t = screen(&app, 120, 40);
    let row = t.lines().find(|l| l.contains("price-watch")).unwrap();
    assert!(
        row.contains("$0.000017/$0.0025") && !row.contains('…'),
        "{t}"
    );
    snap!("jobs_long_spend_120x40", t);
}

#[test]
fn the_header_shows_a_store_outage_while_it_lasts_and_the_last_one_after() {
    let mut a = app();
    let now = a.now;
    let since = now - chrono::Duration::seconds(45);
    a.store_health.store_failing_since = Some(since);
    a.store_health.claims_stopped = true;
    let t = screen(&a, 120, 40);
    let line = t.lines().next().unwrap_or_default().to_string();
    assert!(
        line.contains(&format!(
            "STORE UNWRITABLE since {} (45s): claims stopped",
            since.format("%H:%M:%S")
        )),
        "{t}"
    );
    // It ended: the header says when, and for how long it lasted, for an hour.
    a.store_health.store_failing_since = None;
    a.store_health.claims_stopped = false;
    a.store_health.last_outage = Some((since, now));
    let t = screen(&a, 120, 40);
    assert!(!t.contains("UNWRITABLE"), "{t}");
    assert!(
        t.contains(&format!(
            "store outage {}–{} (45s), claims resumed",
            since.format("%H:%M:%S"),
            now.format("%H:%M:%S")
        )),
        "{t}"
    );
    a.set_now(now + chrono::Duration::seconds(3601));
    assert!(!screen(&a, 120, 40).contains("store outage"));
}

#[test]
fn the_header_says_when_claims_stop_for_this_hosts_clock() {
    let mut a = app();
    a.store_health.clock_offset_ms = Some(-40_000);
    a.store_health.clock_refused = Some("clock off".into());
    let t = screen(&a, 120, 40);
    let line = t.lines().next().unwrap_or_default().to_string();
    assert!(
        line.contains("CLOCK 40.0s behind the store's: claims stopped"),
        "{t}"
    );
    a.store_health.clock_refused = None;
    assert!(!screen(&a, 120, 40).contains("CLOCK"));
}

/// The fixture without any spend: no spend in 24 h, nothing this period, no job spent.
fn without_spend(snap: &mut crate::snapshot::Snapshot) {
    snap.spend_per_hour = vec![0.0; 24];
    snap.period_spend_usd = 0.0;
    snap.spend_incomplete = false;
    for j in &mut snap.jobs {
        j.rt.counters.period_cost_usd = 0.0;
        j.rt.counters.total_cost_usd = 0.0;
        j.rt.counters.cost_incomplete = false;
    }
    for r in &mut snap.recent {
        r.cost_usd = 0.0;
    }
}

/// The spend pane at 80×24, 120×40 and 200×50: with budgets and spend it shows the sparkline
/// and the top spenders; with nothing spent and no budget it takes one line, the leases pane
/// takes its rows, and a side column with neither leases nor spend is narrow, so History gets
/// the width.
#[test]
fn snapshot_the_spend_pane_empty_and_with_budgets_at_three_sizes() {
    for case in ["budgets", "empty", "empty_no_leases"] {
        let (mut snap, now) = testdata::fixed();
        if case != "budgets" {
            without_spend(&mut snap);
            snap.settings.budget = None;
            for j in &mut snap.jobs {
                j.def.max_cost_usd = None;
            }
        }
        if case == "empty_no_leases" {
            for j in &mut snap.jobs {
                j.rt.lease = None;
            }
            snap.in_flight.clear();
        }
        let a = App::new(Arc::new(snap), now);
        for (w, h) in [(80, 24), (120, 40), (200, 50)] {
            let t = screen(&a, w, h);
            let spend_rows = t
                .lines()
                .filter(|l| l.contains("│no spend in 24 h"))
                .count();
            let history_x = t
                .lines()
                .find_map(|l| l.find("┌ History").map(|x| l[..x].chars().count()));
            match case {
                "budgets" => {
                    assert!(t.contains("Spend/h 24h, max $0.10"), "{w}x{h}\n{t}");
                    // The top spenders when the column has rows for them.
                    assert!(h < 40 || t.contains("$0.421 price-watch"), "{w}x{h}\n{t}");
                }
                _ => {
                    // One line: its border above and below, and nothing else.
                    assert_eq!(spend_rows, 1, "{w}x{h}\n{t}");
                    let last_body = t.lines().rev().nth(1).unwrap_or("");
                    assert!(last_body.starts_with("└"), "{w}x{h}\n{t}");
                    let spend_line = t.lines().rev().nth(2).unwrap_or("");
                    assert!(spend_line.contains("no spend in 24 h"), "{w}x{h}\n{t}");
                }
            }
            if case == "empty_no_leases" {
                // "no job is leased" and the spend pane's title fit in the narrowest column.
                assert_eq!(history_x, Some(super::SIDE_MIN as usize), "{w}x{h}\n{t}");
            }
            snap!(format!("spend_{case}_{w}x{h}"), t);
        }
    }
}

/// A job whose run waits for an operator's answer has its own mark, `?` (not `●`), and the
/// `?` help's legend names it.
#[test]
fn a_run_awaiting_approval_has_its_own_mark() {
    let (mut snap, now) = testdata::fixed();
    let Some(job) = snap.jobs.iter_mut().find(|j| j.def.name == "backup-db") else {
        panic!("the fixed data has backup-db");
    };
    let Some(lease) = job.rt.lease.as_mut() else {
        panic!("backup-db is running in the fixed data");
    };
    lease.awaiting = Some(crate::model::AwaitingApproval {
        tool: "files.write_file".into(),
        call_id: "c1".into(),
        arguments: "{}".into(),
        since: now - chrono::Duration::seconds(12),
        deadline: now + chrono::Duration::seconds(3588),
        answer: None,
    });
    let app = App::new(Arc::new(snap), now);
    let t = text(&draw(&app, 120, 40));
    let line = t
        .lines()
        .find(|l| l.contains("backup-db"))
        .unwrap_or_default();
    assert!(line.contains("? backup-db") && !line.contains('●'), "{t}");
    snap!("awaiting_approval_mark_120x40", t);
    let (_, right) = super::help::help_columns();
    assert!(
        right
            .iter()
            .any(|l| l.to_string().contains("? awaiting approval (keys a, x)")),
        "the legend names the mark"
    );
}

/// While a call awaits approval the footer says so for as long as it waits, at every size; a
/// command it names answers the call it shows (`--call`), and where that command does not fit
/// whole it names the keys alone. `a` asks about that call by its id, and `y` answers that
/// call only.
#[test]
fn the_approval_alert_answers_the_call_it_shows() {
    let (mut snap, now) = testdata::fixed();
    let Some(lease) = snap
        .jobs
        .iter_mut()
        .find(|j| j.def.name == "backup-db")
        .and_then(|j| j.rt.lease.as_mut())
    else {
        panic!("backup-db is running in the fixed data");
    };
    lease.awaiting = Some(crate::model::AwaitingApproval {
        tool: "files.write_file".into(),
        call_id: "call_7Qx2".into(),
        arguments: "{}".into(),
        since: now - chrono::Duration::seconds(12),
        deadline: now + chrono::Duration::seconds(3588),
        answer: None,
    });
    let run_id = lease.run_id;
    let mut a = App::new(Arc::new(snap), now);
    let command = format!("cronsole approve {run_id} --call call_7Qx2");
    for (w, h) in [(80, 24), (120, 40), (200, 50)] {
        let t = screen(&a, w, h);
        let foot = t.lines().last().unwrap_or("").to_string();
        assert!(
            foot.starts_with("» APPROVAL NEEDED: backup-db wants files.write_file"),
            "{w}: {foot}"
        );
        assert!(foot.ends_with("? help q quit"), "{w}: {foot}");
        assert!(
            !foot.contains("cronsole approve") || foot.contains(&command),
            "{w}: {foot}"
        );
        assert_eq!(foot.contains(&command), w == 200, "{w}: {foot}");
        snap!(format!("approval_alert_{w}x{h}"), t);
    }
    // `a` on its row names the call; `y` sends the answer for that call only.
    keys(&mut a, &[c('a')]);
    let t = screen(&a, 120, 40);
    assert!(t.contains("call_7Qx2"), "{t}");
    let act = a.handle_key(c('y'));
    assert_eq!(
        act,
        crate::tui::state::Action::Send(crate::engine::Command::Answer {
            run_id,
            call: "call_7Qx2".into(),
            approve: true,
        })
    );
}

/// The screen after a clock 2 days ahead was set right: the job that ran while it was ahead
/// reads `2d00h ahead` in PASSED with its LAST and NEXT whole, and its row in History keeps the
/// date it was given, at 80×24 and 120×40.
#[test]
fn snapshot_after_a_clock_two_days_ahead_was_set_right() {
    let (mut snap, now) = testdata::fixed();
    let ahead = now + chrono::Duration::days(2);
    let j = snap
        .jobs
        .iter_mut()
        .find(|j| j.def.name == "backup-db")
        .unwrap();
    j.rt.last_run_at = Some(ahead);
    j.rt.next_slot = Some(ahead + chrono::Duration::hours(1));
    let mut r = testdata::row(7, "backup-db", Status::Succeeded, ahead);
    r.result = Some("dumped 3 tables".into());
    snap.recent.insert(0, r);
    let a = App::new(Arc::new(snap), now);
    for (w, h) in [(80, 24), (120, 40)] {
        let t = screen(&a, w, h);
        let row = t.lines().find(|l| l.contains("backup-db ")).unwrap_or("");
        assert!(row.contains("2d00h ahead") && !row.contains('…'), "{t}");
        snap!(format!("clock_set_right_{w}x{h}"), t);
    }
}

/// The console's money is the CLI's one format: a $0.0000245 spend reads `$0.0000245` (three
/// significant digits) in the budget gauge, the Spend pane's title and its top spenders,
/// never `$0.0000`.
#[test]
fn a_tiny_spend_reads_the_same_in_the_gauge_and_the_spend_pane_as_in_the_cli() {
    let tiny = 0.000_024_5;
    let cli = crate::cost::usd(tiny);
    assert_eq!(cli, "$0.0000245");
    let (label_ratio, label) = budget_gauge(tiny, 0.0, 0.002, BudgetPeriod::Day);
    assert!(
        label_ratio > 0.0 && label.starts_with(&format!("{cli} of $0.002/day")),
        "{label}"
    );
    let (mut snap, now) = testdata::fixed();
    without_spend(&mut snap);
    snap.spend_per_hour[23] = tiny;
    snap.period_spend_usd = tiny;
    let name = snap.jobs[0].def.name.clone();
    snap.jobs[0].rt.counters.period_cost_usd = tiny;
    snap.jobs[0].rt.counters.total_cost_usd = tiny;
    let a = App::new(Arc::new(snap), now);
    let t = screen(&a, 140, 40);
    assert!(t.contains(&format!("Spend/h 24h, max {cli}")), "{t}");
    assert!(t.contains(&format!("{cli} {name}")), "{t}");
    assert!(t.contains(&format!("{cli} of ")), "{t}");
    assert!(!t.contains("$0.0000 ") && !t.contains("$0.0000/"), "{t}");
}

/// At 80×24 a spend and budget of three significant digits each are shown whole in the jobs
/// table (SCHEDULE gives up columns for them): a cut amount would read as another number.
#[test]
fn a_small_spend_and_budget_are_whole_at_80_columns() {
    let (mut snap, now) = testdata::fixed();
    for j in snap.jobs.iter_mut().filter(|j| j.def.name == "price-watch") {
        j.def.max_cost_usd = Some(0.00125);
        j.rt.counters.period_cost_usd = 0.000642;
    }
    let a = App::new(Arc::new(snap), now);
    let t = screen(&a, 80, 24);
    let row = t.lines().find(|l| l.contains("price-watch")).unwrap_or("");
    assert!(row.contains("$0.000642/$0.00125"), "{row}");
    snap!("jobs_small_spend_80x24", t);
}

/// `d` on a job without a monitor says, whole at 80 columns, that it never gets a diff.
#[test]
fn the_diff_viewer_of_a_job_without_a_monitor_says_so_whole_at_80_columns() {
    let mut a = app();
    a.jobs.selected = a
        .jobs
        .visible
        .iter()
        .position(|&i| a.snap.jobs[i].def.name == "backup-db")
        .unwrap_or(0);
    a.handle_key(c('d'));
    testdata::read_record(&mut a, None);
    let t = text(&draw(&a, 80, 24));
    assert!(
        t.contains("backup-db has no `monitor:`, so it never gets a diff:")
            && t.contains("only a monitor's runs record one"),
        "{t}"
    );
}

/// At 80×24 with no lease, Tab onto the leases pane shows it with its words, not an empty
/// two-row box above the spend pane.
#[test]
fn a_focused_empty_leases_pane_says_so_at_80x24() {
    let (mut snap, now) = testdata::fixed();
    without_spend(&mut snap);
    for j in &mut snap.jobs {
        j.rt.lease = None;
    }
    snap.in_flight.clear();
    let mut a = App::new(Arc::new(snap), now);
    a.handle_key(KeyEvent::from(KeyCode::Tab));
    assert_eq!(a.pane, crate::tui::state::Pane::Leases);
    let t = text(&draw(&a, 80, 24));
    assert!(t.contains("no job is leased"), "{t}");
}

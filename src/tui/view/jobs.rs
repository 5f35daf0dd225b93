//! The jobs table, like `systemctl list-timers`: state mark, NAME, SCHEDULE, NEXT, LEFT, LAST,
//! PASSED, STATUS, RUNS, SPEND/BUDGET. Only the rows that fit are formatted, so a store with
//! 10 000 jobs costs the same per frame as one with 20.
//!
//! Owns: column choice by width and row formatting. Must not touch: state.
//!
//! Decisions: NEXT and LEFT say `n/a` for paused and retired jobs (nothing will fire, as
//! list-timers does); RUNS counts every execution, any trigger (see `App::executions`); spare
//! width goes first to SPEND/BUDGET up to its longest visible amount (a cut amount reads as
//! another number), then to NAME up to its longest visible name, then to SCHEDULE up to its
//! longest description, then to NAME up to 32; short of room, SPEND/BUDGET takes columns from
//! SCHEDULE (down to 10); a paused job's reason follows its name; the mark column
//! shows `!` for a job with an open alerted incident and `…` for one with runs queued; a job both
//! alerted and paused shows both (`!‖`), as does one both queued and paused (`…‖`), the column
//! widening to two cells only while a shown row needs them; `s` cycles only through orders whose
//! column is shown (NEXT's order shows in LEFT, LAST's in PASSED, and the title names the
//! column shown), so a narrow table is never sorted by a column it dropped.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;

use super::{elide, money, pane_block, status_style, when};
use crate::snapshot::{JobRow, PendingOp};
use crate::text;
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
    (Col::Spend, "SPEND/BUDGET", SPEND_MIN),
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

/// Narrowest SCHEDULE when it gives room to SPEND/BUDGET.
const SCHEDULE_MIN: u16 = 10;

/// Narrowest SPEND/BUDGET column.
const SPEND_MIN: u16 = 13;

/// Widest SPEND/BUDGET cell: `-$1000000.00?/$1000000.00` fits.
const SPEND_MAX: u16 = 26;

/// What the variable columns would need to show every visible row whole.
#[derive(Default, Clone, Copy)]
struct Needs {
    /// The widest state mark (`!‖` takes two cells).
    mark: u16,
    name: u16,
    schedule: u16,
    spend: u16,
    /// NEXT, LAST and PASSED: wider than their usual 8/8/7 only when a shown instant is a day
    /// or more from now (`12-09 14:00`) or a PASSED is ahead (`2d00h ahead`).
    next: u16,
    last: u16,
    passed: u16,
}

/// The table's width inside its pane's borders.
fn inner_width(pane_width: u16) -> u16 {
    pane_width.saturating_sub(2)
}

/// The columns that show a sort order's key: NEXT's order is LEFT's too (time to the next
/// slot), LAST's is PASSED's (time since the last run).
fn sort_cols(key: SortKey) -> &'static [Col] {
    match key {
        SortKey::Name => &[Col::Name],
        SortKey::Next => &[Col::Next, Col::Left],
        SortKey::Last => &[Col::Last, Col::Passed],
        SortKey::Status => &[Col::Status],
        SortKey::Runs => &[Col::Runs],
        SortKey::Spend => &[Col::Spend],
    }
}

/// The sort orders whose column the table shows in a pane `pane_width` wide (`s` cycles
/// through these only).
pub(crate) fn sort_keys(app: &App, pane_width: u16) -> Vec<SortKey> {
    let cols = layout(inner_width(pane_width), needs(app));
    SortKey::ALL
        .into_iter()
        .filter(|k| sort_cols(*k).iter().any(|c| cols.iter().any(|x| x.0 == *c)))
        .collect()
}

/// Widths from the jobs that can be shown (bounded, so 10 000 jobs cost the same per frame).
fn needs(app: &App) -> Needs {
    let mut need = Needs::default();
    for &idx in app.jobs.visible.iter().take(200) {
        if let Some(j) = app.snap.jobs.get(idx) {
            let w = |s: &str| u16::try_from(s.chars().count()).unwrap_or(u16::MAX);
            let reason = j.rt.pause_reason.as_deref().filter(|_| j.rt.paused);
            need.name = need
                .name
                .max(w(&j.def.name).saturating_add(reason.map_or(0, |r| w(r) + 3)));
            need.schedule = need.schedule.max(w(&app.schedule_words(j)));
            need.spend = need.spend.max(w(&cell(app, j, Col::Spend).0));
            need.mark = need.mark.max(w(mark(app, j).0));
            need.next = need.next.max(w(&cell(app, j, Col::Next).0));
            need.last = need.last.max(w(&cell(app, j, Col::Last).0));
            need.passed = need.passed.max(w(&cell(app, j, Col::Passed).0));
        }
    }
    need
}

/// The columns that fit in `width`, with NAME and SCHEDULE widened into what is left (see the
/// module doc for the order).
fn layout(width: u16, need: Needs) -> Vec<(Col, &'static str, u16)> {
    let mut cols: Vec<(Col, &'static str, u16)> = COLS.to_vec();
    for (col, w) in [
        (Col::Mark, need.mark),
        (Col::Next, need.next),
        (Col::Last, need.last),
        (Col::Passed, need.passed),
    ] {
        if let Some(c) = cols.iter_mut().find(|c| c.0 == col) {
            c.2 = c.2.max(w);
        }
    }
    let total = |c: &[(Col, &str, u16)]| -> u16 {
        c.iter().map(|x| x.2).sum::<u16>() + c.len().saturating_sub(1) as u16
    };
    for drop in DROP_ORDER {
        if total(&cols) <= width {
            break;
        }
        cols.retain(|c| c.0 != drop);
    }
    let mut spare = width.saturating_sub(total(&cols));
    // Short of room for its amounts, SPEND/BUDGET takes from SCHEDULE (a cut description still
    // reads as itself, a cut amount as another number) down to SCHEDULE_MIN, so the spare
    // columns go to NAME, which tells the rows apart.
    let want = need.spend.min(SPEND_MAX);
    if total(&cols) + want.saturating_sub(SPEND_MIN) > width {
        borrow(&mut cols, Col::Spend, want);
    }
    let mut grow = |cols: &mut Vec<(Col, &'static str, u16)>, col: Col, upto: u16| {
        if let Some(c) = cols.iter_mut().find(|c| c.0 == col) {
            let add = upto.saturating_sub(c.2).min(spare);
            c.2 += add;
            spare -= add;
        }
    };
    grow(&mut cols, Col::Spend, want);
    grow(&mut cols, Col::Name, need.name.min(NAME_MAX));
    grow(&mut cols, Col::Schedule, need.schedule);
    grow(&mut cols, Col::Name, NAME_MAX);
    grow(&mut cols, Col::Schedule, u16::MAX);
    cols
}

/// Widens `col` towards `upto` with columns taken from SCHEDULE, which keeps SCHEDULE_MIN.
fn borrow(cols: &mut [(Col, &'static str, u16)], col: Col, upto: u16) {
    let short = cols
        .iter()
        .find(|c| c.0 == col)
        .map_or(0, |c| upto.saturating_sub(c.2));
    let Some(s) = cols.iter_mut().find(|c| c.0 == Col::Schedule) else {
        return;
    };
    let take = short.min(s.2.saturating_sub(SCHEDULE_MIN));
    s.2 -= take;
    if let Some(c) = cols.iter_mut().find(|c| c.0 == col) {
        c.2 += take;
    }
}

fn mark(app: &App, j: &JobRow) -> (&'static str, Style) {
    let awaiting =
        j.rt.lease
            .as_ref()
            .and_then(|l| l.awaiting.as_ref())
            .is_some_and(|a| a.answer.is_none());
    if j.rt.retired {
        ("✝", Style::new().fg(Color::DarkGray))
    } else if awaiting {
        // A run waiting for an operator, not merely running: it asks a question (`a`/`x`).
        (
            "?",
            Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
        )
    } else if j.rt.lease.is_some()
        || app.snap.in_flight.contains(&j.def.name)
        || app.ops.started.contains(&j.def.name)
    {
        ("●", Style::new().fg(Color::Green))
    } else if j.rt.alerted && (j.rt.paused || !j.def.enabled) {
        // Both: the alert is still open, and nothing will run until it is resumed.
        (
            "!‖",
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        )
    } else if j.rt.alerted {
        (
            "!",
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        )
    } else if (j.rt.trigger_requested_at.is_some() || j.rt.queued > 0)
        && (j.rt.paused || !j.def.enabled)
    {
        // Both: the queued run still runs, and nothing scheduled follows it until resumed.
        ("…‖", Style::new().fg(Color::Cyan))
    } else if j.rt.trigger_requested_at.is_some() || j.rt.queued > 0 {
        ("…", Style::new().fg(Color::Cyan))
    } else if j.rt.paused || !j.def.enabled {
        ("‖", Style::new().fg(Color::Yellow))
    } else if j.rt.hold_until.is_some_and(|h| h > app.now) {
        ("⏸", Style::new().fg(Color::Magenta))
    } else {
        (" ", Style::new())
    }
}

fn cell(app: &App, j: &JobRow, col: Col) -> (String, Style) {
    let now = app.now;
    let plain = Style::new();
    let dim = Style::new().fg(Color::DarkGray);
    let none = || ("-".to_string(), dim);
    match col {
        Col::Mark => {
            let (m, s) = mark(app, j);
            (m.to_string(), s)
        }
        Col::Name => match j.rt.pause_reason.as_deref().filter(|_| j.rt.paused) {
            Some(why) => (
                format!("{} ‖ {}", text::line(&j.def.name), text::line(why)),
                plain,
            ),
            None => (text::line(&j.def.name).into_owned(), plain),
        },
        Col::Schedule => (text::line(&app.schedule_words(j)).into_owned(), plain),
        Col::Next | Col::Left if j.rt.retired || j.rt.paused || !j.def.enabled => {
            ("n/a".to_string(), dim)
        }
        // The instant the next slot fires (slot + the job's jitter; none for a
        // `run_immediately` run).
        Col::Next => {
            j.rt.next_slot
                .map_or_else(none, |t| (when(j.fire_at(t), now), plain))
        }
        Col::Left => j.rt.next_slot.map(|t| j.fire_at(t)).map_or_else(none, |t| {
            let s = (t - now).num_seconds();
            if s <= 0 {
                ("due".into(), Style::new().fg(Color::Yellow))
            } else {
                (crate::when::span_secs(s), plain)
            }
        }),
        Col::Last => {
            j.rt.last_run_at
                .map_or_else(none, |t| (when(t, now), plain))
        }
        // A last run dated ahead of now (written while a clock was ahead) says so, as `jobs`
        // does, instead of a `0s` that reads as "just now".
        Col::Passed => j.rt.last_run_at.map_or_else(none, |t| {
            if t > now + chrono::Duration::seconds(1) {
                (
                    format!("{} ahead", crate::when::span(t - now)),
                    Style::new().fg(Color::Yellow),
                )
            } else {
                (crate::when::span_secs((now - t).num_seconds()), plain)
            }
        }),
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
            None if j
                .rt
                .lease
                .as_ref()
                .is_some_and(|l| l.cancel_requested_at.is_some()) =>
            {
                (
                    "cancel…".into(),
                    Style::new().fg(Color::Cyan).add_modifier(Modifier::ITALIC),
                )
            }
            None if j.rt.lease.is_none()
                && (j.rt.trigger_requested_at.is_some() || j.rt.queued > 0) =>
            {
                ("queued".into(), Style::new().fg(Color::Cyan))
            }
            None => {
                j.rt.last_status
                    .map_or_else(none, |s| (s.as_str().to_string(), status_style(s)))
            }
        },
        Col::Runs => (App::executions(j).to_string(), plain),
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
        format!(" Jobs {}/{} ", app.jobs.visible.len(), app.snap.jobs.len()),
        Style::new().add_modifier(Modifier::BOLD),
    )];
    // A large store's first snapshot holds its first page only (`Snapshot::loading`).
    if app.snap.loading {
        title.push(Span::styled(
            "loading all jobs… ",
            Style::new().fg(Color::Yellow),
        ));
    }
    let need = needs(app);
    let cols = layout(inner_width(area.width), need);
    let sorted: Vec<Col> = sort_cols(app.jobs.sort)
        .iter()
        .copied()
        .filter(|c| cols.iter().any(|x| x.0 == *c))
        .collect();
    // The sort is named by the column it is shown in (NEXT's order is LEFT's, LAST's is
    // PASSED's); one shown nowhere says so rather than leave an order that reads as none.
    let primary = sort_cols(app.jobs.sort).first();
    let label = match sorted.first() {
        Some(c) if Some(c) != primary => {
            let name = COLS.iter().find(|x| x.0 == *c).map_or("", |x| x.1);
            format!("sort {name} ")
        }
        Some(_) => format!("sort {} ", app.jobs.sort.label()),
        None => format!("sort {} (not shown) ", app.jobs.sort.label()),
    };
    title.push(Span::raw(label));
    if !app.filters.name.is_empty() {
        title.push(Span::styled(
            format!("/{} ", text::line(&app.filters.name)),
            Style::new().fg(Color::Cyan),
        ));
    }
    if let Some(s) = app.filters.status {
        title.push(Span::styled(format!("[{}] ", s.as_str()), status_style(s)));
    }
    let block = pane_block(app, Some(Pane::Jobs), Line::from(title));
    let inner = block.inner(area);
    block.render(area, buf);
    if inner.height == 0 || inner.width == 0 {
        return;
    }
    let head = Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED);
    let mut x = inner.x;
    for (col, name, w) in &cols {
        let style = if sorted.contains(col) {
            head.fg(Color::Cyan)
        } else {
            head
        };
        buf.set_stringn(x, inner.y, name, *w as usize, style);
        x = x.saturating_add(w + 1);
    }
    let rows = inner.height.saturating_sub(1) as usize;
    if app.jobs.visible.is_empty() {
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
    let offset = if app.jobs.selected < rows {
        0
    } else {
        app.jobs.selected + 1 - rows
    };
    for (line, &idx) in app.jobs.visible.iter().skip(offset).take(rows).enumerate() {
        let Some(j) = app.snap.jobs.get(idx) else {
            continue;
        };
        let y = inner.y + 1 + line as u16;
        let selected = offset + line == app.jobs.selected;
        let mut x = inner.x;
        for (col, _, w) in &cols {
            let (text, style) = cell(app, j, *col);
            buf.set_stringn(x, y, elide(&text, *w as usize), *w as usize, style);
            x = x.saturating_add(w + 1);
        }
        if selected {
            super::highlight(
                buf,
                Rect::new(inner.x, y, inner.width, 1),
                app.pane == Pane::Jobs,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// At 80 columns a spend and budget of three significant digits each (`$0.00064/$0.001`,
    /// 16 wide with the `?` of an incomplete cost) is shown whole: SCHEDULE gives it room.
    #[test]
    fn a_long_spend_and_budget_is_whole_at_80_columns() {
        let need = Needs {
            mark: 1,
            name: 14,
            schedule: 18,
            spend: 17,
            ..Needs::default()
        };
        let cols = layout(78, need);
        let w = |col: Col| cols.iter().find(|c| c.0 == col).map(|c| c.2);
        assert_eq!(w(Col::Spend), Some(17));
        assert!(
            w(Col::Schedule).is_some_and(|s| s >= SCHEDULE_MIN),
            "{:?}",
            w(Col::Schedule)
        );
        let total: u16 = cols.iter().map(|c| c.2).sum::<u16>() + cols.len() as u16 - 1;
        assert!(total <= 78, "{total}");
    }

    #[test]
    fn narrow_tables_keep_state_name_and_status() {
        for w in [20u16, 40, 78, 118, 200] {
            let cols = layout(
                w,
                Needs {
                    mark: 1,
                    name: 14,
                    schedule: 18,
                    spend: 13,
                    ..Needs::default()
                },
            );
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

    #[test]
    fn cut_cells_end_with_an_ellipsis() {
        assert_eq!(elide("every 2 minutes (UTC)", 10), "every 2 m…");
        assert_eq!(elide("short", 10), "short");
        assert_eq!(elide("", 0), "");
    }

    #[test]
    fn schedule_gets_its_width_before_name_grows_past_its_longest_name() {
        // 118 columns: the long schedule description fits whole, NAME keeps what its names need.
        let cols = layout(
            118,
            Needs {
                mark: 1,
                name: 12,
                schedule: 26,
                spend: 13,
                ..Needs::default()
            },
        );
        let w = |c: Col| cols.iter().find(|x| x.0 == c).map(|x| x.2).unwrap();
        assert!(w(Col::Schedule) >= 26, "{}", w(Col::Schedule));
        assert!(w(Col::Name) >= 14);
    }

    /// A job both alerted and paused shows both marks, in a mark column widened to fit them;
    /// the column stays one cell wide otherwise.
    #[test]
    fn an_alerted_paused_job_shows_both_marks() {
        let (mut snap, now) = crate::tui::testdata::fixed();
        // backup-logs: alerted in the fixture, not running.
        let i = snap
            .jobs
            .iter()
            .position(|j| j.def.name == "backup-logs")
            .expect("fixture job");
        assert!(snap.jobs[i].rt.alerted);
        snap.jobs[i].rt.paused = true;
        let rec = snap.jobs[i].clone();
        let app = App::new(std::sync::Arc::new(snap), now);
        assert_eq!(mark(&app, &rec).0, "!‖");
        let mut buf = Buffer::empty(Rect::new(0, 0, 120, 16));
        render(&app, Rect::new(0, 0, 120, 16), &mut buf);
        let marks: Vec<String> = (0..16)
            .map(|y| (1..3).map(|x| buf[(x, y)].symbol().to_string()).collect())
            .collect();
        assert!(marks.iter().any(|m| m == "!‖"), "{marks:?}");
        let one = layout(120, Needs::default());
        assert_eq!(one.iter().find(|c| c.0 == Col::Mark).map(|c| c.2), Some(1));
    }

    /// A paused job with a trigger queued shows both marks: the queued run and the pause that
    /// holds everything after it (the pause is never hidden behind `…`).
    #[test]
    fn a_paused_job_with_a_trigger_queued_shows_the_pause_too() {
        let (mut snap, now) = crate::tui::testdata::fixed();
        let i = snap
            .jobs
            .iter()
            .position(|j| !j.rt.alerted && j.rt.lease.is_none() && !j.rt.retired)
            .expect("a quiet fixture job");
        snap.jobs[i].rt.trigger_requested_at = Some(now);
        let mut rec = snap.jobs[i].clone();
        let app = App::new(std::sync::Arc::new(snap.clone()), now);
        assert_eq!(mark(&app, &rec).0, "…");
        rec.rt.paused = true;
        snap.jobs[i].rt.paused = true;
        let app = App::new(std::sync::Arc::new(snap), now);
        assert_eq!(mark(&app, &rec).0, "…‖");
        let mut buf = Buffer::empty(Rect::new(0, 0, 120, 16));
        render(&app, Rect::new(0, 0, 120, 16), &mut buf);
        let marks: Vec<String> = (0..16)
            .map(|y| (1..3).map(|x| buf[(x, y)].symbol().to_string()).collect())
            .collect();
        assert!(marks.iter().any(|m| m == "…‖"), "{marks:?}");
    }

    /// After a clock 2 days ahead was set right, a job's last run and next slot are dated
    /// ahead: PASSED says `2d00h ahead` as `jobs` does (never `0s`), and NEXT and LAST widen
    /// to show their date whole, at 120 columns; at 80 the kept PASSED column widens too.
    #[test]
    fn instants_ahead_of_now_read_as_ahead_and_are_not_cut() {
        let (mut snap, now) = crate::tui::testdata::fixed();
        let ahead = now + chrono::Duration::days(2);
        let j = &mut snap.jobs[0];
        j.rt.last_run_at = Some(ahead);
        j.rt.next_slot = Some(ahead + chrono::Duration::hours(1));
        let rec = j.clone();
        let app = App::new(std::sync::Arc::new(snap), now);
        assert_eq!(cell(&app, &rec, Col::Passed).0, "2d00h ahead");
        assert_eq!(
            cell(&app, &rec, Col::Passed).0,
            crate::when::passed(ahead, now)
        );
        assert_eq!(cell(&app, &rec, Col::Last).0, "12-01 12:00");
        for (w, whole) in [
            (120u16, &["2d00h ahead", "12-01 12:00", "12-01 13:00"][..]),
            (80, &["2d00h ahead"][..]),
        ] {
            let mut buf = Buffer::empty(Rect::new(0, 0, w, 14));
            render(&app, Rect::new(0, 0, w, 14), &mut buf);
            let row: String = (0..w).map(|x| buf[(x, 2)].symbol().to_string()).collect();
            assert!(row.contains(&rec.def.name), "{row}");
            for t in whole {
                assert!(row.contains(t), "{w} cols: {t} in {row}");
            }
            assert!(!row.contains('…'), "{row}");
        }
        // Rows on the real clock are as before.
        let (snap, now) = crate::tui::testdata::fixed();
        let rec = snap.jobs[0].clone();
        let app = App::new(std::sync::Arc::new(snap), now);
        assert_eq!(cell(&app, &rec, Col::Passed).0, "59m50s");
    }

    /// NEXT and LEFT show when the slot fires (slot + jitter), not the slot.
    #[test]
    fn next_and_left_show_the_jittered_fire_instant() {
        let (mut snap, now) = crate::tui::testdata::fixed();
        let j = &mut snap.jobs[0];
        let slot = now + chrono::Duration::seconds(60);
        j.rt.next_slot = Some(slot);
        j.def.jitter_seconds = 3000.0;
        let fire = j.fire_at(slot);
        assert!(
            fire > slot + chrono::Duration::seconds(1),
            "this slot has an offset"
        );
        let rec = j.clone();
        let mut first = j.clone();
        first.def.immediate = true;
        let app = App::new(std::sync::Arc::new(snap), now);
        assert_eq!(cell(&app, &rec, Col::Next).0, when(fire, now));
        assert_eq!(
            cell(&app, &rec, Col::Left).0,
            crate::when::span_secs((fire - now).num_seconds())
        );
        // A `run_immediately` run fires on its slot, as the claim takes it.
        assert_eq!(cell(&app, &first, Col::Next).0, when(slot, now));
        assert_eq!(cell(&app, &first, Col::Left).0, "1m00s");
    }
}

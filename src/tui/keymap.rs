//! The one keymap table: every binding the console answers to is a row of [`KEYMAP`], and that
//! same table drives key dispatch ([`lookup`]), the footer and the `?` help, so help can never
//! drift from the real bindings (the gitui `key_list` idea). Each row says how much it matters
//! in the footer ([`Binding::footer`]): the footer drops the least important hints first to fit
//! the terminal's width, and always keeps `? help` and `q quit`.
//!
//! Owns: key → [`Cmd`] per [`Scope`], and the labels shown for them. Must not touch: state, the
//! terminal. Scopes: `Global` keys work in the main screen, the job detail, the run view, the
//! dry-run view, the diff viewer and the help; `Main` keys (panes, filters, sorting, bulk pause)
//! only on the main screen, so a view's footer shows that view's keys; `Diff` keys only in the
//! diff viewer (checked first there). `Confirm` and `Input` are
//! modal: while a `y/n` question or the `/` filter prompt is open, nothing else is live (so typing
//! `q` into the name filter does not quit).

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// What a key asks for; [`crate::tui::state::App::handle_key`] turns it into an effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmd {
    /// `k`/`↑`: move the cursor up (or scroll up).
    Up,
    /// `j`/`↓`: move the cursor down (or scroll down).
    Down,
    /// `g`/Home: go to the top.
    Top,
    /// `G`/End: go to the bottom.
    Bottom,
    /// PgUp: one page up.
    PageUp,
    /// PgDn: one page down.
    PageDown,
    /// Tab: focus the next pane (jobs, leases, history).
    NextPane,
    /// `p`: pause or resume the job at the cursor.
    TogglePause,
    /// `t`: trigger the job at the cursor now (after a y/n prompt).
    Trigger,
    /// `d`: open the monitor diff viewer of the job at the cursor.
    Diff,
    /// Enter: open the job's detail (or, in history, the run's).
    Detail,
    /// `h`: toggle the history pane between this job and all jobs.
    JobHistory,
    /// `R`: retry the run at the cursor.
    Retry,
    /// `X`: cancel the run at the cursor or a queued run (after a y/n prompt).
    Cancel,
    /// `a`: approve the tool call the job at the cursor awaits approval for (y/n).
    Approve,
    /// `x`: deny the tool call the job at the cursor awaits approval for (y/n).
    Deny,
    /// `f`: cycle the status filter of the jobs and history panes.
    StatusFilter,
    /// `/`: open the name-filter prompt.
    NameFilter,
    /// `s`: cycle the jobs table's sort order.
    Sort,
    /// `?`: show or hide the help.
    Help,
    /// Esc: go back one screen, or clear the filters.
    Back,
    /// `q`/Ctrl-C: quit the console.
    Quit,
    /// `[` in the diff viewer: the next older diff.
    OlderDiff,
    /// `]` in the diff viewer: the next newer diff.
    NewerDiff,
    /// `y` at a y/n prompt: confirm.
    Yes,
    /// `n`/Esc at a y/n prompt: decline.
    No,
    /// Enter in the name-filter prompt: apply the filter.
    Apply,
    /// `cronsole dry-run` of the job at the cursor, in a scrollable view.
    DryRun,
    /// Pause (or resume) every job the filters show, after a y/n prompt.
    PauseFiltered,
}

/// Where a binding is live; [`lookup`] searches one scope at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The main screen and every view opened from it (job, run, dry run, diff), and the help.
    Global,
    /// Only on the main screen: what acts on its panes and filters (checked before `Global`
    /// there).
    Main,
    /// Only in the diff viewer (checked before `Global` there).
    Diff,
    /// Only while a y/n question is open (modal: nothing else is live).
    Confirm,
    /// Only while the `/` name-filter prompt is open (modal).
    Input,
}

/// A key with the modifiers that must be held (SHIFT is ignored for characters: `G` is `G`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// The key code (a character, Enter, an arrow, …).
    pub code: KeyCode,
    /// The modifiers that must be held with it.
    pub mods: KeyModifiers,
}

const fn k(code: KeyCode) -> Key {
    Key {
        code,
        mods: KeyModifiers::NONE,
    }
}

const fn ch(c: char) -> Key {
    k(KeyCode::Char(c))
}

const fn ctrl(c: char) -> Key {
    Key {
        code: KeyCode::Char(c),
        mods: KeyModifiers::CONTROL,
    }
}

/// One row of the keymap.
#[derive(Debug, Clone, Copy)]
pub struct Binding {
    /// Where the binding is live.
    pub scope: Scope,
    /// Every key that triggers it.
    pub keys: &'static [Key],
    /// How the keys are written in the footer and help.
    pub label: &'static str,
    /// Short word for the footer.
    pub short: &'static str,
    /// Sentence for the help.
    pub help: &'static str,
    /// What the keys ask for.
    pub cmd: Cmd,
    /// Its place in the footer: 0 = not shown there (help shows every row); 1 = always shown;
    /// 2, 3, … = shown while the width allows, the highest numbers dropped first.
    pub footer: u8,
}

/// [`Binding::footer`]: not in the footer.
pub const HIDDEN: u8 = 0;
/// [`Binding::footer`]: always in the footer, whatever the width.
pub const ALWAYS: u8 = 1;

impl Binding {
    /// The key as the footer writes it: the first of [`Binding::label`]'s forms (`q` for
    /// `q/Ctrl-C`), or the whole label when it has one form (`PgUp`, `/`).
    pub fn footer_key(&self) -> &'static str {
        match self.label.split_once('/') {
            Some((first, _)) if !first.is_empty() => first,
            _ => self.label,
        }
    }
}

const fn b(
    scope: Scope,
    keys: &'static [Key],
    label: &'static str,
    short: &'static str,
    help: &'static str,
    cmd: Cmd,
    footer: u8,
) -> Binding {
    Binding {
        scope,
        keys,
        label,
        short,
        help,
        cmd,
        footer,
    }
}

use Scope::{Confirm, Diff, Global, Input, Main};

/// Every binding of the console, in help order: dispatch, footer and `?` help all read it.
pub const KEYMAP: &[Binding] = &[
    b(
        Global,
        &[ch('k'), k(KeyCode::Up)],
        "k/↑",
        "up",
        "move up / scroll",
        Cmd::Up,
        HIDDEN,
    ),
    b(
        Global,
        &[ch('j'), k(KeyCode::Down)],
        "j/↓",
        "down",
        "move down / scroll",
        Cmd::Down,
        HIDDEN,
    ),
    b(
        Global,
        &[ch('g'), k(KeyCode::Home)],
        "g",
        "top",
        "go to the top",
        Cmd::Top,
        HIDDEN,
    ),
    b(
        Global,
        &[ch('G'), k(KeyCode::End)],
        "G",
        "bottom",
        "go to the bottom",
        Cmd::Bottom,
        HIDDEN,
    ),
    b(
        Global,
        &[k(KeyCode::PageUp)],
        "PgUp",
        "page up",
        "one page up",
        Cmd::PageUp,
        HIDDEN,
    ),
    b(
        Global,
        &[k(KeyCode::PageDown)],
        "PgDn",
        "page down",
        "one page down",
        Cmd::PageDown,
        HIDDEN,
    ),
    b(
        Main,
        &[k(KeyCode::Tab)],
        "Tab",
        "focus",
        "focus jobs/leases/history",
        Cmd::NextPane,
        4,
    ),
    b(
        Global,
        &[ch('p')],
        "p",
        "pause",
        "pause / resume the job",
        Cmd::TogglePause,
        3,
    ),
    b(
        Global,
        &[ch('t')],
        "t",
        "trigger",
        "trigger the job now (y/n)",
        Cmd::Trigger,
        3,
    ),
    b(
        Global,
        &[ch('d')],
        "d",
        "diff",
        "monitor diff viewer",
        Cmd::Diff,
        5,
    ),
    b(
        Global,
        &[k(KeyCode::Enter)],
        "Enter",
        "open",
        "open job, or run (history)",
        Cmd::Detail,
        2,
    ),
    b(
        Global,
        &[ch('R')],
        "R",
        "retry",
        "retry run at cursor (y/n)",
        Cmd::Retry,
        8,
    ),
    b(
        Global,
        &[ch('X')],
        "X",
        "cancel",
        "cancel run / queued (y/n)",
        Cmd::Cancel,
        9,
    ),
    b(
        Global,
        &[ch('a')],
        "a",
        "approve",
        "approve tool call (y/n)",
        Cmd::Approve,
        9,
    ),
    b(
        Global,
        &[ch('x')],
        "x",
        "deny",
        "deny tool call (y/n)",
        Cmd::Deny,
        9,
    ),
    b(
        Global,
        &[ch('D')],
        "D",
        "dry-run",
        "dry run (no model call)",
        Cmd::DryRun,
        8,
    ),
    b(
        Main,
        &[ch('P')],
        "P",
        "pause all",
        "pause/resume filtered (y/n)",
        Cmd::PauseFiltered,
        9,
    ),
    b(
        Main,
        &[ch('h')],
        "h",
        "history",
        "history: this job / all",
        Cmd::JobHistory,
        7,
    ),
    b(
        Main,
        &[ch('f')],
        "f",
        "filter",
        "status filter (jobs+history)",
        Cmd::StatusFilter,
        6,
    ),
    b(
        Main,
        &[ch('/')],
        "/",
        "name",
        "filter jobs+history by name",
        Cmd::NameFilter,
        6,
    ),
    b(
        Main,
        &[ch('s')],
        "s",
        "sort",
        "cycle sort column",
        Cmd::Sort,
        9,
    ),
    b(
        Global,
        &[ch('?')],
        "?",
        "help",
        "show / hide this help",
        Cmd::Help,
        ALWAYS,
    ),
    b(
        Global,
        &[k(KeyCode::Esc)],
        "Esc",
        "back",
        "back / clear filters",
        Cmd::Back,
        7,
    ),
    b(
        Global,
        &[ch('q'), ctrl('c')],
        "q/Ctrl-C",
        "quit",
        "quit",
        Cmd::Quit,
        ALWAYS,
    ),
    b(
        Diff,
        &[ch('[')],
        "[",
        "older",
        "older diff",
        Cmd::OlderDiff,
        2,
    ),
    b(
        Diff,
        &[ch(']')],
        "]",
        "newer",
        "newer diff",
        Cmd::NewerDiff,
        2,
    ),
    b(
        Confirm,
        &[ch('y'), ch('Y')],
        "y",
        "yes",
        "confirm",
        Cmd::Yes,
        ALWAYS,
    ),
    b(
        Confirm,
        &[ch('n'), ch('N'), k(KeyCode::Esc)],
        "n/Esc",
        "no",
        "cancel",
        Cmd::No,
        ALWAYS,
    ),
    b(
        Input,
        &[k(KeyCode::Enter)],
        "Enter",
        "apply",
        "apply the name filter",
        Cmd::Apply,
        ALWAYS,
    ),
    b(
        Input,
        &[k(KeyCode::Esc)],
        "Esc",
        "clear",
        "clear the name filter",
        Cmd::Back,
        ALWAYS,
    ),
];

fn matches(key: &Key, ev: &KeyEvent) -> bool {
    if key.code != ev.code {
        return false;
    }
    // SHIFT is part of the character already ('G', '?'); compare only CONTROL and ALT.
    let relevant = KeyModifiers::CONTROL | KeyModifiers::ALT;
    (ev.modifiers & relevant) == (key.mods & relevant)
}

/// The command bound to `ev` in `scope` (no fall-through between scopes; callers decide).
pub fn lookup(scope: Scope, ev: &KeyEvent) -> Option<Cmd> {
    KEYMAP
        .iter()
        .filter(|b| b.scope == scope)
        .find(|b| b.keys.iter().any(|k| matches(k, ev)))
        .map(|b| b.cmd)
}

/// The bindings of the given scopes in table order, whatever their scope (the main screen's
/// footer: `Global` and `Main` rows interleave as the table orders them).
pub fn bindings_in_table_order(scopes: &[Scope]) -> impl Iterator<Item = &'static Binding> + '_ {
    KEYMAP.iter().filter(move |b| scopes.contains(&b.scope))
}

/// The bindings of the given scopes, scope by scope in the order given, each in table order
/// (footer and help).
pub fn bindings(scopes: &[Scope]) -> impl Iterator<Item = &'static Binding> + '_ {
    scopes
        .iter()
        .flat_map(|s| KEYMAP.iter().filter(move |b| b.scope == *s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_key_is_bound_twice_where_both_could_fire() {
        // Global and Diff are live together in the diff viewer, Global and Main on the main
        // screen; Confirm and Input are modal.
        let groups: [&[Scope]; 4] = [&[Global, Diff], &[Global, Main], &[Confirm], &[Input]];
        for group in groups {
            let mut seen: Vec<Key> = Vec::new();
            for bnd in bindings(group) {
                for key in bnd.keys {
                    assert!(!seen.contains(key), "{key:?} bound twice in {group:?}");
                    seen.push(*key);
                }
            }
        }
    }

    #[test]
    fn every_spec_key_is_bound() {
        use KeyCode::*;
        let spec: &[(Scope, KeyEvent)] = &[
            (Global, KeyEvent::from(Char('j'))),
            (Global, KeyEvent::from(Char('k'))),
            (Global, KeyEvent::from(Up)),
            (Global, KeyEvent::from(Down)),
            (Global, KeyEvent::from(Char('g'))),
            (Global, KeyEvent::new(Char('G'), KeyModifiers::SHIFT)),
            (Main, KeyEvent::from(Tab)),
            (Global, KeyEvent::from(Char('p'))),
            (Global, KeyEvent::from(Char('t'))),
            (Global, KeyEvent::from(Char('d'))),
            (Global, KeyEvent::from(Enter)),
            (Main, KeyEvent::from(Char('h'))),
            (Global, KeyEvent::new(Char('R'), KeyModifiers::SHIFT)),
            (Global, KeyEvent::new(Char('X'), KeyModifiers::SHIFT)),
            (Main, KeyEvent::from(Char('f'))),
            (Main, KeyEvent::from(Char('/'))),
            (Main, KeyEvent::from(Char('s'))),
            (Global, KeyEvent::new(Char('?'), KeyModifiers::SHIFT)),
            (Global, KeyEvent::from(Esc)),
            (Global, KeyEvent::from(Char('q'))),
            (Global, KeyEvent::new(Char('c'), KeyModifiers::CONTROL)),
            (Diff, KeyEvent::from(Char('['))),
            (Diff, KeyEvent::from(Char(']'))),
            (Confirm, KeyEvent::from(Char('y'))),
            (Confirm, KeyEvent::from(Char('n'))),
        ];
        for (scope, ev) in spec {
            assert!(lookup(*scope, ev).is_some(), "{ev:?} unbound in {scope:?}");
        }
        // A plain 'c' is not Ctrl-C.
        assert_eq!(lookup(Global, &KeyEvent::from(Char('c'))), None);
    }
}

#[cfg(test)]
mod guide {
    use super::KEYMAP;

    /// The guide's console page lists every key of the table: a binding added without a line
    /// in `docs/guide/console.md` (its "Keys" section) fails here, so the page cannot drift from
    /// what the console answers to.
    #[test]
    fn the_console_guide_names_every_key() {
        let page = include_str!("../../docs/guide/console.md");
        let keys = page
            .split("\n## Keys\n")
            .nth(1)
            .and_then(|s| s.split("\n## ").next())
            .expect("docs/guide/console.md has a Keys section");
        let mut missing = Vec::new();
        for b in KEYMAP {
            let forms: Vec<&str> = match b.label {
                "/" => vec!["/"],
                label => label.split('/').filter(|f| !f.is_empty()).collect(),
            };
            for form in forms {
                // One character is written in backticks (`p`); a named key as its name (Tab).
                let named = form.chars().count() > 1 && keys.contains(form);
                if !named && !keys.contains(&format!("`{form}`")) {
                    missing.push(format!("{form} ({})", b.help));
                }
            }
        }
        assert!(
            missing.is_empty(),
            "keys docs/guide/console.md does not list under \"Keys\": {missing:?}"
        );
    }
}

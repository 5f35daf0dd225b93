//! Two console actions: `D`, the dry run of the job at the cursor (the text of
//! `cronsole dry-run NAME` in a scrollable view: gates run, the prompt assembled, no model call,
//! no delivery, no state change), and `P`, pause or resume every job the filters show, after a
//! y/n prompt naming how many.
//!
//! Owns: what those keys do to [`App`]. Must not touch: the store or the engine (the dry run is
//! a [`Query`] the event loop hands to the console's runner; pauses go out as `Command`s).
//!
//! Decisions: `P` pauses the jobs the filters show that are not paused (retired jobs and jobs
//! with a pause or resume still unconfirmed are left out); when every one of them is paused
//! already, it offers to resume them instead. Jobs disabled in the jobs file are not resumed by
//! it (only the file enables them).

use crate::engine::Command;
use crate::snapshot::PendingOp;
use crate::tui::state::BulkOp;
use crate::tui::state::{Action, App, Mode, Prompt, Query};

impl App {
    /// `D`: open the dry-run view of the job at the cursor and ask for its text.
    pub(crate) fn open_dry_run(&mut self) -> Action {
        let Some(name) = self.target_job().map(|j| j.def.name.clone()) else {
            return Action::None;
        };
        self.mode = Mode::DryRun(name.clone());
        self.viewer.reset_scroll();
        self.dry_run = None;
        Action::Load(Query::DryRun(name))
    }

    /// `P`: ask whether to pause (or resume) the filtered set.
    pub(crate) fn ask_bulk_pause(&mut self) -> Action {
        let shown: Vec<_> = self
            .jobs
            .visible
            .iter()
            .filter_map(|&i| self.snap.jobs.get(i))
            .filter(|j| !j.rt.retired && !self.ops.pending.contains_key(&j.def.name))
            .collect();
        let to_pause: Vec<String> = shown
            .iter()
            .filter(|j| !j.rt.paused && j.def.enabled)
            .map(|j| j.def.name.clone())
            .collect();
        let (pause, jobs) = if to_pause.is_empty() {
            let to_resume = shown
                .iter()
                .filter(|j| j.rt.paused)
                .map(|j| j.def.name.clone())
                .collect();
            (false, to_resume)
        } else {
            (true, to_pause)
        };
        if jobs.is_empty() {
            self.notice = Some("no job shown can be paused or resumed".into());
            return Action::Redraw;
        }
        self.dialog.prompt = Prompt::ConfirmBulk { pause, jobs };
        Action::Redraw
    }

    /// The answer to the `P` prompt.
    pub(crate) fn confirm_bulk(&mut self, pause: bool, jobs: Vec<String>, yes: bool) -> Action {
        let verb = if pause { "paus" } else { "resum" };
        if !yes {
            self.notice = Some(format!("nothing {verb}ed"));
            return Action::Redraw;
        }
        let op = if pause {
            PendingOp::Pausing
        } else {
            PendingOp::Resuming
        };
        let names = jobs.clone();
        let mut cmds = Vec::with_capacity(jobs.len());
        for job in jobs {
            self.ops.begin(job.clone(), op, self.now);
            cmds.push(if pause {
                Command::Pause(job)
            } else {
                Command::Resume(job)
            });
        }
        let said = format!("{verb}ing {} job(s)", cmds.len());
        self.ops.bulk = Some(BulkOp {
            pause,
            jobs: names,
            said: said.clone(),
        });
        self.notice = Some(said);
        Action::SendAll(cmds)
    }

    /// After a snapshot or a tick: once the `P` in flight is settled, its "pausing N job(s)"
    /// notice (when nothing has replaced it since) becomes what the store confirmed.
    pub(crate) fn close_bulk(&mut self) {
        let snap = self.snap.clone();
        if let Some((said, words)) = self.ops.bulk_settled(|n| snap.job(n))
            && self.notice.as_deref() == Some(said.as_str())
        {
            self.notice = Some(words);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

    use super::*;
    use crate::tui::state::Loaded;
    use crate::tui::testdata;

    fn app() -> App {
        let (snap, now) = testdata::fixed();
        App::new(Arc::new(snap), now)
    }

    fn shift(c: char) -> KeyEvent {
        KeyEvent::new(KeyCode::Char(c), KeyModifiers::SHIFT)
    }

    fn key(c: char) -> KeyEvent {
        KeyEvent::from(KeyCode::Char(c))
    }

    #[test]
    fn d_opens_the_dry_run_of_the_selected_job_and_scrolls_its_text() {
        let mut a = app();
        let name = a.selected_job().unwrap().def.name.clone();
        assert_eq!(
            a.handle_key(shift('D')),
            Action::Load(Query::DryRun(name.clone()))
        );
        assert_eq!(a.mode, Mode::DryRun(name.clone()));
        a.on_loaded(Loaded::DryRun {
            job: name.clone(),
            text: Ok("line\n".repeat(100)),
        });
        assert!(
            a.dry_run
                .as_ref()
                .is_some_and(|(j, t)| *j == name && t.is_ok())
        );
        a.viewer.set_scroll_max(50);
        a.handle_key(key('j'));
        a.handle_key(key('j'));
        assert_eq!(a.viewer.scroll, 2);
        a.handle_key(KeyEvent::from(KeyCode::Esc));
        assert_eq!(a.mode, Mode::Main);
    }

    #[test]
    fn p_pauses_the_filtered_set_after_yes_and_resumes_it_next() {
        let mut a = app();
        // Filter by name to one family of jobs.
        a.handle_key(key('/'));
        for c in "backup".chars() {
            a.handle_key(key(c));
        }
        a.handle_key(KeyEvent::from(KeyCode::Enter));
        let shown: Vec<String> = a
            .jobs
            .visible
            .iter()
            .map(|&i| a.snap.jobs[i].def.name.clone())
            .filter(|n| !a.snap.jobs.iter().any(|j| j.def.name == *n && j.rt.retired))
            .collect();
        assert!(!shown.is_empty());
        assert_eq!(a.handle_key(shift('P')), Action::Redraw);
        let Prompt::ConfirmBulk { pause, jobs } = a.dialog.prompt.clone() else {
            panic!("asks first: {:?}", a.dialog.prompt);
        };
        assert!(pause);
        assert!(jobs.iter().all(|j| j.contains("backup")), "{jobs:?}");
        // No: nothing is sent.
        assert_eq!(a.handle_key(key('n')), Action::Redraw);
        assert!(a.ops.pending.is_empty());
        a.handle_key(shift('P'));
        match a.handle_key(key('y')) {
            Action::SendAll(cmds) => {
                assert_eq!(cmds.len(), jobs.len());
                assert!(cmds.iter().all(|c| matches!(c, Command::Pause(_))));
            }
            other => panic!("sends the pauses: {other:?}"),
        }
        // Once the snapshot shows them paused, `P` offers to resume them.
        let mut snap = (*a.snap).clone();
        for j in &mut snap.jobs {
            if jobs.contains(&j.def.name) {
                j.rt.paused = true;
            }
        }
        assert_eq!(
            a.notice(),
            Some(format!("pausing {} job(s)", jobs.len()).as_str())
        );
        a.on_snapshot(Arc::new(snap));
        // Confirmed by the store: the notice says it is done.
        assert!(a.ops.pending.is_empty(), "{:?}", a.ops.pending);
        assert_eq!(
            a.notice(),
            Some(format!("paused {} job(s)", jobs.len()).as_str())
        );
        a.handle_key(shift('P'));
        assert!(
            matches!(&a.dialog.prompt, Prompt::ConfirmBulk { pause: false, jobs: j } if *j == jobs),
            "{:?}",
            a.dialog.prompt
        );
    }
}

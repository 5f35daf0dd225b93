//! The console's dialogs: the yes/no confirmations (trigger, retry, cancel, bulk pause), the
//! `/` name prompt and the help overlay.
//!
//! Owns: what is being asked and what was typed; turning an answer or a typed key into an
//! outcome for [`super::App`]. Must not touch: filters or jobs themselves (the app applies the
//! outcome), the store, the terminal.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use crate::tui::keymap::{self, Cmd, Scope};

/// The question or prompt open over the screen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompt {
    /// Nothing is asked.
    None,
    /// "Trigger this job now?"
    ConfirmTrigger(String),
    /// "Cancel this job's running or queued run?"
    ConfirmCancel(String),
    /// "Retry this run now?"
    ConfirmRetry {
        /// The run's job.
        job: String,
        /// The run to retry.
        run_id: uuid::Uuid,
    },
    /// "Approve (or deny) this run's tool call?"
    ConfirmAnswer {
        /// The run's job.
        job: String,
        /// The run awaiting approval.
        run_id: uuid::Uuid,
        /// The call's id: the answer is for this call only.
        call: String,
        /// The tool of the call.
        tool: String,
        /// Approve (`true`) or deny.
        approve: bool,
    },
    /// The `/` name prompt, with what is typed so far.
    Name(String),
    /// Pause (`pause: true`) or resume these jobs: the filtered set when `P` was pressed.
    ConfirmBulk {
        /// `true` to pause them, `false` to resume them.
        pause: bool,
        /// The jobs, as they were when `P` was pressed.
        jobs: Vec<String>,
    },
}

/// What a yes/no answer decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The answer to [`Prompt::ConfirmTrigger`].
    Trigger {
        /// The job asked about.
        job: String,
        /// The operator said yes.
        yes: bool,
    },
    /// The answer to [`Prompt::ConfirmRetry`].
    Retry {
        /// The run's job.
        job: String,
        /// The run asked about.
        run_id: uuid::Uuid,
        /// The operator said yes.
        yes: bool,
    },
    /// The answer to [`Prompt::ConfirmCancel`].
    Cancel {
        /// The job asked about.
        job: String,
        /// The operator said yes.
        yes: bool,
    },
    /// The answer to [`Prompt::ConfirmAnswer`].
    Approval {
        /// The run's job.
        job: String,
        /// The run asked about.
        run_id: uuid::Uuid,
        /// The call asked about.
        call: String,
        /// Approve (`true`) or deny.
        approve: bool,
        /// The operator said yes.
        yes: bool,
    },
    /// The `P` question: pause (or resume) these jobs.
    Bulk {
        /// `true` to pause them, `false` to resume them.
        pause: bool,
        /// The jobs asked about.
        jobs: Vec<String>,
        /// The operator said yes.
        yes: bool,
    },
    /// No question was open.
    Nothing,
}

/// What a key typed into the name prompt did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Typed {
    /// Enter: keep the filter, close the prompt.
    Applied,
    /// Esc: clear the filter, close the prompt.
    Cleared,
    /// The text changed to this.
    Edited(String),
    /// The key does nothing in the prompt.
    Ignored,
}

/// The dialogs' state: what is asked, and whether help is shown.
#[derive(Debug)]
pub struct Dialogs {
    pub(crate) prompt: Prompt,
    pub(crate) help: bool,
}

impl Default for Dialogs {
    fn default() -> Self {
        Dialogs::new()
    }
}

impl Dialogs {
    /// Nothing asked, no help.
    pub fn new() -> Dialogs {
        Dialogs {
            prompt: Prompt::None,
            help: false,
        }
    }

    /// The key scope an open dialog imposes, if any.
    pub fn scope(&self) -> Option<Scope> {
        match &self.prompt {
            Prompt::ConfirmTrigger(_)
            | Prompt::ConfirmCancel(_)
            | Prompt::ConfirmRetry { .. }
            | Prompt::ConfirmAnswer { .. }
            | Prompt::ConfirmBulk { .. } => Some(Scope::Confirm),
            Prompt::Name(_) => Some(Scope::Input),
            Prompt::None => None,
        }
    }

    /// A yes/no answer closes the question.
    pub fn answer(&mut self, cmd: Cmd) -> Answer {
        let yes = cmd == Cmd::Yes;
        match std::mem::replace(&mut self.prompt, Prompt::None) {
            Prompt::ConfirmTrigger(job) => Answer::Trigger { job, yes },
            Prompt::ConfirmCancel(job) => Answer::Cancel { job, yes },
            Prompt::ConfirmRetry { job, run_id } => Answer::Retry { job, run_id, yes },
            Prompt::ConfirmBulk { pause, jobs } => Answer::Bulk { pause, jobs, yes },
            Prompt::ConfirmAnswer {
                job,
                run_id,
                call,
                approve,
                ..
            } => Answer::Approval {
                job,
                run_id,
                call,
                approve,
                yes,
            },
            other => {
                self.prompt = other;
                Answer::Nothing
            }
        }
    }

    /// Open the name prompt with the current filter.
    pub fn ask_name(&mut self, current: &str) {
        self.prompt = Prompt::Name(current.to_string());
    }

    /// A key typed while the name prompt is open.
    pub fn type_key(&mut self, key: KeyEvent) -> Typed {
        let Prompt::Name(text) = &mut self.prompt else {
            return Typed::Ignored;
        };
        match keymap::lookup(Scope::Input, &key) {
            Some(Cmd::Apply) => {
                self.prompt = Prompt::None;
                return Typed::Applied;
            }
            Some(_) => {
                self.prompt = Prompt::None;
                return Typed::Cleared;
            }
            None => {}
        }
        match key.code {
            KeyCode::Backspace => {
                text.pop();
            }
            KeyCode::Char(c)
                if !key
                    .modifiers
                    .intersects(KeyModifiers::CONTROL | KeyModifiers::ALT) =>
            {
                text.push(c);
            }
            _ => return Typed::Ignored,
        }
        Typed::Edited(text.clone())
    }
}

//! How far a run got, readable after its future was dropped: the attempts, a tool loop's
//! record, an approval wait, and the run's outcome once its action ended. A run stopped before
//! its pipeline ends (a shutdown, a lease it could not renew) is recorded from it.
//!
//! Owns: [`Progress`] and [`RunOutput`]. Must not touch: the pipeline's steps (`run`), the
//! stop itself (`task`).

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};

use crate::model::{Attempt, HistoryRow, JobState};
use crate::transcript::Transcript;

/// What a finished pipeline hands to `complete`.
#[derive(Debug, Clone)]
pub struct RunOutput {
    /// The history row to write.
    pub row: HistoryRow,
    /// The job's new per-job state (notepad, monitor watermark, budget stop), when it changed.
    pub state: Option<JobState>,
    /// Hold the job until then (a provider's `Retry-After`), if set.
    pub hold_until: Option<DateTime<Utc>>,
}

/// How far a run got, readable after its future was dropped (shutdown): every attempt made (its
/// start, end, outcome, error, tokens, cost) and the last attempt's whole error (redacted).
#[derive(Debug, Clone, Default)]
pub struct Progress(
    Arc<Mutex<Attempts>>,
    Arc<Mutex<Option<Looped>>>,
    Arc<Mutex<Awaiting>>,
    /// The model asked (an agent run), then the one that last answered.
    Arc<Mutex<Option<String>>>,
    /// The run's outcome once its action ended (delivery and alerts may still be going).
    Arc<Mutex<Option<Ended>>>,
);

/// A run's outcome once its action ended, and what of the rest of its pipeline a stop from now
/// on would cut short.
#[derive(Debug, Clone)]
struct Ended {
    out: RunOutput,
    cut: Option<Cut>,
}

/// What the rest of a run's pipeline still owes the job's sinks when its action ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cut {
    /// The result itself.
    Result,
    /// An alert, a recovery note or a budget alert.
    Alert,
}

/// Whether a tool call of the run awaits approval, and the run's cancel once a shutdown began
/// (under one lock, so a wait that begins as the shutdown does is never missed by both).
#[derive(Debug, Default)]
struct Awaiting {
    now: bool,
    stop: Option<tokio_util::sync::CancellationToken>,
}

/// The attempts a run made so far.
#[derive(Debug, Default)]
struct Attempts {
    /// Every attempt, in order (every request of every turn of a tool loop).
    log: Vec<Attempt>,
    /// The last attempt's whole error (redacted).
    last_error: Option<String>,
    /// Where the current model turn's attempts start in `log` (0 for any other action).
    turn_start: usize,
    /// The most attempts one turn (or the action) took: the row's `attempts`, since retries
    /// are counted per model request, and a tool loop's turns are not retries.
    most: u32,
}

/// A tool loop's record so far, for a row written while the loop runs.
#[derive(Debug, Clone)]
struct Looped {
    turns: u32,
    tool_calls: u32,
    transcript: Transcript,
}

impl Progress {
    /// One attempt ended; `error` is its whole (redacted) error.
    pub(super) fn attempted(&self, mut attempt: Attempt, error: Option<String>) {
        if let Ok(mut g) = self.0.lock() {
            if attempt.error.is_none() && error.is_some() {
                attempt = Attempt::new(attempt.started_at, attempt.finished_at, error.as_deref());
            }
            g.log.push(attempt);
            g.last_error = error;
            let this_turn = u32::try_from(g.log.len() - g.turn_start).unwrap_or(u32::MAX);
            g.most = g.most.max(this_turn);
        }
    }

    /// A new model turn of a tool loop begins: its attempts are counted apart from the last
    /// turn's.
    pub(super) fn new_turn(&self) {
        if let Ok(mut g) = self.0.lock() {
            g.turn_start = g.log.len();
        }
    }

    /// Attempts of the turn begun last (all of them when there were no turns).
    pub(super) fn turn_attempts(&self) -> u32 {
        self.0
            .lock()
            .map(|g| u32::try_from(g.log.len() - g.turn_start).unwrap_or(u32::MAX))
            .unwrap_or(0)
    }

    /// The most attempts one turn (or the action) took.
    pub(super) fn most_attempts(&self) -> u32 {
        self.0.lock().map(|g| g.most).unwrap_or(0)
    }

    /// The run's action is a call to `model`.
    pub(super) fn asks(&self, model: &str) {
        if let Ok(mut g) = self.3.lock() {
            *g = Some(model.to_string());
        }
    }

    /// Put the reply's model, tokens and cost on the last attempt (the one that succeeded).
    pub(super) fn priced_last(
        &self,
        model: &str,
        input_tokens: u64,
        output_tokens: u64,
        cost_usd: f64,
    ) {
        self.asks(model);
        if let Ok(mut g) = self.0.lock()
            && let Some(a) = g.log.last_mut()
        {
            a.input_tokens = input_tokens;
            a.output_tokens = output_tokens;
            a.cost_usd = cost_usd;
        }
    }

    /// A tool call of the run began (`true`) or ended (`false`) its wait for approval: a
    /// shutdown meanwhile abandons the run at once.
    pub(super) fn awaiting(&self, on: bool) {
        let mut g = self.2.lock().unwrap_or_else(|e| e.into_inner());
        g.now = on;
        if on && let Some(stop) = &g.stop {
            // The stop began before this wait: nobody may be there to answer, and the stop
            // must not wait for an operator.
            tracing::info!("abandoning a run whose call began awaiting approval during shutdown");
            stop.cancel();
        }
    }

    /// The run's action ended with `out` (redacted); `cut`: what a stop from now on would leave
    /// undelivered.
    pub(super) fn action_ended(&self, out: RunOutput, cut: Option<Cut>) {
        if let Ok(mut g) = self.4.lock() {
            *g = Some(Ended { out, cut });
        }
    }

    /// The run's outcome, once its action ended, for a run stopped `stop` ("at shutdown", "for
    /// its lease") before its pipeline ended: the action ran (a command's effects are done, a
    /// model answered and was paid), so that end is what happened, not `abandoned` (a one-shot
    /// recorded `abandoned` is run again). What the stop left undelivered is said on the row.
    pub fn ended(&self, stop: &str) -> Option<RunOutput> {
        let Ended { mut out, cut } = self.4.lock().ok().and_then(|g| g.clone())?;
        let Some(cut) = cut else {
            return Some(out);
        };
        let what = match cut {
            Cut::Result => {
                out.row.delivered = false;
                "not delivered"
            }
            Cut::Alert => "alert not sent",
        };
        let note = format!("{what}: the run was stopped {stop} after its action ended");
        out.row.delivery_error = Some(match out.row.delivery_error.take() {
            Some(prev) => format!("{prev}; {note}"),
            None => note,
        });
        Some(out)
    }

    /// A tool call of the run is awaiting approval now.
    pub fn is_awaiting(&self) -> bool {
        self.2.lock().map(|g| g.now).unwrap_or(false)
    }

    /// A shutdown began: the run is cancelled with `cancel` as soon as a call of it awaits
    /// approval (now: `true`, or when one begins to). A run awaiting an operator could wait for
    /// an hour; it is abandoned instead, and its recovery starts a fresh loop.
    pub fn stop_when_awaiting(&self, cancel: &tokio_util::sync::CancellationToken) -> bool {
        let mut g = self.2.lock().unwrap_or_else(|e| e.into_inner());
        g.stop = Some(cancel.clone());
        if g.now {
            cancel.cancel();
        }
        g.now
    }

    /// A tool loop's record grew.
    pub(super) fn looped(&self, turns: u32, tool_calls: u32, transcript: &Transcript) {
        if let Ok(mut g) = self.1.lock() {
            *g = Some(Looped {
                turns,
                tool_calls,
                transcript: transcript.clone(),
            });
        }
    }

    /// The attempts made so far, in order.
    pub(super) fn log(&self) -> Vec<Attempt> {
        self.0.lock().map(|g| g.log.clone()).unwrap_or_default()
    }

    /// Copy the progress into the row of a run cut short (`abandoned`, or cancelled by an
    /// operator): attempts and their log, the last error as `error`, the model and the tokens
    /// of the replies that arrived, and a tool loop's record. Its money is the store's to put
    /// on the row: every reservation the run still holds (`store::policy::budget`).
    pub fn fill(&self, row: &mut HistoryRow) {
        if let Ok(g) = self.0.lock() {
            if !g.log.is_empty() {
                row.attempts = g.most;
                row.attempt_log = g.log.clone();
            }
            if row.error.is_none() {
                row.error = g.last_error.clone();
            }
            if row.input_tokens == 0 && row.output_tokens == 0 {
                row.input_tokens = g.log.iter().map(|a| a.input_tokens).sum();
                row.output_tokens = g.log.iter().map(|a| a.output_tokens).sum();
            }
        }
        if row.model.is_none()
            && let Ok(g) = self.3.lock()
        {
            row.model = g.clone();
        }
        if let Ok(g) = self.1.lock()
            && let Some(l) = g.as_ref()
        {
            row.turns = Some(l.turns);
            row.tool_calls = Some(l.tool_calls);
            row.transcript = Some(l.transcript.clone());
        }
    }
}

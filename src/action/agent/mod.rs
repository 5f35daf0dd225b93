//! The tool loop: model turn → tool calls → results → next turn, until the model answers without
//! calling a tool, or one of the loop's bounds ends the run.
//!
//! Owns: the order of a run's turns and calls ([`run_loop`]), the loop's bounds
//! ([`LoopLimits`]: turns, calls per turn, a call's time and output, the whole loop's time),
//! argument validation before dispatch (`schema`), the circuit breaker, and the transcript
//! (`crate::transcript`) of what happened. Must not touch: the store, budgets and prices, the
//! HTTP of a model request (one turn is the caller's [`ModelTurns::turn`]: it resolves the
//! price, reserves, calls with its retries, settles, and hands back the reply), the tools'
//! processes (`action::tools` owns them; dropping a call's future cancels it).
//!
//! Decisions where the contract is silent:
//! - An agent offered no tools is a one-turn loop: its reply is the answer, whatever it asks
//!   for, and the run keeps today's row (no transcript).
//! - The last turn allowed (`max_turns`) that still asks for tools ends the run `failed`
//!   without dispatching its calls: their results could never reach the model.
//! - A reply cut at its token limit that asks for tools ends the run `failed`, its calls not
//!   dispatched (their arguments may be cut too); a cut reply with no calls is the answer, as
//!   for an agent without tools, and the run's reason says it was cut.
//! - The circuit breaker counts every failing answer to the same tool name and arguments:
//!   errors the tool returned, time-outs, and calls refused before dispatch (a name that was not
//!   offered, arguments that are not valid). Calls over the turn's limit are not counted (they
//!   were never looked at). The third failure ends the run at once; the turn's later calls are
//!   not dispatched.
//! - With tools, `timeout_seconds` bounds the whole loop (turns, calls and the waits between
//!   retries); each call is bounded by the smaller of `tool_timeout_seconds` and the time left.
//! - Before every turn after the first, the sources the last turn's calls went to (and any
//!   that sent a list-change notice) are checked ([`Toolbox::recheck`]): a listed definition
//!   that changed ends the run before the turn is reserved, so no turn is paid for with tools
//!   the model must not see.
//! - The model sees a result redacted of every secret cronsole knows, cut to
//!   `max_tool_output_bytes`; the record keeps the whole result's size and sha256.

pub mod forecast;
pub mod schema;

mod dispatch;

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::action::llm::LlmReply;
use crate::action::llm::wire::{Dialogue, Step};
use crate::action::tools::Toolbox;
use crate::clock::Clock;
use crate::cost::RunCost;
use crate::model::ToolPattern;
use crate::text::Secrets;
use crate::transcript::{Delta, Entry, TURN_TEXT_MAX_BYTES, Transcript, TurnEntry, cap_bytes};

/// The loop's bounds for one agent (the jobs file's agent keys; defaults as documented there).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoopLimits {
    /// Model turns at most (1–100, default 10).
    pub max_turns: u32,
    /// One call's time at most (default 60 s).
    pub tool_timeout: Duration,
    /// What the model sees of one result, bytes (default 16 KiB).
    pub max_tool_output_bytes: usize,
    /// Calls answered in one turn (1–64, default 8); calls beyond get an error result.
    pub max_tool_calls_per_turn: u32,
}

impl Default for LoopLimits {
    fn default() -> Self {
        LoopLimits {
            max_turns: 10,
            tool_timeout: Duration::from_secs(60),
            max_tool_output_bytes: 16 * 1024,
            max_tool_calls_per_turn: 8,
        }
    }
}

impl LoopLimits {
    /// The agent's limits as the jobs file gives them (bounds already checked there; a stored
    /// definition out of range is clamped, never trusted).
    pub fn of(l: &crate::model::ToolLimits) -> LoopLimits {
        LoopLimits {
            max_turns: l.max_turns.clamp(1, 100),
            tool_timeout: Duration::try_from_secs_f64(
                l.tool_timeout_seconds.clamp(0.001, 86_400.0),
            )
            .unwrap_or(Duration::from_secs(60)),
            max_tool_output_bytes: usize::try_from(l.max_tool_output_bytes.max(1))
                .unwrap_or(usize::MAX),
            max_tool_calls_per_turn: l.max_tool_calls_per_turn.clamp(1, 64),
        }
    }
}

/// The same failing call this many times ends the run.
pub const BREAKER_FAILURES: u32 = 3;

/// What one turn asks of the caller.
#[derive(Debug, Clone, Copy)]
pub struct TurnAsk<'a> {
    /// 1-based.
    pub number: u32,
    /// The conversation so far and the tools offered.
    pub dialogue: Dialogue<'a>,
    /// When the whole loop must end (a request is bounded by the time left), if it is bounded.
    pub deadline: Option<Instant>,
    /// What the record gained since it was last persisted: the caller writes it with the
    /// turn's reservation (one store write).
    pub record: &'a [Delta],
}

/// A turn the model answered.
#[derive(Debug, Clone)]
pub struct TurnReply {
    pub reply: LlmReply,
    /// What the turn is booked at.
    pub cost: RunCost,
    /// Requests it took (retries included).
    pub attempts: u32,
}

/// One model turn, made by the caller: resolve the price, reserve, call (with retries), settle.
pub trait ModelTurns {
    /// Why a turn was not answered (a budget, the store, the lease, the model's last error):
    /// the loop ends with it.
    type Stop: Send;

    /// Make turn `ask.number`.
    fn turn<'a>(
        &'a mut self,
        ask: TurnAsk<'a>,
    ) -> impl Future<Output = Result<TurnReply, Self::Stop>> + Send + 'a;

    /// The record grew (a turn, a call about to be dispatched, a call's result): what a run
    /// cut short (shutdown) still shows.
    fn recorded(&mut self, progress: &LoopProgress<'_>);

    /// A call is about to be dispatched: persist what the record gained since it was last
    /// persisted (`record`, the call as `dispatched` last), so a run cut short by a crash still
    /// shows the call. An error ends the loop before the call goes out.
    fn persist<'a>(
        &'a mut self,
        record: Vec<Delta>,
    ) -> impl Future<Output = Result<(), Self::Stop>> + Send + 'a;

    /// A call to a tool in the agent's `approve:` list: wait for an operator's answer (the
    /// run awaiting approval), or deny it when nobody can answer. This default denies: a
    /// caller without operators never dispatches such a call.
    fn approve<'a>(
        &'a mut self,
        ask: ApprovalAsk<'a>,
    ) -> impl Future<Output = Result<Verdict, Self::Stop>> + Send + 'a {
        let _ = ask;
        std::future::ready(Ok(Verdict::Denied {
            reason: "denied: no operator can approve calls here".to_string(),
            by: None,
        }))
    }
}

/// A call that needs an operator's approval, for [`ModelTurns::approve`].
#[derive(Debug, Clone)]
pub struct ApprovalAsk<'a> {
    /// The tool's jobs-file name.
    pub tool: &'a str,
    /// The call's id (redacted, capped).
    pub call_id: &'a str,
    /// The arguments as the record keeps them (redacted, capped).
    pub arguments: &'a str,
    /// What the record gained since it was last persisted, to write with the wait.
    pub record: Vec<Delta>,
}

/// An operator's answer to a call (or the lack of one).
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Dispatch the call; the operator's reason, if any, is kept on the record.
    Approved {
        reason: Option<String>,
        /// Who approved it, when known (kept on the record).
        by: Option<String>,
    },
    /// Do not: the reason is the tool's result for the model.
    Denied {
        reason: String,
        /// Who denied it (`None`: nobody did, the wait timed out), kept on the record.
        by: Option<String>,
    },
}

/// Where a loop is, for [`ModelTurns::recorded`].
#[derive(Debug, Clone, Copy)]
pub struct LoopProgress<'a> {
    pub turns: u32,
    pub tool_calls: u32,
    pub transcript: &'a Transcript,
}

/// How a loop ended.
#[derive(Debug)]
pub enum LoopEnd<S> {
    /// The model answered without calling a tool (or was offered none).
    Answered {
        /// The answer, as the model wrote it (the caller redacts and caps it for the row).
        text: String,
        /// It was cut at its token limit.
        cut: bool,
    },
    /// One of the loop's own bounds ended it: the run is `failed` with this reason. Final,
    /// never retried.
    Bound(String),
    /// [`ModelTurns::turn`] stopped it.
    Stopped(S),
}

/// A finished loop.
#[derive(Debug)]
pub struct LoopOutcome<S> {
    pub end: LoopEnd<S>,
    /// Turns the model answered.
    pub turns: u32,
    /// Calls answered (dispatched or refused).
    pub tool_calls: u32,
    pub transcript: Transcript,
}

/// What a loop runs with.
pub struct LoopRun<'a> {
    /// The run's tools, frozen at its start (empty: a one-turn loop).
    pub toolbox: &'a Toolbox,
    pub limits: LoopLimits,
    /// Removed from every text the model and the record see.
    pub secrets: &'a Secrets,
    /// Wall time for the record.
    pub clock: &'a dyn Clock,
    /// The whole loop's bound (the job's `timeout_seconds`), for a loop with tools. Time a
    /// call waits for approval does not count.
    pub timeout: Option<Duration>,
    /// The agent's `approve:` entries: calls to the tools they admit wait for an operator.
    pub approve: &'a [ToolPattern],
}

/// Run the loop (see the module doc).
pub async fn run_loop<T: ModelTurns>(run: LoopRun<'_>, turns: &mut T) -> LoopOutcome<T::Stop> {
    let mut st = State {
        transcript: Transcript::new(),
        turns: 0,
        tool_calls: 0,
        dispatched: 0,
    };
    let end = drive(&run, turns, &mut st).await;
    LoopOutcome {
        end,
        turns: st.turns,
        tool_calls: st.tool_calls,
        transcript: st.transcript,
    }
}

struct State {
    transcript: Transcript,
    turns: u32,
    /// Calls answered, refused ones included (the row's `tool_calls`).
    tool_calls: u32,
    /// Calls that went to their tool.
    dispatched: u32,
}

impl State {
    fn progress(&self) -> LoopProgress<'_> {
        LoopProgress {
            turns: self.turns,
            tool_calls: self.tool_calls,
            transcript: &self.transcript,
        }
    }
}

async fn drive<T: ModelTurns>(
    run: &LoopRun<'_>,
    turns: &mut T,
    st: &mut State,
) -> LoopEnd<T::Stop> {
    let tools = &run.toolbox.offered;
    let with_tools = !tools.is_empty();
    let deadline = run
        .timeout
        .filter(|_| with_tools)
        .map(|t| Instant::now() + t);
    let max_turns = if with_tools {
        run.limits.max_turns.max(1)
    } else {
        1
    };
    let mut dispatcher = dispatch::Dispatcher::new(run);
    let mut steps: Vec<Step> = Vec::new();
    let mut breaker: HashMap<(String, String), u32> = HashMap::new();
    // The sources the last turn's calls went to: checked before the next turn is reserved.
    let mut called: Vec<usize> = Vec::new();
    for number in 1..=max_turns {
        if let Some(why) = changed(run.toolbox, &called).await {
            return LoopEnd::Bound(why);
        }
        // Time spent awaiting approval does not count toward the loop's bound.
        let deadline = deadline.map(|d| d + dispatcher.waited);
        if let (Some(d), Some(t)) = (deadline, run.timeout)
            && Instant::now() >= d
        {
            return LoopEnd::Bound(timed_out(t, st));
        }
        let record = st.transcript.take_delta();
        let ask = TurnAsk {
            number,
            dialogue: Dialogue {
                steps: &steps,
                tools,
            },
            deadline,
            record: &record,
        };
        let reply = match turns.turn(ask).await {
            Ok(r) => r,
            Err(stop) => return LoopEnd::Stopped(stop),
        };
        st.turns = number;
        if with_tools {
            st.transcript
                .push(Entry::Turn(turn_entry(number, &reply, run.secrets)));
            turns.recorded(&st.progress());
        }
        let TurnReply { reply, .. } = reply;
        if !with_tools || reply.calls.is_empty() {
            return LoopEnd::Answered {
                text: reply.text,
                cut: reply.cut,
            };
        }
        if reply.cut {
            return LoopEnd::Bound(format!(
                "reply cut at its token limit on turn {number}: its {} not dispatched",
                plural(reply.calls.len(), "tool call was", "tool calls were")
            ));
        }
        if number == max_turns {
            break;
        }
        let results = dispatcher
            .answer(number, &reply.calls, deadline, st, &mut breaker, turns)
            .await;
        let results = match results {
            Ok(r) => r,
            Err(dispatch::Halt::Bound(why)) => return LoopEnd::Bound(why),
            Err(dispatch::Halt::Stopped(stop)) => return LoopEnd::Stopped(stop),
        };
        called = reply
            .calls
            .iter()
            .filter_map(|c| run.toolbox.find(&c.name).map(|t| t.source))
            .collect();
        called.sort_unstable();
        called.dedup();
        steps.push(Step::Assistant {
            text: reply.text,
            calls: reply.calls,
        });
        steps.push(Step::Results(results));
    }
    LoopEnd::Bound(format!(
        "max_turns {max_turns} reached after {}",
        calls_run(st)
    ))
}

/// The calls that went to their tool, and how many more were refused before dispatch (over
/// the turn's limit, not offered, invalid, denied): `8 tool calls (16 more refused, never
/// run)`.
fn calls_run(st: &State) -> String {
    let run = plural(st.dispatched as usize, "tool call", "tool calls");
    match st.tool_calls.saturating_sub(st.dispatched) {
        0 => run,
        n => format!("{run} ({n} more refused, never run)"),
    }
}

/// `Some(reason)` when a source's listed definitions changed since the run started, checked
/// before every turn (after the calls of the last one, before its reservation).
async fn changed(toolbox: &Toolbox, called: &[usize]) -> Option<String> {
    let names = toolbox.recheck(called).await;
    if names.is_empty() {
        return None;
    }
    // A source that could not be listed again changed nothing anyone should review: say what
    // happened instead.
    let unlisted: Vec<String> = toolbox
        .sources
        .iter()
        .filter(|s| names.iter().any(|n| n == s.name()))
        .filter_map(|s| s.unlisted().map(|why| format!("'{}': {why}", s.name())))
        .collect();
    if !unlisted.is_empty() {
        return Some(format!(
            "tool source {} before the next turn (after a call that timed out, a server may \
             still be busy with it): the run ends, since what it offers could not be checked",
            unlisted.join("; ")
        ));
    }
    Some(format!(
        "tool definitions changed mid-run ({} changed its tool list): the run ends before the \
         model sees them; review with cronsole tools",
        names.join(", ")
    ))
}

fn timed_out(t: Duration, st: &State) -> String {
    format!(
        "timed out: the tool loop ran past timeout_seconds ({}s) after {}",
        t.as_secs_f64(),
        calls_run(st)
    )
}

fn plural(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

fn turn_entry(number: u32, r: &TurnReply, secrets: &Secrets) -> TurnEntry {
    TurnEntry {
        turn: number,
        model: secrets.redact(&r.reply.model).into_owned(),
        input_tokens: r.cost.input_tokens,
        output_tokens: r.cost.output_tokens,
        cache_read_tokens: r.cost.cache_read_tokens,
        cache_write_tokens: r.cost.cache_write_tokens,
        cost_usd: r.cost.cost_usd,
        attempts: r.attempts,
        text: cap_bytes(&secrets.redact(&r.reply.text), TURN_TEXT_MAX_BYTES),
        cut: r.reply.cut,
        calls: u32::try_from(r.reply.calls.len()).unwrap_or(u32::MAX),
    }
}

#[cfg(test)]
mod tests;

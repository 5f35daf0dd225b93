//! One turn's tool calls: each one refused or dispatched, its result made what the model sees
//! and what the record keeps, in the order the model asked for them.
//!
//! Owns: the checks before dispatch (the turn's call limit, readable arguments, a name that was
//! offered, arguments valid for its schema), the call's time bound, the result's rendering,
//! redaction and cap, the record of each call (dispatched before it runs, completed after),
//! and the circuit breaker's count. Must not touch: the model (the loop sends the results).

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use super::schema::ArgSchemas;
use super::{ApprovalAsk, BREAKER_FAILURES, LoopRun, ModelTurns, State, Verdict, plural};
use crate::action::llm::wire::{ToolCall, ToolResult};
use crate::action::tools::{Content, ToolError, ToolOutput, Whole};
use crate::transcript::{
    ARGS_MAX_BYTES, Approval, CallEntry, CallState, Entry, RESULT_HEAD_BYTES,
    SERVER_REQUEST_MAX_BYTES, ServerRequestEntry, cap_bytes, sha256_hex,
};

/// A call's source is given this long past its own time bound before the loop drops the call
/// (which cancels it): a source that ignores its bound cannot hold the run.
const CALL_GRACE: Duration = Duration::from_secs(5);

pub(super) struct Dispatcher<'r, 'a> {
    run: &'r LoopRun<'a>,
    schemas: ArgSchemas,
    /// Time calls waited for approval so far (the loop's bound moves by it).
    pub(super) waited: Duration,
}

/// Why a turn's calls were not all answered.
pub(super) enum Halt<S> {
    /// The circuit breaker tripped: the run is `failed` with this reason.
    Bound(String),
    /// The record could not be persisted before a dispatch (the store, the lease).
    Stopped(S),
}

/// One call's answer before it is recorded and sent.
struct Answer {
    text: String,
    is_error: bool,
    state: CallState,
    /// The whole output's size and hash when the source measured them (it kept only part).
    whole: Option<Whole>,
}

impl<'r, 'a> Dispatcher<'r, 'a> {
    pub(super) fn new(run: &'r LoopRun<'a>) -> Self {
        let schemas = ArgSchemas::compile(run.toolbox.offered.iter().map(|t| &t.def.input_schema));
        Dispatcher {
            run,
            schemas,
            waited: Duration::ZERO,
        }
    }

    /// Answer `calls` of turn `turn` in order; a halt when the circuit breaker trips or the
    /// record cannot be persisted before a dispatch.
    pub(super) async fn answer<T: ModelTurns>(
        &mut self,
        turn: u32,
        calls: &[ToolCall],
        deadline: Option<Instant>,
        st: &mut State,
        breaker: &mut HashMap<(String, String), u32>,
        turns: &mut T,
    ) -> Result<Vec<ToolResult>, Halt<T::Stop>> {
        let limit = self.run.limits.max_tool_calls_per_turn.max(1) as usize;
        let mut results = Vec::with_capacity(calls.len());
        for (i, call) in calls.iter().enumerate() {
            let offered = self.run.toolbox.find(&call.name);
            // A name the model made up is its text: redacted and bounded like any other.
            let tool = offered.map_or_else(
                || cap_bytes(&self.run.secrets.redact(&call.name), 128),
                |t| t.qualified.clone(),
            );
            let source = offered
                .and_then(|t| self.run.toolbox.sources.get(t.source))
                .map(|s| s.name().to_string());
            let started_at = self.run.clock.now();
            let started = Instant::now();
            let mut entry = CallEntry::dispatched(
                turn,
                cap_bytes(&self.run.secrets.redact(&call.id), 128),
                tool.clone(),
                source,
                // Redacted on their decoded strings: a secret written with JSON escapes is
                // caught too.
                cap_bytes(
                    &self.run.secrets.redact_json_text(&call.raw_args),
                    ARGS_MAX_BYTES,
                ),
                started_at,
            );
            st.tool_calls += 1;
            let answer = if i >= limit {
                refused(format!(
                    "not run: at most {} in one turn (max_tool_calls_per_turn); ask for it again \
                     in the next turn",
                    plural(limit, "tool call", "tool calls")
                ))
            } else {
                self.checked(call, deadline, st, &mut entry, turns)
                    .await
                    .map_err(Halt::Stopped)?
            };
            let counted = i < limit;
            entry.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            let shown = self.record(&mut entry, &answer, st, turns);
            results.push(ToolResult {
                call_id: call.id.clone(),
                text: shown,
                is_error: answer.is_error,
            });
            if answer.is_error && counted {
                let key = (tool.clone(), args_key(call));
                let n = breaker.entry(key).or_insert(0);
                *n += 1;
                if *n >= BREAKER_FAILURES {
                    return Err(Halt::Bound(format!(
                        "tool loop: {tool} failed {BREAKER_FAILURES} times with the same arguments"
                    )));
                }
            }
        }
        Ok(results)
    }

    /// The checks, then the dispatch (recorded and persisted as `dispatched` before it runs;
    /// `Err` when it could not be persisted: the call does not go out).
    async fn checked<T: ModelTurns>(
        &mut self,
        call: &ToolCall,
        deadline: Option<Instant>,
        st: &mut State,
        entry: &mut CallEntry,
        turns: &mut T,
    ) -> Result<Answer, T::Stop> {
        let Some(index) = self
            .run
            .toolbox
            .offered
            .iter()
            .position(|t| t.wire_name == call.name)
        else {
            let names: Vec<&str> = self
                .run
                .toolbox
                .offered
                .iter()
                .map(|t| t.wire_name.as_str())
                .collect();
            return Ok(refused(format!(
                "not run: no tool named '{}' is offered; the tools offered are: {}",
                cap_bytes(&call.name, 128),
                names.join(", ")
            )));
        };
        let args = match &call.args {
            Ok(a) => Value::Object(a.clone()),
            Err(why) => return Ok(refused(format!("not run: {why}"))),
        };
        if let Err(why) = self.schemas.check(index, &args) {
            return Ok(refused(format!("not run: {why}")));
        }
        let qualified = &self.run.toolbox.offered[index].qualified;
        if self.run.approve.iter().any(|p| p.admits(qualified)) {
            // The call is on the record before it waits, written with the wait itself: a run
            // that ends while it waits (its owner killed) still shows what it waited for.
            entry.state = CallState::AwaitingApproval;
            st.transcript.push(Entry::Call(entry.clone()));
            turns.recorded(&st.progress());
            entry.state = CallState::Dispatched;
            let asked = Instant::now();
            let verdict = turns
                .approve(ApprovalAsk {
                    tool: qualified,
                    call_id: &entry.id,
                    arguments: &entry.arguments,
                    record: st.transcript.take_delta(),
                })
                .await?;
            self.waited += asked.elapsed();
            match verdict {
                Verdict::Approved { reason, by } => {
                    entry.approval = Some(Approval::Approved {
                        by,
                        reason: reason.map(|r| self.run.secrets.redact(&r).into_owned()),
                    });
                }
                Verdict::Denied { reason, by } => {
                    entry.approval = Some(Approval::Denied {
                        reason: self.run.secrets.redact(&reason).into_owned(),
                        by,
                    });
                    return Ok(refused(format!("not run: {reason}")));
                }
            }
        }
        let deadline = deadline.map(|d| d + self.waited);
        let mut bound = self.run.limits.tool_timeout;
        if let Some(d) = deadline {
            bound = bound.min(d.saturating_duration_since(Instant::now()));
        }
        if bound.is_zero() {
            return Ok(done_error(
                "not run: no time left in the run's timeout_seconds".to_string(),
            ));
        }
        // The record says the call went out before it does: a run cut short while the call is
        // in flight still shows it. An approved call is on the record already (it waited).
        if entry.approval.is_some() {
            let now = entry.clone();
            st.transcript
                .update_call(entry.turn, &entry.id, move |c| *c = now);
        } else {
            st.transcript.push(Entry::Call(entry.clone()));
        }
        turns.recorded(&st.progress());
        turns.persist(st.transcript.take_delta()).await?;
        st.dispatched += 1;
        let call_fut = self.run.toolbox.call(&call.name, args, bound);
        Ok(
            match tokio::time::timeout(bound + CALL_GRACE, call_fut).await {
                Ok(Some(Ok(out))) => Answer {
                    text: render(&out),
                    is_error: out.is_error,
                    state: CallState::Done,
                    whole: out.whole,
                },
                Ok(Some(Err(ToolError::Timeout(d)))) => done_error(format!(
                    "the call timed out after {}s and was cancelled",
                    d.as_secs_f64()
                )),
                Ok(Some(Err(e))) => done_error(e.to_string()),
                Ok(None) => done_error("the tool is not offered".to_string()),
                Err(_) => done_error(format!(
                    "the call timed out after {}s and was cancelled",
                    bound.as_secs_f64()
                )),
            },
        )
    }

    /// Record the answer (in place for a dispatched call, appended for a refused one) and
    /// return the text the model sees: redacted, then cut to `max_tool_output_bytes`.
    fn record<T: ModelTurns>(
        &self,
        entry: &mut CallEntry,
        answer: &Answer,
        st: &mut State,
        turns: &mut T,
    ) -> String {
        // OpenAI's format has no error flag on a result: the text itself says so.
        let full = if answer.is_error {
            format!("error: {}", answer.text)
        } else {
            answer.text.clone()
        };
        let redacted = self.run.secrets.redact(&full);
        let shown = cut_for_model(&redacted, self.run.limits.max_tool_output_bytes);
        entry.state = answer.state;
        entry.is_error = answer.is_error;
        // Size and hash of the tool's own output, whole: measured by the source when it kept
        // only part of it, else of the text it returned (without the error mark added here).
        match &answer.whole {
            Some(w) => {
                entry.result_bytes = w.bytes;
                entry.result_sha256 = w.sha256.clone();
            }
            None => {
                entry.result_bytes = answer.text.len() as u64;
                entry.result_sha256 = sha256_hex(answer.text.as_bytes());
            }
        }
        entry.result_head = cap_bytes(&redacted, RESULT_HEAD_BYTES);
        // A refused call is new to the record, but for a denied one (it waited on the record).
        if answer.state == CallState::Refused && entry.approval.is_none() {
            st.transcript.push(Entry::Call(entry.clone()));
        } else {
            let done = entry.clone();
            st.transcript
                .update_call(entry.turn, &entry.id, move |c| *c = done);
        }
        // What a server asked of cronsole during the call and was refused (sampling,
        // elicitation, roots, input mid-call): on the record right after the call, and logged,
        // redacted and one line each, since the SDK's own log lines are not written.
        for e in self.run.toolbox.take_events() {
            let e = self.run.secrets.redact(&e);
            tracing::warn!(tool = %entry.tool, "{e}");
            st.transcript.push(Entry::ServerRequest(ServerRequestEntry {
                turn: entry.turn,
                call_id: entry.id.clone(),
                tool: entry.tool.clone(),
                request: cap_bytes(&e, SERVER_REQUEST_MAX_BYTES),
            }));
        }
        turns.recorded(&st.progress());
        shown
    }
}

fn refused(text: String) -> Answer {
    Answer {
        text,
        is_error: true,
        state: CallState::Refused,
        whole: None,
    }
}

fn done_error(text: String) -> Answer {
    Answer {
        text,
        is_error: true,
        state: CallState::Done,
        whole: None,
    }
}

/// The circuit breaker's key for a call's arguments: canonical JSON when they were read, the
/// raw text when not.
fn args_key(call: &ToolCall) -> String {
    match &call.args {
        Ok(a) => Value::Object(a.clone()).to_string(),
        Err(_) => call.raw_args.clone(),
    }
}

/// A call's output as text: its text parts in order, a `[kind: mime, size, sha256]` line for
/// each non-text part, the structured content's JSON when there is nothing else.
pub(super) fn render(out: &ToolOutput) -> String {
    let mut parts: Vec<String> = out
        .content
        .iter()
        .map(|c| match c {
            Content::Text { text } => text.clone(),
            Content::Blob {
                kind,
                mime,
                size,
                sha256,
            } => format!("[{kind}: {mime}, {size} bytes, sha256 {sha256}]"),
        })
        .collect();
    if parts.is_empty()
        && let Some(s) = &out.structured
    {
        parts.push(s.to_string());
    }
    parts.join("\n")
}

/// `s` cut to `max` bytes at a character boundary, with a line saying how much was shown.
fn cut_for_model(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n…[output cut: {end} of {} bytes shown]",
        &s[..end],
        s.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_cut_at_a_character_boundary_and_say_so() {
        assert_eq!(cut_for_model("short", 10), "short");
        let c = cut_for_model(&"é".repeat(10), 5);
        assert_eq!(c, "éé\n…[output cut: 4 of 20 bytes shown]");
    }

    #[test]
    fn non_text_content_reaches_the_model_as_one_line() {
        let out = ToolOutput {
            content: vec![
                Content::Text { text: "a".into() },
                Content::Blob {
                    kind: "image".into(),
                    mime: "image/png".into(),
                    size: 3,
                    sha256: "ab".into(),
                },
            ],
            structured: Some(serde_json::json!({"x": 1})),
            is_error: false,
            whole: None,
        };
        assert_eq!(render(&out), "a\n[image: image/png, 3 bytes, sha256 ab]");
        let only_structured = ToolOutput {
            structured: Some(serde_json::json!({"x": 1})),
            ..ToolOutput::default()
        };
        assert_eq!(render(&only_structured), r#"{"x":1}"#);
    }
}

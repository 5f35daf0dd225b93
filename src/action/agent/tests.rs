//! The loop against a scripted model and in-memory tool sources.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::action::llm::wire::ToolCall;
use crate::clock::ManualClock;
use crate::testkit::time::base;
use crate::testkit::tools::{MemorySource, error_output, no_tools, text_output, toolbox};
use crate::transcript::{Approval, CallState};

/// A model answering from a script; records what each turn was sent.
struct Scripted {
    replies: VecDeque<Result<LlmReply, &'static str>>,
    /// Per turn: the steps it was sent.
    seen: Vec<Vec<Step>>,
    recorded: usize,
    /// Every delta persisted, each turn's (from its ask) and each dispatch's, in order.
    persisted: Vec<Delta>,
    /// Persisting fails from the N-th dispatch on (1-based).
    fail_persist_at: Option<usize>,
    dispatches: usize,
    /// Answers to calls awaiting approval, in order, each after its wait.
    verdicts: VecDeque<(Duration, Verdict)>,
    /// The tools approvals were asked for.
    asked: Vec<String>,
}

impl Scripted {
    fn new(replies: Vec<Result<LlmReply, &'static str>>) -> Scripted {
        Scripted {
            replies: replies.into(),
            seen: Vec::new(),
            recorded: 0,
            persisted: Vec::new(),
            fail_persist_at: None,
            dispatches: 0,
            verdicts: VecDeque::new(),
            asked: Vec::new(),
        }
    }
}

impl ModelTurns for Scripted {
    type Stop = &'static str;

    fn turn<'a>(
        &'a mut self,
        ask: TurnAsk<'a>,
    ) -> impl Future<Output = Result<TurnReply, &'static str>> + Send + 'a {
        self.seen.push(ask.dialogue.steps.to_vec());
        self.persisted.extend(ask.record.iter().cloned());
        let next = self.replies.pop_front().unwrap_or(Err("script exhausted"));
        async move {
            next.map(|reply| TurnReply {
                cost: RunCost {
                    input_tokens: 10,
                    output_tokens: 5,
                    cost_usd: 0.001,
                    ..RunCost::default()
                },
                reply,
                attempts: 1,
            })
        }
    }

    fn recorded(&mut self, _: &LoopProgress<'_>) {
        self.recorded += 1;
    }

    fn persist<'a>(
        &'a mut self,
        record: Vec<Delta>,
    ) -> impl Future<Output = Result<(), &'static str>> + Send + 'a {
        self.dispatches += 1;
        let fail = self.fail_persist_at.is_some_and(|n| self.dispatches >= n);
        if !fail {
            self.persisted.extend(record);
        }
        async move {
            if fail {
                Err("store unwritable")
            } else {
                Ok(())
            }
        }
    }

    fn approve<'a>(
        &'a mut self,
        ask: ApprovalAsk<'a>,
    ) -> impl Future<Output = Result<Verdict, &'static str>> + Send + 'a {
        self.asked.push(ask.tool.to_string());
        self.persisted.extend(ask.record);
        let (wait, v) = self.verdicts.pop_front().unwrap_or((
            Duration::ZERO,
            Verdict::Denied {
                reason: "nobody".into(),
                by: None,
            },
        ));
        async move {
            tokio::time::sleep(wait).await;
            Ok(v)
        }
    }
}

fn text(t: &str) -> Result<LlmReply, &'static str> {
    Ok(LlmReply {
        text: t.into(),
        model: "m".into(),
        usage: None,
        cache: Default::default(),
        calls: Vec::new(),
        cut: false,
    })
}

fn call(id: &str, name: &str, args: Value) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        raw_args: args.to_string(),
        args: match args {
            Value::Object(m) => Ok(m),
            other => Err(format!("not an object: {other}")),
        },
    }
}

fn calls(c: Vec<ToolCall>) -> Result<LlmReply, &'static str> {
    Ok(LlmReply {
        calls: c,
        ..text("").unwrap_or_else(|_| unreachable!())
    })
}

fn files() -> Arc<MemorySource> {
    Arc::new(
        MemorySource::new("files")
            .tool(
                "read_file",
                json!({"type": "object", "properties": {"path": {"type": "string"}},
                       "required": ["path"], "additionalProperties": false}),
                |args| match args["path"].as_str() {
                    Some("/missing") => Ok(error_output("no such file")),
                    Some(p) => Ok(text_output(&format!("contents of {p} KEY-0123456789"))),
                    None => Ok(error_output("no path")),
                },
            )
            .slow_tool("slow", Duration::from_secs(3600), "late"),
    )
}

async fn run_with(
    tb: &Toolbox,
    limits: LoopLimits,
    timeout: Option<Duration>,
    model: &mut Scripted,
) -> LoopOutcome<&'static str> {
    run_approving(tb, limits, timeout, &[], model).await
}

async fn run_approving(
    tb: &Toolbox,
    limits: LoopLimits,
    timeout: Option<Duration>,
    approve: &[crate::model::ToolPattern],
    model: &mut Scripted,
) -> LoopOutcome<&'static str> {
    let secrets = Secrets::new(["KEY-0123456789".to_string()]);
    let clock = ManualClock::new(base(0));
    run_loop(
        LoopRun {
            toolbox: tb,
            limits,
            secrets: &secrets,
            clock: &clock,
            timeout,
            approve,
        },
        model,
    )
    .await
}

fn results(steps: &[Step]) -> Vec<(String, String, bool)> {
    steps
        .iter()
        .flat_map(|s| match s {
            Step::Results(r) => r
                .iter()
                .map(|r| (r.call_id.clone(), r.text.clone(), r.is_error))
                .collect(),
            Step::Assistant { .. } => Vec::new(),
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn an_agent_without_tools_is_one_turn_whatever_it_asks_for() {
    let tb = no_tools();
    let mut m = Scripted::new(vec![calls(vec![call("a", "x", json!({}))]), text("never")]);
    let out = run_with(&tb, LoopLimits::default(), None, &mut m).await;
    assert!(matches!(out.end, LoopEnd::Answered { ref text, cut: false } if text.is_empty()));
    assert_eq!((out.turns, out.tool_calls), (1, 0));
    assert!(out.transcript.is_empty());
    assert_eq!(m.seen.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn parallel_calls_are_answered_in_order_then_the_model_answers() {
    let src = files();
    let tb = toolbox(vec![src.clone()]);
    let mut m = Scripted::new(vec![
        calls(vec![
            call("c1", "files__read_file", json!({"path": "/a"})),
            call("c2", "files__read_file", json!({"path": "/missing"})),
        ]),
        text("done"),
    ]);
    let out = run_with(&tb, LoopLimits::default(), None, &mut m).await;
    assert!(matches!(out.end, LoopEnd::Answered { ref text, .. } if text == "done"));
    assert_eq!((out.turns, out.tool_calls), (2, 2));
    let r = results(&m.seen[1]);
    assert_eq!(r[0].0, "c1");
    // Secrets are out of what the model sees.
    assert_eq!(r[0].1, "contents of /a [redacted]");
    assert!(!r[0].2);
    assert_eq!(r[1], ("c2".into(), "error: no such file".into(), true));
    assert_eq!(src.calls().len(), 2);
    let v = out.transcript.to_vec();
    assert_eq!(v.len(), 4, "turn, call, call, turn: {v:?}");
    let Entry::Call(c) = &v[1] else {
        panic!("{v:?}")
    };
    assert_eq!(c.tool, "files.read_file");
    assert_eq!(c.source.as_deref(), Some("files"));
    assert_eq!(c.state, CallState::Done);
    assert!(c.result_head.contains("[redacted]") && !c.result_head.contains("KEY-"));
    // Size and hash are those of the whole result as the tool gave it.
    assert_eq!(c.result_bytes, "contents of /a KEY-0123456789".len() as u64);
    assert!(m.recorded >= 4);
}

/// The model sees a bounded result; the record keeps the size and sha256 of the whole output —
/// measured by the loop when the source returned it whole, taken from the source when it kept
/// only a part (a command tool's streams over their bound) — and never counts the error mark
/// the loop adds.
#[tokio::test(start_paused = true)]
async fn the_record_measures_the_whole_output_while_the_model_gets_the_bounded_one() {
    use crate::action::tools::{ToolOutput, Whole};
    use crate::transcript::sha256_hex;
    let big = "0123456789".repeat(10_000);
    let big_for_tool = big.clone();
    let src = Arc::new(
        MemorySource::new("gen")
            .tool("big", json!({"type": "object"}), move |_| {
                Ok(text_output(&big_for_tool))
            })
            .tool("measured", json!({"type": "object"}), |_| {
                Ok(ToolOutput {
                    whole: Some(Whole {
                        bytes: 9_000_000,
                        sha256: "ab".repeat(32),
                    }),
                    ..text_output("the first part")
                })
            })
            .tool("fails", json!({"type": "object"}), |_| {
                Ok(error_output("bad"))
            }),
    );
    let tb = toolbox(vec![src]);
    let mut m = Scripted::new(vec![
        calls(vec![
            call("c1", "gen__big", json!({})),
            call("c2", "gen__measured", json!({})),
            call("c3", "gen__fails", json!({})),
        ]),
        text("done"),
    ]);
    let limits = LoopLimits {
        max_tool_output_bytes: 1000,
        ..LoopLimits::default()
    };
    let out = run_with(&tb, limits, None, &mut m).await;
    assert_eq!(out.tool_calls, 3);
    let shown = results(&m.seen[1]);
    assert!(shown[0].1.len() < 1100, "{}", shown[0].1);
    assert!(
        shown[0]
            .1
            .ends_with("…[output cut: 1000 of 100000 bytes shown]")
    );
    let recorded: Vec<(u64, String)> = out
        .transcript
        .to_vec()
        .into_iter()
        .filter_map(|e| match e {
            Entry::Call(c) => Some((c.result_bytes, c.result_sha256)),
            _ => None,
        })
        .collect();
    assert_eq!(
        recorded,
        vec![
            (100_000, sha256_hex(big.as_bytes())),
            (9_000_000, "ab".repeat(32)),
            (3, sha256_hex(b"bad")),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn names_not_offered_and_invalid_arguments_are_never_dispatched() {
    let src = files();
    let tb = toolbox(vec![src.clone()]);
    let mut m = Scripted::new(vec![
        calls(vec![
            call("a", "shell__exec", json!({"cmd": "rm -rf /"})),
            call("b", "files__read_file", json!({"path": 7})),
            call("c", "files__read_file", json!("[1]")),
            call(
                "d",
                "files__read_file",
                json!({"path": "/ok", "extra": true}),
            ),
        ]),
        text("ok"),
    ]);
    let out = run_with(&tb, LoopLimits::default(), None, &mut m).await;
    assert!(matches!(out.end, LoopEnd::Answered { .. }));
    assert!(src.calls().is_empty(), "{:?}", src.calls());
    let r = results(&m.seen[1]);
    assert!(r.iter().all(|x| x.2), "{r:?}");
    assert!(
        r[0].1.contains("no tool named 'shell__exec' is offered"),
        "{}",
        r[0].1
    );
    assert!(r[0].1.contains("files__read_file"));
    assert!(
        r[1].1.contains("do not match the tool's schema"),
        "{}",
        r[1].1
    );
    assert!(
        r[2].1.starts_with("error: not run: not an object"),
        "{}",
        r[2].1
    );
    assert!(r[3].1.contains("extra"), "{}", r[3].1);
    for e in out.transcript.to_vec() {
        if let Entry::Call(c) = e {
            assert_eq!(c.state, CallState::Refused);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn max_turns_reached_fails_and_the_last_turn_dispatches_nothing() {
    let src = files();
    let tb = toolbox(vec![src.clone()]);
    let replies = (0..5)
        .map(|i| {
            calls(vec![call(
                &format!("c{i}"),
                "files__read_file",
                json!({"path": format!("/{i}")}),
            )])
        })
        .collect();
    let mut m = Scripted::new(replies);
    let limits = LoopLimits {
        max_turns: 3,
        ..LoopLimits::default()
    };
    let out = run_with(&tb, limits, None, &mut m).await;
    match out.end {
        LoopEnd::Bound(r) => assert_eq!(r, "max_turns 3 reached after 2 tool calls"),
        other => panic!("{other:?}"),
    }
    assert_eq!(src.calls().len(), 2);
    assert_eq!(out.turns, 3);
}

/// The `max_turns` reason counts the calls that ran; calls refused before dispatch (here those
/// over `max_tool_calls_per_turn`) are named apart, never counted as run.
#[tokio::test(start_paused = true)]
async fn the_max_turns_reason_counts_the_calls_that_ran_and_names_the_refused_apart() {
    let src = files();
    let tb = toolbox(vec![src.clone()]);
    let replies = (0..3)
        .map(|t| {
            calls(
                (0..12)
                    .map(|i| {
                        call(
                            &format!("c{t}-{i}"),
                            "files__read_file",
                            json!({"path": format!("/{t}/{i}")}),
                        )
                    })
                    .collect(),
            )
        })
        .collect();
    let mut m = Scripted::new(replies);
    let limits = LoopLimits {
        max_turns: 3,
        max_tool_calls_per_turn: 4,
        ..LoopLimits::default()
    };
    let out = run_with(&tb, limits, None, &mut m).await;
    match out.end {
        LoopEnd::Bound(r) => assert_eq!(
            r,
            "max_turns 3 reached after 8 tool calls (16 more refused, never run)"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(src.calls().len(), 8, "what the reason says ran");
    assert_eq!(out.tool_calls, 24, "every call answered is on the row");
}

/// A request a server sent during a call and cronsole refused (sampling, here) is on the
/// record right after that call, redacted, and not only in the log.
#[tokio::test(start_paused = true)]
async fn a_servers_refused_request_is_on_the_record_after_its_call() {
    let src = Arc::new(
        MemorySource::new("evil")
            .tool("a", json!({"type": "object"}), |_| Ok(text_output("done")))
            .asking_during_calls("refused the server's sampling request (KEY-0123456789)"),
    );
    let tb = toolbox(vec![src.clone()]);
    let mut m = Scripted::new(vec![
        calls(vec![call("c1", "evil__a", json!({}))]),
        text("fine"),
    ]);
    let out = run_with(&tb, LoopLimits::default(), None, &mut m).await;
    assert!(matches!(out.end, LoopEnd::Answered { .. }), "{:?}", out.end);
    let v = out.transcript.to_vec();
    assert!(matches!(&v[1], Entry::Call(c) if c.id == "c1"), "{v:?}");
    let Entry::ServerRequest(r) = &v[2] else {
        panic!("the refusal follows its call: {v:?}")
    };
    assert_eq!(
        (r.turn, r.call_id.as_str(), r.tool.as_str()),
        (1, "c1", "evil.a")
    );
    assert_eq!(
        r.request,
        "evil: refused the server's sampling request ([redacted])"
    );
    assert!(matches!(&v[3], Entry::Turn(t) if t.turn == 2), "{v:?}");
    assert_eq!(out.transcript.counts(), (2, 1), "a refusal is not a call");
}

#[tokio::test(start_paused = true)]
async fn calls_over_the_turn_limit_get_an_error_result() {
    let src = files();
    let tb = toolbox(vec![src.clone()]);
    let many = (0..5)
        .map(|i| {
            call(
                &format!("c{i}"),
                "files__read_file",
                json!({"path": format!("/{i}")}),
            )
        })
        .collect();
    let mut m = Scripted::new(vec![calls(many), text("ok")]);
    let limits = LoopLimits {
        max_tool_calls_per_turn: 2,
        ..LoopLimits::default()
    };
    let out = run_with(&tb, limits, None, &mut m).await;
    assert!(matches!(out.end, LoopEnd::Answered { .. }));
    assert_eq!(src.calls().len(), 2);
    let r = results(&m.seen[1]);
    assert_eq!(r.len(), 5);
    assert!(
        r[2].1.contains("at most 2 tool calls in one turn"),
        "{}",
        r[2].1
    );
    assert_eq!(out.tool_calls, 5);
}

#[tokio::test(start_paused = true)]
async fn the_same_call_failing_three_times_ends_the_run() {
    let src = files();
    let tb = toolbox(vec![src.clone()]);
    let bad = || {
        calls(vec![call(
            "x",
            "files__read_file",
            json!({"path": "/missing"}),
        )])
    };
    let mut m = Scripted::new(vec![bad(), bad(), bad(), text("never")]);
    let out = run_with(&tb, LoopLimits::default(), None, &mut m).await;
    match out.end {
        LoopEnd::Bound(r) => assert_eq!(
            r,
            "tool loop: files.read_file failed 3 times with the same arguments"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(m.seen.len(), 3);
    // Malformed arguments repeated count too: no model retries them forever.
    let mut m = Scripted::new(vec![
        calls(vec![call("x", "files__read_file", json!("{oops"))]),
        calls(vec![call("x", "files__read_file", json!("{oops"))]),
        calls(vec![call("x", "files__read_file", json!("{oops"))]),
    ]);
    let out = run_with(&tb, LoopLimits::default(), None, &mut m).await;
    assert!(matches!(out.end, LoopEnd::Bound(ref r) if r.contains("failed 3 times")));
    assert!(src.calls().len() <= 3);
}

#[tokio::test(start_paused = true)]
async fn a_cut_reply_dispatches_nothing() {
    let src = files();
    let tb = toolbox(vec![src.clone()]);
    let mut cut = calls(vec![call("a", "files__read_file", json!({"path": "/a"}))]);
    if let Ok(r) = &mut cut {
        r.cut = true;
    }
    let mut m = Scripted::new(vec![cut]);
    let out = run_with(&tb, LoopLimits::default(), None, &mut m).await;
    match out.end {
        LoopEnd::Bound(r) => assert_eq!(
            r,
            "reply cut at its token limit on turn 1: its 1 tool call was not dispatched"
        ),
        other => panic!("{other:?}"),
    }
    assert!(src.calls().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_slow_tool_is_cancelled_at_its_timeout_and_the_model_told() {
    let src = files();
    let tb = toolbox(vec![src.clone()]);
    let mut m = Scripted::new(vec![
        calls(vec![call("s", "files__slow", json!({}))]),
        text("gave up"),
    ]);
    let limits = LoopLimits {
        tool_timeout: Duration::from_secs(2),
        ..LoopLimits::default()
    };
    let started = Instant::now();
    let out = run_with(&tb, limits, None, &mut m).await;
    assert!(matches!(out.end, LoopEnd::Answered { .. }));
    assert!(started.elapsed() < Duration::from_secs(10));
    let r = results(&m.seen[1]);
    assert!(r[0].1.contains("timed out after 2s"), "{}", r[0].1);
    assert_eq!(src.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_jobs_timeout_bounds_the_whole_loop() {
    let src = files();
    let tb = toolbox(vec![src.clone()]);
    let slow = || calls(vec![call("s", "files__slow", json!({}))]);
    let mut m = Scripted::new(vec![slow(), slow(), slow()]);
    let out = run_with(
        &tb,
        LoopLimits::default(),
        Some(Duration::from_secs(90)),
        &mut m,
    )
    .await;
    match out.end {
        LoopEnd::Bound(r) => assert!(
            r.starts_with("timed out: the tool loop ran past timeout_seconds (90s)"),
            "{r}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(m.seen.len(), 2, "60 s + 30 s of calls, then no third turn");
}

#[tokio::test(start_paused = true)]
async fn a_changed_tool_list_ends_the_run_before_the_next_turn() {
    let src = files();
    let tb = toolbox(vec![src.clone()]);
    let mut m = Scripted::new(vec![calls(vec![call(
        "a",
        "files__read_file",
        json!({"path": "/a"}),
    )])]);
    src.set_changed();
    let out = run_with(&tb, LoopLimits::default(), None, &mut m).await;
    assert!(
        matches!(out.end, LoopEnd::Bound(ref r) if r.contains("(files changed its tool list)"))
    );
    assert!(m.seen.is_empty(), "the model never saw the changed tools");
}

#[tokio::test(start_paused = true)]
async fn a_stopped_turn_keeps_what_was_recorded() {
    let src = files();
    let tb = toolbox(vec![src.clone()]);
    let mut m = Scripted::new(vec![
        calls(vec![call("a", "files__read_file", json!({"path": "/a"}))]),
        Err("budget reached after turn 1"),
    ]);
    let out = run_with(&tb, LoopLimits::default(), None, &mut m).await;
    assert!(matches!(
        out.end,
        LoopEnd::Stopped("budget reached after turn 1")
    ));
    assert_eq!((out.turns, out.tool_calls), (1, 1));
    assert_eq!(out.transcript.to_vec().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn each_call_is_persisted_as_dispatched_before_it_runs_and_with_its_result_after() {
    let src = files();
    let tb = toolbox(vec![src.clone()]);
    let mut m = Scripted::new(vec![
        calls(vec![
            call("a", "files__read_file", json!({"path": "/a"})),
            call("b", "files__read_file", json!({"path": "/b"})),
        ]),
        text("done"),
    ]);
    let out = run_with(&tb, LoopLimits::default(), None, &mut m).await;
    assert!(matches!(out.end, LoopEnd::Answered { .. }));
    assert_eq!(m.dispatches, 2, "one persist per dispatched call");
    // The persisted deltas rebuild the record as the loop ended it, each call done.
    let rebuilt = Transcript::from_deltas(m.persisted.clone());
    assert_eq!(rebuilt.to_vec(), out.transcript.to_vec()[..3].to_vec());
    let states: Vec<(u64, CallState)> = m
        .persisted
        .iter()
        .filter_map(|d| match &d.entry {
            Entry::Call(c) => Some((d.seq, c.state)),
            _ => None,
        })
        .collect();
    assert_eq!(
        states,
        vec![
            (1, CallState::Dispatched),
            (1, CallState::Done),
            (2, CallState::Dispatched),
            (2, CallState::Done),
        ],
        "dispatched before it runs, its result with the next write"
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_that_cannot_be_persisted_is_never_dispatched() {
    let src = files();
    let tb = toolbox(vec![src.clone()]);
    let mut m = Scripted::new(vec![
        calls(vec![
            call("a", "files__read_file", json!({"path": "/a"})),
            call("b", "files__read_file", json!({"path": "/b"})),
        ]),
        text("done"),
    ]);
    m.fail_persist_at = Some(2);
    let out = run_with(&tb, LoopLimits::default(), None, &mut m).await;
    assert!(matches!(out.end, LoopEnd::Stopped("store unwritable")));
    assert_eq!(src.calls().len(), 1, "the second call never went out");
}

#[tokio::test(start_paused = true)]
async fn calls_needing_approval_wait_and_a_denial_is_the_tool_s_result() {
    let src = files();
    let tb = toolbox(vec![src.clone()]);
    let mut m = Scripted::new(vec![
        calls(vec![
            call("a", "files__read_file", json!({"path": "/a"})),
            call("b", "files__read_file", json!({"path": "/b"})),
        ]),
        text("done"),
    ]);
    // Each wait is longer than the whole loop's timeout: waiting does not count toward it.
    m.verdicts.push_back((
        Duration::from_secs(600),
        Verdict::Approved {
            reason: Some("checked the path".into()),
            by: Some("ops@h (console)".into()),
        },
    ));
    m.verdicts.push_back((
        Duration::from_secs(600),
        Verdict::Denied {
            reason: "denied by an operator: not today".into(),
            by: Some("ops@h (cronsole deny)".into()),
        },
    ));
    let approve = vec![crate::model::ToolPattern::parse("files.*").unwrap()];
    let out = run_approving(
        &tb,
        LoopLimits::default(),
        Some(Duration::from_secs(300)),
        &approve,
        &mut m,
    )
    .await;
    assert!(matches!(out.end, LoopEnd::Answered { .. }), "{:?}", out.end);
    assert_eq!(m.asked, vec!["files.read_file", "files.read_file"]);
    assert_eq!(src.calls().len(), 1, "only the approved call went out");
    let sent = results(&m.seen[1]);
    assert!(!sent[0].2, "the approved call's result: {sent:?}");
    assert!(
        sent[1]
            .1
            .contains("not run: denied by an operator: not today")
            && sent[1].2,
        "the denial is the tool's result: {sent:?}"
    );
    let approvals: Vec<Option<Approval>> = out
        .transcript
        .to_vec()
        .into_iter()
        .filter_map(|e| match e {
            Entry::Call(c) => Some(c.approval),
            _ => None,
        })
        .collect();
    // Each call was persisted as awaiting approval with its wait, before its answer.
    let waited: Vec<(u64, CallState)> = m
        .persisted
        .iter()
        .filter_map(|d| match &d.entry {
            Entry::Call(c) if c.state == CallState::AwaitingApproval => Some((d.seq, c.state)),
            _ => None,
        })
        .collect();
    assert_eq!(waited.len(), 2, "{:?}", m.persisted);
    assert_eq!(
        out.transcript.counts(),
        (2, 2),
        "each call is on the record once"
    );
    assert_eq!(
        approvals,
        vec![
            Some(Approval::Approved {
                by: Some("ops@h (console)".into()),
                reason: Some("checked the path".into())
            }),
            Some(Approval::Denied {
                reason: "denied by an operator: not today".into(),
                by: Some("ops@h (cronsole deny)".into()),
            })
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn tools_outside_approve_never_wait() {
    let src = files();
    let tb = toolbox(vec![src.clone()]);
    let mut m = Scripted::new(vec![
        calls(vec![call("a", "files__read_file", json!({"path": "/a"}))]),
        text("done"),
    ]);
    let approve = vec![crate::model::ToolPattern::parse("other.*").unwrap()];
    let out = run_approving(&tb, LoopLimits::default(), None, &approve, &mut m).await;
    assert!(matches!(out.end, LoopEnd::Answered { .. }));
    assert!(m.asked.is_empty());
    assert_eq!(src.calls().len(), 1);
}

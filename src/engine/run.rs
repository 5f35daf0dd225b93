//! One run (SPEC §8), in order: budget → gate → prompt → action (with retries) → cost →
//! delivery and incidents → the history row and new per-job state for `complete`.
//!
//! Decisions where the SPEC is silent:
//! - The budget check (step 1) applies to agent jobs only: a `command` job never calls a model, so
//!   an exhausted budget does not stop it.
//! - Every attempt of either action is bounded by the job's `timeout_seconds`; a `command` is also
//!   bounded by its own `command_timeout_seconds` (whichever is shorter wins).
//! - A failed `command` attempt is retried like a failed model call (same backoff), because both
//!   are "the action" of SPEC §8 step 4. Model errors that cannot go away by retrying (missing key,
//!   bad URL, 429 hold) are not retried.
//! - `context_from` seeds agent prompts only; a `command` job ignores it.
//! - A monitor's new watermark is kept only when the run does not fail: a change whose action
//!   failed (model error, command exit ≠ 0) is seen again on the next tick and retried, instead
//!   of being consumed by a failed run. The failed row still carries the diff.
//!
//! Owns: the order of the pipeline and turning each step's outcome into a history row. Must not
//! touch: claiming, leases (the actor renews them around this future), the UI.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::broadcast;

use super::{Event, blocking};
use crate::action::command::{CommandOutcome, run_command};
use crate::action::llm::{self, AgentRun};
use crate::action::{BackoffConfig, retry_with_backoff};
use crate::clock::Clock;
use crate::cost::{self, PriceTable};
use crate::deliver::incident::{self, IncidentAction};
use crate::deliver::{Message, deliver_all};
use crate::gate::{self, GateConfig, GateOutcome, context, notepad};
use crate::model::{
    Action, HistoryRow, JobState, RESULT_MAX_CHARS, Settings, Status, truncate_marked,
};
use crate::store::{Claim, Store};

/// Environment lookup (API keys); tests inject a map instead of the process environment.
pub type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Shared, process-wide things a run needs (HTTP client, env lookup, tunables).
pub struct RunDeps {
    /// Shared by LLM calls and webhooks (the URL monitor builds its own hardened client).
    pub http: reqwest::Client,
    /// Environment lookup (API keys); tests inject a map.
    pub env: EnvLookup,
    pub backoff: BackoffConfig,
    pub gate: GateConfig,
}

impl RunDeps {
    /// Production dependencies: the process environment and the SPEC's default bounds.
    pub fn from_env() -> Result<RunDeps, llm::ClientError> {
        Ok(RunDeps {
            http: llm::http_client(&llm::HttpOptions::default())?,
            env: Arc::new(llm::process_env),
            backoff: BackoffConfig::default(),
            gate: GateConfig::default(),
        })
    }
}

/// Seconds from a job definition as a timer duration, never panicking: NaN, negative or absurd
/// values (the config bounds them; stores may hold older definitions) clamp to [1 ms, ~31 years].
pub fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.clamp(0.001, 1e9)).unwrap_or(Duration::from_secs(1_000_000_000))
}

/// What a finished pipeline hands to `complete`.
#[derive(Debug, Clone)]
pub struct RunOutput {
    pub row: HistoryRow,
    pub state: Option<JobState>,
    pub hold_until: Option<DateTime<Utc>>,
}

/// The state a run builds up as it goes.
struct Ctx<'a> {
    claim: &'a Claim,
    deps: &'a RunDeps,
    store: &'a Arc<dyn Store>,
    ev_tx: &'a broadcast::Sender<Event>,
    row: HistoryRow,
    state: JobState,
    state_dirty: bool,
    hold_until: Option<DateTime<Utc>>,
}

impl Ctx<'_> {
    fn finish(self) -> RunOutput {
        RunOutput {
            row: self.row,
            state: self.state_dirty.then_some(self.state),
            hold_until: self.hold_until,
        }
    }

    fn end(mut self, status: Status, reason: Option<String>, error: Option<String>) -> RunOutput {
        self.row.status = status;
        if reason.is_some() {
            self.row.reason = reason;
        }
        if error.is_some() {
            self.row.error = error;
        }
        self.finish()
    }
}

/// Run the pipeline for one claim. Never panics on outside input; every outcome is a row.
pub async fn execute(
    claim: &Claim,
    deps: &RunDeps,
    store: &Arc<dyn Store>,
    clock: &Arc<dyn Clock>,
    ev_tx: &broadcast::Sender<Event>,
    owner: &str,
) -> RunOutput {
    let def = &claim.job.def;
    let started = clock.now();
    let row = HistoryRow::new(
        &def.name,
        Status::Succeeded,
        claim.trigger,
        claim.slot,
        owner,
        started,
    );
    let mut cx = Ctx {
        claim,
        deps,
        store,
        ev_tx,
        row,
        state: claim.job.rt.state.clone(),
        state_dirty: false,
        hold_until: None,
    };
    let settings = match blocking(store, |s| s.settings()).await {
        Ok(s) => s,
        Err(e) => {
            return cx.end(
                Status::Failed,
                None,
                Some(format!("reading settings from the store: {e}")),
            );
        }
    };
    let workdir = settings
        .base_dir
        .as_deref()
        .map(std::path::PathBuf::from)
        .filter(|d| d.is_dir());
    let prior_monitor = cx.state.monitor.clone();
    // API-key variables never reach this job's commands, gates or monitors (issue 11 item 4).
    let scrub = crate::proc::scrub_list(
        settings.agents.values().map(|a| a.api_key_env.as_str()),
        &def.env_passthrough,
    );
    let out = match workdir {
        Some(dir) => {
            crate::proc::ENV_SCRUB
                .scope(
                    scrub,
                    crate::proc::WORKDIR.scope(dir, pipeline(&mut cx, &settings, clock)),
                )
                .await
        }
        None => {
            crate::proc::ENV_SCRUB
                .scope(scrub, pipeline(&mut cx, &settings, clock))
                .await
        }
    };
    match out {
        Step::Done => {}
        Step::End(status, reason, error) => {
            cx.row.status = status;
            if reason.is_some() {
                cx.row.reason = reason;
            }
            if error.is_some() {
                cx.row.error = error;
            }
        }
    }
    // A change the action could not act on (model or command failed) is not consumed: the
    // watermark stays where it was, so the next tick sees the change again and retries it.
    if cx.row.status == Status::Failed && cx.state.monitor != prior_monitor {
        cx.state.monitor = prior_monitor;
    }
    incidents(&mut cx, &settings, clock).await;
    cx.finish()
}

/// How the pipeline stopped: ran to the end (row already filled), or ended early.
enum Step {
    Done,
    End(Status, Option<String>, Option<String>),
}

async fn pipeline(cx: &mut Ctx<'_>, settings: &Settings, clock: &Arc<dyn Clock>) -> Step {
    let def = &cx.claim.job.def;
    // 0. An agent job with nothing to say.
    if let Action::Agent { message, .. } = &def.action
        && message.trim().is_empty()
    {
        return Step::End(Status::Skipped, Some("no message".into()), None);
    }
    // 1. Budget, before anything that could lead to a model call.
    if matches!(def.action, Action::Agent { .. }) {
        let (name, now) = (def.name.clone(), clock.now());
        match blocking(cx.store, move |s| s.spend(&name, now)).await {
            Ok(spend) => {
                if let Some(reason) = cost::budget_check(settings, def.max_cost_usd, spend) {
                    return Step::End(Status::Skipped, Some(reason), None);
                }
            }
            Err(e) => {
                return Step::End(
                    Status::Failed,
                    None,
                    Some(format!("budget check: reading spend: {e}")),
                );
            }
        }
    }
    // 2. Gate.
    let mut gate_context = None;
    if let Some(g) = &def.gate {
        match gate::run_gate(g, cx.state.monitor.as_ref(), &cx.deps.gate).await {
            GateOutcome::Go {
                context,
                diff,
                monitor,
            } => {
                if let Some(m) = monitor {
                    cx.state.monitor = Some(m);
                    cx.state_dirty = true;
                }
                cx.row.diff = diff;
                gate_context = context;
            }
            GateOutcome::NoChange => {
                return Step::End(Status::NoChange, Some("source unchanged".into()), None);
            }
            GateOutcome::Skip { reason } => return Step::End(Status::Skipped, Some(reason), None),
            GateOutcome::Fail { error } => {
                return Step::End(Status::Failed, Some("probe failed".into()), Some(error));
            }
        }
    }
    // 3 + 4. Prompt and action.
    let attempt_timeout = secs(def.timeout_seconds);
    match &def.action {
        Action::Command {
            command,
            timeout_seconds,
        } => {
            let t = attempt_timeout.min(secs(*timeout_seconds));
            let r = retry_with_backoff(
                &cx.deps.backoff,
                def.max_retries.max(1),
                |_| async move {
                    match run_command(command, t).await {
                        CommandOutcome::Succeeded { stdout } => Ok(stdout),
                        CommandOutcome::Failed { error, .. } => Err(error),
                    }
                },
                |_| true,
            )
            .await;
            cx.row.attempts = r.attempts;
            match r.result {
                Ok(stdout) => {
                    cx.row.result = Some(truncate_marked(&stdout, RESULT_MAX_CHARS));
                    deliver(cx, settings, clock).await;
                    Step::Done
                }
                Err(error) => Step::End(Status::Failed, None, Some(error)),
            }
        }
        Action::Agent { agent, message } => {
            let Some(agent_def) = settings.agents.get(agent) else {
                return Step::End(
                    Status::Failed,
                    None,
                    Some(format!(
                        "agent '{agent}' is not defined in the store's settings (apply the jobs file)"
                    )),
                );
            };
            let prompt = match assemble(cx, message, gate_context.as_deref()).await {
                Ok(p) => p,
                Err(step) => return step,
            };
            cx.row.model = Some(agent_def.model.clone());
            let prices = PriceTable::from_settings(settings);
            let env = Arc::clone(&cx.deps.env);
            // Attempts one at a time so the budget is checked before every model call, retries
            // included (SPEC §11): other jobs may spend the rest of the budget during a backoff.
            let max_attempts = def.max_retries.max(1);
            let mut attempts = 0u32;
            let out = loop {
                let run = AgentRun {
                    agent: agent_def,
                    prompt: &prompt,
                    timeout: attempt_timeout,
                    max_attempts: 1,
                    backoff: cx.deps.backoff,
                };
                let out =
                    llm::run_agent(&cx.deps.http, &run, &prices, clock.as_ref(), &|k| env(k)).await;
                attempts += 1;
                let retry =
                    matches!(&out.result, Err(e) if e.is_retryable()) && attempts < max_attempts;
                if !retry {
                    break out;
                }
                tokio::time::sleep(
                    cx.deps
                        .backoff
                        .delay(attempts - 1, crate::action::jitter_unit()),
                )
                .await;
                let (name, now) = (def.name.clone(), clock.now());
                if let Ok(spend) = blocking(cx.store, move |s| s.spend(&name, now)).await
                    && let Some(reason) = cost::budget_check(settings, def.max_cost_usd, spend)
                {
                    cx.row.attempts = attempts;
                    let last = out.result.err().map(|e| e.to_string());
                    return Step::End(
                        Status::Skipped,
                        Some(format!("{reason} (before retry {})", attempts + 1)),
                        last,
                    );
                }
            };
            let out = llm::AgentOutcome { attempts, ..out };
            cx.row.attempts = out.attempts;
            let reply = match out.result {
                Ok(reply) => reply,
                Err(e) => {
                    if let Some(h) = out.hold_until {
                        cx.hold_until = Some(h);
                        let reason = format!(
                            "rate limited: job held until {}",
                            h.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                        );
                        return Step::End(Status::Failed, Some(reason), Some(e.to_string()));
                    }
                    return Step::End(Status::Failed, None, Some(e.to_string()));
                }
            };
            // 5. Cost.
            let c = out.cost;
            cx.row.model = Some(reply.model.clone());
            cx.row.input_tokens = c.input_tokens;
            cx.row.output_tokens = c.output_tokens;
            cx.row.cost_usd = c.cost_usd;
            cx.row.unpriced = c.unpriced;
            if c.unpriced {
                cx.row.reason = c.reason;
            }
            // Notepad updates from a trailing block; the block is never delivered.
            let (text, updates) = notepad::parse_reply(&reply.text);
            if let Some(u) = updates {
                match notepad::apply_updates(&cx.state, &u) {
                    Ok(next) => {
                        cx.state.notepad = next.notepad;
                        cx.state_dirty = true;
                    }
                    Err(e) => {
                        let note = format!("notepad update rejected: {e}");
                        cx.row.reason = Some(match cx.row.reason.take() {
                            Some(r) => format!("{r}; {note}"),
                            None => note,
                        });
                    }
                }
            }
            cx.row.result = Some(truncate_marked(&text, RESULT_MAX_CHARS));
            if out.silent {
                cx.row.reason = Some("model replied silence; nothing delivered".into());
                return Step::Done;
            }
            deliver(cx, settings, clock).await;
            Step::Done
        }
    }
}

/// SPEC §8 step 3: notepad + message + gate context + `context_from` blocks.
async fn assemble(
    cx: &mut Ctx<'_>,
    message: &str,
    gate_context: Option<&str>,
) -> Result<String, Step> {
    let def = &cx.claim.job.def;
    let mut latest = BTreeMap::new();
    for name in &def.context_from {
        let n = name.clone();
        match blocking(cx.store, move |s| s.job(&n)).await {
            Ok(Some(j)) => {
                if let Some(r) = j.rt.last_success_result {
                    latest.insert(name.clone(), r);
                }
            }
            Ok(None) => {}
            Err(e) => {
                return Err(Step::End(
                    Status::Failed,
                    None,
                    Some(format!("reading context from '{name}': {e}")),
                ));
            }
        }
    }
    let blocks = match context::decide(
        &def.context_from,
        &latest,
        def.context_max_chars,
        def.on_missing_context,
    ) {
        context::ContextDecision::Run { blocks, .. } => blocks,
        context::ContextDecision::Skip { reason } => {
            return Err(Step::End(Status::Skipped, Some(reason), None));
        }
    };
    Ok(context::assemble_prompt(
        &cx.state,
        message,
        gate_context,
        &blocks,
    ))
}

/// How long one sink may take.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(15);

/// SPEC §12.1: deliver a succeeded run's result to the job's sinks. Never fails the run: the row
/// keeps `succeeded` with `delivered: false` and `delivery_error`.
async fn deliver(cx: &mut Ctx<'_>, settings: &Settings, clock: &Arc<dyn Clock>) {
    let names = &cx.claim.job.def.deliver;
    if names.is_empty() {
        return;
    }
    let msg = Message::result(&cx.row);
    let report = deliver_all(
        &cx.deps.http,
        &settings.delivery,
        names,
        &msg,
        DELIVERY_TIMEOUT,
        clock.now(),
    )
    .await;
    cx.row.delivered = report.delivered;
    cx.row.delivery_error = report.error;
    for sink in report.ok {
        let _ = cx.ev_tx.send(Event::Delivered {
            job: cx.row.job.clone(),
            sink,
            text: msg.text.clone(),
        });
    }
}

/// SPEC §12.2: alert once per incident signature, one recovery note. The incident state is
/// committed only as far as the delivery went (the decision carries both outcomes).
async fn incidents(cx: &mut Ctx<'_>, settings: &Settings, clock: &Arc<dyn Clock>) {
    let def = &cx.claim.job.def;
    let error = cx.row.error.as_deref().or(cx.row.reason.as_deref());
    let d = incident::decide(
        &cx.state.incident,
        cx.row.status,
        error,
        def.alert_after_failures,
    );
    let msg = match &d.action {
        IncidentAction::Nothing => None,
        IncidentAction::Alert {
            consecutive_failures,
            ..
        } => Some(Message::alert(&cx.row, *consecutive_failures)),
        IncidentAction::Recovery => Some(Message::recovery(&cx.row)),
    };
    let next = match msg {
        None => d.on_delivered,
        Some(_) if def.deliver.is_empty() => d.on_delivered,
        Some(msg) => {
            let report = deliver_all(
                &cx.deps.http,
                &settings.delivery,
                &def.deliver,
                &msg,
                DELIVERY_TIMEOUT,
                clock.now(),
            )
            .await;
            for sink in &report.ok {
                let _ = cx.ev_tx.send(Event::Delivered {
                    job: cx.row.job.clone(),
                    sink: sink.clone(),
                    text: msg.text.clone(),
                });
            }
            if report.delivered {
                d.on_delivered
            } else {
                if let Some(e) = report.error {
                    cx.row.delivery_error = Some(match cx.row.delivery_error.take() {
                        Some(prev) => format!("{prev}; {} {e}", msg.kind.as_str()),
                        None => format!("{}: {e}", msg.kind.as_str()),
                    });
                }
                d.on_undelivered
            }
        }
    };
    if next != cx.state.incident {
        cx.state.incident = next;
        cx.state_dirty = true;
    }
}

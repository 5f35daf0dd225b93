//! One run, one function per step, in order (the cheap checks before anything runs or spends):
//! `step1_budget` → `step2_gate` → `step3_prompt` → `step4_command` / `step4_agent` (the one retry
//! loop, its budget reservation as the before-attempt hook) → `step5_cost` → `step6_deliver` +
//! `incidents` → the history row and new per-job state handed to `complete` (step 7).
//!
//! Decisions:
//! - The budget check (step 1) applies to agent jobs only: a `command` job never calls a model, so
//!   an exhausted budget does not stop it. Step 1 is the cheap early exit (spend already at the
//!   limit); the hard limit is the per-call reservation of step 4 (`store::budget`).
//! - A budget applies to a job when the global `budget:` is set or the job has `max_cost_usd`.
//!   Then every request carries an output bound (the agent's `max_tokens`, else 4096), its worst
//!   case is reserved before the call (`cost::worst_case_usd`), and a model the price table does
//!   not know fails the run before any request (the error names the `pricing:` line to add).
//! - When a budget stops a call, the job's sinks get one alert per budget period (`budget
//!   reached: …`); the stop is kept in the job state (`JobState::budget_stop`) so every owner and
//!   the console see it, and the alert is marked sent only once a sink took it (or the job has
//!   no sinks).
//! - An attempt whose outcome is unknown (it reached the model, no readable reply came back) is
//!   booked by its run's row at its worst case, however the run ends: added to a later
//!   success's cost, as the cost of a run whose retries ran out, and as the cost of a run a
//!   budget stopped before a retry — which is then `failed` (the action ran and failed); after
//!   attempts that surely cost nothing a budget stop stays `skipped`. One rule
//!   (`book_unknown`): the reservations settle to their worst case and leave with the row, and
//!   the row's reason says so. A run that loses its lease or its store leaves them spent.
//! - Every attempt of either action is bounded by the job's `timeout_seconds`; a `command` is also
//!   bounded by its own `command_timeout_seconds` (whichever is shorter wins).
//! - A failed `command` attempt is retried like a failed model call (same backoff), because both
//!   are the run's action (step 4). Model errors that cannot go away by retrying (missing key,
//!   bad URL, 429 hold) are not retried.
//! - `context_from` seeds agent prompts only; a `command` job ignores it.
//! - A monitor's new watermark is kept only when the action ran: a change whose action failed
//!   (model error, command exit ≠ 0) or was stopped after the gate (a budget, a missing context)
//!   is seen again on the next tick, instead of being consumed by a run that did not act on it.
//!   The row still carries the diff.
//! - Secrets: every configured API-key value (each agent's `api_key_env` value, ≥ 8 characters)
//!   and every value a tool source receives (`env_from`, `headers_env`) is redacted from the
//!   command output, the reply, the model's tool-call arguments, every error, reason and diff,
//!   and the notepad *before* any truncation, before anything is stored and before delivery
//!   (`text::Secrets`).
//! - The result is capped at exactly `RESULT_MAX_CHARS` characters, the `…[truncated]` mark
//!   included.
//! - A run cancelled at shutdown keeps its attempts and last error ([`Progress`]): the
//!   `abandoned` row says how far it got. A run stopped (a shutdown, a lease it could not renew)
//!   after its action ended is recorded with that end instead, its delivery said cut short: the
//!   action's effects happened, and an `abandoned` one-shot would run again.
//!
//! Owns: the order of the pipeline and turning each step's outcome into a history row. Must not
//! touch: claiming, leases (the actor renews them around this future), the UI.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::broadcast;
use uuid::Uuid;

use super::{Event, blocking};
use crate::action::command::{CommandOutcome, run_command};
use crate::action::llm;
use crate::action::tools::ToolboxBuilder;
use crate::action::{BackoffConfig, Ended, retry_with_hook};
use crate::clock::Clock;
use crate::cost;
use crate::deliver::incident::{self, IncidentAction};
use crate::deliver::{Message, deliver_all};
use crate::gate::{self, GateConfig, GateOutcome, context, notepad};
use crate::model::{
    Action, Attempt, BudgetStop, HistoryRow, JobState, RESULT_MAX_CHARS, Settings, Status,
    truncate_marked,
};
use crate::proc::ProcEnv;
use crate::store::{Claim, Store, StoreError};
use crate::text::Secrets;

mod agent;
mod approval;
mod progress;

use progress::Cut;
pub use progress::{Progress, RunOutput};

/// Environment lookup (API keys); tests inject a map instead of the process environment.
pub type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Shared, process-wide things a run needs (HTTP client, env lookup, tunables).
pub struct RunDeps {
    /// Shared by LLM calls and webhooks (the URL monitor builds its own hardened client).
    pub http: reqwest::Client,
    /// Environment lookup (API keys); tests inject a map.
    pub env: EnvLookup,
    /// Backoff between a run's attempts, so a failing server or command is not hammered.
    pub backoff: BackoffConfig,
    /// Bounds of the gates (`pre_run`, monitor probes).
    pub gate: GateConfig,
    /// Builds each agent run's tools before its first model call.
    pub tools: Arc<dyn ToolboxBuilder>,
}

impl RunDeps {
    /// Production dependencies: the process environment and the documented default bounds.
    pub fn from_env() -> Result<RunDeps, llm::ClientError> {
        Ok(RunDeps {
            http: llm::http_client(&llm::HttpOptions::default())?,
            env: Arc::new(llm::process_env),
            backoff: BackoffConfig::default(),
            gate: GateConfig::default(),
            tools: Arc::new(crate::action::tools::toolbox::Sources::from_env()),
        })
    }
}

/// Seconds from a job definition as a timer duration, never panicking: NaN, negative or absurd
/// values (the config bounds them; stores may hold older definitions) clamp to [1 ms, ~31 years].
pub fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.clamp(0.001, 1e9)).unwrap_or(Duration::from_secs(1_000_000_000))
}

/// The result cap: at most [`RESULT_MAX_CHARS`] characters, the cut mark included.
pub(crate) fn cap_result(s: &str) -> String {
    const MARK_CHARS: usize = "…[truncated]".len() - 2; // '…' is 3 bytes, 1 char
    if s.chars().nth(RESULT_MAX_CHARS).is_none() {
        return s.to_string();
    }
    truncate_marked(s, RESULT_MAX_CHARS - MARK_CHARS)
}

/// A step that ended the run early: status, reason, error.
struct End(Status, Option<String>, Option<String>);

type Flow<T> = Result<T, End>;

/// The state a run builds up as it goes.
struct Ctx<'a> {
    claim: &'a Claim,
    deps: &'a RunDeps,
    store: &'a Arc<dyn Store>,
    clock: &'a Arc<dyn Clock>,
    ev_tx: &'a broadcast::Sender<Event>,
    owner: &'a str,
    settings: Arc<Settings>,
    secrets: Secrets,
    progress: Progress,
    row: HistoryRow,
    state: JobState,
    state_dirty: bool,
    hold_until: Option<DateTime<Utc>>,
    /// A budget stopped a call and this period's alert is still owed.
    budget_alert: Option<String>,
    /// Where this run's commands, gates and monitors run.
    proc_env: ProcEnv,
}

impl Ctx<'_> {
    fn redact(&self, s: &str) -> String {
        self.secrets.redact(s).into_owned()
    }

    /// The action has ended: what the run is recorded as if its pipeline is stopped from now
    /// on ([`Progress::ended`]). `before_delivery`: the result is still to be sent.
    fn action_ended(&mut self, before_delivery: bool) {
        self.redact_all();
        let has_sinks = !self.claim.job.def.deliver.is_empty();
        let mut state = self.state.clone();
        let mut dirty = self.state_dirty;
        // The incident step may not come: the failure is counted as if its alert failed (it
        // stays owed), as `incidents` would commit it.
        let d = self.incident_decision();
        let alert_due = has_sinks && !matches!(d.action, IncidentAction::Nothing);
        let next = if alert_due {
            d.on_undelivered
        } else {
            d.on_delivered
        };
        if next != state.incident {
            state.incident = next;
            dirty = true;
        }
        let cut = if !has_sinks {
            None
        } else if before_delivery {
            Some(Cut::Result)
        } else if alert_due || self.budget_alert.is_some() {
            Some(Cut::Alert)
        } else {
            None
        };
        let out = RunOutput {
            row: self.row.clone(),
            state: dirty.then_some(state),
            hold_until: self.hold_until,
        };
        self.progress.action_ended(out, cut);
    }

    /// What the incident step decides for the row as it is now.
    fn incident_decision(&self) -> incident::Decision {
        let def = &self.claim.job.def;
        let error = self.row.error.as_deref().or(self.row.reason.as_deref());
        incident::decide(
            &self.state.incident,
            self.row.status,
            error,
            def.alert_after_failures,
        )
    }

    fn finish(self) -> RunOutput {
        RunOutput {
            row: self.row,
            state: self.state_dirty.then_some(self.state),
            hold_until: self.hold_until,
        }
    }

    fn apply(&mut self, End(status, reason, error): End) {
        self.row.status = status;
        if reason.is_some() {
            self.row.reason = reason;
        }
        if error.is_some() {
            self.row.error = error;
        }
    }

    /// Every text of the row and the notepad, once more through the redactor (the steps redact
    /// as text enters; this catches anything composed later).
    fn redact_all(&mut self) {
        let s = &self.secrets;
        if s.is_empty() {
            return;
        }
        for f in [
            &mut self.row.result,
            &mut self.row.error,
            &mut self.row.reason,
            &mut self.row.diff,
            &mut self.row.delivery_error,
            &mut self.row.model,
        ] {
            s.redact_opt(f);
        }
        for v in self.state.notepad.values_mut() {
            if let std::borrow::Cow::Owned(o) = s.redact(v) {
                *v = o;
                self.state_dirty = true;
            }
        }
        // The monitor's saved preview is stored and printed (`jobs --json`, the diff's "before"
        // side): a key the probed output showed must not be kept there either. The hash stays
        // that of the real output, so change detection is unaffected.
        if let Some(m) = self.state.monitor.as_mut()
            && let std::borrow::Cow::Owned(o) = s.redact(&m.preview)
        {
            m.preview = o;
            self.state_dirty = true;
        }
    }
}

/// The configured key values (each agent's `api_key_env` value) to keep out of every output,
/// the values every tool source receives as secrets (`env_from`, `headers_env`), and the
/// tokens a configured URL may carry in its path or query (agents' `base_url`, webhooks, MCP
/// servers' `url`; `text::url_tokens`): a server that echoes its request URL in an error body
/// must not put them in a row either.
///
/// Tool secrets are in the set of every run, whatever it is offered: a model that read one
/// in a tool's output may repeat it in its reply or in a later call's arguments, and a value
/// redacted in more places than needed costs nothing. A header value such as `Bearer TOKEN`
/// also contributes its last word, the part a model is likely to repeat alone, and a `Basic`
/// one what it encodes (the password, decoded, is what a server checks and may echo).
pub(crate) fn secrets_of(settings: &Settings, env: &EnvLookup) -> Secrets {
    let keys = settings.agents.values().filter_map(|a| env(&a.api_key_env));
    let tool_values: Vec<String> = settings
        .tools
        .secret_sources()
        .into_iter()
        .filter_map(|var| env(var))
        .flat_map(|v| {
            let last = v
                .split_whitespace()
                .last()
                .filter(|w| w.len() < v.trim().len());
            let last = last.map(str::to_string);
            let inside = crate::action::tools::toolbox::header_credentials(&v);
            std::iter::once(v).chain(last).chain(inside)
        })
        .collect();
    let keys = keys.chain(tool_values);
    let servers = settings
        .tools
        .mcp_servers
        .values()
        .filter_map(|s| match &s.transport {
            crate::model::McpTransport::Http { url, .. } => Some(url.as_str()),
            crate::model::McpTransport::Stdio { .. } => None,
        });
    let urls = settings
        .agents
        .values()
        .map(|a| a.base_url.as_str())
        .chain(settings.delivery.values().filter_map(|d| match d {
            crate::model::SinkDef::Webhook { url, .. } => Some(url.as_str()),
            crate::model::SinkDef::File { .. } => None,
        }))
        .chain(servers);
    Secrets::new(keys.chain(urls.flat_map(crate::text::url_tokens)))
}

/// [`secrets_of`] plus the tokens of the job's own monitor URL.
fn run_secrets(settings: &Settings, def: &crate::model::JobDef, env: &EnvLookup) -> Secrets {
    let base = secrets_of(settings, env);
    match &def.gate {
        Some(crate::model::Gate::Monitor {
            source: crate::model::MonitorSource::Url { url, .. },
        }) => base.with(crate::text::url_tokens(url)),
        _ => base,
    }
}

/// The store's settings for a run that was just claimed. A retryable error (database restarting,
/// disk briefly full, lock held) is retried with backoff (50 ms doubling to 2 s) for up to the
/// job's lease: a few seconds of outage must not turn a claimed slot into a `failed` row whose
/// command never ran (a PostgreSQL restart under load would otherwise leave such rows). Past the
/// lease another owner may recover the slot anyway, so the run then fails with the last error.
async fn read_settings(store: &Arc<dyn Store>, lease: Duration) -> Result<Settings, StoreError> {
    let deadline = tokio::time::Instant::now() + lease.max(Duration::from_secs(1));
    let mut pause = Duration::from_millis(50);
    loop {
        match crate::store::blocking(store, |s| s.settings()).await {
            Err(e) if e.is_retryable() && tokio::time::Instant::now() + pause < deadline => {
                tracing::debug!(error = %e, "reading settings for a run; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
            r => return r,
        }
    }
}

/// Run the pipeline for one claim. Never panics on outside input; every outcome is a row.
/// `progress` is updated after every attempt, so a caller that drops this future (shutdown)
/// can still say how far the run got. `claimed_settings` are the store's settings read with the
/// claim (one read for a whole claim batch); `None` reads them here, with retries.
#[allow(clippy::too_many_arguments)]
pub async fn execute(
    claim: &Claim,
    claimed_settings: Option<Arc<Settings>>,
    deps: &RunDeps,
    store: &Arc<dyn Store>,
    clock: &Arc<dyn Clock>,
    ev_tx: &broadcast::Sender<Event>,
    owner: &str,
    progress: &Progress,
) -> RunOutput {
    let def = &claim.job.def;
    let mut row = HistoryRow::new(
        &def.name,
        Status::Succeeded,
        claim.trigger,
        claim.slot,
        owner,
        clock.now(),
    );
    // The claim's run id from the start: what sinks receive names the row `history` shows.
    row.run_id = claim.run_id;
    let chain = claim
        .job
        .rt
        .lease
        .as_ref()
        .map(|l| l.chain.clone())
        .unwrap_or_default();
    if let Some(p) = crate::store::policy::chain::releaser(&chain) {
        row.parent_job = Some(p.job.clone());
        row.parent_run_id = Some(p.run_id);
    }
    let settings = match claimed_settings {
        Some(s) => Ok(s),
        None => read_settings(store, secs(def.lease_seconds))
            .await
            .map(Arc::new),
    };
    let settings = match settings {
        Ok(s) => s,
        Err(e) => {
            let mut row = row;
            row.status = Status::Failed;
            row.error = Some(format!("reading settings from the store: {e}"));
            return RunOutput {
                row,
                state: None,
                hold_until: None,
            };
        }
    };
    let mut proc_env = proc_env_of(&settings, def);
    // A chained run's commands see their parent (`engine::chain`).
    proc_env.extra = super::chain::parent_env(&chain);
    let mut cx = Ctx {
        claim,
        deps,
        store,
        clock,
        ev_tx,
        owner,
        secrets: run_secrets(&settings, def, &deps.env),
        settings,
        progress: progress.clone(),
        row,
        state: claim.job.rt.state.clone(),
        state_dirty: false,
        hold_until: None,
        budget_alert: None,
        proc_env,
    };
    let prior_monitor = cx.state.monitor.clone();
    if let Err(end) = steps(&mut cx).await {
        cx.apply(end);
    }
    cx.redact_all();
    // A change the action could not act on (model or command failed, a budget or a missing
    // context stopped it after the gate) is not consumed: the watermark stays where it was, so
    // the next tick sees the change again.
    if matches!(cx.row.status, Status::Failed | Status::Skipped)
        && cx.state.monitor != prior_monitor
    {
        cx.state.monitor = prior_monitor;
    }
    cx.action_ended(false);
    budget_alert(&mut cx).await;
    incidents(&mut cx).await;
    cx.finish()
}

/// Where one run's commands start: the jobs file's directory; every API-key variable removed but
/// the job's `env_passthrough` (a command sees no key it was not given); and a dead-man switch of
/// half the lease, so that if this process stops sending heartbeats (SIGSTOP, a hang) the
/// supervisor kills them before the lease can expire and another owner can start the job again.
pub fn proc_env_of(settings: &Settings, def: &crate::model::JobDef) -> ProcEnv {
    ProcEnv {
        workdir: settings
            .base_dir
            .as_deref()
            .map(std::path::PathBuf::from)
            .filter(|d| d.is_dir()),
        scrub: crate::proc::scrub_list(
            settings.agents.values().map(|a| a.api_key_env.as_str()),
            &def.env_passthrough,
        ),
        stall_limit: Some(secs(def.lease_seconds / 2.0).max(Duration::from_secs(1))),
        extra: Vec::new(),
    }
}

/// Steps 1–6 in order: budget, gate, prompt, action, cost, delivery.
async fn steps(cx: &mut Ctx<'_>) -> Flow<()> {
    let def = &cx.claim.job.def;
    if let Action::Agent { message, .. } = &def.action
        && message.trim().is_empty()
    {
        return Err(End(Status::Skipped, Some("no message".into()), None));
    }
    step1_budget(cx).await?;
    let gate_context = step2_gate(cx).await?;
    match &def.action {
        Action::Command {
            command,
            timeout_seconds,
        } => {
            let stdout = step4_command(cx, command, *timeout_seconds).await?;
            cx.row.result = Some(cap_result(&cx.redact(&stdout)));
            cx.action_ended(true);
            step6_deliver(cx).await;
        }
        Action::Agent { agent, message, .. } => {
            let Some(agent_def) = cx.settings.agents.get(agent).cloned() else {
                return Err(End(
                    Status::Failed,
                    None,
                    Some(format!(
                        "agent '{agent}' is not defined in the store's settings (apply the jobs file)"
                    )),
                ));
            };
            let prompt = step3_prompt(cx, message, gate_context.as_deref()).await?;
            let answer = agent::step4_agent(cx, &agent_def, &prompt).await?;
            let silent = step5_cost(cx, answer);
            if silent {
                cx.row.reason = Some("model replied silence; nothing delivered".into());
            } else {
                cx.action_ended(true);
                step6_deliver(cx).await;
            }
        }
    }
    Ok(())
}

/// Step 1: an agent job whose budget is already spent is skipped before anything else.
async fn step1_budget(cx: &mut Ctx<'_>) -> Flow<()> {
    let def = &cx.claim.job.def;
    if !matches!(def.action, Action::Agent { .. }) {
        return Ok(());
    }
    let (name, now) = (def.name.clone(), cx.clock.now());
    let spend = blocking(cx.store, move |s| s.spend(&name, now))
        .await
        .map_err(|e| {
            End(
                Status::Failed,
                None,
                Some(format!("budget check: reading spend: {e}")),
            )
        })?;
    match cost::budget_check(&cx.settings, def.max_cost_usd, spend) {
        Some(reason) => Err(budget_stopped(cx, reason)),
        None => Ok(()),
    }
}

/// A budget stopped a call: `skipped`, and this period's alert owed unless already sent.
fn budget_stopped(cx: &mut Ctx<'_>, reason: String) -> End {
    let key = crate::cost::budget_period(&cx.settings).key(cx.clock.now());
    let sent = cx
        .state
        .budget_stop
        .as_ref()
        .is_some_and(|b| b.period_key == key && b.alerted);
    if !sent {
        cx.state.budget_stop = Some(BudgetStop {
            period_key: key,
            reason: truncate_marked(&reason, 300),
            at: cx.clock.now(),
            alerted: false,
        });
        cx.state_dirty = true;
        cx.budget_alert = Some(reason.clone());
    }
    End(Status::Skipped, Some(reason), None)
}

/// Step 2: the gate. `Ok(context)` = go (with the gate's context for the prompt).
async fn step2_gate(cx: &mut Ctx<'_>) -> Flow<Option<String>> {
    let Some(g) = &cx.claim.job.def.gate else {
        return Ok(None);
    };
    match gate::run_gate(g, cx.state.monitor.as_ref(), &cx.deps.gate, &cx.proc_env).await {
        GateOutcome::Go {
            context,
            diff,
            monitor,
        } => {
            if let Some(m) = monitor {
                cx.state.monitor = Some(m);
                cx.state_dirty = true;
            }
            cx.row.diff = diff.map(|d| cx.redact(&d));
            Ok(context)
        }
        GateOutcome::NoChange => Err(End(Status::NoChange, Some("source unchanged".into()), None)),
        GateOutcome::Skip { reason } => Err(End(Status::Skipped, Some(cx.redact(&reason)), None)),
        GateOutcome::Fail { error } => Err(End(
            Status::Failed,
            Some("probe failed".into()),
            Some(cx.redact(&error)),
        )),
    }
}

/// Step 3: notepad + message + gate context + `context_from` blocks.
async fn step3_prompt(cx: &mut Ctx<'_>, message: &str, gate_context: Option<&str>) -> Flow<String> {
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
                return Err(End(
                    Status::Failed,
                    None,
                    Some(format!("reading context from '{name}': {e}")),
                ));
            }
        }
    }
    // A chained run's parents: the same blocks as `context_from` (`engine::chain`).
    let chain = cx
        .claim
        .job
        .rt
        .lease
        .as_ref()
        .map(|l| l.chain.as_slice())
        .unwrap_or_default();
    let parent_blocks = super::chain::fold_into_context(
        chain,
        &def.context_from,
        &mut latest,
        def.context_max_chars,
    );
    let blocks = match context::decide(
        &def.context_from,
        &latest,
        def.context_max_chars,
        def.on_missing_context,
    ) {
        context::ContextDecision::Run { mut blocks, .. } => {
            blocks.extend(parent_blocks);
            blocks
        }
        context::ContextDecision::Skip { reason } => {
            return Err(End(Status::Skipped, Some(reason), None));
        }
    };
    Ok(context::assemble_prompt(
        &cx.state,
        message,
        gate_context,
        &blocks,
    ))
}

/// Step 4 for a `command` job: attempts with backoff; `Ok(stdout)`. Before a retry the run must
/// still hold its lease ([`lease_still_held`]).
async fn step4_command(cx: &mut Ctx<'_>, command: &str, timeout_seconds: f64) -> Flow<String> {
    let t = secs(cx.claim.job.def.timeout_seconds).min(secs(timeout_seconds));
    let progress = &cx.progress;
    let (secrets, clock, store) = (&cx.secrets, cx.clock, cx.store);
    let (job, run_id) = (&cx.claim.job.def.name, cx.claim.run_id);
    let env = &cx.proc_env;
    let h = retry_with_hook(
        &cx.deps.backoff,
        cx.claim.job.def.max_retries.max(1),
        None,
        |attempt| lease_still_held(store, clock, job, run_id, attempt),
        |_, ()| async move {
            let started = clock.now();
            let out = match run_command(command, t, env).await {
                CommandOutcome::Succeeded { stdout } => Ok(stdout),
                CommandOutcome::Failed { error, .. } => Err(secrets.redact(&error).into_owned()),
            };
            let error = out.as_ref().err().cloned();
            progress.attempted(Attempt::new(started, clock.now(), None), error);
            out
        },
        |_| true,
    )
    .await;
    cx.row.attempts = h.attempts;
    cx.row.attempt_log = progress.log();
    match h.ended {
        Ended::Done(r) => r.map_err(|e| End(Status::Failed, None, Some(e))),
        Ended::Stopped { stop, last } => Err(End(Status::Failed, Some(stop), last)),
    }
}

/// Before a retry (`attempt` > 0) the run must still hold its lease. An owner stopped past its
/// lease (`SIGSTOP`) comes back to an attempt its dead-man switch killed; by then another owner may
/// have recovered the slot (recorded it `abandoned` and run it, or retired a one-shot), so a retry
/// would execute the job a second time (a `once` job could run three times). A renewal answering
/// `Lost` ends the loop: the row is `failed` with the last attempt's error and says why it was not
/// retried. A renewal that fails (store unreachable) does not: the lease may still be ours, and no
/// other owner can take it over through an unreachable store either.
async fn lease_still_held(
    store: &Arc<dyn Store>,
    clock: &Arc<dyn Clock>,
    job: &str,
    run_id: Uuid,
    attempt: u32,
) -> Result<(), String> {
    if attempt == 0 {
        return Ok(());
    }
    let now = clock.now();
    let j = job.to_string();
    match blocking(store, move |s| s.renew(&j, run_id, now)).await {
        Ok(crate::store::RenewOutcome::Lost) => Err(format!(
            "not retried: the lease was lost before attempt {} (another owner took the run over)",
            attempt + 1
        )),
        Ok(crate::store::RenewOutcome::Renewed { .. }) | Err(_) => Ok(()),
    }
}

/// `first; then`, or `then` alone.
fn join_reason(first: Option<String>, then: String) -> String {
    match first {
        Some(r) => format!("{r}; {then}"),
        None => then,
    }
}

/// Step 5: the reply's cost on the row, its notepad block applied, its text (redacted, then
/// capped) as the result. Returns whether the model replied silence.
fn step5_cost(cx: &mut Ctx<'_>, answer: agent::Answer) -> bool {
    let agent::Answer {
        text,
        model,
        cost: c,
        cut,
    } = answer;
    cx.row.model = Some(model);
    cx.row.input_tokens = c.input_tokens;
    cx.row.output_tokens = c.output_tokens;
    cx.row.cost_usd = c.cost_usd;
    cx.row.unpriced = c.unpriced;
    if c.reason.is_some() {
        cx.row.reason = c.reason;
    }
    if cut {
        let note = "the answer was cut at its token limit".to_string();
        cx.row.reason = Some(join_reason(cx.row.reason.take(), note));
    }
    let text = cx.redact(&text);
    let silent = llm::is_silent(&text);
    // Notepad updates from a trailing block; the block is never delivered.
    let (text, updates) = notepad::parse_reply(&text);
    if let Some(u) = updates {
        match notepad::apply_updates(&cx.state, &u) {
            Ok(next) => {
                cx.state.notepad = next.notepad;
                cx.state_dirty = true;
            }
            Err(e) => {
                let note = e.to_string();
                cx.row.reason = Some(match cx.row.reason.take() {
                    Some(r) => format!("{r}; {note}"),
                    None => note,
                });
            }
        }
    }
    cx.row.result = Some(cap_result(&text));
    silent
}

/// How long one sink may take.
pub(super) const DELIVERY_TIMEOUT: Duration = Duration::from_secs(15);

/// Stamp the row's end as of now (the engine stamps it again at completion), so payloads carry
/// the real `finished_at` and `duration_ms`.
fn stamp(cx: &mut Ctx<'_>) {
    let now = cx.clock.now();
    cx.row.finished_at = now;
    cx.row.duration_ms = (now - cx.row.started_at).num_milliseconds().max(0) as u64;
}

/// Deliver `msg` to the job's sinks; events for each sink that took it.
async fn send(cx: &mut Ctx<'_>, msg: &Message) -> crate::deliver::DeliveryReport {
    let report = deliver_all(
        &cx.deps.http,
        &cx.settings.delivery,
        &cx.claim.job.def.deliver,
        msg,
        DELIVERY_TIMEOUT,
        cx.clock.now(),
    )
    .await;
    for sink in &report.ok {
        let _ = cx.ev_tx.send(Event::Delivered {
            job: cx.row.job.clone(),
            sink: sink.clone(),
            text: msg.text.clone(),
        });
    }
    report
}

/// Step 6: deliver a succeeded run's result to the job's sinks. Never fails the
/// run: the row keeps `succeeded` with `delivered: false` and `delivery_error`.
async fn step6_deliver(cx: &mut Ctx<'_>) {
    if cx.claim.job.def.deliver.is_empty() {
        return;
    }
    cx.redact_all();
    stamp(cx);
    let msg = Message::result(&cx.row);
    let report = send(cx, &msg).await;
    cx.row.delivered = report.delivered;
    cx.row.delivery_error = report.error;
}

/// One alert per budget period to the job's sinks when a budget stopped a call, so a stopped job
/// does not page on every slot.
async fn budget_alert(cx: &mut Ctx<'_>) {
    let Some(reason) = cx.budget_alert.take() else {
        return;
    };
    let delivered = if cx.claim.job.def.deliver.is_empty() {
        true
    } else {
        stamp(cx);
        let msg = Message::budget(&cx.row, &reason);
        let report = send(cx, &msg).await;
        if let Some(e) = &report.error {
            cx.row.delivery_error = Some(format!("budget alert: {e}"));
        }
        report.delivered
    };
    if let Some(b) = cx.state.budget_stop.as_mut() {
        b.alerted = delivered;
    }
}

/// Alert once per incident signature, one recovery note, so a failing job pages once. The incident
/// state is committed only as far as the delivery went (the decision carries both outcomes).
async fn incidents(cx: &mut Ctx<'_>) {
    let def = &cx.claim.job.def;
    let d = cx.incident_decision();
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
        Some(mut msg) => {
            stamp(cx);
            msg.row.finished_at = cx.row.finished_at;
            msg.row.duration_ms = cx.row.duration_ms;
            let report = send(cx, &msg).await;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The run's command environment is one value built from the settings and the job, never
    /// pieces set in several places.
    #[test]
    fn a_runs_command_environment_comes_from_its_settings_and_job() {
        let mut def = crate::testkit::jobs::command_job("j", 60);
        def.lease_seconds = 90.0;
        def.env_passthrough = vec!["OPENAI_API_KEY".into()];
        let mut settings = Settings::default();
        settings.agents.insert(
            "a".into(),
            crate::model::AgentDef {
                name: "a".into(),
                provider: crate::model::Provider::Openai,
                base_url: String::new(),
                api_key_env: "MY_KEY".into(),
                model: "m".into(),
                instructions: String::new(),
                max_tokens: None,
                temperature: None,
                tools: Vec::new(),
                approve: Vec::new(),
                limits: Default::default(),
            },
        );
        let dir = std::env::temp_dir();
        settings.base_dir = Some(dir.to_string_lossy().into_owned());
        let env = proc_env_of(&settings, &def);
        assert_eq!(env.workdir.as_deref(), Some(dir.as_path()));
        assert_eq!(env.scrub, vec!["ANTHROPIC_API_KEY", "MY_KEY"]);
        assert_eq!(env.stall_limit, Some(Duration::from_secs(45)));
        // A directory that is gone: cronsole's own; a tiny lease: never under a second.
        settings.base_dir = Some("/nonexistent/cronsole-proc-env".into());
        def.lease_seconds = 0.5;
        let env = proc_env_of(&settings, &def);
        assert_eq!(env.workdir, None);
        assert_eq!(env.stall_limit, Some(Duration::from_secs(1)));
    }

    /// Every value a tool source receives is a secret of every run: a model may repeat one
    /// it read in a tool's output.
    #[test]
    fn tool_source_secrets_are_in_the_runs_redaction_set() {
        use crate::model::{CommandToolDef, McpServerDef, McpTransport, ToolCommand};
        use std::collections::BTreeMap;
        let map = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
        let mut settings = Settings::default();
        let server = |name: &str, transport| McpServerDef {
            name: name.into(),
            transport,
            protocol_version: None,
        };
        settings.tools.mcp_servers.insert(
            "files".into(),
            server(
                "files",
                McpTransport::Stdio {
                    command: vec!["x".into()],
                    cwd: None,
                    env: map("PLAIN", "not-a-secret-value"),
                    env_from: map("TOKEN", "FILES_SRC"),
                },
            ),
        );
        settings.tools.mcp_servers.insert(
            "search".into(),
            server(
                "search",
                McpTransport::Http {
                    url: "http://127.0.0.1:9/mcp".into(),
                    headers_env: map("Authorization", "SEARCH_SRC"),
                },
            ),
        );
        settings.tools.command_tools.insert(
            "lookup".into(),
            CommandToolDef {
                name: "lookup".into(),
                description: String::new(),
                parameters: serde_json::json!({"type": "object"}),
                command: ToolCommand::Argv {
                    argv: vec!["x".into()],
                },
                timeout_seconds: None,
                env: BTreeMap::new(),
                env_from: map("TOKEN", "LOOKUP_SRC"),
            },
        );
        assert_eq!(
            settings.tools.secret_sources(),
            vec!["FILES_SRC", "LOOKUP_SRC", "SEARCH_SRC"]
        );
        let env: EnvLookup = Arc::new(|k: &str| match k {
            "FILES_SRC" => Some("files-SEKRET-1234".into()),
            "SEARCH_SRC" => Some("Bearer search-SEKRET-5678".into()),
            "LOOKUP_SRC" => Some("lookup-SEKRET-9abc".into()),
            _ => None,
        });
        let s = secrets_of(&settings, &env);
        assert_eq!(
            s.redact(
                "files-SEKRET-1234 lookup-SEKRET-9abc; Bearer search-SEKRET-5678; \
                 alone search-SEKRET-5678; not-a-secret-value"
            ),
            "[redacted] [redacted]; [redacted]; alone [redacted]; not-a-secret-value"
        );
    }

    #[test]
    fn the_result_cap_is_exact() {
        let s = "x".repeat(RESULT_MAX_CHARS);
        assert_eq!(cap_result(&s), s);
        let long = "é".repeat(RESULT_MAX_CHARS + 1);
        let c = cap_result(&long);
        assert_eq!(c.chars().count(), RESULT_MAX_CHARS);
        assert!(c.ends_with("…[truncated]"));
    }

    #[test]
    fn progress_fills_an_abandoned_row() {
        let p = Progress::default();
        let t = DateTime::parse_from_rfc3339("2026-11-30T12:00:00Z")
            .unwrap()
            .to_utc();
        let mut row = HistoryRow::new(
            "j",
            Status::Abandoned,
            crate::model::Trigger::Schedule,
            None,
            "o",
            t,
        );
        p.fill(&mut row);
        assert_eq!(
            (row.attempts, row.error.clone()),
            (
                HistoryRow::new(
                    "j",
                    Status::Abandoned,
                    crate::model::Trigger::Schedule,
                    None,
                    "o",
                    t
                )
                .attempts,
                None
            )
        );
        p.attempted(Attempt::new(t, t, None), Some("HTTP 500".into()));
        let long = format!("HTTP 503 {}", "x".repeat(Attempt::ERROR_MAX_CHARS));
        p.attempted(Attempt::new(t, t, None), Some(long.clone()));
        p.fill(&mut row);
        assert_eq!(row.attempts, 2);
        // The row keeps the last error whole; each attempt its own, bounded.
        assert_eq!(row.error.as_deref(), Some(long.as_str()));
        assert_eq!(row.attempt_log.len(), 2);
        assert_eq!(row.attempt_log[0].error.as_deref(), Some("HTTP 500"));
        assert_eq!(
            row.attempt_log[1].error.as_ref().unwrap().chars().count(),
            Attempt::ERROR_MAX_CHARS
        );
    }
}

//! Step 4 for an agent job: the tool loop (`action::agent`) driven by this run's turns, and
//! what the loop's end means for the history row.
//!
//! Owns: [`Turns`] — one model turn as one pass through [`Turns::turn`]: the price resolved
//! once per run (`cost::Quote`), the turn's worst case reserved before every request of it
//! (retries included, each behind the lease check), the request, the settlement, and the
//! booked cost handed back to the loop — and the mapping of a loop's end to a row (totals over
//! the turns, the transcript, a budget stop before the first or a later turn). Must not touch:
//! the loop's order and bounds (`action::agent`), the wire formats, the store's budget rules
//! (`store::budget`).
//!
//! Decisions where the contract is silent:
//! - A budget that refuses the first turn leaves the run `skipped` (nothing was done); one that
//!   refuses a later turn ends it `failed` (the model and tools already acted), reason `budget
//!   reached after turn N ($… spent this run)` followed by the budget's own words. Both owe the
//!   period's alert.
//! - With tools, a turn's retries live inside the loop's `timeout_seconds`: each request is
//!   bounded by the time left, the wait before a retry ends at the deadline, and no retry
//!   starts past it (`failed`, `timed out: … during turn N: not retried`), so the bound also
//!   bounds the paid attempts.
//! - The row's tokens and cost are the sums over the turns (unknown-outcome attempts booked as
//!   in a one-call run), its model the last reply's. An agent offered no tools keeps today's
//!   row exactly (no `turns`, `tool_calls` or `transcript`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use uuid::Uuid;

use super::{Ctx, End, Flow, Progress, budget_stopped, join_reason, secs};
use crate::action::agent::{
    ApprovalAsk, LoopEnd, LoopLimits, LoopOutcome, LoopProgress, LoopRun, ModelTurns, TurnAsk,
    TurnReply, Verdict, run_loop,
};
use crate::action::llm::{self, LlmCall, LlmError, wire};
use crate::action::tools::{Toolbox, ToolboxRequest};
use crate::action::{BackoffConfig, Ended, retry_with_hook};
use crate::clock::Clock;
use crate::cost::{self, PriceTable, Quote, RunCost};
use crate::engine::blocking;
use crate::model::{AgentDef, Attempt, Status, ToolPattern};
use crate::store::{AwaitStep, LoopStep, ReserveOutcome, Settlement, StepOutcome, Store};
use crate::text::Secrets;
use crate::transcript::{Delta, Entry, UnansweredTurn};

/// How often a started run's turn that waits for money held by calls in flight asks again.
const BUDGET_POLL: Duration = Duration::from_millis(500);

/// Why the before-attempt hook stopped a turn's retry loop.
enum Stop {
    Budget(String),
    Store(String),
    /// The run lost its lease before a retry (`lease_still_held`).
    Lease(String),
    /// The tool loop's `timeout_seconds` ran out before a retry.
    TimedOut,
}

/// Why a turn was not answered.
pub(super) enum TurnStop {
    /// The model's last attempt failed (retries ran out, or the error cannot go away).
    Failed(LlmError),
    /// A budget refused the turn's reservation; `attempts` were made in this turn before it.
    Budget {
        reason: String,
        turn: u32,
        attempts: u32,
        last: Option<LlmError>,
    },
    /// The store could not reserve.
    Store(String),
    /// The lease was lost before a retry.
    Lease(String, Option<LlmError>),
    /// The loop's `timeout_seconds` ran out before a retry of turn `turn`: no further attempt
    /// was sent.
    TimedOut { turn: u32, last: Option<LlmError> },
}

/// What a run still owes the store (see [`Turns::carry`]).
#[derive(Default)]
struct Carry {
    settle: Option<(Uuid, Settlement)>,
    /// The next turn's expected worst case, kept set aside with the settlement
    /// ([`next_turn_worst`]).
    set_aside: Option<f64>,
    record: Vec<Delta>,
}

/// One run's model turns.
pub(super) struct Turns<'r> {
    store: &'r Arc<dyn Store>,
    clock: &'r Arc<dyn Clock>,
    http: &'r reqwest::Client,
    env: &'r super::EnvLookup,
    backoff: BackoffConfig,
    job: String,
    run_id: Uuid,
    owner: String,
    agent: &'r AgentDef,
    prompt: &'r str,
    quote: Quote,
    timeout: Duration,
    max_attempts: u32,
    progress: &'r Progress,
    secrets: &'r Secrets,
    /// Reservations of attempts whose outcome is unknown (kept as spent at their worst case),
    /// with their turn.
    kept: Mutex<Vec<Kept>>,
    /// What the next store step carries: the last answered turn's settlement and the record's
    /// entries not written yet (a step that failed gives them back).
    carry: Mutex<Carry>,
    /// Booked over the answered turns.
    booked: Vec<RunCost>,
    /// The last reply's model.
    model: Option<String>,
    /// Where calls that need approval wait.
    approvals: super::approval::Approvals<'r>,
}

impl ModelTurns for Turns<'_> {
    type Stop = TurnStop;

    fn turn<'a>(
        &'a mut self,
        ask: TurnAsk<'a>,
    ) -> impl std::future::Future<Output = Result<TurnReply, TurnStop>> + Send + 'a {
        self.one_turn(ask)
    }

    fn recorded(&mut self, p: &LoopProgress<'_>) {
        self.progress.looped(p.turns, p.tool_calls, p.transcript);
    }

    async fn approve(&mut self, ask: ApprovalAsk<'_>) -> Result<Verdict, TurnStop> {
        let lost = |what: &str| {
            TurnStop::Lease(
                format!("the lease was lost {what} (another owner took the run over)"),
                None,
            )
        };
        let a = self
            .approvals
            .awaiting(ask.tool, ask.call_id, ask.arguments);
        match self
            .step(None, ask.record, AwaitStep::Begin(a.clone()))
            .await
        {
            Ok(StepOutcome::Stepped { .. }) => {}
            Ok(StepOutcome::Lost) => return Err(lost("before a call could await approval")),
            Err(e) => {
                return Err(TurnStop::Store(format!(
                    "recording a call awaiting approval: {e}"
                )));
            }
        }
        self.progress.awaiting(true);
        let verdict = self.approvals.wait(&self.job, self.run_id, &a).await;
        self.progress.awaiting(false);
        let verdict = verdict
            .map_err(|super::approval::WaitStop::Lost| lost("while a call awaited approval"))?;
        match self.step(None, Vec::new(), AwaitStep::End).await {
            Ok(StepOutcome::Stepped { .. }) => Ok(verdict),
            Ok(StepOutcome::Lost) => Err(lost("while a call awaited approval")),
            Err(e) => Err(TurnStop::Store(format!(
                "recording the end of an approval wait: {e}"
            ))),
        }
    }

    async fn persist(&mut self, record: Vec<Delta>) -> Result<(), TurnStop> {
        match self.step(None, record, AwaitStep::Keep).await {
            Ok(StepOutcome::Stepped { .. }) => Ok(()),
            Ok(StepOutcome::Lost) => Err(TurnStop::Lease(
                "the lease was lost before a tool call was dispatched (another owner took \
                 the run over)"
                    .to_string(),
                None,
            )),
            Err(e) => Err(TurnStop::Store(format!(
                "recording a tool call before it is dispatched: {e}"
            ))),
        }
    }
}

impl Turns<'_> {
    /// One turn: reserve its worst case, call (with retries, each behind the lease check and
    /// its own reservation), settle, and book the reply.
    async fn one_turn(&mut self, ask: TurnAsk<'_>) -> Result<TurnReply, TurnStop> {
        self.progress.new_turn();
        let bytes = wire::prompt_bytes(self.agent, self.prompt, ask.dialogue);
        let worst = self.quote.worst_case(bytes);
        let (per_request, deadline) = (self.timeout, ask.deadline);
        let (store, clock, env) = (self.store, self.clock, Arc::clone(self.env));
        let job = self.job.as_str();
        let (http, progress, secrets, quote) =
            (self.http, self.progress, self.secrets, &self.quote);
        let (agent, prompt, kept, carry) = (self.agent, self.prompt, &self.kept, &self.carry);
        let max_tokens = quote.max_tokens;
        let this = &*self;
        let first_record = Mutex::new(ask.record.to_vec());
        let before = |attempt: u32| {
            let record = first_record
                .lock()
                .map(|mut r| std::mem::take(&mut *r))
                .unwrap_or_default();
            async move {
                if attempt > 0 && deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                    // The loop's time ran out in the wait: no further paid attempt.
                    return Err(Stop::TimedOut);
                }
                let asks = worst.is_some() || attempt > 0 || !record.is_empty();
                if !asks && this.carry.lock().map_or(true, |c| c.settle.is_none()) {
                    // Nothing to reserve, renew or record (a one-turn loop without a budget).
                    return Ok(None);
                }
                this.reserve_turn(worst, record, ask.number, attempt, deadline)
                    .await
            }
        };
        let attempt = |_: u32, ticket: Option<Uuid>| {
            let env = Arc::clone(&env);
            async move {
                let started = clock.now();
                let req = LlmCall {
                    agent,
                    prompt,
                    timeout: request_timeout(per_request, deadline),
                    now: clock.now(),
                    max_tokens,
                };
                let r = llm::call_turn(http, &req, ask.dialogue, &|k| env(k)).await;
                if let Some(id) = ticket {
                    let how = settlement(quote, &r, worst);
                    // Only a failed attempt is kept for its row to book: a reply's cost, the
                    // reservation when it is unknown, is booked by `Quote::book` itself.
                    if let (Settlement::Spent, Some(w), true) = (how, worst, r.is_err())
                        && let Ok(mut k) = kept.lock()
                    {
                        k.push((id, w, ask.number));
                    }
                    if let Ok(reply) = &r
                        && let Ok(mut c) = carry.lock()
                    {
                        // Written with the run's next step (one store write), or at its end.
                        c.settle = Some((id, how));
                        c.set_aside = next_turn_worst(quote, agent, bytes, reply);
                    } else {
                        settle(store, clock, job, id, how).await;
                    }
                }
                let error = r
                    .as_ref()
                    .err()
                    .map(|e| secrets.redact(&e.to_string()).into_owned());
                progress.attempted(Attempt::new(started, clock.now(), None), error);
                r
            }
        };
        let h = retry_with_hook(
            &self.backoff,
            self.max_attempts,
            deadline,
            before,
            attempt,
            LlmError::is_retryable,
        )
        .await;
        match h.ended {
            Ended::Done(Ok(reply)) => Ok(self.answered(reply, worst, h.attempts)),
            Ended::Done(Err(e)) => Err(TurnStop::Failed(e)),
            Ended::Stopped { stop, last } => Err(match stop {
                Stop::Budget(reason) => TurnStop::Budget {
                    reason,
                    turn: ask.number,
                    attempts: h.attempts,
                    last,
                },
                Stop::Store(e) => TurnStop::Store(e),
                Stop::Lease(r) => TurnStop::Lease(r, last),
                Stop::TimedOut => TurnStop::TimedOut {
                    turn: ask.number,
                    last,
                },
            }),
        }
    }

    /// The step before attempt `attempt` of turn `turn`: renew, settle what is pending, record,
    /// and reserve `worst` when asked — the reservation's id, or why the attempt may not go. A
    /// started run's turn refused only because of other runs' requests in flight asks again
    /// until `deadline` (its need kept set aside meanwhile, so no new run takes what frees up).
    async fn reserve_turn(
        &self,
        worst: Option<f64>,
        mut record: Vec<Delta>,
        turn: u32,
        attempt: u32,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Option<Uuid>, Stop> {
        let job = self.job.as_str();
        let mut waited = false;
        loop {
            let out = self.step(worst, std::mem::take(&mut record), AwaitStep::Keep);
            return match out.await {
                Ok(StepOutcome::Lost) => Err(Stop::Lease(lost_before(turn, attempt))),
                Ok(StepOutcome::Stepped {
                    reserved: Some(ReserveOutcome::Refused { .. }),
                    may_wait: true,
                    ..
                }) if deadline.is_some_and(|d| tokio::time::Instant::now() + BUDGET_POLL < d) => {
                    if !waited {
                        tracing::info!(job = %job, turn, "a turn waits for money held by requests in flight");
                        waited = true;
                    }
                    tokio::time::sleep(BUDGET_POLL).await;
                    continue;
                }
                Ok(StepOutcome::Stepped { reserved, .. }) => match reserved {
                    Some(ReserveOutcome::Reserved { id }) => Ok(Some(id)),
                    Some(ReserveOutcome::Refused { reason }) => Err(Stop::Budget(reason)),
                    None => Ok(None),
                },
                Err(e) if worst.is_some() => Err(Stop::Store(format!("budget reservation: {e}"))),
                // Only the record and the renewal were asked: the turn may go (the record is
                // written with the next step; the lease task renews).
                Err(e) => {
                    tracing::warn!(job = %job, error = %e, "a tool loop's step was not written; retried with the next");
                    Ok(None)
                }
            };
        }
    }

    /// Book a turn's reply (its cost at most its reservation `worst`) on the run and its
    /// progress.
    fn answered(&mut self, reply: llm::LlmReply, worst: Option<f64>, attempts: u32) -> TurnReply {
        let c = self
            .quote
            .book(&reply.model, reply.usage, reply.cache, worst);
        let p = self.progress;
        p.priced_last(&reply.model, c.input_tokens, c.output_tokens, c.cost_usd);
        self.model = Some(reply.model.clone());
        self.booked.push(c.clone());
        TurnReply {
            reply,
            cost: c,
            attempts,
        }
    }

    /// One store step of this run ([`Store::loop_step`]): what the carry holds and `record`,
    /// with a reservation of `reserve` when asked. A failed write gives the carry back, so the
    /// next step writes it.
    async fn step(
        &self,
        reserve: Option<f64>,
        record: Vec<Delta>,
        awaiting: AwaitStep,
    ) -> Result<StepOutcome, String> {
        let Carry {
            settle,
            set_aside,
            record: mut all,
        } = self
            .carry
            .lock()
            .map(|mut c| std::mem::take(&mut *c))
            .unwrap_or_default();
        all.extend(record);
        let (job, owner, run_id, now) = (
            self.job.clone(),
            self.owner.clone(),
            self.run_id,
            self.clock.now(),
        );
        let r = blocking(self.store, move |s| {
            let out = s.loop_step(&LoopStep {
                job: &job,
                run_id,
                owner: &owner,
                settle,
                reserve,
                set_aside,
                record: &all,
                awaiting,
                now,
            });
            Ok((out, all))
        })
        .await;
        match r {
            Ok((Ok(out), _)) => Ok(out),
            Ok((Err(e), all)) => {
                if let Ok(mut c) = self.carry.lock() {
                    let later = std::mem::take(&mut c.record);
                    c.record = all;
                    c.record.extend(later);
                    c.settle = c.settle.or(settle);
                    c.set_aside = c.set_aside.or(set_aside);
                }
                Err(e.to_string())
            }
            Err(e) => Err(e.to_string()),
        }
    }

    /// The last answered turn's settlement, when no step carried it (the run ended).
    async fn settle_last(&self) {
        let pending = self.carry.lock().ok().and_then(|mut c| c.settle.take());
        if let Some((id, how)) = pending {
            settle(self.store, self.clock, &self.job, id, how).await;
        }
    }

    /// What the turns spent, apart from the run's borrowed context.
    fn spent(self) -> Spent {
        Spent {
            job: self.job,
            booked: self.booked,
            kept: self.kept.into_inner().unwrap_or_default(),
            model: self.model,
        }
    }
}

/// What a run's turns spent.
struct Spent {
    job: String,
    booked: Vec<RunCost>,
    kept: Vec<Kept>,
    model: Option<String>,
}

/// A reservation kept as spent (an attempt of unknown outcome): its id, its worst case and the
/// turn it was made for.
type Kept = (Uuid, f64, u32);

impl Spent {
    /// The booked turns as one cost: sums of tokens and money, the notes of each turn joined.
    fn total(&self) -> RunCost {
        let mut t = RunCost::default();
        let mut notes: Vec<String> = Vec::new();
        for c in &self.booked {
            t.input_tokens += c.input_tokens;
            t.output_tokens += c.output_tokens;
            t.cache_read_tokens += c.cache_read_tokens;
            t.cache_write_tokens += c.cache_write_tokens;
            t.unpriced |= c.unpriced;
            t.priced_as = c.priced_as.clone().or(t.priced_as);
            if let Some(r) = &c.reason
                && !notes.contains(r)
            {
                notes.push(r.clone());
            }
        }
        t.cost_usd = cost::sum_usd(self.booked.iter().map(|c| c.cost_usd));
        t.reason = (!notes.is_empty()).then(|| notes.join("; "));
        t
    }
}

/// What a finished step 4 hands to step 5: the answer and the run's cost.
pub(super) struct Answer {
    pub text: String,
    pub model: String,
    pub cost: RunCost,
    /// The answer was cut at its token limit.
    pub cut: bool,
}

/// Step 4 for an agent job (see the module doc).
pub(super) async fn step4_agent(cx: &mut Ctx<'_>, agent: &AgentDef, prompt: &str) -> Flow<Answer> {
    let def = &cx.claim.job.def;
    cx.row.model = Some(agent.model.clone());
    cx.progress.asks(&agent.model);
    let budgeted = cost::under_budget(&cx.settings, def.max_cost_usd);
    // Under a budget, an unknown model is never called: its cost could not be bounded.
    let quote = Quote::new(
        PriceTable::from_settings(&cx.settings),
        &agent.model,
        budgeted,
        agent.max_tokens,
    )
    .map_err(|e| End(Status::Failed, None, Some(e)))?;
    let toolbox = build_toolbox(cx, agent).await?;
    let mut turns = Turns {
        store: cx.store,
        clock: cx.clock,
        http: &cx.deps.http,
        env: &cx.deps.env,
        backoff: cx.deps.backoff,
        job: def.name.clone(),
        run_id: cx.claim.run_id,
        owner: cx.owner.to_string(),
        agent,
        prompt,
        quote,
        timeout: secs(def.timeout_seconds),
        max_attempts: def.max_retries.max(1),
        progress: &cx.progress,
        secrets: &cx.secrets,
        kept: Mutex::new(Vec::new()),
        carry: Mutex::new(Carry::default()),
        booked: Vec::new(),
        model: None,
        approvals: super::approval::Approvals {
            store: cx.store,
            clock: cx.clock,
            http: &cx.deps.http,
            sinks: &cx.settings.delivery,
            deliver: &def.deliver,
            row: cx.row.clone(),
            timeout: secs(agent.limits.approval_timeout_seconds.clamp(1.0, 86_400.0)),
        },
    };
    let approve: Vec<ToolPattern> = agent
        .approve
        .iter()
        .filter_map(|p| ToolPattern::parse(p))
        .collect();
    let out = run_loop(
        LoopRun {
            toolbox: &toolbox,
            limits: LoopLimits::of(&agent.limits),
            secrets: &cx.secrets,
            clock: cx.clock.as_ref(),
            timeout: Some(secs(def.timeout_seconds)),
            approve: &approve,
        },
        &mut turns,
    )
    .await;
    turns.settle_last().await;
    toolbox.close().await;
    let with_tools = !toolbox.offered.is_empty();
    let spent = turns.spent();
    finish(cx, agent, spent, out, with_tools).await
}

/// The run's tools, built before the first model call; a source that cannot be reached or an
/// allowed tool that is missing fails the run here.
async fn build_toolbox(cx: &Ctx<'_>, agent: &AgentDef) -> Flow<Toolbox> {
    let req = ToolboxRequest {
        settings: &cx.settings,
        job: &cx.claim.job.def,
        agent,
        proc_env: &cx.proc_env,
    };
    let allowed = crate::action::tools::toolbox::allowlist(&req);
    let toolbox = cx.deps.tools.build(req).await.map_err(|e| {
        End(
            Status::Failed,
            Some(format!("tools: {}", cx.redact(&e.to_string()))),
            None,
        )
    })?;
    match check_pins(cx, &toolbox, &allowed).await {
        Ok(()) => Ok(toolbox),
        Err(why) => {
            toolbox.close().await;
            Err(End(Status::Failed, Some(cx.redact(&why)), None))
        }
    }
}

/// Compares the offered MCP tools with their pins and pins those used the first time, before
/// the model sees any of them. A store that cannot answer fails the run: a definition that
/// cannot be checked is not offered.
async fn check_pins(
    cx: &Ctx<'_>,
    toolbox: &Toolbox,
    allowed: &[crate::model::ToolPattern],
) -> Result<(), String> {
    use crate::action::tools::pin;
    let mut servers: Vec<String> = toolbox
        .offered
        .iter()
        .filter_map(|o| o.qualified.split_once('.').map(|(s, _)| s.to_string()))
        .collect();
    if servers.is_empty() {
        return Ok(());
    }
    servers.sort();
    servers.dedup();
    let unreadable =
        |e: crate::engine::EngineError| format!("tools: could not check tool pins: {e}");
    let pins = blocking(cx.store, move |s| s.tool_pins(&servers))
        .await
        .map_err(unreadable)?;
    let new =
        pin::check(&toolbox.offered, allowed, &pins, cx.clock.now()).map_err(|c| c.to_string())?;
    if new.is_empty() {
        return Ok(());
    }
    let held = blocking(cx.store, move |s| s.pin_tools(&new))
        .await
        .map_err(unreadable)?;
    pin::verify(&toolbox.offered, &held).map_err(|c| c.to_string())
}

/// The row after the loop ended.
async fn finish(
    cx: &mut Ctx<'_>,
    agent: &AgentDef,
    turns: Spent,
    out: LoopOutcome<TurnStop>,
    with_tools: bool,
) -> Flow<Answer> {
    // Retries are per model request: the row's attempts are the most one turn needed (its
    // turns are counted apart), while its attempt log lists every request.
    cx.row.attempts = cx.progress.most_attempts();
    cx.row.attempt_log = cx.progress.log();
    if with_tools {
        cx.row.turns = Some(out.turns);
        cx.row.tool_calls = Some(out.tool_calls);
        cx.row.transcript = Some(out.transcript);
    }
    let mut total = turns.total();
    // A store that cannot reserve may not settle either, and a run whose lease was lost writes
    // no row that counts: their unknown-outcome reservations stay spent, off the row.
    let books = !matches!(
        out.end,
        LoopEnd::Stopped(TurnStop::Store(_) | TurnStop::Lease(..))
    );
    let unknown = if books {
        book_unknown(cx.store, cx.clock, &turns.job, turns.kept).await
    } else {
        None
    };
    if let Some(u) = &unknown {
        total.cost_usd += u.spent;
        total.reason = Some(join_reason(total.reason.take(), u.note.clone()));
    }
    if with_tools
        && let Some(entry) = unanswered(cx, agent, &out.end, out.turns, unknown.as_ref())
        && let Some(t) = cx.row.transcript.as_mut()
    {
        t.push(Entry::Unanswered(entry));
    }
    let model = turns.model.unwrap_or_else(|| agent.model.clone());
    let answered = u32::try_from(turns.booked.len()).unwrap_or(u32::MAX);
    match out.end {
        LoopEnd::Answered { text, cut } => Ok(Answer {
            text,
            model,
            cost: total,
            cut: cut && with_tools,
        }),
        LoopEnd::Bound(reason) => {
            put_cost(cx, &model, &total);
            let notes = cx.row.reason.take();
            Err(End(
                Status::Failed,
                Some(match notes {
                    Some(n) => format!("{reason}; {n}"),
                    None => reason,
                }),
                None,
            ))
        }
        LoopEnd::Stopped(stop) => {
            let unknown = unknown.is_some();
            if answered > 0 || unknown {
                put_cost(cx, &model, &total);
            }
            Err(stopped(cx, stop, total.cost_usd, unknown))
        }
    }
}

/// The record's entry for a turn the loop stopped in without a reply: a request cut at the
/// loop's `timeout_seconds`, or the model's last attempt failing. It says what the turn was
/// booked at (the reservations of its unknown-outcome attempts), so the transcript accounts for
/// the money the row books. `None` when the loop did not stop in a turn that way.
fn unanswered(
    cx: &Ctx<'_>,
    agent: &AgentDef,
    end: &LoopEnd<TurnStop>,
    answered: u32,
    unknown: Option<&Unknown>,
) -> Option<UnansweredTurn> {
    let cut = format!(
        "its request was cut at the run's timeout_seconds ({}s)",
        cx.claim.job.def.timeout_seconds
    );
    let (turn, reason) = match end {
        LoopEnd::Stopped(TurnStop::TimedOut { turn, .. }) => (*turn, format!("{cut}; not retried")),
        // In a tool loop a request's own bound is the time the loop has left: its time-out is
        // the run's.
        LoopEnd::Stopped(TurnStop::Failed(LlmError::Timeout { .. })) => (answered + 1, cut),
        LoopEnd::Stopped(TurnStop::Failed(e)) => (
            answered + 1,
            format!("no reply: {}", cx.redact(&e.to_string())),
        ),
        _ => return None,
    };
    Some(UnansweredTurn {
        turn,
        model: cx.redact(&agent.model),
        attempts: cx.progress.turn_attempts(),
        cost_usd: unknown.map_or(0.0, |u| u.of_turn(turn)),
        reason,
    })
}

/// The row's money and tokens (and their notes as its reason) for a run that did not answer.
fn put_cost(cx: &mut Ctx<'_>, model: &str, c: &RunCost) {
    cx.row.model = Some(model.to_string());
    cx.row.input_tokens = c.input_tokens;
    cx.row.output_tokens = c.output_tokens;
    cx.row.cost_usd = c.cost_usd;
    cx.row.unpriced = c.unpriced;
    if c.reason.is_some() {
        cx.row.reason = c.reason.clone();
    }
}

/// How a stopped turn ends the run. `spent` is the run's booked money (already on the row when
/// anything was booked, with its notes as the row's reason); `unknown` says attempts of
/// unknown outcome were booked.
fn stopped(cx: &mut Ctx<'_>, stop: TurnStop, spent: f64, unknown: bool) -> End {
    let notes = cx.row.reason.take();
    let then = |first: Option<String>| match &notes {
        Some(n) => Some(join_reason(first, n.clone())),
        None => first,
    };
    match stop {
        TurnStop::Failed(e) => {
            let error = Some(cx.redact(&e.to_string()));
            let hold = e.hold_until().map(|h| {
                cx.hold_until = Some(h);
                format!(
                    "rate limited: job held until {}",
                    h.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                )
            });
            End(Status::Failed, then(hold), error)
        }
        TurnStop::Budget {
            reason,
            turn,
            attempts,
            last,
        } => {
            let last = last.map(|e| cx.redact(&e.to_string()));
            let reason = if attempts == 0 {
                reason
            } else {
                format!("{reason} (before retry {})", attempts + 1)
            };
            let mut end = budget_stopped(cx, reason);
            end.2 = last;
            if turn > 1 {
                // The model and its tools already acted: the run failed, its results kept.
                end.0 = Status::Failed;
                let why = end.1.take().unwrap_or_default();
                end.1 = then(Some(format!(
                    "budget reached after turn {} ({} spent this run); {why}",
                    turn - 1,
                    cost::usd(spent)
                )));
            } else if unknown {
                // The action ran and failed: the run is `failed`, not `skipped`.
                end.0 = Status::Failed;
                end.1 = then(end.1.take());
            }
            end
        }
        // Neither books the unknown-outcome attempts: a store that cannot reserve may not
        // settle either, and a run whose lease was lost writes no row that counts. Their
        // reservations stay spent until the period ends (never under-counted).
        TurnStop::Store(e) => End(Status::Failed, notes, Some(e)),
        TurnStop::Lease(reason, last) => End(
            Status::Failed,
            then(Some(reason)),
            last.map(|e| cx.redact(&e.to_string())),
        ),
        TurnStop::TimedOut { turn, last } => End(
            Status::Failed,
            then(Some(format!(
                "timed out: the tool loop ran past timeout_seconds ({}s) during turn {turn}: \
                 not retried",
                cx.claim.job.def.timeout_seconds
            ))),
            last.map(|e| cx.redact(&e.to_string())),
        ),
    }
}

/// One request's bound: the job's `timeout_seconds`, and in a tool loop no later than the
/// loop's deadline (at least 1 ms, so a request at the bound fails as a time-out).
fn request_timeout(per_request: Duration, deadline: Option<tokio::time::Instant>) -> Duration {
    match deadline {
        Some(d) => per_request
            .min(d.saturating_duration_since(tokio::time::Instant::now()))
            .max(Duration::from_millis(1)),
        None => per_request,
    }
}

/// Why a turn's attempt did not go: the run's lease was lost before it.
fn lost_before(turn: u32, attempt: u32) -> String {
    if attempt == 0 {
        format!("not sent: the lease was lost before turn {turn} (another owner took the run over)")
    } else {
        format!(
            "not retried: the lease was lost before attempt {} (another owner took the run over)",
            attempt + 1
        )
    }
}

/// The one rule for attempts whose outcome is unknown (the request reached the model and no
/// readable reply came back: a reply cut mid-body, a timeout after sending): their reservations
/// were kept as spent at their worst case, so the run's row books that worst case, however the
/// run ends (a later attempt's success, the retries running out, a budget stop before a retry).
/// Each reservation settles to its worst case and leaves with the row (counted once, in the
/// period it was reserved in), so the row, `stats`, the console's spend and incidents show the
/// money the budget counts. Returns the amount booked and the note for the row's reason; `None`
/// when there was nothing to book. A reservation the store could not settle stays spent and is
/// left off the row (counting it on both would charge it twice).
async fn book_unknown(
    store: &Arc<dyn Store>,
    clock: &Arc<dyn Clock>,
    job: &str,
    kept: Vec<Kept>,
) -> Option<Unknown> {
    let mut booked = Vec::with_capacity(kept.len());
    let mut per_turn: Vec<(u32, f64)> = Vec::new();
    for (id, w, turn) in kept {
        if settle(store, clock, job, id, Settlement::Cost(w)).await {
            booked.push(w);
            per_turn.push((turn, w));
        }
    }
    if booked.is_empty() {
        return None;
    }
    let spent = cost::sum_usd(booked.iter().copied());
    let note = if booked.len() == 1 {
        format!(
            "1 attempt's outcome is unknown: its reservation {} is booked as spent",
            cost::usd(spent)
        )
    } else {
        format!(
            "{} attempts' outcomes are unknown: their reservations {} are booked as spent",
            booked.len(),
            cost::usd(spent)
        )
    };
    Some(Unknown {
        spent,
        note,
        per_turn,
    })
}

/// Reservations of unknown-outcome attempts booked as spent.
struct Unknown {
    /// Their sum.
    spent: f64,
    /// The row's note saying so.
    note: String,
    /// Each one's turn and amount.
    per_turn: Vec<(u32, f64)>,
}

impl Unknown {
    /// What turn `turn`'s unknown-outcome attempts were booked at.
    fn of_turn(&self, turn: u32) -> f64 {
        cost::sum_usd(
            self.per_turn
                .iter()
                .filter(|(t, _)| *t == turn)
                .map(|(_, w)| *w),
        )
    }
}

/// What the turn after `reply` may cost at worst, kept set aside while its tools run so a new
/// run's first turn cannot take it (`store::plan::step`): the prompt of this turn (`bytes`),
/// the reply, and each call's result at its `max_tool_output_bytes` (plus its framing). `None`
/// when the reply asks for no tool (the run ends) or no budget applies.
fn next_turn_worst(
    quote: &Quote,
    agent: &AgentDef,
    bytes: usize,
    reply: &llm::LlmReply,
) -> Option<f64> {
    /// A result's framing in the next request (role, id, JSON punctuation), bytes.
    const RESULT_FRAME: usize = 64;
    if reply.calls.is_empty() || reply.cut {
        return None;
    }
    let calls = reply
        .calls
        .len()
        .min(agent.limits.max_tool_calls_per_turn.max(1) as usize);
    let asked: usize = reply
        .calls
        .iter()
        .map(|c| c.id.len() + c.name.len() + c.raw_args.len() + RESULT_FRAME)
        .sum();
    let results = calls.saturating_mul(agent.limits.max_tool_output_bytes as usize + RESULT_FRAME);
    quote.worst_case(
        bytes
            .saturating_add(reply.text.len())
            .saturating_add(asked)
            .saturating_add(results),
    )
}

/// How a reserved call's reservation ends (see `LlmError::surely_cost_nothing`).
///
/// A reply settles *to the figure its row records* (`Quote::book`, at most the reservation),
/// so the completion moves that amount into the counters once; keeping it `Spent` as well
/// would count it twice (spent and in flight) and stop the budget at a fraction of what was
/// really booked.
fn settlement(
    quote: &Quote,
    r: &Result<llm::LlmReply, LlmError>,
    worst: Option<f64>,
) -> Settlement {
    match r {
        // A reply of unknown cost (no usage, a clamped count) is booked at the reservation by
        // `call_cost`, so its settlement and its row carry the worst case alike.
        Ok(reply) => Settlement::Cost(
            quote
                .book(&reply.model, reply.usage, reply.cache, worst)
                .cost_usd,
        ),
        Err(e) if e.surely_cost_nothing() => Settlement::Release,
        Err(_) => Settlement::Spent,
    }
}

/// Settle a reservation; a failure leaves it counting as spent (never under-counts) and
/// returns `false`.
async fn settle(
    store: &Arc<dyn Store>,
    clock: &Arc<dyn Clock>,
    job: &str,
    id: Uuid,
    how: Settlement,
) -> bool {
    let (j, now) = (job.to_string(), clock.now());
    match blocking(store, move |s| s.settle(&j, id, how, now)).await {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(job = %job, error = %e, "budget settlement failed; the reservation stays counted");
            false
        }
    }
}

//! What would stop a run before it spends anything: the checks `cronsole dry-run` reports as
//! `would_run: false`, each with the reason the run would end with.
//!
//! Owns: the reasons a model call is never made — an agent's key variable that is not set, a
//! model with no price under a budget, a limit below one call's worst case ("too small for one
//! call"), a limit whose rest does not cover it ("reached") — in the words the engine uses for
//! the same stop. Must not touch: the store (the caller passes the spend in), the network, the
//! environment (the caller passes a lookup), clocks.
//!
//! Checks that need a live connection (a tool source that cannot be reached) are made by the
//! caller, which adds a [`Blocker`] with [`BlockerCode::Tools`]; the gate and the context
//! checks likewise ([`BlockerCode::Gate`], [`BlockerCode::Context`]).

use serde::Serialize;

use crate::cost;
use crate::model::{AgentDef, Settings};
use crate::store::SpendNow;

/// Why a run would not reach its model call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockerCode {
    /// The gate said no (`no_change`, `skipped`) or failed.
    Gate,
    /// A `context_from` job has no successful run and `on_missing_context: skip`.
    Context,
    /// The job's agent is not in the store's settings.
    UnknownAgent,
    /// The agent's API key variable is not set (or is empty).
    MissingKey,
    /// The model has no price and a budget applies.
    UnpricedModel,
    /// A limit is below one call's worst case.
    BudgetTooSmall,
    /// What is left of a limit does not cover one call's worst case.
    BudgetReached,
    /// The agent's tools cannot be listed (a server cannot be reached, a tool is missing).
    Tools,
}

/// One reason a run would stop before its model call, in the engine's words.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Blocker {
    /// Which check.
    pub code: BlockerCode,
    /// The reason the run would be recorded with.
    pub reason: String,
}

impl Blocker {
    /// A blocker of `code` with `reason`.
    pub fn new(code: BlockerCode, reason: impl Into<String>) -> Blocker {
        Blocker {
            code,
            reason: reason.into(),
        }
    }
}

/// The agent's key variable, when it is not set or empty (`env` reads the environment the
/// run would have): the run fails before any request.
pub fn missing_key(agent: &AgentDef, env: impl Fn(&str) -> Option<String>) -> Option<Blocker> {
    let set = env(&agent.api_key_env).is_some_and(|v| !v.is_empty());
    (!set).then(|| {
        Blocker::new(
            BlockerCode::MissingKey,
            format!(
                "API key env var {} is not set (or is empty): the run would fail before any \
                 request",
                agent.api_key_env
            ),
        )
    })
}

/// One model call of a job as its definition alone prices it: what `validate` warns with and
/// what `describe`, `jobs` and the console show before any run.
#[derive(Debug, Clone, PartialEq)]
pub struct DefinitionCall {
    /// The model's price.
    pub price: crate::model::Price,
    /// The request's output bound: the agent's `max_tokens`, else the default.
    pub max_tokens: u32,
    /// Bytes the first request carries at least: instructions, message and the definitions of
    /// the command tools the job is allowed (a gate's context, a notepad and MCP tools only add
    /// to it).
    pub prompt_bytes: usize,
    /// Tokens of `prompt_bytes` that are command tools' definitions.
    pub tool_bytes: usize,
    /// The call's worst case ([`cost::worst_case_usd`]).
    pub worst_usd: f64,
}

/// [`DefinitionCall`] of `def` under `settings` (`None` for a command job, an agent the
/// settings do not define, or a model with no price).
pub fn definition_call(
    def: &crate::model::JobDef,
    settings: &Settings,
    prices: &cost::PriceTable,
) -> Option<DefinitionCall> {
    let crate::model::Action::Agent {
        agent,
        message,
        tools,
        ..
    } = &def.action
    else {
        return None;
    };
    let a = settings.agents.get(agent)?;
    let price = prices.resolve(&a.model)?.price;
    let max_tokens = a.max_tokens.unwrap_or(cost::DEFAULT_MAX_TOKENS);
    let allowed: Vec<crate::model::ToolPattern> = tools
        .as_ref()
        .unwrap_or(&a.tools)
        .iter()
        .filter_map(|t| crate::model::ToolPattern::parse(t))
        .collect();
    let tool_bytes = settings.tools.command_tools_bytes(a.provider, &allowed);
    let prompt_bytes = a.instructions.len() + message.len() + tool_bytes;
    Some(DefinitionCall {
        price,
        max_tokens,
        prompt_bytes,
        tool_bytes,
        worst_usd: cost::worst_case_usd(price, prompt_bytes, max_tokens),
    })
}

/// The skip reason every model call of `def` gets because a limit (global, then the job's) is
/// below one call's worst case, known from the definition before any run: no amount of
/// waiting lets a call through. `None` when every limit can pay for one call.
pub fn too_small_by_definition(
    def: &crate::model::JobDef,
    settings: &Settings,
    prices: &cost::PriceTable,
) -> Option<String> {
    let call = definition_call(def, settings, prices)?;
    let global = settings
        .budget
        .map(|b| ("global", b.max_cost_usd, b.period));
    let job = def
        .max_cost_usd
        .map(|l| ("job", l, cost::budget_period(settings)));
    global
        .into_iter()
        .chain(job)
        .find(|(_, limit, _)| !(limit.is_finite() && call.worst_usd <= *limit))
        .map(|(scope, limit, period)| cost::too_small_reason(scope, limit, period, call.worst_usd))
}

/// `note` (a `jobs` NOTE cell, `-` when empty) with the reason every model call of `r` is
/// refused, when its definition alone shows a limit below one call's worst case.
pub fn with_too_small(
    note: String,
    r: &crate::model::JobRecord,
    settings: &Settings,
    prices: &cost::PriceTable,
) -> String {
    if r.rt.retired {
        return note;
    }
    match too_small_by_definition(&r.def, settings, prices) {
        None => note,
        Some(why) if note == "-" => why,
        Some(why) => format!("{note}; {why}"),
    }
}

/// What the budgets say about one call of worst case `worst` (`None` when the model has no
/// price): an unpriced model under a budget is refused; a limit below `worst` is too small for
/// one call; a limit whose rest this period is below `worst` is reached.
pub fn budgets(
    settings: &Settings,
    job_max_cost_usd: Option<f64>,
    model: &str,
    worst: Option<f64>,
    spend: SpendNow,
) -> Vec<Blocker> {
    let Some(worst) = worst else {
        return if cost::under_budget(settings, job_max_cost_usd) {
            vec![Blocker::new(
                BlockerCode::UnpricedModel,
                cost::unpriced_under_budget(model),
            )]
        } else {
            Vec::new()
        };
    };
    let mut out = Vec::new();
    let global = settings
        .budget
        .map(|b| ("global", b.max_cost_usd, b.period, spend.global_usd));
    let job = job_max_cost_usd.map(|l| ("job", l, cost::budget_period(settings), spend.job_usd));
    for (scope, limit, period, used) in global.into_iter().chain(job) {
        if !(limit.is_finite() && worst <= limit) {
            out.push(Blocker::new(
                BlockerCode::BudgetTooSmall,
                cost::too_small_reason(scope, limit, period, worst),
            ));
        } else if !(used < limit && used + worst <= limit) {
            out.push(Blocker::new(
                BlockerCode::BudgetReached,
                cost::reached_reason(scope, limit, period, used, 0.0, worst),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Budget, BudgetPeriod};

    fn settings(limit: Option<f64>) -> Settings {
        Settings {
            budget: limit.map(|l| Budget {
                max_cost_usd: l,
                period: BudgetPeriod::Day,
            }),
            ..Settings::default()
        }
    }

    #[test]
    fn a_missing_or_empty_key_blocks() {
        let mut agent = crate::testkit::jobs::agent_def("a", crate::model::Provider::Openai);
        agent.api_key_env = "KEY_X".into();
        assert!(missing_key(&agent, |_| None).is_some());
        assert!(missing_key(&agent, |_| Some(String::new())).is_some());
        assert!(missing_key(&agent, |_| Some("sk-1".into())).is_none());
        let b = missing_key(&agent, |_| None).unwrap();
        assert_eq!(b.code, BlockerCode::MissingKey);
        assert!(b.reason.contains("KEY_X"), "{b:?}");
    }

    #[test]
    fn budgets_say_too_small_reached_or_unpriced() {
        let spend = |g: f64, j: f64| SpendNow {
            global_usd: g,
            job_usd: j,
        };
        // The job's limit is below one call: too small, whatever is spent.
        let b = budgets(
            &settings(Some(1.0)),
            Some(0.002),
            "m",
            Some(0.0025),
            spend(0.15, 0.0),
        );
        assert_eq!(b.len(), 1, "{b:?}");
        assert_eq!(b[0].code, BlockerCode::BudgetTooSmall);
        assert!(b[0].reason.starts_with("budget too small for one call: it may cost up to $0.0025, the job limit is $0.002/day"), "{b:?}");
        // The global limit could pay, but what is left cannot.
        let b = budgets(
            &settings(Some(0.25)),
            None,
            "m",
            Some(0.0025),
            spend(0.2497, 0.0),
        );
        assert_eq!(b[0].code, BlockerCode::BudgetReached);
        assert!(
            b[0].reason
                .starts_with("budget reached: global $0.25/day, $0.0003 left (spent $0.25,"),
            "{b:?}"
        );
        // Room enough: nothing.
        assert!(
            budgets(
                &settings(Some(0.25)),
                Some(0.05),
                "m",
                Some(0.0025),
                spend(0.0, 0.0)
            )
            .is_empty()
        );
        // No price under a budget; no price and no budget at all runs.
        let b = budgets(&settings(Some(1.0)), None, "mystery", None, spend(0.0, 0.0));
        assert_eq!(b[0].code, BlockerCode::UnpricedModel);
        assert!(budgets(&settings(None), None, "mystery", None, spend(0.0, 0.0)).is_empty());
    }
}

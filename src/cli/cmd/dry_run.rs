//! `cronsole dry-run NAME [--no-gates] [--json]`: what one run of a job would do, without doing
//! it, so an operator sees the gate, the prompt and the price before the first real run.
//!
//! Owns: running the job's gate (unless `--no-gates`), assembling the exact prompt the run would
//! send (notepad, message, gate context or diff, `context_from` blocks — the same
//! `gate::context` functions the engine uses), and printing it with the model, the price ceiling
//! of the call, the budgets it would be checked against and the sinks. Must not touch: the model
//! (never called), the sinks (never delivered to), the store (read only: no history row, no
//! state, no watermark, no reservation).
//!
//! Decisions where the issue is silent: the gate really runs (a `pre_run` command or a monitor
//! probe is what the operator wants to see), in the environment a real run gives it
//! (`engine::run::proc_env_of`: the jobs file's directory, every agent's key variable removed),
//! but its new monitor watermark is thrown away, so a later real run still sees the change. A gate that says no (`no_change`, `skipped`, probe
//! failure) is printed and the prompt is still shown with no gate context, marked so; the exit
//! code is 0 either way (the dry run itself worked). A `command` job prints the command instead
//! of a prompt. The price ceiling is what the run's first turn reserves, computed by the same
//! quote from the same request weight (the prompt's bytes as input tokens, the offered tools'
//! definitions included, plus `max_tokens`, default when unset); an unpriced model says so.
//! Console key `D`: [`console_runner`] runs this command (this binary, `dry-run NAME`, the
//! console's store in `CRONSOLE_STORE`) and hands its text to the console's view, so the console
//! shows exactly what the command prints; bounded by [`CONSOLE_DRY_RUN_LIMIT`].

use std::collections::BTreeMap;
use std::process::ExitCode;

use crate::action::agent::forecast::{ToolsForecast, forecast};
use crate::action::llm::wire;
use crate::action::tools::{OfferedTool, ToolboxRequest};
use crate::cli::args::{Cli, DryRunArgs};
use crate::cost::{self, PriceTable, Quote};
use crate::gate::context::{self, ContextDecision};
use crate::gate::{self, GateConfig, GateOutcome};
use crate::model::{Action, JobRecord, Settings};
use crate::preflight::{self, Blocker, BlockerCode};
use crate::store::Store;
use anyhow::{Context, Result};
use chrono::Utc;
use serde::Serialize;

use super::{bad_input, jobs_file, open_existing_store, store_location};

#[derive(Debug, Serialize)]
struct Budget {
    scope: &'static str,
    limit_usd: f64,
    period: &'static str,
    spent_usd: f64,
}

#[derive(Debug, Serialize)]
struct DryRun {
    job: String,
    kind: &'static str,
    gate: String,
    /// No reason below stops the run before its model call (or its command).
    would_run: bool,
    /// Every reason the run would stop before spending anything, in the words its row would
    /// carry (`cronsole::preflight`): the gate, missing context, an unknown agent, a key
    /// variable that is not set, an unpriced model under a budget, a budget too small for one
    /// call or reached, tools that cannot be listed.
    reasons: Vec<Blocker>,
    /// When the job next runs (its stored next slot plus jitter, none for a `run_immediately`
    /// run: `JobRecord::next_fire_at`, as `jobs` shows it); `null`
    /// while nothing will fire (paused, disabled, retired, `after:` only).
    next_fire_at: Option<chrono::DateTime<Utc>>,
    /// The exact prompt (agent jobs) or command line (command jobs).
    prompt: Option<String>,
    command: Option<String>,
    agent: Option<String>,
    model: Option<String>,
    instructions: Option<String>,
    max_tokens: Option<u32>,
    price_ceiling_usd: Option<f64>,
    price_note: Option<String>,
    budgets: Vec<Budget>,
    budget_stop: Option<String>,
    sinks: Vec<String>,
    /// The tools the run would be offered, their weight and the loop's worst case.
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<ToolsForecast>,
    /// Why the tools could not be listed (the run would fail before its first model call).
    #[serde(skip_serializing_if = "Option::is_none")]
    tools_error: Option<String>,
}

/// Longest a console dry run may take (its gates run for real) before it is killed.
pub const CONSOLE_DRY_RUN_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

/// The console's `D` key: `cronsole dry-run NAME` against the console's store, as a child
/// process (killed if the console stops waiting), its stdout the view's text; a non-zero exit
/// gives its stderr as the reason.
pub fn console_runner(location: String) -> crate::tui::DryRunner {
    std::sync::Arc::new(move |job: String| {
        let location = location.clone();
        Box::pin(async move {
            let exe = std::env::current_exe()
                .map_err(|e| format!("cannot find the cronsole binary: {e}"))?;
            let mut cmd = tokio::process::Command::new(exe);
            cmd.arg("dry-run")
                .arg(&job)
                .env("CRONSOLE_STORE", &location)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .kill_on_drop(true);
            let out = tokio::time::timeout(CONSOLE_DRY_RUN_LIMIT, cmd.output())
                .await
                .map_err(|_| {
                    format!(
                        "the dry run took over {} s and was stopped",
                        CONSOLE_DRY_RUN_LIMIT.as_secs()
                    )
                })?
                .map_err(|e| format!("could not start the dry run: {e}"))?;
            if out.status.success() {
                Ok(String::from_utf8_lossy(&out.stdout).into_owned())
            } else {
                Err(format!(
                    "exit {}: {}",
                    out.status.code().unwrap_or(-1),
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        })
    })
}

pub fn dry_run(cli: &Cli, a: &DryRunArgs) -> Result<ExitCode> {
    let jobs = jobs_file(cli);
    let store = open_existing_store(&store_location(cli, jobs.as_deref()))?;
    let Some(rec) = store.job(&a.name)? else {
        return Err(bad_input(format!("no job named '{}' in the store", a.name)));
    };
    let settings = store.settings()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("could not start the async runtime")?;
    let report = rt.block_on(build(store.as_ref(), &rec, &settings, a.no_gates))?;
    if a.json {
        println!("{}", crate::text::to_json_pretty(&report)?);
    } else {
        print_text(&report);
    }
    Ok(ExitCode::SUCCESS)
}

async fn build(
    store: &dyn Store,
    rec: &JobRecord,
    settings: &Settings,
    no_gates: bool,
) -> Result<DryRun> {
    let def = &rec.def;
    let (gate_text, would_run, gate_context) = match (&def.gate, no_gates) {
        (None, _) => ("none".to_string(), true, None),
        (Some(_), true) => ("not run (--no-gates)".to_string(), true, None),
        (Some(g), false) => {
            let outcome = gate::run_gate(
                g,
                rec.rt.state.monitor.as_ref(),
                &GateConfig::default(),
                &crate::engine::run::proc_env_of(settings, def),
            )
            .await;
            // The new watermark (if any) is dropped: a dry run changes no state.
            match outcome {
                GateOutcome::Go { context, diff, .. } => {
                    let what = if diff.is_some() { "go (changed)" } else { "go" };
                    (what.to_string(), true, context)
                }
                GateOutcome::NoChange => (
                    "no_change: the source is unchanged, a run would stop here".into(),
                    false,
                    None,
                ),
                GateOutcome::Skip { reason } => (
                    format!("skipped: {reason}; a run would stop here"),
                    false,
                    None,
                ),
                GateOutcome::Fail { error } => (
                    format!("failed: {error}; a run would stop here"),
                    false,
                    None,
                ),
            }
        }
    };

    let spend = store.spend(&def.name, Utc::now())?;
    let mut budgets = Vec::new();
    if let Some(b) = settings.budget {
        budgets.push(Budget {
            scope: "global",
            limit_usd: b.max_cost_usd,
            period: cost::period_word(b.period),
            spent_usd: spend.global_usd,
        });
    }
    if let Some(limit) = def.max_cost_usd {
        budgets.push(Budget {
            scope: "job",
            limit_usd: limit,
            period: cost::period_word(cost::budget_period(settings)),
            spent_usd: spend.job_usd,
        });
    }

    let mut out = DryRun {
        job: def.name.clone(),
        kind: "command",
        reasons: (!would_run)
            .then(|| Blocker::new(BlockerCode::Gate, gate_text.clone()))
            .into_iter()
            .collect(),
        next_fire_at: rec.next_fire_at().filter(|_| rec.fires()),
        gate: gate_text,
        would_run,
        prompt: None,
        command: None,
        agent: None,
        model: None,
        instructions: None,
        max_tokens: None,
        price_ceiling_usd: None,
        price_note: None,
        budgets,
        budget_stop: None,
        sinks: def.deliver.clone(),
        tools: None,
        tools_error: None,
    };
    match &def.action {
        Action::Command { command, .. } => out.command = Some(command.clone()),
        Action::Agent { agent, message, .. } => {
            agent_part(
                &mut out,
                store,
                rec,
                settings,
                spend,
                (agent, message),
                gate_context.as_deref(),
            )
            .await?;
        }
    }
    out.would_run = out.reasons.is_empty();
    Ok(out)
}

/// The agent half of a dry run: the prompt, the model and its price, the tools.
async fn agent_part(
    out: &mut DryRun,
    store: &dyn Store,
    rec: &JobRecord,
    settings: &Settings,
    spend: crate::store::SpendNow,
    (agent, message): (&String, &String),
    gate_context: Option<&str>,
) -> Result<()> {
    let def = &rec.def;
    out.kind = "agent";
    out.agent = Some(agent.clone());
    let mut latest = BTreeMap::new();
    for name in &def.context_from {
        if let Some(j) = store.job(name)?
            && let Some(r) = j.rt.last_success_result
        {
            latest.insert(name.clone(), r);
        }
    }
    let blocks = match context::decide(
        &def.context_from,
        &latest,
        def.context_max_chars,
        def.on_missing_context,
    ) {
        ContextDecision::Run { blocks, .. } => blocks,
        ContextDecision::Skip { reason } => {
            out.gate = format!("{}; context: skipped: {reason}", out.gate);
            out.reasons.push(Blocker::new(
                BlockerCode::Context,
                format!("skipped: {reason}"),
            ));
            Vec::new()
        }
    };
    let prompt = context::assemble_prompt(&rec.rt.state, message, gate_context, &blocks);
    if let Some(a) = settings.agents.get(agent) {
        out.model = Some(a.model.clone());
        out.instructions = Some(a.instructions.clone()).filter(|s| !s.is_empty());
        let max_tokens = a.max_tokens.unwrap_or(cost::DEFAULT_MAX_TOKENS);
        out.max_tokens = Some(max_tokens);
        // The key is read from this process's environment: the console's `D` runs this
        // command from the engine's process, so it sees the engine's variables.
        out.reasons
            .extend(preflight::missing_key(a, |k| std::env::var(k).ok()));
        let offered = if a.tools.is_empty() {
            Vec::new()
        } else {
            list_tools(out, store, settings, def, a, &prompt).await
        };
        // The first turn's reservation as the run makes it: the same quote and the same
        // request weight, tool definitions included.
        let budgeted = cost::under_budget(settings, def.max_cost_usd);
        let quote = Quote::new(
            PriceTable::from_settings(settings),
            &a.model,
            budgeted,
            a.max_tokens,
        )
        .ok();
        let price = quote.as_ref().and_then(|q| q.price);
        let dialogue = wire::Dialogue {
            steps: &[],
            tools: &offered,
        };
        let bytes = wire::prompt_bytes(a, &prompt, dialogue);
        out.price_ceiling_usd = quote.and_then(|q| q.ceiling(bytes));
        if price.is_none() && !budgeted {
            out.price_note = Some(format!(
                "model '{}' has no price: its cost is not bounded",
                a.model
            ));
        }
        let money = preflight::budgets(
            settings,
            def.max_cost_usd,
            &a.model,
            out.price_ceiling_usd,
            spend,
        );
        out.budget_stop = money.first().map(|b| b.reason.clone());
        out.reasons.extend(money);
    } else {
        out.reasons.push(Blocker::new(
            BlockerCode::UnknownAgent,
            format!("agent '{agent}' is not defined in the store's settings (apply the jobs file)"),
        ));
    }
    out.prompt = Some(prompt);
    Ok(())
}

/// Connect to the agent's tool sources as a run would (listing, never calling a tool), and
/// forecast what the tools weigh and what the loop may cost. Returns the tools offered (none
/// when they could not be listed: the run would fail before its first model call).
async fn list_tools(
    out: &mut DryRun,
    store: &dyn Store,
    settings: &Settings,
    def: &crate::model::JobDef,
    agent: &crate::model::AgentDef,
    prompt: &str,
) -> Vec<OfferedTool> {
    let deps = match crate::engine::RunDeps::from_env() {
        Ok(d) => d,
        Err(e) => {
            out.reasons
                .push(Blocker::new(BlockerCode::Tools, e.to_string()));
            out.tools_error = Some(e.to_string());
            return Vec::new();
        }
    };
    let proc_env = crate::engine::run::proc_env_of(settings, def);
    let req = ToolboxRequest {
        settings,
        job: def,
        agent,
        proc_env: &proc_env,
    };
    let allowed = crate::action::tools::toolbox::allowlist(&req);
    match deps.tools.build(req).await {
        Ok(tb) => {
            let price = PriceTable::from_settings(settings)
                .resolve(&agent.model)
                .map(|r| r.price);
            out.tools = Some(forecast(agent, prompt, &tb.offered, price));
            // Compared with the pins as a run would, never pinning: a dry run writes nothing.
            match store.tool_pins(&[]) {
                Ok(pins) => {
                    if let Err(c) = crate::action::tools::pin::check(
                        &tb.offered,
                        &allowed,
                        &pins,
                        chrono::Utc::now(),
                    ) {
                        out.reasons
                            .push(Blocker::new(BlockerCode::Tools, c.to_string()));
                        out.tools_error = Some(c.to_string());
                    }
                }
                Err(e) => {
                    let why = format!("could not read the tool pins: {e}");
                    out.reasons
                        .push(Blocker::new(BlockerCode::Tools, why.clone()));
                    out.tools_error = Some(why);
                }
            }
            tb.close().await;
            tb.offered
        }
        Err(e) => {
            out.reasons
                .push(Blocker::new(BlockerCode::Tools, e.to_string()));
            out.tools_error = Some(e.to_string());
            Vec::new()
        }
    }
}

/// Every piece of outside text (the job's own fields, gate reasons, command output and pages in
/// the prompt) goes through the one inert-text policy (`cronsole::text`), as `history` does:
/// ESC, bidi overrides and other unsafe characters are shown (`^[`, `\u{202e}`), never sent to
/// the terminal. Multi-line text (command, instructions, prompt) keeps its lines and tabs.
/// `--json` prints the exact strings (serde escapes control characters; bidi characters stay
/// as themselves there, as in `history --json`).
fn print_text(r: &DryRun) {
    use crate::text::{visible, visible_line as one};
    println!(
        "dry run of {} ({} job): nothing is called, delivered or recorded",
        one(&r.job),
        r.kind
    );
    println!("gate:   {}", one(&r.gate));
    if r.would_run {
        println!("would run: yes");
    } else {
        println!("would run: no");
        for b in &r.reasons {
            for line in reason_lines(&b.reason) {
                println!("{line}");
            }
        }
        println!("        (shown below: what the run would have sent had it gone on)");
    }
    match r.next_fire_at {
        Some(t) => println!(
            "next:   {} ({})",
            crate::when::rfc3339(t),
            crate::when::left(t, Utc::now())
        ),
        None => {
            println!("next:   none (nothing will fire: paused, disabled, retired or after: only)")
        }
    }
    if let Some(c) = &r.command {
        println!("command: {}", visible(c));
    }
    if let Some(m) = &r.model {
        println!(
            "model:  {} (agent {}, max_tokens {})",
            one(m),
            one(r.agent.as_deref().unwrap_or("-")),
            r.max_tokens.unwrap_or_default()
        );
    }
    match (r.price_ceiling_usd, &r.price_note) {
        // Worst cases round up, as the budget reasons print them ("may cost up to …"), so one
        // figure reads the same on every line of the dry run.
        (Some(p), _) => println!(
            "price ceiling of the call: {} (worst case)",
            cost::usd_up(p)
        ),
        (None, Some(n)) => println!("price: {}", one(n)),
        _ => {}
    }
    for b in &r.budgets {
        println!(
            "budget: {} {}/{} (spent {})",
            b.scope,
            cost::usd(b.limit_usd),
            b.period,
            cost::usd(b.spent_usd)
        );
    }
    if r.budgets.is_empty() && r.kind == "agent" {
        println!("budget: none applies");
    }

    if let Some(e) = &r.tools_error {
        println!(
            "tools:  cannot be listed, a run would fail before its first model call: {}",
            one(e)
        );
    }
    if let Some(t) = &r.tools {
        println!(
            "tools:  {} offered, definitions {} tokens at most (sent with every turn)",
            t.tools.len(),
            t.definition_tokens
        );
        for tool in &t.tools {
            println!(
                "        {} (as {}, {} tokens)",
                one(&tool.name),
                one(&tool.wire_name),
                tool.definition_tokens
            );
        }
        if t.one_turn_usd.is_some() {
            println!("        {}", t.worst_case_text());
        }
    }
    if r.sinks.is_empty() {
        println!("sinks:  none");
    } else {
        println!("sinks:  {}", one(&r.sinks.join(", ")));
    }
    if let Some(i) = &r.instructions {
        println!("--- instructions ---\n{}", visible(i));
    }
    if let Some(p) = &r.prompt {
        println!("--- prompt ---\n{}\n--- end of prompt ---", visible(p));
    }
}

/// A reason as printed under `would run: no`: its first line as a list item, the rest (an
/// unpriced model's `pricing:` snippet to paste) indented under it, each line made inert, so
/// a line break shows as one rather than as a literal `\n`.
fn reason_lines(reason: &str) -> Vec<String> {
    reason
        .lines()
        .enumerate()
        .map(|(i, l)| {
            let lead = if i == 0 { "  - " } else { "    " };
            format!("{lead}{}", crate::text::visible_line(l))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::reason_lines;

    /// An unpriced model's reason carries a `pricing:` snippet on its own lines: they print as
    /// lines, indented under the item, never as a literal `\n`.
    #[test]
    fn a_multi_line_reason_prints_as_indented_lines() {
        let reason = crate::cost::unpriced_under_budget("my-weird-model");
        let lines = reason_lines(&reason);
        assert_eq!(lines.len(), 2, "{lines:#?}");
        assert!(lines[0].starts_with("  - "), "{lines:#?}");
        assert!(lines.iter().all(|l| !l.contains("\\n")), "{lines:#?}");
        assert!(lines[0].ends_with(": pricing:"), "{lines:#?}");
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("      my-weird-model: {")),
            "{lines:#?}"
        );
    }
}

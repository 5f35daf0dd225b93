//! Gates, memory and context, the steps of a run between the budget check and the action:
//! whether a run goes ahead, and what the model is told when it does.
//!
//! Owns: the `pre_run` gate, the `monitor` gate (command probe and the hardened URL probe, which
//! asks `crate::addr` which addresses are public), per-job notepad rendering/parsing/capping, context chaining and prompt assembly,
//! and the text form of a stored diff for `cronsole diff`. Must not touch: the store (callers read
//! state and history and pass them in, then persist what we return), the engine, the UI.
//!
//! The caller's contract (the run pipeline):
//! ```text
//! let outcome = gate::run_gate(&gate, job_state.monitor.as_ref(), &GateConfig::default(),
//! &proc_env).await; match outcome { Go { context, diff, monitor } => { /* seed context into the
//! prompt, diff into the row, store `monitor` (if Some) with the run's state */ } NoChange
//! => /* row `no_change`, nothing else */, Skip { reason }   => /* row `skipped` with reason */,
//! Fail { error }    => /* row `failed`; keep the prior monitor state untouched */, }
//! ```
//! Every future here is cancellation-safe: dropping it kills any process group it started.

use std::time::Duration;

use crate::model::{Gate, MonitorSource, MonitorState};
use crate::proc::{self, Cap, ProcEnv, ProcSpec};

pub mod context;
pub mod diffview;
pub mod monitor;
pub mod notepad;
pub mod url;

/// Default timeout of `pre_run` and of a command probe: a gate is a quick check, and a hung one
/// must end in a row the operator can read.
pub const GATE_TIMEOUT: Duration = Duration::from_secs(30);
/// `pre_run` stdout characters kept as context (the same bound as a monitor's diff).
pub const PRE_RUN_STDOUT_CHARS: usize = 8000;
/// Stderr characters quoted in a skip reason: enough for the reason, short enough for one row.
pub const PRE_RUN_STDERR_CHARS: usize = 500;

/// What a gate decided.
#[derive(Debug, Clone, PartialEq)]
pub enum GateOutcome {
    /// Run the action. `context` goes into the prompt; `diff` into the history row; `monitor` is
    /// the new watermark to persist with the run's state.
    Go {
        context: Option<String>,
        diff: Option<String>,
        monitor: Option<MonitorState>,
    },
    /// A monitor saw no change: `no_change`, no model call, no delivery.
    NoChange,
    /// `pre_run` said no (or timed out): `skipped` with this reason.
    Skip { reason: String },
    /// The probe errored: `failed`; the prior monitor state must be kept.
    Fail { error: String },
}

/// Bounds of the gates; `Default` is the documented values (the constants above).
#[derive(Debug, Clone)]
pub struct GateConfig {
    pub pre_run_timeout: Duration,
    pub probe_timeout: Duration,
    pub url: url::UrlProbeOptions,
}

impl Default for GateConfig {
    fn default() -> Self {
        GateConfig {
            pre_run_timeout: GATE_TIMEOUT,
            probe_timeout: GATE_TIMEOUT,
            url: url::UrlProbeOptions::default(),
        }
    }
}

/// Run one gate. `prior` is the job's stored monitor watermark (ignored by `pre_run`); `env` is
/// where the gate's command runs (ignored by a URL probe).
pub async fn run_gate(
    gate: &Gate,
    prior: Option<&MonitorState>,
    cfg: &GateConfig,
    env: &ProcEnv,
) -> GateOutcome {
    match gate {
        Gate::PreRun { command } => pre_run(command, cfg.pre_run_timeout, env).await,
        Gate::Monitor { source } => {
            let output = probe(source, cfg, env).await;
            match output {
                Ok(bytes) => monitor::evaluate(&bytes, prior),
                Err(error) => GateOutcome::Fail { error },
            }
        }
    }
}

/// Probe a monitor source once: the raw output, or why it failed (a human sentence).
pub async fn probe(
    source: &MonitorSource,
    cfg: &GateConfig,
    env: &ProcEnv,
) -> Result<Vec<u8>, String> {
    match source {
        MonitorSource::Command { command } => {
            monitor::probe_command(command, cfg.probe_timeout, env).await
        }
        MonitorSource::Url { url, allow_private } => url::fetch(url, *allow_private, &cfg.url)
            .await
            .map(|b| b.body)
            .map_err(|e| {
                // The path and query are elided: a token is often carried there.
                format!("monitor URL {}: {e}", crate::text::url_display(url, ""))
            }),
    }
}

/// The stateless `pre_run` gate: exit 0 runs the job, anything else skips it with a reason.
pub async fn pre_run(command: &str, timeout: Duration, env: &ProcEnv) -> GateOutcome {
    let spec = ProcSpec {
        command,
        timeout,
        stdout_cap: Cap::Soft(proc::bytes_for_chars(PRE_RUN_STDOUT_CHARS)),
        stderr_cap: Cap::Soft(proc::bytes_for_chars(PRE_RUN_STDERR_CHARS)),
    };
    let out = match proc::run(&spec, env).await {
        Ok(o) => o,
        Err(e) => {
            return GateOutcome::Fail {
                error: format!("pre-run gate: {e}"),
            };
        }
    };
    if out.timed_out {
        return GateOutcome::Skip {
            reason: format!(
                "pre-run gate: timed out after {}s (process group killed)",
                timeout.as_secs_f64()
            ),
        };
    }
    if out.exit_code != 0 {
        let stderr = out.stderr_lossy();
        let (s, _) = proc::cut_chars(stderr.trim(), PRE_RUN_STDERR_CHARS);
        // A silent check (`test -s FILE`) says nothing on stderr: the exit code alone reads
        // better than an empty quotation.
        let reason = if s.is_empty() {
            format!("pre-run gate: nothing to do (exit {})", out.exit_code)
        } else {
            format!("pre-run gate: nothing to do (exit {}: {s})", out.exit_code)
        };
        return GateOutcome::Skip { reason };
    }
    let stdout = out.stdout_lossy();
    let (s, _) = proc::cut_chars(stdout.trim(), PRE_RUN_STDOUT_CHARS);
    GateOutcome::Go {
        context: (!s.is_empty()).then(|| s.to_string()),
        diff: None,
        monitor: None,
    }
}

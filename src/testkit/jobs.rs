//! Job definitions for tests and benchmarks, so each one states only what it cares about:
//! `JobDef { lease_seconds: 5.0, ..command_job("a", 1) }`.

use crate::model::{Action, JobDef};
use crate::schedule::ScheduleSpec;

/// An enabled `every N s` job running `true`, one attempt, 30 s lease, no gate, no budget.
pub fn command_job(name: &str, every_seconds: u64) -> JobDef {
    JobDef {
        name: name.to_string(),
        schedule: ScheduleSpec::Every { every_seconds },
        schedule_text: format!("every {every_seconds}s"),
        tz: "UTC".into(),
        action: Action::Command {
            command: "true".into(),
            timeout_seconds: 60.0,
        },
        gate: None,
        context_from: vec![],
        context_max_chars: 4000,
        on_missing_context: Default::default(),
        misfire_grace_seconds: None,
        max_runs: None,
        until: None,
        run_immediately: false,
        timeout_seconds: 300.0,
        max_retries: 1,
        lease_seconds: 30.0,
        max_cost_usd: None,
        deliver: vec![],
        alert_after_failures: 1,
        enabled: true,
        env_passthrough: vec![],
        tags: vec![],
        jitter_seconds: 0.0,
        days: Default::default(),
        overlap: Default::default(),
        after: vec![],
    }
}

/// The instant to store `def` at so that its first slot is `first`: one interval earlier for an
/// `every` grid (whose first slot is its anchor plus one interval), the delay earlier for `in`,
/// `first` itself otherwise (a cron or wall time `first` must be on the clock's grid).
pub fn stored_for_first_slot(
    def: &JobDef,
    first: chrono::DateTime<chrono::Utc>,
) -> chrono::DateTime<chrono::Utc> {
    match def.schedule {
        ScheduleSpec::Every { every_seconds } => {
            let back = i64::try_from(every_seconds).unwrap_or(i64::MAX / 1000);
            first - chrono::Duration::seconds(back)
        }
        ScheduleSpec::In { seconds } => {
            let back = i64::try_from(seconds).unwrap_or(i64::MAX / 1000);
            first - chrono::Duration::seconds(back)
        }
        _ => first,
    }
}

/// An agent of `provider` named `name`: model `m`, key in `K`, short instructions, default
/// tool limits and no tools.
pub fn agent_def(name: &str, provider: crate::model::Provider) -> crate::model::AgentDef {
    crate::model::AgentDef {
        name: name.to_string(),
        provider,
        base_url: String::new(),
        api_key_env: "K".to_string(),
        model: "m".to_string(),
        instructions: "be brief".to_string(),
        max_tokens: None,
        temperature: None,
        tools: Vec::new(),
        approve: Vec::new(),
        limits: Default::default(),
    }
}

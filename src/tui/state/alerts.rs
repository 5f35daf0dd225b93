//! Lasting alerts derived from every snapshot: in the header, conditions that make runs fail
//! before they start (today, an agent whose API-key variable is unset in the environment this
//! process's engine runs with); in the footer, a tool call awaiting an operator's approval.
//!
//! A start-up warning printed on stderr is hidden behind the console until it closes, and the
//! notice line is gone at the first key; these alerts are derived again from every snapshot,
//! so one stays while its condition holds and goes as soon as a re-applied jobs file no longer
//! has it (the agent is gone, names another variable, or no job uses it any more).
//!
//! Owns: which agents to warn about and the words. Must not touch: the environment (the caller
//! passes the lookup; `console --attach` passes none, since another process's environment
//! cannot be seen from here), the store, the clock.

use std::collections::BTreeSet;

use crate::snapshot::Snapshot;
use crate::text;

/// Whether a variable is set (and not empty) in the environment the engine's runs read.
pub type KeyLookup = std::sync::Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// Each agent that a live job calls and whose key variable `is_set` says is unset, as (agent,
/// variable), both made inert, in agent-name order. Retired jobs do not count (they never run
/// again); paused ones do (resuming would fail).
pub fn missing_keys(snap: &Snapshot, is_set: &dyn Fn(&str) -> bool) -> Vec<(String, String)> {
    let used: BTreeSet<&str> = snap
        .jobs
        .iter()
        .filter(|j| !j.rt.retired)
        .filter_map(|j| j.def.agent.as_deref())
        .collect();
    used.into_iter()
        .filter_map(|name| {
            let agent = snap.settings.agents.get(name)?;
            (!is_set(&agent.api_key_env)).then(|| {
                (
                    text::line(name).into_owned(),
                    text::line(&agent.api_key_env).into_owned(),
                )
            })
        })
        .collect()
}

/// The header's words for [`missing_keys`]: `agent writer: OPENAI_API_KEY unset — its runs
/// will fail`, or, for several, `agents analyst, writer: keys unset — their runs will fail`
/// (short enough for 80 columns; `cronsole dry-run JOB` names each variable).
pub fn key_alert_text(missing: &[(String, String)]) -> Option<String> {
    match missing {
        [] => None,
        [(agent, var)] => Some(format!("agent {agent}: {var} unset — its runs will fail")),
        many => {
            let names: Vec<&str> = many.iter().map(|(a, _)| a.as_str()).collect();
            Some(format!(
                "agents {}: keys unset — their runs will fail",
                names.join(", ")
            ))
        }
    }
}

/// The same alert in fewer words, for a first line that must keep the store beside it:
/// `writer: OPENAI_API_KEY unset, runs will fail` or `agents analyst, writer: keys unset, runs
/// will fail`.
pub fn key_alert_short(missing: &[(String, String)]) -> Option<String> {
    match missing {
        [] => None,
        [(agent, var)] => Some(format!("{agent}: {var} unset, runs will fail")),
        many => {
            let names: Vec<&str> = many.iter().map(|(a, _)| a.as_str()).collect();
            Some(format!(
                "agents {}: keys unset, runs will fail",
                names.join(", ")
            ))
        }
    }
}

/// The footer's alert while a tool call awaits approval (any owner's run; the row's lease, the
/// one `a`/`x` answer), naming the oldest waiting call: `APPROVAL NEEDED: backup-db wants
/// files.write_file: a/x answers, or cronsole approve RUN --call CALL`. The command names the
/// call (`--call`): a run's calls wait one after another, and an answer typed from this line
/// must never reach a later call (the `a`/`x` keys answer the call their question names in the
/// same way). `with_command: false` gives the words without the command, for a footer too
/// narrow for it: a command cut before its `--call` would answer whatever call waits.
pub fn approval_alert(snap: &Snapshot, with_command: bool) -> Option<String> {
    let mut waiting: Vec<(&str, uuid::Uuid, &crate::model::AwaitingApproval)> = snap
        .jobs
        .iter()
        .flat_map(|j| {
            j.rt.lease.iter().filter_map(move |l| {
                let a = l.awaiting.as_ref().filter(|a| a.answer.is_none())?;
                Some((j.def.name.as_str(), l.run_id, a))
            })
        })
        .collect();
    waiting.sort_by_key(|w| w.2.since);
    let (job, run_id, a) = waiting.first()?;
    let more = match waiting.len() - 1 {
        0 => String::new(),
        n => format!(" (+{n} more: cronsole approvals)"),
    };
    let (job, tool, call) = (text::line(job), text::line(&a.tool), text::line(&a.call_id));
    Some(if with_command {
        format!(
            "APPROVAL NEEDED: {job} wants {tool}: a/x answers, or cronsole approve {run_id} \
             --call {call}{more}"
        )
    } else {
        format!("APPROVAL NEEDED: {job} wants {tool}: a/x answers{more}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tui::testdata;

    fn unset_except(set: &'static [&'static str]) -> impl Fn(&str) -> bool {
        move |v| set.contains(&v)
    }

    #[test]
    fn an_agent_with_its_key_unset_is_named_with_its_variable() {
        let (snap, _) = testdata::fixed();
        let missing = missing_keys(&snap, &unset_except(&["ANTHROPIC_API_KEY"]));
        assert_eq!(
            key_alert_text(&missing).as_deref(),
            Some("agent writer: OPENAI_API_KEY unset — its runs will fail")
        );
        let missing = missing_keys(&snap, &unset_except(&[]));
        assert_eq!(
            key_alert_text(&missing).as_deref(),
            Some("agents analyst, writer: keys unset — their runs will fail")
        );
        let all = &["ANTHROPIC_API_KEY", "OPENAI_API_KEY"];
        assert!(missing_keys(&snap, &unset_except(all)).is_empty());
        assert_eq!(key_alert_text(&[]), None);
    }

    /// Re-applying a file changes the snapshot: an agent no live job calls is not warned about.
    #[test]
    fn the_alert_follows_the_jobs_that_use_the_agent() {
        let (mut snap, _) = testdata::fixed();
        for j in snap.jobs.iter_mut().filter(|j| j.def.agent.is_some()) {
            j.rt.retired = true;
        }
        assert!(missing_keys(&snap, &unset_except(&[])).is_empty());
        let (mut snap, _) = testdata::fixed();
        snap.settings.agents.clear();
        assert!(missing_keys(&snap, &unset_except(&[])).is_empty());
    }
}

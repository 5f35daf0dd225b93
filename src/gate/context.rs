//! Context chaining (`context: [job, ...]`) and prompt assembly, the step between the gates and
//! the model call.
//!
//! Owns: the `### Context from 'job'` blocks, the run/skip decision for missing context, and the
//! one function that assembles an agent's prompt. Must not touch: the store (the caller looks up
//! each named job's latest `succeeded` result and passes it in), the model call.
//!
//! Prompt layout (sections separated by a blank line, empty ones omitted):
//! ```text
//! Notepad (state since last run):
//! key=value
//!
//! <message>
//!
//! <gate context: monitor diff / first output, or pre_run stdout>
//!
//! ### Context from 'job-a'
//! <latest succeeded result of job-a, ≤ context_max_chars>
//! ```
//! Decision: a chained result longer than `context_max_chars` keeps its *first* characters and is
//! marked `…[truncated]`.

use std::collections::BTreeMap;

use crate::model::{JobState, OnMissingContext, truncate_marked};

/// One `### Context from 'job'` block.
pub fn context_block(job: &str, result: &str, max_chars: usize) -> String {
    format!(
        "### Context from '{job}'\n{}",
        truncate_marked(result, max_chars)
    )
}

/// What to do about `context_from`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContextDecision {
    /// Go ahead with these blocks (in `context_from` order); `missing` lists named jobs that had
    /// no successful run yet (`on_missing_context: run`).
    Run {
        blocks: Vec<String>,
        missing: Vec<String>,
    },
    /// `on_missing_context: skip` and some named job has no successful run: `skipped`.
    Skip { reason: String },
}

/// Decide from the latest succeeded results of the named jobs (`latest[name]`; absent = none).
pub fn decide(
    context_from: &[String],
    latest: &BTreeMap<String, String>,
    max_chars: usize,
    on_missing: OnMissingContext,
) -> ContextDecision {
    let mut blocks = Vec::new();
    let mut missing = Vec::new();
    for name in context_from {
        match latest.get(name) {
            Some(result) => blocks.push(context_block(name, result, max_chars)),
            None => missing.push(name.clone()),
        }
    }
    if !missing.is_empty() && on_missing == OnMissingContext::Skip {
        let names: Vec<String> = missing.iter().map(|n| format!("'{n}'")).collect();
        return ContextDecision::Skip {
            reason: format!(
                "missing context: no succeeded run yet of {} (on_missing_context: skip)",
                names.join(", ")
            ),
        };
    }
    ContextDecision::Run { blocks, missing }
}

/// The agent's prompt: notepad + message + gate context + context blocks, in the
/// order the module doc shows.
/// Only `state.notepad` is read from the state; monitor internals never reach the prompt.
pub fn assemble_prompt(
    state: &JobState,
    message: &str,
    gate_context: Option<&str>,
    context_blocks: &[String],
) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(n) = super::notepad::render(state) {
        parts.push(n);
    }
    if !message.trim().is_empty() {
        parts.push(message.trim_end().to_string());
    }
    if let Some(c) = gate_context.filter(|c| !c.trim().is_empty()) {
        parts.push(c.trim_end().to_string());
    }
    parts.extend(context_blocks.iter().map(|b| b.trim_end().to_string()));
    parts.join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::{GateOutcome, monitor};
    use crate::model::MonitorState;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn block_format_and_truncation() {
        assert_eq!(
            context_block("job-a", "hello", 100),
            "### Context from 'job-a'\nhello"
        );
        assert_eq!(
            context_block("job-a", "héllo world", 2),
            "### Context from 'job-a'\nhé…[truncated]"
        );
    }

    #[test]
    fn missing_context_runs_or_skips() {
        let mut latest = BTreeMap::new();
        latest.insert("a".to_string(), "A result".to_string());
        let from = names(&["a", "b"]);
        assert_eq!(
            decide(&from, &latest, 4000, OnMissingContext::Run),
            ContextDecision::Run {
                blocks: vec!["### Context from 'a'\nA result".into()],
                missing: names(&["b"]),
            }
        );
        match decide(&from, &latest, 4000, OnMissingContext::Skip) {
            ContextDecision::Skip { reason } => {
                assert!(
                    reason.contains("'b'") && !reason.contains("'a'"),
                    "{reason}"
                )
            }
            other => panic!("expected skip, got {other:?}"),
        }
        latest.insert("b".to_string(), "B".to_string());
        assert!(matches!(
            decide(&from, &latest, 4000, OnMissingContext::Skip),
            ContextDecision::Run { missing, .. } if missing.is_empty()
        ));
    }

    #[test]
    fn prompt_order_and_layout() {
        let mut st = JobState::default();
        st.notepad.insert("k".into(), "v".into());
        let p = assemble_prompt(
            &st,
            "Explain the change.",
            Some("--- previous\n+++ current\n-a\n+b\n"),
            &["### Context from 'x'\nX".to_string()],
        );
        assert_eq!(
            p,
            "Notepad (state since last run):\nk=v\n\nExplain the change.\n\n\
             --- previous\n+++ current\n-a\n+b\n\n### Context from 'x'\nX"
        );
        assert_eq!(assemble_prompt(&JobState::default(), "m", None, &[]), "m");
    }

    #[test]
    fn monitor_hash_and_preview_never_reach_the_prompt() {
        let first = monitor::watermark(b"PREVIEW-TEXT-ONE\n");
        let GateOutcome::Go {
            context, monitor, ..
        } = monitor::evaluate(b"PREVIEW-TEXT-TWO\n", Some(&first))
        else {
            panic!("expected go");
        };
        let new = monitor.unwrap();
        let st = JobState {
            notepad: [("note".to_string(), "kept".to_string())].into(),
            monitor: Some(MonitorState {
                hash: new.hash.clone(),
                preview: "UNRELATED-STORED-PREVIEW".into(),
                truncated: false,
            }),
            ..JobState::default()
        };
        let p = assemble_prompt(&st, "msg", context.as_deref(), &[]);
        assert!(p.contains("note=kept"));
        assert!(!p.contains(&new.hash), "hash leaked: {p}");
        assert!(!p.contains(&first.hash), "old hash leaked: {p}");
        assert!(
            !p.contains("UNRELATED-STORED-PREVIEW"),
            "preview leaked: {p}"
        );
        assert!(!p.contains("hash") && !p.contains("preview"), "{p}");
    }
}

//! What a chained run (`trigger: chain`, a job with `after:`) receives from its parents: context
//! blocks for an agent's prompt and environment variables for its commands.
//!
//! Owns: the names and forms of those variables and blocks. Must not touch: the store (the
//! parents' runs come with the claim, in its lease), claiming.
//!
//! Variables set for every command of a chained run (the action, `pre_run`, a monitor command):
//! - `CRONSOLE_TRIGGER=chain`
//! - `CRONSOLE_PARENT_JOB`, `CRONSOLE_PARENT_RUN_ID`, `CRONSOLE_PARENT_STATUS`,
//!   `CRONSOLE_PARENT_OUTPUT`: the parent run that released this run (for fan-in, the last of
//!   its parents to finish). The output is the parent's result (else its error, else its
//!   reason), at most 8000 characters, secrets already redacted.
//! - `CRONSOLE_PARENTS`: every parent run, a JSON array of
//!   `{job, run_id, status, finished_at, output}` in `after:` order.
//!
//! Prompt: each parent's output is a `### Context from 'parent'` block — the very block
//! `context_from` writes, cut at `context_max_chars`. A parent also named in `context_from` gets
//! one block, holding this parent run's output (not merely its latest success).

use std::collections::BTreeMap;

use crate::model::ParentRun;

/// The environment variables of a chained run's commands (empty for other runs).
pub(crate) fn parent_env(chain: &[ParentRun]) -> Vec<(String, String)> {
    let Some(p) = crate::store::policy::chain::releaser(chain) else {
        return Vec::new();
    };
    let mut v = vec![
        ("CRONSOLE_TRIGGER".to_string(), "chain".to_string()),
        ("CRONSOLE_PARENT_JOB".to_string(), p.job.clone()),
        ("CRONSOLE_PARENT_RUN_ID".to_string(), p.run_id.to_string()),
        ("CRONSOLE_PARENT_STATUS".to_string(), p.status.to_string()),
        (
            "CRONSOLE_PARENT_OUTPUT".to_string(),
            // A NUL cannot be passed in an environment variable.
            p.output.clone().unwrap_or_default().replace('\0', ""),
        ),
    ];
    let all: Vec<serde_json::Value> = chain
        .iter()
        .map(|p| {
            serde_json::json!({
                "job": p.job,
                "run_id": p.run_id,
                "status": p.status,
                "finished_at": p.finished_at,
                "output": p.output.as_deref().map(|o| o.replace('\0', "")),
            })
        })
        .collect();
    v.push((
        "CRONSOLE_PARENTS".to_string(),
        serde_json::Value::Array(all).to_string(),
    ));
    v
}

/// Fold the parents' outputs into the `context_from` results (`latest`): a parent named in
/// `context_from` gets this run's output; the others are returned as extra blocks, in
/// `after:` order.
pub(crate) fn fold_into_context(
    chain: &[ParentRun],
    context_from: &[String],
    latest: &mut BTreeMap<String, String>,
    max_chars: usize,
) -> Vec<String> {
    let mut extra = Vec::new();
    for p in chain {
        let out = p.output.clone().unwrap_or_default();
        if context_from.contains(&p.job) {
            latest.insert(p.job.clone(), out);
        } else {
            extra.push(crate::gate::context::context_block(&p.job, &out, max_chars));
        }
    }
    extra
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Status;
    use chrono::DateTime;
    use uuid::Uuid;

    fn parent(job: &str, at: i64, out: &str) -> ParentRun {
        ParentRun {
            job: job.into(),
            run_id: Uuid::from_u128(at as u128),
            status: Status::Succeeded,
            finished_at: DateTime::from_timestamp(at, 0).unwrap(),
            output: Some(out.into()),
        }
    }

    #[test]
    fn env_names_the_last_parent_to_finish_and_lists_all() {
        assert!(parent_env(&[]).is_empty());
        let env: BTreeMap<String, String> =
            parent_env(&[parent("a", 20, "A\0out"), parent("b", 10, "B")])
                .into_iter()
                .collect();
        assert_eq!(env["CRONSOLE_PARENT_JOB"], "a");
        assert_eq!(
            env["CRONSOLE_PARENT_RUN_ID"],
            Uuid::from_u128(20).to_string()
        );
        assert_eq!(env["CRONSOLE_PARENT_STATUS"], "succeeded");
        assert_eq!(env["CRONSOLE_PARENT_OUTPUT"], "Aout");
        let all: serde_json::Value = serde_json::from_str(&env["CRONSOLE_PARENTS"]).unwrap();
        assert_eq!(all[1]["job"], "b");
        assert_eq!(all[1]["output"], "B");
    }

    #[test]
    fn parents_reach_the_prompt_as_context_blocks() {
        let mut latest = BTreeMap::from([("a".to_string(), "older success".to_string())]);
        let extra = fold_into_context(
            &[parent("a", 1, "fresh"), parent("b", 2, "from b")],
            &["a".to_string()],
            &mut latest,
            4,
        );
        assert_eq!(latest["a"], "fresh");
        assert_eq!(
            extra,
            vec!["### Context from 'b'\nfrom…[truncated]".to_string()]
        );
    }
}

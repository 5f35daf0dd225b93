//! What a run leaves behind: its status, its trigger and its history row, with the per-attempt log.
//!
//! Owns: the row's fields and their JSON names (the contract of `history --json` and of the
//! stores' history files), the status and trigger words shared by the CLI and the console, and
//! the cut applied to a run's result. Must not touch: I/O, clocks, the store.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Result of one tick for one job. Exactly one per history row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The action ran and completed (a monitor saw a change, or it was its first probe).
    Succeeded,
    /// The action raised, timed out after every attempt, exceeded a bound, or the probe errored.
    Failed,
    /// Not run: a gate said no, a budget was reached, a run was still live (overlap), no message,
    /// or missing context with `on_missing_context: skip`; `reason` says which.
    Skipped,
    /// A monitor's source was unchanged: no model call, no delivery, no tokens.
    NoChange,
    /// Recurring slots that fell due while no owner ran and are older than `misfire_grace_seconds`.
    Missed,
    /// A claimed run whose lease expired without a completion (crash, kill -9, OOM, hang).
    Abandoned,
}

impl Status {
    /// Every status, in the order the per-hour counters ([`super::HourBucket::counts`]) use.
    pub const ALL: [Status; 6] = [
        Status::Succeeded,
        Status::Failed,
        Status::Skipped,
        Status::NoChange,
        Status::Missed,
        Status::Abandoned,
    ];

    /// A run that ended so counts toward `max_runs` and `once` (when its trigger does): its
    /// action ran, and succeeded or failed (a timeout and a cancel are `failed`). `skipped` (a
    /// gate, a budget, missing context), `no_change` (a monitor's source did not change: no call,
    /// no delivery), `missed` and `abandoned` rows are history rows but not runs: a gated job
    /// under `max_runs: 3` does its work three times, however many quiet ticks its gate skips.
    /// (An `abandoned` run counts once its own late end is recorded.)
    pub fn counts_toward_max_runs(self) -> bool {
        matches!(self, Status::Succeeded | Status::Failed)
    }

    /// The status's word in JSON, the CLI and the console (`no_change`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::Skipped => "skipped",
            Status::NoChange => "no_change",
            Status::Missed => "missed",
            Status::Abandoned => "abandoned",
        }
    }

    /// The status a word of [`Status::as_str`] names; `None` for any other text.
    pub fn parse(s: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a run happened (`trigger`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// A slot of the job's schedule came due.
    Schedule,
    /// An operator asked for a run now (`cronsole trigger`, `t` in the console).
    Manual,
    /// A one-shot run abandoned once and offered again (crash recovery).
    Recovery,
    /// `run_immediately: true`: the first fire as soon as the job is first seen.
    Immediate,
    /// An operator's retry of an earlier run (`cronsole retry RUN_ID`, `R` in the console).
    Retry,
    /// One slot of a past window (`cronsole backfill NAME --from T --to T`).
    Backfill,
    /// The job's `after:` parent(s) finished; the row names the parent run.
    Chain,
}

impl Trigger {
    /// The trigger's word in JSON, the CLI and the console.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Schedule => "schedule",
            Trigger::Manual => "manual",
            Trigger::Recovery => "recovery",
            Trigger::Immediate => "immediate",
            Trigger::Retry => "retry",
            Trigger::Backfill => "backfill",
            Trigger::Chain => "chain",
        }
    }

    /// Runs an operator asked for (manual, retry, backfill): runs of their own, outside the
    /// once-per-slot rule; they never move the schedule nor count toward `max_runs`.
    pub(crate) fn is_operator(self) -> bool {
        matches!(self, Trigger::Manual | Trigger::Retry | Trigger::Backfill)
    }

    /// Runs of their own beside the schedule (operator runs and chained runs): they never move
    /// the schedule nor count toward `max_runs`.
    pub(crate) fn is_extra(self) -> bool {
        self.is_operator() || self == Trigger::Chain
    }
}

/// One history row. Field names are the JSON contract.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryRow {
    /// This run's id: one per run, shared by its lease, its attempts and its row.
    pub run_id: Uuid,
    /// The job's name.
    pub job: String,
    /// How the run (or the slots the row stands for) ended.
    pub status: Status,
    /// The slot this row stands for (UTC), null for a manual run.
    pub slot: Option<DateTime<Utc>>,
    /// For rows standing for several slots (`missed`, overlap `skipped`, a coalesced fire): the
    /// last slot of the range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot_end: Option<DateTime<Utc>>,
    /// A coalesced fire (`misfire_grace_seconds` null) standing for several overdue slots: the first of
    /// them. Its `slot` is the one it names (cron: the latest; every: the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot_start: Option<DateTime<Utc>>,
    /// Why the run happened.
    pub trigger: Trigger,
    /// When the action (or the row's decision) started.
    pub started_at: DateTime<Utc>,
    /// When it ended (for a row that ran nothing, when the decision was made).
    pub finished_at: DateTime<Utc>,
    /// `finished_at - started_at` in milliseconds.
    pub duration_ms: u64,
    /// How many times the action was attempted (0 when it never ran).
    pub attempts: u32,
    /// The owner that wrote the row (`host:pid:id` by default, [`crate::engine::new_owner_id`]).
    pub owner: String,
    /// Why the run was skipped, missed or failed, in words (`budget reached: …`, `overlap`, …).
    pub reason: Option<String>,
    /// The last error of the action, redacted.
    pub error: Option<String>,
    /// The output (model reply or command stdout), at most `RESULT_MAX_CHARS` characters, marked
    /// when cut.
    pub result: Option<String>,
    /// The monitor diff seeded into the prompt, or `None`.
    pub diff: Option<String>,
    /// The model that answered (agent jobs).
    pub model: Option<String>,
    /// Prompt tokens of the model's reply (a failed call reports none).
    pub input_tokens: u64,
    /// Reply tokens of the model's reply.
    pub output_tokens: u64,
    /// What the reply cost (USD, from the `pricing:` table; see `unpriced`).
    pub cost_usd: f64,
    /// The result reached every sink in the job's `deliver:` list (false when it has none).
    pub delivered: bool,
    /// Why a delivery failed; the status stays what the action made it.
    pub delivery_error: Option<String>,
    /// How many slots a `missed`/overlap `skipped` row or a coalesced fire stands for, when more
    /// than one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots_count: Option<u64>,
    /// Set when the run completed after its lease had been taken over.
    #[serde(default, skip_serializing_if = "is_false")]
    pub stale_lease: bool,
    /// Spend is known to be incomplete for this row (unpriced model, or no usage in the reply).
    #[serde(default, skip_serializing_if = "is_false")]
    pub unpriced: bool,
    /// The run's real end, written while an `abandoned` row for the same run already stood in
    /// history: an owner recovering the lapsed lease wrote it and died before the lease's
    /// release reached the store. Readers hide that `abandoned` row (it never happened).
    #[serde(default, skip_serializing_if = "is_false")]
    pub supersedes_abandoned: bool,
    /// The run was stopped before its action ended (an operator's cancel): like an `abandoned`
    /// row, the row carries every budget reservation its run still held when it is counted —
    /// answered turns at their cost, a request still in flight at its reservation — so the
    /// money the provider may have billed stays on the record and in the budget.
    #[serde(default, skip_serializing_if = "is_false")]
    pub cut_short: bool,
    /// A chained run (`trigger: chain`): the parent job and run that released it (for fan-in,
    /// the last of its parents to finish).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_job: Option<String>,
    /// The parent run that released a chained run (see [`HistoryRow::parent_job`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_run_id: Option<Uuid>,
    /// One entry per attempt of the action, in order (start, end, outcome, error, tokens, cost).
    /// Rows written before this field existed have none: readers fall back to `attempts`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempt_log: Vec<Attempt>,
    /// Model turns of an agent run with tools (absent for other runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turns: Option<u32>,
    /// Tool calls the model made in an agent run with tools, refused ones included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<u32>,
    /// What each turn and each tool call did, bounded (`crate::transcript`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript: Option<crate::transcript::Transcript>,
    /// The wall clock was stepped while this run ran (`+2d`, `-1h`: see
    /// [`crate::clock::step_words`]): its `started_at` and `finished_at` straddle the step, and
    /// `duration_ms` is the time that really passed. Also on the rows of the first claim after
    /// a step (its runs, `missed` and overlap rows, `abandoned` recoveries): their slots were
    /// decided on the stepped clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_stepped: Option<String>,
    /// On an `abandoned` row written because the run's lease expired: the owner that
    /// recovered the run (found the lease lapsed and wrote this row). The owner the run
    /// belonged to is named in `reason`. Absent on a row the run's own owner wrote (a run
    /// stopped by its owner's shutdown, every other row).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovered_by: Option<String>,
    /// Not stored: on an `abandoned` row, from the lease it ends until the run's own record is
    /// put on it, the answer an operator gave to the call the run waited for (the call's id,
    /// the answer). The store writes it onto that call of the transcript (`approval`; the call
    /// never ran).
    #[serde(skip)]
    pub(crate) unrun_answer: Option<(String, crate::transcript::Approval)>,
}

/// How one attempt of a run's action ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcome {
    /// The attempt ended without an error.
    Succeeded,
    /// The attempt raised, timed out or exited non-zero.
    Failed,
}

impl AttemptOutcome {
    /// The outcome's word in JSON and the console.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Succeeded => "succeeded",
            AttemptOutcome::Failed => "failed",
        }
    }
}

/// One attempt of a run's action (a command run or a model call), as recorded on its row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    /// When the attempt started.
    pub started_at: DateTime<Utc>,
    /// When it ended.
    pub finished_at: DateTime<Utc>,
    /// Whether it ended well.
    pub outcome: AttemptOutcome,
    /// The attempt's error (redacted, at most `Attempt::ERROR_MAX_CHARS` characters; the
    /// row's `error` keeps the last one whole).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Prompt tokens of this attempt's model call.
    #[serde(default)]
    pub input_tokens: u64,
    /// Reply tokens of this attempt's model call.
    #[serde(default)]
    pub output_tokens: u64,
    /// What the reply cost (a failed call is not billed by providers: 0).
    #[serde(default)]
    pub cost_usd: f64,
}

impl Attempt {
    /// An attempt's error is cut to this many characters (the mark included), so a row with
    /// many failed attempts stays bounded.
    pub(crate) const ERROR_MAX_CHARS: usize = 500;

    /// A finished attempt; `error` is cut to `Attempt::ERROR_MAX_CHARS`.
    pub fn new(
        started_at: DateTime<Utc>,
        finished_at: DateTime<Utc>,
        error: Option<&str>,
    ) -> Attempt {
        let error = error.map(|e| {
            if e.chars().count() <= Self::ERROR_MAX_CHARS {
                e.to_string()
            } else {
                let mut cut: String = e.chars().take(Self::ERROR_MAX_CHARS - 1).collect();
                cut.push('…');
                cut
            }
        });
        Attempt {
            started_at,
            finished_at,
            outcome: if error.is_some() {
                AttemptOutcome::Failed
            } else {
                AttemptOutcome::Succeeded
            },
            error,
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: 0.0,
        }
    }
}

impl HistoryRow {
    /// A bare row with every optional field empty; callers fill in what they know.
    pub fn new(
        job: &str,
        status: Status,
        trigger: Trigger,
        slot: Option<DateTime<Utc>>,
        owner: &str,
        at: DateTime<Utc>,
    ) -> Self {
        HistoryRow {
            run_id: Uuid::new_v4(),
            job: job.to_string(),
            status,
            slot,
            slot_end: None,
            slot_start: None,
            trigger,
            started_at: at,
            finished_at: at,
            duration_ms: 0,
            attempts: 0,
            owner: owner.to_string(),
            reason: None,
            error: None,
            result: None,
            diff: None,
            model: None,
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: 0.0,
            delivered: false,
            delivery_error: None,
            slots_count: None,
            stale_lease: false,
            unpriced: false,
            supersedes_abandoned: false,
            cut_short: false,
            parent_job: None,
            parent_run_id: None,
            attempt_log: Vec::new(),
            turns: None,
            tool_calls: None,
            transcript: None,
            clock_stepped: None,
            recovered_by: None,
            unrun_answer: None,
        }
    }
}

/// Maximum characters of a run's result kept in history.
pub(crate) const RESULT_MAX_CHARS: usize = 8000;

/// Cut `s` to at most `max` characters, marking the cut (`result`).
pub(crate) fn truncate_marked(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_string(),
        Some((idx, _)) => format!("{}…[truncated]", &s[..idx]),
    }
}

/// `skip_serializing_if` for flags that are off by default: the stored form leaves them out.
pub(super) fn is_false(b: &bool) -> bool {
    !*b
}

#[cfg(test)]
mod tests {
    use chrono::DateTime;

    use super::*;

    /// The guide's `history --json` paragraph names every field a row can carry: a field added
    /// to `HistoryRow` without a word in the guide fails here.
    #[test]
    fn the_cli_guide_names_every_history_row_field() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let src = std::fs::read_to_string(root.join("src/model/history.rs")).unwrap();
        let body = src
            .split_once("pub struct HistoryRow {")
            .and_then(|(_, rest)| rest.split_once("\n}\n"))
            .map(|(body, _)| body)
            .expect("the HistoryRow struct");
        let fields: Vec<&str> = body
            .lines()
            .filter_map(|l| l.strip_prefix("    pub "))
            .filter_map(|l| l.split_once(':').map(|(name, _)| name))
            .collect();
        assert!(fields.len() > 30, "{fields:?}");
        let guide = std::fs::read_to_string(root.join("docs/guide/cli.md")).unwrap();
        let para = guide
            .split_once("`history --json` prints one JSON object per row:")
            .and_then(|(_, rest)| rest.split_once("\n\n"))
            .map(|(para, _)| para)
            .expect("the history --json paragraph of docs/guide/cli.md");
        let missing: Vec<_> = fields
            .iter()
            .filter(|f| !para.contains(&format!("`{f}`")))
            .collect();
        assert!(
            missing.is_empty(),
            "docs/guide/cli.md does not name {missing:?}"
        );
    }

    #[test]
    fn status_round_trips_through_its_json_name() {
        for st in Status::ALL {
            let json = serde_json::to_string(&st).unwrap();
            assert_eq!(json, format!("\"{}\"", st.as_str()));
            assert_eq!(Status::parse(st.as_str()), Some(st));
        }
        assert_eq!(Status::parse("nope"), None);
    }

    #[test]
    fn truncation_is_marked_and_char_safe() {
        assert_eq!(truncate_marked("héllo", 10), "héllo");
        assert_eq!(truncate_marked("héllo", 2), "hé…[truncated]");
    }

    #[test]
    fn history_row_omits_empty_extras() {
        let t = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .to_utc();
        let row = HistoryRow::new("a", Status::Missed, Trigger::Schedule, Some(t), "o", t);
        let v: serde_json::Value = serde_json::to_value(&row).unwrap();
        assert!(v.get("stale_lease").is_none());
        assert!(v.get("slots_count").is_none());
        assert!(v.get("attempt_log").is_none());
        assert_eq!(v["status"], "missed");
        assert_eq!(v["slot"], "2026-01-01T00:00:00Z");
    }

    #[test]
    fn attempt_log_is_additive_old_rows_still_read() {
        let t = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .to_utc();
        let mut row = HistoryRow::new("a", Status::Failed, Trigger::Retry, None, "o", t);
        row.attempts = 2;
        row.attempt_log = vec![
            Attempt::new(t, t + chrono::Duration::seconds(1), Some("HTTP 503")),
            Attempt::new(t + chrono::Duration::seconds(3), t, Some(&"x".repeat(900))),
        ];
        let json = serde_json::to_string(&row).unwrap();
        assert!(json.contains(r#""outcome":"failed""#), "{json}");
        let back: HistoryRow = serde_json::from_str(&json).unwrap();
        assert_eq!(back, row);
        assert_eq!(
            back.attempt_log[1].error.as_ref().unwrap().chars().count(),
            Attempt::ERROR_MAX_CHARS
        );
        // A row written before the field existed reads with an empty log.
        let mut v: serde_json::Value = serde_json::from_str(&json).unwrap();
        v.as_object_mut().unwrap().remove("attempt_log");
        let old: HistoryRow = serde_json::from_value(v).unwrap();
        assert!(old.attempt_log.is_empty());
        assert_eq!(old.attempts, 2);
        assert_eq!(Attempt::new(t, t, None).outcome, AttemptOutcome::Succeeded);
    }
}

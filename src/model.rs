//! The shared vocabulary of cronsole: job definitions as validated from the jobs file, the
//! per-job runtime record the store keeps, run statuses and the history row (SPEC §1, §2, §4).
//!
//! Owns: plain data types and their serde forms (the JSON field names here are the contract for
//! `--json` output and for the file store). Must not touch: I/O, clocks, the store, the UI. Every
//! other module speaks in these types, so keep them free of behaviour beyond small helpers.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::schedule::ScheduleSpec;

/// Result of one tick for one job (SPEC §4). Exactly one per history row.
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
    /// Every status, in the order the per-hour counters ([`HourBucket::counts`]) use.
    pub const ALL: [Status; 6] = [
        Status::Succeeded,
        Status::Failed,
        Status::Skipped,
        Status::NoChange,
        Status::Missed,
        Status::Abandoned,
    ];

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

/// Why a run happened (SPEC §4 `trigger`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// A slot of the job's schedule came due.
    Schedule,
    /// An operator asked for a run now (`cronsole trigger`, `t` in the console).
    Manual,
    /// A one-shot run abandoned once and offered again (SPEC §6 crash recovery).
    Recovery,
    /// `run_immediately: true`: the first fire as soon as the job is first seen.
    Immediate,
    /// An operator's retry of an earlier run (`cronsole retry RUN_ID`, `R` in the console).
    Retry,
    /// One slot of a past window (`cronsole backfill NAME --from T --to T`).
    Backfill,
    /// The job's `after:` parent(s) finished (issue 16 item 1); the row names the parent run.
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
    pub fn is_operator(self) -> bool {
        matches!(self, Trigger::Manual | Trigger::Retry | Trigger::Backfill)
    }

    /// Runs of their own beside the schedule (operator runs and chained runs): they never move
    /// the schedule nor count toward `max_runs`.
    pub fn is_extra(self) -> bool {
        self.is_operator() || self == Trigger::Chain
    }
}

/// When an `after:` entry fires (issue 16 item 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChainOn {
    /// The parent's run `succeeded`.
    Success,
    /// The parent's run `failed` or was `abandoned`.
    Failure,
    /// The parent's run ended `succeeded`, `failed`, `no_change` or `abandoned` (a run that
    /// was `skipped` did not run its action and fires nothing).
    Completion,
    /// The parent is a monitor and its gate reported a change (its run was not `no_change`
    /// nor `skipped`: it `succeeded` or `failed` after the change).
    Change,
}

impl ChainOn {
    /// Every entry kind ([`ChainOn::parse`] looks the `on:` words up here).
    pub const ALL: [ChainOn; 4] = [
        ChainOn::Success,
        ChainOn::Failure,
        ChainOn::Completion,
        ChainOn::Change,
    ];

    /// The `on:` word of the entry.
    pub fn as_str(self) -> &'static str {
        match self {
            ChainOn::Success => "success",
            ChainOn::Failure => "failure",
            ChainOn::Completion => "completion",
            ChainOn::Change => "change",
        }
    }

    /// The entry kind an `on:` word names; `None` for any other text.
    pub fn parse(s: &str) -> Option<ChainOn> {
        ChainOn::ALL.into_iter().find(|o| o.as_str() == s)
    }

    /// Whether a parent run that ended with `status` fires this entry.
    pub fn fires_on(self, status: Status) -> bool {
        match self {
            ChainOn::Success => status == Status::Succeeded,
            ChainOn::Failure => matches!(status, Status::Failed | Status::Abandoned),
            ChainOn::Completion => matches!(
                status,
                Status::Succeeded | Status::Failed | Status::NoChange | Status::Abandoned
            ),
            ChainOn::Change => matches!(status, Status::Succeeded | Status::Failed),
        }
    }
}

/// One `after:` entry of a job: run when `job` finishes as `on` says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct After {
    /// The parent job's name.
    pub job: String,
    /// Which of its endings fire this job.
    pub on: ChainOn,
}

/// A parent's finished run as a chained job sees it: recorded in the child's record in the
/// same persist as the parent's completion, carried by the chained run's lease.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParentRun {
    /// The parent job's name.
    pub job: String,
    /// The parent's run.
    pub run_id: Uuid,
    /// How it ended.
    pub status: Status,
    /// When it ended.
    pub finished_at: DateTime<Utc>,
    /// The run's result (else its error, else its reason), cut to [`CHAIN_OUTPUT_MAX_CHARS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

/// Most characters of a parent's output a chained job receives (prompt and
/// `CRONSOLE_PARENT_OUTPUT`).
pub const CHAIN_OUTPUT_MAX_CHARS: usize = RESULT_MAX_CHARS;

/// A run an operator queued (retry or backfill) that no owner has taken yet. Manual triggers
/// keep their own field ([`JobRuntime::trigger_requested_at`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueuedRun {
    /// [`Trigger::Retry`] or [`Trigger::Backfill`].
    pub trigger: Trigger,
    /// The slot the run stands for: the retried run's slot, or the backfilled slot.
    pub slot: Option<DateTime<Utc>>,
    /// When the operator asked for it.
    pub requested_at: DateTime<Utc>,
    /// The run a retry repeats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<Uuid>,
}

/// Most runs one job may have queued (a backfill of a long window is refused past this).
pub const QUEUE_MAX: usize = 1000;

/// One history row (SPEC §4). Field names are the JSON contract.
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
    /// A coalesced fire (SPEC §5, grace null) standing for several overdue slots: the first of
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
    /// The output (model reply or command stdout), at most [`RESULT_MAX_CHARS`] characters, marked
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
    /// Set when the run completed after its lease had been taken over (SPEC §6).
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
    /// The attempt's error (redacted, at most [`Attempt::ERROR_MAX_CHARS`] characters; the
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
    pub const ERROR_MAX_CHARS: usize = 500;

    /// A finished attempt; `error` is cut to [`Attempt::ERROR_MAX_CHARS`].
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

fn is_false(b: &bool) -> bool {
    !*b
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
            parent_job: None,
            parent_run_id: None,
            attempt_log: Vec::new(),
        }
    }
}

/// Maximum characters of a run's result kept in history (SPEC §4).
pub const RESULT_MAX_CHARS: usize = 8000;
/// Cap of the serialised per-job state (SPEC §9.3).
pub const STATE_MAX_BYTES: usize = 16 * 1024;

/// What a job does when it runs (exactly one of `agent` or `command`, SPEC §2.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Action {
    /// Ask a model: the `agents:` entry `agent` with the prompt `message`.
    Agent {
        /// Name of the `agents:` entry.
        agent: String,
        /// The prompt (empty: the run is `skipped`, reason "no message").
        message: String,
    },
    /// Run a shell command and deliver its stdout verbatim (SPEC §10.1).
    Command {
        /// The command line, run by `/bin/sh -c` in the jobs file's directory.
        command: String,
        /// `command_timeout_seconds`: an attempt's process group is killed after this long (or
        /// after the job's `timeout_seconds`, when shorter).
        timeout_seconds: f64,
    },
}

/// Where a monitor reads its source from (SPEC §9.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MonitorSource {
    /// Run a shell command; its stdout is what is compared.
    Command {
        /// The command line, run by `/bin/sh -c` in the jobs file's directory.
        command: String,
    },
    /// Fetch a URL; its body is what is compared.
    Url {
        /// The `http`/`https` URL fetched on each probe.
        url: String,
        /// Allow loopback, private and link-local addresses (refused by default, SPEC §9.2).
        allow_private: bool,
    },
}

/// The optional gate in front of the action (`monitor` and `pre_run` are exclusive).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Gate {
    /// Run only when the source changed since the last good probe (SPEC §9.2).
    Monitor {
        /// What the monitor probes.
        source: MonitorSource,
    },
    /// Run only when this shell command exits 0 (SPEC §9.1).
    PreRun {
        /// The gate's command line, run by `/bin/sh -c` in the jobs file's directory.
        command: String,
    },
}

/// What a job with `context_from:` does when a named job has no successful output yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum OnMissingContext {
    /// Run without that context block.
    #[default]
    Run,
    /// Record the run `skipped` (reason names the missing job).
    Skip,
}

/// A validated job definition (SPEC §2.1) with defaults already applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobDef {
    /// The job's unique name, shown everywhere.
    pub name: String,
    /// The parsed schedule (`every`, `cron` or `at`).
    pub schedule: ScheduleSpec,
    /// The schedule as the operator wrote it (for display).
    pub schedule_text: String,
    /// IANA zone for cron and naive `at`/`until` times.
    pub tz: String,
    /// What the job does when it runs.
    pub action: Action,
    /// The optional `monitor`/`pre_run` gate before the action.
    pub gate: Option<Gate>,
    /// Jobs whose latest successful result is prepended to the prompt (SPEC §9.4).
    pub context_from: Vec<String>,
    /// Most characters of each `context_from` block.
    pub context_max_chars: usize,
    /// What a run does when a `context_from` job has no result yet.
    pub on_missing_context: OnMissingContext,
    /// How late a recurring slot may still fire (SPEC §5); `None` = any overdue slot fires once.
    pub misfire_grace_seconds: Option<f64>,
    /// `once: true` is stored as `max_runs: Some(1)`.
    pub max_runs: Option<u64>,
    /// Retire the job at this instant (SPEC §7).
    pub until: Option<DateTime<Utc>>,
    /// Fire once as soon as the job is first seen, then follow the schedule.
    pub run_immediately: bool,
    /// Bound of one attempt of the action (seconds).
    pub timeout_seconds: f64,
    /// Total attempts of the action, the first included (SPEC §8: 3 = one try, two retries);
    /// 0 counts as 1.
    pub max_retries: u32,
    /// How long a claim holds without renewal before another owner may recover the run.
    pub lease_seconds: f64,
    /// Per-job budget brake (USD per budget period, SPEC §11).
    pub max_cost_usd: Option<f64>,
    /// Names of the `delivery:` sinks the result goes to.
    pub deliver: Vec<String>,
    /// Consecutive failures that open an incident and alert once (SPEC §12.2).
    pub alert_after_failures: u32,
    /// `enabled: false` = declared but paused.
    pub enabled: bool,
    /// Names of environment variables let through to this job's commands, gates and monitors
    /// although they hold an agent's API key (SPEC §15: key variables are removed by default).
    #[serde(default)]
    pub env_passthrough: Vec<String>,
    /// Free labels for selecting jobs in bulk (`--tag T`).
    #[serde(default)]
    pub tags: Vec<String>,
    /// Each slot fires at a deterministic offset in `[0, jitter_seconds)` after it
    /// (`schedule::jitter`); 0 = on the slot.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub jitter_seconds: f64,
    /// `only_on` / `except_on` calendars, resolved (`schedule::calendar`).
    #[serde(
        default,
        skip_serializing_if = "crate::schedule::calendar::DayRule::is_empty"
    )]
    pub days: crate::schedule::calendar::DayRule,
    /// What a slot does when it comes while a run of the job is still live (`overlap:`).
    #[serde(default, skip_serializing_if = "Overlap::is_skip")]
    pub overlap: Overlap,
    /// `after:` parents (issue 16 item 1): the job also runs (`trigger: chain`) once each of
    /// them has finished as its entry says since this job last ran for them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<After>,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// The `overlap:` policy of a job (issue 16 item 2): what a slot that comes due while a run of
/// the job is still live does. Every outcome leaves its row (`store::logic`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// The slot is recorded `skipped` (reason `overlap`) when the run ends (SPEC §6, default).
    #[default]
    Skip,
    /// The first such slot is remembered in the store and runs as soon as the run ends; any
    /// further one is recorded `skipped` overlap.
    BufferOne,
    /// The live run is cancelled (its process tree killed, row `failed`, reason
    /// [`crate::store::rules::reasons::REASON_SUPERSEDED`] …), then the slot runs.
    CancelPrevious,
    /// Runs of the job may overlap, each with its own lease, up to `max_concurrent_runs`; a
    /// slot beyond that bound is recorded `skipped` overlap at once.
    Allow {
        /// The bound on live runs of the job (at least 1).
        max_concurrent_runs: u32,
    },
}

impl Overlap {
    /// Whether this is `skip`, the default (the stored form then leaves `overlap` out).
    pub fn is_skip(&self) -> bool {
        *self == Overlap::Skip
    }

    /// The words the jobs file accepts (`allow` needs `max_concurrent_runs`).
    pub const NAMES: [&'static str; 4] = ["skip", "buffer_one", "cancel_previous", "allow"];

    /// The policy's word in the jobs file.
    pub fn name(&self) -> &'static str {
        match self {
            Overlap::Skip => "skip",
            Overlap::BufferOne => "buffer_one",
            Overlap::CancelPrevious => "cancel_previous",
            Overlap::Allow { .. } => "allow",
        }
    }

    /// Most runs of the job that may be live at once.
    pub fn max_runs(&self) -> usize {
        match self {
            Overlap::Allow {
                max_concurrent_runs,
            } => (*max_concurrent_runs).max(1) as usize,
            _ => 1,
        }
    }

    /// The store looks at the job while a run of it is live: to claim another run (`allow`) or
    /// to cancel the live one (`cancel_previous`). The owner running it does not hide it from
    /// its own claims then (it only never recovers its own leases of it).
    pub fn acts_while_running(&self) -> bool {
        matches!(self, Overlap::CancelPrevious | Overlap::Allow { .. })
    }
}

impl JobDef {
    /// The job's slot schedule: its `schedule` with `anchor`, restricted to the dates its
    /// calendars allow (in the job's zone).
    pub fn compile(
        &self,
        anchor: DateTime<Utc>,
    ) -> Result<crate::schedule::Compiled, crate::schedule::ScheduleError> {
        let c = crate::schedule::Compiled::new(&self.schedule, anchor)?;
        if self.days.is_empty() {
            return Ok(c);
        }
        Ok(c.on_days(&self.days, crate::schedule::parse_tz(&self.tz)?))
    }

    /// The instant the slot `slot` fires: the slot plus the job's jitter offset.
    pub fn fire_at(&self, slot: DateTime<Utc>) -> DateTime<Utc> {
        crate::schedule::jitter::fire_at(&self.name, slot, self.jitter_seconds)
    }

    /// A one-shot job: `once`/`max_runs: 1`, or an `at` schedule (SPEC §6 recovery table).
    pub fn is_one_shot(&self) -> bool {
        self.max_runs == Some(1) || self.schedule.is_at()
    }

    /// The `agents:` entry an agent job calls; `None` for a command job.
    pub fn agent_name(&self) -> Option<&str> {
        match &self.action {
            Action::Agent { agent, .. } => Some(agent),
            Action::Command { .. } => None,
        }
    }
}

/// LLM provider wire format (SPEC §10.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    /// OpenAI's chat-completions format (and compatible servers).
    Openai,
    /// Anthropic's messages format.
    Anthropic,
}

/// An `agents:` entry. Holds the *name* of the key's env var, never the key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentDef {
    /// The entry's name, as jobs' `agent:` give it.
    pub name: String,
    /// Which wire format `base_url` speaks.
    pub provider: Provider,
    /// Root URL of the provider's API.
    pub base_url: String,
    /// Name of the environment variable holding the API key.
    pub api_key_env: String,
    /// Model id sent with each call (and looked up in `pricing:`).
    pub model: String,
    /// System instructions sent with each call.
    pub instructions: String,
    /// Cap on the reply's tokens, sent to the provider.
    pub max_tokens: Option<u32>,
    /// Sampling temperature, sent when set.
    pub temperature: Option<f64>,
}

/// The body a webhook sink posts (SPEC §12.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum WebhookFormat {
    /// The run's history row flattened, plus `kind`, `text` and `sent_at` (raw, for machines).
    #[default]
    Json,
    /// A Slack incoming-webhook message (`text`).
    Slack,
    /// A Discord webhook message (`content`).
    Discord,
}

/// A `delivery:` sink (SPEC §12.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SinkDef {
    /// POST each delivery (a result, an alert, a recovery note) to a URL.
    Webhook {
        /// The sink's name, as jobs' `deliver:` give it.
        name: String,
        /// Where to POST.
        url: String,
        /// The body's shape.
        format: WebhookFormat,
    },
    /// Append each delivery to a file, one JSON line each (the `json` webhook body).
    File {
        /// The sink's name, as jobs' `deliver:` give it.
        name: String,
        /// The file's path (relative paths resolved against the jobs file's directory).
        path: String,
    },
}

impl SinkDef {
    /// The sink's name, as jobs' `deliver:` give it.
    pub fn name(&self) -> &str {
        match self {
            SinkDef::Webhook { name, .. } | SinkDef::File { name, .. } => name,
        }
    }
}

/// Budget period with UTC boundaries (SPEC §11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum BudgetPeriod {
    /// Each UTC day.
    #[default]
    Day,
    /// Each ISO week (Monday to Sunday, UTC).
    Week,
    /// Each calendar month (UTC).
    Month,
    /// Never resets.
    Total,
}

impl BudgetPeriod {
    /// Key of the UTC period containing `now`, e.g. `day:2026-11-29`, `week:2026-W48`,
    /// `month:2026-11`, `total`. Spend recorded under another key belongs to an older period.
    pub fn key(self, now: DateTime<Utc>) -> String {
        use chrono::Datelike;
        match self {
            BudgetPeriod::Day => format!("day:{}", now.format("%Y-%m-%d")),
            BudgetPeriod::Week => {
                let w = now.iso_week();
                format!("week:{}-W{:02}", w.year(), w.week())
            }
            BudgetPeriod::Month => format!("month:{}", now.format("%Y-%m")),
            BudgetPeriod::Total => "total".to_string(),
        }
    }
}

/// The global spend cap (`budget:` in the jobs file, SPEC §11).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Budget {
    /// Most USD spent over one period by every job together.
    pub max_cost_usd: f64,
    /// The period the cap counts over.
    pub period: BudgetPeriod,
}

/// USD per 1M tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Price {
    /// USD per 1M prompt tokens.
    pub input: f64,
    /// USD per 1M reply tokens.
    pub output: f64,
}

/// Everything in the jobs file that is not a job: shared by every owner through the store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Settings {
    /// `None` = `budget: null` (disabled). The jobs-file default is $1.00/day.
    pub budget: Option<Budget>,
    /// Period used for per-job `max_cost_usd` when the global budget is disabled too.
    #[serde(default)]
    pub period: BudgetPeriod,
    /// Prices per model id (`pricing:`); a model absent here is unpriced.
    pub pricing: BTreeMap<String, Price>,
    /// The `agents:` entries by name.
    pub agents: BTreeMap<String, AgentDef>,
    /// The `delivery:` sinks by name.
    pub delivery: BTreeMap<String, SinkDef>,
    /// Absolute directory of the jobs file last applied: commands (`command`, `pre_run`,
    /// `monitor.command`) run there, and relative `file:` sink paths were resolved against it.
    #[serde(default)]
    pub base_dir: Option<String>,
}

/// A whole validated jobs file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct JobsFile {
    /// Budget, pricing, agents and sinks.
    pub settings: Settings,
    /// The jobs, in file order.
    pub jobs: Vec<JobDef>,
}

/// Monitor watermark kept in the job state (never shown to the model).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MonitorState {
    /// Hex SHA-256 of the last good probe output.
    pub hash: String,
    /// First ≤ 2048 bytes of that output, cut on a UTF-8 boundary.
    pub preview: String,
    /// True when the output was longer than the preview.
    pub truncated: bool,
}

/// Incident tracking for "alert once" (SPEC §12.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct IncidentState {
    /// Failed runs in a row (reset by a success).
    pub consecutive_failures: u32,
    /// Signature of the incident an alert was delivered for.
    pub alerted_signature: Option<String>,
}

/// Per-job state persisted in the store (SPEC §9.3). Each part has its own bounded space, so
/// one can never evict another (issue 11: a 15.5 KB notepad used to push the monitor watermark
/// out, and the model was called on every tick): the notepad is capped at [`STATE_MAX_BYTES`]
/// serialised ([`JobState::notepad_size`]); the monitor watermark (hash + ≤ 2048-byte preview),
/// the incident state and the budget stop are bounded by construction and always kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct JobState {
    /// The job's own `key=value` notes, updated by a ```` ```notepad ```` block ending its model's
    /// reply; capped at [`STATE_MAX_BYTES`] serialised.
    #[serde(default)]
    pub notepad: BTreeMap<String, String>,
    /// The monitor's watermark: what the last good probe saw.
    #[serde(default)]
    pub monitor: Option<MonitorState>,
    /// The "alert once" incident state.
    #[serde(default)]
    pub incident: IncidentState,
    /// The last time a budget stopped a call of this job (SPEC §11: one alert per period).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_stop: Option<BudgetStop>,
}

/// A budget stopped a model call of the job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetStop {
    /// Budget period key (`BudgetPeriod::key`) the stop happened in.
    pub period_key: String,
    /// The skip reason ("budget reached: …"), cut to 300 characters.
    pub reason: String,
    /// When the stop happened.
    pub at: DateTime<Utc>,
    /// The alert for this period reached the job's sinks (or it has none).
    pub alerted: bool,
}

impl JobState {
    /// Serialised size of the notepad, the part [`STATE_MAX_BYTES`] caps.
    pub fn notepad_size(&self) -> usize {
        serde_json::to_vec(&self.notepad)
            .map(|v| v.len())
            .unwrap_or(usize::MAX)
    }

    /// `next` as the new state of a job whose stored state is `prior`: every part is taken,
    /// except a notepad over the cap, which is rejected alone (the prior notepad stays) with the
    /// reason returned.
    pub fn merge_capped(prior: &JobState, mut next: JobState) -> (JobState, Option<String>) {
        let size = next.notepad_size();
        if size <= STATE_MAX_BYTES {
            return (next, None);
        }
        next.notepad = prior.notepad.clone();
        (
            next,
            Some(format!(
                "notepad would be {size} bytes, over the {STATE_MAX_BYTES}-byte cap; prior \
                 notepad kept (monitor and incident state saved)"
            )),
        )
    }
}

/// A claim held on a job (SPEC §6).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lease {
    /// The owner running the claimed run.
    pub owner: String,
    /// The fencing token: a renewal or completion with another run_id does not touch the job.
    pub run_id: Uuid,
    /// The slot the run stands for (`None` for a manual run).
    pub slot: Option<DateTime<Utc>>,
    /// Why the run happened.
    pub trigger: Trigger,
    /// When the claim was taken.
    pub claimed_at: DateTime<Utc>,
    /// The lease expires at this instant unless renewed; then another owner may recover the run.
    pub lease_until: DateTime<Utc>,
    /// The last renewal (or the claim).
    pub last_renewed: DateTime<Utc>,
    /// This claim retires the job when it completes (one-shot, `max_runs` reached, `until` passed).
    pub spends_job: bool,
    /// The overdue slots this fire coalesced (SPEC §5), when more than one: stamped on its row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coalesced: Option<SlotRange>,
    /// An operator asked to cancel this run (`cronsole cancel`, `X` in the console): the owner
    /// running it kills it and records it `failed`, reason `cancelled by operator`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_requested_at: Option<DateTime<Utc>>,
    /// A renewal came after `lease_until`: another owner may have started recovering the run
    /// meanwhile, so its completion looks for an `abandoned` row of its own run.
    #[serde(default, skip_serializing_if = "is_false")]
    pub lapsed: bool,
    /// A chained run: the parent runs it stands for, in `after:` order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chain: Vec<ParentRun>,
}

/// A range of slots one row stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotRange {
    /// The first slot.
    pub first: DateTime<Utc>,
    /// The last slot.
    pub last: DateTime<Utc>,
    /// How many slots there are from `first` to `last`.
    pub count: u64,
}

/// Counters kept per job so stats never need a history scan (SPEC §11).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct JobCounters {
    /// Rows per status since the job was created.
    pub by_status: BTreeMap<Status, u64>,
    /// What every run cost together (USD).
    pub total_cost_usd: f64,
    /// Sum of the runs' durations (ms).
    pub runtime_ms: u64,
    /// Key of the budget period `period_cost_usd` belongs to (e.g. "day:2026-11-29").
    pub period_key: String,
    /// What the job spent in period `period_key` (USD), checked against `max_cost_usd`.
    pub period_cost_usd: f64,
    /// Some spend of this job is unknown (unpriced model or missing usage).
    pub cost_incomplete: bool,
    /// Activity per UTC hour over the last 24 h, oldest first: the console's 24 h status
    /// counts and spend-per-hour sparkline come from these, never from a history scan.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hours: Vec<HourBucket>,
    /// Budget reservations of model calls in flight or of unknown outcome (`store::budget`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reservations: Vec<Reservation>,
}

/// Money set aside for one model call before it is made (SPEC §11 hard budget): counted as
/// spent by every owner until it is settled to the real cost or released.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reservation {
    /// The reservation's id: settle or release name it.
    pub id: Uuid,
    /// The run that made the call: its completion turns a settled reservation into counters.
    pub run_id: Uuid,
    /// The owner that made the call.
    pub owner: String,
    /// Budget period key the amount counts in (`BudgetPeriod::key`).
    pub period_key: String,
    /// The amount set aside: the call's worst case until it is settled.
    pub usd: f64,
    /// `Reserved` until the call ended; `Settled` = real cost known, not yet in the counters;
    /// `Spent` = the call may have cost its worst case and nobody can know (kept as spent).
    pub state: ReservationState,
    /// When the reservation was made.
    pub at: DateTime<Utc>,
}

/// See [`Reservation::state`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReservationState {
    /// The call is in flight (or its owner died mid-call): its worst case counts as spent.
    Reserved,
    /// The call ended and its real cost replaced the worst case; not yet in the job's counters.
    Settled,
    /// The call's outcome cannot be known (a timeout mid-request, an unreadable reply): the
    /// worst case stays spent.
    Spent,
}

/// One UTC hour of a job's rows (see [`JobCounters::hours`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HourBucket {
    /// Unix time / 3600.
    #[serde(rename = "h")]
    pub hour: i64,
    /// Rows per status, in [`Status::ALL`] order.
    #[serde(rename = "n")]
    pub counts: [u32; 6],
    /// What the hour's rows cost (USD).
    #[serde(rename = "c")]
    pub cost_usd: f64,
}

impl JobCounters {
    /// Hours kept in [`JobCounters::hours`]: this one and the 24 before it.
    pub const HOURS_KEPT: i64 = 25;

    /// Count one row recorded at `now` into its hour, dropping hours that fell out of the window.
    pub fn count_hour(&mut self, status: Status, cost_usd: f64, now: DateTime<Utc>) {
        let hour = now.timestamp().div_euclid(3600);
        self.hours.retain(|b| b.hour > hour - Self::HOURS_KEPT);
        let idx = Status::ALL.iter().position(|s| *s == status).unwrap_or(0);
        match self.hours.last_mut() {
            Some(b) if b.hour == hour => {
                b.counts[idx] = b.counts[idx].saturating_add(1);
                b.cost_usd += cost_usd;
            }
            _ => {
                let mut counts = [0u32; 6];
                counts[idx] = 1;
                self.hours.push(HourBucket {
                    hour,
                    counts,
                    cost_usd,
                });
            }
        }
    }
}

/// The runtime side of a job, owned by the store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRuntime {
    /// When the job was first applied to the store.
    pub created_at: DateTime<Utc>,
    /// Anchor of an `every` grid; also the resolved instant of an `in 10m` schedule.
    pub anchor: DateTime<Utc>,
    /// The next slot this job will fire for, `None` when retired or out of slots.
    pub next_slot: Option<DateTime<Utc>>,
    /// The last slot that was claimed (run or abandoned).
    pub last_slot: Option<DateTime<Utc>>,
    /// When the job last ran (its last completion).
    pub last_run_at: Option<DateTime<Utc>>,
    /// How its last run ended.
    pub last_status: Option<Status>,
    /// Completed runs that count toward `max_runs` (not `missed`, not overlap `skipped`).
    pub runs: u64,
    /// The operator paused the job (`cronsole pause`, `p` in the console).
    pub paused: bool,
    /// The job will not run again (one-shot done, `max_runs` reached, `until` passed, or it left
    /// the jobs file: applying it again brings it back).
    pub retired: bool,
    /// Why the job was retired, in words.
    pub retired_reason: Option<String>,
    /// The claim held on the job while a run is live (the first of them with `overlap: allow`).
    pub lease: Option<Lease>,
    /// A manual trigger waiting to be claimed.
    pub trigger_requested_at: Option<DateTime<Utc>>,
    /// Retries and backfill slots waiting to be claimed, oldest request first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queue: Vec<QueuedRun>,
    /// Why the operator paused the job (`pause --reason`), shown in `jobs` and the console.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_reason: Option<String>,
    /// Set after a 429 with Retry-After: no slot fires before this instant.
    pub hold_until: Option<DateTime<Utc>>,
    /// This job's run already abandoned once and is being re-offered (one-shot recovery).
    pub recovery_pending: bool,
    /// The latest `succeeded` result, for `context_from` (≤ RESULT_MAX_CHARS).
    pub last_success_result: Option<String>,
    /// When [`JobRuntime::last_success_result`] was recorded.
    pub last_success_at: Option<DateTime<Utc>>,
    /// Per-job counters (statuses, spend, per-hour buckets, budget reservations).
    pub counters: JobCounters,
    /// The job's persisted state: notepad, monitor watermark, incident, budget stop.
    pub state: JobState,
    /// What the job's `overlap:` policy keeps between runs (more leases, a buffered slot, a
    /// superseded run), stored so it holds across owners, hosts and crashes.
    #[serde(default, skip_serializing_if = "OverlapState::is_empty")]
    pub overlap: OverlapState,
    /// Per `after:` parent, its newest finished run that fires this job and that this job has
    /// not run for yet (fan-in: the chained run starts once every parent has one).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub chain_pending: BTreeMap<String, ParentRun>,
    /// Per `after:` parent, the newest of its runs this record has seen (pending or run):
    /// a completion retried or recovered from its landed row never records the run twice.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub chain_seen: BTreeMap<String, Uuid>,
    /// The newest runs recorded `abandoned` (at most [`AbandonedRun::KEPT`], oldest first): a
    /// late completion of one of them (its owner was paused, not dead) writes the run's real row
    /// with `supersedes_abandoned`, and the `abandoned` row is hidden (`store::logic`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub abandoned: Vec<AbandonedRun>,
}

/// A run recorded `abandoned` whose real end may still come (see [`JobRuntime::abandoned`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AbandonedRun {
    /// The abandoned run's id (its lease's and its `abandoned` row's).
    pub run_id: Uuid,
    /// Why that run happened (scheduled, manual, chain, …).
    pub trigger: Trigger,
    /// The lease would have spent the job (one-shot, `max_runs`, `until`).
    pub spends_job: bool,
    /// `finished_at` of the `abandoned` row (the job's `last_run_at` until a newer run ends).
    pub at: DateTime<Utc>,
}

impl AbandonedRun {
    /// How many abandoned runs a record remembers.
    pub const KEPT: usize = 8;
}

/// See [`JobRuntime::overlap`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct OverlapState {
    /// `overlap: allow`: the leases of runs live beside [`JobRuntime::lease`] (which always
    /// holds one while any run is live), each fenced by its own run_id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub leases: Vec<Lease>,
    /// `overlap: buffer_one`: a slot that came due while a run was live; it runs as soon as no
    /// run is live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffered_slot: Option<DateTime<Utc>>,
    /// `overlap: cancel_previous`: the live run a due slot asked to cancel, and that slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded: Option<Superseded>,
    /// `skip`/`buffer_one`: the slots that fell due while a run was live and before the
    /// operator paused the job; that run's end writes their overlap row (or keeps the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_pause: Option<SlotRange>,
}

impl OverlapState {
    /// Nothing is kept: the stored form leaves `overlap` out.
    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
            && self.buffered_slot.is_none()
            && self.superseded.is_none()
            && self.before_pause.is_none()
    }
}

/// A live run cancelled because a newer slot of its `cancel_previous` job came due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Superseded {
    /// The run that was asked to stop.
    pub run_id: Uuid,
    /// The slot that superseded it; it runs once the cancelled run ended.
    pub by_slot: DateTime<Utc>,
}

impl JobRuntime {
    /// Every live lease: the primary one, then those of concurrent runs (`overlap: allow`).
    pub fn leases(&self) -> impl Iterator<Item = &Lease> {
        self.lease.iter().chain(self.overlap.leases.iter())
    }

    /// The lease of the run `run_id`, if it is live.
    pub fn lease_of(&self, run_id: Uuid) -> Option<&Lease> {
        self.leases().find(|l| l.run_id == run_id)
    }

    /// Mutable [`JobRuntime::lease_of`].
    pub fn lease_of_mut(&mut self, run_id: Uuid) -> Option<&mut Lease> {
        self.lease
            .iter_mut()
            .chain(self.overlap.leases.iter_mut())
            .find(|l| l.run_id == run_id)
    }

    /// Number of live runs.
    pub fn live_runs(&self) -> usize {
        self.leases().count()
    }

    /// Remove the lease of `run_id` (the first live one when no lease has that id); a
    /// concurrent run's lease moves up so [`JobRuntime::lease`] is set while any run is live.
    pub fn take_lease(&mut self, run_id: Uuid) -> Option<Lease> {
        if let Some(i) = self.overlap.leases.iter().position(|l| l.run_id == run_id) {
            return Some(self.overlap.leases.remove(i));
        }
        let taken = self.lease.take();
        if !self.overlap.leases.is_empty() {
            self.lease = Some(self.overlap.leases.remove(0));
        }
        taken
    }

    /// Add a live lease (the primary one when no run is live).
    pub fn add_lease(&mut self, lease: Lease) {
        if self.lease.is_none() {
            self.lease = Some(lease);
        } else {
            self.overlap.leases.push(lease);
        }
    }
}

/// A job as the store holds it: definition + runtime.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    /// The validated definition (from the jobs file).
    pub def: JobDef,
    /// What the store keeps about the job between runs.
    pub rt: JobRuntime,
}

impl JobRecord {
    /// Whether its schedule fires at all now: not retired, not paused, enabled. Every view's
    /// "next" (`jobs` NEXT, `jobs --json` `next_fire_at`, `describe`) is empty when it does not.
    pub fn fires(&self) -> bool {
        !self.rt.retired && !self.rt.paused && self.def.enabled
    }

    /// One word for the job's state in tables: running, paused, retired, held, idle.
    pub fn state_word(&self, now: DateTime<Utc>) -> &'static str {
        if self.rt.retired {
            "retired"
        } else if self.rt.lease.is_some() {
            "running"
        } else if self.rt.paused || !self.def.enabled {
            "paused"
        } else if self.rt.hold_until.is_some_and(|h| h > now) {
            "held"
        } else {
            "idle"
        }
    }
}

/// Cut `s` to at most `max` characters, marking the cut (SPEC §4 `result`).
pub fn truncate_marked(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_string(),
        Some((idx, _)) => format!("{}…[truncated]", &s[..idx]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn budget_period_keys_use_utc_boundaries() {
        let t = DateTime::parse_from_rfc3339("2026-11-29T23:59:59-02:00")
            .unwrap()
            .to_utc();
        assert_eq!(BudgetPeriod::Day.key(t), "day:2026-11-30");
        assert_eq!(BudgetPeriod::Week.key(t), "week:2026-W49");
        assert_eq!(BudgetPeriod::Month.key(t), "month:2026-11");
        assert_eq!(BudgetPeriod::Total.key(t), "total");
    }

    #[test]
    fn hour_buckets_keep_a_sliding_day() {
        let t0 = DateTime::parse_from_rfc3339("2026-01-01T00:10:00Z")
            .unwrap()
            .to_utc();
        let mut c = JobCounters::default();
        c.count_hour(Status::Succeeded, 0.5, t0);
        c.count_hour(Status::Failed, 0.0, t0 + chrono::Duration::minutes(20));
        assert_eq!(c.hours.len(), 1);
        assert_eq!(c.hours[0].counts, [1, 1, 0, 0, 0, 0]);
        c.count_hour(Status::Missed, 0.25, t0 + chrono::Duration::hours(3));
        assert_eq!(c.hours.len(), 2);
        // A day later the first hour has slid out of the window.
        c.count_hour(Status::NoChange, 0.0, t0 + chrono::Duration::hours(25));
        assert_eq!(
            c.hours
                .iter()
                .map(|b| b.counts.iter().sum::<u32>())
                .sum::<u32>(),
            2
        );
        assert!((c.hours.iter().map(|b| b.cost_usd).sum::<f64>() - 0.25).abs() < 1e-12);
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

//! A job as validated from the jobs file: its action, its gate, its `overlap:` policy and the
//! rest of its keys, with defaults already applied.
//!
//! Owns: the definition's shape and the small rules that follow from it alone (its compiled
//! schedule, where its slots start when it is first stored, when a slot fires with jitter,
//! whether it is a one-shot). Must not touch: parsing (that is `config`), the runtime record,
//! the store.
//!
//! Where slots start ([`JobDef::first_slots`]) is one rule for the store, which records it, and
//! for every preview of a job not stored yet (`validate`, `next --job`): an `every` grid is
//! anchored at the moment the job is first stored and its first slot is one interval later;
//! cron and wall times sit on the clock; `run_immediately: true` adds one run at that moment
//! (taking the place of a slot due then).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::After;
use crate::schedule::ScheduleSpec;

/// What a job does when it runs (exactly one of `agent` or `command`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Action {
    /// Ask a model: the `agents:` entry `agent` with the prompt `message`.
    Agent {
        /// Name of the `agents:` entry.
        agent: String,
        /// The prompt (empty: the run is `skipped`, reason "no message").
        message: String,
        /// The job's own `tools:`, a narrowing of its agent's allowlist (`None`: the agent's
        /// list as it is).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tools: Option<Vec<String>>,
    },
    /// Run a shell command and deliver its stdout verbatim.
    Command {
        /// The command line, run by `/bin/sh -c` in the jobs file's directory.
        command: String,
        /// `command_timeout_seconds`: an attempt's process group is killed after this long (or
        /// after the job's `timeout_seconds`, when shorter).
        timeout_seconds: f64,
    },
}

/// Where a monitor reads its source from.
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
        /// Allow loopback, private and link-local addresses (refused by default).
        allow_private: bool,
    },
}

/// The optional gate in front of the action (`monitor` and `pre_run` are exclusive).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Gate {
    /// Run only when the source changed since the last good probe.
    Monitor {
        /// What the monitor probes.
        source: MonitorSource,
    },
    /// Run only when this shell command exits 0.
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

/// A validated job definition with defaults already applied.
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
    /// Jobs whose latest successful result is prepended to the prompt.
    pub context_from: Vec<String>,
    /// Most characters of each `context_from` block.
    pub context_max_chars: usize,
    /// What a run does when a `context_from` job has no result yet.
    pub on_missing_context: OnMissingContext,
    /// How late a recurring slot may still fire; `None` = any overdue slot fires once.
    pub misfire_grace_seconds: Option<f64>,
    /// `once: true` is stored as `max_runs: Some(1)`.
    pub max_runs: Option<u64>,
    /// Retire the job at this instant.
    pub until: Option<DateTime<Utc>>,
    /// Fire once as soon as the job is first seen, then follow the schedule.
    pub run_immediately: bool,
    /// Bound of one attempt of the action (seconds).
    pub timeout_seconds: f64,
    /// Total attempts of the action, the first included (3 = one try, two retries);
    /// 0 counts as 1.
    pub max_retries: u32,
    /// How long a claim holds without renewal before another owner may recover the run.
    pub lease_seconds: f64,
    /// Per-job budget brake (USD per budget period).
    pub max_cost_usd: Option<f64>,
    /// Names of the `delivery:` sinks the result goes to.
    pub deliver: Vec<String>,
    /// Consecutive failures that open an incident and alert once.
    pub alert_after_failures: u32,
    /// `enabled: false` = declared but paused.
    pub enabled: bool,
    /// Names of environment variables let through to this job's commands, gates and monitors
    /// although they hold an agent's API key (key variables are removed by default).
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
    /// `after:` parents: the job also runs (`trigger: chain`) once each of
    /// them has finished as its entry says since this job last ran for them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<After>,
}

/// The `overlap:` policy of a job: what a slot that comes due while a run of
/// the job is still live does. Every outcome leaves its row (`store::plan`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// The slot is recorded `skipped` (reason `overlap`) when the run ends (the default).
    #[default]
    Skip,
    /// The first such slot is remembered in the store and runs as soon as the run ends; any
    /// further one is recorded `skipped` overlap.
    BufferOne,
    /// The live run is cancelled (its process tree killed, row `failed`, reason
    /// `cancelled: superseded by slot …`), then the slot runs.
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
    pub(crate) fn is_skip(&self) -> bool {
        *self == Overlap::Skip
    }

    /// The words the jobs file accepts (`allow` needs `max_concurrent_runs`).
    pub(crate) const NAMES: [&'static str; 4] = ["skip", "buffer_one", "cancel_previous", "allow"];

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
    pub(crate) fn acts_while_running(&self) -> bool {
        matches!(self, Overlap::CancelPrevious | Overlap::Allow { .. })
    }
}

/// Where a job's slots start when it is first stored at `stored` ([`JobDef::first_slots`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstSlots {
    /// The `every` grid's origin (`stored`), the resolved instant of `in 10m`, else `stored`.
    pub anchor: DateTime<Utc>,
    /// The schedule's first slot: `anchor` + one interval for `every`, the first cron or wall
    /// time at or after `stored`, the `at` instant; on a date the calendars allow; after
    /// `immediate` when there is one. `None` without slots (`after:` only, a spent one-shot).
    pub first: Option<DateTime<Utc>>,
    /// `run_immediately: true`: one run at `stored` (`trigger: immediate`), before `first`.
    pub immediate: Option<DateTime<Utc>>,
}

impl FirstSlots {
    /// The first instant the engine runs the job: the immediate run, else the first slot.
    pub fn first_run(&self) -> Option<DateTime<Utc>> {
        self.immediate.or(self.first)
    }
}

impl JobDef {
    /// Where the job's slots start when it is first stored at `stored`: the one rule the store
    /// records and every preview shows (see the module doc).
    pub fn first_slots(
        &self,
        stored: DateTime<Utc>,
    ) -> Result<FirstSlots, crate::schedule::ScheduleError> {
        let (anchor, first) = self.schedule_start(stored)?;
        let compiled = self.compile(anchor)?;
        let immediate = self.run_immediately.then_some(stored);
        // The immediate run is the run of a slot due at or before it (the store claims that
        // slot with `trigger: immediate`): the schedule goes on after it.
        let first = match (immediate, first) {
            (Some(i), Some(f)) if f <= i => compiled.next_after(i),
            _ => first,
        };
        Ok(FirstSlots {
            anchor,
            first,
            immediate,
        })
    }

    /// The schedule's own start when the job is (re-)anchored at `stored`, `run_immediately`
    /// aside: the grid's anchor and its first slot. The store records exactly this.
    pub(crate) fn schedule_start(
        &self,
        stored: DateTime<Utc>,
    ) -> Result<(DateTime<Utc>, Option<DateTime<Utc>>), crate::schedule::ScheduleError> {
        // A grid counted from the store (`every`, `in`) starts on the whole second: its slots
        // then print and compare as people write times, never `02:25:52.666158990`. The
        // cut is below a second and backwards, so the first slot (one interval on) stays
        // after `stored`.
        let whole = chrono::SubsecRound::trunc_subsecs(stored, 0);
        let anchor = match self.schedule {
            ScheduleSpec::In { seconds } => {
                let s = i64::try_from(seconds).unwrap_or(i64::MAX / 1000);
                chrono::Duration::try_seconds(s)
                    .and_then(|d| whole.checked_add_signed(d))
                    .ok_or_else(|| crate::schedule::ScheduleError::new("`in` is too far ahead"))?
            }
            ScheduleSpec::Every { .. } => whole,
            _ => stored,
        };
        let compiled = self.compile(anchor)?;
        let at_or_after =
            |t: DateTime<Utc>| compiled.next_after(t - chrono::Duration::milliseconds(1));
        let first = match self.schedule {
            // The anchor is the grid's origin, not a slot: storing a job is not a reason to run
            // it (`run_immediately: true` asks for that run).
            ScheduleSpec::Every { .. } => compiled.next_after(anchor),
            ScheduleSpec::At { at } if self.days.is_empty() => Some(at),
            ScheduleSpec::At { at } => at_or_after(at),
            ScheduleSpec::In { .. } if self.days.is_empty() => Some(anchor),
            ScheduleSpec::In { .. } => at_or_after(anchor),
            ScheduleSpec::Cron { .. } | ScheduleSpec::AtTime { .. } => at_or_after(stored),
            ScheduleSpec::AfterOnly => None,
        };
        Ok((anchor, first))
    }

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

    /// The `agents:` entry an agent job calls; `None` for a command job.
    pub(crate) fn agent_name(&self) -> Option<&str> {
        match &self.action {
            Action::Agent { agent, .. } => Some(agent),
            Action::Command { .. } => None,
        }
    }
}

/// `skip_serializing_if` for amounts that are zero by default: the stored form leaves them out.
fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::parse_schedule;
    use crate::testkit::time::rfc3339 as t;

    fn job(schedule: &str, run_immediately: bool) -> JobDef {
        let mut d = crate::testkit::jobs::command_job("j", 60);
        d.schedule = parse_schedule(schedule, "UTC").unwrap();
        d.schedule_text = schedule.into();
        d.run_immediately = run_immediately;
        d
    }

    /// Where each schedule form's runs start when the job is first stored at 20:15:09: an
    /// `every` grid one interval after that instant, cron and wall times on the clock; `run_immediately` one run
    /// at the store instant, the schedule going on after it.
    #[test]
    fn first_slots_of_every_schedule_form() {
        let stored = t("2026-12-06T20:15:09Z");
        // (schedule, first slot, first slot after an immediate run)
        let cases = [
            (
                "every 1h",
                "2026-12-06T21:15:09Z",
                Some("2026-12-06T21:15:09Z"),
            ),
            (
                "hourly",
                "2026-12-06T21:15:09Z",
                Some("2026-12-06T21:15:09Z"),
            ),
            (
                "daily",
                "2026-12-07T20:15:09Z",
                Some("2026-12-07T20:15:09Z"),
            ),
            (
                "every 90s",
                "2026-12-06T20:16:39Z",
                Some("2026-12-06T20:16:39Z"),
            ),
            (
                "@hourly",
                "2026-12-06T21:00:00Z",
                Some("2026-12-06T21:00:00Z"),
            ),
            (
                "0 7 * * *",
                "2026-12-07T07:00:00Z",
                Some("2026-12-07T07:00:00Z"),
            ),
            (
                "daily at 9am",
                "2026-12-07T09:00:00Z",
                Some("2026-12-07T09:00:00Z"),
            ),
            (
                "at 21:30",
                "2026-12-06T21:30:00Z",
                Some("2026-12-06T21:30:00Z"),
            ),
            (
                "at:2026-12-24T10:00:00Z",
                "2026-12-24T10:00:00Z",
                Some("2026-12-24T10:00:00Z"),
            ),
            ("at:2026-12-01T10:00:00Z", "2026-12-01T10:00:00Z", None),
            (
                "in 10m",
                "2026-12-06T20:25:09Z",
                Some("2026-12-06T20:25:09Z"),
            ),
        ];
        for (expr, want, after_immediate) in cases {
            let f = job(expr, false).first_slots(stored).unwrap();
            assert_eq!(f.first, Some(t(want)), "{expr}");
            assert_eq!(f.immediate, None, "{expr}");
            assert_eq!(f.first_run(), f.first, "{expr}");
            let f = job(expr, true).first_slots(stored).unwrap();
            assert_eq!(
                f.first,
                after_immediate.map(t),
                "{expr} after its immediate run"
            );
            assert_eq!(f.immediate, Some(stored), "{expr}");
            assert_eq!(f.first_run(), Some(stored), "{expr}");
        }
        // An `every` grid's anchor is the store instant; `in` resolves there.
        assert_eq!(
            job("every 1h", false).first_slots(stored).unwrap().anchor,
            stored
        );
        assert_eq!(
            job("in 10m", false).first_slots(stored).unwrap().anchor,
            t("2026-12-06T20:25:09Z")
        );
    }

    /// A job stored at a fraction of a second: its `every` grid and its `in` instant start on
    /// the whole second before it, so every slot is a whole second; the immediate run is the
    /// store instant itself, and an `at:` fraction written in the file is kept exactly.
    #[test]
    fn grids_counted_from_the_store_start_on_the_whole_second() {
        let stored = t("2026-12-06T20:15:09.659098376Z");
        for (expr, anchor, first) in [
            ("every 1h", "2026-12-06T20:15:09Z", "2026-12-06T21:15:09Z"),
            ("hourly", "2026-12-06T20:15:09Z", "2026-12-06T21:15:09Z"),
            ("daily", "2026-12-06T20:15:09Z", "2026-12-07T20:15:09Z"),
            ("every 1s", "2026-12-06T20:15:09Z", "2026-12-06T20:15:10Z"),
            ("in 10m", "2026-12-06T20:25:09Z", "2026-12-06T20:25:09Z"),
        ] {
            let f = job(expr, true).first_slots(stored).unwrap();
            assert_eq!((f.anchor, f.first), (t(anchor), Some(t(first))), "{expr}");
            assert!(f.first.is_some_and(|x| x > stored), "{expr}");
            assert_eq!(f.immediate, Some(stored), "{expr}");
        }
        let f = job("at:2026-12-24T10:00:00.123456Z", false)
            .first_slots(stored)
            .unwrap();
        assert_eq!(f.first, Some(t("2026-12-24T10:00:00.123456Z")));
    }
}

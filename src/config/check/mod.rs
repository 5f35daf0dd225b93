//! The validation rules of the jobs file: a parsed [`Value`] → `Settings` and
//! `JobDef`s with defaults applied, plus every problem found, each tied to a key path.
//!
//! Owns: the schema (accepted keys, types, ranges from `bounds`, references between sections)
//! and the defaults. Must not touch: source positions (the caller locates paths in the parsed
//! `yaml::Document`), files, the environment beyond asking whether an API-key variable is set
//! (never its value), clocks.
//!
//! Layout: `checker` holds the checker, its shared helpers and the key tables, at the bottom;
//! this module holds the document's top level (it calls each section's checks); `scalars` reads
//! typed values (strings, booleans, bounded numbers, name lists), `settings` the
//! `defaults`/`budget`/`pricing`/`agents`/`delivery` sections, `jobs` the job list (one function
//! per group of keys), `schedule` the `schedule:` key in both forms. The rule files import
//! `checker` and never this module, so the imports run one way.
//!
//! Reading strategy: every section is checked even after an earlier error, so one `validate` run
//! reports everything. A bad value records an error and the default is used so later checks can
//! go on; the result is discarded by the caller whenever any error was recorded.

use super::yaml::{Mapping, Seg, Value};
use crate::model::Settings;

mod after;
#[cfg(test)]
pub(super) use after::AFTER_KEYS;
pub use after::{cycle_text, find_cycle, find_cycle_by};
mod calendars;
mod checker;
pub(super) use checker::TOP_KEYS;
use checker::kind_of;
#[cfg(test)]
pub(super) use checker::{
    AGENT_KEYS, BUDGET_KEYS, CALENDAR_KEYS, DEFAULT_KEYS, JOB_KEYS, MONITOR_KEYS, PRICE_KEYS,
    SCHEDULE_KEYS, SINK_KEYS, valid_name,
};
pub(crate) use checker::{Checker, Defaults, EnvChars, Pending, ToolNames, show};
mod jobs;
pub(crate) use jobs::{JobNames, JobsRun};
mod overlap;
mod scalars;
mod schedule;
mod settings;
mod tools;
mod url;
#[cfg(test)]
pub(super) use tools::{COMMAND_TOOL_KEYS, MCP_KEYS};

impl Checker<'_> {
    /// Everything but the jobs: the top level and the sections every job refers to. Returns
    /// the settings, the defaults and the top mapping (`None`: not a mapping, recorded).
    pub(crate) fn top<'v>(&mut self, doc: &'v Value) -> Option<(Settings, Defaults, &'v Mapping)> {
        let root: &[Seg] = &[];
        let m = match doc {
            Value::Null => {
                self.error(
                    Vec::new(),
                    "the jobs file is empty: expected a mapping with a `jobs:` list",
                );
                return None;
            }
            Value::Mapping(m) => m,
            other => {
                self.error(
                    Vec::new(),
                    format!(
                        "expected a mapping with a `jobs:` list at the top level, found {}",
                        kind_of(other)
                    ),
                );
                return None;
            }
        };
        self.check_keys(m, root, TOP_KEYS);
        let defaults = self.defaults(m);
        let (budget, period) = self.budget(m);
        let pricing = self.pricing(m);
        // Before the agents: their `tools` name these sources.
        let tools = self.tool_sources(m);
        let agents = self.agents(m);
        self.no_provider_keys(&tools, &agents);
        let delivery = self.delivery(m);
        self.calendars = self.calendars_section(m);
        let settings = Settings {
            budget,
            period,
            pricing,
            agents,
            delivery,
            base_dir: None,
            tools,
        };
        Some((settings, defaults, m))
    }
}

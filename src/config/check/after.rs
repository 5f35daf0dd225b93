//! A job's `after:`: the jobs it is chained after and on which of their
//! outcomes, and the whole-file checks of chains (cycles, `on: change` needing a monitor).
//!
//! Owns: the `after:` forms and their errors, and the cycle search every store also runs
//! before an apply ([`find_cycle`], as it runs `check_bounds`). Must not touch: how chains run
//! (`store::chain`).
//!
//! Forms: `after: {job: collect, on: success}`, `after: collect` (shorthand for `on: success`),
//! or a list of either (fan-in). `on` is one of success, failure, completion, change; it
//! defaults to success. A job with `after:` may have a `schedule:` too (it runs on its slots
//! and after its parents) or none (it runs only after its parents, and on manual triggers).

use std::collections::{BTreeMap, HashMap};

use super::checker::{Checker, describe_value, index, key, list, show};
use crate::config::yaml::{Mapping, Seg, Value};
use crate::model::{After, ChainOn, JobDef};

pub(crate) const AFTER_KEYS: &[&str] = &["job", "on"];

impl Checker<'_> {
    /// `after:` of the job at `p` named `name` (when its name is valid). Errors: a wrong form,
    /// an empty list, an unknown or repeated job, the job itself, an unknown `on`.
    pub(super) fn after(
        &mut self,
        m: &Mapping,
        p: &[Seg],
        name: Option<&str>,
        first_index: &HashMap<String, usize>,
    ) -> Vec<After> {
        let Some(v) = Self::get(m, "after") else {
            return Vec::new();
        };
        let ap = key(p, "after");
        let entries: Vec<(Vec<Seg>, &Value)> = match v {
            Value::Sequence(items) if items.is_empty() => {
                self.error(
                    ap,
                    "`after` is an empty list: name at least one job (or remove the key)",
                );
                return Vec::new();
            }
            Value::Sequence(items) => items
                .iter()
                .enumerate()
                .map(|(i, it)| (index(&ap, i), it))
                .collect(),
            one => vec![(ap.clone(), one)],
        };
        let mut out: Vec<After> = Vec::new();
        for (ep, ev) in entries {
            let Some(a) = self.after_entry(ev, &ep) else {
                continue;
            };
            if !first_index.contains_key(&a.job) {
                self.unknown_job = true;
                let jp = if matches!(ev, Value::Mapping(_)) {
                    key(&ep, "job")
                } else {
                    ep.clone()
                };
                self.error(
                    jp,
                    format!(
                        "unknown job {} in after; jobs in this file: {}",
                        show(&a.job),
                        list(
                            first_index
                                .keys()
                                .collect::<std::collections::BTreeSet<_>>()
                        )
                    ),
                );
                continue;
            }
            if name == Some(a.job.as_str()) {
                self.error(
                    ep,
                    format!(
                        "job '{}' cannot run after itself (use a schedule to repeat a job)",
                        a.job
                    ),
                );
                continue;
            }
            if out.iter().any(|o| o.job == a.job) {
                self.error(
                    ep,
                    format!(
                        "job '{}' appears twice in after: name each parent once",
                        a.job
                    ),
                );
                continue;
            }
            out.push(a);
        }
        out
    }

    fn after_entry(&mut self, v: &Value, p: &[Seg]) -> Option<After> {
        match v {
            Value::String(s) => Some(After {
                job: s.clone(),
                on: ChainOn::Success,
            }),
            Value::Mapping(m) => {
                self.check_keys(m, p, AFTER_KEYS);
                let job = self.opt_text(m, p, "job");
                if Self::get(m, "job").is_none() {
                    self.error(
                        p.to_vec(),
                        "missing `job`: an after entry names the job to wait for, e.g. \
                         {job: collect, on: success}",
                    );
                }
                let on = match self.opt_str(m, p, "on") {
                    None => Some(ChainOn::Success),
                    Some(o) => match ChainOn::parse(o.trim()) {
                        Some(on) => Some(on),
                        None => {
                            self.error(
                                key(p, "on"),
                                format!(
                                    "unknown value {}: use success, failure, completion or change",
                                    show(&o)
                                ),
                            );
                            None
                        }
                    },
                };
                Some(After { job: job?, on: on? })
            }
            other => {
                self.error(
                    p.to_vec(),
                    format!(
                        "expected a job name or {{job: NAME, on: success|failure|completion|change}}, \
                         found {}",
                        describe_value(other)
                    ),
                );
                None
            }
        }
    }

    /// Whole-file checks over the valid jobs: `on: change` needs a monitor parent, and no
    /// chain may come back to where it started (the error is at the `after` entry that closes
    /// the cycle, walking jobs in file order).
    pub(super) fn after_graph(&mut self, run: &super::jobs::JobsRun) {
        let by_name: BTreeMap<&str, &super::jobs::Chain> =
            run.chains.iter().map(|c| (c.name.as_str(), c)).collect();
        for c in by_name.values() {
            for (k, a) in c.after.iter().enumerate() {
                if a.on != ChainOn::Change {
                    continue;
                }
                if run.is_valid(&a.job) && !run.is_monitor(&a.job) {
                    self.error(
                        key(&c.entry_path(k), "on"),
                        format!(
                            "`on: change` needs a monitor: job '{}' has no `monitor:` gate (use \
                             success, failure or completion)",
                            a.job
                        ),
                    );
                }
            }
        }
        // The cycle as every store finds it ([`find_cycle`], jobs in file order),
        // reported at the entry that closes it: the last job's entry naming the first.
        let Some(names) = find_cycle_by(
            run.chains
                .iter()
                .map(|c| (c.name.as_str(), c.after.as_slice())),
        ) else {
            return;
        };
        let (Some(closer), Some(target)) = (
            names.len().checked_sub(2).and_then(|i| names.get(i)),
            names.last(),
        ) else {
            return;
        };
        if let Some(c) = by_name.get(closer.as_str())
            && let Some(k) = c.after.iter().position(|a| &a.job == target)
        {
            self.error(
                c.entry_path(k),
                format!(
                    "`after` makes a cycle: {} (each job waits for the next); a chain must end \
                     somewhere",
                    cycle_text(&names)
                ),
            );
        }
    }
}

/// Jobs of a cycle named in full before [`cycle_text`] shortens it.
const CYCLE_NAMED: usize = 6;

/// A cycle ([`find_cycle`]'s names, first = last) in words: in full up to `CYCLE_NAMED` (6) jobs;
/// a longer one names its first three and last two jobs, says how many it leaves out and how
/// long the cycle is, so the message stays one readable line (at most ~400 characters: names
/// are ≤ 64) whatever the cycle (a 3 000-job cycle was one 47 KB line).
pub fn cycle_text(names: &[String]) -> String {
    const HEAD: usize = 3;
    const TAIL: usize = 2;
    let jobs = names.len().saturating_sub(1);
    if jobs <= CYCLE_NAMED {
        return names.join(" waits for ");
    }
    let middle = format!("… {} more jobs …", jobs - HEAD - TAIL);
    let parts: Vec<&str> = names[..HEAD]
        .iter()
        .map(String::as_str)
        .chain(std::iter::once(middle.as_str()))
        .chain(names[jobs - TAIL..].iter().map(String::as_str))
        .collect();
    format!("{} (a cycle of {jobs} jobs)", parts.join(" waits for "))
}

/// The `after:` graph of a whole file, as every store checks it before an apply (a
/// `JobsFile` built in code skips `config`): no job after itself, directly or through others.
/// Returns the cycle's names, first = last.
pub fn find_cycle(jobs: &[JobDef]) -> Option<Vec<String>> {
    find_cycle_by(jobs.iter().map(|j| (j.name.as_str(), j.after.as_slice())))
}

/// [`find_cycle`] over `(name, after)` pairs in file order: jobs without `after:` entries may
/// be left out (they end every chain), so a stream of definitions keeps only its chains.
pub fn find_cycle_by<'a>(
    jobs: impl IntoIterator<Item = (&'a str, &'a [After])>,
) -> Option<Vec<String>> {
    use std::collections::BTreeMap;
    let jobs: Vec<(&str, &[After])> = jobs.into_iter().collect();
    let by_name: BTreeMap<&str, (&str, &[After])> = jobs.iter().map(|j| (j.0, *j)).collect();
    // 0 = new, 1 = on the current path, 2 = done.
    let mut mark: BTreeMap<&str, u8> = BTreeMap::new();
    for root in &jobs {
        if mark.get(root.0).copied().unwrap_or(0) != 0 {
            continue;
        }
        let mut stack: Vec<((&str, &[After]), usize)> = vec![(*root, 0)];
        mark.insert(root.0, 1);
        while let Some(top) = stack.last_mut() {
            let (j, k) = (top.0, top.1);
            top.1 += 1;
            let Some(a) = j.1.get(k) else {
                mark.insert(j.0, 2);
                stack.pop();
                continue;
            };
            let Some(p) = by_name.get(a.job.as_str()) else {
                continue;
            };
            match mark.get(p.0).copied().unwrap_or(0) {
                0 => {
                    mark.insert(p.0, 1);
                    stack.push((*p, 0));
                }
                1 => {
                    let from = stack.iter().position(|(s, _)| s.0 == p.0).unwrap_or(0);
                    let mut names: Vec<String> =
                        stack[from..].iter().map(|(s, _)| s.0.to_string()).collect();
                    names.push(p.0.to_string());
                    return Some(names);
                }
                _ => {}
            }
        }
    }
    None
}

//! `apply` of a jobs file over the stored records: the checks every store makes first, each
//! definition created or updated, jobs no longer in the file retired, and the settings' changes
//! in words.
//!
//! Owns: [`unique_names`], [`apply_one`], [`retire_removed`], [`apply_changed`],
//! [`settings_changes`], [`record_digest`] (what lets a re-apply skip reading an unchanged
//! record). Must not touch: I/O, locks, clocks.

use crate::store::OperationError;
use std::collections::{BTreeMap, HashSet};

use chrono::{DateTime, Utc};

use crate::cost::budget_period;
use crate::model::{JobDef, JobRecord, JobsFile, Settings};
use crate::store::policy::define::{ApplyChange, apply_def, new_record};
use crate::store::rules::reasons::REASON_REMOVED;
use crate::store::{ApplyReport, StoreError, StoreResult};

/// What changed from the stored settings `old` to `new`, in words for `apply`'s report: the
/// budget's period, limit, its addition or removal, then each other section that differs.
pub fn settings_changes(old: &Settings, new: &Settings) -> Vec<String> {
    use crate::cost::{period_word, usd};
    let mut out = Vec::new();
    let (po, pn) = (budget_period(old), budget_period(new));
    match (old.budget, new.budget) {
        (None, Some(b)) => out.push(format!(
            "budget added: {}/{}",
            usd(b.max_cost_usd),
            period_word(b.period)
        )),
        (Some(_), None) => out.push("budget removed".to_string()),
        (Some(a), Some(b)) if a.max_cost_usd != b.max_cost_usd => out.push(format!(
            "budget limit {} → {}",
            usd(a.max_cost_usd),
            usd(b.max_cost_usd)
        )),
        _ => {}
    }
    if po != pn {
        out.push(format!(
            "budget period {} → {}",
            period_word(po),
            period_word(pn)
        ));
    }
    // The other sections by name, so a re-apply that changed nothing says nothing, and one that
    // did says where to look.
    let sections: [(&str, bool); 4] = [
        ("agents", old.agents != new.agents),
        ("pricing", old.pricing != new.pricing),
        ("delivery", old.delivery != new.delivery),
        ("tools", old.tools != new.tools),
    ];
    out.extend(sections.iter().filter(|s| s.1).map(|s| s.0.to_string()));
    if old.base_dir != new.base_dir {
        let dir = |d: &Option<String>| d.clone().unwrap_or_else(|| "-".to_string());
        out.push(format!(
            "jobs file directory {} → {}",
            dir(&old.base_dir),
            dir(&new.base_dir)
        ));
    }
    if out.is_empty() && old != new {
        out.push("other settings".to_string());
    }
    out
}

/// What every store checks before an apply: each number within its bound (`config::bounds`) and
/// each name once. Returns the names.
pub fn unique_names(file: &JobsFile) -> StoreResult<HashSet<&str>> {
    crate::config::check_bounds(file)
        .map_err(|e| StoreError::Operation(OperationError::OutOfBounds(e)))?;
    if let Some(cycle) = crate::config::find_cycle(&file.jobs) {
        return Err(StoreError::Operation(OperationError::ChainCycle(
            crate::config::cycle_text(&cycle),
        )));
    }
    let mut seen = HashSet::new();
    for d in &file.jobs {
        if !seen.insert(d.name.as_str()) {
            return Err(StoreError::Operation(OperationError::DuplicateJob(
                d.name.clone(),
            )));
        }
    }
    Ok(seen)
}

/// A definition's digest: the first 8 bytes of the SHA-256 of its stored JSON form (never
/// zero). Two definitions with one digest are taken to be equal: a re-apply finds the file's
/// definition unchanged without reading the stored record (64 bits of a cryptographic hash: an
/// accidental match of an edited definition with its own previous one is out of reach).
pub fn def_digest(def: &JobDef) -> Option<std::num::NonZeroU64> {
    use sha2::{Digest, Sha256};
    let json = serde_json::to_vec(def).ok()?;
    let sum = Sha256::digest(&json);
    let mut first = [0u8; 8];
    first.copy_from_slice(sum.get(..8)?);
    Some(std::num::NonZeroU64::new(u64::from_le_bytes(first)).unwrap_or(std::num::NonZeroU64::MIN))
}

/// The digest that says "applying this record's own definition again changes nothing": its
/// definition's, or `None` when applying it would change the record anyway (a job retired
/// because it left the jobs file comes back; see [`apply_def`]).
pub fn record_digest(rec: &JobRecord) -> Option<std::num::NonZeroU64> {
    let removed = rec.rt.retired && rec.rt.retired_reason.as_deref() == Some(REASON_REMOVED);
    if removed { None } else { def_digest(&rec.def) }
}

/// What `apply` did to one definition.
#[derive(Debug)]
pub enum ApplyStep {
    /// A new job: the record to store.
    Created(Box<JobRecord>),
    /// The existing record was updated in place (its schedule must be recompiled).
    Updated,
    /// The definition did not change.
    Unchanged,
}

/// `apply` for one definition: update `existing` in place, or create a record.
pub fn apply_one(
    existing: Option<&mut JobRecord>,
    def: &JobDef,
    now: DateTime<Utc>,
) -> StoreResult<ApplyStep> {
    match existing {
        Some(rec) => match apply_def(rec, def, now).map_err(StoreError::bad_def(&def.name))? {
            ApplyChange::Unchanged => Ok(ApplyStep::Unchanged),
            ApplyChange::Updated => Ok(ApplyStep::Updated),
        },
        None => Ok(ApplyStep::Created(Box::new(
            new_record(def.clone(), now).map_err(StoreError::bad_def(&def.name))?,
        ))),
    }
}

/// `apply` for a stored job no longer in the file: retire it (kept in history and `jobs`).
/// Returns true when it was not retired yet (the record changed). This retirement is undone
/// when the job comes back, so a one-shot's pending recovery (its run was abandoned, one retry
/// left) is kept: coming back, it is that retry, not a fresh first run (fault-simulator seeds
/// 516, 1390: a `once` job removed and re-added ran a third time).
pub fn retire_removed(rec: &mut JobRecord) -> bool {
    if rec.rt.retired {
        return false;
    }
    rec.rt.retired = true;
    rec.rt.retired_reason = Some(REASON_REMOVED.to_string());
    // Its queued operator runs get `skipped` rows at the next claim pass (`after_retirement`).
    true
}

/// The fold of `apply` over the stored records that may change: `stored` maps a job name to
/// the store's entry for it (`rec` reaches the record inside an entry, `make` wraps a new
/// record) and holds every stored job the file may update or retire; `known_unchanged` names
/// the file's definitions the store found equal to their stored ones (by digest) without
/// reading their records — they are reported unchanged and are not in `stored`. A definition
/// neither known unchanged nor in `stored` is a new job. Returns the report and the names
/// whose records changed (to persist).
pub fn apply_changed<T>(
    file: &JobsFile,
    now: DateTime<Utc>,
    stored: &mut BTreeMap<String, T>,
    known_unchanged: impl Fn(&str) -> bool,
    rec: impl Fn(&mut T) -> &mut JobRecord,
    make: impl Fn(JobRecord) -> T,
) -> StoreResult<(ApplyReport, Vec<String>)> {
    let seen = unique_names(file)?;
    let mut report = ApplyReport::default();
    let mut changed = Vec::new();
    for def in &file.jobs {
        let name = def.name.clone();
        if !stored.contains_key(&name) && known_unchanged(&name) {
            report.unchanged.push(name);
            continue;
        }
        match apply_one(stored.get_mut(&name).map(&rec), def, now)? {
            ApplyStep::Unchanged => report.unchanged.push(name),
            ApplyStep::Updated => {
                report.updated.push(name.clone());
                changed.push(name);
            }
            ApplyStep::Created(r) => {
                stored.insert(name.clone(), make(*r));
                report.created.push(name.clone());
                changed.push(name);
            }
        }
    }
    for (name, entry) in stored.iter_mut() {
        if !seen.contains(name.as_str()) && retire_removed(rec(entry)) {
            report.retired.push(name.clone());
            changed.push(name.clone());
        }
    }
    Ok((report, changed))
}

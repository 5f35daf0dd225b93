//! Bulk selection for `pause`, `resume` and `trigger`: names, globs
//! (`'report-*'`, `'db-?'`), `--tag T` and `--all`, resolved against the store's jobs.
//!
//! Owns: turning a [`SelectArgs`] into the sorted, de-duplicated list of job names it means.
//! Must not touch: the store beyond reading jobs (plain names one by one, through its index;
//! globs, tags and `--all` from the list of every job), printing.
//!
//! Decisions where the issue is silent: the selectors add up (a job matched by a name and a tag
//! is acted on once); every selector must match something, checked before anything changes, so
//! a typo never half-applies a bulk action (exit 2 naming the selector). A plain name must be a
//! job in the store (retired or not, as before); globs, tags and `--all` pick only jobs that are
//! not retired (a retired job has nothing left to pause, resume or run). Glob syntax is `*`
//! (any run of characters) and `?` (one character); job names cannot contain either.

use std::process::ExitCode;

use crate::cli::args::{Cli, SelectArgs};
use crate::model::JobRecord;
use crate::store::{BULK_CHUNK, BulkAction, BulkOutcome, JobEdit, Store, TriggerOutcome};
use anyhow::Result;
use chrono::Utc;

use super::{bad_input, jobs_file, open_existing_store_for_named, store_location};

/// `pause`, `resume` and `trigger` write the store: opened as its writer, for the jobs they
/// name (a glob, a tag or `--all` reads every job when it is resolved).
fn store(cli: &Cli) -> Result<std::sync::Arc<dyn Store>> {
    let jobs = jobs_file(cli);
    open_existing_store_for_named(&store_location(cli, jobs.as_deref()), true)
}

/// The selected names, or exit 2 naming the selector that matched nothing; with the records
/// as they were read (for what each job was before the action, and the live owners). Plain
/// names are read one by one ([`plain_names`]), and then those records are all there is; globs,
/// tags and `--all` are matched against the list of every job.
fn selected(store: &dyn Store, sel: &SelectArgs) -> Result<(Vec<String>, Vec<JobRecord>)> {
    if let Some(names) = plain_names(sel) {
        let mut jobs = Vec::with_capacity(names.len());
        for name in &names {
            match store.job(name)? {
                Some(r) => jobs.push(r),
                None => return Err(bad_input(format!("no job named '{name}' in the store"))),
            }
        }
        return Ok((names, jobs));
    }
    let jobs = store.jobs()?;
    let names = resolve(sel, &jobs).map_err(bad_input)?;
    Ok((names, jobs))
}

/// What a run queued while no owner is live on the store waits for (the one rule of
/// [`crate::owners`]): the run is stored, but nothing will act on it yet. A store whose owner
/// records cannot be read gets no such words: "no engine" would be a guess.
pub fn waiting_note(store: &dyn Store) -> Option<String> {
    // Heartbeats are stamped on the store's clock: judged on a clock an hour ahead, a live
    // owner read as gone and the note said no engine ran while one ran the trigger at once.
    let owners = crate::engine::JudgeAt::owners_now(store).ok()?;
    crate::owners::waiting_note(&owners)
}

/// The sorted, de-duplicated names of a selection made of plain names only (no glob, tag or
/// `--all`), which need no list of every job: each is read through the store's index, so
/// `pause NAME` costs one job's record however many jobs the store holds.
fn plain_names(sel: &SelectArgs) -> Option<Vec<String>> {
    let plain = !sel.all
        && sel.tag.is_empty()
        && !sel.names.is_empty()
        && !sel.names.iter().any(|s| is_glob(s));
    plain.then(|| {
        let set: std::collections::BTreeSet<&String> = sel.names.iter().collect();
        set.into_iter().cloned().collect()
    })
}

/// Pause between two chunks of a bulk action: longer than the file store lock's longest retry
/// interval (50 ms), so a claim or command waiting for the lock gets it before the next chunk.
const BULK_YIELD: std::time::Duration = std::time::Duration::from_millis(60);

/// Run `action` over `names` a chunk ([`BULK_CHUNK`] jobs, one store operation) at a time,
/// releasing the store between chunks; `each` prints one job's line as soon as its chunk is
/// written. A job that fails stops the action there: the error names it and says how many jobs
/// before it were done (their lines are printed above it).
fn bulk(
    store: &dyn Store,
    names: &[String],
    action: &BulkAction,
    (verb, now): (&str, chrono::DateTime<Utc>),
    mut each: impl FnMut(&str, &BulkOutcome),
) -> Result<()> {
    let mut done = 0;
    for (i, chunk) in names.chunks(BULK_CHUNK).enumerate() {
        if i > 0 {
            std::thread::sleep(BULK_YIELD);
        }
        let r = store.bulk_edit(chunk, action, now);
        for (name, out) in chunk.iter().zip(&r.done) {
            each(name, out);
        }
        done += r.done.len();
        if let Some(e) = r.error {
            // The job the chunk stopped at (a failed write stops it at its first job).
            let at = &chunk[r.done.len().min(chunk.len() - 1)];
            let before = if done == 0 {
                "no job was changed".to_string()
            } else {
                format!("the {done} job(s) listed above were done")
            };
            return Err(anyhow::Error::new(e).context(format!(
                "could not {verb} '{at}' ({before}; {} not attempted)",
                names.len() - done - 1
            )));
        }
    }
    Ok(())
}

/// `pause` / `resume` over a selection: one line per job. Every selector is checked before any
/// job changes; a store error on one job stops there (the jobs before it are already changed,
/// and said so).
pub fn pause(cli: &Cli, sel: &SelectArgs, paused: bool, reason: Option<&str>) -> Result<ExitCode> {
    let store = store(cli)?;
    let verb = if paused { "pause" } else { "resume" };
    let (names, jobs) = selected(store.as_ref(), sel)?;
    // A job already in the asked state is said so and left alone (a pause with a reason still
    // records the reason): "resumed" is never printed for a job that was not paused.
    let was_paused = |n: &str| jobs.iter().any(|j| j.def.name == n && j.rt.paused);
    let (names, unchanged): (Vec<String>, Vec<String>) = names
        .into_iter()
        .partition(|n| reason.is_some() || was_paused(n) != paused);
    // A reason travels with the pause as one atomic operator edit (shown in `jobs`, `describe`
    // and the console until resume).
    let action = match reason {
        Some(why) => BulkAction::Edit(JobEdit::Pause {
            paused: true,
            reason: Some(why.to_string()),
        }),
        None => BulkAction::SetPaused(paused),
    };
    // Dated on the store's clock when this host's is off: a resume dated an hour ahead took
    // its next slot from then, and the job stayed idle for the hour.
    let now = if names.is_empty() {
        Utc::now()
    } else {
        super::on_the_stores_clock(store.as_ref(), &format!("the {verb} is dated"))
    };
    bulk(
        store.as_ref(),
        &names,
        &action,
        (verb, now),
        |name, _| match reason {
            Some(why) => println!("{verb}d {name} ({})", crate::text::line(why)),
            None => println!("{verb}d {name}"),
        },
    )?;
    for name in &unchanged {
        let disabled = jobs.iter().any(|j| j.def.name == *name && !j.def.enabled);
        match (paused, disabled) {
            (true, _) => println!("{name} was already paused; nothing changed"),
            (false, true) => println!(
                "{name} was not paused; it is disabled in the jobs file (enabled: false), which \
                 resume does not change"
            ),
            (false, false) => println!("{name} was not paused; nothing changed"),
        }
    }
    if paused && !names.is_empty() {
        // A pause needs no engine to hold; said only so the state of the store is clear.
        if let Some(n) = crate::engine::JudgeAt::owners_now(store.as_ref())
            .ok()
            .and_then(|o| crate::owners::paused_note(&o))
        {
            println!("note: {n}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `trigger` over a selection: each job is triggered on its own; a job that is running is said
/// so and skipped (exit 1 at the end when any was), the others are still triggered.
pub fn trigger(cli: &Cli, sel: &SelectArgs) -> Result<ExitCode> {
    let store = store(cli)?;
    let mut running = 0;
    let (names, _) = selected(store.as_ref(), sel)?;
    let waiting = waiting_note(store.as_ref());
    let now = super::on_the_stores_clock(store.as_ref(), "the trigger is dated");
    bulk(
        store.as_ref(),
        &names,
        &BulkAction::Trigger,
        ("trigger", now),
        |name, out| {
            if let BulkOutcome::Trigger(out) = out {
                if *out == TriggerOutcome::AlreadyRunning {
                    running += 1;
                }
                println!(
                    "{}",
                    crate::engine::trigger_notice_waiting(name, out, waiting.as_deref())
                );
            }
        },
    )?;
    Ok(if running > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Whether `name` matches `pattern` (`*` = any run, `?` = one character), whole string.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // Iterative matcher with one backtrack point: linear in practice, no recursion.
    let (mut pi, mut ni) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

fn is_glob(s: &str) -> bool {
    s.contains(['*', '?'])
}

/// The names `sel` selects among `jobs`, sorted; an error message (bad input) when a selector
/// matches nothing.
pub fn resolve(sel: &SelectArgs, jobs: &[JobRecord]) -> Result<Vec<String>, String> {
    let live = || jobs.iter().filter(|j| !j.rt.retired);
    let mut out = std::collections::BTreeSet::new();
    if sel.all {
        out.extend(live().map(|j| j.def.name.clone()));
        if out.is_empty() {
            return Err("--all matches no job: the store has no job that is not retired".into());
        }
    }
    for s in &sel.names {
        let mut matched = false;
        if is_glob(s) {
            for j in live().filter(|j| glob_match(s, &j.def.name)) {
                matched = true;
                out.insert(j.def.name.clone());
            }
        } else if jobs.iter().any(|j| j.def.name == *s) {
            matched = true;
            out.insert(s.clone());
        }
        if !matched {
            return Err(if is_glob(s) {
                format!("'{s}' matches no job in the store (retired jobs are not matched)")
            } else {
                format!("no job named '{s}' in the store")
            });
        }
    }
    for t in &sel.tag {
        let mut matched = false;
        for j in live().filter(|j| j.def.tags.iter().any(|x| x == t)) {
            matched = true;
            out.insert(j.def.name.clone());
        }
        if !matched {
            return Err(format!(
                "--tag {t} matches no job in the store (retired jobs are not matched)"
            ));
        }
    }
    if out.is_empty() {
        return Err("name a job, a glob such as 'report-*', --tag TAG or --all".into());
    }
    Ok(out.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};

    fn rec(name: &str, tags: &[&str], retired: bool) -> JobRecord {
        let text = format!(
            "jobs:\n  - name: {name}\n    schedule: every 60s\n    command: \"true\"\n    tags: [{}]\n",
            tags.join(", ")
        );
        let loaded = crate::config::load_str(&text, std::path::Path::new("jobs.yaml"))
            .expect("test job is valid");
        let d = loaded.file.jobs[0].clone();
        let now = DateTime::<Utc>::from_timestamp(1_800_000_000, 0).unwrap_or_default();
        let mut r = crate::store::policy::define::new_record(d, now).expect("every 60s compiles");
        r.rt.retired = retired;
        r
    }

    fn sel(names: &[&str], tags: &[&str], all: bool) -> SelectArgs {
        SelectArgs {
            names: names.iter().map(|s| s.to_string()).collect(),
            tag: tags.iter().map(|s| s.to_string()).collect(),
            all,
        }
    }

    fn jobs() -> Vec<JobRecord> {
        vec![
            rec("report-daily", &["reports"], false),
            rec("report-weekly", &["reports", "slow"], false),
            rec("report-old", &["reports"], true),
            rec("db-1", &["db"], false),
            rec("db-22", &[], false),
        ]
    }

    #[test]
    fn globs() {
        assert!(glob_match("report-*", "report-daily"));
        assert!(glob_match("*", ""));
        assert!(glob_match("db-?", "db-1"));
        assert!(!glob_match("db-?", "db-22"));
        assert!(glob_match("*-*-*", "a-b-c"));
        assert!(!glob_match("a*b", "a-c"));
        assert!(glob_match("a*b*c", "aXbYbZc"));
    }

    #[test]
    fn selectors_add_up_once_each_and_skip_retired_jobs() {
        let j = jobs();
        assert_eq!(
            resolve(&sel(&["report-*"], &[], false), &j).unwrap(),
            vec!["report-daily", "report-weekly"]
        );
        assert_eq!(
            resolve(&sel(&["db-1", "report-daily"], &["reports"], false), &j).unwrap(),
            vec!["db-1", "report-daily", "report-weekly"]
        );
        assert_eq!(resolve(&sel(&[], &[], true), &j).unwrap().len(), 4);
        // A plain name still reaches a retired job (the store says what it can do).
        assert_eq!(
            resolve(&sel(&["report-old"], &[], false), &j).unwrap(),
            vec!["report-old"]
        );
    }

    /// Only a selection of plain names skips the list of every job; anything else reads it.
    #[test]
    fn plain_names_need_no_list_of_every_job() {
        assert_eq!(
            plain_names(&sel(&["db-1", "a", "db-1"], &[], false)),
            Some(vec!["a".to_string(), "db-1".to_string()])
        );
        assert_eq!(plain_names(&sel(&["db-*"], &[], false)), None);
        assert_eq!(plain_names(&sel(&["db-1", "x?"], &[], false)), None);
        assert_eq!(plain_names(&sel(&["db-1"], &["db"], false)), None);
        assert_eq!(plain_names(&sel(&["db-1"], &[], true)), None);
        assert_eq!(plain_names(&sel(&[], &[], false)), None);
    }

    #[test]
    fn a_selector_that_matches_nothing_is_an_error_naming_it() {
        let j = jobs();
        let e = resolve(&sel(&["report-daily", "x-*"], &[], false), &j).unwrap_err();
        assert!(e.contains("'x-*' matches no job"), "{e}");
        let e = resolve(&sel(&[], &["nightly"], false), &j).unwrap_err();
        assert!(e.contains("--tag nightly"), "{e}");
        let e = resolve(&sel(&["ghost"], &[], false), &j).unwrap_err();
        assert!(e.contains("no job named 'ghost'"), "{e}");
        let e = resolve(&sel(&[], &[], true), &[]).unwrap_err();
        assert!(e.contains("--all"), "{e}");
    }
}

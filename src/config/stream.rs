//! The jobs file job by job: checking a plain `jobs:` list one item at a time, and handing
//! the valid jobs over one at a time ([`Prepared`], [`Validation`]).
//!
//! Job by job (so a file of 1 000 000 jobs fits in the memory of its text): when the top-level
//! `jobs:` is a plain list (no anchor on it, not brought in by an alias or a merge), the text is
//! parsed twice (often once: see below) and the list's items are never held together. The first
//! pass keeps everything else (the sections, with their positions) and every job's name
//! (duplicates, `context_from` and `after:` may name a later job); the second builds one job's
//! nodes, checks it, locates its diagnostics in them, hands its definition on and drops them. The
//! checks that need every job (`after:` cycles, `on: change` parents) keep only the valid jobs'
//! chains and a flag byte per job, and their positions are located while each chained job is at
//! hand. An item that holds an anchor stays (a later alias may name it). Any other shape — and an
//! item that expands beyond what an alias bomb check would allow so far — is read whole as before.
//! Both ways give the same diagnostics at the same positions and the same jobs (`tests/stream.rs`
//! holds one against the other). [`prepare_file`] validates a file this way and
//! [`Prepared::for_each_job`] then hands its jobs over one at a time (one more pass), which is what
//! `apply` uses: memory is the text plus a few dozen bytes per job. `validate` does the same
//! through [`validate_str_at`]: the jobs are counted, not held, and [`Validation::for_each_valid`]
//! hands the valid ones over afterwards.
//!
//! One parse instead of two (`check_one_pass`, the usual shape: `jobs:` written last, at
//! column 1, each job naming only earlier ones): the text before the `jobs:` line is parsed on
//! its own first (the sections, a few bytes), so the settings are known when the first job
//! arrives, and each job is checked against the names read so far. That check stands only
//! when it is provably what the two passes give: the whole text's skeleton equals the one read
//! ahead, the list streamed, and no `after:`/`context_from` named a job not read yet (a later
//! job or an unknown one, whose message lists every name). Otherwise its parse serves as the
//! names pass and the file is checked again as above; nothing it found is kept.
//!
//! Owns: the passes over the text and what each keeps. Must not touch: the rules (`check`),
//! the parse (`yaml`).

use std::path::{Path, PathBuf};

use super::diagnostic::{ConfigErrors, Diagnostic, Severity, yaml_error};
use super::read::{adjust_paths, file_error, read_text};
use super::{check, yaml};
use crate::model::{JobDef, Settings};

/// The first reading of the text: either a YAML error, the whole document (a file whose
/// `jobs:` list cannot be streamed), or everything but the jobs plus every job's name.
pub(super) enum FirstPass {
    Failed(yaml::YamlError),
    Whole(yaml::Document),
    Streamed(yaml::Document, check::JobNames),
}

pub(super) fn first_pass(text: &str) -> FirstPass {
    let mut names = check::JobNames::default();
    let streamed = yaml::Document::parse_streaming(text, &mut |item| {
        names.add(item.index, &item.value);
        Ok(())
    });
    match streamed {
        Err(e) => FirstPass::Failed(e),
        Ok(Some(skel)) if skel.streamed() => FirstPass::Streamed(skel, names),
        Ok(Some(doc)) => FirstPass::Whole(doc),
        Ok(None) => match yaml::Document::parse(text) {
            Ok(doc) => FirstPass::Whole(doc),
            Err(e) => FirstPass::Failed(e),
        },
    }
}

/// What checking a file found, besides its jobs (handed over one at a time).
pub(super) struct Checking {
    /// The settings and defaults (`None`: the document is not a mapping, or not YAML).
    pub(super) parsed: Option<(Settings, check::Defaults)>,
    /// Errors and warnings, sorted by position.
    pub(super) diagnostics: Vec<Diagnostic>,
}

impl Checking {
    pub(super) fn failed(d: Diagnostic) -> Checking {
        Checking {
            parsed: None,
            diagnostics: vec![d],
        }
    }
}

pub(super) fn diagnostic(
    p: check::Pending,
    path: &Path,
    (line, column): (usize, usize),
) -> Diagnostic {
    Diagnostic {
        severity: p.severity,
        file: path.to_path_buf(),
        line,
        column,
        key: yaml::render(&p.path),
        message: p.message,
    }
}

/// The whole-document check: every job is handed to `each` once all are checked.
pub(super) fn check_whole(
    doc: &yaml::Document,
    path: &Path,
    checker: &mut check::Checker<'_>,
    each: &mut dyn FnMut(Option<JobDef>),
) -> Checking {
    let parsed = match checker.top(&doc.value) {
        None => None,
        Some((settings, defaults, m)) => {
            for j in checker.jobs(m, &defaults, &settings) {
                each(j);
            }
            Some((settings, defaults))
        }
    };
    let mut diagnostics: Vec<Diagnostic> = std::mem::take(&mut checker.pending)
        .into_iter()
        .map(|p| {
            let at = doc.locate_or_parent(&p.path, p.target);
            diagnostic(p, path, at)
        })
        .collect();
    diagnostics.sort_by_key(|d| (d.line, d.column));
    Checking {
        parsed,
        diagnostics,
    }
}

/// The job-by-job check of a file whose `jobs:` list streams: `skel` is everything else,
/// `names` every job's name (the first pass). The text is parsed again, each job checked,
/// located, handed to `each` and dropped as soon as it is read; only the names, a few bytes
/// per job and the valid jobs' `after:` chains are kept for the whole-list checks. Returns
/// the names again (to check the jobs once more when they are handed over).
pub(super) fn check_streamed(
    text: &str,
    skel: &yaml::Document,
    names: check::JobNames,
    path: &Path,
    checker: &mut check::Checker<'_>,
    each: &mut dyn FnMut(Option<JobDef>),
) -> (Checking, check::JobNames) {
    let Some((settings, defaults, _)) = checker.top(&skel.value) else {
        // The skeleton of a streamed list is a mapping: unreachable, reported as the whole
        // document would be.
        return (check_whole(skel, path, checker, each), names);
    };
    let mut diagnostics: Vec<Diagnostic> = std::mem::take(&mut checker.pending)
        .into_iter()
        .map(|p| {
            let at = skel.locate_or_parent(&p.path, p.target);
            diagnostic(p, path, at)
        })
        .collect();
    let mut run = check::JobsRun::new(names, &settings);
    let mut seen = ItemsSeen::default();
    let second = yaml::Document::parse_streaming(text, &mut |item| {
        let job = seen.check(checker, &mut run, &item, (&defaults, &settings), path);
        each(job);
        Ok(())
    });
    diagnostics.extend(seen.located(skel, path));
    let chain_at = seen.chain_at;
    match second {
        Ok(Some(_)) => {}
        // The same text parsed a moment ago: only a bug gets here; refuse rather than guess.
        Ok(None) => diagnostics.push(file_error(
            path,
            "the jobs file read differently the second time".to_string(),
        )),
        Err(e) => diagnostics.push(yaml_error(e, path)),
    }
    checker.jobs_end(&run, &settings);
    for p in std::mem::take(&mut checker.pending) {
        let at = chain_at
            .get(&yaml::render(&p.path))
            .copied()
            .unwrap_or_else(|| skel.locate_or_parent(&p.path, p.target));
        diagnostics.push(diagnostic(p, path, at));
    }
    diagnostics.sort_by_key(|d| (d.line, d.column));
    (
        Checking {
            parsed: Some((settings, defaults)),
            diagnostics,
        },
        run.into_names(),
    )
}

/// What checking the streamed jobs one at a time keeps: their diagnostics (located in their
/// item, or, for a path outside it such as an agent's, in the skeleton once it is known) and
/// where the whole-list checks may point, located while each chained job is at hand.
#[derive(Default)]
pub(super) struct ItemsSeen {
    diagnostics: Vec<Result<Diagnostic, check::Pending>>,
    chain_at: std::collections::HashMap<String, (usize, usize)>,
}

impl ItemsSeen {
    /// Check job `item` (its definition: `None` when it has errors).
    fn check(
        &mut self,
        checker: &mut check::Checker<'_>,
        run: &mut check::JobsRun,
        item: &yaml::Item<'_>,
        (defaults, settings): (&check::Defaults, &Settings),
        path: &Path,
    ) -> Option<JobDef> {
        let job = checker.job_item(run, item.index, &item.value, defaults, settings);
        for p in std::mem::take(&mut checker.pending) {
            self.diagnostics
                .push(match item.locate_or_parent(&p.path, p.target) {
                    Some(at) => Ok(diagnostic(p, path, at)),
                    None => Err(p),
                });
        }
        if let Some(c) = run.chain_of(item.index) {
            for p in c.paths() {
                if let Some(at) = item.locate_or_parent(&p, yaml::Target::Value) {
                    self.chain_at.insert(yaml::render(&p), at);
                }
            }
        }
        job
    }

    /// The diagnostics, in the order found, those outside their item located in `skel`.
    fn located<'a>(
        &'a mut self,
        skel: &'a yaml::Document,
        path: &'a Path,
    ) -> impl Iterator<Item = Diagnostic> + 'a {
        self.diagnostics.drain(..).map(move |d| {
            d.unwrap_or_else(|p| {
                let at = skel.locate_or_parent(&p.path, p.target);
                diagnostic(p, path, at)
            })
        })
    }
}

/// How [`check_one_pass`] ended.
pub(super) enum OnePass {
    /// The file is checked: what was found, and every job's name.
    Done(Checking, check::JobNames),
    /// It could not be checked in one pass (nothing it found stands; the jobs handed over are
    /// void): the first reading, to carry on from as [`first_pass`]'s.
    Fallback(FirstPass),
}

/// Where the line starting with the top-level key `jobs:` (block style, column 1) begins.
pub(super) fn jobs_line(text: &str) -> Option<usize> {
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        if let Some(rest) = line.strip_prefix("jobs:")
            && (rest.is_empty() || rest.starts_with([' ', '\t', '\r', '\n']))
        {
            return Some(at);
        }
        at += line.len();
    }
    None
}

/// Check a file whose `jobs:` list is its last section in ONE parse of the text (a
/// parse of a 1 000 000-job file costs tens of seconds). The sections before `jobs:` are
/// read first (the text up to that line, a few bytes), so the settings are known when the
/// first job arrives; each job is checked with the names read so far. The result stands only
/// when it is what [`first_pass`] + [`check_streamed`] would give: the whole text's skeleton
/// equals the one read ahead (nothing after `jobs:`, nothing that read differently cut
/// short), the list streamed, and no `after:` or `context_from` named a job not yet read (a
/// forward reference, or an unknown job: its message lists every name). Otherwise the pass
/// served as the names pass and the caller checks as before, with a fresh checker.
pub(super) fn check_one_pass(
    text: &str,
    path: &Path,
    checker: &mut check::Checker<'_>,
    each: &mut dyn FnMut(Option<JobDef>),
) -> OnePass {
    let Some(at) = jobs_line(text) else {
        return OnePass::Fallback(first_pass(text));
    };
    let mut ahead = text[..at].to_string();
    ahead.push_str("jobs: []\n");
    let Ok(ahead) = yaml::Document::parse(&ahead) else {
        return OnePass::Fallback(first_pass(text));
    };
    let Some((settings, defaults, _)) = checker.top(&ahead.value) else {
        return OnePass::Fallback(first_pass(text));
    };
    let top = std::mem::take(&mut checker.pending);
    let mut run = check::JobsRun::new(check::JobNames::default(), &settings);
    let mut seen = ItemsSeen::default();
    let parsed = yaml::Document::parse_streaming(text, &mut |item| {
        run.add_name(item.index, &item.value);
        let job = seen.check(checker, &mut run, &item, (&defaults, &settings), path);
        each(job);
        Ok(())
    });
    let skel = match parsed {
        Err(e) => return OnePass::Fallback(FirstPass::Failed(e)),
        Ok(None) => {
            return OnePass::Fallback(match yaml::Document::parse(text) {
                Ok(doc) => FirstPass::Whole(doc),
                Err(e) => FirstPass::Failed(e),
            });
        }
        Ok(Some(doc)) if !doc.streamed() => return OnePass::Fallback(FirstPass::Whole(doc)),
        Ok(Some(skel)) => skel,
    };
    if checker.unknown_job || skel.value != ahead.value {
        return OnePass::Fallback(FirstPass::Streamed(skel, run.into_names()));
    }
    let mut diagnostics: Vec<Diagnostic> = top
        .into_iter()
        .map(|p| {
            let at = skel.locate_or_parent(&p.path, p.target);
            diagnostic(p, path, at)
        })
        .collect();
    diagnostics.extend(seen.located(&skel, path));
    checker.jobs_end(&run, &settings);
    for p in std::mem::take(&mut checker.pending) {
        let at = seen
            .chain_at
            .get(&yaml::render(&p.path))
            .copied()
            .unwrap_or_else(|| skel.locate_or_parent(&p.path, p.target));
        diagnostics.push(diagnostic(p, path, at));
    }
    diagnostics.sort_by_key(|d| (d.line, d.column));
    OnePass::Done(
        Checking {
            parsed: Some((settings, defaults)),
            diagnostics,
        },
        run.into_names(),
    )
}

/// A jobs file that validated, ready to hand its jobs over one at a time ([`prepare_file`]):
/// `apply` of a large file never holds every definition (nor the YAML tree) at once.
pub struct Prepared {
    text: String,
    path: PathBuf,
    /// The settings as checked (before [`load_file`](crate::config::load_file)'s path adjustments).
    checked: Settings,
    /// The settings to store.
    settings: Settings,
    defaults: check::Defaults,
    calendars: Calendars,
    jobs: PreparedJobs,
    /// Warnings (the file is accepted).
    pub warnings: Vec<Diagnostic>,
}

pub(super) type Calendars = std::collections::BTreeMap<String, crate::schedule::calendar::Calendar>;

/// What [`Replay::run`] hands each job to: its item, its definition (`None`: it has errors)
/// and its diagnostics; an error stops the pass.
pub(super) type ReplayEach<'e> = dyn FnMut(&yaml::Item<'_>, Option<JobDef>, Vec<check::Pending>) -> Result<(), yaml::YamlError>
    + 'e;

/// What checking a streamed `jobs:` list once more needs (the pass that hands its jobs over
/// after they were checked: `apply`'s hand-over, `validate`'s printing).
pub(super) struct Replay<'t> {
    text: &'t str,
    path: &'t Path,
    /// The settings as checked.
    checked: &'t Settings,
    defaults: &'t check::Defaults,
    calendars: Calendars,
    names: check::JobNames,
}

impl Replay<'_> {
    /// Parse the list again and check each job as it is read; `each(item, job, pending)` gets
    /// the item, its definition (`None`: it has errors) and its diagnostics, and stops the
    /// pass with an error. Warnings that depend on the environment or the clock are not
    /// looked for (they never decide whether a job is valid).
    fn run(self, each: &mut ReplayEach<'_>) -> Result<Option<yaml::Document>, yaml::YamlError> {
        let env = |_: &str| true;
        let mut checker = new_checker(self.path, &env, None, None);
        checker.calendars = self.calendars;
        // The jobs' `tools:` name the sources of the sections, checked in the first pass.
        checker.tool_names = check::ToolNames::of(&self.checked.tools);
        let mut run = check::JobsRun::new(self.names, self.checked);
        yaml::Document::parse_streaming(self.text, &mut |item| {
            let job = checker.job_item(
                &mut run,
                item.index,
                &item.value,
                self.defaults,
                self.checked,
            );
            let pending = std::mem::take(&mut checker.pending);
            each(&item, job, pending)
        })
    }
}

pub(super) enum PreparedJobs {
    /// A file whose `jobs:` list streams: the jobs are checked again as they are handed over.
    Streamed(check::JobNames),
    /// A file read whole (an anchored or merged `jobs:` list): its definitions.
    Whole(Vec<JobDef>),
}

/// Why handing the jobs over stopped.
#[derive(Debug)]
pub enum Handover<E> {
    /// The receiver refused a definition.
    Refused(E),
    /// The file no longer reads as it did when it was validated (only a bug gets here).
    Changed(ConfigErrors),
}

impl Prepared {
    /// The settings to store (with [`load_file`](crate::config::load_file)'s adjustments).
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Hand every job over to `each`, in file order, one at a time. A streamed file is parsed
    /// and checked once more, job by job; nothing but the names is held meanwhile.
    pub fn for_each_job<E>(
        self,
        each: &mut dyn FnMut(JobDef) -> Result<(), E>,
    ) -> Result<(), Handover<E>> {
        let names = match self.jobs {
            PreparedJobs::Whole(jobs) => {
                return jobs
                    .into_iter()
                    .try_for_each(each)
                    .map_err(Handover::Refused);
            }
            PreparedJobs::Streamed(names) => names,
        };
        let replay = Replay {
            text: &self.text,
            path: &self.path,
            checked: &self.checked,
            defaults: &self.defaults,
            calendars: self.calendars,
            names,
        };
        let mut refused = None;
        let mut invalid = None;
        let r = replay.run(&mut |item, job, pending| {
            let Some(job) = job else {
                invalid = pending
                    .into_iter()
                    .find(|p| p.severity == Severity::Error)
                    .map(|p| {
                        let at = item.locate_or_parent(&p.path, p.target).unwrap_or((1, 1));
                        diagnostic(p, &self.path, at)
                    });
                return Err(yaml::YamlError::stop());
            };
            each(job).map_err(|e| {
                refused = Some(e);
                yaml::YamlError::stop()
            })
        });
        if let Some(e) = refused {
            return Err(Handover::Refused(e));
        }
        let changed = |d: Diagnostic| {
            Handover::Changed(ConfigErrors {
                diagnostics: vec![d],
            })
        };
        if let Some(d) = invalid {
            return Err(changed(d));
        }
        match r {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(changed(file_error(
                &self.path,
                "the jobs file changed while it was applied".to_string(),
            ))),
            Err(e) => Err(changed(yaml_error(e, &self.path))),
        }
    }
}

/// Read and validate a jobs file for a job-by-job hand-over ([`Prepared::for_each_job`]).
/// The file is read once and parsed once here when `jobs:` is its last section and every job
/// names only earlier ones (`check_one_pass`), twice otherwise (names first: duplicates,
/// `context_from` and `after:` may refer to a later job; then each job, checked and dropped),
/// so memory is the text plus a few bytes per job. Same diagnostics as
/// [`load_file`](crate::config::load_file).
pub fn prepare_file(path: &Path) -> Result<Prepared, ConfigErrors> {
    let text = read_text(path).map_err(|d| ConfigErrors {
        diagnostics: vec![d],
    })?;
    let is_set = |name: &str| std::env::var(name).is_ok_and(|v| !v.is_empty());
    let chars = |name: &str| std::env::var(name).ok().map(|v| v.trim().chars().count());
    let mut checker = new_checker(path, &is_set, Some(&chars), None);
    let first = match check_one_pass(&text, path, &mut checker, &mut drop) {
        OnePass::Done(c, names) => Err((c, names)),
        OnePass::Fallback(first) => {
            checker = new_checker(path, &is_set, Some(&chars), None);
            Ok(first)
        }
    };
    let (c, jobs) = match first {
        Err((c, names)) => (c, Some(PreparedJobs::Streamed(names))),
        Ok(first) => match first {
            FirstPass::Failed(e) => (Checking::failed(yaml_error(e, path)), None),
            FirstPass::Whole(doc) => {
                let mut jobs = Vec::new();
                let c = check_whole(&doc, path, &mut checker, &mut |j| jobs.extend(j));
                (c, Some(PreparedJobs::Whole(jobs)))
            }
            FirstPass::Streamed(skel, names) => {
                let (c, names) = check_streamed(&text, &skel, names, path, &mut checker, &mut drop);
                (c, Some(PreparedJobs::Streamed(names)))
            }
        },
    };
    let errors = c.diagnostics.iter().any(|d| d.severity == Severity::Error);
    let (Some((checked, defaults)), Some(jobs), false) = (c.parsed, jobs, errors) else {
        return Err(ConfigErrors {
            diagnostics: c.diagnostics,
        });
    };
    let mut settings = checked.clone();
    adjust_paths(path, &mut settings);
    Ok(Prepared {
        text,
        path: path.to_path_buf(),
        checked,
        settings,
        defaults,
        calendars: checker.calendars,
        jobs,
        warnings: c.diagnostics,
    })
}

/// What `validate` reports ([`validate_str_at`]), holding no definition of a streamed file (so 1
/// 000 000 jobs need no more than their text): the diagnostics, how many jobs there are and how
/// many validated; [`Validation::for_each_valid`] then hands the valid definitions over, a further
/// pass over a streamed `jobs:` list, so they can be printed after the diagnostics.
pub struct Validation<'t> {
    /// Errors and warnings, sorted by position.
    pub diagnostics: Vec<Diagnostic>,
    /// The jobs in the file.
    pub jobs: usize,
    /// The jobs that validated on their own.
    pub valid: usize,
    pub(super) valid_jobs: ValidJobs<'t>,
}

pub(super) enum ValidJobs<'t> {
    /// A file read whole: its valid definitions.
    Held(Vec<JobDef>),
    /// A streamed `jobs:` list, with its settings and defaults (boxed: one per file).
    Streamed(Box<StreamedJobs<'t>>),
}

/// [`ValidJobs::Streamed`]: what the hand-over pass needs.
pub(super) struct StreamedJobs<'t>(
    Settings,
    check::Defaults,
    Calendars,
    check::JobNames,
    &'t str,
);

impl Validation<'_> {
    /// Whether any diagnostic is an error.
    pub fn has_errors(&self) -> bool {
        self.diagnostics
            .iter()
            .any(|d| d.severity == Severity::Error)
    }

    /// Hand each valid definition to `each`, in file order, one at a time (a streamed list is
    /// parsed and checked once more, job by job). `path` is the file's, as validated.
    pub fn for_each_valid<E>(
        self,
        path: &Path,
        each: &mut dyn FnMut(&JobDef) -> Result<(), E>,
    ) -> Result<(), Handover<E>> {
        let (checked, defaults, calendars, names, text) = match self.valid_jobs {
            ValidJobs::Held(jobs) => {
                return jobs.iter().try_for_each(each).map_err(Handover::Refused);
            }
            ValidJobs::Streamed(b) => {
                let StreamedJobs(s, d, c, n, t) = *b;
                (s, d, c, n, t)
            }
        };
        let replay = Replay {
            text,
            path,
            checked: &checked,
            defaults: &defaults,
            calendars,
            names,
        };
        let mut refused = None;
        let r = replay.run(&mut |_, job, _| match job {
            Some(job) => each(&job).map_err(|e| {
                refused = Some(e);
                yaml::YamlError::stop()
            }),
            None => Ok(()),
        });
        if let Some(e) = refused {
            return Err(Handover::Refused(e));
        }
        let changed = |d: Diagnostic| {
            Handover::Changed(ConfigErrors {
                diagnostics: vec![d],
            })
        };
        match r {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(changed(file_error(
                path,
                "the jobs file read differently the second time".to_string(),
            ))),
            Err(e) => Err(changed(yaml_error(e, path))),
        }
    }
}

/// [`check_str_at`](crate::config::check_str_at) for `validate`: the same diagnostics, and the
/// valid jobs counted, not held (see [`Validation`]).
pub fn validate_str_at<'t>(
    text: &'t str,
    path: &Path,
    now: chrono::DateTime<chrono::Utc>,
) -> Validation<'t> {
    let env = |name: &str| std::env::var(name).ok();
    let is_set = |name: &str| env(name).is_some_and(|v| !v.is_empty());
    let chars = |name: &str| env(name).map(|v| v.trim().chars().count());
    let mut checker = new_checker(path, &is_set, Some(&chars), Some(now));
    let (mut jobs, mut valid) = (0, 0);
    let first = {
        let mut count = |j: Option<JobDef>| {
            jobs += 1;
            valid += usize::from(j.is_some());
        };
        match check_one_pass(text, path, &mut checker, &mut count) {
            OnePass::Done(c, names) => Err((c, names)),
            OnePass::Fallback(first) => Ok(first),
        }
    };
    let first = match first {
        Err((c, names)) => Err((c, names)),
        Ok(first) => {
            // Nothing the one-pass check found stands.
            checker = new_checker(path, &is_set, Some(&chars), Some(now));
            (jobs, valid) = (0, 0);
            Ok(first)
        }
    };
    let mut count = |j: &Option<JobDef>| {
        jobs += 1;
        valid += usize::from(j.is_some());
    };
    let (c, valid_jobs) = match first {
        Err((c, names)) => streamed_validation(c, names, &mut checker, text),
        Ok(first) => match first {
            FirstPass::Failed(e) => (
                Checking::failed(yaml_error(e, path)),
                ValidJobs::Held(Vec::new()),
            ),
            FirstPass::Whole(doc) => {
                let mut held = Vec::new();
                let c = check_whole(&doc, path, &mut checker, &mut |j| {
                    count(&j);
                    held.extend(j);
                });
                (c, ValidJobs::Held(held))
            }
            FirstPass::Streamed(skel, names) => {
                let (c, names) =
                    check_streamed(text, &skel, names, path, &mut checker, &mut |j| count(&j));
                streamed_validation(c, names, &mut checker, text)
            }
        },
    };
    Validation {
        diagnostics: c.diagnostics,
        jobs,
        valid,
        valid_jobs,
    }
}

/// What [`validate_str_at`] keeps of a streamed `jobs:` list's check: its diagnostics, and
/// what handing its valid jobs over needs.
pub(super) fn streamed_validation<'t>(
    c: Checking,
    names: check::JobNames,
    checker: &mut check::Checker<'_>,
    text: &'t str,
) -> (Checking, ValidJobs<'t>) {
    let calendars = std::mem::take(&mut checker.calendars);
    let v = match c.parsed {
        Some((settings, defaults)) => ValidJobs::Streamed(Box::new(StreamedJobs(
            settings, defaults, calendars, names, text,
        ))),
        None => ValidJobs::Held(Vec::new()),
    };
    (
        Checking {
            parsed: None,
            diagnostics: c.diagnostics,
        },
        v,
    )
}

pub(super) fn new_checker<'e>(
    path: &Path,
    env_is_set: &'e dyn Fn(&str) -> bool,
    env_chars: Option<check::EnvChars<'e>>,
    now: Option<chrono::DateTime<chrono::Utc>>,
) -> check::Checker<'e> {
    let mut checker = check::Checker::new(env_is_set);
    checker.now = now;
    checker.base_dir = Some(match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    });
    if let Some(f) = env_chars {
        checker = checker.with_env_chars(f);
    }
    checker
}

//! `cronsole jobs --json`: one JSON array of job views, **streamed** (issue 14 item 3). Jobs are
//! read from the store a page at a time ([`Store::jobs_page_json`], [`PAGE`] jobs, in name
//! order) by a reader thread, which hands each page over a bounded channel to the calling
//! thread; that one writes each view with the listing's own pretty writer ([`pretty`]) into one
//! reused buffer and hands it to the writer in one write. A job the store hands as its stored
//! JSON (the file store's lines) is printed from that JSON without parsing the record (`fast`:
//! transcoded, its shape checked once against the full parse); a parsed record (PostgreSQL, or
//! a line the fast path declines) is serialised. Reading overlaps writing on two cores; the
//! memory this adds is at most three pages whatever the number of jobs, and the first bytes
//! leave before the last job is read.
//!
//! Owns: the shape of a job view (the JSON contract of `jobs --json`) and its streaming writer.
//! Must not touch: store internals (it speaks only the trait), text formatting of `jobs`.
//!
//! Decisions: the output is byte for byte what `text::to_json_pretty` (serde_json's pretty layout
//! with the text policy's `\uXXXX` escapes for bidi, invisible and C1 characters) of the whole list
//! prints (a pretty-printed array, `[]` when empty; tested across page boundaries); the
//! budget period's key is computed once per listing, not per job; the store's lock is held for
//! one page's reads at most (the file store parses after releasing it), never while writing (a
//! slow reader such as `| less` cannot stall the engines sharing the store; the reader thread
//! waits on the full channel without the lock); a page is consistent in itself, and a job renamed or added between pages
//! is listed once or not at all, like `ls` on a directory that changes while it runs.

use std::io::Write;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::model::{JobDef, JobRecord, JobRuntime, Lease, Settings, Status};
use crate::store::logic::counter_period;
use crate::store::{JsonPage, PageJob, Store, StoreError};

mod fast;
pub mod pretty;

/// Jobs read from the store per page.
pub const PAGE: usize = 1024;

/// One job as `jobs --json` prints it.
#[derive(Debug, Serialize)]
pub struct JobView<'a> {
    /// The job's name.
    pub name: &'a str,
    /// What it is doing now (`scheduled`, `running`, `paused`, …).
    pub state: &'static str,
    /// The schedule as written.
    pub schedule: &'a str,
    /// Its next slot (UTC).
    pub next_slot: Option<DateTime<Utc>>,
    /// The instant the next slot fires: the slot plus the job's jitter (NEXT in the table).
    pub next_fire_at: Option<DateTime<Utc>>,
    /// When it last ran.
    pub last_run_at: Option<DateTime<Utc>>,
    /// How its last run ended.
    pub last_status: Option<Status>,
    /// Scheduled runs so far (what `max_runs` counts).
    pub runs: u64,
    /// Paused by an operator.
    pub paused: bool,
    /// Retired (no more slots, or removed from the jobs file).
    pub retired: bool,
    /// Why it was retired.
    pub retired_reason: Option<&'a str>,
    /// The lease of its running run, if any.
    pub lease: Option<&'a Lease>,
    /// Its spend in the current budget period.
    pub period_cost_usd: f64,
    /// Its own budget per period.
    pub max_cost_usd: Option<f64>,
    /// Its whole definition.
    pub definition: &'a JobDef,
    /// Its whole runtime record.
    pub runtime: &'a JobRuntime,
}

impl<'a> JobView<'a> {
    /// The view of one job at `now` (its spend counted in the current budget period).
    pub fn of(r: &'a JobRecord, settings: &Settings, now: DateTime<Utc>) -> JobView<'a> {
        let key = counter_period(settings).key(now);
        JobView::in_period(r, &key, now)
    }

    /// [`JobView::of`] with the current budget period's key computed once by the caller (one
    /// `format` per listing, not per job).
    fn in_period(r: &'a JobRecord, period_key: &str, now: DateTime<Utc>) -> JobView<'a> {
        JobView {
            name: &r.def.name,
            state: r.state_word(now),
            schedule: &r.def.schedule_text,
            next_slot: r.rt.next_slot,
            next_fire_at: r.rt.next_slot.map(|n| r.def.fire_at(n)),
            last_run_at: r.rt.last_run_at,
            last_status: r.rt.last_status,
            runs: r.rt.runs,
            paused: r.rt.paused,
            retired: r.rt.retired,
            retired_reason: r.rt.retired_reason.as_deref(),
            lease: r.rt.lease.as_ref(),
            period_cost_usd: crate::store::budget::counter_spend(&r.rt.counters, period_key),
            max_cost_usd: r.def.max_cost_usd,
            definition: &r.def,
            runtime: &r.rt,
        }
    }
}

/// Why a streamed listing stopped.
#[derive(Debug, thiserror::Error)]
pub enum ListingError {
    /// The store could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The output could not be written.
    #[error("writing the job list: {0}")]
    Write(#[source] std::io::Error),
    /// A job could not be put in JSON (a bug in a model type's `Serialize`, never bad input).
    #[error("encoding the job list: {0}")]
    Encode(#[source] pretty::EncodeError),
}

/// Pages read ahead of the writer: one waiting in the channel while the reader reads the next
/// and the writer encodes a third, so memory stays three pages whatever the number of jobs.
const READ_AHEAD: usize = 1;

/// Write every job of `store` as one pretty-printed JSON array to `out`, a page at a time.
/// Returns how many jobs were written. The writer is flushed at the end.
///
/// A reader thread reads the pages ([`Store::jobs_page`]: the store's lock and the parsing of
/// the records) and hands them over a bounded channel to this thread, which encodes each page
/// with [`pretty::Pretty`] into one reused buffer (the same bytes as `text::to_json_pretty` of
/// the whole array) and hands it to `out` in one write: on two cores reading and encoding
/// overlap. When writing fails the channel closes and the reader stops after its page.
pub fn write_jobs_json(
    store: &dyn Store,
    settings: &Settings,
    now: DateTime<Utc>,
    out: impl Write,
) -> Result<usize, ListingError> {
    write_counted(store, settings, now, out).map(|c| c.jobs)
}

/// How a listing printed its jobs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    /// Jobs written.
    jobs: usize,
    /// Of those, printed from their stored JSON ([`fast`]).
    from_json: u64,
}

/// [`write_jobs_json`], counting the jobs printed from their stored JSON.
fn write_counted(
    store: &dyn Store,
    settings: &Settings,
    now: DateTime<Utc>,
    mut out: impl Write,
) -> Result<Counts, ListingError> {
    let key = counter_period(settings).key(now);
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Result<JsonPage, StoreError>>(READ_AHEAD);
        s.spawn(move || {
            let mut after: Option<String> = None;
            loop {
                let page = store.jobs_page_json(after.as_deref(), PAGE);
                after = match &page {
                    Ok(p) if p.jobs.len() == PAGE => p.jobs.last().map(|j| j.name().to_string()),
                    _ => None,
                };
                // A closed channel: the writer stopped (its error is the one reported).
                if tx.send(page).is_err() || after.is_none() {
                    return;
                }
            }
        });
        // The array's elements sit at depth 1; each is preceded by "\n" (first) or ",\n" + indent.
        let mut enc = pretty::Pretty::at_depth(1);
        let mut shapes = fast::Shapes::default();
        enc.out.push(b'[');
        let mut n = 0usize;
        // The name before the page's first job (where a re-read of that job starts).
        let mut before: Option<String> = None;
        for page in rx {
            let page = page?;
            for (i, job) in page.jobs.iter().enumerate() {
                let mark = enc.out.len();
                enc.out
                    .extend_from_slice(if n == 0 { b"\n  " } else { b",\n  " });
                let printed = match job {
                    PageJob::Record(r) => {
                        JobView::in_period(r, &key, now)
                            .serialize(&mut enc)
                            .map_err(ListingError::Encode)?;
                        true
                    }
                    PageJob::Json { name, range } => {
                        let json = page.buf.get(range.clone());
                        let done = match json {
                            Some(json) => shapes
                                .write(&mut enc, json, name, &key, now)
                                .map_err(ListingError::Encode)?,
                            None => false,
                        };
                        if done {
                            true
                        } else {
                            // Its JSON did not parse as its record: read it again through the
                            // store's own path, whose error names the file and line.
                            let prev = match i {
                                0 => before.as_deref(),
                                _ => Some(page.jobs[i - 1].name()),
                            };
                            match store.jobs_page(prev, 1)?.first() {
                                Some(r) if r.def.name == *name => {
                                    JobView::in_period(r, &key, now)
                                        .serialize(&mut enc)
                                        .map_err(ListingError::Encode)?;
                                    true
                                }
                                // Removed since the page was read: not listed.
                                _ => false,
                            }
                        }
                    }
                };
                if printed {
                    n += 1;
                } else {
                    enc.out.truncate(mark);
                }
            }
            before = page.jobs.last().map(|j| j.name().to_string());
            out.write_all(&enc.out).map_err(ListingError::Write)?;
            enc.out.clear();
        }
        out.write_all(if n == 0 { b"]\n" } else { b"\n]\n" })
            .and_then(|()| out.flush())
            .map_err(ListingError::Write)?;
        Ok(Counts {
            jobs: n,
            from_json: shapes.fast,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::JobsFile;
    use crate::store::file::FileStore;

    use crate::testkit::tmp::TempDir;

    fn store_with(n: usize) -> (TempDir, FileStore, DateTime<Utc>) {
        let dir = TempDir::new("listing");
        let store = FileStore::open(&dir).unwrap();
        let now = DateTime::parse_from_rfc3339("2026-11-30T12:00:00Z")
            .unwrap()
            .to_utc();
        let file = JobsFile {
            jobs: (0..n)
                .map(|i| crate::testkit::jobs::command_job(&format!("job-{i:05}"), 3600))
                .collect(),
            ..Default::default()
        };
        store.apply(&file, now).unwrap();
        (dir, store, now)
    }

    /// What the whole-list writer printed before streaming (`to_string_pretty` of every view).
    fn whole(store: &dyn Store, now: DateTime<Utc>) -> String {
        let settings = store.settings().unwrap();
        let jobs = store.jobs().unwrap();
        let views: Vec<JobView> = jobs
            .iter()
            .map(|r| JobView::of(r, &settings, now))
            .collect();
        format!("{}\n", crate::text::to_json_pretty(&views).unwrap())
    }

    #[test]
    fn streamed_output_is_the_whole_list_byte_for_byte_across_pages() {
        for n in [0, 1, PAGE - 1, PAGE, PAGE + 1, 2 * PAGE + 7] {
            let (_d, store, now) = store_with(n);
            let settings = store.settings().unwrap();
            let mut out = Vec::new();
            let counts = write_counted(&store, &settings, now, &mut out).unwrap();
            assert_eq!(counts.jobs, n);
            // Every record was printed from its stored JSON (the file store's lines).
            assert_eq!(counts.from_json, n as u64);
            let text = String::from_utf8(out).unwrap();
            assert_eq!(text, whole(&store, now), "{n} jobs");
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v.as_array().unwrap().len(), n);
        }
    }

    /// The console's fixture jobs carry what `command_job` does not (agents, monitors, gates,
    /// leases, hour buckets, budget stops, pause reasons, queues): each view, encoded by the
    /// listing's writer, is serde_json's pretty text.
    #[test]
    fn rich_job_views_encode_as_serde_json_pretty() {
        let (snap, now) = crate::tui::testdata::fixed();
        let jobs = crate::tui::testdata::fixed_jobs(now);
        assert!(jobs.len() > 5);
        for r in &jobs {
            let v = JobView::of(r, &snap.settings, now);
            let mut enc = pretty::Pretty::default();
            v.serialize(&mut enc).unwrap();
            assert_eq!(
                String::from_utf8(enc.out).unwrap(),
                crate::text::to_json_pretty(&v).unwrap(),
                "{}",
                r.def.name
            );
        }
    }

    #[test]
    fn a_failing_writer_is_an_error_not_a_panic() {
        struct Broken;
        impl Write for Broken {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::Error::new(std::io::ErrorKind::BrokenPipe, "gone"))
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let (_d, store, now) = store_with(3);
        let settings = store.settings().unwrap();
        let e = write_jobs_json(&store, &settings, now, Broken).unwrap_err();
        assert!(matches!(e, ListingError::Write(_)), "{e}");
    }
}

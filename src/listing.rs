//! `cronsole jobs --json`: one JSON array of job views, **streamed** (a million jobs print without
//! holding them). Jobs are
//! read from the store a page at a time ([`Store::jobs_page_json`], [`PAGE`] jobs, in name
//! order) by a reader thread; worker threads (one per core) each take the next page read and
//! transcode it whole into an output buffer with the listing's own pretty writer ([`pretty`]);
//! the calling thread only writes the finished buffers, in page order, one write each. A job the
//! store hands as its stored JSON (the file store's lines) is printed from that JSON without
//! parsing the record (`fast`: transcoded, its shape checked once per worker against the full
//! parse); a parsed record (PostgreSQL, or a line the fast path declines) is serialised. Reading,
//! transcoding and writing overlap on every core; the pages in flight are bounded (a few per
//! worker, buffers reused), so the memory this adds is flat whatever the number of jobs, and the
//! first bytes leave before the last job is read.
//!
//! Owns: the shape of a job view (the JSON contract of `jobs --json`) and its streaming writer.
//! Must not touch: store internals (it speaks only the trait), text formatting of `jobs`.
//!
//! Decisions: the output is byte for byte what `text::to_json_pretty` (serde_json's pretty layout
//! with the text policy's `\uXXXX` escapes for bidi, invisible and C1 characters) of the whole list
//! prints (a pretty-printed array, `[]` when empty; tested across page boundaries); the budget
//! period's key is computed once per listing, not per job; the store's lock is held for one page's
//! reads at most (the file store parses after releasing it), never while writing (a slow reader
//! such as `| less` cannot stall the engines sharing the store; the reader thread waits on the full
//! channel without the lock); a page is consistent in itself, and a job renamed or added between
//! pages is listed once or not at all, like `ls` on a directory that changes while it runs.

use std::io::Write;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::cost::budget_period;
use crate::model::{JobDef, JobRecord, JobRuntime, Lease, Settings, Status};
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
    /// What it is doing now ([`state`]: `idle`, `running`, `awaiting_approval`, `queued`,
    /// `paused`, …).
    pub state: &'static str,
    /// The tool call its run awaits an operator's answer for (`cronsole approve` / `deny`), if
    /// one does.
    pub awaiting_approval: Option<AwaitingView<'a>>,
    /// The schedule as written.
    pub schedule: &'a str,
    /// Its next slot (UTC).
    pub next_slot: Option<DateTime<Utc>>,
    /// The instant the next slot fires: the slot plus the job's jitter (NEXT in the table);
    /// `null` while nothing will fire (paused, disabled or retired: the table's `n/a`), where
    /// `next_slot` still shows the stored slot.
    pub next_fire_at: Option<DateTime<Utc>>,
    /// When it last ran.
    pub last_run_at: Option<DateTime<Utc>>,
    /// How its last run ended.
    pub last_status: Option<Status>,
    /// Every execution so far (succeeded, no_change, failed and abandoned rows, any trigger): RUNS in
    /// `jobs`, `stats` and the console. What `max_runs` counts is `runtime.runs`.
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
    /// What its budget holds this period for model calls in flight or of unknown outcome: not
    /// spent yet, not available either (its budget's left = limit − spent − this).
    pub in_flight_usd: f64,
    /// Its own budget per period.
    pub max_cost_usd: Option<f64>,
    /// Its whole definition.
    pub definition: &'a JobDef,
    /// Its whole runtime record.
    pub runtime: &'a JobRuntime,
}

/// A tool call awaiting approval, as `jobs --json` shows it at the top of its job's view (the
/// arguments are in `cronsole approvals`).
#[derive(Debug, Serialize)]
pub struct AwaitingView<'a> {
    /// The run that waits (what `approve` and `deny` take).
    pub run_id: uuid::Uuid,
    /// The tool it wants to call (its jobs-file name).
    pub tool: &'a str,
    /// When the wait began.
    pub since: DateTime<Utc>,
    /// When an unanswered wait ends as a denial.
    pub deadline: DateTime<Utc>,
}

/// The first of `r`'s live runs whose tool call awaits an answer (answered waits are over for
/// the operator: the run's owner picks the answer up).
pub fn awaiting(r: &JobRecord) -> Option<AwaitingView<'_>> {
    r.rt.leases().find_map(|l| {
        l.awaiting
            .as_ref()
            .filter(|a| a.answer.is_none())
            .map(|a| AwaitingView {
                run_id: l.run_id,
                tool: &a.tool,
                since: a.since,
                deadline: a.deadline,
            })
    })
}

impl<'a> JobView<'a> {
    /// The view of one job at `now` (its spend counted in the current budget period).
    pub fn of(r: &'a JobRecord, settings: &Settings, now: DateTime<Utc>) -> JobView<'a> {
        let key = budget_period(settings).key(now);
        JobView::in_period(r, &key, now)
    }

    /// [`JobView::of`] with the current budget period's key computed once by the caller (one
    /// `format` per listing, not per job).
    fn in_period(r: &'a JobRecord, period_key: &str, now: DateTime<Utc>) -> JobView<'a> {
        JobView {
            name: &r.def.name,
            state: state(r, now),
            awaiting_approval: awaiting(r),
            schedule: &r.def.schedule_text,
            next_slot: r.rt.next_slot,
            next_fire_at: r.next_fire_at().filter(|_| r.fires()),
            last_run_at: r.rt.last_run_at,
            last_status: r.rt.last_status,
            runs: r.rt.counters.executions(),
            paused: r.rt.paused,
            retired: r.rt.retired,
            retired_reason: r.rt.retired_reason.as_deref(),
            lease: r.rt.lease.as_ref(),
            period_cost_usd: crate::store::rules::period::counter_spend(&r.rt.counters, period_key),
            in_flight_usd: crate::store::rules::period::committed_counters(
                &r.rt.counters,
                period_key,
            )
            .1,
            max_cost_usd: r.def.max_cost_usd,
            definition: &r.def,
            runtime: &r.rt,
        }
    }
}

/// The word a listing shows for what `r` is doing at `now`, the same in `jobs` (STATE),
/// `describe` and `jobs --json` (`state`): `cancelling` (its run's cancel is pending),
/// `awaiting_approval` (a run's tool call waits for an operator: one word, so the table's
/// columns stay whitespace-separated), `queued`
/// (a manual trigger, retry or backfill waits for an owner, nothing running, not retired:
/// such a run is claimed even while the job is paused or disabled, so it is what
/// happens next), else `JobRecord::state_word` (`retired`, `running`, `paused`, `held`,
/// `idle`). Running beats queued beats paused: what an operator needs first.
pub fn state(r: &JobRecord, now: DateTime<Utc>) -> &'static str {
    if r.rt
        .lease
        .as_ref()
        .is_some_and(|l| l.cancel_requested_at.is_some())
    {
        "cancelling"
    } else if awaiting(r).is_some() {
        "awaiting_approval"
    } else if !r.rt.retired
        && r.rt.lease.is_none()
        && (r.rt.trigger_requested_at.is_some() || !r.rt.queue.is_empty())
    {
        "queued"
    } else {
        r.state_word(now)
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

/// Most threads that transcode pages side by side (each holds a page and its output buffer).
const MAX_WORKERS: usize = 8;

/// Threads that transcode pages: one per available core (the reader and the writer wait on
/// channels most of the time), at most [`MAX_WORKERS`].
fn workers() -> usize {
    std::thread::available_parallelism()
        .map_or(1, usize::from)
        .clamp(1, MAX_WORKERS)
}

/// Write every job of `store` as one pretty-printed JSON array to `out`, a page at a time.
/// Returns how many jobs were written. The writer is flushed at the end.
///
/// A reader thread reads the pages in name order ([`Store::jobs_page_json`]: the store's lock
/// for the page's reads); worker threads (one per core) each take the next page read and
/// transcode it whole into an output buffer (`listing::fast`, or [`pretty::Pretty`] for a parsed
/// record: the same bytes as `text::to_json_pretty` of the whole array); this thread writes the
/// finished buffers to `out` in page order, one write each. At most a few pages per worker are
/// in flight (bounded channels), and written buffers go back to the workers, so memory stays
/// flat whatever the number of jobs. When writing fails the channels close and the other
/// threads stop after their page.
pub fn write_jobs_json(
    store: &dyn Store,
    settings: &Settings,
    now: DateTime<Utc>,
    out: impl Write,
) -> Result<usize, ListingError> {
    write_counted(store, settings, now, out, workers()).map(|c| c.jobs)
}

/// How a listing printed its jobs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    /// Jobs written.
    jobs: usize,
    /// Of those, printed from their stored JSON ([`fast`]).
    from_json: u64,
}

/// One page read, for a worker: the page, the name it was read after (where a re-read of its
/// first job starts), and where its output goes.
struct Work {
    page: JsonPage,
    after: Option<String>,
    done: std::sync::mpsc::SyncSender<Result<Done, ListingError>>,
}

/// One page transcoded: its elements, each preceded by `",\n  "` (the writer drops the comma
/// before the listing's first), how many, and how many of them from their stored JSON.
struct Done {
    buf: Vec<u8>,
    jobs: usize,
    from_json: u64,
}

/// Take the lock even if a thread panicked holding it (it only guards a receiver).
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// [`write_jobs_json`] with `workers` transcoding threads, counting the jobs printed from their
/// stored JSON.
fn write_counted(
    store: &dyn Store,
    settings: &Settings,
    now: DateTime<Utc>,
    mut out: impl Write,
    workers: usize,
) -> Result<Counts, ListingError> {
    use std::sync::mpsc::{Receiver, channel, sync_channel};
    use std::sync::{Arc, Mutex};

    let workers = workers.max(1);
    let key = budget_period(settings).key(now);
    let key = key.as_str();
    std::thread::scope(|s| {
        // Pages read, in order, waiting for a worker; and, in the same order, the channel each
        // page's output comes back on, waiting for this thread. The bounds keep the pages in
        // flight at most 3 per worker plus one.
        let (work_tx, work_rx) = sync_channel::<Work>(workers);
        let (order_tx, order_rx) =
            sync_channel::<Receiver<Result<Done, ListingError>>>(2 * workers);
        // Written buffers, back to the workers (never more than the pages in flight).
        let (spare_tx, spare_rx) = channel::<Vec<u8>>();
        s.spawn(move || {
            let mut after: Option<String> = None;
            loop {
                let (done_tx, done_rx) = sync_channel(1);
                // A closed channel: the writer stopped (its error is the one reported).
                if order_tx.send(done_rx).is_err() {
                    return;
                }
                match store.jobs_page_json(after.as_deref(), PAGE) {
                    Err(e) => {
                        let _ = done_tx.send(Err(e.into()));
                        return;
                    }
                    Ok(page) => {
                        let next = match page.jobs.len() {
                            PAGE => page.jobs.last().map(|j| j.name().to_string()),
                            _ => None,
                        };
                        let work = Work {
                            page,
                            after: after.take(),
                            done: done_tx,
                        };
                        if work_tx.send(work).is_err() {
                            return;
                        }
                        match next {
                            Some(n) => after = Some(n),
                            None => return,
                        }
                    }
                }
            }
        });
        let work_rx = Arc::new(Mutex::new(work_rx));
        let spare_rx = Arc::new(Mutex::new(spare_rx));
        for _ in 0..workers {
            let work_rx = Arc::clone(&work_rx);
            let spare_rx = Arc::clone(&spare_rx);
            s.spawn(move || {
                let mut shapes = fast::Shapes::default();
                loop {
                    let next = lock(&work_rx).recv();
                    let Ok(Work { page, after, done }) = next else {
                        return;
                    };
                    let mut enc = pretty::Pretty::at_depth(1);
                    enc.out = lock(&spare_rx).try_recv().unwrap_or_default();
                    let fast_before = shapes.fast;
                    let result =
                        transcode_page(store, &page, after.as_deref(), key, now, &mut shapes, enc)
                            .map(|(buf, jobs)| Done {
                                buf,
                                jobs,
                                from_json: shapes.fast - fast_before,
                            });
                    // A closed channel: the writer stopped; the reader stops too.
                    if done.send(result).is_err() {
                        return;
                    }
                }
            });
        }
        drop((work_rx, spare_rx));

        out.write_all(b"[").map_err(ListingError::Write)?;
        let mut counts = Counts::default();
        for done in order_rx {
            let Done {
                mut buf,
                jobs,
                from_json,
            } = match done.recv() {
                Ok(d) => d?,
                // Its worker is gone without a word (it panicked: the scope reports it).
                Err(_) => {
                    return Err(ListingError::Encode(serde::ser::Error::custom(
                        "a listing worker stopped",
                    )));
                }
            };
            if jobs > 0 {
                // The listing's first element is preceded by "\n", not ",\n".
                let body = match counts.jobs {
                    0 => buf.get(1..).unwrap_or_default(),
                    _ => &buf[..],
                };
                out.write_all(body).map_err(ListingError::Write)?;
            }
            counts.jobs += jobs;
            counts.from_json += from_json;
            buf.clear();
            // The workers may all be gone (the last page): the buffer is dropped then.
            let _ = spare_tx.send(buf);
        }
        out.write_all(if counts.jobs == 0 { b"]\n" } else { b"\n]\n" })
            .and_then(|()| out.flush())
            .map_err(ListingError::Write)?;
        Ok(counts)
    })
}

/// One page's views into `enc` (its buffer reused), each preceded by `",\n  "`; returns the
/// buffer and how many jobs it holds. `after` is the name the page was read after.
fn transcode_page(
    store: &dyn Store,
    page: &JsonPage,
    after: Option<&str>,
    key: &str,
    now: DateTime<Utc>,
    shapes: &mut fast::Shapes,
    mut enc: pretty::Pretty,
) -> Result<(Vec<u8>, usize), ListingError> {
    let mut n = 0usize;
    for (i, job) in page.jobs.iter().enumerate() {
        let mark = enc.out.len();
        enc.out.extend_from_slice(b",\n  ");
        let printed = match job {
            PageJob::Record(r) => {
                JobView::in_period(r, key, now)
                    .serialize(&mut enc)
                    .map_err(ListingError::Encode)?;
                true
            }
            PageJob::Json { name, range } => {
                let done = match page.buf.get(range.clone()) {
                    Some(json) => shapes
                        .write(&mut enc, json, name, key, now)
                        .map_err(ListingError::Encode)?,
                    None => false,
                };
                if done {
                    true
                } else {
                    // Its JSON did not parse as its record: read it again through the store's
                    // own path, whose error names the file and line.
                    let prev = match i {
                        0 => after,
                        _ => Some(page.jobs[i - 1].name()),
                    };
                    match store.jobs_page(prev, 1)?.first() {
                        Some(r) if r.def.name == *name => {
                            JobView::in_period(r, key, now)
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
    Ok((enc.out, n))
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
        for n in [0, 1, PAGE - 1, PAGE, PAGE + 1, 5 * PAGE + 7] {
            let (_d, store, now) = store_with(n);
            let settings = store.settings().unwrap();
            let want = whole(&store, now);
            // Pages transcoded side by side are still written in order.
            for workers in [1, 2, 3] {
                let mut out = Vec::new();
                let counts = write_counted(&store, &settings, now, &mut out, workers).unwrap();
                assert_eq!(counts.jobs, n);
                // Every record was printed from its stored JSON (the file store's lines).
                assert_eq!(counts.from_json, n as u64);
                let text = String::from_utf8(out).unwrap();
                assert_eq!(text, want, "{n} jobs, {workers} workers");
                let v: serde_json::Value = serde_json::from_str(&text).unwrap();
                assert_eq!(v.as_array().unwrap().len(), n);
            }
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

    /// A disabled (`enabled: false`) job with a run queued is `queued` in
    /// `jobs --json` as in the table (`listing::state`), printed from its stored JSON and from
    /// the parsed record alike; a backfill queued on a paused job too.
    #[test]
    fn a_disabled_or_paused_job_with_a_queued_run_is_queued_in_both_paths() {
        let dir = TempDir::new("listing-queued");
        let store = FileStore::open(&dir).unwrap();
        let now = DateTime::parse_from_rfc3339("2026-11-30T12:00:00Z")
            .unwrap()
            .to_utc();
        let mut off = crate::testkit::jobs::command_job("a-off", 3600);
        off.enabled = false;
        let file = JobsFile {
            jobs: vec![
                off,
                crate::testkit::jobs::command_job("b-paused", 3600),
                crate::testkit::jobs::command_job("c-plain", 3600),
                crate::testkit::jobs::command_job("d-off-idle", 3600),
            ],
            ..Default::default()
        };
        let mut file = file;
        file.jobs[3].enabled = false;
        store.apply(&file, now).unwrap();
        store.request_trigger("a-off", now).unwrap();
        store.set_paused("b-paused", true, now).unwrap();
        store
            .update_job(
                "b-paused",
                &crate::store::JobEdit::Backfill {
                    from: now - chrono::Duration::hours(2),
                    to: now - chrono::Duration::minutes(30),
                },
                now,
            )
            .unwrap();
        let want = ["queued", "queued", "idle", "paused"];
        let records = store.jobs().unwrap();
        let words: Vec<&str> = records.iter().map(|r| state(r, now)).collect();
        assert_eq!(words, want);
        let settings = store.settings().unwrap();
        // From the stored JSON (the file store's lines).
        let mut out = Vec::new();
        let counts = write_counted(&store, &settings, now, &mut out, 2).unwrap();
        assert_eq!(counts.from_json, 4);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let got: Vec<&str> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["state"].as_str().unwrap())
            .collect();
        assert_eq!(got, want);
        // From the parsed records (what PostgreSQL hands): the same bytes.
        assert_eq!(String::from_utf8(out).unwrap(), whole(&store, now));
    }

    /// A job whose run's tool call awaits approval shows it at the top of its view (state
    /// `awaiting_approval`, `awaiting_approval: {run_id, tool, since, deadline}`), printed
    /// from the parsed record; the other jobs, from their stored JSON, show `null`: both
    /// paths print what the whole list prints.
    #[test]
    fn a_call_awaiting_approval_is_at_the_top_of_its_jobs_view_in_both_paths() {
        use crate::store::{AwaitStep, ClaimRequest, HistoryReader, LoopStep, StepOutcome};
        let (_d, store, stored) = store_with(3);
        // The jobs' first slots are an hour after they were stored.
        let now = stored + chrono::Duration::hours(1);
        let claims = store
            .claim_due(&ClaimRequest {
                now,
                owner: "me",
                limit: 1,
                in_flight: &[],
                clock_stepped: None,
                max_offset: None,
            })
            .unwrap()
            .claims;
        let c = &claims[0];
        let deadline = now + chrono::Duration::hours(1);
        let out = store
            .loop_step(&LoopStep {
                job: &c.job.def.name,
                run_id: c.run_id,
                owner: "me",
                settle: None,
                reserve: None,
                set_aside: None,
                record: &[],
                awaiting: AwaitStep::Begin(crate::model::AwaitingApproval {
                    tool: "files.write_file".into(),
                    call_id: "call-1".into(),
                    arguments: "{\"path\":\"/srv/x\"}".into(),
                    since: now,
                    deadline,
                    answer: None,
                }),
                now,
            })
            .unwrap();
        assert!(matches!(out, StepOutcome::Stepped { .. }), "{out:?}");
        let settings = store.settings().unwrap();
        let mut out = Vec::new();
        let counts = write_counted(&store, &settings, now, &mut out, 2).unwrap();
        assert_eq!((counts.jobs, counts.from_json), (3, 2));
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text, whole(&store, now));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let views = v.as_array().unwrap();
        let waiting = views
            .iter()
            .find(|j| j["name"] == c.job.def.name.as_str())
            .unwrap();
        assert_eq!(waiting["state"], "awaiting_approval");
        assert_eq!(
            waiting["awaiting_approval"],
            serde_json::json!({
                "run_id": c.run_id,
                "tool": "files.write_file",
                "since": "2026-11-30T13:00:00Z",
                "deadline": "2026-11-30T14:00:00Z",
            })
        );
        for other in views
            .iter()
            .filter(|j| j["name"] != c.job.def.name.as_str())
        {
            assert!(other["awaiting_approval"].is_null(), "{other}");
            assert_eq!(other["state"], "idle");
        }
        // Answered, the wait is over for the operator: the run is `running` again.
        store
            .answer_approval(c.run_id, None, true, None, None, now)
            .unwrap();
        let rec = store.job(&c.job.def.name).unwrap().unwrap();
        assert_eq!(state(&rec, now), "running");
        assert!(awaiting(&rec).is_none());
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

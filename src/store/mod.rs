//! The store: the single source of truth shared by every owner. Definitions, runtime state
//! (slots, leases, pause, triggers, holds), per-job state and history live here, and every change
//! another process must see goes through it.
//!
//! Owns: the [`Store`] trait; `file` (the embedded default) and `postgres` implement it. Must
//! not touch: clocks (every call takes `now`), the engine, the UI, networking other than the
//! database. The trait is synchronous: the file store is blocking I/O under an `fs4` lock
//! (through `io::StoreIo`); async callers use `tokio::task::spawn_blocking`.
//!
//! The decisions run one way, bottom to top: `rules` (slots, periods, reason words, row
//! identity, lease primitives), then `policy` (budget, counters, overlap, chains, operator
//! edits, a definition arriving, a run's end), then `plan` (claim, recover, complete, apply
//! over the records involved). Both stores sit on top: they lock, load the records a plan names
//! and persist what it returns.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::model::{HistoryRow, JobRecord, JobsFile, OwnerRecord, OwnerSeen, Settings};

pub use crate::cost::SpendNow;
pub use error::{BackendError, OpenError, OperationError, Refusal, StoreError, StoreResult};
pub use plan::step::{AwaitStep, LoopStep, StepOutcome};
pub use policy::budget::{ReserveOutcome, ReserveRequest, Settlement};
pub use policy::operator::{BULK_CHUNK, BulkAction, BulkDone, BulkOutcome, EditOutcome, JobEdit};
pub use signal::ChangeSignal;
pub use types::*;

pub(crate) mod check;
mod error;
pub mod file;
pub(crate) mod filefmt;
pub(crate) mod io;
pub(crate) mod plan;
pub(crate) mod policy;
pub mod postgres;
pub(crate) mod rules;
pub(crate) mod signal;
pub(crate) mod stats;
mod types;
pub(crate) mod wrap;

/// Run a blocking store call on tokio's blocking pool, off the async workers: the one wrapper
/// every async caller (engine, attached console) uses, since stores are synchronous. A task that
/// panicked or was cancelled becomes [`BackendError::Task`] (exit 1, not retryable).
pub async fn blocking<T, F>(store: &std::sync::Arc<dyn Store>, f: F) -> StoreResult<T>
where
    T: Send + 'static,
    F: FnOnce(&dyn Store) -> StoreResult<T> + Send + 'static,
{
    let store = std::sync::Arc::clone(store);
    tokio::task::spawn_blocking(move || f(store.as_ref()))
        .await
        .unwrap_or_else(|source| {
            Err(StoreError::Backend(BackendError::Task {
                what: "store task failed",
                source,
            }))
        })
}

/// Where [`Store::beat_handoff`] hands a heartbeat's answer.
pub type BeatDone = Box<dyn FnOnce(StoreResult<OwnerRecord>) + Send>;

/// Reading history: what the console's on-demand reads (detail, `h`, diffs), `cronsole history`
/// and `cronsole diff` need. Every [`Store`] is one; a test double or a read-only view can be
/// this alone.
pub trait HistoryReader: Send + Sync {
    /// Rows matching `q`, newest first.
    fn history(&self, q: &HistoryQuery) -> StoreResult<Vec<HistoryRow>>;
    /// One page of `q` (`q.limit` rows; 0 means all, with no next page) and the token of the
    /// next. The stores answer with keyset positions; this default (test doubles, wrappers)
    /// pages by offset, token `o<N>`.
    fn history_page(&self, q: &HistoryQuery) -> StoreResult<HistoryPage> {
        let base = match &q.before {
            None => 0,
            Some(t) => t
                .strip_prefix('o')
                .and_then(|n| n.parse::<usize>().ok())
                .ok_or_else(|| {
                    StoreError::Operation(OperationError::BadPageToken(format!(
                        "'{t}' is not a page token of this store"
                    )))
                })?,
        };
        let offset = q.offset.saturating_add(base);
        let mut rows = self.history(&HistoryQuery {
            limit: if q.limit == 0 {
                0
            } else {
                q.limit.saturating_add(1)
            },
            offset,
            before: None,
            ..q.clone()
        })?;
        let more = q.limit > 0 && rows.len() > q.limit;
        if more {
            rows.truncate(q.limit);
        }
        let next = more.then(|| format!("o{}", offset - q.offset + q.limit));
        Ok(HistoryPage { rows, next })
    }
    /// One job by name, retired ones too (`None`: no job of that name).
    fn job(&self, name: &str) -> StoreResult<Option<JobRecord>>;
}

/// The operations every store provides. All times come from the caller.
pub trait Store: HistoryReader {
    /// Human form of where this store lives (`/path/.cronsole`, `postgres://host/db`).
    fn location(&self) -> String;
    /// Sync the jobs file's definitions and settings into the store (`cronsole apply`).
    fn apply(&self, file: &JobsFile, now: DateTime<Utc>) -> StoreResult<ApplyReport>;
    /// [`Store::apply`] of definitions handed over one at a time: `feed` calls the sink it is
    /// given once per job, in file order, and fails when the file cannot be read to its end.
    /// Same checks and result as `apply` of the whole file; nothing changes when `feed` or a
    /// definition fails. A store that can write records as they come need never hold every
    /// definition at once (an `apply` of a million jobs). This default collects them
    /// and calls `apply`.
    fn apply_each(
        &self,
        settings: &Settings,
        feed: &mut dyn FnMut(DefSink<'_>) -> StoreResult<()>,
        now: DateTime<Utc>,
    ) -> StoreResult<ApplyReport> {
        let mut jobs = Vec::new();
        feed(&mut |d| {
            jobs.push(d);
            Ok(())
        })?;
        let file = JobsFile {
            settings: settings.clone(),
            jobs,
        };
        self.apply(&file, now)
    }
    /// The settings of the last `apply`.
    fn settings(&self) -> StoreResult<Settings>;
    /// The tool pins of these MCP servers (every server's when `servers` is empty), sorted by
    /// server and tool.
    fn tool_pins(&self, servers: &[String]) -> StoreResult<Vec<crate::model::ToolPin>>;
    /// Stores each pin whose `(server, tool)` has none yet, atomically for every owner (an
    /// existing pin is kept: the first writer wins); returns what the store holds for those
    /// keys afterwards, in the order given.
    fn pin_tools(&self, pins: &[crate::model::ToolPin]) -> StoreResult<Vec<crate::model::ToolPin>>;
    /// Replaces every pin of `server` with those of `pins` that are its (`cronsole tools
    /// --accept`); returns how many pins it replaced.
    fn accept_tools(&self, server: &str, pins: &[crate::model::ToolPin]) -> StoreResult<usize>;
    /// A cheap token that changes whenever anything in the store changed (no re-parse).
    fn change_token(&self) -> StoreResult<u64>;
    /// A push notification of changes (LISTEN/NOTIFY, file-system events), so an owner hears
    /// other processes within milliseconds; `None` when this store cannot push (the caller
    /// polls `change_token`). See [`ChangeSignal`].
    fn change_signal(&self) -> Option<ChangeSignal> {
        None
    }
    /// Every job, retired ones included, sorted by name.
    fn jobs(&self) -> StoreResult<Vec<JobRecord>>;
    /// The records of the jobs named (those that exist, in no promised order): what an engine
    /// reads of the jobs it runs each time the store changes. The default reads them one by one;
    /// a store across a network reads them in one round trip.
    fn jobs_named(&self, names: &[String]) -> StoreResult<Vec<JobRecord>> {
        let mut out = Vec::with_capacity(names.len());
        for n in names {
            out.extend(self.job(n)?);
        }
        Ok(out)
    }
    /// The records of the jobs that ever spent money or hold a reservation, in name order: the
    /// forecast's input (a job that never spent commits nothing and projects nothing), so a
    /// view of one job (`describe`) forecasts under the global limit without reading every job.
    /// The default filters [`Store::jobs`]; the file store reads only those its index marks.
    fn spenders(&self) -> StoreResult<Vec<JobRecord>> {
        let mut all = self.jobs()?;
        all.retain(|j| spent_or_holds(&j.rt.counters));
        Ok(all)
    }
    /// Up to `limit` jobs whose names sort after `after` (from the first when `None`), in the
    /// order of [`Store::jobs`]: one page of a streamed read (`jobs --json`). The default reads
    /// every job per page; stores override it to read only the page.
    fn jobs_page(&self, after: Option<&str>, limit: usize) -> StoreResult<Vec<JobRecord>> {
        let mut all = self.jobs()?;
        if let Some(a) = after {
            // By name, not by position: a job removed between pages does not end the walk.
            all.retain(|j| j.def.name.as_str() > a);
        }
        all.truncate(limit);
        Ok(all)
    }
    /// [`Store::jobs_page`] for a listing that can print a record from its stored JSON
    /// (`jobs --json`): a store that keeps each record as JSON (the file store's lines) hands
    /// the page's JSON text, checksums verified, without parsing it; the default hands the
    /// parsed records of [`Store::jobs_page`].
    fn jobs_page_json(&self, after: Option<&str>, limit: usize) -> StoreResult<JsonPage> {
        Ok(JsonPage {
            buf: String::new(),
            jobs: self
                .jobs_page(after, limit)?
                .into_iter()
                .map(|r| PageJob::Record(Box::new(r)))
                .collect(),
        })
    }
    /// The earliest instant at which `claim_due` may have work (a slot, a lease expiry, a hold
    /// ending); `Some(now)` or earlier when something is claimable already.
    fn next_wakeup(&self, now: DateTime<Utc>) -> StoreResult<Option<DateTime<Utc>>>;
    /// Claim due jobs under the store's exclusive lock: recover expired leases, record what
    /// misfired, retire what is spent, and take what may start (`plan::claim`).
    fn claim_due(&self, req: &ClaimRequest<'_>) -> StoreResult<ClaimOutcome>;
    /// Extend `run_id`'s lease on `job` (the run's owner calls this while it runs). Fenced by
    /// `run_id` alone: the lease already names its owner, and a run id is held by one owner.
    fn renew(&self, job: &str, run_id: Uuid, now: DateTime<Utc>) -> StoreResult<RenewOutcome>;
    /// Several renewals at once (the runs of one owner due together), answers in order, each
    /// as `renew` would answer it. Stores that can write them together (one fsync for the
    /// batch) override this.
    fn renew_many(&self, rs: &[Renewal]) -> Vec<StoreResult<RenewOutcome>> {
        rs.iter()
            .map(|r| self.renew(&r.job, r.run_id, r.now))
            .collect()
    }
    /// Record a run's end: its row, its new state and the lease's release, fenced by `run_id`.
    fn complete(&self, c: Completion) -> StoreResult<CompleteOutcome>;
    /// Several completions at once (runs that ended together), results in order. Stores that
    /// can commit them together (one fsync for the batch) override this.
    fn complete_many(&self, cs: Vec<Completion>) -> Vec<StoreResult<CompleteOutcome>> {
        cs.into_iter().map(|c| self.complete(c)).collect()
    }
    /// A retried completion whose row history already holds (an earlier attempt wrote it): no
    /// second row; where the row and the job record are separate writes (the file store: the
    /// record failed after the row landed, e.g. `ENOSPC` on the journal), the record is
    /// finished from that row if it still holds the run's lease — a completion counts as
    /// written only when its row and its record are both durable. The default does nothing:
    /// a store that writes the row and the record in one transaction (PostgreSQL) has the
    /// record whenever it has the row. Wrappers must forward it.
    fn complete_recorded(&self, c: Completion) -> StoreResult<CompleteOutcome> {
        let _ = c;
        Ok(CompleteOutcome::default())
    }
    /// Pause or resume a job.
    fn set_paused(&self, name: &str, paused: bool, now: DateTime<Utc>) -> StoreResult<()>;
    /// Queue one manual run of a job.
    fn request_trigger(&self, name: &str, now: DateTime<Utc>) -> StoreResult<TriggerOutcome>;
    /// What has been spent this budget period, globally and by `job`.
    fn spend(&self, job: &str, now: DateTime<Utc>) -> StoreResult<SpendNow>;
    /// Reserve a model call's worst-case cost against every budget that applies, atomically for
    /// all owners (the hard limit; decisions in `policy::budget`). Stores that keep no budgets
    /// (test doubles) refuse.
    fn reserve(&self, req: &ReserveRequest<'_>) -> StoreResult<ReserveOutcome> {
        let _ = req;
        Err(StoreError::Backend(BackendError::Unsupported(
            "budget reservations (a job cannot call a model under a budget here)",
        )))
    }
    /// Settle, release or mark spent the reservation `id` of `job` (see [`Settlement`]).
    fn settle(&self, job: &str, id: Uuid, how: Settlement, now: DateTime<Utc>) -> StoreResult<()> {
        let _ = (job, id, how, now);
        Err(StoreError::Backend(BackendError::Unsupported(
            "budget reservations",
        )))
    }

    /// One step of a running tool loop as ONE write (`plan::step`): the lease renewed, the
    /// previous turn's reservation settled, the next turn's worst case reserved against every
    /// budget that applies, and the transcript's delta appended — kept for the `abandoned` row
    /// recovery writes should its owner die. Fenced by `run_id`: a run that lost its lease
    /// writes nothing. This default (test doubles, wrappers that do not forward) makes the
    /// renewal, settlement and reservation one by one and keeps no delta.
    fn loop_step(&self, s: &LoopStep<'_>) -> StoreResult<StepOutcome> {
        let lease_until = match self.renew(s.job, s.run_id, s.now)? {
            RenewOutcome::Renewed { lease_until } => lease_until,
            RenewOutcome::Lost => return Ok(StepOutcome::Lost),
        };
        if let Some((id, how)) = s.settle {
            self.settle(s.job, id, how, s.now)?;
        }
        let reserved = match s.reserve {
            Some(usd) => Some(self.reserve(&ReserveRequest {
                job: s.job,
                run_id: s.run_id,
                owner: s.owner,
                usd,
                now: s.now,
            })?),
            None => None,
        };
        Ok(StepOutcome::Stepped {
            lease_until,
            reserved,
            may_wait: false,
        })
    }

    /// Apply one operator action (retry, cancel, backfill, pause with a reason) to a job
    /// atomically: under the store's lock or inside one transaction. The decision is
    /// `policy::operator::apply_edit_rows`; stores only persist it (and its rows).
    fn update_job(
        &self,
        name: &str,
        edit: &JobEdit,
        now: DateTime<Utc>,
    ) -> StoreResult<EditOutcome>;

    /// The process is stopping (`on`: its shutdown grace ended, or a second signal came):
    /// waits for a store held by another process end within about a second from now on, so
    /// completions that cannot be written go to the spool instead of holding the stop (red
    /// team 7). `false` restores the normal waits. The file store implements it; PostgreSQL's
    /// waits are already bounded by its operation timeout.
    fn hurry(&self, on: bool) {
        let _ = on;
    }

    /// One chunk (at most [`BULK_CHUNK`] names) of a bulk operator action, in order, stopping
    /// at the first job that fails (see [`BulkDone`]). Stores override it to write the chunk
    /// as one operation (one lock hold and fsync, or one transaction); the default does one
    /// operation per job.
    fn bulk_edit(&self, names: &[String], action: &BulkAction, now: DateTime<Utc>) -> BulkDone {
        let mut done = Vec::with_capacity(names.len());
        for name in names {
            let r = match action {
                BulkAction::SetPaused(p) => self
                    .set_paused(name, *p, now)
                    .map(|()| BulkOutcome::SetPaused),
                BulkAction::Trigger => self.request_trigger(name, now).map(BulkOutcome::Trigger),
                BulkAction::Edit(e) => self.update_job(name, e, now).map(BulkOutcome::Edit),
            };
            match r {
                Ok(out) => done.push(out),
                Err(e) => {
                    return BulkDone {
                        done,
                        error: Some(e),
                    };
                }
            }
        }
        BulkDone { done, error: None }
    }

    /// The job one of whose live runs is `run_id`; `None` when no live run has that id. This
    /// default reads every record; both stores look among the jobs holding a lease only.
    fn job_of_run(&self, run_id: Uuid) -> StoreResult<Option<String>> {
        Ok(self
            .jobs()?
            .into_iter()
            .find(|j| j.rt.lease_of(run_id).is_some())
            .map(|j| j.def.name))
    }

    /// Queue a retry of run `run_id` (any owner takes it). Returns the run's job.
    fn retry(&self, run_id: Uuid, now: DateTime<Utc>) -> StoreResult<(String, EditOutcome)> {
        let row = self
            .history(&HistoryQuery {
                run_id: Some(run_id),
                limit: 1,
                ..Default::default()
            })?
            .into_iter()
            .next()
            .ok_or(StoreError::Operation(OperationError::NoSuchRun(run_id)))?;
        let job = row.job.clone();
        let out = self.update_job(&job, &JobEdit::Retry(Box::new(row)), now)?;
        Ok((job, out))
    }

    /// Answer the tool call run `run_id` awaits approval for ([`JobEdit::Answer`]), from any
    /// host, as `by`: the run's owner picks the answer up. Returns the run's job. A run that
    /// does not wait (answered, timed out, ended) is refused, saying so; a run id the store
    /// never knew is [`OperationError::NoSuchRun`], as for `retry` and `cancel`.
    fn answer_approval(
        &self,
        run_id: Uuid,
        call: Option<&str>,
        approve: bool,
        reason: Option<String>,
        by: Option<String>,
        now: DateTime<Utc>,
    ) -> StoreResult<(String, EditOutcome)> {
        let ended = |s: &Self| -> StoreResult<Option<HistoryRow>> {
            Ok(s.history(&HistoryQuery {
                run_id: Some(run_id),
                limit: 1,
                ..Default::default()
            })?
            .into_iter()
            .next())
        };
        let Some(job) = self.job_of_run(run_id)? else {
            return Err(match ended(self)? {
                Some(row) => ended_refusal(&row, call),
                None => StoreError::Operation(OperationError::NoSuchRun(run_id)),
            });
        };
        let edit = JobEdit::Answer {
            run_id,
            call: call.map(str::to_string),
            approve,
            reason,
            by,
        };
        match self.update_job(&job, &edit, now) {
            Ok(out) => Ok((job, out)),
            // The run ended between the lookup and the answer: say how, as above.
            Err(StoreError::Operation(OperationError::NotAwaiting(why))) => match ended(self)? {
                Some(row) => Err(ended_refusal(&row, call)),
                None => Err(StoreError::Operation(OperationError::NotAwaiting(why))),
            },
            Err(e) => Err(e),
        }
    }

    /// Cancel by job name (its running run, else what it has queued) or by the run id of a
    /// running run. Returns the job.
    fn cancel(&self, target: &str, now: DateTime<Utc>) -> StoreResult<(String, EditOutcome)> {
        if self.job(target)?.is_some() {
            let out = self.update_job(target, &JobEdit::Cancel(None), now)?;
            return Ok((target.to_string(), out));
        }
        let Ok(run_id) = Uuid::parse_str(target.trim()) else {
            return Err(StoreError::Operation(OperationError::NoSuchJob(
                target.to_string(),
            )));
        };
        let job =
            self.job_of_run(run_id)?
                .ok_or(StoreError::Operation(OperationError::Refused(
                    Refusal::NoLiveRun { run_id },
                )))?;
        let out = self.update_job(&job, &JobEdit::Cancel(Some(run_id)), now)?;
        Ok((job, out))
    }

    /// An owner's heartbeat: store `rec` (its `last_seen` is the owner's clock when it sent the
    /// beat) with `last_seen` and `clock_offset_ms` measured on the store's clock, and return the
    /// record as stored. Stores that keep no owner records measure nothing (offset 0).
    fn beat(&self, rec: &OwnerRecord) -> StoreResult<OwnerRecord> {
        Ok(rec.clone())
    }

    /// Whether [`Store::beat`] is a local write of a small file without fsync or network (tens
    /// of microseconds), which the engine may make on its own thread instead of handing it to
    /// the blocking pool: an idle owner's heartbeat then wakes one thread, not three. `false`
    /// (the default) for anything that may wait on a network or a disk flush.
    fn beat_is_local(&self) -> bool {
        false
    }

    /// Whether [`Store::beat_handoff`] hands the heartbeat to threads of the store's own (the
    /// PostgreSQL store's runtime), so a caller on a runtime awaits the answer without a
    /// blocking thread of its own in between. `false` (the default): `beat_handoff` makes the
    /// beat on the caller's thread.
    fn beats_on_own_threads(&self) -> bool {
        false
    }

    /// Make [`Store::beat`] of `rec` and hand the answer to `done`, on whichever thread makes
    /// it. The default makes it here, before returning.
    fn beat_handoff(&self, rec: &OwnerRecord, done: BeatDone) {
        done(self.beat(rec));
    }

    /// Every owner record, with how long ago each was last heard of on the store's clock.
    fn owners(&self) -> StoreResult<Vec<OwnerSeen>> {
        Ok(Vec::new())
    }

    /// The caller's clock was just found right against the store's after it was off (an owner
    /// whose claims resume after its clock was refused): every job whose slots a clock ahead of
    /// `now` decided (a job stored by that owner's clock an hour ahead) is re-derived from `now`
    /// at once, with a log line (`store::rules::slots::rederive`). Such jobs are not due, so no
    /// claim would look at them. A store whose decisions read its own clock (PostgreSQL) never
    /// stored anything on the caller's: nothing to do (the default).
    fn rederive_ahead(&self, now: DateTime<Utc>) -> StoreResult<()> {
        let _ = now;
        Ok(())
    }

    /// The store's own clock, read now: the clock its leases and heartbeats are stamped by, for
    /// a command about to store records on it or to judge whether a run's owner is live. The
    /// file store's is the file system's stamp on a file it writes, the clock every owner on it
    /// measures its offset against; PostgreSQL's is the database's. `None` when it cannot be
    /// read, and for a store whose callers bring the clock (a test's injected one).
    fn clock_now(&self) -> Option<DateTime<Utc>> {
        None
    }

    /// Whether this store's claims read its own clock and ignore the `now` they are given
    /// (PostgreSQL reads the database's). `false` (the default): a claim decides on the `now`
    /// it is given, so an owner that keeps a reading of the store's clock passes that reading,
    /// not its own wall clock (the file store's clock is the file system's, see
    /// [`Store::beat`]).
    fn decides_on_own_clock(&self) -> bool {
        false
    }
}

/// Whether a job's counters say it ever spent money or holds a reservation ([`Store::spenders`]).
pub fn spent_or_holds(c: &crate::model::JobCounters) -> bool {
    c.period_cost_usd != 0.0 || c.total_cost_usd != 0.0 || !c.reservations.is_empty()
}

/// The refusal of an answer to a run that ended: how it ended, from its row, and what became
/// of the call the answer names, when it names one.
fn ended_refusal(row: &HistoryRow, call: Option<&str>) -> StoreError {
    let why = row
        .reason
        .as_deref()
        .map(|r| {
            format!(
                " ({})",
                crate::text::line(&crate::transcript::cap_bytes(r, 200))
            )
        })
        .unwrap_or_default();
    let of_call = call.map(|c| ended_call(row, c)).unwrap_or_default();
    StoreError::Operation(OperationError::NotAwaiting(format!(
        "run {} of '{}' is not awaiting approval: it ended as {} at {}{why}{of_call}",
        row.run_id,
        row.job,
        row.status,
        row.finished_at
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    )))
}

/// What an ended run's record says of its call `id`: answered (and how), never answered, or
/// not on the record.
fn ended_call(row: &HistoryRow, id: &str) -> String {
    use crate::transcript::{Approval, Entry};
    let shown = crate::text::line(id);
    let found = row.transcript.as_ref().and_then(|t| {
        t.to_vec().into_iter().rev().find_map(|e| match e {
            Entry::Call(c) if c.id == id => Some(c),
            _ => None,
        })
    });
    let Some(c) = found else {
        return format!("; its record has no call {shown}");
    };
    let by = |b: &Option<String>| b.as_deref().map(|b| format!(" by {b}")).unwrap_or_default();
    match &c.approval {
        Some(Approval::Approved { by: b, .. }) => {
            format!("; its call {shown} to {} was approved{}", c.tool, by(b))
        }
        Some(Approval::Denied { by: None, .. }) => {
            format!("; its call {shown} to {} was denied at its timeout", c.tool)
        }
        Some(Approval::Denied { by: b, .. }) => {
            format!("; its call {shown} to {} was denied{}", c.tool, by(b))
        }
        None => format!("; its call {shown} to {} took no answer", c.tool),
    }
}

//! The one forwarding store: [`Wrapped`] passes every [`Store`] call, the defaulted ones too, to
//! an inner store, through [`Hooks`] that may count a call, answer it instead (an injected
//! failure, a lost lease) or watch the inner store's errors. The metrics layer's error counter is
//! one set of hooks; the tests' fault doubles are others (through `testkit::store`).
//!
//! Forwarding every method matters: a wrapper that fell back to a trait default would refuse
//! budget reservations, read every job to find one run, or apply a million definitions at once
//! where the inner store does none of these.
//!
//! Owns: the forwarding and where each hook is called. Must not touch: what any store does.

use crate::store::BackendError;
use chrono::{DateTime, Utc};
use std::sync::Arc;
use uuid::Uuid;

use super::signal::ChangeSignal;
use super::{
    ApplyReport, BeatDone, BulkAction, BulkDone, ClaimOutcome, ClaimRequest, CompleteOutcome,
    Completion, DefSink, EditOutcome, HistoryPage, HistoryQuery, HistoryReader, JobEdit, JsonPage,
    LoopStep, RenewOutcome, Renewal, ReserveOutcome, ReserveRequest, Settlement, SpendNow,
    StepOutcome, Store, StoreError, StoreResult, TriggerOutcome,
};
use crate::model::{HistoryRow, JobRecord, JobsFile, OwnerRecord, OwnerSeen, Settings, ToolPin};

/// Which [`Store`] (or [`HistoryReader`]) call a hook is asked about: each variant is the
/// method of the same name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)] // each variant says it by its name
pub enum Call {
    History,
    HistoryPage,
    Job,
    Apply,
    ApplyEach,
    Settings,
    ToolPins,
    PinTools,
    AcceptTools,
    ChangeToken,
    Jobs,
    /// The records of a few jobs by name ([`Store::jobs_named`]).
    JobsNamed,
    /// A page of at most `limit` jobs ([`Store::jobs_page`]).
    JobsPage {
        /// The page size asked for.
        // Read by the hooks tests write (a double that checks the pages it is asked for).
        #[cfg_attr(not(any(test, feature = "testkit")), allow(dead_code))]
        limit: usize,
    },
    JobsPageJson,
    /// The records of the jobs that spent ([`Store::spenders`]).
    Spenders,
    NextWakeup,
    ClaimDue,
    Renew,
    /// One completion, alone or within [`Store::complete_many`] (asked once per completion).
    Complete,
    CompleteRecorded,
    SetPaused,
    RequestTrigger,
    Spend,
    Reserve,
    Settle,
    LoopStep,
    UpdateJob,
    BulkEdit,
    JobOfRun,
    Retry,
    AnswerApproval,
    Cancel,
    Beat,
    Owners,
    RederiveAhead,
}

/// What a [`Wrapped`] store does around each forwarded call. Every hook has a default that
/// changes nothing, so a set of hooks names only its twist.
pub trait Hooks: Send + Sync {
    /// Before `call` reaches the inner store: `Err` answers the call with that error instead
    /// (the inner store is not called). [`Store::location`] and [`Store::hurry`] are not asked.
    fn before(&self, call: Call) -> StoreResult<()> {
        let _ = call;
        Ok(())
    }
    /// Asked (after [`Hooks::before`]) of a renewal and a tool-loop step: `true` answers that
    /// the run's lease is lost (another owner took the run over), without the inner store.
    fn lease_lost(&self) -> bool {
        false
    }
    /// `call` reached the inner store and it answered `e` (a bulk edit's first error too).
    fn failed(&self, call: Call, e: &StoreError) {
        let _ = (call, e);
    }
    /// The change signal handed to callers, given the inner store's (`None` hides it: callers
    /// fall back to polling the change token).
    fn change_signal(&self, inner: Option<ChangeSignal>) -> Option<ChangeSignal> {
        inner
    }
}

/// An inner store with [`Hooks`] around every call; `Deref`s to its hooks, so a test reaches
/// its switches and counters as `wrapped.fail_claims` (and keeps its own handle on the inner
/// store for reads that must not go through them).
pub struct Wrapped<H> {
    inner: Arc<dyn Store>,
    /// Shared with a heartbeat's answer, which arrives on the inner store's threads.
    hooks: Arc<H>,
}

impl<H: Hooks> Wrapped<H> {
    /// `inner` with `hooks` around it.
    pub fn new(inner: Arc<dyn Store>, hooks: H) -> Self {
        Wrapped {
            inner,
            hooks: Arc::new(hooks),
        }
    }

    /// `call` through the hooks: refused by [`Hooks::before`], or made, its error reported.
    fn call<T>(&self, call: Call, f: impl FnOnce(&dyn Store) -> StoreResult<T>) -> StoreResult<T> {
        self.hooks.before(call)?;
        let r = f(self.inner.as_ref());
        if let Err(e) = &r {
            self.hooks.failed(call, e);
        }
        r
    }
}

impl<H> std::ops::Deref for Wrapped<H> {
    type Target = H;
    fn deref(&self) -> &H {
        &self.hooks
    }
}

impl<H: Hooks> HistoryReader for Wrapped<H> {
    fn history(&self, q: &HistoryQuery) -> StoreResult<Vec<HistoryRow>> {
        self.call(Call::History, |s| s.history(q))
    }
    fn history_page(&self, q: &HistoryQuery) -> StoreResult<HistoryPage> {
        self.call(Call::HistoryPage, |s| s.history_page(q))
    }
    fn job(&self, name: &str) -> StoreResult<Option<JobRecord>> {
        self.call(Call::Job, |s| s.job(name))
    }
}

impl<H: Hooks + 'static> Store for Wrapped<H> {
    fn location(&self) -> String {
        self.inner.location()
    }
    fn apply(&self, file: &JobsFile, now: DateTime<Utc>) -> StoreResult<ApplyReport> {
        self.call(Call::Apply, |s| s.apply(file, now))
    }
    fn apply_each(
        &self,
        settings: &Settings,
        feed: &mut dyn FnMut(DefSink<'_>) -> StoreResult<()>,
        now: DateTime<Utc>,
    ) -> StoreResult<ApplyReport> {
        self.call(Call::ApplyEach, |s| s.apply_each(settings, feed, now))
    }
    fn settings(&self) -> StoreResult<Settings> {
        self.call(Call::Settings, |s| s.settings())
    }
    fn tool_pins(&self, servers: &[String]) -> StoreResult<Vec<ToolPin>> {
        self.call(Call::ToolPins, |s| s.tool_pins(servers))
    }
    fn pin_tools(&self, pins: &[ToolPin]) -> StoreResult<Vec<ToolPin>> {
        self.call(Call::PinTools, |s| s.pin_tools(pins))
    }
    fn accept_tools(&self, server: &str, pins: &[ToolPin]) -> StoreResult<usize> {
        self.call(Call::AcceptTools, |s| s.accept_tools(server, pins))
    }
    fn change_token(&self) -> StoreResult<u64> {
        self.call(Call::ChangeToken, |s| s.change_token())
    }
    fn change_signal(&self) -> Option<ChangeSignal> {
        self.hooks.change_signal(self.inner.change_signal())
    }
    fn jobs(&self) -> StoreResult<Vec<JobRecord>> {
        self.call(Call::Jobs, |s| s.jobs())
    }
    fn jobs_named(&self, names: &[String]) -> StoreResult<Vec<JobRecord>> {
        self.call(Call::JobsNamed, |s| s.jobs_named(names))
    }
    fn jobs_page(&self, after: Option<&str>, limit: usize) -> StoreResult<Vec<JobRecord>> {
        self.call(Call::JobsPage { limit }, |s| s.jobs_page(after, limit))
    }
    fn jobs_page_json(&self, after: Option<&str>, limit: usize) -> StoreResult<JsonPage> {
        self.call(Call::JobsPageJson, |s| s.jobs_page_json(after, limit))
    }
    fn spenders(&self) -> StoreResult<Vec<JobRecord>> {
        self.call(Call::Spenders, |s| s.spenders())
    }
    fn next_wakeup(&self, now: DateTime<Utc>) -> StoreResult<Option<DateTime<Utc>>> {
        self.call(Call::NextWakeup, |s| s.next_wakeup(now))
    }
    fn claim_due(&self, req: &ClaimRequest<'_>) -> StoreResult<ClaimOutcome> {
        self.call(Call::ClaimDue, |s| s.claim_due(req))
    }
    fn renew(&self, job: &str, run_id: Uuid, now: DateTime<Utc>) -> StoreResult<RenewOutcome> {
        self.call(Call::Renew, |s| {
            if self.hooks.lease_lost() {
                return Ok(RenewOutcome::Lost);
            }
            s.renew(job, run_id, now)
        })
    }
    /// Each renewal is put to [`Hooks::before`] on its own (as `Renew`); those it lets through
    /// go to the inner store as one batch, and the answers come back in order.
    fn renew_many(&self, rs: &[Renewal]) -> Vec<StoreResult<RenewOutcome>> {
        let mut out: Vec<Option<StoreResult<RenewOutcome>>> = Vec::with_capacity(rs.len());
        let mut batch = Vec::with_capacity(rs.len());
        for r in rs {
            match self.hooks.before(Call::Renew) {
                Ok(()) if self.hooks.lease_lost() => out.push(Some(Ok(RenewOutcome::Lost))),
                Ok(()) => {
                    out.push(None);
                    batch.push(r.clone());
                }
                Err(e) => out.push(Some(Err(e))),
            }
        }
        let mut answers = if batch.is_empty() {
            Vec::new()
        } else {
            self.inner.renew_many(&batch)
        }
        .into_iter();
        out.into_iter()
            .map(|slot| {
                slot.unwrap_or_else(|| {
                    let r = answers.next().unwrap_or_else(|| {
                        Err(StoreError::Backend(BackendError::Unsupported(
                            "a batch answer per renewal",
                        )))
                    });
                    if let Err(e) = &r {
                        self.hooks.failed(Call::Renew, e);
                    }
                    r
                })
            })
            .collect()
    }
    fn complete(&self, c: Completion) -> StoreResult<CompleteOutcome> {
        self.call(Call::Complete, |s| s.complete(c))
    }
    /// Each completion is put to [`Hooks::before`] on its own; those it lets through go to the
    /// inner store as one batch (one commit there), and the answers come back in order.
    fn complete_many(&self, cs: Vec<Completion>) -> Vec<StoreResult<CompleteOutcome>> {
        let mut out: Vec<Option<StoreResult<CompleteOutcome>>> = Vec::with_capacity(cs.len());
        let mut batch = Vec::with_capacity(cs.len());
        for c in cs {
            match self.hooks.before(Call::Complete) {
                Ok(()) => {
                    out.push(None);
                    batch.push(c);
                }
                Err(e) => out.push(Some(Err(e))),
            }
        }
        let mut answers = self.inner.complete_many(batch).into_iter();
        out.into_iter()
            .map(|slot| {
                slot.unwrap_or_else(|| {
                    let r = answers.next().unwrap_or_else(|| {
                        Err(StoreError::Backend(BackendError::Unsupported(
                            "a batch answer per completion",
                        )))
                    });
                    if let Err(e) = &r {
                        self.hooks.failed(Call::Complete, e);
                    }
                    r
                })
            })
            .collect()
    }
    fn complete_recorded(&self, c: Completion) -> StoreResult<CompleteOutcome> {
        self.call(Call::CompleteRecorded, |s| s.complete_recorded(c))
    }
    fn set_paused(&self, name: &str, paused: bool, now: DateTime<Utc>) -> StoreResult<()> {
        self.call(Call::SetPaused, |s| s.set_paused(name, paused, now))
    }
    fn request_trigger(&self, name: &str, now: DateTime<Utc>) -> StoreResult<TriggerOutcome> {
        self.call(Call::RequestTrigger, |s| s.request_trigger(name, now))
    }
    fn spend(&self, job: &str, now: DateTime<Utc>) -> StoreResult<SpendNow> {
        self.call(Call::Spend, |s| s.spend(job, now))
    }
    fn reserve(&self, req: &ReserveRequest<'_>) -> StoreResult<ReserveOutcome> {
        self.call(Call::Reserve, |s| s.reserve(req))
    }
    fn settle(&self, job: &str, id: Uuid, how: Settlement, now: DateTime<Utc>) -> StoreResult<()> {
        self.call(Call::Settle, |s| s.settle(job, id, how, now))
    }
    fn loop_step(&self, step: &LoopStep<'_>) -> StoreResult<StepOutcome> {
        self.call(Call::LoopStep, |s| {
            if self.hooks.lease_lost() {
                return Ok(StepOutcome::Lost);
            }
            s.loop_step(step)
        })
    }
    fn update_job(
        &self,
        name: &str,
        edit: &JobEdit,
        now: DateTime<Utc>,
    ) -> StoreResult<EditOutcome> {
        self.call(Call::UpdateJob, |s| s.update_job(name, edit, now))
    }
    fn hurry(&self, on: bool) {
        self.inner.hurry(on);
    }
    fn bulk_edit(&self, names: &[String], action: &BulkAction, now: DateTime<Utc>) -> BulkDone {
        if let Err(e) = self.hooks.before(Call::BulkEdit) {
            return BulkDone {
                done: Vec::new(),
                error: Some(e),
            };
        }
        let done = self.inner.bulk_edit(names, action, now);
        if let Some(e) = &done.error {
            self.hooks.failed(Call::BulkEdit, e);
        }
        done
    }
    fn job_of_run(&self, run_id: Uuid) -> StoreResult<Option<String>> {
        self.call(Call::JobOfRun, |s| s.job_of_run(run_id))
    }
    fn retry(&self, run_id: Uuid, now: DateTime<Utc>) -> StoreResult<(String, EditOutcome)> {
        self.call(Call::Retry, |s| s.retry(run_id, now))
    }
    fn answer_approval(
        &self,
        run_id: Uuid,
        call: Option<&str>,
        approve: bool,
        reason: Option<String>,
        by: Option<String>,
        now: DateTime<Utc>,
    ) -> StoreResult<(String, EditOutcome)> {
        self.call(Call::AnswerApproval, |s| {
            s.answer_approval(run_id, call, approve, reason, by, now)
        })
    }
    fn cancel(&self, target: &str, now: DateTime<Utc>) -> StoreResult<(String, EditOutcome)> {
        self.call(Call::Cancel, |s| s.cancel(target, now))
    }
    fn beat(&self, rec: &OwnerRecord) -> StoreResult<OwnerRecord> {
        self.call(Call::Beat, |s| s.beat(rec))
    }
    fn beat_is_local(&self) -> bool {
        self.inner.beat_is_local()
    }
    fn beats_on_own_threads(&self) -> bool {
        self.inner.beats_on_own_threads()
    }
    fn beat_handoff(&self, rec: &OwnerRecord, done: BeatDone) {
        if let Err(e) = self.hooks.before(Call::Beat) {
            return done(Err(e));
        }
        let hooks = Arc::clone(&self.hooks);
        self.inner.beat_handoff(
            rec,
            Box::new(move |r| {
                if let Err(e) = &r {
                    hooks.failed(Call::Beat, e);
                }
                done(r)
            }),
        );
    }
    fn owners(&self) -> StoreResult<Vec<OwnerSeen>> {
        self.call(Call::Owners, |s| s.owners())
    }
    fn rederive_ahead(&self, now: DateTime<Utc>) -> StoreResult<()> {
        self.call(Call::RederiveAhead, |s| s.rederive_ahead(now))
    }
    fn clock_now(&self) -> Option<DateTime<Utc>> {
        self.inner.clock_now()
    }
    fn decides_on_own_clock(&self) -> bool {
        self.inner.decides_on_own_clock()
    }
}

#[cfg(test)]
mod tests {
    use crate::store::OperationError;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::model::Status;
    use crate::store::file::FileStore;
    use crate::store::policy::define::tests_support::def;
    use crate::store::{Claim, PageJob, StoreError};
    use crate::testkit::store::ClaimAt;
    use crate::testkit::time::epoch as t;
    use crate::testkit::tmp::TempDir;

    /// Refuses the whole-store read and the second completion it is asked about; counts the
    /// inner store's errors.
    #[derive(Default)]
    struct Twist {
        completions: AtomicUsize,
        failures: AtomicUsize,
        refuse_beats: std::sync::atomic::AtomicBool,
    }

    impl Hooks for Twist {
        fn before(&self, call: Call) -> StoreResult<()> {
            match call {
                Call::Beat if self.refuse_beats.load(Ordering::SeqCst) => Err(StoreError::Backend(
                    BackendError::Unavailable("beat refused (test)".into()),
                )),
                Call::Jobs => Err(StoreError::Backend(BackendError::Unsupported(
                    "reading every job (test)",
                ))),
                Call::Complete if self.completions.fetch_add(1, Ordering::SeqCst) == 1 => Err(
                    StoreError::Backend(BackendError::Unavailable("refused (test)".into())),
                ),
                _ => Ok(()),
            }
        }
        fn failed(&self, _: Call, _: &StoreError) {
            self.failures.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn wrapped(dir: &TempDir) -> (Arc<dyn Store>, Wrapped<Twist>) {
        let inner: Arc<dyn Store> = Arc::new(FileStore::open(dir.path()).unwrap());
        let file = JobsFile {
            settings: Settings::default(),
            jobs: ["a", "b", "c"].iter().map(|n| def(n)).collect(),
        };
        inner.apply(&file, t(0)).unwrap();
        let w = Wrapped::new(Arc::clone(&inner), Twist::default());
        (inner, w)
    }

    #[test]
    fn a_defaulted_method_reaches_the_inner_stores_own() {
        let dir = TempDir::new("wrap-forward");
        let (_, w) = wrapped(&dir);
        // The trait's default would parse every record; the file store hands its JSON lines.
        let page = w.jobs_page_json(None, 10).unwrap();
        assert_eq!(page.jobs.len(), 3);
        assert!(
            page.jobs.iter().all(|j| matches!(j, PageJob::Json { .. })),
            "the wrapper fell back to the trait's default"
        );
    }

    #[test]
    fn a_hook_answers_instead_of_the_inner_store_and_sees_only_its_errors() {
        let dir = TempDir::new("wrap-hooks");
        let (_, w) = wrapped(&dir);
        assert!(matches!(
            w.jobs(),
            Err(StoreError::Backend(BackendError::Unsupported(_)))
        ));
        assert_eq!(w.failures.load(Ordering::SeqCst), 0);
        assert!(matches!(
            w.set_paused("ghost", true, t(1)),
            Err(StoreError::Operation(OperationError::NoSuchJob(_)))
        ));
        assert_eq!(w.failures.load(Ordering::SeqCst), 1);
    }

    /// A heartbeat handed to the inner store meets the same hooks as one made in place: refused
    /// by `before`, its inner store's error counted by `failed` (the metrics' error counter).
    #[test]
    fn a_handed_off_heartbeat_goes_through_the_hooks() {
        let dir = TempDir::new("wrap-beat");
        let (_, w) = wrapped(&dir);
        let rec = OwnerRecord {
            owner: "h:1:o".into(),
            host: "h".into(),
            pid: 1,
            pid_space: None,
            version: "1".into(),
            started_at: t(0),
            last_seen: t(1),
            clock_offset_ms: 0,
            claims_stopped: None,
            signed_off: None,
        };
        let ask = |w: &Wrapped<Twist>| {
            let (tx, rx) = std::sync::mpsc::channel();
            w.beat_handoff(&rec, Box::new(move |r| tx.send(r).unwrap()));
            rx.recv().unwrap()
        };
        assert_eq!(ask(&w).unwrap().owner, "h:1:o");
        w.refuse_beats.store(true, Ordering::SeqCst);
        assert!(matches!(
            ask(&w),
            Err(StoreError::Backend(BackendError::Unavailable(_)))
        ));
        assert_eq!(w.failures.load(Ordering::SeqCst), 0);
        w.refuse_beats.store(false, Ordering::SeqCst);
        // The inner store cannot write its owner records: a file where their directory goes.
        let owners = dir.path().join("owners");
        std::fs::remove_dir_all(&owners).unwrap();
        std::fs::write(&owners, "").unwrap();
        assert!(ask(&w).is_err());
        assert_eq!(w.failures.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_batch_goes_through_less_what_a_hook_refused_answers_in_order() {
        let dir = TempDir::new("wrap-batch");
        let (inner, w) = wrapped(&dir);
        let claims = w.claim_at(t(60), "o", 3).claims;
        assert_eq!(claims.len(), 3);
        let done = |c: &Claim| Completion {
            job: c.job.def.name.clone(),
            run_id: c.run_id,
            owner: "o".into(),
            now: t(61),
            row: HistoryRow::new(
                &c.job.def.name,
                Status::Succeeded,
                c.trigger,
                c.slot,
                "o",
                t(61),
            ),
            state: None,
            hold_until: None,
        };
        let out = w.complete_many(claims.iter().map(done).collect());
        assert!(out[0].is_ok() && out[2].is_ok(), "{out:?}");
        assert!(
            matches!(
                out[1],
                Err(StoreError::Backend(BackendError::Unavailable(_)))
            ),
            "{out:?}"
        );
        let rows = inner.history(&HistoryQuery::default()).unwrap();
        let mut jobs: Vec<_> = rows.iter().map(|r| r.job.as_str()).collect();
        jobs.sort_unstable();
        let (first, third) = (&claims[0].job.def.name, &claims[2].job.def.name);
        assert_eq!(jobs, [first.as_str(), third.as_str()]);
    }
}

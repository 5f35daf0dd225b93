//! Front ends' commands (pause, resume, trigger, retry, cancel) and operator cancels that arrive
//! through the store.
//!
//! `cronsole cancel` (any process, any host) marks the run's lease in the store; when the change
//! token moves, the engine reads the leases of its runs in flight and cancels a marked one
//! through a second per-run token. That run is completed `failed` with reason `cancelled by
//! operator` (its pipeline is dropped, which kills its process group; no retry, no delivery, no
//! alert). Retries and backfills need nothing here: they are claimed like any queued run.
//!
//! Owns: turning a [`Command`] into one store call and a notice. Must not touch: the UI.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::sync::broadcast;
use uuid::Uuid;

use super::api::{Command, Event};
use super::error::blocking;
use super::notice::{call_owner, cancel_owner_note, operator_notice, run_owner, trigger_notice};
use super::task::InFlight;
use crate::model::OwnerSeen;
use crate::store::{Store, StoreResult, TriggerOutcome};

/// Carry out a front end's command `c` at `now` (one store call) and tell what it did.
pub(super) async fn command(
    store: &Arc<dyn Store>,
    ev_tx: &broadcast::Sender<Event>,
    now: DateTime<Utc>,
    c: Command,
) {
    let (name, res) = match c.clone() {
        Command::Pause(n) | Command::Resume(n) => {
            let paused = matches!(c, Command::Pause(_));
            let name = n.clone();
            let r = blocking(store, move |s| s.set_paused(&name, paused, now)).await;
            (n, r)
        }
        Command::Trigger(n) => {
            let name = n.clone();
            let r = blocking(store, move |s| s.request_trigger(&name, now)).await;
            // A queued trigger needs no notice here: the run's own events follow at once.
            let msg = match &r {
                Ok(TriggerOutcome::Queued) => None,
                Ok(out) => Some(trigger_notice(&n, out)),
                Err(e) => Some(format!("trigger '{n}' failed: {e}")),
            };
            if let Some(m) = msg {
                let _ = ev_tx.send(Event::Notice(m));
            }
            (n, r.map(|_| ()))
        }
        Command::Retry(id) => {
            let r = blocking(store, move |s| s.retry(id, now)).await;
            match r {
                Ok((job, out)) => {
                    let _ = ev_tx.send(Event::Notice(operator_notice(&job, &out)));
                    (job, Ok(()))
                }
                Err(e) => (format!("run {id}"), Err(e)),
            }
        }
        Command::Cancel(n) => {
            let name = n.clone();
            let r = blocking(store, move |s| {
                let (job, out) = s.cancel(&name, now)?;
                let notice = cancel_notice(s, &job, &out, JudgeAt::caller(now));
                Ok((job, notice))
            })
            .await;
            if let Ok((_, notice)) = &r {
                let _ = ev_tx.send(Event::Notice(notice.clone()));
            }
            (n, r.map(|_| ()))
        }
        Command::Answer {
            run_id,
            call,
            approve,
        } => {
            let r = blocking(store, move |s| {
                answer_call(
                    s,
                    (run_id, Some(&call)),
                    approve,
                    None,
                    "console",
                    JudgeAt::caller(now),
                )
            })
            .await;
            match r {
                Ok(a) => {
                    let _ = ev_tx.send(Event::Notice(a.notice));
                    (a.job, Ok(()))
                }
                Err(e) => (format!("run {run_id}"), Err(e)),
            }
        }
        Command::Shutdown => return,
    };
    if let Err(e) = res {
        let _ = ev_tx.send(Event::Notice(format!("'{name}': {e}")));
    }
}

/// The instant an operator's request judges a run's owner at, and on whose clock: whether its
/// lease ran out and how long ago the owner was last heard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JudgeAt {
    now: DateTime<Utc>,
    /// `now` is the store's own clock (leases and heartbeats are stamped on it).
    on_store: bool,
}

impl JudgeAt {
    /// `now` on the caller's clock: an engine's or a console's own (an injected clock).
    pub fn caller(now: DateTime<Utc>) -> Self {
        JudgeAt {
            now,
            on_store: false,
        }
    }

    /// The store's clock, read now ([`Store::clock_now`]), else this host's: for a command
    /// from any host, whose own clock may be off by more than a lease. On a clock an hour
    /// ahead a live owner's lease reads as run out, so its call would be called unanswerable
    /// ("stopped renewing") while the store, deciding on its own clock, takes the answer.
    pub fn store(store: &dyn Store) -> Self {
        match store.clock_now() {
            Some(now) => JudgeAt {
                now,
                on_store: true,
            },
            None => Self::caller(Utc::now()),
        }
    }

    /// The store's owner records judged on the store's clock, for a command that only reads
    /// them (`jobs`, `check`, `stats`, the notes of `pause` and `trigger`): read first, and the
    /// store's clock only when there is a record to judge, so a store no engine ever ran on
    /// gets no probe written beside its owner records (see [`Store::clock_now`]). Judged on a
    /// command's clock an hour ahead, a live owner read as an hour silent.
    pub fn owners_now(store: &dyn Store) -> StoreResult<Vec<OwnerSeen>> {
        let owners = store.owners()?;
        if owners.is_empty() {
            return Ok(owners);
        }
        let Some(now) = store.clock_now() else {
            return Ok(owners);
        };
        let at = JudgeAt {
            now,
            on_store: true,
        };
        Ok(at.judged(owners))
    }

    /// `owners`, each one's `ago` measured at [`now`](Self::now) when that is the store's clock.
    fn judged(&self, mut owners: Vec<OwnerSeen>) -> Vec<OwnerSeen> {
        if self.on_store {
            for o in &mut owners {
                o.ago = self.now - o.record.last_seen;
            }
        }
        owners
    }

    /// The instant judged at.
    pub fn now(&self) -> DateTime<Utc> {
        self.now
    }

    /// The store's owner records, each one's `ago` measured at [`now`](Self::now) when that is
    /// the store's clock: a file store measures it on this host's clock, which may be off.
    pub fn owners(&self, store: &dyn Store) -> StoreResult<Vec<OwnerSeen>> {
        Ok(self.judged(store.owners()?))
    }
}

/// What an operator's answer to a call awaiting approval did.
#[derive(Debug, Clone, PartialEq)]
pub struct Answered {
    /// The run's job.
    pub job: String,
    /// The line the operator reads.
    pub notice: String,
    /// The answer is recorded but its owner is not live, so nothing runs now (the notice says
    /// why).
    pub owner_gone: bool,
}

/// Answer the call run `run_id` awaits approval for, at `now`, and say what it did: the same
/// words in the console (engine or attached) and the CLI. The call may be another owner's. The
/// store records the answer only while the run can use it (`store::policy::operator`); an
/// owner known gone for good (its process gone on this host, or signed off) is refused here
/// first, since it never reads an answer — a death is final, so judging it before the write
/// loses no race. An owner not heard lately may come back before its lease runs out: the
/// answer is recorded, and the notice says plainly that nothing runs now.
pub fn answer_call(
    store: &dyn Store,
    (run_id, call): (Uuid, Option<&str>),
    approve: bool,
    reason: Option<String>,
    via: &str,
    at: JudgeAt,
) -> Result<Answered, crate::store::StoreError> {
    let now = at.now();
    let by = Some(format!("{} ({via})", operator()));
    // The reason is stored on the run's lease (the journal) before any owner reads it: a key
    // typed into it is redacted here, by the secrets this process can read, as the run's
    // record would redact it.
    let reason = match (reason, store.settings()) {
        (Some(r), Ok(settings)) => {
            let env: super::run::EnvLookup = Arc::new(|v| std::env::var(v).ok());
            Some(
                super::run::secrets_of(&settings, &env)
                    .redact(&r)
                    .into_owned(),
            )
        }
        (r, _) => r,
    };
    if let Some(job) = store.job_of_run(run_id)?
        && let Some(l) = store
            .job(&job)?
            .and_then(|r| r.rt.lease_of(run_id).cloned())
        && l.awaiting.as_ref().is_some_and(|a| a.answer.is_none())
    {
        let owners = at.owners(store)?;
        if run_owner(&l, &owners, now).is_some_and(|g| g.for_good())
            && let Some(why) = call_owner(&l, &owners, now).gone
        {
            return Err(crate::store::StoreError::Operation(
                crate::store::OperationError::NotAwaiting(format!(
                    "run {run_id} of '{job}' cannot use an answer: {why}"
                )),
            ));
        }
    }
    let (job, out) = store.answer_approval(run_id, call, approve, reason, by, now)?;
    let gone = match store
        .job(&job)?
        .and_then(|r| r.rt.lease_of(run_id).cloned())
    {
        Some(l) => call_owner(&l, &at.owners(store)?, now).gone,
        None => None,
    };
    let notice = match &gone {
        None => operator_notice(&job, &out),
        Some(why) => {
            let what = if approve { "approval" } else { "denial" };
            format!("{job}: run {run_id}'s {what} is recorded, but nothing runs now: {why}")
        }
    };
    Ok(Answered {
        job,
        notice,
        owner_gone: gone.is_some(),
    })
}

/// `cronsole cancel TARGET` at `at`: the store's cancel and its notice ([`cancel_notice`]).
pub fn cancel_and_say(
    store: &dyn Store,
    target: &str,
    at: JudgeAt,
) -> Result<String, crate::store::StoreError> {
    let (job, out) = store.cancel(target, at.now())?;
    Ok(cancel_notice(store, &job, &out, at))
}

/// The notice of a cancel (`cronsole cancel`, the console's `X`): what the store did, and,
/// when the run it marked is held by no live owner, what happens instead of a kill.
pub fn cancel_notice(
    store: &dyn Store,
    job: &str,
    out: &crate::store::EditOutcome,
    at: JudgeAt,
) -> String {
    use crate::store::EditOutcome as O;
    let said = operator_notice(job, out);
    let (O::CancelRequested { run_id } | O::AlreadyCancelling { run_id }) = out else {
        return said;
    };
    let lease = store
        .job(job)
        .ok()
        .flatten()
        .and_then(|r| r.rt.lease_of(*run_id).cloned());
    let note = match (lease, at.owners(store)) {
        (Some(l), Ok(owners)) => cancel_owner_note(&l, &owners, at.now()),
        _ => None,
    };
    match note {
        Some(n) => format!("{job}: cancel of run {run_id} recorded, but {n}"),
        None => said,
    }
}

/// Who is answering: the user this process runs as and its host (`user@host`), as the run's
/// record names them.
pub fn operator() -> String {
    // Without `$USER`/`$LOGNAME` (cron, systemd units, bare containers) the uid names the
    // user: its login name, else `uid N`, never a word that names nobody.
    let user = ["USER", "LOGNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|u| !u.trim().is_empty()))
        .unwrap_or_else(|| uid_user(crate::proc::sys::uid(), crate::proc::sys::user_name));
    format!(
        "{}@{}",
        crate::text::line(user.trim()),
        super::api::host_name()
    )
}

/// User `uid` as an answer's `by` names it: its login name, else `uid N`.
fn uid_user(uid: u32, name_of: impl Fn(u32) -> Option<String>) -> String {
    name_of(uid)
        .map(|n| crate::text::line(n.trim()).into_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| format!("uid {uid}"))
}

/// The store changed: cancel the runs of ours an operator asked to cancel (`cronsole cancel`
/// from any process, or a console). One read of the records of the jobs in flight (one round
/// trip on PostgreSQL, whatever `max_concurrent` is), only when the change token moved.
pub(super) async fn honour_cancel_requests(
    store: &Arc<dyn Store>,
    in_flight: &HashMap<Uuid, InFlight>,
) {
    let mut names: Vec<String> = in_flight
        .values()
        .filter(|f| !f.op_cancel.is_cancelled())
        .map(|f| f.job.clone())
        .collect();
    if names.is_empty() {
        return;
    }
    names.sort();
    names.dedup();
    let recs = match blocking(store, move |s| s.jobs_named(&names)).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "cancel check failed");
            return;
        }
    };
    let recs: HashMap<&str, &crate::model::JobRecord> =
        recs.iter().map(|r| (r.def.name.as_str(), r)).collect();
    for (run_id, f) in in_flight {
        if f.op_cancel.is_cancelled() {
            continue;
        }
        // An operator's cancel, or a newer slot of a `cancel_previous` job (the store wrote
        // the same mark; the row's reason says which when the run ends).
        let asked = recs.get(f.job.as_str()).is_some_and(|r| {
            r.rt.lease_of(*run_id)
                .is_some_and(|l| l.cancel_requested_at.is_some())
        });
        if asked {
            tracing::info!(job = %f.job, run_id = %run_id, "cancel requested through the store");
            f.op_cancel.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without `$USER`, an answer names the uid's user, or the uid itself: never a word that
    /// names nobody.
    #[test]
    fn an_answer_without_user_names_the_uid() {
        assert_eq!(uid_user(0, |_| Some("root".into())), "root");
        assert_eq!(uid_user(4242, |_| None), "uid 4242");
        assert_eq!(uid_user(7, |_| Some("  ".into())), "uid 7");
        // The running process's own uid has a name or a number.
        let me = uid_user(crate::proc::sys::uid(), crate::proc::sys::user_name);
        assert!(!me.is_empty() && me != "an operator", "{me}");
        if crate::proc::sys::uid() == 0 {
            assert_eq!(crate::proc::sys::user_name(0).as_deref(), Some("root"));
        }
    }
}

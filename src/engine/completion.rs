//! Writing a run's completion: the group committer that batches completions into one store
//! call, the fenced retry that never records a run twice, and the spool at stop.
//!
//! A completion the store refuses is kept and retried with [`store_backoff`] until it is
//! written, the lease still renewed meanwhile (so nobody records the run `abandoned` while its
//! result waits); if the engine is stopped first, it goes to the spool file. A retry or replay
//! that finds its row already in history still has the store finish the job record from it
//! ([`Store::complete_recorded`]): written means row and record.
//!
//! Owns: the completion path from a finished run to the store. Must not touch: the run's
//! pipeline, claiming.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::outage::{store_backoff, store_failed, store_ok};
use super::renew::Renewer;
use super::task::RunTask;
use super::{EngineError, Event, blocking, spool};
use crate::model::HistoryRow;
use crate::store::{CompleteOutcome, Completion, Store};

/// A completion waiting for the group committer, and where its result goes.
type CompletionJob = (
    Completion,
    oneshot::Sender<Result<CompleteOutcome, EngineError>>,
);

pub(super) type CompletionTx = mpsc::Sender<CompletionJob>;

/// Group commit of run completions: takes every completion that is already waiting and hands
/// them to the store in one `complete_many` (the file store writes them with one fsync pair), so
/// runs ending together do not each hold the store lock for their own fsyncs while claims wait.
/// With one run at a time the batch is one completion, exactly as before.
pub(super) async fn completer(store: Arc<dyn Store>, mut rx: mpsc::Receiver<CompletionJob>) {
    const MAX_BATCH: usize = 256;
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(more) => batch.push(more),
                Err(_) => break,
            }
        }
        let (cs, replies): (Vec<Completion>, Vec<_>) = batch.into_iter().unzip();
        let st = Arc::clone(&store);
        match tokio::task::spawn_blocking(move || st.complete_many(cs)).await {
            Ok(results) => {
                for (r, tx) in results.into_iter().zip(replies) {
                    let _ = tx.send(r.map_err(EngineError::from));
                }
            }
            Err(e) => {
                for tx in replies {
                    let _ = tx.send(Err(EngineError::Join(e.to_string())));
                }
            }
        }
    }
}

/// Complete through the group committer (falls back to a direct call if it is gone).
async fn complete_via(
    store: &Arc<dyn Store>,
    completions: &CompletionTx,
    c: Completion,
) -> Result<CompleteOutcome, EngineError> {
    let (tx, rx) = oneshot::channel();
    match completions.send((c, tx)).await {
        Ok(()) => rx
            .await
            .unwrap_or_else(|_| Err(EngineError::Join("completion committer stopped".into()))),
        Err(mpsc::error::SendError((c, _))) => blocking(store, move |s| s.complete(c)).await,
    }
}

/// Whether the run's row is already in history: a completion that failed may have written its
/// row before the failure (history first, then the job record), and writing it again would
/// record the run twice. The row of the same run with the same status counts.
async fn already_recorded(store: &Arc<dyn Store>, c: &Completion) -> bool {
    let q = crate::store::HistoryQuery {
        job: Some(c.job.clone()),
        run_id: Some(c.run_id),
        limit: 8,
        ..Default::default()
    };
    let (run_id, status) = (c.run_id, c.row.status);
    matches!(
        blocking(store, move |s| s.history(&q)).await,
        Ok(rows) if rows.iter().any(|r| r.run_id == run_id && r.status == status)
    )
}

/// One fenced attempt to write `c`. The rows written. When its row is already recorded (an
/// earlier attempt wrote it and then failed, or the process stopped before the answer), the
/// row is not written again, but the job record still is if it still holds the run
/// ([`Store::complete_recorded`]): a completion counts as written only when its row and its
/// record are both durable (a record that failed on `ENOSPC` after its row landed, retried
/// only up to the row, would leave a store every command refuses).
pub(super) async fn commit_once(
    store: &Arc<dyn Store>,
    completions: &CompletionTx,
    c: Completion,
) -> Result<Vec<HistoryRow>, EngineError> {
    if already_recorded(store, &c).await {
        tracing::warn!(job = %c.job, run_id = %c.run_id, "the run's row is already recorded; not writing it again (finishing its job record)");
        return blocking(store, move |s| s.complete_recorded(c))
            .await
            .map(|o| o.rows);
    }
    complete_via(store, completions, c).await.map(|o| o.rows)
}

/// How long a stop waits for a completion attempt already in flight before spooling it.
const IN_FLIGHT_WAIT: StdDuration = StdDuration::from_secs(5);

impl RunTask {
    /// Write `c` until the store takes it (see [`RunTask::run`]); on cancellation, spool it.
    pub(super) async fn commit(
        &self,
        c: Completion,
        cancel: &CancellationToken,
        renewer: &mut Renewer,
    ) -> Vec<HistoryRow> {
        let mut attempt = 0u32;
        let mut pending = false;
        loop {
            let (first, cc) = (attempt == 0, c.clone());
            let (store, completions) = (&self.store, &self.completions);
            let fut = async move {
                if first {
                    // First try: nothing can be recorded yet, skip the history look-up.
                    complete_via(store, completions, cc).await.map(|o| o.rows)
                } else {
                    commit_once(store, completions, cc).await
                }
            };
            tokio::pin!(fut);
            let res = tokio::select! {
                r = &mut fut => r,
                _ = cancel.cancelled(), if attempt > 0 => {
                    match tokio::time::timeout(IN_FLIGHT_WAIT, &mut fut).await {
                        Ok(r) => r,
                        Err(_) => Err(EngineError::Join("stopped while the store was not answering".into())),
                    }
                }
            };
            match res {
                Ok(rows) => {
                    store_ok(&self.health, &self.ev_tx);
                    if pending {
                        self.health.send_modify(|h| {
                            h.pending_completions = h.pending_completions.saturating_sub(1)
                        });
                        let msg = format!(
                            "run of '{}' recorded after {attempt} failed attempt(s)",
                            c.job
                        );
                        tracing::warn!("{msg}");
                        let _ = self.ev_tx.send(Event::Notice(msg));
                    }
                    return if rows.is_empty() { vec![c.row] } else { rows };
                }
                Err(e) => {
                    attempt += 1;
                    store_failed(&self.health, self.clock.now(), &e);
                    if !pending {
                        pending = true;
                        self.health.send_modify(|h| h.pending_completions += 1);
                        tracing::error!(job = %c.job, run_id = %c.run_id, error = %e, "completion failed; kept and retried until the store takes it");
                        let _ = self.ev_tx.send(Event::Notice(format!(
                            "could not record run of '{}' yet (kept, retrying): {e}",
                            c.job
                        )));
                    } else {
                        tracing::warn!(job = %c.job, error = %e, attempt, "completion failed again");
                    }
                    if cancel.is_cancelled() {
                        self.spool(&c).await;
                        return Vec::new();
                    }
                    let wake = tokio::time::Instant::now() + store_backoff(attempt);
                    loop {
                        tokio::select! {
                            _ = tokio::time::sleep_until(wake) => break,
                            _ = cancel.cancelled() => break,
                            _ = tokio::time::sleep_until(renewer.next) => renewer.renew(self).await,
                        }
                    }
                }
            }
        }
    }

    /// Keep `c` in the spool file (the engine is stopping and the store still refuses it).
    async fn spool(&self, c: &Completion) {
        let entry = spool::Entry::from(c);
        self.health
            .send_modify(|h| h.pending_completions = h.pending_completions.saturating_sub(1));
        let res = match self.spool.clone() {
            Some(sp) => {
                let e = entry.clone();
                tokio::task::spawn_blocking(move || sp.append(std::slice::from_ref(&e)))
                    .await
                    .map_err(|e| e.to_string())
                    .and_then(|r| r.map_err(|e| e.to_string()))
            }
            None => Err("no spool file configured".to_string()),
        };
        let msg = match &res {
            Ok(()) => format!(
                "run of '{}' ({}) not recorded: the store refused it until the stop; spooled for the next start",
                c.job, c.row.status
            ),
            Err(e) => format!(
                "run of '{}' ({}) not recorded and not spooled: {e}",
                c.job, c.row.status
            ),
        };
        tracing::error!(run_id = %c.run_id, "{msg}");
        let _ = self.ev_tx.send(Event::Notice(msg));
        if let Ok(mut u) = self.unwritten.lock() {
            match res {
                Ok(()) => u.spooled += 1,
                Err(_) => u.lost.push(entry),
            }
        }
        if self.spool.is_some() {
            self.health.send_modify(|h| h.spooled += 1);
        }
    }
}

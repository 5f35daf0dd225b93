//! Writing a run's completion: the group committer that batches completions into one store
//! call, and the fenced write that never records a run twice.
//!
//! A retry or replay that finds its row already in history still has the store finish the job
//! record from it ([`Store::complete_recorded`]): written means row and record.
//!
//! Owns: the path from a finished run's completion to the store. Must not touch: when to
//! retry (the run task and the spool replay decide), the run's pipeline.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::error::{EngineError, blocking};
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
pub(super) async fn complete_via(
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

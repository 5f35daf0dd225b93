//! The engine's stop: stop claiming, wait up to `shutdown_grace` for in-flight runs, then cancel
//! them.
//!
//! A cancelled run is completed as `abandoned` with reason `shutdown`, which the store treats
//! like a crash. A second shutdown request cancels at once. Each run has its own cancellation
//! token (not a child of `shutdown`), so a graceful shutdown really lets runs finish. Once the
//! grace has passed after a shutdown request (or at a second one), the store is told to hurry
//! ([`Store::hurry`]): a wait for a lock another process holds ends within about a second, so a
//! stop is never held by an outside lock holder.
//!
//! Owns: the grace and the hurry. Must not touch: the UI; what a run does when cancelled (its
//! task records it).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration as StdDuration;

use tokio::task::{JoinError, JoinSet};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::task::Finished;
use crate::store::Store;

/// Once the stop has waited long enough — a second signal (hard stop), or the shutdown grace
/// after the first — tell the store to stop waiting long for a lock another process holds
/// ([`Store::hurry`]): a claim or completion stuck behind it then fails within about a second,
/// the actor reaches its shutdown, and what is unwritten is spooled (the run exits 1 naming
/// the spool) instead of the process waiting out the holder.
pub(super) async fn hurry_at_stop(
    store: Arc<dyn Store>,
    shutdown: CancellationToken,
    hard_stop: CancellationToken,
    grace: StdDuration,
) {
    tokio::select! {
        _ = hard_stop.cancelled() => {}
        _ = async {
            shutdown.cancelled().await;
            tokio::time::sleep(grace).await;
        } => {}
    }
    tracing::info!("stopping: store lock waits now end within a second");
    store.hurry(true);
}

/// A run still going at the stop, as the shutdown sees it.
pub(super) struct Going {
    pub(super) run_id: Uuid,
    pub(super) task: Option<tokio::task::Id>,
    pub(super) job: String,
    pub(super) cancel: CancellationToken,
}

/// Wait for `runs` up to `grace` (or until `hard` is cancelled), handing each ended one to
/// `done`; then cancel those of `going` still running and wait for them too.
pub(super) async fn wait_for_runs(
    runs: &mut JoinSet<Finished>,
    grace: StdDuration,
    hard: &CancellationToken,
    going: Vec<Going>,
    mut done: impl FnMut(Result<Finished, JoinError>),
) {
    let grace = tokio::time::sleep(grace);
    tokio::pin!(grace);
    let mut going = Some(going);
    let mut ended_runs = HashSet::new();
    let mut ended_tasks = HashSet::new();
    loop {
        tokio::select! {
            ended = runs.join_next() => match ended {
                None => break,
                Some(d) => {
                    match &d {
                        Ok(f) => ended_runs.insert(f.run_id),
                        Err(e) => ended_tasks.insert(e.id()),
                    };
                    done(d);
                }
            },
            _ = hard_or_grace(&mut grace, hard), if going.is_some() => {
                for g in going.take().unwrap_or_default() {
                    if ended_runs.contains(&g.run_id) || g.task.is_some_and(|t| ended_tasks.contains(&t)) {
                        continue;
                    }
                    tracing::info!(job = %g.job, "cancelling run at shutdown");
                    g.cancel.cancel();
                }
            }
        }
    }
}

async fn hard_or_grace(
    grace: &mut std::pin::Pin<&mut tokio::time::Sleep>,
    hard: &CancellationToken,
) {
    tokio::select! {
        _ = grace.as_mut() => {}
        _ = hard.cancelled() => {}
    }
}

//! Claiming: what one claim cycle asks of the store.
//!
//! Jobs this owner runs are hidden from its own claims, except under an `overlap:` policy that
//! acts while a run is live (`allow`, `cancel_previous`): the store then looks at them but never
//! recovers this owner's own leases of them.
//!
//! Owns: the claim request. Must not touch: what a claim decides (the store owns that), what a
//! failed claim means (`outage`), starting the claimed runs (the actor does).

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::error::{EngineError, blocking};
use super::task::InFlight;
use crate::model::Settings;
use crate::store::{ClaimOutcome, ClaimRequest, Store};

/// The jobs a claim hides from this owner: those it runs, unless their `overlap:` policy acts
/// while a run is live.
pub(super) fn hidden_jobs(in_flight: &HashMap<Uuid, InFlight>) -> Vec<String> {
    let mut hidden: Vec<String> = in_flight
        .values()
        .filter(|f| !f.overlap.acts_while_running())
        .map(|f| f.job.clone())
        .collect();
    hidden.sort();
    hidden.dedup();
    hidden
}

/// Claim up to `limit` due runs for `owner` at `now`, with the settings the claimed runs use;
/// `stepped`: the wall clock stepped since the last claim (in words, for the rows);
/// `max_offset`: this owner's clock offset bound, for a store that judges it in the claim.
///
/// The settings are read once per claim, in the same hand-off to the blocking pool: a store
/// lock and a hand-off per run cost a tenth of a 10 000-run burst's engine CPU. A failed read
/// is not the claim's failure: each run then reads them itself, with its own retries
/// (`run::execute`).
pub(super) async fn claim_due(
    store: &Arc<dyn Store>,
    now: DateTime<Utc>,
    owner: String,
    limit: usize,
    hidden: Vec<String>,
    stepped: Option<String>,
    max_offset: Option<std::time::Duration>,
) -> Result<(ClaimOutcome, Option<Arc<Settings>>), EngineError> {
    blocking(store, move |s| {
        let outcome = s.claim_due(&ClaimRequest {
            now,
            owner: &owner,
            limit,
            in_flight: &hidden,
            clock_stepped: stepped.as_deref(),
            max_offset,
        })?;
        let settings = if outcome.claims.is_empty() {
            None
        } else {
            s.settings().ok().map(Arc::new)
        };
        Ok((outcome, settings))
    })
    .await
}

//! Why the engine stopped ([`EngineError`]), and the one way engine code calls the store from
//! async code ([`blocking`]).
//!
//! Owns: the engine's error type. Must not touch: the decisions that lead to one (`outage`).

use std::sync::Arc;

use super::spool;
use crate::store::{Store, StoreError};

/// Why the engine stopped.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A store error the engine could not go on from (a damaged or foreign store).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A background task of the engine died.
    #[error("store task failed: {0}")]
    Join(String),
    /// The completion spool could not be read or written.
    #[error(transparent)]
    Spool(#[from] spool::SpoolError),
    /// The engine stopped with completions the store never took.
    #[error("{}", unwritten_message(*spooled, spool.as_deref(), lost.len()))]
    Unwritten {
        /// Completions kept in the spool file.
        spooled: usize,
        /// The spool file, when one is configured.
        spool: Option<std::path::PathBuf>,
        /// Completions that could not even be spooled (printed by the binary so that nothing
        /// vanishes without a trace).
        lost: Vec<spool::Entry>,
    },
}

fn unwritten_message(spooled: usize, path: Option<&std::path::Path>, lost: usize) -> String {
    let mut m = String::new();
    if spooled > 0 {
        let p = path.map(|p| p.display().to_string()).unwrap_or_default();
        m.push_str(&format!(
            "{spooled} completion(s) could not be written to the store; kept in {p} and replayed at the next start"
        ));
    }
    if lost > 0 {
        if !m.is_empty() {
            m.push_str("; ");
        }
        m.push_str(&format!(
            "{lost} completion(s) could not be written to the store nor spooled (printed on stderr)"
        ));
    }
    m
}

/// Run a blocking store call off the async workers.
pub async fn blocking<T, F>(store: &Arc<dyn Store>, f: F) -> Result<T, EngineError>
where
    T: Send + 'static,
    F: FnOnce(&dyn Store) -> Result<T, StoreError> + Send + 'static,
{
    crate::store::blocking(store, f)
        .await
        .map_err(EngineError::from)
}

//! The PostgreSQL store's error and JSON helpers and its typed-query trait: what every file
//! of the store below the handle needs to talk to the server and report what went wrong.
//!
//! Owns: [`db_err`], [`redact`], [`corrupt`], the JSON column codecs, [`Db`] (one round trip per typed
//! statement). Must not touch: SQL, connections, the store's semantics.

use crate::store::{BackendError, OpenError};
use std::future::Future;

use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Row, Transaction};

use crate::store::{StoreError, StoreResult};

/// The URL without its password, for messages and `location()`.
pub(crate) fn redact(cfg: &tokio_postgres::Config) -> String {
    use tokio_postgres::config::Host;
    let host = match cfg.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        #[cfg(unix)]
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "localhost".to_string(),
    };
    let port = cfg.get_ports().first().copied().unwrap_or(5432);
    let user = cfg.get_user().map(|u| format!("{u}@")).unwrap_or_default();
    let db = cfg.get_dbname().unwrap_or("");
    format!("postgres://{user}{host}:{port}/{db}")
}

/// `BackendError::Database` with what we were doing and the server's own message.
pub(crate) fn db_err(doing: &str, e: tokio_postgres::Error) -> StoreError {
    let mut msg = e.to_string();
    if let Some(db) = e.as_db_error() {
        msg.push_str(&format!(": {} ({})", db.message(), db.code().code()));
    } else {
        let mut src = std::error::Error::source(&e);
        while let Some(s) = src {
            msg.push_str(&format!(": {s}"));
            src = s.source();
        }
    }
    StoreError::Backend(BackendError::Database {
        doing: doing.to_string(),
        detail: msg,
        source: e,
    })
}

/// Statements with explicitly typed parameters (`query_typed`): one round trip each, where a
/// plain `query(&str)` first prepares the statement (a second round trip). The claim path runs
/// several statements per transaction, so this halves its latency.
pub(super) type Params<'a> = [(&'a (dyn ToSql + Sync), Type)];

pub(super) trait Db: Sync {
    fn q<'a>(
        &'a self,
        sql: &'a str,
        params: &'a Params<'a>,
    ) -> impl Future<Output = Result<Vec<Row>, tokio_postgres::Error>> + Send + 'a;
}

impl Db for Client {
    fn q<'a>(
        &'a self,
        sql: &'a str,
        params: &'a Params<'a>,
    ) -> impl Future<Output = Result<Vec<Row>, tokio_postgres::Error>> + Send + 'a {
        self.query_typed(sql, params)
    }
}

impl Db for Transaction<'_> {
    fn q<'a>(
        &'a self,
        sql: &'a str,
        params: &'a Params<'a>,
    ) -> impl Future<Output = Result<Vec<Row>, tokio_postgres::Error>> + Send + 'a {
        self.query_typed(sql, params)
    }
}

pub(super) fn corrupt(location: &str, what: impl std::fmt::Display) -> StoreError {
    StoreError::Open(OpenError::Corrupt {
        file: location.into(),
        line: 0,
        column: 0,
        what: what.to_string(),
    })
}

pub(super) fn from_json<T: DeserializeOwned>(
    location: &str,
    table: &str,
    v: Value,
) -> StoreResult<T> {
    serde_json::from_value(v).map_err(|e| corrupt(location, format!("{table}: {e}")))
}

pub(super) fn to_json<T: serde::Serialize>(v: &T) -> StoreResult<Value> {
    serde_json::to_value(v).map_err(StoreError::encode("a store record"))
}

//! History queries on PostgreSQL: keyset pages (`finished_at`, `seq`) newest first, and the
//! [`HistoryReader`] impl.
//!
//! Owns: the page token and the query's SQL. Must not touch: appending or trimming history
//! (`tx.rs`).

use crate::store::OperationError;
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::model::{HistoryRow, JobRecord};
use crate::store::{HistoryPage, HistoryQuery, HistoryReader, StoreError, StoreResult};

use super::db::{db_err, from_json};
use super::handle::PgStore;
use super::tx::read_jobs;

/// A history page token: the last row's `finished_at` (µs since the epoch) and `seq`.
pub(super) fn parse_page_token(t: &str) -> StoreResult<(DateTime<Utc>, i64)> {
    let bad = || {
        StoreError::Operation(OperationError::BadPageToken(format!(
            "'{t}' is not a page token of this store (tokens come from a previous page)"
        )))
    };
    let (us, seq) = t.split_once('.').ok_or_else(bad)?;
    let us: i64 = us.parse().map_err(|_| bad())?;
    let seq: i64 = seq.parse().map_err(|_| bad())?;
    Ok((DateTime::from_timestamp_micros(us).ok_or_else(bad)?, seq))
}

/// The SQL filter and parameters of a history query (`$1…`), newest first. With a page token
/// (`q.before`) the page starts after its row by keyset — `(finished_at, seq) < (…)` on the
/// same `(…, finished_at DESC, seq DESC)` indexes the order uses — never by `OFFSET`.
pub(super) fn history_sql(
    q: &HistoryQuery,
) -> StoreResult<(
    String,
    Vec<Box<dyn tokio_postgres::types::ToSql + Sync + Send>>,
)> {
    let mut conds: Vec<String> = Vec::new();
    let mut params: Vec<Box<dyn tokio_postgres::types::ToSql + Sync + Send>> = Vec::new();
    if let Some(j) = &q.job {
        params.push(Box::new(j.clone()));
        conds.push(format!("job = ${}", params.len()));
    }
    if let Some(s) = q.status {
        params.push(Box::new(s.as_str().to_string()));
        conds.push(format!("status = ${}", params.len()));
    }
    if let Some(t) = q.since {
        params.push(Box::new(t));
        conds.push(format!("finished_at >= ${}", params.len()));
    }
    if let Some(r) = q.run_id {
        params.push(Box::new(r.to_string()));
        conds.push(format!("run_id = ${}", params.len()));
    }
    if q.with_diff {
        conds.push("has_diff".to_string());
    }
    if let Some(t) = &q.before {
        let (fin, seq) = parse_page_token(t)?;
        params.push(Box::new(fin));
        params.push(Box::new(seq));
        conds.push(format!(
            "(finished_at, seq) < (${}, ${})",
            params.len() - 1,
            params.len()
        ));
    }
    let mut sql = "SELECT row, finished_at, seq FROM cronsole_history".to_string();
    if !conds.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&conds.join(" AND "));
    }
    sql.push_str(" ORDER BY finished_at DESC, seq DESC");
    if q.limit > 0 {
        sql.push_str(&format!(" LIMIT {}", q.limit));
    }
    if q.offset > 0 {
        sql.push_str(&format!(" OFFSET {}", q.offset));
    }
    Ok((sql, params))
}

impl HistoryReader for PgStore {
    fn job(&self, name: &str) -> StoreResult<Option<JobRecord>> {
        let name = name.to_string();
        self.run(|inner| async move {
            let c = inner.pool.get().await?;
            Ok(read_jobs(&*c, &inner.location, Some(&name), false)
                .await?
                .pop())
        })
    }

    fn history(&self, q: &HistoryQuery) -> StoreResult<Vec<HistoryRow>> {
        Ok(self.history_keyed(q)?.into_iter().map(|(r, _)| r).collect())
    }

    /// Keyset pages: the token is the page's last row's `finished_at` and `seq`.
    fn history_page(&self, q: &HistoryQuery) -> StoreResult<HistoryPage> {
        if q.limit == 0 {
            return Ok(HistoryPage {
                rows: self.history(q)?,
                next: None,
            });
        }
        let mut rows = self.history_keyed(&HistoryQuery {
            limit: q.limit.saturating_add(1),
            ..q.clone()
        })?;
        let more = rows.len() > q.limit;
        rows.truncate(q.limit);
        let next = if more {
            rows.last()
                .map(|(_, (fin, seq))| format!("{}.{seq}", fin.timestamp_micros()))
        } else {
            None
        };
        Ok(HistoryPage {
            rows: rows.into_iter().map(|(r, _)| r).collect(),
            next,
        })
    }
}

impl PgStore {
    /// Rows of `q` with their keyset position (`finished_at`, `seq`).
    #[allow(clippy::type_complexity)]
    pub(super) fn history_keyed(
        &self,
        q: &HistoryQuery,
    ) -> StoreResult<Vec<(HistoryRow, (DateTime<Utc>, i64))>> {
        let (sql, params) = history_sql(q)?;
        self.run(|inner| async move {
            let c = inner.pool.get().await?;
            let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = params
                .iter()
                .map(|p| p.as_ref() as &(dyn tokio_postgres::types::ToSql + Sync))
                .collect();
            let rows = c
                .query(&sql, &refs)
                .await
                .map_err(|e| db_err("reading history", e))?;
            rows.into_iter()
                .map(|r| {
                    let row = from_json(&inner.location, "cronsole_history", r.get::<_, Value>(0))?;
                    Ok((row, (r.get::<_, DateTime<Utc>>(1), r.get::<_, i64>(2))))
                })
                .collect()
        })
    }
}

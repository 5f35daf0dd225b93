//! Owner records on PostgreSQL: `cronsole_owners`, one row per running engine, upserted at
//! each heartbeat.
//!
//! Owns: the SQL of a heartbeat and of reading the records. Must not touch: what an owner does
//! with its measured offset (the engine decides).
//!
//! The heartbeat measures the owner's clock against the database's in the statement that
//! stores it: `clock_offset_ms` is the owner's time at sending minus `clock_timestamp()` at the
//! server, so it errs by the one-way trip of the request (milliseconds on a LAN) — small
//! against any bound worth setting. Records not heard of for a day are deleted by an owner's
//! first heartbeat and then its first of each hour (by the database's clock), as on the file
//! store: an idle owner's heartbeat is one statement, and a dead owner's record says when it
//! was last seen meanwhile.

use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_postgres::types::Type;

use super::db::{db_err, from_json, to_json};
use super::handle::Inner;
use crate::model::{OwnerRecord, OwnerSeen};
use crate::store::StoreResult;

const BEAT_SQL: &str =
    "INSERT INTO cronsole_owners AS o (owner, last_seen, clock_offset_ms, record)
     SELECT $1, now, (extract(epoch FROM ($2::timestamptz - now)) * 1000)::bigint, $3
     FROM (SELECT clock_timestamp() AS now) t
     ON CONFLICT (owner) DO UPDATE SET last_seen = EXCLUDED.last_seen,
         clock_offset_ms = EXCLUDED.clock_offset_ms, record = EXCLUDED.record
     RETURNING last_seen, clock_offset_ms";

impl Inner {
    pub(super) async fn beat(&self, rec: OwnerRecord) -> StoreResult<OwnerRecord> {
        let c = self.pool.get().await?;
        let sent: DateTime<Utc> = rec.last_seen;
        let rows = c
            .query_typed(
                BEAT_SQL,
                &[
                    (&rec.owner, Type::TEXT),
                    (&sent, Type::TIMESTAMPTZ),
                    (&to_json(&rec)?, Type::JSONB),
                ],
            )
            .await
            .map_err(|e| db_err("recording a heartbeat", e))?;
        let mut out = rec;
        if let Some(r) = rows.first() {
            out.last_seen = r.get(0);
            out.clock_offset_ms = r.get(1);
        }
        // Old records of owners gone for a day, once an hour: a day-old record kept an hour
        // longer costs nothing, a statement at every beat wakes the owner and the server.
        let swept = {
            let mut last = self.last_sweep.lock().unwrap_or_else(|e| e.into_inner());
            let due = sweep_due(*last, out.last_seen);
            if due {
                *last = Some(out.last_seen);
            }
            due
        };
        if swept {
            c.execute(
                "DELETE FROM cronsole_owners WHERE last_seen < clock_timestamp() - interval '1 day'",
                &[],
            )
            .await
            .map_err(|e| db_err("forgetting old owners", e))?;
        }
        // The heartbeat read the database's clock: a clock set back since is seen here.
        if let Err(e) = self.after_a_step_back(out.last_seen).await {
            tracing::warn!("re-deriving slots after the database's clock went back: {e}");
        }
        Ok(out)
    }

    pub(super) async fn owners(&self) -> StoreResult<Vec<OwnerSeen>> {
        let c = self.pool.get().await?;
        let rows = c
            .query_typed(
                "SELECT record, last_seen, clock_offset_ms,
                     (extract(epoch FROM (clock_timestamp() - last_seen)) * 1000)::bigint
                 FROM cronsole_owners ORDER BY owner",
                &[],
            )
            .await
            .map_err(|e| db_err("reading owners", e))?;
        rows.into_iter()
            .map(|r| {
                let mut record: OwnerRecord =
                    from_json(&self.location, "cronsole_owners", r.get::<_, Value>(0))?;
                record.last_seen = r.get(1);
                record.clock_offset_ms = r.get(2);
                Ok(OwnerSeen {
                    record,
                    ago: chrono::Duration::milliseconds(r.get::<_, i64>(3)),
                })
            })
            .collect()
    }
}

/// Whether a heartbeat stamped `now` (the database's clock) sweeps old records: the first of
/// this handle, then the first of each hour.
fn sweep_due(previous: Option<DateTime<Utc>>, now: DateTime<Utc>) -> bool {
    let hour = |t: DateTime<Utc>| t.timestamp().div_euclid(3600);
    previous.is_none_or(|p| hour(p) != hour(now))
}

#[cfg(test)]
mod tests {
    use super::sweep_due;
    use chrono::{DateTime, Utc};

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn an_owner_sweeps_at_its_first_beat_and_then_once_an_hour() {
        assert!(sweep_due(None, t("2026-12-07T10:59:59Z")));
        let first = Some(t("2026-12-07T10:00:01Z"));
        assert!(!sweep_due(first, t("2026-12-07T10:59:59Z")));
        assert!(sweep_due(first, t("2026-12-07T11:00:00Z")));
        // A clock set back an hour is another hour too.
        assert!(sweep_due(first, t("2026-12-07T09:30:00Z")));
    }
}

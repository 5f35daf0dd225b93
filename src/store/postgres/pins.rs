//! Tool pins on PostgreSQL: `cronsole_tool_pins`, one row per `(server, tool)`.
//!
//! Owns: the SQL that reads, inserts and replaces pins. Must not touch: what a pin means (the
//! tools' pinning rules decide which pins to write; this only keeps them).
//!
//! First use is `INSERT … ON CONFLICT DO NOTHING` followed by a read of the same keys in one
//! transaction, so when two owners pin one tool at once the first commit wins and both see it.
//! `--accept` deletes the server's rows and inserts the new ones in one transaction.

use serde_json::Value;
use tokio_postgres::types::Type;

use super::db::{db_err, from_json, to_json};
use super::handle::Inner;
use crate::model::ToolPin;
use crate::store::StoreResult;

/// Reads the pins of the given keys (`server[i]`, `tool[i]`).
const READ_KEYS_SQL: &str = "SELECT pin FROM cronsole_tool_pins
     WHERE (server, tool) IN (SELECT * FROM unnest($1::text[], $2::text[]))";

/// Inserts the pins whose key is free.
const INSERT_SQL: &str = "INSERT INTO cronsole_tool_pins (server, tool, hash, pin)
     SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[])
     ON CONFLICT (server, tool) DO NOTHING";

/// Pins as the four arrays [`INSERT_SQL`] takes: servers, tools, hashes, whole pins.
type Columns = (Vec<String>, Vec<String>, Vec<String>, Vec<Value>);

/// The columns of `pins`, in [`INSERT_SQL`]'s order.
fn columns(pins: &[ToolPin]) -> StoreResult<Columns> {
    let mut cols = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for p in pins {
        cols.0.push(p.server.clone());
        cols.1.push(p.tool.clone());
        cols.2.push(p.hash.clone());
        cols.3.push(to_json(p)?);
    }
    Ok(cols)
}

fn sorted(mut pins: Vec<ToolPin>) -> Vec<ToolPin> {
    pins.sort_by(|a, b| (&a.server, &a.tool).cmp(&(&b.server, &b.tool)));
    pins
}

impl Inner {
    fn pins_of(&self, rows: Vec<tokio_postgres::Row>) -> StoreResult<Vec<ToolPin>> {
        rows.into_iter()
            .map(|r| from_json(&self.location, "cronsole_tool_pins", r.get::<_, Value>(0)))
            .collect()
    }

    pub(super) async fn tool_pins(&self, servers: Vec<String>) -> StoreResult<Vec<ToolPin>> {
        let c = self.pool.get().await?;
        let rows = c
            .query_typed(
                "SELECT pin FROM cronsole_tool_pins
                 WHERE cardinality($1::text[]) = 0 OR server = ANY($1::text[])",
                &[(&servers, Type::TEXT_ARRAY)],
            )
            .await
            .map_err(|e| db_err("reading tool pins", e))?;
        Ok(sorted(self.pins_of(rows)?))
    }

    pub(super) async fn pin_tools(&self, pins: Vec<ToolPin>) -> StoreResult<Vec<ToolPin>> {
        let (servers, tools, hashes, docs) = columns(&pins)?;
        let mut c = self.pool.get().await?;
        let tx = c
            .transaction()
            .await
            .map_err(|e| db_err("starting to pin tools", e))?;
        tx.query_typed(
            INSERT_SQL,
            &[
                (&servers, Type::TEXT_ARRAY),
                (&tools, Type::TEXT_ARRAY),
                (&hashes, Type::TEXT_ARRAY),
                (&docs, Type::JSONB_ARRAY),
            ],
        )
        .await
        .map_err(|e| db_err("pinning tools", e))?;
        let rows = tx
            .query_typed(
                READ_KEYS_SQL,
                &[(&servers, Type::TEXT_ARRAY), (&tools, Type::TEXT_ARRAY)],
            )
            .await
            .map_err(|e| db_err("reading tool pins", e))?;
        tx.commit()
            .await
            .map_err(|e| db_err("committing tool pins", e))?;
        let held = self.pins_of(rows)?;
        Ok(pins
            .iter()
            .filter_map(|p| {
                held.iter()
                    .find(|h| h.server == p.server && h.tool == p.tool)
                    .cloned()
            })
            .collect())
    }

    pub(super) async fn accept_tools(
        &self,
        server: String,
        pins: Vec<ToolPin>,
    ) -> StoreResult<usize> {
        let mine: Vec<ToolPin> = pins.into_iter().filter(|p| p.server == server).collect();
        let (servers, tools, hashes, docs) = columns(&mine)?;
        let mut c = self.pool.get().await?;
        let tx = c
            .transaction()
            .await
            .map_err(|e| db_err("starting to re-pin tools", e))?;
        let gone = tx
            .execute_typed(
                "DELETE FROM cronsole_tool_pins WHERE server = $1",
                &[(&server, Type::TEXT)],
            )
            .await
            .map_err(|e| db_err("removing tool pins", e))?;
        tx.query_typed(
            INSERT_SQL,
            &[
                (&servers, Type::TEXT_ARRAY),
                (&tools, Type::TEXT_ARRAY),
                (&hashes, Type::TEXT_ARRAY),
                (&docs, Type::JSONB_ARRAY),
            ],
        )
        .await
        .map_err(|e| db_err("pinning tools", e))?;
        tx.commit()
            .await
            .map_err(|e| db_err("committing tool pins", e))?;
        Ok(usize::try_from(gone).unwrap_or(usize::MAX))
    }
}

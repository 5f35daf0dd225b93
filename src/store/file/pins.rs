//! Tool pins in the file store: `tools.json`, `{"cronsole":"tool-pins","store":ID,"pins":[…]}`.
//!
//! Owns: reading and replacing that file under the store's lock. Must not touch: what a pin
//! means (the tools' pinning rules decide which pins to write; this only keeps them).
//!
//! The file is optional: a store that never ran a tool has none (and a store written by an
//! earlier release reads as having no pins). Once there, it is replaced whole (temp + fsync +
//! rename + fsync dir) under the exclusive lock, so two owners pinning at once serialise and
//! the first one's pins stay. An unreadable or foreign file is damage naming it, never read as
//! "no pins" (that would let a changed tool through).

use serde::{Deserialize, Serialize};

use super::handle::{FileStore, Locked};
use super::log::{check_id, corrupt, io_err, json_err, stat, write_atomic};
use crate::model::ToolPin;
use crate::store::StoreResult;

/// The pins file's name in the store directory.
pub(super) const PINS_FILE: &str = "tools.json";

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PinsFile {
    cronsole: String,
    store: String,
    pins: Vec<ToolPin>,
}

impl Locked<'_> {
    fn read_pins(&self) -> StoreResult<Vec<ToolPin>> {
        let path = self.path(PINS_FILE);
        if stat(self.io(), &path)?.is_none() {
            return Ok(Vec::new());
        }
        let text = self.io().read(&path).map_err(io_err(&path))?;
        let f: PinsFile =
            serde_json::from_slice(&text).map_err(|e| json_err(&path, e.line() as u64, &e))?;
        if f.cronsole != "tool-pins" {
            return Err(corrupt(&path, 1, 1, "not a cronsole tool pins file"));
        }
        check_id(&path, Some(&f.store), self.id())?;
        Ok(f.pins)
    }

    fn write_pins(&self, mut pins: Vec<ToolPin>) -> StoreResult<()> {
        pins.sort_by(|a, b| (&a.server, &a.tool).cmp(&(&b.server, &b.tool)));
        let f = PinsFile {
            cronsole: "tool-pins".to_string(),
            store: self.id().to_string(),
            pins,
        };
        let bytes =
            serde_json::to_vec_pretty(&f).map_err(crate::store::StoreError::encode("tool pins"))?;
        write_atomic(self.io(), &self.store.dir, &self.path(PINS_FILE), &bytes)
    }
}

fn same_key(a: &ToolPin, b: &ToolPin) -> bool {
    a.server == b.server && a.tool == b.tool
}

impl FileStore {
    pub(super) fn read_tool_pins(&self, servers: &[String]) -> StoreResult<Vec<ToolPin>> {
        let mut pins = self.lock_for(&[])?.read_pins()?;
        pins.retain(|p| servers.is_empty() || servers.contains(&p.server));
        pins.sort_by(|a, b| (&a.server, &a.tool).cmp(&(&b.server, &b.tool)));
        Ok(pins)
    }

    pub(super) fn insert_tool_pins(&self, new: &[ToolPin]) -> StoreResult<Vec<ToolPin>> {
        let l = self.lock_for(&[])?;
        let mut all = l.read_pins()?;
        let before = all.len();
        for p in new {
            if !all.iter().any(|q| same_key(p, q)) {
                all.push(p.clone());
            }
        }
        let held: Vec<ToolPin> = new
            .iter()
            .filter_map(|p| all.iter().find(|q| same_key(p, q)).cloned())
            .collect();
        if all.len() != before {
            l.write_pins(all)?;
        }
        Ok(held)
    }

    pub(super) fn replace_tool_pins(&self, server: &str, pins: &[ToolPin]) -> StoreResult<usize> {
        let l = self.lock_for(&[])?;
        let mut all = l.read_pins()?;
        let before = all.len();
        all.retain(|p| p.server != server);
        let replaced = before - all.len();
        all.extend(pins.iter().filter(|p| p.server == server).cloned());
        l.write_pins(all)?;
        Ok(replaced)
    }
}

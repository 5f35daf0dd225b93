//! A run's end reaching its `after:` children on the file store: their cached records take the
//! parent's row, to be written in the same persist as the parent's.
//!
//! Owns: `Locked::chain_fan_out`. Must not touch: the chain rule itself (`policy::chain`).

use super::handle::Locked;
use crate::model::HistoryRow;
use crate::store::StoreResult;
use crate::store::policy;

impl Locked<'_> {
    /// Record the end `row` of a run of `parent` in its `after:` children's cached records;
    /// returns the children whose records changed (to persist with the parent's).
    pub(super) fn chain_fan_out(
        &mut self,
        parent: &str,
        row: &HistoryRow,
    ) -> StoreResult<Vec<String>> {
        if !policy::chain::may_fire(row) || self.inner.chained.is_empty() {
            return Ok(Vec::new());
        }
        self.load(parent)?;
        let Some(def) = self.inner.hot.get(parent).map(|c| c.rec.def.clone()) else {
            return Ok(Vec::new());
        };
        let candidates: Vec<String> = self.inner.chained.iter().cloned().collect();
        let mut changed = Vec::new();
        for name in candidates {
            self.load(&name)?;
            if let Some(c) = self.inner.hot.get_mut(&name)
                && policy::chain::is_child_of(&c.rec.def, parent)
                && policy::chain::record(&mut c.rec, &def, row)
            {
                changed.push(name);
            }
        }
        Ok(changed)
    }
}

//! What the main screen reads across every job, derived once per snapshot (and per budget
//! period) instead of at every redraw: an idle console at a million jobs redraws once a second
//! for its countdowns, and a walk over every job row for each of these took most of a redraw.
//!
//! Owns: [`Derived`] (the leased jobs, the holds, the budget stops, the top spenders and the
//! instants whose shown durations the idle redraw timer follows). Must not touch: drawing, the
//! clock (the per-redraw answers take `now`).

use chrono::{DateTime, Utc};

use super::period_spend;
use crate::snapshot::{JobRow, Snapshot};

/// How many top spenders are kept: more than any spend pane shows (a taller one scans).
pub(crate) const TOP_KEPT: usize = 256;

/// The main screen's whole-store tables for one snapshot and one budget period.
#[derive(Debug, Default, Clone)]
pub(crate) struct Derived {
    /// Indices into `snap.jobs` of the jobs holding a lease, in name order.
    pub(crate) leased: Vec<usize>,
    /// Every job's `hold_until`, sorted.
    holds: Vec<DateTime<Utc>>,
    /// [`Snapshot::budget_stops`].
    pub(crate) stops: Vec<(String, String)>,
    /// The jobs that spent in the period, most first, as (spend, index in `snap.jobs`): at most
    /// [`TOP_KEPT`].
    top: Vec<(f64, usize)>,
    /// Instants shown counting down while ahead (each firing job's next fire instant, each
    /// lease's expiry), sorted and distinct.
    pub(crate) down: Vec<DateTime<Utc>>,
    /// Instants shown counting up (each job's last run, each lease's renewal), sorted and
    /// distinct.
    pub(crate) up: Vec<DateTime<Utc>>,
}

impl Derived {
    /// The tables of `snap` in the budget period `period_key`.
    pub(crate) fn of(snap: &Snapshot, period_key: &str) -> Derived {
        let mut d = Derived {
            stops: snap.budget_stops(),
            ..Derived::default()
        };
        for (i, j) in snap.jobs.iter().enumerate() {
            if let Some(h) = j.rt.hold_until {
                d.holds.push(h);
            }
            let fires = !(j.rt.retired || j.rt.paused || !j.def.enabled);
            if fires && let Some(t) = j.rt.next_slot {
                d.down.push(j.fire_at(t));
            }
            if let Some(t) = j.rt.last_run_at {
                d.up.push(t);
            }
            if let Some(l) = &j.rt.lease {
                d.leased.push(i);
                d.down.push(l.lease_until);
                d.up.push(l.last_renewed);
            }
        }
        for v in [&mut d.holds, &mut d.down, &mut d.up] {
            v.sort_unstable();
        }
        d.down.dedup();
        d.up.dedup();
        d.top = top_spenders(&snap.jobs, period_key, TOP_KEPT);
        d
    }

    /// The spenders of the budget period of [`Derived::of`] again (its key changed).
    pub(crate) fn respend(&mut self, snap: &Snapshot, period_key: &str) {
        self.top = top_spenders(&snap.jobs, period_key, TOP_KEPT);
    }

    /// How many jobs are held past `now`.
    pub(crate) fn held(&self, now: DateTime<Utc>) -> usize {
        self.holds.len() - self.holds.partition_point(|h| *h <= now)
    }

    /// The `k` jobs that spent most in the period, most first, as (spend, index); `None` when
    /// more are asked than are kept and there may be more.
    pub(crate) fn top(&self, k: usize) -> Option<&[(f64, usize)]> {
        if k > TOP_KEPT && self.top.len() == TOP_KEPT {
            return None;
        }
        Some(&self.top[..k.min(self.top.len())])
    }
}

/// The `k` jobs of `jobs` that spent most in the period `key`, most first, as (spend, index):
/// the best few kept without sorting every job.
pub(crate) fn top_spenders(jobs: &[JobRow], key: &str, k: usize) -> Vec<(f64, usize)> {
    let mut best: Vec<(f64, usize)> = Vec::with_capacity(k + 1);
    if k == 0 {
        return best;
    }
    for (i, j) in jobs.iter().enumerate() {
        let v = period_spend(j, key);
        if v <= 0.0 || !v.is_finite() {
            continue;
        }
        if best.len() < k || best.last().is_some_and(|b| v > b.0) {
            let pos = best.partition_point(|b| b.0 >= v);
            best.insert(pos, (v, i));
            best.truncate(k);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tui::testdata;

    /// The tables agree with a walk over every job: leases, holds counted against `now`, the
    /// top spenders (also past what is kept), every instant once.
    #[test]
    fn the_tables_match_a_walk_over_every_job() {
        let (mut snap, now) = testdata::big(3_000, 10);
        for (i, j) in snap.jobs.iter_mut().enumerate().step_by(7) {
            j.rt.hold_until = Some(now + chrono::Duration::minutes(i as i64 - 1_000));
        }
        let key = crate::cost::budget_period(&snap.settings).key(now);
        let d = Derived::of(&snap, &key);
        let leased: Vec<usize> = (0..snap.jobs.len())
            .filter(|&i| snap.jobs[i].rt.lease.is_some())
            .collect();
        assert!(!leased.is_empty());
        assert_eq!(d.leased, leased);
        assert_eq!(d.stops, snap.budget_stops());
        let held = |at| {
            snap.jobs
                .iter()
                .filter(|j| j.rt.hold_until.is_some_and(|h| h > at))
                .count()
        };
        assert!(held(now) > 0 && held(now) < snap.jobs.len() / 7);
        for at in [
            now - chrono::Duration::days(1),
            now,
            now + chrono::Duration::hours(1),
        ] {
            assert_eq!(d.held(at), held(at));
        }
        assert_eq!(d.top(8), Some(&top_spenders(&snap.jobs, &key, 8)[..]));
        assert!(d.top(8).is_some_and(|t| t.len() == 8));
        let all = top_spenders(&snap.jobs, &key, snap.jobs.len());
        assert!(all.len() > TOP_KEPT);
        assert_eq!(
            d.top(TOP_KEPT + 1),
            None,
            "more than kept: the caller scans"
        );
        let mut last: Vec<_> = snap.jobs.iter().filter_map(|j| j.rt.last_run_at).collect();
        last.sort_unstable();
        last.dedup();
        assert!(last.iter().all(|t| d.up.binary_search(t).is_ok()));
        assert!(d.up.windows(2).all(|w| w[0] < w[1]));
        assert!(d.down.windows(2).all(|w| w[0] < w[1]));
    }
}

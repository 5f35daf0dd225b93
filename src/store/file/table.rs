//! The in-memory per-job index of a file-store handle ([`JobTable`]): every job's [`Slim`]
//! entry by name, and the wake-up order the claims walk.
//!
//! Owns: the layout of that index in memory and its invariants (names unique, name order,
//! every wake-up in the wake-up order once). Must not touch: files, what an entry means (that is
//! [`super::record`]'s), the lock.
//!
//! # Why not a `BTreeMap<String, Slim>`
//! Opening a 1 000 000-job store through `jobs.index` spent most of its CPU building a map of a
//! million heap-allocated names and a wake-up set of a million more (allocation and page faults
//! ≈ 30 %), and tearing both down at exit (≈ 10 %). Here the entries the handle loaded (from
//! `jobs.index` or a scan of the snapshot, both in strictly increasing name order) are one
//! sorted `Vec` of fixed-size entries whose names sit in one arena: two allocations, found by
//! binary search, dropped by freeing two blocks (an entry owns heap memory only when the job
//! has budget counters). A job created after the load whose name sorts after every loaded one
//! is appended the same way; any other new job goes to a small `BTreeMap` beside it. Jobs are
//! never removed (retiring a job rewrites its record); [`JobTable::clear`] starts over.
//!
//! The wake-up order is built on first use, not at open (`describe`, `jobs --json` and the
//! console's first frame never need it): one sorted `Vec` of (wake-up, entry number), plus a
//! `BTreeSet` of (wake-up, name) for the jobs whose wake-up changed after it was built (their
//! `Vec` item is then dead: the entry is flagged, and dead items are skipped, at the front once
//! and for all) and for the jobs in the side map. Iterating the order merges the two by
//! (wake-up, name): the order of the `BTreeSet<(wake-up, name)>` it replaces.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use chrono::{DateTime, Utc};

#[cfg(test)]
use super::record::Loc;
use super::record::Slim;

/// One job loaded in name order: its name in the arena and its entry.
#[derive(Debug, Clone)]
struct Base {
    name_at: usize,
    /// A name is part of its job line, and a line is at most 4 GiB (`jobs::line_len`).
    name_len: u32,
    /// The job's wake-up is tracked in `JobTable::moved`, not by its item in `JobTable::order`
    /// (it changed after the order was built, or the job was added after it).
    moved: bool,
    slim: Slim,
}

/// Every job's index entry, by name (see the module doc).
#[derive(Debug, Default)]
pub(super) struct JobTable {
    /// The names of `base`, one after the other.
    arena: String,
    /// Jobs in strictly increasing name order.
    base: Vec<Base>,
    /// Jobs added after the load whose names sort before the last of `base`; never a name of
    /// `base`.
    side: BTreeMap<String, Slim>,
    /// `(wake-up, base entry)` in that order, built on first use; an item whose entry is
    /// `moved` is dead.
    order: Option<Vec<(DateTime<Utc>, u32)>>,
    /// Items of `order` before this one are dead.
    head: usize,
    /// The wake-ups of the jobs of `side` and of the `moved` entries of `base`.
    moved: BTreeSet<(DateTime<Utc>, String)>,
}

/// Builds a [`JobTable`] from entries in strictly increasing name order (`jobs.index`).
pub(super) struct Builder {
    t: JobTable,
}

impl Builder {
    /// Room for `jobs` entries of `name_bytes` bytes of names in all.
    pub(super) fn with_capacity(jobs: usize, name_bytes: usize) -> Builder {
        Builder {
            t: JobTable {
                arena: String::with_capacity(name_bytes),
                base: Vec::with_capacity(jobs),
                ..JobTable::default()
            },
        }
    }

    /// Add the next job; `false` (nothing added) when `name` does not sort after the last one.
    pub(super) fn push(&mut self, name: &str, slim: Slim) -> bool {
        if self.t.base.last().is_some_and(|l| self.t.name(l) >= name) {
            return false;
        }
        self.t.push_base(name, slim);
        true
    }

    pub(super) fn finish(self) -> JobTable {
        self.t
    }
}

impl JobTable {
    fn name(&self, b: &Base) -> &str {
        &self.arena[b.name_at..b.name_at + b.name_len as usize]
    }

    fn push_base(&mut self, name: &str, slim: Slim) {
        let name_at = self.arena.len();
        self.arena.push_str(name);
        // Added after the order was built: its wake-up goes to the set.
        let moved = self.order.is_some();
        if moved && let Some(w) = slim.wake {
            self.moved.insert((w, name.to_string()));
        }
        self.base.push(Base {
            name_at,
            name_len: u32::try_from(name.len()).unwrap_or(u32::MAX),
            moved,
            slim,
        });
    }

    fn find(&self, name: &str) -> Option<usize> {
        // Loads, scans and name-ordered appends ask for the last entry most.
        match self.base.last() {
            Some(l) if self.name(l) < name => return None,
            None => return None,
            _ => {}
        }
        self.base.binary_search_by(|b| self.name(b).cmp(name)).ok()
    }

    pub(super) fn len(&self) -> usize {
        self.base.len() + self.side.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(super) fn clear(&mut self) {
        *self = JobTable::default();
    }

    pub(super) fn get(&self, name: &str) -> Option<&Slim> {
        match self.find(name) {
            Some(i) => Some(&self.base[i].slim),
            None => self.side.get(name),
        }
    }

    pub(super) fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Point job `name` at `slim` (a new job is added), keeping the wake-up order.
    pub(super) fn set(&mut self, name: &str, slim: Slim) {
        let wake = slim.wake;
        if let Some(i) = self.find(name) {
            let old = std::mem::replace(&mut self.base[i].slim, slim).wake;
            // Before the order is built, it is built from the entries as they are then.
            if old == wake || self.order.is_none() {
                return;
            }
            let b = &mut self.base[i];
            let was_moved = std::mem::replace(&mut b.moved, true);
            let name = &self.arena[b.name_at..b.name_at + b.name_len as usize];
            if was_moved && let Some(o) = old {
                self.moved.remove(&(o, name.to_string()));
            }
            if let Some(w) = wake {
                self.moved.insert((w, name.to_string()));
            }
            return;
        }
        if let Some(s) = self.side.get_mut(name) {
            let old = std::mem::replace(s, slim).wake;
            if old != wake {
                if let Some(o) = old {
                    self.moved.remove(&(o, name.to_string()));
                }
                if let Some(w) = wake {
                    self.moved.insert((w, name.to_string()));
                }
            }
            return;
        }
        if self.base.last().is_none_or(|l| self.name(l) < name) {
            self.push_base(name, slim);
        } else {
            if let Some(w) = wake {
                self.moved.insert((w, name.to_string()));
            }
            self.side.insert(name.to_string(), slim);
        }
    }

    /// Every job, in name order.
    pub(super) fn iter(&self) -> Iter<'_> {
        self.iter_after(None)
    }

    /// The jobs named after `after` (all when `None`), in name order.
    pub(super) fn iter_after(&self, after: Option<&str>) -> Iter<'_> {
        let (from, side) = match after {
            None => (0, self.side.range::<str, _>(..)),
            Some(a) => (
                self.base.partition_point(|b| self.name(b) <= a),
                self.side
                    .range::<str, _>((Bound::Excluded(a), Bound::Unbounded)),
            ),
        };
        Iter {
            t: self,
            base: from,
            side: side.peekable(),
        }
    }

    /// Every job's entry, in no particular order.
    pub(super) fn values(&self) -> impl Iterator<Item = &Slim> {
        self.base.iter().map(|b| &b.slim).chain(self.side.values())
    }

    /// Point every job, in name order, at its line in `locs` (a compaction just wrote them all
    /// to a new snapshot, in that order): the table is rebuilt as one sorted run, and its
    /// wake-up order is built again on next use. `false` (the table left as it was) when
    /// `locs` does not hold one line per job.
    #[must_use]
    #[cfg(test)]
    pub(super) fn relocate(&mut self, locs: Vec<Loc>) -> bool {
        if locs.len() != self.len() {
            return false;
        }
        let old = std::mem::take(self);
        let mut b = Builder::with_capacity(old.len(), old.arena.len());
        for ((name, slim), loc) in old.iter().zip(locs) {
            let mut slim = slim.clone();
            slim.loc = Some(loc);
            b.push(name, slim);
        }
        *self = b.finish();
        true
    }

    fn build_order(&mut self) {
        if self.order.is_some() {
            return;
        }
        let mut order: Vec<(DateTime<Utc>, u32)> = Vec::with_capacity(self.base.len());
        for (i, b) in self.base.iter_mut().enumerate() {
            let Some(w) = b.slim.wake.filter(|_| !b.moved) else {
                continue;
            };
            match u32::try_from(i) {
                Ok(i) => order.push((w, i)),
                // Past 2^32 entries an item cannot name its entry: the set tracks it.
                Err(_) => {
                    b.moved = true;
                    let name = &self.arena[b.name_at..b.name_at + b.name_len as usize];
                    self.moved.insert((w, name.to_string()));
                }
            }
        }
        // Entry numbers are in name order: the order of (wake-up, name).
        order.sort_unstable();
        self.order = Some(order);
        self.head = 0;
    }

    /// The live items of `order` from `head` on, skipping (once and for all) the dead ones at
    /// the front.
    fn live_order(&mut self) -> &[(DateTime<Utc>, u32)] {
        self.build_order();
        let Some(order) = self.order.as_deref() else {
            return &[];
        };
        while let Some(&(_, i)) = order.get(self.head) {
            if !self.base[i as usize].moved {
                break;
            }
            self.head += 1;
        }
        &order[self.head.min(order.len())..]
    }

    /// The earliest wake-up of any job.
    pub(super) fn first_wake(&mut self) -> Option<DateTime<Utc>> {
        let a = self.live_order().first().map(|(t, _)| *t);
        let b = self.moved.first().map(|(t, _)| *t);
        match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The jobs whose wake-up is at or before `now`, in (wake-up, name) order.
    pub(super) fn due(&mut self, now: DateTime<Utc>) -> Vec<String> {
        self.wake_order(Some(now))
            .into_iter()
            .map(|(_, n)| n)
            .collect()
    }

    /// The wake-up order (up to `until`, or all of it): every job with a wake-up once, in
    /// (wake-up, name) order.
    pub(super) fn wake_order(
        &mut self,
        until: Option<DateTime<Utc>>,
    ) -> Vec<(DateTime<Utc>, String)> {
        self.build_order();
        let _ = self.live_order();
        let order = self.order.as_deref().unwrap_or(&[]);
        let within = |t: &DateTime<Utc>| until.is_none_or(|u| *t <= u);
        let mut a = order[self.head.min(order.len())..]
            .iter()
            .filter(|(_, i)| !self.base[*i as usize].moved)
            .take_while(|(t, _)| within(t))
            .map(|&(t, i)| (t, self.name(&self.base[i as usize])))
            .peekable();
        let mut b = self
            .moved
            .iter()
            .take_while(|(t, _)| within(t))
            .map(|(t, n)| (*t, n.as_str()))
            .peekable();
        let mut out = Vec::new();
        loop {
            let take_a = match (a.peek(), b.peek()) {
                (Some(x), Some(y)) => x <= y,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            let next = if take_a { a.next() } else { b.next() };
            if let Some((t, n)) = next {
                out.push((t, n.to_string()));
            }
        }
        out
    }
}

impl<'a> IntoIterator for &'a JobTable {
    type Item = (&'a str, &'a Slim);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// Tests look entries up as in a map (panics when the job is not there).
#[cfg(test)]
impl std::ops::Index<&str> for JobTable {
    type Output = Slim;

    fn index(&self, name: &str) -> &Slim {
        match self.get(name) {
            Some(s) => s,
            None => panic!("no job '{name}' in the table"),
        }
    }
}

/// [`JobTable::iter_after`]: the sorted run and the side map merged by name.
pub(super) struct Iter<'a> {
    t: &'a JobTable,
    base: usize,
    side: std::iter::Peekable<std::collections::btree_map::Range<'a, String, Slim>>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, &'a Slim);

    fn next(&mut self) -> Option<(&'a str, &'a Slim)> {
        let t = self.t;
        let b = t.base.get(self.base).map(|b| (t.name(b), &b.slim));
        let s = self.side.peek().map(|(n, s)| (n.as_str(), *s));
        match (b, s) {
            (Some(b), Some(s)) if s.0 < b.0 => {
                self.side.next();
                Some(s)
            }
            (Some(b), _) => {
                self.base += 1;
                Some(b)
            }
            (None, Some(s)) => {
                self.side.next();
                Some(s)
            }
            (None, None) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::time::epoch as t;

    fn slim(wake: Option<i64>) -> Slim {
        Slim {
            loc: None,
            wake: wake.map(t),
            at: None,
            lease: None,
            spend: None,
            def: None,
        }
    }

    /// The table against a `BTreeMap` + `BTreeSet` model (what it replaced) through a long
    /// pseudo-random sequence of loads, changes, additions and wake-up queries.
    #[test]
    fn the_table_behaves_as_a_map_and_a_wake_up_set() {
        let mut rng = fastrand::Rng::with_seed(7);
        for round in 0..40 {
            let n = rng.usize(0..60);
            let mut model: BTreeMap<String, Slim> = BTreeMap::new();
            let mut b = Builder::with_capacity(n, 0);
            for i in 0..n {
                if rng.bool() {
                    let name = format!("j{:03}", i * 2);
                    let s = slim(rng.bool().then(|| rng.i64(0..20)));
                    assert!(b.push(&name, s.clone()));
                    assert!(!b.push(&name, s.clone()), "a repeated name is refused");
                    model.insert(name, s);
                }
            }
            let mut table = b.finish();
            for step in 0..300 {
                match rng.u8(0..10) {
                    0..=5 => {
                        let name = format!("j{:03}", rng.usize(0..130));
                        let s = slim(rng.bool().then(|| rng.i64(0..20)));
                        table.set(&name, s.clone());
                        model.insert(name, s);
                    }
                    6 => {
                        let now = t(rng.i64(0..20));
                        let want: Vec<String> = wake_set(&model)
                            .into_iter()
                            .filter(|(w, _)| *w <= now)
                            .map(|(_, n)| n)
                            .collect();
                        assert_eq!(table.due(now), want, "round {round} step {step}");
                    }
                    7 => {
                        let want = wake_set(&model).first().map(|(w, _)| *w);
                        assert_eq!(table.first_wake(), want, "round {round} step {step}");
                    }
                    8 => {
                        let locs = (0..table.len() as u64)
                            .map(|off| Loc {
                                journal: false,
                                off,
                                len: 1,
                                crc: None,
                            })
                            .collect();
                        assert!(table.relocate(locs));
                        assert!(!table.relocate(Vec::new()) || table.is_empty());
                        for (off, s) in model.values_mut().enumerate() {
                            s.loc = Some(Loc {
                                journal: false,
                                off: off as u64,
                                len: 1,
                                crc: None,
                            });
                        }
                    }
                    _ => {
                        let after = format!("j{:03}", rng.usize(0..130));
                        let got: Vec<&str> =
                            table.iter_after(Some(&after)).map(|(n, _)| n).collect();
                        let want: Vec<&str> = model
                            .range::<str, _>((Bound::Excluded(after.as_str()), Bound::Unbounded))
                            .map(|(n, _)| n.as_str())
                            .collect();
                        assert_eq!(got, want);
                    }
                }
                assert_eq!(table.len(), model.len());
                let got: Vec<(&str, &Slim)> = table.iter().collect();
                let want: Vec<(&str, &Slim)> = model.iter().map(|(n, s)| (n.as_str(), s)).collect();
                assert_eq!(got, want, "round {round} step {step}");
                for (n, s) in &model {
                    assert_eq!(table.get(n), Some(s));
                }
                assert!(table.get("zzz").is_none() && table.get("").is_none());
                assert_eq!(
                    table.wake_order(None),
                    wake_set(&model).into_iter().collect::<Vec<_>>(),
                    "round {round} step {step}"
                );
            }
        }
    }

    fn wake_set(model: &BTreeMap<String, Slim>) -> BTreeSet<(DateTime<Utc>, String)> {
        model
            .iter()
            .filter_map(|(n, s)| Some((s.wake?, n.clone())))
            .collect()
    }

    /// The size the module doc and the README count on (a million entries are one block of
    /// about 120 MB, plus the names and, once claims need it, 16 bytes each of wake-up order).
    #[test]
    fn an_entry_is_fixed_size_and_small() {
        assert!(
            std::mem::size_of::<Base>() <= 120,
            "{}",
            std::mem::size_of::<Base>()
        );
        assert_eq!(std::mem::size_of::<(DateTime<Utc>, u32)>(), 16);
    }

    /// Dead items at the front of the order are skipped once, not at every query.
    #[test]
    fn dead_items_at_the_front_are_passed_once() {
        let mut b = Builder::with_capacity(100, 0);
        for i in 0..100 {
            b.push(&format!("j{i:03}"), slim(Some(i)));
        }
        let mut table = b.finish();
        assert_eq!(table.first_wake(), Some(t(0)));
        for i in 0..50 {
            table.set(&format!("j{i:03}"), slim(Some(1000 + i)));
        }
        assert_eq!(table.first_wake(), Some(t(50)));
        assert_eq!(table.head, 50);
        assert_eq!(table.due(t(51)), vec!["j050".to_string(), "j051".into()]);
        // A job whose wake-up moved back before the others is first again, from the set.
        table.set("j003", slim(Some(-1)));
        assert_eq!(table.first_wake(), Some(t(-1)));
        assert_eq!(table.due(t(50)), vec!["j003".to_string(), "j050".into()]);
    }
}

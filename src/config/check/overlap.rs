//! `overlap:` and `max_concurrent_runs:` of a job and of `defaults`.
//!
//! Owns: how the two keys combine into a [`model::Overlap`](crate::model::Overlap) and every
//! error about them. Must not touch: what the policies do (`store::policy::overlap`), other keys.
//!
//! Rules: `overlap` is one of `skip` (default), `buffer_one`, `cancel_previous`, `allow`;
//! `allow` needs `max_concurrent_runs` of 2 or more (1 would be `skip`); `max_concurrent_runs`
//! with any other policy is an error (it would silently do nothing). A job inherits each key
//! from `defaults` unless it sets it; a pair inherited whole from `defaults` was checked there.

use super::checker::{Checker, closest, key, show};
use crate::config::bounds;
use crate::config::yaml::{Mapping, Seg};
use crate::model::Overlap;

/// The two keys as written in one mapping (`None` = absent or already reported as wrong).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct OverlapKeys {
    /// The policy word, without `allow`'s bound.
    pub policy: Option<Overlap>,
    pub max_concurrent_runs: Option<u32>,
    /// The mapping has each key (even when its value was wrong).
    pub has_policy: bool,
    pub has_max: bool,
}

impl Checker<'_> {
    /// Read `overlap` and `max_concurrent_runs` of one mapping.
    pub(super) fn overlap_keys(&mut self, m: &Mapping, p: &[Seg]) -> OverlapKeys {
        let mut k = OverlapKeys {
            has_policy: Self::get(m, "overlap").is_some(),
            has_max: Self::get(m, "max_concurrent_runs").is_some(),
            ..Default::default()
        };
        if let Some(word) = self.opt_str(m, p, "overlap") {
            let w = word.trim().to_ascii_lowercase();
            k.policy = match w.as_str() {
                "skip" => Some(Overlap::Skip),
                "buffer_one" => Some(Overlap::BufferOne),
                "cancel_previous" => Some(Overlap::CancelPrevious),
                "allow" => Some(Overlap::Allow {
                    max_concurrent_runs: 0,
                }),
                _ => {
                    let hint = closest(&w, &Overlap::NAMES)
                        .map(|c| format!(" (did you mean {c}?)"))
                        .unwrap_or_default();
                    self.error(
                        key(p, "overlap"),
                        format!(
                            "unknown overlap policy {}{hint}: use skip, buffer_one, \
                             cancel_previous or allow",
                            show(&word)
                        ),
                    );
                    None
                }
            };
        }
        k.max_concurrent_runs = self
            .opt_whole(m, p, "max_concurrent_runs", bounds::MAX_CONCURRENT_RUNS)
            .map(|x| x as u32);
        k
    }

    /// The policy of a mapping whose keys are `own`, inheriting what it does not set from
    /// `inherited` (the defaults' pair; `None` for `defaults` itself). Errors are reported at
    /// the key of `own` that is wrong.
    pub(super) fn overlap_policy(
        &mut self,
        p: &[Seg],
        own: OverlapKeys,
        inherited: Option<Overlap>,
    ) -> Overlap {
        let inherited = inherited.unwrap_or_default();
        if !own.has_policy && !own.has_max {
            return inherited;
        }
        let inherited_max = match inherited {
            Overlap::Allow {
                max_concurrent_runs,
            } => Some(max_concurrent_runs),
            _ => None,
        };
        let policy = if own.has_policy {
            match own.policy {
                Some(x) => x,
                // Reported already; do not pile a second error on the bound.
                None => return inherited,
            }
        } else {
            inherited
        };
        match policy {
            Overlap::Allow { .. } => {
                let max = if own.has_max {
                    own.max_concurrent_runs
                } else {
                    inherited_max
                };
                match max {
                    Some(n) if n >= 2 => Overlap::Allow {
                        max_concurrent_runs: n,
                    },
                    // A wrong value was reported at `max_concurrent_runs`.
                    _ if own.has_max => Overlap::Skip,
                    _ => {
                        self.error(
                            key(p, "overlap"),
                            format!(
                                "overlap: allow needs max_concurrent_runs ({}): how many runs \
                                 of this job may be live at once",
                                bounds::MAX_CONCURRENT_RUNS.describe()
                            ),
                        );
                        Overlap::Skip
                    }
                }
            }
            other => {
                if own.has_max {
                    self.error(
                        key(p, "max_concurrent_runs"),
                        format!(
                            "max_concurrent_runs only applies to overlap: allow (this job's \
                             overlap is {}); remove it or set overlap: allow",
                            other.name()
                        ),
                    );
                }
                other
            }
        }
    }
}

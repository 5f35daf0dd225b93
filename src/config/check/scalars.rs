//! Typed reads of one key: text, booleans, bounded numbers (from `config::bounds`), the
//! grace window, and lists of names. Each records a precise error (what was expected, what was
//! found) and returns `None` so the caller falls back to the default and goes on.
//!
//! Owns: how a YAML scalar becomes a Rust value. Must not touch: which keys exist where.

use super::checker::{Checker, describe_value, index, key};
use crate::config::bounds::{self, Real, Whole};
use crate::config::yaml::{Mapping, Seg, Value, float_text};

/// The longest command line [`Checker::opt_exec`] accepts: Linux's `MAX_ARG_STRLEN` (32 pages
/// of 4 KiB) less the terminating NUL, the limit of the one argument `sh -c` receives.
pub(super) const MAX_EXEC_BYTES: usize = 32 * 4096 - 1;

impl Checker<'_> {
    pub(super) fn opt_str(&mut self, m: &Mapping, base: &[Seg], k: &str) -> Option<String> {
        match Self::get(m, k)? {
            Value::String(s) => Some(s.clone()),
            other => {
                let hint = if matches!(other, Value::Number(_) | Value::Bool(_)) {
                    " (quote it if you mean the text)"
                } else {
                    ""
                };
                self.error(
                    key(base, k),
                    format!("expected a string, found {}{hint}", describe_value(other)),
                );
                None
            }
        }
    }

    /// A string that must not be blank.
    pub(super) fn opt_text(&mut self, m: &Mapping, base: &[Seg], k: &str) -> Option<String> {
        let s = self.opt_str(m, base, k)?;
        if s.trim().is_empty() {
            self.error(key(base, k), "must not be empty");
            return None;
        }
        Some(s)
    }

    /// A command line handed to `exec` (a job's `command`, `pre_run`, a monitor's `command`):
    /// not blank, no NUL byte (a C string ends there: the process would run a different,
    /// shorter command than the one written), and at most [`MAX_EXEC_BYTES`] bytes (Linux
    /// refuses a longer single argument with "Argument list too long", so every run would
    /// fail and each failed row would carry the whole text).
    pub(super) fn opt_exec(&mut self, m: &Mapping, base: &[Seg], k: &str) -> Option<String> {
        let s = self.opt_text(m, base, k)?;
        if let Some(at) = s.find('\0') {
            self.error(
                key(base, k),
                format!(
                    "contains a NUL character (at byte {at}): a command cannot carry one; \
                     remove it"
                ),
            );
            return None;
        }
        if s.len() > MAX_EXEC_BYTES {
            self.error(
                key(base, k),
                format!(
                    "is {} bytes long; a command can be at most {MAX_EXEC_BYTES} bytes (the \
                     kernel's limit for one argument): put a long script in a file and run that",
                    s.len()
                ),
            );
            return None;
        }
        Some(s)
    }

    pub(super) fn opt_bool(&mut self, m: &Mapping, base: &[Seg], k: &str) -> Option<bool> {
        match Self::get(m, k)? {
            Value::Bool(b) => Some(*b),
            other => {
                self.error(
                    key(base, k),
                    format!("expected true or false, found {}", describe_value(other)),
                );
                None
            }
        }
    }

    /// A finite number within `b`. Type errors say the whole range; out-of-range values say the
    /// side they fell off.
    pub(super) fn opt_real(&mut self, m: &Mapping, base: &[Seg], k: &str, b: Real) -> Option<f64> {
        let v = Self::get(m, k)?;
        let n = match v {
            Value::Number(n) => Some(n.as_f64()).filter(|x| x.is_finite()),
            _ => None,
        };
        match n {
            Some(x) if b.contains(x) => Some(x),
            Some(x) if x < b.min => {
                self.error(
                    key(base, k),
                    format!(
                        "must be at least {}, found {}",
                        float_text(b.min),
                        float_text(x)
                    ),
                );
                None
            }
            Some(x) => {
                self.error(
                    key(base, k),
                    format!(
                        "must be at most {}{}, found {}",
                        float_text(b.max),
                        b.note,
                        float_text(x)
                    ),
                );
                None
            }
            None => {
                self.error(
                    key(base, k),
                    format!("expected {}, found {}", b.describe(), describe_value(v)),
                );
                None
            }
        }
    }

    /// A whole number within `b` (`60.0`, `-3`, `1.5`, `"30"` and numbers beyond 2^64 are not).
    pub(super) fn opt_whole(
        &mut self,
        m: &Mapping,
        base: &[Seg],
        k: &str,
        b: Whole,
    ) -> Option<u64> {
        let v = Self::get(m, k)?;
        let n = match v {
            Value::Number(n) => n.as_u64(),
            _ => None,
        };
        match n {
            Some(x) if b.contains(x) => Some(x),
            _ => {
                self.error(
                    key(base, k),
                    format!("expected {}, found {}", b.describe(), describe_value(v)),
                );
                None
            }
        }
    }

    /// `misfire_grace_seconds`: a number of seconds within [`bounds::GRACE_SECONDS`], a numeric
    /// string ("600"), or null. Text that is not a number is a *warning* and means null (a misfire
    /// policy should not stop a whole file from loading); a number out of range (negative, `.inf`,
    /// `.nan`, beyond 100 years) is an error. `None` = key absent.
    pub(super) fn grace(&mut self, m: &Mapping, base: &[Seg]) -> Option<Option<f64>> {
        let k = "misfire_grace_seconds";
        let b = bounds::GRACE_SECONDS;
        let v = m.get(k)?;
        let parsed = match v {
            Value::Null => return Some(None),
            Value::Number(n) => Some(n.as_f64()),
            Value::String(s) => s.trim().parse::<f64>().ok(),
            _ => None,
        };
        match parsed {
            Some(x) if b.contains(x) => Some(Some(x)),
            Some(x) => {
                self.error(
                    key(base, k),
                    format!(
                        "must be a number of seconds ≥ 0 or null (at most {}{}), found {}",
                        float_text(b.max),
                        b.note,
                        float_text(x)
                    ),
                );
                Some(None)
            }
            None => {
                self.warn(
                    key(base, k),
                    format!(
                        "not a number of seconds ({}); treated as null (no grace limit: overdue \
                         slots coalesce into one run)",
                        describe_value(v)
                    ),
                );
                Some(None)
            }
        }
    }

    pub(super) fn opt_name_list(
        &mut self,
        m: &Mapping,
        base: &[Seg],
        k: &str,
    ) -> Vec<(usize, String)> {
        let Some(v) = Self::get(m, k) else {
            return Vec::new();
        };
        let Value::Sequence(items) = v else {
            self.error(
                key(base, k),
                format!(
                    "expected a list of names such as [a, b], found {}",
                    describe_value(v)
                ),
            );
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            match item {
                Value::String(s) => out.push((i, s.clone())),
                other => self.error(
                    index(&key(base, k), i),
                    format!("expected a name, found {}", describe_value(other)),
                ),
            }
        }
        out
    }
}

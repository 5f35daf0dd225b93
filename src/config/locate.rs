//! Source positions for key paths in YAML text.
//!
//! serde_yaml 0.9 has no spans for values, but it attaches the line/column of the node being
//! deserialized to any custom error raised while deserializing that node. [`locate`] exploits
//! that: a small `DeserializeSeed` walks the text to one key path (`jobs[2].schedule`) and fails
//! *there* with a marker error; the error's location is the node's position. One walk per
//! diagnostic is O(file) and only happens on the error path.
//!
//! Owns: mapping a [`Seg`] path to a 1-based `(line, column)`. Must not touch: validation rules.
//! When a path cannot be found (e.g. it came from a `<<` merge or an alias), callers fall back to
//! the parent's position.

use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// One step of a key path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seg {
    Key(String),
    Index(usize),
}

/// Render a path the way diagnostics show it: `jobs[2].schedule`, `agents.summariser.model`.
pub fn render(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::Index(i) => {
                out.push_str(&format!("[{i}]"));
            }
        }
    }
    if out.is_empty() {
        out.push_str("(document)");
    }
    out
}

/// Which part of the last path step to point at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The key itself (unknown key): `foo` in `foo: 1`.
    Key,
    /// The value (or, for an index, the item) the path names.
    Value,
}

const FOUND: &str = "\u{1}cronsole-locate-found\u{1}";

/// 1-based `(line, column)` of `path` in `text`, or `None` when the path is not in the text as
/// written (or the text does not parse).
pub fn locate(text: &str, path: &[Seg], target: Target) -> Option<(usize, usize)> {
    let de = serde_yaml::Deserializer::from_str(text);
    match (Walker { path, target }).deserialize(de) {
        Ok(()) => None,
        Err(err) => {
            if err.to_string().contains(FOUND) {
                err.location().map(|l| (l.line(), l.column()))
            } else {
                None
            }
        }
    }
}

/// Like [`locate`], but falls back to the nearest ancestor that can be located, then to 1:1.
pub fn locate_or_parent(text: &str, path: &[Seg], target: Target) -> (usize, usize) {
    if let Some(pos) = locate(text, path, target) {
        return pos;
    }
    let mut len = path.len();
    while len > 0 {
        len -= 1;
        if let Some(pos) = locate(text, &path[..len], Target::Value) {
            return pos;
        }
    }
    (1, 1)
}

struct Walker<'p> {
    path: &'p [Seg],
    target: Target,
}

impl<'de> DeserializeSeed<'de> for Walker<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl Walker<'_> {
    /// At the end of the path (value target): fail here so the error carries this node's mark.
    fn here<E: de::Error>(&self) -> Result<(), E> {
        if self.path.is_empty() {
            Err(E::custom(FOUND))
        } else {
            Ok(())
        }
    }
}

impl<'de> Visitor<'de> for Walker<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML node")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.here()
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.here()
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.here()
    }
    fn visit_i128<E: de::Error>(self, _: i128) -> Result<(), E> {
        self.here()
    }
    fn visit_u128<E: de::Error>(self, _: u128) -> Result<(), E> {
        self.here()
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.here()
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.here()
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.here()
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.here()
    }
    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
    fn visit_newtype_struct<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
    fn visit_enum<A: de::EnumAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        // Tagged values (`!tag x`): locate the tagged node itself.
        if self.path.is_empty() {
            Err(de::Error::custom(FOUND))
        } else {
            Ok(())
        }
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some((first, rest)) = self.path.split_first() else {
            return Err(de::Error::custom(FOUND));
        };
        let Seg::Index(i) = first else {
            return Ok(());
        };
        for _ in 0..*i {
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Ok(());
            }
        }
        seq.next_element_seed(Walker {
            path: rest,
            target: self.target,
        })?;
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some((first, rest)) = self.path.split_first() else {
            return Err(de::Error::custom(FOUND));
        };
        let Seg::Key(want) = first else {
            return Ok(());
        };
        let fail_on_key = rest.is_empty() && self.target == Target::Key;
        while let Some(hit) = map.next_key_seed(KeySeed {
            want,
            fail_on_match: fail_on_key,
        })? {
            if hit {
                map.next_value_seed(Walker {
                    path: rest,
                    target: self.target,
                })?;
                return Ok(());
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }
}

/// Deserializes one mapping key; `Ok(true)` when it is the wanted key, or fails on it (so the
/// error carries the key's mark) when `fail_on_match`.
struct KeySeed<'w> {
    want: &'w str,
    fail_on_match: bool,
}

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = bool;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl KeySeed<'_> {
    fn check<E: de::Error>(&self, rendered: &str) -> Result<bool, E> {
        let hit = rendered == self.want;
        if hit && self.fail_on_match {
            Err(E::custom(FOUND))
        } else {
            Ok(hit)
        }
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a mapping key")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<bool, E> {
        self.check(&v.to_string())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<bool, E> {
        self.check(&v.to_string())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<bool, E> {
        self.check(&v.to_string())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<bool, E> {
        self.check(&v.to_string())
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<bool, E> {
        self.check(v)
    }
    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        self.check("null")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(false)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(s: &str) -> Seg {
        Seg::Key(s.to_string())
    }

    const DOC: &str = "\
defaults:
  tz: UTC
jobs:
  - name: a
    schedule: every 5m
  - {name: b, schedule: hourly, deliver: [x, y]}
  -
    name: c
";

    #[test]
    fn finds_block_keys_and_values() {
        let p = [k("defaults"), k("tz")];
        assert_eq!(locate(DOC, &p, Target::Key), Some((2, 3)));
        assert_eq!(locate(DOC, &p, Target::Value), Some((2, 7)));
    }

    #[test]
    fn finds_sequence_items_and_their_keys() {
        let item = [k("jobs"), Seg::Index(0)];
        assert_eq!(locate(DOC, &item, Target::Value), Some((4, 5)));
        let sched = [k("jobs"), Seg::Index(0), k("schedule")];
        assert_eq!(locate(DOC, &sched, Target::Value), Some((5, 15)));
        let name_c = [k("jobs"), Seg::Index(2), k("name")];
        assert_eq!(locate(DOC, &name_c, Target::Key), Some((8, 5)));
    }

    #[test]
    fn finds_nodes_inside_flow_collections() {
        let sched = [k("jobs"), Seg::Index(1), k("schedule")];
        assert_eq!(locate(DOC, &sched, Target::Key), Some((6, 15)));
        assert_eq!(locate(DOC, &sched, Target::Value), Some((6, 25)));
        let y = [k("jobs"), Seg::Index(1), k("deliver"), Seg::Index(1)];
        assert_eq!(locate(DOC, &y, Target::Value), Some((6, 46)));
    }

    #[test]
    fn missing_paths_fall_back_to_the_nearest_ancestor() {
        let p = [k("jobs"), Seg::Index(1), k("nope")];
        assert_eq!(locate(DOC, &p, Target::Key), None);
        assert_eq!(locate_or_parent(DOC, &p, Target::Key), (6, 5));
        let far = [k("jobs"), Seg::Index(9), k("name")];
        assert_eq!(locate_or_parent(DOC, &far, Target::Value), (4, 3));
        assert_eq!(locate_or_parent("{", &far, Target::Value), (1, 1));
    }

    #[test]
    fn renders_dotted_paths() {
        let p = [k("jobs"), Seg::Index(2), k("schedule")];
        assert_eq!(render(&p), "jobs[2].schedule");
        assert_eq!(render(&[]), "(document)");
    }
}

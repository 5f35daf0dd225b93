//! The values the jobs-file checks read: [`Value`], [`Number`] and [`Mapping`], and how a scalar
//! as written becomes one (serde_yaml 0.9's resolution, so the file means what it meant before
//! the parser changed; see the module doc of `yaml`).
//!
//! Owns: the value model and scalar resolution. Must not touch: the parse, positions, limits.

use std::fmt;

use saphyr_parser::ScalarStyle;

/// A YAML number as written: a whole number (kept exact) or a float.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Number {
    PosInt(u64),
    NegInt(i64),
    Float(f64),
}

impl Number {
    pub fn as_f64(&self) -> f64 {
        match *self {
            Number::PosInt(n) => n as f64,
            Number::NegInt(n) => n as f64,
            Number::Float(x) => x,
        }
    }

    /// The value when it is a whole number ≥ 0 written as one (`60.0` is not).
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Number::PosInt(n) => Some(n),
            _ => None,
        }
    }
}

impl fmt::Display for Number {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Number::PosInt(n) => write!(f, "{n}"),
            Number::NegInt(n) => write!(f, "{n}"),
            Number::Float(x) => f.write_str(&float_text(x)),
        }
    }
}

/// A float the way an operator would write it: `1.5`, `604800`, `1e-300`, `.inf`, `.nan`.
pub fn float_text(x: f64) -> String {
    if x.is_nan() {
        ".nan".to_string()
    } else if x.is_infinite() {
        if x > 0.0 { ".inf" } else { "-.inf" }.to_string()
    } else if x == 0.0 || (1e-5..1e16).contains(&x.abs()) {
        format!("{x}")
    } else {
        format!("{x:e}")
    }
}

/// A resolved YAML value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Number(Number),
    String(String),
    Sequence(Vec<Value>),
    Mapping(Mapping),
    /// A node with a tag outside the core schema (`!secret x`): never valid in a jobs file.
    Tagged(Box<Value>),
}

impl Value {
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    pub fn as_mapping(&self) -> Option<&Mapping> {
        match self {
            Value::Mapping(m) => Some(m),
            _ => None,
        }
    }
}

/// Entries in the order written; keys are unique (duplicates are a parse error).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Mapping {
    pub(super) entries: Vec<(Value, Value)>,
}

impl Mapping {
    /// A mapping from entries whose keys are already unique (test data).
    #[cfg(test)]
    pub fn from_entries(entries: Vec<(Value, Value)>) -> Mapping {
        Mapping { entries }
    }

    /// The value under the text key `k`.
    pub fn get(&self, k: &str) -> Option<&Value> {
        self.entries
            .iter()
            .find(|(key, _)| matches!(key, Value::String(s) if s == k))
            .map(|(_, v)| v)
    }

    pub fn keys(&self) -> impl Iterator<Item = &Value> {
        self.entries.iter().map(|(k, _)| k)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Value, &Value)> {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl<'a> IntoIterator for &'a Mapping {
    type Item = (&'a Value, &'a Value);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (Value, Value)>,
        fn(&'a (Value, Value)) -> (&'a Value, &'a Value),
    >;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter().map(|(k, v)| (k, v))
    }
}

/// Mapping keys as text (`1: x` has key "1"); `None` for keys that are lists or mappings.
pub fn key_text(k: &Value) -> Option<String> {
    match k {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Null => Some("null".to_string()),
        _ => None,
    }
}

/// The value of a scalar as written: its style and tag decide whether it is resolved (see the
/// module doc of `yaml`).
pub(super) fn scalar(text: &str, style: ScalarStyle, tag: Option<&saphyr_parser::Tag>) -> Value {
    let resolved = match (style, tag) {
        (_, Some(t)) if t.is_yaml_core_schema() && t.suffix == "str" => {
            Value::String(text.to_string())
        }
        (ScalarStyle::Plain, _) => plain(text),
        (_, Some(t)) if t.is_yaml_core_schema() => plain(text),
        _ => Value::String(text.to_string()),
    };
    match tag {
        Some(t) if !t.is_yaml_core_schema() => Value::Tagged(Box::new(resolved)),
        _ => resolved,
    }
}

/// serde_yaml 0.9's resolution of a plain scalar (see the module doc).
fn plain(v: &str) -> Value {
    if matches!(v, "" | "~" | "null" | "Null" | "NULL") {
        return Value::Null;
    }
    match v {
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        _ => {}
    }
    if let Some(n) = unsigned(v, |s, r| u64::from_str_radix(s, r).ok()) {
        return Value::Number(Number::PosInt(n));
    }
    if let Some(n) = negative(v, |s, r| i64::from_str_radix(s, r).ok()) {
        return Value::Number(Number::NegInt(n));
    }
    // Whole numbers beyond 64 bits: kept as the nearest float (an error wherever a count goes).
    if let Some(n) = unsigned(v, |s, r| u128::from_str_radix(s, r).ok()) {
        return Value::Number(Number::Float(n as f64));
    }
    if let Some(n) = negative(v, |s, r| i128::from_str_radix(s, r).ok()) {
        return Value::Number(Number::Float(n as f64));
    }
    if !leading_zero_digits(v)
        && let Some(x) = float(v)
    {
        return Value::Number(Number::Float(x));
    }
    Value::String(v.to_string())
}

fn leading_zero_digits(s: &str) -> bool {
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    s.len() > 1 && s.starts_with('0') && s[1..].bytes().all(|b| b.is_ascii_digit())
}

fn radix_parts(s: &str) -> (&str, u32) {
    for (prefix, radix) in [("0x", 16), ("0o", 8), ("0b", 2)] {
        if let Some(rest) = s.strip_prefix(prefix) {
            return (rest, radix);
        }
    }
    (s, 10)
}

fn unsigned<T>(v: &str, parse: impl Fn(&str, u32) -> Option<T>) -> Option<T> {
    let s = v.strip_prefix('+').unwrap_or(v);
    let (digits, radix) = radix_parts(s);
    if digits.is_empty() || digits.starts_with(['+', '-']) {
        return None;
    }
    if radix == 10 && leading_zero_digits(v) {
        return None;
    }
    parse(digits, radix)
}

fn negative<T>(v: &str, parse: impl Fn(&str, u32) -> Option<T>) -> Option<T> {
    let s = v.strip_prefix('-')?;
    let (digits, radix) = radix_parts(s);
    if digits.is_empty() || digits.starts_with(['+', '-']) {
        return None;
    }
    if radix == 10 && leading_zero_digits(v) {
        return None;
    }
    parse(&format!("-{digits}"), radix)
}

fn float(v: &str) -> Option<f64> {
    let s = match v.strip_prefix('+') {
        Some(rest) if rest.starts_with(['+', '-']) => return None,
        Some(rest) => rest,
        None => v,
    };
    match s {
        ".inf" | ".Inf" | ".INF" => return Some(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => return Some(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Some(f64::NAN),
        _ => {}
    }
    s.parse::<f64>().ok().filter(|x| x.is_finite())
}

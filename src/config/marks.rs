//! One-pass index of node positions in YAML text, so locating N diagnostics costs one parse
//! instead of N.
//!
//! serde_yaml loads the whole event stream on every deserialization, so the per-path re-walk in
//! `locate` is O(file) per diagnostic: a 150 KB file with 1000 errors took 14 s. This module
//! runs libyaml's event parser (the `unsafe-libyaml` crate serde_yaml itself is built on, so the
//! positions are the very marks serde_yaml reports) once, keeps a tree of start marks, and
//! answers path look-ups from it.
//!
//! Owns: the only `unsafe` in config/: a parser handle freed on drop, and events copied out and
//! deleted immediately. Must not touch: validation rules. When the index cannot be built (the
//! text does not parse, or nests deeper than serde_yaml allows) callers fall back to
//! `locate::locate`.

use std::mem::MaybeUninit;

use super::locate::{Seg, Target};

/// serde_yaml's recursion limit: documents deeper than this fail to parse there anyway.
const MAX_DEPTH: usize = 128;

type Pos = (usize, usize);

/// Nodes live in an arena (`Marks::nodes`) so aliases can point at their anchored node.
#[derive(Debug)]
enum Node {
    Scalar {
        at: Pos,
        text: String,
    },
    Seq {
        at: Pos,
        items: Vec<usize>,
    },
    Map {
        at: Pos,
        entries: Vec<(usize, usize)>,
    },
    /// `*name`: resolved like serde_yaml does, to the anchored node (`None` if unknown).
    Alias {
        at: Pos,
        target: Option<usize>,
    },
}

enum Ev {
    Scalar(String),
    SeqStart,
    SeqEnd,
    MapStart,
    MapEnd,
    Alias,
    Other,
}

/// One event: its kind, 1-based start position, and anchor (or, for an alias, the anchor it
/// names).
type Event = (Ev, Pos, Option<String>);

/// A libyaml parser over borrowed text, freed on drop.
struct Parser<'t> {
    raw: Box<MaybeUninit<unsafe_libyaml::yaml_parser_t>>,
    _text: &'t str,
}

/// Copy a NUL-terminated anchor name out of libyaml.
///
/// # Safety
/// `p` is null or points to a NUL-terminated string that is valid for the call.
unsafe fn anchor(p: *const u8) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: guaranteed by the caller.
    let c = unsafe { std::ffi::CStr::from_ptr(p.cast()) };
    Some(c.to_string_lossy().into_owned())
}

impl<'t> Parser<'t> {
    fn new(text: &'t str) -> Option<Parser<'t>> {
        let mut raw: Box<MaybeUninit<unsafe_libyaml::yaml_parser_t>> =
            Box::new(MaybeUninit::uninit());
        // SAFETY: `raw` is heap-allocated and never moves while the parser lives (libyaml keeps
        // pointers into it); the input outlives the parser (`'t`); `Drop` deletes it.
        unsafe {
            let p = raw.as_mut_ptr();
            if unsafe_libyaml::yaml_parser_initialize(p).fail {
                return None;
            }
            unsafe_libyaml::yaml_parser_set_encoding(p, unsafe_libyaml::YAML_UTF8_ENCODING);
            unsafe_libyaml::yaml_parser_set_input_string(p, text.as_ptr(), text.len() as u64);
        }
        Some(Parser { raw, _text: text })
    }

    /// The next event; `None` on a parse error or after the end of the stream.
    fn next(&mut self) -> Option<Event> {
        let mut event = MaybeUninit::<unsafe_libyaml::yaml_event_t>::uninit();
        // SAFETY: the parser was initialised in `new`; the event is initialised by a successful
        // `yaml_parser_parse`, read (strings copied out), then deleted exactly once.
        unsafe {
            let p = self.raw.as_mut_ptr();
            let error = (&*p).error;
            if error != unsafe_libyaml::YAML_NO_ERROR {
                return None;
            }
            let e = event.as_mut_ptr();
            if unsafe_libyaml::yaml_parser_parse(p, e).fail {
                return None;
            }
            if (*e).type_ == unsafe_libyaml::YAML_NO_EVENT {
                // libyaml's answer after the stream ended: nothing more to read.
                unsafe_libyaml::yaml_event_delete(e);
                return None;
            }
            let mark = (*e).start_mark;
            let at = (mark.line as usize + 1, mark.column as usize + 1);
            let (ev, name) = match (*e).type_ {
                unsafe_libyaml::YAML_SCALAR_EVENT => {
                    let s = (*e).data.scalar;
                    let text = if s.value.is_null() || s.length == 0 {
                        String::new()
                    } else {
                        let bytes = std::slice::from_raw_parts(s.value, s.length as usize);
                        String::from_utf8_lossy(bytes).into_owned()
                    };
                    (Ev::Scalar(text), anchor(s.anchor))
                }
                unsafe_libyaml::YAML_SEQUENCE_START_EVENT => {
                    (Ev::SeqStart, anchor((*e).data.sequence_start.anchor))
                }
                unsafe_libyaml::YAML_SEQUENCE_END_EVENT => (Ev::SeqEnd, None),
                unsafe_libyaml::YAML_MAPPING_START_EVENT => {
                    (Ev::MapStart, anchor((*e).data.mapping_start.anchor))
                }
                unsafe_libyaml::YAML_MAPPING_END_EVENT => (Ev::MapEnd, None),
                unsafe_libyaml::YAML_ALIAS_EVENT => (Ev::Alias, anchor((*e).data.alias.anchor)),
                _ => (Ev::Other, None),
            };
            unsafe_libyaml::yaml_event_delete(e);
            Some((ev, at, name))
        }
    }
}

impl Drop for Parser<'_> {
    fn drop(&mut self) {
        // SAFETY: initialised in `new` (a failed initialisation never builds a `Parser`).
        unsafe { unsafe_libyaml::yaml_parser_delete(self.raw.as_mut_ptr()) }
    }
}

/// Start positions of every node of the first document.
#[derive(Debug)]
pub struct Marks {
    nodes: Vec<Node>,
    root: usize,
}

struct Builder<'t> {
    parser: Parser<'t>,
    nodes: Vec<Node>,
    anchors: std::collections::HashMap<String, usize>,
}

impl Builder<'_> {
    fn push(&mut self, node: Node, name: Option<String>) -> usize {
        let id = self.nodes.len();
        self.nodes.push(node);
        if let Some(n) = name {
            self.anchors.insert(n, id);
        }
        id
    }

    /// The node that starts with the event `first`; returns its arena index.
    fn node(&mut self, first: Event, depth: usize) -> Option<usize> {
        let (ev, at, name) = first;
        match ev {
            Ev::Scalar(text) => Some(self.push(Node::Scalar { at, text }, name)),
            Ev::Alias => {
                let target = name.and_then(|n| self.anchors.get(&n).copied());
                Some(self.push(Node::Alias { at, target }, None))
            }
            Ev::SeqStart => {
                if depth >= MAX_DEPTH {
                    return None;
                }
                let mut items = Vec::new();
                loop {
                    let next = self.parser.next()?;
                    if matches!(next.0, Ev::SeqEnd) {
                        return Some(self.push(Node::Seq { at, items }, name));
                    }
                    items.push(self.node(next, depth + 1)?);
                }
            }
            Ev::MapStart => {
                if depth >= MAX_DEPTH {
                    return None;
                }
                let mut entries = Vec::new();
                loop {
                    let next = self.parser.next()?;
                    if matches!(next.0, Ev::MapEnd) {
                        return Some(self.push(Node::Map { at, entries }, name));
                    }
                    let k = self.node(next, depth + 1)?;
                    let first = self.parser.next()?;
                    let v = self.node(first, depth + 1)?;
                    entries.push((k, v));
                }
            }
            Ev::SeqEnd | Ev::MapEnd | Ev::Other => None,
        }
    }
}

impl Marks {
    /// Parse `text` once; `None` when it does not parse as YAML (or is empty).
    pub fn new(text: &str) -> Option<Marks> {
        let mut b = Builder {
            parser: Parser::new(text)?,
            nodes: Vec::new(),
            anchors: std::collections::HashMap::new(),
        };
        loop {
            let ev = b.parser.next()?;
            if matches!(ev.0, Ev::Other) {
                continue; // stream / document start
            }
            let root = b.node(ev, 0)?;
            return Some(Marks {
                nodes: b.nodes,
                root,
            });
        }
    }

    /// The node itself, or the node an alias stands for.
    fn resolve(&self, id: usize) -> Option<&Node> {
        match self.nodes.get(id)? {
            Node::Alias {
                target: Some(t), ..
            } if *t != id => self.nodes.get(*t),
            n => Some(n),
        }
    }

    fn at(node: &Node) -> Pos {
        match node {
            Node::Scalar { at, .. }
            | Node::Seq { at, .. }
            | Node::Map { at, .. }
            | Node::Alias { at, .. } => *at,
        }
    }

    /// 1-based `(line, column)` of `path`, or `None` if it is not in the text as written.
    pub fn locate(&self, path: &[Seg], target: Target) -> Option<(usize, usize)> {
        let mut node = self.resolve(self.root)?;
        for (i, seg) in path.iter().enumerate() {
            let last = i + 1 == path.len();
            match (seg, node) {
                (Seg::Index(n), Node::Seq { items, .. }) => node = self.resolve(*items.get(*n)?)?,
                (Seg::Key(k), Node::Map { entries, .. }) => {
                    let (key, value) = entries.iter().find(|(key, _)| {
                        matches!(self.resolve(*key), Some(Node::Scalar { text, .. }) if text == k)
                    })?;
                    if last && target == Target::Key {
                        return self.resolve(*key).map(Self::at);
                    }
                    node = self.resolve(*value)?;
                }
                _ => return None,
            }
        }
        Some(Self::at(node))
    }

    /// Like [`Marks::locate`], falling back to the nearest ancestor, then to 1:1.
    pub fn locate_or_parent(&self, path: &[Seg], target: Target) -> (usize, usize) {
        if let Some(pos) = self.locate(path, target) {
            return pos;
        }
        (0..path.len())
            .rev()
            .find_map(|len| self.locate(&path[..len], Target::Value))
            .unwrap_or((1, 1))
    }
}

#[cfg(test)]
mod tests {
    use super::super::locate;
    use super::*;
    use proptest::prelude::*;

    fn paths(v: &serde_yaml::Value, base: Vec<Seg>, out: &mut Vec<Vec<Seg>>) {
        out.push(base.clone());
        match v {
            serde_yaml::Value::Sequence(items) => {
                for (i, item) in items.iter().enumerate() {
                    let mut p = base.clone();
                    p.push(Seg::Index(i));
                    paths(item, p, out);
                }
                let mut p = base.clone();
                p.push(Seg::Index(items.len()));
                out.push(p);
            }
            serde_yaml::Value::Mapping(m) => {
                for (k, item) in m {
                    if let serde_yaml::Value::String(k) = k {
                        let mut p = base.clone();
                        p.push(Seg::Key(k.clone()));
                        paths(item, p, out);
                    }
                }
                let mut p = base.clone();
                p.push(Seg::Key("absent-key".into()));
                out.push(p);
            }
            _ => {}
        }
    }

    /// The serde walker (what serde_yaml itself reports) is the oracle for the index.
    fn agree(text: &str) -> Result<(), TestCaseError> {
        let Ok(v) = serde_yaml::from_str::<serde_yaml::Value>(text) else {
            return Ok(());
        };
        let Some(marks) = Marks::new(text) else {
            if v.is_null() {
                return Ok(()); // empty text: callers use the fallback
            }
            return Err(TestCaseError::fail(format!(
                "no index for valid YAML {text:?}"
            )));
        };
        let mut all = Vec::new();
        paths(&v, Vec::new(), &mut all);
        for p in &all {
            for t in [Target::Key, Target::Value] {
                if t == Target::Key && !matches!(p.last(), Some(Seg::Key(_))) {
                    continue;
                }
                prop_assert_eq!(
                    marks.locate_or_parent(p, t),
                    locate::locate_or_parent(text, p, t),
                    "path {:?} {:?} in {:?}",
                    p,
                    t,
                    text
                );
            }
        }
        Ok(())
    }

    #[test]
    fn agrees_with_serde_on_block_and_flow_styles() {
        let docs = [
            "defaults:\n  tz: UTC\njobs:\n  - name: a\n    schedule: every 5m\n  - {name: b, schedule: hourly, deliver: [x, y]}\n  -\n    name: c\n",
            "a: |\n  text\n  more\nb: >-\n  folded\nc: 'q'\nd: \"dq\"\ne: ~\n",
            "x: &anchor {k: v}\ny: *anchor\nz: [1, [2, [3]], {w: 4}]\n",
            "? complex\n: value\nplain: key\n",
            "- - - deep\n    - x\n  - y\n- z\n",
            "",
            "just a scalar\n",
        ];
        for d in docs {
            agree(d).unwrap();
        }
    }

    #[test]
    fn unparseable_text_has_no_index() {
        assert!(Marks::new("a: [1, 2").is_none());
        assert!(Marks::new(&"[".repeat(200)).is_none());
    }

    fn yaml_value() -> impl Strategy<Value = serde_yaml::Value> {
        let leaf = prop_oneof![
            Just(serde_yaml::Value::Null),
            any::<bool>().prop_map(serde_yaml::Value::Bool),
            any::<i32>().prop_map(|i| serde_yaml::Value::Number(i.into())),
            "\\PC{0,12}".prop_map(serde_yaml::Value::String),
            "[a-z \n]{0,20}".prop_map(serde_yaml::Value::String),
        ];
        leaf.prop_recursive(4, 48, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(serde_yaml::Value::Sequence),
                prop::collection::vec(("[a-z_-]{1,6}", inner), 0..5).prop_map(|kv| {
                    let mut m = serde_yaml::Mapping::new();
                    for (k, v) in kv {
                        m.insert(serde_yaml::Value::String(k), v);
                    }
                    serde_yaml::Value::Mapping(m)
                }),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn agrees_with_serde_on_generated_documents(v in yaml_value()) {
            let text = serde_yaml::to_string(&v).unwrap_or_default();
            agree(&text)?;
        }

        #[test]
        fn never_panics_on_arbitrary_text(text in "\\PC{0,200}") {
            if let Some(m) = Marks::new(&text) {
                let _ = m.locate_or_parent(&[Seg::Key("jobs".into()), Seg::Index(0)], Target::Key);
            }
        }
    }
}

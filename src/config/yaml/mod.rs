//! The one YAML pass of the jobs file: text → a [`Document`] that holds both the value the checks
//! read ([`Value`], with `<<` merges applied and aliases resolved) and the start position of every
//! node as written, so any diagnostic's key path is located without parsing again.
//!
//! Owns: the YAML dependency (`saphyr-parser`, a maintained, safe, YAML 1.2 event parser with
//! spans; nothing outside `config/` names it), scalar resolution, and the structural limits.
//! Must not touch: validation rules (`check`), files.
//!
//! Scalars resolve as serde_yaml 0.9 resolved them, so the jobs file means what it meant before
//! the parser changed: plain `~`/`null`/`Null`/`NULL`/empty are null; `true`/`True`/`TRUE` (and
//! `false` likewise) are booleans; decimal, `0x`, `0o`, `0b` integers (optional sign; a leading
//! zero such as `0123` is text) are whole numbers; other numerals and `.inf`/`.nan` are floats;
//! everything else, and every quoted or block scalar, is text. An integer beyond ±2^64 is a float.
//!
//! Limits (each an `invalid YAML` error at the offending position, found in one linear pass):
//! - nesting deeper than [`MAX_DEPTH`] levels (counting what aliases bring in) — the parse stops at
//!   the first too-deep node, so 160 KB of `[` costs 128 events, not a recursion per byte;
//! - aliases that would expand the document beyond `max(`[`MAX_EXPANDED_NODES`]`, 4 × the nodes
//!   written)` ("billion laughs"); an alias to a node that contains it;
//! - duplicate keys in one mapping (serde_yaml refused them too; the second is located);
//! - more than one document in the file.

use std::collections::HashMap;

use saphyr_parser::{Event, Parser, ScanError, Span};

mod value;

use value::scalar;
pub use value::{Mapping, Number, Value, float_text, key_text};

/// Deepest nesting accepted (serde_yaml's recursion limit, kept so nothing that parsed before
/// fails now).
pub const MAX_DEPTH: usize = 128;

/// Aliases may expand a document to at most this many nodes, or 4× the nodes written when that
/// is larger.
pub const MAX_EXPANDED_NODES: u64 = 1_000_000;

/// Mappings up to this many entries are searched by scanning; larger ones are indexed.
const SCAN_MAX: usize = 16;

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

/// A YAML problem at a 1-based position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct YamlError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl YamlError {
    fn at(at: Pos, message: impl Into<String>) -> YamlError {
        YamlError {
            line: at.0,
            column: at.1,
            message: message.into(),
        }
    }

    /// What an item callback returns to stop a streaming parse (its caller knows why).
    pub fn stop() -> YamlError {
        YamlError::at((1, 1), "stopped")
    }

    fn scan(e: &ScanError) -> YamlError {
        let m = e.marker();
        // The scanner reads a little ahead of the events, so very deep flow nesting can hit its
        // own limit (256 levels) before the builder sees level 129: same problem, same words.
        let message = if e.info().contains("recursion limit exceeded") {
            too_deep()
        } else {
            e.info().to_string()
        };
        YamlError {
            line: m.line().max(1),
            column: m.col() + 1,
            message,
        }
    }
}

type Pos = (usize, usize);

fn too_deep() -> String {
    format!("nesting deeper than {MAX_DEPTH} levels is not accepted")
}

fn pos(span: &Span) -> Pos {
    (span.start.line().max(1), span.start.col() + 1)
}

#[derive(Debug)]
enum Kind {
    Scalar(Value),
    Seq(Vec<usize>),
    Map(Vec<(usize, usize)>),
    /// `*name`: the anchored node.
    Alias(usize),
    /// The top-level `jobs:` list of a streaming parse ([`Document::parse_streaming`]): its
    /// items were handed over one by one and dropped; it materializes as an empty list (or as
    /// the first error its items had).
    Streamed,
}

#[derive(Debug)]
struct Node {
    at: Pos,
    kind: Kind,
    /// Nodes this one stands for once aliases are expanded (saturating).
    size: u64,
    /// Nesting depth below and including this node, aliases expanded.
    depth: usize,
}

/// A parsed jobs file: the value with merges applied, and the positions as written.
#[derive(Debug)]
pub struct Document {
    nodes: Vec<Node>,
    /// For mappings of more than [`SCAN_MAX`] entries: key text → entry, so locating N
    /// diagnostics in a mapping of N keys stays linear.
    big_maps: HashMap<usize, HashMap<String, usize>>,
    /// `None` for an empty document (no node at all).
    root: Option<usize>,
    /// The first error materializing a streamed item (reported where the list materializes, in
    /// the order a whole-document parse reports it).
    item_error: Option<YamlError>,
    /// Whether the top-level `jobs:` list was streamed (its items are not in this document).
    streamed: bool,
    pub value: Value,
}

/// One item of the top-level `jobs:` list, handed over by [`Document::parse_streaming`] as soon
/// as it is parsed: its value (merges applied, aliases resolved) and the positions of its nodes
/// as written, valid only during the call.
pub struct Item<'a> {
    /// Its index in the list.
    pub index: usize,
    /// Its value.
    pub value: Value,
    nodes: &'a [Node],
    node: usize,
}

impl Item<'_> {
    /// 1-based `(line, column)` of a diagnostic path under this item (`jobs[index]…`), falling
    /// back to the nearest ancestor written in the text, as [`Document::locate_or_parent`]
    /// does; `None` for a path elsewhere in the document.
    pub fn locate_or_parent(&self, path: &[Seg], target: Target) -> Option<(usize, usize)> {
        let [Seg::Key(k), Seg::Index(n), rest @ ..] = path else {
            return None;
        };
        if k != "jobs" || *n != self.index {
            return None;
        }
        let tree = Tree {
            nodes: self.nodes,
            big_maps: None,
            item_error: None,
        };
        if let Some(pos) = tree.locate_from(self.node, rest, target) {
            return Some(pos);
        }
        (0..rest.len())
            .rev()
            .find_map(|len| tree.locate_from(self.node, &rest[..len], Target::Value))
    }
}

/// What a streaming parse does with each item (an error stops the parse with it).
pub type OnItem<'c> = &'c mut dyn FnMut(Item<'_>) -> Result<(), YamlError>;

struct Builder<'t, 'c> {
    parser: Parser<'t, saphyr_parser::StrInput<'t>>,
    nodes: Vec<Node>,
    /// saphyr anchor id → node; `None` while the anchored node is still open.
    anchors: HashMap<usize, Option<usize>>,
    /// Where the items of the top-level `jobs:` list go (a streaming parse).
    on_item: Option<OnItem<'c>>,
    /// The streamed list's node, once it began.
    streamed: Option<usize>,
    /// Nodes written, the dropped items' included (the alias-bomb limit counts them).
    built: u64,
    /// The last node that carries an anchor (an item holding one is kept: a later alias may
    /// name it).
    last_anchored: Option<usize>,
    item_error: Option<YamlError>,
    /// A streamed item expands beyond what the document could be allowed: the streaming parse
    /// gives up and the caller parses the whole document (which refuses or accepts it exactly
    /// as before).
    not_streamable: bool,
}

impl<'t> Builder<'t, '_> {
    fn next(&mut self) -> Result<(Event<'t>, Span), YamlError> {
        match self.parser.next_event() {
            Some(Ok(ev)) => Ok(ev),
            Some(Err(e)) => Err(YamlError::scan(&e)),
            None => Err(YamlError::at((1, 1), "unexpected end of the YAML stream")),
        }
    }

    fn push(&mut self, node: Node, anchor: usize) -> usize {
        let id = self.nodes.len();
        self.nodes.push(node);
        self.built += 1;
        if anchor != 0 {
            self.anchors.insert(anchor, Some(id));
            self.last_anchored = Some(id);
        }
        id
    }

    /// Whether the value after the root mapping's key `k` is the `jobs:` list to stream: the
    /// first `jobs` key, written as text, of a streaming parse, whose value is a plain list
    /// without an anchor (an anchored list could be named again later).
    fn streams(&self, k: usize, level: usize, value: &Event<'t>) -> bool {
        level == 1
            && self.on_item.is_some()
            && self.streamed.is_none()
            && matches!(&self.nodes[k].kind, Kind::Scalar(Value::String(s)) if s == "jobs")
            && matches!(value, Event::SequenceStart(0, tag)
                if tag.as_ref().is_none_or(|t| t.is_yaml_core_schema()))
    }

    /// The top-level `jobs:` list, one item at a time: each item is built, materialized, handed
    /// to `on_item` and dropped (unless it holds an anchor).
    fn stream_list(&mut self, span: Span, level: usize) -> Result<usize, YamlError> {
        let at = pos(&span);
        let (mut size, mut depth) = (1u64, 1usize);
        let mut index = 0;
        loop {
            let next = self.next()?;
            if matches!(next.0, Event::SequenceEnd) {
                break;
            }
            let start = self.nodes.len();
            let id = self.node(next, level + 1)?;
            let (item_size, item_depth) = (self.nodes[id].size, self.nodes[id].depth);
            size = size.saturating_add(item_size);
            depth = depth.max(item_depth + 1);
            // The whole document's limit is at least this; an item beyond it may be an alias
            // bomb, which must be refused before it is expanded.
            if item_size > MAX_EXPANDED_NODES.max(self.built.saturating_mul(4)) {
                self.not_streamable = true;
                return Err(YamlError::at(at, "not streamable"));
            }
            let tree = Tree {
                nodes: &self.nodes,
                big_maps: None,
                item_error: None,
            };
            match tree.materialize(id) {
                Ok(value) => {
                    if let Some(on_item) = self.on_item.as_mut() {
                        on_item(Item {
                            index,
                            value,
                            nodes: &self.nodes,
                            node: id,
                        })?;
                    }
                }
                Err(e) => {
                    if self.item_error.is_none() {
                        self.item_error = Some(e);
                    }
                }
            }
            if self.last_anchored.is_none_or(|a| a < start) {
                self.nodes.truncate(start);
            }
            index += 1;
        }
        let node = Node {
            at,
            kind: Kind::Streamed,
            size,
            depth,
        };
        let id = self.push(node, 0);
        self.streamed = Some(id);
        Ok(id)
    }

    fn open(&mut self, anchor: usize) {
        if anchor != 0 {
            self.anchors.insert(anchor, None);
        }
    }

    /// The node that starts with `first` at nesting level `level` (the root is level 1).
    fn node(&mut self, first: (Event<'t>, Span), level: usize) -> Result<usize, YamlError> {
        let (ev, span) = first;
        let at = pos(&span);
        if level > MAX_DEPTH {
            return Err(YamlError::at(at, too_deep()));
        }
        match ev {
            Event::Scalar(text, style, anchor, tag) => {
                let value = scalar(&text, style, tag.as_deref());
                let node = Node {
                    at,
                    kind: Kind::Scalar(value),
                    size: 1,
                    depth: 1,
                };
                Ok(self.push(node, anchor))
            }
            Event::Alias(anchor) => match self.anchors.get(&anchor).copied() {
                Some(Some(target)) => {
                    let (size, depth) = (self.nodes[target].size, self.nodes[target].depth);
                    if level + depth - 1 > MAX_DEPTH {
                        return Err(YamlError::at(
                            at,
                            format!(
                                "nesting deeper than {MAX_DEPTH} levels is not accepted \
                                 (counting what this alias brings in)"
                            ),
                        ));
                    }
                    let node = Node {
                        at,
                        kind: Kind::Alias(target),
                        size,
                        depth,
                    };
                    Ok(self.push(node, 0))
                }
                Some(None) => Err(YamlError::at(
                    at,
                    "an alias refers to a node that contains it (recursive aliases are not \
                     accepted)",
                )),
                None => Err(YamlError::at(at, "unknown anchor")),
            },
            Event::SequenceStart(anchor, tag) => {
                self.open(anchor);
                let mut items = Vec::new();
                let (mut size, mut depth) = (1u64, 1usize);
                loop {
                    let next = self.next()?;
                    if matches!(next.0, Event::SequenceEnd) {
                        break;
                    }
                    let id = self.node(next, level + 1)?;
                    size = size.saturating_add(self.nodes[id].size);
                    depth = depth.max(self.nodes[id].depth + 1);
                    items.push(id);
                }
                let kind = Kind::Seq(items);
                let node = tagged(
                    Node {
                        at,
                        kind,
                        size,
                        depth,
                    },
                    tag.as_deref(),
                );
                Ok(self.push(node, anchor))
            }
            Event::MappingStart(anchor, tag) => {
                self.open(anchor);
                let mut entries = Vec::new();
                let (mut size, mut depth) = (1u64, 1usize);
                loop {
                    let next = self.next()?;
                    if matches!(next.0, Event::MappingEnd) {
                        break;
                    }
                    let k = self.node(next, level + 1)?;
                    let first = self.next()?;
                    let v = if self.streams(k, level, &first.0) {
                        self.stream_list(first.1, level + 1)?
                    } else {
                        self.node(first, level + 1)?
                    };
                    for id in [k, v] {
                        size = size.saturating_add(self.nodes[id].size);
                        depth = depth.max(self.nodes[id].depth + 1);
                    }
                    entries.push((k, v));
                }
                let node = tagged(
                    Node {
                        at,
                        kind: Kind::Map(entries),
                        size,
                        depth,
                    },
                    tag.as_deref(),
                );
                Ok(self.push(node, anchor))
            }
            _ => Err(YamlError::at(at, "unexpected YAML event")),
        }
    }
}

/// Collections keep their tag only as a marker that they are not plain YAML.
fn tagged(node: Node, tag: Option<&saphyr_parser::Tag>) -> Node {
    match tag {
        Some(t) if !t.is_yaml_core_schema() => Node {
            kind: Kind::Scalar(Value::Tagged(Box::new(Value::Null))),
            ..node
        },
        _ => node,
    }
}

/// Scalar keys of one mapping being built, hashed by kind and text; lists, mappings and tagged
/// keys (rare, and always an error in a jobs file) are compared one by one.
#[derive(Default)]
struct KeyIndex {
    scalars: HashMap<(u8, String), usize>,
    complex: Vec<usize>,
}

impl KeyIndex {
    fn hash_key(k: &Value) -> Option<(u8, String)> {
        match k {
            Value::Null => Some((0, String::new())),
            Value::Bool(b) => Some((1, b.to_string())),
            Value::Number(n) => Some((2, n.to_string())),
            Value::String(s) => Some((3, s.clone())),
            _ => None,
        }
    }

    /// The index in `out` of an entry whose key equals `k`.
    fn find(&self, out: &Mapping, k: &Value) -> Option<usize> {
        match Self::hash_key(k) {
            Some(h) => self.scalars.get(&h).copied(),
            None => self
                .complex
                .iter()
                .copied()
                .find(|i| out.entries.get(*i).is_some_and(|(e, _)| e == k)),
        }
    }

    fn add(&mut self, k: &Value, i: usize) {
        match Self::hash_key(k) {
            Some(h) => {
                self.scalars.entry(h).or_insert(i);
            }
            None => self.complex.push(i),
        }
    }
}

impl Document {
    /// Parse `text` (one document); merges are applied to [`Document::value`].
    pub fn parse(text: &str) -> Result<Document, YamlError> {
        Self::build(text, None)
    }

    /// Parse `text`, handing each item of the top-level `jobs:` list to `on_item` as soon as it
    /// is parsed and then dropping it, so a file of a million jobs is never held as one tree.
    /// The document returned holds everything else (its `jobs:` list materializes empty) and
    /// fails exactly where [`Document::parse`] fails, with the same error. When the list cannot
    /// be streamed (an anchored list, one brought in by an alias or a merge) the document is
    /// whole and [`Document::streamed`] is false. `Ok(None)`: an item may be an alias bomb;
    /// the caller parses the whole document instead (items already handed over are void).
    pub fn parse_streaming(text: &str, on_item: OnItem<'_>) -> Result<Option<Document>, YamlError> {
        let mut not_streamable = false;
        match Self::build_flagged(text, Some(on_item), &mut not_streamable) {
            Err(_) if not_streamable => Ok(None),
            r => r.map(Some),
        }
    }

    /// Whether the `jobs:` list was streamed (its items are not in this document).
    pub fn streamed(&self) -> bool {
        self.streamed
    }

    /// Nodes held (tests: a streamed list's items are not).
    #[cfg(test)]
    pub fn nodes_held(&self) -> usize {
        self.nodes.len()
    }

    fn build(text: &str, on_item: Option<OnItem<'_>>) -> Result<Document, YamlError> {
        Self::build_flagged(text, on_item, &mut false)
    }

    fn build_flagged(
        text: &str,
        on_item: Option<OnItem<'_>>,
        not_streamable: &mut bool,
    ) -> Result<Document, YamlError> {
        let mut b = Builder {
            parser: Parser::new_from_str(text),
            nodes: Vec::new(),
            anchors: HashMap::new(),
            on_item,
            streamed: None,
            built: 0,
            last_anchored: None,
            item_error: None,
            not_streamable: false,
        };
        let mut root = None;
        let mut documents = 0;
        let r = (|| {
            loop {
                let (ev, span) = b.next()?;
                match ev {
                    Event::StreamEnd => break,
                    Event::StreamStart | Event::DocumentEnd | Event::Nothing => {}
                    Event::DocumentStart(_) => {
                        documents += 1;
                        if documents > 1 {
                            return Err(YamlError::at(
                                pos(&span),
                                "a jobs file holds one YAML document; found a second one",
                            ));
                        }
                    }
                    _ => root = Some(b.node((ev, span), 1)?),
                }
            }
            Ok(())
        })();
        *not_streamable = b.not_streamable;
        r?;
        let written = b.built;
        let mut doc = Document {
            big_maps: HashMap::new(),
            nodes: b.nodes,
            root,
            item_error: b.item_error,
            streamed: b.streamed.is_some(),
            value: Value::Null,
        };
        if let Some(r) = root {
            let limit = MAX_EXPANDED_NODES.max(written.saturating_mul(4));
            let expanded = doc.nodes[r].size;
            if expanded > limit {
                return Err(YamlError::at(
                    doc.nodes[r].at,
                    format!(
                        "aliases expand this document to more than {limit} nodes ({written} \
                         written); refused as an alias bomb"
                    ),
                ));
            }
            doc.value = doc.tree().materialize(r)?;
        }
        for (id, node) in doc.nodes.iter().enumerate() {
            if let Kind::Map(entries) = &node.kind
                && entries.len() > SCAN_MAX
            {
                let mut index = HashMap::new();
                for (i, (k, _)) in entries.iter().enumerate() {
                    if let Some(t) = doc.tree().scalar_key_text(*k) {
                        index.entry(t).or_insert(i);
                    }
                }
                doc.big_maps.insert(id, index);
            }
        }
        Ok(doc)
    }

    fn tree(&self) -> Tree<'_> {
        Tree {
            nodes: &self.nodes,
            big_maps: Some(&self.big_maps),
            item_error: self.item_error.as_ref(),
        }
    }

    /// 1-based `(line, column)` of `path` as written, or `None` when it is not in the text
    /// (e.g. it came from a `<<` merge, or lies in a streamed item).
    pub fn locate(&self, path: &[Seg], target: Target) -> Option<(usize, usize)> {
        self.tree().locate_from(self.root?, path, target)
    }

    /// Like [`Document::locate`], falling back to the nearest ancestor, then to 1:1.
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

/// The nodes of a document (or of the part of it parsed so far) and how to read them.
struct Tree<'a> {
    nodes: &'a [Node],
    /// See [`Document::big_maps`]; `None`: mappings are scanned.
    big_maps: Option<&'a HashMap<usize, HashMap<String, usize>>>,
    /// What a streamed list materializes as when one of its items failed.
    item_error: Option<&'a YamlError>,
}

impl Tree<'_> {
    /// The value of node `id`, aliases followed, duplicate keys refused, `<<` merges applied.
    fn materialize(&self, id: usize) -> Result<Value, YamlError> {
        let node = &self.nodes[id];
        match &node.kind {
            Kind::Scalar(v) => Ok(v.clone()),
            Kind::Streamed => match self.item_error {
                Some(e) => Err(e.clone()),
                None => Ok(Value::Sequence(Vec::new())),
            },
            Kind::Alias(target) => self.materialize(*target),
            Kind::Seq(items) => items
                .iter()
                .map(|i| self.materialize(*i))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Sequence),
            Kind::Map(entries) => {
                let mut out = Mapping::default();
                // Where each kept key was written, and every scalar key hashed, so a mapping of
                // a million keys is checked for duplicates in linear time.
                let mut written: Vec<Pos> = Vec::new();
                let mut seen = KeyIndex::default();
                let mut merge: Option<(Pos, usize)> = None;
                for (k, v) in entries {
                    let key = self.materialize(*k)?;
                    let at = self.nodes[*k].at;
                    let first = if matches!(&key, Value::String(s) if s == "<<") {
                        match merge {
                            None => {
                                merge = Some((at, *v));
                                continue;
                            }
                            Some((first, _)) => Some(first),
                        }
                    } else {
                        seen.find(&out, &key).map(|i| written[i])
                    };
                    if let Some(first) = first {
                        let name = key_text(&key).map_or_else(
                            || "(a list or mapping)".to_string(),
                            |t| format!("{t:?}"),
                        );
                        return Err(YamlError::at(
                            at,
                            format!(
                                "duplicate key {name} in one mapping (first at line {} column {})",
                                first.0, first.1
                            ),
                        ));
                    }
                    seen.add(&key, out.len());
                    let value = self.materialize(*v)?;
                    out.entries.push((key, value));
                    written.push(at);
                }
                if let Some((_, source)) = merge {
                    self.merge_into(&mut out, &mut seen, source)?;
                }
                Ok(Value::Mapping(out))
            }
        }
    }

    /// `<<: *base` or `<<: [*a, *b]`: entries not already present are added, in order.
    fn merge_into(
        &self,
        out: &mut Mapping,
        seen: &mut KeyIndex,
        source: usize,
    ) -> Result<(), YamlError> {
        let at = self.nodes[source].at;
        let bad = |what: &str| {
            YamlError::at(
                at,
                format!("expected a mapping or list of mappings for merging (`<<`), found {what}"),
            )
        };
        let sources: Vec<Value> = match self.materialize(source)? {
            Value::Mapping(m) => vec![Value::Mapping(m)],
            Value::Sequence(items) => items,
            Value::Tagged(_) => return Err(bad("a tagged value")),
            _ => return Err(bad("a scalar")),
        };
        for s in sources {
            let Value::Mapping(m) = s else {
                return Err(bad(match s {
                    Value::Sequence(_) => "a list inside the merge list",
                    Value::Tagged(_) => "a tagged value",
                    _ => "a scalar inside the merge list",
                }));
            };
            for (k, v) in m.entries {
                if seen.find(out, &k).is_none() {
                    seen.add(&k, out.len());
                    out.entries.push((k, v));
                }
            }
        }
        Ok(())
    }

    /// The node itself, or the node an alias stands for (by arena index).
    fn resolve(&self, id: usize) -> Option<usize> {
        match &self.nodes.get(id)?.kind {
            Kind::Alias(t) => Some(*t),
            _ => Some(id),
        }
    }

    /// The text of a scalar key (as the checks render keys), `None` for other keys.
    fn scalar_key_text(&self, id: usize) -> Option<String> {
        match &self.nodes.get(self.resolve(id)?)?.kind {
            Kind::Scalar(v) => key_text(v),
            _ => None,
        }
    }

    /// 1-based `(line, column)` of `path` below node `from`, or `None` when it is not in the
    /// text.
    fn locate_from(&self, from: usize, path: &[Seg], target: Target) -> Option<(usize, usize)> {
        let mut id = self.resolve(from)?;
        for (i, seg) in path.iter().enumerate() {
            let last = i + 1 == path.len();
            match (seg, &self.nodes.get(id)?.kind) {
                (Seg::Index(n), Kind::Seq(items)) => id = self.resolve(*items.get(*n)?)?,
                (Seg::Key(k), Kind::Map(entries)) => {
                    let (key, value) = match self.big_maps.and_then(|b| b.get(&id)) {
                        Some(index) => entries.get(*index.get(k.as_str())?)?,
                        None => entries.iter().find(|(key, _)| {
                            self.scalar_key_text(*key).as_deref() == Some(k.as_str())
                        })?,
                    };
                    if last && target == Target::Key {
                        return Some(self.nodes.get(self.resolve(*key)?)?.at);
                    }
                    id = self.resolve(*value)?;
                }
                _ => return None,
            }
        }
        Some(self.nodes.get(id)?.at)
    }
}

//! A pretty-printing JSON [`serde::Serializer`] into a reusable byte buffer, written for
//! `jobs --json`: the same bytes as `serde_json`'s `PrettyFormatter` under
//! [`crate::text::InertJson`] (two-space indent, `": "`, `[]`/`{}` when empty, serde_json's string
//! escapes plus `\uXXXX` for every character `text::is_unsafe` names: DEL, C1 controls, bidi
//! overrides, invisible characters, line/paragraph separators), `itoa`/`zmij` numbers, map keys
//! quoted as `serde_json` quotes them), at a fraction of its cost per job.
//!
//! Owns: turning any `Serialize` value into pretty JSON bytes appended to [`Pretty::out`].
//! Must not touch: I/O (the caller writes the buffer), the shape of the values (their `Serialize`
//! impls decide it — a field added to a model type appears here with no change).
//!
//! Why not `serde_json::Serializer::pretty`: it writes every indentation step, quote and
//! separator as its own `io::Write::write_all` call through the generic writer (hundreds per
//! job), and `collect_str` (every timestamp) goes through a `fmt::Write` adapter that escapes
//! each piece. Here the buffer is a `Vec<u8>` (each write an inlined copy), an indentation is
//! one copy from a row of spaces, and a `Display` value is formatted into one reused `String`.
//! The equality with `serde_json` is tested over whole job views and over the corner cases
//! (escapes, non-finite floats, empty containers, enum shapes, non-string map keys).

use std::fmt::{Display, Write as _};

use serde::ser::{self, Serialize};

/// Why a value could not be written as JSON (its `Serialize` impl failed, or a map key is not
/// one JSON can hold).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct EncodeError(String);

impl ser::Error for EncodeError {
    fn custom<T: Display>(msg: T) -> Self {
        EncodeError(msg.to_string())
    }
}

type Result<T> = std::result::Result<T, EncodeError>;

/// The pretty JSON writer: bytes accumulate in [`Pretty::out`]; the caller drains them.
#[derive(Debug, Default)]
pub struct Pretty {
    /// The JSON written so far.
    pub out: Vec<u8>,
    /// Nesting depth of the value being written (indent = 2 spaces per level).
    depth: usize,
    /// Reused for `collect_str` (timestamps, ids).
    scratch: String,
    /// Whether the member whose value is being written is money (`text::is_money_key`): its
    /// numbers are written as `text::json_usd` rounds them, as `text::InertJson` does.
    money: bool,
}

const SPACES: &[u8; 64] = b"                                                                ";
/// `fmt::Write` into the output buffer (one escape at a time).
struct UnsafeHex<'a>(&'a mut Vec<u8>);
impl std::fmt::Write for UnsafeHex<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// The bytes of `w` (eight bytes of a string, in string order: little-endian) that may need a
/// look: the high bit of each byte below 0x20, `"`, `\\`, DEL or outside ASCII is set, and
/// maybe of some bytes after the first such (a borrow past it), never of a byte before it: the
/// lowest set bit marks exactly the first byte that needs a look (`trailing_zeros() / 8`).
pub(super) fn special8(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // A byte of `v` is zero ⇒ its high bit is set in `zero(v)`.
    let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let control = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
    let special = zero(w ^ (ONES * u64::from(b'"')))
        | zero(w ^ (ONES * u64::from(b'\\')))
        | zero(w ^ (ONES * 0x7F));
    control | special | (w & HIGH)
}

/// No byte of `w` (eight bytes of a string) needs a look: none is below 0x20, `"`, `\\`, DEL
/// or outside ASCII. May say `false` for a plain word (a borrow past a matching byte), never
/// `true` for one that is not: the byte-by-byte loop decides then.
#[cfg(test)]
pub(super) fn plain8(w: u64) -> bool {
    special8(w) == 0
}

/// `",\n"` and the spaces of an indent up to [`NL_INDENT_MAX`] levels: an entry's separator
/// and indent in one copy.
const NL_INDENT: [u8; 2 + 2 * NL_INDENT_MAX] = {
    let mut t = [b' '; 2 + 2 * NL_INDENT_MAX];
    t[0] = b',';
    t[1] = b'\n';
    t
};
/// Levels of indent [`NL_INDENT`] holds (deeper ones are written a row of spaces at a time).
const NL_INDENT_MAX: usize = 32;

const HEX: &[u8; 16] = b"0123456789abcdef";

/// `serde_json`'s escape table: 0 = as is, `u` = `\u00XX`, else the letter after `\`.
const ESCAPE: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = b'u';
        i += 1;
    }
    t[0x08] = b'b';
    t[0x09] = b't';
    t[0x0A] = b'n';
    t[0x0C] = b'f';
    t[0x0D] = b'r';
    // DEL: unsafe under the text policy (`text::is_unsafe`), written as `\u007f`.
    t[0x7F] = b'u';
    t[b'"' as usize] = b'"';
    t[b'\\' as usize] = b'\\';
    t
};

impl Pretty {
    /// A writer whose values start at nesting `depth` (1 for the elements of a top-level array).
    pub fn at_depth(depth: usize) -> Pretty {
        Pretty {
            depth,
            ..Default::default()
        }
    }

    /// The nesting depth the next value is written at.
    pub(super) fn depth(&self) -> usize {
        self.depth
    }

    /// Write the next values at nesting `depth` (a reused writer).
    pub(super) fn set_depth(&mut self, depth: usize) {
        self.depth = depth;
    }

    fn indent(&mut self) {
        let mut n = self.depth * 2;
        while n > 0 {
            let k = n.min(SPACES.len());
            self.out.extend_from_slice(&SPACES[..k]);
            n -= k;
        }
    }

    /// `"\n"` before the first entry of a container, `",\n"` before the others, then the indent.
    pub(super) fn entry(&mut self, first: bool) {
        if self.depth <= NL_INDENT_MAX {
            let from = usize::from(first);
            self.out
                .extend_from_slice(&NL_INDENT[from..2 + 2 * self.depth]);
            return;
        }
        if first {
            self.out.push(b'\n');
        } else {
            self.out.extend_from_slice(b",\n");
        }
        self.indent();
    }

    pub(super) fn string(&mut self, s: &str) {
        self.out.push(b'"');
        let bytes = s.as_bytes();
        let mut start = 0;
        let mut i = 0;
        while i < bytes.len() {
            // Eight plain bytes at a time (most strings are names, keys and timestamps).
            while let Some(chunk) = bytes.get(i..i + 8) {
                let mut word = [0u8; 8];
                word.copy_from_slice(chunk);
                let look = special8(u64::from_le_bytes(word));
                if look != 0 {
                    // Straight to the first byte that needs a look.
                    i += (look.trailing_zeros() / 8) as usize;
                    break;
                }
                i += 8;
            }
            let Some(&b) = bytes.get(i) else {
                break;
            };
            i += 1;
            let esc = ESCAPE[b as usize];
            if esc == 0 {
                // A character outside ASCII starts with a byte ≥ 0xC0: the text policy
                // (`text::is_unsafe`: C1 controls, bidi overrides, invisible characters) is
                // checked on it, as `text::InertJson` does for every other `--json` output.
                if b < 0xC0 {
                    continue;
                }
                let at = i - 1;
                let Some(c) = s.get(at..).and_then(|t| t.chars().next()) else {
                    continue;
                };
                if !crate::text::is_unsafe(c) {
                    continue;
                }
                self.out.extend_from_slice(&bytes[start..at]);
                // Every unsafe character is in the Basic Multilingual Plane: one escape each.
                let _ = write!(UnsafeHex(&mut self.out), "\\u{:04x}", c as u32);
                start = at + c.len_utf8();
                continue;
            }
            self.out.extend_from_slice(&bytes[start..i - 1]);
            if esc == b'u' {
                self.out.extend_from_slice(b"\\u00");
                self.out.push(HEX[(b >> 4) as usize]);
                self.out.push(HEX[(b & 0xF) as usize]);
            } else {
                self.out.push(b'\\');
                self.out.push(esc);
            }
            start = i;
        }
        self.out.extend_from_slice(&bytes[start..]);
        self.out.push(b'"');
    }

    fn display(&mut self, v: &(impl Display + ?Sized)) {
        let mut s = std::mem::take(&mut self.scratch);
        s.clear();
        // Writing into a String only fails if the Display impl itself fails; its partial output
        // is written then, as serde_json's adapter would have.
        let _ = write!(s, "{v}");
        self.string(&s);
        self.scratch = s;
    }

    fn int(&mut self, v: impl itoa::Integer) {
        self.out
            .extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
    }

    fn f64(&mut self, v: f64) {
        let v = if self.money {
            crate::text::json_usd(v)
        } else {
            v
        };
        if v.is_finite() {
            self.out
                .extend_from_slice(zmij::Buffer::new().format_finite(v).as_bytes());
        } else {
            self.out.extend_from_slice(b"null");
        }
    }

    fn f32(&mut self, v: f32) {
        if v.is_finite() {
            self.out
                .extend_from_slice(zmij::Buffer::new().format_finite(v).as_bytes());
        } else {
            self.out.extend_from_slice(b"null");
        }
    }

    /// `{` + newline + indent + `"variant": ` : the outer object of a non-unit enum variant.
    fn open_variant(&mut self, variant: &str) {
        self.out.push(b'{');
        self.depth += 1;
        self.entry(true);
        self.string(variant);
        self.out.extend_from_slice(b": ");
    }

    fn close_variant(&mut self) {
        self.depth -= 1;
        self.out.push(b'\n');
        self.indent();
        self.out.push(b'}');
    }

    pub(super) fn open(&mut self, c: u8) {
        self.out.push(c);
        self.depth += 1;
    }

    pub(super) fn close(&mut self, c: u8, had_entries: bool) {
        self.depth -= 1;
        if had_entries && self.depth <= NL_INDENT_MAX {
            self.out
                .extend_from_slice(&NL_INDENT[1..2 + 2 * self.depth]);
        } else if had_entries {
            self.out.push(b'\n');
            self.indent();
        }
        self.out.push(c);
    }
}

/// An array or object being written; `variant` also closes the enum variant's outer object.
pub struct Compound<'a> {
    ser: &'a mut Pretty,
    first: bool,
    variant: bool,
}

impl Compound<'_> {
    fn value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<()> {
        self.ser.entry(self.first);
        self.first = false;
        v.serialize(&mut *self.ser)
    }

    fn field<T: Serialize + ?Sized>(&mut self, key: &str, v: &T) -> Result<()> {
        self.ser.entry(self.first);
        self.first = false;
        self.ser.string(key);
        self.ser.out.extend_from_slice(b": ");
        self.ser.money = crate::text::is_money_key(key);
        let r = v.serialize(&mut *self.ser);
        self.ser.money = false;
        r
    }

    fn close(self, close: u8) -> Result<()> {
        self.ser.close(close, !self.first);
        if self.variant {
            self.ser.close_variant();
        }
        Ok(())
    }
}

impl<'a> ser::Serializer for &'a mut Pretty {
    type Ok = ();
    type Error = EncodeError;
    type SerializeSeq = Compound<'a>;
    type SerializeTuple = Compound<'a>;
    type SerializeTupleStruct = Compound<'a>;
    type SerializeTupleVariant = Compound<'a>;
    type SerializeMap = Compound<'a>;
    type SerializeStruct = Compound<'a>;
    type SerializeStructVariant = Compound<'a>;

    fn serialize_bool(self, v: bool) -> Result<()> {
        self.out
            .extend_from_slice(if v { b"true" } else { b"false" });
        Ok(())
    }
    fn serialize_i8(self, v: i8) -> Result<()> {
        self.int(v);
        Ok(())
    }
    fn serialize_i16(self, v: i16) -> Result<()> {
        self.int(v);
        Ok(())
    }
    fn serialize_i32(self, v: i32) -> Result<()> {
        self.int(v);
        Ok(())
    }
    fn serialize_i64(self, v: i64) -> Result<()> {
        self.int(v);
        Ok(())
    }
    fn serialize_i128(self, v: i128) -> Result<()> {
        self.int(v);
        Ok(())
    }
    fn serialize_u8(self, v: u8) -> Result<()> {
        self.int(v);
        Ok(())
    }
    fn serialize_u16(self, v: u16) -> Result<()> {
        self.int(v);
        Ok(())
    }
    fn serialize_u32(self, v: u32) -> Result<()> {
        self.int(v);
        Ok(())
    }
    fn serialize_u64(self, v: u64) -> Result<()> {
        self.int(v);
        Ok(())
    }
    fn serialize_u128(self, v: u128) -> Result<()> {
        self.int(v);
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> Result<()> {
        self.f32(v);
        Ok(())
    }
    fn serialize_f64(self, v: f64) -> Result<()> {
        self.f64(v);
        Ok(())
    }
    fn serialize_char(self, v: char) -> Result<()> {
        self.string(v.encode_utf8(&mut [0u8; 4]));
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Result<()> {
        self.string(v);
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<()> {
        use ser::SerializeSeq;
        let mut seq = self.serialize_seq(Some(v.len()))?;
        for b in v {
            seq.serialize_element(b)?;
        }
        seq.end()
    }
    fn serialize_none(self) -> Result<()> {
        self.serialize_unit()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<()> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<()> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<()> {
        self.serialize_unit()
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result<()> {
        self.string(variant);
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, v: &T) -> Result<()> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        v: &T,
    ) -> Result<()> {
        self.open_variant(variant);
        v.serialize(&mut *self)?;
        self.close_variant();
        Ok(())
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Compound<'a>> {
        self.open(b'[');
        Ok(Compound {
            ser: self,
            first: true,
            variant: false,
        })
    }
    fn serialize_tuple(self, len: usize) -> Result<Compound<'a>> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<Compound<'a>> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Compound<'a>> {
        self.open_variant(variant);
        self.open(b'[');
        Ok(Compound {
            ser: self,
            first: true,
            variant: true,
        })
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Compound<'a>> {
        self.open(b'{');
        Ok(Compound {
            ser: self,
            first: true,
            variant: false,
        })
    }
    fn serialize_struct(self, _: &'static str, len: usize) -> Result<Compound<'a>> {
        self.serialize_map(Some(len))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Compound<'a>> {
        self.open_variant(variant);
        self.open(b'{');
        Ok(Compound {
            ser: self,
            first: true,
            variant: true,
        })
    }
    fn collect_str<T: Display + ?Sized>(self, v: &T) -> Result<()> {
        self.display(v);
        Ok(())
    }
}

impl ser::SerializeSeq for Compound<'_> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<()> {
        self.value(v)
    }
    fn end(self) -> Result<()> {
        Compound::close(self, b']')
    }
}

impl ser::SerializeTuple for Compound<'_> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<()> {
        self.value(v)
    }
    fn end(self) -> Result<()> {
        Compound::close(self, b']')
    }
}

impl ser::SerializeTupleStruct for Compound<'_> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<()> {
        self.value(v)
    }
    fn end(self) -> Result<()> {
        Compound::close(self, b']')
    }
}

impl ser::SerializeTupleVariant for Compound<'_> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<()> {
        self.value(v)
    }
    fn end(self) -> Result<()> {
        Compound::close(self, b']')
    }
}

impl ser::SerializeMap for Compound<'_> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<()> {
        self.ser.entry(self.first);
        self.first = false;
        let from = self.ser.out.len();
        key.serialize(MapKey(&mut *self.ser))?;
        // The key as written, quotes off: a money key is plain ASCII, never escaped.
        let written = &self.ser.out[from..];
        let plain = written
            .get(1..written.len().saturating_sub(1))
            .unwrap_or_default();
        self.ser.money = std::str::from_utf8(plain).is_ok_and(crate::text::is_money_key);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<()> {
        self.ser.out.extend_from_slice(b": ");
        let r = v.serialize(&mut *self.ser);
        self.ser.money = false;
        r
    }
    fn end(self) -> Result<()> {
        Compound::close(self, b'}')
    }
}

impl ser::SerializeStruct for Compound<'_> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, v: &T) -> Result<()> {
        self.field(key, v)
    }
    fn end(self) -> Result<()> {
        Compound::close(self, b'}')
    }
}

impl ser::SerializeStructVariant for Compound<'_> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, v: &T) -> Result<()> {
        self.field(key, v)
    }
    fn end(self) -> Result<()> {
        Compound::close(self, b'}')
    }
}

/// A map key: JSON keys are strings, so numbers and booleans are quoted (as `serde_json` does)
/// and anything else is an error.
struct MapKey<'a>(&'a mut Pretty);

fn key_must_be_a_string() -> EncodeError {
    EncodeError("key must be a string".into())
}

impl MapKey<'_> {
    fn quoted(self, f: impl FnOnce(&mut Pretty)) -> Result<()> {
        self.0.out.push(b'"');
        f(self.0);
        self.0.out.push(b'"');
        Ok(())
    }
}

impl ser::Serializer for MapKey<'_> {
    type Ok = ();
    type Error = EncodeError;
    type SerializeSeq = ser::Impossible<(), EncodeError>;
    type SerializeTuple = ser::Impossible<(), EncodeError>;
    type SerializeTupleStruct = ser::Impossible<(), EncodeError>;
    type SerializeTupleVariant = ser::Impossible<(), EncodeError>;
    type SerializeMap = ser::Impossible<(), EncodeError>;
    type SerializeStruct = ser::Impossible<(), EncodeError>;
    type SerializeStructVariant = ser::Impossible<(), EncodeError>;

    fn serialize_bool(self, v: bool) -> Result<()> {
        self.quoted(|p| p.out.extend_from_slice(if v { b"true" } else { b"false" }))
    }
    fn serialize_i8(self, v: i8) -> Result<()> {
        self.quoted(|p| p.int(v))
    }
    fn serialize_i16(self, v: i16) -> Result<()> {
        self.quoted(|p| p.int(v))
    }
    fn serialize_i32(self, v: i32) -> Result<()> {
        self.quoted(|p| p.int(v))
    }
    fn serialize_i64(self, v: i64) -> Result<()> {
        self.quoted(|p| p.int(v))
    }
    fn serialize_i128(self, v: i128) -> Result<()> {
        self.quoted(|p| p.int(v))
    }
    fn serialize_u8(self, v: u8) -> Result<()> {
        self.quoted(|p| p.int(v))
    }
    fn serialize_u16(self, v: u16) -> Result<()> {
        self.quoted(|p| p.int(v))
    }
    fn serialize_u32(self, v: u32) -> Result<()> {
        self.quoted(|p| p.int(v))
    }
    fn serialize_u64(self, v: u64) -> Result<()> {
        self.quoted(|p| p.int(v))
    }
    fn serialize_u128(self, v: u128) -> Result<()> {
        self.quoted(|p| p.int(v))
    }
    fn serialize_f32(self, v: f32) -> Result<()> {
        if !v.is_finite() {
            return Err(EncodeError("float key must be finite, got null".into()));
        }
        self.quoted(|p| p.f32(v))
    }
    fn serialize_f64(self, v: f64) -> Result<()> {
        if !v.is_finite() {
            return Err(EncodeError("float key must be finite, got null".into()));
        }
        self.quoted(|p| p.f64(v))
    }
    fn serialize_char(self, v: char) -> Result<()> {
        self.0.string(v.encode_utf8(&mut [0u8; 4]));
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Result<()> {
        self.0.string(v);
        Ok(())
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<()> {
        Err(key_must_be_a_string())
    }
    fn serialize_none(self) -> Result<()> {
        Err(key_must_be_a_string())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<()> {
        Err(key_must_be_a_string())
    }
    fn serialize_unit(self) -> Result<()> {
        Err(key_must_be_a_string())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<()> {
        Err(key_must_be_a_string())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result<()> {
        self.0.string(variant);
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, v: &T) -> Result<()> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<()> {
        Err(key_must_be_a_string())
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq> {
        Err(key_must_be_a_string())
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple> {
        Err(key_must_be_a_string())
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct> {
        Err(key_must_be_a_string())
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant> {
        Err(key_must_be_a_string())
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap> {
        Err(key_must_be_a_string())
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct> {
        Err(key_must_be_a_string())
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant> {
        Err(key_must_be_a_string())
    }
    fn collect_str<T: Display + ?Sized>(self, v: &T) -> Result<()> {
        self.0.display(v);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;
    use std::collections::BTreeMap;

    fn ours<T: Serialize>(v: &T) -> String {
        let mut p = Pretty::default();
        v.serialize(&mut p).unwrap();
        String::from_utf8(p.out).unwrap()
    }

    /// The reference: serde_json's pretty layout under the text policy's escapes
    /// ([`crate::text::to_json_pretty`], what every other `--json` output prints).
    fn same<T: Serialize>(v: &T) {
        assert_eq!(ours(v), crate::text::to_json_pretty(v).unwrap());
    }

    #[derive(Serialize)]
    enum E {
        Unit,
        New(u8),
        Tuple(i32, String),
        Struct { a: Vec<u8>, b: Option<f64> },
        EmptyStruct {},
        EmptyTuple(),
    }

    #[derive(Serialize)]
    #[serde(tag = "kind", rename_all = "snake_case")]
    enum Tagged {
        One { x: u32 },
        Two,
    }

    #[derive(Serialize)]
    struct Unit;

    #[derive(Serialize)]
    struct Inner {
        #[serde(skip_serializing_if = "Option::is_none")]
        skipped: Option<u8>,
    }

    #[derive(Serialize)]
    struct Wrap(String);

    #[derive(Serialize)]
    struct All {
        s: &'static str,
        n: i64,
        u: u128,
        f: f64,
        g: f32,
        nan: f64,
        inf: f32,
        t: bool,
        c: char,
        unit: (),
        u_struct: Unit,
        wrap: Wrap,
        none: Option<u8>,
        empty_vec: Vec<u8>,
        empty_map: BTreeMap<String, u8>,
        empty_struct: Inner,
        nested: Vec<Vec<u8>>,
        nested_empty: Vec<Vec<u8>>,
        enums: Vec<E>,
        tagged: Vec<Tagged>,
        int_keys: BTreeMap<i32, bool>,
        bool_keys: BTreeMap<bool, u8>,
        tuple: (u8, &'static str),
        bytes: serde_bytes_like::Bytes,
        at: chrono::DateTime<chrono::Utc>,
        id: uuid::Uuid,
    }

    /// `serialize_bytes` without the serde_bytes crate.
    mod serde_bytes_like {
        pub struct Bytes(pub Vec<u8>);
        impl serde::Serialize for Bytes {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(&self.0)
            }
        }
    }

    #[test]
    fn every_shape_is_serde_json_pretty_byte_for_byte() {
        let mut int_keys = BTreeMap::new();
        int_keys.insert(-3, true);
        int_keys.insert(7, false);
        let mut bool_keys = BTreeMap::new();
        bool_keys.insert(true, 1);
        let all = All {
            s: "quote \" backslash \\ nl \n tab \t cr \r bs \u{8} ff \u{c} nul \0 esc \u{1b} del \u{7f} é ✓ / </script> c1 \u{85} bidi \u{202e}\u{2066} zw \u{200b}\u{feff} shy \u{ad} ls \u{2028} 😀",
            n: i64::MIN,
            u: u128::MAX,
            f: 0.1 + 0.2,
            g: 1.1,
            nan: f64::NAN,
            inf: f32::INFINITY,
            t: true,
            c: '"',
            unit: (),
            u_struct: Unit,
            wrap: Wrap("w".into()),
            none: None,
            empty_vec: vec![],
            empty_map: BTreeMap::new(),
            empty_struct: Inner { skipped: None },
            nested: vec![vec![1, 2], vec![]],
            nested_empty: vec![vec![]],
            enums: vec![
                E::Unit,
                E::New(3),
                E::Tuple(-1, "x".into()),
                E::Struct {
                    a: vec![],
                    b: Some(1e300),
                },
                E::EmptyStruct {},
                E::EmptyTuple(),
            ],
            tagged: vec![Tagged::One { x: 1 }, Tagged::Two],
            int_keys,
            bool_keys,
            tuple: (1, "a"),
            bytes: serde_bytes_like::Bytes(vec![0, 255]),
            at: chrono::DateTime::from_timestamp(1_700_000_000, 123_456_789).unwrap(),
            id: uuid::Uuid::from_u128(0xfeed),
        };
        same(&all);
        same(&vec![E::Unit]);
        same(&Vec::<u8>::new());
        same(&E::New(1));
        same(&3.0f64);
        same(&-0.0f64);
        same(&f64::MIN_POSITIVE);
        same(&(1u64 << 60));
    }

    /// The eight-bytes-at-a-time scan: every character that needs an escape or a look, at
    /// every position of strings around one and two words long, is written as serde_json
    /// under the text policy writes it; and `plain8` never passes a word that needs a look.
    #[test]
    fn a_special_character_is_escaped_at_every_position_of_a_word() {
        let specials = [
            '"', '\\', '\n', '\0', '\u{1f}', '\u{7f}', 'é', '\u{85}', '\u{202e}', '\u{200b}', '😀',
            ' ', '~',
        ];
        for c in specials {
            for len in 0..20 {
                for at in 0..=len {
                    let mut v: String = "abcdefghijklmnopqrst"[..len].to_string();
                    v.insert(at, c);
                    same(&v);
                    v.push(c);
                    same(&v);
                }
            }
        }
        for b in 0u8..=255 {
            for at in 0..8 {
                let mut w = *b"abcdefgh";
                w[at] = b;
                let needs_look = b < 0x20 || b == b'"' || b == b'\\' || b == 0x7F || b >= 0x80;
                if needs_look {
                    assert!(!plain8(u64::from_le_bytes(w)), "byte {b:#x} at {at}");
                }
                // The first byte that needs a look is found exactly, whatever follows it.
                for after in [b'a', b'"', 0x00, 0x1F, 0xFF, b] {
                    let mut w2 = w;
                    for x in w2.iter_mut().skip(at + 1) {
                        *x = after;
                    }
                    let first = w2
                        .iter()
                        .position(|&x| x < 0x20 || x == b'"' || x == b'\\' || x >= 0x7F);
                    let look = special8(u64::from_le_bytes(w2));
                    match first {
                        None => assert_eq!(look, 0, "{w2:?}"),
                        Some(p) => assert_eq!(look.trailing_zeros() / 8, p as u32, "{w2:?}"),
                    }
                }
            }
        }
        assert!(plain8(u64::from_le_bytes(*b"2026-11-")));
    }

    #[test]
    fn a_key_json_cannot_hold_is_an_error() {
        let mut m = BTreeMap::new();
        m.insert(vec![1u8], 1u8);
        let mut p = Pretty::default();
        let e = m.serialize(&mut p).unwrap_err();
        assert!(e.to_string().contains("key must be a string"), "{e}");
        assert!(
            serde_json::to_string_pretty(&m).is_err(),
            "serde_json agrees"
        );
    }

    #[test]
    fn a_deep_value_indents_past_the_row_of_spaces() {
        let mut v = serde_json::json!(1);
        for _ in 0..40 {
            v = serde_json::json!({ "k": [v] });
        }
        same(&v);
    }
}

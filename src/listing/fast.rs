//! The view of a job printed straight from its stored JSON, so a million jobs list fast: the file
//! store
//! keeps each record as a JSON line, so `jobs --json` transcodes the record's `def` and `rt`
//! members into the pretty layout ([`super::pretty::Pretty`]'s own indentation and string
//! escapes) instead of parsing a [`JobRecord`] and serialising it again, and computes the
//! view's derived fields (state, next fire, period spend) from the few members they read.
//!
//! Owns: the transcoder and the check that makes it safe. Must not touch: the store (it gets
//! the record's JSON text from [`crate::store::Store::jobs_page_json`]) or the view's shape
//! (that is [`super::JobView`]; this module prints the same bytes or declines).
//!
//! # Why the bytes are the same
//! The full path prints `serialise(parse(line))`; this one prints the line's own members.
//! They agree when the line is what the current model serialises. That depends on the line's
//! *shape* (its keys in order, nesting, and the kind of every value), not on most of its
//! values: a line written by an older release with a member missing (a defaulted field), an
//! extra one, or another order has another shape. So every record's shape is collected while
//! it is transcoded, and the first record of each shape is also printed the full way and
//! compared byte for byte: equal, the shape is trusted from then on; different, every record of
//! that shape takes the full path. The values that could still differ with the same shape are
//! guarded in the shape itself: `true`/`false`, zero/non-zero numbers and integers/decimals are
//! different kinds, strings of at most [`SHORT`] bytes are part of the shape (serde skips a
//! field by its value only for `false`, `0.0` and `overlap: skip`), and a number serde_json
//! might not read back exactly (more than 15 significant digits, a power of ten past 22: its
//! float parser is exact only below that) sends its record down the full path. Strings are
//! decoded and escaped again by the listing's own writer, so stored escapes do not matter.
//!
//! Decisions: the values of typed strings (timestamps, ids, enum names) are trusted as the
//! store wrote them (checksummed); a line edited by hand with a valid checksum but a value the
//! model would refuse is printed as stored here, where the full parse would refuse it —
//! `cronsole check --store` parses every line. At most [`MAX_SHAPES`] shapes are remembered;
//! a record of a shape not remembered takes the full path.

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;

use chrono::{DateTime, FixedOffset, Utc};
use serde::{Deserialize, Serialize};

use super::pretty::{self, Pretty};
use crate::model::{JobCounters, JobRecord};

/// Strings up to this many bytes are part of a record's shape (see the module doc).
const SHORT: usize = 4;
/// Shapes remembered per listing.
const MAX_SHAPES: usize = 4096;

/// What a listing's worker knows about the shapes it has seen (one per worker thread: each
/// checks the first record of every shape it meets itself).
#[derive(Default)]
pub(super) struct Shapes {
    /// Shape → whether its records print the same bytes both ways.
    verdict: HashMap<Vec<u8>, bool>,
    /// The shape of the record being printed.
    shape: Vec<u8>,
    /// The last shape found trusted (never empty once set: a shape has at least `{}{}`).
    last_fast: Vec<u8>,
    /// The last period spend computed: booked key, period and total amounts, listing's key,
    /// spend.
    last_spend: Option<(String, f64, f64, String, f64)>,
    /// The `def` and `rt` members transcoded, before the view's head is written.
    body: Pretty,
    /// The full path's bytes, for the first record of a shape.
    check: Pretty,
    /// Records printed from their JSON, and through the full path (for tests and benches).
    pub(super) fast: u64,
    pub(super) full: u64,
    /// Shapes whose first record printed different bytes the two ways.
    pub(super) refused: u64,
}

/// Why a record could not be printed from its JSON: take the full path.
struct Decline;

/// The top-level members of `def` or `rt` the view reads: where each one's value is in the
/// record's JSON (found in one pass while transcoding, by `slot`).
struct Members<const N: usize> {
    slot: fn(&[u8]) -> Option<usize>,
    vals: [Option<Range<usize>>; N],
}

impl<const N: usize> Members<N> {
    fn new(slot: fn(&[u8]) -> Option<usize>) -> Self {
        Members {
            slot,
            vals: std::array::from_fn(|_| None),
        }
    }

    /// The value of member `i` in `json`.
    fn get<'j>(&self, json: &'j str, i: usize) -> Result<&'j str, Decline> {
        self.vals[i]
            .clone()
            .and_then(|r| json.get(r))
            .ok_or(Decline)
    }
}

/// Where one member's value goes ([`Members`] of either object, behind one type).
trait Slots {
    fn record(&mut self, key: &[u8], val: Range<usize>);
}

impl<const N: usize> Slots for Members<N> {
    fn record(&mut self, key: &[u8], val: Range<usize>) {
        if let Some(i) = (self.slot)(key) {
            self.vals[i] = Some(val);
        }
    }
}

// `def`'s members the view reads.
const NAME: usize = 0;
const SCHEDULE_TEXT: usize = 1;
const ENABLED: usize = 2;
const JITTER: usize = 3;
const MAX_COST: usize = 4;
const RUN_IMMEDIATELY: usize = 5;
fn def_slot(key: &[u8]) -> Option<usize> {
    match key {
        b"name" => Some(NAME),
        b"schedule_text" => Some(SCHEDULE_TEXT),
        b"enabled" => Some(ENABLED),
        b"jitter_seconds" => Some(JITTER),
        b"max_cost_usd" => Some(MAX_COST),
        b"run_immediately" => Some(RUN_IMMEDIATELY),
        _ => None,
    }
}

// `rt`'s members the view reads (the first seven are copied in this order).
const RT_COPIED: [&str; 7] = [
    "last_run_at",
    "last_status",
    "runs",
    "paused",
    "retired",
    "retired_reason",
    "lease",
];
/// The view's `runs`, written from the counters' executions.
const RT_RUNS: usize = 2;
const NEXT_SLOT: usize = 7;
const HOLD_UNTIL: usize = 8;
const COUNTERS: usize = 9;
const TRIGGER_REQUESTED: usize = 10;
const QUEUE: usize = 11;
const LAST_SLOT: usize = 12;
fn rt_slot(key: &[u8]) -> Option<usize> {
    match key {
        b"last_run_at" => Some(0),
        b"last_status" => Some(1),
        b"runs" => Some(2),
        b"paused" => Some(3),
        b"retired" => Some(4),
        b"retired_reason" => Some(5),
        b"lease" => Some(6),
        b"next_slot" => Some(NEXT_SLOT),
        b"hold_until" => Some(HOLD_UNTIL),
        b"counters" => Some(COUNTERS),
        b"trigger_requested_at" => Some(TRIGGER_REQUESTED),
        b"queue" => Some(QUEUE),
        b"last_slot" => Some(LAST_SLOT),
        _ => None,
    }
}

impl Shapes {
    /// Append `name`'s view (stored JSON `json`) to `enc` at its depth, from the JSON when its
    /// shape is known to print the same bytes; else the full path (`full`). `Ok(false)`: the
    /// full path's parse failed or named another job; nothing was written.
    pub(super) fn write(
        &mut self,
        enc: &mut Pretty,
        json: &str,
        name: &str,
        period_key: &str,
        now: DateTime<Utc>,
    ) -> Result<bool, pretty::EncodeError> {
        let start = enc.out.len();
        self.shape.clear();
        let fast = self.transcode(enc, json, name, period_key, now).is_ok();
        if fast {
            // Neighbours mostly share a shape: one comparison instead of hashing it.
            if self.shape == self.last_fast {
                self.fast += 1;
                return Ok(true);
            }
            match self.verdict.get(&self.shape) {
                Some(true) => {
                    std::mem::swap(&mut self.shape, &mut self.last_fast);
                    self.fast += 1;
                    return Ok(true);
                }
                Some(false) => enc.out.truncate(start),
                None => {
                    // The first record of this shape: print it the full way too and compare.
                    self.check.out.clear();
                    self.check.set_depth(enc.depth());
                    if !full(&mut self.check, json, name, period_key, now)? {
                        enc.out.truncate(start);
                        return Ok(false);
                    }
                    let same = self.check.out == enc.out[start..];
                    if self.verdict.len() < MAX_SHAPES {
                        self.verdict.insert(self.shape.clone(), same);
                    }
                    if same {
                        self.fast += 1;
                        return Ok(true);
                    }
                    self.refused += 1;
                    enc.out.truncate(start);
                    enc.out.extend_from_slice(&self.check.out);
                    self.full += 1;
                    return Ok(true);
                }
            }
        } else {
            enc.out.truncate(start);
        }
        self.full += 1;
        full(enc, json, name, period_key, now)
    }

    /// The view from the JSON: `def` and `rt` transcoded into `body`, then the head written
    /// to `enc` from their members, then the body.
    fn transcode(
        &mut self,
        enc: &mut Pretty,
        json: &str,
        name: &str,
        period_key: &str,
        now: DateTime<Utc>,
    ) -> Result<(), Decline> {
        let depth = enc.depth() + 1;
        self.body.out.clear();
        self.body.set_depth(depth);
        let mut def = Members::<6>::new(def_slot);
        let mut rt = Members::<13>::new(rt_slot);
        let mut tx = Tx::new(json, &mut self.shape, String::new());
        // A run awaiting approval (rare, and its view's fields come from inside a lease) takes
        // the full path; the key never occurs inside a stored string (its quotes are escaped).
        if memchr::memmem::find(json.as_bytes(), b"\"awaiting\":").is_some() {
            return Err(Decline);
        }
        tx.expect(b"{\"def\":")?;
        tx.object(&mut self.body, Some(&mut def))?;
        let split = self.body.out.len();
        tx.expect(b",\"rt\":")?;
        tx.object(&mut self.body, Some(&mut rt))?;
        tx.expect(b"}")?;
        if tx.i != json.len() {
            return Err(Decline);
        }
        // The members the view's derived fields read.
        let job_name = plain_str(def.get(json, NAME)?)?;
        if job_name != name {
            return Err(Decline);
        }
        let retired = rt.get(json, 4)? == "true";
        let lease = rt.get(json, 6)?;
        let leased = lease != "null";
        let paused = rt.get(json, 3)? == "true";
        let enabled = def.get(json, ENABLED)? == "true";
        let held = match rt.get(json, HOLD_UNTIL)? {
            "null" => false,
            t => timestamp(t)? > now,
        };
        // `queue` is left out when empty.
        let queued = rt.get(json, TRIGGER_REQUESTED)? != "null"
            || rt.get(json, QUEUE).is_ok_and(|q| q != "[]");
        // `listing::state`, in its order.
        let state = if leased && cancel_requested(lease)? {
            "cancelling"
        } else if !retired && !leased && queued {
            "queued"
        } else if retired {
            "retired"
        } else if leased {
            "running"
        } else if paused || !enabled {
            "paused"
        } else if held {
            "held"
        } else {
            "idle"
        };
        let next_slot = rt.get(json, NEXT_SLOT)?;
        let jitter = match def.get(json, JITTER) {
            Ok(v) => v.parse::<f64>().map_err(|_| Decline)?,
            Err(Decline) => 0.0,
        };
        // A jittered `run_immediately` run that never ran fires on its slot
        // (`JobRecord::fire_at`): the full path says so.
        if jitter > 0.0
            && rt.get(json, LAST_SLOT)? == "null"
            && def.get(json, RUN_IMMEDIATELY)? == "true"
        {
            return Err(Decline);
        }
        // No jitter: the fire instant is the slot (`jitter::offset`), its text the stored one.
        let next_fire_at = match next_slot {
            "null" => None,
            _ if jitter.is_nan() || jitter <= 0.0 => None,
            t => Some(crate::schedule::jitter::fire_at(
                &job_name,
                timestamp(t)?,
                jitter,
            )),
        };
        let counters: CounterBits =
            serde_json::from_str(rt.get(json, COUNTERS)?).map_err(|_| Decline)?;
        let executions = crate::model::executions_of(&counters.by_status);
        let held = counters.held_in(period_key);
        let spend = spend_of(&mut self.last_spend, counters, period_key);

        // The view, in `JobView`'s field order.
        let mut no_shape = Vec::new();
        let mut head = Tx::new(json, &mut no_shape, std::mem::take(&mut tx.scratch));
        enc.open(b'{');
        field(enc, "name", true);
        head.value_of(enc, def.get(json, NAME)?)?;
        field(enc, "state", false);
        enc.string(state);
        field(enc, "awaiting_approval", false);
        None::<()>.serialize(&mut *enc).map_err(|_| Decline)?;
        field(enc, "schedule", false);
        head.value_of(enc, def.get(json, SCHEDULE_TEXT)?)?;
        field(enc, "next_slot", false);
        head.value_of(enc, next_slot)?;
        field(enc, "next_fire_at", false);
        // Nothing fires while paused, disabled or retired (the table's `n/a`).
        match next_fire_at {
            _ if retired || paused || !enabled => None::<DateTime<Utc>>
                .serialize(&mut *enc)
                .map_err(|_| Decline)?,
            Some(t) => t.serialize(&mut *enc).map_err(|_| Decline)?,
            None => head.value_of(enc, next_slot)?,
        }
        for (i, k) in RT_COPIED.iter().enumerate() {
            field(enc, k, false);
            if i == RT_RUNS {
                // The view's `runs` is every execution, from the counters (not `rt.runs`).
                executions.serialize(&mut *enc).map_err(|_| Decline)?;
            } else {
                head.value_of(enc, rt.get(json, i)?)?;
            }
        }
        money_field(enc, "period_cost_usd", spend)?;
        money_field(enc, "in_flight_usd", held)?;
        field(enc, "max_cost_usd", false);
        head.money_of(enc, def.get(json, MAX_COST)?)?;
        field(enc, "definition", false);
        enc.out.extend_from_slice(&self.body.out[..split]);
        field(enc, "runtime", false);
        enc.out.extend_from_slice(&self.body.out[split..]);
        enc.close(b'}', true);
        Ok(())
    }
}

/// A member's key in the view: its separator, indent, quoted key and `": "`.
fn field(enc: &mut Pretty, key: &str, first: bool) {
    enc.entry(first);
    enc.string(key);
    enc.out.extend_from_slice(b": ");
}

/// A money member computed for the view, written as every `--json` output writes money
/// (`text::json_usd`).
fn money_field(enc: &mut Pretty, key: &str, usd: f64) -> Result<(), Decline> {
    field(enc, key, false);
    crate::text::json_usd(usd)
        .serialize(&mut *enc)
        .map_err(|_| Decline)
}

/// Whether a lease (its JSON object) has a cancel pending: `cancel_requested_at` set. Read
/// with serde (a lease is on running jobs only, a few of a listing).
fn cancel_requested(lease: &str) -> Result<bool, Decline> {
    #[derive(Deserialize)]
    struct Cancel {
        cancel_requested_at: Option<serde::de::IgnoredAny>,
    }
    let c: Cancel = serde_json::from_str(lease).map_err(|_| Decline)?;
    Ok(c.cancel_requested_at.is_some())
}

/// The spend `period_key` shows for `counters`, through a one-entry cache: a pure function of
/// these four, and neighbours mostly book under the same key with the same amounts, while a key
/// of another period kind costs a date parse and a few formats.
fn spend_of(
    last: &mut Option<(String, f64, f64, String, f64)>,
    counters: CounterBits<'_>,
    period_key: &str,
) -> f64 {
    match &*last {
        Some((booked, p, t, k, v))
            if *booked == counters.period_key
                && p.to_bits() == counters.period_cost_usd.to_bits()
                && t.to_bits() == counters.total_cost_usd.to_bits()
                && k == period_key =>
        {
            *v
        }
        _ => {
            let c = JobCounters {
                period_key: counters.period_key.into_owned(),
                period_cost_usd: counters.period_cost_usd,
                total_cost_usd: counters.total_cost_usd,
                ..JobCounters::default()
            };
            let v = crate::store::rules::period::counter_spend(&c, period_key);
            *last = Some((
                c.period_key,
                c.period_cost_usd,
                c.total_cost_usd,
                period_key.to_string(),
                v,
            ));
            v
        }
    }
}

/// The counters' members the view reads: the period spend's
/// ([`crate::store::rules::period::counter_spend`]) and the rows per status (its `runs`).
#[derive(Deserialize)]
struct CounterBits<'a> {
    #[serde(borrow)]
    period_key: Cow<'a, str>,
    period_cost_usd: f64,
    total_cost_usd: f64,
    #[serde(default)]
    by_status: std::collections::BTreeMap<crate::model::Status, u64>,
    /// The reservations' period and amount: the view's `in_flight_usd`.
    #[serde(default, borrow)]
    reservations: Vec<ReservationBits<'a>>,
}

impl CounterBits<'_> {
    /// The view's `in_flight_usd`: what the reservations hold in period `key`.
    fn held_in(&self, key: &str) -> f64 {
        crate::store::rules::period::held_in(
            self.reservations
                .iter()
                .map(|r| (r.period_key.as_ref(), r.usd)),
            key,
        )
    }
}

/// A reservation's members the view reads.
#[derive(Deserialize)]
struct ReservationBits<'a> {
    #[serde(borrow)]
    period_key: Cow<'a, str>,
    usd: f64,
}

/// The full path: parse the record, print its view. `Ok(false)` when it does not parse or
/// names another job (the caller asks the store, whose error names the file and line).
fn full(
    enc: &mut Pretty,
    json: &str,
    name: &str,
    period_key: &str,
    now: DateTime<Utc>,
) -> Result<bool, pretty::EncodeError> {
    let Ok(r) = serde_json::from_str::<JobRecord>(json) else {
        return Ok(false);
    };
    if r.def.name != name {
        return Ok(false);
    }
    super::JobView::in_period(&r, period_key, now).serialize(enc)?;
    Ok(true)
}

/// A stored timestamp (a JSON string) as serde reads a `DateTime<Utc>`.
fn timestamp(json: &str) -> Result<DateTime<Utc>, Decline> {
    let s = plain_str(json)?;
    s.parse::<DateTime<FixedOffset>>()
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| Decline)
}

/// A JSON string's text (`json` is the string token, quotes included), decoded.
fn plain_str(json: &str) -> Result<Cow<'_, str>, Decline> {
    let inner = json
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .ok_or(Decline)?;
    if !inner.contains('\\') {
        return Ok(Cow::Borrowed(inner));
    }
    let mut out = String::new();
    decode(inner, &mut out)?;
    Ok(Cow::Owned(out))
}

/// Decode the body of a JSON string (escapes resolved) onto `out`.
fn decode(s: &str, out: &mut String) -> Result<(), Decline> {
    let mut rest = s;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let b = rest.as_bytes();
        let esc = *b.get(at + 1).ok_or(Decline)?;
        let mut used = 2;
        match esc {
            b'"' => out.push('"'),
            b'\\' => out.push('\\'),
            b'/' => out.push('/'),
            b'b' => out.push('\u{8}'),
            b'f' => out.push('\u{c}'),
            b'n' => out.push('\n'),
            b'r' => out.push('\r'),
            b't' => out.push('\t'),
            b'u' => {
                let hex = |from: usize| -> Result<u32, Decline> {
                    rest.get(from..from + 4)
                        .and_then(|h| u32::from_str_radix(h, 16).ok())
                        .ok_or(Decline)
                };
                let hi = hex(at + 2)?;
                used = 6;
                let c = if (0xD800..0xDC00).contains(&hi) {
                    // A surrogate pair: `\uD8xx\uDCxx`.
                    if rest.get(at + 6..at + 8) != Some("\\u") {
                        return Err(Decline);
                    }
                    let lo = hex(at + 8)?;
                    if !(0xDC00..0xE000).contains(&lo) {
                        return Err(Decline);
                    }
                    used = 12;
                    0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                } else {
                    hi
                };
                out.push(char::from_u32(c).ok_or(Decline)?);
            }
            _ => return Err(Decline),
        }
        rest = &rest[at + used..];
    }
    out.push_str(rest);
    Ok(())
}

/// A scanner over compact JSON that writes each value in the pretty layout.
struct Tx<'a, 'b> {
    s: &'a [u8],
    text: &'a str,
    i: usize,
    shape: &'b mut Vec<u8>,
    scratch: String,
    /// Whether the value being read is a money member's (`text::is_money_key`).
    money: bool,
    /// Whether the value being read is a member named `c`: an hour bucket's cost, money the
    /// full path rounds (`model::HourBucket`), so one with more decimals than the rule keeps
    /// (a counter an older release summed) goes down the full path. Another object's `c` (a
    /// tool's schema) loses only the fast path that way, never a digit.
    bucket_cost: bool,
}

impl<'a, 'b> Tx<'a, 'b> {
    /// A scanner at the start of `text`, collecting its shape into `shape`.
    fn new(text: &'a str, shape: &'b mut Vec<u8>, scratch: String) -> Tx<'a, 'b> {
        Tx {
            s: text.as_bytes(),
            text,
            i: 0,
            shape,
            scratch,
            money: false,
            bucket_cost: false,
        }
    }

    fn expect(&mut self, lit: &[u8]) -> Result<(), Decline> {
        if self.s.get(self.i..self.i + lit.len()) == Some(lit) {
            self.i += lit.len();
            Ok(())
        } else {
            Err(Decline)
        }
    }

    fn peek(&self) -> Result<u8, Decline> {
        self.s.get(self.i).copied().ok_or(Decline)
    }

    /// Transcode the value `v` (a slice of this scanner's text) onto `enc`.
    fn value_of(&mut self, enc: &mut Pretty, v: &str) -> Result<(), Decline> {
        let base = v.as_ptr() as usize - self.text.as_ptr() as usize;
        self.i = base;
        self.value(enc)?;
        if self.i != base + v.len() {
            return Err(Decline);
        }
        Ok(())
    }

    /// [`Tx::value_of`] for a money member's value (`text::is_money_key`).
    fn money_of(&mut self, enc: &mut Pretty, v: &str) -> Result<(), Decline> {
        self.money = true;
        let r = self.value_of(enc, v);
        self.money = false;
        r
    }

    fn value(&mut self, enc: &mut Pretty) -> Result<(), Decline> {
        match self.peek()? {
            b'{' => self.object(enc, None),
            b'[' => self.array(enc),
            b'"' => {
                let (body, escaped) = self.string()?;
                self.shape.push(b's');
                if body.len() <= SHORT {
                    self.shape.extend_from_slice(&self.s[body.clone()]);
                    self.shape.push(b'"');
                }
                self.emit(enc, body, escaped)
            }
            b't' => self.literal(enc, b"true", b't'),
            b'f' => self.literal(enc, b"false", b'f'),
            b'n' => self.literal(enc, b"null", b'n'),
            b'-' | b'0'..=b'9' => self.number(enc),
            _ => Err(Decline),
        }
    }

    fn literal(&mut self, enc: &mut Pretty, lit: &[u8], kind: u8) -> Result<(), Decline> {
        self.expect(lit)?;
        self.shape.push(kind);
        enc.out.extend_from_slice(lit);
        Ok(())
    }

    /// A number copied as written; its kind (integer, decimal, zero) goes to the shape.
    fn number(&mut self, enc: &mut Pretty) -> Result<(), Decline> {
        let s = self.s;
        let digits = |mut i: usize| {
            while let Some(b'0'..=b'9') = s.get(i) {
                i += 1;
            }
            i
        };
        let start = self.i;
        let neg = s.get(start) == Some(&b'-');
        let int_start = start + usize::from(neg);
        let int_end = digits(int_start);
        let int = &s[int_start..int_end];
        let mut i = int_end;
        let point = s.get(i) == Some(&b'.');
        let frac = if point {
            let end = digits(i + 1);
            let f = &s[i + 1..end];
            i = end;
            f
        } else {
            &[]
        };
        let mut exp = 0i32;
        let has_exp = matches!(s.get(i), Some(b'e' | b'E'));
        if has_exp {
            let from = i + 1;
            let sign = usize::from(matches!(s.get(from), Some(b'+' | b'-')));
            i = digits(from + sign);
            if i == from + sign {
                return Err(Decline);
            }
            exp = self.text[from..i].parse::<i32>().map_err(|_| Decline)?;
        }
        if int.is_empty()
            || (int.len() > 1 && int[0] == b'0')
            || (point && frac.is_empty())
            // Not a number serde_json writes (`1.2.3`, `1e5e5`, `--1`).
            || matches!(s.get(i), Some(b'-' | b'+' | b'.' | b'e' | b'E'))
        {
            return Err(Decline);
        }
        self.i = i;
        let t = &self.text[start..i];
        let significant = int.iter().chain(frac).skip_while(|b| **b == b'0').count();
        let zero = significant == 0;
        let decimal = point || has_exp;
        let pow10 = i64::from(exp) - frac.len() as i64;
        // Money keeps `text::json_usd`'s decimals: an amount with more (a sum's binary noise)
        // is rounded on the full path.
        if (self.money || self.bucket_cost) && -pow10 > i64::from(crate::text::JSON_USD_DECIMALS) {
            return Err(Decline);
        }
        if self.bucket_cost && zero && neg {
            return Err(Decline);
        }
        // serde_json reads a decimal exactly when it is an integer below 2^53 times a power of
        // ten up to 22; an integer is exact up to u64/i64 (18 digits is inside both).
        if (decimal && !zero && (significant > 15 || pow10.abs() > 22))
            || (!decimal && significant > 18)
            || (!decimal && zero && neg)
        {
            return Err(Decline);
        }
        self.shape.push(match (decimal, zero) {
            (true, true) => b'z',
            (false, true) => b'0',
            (true, false) => b'd',
            (false, false) => b'i',
        });
        if self.money && zero && neg {
            // Money is never a negative zero (`text::json_usd`).
            enc.out.extend_from_slice(b"0.0");
        } else {
            enc.out.extend_from_slice(t.as_bytes());
        }
        Ok(())
    }

    /// The string token at `self.i`: its body's range and whether it has escapes or bytes the
    /// writer escapes (DEL, non-ASCII).
    fn string(&mut self) -> Result<(Range<usize>, bool), Decline> {
        self.expect(b"\"")?;
        let start = self.i;
        let mut special = false;
        loop {
            while let Some(chunk) = self.s.get(self.i..self.i + 8) {
                let mut word = [0u8; 8];
                word.copy_from_slice(chunk);
                let look = pretty::special8(u64::from_le_bytes(word));
                if look != 0 {
                    // Straight to the first byte that needs a look.
                    self.i += (look.trailing_zeros() / 8) as usize;
                    break;
                }
                self.i += 8;
            }
            let b = self.peek()?;
            self.i += 1;
            match b {
                b'"' => return Ok((start..self.i - 1, special)),
                b'\\' => {
                    special = true;
                    self.i += 1;
                }
                0..=0x1F => return Err(Decline),
                0x7F..=0xFF => special = true,
                _ => {}
            }
        }
    }

    /// Write a string token's text with the listing's escapes.
    fn emit(&mut self, enc: &mut Pretty, body: Range<usize>, special: bool) -> Result<(), Decline> {
        if !special {
            enc.out.push(b'"');
            enc.out.extend_from_slice(&self.s[body]);
            enc.out.push(b'"');
            return Ok(());
        }
        let text = self.text.get(body).ok_or(Decline)?;
        if text.contains('\\') {
            let mut s = std::mem::take(&mut self.scratch);
            s.clear();
            decode(text, &mut s)?;
            enc.string(&s);
            self.scratch = s;
        } else {
            enc.string(text);
        }
        Ok(())
    }

    fn object(
        &mut self,
        enc: &mut Pretty,
        mut members: Option<&mut dyn Slots>,
    ) -> Result<(), Decline> {
        self.expect(b"{")?;
        self.shape.push(b'{');
        enc.open(b'{');
        if self.peek()? == b'}' {
            self.i += 1;
            self.shape.push(b'}');
            enc.close(b'}', false);
            return Ok(());
        }
        let mut first = true;
        loop {
            let (key, special) = self.string()?;
            // Length-prefixed: no key can run into the next token of the shape.
            self.shape
                .extend_from_slice(&(key.len() as u32).to_le_bytes());
            self.shape.extend_from_slice(&self.s[key.clone()]);
            enc.entry(first);
            first = false;
            self.emit(enc, key.clone(), special)?;
            enc.out.extend_from_slice(b": ");
            self.expect(b":")?;
            let val = self.i;
            self.money =
                std::str::from_utf8(&self.s[key.clone()]).is_ok_and(crate::text::is_money_key);
            self.bucket_cost = &self.s[key.clone()] == b"c";
            self.value(enc)?;
            self.money = false;
            self.bucket_cost = false;
            if let Some(m) = members.as_deref_mut() {
                m.record(&self.s[key], val..self.i);
            }
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    break;
                }
                _ => return Err(Decline),
            }
        }
        self.shape.push(b'}');
        enc.close(b'}', true);
        Ok(())
    }

    fn array(&mut self, enc: &mut Pretty) -> Result<(), Decline> {
        self.expect(b"[")?;
        self.shape.push(b'[');
        enc.open(b'[');
        if self.peek()? == b']' {
            self.i += 1;
            self.shape.push(b']');
            enc.close(b']', false);
            return Ok(());
        }
        let mut first = true;
        loop {
            enc.entry(first);
            first = false;
            self.value(enc)?;
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    break;
                }
                _ => return Err(Decline),
            }
        }
        self.shape.push(b']');
        enc.close(b']', true);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Status;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-30T12:00:00Z")
            .unwrap()
            .to_utc()
    }

    /// The full path's bytes: the record parsed, its view written by the listing's writer
    /// (itself tested equal to `text::to_json_pretty`).
    fn full_bytes(json: &str, key: &str) -> Vec<u8> {
        let r: JobRecord = serde_json::from_str(json).unwrap();
        let mut p = Pretty::at_depth(1);
        super::super::JobView::in_period(&r, key, now())
            .serialize(&mut p)
            .unwrap();
        p.out
    }

    fn fast_bytes(shapes: &mut Shapes, json: &str, key: &str) -> Vec<u8> {
        let r: JobRecord = serde_json::from_str(json).unwrap();
        let mut p = Pretty::at_depth(1);
        assert!(shapes.write(&mut p, json, &r.def.name, key, now()).unwrap());
        p.out
    }

    /// A small deterministic generator (xorshift64*): no crate for one test.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
            &xs[self.below(xs.len() as u64) as usize]
        }
    }

    /// Text that exercises every escape: quotes, backslashes, controls, DEL, C1, bidi,
    /// invisible characters, non-ASCII, astral characters, and plain words.
    fn text(rng: &mut Rng) -> String {
        const PIECES: &[&str] = &[
            "a",
            "job",
            "-",
            "quote\"",
            "back\\slash",
            "tab\t",
            "nl\n",
            "\u{1}",
            "\u{7f}",
            "\u{85}",
            "\u{202e}",
            "\u{200b}",
            "\u{2028}",
            "é",
            "日本",
            "🦀",
            "/",
            "skip",
            "ok",
            "0",
            "0123456789abcdefghij",
        ];
        let n = 1 + rng.below(4);
        (0..n).map(|_| *rng.pick(PIECES)).collect()
    }

    fn float(rng: &mut Rng) -> f64 {
        *rng.pick(&[
            0.0,
            -0.0,
            0.5,
            1.0,
            0.1 + 0.2,
            1e-7,
            12.25,
            1e300,
            123_456.789,
            f64::MIN_POSITIVE,
            3.0,
        ])
    }

    fn ts(rng: &mut Rng) -> Option<DateTime<Utc>> {
        match rng.below(4) {
            0 => None,
            1 => Some(now() - chrono::Duration::seconds(rng.below(100_000) as i64)),
            2 => Some(now() + chrono::Duration::milliseconds(rng.below(10_000_000) as i64)),
            _ => Some(now() + chrono::Duration::nanoseconds(rng.below(1 << 40) as i64)),
        }
    }

    /// Varied records from the console's fixture jobs (agents, monitors, gates, leases,
    /// queues, hour buckets): names, texts, numbers, instants and flags drawn at random.
    fn records(seed: u64, n: usize) -> Vec<JobRecord> {
        let base = crate::tui::testdata::fixed_jobs(now());
        let mut rng = Rng(seed);
        (0..n)
            .map(|i| {
                let mut r = rng.pick(&base).clone();
                if rng.below(3) == 0 {
                    r.def.name = format!("{}-{i}", text(&mut rng));
                }
                if rng.below(3) == 0 {
                    r.def.schedule_text = text(&mut rng);
                }
                r.def.enabled = rng.below(5) != 0;
                r.def.jitter_seconds = if rng.below(2) == 0 {
                    0.0
                } else {
                    float(&mut rng)
                };
                r.def.max_cost_usd = if rng.below(2) == 0 {
                    None
                } else {
                    Some(float(&mut rng))
                };
                if rng.below(3) == 0 {
                    r.def.tags = (0..rng.below(3)).map(|_| text(&mut rng)).collect();
                }
                r.rt.next_slot = ts(&mut rng);
                r.rt.last_run_at = ts(&mut rng);
                r.rt.hold_until = ts(&mut rng);
                r.rt.last_status = if rng.below(3) == 0 {
                    None
                } else {
                    Some(*rng.pick(&Status::ALL))
                };
                r.rt.runs = rng.next() >> rng.below(64);
                r.rt.paused = rng.below(4) == 0;
                r.rt.retired = rng.below(6) == 0;
                r.rt.retired_reason = if r.rt.retired {
                    Some(text(&mut rng))
                } else {
                    None
                };
                if rng.below(3) == 0 {
                    r.rt.lease = None;
                }
                if let Some(l) = r.rt.lease.as_mut() {
                    l.cancel_requested_at = ts(&mut rng);
                }
                r.rt.trigger_requested_at = if rng.below(3) == 0 {
                    ts(&mut rng)
                } else {
                    None
                };
                if rng.below(2) == 0 {
                    r.rt.queue.clear();
                } else if rng.below(2) == 0 {
                    r.rt.queue.push(crate::model::QueuedRun {
                        trigger: crate::model::Trigger::Backfill,
                        slot: ts(&mut rng),
                        requested_at: now(),
                        retry_of: None,
                    });
                }
                r.rt.counters.period_key = rng
                    .pick(&[
                        "",
                        "day:2026-11-30",
                        "day:2026-11-29",
                        "month:2026-11",
                        "total",
                    ])
                    .to_string();
                r.rt.counters.period_cost_usd = float(&mut rng);
                r.rt.counters.total_cost_usd = float(&mut rng);
                for _ in 0..rng.below(3) {
                    r.rt.counters.reservations.push(crate::model::Reservation {
                        id: uuid::Uuid::new_v4(),
                        run_id: uuid::Uuid::new_v4(),
                        owner: "o".into(),
                        period_key: rng
                            .pick(&["day:2026-11-30", "day:2026-11-29", "week:2026-W49"])
                            .to_string(),
                        usd: float(&mut rng),
                        state: crate::model::ReservationState::Reserved,
                        at: now(),
                        next_turn: false,
                    });
                }
                r
            })
            .collect()
    }

    /// The property: over generated records, in one listing (so shapes are remembered and
    /// reused across records of the same shape with other values), the view printed from the
    /// JSON is the full path's, byte for byte, and most records take the fast path.
    #[test]
    fn views_from_json_are_the_full_paths_bytes_over_generated_records() {
        for key in ["day:2026-11-30", "month:2026-11", "total"] {
            let mut shapes = Shapes::default();
            for (i, r) in records(0x9E37_79B9_7F4A_7C15, 3000).iter().enumerate() {
                let json = serde_json::to_string(r).unwrap();
                let want = full_bytes(&json, key);
                let got = fast_bytes(&mut shapes, &json, key);
                assert_eq!(
                    String::from_utf8(got).unwrap(),
                    String::from_utf8(want).unwrap(),
                    "record {i} ({key}): {json}"
                );
            }
            // The generator reaches every state word of the listing.
            let words: std::collections::HashSet<&str> = records(0x9E37_79B9_7F4A_7C15, 3000)
                .iter()
                .map(|r| super::super::state(r, now()))
                .collect();
            for w in [
                "queued",
                "cancelling",
                "running",
                "paused",
                "retired",
                "idle",
            ] {
                assert!(words.contains(w), "no {w} record generated: {words:?}");
            }
            // Every line the current model writes prints the same both ways (no shape refused),
            // and the fast path is taken for most (the others hold a float serde_json may not
            // read back exactly, or are the first of their shape).
            assert_eq!(shapes.refused, 0);
            assert!(
                shapes.fast * 3 > shapes.full,
                "the fast path was taken {} times, the full {}",
                shapes.fast,
                shapes.full
            );
        }
    }

    /// A jittered `run_immediately` job that never ran fires on its slot: its line takes the
    /// full path, which reads the record's rule, so `next_fire_at` is its slot, whatever the
    /// first line of its shape printed.
    #[test]
    fn a_jittered_immediate_first_run_fires_on_its_slot() {
        let key = "day:2026-11-30";
        let mut r = crate::tui::testdata::fixed_jobs(now()).swap_remove(1);
        r.def.jitter_seconds = 3000.0;
        r.def.run_immediately = true;
        r.rt.last_slot = None;
        let mut shapes = Shapes::default();
        for slot in 0..20 {
            r.rt.next_slot = Some(now() + chrono::Duration::seconds(slot));
            let json = serde_json::to_string(&r).unwrap();
            let got = fast_bytes(&mut shapes, &json, key);
            assert_eq!(got, full_bytes(&json, key), "slot {slot}");
            let v: serde_json::Value = serde_json::from_slice(&got).unwrap();
            assert_eq!(v["next_fire_at"], v["next_slot"], "{v}");
        }
        assert_eq!((shapes.fast, shapes.refused), (0, 0));
    }

    /// Lines an older release could have written (a defaulted member missing, a member the
    /// model no longer has, members in another order, a member the serialiser now leaves out
    /// by its value) print what the full parse prints: their shape differs, its first record
    /// is compared, and the full path is taken.
    #[test]
    fn old_and_odd_lines_print_what_the_full_parse_prints() {
        let key = "day:2026-11-30";
        let mut r = crate::tui::testdata::fixed_jobs(now()).swap_remove(0);
        r.def.jitter_seconds = 0.0;
        r.def.max_cost_usd = Some(1.5);
        r.rt.counters.period_cost_usd = 0.25;
        let json = serde_json::to_string(&r).unwrap();
        assert!(json.contains(r#""tags":"#) && json.contains(r#""runs":"#));
        let edits: Vec<String> = vec![
            json.clone(),
            json.replacen(r#""env_passthrough":[],"#, "", 1),
            json.replacen(r#""tags":"#, r#""zzz_gone":{"a":[1,2.5]},"tags":"#, 1),
            json.replacen(r#""enabled":"#, r#""jitter_seconds":0.0,"enabled":"#, 1),
            json.replacen(r#""enabled":"#, r#""overlap":"skip","enabled":"#, 1),
            json.replacen(r#""runs":"#, r#""runs":1,"zzz":null,"x":"#, 1),
            json.replacen(r#""def":{"name":"#, r#""def":{"name" : "#, 1),
            json.replace("\"retired\":false", "\"retired\" :false"),
        ];
        let mut shapes = Shapes::default();
        // Twice: the second round finds every shape remembered.
        for round in 0..2 {
            for (i, j) in edits.iter().enumerate() {
                let Ok(want) = serde_json::from_str::<JobRecord>(j).map(|_| full_bytes(j, key))
                else {
                    continue;
                };
                assert_eq!(
                    String::from_utf8(fast_bytes(&mut shapes, j, key)).unwrap(),
                    String::from_utf8(want).unwrap(),
                    "round {round}, edit {i}"
                );
            }
        }
        // The missing default, the two lines with members the model does not have, the zero
        // jitter and `overlap: skip` are caught by the comparison; the spaced-out lines (never
        // written by serde_json) decline at once.
        assert_eq!(shapes.refused, 5);
        assert!(
            shapes.fast >= 2,
            "the unedited line took the fast path: {}",
            shapes.fast
        );
    }

    /// The number scanner copies what serde_json writes and declines what it does not write or
    /// might not read back exactly; each number's kind goes to the shape.
    #[test]
    fn numbers_are_copied_with_their_kind_or_declined() {
        let scan = |t: &str| -> Option<(String, Vec<u8>)> {
            let text = format!("{t},");
            let mut shape = Vec::new();
            let mut tx = Tx::new(&text, &mut shape, String::new());
            let mut p = Pretty::default();
            tx.number(&mut p).ok()?;
            assert_eq!(tx.i, t.len(), "{t}");
            Some((String::from_utf8(p.out).unwrap(), shape))
        };
        for (t, kind) in [
            ("0", b'0'),
            ("7", b'i'),
            ("-12", b'i'),
            ("0.0", b'z'),
            ("-0.0", b'z'),
            ("60.0", b'd'),
            ("1e-7", b'd'),
            ("1E+5", b'd'),
            ("2.5e-21", b'd'),
            ("123456789012345678", b'i'),
        ] {
            assert_eq!(scan(t), Some((t.to_string(), vec![kind])), "{t}");
        }
        for t in [
            "-",
            "--1",
            "01",
            "1.",
            "1.2.3",
            "1e",
            "1e+",
            "1e5e5",
            "-0",
            ".5",
            "1234567890123456789",
            "0.1234567890123456",
            "1e23",
            "+1",
        ] {
            assert_eq!(scan(t), None, "{t}");
        }
    }

    /// A record whose JSON the model refuses, or that names another job, is not printed here:
    /// the listing asks the store (whose error names the file and line).
    #[test]
    fn unparsable_or_foreign_records_are_declined() {
        let r = &records(11, 1)[0];
        let json = serde_json::to_string(r).unwrap();
        let mut shapes = Shapes::default();
        let mut p = Pretty::at_depth(1);
        let broken = json.replacen(r#""runs":"#, r#""runs":"many","x":"#, 1);
        assert!(
            !shapes
                .write(&mut p, &broken, &r.def.name, "total", now())
                .unwrap()
        );
        assert!(
            !shapes
                .write(&mut p, &json, "another-job", "total", now())
                .unwrap()
        );
        assert!(
            !shapes
                .write(&mut p, &json[..json.len() - 1], &r.def.name, "total", now())
                .unwrap()
        );
        assert!(p.out.is_empty());
    }
}

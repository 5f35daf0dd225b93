//! The record of a tool loop: what each turn of the model and each tool call did, as the
//! history row keeps it (`transcript`), bounded.
//!
//! Owns: the entry types (a turn, a call, a turn left without a reply, a server request
//! refused during a call, an elision mark), their caps (a turn's text, a
//! call's arguments and the head of its result), and the bound of the whole record
//! ([`TRANSCRIPT_MAX_BYTES`], 256 KiB of JSON): past it the middle is elided and one mark says
//! how many entries and bytes went, so both the first steps and the last ones stay readable.
//! Must not touch: the loop itself (`action::agent` writes entries), redaction (entries arrive
//! redacted), the views (they make the untrusted texts inert before drawing them).
//!
//! Memory follows the same bound while the run goes: the first half of the budget keeps the
//! first entries, the rest is a window over the latest ones, so a long run never holds more
//! than the record it will write. An entry that grows after it was pushed (a dispatched call
//! getting its result) is measured again, and the window gives way for it: the bound is on the
//! JSON as written, not as first pushed.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The bound of a transcript's JSON.
pub const TRANSCRIPT_MAX_BYTES: usize = 256 * 1024;
/// A turn's text is kept up to this many bytes (the run's `result` keeps the final answer).
pub const TURN_TEXT_MAX_BYTES: usize = 4 * 1024;
/// A call's arguments are kept up to this many bytes.
pub const ARGS_MAX_BYTES: usize = 2 * 1024;
/// The head of a call's result kept in the record.
pub const RESULT_HEAD_BYTES: usize = 2 * 1024;

/// One model turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnEntry {
    /// 1-based.
    pub turn: u32,
    /// The model the reply named.
    pub model: String,
    /// Every prompt token the model read (cache classes included).
    pub input_tokens: u64,
    /// Reply tokens.
    pub output_tokens: u64,
    /// Of the input tokens, those read from a prompt cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read_tokens: u64,
    /// Of the input tokens, those written to a prompt cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
    /// What the turn is booked at.
    pub cost_usd: f64,
    /// Requests it took (retries inside the turn included).
    pub attempts: u32,
    /// The reply's text (redacted, capped at [`TURN_TEXT_MAX_BYTES`]).
    pub text: String,
    /// The reply was cut at its token limit.
    #[serde(default, skip_serializing_if = "is_false")]
    pub cut: bool,
    /// How many tools it asked to call.
    pub calls: u32,
}

/// How an operator answered a call that needed approval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Approval {
    /// Approved (by whom, when known).
    Approved {
        /// Who approved it, when known.
        by: Option<String>,
        /// Why, when the operator said (`approve --reason`): kept on the record only, the
        /// model never reads it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Denied, with the reason the model was given.
    Denied {
        /// The reason the model was given.
        reason: String,
        /// Who denied it (absent: nobody did, the wait timed out).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
}

/// Where a call got to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallState {
    /// Sent to its tool; no result recorded yet (an abandoned run's last call may stay so).
    Dispatched,
    /// The tool answered (or the call timed out or broke): the result is recorded.
    Done,
    /// Never sent: a name that was not offered, arguments that are not valid, a call over the
    /// turn's limit, a denial. The model got an error result.
    Refused,
    /// Waiting for an operator's approval, not sent: a run that ended while it waited (an
    /// owner killed, a shutdown) keeps its last call so, with the answer an operator gave
    /// meanwhile, if any. Answered in a live run, the call goes on as dispatched (approved) or
    /// refused (denied).
    AwaitingApproval,
}

/// One tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallEntry {
    /// The turn that asked for it.
    pub turn: u32,
    /// The call's id in the conversation.
    pub id: String,
    /// The tool: its jobs-file name (`server.tool`, a command tool's key) when it was offered,
    /// else the name the model used.
    pub tool: String,
    /// Its source (the `mcp_servers:` key, `tools` for command tools); `None` when not offered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The arguments as the model sent them (redacted, capped at [`ARGS_MAX_BYTES`]).
    pub arguments: String,
    /// When the loop took the call up.
    pub started_at: DateTime<Utc>,
    /// How long it took, refusal or dispatch.
    pub duration_ms: u64,
    /// Where it got to.
    pub state: CallState,
    /// The model was told the call failed.
    pub is_error: bool,
    /// The operator's answer, for a call that needed one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval>,
    /// Bytes of the whole result the tool returned (before the model's cap, and before a
    /// source's own read bound: a command tool counts every byte it wrote).
    pub result_bytes: u64,
    /// sha256 of that whole result, lowercase hex.
    pub result_sha256: String,
    /// The first [`RESULT_HEAD_BYTES`] of the result (redacted).
    pub result_head: String,
}

impl CallEntry {
    /// A call as the loop records it when it takes the call up, before it runs: no duration,
    /// no result, no approval yet.
    pub fn dispatched(
        turn: u32,
        id: String,
        tool: String,
        source: Option<String>,
        arguments: String,
        started_at: DateTime<Utc>,
    ) -> Self {
        Self {
            turn,
            id,
            tool,
            source,
            arguments,
            started_at,
            duration_ms: 0,
            state: CallState::Dispatched,
            is_error: false,
            approval: None,
            result_bytes: 0,
            result_sha256: String::new(),
            result_head: String::new(),
        }
    }
}

/// A turn whose request got no reply: the run's time ran out while it was in flight, or the
/// model's last attempt failed. Written when the run ends, so the record says where it stopped
/// and what that turn cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnansweredTurn {
    /// 1-based.
    pub turn: u32,
    /// The model asked.
    pub model: String,
    /// Requests sent in the turn (retries included).
    pub attempts: u32,
    /// What the turn is booked at: the reservation of each request whose outcome is unknown
    /// (it may have been billed), nothing for one that surely cost nothing.
    pub cost_usd: f64,
    /// Why no reply came (redacted).
    pub reason: String,
}

/// A request a tool server sent cronsole during a call (sampling, elicitation, roots, input
/// mid-call): cronsole declares none of those capabilities, so each is refused with an error
/// and recorded here, right after the call it came during.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerRequestEntry {
    /// The turn of the call it came during.
    pub turn: u32,
    /// That call's id.
    pub call_id: String,
    /// That call's tool.
    pub tool: String,
    /// What was asked and how it was answered (redacted, capped at [`SERVER_REQUEST_MAX_BYTES`]).
    pub request: String,
}

/// A refused server request is kept up to this many bytes.
pub const SERVER_REQUEST_MAX_BYTES: usize = 512;

/// One entry of a transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Entry {
    /// A model turn.
    Turn(TurnEntry),
    /// A tool call.
    Call(CallEntry),
    /// A turn that got no reply (see [`UnansweredTurn`]).
    Unanswered(UnansweredTurn),
    /// A server's request refused during a call (see [`ServerRequestEntry`]).
    ServerRequest(ServerRequestEntry),
    /// Entries left out of the middle to keep the record bounded.
    Elided {
        /// How many.
        entries: u64,
        /// Their JSON bytes.
        bytes: u64,
    },
}

/// A bounded transcript (see the module doc). Two transcripts are equal when they write the
/// same entries.
#[derive(Debug, Clone, Default)]
pub struct Transcript {
    head: Vec<Entry>,
    /// The JSON bytes of each head entry, separator included.
    head_sizes: Vec<usize>,
    head_bytes: usize,
    /// Once an entry did not fit the head, later ones go to the tail (order is kept).
    sealed: bool,
    tail: VecDeque<(Entry, usize)>,
    tail_bytes: usize,
    elided_entries: u64,
    elided_bytes: u64,
    /// Entries ever pushed (the record's sequence numbers for appended deltas).
    pushed: u64,
    /// Entries up to this sequence number were handed out by [`Transcript::take_delta`].
    taken: u64,
    /// Entries below `taken` changed since (a dispatched call got its result).
    changed: BTreeSet<u64>,
}

/// One entry as persisted while a run goes: its sequence number in the run's transcript and
/// the entry. A later delta with the same number replaces the earlier one (a dispatched call
/// getting its result); [`Transcript::from_deltas`] puts them back together.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Delta {
    /// The entry's position among every entry ever pushed (0-based).
    pub seq: u64,
    /// The entry as it is now.
    pub entry: Entry,
}

impl Transcript {
    /// An empty transcript.
    pub fn new() -> Transcript {
        Transcript::default()
    }

    /// Append an entry; past the bound the oldest entries after the head are elided.
    pub fn push(&mut self, e: Entry) {
        let size = json_size(&e);
        let half = TRANSCRIPT_MAX_BYTES / 2;
        self.pushed += 1;
        if !self.sealed && self.head_bytes + size <= half {
            self.head.push(e);
            self.head_sizes.push(size);
            self.head_bytes += size;
            return;
        }
        self.sealed = true;
        self.tail.push_back((e, size));
        self.tail_bytes += size;
        self.fit();
    }

    /// Elides from the middle until the record, its mark included, is within the bound: the
    /// oldest entries of the window first (its latest entry stays), then the last ones of the
    /// head (when entries of the head grew after they were pushed).
    fn fit(&mut self) {
        let room = TRANSCRIPT_MAX_BYTES - ELISION_MARK_BYTES;
        while self.head_bytes + self.tail_bytes > room && self.tail.len() > 1 {
            if let Some((_, n)) = self.tail.pop_front() {
                self.tail_bytes -= n;
                self.elide(n);
            }
        }
        while self.head_bytes + self.tail_bytes > room {
            let (Some(_), Some(n)) = (self.head.pop(), self.head_sizes.pop()) else {
                break;
            };
            self.head_bytes -= n;
            self.sealed = true;
            self.elide(n);
        }
    }

    fn elide(&mut self, bytes: usize) {
        self.elided_entries += 1;
        self.elided_bytes += bytes as u64;
    }

    /// Update the last call entry with id `id` (a dispatched call's result), wherever it is.
    pub fn update_call(&mut self, turn: u32, id: &str, f: impl FnOnce(&mut CallEntry)) {
        self.update_where(|c| c.turn == turn && c.id == id, f);
    }

    /// The call `id` left awaiting approval when its run ended, with the answer an operator
    /// gave meanwhile: it stays `awaiting_approval` (it never ran) and carries the answer.
    pub fn answer_unrun(&mut self, id: &str, approval: Approval) {
        self.update_where(
            |c| c.id == id && c.state == CallState::AwaitingApproval,
            |c| c.approval = Some(approval),
        );
    }

    /// Changes the latest call `pred` holds for, marking it changed for the next delta.
    fn update_where(&mut self, pred: impl Fn(&CallEntry) -> bool, f: impl FnOnce(&mut CallEntry)) {
        let first_tail = self.pushed - self.tail.len() as u64;
        let hit = |e: &Entry| matches!(e, Entry::Call(c) if pred(c));
        let (entry, size, part, seq) = if let Some(i) = self.tail.iter().rposition(|(e, _)| hit(e))
        {
            let (e, n) = &mut self.tail[i];
            (e, n, &mut self.tail_bytes, first_tail + i as u64)
        } else if let Some(i) = self.head.iter().rposition(hit) {
            let n = &mut self.head_sizes[i];
            (&mut self.head[i], n, &mut self.head_bytes, i as u64)
        } else {
            return;
        };
        if let Entry::Call(c) = entry {
            f(c);
        }
        // The call grew (its result's head): the record is measured as it will be written.
        let now = json_size(entry);
        *part = *part - *size + now;
        *size = now;
        if seq < self.taken {
            self.changed.insert(seq);
        }
        self.fit();
    }

    /// The entries pushed or changed since the last call, with their sequence numbers, in
    /// order: what a run persists at each step, so the record so far survives a crash without
    /// rewriting what was already written. Entries elided before they were taken are not in
    /// any delta (the record past its bound is elided either way).
    pub fn take_delta(&mut self) -> Vec<Delta> {
        let first_tail = self.pushed - self.tail.len() as u64;
        let get = |seq: u64| -> Option<&Entry> {
            if let Some(e) = usize::try_from(seq).ok().and_then(|i| self.head.get(i)) {
                return Some(e);
            }
            let i = usize::try_from(seq.checked_sub(first_tail)?).ok()?;
            self.tail.get(i).map(|(e, _)| e)
        };
        let seqs = self.changed.iter().copied().chain(self.taken..self.pushed);
        let out = seqs
            .filter_map(|seq| {
                get(seq).map(|e| Delta {
                    seq,
                    entry: e.clone(),
                })
            })
            .collect();
        self.changed.clear();
        self.taken = self.pushed;
        out
    }

    /// The transcript persisted as deltas (any order; for a sequence number, the last one
    /// given wins), bounded as a live run's record is.
    pub fn from_deltas(deltas: impl IntoIterator<Item = Delta>) -> Transcript {
        let by_seq: BTreeMap<u64, Entry> = deltas.into_iter().map(|d| (d.seq, d.entry)).collect();
        let mut t = Transcript::new();
        for e in by_seq.into_values() {
            t.push(e);
        }
        t.taken = t.pushed;
        t
    }

    /// Model turns and tool calls the record holds (what a row's `turns` and `tool_calls`
    /// say when only the record is left, as for a run abandoned by a crash): the last turn's
    /// number, and the calls written (elided ones are not known to be calls).
    pub fn counts(&self) -> (u32, u32) {
        let mut turns = 0;
        let mut calls = 0u64;
        for e in self.to_vec() {
            match e {
                Entry::Turn(t) => turns = turns.max(t.turn),
                Entry::Call(c) => {
                    turns = turns.max(c.turn);
                    calls += 1;
                }
                // A turn without a reply is not a turn the model answered.
                Entry::Unanswered(_) | Entry::ServerRequest(_) | Entry::Elided { .. } => {}
            }
        }
        (turns, u32::try_from(calls).unwrap_or(u32::MAX))
    }

    /// The entries as written: the head, the elision mark (if any), the tail.
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.head.iter().chain(self.tail.iter().map(|(e, _)| e))
    }

    /// The entries to write, the elision mark included.
    pub fn to_vec(&self) -> Vec<Entry> {
        let mut v: Vec<Entry> = self.head.clone();
        if self.elided_entries > 0 {
            v.push(Entry::Elided {
                entries: self.elided_entries,
                bytes: self.elided_bytes,
            });
        }
        v.extend(self.tail.iter().map(|(e, _)| e.clone()));
        v
    }

    /// Nothing was ever pushed.
    pub fn is_empty(&self) -> bool {
        self.pushed == 0
    }

    /// Entries ever pushed, elided ones included.
    #[cfg(test)]
    pub(crate) fn pushed(&self) -> u64 {
        self.pushed
    }

    /// Bytes of JSON the record holds now (at most [`TRANSCRIPT_MAX_BYTES`]).
    pub fn bytes(&self) -> usize {
        self.head_bytes
            + self.tail_bytes
            + if self.elided_entries > 0 {
                ELISION_MARK_BYTES
            } else {
                0
            }
    }
}

impl PartialEq for Transcript {
    fn eq(&self, other: &Self) -> bool {
        self.to_vec() == other.to_vec()
    }
}

/// Room kept for the elision mark itself.
const ELISION_MARK_BYTES: usize = 96;

/// An entry's JSON bytes in the written array, its separator included.
fn json_size(e: &Entry) -> usize {
    serde_json::to_string(e).map(|s| s.len()).unwrap_or(0) + 1
}

impl Serialize for Transcript {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_vec().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Transcript {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let entries = Vec::<Entry>::deserialize(d)?;
        let head_sizes: Vec<usize> = entries.iter().map(json_size).collect();
        Ok(Transcript {
            pushed: entries.len() as u64,
            taken: entries.len() as u64,
            head: entries,
            head_bytes: head_sizes.iter().sum(),
            head_sizes,
            sealed: true,
            ..Transcript::default()
        })
    }
}

/// `s` cut to at most `max` bytes at a character boundary, marked when cut.
pub(crate) fn cap_bytes(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mark = "…[cut]";
    let mut end = max.saturating_sub(mark.len());
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{mark}", &s[..end])
}

/// sha256 of `bytes`, lowercase hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(turn: u32, id: &str, head: &str) -> Entry {
        Entry::Call(CallEntry {
            turn,
            id: id.into(),
            tool: "files.read_file".into(),
            source: Some("files".into()),
            arguments: "{}".into(),
            started_at: DateTime::UNIX_EPOCH,
            duration_ms: 1,
            state: CallState::Done,
            is_error: false,
            approval: None,
            result_bytes: head.len() as u64,
            result_sha256: sha256_hex(head.as_bytes()),
            result_head: head.into(),
        })
    }

    #[test]
    fn a_long_transcript_keeps_its_first_and_last_entries_and_says_what_went() {
        let mut t = Transcript::new();
        let blob = "x".repeat(RESULT_HEAD_BYTES);
        for i in 0..1000 {
            t.push(call(i, &format!("c{i}"), &blob));
        }
        let json = serde_json::to_string(&t).unwrap();
        assert!(json.len() <= TRANSCRIPT_MAX_BYTES, "{}", json.len());
        assert!(
            json.len() > TRANSCRIPT_MAX_BYTES - 8 * 1024,
            "{}",
            json.len()
        );
        let v = t.to_vec();
        assert!(matches!(&v[0], Entry::Call(c) if c.id == "c0"));
        assert!(matches!(v.last(), Some(Entry::Call(c)) if c.id == "c999"));
        let elided: Vec<&Entry> = v
            .iter()
            .filter(|e| matches!(e, Entry::Elided { .. }))
            .collect();
        assert_eq!(elided.len(), 1);
        let Entry::Elided { entries, .. } = elided[0] else {
            unreachable!()
        };
        assert_eq!(*entries as usize + v.len() - 1, 1000);
        assert_eq!(t.pushed(), 1000);
        assert!(t.bytes() <= TRANSCRIPT_MAX_BYTES);
        // What is written reads back as written.
        let back: Transcript = serde_json::from_str(&json).unwrap();
        assert_eq!(back.to_vec(), v);
    }

    /// Calls are pushed as dispatched (their arguments only) and get their results after: the
    /// record as written stays within its bound — it is the JSON as written that is measured
    /// — and is not elided below it for nothing; the first and the latest calls stay.
    #[test]
    fn calls_that_get_their_results_after_they_were_pushed_keep_the_record_within_its_bound() {
        let args = format!("{{\"text\": \"{}\"}}", "a".repeat(ARGS_MAX_BYTES - 12));
        let blob = "r".repeat(RESULT_HEAD_BYTES);
        let mut t = Transcript::new();
        for turn in 0..40 {
            for k in 0..8 {
                let mut e = call(turn, &format!("c{turn}.{k}"), "");
                if let Entry::Call(c) = &mut e {
                    c.state = CallState::Dispatched;
                    c.arguments = args.clone();
                }
                t.push(e);
            }
            for k in 0..8 {
                t.update_call(turn, &format!("c{turn}.{k}"), |c| {
                    c.state = CallState::Done;
                    c.result_head = blob.clone();
                    c.result_bytes = blob.len() as u64;
                });
            }
            let json = serde_json::to_string(&t).unwrap();
            assert!(
                json.len() <= TRANSCRIPT_MAX_BYTES,
                "turn {turn}: {} bytes",
                json.len()
            );
            assert!(
                t.bytes() + 1 >= json.len(),
                "{} < {}",
                t.bytes(),
                json.len()
            );
        }
        let json = serde_json::to_string(&t).unwrap();
        assert!(
            json.len() > TRANSCRIPT_MAX_BYTES - 16 * 1024,
            "{} bytes: elided beyond the bound's need",
            json.len()
        );
        let v = t.to_vec();
        assert!(matches!(&v[0], Entry::Call(c) if c.id == "c0.0" && c.result_head == blob));
        assert!(
            matches!(v.last(), Some(Entry::Call(c)) if c.id == "c39.7" && c.state == CallState::Done)
        );
        let Some(Entry::Elided { entries, .. }) =
            v.iter().find(|e| matches!(e, Entry::Elided { .. }))
        else {
            panic!("no elision mark")
        };
        assert_eq!(*entries as usize + v.len() - 1, 320);
        // The head itself grew past its half: its last entries give way once the window has
        // only its latest entry left.
        let mut h = Transcript::new();
        let mut n = 0;
        while !h.sealed {
            let mut e = call(1, &format!("h{n}"), "");
            if let Entry::Call(c) = &mut e {
                c.state = CallState::Dispatched;
            }
            h.push(e);
            n += 1;
        }
        for i in 0..n {
            h.update_call(1, &format!("h{i}"), |c| {
                c.result_head = "z".repeat(RESULT_HEAD_BYTES)
            });
        }
        let json = serde_json::to_string(&h).unwrap();
        assert!(json.len() <= TRANSCRIPT_MAX_BYTES, "{} bytes", json.len());
        assert!(matches!(&h.to_vec()[0], Entry::Call(c) if c.id == "h0"));
    }

    #[test]
    fn a_dispatched_call_gets_its_result_in_place() {
        let mut t = Transcript::new();
        let mut e = call(1, "a", "");
        if let Entry::Call(c) = &mut e {
            c.state = CallState::Dispatched;
        }
        t.push(e);
        t.update_call(1, "a", |c| {
            c.state = CallState::Done;
            c.result_head = "ok".into();
        });
        assert!(
            matches!(&t.to_vec()[0], Entry::Call(c) if c.state == CallState::Done && c.result_head == "ok")
        );
    }

    #[test]
    fn deltas_carry_new_and_changed_entries_once_and_rebuild_the_record() {
        let mut t = Transcript::new();
        let mut d = call(1, "a", "");
        if let Entry::Call(c) = &mut d {
            c.state = CallState::Dispatched;
        }
        t.push(d);
        let first = t.take_delta();
        assert_eq!(first.len(), 1);
        assert!(t.take_delta().is_empty(), "nothing new, nothing written");
        t.update_call(1, "a", |c| c.state = CallState::Done);
        t.push(call(1, "b", "x"));
        let second = t.take_delta();
        assert_eq!(
            second.iter().map(|d| d.seq).collect::<Vec<_>>(),
            vec![0, 1],
            "the changed call again, then the new one"
        );
        let back = Transcript::from_deltas(first.into_iter().chain(second));
        assert_eq!(back, t, "the last delta of an entry wins");
        assert_eq!(back.counts(), (1, 2));
        // Deltas of a long record rebuild it bounded, as the live record is.
        let mut long = Transcript::new();
        let mut all = Vec::new();
        for i in 0..500 {
            long.push(call(i, &format!("c{i}"), &"y".repeat(RESULT_HEAD_BYTES)));
            all.extend(long.take_delta());
        }
        let rebuilt = Transcript::from_deltas(all);
        assert_eq!(rebuilt.to_vec(), long.to_vec());
    }

    #[test]
    fn caps_cut_at_a_character_boundary() {
        assert_eq!(cap_bytes("short", 10), "short");
        let c = cap_bytes(&"é".repeat(100), 21);
        assert!(c.len() <= 21 && c.ends_with("…[cut]"), "{c}");
        assert_eq!(sha256_hex(b"").len(), 64);
    }
}

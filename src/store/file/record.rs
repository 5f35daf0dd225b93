//! The job lines of `jobs.snapshot.jsonl` and `jobs.journal`, and the headers of the store's
//! files: what a line holds (its `head`, the record, the accounted mark), how it is encoded and
//! checked, and the settings file's bytes.
//!
//! Owns: [`Mark`], [`Entry`], [`Idx`], [`Loc`], [`Slim`], [`Cached`], the head parser and the
//! snapshot/journal header rules. Must not touch: the handle, the lock or any file — a line
//! comes in as bytes and goes out as bytes (see `jobs.rs` for where they are read and written).

use crate::store::BackendError;
use std::path::Path;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::layout::SNAPSHOT_FILE;
use super::log::{check_id, corrupt, encode_checked_line, json_err};
use crate::model::{JobCounters, JobRecord, Settings};
use crate::schedule::Compiled;
use crate::store::filefmt::{self};
use crate::store::{StoreError, StoreResult};
use crate::store::{plan, rules};

/// A history position: where history ended when a lease was taken (`mark`) or a record was
/// written (`at`): the open segment's file identity, length and segment number (format 3; a
/// format-2 mark has none and means "somewhere in history").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Mark {
    pub(super) ino: u64,
    pub(super) off: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) seg: Option<u64>,
}

#[derive(Serialize)]
pub(super) struct EntryRef<'a> {
    pub(super) job: &'a JobRecord,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) mark: Option<Mark>,
    /// History position when this record was written (the journal/history cross-check).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) at: Option<Mark>,
}

/// A job line as this release writes it: [`EntryRef`] plus `rows_to`, where history ended when
/// the line was written (after the rows of the same operation). Rows of the job found after it
/// were written by an operation whose record never landed (a process died or failed between
/// its rows and its record): a writer about to generate rows for the job looks there first, so
/// it never records the same slots twice (see `Locked::rows_since_records`).
#[derive(Serialize)]
pub(super) struct EntryLine<'a> {
    pub(super) job: &'a JobRecord,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) mark: Option<Mark>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) rows_to: Option<Mark>,
    /// History position when this record was written, durable before it (the journal/history
    /// cross-check).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) at: Option<Mark>,
}

#[derive(Deserialize)]
pub(super) struct Entry {
    pub(super) job: JobRecord,
    #[serde(default)]
    pub(super) mark: Option<Mark>,
    #[serde(default)]
    pub(super) at: Option<Mark>,
    /// See [`EntryLine::rows_to`] (absent in lines written before it existed).
    #[serde(default)]
    pub(super) rows_to: Option<Mark>,
}

/// What the index keeps of a job besides its name and line (see the module doc): written as the
/// line's `head`, derived from the record by [`Cached::idx`].
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Idx {
    /// [`plan::claim::wakeup`], `None` when the schedule does not compile and nothing is leased.
    pub(super) wake: Option<DateTime<Utc>>,
    /// The run id of the job's (first) lease.
    pub(super) lease: Option<Uuid>,
    /// History position when the record was written (see [`EntryRef::at`]).
    pub(super) at: Option<Mark>,
    /// The job has `after:` entries.
    pub(super) chained: bool,
    /// Its budget counters (period spend, reservations) when there are any: what `spend` and
    /// `reserve` sum over every job, without reading every record.
    pub(super) spend: Option<Box<JobCounters>>,
    /// The store-wide accounted mark the line was written with (`Inner::acct`): not derived
    /// from the record, so [`Cached::idx`] leaves it `None`.
    pub(super) acct: Option<Mark>,
    /// [`plan::apply::record_digest`]: a re-apply whose definition has this digest leaves the
    /// record as it is, so it need not read it. `None` in lines written before it existed and
    /// for a job retired because it left the jobs file.
    pub(super) def: Option<DefDigest>,
}

/// See [`Idx::def`].
pub(super) type DefDigest = std::num::NonZeroU64;

/// A definition digest in a line's head: 16 hex digits.
mod digest_hex {
    // By its std path, not `super::DefDigest`: the import-circle check reads an inline
    // module's `super::` as the folder's own module.
    use serde::{Deserialize, Deserializer, Serializer};
    use std::num::NonZeroU64;

    pub(in super::super) fn serialize<S: Serializer>(
        d: &Option<NonZeroU64>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_str(&format!("{:016x}", d.get())),
            None => s.serialize_none(),
        }
    }

    pub(in super::super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<NonZeroU64>, D::Error> {
        let Some(text) = Option::<std::borrow::Cow<'de, str>>::deserialize(d)? else {
            return Ok(None);
        };
        u64::from_str_radix(&text, 16)
            .ok()
            .filter(|_| text.len() == 16)
            .and_then(NonZeroU64::new)
            .map(Some)
            .ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "\"def_digest\" is not a definition digest: {text:?}"
                ))
            })
    }
}

/// The `head` member a job line starts with (see the module doc).
#[derive(Serialize)]
pub(super) struct HeadRef<'a> {
    pub(super) name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) wake: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) lease: Option<Uuid>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) at: Option<Mark>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(super) chained: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) spend: Option<&'a JobCounters>,
    /// History before this position holds no generated row that its job's record does not
    /// account for (`Inner::acct`; absent in lines written before it existed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) acct: Option<Mark>,
    /// See [`Idx::def`].
    #[serde(
        rename = "def_digest",
        skip_serializing_if = "Option::is_none",
        with = "digest_hex"
    )]
    pub(super) def: Option<DefDigest>,
}

#[derive(Deserialize)]
pub(super) struct Head {
    pub(super) name: String,
    #[serde(default)]
    pub(super) wake: Option<DateTime<Utc>>,
    #[serde(default)]
    pub(super) lease: Option<Uuid>,
    #[serde(default)]
    pub(super) at: Option<Mark>,
    #[serde(default)]
    pub(super) chained: bool,
    #[serde(default)]
    pub(super) spend: Option<Box<JobCounters>>,
    #[serde(default)]
    pub(super) acct: Option<Mark>,
    #[serde(rename = "def_digest", default, with = "digest_hex")]
    pub(super) def: Option<DefDigest>,
}

/// A job line as this release writes it: the `head`, then the members of [`EntryLine`] in its
/// order (readers that know no head ignore it).
#[derive(Serialize)]
pub(super) struct HeadedLine<'a> {
    pub(super) head: HeadRef<'a>,
    pub(super) job: &'a JobRecord,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) mark: Option<Mark>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) rows_to: Option<Mark>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) at: Option<Mark>,
}

/// How every headed line begins (`serde_json` writes the struct above compactly, head first).
pub(super) const HEAD_KEY: &[u8] = b"{\"head\":";

/// Where a job's newest line lives: `len` bytes (without the newline) at `off` of the journal
/// or of the snapshot this handle loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Loc {
    pub(super) journal: bool,
    pub(super) off: u64,
    pub(super) len: u32,
    /// For a snapshot line: the checksum it carries (its `"crc32"` member), which a read
    /// compares — the index (`jobs.index`, see [`super::index`]) was made from that line, and
    /// the line was not verified when the index was loaded.
    pub(super) crc: Option<u32>,
}

/// Verify a job line read at `loc`: its own checksum and, for a snapshot line, that it is the
/// line the index was made from. `Err((column, what))`.
pub(super) fn verify_at(line: &[u8], loc: Loc) -> Result<(), (u64, String)> {
    filefmt::verify_line(line, "job record")?;
    match loc.crc {
        Some(want) if filefmt::line_crc(line) != Some(want) => Err((
            1,
            format!(
                "job record is not the line {} recorded here (line checksum {:08x}, index {want:08x}): \
                 the snapshot was changed in place",
                super::layout::INDEX_FILE,
                filefmt::line_crc(line).unwrap_or_default()
            ),
        )),
        _ => Ok(()),
    }
}

/// The index entry of one job (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Slim {
    /// `None` while the job's only copy is its record in `Inner::hot` (created or rewritten by
    /// this operation and not written yet).
    pub(super) loc: Option<Loc>,
    pub(super) wake: Option<DateTime<Utc>>,
    pub(super) at: Option<Mark>,
    pub(super) lease: Option<Uuid>,
    /// See [`Idx::spend`].
    pub(super) spend: Option<Box<JobCounters>>,
    /// See [`Idx::def`].
    pub(super) def: Option<DefDigest>,
}

/// A job's parsed record, for the operation that reads or changes it.
pub(super) struct Cached {
    pub(super) rec: JobRecord,
    pub(super) sched: Option<Compiled>,
    /// The anchor `sched` was compiled from (see [`Cached::refresh_sched`]).
    sched_from: DateTime<Utc>,
    pub(super) mark: Option<Mark>,
    /// Where history ended when this record was last written (see [`EntryLine::rows_to`]).
    pub(super) rows_to: Option<Mark>,
    /// History position when the record was last written (see [`EntryRef::at`]).
    pub(super) at: Option<Mark>,
    /// The digest of `rec.def` when known without computing it (the head of the line it was
    /// read from says it); forgotten when the definition changes ([`Cached::recompile`]). A
    /// claim or completion writes every record it changes, and serialising and hashing each
    /// definition again was a tenth of a 1 000-job claim's CPU.
    def_digest: Option<DefDigest>,
}

impl Cached {
    pub(super) fn new(rec: JobRecord, mark: Option<Mark>) -> Cached {
        let sched = match rules::slots::compile(&rec) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(job = %rec.def.name, "stored schedule does not compile: {e}");
                None
            }
        };
        Cached {
            sched_from: rec.rt.anchor,
            rec,
            sched,
            mark,
            rows_to: None,
            at: None,
            def_digest: None,
        }
    }

    /// This record's definition has digest `d` (from the head of its line), when `Some`.
    pub(super) fn knowing_digest(mut self, d: Option<DefDigest>) -> Cached {
        self.def_digest = d;
        self
    }

    pub(super) fn from_entry(e: Entry) -> Cached {
        let mut c = Cached::new(e.job, e.mark);
        c.rows_to = e.rows_to;
        c.at = e.at;
        c
    }

    /// Compile the schedule again from the record (its definition changed).
    pub(super) fn recompile(&mut self) {
        self.def_digest = None;
        self.sched = rules::slots::compile(&self.rec).ok();
        self.sched_from = self.rec.rt.anchor;
    }

    /// Compile the schedule again when the record's anchor moved since: a job stored again
    /// after a clock step (`rules::slots::rederive`) has a grid of another phase.
    pub(super) fn refresh_sched(&mut self) {
        if self.sched_from != self.rec.rt.anchor {
            self.recompile();
        }
    }

    /// What the index keeps of this record.
    pub(super) fn idx(&self) -> Idx {
        let leased = self.rec.rt.lease.as_ref();
        Idx {
            wake: if self.sched.is_none() && leased.is_none() {
                None
            } else {
                plan::claim::wakeup(&self.rec)
            },
            lease: leased.map(|l| l.run_id),
            at: self.at,
            chained: !self.rec.def.after.is_empty(),
            spend: spend_of(&self.rec.rt.counters),
            acct: None,
            def: self.record_digest(),
        }
    }

    /// [`plan::apply::record_digest`] of the record, from the known digest when there is one.
    fn record_digest(&self) -> Option<DefDigest> {
        let Some(known) = self.def_digest else {
            return plan::apply::record_digest(&self.rec);
        };
        #[cfg(test)]
        assert_eq!(
            plan::apply::def_digest(&self.rec.def),
            Some(known),
            "a stale definition digest for '{}'",
            self.rec.def.name
        );
        let removed = self.rec.rt.retired
            && self.rec.rt.retired_reason.as_deref()
                == Some(crate::store::rules::reasons::REASON_REMOVED);
        (!removed).then_some(known)
    }

    /// Encode this record as a job line (head first) onto `out`, with the store's accounted
    /// mark `acct` in its head. Returns what the head says (the index entry of the line).
    pub(super) fn encode(
        &self,
        name: &str,
        acct: Option<Mark>,
        out: &mut Vec<u8>,
    ) -> StoreResult<Idx> {
        let idx = self.idx();
        encode_checked_line(
            out,
            "job record",
            &HeadedLine {
                head: HeadRef {
                    name,
                    wake: idx.wake,
                    lease: idx.lease,
                    at: idx.at,
                    chained: idx.chained,
                    spend: idx.spend.as_deref(),
                    acct,
                    def: idx.def,
                },
                job: &self.rec,
                mark: self.mark,
                rows_to: self.rows_to,
                at: self.at,
            },
        )?;
        Ok(idx)
    }
}

/// Where a job line's `job` member (the record) is: after the `head` when the line has one,
/// else first. Only the head is scanned (skipped, not parsed into values) and the record's
/// extent; `None` when the line is not shaped so.
pub(super) fn job_member(line: &[u8]) -> Option<std::ops::Range<usize>> {
    const JOB_KEY: &[u8] = b"\"job\":";
    let skip = |from: usize| -> Option<usize> {
        let rest = line.get(from..)?;
        let mut values =
            serde_json::Deserializer::from_slice(rest).into_iter::<serde::de::IgnoredAny>();
        values.next()?.ok()?;
        Some(from + values.byte_offset())
    };
    let start = if line.starts_with(HEAD_KEY) {
        let end = skip(HEAD_KEY.len())?;
        line.get(end..)?.strip_prefix(b",")?.strip_prefix(JOB_KEY)?;
        end + 1 + JOB_KEY.len()
    } else {
        line.strip_prefix(b"{")?.strip_prefix(JOB_KEY)?;
        1 + JOB_KEY.len()
    };
    Some(start..skip(start)?)
}

/// Where job `name`'s line lives (an internal error when it has none: its only copy would be
/// a record in `hot`, which the callers look at first).
pub(super) fn line_loc(name: &str, slim: &Slim) -> StoreResult<Loc> {
    slim.loc.ok_or_else(|| {
        StoreError::Backend(BackendError::IndexMismatch {
            job: name.to_string(),
            what: "neither a line nor a record",
        })
    })
}

/// The budget counters of a job that spent this period or holds reservations: the members
/// [`rules::period::committed`] and [`crate::store::stats::period_spend`] read, the rest
/// left empty. `None` when both would say nothing was spent (no cost, no reservation). The
/// all-time spend is kept too: it is the job's spend under `period: total`, whatever period
/// its counters were kept in before an edit of the budget's period.
pub(super) fn spend_of(c: &JobCounters) -> Option<Box<JobCounters>> {
    if !crate::store::spent_or_holds(c) {
        return None;
    }
    Some(Box::new(JobCounters {
        period_key: c.period_key.clone(),
        period_cost_usd: c.period_cost_usd,
        total_cost_usd: c.total_cost_usd,
        reservations: c.reservations.clone(),
        ..JobCounters::default()
    }))
}

/// The head of a line that has one (`None`: written without, parse the line whole).
pub(super) fn parse_head(line: &[u8]) -> Option<Result<Head, serde_json::Error>> {
    let rest = line.strip_prefix(HEAD_KEY)?;
    // One value, then stop: the rest of the line (the record) is not parsed here.
    let mut values = serde_json::Deserializer::from_slice(rest).into_iter::<Head>();
    Some(values.next().unwrap_or_else(|| {
        Err(<serde_json::Error as serde::de::Error>::custom(
            "the line's head is empty",
        ))
    }))
}

/// A job line's name and index entry, its checksum verified. `Err((column, what))`.
pub(super) fn line_index(line: &[u8]) -> Result<(String, Idx), (u64, String)> {
    filefmt::verify_line(line, "job record")?;
    index_of(line)
}

/// A job line's name and index entry (its checksum not verified). `Err((column, what))`.
pub(super) fn index_of(line: &[u8]) -> Result<(String, Idx), (u64, String)> {
    match parse_head(line) {
        Some(Ok(h)) => Ok((
            h.name,
            Idx {
                wake: h.wake,
                lease: h.lease,
                at: h.at,
                chained: h.chained,
                spend: h.spend,
                acct: h.acct,
                def: h.def,
            },
        )),
        Some(Err(e)) => Err((e.column() as u64 + HEAD_KEY.len() as u64, e.to_string())),
        None => {
            // Written without a head: parse it whole (the next compaction adds one).
            let e: Entry =
                serde_json::from_slice(line).map_err(|e| (e.column() as u64, e.to_string()))?;
            let name = e.job.def.name.clone();
            Ok((name, Cached::from_entry(e).idx()))
        }
    }
}

/// A job line's head against the head its record derives ([`Cached::idx`], as the writer wrote
/// it). The head sits inside the line's CRC, so only an edit that recomputed the CRC can make
/// them differ — but such a head would make the index skip a due job (a `wake` far ahead) or a
/// chained child (`chained` dropped) while every check of the line passes.
/// `check --store` compares them for every line (opening does not: it parses heads only, which is
/// what makes it fast). A line without a head agrees trivially. `Err((column, what))`.
pub(crate) fn head_agrees(line: &[u8]) -> Result<(), (u64, String)> {
    let Some(head) = parse_head(line) else {
        return Ok(());
    };
    let h = head.map_err(|e| (e.column() as u64 + HEAD_KEY.len() as u64, e.to_string()))?;
    let e: Entry = serde_json::from_slice(line).map_err(|e| (e.column() as u64, e.to_string()))?;
    let name = e.job.def.name.clone();
    let derived = Cached::from_entry(e).idx();
    // `acct` is the store's, not derived from the record; a line written before the
    // definition digest existed has none.
    let written = Idx {
        wake: h.wake,
        lease: h.lease,
        at: h.at,
        chained: h.chained,
        spend: h.spend,
        acct: None,
        def: if h.def.is_some() { h.def } else { derived.def },
    };
    if h.name != name || written != derived {
        return Err((
            HEAD_KEY.len() as u64 + 1,
            format!(
                "the line's head does not match its record (job '{name}'): written {:?}, \
                 derived {:?}",
                (
                    &h.name,
                    &written.wake,
                    &written.lease,
                    written.chained,
                    written.def
                ),
                (
                    &name,
                    &derived.wake,
                    &derived.lease,
                    derived.chained,
                    derived.def
                )
            ),
        ));
    }
    Ok(())
}

/// The later of two accounted marks (`Inner::acct`): every mark ever written is valid (rows are
/// only appended after it), so the furthest one known wins. A mark without a segment number
/// (format 2) is not used.
pub(super) fn later_mark(a: Option<Mark>, b: Option<Mark>) -> Option<Mark> {
    let key = |m: &Mark| m.seg.map(|s| (s, m.off));
    match (a, b) {
        (Some(x), Some(y)) => match (key(&x), key(&y)) {
            (Some(kx), Some(ky)) => Some(if ky > kx { y } else { x }),
            (Some(_), None) => Some(x),
            (None, Some(_)) => Some(y),
            (None, None) => None,
        },
        (Some(x), None) | (None, Some(x)) => x.seg.map(|_| x),
        (None, None) => None,
    }
}

/// A journal header (`{"cronsole":"journal","generation":N,"store":ID}`) carrying the
/// store's accounted mark when it is known (`"acct"`, see `Inner::acct`): a compaction leaves
/// an empty journal, and the mark must survive it. Readers that know no `acct` ignore it.
pub(super) fn journal_header(
    generation: u64,
    id: &str,
    acct: Option<Mark>,
) -> StoreResult<Vec<u8>> {
    #[derive(Serialize)]
    struct JournalHeader<'a> {
        cronsole: &'a str,
        generation: u64,
        store: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        acct: Option<Mark>,
    }
    let mut buf = Vec::new();
    super::log::encode_line(
        &mut buf,
        "store file header",
        &JournalHeader {
            cronsole: "journal",
            generation,
            store: id,
            acct,
        },
    )?;
    Ok(buf)
}

/// The `acct` member of a journal header (absent before it existed).
#[derive(Deserialize)]
pub(super) struct JournalAcct {
    #[serde(default)]
    pub(super) acct: Option<Mark>,
}

/// The snapshot's header (its line 1): the snapshot's generation and the journal it absorbed.
pub(super) fn snapshot_header(
    path: &Path,
    line: &[u8],
    id: &str,
) -> StoreResult<(u64, Option<filefmt::Absorbed>)> {
    let h: filefmt::Header = serde_json::from_slice(line).map_err(|e| json_err(path, 1, &e))?;
    if h.cronsole != "snapshot" {
        return Err(corrupt(path, 1, 1, "not a snapshot header"));
    }
    check_id(path, h.store.as_deref(), id)?;
    Ok((h.generation, h.absorbed))
}

/// The journal's header (its line 1, of `complete`: the journal's complete lines) against the
/// snapshot's `generation`: `None` when the journal's records follow the snapshot, `Some(n)`
/// when it is the journal the snapshot absorbed: its first `n` bytes are in the snapshot, and
/// only lines past them (appended while a compaction ran) are still to be read.
pub(super) fn journal_is_stale(
    path: &Path,
    line: &[u8],
    id: &str,
    generation: u64,
    absorbed: Option<filefmt::Absorbed>,
    complete: &[u8],
) -> StoreResult<Option<u64>> {
    journal_is_stale_with(path, line, id, generation, absorbed, |n| {
        Ok(usize::try_from(n)
            .ok()
            .and_then(|n| complete.get(..n))
            .map(filefmt::crc32))
    })
}

/// [`journal_is_stale`] for a journal read in pieces: `prefix(n)` is the CRC-32 of the
/// journal's first `n` bytes (`None` when it is shorter), called only when the header is one
/// generation behind.
///
/// One generation behind is what a crash between writing a new snapshot and replacing the
/// journal leaves; the snapshot says exactly which bytes of that journal it absorbed (length +
/// CRC-32), and the journal may have grown past them while the compaction ran (other writers'
/// appends, which the snapshot does not hold). Anything else (an edited header, a journal from a
/// backup) is corruption: never discard its records.
pub(super) fn journal_is_stale_with(
    path: &Path,
    line: &[u8],
    id: &str,
    generation: u64,
    absorbed: Option<filefmt::Absorbed>,
    prefix: impl FnOnce(u64) -> StoreResult<Option<u32>>,
) -> StoreResult<Option<u64>> {
    let h: filefmt::Header = serde_json::from_slice(line).map_err(|e| json_err(path, 1, &e))?;
    if h.cronsole != "journal" {
        return Err(corrupt(path, 1, 1, "not a journal header"));
    }
    check_id(path, h.store.as_deref(), id)?;
    if h.generation == generation {
        return Ok(None);
    }
    if h.generation + 1 == generation
        && let Some(a) = absorbed
        && a.len > line.len() as u64
        && prefix(a.len)? == Some(a.crc32)
    {
        return Ok(Some(a.len));
    }
    Err(corrupt(
        path,
        1,
        1,
        format!(
            "journal generation {} does not match the snapshot's ({generation}){}",
            h.generation,
            if h.generation > generation {
                format!("; is {SNAPSHOT_FILE} missing or replaced?")
            } else {
                String::new()
            }
        ),
    ))
}

pub(super) fn settings_bytes(id: &str, settings: &Settings) -> StoreResult<Vec<u8>> {
    let value = serde_json::to_value(settings).map_err(StoreError::encode("settings"))?;
    let crc32 = Some(filefmt::settings_crc(&value));
    serde_json::to_vec_pretty(&filefmt::SettingsFile {
        cronsole: "settings".to_string(),
        store: id.to_string(),
        settings: value,
        crc32,
    })
    .map_err(StoreError::encode("settings"))
}

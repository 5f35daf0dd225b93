//! The embedded file store: a directory shared safely by several processes on one
//! host through an exclusive `fs4` lock.
//!
//! Owns: the on-disk layout, locking, crash safety, the per-handle cache and history queries.
//! Must not touch: scheduling decisions (those are the plans and policies of
//! `crate::store::plan`, shared with the PostgreSQL store), clocks (every call takes `now`), the engine, the UI.
//!
//! # Modules, bottom to top (each file uses only the ones above it in this list)
//! - `layout.rs` — file names and the sizes that bound them.
//! - `holder.rs` — the lock file's record of who holds the lock, and the words of a wait that
//!   ran out.
//! - `log.rs` — the one append path both logs share (`AppendLog`) and the file helpers.
//! - `record.rs` — job lines and file headers: what a line holds and how it is checked.
//! - `segment.rs` — history segment files read without a handle (headers, seals, backwards).
//! - `table.rs` — the in-memory index of every job and the wake-up order.
//! - `index.rs` — `jobs.index`, the snapshot's heads for a fast open.
//! - `migrate.rs` — format-1 and format-2 upgrades.
//! - `handle.rs` — [`FileStore`], the cache (`Inner`) and the locked handle (`Locked`).
//! - `lines.rs` — job lines read by place, in file order, a page at a time.
//! - `compaction.rs` — a handle's compaction state (configuration, plan, built snapshot, the
//!   files a followed compaction left it reading), below the handle.
//! - `follow.rs` — a swapped-in compaction followed without reloading every job.
//! - `jobs.rs` — snapshot + journal: loading, tail reads, appends, a big apply's snapshot.
//! - `point.rs` — point handles: one job's line found without the index of every job.
//! - `compact.rs` — the usual compaction: planned under the lock, built without it, swapped
//!   in.
//! - `apply.rs` — `apply`: definitions diffed one at a time, written as one append or snapshot.
//! - `history.rs` — the open segment: verification, appends, sealing, retention, cross-check.
//! - `landed.rs` — rows a record may not account for yet (recovery and leftover scans).
//! - `query.rs` — newest-first history pages.
//! - `sync.rs` — the lock, the cache refreshed from the files, persisting rows then records.
//! - `runs.rs` — running tool loops' records (`runs/`), one write per loop step.
//! - `owners.rs` — owner records (`owners/`), one file per running engine.
//! - `clockmark.rs` — `clock.json`, the latest clock a command stored records on.
//! - `chain.rs`, `claim.rs`, `complete.rs`, `recount.rs` — the operations' store-side steps.
//! - `open.rs` — opening, creating, migrating.
//! - `store.rs` — the [`Store`](crate::store::Store) impl.
//!
//! # Layout (all human-readable; format 3, see `store/filefmt.rs`)
//! - `VERSION` — `cronsole-file-store 3` and `store <uuid>`, the store id drawn at creation.
//! - `lock` — coordination, not data: every operation holds an exclusive `flock` on it (an
//!   `apply` also notes itself in it while it holds it, `holder.rs`), waiting at most
//!   [`DEFAULT_LOCK_WAIT`] ([`BackendError::LockTimeout`](crate::store::BackendError::LockTimeout) after). flock is per open file
//!   description, so each [`FileStore`] opens its own fd, and a `Mutex` serialises threads
//!   sharing one handle.
//! - `jobs.snapshot.jsonl` — a header `{"cronsole":"snapshot","generation":N,"store":ID,
//!   "absorbed":{"len":L,"crc32":C}}` then one line per job: `{"job": JobRecord, "mark": {...}}`.
//!   Written temp + fsync + rename + fsync dir. A compaction's snapshot also names the inodes of
//!   the snapshot and journal it folded (`"folded":{"snapshot":I,"journal":J}`): a handle
//!   holding both open follows it without reloading (`follow.rs`).
//! - `jobs.journal` — header `{"cronsole":"journal","generation":N,"store":ID}` then one full job
//!   line per mutation (last line for a name wins). It is replayed when its generation equals the
//!   snapshot's. One generation behind is what a crash between writing a new snapshot and
//!   replacing the journal leaves: accepted only when the snapshot's `absorbed` matches its
//!   first bytes (length + CRC-32), and only its lines past them are replayed (appended while
//!   the compaction ran). Any other generation is corruption — an edited header can never make
//!   a reader discard records. Compaction when the journal grows past 2× the snapshot
//!   (+1 MiB), off the claim path (`compact.rs`).
//! - `jobs.index` — optional, derived: a binary cache of the snapshot's line heads, bound to
//!   the snapshot (store id, generation, length, header CRC) and written after it; opening uses
//!   it instead of reading every snapshot line, and ignores it (reading the snapshot) when it is
//!   missing, stale or damaged — never corruption (see `index.rs`).
//! - `runs/<run_id>.jsonl` — optional: a running tool loop's transcript entries, one JSON line
//!   each, appended at every step; removed when the run's row is written (recovery's `abandoned`
//!   row takes it).
//! - `owners/<owner id>.json` — optional, advisory: each running engine's record, replaced at
//!   its heartbeats; the file's modification time is the store's clock (see `owners.rs`).
//! - `clock.json` — optional, advisory: `{"cronsole":"clock","store":ID,"stored_on":T}`, the
//!   latest clock a command stored job records on; a claim on a clock behind it re-derives
//!   every job once (see `clockmark.rs`).
//! - `settings.json` — `{"cronsole":"settings","store":ID,"settings":{...}}` (temp + rename).
//! - `history.jsonl` — the open history segment: a header `{"cronsole":"history","store":ID,
//!   "segment":N}`, then one history row per line, newest at the end, each with its CRC-32
//!   (`"crc32"`, see `store/filefmt.rs`).
//! - `history/NNNNNN.jsonl` — sealed history segments `1..N-1` (oldest may be gone by
//!   retention), each ending in a seal line (see `history.rs` for the design and why).
//! - `history/first.json` — retention's mark `{"cronsole":"history-first","store":ID,
//!   "segment":K}`: the first sealed segment it kept, written (temp + rename) before it removes
//!   the older ones. Without it sealed segments start at 1; every open checks that the first
//!   required segment exists while the open segment is above it (a hand-deleted oldest segment
//!   is damage, not retention).
//!
//! Every file above but `jobs.index` is required once the store exists: missing, empty, foreign (another store
//! id), out-of-generation or unparsable is [`OpenError::Corrupt`](crate::store::OpenError::Corrupt) naming it, and nothing is
//! modified. Opening ([`FileStore::open_existing`], or the load under each lock) never writes;
//! only [`FileStore::open`] creates a store or migrates a format-1 or format-2 one (under the
//! lock).

//! # Cache and change detection
//! Each handle keeps an index of every job (where its newest line is, its wake-up, history
//! position, lease and budget counters; see `jobs.rs` for the line `head` it is read from), a
//! wake-up set (`BTreeSet<(instant, name)>`) and the journal's inode + offset — not the records:
//! an operation reads the lines of the jobs it works on and drops them when it releases the
//! lock. On each lock acquisition it stats the journal: unchanged → nothing to read (idle claim
//! is a stat and an index peek); grown → only the new tail is read; replaced → full reload.
//! Every mutation appends only the records it changed, so add / complete / pause cost O(1)
//! amortised regardless of the number of jobs.
//!
//! # Crash safety
//! Appends are one `write` of whole lines followed by `fdatasync` (`AppendLog`, one path for
//! both logs). A final line without its newline was never acknowledged: loading ignores it
//! without touching it, and the next writer cuts it (with a `warn!`) right before its append; a
//! log shorter than what this handle already read is corruption. Write order for a run's end:
//! history row(s) first, then the job record. Each job remembers where history ended when its
//! oldest live run was claimed (`mark`; `overlap: allow` runs several); before recovery writes `abandoned` for an expired lease it scans history from
//! there for the run_id, and if the run's row is already there (the process died between the two
//! writes) it finishes the job from that row instead of writing a second one.
//!
//! A completion counts as written only when its row and its job record are both durable. A
//! caller that finds its run's row already in history (another handle's or process's failed
//! persist: the engine's retry after a restart of the handle, the spool's replay) calls
//! [`Store::complete_recorded`](crate::store::Store::complete_recorded): the run's row is looked for from the claim's mark and, if
//! the record still holds the run, the record is finished from it (no second row); a record
//! that no longer holds it is left alone (no stale row). A claim recovering expired leases
//! looks for the landed row of every one of them (`overlap: allow` holds several).
//!
//! A persist that fails after its rows reached history (journal `ENOSPC`, journal or history
//! fsync `EIO`) is retried by the caller: each handle remembers the history byte ranges its
//! failed persists wrote (`Inner::unacked`, the last 64), and the retry finds its rows there —
//! a completion finishes from its landed row (`plan::complete::complete_landed`), generated
//! `missed`/`skipped` rows already there are not written again (`rules::rows::same_row`; a later
//! `missed` retry keeps only the newer slots, `rules::rows::unlanded_part`). An operation relying
//! on rows already in history fdatasyncs history before writing the records (those rows may be
//! in the page cache only). A recovery that wrote `abandoned` and died before releasing the
//! lease leaves that row; the run's owner, completing a lapsed lease (`Lease::lapsed`), looks
//! for it from the claim mark and writes its row with `supersedes_abandoned`, and queries hide
//! the superseded row. A process that dies (or fails) between a `missed`/overlap row and its
//! job record leaves that row: every job line records a history position (`rows_to`) before
//! which every row of the job is accounted for by the record, and a writer about to generate
//! rows for a job first scans history from there (`rows_since_records`, one scan per
//! operation, only when it generates rows) and writes only the slots no leftover row records
//! (every leftover row counts, not only one covering the first slot: `rules::rows::unlanded_part`).
//! A claim finds out which jobs generate rows by a probe of the step on a copy of the record
//! and scans before the real step, and a leftover row moves the job's next slot past what it
//! records (`plan::claim::skip_recorded`; its writer may have looked at a later clock), as the
//! leftovers a completion's overlap rows are trimmed against do.
//!
//! A claim that generates no row of its own does not scan from `rows_to` — yet after the clock
//! stepped back it may reach a slot a failed writer's leftover row records (seed 19652: a
//! claimer's overlap row, then its journal fsync failed; the clock stepped back; the next
//! claim ran the slot). So leftovers are also found store-wide, without reading history on
//! every claim: the **accounted mark** (`Inner::acct`, `"acct"` in the head of every job line
//! and in the journal header) is a history position before which no generated row exists
//! that its job's record does not account for. Any mark ever written stays true (rows are
//! only appended after it), so the furthest one read or written wins (`jobs::later_mark`).
//! Under each lock a handle compares it with history's end (`acct_clean`): equal — the usual
//! case, known without a read — means nothing is unaccounted, and the operation's journal
//! write moves the mark to history's new end (its own rows are accounted for by the records
//! it writes). A failed or dead writer's journal write never lands, so history then goes past
//! the mark: operations that do not look (a pause, a renewal, a completion) carry the old mark
//! forward; a claim reads the generated rows past it (`generated_after`: the stretch a failed
//! writer left, usually one batch; at most 64 MiB), evaluates every due job
//! with its rows as leftovers (`plan::claim::skip_recorded`, as the scan path does), moves the next
//! slot of the other jobs they name past what they record, and moves the mark up to the first
//! row whose job still has a slot it records ahead (`plan::claim::slots_behind`; the clock stepped
//! back behind the writer's), or to history's end. A store holding no job is trivially
//! accounted for (a new job's `rows_to` starts at history's end). A store written before the
//! mark existed has none (no line or header carries it), and no writer invents one: its
//! claims scan only when they generate rows, as before.
//! `rows_to` moves to history's end only when the writer knows nothing unaccounted lies
//! between (it scanned, or the stretch is at most 64 KiB and holds no generated row of the job
//! and no `abandoned` row of a run the record still leases: `rows_unaccounted`); any other
//! record write — a pause, a renewal, a budget settlement, a completion without overlap rows —
//! keeps it, so it can never hide a leftover row. The run's own completion looks in that short
//! stretch for a dead recoverer's `abandoned` row even when its lease does not look lapsed
//! (the clock stepped back).
//!
//! Journal lines are treated like history rows relied on: an operation about to append history
//! rows first fdatasyncs journal lines it did not make durable itself (`Inner::journal_synced`).
//! A process killed between its journal write and its fdatasync leaves its lines in the page
//! cache, another acts on them (a recovery writes `abandoned` for a lease read there), and a
//! power loss must not keep that row while taking back the line it was written for (the next
//! open's cross-check would refuse the store).
//!
//! fsyncgate: an append whose write or fsync fails is cut back to the log's previous end (and
//! the cut synced) under the same lock, before anyone reads it: after a failed fsync Linux may
//! never write those bytes while still serving them from the page cache, so nothing may follow
//! them. When the cut's own fsync fails too, the handle keeps the cut owed
//! (`AppendLog::cut_unsynced`, also across the reload a failed persist causes) and cuts and
//! syncs again before writing any history row on the strength of it (`sync_journal`; seed
//! 29376: a retried claim's `missed` row beside the failed claim's lease line a power loss
//! kept). A handle that (re)loaded a file through its name syncs the directory before its next
//! write, so a rename another process did not get to sync cannot be taken back by a power loss
//! after this handle acknowledged something relying on that file.
//!
//! # History corruption checks
//! Every history row carries a CRC-32 of itself, so a flipped byte that still parses is caught
//! by whoever reads the row. History is sealed into segments (`history.rs`): every open
//! verifies the whole open segment (at most [`SEGMENT_BYTES`] plus one batch) row by row —
//! checksum and parse — and appends only ever go there, so nothing is appended after an
//! unverified byte while a start stays flat at 10 000 000 rows; sealed segments are immutable,
//! each row is verified by whoever reads it and `cronsole check` verifies every segment.
//!
//! # Journal/history cross-check
//! Each job record carries `at`, the history position when it was written (history is
//! fdatasynced up to there first). Every open checks that history reaches every record's
//! position and that the open segment's rows after a job's position are ones a crash (or a
//! failed record write) between a row and its record can leave: the end of a run the record
//! still holds — any of its leases; the index knows the first (the line's `head`), and the
//! record is read whole only for a job whose rows that does not explain. Otherwise a file was
//! cut short (by hand, a faulty disk) and the store is corrupt — never a torn tail to cut
//! (`history.rs`, `cross_check`). A journal cut back to before a run's claim leaves a row of
//! a run the record does not hold: refused. A cut that removed only a run's end line is
//! indistinguishable from the failed write, and harmless: the run is finished from its row.
//!
//! # Retention
//! `compact_history` keeps the newest N rows per job (default 10 000) and/or rows newer than a
//! maximum age: it seals the open segment, then rewrites only the sealed segments that lose
//! rows (temp + fsync + rename + fsync dir) and deletes the oldest ones that lose them all.
//! `complete` runs it automatically when history grew by more than it held after the last
//! retention (and by over 64 MiB).

mod apply;
mod chain;
mod claim;
mod clockmark;
mod compact;
mod compaction;
mod complete;
mod follow;
mod handle;
mod history;
pub(crate) mod holder;
mod index;
mod jobs;
mod landed;
mod layout;
mod lines;
mod log;
mod migrate;
mod open;
mod owners;
mod pins;
mod point;
mod query;
mod record;
mod recount;
mod runs;
mod segment;
mod store;
mod sync;
mod table;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_clock;
#[cfg(test)]
mod tests_digest;

pub use compaction::Compaction;
pub use handle::FileStore;
pub use index::INDEX_MIN_BYTES;
pub(crate) use index::{IndexCheck, check_index};
pub(crate) use layout::INDEX_FILE;
pub use layout::{DEFAULT_KEEP_PER_JOB, DEFAULT_LOCK_WAIT, SEGMENT_BYTES, holds_a_store};
pub(crate) use record::head_agrees;

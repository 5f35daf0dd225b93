//! The PostgreSQL store: the same guarantees as the file store, across hosts.
//!
//! Owns: the `PgStore` type, its private tokio runtime, the connection pool (`pool`), the schema
//! and migrations (`schema`), the LISTEN/NOTIFY change feed (`listen`), and the SQL that maps the
//! [`Store`](crate::store::Store) trait onto tables. Must not touch: the misfire / recovery / retirement
//! decisions themselves — those are pure functions over a `JobRecord` shared with the file store;
//! this module only provides the locking (one transaction, `FOR UPDATE SKIP LOCKED`) around them.
//! # Files, bottom to top (each uses only the ones above it)
//! - `db.rs` — errors, JSON column codecs, the typed-query trait.
//! - `connect.rs` — URL and TLS settings (libpq semantics), the rustls connector.
//! - `schema.rs` — tables, migrations, the NOTIFY channel.
//! - `stmts.rs` — the hot statements, prepared once per connection.
//! - `pool.rs` — connections, the backoff gate, each connection's statements.
//! - `listen.rs` — the LISTEN/NOTIFY change feed.
//! - `tx.rs` — the steps inside one transaction that operations share.
//! - `clock.rs` — whose clock the decisions read ([`PgClock`]: the database's).
//! - `handle.rs` — [`PgStore`], opening, the runtime bridge, `check`.
//! - `ops.rs`, `claim.rs`, `complete.rs`, `reserve.rs` — the operations' transactions.
//! - `history.rs` — history pages and the history reader.
//! - `owners.rs` — owner records (heartbeats, measured on the database's clock).
//! - `store.rs` — the [`Store`](crate::store::Store) impl.
//!
//!
//! Runtime bridging: the `Store` trait is synchronous and is called from the engine's
//! `spawn_blocking` threads, from plain threads (CLI commands, tests) and possibly from an async
//! task by mistake. Every operation is therefore *spawned* onto a runtime the store owns and the
//! caller waits on a std channel: no `block_on`, so no "runtime within a runtime" panic from any
//! calling context, and the store runtime never blocks on itself. The runtime is shut down in the
//! background on drop, which is legal from any context.
//!
//! Decisions:
//! - One JSONB `record` column holds the whole `JobRecord` (the single source of truth); the
//!   indexed columns are a projection rewritten with it in the same statement, so they can never
//!   disagree with it.
//! - Every mutation bumps the `cronsole_store_version` sequence; the change token is the highest
//!   version seen. Operator commands NOTIFY it inside their transaction; the engine's claims,
//!   completions, renewals and reservations have it NOTIFYed by the listener after the commit,
//!   because PostgreSQL commits NOTIFYing transactions one WAL flush at a time (see `listen`).
//! - The hot statements are server-side prepared once per connection and kept with it in the
//!   pool (`Stmts`): each is parsed and planned once per connection, not once per call.
//! - Operations time out after `PgOptions::op_timeout` (default 15 s) with a retryable
//!   `BackendError::Database`; a transaction cut off that way is rolled back by the server.
//! - `HistoryQuery::limit == 0` means "no limit" (as in the file store).
//! - Renewals and completions are fenced by `run_id` alone (the owner rides in the lease), the
//!   same rule as the file store; a completion that lost its lease is appended with
//!   `stale_lease: true` and only its cost is counted — unless the run was recorded
//!   `abandoned` (its owner was paused past its lease, not dead): then the late row is the
//!   run's real end, written with `supersedes_abandoned`, and it replaces the `abandoned` row
//!   (deleted in the same transaction; the file store, append-only, hides it instead), so every
//!   query shows one row per run under the status that happened (`plan::complete::complete_step`).
//! - Lease expiry is detected by the next owner that claims: it writes the `abandoned` row (with
//!   its own owner id as `owner`, the lost owner named in `reason`) and applies `finish_run`.
//!   A completion and its lease release commit in one transaction, so a row never lands
//!   without its record. But a completion whose `COMMIT` reached the server and whose reply was
//!   lost (connection reset) is retried by the engine: when its job no longer holds its lease,
//!   the retry looks up its run_id in history, and if its own row is there (same run, status
//!   and owner) it finishes from it (`plan::complete::complete_landed`) and writes nothing again.
//! - `complete_many` commits the whole batch in one transaction (one WAL flush), locking its
//!   jobs in name order (two owners' batches cannot deadlock).
//! - A claim locks at most as many due rows per round as it has capacity left (1…1000): each
//!   locked row is a WAL record and is hidden from the other owners until the commit.
//! - History retention: every 64 completions a process trims that job's history to the newest
//!   10 000 rows (the file store's default), in insertion order.
//! - `next_wakeup` is `min(wakeup)` over all jobs (it ignores `now`, like the file store).
//! - One clock for every owner: the decisions read the database's clock in their transaction,
//!   not the caller's `now` (`clock`), so owners whose clocks disagree agree on leases.
//! - TLS follows libpq (`sslmode`, `sslrootcert`, `sslcert`, `sslkey`; default `prefer`), and
//!   passwords come from the URL, `PGPASSWORD` or the pgpass file: see `connect`.

mod claim;
mod clock;
mod complete;
pub(crate) mod connect;
mod db;
mod handle;
mod history;
mod listen;
mod ops;
mod owners;
mod pins;
mod pool;
mod rederive;
mod reserve;
mod schema;
mod stmts;
mod store;
mod tx;

pub use clock::PgClock;
pub use handle::{PgOptions, PgStore};

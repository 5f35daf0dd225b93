//! PostgreSQL store: infrastructure behaviour (schema, migrations, runtime bridging, the change
//! feed, fencing) against a real server. Each test gets its own database.
#![allow(clippy::unwrap_used)] // test code

use crate::conformance;
use crate::pg_db_or_skip;
use crate::support;
use crate::support::wait::wait_until;
use cronsole::store::{BackendError, OpenError, OperationError};

use cronsole::testkit::store::ClaimAt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use cronsole::store::postgres::{PgClock, PgOptions, PgStore};
use cronsole::store::{HistoryReader, Store, StoreError};

fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .unwrap()
        .to_utc()
}

/// A store deciding with the caller's `now`: these tests drive time by hand.
fn by_hand(url: &str) -> PgStore {
    let opts = PgOptions {
        clock: PgClock::Caller,
        ..Default::default()
    };
    PgStore::open_with(url, opts).unwrap()
}

#[test]
fn schema_is_created_once_even_when_owners_start_together() {
    let url = pg_db_or_skip!();
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || PgStore::open(&url).map(|_| ()))
        })
        .collect();
    for h in handles {
        h.join().unwrap().unwrap();
    }
    // Re-opening an up-to-date database is a no-op.
    let s = by_hand(&url);
    assert!(s.jobs().unwrap().is_empty());
    assert!(s.location().starts_with("postgres://postgres@127.0.0.1:"));
}

/// Records written before the `def_digest` column existed have none: the first re-apply reads
/// them whole and writes each once with its digest; the next one writes nothing. A digest the
/// file does not match (an edit) is read and updated.
#[test]
fn a_reapply_gives_records_without_a_digest_one_then_writes_nothing() {
    let url = pg_db_or_skip!();
    let s = by_hand(&url);
    let jobs: Vec<_> = (0..5)
        .map(|i| conformance::every(&format!("d{i}"), 60))
        .collect();
    s.apply(&conformance::file(jobs.clone()), t0()).unwrap();
    support::pg::exec(&url, "UPDATE cronsole_jobs SET def_digest = NULL").unwrap();
    let token = s.change_token().unwrap();
    let r = s.apply(&conformance::file(jobs.clone()), t0()).unwrap();
    assert_eq!(r.unchanged.len(), 5, "{r:?}");
    assert_ne!(s.change_token().unwrap(), token, "the digests were written");
    let token = s.change_token().unwrap();
    let r = s.apply(&conformance::file(jobs.clone()), t0()).unwrap();
    assert_eq!(r.unchanged.len(), 5, "{r:?}");
    assert_eq!(
        s.change_token().unwrap(),
        token,
        "an unchanged re-apply wrote"
    );
    let mut edited = jobs;
    edited[2] = conformance::every("d2", 90);
    let r = s.apply(&conformance::file(edited), t0()).unwrap();
    assert_eq!(r.updated, vec!["d2"]);
}

/// An `abandoned` row's `recovered_by` is projected into its column (operators' SQL): the
/// owner that recovered the run, and nothing on the rows a run's own owner wrote.
#[test]
fn the_recovering_owner_is_in_the_history_column() {
    let url = pg_db_or_skip!();
    let s = by_hand(&url);
    let t = |secs: i64| t0() + chrono::Duration::seconds(secs);
    s.apply(&conformance::file(vec![conformance::every("j", 60)]), t(0))
        .unwrap();
    let c = conformance::claim(&s, "dead", t(60), 10).claims.remove(0);
    let o = conformance::claim(&s, "rescuer", t(91), 10);
    assert_eq!(o.rows[0].recovered_by.as_deref(), Some("rescuer"), "{o:?}");
    assert_eq!(o.rows[0].run_id, c.run_id);
    support::pg::exec(
        &url,
        "DO $$ BEGIN
           IF (SELECT count(*) FROM cronsole_history
               WHERE status = 'abandoned' AND recovered_by = 'rescuer') <> 1
              OR (SELECT count(*) FROM cronsole_history WHERE recovered_by IS NULL)
                 <> (SELECT count(*) FROM cronsole_history WHERE status <> 'abandoned')
           THEN RAISE EXCEPTION 'recovered_by column: %',
               (SELECT json_agg(json_build_array(status, recovered_by)) FROM cronsole_history);
           END IF;
         END $$;",
    )
    .unwrap();
}

/// A first apply larger than one upsert statement's chunk stores every job, and the same file
/// again writes nothing.
#[test]
fn an_apply_of_more_jobs_than_one_statement_carries_stores_them_all() {
    let url = pg_db_or_skip!();
    let s = by_hand(&url);
    let jobs: Vec<_> = (0..2_345)
        .map(|i| conformance::every(&format!("c{i:05}"), 60))
        .collect();
    let r = s.apply(&conformance::file(jobs.clone()), t0()).unwrap();
    assert_eq!(r.created.len(), 2_345);
    assert_eq!(s.jobs().unwrap().len(), 2_345);
    let token = s.change_token().unwrap();
    let r = s.apply(&conformance::file(jobs), t0()).unwrap();
    assert_eq!(r.unchanged.len(), 2_345);
    assert_eq!(s.change_token().unwrap(), token);
}

#[test]
fn a_newer_schema_is_refused_not_repaired() {
    let url = pg_db_or_skip!();
    drop(by_hand(&url));
    support::pg::exec(&url, "UPDATE cronsole_schema SET version = 99").unwrap();
    let err = PgStore::open(&url).err().expect("must refuse");
    assert!(
        matches!(err, StoreError::Open(OpenError::Version { .. })),
        "{err}"
    );
    assert!(err.is_bad_input());
    assert!(err.to_string().contains("99"), "{err}");
}

#[test]
fn bad_urls_are_clear_errors_without_the_password() {
    let err = PgStore::open("postgres://u:secret@127.0.0.1:5432/db?sslmode=bogus")
        .err()
        .unwrap();
    assert!(
        matches!(err, StoreError::Open(OpenError::BadLocation { .. })),
        "{err}"
    );
    assert_eq!(err.exit_code(), 2, "a bad URL is bad input");
    assert!(!err.to_string().contains("secret"), "{err}");
    let err = PgStore::open("mysql://u@h/db").err().unwrap();
    assert!(err.to_string().contains("postgres://"), "{err}");
}

#[test]
fn an_unreachable_server_is_a_retryable_database_error() {
    // Port 1 refuses connections.
    let err = PgStore::open("postgres://postgres@127.0.0.1:1/x")
        .err()
        .unwrap();
    assert!(
        matches!(err, StoreError::Backend(BackendError::Database { .. })),
        "{err}"
    );
    assert!(!err.is_bad_input());
    assert!(
        err.is_retryable(),
        "a server that is down is worth retrying"
    );
    assert!(
        std::error::Error::source(&err).is_some(),
        "the driver's error is kept as the source"
    );
}

#[test]
fn usable_from_plain_threads_blocking_threads_and_async_tasks() {
    let url = pg_db_or_skip!();
    let store: Arc<dyn Store> = Arc::new(by_hand(&url));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let s = Arc::clone(&store);
        let n = tokio::task::spawn_blocking(move || s.jobs().map(|j| j.len()))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(n, 0);
        // Called straight from an async task (not recommended, but must not panic).
        assert!(store.settings().is_ok());
    });
    // Dropping the last handle inside an async context must not panic either.
    rt.block_on(async move {
        let s = store;
        drop(s);
    });
}

#[test]
fn change_token_is_served_by_the_listener_and_is_cheap() {
    let url = pg_db_or_skip!();
    let s = by_hand(&url);
    wait_until("the listener", Duration::from_secs(10), || {
        s.listener_alive()
    });
    let a = s.change_token().unwrap();
    // An outside NOTIFY with a new version reaches us through LISTEN.
    support::pg::exec(
        &url,
        "SELECT pg_notify('cronsole_changed', nextval('cronsole_store_version')::text)",
    )
    .unwrap();
    wait_until("the notification", Duration::from_secs(1), || {
        s.change_token().unwrap() != a
    });
    let start = Instant::now();
    for _ in 0..10_000 {
        s.change_token().unwrap();
    }
    // No round trip per call: 10k calls in far less than one network round trip each.
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn renew_of_an_unknown_job_names_it() {
    let url = pg_db_or_skip!();
    let s = by_hand(&url);
    let err = s.renew("ghost", uuid::Uuid::new_v4(), t0()).err().unwrap();
    assert!(
        matches!(err, StoreError::Operation(OperationError::NoSuchJob(ref n)) if n == "ghost"),
        "{err}"
    );
}

#[test]
fn pause_from_another_connection_reaches_a_listening_owner_within_a_second() {
    let url = pg_db_or_skip!();
    let owner = by_hand(&url);
    let cli = by_hand(&url); // `cronsole pause` in another process
    let mut d = conformance::every("j", 60);
    d.lease_seconds = 30.0;
    cli.apply(&conformance::file(vec![d]), t0()).unwrap();
    wait_until("the listener", Duration::from_secs(10), || {
        owner.listener_alive()
    });
    let mut worst = Duration::ZERO;
    for (i, paused) in [true, false, true, false, true].into_iter().enumerate() {
        // Let the previous change arrive first, so each round measures its own notification.
        let before = owner.change_token().unwrap();
        cli.set_paused("j", paused, t0() + chrono::Duration::seconds(i as i64))
            .unwrap();
        let took = wait_until(
            "the pause to reach the owner",
            Duration::from_secs(1),
            || owner.change_token().unwrap() != before,
        );
        assert_eq!(owner.job("j").unwrap().unwrap().rt.paused, paused);
        worst = worst.max(took);
    }
    let q = cli.request_trigger("j", t0()).unwrap();
    assert_eq!(q, cronsole::store::TriggerOutcome::Queued);
    eprintln!("NOTIFY latency, worst of 5 pause/resume rounds: {worst:?}");
    assert!(worst < Duration::from_secs(1));
    assert!(owner.notifications_received() >= 5);
}

#[test]
fn history_retention_keeps_the_newest_rows_of_a_job() {
    let url = pg_db_or_skip!();
    let s = by_hand(&url);
    s.apply(
        &conformance::file(vec![
            conformance::every("a", 60),
            conformance::every("b", 60),
        ]),
        // One interval before the first slot, 1000.
        conformance::t(940),
    )
    .unwrap();
    for k in 0..4 {
        let now = conformance::t(1000 + 60 * k);
        for c in conformance::claim(&s, "o", now, 10).claims {
            conformance::done(&s, &c, "o", cronsole::model::Status::Succeeded, now);
        }
    }
    assert_eq!(s.trim_history("a", 2).unwrap(), 2);
    let q = |job: &str| {
        s.history(&cronsole::store::HistoryQuery {
            job: Some(job.into()),
            ..Default::default()
        })
        .unwrap()
    };
    let a = q("a");
    assert_eq!(a.len(), 2);
    assert_eq!(a[0].slot, Some(conformance::t(1180)), "newest kept");
    assert_eq!(q("b").len(), 4, "other jobs untouched");
}

/// `check` on PostgreSQL decodes every record and row and names the bad ones.
#[test]
fn check_names_every_undecodable_job_and_history_row() {
    let url = pg_db_or_skip!();
    let s = by_hand(&url);
    let file = cronsole::model::JobsFile {
        settings: Default::default(),
        jobs: vec![
            cronsole::testkit::jobs::command_job("a", 60),
            cronsole::testkit::jobs::command_job("b", 60),
        ],
    };
    // One interval before the first slot, t0.
    s.apply(&file, t0() - chrono::Duration::seconds(60))
        .unwrap();
    let out = s.claim_at(t0(), "o", 2);
    for c in out.claims {
        let job = c.job.def.name.clone();
        let row = cronsole::model::HistoryRow::new(
            &job,
            cronsole::model::Status::Succeeded,
            c.trigger,
            c.slot,
            "o",
            t0(),
        );
        s.complete(cronsole::store::Completion {
            job,
            run_id: c.run_id,
            owner: "o".into(),
            now: t0(),
            row,
            state: None,
            hold_until: None,
        })
        .unwrap();
    }
    let ok = s.check().unwrap();
    assert!(ok.ok(), "{:?}", ok.problems);
    assert_eq!((ok.jobs, ok.history_rows), (2, 2));
    support::pg::exec(
        &url,
        "UPDATE cronsole_jobs SET record = '{\"nope\": 1}' WHERE name = 'b'",
    )
    .unwrap();
    support::pg::exec(
        &url,
        "UPDATE cronsole_history SET row = '{\"x\": 1}' WHERE seq = (SELECT min(seq) FROM cronsole_history)",
    )
    .unwrap();
    let bad = s.check().unwrap();
    assert!(!bad.ok());
    let text: Vec<String> = bad.problems.iter().map(|p| p.to_string()).collect();
    assert_eq!(text.len(), 2, "{text:?}");
    assert!(
        text.iter()
            .any(|t| t.contains("cronsole_jobs") && t.contains("job 'b'")),
        "{text:?}"
    );
    assert!(
        text.iter().any(|t| t.contains("cronsole_history")),
        "{text:?}"
    );
}

/// The PostgreSQL store id is drawn once when the schema is created,
/// survives reopening, is reported by `check`, and a deleted id row is reported as damage.
#[test]
fn store_id_is_drawn_once_and_reported_by_check() {
    let url = pg_db_or_skip!();
    let s = by_hand(&url);
    let id = s.store_id().expect("a new store has an id").to_string();
    assert!(uuid::Uuid::parse_str(&id).is_ok(), "{id}");
    let again = by_hand(&url);
    assert_eq!(
        again.store_id(),
        Some(id.as_str()),
        "reopening keeps the id"
    );
    let r = s.check().unwrap();
    assert!(r.ok(), "{:?}", r.problems);
    assert_eq!(r.store_id.as_deref(), Some(id.as_str()));
    support::pg::exec(&url, "DELETE FROM cronsole_store").unwrap();
    let bad = s.check().unwrap();
    assert!(!bad.ok());
    assert!(
        bad.problems
            .iter()
            .any(|p| p.location.ends_with("cronsole_store") && p.what.contains("store id")),
        "{:?}",
        bad.problems
    );
    let reopened = by_hand(&url);
    assert_eq!(
        reopened.store_id(),
        None,
        "opening never re-draws a deleted id"
    );
}

/// A loopback TCP proxy in front of the test server that, once armed, lets one client `COMMIT`
/// (a simple query of exactly `COMMIT`, what `Transaction::commit` sends) reach the server,
/// waits for the server's reply — so the commit has happened — then drops that reply and resets
/// the client's connection: the client cannot know whether its transaction committed.
struct CommitCutter {
    port: u16,
    armed: Arc<std::sync::atomic::AtomicBool>,
    cuts: Arc<std::sync::atomic::AtomicU64>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl CommitCutter {
    fn start(upstream: u16) -> CommitCutter {
        use std::io::{Read, Write};
        use std::net::{Shutdown, TcpListener, TcpStream};
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed = Arc::new(AtomicBool::new(false));
        let cuts = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, k, st) = (Arc::clone(&armed), Arc::clone(&cuts), Arc::clone(&stop));
        std::thread::spawn(move || {
            // The simple-query message `Q`, length 11, "COMMIT\0".
            const COMMIT: &[u8] = b"Q\0\0\0\x0bCOMMIT\0";
            while !st.load(Ordering::SeqCst) {
                let Ok((client, _)) = listener.accept() else {
                    // The listener is non-blocking: the accept loop's pace.
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                };
                let _ = client.set_nonblocking(false);
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                let cut = Arc::new(AtomicBool::new(false));
                let (mut c_in, mut s_out) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (a, cut2) = (Arc::clone(&a), Arc::clone(&cut));
                std::thread::spawn(move || {
                    let mut buf = [0u8; 8192];
                    loop {
                        let n = match c_in.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        if buf[..n].windows(COMMIT.len()).any(|w| w == COMMIT)
                            && a.swap(false, Ordering::SeqCst)
                        {
                            cut2.store(true, Ordering::SeqCst);
                        }
                        if s_out.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = s_out.shutdown(Shutdown::Both);
                });
                let (mut s_in, mut c_out) = (server, client);
                let k = Arc::clone(&k);
                std::thread::spawn(move || {
                    let mut buf = [0u8; 8192];
                    loop {
                        let n = match s_in.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        if cut.load(Ordering::SeqCst) {
                            // The server answered the COMMIT: it committed. Lose the answer.
                            k.fetch_add(1, Ordering::SeqCst);
                            let _ = c_out.shutdown(Shutdown::Both);
                            let _ = s_in.shutdown(Shutdown::Both);
                            return;
                        }
                        if c_out.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = c_out.shutdown(Shutdown::Both);
                });
            }
        });
        CommitCutter {
            port,
            armed,
            cuts,
            stop,
        }
    }

    fn arm(&self) {
        self.armed.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    fn cuts(&self) -> u64 {
        self.cuts.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for CommitCutter {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

fn port_of(url: &str) -> u16 {
    let hostport = url.split('@').nth(1).unwrap().split('/').next().unwrap();
    hostport.rsplit(':').next().unwrap().parse().unwrap()
}

/// A completion whose `COMMIT` reached the server but whose reply was lost (the
/// connection reset right after) is retried, and the retry finds its own row: one row per run,
/// never a second (`stale_lease`) one, never none. Both paths: a batch of two, then one alone.
#[test]
fn a_completion_retried_after_its_commit_reply_was_lost_writes_one_row() {
    use cronsole::model::{HistoryRow, Status};
    use cronsole::store::{Completion, HistoryQuery};
    let url = pg_db_or_skip!();
    let port = port_of(&url);
    let proxy = CommitCutter::start(port);
    let proxied = url.replacen(&format!(":{port}/"), &format!(":{}/", proxy.port), 1);
    let opts = PgOptions {
        pool_size: 1,
        clock: PgClock::Caller,
        ..Default::default()
    };
    let s = PgStore::open_with(&proxied, opts).unwrap();
    let direct = by_hand(&url);
    s.apply(
        &conformance::file(vec![
            conformance::every("a", 60),
            conformance::every("b", 60),
            conformance::every("c", 60),
        ]),
        // One interval before the first slot, t0.
        t0() - chrono::Duration::seconds(60),
    )
    .unwrap();
    let claims = conformance::claim(&s, "o", t0(), 3).claims;
    assert_eq!(claims.len(), 3);
    let completion = |c: &cronsole::store::Claim| {
        let job = c.job.def.name.clone();
        let mut row = HistoryRow::new(&job, Status::Succeeded, c.trigger, c.slot, "o", t0());
        row.run_id = c.run_id;
        Completion {
            job,
            run_id: c.run_id,
            owner: "o".into(),
            now: t0(),
            row,
            state: None,
            hold_until: None,
        }
    };
    let rows_of = |run: uuid::Uuid| {
        direct
            .history(&HistoryQuery {
                run_id: Some(run),
                ..Default::default()
            })
            .unwrap()
    };
    // The engine's loop: retry with a pause until the store answers.
    let retry = |batch: Vec<Completion>| {
        for _ in 0..50 {
            let out = s.complete_many(batch.clone());
            if out.iter().all(|r| r.is_ok()) {
                return out.into_iter().map(|r| r.unwrap()).collect::<Vec<_>>();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("the retried completions never went through");
    };
    let rounds: [Vec<Completion>; 2] = [
        vec![completion(&claims[0]), completion(&claims[1])],
        vec![completion(&claims[2])],
    ];
    for batch in rounds {
        proxy.arm();
        let before = proxy.cuts();
        let first = s.complete_many(batch.clone());
        assert_eq!(proxy.cuts(), before + 1, "the COMMIT reply was cut");
        assert!(
            first.iter().all(|r| r.is_err()),
            "an unknown commit outcome is an error: {first:?}"
        );
        for c in &batch {
            // It did commit: the lease is released and the row is there.
            assert!(direct.job(&c.job).unwrap().unwrap().rt.lease.is_none());
            assert_eq!(rows_of(c.run_id).len(), 1);
        }
        let out = retry(batch.clone());
        for (c, o) in batch.iter().zip(&out) {
            assert!(!o.stale, "the retry of a committed completion is not stale");
            assert_eq!(o.rows.len(), 1);
            assert_eq!(o.rows[0].run_id, c.run_id);
            assert_eq!(o.rows[0].status, Status::Succeeded);
            let rows = rows_of(c.run_id);
            assert_eq!(rows.len(), 1, "one row per run: {rows:?}");
            assert!(!rows[0].stale_lease);
        }
    }
    // The jobs are claimable again at their next slot: nothing was left half-done. A server
    // backend whose client the proxy cut may still hold its row locks for a moment (`SKIP
    // LOCKED` passes over them), so claim until every job has been taken once.
    let mut taken = std::collections::BTreeSet::new();
    for _ in 0..50 {
        let next = conformance::claim(&direct, "o2", t0() + chrono::Duration::seconds(61), 10);
        taken.extend(next.claims.iter().map(|c| c.job.def.name.clone()));
        if taken.len() == 3 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(taken.len(), 3, "every job claimable again: {taken:?}");
}

/// Claims and completions do not NOTIFY inside their transaction (PostgreSQL commits NOTIFYing
/// transactions one WAL flush at a time); the owner's listener announces them right after the
/// commit. Another owner still hears both, by notification.
#[test]
fn claims_and_completions_are_announced_to_other_owners_after_commit() {
    let url = pg_db_or_skip!();
    let a = by_hand(&url);
    let b = by_hand(&url);
    // One interval before the first slot, t0.
    a.apply(
        &conformance::file(vec![conformance::every("j", 60)]),
        t0() - chrono::Duration::seconds(60),
    )
    .unwrap();
    wait_until("both listeners", Duration::from_secs(10), || {
        a.listener_alive() && b.listener_alive()
    });
    // Let b hear what a did so far, so each round sees only its own announcement.
    let caught_up = || {
        let v = a.change_token().unwrap();
        wait_until("b to catch up", Duration::from_secs(2), || {
            b.change_token().unwrap() >= v
        });
    };
    caught_up();
    let heard = |what: &str, before: u64, got: u64| {
        wait_until(what, Duration::from_secs(2), || {
            b.change_token().unwrap() > before && b.notifications_received() > got
        });
    };
    let (before, got) = (b.change_token().unwrap(), b.notifications_received());
    let claims = conformance::claim(&a, "o", t0(), 1).claims;
    assert_eq!(claims.len(), 1);
    heard("the claim to be announced", before, got);
    caught_up();
    let (before, got) = (b.change_token().unwrap(), b.notifications_received());
    conformance::done(
        &a,
        &claims[0],
        "o",
        cronsole::model::Status::Succeeded,
        t0(),
    );
    heard("the completion to be announced", before, got);
}

/// The store version now (one step per committed change), read on a connection of its own.
fn store_version(url: &str) -> i64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        let h = tokio::spawn(conn);
        let v: i64 = client
            .query_one(
                "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM cronsole_store_version",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        drop(client);
        let _ = h.await;
        v
    })
}

/// One owner's renewals of 200 leases are one transaction (one commit: the store version moves
/// once, where a transaction per lease moved it 200 times), and each lease still gets its own
/// answer, in order: renewed from the instant it gives (the caller's clock here), lost to a
/// run id that holds no lease, or no such job.
#[test]
fn a_batch_of_200_renewals_is_one_transaction_that_answers_each_lease() {
    use cronsole::store::{RenewOutcome, Renewal};
    let url = pg_db_or_skip!();
    let s = by_hand(&url);
    let t = |secs: i64| t0() + chrono::Duration::seconds(secs);
    let jobs: Vec<_> = (0..200)
        .map(|i| conformance::every(&format!("r{i:03}"), 60))
        .collect();
    let lease = chrono::Duration::seconds(jobs[0].lease_seconds as i64);
    s.apply(&conformance::file(jobs), t(0)).unwrap();
    let claims = conformance::claim(&s, "me", t(60), 500).claims;
    assert_eq!(claims.len(), 200);
    let mut rs: Vec<Renewal> = claims
        .iter()
        .enumerate()
        .map(|(i, c)| Renewal {
            job: c.job.def.name.clone(),
            run_id: c.run_id,
            // Each from its own instant: the caller's clock decides in this store.
            now: t(70 + (i % 3) as i64),
        })
        .collect();
    let stranger = Renewal {
        job: "r007".into(),
        run_id: uuid::Uuid::new_v4(),
        now: t(70),
    };
    rs.insert(100, stranger);
    rs.push(Renewal {
        job: "ghost".into(),
        run_id: uuid::Uuid::new_v4(),
        now: t(70),
    });
    let before = store_version(&url);
    let out = s.renew_many(&rs);
    assert_eq!(store_version(&url), before + 1, "one commit for the batch");
    assert_eq!(out.len(), rs.len());
    for (r, o) in rs.iter().zip(&out) {
        match (r.job.as_str(), o) {
            ("ghost", Err(StoreError::Operation(OperationError::NoSuchJob(n)))) => {
                assert_eq!(n, "ghost");
            }
            (_, Ok(RenewOutcome::Lost)) => assert_eq!(r.run_id, rs[100].run_id),
            (_, Ok(RenewOutcome::Renewed { lease_until })) => {
                assert_eq!(*lease_until, r.now + lease, "{r:?}");
            }
            other => panic!("{r:?}: {other:?}"),
        }
    }
    // What each answer said is what the store holds.
    for r in rs
        .iter()
        .filter(|r| r.job != "ghost" && r.run_id != rs[100].run_id)
    {
        let rec = s.job(&r.job).unwrap().unwrap();
        let l = rec.rt.leases().find(|l| l.run_id == r.run_id).unwrap();
        assert_eq!(l.lease_until, r.now + lease, "{}", r.job);
    }
    // A batch that renews nothing writes nothing.
    let before = store_version(&url);
    let lost = s.renew_many(&rs[100..101]);
    assert!(matches!(lost[0], Ok(RenewOutcome::Lost)), "{lost:?}");
    assert_eq!(store_version(&url), before);
}

/// On the database's clock every lease of a batch is extended from the one instant the
/// transaction read, whatever the owner's clock says.
#[test]
fn a_batch_of_renewals_on_the_database_clock_extends_every_lease_from_it() {
    use cronsole::store::{RenewOutcome, Renewal};
    let url = pg_db_or_skip!();
    let s = PgStore::open(&url).unwrap();
    let jobs: Vec<_> = (0..3)
        .map(|i| conformance::every(&format!("d{i}"), 1))
        .collect();
    let lease = chrono::Duration::seconds(jobs[0].lease_seconds as i64);
    s.apply(&conformance::file(jobs), Utc::now()).unwrap();
    let mut claims = Vec::new();
    wait_until("three claims", Duration::from_secs(10), || {
        claims.extend(conformance::claim(&s, "me", Utc::now(), 10).claims);
        claims.len() >= 3
    });
    let rs: Vec<Renewal> = claims
        .iter()
        .map(|c| Renewal {
            job: c.job.def.name.clone(),
            run_id: c.run_id,
            now: Utc::now() - chrono::Duration::hours(1),
        })
        .collect();
    let (from, out, to) = (Utc::now(), s.renew_many(&rs), Utc::now());
    let ends: Vec<DateTime<Utc>> = out
        .iter()
        .map(|o| match o {
            Ok(RenewOutcome::Renewed { lease_until }) => *lease_until,
            other => panic!("{other:?}"),
        })
        .collect();
    assert!(ends.iter().all(|e| *e == ends[0]), "{ends:?}");
    // The database's clock is this host's here (one machine), to within the call.
    let slack = chrono::Duration::milliseconds(500);
    assert!(
        ends[0] >= from + lease - slack && ends[0] <= to + lease + slack,
        "{ends:?} not {lease} after {from}..{to}"
    );
}

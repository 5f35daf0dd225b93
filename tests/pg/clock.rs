//! PostgreSQL store: leases are stamped and judged by the database's clock, so owners whose
//! clocks disagree by more than the lease still run a one-shot once. Owners here are separate
//! store handles passing skewed `now`s, as owners on hosts with skewed clocks would.
#![allow(clippy::unwrap_used)] // test code

use crate::conformance;
use crate::pg_db_or_skip;
use crate::support;

use chrono::{DateTime, Duration, SubsecRound, Utc};
use cronsole::model::Status;
use cronsole::store::postgres::{PgClock, PgOptions, PgStore};
use cronsole::store::{HistoryReader, RenewOutcome, Store};

fn open(url: &str, clock: PgClock) -> PgStore {
    let opts = PgOptions {
        clock,
        ..Default::default()
    };
    PgStore::open_with(url, opts).unwrap()
}

/// A one-shot with a 5 s lease, stored by a caller whose clock says `now`; it runs when stored
/// (`run_immediately`), so it is due at once.
fn one_shot(s: &PgStore, now: DateTime<Utc>) {
    let mut d = conformance::every("once", 60);
    d.max_runs = Some(1);
    d.run_immediately = true;
    d.lease_seconds = 5.0;
    s.apply(&conformance::file(vec![d]), now).unwrap();
}

fn secs(s: i64) -> Duration {
    Duration::seconds(s)
}

/// `at` lies in `[from, to]`, give or take the half second a test machine's scheduler may add.
fn within(at: DateTime<Utc>, from: DateTime<Utc>, to: DateTime<Utc>) -> bool {
    at >= from - Duration::milliseconds(500) && at <= to + Duration::milliseconds(500)
}

#[test]
fn an_owner_whose_clock_is_behind_by_more_than_the_lease_still_runs_a_one_shot_once() {
    let url = pg_db_or_skip!();
    let (behind, ahead) = (open(&url, PgClock::Database), open(&url, PgClock::Database));
    one_shot(&behind, Utc::now() - secs(8));
    let before = Utc::now();
    // The owner 8 s behind claims: its lease ends 5 s after the database's now, not its own.
    let o = conformance::claim(&behind, "behind", Utc::now() - secs(8), 10);
    assert_eq!(o.claims.len(), 1);
    let c = &o.claims[0];
    assert!(
        within(c.lease_until, before + secs(5), Utc::now() + secs(5)),
        "lease stamped by the database's clock: {} (claimed at {before})",
        c.lease_until
    );
    // An owner 2 s ahead (and one an hour ahead) sees the lease alive: no recovery.
    for skew in [2, 3600] {
        let o = conformance::claim(&ahead, "ahead", Utc::now() + secs(skew), 10);
        assert!(o.claims.is_empty(), "+{skew}s re-ran the one-shot: {o:?}");
        assert!(o.rows.is_empty(), "+{skew}s recorded {:?}", o.rows);
    }
    // The renewal is judged and stamped on the database's clock too.
    let before = Utc::now();
    let r = behind
        .renew("once", c.run_id, Utc::now() - secs(8))
        .unwrap();
    let RenewOutcome::Renewed { lease_until } = r else {
        panic!("renewal lost: {r:?}");
    };
    assert!(within(lease_until, before + secs(5), Utc::now() + secs(5)));
    // Its completion is not stale, and the one-shot retires after its one run.
    let out = conformance::done(
        &behind,
        c,
        "behind",
        Status::Succeeded,
        Utc::now() - secs(8),
    );
    assert!(!out.stale, "completed under its own lease");
    let rows = conformance::rows(&behind, "once");
    assert_eq!(rows.len(), 1, "one run, one row: {rows:?}");
    assert_eq!(rows[0].status, Status::Succeeded);
    assert!(behind.job("once").unwrap().unwrap().rt.retired);
}

/// The same owners with each deciding on its own clock run the one-shot twice: what the
/// database's clock prevents (and what makes the test above able to fail).
#[test]
fn owners_deciding_on_their_own_clocks_would_run_it_twice() {
    let url = pg_db_or_skip!();
    let (behind, ahead) = (open(&url, PgClock::Caller), open(&url, PgClock::Caller));
    one_shot(&behind, Utc::now() - secs(8));
    let o = conformance::claim(&behind, "behind", Utc::now() - secs(8), 10);
    assert_eq!(o.claims.len(), 1);
    let o = conformance::claim(&ahead, "ahead", Utc::now() + secs(2), 10);
    assert_eq!(
        o.claims.len(),
        1,
        "the lease looked expired to the owner ahead"
    );
    assert_eq!(o.rows[0].status, Status::Abandoned);
}

#[test]
fn operator_edits_and_completions_read_the_database_clock() {
    let url = pg_db_or_skip!();
    let s = open(&url, PgClock::Database);
    let mut d = conformance::every("tick", 60);
    d.lease_seconds = 5.0;
    d.run_immediately = true;
    // Stored by a caller an hour behind: the every-grid is anchored at the database's now, and
    // the job runs then (`run_immediately`).
    let before = Utc::now();
    s.apply(&conformance::file(vec![d]), Utc::now() - secs(3600))
        .unwrap();
    let next = s.job("tick").unwrap().unwrap().rt.next_slot.unwrap();
    assert!(within(next, before, Utc::now()), "first slot {next}");
    let c = conformance::claim(&s, "o", Utc::now() - secs(3600), 10)
        .claims
        .remove(0);
    conformance::done(&s, &c, "o", Status::Succeeded, Utc::now() - secs(3600));
    let next = s.job("tick").unwrap().unwrap().rt.next_slot.unwrap();
    // The grid starts on the whole second the job was stored in.
    let grid = before.trunc_subsecs(0);
    assert!(
        within(next, grid + secs(60), Utc::now() + secs(60)),
        "next slot {next}"
    );
    // A pause by a caller a day ahead pauses now, and a resume continues at the next slot.
    s.set_paused("tick", true, Utc::now() + secs(86_400))
        .unwrap();
    s.set_paused("tick", false, Utc::now() + secs(86_400))
        .unwrap();
    let again = s.job("tick").unwrap().unwrap().rt.next_slot.unwrap();
    assert_eq!(again, next, "resumed at its next real slot");
}

#[test]
fn owner_records_measure_each_owners_clock_against_the_databases() {
    let url = pg_db_or_skip!();
    let s = open(&url, PgClock::Database);
    let rec = |owner: &str, skew: i64| cronsole::model::OwnerRecord {
        owner: owner.into(),
        host: "h".into(),
        pid: 7,
        pid_space: None,
        version: "1".into(),
        started_at: Utc::now(),
        last_seen: Utc::now() + secs(skew),
        clock_offset_ms: 0,
        claims_stopped: None,
        signed_off: None,
    };
    let behind = s.beat(&rec("behind", -40)).unwrap();
    assert!(
        (-40_500..=-39_500).contains(&behind.clock_offset_ms),
        "{behind:?}"
    );
    assert!(within(behind.last_seen, Utc::now() - secs(1), Utc::now()));
    let mut ahead = rec("ahead", 300);
    ahead.claims_stopped = Some("clock off".into());
    s.beat(&ahead).unwrap();
    // A second beat replaces the first.
    s.beat(&rec("behind", -8)).unwrap();
    let owners = s.owners().unwrap();
    let names: Vec<_> = owners.iter().map(|o| o.record.owner.as_str()).collect();
    assert_eq!(names, ["ahead", "behind"]);
    assert!((299_500..=300_500).contains(&owners[0].record.clock_offset_ms));
    assert_eq!(
        owners[0].record.claims_stopped.as_deref(),
        Some("clock off")
    );
    assert!((-8_500..=-7_500).contains(&owners[1].record.clock_offset_ms));
    assert!(owners.iter().all(|o| o.ago < secs(2) && o.ago >= secs(0)));
    assert_eq!(cronsole::testkit::internals::owners::live(&owners).len(), 2);
    // A clean stop's last record signs off: kept, and no longer live.
    let mut gone = rec("ahead", 0);
    gone.signed_off = Some(Utc::now());
    s.beat(&gone).unwrap();
    let owners = s.owners().unwrap();
    assert_eq!(owners[0].record.signed_off, gone.signed_off);
    let live = cronsole::testkit::internals::owners::live(&owners);
    assert_eq!(live.into_iter().collect::<Vec<_>>(), ["behind"]);
}

/// A heartbeat handed to the store is made on the store's own runtime (an idle owner's beat
/// then wakes no blocking thread of its own) and answers as a direct one: the offset measured
/// against the database's clock, the record stored.
#[test]
fn a_heartbeat_handed_to_the_store_is_made_on_its_runtime_and_measured_alike() {
    let url = pg_db_or_skip!();
    let s = open(&url, PgClock::Database);
    assert!(s.beats_on_own_threads());
    let rec = cronsole::model::OwnerRecord {
        owner: "handed".into(),
        host: "h".into(),
        pid: 7,
        pid_space: None,
        version: "1".into(),
        started_at: Utc::now(),
        last_seen: Utc::now() - secs(40),
        clock_offset_ms: 0,
        claims_stopped: None,
        signed_off: None,
    };
    let (tx, rx) = std::sync::mpsc::channel();
    s.beat_handoff(
        &rec,
        Box::new(move |r| {
            let thread = std::thread::current().name().map(str::to_string);
            tx.send((r, thread)).unwrap();
        }),
    );
    let (answer, thread) = rx.recv().unwrap();
    assert_eq!(thread.as_deref(), Some("cronsole-pg"));
    let answer = answer.unwrap();
    assert!(
        (-40_500..=-39_500).contains(&answer.clock_offset_ms),
        "{answer:?}"
    );
    let owners = s.owners().unwrap();
    assert_eq!(owners.len(), 1);
    assert_eq!(owners[0].record.owner, "handed");
    assert_eq!(owners[0].record.clock_offset_ms, answer.clock_offset_ms);
}

/// Two owners starting together with the same jobs file: only the apply that changed the
/// settings reports it (the other finds them already so).
#[test]
fn only_the_apply_that_changed_the_settings_reports_it() {
    let url = pg_db_or_skip!();
    for round in 0..5 {
        let mut file = conformance::file(vec![conformance::every("a", 60)]);
        file.settings.budget = Some(cronsole::model::Budget {
            max_cost_usd: 1.0 + f64::from(round),
            period: Default::default(),
        });
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let (url, file, barrier) = (url.clone(), file.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let s = open(&url, PgClock::Database);
                    barrier.wait();
                    s.apply(&file, Utc::now()).unwrap().settings
                })
            })
            .collect();
        let reports: Vec<Vec<String>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let told = reports.iter().filter(|r| !r.is_empty()).count();
        assert_eq!(told, 1, "round {round}: {reports:?}");
    }
}

/// A database clock that ran two days ahead and was set back: a job whose slots it decided is
/// not due for two days, so no claim would look at it. The next heartbeat of an owner that
/// opens the store afterwards sees the newest heartbeat on record two days ahead of the
/// database's clock, and re-derives the job from now.
#[test]
fn slots_a_database_clock_decided_ahead_are_re_derived_at_the_next_heartbeat() {
    let url = pg_db_or_skip!();
    // The decisions the clock ahead made, through a handle told that clock.
    let ahead = open(&url, PgClock::Caller);
    let t = Utc::now() + Duration::days(2);
    ahead
        .apply(
            &conformance::file(vec![conformance::every("tick", 60)]),
            t - secs(60),
        )
        .unwrap();
    let o = conformance::claim(&ahead, "ahead", t, 10);
    assert_eq!(o.claims.len(), 1, "{o:?}");
    conformance::done(
        &ahead,
        &o.claims[0],
        "ahead",
        Status::Succeeded,
        t + secs(1),
    );
    let rec = |owner: &str, seen: DateTime<Utc>| cronsole::model::OwnerRecord {
        owner: owner.into(),
        host: "h".into(),
        pid: 1,
        pid_space: None,
        version: "test".into(),
        started_at: seen,
        last_seen: seen,
        clock_offset_ms: 0,
        claims_stopped: None,
        signed_off: None,
    };
    let json = serde_json::to_string(&rec("h:1:ahead", t)).unwrap();
    support::pg::exec(
        &url,
        &format!(
            "INSERT INTO cronsole_owners (owner, last_seen, clock_offset_ms, record) \
             VALUES ('h:1:ahead', '{}', 0, $j${json}$j$::jsonb)",
            t.to_rfc3339()
        ),
    )
    .unwrap();
    let db = open(&url, PgClock::Database);
    assert!(db.jobs().unwrap()[0].rt.next_slot > Some(t));
    let before = Utc::now();
    db.beat(&rec("h:2:real", before)).unwrap();
    let job = &db.jobs().unwrap()[0];
    let next = job.rt.next_slot.unwrap();
    assert!(
        next > before - secs(1) && next <= Utc::now() + secs(61),
        "next slot {next}, re-derived at {before}"
    );
    assert!(job.rt.last_slot.unwrap() <= Utc::now(), "{:?}", job.rt);
    // Once re-derived, the next heartbeat changes nothing.
    db.beat(&rec("h:2:real", Utc::now())).unwrap();
    assert_eq!(db.jobs().unwrap()[0].rt.next_slot, Some(next));
}

/// A store a database clock an hour ahead created (a job that never ran, a job whose `until`
/// that clock passed): the next heartbeat on the real clock stores the first again from now and
/// brings the second back to run its slots before `until`.
#[test]
fn jobs_a_database_clock_an_hour_ahead_stored_or_retired_come_back_at_the_next_heartbeat() {
    let url = pg_db_or_skip!();
    let ahead = open(&url, PgClock::Caller);
    let t = Utc::now() + Duration::hours(1);
    let mut u = conformance::every("u", 60);
    u.until = Some(Utc::now() + Duration::minutes(10));
    ahead
        .apply(
            &conformance::file(vec![conformance::every("fresh", 60), u]),
            t,
        )
        .unwrap();
    let o = conformance::claim(&ahead, "ahead", t + secs(5), 10);
    assert!(o.claims.is_empty(), "{o:?}");
    let by_name = |s: &PgStore, n: &str| {
        s.jobs()
            .unwrap()
            .into_iter()
            .find(|r| r.def.name == n)
            .unwrap()
    };
    assert!(by_name(&ahead, "u").rt.retired, "that clock passed `until`");
    let json = serde_json::json!({
        "owner": "h:1:ahead", "host": "h", "pid": 1, "version": "test",
        "started_at": t, "last_seen": t, "clock_offset_ms": 0,
    });
    support::pg::exec(
        &url,
        &format!(
            "INSERT INTO cronsole_owners (owner, last_seen, clock_offset_ms, record) \
             VALUES ('h:1:ahead', '{}', 0, $j${json}$j$::jsonb)",
            t.to_rfc3339()
        ),
    )
    .unwrap();
    let db = open(&url, PgClock::Database);
    let before = Utc::now();
    let mut beat = serde_json::from_value::<cronsole::model::OwnerRecord>(json).unwrap();
    beat.owner = "h:2:real".into();
    beat.last_seen = before;
    db.beat(&beat).unwrap();
    for name in ["fresh", "u"] {
        let job = by_name(&db, name);
        assert!(!job.rt.retired, "{name}: {:?}", job.rt);
        let next = job.rt.next_slot.unwrap();
        assert!(
            next > before - secs(1) && next <= Utc::now() + secs(61),
            "{name}: next slot {next}, re-derived at {before}"
        );
    }
}

/// An owner whose clock is further from the database's than its bound (the database's clock
/// stepped between two of its heartbeats) claims nothing: the claim says why, in words for the
/// log and `/healthz`, and leaves the job due. Within the bound, it claims.
#[test]
fn a_claim_past_the_owners_bound_from_the_databases_clock_claims_nothing_and_says_why() {
    let url = pg_db_or_skip!();
    let s = open(&url, PgClock::Database);
    one_shot(&s, Utc::now());
    let ask = |skew: i64| {
        s.claim_due(&cronsole::store::ClaimRequest {
            now: Utc::now() + secs(skew),
            owner: "o",
            limit: 10,
            in_flight: &[],
            clock_stepped: None,
            max_offset: Some(std::time::Duration::from_millis(7_500)),
        })
        .unwrap()
    };
    let o = ask(-40);
    assert!(o.claims.is_empty() && o.rows.is_empty(), "{o:?}");
    let why = o.refused.unwrap();
    assert!(
        why.contains("40.") && why.contains("ahead of this host's"),
        "{why}"
    );
    assert!(
        why.contains("--max-clock-offset 7.5s") && why.contains("claims stopped"),
        "{why}"
    );
    let why = ask(40).refused.unwrap();
    assert!(why.contains("behind this host's"), "{why}");
    let o = ask(-3);
    assert_eq!(o.refused, None);
    assert_eq!(o.claims.len(), 1, "{o:?}");
}

/// Owner records not heard of for a day are forgotten at an owner's first heartbeat and then
/// once an hour, not at every heartbeat (an idle owner's beat is one statement).
#[test]
fn old_owner_records_are_swept_at_the_first_heartbeat_and_then_hourly() {
    let url = pg_db_or_skip!();
    let s = open(&url, PgClock::Database);
    let old = |name: &str| {
        let seen = Utc::now() - Duration::days(2);
        let json = serde_json::json!({
            "owner": name, "host": "h", "pid": 1, "version": "test",
            "started_at": seen, "last_seen": seen, "clock_offset_ms": 0,
        });
        support::pg::exec(
            &url,
            &format!(
                "INSERT INTO cronsole_owners (owner, last_seen, clock_offset_ms, record) \
                 VALUES ('{name}', '{}', 0, $j${json}$j$::jsonb)",
                seen.to_rfc3339()
            ),
        )
        .unwrap();
    };
    let names = |s: &PgStore| -> Vec<String> {
        s.owners()
            .unwrap()
            .into_iter()
            .map(|o| o.record.owner)
            .collect()
    };
    let mut me: cronsole::model::OwnerRecord = serde_json::from_value(serde_json::json!({
        "owner": "h:2:me", "host": "h", "pid": 2, "version": "test",
        "started_at": Utc::now(), "last_seen": Utc::now(), "clock_offset_ms": 0,
    }))
    .unwrap();
    old("h:1:gone");
    let first = s.beat(&me).unwrap().last_seen;
    assert_eq!(names(&s), ["h:2:me"], "the first beat sweeps");
    old("h:3:gone");
    me.last_seen = Utc::now();
    let second = s.beat(&me).unwrap().last_seen;
    if first.timestamp() / 3600 == second.timestamp() / 3600 {
        assert_eq!(
            names(&s),
            ["h:2:me", "h:3:gone"],
            "no sweep within the hour"
        );
    }
}

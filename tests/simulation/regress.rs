//! Store bugs the simulator found, each reduced to a scripted scenario on the simulated disk
//! (a seed stops hitting the same path as soon as the store's I/O sequence changes; these do
//! not). Ignored ones are bugs in files this simulator may not edit (the store's); the lead
//! routes them, and removes the `#[ignore]` with the fix.

use cronsole::testkit::store::ClaimAt;
use std::path::Path;

use chrono::{DateTime, Utc};
use cronsole::model::{HistoryRow, JobsFile, Settings, Status, Trigger};
use cronsole::store::file::FileStore;
use cronsole::store::{ClaimRequest, Completion, HistoryQuery, HistoryReader, Store};
use cronsole::testkit::simio::{FaultConfig, Scripted, ScriptedFault, SimDisk, shared_rng};

use cronsole::testkit::internals::store::rules;
use cronsole::testkit::time::base as t;

fn open(disk: &SimDisk) -> FileStore {
    match FileStore::open_with_io(Path::new("/r/.cronsole"), disk.process(true)) {
        Ok(s) => s,
        Err(e) => panic!("open: {e}"),
    }
}

fn setup(every: u64, lease: f64) -> (SimDisk, FileStore) {
    let disk = SimDisk::new(shared_rng(1), FaultConfig::none());
    let s = open(&disk);
    let mut d = cronsole::testkit::jobs::command_job("a", every);
    d.lease_seconds = lease;
    apply(&s, vec![d]);
    (disk, s)
}

/// The instant to store `file` at so that its first job's first slot is `t(0)`: one interval
/// before it for an `every` job.
fn stored(file: &JobsFile) -> DateTime<Utc> {
    cronsole::testkit::jobs::stored_for_first_slot(&file.jobs[0], t(0))
}

/// Script `fault` on the next `op` of `file` on the simulated disk.
fn fault(disk: &SimDisk, file: &str, op: &'static str, fault: ScriptedFault) {
    disk.script(Scripted {
        file: file.into(),
        op,
        fault,
    });
}

/// A claim by `owner` at `now` of at most `limit` runs (0: none, only the bookkeeping), with
/// nothing in flight and no clock step.
fn claim_req(now: DateTime<Utc>, owner: &str, limit: usize) -> ClaimRequest<'_> {
    ClaimRequest {
        now,
        owner,
        limit,
        in_flight: &[],
        clock_stepped: None,
        max_offset: None,
    }
}

/// Apply `jobs` to `s` at the instant their first job's first slot is `t(0)`; the file applied.
fn apply(s: &FileStore, jobs: Vec<cronsole::model::JobDef>) -> JobsFile {
    let file = JobsFile {
        settings: Settings::default(),
        jobs,
    };
    s.apply(&file, stored(&file))
        .unwrap_or_else(|e| panic!("apply: {e}"));
    file
}

fn rows(s: &FileStore) -> Vec<HistoryRow> {
    s.history(&HistoryQuery {
        limit: usize::MAX,
        ..HistoryQuery::default()
    })
    .unwrap_or_else(|e| panic!("history: {e}"))
}

/// Seed 4 (and most "run … has 2 rows" seeds): the engine retries a completion that failed (so an
/// outage loses no outcome); when the history row was written and synced but the journal's fsync
/// failed, the job record (lease released) is already in the page cache, so the retry finds no
/// lease, takes the stale path and appends the run's row a second time.
#[test]
fn a_completion_retried_after_a_failed_journal_fsync_writes_one_row() {
    let (disk, s) = setup(10, 30.0);
    let c = claim_one(&s, t(1));
    let completion = || completion(&c, t(3));
    fault(&disk, "jobs.journal", "fsync", ScriptedFault::Eio);
    assert!(s.complete(completion()).is_err(), "the journal fsync fails");
    let again = s
        .complete(completion())
        .unwrap_or_else(|e| panic!("retry: {e}"));
    let mine: Vec<_> = rows(&s)
        .into_iter()
        .filter(|r| r.run_id == c.run_id)
        .collect();
    assert_eq!(
        mine.len(),
        1,
        "one run, one row (retry said stale={}): {mine:#?}",
        again.stale
    );
}

/// A guard written while chasing seed 16 (an overlap row written twice): lease recovery that
/// wrote its rows but failed on the journal, then retried, writes each slot once (holds today;
/// seed 16 reaches the duplicate another way, not reduced yet).
#[test]
fn recovery_retried_after_a_failed_journal_write_writes_each_slot_once() {
    let (disk, s) = setup(5, 3.0);
    let out = s.claim_at(t(1), "dead", 1);
    assert_eq!(out.claims.len(), 1);
    // The owner died; its lease (3 s) ran out long ago when another owner looks at t+30.
    let other = open(&disk);
    fault(&disk, "jobs.journal", "write", ScriptedFault::Enospc);
    let req = |now| claim_req(now, "b", 0);
    assert!(other.claim_due(&req(t(30))).is_err(), "the journal is full");
    // Another process (the one that failed gave up, as after a restart) recovers the lease.
    drop(other);
    let third = open(&disk);
    third
        .claim_due(&req(t(31)))
        .unwrap_or_else(|e| panic!("retry: {e}"));
    let all = rows(&third);
    let overlap: Vec<_> = all
        .iter()
        .filter(|r| r.status == Status::Skipped || r.status == Status::Missed)
        .collect();
    let abandoned = all.iter().filter(|r| r.status == Status::Abandoned).count();
    assert_eq!(abandoned, 1, "{all:#?}");
    assert!(
        overlap.len() <= 1,
        "the slots after the lost run are in {} rows: {overlap:#?}",
        overlap.len()
    );
}

fn claim_one(s: &FileStore, now: DateTime<Utc>) -> cronsole::store::Claim {
    let out = s.claim_at(now, "o", 1);
    match out.claims.into_iter().next() {
        Some(c) => c,
        None => panic!("nothing claimed at {now}"),
    }
}

fn completion(c: &cronsole::store::Claim, now: DateTime<Utc>) -> Completion {
    let mut row = HistoryRow::new("a", Status::Succeeded, Trigger::Schedule, c.slot, "o", now);
    row.run_id = c.run_id;
    Completion {
        job: "a".into(),
        run_id: c.run_id,
        owner: "o".into(),
        now,
        row,
        state: None,
        hold_until: None,
    }
}

/// Seeds 3, 39, 49 … ("run … has 2 rows: succeeded, succeeded"): the run's row reaches history,
/// the journal append fails (disk full), the completion returns an error and the engine retries
/// it; the lease is still ours, so the retry appends the row again.
#[test]
fn a_completion_retried_after_a_failed_journal_write_writes_one_row() {
    let (disk, s) = setup(10, 30.0);
    let c = claim_one(&s, t(1));
    fault(&disk, "jobs.journal", "write", ScriptedFault::Enospc);
    assert!(
        s.complete(completion(&c, t(3))).is_err(),
        "the journal is full"
    );
    s.complete(completion(&c, t(4)))
        .unwrap_or_else(|e| panic!("retry: {e}"));
    let mine: Vec<_> = rows(&s)
        .into_iter()
        .filter(|r| r.run_id == c.run_id)
        .collect();
    assert_eq!(mine.len(), 1, "one run, one row: {mine:#?}");
}

/// Seeds 71, 193 ("acknowledged row lost … 0 rows in history"), from before store format 2:
/// a fresh store that creates `history.jsonl` and fsyncs its data but never its directory
/// entry loses the file and every acknowledged row at a power loss. Kept as a guard.
#[test]
fn rows_of_a_fresh_store_survive_a_power_loss() {
    let (disk, s) = setup(10, 30.0);
    let c = claim_one(&s, t(1));
    let out = s
        .complete(completion(&c, t(3)))
        .unwrap_or_else(|e| panic!("complete: {e}"));
    assert!(!out.stale);
    let hist = Path::new("/r/.cronsole/history.jsonl");
    let before = disk.contents(hist).map(|b| b.len());
    drop(s);
    disk.power_loss();
    eprintln!(
        "history bytes before {before:?}, after {:?}",
        disk.contents(hist).map(|b| b.len())
    );
    let s = open(&disk);
    let mine: Vec<_> = rows(&s)
        .into_iter()
        .filter(|r| r.run_id == c.run_id)
        .collect();
    assert_eq!(
        mine.len(),
        1,
        "the acknowledged row survives: files {:?}",
        disk.files()
    );
}

/// Seed 19 ("run … has 2 rows: succeeded, abandoned"): an owner recovering an expired lease
/// appends the `abandoned` row and dies before its history fsync (so before the journal says the
/// lease ended). The page cache keeps the row. The run's own owner, back from a stall, still
/// holds the lease and completes it: history now says the run both succeeded and was abandoned
/// (a status that did not happen).
#[test]
fn a_recovery_that_dies_midway_leaves_no_abandoned_row_for_a_run_that_completed() {
    let (disk, s) = setup(10, 5.0);
    let c = claim_one(&s, t(1));
    let recoverer = open(&disk);
    fault(&disk, "history.jsonl", "fsync", ScriptedFault::Crash);
    let req = claim_req(t(30), "b", 0);
    assert!(recoverer.claim_due(&req).is_err(), "the recoverer dies");
    drop(recoverer);
    s.complete(completion(&c, t(31)))
        .unwrap_or_else(|e| panic!("complete: {e}"));
    let mine: Vec<_> = rows(&s)
        .into_iter()
        .filter(|r| r.run_id == c.run_id)
        .map(|r| (r.status, r.stale_lease))
        .collect();
    assert_eq!(mine, vec![(Status::Succeeded, false)], "the run's rows");
}

/// Seeds 22, 143 (a `missed` row written twice): a claim wrote its `missed` row, then the
/// journal append failed; the retried claim (later, so covering more slots) must not record the
/// same slots again: the slots after the landed row get one row of their own.
#[test]
fn a_claim_retried_after_a_failed_journal_write_records_each_missed_slot_once() {
    let disk = SimDisk::new(shared_rng(1), FaultConfig::none());
    let s = ran_with_grace(&disk);
    let req = |now| claim_req(now, "o", 0);
    fault(&disk, "jobs.journal", "write", ScriptedFault::Enospc);
    assert!(s.claim_due(&req(t(45))).is_err(), "the journal is full");
    s.claim_due(&req(t(67)))
        .unwrap_or_else(|e| panic!("retry: {e}"));
    assert_missed_t10_to_t60_once(&s);
}

/// Seed 19's path with a renewal: the run's owner, back from its stall, renews the lapsed lease
/// (now valid again) before completing; its completion still supersedes the dead recoverer's
/// `abandoned` row.
#[test]
fn a_renewed_lapsed_lease_still_supersedes_a_dead_recoverers_abandoned_row() {
    let (disk, s) = setup(10, 5.0);
    let c = claim_one(&s, t(1));
    let recoverer = open(&disk);
    fault(&disk, "history.jsonl", "fsync", ScriptedFault::Crash);
    let req = claim_req(t(30), "b", 0);
    assert!(recoverer.claim_due(&req).is_err(), "the recoverer dies");
    drop(recoverer);
    let renewed = s
        .renew("a", c.run_id, t(31))
        .unwrap_or_else(|e| panic!("renew: {e}"));
    assert!(matches!(
        renewed,
        cronsole::store::RenewOutcome::Renewed { .. }
    ));
    s.complete(completion(&c, t(32)))
        .unwrap_or_else(|e| panic!("complete: {e}"));
    let mine: Vec<_> = rows(&s)
        .into_iter()
        .filter(|r| r.run_id == c.run_id)
        .map(|r| r.status)
        .collect();
    assert_eq!(mine, vec![Status::Succeeded], "the run's rows");
}

/// Seed 24 after the reservation gate: a persist whose history fsync failed leaves its row in the
/// page cache; the retry finds the row and appends none, so it must still make history durable
/// before the job record says the run is done — else a power loss keeps the record and loses
/// the run's only row.
#[test]
fn a_retry_that_relies_on_a_landed_row_makes_it_durable_first() {
    let (disk, s) = setup(10, 30.0);
    let c = claim_one(&s, t(1));
    fault(&disk, "history.jsonl", "fsync", ScriptedFault::Eio);
    assert!(
        s.complete(completion(&c, t(3))).is_err(),
        "the history fsync fails"
    );
    let out = s
        .complete(completion(&c, t(4)))
        .unwrap_or_else(|e| panic!("retry: {e}"));
    assert!(!out.stale);
    drop(s);
    disk.power_loss();
    let s = open(&disk);
    let mine: Vec<_> = rows(&s)
        .into_iter()
        .filter(|r| r.run_id == c.run_id)
        .collect();
    assert_eq!(mine.len(), 1, "the acknowledged row survives: {mine:#?}");
}

/// Seed 12 of the quick batch after the reservation gate (bug 5's overlap case): a recovery
/// wrote `abandoned` and the overlap `skipped` row after it, then died before the journal; the
/// next process finishes the run from the landed `abandoned` row and must not write the
/// overlap row a second time.
#[test]
fn a_recovery_finishing_from_a_landed_row_writes_its_overlap_row_once() {
    let (disk, s) = setup(5, 10.0);
    let out = s.claim_at(t(1), "dead", 1);
    assert_eq!(out.claims.len(), 1);
    let req = |now| claim_req(now, "b", 0);
    let recoverer = open(&disk);
    fault(&disk, "jobs.journal", "write", ScriptedFault::Crash);
    assert!(
        recoverer.claim_due(&req(t(30))).is_err(),
        "the recoverer dies"
    );
    drop(recoverer);
    let third = open(&disk);
    third
        .claim_due(&req(t(31)))
        .unwrap_or_else(|e| panic!("recovery: {e}"));
    let overlap: Vec<_> = rows(&third)
        .into_iter()
        .filter(|r| r.status == Status::Skipped)
        .map(|r| (r.slot, r.slot_end))
        .collect();
    assert_eq!(overlap.len(), 1, "one overlap row: {overlap:?}");
}

/// Bug 5's `missed` case across processes: another process wrote a `missed` row and died
/// before its job record; an owner that had the store loaded sees history grow while the
/// journal did not, and its next claim records only the slots after that row.
#[test]
fn a_missed_row_left_by_a_dead_process_is_not_written_again() {
    let disk = SimDisk::new(shared_rng(1), FaultConfig::none());
    let s = ran_with_grace(&disk);
    let req = |now| claim_req(now, "o", 0);
    another_process_dies_claiming(&disk, &req(t(45)));
    s.claim_due(&req(t(67)))
        .unwrap_or_else(|e| panic!("claim: {e}"));
    assert_missed_t10_to_t60_once(&s);
}

/// Bug 5 (strict seeds 38, 56, 157): another process wrote a `missed` row and died before its
/// job record; the next claimer is a process that opened the store only afterwards (so it never
/// saw history grow without the journal). The job record says where history ended when it was
/// written (`rows_to`): the claimer finds the leftover row there and records only later slots.
#[test]
fn a_missed_row_left_by_a_dead_process_is_not_written_again_by_a_new_process() {
    let disk = SimDisk::new(shared_rng(1), FaultConfig::none());
    let s = ran_with_grace(&disk);
    drop(s);
    let req = |now| claim_req(now, "o", 0);
    another_process_dies_claiming(&disk, &req(t(45)));
    let fresh = open(&disk);
    fresh
        .claim_due(&req(t(67)))
        .unwrap_or_else(|e| panic!("claim: {e}"));
    assert_missed_t10_to_t60_once(&fresh);
}

/// Bug 5's overlap case: a recoverer wrote `abandoned` and the overlap `skipped` row of a lapsed
/// lease, then died before the journal; an operator's command changed the journal since (so the
/// run's owner cannot tell from file sizes that history holds rows without records). The owner,
/// back from its stall, completes the run: its overlap row must cover only the slots the dead
/// recoverer's row did not.
#[test]
fn an_overlap_row_left_by_a_dead_recoverer_is_not_written_again_at_completion() {
    let disk = SimDisk::new(shared_rng(1), FaultConfig::none());
    let s = open(&disk);
    let mut a = cronsole::testkit::jobs::command_job("a", 5);
    a.lease_seconds = 5.0;
    let b = cronsole::testkit::jobs::command_job("b", 60);
    apply(&s, vec![a, b]);
    let out = s.claim_at(t(1), "o", 1);
    let c = match out.claims.into_iter().find(|c| c.job.def.name == "a") {
        Some(c) => c,
        None => panic!("job a not claimed"),
    };
    // Job b fired at t(0) too: take it out of the way.
    s.set_paused("b", true, t(1))
        .unwrap_or_else(|e| panic!("pause: {e}"));
    let recoverer = open(&disk);
    fault(&disk, "jobs.journal", "write", ScriptedFault::Crash);
    let req = claim_req(t(30), "r", 0);
    assert!(recoverer.claim_due(&req).is_err(), "the recoverer dies");
    drop(recoverer);
    let cli = open(&disk);
    cli.set_paused("b", false, t(31))
        .unwrap_or_else(|e| panic!("resume: {e}"));
    drop(cli);
    s.complete(completion(&c, t(32)))
        .unwrap_or_else(|e| panic!("complete: {e}"));
    let overlap: Vec<_> = rows(&s)
        .into_iter()
        .filter(|r| r.job == "a" && r.status == Status::Skipped)
        .map(|r| (r.slot, r.slot_end))
        .collect();
    assert_eq!(
        overlap,
        vec![(Some(t(10)), Some(t(30))), (Some(t(5)), Some(t(5)))],
        "newest first: each overlapped slot in one row"
    );
}

/// Seeds 516, 1390 ("one-shot job … executed a third time"): a `once` job's run was abandoned
/// (one retry left), then the job was removed from the jobs file and added back. Removal used to
/// clear the pending recovery, so the job came back as if it had never run: a fresh scheduled
/// run, then its own recovery — three executions. Coming back, the one retry is all it gets.
#[test]
fn a_once_job_removed_and_added_back_after_an_abandoned_run_gets_only_its_retry() {
    let disk = SimDisk::new(shared_rng(1), FaultConfig::none());
    let s = open(&disk);
    let mut d = cronsole::testkit::jobs::command_job("a", 10);
    d.lease_seconds = 5.0;
    d.max_runs = Some(1);
    let with = JobsFile {
        settings: Settings::default(),
        jobs: vec![d],
    };
    let without = JobsFile {
        settings: Settings::default(),
        jobs: vec![],
    };
    s.apply(&with, stored(&with))
        .unwrap_or_else(|e| panic!("apply: {e}"));
    let first = claim_one(&s, t(0));
    assert_eq!(first.trigger, Trigger::Schedule);
    // Its owner dies; another owner recovers the lease: `abandoned`, one retry pending.
    let req = |now| claim_req(now, "b", 0);
    s.claim_due(&req(t(20)))
        .unwrap_or_else(|e| panic!("recovery: {e}"));
    s.apply(&without, t(21))
        .unwrap_or_else(|e| panic!("apply without: {e}"));
    s.apply(&with, t(22))
        .unwrap_or_else(|e| panic!("apply with: {e}"));
    let mut executions = vec![first.trigger];
    let mut now = 23;
    // Every claim is abandoned in turn; the job must retire after its one retry.
    for _ in 0..4 {
        let out = s.claim_at(t(now), "o", 1);
        executions.extend(out.claims.iter().map(|c| c.trigger));
        now += 40;
    }
    assert_eq!(
        executions,
        vec![Trigger::Schedule, Trigger::Recovery],
        "a once job: its run and one retry"
    );
    let rec = s
        .job("a")
        .unwrap_or_else(|e| panic!("job: {e}"))
        .unwrap_or_else(|| panic!("job a is gone"));
    assert!(
        rec.rt.retired,
        "retired after two abandoned runs: {:?}",
        rec.rt
    );
}

/// Seeds 1210, 1876 ("recorded spend over the budget" with the reservation gate): an `apply`
/// renamed the new `settings.json` (the budget) into place and died before its directory
/// fsync; the next `apply` found the settings already equal and acknowledged; a power loss then
/// brought the old `settings.json` (no such budget) back, and owners spent past the budget. A
/// writer syncs the directory before relying on a file it loaded through its name.
#[test]
fn settings_an_apply_relied_on_survive_a_power_loss() {
    let disk = SimDisk::new(shared_rng(1), FaultConfig::none());
    drop(open(&disk));
    let settings = Settings {
        budget: Some(cronsole::model::Budget {
            max_cost_usd: 0.5,
            period: cronsole::model::BudgetPeriod::Total,
        }),
        ..Settings::default()
    };
    let file = JobsFile {
        settings: settings.clone(),
        jobs: vec![cronsole::testkit::jobs::command_job("a", 10)],
    };
    let first = open(&disk);
    disk.script(Scripted {
        file: ".cronsole".into(),
        op: "fsync dir",
        fault: ScriptedFault::Crash,
    });
    assert!(first.apply(&file, t(0)).is_err(), "the first apply dies");
    drop(first);
    let second = open(&disk);
    second
        .apply(&file, t(1))
        .unwrap_or_else(|e| panic!("apply: {e}"));
    drop(second);
    disk.power_loss();
    let after = open(&disk);
    assert_eq!(
        after.settings().unwrap_or_else(|e| panic!("settings: {e}")),
        settings,
        "the budget the second apply acknowledged"
    );
}

/// Bug 6 (fsyncgate, `SIM_FSYNC_LOSES_DATA=1`, seed 5035): the journal's fsync failed and, as on
/// Linux, its pending bytes were dropped from writeback while staying readable in the page
/// cache. The store went on appending after them; a power loss then left a hole of zeros in the
/// middle of the journal and the store refused to open. A failed append is now cut back (under
/// the lock, before anyone reads it) and its retry writes the bytes again.
#[test]
fn nothing_is_appended_after_bytes_whose_fsync_failed() {
    let disk = SimDisk::new(
        shared_rng(1),
        FaultConfig {
            fsync_loses_data: true,
            ..FaultConfig::none()
        },
    );
    let s = open(&disk);
    let mut d = cronsole::testkit::jobs::command_job("a", 10);
    d.lease_seconds = 30.0;
    apply(&s, vec![d]);
    let c = claim_one(&s, t(1));
    fault(&disk, "jobs.journal", "fsync", ScriptedFault::Eio);
    assert!(
        s.complete(completion(&c, t(3))).is_err(),
        "the journal fsync fails"
    );
    s.complete(completion(&c, t(4)))
        .unwrap_or_else(|e| panic!("retry: {e}"));
    let next = claim_one(&s, t(11));
    drop(s);
    disk.power_loss();
    let s = match FileStore::open_with_io(Path::new("/r/.cronsole"), disk.process(true)) {
        Ok(s) => s,
        Err(e) => panic!("the store must open after the power loss: {e}"),
    };
    let mine: Vec<_> = rows(&s)
        .into_iter()
        .filter(|r| r.run_id == c.run_id)
        .map(|r| r.status)
        .collect();
    assert_eq!(mine, vec![Status::Succeeded], "the acknowledged row");
    let rec = s
        .job("a")
        .unwrap_or_else(|e| panic!("job: {e}"))
        .unwrap_or_else(|| panic!("job a is gone"));
    assert_eq!(
        rec.rt.lease.map(|l| l.run_id),
        Some(next.run_id),
        "the acknowledged claim"
    );
}

/// A file store whose job `a` runs every 10 s with a misfire grace of 1 s, has run its t0 slot
/// and is next due at t10.
fn ran_with_grace(disk: &SimDisk) -> FileStore {
    let s = open(disk);
    let mut d = cronsole::testkit::jobs::command_job("a", 10);
    d.misfire_grace_seconds = Some(1.0);
    apply(&s, vec![d]);
    let c = claim_one(&s, t(0));
    s.complete(completion(&c, t(1)))
        .unwrap_or_else(|e| panic!("complete: {e}"));
    s
}

/// A row's first and last slot.
type SlotSpan = (Option<DateTime<Utc>>, Option<DateTime<Utc>>);

fn missed_rows(s: &FileStore) -> Vec<SlotSpan> {
    rows(s)
        .into_iter()
        .filter(|r| r.status == Status::Missed)
        .map(|r| (r.slot, r.slot_end))
        .collect()
}

/// A row's first and last slot, and how many slots it stands for.
type CountedSpan = (Option<DateTime<Utc>>, Option<DateTime<Utc>>, Option<u64>);

/// Each `missed` row's [`CountedSpan`], newest first.
fn missed_counted(s: &FileStore) -> Vec<CountedSpan> {
    rows(s)
        .into_iter()
        .filter(|r| r.status == Status::Missed)
        .map(|r| (r.slot, r.slot_end, r.slots_count))
        .collect()
}

/// The `missed` rows of job `a` ([`ran_with_grace`]) after claims at t45 and t67: t10–t40 in
/// one row and t50–t60 in another, each slot once.
#[track_caller]
fn assert_missed_t10_to_t60_once(s: &FileStore) {
    assert_eq!(
        missed_counted(s),
        vec![
            (Some(t(50)), Some(t(60)), Some(2)),
            (Some(t(10)), Some(t(40)), Some(4)),
        ],
        "newest first: each missed slot in one row"
    );
}

/// Another process opens the store and dies in its claim `req` (a crash on its journal write),
/// after the rows of that claim reached history.
fn another_process_dies_claiming(disk: &SimDisk, req: &ClaimRequest) {
    let other = open(disk);
    fault(disk, "jobs.journal", "write", ScriptedFault::Crash);
    assert!(other.claim_due(req).is_err(), "the other process dies");
}

/// "Slot in two rows" (731 of 100 000 strict seeds, e.g. 129, 304, 50193): a process wrote a
/// `missed` row and died before its job record; then any operation that wrote the job's record
/// without generating rows (here an operator's trigger; in the seeds also pauses, renewals,
/// reservations and plain completions) moved the record's `rows_to` to history's end, past
/// the leftover row, so the next claimer no longer saw it and recorded the same slots again.
/// A record's `rows_to` now moves only past history that is known to hold no leftover row of
/// the job.
#[test]
fn an_operation_between_a_dead_claim_and_the_next_does_not_hide_its_missed_row() {
    let disk = SimDisk::new(shared_rng(1), FaultConfig::none());
    drop(ran_with_grace(&disk));
    let req = |now| claim_req(now, "o", 0);
    another_process_dies_claiming(&disk, &req(t(45)));
    let cli = open(&disk);
    cli.request_trigger("a", t(46))
        .unwrap_or_else(|e| panic!("trigger: {e}"));
    drop(cli);
    let fresh = open(&disk);
    fresh
        .claim_due(&req(t(67)))
        .unwrap_or_else(|e| panic!("claim: {e}"));
    assert_eq!(
        missed_rows(&fresh),
        vec![(Some(t(50)), Some(t(60))), (Some(t(10)), Some(t(40)))],
        "newest first: each missed slot in one row"
    );
}

/// A guard written while chasing "acknowledged row lost: … status missed" (14 of 100 000
/// strict seeds before this branch, e.g. 3433, 8135, 58709; none of them fails on the store
/// this branch started from, and no batch since hit the kind): a claim wrote its `missed` row
/// and failed on the journal; its retry covers the same slots. Every row a claim reports is in
/// history, and the slots are in one row.
#[test]
fn a_retried_claim_reports_only_rows_history_holds() {
    let disk = SimDisk::new(shared_rng(1), FaultConfig::none());
    let s = ran_with_grace(&disk);
    let req = |now| claim_req(now, "o", 0);
    fault(&disk, "jobs.journal", "write", ScriptedFault::Enospc);
    assert!(s.claim_due(&req(t(45))).is_err(), "the journal is full");
    let out = s
        .claim_due(&req(t(46)))
        .unwrap_or_else(|e| panic!("retry: {e}"));
    let history = rows(&s);
    for r in &out.rows {
        assert!(
            history
                .iter()
                .any(|h| h.run_id == r.run_id && h.status == r.status),
            "reported {r:?}, history {history:#?}"
        );
    }
    assert_eq!(missed_rows(&s), vec![(Some(t(10)), Some(t(40)))]);
}

/// "abandoned + the same run's late stale_lease row" (a pair the model must not allow): an owner
/// paused past its lease completes after another owner recorded the run `abandoned`. The late row
/// supersedes it: one row per run, the real status. Its first write fails on the journal (disk
/// full); the retry finds its row in history and the record still catches up (counters and last
/// status no longer say `abandoned`).
#[test]
fn a_late_completion_of_an_abandoned_run_is_its_one_row_even_when_retried() {
    let (disk, s) = setup(10, 5.0);
    let c = claim_one(&s, t(1));
    let other = open(&disk);
    other
        .claim_due(&claim_req(t(8), "b", 0))
        .unwrap_or_else(|e| panic!("recovery: {e}"));
    let ab: Vec<_> = rows(&s)
        .into_iter()
        .filter(|r| r.run_id == c.run_id)
        .map(|r| r.status)
        .collect();
    assert_eq!(ab, vec![Status::Abandoned]);
    fault(&disk, "jobs.journal", "write", ScriptedFault::Enospc);
    assert!(
        s.complete(completion(&c, t(9))).is_err(),
        "the journal is full"
    );
    let out = s
        .complete(completion(&c, t(9)))
        .unwrap_or_else(|e| panic!("retry: {e}"));
    assert!(out.stale && out.rows[0].supersedes_abandoned, "{out:?}");
    let mine: Vec<_> = rows(&other)
        .into_iter()
        .filter(|r| r.run_id == c.run_id)
        .map(|r| (r.status, r.supersedes_abandoned))
        .collect();
    assert_eq!(mine, vec![(Status::Succeeded, true)], "one row per run");
    let rec = other
        .job("a")
        .unwrap_or_else(|e| panic!("job: {e}"))
        .unwrap_or_else(|| panic!("job a is gone"));
    assert_eq!(rec.rt.last_status, Some(Status::Succeeded));
    assert_eq!(rec.rt.counters.by_status.get(&Status::Abandoned), None);
    assert!(rec.rt.abandoned.is_empty());
}

/// A recoverer that appends `abandoned` for the run and dies before its history fsync (the
/// page cache keeps the row, the journal never hears of it).
fn recoverer_dies_after_abandoned(disk: &SimDisk, now: DateTime<Utc>) {
    let recoverer = open(disk);
    fault(disk, "history.jsonl", "fsync", ScriptedFault::Crash);
    let req = claim_req(now, "b", 0);
    assert!(recoverer.claim_due(&req).is_err(), "the recoverer dies");
}

/// "Run … has 2 rows: succeeded, abandoned" (11 of 100 000 strict seeds; seed 2222 on the
/// store this branch started from): a recoverer wrote `abandoned` and died; the clock then
/// stepped back, so the run's owner, completing, did not see its lease as lapsed and never
/// looked for that row; an operator's pause in between had moved the job record's `rows_to`
/// past it. The owner now finds it in the short history after `rows_to` (which the pause
/// keeps before a row of a run the record still leases) and supersedes it.
#[test]
fn a_dead_recoverers_abandoned_row_is_superseded_after_the_clock_steps_back() {
    let (disk, s) = setup(10, 5.0);
    let c = claim_one(&s, t(1));
    recoverer_dies_after_abandoned(&disk, t(8));
    // The clock steps back: the lease (to t6) no longer looks lapsed.
    let cli = open(&disk);
    cli.set_paused("a", true, t(3))
        .unwrap_or_else(|e| panic!("pause: {e}"));
    drop(cli);
    s.complete(completion(&c, t(4)))
        .unwrap_or_else(|e| panic!("complete: {e}"));
    let mine: Vec<_> = rows(&s)
        .into_iter()
        .filter(|r| r.run_id == c.run_id)
        .map(|r| (r.status, r.supersedes_abandoned))
        .collect();
    assert_eq!(mine, vec![(Status::Succeeded, true)], "one row per run");
}

/// "Slot in two rows: overlap `skipped` and the lease in flight" (seed 1651 on the store this
/// branch started from): a recoverer wrote `abandoned` and died; the run's owner completed the
/// lapsed lease (its row supersedes that one, with the overlap row of slot t10) and died
/// before its journal record. The next claimer, recovering from history, found the dead
/// recoverer's `abandoned` row first and finished the job from it: the job went back to slot
/// t10, which the overlap row already recorded, and ran it. It now finishes from the run's
/// real end.
#[test]
fn a_recovery_finishes_from_the_real_end_not_a_superseded_abandoned_row() {
    let (disk, s) = setup(10, 3.0);
    let c = claim_one(&s, t(1));
    recoverer_dies_after_abandoned(&disk, t(5));
    fault(&disk, "jobs.journal", "write", ScriptedFault::Crash);
    assert!(
        s.complete(completion(&c, t(12))).is_err(),
        "the owner dies before its record"
    );
    drop(s);
    let fresh = open(&disk);
    let out = fresh
        .claim_due(&claim_req(t(15), "n", 1))
        .unwrap_or_else(|e| panic!("claim: {e}"));
    assert!(
        out.claims.is_empty(),
        "slot t10 is recorded (overlap), t20 is not due: {:?}",
        out.claims.iter().map(|c| c.slot).collect::<Vec<_>>()
    );
    let all = rows(&fresh);
    let mine: Vec<_> = all
        .iter()
        .filter(|r| r.run_id == c.run_id)
        .map(|r| r.status)
        .collect();
    assert_eq!(mine, vec![Status::Succeeded], "{all:#?}");
    let overlap: Vec<_> = all
        .iter()
        .filter(|r| r.status == Status::Skipped)
        .map(|r| (r.slot, r.slot_end))
        .collect();
    assert_eq!(overlap, vec![(Some(t(10)), Some(t(10)))]);
    let rec = fresh
        .job("a")
        .unwrap_or_else(|e| panic!("job: {e}"))
        .unwrap_or_else(|| panic!("job a is gone"));
    assert_eq!(rec.rt.next_slot, Some(t(20)));
}

/// The slots of job `a`'s `missed` and overlap `skipped` rows (a 5 s grid), each as often as a
/// row records it.
fn generated_slots(s: &FileStore) -> Vec<DateTime<Utc>> {
    let mut out = Vec::new();
    for r in rows(s) {
        let generated = r.status == Status::Missed
            || (r.status == Status::Skipped && r.reason.as_deref() == Some("overlap"));
        if r.job != "a" || !generated {
            continue;
        }
        let (Some(first), Some(last)) = (r.slot, r.slot_end.or(r.slot)) else {
            continue;
        };
        let mut at = first;
        while at <= last {
            out.push(at);
            at += chrono::Duration::seconds(5);
        }
    }
    out.sort();
    out
}

/// "Slot in two rows: `missed` + overlap `skipped`" (68 of the 152 in the 102 000-seed batch;
/// seeds 760, 563, 3225): a recoverer wrote the lapsed run's `abandoned` row, the overlap row
/// of the slots up to the lease's end and a `missed` row of the later ones, then died before
/// its journal record. The run's owner, back from its stall, completes: its overlap row reaches
/// from the lease's end to now, and was trimmed only against the landed row covering its first
/// slot (the dead recoverer's overlap row), so it recorded the `missed` row's slots again.
/// Every landed row is now taken into account (`logic::unlanded_part`).
#[test]
fn a_late_completion_does_not_record_the_slots_of_a_dead_recoverers_missed_row() {
    let disk = SimDisk::new(shared_rng(1), FaultConfig::none());
    let s = open(&disk);
    let mut d = cronsole::testkit::jobs::command_job("a", 5);
    d.lease_seconds = 5.0;
    d.misfire_grace_seconds = Some(1.0);
    apply(&s, vec![d]);
    let c = claim_one(&s, t(1));
    let recoverer = open(&disk);
    fault(&disk, "jobs.journal", "write", ScriptedFault::Crash);
    let req = claim_req(t(32), "r", 0);
    assert!(recoverer.claim_due(&req).is_err(), "the recoverer dies");
    drop(recoverer);
    let left = generated_slots(&s);
    assert!(
        left.contains(&t(5)) && left.contains(&t(10)),
        "the dead recoverer left an overlap row and a missed row: {:#?}",
        rows(&s)
    );
    s.complete(completion(&c, t(33)))
        .unwrap_or_else(|e| panic!("complete: {e}"));
    let slots = generated_slots(&s);
    let mut once = slots.clone();
    once.dedup();
    assert_eq!(slots, once, "a slot in two rows: {:#?}", rows(&s));
    assert_eq!(
        once,
        (1..=6).map(|k| t(5 * k)).collect::<Vec<_>>(),
        "slots t5..t30 each recorded: {:#?}",
        rows(&s)
    );
}

/// "Slot in two rows: a `missed` row and a run" (seed 7937; 29 of the 152 pair a generated row
/// with a run): a claimer wrote a `missed` row up to its clock's latest slot (t40) and died
/// before its journal record; the clock stepped back, and the next claimer, finding its own
/// `missed` row recorded already, left the job's next slot at the first slot after *its* clock
/// (t40), then ran that slot. Rows a dead writer left now move the next slot past what they
/// record before the job is evaluated (`logic::skip_recorded`).
#[test]
fn a_claim_after_the_clock_stepped_back_does_not_run_a_slot_a_dead_claimers_missed_row_records() {
    let disk = SimDisk::new(shared_rng(1), FaultConfig::none());
    drop(ran_with_grace(&disk));
    let req = |now, limit| ClaimRequest {
        now,
        owner: "o",
        limit,
        in_flight: &[],
        clock_stepped: None,
        max_offset: None,
    };
    let dead = open(&disk);
    fault(&disk, "jobs.journal", "write", ScriptedFault::Crash);
    assert!(dead.claim_due(&req(t(45), 1)).is_err(), "the claimer dies");
    drop(dead);
    assert_eq!(missed_rows(&open(&disk)), vec![(Some(t(10)), Some(t(40)))]);
    let fresh = open(&disk);
    fresh
        .claim_due(&req(t(33), 1))
        .unwrap_or_else(|e| panic!("claim: {e}"));
    let out = fresh
        .claim_due(&req(t(41), 1))
        .unwrap_or_else(|e| panic!("claim: {e}"));
    assert!(
        out.claims.is_empty(),
        "slot t40 is recorded missed: {:?}",
        out.claims.iter().map(|c| c.slot).collect::<Vec<_>>()
    );
    assert_eq!(
        missed_rows(&fresh),
        vec![(Some(t(10)), Some(t(40)))],
        "each missed slot in one row"
    );
    let rec = fresh
        .job("a")
        .unwrap_or_else(|e| panic!("job: {e}"))
        .unwrap_or_else(|| panic!("job a is gone"));
    assert_eq!(rec.rt.next_slot, Some(t(50)));
}

/// "Slot in two rows: overlap `skipped` and a run" (seed 554): a recoverer wrote `abandoned`
/// and died; the run's owner completed late (its row supersedes that one, with the overlap row
/// of slots t10..t20) and died before its journal record. The clock stepped back: the next
/// claimer finished the job from the landed row at *its* clock (t15), sending the job to slot
/// t20, which the landed overlap row records, and ran it later. The rows after the run's row
/// now move the next slot past what they record.
#[test]
fn a_recovery_after_the_clock_stepped_back_does_not_run_a_slot_the_landed_overlap_row_records() {
    let (disk, s) = setup(10, 3.0);
    let c = claim_one(&s, t(1));
    recoverer_dies_after_abandoned(&disk, t(5));
    fault(&disk, "jobs.journal", "write", ScriptedFault::Crash);
    assert!(
        s.complete(completion(&c, t(22))).is_err(),
        "the owner dies before its record"
    );
    drop(s);
    let fresh = open(&disk);
    let req = |now| claim_req(now, "n", 1);
    for now in [t(15), t(21)] {
        let out = fresh
            .claim_due(&req(now))
            .unwrap_or_else(|e| panic!("claim: {e}"));
        assert!(
            out.claims.is_empty(),
            "slots t10..t20 are recorded (overlap), t30 is not due at {now}: {:?}",
            out.claims.iter().map(|c| c.slot).collect::<Vec<_>>()
        );
    }
    let overlap: Vec<_> = rows(&fresh)
        .into_iter()
        .filter(|r| r.status == Status::Skipped)
        .map(|r| (r.slot, r.slot_end))
        .collect();
    assert_eq!(overlap, vec![(Some(t(10)), Some(t(20)))]);
    let rec = fresh
        .job("a")
        .unwrap_or_else(|e| panic!("job: {e}"))
        .unwrap_or_else(|| panic!("job a is gone"));
    assert_eq!(rec.rt.next_slot, Some(t(30)));
}

/// Seeds 13198, 48313 ("the store does not open … records were lost from the journal"): an
/// owner's claim wrote its lease line to the journal and was killed before the fdatasync (the
/// line sits in the page cache); a second owner read that lease, found it expired and wrote the
/// run's `abandoned` row (history synced), then the power went before its journal append. The
/// power loss kept the synced row and took back the lease line it was written for, so the next
/// open found a record older than its run and refused the store. A real crash produces exactly
/// this (page cache: unsynced bytes lost), so the store, not the model, was wrong: a writer now
/// fdatasyncs journal lines it did not make durable itself before writing history rows on them.
#[test]
fn a_recovery_makes_the_lease_line_it_relies_on_durable_before_its_row() {
    // The power loss keeps a random prefix of the pending writes: eight disks, so some of them
    // drop the lease line (disk seed 5 did: the store refused to open before the fix).
    for seed in 1..=8 {
        recovery_then_power_loss(seed);
    }
}

fn recovery_then_power_loss(seed: u64) {
    let disk = SimDisk::new(shared_rng(seed), FaultConfig::none());
    let s = open(&disk);
    let mut d = cronsole::testkit::jobs::command_job("a", 10);
    d.lease_seconds = 5.0;
    apply(&s, vec![d]);
    drop(s);
    let owner = open(&disk);
    fault(&disk, "jobs.journal", "fsync", ScriptedFault::Crash);
    let req = |now, owner| ClaimRequest {
        now,
        owner,
        limit: 1,
        in_flight: &[],
        clock_stepped: None,
        max_offset: None,
    };
    assert!(
        owner.claim_due(&req(t(1), "a")).is_err(),
        "the owner dies before its journal fsync"
    );
    drop(owner);
    let recoverer = open(&disk);
    fault(&disk, "jobs.journal", "write", ScriptedFault::Crash);
    assert!(
        recoverer.claim_due(&req(t(30), "b")).is_err(),
        "the recoverer dies after its abandoned row, before its journal append"
    );
    drop(recoverer);
    let hist = Path::new("/r/.cronsole/history.jsonl");
    let abandoned = |disk: &SimDisk| {
        disk.contents(hist)
            .is_some_and(|b| String::from_utf8_lossy(&b).contains("\"abandoned\""))
    };
    assert!(abandoned(&disk), "the recoverer wrote its row");
    disk.power_loss();
    // Whatever the power loss kept of the page cache, the store opens: the row is only there
    // with the lease line it was written for.
    let s = match FileStore::open_with_io(Path::new("/r/.cronsole"), disk.process(false)) {
        Ok(s) => s,
        Err(e) => panic!("disk seed {seed}: the store refuses to open after a power loss: {e}"),
    };
    let out = s.claim_at(t(31), "c", 1);
    let all = rows(&s);
    let per_run: Vec<_> = all.iter().map(|r| (r.run_id, r.status)).collect();
    let mut ids: Vec<_> = all.iter().map(|r| r.run_id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(
        ids.len(),
        all.len(),
        "disk seed {seed}: one row per run: {per_run:?}"
    );
    assert!(
        out.claims.len() <= 1,
        "at most the next slot is claimed: {:?}",
        out.claims
    );
}

/// A generated row of `job` for slots `from..=to` (`missed`, or an overlap `skipped` row).
fn generated_row(status: Status, from: i64, to: i64) -> HistoryRow {
    let mut r = HistoryRow::new("a", status, Trigger::Schedule, Some(t(from)), "o", t(to));
    r.slot_end = Some(t(to));
    if status == Status::Skipped {
        r.reason = Some(rules::reasons::REASON_OVERLAP.to_string());
    }
    r
}

/// Seed 6639 ("acknowledged row lost: … status missed", 23 of 102 000 strict seeds): landed in
/// history without their records were an overlap row for slots 150..235 s (a completion that
/// failed on the journal) and a `missed` row for 240 s (a claim that failed on the journal).
/// The retried claim computed `missed` 235..240 s; trimmed against the first landed row only,
/// it kept 240 s under a new run id and reported that row, while the write skipped it as the
/// landed one: the owner was told of a row history never held. The landed rows cover every
/// slot without a gap, so nothing is left to write or report.
#[test]
fn a_retried_missed_row_is_trimmed_against_every_landed_row_in_a_row() {
    let sched = match cronsole::testkit::jobs::command_job("a", 5).compile(t(0)) {
        Ok(s) => s,
        Err(e) => panic!("compile: {e}"),
    };
    let landed = vec![
        generated_row(Status::Skipped, 150, 235),
        generated_row(Status::Missed, 240, 240),
    ];
    let retry = generated_row(Status::Missed, 235, 240);
    let left = rules::rows::unlanded_part(retry, &landed, &sched);
    assert!(left.is_empty(), "every slot is landed already: {left:?}");
    // A gap stays to write: 235..245 over the same rows keeps 245 alone.
    let wider = generated_row(Status::Missed, 235, 245);
    let left: Vec<_> = rules::rows::unlanded_part(wider, &landed, &sched)
        .into_iter()
        .map(|r| (r.slot, r.slot_end, r.slots_count))
        .collect();
    assert_eq!(left, vec![(Some(t(245)), Some(t(245)), Some(1))]);
}

/// Chain seed 37 ("slot … is in two rows: run r14 (skipped) and run … (skipped)"), a mistake of
/// the simulator's model, not the store's: a manual run is live when a slot falls due, a pause
/// sets that slot aside for the run's overlap row, and the completion's rows (the run's own and
/// that overlap row) land while its journal write fails (disk full). History holds the slot
/// once; the record still owes it, for a retry that writes nothing again. The model counted the
/// owed slot besides the landed row: it took a run's row in history as paying that debt only
/// for a scheduled run.
#[test]
fn a_manual_runs_landed_overlap_row_is_its_record_owed_slot_not_a_second_row() {
    let (disk, s) = setup(10, 30.0);
    let first = claim_one(&s, t(0));
    s.complete(completion(&first, t(1)))
        .unwrap_or_else(|e| panic!("complete: {e}"));
    s.request_trigger("a", t(2))
        .unwrap_or_else(|e| panic!("trigger: {e}"));
    let manual = claim_one(&s, t(2));
    assert_eq!(manual.trigger, Trigger::Manual, "{manual:?}");
    // Slot 10 s falls due behind the manual run; the pause sets it aside for its overlap row.
    let out = s.claim_at(t(15), "o", 1);
    assert!(out.claims.is_empty(), "{:?}", out.claims);
    s.set_paused("a", true, t(15))
        .unwrap_or_else(|e| panic!("pause: {e}"));
    fault(&disk, "jobs.journal", "write", ScriptedFault::Enospc);
    let end = |now| {
        let mut c = completion(&manual, now);
        c.row.trigger = Trigger::Manual;
        c
    };
    assert!(s.complete(end(t(16))).is_err(), "the journal is full");
    let slot_rows = |s: &FileStore| -> Vec<HistoryRow> {
        rows(s)
            .into_iter()
            .filter(|r| r.slot.is_some_and(|f| f <= t(10)) && r.slot_end.unwrap_or(t(0)) >= t(10))
            .collect()
    };
    let landed = slot_rows(&s);
    assert_eq!(landed.len(), 1, "slot 10 s in one row: {landed:#?}");
    let mut model = crate::model::Model::default();
    model.jobs.insert(
        "a".into(),
        crate::model::JobModel {
            every: 10,
            ..Default::default()
        },
    );
    model
        .jobs
        .entry("a".into())
        .or_default()
        .set_quiet(Some(true), None, t(15));
    let jobs = s.jobs().unwrap_or_else(|e| panic!("jobs: {e}"));
    assert!(
        jobs[0].rt.lease.is_some() && jobs[0].rt.overlap.before_pause.is_some(),
        "the record still owes the run's end and its overlap row: {:?}",
        jobs[0].rt
    );
    let check = model.check(&rows(&s), &jobs, t(16), false);
    assert!(check.is_ok(), "{check:?}");
    // The retry writes neither row again.
    s.complete(end(t(17)))
        .unwrap_or_else(|e| panic!("retry: {e}"));
    assert_eq!(slot_rows(&s), landed);
    let jobs = s.jobs().unwrap_or_else(|e| panic!("jobs: {e}"));
    let check = model.check(&rows(&s), &jobs, t(17), false);
    assert!(check.is_ok(), "{check:?}");
}

/// Seed 19652 ("slot in two rows: overlap `skipped` and a run"): a claimer saw job `a`'s two
/// runs (`overlap: allow`, at most two) still live at t21 and wrote the overlap row of slot
/// t20, then its journal fsync failed (the record never advanced). Another process wrote the
/// journal (a resume of another job), so the runs' owner did not take the row for its own
/// handle's failed write; the clock stepped back, the owner completed its runs at t19 (t20 not
/// yet due) and claimed at t22. That claim generated no row, so it did not scan for leftovers,
/// and ran the slot the overlap row records. Every journal write now records how far history
/// is accounted for (`acct`), and a claim reads the rows past it (none unless a writer failed
/// between its rows and its record).
#[test]
fn a_claim_that_generates_no_row_does_not_run_a_slot_a_failed_claimers_overlap_row_records() {
    let disk = SimDisk::new(shared_rng(1), FaultConfig::none());
    let s = open(&disk);
    let mut d = cronsole::testkit::jobs::command_job("a", 10);
    d.lease_seconds = 60.0;
    d.overlap = cronsole::model::Overlap::Allow {
        max_concurrent_runs: 2,
    };
    // Never due: only written to (a pause) by a third process.
    let mut other = cronsole::testkit::jobs::command_job("z", 1000);
    other.enabled = false;
    apply(&s, vec![d, other]);
    let runs = [claim_one(&s, t(1)), claim_one(&s, t(11))];
    assert_eq!(
        runs.iter()
            .map(|c| (c.job.def.name.as_str(), c.slot))
            .collect::<Vec<_>>(),
        vec![("a", Some(t(0))), ("a", Some(t(10)))]
    );
    let req = |now, owner| ClaimRequest {
        now,
        owner,
        limit: 1,
        in_flight: &[],
        clock_stepped: None,
        max_offset: None,
    };
    let failing = open(&disk);
    // Its own journal write first: the claim's first journal fsync is then the one after its
    // rows.
    failing
        .set_paused("z", true, t(20))
        .unwrap_or_else(|e| panic!("pause: {e}"));
    fault(&disk, "jobs.journal", "fsync", ScriptedFault::Eio);
    assert!(
        failing.claim_due(&req(t(21), "b")).is_err(),
        "the claimer's journal fsync fails"
    );
    assert_eq!(generated_slots(&s), vec![t(20)], "{:#?}", rows(&s));
    // Someone else writes the journal: the owner's handle cannot tell the row from the growth
    // of history alone.
    open(&disk)
        .set_paused("z", false, t(21))
        .unwrap_or_else(|e| panic!("pause: {e}"));
    // The clock steps back: the runs end before t20 was due.
    for c in &runs {
        s.complete(completion(c, t(19)))
            .unwrap_or_else(|e| panic!("complete: {e}"));
    }
    let out = s
        .claim_due(&req(t(22), "o"))
        .unwrap_or_else(|e| panic!("claim: {e}"));
    assert!(
        out.claims.is_empty(),
        "slot t20 is recorded skipped: {:?}",
        out.claims.iter().map(|c| c.slot).collect::<Vec<_>>()
    );
    assert_eq!(generated_slots(&s), vec![t(20)], "{:#?}", rows(&s));
    let rec = s
        .job("a")
        .unwrap_or_else(|e| panic!("job: {e}"))
        .unwrap_or_else(|| panic!("job a is gone"));
    assert_eq!(rec.rt.next_slot, Some(t(30)));
}

/// An `overlap: allow` job with three live runs: the first ends; the journal then fills up
/// (`ENOSPC`) while the second and third end, so their rows are in history and the record
/// still holds their leases (not the head's first lease only).
fn allow_runs_whose_records_hit_enospc() -> (SimDisk, FileStore, Vec<Completion>) {
    let disk = SimDisk::new(shared_rng(1), FaultConfig::none());
    let s = open(&disk);
    let mut d = cronsole::testkit::jobs::command_job("a", 1);
    d.overlap = cronsole::model::Overlap::Allow {
        max_concurrent_runs: 5,
    };
    apply(&s, vec![d]);
    let claims: Vec<_> = (1..=3).map(|i| claim_one(&s, t(i))).collect();
    s.complete(completion(&claims[0], t(4)))
        .unwrap_or_else(|e| panic!("first completion: {e}"));
    let rest: Vec<Completion> = claims[1..].iter().map(|c| completion(c, t(5))).collect();
    for c in &rest {
        fault(&disk, "jobs.journal", "write", ScriptedFault::Enospc);
        assert!(s.complete(c.clone()).is_err(), "the journal is full");
    }
    (disk, s, rest)
}

fn live_runs(s: &FileStore) -> usize {
    match s.job("a") {
        Ok(Some(r)) => r.rt.live_runs(),
        other => panic!("job a: {other:?}"),
    }
}

/// After the above, the owner stops before space returns. The next open must not refuse the
/// store ("records were lost from the journal") because the rows' runs are not the record's
/// head lease — the documented crash-between-row-and-record case for every
/// lease the record holds. It must open, and the spooled completions finish the record from
/// their rows (one row each, leases released).
#[test]
fn an_allow_jobs_rows_whose_records_hit_enospc_reopen_and_the_replay_finishes_them() {
    let (disk, s, rest) = allow_runs_whose_records_hit_enospc();
    drop(s);
    let next = open(&disk);
    assert_eq!(live_runs(&next), 2, "the record still holds both runs");
    for c in rest.iter().cloned() {
        next.complete_recorded(c)
            .unwrap_or_else(|e| panic!("replay: {e}"));
    }
    assert_eq!(live_runs(&next), 0, "both runs finished from their rows");
    let all = rows(&next);
    for c in &rest {
        let mine = all.iter().filter(|r| r.run_id == c.run_id).count();
        assert_eq!(mine, 1, "one row for run {}: {all:#?}", c.run_id);
    }
    assert_eq!(all.len(), 3, "{all:#?}");
    drop(next);
    let again = open(&disk);
    assert_eq!(live_runs(&again), 0);
}

/// The same handle retrying (the engine sees the row in history and asks the store to finish
/// the record): the record is written, no second row.
#[test]
fn a_retry_that_finds_its_row_recorded_still_writes_the_job_record() {
    let (_disk, s, rest) = allow_runs_whose_records_hit_enospc();
    for c in rest.iter().cloned() {
        s.complete_recorded(c)
            .unwrap_or_else(|e| panic!("retry: {e}"));
    }
    assert_eq!(live_runs(&s), 0, "both runs finished from their rows");
    assert_eq!(rows(&s).len(), 3);
}

/// A job record that does not hold the run is left alone: `complete_recorded` of a run already
/// finished writes nothing.
#[test]
fn finishing_a_record_that_no_longer_holds_the_run_writes_nothing() {
    let (disk, s, rest) = allow_runs_whose_records_hit_enospc();
    for c in rest.iter().cloned() {
        s.complete_recorded(c)
            .unwrap_or_else(|e| panic!("retry: {e}"));
    }
    drop(s);
    let next = open(&disk);
    for c in rest.iter().cloned() {
        next.complete_recorded(c)
            .unwrap_or_else(|e| panic!("second replay: {e}"));
    }
    assert_eq!(rows(&next).len(), 3);
    assert_eq!(live_runs(&next), 0);
}

/// The `kill -9` form of the above: nothing replays the completions, their leases expire, and
/// another owner recovers them. Recovery looked for the landed row of the first expired lease
/// only and recorded the others `abandoned` beside their `succeeded` rows (a status that did
/// not happen, two rows for one run). Every expired run with a landed row is finished from it.
#[test]
fn recovery_finishes_every_expired_allow_run_from_its_landed_row() {
    let (disk, s, rest) = allow_runs_whose_records_hit_enospc();
    drop(s);
    let next = open(&disk);
    next.claim_due(&claim_req(t(120), "b", 0))
        .unwrap_or_else(|e| panic!("recovery: {e}"));
    assert_eq!(live_runs(&next), 0, "both runs recovered");
    let all = rows(&next);
    for c in &rest {
        let mine: Vec<_> = all.iter().filter(|r| r.run_id == c.run_id).collect();
        assert_eq!(mine.len(), 1, "one row for run {}: {all:#?}", c.run_id);
        assert_eq!(mine[0].status, Status::Succeeded);
    }
    assert!(
        all.iter().all(|r| r.status != Status::Abandoned),
        "{all:#?}"
    );
}

/// Seed 29376 ("slot 08:00:40 of job3 is in two rows": a `missed` row and the job's lease): a
/// claim leased the slot, its journal fsync failed (EIO) and so did the fsync of the cut back;
/// the same handle's retry, two seconds later, found the slot past its misfire grace, wrote a
/// `missed` row for it (history first) and died before its journal write; a power loss then
/// kept the failed claim's lease line (written, never cut durably) beside the `missed` row.
/// The retry now makes the cut durable before writing a row. Power losses keep a random prefix
/// of the pending writes, so several disks are tried; some keep the lease line without the fix.
#[test]
fn a_claim_retried_after_a_failed_cut_does_not_record_the_slot_the_failed_claim_leased() {
    for seed in 1..=24 {
        let disk = SimDisk::new(shared_rng(seed), FaultConfig::none());
        // The handle that made the journal durable itself (its last append succeeded).
        let s = ran_with_grace(&disk);
        for _ in 0..2 {
            fault(&disk, "jobs.journal", "fsync", ScriptedFault::Eio);
        }
        let req = |now| claim_req(now, "o", 1);
        assert!(
            s.claim_due(&req(t(10))).is_err(),
            "seed {seed}: the journal fsync fails"
        );
        fault(&disk, "jobs.journal", "write", ScriptedFault::Crash);
        assert!(
            s.claim_due(&req(t(12))).is_err(),
            "seed {seed}: the retry dies before its journal write"
        );
        drop(s);
        disk.power_loss();
        let s = match FileStore::open_with_io(Path::new("/r/.cronsole"), disk.process(true)) {
            Ok(s) => s,
            Err(e) => panic!("seed {seed}: the store must open after the power loss: {e}"),
        };
        let rec = s
            .job("a")
            .unwrap_or_else(|e| panic!("job: {e}"))
            .unwrap_or_else(|| panic!("job a is gone"));
        let leased = rec.rt.lease.as_ref().and_then(|l| l.slot);
        let missed = missed_rows(&s);
        assert!(
            !(leased == Some(t(10)) && missed.iter().any(|(a, _)| *a == Some(t(10)))),
            "seed {seed}: slot t10 is both leased and missed: {missed:?}"
        );
    }
}

/// Seeds 2000945, 2002290, 2007026 ("recorded spend over the budget"): a recovery wrote the
/// run's `abandoned` row carrying the call's worst case ($0.30), then died before the journal;
/// the run's owner, still alive, settled the call to its real cost ($0.02); the next claim
/// finished the run from the landed row. It booked $0.02 while history shows $0.30, so the
/// budget let another call through that the rows then put over the limit. The counters now
/// book what the landed row shows.
#[test]
fn a_landed_abandoned_row_books_the_money_it_shows() {
    use cronsole::store::{ReserveOutcome, ReserveRequest, Settlement};
    let (disk, s) = setup(5, 10.0);
    let c = claim_one(&s, t(1));
    let req = ReserveRequest {
        job: "a",
        run_id: c.run_id,
        owner: "o",
        usd: 0.3,
        now: t(1),
    };
    let Ok(ReserveOutcome::Reserved { id }) = s.reserve(&req) else {
        panic!("the call's reservation");
    };
    let claim = |now| claim_req(now, "b", 0);
    let recoverer = open(&disk);
    fault(&disk, "jobs.journal", "write", ScriptedFault::Crash);
    assert!(
        recoverer.claim_due(&claim(t(30))).is_err(),
        "the recoverer dies after its rows"
    );
    drop(recoverer);
    // The owner was only slow: its call returns and settles below the worst case.
    s.settle("a", id, Settlement::Cost(0.02), t(31))
        .unwrap_or_else(|e| panic!("settle: {e}"));
    let third = open(&disk);
    third
        .claim_due(&claim(t(32)))
        .unwrap_or_else(|e| panic!("recovery: {e}"));
    let shown: f64 = rows(&third).iter().map(|r| r.cost_usd).sum();
    assert!((shown - 0.3).abs() < 1e-9, "history shows {shown}");
    let jobs = third.jobs().unwrap_or_else(|e| panic!("jobs: {e}"));
    let counted = jobs[0].rt.counters.period_cost_usd;
    assert!(
        counted >= shown - 1e-9,
        "the budget counts {counted}, history shows {shown}"
    );
}

/// Tool-loop seeds 2000029 and 2000031 ("recorded tool call c1 is not on its abandoned row"): a
/// run's first loop step created its record file, and the file's fsync failed before the
/// directory was synced. The retried step found the file, appended, fsynced — and never synced
/// the directory, so the acknowledged step rested on a name a power loss took back: the run's
/// `abandoned` row had no transcript. A name is now synced until a sync of it succeeded.
#[test]
fn a_loop_step_retried_after_its_first_fsync_failed_survives_a_power_loss() {
    use cronsole::store::{AwaitStep, LoopStep, StepOutcome};
    use cronsole::transcript::Transcript;
    let (disk, s) = setup(3600, 30.0);
    let c = claim_one(&s, t(0));
    let mut tr = Transcript::new();
    tr.push(dispatched_call(1, "c1", t(1)));
    let record = tr.take_delta();
    let step = LoopStep {
        job: "a",
        run_id: c.run_id,
        owner: "o",
        settle: None,
        reserve: None,
        set_aside: None,
        record: &record,
        awaiting: AwaitStep::Keep,
        now: t(1),
    };
    disk.script(Scripted {
        file: format!("{}.jsonl", c.run_id),
        op: "fsync",
        fault: ScriptedFault::Eio,
    });
    assert!(s.loop_step(&step).is_err(), "the record's fsync fails");
    let out = s
        .loop_step(&LoopStep { now: t(2), ..step })
        .unwrap_or_else(|e| panic!("retried step: {e}"));
    assert!(matches!(out, StepOutcome::Stepped { .. }), "{out:?}");
    drop(s);
    disk.power_loss();
    let s = open(&disk);
    // The owner is gone: its lease expires and the next claim records the run `abandoned`.
    let _ = s.claim_at(t(3600), "o2", 1);
    let row = rows(&s)
        .into_iter()
        .find(|r| r.run_id == c.run_id)
        .unwrap_or_else(|| panic!("the run has no row"));
    assert_eq!(row.status, Status::Abandoned, "{row:#?}");
    let ids: Vec<String> = cronsole::testkit::tools::calls(&row)
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(ids, vec!["c1".to_string()], "{row:#?}");
}

/// A `dispatched` call `id` of turn `turn`, as a loop step records it before the call runs.
fn dispatched_call(turn: u32, id: &str, at: DateTime<Utc>) -> cronsole::transcript::Entry {
    use cronsole::transcript::{CallEntry, Entry};
    Entry::Call(CallEntry::dispatched(
        turn,
        id.into(),
        "files.read".into(),
        Some("files".into()),
        "{}".into(),
        at,
    ))
}

/// Tool-loop seed 31 ("recorded tool call c1 … is not on its abandoned row"): a recoverer
/// whose clock ran ahead wrote a run's `abandoned` row (the calls recorded so far on it) and
/// died before its journal write, so the run still held its lease and went on: a loop step
/// recorded one more call. Its owner then died too, and the next recovery finished the run
/// from the landed `abandoned` row, which lacks that call. The recovery now writes a fresh
/// `abandoned` row carrying the whole record, superseding the landed one (a query shows one
/// row for the run), and books no less than the landed row showed.
#[test]
fn a_second_recovery_keeps_the_calls_recorded_after_a_dead_recoverers_abandoned_row() {
    use cronsole::store::{AwaitStep, LoopStep, StepOutcome};
    use cronsole::transcript::Transcript;
    let (disk, s) = setup(3600, 30.0);
    let c = claim_one(&s, t(0));
    let mut tr = Transcript::new();
    let step = |s: &FileStore, tr: &mut Transcript, now, reserve| {
        let record = tr.take_delta();
        s.loop_step(&LoopStep {
            job: "a",
            run_id: c.run_id,
            owner: "o",
            settle: None,
            reserve,
            set_aside: None,
            record: &record,
            awaiting: AwaitStep::Keep,
            now,
        })
        .unwrap_or_else(|e| panic!("step: {e}"))
    };
    tr.push(dispatched_call(1, "c0", t(1)));
    let out = step(&s, &mut tr, t(1), Some(0.25));
    assert!(matches!(out, StepOutcome::Stepped { .. }), "{out:?}");
    // A recoverer whose clock runs ahead sees the lease expired; it dies after its rows.
    let recoverer = open(&disk);
    fault(&disk, "jobs.journal", "write", ScriptedFault::Crash);
    assert!(
        recoverer.claim_due(&claim_req(t(60), "b", 0)).is_err(),
        "the recoverer dies after its rows"
    );
    drop(recoverer);
    // The run still holds its lease (its owner's clock is behind): one more call.
    tr.push(dispatched_call(2, "c1", t(2)));
    let out = step(&s, &mut tr, t(2), None);
    assert!(matches!(out, StepOutcome::Stepped { .. }), "{out:?}");
    drop(s);
    // The owner dies too; the next recovery ends the run.
    let third = open(&disk);
    let _ = third.claim_at(t(120), "c", 0);
    let runs: Vec<HistoryRow> = rows(&third)
        .into_iter()
        .filter(|r| r.run_id == c.run_id)
        .collect();
    assert_eq!(runs.len(), 1, "one row per run: {runs:#?}");
    let row = &runs[0];
    assert_eq!(row.status, Status::Abandoned, "{row:#?}");
    let ids: Vec<String> = cronsole::testkit::tools::calls(row)
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(ids, vec!["c0".to_string(), "c1".to_string()], "{row:#?}");
    assert!((row.cost_usd - 0.25).abs() < 1e-9, "{row:#?}");
    let jobs = third.jobs().unwrap_or_else(|e| panic!("jobs: {e}"));
    let counted = jobs[0].rt.counters.period_cost_usd;
    assert!(
        counted >= row.cost_usd - 1e-9,
        "the budget counts {counted}, history shows {}",
        row.cost_usd
    );
}

/// "Slot has no row and is not in flight" (fresh clock-fault seeds 7000376, 7000986 and eight
/// more, and 5003522): a job stored moments before the host's clock went back four hours is
/// stored again from the stepped-back clock (a grid of its own) and runs there; when the clock
/// is set right, its first slot comes back, but its grid origin stayed on the stepped-back
/// grid, 5 s off, so that grid's slot before the first slot had no row. The origin now comes
/// back with the first slot.
#[test]
fn a_first_slot_put_back_after_a_step_back_comes_with_its_grid_origin() {
    let (_disk, s) = setup(10, 20.0);
    let stored_at = t(-10);
    let back = chrono::Duration::hours(4);
    let ms = chrono::Duration::milliseconds;
    // Four hours back, 5 s after the apply: stored again from that clock and run there; its
    // owner dies.
    let out = s.claim_at(stored_at + ms(5_289) - back, "o1", 1);
    assert!(out.claims.is_empty(), "{:?}", out.claims);
    assert_eq!(
        s.claim_at(stored_at + ms(15_982) - back, "o1", 1)
            .claims
            .len(),
        1
    );
    // Set right: another owner recovers the lapsed lease and claims the first slot, which
    // stands for every slot up to its claim.
    let out = s.claim_at(stored_at + ms(22_394), "o2", 1);
    let c = out.claims.first().expect("the first slot is due");
    assert_eq!(c.slot, Some(t(0)));
    let rec = s
        .job("a")
        .unwrap_or_else(|e| panic!("job: {e}"))
        .expect("stored");
    assert_eq!(rec.rt.anchor, stored_at, "the grid it was stored on");
    assert_eq!(rec.rt.next_slot, Some(t(20)));
}

/// "Slot has no row and is not in flight" (fresh clock-fault seed 8003900): a job stored just
/// before the host's clock went back four hours is stored again on the stepped-back clock (a
/// grid 5 s off its own) and runs there; its owner dies. Set right, a claim puts the job's
/// first slot and grid back, recovers the lapsed run and records the slots past their grace
/// `missed`, then dies before its job record. The next process does the same again; its
/// `missed` row, trimmed against the landed one, was cut on the grid the job had before the
/// claim (the stepped-back one): it named a slot 5 s off the job's grid and left the grid's
/// next slot, which the job's next slot then passed, without a row.
#[test]
fn a_missed_row_trimmed_against_a_dead_claims_row_is_cut_on_the_grid_put_back() {
    let disk = SimDisk::new(shared_rng(1), FaultConfig::none());
    let s = open(&disk);
    let mut d = cronsole::testkit::jobs::command_job("a", 15);
    d.misfire_grace_seconds = Some(18.0);
    d.lease_seconds = 3.0;
    let file = apply(&s, vec![d]);
    let stored_at = stored(&file);
    let back = chrono::Duration::hours(4);
    let ms = chrono::Duration::milliseconds;
    // Four hours back: stored again from that clock, then run there; its owner dies.
    assert!(
        s.claim_at(stored_at + ms(5_841) - back, "o1", 1)
            .claims
            .is_empty()
    );
    assert_eq!(
        s.claim_at(stored_at + ms(32_478) - back, "o1", 1)
            .claims
            .len(),
        1
    );
    drop(s);
    // Set right: a claim that recovers the run and records t(0) and t(15) missed dies before
    // its job record.
    another_process_dies_claiming(&disk, &claim_req(stored_at + ms(44_468), "o2", 1));
    let fresh = open(&disk);
    fresh
        .claim_due(&claim_req(stored_at + ms(49_912), "o3", 0))
        .unwrap_or_else(|e| panic!("claim: {e}"));
    assert_eq!(
        missed_rows(&fresh),
        vec![(Some(t(30)), Some(t(30))), (Some(t(0)), Some(t(15)))],
        "newest first: each slot of the grid put back in one row"
    );
    let rec = fresh
        .job("a")
        .unwrap_or_else(|e| panic!("job: {e}"))
        .expect("stored");
    assert_eq!(rec.rt.anchor, stored_at, "the grid it was stored on");
    assert_eq!(rec.rt.next_slot, Some(t(45)));
}

/// The late end of a one-shot whose owner was stopped for its lease after the run's model
/// call was answered and paid ($0.02 of a $0.30 reservation), while another owner, with no
/// room to run it, recovered the lapsed lease: `abandoned`, carrying the call's cost, and the
/// one-shot owed a retry. The late `succeeded` row supersedes it: one row for the run, the
/// call's cost counted once (the `abandoned` row's amount replaced, not added to), and the job
/// spent, so no owner runs the retry.
#[test]
fn a_one_shots_late_end_after_a_recovery_spends_the_job_and_books_its_cost_once() {
    use cronsole::store::{ReserveOutcome, ReserveRequest, Settlement};
    let disk = SimDisk::new(shared_rng(1), FaultConfig::none());
    let s = open(&disk);
    let mut d = cronsole::testkit::jobs::command_job("a", 3600);
    d.max_runs = Some(1);
    d.lease_seconds = 8.0;
    apply(&s, vec![d]);
    let c = claim_one(&s, t(0));
    let req = ReserveRequest {
        job: "a",
        run_id: c.run_id,
        owner: "o",
        usd: 0.3,
        now: t(1),
    };
    let Ok(ReserveOutcome::Reserved { id }) = s.reserve(&req) else {
        panic!("the call's reservation");
    };
    s.settle("a", id, Settlement::Cost(0.02), t(2))
        .unwrap_or_else(|e| panic!("settle: {e}"));
    // The owner loses the store; the lease (to t8) lapses, and another owner recovers it.
    let other = open(&disk);
    let out = other
        .claim_due(&claim_req(t(30), "b", 0))
        .unwrap_or_else(|e| panic!("recovery: {e}"));
    let abandoned: Vec<_> = out
        .rows
        .iter()
        .filter(|r| r.run_id == c.run_id)
        .map(|r| (r.status, r.cost_usd))
        .collect();
    assert_eq!(abandoned, vec![(Status::Abandoned, 0.02)], "{out:?}");
    let job = |st: &FileStore| {
        st.job("a")
            .unwrap_or_else(|e| panic!("job: {e}"))
            .unwrap_or_else(|| panic!("job a is gone"))
    };
    assert!(
        job(&other).rt.recovery_pending,
        "the one-shot is owed a retry"
    );
    // The store is back for the owner: its run's end lands late.
    let mut late = completion(&c, t(31));
    late.row.cost_usd = 0.02;
    let out = s
        .complete(late)
        .unwrap_or_else(|e| panic!("late completion: {e}"));
    assert!(out.stale && out.rows[0].supersedes_abandoned, "{out:?}");
    let mine: Vec<_> = rows(&other)
        .into_iter()
        .filter(|r| r.run_id == c.run_id)
        .map(|r| (r.status, r.cost_usd))
        .collect();
    assert_eq!(mine, vec![(Status::Succeeded, 0.02)], "one row per run");
    let rec = job(&other);
    assert!(
        (rec.rt.counters.period_cost_usd - 0.02).abs() < 1e-9,
        "the budget counts {}",
        rec.rt.counters.period_cost_usd
    );
    assert!(
        rec.rt.retired && !rec.rt.recovery_pending && rec.rt.lease.is_none(),
        "{:?}",
        rec.rt
    );
    let again = other
        .claim_due(&claim_req(t(40), "b", 1))
        .unwrap_or_else(|e| panic!("claim: {e}"));
    assert!(again.claims.is_empty(), "the retry ran: {again:?}");
}

/// Fault-simulator seed 8003776: a one-shot's first run ends `skipped` (its budget refused) after
/// another owner recovered its lapsed lease; that late end's row lands but its record does not
/// (the journal is full), so the one-shot is still owed its retry. The retry, claimed by the
/// recoverer, ends `skipped` too, with the same slot and no reason: its row is its own, not the
/// first run's row already in history, and must be written.
#[test]
fn a_retrys_row_like_the_first_runs_late_row_is_still_written() {
    let disk = SimDisk::new(shared_rng(1), FaultConfig::none());
    let s = open(&disk);
    let mut d = cronsole::testkit::jobs::command_job("a", 3600);
    d.max_runs = Some(1);
    d.lease_seconds = 8.0;
    apply(&s, vec![d]);
    let first = claim_one(&s, t(0));
    let other = open(&disk);
    other
        .claim_due(&claim_req(t(30), "b", 0))
        .unwrap_or_else(|e| panic!("recovery: {e}"));
    let mut late = completion(&first, t(31));
    late.row.status = Status::Skipped;
    fault(&disk, "jobs.journal", "write", ScriptedFault::Enospc);
    assert!(s.complete(late).is_err(), "the journal is full");
    let retry = other
        .claim_due(&claim_req(t(40), "b", 1))
        .unwrap_or_else(|e| panic!("retry claim: {e}"));
    let Some(r) = retry.claims.into_iter().next() else {
        panic!("the one-shot's retry is owed: {:?}", rows(&other));
    };
    assert_eq!(r.slot, first.slot, "the retry runs the first run's slot");
    let mut row = HistoryRow::new("a", Status::Skipped, r.trigger, r.slot, "b", t(41));
    row.run_id = r.run_id;
    let done = other
        .complete(Completion {
            job: "a".into(),
            run_id: r.run_id,
            owner: "b".into(),
            now: t(41),
            row,
            state: None,
            hold_until: None,
        })
        .unwrap_or_else(|e| panic!("retry's completion: {e}"));
    assert_eq!(done.rows[0].run_id, r.run_id, "{done:?}");
    let all = rows(&other);
    let mine = all.iter().filter(|x| x.run_id == r.run_id).count();
    assert_eq!(mine, 1, "the retry's row: {all:#?}");
}

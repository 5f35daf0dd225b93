//! The simulated world: a virtual clock, several owners running a small engine-like state
//! machine over the real store code, operators racing `apply`/`pause`/`resume`/`trigger`, and
//! faults — all chosen from one seeded RNG, so a seed replays exactly (on the file store).
//!
//! An owner, per tick: finishes the runs whose simulated duration is over (a completion that
//! fails is kept and retried on the next tick, as the engine does),
//! renews leases every `lease/3`, then claims due work up to its free capacity. A run "calls a
//! model" after a budget check through [`BudgetGate`]. Owners can be stopped (`SIGSTOP`, maybe
//! past their leases), killed between operations, or killed by the disk at an I/O boundary; a
//! power loss kills every process and throws the page cache away. Dead owners come back as new
//! owners (a supervisor restarts them).
//!
//! With tool loops (`Params::loops`), most runs are agents that use tools: each turn is
//! reserved in a loop step (`Store::loop_step`: renewal, settlement, reservation and transcript
//! delta in one write), each call is recorded as dispatched in a step of its own before it
//! "runs", and its result goes with the next turn's step — the engine's order. A turn the
//! budget refuses ends the run `failed`.

use cronsole::store::OpenError;
use std::collections::BTreeMap;
use std::fmt::Write as _;

use chrono::{DateTime, Duration, TimeZone, Utc};
use cronsole::model::{
    Budget, BudgetPeriod, HistoryRow, JobDef, JobsFile, Settings, Status, Trigger,
};
use cronsole::store::{AwaitStep, LoopStep, StepOutcome};
use cronsole::store::{
    ClaimRequest, Completion, HistoryQuery, RenewOutcome, Renewal, Store, StoreError,
};
use cronsole::store::{ReserveOutcome, ReserveRequest, Settlement};
use cronsole::testkit::simio::{Rng, SharedRng};
use cronsole::transcript::{CallEntry, CallState, Delta, Entry, Transcript, TurnEntry};
use uuid::Uuid;

use crate::clocks::{self, OwnerClock};
use crate::model::{Execution, JobModel, Model};

/// A store handle for one simulated process.
pub struct Proc {
    pub store: Box<dyn Store>,
    /// False once the process was killed by the fault layer (crash or power loss).
    pub alive: Box<dyn Fn() -> bool>,
}

/// Where the store lives and how faults reach it.
pub trait Backend {
    /// A new process over the store. `faulty: false` for the checker. Errors: the text, and
    /// whether the process is still alive (a dead one was killed by an injected fault).
    fn open(&mut self, faulty: bool) -> Result<Proc, (StoreError, bool)>;
    /// Lose power now (every process dies, unsynced data is lost). False: not supported.
    fn power_loss(&mut self) -> bool;
    /// Power losses so far (processes of an older epoch are dead).
    fn epoch(&self) -> u64;
    /// Faults injected since the last call.
    fn fault_log(&mut self) -> Vec<String>;
    /// Turn fault injection off for the final quiet phase.
    fn faults_off(&mut self);
    /// Print every stored file (`SIM_DUMP`, when an invariant breaks); nothing by default.
    fn dump(&self) {}
    /// An owner's heartbeat sent with its clock `wall`: where owner records are not in the
    /// simulated store, the backend keeps the newest for the handles it opens.
    fn heartbeat(&mut self, wall: DateTime<Utc>) {
        let _ = wall;
    }
}

/// The budget check before a model call: a reservation in the store (`Store::reserve`, atomic
/// for every owner), settled to the call's real cost before the run completes. A run whose
/// owner dies keeps its worst case reserved, as in the engine. The model allows no overrun.
pub trait BudgetGate {
    /// Reserve `worst` for this run's call: `Some(id)` when it fits, `None` when refused.
    fn admit(
        &self,
        store: &dyn Store,
        job: &str,
        run_id: Uuid,
        owner: &str,
        worst: f64,
        now: DateTime<Utc>,
    ) -> Result<Option<Uuid>, StoreError>;
    /// Settle a reservation to the call's real cost.
    fn settle(
        &self,
        store: &dyn Store,
        job: &str,
        id: Uuid,
        cost: f64,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError>;
    /// Whether admission is atomic across owners (no overrun allowed by the model).
    fn atomic(&self) -> bool;
}

pub struct ReserveGate;

impl BudgetGate for ReserveGate {
    fn admit(
        &self,
        store: &dyn Store,
        job: &str,
        run_id: Uuid,
        owner: &str,
        worst: f64,
        now: DateTime<Utc>,
    ) -> Result<Option<Uuid>, StoreError> {
        let req = ReserveRequest {
            job,
            run_id,
            owner,
            usd: worst,
            now,
        };
        Ok(match store.reserve(&req)? {
            ReserveOutcome::Reserved { id } => Some(id),
            ReserveOutcome::Refused { .. } => None,
        })
    }

    fn settle(
        &self,
        store: &dyn Store,
        job: &str,
        id: Uuid,
        cost: f64,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        store.settle(job, id, Settlement::Cost(cost), now)
    }

    fn atomic(&self) -> bool {
        true
    }
}

/// Knobs of one simulation.
#[derive(Debug, Clone, Copy)]
pub struct Params {
    pub steps: u32,
    pub max_owners: usize,
    /// Probability of a power loss as a between-steps action (the disk injects more).
    pub power_loss_step: f64,
    /// Whether the backend replays exactly (the file store) or not (PostgreSQL).
    pub deterministic: bool,
    /// Add `after:` jobs chained to the scheduled ones. Drawn from their own
    /// generator, so seeds without chains play exactly as before.
    pub chains: bool,
    /// Runs are tool loops (see the module doc). Drawn from their own generator too.
    pub loops: bool,
    /// Clock faults (`simulation/clocks.rs`): the host's clock steps, owners' clocks are off
    /// it. Drawn from their own generator too.
    pub clocks: bool,
}

struct Run {
    job: String,
    run_id: Uuid,
    slot: Option<DateTime<Utc>>,
    trigger: Trigger,
    /// On the owner's clock (the row's start).
    claimed_at: DateTime<Utc>,
    /// Monotonic instants: the claim, the run's end, the next renewal.
    claimed_real: DateTime<Utc>,
    ends_at: DateTime<Utc>,
    next_renew: DateTime<Utc>,
    lease_secs: f64,
    status: Status,
    cost: f64,
    admitted: bool,
    /// The budget reservation of its call, until settled.
    reservation: Option<Uuid>,
    /// What that reservation settles to (a loop's current turn; a single call's whole cost).
    settle_cost: f64,
    /// A completion was tried and failed: its row may or may not be in the store.
    tried: bool,
    /// A tool loop's progress, for a run that is one.
    looping: Option<Looping>,
}

/// Where a tool-using run's loop is.
struct Looping {
    /// Turns answered so far (the first is answered when the run starts).
    turn: u32,
    /// Turns still to reserve after this one.
    left: u32,
    /// The next step: the current turn's call recorded as dispatched (`true`), or the next
    /// turn reserved with that call's result (`false`).
    dispatch: bool,
    /// When the next step is due (monotonic).
    next_at: DateTime<Utc>,
    transcript: Transcript,
    /// Entries a failed step gave back: written with the next.
    carry: Vec<Delta>,
    /// Each turn's worst case.
    worst: f64,
}

struct Owner {
    id: String,
    proc: Option<Proc>,
    epoch: u64,
    capacity: usize,
    runs: Vec<Run>,
    /// Until when (monotonic time) the process is stopped.
    stopped_until: Option<DateTime<Utc>>,
    incarnation: u32,
    clock: OwnerClock,
}

pub struct World<'a> {
    pub seed: u64,
    rng: SharedRng,
    backend: &'a mut dyn Backend,
    gate: Box<dyn BudgetGate>,
    params: Params,
    /// The host's wall clock: the store's clock, and what operator commands read.
    pub now: DateTime<Utc>,
    /// Monotonic time: what passes, whatever the clocks say (run lengths, pauses, pacing).
    pub real: DateTime<Utc>,
    /// The host clock's current step away from where it would be (0 when none).
    host_step_ms: i64,
    /// An owner's clock offset bound: a quarter of the shortest lease, at most 60 s.
    bound_ms: i64,
    /// Draws of the clock faults (their own generator: seeds without them play as before).
    clock_rng: Rng,
    t0: DateTime<Utc>,
    owners: Vec<Owner>,
    defs: Vec<JobDef>,
    present: BTreeMap<String, bool>,
    settings: Settings,
    pub model: Model,
    pub log: Vec<String>,
    labels: BTreeMap<Uuid, String>,
    checker: Option<Proc>,
    checker_epoch: u64,
    pub stats: Stats,
    /// Draws of the tool loops (their own generator: seeds without loops play as before).
    loop_rng: Rng,
}

#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    pub claims: u64,
    pub completions: u64,
    pub store_errors: u64,
    pub crashes: u64,
    pub power_losses: u64,
    /// Tool calls whose loop step the store acknowledged.
    pub tool_calls: u64,
}

/// A failing seed: what broke and the step log that led there.
#[derive(Debug)]
pub struct Failure {
    pub seed: u64,
    pub what: String,
    pub log: Vec<String>,
    /// False for a backend whose timing is not ours (PostgreSQL): the seed is a lead only.
    pub replays: bool,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "simulation seed {} failed: {}", self.seed, self.what)?;
        if self.replays {
            writeln!(
                f,
                "replay: SIM_SEED={} cargo test --release --test simulation -- --nocapture",
                self.seed
            )?;
        } else {
            writeln!(
                f,
                "(a real server's timing does not replay exactly: rerun with SIM_PG_FIRST={} SIM_PG_SEEDS=1)",
                self.seed
            )?;
        }
        writeln!(f, "step log ({} lines):", self.log.len())?;
        for l in &self.log {
            writeln!(f, "  {l}")?;
        }
        Ok(())
    }
}

fn rng_of(r: &SharedRng) -> std::sync::MutexGuard<'_, Rng> {
    r.lock().unwrap_or_else(|e| e.into_inner())
}

impl<'a> World<'a> {
    pub fn new(
        seed: u64,
        rng: SharedRng,
        backend: &'a mut dyn Backend,
        params: Params,
    ) -> World<'a> {
        let t0 = Utc
            .timestamp_opt(1_800_000_000, 0)
            .single()
            .unwrap_or_default();
        let mut w = World {
            seed,
            rng,
            backend,
            gate: Box::new(ReserveGate),
            params,
            now: t0,
            real: t0,
            host_step_ms: 0,
            bound_ms: 60_000,
            clock_rng: Rng::new(seed ^ 0xC10C_5000_0000_0001),
            t0,
            owners: Vec::new(),
            defs: Vec::new(),
            present: BTreeMap::new(),
            settings: Settings::default(),
            model: Model::default(),
            log: Vec::new(),
            labels: BTreeMap::new(),
            checker: None,
            checker_epoch: 0,
            stats: Stats::default(),
            loop_rng: Rng::new(seed ^ 0x7001_1009_0000_0001),
        };
        w.make_jobs();
        w
    }

    fn r(&self) -> std::sync::MutexGuard<'_, Rng> {
        rng_of(&self.rng)
    }

    fn make_jobs(&mut self) {
        let n = self.r().range(2, 5);
        let budget = [0.5, 1.0, 2.0][self.r().below(3) as usize];
        self.settings.budget = Some(Budget {
            max_cost_usd: budget,
            period: BudgetPeriod::Total,
        });
        self.model.budget = Some(budget);
        for i in 0..n {
            let every = [5u64, 10, 15, 30, 60][self.r().below(5) as usize];
            let mut d = cronsole::testkit::jobs::command_job(&format!("job{i}"), every);
            d.lease_seconds = [3.0, 5.0, 10.0, 20.0][self.r().below(4) as usize];
            if self.r().chance(0.3) {
                d.misfire_grace_seconds = Some(self.r().range(1, 30) as f64);
            }
            let one_shot = self.r().chance(0.2);
            if one_shot {
                d.max_runs = Some(1);
            }
            d.run_immediately = self.r().chance(0.15);
            self.model.jobs.insert(
                d.name.clone(),
                JobModel {
                    every: every as i64,
                    one_shot,
                    ..JobModel::default()
                },
            );
            self.present.insert(d.name.clone(), true);
            self.defs.push(d);
        }
        if self.params.chains {
            self.make_chains();
        }
        let shortest = self
            .defs
            .iter()
            .map(|d| d.lease_seconds)
            .fold(f64::INFINITY, f64::min);
        self.bound_ms = ((shortest * 1000.0 / 4.0) as i64).clamp(1, 60_000);
        let owners = self.r().range(1, self.params.max_owners as u64) as usize;
        for i in 0..owners {
            let capacity = self.r().range(1, 3) as usize;
            let clock = if self.params.clocks {
                OwnerClock::draw(&mut self.clock_rng, self.bound_ms)
            } else {
                OwnerClock::default()
            };
            self.owners.push(Owner {
                id: format!("o{i}.0"),
                proc: None,
                epoch: 0,
                capacity,
                runs: Vec::new(),
                stopped_until: None,
                incarnation: 0,
                clock,
            });
        }
    }

    /// One or two jobs chained after the scheduled ones (sometimes after another chained job,
    /// sometimes fan-in), `on` drawn from success, failure, completion.
    fn make_chains(&mut self) {
        use cronsole::model::{After, ChainOn};
        let mut r = cronsole::testkit::simio::Rng::new(self.seed ^ 0xC4A1_7E55_0000_0001);
        let n = r.range(1, 2);
        for k in 0..n {
            let mut d = cronsole::testkit::jobs::command_job(&format!("chain{k}"), 60);
            d.schedule = cronsole::schedule::ScheduleSpec::AfterOnly;
            d.lease_seconds = [3.0, 5.0, 10.0][r.below(3) as usize];
            let parents = if r.chance(0.3) && self.defs.len() >= 2 {
                2
            } else {
                1
            };
            let mut names: Vec<String> = Vec::new();
            while names.len() < parents {
                let p = self.defs[r.below(self.defs.len() as u64) as usize]
                    .name
                    .clone();
                if !names.contains(&p) {
                    names.push(p);
                }
            }
            d.after = names
                .into_iter()
                .map(|job| After {
                    job,
                    on: [ChainOn::Success, ChainOn::Failure, ChainOn::Completion]
                        [r.below(3) as usize],
                })
                .collect();
            self.model.chains.insert(d.name.clone(), d.after.clone());
            self.model.jobs.insert(d.name.clone(), JobModel::default());
            self.present.insert(d.name.clone(), true);
            self.defs.push(d);
        }
    }

    fn ts(&self, t: DateTime<Utc>) -> String {
        let ms = (t - self.t0).num_milliseconds();
        format!("+{}.{:03}s", ms / 1000, (ms % 1000).abs())
    }

    fn label(&mut self, id: Uuid) -> String {
        let n = self.labels.len();
        self.labels
            .entry(id)
            .or_insert_with(|| format!("r{n}"))
            .clone()
    }

    fn note(&mut self, s: String) {
        let line = format!("{} {s}", self.ts(self.now));
        self.log.push(line);
    }

    fn drain_faults(&mut self) {
        for f in self.backend.fault_log() {
            if f.starts_with("power loss") {
                self.stats.power_losses += 1;
            } else if f.starts_with("crash") {
                self.stats.crashes += 1;
            }
            self.note(format!("  fault: {f}"));
        }
    }

    fn jobs_file(&self) -> JobsFile {
        JobsFile {
            settings: self.settings.clone(),
            jobs: self
                .defs
                .iter()
                .filter(|d| self.present.get(&d.name).copied().unwrap_or(false))
                .cloned()
                .collect(),
        }
    }

    /// Run the whole simulation: setup, the random steps, then a quiet phase and the end checks.
    pub fn run(mut self) -> Result<Stats, Failure> {
        let r = self.run_inner();
        if r.is_ok() && std::env::var("SIM_LOG").is_ok() {
            // A replayed seed that passes, with its step log (`SIM_LOG=1`).
            for l in &self.log {
                eprintln!("  {l}");
            }
        }
        let stats = self.stats;
        r.map(|_| stats).map_err(|what| Failure {
            seed: self.seed,
            what,
            log: std::mem::take(&mut self.log),
            replays: self.params.deterministic,
        })
    }

    /// Run and return the step log (ending with the failure, if any).
    pub fn run_logged(mut self) -> Vec<String> {
        if let Err(e) = self.run_inner() {
            self.log.push(format!("FAILED: {e}"));
        }
        std::mem::take(&mut self.log)
    }

    fn run_inner(&mut self) -> Result<(), String> {
        // Setup: the store is created by a process no fault is injected into (a crash while a
        // brand-new store is being created is a documented limit of the file store: the next
        // open refuses the half-made directory), then the first apply, faults on, is retried
        // until it lands.
        match self.backend.open(false) {
            Ok(p) => drop(p),
            Err((e, _)) => return Err(format!("creating the store: {e}")),
        }
        let file = self.jobs_file();
        let mut applied = false;
        for _ in 0..50 {
            match self.backend.open(true) {
                Ok(p) => {
                    let r = p.store.apply(&file, self.now);
                    self.drain_faults();
                    if r.is_ok() {
                        applied = true;
                        self.note(format!("apply {} jobs", file.jobs.len()));
                        break;
                    }
                    self.note(format!(
                        "apply failed: {}",
                        r.err().map(|e| e.to_string()).unwrap_or_default()
                    ));
                }
                Err((e, alive)) => {
                    self.drain_faults();
                    self.open_failed(&e, alive)?;
                }
            }
            self.now += Duration::milliseconds(100);
        }
        if !applied {
            return Err("the first apply never succeeded in 50 tries".into());
        }
        for step in 0..self.params.steps {
            self.step(step)?;
            self.drain_faults();
            self.check(false)?;
        }
        self.quiesce()?;
        self.check(true)
    }

    fn open_failed(&mut self, e: &StoreError, alive: bool) -> Result<(), String> {
        if !alive {
            return Ok(());
        }
        match e {
            StoreError::Open(OpenError::Corrupt { .. })
            | StoreError::Open(OpenError::Version { .. }) => {
                Err(format!("the store refuses to open after faults: {e}"))
            }
            _ => {
                self.stats.store_errors += 1;
                Ok(())
            }
        }
    }

    fn advance(&mut self) {
        let (jump, ms) = {
            let mut r = self.r();
            let roll = r.unit();
            if roll < 0.03 {
                ("clock jump", r.range(10_000, 120_000) as i64)
            } else if roll < 0.05 {
                ("clock steps back", -(r.range(100, 5_000) as i64))
            } else {
                ("", r.range(0, 2_500) as i64)
            }
        };
        self.now += Duration::milliseconds(ms);
        self.real += Duration::milliseconds(ms.max(0));
        if !jump.is_empty() {
            self.note(format!("{jump} {ms} ms"));
        }
        if self.params.clocks {
            self.clock_faults();
        }
    }

    /// The clock faults of one step (see `simulation/clocks.rs`): the host's clock steps away
    /// or is set right; an owner's own clock steps away or is set right.
    fn clock_faults(&mut self) {
        let r = &mut self.clock_rng;
        if self.host_step_ms == 0 {
            if r.chance(0.015) {
                let step = clocks::draw_step(r);
                self.host_step_ms = step;
                self.now += Duration::milliseconds(step);
                self.note(format!("host clock stepped {}", clocks::words(step)));
            }
        } else if r.chance(0.2) {
            let back = -self.host_step_ms;
            self.host_step_ms = 0;
            self.now += Duration::milliseconds(back);
            self.note(format!("host clock set right ({})", clocks::words(back)));
        }
        if self.owners.is_empty() {
            return;
        }
        let i = self.clock_rng.below(self.owners.len() as u64) as usize;
        let r = &mut self.clock_rng;
        let c = &mut self.owners[i].clock;
        let what = if c.step_ms == 0 && r.chance(0.01) {
            c.step_ms = clocks::draw_step(r);
            Some(format!("clock stepped {}", clocks::words(c.step_ms)))
        } else if c.step_ms != 0 && r.chance(0.15) {
            let back = -c.step_ms;
            c.step_ms = 0;
            Some(format!("clock set right ({})", clocks::words(back)))
        } else {
            None
        };
        if let Some(w) = what {
            let id = self.owners[i].id.clone();
            self.note(format!("{id} {w}"));
        }
    }

    /// Owner `i`'s wall clock now.
    fn owner_now(&self, i: usize) -> DateTime<Utc> {
        self.owners[i].clock.wall(self.now, self.real - self.t0)
    }

    /// What owner `i`'s engine does with its clock at the start of a cycle: a step since its
    /// last cycle (wall against monotonic time) brings its heartbeat forward; the heartbeat
    /// measures its offset from the store's clock (the host's).
    fn watch_clock(&mut self, i: usize) {
        let wall = self.owner_now(i);
        let (real, host, bound) = (self.real, self.now, self.bound_ms);
        let c = &mut self.owners[i].clock;
        let stepped = c
            .seen
            .is_some_and(|(w, at)| ((wall - w) - (real - at)).abs() > clocks::STEP);
        c.seen = Some((wall, real));
        let due = c.beat.is_none_or(|(_, at)| real - at >= clocks::BEAT);
        if !(stepped || due) {
            return;
        }
        let was = c.within(bound);
        self.backend.heartbeat(wall);
        let c = &mut self.owners[i].clock;
        c.beat = Some((host, real));
        c.measured_ms = (wall - host).num_milliseconds();
        let (now_within, measured) = (c.within(bound), c.measured_ms);
        if was != now_within || (stepped && !now_within) {
            let id = self.owners[i].id.clone();
            self.note(format!(
                "{id} clock offset {measured} ms (bound {bound} ms): {}",
                if now_within {
                    "claims"
                } else {
                    "claims nothing"
                }
            ));
        }
    }

    fn step(&mut self, step: u32) -> Result<(), String> {
        self.advance();
        let roll = self.r().unit();
        let n_owners = self.owners.len();
        let pick = self.r().below(n_owners as u64) as usize;
        let job = {
            let i = self.r().below(self.defs.len() as u64) as usize;
            self.defs[i].name.clone()
        };
        if roll < 0.62 || (roll < 0.81 && self.host_step_ms != 0) {
            // Operator commands run on a true host clock (see `simulation/clocks.rs`).
            self.tick(pick)
        } else if roll < 0.70 {
            let pause = self.r().chance(0.5);
            self.cli(
                step,
                if pause {
                    Op::Pause(job)
                } else {
                    Op::Resume(job)
                },
            )
        } else if roll < 0.76 {
            self.cli(step, Op::Trigger(job))
        } else if roll < 0.81 {
            self.cli(step, Op::Apply(job))
        } else if roll < 0.87 {
            let secs = self.r().range(1, 45) as i64;
            let until = self.real + Duration::seconds(secs);
            let id = self.owners[pick].id.clone();
            self.owners[pick].stopped_until = Some(until);
            self.note(format!("{id} SIGSTOP for {secs}s"));
            Ok(())
        } else if roll < 0.91 {
            let id = self.owners[pick].id.clone();
            self.note(format!("{id} kill -9"));
            self.kill(pick);
            Ok(())
        } else if roll < 0.91 + self.params.power_loss_step {
            if self.backend.power_loss() {
                self.stats.power_losses += 1;
                self.note("power loss".into());
            }
            Ok(())
        } else {
            self.tick(pick)
        }
    }

    fn kill(&mut self, i: usize) {
        let o = &mut self.owners[i];
        o.proc = None;
        o.runs.clear();
        o.stopped_until = None;
    }

    /// After any store call: is the owner still alive (no crash, no power loss)?
    fn owner_alive(&mut self, i: usize) -> bool {
        let epoch = self.backend.epoch();
        let o = &self.owners[i];
        let alive = o.epoch == epoch && o.proc.as_ref().is_some_and(|p| (p.alive)());
        if !alive && o.proc.is_some() {
            let id = o.id.clone();
            self.note(format!("{id} died"));
            self.kill(i);
        }
        alive
    }

    fn tick(&mut self, i: usize) -> Result<(), String> {
        if self.owners[i].stopped_until.is_some_and(|u| u > self.real) {
            return Ok(());
        }
        self.owners[i].stopped_until = None;
        if self.owners[i].proc.is_none() || !self.owner_alive(i) {
            return self.restart(i);
        }
        if self.params.clocks {
            self.watch_clock(i);
        }
        self.finish_runs(i)?;
        if !self.owner_alive(i) {
            return Ok(());
        }
        self.step_loops(i);
        if !self.owner_alive(i) {
            return Ok(());
        }
        self.renew_leases(i);
        if !self.owner_alive(i) {
            return Ok(());
        }
        self.claim(i, true)
    }

    fn restart(&mut self, i: usize) -> Result<(), String> {
        let inc = self.owners[i].incarnation + 1;
        match self.backend.open(true) {
            Ok(p) => {
                let o = &mut self.owners[i];
                o.incarnation = inc;
                o.id = format!("o{i}.{inc}");
                o.proc = Some(p);
                o.epoch = self.backend.epoch();
                o.runs.clear();
                // A new process: no heartbeat yet, no reading of its clock.
                o.clock.beat = None;
                o.clock.seen = None;
                let id = o.id.clone();
                self.note(format!("{id} starts"));
                Ok(())
            }
            Err((e, alive)) => {
                self.note(format!("o{i} cannot open the store: {e}"));
                self.open_failed(&e, alive)
            }
        }
    }

    fn finish_runs(&mut self, i: usize) -> Result<(), String> {
        // A completion decides on the store's clock as the last heartbeat read it (the
        // engine's rule: an owner past its bound still ends its runs).
        let wall = self.owner_now(i);
        let now = self.owners[i]
            .clock
            .store_now(self.real)
            .filter(|_| self.params.clocks)
            .unwrap_or(wall);
        let real = self.real;
        let due: Vec<usize> = (0..self.owners[i].runs.len())
            .filter(|k| self.owners[i].runs[*k].ends_at <= real)
            .collect();
        if !due.is_empty() {
            // A completion decides slots on `now` as a claim does (the overlap rows of slots
            // that fell due while the run ran, the job's next slot): one made on a store clock
            // two days ahead decides them two days out, and a later operation more than three
            // hours behind it re-derives them (seed 5009530: a `skipped` row up to two days
            // ahead, then the slot after the clock set right ran; the model counted only
            // claims' clocks and called it a second row of that slot).
            self.model.clock_op(now, true);
        }
        let mut done = Vec::new();
        for k in due {
            // The call's reply: settle its reservation to the real cost (retried next tick).
            if let Some(id) = self.owners[i].runs[k].reservation {
                let (job, cost) = {
                    let r = &self.owners[i].runs[k];
                    (r.job.clone(), r.settle_cost)
                };
                let res = match &self.owners[i].proc {
                    Some(p) => self.gate.settle(&*p.store, &job, id, cost, now),
                    None => return Ok(()),
                };
                match res {
                    Ok(()) => {
                        let r = &mut self.owners[i].runs[k];
                        r.reservation = None;
                        // A loop's row books its last turn once it is settled.
                        if r.looping.is_some() {
                            r.cost += cost;
                        }
                    }
                    Err(e) => {
                        self.stats.store_errors += 1;
                        self.note(format!("settle {job} failed (retried): {e}"));
                        if !self.owner_alive(i) {
                            return Ok(());
                        }
                        continue;
                    }
                }
            }
            let (c, label) = {
                let o = &self.owners[i];
                let r = &o.runs[k];
                let mut row = HistoryRow::new(&r.job, r.status, r.trigger, r.slot, &o.id, wall);
                row.run_id = r.run_id;
                row.started_at = r.claimed_at;
                row.duration_ms = (real - r.claimed_real).num_milliseconds().max(0) as u64;
                row.attempts = 1;
                row.cost_usd = r.cost;
                if let Some(l) = &r.looping {
                    row.turns = Some(l.turn);
                    row.tool_calls = Some(l.transcript.counts().1);
                    row.transcript = Some(l.transcript.clone());
                }
                (
                    Completion {
                        job: r.job.clone(),
                        run_id: r.run_id,
                        owner: o.id.clone(),
                        now,
                        row,
                        state: None,
                        hold_until: None,
                    },
                    r.run_id,
                )
            };
            let label = self.label(label);
            let job = c.job.clone();
            let res = match &self.owners[i].proc {
                Some(p) => p.store.complete(c),
                None => return Ok(()),
            };
            let id = self.owners[i].id.clone();
            match res {
                Ok(out) => {
                    self.stats.completions += 1;
                    self.note(format!(
                        "{id} completes {job} {label}{}: {} rows",
                        if out.stale { " (stale lease)" } else { "" },
                        out.rows.len()
                    ));
                    for row in &out.rows {
                        self.model.ack_row(row);
                    }
                    done.push(k);
                }
                Err(e) => {
                    self.stats.store_errors += 1;
                    self.owners[i].runs[k].tried = true;
                    self.note(format!(
                        "{id} complete {job} {label} failed (kept, retried): {e}"
                    ));
                    if !self.owner_alive(i) {
                        return Ok(());
                    }
                    if is_corrupt(&e) {
                        return Err(format!("complete reported corruption: {e}"));
                    }
                }
            }
        }
        let o = &mut self.owners[i];
        for k in done.into_iter().rev() {
            o.runs.remove(k);
        }
        Ok(())
    }

    fn renew_leases(&mut self, i: usize) {
        // From the later of this owner's clock and the store's as its last heartbeat read it
        // (the engine's renewal: an owner behind never writes a lease that has ended for the
        // others).
        let wall = self.owner_now(i);
        let now = self.owners[i]
            .clock
            .store_now(self.real)
            .filter(|_| self.params.clocks)
            .map_or(wall, |s| s.max(wall));
        let real = self.real;
        // Every run due is renewed in one batch, as the engine's renewal batcher does.
        let due: Vec<usize> = (0..self.owners[i].runs.len())
            .filter(|&k| {
                let r = &self.owners[i].runs[k];
                r.next_renew <= real && r.ends_at > real
            })
            .collect();
        if due.is_empty() {
            return;
        }
        let batch: Vec<Renewal> = due
            .iter()
            .map(|&k| {
                let r = &self.owners[i].runs[k];
                Renewal {
                    job: r.job.clone(),
                    run_id: r.run_id,
                    now,
                }
            })
            .collect();
        let answers = match &self.owners[i].proc {
            Some(p) => p.store.renew_many(&batch),
            None => return,
        };
        for (k, res) in due.into_iter().zip(answers) {
            let (job, run_id, owner, lease) = {
                let o = &self.owners[i];
                let r = &o.runs[k];
                (r.job.clone(), r.run_id, o.id.clone(), r.lease_secs)
            };
            let label = self.label(run_id);
            match res {
                Ok(RenewOutcome::Renewed { .. }) => {
                    self.owners[i].runs[k].next_renew =
                        real + Duration::milliseconds((lease * 1000.0 / 3.0) as i64);
                }
                Ok(RenewOutcome::Lost) => {
                    self.note(format!("{owner} lost the lease of {job} {label}"));
                    self.owners[i].runs[k].next_renew = self.owners[i].runs[k].ends_at;
                }
                Err(e) => {
                    self.stats.store_errors += 1;
                    self.note(format!("{owner} renew {job} {label} failed: {e}"));
                    if !self.owner_alive(i) {
                        return;
                    }
                }
            }
        }
    }

    fn claim(&mut self, i: usize, can: bool) -> Result<(), String> {
        if self.params.clocks && !self.owners[i].clock.within(self.bound_ms) {
            // Past its bound an owner claims nothing (its runs go on).
            return Ok(());
        }
        let now = self.owner_now(i);
        self.model.clock_op(now, true);
        let (owner, free, in_flight) = {
            let o = &self.owners[i];
            let names: Vec<String> = o.runs.iter().map(|r| r.job.clone()).collect();
            (
                o.id.clone(),
                if can {
                    o.capacity.saturating_sub(o.runs.len())
                } else {
                    0
                },
                names,
            )
        };
        let res = match &self.owners[i].proc {
            Some(p) => p.store.claim_due(&ClaimRequest {
                now,
                owner: &owner,
                limit: free,
                in_flight: &in_flight,
                clock_stepped: None,
                max_offset: None,
            }),
            None => return Ok(()),
        };
        let out = match res {
            Ok(out) => out,
            Err(e) => {
                self.stats.store_errors += 1;
                self.note(format!("{owner} claim failed: {e}"));
                if self.owner_alive(i) && is_corrupt(&e) {
                    return Err(format!("claim_due reported corruption: {e}"));
                }
                return Ok(());
            }
        };
        for row in &out.rows {
            self.model.ack_row(row);
            let label = self.label(row.run_id);
            self.note(format!(
                "{owner} wrote {} {} {label} slot {}",
                row.status.as_str(),
                row.job,
                row.slot.map(|s| self.ts(s)).unwrap_or_else(|| "-".into())
            ));
        }
        for c in out.claims {
            self.stats.claims += 1;
            let label = self.label(c.run_id);
            let job = c.job.def.name.clone();
            self.note(format!(
                "{owner} claims {job} {label} {} slot {}",
                c.trigger.as_str(),
                c.slot.map(|s| self.ts(s)).unwrap_or_else(|| "-".into())
            ));
            self.model
                .execute(Execution {
                    job: job.clone(),
                    run_id: c.run_id,
                    slot: c.slot,
                    trigger: c.trigger,
                    claimed_at: now,
                    seq: 0,
                })
                .map_err(|e| format!("{e} [{label}]"))?;
            if let Some(l) = c.job.rt.lease.as_ref().filter(|l| !l.chain.is_empty()) {
                let parents: Vec<Uuid> = l.chain.iter().map(|p| p.run_id).collect();
                self.model
                    .chain_claimed(&job, c.run_id, &parents)
                    .map_err(|e| format!("{e} [{label}]"))?;
            }
            self.start_run(i, c.run_id, job, c.slot, c.trigger, c.job.def.lease_seconds)?;
        }
        Ok(())
    }

    fn start_run(
        &mut self,
        i: usize,
        run_id: Uuid,
        job: String,
        slot: Option<DateTime<Utc>>,
        trigger: Trigger,
        lease: f64,
    ) -> Result<(), String> {
        let now = self.owner_now(i);
        let real = self.real;
        let (dur_ms, worst, fails, frac) = {
            let mut r = self.r();
            let dur = r.range(0, (lease * 2000.0) as u64) as i64;
            let worst = [0.05, 0.1, 0.2, 0.3][r.below(4) as usize];
            (dur, worst, r.chance(0.15), r.unit())
        };
        let owner = self.owners[i].id.clone();
        let looping = self.params.loops && self.loop_rng.chance(0.75);
        let admit = match &self.owners[i].proc {
            // A loop's first turn is reserved by a loop step, as the engine reserves it.
            Some(p) if looping => p
                .store
                .loop_step(&LoopStep {
                    job: &job,
                    run_id,
                    owner: &owner,
                    settle: None,
                    reserve: Some(worst),
                    set_aside: None,
                    record: &[],
                    awaiting: AwaitStep::Keep,
                    now,
                })
                .map(|out| match out {
                    StepOutcome::Stepped {
                        reserved: Some(ReserveOutcome::Reserved { id }),
                        ..
                    } => Some(id),
                    _ => None,
                }),
            Some(p) => self.gate.admit(&*p.store, &job, run_id, &owner, worst, now),
            None => return Ok(()),
        };
        let reservation = admit.as_ref().ok().copied().flatten();
        if let Ok(r) = &admit {
            self.note_money(i, &owner, &job, worst, r.is_some());
        }
        let (status, cost, admitted) = match admit.map(|r| r.is_some()) {
            Ok(true) => {
                // Another owner with an admitted, unrecorded call: a non-atomic check cannot
                // see it, so the model allows this call's worst case as slack.
                let racing = !self.gate.atomic()
                    && self
                        .owners
                        .iter()
                        .enumerate()
                        .any(|(k, o)| k != i && o.runs.iter().any(|r| r.admitted));
                if racing {
                    self.model.budget_slack += worst;
                }
                if fails {
                    (Status::Failed, worst * frac, true)
                } else {
                    (Status::Succeeded, worst * frac, true)
                }
            }
            Ok(false) => {
                self.model.not_run.insert(run_id);
                (Status::Skipped, 0.0, false)
            }
            Err(e) => {
                self.stats.store_errors += 1;
                self.note(format!(
                    "budget check for {job} (worst {worst:.4}) failed: {e}"
                ));
                if !self.owner_alive(i) {
                    return Ok(());
                }
                (Status::Failed, 0.0, false)
            }
        };
        let lease_ms = (lease * 1000.0) as i64;
        let looping = (looping && reservation.is_some()).then(|| {
            let r = &mut self.loop_rng;
            let mut l = Looping {
                turn: 1,
                left: r.range(1, 4) as u32,
                dispatch: true,
                next_at: real + Duration::milliseconds(r.range(0, lease_ms as u64 / 2) as i64),
                transcript: Transcript::new(),
                carry: Vec::new(),
                worst,
            };
            answer_turn(&mut l, cost, now);
            l
        });
        // A loop's row books each turn as it settles (`loop_step`), the current turn at its
        // share of the worst case; the run lasts until its loop ends (`loop_step` ends it).
        let (cost, settle_cost, dur_ms) = match &looping {
            Some(_) => (0.0, cost, 86_400_000),
            None => (cost, cost, dur_ms),
        };
        self.owners[i].runs.push(Run {
            job,
            run_id,
            slot,
            trigger,
            claimed_at: now,
            claimed_real: real,
            ends_at: real + Duration::milliseconds(dur_ms),
            next_renew: real + Duration::milliseconds(lease_ms / 3),
            lease_secs: lease,
            status,
            cost,
            admitted,
            reservation,
            settle_cost,
            tried: false,
            looping,
        });
        Ok(())
    }

    /// The step log's line for a budget check's verdict; with `SIM_MONEY`, every job's counters
    /// and reservations as owner `i` reads them after it.
    fn note_money(&mut self, i: usize, owner: &str, job: &str, worst: f64, reserved: bool) {
        let verdict = if reserved { "reserved" } else { "refused" };
        self.note(format!("{owner} {verdict} {worst:.4} for {job}"));
        if std::env::var("SIM_MONEY").is_err() {
            return;
        }
        let Some(jobs) = self.owners[i]
            .proc
            .as_ref()
            .and_then(|p| p.store.jobs().ok())
        else {
            return;
        };
        for j in &jobs {
            let c = &j.rt.counters;
            let rs: Vec<String> = c
                .reservations
                .iter()
                .map(|r| {
                    format!(
                        "{} {:.4} {:?} {}",
                        self.labels.get(&r.run_id).map_or("?", |l| l.as_str()),
                        r.usd,
                        r.state,
                        r.period_key
                    )
                })
                .collect();
            let line = format!(
                "    {} retired {} period {} {:.4} total {:.4} reservations {rs:?}",
                j.def.name, j.rt.retired, c.period_key, c.period_cost_usd, c.total_cost_usd
            );
            self.note(line);
        }
    }

    /// One loop step of each of owner `i`'s tool-using runs that is due (see the module doc).
    fn step_loops(&mut self, i: usize) {
        let real = self.real;
        for k in 0..self.owners[i].runs.len() {
            let due = {
                let r = &self.owners[i].runs[k];
                r.ends_at > real && r.looping.as_ref().is_some_and(|l| l.next_at <= real)
            };
            if due {
                self.loop_step(i, k);
                if !self.owner_alive(i) {
                    return;
                }
            }
        }
    }

    /// Run `k` of owner `i` takes its next loop step: the current turn's call recorded as
    /// dispatched (the turn settled with it), or the next turn reserved (the call's result
    /// with it). A step that fails keeps what it carried for the next one.
    fn loop_step(&mut self, i: usize, k: usize) {
        let now = self.owner_now(i);
        let real = self.real;
        let owner = self.owners[i].id.clone();
        let (job, run_id, reservation, settle_cost) = {
            let r = &self.owners[i].runs[k];
            (r.job.clone(), r.run_id, r.reservation, r.settle_cost)
        };
        let Some(l) = self.owners[i].runs[k].looping.as_mut() else {
            return;
        };
        let dispatch = l.dispatch;
        let mut record = std::mem::take(&mut l.carry);
        record.extend(l.transcript.take_delta());
        let worst = l.worst;
        let step = LoopStep {
            job: &job,
            run_id,
            owner: &owner,
            settle: reservation
                .filter(|_| dispatch)
                .map(|id| (id, Settlement::Cost(settle_cost))),
            reserve: (!dispatch).then_some(worst),
            set_aside: None,
            record: &record,
            awaiting: AwaitStep::Keep,
            now,
        };
        let res = match &self.owners[i].proc {
            Some(p) => p.store.loop_step(&step),
            None => return,
        };
        let label = self.label(run_id);
        let frac = self.loop_rng.unit();
        let gap = Duration::milliseconds(self.loop_rng.range(100, 3000) as i64);
        let r = &mut self.owners[i].runs[k];
        let Some(l) = r.looping.as_mut() else {
            return;
        };
        let what = if dispatch { "dispatch" } else { "reserve" };
        match res {
            Ok(StepOutcome::Stepped { reserved, .. }) => {
                let calls: Vec<String> = record
                    .iter()
                    .filter_map(|d| match &d.entry {
                        Entry::Call(c) => Some(c.id.clone()),
                        _ => None,
                    })
                    .collect();
                l.next_at = real + gap;
                if dispatch {
                    r.reservation = None;
                    r.cost += settle_cost;
                    // The call runs at once and answers.
                    let id = format!("c{}", l.turn);
                    l.transcript.update_call(l.turn, &id, |c| {
                        c.state = CallState::Done;
                        c.result_bytes = 2;
                        c.result_head = "ok".into();
                    });
                    l.dispatch = false;
                    if l.left == 0 {
                        // The model's answer needs no more tools: the run ends (its loop
                        // never steps again, whatever the clock does).
                        r.ends_at = real;
                        l.next_at = DateTime::<Utc>::MAX_UTC;
                    }
                } else if let Some(ReserveOutcome::Reserved { id }) = reserved {
                    r.reservation = Some(id);
                    r.settle_cost = worst * frac;
                    l.left = l.left.saturating_sub(1);
                    l.turn += 1;
                    answer_turn(l, r.settle_cost, now);
                } else {
                    // Budget reached after this turn: the run fails, its results kept.
                    r.status = Status::Failed;
                    r.ends_at = real;
                    l.next_at = DateTime::<Utc>::MAX_UTC;
                }
                let turn = l.turn;
                self.stats.tool_calls += calls.len() as u64;
                self.model.ack_calls(run_id, calls);
                self.note(format!("{owner} {job} {label} turn {turn}: {what} step"));
            }
            Ok(StepOutcome::Lost) => {
                // Another owner recovered the run: this one stops stepping it and ends.
                r.ends_at = real;
                l.next_at = DateTime::<Utc>::MAX_UTC;
                self.note(format!("{owner} lost {job} {label} at a {what} step"));
            }
            Err(e) => {
                l.carry = record;
                l.next_at = real + gap;
                self.stats.store_errors += 1;
                self.note(format!("{owner} {job} {label} {what} step failed: {e}"));
            }
        }
    }

    /// An operator's command: a fresh (faulty) process does one operation and exits.
    fn cli(&mut self, step: u32, op: Op) -> Result<(), String> {
        let _ = step;
        let p = match self.backend.open(true) {
            Ok(p) => p,
            Err((e, alive)) => {
                self.note(format!("cli cannot open the store: {e}"));
                return self.open_failed(&e, alive);
            }
        };
        let now = self.now;
        self.model.clock_op(now, false);
        let (what, job, res): (String, String, Result<(), StoreError>) = match &op {
            Op::Pause(j) => (
                format!("pause {j}"),
                j.clone(),
                p.store.set_paused(j, true, now),
            ),
            Op::Resume(j) => (
                format!("resume {j}"),
                j.clone(),
                p.store.set_paused(j, false, now),
            ),
            Op::Trigger(j) => (
                format!("trigger {j}"),
                j.clone(),
                p.store.request_trigger(j, now).map(|o| {
                    let _ = o;
                }),
            ),
            Op::Apply(j) => {
                let was = self.present.get(j).copied().unwrap_or(false);
                self.present.insert(j.clone(), !was);
                let file = self.jobs_file();
                // On an error the outcome is unknown; the operator's file still says the new
                // thing, and the next apply sends it again.
                let r = p.store.apply(&file, now).map(|_| ());
                (
                    format!("apply with {j} {}", if was { "removed" } else { "back" }),
                    j.clone(),
                    r,
                )
            }
        };
        let ok = res.is_ok();
        match &res {
            Ok(()) => self.note(format!("cli {what}")),
            Err(e) => {
                self.stats.store_errors += 1;
                self.note(format!("cli {what} failed: {e}"));
            }
        }
        let alive = (p.alive)();
        drop(p);
        if let Err(e) = &res
            && alive
            && is_corrupt(e)
        {
            return Err(format!("{what} reported corruption: {e}"));
        }
        let jm = self.model.jobs.entry(job.clone()).or_default();
        if !ok {
            if !matches!(op, Op::Trigger(_)) {
                jm.uncertain = true;
            }
            return Ok(());
        }
        match op {
            Op::Pause(_) => jm.set_quiet(Some(true), None, now),
            Op::Resume(_) => jm.set_quiet(Some(false), None, now),
            Op::Apply(_) => {
                let present = self.present.get(&job).copied().unwrap_or(false);
                jm.set_quiet(None, Some(!present), now);
            }
            Op::Trigger(_) => {}
        }
        Ok(())
    }

    /// Faults off, every owner back and running until every run ended and every lost lease was
    /// recovered; no new work is claimed.
    fn quiesce(&mut self) -> Result<(), String> {
        self.backend.faults_off();
        self.note("quiet phase: faults off, no new claims".into());
        for o in &mut self.owners {
            o.stopped_until = None;
        }
        if self.params.clocks {
            // Every clock set right (NTP), the host's first.
            if self.host_step_ms != 0 {
                self.now -= Duration::milliseconds(self.host_step_ms);
                self.host_step_ms = 0;
                self.note("host clock set right".into());
            }
            for o in &mut self.owners {
                o.clock.fixed_ms = 0;
                o.clock.drift = 0.0;
                o.clock.step_ms = 0;
            }
        }
        for _ in 0..200 {
            self.now += Duration::seconds(1);
            self.real += Duration::seconds(1);
            for i in 0..self.owners.len() {
                if self.owners[i].proc.is_none() || !self.owner_alive(i) {
                    // An engine claims as soon as it starts: that first claim is what
                    // re-derives a job whose slots a clock ahead decided, so a restarted owner
                    // goes on to its cycle at once rather than a second later, and the phase
                    // never ends before it (chain seed 90: the only owner restarted, the phase
                    // ended with no claim since the host clock came back from +48 h, and a job
                    // decided two days ahead was never re-derived).
                    self.restart(i)?;
                    if self.owners[i].proc.is_none() || !self.owner_alive(i) {
                        continue;
                    }
                }
                if self.params.clocks {
                    self.watch_clock(i);
                }
                self.finish_runs(i)?;
                self.step_loops(i);
                self.renew_leases(i);
                self.claim(i, false)?;
            }
            self.drain_faults();
            let busy = self.owners.iter().any(|o| !o.runs.is_empty());
            let (left, first_end) = self.leases_left()?;
            if !busy && left == 0 {
                // One more pass so recovery of the last expired lease is visible.
                return Ok(());
            }
            // A dead owner's lease renewed from its clock stepped ahead ends that far ahead (the
            // engine renews from the later clock: the safe side). Time passes until it ends.
            if let Some(end) = first_end.filter(|e| !busy && *e > self.now + Duration::seconds(5)) {
                let wait = end - self.now;
                self.note(format!(
                    "waiting {}s for a lease renewed from a clock ahead",
                    wait.num_seconds()
                ));
                self.now += wait;
                self.real += wait;
            }
        }
        Err("the quiet phase did not settle in 200 s: runs or leases left".into())
    }

    fn checker(&mut self) -> Result<&Proc, String> {
        let epoch = self.backend.epoch();
        if self.checker.is_none()
            || self.checker_epoch != epoch
            || !self.checker.as_ref().is_some_and(|p| (p.alive)())
        {
            self.checker = None;
            let p = self
                .backend
                .open(false)
                .map_err(|(e, _)| format!("the store does not open for the checker: {e}"))?;
            self.checker = Some(p);
            self.checker_epoch = epoch;
        }
        self.checker
            .as_ref()
            .ok_or_else(|| "no checker".to_string())
    }

    /// Leases still held, and when the first of them ends.
    fn leases_left(&mut self) -> Result<(usize, Option<DateTime<Utc>>), String> {
        let p = self.checker()?;
        let jobs = p.store.jobs().map_err(|e| format!("checker: jobs: {e}"))?;
        let leases: Vec<_> = jobs.iter().filter_map(|j| j.rt.lease.as_ref()).collect();
        Ok((leases.len(), leases.iter().map(|l| l.lease_until).min()))
    }

    fn check(&mut self, end: bool) -> Result<(), String> {
        let now = self.now;
        let (rows, jobs) = {
            let p = self.checker()?;
            let rows = p
                .store
                .history(&HistoryQuery {
                    // Everything (a simulated history is small); not usize::MAX, which the
                    // PostgreSQL store cannot bind as a LIMIT.
                    limit: 10_000_000,
                    ..HistoryQuery::default()
                })
                .map_err(|e| format!("checker: history: {e}"))?;
            let jobs = p.store.jobs().map_err(|e| format!("checker: jobs: {e}"))?;
            (rows, jobs)
        };
        self.model.note_seen(&rows);
        self.model.note_anchors(&jobs);
        self.model.check(&rows, &jobs, now, end).map_err(|e| {
            if std::env::var("SIM_DUMP").is_ok() {
                self.backend.dump();
                for j in &jobs {
                    eprintln!(
                        "job {} anchor {} next_slot {:?} last_slot {:?} paused {} lease {:?}",
                        j.def.name,
                        self.ts(j.rt.anchor),
                        j.rt.next_slot.map(|s| self.ts(s)),
                        j.rt.last_slot.map(|s| self.ts(s)),
                        j.rt.paused,
                        j.rt.lease.as_ref().map(|l| (
                            self.labels.get(&l.run_id).cloned(),
                            l.slot.map(|s| self.ts(s)),
                            self.ts(l.claimed_at)
                        ))
                    );
                }
                for r in &rows {
                    eprintln!(
                        "row {} {} {} slot {:?}..{:?} trigger {} reason {:?} stale {} supersedes {} cost {:.4}",
                        r.job,
                        self.labels.get(&r.run_id).map_or("?", |l| l.as_str()),
                        r.status.as_str(),
                        r.slot.map(|s| self.ts(s)),
                        r.slot_end.map(|s| self.ts(s)),
                        r.trigger.as_str(),
                        r.reason,
                        r.stale_lease,
                        r.supersedes_abandoned,
                        r.cost_usd
                    );
                }
            }
            // Name runs as the step log does (r0, r1, …).
            let mut s = e;
            for (id, label) in &self.labels {
                s = s.replace(&id.to_string(), &format!("{label} ({id})"));
            }
            let _ = write!(s, " (at {}, {} rows in history)", self.ts(now), rows.len());
            s
        })
    }
}

/// Turn `l.turn` answered, asking for one call: both on the record (written by the next step).
fn answer_turn(l: &mut Looping, cost: f64, now: DateTime<Utc>) {
    l.transcript.push(Entry::Turn(TurnEntry {
        turn: l.turn,
        model: "m".into(),
        input_tokens: 10,
        output_tokens: 5,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        cost_usd: cost,
        attempts: 1,
        text: String::new(),
        cut: false,
        calls: 1,
    }));
    l.transcript.push(Entry::Call(CallEntry::dispatched(
        l.turn,
        format!("c{}", l.turn),
        "files.read".into(),
        Some("files".into()),
        "{}".into(),
        now,
    )));
}

fn is_corrupt(e: &StoreError) -> bool {
    matches!(
        e,
        StoreError::Open(OpenError::Corrupt { .. }) | StoreError::Open(OpenError::Version { .. })
    )
}

enum Op {
    Pause(String),
    Resume(String),
    Trigger(String),
    Apply(String),
}

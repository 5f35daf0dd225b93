//! The tool loop's own cost, model and tool time excluded: per turn, what the loop does between
//! one model reply and the next request (each call's checks and schema validation, dispatch to an
//! in-memory tool that answers at once, the result's rendering, redaction, cap and hash, the
//! transcript entries) plus the weight of the next request's prompt that the turn's reservation
//! is computed from; and the memory of 100 tool-using runs in flight at once.
//!
//! Measured twice: the loop alone, and with the store's part of a turn as a run makes it — one
//! file-store step per turn (the previous turn's settlement, the next turn's reservation, the
//! transcript delta, the lease renewal, fsync included) and one before each call is dispatched
//! (the call recorded as `dispatched`). The file store lives in `BENCH_DIR` (default
//! `/dev/shm`, so the fsync itself costs next to nothing, as the target asks).
//!
//! Each turn is measured in wall time and in this process's CPU time (every thread): on a
//! shared, busy machine the wall time's tail is the run queue, while the CPU time is the work.
//!
//! Run: `cargo bench --bench tool_loop`. Figures go to docs/BENCHMARKS.md "Tool loop".
#![allow(clippy::unwrap_used)] // test code
#![allow(unsafe_code)] // signals, forks and polls real processes through libc

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cronsole::clock::SystemClock;
use cronsole::model::{AgentDef, JobsFile, Provider, Settings};
use cronsole::store::{
    AwaitStep, ClaimRequest, LoopStep, ReserveOutcome, Settlement, StepOutcome, Store,
};
use cronsole::testkit::internals::action::agent::{
    LoopLimits, LoopProgress, LoopRun, ModelTurns, TurnAsk, TurnReply, run_loop,
};
use cronsole::testkit::internals::action::llm::LlmReply;
use cronsole::testkit::internals::action::llm::wire::{self, ToolCall};
use cronsole::testkit::internals::action::tools::Toolbox;
use cronsole::testkit::internals::cost::RunCost;
use cronsole::testkit::internals::text::Secrets;
use cronsole::testkit::stats::percentile;
use cronsole::testkit::tools::{MemorySource, text_output, toolbox};
use cronsole::transcript::Delta;
use serde_json::json;

/// Counts live heap bytes, so the memory of runs in flight can be read.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

const TURNS: u32 = 10;
const CALLS_PER_TURN: usize = 2;
const RESULT_BYTES: usize = 2048;

fn agent() -> AgentDef {
    let mut a = cronsole::testkit::jobs::agent_def("bench", Provider::Openai);
    a.instructions = "You check files. ".repeat(20);
    a
}

fn tools() -> Toolbox {
    let body = "x".repeat(RESULT_BYTES);
    toolbox(vec![Arc::new(MemorySource::new("files").tool(
        "read_file",
        json!({"type": "object", "properties": {"path": {"type": "string", "maxLength": 200}},
               "required": ["path"], "additionalProperties": false}),
        move |_| Ok(text_output(&body)),
    ))])
}

/// A model that answers at once: `CALLS_PER_TURN` calls per turn, then a final answer. Each
/// turn computes the request's prompt weight as a real turn does for its reservation, and the
/// time from the end of one turn to the start of the next is the loop's own.
struct InstantModel {
    agent: AgentDef,
    /// When the last turn ended: wall clock and process CPU time.
    turn_ended: Option<(Instant, Duration)>,
    /// Per turn: (wall, CPU) from the end of one turn to the start of the next.
    samples: Vec<(Duration, Duration)>,
    /// When set, turn `TURNS` waits here (memory of runs in flight).
    park: Option<(Arc<tokio::sync::Notify>, Arc<AtomicUsize>)>,
    /// When set, every turn and every dispatch is a store step of this claimed run.
    run: Option<StoredRun>,
}

/// A claimed run on a real file store, stepped as the engine steps a tool-using run.
struct StoredRun {
    store: Arc<dyn Store>,
    job: String,
    run_id: uuid::Uuid,
    /// The last turn's reservation and its amount, settled with the next step.
    last: Option<(uuid::Uuid, f64)>,
}

impl StoredRun {
    fn step(&mut self, reserve: Option<f64>, record: &[Delta]) {
        // A turn settles the last one's reservation to half of it (a reply below its worst case).
        let settle = match reserve {
            Some(_) => self
                .last
                .take()
                .map(|(id, w)| (id, Settlement::Cost(w / 2.0))),
            None => None,
        };
        let out = self
            .store
            .loop_step(&LoopStep {
                job: &self.job,
                run_id: self.run_id,
                owner: "bench",
                settle,
                reserve,
                set_aside: None,
                record,
                awaiting: AwaitStep::Keep,
                now: now(),
            })
            .expect("loop step");
        match out {
            StepOutcome::Stepped { reserved, .. } => match reserved {
                Some(ReserveOutcome::Reserved { id }) => {
                    self.last = Some((id, reserve.unwrap_or(0.0)));
                }
                Some(ReserveOutcome::Refused { reason }) => panic!("refused: {reason}"),
                None => {}
            },
            StepOutcome::Lost => panic!("the bench run lost its lease"),
        }
    }
}

/// CPU time of this process, every thread: unlike wall time it does not count the time the
/// machine had us descheduled.
fn process_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid pointer we pass.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn now() -> chrono::DateTime<chrono::Utc> {
    "2026-11-30T12:00:00Z"
        .parse()
        .unwrap_or_else(|_| chrono::Utc::now())
}

/// `n` claimed agent runs on a fresh file store in `dir`, under a budget no bench reaches.
fn stored_runs(dir: &std::path::Path, n: usize) -> Vec<StoredRun> {
    let store: Arc<dyn Store> =
        Arc::new(cronsole::store::file::FileStore::open(dir).expect("open file store"));
    let file = JobsFile {
        settings: Settings {
            budget: Some(cronsole::model::Budget {
                max_cost_usd: 1e6,
                period: cronsole::model::BudgetPeriod::Day,
            }),
            ..Settings::default()
        },
        jobs: (0..n)
            .map(|i| cronsole::model::JobDef {
                lease_seconds: 3600.0,
                ..cronsole::testkit::jobs::command_job(&format!("job{i:05}"), 3600)
            })
            .collect(),
    };
    // Stored an hour before `now`: every job's first slot is due then.
    store
        .apply(&file, now() - chrono::Duration::hours(1))
        .expect("apply");
    let mut runs = Vec::new();
    while runs.len() < n {
        let o = store
            .claim_due(&ClaimRequest {
                now: now(),
                owner: "bench",
                limit: 64,
                in_flight: &[],
                clock_stepped: None,
                max_offset: None,
            })
            .expect("claim");
        assert!(!o.claims.is_empty(), "every bench job is due");
        runs.extend(o.claims.into_iter().map(|c| StoredRun {
            store: Arc::clone(&store),
            job: c.job.def.name,
            run_id: c.run_id,
            last: None,
        }));
    }
    runs
}

impl ModelTurns for InstantModel {
    type Stop = ();

    async fn turn<'a>(&'a mut self, ask: TurnAsk<'a>) -> Result<TurnReply, ()> {
        {
            let bytes = wire::prompt_bytes(&self.agent, "read the files", ask.dialogue);
            std::hint::black_box(bytes);
            if let Some(run) = &mut self.run {
                // The turn's worst case, as a run reserves it ($1 per 1M prompt bytes here).
                run.step(Some(bytes as f64 * 1e-6 + 1e-4), ask.record);
            }
            if let Some((wall, cpu)) = self.turn_ended {
                self.samples
                    .push((wall.elapsed(), process_cpu().saturating_sub(cpu)));
            }
            if ask.number == TURNS
                && let Some((n, parked)) = &self.park
            {
                parked.fetch_add(1, Ordering::SeqCst);
                n.notified().await;
            }
            let calls = if ask.number < TURNS {
                (0..CALLS_PER_TURN)
                    .map(|i| {
                        let args = json!({"path": format!("/srv/{}/{i}", ask.number)});
                        ToolCall {
                            id: format!("c{i}"),
                            name: "files__read_file".into(),
                            raw_args: args.to_string(),
                            args: Ok(args.as_object().cloned().unwrap_or_default()),
                        }
                    })
                    .collect()
            } else {
                Vec::new()
            };
            let reply = LlmReply {
                text: "looking".into(),
                model: "m".into(),
                usage: None,
                cache: Default::default(),
                calls,
                cut: false,
            };
            self.turn_ended = Some((Instant::now(), process_cpu()));
            Ok(TurnReply {
                reply,
                cost: RunCost::default(),
                attempts: 1,
            })
        }
    }

    fn recorded(&mut self, _: &LoopProgress<'_>) {}

    async fn persist(&mut self, record: Vec<Delta>) -> Result<(), ()> {
        if let Some(run) = &mut self.run {
            run.step(None, &record);
        }
        std::hint::black_box(record);
        Ok(())
    }
}

fn limits() -> LoopLimits {
    LoopLimits {
        max_turns: TURNS,
        ..LoopLimits::default()
    }
}

async fn one_loop(tb: &Toolbox, secrets: &Secrets, model: &mut InstantModel) -> usize {
    let out = run_loop(
        LoopRun {
            toolbox: tb,
            limits: limits(),
            secrets,
            clock: &SystemClock,
            timeout: None,
            approve: &[],
        },
        model,
    )
    .await;
    out.transcript.bytes()
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let secrets = Secrets::new(["sk-bench-secret-0123456789".to_string()]);
    let tb = tools();

    // Per-turn overhead over 300 loops of 10 turns: the loop alone, then with its store steps
    // on a real file store (one claimed run per loop).
    let base = std::env::var("BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::path::PathBuf::from("/dev/shm"));
    let dir = cronsole::testkit::tmp::TempDir::new_in(&base, "bench-tool-loop");
    let mut runs = stored_runs(&dir, 300);
    for with_store in [false, true] {
        let mut samples = Vec::new();
        rt.block_on(async {
            for i in 0..300 {
                let mut m = InstantModel {
                    agent: agent(),
                    turn_ended: None,
                    samples: Vec::new(),
                    park: None,
                    run: if with_store {
                        runs.get_mut(i).map(|r| StoredRun {
                            store: Arc::clone(&r.store),
                            job: r.job.clone(),
                            run_id: r.run_id,
                            last: None,
                        })
                    } else {
                        None
                    },
                };
                one_loop(&tb, &secrets, &mut m).await;
                samples.extend(m.samples);
            }
        });
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let (mut wall, mut cpu): (Vec<Duration>, Vec<Duration>) = samples.into_iter().unzip();
        wall.sort();
        cpu.sort();
        println!(
            "loop overhead per turn{} ({} turns, {CALLS_PER_TURN} calls of {RESULT_BYTES} B \
             each): wall median {:.1} µs, p99 {:.1} µs, max {:.1} µs; CPU median {:.1} µs, \
             p99 {:.1} µs, max {:.1} µs",
            if with_store {
                format!(" with its file-store steps in {}", base.display())
            } else {
                ", the loop alone".to_string()
            },
            wall.len(),
            us(percentile(&wall, 0.5)),
            us(percentile(&wall, 0.99)),
            us(percentile(&wall, 1.0)),
            us(percentile(&cpu, 0.5)),
            us(percentile(&cpu, 0.99)),
            us(percentile(&cpu, 1.0)),
        );
    }
    runs.clear();
    drop(dir);

    // Memory of 100 runs parked at their last turn.
    let before = LIVE.load(Ordering::SeqCst);
    let notify = Arc::new(tokio::sync::Notify::new());
    let parked = Arc::new(AtomicUsize::new(0));
    let transcript_bytes = rt.block_on(async {
        let tb = Arc::new(tools());
        let secrets = Arc::new(secrets.clone());
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..100 {
            let (tb, secrets) = (Arc::clone(&tb), Arc::clone(&secrets));
            let park = Some((Arc::clone(&notify), Arc::clone(&parked)));
            set.spawn(async move {
                let mut m = InstantModel {
                    agent: agent(),
                    turn_ended: None,
                    samples: Vec::new(),
                    park,
                    run: None,
                };
                one_loop(&tb, &secrets, &mut m).await
            });
        }
        while parked.load(Ordering::SeqCst) < 100 {
            tokio::task::yield_now().await;
        }
        let live = LIVE.load(Ordering::SeqCst) - before;
        println!(
            "100 runs in flight at turn {TURNS}: {:.1} KiB live heap per run (transcript included)",
            live as f64 / 100.0 / 1024.0
        );
        notify.notify_waiters();
        let mut bytes = 0;
        while let Some(r) = set.join_next().await {
            bytes = r.unwrap_or(0);
        }
        bytes
    });
    println!(
        "  of which each run's transcript is at most {:.1} KiB of JSON",
        transcript_bytes as f64 / 1024.0
    );
}

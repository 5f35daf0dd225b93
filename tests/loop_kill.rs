//! `kill -9` of an owner while its agent's tool call runs, cycle after cycle, through the real
//! binary: the tool's process dies with its owner (no orphan), the next owner records the run
//! `abandoned` with the call it made (`dispatched`), and each turn's money is counted once at
//! its real cost (no duplicate turn spend). `LOOP_KILL_CYCLES=N` runs N cycles (CI runs 10).
#![allow(clippy::unwrap_used)] // test code
#![allow(unsafe_code)] // signals, forks and polls real processes through libc

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use cronsole::model::{HistoryRow, ReservationState, Status};
use cronsole::store::file::FileStore;
use cronsole::store::{HistoryQuery, HistoryReader};
use cronsole::testkit::internals::store::rules;
use cronsole::testkit::llm::{FakeCall, FakeLlm, Reply};
use cronsole::testkit::mcp::TestServers;
use cronsole::transcript::CallState;
use support::pids::alive;
use support::wait::{poll_for, poll_until, wait_until};

const KEY: &str = "sk-loop-kill";

fn yaml(base_url: &str) -> String {
    format!(
        r#"budget: {{ max_cost_usd: 5.0, period: day }}
tools:
  hang:
    description: "Waits for a long time"
    command: [sh, -c, 'f=$(mktemp -p . tool.XXXXXX); echo $$ > "$f"; exec sleep 300']
agents:
  a:
    provider: openai
    base_url: {base_url}
    api_key_env: LOOP_KILL_KEY
    model: gpt-4o-mini
    instructions: use the tool
    tools: [hang]
    tool_timeout_seconds: 600
jobs:
  - name: looper
    schedule: every 1s
    agent: a
    message: go
    lease_seconds: 1
    timeout_seconds: 600
"#
    )
}

fn tool_pids(dir: &Path) -> Vec<(PathBuf, i32)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_name().to_string_lossy().starts_with("tool.")
            && let Some(p) = std::fs::read_to_string(e.path())
                .ok()
                .and_then(|s| s.trim().parse().ok())
        {
            out.push((e.path(), p));
        }
    }
    out
}

fn rows(store: &Path) -> Vec<HistoryRow> {
    FileStore::open(store)
        .and_then(|s| {
            s.history(&HistoryQuery {
                job: Some("looper".into()),
                limit: 10_000,
                ..Default::default()
            })
        })
        .unwrap_or_default()
}

fn owner(dir: &Path, jobs: &Path, store: &Path, extra: &[&str]) -> Child {
    support::cli::cronsole(dir)
        .arg("run")
        .arg("--jobs")
        .arg(jobs)
        .arg("--store")
        .arg(store)
        .args(extra)
        .env("LOOP_KILL_KEY", KEY)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn cronsole")
}

/// Wait for a tool process other than `seen`; `None` after 30 s.
fn next_tool(dir: &Path, seen: &[i32]) -> Option<(PathBuf, i32)> {
    poll_for(Duration::from_secs(30), || {
        tool_pids(dir).into_iter().find(|(_, p)| !seen.contains(p))
    })
}

#[allow(clippy::too_many_lines)] // a test scenario reads best in one piece (see CONTRIBUTING.md)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_tool_calls_leaves_no_orphan_and_no_duplicate_turn_spend() {
    let cycles: usize = std::env::var("LOOP_KILL_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let fake = FakeLlm::openai(
        KEY,
        vec![Reply::Forever(Box::new(Reply::tools(
            vec![FakeCall::new("hang", serde_json::json!({}))],
            1000,
            100,
        )))],
    )
    .await
    .unwrap();
    let dir = support::tempdir("loopkill");
    let jobs = dir.join("jobs.yaml");
    std::fs::write(&jobs, yaml(&fake.base_url())).unwrap();
    let store = dir.join("store");
    let (d, j, s) = (dir.to_path_buf(), jobs.clone(), store.clone());
    let (seen, orphans) = tokio::task::spawn_blocking(move || {
        let mut seen: Vec<i32> = Vec::new();
        let mut orphans = Vec::new();
        for cycle in 0..cycles {
            let mut child = owner(&d, &j, &s, &[]);
            let Some((_, pid)) = next_tool(&d, &seen) else {
                let _ = child.kill();
                panic!("cycle {cycle}: no tool call started");
            };
            seen.push(pid);
            assert!(alive(pid), "cycle {cycle}: the tool runs");
            // SAFETY: kill(2) on the child we spawned and have not reaped.
            unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
            let _ = child.wait();
            poll_until(Duration::from_secs(2), || !alive(pid));
            if alive(pid) {
                orphans.push(pid);
                // SAFETY: a stray sleep of ours.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        // A last owner recovers the last killed run, then stops.
        let mut last = owner(&d, &j, &s, &[]);
        poll_until(Duration::from_secs(30), || {
            let abandoned = rows(&s)
                .iter()
                .filter(|r| r.status == Status::Abandoned)
                .count();
            abandoned >= cycles
        });
        // SAFETY: as above.
        unsafe { libc::kill(last.id() as i32, libc::SIGKILL) };
        let _ = last.wait();
        for (_, p) in tool_pids(&d) {
            if alive(p) && !seen.contains(&p) {
                // The last owner's own call: it must die with it too.
                poll_until(Duration::from_secs(2), || !alive(p));
                if alive(p) {
                    orphans.push(p);
                    // SAFETY: a stray sleep of ours.
                    unsafe { libc::kill(p, libc::SIGKILL) };
                }
            }
        }
        (seen, orphans)
    })
    .await
    .unwrap();
    assert!(
        orphans.is_empty(),
        "tool processes outlived their owner: {orphans:?}"
    );
    assert_eq!(seen.len(), cycles);
    let all = rows(&store);
    let abandoned: Vec<&HistoryRow> = all
        .iter()
        .filter(|r| r.status == Status::Abandoned)
        .collect();
    assert!(
        abandoned.len() >= cycles,
        "{} abandoned rows for {cycles} killed runs",
        abandoned.len()
    );
    for r in &abandoned[..cycles] {
        let calls: Vec<(String, CallState)> = cronsole::testkit::tools::calls(r)
            .into_iter()
            .map(|c| (c.tool, c.state))
            .collect();
        assert_eq!(
            calls,
            vec![("hang".to_string(), CallState::Dispatched)],
            "run {}: the call it made, still dispatched",
            r.run_id
        );
        assert_eq!((r.turns, r.tool_calls), (Some(1), Some(1)));
    }
    // Each request was one turn of one run, settled at its real cost in the write that
    // dispatched its call, and counted once: by the `abandoned` row of its run (which carries
    // its run's reservations), or, for a run not recovered yet, as its reservation still held.
    let requests = fake.request_count();
    let price = cronsole::testkit::internals::cost::PriceTable::builtin()
        .resolve("gpt-4o-mini")
        .expect("priced")
        .price;
    let per_turn = (1000.0 * price.input + 100.0 * price.output) / 1e6;
    let rec = FileStore::open(&store)
        .unwrap()
        .job("looper")
        .unwrap()
        .unwrap();
    let rs = &rec.rt.counters.reservations;
    let settled: Vec<f64> = rs
        .iter()
        .filter(|r| r.state == ReservationState::Settled)
        .map(|r| r.usd)
        .collect();
    let in_flight = rs
        .iter()
        .filter(|r| r.state == ReservationState::Reserved)
        .count();
    let booked: Vec<f64> = abandoned.iter().map(|r| r.cost_usd).collect();
    assert_eq!(
        booked.len() + settled.len() + in_flight,
        requests,
        "one reservation per request, never two: rows {booked:?}, held {rs:?}"
    );
    assert!(
        in_flight <= 1,
        "only the last owner's turn may be in flight at its kill: {rs:?}"
    );
    for usd in booked.iter().chain(&settled) {
        assert!(
            (usd - per_turn).abs() < 1e-12,
            "a turn settled at ${usd}, its real cost is ${per_turn}"
        );
    }
    let total: f64 = booked.iter().sum();
    assert!(
        (rec.rt.counters.total_cost_usd - total).abs() < 1e-12,
        "the counters book what the rows carry: {} vs {total}",
        rec.rt.counters.total_cost_usd
    );
    let runs_dir = store.join("runs");
    let left: Vec<_> = std::fs::read_dir(&runs_dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(
        left.len() <= 1,
        "the records of recovered runs went with their rows: {left:?}"
    );
}

/// Two agents on loopback models: `paid` answers at once, `hung` never answers (the owner is
/// killed while its call is in flight).
fn money_yaml(fast: &str, hung: &str) -> String {
    format!(
        r#"budget: {{ max_cost_usd: 1.0, period: day }}
agents:
  fast: {{ provider: openai, base_url: {fast}, api_key_env: LOOP_KILL_KEY, model: gpt-4o-mini, max_tokens: 200 }}
  stuck: {{ provider: openai, base_url: {hung}, api_key_env: LOOP_KILL_KEY, model: gpt-4o-mini, max_tokens: 1000 }}
jobs:
  - {{ name: paid, schedule: every 1h, run_immediately: true, agent: fast, message: go }}
  - {{ name: hung, schedule: every 1h, run_immediately: true, agent: stuck, message: go,
       lease_seconds: 1, timeout_seconds: 600 }}
"#
    )
}

/// `cronsole --store STORE ARGS` as JSON (one document, or one per line with `lines`).
fn json_of(dir: &Path, store: &Path, args: &[&str]) -> serde_json::Value {
    let (code, out, err) = support::cli::run_with_store(dir, store, args);
    assert_eq!(code, 0, "{args:?}: {err}");
    if args.first() == Some(&"history") {
        let rows: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        return serde_json::Value::Array(rows);
    }
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
}

fn close(a: f64, b: f64, what: &str) {
    assert!((a - b).abs() < 1e-9, "{what}: {a} vs {b}");
}

/// What every view says about the money, checked against each other and against the budget's
/// own sums (the store record, `rules::period::committed`): `(spent, in flight)` per job.
fn views_agree(dir: &Path, store: &Path) -> std::collections::BTreeMap<String, (f64, f64)> {
    let stats = json_of(dir, store, &["stats", "--json"]);
    let jobs = json_of(dir, store, &["jobs", "--json"]);
    let history = json_of(dir, store, &["history", "--json"]);
    let fs = FileStore::open(store).unwrap();
    let key = stats["period"].as_str().unwrap().to_string();
    let mut out = std::collections::BTreeMap::new();
    let (mut spent, mut held) = (0.0, 0.0);
    for name in ["paid", "hung"] {
        let rec = fs.job(name).unwrap().unwrap();
        let (s, h) = rules::period::committed(&rec, &key);
        let line = stats["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["job"] == name)
            .unwrap();
        let view = jobs
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name)
            .unwrap();
        let rows: f64 = history
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["job"] == name)
            .map(|r| r["cost_usd"].as_f64().unwrap_or(0.0))
            .sum();
        close(
            line["period_cost_usd"].as_f64().unwrap(),
            s,
            "stats spent = budget's",
        );
        close(
            line["in_flight_usd"].as_f64().unwrap(),
            h,
            "stats in flight = budget's",
        );
        close(
            view["period_cost_usd"].as_f64().unwrap(),
            s,
            "jobs spent = budget's",
        );
        close(
            view["in_flight_usd"].as_f64().unwrap(),
            h,
            "jobs in flight = budget's",
        );
        close(rows, s, "the rows' costs add up to the spend");
        close(
            line["total_cost_usd"].as_f64().unwrap(),
            rows,
            "total = rows",
        );
        spent += s;
        held += h;
        out.insert(name.to_string(), (s, h));
    }
    let g = &stats["global"];
    close(
        g["period_cost_usd"].as_f64().unwrap(),
        spent,
        "global spent",
    );
    close(
        g["in_flight_usd"].as_f64().unwrap(),
        held,
        "global in flight",
    );
    close(
        g["remaining_budget"].as_f64().unwrap(),
        1.0 - spent - held,
        "left = limit - spent - in flight",
    );
    out
}

/// Money shown = money counted, through the real binary: an owner is killed while its model call
/// hangs. Until the run is recovered every view shows the call's reservation as in flight (and
/// what is left without it); after recovery the `abandoned` row carries exactly that amount,
/// and `history`, `stats`, `jobs` and the budget's own sums agree to the last digit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_killed_mid_call_leaves_every_view_agreeing_with_the_budget() {
    let fast = FakeLlm::openai(
        KEY,
        vec![Reply::Forever(Box::new(Reply::ok("done", 100, 100)))],
    )
    .await
    .unwrap();
    let hung = FakeLlm::openai(
        KEY,
        vec![Reply::Forever(Box::new(Reply::Slow(
            Duration::from_secs(600),
            Box::new(Reply::ok("late", 100, 100)),
        )))],
    )
    .await
    .unwrap();
    let dir = support::tempdir("money");
    let jobs = dir.join("jobs.yaml");
    std::fs::write(&jobs, money_yaml(&fast.base_url(), &hung.base_url())).unwrap();
    let store = dir.join("store");
    let (d, j, s) = (dir.to_path_buf(), jobs.clone(), store.clone());
    let hung_calls = move || hung.request_count();
    tokio::task::spawn_blocking(move || {
        let mut child = owner(&d, &j, &s, &[]);
        let paid_done = || {
            FileStore::open(&s)
                .and_then(|st| {
                    st.history(&HistoryQuery {
                        job: Some("paid".into()),
                        limit: 10,
                        ..Default::default()
                    })
                })
                .is_ok_and(|r| r.iter().any(|r| r.status == Status::Succeeded))
        };
        wait_until(
            "paid to run and hung to be called",
            Duration::from_secs(30),
            || paid_done() && hung_calls() >= 1,
        );
        // SAFETY: kill(2) on the child we spawned and have not reaped.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        let _ = child.wait();
        // Killed mid-call: the call's worst case is held, not spent, and every view says so.
        let before = views_agree(&d, &s);
        let (paid_spent, _) = before["paid"];
        let (hung_spent, hung_held) = before["hung"];
        assert!(paid_spent > 0.0, "{before:?}");
        assert!(hung_spent == 0.0 && hung_held > 0.0, "{before:?}");
        // Another owner recovers the run once its 1 s lease has lapsed (as the store records
        // it): the `abandoned` row carries the reservation, which is now spent.
        wait_until("hung's lease to lapse", Duration::from_secs(30), || {
            FileStore::open(&s)
                .ok()
                .and_then(|st| st.job("hung").ok().flatten())
                .and_then(|r| r.rt.leases().next().map(|l| l.lease_until))
                .is_some_and(|until| until < chrono::Utc::now())
        });
        let mut next = owner(&d, &j, &s, &["--for", "2s"]);
        let _ = next.wait();
        let after = views_agree(&d, &s);
        let abandoned: Vec<HistoryRow> = FileStore::open(&s)
            .unwrap()
            .history(&HistoryQuery {
                job: Some("hung".into()),
                limit: 10,
                ..Default::default()
            })
            .unwrap();
        assert_eq!(abandoned.len(), 1, "{abandoned:?}");
        assert_eq!(abandoned[0].status, Status::Abandoned);
        close(
            abandoned[0].cost_usd,
            hung_held,
            "the row carries the reservation",
        );
        assert_eq!(after["hung"], (hung_held, 0.0), "{after:?}");
        assert_eq!(after["paid"], (paid_spent, 0.0), "{after:?}");
    })
    .await
    .unwrap();
}

/// The jobs file of the kill cycles: an agent on the loopback model offered a tool of a real
/// MCP server (the Python SDK's, over stdio) and a command tool that holds; each server and
/// each tool process appends its pid and its start time to a file of `dir` before it becomes
/// what it runs.
fn cycles_yaml(dir: &Path, base_url: &str, py: &[String]) -> String {
    let server = format!(
        "echo $$ $(cut -d' ' -f22 /proc/$$/stat) >> '{}'; exec {}",
        dir.join("mcp.pids").display(),
        py.iter()
            .map(|a| format!("'{a}'"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let tool = format!(
        "echo $$ $(cut -d' ' -f22 /proc/$$/stat) >> '{}'; exec sleep 300",
        dir.join("tool.pids").display()
    );
    let q = |s: &str| serde_json::to_string(s).unwrap();
    format!(
        r#"budget: {{ max_cost_usd: 1000.0, period: day }}
pricing:
  m: {{ input: 1.0, output: 1.0 }}
mcp_servers:
  py:
    command: [sh, -c, {server}]
tools:
  hold:
    description: Holds
    parameters: {{ type: object }}
    command: [sh, -c, {tool}]
    timeout_seconds: 600
agents:
  ops:
    provider: openai
    base_url: {base_url}
    api_key_env: LOOP_KILL_KEY
    model: m
    instructions: use the tools
    tools: [py.echo, hold]
    tool_timeout_seconds: 600
jobs:
  - name: looper
    schedule: every 1s
    agent: ops
    message: go
    lease_seconds: 2
    timeout_seconds: 600
"#,
        server = q(&server),
        tool = q(&tool),
    )
}

/// The processes a file of `PID START` lines names. The start time (clock ticks since boot,
/// field 22 of `/proc/PID/stat`) tells a process from a later one that got its pid again: over a
/// long run on a busy host the pids wrap (32 768 of them), and an unrelated process alive under
/// a pid a dead server once had is no orphan.
fn pid_lines(path: &Path) -> Vec<(i32, u64)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (pid, start) = l.trim().split_once(' ')?;
            Some((pid.parse().ok()?, start.trim().parse().ok()?))
        })
        .collect()
}

/// A process's start time, from `/proc/PID/stat`.
fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    // Field 22 of the line; `rest` starts at field 3.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the process a pid file named is still alive (not a later one with its pid).
fn still_alive((pid, start): (i32, u64)) -> bool {
    alive(pid) && start_time(pid) == Some(start)
}

/// A process's parent, from `/proc/PID/stat`.
fn parent(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Of the tool and server processes `dir`'s pid files name, those alive that no live owner of
/// `owners` is an ancestor of: a process that outlived the owner of its run.
fn orphans(dir: &Path, owners: &[i32]) -> Vec<(i32, u64)> {
    let mut out = Vec::new();
    for (pid, start) in pid_lines(&dir.join("tool.pids"))
        .into_iter()
        .chain(pid_lines(&dir.join("mcp.pids")))
    {
        if !still_alive((pid, start)) {
            continue;
        }
        let mut p = Some(pid);
        let mut owned = false;
        for _ in 0..64 {
            let Some(q) = p.filter(|q| *q > 1) else {
                break;
            };
            if owners.contains(&q) {
                owned = true;
                break;
            }
            p = parent(q);
        }
        if !owned {
            out.push((pid, start));
        }
    }
    out
}

/// A process `orphans` found: which pid file names it, its command line and its parents.
fn describe(dir: &Path, pid: i32, cycle: usize) -> String {
    let kind = if pid_lines(&dir.join("tool.pids"))
        .iter()
        .any(|(p, _)| *p == pid)
    {
        "tool"
    } else {
        "server"
    };
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default();
    let mut chain = Vec::new();
    let mut p = parent(pid);
    while let Some(q) = p.filter(|q| *q > 1 && chain.len() < 8) {
        let name = std::fs::read_to_string(format!("/proc/{q}/comm")).unwrap_or_default();
        chain.push(format!("{q} {}", name.trim()));
        p = parent(q);
    }
    format!(
        "cycle {cycle}: {kind} {pid} `{}` under [{}]",
        cmd.trim(),
        chain.join(" < ")
    )
}

/// The owners' logs under `dir` (a file store's `logs/`, or `.cronsole/logs/` beside a
/// PostgreSQL store's owners), all in one text.
fn logs_text(dir: &Path) -> String {
    let mut out = String::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.parent().is_some_and(|q| q.ends_with("logs")) {
                out.push_str(&std::fs::read_to_string(&p).unwrap_or_default());
            }
        }
    }
    out
}

/// `cronsole --store STORE ARGS` in `dir`: stdout, or a panic naming the command.
fn cli_out(dir: &Path, store: &str, args: &[&str]) -> String {
    let (code, out, err) = support::cli::output(
        support::cli::cronsole(dir)
            .env("LOOP_KILL_KEY", KEY)
            .args(["--store", store])
            .args(args),
    );
    assert_eq!(code, 0, "{args:?}: {err}");
    out
}

/// The run holding `looper`'s lease and the pid its owner id names (`host:pid:tag`).
fn lease_of(dir: &Path, store: &str) -> Option<(String, i32)> {
    let jobs: serde_json::Value =
        serde_json::from_str(&cli_out(dir, store, &["jobs", "--json"])).ok()?;
    let lease = jobs.as_array()?.iter().find(|j| j["name"] == "looper")?["lease"].clone();
    let run = lease["run_id"].as_str()?.to_string();
    let pid = lease["owner"].as_str()?.split(':').nth(1)?.parse().ok()?;
    Some((run, pid))
}

fn history_of(dir: &Path, store: &str) -> Vec<serde_json::Value> {
    cli_out(
        dir,
        store,
        &["history", "--json", "--job", "looper", "--limit", "100000"],
    )
    .lines()
    .filter_map(|l| serde_json::from_str(l).ok())
    .collect()
}

/// What the kill cycles found; `docs/BENCHMARKS.md` records these figures.
#[derive(Debug, Default)]
struct CycleFigures {
    /// Tool and server processes alive with no live owner above them, summed over the cycles
    /// (each counted when its owner's kill was 5 s old).
    orphans: usize,
    /// Cycles where the count could not see the victim's tool and server before the kill.
    unseen: usize,
    /// What each such process was: its kind, its command line and its parents.
    orphan_notes: Vec<String>,
    /// The longest a killed owner's processes took to go, in ms.
    slowest_exit_ms: u128,
    /// Cycles where they took more than 1 s.
    exits_over_1s: usize,
    /// Runs with more than one row, executed slots with more than one row, and calls of the
    /// holding tool started more often than runs show them.
    duplicates: usize,
    /// Killed runs without a row at the end.
    rows_lost: usize,
    billed_usd: f64,
    recorded_usd: f64,
    tool_starts: usize,
    server_starts: usize,
    /// Runs that began (rows other than `skipped` and `missed`): each starts the server once.
    runs_began: usize,
    /// Servers started a second time in a run: slower than the SDK's 10 s wait to answer the
    /// era discovery (the owners' log says "starting it again in that era").
    era_restarts: usize,
    wall_s: f64,
}

/// `cycles` times: with two owners of `store` running, wait for a tool call, `kill -9` the owner
/// whose run makes it, count the processes left without an owner, start an owner again. Then a
/// last owner recovers every killed run with the job paused, and the history is checked.
#[allow(clippy::too_many_lines)] // a test scenario reads best in one piece (see CONTRIBUTING.md)
async fn kill_cycles(store_of: impl FnOnce(&Path) -> String, cycles: usize) -> CycleFigures {
    let Some(servers) = TestServers::find() else {
        return CycleFigures::default();
    };
    let fake = FakeLlm::openai(
        KEY,
        vec![Reply::Forever(Box::new(Reply::tools(
            vec![
                FakeCall::new("py__echo", serde_json::json!({"text": "hi"})),
                FakeCall::new("hold", serde_json::json!({})),
            ],
            1000,
            100,
        )))],
    )
    .await
    .unwrap();
    let dir = support::tempdir("killcycles");
    let d = dir.to_path_buf();
    let store = store_of(&d);
    std::fs::write(
        d.join("jobs.yaml"),
        cycles_yaml(&d, &fake.base_url(), &servers.py_stdio_argv()),
    )
    .unwrap();
    let spawn = {
        let (d, store) = (d.clone(), store.clone());
        move || {
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(d.join("owners.log"))
                .unwrap();
            support::cli::cronsole(&d)
                .env("LOOP_KILL_KEY", KEY)
                .args(["run", "--jobs", "jobs.yaml", "--store", &store])
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .expect("spawn cronsole")
        }
    };
    let started = Instant::now();
    let (mut figures, killed) = {
        let (d, store) = (d.clone(), store.clone());
        tokio::task::spawn_blocking(move || {
            let mut f = CycleFigures::default();
            let mut owners: Vec<Child> = vec![spawn(), spawn()];
            let mut killed: Vec<String> = Vec::new();
            for cycle in 0..cycles {
                let calls_before = pid_lines(&d.join("tool.pids")).len();
                let target = poll_for(Duration::from_secs(90), || {
                    if pid_lines(&d.join("tool.pids")).len() <= calls_before {
                        return None;
                    }
                    let (run, pid) = lease_of(&d, &store)?;
                    let i = owners.iter().position(|c| c.id() as i32 == pid)?;
                    (!killed.contains(&run)).then_some((i, run))
                });
                let Some((i, run)) = target else {
                    panic!(
                        "cycle {cycle}: no new tool call in 90 s; owners' log:\n{}",
                        std::fs::read_to_string(d.join("owners.log")).unwrap_or_default()
                    );
                };
                // The count below can see a run's processes: with their owner left out of
                // the live ones, its tool and its server count as having none.
                let others: Vec<i32> = owners
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .map(|(_, c)| c.id() as i32)
                    .collect();
                if orphans(&d, &others).len() < 2 {
                    f.unseen += 1;
                }
                let mut victim = owners.remove(i);
                // SAFETY: kill(2) on a child we spawned and have not reaped.
                unsafe { libc::kill(victim.id() as i32, libc::SIGKILL) };
                let _ = victim.wait();
                let t = Instant::now();
                let live: Vec<i32> = owners.iter().map(|c| c.id() as i32).collect();
                poll_until(Duration::from_secs(5), || orphans(&d, &live).is_empty());
                let left = orphans(&d, &live);
                let exit_ms = t.elapsed().as_millis();
                f.slowest_exit_ms = f.slowest_exit_ms.max(exit_ms);
                f.exits_over_1s += usize::from(exit_ms > 1000);
                f.orphans += left.len();
                for (p, _) in &left {
                    f.orphan_notes.push(describe(&d, *p, cycle));
                }
                // A straggler (the machine's load can delay a supervisor) is given 30 s more,
                // then killed: the note says which.
                poll_until(Duration::from_secs(35).saturating_sub(t.elapsed()), || {
                    !left.iter().any(|p| still_alive(*p))
                });
                for (p, start) in left {
                    if still_alive((p, start)) {
                        f.orphan_notes
                            .push(format!("{p} still alive 35 s after the kill"));
                        // SAFETY: a stray process of this test's tree.
                        unsafe { libc::kill(p, libc::SIGKILL) };
                    }
                }
                killed.push(run);
                owners.push(spawn());
            }
            // The last runs: every owner goes, the job is paused, and one owner recovers.
            for mut c in owners.drain(..) {
                // SAFETY: as above.
                unsafe { libc::kill(c.id() as i32, libc::SIGKILL) };
                let _ = c.wait();
            }
            poll_until(Duration::from_secs(5), || orphans(&d, &[]).is_empty());
            f.orphans += orphans(&d, &[]).len();
            cli_out(&d, &store, &["pause", "looper"]);
            let mut last = spawn();
            poll_until(Duration::from_secs(60), || lease_of(&d, &store).is_none());
            // SAFETY: as above.
            unsafe { libc::kill(last.id() as i32, libc::SIGKILL) };
            let _ = last.wait();
            (f, killed)
        })
        .await
        .unwrap()
    };
    figures.wall_s = started.elapsed().as_secs_f64();
    let rows = history_of(&d, &store);
    let run_of = |r: &serde_json::Value| r["run_id"].as_str().unwrap_or("").to_string();
    let mut per_run: std::collections::BTreeMap<String, usize> = Default::default();
    let mut per_slot: std::collections::BTreeMap<String, usize> = Default::default();
    for r in &rows {
        *per_run.entry(run_of(r)).or_default() += 1;
        let status = r["status"].as_str().unwrap_or("");
        if !["missed", "skipped"].contains(&status)
            && let Some(slot) = r["slot"].as_str()
        {
            *per_slot.entry(slot.to_string()).or_default() += 1;
        }
    }
    figures.duplicates = per_run
        .values()
        .chain(per_slot.values())
        .map(|n| n - 1)
        .sum();
    figures.rows_lost = killed.iter().filter(|k| !per_run.contains_key(*k)).count();
    let holds_on_rows: usize = rows
        .iter()
        .map(|r| {
            r["transcript"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|e| e["tool"] == "hold")
                .count()
        })
        .sum();
    figures.tool_starts = pid_lines(&d.join("tool.pids")).len();
    figures.server_starts = pid_lines(&d.join("mcp.pids")).len();
    figures.runs_began = rows
        .iter()
        .filter(|r| !["skipped", "missed"].contains(&r["status"].as_str().unwrap_or("")))
        .count();
    figures.era_restarts = logs_text(&d)
        .matches("starting it again in that era")
        .count();
    figures.duplicates += figures.tool_starts.saturating_sub(holds_on_rows);
    let per_turn = (1000.0 + 100.0) / 1e6;
    figures.billed_usd = fake.request_count() as f64 * per_turn;
    figures.recorded_usd = rows.iter().filter_map(|r| r["cost_usd"].as_f64()).sum();
    eprintln!("{cycles} kill cycles: {figures:#?}");
    figures
}

fn assert_held(f: &CycleFigures) {
    assert_eq!(f.orphans, 0, "processes outlived their owner: {f:#?}");
    assert_eq!(
        f.unseen, 0,
        "the orphan count did not see a run's processes: {f:#?}"
    );
    assert_eq!(f.duplicates, 0, "{f:#?}");
    assert_eq!(f.rows_lost, 0, "{f:#?}");
    // A killed owner may have started a run's server without a row yet for it (the next owner
    // recovers it), never more than one per run but for the era restarts.
    assert!(
        f.server_starts <= f.runs_began + f.era_restarts + 1,
        "servers started more often than runs: {f:#?}"
    );
    assert!(
        f.recorded_usd >= f.billed_usd - 1e-9,
        "money recorded below money billed: {f:#?}"
    );
}

/// `KILL_CYCLES` (default 100) `kill -9` cycles of two file-store owners running an agent that
/// calls an MCP server's tool and a command tool (`docs/BENCHMARKS.md`, "Kill cycles").
#[ignore = "about 5 minutes; run by hand: cargo test --release --test loop_kill -- --ignored"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_cycles_of_two_file_store_owners_with_tool_agents() {
    let n = std::env::var("KILL_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let f = kill_cycles(|d| d.join("store").display().to_string(), n).await;
    assert_held(&f);
}

/// The same on PostgreSQL, `KILL_CYCLES` (default 30) cycles.
#[ignore = "about 2 minutes; run by hand: cargo test --release --test loop_kill -- --ignored"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_cycles_of_two_postgres_owners_with_tool_agents() {
    let Some(url) = tokio::task::spawn_blocking(support::pg::database)
        .await
        .unwrap()
    else {
        return;
    };
    let n = std::env::var("KILL_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let f = kill_cycles(move |_| url, n).await;
    assert_held(&f);
}

//! `proc::run` through the real per-run supervisor (`cronsole __supervise`), in process: every
//! test here sets the supervisor first, so the whole file exercises the path the binary uses.
//! Escapees die at run end, on timeout, on a hard cap and when the future is dropped; a command
//! without shell syntax is executed without `sh`.
#![allow(clippy::unwrap_used)] // test code
#![allow(unsafe_code)] // signals, forks and polls real processes through libc

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use cronsole::testkit::internals::proc::{self, Cap, ProcEnv, ProcSpec, run};
use support::cli::BIN;
use support::pids::gone;
use support::tempdir as tmp;

fn supervised() {
    proc::use_supervisor(BIN.into());
    assert!(proc::supervised());
}

async fn pid_in(path: &Path) -> i32 {
    support::wait::poll_for_async(Duration::from_secs(5), || {
        std::fs::read_to_string(path).ok()?.trim().parse().ok()
    })
    .await
    .unwrap_or_else(|| panic!("{} never written", path.display()))
}

fn spec(command: &str, timeout: Duration) -> ProcSpec<'_> {
    ProcSpec {
        command,
        timeout,
        stdout_cap: Cap::Soft(1 << 16),
        stderr_cap: Cap::Soft(1 << 16),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setsid_escapee_neither_delays_the_run_nor_outlives_it() {
    supervised();
    let d = tmp("esc");
    let cmd = format!(
        "setsid sleep 314 & echo $! > {}/esc.pid; echo done",
        d.display()
    );
    let started = Instant::now();
    let out = run(&spec(&cmd, Duration::from_secs(30)), &ProcEnv::default())
        .await
        .unwrap();
    assert!(out.success(), "{out:?}");
    assert_eq!(out.stdout_lossy().trim(), "done");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "the escapee held the pipe until the timeout"
    );
    let pid = pid_in(&d.join("esc.pid")).await;
    assert!(gone(pid).await, "escapee {pid} outlived its run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_and_hard_cap_kill_the_whole_tree_escapees_included() {
    supervised();
    let d = tmp("timeout");
    let cmd = format!(
        "setsid sleep 315 & echo $! > {}/t.pid; sleep 300",
        d.display()
    );
    let out = run(&spec(&cmd, Duration::from_millis(800)), &ProcEnv::default())
        .await
        .unwrap();
    assert!(out.timed_out);
    assert_eq!(out.exit_code, proc::TIMEOUT_EXIT_CODE);
    assert!(gone(pid_in(&d.join("t.pid")).await).await);

    let cmd = format!(
        "setsid sleep 316 & echo $! > {}/c.pid; sleep 0.3; yes",
        d.display()
    );
    let out = run(
        &ProcSpec {
            command: &cmd,
            timeout: Duration::from_secs(30),
            stdout_cap: Cap::Hard(1000),
            stderr_cap: Cap::Soft(100),
        },
        &ProcEnv::default(),
    )
    .await
    .unwrap();
    assert!(out.hard_cap_hit && !out.success(), "{out:?}");
    assert!(gone(pid_in(&d.join("c.pid")).await).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_future_kills_the_tree() {
    supervised();
    let d = tmp("drop");
    let cmd = format!(
        "setsid sleep 317 & echo $! > {}/d.pid; sleep 300",
        d.display()
    );
    let s = spec(&cmd, Duration::from_secs(300));
    let env = ProcEnv::default();
    let fut = run(&s, &env);
    let pidfile = d.join("d.pid");
    tokio::select! {
        _ = fut => panic!("finished early"),
        p = pid_in(&pidfile) => {
            // Cancelled here: the future is dropped with the command still running.
            let _ = p;
        }
    }
    let pid = pid_in(&pidfile).await;
    assert!(gone(pid).await, "a cancelled run left {pid} behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_without_shell_syntax_run_directly_with_the_shell_s_exit_codes() {
    supervised();
    // Executed with its literal arguments (`proc::plain_argv`; its unit tests cover which
    // commands qualify).
    let out = run(
        &spec("/bin/cat /proc/self/stat", Duration::from_secs(10)),
        &ProcEnv::default(),
    )
    .await
    .unwrap();
    assert!(out.success(), "{out:?}");
    assert!(out.stdout_lossy().contains("(cat)"), "{out:?}");
    // A missing program is exit 127 with the program named, as `sh` reports it.
    let out = run(
        &spec("/no/such/program --flag", Duration::from_secs(10)),
        &ProcEnv::default(),
    )
    .await
    .unwrap();
    assert_eq!(out.exit_code, 127, "{out:?}");
    assert!(out.stderr_lossy().contains("/no/such/program"), "{out:?}");
    // Shell syntax still goes through sh.
    let out = run(
        &spec("echo a | tr a b; exit 3", Duration::from_secs(10)),
        &ProcEnv::default(),
    )
    .await
    .unwrap();
    assert_eq!(out.exit_code, 3);
    assert_eq!(out.stdout_lossy().trim(), "b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_go_through_one_zygote_which_is_restarted_when_killed() {
    supervised();
    let s = spec("/bin/cat /proc/self/stat", Duration::from_secs(10));
    let first = run(&s, &ProcEnv::default()).await.unwrap();
    assert!(first.success(), "{first:?}");
    let zygote = proc::zygote_pid().expect("a supervised run started the zygote") as i32;
    let cmdline = std::fs::read(format!("/proc/{zygote}/cmdline")).unwrap();
    assert!(
        String::from_utf8_lossy(&cmdline).contains("__zygote"),
        "{cmdline:?}"
    );
    // The command's parent is a fork of the zygote (its run's supervisor), not this process.
    let stat = first.stdout_lossy();
    let ppid: i32 = stat
        .rsplit_once(')')
        .and_then(|(_, r)| r.split_whitespace().nth(1))
        .and_then(|p| p.parse().ok())
        .unwrap();
    assert_ne!(ppid, std::process::id() as i32);
    let grandparent: i32 = std::fs::read_to_string(format!("/proc/{ppid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().nth(1).map(str::to_string))
        })
        .and_then(|p| p.parse().ok())
        .unwrap_or(zygote);
    assert_eq!(grandparent, zygote, "the supervisor is the zygote's child");
    // A zygote killed by hand: the next run starts a new one and succeeds.
    unsafe {
        libc::kill(zygote, libc::SIGKILL);
    }
    assert!(gone(zygote).await);
    let again = run(&s, &ProcEnv::default()).await.unwrap();
    assert!(again.success(), "{again:?}");
    let next = proc::zygote_pid().expect("restarted") as i32;
    assert_ne!(next, zygote);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zygote_run_gets_its_directory_and_environment() {
    supervised();
    let d = tmp("zenv");
    let d = std::fs::canonicalize(&d).unwrap();
    let env = ProcEnv {
        workdir: Some(d.clone()),
        scrub: vec!["PATH".into()],
        stall_limit: Some(Duration::from_secs(30)),
        extra: vec![("CRONSOLE_ZYGOTE_TEST".into(), "a b=c".into())],
    };
    let out = run(
        &spec("/bin/sh -c 'pwd; env'", Duration::from_secs(10)),
        &env,
    )
    .await
    .unwrap();
    assert!(out.success(), "{out:?}");
    let text = out.stdout_lossy();
    assert!(text.starts_with(&format!("{}\n", d.display())), "{text}");
    assert!(text.contains("CRONSOLE_ZYGOTE_TEST=a b=c"), "{text}");
    assert!(!text.lines().any(|l| l.starts_with("PATH=")), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zygote_s_supervisor_is_one_thread_and_its_command_blocks_no_signal() {
    supervised();
    let env = ProcEnv {
        stall_limit: Some(Duration::from_secs(30)),
        ..ProcEnv::default()
    };
    let out = run(
        &spec(
            "grep -E '^Sig(Blk|Ign)' /proc/self/status; grep '^Threads' /proc/$PPID/status",
            Duration::from_secs(10),
        ),
        &env,
    )
    .await
    .unwrap();
    assert!(out.success(), "{out:?}");
    let text = out.stdout_lossy();
    assert!(text.contains("SigBlk:\t0000000000000000"), "{text}");
    assert!(text.contains("Threads:\t1\n"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zygote_s_supervisor_serves_later_runs_without_what_earlier_ones_set() {
    // A supervisor whose run's tree is gone waits for the next run instead of exiting (no fork
    // per run); each run still gets exactly its own directory, environment and output pipes.
    supervised();
    let dir = tmp("zreuse");
    let d = std::fs::canonicalize(&dir).unwrap();
    let here = std::env::current_dir().unwrap();
    let mut supervisors = Vec::new();
    for i in 0..6 {
        let with = i % 2 == 0;
        let env = ProcEnv {
            workdir: with.then(|| d.clone()),
            extra: if with {
                vec![("CRONSOLE_REUSE_TEST".into(), format!("run{i}"))]
            } else {
                vec![]
            },
            ..ProcEnv::default()
        };
        let out = run(
            &spec(
                "echo $PPID; pwd; echo \"v=$CRONSOLE_REUSE_TEST\"",
                Duration::from_secs(10),
            ),
            &env,
        )
        .await
        .unwrap();
        assert!(out.success(), "run {i}: {}", out.stderr_lossy());
        let text = out.stdout_lossy();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        supervisors.push(lines[0].to_string());
        let (dir, var) = if with {
            (d.clone(), format!("v=run{i}"))
        } else {
            (here.clone(), "v=".to_string())
        };
        assert_eq!(lines[1], dir.display().to_string(), "{text}");
        assert_eq!(lines[2], var, "{text}");
    }
    let mut distinct = supervisors.clone();
    distinct.sort();
    distinct.dedup();
    assert!(
        distinct.len() < supervisors.len(),
        "every run had a supervisor of its own: {supervisors:?}"
    );
}

/// Renewals the store refuses `fail_first` times, then answers each only after `slow_ms` (a
/// path to the store that came back slow).
#[derive(Default)]
struct LateRenewals {
    fail_first: std::sync::atomic::AtomicUsize,
    slow_ms: std::sync::atomic::AtomicU64,
}

impl cronsole::testkit::store::Hooks for LateRenewals {
    fn before(&self, call: cronsole::testkit::store::Call) -> cronsole::store::StoreResult<()> {
        use std::sync::atomic::Ordering::SeqCst;
        if call != cronsole::testkit::store::Call::Renew {
            return Ok(());
        }
        if self
            .fail_first
            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(cronsole::store::StoreError::Backend(
                cronsole::store::BackendError::Unavailable("connection refused (test)".into()),
            ));
        }
        std::thread::sleep(Duration::from_millis(self.slow_ms.load(SeqCst)));
        Ok(())
    }
}

/// An engine whose commands run under their supervisors' dead-man switch (half the lease: 1 s
/// for a 2 s lease), over a store that refuses the first renewals and then answers late: the
/// run is stopped at three quarters of its lease and recorded `abandoned` for it, as the docs
/// say. Its heartbeats to the supervisor never pause while a renewal waits, so the switch does
/// not kill it first as if this owner had hung: no `failed` row of a run "killed: its owner
/// sent no heartbeat".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_cut_off_under_a_short_lease_is_stopped_for_its_lease_not_killed_by_its_switch() {
    use cronsole::clock::{Clock, ManualClock};
    use cronsole::model::Status;
    use cronsole::store::file::FileStore;
    use cronsole::store::{HistoryQuery, HistoryReader, Store};
    use std::sync::Arc;
    use std::sync::atomic::Ordering::SeqCst;

    supervised();
    let dir = tmp("cutshort");
    let marks = dir.join("finished");
    let yaml = format!(
        "budget: null\njobs:\n  - name: a\n    schedule: every 1h\n    run_immediately: true\n    \
         max_retries: 1\n    lease_seconds: 2\n    command: \"sleep 8 && echo x >> {}\"\n",
        marks.display()
    );
    let jobs = dir.join("jobs.yaml");
    std::fs::write(&jobs, &yaml).unwrap();
    let clock = ManualClock::new("2026-11-29T12:00:00Z".parse().unwrap());
    let inner = Arc::new(FileStore::open(&dir.join("store")).unwrap());
    let loaded = cronsole::config::load_str(&yaml, &jobs).unwrap_or_else(|e| panic!("{e}"));
    inner.apply(&loaded.file, clock.now()).unwrap();
    let hooks = LateRenewals::default();
    hooks.fail_first.store(2, SeqCst);
    hooks.slow_ms.store(2500, SeqCst);
    let store: Arc<dyn Store> = Arc::new(cronsole::testkit::store::Wrapped::new(
        Arc::clone(&inner) as Arc<dyn Store>,
        hooks,
    ));
    let mut cfg = cronsole::engine::EngineConfig::new(format!("test:{}", std::process::id()));
    cfg.shutdown_grace = Duration::from_millis(200);
    cfg.publish_snapshots = false;
    let deps = cronsole::testkit::engine::run_deps(
        cronsole::testkit::engine::no_env(),
        cronsole::testkit::internals::action::BackoffConfig {
            floor_secs: 0.01,
            base: 2.0,
            cap_secs: 0.02,
            jitter: 0.1,
        },
    );
    let c: Arc<dyn Clock> = Arc::new(clock);
    let handle = cronsole::engine::spawn(cfg, store, c, deps).unwrap();
    let rows = || {
        inner
            .history(&HistoryQuery {
                limit: 10,
                ..Default::default()
            })
            .unwrap()
    };
    assert!(
        support::wait::poll_until_async(Duration::from_secs(30), || !rows().is_empty()).await,
        "no row"
    );
    let rows = rows();
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(rows[0].status, Status::Abandoned, "{rows:#?}");
    assert!(
        rows[0]
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("no lease renewal")),
        "{rows:#?}"
    );
    assert!(!marks.exists(), "the command ran to its end");
    handle.shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(20), handle.join).await;
}

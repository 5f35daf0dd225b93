//! Process-level tests of `proc`, the `pre_run` gate, the command monitor and the command action:
//! real `sh` processes, real process groups, real timeouts.
#![allow(clippy::unwrap_used)] // test code

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use cronsole::model::{Gate, MonitorSource};
use cronsole::testkit::internals::action::command::{
    CommandOutcome, TRUNCATED_MARKER, run_command,
};
use cronsole::testkit::internals::gate::{GateConfig, GateOutcome, pre_run, run_gate};
use cronsole::testkit::internals::proc::{Cap, ProcEnv, ProcSpec, run};
use support::pids::{alive, gone};
use support::temp_path as tmp;

fn read_pids(path: &Path) -> Vec<i32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|s| s.parse().ok())
        .collect()
}

// ---------------------------------------------------------------- proc

#[tokio::test]
async fn proc_timeout_kills_the_whole_group_including_a_background_grandchild() {
    let pids = tmp("pids");
    let cmd = format!("sleep 30 & echo $! > {}; sleep 30", pids.display());
    let t = Instant::now();
    let out = run(
        &ProcSpec {
            command: &cmd,
            timeout: Duration::from_millis(500),
            stdout_cap: Cap::Soft(1024),
            stderr_cap: Cap::Soft(1024),
        },
        &ProcEnv::default(),
    )
    .await
    .unwrap();
    assert!(out.timed_out);
    assert_eq!(out.exit_code, 124);
    assert!(t.elapsed() < Duration::from_secs(5));
    let p = read_pids(&pids);
    assert_eq!(p.len(), 1, "grandchild pid recorded");
    assert!(gone(p[0]).await, "backgrounded sleep {} survived", p[0]);
}

#[tokio::test]
async fn proc_leaves_no_straggler_after_the_shell_exits() {
    let pids = tmp("pids");
    // The background sleep holds stdout open; without the group kill this would take 30 s.
    let cmd = format!("sleep 30 & echo $! > {}; echo done", pids.display());
    let t = Instant::now();
    let out = run(
        &ProcSpec {
            command: &cmd,
            timeout: Duration::from_secs(20),
            stdout_cap: Cap::Soft(1024),
            stderr_cap: Cap::Soft(1024),
        },
        &ProcEnv::default(),
    )
    .await
    .unwrap();
    assert!(!out.timed_out);
    assert_eq!(out.exit_code, 0);
    assert_eq!(out.stdout, b"done\n");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    let p = read_pids(&pids);
    assert!(gone(p[0]).await);
}

#[tokio::test]
async fn proc_dropping_the_future_kills_the_group() {
    let pids = tmp("pids");
    let cmd = format!(
        "echo $$ > {p}; sleep 30 & echo $! >> {p}; wait",
        p = pids.display()
    );
    let spec = ProcSpec {
        command: &cmd,
        timeout: Duration::from_secs(60),
        stdout_cap: Cap::Soft(1024),
        stderr_cap: Cap::Soft(1024),
    };
    // Cancel the run (drop the future) once both pids are written.
    // Boxed so that `drop(fut)` really drops the future (a stack pin would only drop a reference).
    let env = ProcEnv::default();
    let mut fut = Box::pin(run(&spec, &env));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        tokio::select! {
            _ = &mut fut => panic!("should still be running"),
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
        if read_pids(&pids).len() == 2 || Instant::now() > deadline {
            break;
        }
    }
    let p = read_pids(&pids);
    assert_eq!(p.len(), 2);
    assert!(alive(p[0]) && alive(p[1]));
    drop(fut);
    assert!(gone(p[0]).await, "shell {} survived cancellation", p[0]);
    assert!(
        gone(p[1]).await,
        "grandchild {} survived cancellation",
        p[1]
    );
}

#[tokio::test]
async fn proc_hard_cap_kills_a_runaway_writer() {
    let t = Instant::now();
    let out = run(
        &ProcSpec {
            command: "yes",
            timeout: Duration::from_secs(20),
            stdout_cap: Cap::Hard(64 * 1024),
            stderr_cap: Cap::Soft(500),
        },
        &ProcEnv::default(),
    )
    .await
    .unwrap();
    assert!(out.hard_cap_hit);
    assert!(out.stdout.len() <= 64 * 1024);
    assert!(!out.timed_out);
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn proc_soft_cap_keeps_the_head_and_drains_the_rest() {
    let out = run(
        &ProcSpec {
            command: "head -c 1000000 /dev/zero | tr '\\0' a; echo; echo tail-err >&2",
            timeout: Duration::from_secs(20),
            stdout_cap: Cap::Soft(100),
            stderr_cap: Cap::Soft(100),
        },
        &ProcEnv::default(),
    )
    .await
    .unwrap();
    assert_eq!(out.exit_code, 0);
    assert_eq!(out.stdout, vec![b'a'; 100]);
    assert!(out.stdout_truncated);
    assert_eq!(out.stderr, b"tail-err\n");
    assert!(!out.stderr_truncated);
}

#[tokio::test]
async fn proc_stdin_is_closed() {
    // `cat` with stdin closed ends at once instead of waiting for input.
    let out = run(
        &ProcSpec {
            command: "cat; echo eof",
            timeout: Duration::from_secs(10),
            stdout_cap: Cap::Soft(100),
            stderr_cap: Cap::Soft(100),
        },
        &ProcEnv::default(),
    )
    .await
    .unwrap();
    assert_eq!(out.stdout, b"eof\n");
    assert!(!out.timed_out);
}

// ---------------------------------------------------------------- pre_run

#[tokio::test]
async fn pre_run_exit_zero_goes_with_stripped_stdout_as_context() {
    let out = pre_run(
        "printf '\\n  3 new files\\n\\n'",
        Duration::from_secs(10),
        &ProcEnv::default(),
    )
    .await;
    assert_eq!(
        out,
        GateOutcome::Go {
            context: Some("3 new files".into()),
            diff: None,
            monitor: None
        }
    );
    let out = pre_run("true", Duration::from_secs(10), &ProcEnv::default()).await;
    assert_eq!(
        out,
        GateOutcome::Go {
            context: None,
            diff: None,
            monitor: None
        }
    );
}

#[tokio::test]
async fn pre_run_stdout_is_bounded() {
    let out = pre_run(
        "head -c 20000 /dev/zero | tr '\\0' b",
        Duration::from_secs(10),
        &ProcEnv::default(),
    )
    .await;
    let GateOutcome::Go {
        context: Some(c), ..
    } = out
    else {
        panic!("expected go");
    };
    assert_eq!(c.chars().count(), 8000);
}

#[tokio::test]
async fn pre_run_non_zero_skips_with_exit_code_and_stderr() {
    let out = pre_run(
        "echo stdout-ignored; echo 'queue empty' >&2; exit 3",
        Duration::from_secs(10),
        &ProcEnv::default(),
    )
    .await;
    assert_eq!(
        out,
        GateOutcome::Skip {
            reason: "pre-run gate: nothing to do (exit 3: queue empty)".into()
        }
    );
    // stderr is cut to 500 characters
    let out = pre_run(
        "head -c 5000 /dev/zero | tr '\\0' e >&2; exit 1",
        Duration::from_secs(10),
        &ProcEnv::default(),
    )
    .await;
    let GateOutcome::Skip { reason } = out else {
        panic!("expected skip")
    };
    let quoted = reason
        .strip_prefix("pre-run gate: nothing to do (exit 1: ")
        .and_then(|r| r.strip_suffix(')'))
        .unwrap();
    assert_eq!(quoted.chars().count(), 500);
}

#[tokio::test]
async fn pre_run_timeout_skips_and_kills_the_group() {
    let pids = tmp("pids");
    let cmd = format!("sleep 60 & echo $! > {}; sleep 60", pids.display());
    let t = Instant::now();
    let out = pre_run(&cmd, Duration::from_millis(500), &ProcEnv::default()).await;
    assert!(t.elapsed() < Duration::from_secs(5));
    match out {
        GateOutcome::Skip { reason } => assert!(reason.contains("timed out"), "{reason}"),
        other => panic!("expected skip, got {other:?}"),
    }
    let p = read_pids(&pids);
    assert_eq!(p.len(), 1);
    assert!(
        gone(p[0]).await,
        "grandchild sleep {} survived the timeout",
        p[0]
    );
}

#[tokio::test]
async fn pre_run_through_run_gate() {
    let gate = Gate::PreRun {
        command: "exit 7".into(),
    };
    let out = run_gate(&gate, None, &GateConfig::default(), &ProcEnv::default()).await;
    assert_eq!(
        out,
        GateOutcome::Skip {
            reason: "pre-run gate: nothing to do (exit 7)".into()
        }
    );
}

// ---------------------------------------------------------------- command monitor

#[tokio::test]
async fn command_monitor_first_unchanged_changed_error_then_unchanged() {
    let src = tmp("source.txt");
    std::fs::write(&src, "disk 50%\nmem 20%\n").unwrap();
    let ok_gate = Gate::Monitor {
        source: MonitorSource::Command {
            command: format!("cat {}", src.display()),
        },
    };
    let cfg = GateConfig::default();

    // first run: go, output as context, baseline
    let GateOutcome::Go {
        context,
        diff,
        monitor,
    } = run_gate(&ok_gate, None, &cfg, &ProcEnv::default()).await
    else {
        panic!("first run goes")
    };
    assert!(context.unwrap().contains("disk 50%\nmem 20%"));
    assert_eq!(diff, None);
    let base = monitor.unwrap();

    // unchanged: no_change
    assert_eq!(
        run_gate(&ok_gate, Some(&base), &cfg, &ProcEnv::default()).await,
        GateOutcome::NoChange
    );

    // changed: diff with -/+ lines, new baseline
    std::fs::write(&src, "disk 91%\nmem 20%\n").unwrap();
    let GateOutcome::Go {
        context,
        diff,
        monitor,
    } = run_gate(&ok_gate, Some(&base), &cfg, &ProcEnv::default()).await
    else {
        panic!("change goes")
    };
    let diff = diff.unwrap();
    assert!(diff.contains("--- previous\n+++ current\n"), "{diff}");
    assert!(
        diff.contains("\n-disk 50%\n") && diff.contains("\n+disk 91%\n"),
        "{diff}"
    );
    assert!(context.unwrap().contains(&diff));
    let changed = monitor.unwrap();
    assert_ne!(changed.hash, base.hash);

    // probe error: failed; the caller keeps `changed` as the watermark
    let bad_gate = Gate::Monitor {
        source: MonitorSource::Command {
            command: "echo boom >&2; exit 4".into(),
        },
    };
    match run_gate(&bad_gate, Some(&changed), &cfg, &ProcEnv::default()).await {
        GateOutcome::Fail { error } => {
            assert_eq!(error, "monitor command failed (exit 4: boom)")
        }
        other => panic!("expected fail, got {other:?}"),
    }
    // the next unchanged output still compares with the last good watermark
    assert_eq!(
        run_gate(&ok_gate, Some(&changed), &cfg, &ProcEnv::default()).await,
        GateOutcome::NoChange
    );
}

#[tokio::test]
async fn command_monitor_over_64k_fails() {
    let gate = Gate::Monitor {
        source: MonitorSource::Command {
            command: "yes".into(),
        },
    };
    match run_gate(&gate, None, &GateConfig::default(), &ProcEnv::default()).await {
        GateOutcome::Fail { error } => assert!(error.contains("exceeded 64 KiB"), "{error}"),
        other => panic!("expected fail, got {other:?}"),
    }
    // exactly 64 KiB is fine
    let gate = Gate::Monitor {
        source: MonitorSource::Command {
            command: "head -c 65536 /dev/zero".into(),
        },
    };
    assert!(matches!(
        run_gate(&gate, None, &GateConfig::default(), &ProcEnv::default()).await,
        GateOutcome::Go { .. }
    ));
}

#[tokio::test]
async fn command_monitor_timeout_fails() {
    let cfg = GateConfig {
        probe_timeout: Duration::from_millis(300),
        ..GateConfig::default()
    };
    let gate = Gate::Monitor {
        source: MonitorSource::Command {
            command: "sleep 30".into(),
        },
    };
    match run_gate(&gate, None, &cfg, &ProcEnv::default()).await {
        GateOutcome::Fail { error } => assert!(error.contains("timed out"), "{error}"),
        other => panic!("expected fail, got {other:?}"),
    }
}

// ---------------------------------------------------------------- command action

#[tokio::test]
async fn command_success_delivers_stdout_verbatim() {
    let out = run_command(
        "printf '  a\\n\\tb\\n\\n'; echo noise >&2",
        Duration::from_secs(10),
        &ProcEnv::default(),
    )
    .await;
    assert_eq!(
        out,
        CommandOutcome::Succeeded {
            stdout: "  a\n\tb\n\n".into()
        }
    );
}

#[tokio::test]
async fn command_failure_reports_exit_and_output() {
    let out = run_command(
        "echo partial; echo 'disk full' >&2; exit 2",
        Duration::from_secs(10),
        &ProcEnv::default(),
    )
    .await;
    assert_eq!(
        out,
        CommandOutcome::Failed {
            exit_code: 2,
            timed_out: false,
            error: "[exit 2] partial\ndisk full".into()
        }
    );
}

#[tokio::test]
async fn command_output_is_truncated_with_a_marker() {
    let out = run_command(
        "head -c 100000 /dev/zero | tr '\\0' z",
        Duration::from_secs(10),
        &ProcEnv::default(),
    )
    .await;
    let CommandOutcome::Succeeded { stdout } = out else {
        panic!("expected success")
    };
    assert!(stdout.ends_with(TRUNCATED_MARKER));
    assert_eq!(
        stdout.chars().count(),
        8000 + TRUNCATED_MARKER.chars().count()
    );
    assert_eq!(TRUNCATED_MARKER, "…[output truncated]");
}

#[tokio::test]
async fn command_timeout_is_124_and_the_group_is_gone() {
    let pids = tmp("pids");
    let cmd = format!(
        "echo started; echo $$ > {p}; sleep 60 & echo $! >> {p}; sleep 60",
        p = pids.display()
    );
    let t = Instant::now();
    let out = run_command(&cmd, Duration::from_millis(500), &ProcEnv::default()).await;
    assert!(t.elapsed() < Duration::from_secs(5));
    match out {
        CommandOutcome::Failed {
            exit_code,
            timed_out,
            error,
        } => {
            assert_eq!(exit_code, 124);
            assert!(timed_out);
            assert!(error.starts_with("[exit 124] timed out"), "{error}");
            assert!(error.contains("started"), "{error}");
        }
        other => panic!("expected failure, got {other:?}"),
    }
    for pid in read_pids(&pids) {
        assert!(gone(pid).await, "{pid} survived the timeout");
    }
}

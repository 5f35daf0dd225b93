//! End-to-end console test: the real binary inside `tmux`, driven by `send-keys` and read with
//! `capture-pane -p`. Reported skipped (`SKIPPED TEST …`) when `tmux` is missing, except
//! under `CI=true`, where a missing `tmux` is a failure.
//!
//! The [`Tmux`] helper is tested on its own, then the whole console is driven like a user would.
#![allow(clippy::unwrap_used)] // test code

mod support;
use support::wait::{poll_until, wait_until};

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use support::tmux_or_skip as tmux_available;

/// One detached tmux session on a tmux server of its own (its own socket), killed on drop. A
/// server shared by the tests exits when its last session is killed, and a session started at
/// that moment fails ("server exited unexpectedly"); one server per session cannot race.
struct Tmux {
    name: String,
}

impl Tmux {
    /// Start `cmd` (run by the shell) in a new detached `w`×`h` session in `dir`.
    fn start(tag: &str, w: u16, h: u16, dir: &Path, cmd: &str) -> Tmux {
        let name = format!("cronsole-test-{tag}-{}", std::process::id());
        let (w, h) = (w.to_string(), h.to_string());
        let st = Command::new("tmux")
            .args(["-L", &name])
            .args(["new-session", "-d", "-s", &name, "-x", &w, "-y", &h, "-c"])
            .arg(dir)
            .args(["-e", "TERM=xterm-256color", cmd])
            .status()
            .expect("run tmux");
        assert!(st.success(), "tmux new-session failed for {cmd}");
        let t = Tmux { name };
        // Keep the pane after the program exits so its last screen can be read.
        t.tmux(&["set-option", "-t", &t.name, "remain-on-exit", "on"]);
        t
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.name])
            .args(args)
            .output()
            .expect("run tmux");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn capture(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", &self.name])
    }

    /// Send keys in tmux's `send-keys` syntax (`"j"`, `"Enter"`, `"Escape"`, `"C-c"`).
    fn send(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", &self.name];
        args.extend_from_slice(keys);
        self.tmux(&args);
    }

    /// Wait until the pane shows `text`; the last screen is in the panic message otherwise.
    fn wait_for(&self, text: &str, timeout: Duration) -> String {
        self.wait_for_all(&[text], timeout)
    }

    /// Wait until a capture satisfies `ok`; the last screen is in the panic message otherwise.
    fn wait_until_screen(&self, timeout: Duration, ok: impl Fn(&str) -> bool) -> String {
        if !poll_until(timeout, || ok(&self.capture())) {
            panic!("timed out; screen:\n{}", self.capture());
        }
        self.capture()
    }

    /// Wait until one capture shows every one of `texts` (a capture can land mid-frame: the
    /// title drawn, the lines below not yet).
    fn wait_for_all(&self, texts: &[&str], timeout: Duration) -> String {
        let mut screen = String::new();
        let shown = poll_until(timeout, || {
            screen = self.capture();
            texts.iter().all(|t| screen.contains(t))
        });
        assert!(shown, "timed out waiting for {texts:?}; screen:\n{screen}");
        screen
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.name, "kill-server"])
            .output();
    }
}

fn tempdir(tag: &str) -> support::TempDir {
    support::tempdir(&format!("tmux-{tag}"))
}

#[test]
fn helper_sends_keys_and_reads_the_pane() {
    if !tmux_available() {
        return;
    }
    let dir = tempdir("helper");
    let t = Tmux::start("helper", 80, 24, &dir, "read x; echo \"got:$x\"; sleep 30");
    t.send(&["hello", "Enter"]);
    t.wait_for("got:hello", Duration::from_secs(10));
    drop(t);
}

const JOBS: &str = r#"
jobs:
  - name: alpha
    schedule: every 1h
    run_immediately: true
    command: "echo alpha-ran"
  - name: beta
    schedule: "0 3 * * *"
    command: "echo night"
  - name: watch
    schedule: every 1s
    monitor: { command: "cat src.txt" }
    command: "echo watch-changed"
"#;

/// Run the real binary outside the console (another shell, same store).
fn cli(dir: &Path, args: &[&str]) -> String {
    let (code, out, err) = support::cli::output(
        support::cli::cronsole(dir)
            .args(args)
            .args(["--store", "store"]),
    );
    assert_eq!(code, 0, "{args:?}: {err}");
    out
}

fn succeeded_runs(dir: &Path, job: &str) -> usize {
    cli(
        dir,
        &["history", "--job", job, "--status", "succeeded", "--json"],
    )
    .lines()
    .filter(|l| !l.trim().is_empty())
    .count()
}

/// The issue's end-to-end walk: the jobs table appears; `t` + `y` runs a job and its row shows in
/// the history pane within 3 s; `p` pauses a job and `cronsole jobs --json` from another shell
/// agrees; `d` on a monitor job shows the `-`/`+` lines of its diff; `q` leaves the alternate
/// screen with the cursor visible and the shell back.
#[test]
fn console_draws_answers_keys_and_restores_the_terminal() {
    if !tmux_available() {
        return;
    }
    let dir = tempdir("console");
    std::fs::write(dir.join("jobs.yaml"), JOBS).expect("write jobs file");
    std::fs::write(dir.join("src.txt"), "status page\nvalue=1\n").expect("write monitor source");
    let bin = env!("CARGO_BIN_EXE_cronsole");
    // The shell stays (sleep) after printing the exit code: a dead pane loses its last output.
    let cmd = format!("{bin} --jobs jobs.yaml --store store console; echo EXITED:$?; sleep 120");
    let t = Tmux::start("console", 120, 40, &dir, &cmd);
    // A capture can land mid-frame (the table half drawn): wait for every row, not just the title.
    t.wait_for("Jobs 3/3", Duration::from_secs(30));
    for name in ["alpha", "beta", "watch"] {
        t.wait_for(name, Duration::from_secs(5));
    }

    // Help is built from the keymap.
    t.send(&["?"]);
    t.wait_for("Help (? or Esc closes)", Duration::from_secs(5));
    t.send(&["Escape"]);
    // Closed before the next key (ESC and a key right after it read as one Alt-key).
    t.wait_until_screen(Duration::from_secs(5), |s| {
        !s.contains("Help (? or Esc closes)")
    });

    // Trigger the selected job (alpha, first by name; it already ran once as its first slot is
    // its creation): confirm, and the manual run's row shows within 3 s.
    t.wait_for("alpha-ran", Duration::from_secs(10));
    t.send(&["t"]);
    t.wait_for("Trigger alpha now?", Duration::from_secs(5));
    t.send(&["y"]);
    if !poll_until(Duration::from_secs(3), || {
        t.capture().matches("alpha-ran").count() >= 2
    }) {
        panic!("manual run not shown within 3 s:\n{}", t.capture());
    }

    // Pause beta: the console marks it, and another process reading the store agrees.
    t.send(&["j", "p"]);
    t.wait_for("‖ beta", Duration::from_secs(10));
    let jobs: serde_json::Value =
        serde_json::from_str(&cli(&dir, &["jobs", "--json"])).expect("jobs --json");
    let beta = jobs
        .as_array()
        .and_then(|a| a.iter().find(|j| j["name"] == "beta"))
        .expect("beta in jobs --json");
    assert_eq!(beta["paused"], true, "{beta}");

    // Change the monitored source once the baseline exists, then read the diff with `d`.
    wait_until("a first watch run", Duration::from_secs(20), || {
        succeeded_runs(&dir, "watch") >= 1
    });
    std::fs::write(dir.join("src.txt"), "status page\nvalue=2\n").expect("change monitor source");
    wait_until("a changed watch run", Duration::from_secs(20), || {
        succeeded_runs(&dir, "watch") >= 2
    });
    t.send(&["j", "d"]);
    let screen = t.wait_for("+value=2", Duration::from_secs(10));
    assert!(screen.contains("-value=1"), "{screen}");
    t.send(&["Escape"]);
    // Back on the main screen before the next key: an ESC followed at once by `/` reads as
    // Alt-/ (and the `p` typed after it would pause a job).
    t.wait_for("Jobs 3/3", Duration::from_secs(5));

    // Name filter, then too small, then back.
    t.send(&["/", "a", "l", "p", "Enter"]);
    t.wait_for("Jobs 1/3", Duration::from_secs(5));
    t.tmux(&["resize-window", "-t", &t.name, "-x", "60", "-y", "20"]);
    t.wait_for("terminal too small", Duration::from_secs(5));
    t.tmux(&["resize-window", "-t", &t.name, "-x", "120", "-y", "40"]);
    t.wait_for("Jobs 1/3", Duration::from_secs(5));

    t.send(&["q"]);
    let screen = t.wait_for("EXITED:0", Duration::from_secs(40));
    // The alternate screen is gone (the console's frame is not left behind) and the cursor shows.
    assert!(!screen.contains("Jobs 1/3"), "{screen}");
    let flags = t.tmux(&[
        "display-message",
        "-p",
        "-t",
        &t.name,
        "#{alternate_on} #{cursor_flag}",
    ]);
    assert_eq!(flags.trim(), "0 1", "alternate screen off, cursor visible");
    drop(t);
}

const OPERATOR_JOBS: &str = r#"
defaults:
  run_immediately: true
jobs:
  - name: flaky
    schedule: every 1h
    max_retries: 1
    command: "test -f flag || { touch flag; echo flaky-first-failure >&2; exit 3; }"
  - name: long
    schedule: every 1h
    command: "seq 1 400 | sed 's/^380$/MARKER-DEEP-380/'"
  - name: slow
    schedule: every 1h
    max_retries: 3
    command: "sleep 90 & echo $! > slow.pid; wait"
"#;

fn pid_gone(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| s.contains(") Z "))
}

/// Tab gives the History pane a cursor and Enter opens the run under it (a marker deep inside a
/// long output is reached by scrolling); `R` + `y` retries a failed run as a run of its own; `X` +
/// `y` cancels a running run, whose process is gone and whose row says `cancelled by operator`.
#[test]
fn history_cursor_run_view_retry_and_cancel() {
    if !tmux_available() {
        return;
    }
    let dir = tempdir("operator");
    std::fs::write(dir.join("jobs.yaml"), OPERATOR_JOBS).expect("write jobs file");
    let bin = env!("CARGO_BIN_EXE_cronsole");
    let cmd = format!("{bin} --jobs jobs.yaml --store store console; echo EXITED:$?; sleep 120");
    let t = Tmux::start("operator", 120, 40, &dir, &cmd);
    t.wait_for("Jobs 3/3", Duration::from_secs(30));
    t.wait_for("flaky-first-failure", Duration::from_secs(20));
    wait_until("the slow run to start", Duration::from_secs(20), || {
        dir.join("slow.pid").exists()
    });

    // History focus on long's row, Enter: the run's full result, scrolled to its end.
    t.send(&["/", "l", "o", "n", "g", "Enter"]);
    t.wait_for("Jobs 1/3", Duration::from_secs(5));
    t.send(&["Tab", "Tab"]);
    t.send(&["Enter"]);
    // The per-attempt breakdown: one attempt, succeeded (the whole frame, not its first lines).
    let screen = t.wait_for_all(
        &["Run of long", "Attempts", "#1 ", "succeeded"],
        Duration::from_secs(5),
    );
    assert!(!screen.contains("MARKER-DEEP-380"), "{screen}");
    t.send(&["G"]);
    t.wait_for("MARKER-DEEP-380", Duration::from_secs(5));
    t.send(&["Escape"]);
    t.wait_for("Jobs 1/3", Duration::from_secs(5));
    // A second Esc on the main screen clears the filter (sent apart: two ESC bytes in a row
    // would read as one Alt-Esc).
    std::thread::sleep(Duration::from_millis(300));
    t.send(&["Escape"]);
    t.wait_for("Jobs 3/3", Duration::from_secs(5));

    // Retry flaky's failed run from its history row: a new row with trigger retry succeeds.
    t.send(&["/", "f", "l", "a", "k", "y", "Enter"]);
    t.wait_for("Jobs 1/3", Duration::from_secs(5));
    t.send(&["R"]);
    t.wait_for("Retry run", Duration::from_secs(5));
    t.send(&["y"]);
    t.wait_for("[retry]", Duration::from_secs(15));
    wait_until("the retry to succeed", Duration::from_secs(15), || {
        succeeded_runs(&dir, "flaky") >= 1
    });
    t.send(&["Escape"]);
    t.wait_for("Jobs 3/3", Duration::from_secs(5));

    // Cancel the slow run from the jobs table: asked first, then killed and recorded.
    let pid: i32 = std::fs::read_to_string(dir.join("slow.pid"))
        .expect("slow.pid")
        .trim()
        .parse()
        .expect("a pid");
    assert!(!pid_gone(pid), "the slow run's child should be alive");
    t.send(&["/", "s", "l", "o", "w", "Enter"]);
    t.wait_for("Jobs 1/3", Duration::from_secs(5));
    t.send(&["Tab"]); // History → Jobs: back to the table
    t.send(&["X"]);
    t.wait_for("Cancel slow?", Duration::from_secs(5));
    t.send(&["y"]);
    t.wait_for("cancelled by operator", Duration::from_secs(15));
    wait_until(
        "the cancelled run's process to be gone",
        Duration::from_secs(10),
        || pid_gone(pid),
    );
    let rows = cli(&dir, &["history", "--job", "slow", "--json"]);
    assert_eq!(rows.lines().count(), 1, "a cancel is never retried: {rows}");
    assert!(rows.contains("\"status\":\"failed\""), "{rows}");

    t.send(&["q"]);
    t.wait_for("EXITED:0", Duration::from_secs(40));
    drop(t);
}

/// Attached to a store no engine runs: the header says so, and a trigger shows as queued (in the
/// table and in `cronsole jobs`) because no owner takes it.
#[test]
fn attached_without_engine_shows_a_queued_trigger() {
    if !tmux_available() {
        return;
    }
    let dir = tempdir("queued");
    std::fs::write(
        dir.join("jobs.yaml"),
        "jobs:\n  - name: nightly\n    schedule: \"0 3 * * *\"\n    command: \"echo hi\"\n",
    )
    .expect("write jobs file");
    cli(&dir, &["apply", "jobs.yaml"]);
    let bin = env!("CARGO_BIN_EXE_cronsole");
    let cmd = format!("{bin} --store store console --attach; echo EXITED:$?; sleep 120");
    let t = Tmux::start("queued", 120, 40, &dir, &cmd);
    t.wait_for("NO ENGINE", Duration::from_secs(30));
    t.send(&["t"]);
    t.wait_for("Trigger nightly now?", Duration::from_secs(5));
    t.send(&["y"]);
    // The notice says no engine is running (as `cronsole trigger` does); the table marks it.
    // (The spend line says so too, from the start: the notice itself is waited for.)
    let screen = t.wait_for("triggered nightly: queued", Duration::from_secs(10));
    assert!(
        screen
            .lines()
            .any(|l| l.contains("triggered nightly: queued") && l.contains("no engine is running")),
        "{screen}"
    );
    let screen = t.wait_for("… nightly", Duration::from_secs(10));
    assert!(screen.contains("queued"), "{screen}");
    let jobs = cli(&dir, &["jobs"]);
    assert!(
        jobs.lines()
            .any(|l| l.starts_with("nightly") && l.contains("queued")),
        "{jobs}"
    );
    t.send(&["q"]);
    t.wait_for("EXITED:0", Duration::from_secs(20));
    drop(t);
}

/// In the console, `D` shows `cronsole dry-run` of the selected job
/// (the gate really runs, nothing is recorded), `P` pauses the jobs the filter shows after a
/// y/n prompt, and another process reading the store agrees.
#[test]
fn dry_run_key_and_pausing_the_filtered_set() {
    if !tmux_available() {
        return;
    }
    let dir = tempdir("dry-pause");
    std::fs::write(
        dir.join("jobs.yaml"),
        r#"
defaults:
  run_immediately: true
jobs:
  - name: report-a
    schedule: every 1h
    pre_run: "echo gate-said-go"
    command: "echo report-a-ran"
  - name: report-b
    schedule: every 1h
    command: "echo b"
  - name: other
    schedule: every 1h
    command: "echo other"
"#,
    )
    .expect("write jobs file");
    let bin = env!("CARGO_BIN_EXE_cronsole");
    let cmd = format!("{bin} --jobs jobs.yaml --store store console; echo EXITED:$?; sleep 120");
    let t = Tmux::start("dry-pause", 120, 40, &dir, &cmd);
    t.wait_for("Jobs 3/3", Duration::from_secs(30));
    wait_until("the first runs", Duration::from_secs(20), || {
        succeeded_runs(&dir, "report-a") >= 1
    });
    let rows_before = cli(&dir, &["history", "--json"]);

    // `other` sorts first: move to report-a, then D.
    t.send(&["j", "D"]);
    let screen = t.wait_for("command: echo report-a-ran", Duration::from_secs(20));
    assert!(screen.contains("Dry run of report-a"), "{screen}");
    assert!(screen.contains("gate:"), "{screen}");
    t.send(&["Escape"]);
    t.wait_for("Jobs 3/3", Duration::from_secs(5));
    assert_eq!(
        cli(&dir, &["history", "--json"]),
        rows_before,
        "a dry run records nothing"
    );

    // Filter to report-*, pause the shown set.
    t.send(&["/", "r", "e", "p", "Enter"]);
    t.wait_for("Jobs 2/3", Duration::from_secs(5));
    t.send(&["P"]);
    t.wait_for("Pause 2 job(s) the filters show", Duration::from_secs(5));
    t.send(&["y"]);
    wait_until("both report jobs paused", Duration::from_secs(10), || {
        let jobs: serde_json::Value =
            serde_json::from_str(&cli(&dir, &["jobs", "--json"])).unwrap_or_default();
        let paused = |n: &str| {
            jobs.as_array()
                .and_then(|a| a.iter().find(|j| j["name"] == n))
                .is_some_and(|j| j["paused"] == true)
        };
        paused("report-a") && paused("report-b") && !paused("other")
    });
    // Once the console shows them paused, P offers to resume them.
    t.wait_for("‖ report-a", Duration::from_secs(10));
    t.wait_for("‖ report-b", Duration::from_secs(10));
    t.send(&["P"]);
    t.wait_for("Resume 2 job(s) the filters show", Duration::from_secs(5));
    t.send(&["n"]);
    t.send(&["q"]);
    t.wait_for("EXITED:0", Duration::from_secs(40));
    drop(t);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The History cursor stays on its run while new rows arrive every second: the run named under
/// the rows (the selected row's detail) is the same after several new rows were drawn above it.
#[test]
fn the_history_cursor_stays_on_its_run_while_rows_arrive() {
    if !tmux_available() {
        return;
    }
    let dir = tempdir("anchor");
    std::fs::write(
        dir.join("jobs.yaml"),
        "jobs:\n  - name: tick\n    schedule: every 1s\n    command: \"echo tick-$(date +%s%N)\"\n",
    )
    .expect("write jobs file");
    let bin = env!("CARGO_BIN_EXE_cronsole");
    let cmd = format!("{bin} --jobs jobs.yaml --store store console; echo EXITED:$?; sleep 120");
    let t = Tmux::start("anchor", 120, 40, &dir, &cmd);
    t.wait_for("Jobs 1/1", Duration::from_secs(30));
    let rows = |d: &Path| cli(d, &["history", "--json"]).lines().count();
    wait_until("five rows", Duration::from_secs(30), || rows(&dir) >= 5);
    // Keys are handled in order: once the help that follows the moves is up, they are done.
    t.send(&["Tab", "Tab", "j", "j", "j", "?"]);
    t.wait_for("Help (? or Esc closes)", Duration::from_secs(5));
    t.send(&["Escape"]);
    let screen = t.wait_until_screen(Duration::from_secs(5), |s| {
        s.contains("── tick succeeded run ") && !s.contains("Help (? or Esc closes)")
    });
    let picked = screen
        .lines()
        .find_map(|l| l.split("── tick succeeded run ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the selected run's id")
        .to_string();
    // Three more rows are written, and the console has drawn the newest of them.
    let before = rows(&dir);
    wait_until("three more rows", Duration::from_secs(30), || {
        rows(&dir) >= before + 3
    });
    let newest = cli(&dir, &["history", "--json", "--limit", "1"]);
    let newest: serde_json::Value = serde_json::from_str(newest.trim()).expect("a row");
    let result = newest["result"]
        .as_str()
        .expect("a result")
        .trim()
        .to_string();
    let screen = t.wait_for(&result, Duration::from_secs(10));
    assert!(
        screen.contains(&format!("── tick succeeded run {picked}")),
        "the cursor left run {picked}:\n{screen}"
    );
    t.send(&["q"]);
    t.wait_for("EXITED:0", Duration::from_secs(40));
    drop(t);
}

/// At 80×24, on a real terminal: a job whose limit cannot pay for one call is named in the
/// header as "budget too small for one call" (not `BUDGET REACHED`), and the footer, built to
/// the width, still ends with `? help` and `q quit` while the alert line takes its room.
#[test]
fn at_80_columns_the_header_names_a_budget_too_small_and_the_footer_keeps_help_and_quit() {
    if !tmux_available() {
        return;
    }
    let dir = tempdir("narrow");
    std::fs::write(
        dir.join("jobs.yaml"),
        "agents:\n  a:\n    provider: openai\n    base_url: http://127.0.0.1:9/v1\n    \
         api_key_env: NARROW_KEY\n    model: gpt-4o-mini\n\
         jobs:\n  - name: tiny\n    schedule: every 1h\n    run_immediately: true\n    \
         agent: a\n    message: hi\n    max_cost_usd: 0.002\n  \
         - name: tick\n    schedule: every 1s\n    command: \"echo tick\"\n",
    )
    .expect("write jobs file");
    let bin = env!("CARGO_BIN_EXE_cronsole");
    let cmd = format!(
        "NARROW_KEY=sk-narrow {bin} --jobs jobs.yaml --store store console; echo EXITED:$?; sleep 120"
    );
    let t = Tmux::start("narrow", 80, 24, &dir, &cmd);
    let screen = t.wait_for(
        "tiny: budget too small for one call",
        Duration::from_secs(30),
    );
    assert!(!screen.contains("BUDGET REACHED"), "{screen}");
    // The header names the stop from the definition, possibly before the skipped row is written.
    let mut skipped = String::new();
    let written = poll_until(Duration::from_secs(30), || {
        skipped = cli(&dir, &["history", "--job", "tiny", "--json"]);
        skipped.contains("budget too small for one call: it may cost up to")
    });
    assert!(written, "{skipped}");
    let footer = |s: &str| s.lines().last().unwrap_or("").trim_end().to_string();
    // The screen is read again until a whole frame is drawn (a capture may catch one mid-draw).
    let mut shown = screen;
    let whole = poll_until(Duration::from_secs(10), || {
        shown = t.capture();
        footer(&shown).ends_with("? help q quit")
    });
    assert!(whole, "{shown}");
    // Every pane in turn: the footer changes its hints, never losing help and quit.
    for _ in 0..3 {
        t.send(&["Tab"]);
        let s = t.capture();
        assert!(footer(&s).ends_with("? help q quit"), "{s}");
        assert!(s.lines().all(|l| l.chars().count() <= 80), "{s}");
    }
    t.send(&["q"]);
    t.wait_for("EXITED:0", Duration::from_secs(40));
    drop(t);
}

/// At 80×24, on a real terminal: an agent whose key variable is unset is named in the header
/// as soon as the console opens, and stays there while keys are pressed (the notice line is
/// gone at the first key; the header alert lasts while the condition holds).
#[test]
fn at_80_columns_an_unset_agent_key_stays_in_the_header() {
    if !tmux_available() {
        return;
    }
    let dir = tempdir("nokey");
    std::fs::write(
        dir.join("jobs.yaml"),
        "agents:\n  writer:\n    provider: openai\n    base_url: http://127.0.0.1:9/v1\n    \
         api_key_env: WRITER_KEY\n    model: gpt-4o-mini\n\
         jobs:\n  - name: news\n    schedule: every 1h\n    agent: writer\n    message: hi\n  \
         - name: tick\n    schedule: every 1s\n    command: \"echo tick\"\n",
    )
    .expect("write jobs file");
    let bin = env!("CARGO_BIN_EXE_cronsole");
    let cmd = format!(
        "env -u WRITER_KEY {bin} --jobs jobs.yaml --store store console; echo EXITED:$?; sleep 120"
    );
    let t = Tmux::start("nokey", 80, 24, &dir, &cmd);
    // At 80 columns the alert takes its short words so the store stays on the line.
    let alert = ["writer: WRITER_KEY unset", "runs will fail", "store store"];
    let header = |s: &str| s.lines().next().unwrap_or("").to_string();
    let screen = t.wait_until_screen(Duration::from_secs(30), |s| {
        alert.iter().all(|a| header(s).contains(a))
    });
    assert!(screen.lines().all(|l| l.chars().count() <= 80), "{screen}");
    // Keys (the first clears the notice line): a pane change, a move and a name filter, seen
    // applied in the Jobs title; the alert stays.
    t.send(&["Tab"]);
    t.send(&["j"]);
    t.send(&["Tab"]);
    t.send(&["/", "t", "i", "c", "Enter"]);
    t.wait_until_screen(Duration::from_secs(10), |s| {
        s.contains("/tic") && alert.iter().all(|a| header(s).contains(a))
    });
    // Runs of the other job keep coming while the header holds the alert.
    t.wait_until_screen(Duration::from_secs(20), |s| {
        s.contains("succeeded tick") && alert.iter().all(|a| header(s).contains(a))
    });
    t.send(&["q"]);
    t.wait_for("EXITED:0", Duration::from_secs(40));
    drop(t);
}

//! End-to-end console test: the real binary inside `tmux`, driven by `send-keys` and read with
//! `capture-pane -p` (SPEC §13.1). Skipped with a message when `tmux` is missing, except under
//! `CI=true`, where a missing `tmux` is a failure.
//!
//! The [`Tmux`] helper is tested on its own; the console test itself needs the engine and the
//! file store, so it is `#[ignore]`d until they are merged (run it with `--ignored`).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// One detached tmux session, killed on drop.
struct Tmux {
    name: String,
}

fn tmux_available() -> bool {
    let ok = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "tmux is required under CI=true"
        );
        eprintln!("skipping: tmux is not installed");
    }
    ok
}

impl Tmux {
    /// Start `cmd` (run by the shell) in a new detached `w`×`h` session in `dir`.
    fn start(tag: &str, w: u16, h: u16, dir: &Path, cmd: &str) -> Tmux {
        let name = format!("cronsole-test-{tag}-{}", std::process::id());
        let (w, h) = (w.to_string(), h.to_string());
        let st = Command::new("tmux")
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
        let out = Command::new("tmux").args(args).output().expect("run tmux");
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
        let end = Instant::now() + timeout;
        loop {
            let screen = self.capture();
            if screen.contains(text) {
                return screen;
            }
            assert!(
                Instant::now() < end,
                "timed out waiting for {text:?}; screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.name])
            .output();
    }
}

fn tempdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("cronsole-tmux-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
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
    let _ = std::fs::remove_dir_all(&dir);
}

const JOBS: &str = r#"
jobs:
  - name: tick
    schedule: every 1h
    command: "echo hi"
  - name: nightly
    schedule: "0 3 * * *"
    command: "echo night"
"#;

#[test]
#[ignore = "needs the engine and the file store (the integrator enables it after merging)"]
fn console_draws_answers_keys_and_restores_the_terminal() {
    if !tmux_available() {
        return;
    }
    let dir = tempdir("console");
    std::fs::write(dir.join("jobs.yaml"), JOBS).expect("write jobs file");
    let bin = env!("CARGO_BIN_EXE_cronsole");
    let cmd = format!("{bin} --jobs jobs.yaml --store store console; echo EXITED:$?");
    let t = Tmux::start("console", 120, 40, &dir, &cmd);
    let screen = t.wait_for("Jobs 2/2", Duration::from_secs(20));
    assert!(
        screen.contains("tick") && screen.contains("nightly"),
        "{screen}"
    );
    // Help is built from the keymap.
    t.send(&["?"]);
    t.wait_for("Help (? or Esc closes)", Duration::from_secs(5));
    t.send(&["Escape"]);
    // Pause the first job (nightly, by name order): confirmed by the store, marked paused.
    t.send(&["p"]);
    t.wait_for("‖ nightly", Duration::from_secs(10));
    // Name filter.
    t.send(&["/", "t", "i", "c", "Enter"]);
    t.wait_for("Jobs 1/2", Duration::from_secs(5));
    // Too small, then back.
    t.tmux(&["resize-window", "-t", &t.name, "-x", "60", "-y", "20"]);
    t.wait_for("terminal too small", Duration::from_secs(5));
    t.tmux(&["resize-window", "-t", &t.name, "-x", "120", "-y", "40"]);
    t.wait_for("Jobs 1/2", Duration::from_secs(5));
    t.send(&["q"]);
    let screen = t.wait_for("EXITED:0", Duration::from_secs(10));
    // The alternate screen is gone: the console's frame is not left behind.
    assert!(!screen.contains("Jobs 1/2"), "{screen}");
    drop(t);
    let _ = std::fs::remove_dir_all(&dir);
}

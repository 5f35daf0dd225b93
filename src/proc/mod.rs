//! Running operator shell commands (`pre_run`, a monitor's `command`, the `command` action) with
//! bounded resources, and the machinery that guarantees nothing they start outlives them.
//!
//! Owns: spawning `sh -c CMD` (or, without shell syntax, the program itself: [`plain_argv`])
//! with stdin closed — through the per-run supervisor ([`supervisor`]: a fork of the owner's
//! [`zygote`], else an exec of `__supervise`) when the binary enabled it, else directly in its
//! own process group —
//! capturing stdout and stderr with caps enforced *while reading* (memory never grows with the
//! output), the timeout, the environment a command sees, and stopping the command's tree. Must
//! not touch: the store, history, prompts — callers turn a [`ProcOutput`] into a gate outcome or
//! a run result.
//!
//! Decisions:
//! - Nothing a command starts outlives it. Supervised (the binary): the supervisor kills every
//!   descendant — `setsid` escapees and double forks included — when the shell exits, when the
//!   owner closes the life-line (timeout, hard cap, cancellation) and when the owner process dies
//!   (`kill -9`); with [`ProcEnv::stall_limit`] set (the engine sets half the lease) also when the owner
//!   stops sending heartbeats (SIGSTOP). Unsupervised (library tests, embedders): when the shell
//!   exits, whatever is left in its process group is killed with SIGKILL before the pipes are
//!   drained; a process that calls `setsid` leaves the group and is out of reach.
//! - Cancellation-safe: dropping the future closes the life-line (supervised) or SIGKILLs the
//!   group through a `GroupGuard` (unsupervised).
//! - Exit code: the shell's code; `128 + N` when it was killed by signal N (shell convention);
//!   [`TIMEOUT_EXIT_CODE`] (124, like `timeout(1)`) on timeout; 127 when the supervisor could not
//!   start the shell, 125 when it killed the run for lack of heartbeats (a command that ended by
//!   itself before that kill landed keeps its own code: it completed); 137 with
//!   `SUPERVISOR_DIED` appended to stderr when the zygote's supervisor was killed before it
//!   could report (the zygote kills what the run left), `SUPERVISOR_DIED_FALLBACK` when a
//!   `__supervise` exec was (this process kills its process group and, as the subreaper of its
//!   supervisors with the zygote off, what was re-parented to it).
//! - The zygote: a request it does not answer within 0.5 s (`ZYGOTE_ANSWER`) makes the run look
//!   at it as often again; a stopped zygote (`SIGSTOP`) is logged, killed and replaced (the
//!   request queued on its socket dies with it, so it cannot start later beside the resent
//!   one). A zygote that is running but silent is waited for up to the command's timeout.
//! - A *soft* cap keeps the first bytes and discards the rest while still draining the pipe (so
//!   the writer never blocks); a *hard* cap stops the whole tree as soon as it is exceeded.
//! - `/bin/sh` by absolute path, so a job does not depend on cronsole's `PATH` to find a shell.
//! - Environment: cronsole's own, minus every API-key variable ([`ProcEnv::scrub`]: each configured
//!   agent's `api_key_env` and `STANDARD_KEY_VARS`) unless the job's `env_passthrough` names it,
//!   so a `pre_run` that prints `env` cannot put a key into a prompt or a history row.
//!
//! - Where and how a command runs (working directory, scrubbed variables, dead-man switch) is a
//!   [`ProcEnv`] the caller passes with every [`run`]: the run pipeline builds one per run, a
//!   command outside any job gets [`ProcEnv::default`]. No task-local or global carries it; the
//!   one process-wide setting is [`use_supervisor`] (which executable supervises, fixed once at
//!   start by the binary, the same for every command).
//!
//! Testing note for callers: the timeout is a tokio timer. Under paused tokio time
//! (`start_paused = true`) the runtime auto-advances to the next timer whenever it is idle,
//! which includes "waiting for a real child process" — so a paused-time test that runs a real
//! command would see it time out at once. Tests that spawn real processes use real time; tests
//! of the timeout *path* can rely on exactly that auto-advance.
//!
//! One file per part. The owner's side: `spec` (what a run is given and gives back), `client`
//! (a run through the zygote), `exec` (a run through an exec of `__supervise`), `direct` (no
//! supervisor), `capture` (bounded reading of a run's pipes and its result), `lifeline` (the
//! owner's end of a run's life-line), `attach` (a long-lived child talked to over its pipes),
//! `setup` (the process-wide choice of supervisor). The other
//! side: [`supervisor`], [`zygote`], [`fdpass`] (the request and status wire format), [`tree`]
//! (the process-tree walk and kills). `sys` holds every raw `libc` call, and the only `unsafe`.
//! Each owner-side path first *starts* the run (its output pipes and its life-line come back)
//! and then *collects* it (bounded capture until exit or timeout): a long-lived child that
//! talks over its pipes takes the start half, with its stdin added to the descriptors handed
//! down.

pub mod alive;
pub mod attach;
mod capture;
mod client;
mod direct;
mod exec;
pub mod fdpass;
mod lifeline;
mod setup;
mod spec;
pub mod supervisor;
pub(crate) mod sys;
pub mod tree;
pub mod zygote;

#[cfg(any(test, feature = "testkit"))]
pub use client::zygote_pid;
#[cfg(any(test, feature = "testkit"))]
pub use setup::supervised;
pub use setup::{disable_zygote, use_supervisor};
pub use spec::{Cap, ProcEnv, ProcError, ProcOutput, ProcSpec, TIMEOUT_EXIT_CODE};
pub(crate) use spec::{STANDARD_KEY_VARS, scrub_list};

/// Run `spec.command` under `/bin/sh -c` within `spec`'s bounds, stdin closed, in `env`'s
/// working directory with `env`'s API-key variables removed from its environment.
///
/// With a supervisor ([`use_supervisor`]) the command's whole tree — `setsid` escapees included
/// — is killed when the command exits, times out or the owner dies. Without one, it runs in its
/// own process group, which is killed in the same cases (escapees excepted).
///
/// Cancellation-safe: dropping the returned future kills the command's tree (its group without
/// a supervisor).
pub async fn run(spec: &ProcSpec<'_>, env: &ProcEnv) -> Result<ProcOutput, ProcError> {
    let shell = ["/bin/sh", "-c", spec.command];
    match setup::supervisor_exe() {
        // A command that needs no shell is executed directly (one exec fewer per run, which is
        // most of a burst's cost); the supervisor reports "could not start" as exit 127, as
        // `sh` would for a missing program.
        Some(exe) => {
            let argv = plain_argv(spec.command);
            let argv = argv.as_deref().unwrap_or(&shell);
            // Through the owner's zygote (a fork per run); through an exec of `__supervise`
            // when the zygote cannot take the request.
            let zygote = setup::zygote_enabled();
            let via_zygote = if zygote {
                client::run(exe, spec, argv, env).await
            } else {
                None
            };
            match via_zygote {
                Some(out) => out,
                None => exec::run(exe, spec, argv, env).await,
            }
        }
        None => direct::run(spec, &shell, env).await,
    }
}

/// Shell builtins and reserved words: a command starting with one needs the shell even when it
/// has no metacharacter (`exit 3`, `cd dir`), or would behave differently as a program
/// (`echo -e`, `pwd` with a symlinked directory). `true`/`false` are not listed: the programs
/// and the builtins agree.
const SHELL_WORDS: &[&str] = &[
    "!", ".", ":", "[", "alias", "bg", "break", "case", "cd", "command", "continue", "do", "done",
    "echo", "elif", "else", "esac", "eval", "exec", "exit", "export", "fc", "fg", "fi", "for",
    "function", "getopts", "hash", "if", "in", "jobs", "kill", "local", "printf", "pwd", "read",
    "readonly", "return", "select", "set", "shift", "source", "test", "then", "time", "times",
    "trap", "type", "ulimit", "umask", "unalias", "unset", "until", "wait", "while",
];

/// The argument vector of a command that `sh -c` would run as one plain program with literal
/// arguments: only `[A-Za-z0-9_./,:+@-]` and blanks, not starting with a builtin or reserved
/// word. `None` means "needs the shell" (quotes, `$`, globs, `~`, `=`, redirections, pipes, …).
pub fn plain_argv(command: &str) -> Option<Vec<&str>> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_./,:+@-".contains(c);
    if !command.chars().all(|c| plain(c) || c == ' ' || c == '\t') {
        return None;
    }
    let argv: Vec<&str> = command
        .split([' ', '\t'])
        .filter(|w| !w.is_empty())
        .collect();
    let first = argv.first()?;
    if SHELL_WORDS.contains(first) {
        return None;
    }
    Some(argv)
}

/// Cut `s` to at most `max` characters (no marker). Returns whether anything was cut.
pub(crate) fn cut_chars(s: &str, max: usize) -> (&str, bool) {
    match s.char_indices().nth(max) {
        None => (s, false),
        Some((idx, _)) => (&s[..idx], true),
    }
}

/// Bytes to keep while reading so that `chars` characters of UTF-8 survive decoding.
pub(crate) fn bytes_for_chars(chars: usize) -> usize {
    chars.saturating_mul(4)
}

/// Restore the default action of SIGPIPE: a command-line tool whose reader went away (`| head`)
/// ends quietly instead of failing on every write.
pub fn restore_default_sigpipe() {
    sys::default_sigpipe();
}

/// Held by tests that start processes and kill what they find under this process, so that they
/// never take another test's children with them.
#[cfg(test)]
static TEST_CHILDREN: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn commands_run_in_the_given_working_directory() {
        let tmp = crate::testkit::tmp::TempDir::new("workdir");
        let dir = std::fs::canonicalize(&tmp).unwrap();
        let spec = ProcSpec {
            command: "pwd",
            timeout: Duration::from_secs(10),
            stdout_cap: Cap::Soft(4096),
            stderr_cap: Cap::Soft(4096),
        };
        let env = ProcEnv {
            workdir: Some(dir.clone()),
            ..ProcEnv::default()
        };
        let inside = run(&spec, &env).await.unwrap();
        assert_eq!(inside.stdout_lossy().trim(), dir.to_string_lossy());
        let outside = run(&spec, &ProcEnv::default()).await.unwrap();
        let here = std::env::current_dir().unwrap();
        assert_eq!(outside.stdout_lossy().trim(), here.to_string_lossy());
    }

    #[test]
    fn cut_chars_respects_char_boundaries() {
        assert_eq!(cut_chars("héllo", 2), ("hé", true));
        assert_eq!(cut_chars("hé", 2), ("hé", false));
        assert_eq!(cut_chars("", 0), ("", false));
    }

    #[tokio::test(start_paused = true)]
    async fn timeout_path_under_paused_time_kills_and_reports_124() {
        // Paused time auto-advances while we wait on the real child: the 1-hour timeout fires
        // at once, deterministically, and the group is killed.
        let started = std::time::Instant::now();
        let out = run(
            &ProcSpec {
                command: "echo before; sleep 600",
                timeout: Duration::from_secs(3600),
                stdout_cap: Cap::Soft(100),
                stderr_cap: Cap::Soft(100),
            },
            &ProcEnv::default(),
        )
        .await
        .expect("spawn sh");
        assert!(out.timed_out);
        assert_eq!(out.exit_code, TIMEOUT_EXIT_CODE);
        assert!(!out.success());
        assert!(started.elapsed() < std::time::Duration::from_secs(60));
    }

    #[test]
    fn the_scrub_list_removes_every_key_variable_but_the_passed_through_ones() {
        let v = scrub_list(
            ["MY_KEY", "OPENAI_API_KEY", ""],
            &["ANTHROPIC_API_KEY".to_string()],
        );
        assert_eq!(v, vec!["MY_KEY".to_string(), "OPENAI_API_KEY".to_string()]);
        assert_eq!(
            scrub_list([], &[]),
            vec![
                "ANTHROPIC_API_KEY".to_string(),
                "OPENAI_API_KEY".to_string()
            ]
        );
    }

    #[tokio::test]
    async fn scrubbed_variables_never_reach_the_command() {
        // A variable of this test alone (the standard key names are checked through the real
        // binary in tests/run_process.rs, without touching this process's environment).
        // No other test reads or writes this variable.
        sys::set_env_var("CRONSOLE_PROC_TEST_KEY", "sk-proc-test-value");
        let spec = ProcSpec {
            command: "env",
            timeout: Duration::from_secs(10),
            stdout_cap: Cap::Soft(1 << 20),
            stderr_cap: Cap::Soft(4096),
        };
        let env = |scrub| ProcEnv {
            scrub,
            ..ProcEnv::default()
        };
        let scrubbed = run(&spec, &env(scrub_list(["CRONSOLE_PROC_TEST_KEY"], &[])))
            .await
            .unwrap();
        assert!(scrubbed.success());
        assert!(!scrubbed.stdout_lossy().contains("sk-proc-test-value"));
        assert!(scrubbed.stdout_lossy().contains("PATH="));
        let passed = run(
            &spec,
            &env(scrub_list(
                ["CRONSOLE_PROC_TEST_KEY"],
                &["CRONSOLE_PROC_TEST_KEY".into()],
            )),
        )
        .await
        .unwrap();
        assert!(passed.stdout_lossy().contains("sk-proc-test-value"));
    }

    #[test]
    fn only_commands_without_shell_syntax_skip_the_shell() {
        assert_eq!(plain_argv("true"), Some(vec!["true"]));
        assert_eq!(plain_argv("  sleep\t0.5 "), Some(vec!["sleep", "0.5"]));
        assert_eq!(
            plain_argv("/usr/bin/curl -fsS https://example.com/a,b"),
            Some(vec!["/usr/bin/curl", "-fsS", "https://example.com/a,b"])
        );
        for needs_shell in [
            "",
            "   ",
            "echo $HOME",
            "echo 'a b'",
            "echo \"a\"",
            "ls *.txt",
            "cat ~/x",
            "X=1 env",
            "a | b",
            "a; b",
            "a && b",
            "a > f",
            "sleep 1 &",
            "echo a\\ b",
            "exit 3",
            "cd /tmp",
            "export X",
            "echo -e x",
            "pwd",
            "if true",
            "echo `id`",
            "echo é",
            "a\nb",
        ] {
            assert_eq!(plain_argv(needs_shell), None, "{needs_shell:?}");
        }
    }
}

//! A long-lived child the owner talks to over its pipes: a stdio MCP server, or a command tool
//! that reads its arguments on stdin. It starts like any run (through the zygote's
//! supervisor, or directly in its own process group without one), with its stdin added to the
//! descriptors handed down, and it lives until its [`Life`] is dropped: then its whole tree is
//! killed, as it is when the owner dies (`kill -9` included) or stops beating (`stall_limit`).
//!
//! Owns: the owner's side of such a child (its pipes, its life-line and heartbeat, its exit
//! code). Must not touch: what is said over the pipes (the caller's protocol), output bounds
//! (the caller reads).
//!
//! Decision: a supervised attached child needs the zygote (the descriptors ride on its
//! request); when the zygote cannot take the request (`CRONSOLE_ZYGOTE=off`, a request over
//! its size cap) the start fails with a message saying so, rather than running the child
//! outside the supervisor.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::UnixStream;

use super::client::{self, Start, Started};
use super::direct::GroupGuard;
use super::fdpass::parse_status;
use super::lifeline::Lifeline;
use super::setup;
use super::spec::{ProcEnv, ProcError, base_command};

/// A started child: its three pipes and its life.
pub struct Attached {
    /// Its stdin (close it to send end of file).
    pub stdin: Box<dyn AsyncWrite + Send + Unpin>,
    /// Its stdout.
    pub stdout: Box<dyn AsyncRead + Send + Unpin>,
    /// Its stderr.
    pub stderr: Box<dyn AsyncRead + Send + Unpin>,
    /// Dropping it ends the child's whole tree.
    pub life: Life,
}

/// The child's life: dropped, its whole tree is killed.
pub struct Life {
    inner: Inner,
}

enum Inner {
    Supervised {
        lifeline: Arc<Lifeline>,
        beat: tokio::task::JoinHandle<()>,
        ctl: UnixStream,
        status: Vec<u8>,
    },
    Direct {
        child: tokio::process::Child,
        guard: GroupGuard,
    },
}

impl Life {
    /// Waits for the child to end: its exit code (`128 + N` when signal N ended it; `None`
    /// when its supervisor died without saying).
    pub async fn wait(&mut self) -> Option<i32> {
        match &mut self.inner {
            Inner::Supervised { ctl, status, .. } => {
                client::read_status(ctl, status).await;
                parse_status(status).1
            }
            Inner::Direct { child, guard } => {
                let st = child.wait().await.ok()?;
                // The child is gone: clear out what it left in its group.
                guard.kill();
                use std::os::unix::process::ExitStatusExt;
                st.code().or_else(|| st.signal().map(|s| 128 + s))
            }
        }
    }

    /// Ends the child's whole tree now (dropping does the same).
    pub fn kill(&self) {
        match &self.inner {
            Inner::Supervised { lifeline, beat, .. } => {
                beat.abort();
                lifeline.cut();
            }
            Inner::Direct { guard, .. } => guard.kill(),
        }
    }
}

impl Drop for Life {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts `argv` (no shell) with `env`, its stdin a pipe, within `start_within`.
pub async fn attach(
    argv: &[&str],
    env: &ProcEnv,
    start_within: Duration,
) -> Result<Attached, ProcError> {
    let what = argv.join(" ");
    let Some(program) = argv.first() else {
        return Err(ProcError::Spawn {
            command: what,
            source: std::io::Error::other("nothing to run"),
        });
    };
    let Some(exe) = setup::supervisor_exe() else {
        return direct(program, &argv[1..], env, &what);
    };
    if !setup::zygote_enabled() {
        return Err(ProcError::Spawn {
            command: what,
            source: std::io::Error::other(
                "the run zygote is off (CRONSOLE_ZYGOTE=off), and a child that talks over its \
                 pipes starts only through it",
            ),
        });
    }
    let deadline = tokio::time::Instant::now() + start_within;
    let started = match client::start(exe, &what, argv, env, deadline, true).await {
        Start::Running(s) => s,
        Start::Failed(e) => return Err(e),
        Start::NotTaken => {
            return Err(ProcError::Spawn {
                command: what,
                source: std::io::Error::other(
                    "the run zygote cannot take it (a child that talks over its pipes starts \
                     only through the zygote)",
                ),
            });
        }
        Start::TimedOut => {
            return Err(ProcError::Spawn {
                command: what,
                source: std::io::Error::other(format!(
                    "not started within {}s",
                    start_within.as_secs_f64()
                )),
            });
        }
    };
    let Started {
        ctl,
        status,
        lifeline,
        stdout,
        stderr,
        stdin,
    } = started;
    let Some(stdin) = stdin else {
        return Err(ProcError::Spawn {
            command: what,
            source: std::io::Error::other("no stdin pipe"),
        });
    };
    let lifeline = Arc::new(lifeline);
    let beating = lifeline.clone();
    let stall = env.stall_limit;
    let beat = tokio::spawn(async move { beating.beat_every(stall).await });
    Ok(Attached {
        stdin: Box::new(stdin),
        stdout: Box::new(stdout),
        stderr: Box::new(stderr),
        life: Life {
            inner: Inner::Supervised {
                lifeline,
                beat,
                ctl,
                status,
            },
        },
    })
}

/// Without a supervisor (library tests, embedders): in its own process group, killed with it.
fn direct(program: &str, args: &[&str], env: &ProcEnv, what: &str) -> Result<Attached, ProcError> {
    let args: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
    let mut cmd = base_command(std::ffi::OsStr::new(program), &args, env);
    cmd.stdin(std::process::Stdio::piped()).kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|source| ProcError::Spawn {
        command: what.to_string(),
        source,
    })?;
    let pgid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(ProcError::Spawn {
            command: what.to_string(),
            source: std::io::Error::other("its pipes could not be made"),
        });
    };
    Ok(Attached {
        stdin: Box::new(stdin),
        stdout: Box::new(stdout),
        stderr: Box::new(stderr),
        life: Life {
            inner: Inner::Direct {
                child,
                guard: GroupGuard::new(pgid),
            },
        },
    })
}

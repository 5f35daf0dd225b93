//! The operator's command tools (top-level `tools:`) as one [`ToolSource`] named `tools`.
//!
//! Owns: running one call — the tool's argv (or `sh -c SCRIPT`) under the supervisor like any
//! command of a run (its own process group, killed on timeout, with the run and with the
//! owner), the model's arguments as JSON on its stdin and in `CRONSOLE_TOOL_ARGS`, never in
//! the command line; its output read within a bound; a non-zero exit is an error result.
//! Must not touch: the allowlist, the transcript, the store.
//!
//! Decisions an operator can rely on:
//! - Working directory: the jobs file's. Environment: PATH, HOME, LANG and TZ (when cronsole
//!   has them), the tool's `env` and `env_from`, and `CRONSOLE_TOOL_ARGS`; nothing else (no
//!   provider key can reach it).
//! - Arguments over [`MAX_ARGS_BYTES`] (the kernel's bound of one environment string) are an
//!   error result, never a truncated argument.
//! - The result is stdout, then stderr when there is any (`stderr:` on a line of its own),
//!   read up to [`MAX_READ_BYTES`] each (the rest drained and dropped, and said so); the tool
//!   loop bounds what the model sees. Every byte is counted and hashed as it streams, so a cut
//!   output's recorded size and sha256 are still those of all it wrote ([`Whole`]). A timeout
//!   kills the tool's tree and is an error result naming it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use sha2::{Digest, Sha256};

use super::{BoxFuture, Content, ToolDef, ToolError, ToolOutput, ToolSource, Whole};
use crate::model::{CommandToolDef, ToolCommand};
use crate::proc::ProcEnv;
use crate::text::Secrets;

/// The source name of the command tools.
pub const SOURCE: &str = "tools";
/// Largest arguments accepted: Linux's bound of one environment string (`MAX_ARG_STRLEN`) less
/// `CRONSOLE_TOOL_ARGS=` and its NUL.
pub const MAX_ARGS_BYTES: usize = 32 * 4096 - 20;
/// What is kept of each of a call's stdout and stderr.
pub const MAX_READ_BYTES: usize = 4 * 1024 * 1024;
/// What stands between stdout and stderr in a result.
const STDERR_SEPARATOR: &str = "\nstderr: ";

/// The allowed command tools of one run.
pub struct CommandSource {
    tools: BTreeMap<String, CommandToolDef>,
    /// The run's environment for a tool (directory, dead-man switch) and its variables.
    env: ProcEnv,
    /// Each tool's own variables (`env` and the values of `env_from`).
    vars: BTreeMap<String, Vec<(String, String)>>,
    secrets: Arc<Secrets>,
}

impl CommandSource {
    /// The tools `tools`; `env` is the run's [`ProcEnv`] reduced to the base variables (the
    /// toolbox reduces it), `vars` each tool's own.
    pub fn new(
        tools: BTreeMap<String, CommandToolDef>,
        env: ProcEnv,
        vars: BTreeMap<String, Vec<(String, String)>>,
        secrets: Arc<Secrets>,
    ) -> CommandSource {
        CommandSource {
            tools,
            env,
            vars,
            secrets,
        }
    }

    async fn run(
        &self,
        name: &str,
        args: Value,
        timeout: Duration,
    ) -> Result<ToolOutput, ToolError> {
        let Some(def) = self.tools.get(name) else {
            return Err(ToolError::Protocol {
                source_name: SOURCE.to_string(),
                why: format!("no command tool named {name}"),
            });
        };
        let json = args.to_string();
        if json.len() > MAX_ARGS_BYTES {
            return Ok(error_output(format!(
                "the arguments are {} bytes of JSON; a command tool takes at most {MAX_ARGS_BYTES}",
                json.len()
            )));
        }
        let timeout = def.timeout_seconds.map_or(timeout, |t| {
            // The config bounds it already; clamped so no value can panic the conversion.
            timeout.min(Duration::try_from_secs_f64(t.clamp(0.001, 1e9)).unwrap_or(timeout))
        });
        let mut env = self.env.clone();
        env.extra
            .extend(self.vars.get(name).cloned().unwrap_or_default());
        env.extra
            .push(("CRONSOLE_TOOL_ARGS".to_string(), json.clone()));
        let argv: Vec<&str> = match &def.command {
            ToolCommand::Argv { argv } => argv.iter().map(String::as_str).collect(),
            ToolCommand::Shell { script } => vec!["/bin/sh", "-c", script.as_str()],
        };
        let work = async {
            let mut child = crate::proc::attach::attach(&argv, &env, timeout)
                .await
                .map_err(|e| ToolError::Unreachable {
                    source_name: SOURCE.to_string(),
                    why: self.redact(&format!("{name}: {e}")),
                })?;
            let mut stdin = child.stdin;
            // A tool that never reads its stdin must not block the call: the write is
            // abandoned when the tool exits (broken pipe).
            let feed = async move {
                let _ = stdin.write_all(json.as_bytes()).await;
                let _ = stdin.shutdown().await;
            };
            let (_, out, err, code) = tokio::join!(
                feed,
                read_bounded(child.stdout),
                read_bounded(child.stderr),
                child.life.wait()
            );
            Ok::<_, ToolError>((out, err, code))
        };
        let (out, err, code) = match tokio::time::timeout(timeout, work).await {
            // Dropping the work dropped the child's life: its tree is killed.
            Err(_) => {
                return Ok(error_output(format!(
                    "{name} timed out after {}s (its process group was killed)",
                    timeout.as_secs_f64()
                )));
            }
            Ok(r) => r?,
        };
        let mut text = self.redact(&out.text());
        if !err.bytes.is_empty() {
            text.push_str(if text.is_empty() {
                &STDERR_SEPARATOR[1..]
            } else {
                STDERR_SEPARATOR
            });
            text.push_str(&self.redact(&err.text()));
        }
        // Measured whole only when a stream was cut: an output kept whole is measured by the
        // loop from its redacted text, so no record holds the hash of a bare secret.
        let whole = (out.cut || err.cut).then(|| whole_of(out, &err));
        let is_error = code != Some(0);
        if is_error {
            let how = code.map_or("ended without an exit code".to_string(), |c| {
                format!("exited with code {c}")
            });
            text = if text.is_empty() {
                format!("{name} {how}")
            } else {
                format!("{name} {how}\n{text}")
            };
        }
        Ok(ToolOutput {
            content: vec![Content::Text { text }],
            structured: None,
            is_error,
            whole,
        })
    }

    fn redact(&self, s: &str) -> String {
        self.secrets.redact(s).into_owned()
    }
}

/// What was read of one stream: its first [`MAX_READ_BYTES`], and its whole length and hash
/// (stdout's hash goes on with stderr's kept part: see [`whole_of`]).
struct Read {
    bytes: Vec<u8>,
    cut: bool,
    total: u64,
    hash: Sha256,
}

impl Default for Read {
    fn default() -> Read {
        Read {
            bytes: Vec::new(),
            cut: false,
            total: 0,
            hash: Sha256::new(),
        }
    }
}

impl Read {
    fn text(&self) -> String {
        let mut s = String::from_utf8_lossy(&self.bytes).into_owned();
        if self.cut {
            s.push_str(crate::action::command::TRUNCATED_MARKER);
        }
        s
    }
}

/// Reads to end of file, keeping the first [`MAX_READ_BYTES`] (the rest drained).
async fn read_bounded(mut r: Box<dyn AsyncRead + Send + Unpin>) -> Read {
    let mut out = Read::default();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return out,
            Ok(n) => {
                let room = MAX_READ_BYTES.saturating_sub(out.bytes.len());
                out.bytes.extend_from_slice(&buf[..n.min(room)]);
                out.cut |= n > room;
                out.total += n as u64;
                out.hash.update(&buf[..n]);
            }
        }
    }
}

/// The size and sha256 of what the tool wrote, laid out as the model's text lays it out (its
/// stdout, then `\nstderr: ` and its stderr when it wrote any), before any cut or redaction.
/// Stdout is hashed as it streams, whatever its length; stderr is appended from its kept part,
/// so past [`MAX_READ_BYTES`] of stderr the size still counts every byte but the hash covers
/// stderr's first [`MAX_READ_BYTES`].
fn whole_of(out: Read, err: &Read) -> Whole {
    let mut hash = out.hash;
    let mut bytes = out.total;
    if err.total > 0 {
        hash.update(STDERR_SEPARATOR.as_bytes());
        hash.update(&err.bytes);
        bytes += STDERR_SEPARATOR.len() as u64 + err.total;
    }
    Whole {
        bytes,
        sha256: hash.finalize().iter().map(|b| format!("{b:02x}")).collect(),
    }
}

fn error_output(text: String) -> ToolOutput {
    ToolOutput {
        content: vec![Content::Text { text }],
        structured: None,
        is_error: true,
        whole: None,
    }
}

impl ToolSource for CommandSource {
    fn name(&self) -> &str {
        SOURCE
    }

    fn protocol_version(&self) -> Option<String> {
        None
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<ToolDef>, ToolError>> {
        let defs = self
            .tools
            .values()
            .map(|t| ToolDef {
                name: t.name.clone(),
                description: t.description.clone(),
                input_schema: t.parameters.clone(),
                output_schema: None,
            })
            .collect();
        Box::pin(async move { Ok(defs) })
    }

    fn call<'a>(
        &'a self,
        tool: &'a str,
        args: Value,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(self.run(tool, args, timeout))
    }

    fn list_changed(&self) -> bool {
        false
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::sha256_hex;

    fn reader(bytes: Vec<u8>) -> Box<dyn AsyncRead + Send + Unpin> {
        Box::new(std::io::Cursor::new(bytes))
    }

    /// A stream over the bound is kept in part but counted and hashed whole, so the record
    /// says what the tool really wrote.
    #[tokio::test]
    async fn a_cut_output_is_measured_whole() {
        let stdout: Vec<u8> = (0..MAX_READ_BYTES + 1000)
            .map(|i| (i % 251) as u8)
            .collect();
        let out = read_bounded(reader(stdout.clone())).await;
        assert!(out.cut);
        assert_eq!(out.bytes.len(), MAX_READ_BYTES);
        assert_eq!(out.bytes[..], stdout[..MAX_READ_BYTES]);
        let err = read_bounded(reader(b"warning".to_vec())).await;
        let w = whole_of(out, &err);
        let mut all = stdout.clone();
        all.extend_from_slice(b"\nstderr: warning");
        assert_eq!(w.bytes, all.len() as u64);
        assert_eq!(w.sha256, sha256_hex(&all));
        // Without stderr: stdout alone.
        let out = read_bounded(reader(stdout.clone())).await;
        let w = whole_of(out, &Read::default());
        assert_eq!(
            (w.bytes, w.sha256),
            (stdout.len() as u64, sha256_hex(&stdout))
        );
    }
}

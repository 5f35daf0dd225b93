//! Building one run's [`Toolbox`] before its first model call ([`Sources`], the production
//! [`ToolboxBuilder`]).
//!
//! Owns: which sources a run needs (those its allowlist names), reading their secrets
//! (`env_from`, `headers_env`) from cronsole's environment, starting or reaching them (stdio
//! servers as children of the run under the supervisor, HTTP servers, the command tools),
//! listing their tools, and offering exactly the allowed ones that were listed, under the
//! names providers accept. Must not touch: the store (pinning compares against it elsewhere),
//! the model, the transcript.
//!
//! Decisions an operator can rely on:
//! - The allowlist is the job's own `tools:` when it has one, else its agent's.
//! - Offered = allowed ∩ listed, in the order of the jobs-file names. An allowed `server.tool`
//!   the server does not list, a source that cannot be started or reached, or a secret
//!   variable that is not set fails the run here, naming it; so does a server whose tools
//!   meet another offered tool on one provider name.
//! - A tool process gets PATH, HOME, LANG and TZ (when cronsole has them) and what its entry
//!   declares, nothing else: every other variable is removed, provider keys included.
//! - A source that fails to start closes every source already started (their processes end).
//! - The handshake and each listing are bounded by the agent's `tool_timeout_seconds`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncReadExt;

use super::command::CommandSource;
use super::mcp::{self, Era, McpSource, Session, Tail};
use super::{
    BoxFuture, OfferedTool, ToolError, ToolSource, Toolbox, ToolboxBuilder, ToolboxRequest,
};
use crate::model::{Action, McpServerDef, McpTransport, ToolPattern, wire_name};
use crate::proc::ProcEnv;
use crate::text::Secrets;

/// What opens the stderr clause of a failed session's reason.
const STDERR_CLAUSE: &str = " (its stderr: ";

/// How long a stdio server that failed its session's start is given to finish its stderr.
const STDERR_GRACE: Duration = Duration::from_secs(2);

/// The variables every tool process keeps from cronsole's environment.
pub const BASE_VARS: [&str; 4] = ["PATH", "HOME", "LANG", "TZ"];

/// How cronsole's environment is read (tests inject one).
pub type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The production builder: real servers and command tools.
pub struct Sources {
    env: EnvLookup,
}

impl Sources {
    /// Reads secrets and base variables from `env`.
    pub fn new(env: EnvLookup) -> Sources {
        Sources { env }
    }

    /// Reads them from the process environment.
    pub fn from_env() -> Sources {
        Sources::new(Arc::new(|name| std::env::var(name).ok()))
    }
}

impl ToolboxBuilder for Sources {
    fn build<'a>(&'a self, req: ToolboxRequest<'a>) -> BoxFuture<'a, Result<Toolbox, ToolError>> {
        Box::pin(build(req, self.env.clone()))
    }
}

/// Seconds as a timer duration, clamped (the config bounds them already).
pub fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.clamp(0.001, 1e9)).unwrap_or(Duration::from_secs(1))
}

/// The allowlist of a run: the job's own `tools:` or its agent's.
pub fn allowlist(req: &ToolboxRequest<'_>) -> Vec<ToolPattern> {
    let own = match &req.job.action {
        Action::Agent { tools: Some(t), .. } => Some(t),
        _ => None,
    };
    own.unwrap_or(&req.agent.tools)
        .iter()
        .filter_map(|t| ToolPattern::parse(t))
        .collect()
}

/// Builds the run's toolbox (see the module doc).
pub async fn build(req: ToolboxRequest<'_>, env: EnvLookup) -> Result<Toolbox, ToolError> {
    let allowed = allowlist(&req);
    if allowed.is_empty() {
        return Ok(Toolbox {
            sources: Vec::new(),
            offered: Vec::new(),
        });
    }
    let tools = &req.settings.tools;
    let servers: Vec<&McpServerDef> = tools
        .mcp_servers
        .values()
        .filter(|s| allowed.iter().any(|a| a.server() == Some(s.name.as_str())))
        .collect();
    let commands: BTreeMap<String, crate::model::CommandToolDef> = tools
        .command_tools
        .iter()
        .filter(|(n, _)| allowed.contains(&ToolPattern::Command((*n).clone())))
        .map(|(n, d)| (n.clone(), d.clone()))
        .collect();
    // Every secret first: a missing one fails the run before anything starts.
    let mut values = Vec::new();
    let mut server_vars = BTreeMap::new();
    let mut server_own = BTreeMap::new();
    for s in &servers {
        let mut own = Vec::new();
        server_vars.insert(
            s.name.clone(),
            secret_vars(&s.name, &s.transport, &*env, &mut own)?,
        );
        values.extend(own.iter().cloned());
        server_own.insert(s.name.clone(), own_secrets(s, own));
    }
    let mut command_vars = BTreeMap::new();
    for (name, d) in &commands {
        let mut vars: Vec<(String, String)> =
            d.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        vars.extend(read_sources(
            name,
            "env_from",
            &d.env_from,
            &*env,
            &mut values,
        )?);
        command_vars.insert(name.clone(), vars);
    }
    let secrets = Arc::new(Secrets::new(values));
    let base = base_env(req.proc_env, &*env);
    let timeout = secs(req.agent.limits.tool_timeout_seconds);

    let mut sources: Vec<Arc<dyn ToolSource>> = Vec::new();
    let opened = async {
        for s in &servers {
            let vars = server_vars.remove(&s.name).unwrap_or_default();
            let own = server_own.remove(&s.name).unwrap_or_default();
            let src = open_server(s, vars, &base, timeout, (secrets.clone(), own)).await?;
            sources.push(Arc::new(src));
        }
        let mut command_index = None;
        if !commands.is_empty() {
            command_index = Some(sources.len());
            sources.push(Arc::new(CommandSource::new(
                commands,
                base.clone(),
                command_vars,
                secrets.clone(),
            )));
        }
        offer(&sources, command_index, &allowed).await
    }
    .await;
    match opened {
        Ok(offered) => Ok(Toolbox { sources, offered }),
        Err(e) => {
            for s in &sources {
                s.close().await;
            }
            Err(e)
        }
    }
}

/// Lists every source and keeps exactly the allowed tools, checking that each allowed
/// `server.tool` was listed and that no two offered tools meet on one provider name.
/// `commands`: the index of the command tools' source, whose tools go by their own names.
async fn offer(
    sources: &[Arc<dyn ToolSource>],
    commands: Option<usize>,
    allowed: &[ToolPattern],
) -> Result<Vec<OfferedTool>, ToolError> {
    let mut offered = Vec::new();
    for (i, src) in sources.iter().enumerate() {
        for def in src.list().await? {
            let qualified = if Some(i) == commands {
                def.name.clone()
            } else {
                format!("{}.{}", src.name(), def.name)
            };
            if !allowed.iter().any(|a| a.admits(&qualified)) {
                continue;
            }
            offered.push(OfferedTool {
                wire_name: wire_name(&qualified),
                qualified,
                source: i,
                hash: def.definition_hash(),
                def,
            });
        }
    }
    for a in allowed {
        if let ToolPattern::Tool { server, .. } = a {
            let q = a.to_string();
            if !offered.iter().any(|o| o.qualified == q) {
                return Err(ToolError::Protocol {
                    source_name: server.clone(),
                    why: format!("allowed tool {q} is not among the tools it lists"),
                });
            }
        }
    }
    offered.sort_by(|a, b| a.qualified.cmp(&b.qualified));
    offered.dedup_by(|a, b| a.qualified == b.qualified);
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    for o in &offered {
        if let Some(first) = seen.insert(&o.wire_name, &o.qualified) {
            return Err(ToolError::Protocol {
                source_name: o.qualified.clone(),
                why: format!(
                    "{} and {} both reach the model as {}; rename one",
                    crate::text::line(first),
                    crate::text::line(&o.qualified),
                    o.wire_name
                ),
            });
        }
    }
    Ok(offered)
}

/// A server's secret variables as `(name, value)`, each value added to `values`.
fn secret_vars(
    name: &str,
    t: &McpTransport,
    env: &dyn Fn(&str) -> Option<String>,
    values: &mut Vec<String>,
) -> Result<Vec<(String, String)>, ToolError> {
    match t {
        McpTransport::Stdio {
            env: lit, env_from, ..
        } => {
            let mut vars: Vec<(String, String)> =
                lit.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            vars.extend(read_sources(name, "env_from", env_from, env, values)?);
            Ok(vars)
        }
        McpTransport::Http { headers_env, .. } => {
            read_sources(name, "headers_env", headers_env, env, values)
        }
    }
}

/// `{KEY: SOURCE_VAR}` with each source's value read; an unset one is an error naming it.
fn read_sources(
    name: &str,
    key: &str,
    map: &BTreeMap<String, String>,
    env: &dyn Fn(&str) -> Option<String>,
    values: &mut Vec<String>,
) -> Result<Vec<(String, String)>, ToolError> {
    let mut out = Vec::new();
    for (k, source) in map {
        match env(source).filter(|v| !v.is_empty()) {
            Some(v) => {
                values.push(v.clone());
                // A header value that names its scheme (`Bearer <token>`, `Basic <b64>`): a
                // server that echoes the credential alone, or Basic's password decoded, must
                // find it redacted too.
                if key == "headers_env" {
                    values.extend(header_credentials(&v));
                }
                out.push((k.clone(), v));
            }
            None => {
                return Err(ToolError::Unreachable {
                    source_name: name.to_string(),
                    why: format!("{key}: environment variable {source} (for {k}) is not set"),
                });
            }
        }
    }
    Ok(out)
}

/// The secrets inside a header value written `<scheme> <credential>`: the credential and, for
/// `Basic`, what it encodes (`user:password`) and the password alone — the server checks it
/// decoded, and may echo it so.
pub(crate) fn header_credentials(value: &str) -> Vec<String> {
    use base64::Engine as _;
    let Some((scheme, cred)) = value.trim().split_once(char::is_whitespace) else {
        return Vec::new();
    };
    let cred = cred.trim();
    if cred.is_empty() {
        return Vec::new();
    }
    let mut out = vec![cred.to_string()];
    if scheme.eq_ignore_ascii_case("basic")
        && let Some(plain) = base64::engine::general_purpose::STANDARD
            .decode(cred)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
    {
        if let Some((_, password)) = plain.split_once(':') {
            out.push(password.to_string());
        }
        out.push(plain);
    }
    out
}

/// The run's [`ProcEnv`] for tool processes: every variable of cronsole's environment removed
/// but [`BASE_VARS`], which are set from it explicitly.
pub fn base_env(run: &ProcEnv, env: &dyn Fn(&str) -> Option<String>) -> ProcEnv {
    let scrub = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| !BASE_VARS.contains(&k.as_str()))
        .collect();
    let extra = BASE_VARS
        .iter()
        .filter_map(|k| env(k).map(|v| (k.to_string(), v)))
        .collect();
    ProcEnv {
        workdir: run.workdir.clone(),
        scrub,
        stall_limit: run.stall_limit,
        extra,
    }
}

/// Starts or reaches one `mcp_servers:` entry on its own, as a run would (its secrets read from
/// `env`, its process under the supervisor with only the variables a run's would get):
/// `cronsole tools` lists and re-pins through it.
pub async fn open_one(
    s: &McpServerDef,
    run: &ProcEnv,
    env: &EnvLookup,
    timeout: Duration,
) -> Result<McpSource, ToolError> {
    let mut values = Vec::new();
    let vars = secret_vars(&s.name, &s.transport, &**env, &mut values)?;
    let base = base_env(run, &**env);
    let own = own_secrets(s, values.clone());
    open_server(
        s,
        vars,
        &base,
        timeout,
        (Arc::new(Secrets::new(values)), own),
    )
    .await
}

/// A server's own secrets: the values read for it and, for an HTTP server, the tokens its
/// URL carries. What it lists is redacted of these, the same set whichever command lists it.
fn own_secrets(s: &McpServerDef, values: Vec<String>) -> Arc<Secrets> {
    let tokens = match &s.transport {
        McpTransport::Http { url, .. } => crate::text::url_tokens(url),
        McpTransport::Stdio { .. } => Vec::new(),
    };
    Arc::new(Secrets::new(values.into_iter().chain(tokens)))
}

/// The secrets a session redacts: the run's (from error texts and results) and the server's
/// own (from what it lists).
type SessionSecrets = (Arc<Secrets>, Arc<Secrets>);

/// Starts or reaches one server.
async fn open_server(
    s: &McpServerDef,
    vars: Vec<(String, String)>,
    base: &ProcEnv,
    timeout: Duration,
    secrets: SessionSecrets,
) -> Result<McpSource, ToolError> {
    let era = match &s.protocol_version {
        Some(v) => Era::Pinned(v.clone()),
        None => Era::Auto,
    };
    let stdio = matches!(s.transport, McpTransport::Stdio { .. });
    match start_server(s, vars.clone(), base, timeout, secrets.clone(), era).await {
        // The first process read the discovery and is gone with its session; a new one hears
        // the discovery first again, this time without a handshake after it.
        Err(ToolError::Unreachable { why, .. }) if stdio && why.contains(mcp::MODERN_ONLY) => {
            tracing::info!(server = %s.name, "{}; starting it again in that era", mcp::MODERN_ONLY);
            let era = Era::Pinned(mcp::MODERN_VERSION.to_string());
            start_server(s, vars, base, timeout, secrets, era).await
        }
        r => r,
    }
}

/// Starts or reaches one server in `era`.
async fn start_server(
    s: &McpServerDef,
    vars: Vec<(String, String)>,
    base: &ProcEnv,
    timeout: Duration,
    (secrets, own): SessionSecrets,
    era: Era,
) -> Result<McpSource, ToolError> {
    let mut session = Session {
        name: s.name.clone(),
        era,
        timeout,
        secrets,
        own,
        guard: None,
        stderr: None,
    };
    match &s.transport {
        McpTransport::Http { url, .. } => mcp::connect_http(url, &vars, session).await,
        McpTransport::Stdio { command, cwd, .. } => {
            let mut env = base.clone();
            if let Some(dir) = cwd {
                env.workdir = Some(dir.into());
            }
            env.extra.extend(vars);
            let argv: Vec<&str> = command.iter().map(String::as_str).collect();
            let shown = format!("`{}`", command.join(" "));
            let secrets = session.secrets.clone();
            let unreachable = |why: String| ToolError::Unreachable {
                source_name: s.name.clone(),
                why: crate::text::line(&secrets.redact(&format!("{shown}: {why}"))).into_owned(),
            };
            let child = crate::proc::attach::attach(&argv, &env, timeout)
                .await
                .map_err(|e| unreachable(e.to_string()))?;
            let tail = Arc::new(Mutex::new(Tail::default()));
            let sink = tail.clone();
            let mut stderr = child.stderr;
            // Drained for as long as the server lives (a full pipe would block it); the last
            // bytes are kept for error messages.
            let drain = tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while let Ok(n) = stderr.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    if let Ok(mut t) = sink.lock() {
                        t.push(&buf[..n]);
                    }
                }
            });
            session.guard = Some(Box::new(child.life));
            session.stderr = Some(tail.clone());
            match mcp::connect_stdio(child.stdout, child.stdin, session).await {
                Ok(src) => Ok(src),
                Err(ToolError::Unreachable { why, .. }) => {
                    // A server that could not start (no such program) or ended at once says
                    // why on its stderr, which may still be in the pipe: read it to its end
                    // (bounded) so the reason carries the cause, not only the closed session.
                    let _ = tokio::time::timeout(STDERR_GRACE, drain).await;
                    let said = tail.lock().map(|t| t.text()).unwrap_or_default();
                    Err(unreachable(with_whole_stderr(why, &said)))
                }
                Err(e) => Err(e),
            }
        }
    }
}

/// The reason of a stdio server whose session failed at its start, with its stderr `said` as
/// read to the stream's end. The session's own text may carry the stderr as it was when the
/// session failed — cut mid-line while the pipe still held the rest, since the reader reads
/// what has arrived — so the whole stderr replaces that clause: given once, whole.
fn with_whole_stderr(why: String, said: &str) -> String {
    if said.is_empty() {
        return why;
    }
    let head = why
        .find(STDERR_CLAUSE)
        .map_or(why.as_str(), |at| &why[..at]);
    format!("{head}{STDERR_CLAUSE}{said})")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stderr clause the session wrote while the line was still arriving is replaced by
    /// the whole line; a reason without one gets it; nothing read leaves the reason as it is.
    #[test]
    fn a_failed_starts_reason_gives_its_whole_stderr_once() {
        let whole = "could not start `/bin/gone`: No such file or directory";
        let cut = format!("the session could not start: closed{STDERR_CLAUSE}could not start `)");
        assert_eq!(
            with_whole_stderr(cut, whole),
            format!("the session could not start: closed (its stderr: {whole})")
        );
        assert_eq!(
            with_whole_stderr("closed".into(), whole),
            format!("closed (its stderr: {whole})")
        );
        assert_eq!(with_whole_stderr("closed".into(), ""), "closed");
    }

    /// A `Bearer <token>` header's token alone is one of the server's own secrets, so a
    /// listing or a log message that echoes it is redacted.
    #[test]
    fn a_schemed_header_values_credential_is_a_secret_of_its_own() {
        let t = McpTransport::Http {
            url: "http://127.0.0.1:9/mcp".to_string(),
            headers_env: BTreeMap::from([("Authorization".to_string(), "AUTH".to_string())]),
        };
        let env = |k: &str| (k == "AUTH").then(|| "Bearer hdrsecret-0123456789".to_string());
        let mut values = Vec::new();
        let vars = secret_vars("search", &t, &env, &mut values).expect("read");
        assert_eq!(
            vars[0].1, "Bearer hdrsecret-0123456789",
            "the header is sent whole"
        );
        let own = crate::text::Secrets::new(values);
        assert_eq!(
            own.redact("log token hdrsecret-0123456789 and Bearer hdrsecret-0123456789"),
            "log token [redacted] and [redacted]"
        );
        assert!(header_credentials("plain-value-without-scheme").is_empty());
        assert_eq!(header_credentials("Token  abc "), vec!["abc".to_string()]);
        // Basic: the encoded credential, the password decoded, and both parts together.
        let b64 = "dTpiYXNpY3Bhc3MtUlQ5LXl5MjI="; // u:basicpass-RT9-yy22
        assert_eq!(
            header_credentials(&format!("Basic {b64}")),
            vec![
                b64.to_string(),
                "basicpass-RT9-yy22".to_string(),
                "u:basicpass-RT9-yy22".to_string()
            ]
        );
        let own = crate::text::Secrets::new(header_credentials(&format!("basic {b64}")));
        let said = own.redact("echo basicpass-RT9-yy22 and u:basicpass-RT9-yy22");
        assert!(
            said.starts_with("echo [redacted] and ") && !said.contains("basicpass"),
            "{said}"
        );
    }
}

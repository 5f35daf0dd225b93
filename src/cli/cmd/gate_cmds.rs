//! `cronsole probe` and `cronsole diff`.
//!
//! Owns: argument checks, printing and exit codes of these two commands. Must not touch: probe or
//! diff logic (that is `cronsole::gate`), the engine.
//!
//! Exit codes (decision): `probe` exits 0 with hash/size/preview on success; 1 when the probe ran
//! and failed (non-zero exit, timeout, > 64 KiB, HTTP error, redirect, a *name* that resolves to a
//! non-public address); 2 when the URL or arguments are unacceptable on their face (unparseable
//! URL, scheme other than http/https, credentials in the URL, a literal non-public IP without
//! `--allow-private`, `--allow-private` with `--command`). `diff` exits 2 for an unknown job or a
//! malformed `--run`, 1 when the job has no recorded diff.

use std::io::IsTerminal;
use std::process::ExitCode;

use crate::cli::args::{Cli, DiffArgs, ProbeArgs};
use crate::gate::GATE_TIMEOUT;
use crate::gate::diffview::{self, DiffError};
use crate::gate::monitor::{self, PREVIEW_MAX_BYTES};
use crate::gate::url::{self, UrlProbeOptions};
use anyhow::{Context, Result, anyhow};

use super::bad_input;

pub fn diff(cli: &Cli, a: &DiffArgs) -> Result<ExitCode> {
    let run_id = match a.run.as_deref() {
        None => None,
        Some(s) => Some(uuid::Uuid::parse_str(s.trim()).map_err(|e| {
            bad_input(format!(
                "--run '{s}' is not a run id (expected a UUID): {e}"
            ))
        })?),
    };
    let jobs = super::jobs_file(cli);
    let store = super::open_existing_store(&super::store_location(cli, jobs.as_deref()))?;
    let color = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    match diffview::diff_text(store.as_ref(), &a.name, run_id, color) {
        Ok(text) => {
            print!("{text}");
            Ok(ExitCode::SUCCESS)
        }
        Err(e @ DiffError::NoSuchJob(_)) => Err(bad_input(e.to_string())),
        // Asking for the diff of a job that has no monitor is the same mistake as naming a
        // job that does not exist: bad input. A monitor job without a change yet is an empty
        // answer, said so, and exit 1 (nothing to show).
        Err(e @ DiffError::NoDiff { .. })
            if !matches!(
                store.job(&a.name).ok().flatten().and_then(|j| j.def.gate),
                Some(crate::model::Gate::Monitor { .. })
            ) =>
        {
            Err(bad_input(format!(
                "{e}: job '{}' has no monitor (diff applies to jobs with a `monitor:` gate)",
                a.name
            )))
        }
        Err(DiffError::Store(se)) => Err(anyhow::Error::new(se)),
        Err(e) => Err(anyhow!(e)),
    }
}

pub fn probe(a: &ProbeArgs) -> Result<ExitCode> {
    if a.command.is_some() && a.allow_private {
        return Err(bad_input(
            "--allow-private applies to --url only (a command probe has no address rule)",
        ));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("could not start the async runtime")?;
    // The probed URL's tokens, in every form a server may echo them (a redirect's Location
    // carrying `next=<the request>`, an error page): redacted by value in whatever is printed,
    // as a monitor's row is.
    let secrets = crate::text::Secrets::new(
        a.url
            .as_deref()
            .map(crate::text::url_tokens)
            .unwrap_or_default(),
    );
    let output = rt.block_on(async {
        if let Some(cmd) = &a.command {
            if cmd.trim().is_empty() {
                return Err(bad_input("--command is empty"));
            }
            monitor::probe_command(cmd, GATE_TIMEOUT, &crate::proc::ProcEnv::default())
                .await
                .map_err(|e| anyhow!("probe failed: {e}"))
        } else if let Some(u) = &a.url {
            match url::fetch(u, a.allow_private, &UrlProbeOptions::default()).await {
                Ok(b) => Ok(b.body),
                // One rejection, one exit code: an address the rule refuses is bad input
                // whether it was written literally (127.0.0.1) or resolved (localhost).
                Err(e) if e.is_bad_url() || matches!(e, url::UrlProbeError::Address(_)) => Err(
                    bad_input(secrets.redact(&format!("probe rejected: {e}")).into_owned()),
                ),
                Err(e) => Err(anyhow!("{}", secrets.redact(&format!("probe failed: {e}")))),
            }
        } else {
            Err(bad_input("give --url URL or --command CMD"))
        }
    })?;
    let wm = monitor::watermark(&output);
    println!("sha256: {}", wm.hash);
    println!("size: {} bytes", output.len());
    if wm.truncated {
        println!("preview (first {PREVIEW_MAX_BYTES} bytes):");
    } else {
        println!("preview:");
    }
    for line in wm.preview.lines() {
        println!("{}", diffview::sanitize_line(&secrets.redact(line)));
    }
    Ok(ExitCode::SUCCESS)
}

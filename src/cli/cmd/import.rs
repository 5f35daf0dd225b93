//! `cronsole import praisonai FILE`: a PraisonAI scheduler YAML converted into a cronsole jobs
//! file (`cronsole::config::praisonai`), on stdout or in `--output` (never over an existing
//! file); what could not be mapped, the notes and the converted file's own validation go to
//! stderr.
//!
//! Owns: reading the input, writing the output, the report and the exit code: 0 converted into
//! a file that validates (what could not be mapped is reported, not fatal), 1 the output could
//! not be written, 2 the input is unreadable or not a scheduler file, or the converted file has
//! errors (it is still written, to be fixed by hand). Each problem of the converted file is
//! reported at the position in the PraisonAI input its line came from. Must not touch: the
//! store (it uses none).

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use crate::config::praisonai::{self, ImportOptions, Origin};
use crate::config::{Diagnostic, Severity};
use anyhow::Result;

use super::{bad_input, inert};
use crate::cli::args::{ImportArgs, ImportFrom};

pub fn import(a: &ImportArgs) -> Result<ExitCode> {
    let ImportFrom::Praisonai = a.from;
    // The reader words its refusal for a jobs file at `file:line:col`; the input here is
    // PraisonAI's file, and a file that cannot be read has no position in it.
    let text = crate::config::read_text(&a.file).map_err(|d| {
        bad_input(inert(
            &d.message.replace("the jobs file", "the PraisonAI file"),
        ))
    })?;
    let opts = ImportOptions {
        provider: a.provider.clone(),
        model: a.model.clone(),
        api_key_env: a.api_key_env.clone(),
    };
    let out = praisonai::import(&text, &a.file, &opts).map_err(|e| bad_input(inert(&e)))?;
    let target = a.output.as_ref().map_or_else(
        || std::path::PathBuf::from("jobs.yaml"),
        std::path::PathBuf::clone,
    );
    // The converted file checked as `validate` would: what still needs a hand is said now.
    let checked = crate::config::check_str(&out.yaml, &target);
    match &a.output {
        Some(path) => {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(|e| {
                    anyhow::anyhow!("cannot write {} ({e}); nothing was written", path.display())
                })?;
            f.write_all(out.yaml.as_bytes())?;
            f.sync_all()?;
            eprintln!("wrote {} ({} job(s))", path.display(), out.jobs);
        }
        None => {
            let mut o = std::io::stdout().lock();
            o.write_all(out.yaml.as_bytes())?;
            o.flush()?;
        }
    }
    if !out.unmapped.is_empty() {
        eprintln!("not mapped ({}):", out.unmapped.len());
        for u in &out.unmapped {
            eprintln!("  {}", inert(u));
        }
    }
    for n in &out.notes {
        eprintln!("note: {}", inert(n));
    }
    let errors = checked
        .diagnostics
        .iter()
        .filter(|d| d.severity == crate::config::Severity::Error)
        .count();
    if errors == 0 {
        eprintln!("the converted file validates ({} job(s))", out.jobs);
    } else {
        eprintln!(
            "the converted file has {errors} error(s) to fix by hand, at their place in {}:",
            a.file.display()
        );
    }
    for d in &checked.diagnostics {
        eprintln!("  {}", inert(&at_source(d, &out, &a.file)));
    }
    // A file that does not validate is not a finished conversion: the output is written so it
    // can be fixed, but a script must not take it for one.
    Ok(if errors == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

/// A problem of the converted file told where the operator can fix it: at the position in the
/// PraisonAI input its line came from, or naming the option that wrote it.
fn at_source(d: &Diagnostic, out: &praisonai::Imported, source: &Path) -> String {
    let sev = match d.severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
    };
    let what = format!("{sev}: {}: {}", d.key, d.message);
    match out.origin(d.line) {
        Origin::Source { line, column } => {
            format!("{}:{line}:{column}: {what}", source.display())
        }
        Origin::Option(flag) => format!("{flag}: {what}"),
        Origin::Generated => format!(
            "{}: {what} (in the part `import` writes itself)",
            source.display()
        ),
    }
}

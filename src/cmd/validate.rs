//! `cronsole validate FILE`. (Implementation: config helper.)
use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;

pub fn validate(file: &Path) -> Result<ExitCode> {
    let _ = file;
    todo!("config helper")
}

//! Reading a jobs file from disk: the size cap, what kind of file is accepted, UTF-8, and the
//! paths in the file made absolute against its directory.
//!
//! Owns: [`read_text`] / [`read_text_capped`] (a regular file of at most the cap, read with at
//! most cap + 1 bytes so a growing file cannot exhaust memory), the cap itself
//! ([`DEFAULT_MAX_FILE_BYTES`], `CRONSOLE_MAX_JOBS_FILE_BYTES`), and `adjust_paths`. Must not
//! touch: parsing or checking the text (`yaml`, `check`, `stream`).

use std::path::Path;

use super::check;
use super::diagnostic::{Diagnostic, Severity};
use crate::model::Settings;

/// The jobs file size cap when `CRONSOLE_MAX_JOBS_FILE_BYTES` is not set: 256 MiB (a
/// 1 000 000-job file is about 80 MB).
pub const DEFAULT_MAX_FILE_BYTES: u64 = 256 * 1024 * 1024;

/// The environment variable that overrides [`DEFAULT_MAX_FILE_BYTES`] (a whole number of bytes).
pub const MAX_FILE_BYTES_ENV: &str = "CRONSOLE_MAX_JOBS_FILE_BYTES";

/// The file's directory becomes `base_dir`, and relative `file:` sinks and stdio servers'
/// `cwd` are made absolute against it (see [`crate::config::load_file`]); `edit`, which checks
/// the text before saving it, calls it with the jobs file's path too.
pub fn adjust_paths(path: &Path, settings: &mut Settings) {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if let Ok(dir) = std::fs::canonicalize(dir) {
        for sink in settings.delivery.values_mut() {
            if let crate::model::SinkDef::File { path, .. } = sink
                && Path::new(path.as_str()).is_relative()
            {
                *path = dir.join(path.as_str()).to_string_lossy().into_owned();
            }
        }
        for server in settings.tools.mcp_servers.values_mut() {
            if let crate::model::McpTransport::Stdio { cwd: Some(cwd), .. } = &mut server.transport
                && Path::new(cwd.as_str()).is_relative()
            {
                *cwd = dir.join(cwd.as_str()).to_string_lossy().into_owned();
            }
        }
        settings.base_dir = Some(dir.to_string_lossy().into_owned());
    }
}

/// The size cap in force: `CRONSOLE_MAX_JOBS_FILE_BYTES` when set, else
/// [`DEFAULT_MAX_FILE_BYTES`]. A value that is not a whole number ≥ 1 is an error naming it.
pub fn max_file_bytes() -> Result<u64, String> {
    match std::env::var(MAX_FILE_BYTES_ENV) {
        Err(std::env::VarError::NotPresent) => Ok(DEFAULT_MAX_FILE_BYTES),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(format!("{MAX_FILE_BYTES_ENV} is not valid text"))
        }
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(n) if n >= 1 => Ok(n),
            _ => Err(format!(
                "{MAX_FILE_BYTES_ENV} must be a whole number of bytes ≥ 1, found {}",
                check::show(&v)
            )),
        },
    }
}

/// The text of a jobs file, read with the size cap in force (see [`read_text_capped`]).
pub fn read_text(path: &Path) -> Result<String, Diagnostic> {
    let cap = max_file_bytes().map_err(|m| file_error(path, m))?;
    read_text_capped(path, cap)
}

/// The text of a jobs file of at most `cap` bytes. Only a regular file (or a symlink to one) is
/// read; a directory, FIFO, socket or device is refused before any byte is read, and at most
/// `cap + 1` bytes are ever read, so a file that grows while being read cannot exhaust memory.
pub fn read_text_capped(path: &Path, cap: u64) -> Result<String, Diagnostic> {
    use std::io::Read;
    let unreadable_here = |e: &std::io::Error| unreadable(path, e);
    let meta = std::fs::metadata(path).map_err(|e| unreadable_here(&e))?;
    if !meta.is_file() {
        let ft = meta.file_type();
        let what = if ft.is_dir() {
            "a directory"
        } else {
            use std::os::unix::fs::FileTypeExt;
            if ft.is_fifo() {
                "a FIFO"
            } else if ft.is_char_device() || ft.is_block_device() {
                "a device"
            } else if ft.is_socket() {
                "a socket"
            } else {
                "not a regular file"
            }
        };
        return Err(file_error(
            path,
            format!(
                "{} is {what}: the jobs file must be a regular file",
                path.display()
            ),
        ));
    }
    let too_big = |size: &str| {
        file_error(
            path,
            format!(
                "{} is {size} bytes, more than the jobs-file cap of {cap} bytes (raise it with \
                 {MAX_FILE_BYTES_ENV})",
                path.display()
            ),
        )
    };
    if meta.len() > cap {
        return Err(too_big(&meta.len().to_string()));
    }
    let file = std::fs::File::open(path).map_err(|e| unreadable_here(&e))?;
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| unreadable_here(&e))?;
    if bytes.len() as u64 > cap {
        return Err(too_big(&format!("more than {cap}")));
    }
    String::from_utf8(bytes).map_err(|e| {
        let before = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line = before.iter().filter(|b| **b == b'\n').count() + 1;
        let column = before.len()
            - before
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(0, |i| i + 1)
            + 1;
        Diagnostic {
            severity: Severity::Error,
            file: path.to_path_buf(),
            line,
            column,
            key: "(file)".to_string(),
            message: "the jobs file is not valid UTF-8 text".to_string(),
        }
    })
}

pub(crate) fn file_error(path: &Path, message: String) -> Diagnostic {
    Diagnostic {
        severity: Severity::Error,
        file: path.to_path_buf(),
        line: 1,
        column: 1,
        key: "(file)".to_string(),
        message,
    }
}

/// The diagnostic for a jobs file that cannot be read.
pub fn unreadable(path: &Path, e: &std::io::Error) -> Diagnostic {
    file_error(
        path,
        format!("cannot read the jobs file {}: {e}", path.display()),
    )
}

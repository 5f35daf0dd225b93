//! What validating a jobs file reports: a [`Diagnostic`] (one problem at `file:line:col`, its
//! key and what would be accepted), [`ConfigErrors`] (every diagnostic of a refused file), and
//! the results a check hands back ([`Loaded`], [`Checked`]).
//!
//! Owns: these shapes and how a diagnostic is printed. Must not touch: the rules that find the
//! problems (`check`), the passes over the text (`stream`), reading files. It sits below both so
//! the rules and the passes share it without importing the module that ties them together.

use std::path::{Path, PathBuf};

use super::yaml;
use crate::model::{JobDef, JobsFile, Settings};

/// How bad a [`Diagnostic`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// The file is refused.
    Error,
    /// The file is accepted; the operator should look.
    Warning,
}

/// One problem in a jobs file, located at `file:line:column` (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// The jobs file (or the calendar file it names).
    pub file: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// 1-based column (characters).
    pub column: usize,
    /// Dotted path of the key, e.g. `jobs[2].schedule`.
    pub key: String,
    /// What is wrong and what would be accepted.
    pub message: String,
}

impl std::fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(
            f,
            "{}:{}:{}: {sev}: {}: {}",
            self.file.display(),
            self.line,
            self.column,
            self.key,
            self.message
        )
    }
}

/// Every error (and warning) of a jobs file that failed validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors {
    /// In file order.
    pub diagnostics: Vec<Diagnostic>,
}

impl std::fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self
            .diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .count();
        write!(f, "{n} error(s) in the jobs file")?;
        for d in &self.diagnostics {
            write!(f, "\n{d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// A jobs file that validated, with its warnings.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The settings and jobs, ready to `apply`.
    pub file: JobsFile,
    /// Warnings (the file is accepted).
    pub warnings: Vec<Diagnostic>,
}

/// Everything `validate` needs: settings, each job that validated on its own (`None` for jobs
/// with errors, in file order), and all diagnostics sorted by position.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The file's settings (defaults where it is silent).
    pub settings: Settings,
    /// One entry per job in file order; `None` where the job has errors.
    pub jobs: Vec<Option<JobDef>>,
    /// Errors and warnings, sorted by position.
    pub diagnostics: Vec<Diagnostic>,
}

impl Checked {
    /// Whether any diagnostic is an error.
    pub fn has_errors(&self) -> bool {
        self.diagnostics
            .iter()
            .any(|d| d.severity == Severity::Error)
    }

    /// The whole file, or every diagnostic when any is an error.
    pub fn into_result(self) -> Result<Loaded, ConfigErrors> {
        if self.has_errors() {
            return Err(ConfigErrors {
                diagnostics: self.diagnostics,
            });
        }
        Ok(Loaded {
            file: JobsFile {
                settings: self.settings,
                jobs: self.jobs.into_iter().flatten().collect(),
            },
            warnings: self.diagnostics,
        })
    }
}

/// The diagnostic of a text that is not valid YAML.
pub(crate) fn yaml_error(e: yaml::YamlError, path: &Path) -> Diagnostic {
    Diagnostic {
        severity: Severity::Error,
        file: path.to_path_buf(),
        line: e.line,
        column: e.column,
        key: "(yaml)".to_string(),
        message: format!("invalid YAML: {}", e.message),
    }
}

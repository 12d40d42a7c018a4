//! The error every boundary implementation returns.

use std::fmt;
use std::path::PathBuf;

/// One of the six boundaries of a workspace contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BoundaryKind {
    /// Which code and initial state the agent receives.
    Source,
    /// Which paths it may read or modify.
    Filesystem,
    /// Which processes, ports, locks and caches can interact.
    Process,
    /// Which runtime, services, network and limits apply.
    Environment,
    /// Which user, credentials and authority it has.
    Identity,
    /// How a result becomes visible.
    Promotion,
}

impl fmt::Display for BoundaryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Source => "source",
            Self::Filesystem => "filesystem",
            Self::Process => "process",
            Self::Environment => "environment",
            Self::Identity => "identity",
            Self::Promotion => "promotion",
        })
    }
}

/// What went wrong inside a boundary implementation.
///
/// It names the boundary, the operation and, where there is one, the path; the
/// backend's own typed error is kept as the source so nothing is lost on the way up.
#[derive(Debug, thiserror::Error)]
#[error("{boundary} boundary: {operation}{}", path.as_ref().map(|p| format!(" ({})", p.display())).unwrap_or_default())]
pub struct BoundaryError {
    /// The boundary that failed.
    pub boundary: BoundaryKind,
    /// What it was doing, e.g. `"provision checkout"`.
    pub operation: String,
    /// The path involved, if any.
    pub path: Option<PathBuf>,
    /// The backend's error.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync + 'static>,
}

impl BoundaryError {
    /// Wraps a backend error.
    pub fn new(
        boundary: BoundaryKind,
        operation: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        Self {
            boundary,
            operation: operation.into(),
            path: None,
            source: source.into(),
        }
    }

    /// The program the kernel would not run, when that is what failed (a
    /// backend's spawn error), so the runner reports it as a shell does.
    pub fn program_not_run(&self) -> Option<&ProgramNotRun> {
        self.source.downcast_ref()
    }

    /// Names the path the operation was about.
    pub fn with_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.path = Some(path.into());
        self
    }
}

/// A command's program the kernel would not run (`execve` said why): a
/// boundary's spawn error, reported as a shell reports it (exit 127 when not
/// found, 126 when not executable).
#[derive(Debug, thiserror::Error)]
#[error("{reason}: {program}")]
pub struct ProgramNotRun {
    /// The program as the command named it.
    pub program: String,
    /// Why it did not run.
    pub reason: NotRunReason,
}

/// Why a command's program did not run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NotRunReason {
    /// No such file (or a directory on the way is missing).
    NotFound,
    /// Found, but not executable (no execute permission, not a program).
    NotExecutable,
}

impl std::fmt::Display for NotRunReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::NotFound => "not found",
            Self::NotExecutable => "not executable",
        })
    }
}

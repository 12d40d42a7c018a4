//! Why a run's capped disk could not be made, read or removed.

use std::path::PathBuf;

/// What went wrong with a run's disk.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DiskError {
    /// A file system step on the host failed.
    #[error("cannot {step} {path}")]
    Io {
        /// What was being done.
        step: &'static str,
        /// The host path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A program the disk needs is not installed.
    #[error(
        "{program} was not found in {searched}: install {package} (`apt-get install {package}`)"
    )]
    Missing {
        /// The program.
        program: &'static str,
        /// Where it was looked for.
        searched: String,
        /// The Debian package that has it.
        package: &'static str,
    },
    /// A program the disk needs failed.
    #[error("{program} failed on {path} ({status}): {stderr}")]
    Program {
        /// The program.
        program: &'static str,
        /// What it worked on.
        path: PathBuf,
        /// How it ended.
        status: std::process::ExitStatus,
        /// What it said.
        stderr: String,
    },
    /// The disk is not what was made: after a host restart a tmpfs is gone
    /// with everything the run wrote on it.
    #[error("the run's disk at {path} is gone: {reason}")]
    Gone {
        /// The mount point.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The cap is more than the host can give the run where its disk would be:
    /// more than its file system has free, or more than a file there can hold.
    #[error("environment.limits.disk: {cap} is more than {reason} at {}", path.display())]
    TooLarge {
        /// The cap, as the contract writes it.
        cap: workspace_core::contract::ByteSize,
        /// Where the disk would be (the run directory).
        path: PathBuf,
        /// What the host has instead.
        reason: String,
    },
    /// Something of the disk outlived its removal.
    #[error("the run's disk at {path} is not removed: {left}")]
    Left {
        /// The mount point.
        path: PathBuf,
        /// What is left.
        left: String,
    },
}

impl DiskError {
    /// The host path the error is about.
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            Self::Io { path, .. }
            | Self::Program { path, .. }
            | Self::Gone { path, .. }
            | Self::TooLarge { path, .. }
            | Self::Left { path, .. } => Some(path),
            Self::Missing { .. } => None,
        }
    }

    pub(super) fn io(
        step: &'static str,
        path: &std::path::Path,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.to_path_buf();
        move |source| Self::Io { step, path, source }
    }
}

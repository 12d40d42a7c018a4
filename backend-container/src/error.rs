//! What goes wrong in the container backend, each error naming its step.

use std::path::{Path, PathBuf};

/// An error of the container backend.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ContainerError {
    /// A setting this backend cannot keep (refused before anything runs).
    #[error("the container backend cannot keep {setting}")]
    Unsupported {
        /// The setting, with where it comes from.
        setting: String,
    },
    /// A file system step on the host failed.
    #[error("{step}: {}", path.display())]
    Io {
        /// What was being done.
        step: &'static str,
        /// The host path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// An OCI document could not be built, written or read.
    #[error("{step}")]
    Spec {
        /// What was being done.
        step: &'static str,
        /// Why.
        source: oci_spec::OciSpecError,
    },
    /// No OCI runtime was found.
    #[error("no OCI runtime: {tried} (install runc: Debian package runc)")]
    NoRuntime {
        /// What was looked for, and where.
        tried: String,
    },
    /// The runtime refuses this host.
    #[error("{runtime} cannot run here: {why}")]
    RuntimeRefuses {
        /// The runtime's name.
        runtime: String,
        /// Why, in one sentence.
        why: String,
    },
    /// The runtime could not be started.
    #[error("{runtime} {step}: could not start it")]
    Spawn {
        /// The runtime's name.
        runtime: String,
        /// The runtime command.
        step: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// The runtime ran and failed.
    #[error("{runtime} {step} failed ({status}): {stderr}")]
    Runtime {
        /// The runtime's name.
        runtime: String,
        /// The runtime command.
        step: &'static str,
        /// How it exited.
        status: String,
        /// The end of what it wrote on its standard error.
        stderr: String,
    },
}

impl From<oci_spec::OciSpecError> for ContainerError {
    fn from(source: oci_spec::OciSpecError) -> Self {
        Self::Spec {
            step: "building the container's configuration",
            source,
        }
    }
}

impl ContainerError {
    /// A host file system error at `path` while doing `step`.
    pub(crate) fn io(step: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.to_path_buf();
        move |source| Self::Io { step, path, source }
    }
}

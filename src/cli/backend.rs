//! The isolation backends the command line can name.

use clap::ValueEnum;

/// The isolation backend of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Backend {
    /// Linux namespaces, cgroups and seccomp, embedded (the default).
    Namespace,
    /// An OCI runtime (crun, runc, youki).
    Container,
}

impl Backend {
    /// The backend that sealed the run whose directory is `run_dir`: the
    /// container backend leaves its bundle there.
    pub(crate) fn that_sealed(run_dir: &std::path::Path) -> Self {
        if backend_container::process::sealed_in(run_dir) {
            Self::Container
        } else {
            Self::Namespace
        }
    }

    /// The name `--backend` takes.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Namespace => "namespace",
            Self::Container => "container",
        }
    }
}

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
    /// The name `--backend` takes.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Namespace => "namespace",
            Self::Container => "container",
        }
    }
}

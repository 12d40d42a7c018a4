//! What goes wrong in the container backend, each error naming its step.

use std::path::{Path, PathBuf};

/// An error of the container backend.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ContainerError {
    /// The run's image could not be verified or unpacked (nothing ran).
    #[error("the run's image")]
    Image(#[from] crate::image::ImageError),
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
    /// The container's root cannot reach its bundle: a directory on the way
    /// is closed to other users (the runtime sets the root up as that id).
    #[error(
        "the container's root (host uid {uid}) cannot reach {}: {} is closed to it (mode {mode:o}); let its group be {uid} with g+x (what the runner makes of its runtime directory) or put the runtime directory elsewhere (--runtime-dir)",
        bundle.display(),
        closed.display()
    )]
    Unreachable {
        /// The host uid the container's root maps to.
        uid: u32,
        /// The bundle's directory.
        bundle: PathBuf,
        /// The first directory on the way it may not search.
        closed: PathBuf,
        /// That directory's permission bits.
        mode: u32,
    },
    /// The host ids containers would map to belong to a user's subordinate
    /// range: that user could become them and reach every run's files.
    #[error(
        "containers map to host ids from {base}, and {claimed}: that user could take them over; move the containers to ids no user holds (AGENT_WORKSPACE_HOST_ID_BASE=1879048192, above every range useradd gives) or take that range away (usermod --del-subuids, --del-subgids)"
    )]
    HostIdsClaimed {
        /// The first host id of the containers.
        base: u32,
        /// The range that holds some of them.
        claimed: workspace_core::subordinate::ClaimedRange,
    },
    /// The command's working directory leaves the workspace.
    #[error("the command's working directory")]
    BadCwd {
        /// The cwd.
        #[source]
        source: workspace_core::boundary::InvalidCwd,
    },
    /// A variable of the command's own cannot be given to a process.
    #[error("the command's environment")]
    InvalidEnv {
        /// The variable.
        #[source]
        source: workspace_core::boundary::InvalidEnv,
    },
    /// No OCI runtime was found.
    #[error("no OCI runtime: {tried} (install one, e.g. runc: Debian package runc)")]
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
    /// Processes of a command's cgroup were still there after it was killed.
    #[error("processes {remaining:?} were still running after the kill")]
    KillIncomplete {
        /// Their host pids.
        remaining: Vec<u32>,
    },
    /// A pipe or descriptor step failed.
    #[error("{step}")]
    Pipe {
        /// What was being done.
        step: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// The run is not sealed (or attached) by this instance.
    #[error("run {run_id} is not sealed by this container backend")]
    NotSealed {
        /// The run.
        run_id: workspace_core::RunId,
    },
    /// The run was sealed already.
    #[error("run {run_id} is sealed already")]
    AlreadySealed {
        /// The run.
        run_id: workspace_core::RunId,
    },
    /// Something the container should have is not there.
    #[error("{what}")]
    Lost {
        /// What, in one sentence.
        what: String,
    },
    /// The runtime's seccomp filter lets through what the container's profile
    /// refuses ([`crate::seccomp`]): its libseccomp does not know the syscall
    /// and left the rule out. Found at the seal, before any command runs.
    #[error(
        "{runtime} ({version}) does not keep the container's seccomp profile: {syscall} (syscall {number}) {answer}; a runtime whose libseccomp does not know a syscall leaves its rule out without a word (fchmodat2 needs libseccomp 2.5.5 or later, openat2 2.5.0); use a runtime built with a newer libseccomp, or the namespace backend"
    )]
    SeccompNotKept {
        /// The runtime's name.
        runtime: String,
        /// The first line of its `--version`.
        version: String,
        /// The syscall the filter let through.
        syscall: &'static str,
        /// Its number on x86-64.
        number: u32,
        /// What it did in the container.
        answer: String,
    },
    /// The boundary probe did not end in time; it was killed.
    #[error("the boundary probe did not end within {after_ms} ms")]
    ProbeTimeout {
        /// Its time limit.
        after_ms: u64,
    },
    /// The run's host ids would overflow.
    #[error("host id base {base} + id {id} overflows")]
    HostIdOverflow {
        /// The base.
        base: u32,
        /// The id inside.
        id: u32,
    },
    /// The checkout could not be read for the plan (an exclusion that is not
    /// a glob, a path it matches that is not UTF-8, a directory unreadable).
    #[error(transparent)]
    Checkout(#[from] workspace_core::mount_plan::CheckoutError),
    /// The mount plan could not be built from the contract.
    #[error("building the mount plan: {problems}")]
    Plan {
        /// The problems, one per field.
        problems: workspace_core::contract::Problems,
    },
    /// A regular file of the checkout has more than one link: handing it over
    /// to the run's ids would change the owner of the file it is linked to.
    #[error("{}: a hard-linked file in the checkout; its owner cannot change without changing it elsewhere", path.display())]
    HardLinkedFile {
        /// The file.
        path: PathBuf,
    },
    /// The output keeper of a command could not be started.
    #[error("starting the output keeper of a command")]
    OutputKeeper {
        /// Why.
        #[source]
        source: workspace_core::boundary::BoundaryError,
    },
    /// A blocking step's thread panicked.
    #[error("{step}: its thread panicked")]
    ThreadPanicked {
        /// What was being done.
        step: &'static str,
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
    /// Wraps the error as the Process boundary's, naming `operation` (and the
    /// path, when there is one).
    pub fn into_boundary(self, operation: &str) -> workspace_core::boundary::BoundaryError {
        use workspace_core::boundary::{BoundaryError, BoundaryKind};
        use workspace_core::mount_plan::CheckoutError;
        let path = match &self {
            Self::Io { path, .. }
            | Self::HardLinkedFile { path }
            | Self::Checkout(
                CheckoutError::NonUtf8Excluded { path } | CheckoutError::Io { path, .. },
            ) => Some(path.clone()),
            _ => None,
        };
        let error = BoundaryError::new(BoundaryKind::Process, operation, self);
        match path {
            Some(path) => error.with_path(path),
            None => error,
        }
    }

    /// A host file system error at `path` while doing `step`.
    pub(crate) fn io(step: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.to_path_buf();
        move |source| Self::Io { step, path, source }
    }
}

//! [`ProcessError`]: why the namespace process boundary failed, naming the step.

use std::path::PathBuf;
use workspace_core::mount_plan::CheckoutError;

use workspace_core::RunId;
use workspace_core::boundary::{BoundaryError, BoundaryKind};

use crate::cgroup::CgroupError;
use crate::spawn::SpawnError;

/// What went wrong in [`NamespaceProcess`](super::NamespaceProcess).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProcessError {
    /// A file system step on the host failed.
    #[error("{step}: {path}")]
    Io {
        /// What was being done.
        step: &'static str,
        /// The host path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The host's base system could not be looked at.
    #[error("the host's base system")]
    HostLayout(#[from] workspace_core::mount_plan::HostLayoutError),
    /// A cgroup step failed.
    #[error("{step}")]
    Cgroup {
        /// What was being done.
        step: &'static str,
        /// The cgroup error (it names the file).
        source: CgroupError,
    },
    /// The command's program is not in the run (or not executable there):
    /// `execve` said so.
    #[error(transparent)]
    ProgramNotRun(workspace_core::boundary::ProgramNotRun),
    /// Starting a command in its namespaces failed.
    #[error("{step}")]
    Spawn {
        /// What was being done.
        step: &'static str,
        /// The spawn error.
        source: SpawnError,
    },
    /// The checkout could not be read for the plan (an exclusion that is not a
    /// glob, a path it matches that is not UTF-8, a directory unreadable).
    #[error(transparent)]
    Checkout(#[from] CheckoutError),
    /// The mount plan could not be built.
    #[error("building the mount plan: {problems}")]
    Plan {
        /// The problems, one per field.
        problems: workspace_core::contract::Problems,
    },
    /// The run's host id (an offset base + its id inside) is past `u32`.
    #[error("host id base {base} + id {id} overflows")]
    HostIdOverflow {
        /// [`HostIds::Offset`](super::HostIds::Offset)'s base.
        base: u32,
        /// The id inside.
        id: u32,
    },
    /// The run was already sealed.
    #[error("run {run_id} is already sealed")]
    AlreadySealed {
        /// The run.
        run_id: RunId,
    },
    /// The run is not sealed (or was torn down).
    #[error("run {run_id} is not sealed")]
    NotSealed {
        /// The run.
        run_id: RunId,
    },
    /// An allowlisted run, and no egress proxy program is configured
    /// ([`ProcessOptions::egress_proxy`](super::ProcessOptions::egress_proxy)).
    #[error(
        "environment.network.mode = \"allowlist\" needs the egress proxy program, and none is configured"
    )]
    NoEgressProxy,
    /// The egress proxy of an allowlisted run did not start.
    #[error("the egress proxy did not start: {why}; it wrote: {log}")]
    Egress {
        /// What happened.
        why: &'static str,
        /// The end of its stderr.
        log: String,
    },
    /// No connection to a port inside the sandbox.
    #[error("connecting to port {port} inside the sandbox")]
    Connect {
        /// The port inside.
        port: u16,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The host ids runs would map to belong to a user's subordinate range:
    /// that user could become them and reach every run's files.
    #[error(
        "runs map to host ids from {base}, and {claimed}: that user could take them over; move the runs to ids no user holds (AGENT_WORKSPACE_HOST_ID_BASE=1879048192, above every range useradd gives) or take that range away (usermod --del-subuids, --del-subgids)"
    )]
    HostIdsClaimed {
        /// The first host id of the runs.
        base: u32,
        /// The range that holds some of them.
        claimed: workspace_core::subordinate::ClaimedRange,
    },
    /// The command has no program.
    #[error("argv is empty")]
    EmptyArgv,
    /// A variable of the command's own cannot be given to a process.
    #[error(transparent)]
    InvalidEnv(#[from] workspace_core::boundary::InvalidEnv),
    /// Output files were asked for a command with a terminal, whose output is
    /// one stream.
    #[error("output: a command with tty = true has one output stream, not output files")]
    TtyWithOutputFiles,
    /// The command's working directory leaves the workspace or is not normalized.
    #[error("cwd {cwd:?} must be a relative path under the workspace root without `..`")]
    BadCwd {
        /// The cwd as given.
        cwd: String,
    },
    /// Allocating or setting up the pseudo-terminal of a command with `tty = true`
    /// failed.
    #[error("the command's pseudo-terminal: {step}")]
    Pty {
        /// What was being done.
        step: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// A process the boundary started is not where it must be (the probe's
    /// shell outside its cgroup, a command's handle gone).
    #[error("{what}")]
    Lost {
        /// What is missing.
        what: &'static str,
    },
    /// The observation differs from the contract and assurance is required.
    #[error("environment.assurance = required and the probe found: {}", mismatches.join("; "))]
    Mismatch {
        /// One sentence per difference.
        mismatches: Vec<String>,
    },
    /// A blocking task panicked or was cancelled.
    #[error("{step}: the blocking task failed")]
    Task {
        /// What was being done.
        step: &'static str,
        /// The join error.
        source: tokio::task::JoinError,
    },
    /// A thread entered into the sandbox's namespaces panicked.
    #[error("{step}: the thread in the sandbox's namespaces panicked")]
    ThreadPanicked {
        /// What was being done.
        step: &'static str,
    },
    /// Handing the workspace over to the run's identity failed
    /// (see [`hand_over`](super::hand_over)).
    #[error("handing the workspace over to the run's identity: {step}: {path}")]
    Handover {
        /// What was being done.
        step: &'static str,
        /// The host path.
        path: PathBuf,
        /// The error (`ESTALE`: the tree changed while it was walked).
        source: std::io::Error,
    },
    /// The boundary probe did not finish within [`PROBE_TIMEOUT`](super::PROBE_TIMEOUT);
    /// it was killed and the seal fails.
    #[error("the boundary probe did not finish within {after_ms} ms (killed)")]
    ProbeTimeout {
        /// The timeout that expired, in milliseconds.
        after_ms: u64,
    },
    /// Making a pipe failed.
    #[error("{step}")]
    Pipe {
        /// Which pipe.
        step: &'static str,
        /// The error.
        source: std::io::Error,
    },
}

impl ProcessError {
    /// Wraps the error as the Process boundary's, naming `operation` and a path.
    pub fn into_boundary(self, operation: &str) -> BoundaryError {
        // The runner reads this one back (`BoundaryError::program_not_run`).
        if let Self::ProgramNotRun(not_run) = self {
            return BoundaryError::new(BoundaryKind::Process, operation, not_run);
        }
        let path = match &self {
            Self::Io { path, .. }
            | Self::Handover { path, .. }
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
}

impl ProcessError {
    /// The error of a command that did not start: the program named when `execve`
    /// could not find or run it (what a user needs to read), else the spawn error.
    pub(crate) fn not_run(program: String, source: crate::spawn::SpawnError) -> Self {
        use crate::spawn::{ChildStage, SpawnError};
        use nix::errno::Errno;
        use workspace_core::boundary::{NotRunReason, ProgramNotRun};
        match &source {
            SpawnError::Child {
                stage: ChildStage::Exec,
                errno: Errno::ENOENT | Errno::ENOTDIR,
                ..
            } => Self::ProgramNotRun(ProgramNotRun {
                program,
                reason: NotRunReason::NotFound,
            }),
            SpawnError::Child {
                stage: ChildStage::Exec,
                errno: Errno::EACCES,
                ..
            } => Self::ProgramNotRun(ProgramNotRun {
                program,
                reason: NotRunReason::NotExecutable,
            }),
            _ => Self::Spawn {
                step: "starting the command",
                source,
            },
        }
    }
}

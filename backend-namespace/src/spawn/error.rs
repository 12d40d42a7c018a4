//! Errors of [`spawn`](super::spawn), and the fixed-size report a failing child sends.

use std::fmt;
use std::path::PathBuf;

use nix::errno::Errno;

/// Why a run's process could not be started, or waited for.
///
/// Every variant names the step and, where there is one, the path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpawnError {
    /// The request is malformed (a field is named).
    #[error("process boundary: invalid spawn request: {field}: {reason}")]
    InvalidRequest {
        /// The request field.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A host path the mount plan binds could not be inspected before the clone.
    #[error("process boundary: mount plan step {step} ({target}): cannot inspect source {path}")]
    Source {
        /// Index of the step in the plan.
        step: usize,
        /// The step's target inside.
        target: String,
        /// The host path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// An overlay's work directory still holds the marker of an earlier
    /// volatile mount of the same layers, and it could not be removed.
    #[error(
        "process boundary: mount plan step {step} ({target}): cannot clear the earlier mount's marker in {path}"
    )]
    OverlayMarker {
        /// Index of the step in the plan.
        step: usize,
        /// The step's target inside.
        target: String,
        /// The overlay's work directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The default seccomp filter could not be built (the request named no filter
    /// and did not set `danger_no_seccomp`).
    #[error("process boundary: building the default seccomp filter failed")]
    Seccomp {
        /// The cause.
        #[source]
        source: crate::seccomp::SeccompError,
    },
    /// The namespace's init ended during the start without reporting a failure
    /// (killed, e.g. by the OOM killer of a small memory cgroup, or `SIGKILL`)
    /// and without a command status: the command never ran.
    #[error("process boundary: the namespace init (pid {pid}) ended before the command started")]
    InitEnded {
        /// The init's pid on the host.
        pid: i32,
    },
    /// The sandbox's door (see [`Sandbox`](super::Sandbox)) is not running,
    /// or the process at its pid is not pid 1's child: a process of the run
    /// ended it, and the sandbox cannot be entered by a runner without
    /// `CAP_SYS_PTRACE` any more.
    #[error(
        "process boundary: the sandbox's door (pid {door}) is gone or no longer pid {pid1}'s child: \
         the workspace takes no more commands (did a command of the run end it?)"
    )]
    DoorGone {
        /// The door's host pid, as recorded.
        door: i32,
        /// The sandbox's pid 1 (host pid).
        pid1: i32,
    },
    /// Preparing for the clone failed (pipes, `/dev/null`, cgroup files, pidfd).
    #[error("process boundary: {step} failed ({path})")]
    Prepare {
        /// What was being done.
        step: &'static str,
        /// The path involved (or `-`).
        path: PathBuf,
        /// The cause.
        #[source]
        source: Errno,
    },
    /// `clone(2)` with the namespace flags failed.
    #[error(
        "process boundary: clone with new user, mount, pid, net, uts and ipc namespaces failed"
    )]
    Clone {
        /// The cause.
        #[source]
        source: Errno,
    },
    /// The idmapped mount of an overlay's lower layer could not be made (see
    /// `spawn/idmapped.rs`): the kernel (before 5.12) or the lower's file system
    /// does not support idmapped mounts, the runner lacks `CAP_SYS_ADMIN`, or the
    /// lower changed since it was inspected (`EXDEV`).
    #[error("process boundary: idmapped mount of {path}: {step} failed")]
    IdmappedLower {
        /// What was being done.
        step: &'static str,
        /// The lower layer on the host (or `-`).
        path: PathBuf,
        /// The cause.
        #[source]
        source: Errno,
    },
    /// Writing the child's id maps failed.
    #[error("process boundary: writing {path} failed")]
    IdMap {
        /// `/proc/<pid>/uid_map`, `gid_map` or `setgroups`.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The parent's side of the start handshake failed.
    #[error("process boundary: start handshake ({step}) failed")]
    Handshake {
        /// What was being done.
        step: &'static str,
        /// The cause.
        #[source]
        source: Errno,
    },
    /// The child reported a failure before `execve` succeeded.
    #[error("process boundary: in the child, {stage}{}{}: {op} failed", step.map(|s| format!(" (mount plan step {s}")).unwrap_or_default(), target.as_ref().map(|t| format!(", {t})")).unwrap_or_default())]
    Child {
        /// The stage of the child's setup.
        stage: ChildStage,
        /// For mount-plan stages, the index of the step.
        step: Option<usize>,
        /// For mount-plan stages, the step's target inside.
        target: Option<String>,
        /// The operation within the stage.
        op: &'static str,
        /// The error number the child saw.
        #[source]
        errno: Errno,
    },
    /// The child's setup (mount plan, cgroup join, `execve`) did not end within
    /// [`SpawnRequest::setup_timeout`](super::SpawnRequest::setup_timeout): a hung
    /// bind source, a frozen cgroup, a stuck `execve`. The child was killed.
    #[error("process boundary: the child's setup did not finish within {after_ms} ms (killed)")]
    SetupTimeout {
        /// The timeout that expired, in milliseconds.
        after_ms: u64,
    },
    /// Waiting for or signalling the namespace's init failed.
    #[error("process boundary: {step} of pid {pid} failed")]
    Wait {
        /// What was being done.
        step: &'static str,
        /// The init's pid on the host.
        pid: i32,
        /// The cause.
        #[source]
        source: Errno,
    },
}

/// The stages of the child's setup, in order. Sent as a number over the error pipe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(u32)]
pub enum ChildStage {
    /// Resetting signal dispositions.
    Signals = 1,
    /// Moving the kept descriptors down and closing every other one.
    Descriptors = 2,
    /// Waiting for the parent's "maps written, go".
    Go = 3,
    /// Joining the run's control groups.
    Cgroup = 4,
    /// Entering a new cgroup namespace (after joining the cgroups).
    CgroupNamespace = 5,
    /// Clearing supplementary groups.
    Groups = 6,
    /// Making the inherited mount tree private.
    MountPrivate = 7,
    /// Mounting the scratch tmpfs and moving into it (first `pivot_root`).
    ScratchRoot = 8,
    /// Mounting the tmpfs that becomes the root.
    NewRoot = 9,
    /// Applying one step of the mount plan.
    MountStep = 10,
    /// Making the new root read-only.
    RootReadOnly = 11,
    /// `pivot_root` into the new root and detaching the old one.
    PivotRoot = 12,
    /// Setting the hostname.
    Hostname = 13,
    /// Bringing up `lo`.
    Loopback = 14,
    /// Dropping the capability bounding set.
    BoundingSet = 15,
    /// `setresgid`.
    SetGid = 16,
    /// `setresuid`.
    SetUid = 17,
    /// Emptying the capability sets (`capset`, ambient).
    Capabilities = 18,
    /// `prctl(PR_SET_NO_NEW_PRIVS)`.
    NoNewPrivs = 19,
    /// Changing to the working directory.
    Chdir = 20,
    /// Forking the command under the namespace's init.
    Fork = 21,
    /// `setsid` and unblocking signals in the command.
    Session = 22,
    /// Installing the seccomp filter.
    Seccomp = 23,
    /// `execve` of the command.
    Exec = 24,
    /// Setting the resource limits (`prlimit64`).
    Rlimits = 25,
    /// Making stdin (a pseudo-terminal) the command's controlling terminal
    /// (`ioctl(0, TIOCSCTTY, 0)` after `setsid`).
    ControllingTerminal = 26,
    /// Entering a live sandbox's namespaces (`setns` through its pidfd).
    JoinNamespaces = 27,
    /// Setting up a live sandbox's forwarder of published ports.
    Forward = 28,
    /// Starting a live sandbox's first process, its door or the boundary
    /// probe's shell (see [`Pid1::HoldSandbox`](super::Pid1::HoldSandbox)).
    FirstProcess = 29,
}

impl ChildStage {
    const ALL: [ChildStage; 29] = [
        Self::Signals,
        Self::Descriptors,
        Self::Go,
        Self::Cgroup,
        Self::CgroupNamespace,
        Self::Groups,
        Self::MountPrivate,
        Self::ScratchRoot,
        Self::NewRoot,
        Self::MountStep,
        Self::RootReadOnly,
        Self::PivotRoot,
        Self::Hostname,
        Self::Loopback,
        Self::BoundingSet,
        Self::SetGid,
        Self::SetUid,
        Self::Capabilities,
        Self::NoNewPrivs,
        Self::Chdir,
        Self::Fork,
        Self::Session,
        Self::Seccomp,
        Self::Exec,
        Self::Rlimits,
        Self::ControllingTerminal,
        Self::JoinNamespaces,
        Self::Forward,
        Self::FirstProcess,
    ];

    pub(crate) fn from_u32(value: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|s| *s as u32 == value)
    }
}

impl fmt::Display for ChildStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            Self::Signals => "resetting signals",
            Self::Descriptors => "closing inherited descriptors",
            Self::Go => "waiting for the id maps",
            Self::Cgroup => "joining the run's cgroups",
            Self::CgroupNamespace => "entering a cgroup namespace",
            Self::Groups => "clearing supplementary groups",
            Self::MountPrivate => "making mounts private",
            Self::ScratchRoot => "preparing the scratch root",
            Self::NewRoot => "mounting the new root",
            Self::MountStep => "applying the mount plan",
            Self::RootReadOnly => "making the root read-only",
            Self::PivotRoot => "pivot_root into the new root",
            Self::Hostname => "setting the hostname",
            Self::Loopback => "bringing up lo",
            Self::BoundingSet => "dropping the capability bounding set",
            Self::SetGid => "setresgid",
            Self::SetUid => "setresuid",
            Self::Capabilities => "emptying the capability sets",
            Self::NoNewPrivs => "setting no_new_privs",
            Self::Chdir => "changing to the working directory",
            Self::Fork => "forking the command",
            Self::Session => "starting the command's session",
            Self::Seccomp => "installing the seccomp filter",
            Self::Exec => "execve",
            Self::Rlimits => "setting the resource limits",
            Self::ControllingTerminal => "making the pseudo-terminal the controlling terminal",
            Self::JoinNamespaces => "entering the sandbox's namespaces",
            Self::Forward => "setting up the forwarder of the published ports",
            Self::FirstProcess => "starting the sandbox's first process",
        };
        f.write_str(text)
    }
}

/// Operations within a stage, sent as a number.
pub(crate) mod op {
    pub const CALL: u32 = 0;
    pub const RESOLVE: u32 = 1;
    pub const CREATE: u32 = 2;
    pub const MOUNT: u32 = 3;
    pub const REOPEN: u32 = 4;
    pub const SET_FLAGS: u32 = 5;
    pub const WRITE: u32 = 6;
    pub const SYMLINK: u32 = 7;
    pub const READ: u32 = 8;
    pub const CLOSE: u32 = 9;
    pub const OPEN_SOURCE: u32 = 10;
    pub const VERIFY_SOURCE: u32 = 11;
    pub const ATTACH_LOWER: u32 = 12;
    pub const ATTACH_IDMAPPED: u32 = 13;

    pub fn name(op: u32) -> &'static str {
        match op {
            RESOLVE => "resolving the target without following symlinks",
            CREATE => "creating the mount point",
            MOUNT => "mount",
            REOPEN => "reopening the new mount",
            SET_FLAGS => "setting the mount flags",
            WRITE => "write",
            SYMLINK => "symlink",
            READ => "read",
            CLOSE => "close",
            OPEN_SOURCE => "opening the bind source without following symlinks",
            VERIFY_SOURCE => "checking the bind source is the file inspected before clone",
            ATTACH_LOWER => "attaching the idmapped lower layer (move_mount)",
            ATTACH_IDMAPPED => "attaching the idmapped read-write mount (move_mount)",
            _ => "the system call",
        }
    }
}

/// What a failing child writes to the error pipe: 16 bytes, native endian.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Report {
    pub stage: u32,
    pub index: u32,
    pub op: u32,
    pub errno: i32,
}

impl Report {
    pub const LEN: usize = 16;

    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        out[0..4].copy_from_slice(&self.stage.to_ne_bytes());
        out[4..8].copy_from_slice(&self.index.to_ne_bytes());
        out[8..12].copy_from_slice(&self.op.to_ne_bytes());
        out[12..16].copy_from_slice(&self.errno.to_ne_bytes());
        out
    }

    pub fn decode(bytes: &[u8; Self::LEN]) -> Self {
        let word = |i: usize| [bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]];
        Self {
            stage: u32::from_ne_bytes(word(0)),
            index: u32::from_ne_bytes(word(4)),
            op: u32::from_ne_bytes(word(8)),
            errno: i32::from_ne_bytes(word(12)),
        }
    }

    /// The error for this report; `target_of` names a mount-plan step's target.
    pub fn into_error(self, target_of: impl Fn(usize) -> Option<String>) -> SpawnError {
        let stage = ChildStage::from_u32(self.stage).unwrap_or(ChildStage::Exec);
        let step = (stage == ChildStage::MountStep).then_some(self.index as usize);
        SpawnError::Child {
            stage,
            step,
            target: step.and_then(target_of),
            op: op::name(self.op),
            errno: Errno::from_raw(self.errno),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_round_trips_and_names_the_step() {
        let report = Report {
            stage: ChildStage::MountStep as u32,
            index: 5,
            op: op::MOUNT,
            errno: libc_eperm(),
        };
        let back = Report::decode(&report.encode());
        assert_eq!(back, report);
        let text = back.into_error(|i| Some(format!("/t{i}"))).to_string();
        assert_eq!(
            text,
            "process boundary: in the child, applying the mount plan (mount plan step 5, /t5): mount failed"
        );
        for stage in ChildStage::ALL {
            assert_eq!(ChildStage::from_u32(stage as u32), Some(stage));
        }
    }

    fn libc_eperm() -> i32 {
        Errno::EPERM as i32
    }
}

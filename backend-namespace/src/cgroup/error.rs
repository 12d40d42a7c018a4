//! The one error type of the cgroup module.

use std::io;
use std::path::PathBuf;

use super::Controller;

/// Why a cgroup operation failed. Every variant names the cgroup path or file (or
/// the controller) and the operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CgroupError {
    /// Neither `/proc/self/mountinfo` nor `/proc/mounts` could be read.
    #[error("cgroup: reading the mount table {path} failed")]
    ReadMountTable {
        /// The mount table that was tried last.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A limit was asked for, but its controller is not available on this host.
    #[error(
        "cgroup: a {controller} limit was asked for, but the {controller} controller is missing: {reason}"
    )]
    ControllerMissing {
        /// The controller.
        controller: Controller,
        /// Why it is unavailable (what detection found).
        reason: String,
    },
    /// The layout has no hierarchy at all to put a run in.
    #[error(
        "cgroup: no cgroup hierarchy is mounted (no cgroup2 mount and no v1 memory, pids, cpu or freezer mount)"
    )]
    NoHierarchy,
    /// The parent name is not a relative path of plain components.
    #[error("cgroup: parent name {name:?} is invalid: {reason}")]
    InvalidParentName {
        /// The rejected name.
        name: String,
        /// What rule it broke.
        reason: &'static str,
    },
    /// A limit value cannot be expressed in the controller's files.
    #[error("cgroup: {controller} limit {value} is invalid: {reason}")]
    InvalidLimit {
        /// The controller.
        controller: Controller,
        /// The value asked for.
        value: u64,
        /// Why it is rejected.
        reason: &'static str,
    },
    /// The run's cgroup directory already exists (a leftover, or a run id reused).
    #[error("cgroup: creating {path} failed: it already exists (leftover of an earlier run?)")]
    AlreadyExists {
        /// The directory.
        path: PathBuf,
    },
    /// A child group name that is not a plain name (letters, digits, `-`, `_`).
    #[error("cgroup: {name:?} is not a child group name (letters, digits, '-' and '_' only)")]
    InvalidName {
        /// The name.
        name: String,
    },
    /// A cgroup directory may not be made here: the cgroups the runs are made
    /// in are not this user's.
    #[error(
        "cgroup: {path} cannot be made: this user has no cgroup subtree of its own \
         (root delegates one with `agent-workspace check-host --fix --user NAME`)"
    )]
    NotDelegated {
        /// The directory.
        path: PathBuf,
        /// The refusal.
        #[source]
        source: io::Error,
    },
    /// Creating a cgroup directory failed.
    #[error("cgroup: creating directory {path} failed")]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A delegated group's directory or file could not be given to its user.
    #[error("cgroup: giving {path} to its user failed")]
    Delegate {
        /// The directory or file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A v2 controller could not be enabled in a `cgroup.subtree_control`.
    #[error("cgroup: enabling the {controller} controller in {path} failed")]
    EnableController {
        /// The controller.
        controller: Controller,
        /// The `cgroup.subtree_control` file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Reading a cgroup file or listing a cgroup directory failed.
    #[error("cgroup: reading {path} failed")]
    Read {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Writing a cgroup file failed.
    #[error("cgroup: writing {value:?} to {path} failed")]
    Write {
        /// The file.
        path: PathBuf,
        /// The value written.
        value: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A cgroup file did not hold what the kernel documents.
    #[error("cgroup: parsing {path} failed: expected {expected}, found {found:?}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What was expected.
        expected: &'static str,
        /// What was found (possibly shortened).
        found: String,
    },
    /// Sending SIGKILL to a pid read from the group failed (other than "no such process").
    #[error("cgroup: sending SIGKILL to pid {pid} of {path} failed")]
    Signal {
        /// The pid.
        pid: u32,
        /// The cgroup directory the pid was read from.
        path: PathBuf,
        /// The cause.
        #[source]
        source: nix::errno::Errno,
    },
    /// Processes were still in the group after the bounded number of kill rounds.
    #[error(
        "cgroup: killing every process of {path} failed: {remaining:?} still there after {rounds} rounds"
    )]
    KillIncomplete {
        /// The cgroup directory.
        path: PathBuf,
        /// The rounds tried.
        rounds: u32,
        /// The pids still present.
        remaining: Vec<u32>,
    },
    /// The group has no freezer: neither a cgroup v2 directory nor one in the v1
    /// freezer hierarchy.
    #[error("cgroup: {path} has no freezer (cgroup v2 or the v1 freezer hierarchy)")]
    NoFreezer {
        /// The group's first directory.
        path: PathBuf,
    },
    /// The group did not reach the frozen state in time (and was thawed again).
    #[error("cgroup: {path} did not freeze in time")]
    FreezeIncomplete {
        /// The directory whose freezer was used.
        path: PathBuf,
    },
    /// Removing a cgroup directory failed.
    #[error("cgroup: removing directory {path} failed after {attempts} attempts")]
    RemoveDir {
        /// The directory.
        path: PathBuf,
        /// The attempts made.
        attempts: u32,
        /// The last cause.
        #[source]
        source: io::Error,
    },
}

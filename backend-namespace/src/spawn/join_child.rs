//! What a child that joins a live sandbox does until it forks the command.
//!
//! The same rules as `child.rs`: a fork-style clone of a multi-threaded runner,
//! so only raw, async-signal-safe system calls on data prepared before the clone.
//! Order:
//!
//! 1. reset signal dispositions, `umask(022)`, move the kept descriptors to fixed
//!    numbers (stdio, go, error, status, cgroup files, the sandbox's pidfd) and
//!    close every other one;
//! 2. wait for the go byte (it says whether supplementary groups may be cleared),
//!    become non-dumpable, blank the runner's command line;
//! 3. join the command's cgroups while still in the host's namespaces (the
//!    clone placed it in the v2 one already, where it could);
//! 4. `setns(pidfd, user | mount | net | uts | ipc | pid)`: the user namespace is
//!    entered first, so the others are entered with its capabilities; the mount
//!    namespace puts the child at the sandbox's root; `pid` applies to children;
//! 5. a cgroup namespace rooted at the command's cgroup;
//! 6. clear supplementary groups, drop every privilege (`child.rs`), `chdir`,
//!    rlimits, the seccomp filter; fork the command, which is in the sandbox's pid
//!    namespace, and supervise it (`init.rs`, [`Supervisor::Joined`]).

use std::convert::Infallible;
use std::ffi::c_int;

use nix::libc;

use super::child::{
    begin, clone_with, drop_privileges, fail, run_setup, set_rlimits, stay_undumpable,
};
use super::error::{ChildStage, Report, SpawnError, op};
use super::init::{self, Supervisor};
use super::prepared::Prepared;
use super::protocol::{FD_CGROUP, GO_CLEAR_GROUPS};
use crate::sys::{self, Birth, ids, mount, process};

/// The namespaces a joining child enters through the sandbox's pidfd.
const JOINED_NAMESPACES: c_int = libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWPID;

/// Clones the joining child (no new namespaces); returns its pid in the parent.
pub(crate) fn clone_joining_child(prepared: &Prepared) -> Result<i32, SpawnError> {
    clone_with(prepared, 0, run)
}

fn run(prepared: &Prepared, birth: Birth) -> ! {
    run_setup(prepared, birth, setup)
}

fn setup(p: &Prepared, birth: Birth, error_fd: &mut c_int) -> Result<Infallible, Report> {
    let (go, cgroups) = begin(p, birth, error_fd)?;
    let sandbox = FD_CGROUP + cgroups;
    // The sandbox's pidfd, kept at this number; this process is single-threaded
    // and shares no fs struct, as setns requires.
    process::join_namespaces(sandbox, JOINED_NAMESPACES)
        .map_err(fail(ChildStage::JoinNamespaces, op::CALL))?;
    sys::close(sandbox);
    // It holds CAP_SYS_ADMIN in the sandbox's user namespace it just entered.
    process::unshare(libc::CLONE_NEWCGROUP).map_err(fail(ChildStage::CgroupNamespace, op::CALL))?;
    if go == GO_CLEAR_GROUPS {
        ids::clear_groups().map_err(fail(ChildStage::Groups, op::CALL))?;
    }
    drop_privileges(p)?;
    stay_undumpable();
    mount::chdir(&p.cwd).map_err(fail(ChildStage::Chdir, op::CALL))?;
    set_rlimits(p)?;
    init::install_seccomp(p)?;
    init::fork_command(p, Supervisor::Joined)
}

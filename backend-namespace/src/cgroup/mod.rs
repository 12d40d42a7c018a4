//! Per-run control groups: memory, pids and cpu limits, OOM detection, whole-tree
//! kill and removal, on cgroup v1, v2 or the hybrid layout.
//!
//! # Layouts
//!
//! * **v2 (unified)**: one hierarchy, usually at `/sys/fs/cgroup`; a controller is
//!   usable if the root's `cgroup.controllers` lists it, and a child gets it once it
//!   is enabled in its parent's `cgroup.subtree_control`.
//! * **v1**: one hierarchy per controller (or group of controllers), e.g.
//!   `/sys/fs/cgroup/memory`, `/sys/fs/cgroup/cpu`; a process is in one cgroup of
//!   *each* hierarchy.
//! * **hybrid**: v1 controller hierarchies plus a v2 hierarchy beside them at
//!   `/sys/fs/cgroup/unified`, often with no controllers. This is the layout of the
//!   machines this project is developed on: memory, pids and cpu come from v1, and
//!   the controller-less v2 hierarchy is still useful for tracking and killing,
//!   because every non-root v2 cgroup has `cgroup.procs` and `cgroup.kill`.
//!
//! [`CgroupLayout::detect`] reads the mount table and decides per controller: v2 if
//! offered there, else v1 if mounted, else [`Placement::Missing`]. A limit asked for
//! on a missing controller is [`CgroupError::ControllerMissing`], never a silent skip.
//!
//! # A run's groups
//!
//! [`RunCgroup::create`] makes `<hierarchy mount>/<parent>/<run-id>` in the v2
//! hierarchy (if mounted, with the needed controllers enabled down the path) and in
//! each v1 hierarchy used (plus the v1 freezer when `cgroup.kill` is unavailable).
//! The limits map to files as follows:
//!
//! | limit ([`ResolvedLimits`]) | v1 | v2 |
//! |---|---|---|
//! | `memory_bytes` | `memory.limit_in_bytes`, and `memory.memsw.limit_in_bytes` (same value) if swap accounting is on, so swap does not dodge the cap | `memory.max`, `memory.swap.max = 0` |
//! | `pids` | `pids.max` | `pids.max` |
//! | `cpu_millis` | `cpu.cfs_period_us = 100000`, `cpu.cfs_quota_us = millis * 100` | `cpu.max = "<millis * 100> 100000"` |
//!
//! The other limits (disk, `/tmp`, wall time, open files) are not cgroup matters and
//! are left to the other parts of the backend. What was written where is returned as
//! [`AppliedLimits`] for the run's evidence.
//!
//! The namespace backend moves the run's init into the group ([`RunCgroup::add_process`])
//! *before* it execs the command, so every process of the run, and everything it
//! forks, is charged and limited from its first instruction.
//!
//! Killing ([`RunCgroup::kill_all`]) uses v2 `cgroup.kill` where it exists; else it
//! freezes the v1 freezer group, SIGKILLs every pid read from the group, thaws, and
//! repeats until the group is empty (bounded). It never kills by name.
//!
//! # Why the files are written directly
//!
//! The few files above are all a run needs; `cgroups-rs` would pull in D-Bus, a
//! second `nix` and `thiserror` 1 for them. Writing them directly also keeps every
//! error naming the exact file.
//!
//! [`ResolvedLimits`]: workspace_core::boundary::ResolvedLimits

mod delegate;
mod error;
mod freezer;
mod fsio;
mod kill;
mod kill_method;
mod layout;
mod limits;
mod paths;
mod run;

use std::fmt;

use serde::{Deserialize, Serialize};

pub(crate) use delegate::v2_alone;
pub use delegate::{delegate, delegated_subtree, delegation};
pub use error::CgroupError;
pub use kill_method::KillMethod;
pub use layout::{CgroupLayout, Placement};
pub use limits::{AppliedCpu, AppliedLimits, AppliedMemory, AppliedPids, ReadLimits};
pub use paths::{leaked_paths, remove_parent, run_processes};
pub use run::RunCgroup;

/// A resource controller this module applies limits with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Controller {
    /// Memory (`memory.*`).
    Memory,
    /// Process and thread count (`pids.*`).
    Pids,
    /// CPU bandwidth (`cpu.*`).
    Cpu,
}

impl Controller {
    /// Every controller, in a fixed order.
    pub const ALL: [Controller; 3] = [Controller::Memory, Controller::Pids, Controller::Cpu];

    /// The kernel's name of the controller.
    pub fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Pids => "pids",
            Controller::Cpu => "cpu",
        }
    }
}

impl fmt::Display for Controller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The cgroup version of a hierarchy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Hierarchy {
    /// A cgroup v1 hierarchy.
    V1,
    /// The cgroup v2 (unified) hierarchy.
    V2,
}

const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<RunCgroup>();
    send_sync::<CgroupLayout>();
    send_sync::<CgroupError>();
};

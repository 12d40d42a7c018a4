//! How a run's processes are ended: chosen from the cgroup layout when the run's
//! cgroups are made (`run.rs`), carried out by `kill.rs`.

use serde::{Deserialize, Serialize};

/// How [`RunCgroup::kill_all`](super::RunCgroup::kill_all) ends the processes of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KillMethod {
    /// Write `1` to the v2 `cgroup.kill` (the kernel kills the whole subtree,
    /// including processes forked meanwhile).
    CgroupKill,
    /// Freeze the v1 freezer group, SIGKILL every pid in it, thaw; repeat until empty.
    V1Freezer,
    /// SIGKILL every pid in the group; repeat until empty (no freezer available, so
    /// a fork racing the signals is caught by a later round).
    Signals,
}

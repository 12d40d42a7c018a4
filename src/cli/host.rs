//! Options every subcommand shares: where runs live on this host.

use std::path::PathBuf;

use agent_workspace::{HostDirs, default_cgroup_parent};
use clap::Args;
use workspace_core::capacity::{HostPool, Resources};

#[derive(Clone, Debug, Args)]
pub(crate) struct HostArgs {
    /// The runtime directory: journals, checkouts, leases
    /// [default: `/var/lib/agent-workspace` as root, else under `$XDG_STATE_HOME`].
    #[arg(
        long,
        global = true,
        value_name = "DIR",
        env = "AGENT_WORKSPACE_RUNTIME_DIR"
    )]
    runtime_dir: Option<PathBuf>,
    /// The cgroup directory runs are made in, in every hierarchy
    /// [default: `agent-workspace` as root; for an ordinary user,
    /// `agent-workspace` in the cgroup subtree delegated to it that it runs in
    /// on a pure v2 host (`systemd-run --user --scope -p Delegate=yes`), else
    /// `agent-workspace-user-UID`, a subtree root delegates once with
    /// `check-host --fix --user NAME`].
    #[arg(
        long = "cgroup-parent",
        global = true,
        value_name = "NAME",
        env = "AGENT_WORKSPACE_CGROUP_PARENT"
    )]
    cgroup_parent_flag: Option<String>,
    /// How many runs may hold capacity on this host at once (default: no limit
    /// beyond cpu and memory). For tests and for hosts that need a cap.
    #[arg(
        long,
        global = true,
        hide = true,
        value_name = "N",
        env = "AGENT_WORKSPACE_CAPACITY_SLOTS"
    )]
    capacity_slots: Option<u32>,
    /// On Ctrl-C or SIGTERM, how long the running command gets to stop after
    /// its own SIGTERM before its whole tree is killed, in seconds.
    #[arg(
        long,
        global = true,
        value_name = "SECONDS",
        env = "AGENT_WORKSPACE_STOP_GRACE",
        default_value_t = 10
    )]
    stop_grace: u64,
    /// How long a run may wait for capacity on a full host before it gives up
    /// (exit 75, saying for what it waited), in seconds [default: 3600].
    #[arg(
        long = "wait",
        global = true,
        value_name = "SECONDS",
        env = "AGENT_WORKSPACE_WAIT"
    )]
    wait: Option<u64>,
    /// No summary lines on stderr (`run`, `exec`, `create`, `destroy`): what a
    /// command writes, and what went wrong, only (an answer `--json` asks for
    /// is still printed).
    #[arg(long, short = 'q', global = true, env = "AGENT_WORKSPACE_QUIET")]
    quiet: bool,
}

impl HostArgs {
    /// How long a command gets to stop when the run is interrupted.
    pub(crate) fn stop_grace(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.stop_grace)
    }

    /// Whether `--quiet` turned the summary lines off.
    pub(crate) fn quiet(&self) -> bool {
        self.quiet
    }

    /// The longest a run waits for capacity, when `--wait` says.
    pub(crate) fn wait(&self) -> Option<std::time::Duration> {
        self.wait.map(std::time::Duration::from_secs)
    }

    /// The cgroup directory this user's runs are made in, with the flag applied.
    pub(crate) fn cgroup_parent(&self) -> String {
        self.cgroup_parent_flag
            .clone()
            .unwrap_or_else(agent_workspace::default_cgroup_parent_here)
    }

    /// The cgroup directory user `uid`'s runs are made in, with the flag applied.
    pub(crate) fn cgroup_parent_of(&self, uid: u32) -> String {
        self.cgroup_parent_flag
            .clone()
            .unwrap_or_else(|| default_cgroup_parent(uid))
    }

    /// The runtime and evidence directories, with the flags applied.
    pub(crate) fn dirs(&self) -> HostDirs {
        let mut dirs = HostDirs::from_env();
        if let Some(runtime) = &self.runtime_dir {
            dirs.runtime = runtime.clone();
        }
        dirs
    }
}

/// This host's capacity pool, shared by every `agent-workspace` process using the
/// same runtime directory (under `<runtime>/capacity`): its cores, its memory,
/// the space free on the runtime directory's file system (what capped disks,
/// `environment.limits.disk`, reserve: their images live there, so two runs
/// whose caps add up to more than is free do not run at once), and no limit on
/// the number of runs beyond those unless `--capacity-slots` sets one.
pub(crate) fn host_capacity(host: &HostArgs) -> HostPool {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let runtime = host.dirs().runtime;
    let total = Resources {
        cpu_millis: cores * 1000,
        memory_bytes: mem_total().unwrap_or(u64::MAX),
        disk_bytes: free_bytes(&runtime).unwrap_or(u64::MAX),
        slots: host.capacity_slots.unwrap_or(u32::MAX),
    };
    HostPool::open(runtime.join(CAPACITY_DIR), total)
}

/// The bytes an unprivileged writer may still use on the file system of
/// `dir`, or of its nearest existing ancestor when it is not made yet.
fn free_bytes(dir: &std::path::Path) -> Option<u64> {
    let existing = dir.ancestors().find(|d| d.exists())?;
    let stat = nix::sys::statvfs::statvfs(existing).ok()?;
    Some(stat.blocks_available().saturating_mul(stat.fragment_size()))
}

/// The pool's directory under the runtime directory.
pub(crate) const CAPACITY_DIR: &str = "capacity";

/// `MemTotal` from `/proc/meminfo`, in bytes.
fn mem_total() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

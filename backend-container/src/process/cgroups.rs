//! The cgroups of one container: the directories the runtime made for it in
//! every hierarchy, a sub-cgroup per command (so a command's timeout, memory
//! cause and kill cover its own tree), their processes, and killing them.
//!
//! The runtime owns the container's own directories (it makes them at start and
//! removes them at delete); the command sub-cgroups below them are this
//! backend's, made before `exec --cgroup` and removed at teardown.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::error::ContainerError;

/// Where the cgroup file systems are mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// How long a kill may take before the processes left are reported.
const KILL_WAIT: Duration = Duration::from_secs(5);
/// The pause between looks while processes stop.
const POLL: Duration = Duration::from_millis(2);

/// The container's directory in each hierarchy, found from its pid 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ContainerCgroups {
    dirs: Vec<PathBuf>,
}

impl ContainerCgroups {
    /// The directories of `cgroups_path` (the bundle's `linux.cgroupsPath`,
    /// relative to each hierarchy's root) in every hierarchy mounted here that
    /// has one.
    pub(crate) fn of(cgroups_path: &str) -> Self {
        let relative = cgroups_path.trim_start_matches('/');
        let dirs = hierarchies()
            .into_iter()
            .map(|root| root.join(relative))
            .filter(|dir| dir.is_dir())
            .collect();
        Self { dirs }
    }

    /// Whether the runtime made no directory for it (or they are gone).
    pub(crate) fn is_empty(&self) -> bool {
        self.dirs.is_empty()
    }

    /// The directories that still exist.
    pub(crate) fn existing(&self) -> Vec<PathBuf> {
        self.dirs.iter().filter(|d| d.is_dir()).cloned().collect()
    }

    /// Makes the sub-cgroup `name` in every hierarchy (a v1 `cpuset` group
    /// gets its parent's cpus and memory nodes, without which the kernel
    /// refuses a process in it).
    pub(crate) fn create_child(&self, name: &str) -> Result<CommandCgroup, ContainerError> {
        let mut dirs = Vec::with_capacity(self.dirs.len());
        for parent in &self.dirs {
            let dir = parent.join(name);
            match std::fs::create_dir(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(source) => {
                    return Err(ContainerError::Io {
                        step: "making a command's cgroup",
                        path: dir,
                        source,
                    });
                }
            }
            for file in ["cpuset.cpus", "cpuset.mems"] {
                let inherited = parent.join(file);
                if parent.join("cgroup.clone_children").exists() && inherited.exists() {
                    let value = std::fs::read_to_string(&inherited).unwrap_or_default();
                    std::fs::write(dir.join(file), value.trim()).map_err(ContainerError::io(
                        "setting a command cgroup's cpuset",
                        &dir,
                    ))?;
                }
            }
            dirs.push(dir);
        }
        Ok(CommandCgroup { dirs })
    }

    /// The command sub-cgroups (names), in the first hierarchy.
    pub(crate) fn children(&self) -> Vec<String> {
        let Some(first) = self.dirs.first() else {
            return Vec::new();
        };
        let mut names: Vec<String> = std::fs::read_dir(first)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        names.sort();
        names
    }

    /// A sub-cgroup made earlier.
    pub(crate) fn child(&self, name: &str) -> CommandCgroup {
        CommandCgroup {
            dirs: self.dirs.iter().map(|d| d.join(name)).collect(),
        }
    }

    /// Every process of the container, its sub-cgroups included.
    pub(crate) fn pids(&self) -> Vec<u32> {
        pids_below(&self.dirs)
    }

    /// What the whole container used so far, as its counters show.
    pub(crate) fn usage(&self) -> workspace_core::evidence::ResourceUsage {
        usage_of(&self.dirs)
    }

    /// Removes every command sub-cgroup (the runtime removes its own
    /// directories at delete, and refuses while one is left below them).
    pub(crate) fn remove_children(&self) -> Vec<ContainerError> {
        let mut errors = Vec::new();
        for name in self.children() {
            errors.extend(self.child(&name).remove());
        }
        errors
    }
}

/// One command's cgroup, in every hierarchy of its container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CommandCgroup {
    dirs: Vec<PathBuf>,
}

impl CommandCgroup {
    /// Its `cgroup.procs` in the first hierarchy (every process of it is
    /// listed in each).
    pub(crate) fn procs_file(&self) -> PathBuf {
        self.dirs
            .first()
            .map_or_else(PathBuf::new, |dir| dir.join("cgroup.procs"))
    }

    /// Its `cgroup.procs` in every hierarchy.
    pub(crate) fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs
            .iter()
            .map(|dir| dir.join("cgroup.procs"))
            .collect()
    }

    /// Its processes.
    pub(crate) fn pids(&self) -> Vec<u32> {
        pids_below(&self.dirs)
    }

    /// What its processes used so far, as its counters show.
    pub(crate) fn usage(&self) -> workspace_core::evidence::ResourceUsage {
        usage_of(&self.dirs)
    }

    /// Moves host process `pid` (all its threads) into it, in every hierarchy.
    pub(crate) fn add(&self, pid: u32) -> Result<(), ContainerError> {
        for dir in &self.dirs {
            let procs = dir.join("cgroup.procs");
            std::fs::write(&procs, pid.to_string()).map_err(ContainerError::io(
                "moving a process into its cgroup",
                &procs,
            ))?;
        }
        Ok(())
    }

    /// The file `name` of the hierarchy whose directory has it (a
    /// controller's file: `memory.oom_control`, `pids.events`).
    pub(crate) fn file(&self, name: &str) -> Option<PathBuf> {
        self.dirs.iter().map(|d| d.join(name)).find(|f| f.is_file())
    }

    /// Sends `signal` to each of its processes.
    pub(crate) fn signal(&self, signal: Signal) -> usize {
        self.pids()
            .into_iter()
            .filter(|pid| send(*pid, signal))
            .count()
    }

    /// Kills every process of it and waits (bounded) until none is left: with
    /// `cgroup.kill` where the kernel has it, else frozen first (a v1 freezer:
    /// a frozen process cannot exit, so no pid read from the group is reused
    /// by another process before its signal), signalled, thawed.
    pub(crate) fn kill_all(&self) -> Result<(), ContainerError> {
        let deadline = Instant::now() + KILL_WAIT;
        let kill_file = self.file("cgroup.kill");
        let freezer = self.file("freezer.state");
        while !self.pids().is_empty() {
            if Instant::now() >= deadline {
                return Err(ContainerError::KillIncomplete {
                    remaining: self.pids(),
                });
            }
            match (&kill_file, &freezer) {
                (Some(file), _) => {
                    std::fs::write(file, "1")
                        .map_err(ContainerError::io("writing cgroup.kill", file))?;
                }
                (None, Some(state)) => {
                    let _ = std::fs::write(state, "FROZEN");
                    self.signal(Signal::SIGKILL);
                    let _ = std::fs::write(state, "THAWED");
                }
                (None, None) => {
                    self.signal(Signal::SIGKILL);
                }
            }
            std::thread::sleep(POLL);
        }
        Ok(())
    }

    /// Removes its directories (empty by now); each failure named.
    fn remove(&self) -> Vec<ContainerError> {
        self.dirs
            .iter()
            .filter(|d| d.exists())
            .filter_map(|dir| {
                std::fs::remove_dir(dir)
                    .err()
                    .map(|source| ContainerError::Io {
                        step: "removing a command's cgroup",
                        path: dir.clone(),
                        source,
                    })
            })
            .collect()
    }
}

/// Every hierarchy mounted under `/sys/fs/cgroup` (each v1 controller's, the
/// named ones, the unified one; or the v2 root itself).
fn hierarchies() -> Vec<PathBuf> {
    let root = Path::new(CGROUP_ROOT);
    if root.join("cgroup.controllers").is_file() {
        return vec![root.to_path_buf()];
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        // A v1 hierarchy mounted twice under two names (`cpu,cpuacct` and its
        // links) is one hierarchy: links are skipped.
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .filter(|dir| dir.join("cgroup.procs").is_file())
        .collect();
    dirs.sort();
    dirs
}

/// The usage the counters of a group's directories (one per hierarchy) show.
fn usage_of(dirs: &[PathBuf]) -> workspace_core::evidence::ResourceUsage {
    workspace_core::evidence::ResourceUsage::from_cgroup_files(|name| {
        dirs.iter()
            .find_map(|d| std::fs::read_to_string(d.join(name)).ok())
    })
}

/// Every pid listed in `dirs` and the groups below them, sorted, once each.
fn pids_below(dirs: &[PathBuf]) -> Vec<u32> {
    let mut pids = Vec::new();
    let mut pending: Vec<PathBuf> = dirs.to_vec();
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                pending.push(entry.path());
            }
        }
        let text = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        pids.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
    }
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// Signals `pid` (never 0, 1 or this process); whether it was there.
fn send(pid: u32, signal: Signal) -> bool {
    if pid <= 1 || pid == std::process::id() {
        return false;
    }
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    kill(Pid::from_raw(raw), signal).is_ok()
}

//! What this host supports, with a remediation for each gap.
//!
//! [`check_host`] runs every [`Check`] and returns a [`HostReport`] of typed
//! [`Finding`]s (`Ok`, `Missing` or `Restricted`, a detail and a remediation), which a
//! runner turns into a typed refusal with [`HostReport::is_ready_for`] before it
//! provisions anything.
//!
//! ```
//! use backend_namespace::host_check::{check_host, Check};
//! let report = check_host("agent-workspace");
//! if let Err(gaps) = report.is_ready_for(&[Check::UserNamespaces, Check::PidNamespace]) {
//!     for gap in gaps {
//!         eprintln!("{}: {} (fix: {})", gap.check, gap.detail, gap.remediation);
//!     }
//! }
//! ```
//!
//! # What each check looks at
//!
//! | check | source |
//! |---|---|
//! | user namespaces | `/proc/sys/user/max_user_namespaces` > 0; Debian's `kernel.unprivileged_userns_clone`; Ubuntu's `kernel.apparmor_restrict_unprivileged_userns` (both only restrict unprivileged callers); the creation probe below |
//! | each namespace kind | `/proc/self/ns/<kind>` exists (the kernel has it) **and** a real creation probe: one forked child calls `unshare(CLONE_NEWUSER)` and then `unshare` of mount, pid, net, uts, ipc and cgroup one by one, and reports failures in its exit code. `clone` per kind would be heavier; presence alone would miss a restriction (an outer sandbox's seccomp filter, an LSM, a chroot). The child runs only raw syscalls and `_exit`, so the probe is safe from a multi-threaded runner. |
//! | cgroup memory / pids / cpu | v1: a `cgroup` mount in `/proc/self/mountinfo` whose options name the controller; v2: `cgroup.controllers` at each `cgroup2` mount point lists it |
//! | seccomp | `/proc/self/status` has `Seccomp:` (`CONFIG_SECCOMP`) and `Seccomp_filters:`, or `seccomp(SECCOMP_GET_ACTION_AVAIL, RET_ERRNO)` succeeds (filter mode) |
//! | overlayfs | `/proc/filesystems` lists `overlay` |
//! | idmapped mounts | `/proc/sys/kernel/osrelease` ≥ 5.19 (overlayfs over an idmapped lower layer) **and** a real probe of the root directory's file system: one forked child makes a detached copy of its mount (`open_tree(OPEN_TREE_CLONE)`), gets a user namespace from a grandchild cloned into one with `CLONE_FILES` (it opens `/proc/self/ns/user` into the shared descriptor table and exits), and sets `MOUNT_ATTR_IDMAP` on the copy, as `spawn/idmapped.rs` does; the copy is never attached and goes with the child. The child reports over a pipe, running only raw syscalls and `_exit`. [`check_idmapped_mounts`] probes another directory (the base-tree cache's). Required for layered checkouts only ([`Check::REQUIRED_LAYERED`]). |
//! | Landlock | `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)` returns the ABI |
//! | cgroup delegation | as root: nothing needed; otherwise the run groups' parent directory exists in every hierarchy the caller's runs use and is the caller's own ([`crate::cgroup::delegation`]); `check-host --fix --user NAME` makes it ([`crate::cgroup::delegate`]) |
//! | disk caps | root (a run's disk is mounted on the host), `mkfs.ext4` where [`crate::disk`] looks for it, `/dev/loop-control`; only contracts with `environment.limits.disk` need it |
//!
//! # Cost
//!
//! Measured on the reference host (Debian 12, kernel 6.18, 2 cores, debug build):
//! 2.5 to 3.3 ms over five runs, most of it the two probes (two forks and a clone, seven `unshare`s, one
//! `open_tree` and one `mount_setattr`); far inside the 500 ms budget. Tests do not assert it. Every
//! call logs its duration with `tracing` (`elapsed_us`) and records it in
//! [`HostReport::elapsed_us`].
//!
//! # Ambient authority
//!
//! [`check_host`] reads host files under `/proc`, `/sys` and `/etc`, queries the
//! caller's identity and forks two short-lived children (one of which clones a
//! grandchild). It changes nothing on the host: the idmapped mount it makes is
//! detached and freed when the probe child exits.

pub(crate) mod parse;
mod probe;
#[cfg(test)]
mod tests;

use std::fmt;
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// One thing the namespace backend may need from the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Check {
    /// Creating user namespaces.
    UserNamespaces,
    /// Mount namespaces.
    MountNamespace,
    /// Pid namespaces.
    PidNamespace,
    /// Network namespaces.
    NetNamespace,
    /// UTS (hostname) namespaces.
    UtsNamespace,
    /// IPC namespaces.
    IpcNamespace,
    /// Cgroup namespaces.
    CgroupNamespace,
    /// The memory cgroup controller (v1 or v2).
    CgroupMemory,
    /// The pids cgroup controller (v1 or v2).
    CgroupPids,
    /// The cpu cgroup controller (v1 or v2).
    CgroupCpu,
    /// Seccomp in filter mode.
    Seccomp,
    /// The overlay filesystem.
    Overlayfs,
    /// Idmapped mounts under an overlay (kernel >= 5.19), for a layered checkout's
    /// lower layer.
    IdmappedMounts,
    /// Landlock (any ABI version).
    Landlock,
    /// For a non-root caller: a cgroup subtree delegated to it, where its runs
    /// make their groups.
    CgroupDelegation,
    /// Capped disks (`environment.limits.disk`): root, `mkfs.ext4` and loop devices.
    DiskCaps,
}

impl Check {
    /// Every check, in report order.
    pub const ALL: [Check; 16] = [
        Check::UserNamespaces,
        Check::MountNamespace,
        Check::PidNamespace,
        Check::NetNamespace,
        Check::UtsNamespace,
        Check::IpcNamespace,
        Check::CgroupNamespace,
        Check::CgroupMemory,
        Check::CgroupPids,
        Check::CgroupCpu,
        Check::Seccomp,
        Check::Overlayfs,
        Check::IdmappedMounts,
        Check::Landlock,
        Check::CgroupDelegation,
        Check::DiskCaps,
    ];

    /// What a run over a standalone checkout cannot do without: every namespace a
    /// run enters (the cgroup namespace included), the cgroup controllers its limits
    /// use, seccomp, and (for a non-root caller) a delegated cgroup subtree. Overlayfs,
    /// idmapped mounts, Landlock and disk caps are optional for it.
    pub const REQUIRED_STANDALONE: [Check; 12] = Check::all_but(&[
        Check::Overlayfs,
        Check::IdmappedMounts,
        Check::Landlock,
        Check::DiskCaps,
    ]);

    /// What a run over a layered checkout cannot do without:
    /// [`Check::REQUIRED_STANDALONE`], overlayfs and idmapped mounts (the shared
    /// base tree is the overlay's lower layer, seen through an idmapped mount).
    pub const REQUIRED_LAYERED: [Check; 14] = Check::all_but(&[Check::Landlock, Check::DiskCaps]);

    /// [`Check::ALL`] without `skip`, in its order; `N` must be the count left
    /// (checked at compile time where a const uses it).
    const fn all_but<const N: usize>(skip: &[Check]) -> [Check; N] {
        let mut out = [Check::UserNamespaces; N];
        let (mut i, mut n) = (0, 0);
        while i < Check::ALL.len() {
            let check = Check::ALL[i];
            let mut skipped = false;
            let mut j = 0;
            while j < skip.len() {
                skipped |= skip[j] as u8 == check as u8;
                j += 1;
            }
            if !skipped {
                out[n] = check;
                n += 1;
            }
            i += 1;
        }
        assert!(n == N, "N is not the number of checks left");
        out
    }

    /// Whether a run needs this check `Ok`: [`Check::REQUIRED_LAYERED`] for a
    /// layered checkout, else [`Check::REQUIRED_STANDALONE`].
    pub fn is_required(self, layered: bool) -> bool {
        if layered {
            Check::REQUIRED_LAYERED.contains(&self)
        } else {
            Check::REQUIRED_STANDALONE.contains(&self)
        }
    }

    /// The snake-case name, as serialized.
    pub fn name(self) -> &'static str {
        match self {
            Check::UserNamespaces => "user_namespaces",
            Check::MountNamespace => "mount_namespace",
            Check::PidNamespace => "pid_namespace",
            Check::NetNamespace => "net_namespace",
            Check::UtsNamespace => "uts_namespace",
            Check::IpcNamespace => "ipc_namespace",
            Check::CgroupNamespace => "cgroup_namespace",
            Check::CgroupMemory => "cgroup_memory",
            Check::CgroupPids => "cgroup_pids",
            Check::CgroupCpu => "cgroup_cpu",
            Check::Seccomp => "seccomp",
            Check::Overlayfs => "overlayfs",
            Check::IdmappedMounts => "idmapped_mounts",
            Check::Landlock => "landlock",
            Check::CgroupDelegation => "cgroup_delegation",
            Check::DiskCaps => "disk_caps",
        }
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The outcome of one check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Available to this caller.
    Ok,
    /// Not present in this kernel or on this host.
    Missing,
    /// Present, but refused to this caller (a sysctl, an LSM, an outer sandbox).
    Restricted,
}

/// One check's result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// What was checked.
    pub check: Check,
    /// The outcome.
    pub status: Status,
    /// What was observed (values read, errors seen).
    pub detail: String,
    /// What an administrator can do about it; empty when the status is `Ok`.
    pub remediation: String,
}

impl Finding {
    pub(crate) fn ok(check: Check, detail: impl Into<String>) -> Self {
        Self {
            check,
            status: Status::Ok,
            detail: detail.into(),
            remediation: String::new(),
        }
    }

    pub(crate) fn gap(
        check: Check,
        status: Status,
        detail: impl Into<String>,
        remediation: impl Into<String>,
    ) -> Self {
        Self {
            check,
            status,
            detail: detail.into(),
            remediation: remediation.into(),
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {:?}: {}", self.check, self.status, self.detail)?;
        if !self.remediation.is_empty() {
            write!(f, " (remediation: {})", self.remediation)?;
        }
        Ok(())
    }
}

/// Every finding of one [`check_host`] run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostReport {
    /// One finding per [`Check`], in [`Check::ALL`] order.
    pub findings: Vec<Finding>,
    /// How long the checks took, in microseconds.
    pub elapsed_us: u64,
}

impl HostReport {
    /// The finding for `check`, if it was checked.
    pub fn finding(&self, check: Check) -> Option<&Finding> {
        self.findings.iter().find(|f| f.check == check)
    }

    /// `Ok` when every check in `needs` is `Ok`; otherwise the findings that are not
    /// (a check missing from the report counts as `Missing`).
    pub fn is_ready_for(&self, needs: &[Check]) -> Result<(), Vec<Finding>> {
        let mut gaps: Vec<Finding> = Vec::new();
        for &need in needs {
            if gaps.iter().any(|g| g.check == need) {
                continue;
            }
            match self.finding(need) {
                Some(f) if f.status == Status::Ok => {}
                Some(f) => gaps.push(f.clone()),
                None => gaps.push(Finding::gap(
                    need,
                    Status::Missing,
                    "this check is not in the report",
                    "run check_host() again with this version of the library",
                )),
            }
        }
        if gaps.is_empty() { Ok(()) } else { Err(gaps) }
    }
}

/// Check what this host supports for a caller whose runs make their groups
/// under `cgroup_parent`. Takes a few milliseconds (see the module docs).
///
/// # Ambient authority
///
/// Reads `/proc`, `/sys/fs/cgroup`, `/etc/passwd` and the caller's
/// identity, and forks two children: one creates (and drops) namespaces, one makes
/// (and drops) a detached idmapped mount of `/`.
pub fn check_host(cgroup_parent: &str) -> HostReport {
    let start = Instant::now();
    let findings = probe::run_all(cgroup_parent);
    let elapsed_us = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
    let gaps = findings.iter().filter(|f| f.status != Status::Ok).count();
    tracing::info!(elapsed_us, gaps, "host check finished");
    HostReport {
        findings,
        elapsed_us,
    }
}

/// Whether this process's runs can have layered checkouts: the kernel has
/// overlayfs, and a kernel new enough for how this caller mounts it (root:
/// over an idmapped lower layer, Linux 5.19; an ordinary user: in a user
/// namespace of its own, Linux 5.11). Where they cannot, a checkout is a
/// standalone copy (`source.materialization = "auto"` becomes `standalone`).
/// Cheap: reads two `/proc` files, forks nothing ([`check_host`] probes
/// idmapped mounts for real).
///
/// # Ambient authority
///
/// Reads `/proc/filesystems` and `/proc/sys/kernel/osrelease`.
pub fn layered_checkouts_here() -> bool {
    let overlay = std::fs::read_to_string("/proc/filesystems")
        .is_ok_and(|text| parse::overlayfs(Some(&text)).status == Status::Ok);
    let needed = if nix::unistd::geteuid().is_root() {
        (5, 19)
    } else {
        (5, 11)
    };
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .and_then(|release| parse::kernel_version(&release));
    overlay && kernel.is_some_and(|version| version >= needed)
}

/// The [`Check::IdmappedMounts`] finding for the file system of `dir` (say, a
/// layered stack's base-tree cache root), probed as [`check_host`] probes `/`.
///
/// # Ambient authority
///
/// Reads `/proc/sys/kernel/osrelease` and forks one child that makes (and drops) a
/// detached idmapped mount of `dir`.
pub fn check_idmapped_mounts(dir: &std::path::Path) -> Finding {
    probe::idmapped_mounts(dir, nix::unistd::geteuid().is_root())
}

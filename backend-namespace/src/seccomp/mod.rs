//! The seccomp filter for what namespaces and the capability drop do not cover.
//!
//! Namespaces give a run its own view of mounts, pids, network, hostname and IPC, and
//! the emptied capability sets take away most privileged operations. What is left are
//! kernel interfaces that are reachable *without* a capability, that are checked
//! against the *initial* user namespace only when the kernel is configured a certain
//! way, or that are large attack surface for little use to a coding agent. The filter
//! answers those with `EPERM` (so programs get a clean error, not a `SIGSYS`) and lets
//! everything else through (default action: allow).
//!
//! | syscall | what it would allow | why namespaces / cap drop do not already stop it |
//! |---|---|---|
//! | `unshare`, `clone` with `CLONE_NEWUSER` | a nested user namespace, in which the process holds every capability again | creating a user namespace needs no capability at all; it is the entry point to most namespace-reachable kernel bugs (netfilter, overlayfs, mount) |
//! | `clone3` (`ENOSYS`) | the same, with flags in a struct seccomp cannot read | BPF sees only the pointer; `ENOSYS` makes libc fall back to `clone`, whose flags are checked (what runc, crun and Docker do) |
//! | `setns` | joining another namespace through an inherited or passed fd | an fd to a host namespace can leak in; nested user namespaces make it usable |
//! | `io_uring_setup`/`_enter`/`_register` | file and network I/O that seccomp never sees (operations run in kernel workers) | no capability needed; a bypass of this very filter and a frequent source of kernel bugs |
//! | `kexec_load`, `kexec_file_load` | replacing the running kernel | needs `CAP_SYS_BOOT` in the initial namespace, which a host-root run without a user namespace could still hold |
//! | `bpf` | loading BPF programs, reading maps | unprivileged BPF may be enabled (`kernel.unprivileged_bpf_disabled=0`); large verifier attack surface |
//! | `perf_event_open` | sampling other processes, kernel addresses, side channels | allowed to unprivileged users when `perf_event_paranoid` <= 2 |
//! | `ptrace`, `process_vm_readv`/`_writev` (unless `allow_ptrace`) | reading and writing the memory of other processes of the same uid | same-uid tracing needs no capability; the pid namespace still holds every process of the run, including helpers holding credentials |
//! | `pidfd_getfd`, `process_madvise`, `kcmp` (unless `allow_ptrace`) | taking a copy of another process's descriptor (e.g. the namespace init's status pipe), acting on its memory, comparing its descriptors and mappings | each is checked with the same ptrace access mode as `ptrace` itself, so it is allowed wherever same-uid tracing is |
//! | `keyctl`, `add_key`, `request_key` | the kernel keyring, which is **not** namespaced | keyrings are per user, shared with the host user of the same uid; credentials can be read or planted |
//! | `init_module`, `finit_module`, `delete_module` | loading kernel code | needs `CAP_SYS_MODULE` in the initial namespace: belt and braces for host-root runs |
//! | `open_by_handle_at`, `name_to_handle_at` | opening files by handle, bypassing path lookup and the mount root (the "shocker" escape) | needs `CAP_DAC_READ_SEARCH` (initial ns), but the handle leaks inode ids; blocked as in Docker's profile |
//! | `swapon`, `swapoff`, `reboot` | host-wide state | `CAP_SYS_ADMIN`/`CAP_SYS_BOOT`; `reboot` in a pid namespace kills its init, which should go through the runner |
//! | `settimeofday`, `clock_settime`, `clock_adjtime`, `adjtimex` | setting the host clock | time is not namespaced for writes (time namespaces only offset monotonic/boottime) |
//! | `acct` | process accounting to a file | host-wide; `CAP_SYS_PACCT` |
//! | `quotactl`, `quotactl_fd` | filesystem quotas | host-wide; reaches filesystem code with user-controlled input |
//! | `userfaultfd` | pausing kernel accesses to user memory, a standard kernel-exploit primitive | needs no capability when `vm.unprivileged_userfaultfd=1`, and since 5.11 never for user-mode faults (`UFFD_USER_MODE_ONLY`) |
//! | `mount`, `umount2`, `pivot_root`, `fsopen`, `fsconfig`, `fsmount`, `fspick`, `move_mount`, `open_tree`, `mount_setattr` | changing the mount plan that was applied | in its own user + mount namespace the run holds `CAP_SYS_ADMIN` over its mounts; it could unmount a read-only overlay and reveal what is under it. Install the filter **after** the mount plan is applied. |
//! | `chmod`, `fchmod`, `fchmodat`, `fchmodat2`, `creat`, `open`, `openat`, `mknod`, `mknodat` with a set-id mode or a device's; `openat2` (`ENOSYS`) | a set-user-id file in a cache or store the host reaches, owned by the host id the run writes as (host root for a root-owned cache) | the owner of a file may set its set-id bits with no capability; see `file_modes.rs` |
//!
//! On x86_64, x32 syscall numbers (bit `0x4000_0000`, same audit architecture) answer
//! `ENOSYS`, so no rule can be bypassed through the x32 ABI; any other architecture
//! (the 32-bit compat ABIs) kills the process, as seccompiler does.
//!
//! # Where to install
//!
//! A seccomp filter applies to the **calling thread** (and what it later creates or
//! execs). Install it in the child, after `fork`/`clone`, after the mount plan is
//! applied, immediately before `exec` — or, as [`crate::spawn`] does (with
//! [`SeccompPolicy::default()`] unless the request opts out), in the namespace's
//! pid 1 right before it forks the command, so that no process of the run is
//! without it. [`SeccompFilter::install`] sets
//! `no_new_privs` first (required by the kernel for an unprivileged filter) and then
//! calls `seccomp(SECCOMP_SET_MODE_FILTER)`: two syscalls on a program built before the
//! fork, no allocation, no locks — safe between `fork` and `exec`.
//!
//! ```
//! use backend_namespace::seccomp::{SeccompFilter, SeccompPolicy};
//! let filter = SeccompFilter::new(&SeccompPolicy::default())?; // before fork
//! // in the child, after the mount plan, before exec: filter.install()?;
//! # Ok::<(), backend_namespace::seccomp::SeccompError>(())
//! ```

mod bpf;
mod dispatch;
mod file_modes;
mod prologue;
mod table;
#[cfg(test)]
mod tests;

use seccompiler::{BpfProgram, TargetArch};
use serde::{Deserialize, Serialize};

use dispatch::{Rule, dispatch};

pub use dispatch::JumpTooFar;

/// What a run may do beyond the default. Deny by default: [`Default`] turns both off.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeccompPolicy {
    /// Let the run create nested user namespaces (`unshare`/`clone` with
    /// `CLONE_NEWUSER`, `clone3`) and join namespaces (`setns`). Needed only for tools
    /// that sandbox themselves (bubblewrap, rootless podman, Chromium's sandbox).
    pub allow_nested_user_namespaces: bool,
    /// Let the run use `ptrace`, `process_vm_readv`/`_writev`, `pidfd_getfd`,
    /// `process_madvise` and `kcmp` (debuggers, `strace`, `rr`).
    pub allow_ptrace: bool,
}

/// How a denied syscall fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Denial {
    /// Always fails with `EPERM`.
    Eperm,
    /// Fails with `EPERM` when its first argument has `CLONE_NEWUSER` set.
    EpermWithCloneNewuser,
    /// Fails with `ENOSYS` (so that libc falls back to an older syscall).
    Enosys,
    /// Fails with `EPERM` when its mode sets `S_ISUID` or `S_ISGID`.
    EpermWithSetIdMode,
    /// Fails with `EPERM` when it creates a file whose mode sets `S_ISUID` or
    /// `S_ISGID`.
    EpermCreatingSetIdFile,
    /// Fails with `EPERM` when it makes a set-id file or a device node.
    EpermSetIdOrDeviceNode,
}

/// One syscall the filter denies, for evidence (`observed.json`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct DeniedSyscall {
    /// The syscall's name.
    pub name: &'static str,
    /// How it fails.
    pub denial: Denial,
}

impl SeccompPolicy {
    /// The syscalls this policy denies, in the order of the module documentation.
    pub fn denied_syscalls(&self) -> Vec<DeniedSyscall> {
        let switched = table::TABLE.iter().filter_map(|entry| {
            entry.denial(self).map(|denial| DeniedSyscall {
                name: entry.name,
                denial,
            })
        });
        let modes = file_modes::MODE_TABLE.iter().map(|entry| DeniedSyscall {
            name: entry.name,
            denial: entry.check.denial(),
        });
        switched.chain(modes).collect()
    }
}

/// Building or installing the filter failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SeccompError {
    /// This process runs on an architecture seccompiler does not know.
    #[error("seccomp: the host architecture {arch:?} is not supported (x86_64, aarch64)")]
    HostArch {
        /// `std::env::consts::ARCH`.
        arch: &'static str,
        /// seccompiler's refusal.
        #[source]
        source: seccompiler::BackendError,
    },
    /// seccompiler knows the architecture, this module has no syscall table for it.
    #[error("seccomp: no syscall table for {arch:?} (supported: x86_64, aarch64)")]
    NoSyscallTable {
        /// The requested architecture.
        arch: TargetArch,
    },
    /// The rules could not be compiled to BPF.
    #[error("seccomp: compiling the filter for {arch:?} failed")]
    Compile {
        /// The target architecture.
        arch: TargetArch,
        /// Why.
        #[source]
        source: JumpTooFar,
    },
    /// `prctl(PR_SET_NO_NEW_PRIVS)` or `seccomp(SECCOMP_SET_MODE_FILTER)` failed.
    #[error("seccomp: installing the filter on the calling thread failed")]
    Install {
        /// seccompiler's error (carries the OS error).
        #[source]
        source: seccompiler::Error,
    },
}

/// The architecture this process runs on, as a seccompiler target.
pub fn current_arch() -> Result<TargetArch, SeccompError> {
    let arch = std::env::consts::ARCH;
    TargetArch::try_from(arch).map_err(|source| SeccompError::HostArch { arch, source })
}

/// Build the BPF program for `policy` on `arch` (x86_64 or aarch64).
///
/// Default action allow; the syscalls in the module documentation fail with `EPERM`
/// (`clone3` and, on x86_64, x32 numbers with `ENOSYS`); a foreign architecture kills
/// the process.
pub fn build_filter(policy: &SeccompPolicy, arch: TargetArch) -> Result<BpfProgram, SeccompError> {
    let audit_arch = prologue::audit_arch(arch).ok_or(SeccompError::NoSyscallTable { arch })?;
    let x86_64 = matches!(arch, TargetArch::x86_64);

    let mut rules: Vec<(u32, Rule)> = table::TABLE
        .iter()
        .filter_map(|entry| {
            let nr = if x86_64 { entry.x86_64 } else { entry.aarch64 };
            entry.rule(policy).map(|rule| (nr, rule))
        })
        .collect();
    rules.extend(file_modes::MODE_TABLE.iter().filter_map(|entry| {
        let nr = if x86_64 { entry.x86_64 } else { entry.aarch64 };
        nr.map(|nr| (nr, Rule::Mode(entry.check)))
    }));
    rules.sort_unstable_by_key(|(nr, _)| *nr);
    let compiled = dispatch(&rules).map_err(|source| SeccompError::Compile { arch, source })?;

    let mut program = prologue::prologue(audit_arch, x86_64, policy);
    program.extend(compiled);
    Ok(program)
}

/// A compiled filter, ready to be installed in a child between `fork` and `exec`.
#[derive(Clone, Debug)]
pub struct SeccompFilter {
    policy: SeccompPolicy,
    arch: TargetArch,
    program: BpfProgram,
}

impl SeccompFilter {
    /// Build the filter for `policy` on the architecture this process runs on.
    /// Call it before `fork`: it allocates.
    pub fn new(policy: &SeccompPolicy) -> Result<Self, SeccompError> {
        Self::for_arch(policy, current_arch()?)
    }

    /// Build the filter for `policy` on `arch`.
    pub fn for_arch(policy: &SeccompPolicy, arch: TargetArch) -> Result<Self, SeccompError> {
        Ok(Self {
            policy: *policy,
            arch,
            program: build_filter(policy, arch)?,
        })
    }

    /// The policy this filter was built from.
    pub fn policy(&self) -> &SeccompPolicy {
        &self.policy
    }

    /// The target architecture.
    pub fn arch(&self) -> TargetArch {
        self.arch
    }

    /// The BPF program.
    pub fn program(&self) -> &[seccompiler::sock_filter] {
        &self.program
    }

    /// Install the filter on the **calling thread**: `prctl(PR_SET_NO_NEW_PRIVS, 1)`
    /// then `seccomp(SECCOMP_SET_MODE_FILTER, 0, prog)`.
    ///
    /// Async-signal-safe on success and on failure (two syscalls on memory prepared
    /// before; the error carries an OS error code, no allocation): call it in the
    /// child after `fork`/`clone`, after the mount plan is applied, right before
    /// `exec`. Calling it in a runner thread would filter that thread for good.
    ///
    /// The filter must match the running architecture: one built with
    /// [`SeccompFilter::for_arch`] for another architecture kills the process at its
    /// next syscall.
    pub fn install(&self) -> Result<(), SeccompError> {
        seccompiler::apply_filter(&self.program).map_err(|source| SeccompError::Install { source })
    }
}

//! The denied syscalls: one row per syscall, with its number on each supported
//! architecture and the policy switch (if any) that lets it through.
//!
//! Numbers are from the kernel's generic (`include/uapi/asm-generic/unistd.h`, aarch64)
//! and x86_64 (`arch/x86/entry/syscalls/syscall_64.tbl`) tables, as mirrored by the
//! `libc` crate.

use super::dispatch::Rule;
use super::{Denial, SeccompPolicy};

/// When a row of the table applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Always denied with `EPERM`.
    Always,
    /// Denied with `EPERM` unless `allow_nested_user_namespaces`.
    UnlessNestedUserns,
    /// Denied with `EPERM` when argument 0 has `CLONE_NEWUSER` set, unless
    /// `allow_nested_user_namespaces`.
    NewUserFlagUnlessNestedUserns,
    /// Denied with `ENOSYS` (in the hand-written prologue), unless
    /// `allow_nested_user_namespaces`.
    EnosysUnlessNestedUserns,
    /// Denied with `EPERM` unless `allow_ptrace`.
    UnlessPtrace,
}

/// One denied syscall.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    pub(crate) name: &'static str,
    pub(crate) x86_64: u32,
    pub(crate) aarch64: u32,
    pub(crate) gate: Gate,
}

impl Entry {
    /// What this row does under `policy`, or `None` when the policy lets it through.
    pub(crate) fn denial(&self, policy: &SeccompPolicy) -> Option<Denial> {
        match self.gate {
            Gate::Always => Some(Denial::Eperm),
            Gate::UnlessNestedUserns if !policy.allow_nested_user_namespaces => Some(Denial::Eperm),
            Gate::NewUserFlagUnlessNestedUserns if !policy.allow_nested_user_namespaces => {
                Some(Denial::EpermWithCloneNewuser)
            }
            Gate::EnosysUnlessNestedUserns if !policy.allow_nested_user_namespaces => {
                Some(Denial::Enosys)
            }
            Gate::UnlessPtrace if !policy.allow_ptrace => Some(Denial::Eperm),
            _ => None,
        }
    }

    /// The search's rule for this row under `policy`, or `None` when the policy
    /// lets it through or the prologue answers it (`ENOSYS`).
    pub(crate) fn rule(&self, policy: &SeccompPolicy) -> Option<Rule> {
        match self.denial(policy)? {
            Denial::EpermWithCloneNewuser => Some(Rule::EpermWithCloneNewuser),
            Denial::Enosys => None,
            _ => Some(Rule::Eperm),
        }
    }
}

const fn e(name: &'static str, x86_64: u32, aarch64: u32, gate: Gate) -> Entry {
    Entry {
        name,
        x86_64,
        aarch64,
        gate,
    }
}

/// `clone3`: the same number on both architectures.
pub(crate) const CLONE3: u32 = 435;

/// The table. Keep it in the order of the module documentation.
pub(crate) const TABLE: &[Entry] = &[
    e("unshare", 272, 97, Gate::NewUserFlagUnlessNestedUserns),
    e("clone", 56, 220, Gate::NewUserFlagUnlessNestedUserns),
    e("clone3", CLONE3, CLONE3, Gate::EnosysUnlessNestedUserns),
    e("setns", 308, 268, Gate::UnlessNestedUserns),
    e("io_uring_setup", 425, 425, Gate::Always),
    e("io_uring_enter", 426, 426, Gate::Always),
    e("io_uring_register", 427, 427, Gate::Always),
    e("kexec_load", 246, 104, Gate::Always),
    e("kexec_file_load", 320, 294, Gate::Always),
    e("bpf", 321, 280, Gate::Always),
    e("perf_event_open", 298, 241, Gate::Always),
    e("ptrace", 101, 117, Gate::UnlessPtrace),
    e("process_vm_readv", 310, 270, Gate::UnlessPtrace),
    e("process_vm_writev", 311, 271, Gate::UnlessPtrace),
    e("pidfd_getfd", 438, 438, Gate::UnlessPtrace),
    e("process_madvise", 440, 440, Gate::UnlessPtrace),
    e("kcmp", 312, 272, Gate::UnlessPtrace),
    e("keyctl", 250, 219, Gate::Always),
    e("add_key", 248, 217, Gate::Always),
    e("request_key", 249, 218, Gate::Always),
    e("init_module", 175, 105, Gate::Always),
    e("finit_module", 313, 273, Gate::Always),
    e("delete_module", 176, 106, Gate::Always),
    e("open_by_handle_at", 304, 265, Gate::Always),
    e("name_to_handle_at", 303, 264, Gate::Always),
    e("swapon", 167, 224, Gate::Always),
    e("swapoff", 168, 225, Gate::Always),
    e("reboot", 169, 142, Gate::Always),
    e("settimeofday", 164, 170, Gate::Always),
    e("clock_settime", 227, 112, Gate::Always),
    e("clock_adjtime", 305, 266, Gate::Always),
    e("adjtimex", 159, 171, Gate::Always),
    e("acct", 163, 89, Gate::Always),
    e("quotactl", 179, 60, Gate::Always),
    e("quotactl_fd", 443, 443, Gate::Always),
    e("userfaultfd", 323, 282, Gate::Always),
    e("mount", 165, 40, Gate::Always),
    e("umount2", 166, 39, Gate::Always),
    e("pivot_root", 155, 41, Gate::Always),
    e("fsopen", 430, 430, Gate::Always),
    e("fsconfig", 431, 431, Gate::Always),
    e("fsmount", 432, 432, Gate::Always),
    e("fspick", 433, 433, Gate::Always),
    e("move_mount", 429, 429, Gate::Always),
    e("open_tree", 428, 428, Gate::Always),
    e("mount_setattr", 442, 442, Gate::Always),
];

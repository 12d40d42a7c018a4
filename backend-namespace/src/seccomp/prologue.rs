//! The start of the program: a foreign architecture is killed, `clone3` fails with
//! `ENOSYS` (not `EPERM` as the denied rows do, so that libc falls back to `clone`),
//! and on x86_64 the x32 syscall numbers must not slip past rules written for the
//! 64-bit numbers.
//!
//! The search over the denied syscalls ([`super::dispatch`]) follows it, entered
//! with the syscall number loaded.

use seccompiler::{TargetArch, sock_filter};

use super::SeccompPolicy;

use super::bpf::{
    DATA_ARCH, DATA_NR, JEQ_K, JGE_K, LD_W_ABS, RET_ERRNO, RET_K, RET_KILL_PROCESS, jump, stmt,
};

/// `AUDIT_ARCH_X86_64`: `EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE`.
pub(crate) const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
/// `AUDIT_ARCH_AARCH64`: `EM_AARCH64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE`.
pub(crate) const AUDIT_ARCH_AARCH64: u32 = 183 | 0x8000_0000 | 0x4000_0000;
/// `__X32_SYSCALL_BIT`: x32 syscalls carry the x86_64 audit arch and this bit.
pub(crate) const X32_SYSCALL_BIT: u32 = 0x4000_0000;

const ENOSYS: u32 = 38;

/// The audit architecture value the kernel reports for `arch`, if supported.
pub(crate) fn audit_arch(arch: TargetArch) -> Option<u32> {
    match arch {
        TargetArch::x86_64 => Some(AUDIT_ARCH_X86_64),
        TargetArch::aarch64 => Some(AUDIT_ARCH_AARCH64),
        _ => None,
    }
}

/// The prologue: kill a foreign architecture (as seccompiler does), then answer
/// `ENOSYS` for x32 numbers (x86_64) and for `clone3` (unless the policy allows nested
/// user namespaces), then fall through to the search, the number loaded.
pub(crate) fn prologue(audit_arch: u32, x86_64: bool, policy: &SeccompPolicy) -> Vec<sock_filter> {
    let enosys = RET_ERRNO | ENOSYS;
    let mut p = vec![
        stmt(LD_W_ABS, DATA_ARCH),
        jump(JEQ_K, audit_arch, 1, 0),
        stmt(RET_K, RET_KILL_PROCESS),
        stmt(LD_W_ABS, DATA_NR),
    ];
    if x86_64 {
        p.push(jump(JGE_K, X32_SYSCALL_BIT, 0, 1));
        p.push(stmt(RET_K, enosys));
    }
    if !policy.allow_nested_user_namespaces {
        p.push(jump(JEQ_K, super::table::CLONE3, 0, 1));
        p.push(stmt(RET_K, enosys));
    }
    p
}

//! The hand-written start of the program, for what one seccompiler filter cannot say:
//! seccompiler gives every matching rule the same action (`EPERM` here), but `clone3`
//! must fail with `ENOSYS`, and on x86_64 the x32 syscall numbers must not slip past
//! rules written for the 64-bit numbers.
//!
//! Classic BPF only jumps forward, so prepending instructions leaves the jump offsets
//! of the seccompiler program that follows untouched; that program repeats the
//! architecture check, which costs three instructions and nothing else.

use seccompiler::{TargetArch, sock_filter};

use super::SeccompPolicy;

// Opcodes, from `linux/bpf_common.h`: class | size/op | mode/source.
/// `BPF_LD | BPF_W (0) | BPF_ABS`.
const BPF_LD_W_ABS: u16 = 0x20;
/// `BPF_JMP | BPF_JEQ | BPF_K (0)`.
const BPF_JMP_JEQ_K: u16 = 0x05 | 0x10;
/// `BPF_JMP | BPF_JGE | BPF_K (0)`.
const BPF_JMP_JGE_K: u16 = 0x05 | 0x30;
/// `BPF_RET | BPF_K (0)`.
const BPF_RET_K: u16 = 0x06;

// Offsets in `struct seccomp_data`.
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;

// Return values, from `linux/seccomp.h`.
pub(crate) const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
pub(crate) const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
#[cfg(test)]
pub(crate) const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;

/// `AUDIT_ARCH_X86_64`: `EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE`.
pub(crate) const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
/// `AUDIT_ARCH_AARCH64`: `EM_AARCH64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE`.
pub(crate) const AUDIT_ARCH_AARCH64: u32 = 183 | 0x8000_0000 | 0x4000_0000;
/// `__X32_SYSCALL_BIT`: x32 syscalls carry the x86_64 audit arch and this bit.
pub(crate) const X32_SYSCALL_BIT: u32 = 0x4000_0000;

const ENOSYS: u32 = 38;

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

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
/// user namespaces), then fall through to the seccompiler program.
pub(crate) fn prologue(audit_arch: u32, x86_64: bool, policy: &SeccompPolicy) -> Vec<sock_filter> {
    let enosys = SECCOMP_RET_ERRNO | ENOSYS;
    let mut p = vec![
        stmt(BPF_LD_W_ABS, DATA_ARCH),
        jump(BPF_JMP_JEQ_K, audit_arch, 1, 0),
        stmt(BPF_RET_K, SECCOMP_RET_KILL_PROCESS),
        stmt(BPF_LD_W_ABS, DATA_NR),
    ];
    if x86_64 {
        p.push(jump(BPF_JMP_JGE_K, X32_SYSCALL_BIT, 0, 1));
        p.push(stmt(BPF_RET_K, enosys));
    }
    if !policy.allow_nested_user_namespaces {
        p.push(jump(BPF_JMP_JEQ_K, super::table::CLONE3 as u32, 0, 1));
        p.push(stmt(BPF_RET_K, enosys));
    }
    p
}

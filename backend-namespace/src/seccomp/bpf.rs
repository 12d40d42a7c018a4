//! Classic BPF for seccomp: the opcodes, offsets and return values the
//! hand-written parts of the filter use, from `linux/bpf_common.h`,
//! `linux/filter.h` and `linux/seccomp.h`.

use seccompiler::sock_filter;

/// `BPF_LD | BPF_W (0) | BPF_ABS`.
pub(crate) const LD_W_ABS: u16 = 0x20;
/// `BPF_JMP | BPF_JEQ | BPF_K (0)`.
pub(crate) const JEQ_K: u16 = 0x05 | 0x10;
/// `BPF_JMP | BPF_JGE | BPF_K (0)`.
pub(crate) const JGE_K: u16 = 0x05 | 0x30;
/// `BPF_JMP | BPF_JSET | BPF_K (0)`.
pub(crate) const JSET_K: u16 = 0x05 | 0x40;
/// `BPF_ALU | BPF_AND | BPF_K (0)`.
pub(crate) const AND_K: u16 = 0x04 | 0x50;
/// `BPF_RET | BPF_K (0)`.
pub(crate) const RET_K: u16 = 0x06;

/// `seccomp_data.nr`.
pub(crate) const DATA_NR: u32 = 0;
/// `seccomp_data.arch`.
pub(crate) const DATA_ARCH: u32 = 4;
/// The low 32 bits of `seccomp_data.args[0]` (every supported architecture is
/// little-endian).
pub(crate) const DATA_ARG0_LOW: u32 = 16;

/// The low 32 bits of `seccomp_data.args[index]` (each argument is 8 bytes).
pub(crate) const fn arg_low(index: u8) -> u32 {
    DATA_ARG0_LOW + 8 * index as u32
}

/// `SECCOMP_RET_KILL_PROCESS`.
pub(crate) const RET_KILL_PROCESS: u32 = 0x8000_0000;
/// `SECCOMP_RET_ERRNO`, the errno in the low 16 bits.
pub(crate) const RET_ERRNO: u32 = 0x0005_0000;
/// `SECCOMP_RET_ALLOW`.
pub(crate) const RET_ALLOW: u32 = 0x7fff_0000;

/// An instruction without a jump.
pub(crate) fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

/// A conditional jump: `jt` or `jf` instructions forward.
pub(crate) fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

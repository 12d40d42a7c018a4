//! The container's seccomp filter: every system call allowed but those that
//! reach the kernel's shared state (mounts, modules, keys, time, tracing other
//! processes, new user namespaces, io_uring, bpf), which fail with `EPERM`;
//! `clone3` fails with `ENOSYS` (its flags cannot be inspected, so libc falls
//! back to `clone`, whose `CLONE_NEWUSER` is refused).
//!
//! Nor may a container make a file the host would honour: a mode with a
//! set-user-id or set-group-id bit (`chmod`, `fchmod`, `fchmodat`, `fchmodat2`,
//! `creat`, and `open`/`openat` when they create a file) or a device node
//! (`mknod`, `mknodat`) fails with `EPERM`, and `openat2`, whose mode seccomp
//! cannot read, with `ENOSYS` (callers fall back to `openat`). The owner of a
//! file may set its set-id bits with no capability, and what a container writes
//! to its cache or its checkout is a file on the host, owned by a host id.
//!
//! The runtime resolves each name through the libseccomp it was built with,
//! and one that does not know a syscall leaves its rule out without a word;
//! so the seal tries `fchmodat2` and `openat2` in the container before any
//! command runs, and fails unless they are refused
//! ([`ContainerError::SeccompNotKept`]).

use oci_spec::runtime::{
    Arch, LinuxSeccomp, LinuxSeccompAction, LinuxSeccompArg, LinuxSeccompArgBuilder,
    LinuxSeccompBuilder, LinuxSeccompOperator, LinuxSyscall, LinuxSyscallBuilder,
};

use crate::error::ContainerError;

/// Refused with `EPERM` whatever their arguments.
pub const DENIED: [&str; 43] = [
    "setns",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "kexec_load",
    "kexec_file_load",
    "bpf",
    "perf_event_open",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "process_madvise",
    "kcmp",
    "keyctl",
    "add_key",
    "request_key",
    "init_module",
    "finit_module",
    "delete_module",
    "open_by_handle_at",
    "name_to_handle_at",
    "swapon",
    "swapoff",
    "reboot",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "acct",
    "quotactl",
    "quotactl_fd",
    "userfaultfd",
    "mount",
    "umount2",
    "pivot_root",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
];

/// `CLONE_NEWUSER`, refused in `unshare` and `clone` flags.
const CLONE_NEWUSER: u64 = 0x1000_0000;
/// `S_ISUID` and `S_ISGID`, each refused in a mode.
const SET_ID_BITS: [u64; 2] = [0o4000, 0o2000];
/// `O_CREAT` and `__O_TMPFILE`: flags with which `open`/`openat` make a file.
const CREATING_FLAGS: [u64; 2] = [0o100, 0o2000_0000];
/// `S_IFMT`, and the device types refused under it (`S_IFCHR`, `S_IFBLK`).
const FILE_TYPE: u64 = 0o170000;
const DEVICE_TYPES: [u64; 2] = [0o020000, 0o060000];

/// Where each syscall that sets a mode has it (argument index).
const MODE_ARGUMENT: [(&str, usize); 5] = [
    ("chmod", 1),
    ("fchmod", 1),
    ("fchmodat", 2),
    ("fchmodat2", 2),
    ("creat", 1),
];
/// Where `open` and `openat` have their flags and their mode.
const CREATE_ARGUMENTS: [(&str, usize, usize); 2] = [("open", 1, 2), ("openat", 2, 3)];
/// Where `mknod` and `mknodat` have their mode.
const NODE_ARGUMENT: [(&str, usize); 2] = [("mknod", 1), ("mknodat", 2)];

/// The filter (x86-64 and its 32-bit ABI).
pub fn filter() -> Result<LinuxSeccomp, ContainerError> {
    let eperm = 1u32;
    let enosys = 38u32;
    let mut syscalls = vec![
        LinuxSyscallBuilder::default()
            .names(
                DENIED
                    .iter()
                    .map(|name| (*name).to_owned())
                    .collect::<Vec<_>>(),
            )
            .action(LinuxSeccompAction::ScmpActErrno)
            .errno_ret(eperm)
            .build()?,
        LinuxSyscallBuilder::default()
            .names(vec!["clone3".to_owned()])
            .action(LinuxSeccompAction::ScmpActErrno)
            .errno_ret(enosys)
            .build()?,
    ];
    // A new user namespace, asked for through the flags (argument 0).
    for name in ["unshare", "clone"] {
        syscalls.push(
            LinuxSyscallBuilder::default()
                .names(vec![name.to_owned()])
                .action(LinuxSeccompAction::ScmpActErrno)
                .errno_ret(eperm)
                .args(vec![
                    LinuxSeccompArgBuilder::default()
                        .index(0usize)
                        .value(CLONE_NEWUSER)
                        .value_two(CLONE_NEWUSER)
                        .op(LinuxSeccompOperator::ScmpCmpMaskedEq)
                        .build()?,
                ])
                .build()?,
        );
    }
    syscalls.extend(file_modes(eperm)?);
    syscalls.push(
        LinuxSyscallBuilder::default()
            .names(vec!["openat2".to_owned()])
            .action(LinuxSeccompAction::ScmpActErrno)
            .errno_ret(enosys)
            .build()?,
    );
    Ok(LinuxSeccompBuilder::default()
        .default_action(LinuxSeccompAction::ScmpActAllow)
        .architectures(vec![
            Arch::ScmpArchX86_64,
            Arch::ScmpArchX86,
            Arch::ScmpArchX32,
        ])
        .syscalls(syscalls)
        .build()?)
}

/// `(arg & mask) == value` on argument `index`.
fn masked(index: usize, mask: u64, value: u64) -> Result<LinuxSeccompArg, ContainerError> {
    Ok(LinuxSeccompArgBuilder::default()
        .index(index)
        .value(mask)
        .value_two(value)
        .op(LinuxSeccompOperator::ScmpCmpMaskedEq)
        .build()?)
}

/// `name` refused with `errno` when every one of `args` holds (the rules of one
/// syscall are alternatives: any one refuses it).
fn refused_when(
    name: &str,
    errno: u32,
    args: Vec<LinuxSeccompArg>,
) -> Result<LinuxSyscall, ContainerError> {
    Ok(LinuxSyscallBuilder::default()
        .names(vec![name.to_owned()])
        .action(LinuxSeccompAction::ScmpActErrno)
        .errno_ret(errno)
        .args(args)
        .build()?)
}

/// The rules that refuse a set-id mode or a device node (the module docs).
fn file_modes(eperm: u32) -> Result<Vec<LinuxSyscall>, ContainerError> {
    let mut rules = Vec::new();
    for bit in SET_ID_BITS {
        for (name, mode) in MODE_ARGUMENT.into_iter().chain(NODE_ARGUMENT) {
            rules.push(refused_when(name, eperm, vec![masked(mode, bit, bit)?])?);
        }
        for (name, flags, mode) in CREATE_ARGUMENTS {
            for creating in CREATING_FLAGS {
                let both = vec![masked(flags, creating, creating)?, masked(mode, bit, bit)?];
                rules.push(refused_when(name, eperm, both)?);
            }
        }
    }
    for device in DEVICE_TYPES {
        for (name, mode) in NODE_ARGUMENT {
            rules.push(refused_when(
                name,
                eperm,
                vec![masked(mode, FILE_TYPE, device)?],
            )?);
        }
    }
    Ok(rules)
}

//! The container's seccomp filter: every system call allowed but those that
//! reach the kernel's shared state (mounts, modules, keys, time, tracing other
//! processes, new user namespaces, io_uring, bpf), which fail with `EPERM`;
//! `clone3` fails with `ENOSYS` (its flags cannot be inspected, so libc falls
//! back to `clone`, whose `CLONE_NEWUSER` is refused).

use oci_spec::runtime::{
    Arch, LinuxSeccomp, LinuxSeccompAction, LinuxSeccompArgBuilder, LinuxSeccompBuilder,
    LinuxSeccompOperator, LinuxSyscallBuilder,
};

use crate::error::ContainerError;

/// Refused with `EPERM` whatever their arguments.
pub const DENIED: [&str; 42] = [
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
];

/// `CLONE_NEWUSER`, refused in `unshare` and `clone` flags.
const CLONE_NEWUSER: u64 = 0x1000_0000;

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

//! Unit tests: the program is run through a small classic-BPF interpreter, so both
//! architectures are checked here without installing anything.
#![allow(clippy::unwrap_used)] // panicking is how a test fails

use seccompiler::{TargetArch, sock_filter};

use super::bpf::{
    RET_ALLOW as SECCOMP_RET_ALLOW, RET_ERRNO as SECCOMP_RET_ERRNO,
    RET_KILL_PROCESS as SECCOMP_RET_KILL_PROCESS,
};
use super::file_modes::{MODE_TABLE, ModeCheck};
use super::prologue::{AUDIT_ARCH_AARCH64, AUDIT_ARCH_X86_64, X32_SYSCALL_BIT};
use super::table::TABLE;
use super::*;

const EPERM_RET: u32 = SECCOMP_RET_ERRNO | 1;
const ENOSYS_RET: u32 = SECCOMP_RET_ERRNO | 38;

/// Run `prog` on a `seccomp_data` (little endian, as on both targets).
fn run(prog: &[sock_filter], arch: u32, nr: u32, args: [u64; 6]) -> u32 {
    run_counted(prog, arch, nr, args).0
}

/// [`run`], and how many instructions ran.
fn run_counted(prog: &[sock_filter], arch: u32, nr: u32, args: [u64; 6]) -> (u32, usize) {
    let mut data = Vec::new();
    data.extend_from_slice(&nr.to_le_bytes());
    data.extend_from_slice(&arch.to_le_bytes());
    data.extend_from_slice(&0u64.to_le_bytes()); // instruction pointer
    for a in args {
        data.extend_from_slice(&a.to_le_bytes());
    }
    let (mut acc, mut pc, mut steps) = (0u32, 0usize, 0usize);
    loop {
        let ins = &prog[pc];
        pc += 1;
        steps += 1;
        match ins.code {
            0x20 => {
                let k = ins.k as usize;
                let mut w = [0u8; 4];
                w.copy_from_slice(&data[k..k + 4]);
                acc = u32::from_le_bytes(w);
            }
            0x54 => acc &= ins.k,
            0x05 => pc += ins.k as usize,
            0x15 | 0x25 | 0x35 | 0x45 => {
                let taken = match ins.code {
                    0x15 => acc == ins.k,
                    0x25 => acc > ins.k,
                    0x35 => acc >= ins.k,
                    _ => acc & ins.k != 0,
                };
                pc += usize::from(if taken { ins.jt } else { ins.jf });
            }
            0x06 => return (ins.k, steps),
            other => panic!("opcode {other:#x} not in the interpreter"),
        }
    }
}

fn nr(name: &str, arch: TargetArch) -> u32 {
    let e = TABLE.iter().find(|e| e.name == name).unwrap();
    if arch == TargetArch::x86_64 {
        e.x86_64
    } else {
        e.aarch64
    }
}

fn audit(arch: TargetArch) -> u32 {
    if arch == TargetArch::x86_64 {
        AUDIT_ARCH_X86_64
    } else {
        AUDIT_ARCH_AARCH64
    }
}

const ARCHES: [TargetArch; 2] = [TargetArch::x86_64, TargetArch::aarch64];
const NEWUSER: u64 = 0x1000_0000;
const SIGCHLD: u64 = 17;

#[test]
fn default_policy_denies_every_row_with_the_documented_errno() {
    for arch in ARCHES {
        let prog = build_filter(&SeccompPolicy::default(), arch).unwrap();
        for entry in TABLE {
            let n = nr(entry.name, arch);
            let ret = run(&prog, audit(arch), n, [NEWUSER, 0, 0, 0, 0, 0]);
            let want = if entry.name == "clone3" {
                ENOSYS_RET
            } else {
                EPERM_RET
            };
            assert_eq!(ret, want, "{} on {arch:?}", entry.name);
        }
    }
}

#[test]
fn ordinary_syscalls_and_plain_fork_are_allowed() {
    for arch in ARCHES {
        let prog = build_filter(&SeccompPolicy::default(), arch).unwrap();
        let a = audit(arch);
        // read, write, openat are 0, 1, 257 on x86_64 and 63, 64, 56 on aarch64.
        let plain: &[u32] = if arch == TargetArch::x86_64 {
            &[0, 1, 257]
        } else {
            &[63, 64, 56]
        };
        for &n in plain {
            assert_eq!(
                run(&prog, a, n, [0; 6]),
                SECCOMP_RET_ALLOW,
                "{n} on {arch:?}"
            );
        }
        let clone = nr("clone", arch);
        let unshare = nr("unshare", arch);
        // fork-like clone and unshare of other namespaces pass; CLONE_NEWUSER in any
        // combination does not; upper 32 bits are ignored by the kernel and here.
        assert_eq!(
            run(&prog, a, clone, [SIGCHLD, 0, 0, 0, 0, 0]),
            SECCOMP_RET_ALLOW
        );
        assert_eq!(
            run(&prog, a, unshare, [0x0002_0000, 0, 0, 0, 0, 0]),
            SECCOMP_RET_ALLOW
        );
        assert_eq!(
            run(
                &prog,
                a,
                clone,
                [NEWUSER | SIGCHLD | 0x2_0000, 0, 0, 0, 0, 0]
            ),
            EPERM_RET
        );
        assert_eq!(
            run(&prog, a, unshare, [NEWUSER | (1 << 40), 0, 0, 0, 0, 0]),
            EPERM_RET
        );
    }
}

#[test]
fn foreign_arch_is_killed_and_x32_is_enosys() {
    let prog = build_filter(&SeccompPolicy::default(), TargetArch::x86_64).unwrap();
    assert_eq!(
        run(&prog, AUDIT_ARCH_AARCH64, 0, [0; 6]),
        SECCOMP_RET_KILL_PROCESS
    );
    // i386 compat ABI: EM_386 | LE.
    assert_eq!(
        run(&prog, 3 | 0x4000_0000, 0, [0; 6]),
        SECCOMP_RET_KILL_PROCESS
    );
    let x32_unshare = X32_SYSCALL_BIT | 272;
    assert_eq!(
        run(
            &prog,
            AUDIT_ARCH_X86_64,
            x32_unshare,
            [NEWUSER, 0, 0, 0, 0, 0]
        ),
        ENOSYS_RET
    );
    let arm = build_filter(&SeccompPolicy::default(), TargetArch::aarch64).unwrap();
    assert_eq!(
        run(&arm, AUDIT_ARCH_X86_64, 0, [0; 6]),
        SECCOMP_RET_KILL_PROCESS
    );
}

#[test]
fn policy_switches_let_their_syscalls_through_and_nothing_else() {
    let nested = SeccompPolicy {
        allow_nested_user_namespaces: true,
        allow_ptrace: false,
    };
    let ptrace = SeccompPolicy {
        allow_nested_user_namespaces: false,
        allow_ptrace: true,
    };
    for arch in ARCHES {
        let a = audit(arch);
        let p = build_filter(&nested, arch).unwrap();
        for name in ["unshare", "clone", "clone3", "setns"] {
            assert_eq!(
                run(&p, a, nr(name, arch), [NEWUSER, 0, 0, 0, 0, 0]),
                SECCOMP_RET_ALLOW,
                "{name}"
            );
        }
        assert_eq!(run(&p, a, nr("ptrace", arch), [0; 6]), EPERM_RET);
        let p = build_filter(&ptrace, arch).unwrap();
        for name in ["ptrace", "process_vm_readv", "process_vm_writev"] {
            assert_eq!(
                run(&p, a, nr(name, arch), [0; 6]),
                SECCOMP_RET_ALLOW,
                "{name}"
            );
        }
        assert_eq!(run(&p, a, nr("setns", arch), [0; 6]), EPERM_RET);
        assert_eq!(run(&p, a, nr("bpf", arch), [0; 6]), EPERM_RET);
    }
}

#[test]
fn ptrace_like_syscalls_are_denied_unless_allow_ptrace() {
    // pidfd_getfd steals a descriptor of another process (pid 1's status pipe),
    // process_madvise acts on another process's memory, kcmp probes another
    // process's descriptors and memory layout: the same reach as ptrace.
    for arch in [TargetArch::x86_64, TargetArch::aarch64] {
        let a = if arch == TargetArch::x86_64 {
            AUDIT_ARCH_X86_64
        } else {
            AUDIT_ARCH_AARCH64
        };
        let strict = build_filter(&SeccompPolicy::default(), arch).unwrap();
        let relaxed = build_filter(
            &SeccompPolicy {
                allow_ptrace: true,
                ..SeccompPolicy::default()
            },
            arch,
        )
        .unwrap();
        for name in ["pidfd_getfd", "process_madvise", "kcmp"] {
            assert_eq!(run(&strict, a, nr(name, arch), [0; 6]), EPERM_RET, "{name}");
            assert_eq!(
                run(&relaxed, a, nr(name, arch), [0; 6]),
                SECCOMP_RET_ALLOW,
                "{name}"
            );
        }
    }
}

#[test]
fn table_has_unique_names_and_numbers() {
    for (i, a) in TABLE.iter().enumerate() {
        for b in &TABLE[i + 1..] {
            assert_ne!(a.name, b.name);
            assert_ne!(a.x86_64, b.x86_64, "{} / {}", a.name, b.name);
            assert_ne!(a.aarch64, b.aarch64, "{} / {}", a.name, b.name);
        }
    }
    #[cfg(target_arch = "x86_64")]
    for e in TABLE {
        let libc_nr = match e.name {
            "unshare" => nix::libc::SYS_unshare,
            "clone" => nix::libc::SYS_clone,
            "clone3" => nix::libc::SYS_clone3,
            "ptrace" => nix::libc::SYS_ptrace,
            "io_uring_setup" => nix::libc::SYS_io_uring_setup,
            "mount_setattr" => nix::libc::SYS_mount_setattr,
            "keyctl" => nix::libc::SYS_keyctl,
            "pidfd_getfd" => nix::libc::SYS_pidfd_getfd,
            "process_madvise" => nix::libc::SYS_process_madvise,
            "kcmp" => nix::libc::SYS_kcmp,
            _ => continue,
        };
        assert_eq!(i64::from(e.x86_64), libc_nr, "{}", e.name);
    }
}

#[test]
fn denied_syscalls_follow_the_policy() {
    let all = SeccompPolicy::default().denied_syscalls();
    assert_eq!(all.len(), TABLE.len() + MODE_TABLE.len());
    let relaxed = SeccompPolicy {
        allow_nested_user_namespaces: true,
        allow_ptrace: true,
    }
    .denied_syscalls();
    // No switch lets a set-id file or a device node through.
    assert_eq!(relaxed.len(), TABLE.len() - 10 + MODE_TABLE.len());
    assert!(
        relaxed[..TABLE.len() - 10]
            .iter()
            .all(|d| d.denial == Denial::Eperm)
    );
    let chmod = all.iter().find(|d| d.name == "fchmodat").unwrap();
    assert_eq!(
        serde_json::to_string(chmod).unwrap(),
        r#"{"name":"fchmodat","denial":"eperm_with_set_id_mode"}"#
    );
    let json = serde_json::to_string(&all[0]).unwrap();
    assert_eq!(
        json,
        r#"{"name":"unshare","denial":"eperm_with_clone_newuser"}"#
    );
}

#[test]
fn unsupported_arch_is_a_typed_error() {
    let err = build_filter(&SeccompPolicy::default(), TargetArch::riscv64).unwrap_err();
    assert!(matches!(err, SeccompError::NoSyscallTable { .. }), "{err}");
    assert!(current_arch().is_ok());
}

/// What a file mode's row must answer for `args`, written from the module
/// documentation (not from the BPF).
fn mode_expected(check: ModeCheck, args: [u64; 6]) -> u32 {
    let arg = |i: u8| args[usize::from(i)] as u32;
    let set_id = |i: u8| arg(i) & 0o6000 != 0;
    match check {
        ModeCheck::SetId { mode } if set_id(mode) => EPERM_RET,
        ModeCheck::CreatingSetId { flags, mode }
            if arg(flags) & (0o100 | 0o2000_0000) != 0 && set_id(mode) =>
        {
            EPERM_RET
        }
        ModeCheck::SetIdOrDevice { mode }
            if set_id(mode) || [0o020000, 0o060000].contains(&(arg(mode) & 0o170000)) =>
        {
            EPERM_RET
        }
        ModeCheck::Unreadable => ENOSYS_RET,
        _ => SECCOMP_RET_ALLOW,
    }
}

/// What the filter must answer, from the tables alone.
fn expected(policy: &SeccompPolicy, arch: TargetArch, nr: u32, args: [u64; 6]) -> u32 {
    let arg0 = args[0];
    if arch == TargetArch::x86_64 && nr & X32_SYSCALL_BIT != 0 {
        return ENOSYS_RET;
    }
    let mode_row = MODE_TABLE.iter().find(|e| {
        let own = if arch == TargetArch::x86_64 {
            e.x86_64
        } else {
            e.aarch64
        };
        own == Some(nr)
    });
    if let Some(row) = mode_row {
        return mode_expected(row.check, args);
    }
    let row = TABLE.iter().find(|e| {
        let own = if arch == TargetArch::x86_64 {
            e.x86_64
        } else {
            e.aarch64
        };
        own == nr
    });
    match row.and_then(|e| e.denial(policy)) {
        None => SECCOMP_RET_ALLOW,
        Some(Denial::Eperm) => EPERM_RET,
        Some(Denial::Enosys) => ENOSYS_RET,
        Some(Denial::EpermWithCloneNewuser) if arg0 & NEWUSER != 0 => EPERM_RET,
        Some(Denial::EpermWithCloneNewuser) => SECCOMP_RET_ALLOW,
        Some(other) => panic!("{other:?} is not a denial of the first table"),
    }
}

/// Modes (and flags) the exhaustive test tries: plain, sticky, each set-id bit,
/// a device's and a FIFO's type, creating flags, and every bit.
const MODES: [u64; 9] = [
    0,
    0o755,
    0o1777,
    0o4755,
    0o2000,
    0o020644,
    0o010644 | 0o100,
    0o2000_0000 | 0o644,
    u64::MAX,
];

#[test]
fn every_number_gets_the_tables_answer_under_every_policy() {
    let policies = [(false, false), (true, false), (false, true), (true, true)].map(
        |(allow_nested_user_namespaces, allow_ptrace)| SeccompPolicy {
            allow_nested_user_namespaces,
            allow_ptrace,
        },
    );
    let numbers = (0..1024).chain([X32_SYSCALL_BIT, X32_SYSCALL_BIT | 56, u32::MAX]);
    for arch in ARCHES {
        for policy in &policies {
            let prog = build_filter(policy, arch).unwrap();
            for nr in numbers.clone() {
                for arg0 in [0, SIGCHLD, NEWUSER, NEWUSER | SIGCHLD, u64::MAX] {
                    for mode in MODES {
                        // The same value in every other argument: each row reads
                        // its flags and mode from where its own syscall has them.
                        let args = [arg0, mode, mode, mode, 0, 0];
                        assert_eq!(
                            run(&prog, audit(arch), nr, args),
                            expected(policy, arch, nr, args),
                            "{arch:?} {policy:?} nr {nr} args {args:?}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn an_allowed_number_is_decided_in_a_few_instructions() {
    // The kernel emulates the program for every number when the filter is
    // installed (its cache): a search, not a pass over every row.
    // A row that reads its arguments is never cached; it runs its own few
    // instructions after the search.
    let prog = build_filter(&SeccompPolicy::default(), TargetArch::x86_64).unwrap();
    let reads_arguments = |nr: u32| MODE_TABLE.iter().any(|e| e.x86_64 == Some(nr));
    let longest = |arguments: bool| {
        (0..1024)
            .filter(|nr| reads_arguments(*nr) == arguments)
            .map(|nr| run_counted(&prog, AUDIT_ARCH_X86_64, nr, [0; 6]))
            .filter(|(answer, _)| *answer == SECCOMP_RET_ALLOW)
            .map(|(_, steps)| steps)
            .max()
            .unwrap()
    };
    let (plain, checked) = (longest(false), longest(true));
    assert!(plain <= 16, "{plain} instructions for an allowed number");
    assert!(
        checked <= 16 + 6,
        "{checked} instructions for an allowed mode"
    );
}

#[test]
fn key_numbers_from_the_kernels_tables_are_denied_on_both_architectures() {
    // Written out here from the kernel's tables (x86_64 `syscall_64.tbl`,
    // aarch64 `asm-generic/unistd.h`), not from this module's table: a wrong
    // number there fails here.
    let eperm = [
        ("setns", 308, 268),
        ("bpf", 321, 280),
        ("ptrace", 101, 117),
        ("keyctl", 250, 219),
        ("mount", 165, 40),
        ("umount2", 166, 39),
        ("pivot_root", 155, 41),
        ("open_tree", 428, 428),
        ("io_uring_setup", 425, 425),
        ("userfaultfd", 323, 282),
        ("perf_event_open", 298, 241),
    ];
    let policy = SeccompPolicy::default();
    for arch in ARCHES {
        let prog = build_filter(&policy, arch).unwrap();
        let pick = |x86_64: u32, aarch64: u32| {
            if arch == TargetArch::x86_64 {
                x86_64
            } else {
                aarch64
            }
        };
        for (name, x86_64, aarch64) in eperm {
            let nr = pick(x86_64, aarch64);
            assert_eq!(
                run(&prog, audit(arch), nr, [0; 6]),
                EPERM_RET,
                "{arch:?} {name}"
            );
        }
        for (name, x86_64, aarch64) in [("unshare", 272, 97), ("clone", 56, 220)] {
            let nr = pick(x86_64, aarch64);
            let with = run(&prog, audit(arch), nr, [NEWUSER, 0, 0, 0, 0, 0]);
            let without = run(&prog, audit(arch), nr, [SIGCHLD, 0, 0, 0, 0, 0]);
            assert_eq!(
                (with, without),
                (EPERM_RET, SECCOMP_RET_ALLOW),
                "{arch:?} {name}"
            );
        }
        assert_eq!(
            run(&prog, audit(arch), 435, [0; 6]),
            ENOSYS_RET,
            "{arch:?} clone3"
        );
        // read, write, openat: allowed.
        for nr in [pick(0, 63), pick(1, 64), pick(257, 56)] {
            assert_eq!(
                run(&prog, audit(arch), nr, [0; 6]),
                SECCOMP_RET_ALLOW,
                "{arch:?} {nr}"
            );
        }
    }
}

#[test]
fn a_set_id_mode_or_a_device_node_is_refused_and_ordinary_modes_are_not() {
    // (name, x86_64 number, aarch64 number or 0 for none, args) from the
    // kernel's tables, independent of this module's.
    const O_CREAT: u64 = 0o100;
    const O_TMPFILE: u64 = 0o2000_0000 | 0o200000;
    const O_WRONLY: u64 = 0o1;
    let eperm: &[(&str, u32, u32, [u64; 6])] = &[
        ("chmod", 90, 0, [0, 0o4755, 0, 0, 0, 0]),
        ("chmod", 90, 0, [0, 0o2777, 0, 0, 0, 0]),
        ("fchmod", 91, 52, [3, 0o6755, 0, 0, 0, 0]),
        ("fchmodat", 268, 53, [0, 0, 0o4755, 0, 0, 0]),
        ("fchmodat2", 452, 452, [0, 0, 0o2755, 0x100, 0, 0]),
        ("creat", 85, 0, [0, 0o4755, 0, 0, 0, 0]),
        ("open", 2, 0, [0, O_CREAT | O_WRONLY, 0o4755, 0, 0, 0]),
        ("openat", 257, 56, [0, 0, O_CREAT | O_WRONLY, 0o4755, 0, 0]),
        (
            "openat",
            257,
            56,
            [0, 0, O_TMPFILE | O_WRONLY, 0o2755, 0, 0],
        ),
        ("mknod", 133, 0, [0, 0o100000 | 0o4755, 0, 0, 0, 0]),
        ("mknodat", 259, 33, [0, 0, 0o020666, 0x0103, 0, 0]),
        ("mknodat", 259, 33, [0, 0, 0o060660, 0x0800, 0, 0]),
    ];
    let allowed: &[(&str, u32, u32, [u64; 6])] = &[
        ("chmod", 90, 0, [0, 0o755, 0, 0, 0, 0]),
        ("chmod", 90, 0, [0, 0o1777, 0, 0, 0, 0]),
        ("fchmodat", 268, 53, [0, 0, 0o644, 0, 0, 0]),
        // Without O_CREAT the mode is not used: whatever it holds passes.
        ("openat", 257, 56, [0, 0, O_WRONLY, 0o4755, 0, 0]),
        ("openat", 257, 56, [0, 0, O_CREAT | O_WRONLY, 0o644, 0, 0]),
        ("mknodat", 259, 33, [0, 0, 0o010644, 0, 0, 0]),
        ("mknodat", 259, 33, [0, 0, 0o140755, 0, 0, 0]),
    ];
    let policy = SeccompPolicy {
        allow_nested_user_namespaces: true,
        allow_ptrace: true,
    };
    for arch in ARCHES {
        let prog = build_filter(&policy, arch).unwrap();
        let pick = |x86_64: u32, aarch64: u32| {
            let nr = if arch == TargetArch::x86_64 {
                x86_64
            } else {
                aarch64
            };
            (nr != 0).then_some(nr)
        };
        for (cases, want) in [(eperm, EPERM_RET), (allowed, SECCOMP_RET_ALLOW)] {
            for (name, x86_64, aarch64, args) in cases {
                if let Some(nr) = pick(*x86_64, *aarch64) {
                    assert_eq!(
                        run(&prog, audit(arch), nr, *args),
                        want,
                        "{arch:?} {name} {args:?}"
                    );
                }
            }
        }
        assert_eq!(
            run(&prog, audit(arch), 437, [0; 6]),
            ENOSYS_RET,
            "{arch:?} openat2"
        );
    }
}

#[test]
fn mode_rows_have_numbers_of_their_own() {
    let x86: Vec<u32> = TABLE.iter().map(|e| e.x86_64).collect();
    let arm: Vec<u32> = TABLE.iter().map(|e| e.aarch64).collect();
    for (i, a) in MODE_TABLE.iter().enumerate() {
        assert!(a.x86_64.is_some_and(|n| !x86.contains(&n)), "{}", a.name);
        assert!(a.aarch64.is_none_or(|n| !arm.contains(&n)), "{}", a.name);
        for b in &MODE_TABLE[i + 1..] {
            assert_ne!(a.x86_64, b.x86_64, "{} / {}", a.name, b.name);
            assert!(a.aarch64.is_none() || a.aarch64 != b.aarch64);
        }
    }
    #[cfg(target_arch = "x86_64")]
    for e in MODE_TABLE {
        let libc_nr = match e.name {
            "chmod" => nix::libc::SYS_chmod,
            "fchmod" => nix::libc::SYS_fchmod,
            "fchmodat" => nix::libc::SYS_fchmodat,
            "creat" => nix::libc::SYS_creat,
            "open" => nix::libc::SYS_open,
            "openat" => nix::libc::SYS_openat,
            "mknod" => nix::libc::SYS_mknod,
            "mknodat" => nix::libc::SYS_mknodat,
            "openat2" => nix::libc::SYS_openat2,
            _ => continue,
        };
        assert_eq!(e.x86_64.map(i64::from), Some(libc_nr), "{}", e.name);
    }
}

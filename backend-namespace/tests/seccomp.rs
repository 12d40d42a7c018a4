//! Integration tests for the seccomp filter: they fork, install the real filter in the
//! child and exec, with a positive control (the same child without the filter) for
//! each case.
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output};

use backend_namespace::seccomp::{SeccompFilter, SeccompPolicy};
use nix::libc;

/// Selects the probe in a re-executed test binary.
const PROBE_ENV: &str = "AGENT_WORKSPACE_SECCOMP_PROBE";

/// Attach the filter to `cmd`, installed in the child between fork and exec.
fn with_filter(cmd: &mut Command, filter: SeccompFilter) -> &mut Command {
    // SAFETY: the closure runs in the forked child before exec. It only calls
    // `SeccompFilter::install`, which is `prctl` + `seccomp` on a program built before
    // the spawn (no allocation, no locks), and on failure builds an `io::Error` from a
    // raw OS code, which does not allocate either.
    unsafe {
        cmd.pre_exec(move || {
            filter
                .install()
                .map_err(|_| std::io::Error::from_raw_os_error(libc::EPERM))
        })
    }
}

fn filter() -> SeccompFilter {
    SeccompFilter::new(&SeccompPolicy::default()).unwrap()
}

#[test]
fn unshare_user_refused_with_filter_and_works_without() {
    let control = Command::new("unshare")
        .args(["--user", "true"])
        .output()
        .unwrap();
    assert!(
        control.status.success(),
        "positive control failed: {control:?}"
    );

    let denied = with_filter(Command::new("unshare").args(["--user", "true"]), filter())
        .output()
        .unwrap();
    assert!(
        !denied.status.success(),
        "unshare --user succeeded under the filter"
    );
    let stderr = String::from_utf8_lossy(&denied.stderr);
    assert!(stderr.contains("Operation not permitted"), "{stderr}");

    // A plain fork + exec still works under the filter (clone without CLONE_NEWUSER).
    let sh = with_filter(Command::new("sh").args(["-c", "true | true"]), filter())
        .output()
        .unwrap();
    assert!(sh.status.success(), "{sh:?}");
}

/// Re-execute this test binary, running only `probe_child` with the probe selected.
fn run_probe(filtered: bool) -> (BTreeMap<String, i32>, String) {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(exe);
    cmd.args([
        "--ignored",
        "--exact",
        "probe_child",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(PROBE_ENV, "1");
    if filtered {
        with_filter(&mut cmd, filter());
    }
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&stdout).into_owned();
    assert!(
        status.success(),
        "probe child failed: {status}\n{stdout}\n{}",
        String::from_utf8_lossy(&stderr)
    );
    let errnos = stdout
        .lines()
        // libtest prints "test probe_child ... " without a newline before the output.
        .filter_map(|l| l.find("PROBE ").map(|at| &l[at + "PROBE ".len()..]))
        .filter_map(|l| {
            let (name, errno) = l.split_once(' ')?;
            Some((name.to_owned(), errno.parse().ok()?))
        })
        .collect();
    (errnos, stdout)
}

const PROBES: [&str; 7] = [
    "io_uring_setup",
    "bpf",
    "keyctl",
    "ptrace_traceme",
    "clone3",
    "clone_newuser",
    "unshare_newuser",
];

#[test]
fn raw_syscalls_refused_with_filter_and_not_without() {
    let (free, free_out) = run_probe(false);
    let (filtered, filtered_out) = run_probe(true);
    for name in PROBES {
        let want = if name == "clone3" {
            libc::ENOSYS
        } else {
            libc::EPERM
        };
        let got = filtered.get(name).copied();
        assert_eq!(got, Some(want), "{name} under the filter:\n{filtered_out}");
        let control = free.get(name).copied();
        assert!(
            control.is_some() && control != Some(want),
            "{name} without the filter must not be refused the same way:\n{free_out}"
        );
    }
    assert!(filtered_out.contains("STATUS Seccomp 2"), "{filtered_out}");
    assert!(
        filtered_out.contains("STATUS NoNewPrivs 1"),
        "{filtered_out}"
    );
    assert!(free_out.contains("STATUS Seccomp 0"), "{free_out}");
}

fn errno_of(ret: libc::c_long) -> i32 {
    if ret < 0 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
    } else {
        0
    }
}

/// Fork; the child runs `f` (raw syscalls only) and exits with the errno it returns.
fn in_forked_child(f: fn() -> i32) -> i32 {
    // SAFETY: the child calls only raw syscalls and `_exit`, which are
    // async-signal-safe; the parent waits for it.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let code = f();
        // SAFETY: `_exit` ends the child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    assert!(pid > 0, "fork failed");
    let mut status = 0;
    // SAFETY: waiting for our own child with a valid status pointer.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid);
    assert!(
        libc::WIFEXITED(status),
        "probe grandchild died: {status:#x}"
    );
    libc::WEXITSTATUS(status)
}

/// The probe: not a test of its own. With the env var (set by `run_probe`) it
/// calls each raw syscall and prints its errno (0 = success).
#[test]
#[ignore = "the body of a re-executed child: run (with --ignored) by the test that spawns it"]
fn probe_child() {
    assert!(
        std::env::var_os(PROBE_ENV).is_some(),
        "the probe runs only with {PROBE_ENV} set"
    );
    let report = |name: &str, errno: i32| println!("PROBE {name} {errno}");

    let mut params = [0u8; 120]; // struct io_uring_params
    // SAFETY: io_uring_setup(entries, params) with a zeroed params buffer of the
    // kernel's size that lives across the call.
    let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1u32, params.as_mut_ptr()) };
    report("io_uring_setup", errno_of(fd));
    if fd >= 0 {
        // SAFETY: closing the ring fd we just got.
        unsafe { libc::close(fd as i32) };
    }

    // SAFETY: bpf(BPF_MAP_CREATE, NULL, 0): the kernel rejects the empty attribute.
    let r = unsafe { libc::syscall(libc::SYS_bpf, 0, std::ptr::null::<u8>(), 0) };
    report("bpf", errno_of(r));

    // SAFETY: keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, create=0).
    let r = unsafe { libc::syscall(libc::SYS_keyctl, 0, -3i32, 0) };
    report("keyctl", errno_of(r));

    // PTRACE_TRACEME in a forked grandchild that exits at once, so nothing here is
    // ever traced.
    report(
        "ptrace_traceme",
        in_forked_child(|| {
            // SAFETY: ptrace(PTRACE_TRACEME, 0, NULL, NULL).
            let r = unsafe { libc::syscall(libc::SYS_ptrace, libc::PTRACE_TRACEME, 0, 0, 0) };
            errno_of(r)
        }),
    );

    // SAFETY: clone3(NULL, 0): rejected (EINVAL) before any process is created.
    let r = unsafe { libc::syscall(libc::SYS_clone3, std::ptr::null::<u8>(), 0usize) };
    report("clone3", errno_of(r));

    // A raw fork-like clone with CLONE_NEWUSER, in a grandchild so that a success
    // (the great-grandchild) is reaped there.
    report(
        "clone_newuser",
        in_forked_child(|| {
            let flags = (libc::CLONE_NEWUSER | libc::SIGCHLD) as libc::c_ulong;
            // SAFETY: fork-like clone (no new stack, no tid pointers); the new process
            // exits at once.
            let r = unsafe { libc::syscall(libc::SYS_clone, flags, 0, 0, 0, 0) };
            if r == 0 {
                // SAFETY: leave the new process immediately.
                unsafe { libc::_exit(0) };
            }
            let errno = errno_of(r);
            if r > 0 {
                // SAFETY: reap the process we created.
                unsafe { libc::waitpid(r as i32, std::ptr::null_mut(), 0) };
            }
            errno
        }),
    );

    // In a single-threaded grandchild: unshare(CLONE_NEWUSER) needs one thread.
    report(
        "unshare_newuser",
        in_forked_child(|| {
            // SAFETY: unshare changes only this short-lived process.
            errno_of(unsafe { libc::unshare(libc::CLONE_NEWUSER) }.into())
        }),
    );

    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    for key in ["Seccomp", "NoNewPrivs"] {
        let value = status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}:")))
            .map(str::trim)
            .unwrap_or("absent");
        println!("STATUS {key} {value}");
    }
}

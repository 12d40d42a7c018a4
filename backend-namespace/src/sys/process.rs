//! The calling process in a cloned child: its session, its end, its children,
//! its seccomp filter.

use std::ffi::c_int;
use std::ptr;
use std::time::Duration;

use nix::libc;

use super::errno::{Errno, check, check_long};

/// Ends this process at once with `code`: no destructor, no atexit handler (they
/// belong to the process this one was cloned from).
pub(crate) fn exit(code: c_int) -> ! {
    // SAFETY: `_exit` is async-signal-safe and never returns.
    unsafe { libc::_exit(code) }
}

/// Starts a new session (and process group) led by this process.
pub(crate) fn setsid() -> Result<(), Errno> {
    // SAFETY: setsid has no arguments.
    check(unsafe { libc::setsid() }).map(drop)
}

/// Makes stdin (a terminal no other session has) this session leader's
/// controlling terminal; argument 0: no terminal is stolen from another session.
pub(crate) fn take_stdin_as_controlling_terminal() -> Result<(), Errno> {
    // SAFETY: TIOCSCTTY takes an integer argument.
    check(unsafe { libc::ioctl(0, libc::TIOCSCTTY, 0 as c_int) }).map(drop)
}

/// A child that changed state, from [`wait_any`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reaped {
    /// Its pid.
    pub(crate) pid: libc::pid_t,
    /// Its raw wait status.
    pub(crate) status: c_int,
}

/// Reaps one child of any kind (`__WALL`); without `block`, `Ok(None)` when
/// none has ended. `EINTR` and `ECHILD` are returned as they are.
pub(crate) fn wait_any(block: bool) -> Result<Option<Reaped>, Errno> {
    let mut status: c_int = 0;
    let flags = if block {
        libc::__WALL
    } else {
        libc::__WALL | libc::WNOHANG
    };
    // SAFETY: a valid out-pointer.
    let pid = check(unsafe { libc::waitpid(-1, &mut status, flags) })?;
    Ok((pid > 0).then_some(Reaped { pid, status }))
}

/// Sleeps for `duration` (an interruption ends it early).
pub(crate) fn sleep(duration: Duration) {
    let pause = libc::timespec {
        tv_sec: duration.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(duration.subsec_nanos() as i32),
    };
    // SAFETY: a valid timespec; no remainder is asked for.
    unsafe { libc::nanosleep(&pause, ptr::null_mut()) };
}

/// Installs `program` as this process's seccomp filter (`no_new_privs` must be
/// set); every child inherits it.
pub(crate) fn install_seccomp(program: &[libc::sock_filter]) -> Result<(), Errno> {
    let fprog = libc::sock_fprog {
        len: program.len() as libc::c_ushort,
        filter: program.as_ptr().cast_mut(),
    };
    // SAFETY: `fprog` points at `program`, alive for the call; the kernel copies
    // the filter.
    check_long(unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0u32,
            &raw const fprog,
        )
    })
    .map(drop)
}

/// Sets the UTS namespace's hostname.
pub(crate) fn set_hostname(name: &[u8]) -> Result<(), Errno> {
    // SAFETY: the pointer and length describe a live slice.
    check(unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) }).map(drop)
}

/// Sets the soft (`cur`) and hard (`max`) limit of `resource` on this process
/// (`prlimit64`).
pub(crate) fn set_rlimit(resource: c_int, cur: u64, max: u64) -> Result<(), Errno> {
    let limit = libc::rlimit64 {
        rlim_cur: cur,
        rlim_max: max,
    };
    // SAFETY: pid 0 (this process), a valid limit and a null old-limit pointer.
    check_long(unsafe {
        libc::syscall(
            libc::SYS_prlimit64,
            0 as libc::pid_t,
            resource as libc::c_uint,
            &raw const limit,
            ptr::null_mut::<libc::c_void>(),
        )
    })
    .map(drop)
}

/// The memory that holds this process's command line (`arg_start..arg_end` of
/// `/proc/self/stat`), read in the process a child is then cloned from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ArgArea {
    start: usize,
    end: usize,
}

impl ArgArea {
    /// This process's argument area, or `None` when `/proc/self/stat` cannot be
    /// read.
    pub(crate) fn of_this_process() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // The command name (field 2) is in parentheses and may hold spaces: count
        // the fields after the last ')', which is field 3.
        let after = stat.rsplit_once(')')?.1;
        let mut fields = after.split_whitespace();
        let start = fields.nth(48 - 3)?.parse().ok()?;
        let end = fields.next()?.parse().ok()?;
        (start < end).then_some(Self { start, end })
    }

    /// Zeroes the area, so `/proc/<pid>/cmdline` of this process shows nothing.
    /// For a cloned child only: the process it was cloned from still reads its
    /// arguments there.
    pub(crate) fn blank(&self) {
        for address in self.start..self.end {
            // SAFETY: the area was read from the kernel for the process this one
            // was cloned from; after the clone it is this process's private,
            // writable copy (the initial stack), which nothing here reads again.
            // Volatile, so the writes are not elided.
            unsafe { ptr::write_volatile(address as *mut u8, 0) };
        }
    }
}

/// Waits for the child `pid` (`waitpid` with `flags`): `Ok(None)` when `WNOHANG`
/// finds it still running, else its raw wait status. `EINTR` is returned as is.
pub(crate) fn wait_for_child(pid: libc::pid_t, flags: c_int) -> Result<Option<c_int>, Errno> {
    let mut status: c_int = 0;
    // SAFETY: a valid out-pointer.
    let reaped = check(unsafe { libc::waitpid(pid, &mut status, flags) })?;
    Ok((reaped == pid).then_some(status))
}

/// Moves this process into the namespaces of `flags` that the process behind
/// `pidfd` is in (`setns` on a pidfd, Linux 5.8+).
pub(crate) fn join_namespaces(pidfd: c_int, flags: c_int) -> Result<(), Errno> {
    // SAFETY: integer arguments; affects this single-threaded process only.
    check(unsafe { libc::setns(pidfd, flags) }).map(drop)
}

/// Asks for `SIGKILL` when the parent thread ends (`PR_SET_PDEATHSIG`).
pub(crate) fn die_with_parent() {
    // SAFETY: prctl with integer arguments.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
}

/// This process's real uid (`getuid`, which cannot fail).
pub(crate) fn uid() -> libc::uid_t {
    // SAFETY: no arguments; always succeeds.
    unsafe { libc::getuid() }
}

/// This process's parent's pid.
pub(crate) fn parent_pid() -> libc::pid_t {
    // SAFETY: getppid has no arguments and cannot fail.
    unsafe { libc::getppid() }
}

/// Waits until a signal ends this process (every other one blocked: forever).
pub(crate) fn wait_until_killed() -> ! {
    loop {
        // SAFETY: pause has no arguments; it only returns after a handled signal.
        unsafe { libc::pause() };
    }
}

/// Whether this kernel's seccomp offers the `SECCOMP_RET_ERRNO` action
/// (`seccomp(SECCOMP_GET_ACTION_AVAIL)`).
pub(crate) fn seccomp_errno_action_available() -> Result<(), Errno> {
    const SECCOMP_GET_ACTION_AVAIL: libc::c_long = 2;
    let action: u32 = 0x0005_0000; // SECCOMP_RET_ERRNO
    // SAFETY: the kernel reads one u32 from a pointer to a live local.
    check_long(unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_GET_ACTION_AVAIL,
            0,
            &raw const action,
        )
    })
    .map(drop)
}

/// This kernel's Landlock ABI version
/// (`landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`).
pub(crate) fn landlock_abi() -> Result<i64, Errno> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a NULL attribute and size 0 the kernel reads nothing and only
    // returns the ABI version.
    check_long(unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    })
}

/// Sets this process's file creation mask.
pub(crate) fn set_umask(mask: libc::mode_t) {
    // SAFETY: umask has no memory arguments and cannot fail.
    unsafe { libc::umask(mask) };
}

/// Moves this process into new namespaces of `flags` (`unshare`).
pub(crate) fn unshare(flags: c_int) -> Result<(), Errno> {
    // SAFETY: integer arguments; affects this process only.
    check(unsafe { libc::unshare(flags) }).map(drop)
}

//! Fork-style clones: a child that continues on a copy of the caller's stack.

use std::ffi::c_int;

use nix::libc;

use super::errno::{self, Errno};

/// Where a fork-style child was placed by its own clone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Birth {
    /// `clone3` put it in the cgroup v2 directory it was asked for
    /// (`CLONE_INTO_CGROUP`): it is there already and must not migrate again.
    InCgroup,
    /// It was born in its parent's cgroups: no directory was asked for, or the
    /// kernel (or a seccomp filter around the runner) has no `clone3`.
    WithParent,
}

/// `CLONE_INTO_CGROUP` (Linux 5.7). The `libc` constant of that name is an
/// `int` that overflows; the flag lives in `clone3`'s 64-bit flags.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// A fork-style clone with `flags` (namespaces; `SIGCHLD` is added) whose child
/// runs `entry(arg, birth)` and never returns; the parent gets the child's pid.
/// Every signal is blocked in the calling thread around the clone, so no
/// handler of the host process (tokio's) ever runs in the child, which inherits
/// the full mask and resets what it needs.
///
/// With `into_cgroup` (a descriptor of a cgroup v2 directory) the clone is a
/// `clone3` with `CLONE_INTO_CGROUP`: the child is born in that cgroup, which
/// takes the cgroup core's global lock only for reading. Writing to
/// `cgroup.procs` instead takes it for writing, and on a kernel that does not
/// favour dynamic cgroup changes that write waits for an RCU grace period
/// (milliseconds, the largest part of starting a sandbox). Where `clone3` is
/// missing (`ENOSYS`: an old kernel, or a container runtime's seccomp profile
/// that hides it so that libc falls back), a plain `clone` follows and the
/// child learns it from [`Birth::WithParent`].
///
/// `entry` runs in a copy of a multi-threaded process (see the SAFETY comment
/// inside): it may use only raw, async-signal-safe system calls on data that
/// exists already, and must end with `execve` or `_exit`.
pub(crate) fn fork_like<A>(
    flags: c_int,
    into_cgroup: Option<c_int>,
    arg: &A,
    entry: fn(&A, Birth) -> !,
) -> Result<libc::pid_t, Errno> {
    // SAFETY: `sigset_t` is plain data; sigfillset initialises it.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to local sigsets; the mask is restored right after
    // the clone.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    // Without a cgroup to be born in, this reads as "clone3 missing": the plain
    // clone below runs.
    let mut ret = -1;
    let mut error = libc::ENOSYS;
    if let Some(cgroup) = into_cgroup {
        // SAFETY: `clone_args` is plain data; all-zero is "no stack, no tls, no
        // tids", i.e. a fork-style clone.
        let mut args: libc::clone_args = unsafe { std::mem::zeroed() };
        args.flags = (flags as u32 as u64) | CLONE_INTO_CGROUP;
        args.exit_signal = libc::SIGCHLD as u64;
        args.cgroup = cgroup as u64;
        // SAFETY: as for the `clone` below; `args` is a valid `clone_args` of the
        // size passed. A zero stack makes the child continue on a copy of this one.
        ret = unsafe {
            libc::syscall(
                libc::SYS_clone3,
                &mut args as *mut libc::clone_args,
                std::mem::size_of::<libc::clone_args>(),
            )
        };
        if ret == 0 {
            entry(arg, Birth::InCgroup);
        }
        error = errno::last();
    }
    if ret < 0 && error == libc::ENOSYS {
        // SAFETY: a fork-style clone (NULL stack, no CLONE_VM): the child gets a
        // private copy of the address space and continues here, as the only thread
        // of a process whose memory says otherwise. glibc's per-thread state is
        // stale there: the TCB still holds the parent thread's tid (clone through
        // `syscall` does not update it, unlike `fork`), the thread list names
        // threads that do not exist, and any lock another thread held (malloc
        // arenas, stdio, the dynamic loader) stays held forever. So the child must
        // not call `abort`, `raise`, any `pthread_*` function, `malloc`/`free`,
        // stdio or anything that formats or panics: `entry` performs only raw,
        // async-signal-safe system calls on `arg` (which exists before the clone)
        // and ends with `execve` or `_exit`. It never returns into the caller's
        // frames, not even by unwinding.
        ret = unsafe {
            libc::syscall(
                libc::SYS_clone,
                (flags | libc::SIGCHLD) as libc::c_ulong,
                std::ptr::null_mut::<libc::c_void>(),
                std::ptr::null_mut::<libc::c_void>(),
                std::ptr::null_mut::<libc::c_void>(),
                0usize,
            )
        };
        if ret == 0 {
            entry(arg, Birth::WithParent);
        }
        error = errno::last();
    }
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    if ret < 0 {
        return Err(error);
    }
    Ok(ret as libc::pid_t)
}

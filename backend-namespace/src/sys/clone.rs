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

/// Bytes of the stack a [`vfork_like`] child runs on (what an `execve` and a
/// failure report need, with room to spare), and of the guard below it: each a
/// multiple of every page size Linux uses, so no page size is asked for.
const LEAF_STACK: usize = 64 * 1024;
const LEAF_GUARD: usize = 64 * 1024;

/// What a [`vfork_like`] child gets through `clone`'s argument.
struct Leaf<'a, A> {
    arg: &'a A,
    entry: fn(&A, Birth) -> !,
}

/// The child's first frame on its own stack.
extern "C" fn leaf_start<A>(leaf: *mut libc::c_void) -> c_int {
    // SAFETY: `leaf` is the `Leaf<A>` that `vfork_like` passed, which lives on
    // in the suspended parent's frame until this child execs or exits.
    let leaf = unsafe { &*(leaf as *const Leaf<'_, A>) };
    (leaf.entry)(leaf.arg, Birth::WithParent)
}

/// A `vfork`-style clone for a child that execs at once: it shares this
/// process's memory (`CLONE_VM`), so nothing of the address space is copied
/// (a fork of a copy of the runner copies its page tables, then faults on
/// every page either side writes), and this thread waits (`CLONE_VFORK`)
/// until the child's `execve` or `_exit`. The child runs `entry(arg,
/// Birth::WithParent)` on a stack of its own, mapped here, with a guard
/// below it, and removed once this thread goes on.
///
/// Only for a single-threaded caller (pid 1 or a joining child): no other
/// thread of it runs while the child shares its memory. `entry` must keep to
/// what [`fork_like`] allows and write nothing but its own stack: every
/// memory write it makes is this process's. The child gets the caller's
/// signal mask and dispositions: this crate's cloned children reset every
/// handler to the default and block every signal first, so no handler can
/// run in the child before its `execve` (it unblocks right before).
pub(crate) fn vfork_like<A>(arg: &A, entry: fn(&A, Birth) -> !) -> Result<libc::pid_t, Errno> {
    let size = LEAF_STACK + LEAF_GUARD;
    // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(errno::last());
    }
    let unmap = || {
        // SAFETY: the mapping made above, no longer used by anything.
        unsafe { libc::munmap(base, size) };
    };
    // SAFETY: the lowest part of the mapping made above becomes the guard.
    if unsafe { libc::mprotect(base, LEAF_GUARD, libc::PROT_NONE) } != 0 {
        let error = errno::last();
        unmap();
        return Err(error);
    }
    let leaf = Leaf { arg, entry };
    // SAFETY: the stack grows down from the mapping's end, which is
    // page-aligned (16-byte aligned as the ABI asks). The child runs
    // `leaf_start` there in this address space while this thread is
    // suspended, so `leaf`, `arg` and the mapping outlive its use of them; it
    // never returns into this frame (`entry` ends in `execve` or `_exit`).
    let pid = unsafe {
        libc::clone(
            leaf_start::<A>,
            base.cast::<u8>().add(size).cast::<libc::c_void>(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&leaf as *const Leaf<'_, A>)
                .cast_mut()
                .cast::<libc::c_void>(),
        )
    };
    let error = errno::last();
    unmap();
    if pid < 0 {
        return Err(error);
    }
    Ok(pid)
}

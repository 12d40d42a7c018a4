//! Signals in a cloned child: masks, waiting for one, sending one.

use std::ffi::c_int;
use std::{mem, ptr};

use nix::libc;

use super::errno::{Errno, check, check_long};

/// A set of signals.
#[derive(Clone, Copy)]
pub(crate) struct SignalSet(libc::sigset_t);

impl SignalSet {
    /// No signal.
    pub(crate) fn empty() -> Self {
        // SAFETY: `sigset_t` is plain data; sigemptyset initialises it.
        let mut set: libc::sigset_t = unsafe { mem::zeroed() };
        // SAFETY: a valid pointer to the local set.
        unsafe { libc::sigemptyset(&mut set) };
        Self(set)
    }

    /// The set as the C type, for a system call.
    pub(crate) fn as_raw(&self) -> &libc::sigset_t {
        &self.0
    }

    /// This set and `signal`.
    pub(crate) fn with(mut self, signal: c_int) -> Self {
        // SAFETY: a valid pointer to the set; an invalid number is refused (EINVAL)
        // and leaves the set as it was.
        unsafe { libc::sigaddset(&mut self.0, signal) };
        self
    }
}

/// Makes `set` this process's signal mask (a cloned child is single-threaded, so
/// the process's and the thread's are one).
pub(crate) fn set_mask(set: &SignalSet) -> Result<(), Errno> {
    // SAFETY: a valid set; the old mask is not asked for.
    check(unsafe { libc::sigprocmask(libc::SIG_SETMASK, &set.0, ptr::null_mut()) }).map(drop)
}

/// Installs `handler` for `signal`, with an empty mask and no flags.
pub(crate) fn set_handler(signal: c_int, handler: extern "C" fn(c_int)) -> Result<(), Errno> {
    // SAFETY: `sigaction` is plain data; all-zero is "no flags, empty mask".
    let mut action: libc::sigaction = unsafe { mem::zeroed() };
    action.sa_sigaction = handler as libc::sighandler_t;
    // SAFETY: a valid action; the old one is not asked for. `handler` is a
    // plain function that stays valid for the life of the process.
    check(unsafe { libc::sigaction(signal, &action, ptr::null_mut()) }).map(drop)
}

/// Restores the default disposition of `signal` (handlers of the process this
/// one was cloned from must never run here).
pub(crate) fn set_default(signal: c_int) -> Result<(), Errno> {
    // SAFETY: `sigaction` is plain data; all-zero is SIG_DFL with no flags.
    let action: libc::sigaction = unsafe { mem::zeroed() };
    // SAFETY: a valid action; the old one is not asked for.
    check(unsafe { libc::sigaction(signal, &action, ptr::null_mut()) }).map(drop)
}

/// A signal taken by [`wait_for`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Taken {
    /// The signal's number.
    pub(crate) signal: c_int,
    /// Who sent it, as this process's pid namespace sees it: 0 for a sender
    /// outside it (the host) or the kernel.
    pub(crate) sender: libc::pid_t,
}

/// Waits, without a timeout, until one signal of `set` (which must be blocked)
/// is pending, and takes it (`rt_sigtimedwait`; `EINTR` is returned as is).
pub(crate) fn wait_for(set: &SignalSet) -> Result<Taken, Errno> {
    // SAFETY: `siginfo_t` is plain data the kernel fills.
    let mut info: libc::siginfo_t = unsafe { mem::zeroed() };
    // SAFETY: the raw call with the kernel's sigset size, a valid set and
    // out-pointer and no timeout.
    let signal = check_long(unsafe {
        libc::syscall(
            libc::SYS_rt_sigtimedwait,
            &raw const set.0,
            &raw mut info,
            ptr::null::<libc::timespec>(),
            mem::size_of::<libc::c_ulong>(),
        )
    })?;
    // SAFETY: `si_pid` reads the union field the kernel sets for signals sent
    // with kill or pidfd_send_signal, and for SIGCHLD; for others it is 0.
    let sender = unsafe { info.si_pid() };
    Ok(Taken {
        signal: signal as c_int,
        sender,
    })
}

/// `kill(pid, signal)`.
pub(crate) fn kill(pid: libc::pid_t, signal: c_int) -> Result<(), Errno> {
    // SAFETY: kill has no memory arguments.
    check(unsafe { libc::kill(pid, signal) }).map(drop)
}

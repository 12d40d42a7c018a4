//! pid 1 of the run's pid namespace, and the command it forks.
//!
//! A new pid namespace applies to the children of the process that creates it, and
//! the cloned child *is* pid 1; the command needs one more fork. pid 1 stays behind
//! as a minimal init: it reaps every process that is reparented to it, and when the
//! command ends it writes the command's raw wait status to the status pipe, kills
//! what is left (`kill(-1, SIGKILL)`; the kernel would do the same when pid 1
//! exits) and exits. So the whole tree ends when the command ends, and the host's
//! `waitpid` on pid 1 returns only after the namespace is empty.
//!
//! The command starts a session of its own (`setsid`), so it never shares the
//! runner's controlling terminal; with [`SpawnRequest::controlling_terminal`] it
//! then makes its stdin (a pseudo-terminal's slave) its controlling terminal.
//!
//! [`SpawnRequest::controlling_terminal`]: super::SpawnRequest::controlling_terminal
//!
//! Signals stay blocked in pid 1, which takes them one at a time with
//! `rt_sigtimedwait`: `SIGCHLD` means something to reap; one of
//! [`FORWARDED_SIGNALS`] sent from outside the namespace (the host, through the
//! pidfd) is passed on to the command, so a supervisor's `SIGTERM` lets it stop
//! cleanly; the same signal from a process of the run, and anything else, is
//! discarded. Nothing runs in a signal handler. The host ends the whole namespace
//! with `SIGKILL`.

use std::convert::Infallible;
use std::mem;
use std::ptr;

use nix::libc;

use super::error::{ChildStage, Report, op};
use super::forward;
use super::prepared::Prepared;
use super::protocol::{FD_ERROR, FD_STATUS};
use super::raw;

/// The signals pid 1 passes on to the command: what supervisors send to ask a
/// process to stop, reload or redraw.
pub const FORWARDED_SIGNALS: [libc::c_int; 7] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGWINCH,
];

/// The handler pid 1 installs for [`FORWARDED_SIGNALS`] so that the kernel
/// delivers them to an init at all (it drops signals an init has no handler for);
/// they stay blocked and are taken by `rt_sigtimedwait`, so it never runs.
extern "C" fn never_runs(_: libc::c_int) {}

/// Installs the request's seccomp filter in pid 1, right before it forks the
/// command (after the mount plan and `no_new_privs`). The command inherits it
/// across the fork and `execve`; pid 1 carries it too, so no process of the run
/// is ever without the filter. What pid 1 still does (`clone` without
/// `CLONE_NEWUSER`, `waitpid`, `write`, `kill`, `_exit`) is allowed by it.
pub(crate) fn install_seccomp(p: &Prepared) -> Result<(), Report> {
    let Some(program) = &p.seccomp else {
        return Ok(());
    };
    let fprog = libc::sock_fprog {
        len: program.len() as libc::c_ushort,
        filter: program.as_ptr().cast_mut(),
    };
    // SAFETY: `fprog` points at the BPF program prepared before clone, which
    // outlives the call; no_new_privs is already set.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0u32,
            &raw const fprog,
        )
    };
    if ret < 0 {
        return Err(report(ChildStage::Seccomp, raw::errno()));
    }
    Ok(())
}

/// Who waits for the command once it is forked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Supervisor {
    /// pid 1 of the command's own pid namespace: it reaps everything, passes on
    /// only signals from outside the namespace, and ends the namespace (`kill(-1)`)
    /// when the command ends.
    NamespaceInit,
    /// A child that joined a live sandbox: it stays in the host's pid namespace
    /// (only its children enter the sandbox's), so nothing in the sandbox can see
    /// or signal it and every signal it gets comes from the host; it passes them
    /// on, reports the command's status and exits. It never calls `kill(-1)`: in
    /// the host's pid namespace that would reach processes outside the sandbox.
    Joined,
}

/// Forks the command; the caller continues as its supervisor and never returns.
pub(crate) fn fork_command(p: &Prepared, supervisor: Supervisor) -> Result<Infallible, Report> {
    // SAFETY: a fork-style raw clone (see `child.rs`): no glibc fork handlers, no
    // locks; both sides continue with raw system calls only.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            libc::SIGCHLD as libc::c_ulong,
            ptr::null_mut::<libc::c_void>(),
            ptr::null_mut::<libc::c_void>(),
            ptr::null_mut::<libc::c_void>(),
            0usize,
        )
    };
    if pid < 0 {
        return Err(report(ChildStage::Fork, raw::errno()));
    }
    if pid == 0 {
        let error = exec_command(p);
        let _ = raw::write_all(FD_ERROR, &error.encode());
        // SAFETY: ends the command process without running any destructor.
        unsafe { libc::_exit(127) }
    }
    init(pid as libc::pid_t, supervisor)
}

/// pid 1 of a live sandbox: it holds the namespaces until it is killed (and
/// forwards the published ports, [`forward`]). It
/// leaves the runner's session, closes its stdio and the error pipe (EOF tells the
/// parent the sandbox is ready; the status pipe stays open, so the parent does not
/// mistake readiness for an early death), then reaps whatever is reparented to it
/// for the sandbox's whole life. Every signal stays blocked and only `SIGCHLD` is
/// taken: an init without handlers ignores the rest, from inside or from the host,
/// except `SIGKILL`, which ends the whole sandbox.
pub(crate) fn hold(p: &Prepared) -> Result<Infallible, Report> {
    // SAFETY: setsid has no memory arguments; pid 1 is not a group leader (its
    // process group is the runner's), so it cannot fail with EPERM here.
    if unsafe { libc::setsid() } < 0 {
        return Err(report(ChildStage::Session, raw::errno()));
    }
    let forwarder = if p.published.is_empty() {
        None
    } else {
        Some(forward::prepare()?)
    };
    // SAFETY: closing descriptors pid 1 no longer needs.
    unsafe {
        libc::close(0);
        libc::close(1);
        libc::close(2);
        libc::close(FD_ERROR);
    }
    if let Some(forwarder) = forwarder {
        forward::serve(forwarder, &p.published);
    }
    // SAFETY: `sigset_t` is plain data initialised here.
    let waited = unsafe {
        let mut set: libc::sigset_t = mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        set
    };
    loop {
        // SAFETY: as in `supervise`.
        let mut info: libc::siginfo_t = unsafe { mem::zeroed() };
        // SAFETY: raw rt_sigtimedwait on a valid set and out-pointer, no timeout.
        let signal = unsafe {
            libc::syscall(
                libc::SYS_rt_sigtimedwait,
                &raw const waited,
                &raw mut info,
                ptr::null::<libc::timespec>(),
                mem::size_of::<libc::c_ulong>(),
            )
        };
        if signal < 0 && raw::errno() != libc::EINTR {
            // Cannot wait for signals: reap with blocking waits instead (ECHILD
            // while nothing runs: wait for a signal-free moment and retry).
            let mut st: libc::c_int = 0;
            // SAFETY: valid out-pointer.
            if unsafe { libc::waitpid(-1, &mut st, libc::__WALL) } < 0 {
                let pause = libc::timespec {
                    tv_sec: 1,
                    tv_nsec: 0,
                };
                // SAFETY: a valid timespec; a null remainder pointer.
                unsafe { libc::nanosleep(&pause, ptr::null_mut()) };
            }
            continue;
        }
        loop {
            let mut st: libc::c_int = 0;
            // SAFETY: valid out-pointer.
            let pid = unsafe { libc::waitpid(-1, &mut st, libc::__WALL | libc::WNOHANG) };
            if pid <= 0 {
                break;
            }
        }
    }
}

fn report(stage: ChildStage, errno: raw::Errno) -> Report {
    Report {
        stage: stage as u32,
        index: 0,
        op: op::CALL,
        errno,
    }
}

/// The command's side: new session, the controlling terminal when asked for,
/// signals unblocked, `execve` (the seccomp filter is inherited from pid 1).
/// Returns only on failure.
fn exec_command(p: &Prepared) -> Report {
    // SAFETY: setsid has no memory arguments.
    if unsafe { libc::setsid() } < 0 {
        return report(ChildStage::Session, raw::errno());
    }
    // A session leader without a controlling terminal acquires stdin (the slave of
    // the command's pseudo-terminal, which no other session has) with argument 0:
    // no capability is needed or used to steal a terminal from another session.
    // SAFETY: TIOCSCTTY takes an integer argument; fd 0 is the command's stdin.
    if p.controlling_terminal && unsafe { libc::ioctl(0, libc::TIOCSCTTY, 0 as libc::c_int) } < 0 {
        return report(ChildStage::ControllingTerminal, raw::errno());
    }
    // SAFETY: `sigset_t` is plain data; sigemptyset initialises it and the empty
    // mask is installed for this process only.
    unsafe {
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        if libc::sigprocmask(libc::SIG_SETMASK, &none, ptr::null_mut()) < 0 {
            return report(ChildStage::Session, raw::errno());
        }
    }
    // Try each candidate as execvp does: a missing or inaccessible one moves on to
    // the next; any other failure (not executable format, too big...) is final.
    // EACCES is kept to report if nothing better is found.
    let mut error = libc::ENOENT;
    for program in &p.programs {
        // SAFETY: program, argv and envp are NUL-terminated strings and
        // null-terminated pointer arrays kept alive by `p`.
        unsafe { libc::execve(program.as_ptr(), p.argv.as_ptr(), p.envp.as_ptr()) };
        match raw::errno() {
            libc::ENOENT | libc::ENOTDIR => {}
            libc::EACCES => error = libc::EACCES,
            other => return report(ChildStage::Exec, other),
        }
    }
    report(ChildStage::Exec, error)
}

/// The supervisor: reap until the command ends, report its status; as a
/// namespace's pid 1, end the namespace.
fn init(command: libc::pid_t, supervisor: Supervisor) -> ! {
    // SAFETY: closing descriptors pid 1 no longer needs: its copy of the error pipe
    // (so the parent sees EOF once the command has exec'd) and the command's stdio
    // (so the caller sees EOF when the command's tree closes them).
    unsafe {
        libc::close(FD_ERROR);
        libc::close(0);
        libc::close(1);
        libc::close(2);
    }
    let (found, status) = supervise(command, supervisor);
    if found {
        let _ = raw::write_all(FD_STATUS, &status.to_ne_bytes());
    }
    if supervisor == Supervisor::NamespaceInit {
        // SAFETY: kill(-1) in a pid namespace reaches every process of the
        // namespace except pid 1 itself; nothing outside it is visible from here.
        unsafe { libc::kill(-1, libc::SIGKILL) };
    }
    let code = if !found {
        127
    } else if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        127
    };
    // SAFETY: ends pid 1 (and with it the namespace) without destructors.
    unsafe { libc::_exit(code) }
}

/// Reaps every process reparented to pid 1 and forwards [`FORWARDED_SIGNALS`] to
/// the command until the command ends; returns whether it was seen to end, and
/// its raw wait status.
fn supervise(command: libc::pid_t, supervisor: Supervisor) -> (bool, libc::c_int) {
    // SAFETY: `sigset_t` and `sigaction` are plain data initialised here; the
    // handler is a function that does nothing; every call affects pid 1 only.
    let waited = unsafe {
        let mut set: libc::sigset_t = mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        let mut action: libc::sigaction = mem::zeroed();
        action.sa_sigaction = never_runs as extern "C" fn(libc::c_int) as libc::sighandler_t;
        for signal in FORWARDED_SIGNALS {
            libc::sigaddset(&mut set, signal);
            libc::sigaction(signal, &action, ptr::null_mut());
        }
        set
    };
    loop {
        // SAFETY: `siginfo_t` is plain data the kernel fills.
        let mut info: libc::siginfo_t = unsafe { mem::zeroed() };
        // SAFETY: raw rt_sigtimedwait with the kernel's sigset size, a valid
        // siginfo out-pointer and no timeout: waits for one signal of `waited`.
        let signal = unsafe {
            libc::syscall(
                libc::SYS_rt_sigtimedwait,
                &raw const waited,
                &raw mut info,
                ptr::null::<libc::timespec>(),
                mem::size_of::<libc::c_ulong>(),
            )
        };
        if signal < 0 {
            if raw::errno() == libc::EINTR {
                continue;
            }
            return reap_blocking(command);
        }
        let signal = signal as libc::c_int;
        if signal != libc::SIGCHLD {
            // Only a signal from outside the pid namespace (the host, through the
            // pidfd) is passed on: the kernel reports its sender as pid 0. A
            // process of the run signalling init reaches nothing.
            // SAFETY: `si_pid` reads the union field the kernel set for a
            // signal sent with kill/pidfd_send_signal.
            let from_outside = supervisor == Supervisor::Joined || unsafe { info.si_pid() } == 0;
            if from_outside {
                // SAFETY: kill has no memory arguments; `command` is pid 1's child.
                unsafe { libc::kill(command, signal) };
            }
            continue;
        }
        // One SIGCHLD may stand for several children: reap all that ended.
        loop {
            let mut st: libc::c_int = 0;
            // SAFETY: valid out-pointer.
            let pid = unsafe { libc::waitpid(-1, &mut st, libc::__WALL | libc::WNOHANG) };
            if pid == command {
                return (true, st);
            }
            if pid <= 0 {
                break;
            }
        }
    }
}

/// Reaps with a blocking `waitpid` until the command ends (when signals cannot
/// be waited for: no forwarding then).
fn reap_blocking(command: libc::pid_t) -> (bool, libc::c_int) {
    loop {
        let mut st: libc::c_int = 0;
        // SAFETY: valid out-pointer.
        let pid = unsafe { libc::waitpid(-1, &mut st, libc::__WALL) };
        if pid == command {
            return (true, st);
        }
        if pid < 0 && raw::errno() != libc::EINTR {
            return (false, 0);
        }
    }
}

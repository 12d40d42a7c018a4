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
use std::time::Duration;

use nix::libc;

use super::error::{ChildStage, Report, op};
use super::forward;
use super::prepared::Prepared;
use super::protocol::{FD_ERROR, FD_STATUS};
use crate::sys::process::{self, Reaped};
use crate::sys::signal::{self, SignalSet};
use crate::sys::{self, Birth};

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
    match &p.seccomp {
        Some(program) => {
            process::install_seccomp(program).map_err(|e| report(ChildStage::Seccomp, e))
        }
        None => Ok(()),
    }
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
    // Signals are blocked already (the clone that made this process blocked them),
    // and this process is single-threaded: the command shares its memory until
    // its `execve` (nothing of a copy of the runner is copied again).
    let command =
        sys::vfork_like(p, command_process).map_err(|errno| report(ChildStage::Fork, errno))?;
    init(command, supervisor)
}

/// The forked command: [`exec_command`], or its failure on the error pipe.
fn command_process(p: &Prepared, _: Birth) -> ! {
    let error = exec_command(p);
    let _ = sys::write_all(FD_ERROR, &error.encode());
    process::exit(127)
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
    // pid 1 is not a group leader (its process group is the runner's), so this
    // cannot fail with EPERM.
    process::setsid().map_err(|e| report(ChildStage::Session, e))?;
    let forwarder = if p.published.is_empty() && p.broker < 0 {
        None
    } else {
        Some(forward::prepare(&p.connections)?)
    };
    if p.first_process {
        // Its exec closes its copy of the error pipe, so the parent's EOF
        // (below, once pid 1 closed its own) also says it runs.
        sys::vfork_like(p, first_process)
            .map_err(|errno| report(ChildStage::FirstProcess, errno))?;
    }
    // Descriptors pid 1 no longer needs.
    for fd in [0, 1, 2, FD_ERROR] {
        sys::close(fd);
    }
    if let Some(forwarder) = forwarder {
        forward::serve(forwarder, &p.published, p.broker);
    }
    let waited = SignalSet::empty().with(libc::SIGCHLD);
    loop {
        match signal::wait_for(&waited) {
            Ok(_) | Err(libc::EINTR) => {}
            // Cannot wait for signals: reap with blocking waits instead (ECHILD
            // while nothing runs: wait for a signal-free moment and retry).
            Err(_) => {
                if process::wait_any(true).is_err() {
                    process::sleep(Duration::from_secs(1));
                }
                continue;
            }
        }
        while let Ok(Some(_)) = process::wait_any(false) {}
    }
}

/// The forked first process (see [`super::Pid1::HoldSandbox`]): it keeps only
/// its stdio and the error pipe, close-on-exec, and execs `argv`; a failure
/// goes to the error pipe and fails the sandbox's start.
fn first_process(p: &Prepared, _: Birth) -> ! {
    // The status pipe, what pid 1 holds open and the published ports'
    // listeners are pid 1's alone.
    let kept = sys::fd::close_from(FD_ERROR + 1, 0).and_then(|()| sys::fd::set_cloexec(FD_ERROR));
    let error = match kept {
        // Said as the first process's failure, not a command's.
        Ok(()) => Report {
            stage: ChildStage::FirstProcess as u32,
            ..exec_command(p)
        },
        Err(errno) => report(ChildStage::FirstProcess, errno),
    };
    let _ = sys::write_all(FD_ERROR, &error.encode());
    process::exit(127)
}

fn report(stage: ChildStage, errno: sys::Errno) -> Report {
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
    if let Err(e) = process::setsid() {
        return report(ChildStage::Session, e);
    }
    // A session leader without a controlling terminal acquires stdin (the slave of
    // the command's pseudo-terminal, which no other session has) with argument 0:
    // no capability is needed or used to steal a terminal from another session.
    if p.controlling_terminal
        && let Err(e) = process::take_stdin_as_controlling_terminal()
    {
        return report(ChildStage::ControllingTerminal, e);
    }
    if let Err(e) = signal::set_mask(&SignalSet::empty()) {
        return report(ChildStage::Session, e);
    }
    // Try each candidate as execvp does: a missing or inaccessible one moves on to
    // the next; any other failure (not executable format, too big...) is final.
    // EACCES is kept to report if nothing better is found.
    let mut error = libc::ENOENT;
    for program in &p.programs {
        match sys::execve(program, &p.argv, &p.envp) {
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
    // Descriptors pid 1 no longer needs: its copy of the error pipe (so the parent
    // sees EOF once the command has exec'd) and the command's stdio (so the caller
    // sees EOF when the command's tree closes them).
    for fd in [FD_ERROR, 0, 1, 2] {
        sys::close(fd);
    }
    let (found, status) = supervise(command, supervisor);
    if found {
        let _ = sys::write_all(FD_STATUS, &status.to_ne_bytes());
    }
    if supervisor == Supervisor::NamespaceInit {
        // kill(-1) in a pid namespace reaches every process of the namespace
        // except pid 1 itself; nothing outside it is visible from here.
        let _ = signal::kill(-1, libc::SIGKILL);
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
    // Ends pid 1, and with it the namespace.
    process::exit(code)
}

/// Reaps every process reparented to pid 1 and forwards [`FORWARDED_SIGNALS`] to
/// the command until the command ends; returns whether it was seen to end, and
/// its raw wait status.
fn supervise(command: libc::pid_t, supervisor: Supervisor) -> (bool, libc::c_int) {
    let mut waited = SignalSet::empty().with(libc::SIGCHLD);
    for forwarded in FORWARDED_SIGNALS {
        waited = waited.with(forwarded);
        // Without a handler the kernel drops a signal sent to an init.
        let _ = signal::set_handler(forwarded, never_runs);
    }
    loop {
        let taken = match signal::wait_for(&waited) {
            Ok(taken) => taken,
            Err(libc::EINTR) => continue,
            Err(_) => return reap_blocking(command),
        };
        if taken.signal != libc::SIGCHLD {
            // Only a signal from outside the pid namespace (the host, through the
            // pidfd) is passed on: the kernel reports its sender as pid 0. A
            // process of the run signalling init reaches nothing.
            if supervisor == Supervisor::Joined || taken.sender == 0 {
                let _ = signal::kill(command, taken.signal);
            }
            continue;
        }
        // One SIGCHLD may stand for several children: reap all that ended.
        while let Ok(Some(Reaped { pid, status })) = process::wait_any(false) {
            if pid == command {
                return (true, status);
            }
        }
    }
}

/// Reaps with a blocking `waitpid` until the command ends (when signals cannot
/// be waited for: no forwarding then).
fn reap_blocking(command: libc::pid_t) -> (bool, libc::c_int) {
    loop {
        match process::wait_any(true) {
            Ok(Some(Reaped { pid, status })) if pid == command => return (true, status),
            Ok(_) | Err(libc::EINTR) => {}
            Err(_) => return (false, 0),
        }
    }
}

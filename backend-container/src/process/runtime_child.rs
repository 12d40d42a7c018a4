//! The OCI runtime started for one process of a container, with
//! `posix_spawn`: the C library starts it from a child sharing this
//! process's memory until the runtime's `execve` (`CLONE_VM | CLONE_VFORK`),
//! instead of copying the page tables of what may be a large host
//! application and faulting on every page either side writes after; a `fork`
//! with a closure to place descriptors (what `Command::pre_exec` needs) costs
//! that copy.
//!
//! The runtime is waited for as tokio waits for its own children: woken by
//! `SIGCHLD`, then reaped without blocking; no thread blocks in `waitpid`,
//! and a wait dropped halfway loses nothing. Only this handle (or, once it is
//! dropped, the task it leaves) reaps it, so its pid names it (a zombie at
//! worst) until then.

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;

use nix::errno::Errno;
use nix::spawn::{PosixSpawnAttr, PosixSpawnFileActions, PosixSpawnFlags};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::WaitPidFlag;
use nix::unistd::Pid;
use tokio::signal::unix::{Signal as SignalStream, SignalKind, signal};

/// Where the descriptors to place are parked first: above every number they
/// go to, so that placing one never overwrites another not yet placed.
const PARKED_FROM: RawFd = 64;

/// A runtime process this process started, until it is reaped.
#[derive(Debug)]
pub(crate) struct RuntimeChild {
    pid: Pid,
    /// `SIGCHLD`s since it was started (given to the reaping task when the
    /// handle is dropped unreaped).
    children_ended: Option<SignalStream>,
    status: Option<ExitStatus>,
}

impl RuntimeChild {
    /// Starts `program` with `args`, this process's environment, `/dev/null`
    /// as its standard streams, and each `(descriptor, number)` of `placed`
    /// at that number (above 2); nothing else of this process's descriptors
    /// (every one is close-on-exec). Within a tokio runtime.
    pub(crate) fn spawn(
        program: &Path,
        args: &[OsString],
        placed: &[(BorrowedFd<'_>, RawFd)],
    ) -> std::io::Result<Self> {
        let c = |s: &OsStr| CString::new(s.as_bytes()).map_err(std::io::Error::other);
        let mut argv = vec![c(program.as_os_str())?];
        for arg in args {
            argv.push(c(arg)?);
        }
        let envp = std::env::vars_os()
            .map(|(name, value)| {
                let mut pair = name;
                pair.push("=");
                pair.push(value);
                c(&pair)
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        let null = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")?;
        let streams = [(null.as_fd(), 0), (null.as_fd(), 1), (null.as_fd(), 2)];
        let parked = streams
            .iter()
            .chain(placed)
            .map(|(fd, number)| Ok((rustix::io::fcntl_dupfd_cloexec(fd, PARKED_FROM)?, *number)))
            .collect::<std::io::Result<Vec<_>>>()?;
        let mut actions = PosixSpawnFileActions::init()?;
        for (fd, number) in &parked {
            // A descriptor put in place by `dup2` is not close-on-exec.
            actions.add_dup2(fd.as_raw_fd(), *number)?;
        }
        let mut attr = PosixSpawnAttr::init()?;
        // As `std::process::Command` starts a program: no signal blocked, and
        // `SIGPIPE` (which Rust programs ignore) back to its default.
        attr.set_sigmask(&SigSet::empty())?;
        let mut defaults = SigSet::empty();
        defaults.add(Signal::SIGPIPE);
        attr.set_sigdefault(&defaults)?;
        attr.set_flags(
            PosixSpawnFlags::POSIX_SPAWN_SETSIGMASK | PosixSpawnFlags::POSIX_SPAWN_SETSIGDEF,
        )?;
        // Listening before it starts: no `SIGCHLD` of it is missed.
        let children_ended = signal(SignalKind::child())?;
        let pid = nix::spawn::posix_spawn(program, &actions, &attr, &argv, &envp)?;
        drop(parked);
        Ok(Self {
            pid,
            children_ended: Some(children_ended),
            status: None,
        })
    }

    /// How it ended, if it has (reaped then); never blocks.
    pub(crate) fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        if self.status.is_none() {
            self.status = reap(self.pid, WaitPidFlag::WNOHANG)?;
        }
        Ok(self.status)
    }

    /// Waits until it ended; cancel-safe.
    pub(crate) async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(status);
            }
            // Any child's end wakes every listener; this one's is looked for.
            // (The listener is taken only when the handle is dropped.)
            if let Some(children_ended) = self.children_ended.as_mut() {
                children_ended.recv().await;
            }
        }
    }

    /// Sends it `SIGKILL` (nothing when it was reaped already).
    pub(crate) fn kill(&self) {
        if self.status.is_none() {
            let _ = nix::sys::signal::kill(self.pid, Signal::SIGKILL);
        }
    }
}

impl Drop for RuntimeChild {
    fn drop(&mut self) {
        if self.status.is_some() {
            return;
        }
        // Not waited for: it goes on (as an attached runtime of a command
        // left running would) and is reaped when it ends, by a task of the
        // tokio runtime this was started in (else by a thread of its own).
        let pid = self.pid;
        if let (Ok(tokio), Some(mut children_ended)) = (
            tokio::runtime::Handle::try_current(),
            self.children_ended.take(),
        ) {
            tokio.spawn(async move {
                while matches!(reap(pid, WaitPidFlag::WNOHANG), Ok(None)) {
                    if children_ended.recv().await.is_none() {
                        break;
                    }
                }
            });
            return;
        }
        let _ = std::thread::Builder::new()
            .name("aw-runtime-reap".into())
            .spawn(move || {
                let _ = nix::sys::wait::waitpid(pid, None);
            });
    }
}

/// Reaps `pid` if it has ended (`WNOHANG`), or once it ends.
fn reap(pid: Pid, flags: WaitPidFlag) -> std::io::Result<Option<ExitStatus>> {
    use nix::sys::wait::WaitStatus;
    loop {
        // The raw status `ExitStatus` is made of: the code in the second
        // byte, or the signal in the first (with the core-dump bit).
        return match nix::sys::wait::waitpid(pid, Some(flags)) {
            Ok(WaitStatus::Exited(_, code)) => Ok(Some(ExitStatus::from_raw((code & 0xff) << 8))),
            Ok(WaitStatus::Signaled(_, signal, core)) => Ok(Some(ExitStatus::from_raw(
                signal as i32 | if core { 0x80 } else { 0 },
            ))),
            Ok(_) => Ok(None),
            Err(Errno::EINTR) => continue,
            Err(errno) => Err(errno.into()),
        };
    }
}

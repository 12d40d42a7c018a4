//! The boundary probe's shell: how it starts, is talked to and ends.
//!
//! Where the runner may enter pid 1 (host root), the shell is pid 1's first
//! process, started with the sandbox (see
//! [`Pid1::HoldSandbox`](crate::spawn::Pid1::HoldSandbox)): the probe needs no
//! entry into the sandbox of its own, and stays in pid 1's cgroup, where it was
//! born. A runner that enters through the sandbox's door joins it as every
//! command is joined, in a cgroup of its own.

use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::libc;

use super::error::ProcessError;
use super::pipe;
use super::spec::RunSpec;
use crate::cgroup::RunCgroup;
use crate::spawn::Sandbox;
use crate::spawn::{SpawnError, SpawnRequest, SpawnedChild, join};
use crate::sys::pidfd;

/// The program the probe runs.
const SHELL: &str = "/bin/sh";
/// How long killed leftovers of the probe get to leave pid 1's cgroup, even
/// when the probe's deadline is nearer.
const KILL_GRACE: Duration = Duration::from_millis(100);
/// The name of the probe's cgroup, below the run's.
const PROBE_CGROUP: &str = "probe";

/// The host's ends of the pipes of a probe shell that pid 1 starts as its
/// first process, before the sandbox is spawned.
pub(crate) struct ProbeEnds {
    stdin: OwnedFd,
    output: OwnedFd,
}

impl ProbeEnds {
    /// Makes `request`'s first process the probe's shell, as a command of
    /// `spec` would be (its environment; stdout and stderr one pipe), and
    /// keeps the host's ends.
    pub(crate) fn attach(request: &mut SpawnRequest, spec: &RunSpec) -> Result<Self, ProcessError> {
        let (ends, [stdin, stdout, stderr]) = Self::new()?;
        request.argv = vec![SHELL.into()];
        request.env = spec.env.clone();
        (request.stdin, request.stdout, request.stderr) = (Some(stdin), Some(stdout), Some(stderr));
        Ok(ends)
    }

    /// The pipes of a probe shell: the host's ends, and the shell's stdin,
    /// stdout and stderr (stdout and stderr one pipe).
    fn new() -> Result<(Self, [OwnedFd; 3]), ProcessError> {
        let (stdin_read, stdin) = pipe("the probe's stdin pipe")?;
        let (output, write) = pipe("the probe's stdout pipe")?;
        let write_err = write.try_clone().map_err(|source| ProcessError::Pipe {
            step: "duplicating the probe's stdout",
            source,
        })?;
        Ok((Self { stdin, output }, [stdin_read, write, write_err]))
    }

    /// The shell, started as host pid `pid` in pid 1's cgroup `init` (`None`:
    /// not found there), where it stays: moving another process between
    /// cgroups takes the cgroup core's thread-group lock, whose first writer
    /// waits for an RCU grace period (milliseconds, more on a loaded host),
    /// while a process born in a cgroup needs no move. Its pidfd is taken, and
    /// then its pid checked to be still in `init` (so the pidfd names the
    /// shell), while its stdin, held here, keeps it waiting with no child yet.
    /// `pid1` is the only other process `init` holds: what else is there once
    /// the shell ended is what the probe left, stopped then (see
    /// [`ProbeShell::end`]).
    pub(crate) fn started(
        self,
        pid: Option<u32>,
        init: RunCgroup,
        pid1: u32,
    ) -> Result<ProbeShell, ProcessError> {
        let lost = || ProcessError::Lost {
            what: "the probe's shell is not in its pid 1's cgroup",
        };
        let pid = pid.ok_or_else(lost)?;
        let pidfd = i32::try_from(pid)
            .map_err(|_| libc::ESRCH)
            .and_then(pidfd::open)
            .map_err(|errno| ProcessError::Pipe {
                step: "opening the probe shell's pidfd",
                source: std::io::Error::from_raw_os_error(errno),
            })?;
        if !init.pids().unwrap_or_default().contains(&pid) {
            return Err(lost());
        }
        Ok(ProbeShell {
            pid,
            stdin: Some(std::fs::File::from(self.stdin)),
            output: self.output,
            started: Started::ByPid1 { pidfd, init, pid1 },
        })
    }
}

/// The probe's shell: its host pid, its stdin and output, how it started.
pub(crate) struct ProbeShell {
    /// Its host pid.
    pub(super) pid: u32,
    stdin: Option<std::fs::File>,
    output: OwnedFd,
    started: Started,
}

/// How the probe's shell started, which says how its end is seen.
enum Started {
    /// Pid 1's first process, in pid 1's cgroup `init` (`pid1` the other
    /// process there): pid 1 reaps it; its end shows on its pidfd.
    ByPid1 {
        pidfd: OwnedFd,
        init: RunCgroup,
        pid1: u32,
    },
    /// Joined as a command is: its supervisor is this process's child.
    Joined(SpawnedChild),
}

impl ProbeShell {
    /// Joins the shell into `sandbox` as a command of `spec` is, in a cgroup
    /// of its own below `run`.
    pub(super) fn join(
        (spec, run, sandbox): (&RunSpec, &RunCgroup, &Sandbox),
        timeout: Duration,
        after_ms: u64,
    ) -> Result<Self, ProcessError> {
        let (ends, [stdin, stdout, stderr]) = ProbeEnds::new()?;
        let cgroup = run
            .create_child(PROBE_CGROUP)
            .map_err(|source| ProcessError::Cgroup {
                step: "creating the probe's cgroup",
                source,
            })?;
        let mut request = spec.request(vec![SHELL.into()], &cgroup);
        (request.stdin, request.stdout, request.stderr) = (Some(stdin), Some(stdout), Some(stderr));
        request.setup_timeout = timeout;
        let child = join(sandbox, &request);
        drop(request);
        let child: SpawnedChild = child.map_err(|source| match source {
            SpawnError::SetupTimeout { .. } => ProcessError::ProbeTimeout { after_ms },
            source => ProcessError::Spawn {
                step: "starting the boundary probe",
                source,
            },
        })?;
        // The cgroup holds the supervisor (`child`) and the shell it forked,
        // which has exec'd by now (join returns once it did).
        let pid = cgroup
            .pids()
            .unwrap_or_default()
            .into_iter()
            .find(|pid| *pid != child.pid());
        let Some(pid) = pid else {
            let _ = child.kill();
            return Err(ProcessError::Lost {
                what: "the probe's shell is not in its cgroup",
            });
        };
        Ok(Self {
            pid,
            stdin: Some(std::fs::File::from(ends.stdin)),
            output: ends.output,
            started: Started::Joined(child),
        })
    }

    /// Writes `text` to the shell's stdin; a shell that is gone fails the
    /// write, and what it should have printed is then missing.
    pub(super) fn tell(&mut self, text: &str) {
        if let Some(stdin) = self.stdin.as_mut() {
            let _ = stdin.write_all(text.as_bytes());
        }
    }

    /// What the shell prints until `deadline`: one line, or everything once
    /// its stdin closed; killed (the timeout error) when the deadline passes.
    pub(super) fn read(
        &mut self,
        line: bool,
        deadline: Instant,
        after_ms: u64,
    ) -> Result<String, ProcessError> {
        if !line {
            self.stdin = None;
        }
        match read_up_to(self.output.as_fd(), deadline, line) {
            Ok(Some(text)) if line => Ok(text.trim_end_matches('\n').to_owned()),
            Ok(Some(text)) => Ok(text),
            Ok(None) => Err(self.kill(after_ms)),
            Err(source) => {
                let _ = self.kill(after_ms);
                Err(ProcessError::Pipe {
                    step: "reading the probe's output",
                    source,
                })
            }
        }
    }

    /// Waits for the shell's end (its stdin is closed); how it ended, as the
    /// evidence says it.
    pub(super) fn end(mut self, deadline: Instant, after_ms: u64) -> Result<String, ProcessError> {
        let ended = match &self.started {
            Started::ByPid1 { pidfd, .. } => wait_pidfd(pidfd.as_fd(), deadline),
            Started::Joined(child) => wait_pidfd(child.pidfd(), deadline),
        };
        if !ended {
            return Err(self.kill(after_ms));
        }
        match &mut self.started {
            // Reaped by pid 1: it ended, and nothing here may know more.
            Started::ByPid1 { init, pid1, .. } => {
                let status = "ended (reaped by the sandbox's pid 1)";
                match stop_left_in_init(init, *pid1, deadline)? {
                    0 => Ok(status.into()),
                    left => Ok(format!("{status}; {left} process(es) it left stopped")),
                }
            }
            Started::Joined(child) => {
                child
                    .wait()
                    .map(|status| format!("{status:?}"))
                    .map_err(|source| ProcessError::Spawn {
                        step: "waiting for the boundary probe",
                        source,
                    })
            }
        }
    }

    /// Kills the shell (a joined one's supervisor too, reaped); the timeout
    /// error.
    fn kill(&mut self, after_ms: u64) -> ProcessError {
        tracing::warn!(
            pid = self.pid,
            after_ms,
            "the boundary probe timed out; killing it"
        );
        match &mut self.started {
            Started::ByPid1 { pidfd, .. } => {
                if let Err(errno) = pidfd::send_signal(pidfd.as_fd(), libc::SIGKILL) {
                    tracing::warn!(errno, "killing the boundary probe failed");
                }
            }
            Started::Joined(child) => {
                if let Err(e) = child.kill().and_then(|()| child.wait().map(drop)) {
                    tracing::warn!(error = %e, "killing the boundary probe failed");
                }
            }
        }
        ProcessError::ProbeTimeout { after_ms }
    }
}

/// Kills whatever runs in pid 1's cgroup `init` besides `pid1` once the
/// probe's shell ended there (an ended process is out of its cgroups before
/// its pidfd says so): what the probe left (a toolchain's daemon, say), which
/// would otherwise pass for part of the sandbox and outlive every command's
/// stop. Each is signalled through a pidfd taken while its pid is still listed
/// in `init`, so a reused pid is never hit; rounds go on until `init` holds
/// `pid1` alone (children forked meanwhile show in the next round) or
/// `deadline` passes, and never for less than [`KILL_GRACE`]. How many were
/// stopped.
fn stop_left_in_init(
    init: &RunCgroup,
    pid1: u32,
    deadline: Instant,
) -> Result<usize, ProcessError> {
    let give_up = deadline.max(Instant::now() + KILL_GRACE);
    let mut stopped = std::collections::BTreeSet::new();
    let left = || -> Result<Vec<u32>, ProcessError> {
        Ok(init
            .pids()
            .map_err(|source| ProcessError::Cgroup {
                step: "listing what the probe left in pid 1's cgroup",
                source,
            })?
            .into_iter()
            .filter(|pid| *pid != pid1)
            .collect())
    };
    loop {
        let pids = left()?;
        if pids.is_empty() {
            return Ok(stopped.len());
        }
        for pid in pids {
            let Ok(pidfd) = i32::try_from(pid)
                .map_err(|_| libc::ESRCH)
                .and_then(pidfd::open)
            else {
                continue; // gone already
            };
            if init.pids().unwrap_or_default().contains(&pid)
                && pidfd::send_signal(pidfd.as_fd(), libc::SIGKILL).is_ok()
            {
                stopped.insert(pid);
            }
        }
        if Instant::now() >= give_up {
            return Err(ProcessError::Lost {
                what: "what the probe left in pid 1's cgroup did not end",
            });
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// What `read` gives until EOF, or until the first newline when `line`.
fn read_up_to(
    read: BorrowedFd<'_>,
    deadline: Instant,
    line: bool,
) -> std::io::Result<Option<String>> {
    let mut output = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        if line && output.contains(&b'\n') {
            break;
        }
        if !poll_in(read, deadline)? {
            return Ok(None);
        }
        match nix::unistd::read(read, &mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let keep = n.min((1usize << 20).saturating_sub(output.len()));
                output.extend_from_slice(&buf[..keep]);
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Some(String::from_utf8_lossy(&output).into_owned()))
}

/// Whether the pidfd says the process ended before `deadline`.
fn wait_pidfd(pidfd: BorrowedFd<'_>, deadline: Instant) -> bool {
    poll_in(pidfd, deadline).unwrap_or(false)
}

/// Waits until `fd` is readable (or hung up); `false` when `deadline` passed.
fn poll_in(fd: BorrowedFd<'_>, deadline: Instant) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        let ms = libc::c_int::try_from(left.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
        let mut fds = [libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        match crate::sys::fd::poll(&mut fds, ms) {
            Ok(ready) if ready > 0 => return Ok(true),
            Ok(_) | Err(libc::EINTR) => {}
            Err(errno) => return Err(std::io::Error::from_raw_os_error(errno)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipe_that_never_ends_times_out() {
        let (read, write) = pipe("a test pipe").unwrap_or_else(|e| panic!("{e}"));
        nix::unistd::write(&write, b"partial").unwrap_or_else(|e| panic!("{e}"));
        let started = Instant::now();
        let got = read_up_to(read.as_fd(), started + Duration::from_millis(200), false)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got, None, "a writer still open: no EOF, so a timeout");
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert!(started.elapsed() < Duration::from_secs(5));
        drop(write);

        let (read, write) = pipe("a test pipe").unwrap_or_else(|e| panic!("{e}"));
        nix::unistd::write(&write, b"all of it").unwrap_or_else(|e| panic!("{e}"));
        drop(write);
        let got = read_up_to(read.as_fd(), Instant::now() + Duration::from_secs(5), false)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got.as_deref(), Some("all of it"));
    }

    #[test]
    fn a_line_is_read_while_its_writer_stays_open() {
        let (read, write) = pipe("a test pipe").unwrap_or_else(|e| panic!("{e}"));
        nix::unistd::write(&write, b"run-1\n").unwrap_or_else(|e| panic!("{e}"));
        let got = read_up_to(read.as_fd(), Instant::now() + Duration::from_secs(5), true)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got.as_deref(), Some("run-1\n"));
        drop(write);
    }
}

//! One process started in a live container: `exec` into a cgroup of its own,
//! its standard streams this side's pipes or files, and how it ended.
//!
//! The runtime stays attached (it is the process's parent: it reaps it and
//! exits with its status, 128 + N after signal N), but the process never
//! holds the runtime's own streams: those are `/dev/null`, and the process's
//! come from this side at descriptors 3, 4 and 5 (`--preserve-fds`), moved to
//! 0, 1 and 2 by `/bin/sh` before it runs the program in its place. An
//! attached `exec` whose process held the runtime's streams would wait for
//! every holder of them, so a command that leaves a server running would
//! never return; detached, the process would be reparented to the host's init,
//! whose reaping the container's pid 1 waits for when it ends.

use std::ffi::OsString;
use std::fmt;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use oci_spec::runtime::{
    LinuxCapabilitiesBuilder, PosixRlimitBuilder, PosixRlimitType, Process, ProcessBuilder,
    UserBuilder,
};
use tokio::net::unix::pipe;
use workspace_core::boundary::{
    BoundaryError, Execution, ExitRecord, InputStream, KillCause, OutputFlush, OutputStream,
};
use workspace_core::evidence::{ExitStatusRecord, HeadTail};

use super::cgroups::CommandCgroup;
use super::runtime_child::RuntimeChild;
use crate::error::ContainerError;
use crate::runtime::Runtime;

/// What moves this side's descriptors 3, 4 and 5 to the standard streams,
/// says it started (one byte on 6, which it then closes), and runs the
/// program in its place (7 and 8, the runtime's own descriptors of the
/// process file and its log, are closed too, should a runtime pass them on).
const STREAMS_WRAPPER: &str =
    "exec 0<&3 1>&4 2>&5 3<&- 4>&- 5>&-; printf . >&6; exec 6>&- 7<&- 8>&-; exec \"$@\"";
/// `$0` of the wrapper shell.
const WRAPPER_NAME: &str = "agent-workspace-command";
/// How long the runtime may take to start a process.
const START_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Everything a process of the container starts from.
#[derive(Clone)]
pub(crate) struct ProcessTemplate {
    /// The container's id.
    pub(crate) container: String,
    /// Its complete environment (credentials included: never printed).
    pub(crate) env: Vec<(String, String)>,
    /// Its ids inside.
    pub(crate) uid: u32,
    /// Its gid inside.
    pub(crate) gid: u32,
    /// The open-files limit.
    pub(crate) open_files: Option<u32>,
    /// The largest file a process may write (the disk cap), as the
    /// container's pid 1 has it.
    pub(crate) file_size_bytes: Option<u64>,
}

impl fmt::Debug for ProcessTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessTemplate")
            .field("container", &self.container)
            .field(
                "env_names",
                &self.env.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("uid", &self.uid)
            .finish_non_exhaustive()
    }
}

/// Where a process's standard streams come from and go.
#[derive(Default)]
pub(crate) struct Streams {
    /// Its stdin: this file, else a pipe ([`Started::stdin`] its write end).
    pub(crate) input: Option<OwnedFd>,
    /// Its stdout and stderr: these files, else pipes ([`Started::stdout`],
    /// [`Started::stderr`] their read ends).
    pub(crate) output: Option<(OwnedFd, OwnedFd)>,
}

/// A process just started, with this side's ends of its pipes.
pub(crate) struct Started {
    /// The attached runtime, the process's parent (its exit is the process's).
    pub(crate) runtime: RuntimeChild,
    /// Its host pid (`None`: it had ended when it was looked for).
    pub(crate) pid: Option<u32>,
    /// Its standard input, when it is a pipe.
    pub(crate) stdin: Option<OwnedFd>,
    /// Its standard output, when it goes to a pipe.
    pub(crate) stdout: Option<OwnedFd>,
    /// Its standard error, when it goes to a pipe.
    pub(crate) stderr: Option<OwnedFd>,
}

impl ProcessTemplate {
    /// The OCI process running `argv` in `cwd` (absolute, inside): the run's
    /// ids, no capability, `no_new_privs`, no core dumps.
    fn process(&self, argv: Vec<String>, cwd: &str) -> Result<Process, ContainerError> {
        let none = LinuxCapabilitiesBuilder::default()
            .bounding(std::collections::HashSet::new())
            .effective(std::collections::HashSet::new())
            .permitted(std::collections::HashSet::new())
            .inheritable(std::collections::HashSet::new())
            .ambient(std::collections::HashSet::new())
            .build()?;
        let mut rlimits = vec![
            PosixRlimitBuilder::default()
                .typ(PosixRlimitType::RlimitCore)
                .soft(0u64)
                .hard(0u64)
                .build()?,
        ];
        if let Some(files) = self.open_files {
            rlimits.push(
                PosixRlimitBuilder::default()
                    .typ(PosixRlimitType::RlimitNofile)
                    .soft(u64::from(files))
                    .hard(u64::from(files))
                    .build()?,
            );
        }
        if let Some(bytes) = self.file_size_bytes {
            rlimits.push(
                PosixRlimitBuilder::default()
                    .typ(PosixRlimitType::RlimitFsize)
                    .soft(bytes)
                    .hard(bytes)
                    .build()?,
            );
        }
        Ok(ProcessBuilder::default()
            .terminal(false)
            .args(argv)
            .env(
                self.env
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>(),
            )
            .cwd(cwd)
            .user(UserBuilder::default().uid(self.uid).gid(self.gid).build()?)
            .no_new_privileges(true)
            .capabilities(none)
            .rlimits(rlimits)
            .build()?)
    }

    /// Starts `argv` in the container, in `cgroup` (a sub-cgroup name made
    /// already; `procs` its `cgroup.procs` in one hierarchy), as `name` (a
    /// file-name-safe label: `cmd-3`, `probe`) in `cwd`. Its stdin comes
    /// from `streams.input` and its stdout and stderr go to `streams.output`
    /// (files) when given, else through pipes. `meanwhile`
    /// runs once it started, while it runs. Returns once the process runs
    /// the program (the wrapper said so), or has run and ended already. Blocking;
    /// within a tokio runtime (the runtime's process is registered with it).
    pub(crate) fn start(
        &self,
        runtime: &Runtime,
        (name, procs): (&str, &Path),
        (argv, cwd): (Vec<String>, &str),
        streams: Streams,
        meanwhile: impl FnOnce(),
    ) -> Result<Started, ContainerError> {
        let mut wrapped = vec![
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            STREAMS_WRAPPER.to_owned(),
            WRAPPER_NAME.to_owned(),
        ];
        wrapped.extend(argv);
        let process = self.process(wrapped, cwd)?;
        // The process file holds the environment (credentials): in memory,
        // sealed, read by the runtime through its own descriptor before it
        // starts anything; never on a disk. What the runtime logs goes to
        // memory too: it is read only when the runtime fails.
        let spec_file = process_file(&serde_json::to_vec(&process).unwrap_or_default())?;
        let log = memory_file(c"aw-runtime-log")?;
        let (started_read, started_write) = pipe_pair("a process's start signal")?;
        let (stdin_read, stdin_write) = match streams.input {
            Some(input) => (input, None),
            None => {
                let (read, write) = pipe_pair("a process's stdin")?;
                (read, Some(write))
            }
        };
        let (stdout_read, stdout_write, stderr_read, stderr_write) = match streams.output {
            Some((stdout, stderr)) => (None, stdout, None, stderr),
            None => {
                let (stdout_read, stdout_write) = pipe_pair("a process's stdout")?;
                let (stderr_read, stderr_write) = pipe_pair("a process's stderr")?;
                (
                    Some(stdout_read),
                    stdout_write,
                    Some(stderr_read),
                    stderr_write,
                )
            }
        };
        let args: Vec<OsString> = [
            "--root".into(),
            runtime.root().as_os_str().to_owned(),
            "--log".into(),
            format!("/proc/self/fd/{LOG_FD}").into(),
            "exec".into(),
            "--cgroup".into(),
            name.into(),
            "--process".into(),
            format!("/proc/self/fd/{PROCESS_FD}").into(),
            "--preserve-fds".into(),
            "4".into(),
            self.container.as_str().into(),
        ]
        .into();
        let placed = [
            (stdin_read.as_fd(), 3),
            (stdout_write.as_fd(), 4),
            (stderr_write.as_fd(), 5),
            (started_write.as_fd(), STARTED_FD),
            // Past the preserved four: the runtime's alone.
            (spec_file.as_fd(), PROCESS_FD),
            (log.as_fd(), LOG_FD),
        ];
        let spawned = RuntimeChild::spawn(runtime.program(), &args, &placed);
        // This side's copies of the process's ends go now.
        drop((
            stdin_read,
            stdout_write,
            stderr_write,
            spec_file,
            started_write,
        ));
        let mut child = spawned.map_err(|source| ContainerError::Spawn {
            runtime: runtime.name().to_owned(),
            step: "exec",
            source,
        })?;
        let pid = wait_for_start(&mut child, &started_read, procs).map_err(|status| {
            ContainerError::Runtime {
                runtime: runtime.name().to_owned(),
                step: "exec",
                status,
                stderr: read_all(&log).trim().to_owned(),
            }
        })?;
        meanwhile();
        Ok(Started {
            runtime: child,
            pid,
            stdin: stdin_write,
            stdout: stdout_read,
            stderr: stderr_read,
        })
    }
}

/// Waits until the wrapper said it started (a byte on `started`, written
/// just before it runs the program), then reads its pid from `procs` (its
/// cgroup's `cgroup.procs`, where nothing else runs yet; `None` when it has
/// already ended). How the runtime ended when it ended without a start (or
/// did not start it in time).
fn wait_for_start(
    child: &mut RuntimeChild,
    started: &OwnedFd,
    procs: &Path,
) -> Result<Option<u32>, String> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let deadline = std::time::Instant::now() + START_WAIT;
    // Whether the byte came within `wait`.
    let said = |wait: PollTimeout| {
        let mut ready = [PollFd::new(started.as_fd(), PollFlags::POLLIN)];
        let mut byte = [0u8; 1];
        matches!(poll(&mut ready, wait), Ok(1))
            && matches!(nix::unistd::read(started, &mut byte), Ok(1))
    };
    loop {
        // Woken by the byte, or every millisecond to see whether the runtime
        // ended (it holds the pipe too: no end of file before it exits).
        if said(PollTimeout::from(1u8)) {
            let listed = std::fs::read_to_string(procs).unwrap_or_default();
            return Ok(listed.lines().find_map(|l| l.trim().parse::<u32>().ok()));
        }
        match child.try_wait() {
            // The byte may have come as the runtime ended.
            Ok(Some(_)) if said(PollTimeout::ZERO) => return Ok(None),
            Ok(Some(status)) => return Err(status.to_string()),
            Ok(None) => {}
            Err(e) => return Err(e.to_string()),
        }
        if std::time::Instant::now() >= deadline {
            child.kill();
            return Err(format!("no process within {} s", START_WAIT.as_secs()));
        }
    }
}

/// Everything `file` (a memory file) holds, from its start.
fn read_all(file: &OwnedFd) -> String {
    use std::io::{Read, Seek};
    let Ok(copy) = file.try_clone() else {
        return String::new();
    };
    let mut file = std::fs::File::from(copy);
    let mut text = String::new();
    let _ = file
        .seek(std::io::SeekFrom::Start(0))
        .and_then(|_| file.read_to_string(&mut text));
    text
}

/// The descriptor the runtime reads the process file from.
const PROCESS_FD: i32 = 7;
/// The descriptor the runtime logs to.
const LOG_FD: i32 = 8;
/// The descriptor the wrapper says it started on (the last preserved one).
const STARTED_FD: i32 = 6;

/// `bytes` in a sealed memory file (no write, grow or shrink, no new seal):
/// what the runtime reads at `/proc/self/fd/N` is what was written here.
fn process_file(bytes: &[u8]) -> Result<OwnedFd, ContainerError> {
    use nix::fcntl::{FcntlArg, SealFlag, fcntl};
    let file = memory_file(c"aw-process")?;
    let failed = |errno: nix::errno::Errno| ContainerError::Pipe {
        step: "writing a process file in memory",
        source: errno.into(),
    };
    let mut written = 0;
    while written < bytes.len() {
        match nix::unistd::write(&file, &bytes[written..]).map_err(failed)? {
            0 => return Err(failed(nix::errno::Errno::ENOSPC)),
            n => written += n,
        }
    }
    let seals = SealFlag::F_SEAL_WRITE
        | SealFlag::F_SEAL_GROW
        | SealFlag::F_SEAL_SHRINK
        | SealFlag::F_SEAL_SEAL;
    fcntl(&file, FcntlArg::F_ADD_SEALS(seals)).map_err(failed)?;
    Ok(file)
}

/// An empty close-on-exec memory file that can be sealed and is never
/// executable (a host with `vm.memfd_noexec = 2` refuses any other memfd; a
/// kernel before 6.3 does not know the flag: `EINVAL`).
fn memory_file(name: &std::ffi::CStr) -> Result<OwnedFd, ContainerError> {
    use nix::sys::memfd::{MFdFlags, memfd_create};
    let sealed = MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING;
    let noexec = MFdFlags::from_bits_retain(nix::libc::MFD_NOEXEC_SEAL);
    match memfd_create(name, sealed | noexec) {
        Err(nix::errno::Errno::EINVAL) => memfd_create(name, sealed),
        made => made,
    }
    .map_err(|errno| ContainerError::Pipe {
        step: "making a file in memory",
        source: errno.into(),
    })
}

/// A close-on-exec pipe: (read end, write end).
pub(crate) fn pipe_pair(step: &'static str) -> Result<(OwnedFd, OwnedFd), ContainerError> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|errno| ContainerError::Pipe {
        step,
        source: errno.into(),
    })
}

/// A counter of an events file of the command's cgroup and its value at the
/// start (OOM kills, forks refused at the pids limit).
#[derive(Debug)]
struct Counter {
    file: Option<PathBuf>,
    key: &'static str,
    baseline: u64,
}

impl Counter {
    fn start(file: Option<PathBuf>, key: &'static str) -> Self {
        let baseline = file
            .as_deref()
            .and_then(|f| read_event(f, key))
            .unwrap_or(0);
        Self {
            file,
            key,
            baseline,
        }
    }

    fn since_start(&self) -> u64 {
        self.file
            .as_deref()
            .and_then(|f| read_event(f, self.key))
            .map_or(0, |now| now.saturating_sub(self.baseline))
    }
}

fn read_event(file: &Path, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines().find_map(|line| {
        let (name, value) = line.split_once(' ')?;
        (name == key).then(|| value.trim().parse().ok())?
    })
}

/// What a command's streams follow: its output files' read ends (when the
/// streams follow them) and its output keeper's flush (when a keeper copies
/// its output).
#[derive(Default)]
pub(crate) struct Followed {
    pub(crate) files: Option<(std::fs::File, std::fs::File)>,
    pub(crate) flush: Option<Box<dyn OutputFlush>>,
    /// What the files keep (their streams release what they read).
    pub(crate) bound: Option<HeadTail>,
}

/// One command running in a container.
pub(crate) struct ContainerExecution {
    stdin: Option<OwnedFd>,
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
    /// The output files' read ends, when the streams follow them.
    followed: Option<(std::fs::File, std::fs::File)>,
    /// What the followed files keep.
    bound: Option<HeadTail>,
    /// The output keeper's flush, asked once the command ended (before the
    /// followed streams end), when a keeper copies its output.
    flush: Option<Box<dyn OutputFlush>>,
    /// The flush asked, as a task of its own: a wait dropped meanwhile loses
    /// nothing, the next one waits for the same answer.
    flushing: Option<tokio::task::JoinHandle<bool>>,
    /// Whether the command ended (its followed streams then end).
    ended: tokio::sync::watch::Sender<bool>,
    runtime: RuntimeChild,
    cgroup: Arc<CommandCgroup>,
    deadline: Option<tokio::time::Instant>,
    killed: Option<KillCause>,
    exit: Option<ExitRecord>,
    oom: Counter,
    forks: Counter,
    pid: Option<u32>,
}

impl Drop for ContainerExecution {
    fn drop(&mut self) {
        // Followed streams end with their handle; the keeper is told that
        // nobody follows any more, or it would wait for them.
        self.ended.send_replace(true);
        if let (Some(flush), Ok(runtime)) =
            (self.flush.take(), tokio::runtime::Handle::try_current())
        {
            runtime.spawn(flush.flushed());
        }
    }
}

impl fmt::Debug for ContainerExecution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ContainerExecution")
            .field("pid", &self.pid)
            .field("killed", &self.killed)
            .finish_non_exhaustive()
    }
}

impl ContainerExecution {
    /// The command `started` in `cgroup`, killed after `timeout_ms`; its
    /// streams follow the read ends of its output files when given, until
    /// its output keeper (if it has one) answered the flush after it ended.
    pub(crate) fn new(
        started: Started,
        cgroup: CommandCgroup,
        timeout_ms: Option<u64>,
        Followed {
            files,
            flush,
            bound,
        }: Followed,
    ) -> Result<Self, ContainerError> {
        let oom = Counter::start(
            cgroup
                .file("memory.oom_control")
                .or_else(|| cgroup.file("memory.events")),
            "oom_kill",
        );
        let forks = Counter::start(cgroup.file("pids.events"), "max");
        Ok(Self {
            stdin: started.stdin,
            stdout: started.stdout,
            stderr: started.stderr,
            followed: files,
            bound,
            flush,
            flushing: None,
            ended: tokio::sync::watch::Sender::new(false),
            runtime: started.runtime,
            cgroup: Arc::new(cgroup),
            deadline: timeout_ms
                .map(|ms| tokio::time::Instant::now() + std::time::Duration::from_millis(ms)),
            killed: None,
            exit: None,
            oom,
            forks,
            pid: started.pid,
        })
    }

    async fn kill_tree(&mut self, cause: KillCause) -> Result<(), BoundaryError> {
        if self.killed.is_none() {
            self.killed = Some(cause);
        }
        let cgroup = Arc::clone(&self.cgroup);
        tokio::task::spawn_blocking(move || cgroup.kill_all())
            .await
            .map_err(|_| {
                ContainerError::ThreadPanicked {
                    step: "killing a command",
                }
                .into_boundary("kill")
            })?
            .map_err(|e| e.into_boundary("kill"))
    }

    /// How the command ended, from the runtime's exit (which is its
    /// process's: 128 + N after signal N).
    fn ended(&self, status: std::process::ExitStatus) -> ExitRecord {
        let status = match status.code() {
            // Killed with its tree here, or by the kernel at the memory cap.
            Some(137) if self.killed.is_some() || self.oom.since_start() > 0 => {
                ExitStatusRecord::Signal(9)
            }
            Some(code) => ExitStatusRecord::Code(code),
            None => ExitStatusRecord::Unknown,
        };
        let killed = match &self.killed {
            Some(cause) => Some(cause.clone()),
            None if self.oom.since_start() > 0 => Some(KillCause::MemoryLimit),
            None => None,
        };
        ExitRecord {
            status,
            killed,
            forks_refused: self.forks.since_start(),
            // Read while the command's cgroup still exists: its whole tree's.
            usage: self.cgroup.usage(),
        }
    }
}

fn stream(fd: OwnedFd) -> Option<OutputStream> {
    pipe::Receiver::from_owned_fd(fd)
        .ok()
        .map(|r| Box::pin(r) as OutputStream)
}

#[async_trait]
impl Execution for ContainerExecution {
    fn take_stdin(&mut self) -> Option<InputStream> {
        let fd = self.stdin.take()?;
        pipe::Sender::from_owned_fd(fd)
            .ok()
            .map(|s| Box::pin(s) as InputStream)
    }

    fn take_stdout(&mut self) -> Option<OutputStream> {
        if let Some(fd) = self.stdout.take() {
            return stream(fd);
        }
        let file = self.followed.as_ref()?.0.try_clone().ok()?;
        Some(super::output::follow(
            file,
            self.ended.subscribe(),
            self.bound,
        ))
    }

    fn take_stderr(&mut self) -> Option<OutputStream> {
        if let Some(fd) = self.stderr.take() {
            return stream(fd);
        }
        let file = self.followed.as_ref()?.1.try_clone().ok()?;
        Some(super::output::follow(
            file,
            self.ended.subscribe(),
            self.bound,
        ))
    }

    async fn wait(&mut self) -> Result<ExitRecord, BoundaryError> {
        if let Some(exit) = &self.exit {
            return Ok(exit.clone());
        }
        // Unused ends close: a command reading its stdin sees EOF.
        drop(self.stdin.take());
        let status = loop {
            // `wait` is cancel-safe: a dropped wait loses nothing.
            let waited = match self.deadline {
                Some(deadline) => {
                    match tokio::time::timeout_at(deadline, self.runtime.wait()).await {
                        Ok(waited) => waited,
                        Err(_) => {
                            self.deadline = None;
                            self.kill_tree(KillCause::Timeout).await?;
                            continue;
                        }
                    }
                }
                None => self.runtime.wait().await,
            };
            break waited.map_err(|source| {
                ContainerError::Pipe {
                    step: "waiting for a command",
                    source,
                }
                .into_boundary("wait for command")
            })?;
        };
        // Everything the command wrote is in its keeper's pipes: once the
        // keeper copied it, the followed streams end at the files' sizes.
        if let Some(flush) = self.flush.take() {
            self.flushing = Some(tokio::spawn(flush.flushed()));
        }
        if let Some(flushing) = &mut self.flushing {
            let answered = flushing.await.unwrap_or(false);
            self.flushing = None;
            if !answered {
                tracing::warn!(pid = ?self.pid, "the output keeper did not answer: the command's streams end at what reached its files");
            }
        }
        self.ended.send_replace(true);
        let exit = self.ended(status);
        self.exit = Some(exit.clone());
        Ok(exit)
    }

    async fn kill(&mut self, cause: KillCause) -> Result<(), BoundaryError> {
        self.kill_tree(cause).await
    }
}

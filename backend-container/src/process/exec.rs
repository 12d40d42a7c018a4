//! One process started in a live container: `exec --detach` into a cgroup of
//! its own, its standard streams this side's pipes, and (for a command) how it
//! ended.
//!
//! The runtime does not stay attached: an attached `exec` copies the process's
//! output through pipes of its own and waits until every holder of them has
//! closed them, so a command that leaves a server running in the background
//! would never return. Detached, the process inherits the pipes given here
//! directly and the runtime exits once it runs. Its exit status comes back
//! through a pipe of its own: the program runs under `/bin/sh`, which writes
//! the program's status to descriptor 3 (closed in the program itself, so
//! nothing the program starts holds it) and exits.

use std::fmt;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use async_trait::async_trait;
use command_fds::{CommandFdExt, FdMapping};
use oci_spec::runtime::{
    LinuxCapabilitiesBuilder, PosixRlimitBuilder, PosixRlimitType, Process, ProcessBuilder,
    UserBuilder,
};
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use workspace_core::boundary::{
    BoundaryError, Execution, ExitRecord, InputStream, KillCause, OutputStream,
};
use workspace_core::evidence::ExitStatusRecord;

use super::cgroups::CommandCgroup;
use crate::error::ContainerError;
use crate::runtime::Runtime;

/// What runs the program and reports its status on descriptor 3.
const STATUS_WRAPPER: &str = "\"$@\" 3>&-; echo $? >&3";
/// `$0` of the wrapper shell (what `ps` shows for it).
const WRAPPER_NAME: &str = "agent-workspace-command";

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
    /// Where process files go (the run's private directory on the host).
    pub(crate) dir: PathBuf,
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

/// A process just started, with this side's ends of its pipes.
pub(crate) struct Started {
    /// Its host pid (the wrapper's, for a command).
    pub(crate) pid: u32,
    /// Its standard input.
    pub(crate) stdin: OwnedFd,
    /// Its standard output, when it goes to a pipe.
    pub(crate) stdout: Option<OwnedFd>,
    /// Its standard error, when it goes to a pipe.
    pub(crate) stderr: Option<OwnedFd>,
    /// Its exit status (a command only).
    pub(crate) status: Option<OwnedFd>,
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
    /// already), as `name` (a file-name-safe label: `cmd-3`, `probe`). With
    /// `report_status`, the program runs under the status wrapper. Its stdout
    /// and stderr go to `output` (files) when given, else to pipes.
    /// Blocking.
    pub(crate) fn start(
        &self,
        runtime: &Runtime,
        name: &str,
        argv: Vec<String>,
        cwd: &str,
        report_status: bool,
        output: Option<(OwnedFd, OwnedFd)>,
    ) -> Result<Started, ContainerError> {
        let argv = if report_status {
            let mut wrapped = vec![
                "/bin/sh".to_owned(),
                "-c".to_owned(),
                STATUS_WRAPPER.to_owned(),
                WRAPPER_NAME.to_owned(),
            ];
            wrapped.extend(argv);
            wrapped
        } else {
            argv
        };
        let process = self.process(argv, cwd)?;
        // The process file holds the environment (credentials): the run's own
        // directory, owner-only, removed once the runtime read it.
        let spec_file = self.dir.join(format!("{name}.process.json"));
        let pid_file = self.dir.join(format!("{name}.pid"));
        let _ = std::fs::remove_file(&pid_file);
        write_private(
            &spec_file,
            &serde_json::to_vec(&process).unwrap_or_default(),
        )?;
        let (stdin_read, stdin_write) = pipe_pair("a process's stdin")?;
        let (stdout_read, stdout_write, stderr_read, stderr_write) = match output {
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
        let status = report_status
            .then(|| pipe_pair("a command's status pipe"))
            .transpose()?;
        let log = self.dir.join(format!("{name}.runtime.log"));
        let mut command = runtime.command();
        command
            .arg("--log")
            .arg(&log)
            .args(["exec", "--detach", "--pid-file"])
            .arg(&pid_file)
            .args(["--cgroup", name, "--process"])
            .arg(&spec_file);
        if let Some((_, write)) = &status {
            command.arg("--preserve-fds").arg("1");
            let fd = write.try_clone().map_err(|source| ContainerError::Pipe {
                step: "duplicating a command's status pipe",
                source,
            })?;
            command
                .fd_mappings(vec![FdMapping {
                    parent_fd: fd,
                    child_fd: 3,
                }])
                .map_err(|e| ContainerError::Pipe {
                    step: "placing a command's status pipe",
                    source: std::io::Error::other(e.to_string()),
                })?;
        }
        command
            .arg(&self.container)
            .stdin(Stdio::from(stdin_read))
            .stdout(Stdio::from(stdout_write))
            .stderr(Stdio::from(stderr_write));
        let ran = runtime.run_logged("exec", &mut command, &log);
        drop(command);
        let _ = std::fs::remove_file(&spec_file);
        ran?;
        let pid = read_pid(&pid_file)?;
        let _ = std::fs::remove_file(&pid_file);
        Ok(Started {
            pid,
            stdin: stdin_write,
            stdout: stdout_read,
            stderr: stderr_read,
            status: status.map(|(read, _)| read),
        })
    }
}

/// `bytes` in a new file only its owner can read.
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), ContainerError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(ContainerError::io("writing a process file", path))?;
    file.write_all(bytes)
        .map_err(ContainerError::io("writing a process file", path))
}

fn read_pid(path: &Path) -> Result<u32, ContainerError> {
    let text =
        std::fs::read_to_string(path).map_err(ContainerError::io("reading a pid file", path))?;
    text.trim().parse().map_err(|_| ContainerError::Lost {
        what: format!("the runtime's pid file {} holds {text:?}", path.display()),
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

/// One command running in a container.
pub(crate) struct ContainerExecution {
    stdin: Option<OwnedFd>,
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
    /// The output files' read ends, when the streams follow them.
    followed: Option<(std::fs::File, std::fs::File)>,
    /// Whether the command ended (its followed streams then end).
    ended: tokio::sync::watch::Sender<bool>,
    status: Option<pipe::Receiver>,
    status_text: Vec<u8>,
    cgroup: Arc<CommandCgroup>,
    deadline: Option<tokio::time::Instant>,
    killed: Option<KillCause>,
    exit: Option<ExitRecord>,
    oom: Counter,
    forks: Counter,
    pid: u32,
}

impl Drop for ContainerExecution {
    fn drop(&mut self) {
        // Followed streams end with their handle.
        self.ended.send_replace(true);
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
    /// streams follow `followed` (the read ends of its output files) when
    /// given.
    pub(crate) fn new(
        started: Started,
        cgroup: CommandCgroup,
        timeout_ms: Option<u64>,
        followed: Option<(std::fs::File, std::fs::File)>,
    ) -> Result<Self, ContainerError> {
        let status = started
            .status
            .map(|fd| {
                pipe::Receiver::from_owned_fd(fd).map_err(|source| ContainerError::Pipe {
                    step: "registering a command's status pipe",
                    source,
                })
            })
            .transpose()?;
        let oom = Counter::start(
            cgroup
                .file("memory.oom_control")
                .or_else(|| cgroup.file("memory.events")),
            "oom_kill",
        );
        let forks = Counter::start(cgroup.file("pids.events"), "max");
        Ok(Self {
            stdin: Some(started.stdin),
            stdout: started.stdout,
            stderr: started.stderr,
            followed,
            ended: tokio::sync::watch::Sender::new(false),
            status,
            status_text: Vec::new(),
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

    /// How the command ended, from what its wrapper reported.
    fn ended(&self) -> ExitRecord {
        let text = String::from_utf8_lossy(&self.status_text);
        let status = match text.trim().parse::<i32>() {
            Ok(code) => ExitStatusRecord::Code(code),
            // The wrapper itself was killed (with the whole tree).
            Err(_) if self.killed.is_some() => ExitStatusRecord::Signal(9),
            Err(_) => ExitStatusRecord::Unknown,
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
        Some(super::output::follow(file, self.ended.subscribe()))
    }

    fn take_stderr(&mut self) -> Option<OutputStream> {
        if let Some(fd) = self.stderr.take() {
            return stream(fd);
        }
        let file = self.followed.as_ref()?.1.try_clone().ok()?;
        Some(super::output::follow(file, self.ended.subscribe()))
    }

    async fn wait(&mut self) -> Result<ExitRecord, BoundaryError> {
        if let Some(exit) = &self.exit {
            return Ok(exit.clone());
        }
        // Unused ends close: a command reading its stdin sees EOF.
        drop(self.stdin.take());
        while let Some(status) = self.status.as_mut() {
            let mut buf = [0u8; 32];
            // `read` is cancel-safe: a dropped wait loses nothing.
            let read = async { status.read(&mut buf).await };
            let got = match self.deadline {
                Some(deadline) => match tokio::time::timeout_at(deadline, read).await {
                    Ok(got) => got,
                    Err(_) => {
                        self.deadline = None;
                        self.kill_tree(KillCause::Timeout).await?;
                        continue;
                    }
                },
                None => read.await,
            };
            match got {
                Ok(0) => break,
                Ok(n) => {
                    let keep = n.min(64usize.saturating_sub(self.status_text.len()));
                    self.status_text.extend_from_slice(&buf[..keep]);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(ContainerError::Pipe {
                        step: "reading a command's status",
                        source,
                    }
                    .into_boundary("wait for command"));
                }
            }
        }
        self.status = None;
        self.ended.send_replace(true);
        let exit = self.ended();
        self.exit = Some(exit.clone());
        Ok(exit)
    }

    async fn kill(&mut self, cause: KillCause) -> Result<(), BoundaryError> {
        self.kill_tree(cause).await
    }
}

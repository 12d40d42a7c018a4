//! The Process boundary trait: seal a run, execute commands in it, tear it down.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite};

use super::{
    BoundaryError, DiskRecord, DiskUsage, EnvironmentPlan, FileAccess, FileError, FilesystemRecord,
    IdentityPlan, ProcessCapabilities, RunContext, SourceRecord,
};

/// Applies the run's process boundary and executes commands inside it.
///
/// `seal` applies the filesystem record, the environment plan and the identity plan
/// together (a backend that isolates with namespaces or a container does all three
/// at once) and returns what a probe inside observed. A sealed run is one live
/// sandbox: every command `spawn`s into it, and what a command leaves running goes
/// on until `teardown`. `detach` lets a runner go while the sandbox lives on;
/// `attach` (in this process or another) takes it over again.
#[async_trait]
pub trait ProcessBoundary: Send + Sync + Debug + 'static {
    /// What this implementation supports.
    fn capabilities(&self) -> ProcessCapabilities;

    /// The implementation's name, used in messages about unsupported settings.
    fn name(&self) -> &'static str {
        std::any::type_name::<Self>()
    }

    /// Every setting of `contract` this implementation cannot keep on this
    /// host, beyond what [`capabilities`](Self::capabilities) declares for
    /// every host (a host directory a run could not write, say), each pushed
    /// onto `problems` naming its field. [`Stack::check`](super::Stack::check)
    /// asks it, so a run is refused before anything of it is created; `seal`
    /// may still refuse the same (the host may change in between). The
    /// default finds none.
    ///
    /// # Ambient authority
    /// An implementation may look at the host paths the contract names.
    fn refusals(
        &self,
        contract: &crate::contract::Contract,
        problems: &mut crate::contract::Problems,
    ) {
        let _ = (contract, problems);
    }

    /// Applies the boundary and probes it from inside.
    async fn seal(
        &self,
        run: &RunContext,
        plan: &SealPlan,
    ) -> Result<ObservedBoundary, BoundaryError>;

    /// Starts one command inside the sealed boundary.
    async fn spawn(
        &self,
        run: &RunContext,
        command: &CommandSpec,
    ) -> Result<Box<dyn Execution>, BoundaryError>;

    /// Kills every process of the run (the whole tree, never by name) and removes
    /// what the boundary set up; then reports anything that survived.
    async fn teardown(&self, run: &RunContext) -> Result<LeakReport, BoundaryError>;

    /// What the whole run used so far (every process it ever had: its
    /// commands, services and what they left running), as the boundary counts
    /// it; asked once more before teardown. The default counts nothing.
    fn usage(&self, run: &RunContext) -> crate::evidence::ResourceUsage {
        let _ = run;
        crate::evidence::ResourceUsage::default()
    }

    /// Asks every process of the run but the sandbox itself to stop (`SIGTERM`:
    /// services, what commands left running), gives them `grace` to end, then
    /// kills what is left; the sandbox stays until [`teardown`](Self::teardown).
    /// The default does nothing: teardown kills everything.
    async fn terminate(
        &self,
        run: &RunContext,
        grace: Duration,
    ) -> Result<TerminateReport, BoundaryError> {
        let _ = (run, grace);
        Ok(TerminateReport::default())
    }

    /// Opens a TCP connection to `port` on the run's own loopback, from the
    /// host (a service's readiness check). The default is for a boundary
    /// without a network of its own: the run's ports are the host's, so it
    /// connects to the host's loopback.
    async fn connect(
        &self,
        run: &RunContext,
        port: u16,
    ) -> Result<tokio::net::TcpStream, BoundaryError> {
        let _ = run;
        tokio::net::TcpStream::connect((std::net::Ipv4Addr::LOCALHOST, port))
            .await
            .map_err(|e| BoundaryError::new(super::BoundaryKind::Process, "connect", e))
    }

    /// Lets go of a sealed run without stopping it: its sandbox (what its commands
    /// left running) lives on with no runner attached, and this instance forgets
    /// it. The default is for a boundary that cannot keep a sandbox alive without
    /// its runner: it tears the run down and fails unless nothing was left, so a
    /// later [`attach`](Self::attach) finds it [`Attachment::Lost`].
    async fn detach(&self, run: &RunContext) -> Result<(), BoundaryError> {
        let leaks = self.teardown(run).await?;
        if leaks.is_clean() {
            Ok(())
        } else {
            Err(BoundaryError::new(
                super::BoundaryKind::Process,
                "detach",
                LeftBehind(leaks),
            ))
        }
    }

    /// Suspends a sealed run: freezes every process of it in place and lets go
    /// of it, as [`detach`](Self::detach) does, so that a later
    /// [`attach`](Self::attach) (in any process) thaws them where they were.
    /// The default is for a boundary that cannot freeze: it tears the run down
    /// (failing unless nothing was left) and says the processes were stopped.
    async fn suspend(&self, run: &RunContext) -> Result<Suspension, BoundaryError> {
        let leaks = self.teardown(run).await?;
        if leaks.is_clean() {
            Ok(Suspension::Stopped)
        } else {
            Err(BoundaryError::new(
                super::BoundaryKind::Process,
                "suspend",
                LeftBehind(leaks),
            ))
        }
    }

    /// Makes the run's capped disk at [`RunContext::layer_dir`], holding at
    /// most `cap_bytes`, before its checkout is provisioned there; returns
    /// what is mounted, read back. Only asked of a boundary whose
    /// capabilities claim [`disk_caps`](ProcessCapabilities::disk_caps); the
    /// default refuses.
    async fn make_disk(
        &self,
        run: &RunContext,
        cap_bytes: u64,
    ) -> Result<DiskRecord, BoundaryError> {
        let _ = (run, cap_bytes);
        Err(BoundaryError::new(
            super::BoundaryKind::Process,
            "make the run's disk",
            format!("{} keeps no disk cap", self.name()),
        ))
    }

    /// Mounts the disk [`make_disk`](Self::make_disk) made for the run again
    /// where it is no longer mounted (the host restarted while the run was
    /// suspended), or reads it back where it still is. Fails, saying so, when
    /// the disk did not outlive the host (a tmpfs): the run's changes are gone.
    async fn remount_disk(
        &self,
        run: &RunContext,
        cap_bytes: u64,
    ) -> Result<DiskRecord, BoundaryError> {
        self.make_disk(run, cap_bytes).await
    }

    /// What the run's disk holds now, and the most its device ever held;
    /// `None` when no disk of the run is mounted (it was never made, or the
    /// host restarted).
    async fn disk_usage(&self, run: &RunContext) -> Result<Option<DiskUsage>, BoundaryError> {
        let _ = run;
        Ok(None)
    }

    /// Unmounts and removes the run's disk, whatever of it exists (recovery
    /// asks too), once nothing of the run uses it: its checkout released, its
    /// sandbox gone. Fails unless nothing of it is left (mount, device, image).
    async fn remove_disk(&self, run: &RunContext) -> Result<(), BoundaryError> {
        let _ = run;
        Ok(())
    }

    /// The files of the run's live sandbox, reached as its commands reach
    /// them: as the run's user, through the sandbox's own mounts (see
    /// [`FileAccess`]). Only asked of a sealed (or attached) run. The default
    /// is for a boundary that cannot: [`FileError::Unsupported`].
    fn files(&self, run: &RunContext) -> Result<Box<dyn FileAccess>, FileError> {
        let _ = run;
        Err(FileError::Unsupported {
            backend: self.name().to_owned(),
        })
    }

    /// Takes over the live sandbox of a run sealed and [detached](Self::detach)
    /// or [suspended](Self::suspend) earlier (by this process or another; a
    /// frozen sandbox is thawed), for `plan` (the run's plans, prepared
    /// again by the attaching runner). [`Attachment::Lost`] when nothing of it runs
    /// any more (the host rebooted, it was killed): the runner then seals the run
    /// again, and says so. The default keeps no sandbox between runners.
    async fn attach(&self, run: &RunContext, plan: &SealPlan) -> Result<Attachment, BoundaryError> {
        let _ = (run, plan);
        Ok(Attachment::Lost {
            reason: format!("{} keeps no sandbox alive without its runner", self.name()),
        })
    }
}

/// What [`ProcessBoundary::terminate`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminateReport {
    /// Processes sent `SIGTERM`.
    pub signalled: u32,
    /// Of those and what they started, processes still running after the grace
    /// period, then killed.
    pub killed: u32,
}

/// What a teardown could not remove, as an error.
#[derive(Debug, thiserror::Error)]
#[error("still present after teardown: {0:?}")]
pub struct LeftBehind(pub LeakReport);

/// What [`ProcessBoundary::suspend`] did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "sandbox", rename_all = "kebab-case")]
pub enum Suspension {
    /// Every process of the run is frozen in place; attaching thaws them.
    Frozen {
        /// Host pids of the processes frozen.
        processes: Vec<u32>,
    },
    /// Every process of the run was stopped; resuming seals the run again.
    Stopped,
}

/// What [`ProcessBoundary::attach`] found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "sandbox", rename_all = "kebab-case")]
pub enum Attachment {
    /// The sandbox is live and attached: commands join it.
    Live {
        /// Host pids of the processes running in it when it was attached.
        processes: Vec<u32>,
    },
    /// Nothing of the sandbox runs any more; nothing was attached.
    Lost {
        /// Why, in one sentence.
        reason: String,
    },
}

/// Everything `seal` applies.
#[derive(Clone, Debug)]
pub struct SealPlan {
    /// The provisioned checkout.
    pub source: SourceRecord,
    /// The filesystem grants.
    pub filesystem: FilesystemRecord,
    /// The environment.
    pub environment: EnvironmentPlan,
    /// The identity.
    pub identity: IdentityPlan,
    /// The services' templates, each with the run's own layer over it.
    pub templates: Vec<TemplateLayer>,
    /// Descriptors the sandbox keeps open for its whole life, whichever process
    /// drives it, when the boundary [`holds_capacity`](super::ProcessCapabilities::holds_capacity):
    /// the run's capacity ticket, a host lock held while any process has it
    /// open. Empty when attaching.
    pub held_open: Vec<Arc<OwnedFd>>,
}

/// A service's template as one run sees it: the shared template (`lower`,
/// never written) under the run's own changes (`upper`, with overlayfs's
/// `work` directory), at `target` inside.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateLayer {
    /// The service.
    pub service: String,
    /// Where it appears inside (the template's `path`).
    pub target: String,
    /// The template's key (hex SHA-256).
    pub key: String,
    /// The template; an empty directory while this run makes it.
    pub lower: PathBuf,
    /// The run's changes.
    pub upper: PathBuf,
    /// overlayfs's work directory, beside `upper`.
    pub work: PathBuf,
    /// Whether the template was there when the run was sealed; `false`: this
    /// run makes it before the service starts.
    pub prepared: bool,
}

/// A command to run in the sealed workspace.
///
/// ```
/// use workspace_core::boundary::CommandSpec;
/// let spec = CommandSpec::new(vec!["cargo".into(), "test".into()])
///     .in_dir("crates/app")
///     .with_env("RUST_LOG", "debug")
///     .with_timeout(std::time::Duration::from_secs(600));
/// assert_eq!(spec.cwd, "crates/app");
/// assert_eq!(spec.env["RUST_LOG"], "debug");
/// assert_eq!(spec.timeout_ms, Some(600_000));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandSpec {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Working directory relative to the workspace root (`"."` for the root).
    pub cwd: String,
    /// Wall-clock cap in milliseconds; the tree is killed after it.
    pub timeout_ms: Option<u64>,
    /// Whether to give the command a pseudo-terminal.
    pub tty: bool,
    /// Where its stdout and stderr go; `None`: wherever the backend keeps a
    /// command's output, shown by the streams of its [`Execution`]. With files,
    /// the files are the output, and the streams show them only when
    /// [`CommandOutput::follow`] says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<CommandOutput>,
    /// Variables set for this command only, over the run's environment (a
    /// name the run has is replaced). Recorded by name in the evidence, never
    /// by value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The command's number in the run's evidence (`commands/NNNN/`), set by
    /// the runner, which takes it before the command starts. A backend that
    /// gives each command a cgroup names it `cmd-N` after it: commands started
    /// at once, by several processes, never share one, and the egress record
    /// attributes a connection to the command that made it. `None`: the
    /// backend numbers the command itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number: Option<u32>,
}

impl CommandSpec {
    /// `argv` from the workspace root, without a time limit, terminal, output
    /// files or variables of its own.
    pub fn new(argv: Vec<String>) -> Self {
        Self {
            argv,
            cwd: ".".into(),
            ..Self::default()
        }
    }

    /// In `dir`, relative to the workspace root (or absolute inside it).
    pub fn in_dir(mut self, dir: impl Into<String>) -> Self {
        self.cwd = dir.into();
        self
    }

    /// With variable `name` set to `value` for this command.
    pub fn with_env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(name.into(), value.into());
        self
    }

    /// Killed, its whole tree, after `limit`.
    pub fn with_timeout(mut self, limit: Duration) -> Self {
        self.timeout_ms = Some(u64::try_from(limit.as_millis()).unwrap_or(u64::MAX));
        self
    }

    /// On a pseudo-terminal of its own.
    pub fn on_a_terminal(mut self) -> Self {
        self.tty = true;
        self
    }

    /// The command's working directory inside, under `root` (the workspace
    /// root inside): `cwd` joined to it, `.` and empty parts dropped. An
    /// absolute `cwd`, a `..` or a NUL byte is refused.
    pub fn workdir_under(&self, root: &str) -> Result<String, InvalidCwd> {
        let bad = || InvalidCwd {
            cwd: self.cwd.clone(),
        };
        if self.cwd.starts_with('/') {
            return Err(bad());
        }
        let mut path = root.trim_end_matches('/').to_owned();
        for part in self.cwd.split('/').filter(|p| !p.is_empty() && *p != ".") {
            if part == ".." || part.contains('\0') {
                return Err(bad());
            }
            path.push('/');
            path.push_str(part);
        }
        if path.is_empty() {
            path.push('/');
        }
        Ok(path)
    }

    /// Sets the command's variables over `base` (the run's environment): each
    /// name replaced where `base` has it, else added. A name that is empty or
    /// holds `=` or a NUL byte, or a value with a NUL byte, is refused, naming it.
    pub fn apply_env(&self, base: &mut Vec<(String, String)>) -> Result<(), InvalidEnv> {
        for (name, value) in &self.env {
            if name.is_empty() || name.contains(['=', '\0']) || value.contains('\0') {
                return Err(InvalidEnv { name: name.clone() });
            }
            match base.iter_mut().find(|(have, _)| have == name) {
                Some(slot) => slot.1.clone_from(value),
                None => base.push((name.clone(), value.clone())),
            }
        }
        Ok(())
    }
}

/// A [`CommandSpec::cwd`] that leaves the workspace or is not a relative path.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cwd {cwd:?} must be a relative path under the workspace root without `..`")]
pub struct InvalidCwd {
    /// The cwd as given.
    pub cwd: String,
}

/// A variable of [`CommandSpec::env`] that no process can be given.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "env {name:?}: a variable's name must be non-empty without '=' or NUL, its value without NUL"
)]
pub struct InvalidEnv {
    /// The variable's name.
    pub name: String,
}

/// Two files of the runner a command writes its stdout and stderr to (created
/// new, appended to): for output that must outlive the runner that started the
/// command, like a service's, or what a command's background processes write
/// after it ended. Not with a terminal (`tty`), whose output is one stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandOutput {
    /// The file of its standard output.
    pub stdout: PathBuf,
    /// The file of its standard error.
    pub stderr: PathBuf,
    /// Whether the execution's streams show the files as they grow, up to
    /// their size when the command itself ended (an ordinary command, whose
    /// later output the runner reads from the files); `false`: the streams are
    /// empty (a service, whose files are its log).
    #[serde(default)]
    pub follow: bool,
    /// The most of each stream the files keep: the first `head_bytes` of
    /// what they were given and the last `tail_bytes`, what lies between
    /// released once it has been passed (the evidence keeps no more);
    /// `None`: all of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<crate::evidence::HeadTail>,
}

/// A boxed byte stream from a running command.
pub type OutputStream = Pin<Box<dyn AsyncRead + Send>>;
/// A boxed byte sink into a running command.
pub type InputStream = Pin<Box<dyn AsyncWrite + Send>>;

/// A command running inside the boundary.
#[async_trait]
pub trait Execution: Send + Debug {
    /// Its standard input, once.
    fn take_stdin(&mut self) -> Option<InputStream>;
    /// Its standard output, once.
    fn take_stdout(&mut self) -> Option<OutputStream>;
    /// Its standard error, once.
    fn take_stderr(&mut self) -> Option<OutputStream>;
    /// Waits until the command and every process it started have ended.
    ///
    /// Must be cancel-safe: a caller may drop an unfinished `wait` (to `kill`, on a
    /// cancel) and call `wait` again, which goes on waiting for the same command
    /// (and the same wall-time deadline).
    async fn wait(&mut self) -> Result<ExitRecord, BoundaryError>;
    /// Kills the command's whole process tree, recording why.
    async fn kill(&mut self, cause: KillCause) -> Result<(), BoundaryError>;

    /// Asks the command to stop (`SIGTERM`), gives it `grace` to end, then kills
    /// its whole tree; returns how it ended. The default kills at once.
    async fn terminate(&mut self, grace: Duration) -> Result<ExitRecord, BoundaryError> {
        let _ = grace;
        self.kill(KillCause::Teardown).await?;
        self.wait().await
    }

    /// Lets the command run on without this handle, in the live sandbox, until
    /// the run drains (a service, a command started with `exec --detach`). The
    /// default drops the handle, which ends the command in a backend that cannot
    /// keep it without one.
    fn release(self: Box<Self>) {}
}

/// How a command ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitRecord {
    /// The exit status.
    pub status: crate::evidence::ExitStatusRecord,
    /// Why it was killed, if it was.
    pub killed: Option<KillCause>,
    /// How many new processes its tree was refused at the run's `pids` limit
    /// (a fork bomb, or a build wider than the limit): why it may have failed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub forks_refused: u64,
    /// What its tree used, read from its cgroup when it ended (nothing where
    /// the backend counts nothing).
    #[serde(
        default,
        skip_serializing_if = "crate::evidence::ResourceUsage::is_empty"
    )]
    pub usage: crate::evidence::ResourceUsage,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl ExitRecord {
    /// An end with `status`, not killed, nothing refused.
    pub fn ended(status: crate::evidence::ExitStatusRecord) -> Self {
        Self {
            status,
            killed: None,
            forks_refused: 0,
            usage: crate::evidence::ResourceUsage::default(),
        }
    }
}

/// Why a command's tree was killed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KillCause {
    /// The wall-clock limit passed.
    Timeout,
    /// The caller cancelled it.
    Cancelled,
    /// The memory limit was reached.
    MemoryLimit,
    /// The run is draining or failed.
    Teardown,
    /// Its output passed the output cap and the contract asks for a kill
    /// (`environment.limits.output_overflow = "kill"`).
    OutputLimit,
}

/// What a probe inside the sealed boundary saw: `observed.json`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedBoundary {
    /// Observed facts, by name (uid map, capabilities, mounts, interfaces, ...).
    pub facts: std::collections::BTreeMap<String, serde_json::Value>,
    /// Where the observation differs from the contract, one sentence each.
    pub mismatches: Vec<String>,
    /// The preview endpoints of `process.ports`, as bound (read back).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub previews: Vec<PreviewEndpoint>,
}

/// A port of the workspace published on the host: connections to `host` are
/// forwarded to `port` inside the workspace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreviewEndpoint {
    /// The port inside the workspace.
    pub port: u16,
    /// The host address that forwards to it (on the host's loopback).
    pub host: std::net::SocketAddr,
}

/// What survived a teardown: empty when the run left nothing behind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeakReport {
    /// Process ids still alive.
    pub processes: Vec<u32>,
    /// Mount points still mounted.
    pub mounts: Vec<PathBuf>,
    /// Control groups still present.
    pub cgroups: Vec<PathBuf>,
    /// Processes still running when the teardown began (what commands left in
    /// the background, the sandbox itself aside), which it killed: not a leak,
    /// a record of what ended with the workspace.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub stopped: u32,
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

impl LeakReport {
    /// Whether nothing leaked.
    pub fn is_clean(&self) -> bool {
        self.processes.is_empty() && self.mounts.is_empty() && self.cgroups.is_empty()
    }
}

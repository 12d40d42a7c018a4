//! The Process boundary trait: seal a run, execute commands in it, tear it down.

use std::fmt::Debug;
use std::path::PathBuf;
use std::pin::Pin;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite};

use super::{
    BoundaryError, EnvironmentPlan, FilesystemRecord, IdentityPlan, ProcessCapabilities,
    RunContext, SourceRecord,
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

    /// Takes over the live sandbox of a run sealed and [detached](Self::detach)
    /// earlier (by this process or another), for `plan` (the run's plans, prepared
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

/// What a teardown could not remove, as an error.
#[derive(Debug, thiserror::Error)]
#[error("still present after teardown: {0:?}")]
pub struct LeftBehind(pub LeakReport);

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
}

/// A command to run in the sealed workspace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandSpec {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Working directory relative to the workspace root (`"."` for the root).
    pub cwd: String,
    /// Wall-clock cap in milliseconds; the tree is killed after it.
    pub timeout_ms: Option<u64>,
    /// Whether to give the command a pseudo-terminal.
    pub tty: bool,
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
}

/// How a command ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitRecord {
    /// The exit status.
    pub status: crate::evidence::ExitStatusRecord,
    /// Why it was killed, if it was.
    pub killed: Option<KillCause>,
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
}

/// What a probe inside the sealed boundary saw: `observed.json`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedBoundary {
    /// Observed facts, by name (uid map, capabilities, mounts, interfaces, ...).
    pub facts: std::collections::BTreeMap<String, serde_json::Value>,
    /// Where the observation differs from the contract, one sentence each.
    pub mismatches: Vec<String>,
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
}

impl LeakReport {
    /// Whether nothing leaked.
    pub fn is_clean(&self) -> bool {
        self.processes.is_empty() && self.mounts.is_empty() && self.cgroups.is_empty()
    }
}

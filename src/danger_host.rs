//! A reference stack with **no isolation at all**: commands run on the host as
//! the runner's own user, in the runner's environment, in the checkout. It
//! claims what the namespace backend claims and keeps none of it.
//!
//! It exists to validate the conformance kit: a kit that passes this stack
//! tests nothing. `agent-workspace conformance --backend danger-host` must come
//! out failing `path-scope`, `credential`, `concurrency` and every escape case.
//! Never run an agent on it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use backend_namespace::environment::NamespaceEnvironment;
use backend_namespace::identity::NamespaceIdentity;
use backend_worktree::filesystem::WorktreeFilesystem;
use backend_worktree::promotion::WorktreePromotion;
use backend_worktree::source::WorktreeSource;
use workspace_core::RunId;
use workspace_core::boundary::{
    BoundaryError, BoundaryKind, CommandSpec, Execution, ExitRecord, InputStream, KillCause,
    LeakReport, ObservedBoundary, OutputStream, ProcessBoundary, ProcessCapabilities, RunContext,
    SealPlan, Stack,
};
use workspace_core::contract::IsolationLevel;
use workspace_core::evidence::ExitStatusRecord;

/// The reference stack with no isolation (see the module docs): standalone
/// checkouts, the worktree promotion, and [`DangerNoIsolationProcess`].
pub fn danger_no_isolation_stack() -> Stack {
    Stack {
        source: Arc::new(WorktreeSource::new()),
        filesystem: Arc::new(WorktreeFilesystem::new()),
        process: Arc::new(DangerNoIsolationProcess::default()),
        environment: Arc::new(NamespaceEnvironment::from_host()),
        identity: Arc::new(NamespaceIdentity::new()),
        promotion: Arc::new(WorktreePromotion::new()),
    }
}

/// A process boundary that runs every command straight on the host, in the
/// run's checkout, as the runner's user with the runner's environment (plus
/// the plan's variables). It declares task isolation and keeps none.
#[derive(Debug, Default)]
pub struct DangerNoIsolationProcess {
    /// Each sealed run's checkout.
    checkouts: Mutex<HashMap<RunId, PathBuf>>,
    /// Each sealed run's variables.
    vars: Mutex<HashMap<RunId, Vec<(String, String)>>>,
}

fn error(
    operation: &'static str,
    e: impl std::error::Error + Send + Sync + 'static,
) -> BoundaryError {
    BoundaryError::new(BoundaryKind::Process, operation, e)
}

#[async_trait]
impl ProcessBoundary for DangerNoIsolationProcess {
    fn capabilities(&self) -> ProcessCapabilities {
        ProcessCapabilities {
            isolation: vec![IsolationLevel::Task],
            private_network: false,
            service_templates: false,
            holds_capacity: false,
            output_files: false,
            // Its ports are the host's own.
            preview_ports: false,
            images: false,
            disk_caps: false,
        }
    }

    fn name(&self) -> &'static str {
        "danger: no isolation (a reference for the conformance kit)"
    }

    async fn seal(
        &self,
        run: &RunContext,
        plan: &SealPlan,
    ) -> Result<ObservedBoundary, BoundaryError> {
        self.checkouts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(run.run_id.clone(), plan.source.workspace.clone());
        let vars = plan
            .environment
            .vars
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        self.vars
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(run.run_id.clone(), vars);
        let mut observed = ObservedBoundary::default();
        observed
            .facts
            .insert("isolation".into(), serde_json::json!("none"));
        Ok(observed)
    }

    async fn spawn(
        &self,
        run: &RunContext,
        command: &CommandSpec,
    ) -> Result<Box<dyn Execution>, BoundaryError> {
        let checkout = self
            .checkouts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&run.run_id)
            .cloned()
            .ok_or_else(|| error("spawn", std::io::Error::other("the run is not sealed")))?;
        let mut vars: Vec<(String, String)> = self
            .vars
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&run.run_id)
            .cloned()
            .unwrap_or_default();
        command
            .apply_env(&mut vars)
            .map_err(|e| error("spawn", std::io::Error::other(e)))?;
        let (program, args) = command
            .argv
            .split_first()
            .ok_or_else(|| error("spawn", std::io::Error::other("an empty command")))?;
        let child = tokio::process::Command::new(program)
            .args(args)
            .current_dir(checkout.join(&command.cwd))
            .envs(vars)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| error("spawn", e))?;
        Ok(Box::new(HostExecution {
            child,
            killed: None,
        }))
    }

    async fn teardown(&self, run: &RunContext) -> Result<LeakReport, BoundaryError> {
        self.checkouts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&run.run_id);
        self.vars
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&run.run_id);
        // What the commands left running is not known, hence not reported.
        Ok(LeakReport::default())
    }
}

/// A command of [`DangerNoIsolationProcess`]: a plain host child.
#[derive(Debug)]
struct HostExecution {
    child: tokio::process::Child,
    killed: Option<KillCause>,
}

#[async_trait]
impl Execution for HostExecution {
    fn take_stdin(&mut self) -> Option<InputStream> {
        self.child.stdin.take().map(|s| Box::pin(s) as InputStream)
    }

    fn take_stdout(&mut self) -> Option<OutputStream> {
        self.child
            .stdout
            .take()
            .map(|s| Box::pin(s) as OutputStream)
    }

    fn take_stderr(&mut self) -> Option<OutputStream> {
        self.child
            .stderr
            .take()
            .map(|s| Box::pin(s) as OutputStream)
    }

    async fn wait(&mut self) -> Result<ExitRecord, BoundaryError> {
        use std::os::unix::process::ExitStatusExt;
        let status = self.child.wait().await.map_err(|e| error("wait", e))?;
        let status = match (status.code(), status.signal()) {
            (Some(code), _) => ExitStatusRecord::Code(code),
            (None, Some(signal)) => ExitStatusRecord::Signal(signal),
            (None, None) => ExitStatusRecord::Unknown,
        };
        Ok(ExitRecord {
            killed: self.killed.clone(),
            ..ExitRecord::ended(status)
        })
    }

    async fn kill(&mut self, cause: KillCause) -> Result<(), BoundaryError> {
        self.killed = Some(cause);
        self.child.start_kill().map_err(|e| error("kill", e))
    }
}

//! The crash-recovery protocol between a test (the parent) and the runner it
//! kills (the child, the same test binary started again in child mode): the
//! states a run can be lost in, the environment that names one, and the parent's
//! side (start the child, wait until it holds the run, kill it).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use workspace_core::RunId;
use workspace_core::capacity::Capacity;
use workspace_core::lifecycle::StateName;
use workspace_core::runner::{CreateOptions, Runner, RunnerConfig};

use super::Fixture;
use super::gates::Hold;

/// The state the child stops in (its presence selects child mode).
pub const ENV_STATE: &str = "AW_RECOVERY_STATE";
/// The fixture directory (holds `repo`, `runtime`, `evidence`).
pub const ENV_BASE: &str = "AW_RECOVERY_BASE";
/// The parent's cgroup parent name.
pub const ENV_CGROUP: &str = "AW_RECOVERY_CGROUP";
/// The run id.
pub const ENV_RUN_ID: &str = "AW_RECOVERY_RUN_ID";
/// A marker for the commands the child starts.
pub const ENV_MARKER: &str = "AW_RECOVERY_MARKER";
/// The file the child creates once it holds the run in the wanted state.
pub const READY_FILE: &str = "child-ready";
/// Where the child's output goes.
pub const CHILD_LOG: &str = "child.log";

/// Where the runner is when it is killed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Journal created, nothing admitted (driven through `Lifecycle` directly).
    Requested,
    /// Queued for capacity another reservation holds.
    Waiting,
    /// Inside `SourceBoundary::provision`, before the checkout exists.
    Provisioning,
    /// `SourceBoundary::provision` returned (the checkout exists), before
    /// `source.json` was written.
    ProvisionedNotRecorded,
    /// Inside `ProcessBoundary::seal`, after the real seal applied the boundary.
    StartingServices,
    /// `create` returned; nothing running.
    Sealed,
    /// A command (`sleep 1000`) is running.
    Running,
    /// `finish` drained the run; `ProcessBoundary::teardown` never returns.
    Draining,
    /// Inside `PromotionBoundary::export`.
    Exporting,
    /// Evidence sealed, cleanup not started (driven through `Lifecycle` directly).
    Exported,
    /// Inside `SourceBoundary::release`, after the evidence was sealed.
    CleaningUp,
    /// Cancelled; `ProcessBoundary::teardown` of the failed run never returns.
    Failed,
    /// Parked by `Workspace::suspend` after one command: not lost, only idle.
    Suspended,
}

impl Target {
    /// Every target, in lifecycle order.
    pub const ALL: [Target; 13] = [
        Self::Requested,
        Self::Waiting,
        Self::Provisioning,
        Self::ProvisionedNotRecorded,
        Self::StartingServices,
        Self::Sealed,
        Self::Running,
        Self::Draining,
        Self::Exporting,
        Self::Exported,
        Self::CleaningUp,
        Self::Failed,
        Self::Suspended,
    ];

    /// The target's name in the child's environment.
    pub fn slug(self) -> String {
        format!("{self:?}").to_lowercase()
    }

    /// The target named `slug`.
    pub fn from_slug(slug: &str) -> Self {
        Self::ALL
            .into_iter()
            .find(|t| t.slug() == slug)
            .unwrap_or_else(|| panic!("unknown target state {slug}"))
    }

    /// Where the child's gates hold the run (`None`: the child holds it itself).
    pub fn hold(self) -> Option<Hold> {
        match self {
            Self::Provisioning => Some(Hold::BeforeProvision),
            Self::ProvisionedNotRecorded => Some(Hold::AfterProvision),
            Self::StartingServices => Some(Hold::AfterSeal),
            Self::Draining | Self::Failed => Some(Hold::Teardown),
            Self::Exporting => Some(Hold::Export),
            Self::CleaningUp => Some(Hold::Release),
            Self::Requested
            | Self::Waiting
            | Self::Sealed
            | Self::Running
            | Self::Exported
            | Self::Suspended => None,
        }
    }

    /// The state recovery finds the journal in.
    pub fn journal_state(self) -> StateName {
        match self {
            Self::Requested => StateName::Requested,
            Self::Waiting => StateName::Waiting,
            Self::Provisioning | Self::ProvisionedNotRecorded => StateName::Provisioning,
            Self::StartingServices => StateName::StartingServices,
            Self::Sealed => StateName::Sealed,
            Self::Running => StateName::Sealed, // a command is a record, not a state
            Self::Draining => StateName::Draining,
            Self::Exporting => StateName::Exporting,
            Self::Exported => StateName::Exported,
            Self::CleaningUp => StateName::CleaningUp,
            Self::Failed => StateName::Failed,
            Self::Suspended => StateName::Suspended,
        }
    }

    /// Whether the run has cgroups when the runner dies (sealed, not torn down).
    pub fn holds_cgroups(self) -> bool {
        matches!(
            self,
            Self::StartingServices | Self::Sealed | Self::Running | Self::Draining | Self::Failed
        )
    }

    /// Whether the evidence was sealed before the runner died.
    pub fn sealed_before_crash(self) -> bool {
        matches!(self, Self::Exported | Self::CleaningUp)
    }
}

/// The child runner. Dropped while it still runs (a failed assertion), it is
/// SIGKILLed and its run recovered (a suspended run resumed and finished), so a
/// failing case leaves nothing behind.
pub struct ChildGuard {
    child: Option<Child>,
    config: RunnerConfig,
    cgroup_parent: String,
    run_id: RunId,
}

impl ChildGuard {
    /// The child process (until [`Self::kill_now`]).
    pub fn child(&mut self) -> &mut Child {
        self.child.as_mut().unwrap()
    }

    /// SIGKILLs the child and reaps it.
    pub fn kill_now(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            // Best effort, on a thread of its own: this may run inside the case's runtime.
            let config = self.config.clone();
            let parent = self.cgroup_parent.clone();
            let run_id = self.run_id.clone();
            let cleanup = std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .ok()?;
                let stack = agent_workspace::namespace_stack(&parent).ok()?;
                let runner = Runner::new(stack, config, Arc::new(Capacity::new(super::ample())));
                runtime.block_on(async {
                    let report = runner.recover().await.ok()?;
                    let finished = if report.suspended.contains(&run_id) {
                        let ws = runner.resume(&run_id, CreateOptions::default()).await;
                        Some(match ws {
                            Ok(ws) => ws.finish().await.map(|r| r.cleaned).map_err(drop),
                            Err(_) => Err(()),
                        })
                    } else {
                        None
                    };
                    Some((report, finished))
                })
            });
            match cleanup.join() {
                Ok(Some(report)) => eprintln!("cleanup after the failure: {report:?}"),
                _ => eprintln!("cleanup after the failure did not run"),
            }
        }
    }
}

/// Starts this test binary again as the child runner that holds run `run_id` of
/// `fx` in `target`.
pub fn spawn_child(fx: &Fixture, target: Target, run_id: &RunId, mark: &str) -> ChildGuard {
    let log = std::fs::File::create(fx.base.path().join(CHILD_LOG)).unwrap();
    let child = Command::new(std::env::current_exe().unwrap())
        .env(ENV_STATE, target.slug())
        .env(ENV_BASE, fx.base.path())
        .env(ENV_CGROUP, &fx.cgroup_parent)
        .env(ENV_RUN_ID, run_id.as_str())
        .env(ENV_MARKER, mark)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    ChildGuard {
        child: Some(child),
        config: fx.config(),
        cgroup_parent: fx.cgroup_parent.clone(),
        run_id: run_id.clone(),
    }
}

/// Waits for the child's ready file; fails with the child's output if it exits
/// first or takes too long.
pub fn wait_ready(child: &mut Child, base: &Path) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let ready = base.join(READY_FILE);
    loop {
        if ready.exists() {
            return;
        }
        let log = || std::fs::read_to_string(base.join(CHILD_LOG)).unwrap_or_default();
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "the child runner exited ({status}) before it was ready:\n{}",
                log()
            );
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the child runner was not ready in time:\n{}", log());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

//! The child side of the crash-recovery tests: the runner that gets killed. It
//! drives a real run over the default stack, wrapped in [gates](super::gates) that
//! hold it in the wanted [state](Target), writes the ready file and waits for the
//! parent's SIGKILL.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use workspace_core::RunId;
use workspace_core::boundary::{CommandSpec, LeakReport, RunContext, Stack};
use workspace_core::capacity::{Capacity, Resources};
use workspace_core::clock::unix_ms_now;
use workspace_core::contract::{Contract, SourceSection, TaskShape};
use workspace_core::evidence::{EvidenceFile, EvidenceWriter};
use workspace_core::lifecycle::{Lifecycle, Origin, StateName, Timeouts};
use workspace_core::runner::{
    CommandIo, CreateOptions, FILESYSTEM_STATE_FILE, Outcome, RunPaths, Runner, RunnerConfig,
    Workspace,
};

use super::crash::{ENV_BASE, ENV_CGROUP, ENV_MARKER, ENV_RUN_ID, ENV_STATE, READY_FILE, Target};
use super::gates::{Gate, gated, signal_ready};
use super::{shell, wait_for_process};

/// In child mode (`AW_RECOVERY_STATE` set) runs the child runner and never
/// returns: the parent kills it, or it exits non-zero when it cannot get there.
/// Outside child mode returns at once.
pub fn run_if_child() {
    let Ok(state) = std::env::var(ENV_STATE) else {
        return;
    };
    let child = ChildRun::from_env(Target::from_slug(&state));
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(child.run());
    eprintln!("the child runner stopped holding its run");
    std::process::exit(3);
}

/// What the child knows from its environment.
#[derive(Debug)]
struct ChildRun {
    target: Target,
    base: PathBuf,
    cgroup_parent: String,
    run_id: RunId,
    marker: String,
}

impl ChildRun {
    fn from_env(target: Target) -> Self {
        let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} unset"));
        Self {
            target,
            base: PathBuf::from(var(ENV_BASE)),
            cgroup_parent: var(ENV_CGROUP),
            run_id: RunId::new(var(ENV_RUN_ID)).unwrap(),
            marker: var(ENV_MARKER),
        }
    }

    fn config(&self) -> RunnerConfig {
        RunnerConfig::new(self.base.join("runtime"), self.base.join("evidence"))
    }

    fn contract(&self) -> Contract {
        Contract::preset(
            TaskShape::NarrowFix,
            "crash recovery test",
            SourceSection::new(self.base.join("repo").to_string_lossy(), "HEAD"),
        )
    }

    fn options(&self) -> CreateOptions {
        CreateOptions {
            run_id: Some(self.run_id.clone()),
            ..CreateOptions::default()
        }
    }

    fn plain_stack(&self) -> Stack {
        agent_workspace::namespace_stack(&self.cgroup_parent).unwrap()
    }

    /// The default stack with gates that hold the run in the target state.
    fn gated_stack(&self) -> Stack {
        let gate = Gate {
            at: self.target.hold(),
            ready: self.base.join(READY_FILE),
        };
        gated(self.plain_stack(), Arc::new(gate))
    }

    fn ready(&self) {
        signal_ready(&self.base.join(READY_FILE));
    }

    /// A command that changes the checkout, so the export has something to show.
    fn change(&self) -> CommandSpec {
        shell(
            "echo changed-by-the-run > change.txt; echo started",
            &self.marker,
        )
    }

    /// The run, created by `runner` and sealed.
    async fn create(&self, runner: &Runner) -> Workspace {
        runner
            .create(self.contract(), self.options())
            .await
            .unwrap()
    }

    /// The run, created by `runner`, after [`Self::change`] ran in it.
    async fn changed(&self, runner: &Runner) -> Workspace {
        let ws = self.create(runner).await;
        ws.exec(&self.change(), CommandIo::captured())
            .await
            .unwrap();
        ws
    }

    async fn run(self) {
        let runner = Runner::new(
            self.gated_stack(),
            self.config(),
            Arc::new(Capacity::new(super::ample())),
        );
        match self.target {
            Target::Requested => self.requested().await,
            Target::Waiting => self.waiting().await,
            Target::Exported => self.exported().await,
            Target::Provisioning | Target::ProvisionedNotRecorded | Target::StartingServices => {
                // The gate signals and holds; create never returns.
                let _ = runner.create(self.contract(), self.options()).await;
            }
            Target::Sealed => {
                let ws = self.create(&runner).await;
                self.ready();
                std::future::pending::<()>().await;
                drop(ws);
            }
            Target::Running => {
                let ws = self.create(&runner).await;
                let marker = self.marker.clone();
                let ready = self.base.join(READY_FILE);
                std::thread::spawn(move || {
                    if wait_for_process(&marker, Duration::from_secs(60)) {
                        signal_ready(&ready);
                    }
                });
                let _ = ws
                    .exec(
                        &shell("echo running; sleep 1000; true", &self.marker),
                        CommandIo::captured(),
                    )
                    .await;
            }
            Target::Draining | Target::Exporting | Target::CleaningUp => {
                let ws = self.changed(&runner).await;
                let _ = ws.finish().await; // held in teardown, export or release
            }
            Target::Failed => {
                let ws = self.changed(&runner).await;
                let _ = ws.cancel().await; // held in teardown
            }
            Target::Suspended => {
                let ws = self.changed(&runner).await;
                let parked = ws.suspend().await.unwrap();
                assert_eq!(parked.run_id, self.run_id);
                self.ready();
            }
        }
        std::future::pending::<()>().await;
    }

    /// Evidence begun and the journal created, as `Runner::create` does first.
    async fn requested(&self) {
        let config = self.config();
        let paths = RunPaths::new(&config.runtime_dir, &config.evidence_root, &self.run_id);
        let evidence = EvidenceWriter::create(&config.evidence_root, &self.run_id).unwrap();
        evidence
            .write_json(EvidenceFile::Contract, &self.contract())
            .unwrap();
        std::fs::create_dir_all(paths.journal.parent().unwrap()).unwrap();
        let _life =
            Lifecycle::create(&paths.journal, self.run_id.clone(), Timeouts::default()).unwrap();
        self.ready();
        std::future::pending::<()>().await;
    }

    /// The only slot is taken: the run queues for capacity.
    async fn waiting(&self) {
        let capacity = Arc::new(Capacity::new(Resources {
            slots: 1,
            ..super::ample()
        }));
        let _blocker = capacity
            .try_reserve(
                "the run before",
                Resources {
                    slots: 1,
                    ..Resources::ZERO
                },
            )
            .unwrap();
        let runner = Runner::new(self.gated_stack(), self.config(), capacity.clone());
        let contract = self.contract();
        let options = self.options();
        let _create = tokio::spawn(async move { runner.create(contract, options).await });
        let deadline = Instant::now() + Duration::from_secs(60);
        while capacity.snapshot().waiters.is_empty() {
            assert!(Instant::now() < deadline, "the run never queued");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.ready();
        std::future::pending::<()>().await;
    }

    /// A run whose evidence was exported and sealed, with its checkout still on
    /// disk: the lifecycle is driven directly, with the real source, filesystem
    /// and promotion boundaries, in the order the runner uses.
    async fn exported(&self) {
        let config = self.config();
        let stack = self.plain_stack();
        let paths = RunPaths::new(&config.runtime_dir, &config.evidence_root, &self.run_id);
        let contract = self.contract();
        let evidence = EvidenceWriter::create(&config.evidence_root, &self.run_id).unwrap();
        evidence
            .write_json(EvidenceFile::Contract, &contract)
            .unwrap();
        std::fs::create_dir_all(paths.journal.parent().unwrap()).unwrap();
        let mut life =
            Lifecycle::create(&paths.journal, self.run_id.clone(), Timeouts::default()).unwrap();
        let started_unix_ms = unix_ms_now();
        life.admit().unwrap();
        life.provision(Origin::Fresh).unwrap();
        std::fs::create_dir_all(&paths.run_dir).unwrap();
        let run = RunContext {
            run_id: self.run_id.clone(),
            contract: Arc::new(contract),
            run_dir: paths.run_dir.clone(),
            runtime_dir: config.runtime_dir.clone(),
        };
        let source = stack.source.provision(&run).await.unwrap();
        evidence.write_json(EvidenceFile::Source, &source).unwrap();
        let filesystem = stack.filesystem.prepare(&run, &source).await.unwrap();
        std::fs::write(
            paths.run_dir.join(FILESYSTEM_STATE_FILE),
            serde_json::to_vec_pretty(&filesystem).unwrap(),
        )
        .unwrap();
        std::fs::write(source.workspace.join("made-by-the-run.txt"), "change\n").unwrap();
        life.start_services().unwrap();
        life.seal().unwrap();
        life.drain().unwrap();
        life.export().unwrap();
        let patch = stack.promotion.export(&run, &source).await.unwrap();
        evidence
            .write_bytes(EvidenceFile::Diff, &patch.patch)
            .unwrap();
        evidence
            .write_json(EvidenceFile::Changes, &patch.changes)
            .unwrap();
        evidence
            .write_json(EvidenceFile::Checks, &Vec::<()>::new())
            .unwrap();
        evidence
            .write_json(EvidenceFile::Approvals, &Vec::<()>::new())
            .unwrap();
        evidence
            .copy_file(EvidenceFile::Journal, &paths.journal)
            .unwrap();
        let outcome = Outcome {
            run_id: self.run_id.clone(),
            ended_in: StateName::Exported,
            failure: None,
            commands: Vec::new(),
            late_output: Vec::new(),
            stopped: 0,
            leaks: Some(LeakReport::default()),
            usage: Default::default(),
            disk: None,
            patch_sha256: Some(patch.patch_sha256.clone()),
            changed_paths: patch.changes.len(),
            changed_after_checks: Vec::new(),
            not_in_patch: Vec::new(),
            export_failed: None,
            credential_leaks: Vec::new(),
            leases: Vec::new(),
            network: None,
            started_unix_ms,
            exported_unix_ms: unix_ms_now(),
            recovered_from: None,
            errors: Vec::new(),
        };
        evidence
            .write_json(EvidenceFile::Outcome, &outcome)
            .unwrap();
        evidence.seal().unwrap();
        life.finish_export().unwrap();
        self.ready();
        std::future::pending::<()>().await;
    }
}

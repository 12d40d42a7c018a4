//! `agent-workspace recover`: finish the runs whose runner died.

use std::path::PathBuf;
use std::process::ExitCode;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use clap::Args;
use workspace_core::RunId;
use workspace_core::lifecycle::CleanupPermit;
use workspace_core::recovery::{
    LostRun, RecoveryHooks, RecoveryReport, RecoveryStepError, recover_where,
};
use workspace_core::runner::{RunPaths, Runner, StackRecovery};
use workspace_core::step::describe;

use super::backend::Backend;
use super::host::HostArgs;
use super::session::{block_on, runner_on};
use super::text::one_line;

#[derive(Debug, Args)]
pub(crate) struct RecoverArgs {
    /// Where to look for the evidence of a run that recorded no location of its
    /// own (every run made by this version records it beside its journal)
    /// [default: `$XDG_STATE_HOME/agent-workspace/evidence`].
    #[arg(long, value_name = "DIR")]
    evidence: Option<PathBuf>,
    /// Print the recovery report as JSON on stdout.
    #[arg(long)]
    pub(crate) json: bool,
    /// Recover only the runs this backend sealed (the others are listed as
    /// left out) [default: every run, each with the backend that sealed it].
    #[arg(long, value_enum, value_name = "BACKEND")]
    backend: Option<Backend>,
}

/// Recovers every unfinished run under the runtime directory that no live runner
/// holds: kills what it left running, exports its evidence (cause `runner-lost`)
/// and cleans it up, each with the stack of the backend that sealed it (the
/// container backend's for a run whose container bundle is there, else the
/// namespace backend's) and `--cgroup-parent` (give the one the runs were made
/// with).
///
/// Exit 0 when every lost run was cleaned up (runs a live runner holds are left
/// alone and do not count); 1 when a run is left for the next recovery, a
/// journal could not be used, or the journal directory could not be listed;
/// 125 when the backend could not be set up.
pub(crate) fn run(args: &RecoverArgs, host: &HostArgs) -> ExitCode {
    let runner = match runner_on(host, args.evidence.clone(), Backend::Namespace, None) {
        Ok(runner) => runner,
        Err(code) => return code,
    };
    let (json, backend) = (args.json, args.backend);
    let evidence = args.evidence.clone();
    // Each container run with the runtime it recorded (the first on `PATH` for
    // one that recorded none); without that runtime here, the run is left to
    // the namespace stack's recovery, which reports what it cannot end.
    let containers = move |runtime: Option<&str>| {
        runner_on(host, evidence.clone(), Backend::Container, runtime)
            .ok()
            .map(|runner| StackRecovery::new(runner.stack().clone(), runner.config().clone()))
    };
    block_on(async move {
        let hooks = ByBackend::new(&runner, containers);
        let config = runner.config();
        let runtime_dir = config.runtime_dir.clone();
        let wanted = |run_id: &RunId| {
            backend.is_none_or(|backend| {
                let run_dir = RunPaths::new(&runtime_dir, &runtime_dir, run_id).run_dir;
                Backend::that_sealed(&run_dir) == backend
            })
        };
        match recover_where(&config.runtime_dir, &hooks, config.timeouts, &wanted).await {
            Ok(report) => print_report(&report, json),
            Err(err) => super::json::Failure::new(
                super::json::ErrorKind::Io,
                1,
                format!(
                    "recovery could not start: {}",
                    one_line(&workspace_core::error_chain(&err))
                ),
            )
            .path(config.runtime_dir.clone())
            .report(),
        }
    })
}

/// Recovery with the stack of the backend that sealed each run, chosen when
/// the run is first met (its reaping removes what showed it); a container run
/// with a stack of the runtime it recorded, made once per runtime.
struct ByBackend<F> {
    namespace: Arc<StackRecovery>,
    containers: F,
    by_runtime: Mutex<HashMap<Option<PathBuf>, Option<Arc<StackRecovery>>>>,
    runtime_dir: PathBuf,
    chosen: Mutex<HashMap<RunId, Arc<StackRecovery>>>,
}

impl<F: Fn(Option<&str>) -> Option<StackRecovery>> ByBackend<F> {
    fn new(namespace: &Runner, containers: F) -> Self {
        Self {
            namespace: Arc::new(StackRecovery::new(
                namespace.stack().clone(),
                namespace.config().clone(),
            )),
            containers,
            by_runtime: Mutex::new(HashMap::new()),
            runtime_dir: namespace.config().runtime_dir.clone(),
            chosen: Mutex::new(HashMap::new()),
        }
    }

    fn hooks(&self, run: &LostRun) -> Arc<StackRecovery> {
        let mut chosen = self
            .chosen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let hooks = chosen.entry(run.run_id.clone()).or_insert_with(|| {
            let run_dir = RunPaths::new(&self.runtime_dir, &self.runtime_dir, &run.run_id).run_dir;
            if !backend_container::process::sealed_in(&run_dir) {
                return Arc::clone(&self.namespace);
            }
            let runtime = backend_container::process::sealed_runtime(&run_dir);
            let mut by_runtime = self
                .by_runtime
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let made = by_runtime.entry(runtime.clone()).or_insert_with(|| {
                let name = runtime.as_deref().and_then(|p| p.to_str());
                (self.containers)(name).map(Arc::new)
            });
            made.clone().unwrap_or_else(|| Arc::clone(&self.namespace))
        });
        Arc::clone(hooks)
    }
}

#[async_trait]
impl<F: Fn(Option<&str>) -> Option<StackRecovery> + Send + Sync> RecoveryHooks for ByBackend<F> {
    async fn reap(&self, run: &LostRun) -> Result<(), RecoveryStepError> {
        self.hooks(run).reap(run).await
    }

    async fn export(&self, run: &LostRun) -> Result<(), RecoveryStepError> {
        self.hooks(run).export(run).await
    }

    async fn clean_up(
        &self,
        run: &LostRun,
        permit: &CleanupPermit,
    ) -> Result<(), RecoveryStepError> {
        self.hooks(run).clean_up(run, permit).await
    }
}

/// Prints the report (lines, or JSON) and returns the exit status.
fn print_report(report: &RecoveryReport, json: bool) -> ExitCode {
    if json {
        super::json::print(report);
    } else {
        for line in lines(report) {
            println!("{line}");
        }
    }
    let all_cleaned =
        report.recovered.iter().all(|run| run.cleaned) && report.unreadable.is_empty();
    if all_cleaned {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// One line per run the report mentions.
fn lines(report: &RecoveryReport) -> Vec<String> {
    let mut lines = Vec::new();
    for run in &report.recovered {
        let id = &run.run.run_id;
        let found = run.run.found_in.name();
        let exported = match (run.exported_now, run.errors.is_empty()) {
            (true, _) => "evidence exported",
            (false, true) => "evidence already exported",
            (false, false) => "no new export",
        };
        let mut line = if run.cleaned {
            format!("{id}: recovered (found in {found}): {exported}, cleaned up")
        } else {
            format!("{id}: NOT cleaned up (found in {found}); left for the next recovery")
        };
        if !run.errors.is_empty() {
            line.push_str(": ");
            line.push_str(&one_line(&describe(&run.errors)));
        }
        lines.push(line);
    }
    for id in &report.live {
        lines.push(format!("{id}: live (a runner holds it); left alone"));
    }
    for id in &report.detached {
        lines.push(format!(
            "{id}: detached (its workspace waits for exec or destroy); left alone"
        ));
    }
    for id in &report.suspended {
        lines.push(format!(
            "{id}: suspended (its workspace waits for resume or destroy); left alone"
        ));
    }
    // Runs that were already cleaned up are counted, not listed one by one.
    let acted = report.recovered.len();
    lines.push(format!(
        "{acted} run(s) recovered, {} live left alone, {} already cleaned up",
        report.live.len(),
        report.finished.len()
    ));
    if !report.left_out.is_empty() {
        lines.push(format!(
            "{} run(s) of another backend left out",
            report.left_out.len()
        ));
    }
    for (path, reason) in &report.unreadable {
        lines.push(format!(
            "{}: unreadable journal: {}",
            path.display(),
            one_line(reason)
        ));
    }
    lines
}

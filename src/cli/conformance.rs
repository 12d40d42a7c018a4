//! `agent-workspace conformance`: the conformance kit on a backend.

use std::process::ExitCode;

use clap::{Args, ValueEnum};
use workspace_core::conformance::{CaseResult, Kit, Verdict};

use super::host::HostArgs;
use super::session::block_on;
use super::text::one_line;

/// The stacks the kit can be run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum KitBackend {
    /// The embedded default: Linux namespaces, cgroups and seccomp.
    Namespace,
    /// One OCI container per workspace, through `--runtime` (else the first
    /// runtime on `PATH`).
    Container,
    /// No isolation at all, a reference the kit must fail (never run agents on
    /// it); also `host`.
    #[value(alias = "host")]
    DangerHost,
}

#[derive(Debug, Args)]
pub(crate) struct ConformanceArgs {
    /// The backend to test.
    #[arg(long, value_enum, default_value_t = KitBackend::Namespace)]
    backend: KitBackend,
    /// The OCI runtime of `--backend container`: a name on `PATH` or a path.
    #[arg(long, value_name = "NAME|PATH")]
    runtime: Option<String>,
    /// Print the results as JSON on stdout.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Runs every case of the kit, each on a fresh fixture of its own (under the
/// system's temporary directory, in cgroups of its own), prints one line per
/// case (or JSON), and exits 0 only when none failed.
pub(crate) fn run(args: &ConformanceArgs, host: &HostArgs) -> ExitCode {
    if args.runtime.is_some() && args.backend != KitBackend::Container {
        return super::session::bad_input(
            super::BadInput::new(format!(
                "--runtime names the OCI runtime of --backend container; the {} stack has none",
                if args.backend == KitBackend::Namespace {
                    "namespace"
                } else {
                    "danger-host"
                }
            ))
            .with(|f| f.flag("--runtime")),
        );
    }
    let parent = format!(
        "{}-conformance-{}",
        host.cgroup_parent(),
        std::process::id()
    );
    let kit = match args.backend {
        KitBackend::Namespace => {
            let parent = parent.clone();
            Kit::new(move |scratch| {
                agent_workspace::namespace_stack_layered(&parent, scratch.join("trees"), 1 << 30)
                    .map_err(|e| workspace_core::error_chain(&e))
            })
        }
        KitBackend::Container => {
            let (parent, runtime) = (parent.clone(), args.runtime.clone());
            Kit::new(move |scratch| {
                agent_workspace::container_stack(
                    &parent,
                    runtime.as_deref(),
                    &scratch.join("containers"),
                )
                .map_err(|e| workspace_core::error_chain(&e))
            })
        }
        KitBackend::DangerHost => Kit::new(|_| Ok(agent_workspace::danger_no_isolation_stack())),
    };
    let json = args.json;
    let backend = args.backend;
    let code = block_on(async move { report(&kit.run_all().await, json, backend) });
    if args.backend != KitBackend::DangerHost {
        remove_cgroup_parent(&parent);
    }
    code
}

/// Prints `results` (one line per case on stdout, a summary naming the
/// backend on stderr) and returns the exit status: 1 when a case failed.
fn report(results: &[CaseResult], json: bool, backend: KitBackend) -> ExitCode {
    if json {
        super::json::print(&results);
    } else {
        for result in results {
            match &result.verdict {
                Verdict::Passed => println!("{}: passed", result.name),
                Verdict::Unsupported { reason } => {
                    println!("{}: unsupported ({reason})", result.name);
                }
                // What the case observed in the workspace.
                Verdict::Failed { observed } => {
                    println!("{}: failed: {}", result.name, one_line(observed));
                }
            }
        }
    }
    let count = |want: fn(&Verdict) -> bool| results.iter().filter(|r| want(&r.verdict)).count();
    let failed = count(|v| matches!(v, Verdict::Failed { .. }));
    let (name, note) = match backend {
        KitBackend::Namespace => ("the namespace backend", ""),
        KitBackend::Container => ("the container backend", ""),
        KitBackend::DangerHost => (
            "the reference stack without isolation",
            " (its failures are expected: they show the kit can fail)",
        ),
    };
    eprintln!(
        "agent-workspace: conformance of {name}: {} passed, {failed} failed, {} unsupported{note}",
        count(|v| matches!(v, Verdict::Passed)),
        count(|v| matches!(v, Verdict::Unsupported { .. })),
    );
    if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Removes the kit's cgroup parent (its runs' cgroups are gone by now).
fn remove_cgroup_parent(parent: &str) {
    let removed = backend_namespace::cgroup::CgroupLayout::detect()
        .map_err(|e| e.to_string())
        .and_then(|layout| {
            backend_namespace::cgroup::remove_parent(&layout, parent).map_err(|e| e.to_string())
        });
    if let Err(e) = removed {
        eprintln!("agent-workspace: removing the kit's cgroups {parent}: {e}");
    }
}

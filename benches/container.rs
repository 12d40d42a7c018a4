//! The container backend beside raw runc, side by side in one run, on the
//! host's base system and a generated repository (200 files):
//!
//! * **exec**: `true` in a live container workspace (through the backend:
//!   its own cgroup, its status pipe, recorded in the evidence) against
//!   `runc exec ID /bin/true` into a running container, and against `true` in
//!   a live namespace workspace;
//! * **lifecycle**: a whole one-command workspace on the container backend
//!   (checkout, bundle, container start, probe, `true`, evidence, delete)
//!   against `runc run --detach` + `runc exec true` + `runc delete --force`
//!   of a bare container.
//!
//! Run with `cargo bench --bench container` as root. Needs runc (Debian
//! package runc). Prints the medians and ratios measured in this run, then
//! checks that nothing was left: no container in the backend's state
//! directory, no run directory, no cgroup.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark: failing loudly is right

mod bwrap;
mod runc;
mod support;
mod timings;

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_workspace::core::boundary::CommandSpec;
use agent_workspace::core::capacity::{Capacity, Resources};
use agent_workspace::core::contract::{Contract, SourceSection, TaskShape};
use agent_workspace::core::runner::{CommandIo, CreateOptions, RUNS_DIR, Runner, RunnerConfig};
use agent_workspace::namespace::cgroup::{CgroupLayout, remove_parent};
use agent_workspace::{container_stack, namespace_stack};
use bwrap::host_system;
use criterion::{Criterion, SamplingMode};
use runc::Container;
use timings::{SAMPLES, print_medians, record};

const EXEC_OURS: &str = "exec, container workspace";
const EXEC_RUNC: &str = "runc exec";
const EXEC_NAMESPACE: &str = "exec, namespace workspace";
const LIFE_OURS: &str = "workspace, one command";
const LIFE_RUNC: &str = "runc run + exec + delete";

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    let args: Vec<String> = std::env::args().collect();
    let full =
        args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test" || a == "--list");
    if args.iter().any(|a| a == "--list") {
        criterion.final_summary();
        return;
    }
    let root = tempfile::Builder::new()
        .prefix("aw-bench-container-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let repos = root.path().join("repos");
    std::fs::create_dir(&repos).unwrap();
    let repo = support::generate(&repos, 200, 20, 1_000);
    let cgroup_parent = format!("aw-bench-container-{}", std::process::id());
    let state = root.path().join("runc-state");
    let runtime = root.path().join("runtime");
    let capacity = || {
        Arc::new(Capacity::new(Resources {
            cpu_millis: 64_000,
            memory_bytes: 256 << 30,
            disk_bytes: 1 << 40,
            slots: 64,
        }))
    };
    let config = || RunnerConfig::new(&runtime, root.path().join("evidence"));
    let containers = Runner::new(
        container_stack(&cgroup_parent, Some("runc"), &state)
            .unwrap_or_else(|e| panic!("{e} (this bench needs runc: apt-get install runc)")),
        config(),
        capacity(),
    );
    let namespaces = Runner::new(
        namespace_stack(&cgroup_parent).unwrap(),
        config(),
        capacity(),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let contract = || {
        Contract::preset(
            TaskShape::NarrowFix,
            "container bench",
            SourceSection::new(repo.path.to_string_lossy(), "HEAD"),
        )
    };
    let truth = CommandSpec::new(vec!["/bin/true".into()]);
    let system = host_system();
    let mut live = rt
        .block_on(containers.create(contract(), CreateOptions::default()))
        .unwrap();
    let mut live_namespace = rt
        .block_on(namespaces.create(contract(), CreateOptions::default()))
        .unwrap();
    let container = Container::start(&system);
    {
        let mut group = criterion.benchmark_group("container");
        group
            .sample_size(SAMPLES)
            .sampling_mode(SamplingMode::Flat)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(if full { 4 } else { 1 }));
        let mut exec =
            |name: &'static str, workspace: &mut agent_workspace::core::runner::Workspace| {
                let batch_of =
                    |iters: u64, workspace: &mut agent_workspace::core::runner::Workspace| {
                        (0..iters)
                            .map(|_| {
                                let started = Instant::now();
                                let outcome = rt
                                    .block_on(workspace.exec(&truth, CommandIo::captured()))
                                    .unwrap();
                                let took = started.elapsed();
                                assert_eq!(outcome.shell_status(), 0);
                                took
                            })
                            .collect()
                    };
                group.bench_function(name, |b| {
                    b.iter_custom(|iters| record(name, batch_of(iters, workspace)))
                });
            };
        exec(EXEC_OURS, &mut live);
        exec(EXEC_NAMESPACE, &mut live_namespace);
        group.bench_function("exec_runc", |b| {
            b.iter_custom(|iters| {
                record(
                    EXEC_RUNC,
                    (0..iters).map(|_| container.exec_true()).collect(),
                )
            });
        });
        group.bench_function("lifecycle_ours", |b| {
            b.iter_custom(|iters| {
                let batch = (0..iters)
                    .map(|_| {
                        let started = Instant::now();
                        let report = rt
                            .block_on(containers.run(
                                contract(),
                                &truth,
                                CommandIo::captured(),
                                CreateOptions::default(),
                            ))
                            .unwrap();
                        let took = started.elapsed();
                        assert!(report.cleaned, "{:?}", report.cleanup_errors);
                        took
                    })
                    .collect();
                record(LIFE_OURS, batch)
            });
        });
        group.bench_function("lifecycle_runc", |b| {
            b.iter_custom(|iters| {
                record(
                    LIFE_RUNC,
                    (0..iters)
                        .map(|_| Container::lifecycle_true(&system))
                        .collect(),
                )
            });
        });
        group.finish();
    }
    criterion.final_summary();
    for workspace in [live, live_namespace] {
        let report = rt.block_on(workspace.finish()).unwrap();
        assert!(report.cleaned, "{:?}", report.cleanup_errors);
    }
    drop(container);

    println!();
    println!("== container: medians measured in this run (warm-up excluded) ==");
    let rows =
        [EXEC_OURS, EXEC_RUNC, EXEC_NAMESPACE, LIFE_OURS, LIFE_RUNC].map(|n| (n, n.to_owned()));
    let medians = print_medians(&rows, 28, |_| "not run");
    println!();
    println!("== ratios of medians ==");
    for (label, ours, theirs) in [
        ("exec / runc exec", EXEC_OURS, EXEC_RUNC),
        ("namespace exec / runc exec", EXEC_NAMESPACE, EXEC_RUNC),
        ("workspace / runc lifecycle", LIFE_OURS, LIFE_RUNC),
    ] {
        let (Some(a), Some(b)) = (medians.get(ours), medians.get(theirs)) else {
            println!("{label:<28} (not measured)");
            continue;
        };
        println!("{label:<28} {:>9.3}", a.as_secs_f64() / b.as_secs_f64());
    }
    let known = std::process::Command::new("runc")
        .arg("--root")
        .arg(&state)
        .args(["list", "-q"])
        .output()
        .unwrap();
    assert!(
        known.stdout.is_empty(),
        "containers left: {}",
        String::from_utf8_lossy(&known.stdout)
    );
    let runs = runtime.join(RUNS_DIR);
    let left: Vec<_> = std::fs::read_dir(&runs)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "runs left behind: {left:?}");
    let layout = CgroupLayout::detect().unwrap();
    remove_parent(&layout, &cgroup_parent).unwrap();
}
